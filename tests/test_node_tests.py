"""The onnx node tests through byoc with only examplejson enabled (bench/node_tests.py)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "bench" / "node_tests.py"


def load_script():
    spec = importlib.util.spec_from_file_location("node_tests", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules["node_tests"] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_examplejson_passes_99_percent_of_the_node_tests_it_claims():
    result = load_script().run_backend("examplejson")
    assert result.claimed >= 400, result.summary()
    failures = "\n".join(f"{name}: {message}" for name, message in result.failures)
    assert result.passed >= 0.99 * result.claimed, f"{result.summary()}\n{failures}"


def test_the_script_prints_claimed_passed_failed(capsys):
    status = load_script().main(["--backend", "examplejson", "-k", "test_relu"])
    out = capsys.readouterr().out
    assert status == 0
    assert out.startswith("examplejson: claimed ") and "passed" in out and "failed 0" in out
