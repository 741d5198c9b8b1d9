"""A small Llama-style decoder, built with ``onnx.helper`` and seeded random weights (no torch),
spelled as the PyTorch exporters write a Hugging Face Llama, for the zoo and bench/decode.py.

Hidden 256, 4 attention heads of 64, 2 key/value heads (grouped-query attention), SwiGLU MLP of
704, 2 layers, vocabulary 8192, opset 17. Per layer, as an export writes it:

* RMSNorm: ``Pow(x, 2) -> ReduceMean(-1) -> Add eps -> Sqrt -> Reciprocal -> Mul x -> Mul
  weight`` (PyTorch's ``x * torch.rsqrt(var + eps)``);
* q, k, v projections (MatMul), ``Reshape`` to heads and ``Transpose`` (shapes from ``Shape``,
  ``Gather``, ``Unsqueeze`` and ``Concat``, as the TorchScript exporter writes them);
* rotary embeddings: cos and sin tables gathered by the position ids (``Range(past, past +
  seq)``), and ``x * cos + rotate_half(x) * sin``, where ``rotate_half`` is ``Slice`` of each
  half, ``Neg`` of the second and ``Concat([-x2, x1])``;
* the KV cache: ``present = Concat(past, new)`` along the sequence (the decode step);
* grouped-query attention: ``repeat_kv`` is ``Unsqueeze -> Expand -> Reshape`` of K and V;
* scaled dot-product attention with a causal mask (``Where(k_pos > q_pos, min, 0)`` from
  ``Range``s over the lengths), ``Softmax``, output projection, residual ``Add``;
* SwiGLU: ``down(silu(gate(x)) * up(x))``, SiLU as ``x * Sigmoid(x)``.

Two variants, with symbolic dims as the exporters write them (optimum's names):

* ``prefill``: ``input_ids [batch_size, sequence_length]`` -> ``logits`` and each layer's
  ``present.<l>.key`` / ``present.<l>.value`` ``[batch_size, 2, sequence_length, 64]``;
* ``decode``: the KV-cache step, also ``past_key_values.<l>.key`` / ``.value`` ``[batch_size,
  2, past_sequence_length, 64]`` in; ``present.<l>.*`` out ``[batch_size, 2,
  past_sequence_length + sequence_length, 64]``.

``SHAPES`` fixes them for the zoo: prefill of 128 tokens; one token after 127 in the cache.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

SEQ = 128  # the zoo's prefill length
PAST = 127  # the zoo's decode step: past length (plus one token: 128 in the cache after it)


@dataclass(frozen=True)
class Dims:
    hidden: int = 256
    heads: int = 4
    kv_heads: int = 2
    layers: int = 2
    ffn: int = 704
    vocab: int = 8192
    max_positions: int = 1024
    eps: float = 1e-6
    theta: float = 10000.0

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads


def shapes(variant: str, dims: Dims = Dims(), seq: int = SEQ, past: int = PAST) -> dict:
    """Fixed input shapes: prefill of ``seq`` tokens; a decode step of one after ``past``."""
    if variant == "prefill":
        return {"input_ids": [1, seq]}
    cache = [1, dims.kv_heads, past, dims.head_dim]
    found: dict[str, list[int]] = {"input_ids": [1, 1]}
    for layer in range(dims.layers):
        found |= {f"past_key_values.{layer}.key": cache, f"past_key_values.{layer}.value": cache}
    return found


def llama(variant: str, dims: Dims = Dims(), seed: int = 0) -> Any:
    """The ``prefill`` or ``decode`` model (an onnx ModelProto), weights from ``seed``."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    if variant not in ("prefill", "decode"):
        raise ValueError(f"variant must be 'prefill' or 'decode', got {variant!r}")
    rng = np.random.default_rng(seed)
    d, hd = dims, dims.head_dim
    nodes: list[Any] = []
    inits: dict[str, np.ndarray] = {}
    count = [0]

    def const(name: str, value: Any, dtype: Any = np.float32) -> str:
        inits[name] = np.asarray(value, dtype)
        return name

    def n(op: str, inputs: list[str], name: str | None = None, **attrs: Any) -> str:
        count[0] += 1
        out = name or f"/{op.lower()}_{count[0]}"
        nodes.append(helper.make_node(op, inputs, [out], name=f"{op}_{count[0]}", **attrs))
        return out

    def weight(name: str, rows: int, cols: int) -> str:  # a Linear as exported: x @ W^T, folded
        return const(name, rng.standard_normal((rows, cols)) / np.sqrt(rows))

    def norm(x: str, name: str) -> str:
        w = const(f"{name}.weight", 1 + 0.1 * rng.standard_normal(d.hidden))
        var = n("ReduceMean", [n("Pow", [x, const(f"{name}.two", 2.0)])], axes=[-1], keepdims=1)
        inv = n("Reciprocal", [n("Sqrt", [n("Add", [var, const(f"{name}.eps", d.eps)])])])
        return n("Mul", [w, n("Mul", [x, inv])])

    def scalar(shape_of: str, axis: int) -> str:  # a dim of a value, as a 1-D int64
        return n("Unsqueeze", [n("Gather", [n("Shape", [shape_of]), i64(axis)]), i64([0])])

    def i64(value: Any) -> str:
        key = f"const_{np.asarray(value).tolist()}".replace(" ", "")
        return const(key, value, np.int64)

    def heads(x: str, count_: int, batch: str, seq: str) -> str:  # [b, s, h*hd] -> [b, h, s, hd]
        shape = n("Concat", [batch, seq, i64([count_]), i64([hd])], axis=0)
        return n("Transpose", [n("Reshape", [x, shape])], perm=[0, 2, 1, 3])

    def rotary(x: str, cos: str, sin: str) -> str:
        half = hd // 2
        x1 = n("Slice", [x, i64([0]), i64([half]), i64([-1])])
        x2 = n("Slice", [x, i64([half]), i64([np.iinfo(np.int64).max]), i64([-1])])
        rotated = n("Concat", [n("Neg", [x2]), x1], axis=-1)
        return n("Add", [n("Mul", [x, cos]), n("Mul", [rotated, sin])])

    def repeat_kv(x: str) -> str:  # [b, kv, T, hd] -> [b, heads, T, hd]
        rep = d.heads // d.kv_heads
        b, kv, t, h = (scalar(x, a) for a in range(4))
        expand = n("Concat", [b, kv, i64([rep]), t, h], axis=0)
        expanded = n("Expand", [n("Unsqueeze", [x, i64([2])]), expand])
        flat = n("Concat", [b, n("Mul", [kv, i64([rep])]), t, h], axis=0)
        return n("Reshape", [expanded, flat])

    ids = "input_ids"
    batch, seq = scalar(ids, 0), scalar(ids, 1)
    seq0 = n("Gather", [n("Shape", [ids]), i64(1)])
    if variant == "decode":
        past0 = n("Gather", [n("Shape", ["past_key_values.0.key"]), i64(2)])
    else:
        past0 = i64(0)
    total0 = n("Add", [past0, seq0])
    positions = n("Unsqueeze", [n("Range", [past0, total0, i64(1)]), i64([0])])  # [1, s]
    inv_freq = 1.0 / d.theta ** (np.arange(0, hd, 2) / hd)
    freqs = np.outer(np.arange(d.max_positions), inv_freq)
    table = np.concatenate([freqs, freqs], axis=-1)
    cos_t, sin_t = const("cos_cached", np.cos(table)), const("sin_cached", np.sin(table))
    cos = n("Unsqueeze", [n("Gather", [cos_t, positions]), i64([1])])  # [1, 1, s, hd]
    sin = n("Unsqueeze", [n("Gather", [sin_t, positions]), i64([1])])
    # the causal mask: key position > query position -> float32's min, else 0
    keys = n("Unsqueeze", [n("Range", [i64(0), total0, i64(1)]), i64([0])])  # [1, T]
    queries = n("Unsqueeze", [n("Range", [past0, total0, i64(1)]), i64([1])])  # [s, 1]
    future = n("Greater", [keys, queries])
    lowest = const("mask_min", np.finfo(np.float32).min)
    mask = n("Where", [future, lowest, const("mask_zero", 0.0)])
    mask = n("Unsqueeze", [mask, i64([0, 1])])  # [1, 1, s, T]

    embed = const("model.embed_tokens.weight", rng.standard_normal((d.vocab, d.hidden)))
    h = n("Gather", [embed, ids])
    outputs = []
    for layer in range(d.layers):
        p = f"model.layers.{layer}"
        x = norm(h, f"{p}.input_layernorm")
        q = n("MatMul", [x, weight(f"{p}.self_attn.q_proj.weight", d.hidden, d.hidden)])
        k = n("MatMul", [x, weight(f"{p}.self_attn.k_proj.weight", d.hidden, d.kv_heads * hd)])
        v = n("MatMul", [x, weight(f"{p}.self_attn.v_proj.weight", d.hidden, d.kv_heads * hd)])
        q = rotary(heads(q, d.heads, batch, seq), cos, sin)
        k = rotary(heads(k, d.kv_heads, batch, seq), cos, sin)
        v = heads(v, d.kv_heads, batch, seq)
        present_k, present_v = f"present.{layer}.key", f"present.{layer}.value"
        if variant == "decode":
            past_k, past_v = f"past_key_values.{layer}.key", f"past_key_values.{layer}.value"
            k = n("Concat", [past_k, k], present_k, axis=2)
            v = n("Concat", [past_v, v], present_v, axis=2)
        else:
            k = n("Identity", [k], present_k)
            v = n("Identity", [v], present_v)
        outputs += [present_k, present_v]
        kt = n("Transpose", [repeat_kv(k)], perm=[0, 1, 3, 2])
        scores = n("Mul", [n("MatMul", [q, kt]), const(f"{p}.scaling", hd**-0.5)])
        probs = n("Softmax", [n("Add", [scores, mask])], axis=-1)
        att = n("Transpose", [n("MatMul", [probs, repeat_kv(v)])], perm=[0, 2, 1, 3])
        att = n("Reshape", [att, n("Concat", [batch, seq, i64([d.hidden])], axis=0)])
        o = n("MatMul", [att, weight(f"{p}.self_attn.o_proj.weight", d.hidden, d.hidden)])
        h = n("Add", [h, o])
        x = norm(h, f"{p}.post_attention_layernorm")
        gate = n("MatMul", [x, weight(f"{p}.mlp.gate_proj.weight", d.hidden, d.ffn)])
        up = n("MatMul", [x, weight(f"{p}.mlp.up_proj.weight", d.hidden, d.ffn)])
        act = n("Mul", [n("Mul", [gate, n("Sigmoid", [gate])]), up])
        h = n("Add", [h, n("MatMul", [act, weight(f"{p}.mlp.down_proj.weight", d.ffn, d.hidden)])])
    x = norm(h, "model.norm")
    n("MatMul", [x, weight("lm_head.weight", d.hidden, d.vocab)], "logits")

    f32, i64_t = TensorProto.FLOAT, TensorProto.INT64
    b, s = "batch_size", "sequence_length"
    inputs = [helper.make_tensor_value_info(ids, i64_t, [b, s])]
    total: str = s
    if variant == "decode":
        total = "past_sequence_length + sequence_length"
        cache: list[str | int] = [b, d.kv_heads, "past_sequence_length", hd]
        for layer in range(d.layers):
            for kind in ("key", "value"):
                name = f"past_key_values.{layer}.{kind}"
                inputs.append(helper.make_tensor_value_info(name, f32, cache))
    outs = [helper.make_tensor_value_info("logits", f32, [b, s, d.vocab])]
    present: list[str | int] = [b, d.kv_heads, total, hd]
    outs += [helper.make_tensor_value_info(o, f32, present) for o in outputs]
    graph = helper.make_graph(
        nodes,
        f"llama-{variant}",
        inputs,
        outs,
        initializer=[numpy_helper.from_array(v, k) for k, v in inits.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.checker.check_model(model, full_check=True)
    return model
