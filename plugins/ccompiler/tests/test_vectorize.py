"""The compiler vectorizes the generated fused loop: with byoc's default flags, and with plain
``-O3`` (no ``-march``, no ``-fno-trapping-math``, no OpenMP), because the selects and the math
helpers are branch-free by construction. Checked through the compiler's own report (gcc
``-fopt-info-vec-optimized``, clang ``-Rpass=loop-vectorize``)."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
from pathlib import Path

import byoc
import numpy as np
import pytest
from byoc.native import Toolchain, default_compiler, probe
from byoc.testing import assert_matches_onnxruntime
from byoc.testing.build import make_model, node

# Every kind of expression the prelude and the emitters produce: selects (Relu, LeakyRelu,
# Clip, Max, Where), exp/log/tanh/erf/sigmoid, broadcast constants, division.
CHAIN = [
    node("Mul", ["x", "scale"], "t0"),
    node("Add", ["t0", "shift"], "t1"),
    node("Sigmoid", ["t1"], "t2"),
    node("Tanh", ["t1"], "t3"),
    node("Erf", ["t3"], "t4"),
    node("Exp", ["t2"], "t5"),
    node("Log", ["t5"], "t6"),
    node("LeakyRelu", ["t6"], "t7", alpha=0.1),
    node("Relu", ["t4"], "t8"),
    node("Max", ["t7", "t8"], "t9"),
    node("Clip", ["t9", "lo", "hi"], "t10"),
    node("Greater", ["x", "t10"], "g"),
    node("Where", ["g", "t10", "t2"], "t11"),
    node("Div", ["t11", "t1"], "y"),
]


def chain_model():
    consts = {
        "scale": np.linspace(0.5, 1.5, 16, dtype=np.float32).reshape(16, 1, 1),
        "shift": np.linspace(-1, 1, 16, dtype=np.float32).reshape(16, 1, 1),
        "lo": np.array(-2.0, np.float32),
        "hi": np.array(2.0, np.float32),
    }
    return make_model(CHAIN, {"x": [1, 16, 32, 32]}, ["y"], constants=consts)


def _report_flag(cc: list[str]) -> str | None:
    version = subprocess.run([*cc, "--version"], capture_output=True, text=True, check=False)
    text = version.stdout.lower()
    if "clang" in text:
        return "-Rpass=loop-vectorize"
    if "gcc" in text or "free software foundation" in text:
        return "-fopt-info-vec-optimized"
    return None


def _vectorized_lines(cc: list[str], flags: list[str], source: Path) -> list[int]:
    """Source lines the compiler reports as the start of a vectorized loop."""
    report = _report_flag(cc)
    if report is None:
        pytest.skip(f"{cc[0]} cannot report vectorization (only gcc and clang can)")
    done = subprocess.run(
        [*cc, *flags, report, "-c", str(source), "-o", str(source.with_suffix(".o"))],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    done_re = r"(?:optimized: loop vectorized|remark: vectorized loop)"
    pattern = re.escape(source.name) + r":(\d+):\d+: " + done_re
    return [int(m) for m in re.findall(pattern, done.stderr)]


@pytest.mark.parametrize("flags", ["default", "-O3"])
def test_fused_loop_is_vectorized(flags, config, tmp_path):
    toolchain = probe(default_compiler("c"), None)
    if not isinstance(toolchain, Toolchain):
        pytest.skip(toolchain)
    cc = shlex.split(toolchain.cc)
    if shutil.which(cc[0]) is None:
        pytest.skip(f"{cc[0]} not found")
    cflags = list(toolchain.cflags) if flags == "default" else flags.split()
    (step,) = byoc.compile(chain_model(), config()).steps
    source = step.artifact.source
    lines = source.splitlines()
    pragma = next(i for i, line in enumerate(lines, 1) if "#pragma omp simd" in line)
    end = next(i for i, line in enumerate(lines[pragma:], pragma + 1) if line == "}")
    path = tmp_path / "kernel.c"
    path.write_text(source)
    vectorized = _vectorized_lines(cc, cflags, path)
    assert any(pragma < n < end for n in vectorized), (
        f"the fused loop (lines {pragma + 1}-{end}) was not vectorized with {cflags}; "
        f"vectorized lines: {vectorized}"
    )


def test_chain_matches_onnxruntime(config):
    assert_matches_onnxruntime(chain_model(), config())
