"""Running a compiled model over many samples, without Ray (``byoc.ray`` adds the workers).

A sample is one ``.npz`` file (the suffix in any case) whose arrays are named after the model's
inputs; its outputs go to an ``.npz`` file of the same name whose arrays are named after the
model's outputs. Samples of one shape (but for dim 0) run as one stacked run when the model's
batch dim (dim 0 of every input) is free.
"""

from __future__ import annotations

import math
import os
import tempfile
import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from byoc.errors import ByocError, ConfigError, InputError
from byoc.graph import TensorType
from byoc.inputs import check_inputs, check_one

SUFFIX = ".npz"
MAX_SAMPLE_MB = 256  # of arrays whose size the model leaves open (symbolic dims)

Sample = dict[str, np.ndarray]


def sample_files(directory: str | os.PathLike[str]) -> list[Path]:
    """The ``.npz`` files of a directory (``x.NPZ`` too), sorted by name; an InputError if there
    are none."""
    path = Path(directory)
    if not path.is_dir():
        raise InputError(f"--inputs: '{path}' is not a directory")
    files = sorted(p for p in path.iterdir() if p.suffix.lower() == SUFFIX and p.is_file())
    if not files:
        raise InputError(
            f"--inputs: '{path}' has no {SUFFIX} files (one per sample, arrays named after "
            "the model's inputs: numpy.savez(path, x=array))"
        )
    return files


def check_outputs(outputs: str | os.PathLike[str], inputs: str | os.PathLike[str]) -> Path:
    """The ``--outputs`` directory, checked before any work starts and without creating it: not
    the ``--inputs`` directory, and a directory that exists or can be made, which this user may
    write in; an InputError says why not."""
    path = Path(outputs)
    if path.resolve() == Path(inputs).resolve():
        raise InputError("--outputs is the --inputs directory: outputs would overwrite samples")
    there = path  # the directory itself, or the nearest part of its path that exists
    while not there.exists() and there.parent != there:
        there = there.parent
    if not there.is_dir():
        made = "" if there == path else f", so '{path}' cannot be made in it"
        raise InputError(f"--outputs: '{there}' is not a directory{made}; name a directory")
    if not os.access(there, os.W_OK | os.X_OK):
        what = "write in" if there == path else f"make '{path}' in"
        raise InputError(
            f"--outputs: this user may not {what} '{there}' (permission denied); name a "
            "directory you can write to"
        )
    return path


def make_outputs(path: Path) -> None:
    """Create the ``--outputs`` directory that ``check_outputs`` passed; an InputError if it
    cannot be made after all (a dangling link, a read-only filesystem)."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(f"--outputs: cannot make '{path}': {exc.strerror or exc}") from None


def check_counts(**counts: int | None) -> None:
    """``--workers``, ``--threads``, ``--batch-size``: each at least 1 when given."""
    for name, value in counts.items():
        if value is not None and (type(value) is not int or value < 1):
            raise ConfigError(f"--{name.replace('_', '-')} must be at least 1, got {value!r}")


def read_sample(
    path: str | os.PathLike[str],
    signature: Mapping[str, TensorType | None],
    max_bytes: int = MAX_SAMPLE_MB << 20,
) -> Sample:
    """One sample's arrays, checked against the model's inputs: an InputError says what is
    wrong (not an .npz file, a missing or extra array, a wrong dtype or shape, too large).

    Each array's dtype and shape are checked from its ``.npy`` header and the zip's central
    directory before its data is decompressed, so a small file that would inflate to
    gigabytes is refused unread. Arrays of inputs with symbolic dims may hold ``max_bytes`` in
    all; the model fixes the size of the others.
    """
    if not zipfile.is_zipfile(path):
        raise InputError("not an .npz file (a zip of .npy arrays, as numpy.savez writes)")
    try:
        with zipfile.ZipFile(path) as zf:
            arrays = {}
            for name, info in _checked_members(zf, signature, max_bytes).items():
                with zf.open(info) as f:
                    arrays[name] = np.lib.format.read_array(f, allow_pickle=False)
    except InputError:
        raise
    except Exception as exc:  # zipfile and numpy raise many types on damaged files
        raise InputError(f"not a readable .npz file ({type(exc).__name__}: {exc})") from None
    return check_inputs(signature, arrays)


def _checked_members(
    zf: zipfile.ZipFile, signature: Mapping[str, TensorType | None], max_bytes: int
) -> dict[str, zipfile.ZipInfo]:
    """The zip's members by input name, their headers checked against the model's inputs."""
    members = {info.filename.removesuffix(".npy"): info for info in zf.infolist()}
    unknown = [n for n in members if n not in signature]
    if unknown:
        raise InputError(
            f"unknown input {', '.join(map(repr, unknown))}; "
            f"the model's inputs are {', '.join(map(repr, signature))}"
        )
    free = 0  # bytes of the arrays whose size the model leaves open
    symbols: dict[str, tuple[int, str]] = {}
    for name, info in members.items():
        dtype, shape = _npy_header(zf, info)
        want = signature[name]
        if want is not None:  # dtype and shape only: a zero-stride view allocates nothing
            check_one(name, np.broadcast_to(np.zeros((), dtype), shape), want, symbols)
        if want is None or want.dtype is None or not want.is_static:
            free += dtype.itemsize * math.prod(shape)
        if free > max_bytes:
            raise InputError(
                f"input '{name}' is {dtype} {shape}: the sample's arrays would take "
                f"{free / 2**20:.0f} MiB, more than the {max_bytes / 2**20:.0f} MiB a sample may "
                "hold; split it into smaller samples, or raise --max-sample-mb"
            )
    return members


def _npy_header(
    zf: zipfile.ZipFile, info: zipfile.ZipInfo
) -> tuple[np.dtype[Any], tuple[int, ...]]:
    """A member's dtype (in native byte order) and shape, read from its ``.npy`` header alone;
    an InputError when the member is not an array or its size is not what the header says."""
    fmt = np.lib.format
    with zf.open(info) as f:
        try:
            version = fmt.read_magic(f)
            read = fmt.read_array_header_1_0 if version == (1, 0) else fmt.read_array_header_2_0
            shape, _, dtype = read(f)
        except ValueError as exc:
            raise InputError(f"'{info.filename}' is not a .npy array ({exc})") from None
        size = f.tell() + dtype.itemsize * math.prod(shape)
    if dtype.hasobject:
        raise InputError(
            f"'{info.filename}' holds Python objects (a pickle), which byoc does not load: "
            "save numeric or string arrays"
        )
    if info.file_size != size:
        raise InputError(
            f"'{info.filename}' is {info.file_size} bytes, but its header says {dtype} {shape}, "
            f"which takes {size}: the file is damaged"
        )
    return dtype.newbyteorder("=") if dtype.byteorder in "<>" else dtype, shape


def write_sample(path: str | os.PathLike[str], outputs: Mapping[str, np.ndarray]) -> None:
    """Write outputs as one ``.npz`` file (read back with ``numpy.load``). The file appears
    whole or not at all: it is written under a temporary name and renamed."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f, zipfile.ZipFile(f, "w") as zf:
            for name, value in outputs.items():
                array = np.asarray(value)
                if array.dtype.kind == "O":  # ONNX strings
                    array = array.astype(str)
                with zf.open(f"{name}.npy", "w", force_zip64=True) as member:
                    np.lib.format.write_array(member, array, allow_pickle=False)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def batch_dim_free(signature: Mapping[str, TensorType | None]) -> bool:
    """Whether samples can be stacked along dim 0: every input has one and it is symbolic."""
    return bool(signature) and all(
        t is not None and bool(t.shape) and not isinstance(t.shape[0], int)  # type: ignore[index]
        for t in signature.values()
    )


@dataclass
class _Group:
    """Samples of one shape, stacked into one run."""

    indices: list[int] = field(default_factory=list)
    rows: list[int] = field(default_factory=list)  # each sample's dim 0


def run_samples(model: Any, samples: Sequence[Sample]) -> list[Sample | Exception]:
    """Each checked sample's outputs, or the exception its run raised, in order.

    When the model's batch dim is free, samples whose shapes differ at most in dim 0 run as one
    stacked run, which is split back along dim 0; when an output does not have the stacked rows
    in dim 0, or the stacked run fails, the samples run one at a time, so a bad one fails alone.
    """
    stacked: dict[int, Sample] = {}
    if batch_dim_free(model.inputs) and len(samples) > 1:
        groups: dict[tuple[Any, ...], _Group] = {}
        for i, sample in enumerate(samples):
            rows = {a.shape[0] for a in sample.values()}
            if len(rows) != 1:  # inputs disagree on the rows: no telling how to split
                continue
            key = tuple((n, a.shape[1:], a.dtype.str) for n, a in sample.items())
            group = groups.setdefault(key, _Group())
            group.indices.append(i)
            group.rows.append(rows.pop())
        for group in groups.values():
            if len(group.indices) > 1:
                for i, out in zip(group.indices, _stacked(model, samples, group), strict=True):
                    if out is not None:
                        stacked[i] = out
    return [stacked[i] if i in stacked else _one(model, s) for i, s in enumerate(samples)]


def _stacked(model: Any, samples: Sequence[Sample], group: _Group) -> list[Sample | None]:
    """The group's outputs split per sample, or Nones when it cannot run stacked."""
    names = list(samples[group.indices[0]])
    stacked = {n: np.concatenate([samples[i][n] for i in group.indices]) for n in names}
    total = sum(group.rows)
    try:
        outputs = model.run(stacked)
    except Exception:
        return [None] * len(group.indices)
    if not all(v.ndim and v.shape[0] == total for v in outputs.values()):
        return [None] * len(group.indices)
    bounds = np.cumsum(group.rows)[:-1]
    parts = {n: np.split(v, bounds) for n, v in outputs.items()}
    return [{n: parts[n][k] for n in parts} for k in range(len(group.indices))]


def _one(model: Any, sample: Sample) -> Sample | Exception:
    try:
        return dict(model.run(sample))
    except Exception as exc:
        return exc


def reason(exc: BaseException) -> str:
    """One line saying why a sample failed."""
    text = str(exc) if isinstance(exc, ByocError) else f"{type(exc).__name__}: {exc}"
    return " ".join(text.split())


@dataclass
class BatchReport:
    """What ``byoc batch`` did: samples written, samples failed (file name, why), time."""

    outputs: Path
    written: int = 0
    failed: list[tuple[str, str]] = field(default_factory=list)
    seconds: float = 0.0  # reading, running and writing samples
    startup_seconds: float = 0.0  # starting the workers, each loading the model
    hosts: list[str] = field(default_factory=list)  # one per worker
    threads: int = 0

    @property
    def total(self) -> int:
        return self.written + len(self.failed)

    @property
    def workers(self) -> int:
        return len(self.hosts)

    @property
    def passed(self) -> bool:
        return not self.failed

    def table(self) -> str:
        rate = self.total / self.seconds if self.seconds > 0 else 0.0
        lines = [
            f"{self.total} samples on {self.workers} worker(s) x {self.threads} thread(s) in "
            f"{self.seconds:.1f} s ({rate:.1f} samples/s; workers started in "
            f"{self.startup_seconds:.1f} s): {self.written} written to {self.outputs}, "
            f"{len(self.failed)} failed"
        ]
        lines += [f"  {name}: {why}" for name, why in self.failed]
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        return {
            "outputs": str(self.outputs),
            "written": self.written,
            "failed": [{"file": n, "reason": r} for n, r in self.failed],
            "seconds": self.seconds,
            "startup_seconds": self.startup_seconds,
            "workers": self.workers,
            "hosts": self.hosts,
            "threads": self.threads,
        }
