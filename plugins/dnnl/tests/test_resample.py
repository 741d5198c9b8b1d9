"""dnnl: the resample kind: Resize where oneDNN resamples as ONNX says."""

from __future__ import annotations

import byoc
import numpy as np
import pytest
from byoc.testing import assert_matches_onnxruntime
from byoc.testing.build import make_model, node
from byoc_dnnl import ops

from .helpers import DNNL, MODES, claimed, conv_stem, dnnl_impls, rand

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
