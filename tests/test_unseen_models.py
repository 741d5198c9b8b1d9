"""Conv nets byoc was never tuned on (the onnx wheel's light models, given random weights)
compare green with each backend claiming what it supports."""

from __future__ import annotations

import byoc
import pytest
from byoc.testing import assert_matches_onnxruntime
from byoc.testing.models import light_models, with_random_weights

MODELS = {p.stem: p for p in light_models()}
PICKED = ["light_resnet50", "light_densenet121", "light_inception_v1", "light_squeezenet"]


@pytest.mark.parametrize("backend", ["examplejson", "ccompiler", "dnnl"])
@pytest.mark.parametrize("name", PICKED)
def test_light_model_with_random_weights(name, backend):
    if backend not in byoc.plugins.registry().backends:
        pytest.fail(f"backend {backend} is not installed")
    model = with_random_weights(MODELS[name])
    assert_matches_onnxruntime(model, {"backends": [backend]})


def test_dnnl_claims_most_of_a_resnet():
    plan = byoc.partition(with_random_weights(MODELS["light_resnet50"]), {"backends": ["dnnl"]})
    assert len(plan.partitions) == 1
    assert plan.fallback_nodes == []
    assert any(c.name.startswith("dnnl.conv2d") for c in plan.partitions[0].composites)
