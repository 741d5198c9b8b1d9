"""A model's graph as byoc analyses it: types, constants, producers, consumers, folding."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from byoc.errors import ModelError

SUBGRAPH_OPS = frozenset({"If", "Loop", "Scan"})
# Ops whose output holds values of their first input only, placed otherwise (none computes).
MOVES = frozenset({"Expand", "Flatten", "Identity", "Reshape", "Squeeze", "Transpose", "Unsqueeze"})
# Ops whose every output value is a copy, a maximum or a convex combination of input values, so
# they move it no more than their (data) inputs move (``Graph.quantum``); of _FIRST_ONLY the
# first input is the data, the rest pads, indices or sizes.
_NO_GAIN = frozenset(
    {"AveragePool", "Concat", "GlobalAveragePool", "GlobalMaxPool", "MaxPool", "Pad", "Relu"}
    | {"Resize", "Slice", "Split", "Upsample"}
)
_FIRST_ONLY = frozenset({"Pad", "Resize", "Slice", "Split", "Upsample"})
QUANTIZERS = frozenset({"QuantizeLinear", "DynamicQuantizeLinear"})  # output 0: integers
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
# Sqrt and Reciprocal are there for the scale the TorchScript exporter computes from a dim for
# scaled_dot_product_attention (sqrt(1 / sqrt(head size)), applied to q and to k): IEEE rounds
# both exactly, so numpy's value is onnxruntime's. Left unfolded, onnxruntime computed it in a
# unit of its own in front of the backend's partition, once per layer.
_SHAPE_ARITHMETIC_TEXT = """Abs Add And Ceil Concat Div Equal Expand Floor Gather Greater
GreaterOrEqual Less LessOrEqual Max Min Mod Mul Neg Not Or Range Reciprocal ReduceMax ReduceMin
ReduceProd ReduceSum Sign Slice Sqrt Sub Where"""
_SHAPE_ARITHMETIC = frozenset(_SHAPE_ARITHMETIC_TEXT.split())
_SMALL = 1 << 12  # elements: the most a folded shape computation reads or writes
# Ops that only rearrange (or repeat) constants fold up to _MAX_FOLDED_FILL elements, as
# onnxruntime folds them: Paddle exports build each LSTM's weights with Concat and Slice of
# initializers, and its zero initial states with Tile.
_REARRANGE = frozenset({"Concat", "Slice", "Transpose", "Tile"})
# A Gather of a constant table at constant indices (BERT's position and token-type embeddings)
# folds up to this many elements: the rows become a constant, as onnxruntime folds them.
_MAX_FOLDED_GATHER = 1 << 20
DROPPED_BYTES = 1 << 20  # Graph.drop_weights forgets cached values larger than this
Dim = int | str | None


@dataclass(frozen=True)
class TensorType:
    """A value's element type and shape, as far as shape inference knows them."""

    dtype: np.dtype[Any] | None
    shape: tuple[Dim, ...] | None

    @property
    def is_static(self) -> bool:
        return self.shape is not None and all(isinstance(d, int) for d in self.shape)

    def __str__(self) -> str:
        dims = (
            "?"
            if self.shape is None
            else "x".join("?" if d is None else str(d) for d in self.shape)
        )
        return f"{dtype_name(self.dtype)}[{dims or 'scalar'}]"


def dtype_name(dtype: np.dtype[Any] | None) -> str:
    """A tensor element type as ONNX names it where numpy's name differs: strings (numpy's
    objects) are "string"; unknown is "?"."""
    return "?" if dtype is None else "string" if dtype.kind == "O" else str(dtype)


def _made_size(op: str, args: list[np.ndarray | None]) -> int:
    """How many elements ``op`` makes of these constant inputs, where that is known before
    running it (Range, Expand, Tile: their output can be far larger than their inputs); 0
    where it is not."""
    try:
        scalars = [float(a.reshape(-1)[0]) for a in args if a is not None and a.size == 1]
        if op == "Range" and len(scalars) == 3:
            start, limit, delta = scalars
            return max(int(np.ceil((limit - start) / delta)), 0) if delta else 1 << 62
        if op == "Expand" and len(args) == 2 and args[0] is not None and args[1] is not None:
            shape = np.broadcast_shapes(args[0].shape, tuple(int(d) for d in args[1].reshape(-1)))
            return int(np.prod(shape, dtype=object))
        if op == "Tile" and len(args) == 2 and args[0] is not None and args[1] is not None:
            return int(args[0].size * np.prod(args[1].astype(object), dtype=object))
    except (ValueError, OverflowError, TypeError):  # bad shapes: the evaluation refuses them
        return 1 << 62
    return 0


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
    if op != "Identity":  # only what _FOLDABLE names: a value folded otherwise stays cached
        raise AssertionError(f"{op} is not folded by _fold_op")
    return x


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


# dim_params that name no dim but say "unknown" (Paddle writes "?", some exporters "None" or
# "-1"): each is its own unknown, like an empty one, not one dim shared by every input.
_UNKNOWN = frozenset({"", "?", "None", "-1", "unk"})


def _symbol(dim_param: str) -> str | None:
    return None if dim_param.strip() in _UNKNOWN else dim_param


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
            d.dim_value if d.HasField("dim_value") and d.dim_value >= 0 else _symbol(d.dim_param)
            for d in tt.shape.dim
        )
    return TensorType(dtype, shape)


def declared_inputs(model: onnx.ModelProto) -> dict[str, TensorType | None]:
    """The model's inputs as its graph declares them, name -> type (not the weights that an
    old model also lists as inputs)."""
    weights = {t.name for t in model.graph.initializer}
    return {v.name: tensor_type(v.type) for v in model.graph.input if v.name not in weights}


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
        """The op type producing each input: None for graph inputs, initializers and absent
        inputs; a weight made by a node (Constant, Cast or DequantizeLinear of an initializer)
        gives that node's op type."""
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
        self._evaluated: set[str] = set()  # folded by _fold_shape: only it computes them
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
        """Fold a shape computation (or a rearrangement of constants, ``_REARRANGE``) into
        ``_constant_cache``; False when it cannot be folded."""
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
            self._evaluated.add(node.output[0])
            return True
        if (op not in _SHAPE_ARITHMETIC and op not in _REARRANGE) or len(node.output) != 1:
            return False
        if not all(self.is_constant(n) for n in names if n):
            return False
        args = {n: v for n in names if n and (v := self.constant(n)) is not None}
        limit = _MAX_FOLDED_FILL if op in _REARRANGE else _SMALL
        if op == "Gather" and len(args) == 2:
            limit = _MAX_FOLDED_GATHER
            table, indices = args[names[0]], args[names[1]]
            axis = attribute_values(node).get("axis", 0) % max(table.ndim, 1)
            rows = table.size // max(table.shape[axis], 1) if table.ndim else 1
            if indices.size > _SMALL or rows * indices.size > limit:
                return False
        elif any(v.size > limit for v in args.values()):
            return False
        if _made_size(op, [args.get(n) for n in names]) > limit:
            return False  # known before evaluating it: a Range to 2**40 would take terabytes
        try:
            value = _evaluate(node, args, self.model.opset_import)
        except Exception:  # onnx's reference refused it: the node stays
            return False
        if isinstance(value, np.generic):
            value = np.asarray(value)
        if not isinstance(value, np.ndarray) or value.size > limit:
            return False
        self._constant_cache[node.output[0]] = value
        self._evaluated.add(node.output[0])
        return True

    def _small_fill(self, node: onnx.NodeProto) -> bool:
        """A ConstantOfShape folds only when its shape is a constant of bounded size."""
        shape = self.constant(node.input[0]) if node.input else None
        if shape is None:
            return False
        dims = shape.reshape(-1)
        return bool(np.all(dims >= 0)) and int(np.prod(dims, dtype=object)) <= _MAX_FOLDED_FILL

    # -- values ---------------------------------------------------------------------------

    def is_constant(self, name: str) -> bool:
        return name in self._constant_values

    def drop_weights(self) -> None:
        """Forget the cached values over DROPPED_BYTES that ``constant`` reads again as they
        were: the model's weights and what _FOLDABLE ops make of them. Values ``_fold_shape``
        evaluated (a Transpose of a weight) stay: ``_fold`` cannot compute them again."""
        cache = self._constant_cache
        for name in [k for k, v in cache.items() if v.nbytes > DROPPED_BYTES]:
            if name not in self._evaluated:
                del cache[name]

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

    def quantum(self, name: str, seen: dict[str, float] | None = None) -> float:
        """How far rounding ties may move ``name`` when a DequantizeLinear writes it (through
        ops that only move values): its largest constant scale, the step between its values
        (a sum taken in another order may round a tie at its QuantizeLinear the other way),
        plus the quantum its QuantizeLinear's input carries from the DequantizeLinears before
        it through ops that do not amplify a difference (``_NO_GAIN``: a copy, a maximum or
        a convex combination of their inputs): a tie there moves a value one step, and
        neither that op nor the next quantization makes the move larger than that. 0 when
        no DequantizeLinear writes it. The integers a QuantizeLinear writes move by steps of
        one (``_steps``)."""
        seen = {} if seen is None else seen
        if name in seen:
            return seen[name]
        seen[name] = 0.0  # a cycle (none in a valid graph) carries nothing
        value, node = name, self._producer_node(name)
        while node is not None and node.op_type in MOVES and node.input:
            value, node = node.input[0], self._producer_node(node.input[0])
        if node is not None and node.op_type in QUANTIZERS and node.output[0] == value:
            seen[name] = self._steps(node, seen)
            return seen[name]
        if node is None or node.op_type != "DequantizeLinear":
            return 0.0
        scale = self.constant(node.input[1]) if len(node.input) > 1 else None
        step = float(np.max(np.abs(scale.astype(np.float64)))) if scale is not None else 0.0
        if scale is None or not scale.size or not math.isfinite(step):
            return 0.0
        quantize = self._producer_node(node.input[0])
        if quantize is not None and quantize.op_type == "QuantizeLinear":
            step += self._carried(quantize.input[0], seen)
        seen[name] = step
        return step

    def _steps(self, node: onnx.NodeProto, seen: dict[str, float]) -> float:
        """How many steps ties may move the integers a QuantizeLinear (or a
        DynamicQuantizeLinear) writes, read at a partition's or the model's end: one, plus
        the quantum its input carries over its scale (a dynamic one's: one)."""
        scale = self.constant(node.input[1]) if len(node.input) > 1 else None
        if scale is None or not scale.size:
            return 1.0
        step = float(np.min(np.abs(scale.astype(np.float64))))
        carried = self._carried(node.input[0], seen)
        return 1.0 + (carried / step if step > 0 and math.isfinite(carried / step) else 0.0)

    def _carried(self, name: str, seen: dict[str, float], depth: int = 0) -> float:
        """The quantum ``name`` carries: a DequantizeLinear's (``quantum``), or the largest
        of the inputs of an op that does not amplify their differences; 0 otherwise (and
        past 100 ops or quantizations, short of Python's recursion limit)."""
        node = self._producer_node(name)
        if node is None or depth + len(seen) > 100:
            return 0.0
        if node.op_type in MOVES or node.op_type == "DequantizeLinear":
            return self.quantum(name, seen)
        mode = next((a.s for a in node.attribute if a.name == "mode"), b"")
        if node.op_type not in _NO_GAIN or mode == b"cubic":  # cubic weights leave [0, 1]
            return 0.0
        inputs = node.input[:1] if node.op_type in _FIRST_ONLY else node.input
        return max((self._carried(i, seen, depth + 1) for i in inputs if i), default=0.0)

    def _producer_node(self, name: str) -> onnx.NodeProto | None:
        index = self.producer.get(name)
        return None if index is None else self.nodes[index]

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
