"""What a table entry is made of (``Op``, ``Composite``, ``Kind``), and the helpers the entries
share to pack and check a kernel's parameters and to write its C++ call."""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from byoc import ArtifactError, NodeView
from byoc.patterns import Match, Pattern

from byoc_dnnl.lowering import Lower, LowerComposite
from byoc_dnnl.ops import ALG_IDS, DST_TYPES, RNN_IDS

Check = Callable[[NodeView], str | None]
MatchCheck = Callable[[Match], str | None]
Params = Callable[[int, dict[str, Any]], tuple[list[int], list[float]]]
Writer = Callable[["Call"], str]


@dataclass(frozen=True)
class Op:
    """An ONNX op type the backend claims: its support check and its lowering into kernels.

    ``typed``: the check runs after annotate's shared ones (float32 of a static shape, no QDQ
    group onnxruntime runs in int8); ``on_integers``: on an integer tensor, annotate's host
    check instead (a view of token ids); ``json_only``: claimed with ``codegen = "json"`` only;
    ``c_check``: the check with ``codegen = "c"`` when it differs."""

    check: Check
    lower: Lower
    typed: bool = True
    on_integers: bool = False
    json_only: bool = False
    c_check: Check | None = None


@dataclass(frozen=True)
class Composite:
    """A composite pattern (``dnnl.<name>``): its patterns, most specific first, its check and
    its lowering. ``lower`` None: each member is lowered as a single op (the fusion pass makes
    one kernel of them). ``members``: the check ends by asking every member's single-op check
    (annotate.members_ok)."""

    name: str
    patterns: Sequence[Pattern]
    check: MatchCheck | None = None
    lower: LowerComposite | None = None
    members: bool = True
    json_only: bool = False


@dataclass(frozen=True)
class Call:
    """A kernel node as the C writer sees it: its attributes, its operands (``In{dims}``, or
    ``In{dims, w[k]}`` for a weight), its output's dims and its post-ops (``Posts{...}``, for
    kinds that take them)."""

    attrs: dict[str, Any]
    operands: list[str]
    shape: str
    posts: str = ""


def accept(node: NodeView) -> str | None:
    """The check of an op whose every instance the shared checks let through."""
    return None


def no_params(i: int, node: dict[str, Any]) -> tuple[list[int], list[float]]:
    return [], []


@dataclass(frozen=True)
class Kind:
    """A kernel kind of the JSON graph (``ops`` are the ONNX ops lowered into it).

    ``id``: the shim's id (``OP_<NAME>`` in ops.header(); never reuse one). ``params``: the
    shim's integer and float parameters of a kernel node, checked (ArtifactError when an
    attribute is wrong; a missing one is reported by the caller). ``validate``: checks the
    JSON graph's structure needs before any parameter is read (a graph is loaded). ``write``:
    the C source mode's call into the kernel library (kernels.cpp); None: JSON mode only.
    ``post_ops``: its kernels take post-ops (fusion.py fuses into them)."""

    name: str
    id: int
    params: Params = no_params
    validate: Callable[[int, dict[str, Any]], None] | None = None
    write: Writer | None = None
    post_ops: bool = False


@dataclass(frozen=True)
class Family:
    """One module's table: its kernel kinds, the ONNX ops it claims, its composites."""

    kinds: Sequence[Kind] = ()
    ops: dict[str, Op] = field(default_factory=dict)
    composites: Sequence[Composite] = ()


# -- packing and checking parameters ----------------------------------------------------------


def bad(msg: str) -> ArtifactError:
    return ArtifactError(f"dnnl artifact: {msg}")


def ints(value: Any, what: str, n: int | None = None, lo: int = 0) -> list[int]:
    if not isinstance(value, list) or not all(
        isinstance(v, int) and not isinstance(v, bool) for v in value
    ):
        raise bad(f"{what} must be a list of integers, got {value!r:.80}")
    if n is not None and len(value) != n:
        raise bad(f"{what} must have {n} entries, got {len(value)}")
    if any(v < lo or v > 1 << 31 for v in value):
        raise bad(f"{what} has a value out of range: {value}")
    return value


def number(value: Any, what: str) -> float:
    if not isinstance(value, int | float) or isinstance(value, bool) or not math.isfinite(value):
        raise bad(f"{what} must be a finite number, got {value!r:.40}")
    return float(value)


def alg_id(i: int, kind: str, attrs: dict[str, Any], key: str = "alg") -> int:
    """The shim's id of a kernel's ``alg`` attribute (or an rnn's ``cell`` or ``direction``:
    ops.py's tables), or ArtifactError."""
    table, what = (ALG_IDS[kind], "algorithm") if key == "alg" else (RNN_IDS[key], key)
    found = table.get(attrs[key])
    if found is None:
        raise bad(f"node {i}: unknown {kind} {what} {attrs[key]!r}")
    return found


def dst(i: int, attrs: dict[str, Any]) -> int:
    """The shim's code of a kernel's ``dst`` type (ops.py's DST_TYPES), or ArtifactError."""
    value = attrs.get("dst", "float32")
    if value not in DST_TYPES:
        raise bad(f"node {i}: unknown destination type {value!r}")
    return DST_TYPES.index(value)


def window(a: dict[str, Any], nd: int) -> list[int]:
    """A convolution's or pooling's strides, dilations and pads, begin then end (the end may
    be negative: a ConvTranspose's output padding)."""
    found = ints(a["strides"], "strides", nd, 1) + ints(a["dilations"], "dilations", nd)
    return found + ints(a["pads_begin"], "pads", nd) + ints(a["pads_end"], "pads", nd, -(1 << 31))


# -- writing C++ --------------------------------------------------------------------------------
# Every string the C source mode writes is a name of one of ops.py's closed tables, quoted by
# ``literal``, or a C identifier checked by ``identifier``; every number is an int or a finite
# float32 checked by ``integer`` and ``f32``. Text from the model (node names) only reaches a
# ``//`` comment or an error message, through csource's ``_comment``.

_PLAIN = re.compile(r"[a-z0-9_]*")
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")


def literal(value: Any, table: Collection[str], what: str) -> str:
    """``value`` as a C string literal, when it is a name of ``table`` (one of ops.py's closed
    tables); else ArtifactError. The one way a name from the graph reaches the C++."""
    if not isinstance(value, str) or value not in table:
        known = ", ".join(repr(name) for name in table)
        raise bad(f"unknown {what} {value!r:.80}: byoc-dnnl knows {known}")
    if not _PLAIN.fullmatch(value):  # the tables' names are plain: nothing to escape
        raise RuntimeError(f"byoc_dnnl.ops: the {what} {value!r} is not a plain name")
    return f'"{value}"'


def identifier(value: Any, what: str) -> str:
    """``value`` when it is a C identifier (of at most 64 characters); else ArtifactError."""
    if not isinstance(value, str) or not _IDENTIFIER.fullmatch(value):
        raise bad(f"{what} {value!r:.80} is not a C identifier")
    return value


def integer(value: Any, what: str) -> str:
    """An int as a C++ literal; ArtifactError for anything else (a bool, a string, a float)
    or an int out of int64's range."""
    if not isinstance(value, int) or isinstance(value, bool) or not -(1 << 63) < value < 1 << 63:
        raise bad(f"{what} must be an integer, got {value!r:.40}")
    return str(value)


def dims(shape: Any, what: str = "a dimension") -> str:
    """A list of ints as a C++ initializer list (``{1, 8, 10, 12}``)."""
    if not isinstance(shape, list | tuple):
        raise bad(f"{what} must be a list of integers, got {shape!r:.80}")
    return "{" + ", ".join(integer(d, what) for d in shape) + "}"


def f32(x: Any, what: str = "a number") -> str:
    """A finite number as an exact float32 C++ literal (hexadecimal); ArtifactError for
    anything else, or a number float32 cannot hold."""
    with np.errstate(over="ignore"):
        value = np.float32(number(x, what))
    if not np.isfinite(value):
        raise bad(f"{what} {x!r:.40} is beyond float32's range")
    return f"{float(value).hex()}f"
