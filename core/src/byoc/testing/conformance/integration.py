"""How the backend fits into byoc: its artifacts survive serialize -> deserialize and damaged
bytes are refused, an op it does not claim falls back to onnxruntime, ``run`` is thread-safe,
and ``byoc backends`` lists it."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import helper

import byoc
from byoc.errors import ArtifactError
from byoc.plugins import registry
from byoc.testing.conformance.checks import UNARY, backend_table, claimed_ops, why_not, why_returned
from byoc.testing.kit import assert_matches_onnxruntime
from byoc.testing.ops import OP_CASES, single_op_model
from byoc.units import create_runtime

# -- artifacts --------------------------------------------------------------------------------


def _claimed_example(config: Mapping[str, Any], backend: str) -> tuple[onnx.ModelProto, Any]:
    """A one-op model whose node the backend claims, and inputs for it."""
    claimed = claimed_ops(config, backend)
    for op_type in [*UNARY, "Add", "Conv", "MatMul", "Gemm", *sorted(OP_CASES)]:
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
    assert why_returned(compiled.plan) is None, why_returned(compiled.plan)
    want = compiled.run(feeds)
    reg = registry()
    hook = reg.route(conformance_backend)
    table = backend_table(backend_config, conformance_backend)
    for step in compiled.steps:
        if step.unit.backend != conformance_backend:
            continue
        data = hook.byoc_serialize(backend=conformance_backend, artifact=step.artifact)
        assert isinstance(data, bytes), f"byoc_serialize returned {type(data).__name__}, not bytes"
        artifact = hook.byoc_deserialize(  # trusted: the bytes must come back whole
            backend=conformance_backend, data=data, trust_native=True
        )
        assert artifact is not None, "byoc_deserialize returned None for the backend's own bytes"
        assert hook.byoc_serialize(backend=conformance_backend, artifact=artifact) == data
        step.runtime = create_runtime(reg, conformance_backend, step.unit.name, artifact, table)
    got = compiled.run(feeds)
    for name, value in want.items():
        np.testing.assert_array_equal(got[name], value, err_msg=f"output {name}")


def test_damaged_artifacts_are_refused(conformance_backend: str) -> None:
    """Bytes the backend did not write make ``byoc_deserialize`` raise ``byoc.ArtifactError``."""
    hook = registry().route(conformance_backend)
    for data in [b"", b"\x00\xff\xfe not an artifact \x00", bytes(range(256)) * 4]:
        with pytest.raises(ArtifactError):
            hook.byoc_deserialize(backend=conformance_backend, data=data, trust_native=False)


# -- the fallback, threads, discovery ---------------------------------------------------------


def test_unclaimed_op_falls_back_to_onnxruntime(
    conformance_backend: str,
    backend_config: dict[str, Any],
    backend_tolerance: tuple[float, float],
) -> None:
    """A node the backend does not claim runs on onnxruntime, fed by the backend's output."""
    model, feeds = _claimed_example(backend_config, conformance_backend)
    claimed = claimed_ops(backend_config, conformance_backend)
    config: dict[str, Any] = json.loads(json.dumps(backend_config))
    used = {n.op_type for n in model.graph.node}
    op_type = next((u for u in UNARY if u not in claimed), None)
    if op_type is None:  # it claims every candidate: forbid one the example does not use
        op_type = next(u for u in UNARY if u not in used)
        table = config.setdefault("backend", {}).setdefault(conformance_backend, {})
        table["exclude_ops"] = [*table.get("exclude_ops", []), op_type]
    first = model.graph.output[0].name
    model.graph.node.append(helper.make_node(op_type, [first], ["unclaimed_out"], name="unclaimed"))
    model.graph.output.append(helper.make_empty_tensor_value_info("unclaimed_out"))
    model = onnx.shape_inference.infer_shapes(model)
    rtol, atol = backend_tolerance
    report = assert_matches_onnxruntime(model, config, feeds, rtol=rtol, atol=atol)
    assert why_returned(report.plan) is None, why_returned(report.plan)
    assert "unclaimed" in report.plan.fallback_nodes, report.plan.table()
    if not report.plan.partitions:  # e.g. a prune hook that finds one node not worth it now
        why = why_not(report.plan, model.graph.node[0].name, conformance_backend)
        pytest.skip(f"the claimed node went back to onnxruntime too: {why}")
    assert [p.backend for p in report.plan.partitions] == [conformance_backend]


def test_run_is_thread_safe(conformance_backend: str, backend_config: dict[str, Any]) -> None:
    """``run`` from 8 threads at once gives each caller its own, correct results."""
    model, feeds = _claimed_example(backend_config, conformance_backend)
    compiled = byoc.compile(model, backend_config)
    assert why_returned(compiled.plan) is None, why_returned(compiled.plan)
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
