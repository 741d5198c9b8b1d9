"""Small valid ONNX models, and a Hypothesis strategy that changes one to three fields of
one: a dim, a type, an attribute, an edge, an initializer's data or where it lives, an opset,
a subgraph, a function. Each edit is a plausible way a model file is wrong (a broken
exporter, a hand edit, a model from a newer toolchain), not random protobuf bytes only."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import onnx
from byoc.testing.build import make_model, node
from hypothesis import event
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

# -- the valid models ----------------------------------------------------------------------------


def chain() -> onnx.ModelProto:
    w = np.arange(12, dtype=np.float32).reshape(4, 3) / 10
    return make_model(
        [
            node("Add", ["x", "y"], "a"),
            node("Relu", ["a"], "r"),
            node("MatMul", ["r", "w"], "m"),
            node("Softmax", ["m"], "s", axis=-1),
        ],
        {"x": [2, 4], "y": [2, 4]},
        ["s", "a"],
        {"w": w},
    )


def conv() -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    return make_model(
        [
            node("Conv", ["x", "k", "b"], "c", pads=[1, 1, 1, 1], strides=[1, 1]),
            node("MaxPool", ["c"], "p", kernel_shape=[2, 2], strides=[2, 2]),
            node("Transpose", ["p"], "t", perm=[0, 2, 3, 1]),
            node("Reshape", ["t", "shape"], "o"),
        ],
        {"x": [1, 3, 8, 8]},
        ["o"],
        {
            "k": rng.standard_normal((4, 3, 3, 3)).astype(np.float32),
            "b": np.zeros(4, np.float32),
            "shape": np.array([1, -1], np.int64),
        },
    )


def symbolic() -> onnx.ModelProto:
    return make_model(
        [
            node("Gather", ["table", "ids"], "e", axis=0),
            node("Cast", ["mask"], "f", to=TensorProto.FLOAT),
            node("Unsqueeze", ["f", "axes"], "u"),
            node("Mul", ["e", "u"], "o"),
        ],
        {"ids": (np.int64, ["N", "L"]), "mask": (np.int64, ["N", "L"])},
        ["o"],
        {
            "table": np.linspace(-1, 1, 30, dtype=np.float32).reshape(10, 3),
            "axes": np.array([-1], np.int64),
        },
    )


def control() -> onnx.ModelProto:
    """An If reading an outer value, a Constant node, a Range of constant bounds."""

    def branch(op: str) -> onnx.GraphProto:
        return helper.make_graph(
            [node(op, ["x"], "b")], op, [], [helper.make_tensor_value_info("b", 1, [3])]
        )

    model = make_model(
        [
            node("Constant", [], "three", value=numpy_helper.from_array(np.array(3, np.int64))),
            node("Range", ["zero", "three", "one"], "r"),
            node("Cast", ["r"], "rf", to=TensorProto.FLOAT),
            node("ReduceSum", ["x"], "sum", keepdims=0),
            node("Greater", ["sum", "zerof"], "cond"),
            node("If", ["cond"], "i", then_branch=branch("Relu"), else_branch=branch("Neg")),
            node("Add", ["i", "rf"], "o"),
        ],
        {"x": [3]},
        ["o"],
        {
            "zero": np.array(0, np.int64),
            "one": np.array(1, np.int64),
            "zerof": np.array(0, np.float32),
        },
    )
    return model


def function() -> onnx.ModelProto:
    """A node calling a model-local function."""
    double = helper.make_function(
        "local",
        "Double",
        ["a"],
        ["b"],
        [helper.make_node("Add", ["a", "a"], ["b"])],
        [helper.make_opsetid("", 17)],
    )
    graph = helper.make_graph(
        [helper.make_node("Double", ["x"], ["y"], domain="local", name="d")],
        "f",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
    )
    return helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("local", 1)],
        functions=[double],
        ir_version=10,
    )


BASES: dict[str, Callable[[], onnx.ModelProto]] = {
    f.__name__: f for f in (chain, conv, symbolic, control, function)
}

# -- edits -----------------------------------------------------------------------------------

ODD_INTS = [0, 1, -1, 2, 3, 7, 2**31, 2**40, 2**62, -(2**62), 2**63 - 1]
ODD_FLOATS = [0.0, -0.0, 1.5, 1e30, -1e30, math.inf, -math.inf, math.nan]
ODD_STRINGS = ["", "x", "ghost", "NCHW", "\x00", "a" * 300]
OPS = [
    "Conv", "Range", "Reshape", "Transpose", "Loop", "If", "Scan", "Split", "Gather", "Einsum",
    "Resize", "ConstantOfShape", "Expand", "Tile", "Slice", "Pad", "TopK", "NonZero", "Unique",
    "MaxPool", "Cast", "Constant", "Identity", "Concat", "Squeeze", "Unsqueeze", "Flatten",
    "Softmax", "MatMul", "Gemm", "LSTM", "QuantizeLinear", "DequantizeLinear", "GridSample",
    "FooBar", "", "relu",
]  # fmt: skip
ATTRIBUTE_NAMES = [
    "axis", "axes", "perm", "pads", "strides", "dilations", "kernel_shape", "group", "to",
    "keepdims", "value", "then_branch", "body", "alpha", "mode", "equation", "split", "k",
]  # fmt: skip
ELEM_TYPES = [*range(0, 27), 99, -1]


def _graphs(model: onnx.ModelProto) -> list[onnx.GraphProto]:
    """The main graph and every subgraph (If branches, Loop bodies)."""
    out, todo = [], [model.graph]
    while todo:
        g = todo.pop()
        out.append(g)
        for n in g.node:
            for a in n.attribute:
                todo.extend([a.g] if a.HasField("g") else list(a.graphs))
    return out


def _values(g: onnx.GraphProto) -> list[str]:
    names = [v.name for v in g.input] + [t.name for t in g.initializer]
    return names + [o for n in g.node for o in n.output]


def _value_infos(model: onnx.ModelProto) -> list[onnx.ValueInfoProto]:
    g = model.graph
    return [*g.input, *g.output, *g.value_info]


def set_dim(draw: st.DrawFn, model: onnx.ModelProto) -> None:
    infos = [v for v in _value_infos(model) if v.type.tensor_type.shape.dim]
    if not infos:
        return
    dims = draw(st.sampled_from(infos)).type.tensor_type.shape.dim
    d = dims[draw(st.integers(0, len(dims) - 1))]
    new = draw(st.one_of(st.sampled_from(ODD_INTS), st.sampled_from(ODD_STRINGS)))
    if isinstance(new, str):
        d.dim_param = new
    else:
        d.dim_value = new


def set_rank(draw: st.DrawFn, model: onnx.ModelProto) -> None:
    infos = _value_infos(model)
    if not infos:
        return
    tt = draw(st.sampled_from(infos)).type.tensor_type
    if draw(st.booleans()):
        tt.ClearField("shape")
    else:
        del tt.shape.dim[:]
        for value in draw(st.lists(st.sampled_from([1, 2, 3, 0]), max_size=6)):
            tt.shape.dim.add().dim_value = value


def set_elem_type(draw: st.DrawFn, model: onnx.ModelProto) -> None:
    elem = draw(st.sampled_from(ELEM_TYPES))
    targets = [*_value_infos(model), *model.graph.initializer]
    if not targets:
        return
    target = draw(st.sampled_from(targets))
    if isinstance(target, onnx.TensorProto):
        target.data_type = elem
    else:
        target.type.tensor_type.elem_type = elem


def set_value_kind(draw: st.DrawFn, model: onnx.ModelProto) -> None:
    """An input or output of another kind: a sequence, an optional, a map, no type at all."""
    infos = [*model.graph.input, *model.graph.output]
    if not infos:
        return
    v = draw(st.sampled_from(infos))
    tensor = helper.make_tensor_type_proto(TensorProto.FLOAT, [2])
    kind = draw(st.sampled_from(["sequence", "optional", "map", "none", "sparse"]))
    if kind == "sequence":
        v.type.CopyFrom(helper.make_sequence_type_proto(tensor))
    elif kind == "optional":
        v.type.CopyFrom(helper.make_optional_type_proto(tensor))
    elif kind == "map":
        v.type.CopyFrom(helper.make_map_type_proto(TensorProto.INT64, tensor))
    elif kind == "sparse":
        v.type.CopyFrom(helper.make_sparse_tensor_type_proto(TensorProto.FLOAT, [2]))
    else:
        v.ClearField("type")


def _odd_attribute(draw: st.DrawFn, name: str) -> onnx.AttributeProto:
    value = draw(
        st.one_of(
            st.sampled_from(ODD_INTS),
            st.sampled_from(ODD_FLOATS),
            st.sampled_from(ODD_STRINGS),
            st.lists(st.sampled_from(ODD_INTS), max_size=6),
            st.lists(st.sampled_from(ODD_FLOATS), min_size=1, max_size=4),
            st.just(numpy_helper.from_array(np.array([1.0, 2.0], np.float32))),
            st.just(helper.make_graph([], "empty", [], [])),
        )
    )
    try:
        attr = helper.make_attribute(name, value)
    except (TypeError, ValueError):
        attr = helper.make_attribute(name, 0)
    if draw(st.integers(0, 9)) == 0:  # a type tag that does not match the field set
        attr.type = draw(st.sampled_from([0, 1, 2, 3, 4, 5, 6, 7, 8, 11, 13]))
    return attr


def set_attribute(draw: st.DrawFn, model: onnx.ModelProto) -> None:
    g = draw(st.sampled_from(_graphs(model)))
    if not g.node:
        return
    n = draw(st.sampled_from(g.node))
    name = draw(st.sampled_from([a.name for a in n.attribute] + ATTRIBUTE_NAMES))
    kept = [a for a in n.attribute if a.name != name]
    del n.attribute[:]
    n.attribute.extend(kept)
    if draw(st.integers(0, 4)):
        n.attribute.append(_odd_attribute(draw, name))


def rewire(draw: st.DrawFn, model: onnx.ModelProto) -> None:
    """A node reads or writes another value: a later one (a cycle), its own, an input's, none."""
    g = draw(st.sampled_from(_graphs(model)))
    if not g.node:
        return
    n = draw(st.sampled_from(g.node))
    names = [*_values(model.graph), *_values(g), "", "ghost", *n.output]
    side = n.input if (n.input and draw(st.booleans())) else n.output
    if side:
        side[draw(st.integers(0, len(side) - 1))] = draw(st.sampled_from(names))
    elif draw(st.booleans()):
        n.input.append(draw(st.sampled_from(names)))


def change_node(draw: st.DrawFn, model: onnx.ModelProto) -> None:
    """A node of another op type or domain, a node dropped, or one doubled."""
    g = draw(st.sampled_from(_graphs(model)))
    if not g.node:
        return
    i = draw(st.integers(0, len(g.node) - 1))
    kind = draw(st.sampled_from(["op", "domain", "drop", "double", "extra input"]))
    n = g.node[i]
    if kind == "op":
        n.op_type = draw(st.sampled_from(OPS))
    elif kind == "domain":
        n.domain = draw(st.sampled_from(["ai.onnx", "com.microsoft", "ai.onnx.ml", "local", "x"]))
    elif kind == "drop":
        del g.node[i]
    elif kind == "double":
        g.node.append(onnx.NodeProto())
        g.node[-1].CopyFrom(n)
    else:
        n.input.extend(draw(st.lists(st.sampled_from(["", "x", "ghost"]), max_size=4)))


def damage_initializer(draw: st.DrawFn, model: onnx.ModelProto) -> None:
    """An initializer whose data does not fit its dims, or lives elsewhere, or is typed data
    of the wrong count."""
    inits = list(model.graph.initializer)
    if not inits:
        return
    t = draw(st.sampled_from(inits))
    kind = draw(st.sampled_from(["raw", "dims", "typed", "external", "string", "segment"]))
    if kind == "raw":
        raw = t.raw_data
        if not raw and t.data_location != TensorProto.EXTERNAL:
            try:  # typed data (float_data, ...), perhaps damaged by an earlier edit
                raw = numpy_helper.to_array(t).tobytes()
            except ValueError:
                raw = b""
        t.raw_data = raw[: draw(st.integers(0, max(len(raw) - 1, 0)))] + draw(st.binary(max_size=9))
    elif kind == "dims":
        del t.dims[:]
        t.dims.extend(draw(st.lists(st.sampled_from(ODD_INTS), max_size=4)))
    elif kind == "typed":  # the data in float_data/int64_data, of another count than dims say
        values = draw(st.lists(st.integers(-5, 5), max_size=7))
        t.ClearField("raw_data")
        if t.data_type == TensorProto.INT64:
            t.int64_data[:] = values
        else:
            t.float_data[:] = [float(v) for v in values]
    elif kind == "external":
        t.ClearField("raw_data")
        t.data_location = TensorProto.EXTERNAL
        del t.external_data[:]
        location = draw(st.sampled_from(["../../etc/passwd", "/etc/passwd", "nowhere.bin", "."]))
        entries = {"location": location}
        if draw(st.booleans()):
            entries["offset"] = draw(st.sampled_from(["0", "-1", "99999999999", "x"]))
            entries["length"] = draw(st.sampled_from(["0", "4", "-4", "99999999999"]))
        for k, v in entries.items():
            t.external_data.add(key=k, value=v)
    elif kind == "string":
        t.CopyFrom(helper.make_tensor(t.name, TensorProto.STRING, [], [b"abc"]))
    else:
        t.segment.begin, t.segment.end = draw(st.sampled_from(ODD_INTS)), -1


def add_scalar(draw: st.DrawFn, model: onnx.ModelProto) -> None:
    """A scalar initializer of an awkward type, read by a node or by nothing."""
    elem, value = draw(
        st.sampled_from(
            [
                (TensorProto.STRING, [b"abc"]),
                (TensorProto.STRING, [b"1.5"]),
                (TensorProto.COMPLEX64, [1 + 2j]),
                (TensorProto.BOOL, [True]),
                (TensorProto.FLOAT16, [np.float16(1.5)]),
                (TensorProto.BFLOAT16, [1.5]),
                (TensorProto.UINT64, [2**64 - 1]),
                (TensorProto.DOUBLE, [math.nan]),
            ]
        )
    )
    name = f"scalar{len(model.graph.initializer)}"
    model.graph.initializer.append(helper.make_tensor(name, elem, [], value))
    if model.graph.node and draw(st.booleans()):
        n = draw(st.sampled_from(model.graph.node))
        if n.input:
            n.input[draw(st.integers(0, len(n.input) - 1))] = name


def add_range(draw: st.DrawFn, model: onnx.ModelProto) -> None:
    """A Range of constant bounds: the size check byoc makes before shape inference."""
    values = st.one_of(st.sampled_from(ODD_FLOATS), st.sampled_from(ODD_INTS))
    elem = draw(st.sampled_from([TensorProto.FLOAT, TensorProto.INT64, TensorProto.INT32]))
    names = []
    for part in ("start", "limit", "delta"):
        v = draw(values)
        if elem != TensorProto.FLOAT:
            v = 0 if not math.isfinite(v) else max(min(int(v), 2**31 - 1), -(2**31))
        name = f"range_{part}{len(model.graph.initializer)}"
        shape = draw(st.sampled_from([[], [1], [2]]))
        data = [v] * math.prod(shape)
        model.graph.initializer.append(helper.make_tensor(name, elem, shape, data))
        names.append(name)
    model.graph.node.append(helper.make_node("Range", names, ["range_out"], name="range"))
    model.graph.output.append(helper.make_tensor_value_info("range_out", elem, None))


def set_opsets(draw: st.DrawFn, model: onnx.ModelProto) -> None:
    kind = draw(st.sampled_from(["version", "ir", "drop", "add"]))
    if kind == "version" and model.opset_import:
        model.opset_import[0].version = draw(st.sampled_from([0, 1, 6, 10, 23, 99, -1]))
    elif kind == "ir":
        model.ir_version = draw(st.sampled_from([0, 1, 3, 99, -1]))
    elif kind == "drop":
        del model.opset_import[:]
    else:
        domain = draw(st.sampled_from(["", "ai.onnx", "com.microsoft", "local", "x"]))
        model.opset_import.append(helper.make_opsetid(domain, draw(st.sampled_from([1, 999]))))


def set_outputs(draw: st.DrawFn, model: onnx.ModelProto) -> None:
    """Graph outputs listed twice, named by a bare name, an input, an initializer, nothing."""
    g = model.graph
    kind = draw(st.sampled_from(["double", "bare", "input", "initializer", "none", "empty"]))
    if kind == "double" and g.output:
        g.output.append(draw(st.sampled_from(g.output)))
    elif kind == "bare" and g.output:
        g.output[0].ClearField("type")
    elif kind == "input" and g.input:
        g.output.append(g.input[0])
    elif kind == "initializer" and g.initializer:
        g.output.append(helper.make_tensor_value_info(g.initializer[0].name, 1, None))
    elif kind == "none":
        del g.output[:]
    else:
        del g.node[:]


def set_names(draw: st.DrawFn, model: onnx.ModelProto) -> None:
    """Nodes without names or with one name; an input also given as an initializer."""
    g = model.graph
    kind = draw(st.sampled_from(["clear", "same", "input initializer"]))
    if kind == "clear":
        for n in g.node:
            n.name = ""
    elif kind == "same":
        for n in g.node:
            n.name = draw(st.sampled_from(["same", "Add_0", "r"]))
    elif g.input:
        g.initializer.append(numpy_helper.from_array(np.zeros(2, np.float32), g.input[0].name))


def damage_function(draw: st.DrawFn, model: onnx.ModelProto) -> None:
    """A model-local function that calls itself, reads nothing, or is defined twice."""
    if not model.functions:
        return
    f = model.functions[0]
    kind = draw(st.sampled_from(["recursive", "dangling", "twice", "domain"]))
    if kind == "recursive":
        f.node.append(helper.make_node(f.name, ["b"], ["c"], domain=f.domain))
    elif kind == "dangling":
        f.node[0].input[0] = "ghost"
    elif kind == "twice":
        model.functions.append(f)
    else:
        f.domain = "other"


EDITS = [
    set_dim, set_rank, set_elem_type, set_value_kind, set_attribute, rewire, change_node,
    damage_initializer, add_scalar, add_range, set_opsets, set_outputs, set_names,
    damage_function,
]  # fmt: skip


@st.composite
def edited_model(draw: st.DrawFn, model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of ``model`` with one to three edits."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    for _ in range(draw(st.integers(1, 3))):
        edit = draw(st.sampled_from(EDITS))
        event(f"model edit: {edit.__name__}")
        edit(draw, out)
    return out
