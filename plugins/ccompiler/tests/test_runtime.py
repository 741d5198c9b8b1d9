"""Runtime checks, serialization, damaged artifacts, a missing compiler, the cache."""

from __future__ import annotations

import concurrent.futures
import dataclasses
import multiprocessing
import os
import struct

import byoc
import numpy as np
import pytest
from byoc import ArtifactError, InputError, native
from byoc.plugins import registry
from byoc.testing.build import make_model, node
from byoc_ccompiler import plugin
from byoc_ccompiler.artifact import MAGIC


def chain_model():
    return make_model(
        [node("Mul", ["x", "y"], "t"), node("Sigmoid", ["t"], "s"), node("Add", ["s", "x"], "z")],
        {"x": [3, 5], "y": [5]},
        ["z", "t"],
    )


def inputs():
    rng = np.random.default_rng(0)
    return {
        "x": rng.standard_normal((3, 5)).astype(np.float32),
        "y": rng.standard_normal(5).astype(np.float32),
    }


def step(compiled):
    (only,) = [s for s in compiled.steps if s.unit.backend == "ccompiler"]
    return only


def test_runtime_checks_every_input(config):
    runtime = step(byoc.compile(chain_model(), config())).runtime
    x, y = inputs()["x"], inputs()["y"]
    with pytest.raises(InputError, match="expected 2 inputs"):
        runtime.run([x])
    with pytest.raises(InputError, match=r"'y' is float64\[5\], expected float32\[5\]"):
        runtime.run([x, y.astype(np.float64)])
    with pytest.raises(InputError, match=r"'x' is float32\[5, 3\], expected float32\[3, 5\]"):
        runtime.run([x.T.copy(), y])
    with pytest.raises(InputError, match="not a numpy array"):
        runtime.run([x.tolist(), y])
    strided = np.asfortranarray(x)  # not C-contiguous: the runtime copies it
    want = runtime.run([x, y])
    got = runtime.run([strided, y])
    for a, b in zip(want, got, strict=True):
        np.testing.assert_array_equal(a, b)
    readonly = x.copy()
    readonly.flags.writeable = False
    np.testing.assert_array_equal(runtime.run([readonly, y])[0], want[0])


def test_run_is_thread_safe(config):
    compiled = byoc.compile(chain_model(), config())
    rng = np.random.default_rng(1)
    cases = [
        {
            "x": rng.standard_normal((3, 5)).astype(np.float32),
            "y": rng.standard_normal(5).astype(np.float32),
        }
        for _ in range(32)
    ]
    want = [compiled.run(c)["z"] for c in cases]
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        got = list(pool.map(lambda c: compiled.run(c)["z"], cases * 4))
    for i, g in enumerate(got):
        np.testing.assert_array_equal(g, want[i % len(cases)])


def hooks():
    return registry().route("ccompiler")


def test_serialize_deserialize_run(config):
    compiled = byoc.compile(chain_model(), config())
    artifact = step(compiled).artifact
    data = hooks().byoc_serialize(backend="ccompiler", artifact=artifact)
    untrusted = hooks().byoc_deserialize(backend="ccompiler", data=data, trust_native=False)
    assert untrusted.library is None and untrusted.carried  # rebuilt here from its source
    again = hooks().byoc_deserialize(backend="ccompiler", data=data, trust_native=True)
    assert again.source == artifact.source and again.suffix == ".c"
    assert again.library.sha256 == artifact.library.sha256
    table = config()["backend"]["ccompiler"]
    for load_library in (True, False):
        runtime = hooks().byoc_create_runtime(
            backend="ccompiler", artifact=again, config={**table, "load_library": load_library}
        )
        got = dict(
            zip(
                [t.name for t in again.outputs],
                runtime.run([inputs()["x"], inputs()["y"]]),
                strict=True,
            )
        )
        np.testing.assert_array_equal(got["z"], compiled.run(inputs())["z"])


def test_save_and_load_whole_model(tmp_path, config):
    compiled = byoc.compile(chain_model(), config())
    compiled.save(tmp_path / "m.byoc")
    again = byoc.load(tmp_path / "m.byoc")
    np.testing.assert_array_equal(again.run(inputs())["z"], compiled.run(inputs())["z"])


def damaged(data: bytes) -> dict[str, bytes]:
    head_len = struct.unpack("<Q", data[len(MAGIC) : len(MAGIC) + 8])[0]
    body = len(MAGIC) + 8 + head_len
    flip = lambda at: data[:at] + bytes([data[at] ^ 0x01]) + data[at + 1 :]  # noqa: E731
    return {
        "empty": b"",
        "magic": b"garbage" + data[7:],
        "truncated header length": data[: len(MAGIC) + 3],
        "huge header": MAGIC + struct.pack("<Q", 2**60) + data[len(MAGIC) + 8 :],
        "header not json": data[: len(MAGIC) + 8] + b"x" * head_len + data[body:],
        "truncated": data[:-10],
        "extra bytes": data + b"\0",
        "flipped source byte": flip(body + 40),
        "flipped library byte": flip(len(data) - 100),
    }


@pytest.mark.parametrize(
    "kind",
    [
        "empty",
        "magic",
        "truncated header length",
        "huge header",
        "header not json",
        "truncated",
        "extra bytes",
        "flipped source byte",
        "flipped library byte",
    ],
)
def test_damaged_artifacts_raise_artifact_error(kind, config):
    artifact = step(byoc.compile(chain_model(), config())).artifact
    data = hooks().byoc_serialize(backend="ccompiler", artifact=artifact)
    with pytest.raises(ArtifactError, match="ccompiler artifact"):
        hooks().byoc_deserialize(backend="ccompiler", data=damaged(data)[kind], trust_native=False)


def test_hostile_header_fields_raise_artifact_error(config):
    import json

    artifact = step(byoc.compile(chain_model(), config())).artifact
    data = hooks().byoc_serialize(backend="ccompiler", artifact=artifact)
    head_len = struct.unpack("<Q", data[len(MAGIC) : len(MAGIC) + 8])[0]
    header = json.loads(data[len(MAGIC) + 8 : len(MAGIC) + 8 + head_len])
    rest = data[len(MAGIC) + 8 + head_len :]
    bad = [
        {"symbol": 'x; system("rm")'},
        {"module": "../../evil"},
        {"inputs": [{"name": "x", "dtype": "float32", "shape": [-1]}]},
        {"outputs": [{"name": "z", "dtype": "object", "shape": [3]}]},
        {"source_size": "7"},
    ]
    for change in bad:
        head = json.dumps({**header, **change}).encode()
        with pytest.raises(ArtifactError):
            hooks().byoc_deserialize(
                backend="ccompiler",
                data=MAGIC + struct.pack("<Q", len(head)) + head + rest,
                trust_native=False,
            )


def test_a_library_whose_sha256_differs_is_not_loaded(config, tmp_path):
    artifact = step(byoc.compile(chain_model(), config())).artifact
    library = dataclasses.replace(artifact.library, sha256="0" * 64)
    with pytest.raises(RuntimeError, match="not loading it"):
        native.load(library, "ccompiler", str(tmp_path))


def test_a_configured_compiler_that_is_missing_is_a_config_error(config):
    with pytest.raises(byoc.ConfigError, match="no working C compiler: /nonexistent/cc not found"):
        byoc.partition(chain_model(), config(cc="/nonexistent/cc"))
    assert (
        native.probe("/nonexistent/cc", None) == "no working C compiler: /nonexistent/cc not found"
    )


def test_available_reports_a_missing_default_compiler(monkeypatch):
    monkeypatch.setenv("CC", "/nonexistent/cc")
    assert plugin._available() == "no working C compiler: /nonexistent/cc not found"
    monkeypatch.delenv("CC")
    assert plugin._available() is None


def test_bad_cflags_are_a_config_error(config):
    with pytest.raises(byoc.ConfigError, match="rejects cflags"):
        byoc.partition(chain_model(), config(cflags=["--no-such-flag"]))


def _build_in_child(args: tuple[str, str, str]) -> str:
    source, symbol, where = args
    toolchain = native.probe(native.default_compiler("c"), None)
    assert not isinstance(toolchain, str)
    library = native.build(
        source, toolchain, f"int {symbol}(void *const *args);", "ccompiler", cache=where
    )
    native.load(library, "ccompiler", where)
    return library.sha256


def test_processes_building_the_same_library_share_the_cache(config, tmp_path):
    artifact = step(byoc.compile(chain_model(), config())).artifact
    source = artifact.source.replace("generated by", "generated (cache test) by")
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(3) as pool:
        shas = pool.map(_build_in_child, [(source, artifact.symbol, str(tmp_path))] * 3)
    assert len(set(shas)) == 1
    leftovers = [p for p in os.listdir(tmp_path) if not p.startswith("_byoc_ccompiler_")]
    assert leftovers == []  # temporary build directories are gone
