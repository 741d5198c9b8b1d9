"""A compile's settings, resolved once: the config, the plugins, the backends taking part (in
priority order, their tables filled in) and why the others sit out. ``partition``, ``build``
and placement receive it; nothing in it changes after ``resolve``."""

from __future__ import annotations

import dataclasses
import difflib
import os
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from byoc import plugins
from byoc.config import Config, load_config
from byoc.errors import ConfigError
from byoc.plugins import ENV_VAR, Backend, Registry

ConfigLike = Config | Mapping[str, Any] | str | os.PathLike[str] | None


@dataclass(frozen=True)
class Context:
    """``config`` and ``registry`` resolved: ``active`` backends, ``skipped`` ones with why."""

    config: Config
    registry: Registry
    active: tuple[Active, ...]
    skipped: Mapping[str, str]

    @property
    def tables(self) -> dict[str, dict[str, Any]]:
        """Each active backend's config table."""
        return {a.name: a.table for a in self.active}

    def alone(self, name: str) -> Context:
        """The same settings with only backend ``name`` taking part."""
        return resolve(dataclasses.replace(self.config, backends=[name]), self.registry)


def resolve(config: Context | ConfigLike = None, registry: Registry | None = None) -> Context:
    """Read the config, pick the plugins (default: ``byoc.registry()``) and the backends;
    a ``Context`` (with no other registry) is returned as it is."""
    if isinstance(config, Context):
        if registry is None or registry is config.registry:
            return config
        config = config.config
    cfg = load_config(config)
    reg = registry or plugins.registry()
    active, skipped = resolve_backends(cfg, reg)
    return Context(cfg, reg, tuple(active), MappingProxyType(skipped))


@dataclass
class Active:
    """A backend taking part in this run, with its config table filled in."""

    backend: Backend
    table: dict[str, Any]

    @property
    def name(self) -> str:
        return self.backend.name


def resolve_backends(cfg: Config, reg: Registry) -> tuple[list[Active], dict[str, str]]:
    """The enabled, available backends in priority order, and why others sit out."""
    known = {b.name: b for b in reg.claimable()}
    broken = {b.name: b.reason for b in reg.broken}
    names = cfg.backends
    if names is None:  # the default set: every installed backend meant for speed
        names = [n for n, b in known.items() if not b.reference]
    for name in [*names, *cfg.backend]:
        if name not in known and name not in broken:
            hint = (
                f" ({ENV_VAR} is set to {os.environ[ENV_VAR]!r})" if ENV_VAR in os.environ else ""
            )
            close = difflib.get_close_matches(name, [*known, *broken], n=1)
            todo = (
                f"did you mean '{close[0]}'?"
                if close
                else f"install it (e.g. pip install byoc-{name})"
            )
            raise ConfigError(
                f"{cfg.source}: unknown backend '{name}'; installed backends: "
                f"{', '.join(known) or 'none'}{hint}. {todo[0].upper()}{todo[1:]}"
            )
    if len(set(names)) != len(names):
        raise ConfigError(f"{cfg.source}: 'backends' names a backend twice: {names}")
    tables = {n: cfg.backend_table(n, b.options) for n, b in known.items() if n in cfg.backend}
    active: list[Active] = []
    skipped: dict[str, str] = {
        n: "not used: a reference backend (not meant for speed), used only when `backends` names it"
        for n, b in known.items()
        if cfg.backends is None and b.reference
    }
    for name in names:
        backend = known.get(name)
        table = None
        if backend is not None:
            table = tables.get(name) or cfg.backend_table(name, backend.options)
            if table["min_partition_nodes"] is None:
                table["min_partition_nodes"] = backend.min_partition_nodes
            if not table["enabled"]:
                skipped[name] = f"disabled by [backend.{name}] enabled = false"
                continue
        reason = broken[name] if backend is None else backend.unavailable_reason
        if reason is not None and cfg.backends is not None:  # named: the user counts on it
            raise ConfigError(
                f"{cfg.source}: backend '{name}' is named in 'backends' but cannot be used: "
                f"{reason}. Install what it needs, or remove it from 'backends'"
            )
        if reason is not None:  # only installed: the others still work
            skipped[name] = f"unavailable: {reason}"
            warnings.warn(f"backend '{name}' claims nothing: {reason}", stacklevel=3)
        else:
            assert backend is not None and table is not None
            active.append(Active(backend, table))
    return active, skipped
