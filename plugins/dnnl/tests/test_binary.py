"""dnnl: the binary kind: Add, Sub, Mul, Div with broadcasting."""

from __future__ import annotations

import byoc
import numpy as np
import pytest
from byoc.testing import assert_matches_onnxruntime
from byoc.testing.build import make_model, node

from .helpers import DNNL, MODES, claimed, conv_stem, dnnl_step, rand


@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div"])
@pytest.mark.parametrize("other", ["channel", "full", "scalar", "row", "input_first"])
def test_binary_ops_with_broadcasting(op: str, other: str) -> None:
    nodes, consts = conv_stem()
    inputs: dict = {"x": [1, 3, 10, 12]}
    b = {"channel": rand(8, 1, 1), "scalar": np.float32(1.5), "row": rand(12)}.get(other)
    if other in ("full", "input_first"):
        inputs["z"] = [1, 8, 10, 12] if other == "full" else [8, 1, 1]
    else:
        consts["c"] = b if op != "Div" else np.abs(b) + 0.5  # type: ignore[operator]
    operand = "z" if "z" in inputs else "c"
    args = [operand, "h"] if other == "input_first" and op != "Div" else ["h", operand]
    model = make_model([*nodes, node(op, args, "y")], inputs, ["y"], consts)
    claimed(assert_matches_onnxruntime(model, DNNL), op)


def test_a_div_by_a_subnormal_is_not_folded_into_the_weights() -> None:
    """Dividing by a number whose inverse overflows float32 (1e-40, scalar or per channel)
    stays a division (a binary post-op): folded, the weights would hold inf and 0 / v would
    read NaN. A normal divisor folds into the convolution's weights."""
    nodes, consts = conv_stem()
    tiny = np.float32(1e-40)
    consts |= {"s": tiny, "v": np.full((1, 8, 1, 1), tiny), "n": np.float32(4.0)}
    for divisor, post_ops in (("s", ["div"]), ("v", ["div"]), ("n", [])):
        nodes_d = [*nodes, node("Div", ["h", divisor], "y")]
        model = make_model(nodes_d, {"x": [1, 3, 10, 12]}, ["y"], consts)
        step = dnnl_step(byoc.compile(model, {**DNNL, "compile": {"placement": "static"}}))
        (conv,) = [n for n in step.artifact.graph["nodes"] if n["op"] == "kernel"]
        assert [p["alg"] for p in conv["post_ops"]] == post_ops, divisor
        assert all(np.isfinite(w).all() for w in step.artifact.weights.values()), divisor


@pytest.mark.parametrize("mode", MODES, ids=["json", "c"])
@pytest.mark.parametrize("shape", [[2, 3, 1, 1], [4, 8, 1], [2, 3, 1, 1, 1], [1, 3, 1, 1]])
def test_per_channel_binaries_over_a_batch_of_single_values(shape: list[int], mode: dict) -> None:
    """Mul then Add by per-channel constants over (N > 1, C, 1, ...): oneDNN 3.2's binary
    primitive applied the Add, fused as a post-op, wrongly (0.2 off; random graphs found it,
    through an InstanceNormalization of 1x1 images). It is a kernel of its own there."""
    per_channel = [shape[1]] + [1] * (len(shape) - 2)
    model = make_model(
        [
            node("Relu", ["x"], "r"),
            node("Mul", ["r", "s"], "m"),
            node("Add", ["m", "b"], "y"),
            node("InstanceNormalization", ["x", "scale", "bias"], "i"),
        ],
        {"x": shape},
        ["y", "i"],
        {
            "s": rand(*per_channel),
            "b": rand(*per_channel),
            "scale": rand(shape[1]),
            "bias": rand(shape[1]),
        },
    )
    keep = {"backend": {"dnnl": {"prune": False, **mode.get("backend", {}).get("dnnl", {})}}}
    claimed(assert_matches_onnxruntime(model, {**DNNL, **keep}), "Add")
