"""Loading a ``.byoc`` file (docs/format.md), which ``byoc.export`` writes.

Loading treats the file as hostile: ``byoc.archive`` checks the zip's declared sizes and
compression ratios before reading anything and reads with a cap, ``byoc.manifest`` checks the
manifest's schema and data flow, and each member's sha256 is checked before its bytes reach a
backend's ``byoc_deserialize`` hook. Nothing is extracted to disk and nothing is unpickled.
This module matches the file to this machine (its backends installed and available, their
settings: the file's and this machine's local ones) and builds the compiled model.
"""

from __future__ import annotations

import math
import os
import warnings
import zipfile
from collections.abc import Mapping
from typing import Any

import numpy as np
import onnx

from byoc import native, plugins
from byoc.archive import LIMITS, Archive, Limits
from byoc.compiled import CompiledModel, Step
from byoc.config import COUNT, FALLBACK_KEYS, Config, _check_table, load_config
from byoc.errors import ArtifactError, ByocError, ConfigError
from byoc.export import MANIFEST
from byoc.manifest import Manifest, json_of, short
from byoc.plan import FALLBACK, Partition
from byoc.plugins import IN_PROCESS, Registry
from byoc.units import create_runtime

__all__ = ["LIMITS", "Limits", "inspect", "install_hint", "load"]

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
        archive, manifest = _open(zf, where, limits)
        reg = registry or plugins.registry()
        tables = _tables(manifest, reg, load_config(config))
        if threads is not None:
            _limit_threads(tables, threads)
        if trust_native:
            _check_stamp(manifest)
        steps = []
        for unit in manifest.units:
            data = archive.read_entry(unit)
            artifact = _deserialize(
                reg, unit["backend"], data, f"{where}: unit {unit['name']}", trust_native
            )
            model = onnx.ModelProto()
            if "onnx" in unit:
                onnx_bytes = archive.read_entry(unit["onnx"])
                model = _deserialize(
                    reg, FALLBACK, onnx_bytes, f"{where}: unit {unit['name']}", False
                )
                model = onnx.load_from_string(model)
                manifest.check_reads(unit, model.graph)
            elif unit["backend"] == FALLBACK:
                manifest.check_reads(unit, onnx.load_from_string(artifact).graph)
            options = _unit_options(manifest, reg, unit)
            table = {**tables[unit["backend"]], **options}
            runtime = create_runtime(reg, unit["backend"], unit["name"], artifact, table)
            part = Partition(
                unit["name"], unit["backend"], [], unit["inputs"], unit["outputs"], model
            )
            part.options = options
            steps.append(Step(part, artifact, runtime))
        constants = {
            c["name"]: _constant(archive.read_entry(c), c, where) for c in manifest.constants
        }
    return CompiledModel(
        None,
        steps,
        tables[FALLBACK],
        inputs=manifest.inputs,
        outputs=manifest.outputs,
        constants=constants,
        backend_configs={k: v for k, v in tables.items() if k != FALLBACK},
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
        archive, manifest = _open(zf, where, limits)
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
        "bytes": sum(i.file_size for i in archive.infos.values()),
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


def _open(zf: zipfile.ZipFile, where: str, limits: Limits) -> tuple[Archive, Manifest]:
    """The archive's directory and its manifest checked, and the one against the other: every
    member the manifest names is there, and nothing else."""
    archive = Archive(zf, where, limits)
    manifest = Manifest(json_of(archive.read(MANIFEST, limits.max_manifest), where), where)
    archive.expect({MANIFEST, *manifest.members()})
    return archive, manifest


# ---------------------------------------------------------------------------------------------
# the file on this machine: its backends and their settings
# ---------------------------------------------------------------------------------------------


def _tables(manifest: Manifest, reg: Registry, local: Config) -> dict[str, dict[str, Any]]:
    """Every backend the units use is installed and available; their tables, by backend: the
    file's settings, and this machine's (``local``'s) for the backend's local options."""
    where = manifest.where
    for name in dict.fromkeys(u["backend"] for u in manifest.units):
        saved = manifest.backends[name]
        backend = reg.backends.get(name)
        if backend is None:
            raise ArtifactError(f"{where} needs backend '{name}' {install_hint(saved)}")
        reason = backend.unavailable_reason
        if reason is not None:
            raise ArtifactError(
                f"{where} needs backend '{name}', which is installed but unavailable: {reason}"
            )
        if name != FALLBACK and backend.version != saved["version"]:
            warnings.warn(
                f"{where} was built with {saved['distribution']} {saved['version']}, "
                f"installed is {backend.distribution} {backend.version}; if it does not "
                "load or run, recompile the model",
                stacklevel=3,
            )
    tables = {}
    try:
        tables[FALLBACK] = _check_table(dict(manifest.fallback), FALLBACK_KEYS, "fallback", where)
        for name, table in manifest.config.items():
            backend = reg.backends[name]
            table = _carried(manifest, name, table, backend.local_options)
            table.update(_local(name, local, backend.options, backend.local_options))
            tables[name] = _backend_table(name, table, backend.options, where)
    except ConfigError as exc:
        raise ArtifactError(
            f"{exc}; the saved configuration does not suit the installed backend: "
            "recompile the model"
        ) from None
    return tables


def _carried(
    manifest: Manifest, name: str, table: dict[str, Any], local: frozenset[str]
) -> dict[str, Any]:
    """The file's settings for a backend. A file of format 2 carries none of the loading
    machine's (compiler, flags, directories): one that does was edited to run a command
    or write a file of its author's choosing. Format 1 carried them: they are dropped."""
    found = sorted(set(table) & local)
    if found and manifest.version >= 2:
        raise manifest.bad(
            f"'config.{name}' sets {', '.join(found)}, a setting of the machine that loads "
            "the file (a .byoc file carries no compiler, flags or directories)"
        )
    return {k: v for k, v in table.items() if k not in local}


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


def _unit_options(manifest: Manifest, reg: Registry, unit: dict[str, Any]) -> dict[str, Any]:
    """A unit's own settings (its precision), checked as the backend's options are: only
    options the file may carry, each of its type and allowed values."""
    given = unit["options"]
    if not given:
        return {}
    backend = reg.backends[unit["backend"]]
    carried = {k: v for k, v in backend.options.items() if k not in backend.local_options}
    unknown = sorted(set(given) - set(carried))
    if unknown:
        raise manifest.bad(f"unit '{unit['name']}' sets {', '.join(unknown)}, not its options")
    try:
        table = _check_table(dict(given), carried, f"units.{unit['name']}", manifest.where)
    except ConfigError as exc:
        raise ArtifactError(str(exc)) from None
    return {k: table[k] for k in given}


def _limit_threads(tables: dict[str, dict[str, Any]], threads: int) -> None:
    """Run with at most ``threads`` threads: onnxruntime's, and each backend's ``threads``
    (a key every backend has)."""
    for name, table in tables.items():
        table["intra_op_num_threads" if name == FALLBACK else "threads"] = threads


def _check_stamp(manifest: Manifest) -> None:
    """With trust_native: say (once) when the file's native code was built for another
    host; its backends then rebuild from source instead of using it."""
    host = manifest.stamp.get("host")
    if host is not None and host != native.host_tag():
        cpu = manifest.stamp.get("cpu")
        warnings.warn(
            f"{manifest.where} was built on another host ({short(cpu)}); its compiled code is "
            "not used here: the backends rebuild it from source",
            stacklevel=4,
        )


def install_hint(saved: Mapping[str, str]) -> str:
    """``pip install byoc-dnnl`` for a backend a file names (a distribution name: the manifest's
    check refuses anything else), or how to load one a registry had in-process."""
    dist = saved["distribution"]
    if dist == IN_PROCESS:
        return "(added to a registry in-process): load with registry= holding its plugin"
    return f"from {dist} {saved['version'][:40]}: pip install {dist}"
