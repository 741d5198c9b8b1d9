"""This machine, as byoc's caches and timings see it: its CPU, byoc's user cache directory,
how much of the CPUs other processes take (``others_since``), and the memory that is free
(``available_memory``).

One reading of ``/proc/cpuinfo`` serves the compiled libraries' host tag
(``byoc.native.host_tag``), the ``.byoc`` stamp and measured placement's cache key; one
directory (``platformdirs.user_cache_dir("byoc")``) holds every cache: ``placement/``,
``models/``, and a directory per native backend.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import platform
import time
from collections import deque
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import platformdirs


@dataclass(frozen=True)
class Cpu:
    """The first processor's model and feature flags, the machine and the cores."""

    machine: str
    model: str
    flags: tuple[str, ...]
    cores: int

    def summary(self) -> str:
        """The model and its vector ISA (``x86_64 AMD EPYC 9B14 avx2 avx512f ...``)."""
        isa = [f for f in self.flags if f.startswith(("avx", "amx", "sse4", "fma", "asimd", "sve"))]
        return " ".join([self.machine, self.model, *isa]).strip()

    def has_bf16(self) -> bool:
        """Whether the CPU computes in bfloat16 natively (x86: AVX512_BF16 or AMX; Arm: BF16)."""
        return bool({"avx512_bf16", "amx_bf16", "bf16"} & set(self.flags))

    def saturates_int8(self) -> bool:
        """Whether onnxruntime's uint8 x int8 products saturate here: an x86 CPU without VNNI
        adds pairs of them in int16 (``vpmaddubsw``)."""
        vnni = {"avx512_vnni", "avx_vnni", "amx_int8"} & set(self.flags)
        return self.machine.lower() in ("x86_64", "amd64") and not vnni


def available_memory() -> int | None:
    """Bytes of memory the kernel says a new allocation may take without swapping
    (``MemAvailable`` of ``/proc/meminfo``); None where that is not known (not Linux)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


@cache
def cpu() -> Cpu:
    """This machine's CPU (``/proc/cpuinfo`` where there is one, else ``platform``)."""
    model, flags = "", ""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() in ("model name", "Model") and not model:
                model = value.strip()
            elif key.strip() in ("flags", "Features") and not flags:
                flags = value.strip()
    return Cpu(
        platform.machine(),
        model or platform.processor(),
        tuple(sorted(set(flags.split()))),
        os.cpu_count() or 1,
    )


_THREAD_ENV = ("OMP_", "GOMP_", "KMP_", "MKL_", "ONEDNN_", "DNNL_")
_OWN_VAR = "BYOC_OWN_ENV"  # byoc's own settings, named for the child processes that inherit them


def _inherited() -> dict[str, str]:
    """The settings a parent process's byoc made (``set_own_env``), as its children inherit
    them with the environment."""
    pairs = (item.split("=", 1) for item in os.environ.get(_OWN_VAR, "").split(";"))
    return {p[0]: p[1] for p in pairs if len(p) == 2 and p[0].startswith(_THREAD_ENV)}


# Environment variables byoc set itself (native.load: OpenMP's wait policy), the same in every
# process byoc loads a library in: what depends on the environment (placement's host_id, a
# session's plan key) leaves them out, or a key made before a library loaded would miss after,
# and a worker process, which inherits them, would miss the plans of the app that started it.
OWN_ENV: dict[str, str] = _inherited()


def set_own_env(name: str, value: str) -> None:
    os.environ[name] = value
    OWN_ENV[name] = value
    os.environ[_OWN_VAR] = ";".join(f"{k}={v}" for k, v in sorted(OWN_ENV.items()))


def host_id() -> str:
    """What a timing depends on beyond the code: the CPU model, its features, the cores, and
    the environment's threading settings (``OMP_*``, ``GOMP_*``, ``KMP_*``, ``MKL_*``,
    ``ONEDNN_*``, ``DNNL_*``: OpenMP's wait policy alone changes how fast oneDNN runs).
    Measured placement's cache keys and a session's plan key hold it."""
    env = sorted(
        (k, v)
        for k, v in os.environ.items()
        if k.startswith(_THREAD_ENV) and OWN_ENV.get(k) != v  # byoc's own: every process
    )
    c = cpu()
    text = f"{c.machine}|{c.model}|{' '.join(c.flags)}|{c.cores}|{env}"
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def cache_root() -> Path:
    """byoc's user cache directory (not created here)."""
    return Path(platformdirs.user_cache_dir("byoc"))


BUSY = 0.125  # the share of the CPUs other processes may take while byoc times something
_readings: deque[tuple[float, float, float]] = deque(maxlen=64)  # (monotonic, busy, own) seconds
_app = [0.0]  # seconds an app's calls took in this process while byoc compiled beside them


def note_app(seconds: float) -> None:
    """Count ``seconds`` of an app's call made in this process while byoc compiles beside it
    (``byoc.InferenceSession``'s background plans): ``others_since`` takes them as another
    process's, since they slow byoc's timings as one would."""
    _app[0] += seconds


def _cpu_seconds() -> tuple[float, float, int] | None:
    """CPU seconds the CPUs this process may run on have spent busy since boot (user, nice,
    system, interrupts, and steal: the hypervisor running another machine on ours), those
    this process spent (all its threads, and the children it waited for) but an app's calls
    (``note_app``), and how many CPUs those are; None without Linux's ``/proc/stat``."""
    mine = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
    busy, cpus = 0, 0
    try:
        with open("/proc/stat") as fh:
            for line in fh:
                name, *fields = line.split()
                if not name.startswith("cpu"):
                    break  # the CPUs' lines come first
                if name != "cpu" and (mine is None or int(name[3:]) in mine):
                    user, nice, system, _, _, irq, softirq, steal = map(int, fields[:8])
                    busy, cpus = busy + user + nice + system + irq + softirq + steal, cpus + 1
    except (OSError, ValueError):
        return None
    t = os.times()  # children too: a compiler this process ran and waited for is its own work
    return busy / os.sysconf("SC_CLK_TCK"), t[0] + t[1] + t[2] + t[3] - _app[0], cpus


def busy(others: float | None) -> bool:
    """Whether other processes took more than ``BUSY`` of the CPUs (``others_since``)."""
    return others is not None and others > BUSY


def cpu_mark() -> float:
    """Note how busy the CPUs are now: the start of a span ``others_since`` measures."""
    now = time.monotonic()
    seconds = _cpu_seconds()
    if seconds is not None:
        _readings.append((now, *seconds[:2]))
    return now


def others_since(mark: float, window: float = 0.25) -> float | None:
    """The share of the CPUs this process may run on that other processes (and steal) took
    from ``mark`` (``cpu_mark``) until now: their busy time less this process's own, over
    their time. The counters tick 100 times a second, so a span shorter than ``window``
    reaches back to an earlier reading, or waits for the rest; None without ``/proc/stat``."""
    now = _cpu_seconds()
    if now is None or now[2] == 0:
        return None
    end = time.monotonic()
    readings = _readings.copy()  # atomic: another thread's compile may append meanwhile
    older = [r for r in readings if r[0] <= min(mark, end - window) and end - r[0] < 8 * window]
    start = older[-1] if older else next((r for r in readings if r[0] >= mark), None)
    if start is None:
        return None
    if end - start[0] < window:
        time.sleep(window - (end - start[0]))
        now, end = _cpu_seconds() or now, time.monotonic()
    _readings.append((end, *now[:2]))
    spent = (now[0] - start[1]) - (now[1] - start[2])
    return max(0.0, spent) / max(end - start[0], 1e-9) / now[2]
