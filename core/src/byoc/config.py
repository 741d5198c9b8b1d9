"""byoc.toml: the shared keys the core owns, and each backend's own ``[backend.<name>]`` table."""

from __future__ import annotations

import difflib
import math
import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from byoc.errors import ConfigError, SpecError


def describe(allowed: Any, value: Any = None) -> str:
    """``one of json, c``; ``at least 1``; ``between 0 and 8``. A wide range (thread counts,
    seeds) is ``at least`` its start, unless ``value`` is past its top: then both bounds."""
    if isinstance(allowed, range):
        top = allowed.stop - 1
        if allowed.stop >= 1 << 15 and not (isinstance(value, int) and value > top):
            return f"at least {allowed.start}"
        return f"between {allowed.start} and {top}"
    return "one of " + ", ".join(map(str, allowed))


def _typed(value: Any, kind: Any, key: str, source: str) -> Any:
    if isinstance(kind, tuple):  # (list, item type)
        if not isinstance(value, list) or not all(_is(v, kind[1]) for v in value):
            raise ConfigError(
                f"{source}: '{key}' must be a list of {kind[1].__name__}, got {value!r}"
            )
        return list(value)
    if not _is(value, kind):
        kind_name = "a table" if kind is dict else kind.__name__
        raise ConfigError(f"{source}: '{key}' must be {kind_name}, got {value!r}")
    if kind is float:
        try:
            return float(value)
        except OverflowError:  # an integer of hundreds of digits
            digits = len(str(abs(value)))
            raise ConfigError(
                f"{source}: '{key}' is an integer of {digits} digits, too large for a float"
            ) from None
    return value


def _is(value: Any, kind: type) -> bool:
    if kind is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, kind)


@dataclass(frozen=True)
class Option:
    """One key of a config table, checked once for every table byoc builds (a config, a loaded
    file): ``byoc.Option(int, 0, "threads per run; 0: one per core", range(0, 1 << 16))``.

    :ivar type: the value's type: ``bool``, ``int``, ``float`` (an int is taken), ``str``,
        ``dict`` (a TOML table), or ``(list, str)`` for a list of str.
    :ivar default: the value when the config sets none; ``None``: the backend decides.
    :ivar help: one line for ``byoc backends --json`` and the backend's docs.
    :ivar allowed: the values allowed: a tuple, or a range; ``None``: any value of the type.
    :ivar local_only: a setting of the machine that runs the model (a compiler, flags, a cache
        directory): a ``.byoc`` file never carries it, and on load it comes from the loading
        user's config.
    """

    type: Any
    default: Any
    help: str
    allowed: tuple[Any, ...] | range | None = None
    local_only: bool = False

    def __post_init__(self) -> None:
        kind = self.type
        listed = isinstance(kind, tuple) and len(kind) == 2 and kind[0] is list
        if not (isinstance(kind, type) or (listed and isinstance(kind[1], type))):
            raise SpecError(
                f"byoc.Option: type must be a type (int, str, ...) or (list, type), got {kind!r}"
            )
        if not isinstance(self.help, str):
            raise SpecError(f"byoc.Option: help must be a str, got {self.help!r:.60}")
        if not (self.allowed is None or isinstance(self.allowed, tuple | range)):
            raise SpecError(
                f"byoc.Option: allowed must be a tuple of values or a range, got "
                f"{self.allowed!r:.60}"
            )
        if self.default is None:
            return
        try:
            _typed(self.default, kind, "default", "byoc.Option")
        except ConfigError as exc:
            raise SpecError(str(exc)) from None
        if self.allowed is not None and self.default not in self.allowed:
            raise SpecError(
                f"byoc.Option: the default {self.default!r} is not one of the allowed values: "
                f"{describe(self.allowed)}"
            )


COUNT = range(0, 1 << 16)  # thread counts: 0 (the library decides) or more
FALLBACK_KEYS: dict[str, Option] = {
    "intra_op_num_threads": Option(
        int,
        0,
        "onnxruntime intra-op threads (0: onnxruntime decides)",
        COUNT,
    ),
    "inter_op_num_threads": Option(
        int,
        0,
        "onnxruntime inter-op threads (0: onnxruntime decides)",
        COUNT,
    ),
    "graph_optimization_level": Option(
        str,
        "all",
        "onnxruntime graph optimizations: disable, basic, extended or all",
        ("disable", "basic", "extended", "all"),
    ),
    "allow_spinning": Option(
        bool,
        True,
        "let onnxruntime's idle threads spin between runs (false: only inside a run; "
        "default: only when one onnxruntime session runs the whole model)",
    ),
    "on_backend_error": Option(
        str,
        "raise",
        "what a backend failure at run time does: raise, or onnxruntime (rerun "
        "that partition on onnxruntime, with a warning)",
        ("raise", "onnxruntime"),
    ),
    "nonfinite_inputs": Option(
        str,
        "onnxruntime",
        "a partition of a backend exact on finite numbers only (dnnl) whose inputs hold NaN or "
        "+-inf (-inf in an attention mask where the backend declares it exact): onnxruntime "
        "runs it (onnxruntime), or the backend does anyway (backend)",
        ("onnxruntime", "backend"),
    ),
}
COMPARE_KEYS: dict[str, Option] = {
    "rtol": Option(float, 1e-4, "relative tolerance: |got - want| <= atol + rtol * |want|"),
    "atol": Option(float, 1e-4, "absolute tolerance"),
    "seed": Option(int, 0, "seed of the random inputs", range(0, 1 << 63)),
    "inputs": Option(
        dict,
        {},
        "fixed values for named inputs of compare/run/bench, e.g. { sr = 16000 }: a number "
        "fills the input, a list is the whole input; other inputs stay random",
    ),
}
BACKEND_KEYS: dict[str, Option] = {
    "enabled": Option(bool, True, "false: the backend claims nothing"),
    "ops": Option((list, str), None, "claim only these op types (allow-list)"),
    "exclude_ops": Option((list, str), [], "never claim these op types"),
    "min_partition_nodes": Option(
        int,
        None,
        "partitions with fewer nodes go back to onnxruntime (default: the backend's)",
        range(1, 1 << 31),
    ),
    "prune": Option(
        bool,
        True,
        "false: keep partitions the backend's own cost model would send back to onnxruntime",
    ),
    "int8": Option(
        str,
        "exact",
        "exact: claim only the quantization ops the backend computes as onnxruntime does; own: "
        "also those it quantizes with its own arithmetic (openvino's DynamicQuantizeLinear), "
        "each partition holding a QuantizeLinear or DynamicQuantizeLinear kept only if its "
        "outputs on the measurement inputs stay within [compile] precision_tolerance of "
        "onnxruntime's (else its quantizers run on onnxruntime)",
        ("exact", "own"),
    ),
    # The one key every backend reads itself: byoc.load(path, threads=N), byoc batch's workers
    # and an InferenceSession's intra_op_num_threads set it for every backend alike.
    "threads": Option(
        int, 0, "threads one run of this backend uses; 0: the library decides", COUNT
    ),
}
COMPILE_KEYS: dict[str, Option] = {
    "shape_cache": Option(
        int,
        8,
        "how many input-shape signatures a compiled model keeps compiled when run with shapes "
        "other than [shapes] (0: refuse other shapes)",
    ),
    "placement": Option(
        str,
        "measured",
        "measured: time each backend partition against onnxruntime on real inputs and keep "
        "only those that win; static: keep every partition the backends claim",
        ("measured", "static"),
    ),
    "margin": Option(
        float,
        0.02,
        "measured placement: how much faster than onnxruntime a partition (and the whole "
        "compiled model) must be to stay, e.g. 0.02 for 2%",
    ),
    "precision": Option(
        str,
        "fp32",
        "bf16: partitions of backends that offer it compute in bfloat16 where the CPU has it "
        "(AVX512_BF16 or AMX), each only if its outputs stay within precision_tolerance of "
        "onnxruntime's fp32 ones on the measurement inputs; fp32: never",
        ("fp32", "bf16"),
    ),
    "precision_tolerance": Option(
        float,
        0.01,
        "the largest error a partition computed otherwise than onnxruntime may make (in a "
        "reduced precision, or quantizing with its backend's own arithmetic: [backend.<name>] "
        "int8): of each output, the largest difference from onnxruntime's fp32 result over its "
        "largest magnitude (integer outputs must match exactly)",
    ),
    "remeasure": Option(
        bool,
        False,
        "measured placement: time every partition again instead of reading cached verdicts "
        "(the new ones are cached); the CLI's --remeasure",
    ),
    "search": Option(
        bool,
        True,
        "measured placement with several backends: each backend also partitions the whole "
        "graph alone, and the partitions that save the most time win, whatever the priority",
    ),
    "search_seconds": Option(
        float,
        60.0,
        "measured placement: the most seconds the search spends timing other backends' "
        "candidates in one compile (cached ones cost nothing); candidates left are skipped",
    ),
    "remeasure_after": Option(
        float,
        7.0,
        "measured placement: a cached verdict whose timing stayed unclear (its interval across "
        "the margin when the time budget ran out) is timed again when older than this many "
        "days (0: on every compile)",
    ),
    "whole_model_fallback": Option(
        bool,
        True,
        "measured placement: run the model as one plain onnxruntime session when the "
        "compiled model still loses to it",
    ),
}
SESSION_KEYS: dict[str, Option] = {
    "compile_after": Option(
        int,
        3,
        "byoc.InferenceSession: calls at one input signature (names, dtypes, shapes) before it "
        "is compiled in the background; until then, and while it compiles, onnxruntime runs it "
        "(0: never compile, plain onnxruntime)",
        range(0, 1 << 31),
    ),
    "plans": Option(
        int,
        8,
        "byoc.InferenceSession: compiled signatures held in memory, least recently used dropped",
        range(0, 1 << 16),
    ),
    "cache": Option(
        bool,
        True,
        "byoc.InferenceSession: keep plans in the user cache dir per model, config, signature "
        "and machine, so the next process starts with them",
    ),
    "check": Option(
        int,
        8,
        "byoc.InferenceSession: calls of each side timed when a plan is ready, the plan and "
        "onnxruntime alternated in the app's own calls; the plan is kept only if its median is "
        "at least 3% below onnxruntime's, else the signature runs on onnxruntime (0: no check)",
        range(0, 1 << 16),
    ),
}
TOP_KEYS = ("backends", "fallback", "backend", "shapes", "compare", "compile", "session")


@dataclass
class Config:
    """Parsed configuration. ``source`` names the file (or ``<dict>``) for error messages."""

    backends: list[str] | None = None
    backend: dict[str, dict[str, Any]] = field(default_factory=dict)
    fallback: dict[str, Any] = field(default_factory=dict)
    shapes: dict[str, list[int]] = field(default_factory=dict)
    compare: dict[str, Any] = field(default_factory=dict)
    compile: dict[str, Any] = field(
        default_factory=lambda: {k: v.default for k, v in COMPILE_KEYS.items()}
    )
    session: dict[str, Any] = field(
        default_factory=lambda: {k: v.default for k, v in SESSION_KEYS.items()}
    )
    source: str = "<dict>"
    fallback_explicit: set[str] = field(default_factory=set)  # [fallback] keys the user set

    def backend_table(self, name: str, options: Mapping[str, Option]) -> dict[str, Any]:
        """A backend's table with defaults filled in; its own keys are checked against
        ``options``."""
        raw = dict(self.backend.get(name, {}))
        known = {**BACKEND_KEYS, **options}
        return _check_table(raw, known, f"backend.{name}", self.source)


def load_config(config: Config | Mapping[str, Any] | str | os.PathLike[str] | None) -> Config:
    """Read a byoc.toml, the ``[tool.byoc]`` table of a pyproject.toml, or a dict."""
    if isinstance(config, Config):
        return config
    if config is None:
        return _parse({}, "<defaults>")
    if isinstance(config, Mapping):
        return _parse(dict(config), "<dict>")
    path = os.fspath(config)
    try:
        with open(path, "rb") as fh:
            data = tomllib.load(fh)
    except FileNotFoundError:
        raise ConfigError(f"config file '{path}' does not exist") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None
    except OSError as exc:
        raise ConfigError(f"cannot read config file '{path}': {exc}") from None
    if os.path.basename(path) == "pyproject.toml":
        tool = data.get("tool", {})
        if not isinstance(tool, dict):
            raise ConfigError(f"{path}: 'tool' must be a table, got {tool!r}")
        table = tool.get("byoc")
        if table is None:
            raise ConfigError(f"{path} has no [tool.byoc] table")
        if not isinstance(table, dict):
            raise ConfigError(f"{path}: 'tool.byoc' must be a table, got {table!r}")
        data = table
    return _parse(data, path)


def _parse(data: dict[str, Any], source: str) -> Config:
    for key in data:
        if key not in TOP_KEYS:
            close = difflib.get_close_matches(key, TOP_KEYS, n=1)
            hint = f"; did you mean '{close[0]}'?" if close else ""
            raise ConfigError(f"{source}: unknown key '{key}' (known: {', '.join(TOP_KEYS)}){hint}")
    cfg = Config(source=source)
    if "backends" in data:
        cfg.backends = _typed(data["backends"], (list, str), "backends", source)
    cfg.fallback = _check_table(_table(data, "fallback", source), FALLBACK_KEYS, "fallback", source)
    cfg.fallback_explicit = set(_table(data, "fallback", source))
    cfg.compare = _check_table(_table(data, "compare", source), COMPARE_KEYS, "compare", source)
    cfg.compile = _check_table(_table(data, "compile", source), COMPILE_KEYS, "compile", source)
    cfg.session = _check_table(_table(data, "session", source), SESSION_KEYS, "session", source)
    if cfg.compile["shape_cache"] < 0:
        raise ConfigError(
            f"{source}: 'compile.shape_cache' must be 0 or more, got {cfg.compile['shape_cache']}"
        )
    if not 0 <= cfg.compile["margin"] < 1:
        raise ConfigError(
            f"{source}: 'compile.margin' must be at least 0 and below 1, got "
            f"{cfg.compile['margin']}"
        )
    _check_ranges(cfg, source)
    for name, table in _table(data, "backend", source).items():
        if not isinstance(table, dict):
            raise ConfigError(f"{source}: 'backend.{name}' must be a table, got {table!r}")
        cfg.backend[name] = table
    for name, dims in _table(data, "shapes", source).items():
        dims = _typed(dims, (list, int), f"shapes.{name}", source)
        if any(d <= 0 or d >= 1 << 63 for d in dims):  # ONNX dims are int64
            raise ConfigError(
                f"{source}: 'shapes.{name}' dims must be positive and below 2**63, got {dims}"
            )
        cfg.shapes[name] = dims
    return cfg


def _check_ranges(cfg: Config, source: str) -> None:
    """Numbers whose type is right but whose value no run can use."""
    keys = [("compare", "rtol"), ("compare", "atol"), ("compile", "remeasure_after")]
    for table, key in [*keys, ("compile", "precision_tolerance"), ("compile", "search_seconds")]:
        value = getattr(cfg, table)[key]
        if not math.isfinite(value) or value < 0:
            raise ConfigError(f"{source}: '{table}.{key}' must be a number >= 0, got {value}")


def _table(data: dict[str, Any], key: str, source: str) -> dict[str, Any]:
    value = data.get(key, {})
    if not isinstance(value, dict):
        hint = "; did you mean 'backends'?" if key == "backend" and isinstance(value, list) else ""
        raise ConfigError(f"{source}: '{key}' must be a table, got {value!r}{hint}")
    return value


def _check_table(
    raw: dict[str, Any], known: Mapping[str, Option], where: str, source: str
) -> dict[str, Any]:
    out = {}
    for key, value in raw.items():
        if key not in known:
            raise ConfigError(
                f"{source}: unknown key '{where}.{key}' (known: {', '.join(sorted(known))})"
            )
        out[key] = _typed(value, known[key].type, f"{where}.{key}", source)
        allowed = known[key].allowed
        if allowed is not None and out[key] not in allowed:
            raise ConfigError(
                f"{source}: '{where}.{key}' must be {describe(allowed, value)}, got {value!r}"
            )
    for key, spec in known.items():
        default = spec.default
        out.setdefault(key, type(default)(default) if isinstance(default, list | dict) else default)
    return out
