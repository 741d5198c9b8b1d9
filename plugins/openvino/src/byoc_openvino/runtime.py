"""Compiling a partition with OpenVINO and running it.

``compile_partition`` turns the artifact's ONNX model into an OpenVINO model (its ONNX
frontend, from bytes) and compiles it for the CPU with the latency hint, the precision hint
and the thread count. ``Runtime.run`` checks the inputs, wraps them as OpenVINO tensors
sharing their memory (no copy when they are C-contiguous of the right dtype), and runs an infer
request of the calling thread: one request per thread, so many threads can run one partition
at once. The outputs are the copies OpenVINO makes of its output tensors, as plain OpenVINO's
``request.infer(...)`` returns them: fresh arrays the caller owns.

No array is bound to an output (the CPU plugin would rebind its output memory on every run,
which costs more than the copy), and an input array already bound to this thread's request is
not bound again: the request reads its values at each run.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import onnx
from byoc import BackendError, InputError
from byoc.graph import Graph

from byoc_openvino import handles, trial
from byoc_openvino.artifact import Artifact, Tensor
from byoc_openvino.handles import has_bf16
from byoc_openvino.rules.values import moved_from

# byoc's precision names -> OpenVINO's INFERENCE_PRECISION_HINT ("dynamic": OpenVINO decides).
HINTS = {"f32": "f32", "bf16": "bf16", "dynamic": None}


def threads(config: Mapping[str, Any]) -> int:
    """Threads per run: the config's ``threads``, else one per core this process may use (as
    dnnl's threads; ``byoc.load(path, threads=N)`` sets the option)."""
    if config.get("threads"):
        return int(config["threads"])
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return max(1, cores or 1)


def properties(config: Mapping[str, Any]) -> dict[str, Any]:
    """The compile properties for this ``[backend.openvino]`` table."""
    props: dict[str, Any] = {
        "PERFORMANCE_HINT": "LATENCY",
        "INFERENCE_NUM_THREADS": threads(config),
    }
    hint = HINTS[config.get("precision", "f32")]
    if hint is not None:
        props["INFERENCE_PRECISION_HINT"] = hint
    if config.get("cache_dir"):
        props["CACHE_DIR"] = str(config["cache_dir"])
    return props


def key(config: Mapping[str, Any]) -> tuple[Any, ...]:
    """What a compiled model depends on besides its partition."""
    return tuple(sorted(properties(config).items()))


def compile_partition(artifact: Artifact, config: Mapping[str, Any]) -> Runtime:
    """The artifact compiled by this machine's OpenVINO; BackendError when it cannot be."""
    where = f"partition {artifact.symbol} (backend openvino)"
    if config.get("precision") == "bf16" and not has_bf16():
        raise BackendError(
            f"{where}: precision 'bf16' needs a CPU with bfloat16 support, and OpenVINO finds "
            'none on this one; set [backend.openvino] precision = "f32"'
        )
    props = properties(config)
    crashed = trial.crash("compile", artifact.model, props) if config.get("trial", True) else None
    if crashed:
        raise BackendError(f"{where}: {crashed}")
    try:
        model = handles.convert(artifact.model)
    except Exception as exc:
        raise BackendError(f"{where}: OpenVINO's ONNX frontend failed: {_last(exc)}") from exc
    try:
        compiled = handles.core().compile_model(model, handles.DEVICE, props)
    except Exception as exc:
        raise BackendError(f"{where}: OpenVINO could not compile it: {_last(exc)}") from exc
    runtime = Runtime(artifact.symbol, compiled, artifact.inputs, artifact.outputs)
    runtime.bounds = index_bounds(artifact.model, artifact.inputs)
    return runtime


def index_bounds(model: onnx.ModelProto, inputs: list[Tensor]) -> dict[int, tuple[str, int]]:
    """The partition inputs a Gather reads as indices, maybe reshaped first (by position): the
    node and the size of the axis it indexes (the smallest, if several Gathers read one).
    onnxruntime fails on an index outside [-size, size), OpenVINO gives zeros: ``run`` refuses
    such inputs first."""
    graph = Graph(model)
    position = {t.name: k for k, t in enumerate(inputs)}
    bounds: dict[int, tuple[str, int]] = {}
    for node in graph.nodes:
        source = None
        if node.op_type == "Gather" and len(node.input) > 1:
            source = moved_from(graph, node.input[1], position)
        if source is None:
            continue
        data = graph.type_of(node.input[0])
        if data is None or not data.is_static or not data.shape:
            raise BackendError(f"Gather '{node.name}': the shape of its data is not known")
        axis = next((a.i for a in node.attribute if a.name == "axis"), 0)
        size = int(data.shape[axis % len(data.shape)])  # type: ignore[arg-type]
        k = position[source]
        if k not in bounds or size < bounds[k][1]:
            bounds[k] = (node.name, size)
    return bounds


def _last(exc: Exception) -> str:
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    return " ".join(lines[-3:])[:600] or type(exc).__name__


class Runtime:
    """A compiled partition. ``run`` uses an infer request of the calling thread and keeps
    everything else in locals or in that thread's state: safe from many threads at once."""

    def __init__(
        self, symbol: str, compiled: Any, inputs: list[Tensor], outputs: list[Tensor]
    ) -> None:
        self.symbol = symbol
        self.compiled = compiled
        self.inputs = inputs
        self.outputs = outputs
        self._dtypes = [np.dtype(t.dtype) for t in inputs]
        self._in_ports = [self._port(compiled.inputs, k, t, "input") for k, t in enumerate(inputs)]
        self._out_ports = [
            self._port(compiled.outputs, k, t, "output") for k, t in enumerate(outputs)
        ]
        self._local = threading.local()
        self.bounds: dict[int, tuple[str, int]] = {}  # index_bounds

    def _port(self, ports: Sequence[Any], k: int, want: Tensor, kind: str) -> int:
        """The compiled model's port of signature entry ``k``: by tensor name, else by position
        (the frontend keeps the ONNX graph's input and output order, but an Identity or Dropout
        it removes takes its input's name away), checked by dtype and shape."""
        index = next((j for j, p in enumerate(ports) if want.name in p.get_names()), k)
        if len(ports) != len(self.inputs if kind == "input" else self.outputs):
            raise BackendError(
                f"{self.symbol}: the compiled model has {len(ports)} {kind}s, the partition "
                f"{len(self.inputs if kind == 'input' else self.outputs)}"
            )
        port = ports[index]
        shape = port.get_partial_shape()
        dtype = np.dtype(port.get_element_type().to_dtype())
        if shape.is_dynamic or tuple(shape.to_shape()) != want.shape or dtype != want.dtype:
            raise BackendError(
                f"{self.symbol}: the compiled model's {kind} {index} is {dtype}{shape}, the "
                f"partition's '{want.name}' {want.dtype}{list(want.shape)}"
            )
        return index

    def _state(self) -> tuple[Any, list[np.ndarray | None]]:
        """The calling thread's infer request, and the input arrays its tensors share (held
        here, so an array bound stays alive and its memory is never another's)."""
        state = getattr(self._local, "state", None)
        if state is None:
            bound: list[np.ndarray | None] = [None] * len(self.inputs)
            state = self._local.state = (self.compiled.create_infer_request(), bound)
        return state

    def run(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        """Inputs in signature order -> outputs in signature order (fresh arrays)."""
        import openvino as ov

        if len(inputs) != len(self.inputs):
            raise InputError(
                f"{self.symbol}: expected {len(self.inputs)} inputs "
                f"({', '.join(t.name for t in self.inputs)}), got {len(inputs)}"
            )
        request, bound = self._state()
        for k, (value, want, dtype, port) in enumerate(
            zip(inputs, self.inputs, self._dtypes, self._in_ports, strict=True)
        ):
            if not isinstance(value, np.ndarray):
                raise InputError(
                    f"{self.symbol}: input '{want.name}' is a {type(value).__name__}, "
                    "not a numpy array"
                )
            if value.dtype != dtype or value.shape != want.shape:
                raise InputError(
                    f"{self.symbol}: input '{want.name}' is {value.dtype}{list(value.shape)}, "
                    f"expected {want.dtype}{list(want.shape)}"
                )
            if k in self.bounds and value.size:
                node, size = self.bounds[k]
                if value.min() < -size or value.max() >= size:
                    raise InputError(
                        f"{self.symbol}: input '{want.name}' holds indices outside [-{size}, "
                        f"{size}) of Gather '{node}' (from {value.min()} to {value.max()})"
                    )
            if value.dtype.num != dtype.num:  # numpy's other int64 (onnxruntime's outputs)
                value = value.view(dtype)  # OpenVINO knows only one of the two
            flags = value.flags
            if not (flags.c_contiguous and flags.aligned and flags.writeable):
                value = np.array(value, order="C")  # OpenVINO shares only such arrays
            elif value is bound[k]:
                continue  # the request reads this array's memory already: its values now
            request.set_input_tensor(port, ov.Tensor(value, shared_memory=True))
            bound[k] = value
        try:
            results = request.infer().to_tuple()  # copies of OpenVINO's output tensors
        except Exception as exc:
            raise BackendError(f"{self.symbol}: OpenVINO failed to run it: {_last(exc)}") from exc
        return [results[port] for port in self._out_ports]
