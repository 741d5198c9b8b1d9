"""The errors byoc raises. Every one is a ``ByocError``; the CLI prints its message and exits 2."""


class ByocError(Exception):
    """Base class of every error byoc raises on purpose."""


class ConfigError(ByocError):
    """A configuration file or dict is wrong: unknown key, wrong type, unknown backend."""


class ModelError(ByocError):
    """The ONNX model cannot be loaded, is not valid, or cannot be partitioned."""


class InputError(ByocError):
    """Inputs given to ``run`` do not match the model's signature."""


class BackendError(ByocError):
    """A backend failed: at codegen, runtime creation or run time. Names partition and backend."""


class ArtifactError(ByocError):
    """A saved artifact or ``.byoc`` file is damaged, foreign, or needs a missing backend."""


class PluginError(ByocError):
    """Plugins are inconsistent: duplicate backend names, broken registration."""
