"""byoc.artifact: the framing of a plugin's artifact bytes, written and read back, and each way
a stranger's bytes can be wrong refused with an ArtifactError naming the artifact and the part."""

from __future__ import annotations

import struct
from typing import Any

import pytest
from byoc import ArtifactError, artifact

MAGIC = b"TESTMAGC"
VERSIONS = {1: ("graph", "weights"), 2: ("graph", "weights", "C source")}
HEADER_MAGIC = b"test artifact 1\n"


def test_parts_are_read_back_with_their_version() -> None:
    data = artifact.write_parts(MAGIC, [b"{}", b"\0" * 12, b"int x;"], version=2)
    version, parts = artifact.read_parts(data, MAGIC, VERSIONS, "test artifact")
    assert version == 2 and [bytes(p) for p in parts] == [b"{}", b"\0" * 12, b"int x;"]
    version, parts = artifact.read_parts(
        artifact.write_parts(MAGIC, [b"", b"w"], 1), MAGIC, VERSIONS, "test artifact"
    )
    assert version == 1 and [bytes(p) for p in parts] == [b"", b"w"]


GOOD = artifact.write_parts(MAGIC, [b"{}", b"weights"], version=1)


@pytest.mark.parametrize(
    ("data", "words"),
    [
        ("not bytes", "expected bytes, got str"),
        (b"", "bad magic: the data does not start with 'TESTMAGC'"),
        (b"OTHERMAG" + GOOD[8:], "bad magic"),
        (GOOD[:10], "truncated inside the format version"),
        (MAGIC + struct.pack("<I", 9) + GOOD[12:], r"unknown format version 9 \(.*reads 1, 2\)"),
        (GOOD[:12], "truncated before the graph"),
        (GOOD[:16], "truncated inside the graph length"),
        (GOOD[:22], "truncated before the weights"),
        (GOOD[:-1], "the weights of 7 bytes does not fit in the 6 bytes left: it is truncated"),
        (GOOD + b"xy", "2 trailing bytes after the weights"),
        (artifact.write_parts(MAGIC, [b"{}", b"w"], version=2), "truncated before the C source"),
    ],
    ids=[
        "not bytes", "empty", "magic", "version cut", "unknown version", "no graph",
        "graph length cut", "no weights", "weights cut", "trailing", "missing part",
    ],
)  # fmt: skip
def test_damaged_parts_are_an_artifact_error_naming_the_part(data: Any, words: str) -> None:
    with pytest.raises(ArtifactError, match=f"^test artifact: {words}"):
        artifact.read_parts(data, MAGIC, VERSIONS, "test artifact")


def test_a_header_and_its_body_are_read_back() -> None:
    data = artifact.write_header(HEADER_MAGIC, {"symbol": "x_0", "n": [1, 2]}, b"\x00body")
    assert data.startswith(HEADER_MAGIC)
    header, body = artifact.read_header(data, HEADER_MAGIC, "t")
    assert header == {"symbol": "x_0", "n": [1, 2]} and body == b"\x00body"


def _framed(text: bytes) -> bytes:
    return HEADER_MAGIC + struct.pack("<Q", len(text)) + text


@pytest.mark.parametrize(
    ("data", "words"),
    [
        (HEADER_MAGIC, "truncated before the header"),
        (HEADER_MAGIC + b"\1\0\0", "truncated inside the header length"),
        (HEADER_MAGIC + struct.pack("<Q", 2**60) + b"{}", f"the header of {2**60} bytes does"),
        (_framed(b"{nope"), "the header is not JSON"),
        (_framed(b"\xff\xfe"), "the header is not JSON"),
        (_framed(b"[" * 100_000), "the header is not JSON"),  # too deep for json: RecursionError
        (_framed(b"[1, 2]"), "the header must be a JSON object"),
    ],
    ids=["no header", "length cut", "huge", "not json", "not utf-8", "deep", "a list"],
)
def test_a_damaged_header_is_an_artifact_error(data: bytes, words: str) -> None:
    with pytest.raises(ArtifactError, match=f"^t: {words}"):
        artifact.read_header(data, HEADER_MAGIC, "t")


def test_a_header_over_the_callers_limit_is_refused() -> None:
    data = _framed(b'{"a": "' + b"x" * 64 + b'"}')
    assert artifact.read_header(data, HEADER_MAGIC, "t", limit=73)[0] == {"a": "x" * 64}
    with pytest.raises(ArtifactError, match=r"^t: the header of 73 bytes is over 72 bytes"):
        artifact.read_header(data, HEADER_MAGIC, "t", limit=72)


@pytest.mark.parametrize("symbol", [None, 7, "", "9lives", "a-b", "a" * 129, "x\n"])
def test_a_symbol_that_is_not_a_c_identifier_is_refused(symbol: Any) -> None:
    with pytest.raises(ArtifactError, match=r"^t: symbol .* is not a C identifier"):
        artifact.read_symbol({"symbol": symbol}, "t")
    assert artifact.read_symbol({"symbol": "_a" + "b" * 126}, "t") == "_a" + "b" * 126


def test_a_signature_is_read_as_name_dtype_and_shape() -> None:
    header = {"inputs": [{"name": "x", "dtype": "float32", "shape": [1, 3]}], "outputs": []}
    assert artifact.read_signature(header, "inputs", "t", ("float32",)) == [
        ("x", "float32", (1, 3))
    ]
    assert artifact.read_signature(header, "outputs", "t", ("float32",)) == []
    empty = {"inputs": [{"name": "x", "dtype": "float32", "shape": [0]}]}
    assert artifact.read_signature(empty, "inputs", "t", ("float32",), empty_dims=True)


@pytest.mark.parametrize(
    "entry",
    [
        "x",
        {"name": "", "dtype": "float32", "shape": []},
        {"name": "x" * 4097, "dtype": "float32", "shape": []},
        {"name": 3, "dtype": "float32", "shape": []},
        {"name": "x", "dtype": "float64", "shape": []},
        {"name": "x", "dtype": ["float32"], "shape": []},  # unhashable: no TypeError
        {"name": "x", "dtype": "float32", "shape": [0]},  # empty dims need empty_dims
        {"name": "x", "dtype": "float32", "shape": [True]},
        {"name": "x", "dtype": "float32", "shape": [2**40]},
        {"name": "x", "dtype": "float32", "shape": [1] * 33},
        {"name": "x", "dtype": "float32"},
    ],
)
def test_a_bad_signature_entry_is_refused(entry: Any) -> None:
    with pytest.raises(ArtifactError, match=r"^t: bad inputs entry"):
        artifact.read_signature({"inputs": [entry]}, "inputs", "t", ("float32",))


def test_a_signature_that_is_not_a_list_is_refused() -> None:
    with pytest.raises(ArtifactError, match=r"^t: header field 'outputs' must be a list"):
        artifact.read_signature({"outputs": {"x": 1}}, "outputs", "t", ("float32",))
