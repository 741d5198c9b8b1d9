"""The ops ExampleJSON knows: ONNX op type -> (ExampleJSON name, numpy kernel).

A kernel takes the input arrays (``None`` for an absent optional input) and the op's attributes
as keywords, and returns one array or a tuple of arrays.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

Kernel = Callable[..., Any]


def _erf(x: np.ndarray) -> np.ndarray:
    # Abramowitz & Stegun 7.1.26: |error| < 1.5e-7, well inside float32 comparisons.
    t = 1.0 / (1.0 + 0.3275911 * np.abs(x.astype(np.float64)))
    poly = t * (
        0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429)))
    )
    return (np.sign(x) * (1.0 - poly * np.exp(-np.square(x.astype(np.float64))))).astype(x.dtype)


def _div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if a.dtype.kind not in "iu":
        return np.divide(a, b)
    if np.any(b == 0):
        raise ZeroDivisionError("an integer Div divided by zero (onnxruntime fails there too)")
    q = a // b  # floors; ONNX truncates toward zero (MIN // -1 wraps to MIN, as in onnxruntime)
    return (q + ((q * b != a) & ((a < 0) != (b < 0)))).astype(a.dtype)


def _axes(x: np.ndarray, axes: Any) -> tuple[int, ...] | None:
    return None if axes is None else tuple(int(a) % max(x.ndim, 1) for a in np.ravel(axes))


def _reduce(fn: Callable[..., np.ndarray]) -> Kernel:
    def kernel(
        x: np.ndarray,
        axes_in: np.ndarray | None = None,
        *,
        axes: Any = None,
        keepdims: int = 1,
        noop_with_empty_axes: int = 0,
    ) -> np.ndarray:
        chosen = axes_in if axes_in is not None else axes
        if chosen is not None and np.size(chosen) == 0:
            chosen = None
        if chosen is None and noop_with_empty_axes:
            return x
        return np.asarray(fn(x, axis=_axes(x, chosen), keepdims=bool(keepdims))).astype(x.dtype)

    return kernel


def _extreme(fn: Callable[..., np.ndarray], identity: str) -> Callable[..., np.ndarray]:
    """np.max / np.min that return the identity (-inf / inf, or the int limit) on empty sets."""

    def kernel(x: np.ndarray, **kw: Any) -> np.ndarray:
        if x.size:
            return fn(x, **kw)
        info = np.finfo(x.dtype) if x.dtype.kind == "f" else np.iinfo(x.dtype)
        if x.dtype.kind == "f":
            initial = -np.inf if identity == "min" else np.inf
        else:
            initial = getattr(info, identity)
        return fn(x, initial=initial, **kw)

    return kernel


def _softmax(x: np.ndarray, *, axis: int = -1, opset: int = 13, log: bool = False) -> np.ndarray:
    shape = x.shape
    if opset < 13:  # older opsets: softmax over the flattened trailing dims
        axis = axis % x.ndim
        x = x.reshape(int(np.prod(shape[:axis])), -1)
        axis = 1
    e = np.exp(x - np.max(x, axis=axis, keepdims=True))
    s = np.sum(e, axis=axis, keepdims=True)
    out = (x - np.max(x, axis=axis, keepdims=True)) - np.log(s) if log else e / s
    return out.reshape(shape).astype(x.dtype)


def _gemm(
    a: np.ndarray,
    b: np.ndarray,
    c: np.ndarray | None = None,
    *,
    alpha: float = 1.0,
    beta: float = 1.0,
    transA: int = 0,
    transB: int = 0,
) -> np.ndarray:
    y = np.matmul(a.T if transA else a, b.T if transB else b)
    if alpha != 1.0:
        y = y * np.asarray(alpha, y.dtype)
    if c is not None:
        y = y + (c * np.asarray(beta, c.dtype) if beta != 1.0 else c)
    return y.astype(a.dtype)


def _reshape(x: np.ndarray, shape: np.ndarray, *, allowzero: int = 0) -> np.ndarray:
    dims = [int(d) for d in shape]
    if not allowzero:
        dims = [x.shape[i] if d == 0 else d for i, d in enumerate(dims)]
    return x.reshape(dims)


def _split(
    x: np.ndarray,
    split: np.ndarray | None = None,
    *,
    axis: int = 0,
    num_outputs: int | None = None,
    n_out: int = 1,
    split_attr: Any = None,
) -> tuple[np.ndarray, ...]:
    sizes = split if split is not None else split_attr
    if sizes is None:
        n = num_outputs or n_out
        size = -(-x.shape[axis] // n)
        sizes = [min(size, x.shape[axis] - i * size) for i in range(n)]
    bounds = np.cumsum([int(s) for s in sizes])[:-1]
    return tuple(np.split(x, bounds, axis=axis))


def _squeeze(x: np.ndarray, axes_in: np.ndarray | None = None, *, axes: Any = None) -> np.ndarray:
    chosen = axes_in if axes_in is not None else axes
    return np.squeeze(x, axis=_axes(x, chosen)) if chosen is not None else np.squeeze(x)


def _unsqueeze(x: np.ndarray, axes_in: np.ndarray | None = None, *, axes: Any = None) -> np.ndarray:
    chosen = [int(a) for a in np.ravel(axes_in if axes_in is not None else axes)]
    rank = x.ndim + len(chosen)
    return np.expand_dims(x, tuple(a % rank for a in chosen))


def _clip(
    x: np.ndarray,
    lo: np.ndarray | None = None,
    hi: np.ndarray | None = None,
    *,
    min: float | None = None,
    max: float | None = None,
) -> np.ndarray:
    lo_v = lo if lo is not None else min
    hi_v = hi if hi is not None else max
    if lo_v is not None:
        x = np.maximum(x, np.asarray(lo_v, x.dtype))
    if hi_v is not None:
        x = np.minimum(x, np.asarray(hi_v, x.dtype))
    return x


def _layer_norm(
    x: np.ndarray,
    scale: np.ndarray,
    bias: np.ndarray | None = None,
    *,
    axis: int = -1,
    epsilon: float = 1e-5,
    stash_type: int = 1,
) -> np.ndarray:
    axes = tuple(range(axis % x.ndim, x.ndim))
    mean = np.mean(x, axis=axes, keepdims=True)
    var = np.mean(np.square(x - mean), axis=axes, keepdims=True)
    y = (x - mean) / np.sqrt(var + np.asarray(epsilon, x.dtype)) * scale
    return (y + bias if bias is not None else y).astype(x.dtype)


def _batch_norm(
    x: np.ndarray,
    scale: np.ndarray,
    b: np.ndarray,
    mean: np.ndarray,
    var: np.ndarray,
    *,
    epsilon: float = 1e-5,
    momentum: float = 0.9,
    training_mode: int = 0,
    spatial: int = 1,  # opset 7-8; 0 is refused at annotation
) -> np.ndarray:
    shape = (1, -1) + (1,) * (x.ndim - 2)
    inv = scale / np.sqrt(var + np.asarray(epsilon, var.dtype))
    return (x * inv.reshape(shape) + (b - mean * inv).reshape(shape)).astype(x.dtype)


def _flatten(x: np.ndarray, *, axis: int = 1) -> np.ndarray:
    if axis < 0:  # ONNX: axis in [-rank, rank], negative counts from the end
        axis += x.ndim
    return x.reshape(int(np.prod(x.shape[:axis])), -1)


def _hard_sigmoid(x: np.ndarray, *, alpha: float = 0.2, beta: float = 0.5) -> np.ndarray:
    return np.clip(x * np.asarray(alpha, x.dtype) + np.asarray(beta, x.dtype), 0, 1).astype(x.dtype)


def _elementwise(fn: Callable[..., np.ndarray]) -> Kernel:
    return lambda *xs, **_: np.asarray(fn(*xs)).astype(xs[0].dtype, copy=False)


_f = _elementwise
OPS: dict[str, tuple[str, Kernel]] = {
    "Add": ("add", _f(np.add)),
    "Sub": ("sub", _f(np.subtract)),
    "Mul": ("mul", _f(np.multiply)),
    "Div": ("div", _div),
    "Pow": ("pow", _f(np.power)),
    "Max": ("max", _f(lambda *xs: np.maximum.reduce(np.broadcast_arrays(*xs)))),
    "Min": ("min", _f(lambda *xs: np.minimum.reduce(np.broadcast_arrays(*xs)))),
    "Neg": ("neg", _f(np.negative)),
    "Abs": ("abs", _f(np.abs)),
    "Sqrt": ("sqrt", _f(np.sqrt)),
    "Reciprocal": ("reciprocal", _f(lambda x: 1 / x)),
    "Exp": ("exp", _f(np.exp)),
    "Log": ("log", _f(np.log)),
    "Floor": ("floor", _f(np.floor)),
    "Ceil": ("ceil", _f(np.ceil)),
    "Erf": ("erf", lambda x: _erf(x)),
    "Tanh": ("tanh", _f(np.tanh)),
    "Relu": ("relu", _f(lambda x: np.maximum(x, np.zeros((), x.dtype)))),
    "Sigmoid": ("sigmoid", _f(lambda x: 1 / (1 + np.exp(-x)))),
    "LeakyRelu": (
        "leaky_relu",
        lambda x, alpha=0.01: np.where(x >= 0, x, x * np.asarray(alpha, x.dtype)),
    ),
    "HardSigmoid": ("hard_sigmoid", _hard_sigmoid),
    "HardSwish": (
        "hard_swish",
        lambda x: (x * _hard_sigmoid(x, alpha=1 / 6, beta=0.5)).astype(x.dtype),
    ),
    "Clip": ("clip", _clip),
    "Where": ("where", lambda c, x, y: np.where(c, x, y)),
    "Equal": ("equal", lambda a, b: np.equal(a, b)),
    "Less": ("less", lambda a, b: np.less(a, b)),
    "Greater": ("greater", lambda a, b: np.greater(a, b)),
    "Not": ("not", lambda a: np.logical_not(a)),
    "MatMul": ("matmul", lambda a, b: np.matmul(a, b)),
    "Gemm": ("gemm", _gemm),
    "Softmax": ("softmax", _softmax),
    "LogSoftmax": ("log_softmax", lambda x, **kw: _softmax(x, log=True, **kw)),
    "ReduceMean": ("reduce_mean", _reduce(np.mean)),
    "ReduceSum": ("reduce_sum", _reduce(np.sum)),
    "ReduceMax": ("reduce_max", _reduce(_extreme(np.max, "min"))),
    "ReduceMin": ("reduce_min", _reduce(_extreme(np.min, "max"))),
    "Concat": ("concat", lambda *xs, axis: np.concatenate(xs, axis=axis)),
    "Split": ("split", _split),
    "Reshape": ("reshape", _reshape),
    "Flatten": ("flatten", _flatten),
    "Transpose": ("transpose", lambda x, perm=None: np.transpose(x, perm)),
    "Squeeze": ("squeeze", _squeeze),
    "Unsqueeze": ("unsqueeze", _unsqueeze),
    "Identity": ("identity", lambda x: x),
    "Cast": ("cast", lambda x, *, to, saturate=1: x.astype(to)),
    "Gather": ("gather", lambda x, i, axis=0: np.take(x, i, axis=axis)),
    "GlobalAveragePool": (
        "global_average_pool",
        lambda x: np.mean(x, axis=tuple(range(2, x.ndim)), keepdims=True).astype(x.dtype),
    ),
    "LayerNormalization": ("layer_norm", _layer_norm),
    "BatchNormalization": ("batch_norm", _batch_norm),
}
KERNELS: dict[str, Kernel] = {name: kernel for name, kernel in OPS.values()}
