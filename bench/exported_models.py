"""Models exported from PyTorch with both torch.onnx exporters, seeded random weights, for the zoo.

    python bench/exported_models.py              # build what is missing (makes the export venv)
    python bench/exported_models.py --list       # the models and what was built
    python bench/exported_models.py vit-tiny gpt2-kv   # only these (base names)
    make export-models                           # the same as the first line

Each model is built from a config in code (timm ``pretrained=False``, torchvision
``weights=None``, transformers ``from_config``-style constructors: no weights are downloaded),
with ``torch.manual_seed(0)`` (BatchNorm statistics taken from two random batches, so that
activations keep a real model's scale), in eval mode, batch 1 and fixed input shapes, then
exported twice: TorchScript (``dynamo=False``, opset 17) as ``<base>-ts`` and dynamo
(``dynamo=True``, opset 18, onnxscript's optimizer) as ``<base>-dynamo``. ``bert-enc`` also
gets ``quantize_dynamic`` (int8 weights, MatMulInteger) of each export: ``bert-enc-int8`` (from
TorchScript) and ``bert-enc-dynamo-int8``. FLOPs (bench/roofline.py) go into the manifest.

Each export is checked: ``onnx.checker`` (full check), then onnxruntime runs it on seeded inputs
and must match torch's outputs within rtol 1e-3 / atol 1e-4 (int8 models: their error against
torch is reported, not gated). An export that fails, or fails the check, is printed and skipped.

torch never goes into the project venv. This script runs under any Python: where torch is not
importable it creates ``user_cache_dir("byoc")/export-venv`` (``REQUIREMENTS``, about 6 GB: PyPI's
torch wheel is a CUDA build, and torch does not import without its CUDA libraries) and runs itself
again there. pip's machine-wide cap on torch (``/etc/xdg/pip/constraints.txt``, if any) is lifted
for that one install (``PIP_CONSTRAINT``), since the pinned torch is newer than the cap.

Output: ``user_cache_dir("byoc")/zoo/exported/<sha256 of this file>/<name>.onnx`` and
``manifest.json`` (per model: status, reason, check result, input names). The key is this file:
editing the recipe builds again, into a new directory; ``bench/zoo_models.py`` reads the same
directory and lists models not built yet as "not built".
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import time
import traceback
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REQUIREMENTS = [
    "torch==2.15.0",
    "torchvision==0.29.2",
    "timm==1.0.31",
    "transformers==5.23.0",
    "onnxscript==0.7.2",
    "onnx==1.21.0",  # the project's onnx and onnxruntime (core/pyproject.toml)
    "onnxruntime==1.31.1",
    "platformdirs",
]
RTOL, ATOL = 1e-3, 1e-4
EXPORTERS = {"ts": False, "dynamo": True}  # suffix: torch.onnx.export(dynamo=...)
OPSET = {"ts": 17, "dynamo": 18}

# Shapes of the models below (also read by bench/zoo_models.py).
SEQ = 128  # BERT and GPT-2 tokens
GPT2 = {"layers": 4, "heads": 4, "hidden": 256, "vocab": 50257}
BERT = {"layers": 4, "heads": 4, "hidden": 256, "vocab": 30522}


@dataclass(frozen=True)
class Spec:
    """One PyTorch model: ``build`` names its builder in this module."""

    base: str
    title: str
    inputs: dict[str, tuple[list[int], str]]  # name: (shape, "float32" | "int64")
    outputs: list[str]
    build: str
    int8: bool = False  # also quantize_dynamic of each export


def _image(size: int = 224) -> dict[str, tuple[list[int], str]]:
    return {"pixel_values": ([1, 3, size, size], "float32")}


def _past() -> dict[str, tuple[list[int], str]]:
    shape = [1, GPT2["heads"], SEQ - 1, GPT2["hidden"] // GPT2["heads"]]
    return {
        f"past_key_values.{i}.{kv}": (shape, "float32")
        for i in range(GPT2["layers"])
        for kv in ("key", "value")
    }


SPECS = [
    Spec("vit-tiny", "timm vit_tiny_patch16_224", _image(), ["logits"], "vit_tiny"),
    Spec("convnext-atto", "timm convnext_atto", _image(), ["logits"], "convnext_atto"),
    Spec("efficientnet-b0", "timm efficientnet_b0", _image(), ["logits"], "efficientnet_b0"),
    Spec("mobilenetv3", "torchvision mobilenet_v3_large", _image(), ["logits"], "mobilenet_v3"),
    Spec("resnet18", "torchvision resnet18", _image(), ["logits"], "resnet18"),
    Spec(
        "bert-enc",
        f"BERT-style encoder (transformers BertModel): {BERT['layers']} layers, hidden "
        f"{BERT['hidden']}, {BERT['heads']} heads, {SEQ} tokens",
        {k: ([1, SEQ], "int64") for k in ("input_ids", "token_type_ids", "attention_mask")},
        ["last_hidden_state", "pooler_output"],
        "bert",
        int8=True,
    ),
    Spec(
        "gpt2",
        f"GPT-2-style decoder (transformers GPT2LMHeadModel): {GPT2['layers']} layers, hidden "
        f"{GPT2['hidden']}, {SEQ} tokens, no KV cache",
        {k: ([1, SEQ], "int64") for k in ("input_ids", "attention_mask")},
        ["logits"],
        "gpt2",
    ),
    Spec(
        "gpt2-kv",
        f"the same GPT-2-style decoder, one token after {SEQ - 1} cached (past_key_values in, "
        "present out)",
        {"input_ids": ([1, 1], "int64"), "attention_mask": ([1, SEQ], "int64"), **_past()},
        ["logits"] + [k.replace("past_key_values", "present") for k in _past()],
        "gpt2_kv",
    ),
    Spec(
        "whisper-enc",
        "Whisper-tiny-sized audio encoder (transformers WhisperEncoder): 4 layers, d_model 384, "
        "6 heads, 80 mel bins x 3000 frames",
        {"input_features": ([1, 80, 3000], "float32")},
        ["last_hidden_state"],
        "whisper_encoder",
    ),
    Spec(
        "deeplabv3-mnv3",
        "torchvision deeplabv3_mobilenet_v3_large (segmentation, 21 classes, 512x512)",
        _image(512),
        ["out"],
        "deeplabv3",
    ),
    Spec(
        "conv1d",
        "small 1-D conv net over 1 s of 16 kHz audio (M5-style: 4 conv+BN+ReLU, pools, linear)",
        {"waveform": ([1, 1, 16000], "float32")},
        ["logits"],
        "conv1d",
    ),
]


def zoo_names() -> dict[str, tuple[Spec, str]]:
    """Every model this script makes: name -> (spec, variant), variant ``ts``, ``dynamo``,
    ``ts-int8`` or ``dynamo-int8``."""
    names: dict[str, tuple[Spec, str]] = {}
    for spec in SPECS:
        for exporter in EXPORTERS:
            names[f"{spec.base}-{exporter}"] = (spec, exporter)
        if spec.int8:
            names[f"{spec.base}-int8"] = (spec, "ts-int8")
            names[f"{spec.base}-dynamo-int8"] = (spec, "dynamo-int8")
    return names


def cache_root() -> Path:
    try:
        import platformdirs
    except ImportError:  # the bootstrap may run under a bare Python
        base = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
        return Path(base) / "byoc"
    return Path(platformdirs.user_cache_dir("byoc"))


def recipe_key() -> str:
    return hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:16]


def out_dir() -> Path:
    """Where this recipe's models go: a new directory whenever this file changes."""
    return cache_root() / "zoo" / "exported" / recipe_key()


def manifest(directory: Path | None = None) -> dict[str, Any]:
    """What was built into ``directory`` (this recipe's ``out_dir()``)."""
    path = (directory or out_dir()) / "manifest.json"
    return json.loads(path.read_text()) if path.exists() else {}


# --- the export venv ------------------------------------------------------------------------


def export_venv() -> Path:
    return cache_root() / "export-venv"


def ensure_torch(script: str = __file__) -> None:
    """Run in the export venv: create or update it, then exec ``script`` (this one, or
    bench/sweep_models.py) there."""
    try:
        import onnxscript  # noqa: F401
        import timm  # noqa: F401
        import torch  # noqa: F401
        import transformers  # noqa: F401

        return
    except ImportError:
        if os.environ.get("BYOC_EXPORT_VENV"):
            raise
    venv = export_venv()
    python = venv / "bin" / "python"
    stamp = venv / "byoc-requirements.txt"
    wanted = "\n".join(REQUIREMENTS) + "\n"
    if not python.exists() or not stamp.exists() or stamp.read_text() != wanted:
        print(f"making the export venv {venv} (torch is a CUDA build: about 6 GB)", flush=True)
        if not python.exists():
            subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        env = {**os.environ, "PIP_CONSTRAINT": os.devnull}  # lift a machine-wide torch cap
        pip = [str(python), "-m", "pip", "install", "--progress-bar", "off"]
        subprocess.run([*pip, "--quiet", "--upgrade", "pip"], check=True, env=env)
        subprocess.run([*pip, *REQUIREMENTS], check=True, env=env)
        stamp.write_text(wanted)
    env = {**os.environ, "BYOC_EXPORT_VENV": "1"}
    os.execve(str(python), [str(python), script, *sys.argv[1:]], env)


# --- the PyTorch models (torch imported inside) ---------------------------------------------


def _logits(module: Any) -> Any:
    import torch

    class Logits(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.m = module

        def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
            return self.m(pixel_values)

    return Logits()


def build_vit_tiny() -> Any:
    import timm

    return _logits(timm.create_model("vit_tiny_patch16_224", pretrained=False))


def build_convnext_atto() -> Any:
    import timm

    return _logits(timm.create_model("convnext_atto", pretrained=False))


def build_efficientnet_b0() -> Any:
    import timm

    return _logits(timm.create_model("efficientnet_b0", pretrained=False))


def build_mobilenet_v3() -> Any:
    import torchvision

    return _logits(torchvision.models.mobilenet_v3_large(weights=None))


def build_resnet18() -> Any:
    import torchvision

    return _logits(torchvision.models.resnet18(weights=None))


def build_deeplabv3() -> Any:
    import torch
    from torchvision.models.segmentation import deeplabv3_mobilenet_v3_large

    net = deeplabv3_mobilenet_v3_large(weights=None, weights_backbone=None, aux_loss=False)

    class Out(torch.nn.Module):  # the dict's "out"
        def __init__(self) -> None:
            super().__init__()
            self.m = net

        def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
            return self.m(pixel_values)["out"]

    return Out()


def build_conv1d() -> Any:
    from torch import nn

    def block(cin: int, cout: int, kernel: int, stride: int = 1) -> list[nn.Module]:
        conv = nn.Conv1d(cin, cout, kernel, stride, padding=kernel // 2)
        return [conv, nn.BatchNorm1d(cout), nn.ReLU()]

    return nn.Sequential(
        *block(1, 32, 79, stride=4),
        nn.MaxPool1d(4),
        *block(32, 32, 3),
        nn.MaxPool1d(4),
        *block(32, 64, 3),
        nn.MaxPool1d(4),
        *block(64, 64, 3),
        nn.AdaptiveAvgPool1d(1),
        nn.Flatten(),
        nn.Linear(64, 35),
    )


def build_bert() -> Any:
    import torch
    from transformers import BertConfig, BertModel

    config = BertConfig(
        vocab_size=BERT["vocab"],
        hidden_size=BERT["hidden"],
        num_hidden_layers=BERT["layers"],
        num_attention_heads=BERT["heads"],
        intermediate_size=4 * BERT["hidden"],
        max_position_embeddings=512,
    )
    bert = BertModel(config)

    class Bert(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.m = bert

        def forward(
            self,
            input_ids: torch.Tensor,
            token_type_ids: torch.Tensor,
            attention_mask: torch.Tensor,
        ) -> tuple[torch.Tensor, torch.Tensor]:
            out = self.m(
                input_ids=input_ids, token_type_ids=token_type_ids, attention_mask=attention_mask
            )
            return out.last_hidden_state, out.pooler_output

    return Bert()


def _gpt2() -> Any:
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(
        vocab_size=GPT2["vocab"],
        n_positions=1024,
        n_embd=GPT2["hidden"],
        n_layer=GPT2["layers"],
        n_head=GPT2["heads"],
    )
    return GPT2LMHeadModel(config)


def build_gpt2() -> Any:
    import torch

    gpt2 = _gpt2()

    class Gpt2(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.m = gpt2

        def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
            return self.m(
                input_ids=input_ids, attention_mask=attention_mask, use_cache=False
            ).logits

    return Gpt2()


def build_gpt2_kv() -> Any:
    import torch
    from transformers import DynamicCache

    gpt2 = _gpt2()

    class Gpt2Step(torch.nn.Module):
        """One decoding step: the past keys and values are inputs, the present ones outputs."""

        def __init__(self) -> None:
            super().__init__()
            self.m = gpt2

        def forward(
            self, input_ids: torch.Tensor, attention_mask: torch.Tensor, *past: torch.Tensor
        ) -> tuple[torch.Tensor, ...]:
            pairs = [(past[i], past[i + 1]) for i in range(0, len(past), 2)]
            cache = DynamicCache(pairs, config=self.m.config)
            out = self.m(
                input_ids=input_ids,
                attention_mask=attention_mask,
                past_key_values=cache,
                use_cache=True,
            )
            present = out.past_key_values
            kv = [t for layer in present.layers for t in (layer.keys, layer.values)]
            return (out.logits, *kv)

    return Gpt2Step()


def build_whisper_encoder() -> Any:
    import torch
    from transformers import WhisperConfig
    from transformers.models.whisper.modeling_whisper import WhisperEncoder

    config = WhisperConfig(
        d_model=384,
        encoder_layers=4,
        encoder_attention_heads=6,
        encoder_ffn_dim=1536,
        decoder_layers=4,
        decoder_attention_heads=6,
        decoder_ffn_dim=1536,
        num_mel_bins=80,
        max_source_positions=1500,
    )
    encoder = WhisperEncoder(config)

    class Encoder(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.m = encoder

        def forward(self, input_features: torch.Tensor) -> torch.Tensor:
            return self.m(input_features).last_hidden_state

    return Encoder()


# --- export and check -----------------------------------------------------------------------


def calibrate_batchnorm(model: Any, spec: Spec) -> None:
    """BatchNorm statistics from two random batches (2 x standard normal inputs).

    Random init leaves running mean 0 and variance 1, and with fan-out init of depthwise convs
    activations shrink layer by layer (MobileNetV3's logits come out near 1e-12): a numeric
    check against torch then says nothing, and tiny values are not what a real model computes.
    """
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
            model(*(torch.randn([2, *s[1:]], generator=generator) for s, _ in spec.inputs.values()))
    model.eval()


def sample_inputs(spec: Spec) -> dict[str, Any]:
    """Seeded inputs: standard normal floats; token ids in [1000, 20000) with [CLS]/[SEP] at the
    ends (inside both vocabularies), masks of ones, token types zero."""
    import numpy as np

    rng = np.random.default_rng(0)
    feeds: dict[str, Any] = {}
    for name, (shape, dtype) in spec.inputs.items():
        if dtype == "float32":
            feeds[name] = rng.standard_normal(shape).astype(np.float32)
        elif name == "input_ids":
            feeds[name] = ids = rng.integers(1000, 20000, shape)
            if shape[-1] > 1:
                ids[..., 0], ids[..., -1] = 101, 102
        elif name == "attention_mask":
            feeds[name] = np.ones(shape, np.int64)
        else:
            feeds[name] = np.zeros(shape, np.int64)
    return feeds


def compare(got: list[Any], want: list[Any]) -> dict[str, Any]:
    """Elementwise |got - want| <= atol + rtol |want| over every output. Reported: the largest
    |diff|, ``max_rel`` (an output's largest |diff| over its largest |want|), the smallest
    cosine similarity and the largest |torch output| (the scale the check ran at)."""
    import numpy as np

    result: dict[str, Any] = {"ok": len(got) == len(want), "max_abs": 0.0, "max_rel": 0.0}
    for g, w in zip(got, want, strict=False):
        g, w = np.asarray(g, np.float64), np.asarray(w, np.float64)
        if g.shape != w.shape:
            return {"ok": False, "reason": f"shape {g.shape} != torch's {w.shape}"}
        diff = np.abs(g - w)
        result["ok"] &= bool(np.all(diff <= ATOL + RTOL * np.abs(w)))
        result["max_abs"] = max(result["max_abs"], float(diff.max(initial=0.0)))
        scale = float(np.abs(w).max(initial=0.0))
        result["max_rel"] = max(result["max_rel"], float(diff.max(initial=0.0)) / (scale or 1))
        result["torch_max"] = max(result.get("torch_max", 0.0), scale)
        cos = float(np.dot(g.ravel(), w.ravel()) / (np.linalg.norm(g) * np.linalg.norm(w) or 1))
        result["min_cosine"] = min(result.get("min_cosine", 1.0), cos)
    return result


def run_onnx(path: Path, feeds: dict[str, Any]) -> tuple[list[Any], list[str]]:
    import onnxruntime as ort

    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    missing = sorted(set(names) - set(feeds))
    if missing:
        raise ValueError(f"the export has inputs {missing} that the recipe does not feed")
    return session.run(None, {n: feeds[n] for n in names}), names


def export(spec: Spec, exporter: str, model: Any, feeds: dict[str, Any], path: Path) -> None:
    import torch

    args = tuple(torch.from_numpy(feeds[n]) for n in spec.inputs)
    options: dict[str, Any] = {"dynamo": EXPORTERS[exporter], "opset_version": OPSET[exporter]}
    if EXPORTERS[exporter]:
        options["external_data"] = False  # one file: every model here is far below 2 GB
    with warnings.catch_warnings():  # the legacy exporter's deprecation, tracing's notes
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.simplefilter("ignore", torch.jit.TracerWarning)
        torch.onnx.export(
            model,
            args,
            str(path),
            input_names=list(spec.inputs),
            output_names=spec.outputs,
            verbose=False,
            **options,
        )


def build_one(spec: Spec, todo: list[str], done: dict[str, Any], save: Any) -> None:
    """Export ``spec`` with every exporter in ``todo``; record each result through ``save``."""
    import numpy as np
    import onnx
    import torch
    from roofline import count_flops  # bench/roofline.py, beside this file

    torch.manual_seed(0)
    model = globals()[f"build_{spec.build}"]().eval()
    calibrate_batchnorm(model, spec)
    feeds = sample_inputs(spec)
    with torch.no_grad():
        out = model(*(torch.from_numpy(feeds[n]) for n in spec.inputs))
    want = [t.numpy() for t in (out if isinstance(out, tuple) else (out,))]
    for name in todo:
        variant = zoo_names()[name][1]
        exporter, _, int8 = variant.partition("-")
        target = out_dir() / f"{name}.onnx"
        part = target.with_suffix(f".{os.getpid()}.tmp")
        start = time.perf_counter()
        record: dict[str, Any] = {"variant": variant, "title": spec.title}
        try:
            if int8:
                source = out_dir() / f"{spec.base}-{exporter}.onnx"
                if done.get(f"{spec.base}-{exporter}", {}).get("status") != "ok":
                    raise RuntimeError(f"no checked {spec.base}-{exporter} to quantize")
                from onnxruntime.quantization import QuantType, quantize_dynamic

                quantize_dynamic(source, part, weight_type=QuantType.QInt8)
            else:
                with torch.no_grad():
                    export(spec, exporter, model, feeds, part)
            onnx.checker.check_model(str(part), full_check=True)
            got, names = run_onnx(part, feeds)
            if names != list(spec.inputs):  # bench/zoo_models.py feeds inputs by these names
                raise RuntimeError(f"the export's inputs are {names}, not {list(spec.inputs)}")
            check = compare(got, want)
            record.update(check=check, inputs=names, opset=_opset(part))
            if not check["ok"] and not int8:
                raise RuntimeError(
                    f"onnxruntime differs from torch: max |diff| {check.get('max_abs', '?'):.3g}"
                    f", max rel {check.get('max_rel', '?'):.3g} ({check.get('reason', '')})"
                )
            if not all(np.isfinite(g).all() for g in got):
                raise RuntimeError("onnxruntime's outputs are not finite")
            record["gflops"] = round(count_flops(part).total / 1e9, 4)
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


def _opset(path: Path) -> int:
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    return next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)


def describe(name: str, record: dict[str, Any]) -> str:
    if record.get("status") != "ok":
        return f"{name:22s} FAILED {record.get('reason', '')}"
    c = record["check"]
    verdict = "matches torch" if c["ok"] else "vs torch"
    return (
        f"{name:22s} ok, opset {record.get('opset')}, {record.get('gflops', 0):.3f} GFLOP, "
        f"{verdict}: max |diff| {c['max_abs']:.1e} (|torch| <= {c.get('torch_max', 0):.1e}), "
        f"rel {c['max_rel']:.1e}, cosine {c.get('min_cosine', 1):.6f}, {record['seconds']} s"
    )


@dataclass
class Recipe:
    """What ``build_models`` builds: a script's specs, its model names (name -> (spec, how)),
    where its models go, how one spec is built and how a built model is described."""

    script: str
    specs: list[Any]
    names: Callable[[], dict[str, tuple[Any, str]]]
    out_dir: Callable[[], Path]
    build_one: Callable[..., None]
    describe: Callable[[str, dict[str, Any]], str]


def build_models(recipe: Recipe, doc: str, argv: list[str] | None = None) -> int:
    """The command line of bench/exported_models.py and bench/sweep_models.py: build what is
    missing (or the named bases), each result recorded in the manifest; ``--list``."""
    bases = {s.base for s in recipe.specs}
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("bases", nargs="*", help=f"of {', '.join(sorted(bases))}")
    parser.add_argument("--list", action="store_true", help="list the models and exit")
    parser.add_argument("--retry", action="store_true", help="try failed builds again")
    args = parser.parse_args(argv)
    if args.list:
        done = manifest(recipe.out_dir())
        print(f"built into {recipe.out_dir()}")
        for name in recipe.names():
            print(recipe.describe(name, done[name]) if name in done else f"{name:24s} not built")
        return 0
    unknown = sorted(set(args.bases) - bases)
    if unknown:
        raise SystemExit(f"unknown models {unknown}; known: {', '.join(sorted(bases))}")
    ensure_torch(recipe.script)
    import torch

    print(f"torch {torch.__version__}; writing {recipe.out_dir()}", flush=True)
    recipe.out_dir().mkdir(parents=True, exist_ok=True)
    done = manifest(recipe.out_dir())

    def save(name: str, record: dict[str, Any]) -> None:
        done[name] = {**record, "torch": torch.__version__}
        path = recipe.out_dir() / "manifest.json"
        path.with_suffix(".tmp").write_text(json.dumps(done, indent=1, sort_keys=True))
        os.replace(path.with_suffix(".tmp"), path)

    for spec in recipe.specs:
        if args.bases and spec.base not in args.bases:
            continue
        todo = []
        for name, (s, _) in recipe.names().items():
            status = done.get(name, {}).get("status")
            built = status == "ok" and (recipe.out_dir() / f"{name}.onnx").exists()
            if s is spec and not built and (status != "failed" or args.retry):
                todo.append(name)
        if todo:
            print(f"{spec.base}: {spec.title}", flush=True)
            try:
                recipe.build_one(spec, todo, done, save)
            except Exception as exc:  # the model itself failed to build or run
                for name in todo:
                    save(name, {"status": "failed", "reason": f"{type(exc).__name__}: {exc}"})
                print(f"{spec.base}: FAILED to build: {type(exc).__name__}: {exc}", flush=True)
    print()
    return build_models(recipe, doc, ["--list"])


RECIPE = Recipe(__file__, SPECS, zoo_names, out_dir, build_one, describe)


def main(argv: list[str] | None = None) -> int:
    return build_models(RECIPE, __doc__ or "", argv)


if __name__ == "__main__":
    raise SystemExit(main())
