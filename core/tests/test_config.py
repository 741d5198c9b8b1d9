"""byoc.toml: the keys of DESIGN.md, and errors that name the key and the file."""

from __future__ import annotations

import byoc
import numpy as np
import pytest
from byoc.testing.build import make_model, node

MODEL = make_model(
    [node("Add", ["x", "y"], "a"), node("Tanh", ["a"], "t")], {"x": [2, 3], "y": [2, 3]}, ["t"]
)


def write(tmp_path, text, name="byoc.toml"):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_toml_file_with_every_shared_key(tmp_path):
    path = write(
        tmp_path,
        """
backends = ["examplejson"]
[fallback]
intra_op_num_threads = 1
[backend.examplejson]
enabled = true
ops = ["Add"]
exclude_ops = []
min_partition_nodes = 1
[shapes]
x = [2, 3]
[compare]
rtol = 1e-4
atol = 1e-5
""",
    )
    plan = byoc.partition(MODEL, path)
    assert [p.nodes for p in plan.partitions] == [["a"]]
    assert byoc.compare(MODEL, path).passed


def test_pyproject_tool_byoc_table(tmp_path):
    path = write(
        tmp_path,
        '[tool.byoc]\nbackends = ["examplejson"]\n'
        '[tool.byoc.backend.examplejson]\nops = ["Tanh"]\n',
        "pyproject.toml",
    )
    assert [p.nodes for p in byoc.partition(MODEL, path).partitions] == [["t"]]


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("tool = 5\n", "'tool' must be a table, got 5"),
        ('tool = "byoc"\n', "'tool' must be a table, got 'byoc'"),
        ("[tool]\nbyoc = 5\n", "'tool.byoc' must be a table, got 5"),
        ("[tool]\nbyoc = [1, 2]\n", r"'tool.byoc' must be a table, got \[1, 2\]"),
        ("[tool.black]\nline-length = 100\n", r"has no \[tool.byoc\] table"),
    ],
)
def test_a_pyproject_whose_tool_table_is_no_table_is_a_config_error(tmp_path, text, words):
    """Found by the fuzzer (tests/fuzz/test_fuzz_config.py): these were an AttributeError or
    a TypeError from inside the loader."""
    with pytest.raises(byoc.ConfigError, match=words):
        byoc.load_config(write(tmp_path, text, "pyproject.toml"))


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("backend = 3", ["'backend' must be a table"]),
        ("colour = 1", ["unknown key 'colour'"]),
        ("[fallback]\nthreads = 2", ["unknown key 'fallback.threads'"]),
        ("[backend.examplejson]\nopz = ['Add']", ["unknown key 'backend.examplejson.opz'"]),
        ("[backend.examplejson]\nops = 'Add'", ["'backend.examplejson.ops' must be a list of str"]),
        ("backends = ['nosuch']", ["unknown backend 'nosuch'", "pip install byoc-nosuch"]),
        ("[backend.nosuch]\nenabled = true", ["unknown backend 'nosuch'"]),
        ("[compare]\nrtol = 'big'", ["'compare.rtol' must be float"]),
        (
            "[fallback]\nintra_op_num_threads = true",
            ["'fallback.intra_op_num_threads' must be int"],
        ),
        ("[fallback]\non_backend_error = 'ignore'", ["must be one of raise, onnxruntime"]),
        ("[shapes]\nx = [2, -3]", ["'shapes.x' dims must be positive"]),
        # found by the fuzzer: a ValueError from protobuf inside partition, an OverflowError
        ("[shapes]\nx = [9223372036854775808]", ["'shapes.x' dims must be positive and below"]),
        (f"[compare]\nrtol = {10**400}", ["'compare.rtol' is an integer of 401 digits"]),
        ("backends = [", ["not valid TOML"]),
        ("[compare]\ninputs = 3", ["'compare.inputs' must be a table"]),
        ("[compare]\nrtol = nan", ["'compare.rtol' must be a number >= 0, got nan"]),
        ("[compare]\natol = -1e-5", ["'compare.atol' must be a number >= 0"]),
        ("[compare]\nseed = -1", ["'compare.seed' must be at least 0"]),
        (
            "[fallback]\nintra_op_num_threads = -1",
            ["'fallback.intra_op_num_threads' must be at least 0"],
        ),
        (
            "[fallback]\nintra_op_num_threads = 1000000000",
            ["'fallback.intra_op_num_threads' must be between 0 and 65535, got 1000000000"],
        ),
        (
            "[backend.examplejson]\nmin_partition_nodes = 0",
            ["'backend.examplejson.min_partition_nodes' must be at least 1"],
        ),
        (
            "backends = ['examplejson']\n[backend.examplejson]\nops = ['Add', 'NotAnOp']",
            ["'backend.examplejson.ops' names 'NotAnOp', which is not an ONNX op type"],
        ),
        (
            "backends = ['examplejson']\n[backend.examplejson]\nexclude_ops = ['Reluu']",
            ["'backend.examplejson.exclude_ops' names 'Reluu'"],
        ),
    ],
)
def test_config_errors_name_the_key_and_the_file(tmp_path, text, words):
    path = write(tmp_path, text)
    with pytest.raises(byoc.ConfigError) as err:
        byoc.partition(MODEL, path)
    for word in [str(path), *words]:
        assert word in str(err.value)


def test_dict_config_and_missing_file():
    with pytest.raises(byoc.ConfigError, match="unknown key 'bogus'"):
        byoc.partition(MODEL, {"bogus": 1})
    with pytest.raises(byoc.ConfigError, match="does not exist"):
        byoc.partition(MODEL, "/nonexistent/byoc.toml")


def test_shapes_errors_say_what_is_wrong():
    with pytest.raises(byoc.ModelError, match=r"\[shapes\] names input 'z'"):
        byoc.partition(MODEL, {"shapes": {"z": [1]}})
    with pytest.raises(byoc.ModelError, match="dim 1 = 4, but the model fixes it to 3"):
        byoc.partition(MODEL, {"shapes": {"x": [2, 4]}})


def test_compare_inputs_fix_named_inputs_and_name_unknown_ones():
    config = {"backends": ["examplejson"], "compare": {"inputs": {"y": 2.5}}}
    inputs = byoc.random_inputs(MODEL, {}, 0, config["compare"]["inputs"])
    assert (inputs["y"] == 2.5).all() and inputs["y"].dtype == "float32"
    assert byoc.compare(MODEL, config).passed
    with pytest.raises(byoc.InputError, match="names 'z', but the model's inputs are 'x', 'y'"):
        byoc.compare(MODEL, {"compare": {"inputs": {"z": 1}}})


def test_inputs_not_given_take_the_given_ones_symbolic_dims():
    """Inputs given in part: the partitions are checked on them and random ones for the rest,
    whose symbolic dims are the given inputs' (no [shapes] needed); the model is compiled for
    those shapes, as [shapes] would, and compiled again for others on first use."""
    model = make_model(
        [node("Mul", ["ids", "mask"], "m"), node("Relu", ["m"], "y")],
        {"ids": ["batch", "seq"], "mask": ["batch", "seq"]},
        ["y"],
    )
    config = {"backends": ["examplejson"], "backend": {"examplejson": {"ops": ["Mul", "Relu"]}}}
    ids = np.arange(-6, 6, dtype=np.float32).reshape(2, 6)
    unchecked = byoc.compile(model, config).plan.placement.note
    assert "partitions kept unchecked: no inputs to run the partitions on" in unchecked
    compiled = byoc.compile(model, config, inputs={"ids": ids})
    assert compiled.plan.placement.note == ""
    assert {str(t) for t in compiled.inputs.values()} == {"float32[2x6]"}  # as [shapes] would
    other = {"ids": ids[:1, :4], "mask": np.ones((1, 4), np.float32)}
    np.testing.assert_array_equal(compiled.run(other)["y"], np.maximum(ids[:1, :4], 0))
    report = byoc.compare(model, config, {"ids": ids})
    assert report.passed and report.outputs[0].shape == (2, 6)
    made = byoc.random_inputs(model, given={"ids": ids})
    assert made["ids"] is ids and made["mask"].shape == (2, 6)
