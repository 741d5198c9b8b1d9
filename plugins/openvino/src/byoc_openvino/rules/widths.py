"""Which integer values of a graph are known to stay small enough for OpenVINO's CPU plugin,
which computes int64 in int32, and int32 arithmetic and comparisons through float32: both are
exact below 2**24."""

from __future__ import annotations

from typing import Any

import numpy as np
from byoc import NodeView, TensorType

EXACT = 1 << 24  # integers of at most this magnitude survive float32 exactly
INT_LIMIT = EXACT  # Backend.int_limit: byoc runs larger integer inputs on onnxruntime
_WIDE_INTS = ("int32", "uint32", "int64", "uint64")
# Integer outputs that stay small whatever the input: indices and sizes of real tensors.
INDEX_OPS = frozenset({"Shape", "Size", "ArgMax", "ArgMin", "NonZero", "TopK", "Unique"})
# Integer outputs that may grow large although every integer input is small.
GROWING_OPS = frozenset(
    {
        "Mul", "Pow", "Sum", "CumSum", "ReduceSum", "ReduceProd", "ReduceSumSquare",
        "ReduceL1", "ReduceL2", "MatMul", "MatMulInteger", "ConvInteger", "Gemm", "Einsum",
        "BitShift", "Range", "ConstantOfShape", "RandomUniform", "RandomNormal",
    }
)  # fmt: skip
INT8_PRODUCTS = ("MatMulInteger", "ConvInteger")  # B's zero point is input 3


class Widths:
    """Which 32- and 64-bit integer values of a graph are known to be small: constants that
    are, the model's inputs (byoc checks them at run time, ``INT_LIMIT``), outputs of index
    ops, and outputs of ops that move, pick, compare or add such values. One pass over the
    nodes, in topological order.

    ``derived`` holds the values computed from a model input, of any dtype (a float cast back
    to an integer is one), index ops' outputs aside: as indices they may fall outside the data,
    which only a Gather reading a model input itself has checked at run time
    (``runtime.index_bounds``).

    ``exact`` holds the int32 results of MatMulInteger and ConvInteger of int8 weights with no
    zero point (or 0): OpenVINO computes them in its int8 kernels, exactly at any size (else
    through float32, wrong above 2**24); a Cast to float may read them (``exact_use``)."""

    def __init__(self, graph: Any) -> None:
        self.graph = graph
        self.small: set[str] = {n for n in graph.inputs if wide(graph.type_of(n))}
        self.derived: set[str] = set(graph.inputs)
        self.exact: set[str] = set()
        for i, proto in enumerate(graph.nodes):
            node = graph.view(i)
            if self._makes_small(node):
                self.small.update(out for out in proto.output if out)
            if node.op_type not in INDEX_OPS and self.derived.intersection(node.inputs):
                self.derived.update(out for out in proto.output if out)
            if node.op_type in INT8_PRODUCTS and _symmetric_int8(node):
                self.exact.add(node.outputs[0])

    def value_fits(self, name: str) -> bool:
        value = self.graph.constant(name)
        if value is not None:
            return value.size == 0 or bool(np.all(np.abs(value.astype(np.float64)) <= EXACT))
        return name in self.small

    def _makes_small(self, node: NodeView) -> bool:
        if node.op_type in INDEX_OPS:
            return True
        if node.op_type in ("Cast", "CastLike"):
            source = node.input_type(0)
            if source is not None and source.dtype is not None:
                narrow = source.dtype.kind == "b" or (
                    source.dtype.kind in "iu" and source.dtype.itemsize <= 2
                )
                return narrow or (wide(source) and self.value_fits(node.inputs[0]))
            return False
        moved = node.inputs[:1] if node.op_type == "Slice" else node.inputs  # not its bounds
        return node.op_type not in GROWING_OPS and all(
            self.value_fits(name)
            for i, name in enumerate(moved)
            if name and wide(node.input_type(i))
        )

    def exact_use(self, node: NodeView, name: str) -> bool:
        """``name`` is an exact int32 result that ``node`` makes, or casts to float."""
        if name not in self.exact:
            return False
        out = node.output_type(0)
        to_float = out is not None and out.dtype is not None and out.dtype.kind == "f"
        return name in node.outputs or (node.op_type in ("Cast", "CastLike") and to_float)


def _symmetric_int8(node: NodeView) -> bool:
    """B is int8 and its zero point absent or 0."""
    b = node.input_type(1)
    if b is None or b.dtype is None or b.dtype.name != "int8":
        return False
    if len(node.inputs) < 4 or not node.inputs[3]:
        return True
    zero_point = node.const(3)
    return zero_point is not None and not np.any(zero_point)


def wide(t: TensorType | None) -> bool:
    """A 32- or 64-bit integer type."""
    return t is not None and t.dtype is not None and t.dtype.name in _WIDE_INTS
