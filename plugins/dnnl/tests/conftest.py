"""The conformance cases dnnl's kernels are known to fail (``backend_known_failures``): oneDNN's
kernels drop NaN where onnxruntime keeps it, and the other way round. Each stays a strict xfail,
so a fix shows up as a failure until its entry goes (some hold on one vector ISA only). Users do
not see them by default: dnnl is ``finite_only``, so a partition whose inputs hold NaN or +-inf
runs on onnxruntime (the suite checks that too). Also the fixtures the dnnl tests share (their
helpers: ``helpers.py``)."""

from __future__ import annotations

import pytest
from byoc.host import cpu
from byoc_dnnl import plugin

_INF_NAN = "(+-inf inputs make NaN in the product: inf - inf)"
_SUM_RELU = f"the fused Relu post-op (oneDNN's eltwise_relu) maps NaN to 0 {_INF_NAN}"
_CLIP = (
    "the suite builds it with an unbounded Clip: the fused post-op (oneDNN's eltwise_clip_v2) "
    f"maps NaN to -FLT_MAX {_INF_NAN}"
)
_RNN = "onnxruntime's {} turns NaN (and the NaN of inf - inf) into numbers; oneDNN's keeps NaN"
_CLIPPED = ["conv2d_bn_relu", "conv2d_bias_relu", "conv2d_relu", "deconv2d_bias_relu"]
_CLIPPED += ["dense_bias_relu"]
_SPECIAL = {
    ("Relu", "NaN"): "oneDNN's eltwise_relu maps NaN to 0 (onnxruntime: NaN)",
    ("Clip", "NaN"): "oneDNN's eltwise_clip_v2 maps NaN to the lower bound, -0.5",
    ("HardSigmoid", "NaN"): "oneDNN's eltwise_hardsigmoid maps NaN to 1 (onnxruntime: NaN)",
    ("ReduceMax", "NaN"): "ReduceMax runs as oneDNN's max pooling, which skips NaN",
    ("Softmax", "NaN"): "oneDNN's softmax gives 0, not NaN, to the rest of a row holding NaN",
    ("Softmax", "+inf"): "oneDNN's softmax gives 0, not NaN, to the rest of a row holding +inf",
    **{("dnnl.conv2d_bias_sum_relu", v): _SUM_RELU for v in ("NaN", "+inf", "-inf")},
    **{(f"dnnl.{p}", v): _CLIP for p in _CLIPPED for v in ("NaN", "+inf", "-inf")},
    **{(op, v): _RNN.format(op) for op in ("LSTM", "GRU") for v in ("NaN", "+inf", "-inf")},
}
# oneDNN's AVX-512 kernel only (its AVX2 one gives inf)
_AVX512 = {("dnnl.gelu", "+inf"): "oneDNN's eltwise_gelu_erf(+inf) is NaN (onnxruntime: inf)"}
KNOWN_FAILURES = {**_SPECIAL, **(_AVX512 if "avx512f" in cpu().flags else {})}


@pytest.fixture
def dnnl_known_failures() -> dict[tuple[str, str], str]:
    return KNOWN_FAILURES


@pytest.fixture
def keep_tiny(monkeypatch: pytest.MonkeyPatch) -> None:
    """For a tiny test model with onnxruntime ops around its partition: the size rule
    (plugin.TINY_MACS, tested on its own) would send the partition back to onnxruntime."""
    monkeypatch.setattr(plugin, "TINY_MACS", 0)
