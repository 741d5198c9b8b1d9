"""A compile resolves its config and plugins once, into a frozen Context the stages share."""

from __future__ import annotations

import dataclasses

import byoc
import numpy as np
import pytest
from byoc import context
from byoc.testing.build import make_model, node


def model():
    return make_model([node("Relu", ["x"], ["r"]), node("Neg", ["r"], ["y"])], {"x": [2, 3]}, ["y"])


def test_a_compile_resolves_the_backends_once(monkeypatch):
    calls = []
    real = context.resolve_backends

    def counted(cfg, reg):
        calls.append(cfg)
        return real(cfg, reg)

    monkeypatch.setattr(context, "resolve_backends", counted)
    config = {"backends": ["ccompiler"], "compile": {"placement": "static"}}
    compiled = byoc.compile(model(), config)
    assert len(calls) == 1
    x = np.arange(-3, 3, dtype=np.float32).reshape(2, 3)
    np.testing.assert_array_equal(compiled.run({"x": x})["y"], -np.maximum(x, 0))


def test_a_context_is_frozen_and_passed_through():
    ctx = context.resolve({"backends": ["ccompiler"]})
    assert context.resolve(ctx) is ctx
    assert [a.name for a in ctx.active] == ["ccompiler"]
    with pytest.raises(dataclasses.FrozenInstanceError):
        ctx.config = None  # type: ignore[misc]
    plan = byoc.partition(model(), ctx)
    assert [p.backend for p in plan.partitions] == ["ccompiler"]
    assert plan.config is ctx.config and not hasattr(plan, "registry")  # data, not plugins
    assert [a.name for a in ctx.alone("examplejson").active] == ["examplejson"]
