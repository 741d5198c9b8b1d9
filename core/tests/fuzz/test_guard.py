"""The guard every fuzz example runs under catches what it is there to catch."""

from __future__ import annotations

import os
import time

import pytest

from . import guard


def test_a_file_changed_outside_the_sandbox_fails_the_example(sandbox, tmp_path_factory):
    outside = tmp_path_factory.mktemp("outside")
    changes = [
        lambda: (outside / "a").write_text("x"),
        lambda: os.mkdir(outside / "d"),
        lambda: os.close(os.open(outside / "b", os.O_WRONLY | os.O_CREAT)),
        lambda: os.replace(sandbox / "tmp" / "c", outside / "c"),
    ]
    (sandbox / "tmp" / "c").write_text("x")
    for change in changes:
        with pytest.raises(AssertionError, match="files changed outside"), guard.contained(sandbox):
            change()
    with guard.contained(sandbox):  # reading anywhere, writing inside: fine
        (outside / "a").read_text()
        (sandbox / "tmp" / "d").write_text("x")


def test_an_example_that_hangs_is_stopped(sandbox, monkeypatch):
    monkeypatch.setattr(guard, "HANG", 0.2)
    start = time.monotonic()
    with pytest.raises(guard.Hang), guard.contained(sandbox):
        time.sleep(10)
    assert time.monotonic() - start < 5
