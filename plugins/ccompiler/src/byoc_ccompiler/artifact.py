"""The ccompiler artifact and its byte format.

Bytes: ``byoc.native.pack``'s layout under the magic line ``byoc-ccompiler artifact 2``: an
8-byte little-endian header length, a JSON header, the C source (UTF-8), then the compiled
library (may be absent). The header records sizes and sha256 of both, the host the library was
built for, and ccompiler's own fields: the entry point's symbol, the signature, the codegen
options and the partition itself (an ONNX model, base64). ``decode`` checks all of it, then
generates the C source again from that partition and refuses a file whose source differs: the
C compiled on load is always byoc-ccompiler's own output, never the file's. It raises
``byoc.ArtifactError`` saying what is wrong.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from typing import Any

import onnx
from byoc import ArtifactError, Partition
from byoc.artifact import read_signature, read_symbol
from byoc.native import Library, field_of, pack, unpack

from byoc_ccompiler.codegen import Options, Tensor, generate
from byoc_ccompiler.ops import CTYPES

MAGIC = b"byoc-ccompiler artifact 2\n"
OLD_MAGIC = b"byoc-ccompiler artifact 1\n"  # no partition: its source cannot be checked


@dataclass
class Artifact:
    """A partition's C source, signature, the partition and the codegen options it was
    generated with, and (when built) its compiled library.

    ``source`` and ``suffix`` are what ``byoc compile --dump-dir`` writes. ``carried`` is true
    when a loaded file carried a library that was dropped (not trusted).
    """

    symbol: str
    source: str
    inputs: list[Tensor]
    outputs: list[Tensor]
    model: onnx.ModelProto = field(default_factory=onnx.ModelProto, repr=False)
    options: Options = field(default_factory=Options)
    library: Library | None = field(default=None, repr=False)
    suffix: str = ".c"
    carried: bool = False

    @property
    def toolchain(self) -> dict[str, Any]:
        return self.library.toolchain if self.library else {}


def encode(artifact: Artifact) -> bytes:
    """The artifact as bytes: ``byoc.native.pack`` with the symbol and signature."""
    header = {
        "symbol": artifact.symbol,
        "inputs": [t.to_json() for t in artifact.inputs],
        "outputs": [t.to_json() for t in artifact.outputs],
        "options": vars(artifact.options),
        "partition": base64.b64encode(artifact.model.SerializeToString()).decode(),
    }
    return pack(MAGIC, header, artifact.source, artifact.library)


def decode(data: bytes, trust_native: bool = False) -> Artifact:
    """Check and parse artifact bytes, and generate the C source again from the carried
    partition: a file whose source is not that output is refused. A carried library is kept
    only with ``trust_native``. ArtifactError names the first problem."""
    if bytes(data[: len(OLD_MAGIC)]) == OLD_MAGIC:
        raise ArtifactError(
            "ccompiler artifact of format 1 carries no partition, so its C source cannot be "
            "checked before it is compiled: compile the model again"
        )
    header, source, library = unpack(data, MAGIC, "ccompiler artifact")
    symbol = read_symbol(header, "ccompiler artifact")
    where = f"ccompiler artifact {symbol}"
    inputs, outputs = _tensors(header, "inputs", where), _tensors(header, "outputs", where)
    options, model = _options(header, where), _partition(header, where)
    part = Partition(
        symbol, "ccompiler", [], [t.name for t in inputs], [t.name for t in outputs], model
    )
    try:
        regenerated, *signature = generate(part, options)
    except Exception as exc:  # whatever a hostile graph provokes: not a partition we make
        raise ArtifactError(f"{where}: its partition does not generate C: {exc}") from None
    if regenerated != source or signature != [inputs, outputs]:
        raise ArtifactError(
            f"{where}: the C source is not what this byoc-ccompiler generates from the partition "
            "the file carries (edited, damaged, or written by another version): compile the "
            "model again"
        )
    return Artifact(
        symbol, source, inputs, outputs, model, options,
        library=library if trust_native else None,
        carried=library is not None and not trust_native,
    )  # fmt: skip


def _options(header: dict[str, Any], where: str) -> Options:
    value = header.get("options")
    fields = {"openmp": bool, "omp_min_elements": int, "fuse": bool}
    if not isinstance(value, dict) or set(value) != set(fields):
        raise ArtifactError(f"{where}: header field 'options' must name {sorted(fields)}")
    for key, kind in fields.items():
        if type(value[key]) is not kind or (kind is int and not 0 <= value[key] < 2**40):
            raise ArtifactError(f"{where}: option {key!r} is {value[key]!r}")
    return Options(**value)


def _partition(header: dict[str, Any], where: str) -> onnx.ModelProto:
    text = field_of(header, "partition", str, where)
    try:
        return onnx.load_from_string(base64.b64decode(text, validate=True))
    except Exception as exc:  # binascii.Error, protobuf's DecodeError and the like
        raise ArtifactError(f"{where}: the partition is not an ONNX model: {exc}") from None


def _tensors(header: dict[str, Any], key: str, where: str) -> list[Tensor]:
    return [Tensor(*entry) for entry in read_signature(header, key, where, CTYPES)]
