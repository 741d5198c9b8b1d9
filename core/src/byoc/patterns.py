"""A small pattern language for composite kernels, in the spirit of TVM's dataflow patterns.

    conv = op("Conv", wildcard(), const(), const())
    table = [("dnnl.conv2d_bias_relu", op("Relu", conv), None)]

``op(type, *inputs)`` matches a node of that op type (a set of types is allowed) whose inputs
match ``inputs`` position by position (trailing absent optional inputs are ignored); with no
inputs given, any inputs match. ``wildcard()`` matches any value, ``wildcard("x")`` binds a name
so every use of it must be the same value, and ``wildcard()(*inputs)`` is TVM's wildcard op: a
node of any op type (ONNX domain) whose inputs match. ``const()`` matches a constant value, and
``p | q`` tries ``p`` then ``q``. ``commutative=True`` also tries a binary op's inputs swapped.

A pattern table is a list of ``(name, pattern)`` or ``(name, pattern, check)`` entries.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from byoc.graph import Graph, NodeView


class Pattern:
    def __or__(self, other: Pattern) -> Pattern:
        return Alt((self, other))

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
    def _match(self, graph: Graph, value: str, state: _State) -> Iterator[_State]:
        if graph.is_constant(value):
            yield state


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


def const() -> Const:
    """Match a constant value (initializer, Constant node, Cast of a constant)."""
    return Const()


@dataclass
class Match:
    """One match of a pattern, as given to the pattern's check."""

    name: str
    graph: Graph
    members: list[int]  # node indices, topological order; the root is last

    @property
    def nodes(self) -> list[NodeView]:
        return [self.graph.view(i) for i in self.members]

    @property
    def root(self) -> NodeView:
        return self.graph.view(self.members[-1])

    def by_op(self, op_type: str) -> list[NodeView]:
        return [v for v in self.nodes if v.op_type == op_type]


def match_at(pattern: Pattern, graph: Graph, index: int) -> Iterator[list[int]]:
    """Every way ``pattern`` matches with its root at node ``index``, as sorted member lists."""
    if not isinstance(pattern, Op | Alt):
        return
    options = pattern.options if isinstance(pattern, Alt) else (pattern,)
    for option in options:
        if isinstance(option, Op):
            for state in option.match_node(graph, index, _State()):
                yield sorted(state.members)
        else:
            yield from match_at(option, graph, index)
