"""What every fuzz example runs under: the profile's settings, a time bound, and a watch on
the files it writes.

``contained(root)`` is the property every target shares beyond its own: the code under test
returns within ``HANG`` seconds (a ``SIGALRM`` interrupts Python code; a hang inside C code
is ended by faulthandler, which kills the run after ``KILL`` seconds and prints where it
hung), and it writes, renames, removes or creates nothing outside ``root`` (seen through
Python's audit hooks: every ``open`` for writing and every ``os`` call that changes a
directory, made by byoc, a plugin, numpy or onnx from Python).
"""

from __future__ import annotations

import contextlib
import faulthandler
import os
import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from hypothesis import settings

DEADLINE = 10  # seconds: Hypothesis fails an example slower than this
HANG = 30  # seconds: SIGALRM stops an example in Python code
KILL = 120  # seconds: faulthandler ends the process (a hang inside C code)


def fuzz_settings(weight: float = 1.0) -> settings:
    """The profile named by ``HYPOTHESIS_PROFILE`` (default ``ci``, see conftest.py), with
    ``weight`` times its examples: cheap targets try more inputs in the same time."""
    profile = settings.get_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
    return settings(profile, max_examples=max(1, round(profile.max_examples * weight)))


class Hang(BaseException):
    """An example ran longer than HANG seconds. Not an Exception: no ``except Exception`` in
    the code under test may turn it into a ByocError."""


_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
# audit event -> the positions of its path arguments that it changes
_CHANGES = {
    "os.mkdir": (0,),
    "os.rename": (0, 1),
    "os.replace": (0, 1),
    "os.remove": (0,),
    "os.rmdir": (0,),
    "os.symlink": (1,),
    "os.link": (1,),
    "os.truncate": (0,),
    "os.chmod": (0,),
    "shutil.rmtree": (0,),
    "shutil.copyfile": (1,),
}
_watch: Path | None = None
_seen: list[str] = []


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if _watch is None:
        return
    if event == "open":
        path, mode, flags = args
        writes = any(c in mode for c in "wax+") if isinstance(mode, str) else flags & _WRITE_FLAGS
        paths = [path] if writes else []
    else:
        paths = [args[i] for i in _CHANGES.get(event, ())]
    for path in paths:
        if isinstance(path, int) or path is None:  # a file descriptor: opened already
            continue
        full = Path(os.path.abspath(os.fsdecode(path)))
        if full != _watch and _watch not in full.parents and full != Path(os.devnull):
            _seen.append(f"{event} {full}")


sys.addaudithook(_audit)


@contextlib.contextmanager
def contained(root: Path) -> Iterator[None]:
    """Run the block with a time bound and fail if it changed any file outside ``root``."""
    global _watch

    def hang(signum: int, frame: Any) -> None:
        raise Hang(f"the example ran for more than {HANG} s")

    old = signal.signal(signal.SIGALRM, hang)
    signal.setitimer(signal.ITIMER_REAL, HANG)
    faulthandler.dump_traceback_later(KILL, exit=True)
    del _seen[:]
    _watch = Path(os.path.abspath(root))
    try:
        yield
    finally:
        _watch = None
        faulthandler.cancel_dump_traceback_later()
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    assert not _seen, f"files changed outside {root}: {_seen[:5]}"
