"""The ``resample`` kind: a Resize oneDNN's resampling computes exactly as ONNX defines it
(nearest or linear)."""

from __future__ import annotations

import math
from collections.abc import Callable
from fractions import Fraction
from typing import Any

import numpy as np
from byoc import NodeView

from byoc_dnnl.annotate import onnx_axes, rank_of
from byoc_dnnl.kinds.base import Call, Family, Kind, Op, alg_id, literal
from byoc_dnnl.lowering import Lowering
from byoc_dnnl.ops import RESAMPLE_ALGS


def _resize(node: NodeView) -> str | None:
    """A Resize oneDNN's resampling computes exactly as ONNX defines it.

    oneDNN reads along each spatial axis at ``y = (o + 0.5) * I / O - 0.5`` (o an output
    position, I and O the input and output lengths), clamped to the edges: the nearest source
    position (``y`` rounded half up) or the two around it, weighted (linear). The Resize is
    claimed when ONNX's mapping (its coordinate_transformation_mode, nearest_mode and scale)
    gives the same positions for every output position, and no rounding falls on a tie.
    """
    a = node.attrs
    rank = rank_of(node)
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
        axes = onnx_axes(a.get("axes", range(rank)), rank)
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


def _lower_resize(low: Lowering, node: NodeView) -> None:
    alg = node.attrs.get("mode", "nearest")  # the check accepts nearest and linear only
    low.emit("resample", [node.inputs[0]], node.outputs[0], node, alg=alg)


def _params(i: int, node: dict[str, Any]) -> tuple[list[int], list[float]]:
    return [alg_id(i, "resample", node["attrs"])], []


def _write(c: Call) -> str:
    alg = literal(c.attrs["alg"], RESAMPLE_ALGS, "resample algorithm")
    return f"resample(c, {alg}, {c.operands[0]}, {c.shape})"


FAMILY = Family(
    kinds=[Kind("resample", 16, _params, write=_write)],
    ops={"Resize": Op(_resize, _lower_resize)},
)
