"""Lowering: the nodes and composites of one partition become oneDNN kernels (``Kernel``),
values referred to by name (their kinds and algorithms: ops.py)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
from byoc import NodesRefused, NodeView, Partition
from byoc.plan import Composite

from byoc_dnnl.annotate import (
    dequantized,
    int8_weights,
    pad_amounts,
    qparams,
    reduced_axes,
    slice_window,
    split_offsets,
)
from byoc_dnnl.ops import INT_RANGES

FLT_MAX = float(np.finfo(np.float32).max)
MAX_POST_OPS = 12
# A ConvTranspose whose kernel is its stride, of at most this many output channels, runs as a
# 1x1 convolution and a depth-to-space (Lowering._shuffled_deconv).
SHUFFLED_DECONV = 4


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
    """Turns the steps of one partition into kernels."""

    def __init__(self, partition: Partition) -> None:
        self.partition = partition
        self.graph = partition.graph
        self.opset = next(
            (o.version for o in partition.model.opset_import if o.domain in ("", "ai.onnx")), 17
        )
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

    def fresh_name(self, base: str) -> str:
        self._fresh += 1
        return f"{base}:{self._fresh}"

    def new_const(self, base: str, value: np.ndarray) -> str:
        name = self.fresh_name(base)
        self.consts[name] = np.ascontiguousarray(value, dtype=np.float32)
        return name

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
        self._fresh += 1
        out = f"{name}:rank{self._fresh}"
        self.shapes[out] = new
        self.emit("view", [name], out, node)
        return out

    # -- steps ----------------------------------------------------------------------------

    def lower(self) -> list[Kernel]:
        for step in self.partition.steps():
            if isinstance(step, NodeView):
                self.node(step)
            else:
                self.composite(*step)
        return self.kernels

    def composite(self, comp: Composite, members: list[NodeView]) -> None:
        start = len(self.kernels)
        idioms = ("hardswish", "swish", "gelu", "gelu_tanh")
        idiom = next((a for a in idioms if comp.name.endswith(a)), None)
        if comp.name == "dnnl.qmatmul":
            self._qmatmul(comp, members)
        elif comp.name == "dnnl.qconv":
            self._qconv(comp, members)
        elif comp.name == "dnnl.layernorm":
            b = comp.bound
            eps = float(np.asarray(self.const(b["eps"])).reshape(-1)[0])
            x, root = b["x"], members[-1]
            self._layernorm(x, root.outputs[0], b.get("gamma"), b.get("beta"), eps, root)
            self.kernels[-1].members = [m.name for m in members]
        elif idiom is None:
            for m in members:
                self.node(m)
        else:
            root = members[-1]
            x = comp.bound["x"]  # every idiom pattern names the value it reads "x"
            by_out = {o: m for m in members for o in m.outputs}
            inner = self._ancestors(x, by_out)
            for m in members:
                if m.name in inner:
                    self.node(m)
            alg = {"gelu": "gelu_erf"}.get(idiom, idiom)
            alpha, beta = {"hardswish": (1 / 6, 0.5), "swish": (1.0, 0.0)}.get(idiom, (0.0, 0.0))
            k = self.emit("eltwise", [x], root.outputs[0], root, alg=alg, alpha=alpha, beta=beta)
            k.members = [m.name for m in members if m.name not in inner]
        for k in self.kernels[start:]:
            k.name = comp.name

    def _qmatmul(self, comp: Composite, members: list[NodeView]) -> None:
        """An int8 dense layer reading a DynamicQuantizeLinear of this partition (which made no
        kernel: this one quantizes its input); weights, scale, bias and the weights' zero point
        (when not 0) as float32 constants: the int8 weights and zero point of
        ``annotate.int8_weights`` (w - z, or uint8 ones shifted to int8)."""
        b, root = comp.bound, members[-1]
        x = self.quantized.get(b["xq"])
        if x is None:
            raise NodesRefused(
                {m.name: "its DynamicQuantizeLinear runs elsewhere" for m in members}
            )
        w = self.const(b["w"])
        ws = self.const(b["ws"])
        assert w is not None and ws is not None
        weights = int8_weights(w, self.const(b.get("wzp")), 1)
        assert weights is not None  # the check asked for int8 weights and one zero point
        bias = self.const(b.get("bias"))
        zero = weights[1]
        inputs = [
            x,
            self.new_const(b["w"], weights[0]),
            None if bias is None else self.new_const(b["bias"], bias.reshape(-1)),
            self.new_const(b["ws"], ws.reshape(-1)),
        ]
        if zero:
            inputs.append(self.new_const(b["wzp"], np.array([zero])))
        uint8 = int(w.dtype == np.uint8)
        k = self.emit("qmatmul", inputs, root.outputs[0], root, uint8=uint8)
        k.members = [m.name for m in members]

    def _qconv(self, comp: Composite, members: list[NodeView]) -> None:
        """An int8 convolution reading a DynamicQuantizeLinear of this partition, as
        ``_qmatmul``: weights and zero point as ``annotate.int8_weights`` makes them, bias and
        scale as float32 constants, the convolution's geometry as ``_Conv``'s.
        ``int_bias``: the bias is quantized at run time (``floor(bias / scale)``, added to the
        int32 product) as older onnxruntimes wrote it."""
        b, root = comp.bound, members[-1]
        x = self.quantized.get(b["xq"])
        if x is None:
            raise NodesRefused(
                {m.name: "its DynamicQuantizeLinear runs elsewhere" for m in members}
            )
        conv = next(m for m in members if m.op_type == "ConvInteger")
        w, ws = self.const(b["w"]), self.const(b["ws"])
        assert w is not None and ws is not None
        weights = int8_weights(w, self.const(b.get("wzp")), 0)
        assert weights is not None  # the check asked for int8 weights and one zero point
        w, zero = weights
        bias = self.const(b.get("bias"))
        inputs = [
            x,
            self.new_const(b["w"], self._grouped(w, conv)),
            None if bias is None else self.new_const(b["bias"], bias.reshape(-1)),
            self.new_const(b["ws"], ws.reshape(-1)),
            self.new_const(b.get("wzp", b["w"]), np.array([zero])) if zero else None,
        ]
        kernel = self._int8_conv(conv, w, inputs, root, int_bias=int("qbias" in b))
        kernel.members = [m.name for m in members]

    def _grouped(self, w: np.ndarray, conv: NodeView) -> np.ndarray:
        """Conv weights as oneDNN takes them: groups first when there are several."""
        group = int(conv.attrs.get("group", 1))
        return w.reshape(group, w.shape[0] // group, *w.shape[1:]) if group > 1 else w

    def _int8_conv(
        self, conv: NodeView, w: np.ndarray, inputs: list[str | None], root: NodeView, **attrs: Any
    ) -> Kernel:
        """A qconv kernel writing ``root``'s output, with Conv (or ConvInteger) ``conv``'s
        geometry and weights ``w``."""
        ys, k = self.shape(root.outputs[0]), list(w.shape[2:])
        strides = list(conv.attrs.get("strides", [1] * len(k)))
        dil = list(conv.attrs.get("dilations", [1] * len(k)))
        pads = self._pads(conv.attrs, self.shape(conv.inputs[0])[2:], ys[2:], k, strides, dil)
        return self.emit(
            "qconv",
            inputs,
            root.outputs[0],
            root,
            strides=strides,
            dilations=[d - 1 for d in dil],
            pads_begin=pads[0],
            pads_end=pads[1],
            **attrs,
        )

    @staticmethod
    def _ancestors(x: str, by_out: dict[str, NodeView]) -> set[str]:
        found: set[str] = set()
        stack = [x]
        while stack:
            m = by_out.get(stack.pop())
            if m is not None and m.name not in found:
                found.add(m.name)
                stack.extend(n for n in m.inputs if n)
        return found

    def node(self, node: NodeView) -> None:
        getattr(self, f"_{node.op_type}", self._unknown)(node)

    def _DynamicQuantizeLinear(self, node: NodeView) -> None:
        """No kernel: the int8 layers reading it (``_qmatmul``, ``_qconv``) quantize its input.
        Its outputs exist only inside them (the support check made sure of that in the whole
        model); refused when the partition lost one of those readers."""
        readers = {r for name in node.outputs for r in self.graph.consumers.get(name, [])}
        int8 = ("dnnl.qmatmul", "dnnl.qconv")
        inside = {n for c in self.partition.composites if c.name in int8 for n in c.nodes}
        if set(node.outputs) & set(self.partition.outputs) or any(
            self.graph.nodes[r].name not in inside for r in readers
        ):
            raise NodesRefused({node.name: "an int8 layer reading it runs elsewhere"})
        self.quantized[node.outputs[0]] = node.inputs[0]

    def _unknown(self, node: NodeView) -> None:
        raise ValueError(f"the dnnl backend cannot lower {node.op_type} (node '{node.name}')")

    # -- ops ------------------------------------------------------------------------------

    def _Conv(self, node: NodeView) -> None:
        if self._static_qconv(node):
            return
        w, xs, ys, k, strides = self._window(node)
        dil = list(node.attrs.get("dilations", [1] * len(k)))
        pads = self._pads(node.attrs, xs[2:], ys[2:], k, strides, dil)
        self._convolution("conv", node, self._grouped(w, node), strides, dil, pads)

    def _static_qconv(self, node: NodeView) -> bool:
        """A Conv of a DequantizeLinear of this partition's QuantizeLinear, by weights
        dequantized from int8 constants (one scale, or one per output channel; zero points 0),
        as an int8 convolution of the QuantizeLinear's integers (their scale and zero point:
        ``src_scale``, ``src_zero_point``), its bias dequantized to float32. False: a float32
        convolution of the dequantized values instead."""
        x, wname = self._dequantized(node.inputs[0]), self._dequantized(node.inputs[1])
        if x is None or wname is None or x[0] not in self.static:
            return False
        w, ws, wz = (self.const(n) for n in wname)
        if w is None or ws is None or w.dtype != np.int8 or (wz is not None and np.any(wz != 0)):
            return False
        wdq = self.graph.view(self.graph.producer[node.inputs[1]])
        if ws.size != 1 and (ws.size != w.shape[0] or int(wdq.attrs.get("axis", 1)) % w.ndim):
            return False
        s, zero, _ = self.static[x[0]]
        inputs = [
            x[0],
            self.new_const(wname[0], self._grouped(w, node)),
            self._bias(node),
            self.new_const(wname[1], ws.reshape(-1)),
        ]
        self._int8_conv(node, w, inputs, node, int_bias=0, src_scale=s, src_zero_point=zero)
        return True

    def _dequantized(self, name: str) -> tuple[str, str, str | None] | None:
        """The integers, scale and zero point (None: absent) a DequantizeLinear reads to make
        value ``name``, or None when no DequantizeLinear makes it."""
        i = self.graph.producer.get(name)
        node = None if i is None else self.graph.view(i)
        if node is None or node.op_type != "DequantizeLinear":
            return None
        zero = node.inputs[2] if len(node.inputs) > 2 and node.inputs[2] else None
        return node.inputs[0], node.inputs[1], zero

    def _ConvTranspose(self, node: NodeView) -> None:
        w, xs, ys, k, strides = self._window(node)
        nd = len(k)
        pl = list(node.attrs.get("pads", [0] * 2 * nd))[:nd]
        pr = [(xs[2 + i] - 1) * strides[i] + k[i] - ys[2 + i] - pl[i] for i in range(nd)]
        group = int(node.attrs.get("group", 1))
        few = nd == 2 and group == 1 and w.shape[1] <= SHUFFLED_DECONV
        if few and k == strides and not any(pl + pr):
            self._shuffled_deconv(node, w, xs, ys)
            return
        ic, ocg = w.shape[0], w.shape[1]
        w = w.reshape(group, ic // group, ocg, *k).swapaxes(1, 2)  # -> g, OC/g, IC/g, k...
        if group == 1:
            w = w[0]
        self._convolution("deconv", node, w, strides, [1] * nd, (pl, pr))

    def _shuffled_deconv(
        self, node: NodeView, w: np.ndarray, xs: tuple[int, ...], ys: tuple[int, ...]
    ) -> None:
        """A 2-D ConvTranspose of few output channels whose kernel equals its stride (windows
        that never overlap: a DBNet head's 2x2, stride 2) as a 1x1 convolution to OC*kh*kw
        channels, then a depth-to-space (view, transpose, view). oneDNN's deconvolution pads
        the few channels to a block of 16: PP-OCRv4's 24 -> 1 channel over 640x640 took 3.1 ms."""
        ic, oc, kh, kw = w.shape
        n, _, h, wd = xs
        y = node.outputs[0]
        weights = w.transpose(1, 2, 3, 0).reshape(oc * kh * kw, ic, 1, 1)  # (oc, i, j) rows
        bias = self.const(node.inputs[2] if len(node.inputs) > 2 else None)
        rows = self.fresh_name(f"{y}:rows")
        self.shapes[rows] = (n, oc * kh * kw, h, wd)
        self.emit(
            "conv",
            [
                node.inputs[0],
                self.new_const(node.inputs[1], weights),
                None if bias is None else self.new_const(f"{y}:bias", np.repeat(bias, kh * kw)),
            ],
            rows,
            node,
            strides=[1, 1],
            dilations=[0, 0],
            pads_begin=[0, 0],
            pads_end=[0, 0],
        )
        split, moved = self.fresh_name(f"{y}:split"), self.fresh_name(f"{y}:moved")
        self.shapes[split] = (n, oc, kh, kw, h, wd)
        self.shapes[moved] = (n, oc, h, kh, wd, kw)
        self.emit("view", [rows], split, node)
        self.emit("transpose", [split], moved, node, perm=[0, 1, 4, 2, 5, 3])
        self.emit("view", [moved], y, node)
        assert self.shape(y) == (n, oc, h * kh, wd * kw)

    def _window(
        self, node: NodeView
    ) -> tuple[np.ndarray, tuple[int, ...], tuple[int, ...], list[int], list[int]]:
        """A Conv's or ConvTranspose's constant weights, input and output shapes, kernel and
        strides."""
        w = self.const(node.inputs[1])
        assert w is not None  # the check asked for constant weights
        xs, ys = self.shape(node.inputs[0]), self.shape(node.outputs[0])
        k = list(w.shape[2:])
        return w, xs, ys, k, list(node.attrs.get("strides", [1] * len(k)))

    def _convolution(
        self,
        kind: str,
        node: NodeView,
        w: np.ndarray,
        strides: list[int],
        dilations: list[int],
        pads: tuple[list[int], list[int]],
    ) -> None:
        """A conv or deconv kernel: weights laid out as oneDNN wants them (groups first), the
        optional bias, ONNX's dilations (oneDNN counts them from 0)."""
        weights = self.new_const(node.inputs[1], w)
        self.emit(
            kind,
            [node.inputs[0], weights, self._bias(node)],
            node.outputs[0],
            node,
            strides=strides,
            dilations=[d - 1 for d in dilations],
            pads_begin=pads[0],
            pads_end=pads[1],
        )

    def _bias(self, node: NodeView) -> str | None:
        """A Conv's or ConvTranspose's optional bias (input 2) as a 1-D constant."""
        bias = node.inputs[2] if len(node.inputs) > 2 and node.inputs[2] else None
        value = self.const(bias)
        return self.new_const(bias, value.reshape(-1)) if bias and value is not None else None

    @staticmethod
    def _pads(
        a: dict[str, Any],
        xs: tuple[int, ...],
        ys: tuple[int, ...],
        k: list[int],
        strides: list[int],
        dil: list[int],
    ) -> tuple[list[int], list[int]]:
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

    def _MatMul(self, node: NodeView) -> None:
        if self._static_qmatmul(node):
            return
        y = node.outputs[0]
        rank = len(self.shape(y))
        a = self.as_rank(node.inputs[0], rank, node)
        b = node.inputs[1]
        if self.const(b) is not None:
            b = self.new_const(b, self.const(b))  # type: ignore[arg-type]
        b = self.as_rank(b, rank, node)
        self.emit("matmul", [a, b, None], y, node)

    def _static_qmatmul(self, node: NodeView) -> bool:
        """A MatMul (or a Gemm: alpha and beta 1, a bias of one value per column) of a
        DequantizeLinear of this partition's QuantizeLinear, by (K, N) weights dequantized from
        int8 constants (one scale, or one per column; zero points 0): an int8 dense layer of the
        QuantizeLinear's integers, as ``_static_qconv``. False: a float32 one instead."""
        x, wname = self._dequantized(node.inputs[0]), self._dequantized(node.inputs[1])
        if x is None or wname is None or x[0] not in self.static:
            return False
        w, ws, wz = (self.const(n) for n in wname)
        if w is None or ws is None or w.dtype != np.int8 or w.ndim != 2:
            return False
        if wz is not None and np.any(wz != 0):
            return False
        wdq = self.graph.view(self.graph.producer[node.inputs[1]])
        columns = int(wdq.attrs.get("axis", 1)) % 2  # the axis of per-column scales
        a, bias = node.attrs, None
        if node.op_type == "Gemm":
            if a.get("transA", 0) or a.get("alpha", 1.0) != 1.0 or a.get("beta", 1.0) != 1.0:
                return False
            if a.get("transB", 0):
                w, columns = w.T, 1 - columns
            c = self.const(node.inputs[2]) if len(node.inputs) > 2 and node.inputs[2] else None
            if c is not None and c.size != w.shape[1]:
                return False
            bias = None if c is None else self.new_const(node.inputs[2], c.reshape(-1))
        if ws.size != 1 and (ws.size != w.shape[1] or columns != 1):
            return False
        s, zero, _ = self.static[x[0]]
        inputs = [x[0], self.new_const(wname[0], w), bias, self.new_const(wname[1], ws.reshape(-1))]
        self.emit("qmatmul", inputs, node.outputs[0], node, src_scale=s, src_zero_point=zero)
        return True

    def _Gemm(self, node: NodeView) -> None:
        if self._static_qmatmul(node):
            return
        at = node.attrs
        y = node.outputs[0]
        m, n = self.shape(y)
        b = node.inputs[1]
        bc = self.const(b)
        if bc is not None:
            bc = bc.T if at.get("transB", 0) else bc
            b = self.new_const(b, bc * np.float32(at.get("alpha", 1.0)))
        bias = None
        if len(node.inputs) > 2 and node.inputs[2]:
            c = self.const(node.inputs[2]) * np.float32(at.get("beta", 1.0))  # type: ignore[operator]
            c = np.broadcast_to(
                c.reshape(1, -1) if c.ndim == 1 else c.reshape(c.shape or (1, 1)), (m, n)
            )
            c = c[:1] if (c == c[:1]).all() else c
            bias = self.new_const(node.inputs[2], c)
        self.emit("matmul", [node.inputs[0], b, bias], y, node)

    def _LSTM(self, node: NodeView) -> None:
        self._rnn(node, "lstm", [0, 2, 3, 1])  # ONNX's gates i, o, f, c; oneDNN's i, f, c, o

    def _GRU(self, node: NodeView) -> None:
        cell = "lbr_gru" if node.attrs.get("linear_before_reset", 0) else "gru"
        self._rnn(node, cell, [0, 1, 2])  # z, r, h: oneDNN's u, r, o

    def _rnn(self, node: NodeView, cell: str, order: list[int]) -> None:
        """An rnn kernel writing Y ([T, directions, N, H]); Y_h, when read, is a concat of Y's
        last step of each direction (the check refused LSTMs whose Y_c is read).

        Weights W [D, G*H, C] and R [D, G*H, H] become [D, C, G, H] and [D, H, G, H] in
        oneDNN's gate order; the bias is Wb + Rb per gate, but for lbr_gru, whose candidate gate
        adds Rb inside the reset product: [Wb + Rb (u, r), Wb (o), Rb (o)]."""
        ins = list(node.inputs) + [""] * (8 - len(node.inputs))
        w, r = self.const(ins[1]), self.const(ins[2])
        assert w is not None and r is not None  # the check asked for constant weights
        dirs, gh, _ = w.shape
        gates = len(order)
        hidden = gh // gates

        def ordered(m: np.ndarray) -> np.ndarray:  # [D, G*H, ...] -> [D, G, H, ...], reordered
            return m.reshape(dirs, gates, hidden, *m.shape[2:])[:, order]

        b = self.const(ins[3])
        b = np.zeros((dirs, 2 * gh), np.float32) if b is None else b
        wb, rb = ordered(b[:, :gh]), ordered(b[:, gh:])
        if cell == "lbr_gru":
            bias = np.concatenate([wb[:, :2] + rb[:, :2], wb[:, 2:], rb[:, 2:]], axis=1)
        else:
            bias = wb + rb
        states = [ins[5] or None, (ins[6] or None) if cell == "lstm" else None]
        y = node.outputs[0] if node.outputs and node.outputs[0] else self.fresh_name(ins[0])
        t, n = self.shape(ins[0])[:2]
        self.shapes[y] = (t, dirs, n, hidden)
        direction = str(node.attrs.get("direction", "forward"))
        inputs = [
            ins[0],
            self.new_const(ins[1], ordered(w).transpose(0, 3, 1, 2)),
            self.new_const(ins[2], ordered(r).transpose(0, 3, 1, 2)),
            self.new_const(ins[3] or ins[1], bias),
            *states,
        ]
        self.emit("rnn", inputs, y, node, cell=cell, direction=direction)
        y_h = node.outputs[1] if len(node.outputs) > 1 else ""
        if y_h and (y_h in self.graph.consumers or y_h in self.partition.outputs):
            self._last_states(y, y_h, direction, node)

    def _last_states(self, y: str, y_h: str, direction: str, node: NodeView) -> None:
        """Y_h [D, N, H]: each direction's output at its last step (T - 1 forward, 0 in
        reverse), sliced from Y [T, D, N, H]."""
        t, dirs, n, hidden = self.shape(y)
        reverse = [direction == "reverse"] if dirs == 1 else [False, True]
        parts = []
        for d, back in enumerate(reverse):
            part = self.fresh_name(y_h)
            self.shapes[part] = (1, 1, n, hidden)
            self.emit(
                "slice", [y], part, node, offsets=[0 if back else t - 1, d, 0, 0], steps=[1] * 4
            )
            parts.append(part)
        joined = parts[0]
        if dirs > 1:
            joined = self.fresh_name(y_h)
            self.shapes[joined] = (1, dirs, n, hidden)
            self.emit("concat", parts, joined, node, axis=1)
        self.emit("view", [joined], y_h, node)

    def _BatchNormalization(self, node: NodeView) -> None:
        x, scale, shift, mean, var = node.inputs[:5]
        names = [self.new_const(n, self.const(n).reshape(-1)) for n in (mean, var, scale, shift)]  # type: ignore[union-attr]
        self.emit(
            "batchnorm",
            [x, *names],
            node.outputs[0],
            node,
            epsilon=float(node.attrs.get("epsilon", 1e-5)),
        )

    def _eltwise(self, node: NodeView, alg: str, alpha: float = 0.0, beta: float = 0.0) -> None:
        self.emit(
            "eltwise", [node.inputs[0]], node.outputs[0], node, alg=alg, alpha=alpha, beta=beta
        )

    def _Relu(self, node: NodeView) -> None:
        self._eltwise(node, "relu")

    def _LeakyRelu(self, node: NodeView) -> None:
        self._eltwise(node, "relu", float(node.attrs.get("alpha", 0.01)))

    def _Sigmoid(self, node: NodeView) -> None:
        self._eltwise(node, "logistic")

    def _Tanh(self, node: NodeView) -> None:
        self._eltwise(node, "tanh")

    def _Elu(self, node: NodeView) -> None:
        self._eltwise(node, "elu", float(node.attrs.get("alpha", 1.0)))

    def _HardSigmoid(self, node: NodeView) -> None:
        a = node.attrs
        self._eltwise(node, "hardsigmoid", float(a.get("alpha", 0.2)), float(a.get("beta", 0.5)))

    def _HardSwish(self, node: NodeView) -> None:
        self._eltwise(node, "hardswish", 1 / 6, 0.5)

    def _Clip(self, node: NodeView) -> None:
        lo, hi = node.attrs.get("min", -FLT_MAX), node.attrs.get("max", FLT_MAX)
        if len(node.inputs) > 1 and node.inputs[1]:
            lo = float(self.const(node.inputs[1]))  # type: ignore[arg-type]
        if len(node.inputs) > 2 and node.inputs[2]:
            hi = float(self.const(node.inputs[2]))  # type: ignore[arg-type]
        self._eltwise(node, "clip", max(float(lo), -FLT_MAX), min(float(hi), FLT_MAX))

    def _Sqrt(self, node: NodeView) -> None:
        self._eltwise(node, "sqrt")

    def _Abs(self, node: NodeView) -> None:
        self._eltwise(node, "abs")

    def _Pow(self, node: NodeView) -> None:
        e = float(np.asarray(self.const(node.inputs[1])).reshape(-1)[0])
        if e in (2.0, 0.5):
            self._eltwise(node, "square" if e == 2.0 else "sqrt")
        else:
            self._eltwise(node, "pow", 1.0, e)

    def _Erf(self, node: NodeView) -> None:
        self.emit("erf", [node.inputs[0]], node.outputs[0], node)

    def _binary(self, node: NodeView, alg: str) -> None:
        a, b = node.inputs[0], node.inputs[1]
        y = node.outputs[0]
        out = self.shape(y)
        ca, cb = self.const(a), self.const(b)
        # x op scalar constant: a linear eltwise (fuses as a post-op, folds into weights).
        for x, c, x_first in ((a, cb, True), (b, ca, False)):
            if c is not None and c.size == 1 and self.shape(x) == out:
                v = float(c.reshape(()))
                lin = {
                    ("add", True): (1.0, v),
                    ("add", False): (1.0, v),
                    ("mul", True): (v, 0.0),
                    ("mul", False): (v, 0.0),
                    ("sub", True): (1.0, -v),
                    ("sub", False): (-1.0, v),
                }.get((alg, x_first))
                inverse = reciprocal(c) if alg == "div" and x_first else None
                if inverse is not None:
                    lin = (float(inverse.reshape(())), 0.0)
                if lin is not None:
                    self.emit("eltwise", [x], y, node, alg="linear", alpha=lin[0], beta=lin[1])
                    return
        negate = False
        if self.shape(a) != out:
            a, b = b, a
            negate = alg == "sub"
        rank = len(out)
        if self.const(b) is not None:
            b = self.new_const(b, self.const(b))  # type: ignore[arg-type]
        k = self.emit("binary", [a, self.as_rank(b, rank, node)], y, node, alg=alg)
        if negate:
            k.post_ops.append({"kind": "eltwise", "alg": "linear", "alpha": -1.0, "beta": 0.0})

    def _Add(self, node: NodeView) -> None:
        self._binary(node, "add")

    def _Sum(self, node: NodeView) -> None:  # two inputs: the support check made sure
        self._binary(node, "add")

    def _Sub(self, node: NodeView) -> None:
        self._binary(node, "sub")

    def _Mul(self, node: NodeView) -> None:
        self._binary(node, "mul")

    def _Div(self, node: NodeView) -> None:
        self._binary(node, "div")

    def _pool(
        self, node: NodeView, alg: str, kernel: list[int] | None = None, y: str | None = None
    ) -> None:
        a = node.attrs
        x, y = node.inputs[0], y or node.outputs[0]
        xs, ys = self.shape(x)[2:], self.shape(y)[2:]
        nd = len(xs)
        k = kernel or list(a["kernel_shape"])
        strides = list(a.get("strides", [1] * nd))
        dil = list(a.get("dilations", [1] * nd))
        pl, pr = self._pads(a, xs, ys, k, strides, dil)
        pr = [
            max(pr[i], (ys[i] - 1) * strides[i] + (k[i] - 1) * dil[i] + 1 - xs[i] - pl[i])
            for i in range(nd)
        ]
        self.emit(
            "pool",
            [x],
            y,
            node,
            alg=alg,
            kernel=k,
            strides=strides,
            dilations=[d - 1 for d in dil],
            pads_begin=pl,
            pads_end=pr,
        )

    def _MaxPool(self, node: NodeView) -> None:
        self._pool(node, "max")

    def _AveragePool(self, node: NodeView) -> None:
        include = node.attrs.get("count_include_pad", 0)
        self._pool(node, "avg_include" if include else "avg_exclude")

    def _GlobalAveragePool(self, node: NodeView) -> None:
        self._pool(node, "avg_exclude", list(self.shape(node.inputs[0])[2:]))

    def _GlobalMaxPool(self, node: NodeView) -> None:
        self._pool(node, "max", list(self.shape(node.inputs[0])[2:]))

    def _reduce(self, node: NodeView, alg: str) -> None:
        """A Reduce over adjacent axes (annotate checked): over every spatial axis a global
        pooling (it reads a blocked source as it is), else a reduce kernel; without keepdims,
        a view of its result. Over axes of size 1 only, a view."""
        x, y = node.inputs[0], node.outputs[0]
        shape = self.shape(x)
        axes = reduced_axes(node)
        assert not isinstance(axes, str)  # annotate refused it
        if all(shape[a] == 1 for a in axes):
            self.emit("view", [x], y, node)
            return
        kept = tuple(1 if i in axes else d for i, d in enumerate(shape))
        out = y
        if not node.attrs.get("keepdims", 1):
            out = f"{y}:kept"
            self.shapes[out] = kept
        if alg != "sum" and 3 <= len(shape) <= 5 and axes == list(range(2, len(shape))):
            self._pool(node, "max" if alg == "max" else "avg_exclude", list(shape[2:]), out)
        else:
            self.emit("reduce", [x], out, node, alg=alg)
        if out != y:
            self.emit("view", [out], y, node)

    def _ReduceMean(self, node: NodeView) -> None:
        self._reduce(node, "mean")

    def _ReduceMax(self, node: NodeView) -> None:
        self._reduce(node, "max")

    def _ReduceSum(self, node: NodeView) -> None:
        self._reduce(node, "sum")

    def _LRN(self, node: NodeView) -> None:
        a = node.attrs
        self.emit(
            "lrn",
            [node.inputs[0]],
            node.outputs[0],
            node,
            size=int(a["size"]),
            alpha=float(a.get("alpha", 1e-4)),
            beta=float(a.get("beta", 0.75)),
            bias=float(a.get("bias", 1.0)),
        )

    def _Resize(self, node: NodeView) -> None:
        alg = node.attrs.get("mode", "nearest")  # the check accepts nearest and linear only
        self.emit("resample", [node.inputs[0]], node.outputs[0], node, alg=alg)

    def _Softmax(self, node: NodeView) -> None:
        x, y = node.inputs[0], node.outputs[0]
        shape = self.shape(x)
        axis = int(node.attrs.get("axis", -1 if self.opset >= 13 else 1)) % len(shape)
        if self.opset >= 13 or axis == len(shape) - 1:
            self.emit("softmax", [x], y, node, axis=axis)
            return
        flat = (int(np.prod(shape[:axis])), int(np.prod(shape[axis:])))
        self._fresh += 1
        x2, y2 = f"{x}:2d{self._fresh}", f"{y}:2d{self._fresh}"
        self.shapes[x2] = self.shapes[y2] = flat
        self.emit("view", [x], x2, node)
        self.emit("softmax", [x2], y2, node, axis=1)
        self.emit("view", [y2], y, node)

    def _LayerNormalization(self, node: NodeView) -> None:
        bias = node.inputs[2] if len(node.inputs) > 2 and node.inputs[2] else None
        eps = float(node.attrs.get("epsilon", 1e-5))
        self._layernorm(node.inputs[0], node.outputs[0], node.inputs[1], bias, eps, node)

    def _layernorm(
        self, x: str, y: str, scale: str | None, shift: str | None, eps: float, node: NodeView
    ) -> None:
        """y = (x - mean) / sqrt(var + eps) * scale + shift over the last axis; the constant
        scale and shift (ones and zeros when absent) as vectors along it."""
        c = self.shape(x)[-1]
        vectors = [
            self.new_const(f"{y}:{what}", np.broadcast_to(np.reshape(self.const(v), -1), c))
            if v
            else self.new_const(f"{y}:{what}", np.full(c, fill))
            for v, what, fill in ((scale, "scale", 1.0), (shift, "shift", 0.0))
        ]
        self.emit("layernorm", [x, *vectors], y, node, epsilon=eps)

    def _Concat(self, node: NodeView) -> None:
        y = node.outputs[0]
        axis = int(node.attrs["axis"]) % len(self.shape(y))
        ins = []
        for name in node.inputs:
            c = self.const(name)
            ins.append(self.new_const(name, c) if c is not None else name)
        self.emit("concat", ins, y, node, axis=axis)

    def _Transpose(self, node: NodeView) -> None:
        x, y = node.inputs[0], node.outputs[0]
        rank = len(self.shape(x))
        perm = [int(p) for p in node.attrs.get("perm", range(rank - 1, -1, -1))]
        c = self.const(x)
        if c is not None:  # a transposed constant is a constant
            self.consts[y] = np.ascontiguousarray(c.transpose(perm))
            return
        self.emit("transpose" if self.dtype(x) == "float32" else "permute", [x], y, node, perm=perm)

    def _Slice(self, node: NodeView) -> None:
        found = slice_window(node)
        assert not isinstance(found, str)  # the check refused the node otherwise
        self._sliced(node.inputs[0], node.outputs[0], *found, node)

    def _Split(self, node: NodeView) -> None:
        """Each output is a window of the input."""
        x = node.inputs[0]
        found = split_offsets(node)
        assert not isinstance(found, str)  # the check refused the node otherwise
        axis, starts = found
        rank = len(self.shape(x))
        for y, start in zip(node.outputs, starts, strict=True):
            offsets = [start if a == axis else 0 for a in range(rank)]
            self._sliced(x, y, offsets, [1] * rank, node)

    def _sliced(self, x: str, y: str, offsets: list[int], steps: list[int], node: NodeView) -> None:
        """y[k...] = x[offsets + k * steps...]: a slice kernel, or a constant."""
        c = self.const(x)
        if c is not None:  # a window of a constant is a constant
            window = tuple(
                slice(o, o + (d - 1) * s + 1, s)
                for o, d, s in zip(offsets, self.shape(y), steps, strict=True)
            )
            self.consts[y] = np.ascontiguousarray(c[window])
            return
        self.emit("slice", [x], y, node, offsets=offsets, steps=steps)

    def _Pad(self, node: NodeView) -> None:
        """A Concat of constant blocks per padded axis (zero padding in front of a convolution
        becomes its own padding: fusion.Fuser)."""
        x, y = node.inputs[0], node.outputs[0]
        found = pad_amounts(node)
        assert not isinstance(found, str)  # the check refused the node otherwise
        begin, end, value = found
        c = self.const(x)
        if c is not None:  # a padded constant is a constant
            self.consts[y] = np.pad(c, list(zip(begin, end, strict=True)), constant_values=value)
            return
        axes = [a for a in range(len(begin)) if begin[a] or end[a]]
        if not axes:
            self.emit("view", [x], y, node)
            return
        shape = list(self.shape(x))
        for a in axes:
            parts: list[str | None] = []
            for n in (begin[a], 0, end[a]):
                block = [*shape[:a], n, *shape[a + 1 :]]
                parts.append(self.new_const(f"{y}:pad", np.full(block, value)) if n else None)
            parts[1] = x
            shape[a] += begin[a] + end[a]
            self._fresh += 1
            x = y if a == axes[-1] else f"{y}:pad{self._fresh}"
            self.shapes[x] = tuple(shape)
            self.emit("concat", [p for p in parts if p], x, node, axis=a)

    def _view(self, node: NodeView) -> None:
        x, y = node.inputs[0], node.outputs[0]
        c = self.const(x)
        if c is not None:  # a reshaped constant is a constant
            self.consts[y] = np.ascontiguousarray(c.reshape(self.shape(y)))
            return
        self.emit("view" if self.dtype(x) == "float32" else "reshape", [x], y, node)

    _Reshape = _Flatten = _Squeeze = _Unsqueeze = _Identity = _Dropout = _view

    # -- host steps on integer tensors (byoc_dnnl.host) ----------------------------------------

    def _Expand(self, node: NodeView) -> None:
        self.emit("expand", [node.inputs[0]], node.outputs[0], node)

    def _Cast(self, node: NodeView) -> None:
        self.emit("cast", [node.inputs[0]], node.outputs[0], node)

    def _DequantizeLinear(self, node: NodeView) -> None:
        """Of a constant (weights, a bias, a quantized embedding table's rows folded): a
        float32 constant, as onnxruntime computes it; of a QuantizeLinear's integers, a binary
        kernel, ``(q - zero point) * scale``; else a host step after the Gather of u8 or i8
        rows."""
        x, y = node.inputs[0], node.outputs[0]
        scale = self.const(node.inputs[1])
        assert scale is not None  # the check asked for constant scales and zero points
        if x in self.partition.inputs:  # integers made in another partition
            raise NodesRefused({node.name: "the integers it reads are made elsewhere"})
        if x in self.static:
            s, zero, _ = self.static[x]
            rank = len(self.shape(x))
            if zero == 0:
                self.emit("binary", [x, self._scalar(y, s, rank)], y, node, alg="mul")
                return
            k = self.emit("binary", [x, self._scalar(y, zero, rank)], y, node, alg="sub")
            k.post_ops = [{"kind": "eltwise", "alg": "linear", "alpha": s, "beta": 0.0}]
            return
        zp = node.inputs[2] if len(node.inputs) > 2 and node.inputs[2] else f"{y}:zero"
        if self.const(zp) is None:  # absent: 0 of the input's type
            self.consts[zp] = np.zeros(scale.shape, self.dtype(x))
        q = self.const(x)
        if q is None:
            self.emit("dequantize", [x, node.inputs[1], zp], y, node)
            return
        zero = self.const(zp)
        assert zero is not None
        axis = int(node.attrs.get("axis", 1))
        self.consts[y] = np.ascontiguousarray(dequantized(q, scale, zero, axis))

    def _QuantizeLinear(self, node: NodeView) -> None:
        """A binary kernel: ``x / scale``, rounded half to even, plus the zero point, clipped
        to the type's range, written as u8 or s8 (``dst``); the fusion pass makes it the post-ops
        of the kernel before it. Its integers stay in the partition: only DequantizeLinears and
        int8 convolutions read them."""
        x, y = node.inputs[0], node.outputs[0]
        if y in self.partition.outputs:
            raise NodesRefused({node.name: "a DequantizeLinear reading it runs elsewhere"})
        params = qparams(node)
        assert params is not None  # the check asked for one constant scale and zero point
        self.static[y] = params
        s, zero, dtype = params
        lo, hi = INT_RANGES[dtype]
        k = self.emit("binary", [x, self._scalar(y, s, len(self.shape(x)))], y, node, alg="div")
        k.attrs["dst"] = dtype
        k.post_ops = [
            {"kind": "eltwise", "alg": "round", "alpha": 0.0, "beta": 0.0},
            {"kind": "eltwise", "alg": "linear", "alpha": 1.0, "beta": float(zero)},
            {"kind": "eltwise", "alg": "clip", "alpha": float(lo), "beta": float(hi)},
        ]

    def _scalar(self, base: str, value: float, rank: int) -> str:
        """A float32 constant of one value, of shape (1, ..., 1)."""
        return self.new_const(base, np.full((1,) * rank, value, np.float32))

    def _ArgMax(self, node: NodeView) -> None:
        """A host step after the kernels (byoc_dnnl.host); of a value the partition computes."""
        x, y = node.inputs[0], node.outputs[0]
        if x in self.partition.inputs or self.const(x) is not None:
            raise NodesRefused({node.name: "no kernel of its partition computes its input"})
        rank = len(self.shape(x))
        attrs = {
            "axis": int(node.attrs.get("axis", 0)) % rank,
            "keepdims": int(node.attrs.get("keepdims", 1) != 0),
            "last": int(node.attrs.get("select_last_index", 0) != 0),
        }
        self.emit(node.op_type.lower(), [x], y, node, **attrs)

    _ArgMin = _ArgMax

    def _Gather(self, node: NodeView) -> None:
        rank = len(self.shape(node.inputs[0]))
        axis = int(node.attrs.get("axis", 0)) % rank
        self.emit("gather", [node.inputs[0], node.inputs[1]], node.outputs[0], node, axis=axis)
