"""The ccompiler artifact and its byte format.

Bytes: the magic line ``byoc-ccompiler artifact 1``, an 8-byte little-endian header length, a
JSON header, the C source (UTF-8), then the compiled library (may be absent). The header records
sizes and sha256 of both, the signature and the host the library was built for. ``decode``
checks all of it and raises ``byoc.ArtifactError`` saying what is wrong.
"""

from __future__ import annotations

import json
import re
import struct
from dataclasses import dataclass, field
from typing import Any

from byoc import ArtifactError

from byoc_ccompiler.codegen import Tensor
from byoc_ccompiler.compiler import sha256
from byoc_ccompiler.ops import CTYPES

MAGIC = b"byoc-ccompiler artifact 1\n"
_SYMBOL = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
_MODULE = re.compile(r"_byoc_cc_[0-9a-f]{24}")
_MAX_DIMS = 32


@dataclass
class Artifact:
    """A partition's C source, signature and (when built) its compiled library.

    ``source`` and ``suffix`` are what ``byoc compile --dump-dir`` writes.
    """

    symbol: str
    source: str
    inputs: list[Tensor]
    outputs: list[Tensor]
    module: str = ""  # extension module name; empty when not built
    library: bytes | None = field(default=None, repr=False)
    library_sha256: str = ""
    host: str = ""  # host tag the library was built for
    toolchain: dict[str, Any] = field(default_factory=dict)
    suffix: str = ".c"


def encode(artifact: Artifact) -> bytes:
    """The artifact as bytes (see the module docstring)."""
    source = artifact.source.encode("utf-8")
    library = artifact.library or b""
    header = {
        "symbol": artifact.symbol,
        "inputs": [t.to_json() for t in artifact.inputs],
        "outputs": [t.to_json() for t in artifact.outputs],
        "source_size": len(source),
        "source_sha256": sha256(source),
        "module": artifact.module,
        "library_size": len(library),
        "library_sha256": artifact.library_sha256 if library else "",
        "host": artifact.host,
        "toolchain": artifact.toolchain,
    }
    head = json.dumps(header, sort_keys=True).encode()
    return MAGIC + struct.pack("<Q", len(head)) + head + source + library


def decode(data: bytes) -> Artifact:
    """Check and parse artifact bytes; raise ArtifactError naming the first problem."""
    where = "ccompiler artifact"
    if not isinstance(data, bytes | bytearray | memoryview):
        raise ArtifactError(f"{where}: expected bytes, got {type(data).__name__}")
    data = bytes(data)
    if not data.startswith(MAGIC):
        raise ArtifactError(f"{where}: does not start with {MAGIC.strip().decode()!r}")
    start = len(MAGIC) + 8
    if len(data) < start:
        raise ArtifactError(f"{where}: truncated inside the header length")
    (size,) = struct.unpack("<Q", data[len(MAGIC) : start])
    if size > len(data) - start:
        raise ArtifactError(f"{where}: header of {size} bytes does not fit in {len(data)} bytes")
    try:
        header = json.loads(data[start : start + size])
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ArtifactError(f"{where}: the header is not JSON: {exc}") from None
    if not isinstance(header, dict):
        raise ArtifactError(f"{where}: the header must be a JSON object")
    symbol = _get(header, "symbol", str)
    if not _SYMBOL.fullmatch(symbol):
        raise ArtifactError(f"{where}: symbol {symbol!r} is not a C identifier")
    where = f"ccompiler artifact {symbol}"
    source_size = _get(header, "source_size", int)
    library_size = _get(header, "library_size", int)
    body = data[start + size :]
    if source_size < 0 or library_size < 0 or source_size + library_size != len(body):
        raise ArtifactError(
            f"{where}: the header announces {source_size} + {library_size} bytes of source and "
            f"library, the file has {len(body)}: it is truncated or damaged"
        )
    source_bytes, library = body[:source_size], body[source_size:]
    if sha256(source_bytes) != _get(header, "source_sha256", str):
        raise ArtifactError(f"{where}: the C source does not match its sha256: it is damaged")
    try:
        source = source_bytes.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ArtifactError(f"{where}: the C source is not UTF-8: {exc}") from None
    if f"int {symbol}(void *const *args) {{" not in source:
        raise ArtifactError(f"{where}: the source does not define the entry point {symbol}")
    module = _get(header, "module", str)
    library_sha = _get(header, "library_sha256", str)
    if library:
        if not _MODULE.fullmatch(module):
            raise ArtifactError(f"{where}: module name {module!r} is not one ccompiler writes")
        if sha256(library) != library_sha:
            raise ArtifactError(f"{where}: the compiled library does not match its sha256")
    toolchain = header.get("toolchain", {})
    if not isinstance(toolchain, dict):
        raise ArtifactError(f"{where}: 'toolchain' must be an object")
    return Artifact(
        symbol=symbol,
        source=source,
        inputs=_tensors(header, "inputs", where),
        outputs=_tensors(header, "outputs", where),
        module=module,
        library=library or None,
        library_sha256=library_sha if library else "",
        host=_get(header, "host", str),
        toolchain=toolchain,
    )


def _get(header: dict[str, Any], key: str, kind: type) -> Any:
    value = header.get(key)
    if not isinstance(value, kind) or isinstance(value, bool):
        raise ArtifactError(
            f"ccompiler artifact: header field '{key}' must be {kind.__name__}, got {value!r}"
        )
    return value


def _tensors(header: dict[str, Any], key: str, where: str) -> list[Tensor]:
    items = header.get(key)
    if not isinstance(items, list):
        raise ArtifactError(f"{where}: header field '{key}' must be a list")
    out = []
    for item in items:
        ok = (
            isinstance(item, dict)
            and isinstance(item.get("name"), str)
            and item.get("dtype") in CTYPES
            and isinstance(item.get("shape"), list)
            and len(item["shape"]) <= _MAX_DIMS
            and all(
                isinstance(d, int) and not isinstance(d, bool) and 0 < d < 2**40
                for d in item["shape"]
            )
        )
        if not ok:
            raise ArtifactError(f"{where}: bad {key} entry {item!r}")
        out.append(Tensor(item["name"], item["dtype"], tuple(item["shape"])))
    return out
