"""byoc-ccompiler: a byoc backend that turns elementwise ONNX subgraphs into fused C.

The shape of TVM's BYOC C codegen (per-kernel functions with static shapes, a subgraph function
``<symbol>_``, a wrapper ``<symbol>``), plus N-D broadcasting, loop fusion and OpenMP, compiled
once with cffi and cached. The hooks live in ``byoc_ccompiler.plugin``.
"""

__version__ = "0.1.0"
