"""The README's first steps, run as a newcomer would type them (on a small model), so that the
walkthrough cannot drift from what byoc does."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
from byoc.testing.build import make_model, node

README = Path(__file__).resolve().parents[1] / "README.md"


def first_steps() -> list[list[str]]:
    """The ``byoc`` commands of the README's first ```sh block, comments dropped."""
    block = re.search(r"```sh\n(.*?)```", README.read_text(), re.S)
    assert block, "README.md has no ```sh block of first steps"
    lines = [ln.split("#")[0].strip() for ln in block.group(1).splitlines()]
    return [shlex.split(ln) for ln in lines if ln.startswith("byoc ")]


def test_the_readme_first_steps_run_as_written(tmp_path):
    model = make_model(
        [node("Add", ["x", "b"], "a"), node("Relu", ["a"], "r"), node("Tanh", ["r"], "y")],
        {"x": [1, 4]},
        ["y"],
        {"b": np.full(4, 0.5, np.float32)},
    )
    onnx.save(model, tmp_path / "model.onnx")
    (tmp_path / "byoc.toml").write_text('backends = ["examplejson"]\n')
    x = np.linspace(-1, 1, 4, dtype=np.float32).reshape(1, 4)
    np.save(tmp_path / "x.npy", x)
    (tmp_path / "samples").mkdir()
    for i in range(3):
        np.savez(tmp_path / "samples" / f"{i}.npz", x=x * i)
    commands = first_steps()
    assert [c[1] for c in commands] == [
        "backends", "partition", "explain", "compare", "compile", "inspect", "run", "batch"
    ]  # fmt: skip
    for argv in commands:
        done = subprocess.run(
            [sys.executable, "-m", "byoc.cli", *argv[1:]],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert done.returncode == 0, f"{shlex.join(argv)}:\n{done.stdout}\n{done.stderr}"
    assert (tmp_path / "out" / "y.npy").is_file()
    assert sorted(p.name for p in (tmp_path / "results").iterdir()) == ["0.npz", "1.npz", "2.npz"]
