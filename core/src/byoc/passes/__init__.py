"""The partitioning passes, in the order the pipeline runs them (see ``byoc.pipeline``).

Each pass takes a ``PassState`` and returns a new one; none changes the state it was given, so
a test can run one pass on a state it built by hand and compare before with after.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TypeVar

from byoc.errors import ByocError
from byoc.graph import Graph

T = TypeVar("T")


@dataclass(frozen=True)
class CompositeMatch:
    """A pattern matched by MergeComposite: ``members`` in topological order, root last."""

    backend: str
    name: str
    members: tuple[int, ...]
    bound: Mapping[str, str] = field(default_factory=dict, hash=False)  # name -> value


@dataclass(frozen=True)
class PassState:
    """What the passes know about one model, by node index.

    ``labels``: the backend each node goes to, None for onnxruntime (the fallback).
    ``refusals``: per node, each ``(backend, reason)`` that kept it from a backend.
    ``matches``: the composites MergeComposite found.
    ``regions``: node lists that become one partition each (after MergeCompilerRegions).
    ``blocked``: merges a cycle stopped, ``(a, b) -> a node on the path``.
    """

    graph: Graph
    labels: tuple[str | None, ...]
    refusals: Mapping[int, tuple[tuple[str, str], ...]] = field(default_factory=dict)
    matches: tuple[CompositeMatch, ...] = ()
    regions: tuple[tuple[int, ...], ...] = ()
    blocked: Mapping[tuple[int, int], int] = field(default_factory=dict)

    @classmethod
    def start(cls, graph: Graph) -> PassState:
        """Nothing claimed yet: every node on the fallback."""
        return cls(graph, (None,) * len(graph.nodes))

    def refused(
        self, found: Iterable[tuple[int, str, str]]
    ) -> dict[int, tuple[tuple[str, str], ...]]:
        """``refusals`` with ``(node, backend, reason)`` triples added after the ones known."""
        out = dict(self.refusals)
        for node, backend, reason in found:
            out[node] = (*out.get(node, ()), (backend, reason))
        return out


class PassError(ByocError):
    """A partitioning pass failed on a model: a bug in byoc or in a backend's check."""


def run_pass(name: str, fn: Callable[..., T], *args: object) -> T:
    """Run one pass; an unexpected exception becomes a ``PassError`` naming the pass."""
    try:
        return fn(*args)
    except ByocError:
        raise
    except Exception as exc:
        raise PassError(
            f"internal error in pass {name}: {type(exc).__name__}: {exc} "
            "(a bug: please report it with the model)"
        ) from exc
