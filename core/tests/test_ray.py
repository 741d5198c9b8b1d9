"""Batch inference on a local Ray with 2 CPUs: byoc.ray.Predictor over Ray Data, and byoc batch
(joining that cluster, or starting its own)."""

from __future__ import annotations

import functools
import hashlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import byoc
import byoc.ray
import numpy as np
import onnx
import onnxruntime as ort
import pytest
import ray
from byoc.ray import Predictor, _start_workers, run_batch
from byoc.testing.build import make_model, node

CONFIG = {"backends": ["examplejson"], "compile": {"placement": "static"}}


@pytest.fixture(scope="module")
def cluster() -> Iterator[str]:
    """A local Ray with 2 CPUs for this module; its address, for other processes to join."""
    ray.init(num_cpus=2, include_dashboard=False, logging_level="ERROR")
    try:
        yield ray.get_runtime_context().gcs_address
    finally:
        ray.shutdown()


def model(batch: object = "N") -> onnx.ModelProto:
    """s = relu(x * w) + x for x [batch, 4]."""
    return make_model(
        [node("Mul", ["x", "w"], "m"), node("Relu", ["m"], "y"), node("Add", ["y", "x"], "s")],
        {"x": [batch, 4]},
        ["s"],
        {"w": np.arange(4, dtype=np.float32) - 1.5},
    )


def onnxruntime_outputs(proto: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x})[0]


def samples(directory: Path, count: int, rows: int = 1) -> dict[str, np.ndarray]:
    directory.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(1)
    written = {}
    for i in range(count):
        x = rng.standard_normal((rows, 4)).astype(np.float32)
        np.savez(directory / f"sample{i:03d}.npz", x=x)
        written[f"sample{i:03d}.npz"] = x
    return written


def test_predictor_maps_a_ray_dataset_like_onnxruntime(cluster: str, tmp_path: Path) -> None:
    proto = model()
    path = byoc.compile(proto, CONFIG).save(tmp_path / "m.byoc")
    xs = np.random.default_rng(0).standard_normal((10, 1, 4)).astype(np.float32)
    ds = ray.data.from_items([{"x": x} for x in xs])
    out = ds.map_batches(
        Predictor, fn_constructor_kwargs={"model": str(path)}, concurrency=2, batch_size=4
    ).take_all()
    got = np.stack([row["s"] for row in out])
    want = np.stack([onnxruntime_outputs(proto, x) for x in xs])
    # Ray Data keeps the order of rows within a dataset
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_predictor_refuses_an_onnx_model_and_names_a_bad_row(tmp_path: Path) -> None:
    proto = model(1)
    onnx.save(proto, tmp_path / "m.onnx")
    with pytest.raises(byoc.InputError, match="not one: compile the model once"):
        Predictor(str(tmp_path / "m.onnx"), threads=1)
    predictor = Predictor(byoc.compile(proto, CONFIG).save(tmp_path / "m.byoc"), threads=1)
    batch = {"x": np.zeros((3, 1, 4), np.float32)}
    assert predictor(batch)["s"].shape == (3, 1, 4)
    with pytest.raises(byoc.InputError, match=r"batch row 0: input 'x' has shape \(1, 5\)"):
        predictor({"x": np.zeros((3, 1, 5), np.float32)})


def test_byoc_batch_joins_a_cluster_writes_outputs_and_skips_bad_samples(
    cluster: str, tmp_path: Path
) -> None:
    proto = model()
    path = byoc.compile(proto, CONFIG).save(tmp_path / "m.byoc")
    written = samples(tmp_path / "in", 9, rows=2)
    np.savez(tmp_path / "in" / "wrong-shape.npz", x=np.zeros((1, 5), np.float32))
    np.savez(tmp_path / "in" / "no-x.npz", y=np.zeros((1, 4), np.float32))
    (tmp_path / "in" / "broken.npz").write_bytes((tmp_path / "in" / "no-x.npz").read_bytes()[:60])
    (tmp_path / "out").mkdir()
    for name in ("wrong-shape.npz", "no-x.npz", "broken.npz"):  # an earlier run's outputs
        np.savez(tmp_path / "out" / name, s=np.zeros((1, 4), np.float32))
    done = subprocess.run(
        [sys.executable, "-m", "byoc.cli", "batch", str(path), "--inputs", str(tmp_path / "in"),
         "--outputs", str(tmp_path / "out"), "--address", cluster, "--batch-size", "4"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 1, done.stderr  # some samples failed
    assert "9 written" in done.stdout and "3 failed" in done.stdout
    assert "wrong-shape.npz: input 'x' has shape (1, 5)" in done.stdout
    assert "no-x.npz: unknown input 'y'" in done.stdout
    assert "broken.npz: not an .npz file" in done.stdout
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == sorted(written)
    for name, x in written.items():
        with np.load(tmp_path / "out" / name) as out:
            assert out.files == ["s"]
            np.testing.assert_allclose(
                out["s"], onnxruntime_outputs(proto, x), rtol=1e-5, atol=1e-6
            )


def test_workers_load_the_shipped_file_and_refuse_what_does_not_load(
    cluster: str, tmp_path: Path
) -> None:
    proto = model()
    path = byoc.compile(proto, CONFIG).save(tmp_path / "m.byoc")
    samples(tmp_path / "in", 5)
    report = run_batch(path, tmp_path / "in", tmp_path / "out", workers=2, batch_size=2)
    assert report.passed and report.written == 5 and report.workers == 2
    pool = _start_workers(path.read_bytes(), 1, 1)
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    assert ray.get(pool.actors[0].describe.remote()) == (pool.hosts[0], digest)
    with pytest.raises(byoc.ByocError, match=r"could not load the model: .*not a \.byoc file"):
        _start_workers(b"not a zip", 1, 1)
    with pytest.raises(byoc.ConfigError, match="need 6 CPUs; the Ray cluster has 2"):
        _start_workers(path.read_bytes(), 3, 2)


def test_a_sample_that_crashes_its_worker_fails_alone(
    cluster: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    class Crashing(Predictor):
        """Dies on a sample holding a NaN, as a backend that segfaults would."""

        def run(self, samples: list[dict[str, np.ndarray]]) -> list[object]:
            if any(np.isnan(sample["x"]).any() for sample in samples):
                os._exit(1)
            return super().run(samples)  # type: ignore[return-value]

    monkeypatch.setattr(byoc.ray, "_start_workers", functools.partial(_start_workers, cls=Crashing))
    proto = model()
    path = byoc.compile(proto, CONFIG).save(tmp_path / "m.byoc")
    written = samples(tmp_path / "in", 8)  # two batches of 4, both on the one worker
    del written["sample002.npz"]
    np.savez(tmp_path / "in" / "sample002.npz", x=np.full((1, 4), np.nan, np.float32))
    (tmp_path / "out").mkdir()
    np.savez(tmp_path / "out" / "sample002.npz", s=np.zeros((1, 4), np.float32))  # an earlier run's
    report = run_batch(path, tmp_path / "in", tmp_path / "out", workers=1, batch_size=4)
    assert report.written == 7
    assert [name for name, _ in report.failed] == ["sample002.npz"]
    assert report.failed[0][1].startswith("it crashed its worker")
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == sorted(written)
    for name, x in written.items():
        with np.load(tmp_path / "out" / name) as out:
            np.testing.assert_allclose(out["s"], onnxruntime_outputs(proto, x), rtol=1e-5)


def test_an_unreachable_address_fails_in_one_line(tmp_path: Path) -> None:
    path = byoc.compile(model(), CONFIG).save(tmp_path / "m.byoc")
    samples(tmp_path / "in", 1)
    done = subprocess.run(
        [sys.executable, "-m", "byoc.cli", "batch", str(path), "--inputs", str(tmp_path / "in"),
         "--outputs", str(tmp_path / "out"), "--address", "127.0.0.1:1"],
        capture_output=True, text=True, timeout=60,  # ray.init alone would retry for minutes
    )  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.startswith("byoc: error: no Ray cluster answers at 127.0.0.1:1 (")
    assert len(done.stderr.splitlines()) == 1, done.stderr


def test_byoc_batch_starts_and_stops_its_own_ray(tmp_path: Path) -> None:
    proto = model(1)
    onnx.save(proto, tmp_path / "m.onnx")
    (tmp_path / "byoc.toml").write_text('backends = ["examplejson"]\n')
    written = samples(tmp_path / "in", 4)
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    done = subprocess.run(
        [sys.executable, "-m", "byoc.cli", "batch", str(tmp_path / "m.onnx"),
         "-c", str(tmp_path / "byoc.toml"), "--inputs", str(tmp_path / "in"),
         "--outputs", str(tmp_path / "out"), "--workers", "1", "--json"],
        capture_output=True, text=True, timeout=300, env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert '"written": 4' in done.stdout
    for name, x in written.items():
        with np.load(tmp_path / "out" / name) as out:
            np.testing.assert_allclose(out["s"], onnxruntime_outputs(proto, x), rtol=1e-5)


def test_byoc_batch_without_samples_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "in").mkdir()
    with pytest.raises(byoc.InputError, match=r"has no \.npz files"):
        run_batch(tmp_path / "m.byoc", tmp_path / "in", tmp_path / "out")
    samples(tmp_path / "in", 1)
    with pytest.raises(byoc.InputError, match="outputs would overwrite samples"):
        run_batch(tmp_path / "m.byoc", tmp_path / "in", tmp_path / "in")
