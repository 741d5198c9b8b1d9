"""The conformance cases openvino is known to fail (``backend_known_failures``): OpenVINO's CPU
kernels treat NaN, infinities and subnormals otherwise than onnxruntime (OpenVINO 2026.4.1,
found by the suite's special values). Each stays a strict xfail, so a fix shows up as a failure
until its entry goes (some hold on one vector ISA only)."""

from __future__ import annotations

import pytest
from byoc.host import cpu

_SKIPS_NAN = "OpenVINO's {} skips NaN (onnxruntime's result is NaN)"
_RNN = "onnxruntime's {} turns NaN (and the NaN of inf - inf) into numbers; OpenVINO's keeps NaN"
_GRID = "OpenVINO's GridSample gives NaN for an infinite sample or grid point (onnxruntime not)"
_INF = ("+inf", "-inf")
_SPECIAL = {
    ("ArgMin", "NaN"): "OpenVINO's ArgMin does not pick the NaN that onnxruntime's picks",
    ("Celu", "NaN"): "OpenVINO's Celu maps NaN to 0 (onnxruntime: NaN)",
    ("Clip", "NaN"): "OpenVINO's Clip maps NaN to the lower bound, -0.5 (onnxruntime: NaN)",
    ("Exp", "NaN"): "OpenVINO's Exp(NaN) is +inf (onnxruntime: NaN)",
    ("GlobalMaxPool", "NaN"): _SKIPS_NAN.format("GlobalMaxPool"),
    **{("GridSample", v): _GRID for v in _INF},
    ("HardSigmoid", "NaN"): "OpenVINO's HardSigmoid maps NaN to 1 (onnxruntime: NaN)",
    ("Hardmax", "NaN"): "OpenVINO's Hardmax picks a NaN first in its row; onnxruntime none",
    ("LogSoftmax", "NaN"): "OpenVINO's LogSoftmax gives -inf, not NaN, to a row holding NaN",
    ("LogSoftmax", "+inf"): "OpenVINO's LogSoftmax gives -inf, not NaN, to a row holding +inf",
    ("Max", "NaN"): _SKIPS_NAN.format("Max"),
    ("Min", "NaN"): _SKIPS_NAN.format("Min"),
    ("ReduceMax", "NaN"): _SKIPS_NAN.format("ReduceMax"),
    ("ReduceLogSumExp", "NaN"): "OpenVINO's ReduceLogSumExp is +inf, not NaN, over NaN",
    ("ReduceMin", "NaN"): _SKIPS_NAN.format("ReduceMin"),
    ("Relu", "NaN"): "OpenVINO's Relu maps NaN to 0 (onnxruntime: NaN)",
    ("Shrink", "NaN"): "OpenVINO's Shrink keeps NaN where onnxruntime gives 0",
    **{("Shrink", v): "OpenVINO's Shrink gives NaN for +-inf (onnxruntime: +-inf)" for v in _INF},
    ("Softmax", "NaN"): "OpenVINO's Softmax gives 0, not NaN, to the rest of a row holding NaN",
    ("Softmax", "+inf"): "OpenVINO's Softmax gives 0, not NaN, to the rest of a row holding +inf",
    ("ThresholdedRelu", "NaN"): "OpenVINO's ThresholdedRelu keeps NaN where onnxruntime gives 0",
    ("ThresholdedRelu", "-inf"): "OpenVINO's ThresholdedRelu gives NaN for -inf (onnxruntime: 0)",
    ("TopK", "NaN"): "OpenVINO's TopK orders NaN otherwise than onnxruntime's",
    **{(op, v): _RNN.format(op) for op in ("LSTM", "GRU") for v in ("NaN", "+inf", "-inf")},
}
# OpenVINO's AVX-512 kernels only (its AVX2 ones agree with onnxruntime here)
_AVX512 = {
    ("Gelu", "+inf"): "OpenVINO's Gelu(+inf) is NaN (onnxruntime: inf)",
    ("Greater", "NaN"): "OpenVINO's Greater is true for a NaN operand (IEEE: false)",
    ("GreaterOrEqual", "NaN"): "OpenVINO's GreaterOrEqual is true for a NaN operand (IEEE: false)",
}
KNOWN_FAILURES = {**_SPECIAL, **(_AVX512 if "avx512f" in cpu().flags else {})}


@pytest.fixture
def openvino_known_failures() -> dict[tuple[str, str], str]:
    return KNOWN_FAILURES
