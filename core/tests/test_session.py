"""byoc.InferenceSession as an app written for onnxruntime.InferenceSession calls it."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import threading
import time
import types

import byoc
import numpy as np
import onnx
import onnxruntime as ort
import pytest
from byoc import compiler, host, session
from byoc.config import load_config
from onnx import TensorProto, helper, numpy_helper

EXAMPLEJSON = {
    "backends": ["examplejson"],
    "compile": {"placement": "static"},
    "session": {"check": 0},  # a pure-Python backend: its plans would lose the check
}


def with_session(**settings: object) -> dict[str, object]:
    """EXAMPLEJSON with these ``[session]`` settings."""
    return {**EXAMPLEJSON, "session": {"check": 0, **settings}}


def dynamic_model(dims: list[object] | None = None) -> bytes:
    """y = relu(x @ w) + x and z = x * 2 over x [N, 8] (symbolic N), metadata as an OCR app
    keeps its character list."""
    dims = dims or ["N", 8]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, dims)
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, dims)
    z = helper.make_tensor_value_info("z", TensorProto.FLOAT, dims)
    w = numpy_helper.from_array(np.random.default_rng(0).random((8, 8), np.float32), "w")
    two = numpy_helper.from_array(np.array(2.0, np.float32), "two")
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["m"], name="mm"),
        helper.make_node("Relu", ["m"], ["r"], name="relu"),
        helper.make_node("Add", ["r", "x"], ["y"], name="add"),
        helper.make_node("Mul", ["x", "two"], ["z"], name="mul"),
    ]
    graph = helper.make_graph(nodes, "g", [x], [y, z], [w, two])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    helper.set_model_props(model, {"character": "abc"})
    return model.SerializeToString()


@pytest.fixture(autouse=True)
def own_cache(tmp_path, monkeypatch):
    monkeypatch.setattr(host, "cache_root", lambda: tmp_path / "cache")


def reference(model: bytes, feed: dict[str, np.ndarray]) -> list[np.ndarray]:
    return session.OrtSession(model, providers=["CPUExecutionProvider"]).run(None, feed)


def test_the_session_api_is_onnxruntimes():
    model = dynamic_model()
    s = byoc.InferenceSession(model, config=EXAMPLEJSON)
    real = session.OrtSession(model, providers=["CPUExecutionProvider"])
    assert [(i.name, i.shape, i.type) for i in s.get_inputs()] == [
        (i.name, i.shape, i.type) for i in real.get_inputs()
    ]
    assert [o.name for o in s.get_outputs()] == ["y", "z"]
    assert [i.name for i in s.get_overridable_initializers()] == [
        i.name for i in real.get_overridable_initializers()
    ]
    assert s.get_modelmeta().custom_metadata_map == {"character": "abc"}
    assert s.get_providers() == ["CPUExecutionProvider"]
    assert isinstance(s.get_session_options(), ort.SessionOptions)
    assert "CPUExecutionProvider" in s.get_provider_options()
    x = np.random.default_rng(1).random((3, 8), np.float32)
    want = reference(model, {"x": x})
    assert np.array_equal(s.run(None, {"x": x})[0], want[0])
    (z,) = s.run(["z"], {"x": x})
    assert np.array_equal(z, want[1])
    binding = s.io_binding()
    binding.bind_cpu_input("x", x)
    binding.bind_output("y")
    s.run_with_iobinding(binding)
    assert np.array_equal(binding.copy_outputs_to_cpu()[0], want[0])
    assert s.end_profiling() == ""  # the rest of onnxruntime's API is its own


def test_a_hot_signature_gets_a_plan_and_other_shapes_keep_running():
    model = dynamic_model()
    s = byoc.InferenceSession(model, config=with_session(compile_after=2))
    rng = np.random.default_rng(2)
    x = rng.random((4, 8), np.float32)
    s.run(None, {"x": x})
    assert s.plans() == {}  # once is not hot
    s.run(None, {"x": x})
    assert s.wait(60)
    assert s.plans() == {(("x", "<f4", (4, 8)),): "byoc"}
    for batch in (4, 1, 16, 4):  # the plan's signature, and others on onnxruntime at once
        x = rng.random((batch, 8), np.float32)
        got, want = s.run(None, {"x": x}), reference(model, {"x": x})
        for g, w in zip(got, want, strict=True):
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


def test_the_plan_is_what_runs(monkeypatch):
    model = dynamic_model()
    s = byoc.InferenceSession(model, config=EXAMPLEJSON, wait=True)
    x = np.ones((2, 8), np.float32)
    for _ in range(3):
        s.run(None, {"x": x})
    (plan,) = s._plans.values()
    assert {step.unit.backend for step in plan.model.steps} >= {"examplejson"}
    calls = []
    real_run = plan.model.run
    monkeypatch.setattr(plan.model, "run", lambda feed: calls.append(1) or real_run(feed))
    s.run(None, {"x": x})
    assert calls == [1]


def test_a_plan_that_fails_at_run_time_gives_onnxruntimes_answer(monkeypatch, caplog):
    model = dynamic_model()
    s = byoc.InferenceSession(model, config=EXAMPLEJSON, wait=True)
    x = np.ones((2, 8), np.float32)
    for _ in range(3):
        s.run(None, {"x": x})
    (plan,) = s._plans.values()

    def broken(feed):
        raise RuntimeError("the backend crashed")

    monkeypatch.setattr(plan.model, "run", broken)
    got = s.run(None, {"x": x})
    assert np.array_equal(got[1], reference(model, {"x": x})[1])
    assert s.plans() == {(("x", "<f4", (2, 8)),): "onnxruntime"}
    assert "the backend crashed" in caplog.text


def test_errors_are_onnxruntimes():
    s = byoc.InferenceSession(dynamic_model(), config=EXAMPLEJSON, wait=True)
    for _ in range(3):
        s.run(None, {"x": np.ones((2, 8), np.float32)})
    for bad in ({"x": np.ones((2, 8), np.float64)}, {"x": np.ones((2, 9), np.float32)}, {}):
        with pytest.raises(Exception) as caught:
            s.run(None, bad)
        with pytest.raises(type(caught.value)) as theirs:
            session.OrtSession(dynamic_model()).run(None, bad)
        assert str(caught.value) == str(theirs.value)


def test_a_run_racing_the_swap_is_correct():
    model = dynamic_model()
    s = byoc.InferenceSession(model, config=with_session(compile_after=1))
    x = np.random.default_rng(3).random((8, 8), np.float32)
    want = reference(model, {"x": x})
    wrong: list[str] = []

    def app() -> None:
        for _ in range(300):
            got = s.run(None, {"x": x})
            if not all(
                np.allclose(g, w, rtol=1e-5, atol=1e-6) for g, w in zip(got, want, strict=True)
            ):
                wrong.append("differs")

    threads = [threading.Thread(target=app) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert s.wait(60)
    assert not wrong
    assert set(s.plans().values()) == {"byoc"}


def test_plans_are_cached_on_disk_for_the_next_process(monkeypatch):
    model = dynamic_model()
    config = with_session(compile_after=1)
    first = byoc.InferenceSession(model, config=config, wait=True)
    first.run(None, {"x": np.ones((5, 8), np.float32)})
    assert set(first.plans().values()) == {"byoc"}

    def no_compile(*args, **kwargs):
        raise AssertionError("a cached plan is loaded, not compiled")

    monkeypatch.setattr(compiler, "compile", no_compile)
    again = byoc.InferenceSession(model, config=config, wait=True)
    assert again.plans() == {(("x", "<f4", (5, 8)),): "byoc"}
    x = np.random.default_rng(4).random((5, 8), np.float32)
    np.testing.assert_allclose(again.run(["y"], {"x": x})[0], reference(model, {"x": x})[0])
    # another config is another plan
    other = byoc.InferenceSession(model, config={**config, "compare": {"seed": 1}}, wait=True)
    assert other.plans() == {}


def test_a_damaged_cached_plan_is_compiled_again(tmp_path):
    model = dynamic_model()
    config = with_session(compile_after=1)
    first = byoc.InferenceSession(model, config=config, wait=True)
    first.run(None, {"x": np.ones((5, 8), np.float32)})
    (saved,) = (session.plans_dir()).rglob("*.byoc")
    saved.write_bytes(b"PK\x03\x04 not a zip")
    again = byoc.InferenceSession(model, config=config, wait=True)
    assert again.plans() == {}
    again.run(None, {"x": np.ones((5, 8), np.float32)})
    assert set(again.plans().values()) == {"byoc"}


def test_the_least_recently_used_plan_is_dropped():
    s = byoc.InferenceSession(
        dynamic_model(),
        config=with_session(compile_after=1, plans=2, cache=False),
        wait=True,
    )
    for batch in (1, 2, 1, 3):  # 1 ran after 2 was made: 2 goes
        s.run(None, {"x": np.ones((batch, 8), np.float32)})
    assert sorted(sig[0][2][0] for sig in s.plans()) == [1, 3]


def test_question_mark_dims_are_each_their_own_unknown():
    """Paddle's "?" H and W: a plan made at one width runs, and another width runs too."""
    model = dynamic_model(dims=[None, "?"])
    model_proto = onnx.load_from_string(model)
    model_proto.graph.node[0].CopyFrom(helper.make_node("Relu", ["x"], ["m"], name="mm"))
    model = model_proto.SerializeToString()
    s = byoc.InferenceSession(model, config=with_session(compile_after=1))
    for width in (192, 320):
        x = np.random.default_rng(width).random((1, width), np.float32)
        got = s.run(None, {"x": x})
        s.wait(60)
        got = s.run(None, {"x": x})
        np.testing.assert_allclose(got[0], reference(model, {"x": x})[0], rtol=1e-6)
    assert set(s.plans().values()) == {"byoc"} and len(s.plans()) == 2


def test_sess_options_threads_reach_byoc():
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    s = byoc.InferenceSession(dynamic_model(), options, config=EXAMPLEJSON)
    assert s._config().fallback["intra_op_num_threads"] == 1
    assert s._config().fallback["graph_optimization_level"] == "basic"
    assert s._config().backend["examplejson"]["threads"] == 1  # a key every backend has
    own = {"fallback": {"intra_op_num_threads": 2}, "backend": {"examplejson": {"threads": 3}}}
    kept = byoc.InferenceSession(dynamic_model(), options, config={**EXAMPLEJSON, **own})
    assert kept._config().fallback["intra_op_num_threads"] == 2  # the config's own wins
    assert kept._config().backend["examplejson"]["threads"] == 3


def test_patch_onnxruntime_reaches_sessions_a_library_builds():
    library = types.ModuleType("some_ocr_library")
    exec(
        "import onnxruntime\n"
        "def load(model):\n"
        "    return onnxruntime.InferenceSession(model, providers=['CPUExecutionProvider'])\n",
        library.__dict__,
    )
    sys.modules["some_ocr_library"] = library
    model = dynamic_model()
    try:
        with byoc.patch_onnxruntime(config=with_session(compile_after=1)):
            s = library.load(model)
            assert isinstance(s, byoc.InferenceSession)
            x = np.ones((2, 8), np.float32)
            s.run(None, {"x": x})
            assert s.wait(60)  # byoc compiled it (its own sessions are onnxruntime's: no loop)
            assert set(s.plans().values()) == {"byoc"}
            np.testing.assert_allclose(s.run(None, {"x": x})[0], reference(model, {"x": x})[0])
        assert ort.InferenceSession is session.OrtSession
        assert not isinstance(library.load(model), byoc.InferenceSession)
    finally:
        del sys.modules["some_ocr_library"]
        ort.InferenceSession = session.OrtSession


def test_patch_as_a_function_and_unpatch():
    patch = byoc.patch_onnxruntime(config=EXAMPLEJSON)
    try:
        assert ort.InferenceSession is not session.OrtSession
        compiled = byoc.compile(dynamic_model(), EXAMPLEJSON, inputs={"x": np.ones((1, 8), "f")})
        assert compiled.run({"x": np.ones((1, 8), np.float32)})["z"][0, 0] == 2.0
    finally:
        patch.unpatch()
    assert ort.InferenceSession is session.OrtSession


def test_a_session_on_another_provider_is_plain_onnxruntime(monkeypatch):
    class OnAnotherProvider(session.OrtSession):
        def get_providers(self):
            return ["CUDAExecutionProvider", "CPUExecutionProvider"]

    monkeypatch.setattr(session, "OrtSession", OnAnotherProvider)
    config = with_session(compile_after=1)
    s = byoc.InferenceSession(dynamic_model(), config=config, wait=True)
    x = np.ones((2, 8), np.float32)
    for _ in range(3):
        s.run(None, {"x": x})
    assert s.plans() == {}
    assert session.signature({"x": [[1.0] * 8]}) is None  # lists go to onnxruntime as they are


def test_import_byoc_costs_an_app_no_more_than_onnxruntime():
    """The compiler (onnx and what it brings, about a second) loads on first use."""
    script = (
        "import sys, byoc\n"
        "assert byoc.InferenceSession and byoc.patch_onnxruntime and byoc.hookimpl\n"
        "assert 'onnx' not in sys.modules and 'byoc.compiler' not in sys.modules\n"
        "import byoc.compare\n"  # the submodule does not hide the function
        "assert callable(byoc.compare) and callable(byoc.partition) and byoc.Plan\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_shapes_that_never_repeat_do_not_grow_the_session(monkeypatch):
    """A stream of new signatures (a width per call) is counted in a bounded table."""
    monkeypatch.setattr(session, "_MAX_SEEN", 4)
    s = byoc.InferenceSession(dynamic_model(), config=with_session(cache=False))
    for batch in range(1, 20):
        s.run(None, {"x": np.ones((batch, 8), np.float32)})
        assert len(s._seen) <= 4
    assert s.plans() == {}  # none was called 3 times


def _slowed(run, seconds: float):
    def slow(*args, **kwargs):
        import time

        time.sleep(seconds)
        return run(*args, **kwargs)

    return slow


def test_a_plan_slower_in_the_apps_calls_is_dropped_and_stays_dropped(monkeypatch):
    """Placement kept it, but in the app's own calls onnxruntime is faster: the session times
    both, alternated, and runs onnxruntime from then on; the next process does not compile it."""
    model = dynamic_model()
    config = with_session(compile_after=1, check=3)
    s = byoc.InferenceSession(model, config=config, wait=True)
    x = np.random.default_rng(5).random((3, 8), np.float32)
    want = reference(model, {"x": x})
    s.run(None, {"x": x})
    assert s.plans() == {(("x", "<f4", (3, 8)),): "checking"}
    (plan,) = s._plans.values()
    ran = []
    monkeypatch.setattr(plan.model, "run", _slowed(plan.model.run, 0.02))
    real = s._run_ort
    monkeypatch.setattr(s, "_run_ort", lambda *a: ran.append("ort") or real(*a))
    for _ in range(6):  # 3 on each side, alternated; every answer is right
        for g, w in zip(s.run(None, {"x": x}), want, strict=True):
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
    assert ran == ["ort"] * 3
    assert s.plans() == {(("x", "<f4", (3, 8)),): "onnxruntime"}
    assert s.wait(60)
    monkeypatch.setattr(compiler, "compile", _no_compile)
    again = byoc.InferenceSession(model, config=config, wait=True)
    assert again.plans() == {(("x", "<f4", (3, 8)),): "onnxruntime"}
    assert not list(session.plans_dir().rglob("*.byoc"))  # the plan's file is gone


def test_a_plan_faster_in_the_apps_calls_is_kept_and_not_checked_again(monkeypatch):
    model = dynamic_model()
    config = with_session(compile_after=1, check=3)
    s = byoc.InferenceSession(model, config=config, wait=True)
    x = np.ones((3, 8), np.float32)
    monkeypatch.setattr(s, "_run_ort", _slowed(s._run_ort, 0.02))
    for _ in range(7):
        s.run(None, {"x": x})
    assert s.plans() == {(("x", "<f4", (3, 8)),): "byoc"}
    assert s.wait(60)
    monkeypatch.setattr(compiler, "compile", _no_compile)
    again = byoc.InferenceSession(model, config=config, wait=True)
    assert again.plans() == {(("x", "<f4", (3, 8)),): "byoc"}  # judged: not checked again
    (saved,) = session.plans_dir().rglob("*.byoc")
    saved.write_bytes(b"PK\x03\x04 damaged")  # compiled again: the new plan is checked anew
    monkeypatch.undo()
    monkeypatch.setattr(host, "cache_root", lambda: saved.parents[2])
    third = byoc.InferenceSession(model, config=config, wait=True)
    third.run(None, {"x": x})
    assert third.plans() == {(("x", "<f4", (3, 8)),): "checking"}


def test_cached_plans_load_after_the_first_call():
    """Loading an earlier process's plans would slow the app's first call: they load at the
    second."""
    model = dynamic_model()
    first = byoc.InferenceSession(model, config=with_session(compile_after=1), wait=True)
    first.run(None, {"x": np.ones((2, 8), np.float32)})
    s = byoc.InferenceSession(model, config=with_session(compile_after=5))  # [session]: same plans
    s.run(None, {"x": np.ones((1, 8), np.float32)})
    assert s._jobs == 0 and s.plans() == {}  # nothing loads during start-up and the first call
    s.run(None, {"x": np.ones((3, 8), np.float32)})
    assert s.wait(60)
    assert s.plans()[(("x", "<f4", (2, 8)),)] == "byoc"


def _no_compile(*args, **kwargs):
    raise AssertionError("a cached plan or verdict is loaded, not compiled")


def test_byocs_own_openmp_setting_changes_no_key(monkeypatch):
    """Loading dnnl sets GOMP_SPINCOUNT for every process alike: a plan key (or a timing's
    host) made before a library loaded must be found after it; the user's own setting counts."""
    from byoc.placement import host_id

    monkeypatch.delenv("GOMP_SPINCOUNT", raising=False)
    monkeypatch.delenv("BYOC_OWN_ENV", raising=False)  # set_own_env names its own: restored
    monkeypatch.setattr(host, "OWN_ENV", {})
    before = host_id()
    monkeypatch.setenv("GOMP_SPINCOUNT", "1")  # restored after the test
    host.set_own_env("GOMP_SPINCOUNT", "30000")
    assert host_id() == before
    monkeypatch.setenv("GOMP_SPINCOUNT", "5")  # the user's
    assert host_id() != before


def test_byocs_own_openmp_setting_in_a_child_process_changes_no_key(monkeypatch):
    """A process where byoc set OpenMP's wait policy (loading a library) starts workers: they
    inherit the setting with the environment, and find the plans their parent made."""
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)  # both restored after the test
    monkeypatch.delenv("BYOC_OWN_ENV", raising=False)
    monkeypatch.setattr(host, "OWN_ENV", {})
    before = host.host_id()
    host.set_own_env("OMP_WAIT_POLICY", "PASSIVE")
    code = "from byoc import host; print(host.host_id())"
    child = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert child.stdout.strip() == before, child.stderr
    monkeypatch.setenv("OMP_WAIT_POLICY", "ACTIVE")  # the user's own, in the child: it counts
    child = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert child.stdout.strip() not in ("", before), child.stderr


def test_an_apps_calls_while_the_worker_compiles_are_noted(monkeypatch):
    """While the worker compiles, each call's time is noted for placement's disturbance meter
    (``host.note_app``); otherwise nothing is."""
    s = byoc.InferenceSession(dynamic_model(), config=with_session(compile_after=100))
    feed = {"x": np.ones((2, 8), np.float32)}
    noted = []
    monkeypatch.setattr(host, "note_app", noted.append)
    s.run(None, feed)
    assert noted == []
    monkeypatch.setattr(session, "_working", threading.Event())
    session._working.set()
    s.run(None, feed)
    assert len(noted) == 1 and noted[0] > 0


def test_partition_and_explain_list_the_sessions_plans(tmp_path, capsys):
    from byoc.cli import main

    model = tmp_path / "m.onnx"
    model.write_bytes(dynamic_model())
    config = tmp_path / "byoc.toml"
    config.write_text(
        'backends = ["examplejson"]\n[compile]\nplacement = "static"\n'
        "[session]\ncompile_after = 1\ncheck = 0\n"
    )
    s = byoc.InferenceSession(str(model), config=str(config), wait=True)
    s.run(None, {"x": np.ones((4, 8), np.float32)})
    capsys.readouterr()
    assert main(["partition", str(model), "-c", str(config)]) == 0
    out = capsys.readouterr().out
    assert "byoc.InferenceSession's plans for this model and config (1):" in out
    assert "x float32[4, 8]: byoc" in out
    assert main(["explain", str(model), "-c", str(config)]) == 0
    assert "x float32[4, 8]: byoc" in capsys.readouterr().out


def test_no_check_is_timed_while_the_worker_compiles(monkeypatch):
    """A compile beside the app slows the plan and onnxruntime unevenly: calls then run the
    plan, untimed, and the check goes on once the worker is idle."""
    s = byoc.InferenceSession(dynamic_model(), config=with_session(compile_after=1, check=2))
    x = np.ones((3, 8), np.float32)
    s.run(None, {"x": x})
    assert s.wait(60)
    (plan,) = s._plans.values()
    with monkeypatch.context() as patched:
        patched.setattr(session._working, "is_set", lambda: True)
        for _ in range(6):
            s.run(None, {"x": x})
    assert plan.times == ([], []) and set(s.plans().values()) == {"checking"}
    for _ in range(4):
        s.run(None, {"x": x})
    assert set(s.plans().values()) <= {"byoc", "onnxruntime"}


def test_plans_on_disk_are_bounded_per_model(monkeypatch):
    """Shapes that keep changing (an OCR width per image) would fill the disk with plans."""
    monkeypatch.setattr(session, "SAVED_PER_PLAN", 2)
    s = byoc.InferenceSession(
        dynamic_model(), config=with_session(compile_after=1, plans=1), wait=True
    )
    for batch in range(1, 6):
        s.run(None, {"x": np.ones((batch, 8), np.float32)})
    saved = list(session.plans_dir().rglob("*.byoc"))
    assert len(saved) == 2  # the two made last
    assert sorted(session._read_signature(p.with_suffix(".json"))[0][2][0] for p in saved) == [4, 5]


def in_new_process(script: str, **env: str) -> list[object]:
    """``script``'s last printed line, as JSON, from a fresh Python (an app's next process)."""
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **env},
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_cached_plain_plan_loads_without_importing_a_plugin_or_onnx(tmp_path):
    """An app's next process finds its plain onnxruntime plans (loading them, or compiling a
    hot signature) without importing a backend plugin or onnx: those imports (a second,
    OpenVINO's alone more) held the GIL on the worker and slowed the app's calls after
    start-up."""
    model = tmp_path / "m.onnx"
    model.write_bytes(dynamic_model())
    # placement given: the tests' default (conftest.py) is not the new process's
    config = {"backends": [], "compile": {"placement": "static"}, "session": {"compile_after": 1}}
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1  # each backend's threads: the session lists the backends
    first = byoc.InferenceSession(str(model), options, config=config, wait=True)
    first.run(None, {"x": np.ones((2, 8), np.float32)})
    assert first.plans() == {(("x", "<f4", (2, 8)),): "onnxruntime"}
    script = f"""
import importlib.metadata as md, json, os, pathlib, sys
import byoc, numpy as np, onnxruntime as ort
from byoc import host
host.cache_root = lambda: pathlib.Path({str(tmp_path / "cache")!r})
options = ort.SessionOptions()
options.intra_op_num_threads = 1
s = byoc.InferenceSession({str(model)!r}, options, config={config!r})
for _ in range(3):  # hot at once (compile_after 1), and the cached plans load at the second
    s.run(None, {{"x": np.ones((2, 8), np.float32)}})
assert s.wait(60)
plugins = {{e.value.split(":")[0].split(".")[0] for e in md.entry_points(group="byoc.backends")}}
heavy = sorted(m for m in sys.modules if m.split(".")[0] in plugins | {{"onnx"}})
machine = [host.host_id(), {{k: v for k, v in os.environ.items() if "OMP" in k or "OWN" in k}}]
print(json.dumps([list(s.plans().values()), heavy, sorted(plugins), machine]))
"""
    plans, imported, plugins, machine = in_new_process(script)
    env = {k: v for k, v in os.environ.items() if "OMP" in k or "OWN" in k}
    assert machine == [host.host_id(), env], host.OWN_ENV  # the parent's machine key
    assert plans == ["onnxruntime"]
    assert "byoc_examplejson" in plugins  # installed, and not imported:
    assert imported == []


def test_a_plugin_or_what_it_requires_upgraded_is_another_plan_key(tmp_path):
    """A plan made with one version of a plugin (or of a library it requires) is not found
    with another, in the next process: the key reads their versions from the installed
    metadata (kept in the cache dir until an install changes a directory on ``sys.path``),
    importing no plugin."""
    model = tmp_path / "m.onnx"
    model.write_bytes(dynamic_model())
    script = f"""
import json, pathlib, sys
from byoc import host, load_config, session
host.cache_root = lambda: pathlib.Path({str(tmp_path / "cache")!r})
key = session.plan_key({str(model)!r}, load_config(None))
print(json.dumps([key, "byoc_fake_plugin" in sys.modules]))
"""
    site = tmp_path / "site"
    site.mkdir()
    (site / "byoc_fake_plugin.py").write_text(
        "import byoc\n"
        "@byoc.hookimpl\n"
        "def byoc_register_backends(register):\n"
        "    register(byoc.BackendSpec('fake'))\n"
    )
    pythonpath = os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")])
    keys = []
    installed = None
    for version, requires in (("1.0", "numpy"), ("1.1", "numpy"), ("1.1", "byoc-not-installed")):
        if installed is not None:  # as pip upgrades: the old metadata goes, the new comes
            shutil.rmtree(installed)
        installed = site / f"byoc_fake-{version}.dist-info"
        installed.mkdir()
        (installed / "METADATA").write_text(
            f"Metadata-Version: 2.1\nName: byoc-fake\nVersion: {version}\n"
            f"Requires-Dist: {requires}\nRequires-Dist: pytest; extra == 'test'\n"
        )
        (installed / "entry_points.txt").write_text("[byoc.backends]\nfake = byoc_fake_plugin\n")
        key, imported = in_new_process(script, PYTHONPATH=pythonpath)
        assert not imported
        keys.append(key)
        assert in_new_process(script, PYTHONPATH=pythonpath)[0] == key  # saved, read back
    assert len(set(keys)) == 3, keys


def test_a_model_files_digest_is_remembered_until_the_file_changes(tmp_path, monkeypatch):
    """The plan key of a model file read before is made without reading the file again; a
    file rewritten (same size, other bytes) has another key; one changed a moment ago is
    read each time (a second write within the clock's tick would keep its times)."""
    path = tmp_path / "m.onnx"
    path.write_bytes(dynamic_model())
    cfg = load_config(None)
    monkeypatch.setattr(session, "SETTLED", -1.0)  # as if the file were written long ago
    first = session.plan_key(str(path), cfg)
    opened = []

    def watched(file, *args, **kwargs):
        opened.append(str(file))
        return open(file, *args, **kwargs)

    with monkeypatch.context() as m:
        m.setattr(session, "open", watched, raising=False)
        assert session.plan_key(str(path), cfg) == first
    assert opened == []  # remembered, not read again
    data = bytearray(path.read_bytes())
    data[-1] ^= 1  # same size, other bytes, a clock tick later
    time.sleep(0.05)
    path.write_bytes(bytes(data))
    assert session.plan_key(str(path), cfg) != first
    monkeypatch.setattr(session, "SETTLED", 2.0)
    data[-1] ^= 1
    path.write_bytes(bytes(data))  # as it was, within the same second: read, not remembered
    with monkeypatch.context() as m:
        m.setattr(session, "open", watched, raising=False)
        assert session.plan_key(str(path), cfg) == first
    assert opened == [str(path)]
    assert session.model_digest(str(path)) == hashlib.sha256(path.read_bytes()).hexdigest()
