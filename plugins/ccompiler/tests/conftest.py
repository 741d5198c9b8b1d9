"""Shared fixtures: a private library cache per test session, and configs that use it."""

from __future__ import annotations

from typing import Any

import pytest


@pytest.fixture(scope="session")
def cache(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(tmp_path_factory.mktemp("ccompiler-cache"))


@pytest.fixture
def config(cache: str) -> Any:
    """``config(**table)``: a byoc config using only ccompiler, with a private cache."""

    def make(shapes: dict[str, list[int]] | None = None, **table: Any) -> dict[str, Any]:
        cfg: dict[str, Any] = {
            "backends": ["ccompiler"],
            "backend": {"ccompiler": {"cache_dir": cache, **table}},
        }
        if shapes:
            cfg["shapes"] = shapes
        return cfg

    return make
