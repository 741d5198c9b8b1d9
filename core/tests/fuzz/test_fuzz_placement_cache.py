"""Fuzzing the measurement cache's reader (``byoc.placement``): an entry changed in any way,
as text, as JSON, or as the file that holds it (a symlink, a FIFO, a directory, too large),
is either read as an entry placement can use or refused: ``read_entry`` raises ``BadEntry``
and nothing else; ``MeasurementCache.get`` and ``get_search`` return None with one warning
line and raise nothing; the next measurement written under the key replaces it.

"Can use" is checked on what placement does with a cached verdict: its times, margin and
interval are finite and in range, its nodes are exactly those asked for and of the model,
its backend is one asked for, a search's candidates are cache keys (never paths), and
``needed_ms``, ``threshold`` and ``spread`` work on it.

The inputs are the measurement a real measured compile writes, and search entries as a
search writes them (one that kept the plan, one with vetoes and candidates).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import time
import warnings
from pathlib import Path
from typing import Any

import byoc
import numpy as np
import pytest
from byoc import host, placement
from byoc.plan import Measurement
from byoc.testing.build import make_model, node
from hypothesis import event, given, note
from hypothesis import strategies as st

from .guard import contained, fuzz_settings
from .mutations import damaged_bytes, edited_json

NODES = ["m", "r", "t", "y"]
MODEL = {*NODES, "other"}


@pytest.fixture(scope="module")
def entries(sandbox: Path) -> dict[str, Any]:
    """kind -> a valid entry: the measurement a measured compile wrote, and searches."""
    with pytest.MonkeyPatch.context() as mp:  # timings count (conftest.py's quiet_machine)
        mp.setattr(host, "others_since", lambda mark, window=0.25: 0.0)
        m = make_model(
            [
                node("MatMul", ["x", "w"], "m"),
                node("Relu", ["m"], "r"),
                node("Tanh", ["r"], "t"),
                node("Mul", ["t", "x"], "y"),
            ],
            {"x": [8, 8]},
            ["y"],
            {"w": np.ones((8, 8), np.float32)},
        )
        cfg = {"backends": ["examplejson"], "compile": {"placement": "measured"}}
        byoc.compile(m, cfg)
    (path,) = (sandbox / "cache").rglob("*.json")
    found = {"measurement": json.loads(path.read_text())}
    assert found["measurement"]["nodes"] == NODES
    # a search writes these (one backend: no search): what it decided, and what it vetoed
    found["search"] = {"vetoes": None, "candidates": [], "measured_at": time.time()}
    found["vetoing search"] = {
        "vetoes": {"r": {"examplejson": "slower than onnxruntime"}, "t": {}},
        "candidates": ["a" * 64, "search-" + "b" * 64, "c" * 64 + "-examplejson"],
        "measured_at": time.time() - 3600,
    }
    return found


def assert_usable(entry: Any, kind: str, asked: dict[str, Any]) -> None:
    """What placement relies on in an entry read_entry passes."""
    if kind == "search":
        assert isinstance(entry, placement.SearchEntry)
        assert all(placement._KEY.fullmatch(k) for k in entry.candidates)
        assert all("/" not in k and ".." not in k for k in entry.candidates)
        for vetoed, by in (entry.vetoes or {}).items():
            assert isinstance(vetoed, str) and all(isinstance(r, str) for r in by.values())
            assert asked.get("model") is None or vetoed in asked["model"]
        assert math.isfinite(entry.measured_at)
        return
    assert isinstance(entry, Measurement)
    for ms in (entry.backend_ms, entry.onnxruntime_ms, entry.call_ms):
        assert isinstance(ms, float) and math.isfinite(ms) and ms >= 0
    assert 0 <= entry.margin <= 1 and isinstance(entry.samples, int) and entry.samples >= 0
    assert all(isinstance(n, str) for n in entry.nodes) and len(set(entry.nodes)) == len(
        entry.nodes
    )
    if asked.get("nodes") is not None:
        assert entry.nodes == asked["nodes"]
    if asked.get("backends") is not None:
        assert entry.backend in asked["backends"]
    if asked.get("model") is not None:
        assert set(entry.nodes) <= set(asked["model"])
    assert entry.interval is None or entry.interval[0] <= entry.interval[1]
    assert entry.measured_at <= time.time() + 2 * 86400
    for value in (entry.needed_ms(), entry.threshold(), entry.threshold(margin=False)):
        assert math.isfinite(value)
    assert "\n" not in entry.spread()


@st.composite
def raw_entries(draw: st.DrawFn, entries: dict[str, Any]) -> tuple[str, Any, dict[str, Any]]:
    """(the kind to read it as, the raw entry: bytes, text or an object, what it is read for)."""
    source = draw(st.sampled_from(sorted(entries)))
    kind = "measurement" if source == "measurement" else "search"
    if draw(st.integers(0, 9)) == 0:
        kind = draw(st.sampled_from(["measurement", "search"]))  # the other kind's entry
    entry = entries[source]
    how = draw(st.sampled_from(["as it is", "JSON edited", "JSON edited", "text damaged"]))
    event(f"entry: {source} read as {kind}, {how}")
    if how == "JSON edited":
        entry = draw(edited_json(entry))
    raw: Any = json.dumps(entry).encode()
    if how == "text damaged":
        raw = draw(damaged_bytes(raw))
    elif draw(st.booleans()):
        raw = draw(st.sampled_from([json.loads(raw), raw.decode()]))  # a Mapping, or text
    asked = {
        "nodes": draw(st.sampled_from([None, NODES, NODES[:2], ["ghost"]])),
        "backends": draw(st.sampled_from([None, ["examplejson"], ["dnnl", "ccompiler"]])),
        "model": draw(st.sampled_from([None, MODEL, {"m"}])),
    }
    if kind == "search":
        asked = {"model": asked["model"]}
    return kind, raw, asked


@fuzz_settings(weight=2)
@given(data=st.data())
def test_an_entry_changed_in_any_way_is_usable_or_a_bad_entry(entries, sandbox, data):
    kind, raw, asked = data.draw(raw_entries(entries))
    with contained(sandbox):
        try:
            entry = placement.read_entry(raw, kind, **asked)  # type: ignore[call-overload]
        except placement.BadEntry as exc:
            event("outcome: BadEntry")
            message = str(exc)
            assert message and "\n" not in message, f"not one line: {message!r}"
            return
    event("outcome: read")
    assert_usable(entry, kind, asked)


KEY = "d" * 64


def assert_replaced(cache: placement.MeasurementCache, key: str, kind: str, entries) -> None:
    """The next entry written under ``key`` replaces what was there, and reads back as
    written (but where a directory is in the way: the write fails with a warning)."""
    source = entries["measurement" if kind == "measurement" else "vetoing search"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cache.put_json(key, source)
    path = cache.root / f"{key}.json"
    if path.is_dir():
        return
    assert path.is_file() and not path.is_symlink()
    want = placement.read_entry(source, kind)  # type: ignore[call-overload]
    if kind == "measurement":
        back = cache.get(key, nodes=NODES, backends=["examplejson"], model=MODEL)
        assert back is not None and dataclasses.replace(back, cached=False) == want
    else:
        assert cache.get_search(key, model=MODEL) == want


@st.composite
def cache_files(draw: st.DrawFn, entries: dict[str, Any], root: Path) -> tuple[str, str]:
    """Put something under a key of the cache at ``root``: (the key, the kind to read)."""
    kind = draw(st.sampled_from(["measurement", "search"]))
    key = KEY if kind == "measurement" else "search-" + KEY
    path = root / f"{key}.json"
    what = draw(
        st.sampled_from(
            ["entry", "entry", "symlink", "fifo", "directory", "too large", "nothing", "bad key"]
        )
    )
    event(f"cache file: {what}")
    if what == "entry":
        source = entries["measurement" if kind == "measurement" else "vetoing search"]
        how = draw(st.sampled_from(["as it is", "JSON edited", "text damaged"]))
        raw = json.dumps(draw(edited_json(source)) if how == "JSON edited" else source).encode()
        path.write_bytes(draw(damaged_bytes(raw)) if how == "text damaged" else raw)
    elif what == "symlink":
        target = draw(st.sampled_from(["/dev/zero", "/dev/null", "/", str(root), "nowhere"]))
        path.symlink_to(target)
    elif what == "fifo":
        os.mkfifo(path)
    elif what == "directory":
        path.mkdir()
    elif what == "too large":
        with open(path, "wb") as fh:  # sparse: no disk space
            fh.truncate(placement.MAX_ENTRY_BYTES + 1)
    elif what == "bad key":
        key = draw(st.sampled_from(["../" + KEY, "", KEY + "/x", KEY.upper(), "/etc/passwd"]))
    return key, kind


def _clear(root: Path) -> None:
    for path in root.iterdir():
        path.rmdir() if path.is_dir() and not path.is_symlink() else path.unlink()


@fuzz_settings()
@given(data=st.data())
def test_a_cache_file_of_any_kind_is_read_or_missed_then_replaced(entries, sandbox, data):
    root = sandbox / "cache" / "fuzzed"
    root.mkdir(exist_ok=True)
    _clear(root)
    key, kind = data.draw(cache_files(entries, root))
    cache = placement.MeasurementCache(root)
    asked = {"nodes": NODES, "backends": ["examplejson"], "model": MODEL}
    with contained(sandbox), warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        if kind == "measurement":
            got = cache.get(key, **asked)
        else:
            got = cache.get_search(key, model=MODEL)
        if got is None:
            event("outcome: a miss")
            lines = [str(w.message) for w in said]
            note(lines)
            assert all("\n" not in line for line in lines), lines
            if placement._KEY.fullmatch(key):
                assert_replaced(cache, key, kind, entries)
            return
    event("outcome: read")
    assert_usable(got, kind, asked if kind == "measurement" else {"model": MODEL})
