"""Fuzzing ``byoc.load``: a ``.byoc`` file damaged or edited in any way either loads or is an
``ArtifactError`` naming the file in one line (or a ``BackendError``: a member edited with
its sha256 fixed up that deserializes, but from which the backend cannot make a runtime);
one that loads runs, or says why not with an ``InputError`` or ``BackendError``. Nothing else
escapes, nothing hangs, nothing is written outside the sandbox (docs/format.md, "What loading
checks").

The inputs are one real file (examplejson partitions, an onnxruntime segment, the partitions'
ONNX copies and a constant output) with its zip bytes, its manifest, a member, or the zip's
directory changed; a changed member has its sha256 and size fixed up in the manifest most of
the time, so the edit reaches the backend's ``byoc_deserialize`` and the runtime.
"""

from __future__ import annotations

import hashlib
import io
import json
import warnings
import zipfile
from pathlib import Path
from typing import Any

import byoc
import numpy as np
import onnx
import pytest
from byoc.testing.build import make_model, node
from hypothesis import event, given, note
from hypothesis import strategies as st

from .guard import contained, fuzz_settings
from .model_edits import edited_model
from .mutations import damaged_bytes, edited_json, edited_lines

CONFIG = {
    "backends": ["examplejson"],
    "backend": {"examplejson": {"ops": ["Add", "Mul", "Relu"]}},
    "fallback": {"on_backend_error": "onnxruntime"},  # the partitions' ONNX copies go in too
    "compile": {"placement": "static"},
}


def small_model() -> onnx.ModelProto:
    """examplejson, onnxruntime, examplejson; and an output that is a constant."""
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


class Valid:
    """A good file's parts: its bytes, its manifest, its members (in archive order)."""

    def __init__(self, path: Path) -> None:
        self.data = path.read_bytes()
        with zipfile.ZipFile(path) as zf:
            self.members = {i.filename: zf.read(i) for i in zf.infolist()}
        self.manifest = json.loads(self.members.pop("manifest.json"))


@pytest.fixture(scope="module")
def valid(sandbox: Path) -> Valid:
    path = sandbox / "valid.byoc"
    byoc.compile(small_model(), CONFIG).save(path)
    good = Valid(path)
    backends = {u["backend"] for u in good.manifest["units"]}
    assert backends == {"examplejson", "onnxruntime"} and good.manifest["constants"]
    assert any("onnx" in u for u in good.manifest["units"])
    return good


def zipped(
    manifest: Any, members: dict[str, bytes], extra: list[tuple[zipfile.ZipInfo, bytes]] = ()
) -> bytes:
    """A zip as byoc writes it: the manifest deflated, the members stored."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        text = manifest if isinstance(manifest, bytes) else json.dumps(manifest).encode()
        zf.writestr("manifest.json", text, compress_type=zipfile.ZIP_DEFLATED)
        for name, data in members.items():
            zf.writestr(name, data)
        for info, data in extra:
            zf.writestr(info, data)
    return buf.getvalue()


def entries(manifest: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """member name -> its entry (with member, sha256, size) in the manifest."""
    found = [*manifest["units"], *manifest["constants"]]
    found += [u["onnx"] for u in manifest["units"] if "onnx" in u]
    return {e["member"]: e for e in found}


@st.composite
def damaged_files(draw: st.DrawFn, good: Valid) -> bytes:
    """The file's bytes changed anywhere: zip headers, the directory, the deflated manifest."""
    event("edit: file bytes")
    return draw(damaged_bytes(good.data))


@st.composite
def edited_manifests(draw: st.DrawFn, good: Valid) -> bytes:
    """The manifest edited, as JSON (wrong types, huge numbers, names moved) or as text."""
    if draw(st.integers(0, 4)) == 0:
        event("edit: manifest text")
        text = draw(damaged_bytes(json.dumps(good.manifest, indent=1).encode()))
        return zipped(text, good.members)
    event("edit: manifest JSON")
    return zipped(draw(edited_json(good.manifest)), good.members)


@st.composite
def edited_members(draw: st.DrawFn, good: Valid) -> bytes:
    """A member changed by what it is (examplejson text, ONNX, raw constant bytes), its
    sha256 and size usually fixed up so that the change gets past the hash check."""
    manifest = json.loads(json.dumps(good.manifest))
    kind = draw(st.sampled_from(["examplejson lines", "ONNX", "bytes"]))
    event(f"edit: member {kind}")
    if kind == "examplejson lines":
        members = [n for n in good.members if n.endswith(".bin") and "examplejson" in n]
        name = draw(st.sampled_from(members))
        data = draw(edited_lines(good.members[name].decode())).encode()
    elif kind == "ONNX":
        name = draw(st.sampled_from([n for n in good.members if n.endswith(".onnx")]))
        data = draw(edited_model(onnx.load_from_string(good.members[name]))).SerializeToString()
    else:
        name = draw(st.sampled_from(sorted(good.members)))
        data = draw(damaged_bytes(good.members[name]))
    fix = draw(st.sampled_from(["sha256 and size", "sha256 and size", "sha256", "nothing"]))
    entry = entries(manifest)[name]
    if fix != "nothing":
        entry["sha256"] = hashlib.sha256(data).hexdigest()
    if fix == "sha256 and size":
        entry["size"] = len(data)
    return zipped(manifest, {**good.members, name: data})


@st.composite
def edited_directories(draw: st.DrawFn, good: Valid) -> bytes:
    """The zip's directory: a member added, renamed, doubled, compressed otherwise, flagged."""
    members = dict(good.members)
    name = draw(st.sampled_from(sorted(members)))
    kind = draw(st.sampled_from(["add", "rename", "double", "compress", "flags", "drop"]))
    event(f"edit: zip {kind}")
    extra: list[tuple[zipfile.ZipInfo, bytes]] = []
    if kind == "add":
        new = draw(st.sampled_from(["extra.bin", "sub/x.bin", "../up.bin", "/abs.bin", "a" * 200]))
        extra.append((zipfile.ZipInfo(new), draw(st.binary(max_size=64))))
    elif kind == "rename":
        members[draw(st.sampled_from(["x.bin", "Manifest.json", "a..b", ".hidden"]))] = members.pop(
            name
        )
    elif kind == "double":
        extra.append((zipfile.ZipInfo(name), members[name]))
    elif kind == "drop":
        del members[name]
    else:
        info = zipfile.ZipInfo(name)
        if kind == "compress":
            info.compress_type = draw(st.sampled_from([zipfile.ZIP_BZIP2, zipfile.ZIP_LZMA]))
        else:
            info.flag_bits = draw(st.sampled_from([0x1, 0x20, 0x40, 0x2000]))
        extra.append((info, members.pop(name)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zipfile's "Duplicate name"
        return zipped(good.manifest, members, extra)


def damaged(good: Valid) -> st.SearchStrategy[bytes]:
    return st.one_of(
        damaged_files(good), edited_manifests(good), edited_members(good), edited_directories(good)
    )


@fuzz_settings(weight=2)
@given(data=st.data())
def test_a_damaged_file_loads_and_runs_or_is_a_byoc_error(valid, sandbox, data):
    content = data.draw(damaged(valid))
    path = sandbox / "case.byoc"
    path.write_bytes(content)
    with contained(sandbox):
        try:
            loaded = byoc.load(path)
        except (byoc.ArtifactError, byoc.BackendError) as exc:
            event(f"outcome: {type(exc).__name__}")
            message = str(exc)
            if isinstance(exc, byoc.ArtifactError):  # byoc's own checks: one line, the file
                assert str(path) in message, f"the error does not name the file: {message}"
                assert "\n" not in message.strip(), f"not one line: {message!r}"
            return
        event("outcome: loaded")
        try:
            inputs = byoc.random_inputs(loaded.inputs, ranges=loaded.input_ranges)
            outputs = loaded.run(inputs)
        except (byoc.InputError, byoc.BackendError) as exc:
            event(f"outcome: loaded, run raised {type(exc).__name__}")
            note(str(exc))
            return
    event("outcome: loaded and ran")
    assert list(outputs) == loaded.outputs
    assert all(isinstance(v, np.ndarray) for v in outputs.values())


def test_the_valid_file_loads_and_runs_the_same(valid, sandbox):
    """The fuzz target's starting point is a working file (else every edit is refused)."""
    path = sandbox / "same.byoc"
    path.write_bytes(valid.data)
    x = np.linspace(-1, 1, 8, dtype=np.float32).reshape(2, 4)
    y = np.full((1, 4), 0.5, np.float32)
    got = byoc.load(path).run({"x": x, "y": y})
    np.testing.assert_allclose(got["r"], np.maximum(np.tanh(x + y) * y, 0), rtol=1e-6)
    np.testing.assert_array_equal(got["k"], np.arange(6).reshape(2, 3))
