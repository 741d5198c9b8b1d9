"""Pairs of nodes that OpenVINO's CPU plugin fuses or rewrites into something else than ONNX
computes, or crashes on: the node of the pair named here stays on onnxruntime."""

from __future__ import annotations

from typing import Any

import numpy as np
from byoc import NodeView

from byoc_openvino.rules.base import Rule
from byoc_openvino.rules.widths import Widths

UNARIES = frozenset(
    {
        "Relu", "LeakyRelu", "Elu", "Selu", "Celu", "Sigmoid", "HardSigmoid", "HardSwish",
        "Tanh", "Abs", "Neg", "Exp", "Log", "Sqrt", "Erf", "Clip", "Softplus", "Gelu", "Mish",
    }
)  # fmt: skip
BINARIES = ("Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "PRelu")
_REDUCES = (
    "GlobalAveragePool", "GlobalMaxPool", "ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin",
    "ReduceProd", "ReduceL1", "ReduceL2", "ReduceSumSquare", "ReduceLogSum", "ReduceLogSumExp",
)  # fmt: skip
# Functions with a jump at exact values: Sign and the comparisons (with a constant; at 0 they
# are exact when the zero point is 0), Floor, Ceil, Round and Shrink.
_ZERO_STEPS = ("Sign", "Equal", "Greater", "Less", "GreaterOrEqual", "LessOrEqual")
_STEPS = frozenset({"Floor", "Ceil", "Round", "Shrink", *_ZERO_STEPS})
_CHAIN = 8  # elementwise ops between two nodes of a pair that the rules follow


def _pad_into_deconv(node: NodeView, widths: Widths) -> dict[str, Any] | None:
    """OpenVINO folds a zero Pad into the padding of a strided ConvTranspose that reads it,
    where padding crops: ONNX's 9x9 output comes out 7x7 (a 3x3 input padded by 1, kernel 4,
    stride 2, pads 2)."""
    if node.attrs.get("mode", "constant") != "constant":
        return None
    given = len(node.inputs) > 2 and bool(node.inputs[2])
    value = node.const(2) if given else node.attrs.get("value", 0.0)  # opset < 11: attributes
    if value is None or np.any(np.asarray(value) != 0):
        return None
    graph = node.graph
    for i in graph.consumers.get(node.outputs[0], ()):
        reader = graph.nodes[i]
        strides = next((list(a.ints) for a in reader.attribute if a.name == "strides"), [])
        if reader.op_type == "ConvTranspose" and any(s > 1 for s in strides):
            return {"reader": reader}
    return None


def _padded_strided_pointwise(node: NodeView, widths: Widths) -> bool:
    """A 1x1 convolution with a stride and padding: OpenVINO moves the stride in front of it
    (onto the Relu or LayerNormalization before) and loses the padding (3x9 comes out 4x10,
    and the compile fails)."""
    a = node.attrs
    kernel = list(a.get("kernel_shape", []))
    weights = node.input_type(1)
    if not kernel and weights is not None and weights.shape is not None:
        kernel = list(weights.shape[2:])
    strided = any(int(v) > 1 for v in a.get("strides", []))
    return bool(kernel and all(k == 1 for k in kernel) and strided and any(a.get("pads", [])))


def _reduced_signal(node: NodeView, widths: Widths) -> dict[str, Any] | None:
    """A reduction over the last axis of (N > 1, C, L), read by a binary op against a
    per-channel operand (the same for every n) or by a BatchNormalization, directly or through
    elementwise ops: OpenVINO fuses the chain and broadcasts that operand along the wrong axis
    (a mean over time times a (C, 1) constant: 1.25 off). Rank 4 and full-size operands are
    right."""
    t = node.input_type(0)
    if t is None or t.shape is None or len(t.shape) != 3 or t.shape[0] == 1:
        return None
    if node.op_type.startswith("Reduce"):
        given = node.const(1) if len(node.inputs) > 1 and node.inputs[1] else None
        axes = given if given is not None else node.attrs.get("axes", [0, 1, 2])
        if 2 not in {int(a) % 3 for a in np.asarray(axes).reshape(-1)}:
            return None
    graph, values = node.graph, [node.outputs[0]]
    for _ in range(_CHAIN):  # the reduction's output, then the elementwise ops reading it
        if not values:
            return None
        out = values.pop()
        rank = len((graph.type_of(out) or t).shape or ())
        for i in graph.consumers.get(out, ()):
            reader = graph.view(i)
            if _per_channel(reader, out, rank):
                return {"reader": reader}
            if reader.op_type in UNARIES or reader.op_type in BINARIES:
                values.append(reader.outputs[0])
    return None


def _per_channel(reader: NodeView, out: str, rank: int) -> bool:
    """``reader`` is a BatchNormalization, or a binary op reading ``out`` (of ``rank``) and an
    operand that is the same for every n but not for every channel (a scalar has neither)."""
    per_channel = reader.op_type == "BatchNormalization"
    if reader.op_type in BINARIES:
        for k, name in enumerate(reader.inputs):
            other = reader.input_type(k) if name != out else None
            if other is None or other.shape is None:  # in real exports: full-size ones
                continue
            shape = list(other.shape)
            if len(shape) <= rank:
                shape = [1] * (rank - len(shape)) + shape
                per_channel |= rank > 1 and shape[0] == 1 and shape[1] != 1
    return per_channel


def _prelu_after_dense(node: NodeView, widths: Widths) -> dict[str, Any] | None:
    """A PRelu of rank 4 or more whose slope varies along axis 1, after a MatMul or Gemm
    (through elementwise ops): OpenVINO fuses it into the dense layer as a per-output-channel
    post-op, the last axis, and fails to compile ("data size: 32 OC: 5")."""
    t, slope = node.input_type(0), node.input_type(1)
    if t is None or t.shape is None or len(t.shape) < 4:
        return None
    if slope is not None and slope.shape is not None:
        aligned = [1] * (len(t.shape) - len(slope.shape)) + list(slope.shape)
        if aligned[1] == 1:
            return None
    graph, name = node.graph, node.inputs[0]
    for _ in range(8):
        index = graph.producer.get(name)
        if index is None:
            return None
        source = graph.view(index)
        if source.op_type in ("MatMul", "Gemm"):
            return {"source": source}
        computed = [n for n in source.inputs if n and graph.constant(n) is None]
        elementwise = source.op_type in UNARIES or source.op_type in BINARIES
        if not elementwise or len(computed) != 1:
            return None
        name = computed[0]
    return None


def _binary_after_group_norm(node: NodeView, widths: Widths) -> dict[str, Any] | None:
    """A binary op reading a GroupNormalization's output and a tensor another node computes
    (not a constant, not a graph input, not made by a node reading that output, as SiLU's
    Sigmoid is; a deeper dependence is refused too, to be safe): OpenVINO fuses the pair and
    crashes the process compiling it (a segfault in ``compile_model``, rank 3 or 4, any
    groups)."""
    graph = node.graph
    made = {n: graph.producer.get(n) for n in node.inputs if n}
    norms = {
        n
        for n, i in made.items()
        if i is not None and graph.nodes[i].op_type == "GroupNormalization"
    }
    for norm in norms:
        for other, index in made.items():
            if other == norm or index is None or graph.constant(other) is not None:
                continue
            if norm not in graph.nodes[index].input:
                return {"other": other}
    return None


def _step_of_dequantized(node: NodeView, widths: Widths) -> dict[str, Any] | None:
    """A Sign, Floor, Ceil, Round, Shrink or comparison of a dequantized activation, directly or
    through elementwise ops of one computed input: OpenVINO folds the dequantization into its
    neighbours (as q * scale - zero point * scale, and scale times the next constant), so a
    value exactly at a step (0 at the zero point, an integer) comes out an ulp off, 2e-9 where
    onnxruntime has 0, and the result jumps (Sign 1 for 0). The step, the DequantizeLinear and
    the ops between stay on onnxruntime (the step alone would read OpenVINO's value). A Sign or
    comparison is exact when the zero point is 0."""
    graph = node.graph
    jumps = _jumps(node)
    if not (jumps or node.op_type == "DequantizeLinear" or _elementwise(node)):
        return None
    dequantize = node if node.op_type == "DequantizeLinear" else _dequantized(node)
    if dequantize is None or graph.constant(dequantize.inputs[0]) is not None:
        return None  # none, or a weight's: a constant, exact
    step = node if jumps else _step_after(node)  # after the cheap test: float models stop there
    if step is None:
        return None
    point = dequantize.inputs[2] if len(dequantize.inputs) > 2 else ""
    value = graph.constant(point) if point else np.zeros(1)
    if step.op_type in _ZERO_STEPS and value is not None and not np.any(value):
        return None
    return {"step": step, "dequantize": dequantize}


def _jumps(node: NodeView) -> bool:
    """A step function of one computed input (a Shrink without a jump is not one)."""
    if node.op_type not in _STEPS or _computed(node) is None:
        return False
    a = node.attrs
    return node.op_type != "Shrink" or a.get("bias", 0.0) != a.get("lambd", 0.5)


def _computed(node: NodeView) -> str | None:
    """The node's one computed input (the others constants), or None."""
    computed = [n for n in node.inputs if n and node.graph.constant(n) is None]
    return computed[0] if len(computed) == 1 else None


def _elementwise(node: NodeView) -> str | None:
    """The one computed input of an elementwise op, or None."""
    elementwise = node.op_type in UNARIES or node.op_type in BINARIES
    return _computed(node) if elementwise else None


def _dequantized(node: NodeView) -> NodeView | None:
    """The DequantizeLinear that makes the node's computed input, through elementwise ops of
    one computed input, or None."""
    graph, name = node.graph, _computed(node)
    for _ in range(_CHAIN):
        index = graph.producer.get(name) if name else None
        if index is None:
            return None
        source = graph.view(index)
        if source.op_type == "DequantizeLinear":
            return source
        name = _elementwise(source)
    return None


def _step_after(node: NodeView) -> NodeView | None:
    """A step reading the node's output, through elementwise ops of one computed input."""
    graph, frontier = node.graph, [node.index]
    for _ in range(_CHAIN):
        following = []
        for index in frontier:
            for reader in map(graph.view, graph.succ(index)):
                if _jumps(reader):
                    return reader
                if _elementwise(reader):
                    following.append(reader.index)
        frontier = following
    return None


RULES = (
    Rule(
        {"Pad"},
        _pad_into_deconv,
        "a zero Pad read by a strided ConvTranspose ('{reader.name}'): OpenVINO folds it into "
        "the ConvTranspose's padding, which crops (9x9 comes out 7x7)",
    ),
    Rule(
        {"Conv", "ConvInteger"},
        _padded_strided_pointwise,
        "a 1x1 convolution with a stride and padding: OpenVINO moves the stride in front of it "
        "and loses the padding (3x9 comes out 4x10)",
    ),
    Rule(
        _REDUCES,
        _reduced_signal,
        "a reduction over the last axis of a batch of signals read by {reader.op_type} "
        "'{reader.name}' per channel: OpenVINO broadcasts that operand along the wrong axis "
        "(1.25 off)",
    ),
    Rule(
        {"PRelu"},
        _prelu_after_dense,
        "a PRelu with a slope along axis 1 after a dense layer ('{source.name}'): OpenVINO "
        "fuses it as a post-op over the last axis and fails to compile it",
    ),
    Rule(
        {*BINARIES, "Sum", "Mean"},
        _binary_after_group_norm,
        "a {node.op_type} of a GroupNormalization's output and '{other}', which another node "
        "computes: OpenVINO crashes compiling the pair",
    ),
    Rule(
        None,
        _step_of_dequantized,
        "a {step.op_type} ('{step.name}') of a dequantized value ('{dequantize.name}'): "
        "OpenVINO folds the dequantization into its neighbours, and a value exactly at a step "
        "comes out an ulp off (2e-9 for 0)",
    ),
)
