"""Graphs built from cases: a model of one op's node (``single_op_model``) and a model a
``byoc.patterns`` pattern matches (``pattern_model``), from the cases of the ops it names."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from byoc.patterns import Alt, Const, Named, Op, Pattern, Wildcard
from byoc.testing.build import IR_VERSION
from byoc.testing.ops.cases import OP_CASES, A, Case, In

Example = tuple[onnx.ModelProto, dict[str, np.ndarray]]  # a model and inputs to run it on


def single_op_model(op_type: str, case: Case | None = None) -> Example:
    """A model of one ``op_type`` node built from its case, and inputs for it."""
    case = case or OP_CASES[op_type]
    b = Builder()
    names = [b.leaf(spec) for spec in case.inputs]
    outs = b.add(op_type, names, case)
    return b.model(outs), b.feeds


def pattern_model(pattern: Pattern) -> Example:
    """A model the pattern matches, built from the cases of its ops, and inputs for it.

    Raises ``LookupError`` naming an op type that has no case, or saying why the graph built
    from the cases is not valid ONNX (their types do not meet: an int32 MatMulInteger's product
    times a float scale).
    """
    b = Builder()
    out = b.value(pattern, In())
    model = b.model([out])
    try:
        onnx.shape_inference.infer_shapes(model, check_type=True, strict_mode=True)
        onnx.checker.check_model(model)
    except Exception as exc:  # onnx's errors: the cases' types do not fit together
        ops = " -> ".join(n.op_type for n in model.graph.node)
        why = str(exc).strip().splitlines()[0]
        raise LookupError(f"the graph of cases {ops} is not valid ONNX: {why}") from exc
    return model, b.feeds


class Builder:
    """A graph under construction: graph inputs with their random feeds, initializers, nodes
    of cases (``add``), values a pattern stands for (``value``), and the model (``model``)."""

    def __init__(self) -> None:
        self.opset = 17
        self.nodes: list[onnx.NodeProto] = []
        self.inputs: list[onnx.ValueInfoProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.bound: dict[str, str] = {}
        self.feeds: dict[str, np.ndarray] = {}
        self.declared: dict[str, onnx.ValueInfoProto] = {}

    def _name(self, prefix: str) -> str:
        return f"{prefix}{len(self.nodes) + len(self.inputs) + len(self.inits)}"

    def leaf(self, spec: In, constant: bool | None = None) -> str:
        """A graph input (random feed recorded) or an initializer for one input spec."""
        if constant if constant is not None else spec.value is not None:
            name = self._name("c")
            self.inits.append(numpy_helper.from_array(spec.array(), name))
            return name
        name = self._name("in")
        elem = helper.np_dtype_to_tensor_dtype(np.dtype(spec.dtype))
        self.inputs.append(helper.make_tensor_value_info(name, elem, list(spec.shape)))
        self.feeds[name] = spec.array()
        return name

    def add(self, op_type: str, inputs: list[str], case: Case, attrs: Any = None) -> list[str]:
        outs = [self._name("out") + f"_{k}" for k in range(case.outputs)]
        self.opset = max(self.opset, case.opset)
        for out, spec in zip(outs, case.declared, strict=False):
            elem = helper.np_dtype_to_tensor_dtype(np.dtype(spec.dtype))
            self.declared[out] = helper.make_tensor_value_info(out, elem, list(spec.shape))
        merged = {**case.attrs, **(attrs or {})}
        self.nodes.append(
            helper.make_node(
                op_type, inputs, outs, name=f"{op_type.lower()}_{len(self.nodes)}", **merged
            )
        )
        return outs

    def value(self, pattern: Pattern, spec: In) -> str:
        if isinstance(pattern, Alt):
            return self.value(pattern.options[0], spec)
        if isinstance(pattern, Wildcard):
            if pattern.name and pattern.name in self.bound:
                return self.bound[pattern.name]
            name = self.leaf(spec, constant=False)  # any computed value; const() is a constant
            if pattern.name:
                self.bound[pattern.name] = name
            return name
        if isinstance(pattern, Named):  # one value for every use of the name
            if pattern.name not in self.bound:
                self.bound[pattern.name] = self.value(pattern.pattern, spec)
            return self.bound[pattern.name]
        if isinstance(pattern, Const) and pattern.value is not None:
            return self.leaf(In((), spec.dtype, pattern.value), constant=True)
        if isinstance(pattern, Const):
            return self.leaf(spec, constant=True)
        assert isinstance(pattern, Op), f"unknown pattern {pattern!r}"
        if pattern.op_types is None:  # a wildcard op: the first case with as many inputs
            n = None if pattern.inputs is None else len(pattern.inputs)
            types = [t for t in sorted(OP_CASES) if n in (None, len(OP_CASES[t].inputs))]
        else:
            types = sorted(pattern.op_types)
        op_type = next((t for t in types if t in OP_CASES), None)
        if op_type is None:
            raise LookupError(f"no case for {' or '.join(types) or 'this wildcard op'}")
        case = OP_CASES[op_type]
        subs = pattern.inputs
        if subs is None:
            names = [self.leaf(s) for s in case.inputs]
        else:
            specs = list(case.inputs) + [In()] * (len(subs) - len(case.inputs))
            order = sorted(range(len(subs)), key=lambda i: not _computed(subs[i]))
            names = [""] * len(subs)
            for i in order:  # computed inputs first: constants then fit their shapes
                spec = specs[i]
                computed = [n for n in names if n]
                if case.elementwise and computed and not _computed(subs[i]):
                    spec = self._broadcast(computed[0], subs[i])
                if op_type == "MatMul" and i == 1 and _computed(subs[0]):  # fits the product
                    spec = In((self.shape_of(names[0])[-1], 4))
                names[i] = self.value(subs[i], spec)
        return self.add(op_type, names, case, pattern.attrs)[0]

    def _broadcast(self, value: str, pattern: Pattern) -> In:
        pattern = pattern.pattern if isinstance(pattern, Named) else pattern
        shape = self.shape_of(value)
        if isinstance(pattern, Const) and pattern.value is not None:
            return In(())
        if isinstance(pattern, Const) and len(shape) == 4:
            return In((1, shape[1], 1, 1))
        if isinstance(pattern, Const) and shape:
            return In((shape[-1],))
        return In(tuple(shape))

    def shape_of(self, value: str) -> tuple[int, ...]:
        inferred = onnx.shape_inference.infer_shapes(self.model([value]), strict_mode=False)
        for v in [*inferred.graph.value_info, *inferred.graph.output, *inferred.graph.input]:
            if v.name == value:
                return tuple(d.dim_value for d in v.type.tensor_type.shape.dim)
        return A

    def model(self, outputs: list[str]) -> onnx.ModelProto:
        graph = helper.make_graph(
            self.nodes,
            "case",
            self.inputs,
            [self.declared.get(o) or helper.make_empty_tensor_value_info(o) for o in outputs],
            initializer=self.inits,
            value_info=[v for name, v in self.declared.items() if name not in outputs],
        )
        model = helper.make_model(
            graph, opset_imports=[helper.make_opsetid("", self.opset)], ir_version=IR_VERSION
        )
        inferred = onnx.shape_inference.infer_shapes(model)
        known = {v.name: v for v in inferred.graph.value_info}
        for out in model.graph.output:
            if out.name in known:
                out.CopyFrom(known[out.name])
        return model


def _computed(pattern: Pattern) -> bool:
    """The pattern stands for a node's output (built before the constants that fit it)."""
    if isinstance(pattern, Named):
        return _computed(pattern.pattern)
    return isinstance(pattern, Op | Alt)
