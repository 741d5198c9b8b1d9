"""Loading a ``.byoc`` file (docs/format.md), which ``byoc.export`` writes.

Loading treats the file as hostile: it checks the zip's declared sizes and compression ratios
before reading anything, reads with a cap, checks the manifest's schema and data flow, and
checks each member's sha256 before its bytes reach a backend's ``byoc_deserialize`` hook.
Nothing is extracted to disk and nothing is unpickled.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import warnings
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx
from onnx import helper

from byoc import native, plugins
from byoc.compiled import CompiledModel, Step
from byoc.config import COUNT, FALLBACK_KEYS, Config, _check_table, load_config
from byoc.errors import ArtifactError, ByocError, ConfigError
from byoc.export import CONTROL, FORMAT, FORMAT_VERSION, MANIFEST, NAME_LIMIT
from byoc.graph import TensorType, dtype_name, tensor_type
from byoc.plan import FALLBACK, Partition
from byoc.plugins import IN_PROCESS, Registry
from byoc.units import create_runtime
from byoc.version import __version__

_SHA256 = re.compile(r"[0-9a-f]{64}")
_MEMBER = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]{0,127}")
# zip general-purpose flags a reader may meet: deflate options, data descriptor, UTF-8 names
_KNOWN_FLAGS = 0x0002 | 0x0004 | 0x0008 | 0x0800


def _onnx_dtypes() -> frozenset[str]:
    names = set()
    for elem in onnx.TensorProto.DataType.values():
        try:
            names.add(np.dtype(helper.tensor_dtype_to_np_dtype(elem)).name)
        except (KeyError, TypeError, ValueError):
            continue
    return frozenset(names)


DTYPES = _onnx_dtypes()  # the dtype names a manifest may use (those of ONNX tensor types)


@dataclass(frozen=True)
class Limits:
    """What ``load`` accepts before reading a byte of a member (zip-bomb and damage guards)."""

    max_manifest: int = 8 << 20  # bytes of manifest.json
    max_member: int = 4 << 30  # bytes of one member, uncompressed
    max_total: int = 8 << 30  # bytes of all members, uncompressed
    max_members: int = 100_000
    max_ratio: int = 100  # uncompressed / compressed, for members above ratio_floor bytes
    ratio_floor: int = 1 << 20


LIMITS = Limits()
# ---------------------------------------------------------------------------------------------
# loading
# ---------------------------------------------------------------------------------------------


def load(
    path: str | os.PathLike[str],
    *,
    limits: Limits | None = None,
    threads: int | None = None,
    registry: Registry | None = None,
    config: Any = None,
    trust_native: bool = False,
) -> CompiledModel:
    """Load a ``.byoc`` file written by ``CompiledModel.save`` / ``byoc compile -o``.

    The file is data: loading it never runs code its author chose. Native code is rebuilt
    here from source each backend regenerates from the carried graph and checks against the
    carried source; a compiled library the file carries is used only with ``trust_native=True``
    (for a target without a compiler), and only where the file's stamp says it was built for
    this host. The compiler, its flags and cache directories are this machine's: the
    ``[backend.<name>]`` settings of ``config`` (a byoc.toml, a dict or a Config) and the
    environment, never the file's.

    ``threads`` caps the threads one run uses here, whatever the file was compiled with:
    onnxruntime's ``intra_op_num_threads`` and the ``threads`` option of every backend that has
    one (several workers on one machine each take a share of its cores). ``registry``: the
    plugins to load with (default: ``byoc.registry()``, the installed ones).

    Raises ``byoc.ArtifactError`` saying what is wrong when the file is damaged, of a newer
    format, or needs a backend that is not installed (naming the distribution to install).
    """
    if threads is not None and (type(threads) is not int or not 0 < threads < COUNT.stop):
        raise ConfigError(f"threads must be an int from 1 to {COUNT.stop - 1}, got {threads!r}")
    limits = limits or LIMITS
    where = os.fspath(path)
    try:
        zf = zipfile.ZipFile(where)
    except FileNotFoundError:
        raise ArtifactError(f"'{where}' does not exist") from None
    except Exception as exc:  # zipfile raises many types on damaged input (struct.error, ...)
        raise ArtifactError(
            f"'{where}' is not a .byoc file, or it is truncated or damaged (not a readable zip "
            f"archive: {exc}); write one with `byoc compile MODEL -o FILE.byoc`"
        ) from None
    with zf:
        reader = _Reader(zf, where, limits)
        manifest = Manifest(json_of(reader.read(MANIFEST, limits.max_manifest), where), where)
        reader.expect({MANIFEST, *manifest.members()})
        reg = registry or plugins.registry()
        manifest.check_backends(reg, load_config(config))
        if threads is not None:
            manifest.limit_threads(threads)
        if trust_native:
            manifest.check_stamp()
        steps = []
        for unit in manifest.units:
            data = reader.read_entry(unit)
            artifact = _deserialize(
                reg, unit["backend"], data, f"{where}: unit {unit['name']}", trust_native
            )
            model = onnx.ModelProto()
            if "onnx" in unit:
                onnx_bytes = reader.read_entry(unit["onnx"])
                model = _deserialize(
                    reg, FALLBACK, onnx_bytes, f"{where}: unit {unit['name']}", False
                )
                model = onnx.load_from_string(model)
                manifest.check_reads(unit, model.graph)
            elif unit["backend"] == FALLBACK:
                manifest.check_reads(unit, onnx.load_from_string(artifact).graph)
            table = {**manifest.tables[unit["backend"]], **manifest.options(reg, unit)}
            runtime = create_runtime(reg, unit["backend"], unit["name"], artifact, table)
            part = Partition(
                unit["name"], unit["backend"], [], unit["inputs"], unit["outputs"], model
            )
            part.options = manifest.options(reg, unit)
            steps.append(Step(part, artifact, runtime))
        constants = {
            c["name"]: _constant(reader.read_entry(c), c, where) for c in manifest.constants
        }
    return CompiledModel(
        None,
        steps,
        manifest.tables[FALLBACK],
        inputs=manifest.inputs,
        outputs=manifest.outputs,
        constants=constants,
        backend_configs={k: v for k, v in manifest.tables.items() if k != FALLBACK},
        registry=reg,
        input_ranges=manifest.ranges,
    )


def inspect(
    path: str | os.PathLike[str],
    *,
    limits: Limits | None = None,
    registry: Registry | None = None,
) -> dict[str, Any]:
    """What a ``.byoc`` file holds and whether it would run here, read without loading any
    backend's code: the checks of ``load`` up to the manifest and the members' sizes, then
    the manifest's backends (and whether this machine has them), units, sizes and stamp."""
    limits = limits or LIMITS
    where = os.fspath(path)
    try:
        zf = zipfile.ZipFile(where)
    except Exception as exc:
        raise ArtifactError(f"'{where}' is not a readable .byoc file: {exc}") from None
    with zf:
        reader = _Reader(zf, where, limits)
        manifest = Manifest(json_of(reader.read(MANIFEST, limits.max_manifest), where), where)
        reader.expect({MANIFEST, *manifest.members()})
    reg = registry or plugins.registry()
    problems = []
    backends = []
    for name, saved in manifest.backends.items():
        installed = reg.backends.get(name)
        here = None if installed is None else installed.version
        if installed is None:
            problems.append(f"backend '{name}' is not installed {install_hint(saved)}")
        elif installed.unavailable_reason is not None:
            problems.append(f"backend '{name}' is unavailable: {installed.unavailable_reason}")
        elif name != FALLBACK and here != saved["version"]:
            problems.append(f"backend '{name}' is {here} here, {saved['version']} in the file")
        backends.append({**saved, "installed": here})
    host = manifest.stamp.get("host")
    same_host = host == native.host_tag()
    return {
        "file": where,
        "format_version": manifest.version,
        "byoc_version": manifest.byoc_version,
        "backends": backends,
        "units": [
            {"name": u["name"], "backend": u["backend"], "size": u["size"]} for u in manifest.units
        ],
        "bytes": sum(i.file_size for i in reader.infos.values()),
        "stamp": manifest.stamp,
        "same_host": same_host,
        "runs_here": not problems,
        "problems": problems,
        "native_code": (
            "compiled code it carries is used only with trust_native (--trust-native); "
            "otherwise native backends rebuild it from source they regenerate"
            if same_host
            else "built on another host (or without a stamp): native backends rebuild from "
            "source they regenerate, trusted or not"
        ),
    }


def json_of(data: bytes, where: str) -> Any:
    """Parse the manifest's JSON, turning every failure into an ArtifactError."""
    try:
        return json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise ArtifactError(f"{where}: {MANIFEST} is not valid JSON: {exc}") from None


def _deserialize(reg: Registry, backend: str, data: bytes, where: str, trust: bool) -> Any:
    try:
        artifact = reg.route(backend).byoc_deserialize(
            backend=backend, data=data, trust_native=trust
        )
    except ArtifactError as exc:
        raise ArtifactError(f"{where} (backend {backend}) is damaged: {exc}") from None
    except ByocError:
        raise
    except Exception as exc:
        raise ArtifactError(
            f"{where} (backend {backend}): loading failed: {type(exc).__name__}: {exc}; "
            "the file may be damaged or written by another version: recompile the model"
        ) from exc
    if artifact is None:
        raise ArtifactError(f"{where}: backend '{backend}' cannot load artifacts (no hook)")
    return artifact


def _constant(data: bytes, entry: Mapping[str, Any], where: str) -> np.ndarray:
    dtype = np.dtype(entry["dtype"]).newbyteorder("<")
    count = math.prod(entry["shape"])  # exact: no overflow to fool the size check
    if dtype.kind == "O" or count * dtype.itemsize != len(data):
        raise ArtifactError(
            f"{where}: constant '{entry['name']}' has {len(data)} bytes, which is not "
            f"{entry['dtype']}{entry['shape']}; the file is damaged: recompile the model"
        )
    return np.frombuffer(data, dtype).astype(dtype.newbyteorder("=")).reshape(entry["shape"])


class _Reader:
    """Reads members of a zip after checking its directory: names, sizes, ratios, no extras."""

    def __init__(self, zf: zipfile.ZipFile, where: str, limits: Limits) -> None:
        self.zf, self.where, self.limits = zf, where, limits
        infos = zf.infolist()
        if len(infos) > limits.max_members:
            raise ArtifactError(
                f"{where}: the archive has {len(infos)} members, more than the limit "
                f"{limits.max_members}; it is not a file byoc wrote"
            )
        self.infos: dict[str, zipfile.ZipInfo] = {}
        total = 0
        for info in infos:
            self._check_info(info)
            total += info.file_size
            if total > limits.max_total:
                raise ArtifactError(
                    f"{where}: the members add up to more than {limits.max_total} bytes "
                    "uncompressed; refusing to read it"
                )
            self.infos[info.filename] = info

    def _check_info(self, info: zipfile.ZipInfo) -> None:
        name, where, limits = info.filename, self.where, self.limits
        if not _plain(name):
            raise ArtifactError(
                f"{where}: member name {name!r} is not a plain file name (no directories, "
                "absolute paths or '..'); the file is damaged or hostile"
            )
        if name in self.infos:
            raise ArtifactError(f"{where}: member {name!r} appears twice; the file is damaged")
        if info.flag_bits & 0x1:
            raise ArtifactError(f"{where}: member {name!r} is encrypted; byoc never writes that")
        if info.flag_bits & ~_KNOWN_FLAGS:
            raise ArtifactError(
                f"{where}: member {name!r} has zip flags {info.flag_bits:#06x} that byoc never "
                "writes (patched data, strong encryption, ...); the file is damaged"
            )
        if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
            raise ArtifactError(
                f"{where}: member {name!r} uses zip compression method {info.compress_type}; "
                "byoc reads stored and deflated members only"
            )
        if info.file_size > limits.max_member:
            raise ArtifactError(
                f"{where}: member {name!r} declares {info.file_size} bytes, more than the limit "
                f"{limits.max_member}"
            )
        stored = info.compress_type == zipfile.ZIP_STORED
        if stored and info.compress_size != info.file_size:
            raise ArtifactError(f"{where}: member {name!r} has inconsistent sizes; damaged file")
        if info.file_size > limits.ratio_floor and (
            info.file_size > limits.max_ratio * max(info.compress_size, 1)
        ):
            raise ArtifactError(
                f"{where}: member {name!r} expands {info.compress_size} bytes to "
                f"{info.file_size} (more than {limits.max_ratio}x); refusing a possible zip bomb"
            )

    def expect(self, names: set[str]) -> None:
        """Every member the manifest names is there, and there is nothing else."""
        missing = sorted(names - set(self.infos))
        extra = sorted(set(self.infos) - names)
        if missing:
            raise ArtifactError(
                f"{self.where}: {MANIFEST} names member(s) {', '.join(missing)} that the archive "
                "lacks; the file is incomplete: recompile the model"
            )
        if extra:
            raise ArtifactError(
                f"{self.where}: the archive has member(s) {', '.join(extra[:5])} that "
                f"{MANIFEST} does not name; the file was changed after byoc wrote it"
            )

    def read(self, name: str, cap: int) -> bytes:
        info = self.infos.get(name)
        if info is None:
            raise ArtifactError(
                f"{self.where}: no {name} in the archive; it is not a .byoc file "
                "(write one with `byoc compile MODEL -o FILE.byoc`)"
            )
        if info.file_size > cap:
            raise ArtifactError(
                f"{self.where}: {name} declares {info.file_size} bytes, more than the limit {cap}"
            )
        try:
            with self.zf.open(info) as fh:
                data = fh.read(cap + 1)
        except Exception as exc:  # zipfile and zlib raise many types on damaged input
            raise ArtifactError(
                f"{self.where}: member {name!r} cannot be read ({exc}); the file is damaged: "
                "recompile the model"
            ) from None
        if len(data) != info.file_size:
            raise ArtifactError(
                f"{self.where}: member {name!r} has {len(data)} bytes, but the archive declares "
                f"{info.file_size}; the file is damaged"
            )
        return data

    def read_entry(self, entry: Mapping[str, Any]) -> bytes:
        """A member named by the manifest, with its size and sha256 checked."""
        name = entry["member"]
        if self.infos[name].file_size != entry["size"]:
            raise ArtifactError(
                f"{self.where}: member {name!r} has {self.infos[name].file_size} bytes, but "
                f"{MANIFEST} says {entry['size']}; the file is damaged: recompile the model"
            )
        data = self.read(name, entry["size"])
        if hashlib.sha256(data).hexdigest() != entry["sha256"]:
            raise ArtifactError(
                f"{self.where}: member {name!r} does not match its sha256 in {MANIFEST}; the "
                "file is damaged or was changed: recompile the model"
            )
        return data


def _plain(name: str) -> bool:
    return bool(_MEMBER.fullmatch(name)) and ".." not in name


# ---------------------------------------------------------------------------------------------
# the manifest's schema
# ---------------------------------------------------------------------------------------------


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
                raise self._bad(
                    f"'backends[{i}].distribution' is not a distribution name: {_short(dist)}"
                )
            if entry["name"] in self.backends:
                raise self._bad(f"backend '{entry['name']}' is listed twice")
            self.backends[entry["name"]] = entry
        self.inputs = self._signature(top.get("inputs"), "inputs")
        self.ranges = self._ranges(top["inputs"])  # a list: _signature checked it
        self.outputs = self._signature(top.get("outputs"), "outputs")
        if not self.outputs:
            raise self._bad("the model has no outputs")
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
        self.tables: dict[str, dict[str, Any]] = {}

    # -- checks ------------------------------------------------------------------------------

    def _bad(self, what: str) -> ArtifactError:
        return ArtifactError(
            f"{self.where}: {MANIFEST} is not valid: {what}; the file is damaged or was edited: "
            "recompile the model"
        )

    def _dict(self, value: Any, key: str) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise self._bad(f"'{key}' must be an object, got {_short(value)}")
        return value

    def _list(self, value: Any, key: str) -> list[Any]:
        if not isinstance(value, list):
            raise self._bad(f"'{key}' must be a list, got {_short(value)}")
        return value

    def _str(self, value: Any, key: str) -> str:
        if not isinstance(value, str) or not value or len(value) > NAME_LIMIT:
            raise self._bad(f"'{key}' must be a non-empty string, got {_short(value)}")
        if CONTROL.search(value):  # names reach terminals: no escape sequences
            raise self._bad(f"'{key}' holds control characters: {_short(value)}")
        return value

    def _int(self, value: Any, key: str) -> int:
        if type(value) is not int or value < 0:
            raise self._bad(f"'{key}' must be a non-negative int, got {_short(value)}")
        return value

    def _names(self, value: Any, key: str) -> list[str]:
        names = [self._str(v, f"{key}[{i}]") for i, v in enumerate(self._list(value, key))]
        if len(set(names)) != len(names):
            raise self._bad(f"'{key}' names a value twice: {names}")
        return names

    def _signature(self, value: Any, key: str) -> dict[str, TensorType | None]:
        out: dict[str, TensorType | None] = {}
        for i, item in enumerate(self._list(value, key)):
            item = self._dict(item, f"{key}[{i}]")
            name = self._str(item.get("name"), f"{key}[{i}].name")
            if name in out:
                raise self._bad(f"'{key}' names '{name}' twice")
            dtype, shape = item.get("dtype"), item.get("shape")
            if dtype is not None and (not isinstance(dtype, str) or dtype not in DTYPES):
                raise self._bad(f"'{key}[{i}].dtype' is not an ONNX tensor dtype: {_short(dtype)}")
            if shape is not None:
                dims = self._list(shape, f"{key}[{i}].shape")
                for d in dims:
                    ok = d is None or (type(d) is int and d >= 0)
                    symbol = isinstance(d, str) and 0 < len(d) <= 256 and not CONTROL.search(d)
                    if not ok and not symbol:
                        raise self._bad(f"'{key}[{i}].shape' has a bad dim {_short(d)}")
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
                raise self._bad(f"'inputs[{i}].range' must be two ints, got {_short(bounds)}")
            if bounds[0] >= bounds[1]:
                raise self._bad(f"'inputs[{i}].range' is empty: {bounds}")
            out[item["name"]] = (bounds[0], bounds[1])
        return out

    def _member(self, value: Any, key: str) -> dict[str, Any]:
        entry = self._dict(value, key)
        member = self._str(entry.get("member"), f"{key}.member")
        if not _plain(member) or member == MANIFEST:
            raise self._bad(f"'{key}.member' is not a plain file name: {_short(member)}")
        sha = self._str(entry.get("sha256"), f"{key}.sha256")
        if not _SHA256.fullmatch(sha):
            raise self._bad(f"'{key}.sha256' is not 64 lowercase hex digits: {_short(sha)}")
        self._int(entry.get("size"), f"{key}.size")
        return entry

    def _constant(self, value: Any, i: int) -> dict[str, Any]:
        entry = self._member(value, f"constants[{i}]")
        self._str(entry.get("name"), f"constants[{i}].name")
        dtype = entry.get("dtype")
        if not isinstance(dtype, str) or dtype not in DTYPES or dtype in ("object", "str"):
            raise self._bad(f"'constants[{i}].dtype' is not a numeric dtype: {_short(dtype)}")
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
            raise self._bad(f"'{key}.backend' is '{backend}', which 'backends' does not list")
        entry["inputs"] = self._names(entry.get("inputs"), f"{key}.inputs")
        entry["outputs"] = self._names(entry.get("outputs"), f"{key}.outputs")
        if not entry["outputs"]:
            raise self._bad(f"unit '{entry['name']}' has no outputs")
        if "onnx" in entry:
            self._member(entry["onnx"], f"{key}.onnx")
        if not isinstance(entry.setdefault("options", {}), dict):
            raise self._bad(f"'{key}.options' must be a table")
        return entry

    def _check_flow(self) -> None:
        """Every value a unit reads is an input, a constant, or produced by an earlier unit."""
        defined = set(self.inputs)
        for c in self.constants:
            if c["name"] in defined:
                raise self._bad(f"constant '{c['name']}' is also defined elsewhere")
            defined.add(c["name"])
        names: set[str] = set()
        for u in self.units:
            if u["name"] in names:
                raise self._bad(f"two units are named '{u['name']}'")
            names.add(u["name"])
            for v in u["inputs"]:
                if v not in defined:
                    raise self._bad(
                        f"unit '{u['name']}' reads '{v}', which no input, constant or earlier "
                        "unit produces"
                    )
            for v in u["outputs"]:
                if v in defined:
                    raise self._bad(f"unit '{u['name']}' produces '{v}', already defined")
                defined.add(v)
        for v in self.outputs:
            if v not in defined:
                raise self._bad(f"model output '{v}' is produced by no unit")
        members = [m for m in self.members()]
        if len(set(members)) != len(members):
            raise self._bad("two entries name the same member")

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
                raise self._bad(
                    f"input '{value.name}' is {_shown(have)} in 'inputs', but unit "
                    f"'{unit['name']}' reads it as {_shown(want)}"
                )

    def members(self) -> list[str]:
        out = [u["member"] for u in self.units] + [c["member"] for c in self.constants]
        return out + [u["onnx"]["member"] for u in self.units if "onnx" in u]

    def options(self, reg: Registry, unit: dict[str, Any]) -> dict[str, Any]:
        """A unit's own settings (its precision), checked as the backend's options are: only
        options the file may carry, each of its type and allowed values."""
        given = unit["options"]
        if not given:
            return {}
        backend = reg.backends[unit["backend"]]
        carried = {k: v for k, v in backend.options.items() if k not in backend.local_options}
        unknown = sorted(set(given) - set(carried))
        if unknown:
            raise self._bad(f"unit '{unit['name']}' sets {', '.join(unknown)}, not its options")
        try:
            table = _check_table(dict(given), carried, f"units.{unit['name']}", self.where)
        except ConfigError as exc:
            raise ArtifactError(str(exc)) from None
        return {k: table[k] for k in given}

    def check_backends(self, reg: Registry, local: Config) -> None:
        """Every backend the units use is installed and available; fill in their tables: the
        file's settings, and this machine's (``local``'s) for the backend's local options."""
        for name in dict.fromkeys(u["backend"] for u in self.units):
            saved = self.backends[name]
            backend = reg.backends.get(name)
            if backend is None:
                raise ArtifactError(f"{self.where} needs backend '{name}' {install_hint(saved)}")
            reason = backend.unavailable_reason
            if reason is not None:
                raise ArtifactError(
                    f"{self.where} needs backend '{name}', which is installed but unavailable: "
                    f"{reason}"
                )
            if name != FALLBACK and backend.version != saved["version"]:
                warnings.warn(
                    f"{self.where} was built with {saved['distribution']} {saved['version']}, "
                    f"installed is {backend.distribution} {backend.version}; if it does not "
                    "load or run, recompile the model",
                    stacklevel=3,
                )
        try:
            self.tables[FALLBACK] = _check_table(
                dict(self.fallback), FALLBACK_KEYS, "fallback", self.where
            )
            for name, table in self.config.items():
                backend = reg.backends[name]
                table = self._carried(name, table, backend.local_options)
                table.update(_local(name, local, backend.options, backend.local_options))
                self.tables[name] = _backend_table(name, table, backend.options, self.where)
        except ConfigError as exc:
            raise ArtifactError(
                f"{exc}; the saved configuration does not suit the installed backend: "
                "recompile the model"
            ) from None

    def _carried(self, name: str, table: dict[str, Any], local: frozenset[str]) -> dict[str, Any]:
        """The file's settings for a backend. A file of format 2 carries none of the loading
        machine's (compiler, flags, directories): one that does was edited to run a command
        or write a file of its author's choosing. Format 1 carried them: they are dropped."""
        found = sorted(set(table) & local)
        if found and self.version >= 2:
            raise self._bad(
                f"'config.{name}' sets {', '.join(found)}, a setting of the machine that loads "
                "the file (a .byoc file carries no compiler, flags or directories)"
            )
        return {k: v for k, v in table.items() if k not in local}

    def check_stamp(self) -> None:
        """With trust_native: say (once) when the file's native code was built for another
        host; its backends then rebuild from source instead of using it."""
        host = self.stamp.get("host")
        if host is not None and host != native.host_tag():
            cpu = self.stamp.get("cpu")
            warnings.warn(
                f"{self.where} was built on another host ({_short(cpu)}); its compiled code is "
                "not used here: the backends rebuild it from source",
                stacklevel=4,
            )

    def limit_threads(self, threads: int) -> None:
        """Run with at most ``threads`` threads: onnxruntime's, and each backend's ``threads``
        (a key every backend has)."""
        for name, table in self.tables.items():
            table["intra_op_num_threads" if name == FALLBACK else "threads"] = threads


def install_hint(saved: Mapping[str, str]) -> str:
    """``pip install byoc-dnnl`` for a backend a file names (a distribution name: the manifest's
    check refuses anything else), or how to load one a registry had in-process."""
    dist = saved["distribution"]
    if dist == IN_PROCESS:
        return "(added to a registry in-process): load with registry= holding its plugin"
    return f"from {dist} {saved['version'][:40]}: pip install {dist}"


def _local(
    name: str, cfg: Config, options: Mapping[str, Any], local: frozenset[str]
) -> dict[str, Any]:
    """This machine's settings for a backend's local options (its compiler, flags,
    directories), from the loading user's config; the rest of that config is not used."""
    table = cfg.backend_table(name, options) if name in cfg.backend else {}
    return {k: v for k, v in table.items() if k in local and v is not None}


def _backend_table(
    name: str, table: Mapping[str, Any], options: Mapping[str, Any], where: str
) -> dict[str, Any]:
    given = {k: v for k, v in table.items() if v is not None}  # None: the default
    cfg = Config(backend={name: given}, source=where)
    return cfg.backend_table(name, options)


_BACKEND_FIELDS = ("name", "distribution", "version")
_DISTRIBUTION = re.compile(r"[A-Za-z0-9]([A-Za-z0-9._-]{0,98}[A-Za-z0-9])?")  # PEP 508 names


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


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
