"""Hook specifications: the four stages a byoc backend plugin implements.

A plugin is a module (or object) with functions decorated by ``byoc.hookimpl`` and named after the
specs below. It is found through an entry point in the group ``byoc.backends``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pluggy

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from byoc.backendspec import BackendSpec
    from byoc.plan import Partition

hookspec = pluggy.HookspecMarker("byoc")
hookimpl = pluggy.HookimplMarker("byoc")  # marks a plugin's implementations (``byoc.hookimpl``)

# ---------------------------------------------------------------------------------------------
# discovery
# ---------------------------------------------------------------------------------------------


@hookspec
def byoc_register_backends(register: Callable[[BackendSpec], None]) -> None:
    """Register the backends this plugin provides.

    Collecting hook: every plugin is called once, when the plugin manager is built.

    :param register: call ``register(byoc.BackendSpec(name, ...))`` once per backend. The
        spec's fields (docs/hooks.md lists them) say how byoc uses the backend: its options
        (each a ``byoc.Option``; ``threads`` and the other keys every backend has come on top),
        its availability, its priority, and what placement and the run-time guards must know
        of its kernels (``finite_only``, ``max_magnitude``, ``softmax_masks``, ``int_limit``,
        ``precisions``, ``exact``). A malformed spec is a ``PluginError`` naming the field, and
        ``byoc backends`` lists the plugin as broken. The keyword form ``register(name,
        **fields)``, with ``local_options`` and options as tuples, still works in this release,
        with a ``DeprecationWarning``.
    """


# ---------------------------------------------------------------------------------------------
# annotation
# ---------------------------------------------------------------------------------------------


@hookspec
def byoc_supported_ops(backend: str, config: Mapping[str, Any]) -> dict[str, Any] | None:
    """Return the single ops the backend claims, with a check per op type.

    Routed: called on the plugin that registered ``backend`` only (``Registry.route``).

    :param backend: the backend name.
    :param config: the backend's ``[backend.<name>]`` table, defaults filled in.
    :return: ``{op_type: check}``; ``check(node: NodeView)`` returns ``None`` to accept the
        node or a reason string to refuse it. Called once per partitioning run.
    """


@hookspec
def byoc_pattern_table(backend: str, config: Mapping[str, Any]) -> list[Any] | None:
    """Return the backend's composite patterns, most specific first.

    Routed: called on the plugin that registered ``backend`` only (``Registry.route``).

    :param backend: the backend name.
    :param config: the backend's ``[backend.<name>]`` table, defaults filled in.
    :return: an ordered list of ``(name, pattern, check)`` or ``(name, pattern)`` (TVM's form,
        no check); ``name`` is ``"<backend>.<pattern>"``, ``pattern`` is built with
        ``byoc.patterns``, ``check(match)`` returns ``None`` to accept or a reason string to
        refuse (``check`` may be ``None``).
    """


# ---------------------------------------------------------------------------------------------
# codegen
# ---------------------------------------------------------------------------------------------


@hookspec(firstresult=True)
def byoc_codegen(backend: str, partition: Partition, config: Mapping[str, Any]) -> Any:
    """Turn one partition into an artifact (C source, a JSON graph, ...).

    Stops at first non-None result. Called once per partition at compile time.

    :param backend: the backend name (one of yours: the call is routed to your plugin).
    :param partition: the partition: a standalone ONNX model, its composites and signature.
    :param config: the backend's ``[backend.<name>]`` table, defaults filled in.
    :return: the artifact, any object your runtime and serialization hooks understand.
    :raises byoc.NodesRefused: ``{node name: reason}`` for nodes of the partition the backend
        would run badly; byoc partitions again without them (``byoc explain`` shows why).
    """


# ---------------------------------------------------------------------------------------------
# runtime
# ---------------------------------------------------------------------------------------------


@hookspec(firstresult=True)
def byoc_create_runtime(backend: str, artifact: Any, config: Mapping[str, Any]) -> Any:
    """Turn an artifact into a runtime object.

    Stops at first non-None result. Called once per partition, after codegen or after loading.

    :param backend: the backend name (one of yours: the call is routed to your plugin).
    :param artifact: what ``byoc_codegen`` or ``byoc_deserialize`` returned.
    :param config: the backend's ``[backend.<name>]`` table, defaults filled in.
    :return: an object with ``run(inputs: list[numpy.ndarray]) -> list[numpy.ndarray]``
        (partition inputs and outputs in signature order). ``run`` must be safe to call from
        many threads at once.
    """


# ---------------------------------------------------------------------------------------------
# serialization
# ---------------------------------------------------------------------------------------------


@hookspec(firstresult=True)
def byoc_serialize(backend: str, artifact: Any) -> bytes | None:
    """Turn an artifact into bytes for a ``.byoc`` file.

    Stops at first non-None result.

    :param backend: the backend name (one of yours: the call is routed to your plugin).
    :param artifact: what ``byoc_codegen`` returned.
    :return: bytes that ``byoc_deserialize`` turns back into an equal artifact.
    """


@hookspec(firstresult=True)
def byoc_deserialize(backend: str, data: bytes, trust_native: bool) -> Any:
    """Turn bytes written by ``byoc_serialize`` back into an artifact.

    Stops at first non-None result. Must validate ``data``: it may be damaged or hostile, and
    a file is data: loading it never runs code its author chose. Native code is rebuilt from
    source that you regenerate from the carried graph or IR and compare with the carried
    source (refuse a difference); a carried compiled library is dropped unless
    ``trust_native``.

    :param backend: the backend name (one of yours: the call is routed to your plugin).
    :param data: the bytes ``byoc_serialize`` wrote.
    :param trust_native: the user trusts the compiled code the file carries
        (``byoc.load(path, trust_native=True)``, ``byoc run --trust-native``): keep a carried
        library, for targets without a compiler (still only where it was built for this host).
        A hook that carries no native code may leave this argument out.
    :return: the artifact; raise ``byoc.ArtifactError`` if ``data`` is not valid.
    """
