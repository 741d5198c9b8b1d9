"""What the suite's tests share: what the backend claims, why byoc's results on some inputs
are not onnxruntime's, and the verdict on a set of cases (known failures are strict xfails)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest

import byoc
from byoc.context import resolve_backends
from byoc.plugins import registry

# unary ops, in the order tried, where a test needs one the backend claims (or one it does not)
UNARY = ["Sin", "Cos", "Softsign", "Neg", "Abs", "Exp", "Tanh", "Sigmoid", "Relu", "Identity"]


def backend_table(config: Mapping[str, Any], backend: str) -> dict[str, Any]:
    """The backend's options under ``config``, as byoc resolves them for its hooks."""
    active, _ = resolve_backends(byoc.load_config(config), registry())
    return next(a.table for a in active if a.name == backend)


def claimed_ops(config: Mapping[str, Any], backend: str) -> dict[str, Any]:
    """The op types the backend claims under ``config``, with their checks."""
    return registry().supported_ops(backend, backend_table(config, backend))


def why_not(plan: byoc.Plan, node: str, backend: str) -> str:
    """Why ``node`` stayed off the backend in ``plan``: its refusals, joined."""
    reasons = [r for b, r in plan.decisions[node].refusals if b in (backend, "*")]
    return "; ".join(reasons) or "no reason given"


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


def difference(
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


def claimed_model(
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
    return why_returned(compiled.plan) or compiled, reference


def why_returned(plan: byoc.Plan | None) -> str | None:
    """Why ``byoc.compile`` gave a backend partition back to onnxruntime, or None. It runs
    each partition once and returns one that raises (fail safe), which would hide a broken
    kernel from the suite: here that is a failure."""
    placement = plan.placement if plan is not None else None
    for m in placement.measurements if placement is not None else []:
        if m.failure is not None:
            return f"byoc.compile returned {m.partition} to onnxruntime: {m.failure}"
    return None


def verdict(
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
