"""Model inputs: checking what a user passes to ``run``, and making random ones."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

import numpy as np

from byoc.errors import InputError
from byoc.graph import Graph, TensorType, dtype_name
from byoc.loading import load_model

MAX_RANDOM_ELEMENTS = 1 << 28  # per input: 1 GiB of float32


def _shapes_example(name: str, shape: list[Any]) -> str:
    """A [shapes] line for ``name``: a leading symbolic dim (a batch) is 1; any other (an
    image's height, a sequence) is the user's to choose, so it is named, not guessed."""
    dims = [d if isinstance(d, int) else 1 if i == 0 else d or "?" for i, d in enumerate(shape)]
    chosen = [str(d) for d in dims if isinstance(d, str)]
    if not chosen:
        return f"e.g. {name} = {dims}"
    line = ", ".join(str(d) for d in dims)
    return f"{name} = [{line}] with the sizes you run it at in place of {', '.join(chosen)}"


def random_inputs(
    model: Any,
    shapes: Mapping[str, list[int]] | None = None,
    seed: int = 0,
    fixed: Mapping[str, Any] | None = None,
    ranges: Mapping[str, tuple[int, int]] | None = None,
    given: Mapping[str, Any] | None = None,
) -> dict[str, np.ndarray]:
    """Random arrays for a model's inputs (a Graph, a ModelProto, a path, or a signature
    ``{name: TensorType}`` such as ``CompiledModel.inputs``), but for those ``given``: the
    caller's arrays, kept as they are (``check_inputs`` checks them). A symbolic dim of a random
    input takes the size a given input has at a dim of the same name (``input_ids`` of shape
    [2, 48] makes ``attention_mask`` [batch, sequence] [2, 48]).

    Floats are standard normal, booleans fair coins. Integers are uniform in [0, 10), but
    valid by construction where the graph says what they are (``value_ranges``): an index
    into a Gather or an embedding stays inside the gathered axis, a mask is 0 or 1. ``fixed``
    (the config's ``[compare] inputs``) gives named inputs a value instead: a number fills the
    input, a nested list is the whole input. ``ranges`` gives integer inputs their ``[low,
    high)`` instead of the graph's (``CompiledModel.input_ranges``, for a signature). A
    symbolic dim that ``shapes`` does not fix is an InputError naming the input and the dim.
    """
    if isinstance(model, Mapping):  # a signature: CompiledModel.inputs
        types = dict(model)
    else:
        graph = model if isinstance(model, Graph) else Graph(load_model(model, shapes))
        types = {n: graph.type_of(n) for n in graph.inputs}
    unknown = sorted(set(fixed or {}) - set(types))
    if unknown:
        raise InputError(
            f"[compare] inputs names {', '.join(map(repr, unknown))}, but the model's inputs are "
            f"{', '.join(map(repr, types))}"
        )
    if ranges is None:
        ranges = value_ranges(graph) if not isinstance(model, Mapping) else {}
    given = given or {}
    _no_unknown(types, given)
    sizes = _symbol_sizes(types, given)
    rng = np.random.default_rng(seed)
    out: dict[str, np.ndarray] = {}
    for name, tt in types.items():
        if name in given:
            out[name] = given[name]
            continue
        if tt is None or tt.dtype is None or tt.shape is None:
            raise InputError(f"input '{name}' has no known type and shape; give it with --input")
        shape = [sizes.get(d, d) for d in (shapes or {}).get(name, tt.shape)]
        dims: list[int] = []
        for i, d in enumerate(shape):
            if isinstance(d, int):
                dims.append(d)
            else:
                what = "an unnamed symbolic dim" if d is None else f"a symbolic dim {d!r}"
                example = _shapes_example(name, shape)
                fix = (  # a loaded .byoc file's signature takes no [shapes]
                    ""
                    if isinstance(model, Mapping)
                    else f"fix it in the config's [shapes] table, {example}, or "
                )
                raise InputError(
                    f"input '{name}' has {what} at position {i}; {fix}give an input that has "
                    "it (--input NAME=FILE.npy)"
                )
        size = int(np.prod(dims, dtype=object))
        if size > MAX_RANDOM_ELEMENTS:
            raise InputError(
                f"input '{name}' has shape {tuple(dims)} ({size} elements), too big for random "
                f"inputs (limit {MAX_RANDOM_ELEMENTS}); give smaller dims in [shapes] or --input"
            )
        if fixed and name in fixed:
            try:
                out[name] = np.broadcast_to(np.asarray(fixed[name], tt.dtype), dims).copy()
            except (TypeError, ValueError) as exc:
                raise InputError(
                    f"[compare] inputs gives '{name}' the value {fixed[name]!r}, which does not "
                    f"fit its type {tt}: {exc}"
                ) from None
        elif tt.dtype.kind == "f":
            out[name] = rng.standard_normal(dims).astype(tt.dtype)
        elif tt.dtype.kind in "iu":
            out[name] = rng.integers(*ranges.get(name, (0, 10)), dims).astype(tt.dtype)
        elif tt.dtype.kind == "b":
            out[name] = rng.integers(0, 2, dims).astype(bool)
        else:
            raise InputError(f"input '{name}' is {dtype_name(tt.dtype)}; give it with --input")
    return out


def made_at_random(
    inputs: Mapping[str, Any], given: Collection[str], fixed: Mapping[str, Any]
) -> str:
    """What to add to onnxruntime's error on inputs byoc made: ``; byoc made 'shape' at
    random, ...`` naming the integer ones not ``given`` nor ``fixed`` ([compare] inputs):
    indices, shapes and divisors are what onnxruntime fails on. "" when there are none."""
    made = [
        n
        for n, v in inputs.items()
        if n not in given and n not in fixed and np.asarray(v).dtype.kind in "iub"
    ]
    if not made:
        return ""
    return (
        f"; byoc made {', '.join(map(repr, made))} at random, which the model may not take: "
        "give valid values with --input NAME=FILE.npy (inputs=) or the config's [compare] inputs"
    )


def _symbol_sizes(
    types: Mapping[str, TensorType | None], given: Mapping[str, Any]
) -> dict[Any, int]:
    """Symbolic dim name -> the size the first given input of matching rank has there."""
    sizes: dict[Any, int] = {}
    for name, value in given.items():
        tt = types.get(name)
        shape = np.shape(value)
        if tt is not None and tt.shape is not None and len(shape) == len(tt.shape):
            for d, size in zip(tt.shape, shape, strict=True):
                if isinstance(d, str):
                    sizes.setdefault(d, size)
    return sizes


def given_shapes(
    types: Mapping[str, TensorType | None], given: Mapping[str, Any]
) -> dict[str, list[int]]:
    """The shapes that ``given`` inputs fix for the inputs with dims not known yet: a given
    input's own sizes at those dims (its rank right), and for the others the sizes given at
    dims of the same name (``_symbol_sizes``), where that fixes every dim. Known dims stay as
    they are: a given input that contradicts one is ``check_inputs``' to report."""
    sizes = _symbol_sizes(types, given)
    out: dict[str, list[int]] = {}
    for name, tt in types.items():
        if tt is None or tt.shape is None or tt.is_static:
            continue
        own = np.shape(given[name]) if name in given else ()
        if len(own) == len(tt.shape):
            shape = [d if isinstance(d, int) else own[i] for i, d in enumerate(tt.shape)]
        else:
            shape = [sizes.get(d, d) for d in tt.shape]
        if all(isinstance(d, int) for d in shape):
            out[name] = shape
    return out


# Ops that pass an integer input's values on unchanged (the values, not their arrangement).
_PASS_VALUES = {
    "Identity", "Cast", "Reshape", "Squeeze", "Unsqueeze", "Flatten", "Expand", "Slice",
    "Transpose", "Tile", "Concat", "Split", "Gather", "GatherElements",
}  # fmt: skip
_ND = "(nd)"  # an index tuple: the smallest of the data dims it indexes (_axis_size)
# (op, input index) -> (the input of the table it indexes, the axis attribute or axis)
_INDEXES: dict[tuple[str, int], tuple[int, int | str]] = {
    ("Gather", 1): (0, "axis"),
    ("GatherElements", 1): (0, "axis"),
    ("ScatterElements", 1): (0, "axis"),  # index_add and scatter_reduce of graph nets
    ("GatherND", 1): (0, _ND),  # the last dim of the indices indexes that many data dims
    ("ScatterND", 1): (0, _ND),
    ("EmbedLayerNormalization", 0): (2, 0),  # onnxruntime's fused BERT embedding
    ("EmbedLayerNormalization", 1): (3, 0),
}
# (op, input index) of divisors: an integer input that reaches one is never 0.
_DIVISORS = {("Div", 1), ("Mod", 1)}
# Ops that read an integer input as a mask (cast to float or bool, compared, selected by).
_MASKS = {"Where", "Not", "And", "Or", "Xor", "Equal", "Less", "Greater", "LessOrEqual",
          "GreaterOrEqual", "Cast"}  # fmt: skip


def value_ranges(graph: Graph) -> dict[str, tuple[int, int]]:
    """``[low, high)`` for integer inputs whose meaning the graph gives away: an input that
    reaches a Gather's indices (through reshapes, casts, slices...), a ScatterElements' or
    the index tuples of a GatherND or ScatterND indexes the smallest axis it reaches; else
    one that is TopK's K is 1 to the size of its axis (0 returns nothing to compare); else
    one that divides (Div, Mod) is never 0; else one that reaches a cast, a comparison, Where
    or logic is a mask (0 or 1). Inputs of other uses are not listed."""
    out: dict[str, tuple[int, int]] = {}
    for name in graph.inputs:
        t = graph.type_of(name)
        if t is None or t.dtype is None or t.dtype.kind not in "iu":
            continue
        bound, count, mask, divisor = None, None, False, False
        seen, todo = {name}, [name]
        while todo:
            value = todo.pop()
            for i in graph.consumers.get(value, ()):
                node = graph.nodes[i]
                slots = [k for k, n in enumerate(node.input) if n == value]
                for k in slots:
                    if (node.op_type, k) in _INDEXES:
                        table, axis = _INDEXES[node.op_type, k]
                        size = _axis_size(graph, node, table, axis)
                        if size:
                            bound = size if bound is None else min(bound, size)
                    if (node.op_type, k) == ("TopK", 1):  # K: 1 to the axis' size
                        axis = next((a.i for a in node.attribute if a.name == "axis"), -1)
                        size = _axis_size(graph, node, 0, axis)
                        if size:
                            count = size if count is None else min(count, size)
                mask = mask or node.op_type in _MASKS
                divisor = divisor or any((node.op_type, k) in _DIVISORS for k in slots)
                if node.op_type in _PASS_VALUES and 0 in slots:
                    for out_name in node.output:
                        if out_name and out_name not in seen:
                            seen.add(out_name)
                            todo.append(out_name)
        if bound is not None:
            out[name] = (0, bound)
        elif count is not None:
            out[name] = (1, count + 1)
        elif divisor:
            out[name] = (1, 10)
        elif mask:
            out[name] = (0, 2)
    return out


def _axis_size(graph: Graph, node: Any, table: int, axis: int | str) -> int | None:
    """The static size of the indexed axis of a node's table input, if known."""
    if len(node.input) <= table:
        return None
    t = graph.type_of(node.input[table])
    if t is None or t.shape is None:
        return None
    if axis == _ND:  # GatherND's and ScatterND's index tuples, after batch_dims
        index = graph.type_of(node.input[1])
        width = index.shape[-1] if index is not None and index.shape else None
        first = next((a.i for a in node.attribute if a.name == "batch_dims"), 0)
        if not isinstance(width, int) or not 0 < width <= len(t.shape) - first:
            return None
        sizes = t.shape[first : first + width]
        known = [d for d in sizes if isinstance(d, int) and d > 0]
        return min(known) if len(known) == len(sizes) else None
    if isinstance(axis, str):
        axis = next((a.i for a in node.attribute if a.name == axis), 0)
    if not -len(t.shape) <= axis < len(t.shape):
        return None
    size = t.shape[axis]
    return size if isinstance(size, int) and size > 0 else None


def check_inputs(
    expected: Mapping[str, TensorType | None], given: Mapping[str, Any]
) -> dict[str, np.ndarray]:
    """Check names, dtypes and shapes of run inputs; raise InputError saying what is wrong."""
    if not isinstance(given, Mapping):
        raise InputError(f"inputs must be a dict {{name: array}}, got {type(given).__name__}")
    _no_unknown(expected, given)
    missing = [n for n in expected if n not in given]
    if missing:
        raise InputError(f"missing input {', '.join(repr(n) for n in missing)}")
    out: dict[str, np.ndarray] = {}
    symbols: dict[str, tuple[int, str]] = {}
    for name, want in expected.items():
        value = _as_array(name, given[name], want.dtype if want else None)
        if want is not None:
            check_one(name, value, want, symbols)
        # Backends (C code included) may assume C order, alignment and native byte order.
        out[name] = np.require(value, value.dtype.newbyteorder("="), ["C", "A"])
    return out


def _no_unknown(expected: Mapping[str, Any], given: Mapping[str, Any]) -> None:
    unknown = [n for n in given if n not in expected]
    if unknown:
        raise InputError(
            f"unknown input {', '.join(repr(n) for n in unknown)}; "
            f"the model's inputs are {', '.join(repr(n) for n in expected)}"
        )


def _as_array(name: str, value: Any, want: np.dtype[Any] | None) -> np.ndarray:
    """An ndarray for ``value``: arrays as they are (subclasses unwrapped), numbers and nested
    lists converted when that loses nothing; anything else is an InputError."""
    if isinstance(value, np.ndarray | np.generic):
        value = np.asarray(value)
    elif isinstance(value, list | tuple | int | float | bool | complex):
        try:
            natural = np.asarray(value)
        except (TypeError, ValueError) as exc:
            raise InputError(f"input '{name}' is not an array: {exc}") from None
        if want is not None and natural.dtype.kind in "biufc":
            if not np.can_cast(natural.dtype, want, "same_kind"):
                raise InputError(
                    f"input '{name}' is a {type(value).__name__} of {natural.dtype} values; the "
                    f"model expects {want}: pass a numpy array of dtype {want}"
                )
            natural = natural.astype(want)
        value = natural
    else:
        raise InputError(
            f"input '{name}' is a {type(value).__name__}, not an array; pass a numpy array"
        )
    if value.dtype.kind in "OV" and (want is None or value.dtype != want):
        raise InputError(
            f"input '{name}' has dtype {value.dtype} (Python objects or raw records), which no "
            f"backend can read; the model expects {want if want is not None else 'a tensor'}"
        )
    if (
        want is not None
        and value.dtype.byteorder not in "=|"
        and value.dtype == want.newbyteorder(value.dtype.byteorder)
    ):
        value = value.astype(want)
    if want is not None and want.kind == "O" and value.dtype.kind in "US":
        value = value.astype(object)  # ONNX strings: onnxruntime takes object arrays of str
    return value


def check_one(
    name: str, value: np.ndarray, want: TensorType, symbols: dict[str, tuple[int, str]]
) -> None:
    """Check one input's dtype and shape (symbolic dims consistent across ``symbols``);
    an InputError says what is wrong. ``byoc.batch`` checks ``.npy`` headers with it."""
    if want.dtype is not None and value.dtype != want.dtype:
        raise InputError(
            f"input '{name}' has dtype {value.dtype} but the model expects {want.dtype}"
        )
    if want.shape is None:
        return
    shown = tuple(d if d is not None else "?" for d in want.shape)
    if value.ndim != len(want.shape):
        raise InputError(
            f"input '{name}' has shape {value.shape} (rank {value.ndim}) but the model expects "
            f"{shown} (rank {len(want.shape)})"
        )
    for i, (got, dim) in enumerate(zip(value.shape, want.shape, strict=True)):
        if isinstance(dim, int) and got != dim:
            raise InputError(
                f"input '{name}' has shape {value.shape} but the model expects {shown} "
                f"(dim {i} must be {dim})"
            )
        if isinstance(dim, str):
            seen = symbols.setdefault(dim, (got, name))
            if seen[0] != got:
                raise InputError(
                    f"inconsistent symbolic dim '{dim}': {seen[0]} in input '{seen[1]}' but "
                    f"{got} in input '{name}'"
                )
