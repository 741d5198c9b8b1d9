"""The per-partition check: compile a backend partition and run it once on its real inputs; a
failure, or (measured) a difference from onnxruntime beyond the tolerance, returns it untimed;
else (measured) its timing, cached, decides. ``[compile] precision``: the backend's
reduced-precision options are tried first and kept if the outputs stay within
``precision_tolerance``. A backend's ``exact`` options are tried once where its outputs
differed. ``[backend.<name>] int8 = "own"``: a partition holding a quantizer is kept if its
outputs stay within ``precision_tolerance`` (or pass as an exact one's would); else its
quantizers are vetoed alone, and the rest is partitioned again as the backend's exact int8.
``verdict`` returns what it found and changes nothing it is given."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from byoc import host
from byoc.compiled import results_of
from byoc.errors import ByocError, ConfigError, NodesRefused
from byoc.graph import QUANTIZERS
from byoc.placement.ledger import Ledger, Trial
from byoc.plan import Measurement, Partition
from byoc.tolerance import compare_arrays, precision_error, within_spread
from byoc.units import compile_unit

Made = tuple[Any, Any]  # a partition's artifact and runtime


@dataclass(frozen=True)
class Checked:
    """A partition's check: its verdict, the options it runs with (over its backend's table),
    what was made (None when it failed), and, for a failure, the nodes its backend may no
    longer claim (None: all of them; a partition quantizing with its backend's own
    arithmetic: its quantizers alone)."""

    verdict: Measurement
    options: dict[str, Any]
    made: Made | None
    vetoes: tuple[str, ...] | None = None


def verdict(
    ledger: Ledger, unit: Partition, key: str, trial: Trial, fallback: Mapping[str, Any]
) -> Checked:
    """Compile a partition and run it once on ``trial``'s inputs (``fallback``: the
    onnxruntime settings its references and timing run with); a failure (or, measured, a
    difference from onnxruntime) returns it untimed; else, measured, its timing (cached)
    decides. With ``[compile] precision``, the backend's reduced-precision options are tried
    first and kept if the outputs stay within ``precision_tolerance``; else it runs in fp32.
    A partition quantizing with its backend's own arithmetic (``own_int8``) is judged by
    ``_own_int8``."""
    cfg = ledger.cfg
    precision, note = "fp32", ""
    made: Made | None = None
    own = own_int8(ledger, unit)
    options = reduced(ledger, unit)
    wanted, tol = cfg.compile["precision"], cfg.compile["precision_tolerance"]
    if not options and wanted != "fp32" and host.cpu().has_bf16():
        note = f"in fp32: {unit.backend} offers no {wanted} on this CPU"
    if options:
        made, failure, error = _try(ledger, unit, options, trial, fallback, exact=False)
        if failure is None and error <= tol:
            precision, note = wanted, f"in {wanted}: error {error:.2g} <= {tol:g}"
            note += " (with own int8 arithmetic)" if own else ""
        else:
            why = failure or f"error {error:.2g} > [compile] precision_tolerance {tol:g}"
            note = f"in fp32: {wanted} {why}"
            options, made = {}, None
    failure, timed = None, key if precision == "fp32" else f"{key}-{precision}"
    if made is None and own:  # its own arithmetic, or its quantizers go back: no exact retry
        made, failure, precision, why = _own_int8(ledger, unit, options, trial, fallback)
        note = "; ".join(filter(None, (note, why)))
    elif made is None:
        made, failure, _ = _try(ledger, unit, options, trial, fallback, exact=True)
        if failure is not None and made is not None and ledger.reg.backends[unit.backend].exact:
            options, made, failure, why = _try_exact(
                ledger, unit, options, trial, fallback, failure
            )
            note, timed = "; ".join(filter(None, (note, why))), f"{key}-exact"
    nodes = list(unit.nodes)
    if failure is not None:
        m = Measurement(unit.name, unit.backend, nodes, 0.0, 0.0, False, failure=failure)
    elif not ledger.measured:
        m = Measurement(unit.name, unit.backend, nodes, 0.0, 0.0, True)
    else:
        assert made is not None
        cached = ledger.cached(timed, nodes, (unit.backend,))
        table = {**ledger.tables[unit.backend], **options}
        m = cached or ledger.time_unit(unit, made[1], trial, fallback, table=table)
        if not m.cached and not m.disturbed:  # as timed: its precision is the verdict's
            ledger.cache.put(timed, m)
    m = replace(m, precision=precision, precision_note=note)
    vetoes = own if failure is not None and own else None
    return Checked(m, dict(options), made if failure is None else None, vetoes)


def own_int8(ledger: Ledger, unit: Partition) -> tuple[str, ...]:
    """The quantizers (QuantizeLinear, DynamicQuantizeLinear) of a partition whose backend's
    table says ``int8 = "own"``: those it may compute with its own arithmetic; () otherwise."""
    if ledger.tables[unit.backend].get("int8") != "own":
        return ()
    return tuple(n.name for n in unit.model.graph.node if n.op_type in QUANTIZERS)


def _own_int8(
    ledger: Ledger, unit: Partition, options: Mapping[str, Any], trial: Trial, fallback: Any
) -> tuple[Made | None, str | None, str, str]:
    """A partition that quantizes with its backend's own arithmetic, compiled and run once on
    the measurement inputs, in either placement: what was made, why it is not kept (None: it
    is), the precision it is kept in and the note that shows its error. Kept as ``int8`` when
    its ``precision_error`` is within ``[compile] precision_tolerance`` (the model is then held
    to nothing stricter, as with bf16); else kept as ``fp32`` when it passes as an exact
    partition would (``differs``: [compare]'s tolerance, onnxruntime's spread, rounding ties)."""
    tol = ledger.cfg.compile["precision_tolerance"]
    made, failure = _compile(ledger, unit, options, strict=True)
    if made is None:
        return None, failure, "fp32", ""
    try:
        got = results_of(unit, made[1].run(list(trial.args)))
    except Exception as exc:
        return None, f"failed on the measurement inputs ({type(exc).__name__}: {exc})", "fp32", ""
    error = precision_error(got, trial.outputs)
    shown = f"own int8 arithmetic: error {error:.2g}"
    if error <= tol:
        return made, None, "int8", f"{shown} <= {tol:g}"
    references = lambda: ledger.references(unit, trial.args, fallback)  # noqa: E731
    if differs(ledger.cfg.compare, unit, got, trial.outputs, references) is None:
        return made, None, "fp32", f"{shown} > {tol:g}, but within [compare]'s tolerance"
    return None, f"{shown} > [compile] precision_tolerance {tol:g}", "fp32", ""


def _try_exact(
    ledger: Ledger,
    unit: Partition,
    options: dict[str, Any],
    trial: Trial,
    fallback: Mapping[str, Any],
    failure: str,
) -> tuple[dict[str, Any], Made | None, str | None, str]:
    """A partition whose outputs differed from onnxruntime's (``failure``), compiled again
    with its backend's ``exact`` options: the options it runs with, what was made, why it
    still fails (both reasons), and the note that says why it runs with them."""
    exact = ledger.reg.backends[unit.backend].exact
    options = {**options, **exact}
    made, again, _ = _try(ledger, unit, options, trial, fallback, exact=True)
    shown = ", ".join(f"{k} = {v!r}" for k, v in exact.items())
    if again is None:
        return options, made, None, f"with {shown} (with its faster kernels: {failure})"
    return {}, None, f"{failure}; with {shown}: {again}", ""


def _try(
    ledger: Ledger,
    unit: Partition,
    options: Mapping[str, Any],
    trial: Trial,
    fallback: Mapping[str, Any],
    *,
    exact: bool,
) -> tuple[Made | None, str | None, float]:
    """Compile the partition with ``options`` over its backend's table and run it once: what
    was made, why it is not to be trusted (``_run_once``; for a reduced precision, only a
    failure), and (for a reduced precision) its ``precision_error``."""
    made, failure = _compile(ledger, unit, options, strict=exact)
    if made is None:
        return None, failure, math.inf
    if exact:
        return made, _run_once(ledger, unit, made[1], trial, fallback), 0.0
    try:
        got = results_of(unit, made[1].run(list(trial.args)))
        return made, None, precision_error(got, trial.outputs)
    except Exception as exc:
        return made, f"failed ({type(exc).__name__}: {exc})", math.inf


def _compile(
    ledger: Ledger, unit: Partition, options: Mapping[str, Any], *, strict: bool
) -> tuple[Made | None, str | None]:
    """The partition compiled with ``options`` over its backend's table, or why it failed
    (``strict``: a backend named in ``backends`` must compile it, its failure raises)."""
    table = {**ledger.tables[unit.backend], **options}
    try:
        return compile_unit(ledger.reg, unit.backend, unit, table), None
    except (NodesRefused, ConfigError):
        raise
    except ByocError as exc:
        if strict and ledger.cfg.backends is not None:  # named in `backends`: it must work
            raise
        return None, f"failed to compile ({exc})"


def reduced(ledger: Ledger, unit: Partition) -> dict[str, Any]:
    """The backend's options for ``[compile] precision`` on this CPU, or none."""
    wanted = ledger.cfg.compile["precision"]
    if wanted == "fp32" or not host.cpu().has_bf16():
        return {}
    offered = ledger.reg.backends[unit.backend].precisions.get(wanted, {})
    return dict(offered(unit) if callable(offered) else offered)


def _run_once(
    ledger: Ledger, unit: Partition, runtime: Any, trial: Trial, fallback: Mapping[str, Any]
) -> str | None:
    """Why the partition's one run on the measurement inputs is not to be trusted, if it
    is not: it raised, returned the wrong things, or (measured placement) an output
    differs from onnxruntime's beyond [compare] rtol/atol plus twice what onnxruntime's
    own runs of the partition differ by (``Ledger.references``)."""
    try:
        got = results_of(unit, runtime.run(list(trial.args)))
    except Exception as exc:
        return f"failed on the measurement inputs ({type(exc).__name__}: {exc})"
    if not ledger.measured:
        return None
    compare = ledger.cfg.compare
    return differs(
        compare, unit, got, trial.outputs, lambda: ledger.references(unit, trial.args, fallback)
    )


def differs(
    compare: Mapping[str, Any],
    unit: Partition,
    got: list[Any],
    want: list[Any],
    references: Callable[[], list[list[Any]]],
) -> str | None:
    """Why ``got`` is not ``want`` (onnxruntime's outputs of ``unit``), or None: an output
    differs beyond ``compare``'s rtol/atol plus twice what onnxruntime's own runs differ by
    (``references()``, run only for an output that differs)."""
    rtol, atol = compare["rtol"], compare["atol"]
    others: list[list[Any]] | None = None
    for i, (name, g, w) in enumerate(zip(unit.outputs, got, want, strict=True)):
        report = compare_arrays(name, g, w, rtol, atol)
        if report.passed:
            continue
        if others is None:  # how far onnxruntime is from itself, for this unit
            others = references()
        wide = within_spread(
            name, g, w, [o[i] for o in others], rtol, atol, unit.graph.quantum(name)
        )
        if wide.passed:
            continue
        detail = report.note or f"max abs error {report.max_abs:.3g}"
        return (
            f"output '{name}' differs from onnxruntime's on the measurement inputs "
            f"({detail}; [compare] rtol = {rtol:g}, atol = {atol:g}, plus twice the "
            f"{wide.spread:.3g} that onnxruntime's own runs differ by"
            + (f", plus the {wide.quantum:.3g} ties may move it" if wide.quantum else "")
            + ")"
        )
    return None
