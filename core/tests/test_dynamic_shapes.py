"""A model compiled for [shapes] runs other shapes its symbolic dims allow, compiling once each."""

from __future__ import annotations

import logging
import threading

import byoc
import numpy as np
import onnxruntime as ort
import pytest
from byoc.testing.build import make_model, node

CFG = {
    "backends": ["examplejson"],
    "backend": {"examplejson": {"ops": ["Add", "Mul", "Relu"]}},
    "shapes": {"x": [1, 4]},
}


def model():
    return make_model(
        [
            node("Add", ["x", "y"], "a"),
            node("Tanh", ["a"], "t"),
            node("Mul", ["t", "y"], "m"),
            node("Relu", ["m"], "r"),
        ],
        {"x": ["N", 4], "y": [1, 4]},
        ["r", "t"],
    )


def inputs(n: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(n)
    return {
        "x": rng.standard_normal((n, 4)).astype(np.float32),
        "y": rng.standard_normal((1, 4)).astype(np.float32),
    }


def onnxruntime(feeds):
    session = ort.InferenceSession(model().SerializeToString(), providers=["CPUExecutionProvider"])
    return dict(zip(["r", "t"], session.run(["r", "t"], feeds), strict=True))


def compiles(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if "compiling for new input" in r.getMessage()]


def test_other_batch_sizes_compile_lazily_and_match_onnxruntime(caplog):
    compiled = byoc.compile(model(), CFG)
    caplog.set_level(logging.INFO, logger="byoc")
    compiled.run(inputs(1))
    assert compiles(caplog) == []  # the shapes it was compiled for
    for n in (2, 3, 2):
        got = compiled.run(inputs(n))
        for name, want in onnxruntime(inputs(n)).items():
            np.testing.assert_allclose(got[name], want, rtol=1e-5, atol=1e-6)
            assert got[name].shape[0] == n
    assert compiles(caplog) == [
        "compiling for new input shapes x=[2, 4] (1 of 8 cached)",
        "compiling for new input shapes x=[3, 4] (2 of 8 cached)",
    ]
    assert compiled._shapes is not None
    assert compiled._shapes.cached() == [(("x", (3, 4)),), (("x", (2, 4)),)]


def test_a_wrong_static_dim_is_still_an_input_error():
    compiled = byoc.compile(model(), CFG)
    bad = {**inputs(2), "x": np.zeros((2, 5), np.float32)}
    with pytest.raises(byoc.InputError, match=r"expects \('N', 4\) \(dim 1 must be 4\)"):
        compiled.run(bad)
    with pytest.raises(byoc.InputError, match="dtype float64"):
        compiled.run({**inputs(2), "x": np.zeros((2, 4), np.float64)})


def test_shape_cache_is_bounded_and_can_be_turned_off(caplog):
    caplog.set_level(logging.INFO, logger="byoc")
    compiled = byoc.compile(model(), {**CFG, "compile": {"shape_cache": 2}})
    for n in (2, 3, 4, 2):
        compiled.run(inputs(n))
    assert compiled._shapes is not None
    assert [key[0][1][0] for key in compiled._shapes.cached()] == [4, 2]
    assert len(compiles(caplog)) == 4  # 2 was evicted by 4, then compiled again
    off = byoc.compile(model(), {**CFG, "compile": {"shape_cache": 0}})
    with pytest.raises(byoc.InputError, match=r"dim 0 must be 1"):
        off.run(inputs(2))
    with pytest.raises(byoc.ConfigError, match="shape_cache"):
        byoc.compile(model(), {**CFG, "compile": {"shape_cache": -1}})


def test_many_threads_asking_for_one_new_shape_compile_it_once(caplog):
    caplog.set_level(logging.INFO, logger="byoc")
    compiled = byoc.compile(model(), CFG)
    want = onnxruntime(inputs(5))
    errors: list[BaseException] = []

    def work():
        try:
            got = compiled.run(inputs(5))
            np.testing.assert_allclose(got["r"], want["r"], rtol=1e-5, atol=1e-6)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert len(compiles(caplog)) == 1


def test_profile_times_every_step_also_on_a_new_shape():
    compiled = byoc.compile(model(), CFG)
    outputs, times = compiled.profile(inputs(3))
    assert outputs["r"].shape == (3, 4)
    assert [s.unit.name for s, _ in times] == ["examplejson_0", "onnxruntime_0", "examplejson_1"]
    assert all(seconds >= 0 for _, seconds in times)
