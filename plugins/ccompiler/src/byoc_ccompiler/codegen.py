"""C code generation: a partition of elementwise ONNX nodes -> one readable C file.

The file has the shape of TVM's BYOC C codegen:

* one ``static`` kernel function per fused loop, static shapes and strides baked in, its
  innermost loop marked ``#pragma omp simd``;
* ``<symbol>_``: allocates the intermediate buffers it needs and calls the kernels in
  topological order;
* ``<symbol>(void *const *args)``: the one exported function, inputs then outputs.

Loop fusion: nodes with the same output shape join one kernel when that keeps the kernel order
acyclic; values used only inside a kernel live in registers. Values read by another kernel (of
another shape) or by the outside world are written to memory. Without fusion
(``Options.fuse = False``) every node is a kernel of its own and every intermediate a buffer:
the code the BYOC guide's C codegen writes.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

import numpy as np
from byoc import NodeView, Partition

from byoc_ccompiler import __version__
from byoc_ccompiler.ops import (
    CTYPES,
    OPS,
    Emit,
    ctype,
    divides_integers,
    emit,
    literal,
    output_dtype,
)

SYMBOL = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")  # the partition's name: its C symbol
# Constants bigger than this are refused by the checks; smaller ones are embedded as arrays.
MAX_CONSTANT_ELEMENTS = 1 << 16
_CHUNK = 8192  # elements of the innermost dim one OpenMP iteration handles


@dataclass(frozen=True)
class Tensor:
    """One entry of a partition's signature."""

    name: str
    dtype: str
    shape: tuple[int, ...]

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "dtype": self.dtype, "shape": list(self.shape)}


@dataclass
class Options:
    """Codegen choices taken from ``[backend.ccompiler]`` and the compiler probe."""

    openmp: bool = False
    omp_min_elements: int = 1 << 16
    fuse: bool = True  # False: a kernel per node, a buffer per intermediate (the guide's shape)


# -- fusion ------------------------------------------------------------------------------------


def fuse(views: list[NodeView]) -> list[list[int]]:
    """Group nodes (in topological order) into kernels: same output shape, acyclic order.

    Returns groups of indices into ``views``, in an order where every group comes after the
    groups it reads from.
    """
    produced_by: dict[str, int] = {}
    group_of: list[int] = []
    groups: list[list[int]] = []
    shapes: list[tuple[Any, ...] | None] = []
    ancestors: list[set[int]] = []
    for i, view in enumerate(views):
        t = view.output_type(0)
        shape = t.shape if t is not None else None
        sources = {group_of[produced_by[x]] for x in view.inputs if x in produced_by}
        options = [
            g
            for g in range(len(groups))
            if shapes[g] == shape
            and shape is not None
            and all(g == s or g not in ancestors[s] for s in sources)
        ]
        related = [g for g in options if g in sources]
        if related or options:
            g = (related or options)[-1]
        else:
            g = len(groups)
            groups.append([])
            shapes.append(shape)
            ancestors.append(set())
        groups[g].append(i)
        group_of.append(g)
        for x in view.outputs:
            produced_by[x] = i
        new = set().union(*({s} | ancestors[s] for s in sources if s != g)) if sources else set()
        if new - ancestors[g]:
            ancestors[g] |= new
            for other in range(len(groups)):
                if g in ancestors[other]:
                    ancestors[other] |= ancestors[g]
    order = sorted(range(len(groups)), key=lambda g: (len(ancestors[g]), g))
    return [groups[g] for g in order]


# -- generation --------------------------------------------------------------------------------


@dataclass
class _Buffer:
    """A memory operand: a partition input or output, an intermediate or a constant array."""

    cname: str
    dtype: str
    shape: tuple[int, ...]
    is_const: bool = False


@dataclass
class _Kernel:
    index: int
    views: list[NodeView]
    shape: tuple[int, ...]
    reads: dict[str, _Buffer] = field(default_factory=dict)  # value -> buffer
    writes: dict[str, _Buffer] = field(default_factory=dict)

    @property
    def divides(self) -> bool:
        """It divides integers: it returns 1 when a divisor is 0 (onnxruntime fails there)."""
        return any(divides_integers(v.op_type, _dtype(v)) for v in self.views)


def _dtype(view: NodeView) -> str:
    """T of a node: the dtype of the input that defines it, one the op takes (ValueError)."""
    op = OPS[view.op_type]
    t = view.input_type(op.t_input) if op.t_input < len(view.inputs) else None
    if t is None or t.dtype is None or t.dtype.name not in op.dtypes:
        raise ValueError(f"node {view.name!r:.80} ({view.op_type}) on {t}: not one of {op.dtypes}")
    return t.dtype.name


def generate(partition: Partition, options: Options) -> tuple[str, list[Tensor], list[Tensor]]:
    """The C source of a partition and its signature (inputs, outputs)."""
    graph = partition.graph
    symbol = partition.name
    if not isinstance(symbol, str) or not SYMBOL.fullmatch(symbol):
        raise ValueError(f"partition name {symbol!r:.80} is not a C identifier")
    views: list[NodeView] = []
    for step in partition.steps():
        if not isinstance(step, NodeView):
            raise ValueError(f"{symbol}: ccompiler has no composite patterns, got {step[0].name}")
        if step.op_type not in OPS:
            raise ValueError(f"{symbol}: node '{step.name}' ({step.op_type}) is not supported")
        views.append(step)

    def tensor(name: str) -> Tensor:
        t = graph.type_of(name)
        if t is None or t.dtype is None or not t.is_static or t.dtype.name not in CTYPES:
            raise ValueError(f"{symbol}: value '{name}' has no static supported type ({t})")
        return Tensor(name, t.dtype.name, tuple(int(d) for d in t.shape or ()))

    inputs = [tensor(n) for n in partition.inputs]
    outputs = [tensor(n) for n in partition.outputs]
    buffers: dict[str, _Buffer] = {}
    for k, t in enumerate(inputs):
        buffers[t.name] = _Buffer(f"in{k}", t.dtype, t.shape)
    for k, t in enumerate(outputs):
        buffers[t.name] = _Buffer(f"out{k}", t.dtype, t.shape)
    const_arrays: list[tuple[str, np.ndarray]] = []
    groups = fuse(views) if options.fuse else [[i] for i in range(len(views))]
    kernel_of = {
        v.outputs[0]: g for g, members in enumerate(groups) for v in (views[i] for i in members)
    }
    kernels: list[_Kernel] = []
    intermediates: list[str] = []
    for g, members in enumerate(groups):
        kviews = [views[i] for i in members]
        kernel = _Kernel(g, kviews, tensor(kviews[0].outputs[0]).shape)
        for view in kviews:
            for x in view.inputs:
                if not x or kernel_of.get(x) == g:
                    continue
                value = graph.constant(x)
                if value is not None:
                    if value.size > 1 and x not in buffers:
                        cname = f"{symbol}_c{len(const_arrays)}"
                        const_arrays.append((cname, value))
                        buffers[x] = _Buffer(cname, value.dtype.name, tuple(value.shape), True)
                    if value.size == 1:
                        continue
                elif x not in buffers:  # written by an earlier kernel, read here
                    t = tensor(x)
                    buffers[x] = _Buffer(f"buf{len(intermediates)}", t.dtype, t.shape)
                    intermediates.append(x)
                kernel.reads[x] = buffers[x]
        kernels.append(kernel)
    for kernel in kernels:  # what each kernel must write to memory
        for view in kernel.views:
            out = view.outputs[0]
            if out in buffers:
                kernel.writes[out] = buffers[out]
    opset = next(
        (o.version for o in partition.model.opset_import if o.domain in ("", "ai.onnx")), 1
    )
    lines = _header(partition.name, len(views))
    for cname, value in const_arrays:
        lines += _const_array(cname, value)
    for kernel in kernels:
        lines += _kernel_source(symbol, kernel, graph, opset, options)
    lines += _subgraph(symbol, kernels, inputs, outputs, intermediates, buffers)
    lines += _wrapper(symbol, inputs, outputs)
    return "\n".join(lines) + "\n", inputs, outputs


def _joined(head: str, items: list[str], tail: str, indent: str = "") -> str:
    """``head(a, b, c)tail`` on one line, or one item per line when that passes 100 columns."""
    line = f"{indent}{head}({', '.join(items)}){tail}"
    if len(line) <= 100 or not items:
        return line
    inner = ",\n".join(f"{indent}    {item}" for item in items)
    return f"{indent}{head}(\n{inner}){tail}"


def _text(name: str) -> str:
    """A value or node name (free text from the model) inside a C comment: JSON-quoted (ASCII,
    no newline, no unescaped quote) and never ``*/``. The one way text from the partition
    reaches the C; everything else there is an identifier of ours, a C type of CTYPES, an
    expression of OPS or a number through ``literal``."""
    return json.dumps(name).replace("*/", "*\\/")


def _header(symbol: str, nodes: int) -> list[str]:
    """What the file is; from the partition's graph alone, so that a loader generating the
    source again from the graph a .byoc file carries gets the same text."""
    prelude = resources.files("byoc_ccompiler").joinpath("prelude.h").read_text()
    return [
        f"/* {symbol}: generated by byoc-ccompiler {__version__} from {nodes} ONNX node(s). */",
        prelude.rstrip(),
        "",
    ]


def _const_array(cname: str, value: np.ndarray) -> list[str]:
    dtype = value.dtype.name
    flat = [literal(v, dtype) for v in value.reshape(-1).tolist()]
    rows = [", ".join(flat[i : i + 8]) for i in range(0, len(flat), 8)]
    body = ",\n  ".join(rows)
    return [f"static const {ctype(dtype)} {cname}[{len(flat)}] = {{\n  {body}\n}};", ""]


def _strides(shape: tuple[int, ...], target: tuple[int, ...]) -> list[int]:
    """Element strides of a C-contiguous ``shape`` broadcast to ``target`` (0: broadcast)."""
    padded = (1,) * (len(target) - len(shape)) + tuple(shape)
    strides, step = [0] * len(target), 1
    for d in range(len(target) - 1, -1, -1):
        strides[d] = step if padded[d] != 1 else 0
        step *= padded[d]
    return strides


def collapse(
    shape: tuple[int, ...], operands: list[list[int]]
) -> tuple[list[int], list[list[int]]]:
    """Drop size-1 dims and merge neighbouring dims every operand walks the same way."""
    keep = [d for d in range(len(shape)) if shape[d] != 1]
    dims = [shape[d] for d in keep]
    strides = [[s[d] for d in keep] for s in operands]
    d = len(dims) - 1
    while d > 0:
        if all(s[d - 1] == s[d] * dims[d] for s in strides):
            dims[d - 1] *= dims[d]
            del dims[d]
            for s in strides:
                s[d - 1] = s[d]
                del s[d]
        d -= 1
    if not dims:
        return [1], [[0] for _ in operands]
    return dims, strides


def _kernel_source(
    symbol: str, kernel: _Kernel, graph: Any, opset: int, options: Options
) -> list[str]:
    shape = kernel.shape
    reads = list(dict.fromkeys(b.cname for b in kernel.reads.values()))
    by_cname = {b.cname: b for b in [*kernel.reads.values(), *kernel.writes.values()]}
    operands = [*reads, *(b.cname for b in kernel.writes.values())]
    dims, strides = collapse(shape, [_strides(by_cname[c].shape, shape) for c in operands])
    offset = {c: s for c, s in zip(operands, strides, strict=True)}
    params = [
        f"const {ctype(by_cname[c].dtype)} *restrict {c}" for c in reads if not by_cname[c].is_const
    ]
    params += [f"{ctype(b.dtype)} *restrict {b.cname}" for b in kernel.writes.values()]
    names = ", ".join(f"{v.op_type} {_text(v.name)}" for v in kernel.views)
    kind = "int" if kernel.divides else "void"
    lines = [
        f"/* kernel {kernel.index}: {names}; shape {list(shape)} */",
        _joined(f"static {kind} {symbol}_kernel_{kernel.index}", params or ["void"], " {"),
    ]
    reduction = ""
    if kernel.divides:
        lines.append("  int zero_divisor = 0;")
        reduction = " reduction(|:zero_divisor)"
    total = math.prod(dims)
    parallel = options.openmp and total >= options.omp_min_elements
    idx = [f"i{d}" for d in range(len(dims))]
    inner, last = dims[-1], idx[-1]
    chunked = parallel and inner > _CHUNK
    outer = len(dims) - 1 + (1 if chunked else 0)  # loops OpenMP shares out
    if parallel:
        collapse_clause = f" collapse({outer})" if outer > 1 else ""
        lines.append(f"  #pragma omp parallel for{collapse_clause} schedule(static){reduction}")
    pad = "  "
    for d in range(len(dims) - 1):
        lines.append(f"{pad}for (int64_t {idx[d]} = 0; {idx[d]} < {dims[d]}; ++{idx[d]})")
        pad += "  "
    closers = []
    if chunked:
        step = _CHUNK
        lines.append(f"{pad}for (int64_t c = 0; c < {-(-inner // step)}; ++c) {{")
        closers.append(pad + "}")
        pad += "  "
        lines.append(
            f"{pad}const int64_t end = c * {step} + {step} < {inner} ? c * {step} + {step} "
            f": {inner};"
        )
        lines.append(f"{pad}#pragma omp simd{reduction}")
        lines.append(f"{pad}for (int64_t {last} = c * {step}; {last} < end; ++{last}) {{")
    else:
        lines.append(f"{pad}#pragma omp simd{reduction}")
        lines.append(f"{pad}for (int64_t {last} = 0; {last} < {inner}; ++{last}) {{")
    closers.append(pad + "}")
    pad += "  "

    def at(cname: str) -> str:
        terms = [
            i if s == 1 else f"{i} * {s}" for i, s in zip(idx, offset[cname], strict=True) if s != 0
        ]
        return f"{cname}[{' + '.join(terms) or '0'}]"

    atoms: dict[str, str] = {}
    loaded: dict[str, str] = {}
    for value, buf in kernel.reads.items():
        if buf.cname not in loaded:
            load = at(buf.cname)
            if buf.dtype == "bool":
                load = f"(uint8_t)({load} != 0)"
            loaded[buf.cname] = f"x{len(loaded)}"
            lines.append(f"{pad}const {ctype(buf.dtype)} {loaded[buf.cname]} = {load};")
        atoms[value] = loaded[buf.cname]
    for k, view in enumerate(kernel.views):
        args: list[str | None] = []
        consts: list[np.ndarray | None] = []
        for x in view.inputs:
            known = graph.constant(x) if x else None
            consts.append(known)
            if not x:
                args.append(None)
            elif known is not None and known.size == 1:
                args.append(literal(known.reshape(()).item(), known.dtype.name))
            else:
                args.append(atoms[x])
        dtype = _dtype(view)
        out_dtype = output_dtype(view.op_type, view.attrs, dtype)
        assert out_dtype is not None
        e = Emit(args, view.attrs, dtype, opset, consts, out_dtype)
        out = view.outputs[0]
        atoms[out] = f"t{k}"
        lines.append(f"{pad}/* {view.op_type} {_text(view.name)} -> {_text(out)} */")
        lines.append(f"{pad}const {ctype(out_dtype)} t{k} = {emit(view.op_type, e)};")
        if divides_integers(view.op_type, dtype):
            lines.append(f"{pad}zero_divisor |= {e.b} == 0;")
        if out in kernel.writes:
            lines.append(f"{pad}{at(kernel.writes[out].cname)} = t{k};")
    lines += reversed(closers)
    if kernel.divides:
        lines.append("  return zero_divisor;")
    lines += ["}", ""]
    return lines


def _subgraph(
    symbol: str,
    kernels: list[_Kernel],
    inputs: list[Tensor],
    outputs: list[Tensor],
    intermediates: list[str],
    buffers: dict[str, _Buffer],
) -> list[str]:
    params = [f"const {ctype(t.dtype)} *restrict in{k}" for k, t in enumerate(inputs)]
    params += [f"{ctype(t.dtype)} *restrict out{k}" for k, t in enumerate(outputs)]
    lines = [
        "/* The subgraph: allocates the intermediates and runs the kernels in order. */",
        _joined(f"static int {symbol}_", params, " {"),
    ]
    temps = [buffers[v] for v in intermediates]
    for b in temps:
        c = ctype(b.dtype)
        lines.append(
            f"  {c} *{b.cname} = ({c} *)malloc({math.prod(b.shape)} * "
            f"sizeof({c}));  /* {_text(next(v for v in intermediates if buffers[v] is b))} */"
        )
    if temps:
        frees = " ".join(f"free({b.cname});" for b in temps)
        lines.append(
            f"  if ({' || '.join(f'{b.cname} == NULL' for b in temps)}) {{ {frees} return 1; }}"
        )
    divides = any(k.divides for k in kernels)
    if divides:
        lines.append("  int zero_divisor = 0;")
    for kernel in kernels:
        args = list(dict.fromkeys(b.cname for b in kernel.reads.values() if not b.is_const))
        args += [b.cname for b in kernel.writes.values()]
        call = f"{'zero_divisor |= ' if kernel.divides else ''}{symbol}_kernel_{kernel.index}"
        lines.append(_joined(call, args, ";", "  "))
    lines += [f"  free({b.cname});" for b in temps]
    lines += ["  return zero_divisor ? 2 : 0;" if divides else "  return 0;", "}", ""]
    return lines


def _wrapper(symbol: str, inputs: list[Tensor], outputs: list[Tensor]) -> list[str]:
    lines = [
        "/* The entry point the runtime calls: args holds the inputs, then the outputs, each a",
        " * C-contiguous buffer of this dtype and shape:",
    ]
    everything = [("input", t) for t in inputs] + [("output", t) for t in outputs]
    for k, (kind, t) in enumerate(everything):
        lines.append(f" *   args[{k}] {kind} {_text(t.name)} {t.dtype}{list(t.shape)}")
    lines += [
        " * Returns 0, 1 when memory for the intermediates cannot be allocated, or 2 when an",
        " * integer Div divided by zero (onnxruntime fails there: the outputs are not valid). */",
        f"int {symbol}(void *const *args) {{",
    ]
    casts = [f"(const {ctype(t.dtype)} *)args[{k}]" for k, t in enumerate(inputs)]
    casts += [f"({ctype(t.dtype)} *)args[{len(inputs) + k}]" for k, t in enumerate(outputs)]
    lines.append(_joined(f"return {symbol}_", casts, ";", "  "))
    lines.append("}")
    return lines
