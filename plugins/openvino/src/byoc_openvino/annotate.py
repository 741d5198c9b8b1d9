"""Which nodes the openvino backend claims, and why not the others.

A node is claimed when no rule refuses it (``rules``: what OpenVINO's CPU plugin would compute
otherwise than onnxruntime, which its own answer does not say; with ``int8 = "own"`` not those
about its own quantization arithmetic) and OpenVINO says its CPU
plugin supports it (``query``: the whole graph asked once and traced back to its nodes, the
rest node by node). The op types offered are those OpenVINO's ONNX frontend converts, less
random and sequence ops, that byoc's conformance suite can check.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Mapping
from functools import partial
from typing import Any

from byoc import NodeView

from byoc_openvino import query, rules

# Never offered: their values are random (onnxruntime draws others), or they are not tensors.
_NEVER = frozenset(
    {
        "Bernoulli", "Multinomial", "RandomNormal", "RandomNormalLike", "RandomUniform",
        "RandomUniformLike", "ConcatFromSequence", "SequenceAt", "SequenceConstruct",
        "SequenceEmpty", "SequenceErase", "SequenceInsert", "SequenceLength", "SplitToSequence",
    }
)  # fmt: skip


class Facts:
    """What decides one graph's nodes, made once: its integer widths and OpenVINO's answer."""

    def __init__(self, graph: Any, tried: bool) -> None:
        self.widths = rules.Widths(graph)
        self.support = query.Support(graph, tried)


_facts: weakref.WeakKeyDictionary[Any, Facts] = weakref.WeakKeyDictionary()
_lock = threading.Lock()


def facts(graph: Any, tried: bool = True) -> Facts:
    """The facts of ``graph``, made once. They hold only a weak proxy of the graph: a value
    that held the graph itself would keep its weak key, and every graph with its weights,
    alive for good."""
    with _lock:
        if graph not in _facts:
            _facts[graph] = Facts(weakref.proxy(graph), tried)
        return _facts[graph]


def check(node: NodeView, tried: bool = True, own_int8: bool = False) -> str | None:
    """None when OpenVINO's CPU plugin runs the node as onnxruntime would (``own_int8``: or
    quantizes it with its own arithmetic), else why not."""
    found = facts(node.graph, tried)
    return rules.reason(node, found.widths, own_int8) or found.support.reason(node)


def checks(config: Mapping[str, Any]) -> dict[str, Any]:
    """``{op_type: check}`` for every op type the frontend converts and byoc's conformance
    suite can hold it to (``byoc.testing.ops.OP_CASES``: an op without a case there is never
    checked against onnxruntime, so it is not claimed)."""
    from byoc.testing.ops import OP_CASES  # when the ops are first asked for, not at load

    claimable = (query.convertible_op_types() - _NEVER) & set(OP_CASES)
    tried = bool(config.get("trial", True))
    own = config.get("int8", "exact") == "own"
    return dict.fromkeys(sorted(claimable), partial(check, tried=tried, own_int8=own))
