"""What the dnnl backend claims: single-op checks and the composite pattern table.

Every check returns ``None`` to accept or a reason (shown by ``byoc explain``). The backend
handles float32 tensors of static shape only; weights of Conv, ConvTranspose and Gemm must be
constants (they are reordered once into oneDNN's preferred layout).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from fractions import Fraction
from typing import Any

import numpy as np
import onnx
from byoc import NodeView
from byoc.patterns import Match, Pattern, const, op, wildcard

Check = Callable[[NodeView], str | None]

ELTWISE = ("Relu", "LeakyRelu", "Sigmoid", "Tanh", "Clip", "HardSigmoid", "HardSwish", "Elu", "Erf")
ELTWISE += ("Sqrt", "Abs")
BINARY = ("Add", "Sub", "Mul", "Div")
VIEWS = ("Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Dropout")
REDUCE = ("ReduceMean", "ReduceMax", "ReduceSum")


def weighted(node: NodeView) -> bool:
    """A layer with constant weights, the work oneDNN runs faster than onnxruntime: its weights
    are reordered once into a blocked layout and its bias and activation fused (an LSTM's or
    GRU's, checked constant by ``_rnn``, once into its gates' layout).

    A partition without one only moves memory-bound work (pooling, normalization, softmax,
    elementwise ops) or products of two activations (attention's scores), which onnxruntime
    does as well; it would pay for its boundary reorders and the onnxruntime fusions it cuts (a
    quantized MiniLM's attention blocks on dnnl made it 1.23x slower; its embedding
    Add-Add-LayerNormalization alone, 1.12x).
    """
    if node.op_type in ("Conv", "ConvTranspose", "LSTM", "GRU"):
        return True
    if node.op_type in ("MatMulInteger", "ConvInteger"):  # dnnl.qmatmul, dnnl.qconv
        return node.const(1) is not None
    return node.op_type in ("MatMul", "Gemm") and any(constant(node, i) is not None for i in (0, 1))


def _static_f32(node: NodeView) -> str | None:
    """Every tensor the node reads or writes is float32 with a known static shape."""
    for i, name in enumerate(node.inputs):
        if not name:
            continue
        t = node.input_type(i)
        if t is None or t.dtype is None or t.shape is None:
            return f"the type of input '{name}' is unknown"
        if node.op_type in (*VIEWS, *REDUCE, "Slice", "Split", "Pad", "Resize") and i > 0:
            continue  # shapes, axes, Slice's indices, Split's, Pad's, Resize's sizes: int64
        if node.op_type in ("LSTM", "GRU") and i == 4:
            continue  # sequence_lens: int32
        if node.op_type in ("Clip", "Pow") and i > 0:
            if constant(node, i) is None:
                what = "exponent" if node.op_type == "Pow" else "bounds"
                return f"{node.op_type}'s {what} must be constants"
            continue
        if t.dtype != np.float32:
            return f"input '{name}' is {t.dtype}; only float32 is supported"
        if not t.is_static:
            return f"input '{name}' has a dynamic shape {t}; fix it with [shapes]"
        if 0 in (t.shape or ()):
            return f"input '{name}' is empty (shape {t}); oneDNN needs non-zero dims"
        if t.shape == () and constant(node, i) is None:
            return f"input '{name}' is a scalar computed at run time; ranks 1 to 6 are supported"
    for i, name in enumerate(node.outputs):
        if not name:
            continue
        t = node.output_type(i)
        if t is None or not t.is_static:
            return f"output '{name}' has no static shape; fix the input shapes with [shapes]"
        if 0 in (t.shape or ()):
            return f"output '{name}' is empty (shape {t}); oneDNN needs non-zero dims"
        if len(t.shape or ()) > 6 or (len(t.shape or ()) == 0 and node.op_type not in VIEWS):
            return f"output '{name}' has rank {len(t.shape or ())}; ranks 1 to 6 are supported"
    return None


def _axes(value: Any, rank: int) -> list[int]:
    """ONNX axes (negative ones count from the end) as indices in ``range(rank)``."""
    return [int(a) % rank for a in np.asarray(value).reshape(-1)]


def _refusal(found: Any) -> str | None:
    """A check's reason from a function that returns what it found, or why not (a str)."""
    return found if isinstance(found, str) else None


def _layernorm_rank(rank: int) -> str | None:
    return None if 2 <= rank <= 5 else "oneDNN's layer normalization needs rank 2 to 5"


def _rank(node: NodeView, i: int = 0) -> int:
    t = node.input_type(i)
    return len(t.shape) if t is not None and t.shape is not None else -1


def constant(node: NodeView, i: int) -> np.ndarray | None:
    """Input ``i`` when it is a constant, or a DequantizeLinear of constants (QDQ weights and
    biases, dequantized as onnxruntime does), else None."""
    value = node.const(i)
    graph = node.graph
    producer = graph.producer.get(node.inputs[i]) if i < len(node.inputs) else None
    if value is not None or producer is None:
        return value
    dq = graph.view(producer)
    if dq.op_type != "DequantizeLinear" or dq.const(0) is None or _dequantized_constant(dq):
        return None
    q, scale = dq.const(0), dq.const(1)
    zero = dq.const(2) if len(dq.inputs) > 2 and dq.inputs[2] else np.zeros_like(scale)
    assert q is not None and scale is not None and zero is not None
    return dequantized(q, scale, zero, int(dq.attrs.get("axis", 1)))


def dequantized(q: np.ndarray, scale: np.ndarray, zero: np.ndarray, axis: int) -> np.ndarray:
    """DequantizeLinear of constants as onnxruntime computes it, ``(q - zero) * scale`` in
    float32: one scale and zero point, or one per entry along ``axis``."""
    if scale.size > 1:
        shape = [1] * q.ndim
        shape[axis % q.ndim] = scale.size
        scale, zero = scale.reshape(shape), zero.reshape(shape)
    return (q.astype(np.float32) - zero.astype(np.float32)) * scale.astype(np.float32)


def _conv(node: NodeView) -> str | None:
    a = node.attrs
    w = constant(node, 1)
    if w is None:
        return "the weights are not a constant"
    if len(node.inputs) > 2 and node.inputs[2] and constant(node, 2) is None:
        return "the bias is not a constant"
    if not 3 <= _rank(node) <= 5:
        return f"{_rank(node) - 2}-D convolutions are not supported (1-D to 3-D are)"
    pad = a.get("auto_pad", "NOTSET")
    if pad not in ("NOTSET", "VALID", "SAME_UPPER", "SAME_LOWER"):
        return f"auto_pad={pad!r} is not supported"
    x = node.input_type(0)
    assert x is not None and x.shape is not None
    group = int(a.get("group", 1))
    transposed = node.op_type == "ConvTranspose"
    in_channels = w.shape[0] if transposed else w.shape[1] * group
    if group < 1 or x.shape[1] != in_channels or (transposed and w.shape[0] % group):
        return f"group={group} does not match {x.shape[1]} input channels"
    if transposed:
        if pad != "NOTSET":
            return f"ConvTranspose with auto_pad={pad!r} is not supported"
        if any(d != 1 for d in a.get("dilations", [])):
            return "dilated ConvTranspose is not supported"
        y = node.output_type(0)
        assert y is not None and y.shape is not None
        nd = len(x.shape) - 2
        strides = a.get("strides", [1] * nd)
        pads = a.get("pads", [0] * 2 * nd)
        for i in range(nd):
            end = (x.shape[2 + i] - 1) * strides[i] + w.shape[2 + i] - y.shape[2 + i] - pads[i]
            if end < 0:
                return "ConvTranspose output_padding beyond the end padding is not supported"
    if any(s < 1 for s in a.get("strides", [])) or any(d < 1 for d in a.get("dilations", [])):
        return "strides and dilations must be >= 1"
    return None


def _matmul(node: NodeView) -> str | None:
    if _rank(node, 0) < 2 or _rank(node, 1) < 2:
        return "MatMul of 1-D operands is not supported"
    return None


def _gemm(node: NodeView) -> str | None:
    a = node.attrs
    if constant(node, 1) is None and (a.get("transB", 0) or a.get("alpha", 1.0) != 1.0):
        return "Gemm with transB or alpha needs a constant B"
    if a.get("transA", 0):
        return "Gemm with transA is not supported"
    if len(node.inputs) > 2 and node.inputs[2] and constant(node, 2) is None:
        return "Gemm's C is not a constant"
    return None


def _batchnorm(node: NodeView) -> str | None:
    if node.attrs.get("training_mode", 0) or len([o for o in node.outputs if o]) > 1:
        return "only inference-mode BatchNormalization (one output) is supported"
    if any(node.const(i) is None for i in range(1, 5)):
        return "scale, bias, mean and var must be constants"
    if _rank(node) < 2:
        return "BatchNormalization needs rank >= 2"
    return None


def _binary(node: NodeView) -> str | None:
    ta, tb, to = node.input_type(0), node.input_type(1), node.output_type(0)
    assert ta is not None and tb is not None and to is not None
    a_full, b_full = ta.shape == to.shape, tb.shape == to.shape
    a_const, b_const = node.const(0) is not None, node.const(1) is not None
    if a_const and b_const:
        return "both operands are constants"
    if not (a_full or b_full):
        return "neither operand has the output's shape (two-sided broadcast)"
    if node.op_type == "Div" and not a_full:
        return "Div with a broadcast numerator is not supported"
    return None


def _sum(node: NodeView) -> str | None:
    """Sum of two tensors is Add (old opsets spell residual connections this way)."""
    if len([i for i in node.inputs if i]) != 2:
        return "only Sum of two inputs is supported"
    return _binary(node)


def _pool(node: NodeView) -> str | None:
    a = node.attrs
    if not 3 <= _rank(node) <= 5:
        return "pooling needs rank 3 to 5"
    if len([o for o in node.outputs if o]) > 1:
        return "MaxPool with an Indices output is not supported"
    if a.get("storage_order", 0):
        return "storage_order=1 is not supported"
    pad = a.get("auto_pad", "NOTSET")
    if pad not in ("NOTSET", "VALID", "SAME_UPPER", "SAME_LOWER"):
        return f"auto_pad={pad!r} is not supported"
    if node.op_type == "AveragePool" and a.get("ceil_mode", 0) and a.get("count_include_pad", 0):
        return "AveragePool with ceil_mode and count_include_pad is not supported"
    if node.op_type == "AveragePool" and any(d != 1 for d in a.get("dilations", [])):
        return "dilated AveragePool is not supported"
    return None


def _global_pool(node: NodeView) -> str | None:
    return None if 3 <= _rank(node) <= 5 else "global pooling needs rank 3 to 5"


def _reduce_axes(node: NodeView) -> list[int] | str | None:
    """A Reduce's axes, sorted, in ``range(rank)`` (an attribute, or an input from opset 18);
    None when it names none; why not when they are computed at run time."""
    axes = node.attrs.get("axes")
    if axes is None and len(node.inputs) > 1 and node.inputs[1]:
        axes = node.const(1)
        if axes is None:
            return f"{node.op_type} with axes computed at run time is not supported"
    return None if axes is None else sorted(_axes(axes, _rank(node)))


def reduced_axes(node: NodeView) -> list[int] | str:
    """The axes a Reduce reduces, sorted (none: an identity), or why they are not known."""
    axes = _reduce_axes(node)
    if isinstance(axes, str):
        return axes
    if not axes:  # no axes named: all of them, unless noop_with_empty_axes
        return [] if node.attrs.get("noop_with_empty_axes", 0) else list(range(_rank(node)))
    return axes


def _reduce(node: NodeView) -> str | None:
    """A sum, mean or max over one run of adjacent axes (axes of size 1 aside): oneDNN pools the
    tensor seen as (outer, reduced, inner) (layouts.hpp's reduce_as_pool). Over every spatial
    axis of rank 3 to 5 it is a global pooling (squeeze-excite blocks exported from Paddle or
    TensorFlow spell GlobalAveragePool this way); over tokens, a sentence embedding's pooling."""
    axes = reduced_axes(node)
    if isinstance(axes, str):
        return axes
    t = node.input_type(0)
    shape = tuple(t.shape or ()) if t is not None else ()
    big = [a for a in axes if shape[a] > 1]
    if big and any(shape[i] > 1 and i not in axes for i in range(big[0], big[-1])):
        return f"{node.op_type} over axes {axes} of shape {list(shape)}: they must be adjacent"
    return None


def _layernorm(node: NodeView) -> str | None:
    rank = _rank(node)
    if reason := _layernorm_rank(rank):
        return reason
    axis = node.attrs.get("axis", -1)
    if axis not in (-1, rank - 1):
        return f"LayerNormalization over axis {axis} is not supported (only the last axis)"
    if len([o for o in node.outputs if o]) > 1:
        return "LayerNormalization with Mean/InvStdDev outputs is not supported"
    for i in (1, 2):
        if i < len(node.inputs) and node.inputs[i] and constant(node, i) is None:
            return "scale and bias must be constants"
    return None


def _lrn(node: NodeView) -> str | None:
    if not 3 <= _rank(node) <= 5:
        return "LRN needs rank 3 to 5"
    size = node.attrs.get("size", 0)
    if size < 1 or size % 2 == 0:
        return f"LRN of size {size}: oneDNN's window is centred, so only odd sizes"
    return None


def slice_window(node: NodeView) -> tuple[list[int], list[int]] | str:
    """Where a Slice starts in each dim of its input and its step there (>= 1), or why it has
    no such window."""
    shape = node.input_type(0).shape  # type: ignore[union-attr]  # _static_f32 checked it
    if "starts" in node.attrs:  # before opset 10: attributes
        starts, axes, steps = node.attrs["starts"], node.attrs.get("axes"), None
    else:
        given = [i for i in range(1, len(node.inputs)) if node.inputs[i]]
        if any(node.const(i) is None for i in given):
            return "Slice with starts, ends, axes or steps computed at run time is not supported"
        starts, axes, steps = (node.const(i) if i in given else None for i in (1, 3, 4))
        if starts is None:
            return "Slice without starts"
    starts = [int(v) for v in np.asarray(starts).reshape(-1)]
    rank = len(shape)
    axes = list(range(len(starts))) if axes is None else _axes(axes, rank)
    steps = [1] * len(starts) if steps is None else [int(v) for v in np.asarray(steps).reshape(-1)]
    if any(s < 1 for s in steps):
        return "Slice with negative steps is not supported"
    offsets, strides = [0] * rank, [1] * rank
    out = node.output_type(0).shape  # type: ignore[union-attr]
    for axis, start, step in zip(axes, starts, steps, strict=True):
        dim = int(shape[axis])
        offsets[axis] = min(max(start + dim if start < 0 else start, 0), dim)
        strides[axis] = step
        if (offsets[axis] // step + int(out[axis])) * step > dim:  # layouts.hpp stepped_window
            return "Slice with steps whose last step overhangs its axis is not supported"
    return offsets, strides


def _slice(node: NodeView) -> str | None:
    return _refusal(slice_window(node))


def split_offsets(node: NodeView) -> tuple[int, list[int]] | str:
    """A Split's axis and where each of its outputs starts along it (read off the outputs'
    static shapes, which _static_f32 checked), or why they do not tile the input."""
    shape = node.input_type(0).shape  # type: ignore[union-attr]
    axis = int(node.attrs.get("axis", 0)) % len(shape)
    if not all(node.outputs):
        return "Split with an unnamed output is not supported"
    outs = [node.output_type(i).shape for i in range(len(node.outputs))]  # type: ignore[union-attr]
    lengths = [int(o[axis]) for o in outs]  # type: ignore[index]
    if sum(lengths) != shape[axis]:
        return f"Split outputs of lengths {lengths} do not tile the input's {shape[axis]}"
    return axis, [sum(lengths[:i]) for i in range(len(lengths))]


def _split(node: NodeView) -> str | None:
    return _refusal(split_offsets(node))


def pad_amounts(node: NodeView) -> tuple[list[int], list[int], float] | str:
    """A constant-mode Pad's positions added before and after each axis, and its value; or why
    it is not claimed."""
    rank = _rank(node)
    mode = node.attrs.get("mode", "constant")
    if mode != "constant":
        return f"Pad mode {mode!r} is not supported (constant is)"
    operands: list[Any] = [node.attrs.get("pads"), node.attrs.get("value", 0.0), None]
    for i in range(1, min(len(node.inputs), 4)):  # opset 11+: pads, value, axes as inputs
        if node.inputs[i]:
            operands[i - 1] = node.const(i)
            if operands[i - 1] is None:
                return "Pad with pads, value or axes computed at run time is not supported"
    pads = [int(p) for p in np.asarray(operands[0]).reshape(-1)]
    given = operands[2]
    axes = range(rank) if given is None else _axes(given, rank)
    if len(pads) != 2 * len(axes):
        return f"Pad has {len(pads)} pads for {len(axes)} axes"
    if any(p < 0 for p in pads):
        return "Pad with negative pads (a crop) is not supported"
    begin, end = [0] * rank, [0] * rank
    for i, a in enumerate(axes):
        begin[a], end[a] = pads[i], pads[i + len(axes)]
    return begin, end, float(np.asarray(operands[1]).reshape(-1)[0])


def _pad(node: NodeView) -> str | None:
    return _refusal(pad_amounts(node))


def _resize(node: NodeView) -> str | None:
    """A Resize oneDNN's resampling computes exactly as ONNX defines it.

    oneDNN reads along each spatial axis at ``y = (o + 0.5) * I / O - 0.5`` (o an output
    position, I and O the input and output lengths), clamped to the edges: the nearest source
    position (``y`` rounded half up) or the two around it, weighted (linear). The Resize is
    claimed when ONNX's mapping (its coordinate_transformation_mode, nearest_mode and scale)
    gives the same positions for every output position, and no rounding falls on a tie.
    """
    a = node.attrs
    rank = _rank(node)
    if not 3 <= rank <= 5:
        return "Resize needs rank 3 to 5"
    if len(node.inputs) < 3:
        return "Resize before opset 11 is not supported"
    mode = a.get("mode", "nearest")
    if mode not in ("nearest", "linear"):
        return f"Resize mode {mode!r} is not supported (nearest and linear are)"
    if a.get("antialias", 0) or a.get("keep_aspect_ratio_policy", "stretch") != "stretch":
        return "Resize with antialias or a keep_aspect_ratio_policy is not supported"
    given = [i for i in (2, 3) if i < len(node.inputs) and node.inputs[i]]
    if not given or any(node.const(i) is None for i in given):
        return "Resize with scales or sizes computed at run time is not supported"
    into = node.input_type(0).shape, node.output_type(0).shape  # type: ignore[union-attr]
    scales = [Fraction(o, i) for i, o in zip(*into, strict=True)]
    found = node.const(2) if 2 in given else None
    if found is not None and found.size:  # scales, not sizes: ONNX maps with the given scale
        axes = _axes(a.get("axes", range(rank)), rank)
        given_scales = found.reshape(-1).tolist()
        if len(given_scales) != len(axes) or not all(v > 0 for v in given_scales):
            return f"Resize scales {given_scales} are not one positive scale per axis"
        for axis, scale in zip(axes, given_scales, strict=True):
            scales[axis] = Fraction(float(scale))
    if any(s != 1 or i != o for s, i, o in zip(scales[:2], *(d[:2] for d in into), strict=True)):
        return "Resize of the batch or channel axis is not supported"
    for scale, i, o in zip(scales[2:], into[0][2:], into[1][2:], strict=True):
        reason = _same_positions(a, mode, scale, int(i), int(o))
        if reason:
            return reason
    return None


def _same_positions(a: dict[str, Any], mode: str, scale: Fraction, i: int, o: int) -> str | None:
    """Why ONNX's Resize of one axis (length i to o) reads other positions than oneDNN's."""
    how = a.get("coordinate_transformation_mode", "half_pixel")
    half = Fraction(1, 2)
    to_onnx: dict[str, Callable[[int], Fraction]] = {
        "half_pixel": lambda x: (x + half) / scale - half,
        "pytorch_half_pixel": lambda x: (x + half) / scale - half if o > 1 else Fraction(0),
        "align_corners": lambda x: Fraction(x * (i - 1), o - 1) if o > 1 else Fraction(0),
        "asymmetric": lambda x: x / scale,
        "tf_half_pixel_for_nn": lambda x: (x + half) / scale,
    }
    if how not in to_onnx or (how == "tf_half_pixel_for_nn" and mode != "nearest"):
        return f"Resize with coordinate_transformation_mode {how!r} is not supported"
    rounding = a.get("nearest_mode", "round_prefer_floor")
    rounds: dict[str, Callable[[Fraction], int]] = {
        "round_prefer_floor": lambda y: math.ceil(y - half),
        "round_prefer_ceil": lambda y: math.floor(y + half),
        "floor": math.floor,
        "ceil": math.ceil,
    }
    if mode == "nearest" and rounding not in rounds:
        return f"Resize with nearest_mode {rounding!r} is not supported"
    tie = {"round_prefer_floor": half, "round_prefer_ceil": half}.get(rounding, Fraction(0))
    exact = Fraction(float(np.float32(scale))) == scale
    for x in range(o):
        ours, theirs = (x + half) * i / o - half, to_onnx[how](x)
        if mode == "linear":
            ours, theirs = (min(max(v, Fraction(0)), Fraction(i - 1)) for v in (ours, theirs))
            if abs(ours - theirs) > Fraction(1, 10**5):
                return f"Resize ({how}) interpolates at other positions than oneDNN"
            continue
        if (ours - half) % 1 == 0:
            return f"Resize ({how}) rounds a tie in oneDNN, which may round it otherwise"
        if (theirs - tie) % 1 == 0 and not exact:
            return f"Resize ({how}, {rounding}) rounds a tie at a scale float32 cannot hold"
        picks = (min(max(k, 0), i - 1) for k in (math.floor(ours + half), rounds[rounding](theirs)))
        if len(set(picks)) > 1:
            return f"Resize ({how}, {rounding}) picks other positions than oneDNN"
    return None


def _rnn(node: NodeView) -> str | None:
    """LSTM and GRU (oneDNN's RNN primitives): bidirectional, with their default activations,
    constant weights, and every sequence of full length. One direction is refused: at batch 1
    oneDNN runs it 1.1-1.7x slower than onnxruntime (AMD EPYC Zen 4: 64 steps of 128 units 0.27
    against 0.21 ms; 599 of 100, 2.1 against 1.5 ms), while the two directions of a
    bidirectional layer run at once, a thread each, faster (shim.cpp's lower_rnn)."""
    a, lstm = node.attrs, node.op_type == "LSTM"
    if a.get("direction", "forward") != "bidirectional":
        return (
            "a one-direction RNN: oneDNN runs its steps slower than onnxruntime (only "
            "bidirectional layers are claimed)"
        )
    if a.get("layout", 0):
        return "layout=1 (batch first) is not supported"
    if "clip" in a or (lstm and a.get("input_forget", 0)):
        return "clip and input_forget are not supported"
    defaults = ["Sigmoid", "Tanh", "Tanh"] if lstm else ["Sigmoid", "Tanh"]
    if "activations" in a and [f.lower() for f in a["activations"]] != [
        f.lower() for f in defaults * 2
    ]:
        return f"activations {a['activations']} are not supported (only the defaults)"
    has_b = len(node.inputs) > 3 and bool(node.inputs[3])
    w, r, b = node.const(1), node.const(2), node.const(3) if has_b else None
    if w is None or r is None or (has_b and b is None):
        return "the weights W, R and B must be constants"
    x = node.input_type(0)
    assert x is not None and x.shape is not None  # _static_f32 checked it
    gates, hidden = (4 if lstm else 3), int(a.get("hidden_size", 0))
    size = (2, gates * hidden)
    if (
        len(x.shape) != 3
        or w.shape != (*size, x.shape[2])
        or r.shape != (*size, hidden)
        or (b is not None and b.shape != (2, 2 * gates * hidden))
    ):
        return f"W, R or B do not fit X {list(x.shape)} and hidden_size {hidden}"
    if len(node.inputs) > 4 and node.inputs[4]:
        lengths = node.const(4)
        if lengths is None or not (lengths == x.shape[0]).all():
            return "sequence_lens other than every sequence's full length is not supported"
    if lstm and len(node.inputs) > 7 and node.inputs[7]:
        peepholes = node.const(7)
        if peepholes is None or peepholes.any():
            return "peepholes (input P) are not supported"
    g = node.graph
    if lstm and len(node.outputs) > 2 and node.outputs[2]:
        y_c = node.outputs[2]
        if y_c in g.consumers or y_c in g.outputs:
            return "Y_c (the last cell state) is read: not supported"
    return None


def _concat(node: NodeView) -> str | None:
    return None if _rank(node) >= 1 else "Concat of scalars is not supported"


def _transpose(node: NodeView) -> str | None:
    rank = _rank(node)
    perm = node.attrs.get("perm")
    if perm is not None and sorted(int(p) for p in perm) != list(range(rank)):
        return f"perm {list(perm)} is not a permutation of the {rank} axes"
    return None


def _view(node: NodeView) -> str | None:
    operand = node.inputs[1] if len(node.inputs) > 1 else ""
    if node.op_type in ("Reshape", "Squeeze", "Unsqueeze") and operand and node.const(1) is None:
        return "the shape/axes operand is not a constant"
    return None


def _dropout(node: NodeView) -> str | None:
    """Inference-mode Dropout is the identity; its mask output, which old exporters name, may
    be there as long as nothing reads it."""
    g = node.graph
    if any(m in g.consumers or m in g.outputs for m in node.outputs[1:] if m):
        return "Dropout with a mask output that is read is not supported"
    if len(node.inputs) > 2 and node.inputs[2]:
        mode = node.const(2)
        if mode is None or bool(mode):
            return "Dropout in training mode (or not known to be off) is not supported"
    return None


def _ok(node: NodeView) -> str | None:
    return None


def _pow(node: NodeView) -> str | None:
    """x ** e for one constant e: oneDNN's pow eltwise (squares and square roots by their own)."""
    e = constant(node, 1)
    if e is None or e.size != 1 or not np.isfinite(e).all():
        return "Pow with an exponent that is not one finite constant is not supported"
    return None


_CHECKS: dict[str, Check] = {
    "Conv": _conv,
    "ConvTranspose": _conv,
    "MatMul": _matmul,
    "Gemm": _gemm,
    "BatchNormalization": _batchnorm,
    **{t: _ok for t in ELTWISE},
    "Pow": _pow,
    **{t: _binary for t in BINARY},
    "Sum": _sum,
    "MaxPool": _pool,
    "AveragePool": _pool,
    "GlobalAveragePool": _global_pool,
    "GlobalMaxPool": _global_pool,
    **{t: _reduce for t in REDUCE},
    "Softmax": _ok,
    "LRN": _lrn,
    "LayerNormalization": _layernorm,
    "Concat": _concat,
    "Transpose": _transpose,
    "Slice": _slice,
    "Split": _split,
    "Pad": _pad,
    "Resize": _resize,
    **{t: _view for t in VIEWS},
    "Dropout": _dropout,
}


def _quantized(node: NodeView) -> str | None:
    """A node that reads a DequantizeLinear stays with onnxruntime, which fuses DequantizeLinear
    -> op -> QuantizeLinear into one int8 kernel (a QDQ MobileNet ran 2.8x slower with its
    pooling and softmax on dnnl)."""
    graph = node.graph
    for name in node.inputs:
        i = graph.producer.get(name) if name else None
        dq = i is not None and graph.nodes[i].op_type == "DequantizeLinear"
        if dq and _dequantize(graph.view(i)) is not None:  # type: ignore[arg-type]
            return "reads a DequantizeLinear: onnxruntime runs this QDQ group in int8"
    return None


def _with_types(check: Check) -> Check:
    def run(node: NodeView) -> str | None:
        return _static_f32(node) or _quantized(node) or check(node)

    run.__doc__ = check.__doc__
    return run


def _dynamic_quantize(node: NodeView) -> str | None:
    """DynamicQuantizeLinear makes no kernel of its own: the int8 layers reading it
    (``dnnl.qmatmul``, ``dnnl.qconv``) quantize its input, so it is claimed only when they
    alone read it."""
    t = node.input_type(0)
    if t is None or t.dtype != np.float32 or not t.is_static or not t.shape:
        return f"input '{node.inputs[0]}' must be float32 of a static shape (rank >= 1)"
    graph = node.graph
    layers = {"MatMulInteger", "ConvInteger"}
    for i, name in enumerate(node.outputs):
        readers = {graph.nodes[r].op_type for r in graph.consumers.get(name, [])}
        if name in graph.outputs or not readers <= (layers, {"Mul"}, layers)[i]:
            return "an output is read by something other than the int8 layers after it"
    return None


def _integer(node: NodeView, i: int = 0) -> bool:
    t = node.input_type(i)
    return t is not None and t.dtype is not None and (t.dtype.kind in "iub")


_HOST_VIEWS = ("Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity")


def _host(node: NodeView) -> str | None:
    """Work on integer tensors before the first kernel (byoc_dnnl.host): a view or Expand of an
    integer tensor, its Cast to float32, a Gather of a constant table's rows (token embeddings:
    float32, or u8 or i8 before a DequantizeLinear). It reads only inputs, constants and other
    such ops, so it runs before the native net."""
    data = 1 if node.op_type == "Gather" else 0
    if not _integer(node, data):
        t = node.input_type(data)
        return (
            f"input '{node.inputs[data]}' is {t.dtype if t else 'of unknown type'}: "
            f"{node.op_type} of an integer tensor only is supported"
        )
    if node.const(data) is not None:
        return f"input '{node.inputs[data]}' is a constant"
    for name in [*node.inputs[:2], *node.outputs[:1]]:
        t = node.graph.type_of(name) if name else None
        if name and (t is None or not t.is_static or 0 in (t.shape or ())):
            return f"'{name}' has no static, non-empty shape; fix the input shapes with [shapes]"
    shaped = node.op_type in ("Reshape", "Squeeze", "Unsqueeze", "Expand")
    if shaped and len(node.inputs) > 1 and node.inputs[1] and node.const(1) is None:
        return "the shape/axes operand is not a constant"
    if node.op_type == "Cast" and node.attrs.get("to") != onnx.TensorProto.FLOAT:
        return "only a Cast to float32 is supported"
    if node.op_type == "Gather":
        table = constant(node, 0)
        if table is None or table.dtype.name not in ("float32", "uint8", "int8"):
            return "Gather reads rows of a constant float32, u8 or i8 table only"
    if node.op_type == "Transpose":
        return _transpose(node)
    return None


def _arg(node: NodeView) -> str | None:
    """ArgMax or ArgMin of a float32 result (a CTC recogniser's best class per step): a host
    step after the kernels (byoc_dnnl.host), so it needs a kernel of its partition to read."""
    t, out = node.input_type(0), node.output_type(0)
    if t is None or t.dtype != np.float32 or not t.is_static or not t.shape or 0 in t.shape:
        return f"input '{node.inputs[0]}' must be float32 of a static, non-empty shape"
    if out is None or not out.is_static or not out.shape:
        return "its output must have a static shape of rank >= 1 (keepdims=0 of a 1-D input)"
    axis = int(node.attrs.get("axis", 0))
    if not -len(t.shape) <= axis < len(t.shape):
        return f"axis {axis} is not an axis of its rank-{len(t.shape)} input"
    return None


def qparams(node: NodeView) -> tuple[float, int, str] | None:
    """A QuantizeLinear's or DequantizeLinear's one scale and zero point (per tensor: each one
    constant value; an absent zero point is 0) and its quantized type, or None."""
    scale = node.const(1) if len(node.inputs) > 1 and node.inputs[1] else None
    zero = node.const(2) if len(node.inputs) > 2 and node.inputs[2] else np.zeros(1, np.uint8)
    if scale is None or zero is None or scale.size != 1 or zero.size != 1:
        return None
    s = np.float32(scale.reshape(-1)[0])
    if scale.dtype != np.float32 or not (np.isfinite(s) and s >= np.finfo(np.float32).tiny):
        return None
    if zero.dtype.name not in ("uint8", "int8") or node.attrs.get("block_size", 0):
        return None
    return float(s), int(zero.reshape(-1)[0]), zero.dtype.name


def _quantize(node: NodeView) -> str | None:
    """A QuantizeLinear to u8 or s8 (``quantize_static``'s QDQ format): one division, rounding
    and clip, fused into the kernel before it. It is claimed with the DequantizeLinears that read
    it, the only readers it may have, so its integers never leave the partition; an int8
    convolution reads them as they are."""
    t = node.input_type(0)
    if t is None or t.dtype != np.float32 or not t.is_static or not t.shape or 0 in t.shape:
        return f"input '{node.inputs[0]}' must be float32 of a static shape (rank >= 1)"
    params = qparams(node)
    if params is None:
        return "the scale (positive float32) and zero point (u8 or s8) must be one constant each"
    out = node.output_type(0)
    if out is None or out.dtype is None or out.dtype.name != params[2]:
        return f"its output type is not its zero point's ({params[2]})"
    graph, y = node.graph, node.outputs[0]
    readers = [graph.view(r) for r in graph.consumers.get(y, [])]
    if y in graph.outputs or not readers:
        return "its output is a model output, or nothing reads it"
    if any(r.op_type != "DequantizeLinear" or qparams(r) != params for r in readers):
        return "read by other than a DequantizeLinear of its scale and zero point"
    return None


def _dequantize(node: NodeView) -> str | None:
    """A DequantizeLinear of a claimed QuantizeLinear's output (a kernel's subtraction and
    product, fused into the kernel after it; an int8 convolution reads the integers instead);
    of constants (weights, one scale per tensor or per channel, biases in int32): a float32
    constant; of a quantized embedding table's rows (``quantize_dynamic`` quantizes a
    transformer's Gathers), a host step."""
    t = node.input_type(0)
    if t is None or t.dtype is None or not t.is_static:
        return "only a DequantizeLinear of a static shape is supported"
    graph = node.graph
    if node.const(0) is not None:
        return _dequantized_constant(node)
    if t.dtype.name not in ("uint8", "int8"):
        return "only a DequantizeLinear of u8 or i8 values is supported"
    producer = graph.producer.get(node.inputs[0])
    if producer is not None and graph.nodes[producer].op_type == "QuantizeLinear":
        quantize = graph.view(producer)
        if _quantize(quantize) is not None:
            return "its QuantizeLinear runs elsewhere"
        return None
    if qparams(node) is None:
        return "the scale and zero point must be one constant each (per-tensor)"
    if producer is None or graph.nodes[producer].op_type != "Gather":
        return "a DequantizeLinear of computed values not quantized by a QuantizeLinear"
    return None


def _dequantized_constant(node: NodeView) -> str | None:
    """Constant values, with one scale and zero point, or one per entry along ``axis``: a
    float32 constant to whatever reads it."""
    q = node.const(0)
    assert q is not None
    scale = node.const(1) if len(node.inputs) > 1 and node.inputs[1] else None
    zero = node.const(2) if len(node.inputs) > 2 and node.inputs[2] else None
    if q.dtype.name not in ("uint8", "int8", "int32") or scale is None or scale.dtype != np.float32:
        return "only a DequantizeLinear of u8, i8 or i32 constants by a float32 scale is supported"
    axis = int(node.attrs.get("axis", 1))
    fits = scale.size == 1 or (
        scale.ndim == 1 and -q.ndim <= axis < q.ndim and scale.size == q.shape[axis]
    )
    if not fits or (zero is not None and (zero.dtype != q.dtype or zero.size != scale.size)):
        return "the scale and zero point must be one value each, or one per entry along axis"
    if node.attrs.get("block_size", 0):
        return "a blocked DequantizeLinear is not supported"
    return None


def _or_host(check: Check) -> Check:
    """A view's check, or the host check when it reshapes an integer tensor."""

    def run(node: NodeView) -> str | None:
        return _host(node) if _integer(node) else check(node)

    run.__doc__ = check.__doc__
    return run


def supported_ops(config: Mapping[str, Any]) -> dict[str, Check]:
    """The single ops the backend claims, each with its check. DynamicQuantizeLinear and the
    int8 dense layers after it, QuantizeLinear, LSTM and GRU run in the JSON runtime only
    (``codegen = "json"``)."""
    ops = {op_type: _with_types(check) for op_type, check in _CHECKS.items()}
    ops.update({t: _or_host(ops[t]) for t in _HOST_VIEWS})
    ops.update({t: _host for t in ("Cast", "Gather", "Expand")})
    ops["Transpose"] = _or_host(ops["Transpose"])
    ops.update({t: _arg for t in ("ArgMax", "ArgMin")})
    ops["DequantizeLinear"] = _dequantize
    if config.get("codegen", "json") == "json":
        ops["DynamicQuantizeLinear"] = _dynamic_quantize
        ops["QuantizeLinear"] = _quantize
        ops.update({t: _with_types(_rnn) for t in ("LSTM", "GRU")})
    else:
        ops["DequantizeLinear"] = _dequantize_float
    return ops


def _dequantize_float(node: NodeView) -> str | None:
    """``_dequantize``, but not of a QuantizeLinear's integers (the C source mode has none)."""
    producer = node.graph.producer.get(node.inputs[0])
    if producer is not None and node.graph.nodes[producer].op_type == "QuantizeLinear":
        return 'a QuantizeLinear\'s integers run in the JSON runtime only (codegen = "json")'
    return _dequantize(node)


# -- composite patterns ---------------------------------------------------------------------


def _members_ok(match: Match) -> str | None:
    """Every member passes its own single-op check (types, attributes)."""
    checks = supported_ops({})
    for node in match.nodes:
        reason = checks[node.op_type](node) if node.op_type in checks else "not supported"
        if reason:
            return f"{node.name}: {reason}"
    return None


def _hardswish(x: Pattern) -> Pattern:
    """``x * clip(x + 3, 0, 6) / 6``, where ``x`` binds the name "x" (read twice)."""
    plus3 = op("Add", wildcard("x"), const(value=3.0), commutative=True)
    clip = op("Clip", plus3, const(value=0.0), const(value=6.0))
    return op("Div", op("Mul", x, clip, commutative=True), const(value=6.0))


def _swish(x: Pattern) -> Pattern:
    """``x * sigmoid(x)``, where ``x`` binds the name "x"."""
    return op("Mul", x, op("Sigmoid", wildcard("x")), commutative=True)


def _gelu(x: Pattern) -> Pattern:
    """``0.5 * x * (1 + erf(x / sqrt(2)))`` in its two usual spellings; x is a named wildcard."""
    root2 = float(np.sqrt(2.0))
    inner = op("Div", x, const(value=root2)) | op(
        "Mul", x, const(value=1 / root2), commutative=True
    )
    erf1 = op("Add", op("Erf", inner), const(value=1.0), commutative=True)
    half = const(value=0.5)
    form_a = op("Mul", op("Mul", x, erf1, commutative=True), half, commutative=True)
    form_b = op("Mul", op("Mul", x, half, commutative=True), erf1, commutative=True)
    return form_a | form_b


def _gelu_tanh(x: Pattern) -> Pattern:
    """``0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x^3)))``, GELU's tanh approximation
    (GPT-2's ``gelu_new``; PyTorch's ``approximate="tanh"``), the cube a Pow or two Muls; x is a
    named wildcard."""
    cube = (
        op("Pow", x, const(value=3.0))
        | op("Mul", x, op("Mul", x, x), commutative=True)
        | op("Mul", op("Mul", x, x), x, commutative=True)
    )
    inner = op("Add", x, op("Mul", cube, const(value=0.044715), commutative=True), commutative=True)
    scaled = op("Mul", inner, const(value=float(np.sqrt(2 / np.pi))), commutative=True)
    tanh1 = op("Add", op("Tanh", scaled), const(value=1.0), commutative=True)
    half = const(value=0.5)
    form_a = op("Mul", op("Mul", x, tanh1, commutative=True), half, commutative=True)
    form_b = op("Mul", op("Mul", x, half, commutative=True), tanh1, commutative=True)
    return form_a | form_b


def _layernorm_spelled(x: Pattern) -> tuple[Pattern, Pattern, Pattern]:
    """LayerNormalization in basic ops, as exporters before opset 17 write it: ``d = x -
    mean(x)``, ``d / sqrt(mean(d^2) + eps)``, then ``* gamma + beta``; most specific first:
    with beta (and gamma, or not), with gamma only, bare. The means are ReduceMeans (axes an
    attribute, or an input from opset 18)."""

    def mean(v: Pattern) -> Pattern:
        return op("ReduceMean", v) | op("ReduceMean", v, const())

    d = op("Sub", x, mean(x)).named("d")
    square = op("Pow", wildcard("d"), const(value=2.0)) | op("Mul", wildcard("d"), wildcard("d"))
    std = op("Sqrt", op("Add", mean(square), const("eps"), commutative=True))
    norm = op("Div", d, std)
    scaled = op("Mul", norm, const("gamma"), commutative=True)
    return op("Add", scaled | norm, const("beta"), commutative=True), scaled, norm


def _layernorm_check(match: Match) -> str | None:
    """Both means are over the last axis alone, keeping it; epsilon is one number; gamma and
    beta vary along the last axis only (oneDNN's layer_normalization, per-channel scale and
    shift)."""
    sub = match.producer("d")  # reads x
    reason = _static_f32(sub) or _quantized(sub) or _static_f32(match.root)
    rank = _rank(sub)
    if reason := reason or _layernorm_rank(rank):
        return reason
    channels = int(sub.input_type(0).shape[-1])  # type: ignore[union-attr,index]
    for m in match.nodes:
        if m.op_type != "ReduceMean":
            continue
        if _reduce_axes(m) != [rank - 1]:
            return "a mean over other axes than the last"
        if m.attrs.get("keepdims", 1) != 1:
            return "a mean that drops the axis"
    if np.asarray(match.constant("eps")).size != 1:
        return "epsilon is not one number"
    for name in ("gamma", "beta"):
        c = match.constant(name) if name in match.bound else None
        along_last = c is not None and (c.size == 1 or c.shape[-1:] == (c.size,) == (channels,))
        if c is not None and (c.ndim > rank or not along_last):
            return f"{name} varies along other axes than the last"
    return None


def _residual_check(match: Match) -> str | None:
    """The residual operand of the sum is a computed tensor of the conv's output shape."""
    add = match.producer("sum")
    out = add.output_type(0)
    if match.constant("residual") is not None:
        return "the residual operand is a constant"
    for i in range(2):
        t = add.input_type(i)
        if t is None or out is None or t.shape != out.shape:
            return "the residual operand is broadcast"
    return _members_ok(match)


def _attention() -> Pattern:
    """Scaled dot-product attention: ``softmax(q @ k * scale + mask) @ v``, the scale (a Div or
    Mul by a constant) and the mask (an Add) each optional."""
    scores = op("MatMul", wildcard(), wildcard())
    scaled = op("Div", scores, const()) | op("Mul", scores, const(), commutative=True) | scores
    masked = op("Add", scaled, wildcard("mask"), commutative=True) | scaled
    return op("MatMul", op("Softmax", masked).named("probs"), wildcard())


def _attention_check(match: Match) -> str | None:
    """Both products are of computed tensors, and the softmax is over the scores' last axis."""
    if any(
        m.op_type == "MatMul" and any(m.const(i) is not None for i in (0, 1)) for m in match.nodes
    ):
        return "a product by a constant is a dense layer, not attention"
    softmax = match.producer("probs")
    rank = _rank(softmax)
    opsets = softmax.graph.model.opset_import
    opset = next((o.version for o in opsets if o.domain in ("", "ai.onnx")), 17)
    if int(softmax.attrs.get("axis", -1 if opset >= 13 else 1)) % max(rank, 1) != rank - 1:
        return "the softmax is not over the scores' last axis"
    return _members_ok(match)


def _qmatmul() -> tuple[Pattern, Pattern]:
    """A dense layer as ``onnxruntime.quantization.quantize_dynamic`` writes it: MatMulInteger of
    a DynamicQuantizeLinear's u8 output by constant int8 weights, Cast to float, times the
    activation's scale times the weights' (one, or one per column); with a bias, and without."""
    xq, xzp, w = wildcard("xq"), wildcard("xzp"), const("w")
    product = op("MatMulInteger", xq, w, xzp, const("wzp")) | op("MatMulInteger", xq, w, xzp)
    scale = op("Mul", wildcard("xs"), const("ws"), commutative=True)
    y = op("Mul", op("Cast", product).named("int"), scale, commutative=True)
    return op("Add", y, const("bias"), commutative=True), y


def int8_weights(w: np.ndarray, zp: np.ndarray | None, axis: int) -> tuple[np.ndarray, int] | None:
    """Quantized weights ``w`` (int8 or uint8) with zero point ``zp`` (none, one, or one per
    output channel along ``axis``) as int8 values and one zero point, the same differences:
    ``w - zp`` and 0 when every difference is an int8 value (7-bit uint8 weights, as
    ``reduce_range`` writes them, with any zero points); else, with one zero point, the
    weights and it shifted to int8 (uint8 minus 128). None: zero points that differ between
    channels and differences that are not int8 values."""
    z = np.zeros(1, np.int16) if zp is None else zp.astype(np.int16).reshape(-1)
    shape = [1] * w.ndim
    shape[axis] = z.size
    diff = w.astype(np.int16) - z.reshape(shape)
    if diff.size and diff.min() >= -128 and diff.max() <= 127:
        return diff, 0
    if np.any(z != z[0]):
        return None
    shift = 128 if w.dtype == np.uint8 else 0
    return w.astype(np.int16) - shift, int(z[0]) - shift


def _qconv() -> tuple[Pattern, Pattern, Pattern]:
    """A convolution as ``quantize_dynamic`` writes it: ConvInteger of a DynamicQuantizeLinear's
    u8 output by constant int8 weights, Cast to float, times the activation's scale times the
    weights' (one, or one per output channel); with a bias, and without. Older onnxruntimes
    (ddddocr's models) quantized the bias too, at run time: ``int32(floor(bias / scale))``
    added to the product before the Cast."""
    xq, xzp, w = wildcard("xq"), wildcard("xzp"), const("w")
    product = op("ConvInteger", xq, w, xzp, const("wzp")) | op("ConvInteger", xq, w, xzp)
    scale = op("Mul", wildcard("xs"), const("ws"), commutative=True)
    y = op("Mul", op("Cast", product.named("conv")).named("int"), scale, commutative=True)
    qbias = op("Cast", op("Floor", op("Div", const("bias"), scale))).named("qbias")
    qbias = (op("Reshape", qbias, const()) | qbias).named("added")
    acc = op("Add", product.named("conv"), qbias, commutative=True)
    y_qbias = op("Mul", op("Cast", acc).named("int"), scale, commutative=True)
    return y_qbias, op("Add", y, const("bias"), commutative=True), y


def _quantized_input(match: Match) -> str | None:
    """The activation, its scale and zero point of an int8 layer are one DynamicQuantizeLinear's
    outputs, and the product is cast to float32 of a static shape."""
    graph, b = match.graph, match.bound
    index = graph.producer.get(b["xq"])
    quantize = graph.view(index) if index is not None else None
    if quantize is None or quantize.op_type != "DynamicQuantizeLinear":
        return "its activation does not come from a DynamicQuantizeLinear"
    if list(quantize.outputs) != [b["xq"], b["xs"], b["xzp"]]:
        return "its activation, scale and zero point are not one DynamicQuantizeLinear's"
    reason = _dynamic_quantize(quantize)
    if reason:
        return f"{quantize.name}: {reason}"
    if int(match.producer("int").attrs.get("to", 0)) != onnx.TensorProto.FLOAT:
        return "the product is not cast to float32"
    out = match.root.output_type(0)
    if out is None or out.dtype != np.float32 or not out.is_static:
        return "the output is not float32 of a static shape"
    return None


def _qconv_check(match: Match) -> str | None:
    """As ``_qmatmul_check``; the weights (OC, IC/group, k...) are int8 or uint8 with one zero
    point (a convolution whose groups have one output channel each, or one group, with one
    weights' scale, when the zero point is not 0 once uint8 weights are shifted to int8); the
    bias is one float32 per output channel, or its run-time quantization (``_qconv``)."""
    reason = _quantized_input(match)
    if reason:
        return reason
    w, ws, conv = match.constant("w"), match.constant("ws"), match.producer("conv")
    assert w is not None and ws is not None
    if w.dtype not in (np.int8, np.uint8):
        return f"the weights are {w.dtype}; int8 or uint8 is supported"
    x = conv.input_type(0)
    assert x is not None and x.shape is not None
    a, oc = conv.attrs, w.shape[0]
    group = int(a.get("group", 1))
    wzp = match.constant("wzp") if "wzp" in match.bound else None
    if wzp is not None and (wzp.dtype != w.dtype or wzp.size not in (1, oc)):
        return f"the weights' zero point must be one or {oc} {w.dtype} values"
    weights = int8_weights(w, wzp, 0)
    if weights is None:
        return "the weights' zero points differ between channels, and w - zero point is not int8"
    shifted = weights[1]
    if shifted and group > 1 and oc != group:
        return "a weights' zero point on a grouped convolution with groups of several channels"
    if shifted and ws.size != 1:
        return "a weights' zero point with one scale per channel"
    if "qbias" in match.bound and int(match.producer("qbias").attrs.get("to", 0)) != 6:
        return "the quantized bias is not cast to int32"
    if not 3 <= len(x.shape) == w.ndim <= 5:
        return f"a convolution of rank {len(x.shape)} by weights {w.shape} is not supported"
    if a.get("auto_pad", "NOTSET") not in ("NOTSET", "VALID", "SAME_UPPER", "SAME_LOWER"):
        return f"auto_pad={a['auto_pad']!r} is not supported"
    if group < 1 or oc % group or x.shape[1] != w.shape[1] * group:
        return f"group={group} does not match {x.shape[1]} input channels"
    if any(s < 1 for s in a.get("strides", [])) or any(d < 1 for d in a.get("dilations", [])):
        return "strides and dilations must be >= 1"
    if ws.dtype != np.float32 or ws.size not in (1, oc) or not np.all(np.isfinite(ws)):
        return f"the weights' scale must be {oc} or one finite float32 values"
    bias = match.constant("bias") if "bias" in match.bound else None
    rank = len(x.shape)
    if bias is not None:
        added = match.graph.type_of(match.bound["added"]) if "qbias" in match.bound else None
        shape = bias.shape if added is None else added.shape
        # as it broadcasts against the output
        shape = None if shape is None else (1,) * (rank - len(shape)) + tuple(shape)
        if bias.dtype != np.float32 or bias.size != oc or shape != (1, oc) + (1,) * (rank - 2):
            return f"the bias must be {oc} float32 values along the channel axis"
    return None


def _qmatmul_check(match: Match) -> str | None:
    """The activation, its scale and zero point are one DynamicQuantizeLinear's outputs; the
    weights are int8 or uint8 of shape (K, N) with one zero point (per layer, or the same for
    every column); scales and bias are float32 per layer or per column."""
    reason = _quantized_input(match)
    if reason:
        return reason
    b = match.bound
    w, ws = match.constant("w"), match.constant("ws")
    assert w is not None and ws is not None
    wzp = match.constant("wzp") if "wzp" in b else None
    if w.dtype not in (np.int8, np.uint8) or w.ndim != 2:
        return f"the weights are {w.dtype} of rank {w.ndim}; int8 or uint8 of rank 2 is supported"
    n = w.shape[1]
    if wzp is not None and (wzp.dtype != w.dtype or wzp.size not in (1, n)):
        return f"the weights' zero point must be one or {n} {w.dtype} values"
    if int8_weights(w, wzp, 1) is None:
        return "the weights' zero points differ between columns, and w - zero point is not int8"
    if ws.dtype != np.float32 or ws.size not in (1, n) or not np.all(np.isfinite(ws)):
        return f"the weights' scale must be {n} or one finite float32 values"
    x = match.graph.view(match.graph.producer[b["xq"]]).input_type(0)
    assert x is not None and x.shape is not None
    if len(x.shape) < 2 or x.shape[-1] != w.shape[0]:
        return f"the activation {x} is not (..., {w.shape[0]}), a product by weights {w.shape}"
    bias = match.constant("bias") if "bias" in b else None
    if bias is not None and (
        bias.dtype != np.float32 or bias.size != n or bias.ndim > len(x.shape)
    ):
        return f"the bias must be {n} float32 values along the last axis"
    return None


def pattern_table(config: Mapping[str, Any]) -> list[tuple[str, Pattern, Any]]:
    """Composite patterns, most specific first, like TVM's ``dnnl.py``.

    Activations spelled out in basic ops (HardSwish as ``x*clip(x+3,0,6)/6``, Swish as
    ``x*sigmoid(x)``, GELU with Erf) become one oneDNN eltwise, fused as a post-op into the
    convolution or matmul in front of them.
    """
    x = wildcard("x")
    conv_nobias = op("Conv", wildcard(), const())
    conv = conv_nobias | op("Conv", wildcard(), const(), const())
    bn = op("BatchNormalization", conv, const(), const(), const(), const())
    conv_bias = op("Add", conv, const(), commutative=True)
    biased = conv_bias | op("Conv", wildcard(), const(), const())  # the bias is Add or Conv's B
    act_ops = {"Relu", "Clip", "Sigmoid", "Tanh", "LeakyRelu", "HardSigmoid", "HardSwish", "Elu"}
    residual = op("Add", conv | bn | conv_bias, wildcard("residual"), commutative=True).named("sum")
    matmul = op("MatMul", wildcard(), const())
    matmul_bias = op("Add", matmul, const(), commutative=True)
    int8 = config.get("codegen", "json") == "json"  # the C kernel library has no int8 kernels
    return [
        *(("dnnl.qmatmul", p, _qmatmul_check) for p in (_qmatmul() if int8 else ())),
        *(("dnnl.qconv", p, _qconv_check) for p in (_qconv() if int8 else ())),
        ("dnnl.conv2d_bias_sum_relu", op("Relu", residual), _residual_check),
        ("dnnl.conv2d_bias_sum", residual, _residual_check),
        ("dnnl.conv2d_bn_hardswish", _hardswish(bn.named("x")), _members_ok),
        ("dnnl.conv2d_bias_hardswish", _hardswish(biased.named("x")), _members_ok),
        ("dnnl.conv2d_hardswish", _hardswish(conv_nobias.named("x")), _members_ok),
        ("dnnl.conv2d_bn_swish", _swish(bn.named("x")), _members_ok),
        ("dnnl.conv2d_bias_swish", _swish(biased.named("x")), _members_ok),
        ("dnnl.conv2d_swish", _swish(conv_nobias.named("x")), _members_ok),
        ("dnnl.conv2d_bn_relu", op(act_ops, bn), _members_ok),
        ("dnnl.conv2d_bn", bn, _members_ok),
        ("dnnl.conv2d_bias_relu", op(act_ops, biased), _members_ok),
        ("dnnl.conv2d_relu", op(act_ops, conv_nobias), _members_ok),
        ("dnnl.conv2d_bias", conv_bias, _members_ok),
        (
            "dnnl.deconv2d_bias_relu",
            op(act_ops, op("ConvTranspose", wildcard(), const(), const())),
            _members_ok,
        ),
        ("dnnl.dense_bias_relu", op(act_ops, matmul_bias), _members_ok),
        ("dnnl.dense_bias", matmul_bias, _members_ok),
        ("dnnl.attention", _attention(), _attention_check),
        *(("dnnl.layernorm", p, _layernorm_check) for p in _layernorm_spelled(x)),
        ("dnnl.gelu", _gelu(x), _members_ok),
        ("dnnl.gelu_tanh", _gelu_tanh(x), _members_ok),
        ("dnnl.hardswish", _hardswish(x), _members_ok),
        ("dnnl.swish", _swish(x), _members_ok),
    ]
