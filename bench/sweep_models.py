"""PyTorch models for bench/sweep.py, seeded random weights, each exported in several ways.

    python bench/sweep_models.py                 # build what is missing (in the export venv)
    python bench/sweep_models.py --list          # the models and what was built
    python bench/sweep_models.py crnn unet       # only these (base names)
    make sweep-models                            # the same as the first line

Thirty-six models that bench/exported_models.py does not have (transformer encoders,
a Llama-style decoder and an encoder-decoder, detectors (two whole, post-processing in the
graph: NMS under If, RoIAlign, a mask-pasting Loop), segmenters, a 3-D conv video net,
recurrent nets, audio and image-to-image nets, and one net of odd conv/pool settings), built
as that script builds its own: from a config in code (no weights downloaded),
``torch.manual_seed(0)``, BatchNorm statistics from two random batches, eval mode,
batch 1, fixed shapes; text models take ``SEQ`` tokens of a ``VOCAB``-word vocabulary, the last
6 of them padding. Each model is exported in the variants its ``Spec`` lists (outputs
``out0``, ``out1``, ...), named ``<base>-<variant>``:

* ``ts``, ``dynamo``: TorchScript (``dynamo=False``, opset 17) and dynamo (opset 18) exports.
* ``ts-op11``, ``dynamo-op21``, ...: that exporter at another opset.
* ``ts-dyn``, ``dynamo-dyn``: symbolic dims (``Dynamic.axes``); bench/sweep.py runs them at
  ``Dynamic.shapes`` (batch 2 and other sizes, where the model allows).
* ``ts-int8dyn``, ...: ``quantize_dynamic`` (int8 weights) of that export.
* ``ts-qdq``, ...: ``quant_pre_process`` then ``quantize_static`` of that export (QDQ,
  per-channel int8 weights, uint8 activations, 8 seeded random calibration batches).
* ``ts-qop``: the same in the QOperator format (QLinearConv, and onnxruntime's QLinearAdd...).
* ``ts-qdqs8``: ``quantize_static`` with its defaults after the same ``quant_pre_process``
  (QDQ, int8 activations and weights, per tensor), as a user who passes no options gets.
* ``ts-fp16``: the model in half precision, TorchScript export.

Each is checked as bench/exported_models.py checks its own (``onnx.checker`` full check, then
onnxruntime must match torch within its RTOL/ATOL, and give finite outputs), and must have the
opset asked for; the quantized and fp16 variants' error against torch is reported, not gated.
A variant that fails is printed and skipped. Variants that no exporter could make are not
listed: the TorchScript exports of ``misccnn`` (adaptive pooling to a size that does not divide
the input) and of the attention models below opset 14 (``scaled_dot_product_attention``),
roberta's dynamo export with symbolic dims, and distilbert in fp16 (its export fails to load).

This runs in bench/exported_models.py's export venv (torch, timm, transformers, onnxscript,
the project's onnx and onnxruntime), made by that script's ``ensure_torch`` on first use.
Output: ``user_cache_dir("byoc")/zoo/sweep/<sha256 of this file>/<name>.onnx`` and
``manifest.json``, as bench/exported_models.py writes its own.
"""

from __future__ import annotations

import copy
import hashlib
import os
import time
import traceback
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import exported_models  # beside this file; imports nothing outside the standard library

SEQ, VOCAB = 32, 1000  # text models: tokens per input, vocabulary
PADDING = 6  # of the SEQ tokens, the last are padding (attention mask 0)
QUANTIZED = ("int8dyn", "qdq", "qop", "qdqs8")


@dataclass(frozen=True)
class Dynamic:
    """The ``-dyn`` variant: symbolic dims ``{input: {axis: name}}``, and the ``[shapes]``
    bench/sweep.py runs it at."""

    axes: dict[str, dict[int, str]]
    shapes: dict[str, list[int]]


@dataclass(frozen=True)
class Spec:
    """One PyTorch model and its variants (of the module docstring; a quantized one after the
    export it quantizes)."""

    base: str
    title: str
    inputs: dict[str, tuple[list[int], str]]  # name: (shape, "float32" | "int64")
    variants: tuple[str, ...]
    build: Callable[[], Any]  # the torch module, seeded by the caller; torch imported inside
    dynamic: Dynamic | None = None


SPECS: list[Spec] = []


def recipe(
    base: str,
    title: str,
    inputs: dict[str, tuple[list[int], str]],
    variants: str,
    dynamic: Dynamic | None = None,
) -> Callable[[Callable[[], Any]], Callable[[], Any]]:
    """Add the decorated builder to ``SPECS``; ``variants`` separated by spaces."""

    def add(build: Callable[[], Any]) -> Callable[[], Any]:
        SPECS.append(Spec(base, title, inputs, tuple(variants.split()), build, dynamic))
        return build

    return add


def sweep_names() -> dict[str, tuple[Spec, str]]:
    """Every model this script makes: name -> (spec, variant)."""
    return {f"{spec.base}-{v}": (spec, v) for spec in SPECS for v in spec.variants}


def shapes(name: str) -> dict[str, list[int]]:
    """The ``[shapes]`` to run model ``name`` at: a ``-dyn`` variant's ``Dynamic.shapes``; none
    for the others, whose shapes are fixed."""
    spec, variant = sweep_names()[name]
    return spec.dynamic.shapes if spec.dynamic and variant.endswith("-dyn") else {}


def recipe_key() -> str:
    return hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:16]


def out_dir() -> Path:
    """Where this recipe's models go: a new directory whenever this file changes."""
    return exported_models.cache_root() / "zoo" / "sweep" / recipe_key()


def manifest() -> dict[str, Any]:
    return exported_models.manifest(out_dir())


# --- shared pieces of the models ------------------------------------------------------------


def _image(size: int, channels: int = 3) -> dict[str, tuple[list[int], str]]:
    return {"pixel_values": ([1, channels, size, size], "float32")}


def _floats(name: str, *shape: int) -> dict[str, tuple[list[int], str]]:
    return {name: ([1, *shape], "float32")}


TOKENS = {"input_ids": ([1, SEQ], "int64"), "attention_mask": ([1, SEQ], "int64")}
TOKENS_DYN = Dynamic({n: {0: "batch", 1: "seq"} for n in TOKENS}, {n: [2, 48] for n in TOKENS})
IMAGE_AXES = {"pixel_values": {0: "batch", 2: "height", 3: "width"}}
# the small text encoders' transformers config
ENCODER = dict(
    vocab_size=VOCAB, hidden_size=256, num_hidden_layers=2, num_attention_heads=4,
    intermediate_size=512,
)  # fmt: skip


def _fields(model: Any, inputs: list[str], fields: list[str]) -> Any:
    """A transformers model as a module of positional tensors, returning these output fields."""
    import torch

    class Fields(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.m = model

        def forward(self, *args: torch.Tensor) -> Any:
            out = self.m(**dict(zip(inputs, args, strict=True)))
            values = tuple(getattr(out, f) for f in fields)
            return values if len(values) > 1 else values[0]

    return Fields()


def _text(model: Any) -> Any:
    return _fields(model, list(TOKENS), ["last_hidden_state"])


def _heads(detector: Any, keys: list[str]) -> Any:
    """A torchvision detector's backbone and head, returning the head's raw ``keys`` (no
    anchors, no NMS)."""
    import torch

    class Heads(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.backbone, self.head = detector.backbone, detector.head

        def forward(self, pixel_values: torch.Tensor) -> tuple[torch.Tensor, ...]:
            out = self.head(list(self.backbone(pixel_values).values()))
            return tuple(out[k] for k in keys)

    return Heads()


def _resnet18_fpn() -> Any:
    from torchvision.models.detection.backbone_utils import resnet_fpn_backbone
    from torchvision.ops.feature_pyramid_network import LastLevelP6P7

    return resnet_fpn_backbone(
        backbone_name="resnet18", weights=None, trainable_layers=5, returned_layers=[2, 3, 4],
        extra_blocks=LastLevelP6P7(256, 256),
    )  # fmt: skip


# --- transformer encoders over tokens -------------------------------------------------------


@recipe(
    "distilbert",
    "DistilBERT: 2 layers, dim 256, 4 heads",
    TOKENS,
    "ts dynamo ts-dyn dynamo-op21 dynamo-int8dyn ts-qdq ts-qdqs8",
    TOKENS_DYN,
)
def build_distilbert() -> Any:
    from transformers import DistilBertConfig, DistilBertModel

    config = DistilBertConfig(vocab_size=VOCAB, dim=256, n_layers=2, n_heads=4, hidden_dim=512)
    return _text(DistilBertModel(config))


@recipe("roberta", "RoBERTa: 2 layers, hidden 256, no pooler", TOKENS, "ts ts-int8dyn")
def build_roberta() -> Any:
    from transformers import RobertaConfig, RobertaModel

    config = RobertaConfig(**ENCODER, max_position_embeddings=514)
    return _text(RobertaModel(config, add_pooling_layer=False))


@recipe("albert", "ALBERT: 4 shared layers, embeddings 64 -> hidden 256", TOKENS, "ts dynamo")
def build_albert() -> Any:
    from transformers import AlbertConfig, AlbertModel

    config = AlbertConfig(**{**ENCODER, "num_hidden_layers": 4}, embedding_size=64)
    return _text(AlbertModel(config, add_pooling_layer=False))


@recipe(
    "t5enc",
    "T5 encoder: 2 layers, d_model 256, 8 heads, relative position buckets",
    TOKENS,
    "ts dynamo ts-dyn dynamo-int8dyn",
    TOKENS_DYN,
)
def build_t5enc() -> Any:
    from transformers import T5Config, T5EncoderModel

    config = T5Config(vocab_size=VOCAB, d_model=256, d_kv=32, d_ff=512, num_layers=2, num_heads=8)
    return _text(T5EncoderModel(config))


@recipe("mobilebert", "MobileBERT: 2 layers with bottlenecks, NoNorm", TOKENS, "ts")
def build_mobilebert() -> Any:
    from transformers import MobileBertConfig, MobileBertModel

    config = MobileBertConfig(vocab_size=VOCAB, num_hidden_layers=2)
    return _text(MobileBertModel(config, add_pooling_layer=False))


@recipe("electra", "ELECTRA: embeddings 128 -> hidden 256, 2 layers", TOKENS, "dynamo")
def build_electra() -> Any:
    from transformers import ElectraConfig, ElectraModel

    return _text(ElectraModel(ElectraConfig(**ENCODER, embedding_size=128)))


@recipe(
    "deberta",
    "DeBERTa-v2: 2 layers, hidden 256, disentangled relative attention (p2c, c2p)",
    TOKENS,
    "ts dynamo ts-op13",
)
def build_deberta() -> Any:
    from transformers import DebertaV2Config, DebertaV2Model

    config = DebertaV2Config(
        **ENCODER, relative_attention=True, pos_att_type=["p2c", "c2p"],
        max_relative_positions=-1, position_buckets=64, norm_rel_ebd="layer_norm",
        share_att_key=True, position_biased_input=False,
    )  # fmt: skip
    return _text(DebertaV2Model(config))


@recipe(
    "llama",
    "Llama-style decoder: 2 layers, hidden 256, 4 heads over 2 KV heads (grouped-query), "
    "rotary positions, RMSNorm, SiLU-gated MLP",
    TOKENS,
    "ts dynamo dynamo-int8dyn",
)
def build_llama() -> Any:
    from transformers import LlamaConfig, LlamaModel

    config = LlamaConfig(
        vocab_size=VOCAB, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2 * SEQ,
    )  # fmt: skip
    return _text(LlamaModel(config))


@recipe(
    "bart",
    "BART encoder-decoder: 2+2 layers, d_model 256, 4 heads, causal and cross attention",
    {**TOKENS, "decoder_input_ids": ([1, SEQ], "int64")},
    "ts dynamo",
)
def build_bart() -> Any:
    from transformers import BartConfig, BartModel

    config = BartConfig(
        vocab_size=VOCAB, d_model=256, encoder_layers=2, decoder_layers=2,
        encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=512,
        decoder_ffn_dim=512, max_position_embeddings=2 * SEQ,
    )  # fmt: skip
    inputs = ["input_ids", "attention_mask", "decoder_input_ids"]
    return _fields(BartModel(config), inputs, ["last_hidden_state"])


# --- vision transformers, detectors, segmenters ---------------------------------------------


@recipe(
    "yolos",
    "YOLOS detector: ViT of 4 layers, hidden 192, 20 detection tokens, 256x256",
    _image(256),
    "ts dynamo",
)
def build_yolos() -> Any:
    from transformers import YolosConfig, YolosForObjectDetection

    config = YolosConfig(
        hidden_size=192, num_hidden_layers=4, num_attention_heads=3, intermediate_size=768,
        image_size=[256, 256], num_detection_tokens=20, num_labels=10,
    )  # fmt: skip
    return _fields(YolosForObjectDetection(config), ["pixel_values"], ["logits", "pred_boxes"])


@recipe(
    "detr",
    "DETR: timm ResNet-18 backbone, 2+2 transformer layers of 128, 20 queries, 256x256",
    _image(256),
    "ts",
)
def build_detr() -> Any:
    from transformers import DetrConfig, DetrForObjectDetection

    config = DetrConfig(
        use_timm_backbone=True, backbone="resnet18", use_pretrained_backbone=False, d_model=128,
        encoder_layers=2, decoder_layers=2, encoder_attention_heads=4, decoder_attention_heads=4,
        encoder_ffn_dim=256, decoder_ffn_dim=256, num_queries=20, num_labels=10,
    )  # fmt: skip
    return _fields(DetrForObjectDetection(config), ["pixel_values"], ["logits", "pred_boxes"])


@recipe(
    "segformer",
    "SegFormer (MiT-b0 config), 19 classes, 256x256",
    _image(256),
    "ts dynamo ts-dyn dynamo-op21",
    Dynamic(IMAGE_AXES, {"pixel_values": [2, 3, 192, 256]}),
)
def build_segformer() -> Any:
    from transformers import SegformerConfig, SegformerForSemanticSegmentation

    net = SegformerForSemanticSegmentation(SegformerConfig(num_labels=19))
    return _fields(net, ["pixel_values"], ["logits"])


@recipe(
    "swin",
    "timm Swin (embed 48, depths 1-1-2-1), window 7, 224x224",
    _image(224),
    "ts dynamo dynamo-dyn dynamo-op21 ts-op13",
    Dynamic({"pixel_values": {0: "batch"}}, {"pixel_values": [2, 3, 224, 224]}),
)
def build_swin() -> Any:
    import timm

    return timm.create_model(
        "swin_tiny_patch4_window7_224", pretrained=False, embed_dim=48, depths=(1, 1, 2, 1),
        num_heads=(2, 4, 8, 16), num_classes=100,
    )  # fmt: skip


@recipe(
    "mobilevit",
    "timm mobilevit_xxs, 256x256",
    _image(256),
    "ts dynamo ts-dyn",
    # At the export's own size only: the trace keeps constant Reshape targets, and at 192x192
    # onnxruntime itself fails.
    Dynamic(IMAGE_AXES, {"pixel_values": [1, 3, 256, 256]}),
)
def build_mobilevit() -> Any:
    import timm

    return timm.create_model("mobilevit_xxs", pretrained=False, num_classes=100)


@recipe(
    "lraspp",
    "torchvision lraspp_mobilenet_v3_large (segmentation), 320x320",
    _image(320),
    "ts dynamo ts-op11 ts-op13 dynamo-op21",
)
def build_lraspp() -> Any:
    import torch
    from torchvision.models.segmentation import lraspp_mobilenet_v3_large

    net = lraspp_mobilenet_v3_large(weights=None, weights_backbone=None)

    class Out(torch.nn.Module):  # the dict's "out"
        def __init__(self) -> None:
            super().__init__()
            self.m = net

        def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
            return self.m(pixel_values)["out"]

    return Out()


@recipe(
    "ssdlite",
    "torchvision ssdlite320_mobilenet_v3_large, 21 classes: backbone and heads",
    _image(320),
    "ts dynamo ts-op11 ts-qdqs8",
)
def build_ssdlite() -> Any:
    from torchvision.models.detection import ssdlite320_mobilenet_v3_large

    det = ssdlite320_mobilenet_v3_large(weights=None, weights_backbone=None, num_classes=21)
    return _heads(det, ["cls_logits", "bbox_regression"])


@recipe("fcos", "torchvision FCOS, ResNet-18 FPN: backbone and heads, 320x320", _image(320), "ts")
def build_fcos() -> Any:
    from torchvision.models.detection import FCOS

    keys = ["cls_logits", "bbox_regression", "bbox_ctrness"]
    return _heads(FCOS(_resnet18_fpn(), num_classes=10), keys)


@recipe(
    "retinanet",
    "torchvision RetinaNet, ResNet-18 FPN: backbone and heads, 320x320",
    _image(320),
    "dynamo",
)
def build_retinanet() -> Any:
    from torchvision.models.detection import RetinaNet

    return _heads(RetinaNet(_resnet18_fpn(), num_classes=10), ["cls_logits", "bbox_regression"])


def _whole_detector(detector: Any) -> Any:
    """A torchvision detector whole, post-processing in the graph (NMS under If, RoIAlign, a
    mask-pasting Loop), returning its first image's outputs. Every detection is kept
    (``box_score_thresh = 0``): random weights score every class alike, below the default 0.05.
    In train mode only its BatchNorms train (``calibrate_batchnorm``): a torchvision detector
    training wants targets."""
    import torch

    class Whole(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.m = detector

        def train(self, mode: bool = True) -> Any:
            super().train(mode)
            for m in self.m.modules():
                m.training = mode and isinstance(m, torch.nn.modules.batchnorm._BatchNorm)
            return self

        def forward(self, pixel_values: torch.Tensor) -> tuple[torch.Tensor, ...]:
            return tuple(self.m(list(pixel_values))[0].values())

    return Whole()


@recipe(
    "frcnn",
    "torchvision fasterrcnn_mobilenet_v3_large_320_fpn whole: RPN, RoIAlign, NMS, 21 classes",
    _image(320),
    "ts",
)
def build_frcnn() -> Any:
    from torchvision.models.detection import fasterrcnn_mobilenet_v3_large_320_fpn

    return _whole_detector(
        fasterrcnn_mobilenet_v3_large_320_fpn(
            weights=None, weights_backbone=None, num_classes=21, box_score_thresh=0.0
        )
    )


@recipe(
    "maskrcnn",
    "torchvision Mask R-CNN whole, ResNet-18 FPN, 5 classes, 256x256, 20 detections",
    _image(256),
    "ts",
)
def build_maskrcnn() -> Any:
    from torchvision.models.detection import MaskRCNN
    from torchvision.models.detection.backbone_utils import resnet_fpn_backbone

    backbone = resnet_fpn_backbone(backbone_name="resnet18", weights=None, trainable_layers=5)
    det = MaskRCNN(
        backbone, num_classes=5, min_size=256, max_size=256, box_score_thresh=0.0,
        box_detections_per_img=20,
    )  # fmt: skip
    # Box deltas of the size a trained net's are: random ones of features ~1e3 move proposals
    # so far that RoIAlign then magnifies rounding (onnxruntime against torch: 9e-4 off).
    for layer in (det.rpn.head.bbox_pred, det.roi_heads.box_predictor.bbox_pred):
        layer.weight.data *= 1e-3
    return _whole_detector(det)


# --- convolutional classifiers --------------------------------------------------------------


@recipe("shufflenet", "torchvision shufflenet_v2_x0_5", _image(224), "ts ts-qop dynamo dynamo-qdq")
def build_shufflenet() -> Any:
    import torchvision

    return torchvision.models.shufflenet_v2_x0_5(weights=None)


@recipe("squeezenet", "torchvision squeezenet1_1", _image(224), "ts ts-qdq ts-qop ts-fp16")
def build_squeezenet() -> Any:
    import torchvision

    return torchvision.models.squeezenet1_1(weights=None)


@recipe("mnasnet", "torchvision mnasnet0_5", _image(224), "ts ts-qdq ts-qop ts-qdqs8")
def build_mnasnet() -> Any:
    import torchvision

    return torchvision.models.mnasnet0_5(weights=None)


@recipe("regnet", "torchvision regnet_y_400mf", _image(224), "dynamo")
def build_regnet() -> Any:
    import torchvision

    return torchvision.models.regnet_y_400mf(weights=None)


@recipe("densenet", "torchvision densenet121, 160x160", _image(160), "ts")
def build_densenet() -> Any:
    import torchvision

    return torchvision.models.densenet121(weights=None)


@recipe("ghostnet", "timm ghostnet_100", _image(224), "dynamo")
def build_ghostnet() -> Any:
    import timm

    return timm.create_model("ghostnet_100", pretrained=False, num_classes=100)


@recipe(
    "misccnn",
    "odd conv and pool settings: dilated grouped and circular-padded convs, ceil-mode pools, "
    "adaptive pooling to 3x5 of 25x25, ELU, softplus, mish, tanh GELU, 97x97",
    _image(97),
    "dynamo dynamo-op21",
)
def build_misccnn() -> Any:
    import torch
    from torch import nn

    class Misc(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.c1 = nn.Conv2d(3, 24, 3, stride=2, padding=1, bias=False)
            self.bn = nn.BatchNorm2d(24)
            self.p1 = nn.AvgPool2d(3, stride=2, padding=1, count_include_pad=False, ceil_mode=True)
            self.c2 = nn.Conv2d(24, 48, 3, padding=2, dilation=2, groups=4)
            self.gn = nn.GroupNorm(6, 48)
            self.p2 = nn.MaxPool2d(3, stride=2, padding=1, ceil_mode=True)
            self.c3 = nn.Conv2d(48, 64, (1, 5), padding=(0, 2), padding_mode="circular")
            self.pool = nn.AdaptiveAvgPool2d((3, 5))
            self.fc = nn.Linear(64 * 15, 20)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            x = self.p1(nn.functional.elu(self.bn(self.c1(x))))
            x = self.p2(nn.functional.softplus(self.gn(self.c2(x))))
            x = self.pool(nn.functional.mish(self.c3(x))).flatten(1)
            return nn.functional.gelu(self.fc(x), approximate="tanh")

    return Misc()


@recipe(
    "r3d",
    "torchvision r3d_18 video classifier: 3-D convolutions over 8 frames of 64x64",
    {"video": ([1, 3, 8, 64, 64], "float32")},
    "ts dynamo ts-qdq",
)
def build_r3d() -> Any:
    from torchvision.models.video import r3d_18

    return r3d_18(weights=None, num_classes=10)


# --- audio, sequences, image to image -------------------------------------------------------


@recipe(
    "wav2vec2",
    "wav2vec 2.0: 7 conv feature layers of 128 (GroupNorm), 2 layers of 256, 1 s at 16 kHz",
    _floats("input_values", 16000),
    "ts dynamo ts-dyn dynamo-op21",
    Dynamic({"input_values": {0: "batch", 1: "samples"}}, {"input_values": [2, 12000]}),
)
def build_wav2vec2() -> Any:
    from transformers import Wav2Vec2Config, Wav2Vec2Model

    config = Wav2Vec2Config(
        hidden_size=256, num_hidden_layers=2, num_attention_heads=4, intermediate_size=512,
        conv_dim=(128,) * 7, num_conv_pos_embeddings=64, num_conv_pos_embedding_groups=16,
        feat_extract_norm="group", do_stable_layer_norm=False,
    )  # fmt: skip
    return _fields(Wav2Vec2Model(config), ["input_values"], ["last_hidden_state"])


@recipe(
    "crnn",
    "CRNN text recogniser: 6 conv+BN+ReLU, 2-layer BiLSTM of 96, 37 classes, 32x320 grey",
    {"image": ([1, 1, 32, 320], "float32")},
    "ts dynamo dynamo-dyn ts-op11 ts-fp16 ts-qdqs8",
    Dynamic({"image": {0: "batch", 3: "width"}}, {"image": [2, 1, 32, 200]}),
)
def build_crnn() -> Any:
    import torch
    from torch import nn

    def cbr(cin: int, cout: int) -> list[nn.Module]:
        return [nn.Conv2d(cin, cout, 3, 1, 1), nn.BatchNorm2d(cout), nn.ReLU(inplace=True)]

    class CRNN(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.cnn = nn.Sequential(  # 32x320 -> 1x80
                *cbr(1, 32), nn.MaxPool2d(2, 2), *cbr(32, 64), nn.MaxPool2d(2, 2),
                *cbr(64, 128), *cbr(128, 128), nn.MaxPool2d((2, 1), (2, 1)),
                *cbr(128, 128), nn.MaxPool2d((2, 1), (2, 1)),
                *cbr(128, 128), nn.MaxPool2d((2, 1), (2, 1)),
            )  # fmt: skip
            self.rnn = nn.LSTM(128, 96, num_layers=2, bidirectional=True)
            self.fc = nn.Linear(192, 37)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            steps = self.cnn(x).squeeze(2).permute(2, 0, 1)  # time, batch, channels
            return self.fc(self.rnn(steps)[0]).log_softmax(-1)

    return CRNN()


@recipe(
    "tcn",
    "temporal conv net: 5 causal dilated residual blocks (dilation 1-16), 40 x 400 features",
    _floats("features", 40, 400),
    "ts",
)
def build_tcn() -> Any:
    import torch
    from torch import nn

    class Block(nn.Module):
        def __init__(self, cin: int, cout: int, dilation: int) -> None:
            super().__init__()
            self.pad = 2 * dilation
            self.c1 = nn.Conv1d(cin, cout, 3, dilation=dilation, padding=self.pad)
            self.c2 = nn.Conv1d(cout, cout, 3, dilation=dilation, padding=self.pad)
            self.down = nn.Conv1d(cin, cout, 1) if cin != cout else None

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = torch.relu(self.c1(x)[..., : -self.pad])  # the tail cut off: causal
            y = torch.relu(self.c2(y)[..., : -self.pad])
            return torch.relu(y + (x if self.down is None else self.down(x)))

    class TCN(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            chans = [40, 64, 64, 64, 64, 64]
            self.blocks = nn.Sequential(*[Block(chans[k], chans[k + 1], 2**k) for k in range(5)])
            self.head = nn.Linear(64, 12)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.head(self.blocks(x)[..., -1])

    return TCN()


@recipe(
    "quartznet",
    "QuartzNet-style depthwise-separable dilated 1-D convs, plus a ConvTranspose1d vocoder "
    "head (reflect padding), 64 mels x 200",
    _floats("mel", 64, 200),
    "ts dynamo ts-op11",
)
def build_quartznet() -> Any:
    import torch
    from torch import nn

    class Separable(nn.Module):
        def __init__(self, cin: int, cout: int, kernel: int, dilation: int = 1) -> None:
            super().__init__()
            pad = dilation * (kernel // 2)
            self.dw = nn.Conv1d(cin, cin, kernel, padding=pad, dilation=dilation, groups=cin)
            self.pw = nn.Conv1d(cin, cout, 1)
            self.bn = nn.BatchNorm1d(cout)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.relu(self.bn(self.pw(self.dw(x))))

    class QuartzNet(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.pre = nn.Conv1d(64, 128, 11, stride=2, padding=5)
            self.b = nn.Sequential(
                Separable(128, 128, 13), Separable(128, 128, 15, 2),
                Separable(128, 192, 17), Separable(192, 192, 29, 2),
            )  # fmt: skip
            self.up = nn.ConvTranspose1d(192, 64, 8, stride=4, padding=2)
            self.post = nn.Conv1d(64, 1, 7, padding=3, padding_mode="reflect")
            self.head = nn.Conv1d(192, 29, 1)

        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            h = self.b(torch.relu(self.pre(x)))
            wave = torch.tanh(self.post(nn.functional.leaky_relu(self.up(h), 0.1)))
            return self.head(h).log_softmax(1), wave

    return QuartzNet()


@recipe(
    "grunet",
    "1-D conv and a 2-layer bidirectional GRU (batch first), 40 x 100 features",
    _floats("features", 40, 100),
    "ts dynamo ts-op11",
)
def build_grunet() -> Any:
    import torch
    from torch import nn

    class ConvGRU(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = nn.Conv1d(40, 64, 5, padding=2)
            self.gru = nn.GRU(64, 64, num_layers=2, batch_first=True, bidirectional=True)
            self.fc = nn.Linear(128, 10)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.fc(self.gru(torch.relu(self.conv(x)).transpose(1, 2))[0])

    return ConvGRU()


@recipe(
    "unet",
    "small U-Net: GroupNorm+SiLU and BatchNorm+ReLU blocks, ConvTranspose, 128x128",
    _image(128),
    "ts dynamo ts-op11 ts-op13 dynamo-op21 ts-fp16",
)
def build_unet() -> Any:
    import torch
    from torch import nn

    def block(cin: int, cout: int) -> nn.Module:
        return nn.Sequential(
            nn.Conv2d(cin, cout, 3, padding=1), nn.GroupNorm(8, cout), nn.SiLU(),
            nn.Conv2d(cout, cout, 3, padding=1), nn.BatchNorm2d(cout), nn.ReLU(),
        )  # fmt: skip

    class UNet(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.d1, self.d2, self.d3 = block(3, 16), block(16, 32), block(32, 64)
            self.pool = nn.MaxPool2d(2)
            self.u2 = nn.ConvTranspose2d(64, 32, 2, stride=2)
            self.c2 = block(64, 32)
            self.u1 = nn.ConvTranspose2d(32, 16, 4, stride=2, padding=1)
            self.c1 = block(32, 16)
            self.out = nn.Conv2d(16, 2, 1)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            a = self.d1(x)
            b = self.d2(self.pool(a))
            c = self.d3(self.pool(b))
            y = self.c2(torch.cat([self.u2(c), b], 1))
            return self.out(self.c1(torch.cat([self.u1(y), a], 1)))

    return UNet()


@recipe(
    "styletransfer",
    "fast style transfer: reflection padding, InstanceNorm, residual blocks, nearest "
    "upsampling, 128x128",
    _image(128),
    "ts dynamo ts-op11",
)
def build_styletransfer() -> Any:
    import torch
    from torch import nn

    class Layer(nn.Module):  # [nearest upsampling], reflection padding, conv, InstanceNorm, ReLU
        def __init__(self, cin: int, cout: int, kernel: int, stride: int = 1, up: int = 0) -> None:
            super().__init__()
            self.up = up
            self.pad = nn.ReflectionPad2d(kernel // 2)
            self.conv = nn.Conv2d(cin, cout, kernel, stride)
            self.norm = nn.InstanceNorm2d(cout, affine=True)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            if self.up:
                x = nn.functional.interpolate(x, scale_factor=self.up, mode="nearest")
            return torch.relu(self.norm(self.conv(self.pad(x))))

    class Residual(nn.Module):
        def __init__(self, channels: int) -> None:
            super().__init__()
            self.a, self.b = Layer(channels, channels, 3), Layer(channels, channels, 3)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x + self.b(self.a(x))

    class Transfer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.m = nn.Sequential(
                Layer(3, 16, 9), Layer(16, 32, 3, 2), Layer(32, 64, 3, 2),
                Residual(64), Residual(64),
                Layer(64, 32, 3, up=2), Layer(32, 16, 3, up=2),
            )  # fmt: skip
            self.out = nn.Sequential(nn.ReflectionPad2d(4), nn.Conv2d(16, 3, 9))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.out(self.m(x))

    return Transfer()


@recipe(
    "espcn",
    "ESPCN super-resolution: PReLU, tanh, PixelShuffle x3, 96x96 luma",
    {"y": ([1, 1, 96, 96], "float32")},
    "ts dynamo ts-op11",
)
def build_espcn() -> Any:
    import torch
    from torch import nn

    class ESPCN(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.c1 = nn.Conv2d(1, 64, 5, padding=2)
            self.c2 = nn.Conv2d(64, 32, 3, padding=1)
            self.c3 = nn.Conv2d(32, 9, 3, padding=1)
            self.ps = nn.PixelShuffle(3)
            self.act = nn.PReLU(64)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = torch.tanh(self.c2(self.act(self.c1(x))))
            return torch.sigmoid(self.ps(self.c3(y)))

    return ESPCN()


# --- export, quantize and check -------------------------------------------------------------


def sample_inputs(spec: Spec, rng: Any, padding: int = PADDING) -> dict[str, Any]:
    """Standard normal floats; token ids in [5, VOCAB); attention masks of ones but for the
    last ``padding`` tokens."""
    import numpy as np

    feeds: dict[str, Any] = {}
    for name, (shape, dtype) in spec.inputs.items():
        if dtype == "float32":
            feeds[name] = rng.standard_normal(shape).astype(np.float32)
        elif name == "attention_mask":
            mask: Any = np.ones(shape, np.int64)
            mask[..., shape[-1] - padding :] = 0
            feeds[name] = mask
        else:
            feeds[name] = rng.integers(5, VOCAB, shape)
    return feeds


def calibrate_batchnorm(model: Any, feeds: dict[str, Any]) -> None:
    """BatchNorm statistics from two random batches, as ``exported_models.calibrate_batchnorm``
    (whose floats these are), but integer inputs keep the sample's values."""
    import numpy as np
    import torch

    norms = [m for m in model.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    if not norms:
        return
    for m in norms:
        m.reset_running_stats()
        m.momentum = None  # a plain average over the batches
    generator = torch.Generator().manual_seed(1)
    model.train()
    with torch.no_grad():
        for _ in range(2):
            model(
                *(
                    torch.randn([2, *v.shape[1:]], generator=generator)
                    if v.dtype == np.float32
                    else torch.from_numpy(np.repeat(v, 2, 0))
                    for v in feeds.values()
                )
            )
    model.eval()


def export(
    model: Any,
    feeds: dict[str, Any],
    path: Path,
    exporter: str,
    opset: int,
    outputs: int,
    axes: dict[str, dict[int, str]] | None = None,
) -> None:
    """``torch.onnx.export`` at batch 1, or with the symbolic dims ``axes``."""
    import torch

    options: dict[str, Any] = {"dynamo": exporter == "dynamo", "opset_version": opset}
    if exporter == "dynamo":
        options["external_data"] = False  # one file: every model here is far below 2 GB
        if axes:
            from torch.export import Dim

            dims = [{axis: Dim.AUTO for axis in axes.get(name, {})} or None for name in feeds]
            options["dynamic_shapes"] = tuple(dims)
    elif axes:
        options["dynamic_axes"] = axes
    with warnings.catch_warnings():  # the legacy exporter's deprecation, tracing's notes
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.simplefilter("ignore", torch.jit.TracerWarning)
        torch.onnx.export(
            model,
            tuple(torch.from_numpy(v) for v in feeds.values()),
            str(path),
            input_names=list(feeds),
            output_names=[f"out{i}" for i in range(outputs)],
            verbose=False,
            **options,
        )


def quantize(spec: Spec, kind: str, source: Path, target: Path) -> None:
    """``int8dyn``: quantize_dynamic. ``qdq``: quant_pre_process (BN folded into Conv), then
    quantize_static (QDQ, per-channel U8S8) calibrated on 8 seeded random batches; ``qop``:
    the same in the QOperator format (QLinearConv, com.microsoft QLinearAdd...); ``qdqs8``:
    quantize_static's defaults (QDQ, S8S8 per tensor)."""
    import numpy as np
    from onnxruntime.quantization import (
        CalibrationDataReader,
        QuantFormat,
        QuantType,
        quantize_dynamic,
        quantize_static,
    )
    from onnxruntime.quantization.shape_inference import quant_pre_process

    if kind == "int8dyn":
        quantize_dynamic(source, target, weight_type=QuantType.QInt8)
        return
    rng = np.random.default_rng(3)

    def batch() -> dict[str, Any]:  # text: 0 to 7 tokens of padding
        return sample_inputs(
            spec, rng, int(rng.integers(0, 8)) if "attention_mask" in spec.inputs else 0
        )

    batches = iter([batch() for _ in range(8)])

    class Batches(CalibrationDataReader):
        def get_next(self) -> dict[str, Any] | None:
            return next(batches, None)

    pre = target.with_suffix(".pre.onnx")
    try:
        quant_pre_process(source, pre, skip_symbolic_shape=True)  # no sympy needed
        if kind == "qdqs8":
            quantize_static(pre, target, Batches())
        else:
            quantize_static(
                pre,
                target,
                Batches(),
                quant_format=QuantFormat.QOperator if kind == "qop" else QuantFormat.QDQ,
                per_channel=True,
                activation_type=QuantType.QUInt8,
                weight_type=QuantType.QInt8,
            )
    finally:
        pre.unlink(missing_ok=True)


def build_one(spec: Spec, todo: list[str], done: dict[str, Any], save: Any) -> None:
    """Export ``spec`` in every variant in ``todo``; record each result through ``save``."""
    import numpy as np
    import onnx
    import torch

    torch.manual_seed(0)
    model = spec.build().eval()
    feeds = sample_inputs(spec, np.random.default_rng(0))
    calibrate_batchnorm(model, feeds)
    with torch.no_grad():
        out = model(*(torch.from_numpy(v) for v in feeds.values()))
    want = [t.numpy() for t in (out if isinstance(out, tuple) else (out,))]
    for name in todo:
        variant = sweep_names()[name][1]
        exporter, _, kind = variant.partition("-")
        opset = int(kind[2:]) if kind.startswith("op") else exported_models.OPSET[exporter]
        target = out_dir() / f"{name}.onnx"
        part = target.with_suffix(f".{os.getpid()}.tmp")
        start = time.perf_counter()
        record: dict[str, Any] = {"variant": variant, "title": spec.title}
        fed = feeds
        try:
            if kind in QUANTIZED:
                source = out_dir() / f"{spec.base}-{exporter}.onnx"
                if done.get(f"{spec.base}-{exporter}", {}).get("status") != "ok":
                    raise RuntimeError(f"no checked {spec.base}-{exporter} to quantize")
                quantize(spec, kind, source, part)
            elif kind == "fp16":
                half = copy.deepcopy(model).half()
                fed = {
                    k: v.astype(np.float16) if v.dtype == np.float32 else v
                    for k, v in feeds.items()
                }
                with torch.no_grad():
                    export(half, fed, part, exporter, opset, len(want))
            else:
                axes = spec.dynamic.axes if kind == "dyn" and spec.dynamic else None
                with torch.no_grad():
                    export(model, feeds, part, exporter, opset, len(want), axes)
            onnx.checker.check_model(str(part), full_check=True)
            got, names = exported_models.run_onnx(part, fed)
            if names != list(spec.inputs):  # bench/sweep.py gives [shapes] by these names
                raise RuntimeError(f"the export's inputs are {names}, not {list(spec.inputs)}")
            check = exported_models.compare(got, want)
            record.update(check=check, inputs=names, opset=exported_models._opset(part))
            if record["opset"] != opset and kind not in QUANTIZED:
                raise RuntimeError(f"asked for opset {opset}, the export has {record['opset']}")
            gated = kind not in (*QUANTIZED, "fp16")
            if "reason" in check or (gated and not check["ok"]):
                detail = check.get("reason") or (
                    f"max |diff| {check['max_abs']:.3g}, max rel {check['max_rel']:.3g}"
                )
                raise RuntimeError(f"onnxruntime differs from torch: {detail}")
            if not all(np.isfinite(g).all() for g in got):
                raise RuntimeError("onnxruntime's outputs are not finite")
            os.replace(part, target)
            record["status"] = "ok"
        except Exception as exc:  # reported and skipped, as the recipe says
            last = (str(exc).strip().splitlines() or [""])[-1][:300]
            record.update(status="failed", reason=f"{type(exc).__name__}: {last}")
            (out_dir() / f"{name}.log").write_text(traceback.format_exc())
            part.unlink(missing_ok=True)
        record["seconds"] = round(time.perf_counter() - start, 1)
        save(name, record)
        print(describe(name, record), flush=True)


def describe(name: str, record: dict[str, Any]) -> str:
    if record.get("status") != "ok":
        return f"{name:24s} FAILED {record.get('reason', '')}"
    c = record["check"]
    verdict = "matches torch" if c["ok"] else "vs torch"
    return (
        f"{name:24s} ok, opset {record.get('opset')}, {verdict}: max |diff| {c['max_abs']:.1e} "
        f"(|torch| <= {c.get('torch_max', 0):.1e}), rel {c['max_rel']:.1e}, "
        f"cosine {c.get('min_cosine', 1):.6f}, {record['seconds']} s"
    )


def main(argv: list[str] | None = None) -> int:
    recipe = exported_models.Recipe(__file__, SPECS, sweep_names, out_dir, build_one, describe)
    return exported_models.build_models(recipe, __doc__ or "", argv)


if __name__ == "__main__":
    raise SystemExit(main())
