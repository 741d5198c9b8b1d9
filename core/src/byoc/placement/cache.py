"""The measurement cache: one small JSON file per key in the user cache dir, written
atomically, read back only as data with a schema. The cache is data byoc may not have written:
an entry that is not a small regular file, or that ``read_entry`` refuses (a field of the wrong
type or range, nodes other than those it is read for), reads as missing, with one line, and the
next measurement under its key replaces it. ``host_id`` is what a timing depends on beyond the
code; ``CACHE_VERSION`` changes when what a key stands for does."""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import os
import re
import reprlib
import stat
import tempfile
import time
import warnings
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, overload

from byoc import host
from byoc.host import host_id as host_id  # the machine's part of a key: in host, a light module
from byoc.plan import Measurement

CACHE_VERSION = 6  # 6: timings other processes disturbed are not cached (Measurement.others)

MAX_ENTRY_BYTES = 16 << 20  # a larger cache entry is not byoc's: a search entry, the largest,
# holds a veto and its reason per node and backend (10,000 nodes, three backends: about 5 MB)
_KEY = re.compile(r"(search-)?[0-9a-f]{64}(-\w+)?")  # what Ledger.key, whole_key, Search.key make


class BadEntry(ValueError):
    """A measurement cache entry byoc would not have written: damaged, edited, or about other
    nodes than those it is read for. The message says what is wrong, in one line."""


@dataclass(frozen=True)
class SearchEntry:
    """A search's outcome as cached: the vetoes it applied (None: the plan stayed), the cache
    keys of its candidates' measurements, and when it searched (``time.time()``)."""

    vetoes: dict[str, dict[str, str]] | None
    candidates: list[str]
    measured_at: float


@overload
def read_entry(
    raw: bytes | str | Mapping[str, Any],
    kind: Literal["measurement"] = ...,
    *,
    nodes: Sequence[str] | None = None,
    backends: Collection[str] | None = None,
    model: Collection[str] | None = None,
) -> Measurement: ...


@overload
def read_entry(
    raw: bytes | str | Mapping[str, Any],
    kind: Literal["search"],
    *,
    nodes: Sequence[str] | None = None,
    backends: Collection[str] | None = None,
    model: Collection[str] | None = None,
) -> SearchEntry: ...


def read_entry(
    raw: bytes | str | Mapping[str, Any],
    kind: Literal["measurement", "search"] = "measurement",
    *,
    nodes: Sequence[str] | None = None,
    backends: Collection[str] | None = None,
    model: Collection[str] | None = None,
) -> Measurement | SearchEntry:
    """A cache entry (its JSON text, or the object it parses to) checked field by field
    against what byoc writes (``_MEASUREMENT``, ``_SEARCH``), or ``BadEntry``, the only
    exception it raises. A measurement's ``nodes`` must be exactly ``nodes`` and its backend
    one of ``backends`` where given; every node it names (a measurement's, a search's
    vetoed ones) must be one of ``model`` where given: a verdict on other nodes would veto
    nodes the plan does not hold, and placement would partition again to the same plan."""
    if isinstance(raw, bytes | str):
        if len(raw) > MAX_ENTRY_BYTES:
            raise _too_large(len(raw))
        try:
            data = json.loads(raw)
        except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
            raise BadEntry(f"it is not JSON ({str(exc)[:100]})") from None
    else:
        data = raw
    if not isinstance(data, Mapping):
        raise BadEntry(f"it holds {_shown(data)}, not a JSON object")
    schema = _MEASUREMENT if kind == "measurement" else _SEARCH
    unknown = [k for k in data if k not in schema]
    if unknown:
        raise BadEntry(f"it has the field {_shown(unknown[0])}, which a {kind} has not")
    required = _REQUIRED if kind == "measurement" else set(_SEARCH)
    missing = sorted(required - set(data))
    if missing:
        raise BadEntry(f"it has no {missing[0]!r}")
    fields = {k: schema[k](v, k) for k, v in data.items()}
    named = list(fields["nodes"]) if kind == "measurement" else list(fields["vetoes"] or {})
    if model is not None:
        stranger = next((n for n in named if n not in model), None)
        if stranger is not None:
            raise BadEntry(f"it names the node {_shown(stranger)}, which the model has not")
    if kind == "search":
        return SearchEntry(**fields)
    m = Measurement(**fields)
    if nodes is not None and m.nodes != list(nodes):
        raise BadEntry(
            f"its nodes {_shown(m.nodes)} are not the {len(nodes)} node(s) {_shown(list(nodes))} "
            "it is read for"
        )
    if backends is not None and m.backend not in backends:
        raise BadEntry(f"its backend {_shown(m.backend)} is not {' or '.join(backends)}")
    return m


def _too_large(size: int) -> BadEntry:
    return BadEntry(f"it holds {size} bytes, more than MAX_ENTRY_BYTES ({MAX_ENTRY_BYTES})")


def _shown(value: Any) -> str:
    """A value as a warning shows it: its repr, cut short."""
    return reprlib.repr(value)


def _text(value: Any, name: str) -> str:
    if not isinstance(value, str):
        raise BadEntry(f"{name} is {_shown(value)}, not a string")
    return value


def _one_of(value: Any, name: str, allowed: tuple[str, ...]) -> str:
    if value not in allowed:
        raise BadEntry(f"{name} is {_shown(value)}, not one of {', '.join(allowed)}")
    return str(value)


def _flag(value: Any, name: str) -> bool:
    if not isinstance(value, bool):
        raise BadEntry(f"{name} is {_shown(value)}, not true or false")
    return value


def _number(value: Any, name: str, most: float = math.inf) -> float:
    """A finite number from 0 to ``most``."""
    try:
        x = float(value) if isinstance(value, int | float) and not isinstance(value, bool) else -1
    except OverflowError:  # an integer of hundreds of digits
        x = math.inf
    if not (math.isfinite(x) and 0 <= x <= most):
        span = f"from 0 to {most:.10g}" if math.isfinite(most) else ">= 0"
        raise BadEntry(f"{name} is {_shown(value)}, not a finite number {span}")
    return x


def _count(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 1 << 31:
        raise BadEntry(f"{name} is {_shown(value)}, not a count")
    return value


def _moment(value: Any, name: str) -> float:
    """A ``time.time()`` no later than tomorrow (a later one would never grow old)."""
    return _number(value, name, most=time.time() + 86400)


def _names(value: Any, name: str) -> list[str]:
    """A list of distinct strings: node names."""
    if not isinstance(value, list) or not all(isinstance(n, str) for n in value):
        raise BadEntry(f"{name} is {_shown(value)}, not a list of node names")
    if len(set(value)) != len(value):
        raise BadEntry(f"{name} names a node twice")
    return value


def _interval(value: Any, name: str) -> tuple[float, float] | None:
    if value is None:
        return None
    if not isinstance(value, list | tuple) or len(value) != 2:
        raise BadEntry(f"{name} is {_shown(value)}, not null or [low, high]")
    lo, hi = (_number(v, name) for v in value)
    if lo > hi:
        raise BadEntry(f"{name} is {_shown(value)}: its low end is above its high end")
    return lo, hi


def _optional(check: Callable[[Any, str], Any]) -> Callable[[Any, str], Any]:
    return lambda value, name: None if value is None else check(value, name)


def _vetoes(value: Any, name: str) -> dict[str, dict[str, str]] | None:
    """null, or ``{node: {backend: reason}}``."""
    if value is None:
        return None
    ok = isinstance(value, dict) and all(
        isinstance(node, str)
        and isinstance(by, dict)
        and all(isinstance(b, str) and isinstance(r, str) for b, r in by.items())
        for node, by in value.items()
    )
    if not ok:
        raise BadEntry(f"{name} is {_shown(value)}, not null or {{node: {{backend: reason}}}}")
    return {node: dict(by) for node, by in value.items()}


def _keys(value: Any, name: str) -> list[str]:
    """Cache keys (file names byoc made, never a path)."""
    if not isinstance(value, list) or not all(
        isinstance(k, str) and _KEY.fullmatch(k) for k in value
    ):
        raise BadEntry(f"{name} is {_shown(value)}, not a list of cache keys")
    return value


# Every field of a Measurement as the cache holds it (not ``cached``: how it was read), and of
# a search's entry, with what checks it: a field added to Measurement must be added here
# (tests/test_placement_cache.py says so).
_MEASUREMENT: dict[str, Callable[[Any, str], Any]] = {
    "partition": _text,
    "backend": _text,
    "nodes": _names,
    "backend_ms": _number,
    "onnxruntime_ms": _number,
    "kept": _flag,
    "call_ms": _number,
    "interval": _interval,
    "samples": _count,
    "clear": _flag,
    "measured_at": _moment,
    "failure": _optional(_text),
    "margin": functools.partial(_number, most=1.0),
    "precision": _text,
    "precision_note": _text,
    "others": _optional(_number),
    "disturbed": _flag,
    "clock": lambda value, name: _one_of(value, name, ("wall", "cpu")),
}
_REQUIRED = {f.name for f in dataclasses.fields(Measurement) if f.default is dataclasses.MISSING}
_SEARCH: dict[str, Callable[[Any, str], Any]] = {
    "vetoes": _vetoes,
    "candidates": _keys,
    "measured_at": _moment,
}


class MeasurementCache:
    """Measurements on disk, one small JSON file per key, written atomically. An entry is
    read only from a regular file (no symlink, device or FIFO) of at most MAX_ENTRY_BYTES,
    and only as ``read_entry`` passes it; any other reads as missing, with one line saying
    why, and the next measurement under its key replaces it."""

    def __init__(self, root: Path | None = None) -> None:
        self.root = root if root is not None else cache_root()

    def get(
        self,
        key: str,
        *,
        nodes: Sequence[str] | None = None,
        backends: Collection[str] | None = None,
        model: Collection[str] | None = None,
    ) -> Measurement | None:
        """The measurement under ``key`` (``read_entry``'s checks), or None."""
        try:
            raw = self.read(key)
            m = (
                None
                if raw is None
                else read_entry(raw, nodes=nodes, backends=backends, model=model)
            )
        except BadEntry as exc:
            self._ignored(key, exc)
            return None
        return None if m is None else dataclasses.replace(m, cached=True)

    def get_search(self, key: str, *, model: Collection[str] | None = None) -> SearchEntry | None:
        """The search's outcome under ``key`` (``read_entry``'s checks), or None."""
        try:
            raw = self.read(key)
            return None if raw is None else read_entry(raw, "search", model=model)
        except BadEntry as exc:
            self._ignored(key, exc)
            return None

    def read(self, key: str) -> bytes | None:
        """The bytes stored under ``key``; None when there are none; ``BadEntry`` when they
        are not a regular file of at most MAX_ENTRY_BYTES (a symlink to /dev/zero would be
        read for ever, a FIFO would wait for a writer)."""
        if not _KEY.fullmatch(key):
            raise BadEntry(f"{key!r} is not a cache key")
        path = self.root / f"{key}.json"
        flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0)
        try:
            if not stat.S_ISREG(os.lstat(path).st_mode):  # not even opened
                raise BadEntry("it is not a regular file (a symlink, a device or a FIFO?)")
            fd = os.open(path, flags)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise BadEntry(f"it cannot be read ({exc.strerror})") from None
        try:
            with os.fdopen(fd, "rb") as fh:
                st = os.fstat(fh.fileno())
                if not stat.S_ISREG(st.st_mode):  # swapped since lstat
                    raise BadEntry("it is not a regular file")
                if st.st_size > MAX_ENTRY_BYTES:
                    raise _too_large(st.st_size)
                return fh.read(MAX_ENTRY_BYTES + 1)  # read_entry refuses more (it grew)
        except OSError as exc:
            raise BadEntry(f"it cannot be read ({exc.strerror})") from None

    def _ignored(self, key: str, why: BadEntry) -> None:
        warnings.warn(
            f"measurement cache: {self.root / key}.json is ignored: {why}; measuring again "
            "(the next measurement replaces it)",
            stacklevel=4,
        )

    def put(self, key: str, m: Measurement) -> None:
        self.put_json(key, {k: v for k, v in vars(m).items() if k != "cached"})

    def put_json(self, key: str, data: Any) -> None:
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=self.root, suffix=".tmp")
            with os.fdopen(fd, "w") as fh:
                json.dump(data, fh)
            os.replace(tmp, self.root / f"{key}.json")
        except OSError as exc:  # a read-only cache costs time, never the compile
            warnings.warn(f"cannot write the measurement cache in {self.root}: {exc}", stacklevel=2)


def cache_root() -> Path:
    """Where measurements are kept: ``placement/`` in byoc's user cache dir."""
    return host.cache_root() / "placement"
