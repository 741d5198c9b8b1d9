"""dnnl: the matmul kind: MatMul, Gemm, dense layers, attention."""

from __future__ import annotations

import byoc
import numpy as np
import onnx
import pytest
from byoc.testing import assert_matches_onnxruntime
from byoc.testing.build import make_model, node
from byoc_dnnl import plugin

from .helpers import DNNL, MODES, avx2, claimed, dnnl_impls, dnnl_step, rand, replace_graph


def test_matmul_gemm_softmax_layernorm_transformer_block() -> None:
    """A small attention + GELU MLP block, all float32 static: dnnl claims all the compute."""
    d, f, t = 16, 32, 6
    consts = {
        "wq": rand(d, d),
        "wk": rand(d, d),
        "wv": rand(d, d),
        "bq": rand(d),
        "scale": np.float32(0.25),
        "g": rand(d),
        "beta": rand(d),
        "w1": rand(d, f),
        "b1": rand(f),
        "w2": rand(f, d),
        "b2": rand(d),
        "sqrt2": np.float32(np.sqrt(2.0)),
        "one": np.float32(1.0),
        "half": np.float32(0.5),
    }
    nodes = [
        node("LayerNormalization", ["x", "g", "beta"], "ln", axis=-1, epsilon=1e-5),
        node("MatMul", ["ln", "wq"], "q0"),
        node("Add", ["q0", "bq"], "q"),
        node("MatMul", ["ln", "wk"], "k"),
        node("MatMul", ["ln", "wv"], "v"),
        node("Transpose", ["k"], "kt", perm=[0, 2, 1]),
        node("MatMul", ["q", "kt"], "s0"),
        node("Mul", ["s0", "scale"], "s"),
        node("Softmax", ["s"], "p", axis=-1),
        node("MatMul", ["p", "v"], "att"),
        node("Add", ["att", "x"], "res"),
        node("MatMul", ["res", "w1"], "h0"),
        node("Add", ["h0", "b1"], "h1"),
        node("Div", ["h1", "sqrt2"], "e0"),
        node("Erf", ["e0"], "e1"),
        node("Add", ["e1", "one"], "e2"),
        node("Mul", ["h1", "e2"], "e3"),
        node("Mul", ["e3", "half"], "gelu"),
        node("MatMul", ["gelu", "w2"], "o0"),
        node("Add", ["o0", "b2"], "y"),
    ]
    model = make_model(nodes, {"x": [2, t, d]}, ["y"], consts)
    report = assert_matches_onnxruntime(model, DNNL)
    for op in ("MatMul", "Softmax", "LayerNormalization", "Erf", "Transpose"):
        claimed(report, op)
    assert {"dnnl.dense_bias", "dnnl.gelu"} <= {d.composite for d in report.plan.decisions.values()}
    gemm = make_model(  # with an activation: a lone dense layer is onnxruntime's
        [
            node("Gemm", ["x", "w", "c"], "g", transB=1, alpha=0.5, beta=2.0),
            node("Relu", ["g"], "y"),
        ],
        {"x": [4, 6]},
        ["y"],
        {"w": rand(5, 6), "c": rand(5)},
    )
    claimed(assert_matches_onnxruntime(gemm, DNNL), "Gemm")


def test_attention_without_weights_stays_with_onnxruntime() -> None:
    """Attention's scores and weighted sum multiply two activations: a partition with no other
    MatMul goes back to onnxruntime (a dynamically quantized MiniLM leaves exactly this between
    its MatMulIntegers); one MatMul by a constant weight keeps it on dnnl."""
    shapes = {"q": [1, 2, 8, 4], "k": [1, 2, 4, 8], "v": [1, 2, 8, 4]}
    attention = [
        node("MatMul", ["q", "k"], "s"),
        node("Mul", ["s", "scale"], "t"),
        node("Softmax", ["t"], "p", axis=-1),
        node("MatMul", ["p", "v"], "a"),
    ]
    consts = {"scale": np.float32(0.5), "w": np.ones((4, 3), np.float32) / 4}
    alone = make_model(attention, shapes, ["a"], consts)
    decisions = assert_matches_onnxruntime(alone, DNNL).plan.decisions
    assert {d.backend for d in decisions.values()} == {"onnxruntime"}
    assert any(r.startswith("pruned: no layer") for _, r in decisions["s"].refusals)
    dense = make_model([*attention, node("MatMul", ["a", "w"], "y")], shapes, ["y"], consts)
    decisions = assert_matches_onnxruntime(dense, DNNL).plan.decisions
    assert {d.backend for d in decisions.values()} == {"dnnl"}


def bert_attention(batch: int, seq: int = 8, heads: int = 2, size: int = 4) -> onnx.ModelProto:
    """BERT's self-attention as exporters write it: per-head views of the Q, K and V layers
    (Reshape, Transpose), scores scaled and masked by (1 - m) * -10000 (m: 1 keeps a token),
    softmax, the weighted sum transposed back and the output layer."""
    e = heads * size
    i64 = np.int64
    consts = {f"w{n}": rand(e, e) for n in "qkvo"} | {f"b{n}": rand(e) for n in "qkv"}
    consts |= {
        "heads": np.array([batch, seq, heads, size], i64),
        "back": np.array([batch, seq, e], i64),
    }
    consts |= {"bcast": np.array([batch, 1, 1, seq], i64), "root": np.float32(np.sqrt(size))}
    consts |= {"one": np.float32(1.0), "big": np.float32(-10000.0)}
    nodes = []
    for n, perm in (("q", [0, 2, 1, 3]), ("k", [0, 2, 3, 1]), ("v", [0, 2, 1, 3])):
        nodes += [
            node("MatMul", ["x", f"w{n}"], f"{n}0"),
            node("Add", [f"{n}0", f"b{n}"], f"{n}1"),
            node("Reshape", [f"{n}1", "heads"], f"{n}2"),
            node("Transpose", [f"{n}2"], f"{n}t", perm=perm),
        ]
    nodes += [
        node("MatMul", ["qt", "kt"], "s0"),
        node("Div", ["s0", "root"], "s1"),
        node("Sub", ["one", "m"], "m1"),
        node("Mul", ["m1", "big"], "m2"),
        node("Reshape", ["m2", "bcast"], "m3"),
        node("Add", ["s1", "m3"], "s2"),
        node("Softmax", ["s2"], "p", axis=-1),
        node("MatMul", ["p", "vt"], "c"),
        node("Transpose", ["c"], "ct", perm=[0, 2, 1, 3]),
        node("Reshape", ["ct", "back"], "c2"),
        node("MatMul", ["c2", "wo"], "y"),
    ]
    return make_model(nodes, {"x": [batch, seq, e], "m": [batch, seq]}, ["y"], consts)


@pytest.mark.parametrize("mode", MODES, ids=["json", "c"])
@pytest.mark.parametrize("batch", [1, 2])
def test_attention_reads_and_writes_its_heads_through_views(
    batch: int, mode: dict, tmp_path
) -> None:  # type: ignore[no-untyped-def]
    """MatMul-scale-mask-Softmax-MatMul is one dnnl.attention composite. Its products read the
    heads of Q, K and V, and write the context back, through strided views of the dense layers'
    rows: no transpose is copied. With one sequence the mask (1x1x1xS) is a post-op of the
    scores' product. Tokens masked out get no weight, as in onnxruntime; the compiled model
    saves and loads back."""
    model = bert_attention(batch)
    m = np.ones((batch, 8), np.float32)
    m[:, 5:] = 0
    config = {**DNNL, **mode}
    report = assert_matches_onnxruntime(model, config, {"x": rand(batch, 8, 8), "m": m})
    decisions = report.plan.decisions
    assert {decisions[n].composite for n in ("s0", "s1", "s2", "p", "c")} == {"dnnl.attention"}
    assert {d.backend for d in decisions.values()} == {"dnnl"}
    compiled = byoc.compile(model, config)
    kernels = [n for n in dnnl_step(compiled).artifact.graph["nodes"] if n["op"] == "kernel"]
    assert "transpose" not in [k["kind"] for k in kernels]
    products = [k for k in kernels if k["kind"] == "matmul" and k["attrs"]]
    assert [k["attrs"] for k in products] == [
        {"perm_a": [0, 2, 1, 3], "perm_b": [0, 2, 3, 1]},
        {"perm_b": [0, 2, 1, 3], "perm_out": [0, 2, 1, 3]},
    ]
    mask_fused = any(p["kind"] == "binary" for p in products[0]["post_ops"])
    assert mask_fused == (batch == 1)
    feeds = {"x": rand(batch, 8, 8), "m": m}
    again = byoc.load(compiled.save(tmp_path / "attention.byoc"))
    np.testing.assert_array_equal(again.run(feeds)["y"], compiled.run(feeds)["y"])


def sdpa_attention(seq: int = 6, heads: int = 2, size: int = 4) -> onnx.ModelProto:
    """scaled_dot_product_attention as the TorchScript exporter writes it (timm's ViT, BERT and
    Whisper with SDPA): one fused QKV layer viewed as [1, S, 3, H, D], transposed to [3, 1, H,
    S, D] and Split into q, k and v; the scale sqrt(1 / sqrt(D)) computed from q's shape and
    applied to q and to k's transpose."""
    e = heads * size
    i64 = np.int64
    consts = {"wqkv": rand(e, 3 * e), "bqkv": rand(3 * e), "wo": rand(e, e)}
    consts |= {"heads": np.array([1, seq, 3, heads, size], i64), "ones": np.ones(3, i64)}
    consts |= {"back": np.array([1, seq, e], i64), "zero": np.array([0], i64)}
    consts |= {"last": np.array([-1], i64), "end": np.array([2**62], i64), "one": np.float32(1)}
    nodes = [
        node("MatMul", ["x", "wqkv"], "qkv0"),
        node("Add", ["qkv0", "bqkv"], "qkv1"),
        node("Reshape", ["qkv1", "heads"], "qkv2"),
        node("Transpose", ["qkv2"], "qkv3", perm=[2, 0, 3, 1, 4]),
        node("Split", ["qkv3", "ones"], ["q0", "k0", "v0"], axis=0),
        *[node("Squeeze", [f"{n}0", "zero"], f"{n}") for n in "qkv"],
        node("Shape", ["q"], "qshape"),
        node("Slice", ["qshape", "last", "end"], "d"),
        node("Cast", ["d"], "df", to=onnx.TensorProto.FLOAT),
        node("Sqrt", ["df"], "root"),
        node("Div", ["one", "root"], "scale"),
        node("Sqrt", ["scale"], "half"),
        node("Mul", ["q", "half"], "qs"),
        node("Transpose", ["k"], "kt", perm=[0, 1, 3, 2]),
        node("Mul", ["kt", "half"], "ks"),
        node("MatMul", ["qs", "ks"], "s"),
        node("Softmax", ["s"], "p", axis=-1),
        node("MatMul", ["p", "v"], "c"),
        node("Transpose", ["c"], "ct", perm=[0, 2, 1, 3]),
        node("Reshape", ["ct", "back"], "c2"),
        node("MatMul", ["c2", "wo"], "y"),
    ]
    return make_model(nodes, {"x": [1, seq, e]}, ["y"], consts)


@pytest.mark.parametrize("mode", MODES, ids=["json", "c"])
def test_torchscript_attention_scales_its_scores_and_copies_no_head(mode: dict) -> None:
    """The scale computed from q's shape folds to a constant (onnxruntime runs nothing in
    front of the partition), the two operand scalings become one post-op of the scores'
    product, and the product reads k through its transpose: no eltwise kernel, and one
    transpose (of the fused q, k and v, which the Split's views then read)."""
    model = sdpa_attention()
    config = {**DNNL, **mode}
    report = assert_matches_onnxruntime(model, config, {"x": rand(1, 6, 8)})
    assert {d.backend for d in report.plan.decisions.values()} == {"dnnl"}
    assert len(report.plan.schedule) == 1
    compiled = byoc.compile(model, config)
    kernels = [n for n in dnnl_step(compiled).artifact.graph["nodes"] if n["op"] == "kernel"]
    transposes = [k["attrs"]["perm"] for k in kernels if k["kind"] == "transpose"]
    assert transposes == [[2, 0, 3, 1, 4]] and "eltwise" not in [k["kind"] for k in kernels]
    scores = next(k for k in kernels if k["kind"] == "matmul" and "perm_b" in k["attrs"])
    assert scores["attrs"]["perm_b"] == [0, 1, 3, 2]
    assert scores["post_ops"] == [
        {"kind": "eltwise", "alg": "linear", "alpha": pytest.approx(0.5), "beta": 0.0}
    ]


@pytest.mark.parametrize(
    ("keys", "opset", "reason"),
    [
        ("const", 17, "a product by a constant is a dense layer, not attention"),
        ("input", 11, "the softmax is not over the scores' last axis"),  # opset 11: axis=1
    ],
)
def test_what_is_not_attention_is_no_attention_composite(keys, opset, reason) -> None:  # type: ignore[no-untyped-def]
    """Learned queries (a constant operand), or a softmax over more than the scores' last axis
    (opset 11's default), make no attention composite: the check says why."""
    attrs = {"axis": -1} if opset >= 13 else {}
    nodes = [
        node("MatMul", ["x", "keys"], "s"),
        node("Softmax", ["s"], "p", **attrs),
        node("MatMul", ["p", "x"], "y"),
    ]
    shapes = {"x": [1, 4, 4]} | ({"keys": [1, 4, 4]} if keys == "input" else {})
    consts = {"keys": rand(1, 4, 4)} if keys == "const" else {}
    plan = byoc.partition(make_model(nodes, shapes, ["y"], consts, opset=opset), DNNL)
    assert any(f"dnnl.attention: {reason}" in r for _, r in plan.decisions["y"].refusals)
    assert plan.decisions["y"].composite != "dnnl.attention"


@pytest.mark.parametrize("rows", [[2, 6], [12], [1, 2, 3]])
def test_dense_layers_run_on_brgemm_kernels(rows: list[int]) -> None:
    """Dense layers (constant weights) with their bias, GELU, a residual addition and a
    per-channel scale fused, at ranks 2-4 and through Gemm's transposed weights: results match
    onnxruntime, and where oneDNN's matmul for this CPU is its generic gemm, the layers run as
    1x1 convolutions on brgemm kernels instead."""
    d, f = 64, 96
    gelu = [
        node("Div", ["h1", "sqrt2"], "e0"),
        node("Erf", ["e0"], "e1"),
        node("Add", ["e1", "one"], "e2"),
        node("Mul", ["h1", "e2"], "e3"),
        node("Mul", ["e3", "half"], "g"),
    ]
    consts = {
        "w1": rand(d, f),
        "b1": rand(f),
        "w2": rand(f, d),
        "b2": rand(d),
        "s": rand(d),
        "sqrt2": np.float32(np.sqrt(2.0)),
        "one": np.float32(1.0),
        "half": np.float32(0.5),
    }
    nodes = [
        node("MatMul", ["x", "w1"], "h0"),
        node("Add", ["h0", "b1"], "h1"),
        *gelu,
        node("MatMul", ["g", "w2"], "o0"),
        node("Add", ["o0", "b2"], "o1"),
        node("Add", ["o1", "x"], "o2"),
        node("Mul", ["o2", "s"], "y"),
    ]
    model = make_model(nodes, {"x": [*rows, d]}, ["y"], consts)
    claimed(assert_matches_onnxruntime(model, DNNL), "MatMul")
    gemm = make_model(
        [node("Gemm", ["x", "w", "c"], "y", transB=1), node("Relu", ["y"], "z")],
        {"x": [8, d]},
        ["z"],
        {"w": rand(f, d), "c": rand(f)},
    )
    claimed(assert_matches_onnxruntime(gemm, DNNL), "Gemm")
    if not avx2():
        pytest.skip("brgemm kernels need AVX2; results were checked")
    for m in (model, gemm):
        compiled = byoc.compile(m, {**DNNL, "compile": {"placement": "static"}})
        dense = [i for i in dnnl_impls(compiled) if i.startswith(("matmul", "convolution"))]
        assert dense and all("brg" in i for i in dense), dense


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("perm_a", [0, 0, 1, 3], "not a permutation"),
        ("perm_out", [0, 2, 1], "perm_out must have 4 entries"),
        ("perm_b", [0, 2, 1, 3], "matmul.*oneDNN refused it"),
    ],
)
def test_products_read_through_bad_views_are_refused_when_loaded(key, value, message) -> None:  # type: ignore[no-untyped-def]
    """A damaged graph whose product would read or write through a view that is no
    permutation, or that does not fit the product's shapes, raises ArtifactError."""
    model = bert_attention(1)
    step = dnnl_step(byoc.compile(model, {**DNNL, "compile": {"placement": "static"}}))
    data = plugin.byoc_serialize(backend="dnnl", artifact=step.artifact)
    bad = step.artifact.graph
    scores = next(n for n in bad["nodes"] if n.get("attrs", {}).get("perm_a"))
    scores["attrs"][key] = value
    with pytest.raises(byoc.ArtifactError, match=message):
        artifact = plugin.byoc_deserialize(
            backend="dnnl", data=replace_graph(data, bad), trust_native=False
        )
        plugin.byoc_create_runtime(backend="dnnl", artifact=artifact, config={})
