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


class SpecError(PluginError):
    """A plugin's ``byoc.BackendSpec`` or ``byoc.Option`` is malformed: byoc lists the plugin
    as broken (``byoc backends``) instead of using it."""


class NodesRefused(ByocError):
    """Raised by a backend's codegen hook: these nodes of the partition would run badly on it
    (e.g. the library picked a reference kernel for them). ``byoc.compile`` takes them from
    this backend (``reasons``: node name -> why, shown by ``byoc explain``) and partitions again,
    so another backend or onnxruntime runs them."""

    def __init__(self, reasons: dict[str, str], backend: str = "") -> None:
        self.reasons = dict(reasons)
        self.backend = backend
        shown = "; ".join(f"{k}: {v}" for k, v in list(self.reasons.items())[:3])
        more = f" (and {len(self.reasons) - 3} more)" if len(self.reasons) > 3 else ""
        super().__init__(f"{len(self.reasons)} node(s) refused at codegen: {shown}{more}")
