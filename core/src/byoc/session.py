"""``byoc.InferenceSession``: onnxruntime's session API, with byoc's plans underneath.

An app written for ``onnxruntime.InferenceSession`` runs unchanged. The session is an
onnxruntime session at once (its creation is onnxruntime's own), and every call at an input
signature (names, dtypes, shapes) byoc has no plan for runs on it. A signature called
``[session] compile_after`` times is compiled off the calling thread, on the inputs the app
sent (symbolic dims take their sizes; measured placement times the partitions on those values),
and the plan is swapped in when it is ready: a call reads the plan table once, so a call racing
the swap runs on one or the other, never on half of each. A plan that keeps no backend is
remembered as plain onnxruntime, which then costs nothing but the signature look-up. Plans are
kept per (model, config, signature, machine) in byoc's user cache dir, so the next process
starts warm; at most ``[session] plans`` are held in memory (the least recently used dropped).

``patch_onnxruntime`` puts this class in place of ``onnxruntime.InferenceSession`` for code that
builds its own sessions; byoc's own code and onnxruntime's keep the real class.
"""

from __future__ import annotations

import collections
import contextlib
import hashlib
import itertools
import json
import logging
import os
import queue
import statistics
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

import numpy as np
import onnxruntime as ort

from byoc import host, installed
from byoc.config import Config, load_config
from byoc.version import __version__

if TYPE_CHECKING:
    from byoc.context import ConfigLike

log = logging.getLogger("byoc.session")

# The real class, taken when byoc is imported: byoc's own sessions are always onnxruntime's,
# whatever patch_onnxruntime has put in the module since.
OrtSession = ort.InferenceSession
_CPU = "CPUExecutionProvider"
_MAX_PLAIN = 4096  # signatures remembered as plain onnxruntime (a set of small tuples)
_MAX_SEEN = 4096  # signatures counted towards compile_after (an app whose shapes never repeat)
# A plan is kept after its check only if its median call is this far below onnxruntime's: a plan
# that merely ties costs the process its backends' threads and memory for nothing.
CHECK_MARGIN = 0.97
SAVED_PER_PLAN = 4  # plans of a model kept on disk, per plan held in memory ([session] plans)
_LEVEL_NAMES = {
    ort.GraphOptimizationLevel.ORT_DISABLE_ALL: "disable",
    ort.GraphOptimizationLevel.ORT_ENABLE_BASIC: "basic",
    ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED: "extended",
    ort.GraphOptimizationLevel.ORT_ENABLE_ALL: "all",
}

Signature = tuple[tuple[str, str, tuple[int, ...]], ...]


def signature(feed: Any) -> Signature | None:
    """``((name, dtype, shape), ...)`` of a feed of numpy arrays, in name order; None for
    anything else (lists, OrtValues: onnxruntime takes those as they are)."""
    if type(feed) is not dict:
        return None
    out = []
    for name, value in sorted(feed.items()):
        if type(value) is not np.ndarray:
            return None
        dtype = value.dtype
        out.append((name, _DTYPES.get(dtype) or _DTYPES.setdefault(dtype, dtype.str), value.shape))
    return tuple(out)


_DTYPES: dict[np.dtype[Any], str] = {}  # dtype.str, made once: 0.25 us a read, per input and call


class _Plan:
    """A compiled model for one signature, or None: plain onnxruntime runs it. While
    ``check`` is above 0, the signature's calls alternate between the plan and onnxruntime and
    ``times`` holds their durations (the plan's, onnxruntime's) until each side has ``check``."""

    __slots__ = ("check", "model", "times")

    def __init__(self, model: Any, check: int = 0) -> None:
        self.model = model
        self.check = check if model is not None else 0
        self.times: tuple[list[float], list[float]] = ([], [])


class InferenceSession:
    """``onnxruntime.InferenceSession`` with byoc's plans for the signatures an app calls.

    The arguments are onnxruntime's (``path_or_bytes``, ``sess_options``, ``providers``,
    ``provider_options``, and its keyword arguments), plus:

    - ``config``: byoc's config (a dict, a TOML path or a ``Config``); None reads
      ``byoc.toml``, else a ``pyproject.toml`` with ``[tool.byoc]``, in the working
      directory, else the defaults;
    - ``wait``: compile a hot signature on the calling thread, and load cached plans before
      returning (benchmarks and tests; an app leaves it False).

    ``sess_options`` tells byoc too: its thread counts and optimization level become
    ``[fallback]``'s (and each backend's ``threads``) unless the config sets them. byoc plans
    are made only for sessions on the CPU provider (the reference they are checked against);
    a session on any other provider is plain onnxruntime.
    """

    def __init__(
        self,
        path_or_bytes: str | bytes | os.PathLike[str],
        sess_options: ort.SessionOptions | None = None,
        providers: Sequence[Any] | None = None,
        provider_options: Sequence[dict[Any, Any]] | None = None,
        *,
        config: ConfigLike = None,
        wait: bool = False,
        **kwargs: Any,
    ) -> None:
        if isinstance(path_or_bytes, os.PathLike):
            path_or_bytes = os.fspath(path_or_bytes)
        self._session = OrtSession(
            path_or_bytes, sess_options, providers, provider_options, **kwargs
        )
        self._model = path_or_bytes
        self._options = sess_options
        self._outputs = [o.name for o in self._session.get_outputs()]
        self._output_set = frozenset(self._outputs)
        self._inputs = frozenset(i.name for i in self._session.get_inputs())
        self._native = getattr(getattr(self._session, "_sess", None), "run", None)
        self._base = load_config(_user_config(config))
        self._resolved: Config | None = None  # with sess_options' settings: _config()
        settings = self._base.session
        self._compile_after = int(settings["compile_after"])
        self._max_plans = int(settings["plans"])
        self._check = int(settings["check"])
        self._use_disk = bool(settings["cache"])
        self._wait = wait
        self._lock = threading.Lock()
        self._plans: dict[Signature, _Plan] = {}
        self._plain: set[Signature] = set()
        self._used: dict[Signature, int] = {}  # when each plan last ran (or was made)
        self._clock = itertools.count()
        self._seen: collections.Counter[Signature] = collections.Counter()
        self._pending: set[Signature] = set()  # signatures being compiled
        self._jobs = 0  # compiles and loads queued or running
        self._idle = threading.Condition(self._lock)
        self._key: str | None = None
        cpu_only = all(_provider_name(p) == _CPU for p in self._session.get_providers())
        self._enabled = cpu_only and self._compile_after > 0 and self._max_plans > 0
        if not cpu_only:
            log.info("byoc: a session on %s runs as plain onnxruntime", self.get_providers())
        # Plans an earlier process saved load in the background at the second call (with
        # wait: now): the worker's imports hold the GIL for milliseconds at a time, which made
        # a tiny model's first call 4.6x onnxruntime's when they started after it.
        self._cold = 2 if self._enabled and self._use_disk else 0
        if self._cold and wait:
            self._cold = 0
            self._submit(self._load_cached)

    # -- onnxruntime's API ------------------------------------------------------------------

    def run(
        self,
        output_names: Sequence[str] | None,
        input_feed: Mapping[str, Any],
        run_options: ort.RunOptions | None = None,
    ) -> list[Any]:
        """Run the model: onnxruntime's ``run``. A signature with a plan runs on it; any
        other runs on onnxruntime at once, and is compiled once it is hot. While the worker
        compiles, each call's time is noted (``host.note_app``): placement's timings beside
        it are then disturbed, as by another process."""
        if _working.is_set() and not getattr(_noting, "on", False):
            return self._noted(output_names, input_feed, run_options)
        sig = signature(input_feed) if self._enabled else None
        plan = self._plans.get(sig) if sig is not None else None
        if sig is not None and plan is not None and plan.model is not None:
            names = self._outputs if output_names is None else list(output_names)
            if self._output_set.issuperset(names):
                self._used[sig] = next(self._clock)  # for the least recently used
                if plan.check:
                    return self._checked(sig, plan, names, output_names, input_feed, run_options)
                try:
                    outputs = plan.model.run(input_feed)
                    return [outputs[n] for n in names]
                except Exception as exc:  # fail safe: onnxruntime answers, the plan goes
                    self._drop(sig, f"its run failed ({type(exc).__name__}: {exc})")
        elif sig is not None and plan is None and sig not in self._plain:
            self._count(sig, input_feed)
        result = self._run_ort(output_names, input_feed, run_options)
        if self._cold:
            self._warm_up()
        return result

    def _noted(
        self,
        output_names: Sequence[str] | None,
        input_feed: Mapping[str, Any],
        run_options: ort.RunOptions | None,
    ) -> list[Any]:
        """``run``, its time noted (``host.note_app``)."""
        started = time.perf_counter()
        _noting.on = True
        try:
            return self.run(output_names, input_feed, run_options)
        finally:
            _noting.on = False
            host.note_app(time.perf_counter() - started)

    def _checked(
        self,
        sig: Signature,
        plan: _Plan,
        names: list[str],
        output_names: Sequence[str] | None,
        input_feed: Mapping[str, Any],
        run_options: ort.RunOptions | None,
    ) -> list[Any]:
        """A call while ``plan`` is checked: on the side with fewer timed calls, timed, unless
        the worker is compiling or loading meanwhile (then the plan runs, untimed). Both sides'
        answers are the app's answer (the plan's passed placement's comparison)."""
        ours, theirs = plan.times
        timed = not _working.is_set()  # a compile beside the app slows the sides unevenly
        on_plan = len(ours) <= len(theirs) or not timed
        started = time.perf_counter()
        if on_plan:
            try:
                outputs = plan.model.run(input_feed)
            except Exception as exc:  # fail safe, as an unchecked plan's run
                self._drop(sig, f"its run failed ({type(exc).__name__}: {exc})")
                return self._run_ort(output_names, input_feed, run_options)
            result = [outputs[n] for n in names]
        else:
            result = self._run_ort(output_names, input_feed, run_options)
        if not timed:
            return result
        (ours if on_plan else theirs).append(time.perf_counter() - started)
        if len(ours) >= plan.check and len(theirs) >= plan.check:
            self._judge(sig, plan)
        return result

    def _judge(self, sig: Signature, plan: _Plan) -> None:
        """The check's verdict: keep the plan only if it clearly beats onnxruntime in the app's
        own calls (a plan measured faster alone can lose beside the app's other work: two
        thread pools taking turns); either way, saved for the next process."""
        with self._lock:
            if not plan.check or self._plans.get(sig) is not plan:
                return  # judged by another thread, or dropped meanwhile
            plan.check = 0
        mine, theirs = (statistics.median(t) for t in plan.times)
        keep = mine < CHECK_MARGIN * theirs
        why = f"{mine * 1e3:.3f} ms vs onnxruntime's {theirs * 1e3:.3f} ms in the app's calls"
        if keep:
            log.info("byoc: %s keeps its plan: %s", _show(sig), why)
        else:
            self._drop(sig, f"its plan is not faster ({why})", logging.INFO)
        path = self._plan_file(sig) if self._key else None  # the key: made with the plan
        if path is not None:
            _mark(path, sig, keep)  # now: the worker may be busy for minutes

    def _warm_up(self) -> None:
        with self._lock:
            load = self._cold == 1  # the first call counts down, the second loads
            self._cold = max(self._cold - 1, 0)
        if load:
            self._submit(self._load_cached)

    def _run_ort(
        self,
        output_names: Sequence[str] | None,
        input_feed: Mapping[str, Any],
        run_options: ort.RunOptions | None,
    ) -> list[Any]:
        native = self._native
        if native is not None and run_options is None and self._inputs == input_feed.keys():
            # onnxruntime's native run, without the Python wrapper's checks (byoc.fallback
            # raw_run): it still checks each input's type and shape; on an error the wrapper
            # runs and raises what onnxruntime's own run raises
            names = self._outputs if output_names is None else output_names
            try:
                return list(native(names, input_feed, None))
            except Exception:
                pass
        return list(self._session.run(output_names, input_feed, run_options))

    def get_inputs(self) -> list[Any]:
        return list(self._session.get_inputs())

    def get_outputs(self) -> list[Any]:
        return list(self._session.get_outputs())

    def get_overridable_initializers(self) -> list[Any]:
        return list(self._session.get_overridable_initializers())

    def get_modelmeta(self) -> Any:
        return self._session.get_modelmeta()

    def get_providers(self) -> list[str]:
        return list(self._session.get_providers())

    def get_provider_options(self) -> dict[str, Any]:
        return dict(self._session.get_provider_options())

    def get_session_options(self) -> ort.SessionOptions:
        return self._session.get_session_options()

    def io_binding(self) -> Any:
        """onnxruntime's IOBinding: bound runs go to onnxruntime (byoc plans take numpy
        feeds)."""
        return self._session.io_binding()

    def run_with_iobinding(self, iobinding: Any, run_options: ort.RunOptions | None = None) -> None:
        """onnxruntime's own bound run (see ``io_binding``)."""
        self._session.run_with_iobinding(iobinding, run_options)

    def __getattr__(self, name: str) -> Any:
        # the rest of onnxruntime's API (end_profiling, run_with_ort_values, ...) is its own
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self._session, name)

    # -- byoc's side --------------------------------------------------------------------------

    def plans(self) -> dict[Signature, str]:
        """Each signature with a plan: ``"byoc"`` (backends run part of it), ``"checking"``
        (the plan is being timed against onnxruntime in the app's calls) or ``"onnxruntime"``
        (it runs as plain onnxruntime); compiling ones are ``"compiling"``."""
        with self._lock:
            out = {s: _state(p) for s, p in self._plans.items()}
            out.update({s: "onnxruntime" for s in self._plain})
            out.update({s: "compiling" for s in self._pending})
        return out

    def wait(self, timeout: float | None = None) -> bool:
        """Block until no plan of this session is being compiled or loaded; False on timeout."""
        with self._idle:
            return self._idle.wait_for(lambda: not self._jobs, timeout)

    def _config(self) -> Config:
        """The config with ``sess_options``' settings (on the worker: it loads the plugins)."""
        if self._resolved is None:
            self._resolved = _session_config(self._base, self._options)
        return self._resolved

    def _count(self, sig: Signature, feed: Mapping[str, Any]) -> None:
        with self._lock:
            if sig in self._pending or sig in self._plans or sig in self._plain:
                return
            if len(self._seen) >= _MAX_SEEN and sig not in self._seen:
                self._seen.clear()  # shapes that never repeat: forget, never grow
            self._seen[sig] += 1
            if self._seen[sig] < self._compile_after:
                return
            del self._seen[sig]
            self._pending.add(sig)
        feeds = {k: np.array(v, copy=True) for k, v in feed.items()}  # the app may reuse them
        self._submit(lambda: self._compile(sig, feeds), sig)

    def _submit(self, job: Callable[[], None], sig: Signature = ()) -> None:
        """Run ``job`` on the worker (on this thread with ``wait``); ``sig``: the signature it
        compiles, plain onnxruntime if it fails."""
        with self._lock:
            self._jobs += 1

        def run() -> None:
            try:
                job()
            except Exception as exc:  # a plan byoc cannot make is plain onnxruntime
                log.warning("byoc: no plan for %s: %s: %s", _show(sig), type(exc).__name__, exc)
                if sig:
                    self._keep(sig, None)
            finally:
                with self._idle:
                    self._pending.discard(sig)
                    self._jobs -= 1
                    self._idle.notify_all()

        if self._wait:
            run()
        else:
            _worker().put(run)

    def _compile(self, sig: Signature, feeds: dict[str, np.ndarray]) -> None:
        path = self._plan_file(sig)
        if path is not None and self._load(sig, path):
            return  # made by an earlier process, or dropped from memory since
        from byoc import compiler  # onnx and every plugin: only when a plan is made

        compiled = compiler.compile(self._model, self._config(), inputs=feeds)
        backends = {s.unit.backend for s in compiled.steps} - {"onnxruntime"}
        keep = compiled if backends else None
        log.info(
            "byoc: %s runs %s",
            _show(sig),
            f"on {', '.join(sorted(backends))} and onnxruntime" if backends else "as onnxruntime",
        )
        if path is not None:
            _store(path, sig, keep)
            _prune(path.parent, SAVED_PER_PLAN * self._max_plans)
        self._keep(sig, keep, self._check)

    def _keep(self, sig: Signature, model: Any, check: int = 0) -> None:
        with self._lock:
            if model is None:
                self._plain_add(sig)
                return
            plans = dict(self._plans)
            plans[sig] = _Plan(model, check)
            self._used[sig] = next(self._clock)
            while len(plans) > self._max_plans:  # the least recently used goes
                victim = min(plans, key=lambda s: self._used.get(s, -1))
                del plans[victim]
                self._used.pop(victim, None)
            self._plans = plans  # one assignment: a run sees the old table or the new one

    def _drop(self, sig: Signature, why: str, level: int = logging.WARNING) -> None:
        log.log(level, "byoc: %s runs on onnxruntime from now on: %s", _show(sig), why)
        with self._lock:
            plans = dict(self._plans)
            plans.pop(sig, None)
            self._plans = plans
            self._plain_add(sig)

    def _plain_add(self, sig: Signature) -> None:
        """Remember ``sig`` as plain onnxruntime (under the lock), up to ``_MAX_PLAIN``."""
        if len(self._plain) < _MAX_PLAIN:
            self._plain.add(sig)

    # -- plans on disk ------------------------------------------------------------------------

    def _model_key(self) -> str:
        if self._key is None:  # without the plugins: loading a plain plan imports none of them
            self._key = plan_key(self._model, _session_config(self._base, self._options, False))
        return self._key

    def _plan_file(self, sig: Signature) -> Path | None:
        if not self._use_disk:
            return None
        text = json.dumps([[n, d, list(s)] for n, d, s in sig])
        name = hashlib.sha256(text.encode()).hexdigest()[:16]
        return plans_dir() / self._model_key() / f"{name}.byoc"

    def _load_cached(self) -> None:
        """The plans an earlier process made for this model here, newest first."""
        folder = plans_dir() / self._model_key()
        files = sorted(
            (p for p in _listing(folder) if p.suffix in (".byoc", ".plain")),
            key=_mtime,
            reverse=True,
        )
        loaded = 0
        for path in files:
            sig = _read_signature(path.with_suffix(".json"))
            if sig is None or sig in self._plans or sig in self._plain:
                continue
            if path.suffix == ".byoc" and loaded >= self._max_plans:
                continue
            loaded += self._load(sig, path) and path.suffix == ".byoc"

    def _load(self, sig: Signature, path: Path) -> bool:
        """Keep the plan saved at ``path`` (or its ``.plain`` marker) for ``sig``; False when
        there is none, or it does not load (damaged, made by another version: compile again)."""
        if path.with_suffix(".plain").is_file():
            self._keep(sig, None)
            return True
        if not path.with_suffix(".byoc").is_file():
            return False
        from byoc import reader  # onnx and the plan's plugins: a plain plan needs neither

        check = 0 if path.with_suffix(".kept").is_file() else self._check
        try:
            self._keep(sig, reader.load(path.with_suffix(".byoc")), check)
        except Exception as exc:
            log.info("byoc: cached plan %s not used: %s", path.name, exc)
            return False
        with contextlib.suppress(OSError):  # used: the last the cache's bound drops
            os.utime(path.with_suffix(".byoc"))
        return True


def plan_key(model: str | bytes, config: Config) -> str:
    """What a session's plans depend on beyond their signature: the model's bytes, the config
    (but ``[session]``, which changes no plan), byoc's, onnxruntime's and the plugins' versions
    (``installed.versions``: from their metadata, no plugin imported) and the machine
    (``host.host_id``)."""
    digest = hashlib.sha256(model if isinstance(model, bytes) else model_digest(model).encode())
    settings = asdict(config) | {"source": None, "session": None}
    versions = [("byoc", __version__), ("onnxruntime", ort.__version__), *installed.versions()]
    digest.update(json.dumps([settings, versions, host.host_id()], default=str).encode())
    return digest.hexdigest()[:24]


SETTLED = 2.0  # seconds since a file's last change before its digest is remembered


def model_digest(path: str) -> str:
    """The sha256 of a model file, remembered in the user cache under its device, inode, size
    and change times: any write changes its ctime, which no one sets back, so a remembered
    digest is the file's (git's index trusts the same). Hashing a 69 MB model takes 140 ms of
    a core that a session's first calls would share. A file changed in the last SETTLED
    seconds is hashed and not remembered: a second write within the clock's tick would keep
    its times."""
    st = os.stat(path)
    stamp = [
        os.path.abspath(path),
        st.st_dev,
        st.st_ino,
        st.st_size,
        st.st_mtime_ns,
        st.st_ctime_ns,
    ]
    memo = plans_dir() / "digests" / hashlib.sha256(json.dumps(stamp).encode()).hexdigest()[:32]
    with contextlib.suppress(OSError, UnicodeDecodeError):
        if memo.is_file() and not memo.is_symlink() and memo.stat().st_size == 64:
            known = memo.read_text()
            if all(c in "0123456789abcdef" for c in known):
                return known
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    found = digest.hexdigest()
    if time.time() - max(st.st_mtime_ns, st.st_ctime_ns) / 1e9 > SETTLED:
        with contextlib.suppress(OSError):
            memo.parent.mkdir(parents=True, exist_ok=True)
            part = memo.with_suffix(f".{os.getpid()}.part")
            part.write_text(found)
            os.replace(part, memo)
    return found


def saved_plans(model: str | bytes, config: Config) -> list[tuple[str, str]]:
    """The plans sessions saved for ``model`` with ``config`` on this machine (what
    ``partition`` and ``explain`` list): (signature as text, what runs it), newest first."""
    folder = plans_dir() / plan_key(model, config)
    out = []
    for path in sorted(_listing(folder), key=_mtime, reverse=True):
        sig = _read_signature(path) if path.suffix == ".json" else None
        if sig is None:
            continue
        if path.with_suffix(".plain").is_file():
            how = "onnxruntime"
        elif not path.with_suffix(".byoc").is_file():
            continue
        elif path.with_suffix(".kept").is_file():
            how = "byoc (won its check in the app's calls)"
        else:
            how = "byoc (not yet checked in an app's calls)"
        out.append((_show(sig), how))
    return out


def _store(path: Path, sig: Signature, compiled: Any) -> None:
    """Save a plan (a ``.plain`` marker when onnxruntime runs it whole) and its signature
    beside it; a cache that cannot be written costs the next process a compile, never this one
    its run. A new plan is checked anew: an earlier plan's ``.kept`` goes."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.with_suffix(".kept").unlink(missing_ok=True)
        path.with_suffix(".json").write_text(json.dumps([[n, d, list(s)] for n, d, s in sig]))
        if compiled is not None:
            compiled.save(path)
        else:
            path.with_suffix(".plain").write_bytes(b"")
    except Exception as exc:
        log.info("byoc: cannot cache the plan in %s: %s", path.parent, exc)


def _prune(folder: Path, most: int) -> None:
    """At most ``most`` plans of a model on disk: the least recently made or loaded go (their
    signatures compile again when they are hot). An app whose shapes keep changing (an OCR
    width per image) would otherwise fill the disk: a plan holds its model's weights."""
    saved = sorted((p for p in _listing(folder) if p.suffix == ".byoc"), key=_mtime, reverse=True)
    for old in saved[most:]:
        for suffix in (".byoc", ".kept", ".json"):
            with contextlib.suppress(OSError):
                old.with_suffix(suffix).unlink()


def _mark(path: Path, sig: Signature, keep: bool) -> None:
    """Save a check's verdict: a ``.kept`` marker beside the plan, or the plan replaced by a
    ``.plain`` marker."""
    try:
        if keep:
            path.with_suffix(".kept").write_bytes(b"")
        else:
            _store(path, sig, None)
            path.with_suffix(".byoc").unlink(missing_ok=True)
    except OSError as exc:
        log.info("byoc: cannot save the check's verdict in %s: %s", path.parent, exc)


def _state(plan: _Plan) -> str:
    if plan.model is None:
        return "onnxruntime"
    return "checking" if plan.check else "byoc"


def _listing(folder: Path) -> Iterator[Path]:
    try:
        yield from folder.iterdir()
    except OSError:
        return


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def _read_signature(path: Path) -> Signature | None:
    """A signature file: ``[[name, dtype, [dims]], ...]``; None when damaged."""
    try:
        if not path.is_file() or path.stat().st_size > 1 << 16:
            return None
        data = json.loads(path.read_text())
        sig = tuple((str(n), str(np.dtype(d).str), tuple(int(x) for x in s)) for n, d, s in data)
    except (OSError, ValueError, TypeError):
        return None
    return sig if all(d >= 0 for _, _, s in sig for d in s) else None


def plans_dir() -> Path:
    """Where sessions keep their plans: ``sessions/`` in byoc's user cache dir."""
    return host.cache_root() / "sessions"


def _show(sig: Signature) -> str:
    return ", ".join(f"{n} {np.dtype(d).name}{list(s)}" for n, d, s in sig) or "cached plans"


def _provider_name(p: Any) -> str:
    return p[0] if isinstance(p, tuple) else str(p)


def _user_config(config: ConfigLike) -> ConfigLike:
    """The config given, else ``byoc.toml`` or a ``pyproject.toml`` with ``[tool.byoc]`` in the
    working directory, else the defaults."""
    if config is not None:
        return config
    if os.path.isfile("byoc.toml"):
        return "byoc.toml"
    try:
        with open("pyproject.toml", "rb") as fh:
            import tomllib

            if "byoc" in tomllib.load(fh).get("tool", {}):
                return "pyproject.toml"
    except (OSError, ValueError):
        pass
    return None


def _session_config(
    cfg: Config, options: ort.SessionOptions | None, backends: bool = True
) -> Config:
    """The config with the session options' threads and optimization level as ``[fallback]``'s
    and (``backends``) each backend's ``threads``, where the config does not set them itself.
    Each backend's takes the plugins loaded, to list the backends; a plan key does without
    (``backends=False``): they follow from ``[fallback]``'s and the plugins the key holds."""
    if options is None:
        return cfg
    fallback = dict(cfg.fallback)
    explicit = set(cfg.fallback_explicit)
    wanted = {
        "intra_op_num_threads": options.intra_op_num_threads,
        "inter_op_num_threads": options.inter_op_num_threads,
        "graph_optimization_level": _LEVEL_NAMES.get(options.graph_optimization_level, "all"),
    }
    for key, value in wanted.items():
        if key not in explicit and value:
            fallback[key] = value
    backend = {k: dict(v) for k, v in cfg.backend.items()}
    threads = options.intra_op_num_threads
    if threads > 0 and backends:
        from byoc import plugins

        for b in plugins.registry().claimable():  # threads: a key every backend has
            backend.setdefault(b.name, {}).setdefault("threads", threads)
    return Config(
        backends=cfg.backends,
        backend=backend,
        fallback=fallback,
        shapes=dict(cfg.shapes),
        compare=dict(cfg.compare),
        compile=dict(cfg.compile),
        session=dict(cfg.session),
        source=cfg.source,
        fallback_explicit=explicit,
    )


# -- the background worker -----------------------------------------------------------------------

_jobs: queue.Queue[Callable[[], None]] | None = None
_working = threading.Event()  # set while the worker runs a job
_noting = threading.local()  # on: this thread's call is being timed for host.note_app
_jobs_lock = threading.Lock()
_internal = threading.local()


def _worker() -> queue.Queue[Callable[[], None]]:
    """One daemon thread per process compiles and loads every session's plans, in turn (two
    compiles at once would time each other)."""
    global _jobs
    with _jobs_lock:
        if _jobs is None:
            _jobs = queue.Queue()
            jobs = _jobs

            def loop() -> None:
                _internal.active = True  # sessions made here are onnxruntime's (patched or not)
                while True:
                    job = jobs.get()
                    _working.set()
                    try:
                        job()
                    finally:
                        if jobs.empty():
                            _working.clear()

            threading.Thread(target=loop, name="byoc-plans", daemon=True).start()
        return _jobs


# -- patch_onnxruntime ---------------------------------------------------------------------------

_OWN = ("byoc", "onnxruntime")  # module prefixes that always get the real class


def _internal_caller(frame: Any) -> bool:
    if getattr(_internal, "active", False):
        return True
    name = frame.f_globals.get("__name__", "") if frame is not None else ""
    return any(name == p or name.startswith((p + ".", p + "_")) for p in _OWN)


class Patch:
    """``onnxruntime.InferenceSession`` replaced by byoc's session (``patch_onnxruntime``);
    ``unpatch()`` or leaving the ``with`` block puts the real class back."""

    def __init__(self, config: ConfigLike) -> None:
        self.config = config
        self.previous = ort.InferenceSession
        patch = self

        class PatchedSession:
            """byoc's session for the app's code; onnxruntime's for byoc's and its own."""

            def __new__(cls, *args: Any, **kwargs: Any) -> Any:
                if _internal_caller(sys._getframe(1)):
                    return OrtSession(*args, **kwargs)
                kwargs.setdefault("config", patch.config)
                return InferenceSession(*args, **kwargs)

        PatchedSession.__qualname__ = PatchedSession.__name__ = "InferenceSession"
        ort.InferenceSession = PatchedSession

    def unpatch(self) -> None:
        ort.InferenceSession = self.previous

    def __enter__(self) -> Patch:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.unpatch()


def patch_onnxruntime(config: ConfigLike = None) -> Patch:
    """Make code that builds ``onnxruntime.InferenceSession`` (inside a library the user does
    not own) get ``byoc.InferenceSession`` with ``config``; a function and a context manager::

        with byoc.patch_onnxruntime(config="byoc.toml"):
            app()

    Code that took the class before the patch (``from onnxruntime import InferenceSession`` at
    import time) keeps it: patch before importing such code. byoc's and onnxruntime's own
    modules, and byoc's background compiles, always get the real class."""
    return Patch(config)
