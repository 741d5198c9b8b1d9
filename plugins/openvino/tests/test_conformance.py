"""openvino passes byoc's conformance suite for backend plugins."""

import pytest
from byoc.testing.conformance import *  # noqa: F403


@pytest.fixture
def backend_name() -> str:
    return "openvino"


@pytest.fixture
def backend_known_failures(openvino_known_failures: dict[tuple[str, str], str]) -> dict:
    return openvino_known_failures  # conftest.py: what OpenVINO gets wrong, and why
