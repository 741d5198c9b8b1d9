"""The annotation helpers every kind's checks share: the types a kernel reads and writes,
constants (QDQ weights dequantized), QDQ groups, and work on integer tensors (host steps).

Every check returns ``None`` to accept or a reason (shown by ``byoc explain``). The backend
handles float32 tensors of static shape only; weights of Conv, ConvTranspose and Gemm must be
constants (they are reordered once into oneDNN's preferred layout). Each op's own check is its
kind's table entry (``byoc_dnnl.kinds``), which also assembles ``supported_ops`` and the pattern
table.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import onnx
from byoc import NodeView

Check = Callable[[NodeView], str | None]

VIEWS = ("Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Dropout")
REDUCE = ("ReduceMean", "ReduceMax", "ReduceSum")


def weighted(node: NodeView) -> bool:
    """A layer with constant weights, the work oneDNN runs faster than onnxruntime: its weights
    are reordered once into a blocked layout and its bias and activation fused (an LSTM's or
    GRU's, checked constant by ``_rnn``, once into its gates' layout).

    A partition without one only moves memory-bound work (pooling, normalization, softmax,
    elementwise ops) or products of two activations (attention's scores), which onnxruntime
    does as well; it would pay for its boundary reorders and the onnxruntime fusions it cuts (a
    quantized MiniLM's attention blocks on dnnl made it 1.23x slower; its embedding
    Add-Add-LayerNormalization alone, 1.12x).
    """
    if node.op_type in ("Conv", "ConvTranspose", "LSTM", "GRU"):
        return True
    if node.op_type in ("MatMulInteger", "ConvInteger"):  # dnnl.qmatmul, dnnl.qconv
        return node.const(1) is not None
    return node.op_type in ("MatMul", "Gemm") and any(constant(node, i) is not None for i in (0, 1))


def static_f32(node: NodeView) -> str | None:
    """Every tensor the node reads or writes is float32 with a known static shape."""
    for i, name in enumerate(node.inputs):
        if not name:
            continue
        t = node.input_type(i)
        if t is None or t.dtype is None or t.shape is None:
            return f"the type of input '{name}' is unknown"
        if t.shape == () and constant(node, i) is None:  # even one the kernel does not read
            return f"input '{name}' is a scalar computed at run time; ranks 1 to 6 are supported"
        if len(t.shape) > 6:
            return f"input '{name}' has rank {len(t.shape)}; ranks 1 to 6 are supported"
        if node.op_type in (*VIEWS, *REDUCE, "Slice", "Split", "Pad", "Resize", "Expand") and i:
            continue  # shapes, axes, Slice's indices, Split's, Pad's, Resize's sizes: int64
        if node.op_type in ("LSTM", "GRU") and i == 4:
            continue  # sequence_lens: int32
        if node.op_type in ("Clip", "Pow") and i > 0:
            if constant(node, i) is None:
                what = "exponent" if node.op_type == "Pow" else "bounds"
                return f"{node.op_type}'s {what} must be constants"
            continue
        if t.dtype != np.float32:
            return f"input '{name}' is {t.dtype}; only float32 is supported"
        if not t.is_static:
            return f"input '{name}' has a dynamic shape {t}; fix it with [shapes]"
        if 0 in (t.shape or ()):
            return f"input '{name}' is empty (shape {t}); oneDNN needs non-zero dims"
    for i, name in enumerate(node.outputs):
        if not name:
            continue
        t = node.output_type(i)
        if t is None or not t.is_static:
            return f"output '{name}' has no static shape; fix the input shapes with [shapes]"
        if 0 in (t.shape or ()):
            return f"output '{name}' is empty (shape {t}); oneDNN needs non-zero dims"
        if len(t.shape or ()) > 6 or (len(t.shape or ()) == 0 and node.op_type not in VIEWS):
            return f"output '{name}' has rank {len(t.shape or ())}; ranks 1 to 6 are supported"
    return None


def onnx_axes(value: Any, rank: int) -> list[int]:
    """ONNX axes (negative ones count from the end) as indices in ``range(rank)``."""
    return [int(a) % rank for a in np.asarray(value).reshape(-1)]


def refusal(found: Any) -> str | None:
    """A check's reason from a function that returns what it found, or why not (a str)."""
    return found if isinstance(found, str) else None


def rank_of(node: NodeView, i: int = 0) -> int:
    t = node.input_type(i)
    return len(t.shape) if t is not None and t.shape is not None else -1


def constant(node: NodeView, i: int) -> np.ndarray | None:
    """Input ``i`` when it is a constant, or a DequantizeLinear of constants (QDQ weights and
    biases, dequantized as onnxruntime does), else None."""
    value = node.const(i)
    graph = node.graph
    producer = graph.producer.get(node.inputs[i]) if i < len(node.inputs) else None
    if value is not None or producer is None:
        return value
    dq = graph.view(producer)
    if dq.op_type != "DequantizeLinear" or dq.const(0) is None or dequantized_constant(dq):
        return None
    q, scale = dq.const(0), dq.const(1)
    zero = dq.const(2) if len(dq.inputs) > 2 and dq.inputs[2] else np.zeros_like(scale)
    assert q is not None and scale is not None and zero is not None
    return dequantized(q, scale, zero, int(dq.attrs.get("axis", 1)))


def dequantized(q: np.ndarray, scale: np.ndarray, zero: np.ndarray, axis: int) -> np.ndarray:
    """DequantizeLinear of constants as onnxruntime computes it, ``(q - zero) * scale`` in
    float32: one scale and zero point, or one per entry along ``axis``."""
    if scale.size > 1:
        shape = [1] * q.ndim
        shape[axis % q.ndim] = scale.size
        scale, zero = scale.reshape(shape), zero.reshape(shape)
    return (q.astype(np.float32) - zero.astype(np.float32)) * scale.astype(np.float32)


def in_qdq_group(node: NodeView) -> str | None:
    """A node that reads a DequantizeLinear stays with onnxruntime, which fuses DequantizeLinear
    -> op -> QuantizeLinear into one int8 kernel (a QDQ MobileNet ran 2.8x slower with its
    pooling and softmax on dnnl)."""
    graph = node.graph
    for name in node.inputs:
        i = graph.producer.get(name) if name else None
        dq = i is not None and graph.nodes[i].op_type == "DequantizeLinear"
        if dq and dequantize_check(graph.view(i)) is not None:  # type: ignore[arg-type]
            return "reads a DequantizeLinear: onnxruntime runs this QDQ group in int8"
    return None


def typed(check: Check) -> Check:
    def run(node: NodeView) -> str | None:
        return static_f32(node) or in_qdq_group(node) or check(node)

    run.__doc__ = check.__doc__
    return run


def integer_input(node: NodeView, i: int = 0) -> bool:
    t = node.input_type(i)
    return t is not None and t.dtype is not None and (t.dtype.kind in "iub")


def host_check(node: NodeView) -> str | None:
    """Work on integer tensors before the first kernel (byoc_dnnl.host): a view or Expand of an
    integer tensor, its Cast to float32, a Gather of a constant table's rows (token embeddings:
    float32, or u8 or i8 before a DequantizeLinear). It reads only inputs, constants and other
    such ops, so it runs before the native net."""
    data = 1 if node.op_type == "Gather" else 0
    if not integer_input(node, data):
        t = node.input_type(data)
        return (
            f"input '{node.inputs[data]}' is {t.dtype if t else 'of unknown type'}: "
            f"{node.op_type} of an integer tensor only is supported"
        )
    if node.const(data) is not None:
        return f"input '{node.inputs[data]}' is a constant"
    for name in [*node.inputs[:2], *node.outputs[:1]]:
        t = node.graph.type_of(name) if name else None
        if name and (t is None or not t.is_static or 0 in (t.shape or ())):
            return f"'{name}' has no static, non-empty shape; fix the input shapes with [shapes]"
    shaped = node.op_type in ("Reshape", "Squeeze", "Unsqueeze", "Expand")
    if shaped and len(node.inputs) > 1 and node.inputs[1] and node.const(1) is None:
        return "the shape/axes operand is not a constant"
    if node.op_type == "Cast" and node.attrs.get("to") != onnx.TensorProto.FLOAT:
        return "only a Cast to float32 is supported"
    if node.op_type == "Gather":
        table = constant(node, 0)
        if table is None or table.dtype.name not in ("float32", "uint8", "int8"):
            return "Gather reads rows of a constant float32, u8 or i8 table only"
    if node.op_type == "Transpose":
        return permutation(node)
    return None


def permutation(node: NodeView) -> str | None:
    rank = rank_of(node)
    perm = node.attrs.get("perm")
    if perm is not None and sorted(int(p) for p in perm) != list(range(rank)):
        return f"perm {list(perm)} is not a permutation of the {rank} axes"
    return None


def qparams(node: NodeView) -> tuple[float, int, str] | None:
    """A QuantizeLinear's or DequantizeLinear's one scale and zero point (per tensor: each one
    constant value; an absent zero point is 0) and its quantized type, or None."""
    scale = node.const(1) if len(node.inputs) > 1 and node.inputs[1] else None
    zero = node.const(2) if len(node.inputs) > 2 and node.inputs[2] else np.zeros(1, np.uint8)
    if scale is None or zero is None or scale.size != 1 or zero.size != 1:
        return None
    s = np.float32(scale.reshape(-1)[0])
    if scale.dtype != np.float32 or not (np.isfinite(s) and s >= np.finfo(np.float32).tiny):
        return None
    if zero.dtype.name not in ("uint8", "int8") or node.attrs.get("block_size", 0):
        return None
    return float(s), int(zero.reshape(-1)[0]), zero.dtype.name


def quantize_check(node: NodeView) -> str | None:
    """A QuantizeLinear to u8 or s8 (``quantize_static``'s QDQ format): one division, rounding
    and clip, fused into the kernel before it. It is claimed with the DequantizeLinears that read
    it, the only readers it may have, so its integers never leave the partition; an int8
    convolution reads them as they are."""
    t = node.input_type(0)
    if t is None or t.dtype != np.float32 or not t.is_static or not t.shape or 0 in t.shape:
        return f"input '{node.inputs[0]}' must be float32 of a static shape (rank >= 1)"
    params = qparams(node)
    if params is None:
        return "the scale (positive float32) and zero point (u8 or s8) must be one constant each"
    out = node.output_type(0)
    if out is None or out.dtype is None or out.dtype.name != params[2]:
        return f"its output type is not its zero point's ({params[2]})"
    graph, y = node.graph, node.outputs[0]
    readers = [graph.view(r) for r in graph.consumers.get(y, [])]
    if y in graph.outputs or not readers:
        return "its output is a model output, or nothing reads it"
    if any(r.op_type != "DequantizeLinear" or qparams(r) != params for r in readers):
        return "read by other than a DequantizeLinear of its scale and zero point"
    return None


def dequantize_check(node: NodeView) -> str | None:
    """A DequantizeLinear of a claimed QuantizeLinear's output (a kernel's subtraction and
    product, fused into the kernel after it; an int8 convolution reads the integers instead);
    of constants (weights, one scale per tensor or per channel, biases in int32): a float32
    constant; of a quantized embedding table's rows (``quantize_dynamic`` quantizes a
    transformer's Gathers), a host step."""
    t = node.input_type(0)
    if t is None or t.dtype is None or not t.is_static:
        return "only a DequantizeLinear of a static shape is supported"
    graph = node.graph
    if node.const(0) is not None:
        return dequantized_constant(node)
    if t.dtype.name not in ("uint8", "int8"):
        return "only a DequantizeLinear of u8 or i8 values is supported"
    producer = graph.producer.get(node.inputs[0])
    if producer is not None and graph.nodes[producer].op_type == "QuantizeLinear":
        quantize = graph.view(producer)
        if quantize_check(quantize) is not None:
            return "its QuantizeLinear runs elsewhere"
        return None
    if qparams(node) is None:
        return "the scale and zero point must be one constant each (per-tensor)"
    if producer is None or graph.nodes[producer].op_type != "Gather":
        return "a DequantizeLinear of computed values not quantized by a QuantizeLinear"
    return None


def dequantized_constant(node: NodeView) -> str | None:
    """Constant values, with one scale and zero point, or one per entry along ``axis``: a
    float32 constant to whatever reads it."""
    q = node.const(0)
    assert q is not None
    scale = node.const(1) if len(node.inputs) > 1 and node.inputs[1] else None
    zero = node.const(2) if len(node.inputs) > 2 and node.inputs[2] else None
    if q.dtype.name not in ("uint8", "int8", "int32") or scale is None or scale.dtype != np.float32:
        return "only a DequantizeLinear of u8, i8 or i32 constants by a float32 scale is supported"
    axis = int(node.attrs.get("axis", 1))
    fits = scale.size == 1 or (
        scale.ndim == 1 and -q.ndim <= axis < q.ndim and scale.size == q.shape[axis]
    )
    if not fits or (zero is not None and (zero.dtype != q.dtype or zero.size != scale.size)):
        return "the scale and zero point must be one value each, or one per entry along axis"
    if node.attrs.get("block_size", 0):
        return "a blocked DequantizeLinear is not supported"
    return None


def or_host(check: Check) -> Check:
    """A view's check, or the host check when it reshapes an integer tensor."""

    def run(node: NodeView) -> str | None:
        return host_check(node) if integer_input(node) else check(node)

    run.__doc__ = check.__doc__
    return run
