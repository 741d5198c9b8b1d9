"""The bytes of a plugin's artifact: written in one layout, and checked in one place when read.

``byoc_deserialize`` reads a stranger's file, so every plugin checks the same things before it
looks inside: the magic bytes it starts with, its format version, every length against the
bytes that are left, nothing after the last part, a JSON header that is an object, a symbol
that is a C identifier, a signature of named, typed, static tensors. Each problem is one
``ArtifactError`` naming the artifact (``what``, e.g. ``"dnnl artifact"``) and the part::

    from byoc import artifact

    data = artifact.write_parts(MAGIC, [graph, weights], version=2)  # what byoc_serialize returns
    version, (graph, weights) = artifact.read_parts(data, MAGIC, {2: ("graph", "weights")}, "x")

    data = artifact.write_header(MAGIC, {"symbol": "x_0", ...}, body)
    header, body = artifact.read_header(data, MAGIC, "x artifact")
    symbol = artifact.read_symbol(header, "x artifact")
    inputs = artifact.read_signature(header, "inputs", f"x artifact {symbol}", ("float32",))

The layouts: ``write_parts`` is the magic, a 4-byte little-endian format version (when the
magic carries none), then each part behind its 8-byte little-endian length; ``write_header`` is
the magic, one such part holding a JSON object, then the body as it is (whose size and hash the
header records: ``byoc.native.pack`` is this layout).
"""

from __future__ import annotations

import json
import re
import struct
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from byoc.errors import ArtifactError

SYMBOL = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")  # a partition's symbol: a C identifier
MAX_DIMS = 32  # dims of a signature's tensor
MAX_NAME = 4096  # characters of a signature's tensor name

Signature = list[tuple[str, str, tuple[int, ...]]]  # (name, dtype, shape) per tensor


def write_parts(magic: bytes, parts: Sequence[bytes], version: int | None = None) -> bytes:
    """``magic``, the 4-byte ``version`` (when given), then each part behind its 8-byte length."""
    out = [magic] if version is None else [magic, struct.pack("<I", version)]
    for part in parts:
        out += [struct.pack("<Q", len(part)), part]
    return b"".join(out)


def read_parts(
    data: Any, magic: bytes, versions: Mapping[int, Sequence[str]], what: str
) -> tuple[int, list[memoryview]]:
    """Check and split what ``write_parts`` wrote with a version: ``(version, parts)``, the
    parts (views of ``data``) named by ``versions[version]``, in order. ``ArtifactError`` when
    ``data`` does not start with ``magic``, its version is not one of ``versions``, a part does
    not fit in what is left, or bytes follow the last part."""
    view = _bytes(data, magic, what)
    at = len(magic)
    if at + 4 > len(view):
        raise ArtifactError(f"{what}: truncated inside the format version")
    (version,) = struct.unpack("<I", view[at : at + 4])
    if version not in versions:
        known = ", ".join(str(v) for v in sorted(versions))
        raise ArtifactError(
            f"{what}: unknown format version {version} (this version reads {known}): written by "
            "a newer version of the plugin, or damaged"
        )
    at += 4
    parts = []
    for name in versions[version]:
        part, at = _part(view, at, name, what)
        parts.append(part)
    if at != len(view):
        last = versions[version][-1] if versions[version] else "format version"
        raise ArtifactError(f"{what}: {len(view) - at} trailing bytes after the {last}")
    return version, parts


def write_header(magic: bytes, header: Mapping[str, Any], body: bytes = b"") -> bytes:
    """``magic``, the JSON ``header`` (keys sorted) behind its 8-byte length, then ``body``."""
    text = json.dumps(header, sort_keys=True).encode()
    return magic + struct.pack("<Q", len(text)) + text + body


def read_header(
    data: Any, magic: bytes, what: str, limit: int | None = None
) -> tuple[dict[str, Any], bytes]:
    """Check and split what ``write_header`` wrote: ``(header, body)``. ``ArtifactError`` when
    ``data`` does not start with ``magic``, the header does not fit (or is over ``limit``
    bytes), is not JSON or is not an object. The body is the caller's to check against the
    header."""
    view = _bytes(data, magic, what)
    text, at = _part(view, len(magic), "header", what)
    if limit is not None and len(text) > limit:
        raise ArtifactError(f"{what}: the header of {len(text)} bytes is over {limit} bytes")
    try:
        header = json.loads(bytes(text))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise ArtifactError(f"{what}: the header is not JSON: {str(exc)[:200]}") from None
    if not isinstance(header, dict):
        raise ArtifactError(f"{what}: the header must be a JSON object")
    return header, bytes(view[at:])


def read_symbol(header: Mapping[str, Any], what: str) -> str:
    """The header's ``symbol``, a C identifier of at most 128 characters, or ``ArtifactError``."""
    symbol = header.get("symbol")
    if not isinstance(symbol, str) or not SYMBOL.fullmatch(symbol):
        raise ArtifactError(
            f"{what}: symbol {str(symbol)[:80]!r} is not a C identifier of at most 128 characters"
        )
    return symbol


def read_signature(
    header: Mapping[str, Any],
    key: str,
    what: str,
    dtypes: Collection[str],
    *,
    empty_dims: bool = False,
) -> Signature:
    """The header's ``key`` (``"inputs"`` or ``"outputs"``): a list of ``{name, dtype, shape}``,
    each a name of 1 to 4096 characters, a dtype of ``dtypes`` and a static shape of at most 32
    dims, each below 2**40 and above 0 (or 0 too, with ``empty_dims``). ``ArtifactError``
    names the first entry that is not."""
    items = header.get(key)
    if not isinstance(items, list):
        raise ArtifactError(f"{what}: header field '{key}' must be a list")
    least, known = (
        (0 if empty_dims else 1),
        tuple(dtypes),
    )  # a tuple: any JSON value may be looked up
    out = []
    for item in items:
        ok = (
            isinstance(item, dict)
            and isinstance(item.get("name"), str)
            and 0 < len(item["name"]) <= MAX_NAME
            and item.get("dtype") in known
            and isinstance(item.get("shape"), list)
            and len(item["shape"]) <= MAX_DIMS
            and all(
                isinstance(d, int) and not isinstance(d, bool) and least <= d < 2**40
                for d in item["shape"]
            )
        )
        if not ok:
            raise ArtifactError(f"{what}: bad {key} entry {str(item)[:200]}")
        out.append((item["name"], item["dtype"], tuple(item["shape"])))
    return out


def _bytes(data: Any, magic: bytes, what: str) -> memoryview:
    """``data`` as a view of bytes that start with ``magic``, or ``ArtifactError``."""
    if not isinstance(data, bytes | bytearray | memoryview):
        raise ArtifactError(f"{what}: expected bytes, got {type(data).__name__}")
    view = memoryview(bytes(data))
    if bytes(view[: len(magic)]) != magic:
        shown = magic.strip().decode(errors="replace")
        raise ArtifactError(
            f"{what}: bad magic: the data does not start with {shown!r} (another plugin's "
            "artifact, or damaged)"
        )
    return view


def _part(view: memoryview, at: int, name: str, what: str) -> tuple[memoryview, int]:
    """The part at ``at`` (an 8-byte length, then that many bytes) and where the next starts."""
    if at == len(view):
        raise ArtifactError(f"{what}: truncated before the {name}")
    if at + 8 > len(view):
        raise ArtifactError(f"{what}: truncated inside the {name} length")
    (size,) = struct.unpack("<Q", view[at : at + 8])
    at += 8
    if size > len(view) - at:
        raise ArtifactError(
            f"{what}: the {name} of {size} bytes does not fit in the {len(view) - at} bytes "
            "left: it is truncated or damaged"
        )
    return view[at : at + size], at + size
