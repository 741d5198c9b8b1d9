"""Shape probing: the value types ONNX shape inference leaves unknown, asked of onnxruntime."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
from onnx import helper

from byoc.graph import subgraph_reads, tensor_type

_ORT_TYPES = {
    f"tensor({name})": elem
    for name, elem in (
        ("float", onnx.TensorProto.FLOAT),
        ("float16", onnx.TensorProto.FLOAT16),
        ("double", onnx.TensorProto.DOUBLE),
        ("bfloat16", onnx.TensorProto.BFLOAT16),
        ("int8", onnx.TensorProto.INT8),
        ("uint8", onnx.TensorProto.UINT8),
        ("int16", onnx.TensorProto.INT16),
        ("uint16", onnx.TensorProto.UINT16),
        ("int32", onnx.TensorProto.INT32),
        ("uint32", onnx.TensorProto.UINT32),
        ("int64", onnx.TensorProto.INT64),
        ("uint64", onnx.TensorProto.UINT64),
        ("bool", onnx.TensorProto.BOOL),
        ("string", onnx.TensorProto.STRING),
    )
}


def _probe_session(model: onnx.ModelProto) -> Any:
    """A quiet, unoptimised onnxruntime session over a model, to ask it about the model."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    opts.log_severity_level = 3
    return ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])


def complete_types(proto: onnx.ModelProto) -> None:
    """Ask onnxruntime for the types ONNX inference cannot tell (outputs of contrib ops such
    as com.microsoft's DynamicQuantizeLSTM), so such values can cross between units. Types
    come from onnxruntime's own inference when it loads the model; nothing runs. Best effort:
    when onnxruntime cannot load the model, types stay unknown."""

    g = proto.graph
    typed = {v.name for v in [*g.input, *g.value_info, *g.output] if v.type.ByteSize()}
    typed.update(t.name for t in g.initializer)
    unknown = [n for node in g.node for n in node.output if n and n not in typed]
    if not unknown:
        return
    probe = onnx.ModelProto()
    probe.CopyFrom(proto)
    probe.graph.output.extend(helper.make_empty_tensor_value_info(n) for n in unknown)
    try:
        session = _probe_session(probe)
    except Exception:
        return
    for arg in session.get_outputs():
        elem = _ORT_TYPES.get(arg.type)
        if arg.name in typed or elem is None:
            continue
        shape = arg.shape if isinstance(arg.shape, list) and arg.shape else None  # [] : unknown
        dims = None if shape is None else [d if isinstance(d, int | str) else None for d in shape]
        g.value_info.append(helper.make_tensor_value_info(arg.name, elem, dims))


# Inputs whose *values* set an op's output shape (other inputs act through their shapes only).
_SHAPE_OPERANDS: dict[str, tuple[int, ...]] = {
    "Reshape": (1,),
    "Expand": (1,),
    "Tile": (1,),
    "Slice": (1, 2, 3, 4),
    "Pad": (1, 2, 3),
    "ConstantOfShape": (0,),
    "Resize": (1, 2, 3),
    "Upsample": (1,),
    "TopK": (1,),
    "OneHot": (1,),
    "Squeeze": (1,),
    "Unsqueeze": (1,),
    "Split": (1,),
    "CenterCropPad": (1,),
    "Col2Im": (1, 2),
    "Range": (0, 1, 2),
    "MaxUnpool": (2,),
    "DFT": (1,),
    "STFT": (1, 2),
    **{
        op: (1,)
        for op in (
            "ReduceSum",
            "ReduceMean",
            "ReduceMax",
            "ReduceMin",
            "ReduceProd",
            "ReduceL1",
            "ReduceL2",
            "ReduceLogSum",
            "ReduceLogSumExp",
            "ReduceSumSquare",
        )
    },
}
# Ops whose output shape follows from their input shapes alone.
_SHAPE_FROM_SHAPES_TEXT = (
    "Abs Acos Acosh Add And ArgMax ArgMin Asin Asinh Atan Atanh AveragePool BatchNormalization "
    "BitShift Cast CastLike Ceil Celu Clip Concat Constant Conv ConvInteger ConvTranspose Cos "
    "Cosh CumSum DepthToSpace DequantizeLinear DynamicQuantizeLinear Div Dropout Einsum Elu Equal "
    "Erf Exp Flatten Floor Gather GatherElements GatherND Gelu Gemm GlobalAveragePool "
    "GlobalLpPool GlobalMaxPool Greater GreaterOrEqual GroupNormalization GRU HardSigmoid "
    "HardSwish Hardmax Identity InstanceNormalization IsInf IsNaN LayerNormalization LeakyRelu "
    "Less LessOrEqual Log LogSoftmax LpNormalization LpPool LRN LSTM MatMul MatMulInteger Max "
    "MaxPool Mean MeanVarianceNormalization Min Mish Mod Mul Neg Not Or PRelu Pow QLinearConv "
    "QLinearMatMul QuantizeLinear Reciprocal Relu RNN Round ScatterElements ScatterND Selu Shape "
    "Shrink Sigmoid Sign Sin Sinh Size Softmax Softplus Softsign SpaceToDepth Sqrt Sub Sum Tan "
    "Tanh ThresholdedRelu Transpose Trilu Where Xor"
)
_SHAPE_FROM_SHAPES = frozenset(_SHAPE_FROM_SHAPES_TEXT.split())
# onnxruntime's contrib ops (com.microsoft) of the same kind: quantized and fused layers that
# quantize_dynamic and onnxruntime's transformer optimizer write.
_CONTRIB_SHAPE_FROM_SHAPES_TEXT = (
    "Attention BiasGelu DynamicQuantizeLSTM DynamicQuantizeMatMul EmbedLayerNormalization "
    "FastGelu FusedConv FusedMatMul Gelu MatMulIntegerToFloat QAttention QLinearAdd "
    "QLinearAveragePool QLinearConcat QLinearGlobalAveragePool QLinearLeakyRelu QLinearMul "
    "QLinearSigmoid QLinearSoftmax QuickGelu SkipLayerNormalization"
)
_CONTRIB_SHAPE_FROM_SHAPES = frozenset(_CONTRIB_SHAPE_FROM_SHAPES_TEXT.split())


def complete_shapes(proto: onnx.ModelProto) -> None:
    """Fill in dims ONNX inference left unknown, once every input dim is fixed.

    ONNX data propagation stops at chains like Shape -> Slice -> Expand (seen on MiniLM), which
    leaves backends that need static shapes with nothing to claim. onnxruntime runs the model
    on two different inputs and a value's observed shape is recorded when both runs agree and
    it cannot depend on input values: no input value reaches an operand that sets a shape by
    its value (Reshape's shape, Slice's bounds, ...), and every op upstream is one whose shape
    rules are known (Shape and Size pass on shapes, not values; onnxruntime's contrib ops
    listed in ``_CONTRIB_SHAPE_FROM_SHAPES`` count: ddddocr's DynamicQuantizeLSTM). Best
    effort: when onnxruntime cannot run the model, shapes stay as inference left them.
    """

    g = proto.graph
    inits = {t.name for t in g.initializer}
    inputs = [tensor_type(v.type) for v in g.input if v.name not in inits]
    if not inputs or not all(t is not None and t.is_static and t.dtype for t in inputs):
        return
    infos = {v.name: v for v in [*g.value_info, *g.output]}
    # value_dep: the value depends on input values; shape_dep: the shape may too.
    value_dep = {v.name for v in g.input if v.name not in inits}
    shape_dep: set[str] = set()
    unknown: list[str] = []
    for node in g.node:
        ins = list(node.input)
        reads = [*ins, *subgraph_reads(node)]
        known_op = (
            node.domain in ("", "ai.onnx")
            and (node.op_type in _SHAPE_FROM_SHAPES or node.op_type in _SHAPE_OPERANDS)
        ) or (node.domain == "com.microsoft" and node.op_type in _CONTRIB_SHAPE_FROM_SHAPES)
        shape_operands = [ins[i] for i in _SHAPE_OPERANDS.get(node.op_type, ()) if i < len(ins)]
        if (
            any(n in shape_dep for n in reads)
            or not known_op
            or any(n in value_dep for n in shape_operands)
        ):
            shape_dep.update(node.output)
        if node.op_type in ("Shape", "Size"):
            if any(n in shape_dep for n in ins):
                value_dep.update(node.output)
        elif any(n in value_dep or n in shape_dep for n in reads):
            value_dep.update(node.output)
        if any(n in shape_dep for n in node.output):
            continue
        for name in node.output:
            t = tensor_type(infos[name].type) if name in infos else None
            if name and t is not None and t.dtype is not None and not t.is_static:
                unknown.append(name)
    if not unknown:
        return
    probe = onnx.ModelProto()
    probe.CopyFrom(proto)
    known = {v.name for v in probe.graph.output}
    probe.graph.output.extend(infos[n] for n in unknown if n not in known)
    try:
        session = _probe_session(probe)
        runs = []
        for seed in (1, 2):
            rng = np.random.default_rng(seed)
            feeds = {}
            for v in session.get_inputs():
                t = tensor_type(next(i.type for i in g.input if i.name == v.name))
                assert t is not None and t.dtype is not None and t.shape is not None
                dims = [int(d) for d in t.shape if isinstance(d, int)]
                if t.dtype.kind == "f":
                    feeds[v.name] = rng.standard_normal(dims).astype(t.dtype)
                else:  # small non-negative values are valid ids and sizes for most models
                    feeds[v.name] = np.full(dims, seed - 1).astype(t.dtype)
            runs.append(dict(zip(unknown, session.run(unknown, feeds), strict=True)))
    except Exception:  # best effort: onnxruntime may refuse the specialised model
        return
    for name in unknown:
        a, b = runs[0][name], runs[1][name]
        if isinstance(a, np.ndarray) and isinstance(b, np.ndarray) and a.shape == b.shape:
            dims = infos[name].type.tensor_type.shape
            del dims.dim[:]
            for d in a.shape:
                dims.dim.add().dim_value = int(d)
