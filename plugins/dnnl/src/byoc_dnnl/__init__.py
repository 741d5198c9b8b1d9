"""byoc-dnnl: the DNNL (oneDNN) backend of TVM's BYOC blog post, for byoc.

A JSON graph codegen and a native oneDNN runtime; see README.md.
"""

from byoc_dnnl.codegen import Artifact, codegen
from byoc_dnnl.runtime import Runtime

__version__ = "0.1.0"
__all__ = ["Artifact", "Runtime", "__version__", "codegen"]
