"""ccompiler compiles C on load, generated again from the partition a .byoc file carries: from
that partition only op types of OPS, dtypes of CTYPES, a checked C identifier (the symbol) and
numbers (``ops.literal``) reach the C as code; free text (node and value names) reaches it only
through ``codegen._text``, JSON-quoted inside a comment.

Each case edits one string of a real artifact (its header's symbol, names and dtypes, and every
string and bytes field of its partition but tensor data; or renames a value everywhere), writes
the C this ccompiler generates from the edit when it generates any (an attacker would), and
loads the file with every native build blocked: a closed-set field is refused (ArtifactError)
before anything is built; anything else is refused, or reaches the build only escaped."""

from __future__ import annotations

import base64
import copy
import hashlib
import json
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import byoc
import numpy as np
import onnx
import pytest
from byoc import Partition, native
from byoc.testing.build import make_model, node
from byoc_ccompiler.artifact import MAGIC
from byoc_ccompiler.codegen import Options, generate

PAYLOADS = [
    'x"); system("touch PWNED"); //',
    'x*/\n#include "/etc/passwd"\nsystem("touch PWNED");//',
]
# Closed-set: each is refused when edited. Every other string of the file (node and value
# names, the graph's name, doc strings, domains, an attribute's name) is free text: it reaches
# the C only through _text, or not at all.
CLOSED = {"symbol", "dtype", "op_type", "s"}  # "s": Gelu's approximate (none or tanh)


def model() -> onnx.ModelProto:
    nodes = [
        node("Add", ["x", "c"], "a"),
        node("Mul", ["a", "half"], "b"),
        node("LeakyRelu", ["b"], "l", alpha=0.2),
        node("Clip", ["l", "lo", "hi"], "cl"),
        node("Gelu", ["cl"], "g", approximate="tanh"),
        node("Less", ["g", "x"], "lt"),
        node("Where", ["lt", "g", "x"], "w"),
        node("Cast", ["lt"], "cs", to=onnx.TensorProto.FLOAT),
        node("Add", ["w", "cs"], "m"),
        node("Add", ["m", "u"], "z"),  # another shape: a second kernel reads "m" from a buffer
    ]
    consts = {"c": np.arange(8, dtype=np.float32), "half": np.float32(0.5)}
    consts |= {"lo": np.float32(-2), "hi": np.float32(2)}
    return make_model(nodes, {"x": [4, 8], "u": [2, 4, 8]}, ["z"], consts, opset=20)


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> Path:
    cache = str(tmp_path_factory.mktemp("cache"))
    config = {
        "backends": ["ccompiler"],
        "backend": {"ccompiler": {"cache_dir": cache}},
        "compile": {"placement": "static"},
    }
    compiled = byoc.compile(model(), config)
    assert [s.unit.backend for s in compiled.steps] == ["ccompiler"]
    assert (
        len([line for line in compiled.steps[0].artifact.source.split("\n") if "kernel_" in line])
        >= 4
    )
    return compiled.save(tmp_path_factory.mktemp("closed") / "m.byoc")


def _fields(msg: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """The paths ``(field, index or None, ...)`` of every string and bytes field of a protobuf
    message, tensor data (raw_data) aside."""
    for fd, value in msg.ListFields():
        items = list(value) if fd.is_repeated else [value]
        for k, item in enumerate(items):
            where = (*path, fd.name, k if fd.is_repeated else None)
            if fd.type == fd.TYPE_MESSAGE:
                yield from _fields(item, where)
            elif fd.type in (fd.TYPE_STRING, fd.TYPE_BYTES) and fd.name != "raw_data":
                yield where


def _set(msg: Any, path: tuple[Any, ...], payload: str) -> None:
    for name, k in zip(path[:-2:2], path[1:-2:2], strict=True):
        msg = getattr(msg, name) if k is None else getattr(msg, name)[k]
    name, k = path[-2:]
    fd = msg.DESCRIPTOR.fields_by_name[name]
    value: Any = payload.encode() if fd.type == fd.TYPE_BYTES else payload
    if k is None:
        setattr(msg, name, value)
    else:
        getattr(msg, name)[k] = value


def _renamed(header: dict[str, Any], part: onnx.ModelProto, old: str, new: str) -> None:
    """Value ``old`` renamed ``new`` everywhere: the partition's nodes, inputs, outputs,
    initializers and value infos, and the header's signature."""
    g = part.graph
    for n in g.node:
        n.input[:] = [new if v == old else v for v in n.input]
        n.output[:] = [new if v == old else v for v in n.output]
    for info in [*g.input, *g.output, *g.value_info, *g.initializer]:
        if info.name == old:
            info.name = new
    for t in [*header["inputs"], *header["outputs"]]:
        if t["name"] == old:
            t["name"] = new


def _member(path: Path) -> bytes:
    with zipfile.ZipFile(path) as z:
        manifest = json.loads(z.read("manifest.json"))
        unit = next(u for u in manifest["units"] if u["backend"] == "ccompiler")
        return z.read(unit["member"])


def _forged(data: bytes, header: dict[str, Any], part: onnx.ModelProto) -> bytes:
    """The artifact with ``header`` and partition ``part``, and the C this ccompiler generates
    from them (the original C when it generates none)."""
    _, source, _ = native.unpack(data, MAGIC, "test")
    names = [[t["name"] for t in header[k] if isinstance(t, dict)] for k in ("inputs", "outputs")]
    try:
        unit = Partition(header["symbol"], "ccompiler", [], *names, part)
        source = generate(unit, Options(**header["options"]))[0]
    except Exception:  # this ccompiler generates nothing from it: the original C
        pass
    header = {**header, "partition": base64.b64encode(part.SerializeToString()).decode()}
    return native.pack(MAGIC, header, source, None)


def _rewritten(src: Path, dst: Path, data: bytes) -> Path:
    """A copy of ``src`` whose ccompiler member is ``data``, its sha256 and size fixed up."""
    with zipfile.ZipFile(src) as zin:
        manifest = json.loads(zin.read("manifest.json"))
        members = {i.filename: zin.read(i) for i in zin.infolist() if i.filename != "manifest.json"}
    unit = next(u for u in manifest["units"] if u["backend"] == "ccompiler")
    members[unit["member"]] = data
    unit["sha256"], unit["size"] = hashlib.sha256(data).hexdigest(), len(data)
    with zipfile.ZipFile(dst, "w") as zout:
        zout.writestr("manifest.json", json.dumps(manifest))
        for name, member in members.items():
            zout.writestr(name, member)
    return dst


def _cases(data: bytes) -> Iterator[tuple[str, str, bytes]]:
    """``(what, the field edited, forged artifact)`` for each edit, with each payload."""
    header, _, _ = native.unpack(data, MAGIC, "test")
    part = onnx.load_from_string(base64.b64decode(header["partition"]))
    values = {v for n in part.graph.node for v in [*n.input, *n.output]}
    for payload in PAYLOADS:
        edited = copy.deepcopy(header)
        edited["symbol"] = payload
        yield "header symbol", "symbol", _forged(data, edited, part)
        for side in ("inputs", "outputs"):
            for k, key in enumerate(["name", "dtype"] * len(header[side])):
                edited = copy.deepcopy(header)
                edited[side][k // 2][key] = payload
                yield f"header {side}[{k // 2}].{key}", key, _forged(data, edited, part)
        for path in _fields(part):
            edited_part = copy.deepcopy(part)
            _set(edited_part, path, payload)
            yield f"partition {path}", path[-2], _forged(data, header, edited_part)
        for value in sorted(values):
            edited, edited_part = copy.deepcopy(header), copy.deepcopy(part)
            _renamed(edited, edited_part, value, payload)
            yield f"value {value!r} renamed", "value name", _forged(data, edited, edited_part)


def test_an_edited_string_is_refused_before_any_build_or_stays_in_a_comment(
    saved: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = _member(saved)
    _, source, _ = native.unpack(data, MAGIC, "test")
    built: list[str] = []

    def blocked(source: str, *args: Any, **kwargs: Any) -> Any:
        built.append(source)
        raise RuntimeError("the test blocks every native build")

    monkeypatch.setattr(native, "build", blocked)
    accepted, count = set(), 0
    for what, field, forged in _cases(data):
        count += 1
        built.clear()
        with pytest.raises(byoc.ByocError) as refused:
            byoc.load(_rewritten(saved, tmp_path / "edited.byoc", forged))
        if isinstance(refused.value, byoc.ArtifactError):
            assert not built, what
            continue
        assert field not in CLOSED, f"{what}: not refused ({refused.value})"
        (c,) = built  # the partition's C, generated from the edited file
        assert 'system("' not in c and not any(p in c for p in PAYLOADS), what
        assert c.count("\n") == source.count("\n"), what  # no line of its own
        assert c.count("*/") == source.count("*/"), what  # no comment closed early
        accepted.add(field)
    assert count > 100
    assert {"name", "value name"} <= accepted  # node names, renamed values: loaded, escaped


@pytest.mark.parametrize(
    "value", [np.array(["1); system(0)"]), np.array([2.5], np.float16), np.array([3.0], np.float64)]
)
def test_a_constant_of_a_type_the_c_has_not_is_refused(saved: Path, value: np.ndarray) -> None:
    """A constant operand must be one of CTYPES' dtypes: never a string (whatever it spells)
    or a float16 or float64 turned into an integer literal."""
    from byoc.plugins import registry

    data = _member(saved)
    header, _, _ = native.unpack(data, MAGIC, "test")
    part = onnx.load_from_string(base64.b64decode(header["partition"]))
    (half,) = [t for t in part.graph.initializer if t.name == "half"]
    half.CopyFrom(onnx.numpy_helper.from_array(value.reshape(()), "half"))
    with pytest.raises(byoc.ArtifactError, match="has no C type here"):
        registry().route("ccompiler").byoc_deserialize(
            backend="ccompiler", data=_forged(data, header, part), trust_native=False
        )
