"""Lowering: the nodes and composites of one partition become oneDNN kernels (``Kernel``),
values referred to by name. ``Lowering`` holds the values and the helpers every kind uses; how
each ONNX op and composite becomes kernels is its kind's table entry (``byoc_dnnl.kinds``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from byoc import NodeView, Partition
from byoc.plan import Composite

# A kind's lowering of one node, and of a composite (the match and its nodes); the kinds table
# (byoc_dnnl.kinds) gives one per op and composite.
Lower = Callable[["Lowering", NodeView], None]
LowerComposite = Callable[["Lowering", Composite, list[NodeView]], None]

MAX_POST_OPS = 12


@dataclass
class Kernel:
    """One oneDNN kernel before serialization: values are referred to by name."""

    kind: str
    inputs: list[str | None]
    output: str
    attrs: dict[str, Any] = field(default_factory=dict)
    post_ops: list[dict[str, Any]] = field(default_factory=list)
    members: list[str] = field(default_factory=list)
    name: str = ""

    def reads(self) -> list[str]:
        """The values it reads: its inputs and its post-ops' operands."""
        return [n for n in self.inputs if n] + [p["input"] for p in self.post_ops if "input" in p]

    def rename(self, renamed: dict[str, str]) -> None:
        """Read ``renamed[v]`` instead of each value ``v`` renamed (inputs and post-op operands)."""
        self.inputs = [renamed.get(n, n) if n else n for n in self.inputs]
        for p in self.post_ops:
            if "input" in p:
                p["input"] = renamed.get(p["input"], p["input"])


def readers(kernels: list[Kernel]) -> dict[str, list[Kernel]]:
    """``{value: the kernels reading it}``, each kernel once per value, in kernel order."""
    found: dict[str, list[Kernel]] = {}
    for k in kernels:
        for n in dict.fromkeys(k.reads()):
            found.setdefault(n, []).append(k)
    return found


def reciprocal(v: np.ndarray) -> np.ndarray | None:
    """``1 / v`` in float32, or None when a divisor is 0 or its inverse overflows float32 (a
    subnormal divisor): such a Div is not turned into a multiplication."""
    with np.errstate(divide="ignore", over="ignore"):
        inverse = np.float32(1) / np.asarray(v, np.float32)
    return inverse if np.all(np.isfinite(inverse)) else None


class Lowering:
    """Turns the steps of one partition into kernels: each node by its op's lowering, each
    composite by its own (or member by member), as the kinds table (``byoc_dnnl.kinds``)
    gives them."""

    def __init__(
        self,
        partition: Partition,
        ops: dict[str, Lower],
        composites: dict[str, LowerComposite | None],
    ) -> None:
        self.partition = partition
        self.graph = partition.graph
        self.opset = next(
            (o.version for o in partition.model.opset_import if o.domain in ("", "ai.onnx")), 17
        )
        self.ops = ops
        self.composites = composites
        self.consts: dict[str, np.ndarray] = {}
        self.shapes: dict[str, tuple[int, ...]] = {}
        self.kernels: list[Kernel] = []
        self.quantized: dict[str, str] = {}  # DynamicQuantizeLinear: its u8 output -> its input
        # QuantizeLinear: its output -> its scale, zero point and type (annotate.qparams)
        self.static: dict[str, tuple[float, int, str]] = {}
        self._fresh = 0

    # -- values ---------------------------------------------------------------------------

    def const(self, name: str | None) -> np.ndarray | None:
        if not name:
            return None
        if name not in self.consts:
            value = self.graph.constant(name)
            if value is None:
                return None
            self.consts[name] = np.asarray(value)
        return self.consts[name]

    def shape(self, name: str) -> tuple[int, ...]:
        if name in self.shapes:
            return self.shapes[name]
        if name in self.consts:
            return tuple(self.consts[name].shape)
        t = self.graph.type_of(name)
        if t is None or not t.is_static:
            raise ValueError(f"value '{name}' has no static shape")
        return tuple(int(d) for d in t.shape or ())

    def dtype(self, name: str) -> str:
        """A value's dtype name (float32 unless the graph says otherwise)."""
        t = self.graph.type_of(name)
        return "float32" if t is None or t.dtype is None else t.dtype.name

    def counter(self) -> int:
        """A number no other made-up value name of this partition has."""
        self._fresh += 1
        return self._fresh

    def fresh_name(self, base: str) -> str:
        return f"{base}:{self.counter()}"

    def new_const(self, base: str, value: np.ndarray) -> str:
        name = self.fresh_name(base)
        self.consts[name] = np.ascontiguousarray(value, dtype=np.float32)
        return name

    def scalar(self, base: str, value: float, rank: int) -> str:
        """A float32 constant of one value, of shape (1, ..., 1)."""
        return self.new_const(base, np.full((1,) * rank, value, np.float32))

    def emit(
        self, kind: str, inputs: list[str | None], output: str, node: NodeView, **attrs: Any
    ) -> Kernel:
        k = Kernel(
            kind, inputs, output, attrs, members=[node.name], name=f"dnnl.{node.op_type.lower()}"
        )
        self.kernels.append(k)
        return k

    def as_rank(self, name: str, rank: int, node: NodeView) -> str:
        """``name`` with leading 1-dims up to ``rank`` (a free view in plain layout)."""
        shape = self.shape(name)
        if len(shape) == rank:
            return name
        new = (1,) * (rank - len(shape)) + shape
        c = self.const(name)
        if c is not None:
            return self.new_const(name, c.reshape(new))
        out = f"{name}:rank{self.counter()}"
        self.shapes[out] = new
        self.emit("view", [name], out, node)
        return out

    # -- what several kinds share ---------------------------------------------------------

    def bias(self, node: NodeView) -> str | None:
        """A Conv's or ConvTranspose's optional bias (input 2) as a 1-D constant."""
        bias = node.inputs[2] if len(node.inputs) > 2 and node.inputs[2] else None
        value = self.const(bias)
        return self.new_const(bias, value.reshape(-1)) if bias and value is not None else None

    @staticmethod
    def grouped(w: np.ndarray, conv: NodeView) -> np.ndarray:
        """Conv weights as oneDNN takes them: groups first when there are several."""
        group = int(conv.attrs.get("group", 1))
        return w.reshape(group, w.shape[0] // group, *w.shape[1:]) if group > 1 else w

    @staticmethod
    def pads(
        a: dict[str, Any],
        xs: tuple[int, ...],
        ys: tuple[int, ...],
        k: list[int],
        strides: list[int],
        dil: list[int],
    ) -> tuple[list[int], list[int]]:
        """A window's padding before and after each spatial axis (ONNX's pads or auto_pad)."""
        nd = len(xs)
        mode = a.get("auto_pad", "NOTSET")
        if mode == "NOTSET":
            pads = list(a.get("pads", [0] * 2 * nd))
            return pads[:nd], pads[nd:]
        if mode == "VALID":
            return [0] * nd, [0] * nd
        total = [
            max(0, (ys[i] - 1) * strides[i] + (k[i] - 1) * dil[i] + 1 - xs[i]) for i in range(nd)
        ]
        small = [t // 2 for t in total]
        big = [t - s for t, s in zip(total, small, strict=True)]
        return (small, big) if mode == "SAME_UPPER" else (big, small)

    # -- steps ----------------------------------------------------------------------------

    def lower(self) -> list[Kernel]:
        for step in self.partition.steps():
            if isinstance(step, NodeView):
                self.node(step)
            else:
                self.composite(*step)
        return self.kernels

    def composite(self, comp: Composite, members: list[NodeView]) -> None:
        """Its entry's lowering, or its members one by one; every kernel is named by it."""
        start = len(self.kernels)
        lower = self.composites.get(comp.name)
        if lower is None:
            for m in members:
                self.node(m)
        else:
            lower(self, comp, members)
        for k in self.kernels[start:]:
            k.name = comp.name

    def node(self, node: NodeView) -> None:
        lower = self.ops.get(node.op_type)
        if lower is None:
            raise ValueError(f"the dnnl backend cannot lower {node.op_type} (node '{node.name}')")
        lower(self, node)
