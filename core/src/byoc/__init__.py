"""byoc: Bring Your Own Codegen for ONNX models.

Partition a model between backend plugins and onnxruntime, compile, run, and compare::

    import byoc
    session = byoc.InferenceSession("model.onnx")  # onnxruntime's API, a drop-in
    y = session.run(None, {"x": array})
    compiled = byoc.compile("model.onnx", config="byoc.toml")
    outputs = compiled.run({"x": array})
    report = byoc.compare("model.onnx", config="byoc.toml")
    plan = byoc.partition("model.onnx", config="byoc.toml")
    compiled.save("model.byoc"); again = byoc.load("model.byoc")
"""

from byoc.backendspec import BackendSpec
from byoc.compare import CompareReport, compare, random_inputs
from byoc.compiled import CompiledModel
from byoc.compiler import compile
from byoc.config import Config, Option, load_config
from byoc.errors import (
    ArtifactError,
    BackendError,
    ByocError,
    ConfigError,
    InputError,
    ModelError,
    NodesRefused,
    PluginError,
)
from byoc.executor import build, load_module
from byoc.graph import NodeView, TensorType
from byoc.hookspecs import hookimpl
from byoc.pipeline import partition
from byoc.plan import Composite, Measurement, Partition, Placement, Plan
from byoc.plugins import Registry, registry
from byoc.reader import load
from byoc.session import InferenceSession, patch_onnxruntime
from byoc.version import __version__

__all__ = [
    "ArtifactError",
    "BackendError",
    "BackendSpec",
    "ByocError",
    "CompareReport",
    "CompiledModel",
    "Composite",
    "Config",
    "ConfigError",
    "InferenceSession",
    "InputError",
    "Measurement",
    "ModelError",
    "NodeView",
    "NodesRefused",
    "Option",
    "Partition",
    "Placement",
    "Plan",
    "PluginError",
    "Registry",
    "TensorType",
    "__version__",
    "build",
    "compare",
    "compile",
    "hookimpl",
    "load",
    "load_config",
    "load_module",
    "partition",
    "patch_onnxruntime",
    "random_inputs",
    "registry",
]
