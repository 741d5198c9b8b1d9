"""The hooks of the ``thirdparty`` backend."""

from __future__ import annotations

from typing import Any

import byoc
import numpy as np

NAME = "thirdparty"


class Runtime:
    """Negates its one input; keeps no state, so it is thread-safe."""

    def run(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        return [np.negative(inputs[0])]


@byoc.hookimpl
def byoc_register_backends(register: Any) -> None:
    register(NAME, description="third-party demo: claims Neg")


@byoc.hookimpl
def byoc_supported_ops(backend: str, config: Any) -> dict[str, Any] | None:
    return {"Neg": None}


@byoc.hookimpl
def byoc_codegen(backend: str, partition: byoc.Partition, config: Any) -> str | None:
    if [n.op_type for n in partition.model.graph.node] != ["Neg"]:
        raise byoc.BackendError("thirdparty runs partitions of exactly one Neg")
    return "neg"


@byoc.hookimpl
def byoc_create_runtime(backend: str, artifact: Any, config: Any) -> Runtime | None:
    return Runtime()
