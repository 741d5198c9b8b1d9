"""Memory and time of byoc on a model with large weights, against plain onnxruntime.

    .venv/bin/python bench/large_model.py                 # 512 MB of weights
    .venv/bin/python bench/large_model.py --mb 128 --configs static,measured

The model: x -> MatMul -> Relu -> MatMul, two square float32 weights of ``--mb`` in all, saved
with external data in a temporary directory. Each cell is one child process (so its peak
resident memory is its own, ``ru_maxrss``) that reads the model and runs it once: onnxruntime
(``InferenceSession(path)``), or ``byoc.compile(path, config)`` for each config (``static``:
every backend, static placement; ``measured``: the default config, with ``remeasure`` so
that cached verdicts do not skip the timing). Printed per cell: the peak memory, as a
multiple of the weights and of onnxruntime's, and the wall time.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

from machine import print_machine

CHILD = r"""
import json, resource, sys, time
import numpy as np
path, config = sys.argv[1], json.loads(sys.argv[2])
start = time.perf_counter()
if config is None:
    import onnxruntime as ort
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    width = session.get_inputs()[0].shape[1]
    session.run(None, {"x": np.ones((1, width), np.float32)})
else:
    import byoc
    model = byoc.compile(path, config)
    width = model.plan.model.graph.input[0].type.tensor_type.shape.dim[1].dim_value
    model.run({"x": np.ones((1, width), np.float32)})
seconds = time.perf_counter() - start
print(json.dumps({"peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "seconds": seconds}))
"""

CONFIGS = {
    "static": {"compile": {"placement": "static"}},
    "measured": {"compile": {"remeasure": True}},  # timed afresh, not from the cache
}


def build(path: str, megabytes: int) -> None:
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    width = int((megabytes * 2**20 / 8) ** 0.5)
    rng = np.random.default_rng(0)
    weights = [
        numpy_helper.from_array(rng.standard_normal((width, width), np.float32) / width, name)
        for name in ("w1", "w2")
    ]
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["x", "w1"], ["h"]),
            helper.make_node("Relu", ["h"], ["r"]),
            helper.make_node("MatMul", ["r", "w2"], ["y"]),
        ],
        "large",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, width])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, width])],
        initializer=weights,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(model, path, save_as_external_data=True, location="large.data")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=512, help="megabytes of weights")
    parser.add_argument("--configs", default="static,measured", help="of: static, measured")
    args = parser.parse_args()
    print_machine()
    with tempfile.TemporaryDirectory(prefix="byoc-large-") as tmp:
        path = os.path.join(tmp, "large.onnx")
        build(path, args.mb)
        print(f"model: {args.mb} MB of float32 weights (MatMul, Relu, MatMul)")
        print(f"{'run':<12} {'peak MB':>8} {'x weights':>9} {'x ort':>6} {'seconds':>8}")
        base = None
        for name in ["onnxruntime", *args.configs.split(",")]:
            config = None if name == "onnxruntime" else CONFIGS[name]
            out = subprocess.run(
                [sys.executable, "-c", CHILD, path, json.dumps(config)],
                capture_output=True,
                text=True,
            )
            if out.returncode != 0:
                tail = (out.stderr.strip().splitlines() or ["?"])[-1]
                print(f"{name:<12} failed (exit {out.returncode}): {tail}")
                continue
            cell = json.loads(out.stdout.strip().splitlines()[-1])
            base = base or cell["peak_mb"]
            print(
                f"{name:<12} {cell['peak_mb']:>8.0f} {cell['peak_mb'] / args.mb:>9.1f} "
                f"{cell['peak_mb'] / base:>6.1f} {cell['seconds']:>8.1f}"
            )


if __name__ == "__main__":
    main()
