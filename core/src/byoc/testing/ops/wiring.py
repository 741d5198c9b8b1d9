"""Wirings: a case's node where real models put it (a constant operand, broadcasting operands,
one value as two inputs, outputs that other nodes read, one of several outputs used)."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Collection
from typing import Any

import numpy as np
import onnx
from onnx import helper

from byoc.testing.ops.cases import OP_CASES, Case, In
from byoc.testing.ops.graphs import Builder, single_op_model

# dtype kind -> unary ops, in the order tried, that read a node's output of that kind
FOLLOWERS: dict[str, tuple[str, ...]] = {
    "f": ("Relu", "Abs", "Neg", "Identity", "Tanh", "Sigmoid"),
    "i": ("Abs", "Neg", "Identity"),
    "u": ("Identity",),
    "b": ("Not", "Identity"),
}
_BROADCAST_CONSTANT = (4, 1, 1)  # one value per channel of A
_BROADCAST_INPUTS = ((1, 4, 1, 6), (1, 1, 6, 1), (6,))  # none of them A; together they make A


def wirings(op_type: str, claimed: Collection[str]) -> list[str]:
    """The ways ``wiring_model`` wires ``op_type``'s case that apply to it, for a backend that
    claims the op types ``claimed``. Each is a node of the case with:

    - ``input K constant``: its input K an initializer (in a partition, a constant the
      partition binds inside, not one of ``partition.inputs``), for each computed input of a
      node with two or more;
    - ``broadcast constant``: its last computed input a [4, 1, 1] constant (broadcasting ops);
    - ``broadcast inputs``: its computed inputs of shapes [1, 4, 1, 6], [1, 1, 6, 1] and [6]
      (broadcasting ops);
    - ``repeated input``: one value as each of its computed inputs of one shape and type,
      ``Add(x, x)``;
    - ``outputs read inside the partition``: each output read by a claimed unary op
      (``FOLLOWERS``) and a model output too, the node's outputs listed last to first;
    - ``one output used``: of its several outputs, only the last one read.
    """
    case = OP_CASES[op_type]
    computed = [s for s in case.inputs if s.value is None]
    found = []
    if len(computed) >= 2:
        found += [f"input {i} constant" for i, s in enumerate(case.inputs) if s.value is None]
        if case.broadcasting:
            found += ["broadcast constant", "broadcast inputs"]
        kinds = [(s.shape, np.dtype(s.dtype)) for s in computed]
        if len(set(kinds)) < len(kinds):
            found.append("repeated input")
    if any(_follower(kind, claimed) for kind in _output_kinds(op_type)):
        found.append("outputs read inside the partition")
    if case.outputs > 1:
        found.append("one output used")
    return found


def wiring_model(
    op_type: str, claimed: Collection[str], only: str | None = None
) -> tuple[onnx.ModelProto, dict[str, np.ndarray], dict[str, str]]:
    """A model holding ``op_type``'s case in every wiring of ``wirings`` (or in ``only``), inputs
    for it, and the wiring of each of its ``op_type`` nodes, by node name."""
    case = OP_CASES[op_type]
    b = Builder()
    outputs: list[str] = []
    nodes: dict[str, str] = {}
    for wiring in [only] if only else wirings(op_type, claimed):
        computed = [i for i, s in enumerate(case.inputs) if s.value is None]
        specs = list(case.inputs)
        kinds = [(s.shape, np.dtype(s.dtype)) for s in specs]
        shared: dict[Any, str] = {}
        names: list[str] = []
        for i, spec in enumerate(specs):
            if wiring == f"input {i} constant":
                names.append(b.leaf(spec, constant=True))
            elif wiring == "broadcast constant" and i == computed[-1]:
                names.append(b.leaf(_like(spec, _BROADCAST_CONSTANT), constant=True))
            elif wiring == "broadcast inputs" and i in computed:
                names.append(b.leaf(_like(spec, _BROADCAST_INPUTS[computed.index(i)])))
            elif wiring == "repeated input" and i in computed:
                if kinds[i] not in shared:  # positive values if any of the sharers needs them
                    positive = any(specs[j].positive for j in computed if kinds[j] == kinds[i])
                    shared[kinds[i]] = b.leaf(_like(spec, spec.shape, positive))
                names.append(shared[kinds[i]])
            else:
                names.append(b.leaf(spec))
        outs = b.add(op_type, names, case)
        nodes[b.nodes[-1].name] = wiring
        if wiring == "outputs read inside the partition":
            for out, kind in zip(outs, _output_kinds(op_type), strict=True):
                follower = _follower(kind, claimed)
                if follower:
                    outputs += b.add(follower, [out], Case())
            outputs += outs[::-1]
        elif wiring == "one output used":
            outputs.append(outs[-1])
        else:
            outputs += outs
    return b.model(outputs), b.feeds, nodes


def _like(spec: In, shape: tuple[int, ...], positive: bool | None = None) -> In:
    """``spec`` (a computed input) with another shape, random values of its kind."""
    positive = spec.positive if positive is None else positive
    return dataclasses.replace(spec, shape=shape, value=None, positive=positive)


@functools.cache
def _output_kinds(op_type: str) -> tuple[str | None, ...]:
    """The dtype kind ("f", "i", "u", "b") of each output of ``op_type``'s case, None where
    shape inference does not know it."""
    model, _ = single_op_model(op_type)
    elems = [out.type.tensor_type.elem_type for out in model.graph.output]
    return tuple(np.dtype(helper.tensor_dtype_to_np_dtype(e)).kind if e else None for e in elems)


def _follower(kind: str | None, claimed: Collection[str]) -> str | None:
    return next((op for op in FOLLOWERS.get(kind or "", ()) if op in claimed), None)
