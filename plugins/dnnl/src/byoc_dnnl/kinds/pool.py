"""Pooling kinds: ``pool`` (MaxPool, AveragePool, their global forms) and ``reduce``
(ReduceMean, ReduceMax, ReduceSum over adjacent axes: oneDNN pools the tensor seen as (outer,
reduced, inner); over every spatial axis, a global pooling)."""

from __future__ import annotations

from typing import Any

from byoc import NodeView

from byoc_dnnl.annotate import onnx_axes, rank_of
from byoc_dnnl.kinds.base import (
    Call,
    Family,
    Kind,
    Lower,
    Op,
    alg_id,
    dims,
    ints,
    literal,
    window,
)
from byoc_dnnl.lowering import Lowering
from byoc_dnnl.ops import POOL_ALGS, REDUCE_ALGS


def _pool(node: NodeView) -> str | None:
    a = node.attrs
    if not 3 <= rank_of(node) <= 5:
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
    return None if 3 <= rank_of(node) <= 5 else "global pooling needs rank 3 to 5"


def reduce_axes(node: NodeView) -> list[int] | str | None:
    """A Reduce's axes, sorted, in ``range(rank)`` (an attribute, or an input from opset 18);
    None when it names none; why not when they are computed at run time."""
    axes = node.attrs.get("axes")
    if axes is None and len(node.inputs) > 1 and node.inputs[1]:
        axes = node.const(1)
        if axes is None:
            return f"{node.op_type} with axes computed at run time is not supported"
    return None if axes is None else sorted(onnx_axes(axes, rank_of(node)))


def reduced_axes(node: NodeView) -> list[int] | str:
    """The axes a Reduce reduces, sorted (none: an identity), or why they are not known."""
    axes = reduce_axes(node)
    if isinstance(axes, str):
        return axes
    if not axes:  # no axes named: all of them, unless noop_with_empty_axes
        return [] if node.attrs.get("noop_with_empty_axes", 0) else list(range(rank_of(node)))
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


def pool_kernel(
    low: Lowering, node: NodeView, alg: str, kernel: list[int] | None = None, y: str | None = None
) -> None:
    a = node.attrs
    x, y = node.inputs[0], y or node.outputs[0]
    xs, ys = low.shape(x)[2:], low.shape(y)[2:]
    nd = len(xs)
    k = kernel or list(a["kernel_shape"])
    strides = list(a.get("strides", [1] * nd))
    dil = list(a.get("dilations", [1] * nd))
    pl, pr = low.pads(a, xs, ys, k, strides, dil)
    pr = [
        max(pr[i], (ys[i] - 1) * strides[i] + (k[i] - 1) * dil[i] + 1 - xs[i] - pl[i])
        for i in range(nd)
    ]
    low.emit(
        "pool",
        [x],
        y,
        node,
        alg=alg,
        kernel=k,
        strides=strides,
        dilations=[d - 1 for d in dil],
        pads_begin=pl,
        pads_end=pr,
    )


def _max_pool(low: Lowering, node: NodeView) -> None:
    pool_kernel(low, node, "max")


def _average_pool(low: Lowering, node: NodeView) -> None:
    include = node.attrs.get("count_include_pad", 0)
    pool_kernel(low, node, "avg_include" if include else "avg_exclude")


def _global_average_pool(low: Lowering, node: NodeView) -> None:
    pool_kernel(low, node, "avg_exclude", list(low.shape(node.inputs[0])[2:]))


def _global_max_pool(low: Lowering, node: NodeView) -> None:
    pool_kernel(low, node, "max", list(low.shape(node.inputs[0])[2:]))


def _lower_reduce(low: Lowering, node: NodeView, alg: str) -> None:
    """A Reduce over adjacent axes (annotate checked): over every spatial axis a global
    pooling (it reads a blocked source as it is), else a reduce kernel; without keepdims,
    a view of its result. Over axes of size 1 only, a view."""
    x, y = node.inputs[0], node.outputs[0]
    shape = low.shape(x)
    axes = reduced_axes(node)
    assert not isinstance(axes, str)  # annotate refused it
    if all(shape[a] == 1 for a in axes):
        low.emit("view", [x], y, node)
        return
    kept = tuple(1 if i in axes else d for i, d in enumerate(shape))
    out = y
    if not node.attrs.get("keepdims", 1):
        out = f"{y}:kept"
        low.shapes[out] = kept
    if alg != "sum" and 3 <= len(shape) <= 5 and axes == list(range(2, len(shape))):
        pool_kernel(low, node, "max" if alg == "max" else "avg_exclude", list(shape[2:]), out)
    else:
        low.emit("reduce", [x], out, node, alg=alg)
    if out != y:
        low.emit("view", [out], y, node)


def _reducing(alg: str) -> Lower:
    def lower(low: Lowering, node: NodeView) -> None:
        _lower_reduce(low, node, alg)

    return lower


def _pool_params(i: int, node: dict[str, Any]) -> tuple[list[int], list[float]]:
    a, nd = node["attrs"], len(node["shape"]) - 2
    return [alg_id(i, "pool", a), *ints(a["kernel"], "kernel", nd, 1), *window(a, nd)], []


def _reduce_params(i: int, node: dict[str, Any]) -> tuple[list[int], list[float]]:
    return [alg_id(i, "reduce", node["attrs"])], []


def _write_pool(c: Call) -> str:
    keys = ("kernel", "strides", "dilations", "pads_begin", "pads_end")
    geometry = ", ".join(dims(c.attrs[k]) for k in keys)
    alg = literal(c.attrs["alg"], POOL_ALGS, "pooling algorithm")
    return f"pool(c, {alg}, {c.operands[0]}, {c.shape}, {geometry})"


def _write_reduce(c: Call) -> str:
    alg = literal(c.attrs["alg"], REDUCE_ALGS, "reduce algorithm")
    return f"reduce(c, {alg}, {c.operands[0]}, {c.shape})"


FAMILY = Family(
    kinds=[
        Kind("pool", 6, _pool_params, write=_write_pool),
        Kind("reduce", 19, _reduce_params, write=_write_reduce),
    ],
    ops={
        "MaxPool": Op(_pool, _max_pool),
        "AveragePool": Op(_pool, _average_pool),
        "GlobalAveragePool": Op(_global_pool, _global_average_pool),
        "GlobalMaxPool": Op(_global_pool, _global_max_pool),
        "ReduceMean": Op(_reduce, _reducing("mean")),
        "ReduceMax": Op(_reduce, _reducing("max")),
        "ReduceSum": Op(_reduce, _reducing("sum")),
    },
)
