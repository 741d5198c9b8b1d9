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

import sys
import types
from typing import TYPE_CHECKING, Any

# Light, and what an app or a plugin needs at import: the session, the errors, the contract.
from byoc.backendspec import BackendSpec
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
from byoc.hookspecs import hookimpl
from byoc.session import InferenceSession, patch_onnxruntime
from byoc.version import __version__

if TYPE_CHECKING:
    from byoc.compare import CompareReport, compare, random_inputs
    from byoc.compiled import CompiledModel
    from byoc.compiler import compile
    from byoc.executor import build, load_module
    from byoc.graph import NodeView, TensorType
    from byoc.pipeline import partition
    from byoc.plan import Composite, Measurement, Partition, Placement, Plan
    from byoc.plugins import Registry, registry
    from byoc.reader import load

# The rest (the compiler, onnx and everything it brings: about a second) on first use, so that
# `import byoc` costs an app no more than `import onnxruntime` does.
_LAZY = {
    "CompareReport": "byoc.compare",
    "compare": "byoc.compare",
    "random_inputs": "byoc.compare",
    "CompiledModel": "byoc.compiled",
    "compile": "byoc.compiler",
    "build": "byoc.executor",
    "load_module": "byoc.executor",
    "NodeView": "byoc.graph",
    "TensorType": "byoc.graph",
    "partition": "byoc.pipeline",
    "Composite": "byoc.plan",
    "Measurement": "byoc.plan",
    "Partition": "byoc.plan",
    "Placement": "byoc.plan",
    "Plan": "byoc.plan",
    "Registry": "byoc.plugins",
    "registry": "byoc.plugins",
    "load": "byoc.reader",
}


class _Package(types.ModuleType):
    """``byoc``: importing the submodule ``byoc.compare`` does not hide the function
    ``byoc.compare`` (the import system sets a package attribute per submodule it loads)."""

    def __setattr__(self, name: str, value: Any) -> None:
        if name in _LAZY and isinstance(value, types.ModuleType):
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package


def __getattr__(name: str) -> Any:
    import importlib

    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    try:  # a submodule, as `import byoc` made them attributes before
        return importlib.import_module(f"byoc.{name}")
    except ModuleNotFoundError as exc:
        if exc.name != f"byoc.{name}":
            raise
    raise AttributeError(f"module 'byoc' has no attribute '{name}'")


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
