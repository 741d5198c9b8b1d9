"""``byoc bench``, compile progress and ``--quiet``."""

from __future__ import annotations

import io
import json
import subprocess
import sys

import byoc
import numpy as np
import onnx
import pytest
from byoc import host
from byoc.bench import bench
from byoc.cli import main
from byoc.progress import TerminalProgress
from byoc.testing.build import make_model, node
from onnx import numpy_helper


def model():
    return make_model(
        [
            node("Add", ["x", "x"], "a"),
            node("Tanh", ["a"], "t"),
            node("Mul", ["t", "t"], "m"),
            node("Relu", ["m"], "r"),
        ],
        {"x": ["N", 8]},
        ["r"],
    )


CFG = {
    "backends": ["examplejson"],
    "backend": {"examplejson": {"ops": ["Add", "Mul", "Relu"]}},
    "shapes": {"x": [2, 8]},
}


@pytest.fixture
def files(tmp_path):
    onnx.save(model(), tmp_path / "m.onnx")
    (tmp_path / "byoc.toml").write_text(
        'backends = ["examplejson"]\n[backend.examplejson]\nops = ["Add", "Mul", "Relu"]\n'
        '[shapes]\nx = [2, 8]\n[compile]\nplacement = "static"\n'
    )
    return tmp_path / "m.onnx", tmp_path / "byoc.toml"


def byoc_cli(*args):
    return subprocess.run(
        [sys.executable, "-m", "byoc.cli", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_bench_prints_a_table(files):
    path, cfg = files
    done = byoc_cli("bench", path, "-c", cfg, "--runs", "5", "--warmup", "1")
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "byoc / onnxruntime =" in out and "median of 5 runs in alternating blocks" in out
    for word in ("examplejson_0", "onnxruntime_0", "examplejson_1", "(executor)", "p10", "p90"):
        assert word in out
    assert done.stderr == ""  # not a terminal: no progress bar


def test_bench_json(files):
    path, cfg = files
    done = byoc_cli("bench", path, "-c", cfg, "--runs", "3", "--json", "--quiet")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["runs"] == 3
    assert [s["name"] for s in report["steps"]] == [
        "examplejson_0",
        "onnxruntime_0",
        "examplejson_1",
    ]
    assert report["byoc"]["median_ms"] > 0 and report["ratio"] > 0


def test_bench_api_counts_every_run():
    report = bench(model(), CFG, runs=4, warmup=0)
    assert report.runs == 4
    assert report.byoc.p10 <= report.byoc.median <= report.byoc.p90
    with pytest.raises(byoc.ConfigError, match="runs >= 1"):
        bench(model(), CFG, runs=0)
    with pytest.raises(byoc.ConfigError, match="block >= 1"):
        bench(model(), CFG, block=0)
    calls = []
    compiled = byoc.compile(model(), CFG)
    real = type(compiled).profile
    with pytest.MonkeyPatch.context() as mp:  # 7 timed runs of byoc, in blocks of 3, 3 and 1
        mp.setattr(type(compiled), "profile", lambda self, x: calls.append(1) or real(self, x))
        assert bench(model(), CFG, runs=7, warmup=0, block=3, gap=0).runs == 7
    assert len(calls) == 7


def test_bench_says_when_other_processes_took_the_cpus(monkeypatch):
    monkeypatch.setattr(host, "others_since", lambda mark: 0.5)
    report = bench(model(), CFG, runs=2, warmup=0, gap=0)
    assert report.others == 0.5 and report.to_json()["others"] == 0.5
    assert "other processes took 50% of the CPUs meanwhile" in report.table()
    monkeypatch.setattr(host, "others_since", lambda mark: 0.01)
    assert "other processes" not in bench(model(), CFG, runs=2, warmup=0, gap=0).table()


def test_compile_reports_progress_per_unit():
    calls = []
    byoc.compile(model(), CFG, progress=lambda *a: calls.append(a))
    assert calls == [(1, 3, "examplejson_0"), (2, 3, "onnxruntime_0"), (3, 3, "examplejson_1")]


class FakeTerminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_terminal_progress_draws_on_a_terminal_only():
    tty = FakeTerminal()
    with TerminalProgress(tty, interval=0) as progress:
        byoc.compile(model(), CFG, progress=progress)
    text = tty.getvalue()
    assert "\rcompiling [" in text and "examplejson_1 (3 of 3)" in text
    assert text.endswith("\r")  # the line is erased at the end
    for quiet in (TerminalProgress(io.StringIO()), TerminalProgress(FakeTerminal(), enabled=False)):
        with quiet as progress:
            progress(1, 2, "x")
        assert quiet.stream.getvalue() == ""


def test_a_long_compile_writes_one_line_where_stderr_is_not_a_terminal():
    log = io.StringIO()
    progress = TerminalProgress(log)
    progress.note_after = 0.0
    progress(1, 3, "dnnl_0")
    progress(2, 3, "dnnl_1")
    progress(3, 3, "dnnl_2")
    assert log.getvalue() == "byoc: still compiling: dnnl_1 (2 of 3)\n"
    quiet = TerminalProgress(io.StringIO(), enabled=False)
    quiet.note_after = 0.0
    quiet(1, 2, "x")
    quiet(2, 2, "y")
    assert quiet.stream.getvalue() == ""


def test_quiet_is_accepted_everywhere(files, tmp_path):
    path, cfg = files
    for command in (["compile", "-o", tmp_path / "m.byoc"], ["run"], ["compare"]):
        done = byoc_cli(command[0], path, "-c", cfg, "--quiet", *command[1:])
        assert done.returncode == 0, done.stderr
        assert done.stderr == ""
    assert byoc_cli("compile", path, "-c", cfg, "-q", "-o", tmp_path / "m.byoc").stdout == ""


def _rows(text: str) -> dict[str, str]:
    """A table's unit -> nodes column: the rows after its ``unit  backend  nodes`` header, up
    to the first line that is not a unit's."""
    lines = text.splitlines()
    start = next(
        i for i, line in enumerate(lines) if line.split()[:3] == ["unit", "backend", "nodes"]
    )
    rows = {}
    for line in lines[start + 1 :]:
        cells = line.split()
        if cells and set(cells[0]) == {"-"}:
            continue
        if len(cells) < 3 or not cells[0][-1].isdigit():
            break
        rows[cells[0]] = cells[2]
    return rows


def test_bench_counts_a_units_nodes_as_partition_does(tmp_path, capsys):
    """A partition holding a Constant node: ``partition`` counts its compute nodes (the
    constant apart, in its backend's line), and ``bench`` shows the same count, not one more."""
    weights = numpy_helper.from_array(np.full((2, 8), 0.5, np.float32))
    model = make_model(
        [
            node("Constant", [], "c", value=weights),
            node("Add", ["x", "c"], "a"),
            node("Tanh", ["a"], "t"),
            node("Mul", ["t", "t"], "y"),
        ],
        {"x": [2, 8]},
        ["y"],
    )
    onnx.save(model, tmp_path / "m.onnx")
    cfg = tmp_path / "byoc.toml"
    cfg.write_text(
        'backends = ["examplejson"]\n[backend.examplejson]\nops = ["Add", "Mul"]\n'
        '[compile]\nplacement = "static"\n'
    )
    args = [str(tmp_path / "m.onnx"), "-c", str(cfg)]
    assert main(["partition", *args]) == 0
    planned = capsys.readouterr().out
    assert "examplejson: 2 partition(s), 2 node(s) + 1 constant(s)" in planned
    assert main(["bench", *args, "--runs", "2", "--warmup", "0"]) == 0
    benched = _rows(capsys.readouterr().out)
    assert (
        benched
        == _rows(planned)
        == {"examplejson_0": "1", "onnxruntime_0": "1", "examplejson_1": "1"}
    )
    assert main(["bench", *args, "--runs", "2", "--warmup", "0", "--json"]) == 0
    steps = json.loads(capsys.readouterr().out)["steps"]
    assert [(s["name"], s["nodes"], s["constants"]) for s in steps] == [
        ("examplejson_0", 1, 1),
        ("onnxruntime_0", 1, 0),
        ("examplejson_1", 1, 0),
    ]
