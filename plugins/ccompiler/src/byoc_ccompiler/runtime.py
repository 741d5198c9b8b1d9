"""Running a compiled partition: check every input, allocate the outputs, call the C entry."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from byoc import BackendError, InputError

from byoc_ccompiler.codegen import Tensor


class Module:
    """A loaded partition. ``run`` keeps all state in locals: it is reentrant and thread-safe
    (cffi releases the GIL during the call)."""

    def __init__(
        self, ffi: Any, lib: Any, symbol: str, inputs: list[Tensor], outputs: list[Tensor]
    ) -> None:
        self.symbol = symbol
        self.inputs = inputs
        self.outputs = outputs
        self._ffi = ffi
        self._fn = getattr(lib, symbol)
        self._dtypes = [np.dtype(t.dtype) for t in inputs]

    def run(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        """Inputs in signature order -> outputs in signature order."""
        if len(inputs) != len(self.inputs):
            raise InputError(
                f"{self.symbol}: expected {len(self.inputs)} inputs "
                f"({', '.join(t.name for t in self.inputs)}), got {len(inputs)}"
            )
        arrays = []
        for value, want, dtype in zip(inputs, self.inputs, self._dtypes, strict=True):
            if not isinstance(value, np.ndarray):
                raise InputError(
                    f"{self.symbol}: input '{want.name}' is a "
                    f"{type(value).__name__}, not a numpy array"
                )
            if value.dtype != dtype or value.shape != want.shape:
                raise InputError(
                    f"{self.symbol}: input '{want.name}' is {value.dtype}{list(value.shape)}, "
                    f"expected {want.dtype}{list(want.shape)}"
                )
            if not (value.flags.c_contiguous and value.flags.aligned):
                value = np.require(value, requirements=["C", "A"])  # a contiguous, aligned copy
            arrays.append(value)
        outputs = [np.empty(t.shape, t.dtype) for t in self.outputs]
        buffers = [self._ffi.from_buffer(a) for a in arrays + outputs]
        status = self._fn(self._ffi.new("void *[]", buffers))
        if status == 2:
            raise ZeroDivisionError(
                f"{self.symbol}: an integer Div divided by zero (onnxruntime fails there too)"
            )
        if status != 0:
            raise BackendError(f"{self.symbol}: out of memory for intermediate buffers")
        return outputs
