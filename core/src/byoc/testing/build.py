"""Building small ONNX models in tests with one call."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

OPSET = 17
IR_VERSION = 10


def node(
    op_type: str,
    inputs: Sequence[str],
    outputs: Sequence[str] | str,
    name: str | None = None,
    **attrs: Any,
) -> onnx.NodeProto:
    """``node("Add", ["x", "y"], "z", name="add1")``; the name defaults to the first output."""
    outs = [outputs] if isinstance(outputs, str) else list(outputs)
    return helper.make_node(
        op_type, list(inputs), outs, name=name if name is not None else outs[0], **attrs
    )


def make_model(
    nodes: Sequence[onnx.NodeProto],
    inputs: Mapping[str, Any],
    outputs: Sequence[str],
    constants: Mapping[str, np.ndarray] | None = None,
    opset: int = OPSET,
) -> onnx.ModelProto:
    """A model of ``nodes``; ``inputs`` maps names to shapes (float32) or (dtype, shape).

    Output types come from ONNX shape inference.
    """
    infos = []
    for name, spec in inputs.items():
        if isinstance(spec, tuple) and len(spec) == 2 and not isinstance(spec[0], int | str):
            dtype, shape = spec
        else:
            dtype, shape = np.float32, spec
        elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
        infos.append(helper.make_tensor_value_info(name, elem, list(shape)))
    inits = [numpy_helper.from_array(np.asarray(v), k) for k, v in (constants or {}).items()]
    graph = helper.make_graph(list(nodes), "test", infos, [], initializer=inits)
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=IR_VERSION
    )
    inferred = onnx.shape_inference.infer_shapes(model)
    types = {v.name: v for v in [*inferred.graph.value_info, *inferred.graph.input]}
    for name in outputs:
        if name in types:
            model.graph.output.append(types[name])
        else:
            model.graph.output.append(
                helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, None)
            )
    return model


def diamond() -> onnx.ModelProto:
    """data[10,10] -> Abs 'abs1' -> (Relu 'relu1', Tanh 'tanh1') -> Add 'add1': two branches
    that meet again, the smallest graph where the merge order and cycle checks matter."""
    return make_model(
        [
            node("Abs", ["data"], "abs1"),
            node("Relu", ["abs1"], "relu1"),
            node("Tanh", ["abs1"], "tanh1"),
            node("Add", ["relu1", "tanh1"], "add1"),
        ],
        {"data": [10, 10]},
        ["add1"],
    )
