"""Running a compiled model over many samples, without Ray (``byoc.ray`` adds the workers).

A sample is one ``.npz`` file whose arrays are named after the model's inputs; its outputs go to
an ``.npz`` file of the same name whose arrays are named after the model's outputs. Samples of
one shape (but for dim 0) run as one stacked run when the model's batch dim (dim 0 of every
input) is free.
"""

from __future__ import annotations

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
from byoc.inputs import check_inputs

SUFFIX = ".npz"

Sample = dict[str, np.ndarray]


def sample_files(directory: str | os.PathLike[str]) -> list[Path]:
    """The ``.npz`` files of a directory, sorted by name; an InputError if there are none."""
    path = Path(directory)
    if not path.is_dir():
        raise InputError(f"--inputs: '{path}' is not a directory")
    files = sorted(p for p in path.iterdir() if p.suffix == SUFFIX and p.is_file())
    if not files:
        raise InputError(
            f"--inputs: '{path}' has no {SUFFIX} files (one per sample, arrays named after "
            "the model's inputs: numpy.savez(path, x=array))"
        )
    return files


def check_counts(**counts: int | None) -> None:
    """``--workers``, ``--threads``, ``--batch-size``: each at least 1 when given."""
    for name, value in counts.items():
        if value is not None and (type(value) is not int or value < 1):
            raise ConfigError(f"--{name.replace('_', '-')} must be at least 1, got {value!r}")


def read_sample(path: str | os.PathLike[str], signature: Mapping[str, TensorType | None]) -> Sample:
    """One sample's arrays, checked against the model's inputs: an InputError says what is
    wrong (not an .npz file, a missing or extra array, a wrong dtype or shape)."""
    if not zipfile.is_zipfile(path):
        raise InputError("not an .npz file (a zip of .npy arrays, as numpy.savez writes)")
    try:
        with np.load(path, allow_pickle=False) as npz:
            arrays = {name: npz[name] for name in npz.files}
    except Exception as exc:  # np.load raises many types on damaged files
        raise InputError(f"not a readable .npz file ({type(exc).__name__}: {exc})") from None
    return check_inputs(signature, arrays)


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
