"""OpenVINO's own answer to which nodes its CPU plugin supports, traced back to the ONNX nodes.

Once per graph (``Support``): the whole model goes through OpenVINO's ONNX frontend and
``Core.query_model(model, "CPU")``; each OpenVINO op is traced back to the ONNX node whose
output it makes (its output tensor names are the ONNX value names; the ops a node is
decomposed into inherit the node of the ops that read them). A node is supported when every op
made from it is. Nodes the frontend cannot convert are cut out of the model (their outputs
become inputs) and the rest is converted again, so one unconvertible node costs its neighbours
nothing; the frontend's message is the refusal's reason. A node that cannot be traced (its ops
were folded away, or the whole-model query failed or crashed a trial process, ``trial``) is
asked alone (``ask_alone``): a one-node model, cached by op type, attributes, input types and
shapes and the values of small constant inputs. A node to whose output OpenVINO's conversion
gives another shape than ONNX does is refused (``_misshapen``).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from functools import cache
from typing import Any

import numpy as np
import onnx
from byoc import NodeView, TensorType
from byoc.graph import SUBGRAPH_OPS
from onnx import helper, numpy_helper

from byoc_openvino import handles, trial
from byoc_openvino.handles import DEVICE

NOT_SUPPORTED = f"not supported by OpenVINO {DEVICE}"
_MAX_ROUNDS = 8  # conversions of the whole model, each cutting out the nodes that failed
_SMALL_CONST = 1024  # constant inputs up to this many elements key the per-node cache by value
_FAILED_NODE = re.compile(r"While validating ONNX node '<Node\(([^)]*)\): (.*?)>'")
_NO_RULE = re.compile(r"No conversion rule found for operations: (.*)")


class Support:
    """OpenVINO's answer for every node of one graph: ``reasons[name]`` is None (supported) or
    why not; names missing from it are asked one by one (``ask_alone``)."""

    def __init__(self, graph: Any, tried: bool = True) -> None:
        self.graph = graph
        self.reasons: dict[str, str | None] = {}
        self.tried = tried  # the whole-graph query is tried in a child process first (trial)
        self._query()

    def reason(self, node: NodeView) -> str | None:
        if node.name not in self.reasons:
            self.reasons[node.name] = ask_alone(node, self.tried)
        return self.reasons[node.name]

    def _query(self) -> None:
        graph = self.graph
        model = graph.model
        cut = _never_shown(graph)  # refused by a rule, or each asked alone
        for _ in range(_MAX_ROUNDS):
            part = model if not cut else _without(graph, cut)
            try:
                ov_model = handles.convert(part)
            except Exception as exc:
                failed = _conversion_failures(str(exc), graph, cut)
                if not failed:
                    return  # nothing to learn from the message: ask node by node
                self.reasons.update(failed)
                cut |= set(failed)
                continue
            self._trace(part, ov_model, cut)
            return

    def _trace(self, part: onnx.ModelProto, ov_model: Any, cut: set[str]) -> None:
        if self.tried and trial.crash("query", part, {}):
            return  # the query would crash this process: ask node by node
        try:
            supported = handles.query(ov_model)
        except Exception:  # the plugin failed on the whole model: ask node by node
            return
        graph = self.graph
        maker = {out: n.name for n in graph.nodes if n.name not in cut for out in n.output if out}
        owners: dict[str, set[str]] = {}  # OpenVINO op (its unique name) -> ONNX nodes
        ops = list(ov_model.get_ordered_ops())
        for op in reversed(ops):
            kind = op.get_type_name()
            if kind in ("Parameter", "Result"):
                continue
            names = {maker[t] for o in op.outputs() for t in o.get_names() if t in maker}
            if op.get_friendly_name() in graph.index and op.get_friendly_name() not in cut:
                names.add(op.get_friendly_name())
            if not names:  # made while converting a node: that of the ops reading it
                readers = [
                    owners.get(i.get_node().get_name(), set())
                    for o in op.outputs()
                    for i in o.get_target_inputs()
                ]
                found = set().union(*readers) if readers else set()
                names = found if len(found) == 1 else set()
            owners[op.get_name()] = names
        verdict: dict[str, list[str]] = {}
        for op in ops:
            for name in owners.get(op.get_name(), ()):
                bad = verdict.setdefault(name, [])
                if op.get_type_name() != "Constant" and op.get_friendly_name() not in supported:
                    bad.append(op.get_type_name())
        for name, bad in verdict.items():
            if bad:
                kinds = ", ".join(sorted(set(bad)))
                self.reasons[name] = f"{NOT_SUPPORTED} (its {kinds} op(s))"
            else:
                self.reasons[name] = None
        for value, why in _misshapen(ov_model, graph.type_of).items():
            if value in maker:
                self.reasons[maker[value]] = why


def _never_shown(graph: Any) -> set[str]:
    """The nodes cut from the graph OpenVINO is asked about: every QuantizeLinear (those that
    may run on OpenVINO, ``rules.ops.fake_quantize``, are asked alone). OpenVINO 2026.4
    crashes the process (a segfault in ``query_model`` and in compiling) on a Concat,
    QuantizeLinear, DequantizeLinear, then a QuantizeLinear of that, directly or through an op
    it removes (an Identity, a Transpose by the identity, a Slice of everything): no list of
    such ops can be complete."""
    return {n.name for n in graph.nodes if n.op_type == "QuantizeLinear"}


def _without(graph: Any, cut: set[str]) -> onnx.ModelProto:
    """The model without the nodes in ``cut``: what they made becomes graph inputs, and what
    they read graph outputs (else OpenVINO drops the nodes making it unasked, and their
    answers were taken from ops of other names)."""
    model = onnx.ModelProto()
    model.CopyFrom(graph.model)
    g = model.graph
    kept = [n for n in g.node if n.name not in cut]
    made = {out for n in g.node if n.name in cut for out in n.output if out}
    wanted = {x for n in g.node if n.name in cut for x in n.input if x}
    returned = {o.name for o in g.output}
    for n in kept:
        outputs = [o for o in n.output if o in wanted and o not in returned]
        g.output.extend(helper.make_empty_tensor_value_info(o) for o in outputs)
        returned.update(outputs)
    del g.node[:]
    g.node.extend(kept)
    read = {x for n in kept for x in n.input} | {o.name for o in g.output}
    for name in sorted(made & read):
        t = graph.type_of(name)
        if t is None or t.dtype is None:
            continue  # the conversion of its readers fails and says so
        shape = None if t.shape is None else [d if isinstance(d, int) else None for d in t.shape]
        g.input.append(
            helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(t.dtype), shape)
        )
    outputs = [o for o in g.output if o.name not in made]
    del g.output[:]
    g.output.extend(outputs)
    if not outputs:  # keep a graph: every kept node's outputs
        for n in kept:
            g.output.extend(helper.make_empty_tensor_value_info(o) for o in n.output if o)
    return model


def _conversion_failures(message: str, graph: Any, cut: set[str]) -> dict[str, str]:
    """``{node: reason}`` from the ONNX frontend's report of what it could not convert."""
    failed: dict[str, str] = {}
    for block in message.split("\n-- ")[1:]:
        found = _FAILED_NODE.search(block)
        if not found or found.group(2) not in graph.index:
            continue
        lines = [ln.strip() for ln in block.split("Summary:")[0].splitlines() if ln.strip()]
        detail = lines[-1] if lines else "conversion failed"
        failed[found.group(2)] = f"OpenVINO's ONNX frontend cannot convert it: {detail[:300]}"
    rule = _NO_RULE.search(message)
    if rule:
        kinds = {item.strip().rsplit("-", 1)[0] for item in rule.group(1).split(",")}
        for node in graph.nodes:
            if node.op_type in kinds and node.name not in cut:
                failed[node.name] = (
                    f"OpenVINO's ONNX frontend has no conversion rule for {node.op_type}"
                )
    return {k: v for k, v in failed.items() if k not in cut}


# -- one node alone ----------------------------------------------------------------------------

_alone: dict[str, str | None] = {}


def ask_alone(node: NodeView, tried: bool = True) -> str | None:
    """OpenVINO's answer for a one-node model of this node (cached by what decides it)."""
    key = _key(node)
    if key not in _alone:
        _alone[key] = _ask(node, tried)
    return _alone[key]


def _key(node: NodeView) -> str:
    digest = hashlib.sha256()
    digest.update(node.op_type.encode())
    for attr in sorted(node.proto.attribute, key=lambda a: a.name):
        digest.update(attr.SerializeToString(deterministic=True))
    imports = sorted((o.domain, o.version) for o in node.graph.model.opset_import)
    digest.update(repr(imports).encode())
    for i, name in enumerate(node.inputs):
        t = node.input_type(i) if name else None
        value = node.const(i) if name else None
        digest.update(f"|{i}:{bool(name)}:{t}:{value is not None}".encode())
        if value is not None and value.size <= _SMALL_CONST:
            digest.update(np.ascontiguousarray(value).tobytes())
    for i, name in enumerate(node.outputs):
        digest.update(f"|o{i}:{bool(name)}".encode())
    return digest.hexdigest()


def _ask(node: NodeView, tried: bool) -> str | None:
    model = single_node_model(node)
    crashed = trial.crash("query", model, {}) if tried else None
    if crashed:
        return f"{NOT_SUPPORTED}: {crashed}"
    try:
        ov_model = handles.convert(model)
    except Exception as exc:
        failures = _conversion_failures(str(exc), _Names(node), set())
        if node.name in failures:
            return failures[node.name]
        lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
        return f"OpenVINO's ONNX frontend cannot convert it: {(lines or ['?'])[-1][:300]}"
    try:
        supported = handles.query(ov_model)
    except Exception as exc:
        lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
        return f"{NOT_SUPPORTED}: {(lines or ['?'])[-1][:300]}"
    misshapen = _misshapen(ov_model, lambda name: _type_of(node, name))
    if misshapen:
        return next(iter(misshapen.values()))
    bad = sorted(
        {
            op.get_type_name()
            for op in ov_model.get_ops()
            if op.get_type_name() not in ("Parameter", "Result", "Constant")
            and op.get_friendly_name() not in supported
        }
    )
    return f"{NOT_SUPPORTED} (its {', '.join(bad)} op(s))" if bad else None


def _type_of(node: NodeView, name: str) -> TensorType | None:
    """The type of one of ``node``'s outputs, by name."""
    return node.output_type(node.outputs.index(name)) if name in node.outputs else None


def _misshapen(ov_model: Any, type_of: Callable[[str], TensorType | None]) -> dict[str, str]:
    """ONNX values to which OpenVINO's conversion gives another static shape than ONNX does:
    value -> why. OpenVINO 2026.4's frontend ignores the ``axes`` attribute of ReduceL1,
    ReduceLogSum and ReduceLogSumExp at opsets 13 to 17 and reduces over every axis, and the
    next op broadcasts it."""
    found = {}
    for op in ov_model.get_ordered_ops():
        for out in op.outputs():
            shape = out.get_partial_shape()
            if op.get_type_name() in ("Parameter", "Result") or not shape.is_static:
                continue
            for name in out.get_names():
                t = type_of(name)
                want = list(t.shape) if t is not None and t.is_static else None
                if want is not None and want != list(shape.to_shape()):
                    found[name] = (
                        f"OpenVINO's ONNX frontend gives '{name}' the shape "
                        f"{list(shape.to_shape())}, ONNX {want} (OpenVINO 2026.4)"
                    )
    return found


class _Names:
    """Enough of a Graph for ``_conversion_failures``: the node's name."""

    def __init__(self, node: NodeView) -> None:
        self.index = {node.name: 0}
        self.nodes = [node.proto]


def single_node_model(node: NodeView) -> onnx.ModelProto:
    """A model of this node alone: its constant inputs as initializers, the others inputs."""
    inputs, inits, seen = [], [], set()
    for i, name in enumerate(node.inputs):
        if not name or name in seen:
            continue
        seen.add(name)
        value = node.const(i)
        if value is not None:
            inits.append(numpy_helper.from_array(np.asarray(value), name))
            continue
        t = node.input_type(i)
        assert t is not None and t.dtype is not None  # a rule refused unknown types (values)
        inputs.append(_info(name, t))
    outputs = []
    for i, name in enumerate(node.outputs):
        t = node.output_type(i)
        if name and t is not None and t.dtype is not None:
            outputs.append(_info(name, t))
        elif name:
            outputs.append(helper.make_empty_tensor_value_info(name))
    graph = helper.make_graph([node.proto], "alone", inputs, outputs, inits)
    source = node.graph.model
    model = helper.make_model(graph, opset_imports=list(source.opset_import))
    model.ir_version = max(source.ir_version, 4)  # its constants are no inputs: not IR 3
    return model


def _info(name: str, t: TensorType) -> onnx.ValueInfoProto:
    shape = None if t.shape is None else [d if isinstance(d, int) else None for d in t.shape]
    assert t.dtype is not None
    return helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(t.dtype), shape)


# -- the op types to offer --------------------------------------------------------------------


@cache
def convertible_op_types() -> frozenset[str]:
    """The default-domain ONNX op types OpenVINO's ONNX frontend has a conversion rule for:
    one model with a node of every type, converted once; the frontend lists those it has no
    rule for."""
    kinds = sorted(
        {s.name for s in onnx.defs.get_all_schemas() if s.domain == "" and not s.deprecated}
        - SUBGRAPH_OPS
    )
    nodes, inputs = [], []
    for k, kind in enumerate(kinds):
        schema = onnx.defs.get_schema(kind)
        ins = [f"in{k}_{j}" for j in range(schema.min_input)]
        inputs += [helper.make_tensor_value_info(x, onnx.TensorProto.FLOAT, None) for x in ins]
        nodes.append(helper.make_node(kind, ins, [f"out{k}"], name=f"node{k}"))
    outputs = [helper.make_empty_tensor_value_info(f"out{k}") for k in range(len(kinds))]
    graph = helper.make_graph(nodes, "probe", inputs, outputs)
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", onnx.defs.onnx_opset_version())]
    )
    try:
        handles.convert(model)
        return frozenset(kinds)
    except Exception as exc:
        rule = _NO_RULE.search(str(exc))
        missing = (
            {item.strip().rsplit("-", 1)[0] for item in rule.group(1).split(",")} if rule else set()
        )
    return frozenset(kinds) - missing
