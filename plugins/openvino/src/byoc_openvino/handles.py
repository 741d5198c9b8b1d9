"""OpenVINO itself: the one ``Core`` of the process, its ONNX frontend, the CPU plugin's support
query and the facts the plugin reports about this machine.

openvino is imported only when one of these is called, so ``byoc backends`` and ``byoc
explain`` on another backend never load it. The rest of the plugin reaches OpenVINO through
here; nothing here imports the rest.
"""

from __future__ import annotations

import io
from functools import cache
from typing import Any

import onnx

DEVICE = "CPU"


@cache
def _openvino() -> Any:
    import openvino

    return openvino


@cache
def core() -> Any:
    """One ``openvino.Core`` per process (it is thread-safe)."""
    return _openvino().Core()


def frontend() -> Any:
    from openvino.frontend import FrontEndManager

    return FrontEndManager().load_by_framework("onnx")


def convert(model: onnx.ModelProto) -> Any:
    """The ONNX model as an ``openvino.Model`` through OpenVINO's ONNX frontend (from bytes:
    nothing is read from disk)."""
    fe = frontend()
    return fe.convert(fe.load(io.BytesIO(model.SerializeToString())))


def query(ov_model: Any) -> set[str]:
    """The friendly names of the ops the CPU plugin supports. Its snippets pass is off: it
    only fuses, so the answer is the same, and it takes time quadratic in a chain's length."""
    return set(core().query_model(ov_model, DEVICE, {"SNIPPETS_MODE": "DISABLE"}))


def has_bf16() -> bool:
    """Whether the CPU plugin computes in bfloat16 on this machine."""
    return "BF16" in core().get_property(DEVICE, "OPTIMIZATION_CAPABILITIES")


def build_id() -> str:
    """The OpenVINO that compiles and runs the partitions: a new one is timed again."""
    try:
        import openvino
    except Exception:
        return "openvino unavailable"
    return f"openvino {openvino.get_version()}"
