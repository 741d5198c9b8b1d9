"""The C toolchain: probing the compiler, building with cffi, the on-disk cache, loading.

Libraries are cached under ``platformdirs.user_cache_dir("byoc")/ccompiler/`` by a hash of the
source, the compiler, the flags and the host (platform, Python, cffi, CPU). A build happens in a
private temporary directory and lands in the cache with an atomic rename, so processes that build
the same hash at once never see a half-written file.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.machinery
import importlib.util
import os
import platform
import shlex
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import cffi
import platformdirs

EXT_SUFFIX = importlib.machinery.EXTENSION_SUFFIXES[0]
_OPENMP_FLAGS = ("-fopenmp", "-qopenmp", "-openmp")
_env_lock = threading.Lock()  # ffi.compile reads CC and LDSHARED from os.environ
_load_lock = threading.Lock()
_loaded: dict[str, Any] = {}  # library sha256 -> cffi lib


@dataclass(frozen=True)
class Toolchain:
    """A compiler that works, the flags to use and whether they enable OpenMP."""

    cc: str
    cflags: tuple[str, ...]

    @property
    def openmp(self) -> bool:
        return any(f.startswith(_OPENMP_FLAGS) for f in self.cflags)


def default_cc() -> str:
    """The compiler used when ``[backend.ccompiler] cc`` is not set: ``$CC`` or ``cc``."""
    return os.environ.get("CC") or "cc"


@functools.lru_cache(maxsize=16)
def probe(cc: str, cflags: tuple[str, ...] | None) -> Toolchain | str:
    """Check that ``cc`` builds Python extensions with ``cflags``; None picks ``-O3``,
    ``-march=native``, ``-fno-math-errno``, ``-fno-trapping-math`` and ``-fopenmp`` (else
    ``-fopenmp-simd``) where the compiler takes them. The generated code never reads the
    floating-point exception flags, so ``-fno-trapping-math`` changes no result.
    Returns the toolchain, or why there is none."""
    words = shlex.split(cc)
    path = shutil.which(words[0]) if words else None
    if path is None:
        return f"no working C compiler: {cc} not found"
    include = sysconfig.get_paths()["include"]
    if not os.path.isfile(os.path.join(include, "Python.h")):
        return f"Python development headers not found (no Python.h in {include})"
    command = [path, *words[1:]]
    if not _builds(command, ()):
        return f"no working C compiler: {cc} cannot build a shared library"
    if cflags is not None:
        if not _builds(command, cflags, openmp=any(f.startswith(_OPENMP_FLAGS) for f in cflags)):
            return f"{cc} rejects cflags {list(cflags)}"
        return Toolchain(shlex.join(command), cflags)
    flags: list[str] = ["-O3"]
    for extra in ("-march=native", "-fno-math-errno", "-fno-trapping-math"):
        if _builds(command, (*flags, extra)):
            flags.append(extra)
    if _builds(command, (*flags, "-fopenmp"), openmp=True):
        flags.append("-fopenmp")
    elif _builds(command, (*flags, "-fopenmp-simd")):
        flags.append("-fopenmp-simd")  # `#pragma omp simd` without the OpenMP runtime
    return Toolchain(shlex.join(command), tuple(flags))


def _builds(command: list[str], flags: tuple[str, ...], openmp: bool = False) -> bool:
    code = "int byoc_probe(int x) { return x + 1; }\n"
    if openmp:
        code = (
            "#include <omp.h>\nint byoc_probe(int x) {\n  int s = 0;\n"
            "  #pragma omp parallel for reduction(+:s)\n  for (int i = 0; i < x; ++i) s += i;\n"
            "  return s + omp_get_max_threads();\n}\n"
        )
    with tempfile.TemporaryDirectory(prefix="byoc-cc-probe-") as tmp:
        src = Path(tmp) / "probe.c"
        src.write_text(code)
        try:
            done = subprocess.run(
                [*command, *flags, "-shared", "-fPIC", str(src), "-o", str(Path(tmp) / "p.so")],
                capture_output=True,
                timeout=60,
                check=False,
            )
        except (OSError, subprocess.SubprocessError):
            return False
        return done.returncode == 0


@functools.cache
def host_tag() -> str:
    """What a compiled library depends on besides its source: platform, Python, cffi, CPU."""
    cpu = platform.processor()
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(("flags", "Features", "model name")):
                cpu += line
    parts = [
        sys.platform,
        platform.machine(),
        EXT_SUFFIX,
        sys.implementation.cache_tag,
        cffi.__version__,
        cpu,
    ]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:16]


def cache_dir(override: str = "") -> Path:
    path = Path(override) if override else Path(platformdirs.user_cache_dir("byoc")) / "ccompiler"
    path.mkdir(parents=True, exist_ok=True)
    return path


def module_name(source: str, toolchain: Toolchain) -> str:
    """The cache key, spelled as the Python extension name: ``_byoc_cc_<24 hex digits>``."""
    key = "\0".join([source, toolchain.cc, *toolchain.cflags, host_tag()])
    return "_byoc_cc_" + hashlib.sha256(key.encode()).hexdigest()[:24]


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def build(symbol: str, source: str, toolchain: Toolchain, where: str = "") -> tuple[str, Path]:
    """Compile ``source`` (exporting ``int symbol(void *const *)``) unless the cache has it.

    Returns the extension's module name and its path in the cache. The first build of a hash
    to land wins; the file never changes afterwards.
    """
    name = module_name(source, toolchain)
    root = cache_dir(where)
    target = root / f"{name}{EXT_SUFFIX}"
    if target.is_file():
        return name, target
    ffi = cffi.FFI()
    ffi.cdef(f"int {symbol}(void *const *args);")
    link = [f for f in toolchain.cflags if f.startswith(_OPENMP_FLAGS)]
    ffi.set_source(
        name,
        source,
        extra_compile_args=list(toolchain.cflags),
        extra_link_args=link,
        libraries=["m"],
    )
    tmp = tempfile.mkdtemp(prefix=f"{name}-", dir=root)
    try:
        with (
            _compiler_env(toolchain.cc),
            open(os.devnull, "w") as null,
            contextlib.redirect_stdout(null),
        ):
            built = ffi.compile(tmpdir=tmp, verbose=False)
        _publish(Path(built), target)
        keep = Path(tmp) / f"{name}.c"
        if keep.is_file():  # the extension's full C source, for people reading the cache
            _publish(keep, root / f"{name}.c")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return name, target


def _publish(src: Path, target: Path) -> None:
    """Move a finished file into the cache unless one is there already (atomic, no overwrite)."""
    try:
        os.link(src, target)
    except FileExistsError:
        pass
    except OSError:  # no hard links on this file system: an atomic rename, last one wins
        os.replace(src, target)


def install(name: str, library: bytes, where: str = "") -> Path:
    """Put library bytes into the cache under a name derived from their sha256."""
    target = cache_dir(where) / f"{name}-{sha256(library)[:16]}{EXT_SUFFIX}"
    if not target.is_file():
        fd, tmp = tempfile.mkstemp(prefix=f"{name}-", dir=target.parent)
        with os.fdopen(fd, "wb") as fh:
            fh.write(library)
        _publish(Path(tmp), target)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
    return target


@contextlib.contextmanager
def _compiler_env(cc: str) -> Iterator[None]:
    """Point distutils (inside ffi.compile) at our compiler for the duration of one build."""
    ldshared = shlex.split(sysconfig.get_config_var("LDSHARED") or "cc -shared")
    with _env_lock:
        saved = {k: os.environ.get(k) for k in ("CC", "LDSHARED")}
        os.environ["CC"] = cc
        os.environ["LDSHARED"] = shlex.join([*shlex.split(cc), *ldshared[1:]])
        try:
            yield
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v


def load(name: str, path: Path, expected_sha256: str) -> tuple[Any, Any]:
    """Load a cached extension, only if its bytes have the sha256 the artifact records."""
    with _load_lock:
        if expected_sha256 in _loaded:
            return _loaded[expected_sha256]
        actual = sha256(path.read_bytes())
        if actual != expected_sha256:
            raise RuntimeError(
                f"{path} has sha256 {actual[:16]}..., the artifact records "
                f"{expected_sha256[:16]}...; not loading it"
            )
        # libgomp reads this once, when it loads: sleeping idle threads leave the cores to
        # onnxruntime between our kernels. A value the user set wins.
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
        spec = importlib.util.spec_from_file_location(name, path)
        if spec is None or spec.loader is None:
            raise RuntimeError(f"cannot load {path} as a Python extension")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        _loaded[expected_sha256] = (module.ffi, module.lib)
        return _loaded[expected_sha256]
