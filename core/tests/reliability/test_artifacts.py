"""Damaged or hostile ``.byoc`` files and artifact files: each is a clear ArtifactError, nothing is
written outside byoc's cache dir, and no backend sees bytes whose sha256 does not match."""

from __future__ import annotations

import hashlib
import json
import os
import zipfile
from pathlib import Path

import byoc
import numpy as np
import pytest
from byoc.plugins import registry
from byoc.reader import Limits
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from .helpers import FALLBACK, available_backends, compile_on

X = np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)


@pytest.fixture(scope="module", params=[*available_backends(), FALLBACK])
def saved(request, tmp_path_factory):
    compiled = compile_on(request.param)
    path = tmp_path_factory.mktemp(request.param) / "m.byoc"
    compiled.save(path)
    return path, compiled.run({"x": X})["t"]


def first_member(path: Path) -> str:
    with zipfile.ZipFile(path) as zf:
        return json.loads(zf.read("manifest.json"))["units"][0]["member"]


def rezip(src: Path, dst: Path, change) -> None:
    """Copy a zip member by member; ``change(name, data)`` returns [(name, data)] to write."""
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w") as zout:
        for info in zin.infolist():
            for name, data in change(info.filename, zin.read(info)):
                zout.writestr(name, data, compress_type=zipfile.ZIP_DEFLATED)


def manifest_change(edit):
    def change(name, data):
        if name != "manifest.json":
            return [(name, data)]
        m = json.loads(data)
        edit(m)
        return [(name, json.dumps(m).encode())]

    return change


def test_a_saved_model_loads_and_runs_the_same(saved):
    path, want = saved
    np.testing.assert_array_equal(byoc.load(path).run({"x": X})["t"], want)


def test_truncated_files_are_artifact_errors(saved, tmp_path):
    path, _ = saved
    data = path.read_bytes()
    for cut in sorted({0, 3, 10, len(data) // 3, len(data) // 2, len(data) - 30, len(data) - 1}):
        bad = tmp_path / f"cut{cut}.byoc"
        bad.write_bytes(data[:cut])
        with pytest.raises(byoc.ArtifactError):
            byoc.load(bad)


@settings(max_examples=60, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(where=st.floats(0, 1, exclude_max=True), value=st.integers(0, 255))
def test_any_changed_byte_loads_the_same_or_is_an_artifact_error(saved, tmp_path, where, value):
    path, want = saved
    data = bytearray(path.read_bytes())
    i = int(where * len(data))
    data[i] = value
    bad = tmp_path / "flip.byoc"
    bad.write_bytes(bytes(data))
    try:
        again = byoc.load(bad)
    except byoc.ArtifactError:
        return
    # A byte the format does not cover (zip timestamps, padding) may change harmlessly.
    np.testing.assert_array_equal(again.run({"x": X})["t"], want)


@pytest.mark.parametrize("member", ["/etc/passwd", "../outside.bin", "a/../../b", "sub/x.bin"])
def test_members_with_paths_are_refused(saved, tmp_path, member):
    path, _ = saved
    bad = tmp_path / "paths.byoc"

    first = first_member(path)

    def change(name, data):
        return [(member if name == first else name, data)]

    rezip(path, bad, change)
    with pytest.raises(byoc.ArtifactError, match="not a plain file name"):
        byoc.load(bad)
    assert not (tmp_path.parent / "outside.bin").exists()


@pytest.mark.parametrize("target", ["../../etc/passwd", "/etc/passwd", "manifest.json"])
def test_a_manifest_pointing_outside_the_file_is_refused(saved, tmp_path, target):
    path, _ = saved
    bad = tmp_path / "outside.byoc"
    rezip(path, bad, manifest_change(lambda m: m["units"][0].update(member=target)))
    with pytest.raises(byoc.ArtifactError, match="not a plain file name"):
        byoc.load(bad)


def test_a_member_that_does_not_match_its_hash_never_reaches_the_backend(saved, tmp_path):
    path, _ = saved
    bad = tmp_path / "hash.byoc"
    first = first_member(path)

    def change(name, data):
        if name == first:
            data = bytearray(data)
            data[len(data) // 2] ^= 0xFF
        return [(name, bytes(data))]

    rezip(path, bad, change)
    calls = []

    class Spy:
        @byoc.hookimpl(tryfirst=True)
        def byoc_deserialize(self, backend, data):
            calls.append(backend)

    spy = Spy()
    registry().pm.register(spy)
    try:
        with pytest.raises(byoc.ArtifactError, match="does not match its sha256"):
            byoc.load(bad)
    finally:
        registry().pm.unregister(spy)
    assert calls == []  # nothing was deserialized (or dlopen'ed) before the hash check


def test_a_zip_bomb_is_refused_before_it_is_read(tmp_path):
    bad = tmp_path / "bomb.byoc"
    with zipfile.ZipFile(bad, "w") as zf:
        zf.writestr("manifest.json", b"{}")
        zf.writestr("big.bin", b"\0" * (64 << 20), compress_type=zipfile.ZIP_DEFLATED)
    with pytest.raises(byoc.ArtifactError, match="zip bomb"):
        byoc.load(bad)
    with pytest.raises(byoc.ArtifactError, match="more than the limit"):
        byoc.load(bad, limits=Limits(max_member=1 << 20))


def test_a_manifest_bomb_is_refused(tmp_path):
    bad = tmp_path / "nested.byoc"
    with zipfile.ZipFile(bad, "w") as zf:
        zf.writestr("manifest.json", "[" * 100_000 + "]" * 100_000)
    with pytest.raises(byoc.ArtifactError, match=r"not valid JSON|must be an object"):
        byoc.load(bad)


CONSTANT = {"name": "k", "dtype": "int64", "shape": [1], "member": "k.bin", "size": 8}
CONSTANT["sha256"] = "0" * 64


@pytest.mark.parametrize(
    ("edit", "words"),
    [
        (lambda m: m.update(format_version=99), "upgrade byoc"),
        (lambda m: m.update(units="x"), "'units' must be a list"),
        (lambda m: m["units"][0].update(size=-1), "non-negative int"),
        (lambda m: m["units"][0].update(sha256="0" * 64), "does not match its sha256"),
        (lambda m: m["units"][0].update(inputs=["nowhere"]), "reads 'nowhere'"),
        (lambda m: m["backends"][0].update(name="nosuch"), "which 'backends' does not list"),
        (lambda m: m.update(outputs=[]), "no outputs"),
        # a dtype that is a list or an object was a TypeError (unhashable), found by the fuzzer
        (lambda m: m["inputs"][0].update(dtype=["float32"]), "not an ONNX tensor dtype"),
        (lambda m: m["outputs"][0].update(dtype={}), "not an ONNX tensor dtype"),
        (lambda m: m["constants"].append({**CONSTANT, "dtype": ["int64"]}), "not a numeric dtype"),
        (lambda m: m["constants"].append({**CONSTANT, "dtype": "str"}), "not a numeric dtype"),
    ],
)
def test_an_edited_manifest_is_an_artifact_error(saved, tmp_path, edit, words):
    path, _ = saved
    bad = tmp_path / "edited.byoc"
    rezip(path, bad, manifest_change(edit))
    with pytest.raises(byoc.ArtifactError, match=words):
        byoc.load(bad)


def test_loading_writes_nothing_outside_the_cache_dir(saved, tmp_path, monkeypatch):
    path, _ = saved
    work = tmp_path / "work"
    work.mkdir()
    cache = tmp_path / "cache"
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    monkeypatch.chdir(work)
    before = sorted(path.parent.iterdir())
    byoc.load(path).run({"x": X})
    assert sorted(path.parent.iterdir()) == before
    assert list(work.iterdir()) == []
    outside = [p for p in tmp_path.rglob("*") if cache not in p.parents and p != cache]
    assert sorted(outside) == sorted([work, tmp_path / "tmp", *tmp_path.glob("tmp/*")])


# -- single artifact files (byoc.load_module) --------------------------------------------------


@settings(max_examples=60, deadline=None, derandomize=True)
@given(cut=st.floats(0, 1), flips=st.lists(st.tuples(st.floats(0, 1), st.integers(0, 255))))
def test_a_damaged_examplejson_file_is_an_artifact_error_or_loads(tmp_path_factory, cut, flips):
    compiled = compile_on("examplejson")
    text = bytearray(compiled.steps[0].artifact.source.encode())
    for where, value in flips:
        text[int(where * (len(text) - 1))] = value
    path = tmp_path_factory.mktemp("ej") / "p.examplejson"
    path.write_bytes(bytes(text[: max(1, int(cut * len(text)))]))
    try:
        module = byoc.load_module(path, "examplejson")
    except byoc.ArtifactError:
        return
    try:  # still a valid program: running it gives one array per output, or a byoc error
        outputs = module.run([X])
    except byoc.ByocError:
        return
    (function,) = module.functions.values()  # run refuses a module of several subgraphs
    assert len(outputs) == len(function.outputs)
    assert all(isinstance(o, np.ndarray) for o in outputs)


def test_load_module_of_a_missing_or_unreadable_file(tmp_path):
    with pytest.raises(byoc.ArtifactError, match="cannot read"):
        byoc.load_module(tmp_path / "nope.examplejson", "examplejson")
    with pytest.raises(byoc.ArtifactError, match="cannot read"):
        byoc.load_module(tmp_path, "examplejson")
    assert os.listdir(tmp_path) == []


@pytest.mark.skipif("ccompiler" not in available_backends(), reason="ccompiler not available")
def test_a_compiled_library_that_does_not_match_its_own_hash_is_refused(tmp_path):
    # The outer sha256 is rewritten to match, so only ccompiler's own check can catch it.
    path = tmp_path / "cc.byoc"
    compile_on("ccompiler").save(path)
    with zipfile.ZipFile(path) as zf:
        manifest = json.loads(zf.read("manifest.json"))
    unit = next(u for u in manifest["units"] if u["backend"] == "ccompiler")
    with zipfile.ZipFile(path) as zf:
        data = bytearray(zf.read(unit["member"]))
    data[-100] ^= 0xFF  # inside the compiled library, the last part of the artifact
    unit["sha256"] = hashlib.sha256(bytes(data)).hexdigest()
    bad = tmp_path / "lib.byoc"

    def change(name, old):
        if name == unit["member"]:
            return [(name, bytes(data))]
        return [(name, json.dumps(manifest).encode() if name == "manifest.json" else old)]

    rezip(path, bad, change)
    with pytest.raises(byoc.ArtifactError, match="library does not match its sha256"):
        byoc.load(bad)
