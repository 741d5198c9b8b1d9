"""Loading an ONNX model and looking at its graph: types, constants, producers, consumers."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from byoc.errors import ModelError

SUBGRAPH_OPS = frozenset({"If", "Loop", "Scan"})
# Ops whose result is folded to a constant when every input is constant ("int8 behind Cast").
_FOLDABLE = frozenset(
    {
        "Constant",
        "ConstantOfShape",
        "Cast",
        "Identity",
        "Reshape",
        "Squeeze",
        "Unsqueeze",
        "Flatten",
    }
)

_MAX_FOLDED_FILL = 1 << 24  # elements: a bigger ConstantOfShape stays a node
# Shape computations, folded once the dims they read are known (a model exported with dynamic
# axes, specialised by [shapes]): Shape and Size of a value of static shape, and these ops when
# every input and the output are small constants. onnx's reference implementation evaluates them.
_SHAPE_ARITHMETIC_TEXT = """Abs Add And Ceil Concat Div Equal Expand Floor Gather Greater
GreaterOrEqual Less LessOrEqual Max Min Mod Mul Neg Not Or Range ReduceMax ReduceMin ReduceProd
ReduceSum Sign Slice Sub Where"""
_SHAPE_ARITHMETIC = frozenset(_SHAPE_ARITHMETIC_TEXT.split())
_SMALL = 1 << 12  # elements: the most a folded shape computation reads or writes
Dim = int | str | None
# Element types stored two or four to a byte in raw_data.
_PACKED = {
    getattr(onnx.TensorProto, n)
    for n in ("INT4", "UINT4", "FLOAT4E2M1", "INT2", "UINT2")
    if hasattr(onnx.TensorProto, n)
}


@dataclass(frozen=True)
class TensorType:
    """A value's element type and shape, as far as shape inference knows them."""

    dtype: np.dtype[Any] | None
    shape: tuple[Dim, ...] | None

    @property
    def is_static(self) -> bool:
        return self.shape is not None and all(isinstance(d, int) for d in self.shape)

    def __str__(self) -> str:
        dims = "?" if self.shape is None else "x".join(str(d) for d in self.shape) or "scalar"
        return f"{self.dtype if self.dtype is not None else '?'}[{dims}]"


def _fold_op(
    op: str, x: np.ndarray, second: np.ndarray | None, attrs: dict[str, Any]
) -> np.ndarray:
    """Evaluate a foldable op on constant inputs (weights behind Cast, biases behind Reshape)."""
    if op == "Cast":
        return x.astype(helper.tensor_dtype_to_np_dtype(attrs["to"]))
    if op == "ConstantOfShape":  # x is the shape; the value defaults to float32 zero
        value = np.asarray(attrs.get("value", np.zeros(1, np.float32)))
        return np.full([int(d) for d in x], value.reshape(-1)[0], dtype=value.dtype)
    if op == "Reshape":
        assert second is not None
        dims = [int(d) for d in second]
        if not attrs.get("allowzero", 0):
            dims = [x.shape[i] if d == 0 else d for i, d in enumerate(dims)]
        return x.reshape(dims)
    if op == "Flatten":
        axis = attrs.get("axis", 1) % (x.ndim + 1)
        return x.reshape(int(np.prod(x.shape[:axis])), -1)
    axes = second if second is not None else attrs.get("axes")
    if op == "Squeeze":
        return np.squeeze(
            x, None if axes is None else tuple(int(a) % x.ndim for a in np.ravel(np.asarray(axes)))
        )
    if op == "Unsqueeze":
        chosen = [int(a) for a in np.ravel(np.asarray(axes))]
        return np.expand_dims(x, tuple(a % (x.ndim + len(chosen)) for a in chosen))
    return x  # Identity


def _evaluate(
    node: onnx.NodeProto, args: dict[str, np.ndarray], opsets: Sequence[onnx.OperatorSetIdProto]
) -> Any:
    """One node on constant inputs, by onnx's reference implementation."""
    from onnx.reference import ReferenceEvaluator

    def info(name: str, value: np.ndarray) -> onnx.ValueInfoProto:
        elem = helper.np_dtype_to_tensor_dtype(value.dtype)
        return helper.make_tensor_value_info(name, elem, value.shape)

    graph = helper.make_graph(
        [node],
        "fold",
        [info(n, v) for n, v in args.items()],
        [helper.make_tensor_value_info(node.output[0], onnx.TensorProto.UNDEFINED, None)],
    )
    default = [o for o in opsets if o.domain in ("", "ai.onnx")]
    model = helper.make_model(graph, opset_imports=default or [helper.make_opsetid("", 13)])
    (value,) = ReferenceEvaluator(model).run(None, args)
    return value


def tensor_type(type_proto: onnx.TypeProto) -> TensorType | None:
    """The TensorType of a TypeProto, or None for sequences, maps and optionals."""
    if not type_proto.HasField("tensor_type"):
        return None
    tt = type_proto.tensor_type
    dtype = None
    if tt.elem_type:
        try:
            dtype = np.dtype(helper.tensor_dtype_to_np_dtype(tt.elem_type))
        except (KeyError, TypeError, ValueError):
            dtype = None
    shape: tuple[Dim, ...] | None = None
    if tt.HasField("shape"):
        shape = tuple(  # some exporters write -1 for an unknown dim
            d.dim_value if d.HasField("dim_value") and d.dim_value >= 0 else (d.dim_param or None)
            for d in tt.shape.dim
        )
    return TensorType(dtype, shape)


def attribute_values(node: onnx.NodeProto) -> dict[str, Any]:
    """A node's attributes as Python values (strings decoded, tensors as numpy arrays)."""
    out: dict[str, Any] = {}
    for attr in node.attribute:
        value = helper.get_attribute_value(attr)
        if isinstance(value, bytes):
            value = value.decode("utf-8", "replace")
        elif isinstance(value, list) and value and isinstance(value[0], bytes):
            value = [v.decode("utf-8", "replace") for v in value]
        elif isinstance(value, onnx.TensorProto):
            value = numpy_helper.to_array(value)
        out[attr.name] = value
    return out


def subgraph_reads(node: onnx.NodeProto) -> list[str]:
    """Outer-scope values read by a node's subgraphs (If, Loop, Scan), nested ones included."""
    reads: list[str] = []
    for attr in node.attribute:
        graphs = [attr.g] if attr.type == onnx.AttributeProto.GRAPH else list(attr.graphs)
        for g in graphs:
            reads.extend(_free_names(g))
    return list(dict.fromkeys(reads))


def _free_names(graph: onnx.GraphProto) -> list[str]:
    defined = {v.name for v in graph.input} | {t.name for t in graph.initializer}
    defined |= {t.name for t in graph.sparse_initializer}
    free: list[str] = []
    for node in graph.node:
        for name in [*node.input, *subgraph_reads(node)]:
            if name and name not in defined:
                free.append(name)
        defined.update(node.output)
    free.extend(v.name for v in graph.output if v.name not in defined)
    return free


class NodeView:
    """What a backend's check sees of one node: op, attributes, input/output types, constants."""

    def __init__(self, graph: Graph, index: int) -> None:
        self.graph = graph
        self.index = index
        self.proto = graph.nodes[index]

    name = property(lambda self: self.proto.name)
    op_type = property(lambda self: self.proto.op_type)
    domain = property(lambda self: self.proto.domain)
    inputs = property(lambda self: list(self.proto.input))
    outputs = property(lambda self: list(self.proto.output))

    @cached_property
    def attrs(self) -> dict[str, Any]:
        return attribute_values(self.proto)

    def input_type(self, i: int) -> TensorType | None:
        """Type of input ``i``, or None when it is absent or unknown."""
        names = self.proto.input
        return self.graph.type_of(names[i]) if i < len(names) and names[i] else None

    def output_type(self, i: int) -> TensorType | None:
        names = self.proto.output
        return self.graph.type_of(names[i]) if i < len(names) and names[i] else None

    def const(self, i: int) -> np.ndarray | None:
        """Value of input ``i`` when it is a constant, else None."""
        names = self.proto.input
        return self.graph.constant(names[i]) if i < len(names) and names[i] else None

    def producer_types(self) -> list[str | None]:
        """The op type producing each input (None for graph inputs, weights, absent inputs)."""
        found = (self.graph.producer.get(n) if n else None for n in self.proto.input)
        return [None if i is None else self.graph.nodes[i].op_type for i in found]

    def __repr__(self) -> str:
        return f"<NodeView {self.name} {self.op_type}>"


class Graph:
    """Analysis of a normalized model's main graph (see ``load_model``).

    Nodes are in topological order. Constant values (initializers, Constant nodes, Cast/Identity
    of constants, shape computations on static shapes) are not edges: each user binds them
    itself.
    """

    def __init__(self, model: onnx.ModelProto) -> None:
        self.model = model
        g = model.graph
        self.nodes: list[onnx.NodeProto] = list(g.node)
        self.index = {n.name: i for i, n in enumerate(self.nodes)}
        self.initializers = {t.name: t for t in g.initializer}
        init_names = set(self.initializers)
        self.inputs = [v.name for v in g.input if v.name not in init_names]
        self.outputs = [v.name for v in g.output]
        self.producer: dict[str, int] = {}
        for i, node in enumerate(self.nodes):
            for name in node.output:
                if name:
                    self.producer[name] = i
        self._types: dict[str, TensorType | None] = {}
        for v in [*g.input, *g.value_info, *g.output]:
            if v.type.ByteSize():
                self._types[v.name] = tensor_type(v.type)
        for t in g.initializer:
            dims = tuple(int(d) for d in t.dims)
            self._types[t.name] = TensorType(
                np.dtype(helper.tensor_dtype_to_np_dtype(t.data_type)), dims
            )
        self._constant_cache: dict[str, np.ndarray] = {}
        self.const_nodes = self._find_const_nodes()
        self.reads: list[
            list[str]
        ] = []  # per node: non-constant values it reads, subgraphs included
        self.consumers: dict[str, list[int]] = {}
        for i, node in enumerate(self.nodes):
            names = [
                n for n in [*node.input, *subgraph_reads(node)] if n and not self.is_constant(n)
            ]
            if i in self.const_nodes:  # Shape reads only its input's type
                names = []
            names = list(dict.fromkeys(names))
            self.reads.append(names)
            for name in names:
                self.consumers.setdefault(name, []).append(i)

    def _find_const_nodes(self) -> set[int]:
        constant_values = self._constant_values = set(self.initializers)
        const_nodes: set[int] = set()
        for i, node in enumerate(self.nodes):
            if node.domain not in ("", "ai.onnx"):
                continue
            if (
                node.op_type in _FOLDABLE
                and all(name in constant_values for name in node.input if name)
                and (node.op_type != "ConstantOfShape" or self._small_fill(node))
            ) or self._fold_shape(node):
                const_nodes.add(i)
                constant_values.update(node.output)
        return const_nodes

    def _fold_shape(self, node: onnx.NodeProto) -> bool:
        """Fold a shape computation into ``_constant_cache``; False when it cannot be folded."""
        op, names = node.op_type, list(node.input)
        if op in ("Shape", "Size") and len(names) == 1 and len(node.output) == 1:
            t = self.type_of(names[0])
            if t is None or not t.is_static:
                return False
            dims = [d for d in t.shape or () if isinstance(d, int)]
            if op == "Size":
                value = np.array(int(np.prod(dims, dtype=np.int64)), np.int64)
            else:
                attrs = attribute_values(node)
                value = np.array(dims[attrs.get("start", 0) : attrs.get("end")], np.int64)
            self._constant_cache[node.output[0]] = value
            return True
        if op not in _SHAPE_ARITHMETIC or len(node.output) != 1:
            return False
        if not all(self.is_constant(n) for n in names if n):
            return False
        args = {n: v for n in names if n and (v := self.constant(n)) is not None}
        if any(v.size > _SMALL for v in args.values()):
            return False
        try:
            value = _evaluate(node, args, self.model.opset_import)
        except Exception:  # onnx's reference refused it: the node stays
            return False
        if isinstance(value, np.generic):
            value = np.asarray(value)
        if not isinstance(value, np.ndarray) or value.size > _SMALL:
            return False
        self._constant_cache[node.output[0]] = value
        return True

    def _small_fill(self, node: onnx.NodeProto) -> bool:
        """A ConstantOfShape folds only when its shape is an initializer of bounded size."""
        shape = self.initializers.get(node.input[0]) if node.input else None
        if shape is None:
            return False
        dims = numpy_helper.to_array(shape).reshape(-1)
        return bool(np.all(dims >= 0)) and int(np.prod(dims, dtype=object)) <= _MAX_FOLDED_FILL

    # -- values ---------------------------------------------------------------------------

    def is_constant(self, name: str) -> bool:
        return name in self._constant_values

    def constant(self, name: str) -> np.ndarray | None:
        """The value of a constant as a numpy array, or None if ``name`` is not constant."""
        if name not in self._constant_values:
            return None
        if name not in self._constant_cache:
            if name in self.initializers:
                value = numpy_helper.to_array(self.initializers[name])
            else:
                value = self._fold(self.nodes[self.producer[name]])
            self._constant_cache[name] = value
        return self._constant_cache[name]

    def _fold(self, node: onnx.NodeProto) -> np.ndarray:
        attrs = attribute_values(node)
        if node.op_type == "Constant":
            ((key, value),) = ((k, v) for k, v in attrs.items())
            if key == "sparse_value":
                raise ModelError(f"node '{node.name}': sparse Constant values are not supported")
            return np.asarray(value, dtype=np.float32 if key.startswith("value_float") else None)
        source = self.constant(node.input[0])
        second = self.constant(node.input[1]) if len(node.input) > 1 and node.input[1] else None
        assert source is not None
        try:
            return _fold_op(node.op_type, source, second, attrs)
        except (ValueError, KeyError, IndexError, TypeError) as exc:
            raise ModelError(f"node '{node.name}' ({node.op_type}) of constants: {exc}") from None

    def type_of(self, name: str) -> TensorType | None:
        if name not in self._types and name in self._constant_values:
            value = self.constant(name)
            assert value is not None
            self._types[name] = TensorType(value.dtype, tuple(value.shape))
        return self._types.get(name)

    def view(self, index: int) -> NodeView:
        return NodeView(self, index)

    def succ(self, index: int) -> Iterable[int]:
        """Nodes reading a (non-constant) value that node ``index`` produces."""
        for name in self.nodes[index].output:
            yield from self.consumers.get(name, ())

    def pred(self, index: int) -> Iterable[int]:
        """Nodes producing a (non-constant) value that node ``index`` reads."""
        for name in self.reads[index]:
            if name in self.producer:
                yield self.producer[name]


# ---------------------------------------------------------------------------------------------
# loading and normalizing
# ---------------------------------------------------------------------------------------------


def load_model(
    model: str | os.PathLike[str] | bytes | onnx.ModelProto,
    shapes: Mapping[str, Sequence[int]] | None = None,
) -> onnx.ModelProto:
    """Load a model and normalize it for partitioning: ``specialize(read_model(model), shapes)``."""
    return specialize(read_model(model), shapes)


def read_model(model: str | os.PathLike[str] | bytes | onnx.ModelProto) -> onnx.ModelProto:
    """Read a model, give every node a unique name (unnamed nodes become ``<op_type>_<index>``),
    check that every value is defined once and put nodes in topological order. The caller's
    ModelProto is not changed."""
    if isinstance(model, onnx.ModelProto):
        proto = onnx.ModelProto()
        proto.CopyFrom(model)
    elif isinstance(model, bytes):
        proto = _parse(model, "the given bytes")
    else:
        path = os.fspath(model)
        if not os.path.isfile(path):
            raise ModelError(f"model file '{path}' does not exist")
        try:
            proto = onnx.load(path)
        except Exception as exc:  # onnx raises DecodeError, OSError, ValueError...
            raise ModelError(f"'{path}' is not a valid ONNX model: {exc}") from exc
    if not proto.graph.node and not proto.graph.output:
        raise ModelError("the model has an empty graph (no nodes, no outputs)")
    _name_nodes(proto.graph)
    _check_names(proto.graph)
    _toposort(proto.graph)
    return proto


def specialize(
    source: onnx.ModelProto, shapes: Mapping[str, Sequence[int]] | None = None
) -> onnx.ModelProto:
    """A copy of a read model with the input dims in ``shapes`` fixed, checked by the ONNX
    checker, and with the main graph's value types filled in by ONNX shape inference."""
    proto = onnx.ModelProto()
    proto.CopyFrom(source)
    if shapes:
        _fix_shapes(proto.graph, shapes)
    _check_initializers(proto.graph)
    try:
        onnx.checker.check_model(proto)
    except Exception as exc:
        raise ModelError(
            f"the model is not valid ONNX: {str(exc).strip().splitlines()[0]}"
        ) from exc
    try:
        inferred = onnx.shape_inference.infer_shapes(proto, data_prop=True)
    except Exception as exc:
        raise ModelError(f"ONNX shape inference failed on the model: {exc}") from exc
    # Keep the main graph's inferred types only: what inference writes into If/Loop bodies can
    # contradict onnxruntime's own inference (seen on Silero VAD), so subgraphs stay as written.
    del proto.graph.value_info[:]
    proto.graph.value_info.extend(inferred.graph.value_info)
    for old, new in zip(proto.graph.output, inferred.graph.output, strict=True):
        old.CopyFrom(new)
    _complete_types(proto)
    _complete_shapes(proto)
    return proto


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


def _complete_types(proto: onnx.ModelProto) -> None:
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
    "BitShift Cast CastLike Ceil Celu Clip Concat Constant Conv ConvTranspose Cos Cosh CumSum "
    "DepthToSpace DequantizeLinear Div Dropout Einsum Elu Equal Erf Exp Flatten Floor Gather "
    "GatherElements GatherND Gelu Gemm GlobalAveragePool GlobalMaxPool Greater GreaterOrEqual "
    "GroupNormalization HardSigmoid HardSwish Hardmax Identity InstanceNormalization IsInf IsNaN "
    "LayerNormalization LeakyRelu Less LessOrEqual Log LogSoftmax LpNormalization MatMul Max "
    "MaxPool Mean Min Mish Mod Mul Neg Not Or PRelu Pow QuantizeLinear Reciprocal Relu Round "
    "ScatterElements ScatterND Selu Shape Shrink Sigmoid Sign Sin Sinh Size Softmax Softplus "
    "Softsign SpaceToDepth Sqrt Sub Sum Tan Tanh ThresholdedRelu Transpose Trilu Where Xor"
)
_SHAPE_FROM_SHAPES = frozenset(_SHAPE_FROM_SHAPES_TEXT.split())


def _complete_shapes(proto: onnx.ModelProto) -> None:
    """Fill in dims ONNX inference left unknown, once every input dim is fixed.

    ONNX data propagation stops at chains like Shape -> Slice -> Expand (seen on MiniLM), which
    leaves backends that need static shapes with nothing to claim. onnxruntime runs the model
    on two different inputs and a value's observed shape is recorded when both runs agree and
    it cannot depend on input values: no input value reaches an operand that sets a shape by
    its value (Reshape's shape, Slice's bounds, ...), and every op upstream is one whose shape
    rules are known (Shape and Size pass on shapes, not values). Best effort: when
    onnxruntime cannot run the model, shapes stay as inference left them.
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
        known_op = node.domain in ("", "ai.onnx") and (
            node.op_type in _SHAPE_FROM_SHAPES or node.op_type in _SHAPE_OPERANDS
        )
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


def _check_initializers(graph: onnx.GraphProto) -> None:
    """Initializers have a known element type and as many bytes as their dims need."""
    for t in graph.initializer:
        try:
            dtype = np.dtype(helper.tensor_dtype_to_np_dtype(t.data_type))
        except (KeyError, TypeError, ValueError):
            raise ModelError(
                f"initializer '{t.name}' has an unknown element type {t.data_type}"
            ) from None
        if t.data_location == onnx.TensorProto.EXTERNAL or not t.HasField("raw_data"):
            continue
        if any(d < 0 for d in t.dims):
            raise ModelError(f"initializer '{t.name}' has a negative dim: {list(t.dims)}")
        need = int(np.prod(t.dims, dtype=object)) * dtype.itemsize
        if dtype.kind != "O" and t.data_type not in _PACKED and len(t.raw_data) != need:
            raise ModelError(
                f"initializer '{t.name}' has {len(t.raw_data)} bytes of data, but its dims "
                f"{list(t.dims)} and type {dtype} need {need}"
            )


def _parse(data: bytes, where: str) -> onnx.ModelProto:
    proto = onnx.ModelProto()
    try:
        proto.ParseFromString(data)
    except Exception as exc:
        raise ModelError(f"{where} are not a valid ONNX model: {exc}") from exc
    return proto


def _name_nodes(graph: onnx.GraphProto) -> None:
    taken = {n.name for n in graph.node if n.name}
    seen: set[str] = set()
    for i, node in enumerate(graph.node):
        if not node.name:
            name = f"{node.op_type}_{i}"
            while name in taken:
                name += "_"
            node.name = name
            taken.add(name)
        elif node.name in seen:  # duplicate names: keep the first, suffix the others
            name = f"{node.name}_{i}"
            while name in taken:
                name += "_"
            node.name = name
            taken.add(name)
        seen.add(node.name)


def _check_names(graph: onnx.GraphProto) -> None:
    """Every value read is defined; no value is defined twice (SSA)."""
    inputs = {v.name for v in graph.input}
    defined = inputs | {t.name for t in graph.initializer}
    produced: set[str] = set()
    for node in graph.node:
        for name in node.output:
            if name and (name in produced or name in inputs):
                raise ModelError(f"value '{name}' is defined twice (again by node '{node.name}')")
            produced.add(name)
    defined |= produced
    for node in graph.node:
        for name in [*node.input, *subgraph_reads(node)]:
            if name and name not in defined:
                raise ModelError(f"node '{node.name}' reads '{name}', which nothing defines")
    for v in graph.output:
        if v.name not in defined:
            raise ModelError(f"graph output '{v.name}' is not produced by any node or input")


def _toposort(graph: onnx.GraphProto) -> None:
    nodes = list(graph.node)
    producer = {name: i for i, n in enumerate(nodes) for name in n.output if name}
    deps = [{producer[x] for x in [*n.input, *subgraph_reads(n)] if x in producer} for n in nodes]
    order: list[int] = []
    state = [0] * len(nodes)  # 0 new, 1 on stack, 2 done
    for start in range(len(nodes)):
        if state[start]:
            continue
        stack = [(start, iter(sorted(deps[start])))]
        state[start] = 1
        while stack:
            i, it = stack[-1]
            nxt = next(it, None)
            if nxt is None:
                stack.pop()
                state[i] = 2
                order.append(i)
            elif state[nxt] == 1:
                raise ModelError(f"the graph has a cycle through node '{nodes[nxt].name}'")
            elif state[nxt] == 0:
                state[nxt] = 1
                stack.append((nxt, iter(sorted(deps[nxt]))))
    if order != list(range(len(nodes))):
        del graph.node[:]
        graph.node.extend(nodes[i] for i in order)


def _fix_shapes(graph: onnx.GraphProto, shapes: Mapping[str, Sequence[int]]) -> None:
    del graph.value_info[:]  # stale symbolic shapes; inference recomputes them
    by_name = {v.name: v for v in graph.input}
    for name, dims in shapes.items():
        if name not in by_name:
            raise ModelError(
                f"[shapes] names input '{name}', but the model's inputs are {sorted(by_name)}"
            )
        tt = by_name[name].type.tensor_type
        old = tt.shape.dim
        if len(old) and len(old) != len(dims):
            raise ModelError(
                f"[shapes] gives input '{name}' {len(dims)} dims {list(dims)}, "
                f"but the model declares {len(old)}"
            )
        for i, (d, new) in enumerate(zip(old, dims, strict=False)):
            if d.HasField("dim_value") and d.dim_value >= 0 and d.dim_value != new:
                raise ModelError(
                    f"[shapes] gives input '{name}' dim {i} = {new}, "
                    f"but the model fixes it to {d.dim_value}"
                )
        del tt.shape.dim[:]
        for new in dims:
            tt.shape.dim.add().dim_value = int(new)
