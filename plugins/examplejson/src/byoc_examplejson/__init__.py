"""byoc-examplejson: the reference byoc backend (ExampleJSON text, run with numpy)."""

from byoc_examplejson.plugin import Artifact, Module, codegen

__all__ = ["Artifact", "Module", "codegen"]
