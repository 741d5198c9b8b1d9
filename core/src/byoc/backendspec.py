"""``byoc.BackendSpec``: what a plugin tells byoc about a backend, passed to ``register``.

The fields are the contract: docs/hooks.md and docs/plugin-authors.md hold the tables
``reference()`` renders from them and their docstrings, and core/tests/test_docs.py fails when
the docs differ from it or a field has no ``:ivar:`` text.
"""

from __future__ import annotations

import dataclasses
import math
import re
import warnings
from collections.abc import Callable, Mapping
from dataclasses import KW_ONLY, dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from byoc.config import BACKEND_KEYS, Option, describe
from byoc.errors import SpecError

if TYPE_CHECKING:
    from byoc.graph import NodeView
    from byoc.plan import Partition

MAX_MAGNITUDE = 1e15  # BackendSpec.max_magnitude's default


def always_available() -> str | None:
    """``available``'s default: the backend can always be used."""
    return None


def no_build() -> str:
    """``build``'s default: nothing besides the version decides the backend's speed."""
    return ""


@dataclass(frozen=True)
class BackendSpec:
    """A backend, as its plugin registers it: ``register(byoc.BackendSpec("mybackend", ...))``
    in ``byoc_register_backends``. Every field but ``name`` is a keyword with a default.

    :ivar name: the backend's one name: its entry point's, its ``[backend.<name>]`` table's,
        its CLI spelling and its partitions' prefix.
    :ivar version: recorded in ``.byoc`` files and measured placement's cache keys; empty: the
        version of the distribution the plugin comes from.
    :ivar description: one line for ``byoc backends``.
    :ivar available: returns ``None`` when the backend can be used here, or the reason it
        cannot (no C compiler, a library missing): ``byoc backends`` shows it and the backend
        then claims nothing. Called once, when first needed; an exception it raises is the
        reason.
    :ivar options: the keys of the backend's own ``[backend.<name>]`` table, each a
        ``byoc.Option``, which byoc checks and fills in for every table it builds (config and
        loaded files). The keys every backend has (``enabled``, ``ops``, ``exclude_ops``,
        ``min_partition_nodes``, ``prune``, ``int8``, ``threads``) come on top; restate one
        (``threads``, to say what your library does with it) only with its type, default and
        allowed values.
    :ivar priority: orders backends when the config gives no ``backends`` list (higher first).
    :ivar reference: not meant for speed (a reference or teaching backend): it claims nodes
        only when the config's ``backends`` names it.
    :ivar min_partition_nodes: partitions with fewer nodes go back to onnxruntime (the
        config's ``min_partition_nodes`` overrides it).
    :ivar prune: ``prune(nodes: list[NodeView])`` returns the reason to send a partition not
        worth offloading back to onnxruntime, or ``None`` to keep it (the config's ``prune =
        false`` keeps every one).
    :ivar fallback_defaults: ``[fallback]`` values to use, where the user sets none, while this
        backend has partitions, e.g. ``{"allow_spinning": False}``.
    :ivar build: returns what besides ``version`` decides the backend's speed (a hash of its
        native sources and of the library it links): measured placement keys its cached
        verdicts by it, so a rebuilt native part is timed again.
    :ivar finite_only: its kernels follow ONNX on finite numbers only (oneDNN's max-based Relu
        maps NaN to 0): a partition whose float inputs hold NaN or +-inf runs on onnxruntime
        (``[fallback] nonfinite_inputs``), and the conformance suite checks that the known
        special-value failures vanish that way.
    :ivar max_magnitude: with ``finite_only``: a partition whose float inputs reach this
        magnitude runs on onnxruntime too, since inside it they may overflow to inf (1e15
        squared and summed over 1e8 terms stays below float32's 3.4e38; real activations and
        masks of -1e9 pass); ``math.inf``: NaN and +-inf alone.
    :ivar softmax_masks: with ``finite_only``: its Add and Softmax follow ONNX on -inf (a row
        all -inf gives NaN), so a partition input that only Adds into Softmax nodes read,
        through ops that only move values (an attention mask of 0 and -inf, or -3.4e38), may
        hold -inf and stays on the backend; the conformance suite's
        ``test_softmax_masks_may_hold_minus_inf`` checks it.
    :ivar int_limit: its 32- and 64-bit integer arithmetic is exact only below this magnitude
        (OpenVINO's CPU plugin computes int64 in int32 and int32 through float32: 2**24): a
        partition whose such inputs reach it runs on onnxruntime, so the backend may claim
        nodes that read a model's token ids or masks. Independent of ``[fallback]
        nonfinite_inputs``; ``None``: exact at any magnitude.
    :ivar precisions: the reduced precisions it offers (``[compile] precision``), each as
        overrides of its options (openvino's ``{"bf16": {"precision": "bf16"}}``) or a function
        of the partition giving them (``{}`` where it offers none): placement tries each
        partition with them and keeps them within ``[compile] precision_tolerance``.
    :ivar exact: options that make its fp32 kernels round as the direct algorithms do (dnnl's
        ``{"winograd": False}``): a partition whose outputs differ from onnxruntime's beyond
        the tolerance is compiled once more with them before measured placement returns it,
        and ``byoc explain`` says so.
    :ivar optimizes_graphs: it rewrites and fuses graphs itself (OpenVINO): its partitions are
        the model's nodes as read between their inputs and outputs, with the shape
        computations byoc folds and the original names, where the boundary allows
        (``pipeline.as_original``); its inputs keep their static types.
    """

    name: str
    _: KW_ONLY
    version: str = ""
    description: str = ""
    available: Callable[[], str | None] = always_available
    options: Mapping[str, Option] = field(default_factory=dict)
    priority: int = 0
    reference: bool = False
    min_partition_nodes: int = 1
    prune: Callable[[list[NodeView]], str | None] | None = None
    fallback_defaults: Mapping[str, Any] = field(default_factory=dict)
    build: Callable[[], str] = no_build
    finite_only: bool = False
    max_magnitude: float = MAX_MAGNITUDE
    softmax_masks: bool = False
    int_limit: int | None = None
    precisions: Mapping[str, Mapping[str, Any] | Callable[[Partition], Mapping[str, Any]]] = field(
        default_factory=dict
    )
    exact: Mapping[str, Any] = field(default_factory=dict)
    optimizes_graphs: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise SpecError(f"byoc.BackendSpec: name must be a non-empty str, got {self.name!r}")
        for name, (ok, what) in _CHECKS.items():
            value = getattr(self, name)
            if not ok(value):
                raise SpecError(
                    f"backend '{self.name}': BackendSpec.{name} must be {what}, got {value!r:.80}"
                )
        options = _options(self.name, self.options, stacklevel=4)
        for key in ("options", "fallback_defaults", "precisions", "exact"):
            value = options if key == "options" else getattr(self, key)
            object.__setattr__(self, key, MappingProxyType(dict(value)))  # read-only

    @property
    def local_options(self) -> frozenset[str]:
        """The options of the machine that runs the model (``Option.local_only``)."""
        return frozenset(k for k, o in self.options.items() if o.local_only)


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


_CHECKS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "version": (lambda v: isinstance(v, str), "a str"),
    "description": (lambda v: isinstance(v, str), "a str"),
    "available": (callable, "a callable"),
    "options": (lambda v: isinstance(v, Mapping), "a dict of byoc.Option"),
    "priority": (_int, "an int"),
    "reference": (lambda v: isinstance(v, bool), "a bool"),
    "min_partition_nodes": (lambda v: _int(v) and v >= 1, "an int of 1 or more"),
    "prune": (lambda v: v is None or callable(v), "None or a callable"),
    "fallback_defaults": (lambda v: isinstance(v, Mapping), "a dict"),
    "build": (callable, "a callable"),
    "finite_only": (lambda v: isinstance(v, bool), "a bool"),
    "max_magnitude": (lambda v: _number(v) and v > 0, "a number above 0 (math.inf: no bound)"),
    "softmax_masks": (lambda v: isinstance(v, bool), "a bool"),
    "int_limit": (lambda v: v is None or (_int(v) and v > 0), "None or an int above 0"),
    "precisions": (lambda v: isinstance(v, Mapping), "a dict"),
    "exact": (lambda v: isinstance(v, Mapping), "a dict"),
    "optimizes_graphs": (lambda v: isinstance(v, bool), "a bool"),
}


def _options(backend: str, options: Mapping[Any, Any], stacklevel: int) -> dict[str, Option]:
    """``options`` as ``byoc.Option`` values, tuples converted (with one warning), each checked
    against the keys every backend has."""
    out: dict[str, Option] = {}
    tuples = []
    for key, value in options.items():
        if not isinstance(key, str):
            raise SpecError(f"backend '{backend}': an option's name must be a str, got {key!r}")
        if isinstance(value, tuple) and len(value) in (3, 4):
            tuples.append(key)
            try:
                value = Option(*value)
            except SpecError as exc:
                raise SpecError(f"backend '{backend}', option '{key}': {exc}") from None
        if not isinstance(value, Option):
            raise SpecError(
                f"backend '{backend}': option '{key}' must be a byoc.Option(type, default, "
                f"help, allowed), got {value!r:.80}"
            )
        standard = BACKEND_KEYS.get(key)
        if standard is not None and dataclasses.replace(value, help=standard.help) != standard:
            raise SpecError(
                f"backend '{backend}': option '{key}' is one every backend has "
                f"({_shown(standard)}); restate it only with its own help, or give yours "
                "another name"
            )
        out[key] = value
    if tuples:
        warnings.warn(
            f"backend '{backend}': options given as tuples ({', '.join(tuples)}) are "
            "deprecated and stop working in the next release; write "
            "byoc.Option(type, default, help, allowed) instead",
            DeprecationWarning,
            stacklevel=stacklevel,
        )
    return out


def _shown(option: Option) -> str:
    kind = getattr(option.type, "__name__", "list")
    allowed = f", {describe(option.allowed)}" if option.allowed is not None else ""
    return f"{kind}, default {option.default!r}{allowed}"


def from_keywords(name: str, keywords: dict[str, Any]) -> BackendSpec:
    """The spec of a deprecated ``register(name, **keywords)`` call (with one warning); its
    ``local_options`` become the options' ``local_only``."""
    hint = (
        " (local_options: byoc.Option(..., local_only=True))" if "local_options" in keywords else ""
    )
    warnings.warn(
        f"backend '{name}': register(name, **keywords) is deprecated and stops working in the "
        f"next release; write register(byoc.BackendSpec({name!r}, ...)) with the same "
        f"keywords{hint}",
        DeprecationWarning,
        stacklevel=3,
    )
    fields = {f.name for f in dataclasses.fields(BackendSpec)} - {"name", "_"}
    unknown = sorted(set(keywords) - fields - {"local_options"})
    if unknown:
        raise SpecError(
            f"backend '{name}': register() got unknown keywords {', '.join(unknown)}; "
            f"BackendSpec's fields are {', '.join(sorted(fields))}"
        )
    keywords = dict(keywords)
    local = set(keywords.pop("local_options", ()))
    options = _options(name, keywords.pop("options", {}), stacklevel=4)
    if local - set(options):
        raise SpecError(
            f"backend '{name}': local_options names {', '.join(sorted(local - set(options)))}, "
            "which are not among its options"
        )
    keywords["options"] = {
        k: dataclasses.replace(o, local_only=o.local_only or k in local) for k, o in options.items()
    }
    return BackendSpec(name, **keywords)


# -- the docs' table ------------------------------------------------------------------------------


def reference() -> str:
    """The docs' reference of both classes, as docs/hooks.md and docs/plugin-authors.md hold
    it (a test checks they do)."""
    return (
        f"#### `byoc.BackendSpec`\n\n{fields_table(BackendSpec)}\n"
        f"#### `byoc.Option`\n\n{fields_table(Option)}"
    )


def field_docs(cls: type) -> dict[str, str]:
    """``field -> text`` of the ``:ivar field: text`` entries of ``cls``'s docstring, on one
    line each, reST's double backquotes made Markdown's single ones."""
    doc = cls.__doc__ or ""
    out = {}
    for name, text in re.findall(r":ivar (\w+):(.*?)(?=\n\s*:ivar |\Z)", doc, flags=re.S):
        out[name] = " ".join(text.split()).replace("``", "`")
    return out


def fields_table(cls: type) -> str:
    """The Markdown table of a dataclass's fields (``BackendSpec``, ``Option``): name, type,
    default and the docstring's text of each."""
    docs = field_docs(cls)
    rows = ["| field | type | default | meaning |", "|---|---|---|---|"]
    for f in dataclasses.fields(cls):
        if f.name not in docs:
            raise ValueError(f"{cls.__name__}.{f.name} has no ':ivar {f.name}:' in its docstring")
        cells = [f"`{f.name}`", f"`{f.type}`", _default(f), docs[f.name]]
        rows.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(rows) + "\n"


def _default(f: dataclasses.Field[Any]) -> str:
    if f.default is not dataclasses.MISSING:
        value = f.default
    elif f.default_factory is not dataclasses.MISSING:
        value = f.default_factory()
    else:
        return "required"
    if callable(value):
        return f"returns `{value()!r}`"
    if isinstance(value, float) and math.isfinite(value):
        return f"`{value:g}`".replace("e+", "e")
    return f"`{value!r}`"
