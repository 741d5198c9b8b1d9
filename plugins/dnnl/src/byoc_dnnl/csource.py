"""C source mode (``[backend.dnnl] codegen = "c"``): a partition becomes one C++ file.

The DNNL blog post's second codegen. From the same lowered, fused JSON graph the JSON mode
uses, ``generate`` writes a C++ file: one function per kernel (composite or op) calling the
op-level kernel library shipped with the plugin (``dnnl_kernels.h``, ``kernels.cpp``), a
subgraph function that calls them in order on planned buffers, and an exported entry point
(``<symbol>_create``, ``<symbol>_run``, ...). ``byoc.native`` compiles the kernel library once
per host and each partition's file against it; only the kernel library sees oneDNN's headers,
so a partition compiles in about a second.
"""

from __future__ import annotations

import math
import re
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from byoc import ArtifactError, native

from byoc_dnnl import host
from byoc_dnnl import native as dnnl_native
from byoc_dnnl.kinds import BY_NAME, pack
from byoc_dnnl.kinds.base import Call, dims, f32, identifier, literal
from byoc_dnnl.ops import POST_ALGS, POST_KINDS
from byoc_dnnl.runtime import run_native, threads, validate

ENTRY = """
void *{s}_create(const float *const *weights, int nweights, int bf16, int threads,
                 char *err, size_t errlen);
int {s}_run(void *state, void *const *ins, void *const *outs, char *err, size_t errlen);
const char *{s}_implementation(void *state, int i);
int {s}_threads(void *state, int i);
void {s}_destroy(void *state);
"""
_kernels_lock = threading.Lock()
_kernels: list[tuple[native.Library, Path]] = []


# -- the kernel library -------------------------------------------------------------------------


def kernel_library() -> tuple[native.Library, Path]:
    """The op-level kernel library, built once per host (cached), and the file holding it."""
    with _kernels_lock:
        if not _kernels:
            lib = dnnl_native.build(
                dnnl_native.source("kernels.cpp"), "const char *dnnl_kernels_version(void);"
            )
            path = native.cache_dir("dnnl") / f"{lib.module}{native.EXT_SUFFIX}"
            _kernels.append((lib, path))
        return _kernels[0]


def build(source: str, symbol: str) -> native.Library:
    """Compile a generated partition against the kernel library (or find it in the cache)."""
    lib, path = kernel_library()
    return dnnl_native.build(
        source,
        ENTRY.format(s=symbol),
        links=path,
        depends=[lib.sha256],
        compile_flags=("-O2", "-std=c++17"),
    )


# -- generating C++ -----------------------------------------------------------------------------


def _comment(text: str) -> str:
    """Text from the model (node names) made safe for a ``//`` comment."""
    return re.sub(r"[^A-Za-z0-9_.,:;/+=()#\[\] -]", "?", text)[:400]


class _Writer:
    """Writes the C++ of one validated JSON graph."""

    def __init__(self, graph: dict[str, Any]) -> None:
        self.graph = graph
        self.nodes: list[dict[str, Any]] = graph["nodes"]
        self.symbol = identifier(graph["symbol"], "the symbol")
        self.weight_of: dict[int, int] = {}  # const node -> index in the weights array
        for i, n in enumerate(self.nodes):
            if n["op"] == "const":
                self.weight_of[i] = len(self.weight_of)
        self.kernels = [i for i, n in enumerate(self.nodes) if n["op"] == "kernel"]
        self.alias: dict[int, int] = {}  # view node -> the node whose storage it shares
        for i in self.kernels:
            if self.nodes[i]["kind"] == "view":
                self.alias[i] = self.nodes[i]["inputs"][0]

    def root(self, i: int) -> int:
        while i in self.alias:
            i = self.alias[i]
        return i

    def operand(self, i: int) -> str:
        """``In{dims}`` for a run-time operand, ``In{dims, w[k]}`` for a constant."""
        if i < 0:
            return "In{}"
        shape = dims(self.nodes[i]["shape"])
        if i in self.weight_of:
            return f"In{{{shape}, w[{self.weight_of[i]}]}}"
        return f"In{{{shape}}}"

    def runtime(self, ids: Sequence[int]) -> list[int]:
        return [i for i in ids if i >= 0 and i not in self.weight_of]

    def posts(self, node: dict[str, Any]) -> tuple[str, list[int]]:
        items, reads = [], []
        for p in node["post_ops"]:
            i = p.get("input", -1)
            kind = literal(p["kind"], POST_KINDS, "post-op kind")
            alg = literal(p.get("alg", ""), POST_ALGS[p["kind"]], f"{p['kind']} post-op algorithm")
            alpha, beta = (f32(p.get(k, 0), f"a post-op's {k}") for k in ("alpha", "beta"))
            items.append(f"{{{kind}, {alg}, {alpha}, {beta}, {self.operand(i)}}}")
            if p["kind"] == "sum" or (i >= 0 and i not in self.weight_of):
                reads.append(i)
        return "Posts{" + ", ".join(items) + "}", reads

    def make(self, i: int) -> tuple[str, list[int]]:
        """The kernel library call that makes kernel node ``i`` (its kind's C writer), and its
        run-time operands."""
        n = self.nodes[i]
        kind, ins = BY_NAME[n["kind"]], n["inputs"]
        if kind.write is None:
            raise ArtifactError(f"dnnl artifact: C source mode has no kernel for {kind.name!r}")
        posts, reads = "", self.runtime(ins)
        if kind.post_ops:
            posts, post_reads = self.posts(n)
            reads += post_reads
        operands = [self.operand(v) for v in ins]
        return kind.write(Call(n["attrs"], operands, dims(n["shape"]), posts)), reads

    def plan_buffers(self, reads: dict[int, list[int]]) -> tuple[dict[int, int], int]:
        """Arena offsets of the kernels' outputs that are not partition outputs, reusing a
        buffer once nothing reads it (first fit, largest first)."""
        heads = set(self.graph["heads"])
        step = {k: s for s, k in enumerate(self.kernels)}
        end = len(self.kernels)
        live: dict[int, list[int]] = {}
        for k in self.kernels:
            if k not in self.alias and k not in heads:
                live[k] = [step[k], step[k]]
        for k in self.kernels:
            for v in reads.get(k, []):
                r = self.root(v)
                if r in live:
                    live[r][1] = max(live[r][1], step[k])
        for h in heads:
            if self.root(h) in live:
                live[self.root(h)][1] = end
        size = {k: (4 * math.prod(self.nodes[k]["shape"]) + 63) // 64 * 64 for k in live}
        placed: list[tuple[int, int, int, int]] = []  # offset, size, first, last
        offsets: dict[int, int] = {}
        total = 0
        for k in sorted(live, key=lambda v: -size[v]):
            first, last = live[k]
            off = 0
            clash = sorted(b for b in placed if not (b[3] < first or last < b[2]))
            for b in clash:
                if off + size[k] <= b[0]:
                    break
                off = max(off, b[0] + b[1])
            offsets[k] = off
            placed.append((off, size[k], first, last))
            total = max(total, off + size[k])
        return offsets, total

    def write(self, members: Mapping[int, str]) -> str:
        makes: dict[int, str] = {}  # kernel node -> the kernel library call that makes it
        reads: dict[int, list[int]] = {}  # kernel node -> its run-time operands
        for k in self.kernels:
            if k in self.alias:
                reads[k] = [self.alias[k]]
            else:
                makes[k], reads[k] = self.make(k)
        offsets, arena = self.plan_buffers(reads)
        index = {k: n for n, k in enumerate(makes)}
        s = self.symbol
        kernels = []
        for k in makes:
            params = ", ".join(
                [*(f"const float *x{j}" for j in range(len(reads[k]))), "float *dst"]
            )
            args = ", ".join(f"x{j}" for j in range(len(reads[k])))
            kernels.append(
                f"// {members[k]}\n"
                f"void {s}_k{index[k]}(State &s, Frame &f, {params}) {{\n"
                f"    run(*s.k[{index[k]}], f, {{{args}}}, dst);\n}}\n"
            )
        heads = self.graph["heads"]
        var = {i: f"in{n}" for n, i in enumerate(self.graph["arg_nodes"])}
        body = [f"    float *{var[i]} = in[{n}];" for n, i in enumerate(self.graph["arg_nodes"])]
        for k in self.kernels:
            var[k] = f"t{k}"
            if k in self.alias:
                body.append(f"    float *t{k} = {var[self.alias[k]]};  // a view")
                continue
            where = f"out[{heads.index(k)}]" if k in heads else f"buffer(f, {offsets[k]})"
            args = ", ".join([*(var[v] for v in reads[k]), f"t{k}"])
            body += [f"    float *t{k} = {where};", f"    {s}_k{index[k]}(s, f, {args});"]
        for n, h in enumerate(heads):
            if h in self.alias:
                size = 4 * math.prod(self.nodes[h]["shape"])
                body.append(f"    std::memcpy(out[{n}], t{h}, {size});")
        creates = []
        for k, call in makes.items():
            name = f"{s}_k{index[k]} ({_comment(self.nodes[k]['name'])})"
            creates.append(f'        s->k[{index[k]}] = made("{name}", [&] {{ return {call}; }});')
        return _FILE.format(
            s=s,
            count=max(len(makes), 1),
            real=len(makes),
            kernels="\n".join(kernels),
            body="\n".join(body),
            weights=len(self.weight_of),
            creates="\n".join(creates),
            arena=arena,
        )


_FILE = """\
// {s}: generated by byoc-dnnl (codegen = "c"); do not edit.
// One function per kernel calls byoc-dnnl's op-level oneDNN kernel library; {s}_ runs them.
#include "dnnl_kernels.h"

using namespace dnnl_kernels;

namespace {{

struct State {{
    Context *c = nullptr;
    Kernel *k[{count}] = {{}};
    ~State() {{ destroy(c); }}
}};

{kernels}
void {s}_(State &s, Frame &f, float *const *in, float *const *out) {{
{body}
}}

}}  // namespace

extern "C" {{

void *{s}_create(const float *const *w, int nweights, int bf16, int threads, char *err,
                 size_t errlen) {{
    State *s = new State();
    int status = guard(err, errlen, [&] {{
        if (nweights != {weights}) throw std::runtime_error("{s}: expected {weights} weights");
        s->c = context(bf16 != 0, threads);
        Context &c = *s->c;
{creates}
    }});
    if (status < 0) {{
        delete s;
        return nullptr;
    }}
    return s;
}}

int {s}_run(void *state, void *const *ins, void *const *outs, char *err, size_t errlen) {{
    State &s = *(State *)state;
    Frame *f = acquire(*s.c, {arena});
    auto in = (float *const *)ins, out = (float *const *)outs;
    int status = guard(err, errlen, [&] {{ {s}_(s, *f, in, out); }});
    release(*s.c, f);
    return status;
}}

const char *{s}_implementation(void *state, int i) {{
    return i >= 0 && i < {real} ? implementation(*((State *)state)->k[i]) : "";
}}

int {s}_threads(void *state, int i) {{
    return i >= 0 && i < {real} ? threads(*((State *)state)->k[i]) : -1;
}}

void {s}_destroy(void *state) {{ delete (State *)state; }}

}}  // extern "C"
"""


def generate(graph: dict[str, Any], weights: Mapping[str, np.ndarray]) -> str:
    """The C++ file of a JSON graph (see the module's docstring); the graph is validated
    first, attributes included, so only checked values reach the C++."""
    validate(graph, weights)
    graph = host.split(graph, weights)[0]
    nodes = graph["nodes"]
    identifier(graph.get("symbol"), "the symbol")
    ids = {i: i for i in range(len(nodes))}
    for i, n in enumerate(nodes):
        if n["op"] == "kernel":
            pack(i, n, ids)
    members = {
        i: _comment(f"{n['name']}: {', '.join(n.get('members', [])) or '-'}")
        for i, n in enumerate(nodes)
        if n["op"] == "kernel"
    }
    return _Writer(graph).write(members)


def weight_order(graph: dict[str, Any]) -> list[str]:
    """The weight names in the order ``<symbol>_create`` takes them."""
    return [n["name"] for n in graph["nodes"] if n["op"] == "const"]


# -- the runtime --------------------------------------------------------------------------------


class Unloadable(ArtifactError):
    """A partition's library does not load here (say, the kernel library it links was built
    by another compiler): build it again from the source."""


class CRuntime:
    """A compiled C source partition; ``run`` is reentrant and thread-safe (each call borrows
    its own frame of buffers)."""

    def __init__(
        self,
        graph: dict[str, Any],
        weights: Mapping[str, np.ndarray],
        library: native.Library,
        config: Mapping[str, Any],
    ) -> None:
        self.symbol = str(graph["symbol"])
        kernel_library()  # the partition's library links it: it must be in the cache
        try:
            self._ffi, self._lib = native.load(
                library, "dnnl", openmp_spin=native.OPENMP_SPIN_BRIEFLY
            )
        except (OSError, ImportError, RuntimeError) as exc:
            raise Unloadable(f"{self.symbol}: cannot load its compiled library: {exc}") from None
        graph, self._host = host.split(graph, weights)
        nodes = graph["nodes"]
        kernels = [n for n in nodes if n["op"] == "kernel"]
        self._index = [k for k, n in enumerate(kernels) if n["kind"] != "view"]
        self.inputs = [tuple(nodes[i]["shape"]) for i in graph["arg_nodes"]]
        self.outputs = [tuple(nodes[h]["shape"]) for h in graph["heads"]]
        self.threads = threads(config)
        self._weights = [np.ascontiguousarray(weights[n], np.float32) for n in weight_order(graph)]
        ffi = self._ffi
        ptrs = ffi.new("float *[]", [ffi.from_buffer("float[]", w) for w in self._weights] or 1)
        err = ffi.new("char[]", 512)
        bf16 = 1 if config.get("fpmath", "strict") == "bf16" else 0
        create = getattr(self._lib, f"{self.symbol}_create")
        state = create(ptrs, len(self._weights), bf16, self.threads, err, 512)
        if state == ffi.NULL:
            raise ArtifactError(f"{self.symbol}: oneDNN refused it: {ffi.string(err).decode()}")
        self._state = ffi.gc(state, getattr(self._lib, f"{self.symbol}_destroy"))
        self._run = getattr(self._lib, f"{self.symbol}_run")
        self._weights.clear()  # the kernels hold their own (reordered) copies

    def run(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        """Run the partition: arrays in signature order -> arrays in signature order."""

        def call(ins: Any, outs: Any, err: Any, errlen: int) -> int:
            return int(self._run(self._state, ins, outs, err, errlen))

        def native(args: list[np.ndarray]) -> list[np.ndarray]:
            return run_native(self._ffi, self.symbol, args, self.inputs, self.outputs, call)

        return host.around(self._host, inputs, native)

    def implementations(self) -> list[tuple[int, str]]:
        """``(kernel index, "<primitive kind> <implementation>")`` as in the JSON runtime (the
        index counts the graph's kernel nodes; views have no kernel)."""
        lib, ffi = self._lib, self._ffi
        impl = getattr(lib, f"{self.symbol}_implementation")
        return [(k, ffi.string(impl(self._state, i)).decode()) for i, k in enumerate(self._index)]

    def kernel_threads(self) -> list[int]:
        """The OpenMP threads each kernel's primitive was made for, in kernel order."""
        made_for = getattr(self._lib, f"{self.symbol}_threads")
        return [int(made_for(self._state, i)) for i in range(len(self._index))]
