"""Fusion: rewrite channel shuffles and zero padding, fold per-channel affine ops into kernel
weights and fuse followers as post-ops."""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np

from byoc_dnnl.kinds import FUSES
from byoc_dnnl.lowering import MAX_POST_OPS, Kernel, Lowering, readers, reciprocal
from byoc_dnnl.lut import quantize_first, tables


class Fuser:
    """Rewrites channel shuffles and zero padding, folds per-channel affine ops into weights and
    fuses followers as post-ops.

    Rules: first, views that keep their input's shape are dropped (their readers read the
    input). Then a view -> transpose -> view that is a channel shuffle becomes one shuffle
    kernel, and a Concat of zero blocks along a spatial axis in front of a convolution becomes
    its padding (each only when the values it drops have one reader and are not partition
    outputs). Then a follower is fused only when it reads the kernel's output, that output has
    no other reader and is not a partition output. BatchNormalization and per-channel
    Mul/Div/Add/Sub by a constant fold into conv/deconv/matmul weights and bias while the kernel
    has no post-ops; then eltwise ops, per-channel or full-size binary ops (constant or
    computed operands) and (for convolutions) a residual Add become post-ops. The fused kernel
    runs where its last member ran. Last, a product of two computed tensors reads and writes
    through the transposes next to it (attention's heads).
    """

    def __init__(self, low: Lowering, outputs: set[str]) -> None:
        self.low = low
        self.outputs = outputs

    def run(self, kernels: list[Kernel]) -> list[Kernel]:
        kernels = quantize_first(self.low, self._no_op_views(kernels), self.outputs)
        kernels = self._live(tables(self.low, self._same_binaries(kernels), self.outputs))
        kernels = self._quantized_eltwise(kernels)
        kernels = self._prescaled_products(kernels)
        by_out = {k.output: k for k in kernels}  # stays right: a shuffle reads what its view read
        reads = Counter(n for k in kernels for n in k.reads())
        alive = self._zero_pads(self._shuffles(kernels, by_out, reads), by_out, reads)
        i = 0
        while i < len(alive):
            k = alive[i]
            if k.kind in FUSES and len(k.post_ops) < MAX_POST_OPS:
                followers = [j for j, c in enumerate(alive) if k.output in c.reads()]
                j = followers[0] if len(followers) == 1 else -1
                if k.output not in self.outputs and j > i and self._fuse(k, alive[j]):
                    k.attrs = {a: v for a, v in k.attrs.items() if a != "dst"}
                    if "dst" in alive[j].attrs:  # writes the follower's u8 or s8
                        k.attrs["dst"] = alive[j].attrs["dst"]
                    k.output = alive[j].output
                    k.post_ops = self._fake_quant(k.post_ops)
                    k.members += alive[j].members
                    del alive[j]
                    alive.insert(j - 1, alive.pop(i))  # run where its last member ran
                    continue
            i += 1
        return self._transposed_products(alive)

    def _prescaled_products(self, kernels: list[Kernel]) -> list[Kernel]:
        """A product of two computed tensors whose operands are scaled first (``(q * s) @ (k *
        s)``, as the TorchScript exporter writes scaled_dot_product_attention) reads them
        unscaled and scales its result, a post-op: no pass over each operand, and the
        transposes in front of it can be read through (``_transposed_products``)."""
        low, by_out, reading = self.low, {k.output: k for k in kernels}, readers(kernels)
        gone: set[int] = set()
        for u in kernels:
            if (
                u.kind != "matmul"
                or u.post_ops
                or any(low.const(n) is not None for n in u.inputs[:2])
            ):
                continue
            scale = 1.0
            for i in (0, 1):
                s = by_out.get(u.inputs[i] or "")
                if (
                    s is None
                    or s.kind != "eltwise"
                    or s.attrs["alg"] != "linear"
                    or s.attrs["beta"] != 0
                    or s.post_ops
                    or s.output in self.outputs
                    or reading[s.output] != [u]
                ):
                    continue
                scale *= float(s.attrs["alpha"])
                u.inputs[i] = s.inputs[0]
                if id(s) not in gone:  # q @ q: one kernel scales both operands
                    u.members = s.members + u.members
                gone.add(id(s))
            if scale != 1.0:
                u.post_ops = [{"kind": "eltwise", "alg": "linear", "alpha": scale, "beta": 0.0}]
        return [k for k in kernels if id(k) not in gone]

    def _transposed_products(self, kernels: list[Kernel]) -> list[Kernel]:
        """A product of two computed tensors (attention's scores and context) reads an operand
        through the transpose in front of it and writes through the transpose after it: a
        strided view (``perm_a``, ``perm_b``, ``perm_out``) instead of a copy each. Products by
        constant weights keep their copies: their fast path (a 1x1 convolution) reads dense rows.
        """
        low = self.low

        def product(k: Kernel) -> bool:
            return k.kind == "matmul" and all(low.const(n) is None for n in k.inputs[:2])

        reading = readers(kernels)
        gone: set[int] = set()
        for t in kernels:
            users = reading.get(t.output, [])
            if t.kind != "transpose" or t.output in self.outputs or not users:
                continue
            if not all(
                product(u)
                and t.output not in u.inputs[2:] + [p.get("input") for p in u.post_ops]
                and not any(
                    u.inputs[i] == t.output and f"perm_{'ab'[i]}" in u.attrs for i in (0, 1)
                )
                for u in users
            ):
                continue
            for u in users:
                for i in (0, 1):
                    if u.inputs[i] == t.output:
                        u.inputs[i] = t.inputs[0]
                        u.attrs = {**u.attrs, f"perm_{'ab'[i]}": t.attrs["perm"]}
            users[0].members = t.members + users[0].members
            src = t.inputs[0] or ""
            reading[src] = [r for r in reading[src] if r is not t] + users
            gone.add(id(t))
        for k in kernels:
            only = reading.get(k.output, [])
            t = only[0] if len(only) == 1 else None
            if (
                t is None
                or t.kind != "transpose"
                or id(t) in gone
                or not product(k)
                or k.output in self.outputs
            ):
                continue
            k.attrs = {**k.attrs, "perm_out": t.attrs["perm"]}
            k.output = t.output
            k.members += t.members
            gone.add(id(t))
        return [k for k in kernels if id(k) not in gone]

    def _same_binaries(self, kernels: list[Kernel]) -> list[Kernel]:
        """Binary kernels that compute the same thing (a QDQ model dequantizes a tensor once per
        reader) become one: their readers read the first."""
        first: dict[str, Kernel] = {}
        renamed: dict[str, str] = {}
        kept = []
        for k in kernels:
            k.rename(renamed)
            if k.kind == "binary" and k.output not in self.outputs:
                key = repr(([self._key(n) for n in k.inputs], k.attrs, k.post_ops))
                if key in first:
                    renamed[k.output] = first[key].output
                    first[key].members += k.members
                    continue
                first[key] = k
            kept.append(k)
        return kept

    def _quantized_eltwise(self, kernels: list[Kernel]) -> list[Kernel]:
        """An eltwise kernel whose one reader is a QuantizeLinear becomes a binary kernel
        (``x + 0``, the eltwise as its first post-op), which takes the QuantizeLinear and what
        follows it as post-ops."""
        reading = readers(kernels)
        for k in kernels:
            only = reading.get(k.output, [])
            if k.kind != "eltwise" or len(only) != 1 or "dst" not in only[0].attrs:
                continue
            x = k.inputs[0]
            assert x is not None
            rank = len(self.low.shape(x))
            zero = self.low.new_const(f"{k.output}:zero", np.zeros((1,) * rank, np.float32))
            alg, alpha, beta = k.attrs["alg"], k.attrs["alpha"], k.attrs["beta"]
            k.kind, k.inputs, k.attrs = "binary", [x, zero], {"alg": "add"}
            k.post_ops = [{"kind": "eltwise", "alg": alg, "alpha": alpha, "beta": beta}]
        return kernels

    def _fake_quant(self, posts: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """A QuantizeLinear's post-ops followed by its DequantizeLinear's, ``+ z, clip(lo, hi),
        - z, * s`` after the rounding, as ``clip(lo - z, hi - z), * s``: the same integers times
        the scale, in two post-ops instead of four."""
        out: list[dict[str, Any]] = []
        for p in posts:
            out.append(p)
            add, clip, sub, mul = ([{}] * 4 + out)[-4:]
            z = self.low.const(sub.get("input"))
            if (
                add.get("alg") == "linear"
                and add["alpha"] == 1.0
                and clip.get("alg") == "clip"
                and sub.get("kind") == "binary"
                and sub["alg"] == "sub"
                and z is not None
                and z.size == 1
                and float(z.reshape(-1)[0]) == add["beta"]
                and mul.get("alg") == "linear"
                and mul.get("kind") == "eltwise"
                and mul["beta"] == 0.0
            ):
                lo, hi = clip["alpha"] - add["beta"], clip["beta"] - add["beta"]
                out[-4:] = [{**clip, "alpha": lo, "beta": hi}, mul]
        return out

    def _key(self, name: str | None) -> object:
        """A kernel input as a key: a constant's value, else its name."""
        c = self.low.const(name)
        return name if c is None else (c.dtype.name, c.shape, c.tobytes())

    def _live(self, kernels: list[Kernel]) -> list[Kernel]:
        """The kernels whose results are read: a DequantizeLinear an int8 convolution reads
        through (it reads the integers) computes nothing anyone reads."""
        live = set(self.outputs)
        kept = []
        for k in reversed(kernels):
            if k.output in live:
                live.update(k.reads())
                kept.append(k)
        return kept[::-1]

    def _no_op_views(self, kernels: list[Kernel]) -> list[Kernel]:
        """A view that keeps its input's shape (Identity, Dropout, a Reshape to the same shape)
        does nothing: its readers read its input instead, so it no longer stands between a
        kernel and the followers it fuses (Paddle exports an Identity after every op)."""
        shape, renamed, by_out, kept = self.low.shape, {}, {}, []
        for k in kernels:
            k.rename(renamed)
            x = k.inputs[0] if k.kind == "view" else None
            if x and k.output not in self.outputs and shape(x) == shape(k.output):
                renamed[k.output] = x
                if x in by_out:
                    by_out[x].members += k.members
                continue
            by_out[k.output] = k
            kept.append(k)
        return kept

    def _shuffles(
        self, kernels: list[Kernel], by_out: dict[str, Kernel], reads: Counter[str]
    ) -> list[Kernel]:
        """A channel shuffle, view (N, C, ...) -> (N, g, C/g, ...), transpose of dims 1 and 2,
        view back to (N, C, ...), becomes one shuffle kernel: one reorder in the source's layout
        instead of a reorder to plain, a transpose and a reorder back."""
        shape = self.low.shape
        gone: set[int] = set()
        for k in kernels:
            t = by_out.get(k.inputs[0] or "") if k.kind == "view" else None
            v = by_out.get(t.inputs[0] or "") if t and t.kind == "transpose" else None
            if v is None or v.kind != "view" or v.inputs[0] is None:
                continue
            x, split = shape(v.inputs[0]), shape(v.output)
            r = len(split)
            if (
                shape(k.output) != x
                or not 2 <= len(x) == r - 1
                or split != (x[0], split[1], x[1] // split[1], *x[2:])
                or t.attrs["perm"] != [0, 2, 1, *range(3, r)]
                or any(reads[m.output] != 1 or m.output in self.outputs for m in (v, t))
            ):
                continue
            k.kind, k.name, k.inputs = "shuffle", "dnnl.shuffle", [v.inputs[0]]
            k.attrs = {"groups": split[1]}
            k.members = v.members + t.members + k.members
            gone |= {id(v), id(t)}
        return [k for k in kernels if id(k) not in gone]

    def _zero_pads(
        self, kernels: list[Kernel], by_out: dict[str, Kernel], reads: Counter[str]
    ) -> list[Kernel]:
        """Zero padding in front of a convolution, a Concat of zero blocks along a spatial axis
        (a Pad, or as exporters write a causal or dilated 1-D conv's padding), becomes the
        convolution's own padding instead of a copy."""
        low = self.low
        gone: set[int] = set()
        for k in kernels:
            while k.kind == "conv":
                cat = by_out.get(k.inputs[0] or "")
                if cat is None or cat.kind != "concat" or cat.attrs["axis"] < 2:
                    break
                ins = [n for n in cat.inputs if n]
                computed = [i for i, n in enumerate(ins) if low.const(n) is None]
                blocks = [low.const(n) for n in ins if low.const(n) is not None]
                if (
                    len(computed) != 1
                    or computed[0] > 1
                    or len(ins) - computed[0] > 2
                    or any(np.any(b != 0) for b in blocks)  # type: ignore[operator]
                    or reads[cat.output] != 1
                    or cat.output in self.outputs
                ):
                    break
                j, axis = computed[0], cat.attrs["axis"]
                before = low.shape(ins[0])[axis] if j == 1 else 0
                after = low.shape(ins[-1])[axis] if j == len(ins) - 2 else 0
                begin, end = list(k.attrs["pads_begin"]), list(k.attrs["pads_end"])
                begin[axis - 2] += before
                end[axis - 2] += after
                k.attrs = {**k.attrs, "pads_begin": begin, "pads_end": end}
                k.inputs[0] = ins[j]
                k.members = list(dict.fromkeys(cat.members + k.members))  # a Pad: 1 per axis
                gone.add(id(cat))
        return [k for k in kernels if id(k) not in gone]

    def _channels(self, k: Kernel) -> tuple[int, int]:
        shape = self.low.shape(k.output)
        axis = len(shape) - 1 if k.kind in ("matmul", "qmatmul") or len(shape) < 2 else 1
        return axis, shape[axis]

    def _fuse(self, k: Kernel, c: Kernel) -> bool:
        low = self.low
        if "dst" in c.attrs and k.kind not in ("binary", "qconv", "qmatmul"):
            return False  # the others write float32 only
        if (
            c.kind == "binary"
            and c.attrs["alg"] in ("add", "mul")
            and c.inputs[1] == k.output != c.inputs[0]
            and low.shape(c.inputs[0]) == low.shape(k.output)
        ):
            c.inputs.reverse()  # x + conv(x), as PyTorch exports a residual: the kernel's first
        weighted = k.kind in ("conv", "deconv", "matmul") and low.const(k.inputs[1]) is not None
        if weighted and not k.post_ops and self._fold(k, c):
            return True
        if c.kind == "eltwise" and not c.post_ops:
            alg, alpha, beta = c.attrs["alg"], c.attrs["alpha"], c.attrs["beta"]
            last = k.post_ops[-1] if k.post_ops else {}
            if alg == last.get("alg") == "linear":  # a * (a0 x + b0) + b: one linear
                last["alpha"], last["beta"] = alpha * last["alpha"], alpha * last["beta"] + beta
            else:
                k.post_ops.append({"kind": "eltwise", "alg": alg, "alpha": alpha, "beta": beta})
            return True
        if c.kind != "binary" or c.inputs[0] != k.output or c.inputs[1] == k.output:
            return False
        other = c.inputs[1]
        assert other is not None
        out, oshape = low.shape(k.output), low.shape(other)
        axis, channels = self._channels(k)
        if oshape == out:
            if (
                k.kind in ("conv", "deconv")
                and c.attrs["alg"] == "add"
                and not any(p["kind"] == "sum" for p in k.post_ops)
            ):
                k.post_ops.append({"kind": "sum", "input": other})
            else:
                k.post_ops.append({"kind": "binary", "alg": c.attrs["alg"], "input": other})
        elif _channel_vector(oshape, axis, channels) and not _flat_batch(k, out):
            k.post_ops.append({"kind": "binary", "alg": c.attrs["alg"], "input": other})
        else:
            return False
        k.post_ops += c.post_ops
        return True

    def _fold(self, k: Kernel, c: Kernel) -> bool:
        """Fold an affine follower into k's weights and bias."""
        low = self.low
        axis, channels = self._channels(k)
        if c.kind == "batchnorm":
            if k.kind == "matmul":
                return False
            mean, var, gamma, beta = (low.const(n) for n in c.inputs[1:])
            scale = gamma / np.sqrt(var + np.float32(c.attrs["epsilon"]))  # type: ignore[operator]
            shift = beta - mean * scale
        elif c.kind == "eltwise" and c.attrs["alg"] == "linear" and not c.post_ops:
            scale = np.full(channels, c.attrs["alpha"], np.float32)
            shift = np.full(channels, c.attrs["beta"], np.float32)
        elif c.kind == "binary" and c.inputs[0] == k.output and not c.post_ops:
            v = low.const(c.inputs[1])
            if v is None or not _channel_vector(v.shape, axis, channels):
                return False
            v = np.broadcast_to(v.reshape(-1), (channels,)).astype(np.float32)
            ones, zeros = np.ones(channels, np.float32), np.zeros(channels, np.float32)
            alg = c.attrs["alg"]
            if alg == "div":
                inverse = reciprocal(v)
                if inverse is None:
                    return False
                v = inverse
            scale = v if alg in ("mul", "div") else ones
            shift = {"add": v, "sub": -v}.get(alg, zeros)
        else:
            return False
        w = low.const(k.inputs[1])
        assert w is not None
        if k.kind == "matmul":
            w = w * scale
        elif w.ndim == len(low.shape(k.output)) + 1:  # grouped: g, OC/g, IC/g, ...
            g = w.shape[0]
            w = w * scale.reshape(g, -1, *([1] * (w.ndim - 2)))
        else:
            w = w * scale.reshape(-1, *([1] * (w.ndim - 1)))
        bias_name = k.inputs[2]
        if k.kind == "matmul":
            shape = (1,) * (len(low.shape(k.output)) - 1) + (channels,)
            bias = low.const(bias_name) if bias_name else np.zeros(shape, np.float32)
            bias = bias * scale + shift
        else:
            bias = low.const(bias_name) if bias_name else np.zeros(channels, np.float32)
            bias = bias * scale + shift
        k.inputs[1] = low.new_const(k.inputs[1] or "w", w)
        k.inputs[2] = low.new_const(bias_name or f"{k.output}:bias", bias)
        return True


def _flat_batch(k: Kernel, out: tuple[int, ...]) -> bool:
    """A binary kernel writing (N > 1, C, 1, ...): oneDNN 3.2's binary primitive applies a
    per-channel binary post-op there wrongly (a Mul then an Add by (1, C, 1, 1) constants over
    a (2, 3, 1, 1) tensor: 0.2 off; an InstanceNormalization of 1x1 images lowers so)."""
    return k.kind == "binary" and len(out) > 2 and out[0] > 1 and all(d == 1 for d in out[2:])


def _channel_vector(shape: tuple[int, ...], axis: int, channels: int) -> bool:
    """Whether a constant of ``shape`` broadcasts along ``axis`` only (size 1 or C there)."""
    return all(d == 1 for i, d in enumerate(shape) if i != axis) and (
        shape[axis] in (1, channels) if len(shape) > axis else False
    )
