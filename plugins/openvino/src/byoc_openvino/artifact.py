"""The openvino artifact and its byte format.

Bytes: the magic line ``byoc-openvino artifact 1``, an 8-byte little-endian header length, a
JSON header, then the partition as a serialized ONNX model. The header holds the symbol, the
signature (name, dtype and static shape of each input and output, in ``run`` order), the
options it was compiled with that are not the loading machine's (``precision``, ``threads``:
a record; the runtime takes them from the ``[backend.openvino]`` table byoc gives it, the
file's own unless ``byoc.load(path, threads=N)``), and the ONNX model's size and sha256.

A ``.byoc`` file is data from a stranger. What is carried is the ONNX partition, never an
OpenVINO IR or compiled blob: ``decode`` reads the ONNX through byoc's own hostile-file reader
(``byoc.loading``: parsing, names, ONNX checker, shape inference), refuses external data and
nodes byoc would never have given this backend, checks the graph's signature against the
header, and the loading machine's OpenVINO compiles it again. It raises ``byoc.ArtifactError``
saying what is wrong.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
from byoc import ArtifactError, ByocError
from byoc.artifact import read_header, read_signature, read_symbol, write_header
from byoc.graph import SUBGRAPH_OPS, tensor_type
from byoc.loading import read_model, specialize

MAGIC = b"byoc-openvino artifact 1\n"
PRECISIONS = ("f32", "bf16", "dynamic")
# Dtypes a partition's signature may have: those OpenVINO and numpy share.
DTYPES = (
    "float32", "float16", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64",
    "uint64", "bool",
)  # fmt: skip
_MAX_HEADER = 1 << 24


@dataclass(frozen=True)
class Tensor:
    """One entry of a partition's signature."""

    name: str
    dtype: str
    shape: tuple[int, ...]

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "dtype": self.dtype, "shape": list(self.shape)}


@dataclass
class Artifact:
    """A partition for OpenVINO: its ONNX model, signature and codegen options.

    ``prebuilt`` holds the compiled model codegen made (with the options it was made for), so
    ``byoc_create_runtime`` does not compile it twice; it is never serialized. ``source`` and
    ``suffix`` are what ``byoc compile --dump-dir`` writes: the partition's ONNX as text.
    """

    symbol: str
    model: onnx.ModelProto = field(repr=False)
    inputs: list[Tensor]
    outputs: list[Tensor]
    precision: str = "f32"
    threads: int = 0
    prebuilt: Any = field(default=None, repr=False, compare=False)
    suffix: str = ".onnx.txt"

    @property
    def source(self) -> str:
        return onnx.printer.to_text(self.model)


def signature(model: onnx.ModelProto, where: str) -> tuple[list[Tensor], list[Tensor]]:
    """The model's inputs and outputs (initializers apart) with static shapes, or ValueError."""
    inits = {t.name for t in model.graph.initializer}
    found = []
    for values in (
        [v for v in model.graph.input if v.name not in inits],
        list(model.graph.output),
    ):
        tensors = []
        for v in values:
            t = tensor_type(v.type) if v.type.ByteSize() else None
            if t is None or t.dtype is None or not t.is_static:
                raise ValueError(
                    f"{where}: '{v.name}' has no static type ({t}); OpenVINO partitions need "
                    "static shapes: fix the model's input shapes in the config's [shapes] table"
                )
            if t.dtype.name not in DTYPES:
                raise ValueError(f"{where}: '{v.name}' is {t.dtype}, not one of {DTYPES}")
            tensors.append(Tensor(v.name, t.dtype.name, tuple(int(d) for d in t.shape or ())))
        found.append(tensors)
    return found[0], found[1]


def encode(artifact: Artifact) -> bytes:
    data = artifact.model.SerializeToString()
    header = {
        "symbol": artifact.symbol,
        "inputs": [t.to_json() for t in artifact.inputs],
        "outputs": [t.to_json() for t in artifact.outputs],
        "options": {"precision": artifact.precision, "threads": artifact.threads},
        "onnx": {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()},
    }
    return write_header(MAGIC, header, data)


def decode(data: bytes) -> Artifact:
    """Check artifact bytes (``byoc.artifact``'s framing, symbol and signature checks) and read
    the partition through byoc's checked reader."""
    header, body = read_header(data, MAGIC, "openvino artifact", _MAX_HEADER)
    symbol = read_symbol(header, "openvino artifact")
    where = f"openvino artifact {symbol}"
    inputs, outputs = _tensors(header, "inputs", where), _tensors(header, "outputs", where)
    options = header.get("options")
    if not isinstance(options, dict) or set(options) != {"precision", "threads"}:
        raise ArtifactError(f"{where}: header field 'options' must name precision and threads")
    if options["precision"] not in PRECISIONS:
        raise ArtifactError(
            f"{where}: precision {str(options['precision'])[:40]!r} is not one of {PRECISIONS}"
        )
    threads = options["threads"]
    if type(threads) is not int or not 0 <= threads < 1 << 16:
        raise ArtifactError(f"{where}: threads {str(threads)[:40]!r} is not a thread count")
    stamp = header.get("onnx")
    if (
        not isinstance(stamp, dict)
        or stamp.get("size") != len(body)
        or stamp.get("sha256") != hashlib.sha256(body).hexdigest()
    ):
        raise ArtifactError(f"{where}: the ONNX model's size or sha256 is not the header's")
    model = _partition(body, where)
    try:
        found = signature(model, where)
    except ValueError as exc:
        raise ArtifactError(str(exc)) from None
    if found != (inputs, outputs):
        raise ArtifactError(
            f"{where}: the partition's inputs and outputs are not the header's signature"
        )
    return Artifact(symbol, model, inputs, outputs, options["precision"], threads)


def _partition(body: bytes, where: str) -> onnx.ModelProto:
    """The carried ONNX, read as byoc reads a model it does not trust."""
    try:
        model = specialize(read_model(body))
    except ByocError as exc:
        raise ArtifactError(f"{where}: the partition is not a valid ONNX model: {exc}") from None
    except Exception as exc:  # whatever else a hostile model provokes in onnx
        raise ArtifactError(
            f"{where}: the partition is not a valid ONNX model: {type(exc).__name__}: {exc}"
        ) from None
    graph = model.graph
    external = [t.name for t in graph.initializer if _external(t)]
    external += [n.name for n in graph.node for a in n.attribute if a.t and _external(a.t)]
    external += [s.values.name for s in graph.sparse_initializer]
    if external:
        raise ArtifactError(
            f"{where}: the partition reads external or sparse data ({external[0]!r}): "
            "byoc-openvino partitions hold their constants"
        )
    for node in graph.node:
        if node.domain not in ("", "ai.onnx") or node.op_type in SUBGRAPH_OPS:
            raise ArtifactError(
                f"{where}: node {node.name[:80]!r} ({node.domain or 'ai.onnx'}."
                f"{node.op_type[:80]}) is not one byoc gives to openvino"
            )
    return model


def _external(t: onnx.TensorProto) -> bool:
    return t.data_location == onnx.TensorProto.EXTERNAL or len(t.external_data) > 0


def _tensors(header: dict[str, Any], key: str, where: str) -> list[Tensor]:
    entries = read_signature(header, key, where, DTYPES, empty_dims=True)
    return [Tensor(*entry) for entry in entries]


def numpy_dtype(t: Tensor) -> np.dtype[Any]:
    return np.dtype(t.dtype)
