"""dnnl: a Llama-style decoder block (RMSNorm, rotary embeddings, grouped-query attention with a
KV cache, SwiGLU) as the PyTorch exporters spell it stays in one partition."""

from __future__ import annotations

from typing import Any

import byoc
import numpy as np
import onnx
import pytest
from byoc.testing import assert_matches_onnxruntime
from byoc.testing.build import make_model, node

from .helpers import DNNL, MODES, rand

HIDDEN, HEADS, KV_HEADS, FFN, VOCAB = 32, 4, 2, 48, 64
HEAD = HIDDEN // HEADS


def llama_block(seq: int, past: int) -> onnx.ModelProto:
    """Token ids [1, seq] (and, when ``past``, each of K and V's cache [1, 2, past, 8]) ->
    embedding -> one Llama layer -> RMSNorm -> logits, and the new cache (``present_k``,
    ``present_v``: the past and this step's keys and values). cos and sin [1, 1, seq, 8] are
    inputs; the causal mask is a constant."""
    i64 = np.int64
    total = past + seq
    mask = np.triu(np.full((seq, total), np.finfo(np.float32).min, np.float32), past + 1)
    consts: dict[str, Any] = {
        "embed": rand(VOCAB, HIDDEN),
        "wq": rand(HIDDEN, HIDDEN) / 6,
        "wk": rand(HIDDEN, KV_HEADS * HEAD) / 6,
        "wv": rand(HIDDEN, KV_HEADS * HEAD) / 6,
        "wo": rand(HIDDEN, HIDDEN) / 6,
        "wg": rand(HIDDEN, FFN) / 6,
        "wu": rand(HIDDEN, FFN) / 6,
        "wd": rand(FFN, HIDDEN) / 7,
        "lm": rand(HIDDEN, VOCAB) / 6,
        "mask": mask.reshape(1, 1, seq, total),
        "two": np.float32(2),
        "eps": np.float32(1e-6),
        "scale": np.float32(HEAD**-0.5),
        "q_heads": np.array([1, seq, HEADS, HEAD], i64),
        "kv_heads": np.array([1, seq, KV_HEADS, HEAD], i64),
        "merged": np.array([1, seq, HIDDEN], i64),
        "grown": np.array([1, KV_HEADS, HEADS // KV_HEADS, total, HEAD], i64),
        "repeated": np.array([1, HEADS, total, HEAD], i64),
        "axis2": np.array([2], i64),
        "lo": np.array([0], i64),
        "mid": np.array([HEAD // 2], i64),
        "hi": np.array([np.iinfo(i64).max], i64),
        "last": np.array([-1], i64),
    }
    nodes: list[onnx.NodeProto] = [node("Gather", ["embed", "ids"], "h0")]

    def rmsnorm(x: str, name: str) -> str:
        consts[f"{name}.w"] = 1 + rand(HIDDEN) / 10
        nodes.extend(
            [
                node("Pow", [x, "two"], f"{name}.sq"),
                node("ReduceMean", [f"{name}.sq"], f"{name}.var", axes=[-1]),
                node("Add", [f"{name}.var", "eps"], f"{name}.ve"),
                node("Sqrt", [f"{name}.ve"], f"{name}.std"),
                node("Reciprocal", [f"{name}.std"], f"{name}.inv"),
                node("Mul", [x, f"{name}.inv"], f"{name}.n"),
                node("Mul", [f"{name}.w", f"{name}.n"], name),
            ]
        )
        return name

    def heads(x: str, shape: str, name: str) -> str:
        nodes.append(node("Reshape", [x, shape], f"{name}.r"))
        nodes.append(node("Transpose", [f"{name}.r"], name, perm=[0, 2, 1, 3]))
        return name

    def rotary(x: str, name: str) -> str:  # x * cos + cat(-x2, x1) * sin
        nodes.extend(
            [
                node("Slice", [x, "lo", "mid", "last"], f"{name}.x1"),
                node("Slice", [x, "mid", "hi", "last"], f"{name}.x2"),
                node("Neg", [f"{name}.x2"], f"{name}.neg"),
                node("Concat", [f"{name}.neg", f"{name}.x1"], f"{name}.rot", axis=-1),
                node("Mul", [x, "cos"], f"{name}.c"),
                node("Mul", [f"{name}.rot", "sin"], f"{name}.s"),
                node("Add", [f"{name}.c", f"{name}.s"], name),
            ]
        )
        return name

    def repeat_kv(x: str, name: str) -> str:  # Unsqueeze, Expand, Reshape
        nodes.extend(
            [
                node("Unsqueeze", [x, "axis2"], f"{name}.u"),
                node("Expand", [f"{name}.u", "grown"], f"{name}.e"),
                node("Reshape", [f"{name}.e", "repeated"], name),
            ]
        )
        return name

    x = rmsnorm("h0", "norm1")
    for w in ("q", "k", "v"):
        nodes.append(node("MatMul", [x, f"w{w}"], f"{w}.proj"))
    q = rotary(heads("q.proj", "q_heads", "q"), "q.rot")
    k = rotary(heads("k.proj", "kv_heads", "k"), "k.rot")
    v = heads("v.proj", "kv_heads", "v")
    inputs: dict = {"ids": (np.int64, [1, seq])}
    inputs |= {t: [1, 1, seq, HEAD] for t in ("cos", "sin")}
    if past:
        inputs |= {p: [1, KV_HEADS, past, HEAD] for p in ("past_k", "past_v")}
        nodes.append(node("Concat", ["past_k", k], "present_k", axis=2))
        nodes.append(node("Concat", ["past_v", v], "present_v", axis=2))
    else:
        nodes.append(node("Identity", [k], "present_k"))
        nodes.append(node("Identity", [v], "present_v"))
    nodes.extend(
        [
            node("Transpose", [repeat_kv("present_k", "kr")], "kt", perm=[0, 1, 3, 2]),
            node("MatMul", [q, "kt"], "scores"),
            node("Mul", ["scores", "scale"], "scaled"),
            node("Add", ["scaled", "mask"], "masked"),
            node("Softmax", ["masked"], "probs", axis=-1),
            node("MatMul", ["probs", repeat_kv("present_v", "vr")], "att"),
            node("Transpose", ["att"], "att.t", perm=[0, 2, 1, 3]),
            node("Reshape", ["att.t", "merged"], "att.m"),
            node("MatMul", ["att.m", "wo"], "o"),
            node("Add", ["h0", "o"], "h1"),
        ]
    )
    x = rmsnorm("h1", "norm2")
    nodes.extend(
        [
            node("MatMul", [x, "wg"], "gate"),
            node("MatMul", [x, "wu"], "up"),
            node("Sigmoid", ["gate"], "sg"),
            node("Mul", ["gate", "sg"], "silu"),
            node("Mul", ["silu", "up"], "act"),
            node("MatMul", ["act", "wd"], "down"),
            node("Add", ["h1", "down"], "h2"),
            node("MatMul", [rmsnorm("h2", "norm3"), "lm"], "logits"),
        ]
    )
    return make_model(nodes, inputs, ["logits", "present_k", "present_v"], consts)


def _inputs(model: onnx.ModelProto, seq: int, past: int) -> dict[str, np.ndarray]:
    """Token ids in the vocabulary, cos and sin of positions past.. past + seq, a cache."""
    rng = np.random.default_rng(1)
    freqs = np.outer(np.arange(past, past + seq), 1e4 ** -(np.arange(0, HEAD, 2) / HEAD))
    angles = np.concatenate([freqs, freqs], axis=-1).reshape(1, 1, seq, HEAD)
    found = {"ids": rng.integers(0, VOCAB, (1, seq)), "cos": np.cos(angles), "sin": np.sin(angles)}
    for p in ("past_k", "past_v") if past else ():
        found[p] = rng.standard_normal((1, KV_HEADS, past, HEAD))
    return {k: v.astype(np.float32) if k != "ids" else v for k, v in found.items()}


@pytest.mark.parametrize(("seq", "past"), [(6, 0), (1, 5)], ids=["prefill", "decode"])
@pytest.mark.parametrize("mode", MODES, ids=["json", "c"])
def test_a_llama_block_is_one_dnnl_partition(seq: int, past: int, mode: dict) -> None:
    """Prefill, and the KV-cache decode step (one token after 5 in the cache): every node
    (Neg of the rotary half-swap, Reciprocal of RMSNorm, Expand of repeat_kv among them) runs
    in one dnnl partition, matching onnxruntime."""
    model = llama_block(seq, past)
    config = {**DNNL, **mode, "compile": {"placement": "static"}}
    report = assert_matches_onnxruntime(model, config, _inputs(model, seq, past))
    plan = byoc.compile(model, config).plan
    assert len(plan.partitions) == 1 and not plan.segments, plan.table()
    assert {d.backend for d in report.plan.decisions.values() if not d.constant} == {"dnnl"}
    composites = {d.composite for d in report.plan.decisions.values()}
    assert {"dnnl.rmsnorm", "dnnl.attention", "dnnl.swish"} <= composites, composites
