"""The manifest of a ``.byoc`` file (docs/format.md, "manifest.json"): its schema (types,
names, member entries, dtypes and shapes) and its data flow (every value a unit reads is an
input, a constant or an earlier unit's output), checked before anything of the file is used.
What the manifest asks of the loading machine (its backends, their options) is ``byoc.reader``'s."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

import numpy as np
import onnx
from onnx import helper

from byoc.archive import plain_name
from byoc.errors import ArtifactError
from byoc.export import CONTROL, FORMAT, FORMAT_VERSION, MANIFEST, NAME_LIMIT
from byoc.graph import TensorType, dtype_name, tensor_type
from byoc.plan import FALLBACK
from byoc.plugins import IN_PROCESS
from byoc.version import __version__

_SHA256 = re.compile(r"[0-9a-f]{64}")
_BACKEND_FIELDS = ("name", "distribution", "version")
_DISTRIBUTION = re.compile(r"[A-Za-z0-9]([A-Za-z0-9._-]{0,98}[A-Za-z0-9])?")  # PEP 508 names


def _onnx_dtypes() -> frozenset[str]:
    names = set()
    for elem in onnx.TensorProto.DataType.values():
        try:
            names.add(np.dtype(helper.tensor_dtype_to_np_dtype(elem)).name)
        except (KeyError, TypeError, ValueError):
            continue
    return frozenset(names)


DTYPES = _onnx_dtypes()  # the dtype names a manifest may use (those of ONNX tensor types)


def json_of(data: bytes, where: str) -> Any:
    """Parse the manifest's JSON, turning every failure into an ArtifactError."""
    try:
        return json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise ArtifactError(f"{where}: {MANIFEST} is not valid JSON: {exc}") from None


class Manifest:
    """A checked ``manifest.json``: types, names, member entries, and the schedule's data flow."""

    def __init__(self, data: Any, where: str) -> None:
        self.where = where
        top = self._dict(data, MANIFEST)
        if top.get("format") != FORMAT:
            raise ArtifactError(
                f'{where}: {MANIFEST} does not say format "byoc"; it is not a .byoc file'
            )
        version = top.get("format_version")
        if type(version) is not int or version < 1:
            raise ArtifactError(f"{where}: format_version must be a positive int, got {version!r}")
        if version > FORMAT_VERSION:
            raise ArtifactError(
                f"{where} has .byoc format version {version}, written by byoc "
                f"{top.get('byoc_version', '?')}; this byoc ({__version__}) reads format "
                f"version {FORMAT_VERSION} and older: upgrade byoc (pip install -U byoc)"
            )
        self.version = version
        self.byoc_version = self._str(top.get("byoc_version"), "byoc_version")
        self.stamp = self._dict(top.get("stamp", {}), "stamp")
        self.backends: dict[str, dict[str, str]] = {}
        for i, b in enumerate(self._list(top.get("backends"), "backends")):
            b = self._dict(b, f"backends[{i}]")
            entry = {k: self._str(b.get(k), f"backends[{i}].{k}") for k in _BACKEND_FIELDS}
            dist = entry["distribution"]
            if not _DISTRIBUTION.fullmatch(dist) and dist != IN_PROCESS:
                raise self.bad(
                    f"'backends[{i}].distribution' is not a distribution name: {short(dist)}"
                )
            if entry["name"] in self.backends:
                raise self.bad(f"backend '{entry['name']}' is listed twice")
            self.backends[entry["name"]] = entry
        self.inputs = self._signature(top.get("inputs"), "inputs")
        self.ranges = self._ranges(top["inputs"])  # a list: _signature checked it
        self.outputs = self._signature(top.get("outputs"), "outputs")
        if not self.outputs:
            raise self.bad("the model has no outputs")
        self.constants = [
            self._constant(c, i)
            for i, c in enumerate(self._list(top.get("constants"), "constants"))
        ]
        self.fallback = self._dict(top.get("fallback"), "fallback")
        config = self._dict(top.get("config"), "config")
        self.units = [self._unit(u, i) for i, u in enumerate(self._list(top.get("units"), "units"))]
        self._check_flow()
        used = {u["backend"] for u in self.units}
        self.config: dict[str, dict[str, Any]] = {}
        for name in sorted(used - {FALLBACK}):
            self.config[name] = self._dict(config.get(name), f"config.{name}")

    # -- checks ------------------------------------------------------------------------------

    def bad(self, what: str) -> ArtifactError:
        """The error for a manifest that is not what byoc writes: ``what`` says how."""
        return ArtifactError(
            f"{self.where}: {MANIFEST} is not valid: {what}; the file is damaged or was edited: "
            "recompile the model"
        )

    def _dict(self, value: Any, key: str) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise self.bad(f"'{key}' must be an object, got {short(value)}")
        return value

    def _list(self, value: Any, key: str) -> list[Any]:
        if not isinstance(value, list):
            raise self.bad(f"'{key}' must be a list, got {short(value)}")
        return value

    def _str(self, value: Any, key: str) -> str:
        if not isinstance(value, str) or not value or len(value) > NAME_LIMIT:
            raise self.bad(f"'{key}' must be a non-empty string, got {short(value)}")
        if CONTROL.search(value):  # names reach terminals: no escape sequences
            raise self.bad(f"'{key}' holds control characters: {short(value)}")
        return value

    def _int(self, value: Any, key: str) -> int:
        if type(value) is not int or value < 0:
            raise self.bad(f"'{key}' must be a non-negative int, got {short(value)}")
        return value

    def _names(self, value: Any, key: str) -> list[str]:
        names = [self._str(v, f"{key}[{i}]") for i, v in enumerate(self._list(value, key))]
        if len(set(names)) != len(names):
            raise self.bad(f"'{key}' names a value twice: {names}")
        return names

    def _signature(self, value: Any, key: str) -> dict[str, TensorType | None]:
        out: dict[str, TensorType | None] = {}
        for i, item in enumerate(self._list(value, key)):
            item = self._dict(item, f"{key}[{i}]")
            name = self._str(item.get("name"), f"{key}[{i}].name")
            if name in out:
                raise self.bad(f"'{key}' names '{name}' twice")
            dtype, shape = item.get("dtype"), item.get("shape")
            if dtype is not None and (not isinstance(dtype, str) or dtype not in DTYPES):
                raise self.bad(f"'{key}[{i}].dtype' is not an ONNX tensor dtype: {short(dtype)}")
            if shape is not None:
                dims = self._list(shape, f"{key}[{i}].shape")
                for d in dims:
                    ok = d is None or (type(d) is int and d >= 0)
                    symbol = isinstance(d, str) and 0 < len(d) <= 256 and not CONTROL.search(d)
                    if not ok and not symbol:
                        raise self.bad(f"'{key}[{i}].shape' has a bad dim {short(d)}")
                shape = tuple(dims)
            out[name] = TensorType(None if dtype is None else np.dtype(dtype), shape)
        return out

    def _ranges(self, value: list[Any]) -> dict[str, tuple[int, int]]:
        """``inputs[].range``: ``[low, high)`` of an integer input for random inputs."""
        out = {}
        for i, item in enumerate(value):
            if "range" not in item:
                continue
            bounds = self._list(item["range"], f"inputs[{i}].range")
            if len(bounds) != 2 or not all(type(b) is int and abs(b) < 1 << 62 for b in bounds):
                raise self.bad(f"'inputs[{i}].range' must be two ints, got {short(bounds)}")
            if bounds[0] >= bounds[1]:
                raise self.bad(f"'inputs[{i}].range' is empty: {bounds}")
            out[item["name"]] = (bounds[0], bounds[1])
        return out

    def _member(self, value: Any, key: str) -> dict[str, Any]:
        entry = self._dict(value, key)
        member = self._str(entry.get("member"), f"{key}.member")
        if not plain_name(member) or member == MANIFEST:
            raise self.bad(f"'{key}.member' is not a plain file name: {short(member)}")
        sha = self._str(entry.get("sha256"), f"{key}.sha256")
        if not _SHA256.fullmatch(sha):
            raise self.bad(f"'{key}.sha256' is not 64 lowercase hex digits: {short(sha)}")
        self._int(entry.get("size"), f"{key}.size")
        return entry

    def _constant(self, value: Any, i: int) -> dict[str, Any]:
        entry = self._member(value, f"constants[{i}]")
        self._str(entry.get("name"), f"constants[{i}].name")
        dtype = entry.get("dtype")
        if not isinstance(dtype, str) or dtype not in DTYPES or dtype in ("object", "str"):
            raise self.bad(f"'constants[{i}].dtype' is not a numeric dtype: {short(dtype)}")
        shape = self._list(entry.get("shape"), f"constants[{i}].shape")
        for d in shape:
            self._int(d, f"constants[{i}].shape")
        return entry

    def _unit(self, value: Any, i: int) -> dict[str, Any]:
        key = f"units[{i}]"
        entry = self._member(value, key)
        self._str(entry.get("name"), f"{key}.name")
        backend = self._str(entry.get("backend"), f"{key}.backend")
        if backend not in self.backends:
            raise self.bad(f"'{key}.backend' is '{backend}', which 'backends' does not list")
        entry["inputs"] = self._names(entry.get("inputs"), f"{key}.inputs")
        entry["outputs"] = self._names(entry.get("outputs"), f"{key}.outputs")
        if not entry["outputs"]:
            raise self.bad(f"unit '{entry['name']}' has no outputs")
        if "onnx" in entry:
            self._member(entry["onnx"], f"{key}.onnx")
        if not isinstance(entry.setdefault("options", {}), dict):
            raise self.bad(f"'{key}.options' must be a table")
        return entry

    def _check_flow(self) -> None:
        """Every value a unit reads is an input, a constant, or produced by an earlier unit."""
        defined = set(self.inputs)
        for c in self.constants:
            if c["name"] in defined:
                raise self.bad(f"constant '{c['name']}' is also defined elsewhere")
            defined.add(c["name"])
        names: set[str] = set()
        for u in self.units:
            if u["name"] in names:
                raise self.bad(f"two units are named '{u['name']}'")
            names.add(u["name"])
            for v in u["inputs"]:
                if v not in defined:
                    raise self.bad(
                        f"unit '{u['name']}' reads '{v}', which no input, constant or earlier "
                        "unit produces"
                    )
            for v in u["outputs"]:
                if v in defined:
                    raise self.bad(f"unit '{u['name']}' produces '{v}', already defined")
                defined.add(v)
        for v in self.outputs:
            if v not in defined:
                raise self.bad(f"model output '{v}' is produced by no unit")
        members = [m for m in self.members()]
        if len(set(members)) != len(members):
            raise self.bad("two entries name the same member")

    def check_reads(self, unit: Mapping[str, Any], graph: onnx.GraphProto) -> None:
        """The model inputs that a unit's ONNX graph (an onnxruntime segment, or the partition a
        backend unit carries) reads have, in ``inputs``, types the graph accepts: its dtype,
        its rank and every dim it fixes. ``inputs`` is what ``run`` checks arrays against and
        random inputs are made from; the graph is what runs them."""
        for value in graph.input:
            if value.name not in self.inputs:
                continue  # a value of an earlier unit, or a weight an old model lists
            have = self.inputs[value.name] or TensorType(None, None)
            want = tensor_type(value.type) or TensorType(None, None)
            if not _accepts(want, have):
                raise self.bad(
                    f"input '{value.name}' is {_shown(have)} in 'inputs', but unit "
                    f"'{unit['name']}' reads it as {_shown(want)}"
                )

    def members(self) -> list[str]:
        """The archive members the manifest names: units, constants, units' ONNX graphs."""
        out = [u["member"] for u in self.units] + [c["member"] for c in self.constants]
        return out + [u["onnx"]["member"] for u in self.units if "onnx" in u]


def _accepts(graph: TensorType, given: TensorType) -> bool:
    """Whether a value of type ``given`` fits a graph input of type ``graph``: the same dtype
    and rank, and the graph's fixed dims (a symbolic one may be fixed in ``given``: ``[shapes]``
    fixes the model's, and a whole-model segment keeps the dims the model declares)."""
    if graph.dtype != given.dtype:
        return False
    if graph.shape is None:
        return True
    if given.shape is None or len(given.shape) != len(graph.shape):
        return False
    return all(g == d for g, d in zip(graph.shape, given.shape, strict=True) if isinstance(g, int))


def _shown(t: TensorType) -> str:
    """A type for a message: ``float32[2, 'N']``, its symbols quoted (escaped) by repr."""
    if t.dtype is None and t.shape is None:
        return "of no known type"
    dims = "?" if t.shape is None else ", ".join(map(repr, t.shape))
    text = f"{dtype_name(t.dtype)}[{dims}]"
    return text if len(text) <= 80 else text[:77] + "..."


def short(value: Any) -> str:
    """A value of the file for a message: its repr, cut at 60 characters."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
