"""Two zoo models built with ``onnx.helper`` and seeded random weights (no torch), spelled as the
PyTorch exporters write them (opset 17, a ``Linear`` as ``Gemm`` with ``transB=1``, batch norms
folded into the convolutions), for bench/zoo_models.py.

* ``dlrm``: a DLRM-style recommender (Criteo-like: 13 numeric features, 8 categorical ones).
  Each categorical feature is an embedding bag: a table of ``rows x 64``, a bag of a fixed number
  of ids per sample (``sparse_<i> [batch_size, bag]``, int64), ``Gather`` then ``ReduceSum``
  over the bag (``nn.EmbeddingBag(mode="sum")`` with equal bags). The numeric features go
  through a bottom MLP (13 -> 512 -> 256 -> 64, ReLU). The pairwise interaction: the 9 vectors
  of 64 stacked (``Unsqueeze``, ``Concat``), multiplied by their transpose (a batched
  ``MatMul``: [batch, 9, 9]), the 36 pairs below the diagonal gathered, concatenated with the
  bottom MLP's output; a top MLP (100 -> 512 -> 256 -> 1, ReLU) and a ``Sigmoid``. Tables of
  100000 down to 500 rows (48 MB of weights).
* ``mbconv-se``: a MobileNetV3 / EfficientNet-style net of inverted residual blocks at 224x224:
  a 3x3 stride-2 stem conv, then per block a 1x1 expand conv, a 3x3 depthwise conv, the
  activation (ReLU, ``HardSwish``, or SiLU as ``x * Sigmoid(x)``), squeeze-excite
  (``GlobalAveragePool -> 1x1 conv -> ReLU -> 1x1 conv -> HardSigmoid -> Mul``), a 1x1
  project conv and a residual ``Add`` where the shape allows; a 1x1 head conv, pooling and two
  ``Gemm`` (1280, 1000 classes). Batch 1.
* ``trees``: a gradient-boosted tree ensemble as skl2onnx writes a regressor
  (``ai.onnx.ml.TreeEnsembleRegressor``): 32 trees of depth 4 on 16 features, one row. A
  microsecond model: byoc's own cost per call is most of what it could add.
"""

from __future__ import annotations

from typing import Any

import numpy as np

BATCH = 128  # the recommender's batch in the zoo
DENSE = 13  # numeric features (Criteo's)
EMBED = 64  # the embedding dim, also the bottom MLP's output
TABLES = (100000, 50000, 20000, 10000, 5000, 2000, 1000, 500)  # rows per categorical feature
BAGS = (4, 2, 8, 1, 4, 2, 1, 3)  # ids per sample in each feature's bag
BOTTOM = (512, 256, EMBED)
TOP = (512, 256, 1)

# MBConv blocks: (expanded channels, output channels, stride, activation, squeeze-excite)
BLOCKS = (
    (16, 16, 1, "relu", False),  # expansion 1: no expand conv
    (64, 24, 2, "relu", False),
    (72, 24, 1, "relu", False),
    (72, 40, 2, "hardswish", True),
    (120, 40, 1, "hardswish", True),
    (240, 80, 2, "silu", True),
    (480, 80, 1, "silu", True),
    (480, 112, 1, "silu", True),
)
STEM = 16
HEAD = (672, 1280, 1000)  # head conv channels, hidden features, classes
IMAGE = 224
FEATURES, TREES, DEPTH = 16, 32, 4  # the tree ensemble


def shapes(name: str) -> dict[str, list[int]]:
    """The zoo's fixed input shapes of ``dlrm`` or ``mbconv-se``."""
    if name == "dlrm":
        found = {"dense": [BATCH, DENSE]}
        return found | {f"sparse_{i}": [BATCH, bag] for i, bag in enumerate(BAGS)}
    if name == "mbconv-se":
        return {"image": [1, 3, IMAGE, IMAGE]}
    if name == "trees":
        return {"features": [1, FEATURES]}
    raise ValueError(f"no built model {name!r}: 'dlrm', 'mbconv-se' or 'trees'")


class _Graph:
    """Nodes and initializers under construction, with fresh value names."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.nodes: list[Any] = []
        self.inits: dict[str, np.ndarray] = {}
        self.count = 0

    def const(self, name: str, value: Any, dtype: Any = np.float32) -> str:
        self.inits[name] = np.asarray(value, dtype)
        return name

    def i64(self, value: Any) -> str:
        return self.const(f"const_{np.asarray(value).tolist()}".replace(" ", ""), value, np.int64)

    def n(self, op: str, inputs: list[str], out: str | None = None, **attrs: Any) -> str:
        from onnx import helper

        self.count += 1
        out = out or f"/{op.lower()}_{self.count}"
        self.nodes.append(helper.make_node(op, inputs, [out], name=f"{op}_{self.count}", **attrs))
        return out

    def linear(self, x: str, name: str, fan_in: int, fan_out: int, out: str | None = None) -> str:
        """``nn.Linear`` as the TorchScript exporter writes it: ``Gemm(x, W, b, transB=1)``."""
        # DLRM's init (Glorot normal, bias N(0, 1 / fan_out)): PyTorch's default shrinks the
        # values by about 2.5x a ReLU layer, and a deep MLP's output to nearly a constant
        std = np.sqrt(2 / (fan_in + fan_out))
        w = self.const(f"{name}.weight", std * self.rng.standard_normal((fan_out, fan_in)))
        b = self.const(f"{name}.bias", self.rng.standard_normal(fan_out) / np.sqrt(fan_out))
        return self.n("Gemm", [x, w, b], out, transB=1)

    def conv(
        self, x: str, name: str, cin: int, cout: int, k: int = 1, stride: int = 1, group: int = 1
    ) -> str:
        """A conv with its batch norm folded in (weights and a bias), "same" padding."""
        fan_in = cin // group * k * k
        w = self.rng.standard_normal((cout, cin // group, k, k)) * np.sqrt(2 / fan_in)
        b = 0.1 * self.rng.standard_normal(cout)
        wn, bn = self.const(f"{name}.weight", w), self.const(f"{name}.bias", b)
        pad = k // 2
        return self.n(
            "Conv", [x, wn, bn], kernel_shape=[k, k], strides=[stride, stride],
            pads=[pad] * 4, group=group,
        )  # fmt: skip

    def model(self, name: str, inputs: list[Any], outputs: list[Any]) -> Any:
        import onnx
        from onnx import helper, numpy_helper

        graph = helper.make_graph(
            self.nodes,
            name,
            inputs,
            outputs,
            initializer=[numpy_helper.from_array(v, k) for k, v in self.inits.items()],
        )
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
        onnx.checker.check_model(model, full_check=True)
        return model


def dlrm(seed: int = 0) -> Any:
    """The DLRM-style recommender (an onnx ModelProto), weights from ``seed``."""
    from onnx import TensorProto, helper

    g = _Graph(seed)
    x = "dense"
    for i, (fan_in, fan_out) in enumerate(zip((DENSE, *BOTTOM), BOTTOM, strict=False)):
        x = g.n("Relu", [g.linear(x, f"bot_l.{2 * i}", fan_in, fan_out)])
    features = [x]
    for i, rows in enumerate(TABLES):
        # N(0, 0.1): DLRM's uniform(+-sqrt(1 / rows)) makes every interaction ~0 (trained
        # tables are not), and the output the same for every sample
        table = g.const(f"emb_l.{i}.weight", 0.1 * g.rng.standard_normal((rows, EMBED)))
        bag = g.n("Gather", [table, f"sparse_{i}"])  # [batch, bag, 64]
        features.append(g.n("ReduceSum", [bag, g.i64([1])], keepdims=0))  # mode="sum"
    stacked = g.n("Concat", [g.n("Unsqueeze", [f, g.i64([1])]) for f in features], axis=1)
    products = g.n("MatMul", [stacked, g.n("Transpose", [stacked], perm=[0, 2, 1])])
    count = len(features)
    flat = g.n("Reshape", [products, g.i64([-1, count * count])])
    below = [i * count + j for i in range(count) for j in range(i)]  # the pairs i > j
    pairs = g.n("Gather", [flat, g.i64(below)], axis=1)
    x = g.n("Concat", [features[0], pairs], axis=1)
    widths = (EMBED + len(below), *TOP)
    for i, (fan_in, fan_out) in enumerate(zip(widths, TOP, strict=False)):
        x = g.linear(x, f"top_l.{2 * i}", fan_in, fan_out)
        x = g.n("Relu", [x]) if i < len(TOP) - 1 else g.n("Sigmoid", [x], "probability")
    batch = "batch_size"
    inputs = [helper.make_tensor_value_info("dense", TensorProto.FLOAT, [batch, DENSE])]
    inputs += [
        helper.make_tensor_value_info(f"sparse_{i}", TensorProto.INT64, [batch, bag])
        for i, bag in enumerate(BAGS)
    ]
    out = [helper.make_tensor_value_info("probability", TensorProto.FLOAT, [batch, 1])]
    return g.model("dlrm", inputs, out)


def mbconv_se(seed: int = 0) -> Any:
    """The MobileNetV3 / EfficientNet-style net (an onnx ModelProto), weights from ``seed``."""
    from onnx import TensorProto, helper

    g = _Graph(seed)

    def act(x: str, kind: str) -> str:
        if kind == "relu":
            return g.n("Relu", [x])
        if kind == "hardswish":
            return g.n("HardSwish", [x])
        return g.n("Mul", [x, g.n("Sigmoid", [x])])  # SiLU, as the exporters write it

    x = g.n("HardSwish", [g.conv("image", "stem", 3, STEM, k=3, stride=2)])
    cin = STEM
    for i, (expanded, cout, stride, kind, se) in enumerate(BLOCKS):
        p = f"blocks.{i}"
        h = x
        if expanded != cin:
            h = act(g.conv(h, f"{p}.expand", cin, expanded), kind)
        h = act(g.conv(h, f"{p}.depthwise", expanded, expanded, 3, stride, expanded), kind)
        if se:
            squeezed = max(8, (expanded // 4 + 4) // 8 * 8)  # MobileNetV3's _make_divisible
            s = g.n("GlobalAveragePool", [h])
            s = g.n("Relu", [g.conv(s, f"{p}.se.fc1", expanded, squeezed)])
            s = g.conv(s, f"{p}.se.fc2", squeezed, expanded)
            h = g.n("Mul", [h, g.n("HardSigmoid", [s], alpha=1 / 6, beta=0.5)])
        h = g.conv(h, f"{p}.project", expanded, cout)
        x = g.n("Add", [x, h]) if stride == 1 and cin == cout else h
        cin = cout
    channels, hidden, classes = HEAD
    x = g.n("HardSwish", [g.conv(x, "head", cin, channels)])
    x = g.n("Flatten", [g.n("GlobalAveragePool", [x])], axis=1)
    x = g.n("HardSwish", [g.linear(x, "classifier.0", channels, hidden)])
    g.linear(x, "classifier.3", hidden, classes, "logits")
    inputs = [helper.make_tensor_value_info("image", TensorProto.FLOAT, [1, 3, IMAGE, IMAGE])]
    out = [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, classes])]
    return g.model("mbconv-se", inputs, out)


def trees(seed: int = 0) -> Any:
    """``TREES`` full binary trees of ``DEPTH`` splits on random features and thresholds, each
    leaf a random weight, summed (``aggregate_function="SUM"``) into one target."""
    from onnx import TensorProto, helper

    rng = np.random.default_rng(seed)
    tree_ids, node_ids, features, values, modes, true_ids, false_ids = ([] for _ in range(7))
    targets: dict[str, list[Any]] = {k: [] for k in ("tree", "node", "id", "weight")}
    inner = 2**DEPTH - 1
    for tree in range(TREES):
        for n in range(2 * inner + 1):  # heap order: node n's children are 2n+1 and 2n+2
            tree_ids.append(tree)
            node_ids.append(n)
            leaf = n >= inner
            features.append(0 if leaf else int(rng.integers(FEATURES)))
            values.append(0.0 if leaf else float(rng.standard_normal()))
            modes.append("LEAF" if leaf else "BRANCH_LEQ")
            true_ids.append(0 if leaf else 2 * n + 1)
            false_ids.append(0 if leaf else 2 * n + 2)
            if leaf:
                targets["tree"].append(tree)
                targets["node"].append(n)
                targets["id"].append(0)
                targets["weight"].append(float(rng.standard_normal() * 0.1))
    node = helper.make_node(
        "TreeEnsembleRegressor",
        ["features"],
        ["score"],
        domain="ai.onnx.ml",
        n_targets=1,
        aggregate_function="SUM",
        nodes_treeids=tree_ids,
        nodes_nodeids=node_ids,
        nodes_featureids=features,
        nodes_values=values,
        nodes_modes=modes,
        nodes_truenodeids=true_ids,
        nodes_falsenodeids=false_ids,
        nodes_missing_value_tracks_true=[0] * len(tree_ids),
        nodes_hitrates=[1.0] * len(tree_ids),
        target_treeids=targets["tree"],
        target_nodeids=targets["node"],
        target_ids=targets["id"],
        target_weights=targets["weight"],
        post_transform="NONE",
    )
    graph = helper.make_graph(
        [node],
        "trees",
        [helper.make_tensor_value_info("features", TensorProto.FLOAT, [1, FEATURES])],
        [helper.make_tensor_value_info("score", TensorProto.FLOAT, [1, 1])],
    )
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.ml", 3)]
    return helper.make_model(graph, opset_imports=opsets, ir_version=8)


def build(name: str, seed: int = 0) -> Any:
    """``dlrm``, ``mbconv-se`` or ``trees`` by name."""
    shapes(name)  # the name check
    return {"dlrm": dlrm, "mbconv-se": mbconv_se, "trees": trees}[name](seed)
