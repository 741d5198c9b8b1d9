"""The conformance suite every byoc backend plugin runs in its own tests.

In your plugin's ``tests/test_conformance.py``::

    import pytest
    from byoc.testing.conformance import *  # noqa: F403  (the suite's tests and fixtures)

    @pytest.fixture
    def backend_name() -> str:
        return "mybackend"

Override ``backend_config`` (the byoc config, a dict) or ``backend_tolerance`` (rtol, atol) the
same way when your backend needs options or looser comparisons, and ``backend_known_failures``
to list the special-value cases your backend is known to get wrong: the tests holding them
report them as an expected failure (xfail) with your reasons, and fail once one of them passes.
The suite checks that:

- every op type the backend claims, for which ``byoc.testing.ops.OP_CASES`` has a representative
  node, compiles and matches onnxruntime (one test over the claimed ops: nothing is generated,
  or skipped, for ops the backend does not claim; ops without a case are listed in a skip, and
  representative nodes the backend refuses in warnings);
- so do the other settings of those ops it claims (``byoc.testing.ops.OP_VARIANTS``:
  interpolation modes, ties, duplicate indices under a reduction, pads derived from an
  output shape), any of which it may refuse;
- each of those nodes also matches onnxruntime where real models put it: an operand that is a
  constant (an initializer of the partition, not one of ``partition.inputs``), operands that
  broadcast, one value as two inputs (``Add(x, x)``), outputs that other nodes of the
  partition read, a node with several outputs of which one is used (``byoc.testing.ops.
  wirings``);
- every pattern of its pattern table forms its composite on a graph built from the pattern,
  compiles and matches onnxruntime (patterns that cannot be built are reported as warnings);
- those claimed ops and patterns match onnxruntime on special values too (NaN, +inf, -inf,
  -0.0 and subnormals, ``byoc.testing.ops.SPECIAL_VALUES``; NaN equals NaN, and -0.0 equals
  0.0 as in IEEE) — a ``finite_only`` backend's known failures there must vanish under the
  default ``[fallback] nonfinite_inputs``, which runs such inputs on onnxruntime — and their
  int32 and int64 forms on the dtypes' limits, exactly; an integer
  division by zero fails, as in onnxruntime, with a ``byoc.BackendError``;
- a backend that declares ``softmax_masks`` runs attention whose mask holds -inf (padding,
  causal, rows masked entirely) itself and matches onnxruntime, while a mask holding NaN or +inf
  still runs on onnxruntime;
- nodes onnxruntime refuses (inputs of mixed types, an unreleased opset, a wrongly declared
  output type) are not claimed;
- artifacts survive serialize -> deserialize and run the same, and damaged bytes raise
  ``byoc.ArtifactError``;
- an op it does not claim falls back to onnxruntime, values flowing between the two;
- ``run`` gives the same results from many threads at once;
- the backend is listed by ``byoc backends --json`` with the ops it claims.

``byoc.compile`` gives a partition that raises on its measurement inputs back to onnxruntime
(fail safe); in the suite that is a failure, so a crashing kernel cannot pass for a match.
"""

from __future__ import annotations

import json
import subprocess
import sys
import warnings
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper

import byoc
from byoc.context import resolve_backends
from byoc.errors import ArtifactError
from byoc.plugins import registry
from byoc.testing.build import IR_VERSION, make_model, node
from byoc.testing.kit import assert_matches_onnxruntime
from byoc.testing.ops import (
    DIVISORS,
    INTEGER_DTYPES,
    OP_CASES,
    OP_VARIANTS,
    SPECIAL_VALUES,
    edge_feeds,
    integer_case,
    pattern_model,
    single_op_model,
    special_feeds,
    wiring_model,
    wirings,
)
from byoc.units import create_runtime

__all__ = [
    "backend_config",
    "backend_known_failures",
    "backend_tolerance",
    "conformance_backend",
    "test_backend_is_listed",
    "test_claimed_op_variants_match_onnxruntime",
    "test_claimed_ops_in_partitions",
    "test_claimed_ops_match_onnxruntime",
    "test_claimed_ops_on_integer_edges",
    "test_claimed_ops_on_special_values",
    "test_claimed_ops_without_a_case",
    "test_damaged_artifacts_are_refused",
    "test_nodes_onnxruntime_refuses_are_not_claimed",
    "test_patterns_match_onnxruntime",
    "test_run_is_thread_safe",
    "test_serialize_deserialize_runs_the_same",
    "test_softmax_masks_may_hold_minus_inf",
    "test_unclaimed_op_falls_back_to_onnxruntime",
]

_UNARY = ["Sin", "Cos", "Softsign", "Neg", "Abs", "Exp", "Tanh", "Sigmoid", "Relu", "Identity"]


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


def _table(config: Mapping[str, Any], backend: str) -> dict[str, Any]:
    active, _ = resolve_backends(byoc.load_config(config), registry())
    return next(a.table for a in active if a.name == backend)


def _claimed(config: Mapping[str, Any], backend: str) -> dict[str, Any]:
    return registry().supported_ops(backend, _table(config, backend))


def _why_not(plan: byoc.Plan, node: str, backend: str) -> str:
    reasons = [r for b, r in plan.decisions[node].refusals if b in (backend, "*")]
    return "; ".join(reasons) or "no reason given"


# -- single ops -------------------------------------------------------------------------------


def test_claimed_ops_match_onnxruntime(
    conformance_backend: str,
    backend_config: dict[str, Any],
    backend_tolerance: tuple[float, float],
) -> None:
    """A representative node of each claimed op type is claimed and matches onnxruntime; the
    op types whose representative node the backend refuses are reported as warnings."""
    claimed = sorted(set(_claimed(backend_config, conformance_backend)) & set(OP_CASES))
    if not claimed:
        pytest.skip("the backend claims none of the op types byoc.testing.ops can build")
    rtol, atol = backend_tolerance
    failures, refused = [], []
    for op_type in claimed:
        model, feeds = single_op_model(op_type)
        plan = byoc.partition(model, backend_config)
        if not plan.partitions:
            why = _why_not(plan, model.graph.node[0].name, conformance_backend)
            refused.append(f"{op_type}: the representative node was refused: {why}")
            continue
        try:
            report = assert_matches_onnxruntime(model, backend_config, feeds, rtol=rtol, atol=atol)
        except Exception as exc:  # a mismatch (AssertionError) or a crash: both are failures
            failures.append(f"{op_type}: {type(exc).__name__}: {exc}")
            continue
        returned = _returned(report.plan)
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
    missing = sorted(set(_claimed(backend_config, conformance_backend)) - set(OP_CASES))
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
    claimed = sorted(set(_claimed(backend_config, conformance_backend)) & set(OP_VARIANTS))
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
            returned = _returned(report.plan)
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
    claimed = _claimed(backend_config, conformance_backend)
    results: dict[tuple[str, str], str | None] = {}
    refused: list[str] = []
    for op_type in sorted(set(claimed) & set(OP_CASES)):
        names = wirings(op_type, claimed)
        if not names:
            continue
        model, feeds, nodes = wiring_model(op_type, claimed)
        found = _claimed_model(model, backend_config)
        if found is None:
            continue  # nothing claimed: test_claimed_ops_match_onnxruntime says why
        compiled = found[0]
        if not isinstance(compiled, str) and compiled.plan is not None:
            for node in sorted(set(nodes) & set(compiled.plan.fallback_nodes)):
                reason = _why_not(compiled.plan, node, conformance_backend)
                refused.append(f"{op_type} ({nodes[node]}): refused: {reason}")
        why = _difference(*found, feeds, backend_tolerance)
        if why is None:
            results.update({(op_type, wiring): None for wiring in names})
            continue
        alone: dict[tuple[str, str], str | None] = {}
        for wiring in names:
            model, feeds, _ = wiring_model(op_type, claimed, only=wiring)
            found = _claimed_model(model, backend_config)
            alone[op_type, wiring] = (
                None if found is None else _difference(*found, feeds, backend_tolerance)
            )
        if not any(alone.values()):  # each passes alone: they fail together
            alone[op_type, _TOGETHER] = why
        results.update(alone)
    for note in refused:
        warnings.warn(f"conformance, backend {conformance_backend}: {note}", stacklevel=1)
    _verdict(results, backend_known_failures)


# -- patterns ---------------------------------------------------------------------------------


def test_patterns_match_onnxruntime(
    conformance_backend: str,
    backend_config: dict[str, Any],
    backend_tolerance: tuple[float, float],
) -> None:
    """Each pattern forms its composite on a graph built from it, and matches onnxruntime."""
    table = registry().pattern_table(
        conformance_backend, _table(backend_config, conformance_backend)
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
        why = _returned(report.plan)
        if why:
            failures.append(f"{name}: {why}")
            continue
        formed = {c.name for p in report.plan.partitions for c in p.composites}
        if name not in formed:
            root = model.graph.node[-1].name
            notes.append(f"{name}: not formed: {_why_not(report.plan, root, conformance_backend)}")
        if not report.passed:
            failures.append(f"{name}:\n{report.table()}")
    for note in notes:
        warnings.warn(f"conformance, backend {conformance_backend}: pattern {note}", stacklevel=1)
    assert not failures, "patterns that do not match onnxruntime:\n" + "\n".join(failures)


# -- special values ---------------------------------------------------------------------------


def _mismatch(got: np.ndarray, want: np.ndarray, rtol: float, atol: float) -> str | None:
    """Why ``got`` is not onnxruntime's ``want``, or None: floats within tolerance (NaN equals
    NaN, inf equals inf), everything else exactly."""
    if got.dtype != want.dtype or got.shape != want.shape:
        return f"got {got.dtype}{list(got.shape)}, onnxruntime {want.dtype}{list(want.shape)}"
    if want.dtype.kind == "f":
        close = np.isclose(got, want, rtol, atol, equal_nan=True)
    else:
        close = got == want
    if close.all():
        return None
    shown = ", ".join(f"{got[i]} for {want[i]}" for i in map(tuple, np.argwhere(~close)[:3]))
    return f"{np.count_nonzero(~close)} of {close.size} values differ ({shown}, ...)"


def _difference(
    compiled: byoc.CompiledModel | str,
    reference: Any,
    inputs: dict[str, np.ndarray],
    tolerance: tuple[float, float],
) -> str | None:
    """Why byoc's results on ``inputs`` are not onnxruntime's, or None. Where onnxruntime
    fails, byoc must fail too, with a ``byoc.BackendError``. ``compiled`` is a str when
    compiling failed: why."""
    if isinstance(compiled, str):
        return compiled
    try:
        want = reference.run(compiled.outputs, inputs)
    except Exception as exc:
        try:
            compiled.run(inputs)
        except byoc.BackendError:
            return None
        except Exception as ours:
            return f"raised {type(ours).__name__}, not a byoc.BackendError: {ours}"
        return f"returned values where onnxruntime fails ({str(exc)[:120]})"
    try:
        got = compiled.run(inputs)
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    for name, value in zip(compiled.outputs, want, strict=True):
        why = _mismatch(np.asarray(got[name]), np.asarray(value), *tolerance)
        if why:
            return f"output {name}: {why}"
    return None


def _claimed_model(
    model: onnx.ModelProto, config: dict[str, Any]
) -> tuple[byoc.CompiledModel | str, ort.InferenceSession] | None:
    """The model compiled (or why compiling failed) and its onnxruntime reference, or None
    when the backend claims nothing of it or onnxruntime cannot run it (an integer kernel it
    lacks)."""
    if not byoc.partition(model, config).partitions:
        return None
    try:
        reference = ort.InferenceSession(
            model.SerializeToString(), providers=["CPUExecutionProvider"]
        )
    except Exception:
        return None
    try:
        compiled = byoc.compile(model, config)
    except Exception as exc:
        return f"compiling failed: {type(exc).__name__}: {exc}", reference
    return _returned(compiled.plan) or compiled, reference


def _returned(plan: byoc.Plan | None) -> str | None:
    """Why ``byoc.compile`` gave a backend partition back to onnxruntime, or None. It runs
    each partition once and returns one that raises (fail safe), which would hide a broken
    kernel from the suite: here that is a failure."""
    placement = plan.placement if plan is not None else None
    for m in placement.measurements if placement is not None else []:
        if m.failure is not None:
            return f"byoc.compile returned {m.partition} to onnxruntime: {m.failure}"
    return None


def _verdict(
    results: dict[tuple[str, str], str | None], known: Mapping[tuple[str, str], str]
) -> None:
    """Fail on unexpected mismatches and on known failures that now pass; xfail on the rest."""
    unexpected = [
        f"{k[0]} on {k[1]}: {why}" for k, why in results.items() if why and k not in known
    ]
    fixed = [f"{k[0]} on {k[1]}" for k in known if k in results and results[k] is None]
    assert not unexpected, "cases that do not match onnxruntime:\n" + "\n".join(unexpected)
    assert not fixed, "known failures that pass now (strict): " + ", ".join(fixed)
    failing: dict[str, list[str]] = {}  # why -> the cases
    for key, why in known.items():
        if results.get(key):
            failing.setdefault(why, []).append(f"{key[0]} on {key[1]}")
    if failing:
        pytest.xfail("; ".join(f"{', '.join(cases)}: {why}" for why, cases in failing.items()))


def test_claimed_ops_on_special_values(
    conformance_backend: str,
    backend_config: dict[str, Any],
    backend_tolerance: tuple[float, float],
    backend_known_failures: dict[tuple[str, str], str],
) -> None:
    """Each claimed op's representative node, and each pattern's graph, matches onnxruntime
    with NaN, +inf, -inf, -0.0 and subnormals in its float inputs: run by the backend itself
    (known failures allowed) and, for a ``finite_only`` backend, as users run it by default
    (partitions whose inputs hold NaN or +-inf run on onnxruntime: no failure allowed)."""
    examples = [
        (op_type, single_op_model(op_type))
        for op_type in sorted(set(_claimed(backend_config, conformance_backend)) & set(OP_CASES))
    ]
    table = registry().pattern_table(
        conformance_backend, _table(backend_config, conformance_backend)
    )
    for name, pattern, _check in table:
        try:
            examples.append((name, pattern_model(pattern)))
        except LookupError:
            continue  # test_patterns_match_onnxruntime warns about it
    raw = {**backend_config}
    raw["fallback"] = {**raw.get("fallback", {}), "nonfinite_inputs": "backend"}
    guarded = registry().backends[conformance_backend].finite_only
    results: dict[tuple[str, str], str | None] = {}
    unguarded: list[str] = []
    for name, (model, feeds) in examples:
        if not any(v.dtype.kind == "f" for v in feeds.values()):
            continue
        found = _claimed_model(model, raw)
        if found is None:
            continue
        for value in SPECIAL_VALUES:
            results[name, value] = _difference(
                *found, special_feeds(feeds, value), backend_tolerance
            )
        if guarded and any(results[name, v] for v in SPECIAL_VALUES):
            found = _claimed_model(model, backend_config)
            assert found is not None
            for value in SPECIAL_VALUES:
                why = _difference(*found, special_feeds(feeds, value), backend_tolerance)
                unguarded += [f"{name} on {value}: {why}"] if why else []
    assert not unguarded, "finite_only, yet by default:\n" + "\n".join(unguarded)
    _verdict(results, backend_known_failures)


def _masked_attention(mask: list[int]) -> onnx.ModelProto:
    """``softmax(q @ k' / 4 + mask) @ v`` of x [1, 8, 16]; a mask of shape [1, 8] (keys) is
    unsqueezed to [1, 1, 8] first."""
    rng = np.random.default_rng(0)
    consts = {f"w{n}": rng.standard_normal((16, 16)).astype(np.float32) for n in "qkv"}
    consts |= {"four": np.array(4.0, np.float32), "axis": np.array([1], np.int64)}
    nodes = [node("MatMul", ["x", f"w{n}"], n) for n in "qkv"]
    if len(mask) == 2:
        nodes += [node("Unsqueeze", ["keys", "axis"], "mask")]
    nodes += [
        node("Transpose", ["k"], "kt", perm=[0, 2, 1]),
        node("MatMul", ["q", "kt"], "s"),
        node("Div", ["s", "four"], "s4"),
        node("Add", ["s4", "mask"], "sm"),
        node("Softmax", ["sm"], "p", axis=-1),
        node("MatMul", ["p", "v"], "y"),
    ]
    name = "keys" if len(mask) == 2 else "mask"
    return make_model(nodes, {"x": [1, 8, 16], name: mask}, ["y"], consts)


def test_softmax_masks_may_hold_minus_inf(
    conformance_backend: str,
    backend_config: dict[str, Any],
    backend_tolerance: tuple[float, float],
) -> None:
    """A ``softmax_masks`` backend, as users run it by default: attention whose mask of 0 and
    -inf (padding, causal, a row or every row masked entirely: NaN there) the Add into the
    Softmax reads runs on the backend, not on onnxruntime, and matches onnxruntime; a mask
    holding NaN or +inf runs on onnxruntime and matches it too."""
    if not registry().backends[conformance_backend].softmax_masks:
        pytest.skip("the backend does not declare softmax_masks")
    if not {"MatMul", "Add", "Softmax"} <= set(_claimed(backend_config, conformance_backend)):
        pytest.skip("the backend claims no MatMul, Add or Softmax: no attention to check")
    x = np.random.default_rng(1).standard_normal((1, 8, 16)).astype(np.float32)
    padded = np.zeros((1, 8), np.float32)
    padded[:, 5:] = -np.inf
    causal = np.triu(np.full((1, 8, 8), -np.inf, np.float32), 1)
    row = causal.copy()
    row[0, 2] = -np.inf
    cases: dict[tuple[int, ...], dict[str, np.ndarray]] = {
        (1, 8): {"padded": padded, "all masked": np.full((1, 8), -np.inf, np.float32)},
        (1, 8, 8): {"causal": causal, "causal, row 2 masked": row},
    }
    failures = []
    for shape, masks in cases.items():
        model = _masked_attention(list(shape))
        found = _claimed_model(model, backend_config)
        assert found is not None, "the backend claims none of the attention"
        compiled, reference = found
        assert not isinstance(compiled, str), compiled
        name = model.graph.input[1].name
        (step,) = [s for s in compiled.steps if s.unit.backend == conformance_backend]
        assert "sm" in step.unit.nodes, compiled.plan and compiled.plan.table()
        for case, mask in masks.items():
            why = _difference(compiled, reference, {"x": x, name: mask}, backend_tolerance)
            failures += [f"mask {list(shape)} {case}: {why}"] if why else []
        assert step._fallback is None, "a mask of 0 and -inf ran on onnxruntime"
        for value in (np.nan, np.inf):
            step._fallback = None  # made when onnxruntime first runs the partition
            mask = next(iter(masks.values())).copy()
            mask.flat[0] = value
            why = _difference(compiled, reference, {"x": x, name: mask}, backend_tolerance)
            failures += [f"mask {list(shape)} holding {value}: {why}"] if why else []
            assert step._fallback is not None, f"a mask holding {value} ran on the backend"
    assert not failures, "\n".join(failures)


def test_claimed_ops_on_integer_edges(
    conformance_backend: str,
    backend_config: dict[str, Any],
    backend_known_failures: dict[tuple[str, str], str],
) -> None:
    """Each claimed op's representative node made int32 and int64 (where ONNX defines it and
    onnxruntime runs it) matches onnxruntime exactly on the dtype's limits; an integer division
    by zero fails as in onnxruntime."""
    results: dict[tuple[str, str], str | None] = {}
    for op_type in sorted(set(_claimed(backend_config, conformance_backend)) & set(OP_CASES)):
        for dtype in INTEGER_DTYPES:
            case = integer_case(op_type, dtype)
            if case is None:
                continue
            model, feeds = single_op_model(op_type, case)
            found = _claimed_model(model, backend_config)
            if found is None:
                continue
            divisor = model.graph.node[0].input[DIVISORS[op_type]] if op_type in DIVISORS else None
            edges = edge_feeds(feeds, divisor)
            results[op_type, dtype] = _difference(*found, edges, (0.0, 0.0))
            if divisor in feeds:
                zero = {**feeds, divisor: np.zeros_like(feeds[divisor])}
                results[op_type, f"{dtype} / 0"] = _difference(*found, zero, (0.0, 0.0))
    _verdict(results, backend_known_failures)


def test_nodes_onnxruntime_refuses_are_not_claimed(
    conformance_backend: str,
    backend_config: dict[str, Any],
    backend_known_failures: dict[tuple[str, str], str],
) -> None:
    """A node onnxruntime would refuse stays on onnxruntime (which then reports it): an Add of
    float32 and int32, a node at an opset no ONNX release has, an output of a declared type
    the op does not make."""
    claimed = _claimed(backend_config, conformance_backend)
    unary = next((u for u in _UNARY if u in claimed), None)
    models = {}
    if "Add" in claimed:
        models["Add", "float32 + int32"] = _node_model("Add", ["x", "i"])
    if unary:
        models[unary, "opset 999"] = _node_model(unary, ["x"], opset=999)
        models[unary, "an output declared int32"] = _node_model(
            unary, ["x"], onnx.TensorProto.INT32
        )
    if not models:
        pytest.skip("the backend claims none of Add, " + ", ".join(_UNARY))
    results = {
        key: "claimed, though onnxruntime refuses it" if _claims(model, backend_config) else None
        for key, model in models.items()
    }
    _verdict(results, backend_known_failures)


def _claims(model: onnx.ModelProto, config: dict[str, Any]) -> bool:
    try:
        return bool(byoc.partition(model, config).partitions)
    except byoc.ModelError:  # byoc refuses the whole model, before any backend sees it
        return False


def _node_model(
    op_type: str, inputs: list[str], out: int = onnx.TensorProto.FLOAT, opset: int = 17
) -> onnx.ModelProto:
    """One node on float32 'x' and int32 'i' of shape [2, 3], its output declared ``out``."""
    types = {"x": onnx.TensorProto.FLOAT, "i": onnx.TensorProto.INT32}
    graph = helper.make_graph(
        [helper.make_node(op_type, inputs, ["y"], name="node")],
        "refused",
        [helper.make_tensor_value_info(n, types[n], [2, 3]) for n in inputs],
        [helper.make_tensor_value_info("y", out, [2, 3])],
    )
    return helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=IR_VERSION
    )


# -- artifacts --------------------------------------------------------------------------------


def _claimed_example(config: Mapping[str, Any], backend: str) -> tuple[onnx.ModelProto, Any]:
    """A one-op model whose node the backend claims, and inputs for it."""
    claimed = _claimed(config, backend)
    for op_type in [*_UNARY, "Add", "Conv", "MatMul", "Gemm", *sorted(OP_CASES)]:
        if op_type in claimed and op_type in OP_CASES:
            model, feeds = single_op_model(op_type)
            if byoc.partition(model, config).partitions:
                return model, feeds
    pytest.skip("the backend claims none of the ops byoc.testing.ops can build")


def test_serialize_deserialize_runs_the_same(
    conformance_backend: str, backend_config: dict[str, Any]
) -> None:
    """Every partition's artifact, serialized and deserialized, runs with the same results."""
    model, feeds = _claimed_example(backend_config, conformance_backend)
    compiled = byoc.compile(model, backend_config)
    assert _returned(compiled.plan) is None, _returned(compiled.plan)
    want = compiled.run(feeds)
    reg = registry()
    hook = reg.route(conformance_backend)
    table = _table(backend_config, conformance_backend)
    for step in compiled.steps:
        if step.unit.backend != conformance_backend:
            continue
        data = hook.byoc_serialize(backend=conformance_backend, artifact=step.artifact)
        assert isinstance(data, bytes), f"byoc_serialize returned {type(data).__name__}, not bytes"
        artifact = hook.byoc_deserialize(  # trusted: the bytes must come back whole
            backend=conformance_backend, data=data, trust_native=True
        )
        assert artifact is not None, "byoc_deserialize returned None for the backend's own bytes"
        assert hook.byoc_serialize(backend=conformance_backend, artifact=artifact) == data
        step.runtime = create_runtime(reg, conformance_backend, step.unit.name, artifact, table)
    got = compiled.run(feeds)
    for name, value in want.items():
        np.testing.assert_array_equal(got[name], value, err_msg=f"output {name}")


def test_damaged_artifacts_are_refused(conformance_backend: str) -> None:
    """Bytes the backend did not write make ``byoc_deserialize`` raise ``byoc.ArtifactError``."""
    hook = registry().route(conformance_backend)
    for data in [b"", b"\x00\xff\xfe not an artifact \x00", bytes(range(256)) * 4]:
        with pytest.raises(ArtifactError):
            hook.byoc_deserialize(backend=conformance_backend, data=data, trust_native=False)


# -- the fallback, threads, discovery ---------------------------------------------------------


def test_unclaimed_op_falls_back_to_onnxruntime(
    conformance_backend: str,
    backend_config: dict[str, Any],
    backend_tolerance: tuple[float, float],
) -> None:
    """A node the backend does not claim runs on onnxruntime, fed by the backend's output."""
    model, feeds = _claimed_example(backend_config, conformance_backend)
    claimed = _claimed(backend_config, conformance_backend)
    config: dict[str, Any] = json.loads(json.dumps(backend_config))
    used = {n.op_type for n in model.graph.node}
    op_type = next((u for u in _UNARY if u not in claimed), None)
    if op_type is None:  # it claims every candidate: forbid one the example does not use
        op_type = next(u for u in _UNARY if u not in used)
        table = config.setdefault("backend", {}).setdefault(conformance_backend, {})
        table["exclude_ops"] = [*table.get("exclude_ops", []), op_type]
    first = model.graph.output[0].name
    model.graph.node.append(helper.make_node(op_type, [first], ["unclaimed_out"], name="unclaimed"))
    model.graph.output.append(helper.make_empty_tensor_value_info("unclaimed_out"))
    model = onnx.shape_inference.infer_shapes(model)
    rtol, atol = backend_tolerance
    report = assert_matches_onnxruntime(model, config, feeds, rtol=rtol, atol=atol)
    assert _returned(report.plan) is None, _returned(report.plan)
    assert "unclaimed" in report.plan.fallback_nodes, report.plan.table()
    if not report.plan.partitions:  # e.g. a prune hook that finds one node not worth it now
        why = _why_not(report.plan, model.graph.node[0].name, conformance_backend)
        pytest.skip(f"the claimed node went back to onnxruntime too: {why}")
    assert [p.backend for p in report.plan.partitions] == [conformance_backend]


def test_run_is_thread_safe(conformance_backend: str, backend_config: dict[str, Any]) -> None:
    """``run`` from 8 threads at once gives each caller its own, correct results."""
    model, feeds = _claimed_example(backend_config, conformance_backend)
    compiled = byoc.compile(model, backend_config)
    assert _returned(compiled.plan) is None, _returned(compiled.plan)
    rng = np.random.default_rng(1)
    batches = [
        {
            k: (v + rng.standard_normal(v.shape).astype(v.dtype) if v.dtype.kind == "f" else v)
            for k, v in feeds.items()
        }
        for _ in range(16)
    ]
    want = [compiled.run(b) for b in batches]
    with ThreadPoolExecutor(8) as pool:
        got = list(pool.map(compiled.run, batches))
    for w, g in zip(want, got, strict=True):
        for name in w:
            np.testing.assert_array_equal(g[name], w[name])


def test_backend_is_listed(conformance_backend: str) -> None:
    """``byoc backends --json`` lists the backend as available, with the ops it claims."""
    done = subprocess.run(
        [sys.executable, "-m", "byoc.cli", "backends", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    rows = {r["name"]: r for r in json.loads(done.stdout)}
    assert conformance_backend in rows, f"not listed: {sorted(rows)}"
    row = rows[conformance_backend]
    assert row["available"], row["reason"]
    defaults = byoc.Config().backend_table(
        conformance_backend, registry().backends[conformance_backend].options
    )
    assert row["ops"] == sorted(registry().supported_ops(conformance_backend, defaults))
