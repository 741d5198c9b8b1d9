"""Run-time input validation: every wrong input is an InputError naming the input, before any
backend runs; odd but valid layouts reach the backends as C-ordered, native-endian arrays."""

from __future__ import annotations

import byoc
import numpy as np
import onnx
import pytest
from byoc.cli import main
from byoc.testing.build import make_model, node
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

CFG = {"backends": ["examplejson"]}


@pytest.fixture(scope="module")
def compiled():
    m = make_model(
        [node("Add", ["x", "y"], "a"), node("Relu", ["a"], "r"), node("Cast", ["n"], "c", to=1)],
        {"x": ["N", 3], "y": ["N", 3], "n": (np.int64, [2])},
        ["r", "c"],
    )
    return byoc.compile(m, CFG)


def ok(**over):
    inputs = {
        "x": np.ones((2, 3), np.float32),
        "y": np.ones((2, 3), np.float32),
        "n": np.array([1, 2], np.int64),
    }
    inputs.update(over)
    return inputs


BAD = [
    (ok(z=np.ones(1)), "unknown input 'z'"),
    ({"x": np.ones((2, 3), np.float32)}, "missing input 'y', 'n'"),
    (ok(x=np.ones((2, 3), np.float64)), "input 'x' has dtype float64 but the model expects"),
    (ok(x=np.ones((2, 3, 1), np.float32)), "input 'x' has shape (2, 3, 1) (rank 3)"),
    (ok(x=np.ones(3, np.float32)), "(rank 1) but the model expects ('N', 3) (rank 2)"),
    (ok(x=np.ones((2, 4), np.float32)), "dim 1 must be 3"),
    (ok(n=np.ones(3, np.int64)), "input 'n' has shape (3,) but the model expects (2,)"),
    (ok(y=np.ones((5, 3), np.float32)), "symbolic dim 'N': 2 in input 'x' but 5 in input 'y'"),
    (ok(x=None), "input 'x' is a NoneType, not an array"),
    (ok(x="abc"), "input 'x' is a str, not an array"),
    (ok(x={"a": 1}), "input 'x' is a dict, not an array"),
    (ok(x=np.array([[object()] * 3] * 2)), "input 'x' has dtype object"),
    (ok(n=[1.5, 2.5]), "input 'n' is a list of float64 values; the model expects int64"),
    (ok(x=[[1, 2], [3]]), "input 'x' is not an array"),
    (ok(x=np.zeros((2, 3), [("a", "f4")])), "input 'x' has dtype"),
    ([np.ones(3)], "inputs must be a dict"),
]


@pytest.mark.parametrize(("inputs", "words"), BAD, ids=[w[:40] for _, w in BAD])
def test_wrong_inputs_are_input_errors_naming_the_input(compiled, inputs, words):
    with pytest.raises(byoc.InputError) as err:
        compiled.run(inputs)
    assert words in str(err.value)


def test_input_error_is_raised_before_any_backend_runs(compiled, monkeypatch):
    ran = []
    for step in compiled.steps:
        monkeypatch.setattr(step, "runtime", _Spy(step.runtime, ran))
    with pytest.raises(byoc.InputError):
        compiled.run(ok(n=np.ones(3, np.int64)))
    assert ran == []
    compiled.run(ok())
    assert ran


class _Spy:
    def __init__(self, inner, log):
        self.inner, self.log = inner, log

    def run(self, args):
        self.log.append(args)
        for a in args:
            assert a.flags.c_contiguous and a.flags.aligned and a.dtype.isnative
        return self.inner.run(args)


def test_odd_layouts_reach_backends_contiguous_and_native(compiled, monkeypatch):
    ran: list = []
    for step in compiled.steps:
        monkeypatch.setattr(step, "runtime", _Spy(step.runtime, ran))
    x = np.arange(12, dtype=np.float32).reshape(3, 4)[:2, 1:]  # a strided view
    y = np.ones((3, 2), np.float32).T  # Fortran order
    n = np.array([1, 2], ">i8")  # big-endian
    out = compiled.run({"x": x, "y": y, "n": n})
    np.testing.assert_array_equal(out["r"], np.maximum(x + 1, 0))
    np.testing.assert_array_equal(out["c"], [1.0, 2.0])
    assert ran


def test_numbers_and_lists_convert_when_nothing_is_lost(compiled):
    out = compiled.run(ok(x=[[1, 2, 3], [4, 5, 6]], n=[3, 4]))
    np.testing.assert_array_equal(out["r"], [[2, 3, 4], [5, 6, 7]])
    np.testing.assert_array_equal(out["c"], [3, 4])


def test_cli_run_with_a_wrong_input_prints_one_line_and_exits_2(tmp_path, capsys):
    model = make_model([node("Relu", ["x"], "r")], {"x": [2, 3]}, ["r"])
    path = tmp_path / "m.onnx"
    path.write_bytes(model.SerializeToString())
    np.save(tmp_path / "x.npy", np.ones((2, 3), np.float64))
    np.save(tmp_path / "o.npy", np.array([object()]), allow_pickle=True)
    for arg in (f"x={tmp_path / 'x.npy'}", f"x={tmp_path / 'o.npy'}", f"q={tmp_path / 'x.npy'}"):
        assert main(["run", str(path), "-c", str(_cfg(tmp_path)), "--input", arg]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("byoc: error: ") and "\n" not in err, err
        assert "'x'" in err or "'q'" in err


def _cfg(tmp_path):
    path = tmp_path / "byoc.toml"
    path.write_text('backends = ["examplejson"]\n')
    return path


arrays = hnp.arrays(
    dtype=st.sampled_from([np.float32, np.float64, np.int64, np.int32, np.bool_, ">f4", "<f4"]),
    shape=hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=4),
)


@settings(max_examples=80, deadline=None, derandomize=True)
@given(x=arrays, y=arrays, transpose=st.booleans())
def test_any_array_either_runs_or_is_an_input_error(compiled, x, y, transpose):
    if transpose:
        x = x.T
    try:
        out = compiled.run(ok(x=x, y=y))
    except byoc.InputError as exc:
        assert "'x'" in str(exc) or "'y'" in str(exc)
        return
    np.testing.assert_array_equal(out["r"], np.maximum(x.astype(np.float32) + y, 0))


def embedding():
    """token ids index a 30-row table, token types a 2-row one; the mask is cast to float."""
    rng = np.random.default_rng(0)
    return make_model(
        [
            node("Gather", ["words", "ids"], "w"),
            node("Unsqueeze", ["types", "axes"], "types3"),
            node("Squeeze", ["types3", "axes"], "types2"),
            node("Gather", ["segments", "types2"], "s"),
            node("Add", ["w", "s"], "e"),
            node("Cast", ["mask"], "m", to=onnx.TensorProto.FLOAT),
            node("Unsqueeze", ["m", "last"], "m3"),
            node("Mul", ["e", "m3"], "y"),
        ],
        {"ids": (np.int64, [1, 16]), "types": (np.int64, [1, 16]), "mask": (np.int64, [1, 16])},
        ["y"],
        constants={
            "words": rng.standard_normal((30, 8)).astype(np.float32),
            "segments": rng.standard_normal((2, 8)).astype(np.float32),
            "axes": np.array([0], np.int64),
            "last": np.array([-1], np.int64),
        },
    )


def test_random_integer_inputs_are_valid_where_the_graph_says_what_they_index():
    inputs = byoc.random_inputs(embedding(), seed=3)
    assert inputs["ids"].max() < 30 and inputs["types"].max() < 2
    assert set(np.unique(inputs["mask"])) <= {0, 1}
    assert len(np.unique(inputs["ids"])) > 2  # still random
    byoc.compare(embedding(), {"backends": []})  # onnxruntime runs on them


def test_a_model_whose_integer_input_indexes_an_embedding_is_measured(monkeypatch, tmp_path):
    from byoc import placement

    monkeypatch.setattr(placement.cache, "cache_root", lambda: tmp_path)
    cfg = {"backends": ["examplejson"], "compile": {"placement": "measured"}}
    compiled = byoc.compile(embedding(), cfg)
    placed = compiled.plan.placement
    assert not placed.note  # measured, not skipped
    assert placed.measurements and all(m.failure is None for m in placed.measurements)


def test_a_random_integer_divisor_is_never_zero():
    m = make_model(
        [node("Reshape", ["d", "shape"], "d2"), node("Div", ["n", "d2"], "q")],
        {"n": (np.int64, [64]), "d": (np.int64, [8, 8])},
        ["q"],
        constants={"shape": np.array([64], np.int64)},
    )
    inputs = byoc.random_inputs(m)
    assert inputs["d"].min() >= 1 and inputs["n"].min() == 0
    byoc.compare(m, {"backends": []})  # onnxruntime runs on them


def test_random_indices_of_scatters_and_nd_gathers_stay_inside_the_data():
    """A graph net's edge indices go to ScatterElements (index_add, scatter_reduce) and
    GatherND or ScatterND take index tuples: random ones of [0, 10) fell outside a 3-node
    graph, and onnxruntime failed ("indices element out of data bounds")."""
    m = make_model(
        [
            node("ScatterElements", ["h", "edges", "msg"], "agg", axis=0, reduction="add"),
            node("GatherND", ["agg", "pairs"], "picked"),
            node("ScatterND", ["agg", "pairs", "upd"], "y"),
        ],
        {
            "h": [3, 4],
            "edges": (np.int64, [6, 4]),
            "msg": [6, 4],
            "pairs": (np.int64, [5, 2]),
            "upd": [5],
        },
        ["picked", "y"],
    )
    inputs = byoc.random_inputs(m, seed=1)
    assert inputs["edges"].max() < 3 and inputs["pairs"].max() < 3  # both dims: 3 and 4
    byoc.compare(m, {"backends": []}, inputs)  # onnxruntime runs on them


def test_a_random_k_of_top_k_takes_at_least_one():
    """TopK's K as a model input: a random K of 0 returned empty outputs, and compare passed
    having compared nothing. K is 1 to the size of the axis."""
    m = make_model(
        [node("TopK", ["x", "k"], ["v", "i"], axis=1)],
        {"x": [3, 5], "k": (np.int64, [1])},
        ["v", "i"],
    )
    ks = [int(byoc.random_inputs(m, seed=s)["k"][0]) for s in range(20)]
    assert min(ks) >= 1 and max(ks) <= 5
    report = byoc.compare(m, {"backends": []})
    assert report.passed and all(o.shape[1] >= 1 for o in report.outputs)


def test_random_inputs_onnxruntime_fails_on_are_named_with_what_to_do(tmp_path, capsys):
    """A Reshape whose shape is a model input: random values cannot be a valid shape, and the
    error says which inputs byoc made (the integer ones) and how to give valid ones."""
    m = make_model(
        [node("Reshape", ["x", "shape"], "y")],
        {"x": [2, 6], "shape": (np.int64, [2])},
        ["y"],
    )
    with pytest.raises(byoc.ModelError, match=r"byoc made 'shape' at random.*--input NAME=FILE"):
        byoc.compare(m, {"backends": []})
    with pytest.raises(byoc.ModelError) as given:  # the user's own: no advice
        byoc.compare(m, {"backends": []}, {"shape": np.array([5, 5])})
    assert "at random" not in str(given.value)
    path = byoc.compile(m, {"backends": []}).save(tmp_path / "m.byoc")  # run says so too
    assert main(["run", str(path)]) == 2
    assert "byoc made 'shape' at random" in capsys.readouterr().err


def test_a_saved_model_keeps_its_input_ranges_for_run_without_inputs(tmp_path):
    path = byoc.compile(embedding(), {"backends": []}).save(tmp_path / "e.byoc")
    loaded = byoc.load(path)
    assert loaded.input_ranges == {"ids": (0, 30), "types": (0, 2), "mask": (0, 2)}
    assert main(["run", str(path)]) == 0  # random ids inside the 30-row table
