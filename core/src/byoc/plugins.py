"""Finding backend plugins: entry points of group ``byoc.backends``, loaded into pluggy."""

from __future__ import annotations

import importlib.metadata as md
import os
import sys
import threading
from dataclasses import dataclass, field, fields
from typing import Any

import pluggy

from byoc import fallback, hookspecs
from byoc.backendspec import BackendSpec, from_keywords
from byoc.errors import PluginError, SpecError
from byoc.installed import ENV_VAR, entry_points, selected
from byoc.patterns import Pattern

TRACE_VAR = "BYOC_TRACE"
IN_PROCESS = "(in-process)"  # the distribution of a plugin Registry.add registers


@dataclass(frozen=True)
class Backend(BackendSpec):
    """A registered backend: its plugin's ``BackendSpec`` (``version`` filled in), where it
    comes from, and the hooks its plugin implements."""

    distribution: str = ""
    hooks: tuple[str, ...] = ()
    _reason: list[str | None] = field(default_factory=list, init=False, repr=False, compare=False)

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
        for ep in entry_points(only):
            dist = ep.dist.name if ep.dist else "?"
            version = ep.dist.version if ep.dist else "?"
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
            except (UnknownHooks, SpecError) as exc:
                self.broken.append(BrokenPlugin(ep.name, dist, version, str(exc)))

    def add(self, plugin: Any, distribution: str = IN_PROCESS, version: str = "0") -> None:
        """Register a plugin object (a module or instance with ``@byoc.hookimpl`` hooks), as an
        entry point would; a hook byoc does not have, or a malformed ``BackendSpec``, is a
        ``PluginError`` naming it."""
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

        def register(spec: BackendSpec | str | None = None, /, **keywords: Any) -> None:
            if not isinstance(spec, BackendSpec):  # the keyword form, deprecated
                spec = from_keywords(keywords.pop("name", spec), keywords)
            elif keywords:
                raise SpecError(
                    f"backend '{spec.name}': register(spec) takes the BackendSpec alone, got "
                    f"keywords {', '.join(sorted(keywords))}: put them in the BackendSpec"
                )
            if spec.name in self.backends:
                other = self.backends[spec.name].distribution
                raise PluginError(
                    f"backend name '{spec.name}' is registered by two distributions: {other} "
                    f"and {dist}; uninstall one of them"
                )
            values = {f.name: getattr(spec, f.name) for f in fields(spec)}
            values["version"] = spec.version or version
            self.backends[spec.name] = Backend(**values, distribution=dist, hooks=tuple(hooks))
            self.owners[spec.name] = plugin

        try:
            for impl in impls:
                impl.function(register=register)
        except SpecError:  # a malformed spec: none of the plugin's backends is registered
            self.pm.unregister(plugin)
            for name in [n for n, p in self.owners.items() if p is plugin]:
                del self.backends[name], self.owners[name]
            raise

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
            _cache[env] = Registry(selected(env))
        return _cache[env]
