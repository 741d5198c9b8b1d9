"""The elementwise ONNX ops ccompiler claims, each as a C expression over its operands.

Every op here is elementwise with numpy broadcasting, so a chain or tree of them fuses into one
loop. An emitter gets its operands as C atoms (a temporary, a load or a literal: cheap to repeat)
and returns one C expression.
"""

from __future__ import annotations

import numbers
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from onnx import helper

# dtype name -> C type. bool is one byte in numpy; the C code only ever writes 0 or 1 and
# normalizes what it reads with `!= 0`.
CTYPES = {"float32": "float", "int32": "int32_t", "int64": "int64_t", "bool": "uint8_t"}
_UNSIGNED = {"int32": "uint32_t", "int64": "uint64_t"}
FLOAT = ("float32",)
INTS = ("int32", "int64")
NUMERIC = ("float32", "int32", "int64")
ANY = ("float32", "int32", "int64", "bool")


@dataclass(frozen=True)
class Emit:
    """What an emitter knows: operand atoms (None when absent), attributes, T, opset,
    and the constant value of each operand (None when not constant)."""

    args: list[str | None]
    attrs: dict[str, Any]
    dtype: str
    opset: int
    consts: list[np.ndarray | None]
    out_dtype: str

    @property
    def a(self) -> str:
        assert self.args[0] is not None
        return self.args[0]

    @property
    def b(self) -> str:
        assert self.args[1] is not None
        return self.args[1]

    def lit(self, value: float) -> str:
        """A literal of T."""
        return literal(value, self.dtype)

    def attr(self, name: str, default: float) -> str:
        return literal(self.attrs.get(name, default), "float32")


@dataclass(frozen=True)
class Op:
    """One op type: the dtypes T may take, its emitter, the output dtype (T unless set), the
    operand that defines T, the first opset with these semantics, and the operand count."""

    dtypes: tuple[str, ...]
    emit: Callable[[Emit], str]
    out: str | None = None
    t_input: int = 0
    since: int = 7
    arity: tuple[int, int] = (1, 1)


def ctype(dtype: str) -> str:
    """The C type of a dtype: CTYPES is the closed set of types the generated C uses (a dtype
    from the partition reaches the C only through here); ValueError for any other."""
    if not isinstance(dtype, str) or dtype not in CTYPES:
        raise ValueError(f"dtype {dtype!r:.40} has no C type here (ccompiler: {', '.join(CTYPES)})")
    return CTYPES[dtype]


def literal(value: Any, dtype: str) -> str:
    """A C literal with exactly this value: floats in their shortest float32 spelling. The one
    way a number reaches the C: ``value`` must be a number (an integer for an integer dtype;
    never a string, whatever it spells) and ``dtype`` one of CTYPES, else ValueError."""
    ctype(dtype)
    integral = isinstance(value, numbers.Integral | np.bool_)
    if not (integral or (dtype == "float32" and isinstance(value, numbers.Real))):
        raise ValueError(f"{value!r:.40} is not a {dtype} number")
    if dtype == "float32":
        f = np.float32(value)
        if np.isnan(f):
            return "NAN"
        if np.isinf(f):
            return "INFINITY" if f > 0 else "(-INFINITY)"
        text = str(f)
        if "." not in text and "e" not in text:
            text += ".0"
        return f"{text}f" if f >= 0 else f"({text}f)"
    if dtype == "bool":
        return "1" if value else "0"
    i, bits = int(value), 32 if dtype == "int32" else 64
    if not -(2 ** (bits - 1)) <= i < 2 ** (bits - 1):
        raise ValueError(f"{i} does not fit {dtype}")
    if dtype == "int32":
        return str(i) if i > -(2**31) else "(-2147483647 - 1)"
    return f"INT64_C({i})" if i > -(2**63) else "(-INT64_C(9223372036854775807) - 1)"


# -- emitters ----------------------------------------------------------------------------------


def _wrap(e: Emit, expr: str) -> str:
    """Integer arithmetic through the unsigned type: wraps like onnxruntime, never C's UB."""
    return f"({ctype(e.dtype)})({expr})"


def _u(e: Emit, x: str) -> str:
    return f"({_UNSIGNED[e.dtype]}){x}"


def _arith(symbol: str) -> Callable[[Emit], str]:
    def emit(e: Emit) -> str:
        if e.dtype in INTS:
            return _wrap(e, f"{_u(e, e.a)} {symbol} {_u(e, e.b)}")
        return f"({e.a} {symbol} {e.b})"

    return emit


def _div(e: Emit) -> str:
    """x / 0 and MIN / -1 trap in C; they give 0 and MIN (wrapped) here. The kernel notes
    an integer x / 0 (``divides_integers``) and the partition fails, as onnxruntime does."""
    if e.dtype in INTS:
        neg = _wrap(e, f"{_u(e, '0')} - {_u(e, e.a)}")
        return f"({e.b} == 0 ? 0 : ({e.b} == -1 ? {neg} : {e.a} / {e.b}))"
    return f"({e.a} / {e.b})"


def select(cond: str, a: str, b: str, dtype: str) -> str:
    """``cond ? a : b``; floats pick through a bit mask (``byoc_select``), so the loop has no
    control flow for the vectorizer to convert."""
    if dtype == "float32":
        return f"byoc_select({cond}, {a}, {b})"
    return f"({cond} ? {a} : {b})"


def _neg(e: Emit) -> str:
    return _wrap(e, f"{_u(e, '0')} - {_u(e, e.a)}") if e.dtype in INTS else f"(-{e.a})"


def _abs(e: Emit) -> str:
    return f"({e.a} < 0 ? {_neg(e)} : {e.a})" if e.dtype in INTS else f"fabsf({e.a})"


def _fold(pick: str) -> Callable[[Emit], str]:
    """Variadic Max/Min: ``pick`` is ``>`` or ``<``. A NaN operand gives NaN, as in
    onnxruntime: a NaN ``x`` is taken by ``x != x``, a NaN ``acc`` fails the comparison."""

    def emit(e: Emit) -> str:
        acc = e.a
        for x in filter(None, e.args[1:]):
            take = f"{x} {pick} {acc}" if e.dtype in INTS else f"({x} {pick} {acc} || {x} != {x})"
            acc = select(take, x, acc, e.dtype)
        return acc

    return emit


def _sum(e: Emit) -> str:
    if e.dtype in INTS:
        return _wrap(e, " + ".join(_u(e, x) for x in e.args if x))
    return "(" + " + ".join(x for x in e.args if x) + ")"


def _mean(e: Emit) -> str:
    return f"({_sum(e)} / {literal(len(e.args), 'float32')})"


def _pow(e: Emit) -> str:
    y = e.consts[1]
    if y is not None and y.size == 1:
        special = {
            2.0: f"({e.a} * {e.a})",
            3.0: f"({e.a} * {e.a} * {e.a})",
            1.0: e.a,
            0.5: f"sqrtf({e.a})",
            -1.0: f"(1.0f / {e.a})",
            -0.5: f"(1.0f / sqrtf({e.a}))",
        }
        exponent = float(y.reshape(()))
        if exponent in special:
            return special[exponent]
    return f"powf({e.a}, (float){e.b})"


def _clip(e: Emit) -> str:
    y = e.a
    if e.opset < 11:
        lo: str | None = e.attr("min", -3.4028234663852886e38)
        hi: str | None = e.attr("max", 3.4028234663852886e38)
    else:
        lo = e.args[1] if len(e.args) > 1 else None
        hi = e.args[2] if len(e.args) > 2 else None
    if lo:
        y = select(f"{y} < {lo}", lo, y, e.dtype)
    if hi:
        y = select(f"{y} > {hi}", hi, y, e.dtype)
    return y


def _relu(e: Emit) -> str:
    zero = e.lit(0)
    return select(f"{e.a} < {zero}", zero, e.a, e.dtype)  # NaN fails the test: NaN out


def _sign(e: Emit) -> str:
    sign = f"({ctype(e.dtype)})(({e.a} > 0) - ({e.a} < 0))"
    return sign if e.dtype in INTS else select(f"{e.a} != {e.a}", e.a, sign, e.dtype)


def _gelu(e: Emit) -> str:
    approximate = e.attrs.get("approximate", "none")
    if approximate not in ("none", "tanh"):  # the check refuses others; a loaded file too
        raise ValueError(f"Gelu approximate={approximate!r:.40} (ccompiler: none, tanh)")
    if approximate == "tanh":
        inner = f"0.7978845608f * ({e.a} + 0.044715f * {e.a} * {e.a} * {e.a})"
        return f"(0.5f * {e.a} * (1.0f + byoc_tanh({inner})))"
    return f"(0.5f * {e.a} * (1.0f + byoc_erf({e.a} * 0.70710678118654752f)))"


def _cast(e: Emit) -> str:
    if e.out_dtype == "bool":
        return f"(uint8_t)({e.a} != 0)"
    return f"({ctype(e.out_dtype)}){e.a}"


def _compare(symbol: str) -> Callable[[Emit], str]:
    return lambda e: f"(uint8_t)({e.a} {symbol} {e.b})"


def _f(template: str) -> Callable[[Emit], str]:
    """An emitter from a template over ``{a}``, ``{b}`` and float attributes ``{alpha}``...."""

    def emit(e: Emit) -> str:
        values = {
            k: literal(v, "float32") for k, v in e.attrs.items() if isinstance(v, float | int)
        }
        return template.format(a=e.a, b=e.args[1] if len(e.args) > 1 else "", **values)

    return emit


def _with_defaults(emit: Callable[[Emit], str], **defaults: float) -> Callable[[Emit], str]:
    def wrapped(e: Emit) -> str:
        attrs = {**defaults, **e.attrs}
        return emit(Emit(e.args, attrs, e.dtype, e.opset, e.consts, e.out_dtype))

    return wrapped


BINARY = (2, 2)
VARIADIC = (1, 2**31)

OPS: dict[str, Op] = {
    # arithmetic, with broadcasting
    "Add": Op(NUMERIC, _arith("+"), arity=BINARY),
    "Sub": Op(NUMERIC, _arith("-"), arity=BINARY),
    "Mul": Op(NUMERIC, _arith("*"), arity=BINARY),
    "Div": Op(NUMERIC, _div, arity=BINARY),
    "Pow": Op(FLOAT, _pow, arity=BINARY),
    "Max": Op(NUMERIC, _fold(">"), since=8, arity=VARIADIC),
    "Min": Op(NUMERIC, _fold("<"), since=8, arity=VARIADIC),
    "Sum": Op(FLOAT, _sum, since=8, arity=VARIADIC),
    "Mean": Op(FLOAT, _mean, since=8, arity=VARIADIC),
    # unary
    "Neg": Op(NUMERIC, _neg),
    "Abs": Op(NUMERIC, _abs),
    "Sign": Op(NUMERIC, _sign, since=9),
    "Relu": Op(NUMERIC, _relu),
    "Identity": Op(ANY, lambda e: e.a),
    "Reciprocal": Op(FLOAT, _f("(1.0f / {a})")),
    "Sqrt": Op(FLOAT, _f("sqrtf({a})")),
    "Exp": Op(FLOAT, _f("byoc_exp({a})")),
    "Log": Op(FLOAT, _f("byoc_log({a})")),
    "Tanh": Op(FLOAT, _f("byoc_tanh({a})")),
    "Erf": Op(FLOAT, _f("byoc_erf({a})"), since=9),
    "Sigmoid": Op(FLOAT, _f("byoc_sigmoid({a})")),
    "Softplus": Op(FLOAT, _f("byoc_softplus({a})")),
    "Softsign": Op(FLOAT, _f("({a} / (1.0f + fabsf({a})))")),
    "Floor": Op(FLOAT, _f("floorf({a})")),
    "Ceil": Op(FLOAT, _f("ceilf({a})")),
    "Round": Op(FLOAT, _f("rintf({a})"), since=11),  # half to even, like ONNX
    "Sin": Op(FLOAT, _f("sinf({a})")),
    "Cos": Op(FLOAT, _f("cosf({a})")),
    "LeakyRelu": Op(
        FLOAT, _with_defaults(_f("byoc_select({a} >= 0.0f, {a}, {alpha} * {a})"), alpha=0.01)
    ),
    "ThresholdedRelu": Op(
        FLOAT, _with_defaults(_f("byoc_select({a} > {alpha}, {a}, 0.0f)"), alpha=1.0), since=10
    ),
    "Elu": Op(
        FLOAT,
        _with_defaults(
            _f("byoc_select({a} >= 0.0f, {a}, {alpha} * (byoc_exp({a}) - 1.0f))"), alpha=1.0
        ),
    ),
    "Selu": Op(
        FLOAT,
        _with_defaults(
            _f("({gamma} * byoc_select({a} > 0.0f, {a}, {alpha} * byoc_exp({a}) - {alpha}))"),
            alpha=1.67326319217681884765625,
            gamma=1.05070102214813232421875,
        ),
    ),
    "HardSigmoid": Op(
        FLOAT, _with_defaults(_f("byoc_clamp01({alpha} * {a} + {beta})"), alpha=0.2, beta=0.5)
    ),
    "HardSwish": Op(FLOAT, _f("({a} * byoc_clamp01(0.16666667f * {a} + 0.5f))"), since=14),
    "Mish": Op(FLOAT, _f("({a} * byoc_tanh(byoc_softplus({a})))"), since=18),
    "Gelu": Op(FLOAT, _gelu, since=20),
    "Clip": Op(NUMERIC, _clip, since=6, arity=(1, 3)),
    # comparisons and logic
    "Equal": Op(ANY, _compare("=="), out="bool", arity=BINARY),
    "Less": Op(NUMERIC, _compare("<"), out="bool", since=9, arity=BINARY),
    "Greater": Op(NUMERIC, _compare(">"), out="bool", since=9, arity=BINARY),
    "LessOrEqual": Op(NUMERIC, _compare("<="), out="bool", since=12, arity=BINARY),
    "GreaterOrEqual": Op(NUMERIC, _compare(">="), out="bool", since=12, arity=BINARY),
    "Not": Op(("bool",), _f("(uint8_t)({a} ^ 1)")),
    "And": Op(("bool",), _f("(uint8_t)({a} & {b})"), arity=BINARY),
    "Or": Op(("bool",), _f("(uint8_t)({a} | {b})"), arity=BINARY),
    "Xor": Op(("bool",), _f("(uint8_t)({a} ^ {b})"), arity=BINARY),
    "Where": Op(
        ANY,
        lambda e: select(str(e.args[0]), str(e.args[1]), str(e.args[2]), e.out_dtype),
        t_input=1,
        since=9,
        arity=(3, 3),
    ),
    "Cast": Op(ANY, _cast, since=6),
}


def output_dtype(op_type: str, attrs: dict[str, Any], t: str) -> str | None:
    """The dtype an op writes given T, or None when it is not one of ours."""
    op = OPS[op_type]
    if op_type == "Cast":
        try:
            name = np.dtype(helper.tensor_dtype_to_np_dtype(attrs["to"])).name
        except (KeyError, TypeError, ValueError):
            return None
        return name if name in CTYPES else None
    return op.out or t


def divides_integers(op_type: str, dtype: str) -> bool:
    """The node divides integers: its kernel must check the divisor for 0."""
    return op_type == "Div" and dtype in INTS


def emit(op_type: str, e: Emit) -> str:
    """The C expression of one node."""
    return OPS[op_type].emit(e)
