"""Run the onnx package's backend node tests through byoc, one backend enabled at a time.

    python bench/node_tests.py --backend examplejson [--backend dnnl] [-k softmax] [-v]

Each test is compiled as a user would: ``byoc.compile`` with the test's inputs, static
placement, the backend's cost-model pruning off (node tests are one-op graphs). Every test whose
compiled model gives the backend at least one partition is "claimed" and must reproduce the
test's expected outputs (with the test's rtol/atol); a failure onnxruntime alone shares is
counted apart. Tests whose IR version or opset the installed onnxruntime refuses (IR > 13,
opset > 26) are left out, as are tests that name no op the backend claims. Prints, per backend:
claimed / passed / failed, then each failure.
"""

from __future__ import annotations

import argparse
import glob
import os
import sys
import time
import warnings
from dataclasses import dataclass, field
from typing import Any

import byoc
import numpy as np
import onnx
import onnxruntime as ort
from byoc.context import resolve_backends
from byoc.patterns import Alt, Op
from byoc.plugins import registry
from onnx import numpy_helper
from onnx.backend.test.loader import load_model_tests

MAX_IR, MAX_OPSET = 13, 26  # what onnxruntime 1.31 accepts


@dataclass
class Result:
    """What one backend did with the node tests."""

    backend: str
    claimed: int = 0
    passed: int = 0
    failures: list[tuple[str, str]] = field(default_factory=list)
    not_loaded: list[tuple[str, str]] = field(default_factory=list)  # byoc refused the model
    # failed where onnxruntime alone fails too (its outputs are not the test's either)
    ort_fails: list[tuple[str, str]] = field(default_factory=list)

    @property
    def failed(self) -> int:
        return len(self.failures)

    def summary(self) -> str:
        share = 100.0 * self.passed / self.claimed if self.claimed else 100.0
        return (
            f"{self.backend}: claimed {self.claimed}, passed {self.passed} ({share:.1f}%), "
            f"failed {self.failed}; {len(self.not_loaded)} "
            "test model(s) byoc or onnxruntime could not load; "
            f"{len(self.ort_fails)} failed by onnxruntime alone too"
        )


def _op_types(pattern: Any) -> set[str]:
    if isinstance(pattern, Alt):
        return set().union(*(_op_types(p) for p in pattern.options))
    if isinstance(pattern, Op):
        return set(pattern.op_types).union(*(_op_types(p) for p in pattern.inputs or ()))
    return set()


def claimable_ops(backend: str) -> set[str]:
    """Op types the backend might claim: its single ops and every op its patterns name."""
    config = byoc.load_config({"backends": [backend]})
    active, skipped = resolve_backends(config, registry())
    if not active:
        raise SystemExit(f"backend '{backend}' cannot be used: {skipped.get(backend)}")
    table = active[0].table
    ops = set(registry().supported_ops(backend, table))
    for _, pattern, _ in registry().pattern_table(backend, table):
        ops |= _op_types(pattern)
    return ops


def _read(path: str) -> np.ndarray:
    tensor = onnx.TensorProto()
    with open(path, "rb") as fh:
        tensor.ParseFromString(fh.read())
    return numpy_helper.to_array(tensor)


def _runnable(model: onnx.ModelProto) -> bool:
    opset = max((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), default=1)
    return model.ir_version <= MAX_IR and opset <= MAX_OPSET


def _ort_refuses(model: onnx.ModelProto) -> str | None:
    """Why onnxruntime itself cannot run the model (then no fallback can), or None."""
    try:
        ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    except Exception as exc:
        return f"onnxruntime refuses the model: {' '.join(str(exc).split())[:200]}"
    return None


def _ort_fails(case: Any) -> bool:
    """onnxruntime alone does not reproduce the test's outputs either (or cannot run them)."""
    session = ort.InferenceSession(os.path.join(case.model_dir, "model.onnx"))
    names = [i.name for i in session.get_inputs()]
    try:
        for feeds, want in _data_sets(case, names):
            for got, expected in zip(session.run(None, feeds), want, strict=True):
                if not np.allclose(got, expected, rtol=case.rtol, atol=case.atol):
                    return True
    except Exception:
        return True
    return False


def run_one(case: Any, backend: str, config: dict[str, Any]) -> tuple[str, str]:
    """Run one node test: returns (outcome, message); outcome is unclaimed, unloaded, pass,
    fail or ort_fails."""
    outcome, message = _run(case, backend, config)
    if outcome == "fail":
        refused = _ort_refuses(onnx.load(os.path.join(case.model_dir, "model.onnx")))
        if refused:
            return "unloaded", refused
        if message.startswith("AssertionError") and _ort_fails(case):
            return "ort_fails", message
    return outcome, message


def _data_sets(case: Any, names: list[str]) -> list[tuple[dict[str, np.ndarray], list[Any]]]:
    """The test's (inputs by name, expected outputs), one pair per data set."""
    found = []
    for data_set in sorted(glob.glob(os.path.join(case.model_dir, "test_data_set_*"))):
        inputs = [_read(p) for p in sorted(glob.glob(os.path.join(data_set, "input_*.pb")))]
        want = [_read(p) for p in sorted(glob.glob(os.path.join(data_set, "output_*.pb")))]
        found.append((dict(zip(names, inputs, strict=True)), want))
    return found


def _run(case: Any, backend: str, config: dict[str, Any]) -> tuple[str, str]:
    model = onnx.load(os.path.join(case.model_dir, "model.onnx"))
    init = {t.name for t in model.graph.initializer}
    names = [v.name for v in model.graph.input if v.name not in init]
    try:  # sequences and optionals are other protos: byoc's inputs are tensors
        data_sets = _data_sets(case, names)
    except Exception as exc:
        return "unloaded", f"test data that is not a tensor: {exc}"
    try:  # as a user compiles it: with the test's inputs as the measurement inputs
        compiled = byoc.compile(model, config, inputs=data_sets[0][0] if data_sets else None)
    except Exception as exc:
        message = " ".join(str(exc).split())
        return "fail", f"compile: {type(exc).__name__}: {message[:300]}"
    if not any(s.unit.backend == backend for s in compiled.steps):
        return "unclaimed", ""
    try:
        for feeds, want in data_sets:
            got = compiled.run(feeds)
            for out, expected in zip(compiled.outputs, want, strict=True):
                value = got[out]
                if value.dtype != expected.dtype:
                    return "fail", f"output {out}: dtype {value.dtype}, expected {expected.dtype}"
                np.testing.assert_allclose(
                    value, expected, rtol=case.rtol, atol=case.atol, err_msg=f"output {out}"
                )
    except Exception as exc:
        message = " ".join(str(exc).split())
        return "fail", f"{type(exc).__name__}: {message[:300]}"
    return "pass", ""


def run_backend(backend: str, pattern: str | None = None, verbose: bool = False) -> Result:
    """Run every applicable node test with only ``backend`` enabled."""
    ort.set_default_logger_severity(3)  # onnxruntime's own warnings about the test models
    # one-op test models: keep what the backend's cost model would send back to onnxruntime
    config = {
        "backends": [backend],
        "compile": {"placement": "static"},
        "backend": {backend: {"min_partition_nodes": 1, "prune": False}},
    }
    ops = claimable_ops(backend)
    result = Result(backend)
    for case in sorted(load_model_tests(kind="node"), key=lambda c: c.name):
        if pattern and pattern not in case.name:
            continue
        model = onnx.load(os.path.join(case.model_dir, "model.onnx"), load_external_data=False)
        if not _runnable(model) or not {n.op_type for n in model.graph.node} & ops:
            continue
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            outcome, message = run_one(case, backend, config)
        if outcome == "unloaded":
            result.not_loaded.append((case.name, message))
        elif outcome == "ort_fails":
            result.ort_fails.append((case.name, message))
        elif outcome != "unclaimed":
            result.claimed += 1
            if outcome == "pass":
                result.passed += 1
            else:
                result.failures.append((case.name, message))
        if verbose and outcome != "unclaimed":
            print(f"  {case.name}: {outcome} {message}")
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", action="append", required=True, help="repeat for several")
    parser.add_argument("-k", dest="pattern", help="only tests whose name contains this")
    parser.add_argument("-v", "--verbose", action="store_true", help="print every claimed test")
    parser.add_argument("--show-unloaded", action="store_true", help="list models byoc refused")
    args = parser.parse_args(argv)
    worst = 100.0
    for backend in args.backend:
        start = time.perf_counter()
        result = run_backend(backend, args.pattern, args.verbose)
        print(f"{result.summary()}  [{time.perf_counter() - start:.1f} s]")
        for name, message in result.failures:
            print(f"  FAIL {name}: {message}")
        if args.show_unloaded:
            for name, message in result.not_loaded:
                print(f"  NOT LOADED {name}: {message[:200]}")
        if result.claimed:
            worst = min(worst, 100.0 * result.passed / result.claimed)
    return 0 if worst >= 99.0 else 1


if __name__ == "__main__":
    sys.exit(main())
