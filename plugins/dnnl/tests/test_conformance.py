"""dnnl passes byoc's conformance suite for backend plugins."""

import pytest
from byoc.testing.conformance import *  # noqa: F403


@pytest.fixture
def backend_name() -> str:
    return "dnnl"


@pytest.fixture
def backend_known_failures(dnnl_known_failures: dict[tuple[str, str], str]) -> dict:
    return dnnl_known_failures  # conftest.py: what oneDNN gets wrong, and why
