"""The conformance suite's special-value and integer-edge cases (byoc.testing.ops), and its
verdicts: a wrong backend fails, a known failure is a strict xfail."""

from __future__ import annotations

import numpy as np
import pytest
from byoc.testing import conformance
from byoc.testing.ops import edge_feeds, integer_case, integer_edges, special_feeds

CONFIG = {
    "backends": ["examplejson"],
    "backend": {"examplejson": {"min_partition_nodes": 1, "prune": False}},
    "compile": {"placement": "static"},
}


def test_special_feeds_pair_every_special_with_every_kind_of_value():
    feeds = {"a": np.ones(8, np.float32), "b": np.ones(8, np.float32), "i": np.arange(8)}
    out = special_feeds(feeds, "NaN")
    a, b = np.isnan(out["a"]), np.isnan(out["b"])
    assert a.tolist() == [True, False] * 4
    assert {(x, y) for x, y in zip(a, b, strict=True)} == {(1, 1), (0, 1), (1, 0), (0, 0)}
    assert out["i"] is feeds["i"] and not np.isnan(feeds["a"]).any()
    sub = special_feeds(feeds, "subnormal")["a"][::2]
    assert (np.abs(sub) > 0).all() and (np.abs(sub) < np.finfo(np.float32).tiny).all()


def test_edge_feeds_meet_in_every_pair_and_spare_the_divisor():
    edges = integer_edges(np.int64)
    feeds = {"a": np.zeros(81, np.int64), "b": np.zeros(81, np.int64)}
    out = edge_feeds(feeds)
    assert len(set(zip(out["a"].tolist(), out["b"].tolist(), strict=True))) == len(edges) ** 2
    divided = edge_feeds(feeds, divisor="b")["b"]
    assert 0 not in divided and -1 not in divided and np.iinfo(np.int64).max in divided


def test_integer_cases_exist_where_onnx_defines_them():
    clip = integer_case("Clip", np.int32)
    assert clip is not None and [s.value.tolist() for s in clip.inputs[1:]] == [-1, 1]
    assert integer_case("Relu", np.int64) is not None
    assert integer_case("Sigmoid", np.int32) is None  # float only
    assert integer_case("Not", np.int32) is None  # no float input to make integer


def test_a_backend_that_drops_nan_fails_and_a_known_failure_is_a_strict_xfail(monkeypatch):
    from byoc_examplejson import ops

    monkeypatch.setitem(ops.KERNELS, "relu", lambda x: np.fmax(x, np.float32(0)))  # NaN -> 0
    run = conformance.test_claimed_ops_on_special_values
    with pytest.raises(AssertionError, match="Relu on NaN"):
        run("examplejson", CONFIG, (1e-4, 1e-5), {})
    with pytest.raises(pytest.xfail.Exception, match="Relu on NaN: drops NaN"):
        run("examplejson", CONFIG, (1e-4, 1e-5), {("Relu", "NaN"): "drops NaN"})
    monkeypatch.undo()
    with pytest.raises(AssertionError, match=r"pass now \(strict\): Relu on NaN"):
        run("examplejson", CONFIG, (1e-4, 1e-5), {("Relu", "NaN"): "drops NaN"})
