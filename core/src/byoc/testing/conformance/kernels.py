"""The backend's kernels against onnxruntime: a representative node of each claimed op, the
op's other settings, its node wired as real models wire it, and each pattern's composite."""

from __future__ import annotations

import warnings
from typing import Any

import pytest

import byoc
from byoc.plugins import registry
from byoc.testing.conformance.checks import (
    backend_table,
    claimed_model,
    claimed_ops,
    difference,
    verdict,
    why_not,
    why_returned,
)
from byoc.testing.kit import assert_matches_onnxruntime
from byoc.testing.ops import (
    OP_CASES,
    OP_VARIANTS,
    pattern_model,
    single_op_model,
    wiring_model,
    wirings,
)

# -- single ops -------------------------------------------------------------------------------


def test_claimed_ops_match_onnxruntime(
    conformance_backend: str,
    backend_config: dict[str, Any],
    backend_tolerance: tuple[float, float],
) -> None:
    """A representative node of each claimed op type is claimed and matches onnxruntime; the
    op types whose representative node the backend refuses are reported as warnings."""
    claimed = sorted(set(claimed_ops(backend_config, conformance_backend)) & set(OP_CASES))
    if not claimed:
        pytest.skip("the backend claims none of the op types byoc.testing.ops can build")
    rtol, atol = backend_tolerance
    failures, refused = [], []
    for op_type in claimed:
        model, feeds = single_op_model(op_type)
        plan = byoc.partition(model, backend_config)
        if not plan.partitions:
            why = why_not(plan, model.graph.node[0].name, conformance_backend)
            refused.append(f"{op_type}: the representative node was refused: {why}")
            continue
        try:
            report = assert_matches_onnxruntime(model, backend_config, feeds, rtol=rtol, atol=atol)
        except Exception as exc:  # a mismatch (AssertionError) or a crash: both are failures
            failures.append(f"{op_type}: {type(exc).__name__}: {exc}")
            continue
        returned = why_returned(report.plan)
        if returned:
            failures.append(f"{op_type}: {returned}")
    for note in refused:
        warnings.warn(f"conformance, backend {conformance_backend}: {note}", stacklevel=1)
    assert len(refused) < len(claimed), "the backend refused every representative node it claims"
    assert not failures, "claimed ops that do not match onnxruntime:\n" + "\n".join(failures)


def test_claimed_ops_without_a_case(
    conformance_backend: str, backend_config: dict[str, Any]
) -> None:
    """Lists (as a skip) the claimed op types the suite has no representative node for."""
    missing = sorted(set(claimed_ops(backend_config, conformance_backend)) - set(OP_CASES))
    if missing:
        pytest.skip(f"no representative node (byoc.testing.ops.OP_CASES) for: {', '.join(missing)}")


def test_claimed_op_variants_match_onnxruntime(
    conformance_backend: str,
    backend_config: dict[str, Any],
    backend_tolerance: tuple[float, float],
) -> None:
    """Each other setting of a claimed op (``byoc.testing.ops.OP_VARIANTS``: interpolation
    modes, ties, duplicate indices under a reduction, derived pads) that the backend claims
    matches onnxruntime. The backend may refuse any of them."""
    rtol, atol = backend_tolerance
    claimed = sorted(set(claimed_ops(backend_config, conformance_backend)) & set(OP_VARIANTS))
    failures, ran = [], 0
    for op_type in claimed:
        for name, case in OP_VARIANTS[op_type].items():
            model, feeds = single_op_model(op_type, case)
            if not byoc.partition(model, backend_config).partitions:
                continue
            ran += 1
            try:
                report = assert_matches_onnxruntime(
                    model, backend_config, feeds, rtol=rtol, atol=atol
                )
            except Exception as exc:  # a mismatch (AssertionError) or a crash: both fail
                failures.append(f"{op_type} ({name}): {type(exc).__name__}: {exc}")
                continue
            returned = why_returned(report.plan)
            if returned:
                failures.append(f"{op_type} ({name}): {returned}")
    if not ran:
        pytest.skip("the backend claims none of the variants byoc.testing.ops.OP_VARIANTS has")
    assert not failures, "claimed variants that do not match onnxruntime:\n" + "\n".join(failures)


_TOGETHER = "all wirings in one model"


def test_claimed_ops_in_partitions(
    conformance_backend: str,
    backend_config: dict[str, Any],
    backend_tolerance: tuple[float, float],
    backend_known_failures: dict[tuple[str, str], str],
) -> None:
    """Each claimed op's representative node matches onnxruntime wired as real models wire it:
    an operand that is a constant, so an initializer of the partition and not one of
    ``partition.inputs``; operands that broadcast; one value as two inputs (``Add(x, x)``);
    outputs that other nodes of the partition read; several outputs of which one is used
    (``byoc.testing.ops.wirings``). An op's wirings run as one model; when it differs from
    onnxruntime, each runs alone to name the ones that fail. Wirings whose node the backend
    refuses are reported as warnings."""
    claimed = claimed_ops(backend_config, conformance_backend)
    results: dict[tuple[str, str], str | None] = {}
    refused: list[str] = []
    for op_type in sorted(set(claimed) & set(OP_CASES)):
        names = wirings(op_type, claimed)
        if not names:
            continue
        model, feeds, nodes = wiring_model(op_type, claimed)
        found = claimed_model(model, backend_config)
        if found is None:
            continue  # nothing claimed: test_claimed_ops_match_onnxruntime says why
        compiled = found[0]
        if not isinstance(compiled, str) and compiled.plan is not None:
            for node in sorted(set(nodes) & set(compiled.plan.fallback_nodes)):
                reason = why_not(compiled.plan, node, conformance_backend)
                refused.append(f"{op_type} ({nodes[node]}): refused: {reason}")
        why = difference(*found, feeds, backend_tolerance)
        if why is None:
            results.update({(op_type, wiring): None for wiring in names})
            continue
        alone: dict[tuple[str, str], str | None] = {}
        for wiring in names:
            model, feeds, _ = wiring_model(op_type, claimed, only=wiring)
            found = claimed_model(model, backend_config)
            alone[op_type, wiring] = (
                None if found is None else difference(*found, feeds, backend_tolerance)
            )
        if not any(alone.values()):  # each passes alone: they fail together
            alone[op_type, _TOGETHER] = why
        results.update(alone)
    for note in refused:
        warnings.warn(f"conformance, backend {conformance_backend}: {note}", stacklevel=1)
    verdict(results, backend_known_failures)


# -- patterns ---------------------------------------------------------------------------------


def test_patterns_match_onnxruntime(
    conformance_backend: str,
    backend_config: dict[str, Any],
    backend_tolerance: tuple[float, float],
) -> None:
    """Each pattern forms its composite on a graph built from it, and matches onnxruntime."""
    table = registry().pattern_table(
        conformance_backend, backend_table(backend_config, conformance_backend)
    )
    if not table:
        pytest.skip("the backend has no patterns")
    rtol, atol = backend_tolerance
    failures, notes = [], []
    for name, pattern, _check in table:
        try:
            model, feeds = pattern_model(pattern)
        except LookupError as exc:
            notes.append(f"{name}: not built ({exc})")
            continue
        try:
            report = byoc.compare(model, backend_config, feeds, rtol=rtol, atol=atol)
        except Exception as exc:
            failures.append(f"{name}: {type(exc).__name__}: {exc}")
            continue
        why = why_returned(report.plan)
        if why:
            failures.append(f"{name}: {why}")
            continue
        formed = {c.name for p in report.plan.partitions for c in p.composites}
        if name not in formed:
            root = model.graph.node[-1].name
            notes.append(f"{name}: not formed: {why_not(report.plan, root, conformance_backend)}")
        if not report.passed:
            failures.append(f"{name}:\n{report.table()}")
    for note in notes:
        warnings.warn(f"conformance, backend {conformance_backend}: pattern {note}", stacklevel=1)
    assert not failures, "patterns that do not match onnxruntime:\n" + "\n".join(failures)
