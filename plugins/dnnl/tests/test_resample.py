"""dnnl: the resample kind: Resize where oneDNN resamples as ONNX says."""

from __future__ import annotations

import byoc
import numpy as np
import pytest
from byoc.testing import assert_matches_onnxruntime
from byoc.testing.build import make_model, node
from byoc_dnnl import ops

from .helpers import (
    DNNL,
    MODES,
    assert_thread_safe,
    claimed,
    conv_stem,
    cpu_has,
    dnnl_impls,
    rand,
)

# (mode, coordinate_transformation_mode, nearest_mode, scales or None, sizes or None)
RESIZES = [
    ("nearest", "asymmetric", "floor", [1, 1, 2, 2], None),  # PyTorch's and Paddle's upsample
    ("nearest", "half_pixel", "round_prefer_floor", [1, 1, 2, 3], None),
    ("nearest", "asymmetric", "floor", None, [1, 8, 30, 36]),
    ("nearest", "half_pixel", "round_prefer_ceil", [1, 1, 3, 3], None),
    ("linear", "half_pixel", "", [1, 1, 2, 2], None),
    ("linear", "pytorch_half_pixel", "", None, [1, 8, 20, 30]),
    ("linear", "half_pixel", "", [1, 1, 0.5, 0.25], None),
]


def _resize(mode: str, how: str, rounding: str, scales: list | None, sizes: list | None):
    """Conv -> Resize -> Conv over x [1,3,10,12]: the Resize sits inside a partition."""
    nodes, consts = conv_stem()
    consts |= {"w1": rand(8, 8, 3, 3), "roi": np.zeros(0, np.float32)}
    if scales is not None:
        consts["scales"] = np.array(scales, np.float32)
    else:
        consts["sizes"] = np.array(sizes, np.int64)
    ins = ["h", "roi", "scales" if scales is not None else "", *(["sizes"] if sizes else [])]
    attrs = {"mode": mode, "coordinate_transformation_mode": how}
    if rounding:
        attrs["nearest_mode"] = rounding
    nodes += [node("Resize", ins, "r", **attrs), node("Conv", ["r", "w1"], "y", pads=[1, 1, 1, 1])]
    return make_model(nodes, {"x": [1, 3, 10, 12]}, ["y"], consts)


@pytest.mark.parametrize("mode", MODES, ids=["json", "c"])
@pytest.mark.parametrize("case", RESIZES, ids=lambda c: f"{c[0]}-{c[1]}-{c[3] or c[4]}")
def test_resize_is_claimed_where_onednn_resamples_the_same(case: tuple, mode: dict) -> None:
    """Upsampling in detectors' feature pyramids (and linear resizes) runs on oneDNN's
    resampling inside the partition, matching onnxruntime, with no slow implementation."""
    model = _resize(*case)
    config = {**DNNL, **mode, "compile": {"placement": "static"}}
    report = assert_matches_onnxruntime(model, config)
    claimed(report, "Resize")
    assert len(report.plan.partitions) == 1
    impls = dnnl_impls(byoc.compile(model, config))
    assert any(i.startswith("resampling ") for i in impls), impls
    assert not any(i.split()[1].startswith(ops.SLOW) for i in impls), impls


@pytest.mark.parametrize(
    ("case", "reason"),
    [
        (("cubic", "half_pixel", "", [1, 1, 2, 2], None), "mode 'cubic'"),
        (("nearest", "asymmetric", "floor", [1, 2, 2, 2], None), "batch or channel axis"),
        (("linear", "asymmetric", "", [1, 1, 2, 2], None), "other positions than oneDNN"),
        (("linear", "align_corners", "", [1, 1, 2, 2], None), "other positions than oneDNN"),
        (("nearest", "half_pixel", "floor", [1, 1, 2, 2], None), "other positions than oneDNN"),
        (("nearest", "tf_crop_and_resize", "", [1, 1, 2, 2], None), "'tf_crop_and_resize'"),
        (("nearest", "half_pixel", "round_prefer_floor", [1, 1, 0.5, 0.5], None), "tie"),
    ],
)
def test_resize_oneDNN_computes_otherwise_is_refused_with_reason(case: tuple, reason: str) -> None:
    """oneDNN resamples at half-pixel positions and rounds ties up: any other mapping (or a
    cubic resize, or one that scales channels) stays with onnxruntime, with the reason."""
    plan = byoc.partition(_resize(*case), DNNL)
    decision = plan.decisions["r"]
    assert decision.backend == "onnxruntime"
    assert reason in str(decision.refusals), decision.refusals


def _upsampled_output(shape: list, size: list, c_in: int = 8, also: bool = False):
    """Conv (c_in -> C, 1x1, or 3x3 from 3 channels) -> a linear Resize to ``size`` as the
    model's output (also read by a Relu that is an output too, with ``also``)."""
    n, c = shape[0], size[1]
    k = 3 if c_in == 3 else 1
    nodes = [
        node("Conv", ["x", "w"], "h", pads=[k // 2] * 4),
        node("Resize", ["h", "", "", "sizes"], "y", mode="linear"),
    ]
    outputs = ["y"]
    if also:
        nodes.append(node("Relu", ["y"], "z"))
        outputs.append("z")
    consts = {"w": rand(c, c_in, k, k), "sizes": np.array([n, *size[1:]], np.int64)}
    return make_model(nodes, {"x": [n, c_in, *shape[2:]]}, outputs, consts)


INTO_OUTPUT = "resampling byoc_linear:avx512 into the output"


@pytest.mark.skipif(not cpu_has("avx512f"), reason="the direct upsampling runs on AVX-512 only")
@pytest.mark.parametrize(
    ("shape", "size", "c_in"),
    [
        ([1, 0, 16, 16], [1, 21, 128, 128], 8),  # a segmentation head's 8x to the input size
        ([2, 0, 9, 7], [2, 5, 40, 100], 8),  # a batch, uneven factors, rows not a multiple of 16
        ([1, 0, 20, 24], [1, 24, 41, 57], 3),  # from a 3-channel 3x3 convolution's layout
    ],
)
def test_a_linear_upsampling_writes_the_output_directly_and_matches(
    shape: list, size: list, c_in: int
) -> None:
    """A linear Resize that upsamples into the partition's output writes the plain NCHW output
    itself (no reorder of the large result after oneDNN's resampling) and matches
    onnxruntime, also from four threads at once."""
    model = _upsampled_output(shape, size, c_in)
    config = {**DNNL, "compile": {"placement": "static"}}
    assert_matches_onnxruntime(model, config)
    compiled = byoc.compile(model, config)
    impls = dnnl_impls(compiled)
    assert impls[-1] == INTO_OUTPUT, impls
    assert "resampling jit" not in str(impls), impls
    assert_thread_safe(compiled, [rand(shape[0], c_in, *shape[2:]) for _ in range(4)])


@pytest.mark.parametrize(
    ("size", "also"), [([1, 21, 60, 60], False), ([1, 21, 128, 128], True)], ids=["down", "read"]
)
def test_a_resize_the_direct_path_does_not_fit_keeps_onednn_and_matches(
    size: list, also: bool
) -> None:
    """A downsampling (16 outputs would read more than 16 source columns), or an upsampled
    output that another kernel reads too, keeps oneDNN's resampling, and matches."""
    model = _upsampled_output([1, 0, 64, 64] if not also else [1, 0, 16, 16], size, 8, also)
    config = {**DNNL, "compile": {"placement": "static"}}
    assert_matches_onnxruntime(model, config)
    impls = dnnl_impls(byoc.compile(model, config))
    assert INTO_OUTPUT not in impls and any(i.startswith("resampling jit") for i in impls), impls
