"""Hypothesis strategies that damage valid inputs the way files get damaged or edited: bytes
flipped, cut or spliced; JSON values swapped for ones of the wrong type or size; ONNX models
with one field changed. Shared by the fuzz targets; each draws from a valid input it built."""

from __future__ import annotations

import copy
import math
from typing import Any

from hypothesis import strategies as st

# -- bytes ---------------------------------------------------------------------------------------


@st.composite
def damaged_bytes(draw: st.DrawFn, data: bytes) -> bytes:
    """``data`` with a few bytes changed, cut short, grown, or a piece of itself spliced in."""
    out = bytearray(data)
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["flip", "set", "cut", "insert", "delete", "splice", "grow"]))
        at = draw(st.integers(0, max(len(out) - 1, 0)))
        if kind == "flip" and out:
            out[at] ^= 1 << draw(st.integers(0, 7))
        elif kind == "set" and out:
            out[at] = draw(st.sampled_from([0x00, 0xFF, 0x7F, 0x80, ord("{"), ord("\n")]))
        elif kind == "cut":
            del out[at:]
        elif kind == "insert":
            out[at:at] = draw(st.binary(min_size=1, max_size=16))
        elif kind == "delete":
            del out[at : at + draw(st.integers(1, 16))]
        elif kind == "splice" and out:
            start = draw(st.integers(0, len(out) - 1))
            out[at:at] = out[start : start + draw(st.integers(1, 64))]
        elif kind == "grow":
            out += draw(st.sampled_from([b"\0", b"\xff", b"PK"])) * draw(st.integers(1, 4096))
    return bytes(out)


# -- JSON ----------------------------------------------------------------------------------------

Path = tuple[Any, ...]  # keys and list indices from the document's root

ODD_VALUES: list[Any] = [
    None, True, False, 0, -1, 1, 2, 3, 4, 8, 2**31, 2**53 + 1, 2**63, -(2**63), 2**64 + 1, 10**400,
    1.5, -0.0, 1e308, math.nan, math.inf, -math.inf,
    "", " ", "x" * 5000, "\x1b[2J", "a\nb", "\u202e", "../../x", "/etc/passwd", "manifest.json",
    "float16", "bfloat16", "object", "str", "int4", "int64", "float64", "bool", "0" * 64,
    "onnxruntime", "examplejson",
    [], {}, [None], [[]], [1, 2], ["x"], {"": None}, {"name": 1},
]  # fmt: skip


def odd_values(names: list[str]) -> st.SearchStrategy[Any]:
    """Values of the wrong type, size or meaning, plus ``names`` found elsewhere in the
    document (a value name or member name where another belongs)."""
    scalars = st.one_of(
        st.sampled_from(ODD_VALUES),
        st.integers(),
        st.floats(),
        st.text(max_size=30),
        *([st.sampled_from(names)] if names else []),
    )
    return st.one_of(scalars, st.lists(scalars, max_size=4))


def paths(doc: Any, at: Path = ()) -> list[Path]:
    """Every node of a JSON document, the root first."""
    out = [at]
    if isinstance(doc, dict):
        for k, v in doc.items():
            out += paths(v, (*at, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            out += paths(v, (*at, i))
    return out


def strings(doc: Any) -> list[str]:
    """Every string in a JSON document, keys too."""
    if isinstance(doc, dict):
        return [s for k, v in doc.items() for s in [k, *strings(v)]]
    if isinstance(doc, list):
        return [s for v in doc for s in strings(v)]
    return [doc] if isinstance(doc, str) else []


def _at(doc: Any, path: Path) -> Any:
    for key in path:
        doc = doc[key]
    return doc


@st.composite
def edited_json(draw: st.DrawFn, doc: Any) -> Any:
    """A deep copy of ``doc`` with one to three nodes replaced, removed, added to, duplicated
    or reordered."""
    doc = copy.deepcopy(doc)
    names = sorted(set(strings(doc)))

    def odd() -> Any:  # a copy: the same list or dict must never sit in two places
        return copy.deepcopy(draw(odd_values(names)))

    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(paths(doc)))
        node = _at(doc, path)
        kind = draw(st.sampled_from(["set", "set", "set", "remove", "add", "dup", "swap"]))
        if kind == "set" and path:
            _at(doc, path[:-1])[path[-1]] = odd()
        elif kind == "remove" and path:
            del _at(doc, path[:-1])[path[-1]]
        elif kind == "add" and isinstance(node, dict):
            node[draw(st.sampled_from([*names[:50], "nosuch"]))] = odd()
        elif kind == "add" and isinstance(node, list):
            node.append(copy.deepcopy(draw(st.sampled_from(node))) if node else None)
        elif kind == "dup" and isinstance(node, list) and node:
            i = draw(st.integers(0, len(node) - 1))
            node.insert(i, copy.deepcopy(node[i]))
        elif kind == "swap" and isinstance(node, list) and len(node) > 1:
            i, j = draw(st.lists(st.integers(0, len(node) - 1), min_size=2, max_size=2))
            node[i], node[j] = node[j], node[i]
        elif path:  # nothing to do at this node: replace it
            _at(doc, path[:-1])[path[-1]] = odd()
    return doc


# -- text made of lines (examplejson's artifacts) ------------------------------------------------

ODD_TOKENS = ["-1", "0", "999999999999999999999", "1e999", "nan", "x", "", "dtype:", "{", "#"]


@st.composite
def edited_lines(draw: st.DrawFn, text: str) -> str:
    """``text`` with a line dropped, doubled or moved, or one word replaced."""
    lines = text.splitlines()
    i = draw(st.integers(0, max(len(lines) - 1, 0)))
    kind = draw(st.sampled_from(["drop", "double", "move", "word", "word"]))
    if not lines:
        return draw(st.text(max_size=20))
    if kind == "drop":
        del lines[i]
    elif kind == "double":
        lines.insert(i, lines[i])
    elif kind == "move":
        lines.insert(draw(st.integers(0, len(lines))), lines.pop(i))
    else:
        words = lines[i].split(" ")
        j = draw(st.integers(0, len(words) - 1))
        words[j] = draw(st.one_of(st.sampled_from(ODD_TOKENS + words), st.text(max_size=8)))
        lines[i] = " ".join(words)
    return "\n".join(lines) + "\n"
