"""The fuzz targets' Hypothesis profiles, and the sandbox every example runs in.

Two profiles, picked by ``HYPOTHESIS_PROFILE``:

- ``ci`` (the default, what ``make test`` runs): 200 examples times each target's weight (a
  cheap target tries more), derandomized so that every run tries the same inputs, no example
  database; half a minute in all.
- ``fuzz`` (``make fuzz``): 7 500 fresh examples times each target's weight, about ten minutes
  in all; a failing example is saved in ``.hypothesis/`` and tried first by the next run.

The profiles are registered here and applied by ``guard.fuzz_settings`` to the fuzz targets
only: the other Hypothesis tests of the repository keep their own settings.
"""

from __future__ import annotations

import os
import tempfile
from datetime import timedelta

import onnxruntime
import pytest
from byoc.plugins import registry
from hypothesis import HealthCheck, settings

from . import guard

_COMMON = {
    # An example that takes this long is a hang to fix (guard.contained stops it at HANG).
    "deadline": timedelta(seconds=guard.DEADLINE),
    "suppress_health_check": [HealthCheck.too_slow, HealthCheck.data_too_large],
    "print_blob": True,
}
settings.register_profile("ci", max_examples=200, derandomize=True, database=None, **_COMMON)
settings.register_profile("fuzz", max_examples=7_500, **_COMMON)


@pytest.fixture(scope="module", autouse=True)
def sandbox(tmp_path_factory: pytest.TempPathFactory):
    """byoc's cache (``XDG_CACHE_HOME``), the temp dir and the working dir of a module's
    examples: all inside one fresh directory, which ``guard.contained`` lets them write to."""
    for backend in registry().backends.values():
        # Checked once a process, with byoc's own cache: a check may build a native shim,
        # which in the sandbox's empty cache would cost each module half a minute.
        backend.unavailable_reason  # noqa: B018
    root = tmp_path_factory.mktemp("fuzz")
    for sub in ("cache", "tmp", "work"):
        (root / sub).mkdir()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("XDG_CACHE_HOME", str(root / "cache"))
        mp.setenv("TMPDIR", str(root / "tmp"))
        mp.setattr(tempfile, "tempdir", str(root / "tmp"))
        mp.chdir(root / "work")
        onnxruntime.set_default_logger_severity(3)  # the models are broken: no warnings
        try:
            yield root
        finally:
            onnxruntime.set_default_logger_severity(2)
    assert os.listdir(root / "work") == [], "a fuzz example wrote into the working directory"
