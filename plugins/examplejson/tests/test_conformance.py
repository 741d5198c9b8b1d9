"""examplejson passes byoc's conformance suite for backend plugins."""

import pytest
from byoc.testing.conformance import *  # noqa: F403


@pytest.fixture
def backend_name() -> str:
    return "examplejson"


@pytest.fixture
def backend_known_failures() -> dict[tuple[str, str], str]:
    return {
        ("ReduceSum", "int64"): "onnxruntime's int64 ReduceSum is not exact near the limits: "
        "the sum of the edge values, exactly -12 (numpy's), comes out -1",
    }
