"""ccompiler passes byoc's conformance suite for backend plugins."""

import pytest
from byoc.testing.conformance import *  # noqa: F403


@pytest.fixture
def backend_name() -> str:
    return "ccompiler"
