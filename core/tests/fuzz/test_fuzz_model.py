"""Fuzzing the model checker (``byoc.loading.load_model``, what ``partition``, ``compile`` and
``compare`` read a model with): an ONNX model changed in any way, given as a ModelProto, as
bytes or as a file, with or without ``[shapes]``, either loads as a model byoc can partition
(named nodes in topological order, every value defined once, inputs fixed as asked) or is a
``ModelError``. The caller's ModelProto is never changed. A model that loads is
then partitioned for examplejson, which may refuse it only with a ModelError or BackendError.

The inputs are small valid models (model_edits.BASES) with one to three fields changed
(model_edits.EDITS), and sometimes their serialized bytes damaged.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import byoc
import onnx
from byoc.graph import subgraph_reads
from byoc.loading import load_model
from hypothesis import event, given, note
from hypothesis import strategies as st

from .guard import contained, fuzz_settings
from .model_edits import BASES, edited_model
from .mutations import damaged_bytes


@st.composite
def models(draw: st.DrawFn) -> tuple[Any, onnx.ModelProto | None, dict[str, Any] | None]:
    """(the model as given, the ModelProto it was made from, [shapes])."""
    base = BASES[draw(st.sampled_from(sorted(BASES)))]()
    model = draw(edited_model(base)) if draw(st.integers(0, 9)) else base
    inputs = [v.name for v in model.graph.input] or ["x"]
    shapes = draw(
        st.none()
        | st.dictionaries(
            st.sampled_from([*inputs, "ghost"]),
            st.lists(st.sampled_from([1, 2, 3, 8, 2**40]), max_size=5),  # as [shapes] allows
            max_size=2,
        )
    )
    form = draw(st.sampled_from(["ModelProto", "bytes", "damaged bytes", "file"]))
    event(f"model given as {form}")
    if form == "ModelProto":
        return model, model, shapes
    data = model.SerializeToString()
    if form == "damaged bytes":
        data = draw(damaged_bytes(data))
    return (data if form != "file" else ("file", data)), None, shapes


def assert_partitionable(proto: onnx.ModelProto, shapes: dict[str, Any] | None) -> None:
    """What the passes after the loader rely on (loading.read_model's promises)."""
    g = proto.graph
    names = [n.name for n in g.node]
    assert all(names) and len(set(names)) == len(names), names
    defined = {v.name for v in g.input} | {t.name for t in g.initializer} | {""}
    for n in g.node:
        for name in [*n.input, *subgraph_reads(n)]:
            assert name in defined, f"node {n.name} reads {name!r} before it is defined"
        defined.update(n.output)
    assert all(o.name in defined for o in g.output)
    inputs = {v.name: v for v in g.input}
    for name, dims in (shapes or {}).items():
        got = [d.dim_value for d in inputs[name].type.tensor_type.shape.dim]
        assert got == list(dims), (name, got, dims)


@fuzz_settings(weight=3)
@given(case=models())
def test_a_changed_model_loads_checked_or_is_a_model_error(sandbox: Path, case):
    given_as, original, shapes = case
    before = original.SerializeToString() if original is not None else None
    if isinstance(given_as, tuple):
        path = sandbox / "case.onnx"
        path.write_bytes(given_as[1])
        given_as = str(path)
    note(f"shapes: {shapes}")
    with contained(sandbox), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            proto = load_model(given_as, shapes)
        except byoc.ModelError as exc:
            # One line but for the names it quotes, which come from the model as they are.
            event("outcome: ModelError")
            assert str(exc).strip()
            return
        finally:
            if original is not None:
                assert original.SerializeToString() == before, "the caller's model was changed"
        event("outcome: loaded")
        assert_partitionable(proto, shapes)
        try:
            byoc.partition(given_as, {"backends": ["examplejson"], "shapes": shapes or {}})
        except (byoc.ModelError, byoc.BackendError) as exc:
            event(f"outcome: loaded, partition raised {type(exc).__name__}")
            return
    event("outcome: loaded and partitioned")
