"""The shim's kind and algorithm ids come from one table (ops.py), generated into its C++."""

from __future__ import annotations

import re

from byoc_dnnl import native, ops


def test_the_generated_header_gives_the_ids_python_sends() -> None:
    header = ops.header()
    enums = dict(re.findall(r"\b(OP_\w+|PO_\w+) = (\d+)", header))
    assert {f"OP_{k.upper()}": str(i) for k, i in ops.OP_IDS.items()}.items() <= enums.items()
    assert {f"PO_{k.upper()}": str(i) for k, i in ops.POST_IDS.items()}.items() <= enums.items()
    for family, table in (("ELTWISE", ops.ELTWISE_ALGS), ("BINARY", ops.BINARY_ALGS)):
        rows = re.search(rf"{family}_ALGS\[\] = \{{(.*?)\}};", header, re.S)
        assert rows is not None
        names = re.findall(r'\{"(\w+)", dnnl::algorithm::(\w+)\}', rows.group(1))
        assert names == list(table.items())  # row order is id order
    assert re.findall(r'"(\w+)"', header.split("SLOW[] = ")[1].split(";")[0]) == list(ops.SLOW)


def test_the_shim_lowers_every_kind_and_compiles_with_the_header() -> None:
    shim = native.source("shim.cpp")
    assert shim.startswith(ops.header())
    for kind in ops.KINDS:
        assert f"case OP_{kind.upper()}:" in shim, kind
    native.load()  # compiles (NativeUnavailable otherwise)
