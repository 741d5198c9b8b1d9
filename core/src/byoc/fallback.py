"""The onnxruntime fallback, registered through the same hooks as every backend plugin.

It claims nothing: it runs the segments of the model that no backend claimed. Its config is the
``[fallback]`` table.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort

from byoc.backendspec import BackendSpec
from byoc.errors import ArtifactError
from byoc.hookspecs import hookimpl
from byoc.plan import FALLBACK, Partition

_LEVELS = {
    "disable": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
    "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
    "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
    "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
}


def session_options(config: Mapping[str, Any]) -> ort.SessionOptions:
    """onnxruntime session options from the ``[fallback]`` table."""
    opts = ort.SessionOptions()
    if config.get("intra_op_num_threads"):
        opts.intra_op_num_threads = config["intra_op_num_threads"]
    if config.get("inter_op_num_threads"):
        opts.inter_op_num_threads = config["inter_op_num_threads"]
    opts.graph_optimization_level = _LEVELS[config.get("graph_optimization_level", "all")]
    if not config.get("allow_spinning", True):
        # The threads spin inside a run, between its ops, as onnxruntime's default does, and
        # stop when the run ends: they never spin while a backend or another segment runs.
        # Not spinning at all made each run wake them at every op: a segment of one depthwise
        # convolution took 147 us instead of 111 (AMD EPYC, 2 cores), and P3 cut into 37
        # segments around ccompiler partitions ran 1.10x onnxruntime instead of 0.98x.
        opts.add_session_config_entry("session.force_spinning_stop", "1")
    return opts


def raw_run(session: ort.InferenceSession) -> Callable[[list[str], Mapping[str, Any], None], Any]:
    """The session's native ``run(output names, feed, run options)``, without the Python wrapper.

    The wrapper checks for missing inputs, OrtValue ownership and WebGPU graph capture, and
    retries failed execution providers; none of that applies to a feed of numpy arrays on the CPU
    provider. onnxruntime's C++ still checks each input's name, type and shape, but not that every
    input is there: the caller must feed them all. On a small model the wrapper's few microseconds
    (and the idle time they add between runs) are several percent of the run.
    """
    native = getattr(session, "_sess", None)
    run = getattr(native, "run", None)
    return run if callable(run) else session.run


class OrtRuntime:
    """One onnxruntime session over a segment (serialized ONNX, or a model file's path);
    ``run`` takes and returns arrays in order."""

    def __init__(self, model: bytes | str, config: Mapping[str, Any]) -> None:
        options, cpu = session_options(config), ["CPUExecutionProvider"]
        try:
            self.session = ort.InferenceSession(model, options, providers=cpu)
        except Exception as exc:
            # onnxruntime's own graph rewrites can break a segment it would run as written:
            # its ConstantFolding inlines an If whose condition byoc folded, and its shape
            # check then refuses a Range bound of shape [1]; its PadFusion folds a Pad into a
            # MaxPool's pads until they reach the kernel. Unoptimized, the segment runs.
            options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
            try:
                self.session = ort.InferenceSession(model, options, providers=cpu)
            except Exception:
                raise exc from None
            first = " ".join(str(exc).split())[:200]
            warnings.warn(
                f"onnxruntime could not load a segment it optimized, so it runs unoptimized: "
                f"{first}",
                stacklevel=2,
            )
        self.input_names = [i.name for i in self.session.get_inputs()]
        self.output_names = [o.name for o in self.session.get_outputs()]
        self._run = raw_run(self.session)

    def run(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        feed = dict(zip(self.input_names, inputs, strict=True))  # every input: see raw_run
        return self._run(self.output_names, feed, None)


MIN_ONNXRUNTIME = (1, 31)  # runs what onnx 1.21 writes (IR 13, opset 26); see pyproject.toml


def onnxruntime_problem(version: str) -> str | None:
    """None when onnxruntime ``version`` is new enough for byoc, else what is wrong and what to
    do about it."""
    found = tuple(int(p) for p in re.findall(r"\d+", version)[:2])
    if len(found) == 2 and found >= MIN_ONNXRUNTIME:
        return None
    need = ".".join(map(str, MIN_ONNXRUNTIME))
    return (
        f"onnxruntime {version} is too old: byoc needs onnxruntime >= {need} (the version that "
        f"runs what onnx {onnx.__version__} writes); pip install -U 'onnxruntime>={need}'"
    )


@hookimpl
def byoc_register_backends(register: Callable[[BackendSpec], None]) -> None:
    register(
        BackendSpec(
            FALLBACK,
            version=ort.__version__,
            available=lambda: onnxruntime_problem(ort.__version__),
            priority=-1,
            description="fallback: runs every node no backend claims",
        )
    )


@hookimpl
def byoc_codegen(backend: str, partition: Partition, config: Mapping[str, Any]) -> Any:
    return partition.model.SerializeToString()


@hookimpl
def byoc_create_runtime(backend: str, artifact: Any, config: Mapping[str, Any]) -> Any:
    return OrtRuntime(artifact, config)


@hookimpl
def byoc_serialize(backend: str, artifact: Any) -> bytes | None:
    return bytes(artifact)


@hookimpl
def byoc_deserialize(backend: str, data: bytes) -> Any:
    try:
        onnx.ModelProto().ParseFromString(data)
    except Exception as exc:
        raise ArtifactError(f"onnxruntime segment is not a valid ONNX model: {exc}") from exc
    return bytes(data)
