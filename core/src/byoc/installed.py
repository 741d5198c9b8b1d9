"""Which backend plugins are installed, from their metadata alone: no plugin is imported.

``plugins.registry`` loads the entry points listed here; ``versions`` is what a session's plan
key holds of them. Light on purpose: a session reads it on its worker thread while the app's
calls run, and importing a plugin (OpenVINO's: a second) or ``importlib.metadata`` (30 ms)
there holds the GIL the app's calls wait for.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import sys
import threading
from typing import TYPE_CHECKING

from byoc import host

if TYPE_CHECKING:
    import importlib.metadata as md

ENTRY_POINT_GROUP = "byoc.backends"
ENV_VAR = "BYOC_PLUGINS"

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")  # a requirement's distribution name
_EXTRA = re.compile(r";.*\bextra\s*==")  # a requirement of an optional extra
_lock = threading.Lock()
_versions: dict[str | None, list[tuple[str, str, str]]] = {}


def selected(env: str | None) -> list[str] | None:
    """The plugin names ``BYOC_PLUGINS`` (comma-separated) lets in; None when it is unset."""
    return None if env is None else [n.strip() for n in env.split(",") if n.strip()]


def entry_points(only: list[str] | None) -> list[md.EntryPoint]:
    """The installed plugins' entry points, by name; ``only``: these names alone."""
    import importlib.metadata as md

    found = md.entry_points(group=ENTRY_POINT_GROUP)
    return sorted((e for e in found if only is None or e.name in only), key=lambda e: e.name)


def versions(refresh: bool = False) -> list[tuple[str, str, str]]:
    """``(entry-point name, distribution, version)`` for each plugin ``BYOC_PLUGINS`` lets in,
    and ``(entry-point name, requirement, version)`` for each distribution it requires (``"-"``
    where missing: a plugin that cannot load until it is installed), sorted: what may change a
    session's plan but the model, the config and the machine. Read once per process, and kept
    in byoc's user cache dir until a directory on ``sys.path`` changes (an install or an
    uninstall in it), so that a process with nothing new installed reads no metadata."""
    env = os.environ.get(ENV_VAR)
    with _lock:
        if refresh or env not in _versions:
            _versions[env] = _saved_versions(env, refresh)
        return list(_versions[env])


def _saved_versions(env: str | None, refresh: bool) -> list[tuple[str, str, str]]:
    """``versions`` as saved for this ``sys.path`` and ``BYOC_PLUGINS``, if no directory on
    ``sys.path`` changed since; else read (after the directories' times are taken: an install
    meanwhile reads again next time) and saved."""
    paths = [os.path.abspath(p or os.curdir) for p in sys.path]
    stamp = [[p, _mtime_ns(p)] for p in paths]
    name = hashlib.sha256(json.dumps([paths, env]).encode()).hexdigest()[:16]
    path = host.cache_root() / "plugins" / f"{name}.json"
    if not refresh:
        with contextlib.suppress(OSError, ValueError, TypeError, KeyError):
            saved = json.loads(path.read_text())
            rows = saved["versions"]
            if saved["stamp"] == stamp and all(
                len(v) == 3 and all(isinstance(x, str) for x in v) for v in rows
            ):
                return [(a, b, c) for a, b, c in rows]
    found = _read_versions(selected(env))
    with contextlib.suppress(OSError):  # unsaved: the next process reads the metadata again
        path.parent.mkdir(parents=True, exist_ok=True)
        part = path.with_suffix(f".{os.getpid()}.part")
        part.write_text(json.dumps({"stamp": stamp, "versions": found}))
        os.replace(part, path)
    return found


def _read_versions(only: list[str] | None) -> list[tuple[str, str, str]]:
    import importlib.metadata as md

    found: set[tuple[str, str, str]] = set()
    installed: dict[str, str] = {}  # requirement -> version: each a scan of sys.path
    for ep in entry_points(only):
        if ep.dist is None:
            found.add((ep.name, "?", "?"))
            continue
        found.add((ep.name, ep.dist.name, ep.dist.version))
        for req in ep.dist.requires or ():
            name = _NAME.match(req)
            if name is None or _EXTRA.search(req):
                continue  # an optional extra's: not what the plugin runs with
            if name.group() not in installed:
                try:
                    installed[name.group()] = md.version(name.group())
                except md.PackageNotFoundError:
                    installed[name.group()] = "-"
            found.add((ep.name, name.group(), installed[name.group()]))
    return sorted(found)


def _mtime_ns(path: str) -> int | None:
    try:
        return os.stat(path).st_mtime_ns
    except OSError:
        return None
