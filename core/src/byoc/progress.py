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

    Use it as a context manager, which erases the line at the end. It draws nothing when
    ``stream`` is not a terminal or ``enabled`` is false, and at most every ``interval``
    seconds otherwise. ``label`` starts the line (``byoc batch`` counts samples: "running").
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
        self.enabled = enabled and _isatty(self.stream)
        self.width = width
        self.interval = interval
        self._last = 0.0
        self._drawn = 0

    def __call__(self, index: int, total: int, name: str) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if index not in (1, total) and now - self._last < self.interval:
            return
        self._last = now
        filled = self.width * (index - 1) // max(total, 1)
        bar = "#" * filled + "." * (self.width - filled)
        self._draw(f"{self.label} [{bar}] {index}/{total} {name}")

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
