"""Kinds that move data: ``view`` (Reshape, Flatten, Squeeze, Unsqueeze, Identity, Dropout:
a free view in plain layout), ``transpose``, ``concat`` (and Pad, a concat of constant
blocks; Expand, a concat of copies), ``slice`` (Slice, Split) and ``shuffle`` (a channel
shuffle the fusion pass finds). Of an integer tensor (token ids), a view, Transpose or Expand
is a host step (byoc_dnnl.host)."""

from __future__ import annotations

from typing import Any

import numpy as np
from byoc import NodeView

from byoc_dnnl.annotate import onnx_axes, permutation, rank_of, refusal
from byoc_dnnl.kinds.base import Call, Family, Kind, Op, dims, integer, ints
from byoc_dnnl.lowering import Lowering


def _concat(node: NodeView) -> str | None:
    return None if rank_of(node) >= 1 else "Concat of scalars is not supported"


def slice_window(node: NodeView) -> tuple[list[int], list[int]] | str:
    """Where a Slice starts in each dim of its input and its step there (>= 1), or why it has
    no such window."""
    shape = node.input_type(0).shape  # type: ignore[union-attr]  # static_f32 checked it
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
    axes = list(range(len(starts))) if axes is None else onnx_axes(axes, rank)
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
    return refusal(slice_window(node))


def split_offsets(node: NodeView) -> tuple[int, list[int]] | str:
    """A Split's axis and where each of its outputs starts along it (read off the outputs'
    static shapes, which static_f32 checked), or why they do not tile the input."""
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
    return refusal(split_offsets(node))


def pad_amounts(node: NodeView) -> tuple[list[int], list[int], float] | str:
    """A constant-mode Pad's positions added before and after each axis, and its value; or why
    it is not claimed."""
    rank = rank_of(node)
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
    axes = range(rank) if given is None else onnx_axes(given, rank)
    if len(pads) != 2 * len(axes):
        return f"Pad has {len(pads)} pads for {len(axes)} axes"
    if any(p < 0 for p in pads):
        return "Pad with negative pads (a crop) is not supported"
    begin, end = [0] * rank, [0] * rank
    for i, a in enumerate(axes):
        begin[a], end[a] = pads[i], pads[i + len(axes)]
    return begin, end, float(np.asarray(operands[1]).reshape(-1)[0])


def _pad(node: NodeView) -> str | None:
    return refusal(pad_amounts(node))


def _view(node: NodeView) -> str | None:
    operand = node.inputs[1] if len(node.inputs) > 1 else ""
    if node.op_type in ("Reshape", "Squeeze", "Unsqueeze") and operand and node.const(1) is None:
        return "the shape/axes operand is not a constant"
    return None


MAX_COPIES = 64  # an Expand's copies along one axis: the inputs of one concat


def _expand(node: NodeView) -> str | None:
    """Expand of float32 values to a constant shape (grouped-query attention's ``repeat_kv``:
    Unsqueeze, Expand, Reshape of the keys and values): along each axis of size 1 that grows
    to n, a concat of n copies; at most MAX_COPIES per axis."""
    t, u = node.input_type(0), node.output_type(0)
    if node.const(1) is None or t is None or u is None or t.shape is None or u.shape is None:
        return "the shape operand is not a constant"
    shape, out = list(t.shape), list(u.shape)  # static: static_f32 checked them
    padded = [1] * (len(out) - len(shape)) + shape
    for a, (d, o) in enumerate(zip(padded, out, strict=True)):
        if d != o and (d != 1 or not isinstance(o, int) or o > MAX_COPIES):
            return f"Expand of axis {a} from {d} to {o}: at most {MAX_COPIES} copies of a size 1"
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


def _lower_concat(low: Lowering, node: NodeView) -> None:
    y = node.outputs[0]
    axis = int(node.attrs["axis"]) % len(low.shape(y))
    ins = []
    for name in node.inputs:
        c = low.const(name)
        ins.append(low.new_const(name, c) if c is not None else name)
    low.emit("concat", ins, y, node, axis=axis)


def _lower_transpose(low: Lowering, node: NodeView) -> None:
    x, y = node.inputs[0], node.outputs[0]
    rank = len(low.shape(x))
    perm = [int(p) for p in node.attrs.get("perm", range(rank - 1, -1, -1))]
    c = low.const(x)
    if c is not None:  # a transposed constant is a constant
        low.consts[y] = np.ascontiguousarray(c.transpose(perm))
        return
    low.emit("transpose" if low.dtype(x) == "float32" else "permute", [x], y, node, perm=perm)


def _lower_slice(low: Lowering, node: NodeView) -> None:
    found = slice_window(node)
    assert not isinstance(found, str)  # the check refused the node otherwise
    _sliced(low, node.inputs[0], node.outputs[0], *found, node)


def _lower_split(low: Lowering, node: NodeView) -> None:
    """Each output is a window of the input."""
    x = node.inputs[0]
    found = split_offsets(node)
    assert not isinstance(found, str)  # the check refused the node otherwise
    axis, starts = found
    rank = len(low.shape(x))
    for y, start in zip(node.outputs, starts, strict=True):
        offsets = [start if a == axis else 0 for a in range(rank)]
        _sliced(low, x, y, offsets, [1] * rank, node)


def _sliced(
    low: Lowering, x: str, y: str, offsets: list[int], steps: list[int], node: NodeView
) -> None:
    """y[k...] = x[offsets + k * steps...]: a slice kernel, or a constant."""
    c = low.const(x)
    if c is not None:  # a window of a constant is a constant
        window = tuple(
            slice(o, o + (d - 1) * s + 1, s)
            for o, d, s in zip(offsets, low.shape(y), steps, strict=True)
        )
        low.consts[y] = np.ascontiguousarray(c[window])
        return
    low.emit("slice", [x], y, node, offsets=offsets, steps=steps)


def _lower_pad(low: Lowering, node: NodeView) -> None:
    """A Concat of constant blocks per padded axis (zero padding in front of a convolution
    becomes its own padding: fusion.Fuser)."""
    x, y = node.inputs[0], node.outputs[0]
    found = pad_amounts(node)
    assert not isinstance(found, str)  # the check refused the node otherwise
    begin, end, value = found
    c = low.const(x)
    if c is not None:  # a padded constant is a constant
        low.consts[y] = np.pad(c, list(zip(begin, end, strict=True)), constant_values=value)
        return
    axes = [a for a in range(len(begin)) if begin[a] or end[a]]
    if not axes:
        low.emit("view", [x], y, node)
        return
    shape = list(low.shape(x))
    for a in axes:
        parts: list[str | None] = []
        for n in (begin[a], 0, end[a]):
            block = [*shape[:a], n, *shape[a + 1 :]]
            parts.append(low.new_const(f"{y}:pad", np.full(block, value)) if n else None)
        parts[1] = x
        shape[a] += begin[a] + end[a]
        count = low.counter()
        x = y if a == axes[-1] else f"{y}:pad{count}"
        low.shapes[x] = tuple(shape)
        low.emit("concat", [p for p in parts if p], x, node, axis=a)


def _lower_expand(low: Lowering, node: NodeView) -> None:
    """Of an integer tensor, a host step; of float32 values, a concat of copies along each
    axis that grows (or a view: an Expand to the same shape)."""
    x, y = node.inputs[0], node.outputs[0]
    if low.dtype(x) != "float32":
        low.emit("expand", [x], y, node)
        return
    out = low.shape(y)
    c = low.const(x)
    if c is not None:  # an expanded constant is a constant
        low.consts[y] = np.ascontiguousarray(np.broadcast_to(c, out))
        return
    x = low.as_rank(x, len(out), node)
    shape = list(low.shape(x))
    axes = [a for a in range(len(out)) if shape[a] != out[a]]
    if not axes:
        low.emit("view", [x], y, node)
        return
    for a in axes:
        shape[a] = out[a]
        grown = y if a == axes[-1] else f"{y}:expand{low.counter()}"
        low.shapes[grown] = tuple(shape)
        low.emit("concat", [x] * out[a], grown, node, axis=a)
        x = grown


def _lower_view(low: Lowering, node: NodeView) -> None:
    x, y = node.inputs[0], node.outputs[0]
    c = low.const(x)
    if c is not None:  # a reshaped constant is a constant
        low.consts[y] = np.ascontiguousarray(c.reshape(low.shape(y)))
        return
    low.emit("view" if low.dtype(x) == "float32" else "reshape", [x], y, node)


def _concat_params(i: int, node: dict[str, Any]) -> tuple[list[int], list[float]]:
    return ints([node["attrs"]["axis"]], "axis"), []


def _transpose_params(i: int, node: dict[str, Any]) -> tuple[list[int], list[float]]:
    return ints(node["attrs"]["perm"], "perm", len(node["shape"])), []


def _slice_params(i: int, node: dict[str, Any]) -> tuple[list[int], list[float]]:
    """Offsets and steps (artifacts from before Slice had steps have none)."""
    a, rank = node["attrs"], len(node["shape"])
    steps = a.get("steps", [1] * rank)
    return [*ints(a["offsets"], "offsets", rank), *ints(steps, "steps", rank, 1)], []


def _shuffle_params(i: int, node: dict[str, Any]) -> tuple[list[int], list[float]]:
    return ints([node["attrs"]["groups"]], "groups", lo=1), []


def _write_concat(c: Call) -> str:
    axis = integer(c.attrs["axis"], "axis")
    return f"concat(c, {axis}, {{{', '.join(c.operands)}}}, {c.shape})"


def _write_transpose(c: Call) -> str:
    return f"transpose(c, {dims(c.attrs['perm'])}, {c.operands[0]})"


def _write_slice(c: Call) -> str:
    a = c.attrs
    steps = dims(a.get("steps", [1] * len(a["offsets"])))
    return f"slice(c, {dims(a['offsets'])}, {steps}, {c.operands[0]}, {c.shape})"


def _write_shuffle(c: Call) -> str:
    return f"shuffle(c, {integer(c.attrs['groups'], 'groups')}, {c.operands[0]})"


FAMILY = Family(
    kinds=[
        Kind("concat", 10, _concat_params, write=_write_concat),
        Kind("view", 12),  # the C source mode shares its source's storage (csource)
        Kind("transpose", 13, _transpose_params, write=_write_transpose),
        Kind("slice", 15, _slice_params, write=_write_slice),
        Kind("shuffle", 17, _shuffle_params, write=_write_shuffle),
    ],
    ops={
        "Concat": Op(_concat, _lower_concat),
        "Transpose": Op(permutation, _lower_transpose, on_integers=True),
        "Slice": Op(_slice, _lower_slice),
        "Split": Op(_split, _lower_split),
        "Pad": Op(_pad, _lower_pad),
        "Expand": Op(_expand, _lower_expand, on_integers=True),
        **{
            t: Op(_view, _lower_view, on_integers=True)
            for t in ("Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity")
        },
        "Dropout": Op(_dropout, _lower_view),
    },
)
