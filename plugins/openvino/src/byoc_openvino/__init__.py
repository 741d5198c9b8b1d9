"""byoc-openvino: a byoc backend whose partitions OpenVINO compiles and runs on the CPU.

Annotation asks OpenVINO itself which nodes its CPU plugin supports (``Core.query_model``);
codegen hands each partition's ONNX model to OpenVINO's ONNX frontend and compiles it for
"CPU". The hooks live in ``byoc_openvino.plugin``.
"""

__version__ = "0.1.0"
