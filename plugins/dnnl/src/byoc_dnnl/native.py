"""Building and loading the native shim (shim.cpp) against the installed oneDNN.

The shim is compiled once per (shim source, compiler, oneDNN version) and cached under the user
cache dir, ``platformdirs.user_cache_dir("byoc")/dnnl/``; the build goes to a temporary file
renamed into place, so concurrent processes never see a half-written library. Only the C++
compiler sees oneDNN's headers and enums; Python sees the shim's own small C API (``CDEF``).
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
from importlib import resources
from pathlib import Path
from typing import Any

import cffi
import platformdirs

# The shim's C API. Only ints, floats and pointers: nothing of oneDNN crosses this line.
CDEF = """
void *bd_create(int bf16, char *err, size_t errlen);
void bd_destroy(void *net);
const char *bd_error(void *net);
int bd_tensor(void *net, int ndims, const int64_t *dims);
int bd_const(void *net, int ndims, const int64_t *dims, const float *data);
int bd_input(void *net, int id);
int bd_output(void *net, int id);
int bd_op(void *net, int kind, int nin, const int *ins, int out, int ni, const int64_t *ip,
          int nf, const float *fp);
int bd_finalize(void *net, int nthreads);
size_t bd_arena_bytes(void *net);
int bd_steps(void *net);
int bd_step_op(void *net, int i);
const char *bd_step_impl(void *net, int i);
int bd_run(void *net, int nthreads, void *const *ins, void *const *outs, double *times,
           char *err, size_t errlen);
"""

ffi = cffi.FFI()
ffi.cdef(CDEF)

_lock = threading.Lock()
_lib: list[Any] = []
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


def _compiler() -> str:
    cxx = os.environ.get("CXX") or shutil.which("g++") or shutil.which("c++")
    if not cxx:
        raise NativeUnavailable("no C++ compiler found (install g++ or set CXX)")
    return cxx


def _source() -> str:
    return resources.files("byoc_dnnl").joinpath("shim.cpp").read_text()


def cache_dir() -> Path:
    return Path(platformdirs.user_cache_dir("byoc")) / "dnnl"


def build() -> Path:
    """Compile the shim (or find it in the cache) and return the library's path."""
    prefix = onednn_prefix()
    cxx = _compiler()
    try:
        version = subprocess.run(
            [cxx, "--version"], capture_output=True, text=True, timeout=60
        ).stdout.splitlines()[0]
    except (OSError, subprocess.SubprocessError, IndexError) as exc:
        raise NativeUnavailable(f"the C++ compiler {cxx!r} does not run: {exc}") from None
    source = _source()
    flags = ["-O2", "-std=c++17", "-fPIC", "-shared", "-fopenmp"]
    key = "\n".join([source, cxx, version, onednn_version(prefix), str(prefix), *flags])
    digest = hashlib.sha256(key.encode()).hexdigest()[:20]
    target = cache_dir() / f"libbyoc_dnnl_{digest}.so"
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        src = Path(tmp) / "shim.cpp"
        src.write_text(source)
        out = Path(tmp) / target.name
        lib = prefix / "lib"
        libdnnl = _libdnnl(prefix)
        assert libdnnl is not None  # onednn_prefix checked it
        cmd = [
            cxx,
            *flags,
            "-I",
            str(prefix / "include"),
            str(src),
            "-o",
            str(out),
            "-L",
            str(lib),
            f"-Wl,-rpath,{lib}",
            "-l:" + libdnnl.name,
        ]
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        except (OSError, subprocess.SubprocessError) as exc:
            raise NativeUnavailable(f"compiling the oneDNN shim failed: {exc}") from None
        if done.returncode != 0:
            raise NativeUnavailable(
                f"compiling the oneDNN shim failed ({' '.join(cmd[:3])} ...):\n"
                + done.stderr.strip()[-1500:]
            )
        os.replace(out, target)
    return target


def lib() -> Any:
    """The loaded shim; raises NativeUnavailable (with the reason) if it cannot be built."""
    with _lock:
        if _lib:
            return _lib[0]
        if _failure:
            raise NativeUnavailable(_failure[0])
        try:
            path = build()
            _lib.append(ffi.dlopen(str(path)))
        except NativeUnavailable as exc:
            _failure.append(str(exc))
            raise
        except OSError as exc:
            _failure.append(f"loading the oneDNN shim failed: {exc}")
            raise NativeUnavailable(_failure[0]) from None
        return _lib[0]


def unavailable_reason() -> str | None:
    """None when the native runtime can be used, else why not."""
    try:
        lib()
    except NativeUnavailable as exc:
        return str(exc)
    return None
