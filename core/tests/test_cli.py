"""The byoc command line, as a user runs it."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import onnx
from byoc.testing.build import diamond, make_model, node


def byoc_cli(*args, cwd=None):
    return subprocess.run(
        [sys.executable, "-m", "byoc.cli", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=300,
    )


def diamond_files(tmp_path):
    model = diamond()
    path = tmp_path / "diamond.onnx"
    onnx.save(model, path)
    cfg = tmp_path / "byoc.toml"
    cfg.write_text(
        'backends = ["examplejson"]\n[backend.examplejson]\nops = ["Abs", "Relu", "Add"]\n'
        '[compile]\nplacement = "static"\n'
    )
    return path, cfg


def test_partition_json_is_the_designed_object(tmp_path):
    model, cfg = diamond_files(tmp_path)
    done = byoc_cli("partition", model, "-c", cfg, "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {
        "partitions": [
            {
                "name": "examplejson_0",
                "backend": "examplejson",
                "nodes": ["abs1", "relu1"],
                "inputs": ["data"],
                "outputs": ["abs1", "relu1"],
            },
            {
                "name": "examplejson_1",
                "backend": "examplejson",
                "nodes": ["add1"],
                "inputs": ["relu1", "tanh1"],
                "outputs": ["add1"],
            },
        ],
        "fallback_nodes": ["tanh1"],
    }


def test_partition_table(tmp_path):
    model, cfg = diamond_files(tmp_path)
    done = byoc_cli("partition", model, "-c", cfg)
    assert done.returncode == 0
    assert "examplejson_0" in done.stdout and "onnxruntime_0" in done.stdout
    assert "3 of 4 nodes claimed" in done.stdout


def test_partition_says_why_nothing_was_claimed_on_symbolic_dims(tmp_path):
    model = make_model([node("Abs", ["x"], ["y"], "abs1")], {"x": ["N", 4]}, ["y"])
    path = tmp_path / "dyn.onnx"
    onnx.save(model, path)
    cfg = tmp_path / "byoc.toml"
    cfg.write_text('backends = ["examplejson"]\n[backend.examplejson]\nops = ["Relu"]\n')
    done = byoc_cli("partition", path, "-c", cfg)
    assert done.returncode == 0, done.stderr
    assert "0 of 1 nodes claimed" in done.stdout
    assert "symbolic dims: x ['N', 4]" in done.stdout and "[shapes]" in done.stdout
    cfg.write_text(cfg.read_text() + "[shapes]\nx = [2, 4]\n")
    done = byoc_cli("partition", path, "-c", cfg)
    assert "0 of 1 nodes claimed" in done.stdout and "symbolic" not in done.stdout


def test_run_takes_other_sizes_of_a_dim_only_shapes_fixed(tmp_path):
    """[shapes] fixes a default, not a contract: the model's own dims decide what runs."""
    model = make_model([node("Abs", ["x"], ["y"], "abs1")], {"x": ["N", 4]}, ["y"])
    path = tmp_path / "dyn.onnx"
    onnx.save(model, path)
    cfg = tmp_path / "byoc.toml"
    cfg.write_text('backends = ["examplejson"]\n[shapes]\nx = [1, 4]\n')
    x = tmp_path / "x.npy"
    np.save(x, -np.ones((2, 4), np.float32))
    done = byoc_cli("run", path, "-c", cfg, "--input", f"x={x}")
    assert done.returncode == 0, done.stderr
    assert "y: float32[2, 4]" in done.stdout


def test_run_refuses_some_inputs_given_and_others_missing(tmp_path):
    model = make_model([node("Add", ["x", "m"], ["y"], "add1")], {"x": [2, 4], "m": [2, 4]}, ["y"])
    path = tmp_path / "two.onnx"
    onnx.save(model, path)
    x = tmp_path / "x.npy"
    np.save(x, np.ones((2, 4), np.float32))
    done = byoc_cli("run", path, "--input", f"x={x}")
    assert done.returncode == 2
    assert "--input gives x but not m" in done.stderr
    done = byoc_cli("run", path)  # none given: random ones, said in one line
    assert done.returncode == 0, done.stderr
    assert "random inputs for x, m (seed 0)" in done.stderr


def test_run_of_a_byoc_file_with_symbolic_dims_advises_only_input(tmp_path):
    model = make_model([node("Abs", ["x"], ["y"], "abs1")], {"x": ["N", 4]}, ["y"])
    path = tmp_path / "dyn.onnx"
    onnx.save(model, path)
    cfg = tmp_path / "byoc.toml"
    cfg.write_text('backends = ["examplejson"]\n')
    saved = tmp_path / "dyn.byoc"
    done = byoc_cli("compile", path, "-c", cfg, "-o", saved)
    assert done.returncode == 0, done.stderr
    done = byoc_cli("run", saved)
    assert done.returncode == 2
    assert "symbolic dim 'N'" in done.stderr and "--input NAME=FILE.npy" in done.stderr
    assert "[shapes]" not in done.stderr


def test_compare_passes_and_reports_json(tmp_path):
    model, cfg = diamond_files(tmp_path)
    done = byoc_cli("compare", model, "-c", cfg, "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["passed"] is True
    assert report["outputs"][0]["name"] == "add1"


def test_compare_exits_1_on_mismatch(tmp_path, monkeypatch, capsys):
    from byoc.cli import main
    from byoc_examplejson import ops

    model, cfg = diamond_files(tmp_path)
    monkeypatch.setitem(ops.KERNELS, "relu", lambda x: x + 1)  # a wrong kernel, kept (static)
    assert main(["compare", str(model), "-c", str(cfg)]) == 1
    assert "MISMATCH" in capsys.readouterr().out


def test_compare_with_input_files_and_run_saves_outputs(tmp_path):
    model, cfg = diamond_files(tmp_path)
    data = np.linspace(-1, 1, 100, dtype=np.float32).reshape(10, 10)
    np.save(tmp_path / "data.npy", data)
    assert (
        byoc_cli("compare", model, "-c", cfg, "--input", f"data={tmp_path / 'data.npy'}").returncode
        == 0
    )
    done = byoc_cli(
        "run", model, "-c", cfg, "--input", f"data={tmp_path / 'data.npy'}", "-o", tmp_path / "out"
    )
    assert done.returncode == 0, done.stderr
    got = np.load(tmp_path / "out" / "add1.npy")
    np.testing.assert_allclose(got, np.maximum(np.abs(data), 0) + np.tanh(np.abs(data)), rtol=1e-6)


def test_errors_are_one_line_and_exit_2(tmp_path):
    model, _ = diamond_files(tmp_path)
    np.save(tmp_path / "bad.npy", np.zeros((3, 3), np.float32))
    for args, words in [
        (("partition", tmp_path / "missing.onnx"), "does not exist"),
        (("compare", model, "-c", tmp_path / "none.toml"), "does not exist"),
        (
            ("run", model, "--input", f"data={tmp_path / 'bad.npy'}"),
            "input 'data' has shape (3, 3)",
        ),
        (("run", model, "--input", "nonsense"), "NAME=FILE.npy"),
    ]:
        done = byoc_cli(*args)
        assert done.returncode == 2, (args, done.stdout, done.stderr)
        assert done.stderr.startswith("byoc: error:") and words in done.stderr
        assert "Traceback" not in done.stderr


def test_compare_says_which_dim_to_fix(tmp_path):
    model = make_model([node("Relu", ["x"], "y")], {"x": ["N", 4]}, ["y"])
    onnx.save(model, tmp_path / "dyn.onnx")
    done = byoc_cli("compare", tmp_path / "dyn.onnx")
    assert done.returncode == 2
    assert "symbolic dim 'N'" in done.stderr and "[shapes]" in done.stderr
    assert "e.g. x = [1, 4]" in done.stderr  # a batch: 1 will do
    (tmp_path / "byoc.toml").write_text("[shapes]\nx = [3, 4]\n")
    assert byoc_cli("compare", tmp_path / "dyn.onnx", "-c", tmp_path / "byoc.toml").returncode == 0


def test_an_image_size_to_fix_is_named_not_guessed(tmp_path):
    """A detector exported with dynamic axes: 1 for a batch, but an image 1 pixel high is a
    valid config and a useless one, so the message names the dims the user must choose."""
    model = make_model([node("Relu", ["images"], "y")], {"images": ["b", 3, "h", "w"]}, ["y"])
    onnx.save(model, tmp_path / "det.onnx")
    done = byoc_cli("compare", tmp_path / "det.onnx")
    assert done.returncode == 2
    assert "images = [1, 3, h, w] with the sizes you run it at in place of h, w" in done.stderr


def test_inputs_not_given_are_random_with_the_given_ones_dims(tmp_path):
    """compare --input for some inputs: the others are random, their symbolic dims (a batch, a
    sequence) as the given inputs have them."""
    model = make_model(
        [node("Mul", ["ids", "mask"], "m"), node("Relu", ["m"], "y")],
        {"ids": ["batch", "seq"], "mask": ["batch", "seq"]},
        ["y"],
    )
    onnx.save(model, tmp_path / "dyn.onnx")
    cfg = tmp_path / "byoc.toml"
    cfg.write_text(
        'backends = ["examplejson"]\n[backend.examplejson]\nops = ["Mul", "Relu"]\n'
        '[compile]\nplacement = "static"\n'
    )
    ids = np.arange(-6, 6, dtype=np.float32).reshape(2, 6)
    np.save(tmp_path / "ids.npy", ids)
    given = ["--input", f"ids={tmp_path / 'ids.npy'}"]
    done = byoc_cli("compare", tmp_path / "dyn.onnx", "-c", cfg, "--json", *given)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["outputs"][0]["shape"] == [2, 6] and report["ran"] == {"examplejson": 2}
    # run is not compare: an input left out of --input is a mistake in the command
    done = byoc_cli("run", tmp_path / "dyn.onnx", "-c", cfg, *given, "-o", tmp_path / "out")
    assert done.returncode == 2 and "but not mask" in done.stderr
    np.save(tmp_path / "mask.npy", np.ones((2, 6), np.float32))
    given += ["--input", f"mask={tmp_path / 'mask.npy'}"]
    done = byoc_cli("run", tmp_path / "dyn.onnx", "-c", cfg, *given, "-o", tmp_path / "out")
    assert done.returncode == 0, done.stderr
    assert np.load(tmp_path / "out" / "y.npy").shape == (2, 6)


def test_backends_json_lists_examplejson_and_the_fallback():
    done = byoc_cli("backends", "--json")
    assert done.returncode == 0, done.stderr
    rows = {r["name"]: r for r in json.loads(done.stdout)}
    assert rows["examplejson"]["available"] is True
    assert rows["examplejson"]["version"] == "0.1.0"
    assert "MatMul" in rows["examplejson"]["ops"]
    assert rows["onnxruntime"]["available"] is True


def test_compile_dump_dir_writes_each_partition_source(tmp_path):
    model, cfg = diamond_files(tmp_path)
    done = byoc_cli("compile", model, "-c", cfg, "--dump-dir", tmp_path / "src")
    assert done.returncode == 0, done.stderr
    files = sorted(p.name for p in (tmp_path / "src").iterdir())
    assert files == ["examplejson_0.examplejson", "examplejson_1.examplejson"]
    text = (tmp_path / "src" / "examplejson_0.examplejson").read_text()
    assert text.startswith("examplejson_0\n  input 0 10 10 dtype: float32\n  abs 1 inputs: 0")


def test_user_mistakes_are_one_line_errors_with_exit_2(tmp_path):
    model, cfg = diamond_files(tmp_path)
    a_file = tmp_path / "taken"
    a_file.write_text("")
    empty = tmp_path / "empty.npy"
    empty.write_bytes(b"")
    for args, words in (
        (("run", model, "-c", cfg, "-o", a_file), "is a file; give a directory"),
        (("run", model, "-c", cfg, "--input", f"data={empty}"), "cannot read input 'data'"),
    ):
        done = byoc_cli(*args)
        assert done.returncode == 2, done.stderr
        assert words in done.stderr and len(done.stderr.strip().splitlines()) == 1


def test_a_closed_pipe_ends_the_command_quietly(tmp_path):
    _, cfg = diamond_files(tmp_path)
    chain = [node("Relu" if i % 2 else "Tanh", [f"v{i}"], f"v{i + 1}") for i in range(2000)]
    model = tmp_path / "chain.onnx"  # explain writes far more than a pipe holds
    onnx.save(make_model(chain, {"v0": [2]}, ["v2000"]), model)
    done = subprocess.run(
        f"{sys.executable} -m byoc.cli explain {model} -c {cfg} | head -c 1",
        shell=True,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.stdout and done.stderr == ""


def test_compare_says_which_backends_ran_and_can_require_one(tmp_path):
    model, cfg = diamond_files(tmp_path)
    done = byoc_cli("compare", model, "-c", cfg)
    assert done.returncode == 0, done.stderr
    assert "ran: examplejson 3 nodes in 2 partition(s); onnxruntime 1 nodes" in done.stdout
    cfg.write_text("backends = []\n")
    done = byoc_cli("compare", model, "-c", cfg)
    assert done.returncode == 0 and "no backend ran" in done.stdout
    done = byoc_cli("compare", model, "-c", cfg, "--require-backend")
    assert done.returncode == 1 and "no backend ran (--require-backend)" in done.stderr
    done = byoc_cli("compile", model, "-c", cfg, "-q", "-o", tmp_path / "m.byoc")
    assert done.returncode == 0 and "no backend runs any of this model" in done.stderr


def test_a_byoc_file_given_where_an_onnx_model_is_expected_says_so(tmp_path):
    model, cfg = diamond_files(tmp_path)
    assert byoc_cli("compile", model, "-c", cfg, "-o", tmp_path / "m.byoc").returncode == 0
    assert oct((tmp_path / "m.byoc").stat().st_mode & 0o777) != oct(0o600)  # not mkstemp's
    done = byoc_cli("partition", tmp_path / "m.byoc")
    assert done.returncode == 2
    assert "is a .byoc file (a compiled model), not an ONNX model" in done.stderr


def test_a_misspelt_backend_or_key_gets_a_suggestion(tmp_path):
    model, cfg = diamond_files(tmp_path)
    for text, words in (
        ('backends = ["examplejsn"]\n', "Did you mean 'examplejson'?"),
        ('backend = ["examplejson"]\n', "did you mean 'backends'?"),
    ):
        cfg.write_text(text)
        done = byoc_cli("partition", model, "-c", cfg)
        assert done.returncode == 2 and words in done.stderr, done.stderr


def test_cache_clear_forgets_the_verdicts(tmp_path):
    env_cache = tmp_path / "cache"
    verdicts = env_cache / "byoc" / "placement"
    plans = env_cache / "byoc" / "sessions"  # byoc.InferenceSession's plans and checks
    for folder in (verdicts, plans):
        folder.mkdir(parents=True)
        (folder / "x.json").write_text("{}")
    done = subprocess.run(
        [sys.executable, "-m", "byoc.cli", "cache", "clear"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "XDG_CACHE_HOME": str(env_cache)},
    )
    assert done.returncode == 0, done.stderr
    assert not verdicts.exists() and not plans.exists()


def test_cache_clear_all_keeps_the_models(tmp_path):
    """``--all`` removes the compiled libraries and the backends' verdicts (openvino's trial
    verdicts), not the models nor the venv that exports them."""
    root = tmp_path / "cache" / "byoc"
    names = ["placement", "ccompiler", "openvino-trials", "models", "zoo", "export-venv"]
    for name in names:
        (root / name).mkdir(parents=True)
    done = subprocess.run(
        [sys.executable, "-m", "byoc.cli", "cache", "clear", "--all"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")},
    )
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in root.iterdir()) == ["export-venv", "models", "zoo"]


def test_sequence_and_map_outputs_compare_and_save(tmp_path):
    """A sequence output (SplitToSequence) and ZipMap's sequence of maps, as scikit-learn
    classifiers converted to ONNX have: compare checks them item by item (it failed with an
    internal error), and run saves them as NAME.npz and NAME.json (it failed too)."""
    helper = onnx.helper
    nodes = [
        node("Relu", ["x"], "r"),
        node("SplitToSequence", ["r"], "pieces", axis=1),
        node("Softmax", ["r"], "prob", axis=1),
        helper.make_node(
            "ZipMap", ["prob"], ["probabilities"], domain="ai.onnx.ml", classlabels_int64s=[7, 8]
        ),
    ]
    tensor = helper.make_tensor_type_proto(onnx.TensorProto.FLOAT, [3, 1])
    label = helper.make_tensor_type_proto(onnx.TensorProto.FLOAT, [])
    outputs = [
        helper.make_value_info("pieces", helper.make_sequence_type_proto(tensor)),
        helper.make_value_info(
            "probabilities",
            helper.make_sequence_type_proto(
                helper.make_map_type_proto(onnx.TensorProto.INT64, label)
            ),
        ),
    ]
    x_info = helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [3, 2])
    model = helper.make_model(
        helper.make_graph(nodes, "classifier", [x_info], outputs),
        opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.ml", 1)],
        ir_version=8,
    )
    path, cfg = tmp_path / "seq.onnx", tmp_path / "byoc.toml"
    onnx.save(model, path)
    cfg.write_text(
        'backends = ["examplejson"]\n[compile]\nplacement = "static"\n'
        "[backend.examplejson]\nmin_partition_nodes = 1\n"
    )
    done = byoc_cli("compare", path, "-c", cfg)
    assert done.returncode == 0, done.stderr
    assert "pieces" in done.stdout and "ran: examplejson" in done.stdout
    x = np.array([[-1.0, 2.0], [3.0, -4.0], [0.5, 0.25]], np.float32)
    np.save(tmp_path / "x.npy", x)
    done = byoc_cli("run", path, "-c", cfg, "--input", f"x={tmp_path / 'x.npy'}", "-o", tmp_path)
    assert done.returncode == 0, done.stderr
    assert "pieces: sequence of 2 (float32[3, 1])" in done.stdout
    pieces = np.load(tmp_path / "pieces.npz")
    np.testing.assert_array_equal(pieces["arr_1"], np.maximum(x, 0)[:, 1:])
    probabilities = json.loads((tmp_path / "probabilities.json").read_text())
    assert len(probabilities) == 3 and set(probabilities[0]) == {"7", "8"}
    assert abs(probabilities[1]["7"] - np.exp(3) / (np.exp(3) + 1)) < 1e-6  # softmax of [3, 0]


def test_string_outputs_save_as_text_that_loads_back(tmp_path):
    """A tensor(string) output (a classifier's labels) was saved as a pickled object array:
    numpy's np.load refused it, and so did byoc's own --input. Now it is numpy text."""
    model = make_model([node("Cast", ["x"], "y", to=onnx.TensorProto.STRING)], {"x": [3]}, ["y"])
    path = tmp_path / "labels.onnx"
    onnx.save(model, path)
    np.save(tmp_path / "x.npy", np.array([1.5, -2.0, 3.0], np.float32))
    done = byoc_cli("run", path, "--input", f"x={tmp_path / 'x.npy'}", "-o", tmp_path)
    assert done.returncode == 0, done.stderr
    assert "y: string[3]" in done.stdout
    assert np.load(tmp_path / "y.npy", allow_pickle=False).tolist() == ["1.5", "-2", "3"]


def test_an_input_of_the_wrong_dtype_gets_the_same_words_whatever_runs_the_model(tmp_path):
    """float64 audio for a float32 model: onnxruntime's INVALID_ARGUMENT came through when
    onnxruntime ran the whole model, byoc's own message when a backend ran a partition."""
    model = make_model([node("Relu", ["wav"], "y")], {"wav": [1, 16]}, ["y"])
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    np.save(tmp_path / "wav.npy", np.zeros((1, 16), np.float64))
    for config in ("backends = []\n", 'backends = ["examplejson"]\n'):
        (tmp_path / "byoc.toml").write_text(config)
        done = byoc_cli(
            "compare", path, "-c", tmp_path / "byoc.toml", "--input", f"wav={tmp_path / 'wav.npy'}"
        )
        assert done.returncode == 2, done.stderr
        assert "input 'wav' has dtype float64 but the model expects float32" in done.stderr


def test_a_model_with_bfloat16_inputs_is_refused_saying_why(tmp_path):
    """onnxruntime's Python API takes no bfloat16 arrays: byoc said "input 'x' is bfloat16;
    give it with --input", and then refused every array --input could give."""
    model = make_model(
        [node("Cast", ["x"], "f", to=onnx.TensorProto.FLOAT), node("Relu", ["f"], "y")],
        {"x": [1, 4]},
        ["y"],
    )
    model.graph.input[0].type.tensor_type.elem_type = onnx.TensorProto.BFLOAT16
    onnx.save(model, tmp_path / "bf16.onnx")
    done = byoc_cli("compare", tmp_path / "bf16.onnx")
    assert done.returncode == 2, done.stderr
    assert "input 'x' is bfloat16, which onnxruntime's Python API can neither" in done.stderr


def test_compare_blames_the_model_when_onnxruntime_fails_on_the_inputs(tmp_path):
    """A Reshape to 4x3 of a (N, 6) input fails at N = 3 in onnxruntime too: compare said a
    backend's partition failed at run time (byoc ran first); it is the model's failure."""
    model = make_model(
        [node("Reshape", ["x", "s"], "r"), node("Relu", ["r"], "y")],
        {"x": [2, 6]},
        ["y"],
        {"s": np.array([4, 3], np.int64)},
    )
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "n"
    path, cfg = tmp_path / "m.onnx", tmp_path / "byoc.toml"
    onnx.save(model, path)
    cfg.write_text(
        'backends = ["examplejson"]\n[compile]\nplacement = "static"\n'
        "[backend.examplejson]\nmin_partition_nodes = 1\n"
    )
    np.save(tmp_path / "x.npy", np.ones((3, 6), np.float32))
    done = byoc_cli("compare", path, "-c", cfg, "--input", f"x={tmp_path / 'x.npy'}")
    assert done.returncode == 2
    assert "onnxruntime (the reference) failed on these inputs" in done.stderr, done.stderr
    cfg.write_text('backends = ["examplejson"]\n[backend.examplejson]\nmin_partition_nodes = 1\n')
    done = byoc_cli("compare", path, "-c", cfg, "--input", f"x={tmp_path / 'x.npy'}")
    assert done.returncode == 2 and "fails on the measurement inputs" in done.stderr
    assert "give inputs" not in done.stderr  # they were given: placement says no more


def test_run_saves_outputs_whose_file_names_would_meet_apart(tmp_path):
    """tf2onnx names outputs 'y:0': its file would be y_0.npy, which an output named 'y_0'
    would have overwritten, silently. 'y_0' keeps y_0.npy (a script reading <name>.npy gets
    it), 'y:0' is numbered, and run says where it went."""
    nodes = [node("Relu", ["x"], "y:0"), node("Neg", ["x"], "y_0")]
    model = make_model(nodes, {"x": [2]}, ["y:0", "y_0"])
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    np.save(tmp_path / "x.npy", np.array([-1.0, 2.0], np.float32))
    out = tmp_path / "out"
    done = byoc_cli("run", path, "--input", f"x={tmp_path / 'x.npy'}", "-o", out)
    assert done.returncode == 0, done.stderr
    assert "y:0: float32[2] min 0 max 2 mean 1 (saved as y_0_2.npy)" in done.stdout
    assert "y_0: float32[2] min -2 max 1 mean -0.5\n" in done.stdout
    np.testing.assert_array_equal(np.load(out / "y_0.npy"), [1.0, -2.0])
    np.testing.assert_array_equal(np.load(out / "y_0_2.npy"), [0.0, 2.0])


def test_an_input_whose_name_holds_an_equals_sign_is_given_by_file(tmp_path):
    """--input NAME=FILE splits where the rest is a file: an exporter's input "x=1" (its
    file was read as "1=/path", which does not exist)."""
    from byoc.cli import main

    onnx.save(make_model([node("Relu", ["x=1"], "y")], {"x=1": [2, 3]}, ["y"]), tmp_path / "m.onnx")
    x = np.array([[-1, 2, -3], [4, -5, 6]], np.float32)
    np.save(tmp_path / "x.npy", x)
    argv = ["run", str(tmp_path / "m.onnx"), "--input", f"x=1={tmp_path / 'x.npy'}"]
    assert main([*argv, "-o", str(tmp_path / "out")]) == 0
    assert np.array_equal(np.load(tmp_path / "out" / "y.npy"), np.maximum(x, 0))


def test_a_string_input_saved_as_an_object_array_says_how_to_save_it(tmp_path, capsys):
    """np.save of a list of str gives an object array, which --input does not unpickle (a
    file is data): the error says to save a unicode array, which works."""
    from byoc.cli import main

    helper = onnx.helper
    graph = helper.make_graph(
        [node("Identity", ["s"], "y")],
        "strings",
        [helper.make_tensor_value_info("s", onnx.TensorProto.STRING, [2])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.STRING, [2])],
    )
    onnx.save(helper.make_model(graph), tmp_path / "m.onnx")
    np.save(tmp_path / "obj.npy", np.array(["a", "bc"], dtype=object), allow_pickle=True)
    np.save(tmp_path / "u.npy", np.array(["a", "bc"]))
    model = str(tmp_path / "m.onnx")
    assert main(["run", model, "--input", f"s={tmp_path / 'obj.npy'}"]) == 2
    assert "np.save(f, np.asarray(values, dtype=str))" in capsys.readouterr().err
    assert main(["run", model, "--input", f"s={tmp_path / 'u.npy'}"]) == 0


def test_onnxs_domain_spelt_ai_onnx_is_read_as_the_default_one(tmp_path):
    """An exporter may import ONNX's own domain as "ai.onnx" (onnxruntime takes it): the ONNX
    checker refused it ("No opset import for domain ''"), with no way forward."""
    import byoc

    model = make_model([node("Relu", ["x"], "y")], {"x": [2, 3]}, ["y"])
    model.opset_import[0].domain = "ai.onnx"
    model.graph.node[0].domain = "ai.onnx"
    report = byoc.compare(
        model,
        {
            "backends": ["examplejson"],
            "compile": {"placement": "static"},
            "backend": {"examplejson": {"min_partition_nodes": 1}},
        },
    )
    assert report.passed and report.backends_ran()
