"""The shim's kind and algorithm ids come from the tables (ops.py, the kinds table), generated
into its C++; each kind's C++ half lives in the shim file of its family, reached through the
generated dispatch table."""

from __future__ import annotations

import re
from importlib import resources
from pathlib import Path

import pytest
from byoc_dnnl import kinds, native, ops


def test_the_generated_header_gives_the_ids_python_sends() -> None:
    header = ops.header(kinds.NAMES)
    enums = dict(re.findall(r"\b((?:OP|PO|CELL|DIR)_\w+) = (\d+)", header))
    assert {f"OP_{k.name.upper()}": str(k.id) for k in kinds.KINDS}.items() <= enums.items()
    assert {f"PO_{k.upper()}": str(i) for k, i in ops.POST_IDS.items()}.items() <= enums.items()
    for prefix, family in (("CELL", "cell"), ("DIR", "direction")):
        wanted = {f"{prefix}_{k.upper()}": str(i) for k, i in ops.RNN_IDS[family].items()}
        assert wanted.items() <= enums.items(), family
    for family, ids in ops.ALG_IDS.items():
        rows = re.search(rf"{family.upper()}_ALGS\[\] = \{{(.*?)\}};", header, re.S)
        assert rows is not None, family
        names = re.findall(r'\{"(\w+)", dnnl::algorithm::\w+\}', rows.group(1))
        assert {n: i + 1 for i, n in enumerate(names)} == ids, family  # row order is id order
    assert re.findall(r'"(\w+)"', header.split("SLOW[] = ")[1].split(";")[0]) == list(ops.SLOW)


def test_each_kinds_lowering_is_in_its_familys_shim_file() -> None:
    """``lower_<kind>`` is defined in ``shim/<family>.hpp`` for the kind's family module
    ``kinds/<family>.py``, once, and the generated dispatch list names every kind in id order."""
    shim = Path(str(resources.files("byoc_dnnl"))) / "shim"
    defined: dict[str, list[str]] = {}
    for path in shim.glob("*.hpp"):
        lowerings = re.findall(r"^void lower_(\w+)\(Net &n, const Op &op\)", path.read_text(), re.M)
        for name in lowerings:
            defined.setdefault(name, []).append(path.stem)
    for family in kinds.FAMILIES:
        room = family.__name__.rsplit(".", 1)[1]
        for kind in family.FAMILY.kinds:
            assert defined.get(kind.name) == [room], (kind.name, defined.get(kind.name))
    listed = re.search(r"#define BYOC_DNNL_KINDS\(X\) (.*)", ops.header(kinds.NAMES))
    assert listed is not None
    assert re.findall(r"X\((\w+)\)", listed.group(1)) == list(kinds.NAMES)


@pytest.mark.parametrize("kind", kinds.KINDS, ids=lambda k: k.name)
def test_the_shim_dispatches_each_kind_id_to_its_lowering(kind: kinds.Kind) -> None:
    """An op of each kind id, given no operands, reaches that kind's own lowering (whose
    complaint names it: deconv and safe_softmax share conv's and softmax's)."""
    ffi, lib = native.load()
    own = {"deconv": "conv", "safe_softmax": "softmax"}.get(kind.name, kind.name)
    message = _op_error(ffi, lib, kind.id, [0] if kind.post_ops else [])  # no post-ops
    assert re.match(rf"op {kind.id}: (bad {own} op|{own} takes )", message), message


@pytest.mark.parametrize("kind_id", [0, len(kinds.KINDS) + 1, -1])
def test_the_shim_refuses_an_unknown_kind_id(kind_id: int) -> None:
    ffi, lib = native.load()
    assert _op_error(ffi, lib, kind_id, []) == f"op {kind_id}: unknown op kind {kind_id}"


def _op_error(ffi, lib, kind_id: int, ip: list[int]) -> str:  # type: ignore[no-untyped-def]
    """The shim's error for one op of ``kind_id`` reading nothing, with integers ``ip``."""
    err = ffi.new("char[512]")
    net = ffi.gc(lib.bd_create(0, 1, 1, err, 512), lib.bd_destroy)
    out = lib.bd_tensor(net, 1, ffi.new("int64_t[]", [4]))
    ints = ffi.new("int64_t[]", ip or [0])
    assert lib.bd_op(net, kind_id, 0, ffi.NULL, out, len(ip), ints, 0, ffi.NULL) == -1
    return ffi.string(lib.bd_error(net)).decode()
