"""Shared by every test directory of the repository."""

import dataclasses

import pytest
from byoc import config, host


@pytest.fixture(autouse=True, scope="session")
def static_placement_by_default():
    """Tests check what backends compute, so by default every claimed partition runs on its
    backend: with measured placement (byoc's default) which units run where would depend on
    how busy the machine is. Tests of placement ask for it in their config."""
    static = dataclasses.replace(config.COMPILE_KEYS["placement"], default="static")
    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(config.COMPILE_KEYS, "placement", static)
        yield


@pytest.fixture(autouse=True)
def quiet_machine(request, monkeypatch):
    """Timings in tests count as undisturbed: with the real meter, a test that times a partition
    would find it returned to onnxruntime, or its explain text changed, whenever another process
    on the machine is busy (a pip install, another test run). Tests of the disturbance check
    decree the meter's readings (core/tests/test_placement.py's ``fake_clock``); tests of the
    meter itself ask for ``cpu_meter``."""
    if "cpu_meter" not in request.fixturenames:
        monkeypatch.setattr(host, "others_since", lambda mark, window=0.25: 0.0)


@pytest.fixture
def cpu_meter():
    """``host.others_since`` as it is: what other processes really took of the CPUs."""
