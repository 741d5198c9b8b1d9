"""Missing pieces: no C compiler, no oneDNN, an onnxruntime too old, a plugin that fails to
import. `byoc backends` shows each cause; everything else keeps working."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
import warnings

import byoc
import numpy as np
import pytest
from byoc import fallback, plugins
from byoc.cli import main

from .helpers import available_backends, mixed_model

X = np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)


def run_cli(args, tmp_path, env_extra=None, pythonpath=None):
    env = {k: v for k, v in os.environ.items() if k not in ("BYOC_PLUGINS", "CC")}
    env.update(env_extra or {})
    if pythonpath:
        env["PYTHONPATH"] = os.pathsep.join([str(pythonpath), env.get("PYTHONPATH", "")])
    return subprocess.run(
        [sys.executable, "-m", "byoc.cli", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=300,
    )


@pytest.fixture
def model_file(tmp_path):
    path = tmp_path / "m.onnx"
    path.write_bytes(mixed_model(matmul=False).SerializeToString())
    return path


@pytest.fixture
def fresh_registry(monkeypatch):
    """Make ``registry()`` build a new Registry now, and restore the old one after the test."""

    def make() -> plugins.Registry:
        reg = plugins.Registry()
        monkeypatch.setattr(plugins, "_cache", {k: reg for k in (None, *plugins._cache)})
        return reg

    return make


# -- no C compiler -----------------------------------------------------------------------------


@pytest.mark.skipif("ccompiler" not in available_backends(), reason="ccompiler not installed")
@pytest.mark.parametrize(
    ("table", "words"),
    [
        ({"cc": "/nonexistent"}, "/nonexistent not found"),
        ({"cc": "cc '-O2"}, "is not a valid command line"),
        ({"cflags": ["-fno-such-flag"]}, "rejects cflags"),
    ],
)
def test_a_configured_compiler_that_does_not_work_is_a_config_error(table, words):
    """Your cc or cflags are wrong: byoc says so, instead of leaving everything to onnxruntime
    without a word."""
    for backends in (["ccompiler"], None):
        cfg = {"backend": {"ccompiler": table}}
        if backends is not None:
            cfg["backends"] = backends
        with pytest.raises(byoc.ConfigError, match=re.escape(words)):
            byoc.compile(mixed_model(matmul=False), cfg)


@pytest.mark.skipif("ccompiler" not in available_backends(), reason="ccompiler not installed")
def test_without_cc_on_path_ccompiler_says_why_and_the_rest_works(tmp_path, model_file):
    empty = tmp_path / "bin"
    empty.mkdir()
    done = run_cli(["backends", "--json"], tmp_path, {"PATH": str(empty)})
    assert done.returncode == 0, done.stderr
    rows = {r["name"]: r for r in json.loads(done.stdout)}
    assert rows["ccompiler"]["available"] is False
    assert "no working C compiler" in rows["ccompiler"]["reason"]
    assert rows["examplejson"]["available"] is True
    done = run_cli(["compare", str(model_file)], tmp_path, {"PATH": str(empty)})
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr


# -- no oneDNN ---------------------------------------------------------------------------------


@pytest.mark.skipif("dnnl" not in available_backends(), reason="dnnl not installed")
def test_dnnl_without_onednn_says_why_and_the_rest_works(monkeypatch, fresh_registry, capsys):
    from byoc_dnnl import native

    def missing():
        raise native.NativeUnavailable("oneDNN was not found: need lib/libdnnl.so (simulated)")

    monkeypatch.setattr(native, "onednn_prefix", missing)
    monkeypatch.setattr(native, "build", lambda *a, **k: missing())
    monkeypatch.setattr(native, "_loaded", [])
    monkeypatch.setattr(native, "_failure", [])
    reg = fresh_registry()
    assert "oneDNN was not found" in (reg.backends["dnnl"].unavailable_reason or "")
    assert main(["backends"]) == 0
    assert "UNAVAILABLE: oneDNN was not found" in capsys.readouterr().out
    with warnings.catch_warnings(record=True) as seen:  # only installed: a warning
        warnings.simplefilter("always")
        compiled = byoc.compile(mixed_model())
    assert any("oneDNN was not found" in str(w.message) for w in seen)
    assert "dnnl" not in {s.unit.backend for s in compiled.steps}
    assert compiled.run({"x": X})["t"].shape == (3, 4)
    with pytest.raises(byoc.ConfigError, match="'dnnl' is named in 'backends' but cannot be"):
        byoc.compile(mixed_model(), {"backends": ["dnnl", "examplejson"]})


# -- onnxruntime too old -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("version", "ok"), [("1.31.1", True), ("1.32.0", True), ("2.0", True), ("1.16.3", False)]
)
def test_onnxruntime_version_check(version, ok):
    problem = fallback.onnxruntime_problem(version)
    assert (problem is None) == ok
    if not ok:
        assert f"onnxruntime {version} is too old" in problem and "pip install -U" in problem


def test_an_old_onnxruntime_is_shown_and_compile_says_what_is_needed(
    monkeypatch, fresh_registry, capsys
):
    monkeypatch.setattr(fallback.ort, "__version__", "1.16.3")
    fresh_registry()
    assert main(["backends"]) == 0
    assert "UNAVAILABLE: onnxruntime 1.16.3 is too old" in capsys.readouterr().out
    with pytest.raises(byoc.BackendError, match=r"needs onnxruntime >= 1\.31"):
        byoc.compile(mixed_model(), {"backends": ["examplejson"]})
    byoc.partition(mixed_model(), {"backends": ["examplejson"]})  # planning still works


# -- a plugin that fails to import -------------------------------------------------------------


def test_a_plugin_that_fails_to_import_is_shown_and_everything_else_works(tmp_path, model_file):
    site = tmp_path / "site"
    info = site / "byoc_broken-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: byoc-broken\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[byoc.backends]\nbroken = broken_backend\n")
    (site / "broken_backend.py").write_text(
        textwrap.dedent("""
        import libthatisnotthere  # noqa: F401
        """)
    )
    done = run_cli(["backends"], tmp_path, pythonpath=site)
    assert done.returncode == 0, done.stderr
    line = next(ln for ln in done.stdout.splitlines() if ln.startswith("broken "))
    assert "UNAVAILABLE: import failed: No module named 'libthatisnotthere'" in line
    assert "examplejson  (byoc-examplejson" in done.stdout
    done = run_cli(["compare", str(model_file)], tmp_path, pythonpath=site)
    assert done.returncode == 0, done.stderr
    cfg = tmp_path / "byoc.toml"
    cfg.write_text('backends = ["broken", "examplejson"]\n')
    done = run_cli(["compare", str(model_file), "-c", str(cfg)], tmp_path, pythonpath=site)
    assert done.returncode == 2, done.stderr
    assert "backend 'broken' is named in 'backends' but cannot be used: import failed" in (
        done.stderr
    )
