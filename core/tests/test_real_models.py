"""Real models from the package index (cached): P1 and P4 compare green with examplejson
claiming everything it supports."""

from __future__ import annotations

import byoc
import numpy as np
import pytest
from byoc import graph
from byoc.testing import assert_matches_onnxruntime
from byoc.testing.models import MODELS

ALL = {"backends": ["examplejson"]}


def test_p1_classifier(real_model):
    config = {**ALL, "shapes": MODELS["P1"].shapes}
    report = assert_matches_onnxruntime(real_model("P1"), config)
    plan = report.plan
    assert len(plan.partitions) > 10
    claimed = {n.op_type for n in plan.model.graph.node if n.name not in set(plan.fallback_nodes)}
    assert {"Relu", "HardSigmoid", "MatMul", "Softmax", "GlobalAveragePool"} <= claimed


def test_p4_silero_vad_control_flow(real_model):
    config = {**ALL, "shapes": MODELS["P4"].shapes}
    rng = np.random.default_rng(0)
    state = np.zeros((2, 1, 128), np.float32)
    for _ in range(2):  # run twice, feeding the state back, as a VAD stream does
        inputs = {
            "input": rng.standard_normal((1, 512)).astype(np.float32) * 0.1,
            "state": state,
            "sr": np.array(16000, np.int64),
        }
        report = assert_matches_onnxruntime(real_model("P4"), config, inputs)
        state = byoc.compile(real_model("P4"), config).run(inputs)["stateN"]
    plan = report.plan
    assert any(n.op_type == "If" for n in plan.model.graph.node if n.name in plan.fallback_nodes)
    assert plan.partitions


def test_p4_compare_from_the_command_line_with_fixed_inputs(real_model, tmp_path):
    """The sample rate must be 16000: [compare] inputs fixes it, the rest stays random."""
    import subprocess
    import sys

    cfg = tmp_path / "byoc.toml"
    cfg.write_text(
        'backends = ["examplejson"]\n[shapes]\ninput = [1, 512]\n'
        "state = [2, 1, 128]\n[compare]\ninputs = { sr = 16000 }\n"
    )
    done = subprocess.run(
        [sys.executable, "-m", "byoc.cli", "compare", str(real_model("P4")), "-c", str(cfg)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "PASS" in done.stdout


@pytest.mark.parametrize("model_id", ["P1", "P2", "P3", "P5"])
def test_a_model_partitioned_again_from_its_plan_is_partitioned_as_from_the_file(
    real_model, model_id, monkeypatch
):
    """Measured placement partitions the plan again after each verdict, reusing its analysis of
    the model, whose large cached values it dropped (here: every one): with the same vetoes,
    every partition must be what partitioning the file gives, byte for byte (a folded weight
    computed again as it was not folded failed only there)."""
    monkeypatch.setattr(graph, "DROPPED_BYTES", 0)
    config = {"shapes": MODELS[model_id].shapes}
    plan = byoc.partition(real_model(model_id), config)
    claimed = [n for p in plan.partitions if p.backend != "onnxruntime" for n in p.nodes]
    vetoes = {n: dict.fromkeys(byoc.registry().backends, "test") for n in claimed[::3]}
    again = byoc.partition(plan, config, vetoes=vetoes)
    fresh = byoc.partition(real_model(model_id), config, vetoes=vetoes)
    assert again.graph is plan.graph and again.to_json() == fresh.to_json()
    for mine, theirs in zip(again.partitions, fresh.partitions, strict=True):
        assert mine.model.SerializeToString() == theirs.model.SerializeToString(), mine.name
