"""The suite's fixtures: the backend under test and what a plugin overrides (its config,
tolerance and known failures)."""

from __future__ import annotations

from typing import Any

import pytest

from byoc.plugins import registry


@pytest.fixture
def conformance_backend(backend_name: str) -> str:
    """``backend_name`` checked: installed (else the test fails) and available (else skips)."""
    reg = registry()
    if backend_name not in reg.backends:
        pytest.fail(
            f"backend '{backend_name}' is not installed (installed: {', '.join(reg.backends)}); "
            "is its entry point in the group 'byoc.backends'?"
        )
    reason = reg.backends[backend_name].unavailable_reason
    if reason is not None:
        pytest.skip(f"backend '{backend_name}' is unavailable: {reason}")
    return backend_name


@pytest.fixture
def backend_config(conformance_backend: str) -> dict[str, Any]:
    """The byoc config the suite uses: only this backend, keeping one-node partitions (the
    suite's graphs are small) and every partition it claims (static placement: the suite
    checks the backend's kernels, not whether they beat onnxruntime). Override to set its
    options."""
    return {
        "backends": [conformance_backend],
        "backend": {conformance_backend: {"min_partition_nodes": 1, "prune": False}},
        "compile": {"placement": "static"},
    }


@pytest.fixture
def backend_tolerance() -> tuple[float, float]:
    """(rtol, atol) for comparisons with onnxruntime. Override for looser backends."""
    return 1e-4, 1e-5


@pytest.fixture
def backend_known_failures() -> dict[tuple[str, str], str]:
    """``{(op type or pattern name, case): why}``: cases the backend is known to get wrong,
    expected to fail (strict xfail). A case is a key of ``SPECIAL_VALUES``, a dtype of
    ``INTEGER_DTYPES`` (its limits), ``"<dtype> / 0"``, a wiring of ``byoc.testing.ops.wirings``
    (``"input 1 constant"``, ...), or one of the refused nodes of
    ``test_nodes_onnxruntime_refuses_are_not_claimed`` (as its failure message names it)."""
    return {}
