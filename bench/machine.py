"""What a benchmark ran on, printed next to its ratios: CPU, ISA, C compiler, versions, load."""

from __future__ import annotations

import os
import subprocess
from importlib.metadata import entry_points
from pathlib import Path


def machine() -> dict[str, str]:
    """cpu, isa, cc, versions and load, each one line."""
    import byoc
    import onnxruntime as ort

    cpuinfo = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    fields: dict[str, str] = {}
    for line in cpuinfo.splitlines():  # the first processor's fields
        key, sep, value = line.partition(":")
        if sep:
            fields.setdefault(key.strip(), value.strip())
    flags = set(fields.get("flags", "").split())
    isa = next((f for f in ("avx512f", "avx2", "avx", "sse4_2") if f in flags), "unknown")
    extras = [
        f for f in ("fma", "avx512_vnni", "avx_vnni", "avx512_bf16", "amx_tile") if f in flags
    ]
    try:
        cc = subprocess.run(["cc", "--version"], capture_output=True, text=True).stdout
        cc = cc.splitlines()[0] if cc else "none"
    except OSError:
        cc = "none"
    backends = ", ".join(
        f"{ep.name} ({ep.dist.name} {ep.dist.version})" if ep.dist else ep.name
        for ep in entry_points(group="byoc.backends")
    )
    return {
        "cpu": f"{fields.get('model name', 'unknown')} ({os.cpu_count()} logical cores)",
        "isa": " ".join([isa, *extras]),
        "cc": cc,
        "versions": f"onnxruntime {ort.__version__}, byoc {byoc.__version__}; {backends}",
        "load": "load average " + " ".join(f"{x:.2f}" for x in os.getloadavg()),
    }


def print_machine(info: dict[str, str] | None = None) -> None:
    info = info or machine()
    for key in ("cpu", "isa", "cc", "versions", "load"):
        print(f"{key + ':':10s}{info[key]}")
