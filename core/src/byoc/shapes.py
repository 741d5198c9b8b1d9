"""Dynamic shapes: compile a model again, lazily, for input shapes it was not specialised for.

A model compiled with ``[shapes]`` fixing its symbolic input dims only accepts those shapes.
Run with other shapes that the model's *declared* signature allows (e.g. another batch size),
the compiled model partitions and builds the model again with ``[shapes]`` set to the new
input shapes, and keeps the result in a small LRU cache keyed by the input shapes
(``[compile] shape_cache`` entries; 0 turns this off). Shapes the declared signature does not
allow (a wrong static dim, a wrong dtype) stay an ``InputError``.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Any, Generic, TypeVar

import onnx

from byoc.config import Config
from byoc.graph import TensorType, declared_inputs
from byoc.inputs import check_inputs

Model = TypeVar("Model")  # what ``build`` makes: a CompiledModel (shapes does not import it)

log = logging.getLogger("byoc")

ShapeKey = tuple[tuple[str, tuple[int, ...]], ...]


class Specializations(Generic[Model]):
    """Compiled variants of one model, one per input-shape signature, least recently used out.

    Thread-safe: lookups and compiles hold one lock (a shape signature is compiled once even
    when many threads ask for it at the same time); runs on a variant do not.
    """

    def __init__(
        self,
        source: onnx.ModelProto,
        config: Config,
        size: int,
        build: Callable[[onnx.ModelProto, Config], Model],
    ) -> None:
        self.source = source
        self.config = config
        self.size = size
        self._build = build
        self.declared: dict[str, TensorType | None] = declared_inputs(source)
        self._cache: OrderedDict[ShapeKey, Model] = OrderedDict()
        self._lock = threading.Lock()

    @classmethod
    def create(
        cls,
        source: onnx.ModelProto | None,
        config: Config,
        build: Callable[[onnx.ModelProto, Config], Model],
    ) -> Specializations[Model] | None:
        """The cache for a model compiled with ``config``, or None when it cannot help: no
        ``[shapes]`` were fixed (the compiled model takes every shape already), no source model,
        or ``[compile] shape_cache = 0``."""
        size = config.compile.get("shape_cache", 8)
        if source is None or not config.shapes or size <= 0:
            return None
        return cls(source, config, size, build)

    def model_for(self, inputs: Mapping[str, Any]) -> Model:
        """The variant compiled for these inputs' shapes; InputError if the model refuses them."""
        checked = check_inputs(self.declared, inputs)  # a wrong static dim fails here
        key: ShapeKey = tuple(
            (name, tuple(value.shape))
            for name, value in checked.items()
            if (t := self.declared[name]) is not None and not t.is_static
        )
        with self._lock:
            variant = self._cache.get(key)
            if variant is not None:
                self._cache.move_to_end(key)
                return variant
            shapes = {**self.config.shapes, **{name: list(shape) for name, shape in key}}
            log.info(
                "compiling for new input shapes %s (%d of %d cached)",
                ", ".join(f"{n}={list(s)}" for n, s in key),
                len(self._cache) + 1,
                self.size,
            )
            variant = self._build(self.source, dataclasses.replace(self.config, shapes=shapes))
            self._cache[key] = variant
            while len(self._cache) > self.size:
                self._cache.popitem(last=False)
            return variant

    def cached(self) -> list[ShapeKey]:
        """The shape signatures compiled so far, least recently used first."""
        with self._lock:
            return list(self._cache)
