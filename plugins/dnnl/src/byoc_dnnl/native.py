"""Building and loading the native shim (shim.cpp) against the installed oneDNN.

``byoc.native`` compiles the shim as a C++ extension once per (shim source, compiler, flags,
oneDNN version and prefix, host) and caches it under ``platformdirs.user_cache_dir("byoc")/dnnl/``
(atomic rename: concurrent processes never see a half-written library). Only the C++ compiler
sees oneDNN's headers and enums; Python sees the shim's own small C API (``CDEF``).
"""

from __future__ import annotations

import hashlib
import os
import re
import shlex
import shutil
import sys
import threading
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import Any

from byoc import native

from byoc_dnnl import kinds, ops

# The shim's C API. Only ints, floats and pointers: nothing of oneDNN crosses this line.
CDEF = """
void *bd_create(int bf16, int winograd, int nthreads, char *err, size_t errlen);
void bd_destroy(void *net);
const char *bd_error(void *net);
int bd_tensor(void *net, int ndims, const int64_t *dims);
int bd_const(void *net, int ndims, const int64_t *dims, const float *data);
int bd_input(void *net, int id);
int bd_output(void *net, int id);
int bd_op(void *net, int kind, int nin, const int *ins, int out, int ni, const int64_t *ip,
          int nf, const float *fp);
int bd_finalize(void *net);
size_t bd_arena_bytes(void *net);
int bd_steps(void *net);
int bd_step_op(void *net, int i);
int bd_step_threads(void *net, int i);
const char *bd_step_impl(void *net, int i);
int bd_run(void *net, void *const *ins, void *const *outs, double *times, char *err,
           size_t errlen);
"""
FLAGS = ("-O2", "-std=c++17", "-fopenmp")

_lock = threading.Lock()
_loaded: list[tuple[Any, Any]] = []
_failure: list[str] = []


class NativeUnavailable(RuntimeError):
    """oneDNN, its headers or a C++ compiler cannot be found or used."""


def onednn_prefix() -> Path:
    """The prefix holding ``include/oneapi/dnnl/dnnl.hpp`` and ``lib/libdnnl.so``.

    ``BYOC_DNNL_ROOT`` overrides; otherwise the running environment (where the
    ``onednn-cpu-gomp`` and ``onednn-devel-cpu-gomp`` wheels put them).
    """
    candidates = [os.environ.get("BYOC_DNNL_ROOT"), sys.prefix, sys.base_prefix]
    for cand in filter(None, candidates):
        p = Path(cand)
        if (p / "include/oneapi/dnnl/dnnl.hpp").is_file() and _libdnnl(p):
            return p
    raise NativeUnavailable(
        "oneDNN was not found: need include/oneapi/dnnl/dnnl.hpp and lib/libdnnl.so under "
        f"{sys.prefix} (pip install onednn-cpu-gomp==2023.2.0 onednn-devel-cpu-gomp==2023.2.0) "
        "or BYOC_DNNL_ROOT"
    )


def _libdnnl(prefix: Path) -> Path | None:
    for name in ("libdnnl.so", "libdnnl.so.3"):
        if (prefix / "lib" / name).exists():
            return prefix / "lib" / name
    return None


def onednn_version(prefix: Path) -> str:
    """oneDNN's version, read from dnnl_version.h."""
    text = (prefix / "include/oneapi/dnnl/dnnl_version.h").read_text()
    parts = [re.search(rf"DNNL_VERSION_{k}\s+(\d+)", text) for k in ("MAJOR", "MINOR", "PATCH")]
    return ".".join(m.group(1) if m else "?" for m in parts)


def source(name: str) -> str:
    """One of the plugin's C++ files (``shim.cpp``, ``kernels.cpp``) behind the generated
    ``ops.header()`` (its ids and algorithms: ops.py's and the kinds table's); ``#line`` keeps
    the compiler's messages on the file's own lines."""
    text = resources.files("byoc_dnnl").joinpath(name).read_text()
    return f'{ops.header(kinds.NAMES)}#line 1 "{name}"\n{text}'


def _package() -> Path:
    """The directory holding the plugin's C++ headers (``layouts.hpp``, ``dnnl_kernels.h``, and
    in ``shim/`` the shim's net and families)."""
    return Path(str(resources.files("byoc_dnnl")))


def _header_files() -> list[Path]:
    return sorted([*_package().glob("*.h*"), *_package().glob("shim/*.hpp")])


def _headers() -> list[str]:
    """The headers' sha256s: a changed header is a new build."""
    return [hashlib.sha256(h.read_bytes()).hexdigest() for h in _header_files()]


def build_id() -> str:
    """What decides the native code's speed besides byoc-dnnl's version: the plugin's C++ files,
    the Python that lowers and fuses the graph, and the oneDNN they link (measured placement's
    cache key: a rebuilt plugin is timed again)."""
    files = sorted({*_package().glob("*.[ch]*"), *_header_files(), *_package().glob("**/*.py")})
    digest = hashlib.sha256(
        b"".join(f.read_bytes() for f in files) + ops.header(kinds.NAMES).encode()
    )
    try:
        digest.update(str(onednn_prefix()).encode())
        digest.update(onednn_version(onednn_prefix()).encode())
    except NativeUnavailable:
        pass
    return digest.hexdigest()[:16]


def build(
    source: str,
    cdef: str,
    *,
    links: Path | None = None,
    depends: Sequence[str] = (),
    compile_flags: Sequence[str] = FLAGS,
) -> native.Library:
    """Compile C++ ``source`` (or find it in the cache) linked against oneDNN (the shim, the C
    source mode's kernel library) or, given ``links``, against that library of ours instead (a
    generated partition links the kernel library). The plugin's headers are on the include path
    and in the cache key."""
    prefix = onednn_prefix()
    cxx = native.default_compiler("c++")
    if shutil.which(shlex.split(cxx)[0] if cxx.strip() else "") is None:
        raise NativeUnavailable(
            f"no working C++ compiler: {cxx} not found (install g++ or set CXX)"
        )
    toolchain = native.toolchain(cxx, tuple(compile_flags), "c++")  # no probe builds: cached
    if links is None:
        links = _libdnnl(prefix)
        assert links is not None  # onednn_prefix checked it
    try:
        return native.build(
            source,
            toolchain,
            cdef,
            "dnnl",
            include_dirs=[str(prefix / "include"), str(_package())],
            library_dirs=[str(links.parent)],
            libraries=[":" + links.name],
            link_args=[f"-Wl,-rpath,{links.parent}"],
            depends=[f"oneDNN {onednn_version(prefix)}", *_headers(), *depends],
        )
    except RuntimeError as exc:
        raise NativeUnavailable(f"compiling with {cxx} failed: {exc}") from None


def load() -> tuple[Any, Any]:
    """The loaded shim, ``(ffi, lib)``; raises NativeUnavailable (with the reason) if it
    cannot be built or loaded. Tried once per process."""
    with _lock:
        if _loaded:
            return _loaded[0]
        if _failure:
            raise NativeUnavailable(_failure[0])
        try:
            # oneDNN's OpenMP threads spin across the gaps between its back-to-back small
            # primitives (sleeping at once: P1 1.26x onnxruntime instead of 0.6x), briefly.
            shim = build(source("shim.cpp"), CDEF)
            _loaded.append(native.load(shim, "dnnl", openmp_spin=native.OPENMP_SPIN_BRIEFLY))
        except NativeUnavailable as exc:
            _failure.append(str(exc))
            raise
        except (OSError, RuntimeError) as exc:
            _failure.append(f"loading the oneDNN shim failed: {exc}")
            raise NativeUnavailable(_failure[0]) from None
        return _loaded[0]


def unavailable_reason() -> str | None:
    """None when the native runtime can be used, else why not."""
    try:
        load()
    except NativeUnavailable as exc:
        return str(exc)
    return None
