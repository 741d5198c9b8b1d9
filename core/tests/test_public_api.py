"""The public surface is deliberate: changing it must change this test."""

import dataclasses

import byoc
from byoc import hookspecs


def test_public_names():
    assert sorted(byoc.__all__) == sorted(
        [
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


def test_the_backend_contract_fields():
    """A plugin passes these by name: add fields freely, never rename one."""
    assert [f.name for f in dataclasses.fields(byoc.BackendSpec)] == [
        "name",
        "version",
        "description",
        "available",
        "options",
        "priority",
        "reference",
        "min_partition_nodes",
        "prune",
        "fallback_defaults",
        "build",
        "finite_only",
        "max_magnitude",
        "softmax_masks",
        "int_limit",
        "precisions",
        "exact",
        "optimizes_graphs",
    ]
    assert [f.name for f in dataclasses.fields(byoc.Option)] == [
        "type",
        "default",
        "help",
        "allowed",
        "local_only",
    ]
