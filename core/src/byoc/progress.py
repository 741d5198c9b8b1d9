"""Compile progress on a terminal: one line, ``compiling [####......] 12/56 dnnl_3``.

``byoc.compile(..., progress=fn)`` calls ``fn(index, total, unit_name)`` before it compiles
each unit of the schedule (``index`` counts from 1). ``TerminalProgress`` is such a callable
that draws a plain-text bar on a terminal and stays silent when the stream is not one.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any, TextIO

ProgressFn = Callable[[int, int, str], None]


class TerminalProgress:
    """A progress callable for ``byoc.compile`` that rewrites one line with ``\\r``.

    Use it as a context manager, which erases the line at the end. It draws at most every
    ``interval`` seconds; when ``stream`` is not a terminal it writes one plain line, once a
    compile has taken ``note_after`` seconds (a log then shows why nothing else came);
    ``enabled`` false: nothing at all. ``label`` starts the line (``byoc batch`` counts
    samples: "running").
    """

    def __init__(
        self,
        stream: TextIO | None = None,
        enabled: bool = True,
        width: int = 20,
        interval: float = 0.05,
        label: str = "compiling",
    ) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.label = label
        self.quiet_ok = enabled  # --quiet: nothing at all
        self.enabled = enabled and _isatty(self.stream)
        self.note_after = 5.0  # seconds before a non-terminal gets its one line
        self._start = 0.0
        self._noted = False
        self.width = width
        self.interval = interval
        self._last = 0.0
        self._drawn = 0

    def __call__(self, index: int, total: int, name: str) -> None:
        now = time.monotonic()
        if not self.enabled:  # not a terminal: one plain line, once a compile takes a while
            self._start = self._start or now
            if self.quiet_ok and not self._noted and now - self._start > self.note_after:
                self.stream.write(f"byoc: still {self.label}: {name} ({index} of {total})\n")
                self._noted = True
            return
        if index not in (1, total) and now - self._last < self.interval:
            return
        self._last = now
        filled = self.width * (index - 1) // max(total, 1)
        bar = "#" * filled + "." * (self.width - filled)
        self._draw(f"{self.label} [{bar}] {name} ({index} of {total})")

    def _draw(self, text: str) -> None:
        pad = max(self._drawn - len(text), 0)
        self.stream.write("\r" + text + " " * pad)
        self.stream.flush()
        self._drawn = len(text)

    def close(self) -> None:
        """Erase the line, so what follows starts on a clean one."""
        if self.enabled and self._drawn:
            self.stream.write("\r" + " " * self._drawn + "\r")
            self.stream.flush()
            self._drawn = 0

    def __enter__(self) -> TerminalProgress:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _isatty(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False
