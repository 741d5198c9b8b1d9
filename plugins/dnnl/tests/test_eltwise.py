"""dnnl: eltwise kinds (eltwise, erf): activations, spelled-out GELU, HardSwish, Swish, powers."""

from __future__ import annotations

import byoc
import numpy as np
import pytest
from byoc.testing import assert_matches_onnxruntime
from byoc.testing.build import make_model, node

from .helpers import DNNL, MODES, claimed, conv_stem, dnnl_impls, dnnl_step, rand

# (op, extra inputs {name: shape}, attrs, constants); each reads 'h' [1,8,10,12]
UNARY = [
    ("Relu", {}, {}),
    ("LeakyRelu", {}, {"alpha": 0.2}),
    ("Sigmoid", {}, {}),
    ("Tanh", {}, {}),
    ("HardSigmoid", {}, {"alpha": 0.3, "beta": 0.4}),
    ("HardSwish", {}, {}),
    ("Elu", {}, {"alpha": 0.7}),
    ("Erf", {}, {}),
    ("Abs", {}, {}),
]


@pytest.mark.parametrize(("op", "attrs"), [(u[0], u[2]) for u in UNARY])
def test_unary_ops_match_onnxruntime(op: str, attrs: dict) -> None:
    nodes, consts = conv_stem()
    model = make_model(
        [*nodes, node(op, ["h"], "y", **attrs)], {"x": [1, 3, 10, 12]}, ["y"], consts
    )
    claimed(assert_matches_onnxruntime(model, DNNL), op)


def test_clip_matches_onnxruntime() -> None:
    nodes, consts = conv_stem()
    consts |= {"lo": np.float32(-0.5), "hi": np.float32(0.7)}
    model = make_model(
        [*nodes, node("Clip", ["h", "lo", "hi"], "y")], {"x": [1, 3, 10, 12]}, ["y"], consts
    )
    claimed(assert_matches_onnxruntime(model, DNNL), "Clip")


@pytest.mark.parametrize("mode", MODES, ids=["json", "c"])
def test_neg_and_reciprocal_are_linear_and_pow_eltwise(mode: dict) -> None:
    """Neg (a rotary embedding's half-swap) is oneDNN's linear eltwise, -1 * x + 0, and
    Reciprocal (RMSNorm's ``1 / sqrt``) its pow, 1 * x ** -1: both claimed, matching
    onnxruntime, of values from 0.01 to large ones."""
    nodes, consts = conv_stem()
    consts["eps"] = np.float32(0.01)
    nodes += [
        node("Neg", ["h"], "n"),
        node("Abs", ["h"], "a"),
        node("Add", ["a", "eps"], "s"),
        node("Reciprocal", ["s"], "r"),
    ]
    model = make_model(nodes, {"x": [1, 3, 10, 12]}, ["n", "r"], consts)
    config = {**DNNL, **mode, "compile": {"placement": "static"}}
    x = np.linspace(-3, 3, 360, dtype=np.float32).reshape(1, 3, 10, 12)
    report = assert_matches_onnxruntime(model, config, {"x": x})
    claimed(report, "Neg")
    claimed(report, "Reciprocal")
    graph = dnnl_step(byoc.compile(model, config)).artifact.graph
    eltwise = [n["attrs"] for n in graph["nodes"] if n.get("kind") == "eltwise"]
    assert {"alg": "linear", "alpha": -1.0, "beta": 0.0} in eltwise, eltwise
    assert {"alg": "pow", "alpha": 1.0, "beta": -1.0} in eltwise, eltwise


@pytest.mark.parametrize("mode", MODES, ids=["json", "c"])
def test_tanh_runs_as_twice_a_logistic_minus_one(mode: dict) -> None:
    """oneDNN's AVX2 tanh is several times slower than its logistic, so tanh is
    2 * logistic(2x) - 1: post-ops after a conv, and a standalone Tanh (after a Concat) is one
    binary kernel, x + x with those post-ops. Within 1e-6 of tanh from -12 to 12."""
    nodes, consts = conv_stem()
    nodes += [
        node("Tanh", ["h"], "t"),
        node("Concat", ["t", "x"], "c", axis=1),
        node("Tanh", ["c"], "u"),
        node("Conv", ["u", "w1"], "y"),
    ]
    consts["w1"] = rand(4, 11, 1, 1)
    model = make_model(nodes, {"x": [1, 3, 10, 12]}, ["y", "u"], consts)
    config = {**DNNL, **mode, "compile": {"placement": "static"}}
    x = np.linspace(-12, 12, 360, dtype=np.float32).reshape(1, 3, 10, 12)
    x[0, 0, 0, :6] = [0, 1e-7, -1e-7, 1e-3, 50, -50]
    out = byoc.compile(model, config).run({"x": x})["u"]
    assert np.max(np.abs(out[:, 8:] - np.tanh(x.astype(np.float64)))) < 1e-6
    assert_matches_onnxruntime(model, config)
    impls = dnnl_impls(byoc.compile(model, config))
    assert not any(i.startswith("eltwise") for i in impls), impls
    assert sum(i.startswith("binary") for i in impls) == 1, impls


@pytest.mark.parametrize("mode", MODES, ids=["json", "c"])
@pytest.mark.parametrize("cube", ["pow", "muls"])
def test_gelu_tanh_is_one_post_op_and_powers_are_eltwise(mode: dict, cube: str) -> None:
    """GELU's tanh approximation as GPT-2 (``gelu_new``: a Pow) and PyTorch (two Muls) spell it
    after a dense layer is the composite ``dnnl.gelu_tanh``, one gelu_tanh post-op of the layer;
    Pow by a constant (2: a square, 1.5: oneDNN's pow), Abs and Sqrt are eltwise kernels."""
    f32 = np.float32
    consts = {"w": rand(16, 32), "b": rand(32), "w2": rand(32, 16), "three": f32(3.0)}
    consts |= {"k": f32(0.044715), "s": f32(np.sqrt(2 / np.pi)), "one": f32(1.0)}
    consts |= {"half": f32(0.5), "two": f32(2.0), "e": f32(1.5)}
    if cube == "pow":
        cubed = [node("Pow", ["h", "three"], "cube")]
    else:
        cubed = [node("Mul", ["h", "h"], "sq"), node("Mul", ["h", "sq"], "cube")]
    nodes = [
        node("MatMul", ["x", "w"], "m"),
        node("Add", ["m", "b"], "h"),
        *cubed,
        node("Mul", ["k", "cube"], "kc"),
        node("Add", ["h", "kc"], "in"),
        node("Mul", ["s", "in"], "sc"),
        node("Tanh", ["sc"], "t"),
        node("Add", ["one", "t"], "t1"),
        node("Mul", ["half", "h"], "hh"),
        node("Mul", ["hh", "t1"], "g"),
        node("MatMul", ["g", "w2"], "y"),
        node("Pow", ["y", "two"], "p2"),
        node("Abs", ["y"], "ab"),
        node("Pow", ["ab", "e"], "p15"),
        node("Sqrt", ["ab"], "rt"),
        node("Add", ["p2", "p15"], "z0"),
        node("Add", ["z0", "rt"], "z"),
    ]
    model = make_model(nodes, {"x": [2, 8, 16]}, ["z"], consts, opset=17)
    config = {**DNNL, **mode, "compile": {"placement": "static"}}
    report = assert_matches_onnxruntime(model, config)
    for op_type in ("Tanh", "Pow", "Abs", "Sqrt"):
        claimed(report, op_type)
    assert "dnnl.gelu_tanh" in {d.composite for d in report.plan.decisions.values()}
    compiled = byoc.compile(model, config)
    graph = dnnl_step(compiled).artifact.graph
    kernels = [n for n in graph["nodes"] if n["op"] == "kernel"]
    assert [p["alg"] for p in kernels[0]["post_ops"]] == ["gelu_tanh"]
    algs = [n["attrs"]["alg"] for n in kernels if n["kind"] == "eltwise"]
    assert sorted(algs) == ["abs", "pow", "sqrt", "square"]


@pytest.mark.parametrize("spelling", ["torchscript", "dynamo"])
def test_gelu_erf_as_both_exporters_spell_it_is_one_post_op(spelling: str) -> None:
    """GELU with Erf after a dense layer, as TorchScript (``(x * (1 + erf)) * 0.5``) and the
    dynamo exporter (``x * (0.5 * (1 + erf))``) write it, is one gelu_erf post-op of the layer."""
    f32 = np.float32
    consts = {"w": rand(16, 32), "b": rand(32), "w2": rand(32, 16)}
    consts |= {"root2": f32(np.sqrt(2.0)), "one": f32(1.0), "half": f32(0.5)}
    if spelling == "torchscript":
        gelu = [node("Mul", ["h", "e2"], "e3"), node("Mul", ["e3", "half"], "g")]
    else:
        gelu = [node("Mul", ["half", "e2"], "e3"), node("Mul", ["h", "e3"], "g")]
    nodes = [
        node("MatMul", ["x", "w"], "m"),
        node("Add", ["m", "b"], "h"),
        node("Div", ["h", "root2"], "e0"),
        node("Erf", ["e0"], "e1"),
        node("Add", ["e1", "one"], "e2"),
        *gelu,
        node("MatMul", ["g", "w2"], "y"),
    ]
    model = make_model(nodes, {"x": [2, 8, 16]}, ["y"], consts, opset=18)
    config = {**DNNL, "compile": {"placement": "static"}}
    report = assert_matches_onnxruntime(model, config)
    assert "dnnl.gelu" in {d.composite for d in report.plan.decisions.values()}
    graph = dnnl_step(byoc.compile(model, config)).artifact.graph
    kernels = [n for n in graph["nodes"] if n["op"] == "kernel"]
    assert [p["alg"] for p in kernels[0]["post_ops"]] == ["gelu_erf"]
    assert len(kernels) == 2  # the two dense layers, nothing between them


def test_pow_by_a_computed_exponent_is_refused_with_reason() -> None:
    """x ** e with e computed at run time is no eltwise: onnxruntime computes it."""
    nodes, consts = conv_stem()
    nodes += [node("Abs", ["h"], "a"), node("Pow", ["a", "h"], "y")]
    model = make_model(nodes, {"x": [1, 3, 10, 12]}, ["y"], consts)
    decisions = assert_matches_onnxruntime(model, DNNL).plan.decisions
    assert decisions["y"].backend == "onnxruntime"
    assert any("exponent must be constants" in r for _, r in decisions["y"].refusals)


def test_a_gelu_lookalike_with_its_constants_swapped_is_not_gelu() -> None:
    """0.5 in the inner Mul and 1/sqrt(2) outside is not GELU: the pattern asks for each value
    where it stands, not for a Mul by that number anywhere in the match."""
    consts = {"inner": np.float32(0.5), "one": np.float32(1.0), "outer": np.float32(2**-0.5)}
    nodes = [
        node("Conv", ["x", "w0", "b0"], "h", pads=[1, 1, 1, 1]),
        node("Mul", ["h", "inner"], "e0"),
        node("Erf", ["e0"], "e1"),
        node("Add", ["e1", "one"], "e2"),
        node("Mul", ["h", "e2"], "e3"),
        node("Mul", ["e3", "outer"], "y"),
    ]
    stem = conv_stem()[1]
    model = make_model(nodes, {"x": [1, 3, 10, 12]}, ["y"], {**consts, **stem})
    report = assert_matches_onnxruntime(model, DNNL)
    assert "dnnl.gelu" not in {d.composite for d in report.plan.decisions.values()}


@pytest.mark.parametrize("codegen", ["json", "c"])
def test_a_binary_post_op_after_a_tanh_binds_its_operand(codegen: str) -> None:
    """tanh is three oneDNN post-ops (layouts.hpp's append_eltwise): a binary post-op after it
    is bound at its index in oneDNN's list. FastGELU on a 1-D convolution, which fuses into a
    binary Mul carrying a tanh and then a Mul by a computed operand, once failed to execute
    ("could not execute a primitive")."""
    consts = {"w": rand(16, 8, 3), "b": rand(16), "half": np.float32(0.5), "one": np.float32(1)}
    consts |= {"c": np.float32(0.7978845608), "k": np.float32(0.044715)}
    nodes = [
        node("Conv", ["x", "w", "b"], "y", pads=[1, 1]),
        node("Mul", ["y", "c"], "a"),
        node("Mul", ["y", "k"], "ky"),
        node("Mul", ["ky", "y"], "kyy"),
        node("Add", ["kyy", "one"], "d"),
        node("Mul", ["a", "d"], "e"),
        node("Tanh", ["e"], "t"),
        node("Add", ["t", "one"], "u"),
        node("Mul", ["y", "half"], "hy"),
        node("Mul", ["hy", "u"], "out"),
    ]
    model = make_model(nodes, {"x": [1, 8, 64]}, ["out"], consts)
    config = {**DNNL, "backend": {"dnnl": {"codegen": codegen}}}
    claimed(assert_matches_onnxruntime(model, config), "Tanh")
