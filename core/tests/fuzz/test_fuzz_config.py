"""Fuzzing the config loader: a byoc.toml, a pyproject.toml's ``[tool.byoc]`` or a dict,
changed in any way, either loads into a ``Config`` whose every core setting has its declared
type and allowed value, or is a ``ConfigError`` in one line; so is resolving it against the
installed backends (``byoc.context.resolve``: backend names and ``[backend.<name>]`` tables).
A config that resolves partitions a small model, or says why not: a ``ConfigError`` (an op
type in ``ops`` no backend knows) or a ``ModelError`` (``[shapes]`` that do not fit it).

The inputs are valid configs that set every core key and every installed backend's options,
with JSON-like values swapped for ones of the wrong type or size, written out as TOML text and
then perhaps damaged as text (lines dropped, doubled or moved; bytes changed).
"""

from __future__ import annotations

import json
import math
import re
import tomllib
import warnings
from pathlib import Path
from typing import Any

import byoc
import numpy as np
from byoc import config
from byoc.context import resolve
from byoc.plugins import registry
from byoc.testing.build import make_model, node
from hypothesis import event, given, note
from hypothesis import strategies as st

from .guard import contained, fuzz_settings
from .mutations import damaged_bytes, edited_json, edited_lines, strings


def every_option() -> dict[str, Any]:
    """A valid config that sets every key byoc has, and every option of each backend."""
    backends = {
        b.name: {k: o.default for k, o in b.options.items() if o.default is not None}
        for b in registry().claimable()
    }
    return {
        "backends": ["examplejson"],
        "fallback": {k: o.default for k, o in config.FALLBACK_KEYS.items()},
        "compare": {"rtol": 1e-3, "atol": 1e-5, "seed": 7, "inputs": {"sr": 16000, "m": [1, 0]}},
        "compile": {k: o.default for k, o in config.COMPILE_KEYS.items()},
        "shapes": {"x": [1, 3, 224, 224], "ids": [2, 48]},
        "backend": {
            "examplejson": {"ops": ["Add", "Mul"], "exclude_ops": [], "min_partition_nodes": 2},
            **backends,
        },
    }


VALID = [
    {},
    {"backends": ["examplejson"], "backend": {"examplejson": {"ops": ["Add", "Sub", "Mul"]}}},
    {"shapes": {"x": [1, 3, 48, 192]}, "compare": {"rtol": 1e-4, "atol": 1e-5}},
    {"backends": [], "fallback": {"intra_op_num_threads": 4, "on_backend_error": "onnxruntime"}},
    every_option(),
]


MODEL = make_model(
    [node("Relu", ["x"], "r"), node("Cast", ["ids"], "f", to=1), node("Tanh", ["f"], "t")],
    {"x": ["N", "C", "H", "W"], "ids": (np.int64, ["B", "L"])},
    ["r", "t"],
)

# -- writing TOML ----------------------------------------------------------------------------


def _key(key: str) -> str:
    return key if re.fullmatch(r"[A-Za-z0-9_-]+", key) else json.dumps(key)


def _value(value: Any) -> str | None:
    """A TOML value; None for what TOML cannot say (null)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        return repr(value) if math.isfinite(value) else ("inf" if value > 0 else "-inf")
    if isinstance(value, str):
        return json.dumps(value)  # JSON's escapes are TOML's
    if isinstance(value, list):
        items = [_value(v) for v in value]
        return None if None in items else "[" + ", ".join(items) + "]"  # type: ignore[arg-type]
    if isinstance(value, dict):
        pairs = [(k, _value(v)) for k, v in value.items()]
        return "{" + ", ".join(f"{_key(k)} = {v}" for k, v in pairs if v is not None) + "}"
    return None


def toml(table: dict[str, Any], prefix: str = "") -> str:
    """``table`` as TOML text: its values first, then a ``[section]`` per sub-table (two
    levels: ``[backend.examplejson]``), deeper tables inline."""
    lines, sections = [], []
    for key, value in table.items():
        if isinstance(value, dict) and prefix.count(".") < 1:
            sections.append((f"{prefix}{_key(key)}", value))
        elif (text := _value(value)) is not None:
            lines.append(f"{_key(key)} = {text}")
    out = "\n".join(lines) + "\n"
    for name, sub in sections:
        nested = {k: v for k, v in sub.items() if isinstance(v, dict)}
        plain = {k: v for k, v in sub.items() if not isinstance(v, dict)}
        out += f"\n[{name}]\n" + toml(plain, f"{name}.")
        if nested:
            out += toml(nested, f"{name}.")
    return out


def test_the_toml_writer_writes_what_tomllib_reads():
    """The fuzz inputs start valid: each valid config survives the trip through TOML text."""
    for cfg in VALID:
        assert tomllib.loads(toml(cfg)) == cfg
        byoc.load_config(cfg)


# -- the target --------------------------------------------------------------------------------


@st.composite
def configs(draw: st.DrawFn) -> tuple[str, Any]:
    """(how it is given, the config): "dict", "byoc.toml" text or "pyproject.toml" text."""
    cfg = draw(st.sampled_from(VALID))
    if draw(st.integers(0, 4)):
        cfg = draw(edited_json(cfg))
    form = draw(st.sampled_from(["dict", "byoc.toml", "byoc.toml", "pyproject.toml"]))
    if form == "dict":
        return form, cfg
    if form == "pyproject.toml":
        cfg = draw(st.sampled_from([{"tool": {"byoc": cfg}}, {"tool": cfg}, {"byoc": cfg}]))
        if draw(st.integers(0, 3)) == 0:
            cfg = draw(edited_json(cfg))
    text = toml(cfg) if isinstance(cfg, dict) else ""
    damage = draw(st.sampled_from(["none", "none", "lines", "bytes"]))
    event(f"config: {form}, text damage {damage}")
    if damage == "lines":
        text = draw(edited_lines(text))
    elif damage == "bytes":
        return form, draw(damaged_bytes(text.encode()))
    return form, text.encode()


def own_strings(cfg: Any) -> list[str]:
    """The strings a config holds, keys too (an error may quote them as they are)."""
    if isinstance(cfg, bytes):
        try:
            cfg = tomllib.loads(cfg.decode())
        except (UnicodeDecodeError, tomllib.TOMLDecodeError):
            return []
    return strings(cfg)


def _typed(value: Any, kind: Any) -> bool:
    if isinstance(kind, tuple):
        return isinstance(value, list) and all(_typed(v, kind[1]) for v in value)
    if kind is float:
        return isinstance(value, float)
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, kind)


def assert_checked(cfg: config.Config) -> None:
    """What code after the loader relies on: every core setting present, typed, allowed."""
    tables = [
        (cfg.fallback, config.FALLBACK_KEYS),
        (cfg.compare, config.COMPARE_KEYS),
        (cfg.compile, config.COMPILE_KEYS),
    ]
    for table, keys in tables:
        assert set(table) == set(keys)
        for key, spec in keys.items():
            assert _typed(table[key], spec.type), (key, table[key])
            allowed = spec.allowed
            assert allowed is None or table[key] in allowed, (key, table[key])
    for name, dims in cfg.shapes.items():
        assert isinstance(name, str) and all(_typed(d, int) and d > 0 for d in dims)
    assert all(isinstance(t, dict) for t in cfg.backend.values())
    assert cfg.backends is None or all(isinstance(b, str) for b in cfg.backends)


@fuzz_settings(weight=2)
@given(case=configs())
def test_a_changed_config_loads_checked_or_is_a_config_error(sandbox: Path, case):
    form, cfg = case
    quoted = [s for s in own_strings(cfg) if "\n" in s or "\r" in s]
    if form != "dict":
        path = sandbox / form
        path.write_bytes(cfg)
        note(cfg.decode("utf-8", "replace"))
        cfg = path
    with contained(sandbox), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a backend named but unavailable warns
        try:
            loaded = byoc.load_config(cfg)
            assert_checked(loaded)
            resolve(loaded)
        except byoc.ConfigError as exc:
            event("outcome: ConfigError")
            message = str(exc).strip()
            for text in quoted:  # a name of the config's own, quoted as it is
                message = message.replace(text, "")
            assert message and "\n" not in message, f"not one line: {message!r}"
            return
        event("outcome: loaded and resolved")
        try:  # what the config is for: [shapes] fixes MODEL's dims, the backends claim nodes
            byoc.partition(MODEL, loaded)
        except (byoc.ConfigError, byoc.ModelError) as exc:
            # an op type in ops that no backend knows; [shapes] that do not fit MODEL
            event(f"outcome: loaded, partition raised {type(exc).__name__}")
            note(str(exc))
            return
    event("outcome: loaded and partitioned")
