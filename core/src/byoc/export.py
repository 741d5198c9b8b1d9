"""Saving a compiled model to one ``.byoc`` file (docs/format.md); ``byoc.reader`` loads it.

The file is a zip archive: ``manifest.json`` plus one member per unit of the schedule, written by
the unit's backend (``byoc_serialize``; the onnxruntime fallback writes ONNX bytes), each with
its sha256 in the manifest.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys
import tempfile
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from byoc import host, native
from byoc.errors import ArtifactError, BackendError, ByocError, ModelError
from byoc.graph import TensorType
from byoc.plan import FALLBACK, Partition
from byoc.plugins import Registry
from byoc.version import __version__


class Saved(Protocol):
    """What ``save`` reads of a compiled model (``byoc.compiled.CompiledModel``, which this
    module does not import: the model imports ``save``)."""

    registry: Registry
    steps: list[Any]
    fallback_config: dict[str, Any]
    backend_configs: dict[str, dict[str, Any]]
    inputs: dict[str, TensorType | None]
    output_types: dict[str, TensorType | None]
    outputs: list[str]
    input_ranges: dict[str, tuple[int, int]]
    file: str | None
    _constants: dict[str, Any]


FORMAT = "byoc"
FORMAT_VERSION = 2  # 2: no toolchain or filesystem settings in "config"; a "stamp"
MANIFEST = "manifest.json"
# what a name in the manifest may not hold (it reaches terminals), and its longest length
CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
NAME_LIMIT = 4096
ZIP_MAGIC = b"PK\x03\x04"
_UNSAFE = re.compile(r"[^A-Za-z0-9_.\-]")


def is_artifact(path: str | os.PathLike[str]) -> bool:
    """True when ``path`` is a file that starts like a zip archive (a ``.byoc`` file)."""
    try:
        with open(path, "rb") as fh:
            return fh.read(4) == ZIP_MAGIC
    except OSError:
        return False


# ---------------------------------------------------------------------------------------------
# saving
# ---------------------------------------------------------------------------------------------


def _names_readable(manifest: dict[str, Any]) -> None:
    """Every value name the manifest holds is one ``byoc.load`` takes: names reach terminals,
    so the reader refuses control characters (a newline, an escape sequence) and lengths over
    4096; saving such a model would write a file that does not load."""
    names = [v["name"] for key in ("inputs", "outputs", "constants") for v in manifest[key]]
    names += [n for u in manifest["units"] for n in (*u["inputs"], *u["outputs"])]
    for name in names:
        if CONTROL.search(name) or len(name) > NAME_LIMIT:
            raise ArtifactError(
                f"value name {name[:80]!r} holds control characters or is over 4096 long: a "
                ".byoc file cannot carry it (rename the value in the model)"
            )


def save(compiled: Saved, path: str | os.PathLike[str]) -> Path:
    """Write ``compiled`` to ``path`` as one ``.byoc`` file (atomically) and return the path."""
    if compiled.file is not None:
        raise ModelError(
            f"{compiled.file} runs whole on onnxruntime, too large for byoc to partition, and a "
            ".byoc file holds the model's ONNX as one protobuf message (2 GiB at most): run the "
            ".onnx file itself (byoc run, or onnxruntime)"
        )
    reg = compiled.registry
    members: dict[str, bytes] = {}
    units = []
    rerun = compiled.fallback_config.get("on_backend_error") == "onnxruntime"
    for i, step in enumerate(compiled.steps):
        unit = step.unit
        data = _serialize(reg, unit, step.artifact)
        safe = _UNSAFE.sub("_", unit.name)
        entry: dict[str, Any] = {
            "name": unit.name,
            "backend": unit.backend,
            "inputs": list(unit.inputs),
            "outputs": list(unit.outputs),
            **_add(
                members, f"{i:04d}_{safe}{'.onnx' if unit.backend == FALLBACK else '.bin'}", data
            ),
        }
        if unit.options:  # the partition's own settings (a reduced precision)
            entry["options"] = dict(unit.options)
        if unit.backend != FALLBACK and (rerun or step.guarded) and unit.model.graph.node:
            # the partition as ONNX, for [fallback] on_backend_error = "onnxruntime" and
            # inputs holding NaN or +-inf (Backend.finite_only)
            onnx_bytes = unit.model.SerializeToString()
            entry["onnx"] = _add(members, f"{i:04d}_{safe}.onnx", onnx_bytes)
        units.append(entry)
    constants = []
    for i, (name, value) in enumerate(compiled._constants.items()):
        value = np.ascontiguousarray(value)
        constants.append(
            {
                "name": name,
                "dtype": value.dtype.name,
                "shape": list(value.shape),
                **_add(
                    members,
                    f"const_{i:04d}.bin",
                    value.astype(value.dtype.newbyteorder("<")).tobytes(),
                ),
            }
        )
    used = list(dict.fromkeys(s.unit.backend for s in compiled.steps))
    manifest = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "byoc_version": __version__,
        "backends": [
            {
                "name": name,
                "distribution": reg.backends[name].distribution,
                "version": reg.backends[name].version,
            }
            for name in used
        ],
        "inputs": [
            {**_type_json(n, t), **_range(compiled.input_ranges.get(n))}
            for n, t in compiled.inputs.items()
        ],
        "outputs": [_type_json(n, compiled.output_types.get(n)) for n in compiled.outputs],
        "constants": constants,
        "fallback": dict(compiled.fallback_config),
        "config": {
            n: carried(reg, n, compiled.backend_configs.get(n, {})) for n in used if n != FALLBACK
        },
        "stamp": stamp(reg, used),
        "units": units,
    }
    _names_readable(manifest)
    text = json.dumps(manifest, indent=1, sort_keys=False, allow_nan=False)
    target = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent or ".")
    try:
        with os.fdopen(fd, "wb") as fh, zipfile.ZipFile(fh, "w") as zf:
            zf.writestr(MANIFEST, text, compress_type=zipfile.ZIP_DEFLATED)
            for member, data in members.items():
                zf.writestr(member, data, compress_type=zipfile.ZIP_STORED)
        os.chmod(tmp, 0o666 & ~_umask())  # as open() would make it, not mkstemp's 0600
        os.replace(tmp, target)
    except OSError as exc:
        raise ArtifactError(f"cannot write '{target}': {exc}") from None
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return target


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def carried(reg: Registry, name: str, table: Mapping[str, Any]) -> dict[str, Any]:
    """A backend's table as a file carries it: without the settings of the machine that runs
    it (``Backend.local_options``: compiler, flags, directories)."""
    local = reg.backends[name].local_options
    return {k: v for k, v in table.items() if k not in local}


def stamp(reg: Registry, used: list[str]) -> dict[str, Any]:
    """What the file's native code was built for and with: the host (``byoc.native.host_tag``:
    platform, Python, cffi, CPU model and flags), the CPU's vector ISA, and each backend's
    version and native build. ``byoc.load`` checks it before it touches a carried binary."""
    return {
        "host": native.host_tag(),
        "cpu": host.cpu().summary(),
        "python": sys.version.split()[0],
        "byoc": __version__,
        "backends": {
            n: {"version": reg.backends[n].version, "build": _build_id(reg, n)} for n in used
        },
    }


def _build_id(reg: Registry, name: str) -> str:
    try:
        return str(reg.backends[name].build())
    except Exception:  # a build id is information, never a reason to fail a save
        return ""


def _serialize(reg: Registry, unit: Partition, artifact: Any) -> bytes:
    where = f"partition {unit.name} (backend {unit.backend})"
    try:
        data = reg.route(unit.backend).byoc_serialize(backend=unit.backend, artifact=artifact)
    except ByocError:
        raise
    except Exception as exc:
        raise BackendError(f"{where}: serializing failed: {type(exc).__name__}: {exc}") from exc
    if data is None:
        raise ArtifactError(
            f"{where}: the backend cannot serialize its artifacts (no byoc_serialize hook), so "
            "this model cannot be saved; run it from the ONNX model instead"
        )
    if not isinstance(data, bytes | bytearray | memoryview):
        raise BackendError(f"{where}: byoc_serialize returned {type(data).__name__}, not bytes")
    return bytes(data)


def _add(members: dict[str, bytes], name: str, data: bytes) -> dict[str, Any]:
    members[name] = data
    return {"member": name, "sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}


def _range(bounds: tuple[int, int] | None) -> dict[str, Any]:
    """An integer input's ``[low, high)`` for random inputs (indices, masks), when known."""
    return {} if bounds is None else {"range": [int(bounds[0]), int(bounds[1])]}


def _type_json(name: str, t: TensorType | None) -> dict[str, Any]:
    return {
        "name": name,
        "dtype": None if t is None or t.dtype is None else t.dtype.name,
        "shape": None if t is None or t.shape is None else list(t.shape),
    }
