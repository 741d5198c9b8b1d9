"""Generated C: the guide's example, fusion, broadcasting, dtypes, OpenMP; all against
onnxruntime."""

from __future__ import annotations

import math
import re
import subprocess
import sys

import byoc
import numpy as np
import pytest
from byoc.testing import assert_matches_onnxruntime
from byoc.testing.build import make_model, node
from onnx import TensorProto


def guide_model():
    """TVM's BYOC guide: out = (a + b - c) * d over four 10x10 inputs."""
    return make_model(
        [
            node("Add", ["a", "b"], "s", name="add"),
            node("Sub", ["s", "c"], "d1", name="sub"),
            node("Mul", ["d1", "d"], "out", name="mul"),
        ],
        {k: [10, 10] for k in "abcd"},
        ["out"],
    )


def sources(model, cfg) -> list[str]:
    compiled = byoc.compile(model, cfg)
    return [s.artifact.source for s in compiled.steps if s.unit.backend == "ccompiler"]


def exported(source: str) -> list[str]:
    """Functions defined at file scope without ``static``."""
    return re.findall(r"^(?!static)[a-z_][\w ]*?\b(\w+)\([^;]*\)\s*\{", source, re.M)


def test_guide_example_is_one_partition_with_one_exported_symbol(config):
    cfg = config()
    plan = byoc.partition(guide_model(), cfg)
    assert [(p.name, p.backend, p.nodes) for p in plan.partitions] == [
        ("ccompiler_0", "ccompiler", ["add", "sub", "mul"])
    ]
    assert plan.fallback_nodes == []
    (source,) = sources(guide_model(), cfg)
    assert exported(source) == ["ccompiler_0"]
    assert "static int ccompiler_0_(" in source
    for name in ("add", "sub", "mul"):
        assert f'"{name}"' in source  # a comment per op names its ONNX node
    assert "malloc" not in source.split("static int ccompiler_0_(")[1]  # fused: no temporaries
    assert_matches_onnxruntime(guide_model(), cfg)


UNARY = [
    "Neg",
    "Abs",
    "Relu",
    "Sigmoid",
    "Tanh",
    "Exp",
    "Erf",
    "Softplus",
    "Softsign",
    "Floor",
    "Ceil",
    "Round",
    "Reciprocal",
    "Sign",
    "Identity",
    "LeakyRelu",
    "Elu",
    "Selu",
    "HardSigmoid",
    "HardSwish",
    "ThresholdedRelu",
    "Mish",
    "Sqrt",
    "Log",
    "Sin",
    "Cos",
]


@pytest.mark.parametrize("op", UNARY)
def test_unary_ops_match_onnxruntime(op, config):
    first = [node("Abs", ["x"], "ax", name="abs")] if op in ("Sqrt", "Log") else []
    x = "ax" if first else "x"
    model = make_model(
        [*first, node(op, [x], "y", name="op"), node("Add", ["y", "b"], "z", name="add")],
        {"x": [2, 3, 5, 7], "b": [5, 1]},
        ["z"],
        opset=18,
    )
    report = assert_matches_onnxruntime(model, config(keep_onnxruntime_fusions=False))
    assert len(report.plan.partitions) == 1 and not report.plan.fallback_nodes


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu(approximate, config):
    model = make_model(
        [node("Gelu", ["x"], "y", approximate=approximate), node("Mul", ["y", "x"], "z")],
        {"x": [4, 33]},
        ["z"],
        opset=20,
    )
    assert_matches_onnxruntime(model, config())
    x = np.resize(np.array([np.nan, np.inf, -np.inf, -0.0, 1e-40, -9.5, 3.0], np.float32), (4, 33))
    assert_matches_onnxruntime(model, config(), {"x": x})  # -inf: -inf * 0 = NaN


BINARY = [
    "Add",
    "Sub",
    "Mul",
    "Div",
    "Max",
    "Min",
    "Equal",
    "Less",
    "Greater",
    "LessOrEqual",
    "GreaterOrEqual",
]


@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.int64])
@pytest.mark.parametrize("op", BINARY)
def test_binary_ops_broadcast_and_dtypes(op, dtype, config):
    compare = op in BINARY[6:]
    after = node("Where", ["y", "a", "b"], "z") if compare else node("Add", ["y", "a"], "z")
    model = make_model(
        [node(op, ["a", "b"], "y"), after],
        {"a": (dtype, [3, 1, 5]), "b": (dtype, [4, 1])},
        ["z"],
        opset=13,
    )
    rng = np.random.default_rng(0)
    inputs = {
        "a": (rng.standard_normal((3, 1, 5)) * 20).astype(dtype),
        "b": (rng.standard_normal((4, 1)) * 20).astype(dtype),
    }
    inputs["b"][inputs["b"] == 0] = 3  # onnxruntime's integer division by zero is undefined
    report = assert_matches_onnxruntime(model, config(), inputs)
    assert len(report.plan.partitions) == 1


def test_pow_sum_mean_clip_where_cast_and_logic(config):
    model = make_model(
        [
            node("Pow", ["x", "two"], "p"),
            node("Pow", ["p", "x"], "pp"),
            node("Sum", ["x", "p", "pp"], "s"),
            node("Mean", ["s", "x"], "m"),
            node("Clip", ["m", "lo", "hi"], "c"),
            node("Greater", ["c", "zero"], "g"),
            node("Not", ["g"], "ng"),
            node("Or", ["ng", "g"], "t"),
            node("Xor", ["t", "g"], "u"),
            node("And", ["u", "ng"], "v"),
            node("Cast", ["v"], "fv", to=TensorProto.FLOAT),
            node("Cast", ["i"], "fi", to=TensorProto.FLOAT),
            node("Cast", ["i"], "i32", to=TensorProto.INT32),
            node("Where", ["g", "fv", "fi"], "out"),
            node("Add", ["i32", "i32"], "iout"),
        ],
        {"x": [4, 8], "i": (np.int64, [8])},
        ["out", "iout", "g"],
        constants={
            "two": np.float32(2),
            "lo": np.float32(-0.5),
            "hi": np.float32(0.7),
            "zero": np.zeros((1, 8), np.float32),
        },
    )
    inputs = {
        "x": np.random.default_rng(1).uniform(0.1, 2, (4, 8)).astype(np.float32),
        "i": np.arange(8, dtype=np.int64),
    }
    report = assert_matches_onnxruntime(model, config(), inputs)
    assert len(report.plan.partitions) == 1 and not report.plan.fallback_nodes


def test_unfused_guide_example_reads_like_the_guide(config):
    """``fuse = false``: a function per op, a buffer per intermediate, a subgraph function that
    calls them in order, and the one exported entry point (the guide's listing)."""
    cfg = config(fuse=False)
    (source,) = sources(guide_model(), cfg)
    kernels = re.findall(r"^/\* kernel \d+: (\w+) \"(\w+)\"", source, re.M)
    assert kernels == [("Add", "add"), ("Sub", "sub"), ("Mul", "mul")]
    subgraph = source.split("static int ccompiler_0_(")[1].split("\n}\n")[0]
    assert subgraph.count("malloc(") == 2 and subgraph.count("free(") == 4  # 2 on failure
    calls = re.findall(r"^  (ccompiler_0_kernel_\d+)\((.*)\);", subgraph, re.M)
    assert calls == [
        ("ccompiler_0_kernel_0", "in0, in1, buf0"),
        ("ccompiler_0_kernel_1", "buf0, in2, buf1"),
        ("ccompiler_0_kernel_2", "buf1, in3, out0"),
    ]
    assert exported(source) == ["ccompiler_0"]
    assert_matches_onnxruntime(guide_model(), cfg)


@pytest.mark.parametrize("fuse", [True, False])
def test_both_modes_match_onnxruntime_on_a_mixed_graph(fuse, config):
    model = make_model(
        [
            node("Mul", ["x", "scale"], "t0"),
            node("Sigmoid", ["t0"], "t1"),
            node("Mul", ["x", "t1"], "t2"),
            node("Sub", ["v", "w"], "s0"),
            node("Exp", ["s0"], "s1"),
            node("Div", ["t2", "s1"], "t3"),
            node("Greater", ["t3", "t0"], "g"),
            node("Where", ["g", "t3", "t1"], "y"),
        ],
        {"x": [2, 6, 9, 70], "v": [6, 1, 1], "w": [6, 1, 1]},
        ["y", "t1"],
        constants={"scale": np.float32(1.5)},
    )
    cfg = config(fuse=fuse)
    (source,) = sources(model, cfg)
    kernels = len(re.findall(r"^static void ccompiler_0_kernel_\d+\(", source, re.M))
    assert kernels == (2 if fuse else 8)
    assert_matches_onnxruntime(model, cfg)


def test_integer_wraparound_and_division_by_zero_are_defined(config):
    model = make_model(
        [node("Mul", ["a", "b"], "m"), node("Div", ["m", "b"], "d")],
        {"a": (np.int32, [4]), "b": (np.int32, [4])},
        ["m", "d"],
    )
    compiled = byoc.compile(model, config())
    big, small = np.int32(2**31 - 1), np.int32(-(2**31))
    out = compiled.run(
        {"a": np.array([big, 7, small, 5], np.int32), "b": np.array([2, 3, -1, 1], np.int32)}
    )
    assert out["m"].tolist() == [-2, 21, small, 5]  # wraps like two's complement
    assert out["d"].tolist() == [-1, 7, small, 5]  # MIN / -1 wraps too, as in onnxruntime


@pytest.mark.parametrize("shape", [[4], [3, 70000]])  # OpenMP shares the second one out
def test_integer_division_by_zero_fails_like_onnxruntime(shape, config):
    model = make_model(
        [node("Mul", ["a", "b"], "m"), node("Div", ["m", "b"], "d"), node("Add", ["d", "a"], "y")],
        {"a": (np.int64, shape), "b": (np.int64, shape)},
        ["y"],
    )
    compiled = byoc.compile(model, config())
    a = np.full(shape, 7, np.int64)
    b = np.ones(shape, np.int64)
    np.testing.assert_array_equal(compiled.run({"a": a, "b": b})["y"], a + a)
    b.reshape(-1)[-1] = 0
    with pytest.raises(byoc.BackendError, match="integer Div divided by zero"):
        compiled.run({"a": a, "b": b})


def test_nan_propagates_through_relu_sign_max_min_clip(config):
    x = np.array([np.nan, 1, -0.0, -np.inf, np.inf, 1e-40, -1e-40, np.nan], np.float32)
    y = np.array([1, np.nan, 0, 2, np.nan, -1e-40, 1e-40, np.nan], np.float32)
    ops = {"Relu": ["x"], "Sign": ["x"], "Max": ["x", "y"], "Min": ["y", "x", "y"]}
    model = make_model(
        [node(op, args, op.lower()) for op, args in ops.items()]
        + [node("Clip", ["x", "lo", "hi"], "clip")],
        {"x": [8], "y": [8]},
        [*(op.lower() for op in ops), "clip"],
        constants={"lo": np.float32(-0.5), "hi": np.float32(0.5)},
    )
    report = assert_matches_onnxruntime(model, config(), {"x": x, "y": y}, rtol=1e-6, atol=0)
    assert len(report.plan.partitions) == 1


def test_chain_and_tree_fuse_into_one_loop_broadcasts_materialize(config):
    model = make_model(
        [
            node("Mul", ["x", "scale"], "t0", name="mul"),
            node("Sigmoid", ["t0"], "t1", name="sig"),
            node("Mul", ["x", "t1"], "t2", name="silu"),
            node("Add", ["t2", "t0"], "t3", name="add"),
            # a tree on a smaller shape, broadcast into the big loop
            node("Sub", ["v", "w"], "s0", name="vsub"),
            node("Exp", ["s0"], "s1", name="vexp"),
            node("Div", ["t3", "s1"], "y", name="div"),
        ],
        {"x": [2, 6, 9, 11], "v": [6, 1, 1], "w": [6, 1, 1]},
        ["y", "t1"],
        constants={"scale": np.float32(1.5)},
    )
    (source,) = sources(model, config())
    kernels = re.findall(r"^static void (\w+)\(", source, re.M)
    assert kernels == ["ccompiler_0_kernel_0", "ccompiler_0_kernel_1"]
    subgraph = source.split("static int ccompiler_0_(")[1]
    assert (
        subgraph.count("malloc(") == 1
    )  # the small tree's result; the big chain stays in registers
    assert_matches_onnxruntime(model, config())


@pytest.mark.parametrize("shape", [[3, 70000], [1, 64, 33, 40], [70001]])
def test_openmp_on_large_tensors(shape, config):
    model = make_model(
        [node("Mul", ["x", "b"], "t"), node("Tanh", ["t"], "y")],
        {"x": shape, "b": [shape[-1]]},
        ["y"],
    )
    (source,) = sources(model, config())
    openmp = "-fopenmp" in byoc.compile(model, config()).steps[0].artifact.toolchain["cflags"]
    assert ("#pragma omp parallel for" in source) == openmp
    small = make_model(
        [node("Mul", ["x", "x"], "t"), node("Tanh", ["t"], "y")], {"x": [10, 10]}, ["y"]
    )
    assert "#pragma omp parallel" not in sources(small, config())[0]
    assert "#pragma omp simd" in sources(small, config())[0]
    assert_matches_onnxruntime(model, config())


def test_rank0_and_size1_constants(config):
    model = make_model(
        [node("Add", ["x", "c"], "t"), node("Mul", ["t", "t"], "y")],
        {"x": []},
        ["y"],
        constants={"c": np.array([[2.5]], np.float32)},
    )
    report = assert_matches_onnxruntime(model, config())
    assert len(report.plan.partitions) == 1


def test_symbolic_dims_are_refused_until_shapes_fix_them(config):
    model = make_model(
        [node("Add", ["x", "x"], "t"), node("Relu", ["t"], "y")], {"x": ["n", 8]}, ["y"]
    )
    plan = byoc.partition(model, config())
    assert not plan.partitions
    reasons = [r for b, r in plan.decisions["t"].refusals if b == "ccompiler"]
    assert "non-static shape" in reasons[0] and "[shapes]" in reasons[0]
    fixed = byoc.partition(model, config(shapes={"x": [3, 8]}))
    assert len(fixed.partitions) == 1


def test_ops_onnxruntime_fuses_stay_on_onnxruntime(config):
    w = np.random.default_rng(0).standard_normal((4, 3, 3, 3)).astype(np.float32)
    model = make_model(
        [
            node("Conv", ["x", "w"], "c", name="conv"),
            node("Relu", ["c"], "r", name="relu"),
            node("Mul", ["r", "r"], "m", name="sq"),
            node("Exp", ["m"], "y", name="exp"),
        ],
        {"x": [1, 3, 256, 256]},
        ["y"],
        constants={"w": w},
    )
    plan = byoc.partition(model, config())
    assert plan.decisions["relu"].backend == "onnxruntime"
    assert "onnxruntime fuses it" in plan.decisions["relu"].refusals[0][1]
    assert [p.nodes for p in plan.partitions] == [["sq", "exp"]]
    assert_matches_onnxruntime(model, config())


def test_small_partition_between_onnxruntime_nodes_is_pruned(config):
    w = np.ones((1, 1, 1, 1), np.float32)
    model = make_model(
        [
            node("Conv", ["x", "w"], "c", name="conv1"),
            node("Abs", ["c"], "a", name="abs"),
            node("Neg", ["a"], "n", name="neg"),
            node("Conv", ["n", "w"], "y", name="conv2"),
        ],
        {"x": [1, 1, 4, 4]},
        ["y"],
        constants={"w": w},
    )
    plan = byoc.partition(model, config())
    assert not plan.partitions
    assert any("pruned" in r for _, r in plan.decisions["abs"].refusals)


def test_cli_dump_dir_writes_the_c_source(tmp_path, cache):
    import onnx

    onnx.save(guide_model(), tmp_path / "guide.onnx")
    (tmp_path / "byoc.toml").write_text(
        f'backends = ["ccompiler"]\n[backend.ccompiler]\ncache_dir = "{cache}"\n'
        '[compile]\nplacement = "static"\n'
    )
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "byoc.cli",
            "compile",
            str(tmp_path / "guide.onnx"),
            "-c",
            str(tmp_path / "byoc.toml"),
            "--dump-dir",
            str(tmp_path / "out"),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-500:]
    source = (tmp_path / "out" / "ccompiler_0.c").read_text()
    assert exported(source) == ["ccompiler_0"]


SPECIAL = np.array(  # the edges, then a grid over the range that matters
    [*np.linspace(-9, 9, 361),
     -np.inf, -100, -88.8, -88.5, -87.5, -20, -8, -7.9, -1, -1e-3, -1e-40, 0, 1e-40, 1e-30, 1e-7,
     0.3, 0.5, 0.7, 1, 2.5, 7.9, 8, 10, 20, 87.5, 88.5, 88.7, 88.8, 100, np.inf, np.nan],
    np.float32,
)  # fmt: skip
_erf = np.vectorize(math.erf)
TINY = 1.2e-38  # FLT_MIN: results below it (subnormals) may flush to 0
REFERENCE = {  # float64 truth, and an absolute tolerance where relative error is not promised
    "Exp": (np.exp, TINY),
    "Log": (lambda x: np.log(np.where(x < 0, np.nan, x)), TINY),
    "Tanh": (np.tanh, TINY),
    "Sigmoid": (lambda x: 1 / (1 + np.exp(-x)), 1e-37),  # the tails: off by subnormals
    "Erf": (lambda x: np.where(np.isnan(x), np.nan, _erf(np.nan_to_num(x))), 4e-7),
    "Softplus": (lambda x: np.logaddexp(0, x), TINY),
}


@pytest.mark.parametrize("op", sorted(REFERENCE))
def test_math_helpers_on_special_values(op, config):
    """inf, NaN, subnormals, the edges of each helper's range and a grid: a few ulp from float64."""
    model = make_model(
        [node("Identity", ["x"], "t"), node(op, ["t"], "y"), node("Identity", ["y"], "z")],
        {"x": [len(SPECIAL)]},
        ["z"],
    )
    compiled = byoc.compile(model, config(keep_onnxruntime_fusions=False))
    assert [s.unit.backend for s in compiled.steps] == ["ccompiler"]
    with np.errstate(all="ignore"):
        got = compiled.run({"x": SPECIAL})["z"].astype(np.float64)
        function, atol = REFERENCE[op]
        want = function(SPECIAL.astype(np.float64)).astype(np.float32).astype(np.float64)
    np.testing.assert_allclose(got, want, rtol=3e-6, atol=atol, equal_nan=True, err_msg=op)
