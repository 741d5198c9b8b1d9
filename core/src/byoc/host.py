"""This machine, as byoc's caches see it: its CPU and byoc's user cache directory.

One reading of ``/proc/cpuinfo`` serves the compiled libraries' host tag
(``byoc.native.host_tag``), the ``.byoc`` stamp and measured placement's cache key; one
directory (``platformdirs.user_cache_dir("byoc")``) holds every cache: ``placement/``,
``models/``, and a directory per native backend.
"""

from __future__ import annotations

import contextlib
import os
import platform
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


def cache_root() -> Path:
    """byoc's user cache directory (not created here)."""
    return Path(platformdirs.user_cache_dir("byoc"))
