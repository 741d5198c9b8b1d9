"""ccompiler passes byoc's conformance suite for backend plugins."""

from typing import Any

import pytest
from byoc.testing.conformance import *  # noqa: F403


@pytest.fixture
def backend_name() -> str:
    return "ccompiler"


@pytest.fixture
def backend_config() -> dict[str, Any]:
    """The suite's config, with the ops onnxruntime fuses (HardSwish, Mish...) claimed too, so
    that every kernel is checked (test_codegen checks that they stay on onnxruntime)."""
    table = {"min_partition_nodes": 1, "prune": False, "keep_onnxruntime_fusions": False}
    return {
        "backends": ["ccompiler"],
        "backend": {"ccompiler": table},
        "compile": {"placement": "static"},
    }
