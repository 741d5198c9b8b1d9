"""The kernel kinds table: one entry per kind, in one module per family of kinds.

A family module holds side by side, for each of its kernel kinds (``base.Kind``), the ONNX ops
lowered into it (``base.Op``: support check and lowering), its composites (``base.Composite``:
patterns, check, lowering), the shim's parameters (packing and validation) and the C source
mode's call into the kernel library. This module reads the families in ``FAMILIES`` order and
assembles what the stages need: ``supported_ops`` and ``pattern_table`` (annotation),
``lowerings`` (codegen), ``validate_kernel`` and ``pack`` (the JSON runtime and the C source
mode), ``KINDS`` (ops.header's ids). README.md, "Adding a kernel kind", says what else changes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from byoc.patterns import Match, Pattern

from byoc_dnnl.annotate import Check, or_host, typed
from byoc_dnnl.kinds import (
    binary,
    conv,
    eltwise,
    hosted,
    int8,
    matmul,
    norm,
    pool,
    resample,
    rnn,
    shape,
)
from byoc_dnnl.kinds.base import Composite, Kind, Lower, LowerComposite, Op, bad, number
from byoc_dnnl.ops import ALG_IDS, POST_ALGS, POST_IDS, POST_KINDS

# Composite patterns are tried in this order of families, each family's most specific first.
FAMILIES = (int8, conv, matmul, norm, eltwise, binary, pool, shape, resample, rnn, hosted)


def _put(table: dict[str, Any], name: str, entry: Any, family: Any, what: str) -> None:
    if name in table:
        raise RuntimeError(f"byoc_dnnl.kinds: {family.__name__} names {what} {name!r} again")
    table[name] = entry


def _table() -> tuple[tuple[Kind, ...], dict[str, Op], list[Composite]]:
    """Every family's entries, each name once; the kinds in id order, ids 1..N each once."""
    kinds: dict[str, Kind] = {}
    ops: dict[str, Op] = {}
    composites: dict[str, Composite] = {}
    for family in FAMILIES:
        for kind in family.FAMILY.kinds:
            _put(kinds, kind.name, kind, family, "kernel kind")
        for op_type, op in family.FAMILY.ops.items():
            _put(ops, op_type, op, family, "op")
        for composite in family.FAMILY.composites:
            _put(composites, composite.name, composite, family, "composite")
    by_id = sorted(kinds.values(), key=lambda k: k.id)
    if [k.id for k in by_id] != list(range(1, len(by_id) + 1)):
        ids = {k.name: k.id for k in by_id}
        raise RuntimeError(f"byoc_dnnl.kinds: kind ids must be 1..{len(by_id)}, each once: {ids}")
    return tuple(by_id), ops, list(composites.values())


KINDS, OPS, COMPOSITES = _table()
BY_NAME = {k.name: k for k in KINDS}
NAMES = tuple(k.name for k in KINDS)  # in id order: ops.header(NAMES)
FUSES = tuple(k.name for k in KINDS if k.post_ops)  # the kernels that take post-ops


# -- annotation ---------------------------------------------------------------------------------


def supported_ops(config: Mapping[str, Any]) -> dict[str, Check]:
    """The single ops the backend claims, each with its check. Entries marked ``json_only``
    (DynamicQuantizeLinear, QuantizeLinear, LSTM, GRU) are claimed with ``codegen = "json"``
    only; ``c_check`` replaces an entry's check with ``codegen = "c"``."""
    json = config.get("codegen", "json") == "json"
    claimed: dict[str, Check] = {}
    for op_type, entry in OPS.items():
        if entry.json_only and not json:
            continue
        check = entry.check if json or entry.c_check is None else entry.c_check
        check = typed(check) if entry.typed else check
        claimed[op_type] = or_host(check) if entry.on_integers else check
    return claimed


def members_ok(match: Match) -> str | None:
    """Every member passes its own single-op check (types, attributes)."""
    checks = supported_ops({})
    for node in match.nodes:
        reason = checks[node.op_type](node) if node.op_type in checks else "not supported"
        if reason:
            return f"{node.name}: {reason}"
    return None


def _composite_check(entry: Composite) -> Any:
    check = entry.check
    if not entry.members:
        return check
    if check is None:
        return members_ok

    def run(match: Match) -> str | None:
        return check(match) or members_ok(match)

    run.__doc__ = check.__doc__
    return run


def pattern_table(config: Mapping[str, Any]) -> list[tuple[str, Pattern, Any]]:
    """Composite patterns, most specific first, like TVM's ``dnnl.py``.

    Activations spelled out in basic ops (HardSwish as ``x*clip(x+3,0,6)/6``, Swish as
    ``x*sigmoid(x)``, GELU with Erf) become one oneDNN eltwise, fused as a post-op into the
    convolution or matmul in front of them. The int8 composites are JSON mode's only (the C
    kernel library has no int8 kernels).
    """
    json = config.get("codegen", "json") == "json"
    return [
        (entry.name, pattern, _composite_check(entry))
        for entry in COMPOSITES
        if json or not entry.json_only
        for pattern in entry.patterns
    ]


# -- lowering -----------------------------------------------------------------------------------


def lowerings() -> tuple[dict[str, Lower], dict[str, LowerComposite | None]]:
    """Each op type's lowering, and each composite's (None: member by member)."""
    return {t: e.lower for t, e in OPS.items()}, {c.name: c.lower for c in COMPOSITES}


# -- the shim's parameters ----------------------------------------------------------------------


def validate_kernel(i: int, node: dict[str, Any]) -> None:
    """Check a kernel node's structure (kind, references, post-ops), or ArtifactError."""
    kind = node.get("kind")
    if kind not in NAMES:  # a tuple: any JSON value may be looked up
        raise bad(f"node {i} has unknown kernel kind {kind!r:.80}")
    inputs = node.get("inputs")
    if not isinstance(inputs, list) or not all(isinstance(v, int) for v in inputs):
        raise bad(f"node {i}: inputs must be a list of node ids")
    if any(v < -1 or v >= i for v in inputs):
        raise bad(f"node {i} reads a node that does not come before it")
    attrs = node.get("attrs")
    if not isinstance(attrs, dict):
        raise bad(f"node {i}: attrs must be an object")
    members = node.get("members", [])
    if not isinstance(node.get("name"), str) or not isinstance(members, list):
        raise bad(f"node {i}: a kernel's name must be a string and its members a list")
    if not all(isinstance(m, str) for m in members):
        raise bad(f"node {i}: members must be ONNX node names, got {members!r:.80}")
    validate = BY_NAME[kind].validate
    if validate is not None:
        validate(i, node)
    posts = node.get("post_ops", [])
    if not isinstance(posts, list) or len(posts) > 16:
        raise bad(f"node {i}: post_ops must be a list (at most 16)")
    for p in posts:
        if not isinstance(p, dict) or p.get("kind") not in POST_KINDS:  # a tuple: any value
            raise bad(f"node {i}: bad post-op {p!r:.80}")
        if p.get("alg", "") not in POST_ALGS[p["kind"]]:
            known = ", ".join(POST_ALGS[p["kind"]]) or "none"
            raise bad(
                f"node {i}: unknown {p['kind']} post-op algorithm {p.get('alg')!r:.80} "
                f"(known: {known})"
            )
        if p["kind"] == "eltwise":
            if "input" in p:
                raise bad(f"node {i}: an eltwise post-op reads no input")
        elif not _node_id(p.get("input")) or not 0 <= p["input"] < i:
            raise bad(f"node {i}: a post-op reads a node that does not come before it")
        for key in ("alpha", "beta"):
            number(p.get(key, 0.0), f"node {i} post-op {key}")


def _node_id(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def pack(i: int, node: dict[str, Any], ids: dict[int, int]) -> tuple[list[int], list[float]]:
    """The shim's integer and float parameters of a validated kernel node (see shim.cpp): its
    post-ops (kinds that take them), then its kind's own; ArtifactError when one is wrong."""
    kind = BY_NAME[node["kind"]]
    if node["post_ops"] and not kind.post_ops:
        raise bad(f"node {i}: a {kind.name} kernel takes no post-ops")
    ip: list[int] = [len(node["post_ops"])] if kind.post_ops else []
    fp: list[float] = []
    for p in node["post_ops"]:
        alg = ALG_IDS.get(p["kind"], {}).get(p.get("alg"), 0)
        ip += [POST_IDS[p["kind"]], alg, ids[p["input"]] if "input" in p else -1]
        fp += [
            number(p.get("alpha", 0.0), f"node {i} alpha"),
            number(p.get("beta", 0.0), f"node {i} beta"),
        ]
    try:
        own_ip, own_fp = kind.params(i, node)
    except (KeyError, TypeError) as exc:
        raise bad(f"node {i} ({kind.name}) lacks attribute {exc}") from None
    return ip + own_ip, fp + own_fp
