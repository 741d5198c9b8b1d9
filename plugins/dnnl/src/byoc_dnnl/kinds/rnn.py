"""The ``rnn`` kind: bidirectional LSTM and GRU (oneDNN's lstm_forward, gru_forward and
lbr_gru_forward; ops.RNN_CELLS). JSON mode only."""

from __future__ import annotations

from typing import Any

import numpy as np
from byoc import NodeView

from byoc_dnnl.kinds.base import Family, Kind, Op, alg_id
from byoc_dnnl.lowering import Lowering


def _rnn(node: NodeView) -> str | None:
    """LSTM and GRU (oneDNN's RNN primitives): bidirectional, with their default activations,
    constant weights, and every sequence of full length. One direction is refused: at batch 1
    oneDNN runs it 1.1-1.7x slower than onnxruntime (AMD EPYC Zen 4: 64 steps of 128 units 0.27
    against 0.21 ms; 599 of 100, 2.1 against 1.5 ms), while the two directions of a
    bidirectional layer run at once, a thread each, faster (shim.cpp's lower_rnn)."""
    a, lstm = node.attrs, node.op_type == "LSTM"
    if a.get("direction", "forward") != "bidirectional":
        return (
            "a one-direction RNN: oneDNN runs its steps slower than onnxruntime (only "
            "bidirectional layers are claimed)"
        )
    if a.get("layout", 0):
        return "layout=1 (batch first) is not supported"
    if "clip" in a or (lstm and a.get("input_forget", 0)):
        return "clip and input_forget are not supported"
    defaults = ["Sigmoid", "Tanh", "Tanh"] if lstm else ["Sigmoid", "Tanh"]
    if "activations" in a and [f.lower() for f in a["activations"]] != [
        f.lower() for f in defaults * 2
    ]:
        return f"activations {a['activations']} are not supported (only the defaults)"
    has_b = len(node.inputs) > 3 and bool(node.inputs[3])
    w, r, b = node.const(1), node.const(2), node.const(3) if has_b else None
    if w is None or r is None or (has_b and b is None):
        return "the weights W, R and B must be constants"
    x = node.input_type(0)
    assert x is not None and x.shape is not None  # static_f32 checked it
    gates, hidden = (4 if lstm else 3), int(a.get("hidden_size", 0))
    size = (2, gates * hidden)
    if (
        len(x.shape) != 3
        or w.shape != (*size, x.shape[2])
        or r.shape != (*size, hidden)
        or (b is not None and b.shape != (2, 2 * gates * hidden))
    ):
        return f"W, R or B do not fit X {list(x.shape)} and hidden_size {hidden}"
    if len(node.inputs) > 4 and node.inputs[4]:
        lengths = node.const(4)
        if lengths is None or not (lengths == x.shape[0]).all():
            return "sequence_lens other than every sequence's full length is not supported"
    if lstm and len(node.inputs) > 7 and node.inputs[7]:
        peepholes = node.const(7)
        if peepholes is None or peepholes.any():
            return "peepholes (input P) are not supported"
    g = node.graph
    if lstm and len(node.outputs) > 2 and node.outputs[2]:
        y_c = node.outputs[2]
        if y_c in g.consumers or y_c in g.outputs:
            return "Y_c (the last cell state) is read: not supported"
    return None


def _lower_lstm(low: Lowering, node: NodeView) -> None:
    _rnn_kernel(low, node, "lstm", [0, 2, 3, 1])  # ONNX's gates i, o, f, c; oneDNN's i, f, c, o


def _lower_gru(low: Lowering, node: NodeView) -> None:
    cell = "lbr_gru" if node.attrs.get("linear_before_reset", 0) else "gru"
    _rnn_kernel(low, node, cell, [0, 1, 2])  # z, r, h: oneDNN's u, r, o


def _rnn_kernel(low: Lowering, node: NodeView, cell: str, order: list[int]) -> None:
    """An rnn kernel writing Y ([T, directions, N, H]); Y_h, when read, is a concat of Y's
    last step of each direction (the check refused LSTMs whose Y_c is read).

    Weights W [D, G*H, C] and R [D, G*H, H] become [D, C, G, H] and [D, H, G, H] in
    oneDNN's gate order; the bias is Wb + Rb per gate, but for lbr_gru, whose candidate gate
    adds Rb inside the reset product: [Wb + Rb (u, r), Wb (o), Rb (o)]."""
    ins = list(node.inputs) + [""] * (8 - len(node.inputs))
    w, r = low.const(ins[1]), low.const(ins[2])
    assert w is not None and r is not None  # the check asked for constant weights
    dirs, gh, _ = w.shape
    gates = len(order)
    hidden = gh // gates

    def ordered(m: np.ndarray) -> np.ndarray:  # [D, G*H, ...] -> [D, G, H, ...], reordered
        return m.reshape(dirs, gates, hidden, *m.shape[2:])[:, order]

    b = low.const(ins[3])
    b = np.zeros((dirs, 2 * gh), np.float32) if b is None else b
    wb, rb = ordered(b[:, :gh]), ordered(b[:, gh:])
    if cell == "lbr_gru":
        bias = np.concatenate([wb[:, :2] + rb[:, :2], wb[:, 2:], rb[:, 2:]], axis=1)
    else:
        bias = wb + rb
    states = [ins[5] or None, (ins[6] or None) if cell == "lstm" else None]
    y = node.outputs[0] if node.outputs and node.outputs[0] else low.fresh_name(ins[0])
    t, n = low.shape(ins[0])[:2]
    low.shapes[y] = (t, dirs, n, hidden)
    direction = str(node.attrs.get("direction", "forward"))
    inputs = [
        ins[0],
        low.new_const(ins[1], ordered(w).transpose(0, 3, 1, 2)),
        low.new_const(ins[2], ordered(r).transpose(0, 3, 1, 2)),
        low.new_const(ins[3] or ins[1], bias),
        *states,
    ]
    low.emit("rnn", inputs, y, node, cell=cell, direction=direction)
    y_h = node.outputs[1] if len(node.outputs) > 1 else ""
    if y_h and (y_h in low.graph.consumers or y_h in low.partition.outputs):
        _last_states(low, y, y_h, direction, node)


def _last_states(low: Lowering, y: str, y_h: str, direction: str, node: NodeView) -> None:
    """Y_h [D, N, H]: each direction's output at its last step (T - 1 forward, 0 in
    reverse), sliced from Y [T, D, N, H]."""
    t, dirs, n, hidden = low.shape(y)
    reverse = [direction == "reverse"] if dirs == 1 else [False, True]
    parts = []
    for d, back in enumerate(reverse):
        part = low.fresh_name(y_h)
        low.shapes[part] = (1, 1, n, hidden)
        low.emit("slice", [y], part, node, offsets=[0 if back else t - 1, d, 0, 0], steps=[1] * 4)
        parts.append(part)
    joined = parts[0]
    if dirs > 1:
        joined = low.fresh_name(y_h)
        low.shapes[joined] = (1, dirs, n, hidden)
        low.emit("concat", parts, joined, node, axis=1)
    low.emit("view", [joined], y_h, node)


def _params(i: int, node: dict[str, Any]) -> tuple[list[int], list[float]]:
    a = node["attrs"]
    return [alg_id(i, "rnn", a, "cell"), alg_id(i, "rnn", a, "direction")], []


FAMILY = Family(
    kinds=[Kind("rnn", 21, _params)],
    ops={
        "LSTM": Op(_rnn, _lower_lstm, json_only=True),
        "GRU": Op(_rnn, _lower_gru, json_only=True),
    },
)
