"""Finding backend plugins: entry points of group ``byoc.backends``, loaded into pluggy."""

from __future__ import annotations

import importlib.metadata as md
import os
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pluggy

from byoc import fallback, hookspecs
from byoc.errors import PluginError
from byoc.patterns import Pattern

ENTRY_POINT_GROUP = "byoc.backends"
ENV_VAR = "BYOC_PLUGINS"
TRACE_VAR = "BYOC_TRACE"
IN_PROCESS = "(in-process)"  # the distribution of a plugin Registry.add registers
MAX_MAGNITUDE = 1e15  # Backend.max_magnitude's default


@dataclass
class Backend:
    """A registered backend. ``options`` maps its own config keys to (type, default, help) or
    (type, default, help, allowed values: a tuple or a range)."""

    name: str
    version: str
    distribution: str
    available: Callable[[], str | None] = lambda: None
    options: dict[str, tuple[Any, ...]] = field(default_factory=dict)
    min_partition_nodes: int = 1
    priority: int = 0
    description: str = ""
    prune: Callable[[list[Any]], str | None] | None = None
    fallback_defaults: dict[str, Any] = field(default_factory=dict)
    hooks: list[str] = field(default_factory=list)  # the hooks its plugin implements
    # What besides the version decides the backend's speed (its native sources, the library it
    # links): measured placement re-times partitions when it changes.
    build: Callable[[], str] = lambda: ""
    # A reference backend (examplejson) checks and teaches; it is not meant for speed, so it
    # claims nodes only when the config names it in `backends`.
    reference: bool = False
    # Its kernels follow ONNX on finite numbers only (oneDNN's max-based Relu maps NaN to 0): a
    # partition whose inputs hold NaN or +-inf runs on onnxruntime ([fallback] nonfinite_inputs).
    finite_only: bool = False
    # With finite_only: a partition whose float inputs reach this magnitude runs on onnxruntime
    # too, since inside it they may overflow to inf (P1 on inputs of 1e37: onnxruntime's NaN,
    # dnnl's and OpenVINO's numbers). 1e15 squared and summed over 1e8 terms (a variance,
    # attention scores) stays below float32's 3.4e38; real activations stay below 1e6, masks
    # of -1e4 or -1e9 pass, and so does any negative value in a mask softmax_masks lets hold
    # -inf. math.inf: no bound (NaN and +-inf alone).
    max_magnitude: float = MAX_MAGNITUDE
    # With finite_only: its Add and Softmax give onnxruntime's answer on -inf too (exp(-inf) is
    # 0; a row of -inf is NaN), so a partition input read only by Adds whose sums only Softmax
    # reads, maybe through ops that only move values (an attention mask of 0 and -inf, as
    # TorchScript exports write it), may hold -inf, or -3.4e38; its maximum stays below
    # max_magnitude.
    # The conformance suite checks it (test_softmax_masks_may_hold_minus_inf).
    softmax_masks: bool = False
    # Its 32- and 64-bit integer arithmetic is exact only below this magnitude (OpenVINO's CPU
    # plugin computes int64 in int32, and int32 through float32: 2**24): a partition whose
    # such inputs reach it runs on onnxruntime, so the backend may claim nodes that read a
    # model's integer inputs (token ids, masks). Independent of [fallback] nonfinite_inputs.
    int_limit: int | None = None
    # Reduced precisions it offers ([compile] precision), as overrides of its options, e.g.
    # openvino's {"bf16": {"precision": "bf16"}}, or a function of the partition giving them
    # ({} where it offers none: dnnl's, by the CPU and the layers): placement tries each
    # partition with them.
    precisions: dict[str, dict[str, Any] | Callable[[Any], dict[str, Any]]] = field(
        default_factory=dict
    )
    # Options that make its fp32 kernels round as the direct algorithms do (dnnl's
    # {"winograd": False}): a partition whose outputs differ from onnxruntime's beyond the
    # tolerance is compiled once more with them before measured placement returns it.
    exact: dict[str, Any] = field(default_factory=dict)
    # Option keys of the machine that runs the model (toolchain, paths): never in a .byoc file.
    local_options: frozenset[str] = frozenset()
    _reason: list[str | None] = field(default_factory=list, repr=False)

    @property
    def unavailable_reason(self) -> str | None:
        """None when the backend can be used, else why not (checked once)."""
        if not self._reason:
            try:
                self._reason.append(self.available())
            except Exception as exc:  # an availability check must never take byoc down
                self._reason.append(f"availability check failed: {type(exc).__name__}: {exc}")
        return self._reason[0]


def _short_lines(text: str, limit: int = 400) -> None:
    """BYOC_TRACE's writer: hook calls with their arguments cut to ``limit`` characters a line
    (an argument may be a serialized model: one run wrote 263 MB)."""
    lines = [ln if len(ln) <= limit else ln[:limit] + " ...[cut]" for ln in text.split("\n")]
    sys.stderr.write("\n".join(lines))


class UnknownHooks(PluginError):
    """A plugin implements a hook that is not in byoc's hookspecs (a misspelling)."""


@dataclass
class BrokenPlugin:
    """An entry point that could not be loaded; shown by ``byoc backends``."""

    name: str
    distribution: str
    version: str
    reason: str


class Registry:
    """The plugin manager and the backends its plugins registered.

    ``byoc.registry()`` is the process-wide one, built from the installed entry points. Build
    your own to choose plugins without touching the process (``Registry(only=[])`` has the
    onnxruntime fallback alone; ``add`` registers a plugin object) and pass it as
    ``registry=`` to ``byoc.partition``, ``compile``, ``compare``, ``build``, ``load`` and
    ``load_module``.
    """

    def __init__(self, only: list[str] | None = None) -> None:
        self.pm = pluggy.PluginManager("byoc")
        self.pm.add_hookspecs(hookspecs)
        if os.environ.get(TRACE_VAR, "") not in ("", "0"):  # every hook call, on stderr
            self.pm.trace.root.setwriter(_short_lines)
            self.pm.enable_tracing()
        self.backends: dict[str, Backend] = {}
        self.owners: dict[str, Any] = {}  # backend name -> the plugin object that registered it
        self._routed: dict[tuple[str, str], Any] = {}
        self.broken: list[BrokenPlugin] = []
        self._add(fallback, "byoc", md.version("byoc"))
        seen: dict[str, str] = {}
        for ep in sorted(md.entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name):
            dist = ep.dist.name if ep.dist else "?"
            version = ep.dist.version if ep.dist else "?"
            if only is not None and ep.name not in only:
                continue
            if ep.name in seen and seen[ep.name] != dist:
                raise PluginError(
                    f"backend name '{ep.name}' is claimed by two distributions: "
                    f"{seen[ep.name]} and {dist}; uninstall one of them"
                )
            seen[ep.name] = dist
            try:
                plugin = ep.load()
            except Exception as exc:
                self.broken.append(BrokenPlugin(ep.name, dist, version, f"import failed: {exc}"))
                continue
            if self.pm.is_registered(plugin):
                continue
            try:
                self._add(plugin, dist, version)
            except UnknownHooks as exc:
                self.broken.append(BrokenPlugin(ep.name, dist, version, str(exc)))

    def add(self, plugin: Any, distribution: str = IN_PROCESS, version: str = "0") -> None:
        """Register a plugin object (a module or instance with ``@byoc.hookimpl`` hooks), as an
        entry point would; a hook byoc does not have is a ``PluginError`` naming it."""
        self._add(plugin, distribution, version)

    def _add(self, plugin: Any, dist: str, version: str) -> None:
        self.pm.register(plugin, name=f"{dist}:{getattr(plugin, '__name__', id(plugin))}")
        hooks = sorted(c.name for c in self.pm.get_hookcallers(plugin) or [])
        unknown = [h for h in hooks if not getattr(self.pm.hook, h).has_spec()]
        if unknown:  # pluggy's check_pending, for this plugin alone
            self.pm.unregister(plugin)
            known = ", ".join(sorted(n for n in dir(hookspecs) if n.startswith("byoc_")))
            raise UnknownHooks(
                f"the plugin implements hooks byoc does not have: {', '.join(unknown)} "
                f"(misspelled?); byoc's hooks are {known}"
            )
        impls = [
            i for i in self.pm.hook.byoc_register_backends.get_hookimpls() if i.plugin is plugin
        ]

        def register(name: str, **kwargs: Any) -> None:
            if name in self.backends:
                other = self.backends[name].distribution
                raise PluginError(
                    f"backend name '{name}' is registered by two distributions: {other} and "
                    f"{dist}; uninstall one of them"
                )
            kwargs.setdefault("version", version)
            self.backends[name] = Backend(name=name, distribution=dist, hooks=hooks, **kwargs)
            self.owners[name] = plugin

        for impl in impls:
            impl.function(register=register)

    # -- dispatch helpers ----------------------------------------------------------------

    @property
    def hook(self) -> Any:
        """Every plugin's hooks (pluggy's ``pm.hook``); per-backend calls go through ``route``."""
        return self.pm.hook

    def route(self, backend: str) -> Any:
        """The hooks of the plugin that registered ``backend``, and of no other: TVM's
        ``relay.ext.<name>`` lookup. ``reg.route("dnnl").byoc_codegen(backend="dnnl", ...)``
        calls dnnl's plugin alone, so a plugin never filters on the name."""
        if backend not in self.owners:
            raise PluginError(f"no installed plugin registered the backend '{backend}'")
        return _Route(self, backend)

    def _caller(self, backend: str, hook: str) -> Any:
        key = (backend, hook)
        if key not in self._routed:
            owner = self.owners[backend]
            others = [p for p in self.pm.get_plugins() if p is not owner]
            self._routed[key] = self.pm.subset_hook_caller(hook, others)
        return self._routed[key]

    def claimable(self) -> list[Backend]:
        """Backends that can claim nodes (everything but the fallback), by default priority."""
        found = [b for b in self.backends.values() if b.name != "onnxruntime"]
        return sorted(found, key=lambda b: (-b.priority, b.name))

    def supported_ops(self, backend: str, config: dict[str, Any]) -> dict[str, Any]:
        table: dict[str, Any] = {}
        for result in self.route(backend).byoc_supported_ops(backend=backend, config=config):
            if result:
                table.update(result)
        return table

    def pattern_table(self, backend: str, config: dict[str, Any]) -> list[Any]:
        """The backend's ``(name, pattern, check)`` entries; TVM's ``(name, pattern)`` pairs
        get ``check = None``."""
        table: list[Any] = []
        for result in self.route(backend).byoc_pattern_table(backend=backend, config=config):
            for entry in result or ():
                table.append(_pattern_entry(backend, entry))
        return table


class _Route:
    """``Registry.route(backend)``: attribute ``byoc_<hook>`` is that hook, calling the
    backend's own plugin only."""

    def __init__(self, reg: Registry, backend: str) -> None:
        self._reg, self._backend = reg, backend

    def __getattr__(self, hook: str) -> Any:
        if not hook.startswith("byoc_"):
            raise AttributeError(hook)
        return self._reg._caller(self._backend, hook)


def _pattern_entry(backend: str, entry: Any) -> tuple[str, Pattern, Any]:
    if isinstance(entry, tuple) and len(entry) == 2:
        entry = (*entry, None)
    if (
        not isinstance(entry, tuple)
        or len(entry) != 3
        or not isinstance(entry[0], str)
        or not isinstance(entry[1], Pattern)
        or not (entry[2] is None or callable(entry[2]))
    ):
        raise PluginError(
            f"backend '{backend}': a pattern table entry must be (name, pattern) or "
            f"(name, pattern, check) with a byoc.patterns pattern; got {entry!r:.120}"
        )
    return entry


_lock = threading.Lock()
_cache: dict[str | None, Registry] = {}


def registry(refresh: bool = False) -> Registry:
    """The process-wide registry, honouring ``BYOC_PLUGINS`` (comma-separated names)."""
    env = os.environ.get(ENV_VAR)
    with _lock:
        if refresh or env not in _cache:
            only = None if env is None else [n.strip() for n in env.split(",") if n.strip()]
            _cache[env] = Registry(only)
        return _cache[env]
