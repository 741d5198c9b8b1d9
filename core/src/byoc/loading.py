"""Loading a model for partitioning: read it, name and order its nodes, fix input dims, check
it and fill in its value types (ONNX shape inference, completed by ``byoc.probe``)."""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import onnx
from google.protobuf.message import Message
from onnx import helper, numpy_helper

from byoc.errors import ModelError
from byoc.graph import subgraph_reads
from byoc.probe import complete_shapes, complete_types

# Element types stored two or four to a byte in raw_data.
_PACKED = {
    getattr(onnx.TensorProto, n)
    for n in ("INT4", "UINT4", "FLOAT4E2M1", "INT2", "UINT2")
    if hasattr(onnx.TensorProto, n)
}


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
        with open(path, "rb") as fh:
            if fh.read(4) == b"PK\x03\x04":  # a zip: a .byoc file, not an ONNX model
                raise ModelError(
                    f"'{path}' is a .byoc file (a compiled model), not an ONNX model: "
                    "`byoc run` runs it, `byoc inspect` shows what it holds"
                )
        try:
            proto = onnx.load(path, load_external_data=False)
            _check_size(proto)  # before reading gigabytes of external data to refuse them
            onnx.load_external_data_for_model(proto, os.path.dirname(path))
        except ModelError:
            raise
        except Exception as exc:  # onnx raises DecodeError, OSError, ValueError...
            raise ModelError(f"'{path}' is not a valid ONNX model: {exc}") from exc
    if not proto.graph.node and not proto.graph.output:
        raise ModelError("the model has an empty graph (no nodes, no outputs)")
    _check_size(proto)
    _default_domain(proto)
    _name_nodes(proto.graph)
    _check_names(proto.graph)
    _toposort(proto.graph)
    return proto


def _default_domain(proto: onnx.ModelProto) -> None:
    """ONNX's own domain spelt "ai.onnx" (onnxruntime takes it) as "", which the ONNX checker
    and byoc's backends know it by: in the opset imports, where "" is not imported too, and in
    the nodes of every graph and function."""
    if any(i.domain == "" for i in proto.opset_import):
        return
    renamed = False
    for owner in (proto, *proto.functions):
        for imp in owner.opset_import:
            if imp.domain == "ai.onnx" and not any(i.domain == "" for i in owner.opset_import):
                imp.domain, renamed = "", True
    if not renamed:
        return
    graphs: list[Any] = [proto.graph, *proto.functions]
    while graphs:
        g = graphs.pop()
        for node in g.node:
            if node.domain == "ai.onnx":
                node.domain = ""
            for a in node.attribute:
                graphs.extend([a.g] if a.type == onnx.AttributeProto.GRAPH else a.graphs)


MAX_WEIGHT_BYTES = 1 << 31  # protobuf's limit on one message, which byoc passes models in


class TooLarge(ModelError):
    """A model whose weights one protobuf message cannot hold: byoc cannot partition it, and
    ``byoc.compile`` of its file runs it whole on onnxruntime (``compiler._whole_file``)."""

    def __init__(self, size: int) -> None:
        self.what = (
            f"the model holds {size / 2**30:.1f} GiB of weights; byoc hands partitions and "
            "segments to onnxruntime and the backends as serialized ONNX, which protobuf "
            f"limits to {MAX_WEIGHT_BYTES / 2**30:.3g} GiB"
        )
        super().__init__(
            f"{self.what}: byoc cannot partition it. Given as a file (with its external data), "
            "`byoc compile`, `run` and `compare` run it whole on onnxruntime"
        )


def _check_size(proto: onnx.ModelProto) -> None:
    """The model with its weights fits in one protobuf message, as byoc passes models around."""
    size = weight_bytes(proto)
    if size >= MAX_WEIGHT_BYTES:
        raise TooLarge(size)


def weight_bytes(proto: onnx.ModelProto) -> int:
    """The bytes of the main graph's initializers and constant tensors, counted by their dims
    (protobuf's own count costs a serialization)."""
    tensors = [*proto.graph.initializer]
    for n in proto.graph.node:
        tensors.extend(a.t for a in n.attribute if a.type == onnx.AttributeProto.TENSOR)
    return sum(_tensor_bytes(t) for t in tensors)


def _tensor_bytes(t: onnx.TensorProto) -> int:
    """A tensor's size from its dims and type (reading ``raw_data`` costs a copy)."""
    return int(np.prod(t.dims, dtype=np.int64)) * _itemsize(t.data_type)


def _itemsize(data_type: int) -> int:
    try:
        return max(np.dtype(helper.tensor_dtype_to_np_dtype(data_type)).itemsize, 1)
    except (KeyError, TypeError, ValueError):  # an unknown type: _check_initializers says so
        return 1


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
    _check_input_kinds(proto.graph)
    try:
        onnx.checker.check_model(_declared_outputs_only(_weightless(proto)))
    except Exception as exc:
        raise ModelError(
            f"the model is not valid ONNX: {str(exc).strip().splitlines()[0]}"
        ) from exc
    _check_opsets(proto)
    _check_attributes(proto.graph)
    longest_range = _check_ranges(proto.graph)
    light = _weightless(proto)
    try:
        inferred = onnx.shape_inference.infer_shapes(light)
        if longest_range <= _MAX_PROPAGATED and _short_vectors(inferred):
            inferred = onnx.shape_inference.infer_shapes(light, data_prop=True)
    except Exception as exc:
        raise ModelError(f"ONNX shape inference failed on the model: {exc}") from exc
    # Keep the main graph's inferred types only: what inference writes into If/Loop bodies can
    # contradict onnxruntime's own inference (seen on Silero VAD), so subgraphs stay as written.
    del proto.graph.value_info[:]
    proto.graph.value_info.extend(inferred.graph.value_info)
    for old, new in zip(proto.graph.output, inferred.graph.output, strict=True):
        old.CopyFrom(new)
    complete_types(proto)
    complete_shapes(proto)
    return proto


# Attributes that ONNX shape inference divides by or indexes with, unchecked (strides = 0 is
# a SIGFPE inside it): every value must be at least the bound.
_ATTRIBUTE_BOUNDS = {"strides": 1, "dilations": 1, "kernel_shape": 1, "pads": 0, "group": 1}
_WINDOWED = {
    "Conv", "ConvTranspose", "ConvInteger", "QLinearConv", "MaxPool", "AveragePool", "LpPool",
    "MaxUnpool", "DeformConv", "Col2Im", "MaxRoiPool", "Im2Col",
}  # fmt: skip


def _weightless(proto: onnx.ModelProto) -> onnx.ModelProto:
    """The model as ONNX's checker and shape inference need it: each initializer of more than
    ``_WEIGHT_BYTES`` becomes a graph input of its type and dims. Both serialize the model
    they are given (shape inference four times: a 500 MB model cost 2 GB and 4 s there),
    and neither reads such values: the checker checks their types, inference their shapes.
    Small constants (a Reshape's shape, a Slice's bounds) keep their values for inference."""
    big = [t for t in proto.graph.initializer if _tensor_bytes(t) > _WEIGHT_BYTES]
    if not big:
        return proto
    skipped = {t.name for t in big}
    light = onnx.ModelProto()
    _copy_fields(proto, light, skip={"graph"})
    _copy_fields(proto.graph, light.graph, skip={"initializer"})
    light.graph.initializer.extend(t for t in proto.graph.initializer if t.name not in skipped)
    listed = {v.name for v in proto.graph.input}
    light.graph.input.extend(
        helper.make_tensor_value_info(t.name, t.data_type, list(t.dims))
        for t in big
        if t.name not in listed
    )
    return light


# Initializers above this size are left out of what the checker and shape inference see.
_WEIGHT_BYTES = 1 << 16


def _copy_fields(source: Message, target: Message, skip: set[str]) -> None:
    """Copy every set field of a protobuf message but those named in ``skip``."""
    for field, value in source.ListFields():
        if field.name in skip:
            continue
        if isinstance(value, Message):
            getattr(target, field.name).CopyFrom(value)
        elif isinstance(value, str | bytes | int | float):
            setattr(target, field.name, value)
        else:  # a repeated field
            getattr(target, field.name).extend(value)


def _declared_outputs_only(proto: onnx.ModelProto) -> onnx.ModelProto:
    """The model for ONNX's checker, which wants a type and a shape on every output where
    onnxruntime does not: outputs declared without them (``make_tensor_value_info(name,
    type, None)``, a bare name) are left out of the copy checked, and take the types shape
    inference and byoc's shape completion give them after the check."""
    kinds = [o.type.WhichOneof("value") for o in proto.graph.output]
    declared = [
        o
        for o, kind in zip(proto.graph.output, kinds, strict=True)
        if kind not in (None, "tensor_type") or o.type.tensor_type.HasField("shape")
    ]
    if len(declared) == len(proto.graph.output):
        return proto
    checked = onnx.ModelProto()
    checked.CopyFrom(proto)
    del checked.graph.output[:]
    checked.graph.output.extend(declared)
    return checked


def _check_input_kinds(graph: onnx.GraphProto) -> None:
    """Inputs are tensors: byoc makes, checks and passes every input as an array, so a
    sequence or a map would reach onnxruntime as a tensor and fail there, obscurely."""
    constants = {t.name for t in graph.initializer}
    for value in graph.input:
        kind = value.type.WhichOneof("value")
        if value.name not in constants and kind not in (None, "tensor_type"):
            what = kind.removesuffix("_type").replace("_", " ")
            raise ModelError(
                f"input '{value.name}' is {'an' if what[0] in 'aeiou' else 'a'} {what}; "
                "byoc takes tensor inputs only (onnxruntime can run this model itself)"
            )


def _check_opsets(proto: onnx.ModelProto) -> None:
    """The default domain's opset is one that onnx (and so onnxruntime) knows."""
    newest = onnx.defs.onnx_opset_version()
    for imp in proto.opset_import:
        if imp.domain in ("", "ai.onnx") and not 1 <= imp.version <= newest:
            raise ModelError(
                f"the model imports opset {imp.version} of the ONNX domain; the installed onnx "
                f"knows opsets 1 to {newest}: export the model at opset {newest} or below"
            )


def _check_attributes(graph: onnx.GraphProto) -> None:
    """Attribute values that ONNX shape inference trusts: window sizes, strides, dilations,
    pads and groups of convolutions and poolings, and Transpose's perm (in subgraphs too)."""
    for node in graph.node:
        attrs = {a.name: a for a in node.attribute}
        if node.op_type in _WINDOWED:
            for name, low in _ATTRIBUTE_BOUNDS.items():
                if name in attrs:
                    values = list(attrs[name].ints) or [attrs[name].i]
                    if any(v < low for v in values):
                        raise ModelError(
                            f"node '{node.name}' ({node.op_type}) has {name} = {values}; each "
                            f"must be at least {low}"
                        )
        if node.op_type == "Transpose" and "perm" in attrs:
            perm = list(attrs["perm"].ints)
            if sorted(perm) != list(range(len(perm))):
                raise ModelError(
                    f"node '{node.name}' (Transpose) has perm = {perm}, which is not a "
                    f"permutation of 0..{len(perm) - 1}"
                )
        for a in node.attribute:
            for sub in [a.g] if a.HasField("g") else list(a.graphs):
                _check_attributes(sub)


# Elements of a 1-D value: ONNX data propagation walks each one of a 1-D value that an Add,
# Mul, Cast, Concat or Gather reads (half a second a million; a declared [2**40], forever).
_MAX_PROPAGATED = 1 << 18


def _short_vectors(proto: onnx.ModelProto) -> bool:
    """No 1-D value of the main graph (inputs, outputs, initializers, and the value_info of
    shape inference without data propagation: a flattened tensor) is longer than
    ``_MAX_PROPAGATED``. Then inference may propagate values too (a Shape's, through Gather
    and Concat, to a Reshape); else ``complete_shapes`` fills in what it leaves unknown. A
    Range of constant bounds longer than that (its length only propagation finds) counts
    too: ``specialize`` asks ``_check_ranges``."""
    g = proto.graph
    dims = [list(t.dims) for t in g.initializer]
    for v in [*g.input, *g.output, *g.value_info]:
        dims.append([d.dim_value for d in v.type.tensor_type.shape.dim])
    return all(len(d) != 1 or d[0] <= _MAX_PROPAGATED for d in dims)


_MAX_RANGE = 1 << 28  # elements: ONNX shape inference computes a constant Range's values


def _check_ranges(graph: onnx.GraphProto) -> float:
    """A Range of constant bounds makes at most ``_MAX_RANGE`` elements: shape inference
    (with data propagation) would compute a Range to 2**40 for minutes and gigabytes.
    Returns the most elements such a Range makes (0 without one)."""
    longest = 0.0
    scalars: dict[str, float] = {}
    for t in graph.initializer:
        if len(t.dims) <= 1 and (value := _number(t)) is not None:
            scalars[t.name] = value
    for node in graph.node:
        constant = node.op_type == "Constant" and node.attribute and node.attribute[0].HasField("t")
        if constant and (value := _number(node.attribute[0].t)) is not None:
            scalars[node.output[0]] = value
        if node.op_type == "Range" and all(n in scalars for n in node.input[:3]):
            start, limit, delta = (scalars[n] for n in node.input[:3])
            count = np.ceil((limit - start) / delta) if delta else np.inf
            if not count <= _MAX_RANGE:
                raise ModelError(
                    f"node '{node.name}' (Range) would make {count:.0f} elements "
                    f"({start:g} to {limit:g} by {delta:g}); at most {_MAX_RANGE} are allowed"
                )
            longest = max(longest, float(count))
    return longest


def _number(t: onnx.TensorProto) -> float | None:
    """The value of a one-element tensor of numbers; None for any other tensor (strings,
    complex numbers, external data, data that does not fit its dims: shape inference cannot
    read those either, and onnxruntime refuses the last)."""
    if t.data_location == onnx.TensorProto.EXTERNAL or math.prod(t.dims) != 1:
        return None
    try:
        value = numpy_helper.to_array(t)
    except (ValueError, TypeError):
        return None
    if value.size != 1 or value.dtype.kind not in "biuf":
        return None
    return float(value.reshape(-1)[0])


def _check_initializers(graph: onnx.GraphProto) -> None:
    """Initializers, and the values of Constant nodes, have a known element type and as much
    data as their dims need (onnx's reader would fail on them deep inside byoc); a Constant
    node has one value."""
    tensors = [(t, f"initializer '{t.name}'") for t in graph.initializer]
    for node in graph.node:
        if node.op_type != "Constant" or node.domain not in ("", "ai.onnx"):
            continue
        if len(node.attribute) != 1:
            raise ModelError(
                f"node '{node.name}' (Constant) has {len(node.attribute)} attributes; a "
                "Constant has exactly one, its value"
            )
        if node.attribute[0].HasField("t"):
            tensors.append((node.attribute[0].t, f"the value of node '{node.name}' (Constant)"))
    for t, what in tensors:
        _check_tensor(t, what)


_TYPED_FIELDS = [
    "float_data", "int32_data", "string_data", "int64_data", "double_data", "uint64_data",
]  # fmt: skip
_COMPLEX = {onnx.TensorProto.COMPLEX64, onnx.TensorProto.COMPLEX128}  # two numbers an element


def _check_tensor(t: onnx.TensorProto, what: str) -> None:
    try:
        dtype = np.dtype(helper.tensor_dtype_to_np_dtype(t.data_type))
    except (KeyError, TypeError, ValueError):
        raise ModelError(f"{what} has an unknown element type {t.data_type}") from None
    if t.HasField("segment"):
        raise ModelError(f"{what} is a segment of a tensor, which onnx cannot read")
    if t.data_location == onnx.TensorProto.EXTERNAL or t.data_type in _PACKED:
        return
    if any(d < 0 for d in t.dims):
        raise ModelError(f"{what} has a negative dim: {list(t.dims)}")
    count = int(np.prod(t.dims, dtype=object))
    if t.HasField("raw_data"):
        need = count * dtype.itemsize
        if dtype.kind != "O" and len(t.raw_data) != need:
            raise ModelError(
                f"{what} has {len(t.raw_data)} bytes of data, but its dims "
                f"{list(t.dims)} and type {dtype} need {need}"
            )
        return
    stored = sum(len(getattr(t, f)) for f in _TYPED_FIELDS)
    need = count * (2 if t.data_type in _COMPLEX else 1)
    if stored != need:
        raise ModelError(
            f"{what} has {stored} value(s), but its dims {list(t.dims)} and type {dtype} need "
            f"{need}"
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
