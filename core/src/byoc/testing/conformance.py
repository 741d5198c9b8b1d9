"""The conformance suite every byoc backend plugin runs in its own tests.

In your plugin's ``tests/test_conformance.py``::

    import pytest
    from byoc.testing.conformance import *  # noqa: F403  (the suite's tests and fixtures)

    @pytest.fixture
    def backend_name() -> str:
        return "mybackend"

Override ``backend_config`` (the byoc config, a dict) or ``backend_tolerance`` (rtol, atol) the
same way when your backend needs options or looser comparisons. The suite checks that:

- every op type the backend claims, for which ``byoc.testing.ops.OP_CASES`` has a representative
  node, compiles and matches onnxruntime (one test over the claimed ops: nothing is generated,
  or skipped, for ops the backend does not claim; ops without a case are listed in a skip, and
  representative nodes the backend refuses in warnings);
- every pattern of its pattern table forms its composite on a graph built from the pattern,
  compiles and matches onnxruntime (patterns that cannot be built are reported as warnings);
- artifacts survive serialize -> deserialize and run the same, and damaged bytes raise
  ``byoc.ArtifactError``;
- an op it does not claim falls back to onnxruntime, values flowing between the two;
- ``run`` gives the same results from many threads at once;
- the backend is listed by ``byoc backends --json`` with the ops it claims.
"""

from __future__ import annotations

import json
import subprocess
import sys
import warnings
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import helper

import byoc
from byoc.errors import ArtifactError
from byoc.pipeline import resolve_backends
from byoc.plugins import registry
from byoc.testing.kit import assert_matches_onnxruntime
from byoc.testing.ops import OP_CASES, pattern_model, single_op_model
from byoc.units import create_runtime

__all__ = [
    "backend_config",
    "backend_tolerance",
    "conformance_backend",
    "test_backend_is_listed",
    "test_claimed_ops_match_onnxruntime",
    "test_claimed_ops_without_a_case",
    "test_damaged_artifacts_are_refused",
    "test_patterns_match_onnxruntime",
    "test_run_is_thread_safe",
    "test_serialize_deserialize_runs_the_same",
    "test_unclaimed_op_falls_back_to_onnxruntime",
]

_UNARY = ["Sin", "Cos", "Softsign", "Neg", "Abs", "Exp", "Tanh", "Sigmoid", "Relu", "Identity"]


@pytest.fixture
def conformance_backend(backend_name: str) -> str:
    """``backend_name`` checked: installed (else the test fails) and available (else skips)."""
    reg = registry()
    if backend_name not in reg.backends:
        pytest.fail(
            f"backend '{backend_name}' is not installed (installed: {', '.join(reg.backends)}); "
            "is its entry point in the group 'byoc.backends'?"
        )
    reason = reg.backends[backend_name].unavailable_reason
    if reason is not None:
        pytest.skip(f"backend '{backend_name}' is unavailable: {reason}")
    return backend_name


@pytest.fixture
def backend_config(conformance_backend: str) -> dict[str, Any]:
    """The byoc config the suite uses: only this backend, keeping one-node partitions (the
    suite's graphs are small) and every partition it claims (static placement: the suite
    checks the backend's kernels, not whether they beat onnxruntime). Override to set its
    options."""
    return {
        "backends": [conformance_backend],
        "backend": {conformance_backend: {"min_partition_nodes": 1, "prune": False}},
        "compile": {"placement": "static"},
    }


@pytest.fixture
def backend_tolerance() -> tuple[float, float]:
    """(rtol, atol) for comparisons with onnxruntime. Override for looser backends."""
    return 1e-4, 1e-5


def _table(config: Mapping[str, Any], backend: str) -> dict[str, Any]:
    active, _ = resolve_backends(byoc.load_config(config), registry())
    return next(a.table for a in active if a.name == backend)


def _claimed(config: Mapping[str, Any], backend: str) -> dict[str, Any]:
    return registry().supported_ops(backend, _table(config, backend))


def _why_not(plan: byoc.Plan, node: str, backend: str) -> str:
    reasons = [r for b, r in plan.decisions[node].refusals if b in (backend, "*")]
    return "; ".join(reasons) or "no reason given"


# -- single ops -------------------------------------------------------------------------------


def test_claimed_ops_match_onnxruntime(
    conformance_backend: str,
    backend_config: dict[str, Any],
    backend_tolerance: tuple[float, float],
) -> None:
    """A representative node of each claimed op type is claimed and matches onnxruntime; the
    op types whose representative node the backend refuses are reported as warnings."""
    claimed = sorted(set(_claimed(backend_config, conformance_backend)) & set(OP_CASES))
    if not claimed:
        pytest.skip("the backend claims none of the op types byoc.testing.ops can build")
    rtol, atol = backend_tolerance
    failures, refused = [], []
    for op_type in claimed:
        model, feeds = single_op_model(op_type)
        plan = byoc.partition(model, backend_config)
        if not plan.partitions:
            why = _why_not(plan, model.graph.node[0].name, conformance_backend)
            refused.append(f"{op_type}: the representative node was refused: {why}")
            continue
        try:
            assert_matches_onnxruntime(model, backend_config, feeds, rtol=rtol, atol=atol)
        except Exception as exc:  # a mismatch (AssertionError) or a crash: both are failures
            failures.append(f"{op_type}: {type(exc).__name__}: {exc}")
    for note in refused:
        warnings.warn(f"conformance, backend {conformance_backend}: {note}", stacklevel=1)
    assert len(refused) < len(claimed), "the backend refused every representative node it claims"
    assert not failures, "claimed ops that do not match onnxruntime:\n" + "\n".join(failures)


def test_claimed_ops_without_a_case(
    conformance_backend: str, backend_config: dict[str, Any]
) -> None:
    """Lists (as a skip) the claimed op types the suite has no representative node for."""
    missing = sorted(set(_claimed(backend_config, conformance_backend)) - set(OP_CASES))
    if missing:
        pytest.skip(f"no representative node (byoc.testing.ops.OP_CASES) for: {', '.join(missing)}")


# -- patterns ---------------------------------------------------------------------------------


def test_patterns_match_onnxruntime(
    conformance_backend: str,
    backend_config: dict[str, Any],
    backend_tolerance: tuple[float, float],
) -> None:
    """Each pattern forms its composite on a graph built from it, and matches onnxruntime."""
    table = registry().pattern_table(
        conformance_backend, _table(backend_config, conformance_backend)
    )
    if not table:
        pytest.skip("the backend has no patterns")
    rtol, atol = backend_tolerance
    failures, notes = [], []
    for name, pattern, _check in table:
        try:
            model, feeds = pattern_model(pattern)
        except LookupError as exc:
            notes.append(f"{name}: not built ({exc})")
            continue
        try:
            report = byoc.compare(model, backend_config, feeds, rtol=rtol, atol=atol)
        except Exception as exc:
            failures.append(f"{name}: {type(exc).__name__}: {exc}")
            continue
        formed = {c.name for p in report.plan.partitions for c in p.composites}
        if name not in formed:
            root = model.graph.node[-1].name
            notes.append(f"{name}: not formed: {_why_not(report.plan, root, conformance_backend)}")
        if not report.passed:
            failures.append(f"{name}:\n{report.table()}")
    for note in notes:
        warnings.warn(f"conformance, backend {conformance_backend}: pattern {note}", stacklevel=1)
    assert not failures, "patterns that do not match onnxruntime:\n" + "\n".join(failures)


# -- artifacts --------------------------------------------------------------------------------


def _claimed_example(config: Mapping[str, Any], backend: str) -> tuple[onnx.ModelProto, Any]:
    """A one-op model whose node the backend claims, and inputs for it."""
    claimed = _claimed(config, backend)
    for op_type in [*_UNARY, "Add", "Conv", "MatMul", "Gemm", *sorted(OP_CASES)]:
        if op_type in claimed and op_type in OP_CASES:
            model, feeds = single_op_model(op_type)
            if byoc.partition(model, config).partitions:
                return model, feeds
    pytest.skip("the backend claims none of the ops byoc.testing.ops can build")


def test_serialize_deserialize_runs_the_same(
    conformance_backend: str, backend_config: dict[str, Any]
) -> None:
    """Every partition's artifact, serialized and deserialized, runs with the same results."""
    model, feeds = _claimed_example(backend_config, conformance_backend)
    compiled = byoc.compile(model, backend_config)
    want = compiled.run(feeds)
    reg = registry()
    table = _table(backend_config, conformance_backend)
    for step in compiled.steps:
        if step.unit.backend != conformance_backend:
            continue
        data = reg.hook.byoc_serialize(backend=conformance_backend, artifact=step.artifact)
        assert isinstance(data, bytes), f"byoc_serialize returned {type(data).__name__}, not bytes"
        artifact = reg.hook.byoc_deserialize(backend=conformance_backend, data=data)
        assert artifact is not None, "byoc_deserialize returned None for the backend's own bytes"
        assert reg.hook.byoc_serialize(backend=conformance_backend, artifact=artifact) == data
        step.runtime = create_runtime(reg, conformance_backend, step.unit.name, artifact, table)
    got = compiled.run(feeds)
    for name, value in want.items():
        np.testing.assert_array_equal(got[name], value, err_msg=f"output {name}")


def test_damaged_artifacts_are_refused(conformance_backend: str) -> None:
    """Bytes the backend did not write make ``byoc_deserialize`` raise ``byoc.ArtifactError``."""
    hook = registry().hook
    for data in [b"", b"\x00\xff\xfe not an artifact \x00", bytes(range(256)) * 4]:
        with pytest.raises(ArtifactError):
            hook.byoc_deserialize(backend=conformance_backend, data=data)


# -- the fallback, threads, discovery ---------------------------------------------------------


def test_unclaimed_op_falls_back_to_onnxruntime(
    conformance_backend: str,
    backend_config: dict[str, Any],
    backend_tolerance: tuple[float, float],
) -> None:
    """A node the backend does not claim runs on onnxruntime, fed by the backend's output."""
    model, feeds = _claimed_example(backend_config, conformance_backend)
    claimed = _claimed(backend_config, conformance_backend)
    config: dict[str, Any] = json.loads(json.dumps(backend_config))
    used = {n.op_type for n in model.graph.node}
    op_type = next((u for u in _UNARY if u not in claimed), None)
    if op_type is None:  # it claims every candidate: forbid one the example does not use
        op_type = next(u for u in _UNARY if u not in used)
        table = config.setdefault("backend", {}).setdefault(conformance_backend, {})
        table["exclude_ops"] = [*table.get("exclude_ops", []), op_type]
    first = model.graph.output[0].name
    model.graph.node.append(helper.make_node(op_type, [first], ["unclaimed_out"], name="unclaimed"))
    model.graph.output.append(helper.make_empty_tensor_value_info("unclaimed_out"))
    model = onnx.shape_inference.infer_shapes(model)
    rtol, atol = backend_tolerance
    report = assert_matches_onnxruntime(model, config, feeds, rtol=rtol, atol=atol)
    assert "unclaimed" in report.plan.fallback_nodes, report.plan.table()
    if not report.plan.partitions:  # e.g. a prune hook that finds one node not worth it now
        why = _why_not(report.plan, model.graph.node[0].name, conformance_backend)
        pytest.skip(f"the claimed node went back to onnxruntime too: {why}")
    assert [p.backend for p in report.plan.partitions] == [conformance_backend]


def test_run_is_thread_safe(conformance_backend: str, backend_config: dict[str, Any]) -> None:
    """``run`` from 8 threads at once gives each caller its own, correct results."""
    model, feeds = _claimed_example(backend_config, conformance_backend)
    compiled = byoc.compile(model, backend_config)
    rng = np.random.default_rng(1)
    batches = [
        {
            k: (v + rng.standard_normal(v.shape).astype(v.dtype) if v.dtype.kind == "f" else v)
            for k, v in feeds.items()
        }
        for _ in range(16)
    ]
    want = [compiled.run(b) for b in batches]
    with ThreadPoolExecutor(8) as pool:
        got = list(pool.map(compiled.run, batches))
    for w, g in zip(want, got, strict=True):
        for name in w:
            np.testing.assert_array_equal(g[name], w[name])


def test_backend_is_listed(conformance_backend: str) -> None:
    """``byoc backends --json`` lists the backend as available, with the ops it claims."""
    done = subprocess.run(
        [sys.executable, "-m", "byoc.cli", "backends", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    rows = {r["name"]: r for r in json.loads(done.stdout)}
    assert conformance_backend in rows, f"not listed: {sorted(rows)}"
    row = rows[conformance_backend]
    assert row["available"], row["reason"]
    defaults = byoc.Config().backend_table(
        conformance_backend, registry().backends[conformance_backend].options
    )
    assert row["ops"] == sorted(registry().supported_ops(conformance_backend, defaults))
