"""One unit through a backend's hooks: codegen, then runtime creation, with every failure a
ByocError that names the partition and the backend."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from byoc.errors import BackendError, ByocError, ConfigError, NodesRefused
from byoc.plan import Partition
from byoc.plugins import Registry


def compile_unit(
    reg: Registry, backend: str, unit: Partition, config: Mapping[str, Any]
) -> tuple[Any, Any]:
    """Codegen and runtime creation at compile time: any failure is a BackendError that names
    the partition and the backend (a plugin's own ArtifactError here is still the backend's
    failure, not a damaged file)."""
    where = f"partition {unit.name} (backend {backend})"
    try:
        artifact = reg.route(backend).byoc_codegen(backend=backend, partition=unit, config=config)
        if artifact is None:
            raise BackendError(f"{where}: no installed plugin generates code for '{backend}'")
        return artifact, create_runtime(reg, backend, unit.name, artifact, config)
    except NodesRefused as exc:
        unknown = set(exc.reasons) - set(unit.nodes)
        if unknown or not exc.reasons:
            raise BackendError(
                f"{where}: codegen refused nodes that are not in the partition: "
                f"{', '.join(sorted(unknown)) or 'none named'}"
            ) from exc
        exc.backend = backend
        raise
    except (BackendError, ConfigError):
        raise
    except Exception as exc:
        detail = str(exc) if isinstance(exc, ByocError) else f"{type(exc).__name__}: {exc}"
        raise BackendError(f"{where}: compiling failed: {detail}") from exc


def create_runtime(
    reg: Registry, backend: str, name: str, artifact: Any, config: Mapping[str, Any]
) -> Any:
    """The runtime object a backend makes of an artifact (after codegen or loading)."""
    where = f"partition {name} (backend {backend})"
    try:
        runtime = reg.route(backend).byoc_create_runtime(
            backend=backend, artifact=artifact, config=config
        )
    except ByocError:
        raise
    except Exception as exc:
        raise BackendError(
            f"{where}: creating the runtime failed: {type(exc).__name__}: {exc}"
        ) from exc
    if runtime is None:
        raise BackendError(f"{where}: no installed plugin creates runtimes for backend '{backend}'")
    return runtime
