"""Value shapes ONNX inference leaves unknown are filled in once the input shapes are fixed."""

from __future__ import annotations

import numpy as np
import onnx
from byoc.graph import tensor_type
from byoc.loading import specialize
from byoc.testing.build import make_model, node


def test_shapes_after_a_recurrent_layer_are_known():
    """ONNX data propagation stops at Shape -> Cast -> Mul -> Cast, so it cannot tell the LSTM's
    input shape; the probe finds it, and the LSTM's and its readers' shapes follow (a CRNN's
    head after its LSTM was left to onnxruntime for want of them)."""
    rng = np.random.default_rng(0)
    consts = {
        "W": rng.standard_normal((1, 12, 4)).astype(np.float32),
        "R": rng.standard_normal((1, 12, 3)).astype(np.float32),
        "one": np.array([1.0], np.float32),
    }
    nodes = [
        node("Shape", ["x"], "s"),
        node("Cast", ["s"], "sf", to=onnx.TensorProto.FLOAT),
        node("Mul", ["sf", "one"], "sf1"),
        node("Cast", ["sf1"], "si", to=onnx.TensorProto.INT64),
        node("Reshape", ["x", "si"], "xr"),
        node("LSTM", ["xr", "W", "R"], ["y"], hidden_size=3),
        node("Relu", ["y"], "out"),
    ]
    model = specialize(make_model(nodes, {"x": ["T", 1, 4]}, ["out"], consts), {"x": [5, 1, 4]})
    types = {v.name: tensor_type(v.type) for v in [*model.graph.value_info, *model.graph.output]}
    assert types["y"].shape == (5, 1, 1, 3)
    assert types["out"].shape == (5, 1, 1, 3)
