"""A small pattern language for composite kernels, in the spirit of TVM's dataflow patterns.

    conv = op("Conv", wildcard(), const(), const())
    table = [("dnnl.conv2d_bias_relu", op("Relu", conv), None)]

``op(type, *inputs)`` matches a node of that op type (a set of types is allowed) whose inputs
match ``inputs`` position by position (trailing absent optional inputs are ignored); with no
inputs given, any inputs match. ``wildcard()`` matches any value, ``wildcard("x")`` binds a name
so every use of it must be the same value, and ``wildcard()(*inputs)`` is TVM's wildcard op: a
node of any op type (ONNX domain) whose inputs match. ``const()`` matches a constant value, and
``p | q`` tries ``p`` then ``q``. ``commutative=True`` also tries a binary op's inputs swapped.

Bindings: ``wildcard("x")``, ``const("bias")`` and ``p.named("conv")`` record the value they
matched, so a check reads ``match.bound["bias"]`` (a value name), ``match.constant("bias")``
or ``match.producer("conv")`` instead of searching the match by op type. A name used twice
must match the same value both times: ``op("Mul", conv.named("x"), op("Sigmoid",
wildcard("x")))`` is ``x * sigmoid(x)`` for that very x. ``const(value=3.0)`` matches only a
one-element constant equal to 3.

A pattern table is a list of ``(name, pattern)`` or ``(name, pattern, check)`` entries.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np

    from byoc.graph import Graph, NodeView


class Pattern:
    def __or__(self, other: Pattern) -> Pattern:
        return Alt((self, other))

    def named(self, name: str) -> Named:
        """This pattern, binding the value it matches to ``name``."""
        return Named(name, self)

    def _match(self, graph: Graph, value: str, state: _State) -> Iterator[_State]:
        raise NotImplementedError


@dataclass(frozen=True)
class _State:
    members: frozenset[int] = frozenset()
    bound: tuple[tuple[str, str], ...] = ()

    def bind(self, key: str, value: str) -> _State | None:
        for k, v in self.bound:
            if k == key:
                return self if v == value else None
        return _State(self.members, (*self.bound, (key, value)))


@dataclass(frozen=True)
class Wildcard(Pattern):
    name: str | None = None

    def _match(self, graph: Graph, value: str, state: _State) -> Iterator[_State]:
        new = state.bind(self.name, value) if self.name else state
        if new is not None:
            yield new

    def __call__(self, *inputs: Pattern) -> Op:
        """TVM's ``wildcard()(x)``: a node of any op type whose inputs match ``inputs``."""
        if self.name:
            raise TypeError("a named wildcard stands for a value; call wildcard() unnamed")
        return Op(None, tuple(inputs) if inputs else None)


@dataclass(frozen=True)
class Const(Pattern):
    name: str | None = None
    value: float | None = None  # a one-element constant equal to this (to 1e-6, relative)

    def _match(self, graph: Graph, value: str, state: _State) -> Iterator[_State]:
        if graph.is_constant(value) and (self.value is None or _equal(graph, value, self.value)):
            new = state.bind(self.name, value) if self.name else state
            if new is not None:
                yield new


def _equal(graph: Graph, value: str, expected: float) -> bool:
    """``value`` is a one-element numeric constant equal to ``expected`` (1e-6, relative)."""
    array = graph.constant(value)
    if array is None or array.size != 1 or array.dtype.kind not in "fiu":
        return False
    return abs(float(array.reshape(())) - expected) <= 1e-6 * max(1.0, abs(expected))


@dataclass(frozen=True)
class Named(Pattern):
    name: str
    pattern: Pattern

    def _match(self, graph: Graph, value: str, state: _State) -> Iterator[_State]:
        for inner in self.pattern._match(graph, value, state):
            new = inner.bind(self.name, value)
            if new is not None:
                yield new


@dataclass(frozen=True)
class Alt(Pattern):
    options: tuple[Pattern, ...]

    def _match(self, graph: Graph, value: str, state: _State) -> Iterator[_State]:
        for option in self.options:
            yield from option._match(graph, value, state)


@dataclass(frozen=True)
class Op(Pattern):
    op_types: frozenset[str] | None  # None: any op type
    inputs: tuple[Pattern, ...] | None = None
    commutative: bool = False
    domain: str = ""
    attrs: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)

    def _match(self, graph: Graph, value: str, state: _State) -> Iterator[_State]:
        index = graph.producer.get(value)
        if index is None or graph.nodes[index].output[0] != value:
            return
        yield from self.match_node(graph, index, state)

    def match_node(self, graph: Graph, index: int, state: _State) -> Iterator[_State]:
        node = graph.nodes[index]
        if self.op_types is not None and node.op_type not in self.op_types:
            return
        if node.domain not in (self.domain, "ai.onnx"):
            return
        if index in graph.const_nodes or (index in state.members):
            return
        if self.attrs:
            actual = graph.view(index).attrs
            if any(actual.get(k) != v for k, v in self.attrs.items()):
                return
        state = _State(state.members | {index}, state.bound)
        if self.inputs is None:
            yield state
            return
        names = list(node.input)
        while names and not names[-1]:
            names.pop()
        if len(names) != len(self.inputs):
            return
        orders = [self.inputs]
        if self.commutative and len(self.inputs) == 2:
            orders.append((self.inputs[1], self.inputs[0]))
        for order in orders:
            yield from _match_all(graph, order, names, state)


def _match_all(
    graph: Graph, patterns: tuple[Pattern, ...], names: list[str], state: _State
) -> Iterator[_State]:
    if not patterns:
        yield state
        return
    for s in patterns[0]._match(graph, names[0], state):
        yield from _match_all(graph, patterns[1:], names[1:], s)


def op(
    op_type: str | set[str] | frozenset[str],
    *inputs: Pattern,
    commutative: bool = False,
    domain: str = "",
    attrs: dict[str, Any] | None = None,
) -> Op:
    """Match a node of ``op_type`` (or any of a set of types) whose inputs match ``inputs``."""
    types = frozenset([op_type]) if isinstance(op_type, str) else frozenset(op_type)
    return Op(types, tuple(inputs) if inputs else None, commutative, domain, attrs or {})


def wildcard(name: str | None = None) -> Wildcard:
    """Match any value; a named wildcard must match the same value everywhere it is used."""
    return Wildcard(name)


def const(name: str | None = None, value: float | None = None) -> Const:
    """Match a constant value (initializer, Constant node, Cast of a constant); a name binds
    it; with ``value``, only a one-element constant equal to it (``const(value=0.5)``)."""
    return Const(name, value)


@dataclass
class Match:
    """One match of a pattern, as given to the pattern's check."""

    name: str
    graph: Graph
    members: list[int]  # node indices, topological order; the root is last
    bound: dict[str, str] = field(default_factory=dict)  # pattern name -> ONNX value name

    @property
    def nodes(self) -> list[NodeView]:
        return [self.graph.view(i) for i in self.members]

    @property
    def root(self) -> NodeView:
        return self.graph.view(self.members[-1])

    def _value(self, name: str) -> str:
        if name not in self.bound:
            raise KeyError(
                f"pattern {self.name!r} binds no {name!r}; it binds {sorted(self.bound)}"
            )
        return self.bound[name]

    def constant(self, name: str) -> np.ndarray | None:
        """The value bound to ``name`` when it is a constant, else None."""
        return self.graph.constant(self._value(name))

    def producer(self, name: str) -> NodeView:
        """The node inside the match that produced the value bound to ``name``."""
        index = self.graph.producer.get(self._value(name))
        if index is None or index not in self.members:
            raise KeyError(f"pattern {self.name!r}: {name!r} is not produced inside the match")
        return self.graph.view(index)


def match_at(pattern: Pattern, graph: Graph, index: int, name: str = "") -> Iterator[Match]:
    """Every way ``pattern`` matches with its root at node ``index`` (members sorted)."""
    for state in _at(pattern, graph, index):
        yield Match(name, graph, sorted(state.members), dict(state.bound))


def _at(pattern: Pattern, graph: Graph, index: int) -> Iterator[_State]:
    if isinstance(pattern, Op):
        yield from pattern.match_node(graph, index, _State())
    elif isinstance(pattern, Alt):
        for option in pattern.options:
            yield from _at(option, graph, index)
    elif isinstance(pattern, Named):
        root = graph.nodes[index].output[0]
        for state in _at(pattern.pattern, graph, index):
            new = state.bind(pattern.name, root)
            if new is not None:
                yield new
