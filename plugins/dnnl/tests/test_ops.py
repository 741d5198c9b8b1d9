"""The shim's kind and algorithm ids come from the tables (ops.py, the kinds table), generated
into its C++."""

from __future__ import annotations

import re

from byoc_dnnl import kinds, ops


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
