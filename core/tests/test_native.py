"""byoc.native: build C and C++ through cffi, the cache, loading by hash, pack/unpack."""

from __future__ import annotations

import dataclasses
import os

import pytest
from byoc import ArtifactError, native

C_SOURCE = "int twice(int x) { return 2 * x; }\n"
CXX_SOURCE = """#include <vector>
extern "C" int total(int n) {
  std::vector<int> v(n, 3);
  int s = 0;
  for (int x : v) s += x;
  return s;
}
"""
MAGIC = b"test artifact 1\n"


def toolchain(language="c"):
    found = native.probe(native.default_compiler(language), None, language)
    if isinstance(found, str):
        pytest.skip(found)
    return found


def test_a_c_library_builds_once_loads_and_runs(tmp_path):
    tc = toolchain()
    lib = native.build(C_SOURCE, tc, "int twice(int x);", "t", cache=str(tmp_path))
    assert lib.module.startswith("_byoc_t_") and lib.usable_here()
    before = sorted(os.listdir(tmp_path))
    again = native.build(C_SOURCE, tc, "int twice(int x);", "t", cache=str(tmp_path))
    assert again.sha256 == lib.sha256 and sorted(os.listdir(tmp_path)) == before  # cache hit
    assert not [p for p in before if not p.startswith(lib.module)]  # no temporary leftovers
    _, c = native.load(lib, "t", str(tmp_path))
    assert c.twice(21) == 42
    assert sorted(os.listdir(tmp_path)) == before  # loading uses the file build wrote


def test_an_unprobed_toolchain_builds_or_fails_at_build(tmp_path):
    known = native.toolchain(native.default_compiler("c"), ["-O2"])
    assert known.version  # the first line of `cc --version`: part of the cache key
    lib = native.build(C_SOURCE, known, "int twice(int x);", "t", cache=str(tmp_path))
    assert native.load(lib, "t", str(tmp_path))[1].twice(4) == 8
    missing = native.toolchain("/nonexistent/cc", ["-O2"])
    with pytest.raises(RuntimeError):
        native.build(C_SOURCE, missing, "int twice(int x);", "t", cache=str(tmp_path))


def test_a_cxx_library_builds_with_the_cxx_toolchain(tmp_path):
    tc = toolchain("c++")
    lib = native.build(CXX_SOURCE, tc, "int total(int n);", "t", cache=str(tmp_path))
    _, c = native.load(lib, "t", str(tmp_path))
    assert c.total(5) == 15 and lib.toolchain["language"] == "c++"


def test_a_compile_error_carries_the_compilers_message(tmp_path):
    broken = "int twice(int x) { return x +; }\n"
    with pytest.raises(RuntimeError, match="expected expression"):
        native.build(broken, toolchain(), "int twice(int x);", "t", cache=str(tmp_path))


def test_a_compile_error_comes_before_the_warnings_it_sets_off(tmp_path):
    """An error whose warnings run longer than the message keeps (here functions its broken
    caller leaves unused) is still in the message, ahead of them."""
    unused = "".join(f"static int unused_{i}(int x) {{ return x + {i}; }}\n" for i in range(60))
    broken = unused + "int twice(int x) { return x +; }\n"
    tc = toolchain()
    tc = dataclasses.replace(tc, cflags=(*tc.cflags, "-Wall"))
    with pytest.raises(RuntimeError) as info:
        native.build(broken, tc, "int twice(int x);", "t", cache=str(tmp_path))
    assert "expected expression" in str(info.value)
    assert str(info.value).count("unused_") < 60  # the rest of the output: its tail


def test_a_missing_compiler_or_bad_flags_give_a_reason():
    assert (
        native.probe("/nonexistent/cc", None) == "no working C compiler: /nonexistent/cc not found"
    )
    assert "rejects cflags" in native.probe(native.default_compiler(), ("--no-such-flag",))


def test_a_library_whose_bytes_do_not_match_its_hash_is_not_loaded(tmp_path):
    lib = native.build(C_SOURCE, toolchain(), "int twice(int x);", "t", cache=str(tmp_path))
    with pytest.raises(RuntimeError, match="not loading it"):
        native.load(dataclasses.replace(lib, sha256="0" * 64), "t", str(tmp_path))
    with pytest.raises(RuntimeError, match="not a module name"):
        native.load(dataclasses.replace(lib, module="../../evil"), "t", str(tmp_path))


def test_pack_and_unpack_carry_source_and_library(tmp_path):
    lib = native.build(C_SOURCE, toolchain(), "int twice(int x);", "t", cache=str(tmp_path))
    data = native.pack(MAGIC, {"mine": 7}, C_SOURCE, lib)
    header, source, back = native.unpack(data, MAGIC, "t")
    assert header["mine"] == 7 and source == C_SOURCE and back == lib
    header, source, none = native.unpack(native.pack(MAGIC, {}, C_SOURCE, None), MAGIC, "t")
    assert none is None and source == C_SOURCE


@pytest.mark.parametrize(
    ("damage", "words"),
    [
        (lambda d: d[:-1], "truncated or damaged"),
        (lambda d: b"other" + d, "does not start with"),
        (lambda d: d.replace(b"return 2", b"return 3"), "source does not match its sha256"),
        (lambda d: d[:-3] + b"xyz", "library does not match its sha256"),
        (lambda d: d[: len(MAGIC) + 4], "truncated inside the header length"),
    ],
)
def test_damaged_packed_bytes_are_an_artifact_error(tmp_path, damage, words):
    lib = native.build(C_SOURCE, toolchain(), "int twice(int x);", "t", cache=str(tmp_path))
    with pytest.raises(ArtifactError, match=words):
        native.unpack(damage(native.pack(MAGIC, {}, C_SOURCE, lib)), MAGIC, "t")


@pytest.mark.parametrize(
    ("spin", "user", "expected"),
    [
        (0, {}, {"OMP_WAIT_POLICY": "PASSIVE", "GOMP_SPINCOUNT": None}),
        (3000, {}, {"OMP_WAIT_POLICY": None, "GOMP_SPINCOUNT": "3000"}),
        (
            3000,
            {"OMP_WAIT_POLICY": "ACTIVE"},
            {"OMP_WAIT_POLICY": "ACTIVE", "GOMP_SPINCOUNT": None},
        ),
        (0, {"GOMP_SPINCOUNT": "10"}, {"OMP_WAIT_POLICY": None, "GOMP_SPINCOUNT": "10"}),
    ],
)
def test_loading_sets_how_long_openmp_threads_spin_unless_the_user_did(
    tmp_path, monkeypatch, spin, user, expected
):
    for var in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT"):
        monkeypatch.delenv(var, raising=False)
    for var, value in user.items():
        monkeypatch.setenv(var, value)
    name = f"f_{spin}_{'_'.join(f'{k}_{v}' for k, v in user.items())}"  # a library per case
    source = f"int {name}(void) {{ return 1; }}\n"
    lib = native.build(source, toolchain(), f"int {name}(void);", "t", cache=str(tmp_path))
    native.load(lib, "t", str(tmp_path), openmp_spin=spin)
    assert {var: os.environ.get(var) for var in expected} == expected
