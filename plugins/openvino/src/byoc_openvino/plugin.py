"""The openvino backend's hooks: registration, annotation, codegen, runtime, serialization."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import byoc
from byoc import ArtifactError, BackendError, ConfigError, Partition

from byoc_openvino import __version__, annotate, handles
from byoc_openvino.artifact import PRECISIONS, Artifact, decode, encode, signature
from byoc_openvino.handles import build_id, has_bf16
from byoc_openvino.rules import INT_LIMIT
from byoc_openvino.runtime import Runtime, compile_partition, key

NAME = "openvino"
# The loading machine's settings: a .byoc file never carries them.
LOCAL_OPTIONS = frozenset({"cache_dir", "trial"})
OPTIONS: dict[str, tuple[Any, ...]] = {
    "threads": (
        int,
        0,
        "OpenVINO threads per run (INFERENCE_NUM_THREADS); 0: one per core this process may use",
        range(0, 1 << 16),
    ),
    "precision": (
        str,
        "f32",
        "INFERENCE_PRECISION_HINT: f32 computes in float32 as onnxruntime does; bf16 lets "
        "OpenVINO compute in bfloat16 (faster where the CPU has it, less exact); dynamic "
        "leaves OpenVINO's own default for the CPU",
        PRECISIONS,
    ),
    "cache_dir": (
        str,
        "",
        "OpenVINO's compiled-model cache (CACHE_DIR) on this machine; empty: no cache",
    ),
    "trial": (
        bool,
        True,
        "query and compile each new model in a child process first (byoc_openvino.trial): a "
        "model that crashes OpenVINO there is not shown to it in this process, and onnxruntime "
        "runs it",
    ),
}


def _available() -> str | None:
    try:
        import openvino
    except Exception as exc:  # ImportError, or a broken native library
        return f"openvino cannot be imported: {exc}"
    try:
        devices = handles.core().available_devices
    except Exception as exc:
        return f"OpenVINO {openvino.__version__} cannot list its devices: {exc}"
    if handles.DEVICE not in devices:
        return f"OpenVINO {openvino.__version__} has no CPU device here (it has {devices})"
    return None


@byoc.hookimpl
def byoc_register_backends(register: Any) -> None:
    register(
        byoc.BackendSpec(
            NAME,
            version=__version__,
            available=_available,
            # LOCAL_OPTIONS are this machine's settings: a .byoc file never carries them
            options={k: byoc.Option(*v, local_only=k in LOCAL_OPTIONS) for k, v in OPTIONS.items()},
            priority=5,
            # OpenVINO's threads take turns with onnxruntime's: idle spinning ones would steal
            # the cores the other needs
            fallback_defaults={"allow_spinning": False},
            optimizes_graphs=True,  # it fuses the model's own patterns
            # OpenVINO's Relu, Clip, Softmax, max and reductions drop NaN (tests/conftest.py):
            # a partition whose inputs hold NaN or +-inf runs on onnxruntime; its Add and
            # Softmax follow ONNX on -inf: attention masks of 0 and -inf stay here
            finite_only=True,
            softmax_masks=True,
            # it computes int64 in int32 and int32 through float32: larger integers run on
            # onnxruntime, so nodes reading a model's token ids or masks can be claimed
            int_limit=INT_LIMIT,
            precisions={"bf16": {"precision": "bf16"}},  # [compile] precision = "bf16"
            build=build_id,
            description=(
                "OpenVINO: partitions compiled by OpenVINO's ONNX frontend and CPU plugin"
            ),
        )
    )


@byoc.hookimpl
def byoc_supported_ops(backend: str, config: Mapping[str, Any]) -> dict[str, Any] | None:
    if config.get("precision") == "bf16" and not has_bf16():
        raise ConfigError(
            f'[backend.{NAME}] precision = "bf16" needs a CPU with bfloat16 support, and '
            'OpenVINO finds none on this one: use "f32" (or "dynamic")'
        )
    return annotate.checks(config)


@byoc.hookimpl
def byoc_codegen(backend: str, partition: Partition, config: Mapping[str, Any]) -> Artifact | None:
    """The partition's ONNX model with its static signature, compiled once here (a model
    OpenVINO cannot convert or compile is a BackendError: onnxruntime runs the partition)."""
    try:
        inputs, outputs = signature(partition.model, f"partition {partition.name}")
    except ValueError as exc:
        raise BackendError(str(exc)) from None
    artifact = Artifact(
        partition.name,
        partition.model,
        inputs,
        outputs,
        precision=config.get("precision", "f32"),
        threads=int(config.get("threads", 0)),
    )
    artifact.prebuilt = (key(config), compile_partition(artifact, config))
    return artifact


@byoc.hookimpl
def byoc_create_runtime(
    backend: str, artifact: Artifact, config: Mapping[str, Any]
) -> Runtime | None:
    prebuilt, artifact.prebuilt = artifact.prebuilt, None
    if prebuilt is not None and prebuilt[0] == key(config):
        return prebuilt[1]
    return compile_partition(artifact, config)


@byoc.hookimpl
def byoc_serialize(backend: str, artifact: Artifact) -> bytes | None:
    return encode(artifact)


@byoc.hookimpl
def byoc_deserialize(backend: str, data: bytes) -> Artifact | None:
    try:
        return decode(data)
    except ArtifactError:
        raise
    except Exception as exc:  # anything else a hostile file provokes is still a bad artifact
        raise ArtifactError(f"openvino artifact is not valid: {type(exc).__name__}: {exc}") from exc
