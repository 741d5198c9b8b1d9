"""Batch inference on Ray (``pip install "byoc[ray]"``): ``Predictor`` for Ray Data, and the
driver behind ``byoc batch``.

The model is compiled once, on the driver, into a ``.byoc`` file; workers load that file (a
worker on another kind of host rebuilds native code from the source the file carries, or says
why it cannot). Only this module imports Ray.
"""

from __future__ import annotations

import hashlib
import logging
import os
import socket
import tempfile
import time
from collections import deque
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import ray

import byoc
from byoc.batch import (
    MAX_SAMPLE_MB,
    BatchReport,
    Sample,
    check_counts,
    check_outputs,
    make_outputs,
    read_sample,
    reason,
    run_samples,
    sample_files,
    write_sample,
)
from byoc.config import load_config
from byoc.context import ConfigLike
from byoc.errors import ByocError, ConfigError, InputError
from byoc.export import is_artifact
from byoc.inputs import check_inputs
from byoc.progress import ProgressFn
from byoc.reader import load


class Predictor:
    """Runs a ``.byoc`` file over Ray Data batches, loaded once per worker::

        ds.map_batches(Predictor, fn_constructor_kwargs={"model": "m.byoc"},
                       concurrency=2, batch_size=16)

    Each row holds one sample: a column per model input (the sample's array, e.g. 1x3x48x192).
    The result has a column per model output, a row per sample. Samples are stacked along the
    batch dim when the model's is free, and run one by one otherwise. A bad row raises an
    ``InputError`` naming it (Ray Data then fails the job; ``byoc batch`` skips bad samples).

    ``model`` is the path of a ``.byoc`` file on the worker's machine, or its bytes.
    ``threads`` (default: the CPUs Ray gave this worker) caps the threads of one run.
    """

    def __init__(self, model: str | os.PathLike[str] | bytes, threads: int | None = None) -> None:
        threads = threads or _assigned_cpus()
        if not isinstance(model, bytes):
            if not is_artifact(model):
                raise InputError(
                    f"Predictor takes a .byoc file, and '{os.fspath(model)}' is not one: compile "
                    "the model once with `byoc compile MODEL -c CFG -o model.byoc`"
                )
            model = Path(model).read_bytes()
        with tempfile.TemporaryDirectory(prefix="byoc-ray-") as tmp:
            path = Path(tmp) / "model.byoc"
            path.write_bytes(model)
            try:
                self.model = load(path, threads=threads)
            except ByocError as exc:
                raise ByocError(f"on host {socket.gethostname()}: {exc}") from None
        self.threads = threads
        self.digest = hashlib.sha256(model).hexdigest()  # which file this worker loaded

    def __call__(self, batch: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        rows = {len(column) for column in batch.values()}
        if len(rows) != 1:
            raise InputError(f"batch columns have different lengths: {sorted(rows)}")
        samples = []
        for i in range(rows.pop()):
            try:
                samples.append(check_inputs(self.model.inputs, {n: c[i] for n, c in batch.items()}))
            except InputError as exc:
                raise InputError(f"batch row {i}: {exc}") from None
        results = run_samples(self.model, samples)
        for i, out in enumerate(results):
            if isinstance(out, Exception):
                raise ByocError(f"batch row {i}: {reason(out)}") from out
        return {n: _column([out[n] for out in results]) for n in self.model.outputs}  # type: ignore[index]

    def describe(self) -> tuple[str, str]:
        """This worker's host name and the sha256 of the ``.byoc`` file it loaded."""
        return socket.gethostname(), self.digest

    def run(self, samples: list[Sample]) -> list[Sample | str]:
        """Outputs per sample, or why it failed (``byoc batch``'s workers)."""
        return [
            reason(out) if isinstance(out, Exception) else out
            for out in run_samples(self.model, samples)
        ]


def _assigned_cpus() -> int:
    """The CPUs Ray reserved for this worker (1 outside Ray or when it reserved none)."""
    try:
        cpus = ray.get_runtime_context().get_assigned_resources().get("CPU", 0)
    except Exception:
        cpus = 0
    return max(1, int(cpus))


def _column(values: list[np.ndarray]) -> np.ndarray:
    """One output column: stacked when every sample's output has one shape, else one object
    array of arrays (Ray Data's ragged tensors)."""
    if len({v.shape for v in values}) <= 1:
        return np.stack(values)
    column = np.empty(len(values), dtype=object)
    for i, v in enumerate(values):
        column[i] = v
    return column


def run_batch(
    model: str | os.PathLike[str],
    inputs: str | os.PathLike[str],
    outputs: str | os.PathLike[str],
    config: ConfigLike = None,
    *,
    address: str | None = None,
    workers: int | None = None,
    threads: int = 1,
    batch_size: int = 16,
    max_sample_mb: int = MAX_SAMPLE_MB,
    progress: ProgressFn | None = None,
) -> BatchReport:
    """Run a model (ONNX, compiled here once, or a ``.byoc`` file) over a directory of ``.npz``
    samples on Ray workers, writing one ``.npz`` of outputs per sample to ``outputs``.

    Without ``address`` a local Ray is started for the run and stopped after it; with one, the
    run joins that cluster (in a process already connected to Ray, that connection is used).
    ``workers`` (default: the cluster's CPUs // ``threads``) each load
    the model once and use ``threads`` threads. Bad samples are reported, written nowhere, and
    do not stop the others; an output file an earlier run left for a sample that fails now is
    removed. A sample that crashes its worker fails alone: a fresh worker takes its place and
    reruns the samples it held one by one. Arrays of inputs with symbolic dims may take
    ``max_sample_mb`` MiB per sample, checked before they are decompressed.
    """
    check_counts(
        workers=workers, threads=threads, batch_size=batch_size, max_sample_mb=max_sample_mb
    )
    files = sample_files(inputs)
    out_dir = check_outputs(outputs, inputs)
    data, signature = _artifact(model, config)
    make_outputs(out_dir)
    started = not ray.is_initialized()
    if started:
        if address:
            check_address(address)
        try:
            ray.init(
                address=address or "local",  # a new local Ray, not one RAY_ADDRESS points at
                include_dashboard=False,
                logging_level=logging.ERROR,
                configure_logging=True,
            )
        except ConnectionError as exc:
            raise ByocError(f"cannot join the Ray cluster at {address}: {exc}") from None
    try:
        report = BatchReport(out_dir, threads=threads)
        start = time.perf_counter()
        pool = _start_workers(data, workers, threads)
        report.hosts = pool.hosts
        report.startup_seconds = time.perf_counter() - start
        _drive(pool, files, signature, batch_size, max_sample_mb << 20, out_dir, report, progress)
        report.seconds = time.perf_counter() - start - report.startup_seconds
        return report
    finally:
        if started:
            ray.shutdown()


def check_address(address: str) -> None:
    """A ByocError within seconds when nothing answers at a Ray cluster's address (``HOST:PORT``
    or ``ray://HOST:PORT``), where ``ray.init`` would retry for minutes."""
    if address in ("auto", "local"):
        return
    host, sep, port = address.removeprefix("ray://").rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ConfigError(
            f"--address takes HOST:PORT (e.g. 10.0.0.5:6379) or ray://HOST:PORT, got {address!r}"
        )
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=10).close()
    except OSError as exc:
        raise ByocError(
            f"no Ray cluster answers at {address} ({exc.strerror or exc}): start one with "
            "`ray start --head` on that host, or fix --address"
        ) from None


def _artifact(model: str | os.PathLike[str], config: ConfigLike) -> tuple[bytes, dict[str, Any]]:
    """The ``.byoc`` file's bytes (compiling an ONNX model once) and the model's inputs."""
    if is_artifact(model):
        compiled = load(model)
        return Path(model).read_bytes(), compiled.inputs
    compiled = byoc.compile(model, load_config(config))
    with tempfile.TemporaryDirectory(prefix="byoc-batch-") as tmp:
        path = compiled.save(Path(tmp) / "model.byoc")
        return path.read_bytes(), compiled.inputs


def _start_workers(
    data: bytes, workers: int | None, threads: int, cls: type[Predictor] = Predictor
) -> _Workers:
    """``workers`` (default: as many as the cluster's CPUs allow) that have loaded the model."""
    cpus = int(ray.cluster_resources().get("CPU", 0))
    count = workers or max(1, cpus // threads)
    if count * threads > cpus:
        raise ConfigError(
            f"{count} worker(s) x {threads} thread(s) need {count * threads} CPUs; the Ray "
            f"cluster has {cpus}: ask for fewer --workers or --threads"
        )
    pool = _Workers(data, threads, cls)
    pool.start(count)
    return pool


class _Workers:
    """``byoc batch``'s workers: Ray actors of ``threads`` CPUs each that have loaded the model,
    and their hosts. A worker that cannot load it (another host without a compiler, a missing
    backend) is a ByocError naming its host."""

    def __init__(self, data: bytes, threads: int, cls: type[Predictor] = Predictor) -> None:
        self.actor = ray.remote(cls).options(
            num_cpus=threads, runtime_env={"env_vars": {"OMP_NUM_THREADS": str(threads)}}
        )
        self.shipped = ray.put(data)  # one copy in the object store, not one per worker
        self.digest = hashlib.sha256(data).hexdigest()
        self.threads = threads
        self.actors: list[Any] = []
        self.hosts: list[str] = []

    def start(self, count: int) -> None:
        """Start ``count`` workers at once, then wait for each to load the model."""
        actors = [self.actor.remote(self.shipped, self.threads) for _ in range(count)]
        self.hosts += [self._loaded(actor) for actor in actors]
        self.actors += actors

    def replace(self, index: int) -> None:
        """A fresh worker in place of one that died (or that Ray could not reach)."""
        ray.kill(self.actors[index])  # so that it holds no CPUs the fresh one needs
        actor = self.actor.remote(self.shipped, self.threads)
        self.hosts[index] = self._loaded(actor)
        self.actors[index] = actor

    def _loaded(self, actor: Any) -> str:
        try:
            host, loaded = ray.get(actor.describe.remote())
        except ray.exceptions.RayError as exc:
            raise ByocError(f"a Ray worker could not load the model: {_cause(exc)}") from None
        if loaded != self.digest:
            raise ByocError(f"the worker on {host} loaded another file than the one shipped")
        return host


def _cause(exc: BaseException) -> str:
    """The first line of the worker's own error, without Ray's traceback."""
    text = str(getattr(exc, "cause", None) or exc)
    lines = [line for line in text.splitlines() if line.strip()]
    errors = [line for line in lines if "Error:" in line and not line.startswith(" ")]
    return (errors[-1] if errors else lines[-1] if lines else type(exc).__name__).strip()


Chunk = tuple[list[str], list[Sample]]  # sample file names and their arrays


def _drive(
    pool: _Workers,
    files: list[Path],
    signature: Mapping[str, Any],
    batch_size: int,
    max_bytes: int,
    out_dir: Path,
    report: BatchReport,
    progress: ProgressFn | None,
) -> None:
    """Read and check samples, keep every worker two chunks deep, write what comes back.

    A chunk whose worker died (a sample crashed its process: a segfault, an abort) or whose
    call failed says nothing about which sample was at fault: a fresh worker takes the dead
    one's place and runs each sample of the chunk alone, one at a time, so only the sample
    that crashes it again fails.
    """
    total = len(files)
    done = 0

    def keep(name: str, out: Sample | str) -> None:
        nonlocal done
        if isinstance(out, str):
            report.failed.append((name, out))
            (out_dir / name).unlink(missing_ok=True)  # no stale output from an earlier run
        else:
            try:
                write_sample(out_dir / name, out)
            except OSError as exc:  # the disk filled up, the directory went away
                raise ByocError(
                    f"cannot write '{out_dir / name}': {exc.strerror or exc}; "
                    f"{report.written} sample(s) were written before it"
                ) from None
            report.written += 1
        done += 1
        if progress is not None:
            progress(done, total, name)

    def chunks() -> Iterator[Chunk]:
        names: list[str] = []
        samples: list[Sample] = []
        for path in files:
            try:
                samples.append(read_sample(path, signature, max_bytes))
                names.append(path.name)
            except InputError as exc:
                keep(path.name, str(exc))
            if len(samples) == batch_size:
                yield names, samples
                names, samples = [], []
        if samples:
            yield names, samples

    todo = chunks()
    pending: dict[Any, tuple[int, Any, Chunk, bool]] = {}  # ref: worker, actor, chunk, alone
    in_flight = [0] * len(pool.actors)
    suspects: list[deque[Chunk]] = [deque() for _ in pool.actors]  # to run alone, per worker

    def send(worker: int, chunk: Chunk, alone: bool) -> None:
        actor = pool.actors[worker]
        pending[actor.run.remote(chunk[1])] = (worker, actor, chunk, alone)
        in_flight[worker] += 1

    def feed(worker: int) -> None:
        if suspects[worker]:  # one at a time, so that a crash names its sample
            if not in_flight[worker]:
                send(worker, suspects[worker].popleft(), alone=True)
            return
        while in_flight[worker] < 2 and (chunk := next(todo, None)) is not None:
            send(worker, chunk, alone=False)

    for worker in range(len(pool.actors)):
        feed(worker)
    while pending:
        [ref], _ = ray.wait(list(pending), num_returns=1)
        worker, actor, (names, samples), alone = pending.pop(ref)
        in_flight[worker] -= 1
        try:
            results = ray.get(ref)
        except ray.exceptions.RayError as exc:
            died = isinstance(exc, ray.exceptions.RayActorError)
            if died and pool.actors[worker] is actor:
                pool.replace(worker)
            if not alone:
                suspects[worker].extend(([n], [s]) for n, s in zip(names, samples, strict=True))
                feed(worker)
                continue
            why = "it crashed its worker, run alone too (a segfault, an abort, out of memory)"
            results = [why if died else _cause(exc)]
        for name, out in zip(names, results, strict=True):
            keep(name, out)
        feed(worker)
    report.failed.sort()
