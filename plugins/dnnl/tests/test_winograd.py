"""dnnl: 3x3 stride-1 convolutions of 64 or more channels run as Winograd F(4x4, 3x3) on AVX-512
(shim.cpp's lower_winograd), 3-tap Conv1d of 128 or more as F(4, 3), with their post-ops, and
match onnxruntime; others keep oneDNN's direct kernel."""

from __future__ import annotations

import itertools

import byoc
import numpy as np
import pytest
from byoc.testing import assert_matches_onnxruntime
from byoc.testing.build import make_model, node

from .helpers import DNNL, RNG, assert_thread_safe, cpu_has, dnnl_impls

STATIC = {**DNNL, "compile": {"placement": "static"}}
needs_avx512 = pytest.mark.skipif(not cpu_has("avx512f"), reason="Winograd runs on AVX-512 only")


def weights(k: int, c: int) -> np.ndarray:
    return (RNG.standard_normal((k, c, 3, 3)) * (2.0 / (9 * c)) ** 0.5).astype(np.float32)


def winograd_steps(model, config=STATIC) -> list[str]:  # type: ignore[no-untyped-def]
    impls = dnnl_impls(byoc.compile(model, config))
    return [i for i in impls if i.startswith("convolution")]


@needs_avx512
@pytest.mark.parametrize(
    ("shape", "pads"),
    [
        ((1, 64, 24, 24), [1, 1, 1, 1]),
        ((2, 64, 15, 13), [1, 1, 1, 1]),
        ((1, 128, 20, 19), [0, 2, 1, 0]),
    ],
)
def test_resnet_blocks_run_as_winograd_and_match_onnxruntime(shape: tuple, pads: list) -> None:
    """Conv + ReLU, conv + residual add + ReLU (a sum), conv + Clip, conv + SiLU, + HardSwish,
    + Sigmoid, all applied by the output transform (no kernel after it); outputs that are not a
    multiple of the 4x4 tile, a batch of two, uneven padding."""
    c = shape[1]
    nodes = [
        node("Conv", ["x", "w0", "b0"], "h", pads=[1, 1, 1, 1]),
        node("Relu", ["h"], "h1"),
        node("Conv", ["h1", "w1", "b1"], "c1", pads=[1, 1, 1, 1]),
        node("Add", ["c1", "x"], "r1"),
        node("Relu", ["r1"], "y1"),
        node("Conv", ["y1", "w2"], "c2", pads=pads),
        node("Clip", ["c2", "lo", "hi"], "y2"),
        node("Conv", ["y2", "w3", "b1"], "c3", pads=[1, 1, 1, 1]),
        node("Sigmoid", ["c3"], "s3"),
        node("Mul", ["c3", "s3"], "y3"),
        node("Conv", ["y3", "w4"], "c4", pads=[1, 1, 1, 1]),
        node("HardSwish", ["c4"], "y4"),
        node("Conv", ["y4", "w5"], "c5", pads=[1, 1, 1, 1]),
        node("Sigmoid", ["c5"], "y"),
    ]
    consts = {
        "w0": weights(c, c),
        "b0": RNG.standard_normal(c).astype(np.float32),
        "w1": weights(c, c),
        "b1": RNG.standard_normal(c).astype(np.float32),
        "w2": weights(c, c),
        "w3": weights(c, c),
        "w4": weights(c, c),
        "w5": weights(c, c),
        "lo": np.array(0, np.float32),
        "hi": np.array(6, np.float32),
    }
    model = make_model(nodes, {"x": list(shape)}, ["y"], consts)
    assert_matches_onnxruntime(model, STATIC)
    impls = dnnl_impls(byoc.compile(model, STATIC))
    convs = [i for i in impls if i.startswith("convolution")]
    assert len(convs) == 6 and all("winograd" in i for i in convs), impls
    assert not any(i.startswith(("binary", "eltwise")) for i in impls), impls


@needs_avx512
@pytest.mark.parametrize(("shape", "pads"), [((1, 128, 203), [1, 1]), ((2, 128, 50), [2, 0])])
def test_3_tap_conv1d_runs_as_winograd_f43(shape: tuple, pads: list) -> None:
    """A 1-D residual block (ReLU, then a sum and SiLU): lengths that are not a multiple of the
    4-output tile, a batch of two, causal padding."""
    c = shape[1]
    w = [(RNG.standard_normal((c, c, 3)) * (2.0 / (3 * c)) ** 0.5).astype(np.float32)] * 2
    nodes = [
        node("Conv", ["x", "w0", "b0"], "h", pads=pads),
        node("Relu", ["h"], "h1"),
        node("Conv", ["h1", "w1"], "c1", pads=pads),
        node("Add", ["c1", "x"], "r"),
        node("Sigmoid", ["r"], "s"),
        node("Mul", ["r", "s"], "y"),
    ]
    consts = {"w0": w[0], "b0": RNG.standard_normal(c).astype(np.float32), "w1": w[1]}
    model = make_model(nodes, {"x": list(shape)}, ["y"], consts)
    assert_matches_onnxruntime(model, STATIC)
    convs = winograd_steps(model)
    assert len(convs) == 2 and all("winograd F(4,3)" in i for i in convs), convs


@needs_avx512
def test_a_residual_read_again_later_is_added_not_accumulated() -> None:
    """x + conv(x) where a later layer reads x again: the addend is read, never written. A
    product with x is not among the output transform's post-ops: a binary kernel applies it."""
    nodes = [
        node("Conv", ["x", "w0"], "c0", pads=[1, 1, 1, 1]),
        node("Add", ["x", "c0"], "r"),
        node("Conv", ["r", "w1"], "c1", pads=[1, 1, 1, 1]),
        node("Mul", ["c1", "x"], "y"),
    ]
    consts = {"w0": weights(64, 64), "w1": weights(64, 64)}
    model = make_model(nodes, {"x": [1, 64, 20, 20]}, ["y"], consts)
    assert_matches_onnxruntime(model, STATIC)
    impls = dnnl_impls(byoc.compile(model, STATIC))
    kinds = [i.split()[0] + (" winograd" if "winograd" in i else "") for i in impls]
    assert kinds.count("convolution winograd") == 2 and "convolution" not in kinds, impls
    assert ("convolution winograd", "binary") in itertools.pairwise(kinds), impls


@needs_avx512
def test_a_partition_winograd_rounds_too_far_runs_with_the_direct_kernels() -> None:
    """At atol 5e-6 (rtol 0), Winograd's rounding (about 2e-5 off here) fails measured
    placement's check and the direct kernels' (about 1e-6) passes: the partition is compiled
    again with winograd = false (dnnl's exact options), not returned to onnxruntime."""
    nodes = [
        node("Conv", ["x", "w0"], "c0", pads=[1, 1, 1, 1]),
        node("Relu", ["c0"], "r0"),
        node("Conv", ["r0", "w1"], "c1", pads=[1, 1, 1, 1]),
        node("Relu", ["c1"], "r1"),
        node("Conv", ["r1", "w2"], "y", pads=[1, 1, 1, 1]),
    ]
    consts = {f"w{i}": weights(64, 64) for i in range(3)}
    model = make_model(nodes, {"x": [1, 64, 32, 32]}, ["y"], consts)
    config = {
        **DNNL,
        "compile": {"placement": "measured", "whole_model_fallback": False},
        "compare": {"rtol": 0.0, "atol": 5e-6},
    }
    compiled = byoc.compile(model, config)
    (m,) = compiled.plan.placement.measurements
    assert m.failure is None, m.failure
    assert "with winograd = False (with its faster kernels: output 'y' differs" in (
        m.precision_note
    )
    if m.kept:
        assert compiled.steps[0].unit.options == {"winograd": False}
        convs = [i for i in dnnl_impls(compiled) if i.startswith("convolution")]
        assert convs and not any("winograd" in i for i in convs), convs


@needs_avx512
@pytest.mark.parametrize("threads", [1, 8])
def test_concurrent_runs_each_transform_in_their_own_buffers(threads: int) -> None:
    """Each run's transformed tiles live in its own arena: four threads at once give what one
    at a time gives, with one OpenMP thread per run or more threads than cores."""
    nodes = [
        node("Conv", ["x", "w0"], "c0", pads=[1, 1, 1, 1]),
        node("Relu", ["c0"], "r"),
        node("Conv", ["r", "w1"], "y", pads=[1, 1, 1, 1]),
    ]
    consts = {"w0": weights(64, 64), "w1": weights(64, 64)}
    model = make_model(nodes, {"x": [1, 64, 32, 32]}, ["y"], consts)
    config = {**STATIC, "backend": {"dnnl": {"threads": threads}}}
    compiled = byoc.compile(model, config)
    assert all("winograd" in i for i in dnnl_impls(compiled) if i.startswith("conv"))
    xs = [RNG.standard_normal((1, 64, 32, 32)).astype(np.float32) for _ in range(4)]
    assert_thread_safe(compiled, xs)


@pytest.mark.parametrize(
    ("shape", "w_shape", "attrs"),
    [
        ((1, 32, 40, 40), (32, 32, 3, 3), {"pads": [1, 1, 1, 1]}),  # too few channels
        ((1, 64, 8, 8), (64, 64, 3, 3), {"pads": [1, 1, 1, 1]}),  # 4 tiles: weight-bound
        ((1, 64, 40, 40), (64, 64, 3, 3), {"pads": [1, 1, 1, 1], "strides": [2, 2]}),
        ((1, 64, 40, 40), (64, 64, 3, 3), {"pads": [2, 2, 2, 2], "dilations": [2, 2]}),
        ((1, 64, 40, 40), (64, 32, 3, 3), {"pads": [1, 1, 1, 1], "group": 2}),
        ((1, 64, 40, 40), (64, 64, 5, 5), {"pads": [2, 2, 2, 2]}),
        ((1, 64, 400), (64, 64, 3), {"pads": [1, 1]}),  # 1-D: too few channels
        ((1, 128, 400), (128, 128, 3), {"pads": [1, 1], "strides": [2]}),
        ((1, 128, 400), (128, 128, 5), {"pads": [2, 2]}),
    ],
)
def test_other_convolutions_keep_the_direct_kernel(
    shape: tuple, w_shape: tuple, attrs: dict
) -> None:
    w = (RNG.standard_normal(w_shape) * 0.05).astype(np.float32)
    model = make_model(
        [node("Conv", ["x", "w"], "y", **attrs)], {"x": list(shape)}, ["y"], {"w": w}
    )
    assert_matches_onnxruntime(model, STATIC)
    convs = winograd_steps(model)
    assert convs and not any("winograd" in i for i in convs), convs


@needs_avx512
def test_winograd_false_keeps_the_direct_kernel() -> None:
    model = make_model(
        [node("Conv", ["x", "w"], "y", pads=[1, 1, 1, 1])],
        {"x": [1, 64, 24, 24]},
        ["y"],
        {"w": weights(64, 64)},
    )
    config = {**STATIC, "backend": {"dnnl": {"winograd": False}}}
    assert_matches_onnxruntime(model, config)
    convs = winograd_steps(model, config)
    assert convs and not any("winograd" in i for i in convs), convs
    assert all("winograd" in i for i in winograd_steps(model)), winograd_steps(model)
