"""dnnl: kinds that move data (view, transpose, concat, slice, shuffle): Dropout, Slice, Pad,
Transpose, channel shuffles."""

from __future__ import annotations

import json

import byoc
import numpy as np
import pytest
from byoc.testing import assert_matches_onnxruntime
from byoc.testing.build import make_model, node
from byoc_dnnl import plugin

from .helpers import DNNL, MODES, claimed, conv_stem, dnnl_kinds, dnnl_step, rand, replace_graph


@pytest.mark.usefixtures("keep_tiny")
def test_inference_dropout_is_claimed_and_training_dropout_is_not() -> None:
    """Inference-mode Dropout is the identity, so it does not cut a partition in two, also
    with a mask output nothing reads (as old exporters write it); Dropout whose mask is read,
    or in training mode, stays with onnxruntime."""
    nodes, consts = conv_stem()
    consts |= {"w1": rand(8, 8, 1, 1), "on": np.array(True)}
    nodes += [
        node("Dropout", ["h"], ["d", "unused"]),
        node("Conv", ["d", "w1"], "y"),
        node("Dropout", ["y", "", "on"], "t"),
        node("Dropout", ["y"], ["u", "mask"]),
    ]
    model = make_model(nodes, {"x": [1, 3, 10, 12]}, ["y", "t", "u", "mask"], consts)
    plan = byoc.partition(model, DNNL)
    assert plan.decisions["d"].backend == "dnnl"
    assert "training mode" in str(plan.decisions["t"].refusals)
    assert "mask output that is read" in str(plan.decisions["u"].refusals)
    assert len(plan.partitions) == 1, plan.table()
    inference = make_model(nodes[:3], {"x": [1, 3, 10, 12]}, ["y"], consts)
    assert_matches_onnxruntime(inference, DNNL)


@pytest.mark.usefixtures("keep_tiny")
@pytest.mark.parametrize(
    ("nodes", "inputs", "words"),
    [
        (  # the ratio, a scalar computed at run time, is a partition input the kernel ignores
            [node("Dropout", ["x", "ratio"], "d"), node("Relu", ["d"], "y")],
            {"x": [2, 3, 4], "ratio": []},
            "input 'ratio' is a scalar computed at run time",
        ),
        (  # a rank-7 input, a view of it rank 3
            [node("Reshape", ["x", "s"], "d"), node("Relu", ["d"], "y")],
            {"x": [2, 1, 3, 1, 2, 1, 2]},
            "input 'x' has rank 7",
        ),
    ],
)
def test_inputs_of_rank_0_or_above_6_are_refused(nodes: list, inputs: dict, words: str) -> None:
    """oneDNN's tensors have ranks 1 to 6: a node reading another rank stays with onnxruntime
    (it was claimed, and compile failed, as ONNX's node tests found), and the model runs."""
    model = make_model(nodes, inputs, ["y"], {"s": np.array([2, 6, 2], np.int64)})
    plan = byoc.partition(model, DNNL)
    assert words in str(plan.decisions["d"].refusals)
    assert_matches_onnxruntime(model, DNNL)


@pytest.mark.parametrize("mode", MODES, ids=["json", "c"])
def test_slice_keeps_a_temporal_conv_net_in_one_partition(mode: dict) -> None:
    """A dilated 1-D conv block that pads with Concat and trims with Slice (as TCNs and U-Nets
    do) is one partition: static Slices are windows of their source, any axis, negative and
    clamped bounds, on a channels-last source too."""
    i64 = np.int64
    consts = {
        "w0": rand(16, 4, 3),
        "w1": rand(16, 16, 3),
        "zeros": np.zeros((1, 16, 4), np.float32),
        "s0": np.array([2], i64),
        "e0": np.array([-2], i64),
        "ax": np.array([2], i64),
        "s1": np.array([0, 1], i64),
        "e1": np.array([1000, 15], i64),
        "ax1": np.array([2, 1], i64),
    }
    nodes = [
        node("Conv", ["x", "w0"], "h", pads=[1, 1]),
        node("Slice", ["h", "s0", "e0", "ax"], "t"),  # trim 2 steps each side
        node("Concat", ["zeros", "t"], "p", axis=2),
        node("Conv", ["p", "w1"], "c", dilations=[2]),
        node("Slice", ["c", "s1", "e1", "ax1"], "y"),  # channels 1..14, every step
    ]
    model = make_model(nodes, {"x": [1, 4, 40]}, ["y"], consts)
    config = {**DNNL, **mode, "compile": {"placement": "static"}}
    report = assert_matches_onnxruntime(model, config)
    claimed(report, "Slice")
    assert len(report.plan.partitions) == 1 and not report.plan.segments, report.plan.table()


@pytest.mark.parametrize("mode", MODES, ids=["json", "c"])
def test_slices_with_steps_keep_a_focus_layer_in_the_partition(mode: dict) -> None:
    """YOLO's focus layer (space-to-depth as four Slices with step 2, then Concat and Conv) is
    claimed: a Slice with steps reads a stepped view of its source, on a plain input and on a
    channels-last conv output alike; clamped ends and a step of 3 too."""
    i64 = np.int64
    consts = {"w": rand(8, 12, 3, 3), "w2": rand(4, 8, 1, 1), "two": np.array([2, 2], i64)}
    consts |= {"axes": np.array([2, 3], i64), "end": np.array([1 << 40, 1 << 40], i64)}
    nodes = []
    for k, (r, c) in enumerate([(0, 0), (1, 0), (0, 1), (1, 1)]):
        consts[f"s{k}"] = np.array([r, c], i64)
        nodes.append(node("Slice", ["x", f"s{k}", "end", "axes", "two"], f"f{k}"))
    consts |= {"s": np.array([1, 0], i64), "e": np.array([9, -1], i64), "st": np.array([3, 2], i64)}
    nodes += [
        node("Concat", ["f0", "f1", "f2", "f3"], "cat", axis=1),
        node("Conv", ["cat", "w"], "h", pads=[1, 1, 1, 1]),
        node("Slice", ["h", "s", "e", "axes", "st"], "t"),  # of a conv output: channels-last
        node("Conv", ["t", "w2"], "y"),
    ]
    model = make_model(nodes, {"x": [1, 3, 14, 16]}, ["y"], consts)
    config = {**DNNL, **mode, "compile": {"placement": "static"}}
    report = assert_matches_onnxruntime(model, config)
    claimed(report, "Slice")
    assert len(report.plan.partitions) == 1 and not report.plan.segments


@pytest.mark.usefixtures("keep_tiny")
def test_slice_with_negative_or_overhanging_steps_is_refused_with_reason() -> None:
    nodes, consts = conv_stem()
    consts |= {
        k: np.array(v, np.int64) for k, v in [("s", [9]), ("e", [0]), ("a", [2]), ("st", [-2])]
    }
    consts |= {k: np.array([v], np.int64) for k, v in [("st2", 2), ("z", 0), ("e2", 11), ("a3", 3)]}
    nodes += [
        node("Slice", ["h", "s", "e", "a", "st"], "y"),
        node("Slice", ["h", "z", "e2", "a", "st2"], "over"),  # 0, 2, .. 10 of 11: one too many
        node("Slice", ["h", "z", "e2", "a3", "st2"], "fine"),  # 0, 2, .. 10 of 12
    ]
    model = make_model(nodes, {"x": [1, 3, 11, 12]}, ["y", "over", "fine"], consts)
    plan = byoc.partition(model, DNNL)
    assert "negative steps" in str(plan.decisions["y"].refusals)
    assert "overhangs" in str(plan.decisions["over"].refusals)
    assert plan.decisions["fine"].backend == "dnnl"


@pytest.mark.parametrize("mode", MODES, ids=["json", "c"])
def test_shufflenet_v2_unit_is_one_partition_with_one_shuffle_kernel(mode: dict) -> None:
    """ShuffleNet v2's unit: Split the channels, convolve one half, Concat, then the channel
    shuffle (Reshape to (N, g, C/g, H, W), Transpose, Reshape back). Split is claimed as windows
    of its input, and the shuffle is one kernel (a reorder in the source's own layout) instead
    of a view, a transpose and a view; unequal split sizes too."""
    i64 = np.int64
    nodes, consts = conv_stem()
    consts |= {"w1": rand(4, 4, 1, 1), "w2": rand(8, 8, 3, 3), "sizes": np.array([3, 5], i64)}
    consts |= {"split": np.array([1, 2, 4, 10, 12], i64), "back": np.array([1, 8, 10, 12], i64)}
    consts["split4"] = np.array([1, 4, 2, 10, 12], i64)
    nodes += [
        node("Split", ["h"], ["a", "b"], axis=1, num_outputs=2),
        node("Conv", ["b", "w1"], "c"),
        node("Relu", ["c"], "r"),
        node("Concat", ["a", "r"], "cat", axis=1),
        node("Reshape", ["cat", "split"], "g"),
        node("Transpose", ["g"], "t", perm=[0, 2, 1, 3, 4]),
        node("Reshape", ["t", "back"], "s"),
        node("Conv", ["s", "w2"], "u", pads=[1, 1, 1, 1]),
        node("Reshape", ["u", "split4"], "g4"),  # 4 groups, of a convolution's output
        node("Transpose", ["g4"], "t4", perm=[0, 2, 1, 3, 4]),
        node("Reshape", ["t4", "back"], "s4"),
        node("Split", ["s4", "sizes"], ["y", "z"], axis=-3),
    ]
    model = make_model(nodes, {"x": [1, 3, 10, 12]}, ["y", "z"], consts, opset=18)
    config = {**DNNL, **mode, "compile": {"placement": "static"}}
    report = assert_matches_onnxruntime(model, config)
    claimed(report, "Split")
    assert len(report.plan.partitions) == 1 and not report.plan.segments, report.plan.table()
    kinds = dnnl_kinds(byoc.compile(model, config))
    assert kinds.count("shuffle") == 2 and "transpose" not in kinds and "view" not in kinds, kinds
    assert kinds.count("slice") == 4, kinds


def test_a_rank_one_transpose_between_views_is_no_shuffle() -> None:
    """Reshape to one dim, Transpose of it, Reshape back: not a channel shuffle (the shuffle
    rewrite once indexed a dim that is not there and failed codegen)."""
    nodes, consts = conv_stem()
    consts |= {"flat": np.array([-1], np.int64), "back": np.array([1, 8, 10, 12], np.int64)}
    nodes += [
        node("Reshape", ["h", "flat"], "f"),
        node("Transpose", ["f"], "t", perm=[0]),
        node("Reshape", ["t", "back"], "y"),
    ]
    model = make_model(nodes, {"x": [1, 3, 10, 12]}, ["y"], consts)
    assert_matches_onnxruntime(model, {**DNNL, "compile": {"placement": "static"}})


@pytest.mark.usefixtures("keep_tiny")
def test_pad_that_is_not_a_zero_padding_of_a_convolution_is_a_concat() -> None:
    """A Pad by another value, or of the channels, or read by something else than a conv, is
    computed (a Concat of constant blocks); reflect padding and crops are refused with the
    reason."""
    i64 = np.int64
    nodes, consts = conv_stem()
    consts |= {"pc": np.array([0, 1, 1, 0, 0, 2, 0, 1], i64), "v": np.float32(1.5)}
    consts |= {"neg": np.array([0, 0, -1, 0, 0, 0, 0, 0], i64), "w1": rand(4, 11, 3, 3)}
    nodes += [
        node("Pad", ["h", "pc", "v"], "hp"),  # value 1.5, channels 1 + 2 and rows too
        node("Conv", ["hp", "w1"], "y"),
        node("Pad", ["h", "pc"], "r", mode="reflect"),
        node("Pad", ["h", "neg"], "c"),
    ]
    model = make_model(nodes, {"x": [1, 3, 10, 12]}, ["y", "r", "c"], consts)
    config = {**DNNL, "compile": {"placement": "static"}}
    report = assert_matches_onnxruntime(model, config)
    assert report.plan.decisions["hp"].backend == "dnnl"
    assert "'reflect' is not supported" in str(report.plan.decisions["r"].refusals)
    assert "negative pads" in str(report.plan.decisions["c"].refusals)
    assert dnnl_kinds(byoc.compile(model, config)).count("concat") == 3


def test_only_an_exact_channel_shuffle_becomes_a_shuffle_kernel() -> None:
    """A Reshape-Transpose-Reshape that swaps other dims, or whose middle value is also a model
    output, is kept as it is; the shuffle of the convolution's (blocked) output is one kernel."""
    i64 = np.int64
    nodes, consts = conv_stem()
    consts |= {"split": np.array([1, 2, 4, 10, 12], i64), "back": np.array([1, 8, 10, 12], i64)}
    nodes += [
        node("Reshape", ["h", "split"], "g"),
        node("Transpose", ["g"], "t", perm=[0, 1, 2, 4, 3]),
        node("Reshape", ["t", "back"], "y"),
        node("Transpose", ["g"], "t2", perm=[0, 2, 1, 3, 4]),
        node("Reshape", ["t2", "back"], "z"),
        node("Reshape", ["h", "split"], "g3"),
        node("Transpose", ["g3"], "t3", perm=[0, 2, 1, 3, 4]),
        node("Reshape", ["t3", "back"], "w"),
    ]
    model = make_model(nodes, {"x": [1, 3, 10, 12]}, ["y", "z", "g", "w"], consts)
    config = {**DNNL, "compile": {"placement": "static"}}
    assert_matches_onnxruntime(model, config)
    kinds = dnnl_kinds(byoc.compile(model, config))
    assert kinds.count("shuffle") == 1 and kinds.count("transpose") == 2, kinds


def test_a_transpose_that_moves_only_a_dim_of_1_copies_nothing() -> None:
    """A spectrogram (1, H, W, 1) transposed to one channel (1, 1, H, W) before a convolution is
    the same bytes: a view, with no reorder step before the convolution."""
    model = make_model(
        [
            node("Transpose", ["x"], "t", perm=[0, 3, 1, 2]),
            node("Conv", ["t", "w"], "y", pads=[1, 1, 1, 1]),
        ],
        {"x": [1, 10, 12, 1]},
        ["y"],
        {"w": rand(8, 1, 3, 3)},
    )
    assert_matches_onnxruntime(model, DNNL)
    impls = [i for _, i in dnnl_step(byoc.compile(model, DNNL)).runtime.implementations()]
    assert impls[0].startswith("convolution"), impls


@pytest.mark.parametrize("perm", [[0, 2, 3, 1], [0, 1, 3, 2], [3, 2, 1, 0], None])
def test_transpose(perm: list[int] | None) -> None:
    nodes, consts = conv_stem()
    attrs = {} if perm is None else {"perm": perm}
    nodes += [node("Transpose", ["h"], "t", **attrs), node("Relu", ["t"], "y")]
    model = make_model(nodes, {"x": [1, 3, 10, 12]}, ["y"], consts)
    claimed(assert_matches_onnxruntime(model, DNNL), "Transpose")


def test_views_with_bad_windows_or_groups_are_refused_when_loaded() -> None:
    """A damaged JSON graph whose slice window leaves its source, whose steps are zero, or
    whose shuffle groups do not divide the channels raises ArtifactError naming the kernel
    (zero steps in Python, the others in the native checks, before any data is read). In C
    source mode the C++ must be what the graph generates, which is checked first."""
    i64 = np.int64
    nodes, consts = conv_stem()
    consts |= {"split": np.array([1, 2, 4, 10, 12], i64), "back": np.array([1, 8, 10, 12], i64)}
    consts |= {k: np.array(v, i64) for k, v in [("s", [1]), ("e", [9]), ("a", [2]), ("st", [2])]}
    nodes += [
        node("Reshape", ["h", "split"], "g"),
        node("Transpose", ["g"], "t", perm=[0, 2, 1, 3, 4]),
        node("Reshape", ["t", "back"], "u"),
        node("Slice", ["u", "s", "e", "a", "st"], "y"),
    ]
    model = make_model(nodes, {"x": [1, 3, 10, 12]}, ["y"], consts)
    step = dnnl_step(byoc.compile(model, {**DNNL, "compile": {"placement": "static"}}))
    data = plugin.byoc_serialize(backend="dnnl", artifact=step.artifact)
    graph = step.artifact.graph
    kinds = [n.get("kind") for n in graph["nodes"]]
    damages = [
        ("shuffle", "groups", 3, "groups do not divide"),  # 8 channels
        ("slice", "offsets", [0, 0, 6, 0], "window is outside"),  # 6 + 4 * 2 > 10
        ("slice", "steps", [1, 1, 0, 1], "steps has a value out of range"),
    ]
    for kind, key, value, message in damages:
        bad = json.loads(json.dumps(graph))
        bad["nodes"][kinds.index(kind)]["attrs"][key] = value
        with pytest.raises(byoc.ArtifactError, match=message):
            artifact = plugin.byoc_deserialize(
                backend="dnnl", data=replace_graph(data, bad), trust_native=False
            )
            plugin.byoc_create_runtime(backend="dnnl", artifact=artifact, config={})


@pytest.mark.usefixtures("keep_tiny")
@pytest.mark.parametrize("mode", MODES, ids=["json", "c"])
def test_windows_that_are_one_run_of_bytes_are_read_in_place(mode: dict) -> None:
    """A Split or Slice along the outermost dims of a dense tensor reads as a view of its
    bytes, with no copy (a step) of its own: pieces that are outputs, read by two kernels, or
    cut from a partition input at an offset that is no multiple of a vector. A window that is
    not one run of bytes is copied."""
    i64 = np.int64
    consts = {"sizes": np.array([1, 3], i64), "one": np.array([1], i64)}
    consts |= {"three": np.array([3], i64), "zero": np.array([0], i64)}
    consts |= {"s": np.array([0, 1], i64), "e": np.array([1, 3], i64), "ax": np.array([0, 2], i64)}
    consts["wm"] = rand(5, 5)
    nodes = [
        node("MatMul", ["x", "wm"], "g"),
        node("Relu", ["g"], "h"),
        node("Split", ["h", "sizes"], ["a", "b"], axis=0),  # [1, 3, 5] and [3, 3, 5]
        node("Sigmoid", ["b"], "b1"),
        node("Tanh", ["b"], "b2"),
        node("Add", ["b1", "b2"], "y"),
        node("Slice", ["x", "one", "three", "zero"], "w"),  # rows 1 and 2 of the input
        node("Mul", ["w", "w"], "z"),
        node("Slice", ["h", "s", "e", "ax"], "n"),  # [1, 3, 2]: not one run
        node("Sigmoid", ["n"], "m"),
    ]
    model = make_model(nodes, {"x": [4, 3, 5]}, ["a", "y", "z", "m"], consts, opset=18)
    config = {**DNNL, **mode, "compile": {"placement": "static"}}
    report = assert_matches_onnxruntime(model, config)
    assert len(report.plan.partitions) == 1 and not report.plan.segments, report.plan.table()
    if mode:
        return  # the C mode's slices are its own code
    step = dnnl_step(byoc.compile(model, config))
    kernels = [n for n in step.artifact.graph["nodes"] if n["op"] == "kernel"]
    slices = {i for i, k in enumerate(kernels) if k["kind"] == "slice"}
    copies = [i for i, _ in step.runtime.implementations() if i in slices]
    assert len(slices) == 4 and len(copies) == 1, (slices, copies)


@pytest.mark.parametrize("mode", MODES, ids=["json", "c"])
def test_expand_of_float_values_is_a_concat_of_copies(mode: dict) -> None:
    """Grouped-query attention's ``repeat_kv`` (Unsqueeze, Expand, Reshape of the keys, as the
    PyTorch exporters write it) and an Expand that adds leading axes and grows two are each a
    concat of copies along the axes that grow: the model stays one partition."""
    i64 = np.int64
    consts = {
        "w": rand(16, 16),
        "w2": rand(8, 8),
        "heads": np.array([1, 6, 2, 8], i64),
        "two": np.array([2], i64),
        "grown": np.array([1, 2, 3, 6, 8], i64),
        "flat": np.array([1, 6, 6, 8], i64),
        "wide": np.array([2, 3, 6, 8], i64),
    }
    nodes = [
        node("MatMul", ["x", "w"], "k"),
        node("Reshape", ["k", "heads"], "kh"),
        node("Transpose", ["kh"], "kt", perm=[0, 2, 1, 3]),  # [1, 2, 6, 8]
        node("Unsqueeze", ["kt", "two"], "ku"),  # [1, 2, 1, 6, 8]
        node("Expand", ["ku", "grown"], "ke"),  # [1, 2, 3, 6, 8]
        node("Reshape", ["ke", "flat"], "kr"),  # [1, 6, 6, 8]: each kv head three times
        node("MatMul", ["kr", "w2"], "y"),
        node("Slice", ["k", "s0", "e0", "ax"], "row"),  # [1, 1, 8]
        node("Expand", ["row", "wide"], "z"),  # [2, 3, 6, 8]
    ]
    consts |= {"s0": np.array([0, 0], i64), "e0": np.array([1, 8], i64)}
    consts["ax"] = np.array([1, 2], i64)
    model = make_model(nodes, {"x": [1, 6, 16]}, ["y", "z"], consts)
    config = {**DNNL, **mode, "compile": {"placement": "static"}}
    report = assert_matches_onnxruntime(model, config)
    claimed(report, "Expand")
    assert len(report.plan.partitions) == 1 and not report.plan.segments, report.plan.table()
    kinds = dnnl_kinds(byoc.compile(model, config))
    assert kinds.count("concat") == 4, kinds  # one axis grows for ke, three for z


@pytest.mark.usefixtures("keep_tiny")
def test_expand_by_many_copies_is_refused_with_reason() -> None:
    """An axis grown to more than 64 copies (the inputs of one concat) stays with onnxruntime;
    64 are claimed."""
    i64 = np.int64
    nodes, consts = conv_stem()
    consts |= {"s": np.array([1, 8, 65, 12], i64), "ax": np.array([2], i64)}
    consts |= {"s0": np.array([0], i64), "e0": np.array([1], i64)}
    consts["s64"] = np.array([1, 8, 64, 12], i64)
    nodes += [
        node("Slice", ["h", "s0", "e0", "ax"], "row"),  # [1, 8, 1, 12]
        node("Expand", ["row", "s"], "y"),
        node("Expand", ["row", "s64"], "z"),
    ]
    model = make_model(nodes, {"x": [1, 3, 10, 12]}, ["y", "z"], consts)
    plan = assert_matches_onnxruntime(model, DNNL).plan
    assert plan.decisions["y"].backend == "onnxruntime"
    assert "at most 64 copies" in str(plan.decisions["y"].refusals), plan.decisions["y"]
    assert plan.decisions["z"].backend == "dnnl"
