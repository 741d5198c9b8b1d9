"""Real models (downloaded once with a pinned sha256): ccompiler claims their elementwise ops and
the results match onnxruntime."""

from __future__ import annotations

import byoc
import pytest
from byoc.testing.models import MODELS


@pytest.mark.realmodel
@pytest.mark.parametrize("model_id", ["P1", "P2", "P3"])
def test_real_model_matches_onnxruntime(model_id, real_model, config):
    cfg = config(shapes=MODELS[model_id].shapes)
    report = byoc.compare(real_model(model_id), cfg)
    assert report.passed, report.table()
    if model_id == "P1":  # small tensors: every partition is too small to pay for its boundary
        pruned = [
            r
            for d in report.plan.decisions.values()
            for b, r in d.refusals
            if b == "ccompiler" and r.startswith("pruned")
        ]
        assert pruned, "ccompiler claimed nothing"
    else:
        assert report.plan.partitions, "ccompiler claimed nothing"
