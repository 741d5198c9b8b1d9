"""dnnl: normalization kinds (softmax, layernorm, batchnorm, lrn)."""

from __future__ import annotations

import byoc
import numpy as np
import onnx
import pytest
from byoc.testing import assert_matches_onnxruntime
from byoc.testing.build import make_model, node

from .helpers import (
    DNNL,
    MODES,
    claimed,
    conv_stem,
    dnnl_impls,
    dnnl_kinds,
    rand,
    softmax_between_convs,
)


def test_lrn_of_even_size_is_refused_with_reason() -> None:
    """oneDNN's LRN window is centred; ONNX's reaches one channel further up for even sizes
    (onnxruntime refuses to run them at all, so this compares nothing)."""
    nodes, consts = conv_stem()
    nodes.append(node("LRN", ["h"], "y", size=4))
    plan = byoc.partition(make_model(nodes, {"x": [1, 3, 10, 12]}, ["y"], consts), DNNL)
    decision = plan.decisions["y"]
    assert decision.backend == "onnxruntime"
    assert "LRN of size 4" in str(decision.refusals), decision.refusals


def test_batchnorm_standalone_and_concat() -> None:
    nodes, consts = conv_stem()
    consts |= {"s": rand(8), "bb": rand(8), "m": rand(8), "v": np.abs(rand(8)) + 0.5}
    model = make_model(
        [
            *nodes,
            node("Relu", ["h"], "r"),
            node("BatchNormalization", ["r", "s", "bb", "m", "v"], "bn"),
            node("Concat", ["bn", "h"], "y", axis=1),
        ],
        {"x": [1, 3, 10, 12]},
        ["y"],
        consts,
    )
    report = assert_matches_onnxruntime(model, DNNL)
    claimed(report, "BatchNormalization")
    claimed(report, "Concat")


def test_a_softmax_writes_over_its_source_only_when_nothing_reads_it_later() -> None:
    """In place when the scores die at the softmax: its arena holds one score tensor less."""
    arena = []
    for later in ("x", "s"):
        nodes = [
            node("MatMul", ["x", "w"], "s"),
            node("Softmax", ["s"], "p", axis=-1),
            node("MatMul", ["p", "w"], "y0"),
            node("Add", ["y0", later], "y"),
        ]
        model = make_model(nodes, {"x": [4, 32, 32]}, ["y"], {"w": rand(32, 32)})
        config = {**DNNL, "compile": {"placement": "static"}}
        claimed(assert_matches_onnxruntime(model, config), "Softmax")
        (step,) = [s for s in byoc.compile(model, config).steps if s.unit.backend == "dnnl"]
        arena.append(step.runtime.arena_bytes)
    assert arena[1] - arena[0] == 4 * 32 * 32 * 4


def _spelled_layernorm(
    opset: int, square: str, affine: bool, axis: int = -1, gamma: tuple = (16,)
) -> onnx.ModelProto:
    """MatMul -> LayerNormalization spelled in basic ops (as exporters before opset 17 write
    it) -> MatMul, over [2, 16, 16]."""
    i64 = np.int64
    consts = {"w0": rand(16, 16), "w1": rand(16, 8), "two": np.float32(2.0)}
    consts |= {"eps": np.float32(1e-5), "g": rand(*gamma), "b": rand(1, 16)}
    axes: dict = {"axes": [axis]} if opset < 18 else {}
    extra = ["ax"] if opset >= 18 else []
    if extra:
        consts["ax"] = np.array([axis], i64)
    nodes = [
        node("MatMul", ["x", "w0"], "h"),
        node("ReduceMean", ["h", *extra], "mean", **axes),
        node("Sub", ["h", "mean"], "d"),
        node("Pow", ["d", "two"], "sq") if square == "Pow" else node("Mul", ["d", "d"], "sq"),
        node("ReduceMean", ["sq", *extra], "var", **axes),
        node("Add", ["eps", "var"], "ve"),
        node("Sqrt", ["ve"], "std"),
        node("Div", ["d", "std"], "n"),
    ]
    if affine:
        nodes += [node("Mul", ["n", "g"], "ng"), node("Add", ["ng", "b"], "ln")]
    else:
        nodes += [node("Identity", ["n"], "ln")]
    nodes += [node("MatMul", ["ln", "w1"], "y")]
    return make_model(nodes, {"x": [2, 16, 16]}, ["y"], consts, opset=opset)


@pytest.mark.parametrize(
    "opset,square,affine", [(13, "Pow", True), (18, "Mul", True), (13, "Pow", False)]
)
@pytest.mark.parametrize("mode", MODES, ids=["json", "c"])
def test_layernorm_spelled_in_basic_ops_is_one_layernorm_kernel(
    opset: int, square: str, affine: bool, mode: dict
) -> None:
    """PP-OCR's SVTR blocks and transformers exported before opset 17 spell LayerNormalization
    out (ReduceMean, Sub, Pow, ReduceMean, Add, Sqrt, Div, Mul, Add): it runs as one oneDNN
    layer normalization, so the model stays one partition."""
    model = _spelled_layernorm(opset, square, affine)
    config = {**DNNL, **mode, "compile": {"placement": "static"}}
    report = assert_matches_onnxruntime(model, config)
    assert len(report.plan.partitions) == 1 and not report.plan.segments, report.plan.table()
    ln = {n for n, d in report.plan.decisions.items() if d.composite == "dnnl.layernorm"}
    assert ln == {"mean", "d", "sq", "var", "ve", "std", "n", *(("ng", "ln") if affine else ())}
    assert dnnl_kinds(byoc.compile(model, config)) == ["matmul", "layernorm", "matmul"]


def test_a_mean_or_gamma_along_another_axis_is_not_a_layernorm() -> None:
    """A mean over another axis is no layer normalization; a gamma of shape (C, 1) varies
    along axis -2, so the normalization is one but the Mul stays outside it."""
    plan = byoc.partition(_spelled_layernorm(13, "Pow", True, axis=1), DNNL)
    assert "dnnl.layernorm" not in {d.composite for d in plan.decisions.values()}
    assert "other axes than the last" in str(plan.decisions["n"].refusals), plan.decisions["n"]
    model = _spelled_layernorm(13, "Pow", True, gamma=(16, 1))
    report = assert_matches_onnxruntime(model, DNNL)
    decisions = report.plan.decisions
    assert decisions["n"].composite == "dnnl.layernorm" and decisions["ng"].composite is None
    assert "gamma varies along other axes" in str(decisions["ln"].refusals)


def _spelled_rmsnorm(
    rows: int, opset: int, square: str, inverse: str, weight: bool, axis: int = -1
) -> onnx.ModelProto:
    """MatMul -> RMSNorm spelled as the PyTorch exporters write Llama's (``x * rsqrt(mean(x^2)
    + eps) * weight``) -> MatMul, over [1, rows, 32]; ``inverse``: Reciprocal then Mul,
    Div(1, .) then Mul, or Div(x, .)."""
    consts = {"w0": rand(16, 32), "w1": rand(32, 8), "two": np.float32(2.0)}
    consts |= {"eps": np.float32(1e-6), "one": np.float32(1.0), "g": rand(32)}
    axes: dict = {"axes": [axis], "keepdims": 1} if opset < 18 else {"keepdims": 1}
    extra = ["ax"] if opset >= 18 else []
    if extra:
        consts["ax"] = np.array([axis], np.int64)
    scaled = {
        "reciprocal": [node("Reciprocal", ["std"], "inv"), node("Mul", ["h", "inv"], "n")],
        "div_one": [node("Div", ["one", "std"], "inv"), node("Mul", ["inv", "h"], "n")],
        "div": [node("Div", ["h", "std"], "n")],
    }[inverse]
    nodes = [
        node("MatMul", ["x", "w0"], "h"),
        node("Pow", ["h", "two"], "sq") if square == "Pow" else node("Mul", ["h", "h"], "sq"),
        node("ReduceMean", ["sq", *extra], "var", **axes),
        node("Add", ["var", "eps"], "ve"),
        node("Sqrt", ["ve"], "std"),
        *scaled,
        node("Mul", ["g", "n"], "rms") if weight else node("Identity", ["n"], "rms"),
        node("MatMul", ["rms", "w1"], "y"),
    ]
    return make_model(nodes, {"x": [1, rows, 16]}, ["y"], consts, opset=opset)


@pytest.mark.parametrize(
    "rows,opset,square,inverse,weight",
    [
        (8, 17, "Pow", "reciprocal", True),
        (1, 17, "Pow", "reciprocal", True),
        (8, 18, "Mul", "div_one", True),
        (8, 17, "Pow", "div", False),
    ],
)
@pytest.mark.parametrize("mode", MODES, ids=["json", "c"])
def test_rmsnorm_spelled_in_basic_ops_is_a_square_a_mean_and_a_product(
    rows: int, opset: int, square: str, inverse: str, weight: bool, mode: dict
) -> None:
    """RMSNorm as the PyTorch exporters write Llama's (Pow, ReduceMean, Add, Sqrt, Reciprocal,
    Mul, Mul) is ``dnnl.rmsnorm``: a square, the mean as a product by a column of 1 / n with
    + eps, sqrt and 1 / x as post-ops, and one product by x carrying the weight. A decode
    step's single row (rows 1), whose ReduceMean oneDNN's pooling ran as its slow reference
    loop (refused at codegen), stays in the partition too."""
    model = _spelled_rmsnorm(rows, opset, square, inverse, weight)
    config = {**DNNL, **mode, "compile": {"placement": "static"}}
    report = assert_matches_onnxruntime(model, config)
    compiled = byoc.compile(model, config)
    assert len(compiled.plan.partitions) == 1 and not compiled.plan.segments, compiled.plan.table()
    members = {n for n, d in report.plan.decisions.items() if d.composite == "dnnl.rmsnorm"}
    spelled = {n.name for n in model.graph.node} - {"h", "y"} - ({"rms"} if not weight else set())
    assert members == spelled, members
    kinds = dnnl_kinds(compiled)
    assert kinds == ["matmul", "eltwise", "matmul", "binary", "matmul"], kinds


def test_a_mean_over_another_axis_is_not_an_rmsnorm() -> None:
    plan = byoc.partition(_spelled_rmsnorm(8, 17, "Pow", "reciprocal", True, axis=1), DNNL)
    assert "dnnl.rmsnorm" not in {d.composite for d in plan.decisions.values()}
    assert "not over the last axis" in str(plan.decisions["rms"].refusals), plan.decisions["rms"]


@pytest.mark.parametrize("axis", [1, 2, 3, -1])
def test_softmax_on_any_axis_gets_a_fast_kernel(axis: int) -> None:
    """oneDNN's fast softmax wants the axis innermost; other axes are moved there by a
    reorder instead of running oneDNN's reference kernel."""
    model = softmax_between_convs(axis)
    claimed(assert_matches_onnxruntime(model, DNNL), "Softmax")
    compiled = byoc.compile(model, {**DNNL, "compile": {"placement": "static"}})
    softmax = [i for i in dnnl_impls(compiled) if i.startswith("softmax ")]
    assert softmax and not any(i.split()[1].startswith("ref") for i in softmax), softmax


def _guarded_attention(zero: np.ndarray, where: tuple[str, str, str]) -> onnx.ModelProto:
    """Attention as PyTorch's exporters write it: ``Where(IsNaN(p), 0, p)`` after the softmax
    of the masked scores (``_safe_softmax``), then the product by V; x [1, 8, 16]."""
    consts = {"wq": rand(16, 16), "wk": rand(16, 16), "wv": rand(16, 16), "zero": zero}
    nodes = [
        node("MatMul", ["x", "wq"], "q"),
        node("MatMul", ["x", "wk"], "k"),
        node("MatMul", ["x", "wv"], "v"),
        node("Transpose", ["k"], "kt", perm=[0, 2, 1]),
        node("MatMul", ["q", "kt"], "s"),
        node("Add", ["s", "mask"], "sm"),
        node("Softmax", ["sm"], "p", axis=-1),
        node("IsNaN", ["p"], "nan"),
        node("Where", list(where), "pz"),
        node("MatMul", ["pz", "v"], "y"),
    ]
    return make_model(nodes, {"x": [1, 8, 16], "mask": [1, 8, 8]}, ["y"], consts)


def _mask(nan: bool = True) -> np.ndarray:
    """Rows 2 and 5 masked entirely (-inf: the softmax is NaN there), row 3 half; with ``nan``,
    a NaN in row 6 and +inf in row 7 (NaN rows in onnxruntime's softmax; oneDNN's is NaN at
    that one position and 0 elsewhere: the same zeros once NaN -> 0)."""
    mask = np.zeros((1, 8, 8), np.float32)
    mask[0, [2, 5]] = -np.inf
    mask[0, 3, 4:] = -np.inf
    if nan:
        mask[0, 6, 1], mask[0, 7, 0] = np.nan, np.inf
    return mask


def _run_on_dnnl(model: onnx.ModelProto, mode: dict, nan: bool = True) -> byoc.CompiledModel:
    """Compiled and run on x and ``_mask(nan)``, the mask's -inf and NaN on dnnl itself (not
    sent to onnxruntime as a finite-only backend's are by default): equal to onnxruntime's run."""
    import onnxruntime as ort

    config = {**DNNL, **mode, "compile": {"placement": "static"}}
    config["fallback"] = {"nonfinite_inputs": "backend"}
    compiled = byoc.compile(model, config)
    feeds = {"x": rand(1, 8, 16), "mask": _mask(nan)}
    want = ort.InferenceSession(model.SerializeToString()).run(None, feeds)[0]
    # scores reach +-50 here: 1e-5 held for oneDNN's AVX-512 kernels, not for its AVX2 ones
    np.testing.assert_allclose(compiled.run(feeds)["y"], want, rtol=1e-4, atol=1e-4)
    return compiled


@pytest.mark.parametrize("zero", [np.float32(0), np.zeros(1, np.float32)], ids=["()", "(1,)"])
@pytest.mark.parametrize("mode", MODES, ids=["json", "c"])
def test_a_nan_guarded_softmax_is_one_safe_softmax_kernel(zero: np.ndarray, mode: dict) -> None:
    """PyTorch's exporters guard each attention's softmax with IsNaN and Where (a scalar 0 in
    dynamo's export, a (1,) one in TorchScript's), which dnnl does not claim alone: BERT's
    encoder was cut at every layer. As one safe_softmax kernel (oneDNN's softmax, then NaN ->
    0) the block is one partition, and a row masked entirely gives 0 as in onnxruntime."""
    compiled = _run_on_dnnl(_guarded_attention(zero, ("nan", "zero", "p")), mode)
    plan = compiled.plan
    assert plan is not None and len(plan.partitions) == 1 and not plan.segments, plan.table()
    found = {n for n, d in plan.decisions.items() if d.composite == "dnnl.safe_softmax"}
    assert found == {"p", "nan", "pz"}, plan.table()
    assert dnnl_kinds(compiled).count("safe_softmax") == 1, dnnl_kinds(compiled)


@pytest.mark.parametrize(
    "zero,where,reason",
    [
        (np.float32(1), ("nan", "zero", "p"), "constant is not 0.0"),
        (np.float32(-0.0), ("nan", "zero", "p"), "constant is not 0.0"),
        (np.float32(0), ("nan", "p", "zero"), None),  # NaN stays, the rest becomes 0
    ],
    ids=["one", "minus-zero", "swapped"],
)
@pytest.mark.usefixtures("keep_tiny")
def test_a_where_that_is_not_nan_to_zero_is_not_a_safe_softmax(
    zero: np.ndarray, where: tuple[str, str, str], reason: str | None
) -> None:
    """Another constant, or the operands the other way round, is another function: the IsNaN
    and the Where stay with onnxruntime, and the model still matches it (the softmax on dnnl:
    its rows masked entirely are NaN, as onnxruntime's; NaN inputs are finite-only dnnl's
    known difference, conftest.py)."""
    compiled = _run_on_dnnl(_guarded_attention(zero, where), {}, nan=False)
    plan = compiled.plan
    assert plan is not None
    assert "dnnl.safe_softmax" not in {d.composite for d in plan.decisions.values()}
    assert plan.decisions["nan"].backend == plan.decisions["pz"].backend == "onnxruntime"
    assert plan.decisions["p"].backend == "dnnl", plan.table()
    if reason:
        assert reason in str(plan.decisions["pz"].refusals), plan.decisions["pz"].refusals


def _group_norm_model(op: str, shape: list[int], affine: bool, groups: int = 0) -> onnx.ModelProto:
    """Conv -> InstanceNormalization or GroupNormalization (opset 21) -> Relu over ``shape``
    (N, C, spatial...), scale and bias random (``affine``) or ones and zeros."""
    c, spatial = shape[1], len(shape) - 2
    consts = {"w": rand(c, c, *[3] * spatial) * 0.3}
    consts |= {"s": rand(c), "b": rand(c)} if affine else {"s": np.ones(c, np.float32)}
    consts |= {} if affine else {"b": np.zeros(c, np.float32)}
    attrs = {"num_groups": groups} if groups else {}
    nodes = [
        node("Conv", ["x", "w"], "h", pads=[1] * 2 * spatial),
        node(op, ["h", "s", "b"], "n", epsilon=1e-5, **attrs),
        node("Relu", ["n"], "y"),
    ]
    if not groups:
        return make_model(nodes, {"x": shape}, ["y"], consts)
    model = make_model(nodes[:1], {"x": shape}, ["h"], consts, opset=21)
    model.graph.node.extend(nodes[1:])  # ONNX's inference gives GroupNormalization no shape
    model.graph.output[0].CopyFrom(onnx.helper.make_tensor_value_info("y", 1, shape))
    return model


@pytest.mark.parametrize(
    ("op", "shape", "affine", "groups"),
    [
        ("InstanceNormalization", [2, 16, 20, 24], True, 0),
        ("InstanceNormalization", [1, 8, 9, 7], False, 0),  # TorchScript's GroupNorm: no affine
        ("InstanceNormalization", [1, 8, 33], True, 0),  # 1-D
        ("GroupNormalization", [2, 32, 12, 12], True, 4),
        ("GroupNormalization", [1, 48, 5, 3, 2], True, 3),  # 3-D
    ],
)
@pytest.mark.parametrize("mode", MODES, ids=["json", "c"])
def test_instance_and_group_norm_are_a_layernorm_of_each_groups_rows(
    op: str, shape: list[int], affine: bool, groups: int, mode: dict
) -> None:
    """Each (sample, group) is one row of a layer normalization with no affine of its own;
    the per-channel scale and bias follow as one binary kernel, none when they are ones and
    zeros.
    U-Net's GroupNorm (TorchScript: InstanceNormalization between Reshapes) left five ORT
    islands between dnnl partitions and ran 1.04x onnxruntime; one partition runs 0.69x."""
    model = _group_norm_model(op, shape, affine, groups)
    x = rand(*shape) * 3 + 1  # a mean and scale of their own to remove
    config = {**DNNL, **mode, "compile": {"placement": "static"}}
    report = assert_matches_onnxruntime(model, config, inputs={"x": x}, rtol=1e-4, atol=1e-4)
    claimed(report, op)
    # the scale's binary takes the bias and the Relu as post-ops; without it the Relu is alone
    kinds = dnnl_kinds(byoc.compile(model, config))
    assert kinds == ["conv", "view", "layernorm", "view", "binary" if affine else "eltwise"]


@pytest.mark.parametrize("case", ["groups", "scale"])
def test_group_norm_that_does_not_fit_its_channels_is_refused(case: str) -> None:
    """Groups that do not divide the channels; a scale of another length (a damaged model
    that ONNX's checker lets through) is refused, not reshaped."""
    if case == "groups":
        model, words = _group_norm_model("GroupNormalization", [1, 12, 6, 6], True, 5), "5 groups"
    else:
        model = _group_norm_model("InstanceNormalization", [1, 8, 6, 6], True)
        (s,) = [t for t in model.graph.initializer if t.name == "s"]
        s.CopyFrom(onnx.numpy_helper.from_array(rand(3), "s"))
        words = "one value per channel (8)"
    plan = byoc.partition(model, DNNL)
    decision = plan.decisions[plan.model.graph.node[1].name]
    assert decision.backend == "onnxruntime"
    assert words in str(decision.refusals), decision.refusals


def test_batchnorm_per_activation_of_opset_7_is_refused_with_reason() -> None:
    """Opset 7's BatchNormalization with spatial = 0 keeps statistics per activation (C, H, W),
    not per channel: dnnl claimed it and failed at compile ("operands could not be broadcast
    together"), an internal error on a model onnxruntime runs. It is refused, and the model
    runs on onnxruntime."""
    nodes, consts = conv_stem()
    nodes.append(node("BatchNormalization", ["h", "s", "bb", "m", "v"], "y", spatial=0))
    shape = (8, 10, 12)
    consts |= {"s": rand(*shape), "bb": rand(*shape), "m": rand(*shape)}
    consts["v"] = np.abs(rand(*shape)) + 0.5
    model = make_model(nodes, {"x": [1, 3, 10, 12]}, ["y"], consts, opset=7)
    report = byoc.compare(model, {**DNNL, "compile": {"placement": "static"}})
    assert report.passed, report.table()
    assert "per channel (1-D), not per activation" in str(report.plan.decisions["y"].refusals)
