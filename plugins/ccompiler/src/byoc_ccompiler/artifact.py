"""The ccompiler artifact and its byte format.

Bytes: ``byoc.native.pack``'s layout under the magic line ``byoc-ccompiler artifact 1``: an
8-byte little-endian header length, a JSON header, the C source (UTF-8), then the compiled
library (may be absent). The header records sizes and sha256 of both, the host the library was
built for, and ccompiler's own fields: the entry point's symbol and the signature. ``decode``
checks all of it and raises ``byoc.ArtifactError`` saying what is wrong.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from byoc import ArtifactError
from byoc.native import Library, field_of, pack, unpack

from byoc_ccompiler.codegen import Tensor
from byoc_ccompiler.ops import CTYPES

MAGIC = b"byoc-ccompiler artifact 1\n"
_SYMBOL = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
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
    library: Library | None = field(default=None, repr=False)
    suffix: str = ".c"

    @property
    def toolchain(self) -> dict[str, Any]:
        return self.library.toolchain if self.library else {}


def encode(artifact: Artifact) -> bytes:
    """The artifact as bytes: ``byoc.native.pack`` with the symbol and signature."""
    header = {
        "symbol": artifact.symbol,
        "inputs": [t.to_json() for t in artifact.inputs],
        "outputs": [t.to_json() for t in artifact.outputs],
    }
    return pack(MAGIC, header, artifact.source, artifact.library)


def decode(data: bytes) -> Artifact:
    """Check and parse artifact bytes; raise ArtifactError naming the first problem."""
    header, source, library = unpack(data, MAGIC, "ccompiler artifact")
    symbol = field_of(header, "symbol", str, "ccompiler artifact")
    if not _SYMBOL.fullmatch(symbol):
        raise ArtifactError(f"ccompiler artifact: symbol {symbol!r} is not a C identifier")
    where = f"ccompiler artifact {symbol}"
    if f"int {symbol}(void *const *args) {{" not in source:
        raise ArtifactError(f"{where}: the source does not define the entry point {symbol}")
    return Artifact(
        symbol=symbol,
        source=source,
        inputs=_tensors(header, "inputs", where),
        outputs=_tensors(header, "outputs", where),
        library=library,
    )


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
