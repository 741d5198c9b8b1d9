"""Small representative ONNX graphs per op type, and graphs built from pattern tables.

``OP_CASES[op_type]`` says how to build one node of that op: its inputs (graph inputs, or
constants with a fixed value), attributes, number of outputs, opset; ``OP_VARIANTS`` holds its
other settings (``cases``). ``single_op_model`` makes a model of one such node;
``pattern_model`` makes a model that a ``byoc.patterns`` pattern matches, from the cases of the
ops it names (``graphs``). ``wiring_model`` puts a case's node where real models put it (a
constant operand, broadcasting operands, one value as two inputs, outputs that other nodes
read; ``wiring``). ``special_feeds`` puts NaN, infinities, -0.0 or subnormals into a model's
float inputs, ``integer_case`` and ``edge_feeds`` make a case integer and feed it the dtype's
limits (``values``). Used by the conformance suite (``byoc.testing.conformance``).
"""

from byoc.testing.ops.cases import OP_CASES, OP_VARIANTS, A, Case, In, random_array
from byoc.testing.ops.graphs import Example, pattern_model, single_op_model
from byoc.testing.ops.values import (
    DIVISORS,
    INTEGER_DTYPES,
    SPECIAL_VALUES,
    edge_feeds,
    integer_case,
    integer_edges,
    special_feeds,
)
from byoc.testing.ops.wiring import FOLLOWERS, wiring_model, wirings

__all__ = [
    "DIVISORS",
    "FOLLOWERS",
    "INTEGER_DTYPES",
    "OP_CASES",
    "OP_VARIANTS",
    "SPECIAL_VALUES",
    "A",
    "Case",
    "Example",
    "In",
    "edge_feeds",
    "integer_case",
    "integer_edges",
    "pattern_model",
    "random_array",
    "single_op_model",
    "special_feeds",
    "wiring_model",
    "wirings",
]
