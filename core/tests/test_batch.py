"""Running a compiled model over many samples (byoc.batch): stacking, files, threads. Ray's
side is in test_ray.py."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tracemalloc
import zipfile
from pathlib import Path
from typing import Any

import byoc
import numpy as np
import onnx
import pytest
from byoc.batch import read_sample, run_samples, sample_files, write_sample
from byoc.testing.build import make_model, node

STATIC = {"compile": {"placement": "static"}}


def scaled(batch: Any = "N") -> onnx.ModelProto:
    """s = relu(x * w) + x, x [batch, 4], and the sum of s over everything."""
    return make_model(
        [
            node("Mul", ["x", "w"], "m"),
            node("Relu", ["m"], "y"),
            node("Add", ["y", "x"], "s"),
            node("ReduceSum", ["s"], "total", keepdims=0),
        ],
        {"x": [batch, 4]},
        ["s", "total"],
        {"w": np.arange(4, dtype=np.float32) - 1.5},
    )


def expected(x: np.ndarray) -> dict[str, np.ndarray]:
    s = np.maximum(x * (np.arange(4, dtype=np.float32) - 1.5), 0) + x
    return {"s": s, "total": np.asarray(s.sum(), np.float32)}


class Counting:
    """A compiled model that counts its runs and fails on any negative input."""

    def __init__(self, model: Any) -> None:
        self.model, self.runs = model, []
        self.inputs, self.outputs = model.inputs, model.outputs

    def run(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        self.runs.append(inputs["x"].shape[0])
        if (inputs["x"] < 0).any():
            raise ValueError("negative input")
        return self.model.run(inputs)


def rows(*counts: int) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(0)
    return [{"x": rng.random((n, 4), dtype=np.float32)} for n in counts]


def test_samples_stack_along_a_free_batch_dim_and_split_back() -> None:
    model = byoc.compile(
        make_model(
            [node("Mul", ["x", "w"], "m"), node("Relu", ["m"], "s")],
            {"x": ["N", 4]},
            ["s"],
            {"w": np.arange(4, dtype=np.float32) - 1.5},
        ),
        {"backends": ["examplejson"], **STATIC},
    )
    counting = Counting(model)
    samples = rows(1, 2, 1, 1)
    results = run_samples(counting, samples)
    assert counting.runs == [5]  # one stacked run of every row
    for sample, out in zip(samples, results, strict=True):
        assert isinstance(out, dict)
        np.testing.assert_allclose(out["s"], expected(sample["x"])["s"] - sample["x"], rtol=1e-6)


def test_outputs_without_the_batch_dim_run_one_sample_at_a_time() -> None:
    counting = Counting(byoc.compile(scaled(), {"backends": ["examplejson"], **STATIC}))
    samples = rows(1, 1, 1)
    results = run_samples(counting, samples)
    assert counting.runs == [3, 1, 1, 1]  # "total" has no rows to split: ran again one by one
    for sample, out in zip(samples, results, strict=True):
        want = expected(sample["x"])
        assert isinstance(out, dict)
        np.testing.assert_allclose(out["s"], want["s"], rtol=1e-6)
        np.testing.assert_allclose(out["total"], want["total"], rtol=1e-5)


def test_a_fixed_batch_dim_runs_samples_one_at_a_time() -> None:
    counting = Counting(byoc.compile(scaled(1), {"backends": ["examplejson"], **STATIC}))
    results = run_samples(counting, rows(1, 1, 1))
    assert counting.runs == [1, 1, 1]
    assert all(isinstance(r, dict) for r in results)


def test_a_failing_sample_fails_alone() -> None:
    counting = Counting(byoc.compile(scaled(), {"backends": ["examplejson"], **STATIC}))
    samples = rows(1, 1, 1)
    samples[1]["x"] = -samples[1]["x"]
    results = run_samples(counting, samples)
    assert isinstance(results[1], ValueError)
    assert isinstance(results[0], dict) and isinstance(results[2], dict)


def test_outputs_round_trip_through_npz_files(tmp_path: Path) -> None:
    outputs = {
        "file": np.arange(6, dtype=np.float32).reshape(2, 3),  # numpy.savez's own argument name
        "scores/0": np.ones(2, np.int64),
        "labels": np.array(["a", "bc"], dtype=object),
    }
    write_sample(tmp_path / "s.npz", outputs)
    with np.load(tmp_path / "s.npz", allow_pickle=False) as back:
        assert sorted(back.files) == sorted(outputs)
        np.testing.assert_array_equal(back["file"], outputs["file"])
        np.testing.assert_array_equal(back["scores/0"], outputs["scores/0"])
        assert back["labels"].tolist() == ["a", "bc"]
    assert [p.name for p in tmp_path.iterdir()] == ["s.npz"]  # no temporary file left


@pytest.mark.parametrize(
    ("arrays", "message"),
    [
        ({"x": np.zeros((1, 5), np.float32)}, "dim 1 must be 4"),
        ({"x": np.zeros((1, 4), np.float64)}, "dtype float64"),
        ({}, "missing input 'x'"),
        ({"x": np.zeros((1, 4), np.float32), "y": np.zeros(1)}, "unknown input 'y'"),
        (None, "not an .npz file"),
    ],
)
def test_a_bad_sample_file_says_what_is_wrong(
    tmp_path: Path, arrays: dict[str, np.ndarray] | None, message: str
) -> None:
    path = tmp_path / "s.npz"
    if arrays is None:
        path.write_text("not a zip")
    else:
        np.savez(path, **arrays)
    signature = byoc.compile(scaled(), {"backends": [], **STATIC}).inputs
    with pytest.raises(byoc.InputError, match=message):
        read_sample(path, signature)


def test_a_member_whose_size_is_not_what_its_header_says_is_refused(tmp_path: Path) -> None:
    signature = byoc.compile(scaled(), {"backends": [], **STATIC}).inputs
    header = np.lib.format.header_data_from_array_1_0(np.zeros((1, 4), np.float32))
    for name, data, message in [
        ("long.npz", bytes(64), "header says float32 (1, 4), which takes 144: the file is damaged"),
        ("text.npz", b"x = [1, 2, 3, 4]", "'x.npy' is not a .npy array"),
    ]:
        with zipfile.ZipFile(tmp_path / name, "w") as zf, zf.open("x.npy", "w") as f:
            if name == "long.npz":
                np.lib.format.write_array_header_1_0(f, header)
            f.write(data)
        with pytest.raises(byoc.InputError, match=re.escape(message)):
            read_sample(tmp_path / name, signature)


def test_an_npz_bomb_is_refused_from_its_headers_before_it_is_decompressed(tmp_path: Path) -> None:
    """A few MB on disk, 1 GiB of zeros inside: its header says (2**26, 4) float32."""
    path = tmp_path / "bomb.npz"
    header = {"descr": "<f4", "fortran_order": False, "shape": (2**26, 4)}
    with (
        zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as zf,
        zf.open("x.npy", "w", force_zip64=True) as f,
    ):
        np.lib.format.write_array_header_1_0(f, header)
        zeros = bytes(2**24)
        for _ in range(2**30 // len(zeros)):
            f.write(zeros)
    assert path.stat().st_size < 8 * 2**20
    free = byoc.compile(scaled(), {"backends": [], **STATIC}).inputs  # x: [N, 4]
    fixed = byoc.compile(scaled(1), {"backends": [], **STATIC}).inputs  # x: [1, 4]
    tracemalloc.start()
    try:
        with pytest.raises(byoc.InputError, match="would take 1024 MiB, more than the 256 MiB"):
            read_sample(path, free)
        with pytest.raises(
            byoc.InputError, match=r"has shape \(67108864, 4\) .* \(dim 0 must be 1\)"
        ):
            read_sample(path, fixed)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 16 * 2**20  # the 1 GiB array was never allocated


def test_sample_files_match_the_suffix_in_any_case(tmp_path: Path) -> None:
    for name in ("a.NPZ", "b.npz", "c.Npz", "d.npy", "e.txt"):
        (tmp_path / name).write_bytes(b"")
    (tmp_path / "f.npz").mkdir()
    assert [p.name for p in sample_files(tmp_path)] == ["a.NPZ", "b.npz", "c.Npz"]


def test_loading_with_threads_caps_onnxruntime_and_backends(tmp_path: Path) -> None:
    compiled = byoc.compile(scaled(1), {"backends": ["examplejson"], **STATIC})
    path = compiled.save(tmp_path / "m.byoc")
    assert byoc.load(path, threads=3).fallback_config["intra_op_num_threads"] == 3
    for bad in (0, -1, 1.5, 10**9):
        with pytest.raises(byoc.ConfigError, match="threads must be an int from 1 to 65535"):
            byoc.load(path, threads=bad)  # type: ignore[arg-type]


def test_byoc_does_not_import_ray_unless_batch_runs() -> None:
    code = "import sys, byoc, byoc.cli, byoc.batch; print('ray' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.stdout.strip() == "False", done.stderr


def test_byoc_batch_checks_its_arguments_before_compiling(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from byoc.cli import main

    onnx.save(scaled(1), tmp_path / "m.onnx")
    (tmp_path / "in").mkdir()
    argv = ["batch", str(tmp_path / "m.onnx"), "--inputs", str(tmp_path / "in")]
    argv += ["--outputs", str(tmp_path / "out")]
    assert main([*argv, "--workers", "0"]) == 2
    assert "--workers must be at least 1, got 0" in capsys.readouterr().err
    assert main(argv) == 2
    assert "has no .npz files" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_byoc_batch_checks_its_outputs_directory_before_compiling(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A path under a file, or the inputs directory, is exit 2 in one line, before the model is
    read: this one is not ONNX, and compiling it would say so instead."""
    from byoc.cli import main

    (tmp_path / "m.onnx").write_bytes(b"not a model")
    (tmp_path / "in").mkdir()
    np.savez(tmp_path / "in" / "0.npz", x=np.zeros((1, 4), np.float32))
    (tmp_path / "file").write_text("")
    argv = ["batch", str(tmp_path / "m.onnx"), "--inputs", str(tmp_path / "in"), "--outputs"]
    assert main([*argv, str(tmp_path / "file" / "sub")]) == 2
    err = capsys.readouterr().err
    assert err == (
        f"byoc: error: --outputs: '{tmp_path / 'file'}' is not a directory, so "
        f"'{tmp_path / 'file' / 'sub'}' cannot be made in it; name a directory\n"
    )
    assert main([*argv, str(tmp_path / "file")]) == 2
    assert f"'{tmp_path / 'file'}' is not a directory; name a directory" in capsys.readouterr().err
    assert main([*argv, str(tmp_path / "in")]) == 2
    assert "outputs would overwrite samples" in capsys.readouterr().err


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write anywhere")
def test_byoc_batch_refuses_an_outputs_directory_it_may_not_write(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from byoc.cli import main

    (tmp_path / "m.onnx").write_bytes(b"not a model")
    (tmp_path / "in").mkdir()
    np.savez(tmp_path / "in" / "0.npz", x=np.zeros((1, 4), np.float32))
    (tmp_path / "locked").mkdir(mode=0o500)
    argv = ["batch", str(tmp_path / "m.onnx"), "--inputs", str(tmp_path / "in"), "--outputs"]
    assert main([*argv, str(tmp_path / "locked" / "out")]) == 2
    assert "may not make" in capsys.readouterr().err
    assert main([*argv, str(tmp_path / "locked")]) == 2
    assert "may not write in" in capsys.readouterr().err


def test_an_outputs_directory_that_cannot_be_made_is_an_input_error(tmp_path: Path) -> None:
    """A link to nowhere passes the early check (its parent is writable); making it fails, as
    an InputError before Ray starts."""
    pytest.importorskip("ray")
    from byoc.ray import run_batch

    path = byoc.compile(scaled(1), {"backends": ["examplejson"], **STATIC}).save(
        tmp_path / "m.byoc"
    )
    (tmp_path / "in").mkdir()
    np.savez(tmp_path / "in" / "0.npz", x=np.zeros((1, 4), np.float32))
    (tmp_path / "out").symlink_to(tmp_path / "nowhere")
    with pytest.raises(byoc.InputError, match=r"--outputs: cannot make '.*out': File exists"):
        run_batch(path, tmp_path / "in", tmp_path / "out")
