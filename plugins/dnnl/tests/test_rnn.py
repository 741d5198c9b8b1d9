"""dnnl: the rnn kind: bidirectional LSTM and GRU."""

from __future__ import annotations

import os

import byoc
import numpy as np
import onnx
import pytest
from byoc.testing import assert_matches_onnxruntime
from byoc.testing.build import make_model, node
from byoc_dnnl import plugin

from .helpers import DNNL, assert_thread_safe, claimed, dnnl_kinds, dnnl_step, rand, replace_graph


def recurrent(
    op: str,
    *,
    steps: int = 7,
    batch: int = 1,
    hidden: int = 6,
    bias: bool = True,
    states: tuple[str, ...] = (),
    outputs: tuple[str, ...] = ("y",),
    extra: dict | None = None,
    **attrs: object,
) -> onnx.ModelProto:
    """One LSTM or GRU (bidirectional unless ``attrs`` say otherwise) over x [steps, batch, 5]:
    ``states`` names the initial ones it reads ("h0", "c0"), ``outputs`` the ones the model
    returns ("y", "y_h", "y_c"); ``extra`` adds inputs by position (4: sequence_lens, 7: P)."""
    dirs = 2 if attrs.setdefault("direction", "bidirectional") == "bidirectional" else 1
    gates = 4 if op == "LSTM" else 3
    consts = {
        "w": rand(dirs, gates * hidden, 5) * 0.5,
        "r": rand(dirs, gates * hidden, hidden) * 0.5,
    }
    ins = ["x", "w", "r", ""]
    if bias:
        consts["b"] = rand(dirs, 2 * gates * hidden) * 0.5
        ins[3] = "b"
    ins += ["", "h0" if "h0" in states else "", "c0" if "c0" in states else ""]
    for i, value in (extra or {}).items():
        ins += [""] * (i + 1 - len(ins))
        ins[i] = f"extra{i}"
        consts[f"extra{i}"] = value
    while not ins[-1]:
        ins.pop()
    names = ["y", "y_h", "y_c"][: 3 if op == "LSTM" else 2]
    outs = [n if n in outputs else "" for n in names]
    while not outs[-1]:
        outs.pop()
    inputs = {"x": [steps, batch, 5], **{s: [dirs, batch, hidden] for s in states}}
    attrs.setdefault("hidden_size", hidden)
    rnn = node(op, ins, outs, name="rnn", **attrs)
    return make_model([rnn], inputs, list(outputs), consts, opset=14)


@pytest.mark.parametrize(
    ("op", "kwargs"),
    [
        ("LSTM", {}),
        ("LSTM", {"batch": 3, "states": ("h0", "c0"), "outputs": ("y", "y_h")}),
        ("LSTM", {"batch": 2, "states": ("h0",), "bias": False}),
        ("LSTM", {"states": ("c0",), "outputs": ("y_h",), "extra": {4: np.full(1, 7, np.int32)}}),
        ("GRU", {"linear_before_reset": 1, "outputs": ("y", "y_h")}),
        ("GRU", {"batch": 2, "states": ("h0",), "hidden": 16}),
        ("LSTM", {"extra": {7: np.zeros((2, 18), np.float32)}, "threads": 1}),
        ("GRU", {"linear_before_reset": 1, "threads": 1}),
    ],
)
def test_bidirectional_lstm_and_gru_match_onnxruntime(op: str, kwargs: dict) -> None:
    """A bidirectional LSTM or GRU (either GRU formula; with or without bias and initial
    states; Y_h read) is one rnn kernel, matching onnxruntime. Its two directions run at once,
    one thread each, unless the backend may use only one thread."""
    threads = kwargs.pop("threads", 0)
    config = {**DNNL, "backend": {"dnnl": {"threads": threads}}}
    report = assert_matches_onnxruntime(recurrent(op, **kwargs), config)
    claimed(report, op)
    compiled = byoc.compile(recurrent(op, **kwargs), {**config, "compile": {"placement": "static"}})
    assert dnnl_kinds(compiled)[0] == "rnn"
    runtime = dnnl_step(compiled).runtime
    rnn = [i for i, (_, impl) in enumerate(runtime.implementations()) if impl.startswith("rnn")]
    assert len(rnn) == 2
    if threads != 1 and os.cpu_count() != 1:
        assert [runtime.kernel_threads()[i] for i in rnn] == [1, 1]


@pytest.mark.parametrize(
    ("op", "kwargs", "reason"),
    [
        ("LSTM", {"direction": "forward"}, "one-direction RNN"),
        ("GRU", {"direction": "reverse"}, "one-direction RNN"),
        ("LSTM", {"clip": 3.0}, "clip and input_forget"),
        ("LSTM", {"input_forget": 1}, "clip and input_forget"),
        ("GRU", {"activations": ["Relu", "Tanh"] * 2}, "only the defaults"),
        ("LSTM", {"layout": 1, "states": ()}, "layout=1"),
        ("LSTM", {"outputs": ("y", "y_c")}, "Y_c (the last cell state) is read"),
        ("GRU", {"extra": {4: np.full(1, 5, np.int32)}}, "sequence_lens"),
        ("LSTM", {"extra": {7: np.ones((2, 18), np.float32)}}, "peepholes"),
        ("GRU", {"hidden_size": 5}, "W, R or B do not fit X [7, 1, 5] and hidden_size 5"),
    ],
)
def test_rnn_the_backend_cannot_run_as_onnx_says_is_refused_with_reason(
    op: str, kwargs: dict, reason: str
) -> None:
    """One direction (onnxruntime is faster), clip, input_forget, other activations, batch
    first, a read Y_c, shorter sequences, peepholes and weights that do not fit hidden_size stay
    with onnxruntime, which runs them as byoc does (compared, but for the two models
    onnxruntime itself refuses)."""
    model = recurrent(op, **kwargs)
    plan = byoc.partition(model, DNNL)
    assert reason in str(plan.decisions["rnn"].refusals), plan.decisions["rnn"].refusals
    if "layout" not in kwargs and "hidden_size" not in kwargs:
        assert_matches_onnxruntime(model, DNNL)


def test_an_lstm_whose_weights_paddle_builds_from_initializers_is_claimed() -> None:
    """Paddle exports an LSTM's weights as a Concat of each direction's Unsqueezed initializer
    and its zero initial states as a Tile: both fold into constants, so the LSTM is claimed."""
    nodes, consts = [], {"axis0": np.array([0], np.int64), "reps": np.array([2, 1, 1], np.int64)}
    for name, shape in (("w", (16, 5)), ("r", (16, 4)), ("b", (32,))):
        for d in ("fw", "bw"):
            consts[f"{name}_{d}"] = rand(*shape) * 0.5
            nodes.append(node("Unsqueeze", [f"{name}_{d}", "axis0"], f"{name}_{d}1"))
        nodes.append(node("Concat", [f"{name}_fw1", f"{name}_bw1"], name, axis=0))
    consts["zero"] = np.zeros((1, 1, 4), np.float32)
    nodes.append(node("Tile", ["zero", "reps"], "state"))
    nodes.append(
        node(
            "LSTM",
            ["x", "w", "r", "b", "", "state", "state"],
            "y",
            hidden_size=4,
            direction="bidirectional",
        )
    )
    model = make_model(nodes, {"x": [6, 1, 5]}, ["y"], consts, opset=14)
    report = assert_matches_onnxruntime(model, DNNL)
    claimed(report, "LSTM")
    assert [p.backend for p in report.plan.partitions] == ["dnnl"]


def test_a_bidirectional_lstm_runs_from_many_threads_at_once() -> None:
    """Runs from four threads at once, each with its two directions on two more threads, give
    the results of runs one at a time (each run's pair has its own buffers and scratchpad)."""
    compiled = byoc.compile(
        recurrent("LSTM", steps=40, batch=2, hidden=24),
        {**DNNL, "compile": {"placement": "static"}},
    )
    assert_thread_safe(compiled, [rand(40, 2, 5) for _ in range(4)])


def test_rnn_stays_with_onnxruntime_in_c_source_mode() -> None:
    plan = byoc.partition(recurrent("GRU"), {**DNNL, "backend": {"dnnl": {"codegen": "c"}}})
    assert plan.decisions["rnn"].backend != "dnnl"


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("cell", "peephole_lstm", "unknown rnn cell 'peephole_lstm'"),
        ("direction", "both", "unknown rnn direction 'both'"),
        ("shape", [7, 1, 1, 6], "the output must be .T, directions, N, H."),
        ("inputs", "weights swapped", "bad weight or bias shapes"),
    ],
)
def test_rnn_kernels_with_bad_attributes_are_refused_when_loaded(key, value, message) -> None:  # type: ignore[no-untyped-def]
    """A damaged graph whose rnn kernel names an unknown cell or direction, or whose output or
    weights do not fit its input, raises ArtifactError before any data is read."""
    compiled = byoc.compile(recurrent("LSTM"), {**DNNL, "compile": {"placement": "static"}})
    step = dnnl_step(compiled)
    data = plugin.byoc_serialize(backend="dnnl", artifact=step.artifact)
    bad = step.artifact.graph
    rnn = next(n for n in bad["nodes"] if n.get("kind") == "rnn")
    if key == "inputs":
        rnn["inputs"][1], rnn["inputs"][2] = rnn["inputs"][2], rnn["inputs"][1]
    elif key == "shape":
        rnn["shape"] = value
    else:
        rnn["attrs"][key] = value
    with pytest.raises(byoc.ArtifactError, match=message):
        artifact = plugin.byoc_deserialize(
            backend="dnnl", data=replace_graph(data, bad), trust_native=False
        )
        plugin.byoc_create_runtime(backend="dnnl", artifact=artifact, config={})
