"""The examplejson backend: the ExampleJSON text format of TVM's BYOC guide, run with numpy.

This is byoc's reference plugin: every hook a backend implements, in the smallest honest form.
See README.md for the grammar.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import byoc
import numpy as np
from byoc import ArtifactError, NodeView, Partition
from onnx import helper

from byoc_examplejson.ops import KERNELS, OPS

NAME = "examplejson"
FORMAT = "ExampleJSON"
_DTYPES = ("float32", "float64", "float16", "int8", "uint8", "int16", "int32", "int64", "bool")
# Attributes whose name would clash with an input of the kernel get another name.
_RENAMED = {("Split", "split"): "split_attr"}


# -- annotation --------------------------------------------------------------------------------


def _check(node: NodeView) -> str | None:
    """Refuse nodes whose dtypes or attributes the numpy kernels do not cover, with a reason."""
    for i, name in enumerate(node.inputs):
        t = node.input_type(i) if name else None
        if name and (t is None or t.dtype is None):
            return f"the type of input '{name}' is unknown"
        if t is not None and t.dtype is not None and t.dtype.name not in _DTYPES:
            return f"dtype {t.dtype} is not supported"
    attrs = node.attrs
    if node.op_type == "BatchNormalization" and (
        attrs.get("training_mode") or len(node.outputs) > 1
    ):
        return "only inference-mode BatchNormalization with one output is supported"
    if node.op_type == "BatchNormalization" and not attrs.get("spatial", 1):
        return "BatchNormalization with spatial=0 (opset 7-8: per activation) is not supported"
    if node.op_type == "LayerNormalization" and len([o for o in node.outputs if o]) > 1:
        return "LayerNormalization with Mean/InvStdDev outputs is not supported"
    if node.op_type == "Cast":
        try:
            np.dtype(helper.tensor_dtype_to_np_dtype(attrs["to"]))
        except (KeyError, TypeError, ValueError):
            return f"Cast to ONNX type {attrs.get('to')} is not supported"
        if np.dtype(helper.tensor_dtype_to_np_dtype(attrs["to"])).name not in _DTYPES:
            return "Cast to this dtype is not supported"
    return None


@byoc.hookimpl
def byoc_register_backends(register: Callable[[byoc.BackendSpec], None]) -> None:
    register(
        byoc.BackendSpec(
            NAME,
            priority=10,
            reference=True,  # numpy: used only when `backends` names it
            description="reference backend: ExampleJSON text, run with numpy",
        )
    )


@byoc.hookimpl
def byoc_supported_ops(backend: str, config: Mapping[str, Any]) -> dict[str, Any] | None:
    return {op_type: _check for op_type in OPS}


# -- codegen -----------------------------------------------------------------------------------


@dataclass
class Artifact:
    """ExampleJSON source text; ``suffix`` is the file ending ``byoc compile --dump-dir`` uses."""

    source: str
    suffix: str = ".examplejson"


def _dims(shape: Sequence[Any] | None) -> str:
    """Dims as text: ``10 10``; ``?`` is an unknown dim, ``*`` an unknown rank, "" a scalar."""
    if shape is None:
        return "*"
    return " ".join(str(d) if isinstance(d, int) else "?" for d in shape)


def codegen(partition: Partition) -> str:
    """Emit ExampleJSON for a partition: inputs, constants, one line per op, outputs."""
    graph = partition.graph
    ids: dict[str, int] = {}
    lines = [partition.name]
    for name in partition.inputs:
        t = graph.type_of(name)
        ids[name] = len(ids)
        dtype = t.dtype.name if t and t.dtype is not None else "float32"
        dims = _dims(t.shape if t else None)
        lines.append(f"  input {ids[name]}{' ' + dims if dims else ''} dtype: {dtype}")
    for name in graph.initializers:
        value = graph.constant(name)
        assert value is not None
        ids[name] = len(ids)
        data = base64.b64encode(np.ascontiguousarray(value).tobytes()).decode()
        lines.append(
            f"  const {ids[name]} shape: {_dims(value.shape)} dtype: {value.dtype.name} "
            f"data: {data}"
        )
    opset = next(
        (o.version for o in partition.model.opset_import if o.domain in ("", "ai.onnx")), 13
    )
    for view in partition.steps():
        assert isinstance(view, NodeView), "examplejson has no composites"
        out_ids = []
        for out in view.outputs:
            ids[out] = len(ids)
            out_ids.append(str(ids[out]))
        in_ids = [str(ids[n]) if n else "-" for n in view.inputs]
        shapes = " | ".join(
            _dims((graph.type_of(o) or byoc.TensorType(None, None)).shape) for o in view.outputs
        )
        attrs = _attrs(view, opset)
        op = OPS[view.op_type][0]
        line = f"  {op} {','.join(out_ids)} inputs: {' '.join(in_ids)} shape: {shapes}"
        lines.append(line + (f" attrs: {json.dumps(attrs, sort_keys=True)}" if attrs else ""))
        lines[-1] += f"  # {_one_line(view.name)}"
    lines.append("  output " + " ".join(str(ids[n]) for n in partition.outputs))
    return "\n".join(lines) + "\n"


def _one_line(text: str) -> str:
    """``text`` without what ``str.splitlines`` breaks at (a node name may hold a newline)."""
    return "".join(c if c.isprintable() else "?" for c in text)


def _attrs(view: NodeView, opset: int) -> dict[str, Any]:
    attrs: dict[str, Any] = {}
    for key, value in view.attrs.items():
        if isinstance(value, np.ndarray):
            value = value.tolist()
        attrs[_RENAMED.get((view.op_type, key), key)] = value
    if view.op_type == "Cast":
        attrs["to"] = np.dtype(helper.tensor_dtype_to_np_dtype(attrs["to"])).name
    if view.op_type in ("Softmax", "LogSoftmax"):
        attrs.setdefault("axis", -1 if opset >= 13 else 1)
        attrs["opset"] = opset
    if view.op_type == "Split":
        attrs["n_out"] = len(view.outputs)
    return attrs


# -- runtime -----------------------------------------------------------------------------------

_LINE = re.compile(
    r"^\s*(\w+)\s+([\d,]+)\s+inputs:((?:\s+(?:\d+|-))*)\s+shape:((?:\s+(?:\d+|\?|\*|\|))*)"
    r"(?:\s+attrs:\s+(\{.*\}))?\s*(?:#.*)?$"
)
_NAME = re.compile(r"[\w.\-]+")


@dataclass(frozen=True)
class _Instr:
    kernel: Any
    op: str
    inputs: tuple[int | None, ...]
    outputs: tuple[int, ...]
    attrs: dict[str, Any]


@dataclass(frozen=True)
class Function:
    """One subgraph of a module, runnable on its own (the guide's ``GetFunction`` result).

    ``run`` keeps all state in locals, so it is reentrant.
    """

    name: str
    inputs: tuple[tuple[int, tuple[int | None, ...] | None, np.dtype[Any]], ...]
    consts: dict[int, np.ndarray]
    program: tuple[_Instr, ...]
    outputs: tuple[int, ...]

    def run(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        if len(inputs) != len(self.inputs):
            raise byoc.InputError(
                f"{self.name}: expected {len(self.inputs)} inputs, got {len(inputs)}"
            )
        env: dict[int, Any] = dict(self.consts)
        for (vid, shape, dtype), value in zip(self.inputs, inputs, strict=True):
            value = np.asarray(value)
            if value.dtype != dtype or not _fits(value.shape, shape):
                raise byoc.InputError(
                    f"{self.name}: input {vid} is {value.dtype}{list(value.shape)}, expected "
                    f"{dtype}[{_dims(shape)}]"
                )
            env[vid] = value
        with np.errstate(all="ignore"):
            for ins in self.program:
                args = [env[i] if i is not None else None for i in ins.inputs]
                while args and args[-1] is None:
                    args.pop()
                half = ins.op != "cast" and any(_is_half(a) for a in args)
                if half:  # as onnxruntime runs float16: each op in float32, rounded after
                    args = [a.astype(np.float32) if _is_half(a) else a for a in args]
                result = ins.kernel(*args, **ins.attrs)
                results = result if isinstance(result, tuple) else (result,)
                for vid, value in zip(ins.outputs, results, strict=True):
                    value = np.asarray(value)
                    env[vid] = (
                        value.astype(np.float16) if half and value.dtype == np.float32 else value
                    )
        return [env[o] for o in self.outputs]

    __call__ = run


def _is_half(value: Any) -> bool:
    return isinstance(value, np.ndarray) and value.dtype == np.float16


class Module:
    """A parsed ExampleJSON file: one or more subgraphs, each a ``Function`` found by name."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.functions = _parse(source)

    def get_function(self, name: str) -> Function:
        """The subgraph called ``name`` (TVM's ``module.get_function``)."""
        try:
            return self.functions[name]
        except KeyError:
            raise byoc.InputError(
                f"{FORMAT}: no subgraph {name!r}; this module has {', '.join(self.functions)}"
            ) from None

    def run(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        """Run the module's only subgraph (a module with several needs ``get_function``)."""
        if len(self.functions) != 1:
            raise byoc.InputError(
                f"{FORMAT}: this module has {len(self.functions)} subgraphs "
                f"({', '.join(self.functions)}); run one with module.get_function(name).run(...)"
            )
        return next(iter(self.functions.values())).run(inputs)


def _fits(got: tuple[int, ...], want: tuple[int | None, ...] | None) -> bool:
    if want is None:
        return True
    return len(got) == len(want) and all(
        w is None or g == w for g, w in zip(got, want, strict=True)
    )


class _Section:
    """A subgraph while it is being parsed; ids are local to it."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.inputs: list[Any] = []
        self.consts: dict[int, np.ndarray] = {}
        self.program: list[_Instr] = []
        self.outputs: list[int] = []
        self.defined: set[int] = set()

    def add(self, line: str) -> None:
        word = line.split()[0]
        if word == "input":
            vid, shape, dtype = _parse_input(line)
            self.define(vid)
            self.inputs.append((vid, shape, dtype))
        elif word == "const":
            vid, value = _parse_const(line)
            self.define(vid)
            self.consts[vid] = value
        elif word == "output":
            if self.outputs:
                raise ValueError("a second 'output' line")
            self.outputs = [int(t) for t in line.split()[1:]]
            missing = [o for o in self.outputs if o not in self.defined]
            if missing or not self.outputs:
                raise ValueError(f"output names undefined ids {missing}")
        else:
            ins = _parse_op(line, self.defined)
            for vid in ins.outputs:
                self.define(vid)
            self.program.append(ins)

    def define(self, vid: int) -> None:
        if vid in self.defined:
            raise ValueError(f"id {vid} is defined twice")
        self.defined.add(vid)

    def finish(self) -> Function:
        outputs = self.outputs or (list(self.program[-1].outputs) if self.program else [])
        if not outputs:
            raise ArtifactError(f"{FORMAT}: subgraph {self.name!r} has no ops and no 'output' line")
        return Function(
            self.name, tuple(self.inputs), self.consts, tuple(self.program), tuple(outputs)
        )


def _parse(source: str) -> dict[str, Function]:
    """Parse every subgraph of an ExampleJSON text, in file order.

    A line holding one name starts a subgraph; every other line belongs to the current one.
    Leading whitespace is optional on every line. Without an ``output`` line, the outputs of
    the last op are the subgraph's outputs (as in TVM's guide).
    """
    sections: list[_Section] = []
    for no, line in enumerate(source.splitlines(), start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        words = line.split()
        if len(words) == 1 and words[0] != "output" and _NAME.fullmatch(words[0]):
            if any(s.name == words[0] for s in sections):
                raise ArtifactError(f"{FORMAT} line {no}: a second subgraph named {words[0]!r}")
            sections.append(_Section(words[0]))
            continue
        if not sections:
            raise ArtifactError(f"{FORMAT}: the first line must be the subgraph name")
        try:
            sections[-1].add(line)
        except (ValueError, TypeError, KeyError, IndexError, json.JSONDecodeError) as exc:
            raise ArtifactError(f"{FORMAT} line {no}: {exc}: {line.strip()[:80]!r}") from None
    if not sections:
        raise ArtifactError(f"{FORMAT}: the first line must be the subgraph name")
    return {s.name: s.finish() for s in sections}


def _shape(text: str) -> tuple[int | None, ...] | None:
    if text.strip() == "*":
        return None
    dims: list[int | None] = []
    for tok in text.split():
        if tok == "?":
            dims.append(None)
        else:
            d = int(tok)
            if d < 0:
                raise ValueError(f"negative dim {d}")
            dims.append(d)
    return tuple(dims)


def _dtype(text: str) -> np.dtype[Any]:
    if text not in _DTYPES:
        raise ValueError(f"unknown dtype {text!r}")
    return np.dtype(text)


def _parse_input(line: str) -> tuple[int, tuple[int | None, ...], np.dtype[Any]]:
    m = re.fullmatch(r"\s*input\s+(\d+)((?:\s+(?:\d+|\?|\*))*)(?:\s+dtype:\s+(\w+))?\s*", line)
    if not m:
        raise ValueError("expected 'input ID DIMS... [dtype: T]'")
    return int(m[1]), _shape(m[2]), _dtype(m[3] or "float32")


def _parse_const(line: str) -> tuple[int, np.ndarray]:
    m = re.fullmatch(
        r"\s*const\s+(\d+)\s+shape:((?:\s+\d+)*)\s+dtype:\s+(\w+)\s+data:\s+([A-Za-z0-9+/=]*)\s*",
        line,
    )
    if not m:
        raise ValueError("expected 'const ID shape: DIMS... dtype: T data: BASE64'")
    shape, dtype = _shape(m[2]) or (), _dtype(m[3])
    raw = base64.b64decode(m[4], validate=True)
    count = int(np.prod(shape, dtype=np.int64)) if shape else 1
    if len(raw) != count * dtype.itemsize:
        raise ValueError(
            f"data has {len(raw)} bytes, shape and dtype need {count * dtype.itemsize}"
        )
    return int(m[1]), np.frombuffer(raw, dtype).reshape(shape)  # type: ignore[arg-type]


def _parse_op(line: str, defined: set[int]) -> _Instr:
    m = _LINE.match(line)
    if not m:
        raise ValueError("expected 'OP IDS inputs: IDS shape: DIMS [attrs: JSON]'")
    op, outs, ins, _shapes, attrs_text = m.groups()
    if op not in KERNELS:
        raise ValueError(f"unknown op {op!r}")
    inputs = tuple(None if t == "-" else int(t) for t in ins.split())
    undefined = [i for i in inputs if i is not None and i not in defined]
    if undefined:
        raise ValueError(f"op reads undefined ids {undefined}")
    attrs = json.loads(attrs_text) if attrs_text else {}
    if not isinstance(attrs, dict):
        raise ValueError("attrs must be a JSON object")
    outputs = tuple(int(t) for t in outs.split(",") if t)
    return _Instr(KERNELS[op], op, inputs, outputs, attrs)


# -- codegen, runtime and serialization hooks --------------------------------------------------


@byoc.hookimpl
def byoc_codegen(backend: str, partition: Partition, config: Mapping[str, Any]) -> Artifact | None:
    return Artifact(codegen(partition))


@byoc.hookimpl
def byoc_create_runtime(
    backend: str, artifact: Artifact, config: Mapping[str, Any]
) -> Module | None:
    return Module(artifact.source)


@byoc.hookimpl
def byoc_serialize(backend: str, artifact: Artifact) -> bytes | None:
    return artifact.source.encode()


@byoc.hookimpl
def byoc_deserialize(backend: str, data: bytes) -> Artifact | None:
    try:
        source = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ArtifactError(f"{FORMAT} artifact is not UTF-8 text: {exc}") from None
    _parse(source)  # validate now, not at the first run
    return Artifact(source)
