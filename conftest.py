"""Shared by every test directory of the repository."""

import pytest
from byoc import config


@pytest.fixture(autouse=True, scope="session")
def static_placement_by_default():
    """Tests check what backends compute, so by default every claimed partition runs on its
    backend: with measured placement (byoc's default) which units run where would depend on
    how busy the machine is. Tests of placement ask for it in their config."""
    kind, _, help_text, *allowed = config.COMPILE_KEYS["placement"]
    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(config.COMPILE_KEYS, "placement", (kind, "static", help_text, *allowed))
        yield
