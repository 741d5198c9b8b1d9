"""Dilated 1-D conv stacks (WaveNet and TCN blocks, random weights): dnnl against onnxruntime.

    python bench/dilated.py [--repeat 20] [--models wavenet,tcn]

The zoo has one real model with dilated 1-D convolutions (the EEG U-Net); these two stacks
cover the other common forms, both padded with zeros as exporters write them:

- ``wavenet``: 64 channels over 16000 steps (one second at 16 kHz), kernel 2, dilations 1 to
  512 twice; each layer a causal Pad, Conv, Tanh and a 1x1 Conv added to its input.
- ``tcn``: 128 channels over 4000 steps, kernel 3, dilations 1 to 256 (a TCN's residual
  block as PyTorch exports it: Conv padded (k - 1) x d on both sides, then a Slice that trims
  the right side, Relu, added to its input).

Each is compiled with ``backends = ["dnnl"]``, ``placement = "static"`` and timed against an
onnxruntime session, interleaved in one process (the baseline with
``session.intra_op.allow_spinning=0``, as ``models.py`` explains). The script prints the machine,
each model's median times and ratio, and how many of its convolutions oneDNN ran as one 1x1
convolution per tap (the dnnl README: taps 32 KiB apart or more).
"""

from __future__ import annotations

import argparse
from functools import partial

import byoc
import numpy as np
import onnx
import onnxruntime as ort
from machine import print_machine
from models import interleaved
from onnx import helper, numpy_helper

RNG = np.random.default_rng(0)


def _const(consts: dict[str, np.ndarray], name: str, value: np.ndarray) -> str:
    consts[name] = value
    return name


def wavenet(layers: int = 20, channels: int = 64, steps: int = 16000) -> onnx.ModelProto:
    nodes, consts, x = [], {}, "x"
    for i in range(layers):
        d = 2 ** (i % 10)
        pads = _const(consts, f"pads{i}", np.array([0, 0, d, 0, 0, 0], np.int64))
        w = _const(consts, f"w{i}", (RNG.standard_normal((channels, channels, 2)) * 0.1))
        b = _const(consts, f"b{i}", RNG.standard_normal(channels) * 0.1)
        w1 = _const(consts, f"w1_{i}", (RNG.standard_normal((channels, channels, 1)) * 0.1))
        nodes += [
            helper.make_node("Pad", [x, pads], [f"p{i}"]),
            helper.make_node("Conv", [f"p{i}", w, b], [f"c{i}"], dilations=[d]),
            helper.make_node("Tanh", [f"c{i}"], [f"t{i}"]),
            helper.make_node("Conv", [f"t{i}", w1], [f"o{i}"]),
            helper.make_node("Add", [x, f"o{i}"], [f"r{i}"]),
        ]
        x = f"r{i}"
    return _model("wavenet", nodes, consts, x, [1, channels, steps])


def tcn(levels: int = 9, channels: int = 128, steps: int = 4000, k: int = 3) -> onnx.ModelProto:
    nodes, consts, x = [], {}, "x"
    zero = _const(consts, "zero", np.array([0], np.int64))
    axis = _const(consts, "axis", np.array([2], np.int64))
    for i in range(levels):
        d = 2**i
        w = _const(consts, f"w{i}", (RNG.standard_normal((channels, channels, k)) * 0.05))
        b = _const(consts, f"b{i}", RNG.standard_normal(channels) * 0.1)
        end = _const(consts, f"end{i}", np.array([steps], np.int64))
        pad = (k - 1) * d
        nodes += [
            helper.make_node("Conv", [x, w, b], [f"c{i}"], dilations=[d], pads=[pad, pad]),
            helper.make_node("Slice", [f"c{i}", zero, end, axis], [f"s{i}"]),
            helper.make_node("Relu", [f"s{i}"], [f"a{i}"]),
            helper.make_node("Add", [x, f"a{i}"], [f"r{i}"]),
        ]
        x = f"r{i}"
    return _model("tcn", nodes, consts, x, [1, channels, steps])


def _model(
    name: str, nodes: list, consts: dict[str, np.ndarray], out: str, shape: list[int]
) -> onnx.ModelProto:
    f32 = onnx.TensorProto.FLOAT
    inits = [
        numpy_helper.from_array(v if v.dtype == np.int64 else v.astype(np.float32), k)
        for k, v in consts.items()
    ]
    graph = helper.make_graph(
        nodes,
        name,
        [helper.make_tensor_value_info("x", f32, shape)],
        [helper.make_tensor_value_info(out, f32, shape)],
        initializer=inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=10)


MODELS = {"wavenet": wavenet, "tcn": tcn}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--models", default=",".join(MODELS))
    args = parser.parse_args()
    print_machine()
    for name in args.models.split(","):
        model = MODELS[name]()
        shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
        inputs = {"x": RNG.standard_normal(shape).astype(np.float32)}
        compiled = byoc.compile(model, {"backends": ["dnnl"], "compile": {"placement": "static"}})
        options = ort.SessionOptions()
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        session = ort.InferenceSession(model.SerializeToString(), options)
        ours = compiled.run(inputs)[model.graph.output[0].name]
        err = np.max(np.abs(ours - session.run(None, inputs)[0]))
        ours, theirs = interleaved(
            [partial(compiled.run, inputs), partial(session.run, None, inputs)],
            args.repeat,
            3,
            0.01,
        )
        impls = [
            i
            for s in compiled.steps
            if s.unit.backend == "dnnl"
            for _, i in s.runtime.implementations()
        ]
        convs = [i for i in impls if i.startswith("convolution ")]
        print(
            f"{name}: byoc {ours * 1e3:8.2f} ms  onnxruntime {theirs * 1e3:8.2f} ms  "
            f"ratio {ours / theirs:5.2f}  max |diff| {err:.1e}  partitions "
            f"{len(compiled.plan.partitions)}; {len(convs)} oneDNN convolutions, "
            f"{sum('1x1' in i for i in convs)} of them 1x1"
        )


if __name__ == "__main__":
    main()
