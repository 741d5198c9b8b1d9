"""A compiled model: its steps (a unit, its artifact and its runtime) and running them."""

from __future__ import annotations

import os
import threading
import time
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from byoc import plugins
from byoc.errors import BackendError, ByocError, InputError
from byoc.export import save
from byoc.fallback import raw_run
from byoc.graph import MOVES, Graph, TensorType, subgraph_reads
from byoc.inputs import check_inputs, value_ranges
from byoc.plan import FALLBACK, Partition, Plan
from byoc.plugins import Registry
from byoc.shapes import Specializations
from byoc.units import compile_unit

Direct = Callable[[Any], dict[str, np.ndarray] | None]


def _direct(
    shapes: dict[str, tuple[int, ...] | None], outputs: list[str], run: Callable[..., Any]
) -> Direct:
    """One onnxruntime session that runs the whole model, called natively (see raw_run): the
    outputs by name, or None for the checked path. It takes numpy arrays in native byte order
    for exactly the model's inputs, of the shapes ``[shapes]`` fixed, as the checked path
    wants them: other shapes run on a variant (``Specializations``), where shape computations
    are folded for them; onnxruntime's C++ checks each input's dtype and shape itself. Its
    checks are inlined: on a 6 us tree ensemble, a method per check cost 1 us a call."""
    items, names, ndarray = tuple(shapes.items()), shapes.keys(), np.ndarray

    def direct(inputs: Any) -> dict[str, np.ndarray] | None:
        if type(inputs) is not dict or inputs.keys() != names:
            return None
        for name, shape in items:
            value = inputs[name]
            if type(value) is not ndarray or not value.dtype.isnative:
                return None
            if shape is not None and value.shape != shape:
                return None
        try:
            return dict(zip(outputs, run(outputs, inputs, None), strict=True))
        except Exception:
            return None  # the checked path says what is wrong with the inputs, or fails the same

    return direct


def _exact(signature: dict[str, tuple[np.dtype[Any], tuple[int, ...]]] | None, inputs: Any) -> bool:
    """The inputs are exactly what ``check_inputs`` would pass through unchanged: a dict of
    C-contiguous, aligned numpy arrays of the model's static shapes and dtypes (native byte
    order). The common case, checked in a few microseconds: cold after a long run, the general
    check cost 50 us of a 7.7 ms MiniLM run."""
    if signature is None or type(inputs) is not dict or len(inputs) != len(signature):
        return False
    for name, (dtype, shape) in signature.items():
        value = inputs.get(name)
        if type(value) is not np.ndarray or value.dtype != dtype or value.shape != shape:
            return False
        if not (value.flags.c_contiguous and value.flags.aligned):
            return False
    return True


@dataclass
class Step:
    """One unit of the schedule: a partition or a fallback segment, and its runtime."""

    unit: Partition
    artifact: Any = field(repr=False)  # source, weights: too big to print
    runtime: Any = field(repr=False)
    drop: list[str] = field(default_factory=list)  # values no later step reads
    guarded: bool = False  # its inputs are checked (below); those that fail run on onnxruntime
    finite: bool = False  # no NaN or +-inf in float inputs (Backend.finite_only)
    bound: float = np.inf  # nor any value of this magnitude or more (Backend.max_magnitude)
    masks: frozenset[int] = frozenset()  # inputs (positions) that may hold -inf: softmax_masks
    int_limit: int | None = None  # 32- and 64-bit integer inputs below it (Backend.int_limit)
    _fallback: Any = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def fallback(self, config: Mapping[str, Any], reg: Registry) -> Any:
        """An onnxruntime runtime for this partition (it is a valid ONNX model)."""
        with self._lock:
            if self._fallback is None:
                if not self.unit.model.graph.node:
                    raise BackendError(
                        f"partition {self.unit.name} (backend {self.unit.backend}) has no ONNX "
                        "copy to rerun on onnxruntime (it was loaded from a .byoc file saved "
                        "without one)"
                    )
                self._fallback = compile_unit(reg, FALLBACK, self.unit, config)[1]
            return self._fallback


class CompiledModel:
    """A partitioned, compiled model. ``run`` is safe to call from many threads at once.

    ``plan`` is None for a model loaded from a ``.byoc`` file; such a model gives its signature
    (``inputs``, ``outputs`` with their types, constant ``outputs``) explicitly.
    """

    def __init__(
        self,
        plan: Plan | None,
        steps: list[Step],
        fallback_config: Mapping[str, Any],
        *,
        inputs: Mapping[str, TensorType | None] | None = None,
        outputs: Mapping[str, TensorType | None] | None = None,
        constants: Mapping[str, np.ndarray] | None = None,
        backend_configs: Mapping[str, Mapping[str, Any]] | None = None,
        registry: Registry | None = None,
        shapes: Specializations[CompiledModel] | None = None,
        input_ranges: Mapping[str, tuple[int, int]] | None = None,
    ) -> None:
        self.plan = plan
        # the model file one onnxruntime session runs whole, too large to partition (and to
        # save): compiler._whole_file
        self.file: str | None = None
        self.registry = registry or plugins.registry()  # the plugins that made its runtimes
        self.steps = steps
        self.fallback_config = dict(fallback_config)
        self.backend_configs = {k: dict(v) for k, v in (backend_configs or {}).items()}
        if plan is not None and inputs is None:
            graph = Graph(plan.model)
            input_ranges = value_ranges(graph)
            inputs = {n: graph.type_of(n) for n in graph.inputs}
            outputs = {n: graph.type_of(n) for n in graph.outputs}
            values = {n: graph.constant(n) for n in graph.outputs}
            constants = {n: v for n, v in values.items() if v is not None}
        self.inputs: dict[str, TensorType | None] = dict(inputs or {})
        # [low, high) of integer inputs whose meaning the graph gives (indices, masks): random
        # inputs for this model use them, loaded or not (byoc.inputs.value_ranges)
        self.input_ranges = dict(input_ranges or {})
        self.output_types: dict[str, TensorType | None] = dict(outputs or {})
        self.outputs = list(self.output_types)
        self._constants = dict(constants or {})
        self._shapes = shapes  # variants for other input shapes (build makes them)
        # Outputs that would be byoc's own constants or the caller's own input arrays: each
        # run returns copies, so a caller writing into a result changes nothing else.
        self._copied = {n for n in self.outputs if n in self._constants or n in self.inputs}
        self._direct = self._one_session()
        self._signature = _signature(self.inputs)
        _plan_drops(steps, set(self.outputs))
        self._guard(steps)

    def _guard(self, steps: list[Step]) -> None:
        """Mark the steps whose inputs are checked before their backend sees them: NaN, +-inf
        and floats of ``max_magnitude`` or more for finite-only backends ([fallback]
        nonfinite_inputs), integers at or past a backend's ``int_limit``."""
        finite = self.fallback_config.get("nonfinite_inputs", "onnxruntime") == "onnxruntime"
        bare = []
        for step in steps:
            backend = self.registry.backends.get(step.unit.backend)
            if backend is None:
                continue
            step.finite = finite and backend.finite_only
            step.bound = backend.max_magnitude
            step.int_limit = backend.int_limit
            if not step.finite and step.int_limit is None:
                continue
            step.guarded = bool(step.unit.model.graph.node)
            if not step.guarded:
                bare.append(step.unit.name)
            elif step.finite and backend.softmax_masks:
                masks = _softmax_masks(step.unit.model.graph)
                step.masks = frozenset(i for i, n in enumerate(step.unit.inputs) if n in masks)
        if bare:
            warnings.warn(
                f"partitions {', '.join(bare)} carry no ONNX copy (an older .byoc file): NaN "
                "or +-inf (or large integers) in their inputs run on their backend, whose "
                "results there may differ from onnxruntime's; save the model again to carry "
                "them",
                stacklevel=3,
            )

    def run(self, inputs: Mapping[str, Any]) -> dict[str, np.ndarray]:
        """Run the model: ``{input name: array}`` -> ``{output name: array}``.

        Inputs whose shapes differ from the ones the model was specialised for (``[shapes]``)
        but fit its declared symbolic dims are run on a variant compiled for them, once.
        """
        direct = self._direct
        if direct is not None:
            found = direct(inputs)
            if found is not None:
                return found
        return self._run(inputs, None)

    def _one_session(self) -> Direct | None:
        """How to call onnxruntime directly when one session runs the whole model."""
        if len(self.steps) != 1 or self._constants:
            return None
        unit, session = self.steps[0].unit, getattr(self.steps[0].runtime, "session", None)
        if unit.backend != FALLBACK or session is None:
            return None
        if set(unit.inputs) != set(self.inputs) or set(unit.outputs) != set(self.outputs):
            return None
        shapes = {n: _static_shape(t) for n, t in self.inputs.items()}
        return _direct(shapes, list(unit.outputs), raw_run(session))

    def profile(
        self, inputs: Mapping[str, Any]
    ) -> tuple[dict[str, np.ndarray], list[tuple[Step, float]]]:
        """Run once, timing each step: the outputs, and ``(step, seconds)`` in run order."""
        times: list[tuple[Step, float]] = []
        return self._run(inputs, times), times

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write the model to one ``.byoc`` file that ``byoc.load`` reads (docs/format.md)."""
        return save(self, path)

    def _run(
        self, inputs: Mapping[str, Any], times: list[tuple[Step, float]] | None
    ) -> dict[str, np.ndarray]:
        if _exact(self._signature, inputs):
            checked = inputs
        else:
            try:
                checked = check_inputs(self.inputs, inputs)
            except InputError:
                if self._shapes is None:
                    raise
                return self._shapes.model_for(inputs)._run(inputs, times)
        env: dict[str, Any] = dict(self._constants)
        env.update(checked)
        on_error = self.fallback_config.get("on_backend_error", "raise")
        for step in self.steps:
            unit = step.unit
            args = [env[name] for name in unit.inputs]
            start = time.perf_counter() if times is not None else 0.0
            try:
                if step.guarded and not _admissible(args, step):
                    results = results_of(
                        unit, step.fallback(self.fallback_config, self.registry).run(args)
                    )
                else:
                    results = results_of(unit, step.runtime.run(args))
            except Exception as exc:
                if unit.backend == FALLBACK or on_error != "onnxruntime":
                    if isinstance(exc, ByocError):
                        raise
                    raise BackendError(
                        f"partition {unit.name} (backend {unit.backend}) failed at run time: "
                        f"{type(exc).__name__}: {exc}"
                    ) from exc
                warnings.warn(
                    f"partition {unit.name} (backend {unit.backend}) failed "
                    f"({type(exc).__name__}: {exc}); running it on onnxruntime instead",
                    stacklevel=2,
                )
                results = _rerun(step, args, self.fallback_config, exc, self.registry)
            if times is not None:
                times.append((step, time.perf_counter() - start))
            env.update(zip(unit.outputs, results, strict=True))
            for name in step.drop:
                env.pop(name, None)
        return {n: np.array(env[n]) if n in self._copied else env[n] for n in self.outputs}

    def __repr__(self) -> str:
        kinds = ", ".join(f"{s.unit.name}" for s in self.steps)
        return f"<CompiledModel {kinds}>"


def _admissible(args: list[Any], step: Step) -> bool:
    """Whether the step's backend may run these arguments: with ``step.finite``, every float is
    below ``step.bound`` in magnitude: no NaN or +-inf, nor a value that may overflow to inf
    inside the partition. A sum of squares below ``bound**2`` says so in one pass (``vdot``: 2
    us on P1's input, where ``isfinite`` took 5 and a maximum and a minimum 6; it never warns
    when it overflows); else the maximum and minimum decide, NaN if one is. An attention mask
    at ``step.masks`` is bounded by its maximum alone, so -inf passes. No 32- or 64-bit integer
    may reach ``step.int_limit`` (its minimum and maximum)."""
    limit = step.int_limit
    # strong numpy scalars: a float16 array compares in float64, not with 1e15 cast to inf
    bound, square = np.float64(step.bound), np.float64(step.bound * step.bound)
    for i, a in enumerate(args):
        if not isinstance(a, np.ndarray) or not a.size:
            continue
        kind = a.dtype.kind
        if kind == "f" and step.finite and i in step.masks:
            ok = a.max() < bound
        elif kind == "f" and step.finite:
            ok = np.vdot(a, a) < square or (a.max() < bound and a.min() > -bound)
        elif kind in "iu" and a.dtype.itemsize >= 4 and limit is not None:
            ok = a.max() < limit and (kind == "u" or a.min() > -limit)
        else:
            continue
        if not ok:
            return False
    return True


def _softmax_masks(graph: onnx.GraphProto) -> set[str]:
    """The inputs of ``graph`` that only Adds read, through ops that only move values, whose
    sums only Softmax nodes read (and none of it is an output): attention masks, where -inf
    means "no weight" (Backend.softmax_masks)."""
    readers: dict[str, list[onnx.NodeProto]] = {}
    for node in graph.node:
        for name in dict.fromkeys([*node.input, *subgraph_reads(node)]):
            readers.setdefault(name, []).append(node)
    outputs = {o.name for o in graph.output}

    def read_by(name: str, ok: Callable[[onnx.NodeProto], bool]) -> bool:
        found = readers.get(name, [])
        return bool(found) and name not in outputs and all(ok(n) for n in found)

    def into_softmax(node: onnx.NodeProto) -> bool:
        return read_by(node.output[0], lambda n: n.op_type == "Softmax")

    def mask(name: str) -> bool:
        def ok(node: onnx.NodeProto) -> bool:
            if node.op_type == "Add":
                return into_softmax(node)
            moved = node.input[0] == name and name not in node.input[1:]  # not a shape
            return node.op_type in MOVES and moved and mask(node.output[0])  # -inf stays

        return read_by(name, ok)

    return {i.name for i in graph.input if mask(i.name)}


def _signature(
    inputs: Mapping[str, TensorType | None],
) -> dict[str, tuple[np.dtype[Any], tuple[int, ...]]] | None:
    """Every input's dtype (native byte order) and static shape, or None if one is not known."""
    out = {}
    for name, t in inputs.items():
        shape = _static_shape(t)
        if t is None or t.dtype is None or shape is None or t.dtype.kind in "OUS":
            return None
        out[name] = (t.dtype.newbyteorder("="), shape)
    return out


def _static_shape(t: TensorType | None) -> tuple[int, ...] | None:
    if t is None or t.shape is None or not t.is_static:
        return None
    return tuple(int(d) for d in t.shape if d is not None)


def results_of(unit: Partition, results: Any) -> list[np.ndarray]:
    """A step's results, checked: one array per output of the unit."""
    if not isinstance(results, list | tuple) or len(results) != len(unit.outputs):
        got = f"{len(results)} values" if isinstance(results, list | tuple) else repr(results)[:60]
        raise BackendError(
            f"partition {unit.name} (backend {unit.backend}) returned {got}, expected a list of "
            f"{len(unit.outputs)} arrays"
        )
    for name, value in zip(unit.outputs, results, strict=True):  # onnxruntime: also sequences
        if unit.backend != FALLBACK and not isinstance(value, np.ndarray):
            raise BackendError(
                f"partition {unit.name} (backend {unit.backend}) returned a "
                f"{type(value).__name__} for output '{name}', not a numpy array"
            )
    return list(results)


def _rerun(
    step: Step, args: list[Any], config: Mapping[str, Any], cause: Exception, reg: Registry
) -> Any:
    """Run a failed partition on onnxruntime ([fallback] on_backend_error = "onnxruntime")."""
    unit = step.unit
    try:
        return results_of(unit, step.fallback(config, reg).run(args))
    except Exception as exc:
        raise BackendError(
            f"partition {unit.name} (backend {unit.backend}) failed at run time "
            f"({type(cause).__name__}: {cause}), and so did running it on onnxruntime: "
            f"{type(exc).__name__}: {exc}"
        ) from exc


def _plan_drops(steps: list[Step], keep: set[str]) -> None:
    last: dict[str, int] = {}
    for i, step in enumerate(steps):
        for name in step.unit.inputs:
            last[name] = i
    for name, i in last.items():
        if name not in keep:
            steps[i].drop.append(name)
