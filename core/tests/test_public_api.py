"""The public surface is deliberate: changing it must change this test."""

import byoc
from byoc import hookspecs


def test_public_names():
    assert sorted(byoc.__all__) == sorted(
        [
            "ArtifactError",
            "BackendError",
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
    )


def test_hookspecs():
    names = sorted(n for n in dir(hookspecs) if n.startswith("byoc_"))
    assert names == [
        "byoc_codegen",
        "byoc_create_runtime",
        "byoc_deserialize",
        "byoc_pattern_table",
        "byoc_register_backends",
        "byoc_serialize",
        "byoc_supported_ops",
    ]


def test_every_error_is_a_byoc_error():
    for name in [
        "ArtifactError",
        "BackendError",
        "ConfigError",
        "InputError",
        "ModelError",
        "PluginError",
    ]:
        assert issubclass(getattr(byoc, name), byoc.ByocError)
