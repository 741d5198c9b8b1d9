"""Inputs and nodes at the edges: special values (NaN, infinities, -0.0, subnormals), masks of
-inf into a Softmax, integer limits and division by zero, and nodes onnxruntime refuses."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import pytest
from onnx import helper

import byoc
from byoc.plugins import registry
from byoc.testing.build import IR_VERSION, make_model, node
from byoc.testing.conformance.checks import (
    UNARY,
    backend_table,
    claimed_model,
    claimed_ops,
    difference,
    verdict,
)
from byoc.testing.ops import (
    DIVISORS,
    INTEGER_DTYPES,
    OP_CASES,
    SPECIAL_VALUES,
    edge_feeds,
    integer_case,
    pattern_model,
    single_op_model,
    special_feeds,
)


def test_claimed_ops_on_special_values(
    conformance_backend: str,
    backend_config: dict[str, Any],
    backend_tolerance: tuple[float, float],
    backend_known_failures: dict[tuple[str, str], str],
) -> None:
    """Each claimed op's representative node, and each pattern's graph, matches onnxruntime
    with NaN, +inf, -inf, -0.0 and subnormals in its float inputs: run by the backend itself
    (known failures allowed) and, for a ``finite_only`` backend, as users run it by default
    (partitions whose inputs hold NaN or +-inf run on onnxruntime: no failure allowed)."""
    examples = [
        (op_type, single_op_model(op_type))
        for op_type in sorted(set(claimed_ops(backend_config, conformance_backend)) & set(OP_CASES))
    ]
    table = registry().pattern_table(
        conformance_backend, backend_table(backend_config, conformance_backend)
    )
    for name, pattern, _check in table:
        try:
            examples.append((name, pattern_model(pattern)))
        except LookupError:
            continue  # test_patterns_match_onnxruntime warns about it
    raw = {**backend_config}
    raw["fallback"] = {**raw.get("fallback", {}), "nonfinite_inputs": "backend"}
    guarded = registry().backends[conformance_backend].finite_only
    results: dict[tuple[str, str], str | None] = {}
    unguarded: list[str] = []
    for name, (model, feeds) in examples:
        if not any(v.dtype.kind == "f" for v in feeds.values()):
            continue
        found = claimed_model(model, raw)
        if found is None:
            continue
        for value in SPECIAL_VALUES:
            results[name, value] = difference(
                *found, special_feeds(feeds, value), backend_tolerance
            )
        if guarded and any(results[name, v] for v in SPECIAL_VALUES):
            found = claimed_model(model, backend_config)
            assert found is not None
            for value in SPECIAL_VALUES:
                why = difference(*found, special_feeds(feeds, value), backend_tolerance)
                unguarded += [f"{name} on {value}: {why}"] if why else []
    assert not unguarded, "finite_only, yet by default:\n" + "\n".join(unguarded)
    verdict(results, backend_known_failures)


def _masked_attention(mask: list[int]) -> onnx.ModelProto:
    """``softmax(q @ k' / 4 + mask) @ v`` of x [1, 8, 16]; a mask of shape [1, 8] (keys) is
    unsqueezed to [1, 1, 8] first."""
    rng = np.random.default_rng(0)
    consts = {f"w{n}": rng.standard_normal((16, 16)).astype(np.float32) for n in "qkv"}
    consts |= {"four": np.array(4.0, np.float32), "axis": np.array([1], np.int64)}
    nodes = [node("MatMul", ["x", f"w{n}"], n) for n in "qkv"]
    if len(mask) == 2:
        nodes += [node("Unsqueeze", ["keys", "axis"], "mask")]
    nodes += [
        node("Transpose", ["k"], "kt", perm=[0, 2, 1]),
        node("MatMul", ["q", "kt"], "s"),
        node("Div", ["s", "four"], "s4"),
        node("Add", ["s4", "mask"], "sm"),
        node("Softmax", ["sm"], "p", axis=-1),
        node("MatMul", ["p", "v"], "y"),
    ]
    name = "keys" if len(mask) == 2 else "mask"
    return make_model(nodes, {"x": [1, 8, 16], name: mask}, ["y"], consts)


def test_softmax_masks_may_hold_minus_inf(
    conformance_backend: str,
    backend_config: dict[str, Any],
    backend_tolerance: tuple[float, float],
) -> None:
    """A ``softmax_masks`` backend, as users run it by default: attention whose mask of 0 and
    -inf (padding, causal, a row or every row masked entirely: NaN there) the Add into the
    Softmax reads runs on the backend, not on onnxruntime, and matches onnxruntime; a mask
    holding NaN or +inf runs on onnxruntime and matches it too."""
    if not registry().backends[conformance_backend].softmax_masks:
        pytest.skip("the backend does not declare softmax_masks")
    if not {"MatMul", "Add", "Softmax"} <= set(claimed_ops(backend_config, conformance_backend)):
        pytest.skip("the backend claims no MatMul, Add or Softmax: no attention to check")
    x = np.random.default_rng(1).standard_normal((1, 8, 16)).astype(np.float32)
    padded = np.zeros((1, 8), np.float32)
    padded[:, 5:] = -np.inf
    causal = np.triu(np.full((1, 8, 8), -np.inf, np.float32), 1)
    row = causal.copy()
    row[0, 2] = -np.inf
    cases: dict[tuple[int, ...], dict[str, np.ndarray]] = {
        (1, 8): {"padded": padded, "all masked": np.full((1, 8), -np.inf, np.float32)},
        (1, 8, 8): {"causal": causal, "causal, row 2 masked": row},
    }
    failures = []
    for shape, masks in cases.items():
        model = _masked_attention(list(shape))
        found = claimed_model(model, backend_config)
        assert found is not None, "the backend claims none of the attention"
        compiled, reference = found
        assert not isinstance(compiled, str), compiled
        name = model.graph.input[1].name
        (step,) = [s for s in compiled.steps if s.unit.backend == conformance_backend]
        assert "sm" in step.unit.nodes, compiled.plan and compiled.plan.table()
        for case, mask in masks.items():
            why = difference(compiled, reference, {"x": x, name: mask}, backend_tolerance)
            failures += [f"mask {list(shape)} {case}: {why}"] if why else []
        assert step._fallback is None, "a mask of 0 and -inf ran on onnxruntime"
        for value in (np.nan, np.inf):
            step._fallback = None  # made when onnxruntime first runs the partition
            mask = next(iter(masks.values())).copy()
            mask.flat[0] = value
            why = difference(compiled, reference, {"x": x, name: mask}, backend_tolerance)
            failures += [f"mask {list(shape)} holding {value}: {why}"] if why else []
            assert step._fallback is not None, f"a mask holding {value} ran on the backend"
    assert not failures, "\n".join(failures)


def test_claimed_ops_on_integer_edges(
    conformance_backend: str,
    backend_config: dict[str, Any],
    backend_known_failures: dict[tuple[str, str], str],
) -> None:
    """Each claimed op's representative node made int32 and int64 (where ONNX defines it and
    onnxruntime runs it) matches onnxruntime exactly on the dtype's limits; an integer division
    by zero fails as in onnxruntime."""
    results: dict[tuple[str, str], str | None] = {}
    for op_type in sorted(set(claimed_ops(backend_config, conformance_backend)) & set(OP_CASES)):
        for dtype in INTEGER_DTYPES:
            case = integer_case(op_type, dtype)
            if case is None:
                continue
            model, feeds = single_op_model(op_type, case)
            found = claimed_model(model, backend_config)
            if found is None:
                continue
            divisor = model.graph.node[0].input[DIVISORS[op_type]] if op_type in DIVISORS else None
            edges = edge_feeds(feeds, divisor)
            results[op_type, dtype] = difference(*found, edges, (0.0, 0.0))
            if divisor in feeds:
                zero = {**feeds, divisor: np.zeros_like(feeds[divisor])}
                results[op_type, f"{dtype} / 0"] = difference(*found, zero, (0.0, 0.0))
    verdict(results, backend_known_failures)


def test_nodes_onnxruntime_refuses_are_not_claimed(
    conformance_backend: str,
    backend_config: dict[str, Any],
    backend_known_failures: dict[tuple[str, str], str],
) -> None:
    """A node onnxruntime would refuse stays on onnxruntime (which then reports it): an Add of
    float32 and int32, a node at an opset no ONNX release has, an output of a declared type
    the op does not make."""
    claimed = claimed_ops(backend_config, conformance_backend)
    unary = next((u for u in UNARY if u in claimed), None)
    models = {}
    if "Add" in claimed:
        models["Add", "float32 + int32"] = _node_model("Add", ["x", "i"])
    if unary:
        models[unary, "opset 999"] = _node_model(unary, ["x"], opset=999)
        models[unary, "an output declared int32"] = _node_model(
            unary, ["x"], onnx.TensorProto.INT32
        )
    if not models:
        pytest.skip("the backend claims none of Add, " + ", ".join(UNARY))
    results = {
        key: "claimed, though onnxruntime refuses it" if _claims(model, backend_config) else None
        for key, model in models.items()
    }
    verdict(results, backend_known_failures)


def _claims(model: onnx.ModelProto, config: dict[str, Any]) -> bool:
    try:
        return bool(byoc.partition(model, config).partitions)
    except byoc.ModelError:  # byoc refuses the whole model, before any backend sees it
        return False


def _node_model(
    op_type: str, inputs: list[str], out: int = onnx.TensorProto.FLOAT, opset: int = 17
) -> onnx.ModelProto:
    """One node on float32 'x' and int32 'i' of shape [2, 3], its output declared ``out``."""
    types = {"x": onnx.TensorProto.FLOAT, "i": onnx.TensorProto.INT32}
    graph = helper.make_graph(
        [helper.make_node(op_type, inputs, ["y"], name="node")],
        "refused",
        [helper.make_tensor_value_info(n, types[n], [2, 3]) for n in inputs],
        [helper.make_tensor_value_info("y", out, [2, 3])],
    )
    return helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=IR_VERSION
    )
