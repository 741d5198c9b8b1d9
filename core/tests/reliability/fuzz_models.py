"""Malformed ONNX models for fuzzing: small valid bases and the mutations that break them.

Used by ``test_malformed_models.py`` (through hypothesis) and by ``bench/reliability.py``.
Every mutation takes a model and a ``random.Random`` and changes the model in place, or returns
bytes (truncated or garbled serializations).
"""

from __future__ import annotations

import contextlib
import random
from collections.abc import Callable

import numpy as np
import onnx
from byoc.testing.build import make_model, node
from onnx import helper

Mutated = onnx.ModelProto | bytes


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
            node("Conv", ["x", "k", "b"], "c", pads=[1, 1, 1, 1]),
            node("Relu", ["c"], "r"),
            node("GlobalAveragePool", ["r"], "g"),
            node("Flatten", ["g"], "f"),
            node("Gemm", ["f", "gw", "gb"], "o", transB=1),
        ],
        {"x": [1, 3, 8, 8]},
        ["o"],
        {
            "k": rng.standard_normal((4, 3, 3, 3)).astype(np.float32),
            "b": np.zeros(4, np.float32),
            "gw": rng.standard_normal((2, 4)).astype(np.float32),
            "gb": np.zeros(2, np.float32),
        },
    )


def symbolic() -> onnx.ModelProto:
    return make_model(
        [
            node("Mul", ["x", "x"], "m"),
            node("Tanh", ["m"], "t"),
            node("Reshape", ["t", "shape"], "r"),
            node("Transpose", ["r"], "p", perm=[1, 0]),
            node("Cast", ["p"], "i", to=onnx.TensorProto.INT64),
        ],
        {"x": ["N", 6]},
        ["p", "i"],
        {"shape": np.array([-1, 3], np.int64)},
    )


BASES: dict[str, Callable[[], onnx.ModelProto]] = {
    "chain": chain,
    "conv": conv,
    "symbolic": symbolic,
}


def _values(m: onnx.ModelProto) -> list[str]:
    g = m.graph
    names = [v.name for v in g.input] + [t.name for t in g.initializer]
    return names + [o for n in g.node for o in n.output]


def _pick_node(m: onnx.ModelProto, rnd: random.Random) -> onnx.NodeProto | None:
    return rnd.choice(m.graph.node) if m.graph.node else None


def rewire(m: onnx.ModelProto, rnd: random.Random) -> None:
    """Point a node input at another value: a later one (a cycle), itself, or nothing."""
    n = _pick_node(m, rnd)
    if n is None or not n.input:
        return
    i = rnd.randrange(len(n.input))
    n.input[i] = rnd.choice([*_values(m), "ghost", "", n.output[0]])


def drop_node(m: onnx.ModelProto, rnd: random.Random) -> None:
    """Remove a node: its consumers dangle."""
    if m.graph.node:
        del m.graph.node[rnd.randrange(len(m.graph.node))]


def duplicate_output(m: onnx.ModelProto, rnd: random.Random) -> None:
    """Two producers of one value, or one graph output listed twice."""
    if rnd.random() < 0.5 and m.graph.output:
        m.graph.output.append(rnd.choice(m.graph.output))
    elif len(m.graph.node) >= 2:
        a, b = rnd.sample(list(m.graph.node), 2)
        b.output[0] = rnd.choice([a.output[0], *[v.name for v in m.graph.input]])


BAD_VALUES: list[object] = [
    -1,
    0,
    7,
    2**40,
    -(2**62),
    1e30,
    float("nan"),
    "garbage",
    [],
    [0, 0],
    [-5, 2**40, 3],
    [1.5, 2.5],
    ["a", "b"],
]


def bad_attribute(m: onnx.ModelProto, rnd: random.Random) -> None:
    """Replace or add an attribute with a value of the wrong kind or range."""
    n = _pick_node(m, rnd)
    if n is None:
        return
    names = [a.name for a in n.attribute] + ["axis", "perm", "pads", "to", "group", "alpha", "foo"]
    name = rnd.choice(names)
    value = rnd.choice(BAD_VALUES)
    kept = [a for a in n.attribute if a.name != name]
    del n.attribute[:]
    n.attribute.extend(kept)
    with contextlib.suppress(ValueError, TypeError):
        n.attribute.append(helper.make_attribute(name, value))


def huge_dim(m: onnx.ModelProto, rnd: random.Random) -> None:
    """An input dim that is enormous, zero or negative; or a symbolic name."""
    if not m.graph.input:
        return
    v = rnd.choice(m.graph.input)
    dims = v.type.tensor_type.shape.dim
    if not dims:
        return
    d = dims[rnd.randrange(len(dims))]
    choice = rnd.choice([2**31, 2**40, 2**62, 0, -5, "M"])
    if isinstance(choice, str):
        d.dim_param = choice
    else:
        d.dim_value = choice


def unknown_domain(m: onnx.ModelProto, rnd: random.Random) -> None:
    """A node in a domain nobody knows, with or without an opset import for it."""
    n = _pick_node(m, rnd)
    if n is None:
        return
    n.domain = rnd.choice(["com.nowhere", "ai.onnx.ml", "com.microsoft"])
    if rnd.random() < 0.5:
        m.opset_import.append(helper.make_opsetid(n.domain, 1))


def unknown_op(m: onnx.ModelProto, rnd: random.Random) -> None:
    n = _pick_node(m, rnd)
    if n is not None:
        n.op_type = rnd.choice(["FooBar", "", "relu", "Loop", "If"])


def wrong_dtype(m: onnx.ModelProto, rnd: random.Random) -> None:
    """An input or output declared with another element type (or an invalid one)."""
    values = [*m.graph.input, *m.graph.output]
    if not values:
        return
    v = rnd.choice(values)
    v.type.tensor_type.elem_type = rnd.choice([0, 2, 3, 6, 7, 8, 9, 10, 11, 16, 17, 23, 99])


def untyped_input(m: onnx.ModelProto, rnd: random.Random) -> None:
    if not m.graph.input:
        return
    v = rnd.choice(m.graph.input)
    if rnd.random() < 0.5:
        v.ClearField("type")
    else:
        v.type.tensor_type.ClearField("shape")


def empty_graph(m: onnx.ModelProto, rnd: random.Random) -> None:
    del m.graph.node[:]
    if rnd.random() < 0.5:
        del m.graph.output[:]
    if rnd.random() < 0.5:
        del m.graph.input[:]


def bad_versions(m: onnx.ModelProto, rnd: random.Random) -> None:
    if rnd.random() < 0.5:
        m.ir_version = rnd.choice([0, 1, 3, 99])
    else:
        del m.opset_import[:]
        if rnd.random() < 0.7:
            m.opset_import.append(helper.make_opsetid("", rnd.choice([0, 1, 6, 99])))


def bad_initializer(m: onnx.ModelProto, rnd: random.Random) -> None:
    """An initializer whose data does not match its dims, or whose dims are huge."""
    if not m.graph.initializer:
        return
    t = rnd.choice(m.graph.initializer)
    kind = rnd.randrange(3)
    if kind == 0:
        t.raw_data = t.raw_data[: len(t.raw_data) // 2] if t.raw_data else b"\x00"
    elif kind == 1 and t.dims:
        t.dims[0] = rnd.choice([0, 2**40, t.dims[0] + 1])
    else:
        t.data_type = rnd.choice([0, 7, 8, 99])


def nameless(m: onnx.ModelProto, rnd: random.Random) -> None:
    """Nodes with no name, duplicate names, or outputs with empty names."""
    n = _pick_node(m, rnd)
    if n is None:
        return
    choice = rnd.randrange(3)
    if choice == 0:
        for nd in m.graph.node:
            nd.name = ""
    elif choice == 1:
        for nd in m.graph.node:
            nd.name = "same"
    else:
        n.output[0] = ""


def output_is_input(m: onnx.ModelProto, rnd: random.Random) -> None:
    """A graph output that is a graph input or an initializer (no node computes it)."""
    names = [v.name for v in m.graph.input] + [t.name for t in m.graph.initializer]
    if not names:
        return
    name = rnd.choice(names)
    m.graph.output.append(helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, None))


MUTATIONS: dict[str, Callable[[onnx.ModelProto, random.Random], None]] = {
    f.__name__: f
    for f in [
        rewire,
        drop_node,
        duplicate_output,
        bad_attribute,
        huge_dim,
        unknown_domain,
        unknown_op,
        wrong_dtype,
        untyped_input,
        empty_graph,
        bad_versions,
        bad_initializer,
        nameless,
        output_is_input,
    ]
}


def garble(data: bytes, rnd: random.Random) -> bytes:
    """Truncate serialized bytes or flip a few of them."""
    if rnd.random() < 0.5:
        return data[: rnd.randrange(len(data))]
    out = bytearray(data)
    for _ in range(rnd.randint(1, 8)):
        out[rnd.randrange(len(out))] = rnd.randrange(256)
    return bytes(out)


def mutate(base: str, names: list[str], seed: int, to_bytes: bool = False) -> Mutated:
    """Build base model ``base``, apply the named mutations in order, maybe garble its bytes."""
    rnd = random.Random(seed)
    model = BASES[base]()
    for name in names:
        MUTATIONS[name](model, rnd)
    if to_bytes:
        return garble(model.SerializeToString(), rnd)
    return model


CONFIGS: list[dict[str, object]] = [
    {"backends": ["examplejson"]},
    {"backends": []},
]


def exercise(model: Mutated, config: dict[str, object]) -> str:
    """Partition, compile, run and compare a model the way a user would.

    Returns ``"ok"`` or the name of the ByocError raised; anything else propagates (a bug).
    """
    import warnings

    import byoc

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            byoc.partition(model, config)
            compiled = byoc.compile(model, config)
            try:
                inputs = byoc.random_inputs(compiled.plan.model, seed=1)
            except byoc.InputError:
                return "ok"
            compiled.run(inputs)
            byoc.compare(model, config, inputs)
    except byoc.ByocError as exc:
        return type(exc).__name__
    return "ok"
