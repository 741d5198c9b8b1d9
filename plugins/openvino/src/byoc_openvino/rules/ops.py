"""Ops and op settings OpenVINO's CPU plugin computes otherwise than onnxruntime, and inputs it
needs constant. The settings are the conformance suite's ``OP_VARIANTS``."""

from __future__ import annotations

from typing import Any

import numpy as np
from byoc import NodeView
from byoc.graph import MOVES

from byoc_openvino.rules.base import Rule, always
from byoc_openvino.rules.widths import Widths


def fake_quantize(node: NodeView) -> bool:
    """A QuantizeLinear whose integers only DequantizeLinears read: a rounding of floats to its
    scale's grid, which OpenVINO runs as a FakeQuantize and folds into the int8 kernels around
    it, so it runs there. Where it rounds a near-tie a step otherwise than onnxruntime, the
    dequantized value moves by one step, as onnxruntime's own fused and unfused runs differ by
    (a sum in another order tips a tie): byoc's comparison allows that there
    (``Graph.quantum``), and measured placement returns a partition whose outputs move more.
    The requantization of a Concat's values is not one (``_requantized_concat``)."""
    graph, out = node.graph, node.outputs[0]
    readers = [graph.nodes[i] for i in graph.consumers.get(out, ())]
    return (
        node.op_type == "QuantizeLinear"
        and out not in graph.outputs
        and bool(readers)
        and all(r.op_type == "DequantizeLinear" and r.input[0] == out for r in readers)
        and not _requantized_concat(graph, node.inputs[0])
    )


_MOVED = MOVES | {"Slice"}  # a Slice of everything: OpenVINO removes it


def _requantized_concat(graph: Any, name: str) -> bool:
    """Whether ``name`` is a Concat's output quantized and dequantized (through ops that only
    move values): OpenVINO 2026.4 crashes the process (a segfault) compiling a QuantizeLinear
    of it. Any other graph that crashes it crashes a trial process instead (``trial``)."""
    for op in ("DequantizeLinear", "QuantizeLinear", "Concat"):
        while name in graph.producer and graph.nodes[graph.producer[name]].op_type in _MOVED:
            name = graph.nodes[graph.producer[name]].input[0]
        maker = graph.nodes[graph.producer[name]] if name in graph.producer else None
        if maker is None or maker.op_type != op or not maker.input:
            return False
        name = maker.input[0]
    return True


def _flattening_axis(node: NodeView, widths: Widths) -> dict[str, Any] | None:
    """Before opset 13, Softmax, LogSoftmax and Hardmax normalize over the input flattened to
    2-D at ``axis``; OpenVINO's frontend normalizes over that axis alone (up to 0.93 off
    onnxruntime for axis 1 of a rank-3 input). The two agree only on the last axis."""
    opset = next(
        (o.version for o in node.graph.model.opset_import if o.domain in ("", "ai.onnx")), 13
    )
    t = node.input_type(0)
    if opset >= 13 or t is None or t.shape is None:
        return None
    rank = len(t.shape)
    if int(node.attrs.get("axis", 1)) % max(rank, 1) == rank - 1:
        return None
    return {"opset": opset, "axis": node.attrs.get("axis", 1)}


def _hardmax_ties(node: NodeView, widths: Widths) -> bool:
    """OpenVINO's Hardmax marks another of equal maxima than the first along an axis of 8 or
    more (ArgMax and ArgMin pick the first, as ONNX says)."""
    t = node.input_type(0)
    size = None if t is None or t.shape is None else t.shape[int(node.attrs.get("axis", -1))]
    return not (isinstance(size, int) and size < 8)


def _indices_read(node: NodeView, widths: Widths) -> bool:
    """OpenVINO's TopK breaks ties otherwise than ONNX (equal values: the lower index first):
    of 1000 picked from 4000 values with ties, other indices. A sorted TopK whose indices
    nothing reads gives the same values, and is claimed."""
    indices = node.outputs[1] if len(node.outputs) > 1 else ""
    return bool(indices) and (indices in node.graph.consumers or indices in node.graph.outputs)


def _keeps_aspect_ratio(node: NodeView, widths: Widths) -> dict[str, Any] | None:
    policy = node.attrs.get("keep_aspect_ratio_policy", "stretch")
    return None if policy == "stretch" else {"policy": policy}


def _peepholes(node: NodeView, widths: Widths) -> bool:
    """An LSTM given peepholes (input P) that are not all zero."""
    given = len(node.inputs) > 7 and bool(node.inputs[7])
    peepholes = node.const(7) if given else None
    return given and (peepholes is None or bool(np.any(peepholes)))


def _storage_order_indices(node: NodeView, widths: Widths) -> bool:
    indices = len(node.outputs) > 1 and bool(node.outputs[1])
    return indices and bool(int(node.attrs.get("storage_order", 0)))


def _ceil_window_dropped(node: NodeView, widths: Widths) -> bool:
    """A pool with ceil_mode=1 whose last window ceil_mode adds would start past the input and
    its begin padding: ONNX (and onnxruntime) drop that window, OpenVINO keeps it (a 2x2 input,
    kernel 1, stride 2: 1x1 against OpenVINO's 2x2). True also when the input shape is not
    known."""
    a = node.attrs
    auto_pad = str(a.get("auto_pad", "NOTSET"))
    if not int(a.get("ceil_mode", 0)) or auto_pad not in ("NOTSET", "VALID"):
        return False
    t = node.input_type(0)
    if t is None or not t.is_static or t.shape is None:
        return True
    spatial = [int(d) for d in t.shape[2:]]  # type: ignore[arg-type]
    kernel = [int(k) for k in a.get("kernel_shape", [])]
    n = len(spatial)
    strides = [int(v) for v in a.get("strides", [1] * n)]
    dilations = [int(v) for v in a.get("dilations", [1] * n)]
    pads = [int(v) for v in a.get("pads", [0] * 2 * n)]
    if auto_pad == "VALID":
        pads = [0] * 2 * n
    for j, size in enumerate(spatial):
        span = size + pads[j] + pads[j + n] - ((kernel[j] - 1) * dilations[j] + 1)
        out = -(-span // strides[j]) + 1
        if (out - 1) * strides[j] >= size + pads[j]:
            return True
    return False


def _ceil_counts_pads(node: NodeView, widths: Widths) -> bool:
    a = node.attrs
    counted = int(a.get("count_include_pad", 0)) and any(a.get("pads", []))
    return bool(int(a.get("ceil_mode", 0)) and counted)


# Inputs OpenVINO needs constant (by op type). Computed at run time, most set the output's
# shape, and OpenVINO compiles the node with an open one (which the partition's static
# signature refuses); so does Trilu for its k, Dropout's ratio is dropped from the compiled
# model's inputs, and Tile writes garbage (repeats (7, 6, 4, 2) over a rank-4 input).
_CONST_INPUTS: dict[str, tuple[int, ...]] = {
    "Reshape": (1,), "Expand": (1,), "Tile": (1,), "ConstantOfShape": (0,),
    "Slice": (1, 2, 3, 4), "Pad": (1, 3), "Resize": (2, 3), "Upsample": (1,),
    "Squeeze": (1,), "Unsqueeze": (1,), "Split": (1,), "OneHot": (1,), "Range": (0, 1, 2),
    "TopK": (1,), "CenterCropPad": (1, 2), "Trilu": (1,), "Dropout": (1, 2),
    **{op: (1,) for op in ("ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd",
                           "ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp",
                           "ReduceSumSquare")},
}  # fmt: skip


def _computed_const_input(node: NodeView, widths: Widths) -> dict[str, Any] | None:
    """The first input of ``_CONST_INPUTS`` the node reads that is computed at run time."""
    for i in _CONST_INPUTS[node.op_type]:
        if i < len(node.inputs) and node.inputs[i] and node.const(i) is None:
            return {"name": node.inputs[i]}
    return None


RULES = (
    Rule(
        {"LRN"},
        always,
        "OpenVINO {device}'s LRN gives wrong values (0.6 off onnxruntime's) when another op "
        "reads its output (conformance suite, OpenVINO 2026.4)",
    ),
    Rule(
        {"QuantizeLinear"},
        lambda node, _: not fake_quantize(node),
        "OpenVINO {device}'s QuantizeLinear adds the zero point before it rounds, in float32: "
        "x / scale = 10.500001 with zero point 128 becomes 138.5 and rounds to even, a step "
        "below onnxruntime's (a QDQ MnasNet 20 output steps off, OpenVINO 2026.4; "
        '[backend.openvino] int8 = "own" accepts it, guarded)',
        own_int8=True,
    ),
    Rule(
        {"QuantizeLinear"},
        lambda node, _: _requantized_concat(node.graph, node.inputs[0]),
        "a QuantizeLinear of a Concat's quantized and dequantized values: OpenVINO 2026.4 "
        "crashes the process compiling it (a segfault)",
    ),
    Rule(
        {"QLinearConv"},
        always,
        "OpenVINO {device}'s QLinearConv with per-channel weight scales comes out up to 71 "
        "output steps off onnxruntime's, which are the exact ones, and with one scale it "
        "requantizes as its QuantizeLinear does, a step off at rounding ties (a QOperator "
        "ResNet-18: 0.56 off, OpenVINO 2026.4)",
    ),
    Rule(
        {"DynamicQuantizeLinear"},
        always,
        "OpenVINO {device}'s DynamicQuantizeLinear computes its scale as (max - min) * "
        "(1 / 255), an ulp off onnxruntime's (max - min) / 255, which moves values across a "
        "rounding step (a T5 encoder quantized with quantize_dynamic: 0.022 off onnxruntime, "
        'OpenVINO 2026.4; [backend.openvino] int8 = "own" accepts it, guarded)',
        own_int8=True,
    ),
    Rule(
        {"Softmax", "LogSoftmax", "Hardmax"},
        _flattening_axis,
        "{node.op_type} of opset {opset} over the input flattened at axis {axis} (not the "
        "last): OpenVINO's frontend normalizes over that axis alone",
    ),
    Rule(
        {"Hardmax"},
        _hardmax_ties,
        "OpenVINO {device}'s Hardmax does not mark the first of equal maxima, as ONNX says, "
        "along an axis of 8 or more (OpenVINO 2026.4)",
    ),
    Rule(
        {"TopK"},
        lambda node, _: int(node.attrs.get("sorted", 1)) == 0,
        "TopK with sorted=0: OpenVINO returns the top k in another order than onnxruntime",
    ),
    Rule(
        {"TopK"},
        _indices_read,
        "OpenVINO {device}'s TopK does not break ties by the lower index, as ONNX says: with "
        "equal values its indices differ from onnxruntime's (a Mask R-CNN's region proposals, "
        "OpenVINO 2026.4)",
    ),
    Rule(
        {"Resize"},
        lambda node, _: int(node.attrs.get("antialias", 0)),
        "Resize with antialias=1: OpenVINO's is up to 1.6 off onnxruntime's",
    ),
    Rule(
        {"Resize"},
        lambda node, _: (
            node.attrs.get("mode") == "cubic" and int(node.attrs.get("exclude_outside", 0))
        ),
        "cubic Resize with exclude_outside=1: OpenVINO's is 0.1 off onnxruntime's",
    ),
    Rule(
        {"Resize"},
        _keeps_aspect_ratio,
        "Resize with keep_aspect_ratio_policy={policy!r}: OpenVINO stretches to the sizes "
        "given (7x9 where onnxruntime keeps the ratio, 7x7)",
    ),
    Rule(
        {"RoiAlign"},
        lambda node, _: node.attrs.get("mode", "avg") == "max",
        "RoiAlign with mode='max': OpenVINO's is 0.7 off onnxruntime's",
    ),
    Rule(
        {"LSTM"},
        lambda node, _: int(node.attrs.get("input_forget", 0)),
        "LSTM with input_forget=1: OpenVINO's is 0.33 off onnxruntime's",
    ),
    Rule(
        {"LSTM"}, _peepholes, "LSTM with peepholes (input P): OpenVINO's is 0.12 off onnxruntime's"
    ),
    Rule(
        {"LpPool"},
        lambda node, _: int(node.attrs.get("ceil_mode", 0)),
        "LpPool with ceil_mode=1: OpenVINO's is 0.42 off onnxruntime's",
    ),
    Rule(
        {"MaxPool"},
        _storage_order_indices,
        "MaxPool's indices with storage_order=1 (column-major): OpenVINO's count row-major",
    ),
    Rule(
        {"MaxPool", "AveragePool"},
        _ceil_window_dropped,
        "{node.op_type} with ceil_mode=1 where ONNX drops the last window (it would start in "
        "the padding): OpenVINO keeps it, one more output row or column",
    ),
    Rule(
        {"AveragePool"},
        _ceil_counts_pads,
        "AveragePool with ceil_mode=1 and padding counted: OpenVINO divides a window that "
        "ceil_mode adds otherwise (0.24 off onnxruntime's)",
    ),
    Rule(
        _CONST_INPUTS,
        _computed_const_input,
        "{node.op_type}'s input '{name}' is computed at run time; OpenVINO needs it constant "
        "(else it compiles an open output shape)",
    ),
)
