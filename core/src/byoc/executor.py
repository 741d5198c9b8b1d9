"""Building a plan: codegen and a runtime for every unit, into a CompiledModel."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import onnx

from byoc import plugins
from byoc.compiled import CompiledModel, Step
from byoc.config import Config, load_config
from byoc.context import ConfigLike, Context, resolve
from byoc.errors import ArtifactError, BackendError, ModelError
from byoc.pipeline import partition
from byoc.plan import FALLBACK, Partition, Plan
from byoc.plugins import Registry
from byoc.progress import ProgressFn
from byoc.shapes import Specializations
from byoc.units import compile_unit, create_runtime


def fallback_config(cfg: Config, plan: Plan, reg: Registry) -> dict[str, Any]:
    """The [fallback] table, with defaults asked for by the backends that have partitions.

    With more than one step, onnxruntime's threads do not spin between runs unless the user
    says so: spinning pools of many sessions starve each other and the backends (measured 8x
    slower runs on a DenseNet cut into 782 segments).
    """
    table = dict(cfg.fallback)
    if len(plan.schedule) > 1 and "allow_spinning" not in cfg.fallback_explicit:
        table["allow_spinning"] = False
    used = {p.backend for p in plan.partitions}
    for name in sorted(used):
        for key, value in reg.backends[name].fallback_defaults.items():
            if key not in cfg.fallback_explicit:
                table[key] = value
    return table


def _onnxruntime_loads(plan: Plan) -> None:
    """A ModelError when onnxruntime refuses the model as read (mismatched input types, an
    opset it does not know): a segment it refuses is then no fault of byoc's."""
    import onnxruntime as ort

    source = plan.source if plan.source is not None else plan.model
    try:
        ort.InferenceSession(source.SerializeToString(), providers=["CPUExecutionProvider"])
    except Exception as exc:
        raise ModelError(f"onnxruntime (the reference) cannot load the model: {exc}") from None


def build(
    plan: Plan,
    config: Context | ConfigLike = None,
    *,
    progress: ProgressFn | None = None,
    reuse: Callable[[Partition], tuple[Any, Any] | None] | None = None,
    registry: Registry | None = None,
    variants: Callable[[onnx.ModelProto, Config], CompiledModel] | None = None,
) -> CompiledModel:
    """Run codegen and create a runtime for every unit of a plan, as the plan says (no
    measured placement: ``byoc.compile`` does that).

    ``progress(index, total, unit_name)``, when given, is called before each unit is compiled.
    ``reuse(unit)`` may give an ``(artifact, runtime)`` already made for an identical unit.
    ``registry``: the plugins to use (default: ``byoc.registry()``); ``config`` may be a
    resolved ``Context`` instead of both (default: the plan's config).
    ``variants(source, config)`` compiles the model for other input shapes when ``[shapes]``
    fixed them (default: partition and build; ``byoc.compile`` passes itself).
    """
    ctx = resolve(config if config is not None else plan.config, registry)
    cfg, reg, tables = ctx.config, ctx.registry, ctx.tables
    problem = reg.backends[FALLBACK].unavailable_reason
    if problem is not None:  # every model needs it: segments, and the reference
        raise BackendError(f"the onnxruntime fallback cannot be used: {problem}")
    fb = fallback_config(cfg, plan, reg)
    steps = []
    for i, unit in enumerate(plan.schedule, start=1):
        if progress is not None:
            progress(i, len(plan.schedule), unit.name)
        table = fb if unit.backend == FALLBACK else {**tables[unit.backend], **unit.options}
        made = reuse(unit) if reuse is not None else None
        try:
            artifact, runtime = (
                made if made is not None else compile_unit(reg, unit.backend, unit, table)
            )
        except BackendError:
            if unit.backend == FALLBACK:
                _onnxruntime_loads(plan)  # the model's fault, not byoc's: a ModelError
            raise
        steps.append(Step(unit, artifact, runtime))
    used = {p.backend for p in plan.partitions}
    return CompiledModel(
        plan,
        steps,
        fb,
        backend_configs={n: t for n, t in tables.items() if n in used},
        registry=reg,
        shapes=Specializations.create(
            plan.source,
            cfg,
            variants
            or (lambda source, c: build(partition(source, c, registry=reg), c, registry=reg)),
        ),
    )


def load_module(
    path: str | os.PathLike[str],
    backend: str,
    config: ConfigLike = None,
    *,
    registry: Registry | None = None,
) -> Any:
    """Load one artifact file (e.g. a hand-written ``.examplejson``) as a runnable module.

    The backend's deserialize hook validates the bytes; the result has
    ``run(inputs: list[array]) -> list[array]``.
    """
    reg = registry or plugins.registry()
    if backend not in reg.backends:
        raise ArtifactError(
            f"backend '{backend}' is not installed (installed: {', '.join(reg.backends)}); "
            f"install it (e.g. pip install byoc-{backend})"
        )
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise ArtifactError(f"cannot read '{path}': {exc}") from None
    artifact = reg.route(backend).byoc_deserialize(backend=backend, data=data, trust_native=False)
    if artifact is None:
        raise ArtifactError(f"backend '{backend}' cannot load artifacts (no deserialize hook)")
    table = load_config(config).backend_table(backend, reg.backends[backend].options)
    return create_runtime(reg, backend, os.fspath(path), artifact, table)
