"""OpenVINO tried first in a child process, so that its crash costs a partition, not Python.

OpenVINO 2026.4 kills the process (a segfault) on some graphs, in ``query_model`` or in
``compile_model``: no list of such graphs can be complete. Before byoc asks OpenVINO about a
model (``query``) or compiles a partition (``runtime``), ``crash`` does the same in a worker
process (compiling, then running once on inputs of zeros): if the worker dies, the caller does
not do it in this process, and says why. The verdict is kept on disk by the model's bytes, what
was asked, the properties and OpenVINO's version (``host.cache_root()/openvino-trials``), so a
model is tried once per machine; the worker starts once per process (about 1 s) and stays,
idle, until this process ends.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import IO, Any

import onnx

from byoc_openvino import handles

OK = "ok"
TIMEOUT = 1800.0  # seconds a trial may take before it counts as a hang (not kept on disk)
_VERBS = {"compile": "compiling", "query": "querying"}
# The worker's deaths that say the model crashes OpenVINO: kept on disk. Others (killed by
# the user, out of memory) are reported and tried again next time.
_CRASHES = {signal.SIGSEGV, signal.SIGABRT, signal.SIGBUS, signal.SIGFPE, signal.SIGILL}

_lock = threading.Lock()
_worker: _Worker | None = None
_broken: str | None = None  # why the worker cannot run here: every trial fails, none starts


def crash(kind: str, model: onnx.ModelProto, props: dict[str, Any]) -> str | None:
    """None when OpenVINO survives ``kind`` ("compile" or "query") of ``model`` with
    ``props`` in a worker process; else why not to do it here, in one line."""
    data = model.SerializeToString()
    path = verdict_path(kind, data, props)
    try:
        text = path.read_text()
        return None if text == OK else text
    except OSError:
        pass
    with _lock:
        verdict, keep = _ask(kind, data, props)
    if keep:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            temp = path.with_suffix(f".{os.getpid()}.tmp")
            temp.write_text(verdict or OK)
            temp.replace(path)
        except OSError:
            pass  # a cache that cannot be written costs a trial next time
    return verdict


def root() -> Path:
    from byoc import host

    return host.cache_root() / "openvino-trials"


def verdict_path(kind: str, data: bytes, props: dict[str, Any]) -> Path:
    digest = hashlib.sha256()
    for part in (kind, handles.build_id(), json.dumps(props, sort_keys=True, default=str)):
        digest.update(part.encode() + b"\0")
    digest.update(data)
    return root() / digest.hexdigest()


def _ask(kind: str, data: bytes, props: dict[str, Any]) -> tuple[str | None, bool]:
    """(the verdict, whether it is to be kept on disk). A worker that ends by itself (not by
    a signal) could not start or serve here: that is this process's verdict from then on, so
    a model of a thousand nodes asked one by one does not start a thousand (each fails safe:
    onnxruntime runs what OpenVINO would have)."""
    global _worker, _broken
    if _broken is not None:
        return _broken, False
    if _worker is None or _worker.parent != os.getpid() or _worker.proc.poll() is not None:
        _worker = _Worker()  # a forked process starts its own: the pipes are its parent's
    worker = _worker
    header = json.dumps({"kind": kind, "props": props, "size": len(data)}).encode()
    answer: str | None = ""
    try:
        worker.send(header + b"\n" + data)
        answer = worker.receive(TIMEOUT)
    except OSError:  # it had died already
        pass
    if answer == OK:
        return None, True
    _worker = None
    code, said = worker.stop(hung=answer is None)
    what = f"OpenVINO {_VERBS[kind]} it"
    said = f": {said}" if said else ""
    if code is None:
        return f"{what} took over {TIMEOUT:.0f} s in a trial process (stopped)", False
    if code < 0:
        name = signal.Signals(-code).name
        return f"{what} crashed a trial process ({name}){said}", -code in _CRASHES
    _broken = f"the trial process ended {what} (exit code {code}){said}"
    return _broken, False


class _Worker:
    """``python -m byoc_openvino.trial`` with this process's module path, its stderr kept in a
    temporary file (the last lines go into the verdict)."""

    def __init__(self) -> None:
        self.parent = os.getpid()
        self.stderr: IO[bytes] = tempfile.TemporaryFile()  # noqa: SIM115 (closed by stop)
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "byoc_openvino.trial"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.stderr,
            env=env,
        )

    def send(self, message: bytes) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(message)
        self.proc.stdin.flush()

    def receive(self, timeout: float) -> str | None:
        """The worker's one-line answer ("" if it died); None if it took over ``timeout``."""
        assert self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        return self.proc.stdout.readline().decode().strip() if ready else None

    def stop(self, *, hung: bool) -> tuple[int | None, str]:
        """Its exit code (negative: the signal that killed it; None if it hung and was killed)
        and the end of what it wrote to stderr."""
        code = None
        if not hung:
            with contextlib.suppress(subprocess.TimeoutExpired):
                code = self.proc.wait(timeout=10)
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        with self.stderr:
            self.stderr.seek(0)
            lines = self.stderr.read().decode(errors="replace").split()
        return code, " ".join(lines)[-300:]


def _serve() -> None:
    """The worker: a JSON header line and the model's bytes in, "ok" out, until stdin ends.
    A Python exception is an answer too: the caller meets it again, and reports it. What
    OpenVINO prints goes to stderr, and Ctrl-C is the caller's to handle."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    stdout = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    stdin = sys.stdin.buffer
    while line := stdin.readline():
        request = json.loads(line)
        data = stdin.read(request["size"])
        with contextlib.suppress(Exception):
            _try(request["kind"], data, request["props"])
        stdout.write(OK.encode() + b"\n")
        stdout.flush()


def _try(kind: str, data: bytes, props: dict[str, Any]) -> None:
    import numpy as np
    import openvino

    ov_model = handles.convert(onnx.load_from_string(data))
    if kind == "query":
        handles.query(ov_model)
        return
    compiled = handles.core().compile_model(ov_model, handles.DEVICE, props)
    request = compiled.create_infer_request()
    for k, port in enumerate(compiled.inputs):  # zeros: a valid index into any axis
        shape = port.get_partial_shape().to_shape()
        value = np.zeros(tuple(shape), port.get_element_type().to_dtype())
        request.set_input_tensor(k, openvino.Tensor(value))
    request.infer()


if __name__ == "__main__":
    _serve()
