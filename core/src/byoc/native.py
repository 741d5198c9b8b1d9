"""Native code for backend plugins: compile C or C++ through cffi, cache, load, and carry it.

TVM gives backend authors a C-source module (generate C, compile, export, load); this is
byoc's. A plugin that generates C (ccompiler) or wraps a C++ library (dnnl) uses it so::

    from byoc import native

    toolchain = native.probe(native.default_compiler("c"), None, "c")  # or the reason (str)
    library = native.build(source, toolchain, "int run(void *const *args);", "mybackend")
    ffi, lib = native.load(library, "mybackend")
    data = native.pack(b"mybackend artifact 1\\n", header, source, library)  # byoc_serialize's
    header, source, library = native.unpack(data, b"mybackend artifact 1\\n", "mybackend")

``build`` caches the compiled extension under ``platformdirs.user_cache_dir("byoc")/<kind>/``
keyed by the source, the compiler, the flags and the host (platform, Python, cffi, CPU); a
build happens in a private temporary directory and lands with an atomic rename, so processes
building the same key at once never see a half-written file. ``load`` imports a library only if
its bytes have the sha256 it records. ``pack`` and ``unpack`` carry the source and the library
in one artifact with both hashes; a library whose ``host`` is not ``host_tag()`` came from
another machine: rebuild it from the source (``usable_here``).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.machinery
import importlib.util
import os
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import cffi

from byoc import artifact, host
from byoc.errors import ArtifactError

EXT_SUFFIX = importlib.machinery.EXTENSION_SUFFIXES[0]
_OPENMP_FLAGS = ("-fopenmp", "-qopenmp", "-openmp")
_SUFFIX = {"c": ".c", "c++": ".cpp"}
_MODULE = re.compile(r"_byoc_[a-z0-9]+_[0-9a-f]{24}")
_env_lock = threading.Lock()  # ffi.compile reads CC, CXX and LDSHARED from os.environ
_load_lock = threading.Lock()
_loaded: dict[str, Any] = {}  # library sha256 -> (ffi, lib)


@dataclass(frozen=True)
class Toolchain:
    """A compiler that works for ``language`` ("c" or "c++") and the flags to use."""

    cc: str
    cflags: tuple[str, ...]
    language: str = "c"
    version: str = ""  # the first line of ``cc --version``: part of the cache key

    @property
    def openmp(self) -> bool:
        return any(f.startswith(_OPENMP_FLAGS) for f in self.cflags)


@dataclass
class Library:
    """A compiled extension module: its name (the cache key), bytes, and where it was built."""

    module: str
    data: bytes = field(repr=False)
    sha256: str
    host: str
    toolchain: dict[str, Any] = field(default_factory=dict)

    def usable_here(self) -> bool:
        """Built for this host (platform, Python, cffi, CPU)? Else rebuild from the source."""
        return self.host == host_tag()


def default_compiler(language: str = "c") -> str:
    """``$CC`` or ``cc`` for C; ``$CXX``, else ``g++`` or ``c++`` for C++."""
    if language == "c++":
        return os.environ.get("CXX") or shutil.which("g++") or "c++"
    return os.environ.get("CC") or "cc"


@functools.lru_cache(maxsize=16)
def probe(cc: str, cflags: tuple[str, ...] | None, language: str = "c") -> Toolchain | str:
    """Check that ``cc`` builds Python extensions with ``cflags``; None picks ``-O3``,
    ``-march=native``, ``-fno-math-errno``, ``-fno-trapping-math`` and ``-fopenmp`` (else
    ``-fopenmp-simd``) where the compiler takes them. Returns the toolchain, or why there is
    none (a sentence a user can act on)."""
    what = "C++" if language == "c++" else "C"
    try:
        words = shlex.split(cc)
    except ValueError as exc:  # an unclosed quote
        return f"{what} compiler {cc!r} is not a valid command line ({exc})"
    path = shutil.which(words[0]) if words else None
    if path is None:
        return f"no working {what} compiler: {cc} not found"
    include = sysconfig.get_paths()["include"]
    if not os.path.isfile(os.path.join(include, "Python.h")):
        return f"Python development headers not found (no Python.h in {include})"
    command = [path, *words[1:]]
    if not _builds(command, (), language):
        return f"no working {what} compiler: {cc} cannot build a shared library"
    if cflags is not None:
        openmp = any(f.startswith(_OPENMP_FLAGS) for f in cflags)
        if not _builds(command, cflags, language, openmp=openmp):
            return f"{cc} rejects cflags {list(cflags)}"
        return Toolchain(shlex.join(command), cflags, language, _version(command))
    flags: list[str] = ["-O3"]
    for extra in ("-march=native", "-fno-math-errno", "-fno-trapping-math"):
        if _builds(command, (*flags, extra), language):
            flags.append(extra)
    if _builds(command, (*flags, "-fopenmp"), language, openmp=True):
        flags.append("-fopenmp")
    elif _builds(command, (*flags, "-fopenmp-simd"), language):
        flags.append("-fopenmp-simd")  # `#pragma omp simd` without the OpenMP runtime
    return Toolchain(shlex.join(command), tuple(flags), language, _version(command))


def toolchain(cc: str, cflags: Sequence[str], language: str = "c") -> Toolchain:
    """A toolchain with known flags, unchecked: one ``cc --version`` call where ``probe``
    builds test libraries. For a plugin whose library is usually in the cache already (it
    starts faster); a compiler that does not work shows up as ``build``'s error."""
    return Toolchain(cc, tuple(cflags), language, _version(shlex.split(cc)))


def _version(command: list[str]) -> str:
    try:
        done = subprocess.run([*command, "--version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return ""
    return (done.stdout.splitlines() or [""])[0]


def _builds(
    command: list[str], flags: tuple[str, ...], language: str, openmp: bool = False
) -> bool:
    code = 'extern "C" int byoc_probe(int x);\n' if language == "c++" else ""
    code += "int byoc_probe(int x) { return x + 1; }\n"
    if openmp:
        code = (
            "#include <omp.h>\nint byoc_probe(int x) {\n  int s = 0;\n"
            "  #pragma omp parallel for reduction(+:s)\n  for (int i = 0; i < x; ++i) s += i;\n"
            "  return s + omp_get_max_threads();\n}\n"
        )
    with tempfile.TemporaryDirectory(prefix="byoc-cc-probe-") as tmp:
        src = Path(tmp) / f"probe{_SUFFIX[language]}"
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
    c = host.cpu()
    parts = [
        sys.platform,
        c.machine,
        EXT_SUFFIX,
        sys.implementation.cache_tag,
        cffi.__version__,
        c.model,
        " ".join(c.flags),
    ]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:16]


def cache_dir(kind: str, override: str = "") -> Path:
    """``override``, else ``platformdirs.user_cache_dir("byoc")/<kind>``; created if missing."""
    path = Path(override) if override else host.cache_root() / kind
    path.mkdir(parents=True, exist_ok=True)
    return path


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def module_name(kind: str, key: Sequence[str]) -> str:
    """The cache key spelled as a Python extension name: ``_byoc_<kind>_<24 hex digits>``."""
    digest = hashlib.sha256("\0".join([*key, host_tag()]).encode()).hexdigest()[:24]
    return f"_byoc_{re.sub('[^a-z0-9]', '', kind.lower())}_{digest}"


def build(
    source: str,
    toolchain: Toolchain,
    cdef: str,
    kind: str,
    *,
    include_dirs: Sequence[str] = (),
    library_dirs: Sequence[str] = (),
    libraries: Sequence[str] = (),
    link_args: Sequence[str] = (),
    depends: Sequence[str] = (),
    cache: str = "",
) -> Library:
    """Compile ``source`` into an extension exposing ``cdef``, unless the cache has it.

    ``kind`` names the cache subdirectory and the module prefix (your backend's name);
    ``depends`` adds to the cache key what else the library depends on (a linked library's
    version, say); ``cache`` overrides the directory. The first build of a key to land wins;
    the file never changes afterwards. Raises ``RuntimeError`` with the compiler's message on
    failure.
    """
    key = [
        source,
        cdef,
        toolchain.language,
        toolchain.cc,
        toolchain.version,
        *toolchain.cflags,
        *include_dirs,
        *library_dirs,
        *libraries,
        *link_args,
        *depends,
    ]
    name = module_name(kind, key)
    root = cache_dir(kind, cache)
    target = root / f"{name}{EXT_SUFFIX}"
    if not target.is_file():
        ffi = cffi.FFI()
        ffi.cdef(cdef)
        openmp = [f for f in toolchain.cflags if f.startswith(_OPENMP_FLAGS)]
        ffi.set_source(
            name,
            source,
            source_extension=_SUFFIX[toolchain.language],
            extra_compile_args=list(toolchain.cflags),
            extra_link_args=[*openmp, *link_args],
            include_dirs=list(include_dirs),
            library_dirs=list(library_dirs),
            libraries=["m", *libraries],
        )
        _compile(ffi, name, toolchain, root, target)
    data = target.read_bytes()
    return Library(
        name,
        data,
        sha256(data),
        host_tag(),
        {"cc": toolchain.cc, "cflags": list(toolchain.cflags), "language": toolchain.language},
    )


def _errors_first(text: str, limit: int = 1500) -> str:
    """At most ``limit`` characters of a compiler's output: its lines that say "error" first
    (the warnings one error sets off, such as functions it left unused, come after it and would
    push it out of the output's tail), then the tail."""
    errors = "\n".join(line for line in text.splitlines() if "error" in line.lower())
    if not errors:
        return text[-limit:]
    errors = errors[: limit // 2]
    return f"{errors}\n...\n{text[-(limit - len(errors)) :]}"


def _compile(ffi: Any, name: str, toolchain: Toolchain, root: Path, target: Path) -> None:
    tmp = tempfile.mkdtemp(prefix=f"{name}-", dir=root)
    try:
        out = Path(tmp) / "compiler-output.txt"
        with (
            _compiler_env(toolchain.cc),
            _stdio_to(out),
        ):
            try:
                built = ffi.compile(tmpdir=tmp, verbose=False)
            except Exception as exc:
                text = out.read_text(errors="replace").strip() if out.is_file() else ""
                raise RuntimeError(f"{exc}\n{_errors_first(text)}".strip()) from None
        _publish(Path(built), target)
        keep = Path(tmp) / f"{name}{_SUFFIX[toolchain.language]}"
        if keep.is_file():  # the extension's full source, for people reading the cache
            _publish(keep, root / keep.name)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


@contextlib.contextmanager
def _stdio_to(path: Path) -> Iterator[None]:
    """Send the compiler's output (file descriptors 1 and 2) to ``path`` for error messages."""
    sys.stdout.flush()
    sys.stderr.flush()
    with open(path, "wb") as fh:
        saved = [os.dup(1), os.dup(2)]
        try:
            os.dup2(fh.fileno(), 1)
            os.dup2(fh.fileno(), 2)
            with open(os.devnull, "w") as null, contextlib.redirect_stdout(null):
                yield
        finally:
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            for fd in saved:
                os.close(fd)


def _publish(src: Path, target: Path) -> None:
    """Move a finished file into the cache unless one is there already (atomic, no overwrite)."""
    try:
        os.link(src, target)
    except FileExistsError:
        pass
    except OSError:  # no hard links on this file system: an atomic rename, last one wins
        os.replace(src, target)


@contextlib.contextmanager
def _compiler_env(cc: str) -> Iterator[None]:
    """Point distutils (inside ffi.compile) at our compiler for the duration of one build."""
    ldshared = shlex.split(sysconfig.get_config_var("LDSHARED") or "cc -shared")
    with _env_lock:
        saved = {k: os.environ.get(k) for k in ("CC", "CXX", "LDSHARED")}
        os.environ["CC"] = os.environ["CXX"] = cc
        os.environ["LDSHARED"] = shlex.join([*shlex.split(cc), *ldshared[1:]])
        try:
            yield
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v


# Idle OpenMP threads spin this many times (about 0.4 ms on x86: the gaps between
# back-to-back kernels) before sleeping, leaving the core to what runs next. 3000 spins (40 us)
# let a worker fall asleep between a run's kernels; on a VM whose idle vCPU wakes slowly, a
# model called in bursts after a pause of 20 ms or more then stayed slow run after run (P1 on
# dnnl: 0.6 ms -> 6.5 ms per run, every run of each burst): with 30000 only the first run of a
# burst pays the wake-up (dnnl zoo, static: P1 0.50 -> 0.46, bert-enc-int8 0.77 -> 0.62,
# crnn-lstm 1.28 -> 1.21; 100000 measured the same).
OPENMP_SPIN_BRIEFLY = 30000


def load(library: Library, kind: str, cache: str = "", *, openmp_spin: int = 0) -> tuple[Any, Any]:
    """Import a library (``(ffi, lib)``), only if its bytes have the sha256 it records.

    The bytes go into the cache under a name derived from their hash first, so a library
    carried in an artifact loads on a machine that never built it.

    ``openmp_spin``: how long idle OpenMP threads spin before they sleep, in libgomp's spin
    iterations, set before the first library loads unless the user set ``OMP_WAIT_POLICY`` or
    ``GOMP_SPINCOUNT`` (libgomp reads them once). 0 (``OMP_WAIT_POLICY=PASSIVE``): threads sleep
    at once, right for short kernels between onnxruntime's. A library that runs many small
    parallel regions back to back wants them to spin across the gaps, but not for libgomp's
    default (300000 spins, milliseconds): dnnl passes ``OPENMP_SPIN_BRIEFLY`` (P1: 1.26x
    onnxruntime with sleeping threads, 0.6x spinning; crnn-lstm: 1.4x with libgomp's default,
    its LSTM in onnxruntime running beside a spinning thread).
    """
    if not _MODULE.fullmatch(library.module):
        raise RuntimeError(f"{library.module!r} is not a module name byoc.native writes")
    with _load_lock:
        if library.sha256 in _loaded:
            return _loaded[library.sha256]
        actual = sha256(library.data)
        if actual != library.sha256:
            raise RuntimeError(
                f"{library.module}: the library has sha256 {actual[:16]}..., it records "
                f"{library.sha256[:16]}...; not loading it"
            )
        path = _install(library, cache_dir(kind, cache))
        if not {"OMP_WAIT_POLICY", "GOMP_SPINCOUNT"} & os.environ.keys():  # the user's win
            if openmp_spin <= 0:
                host.set_own_env("OMP_WAIT_POLICY", "PASSIVE")
            else:
                host.set_own_env("GOMP_SPINCOUNT", str(openmp_spin))
        spec = importlib.util.spec_from_file_location(library.module, path)
        if spec is None or spec.loader is None:
            raise RuntimeError(f"cannot load {path} as a Python extension")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        _loaded[library.sha256] = (module.ffi, module.lib)
        return _loaded[library.sha256]


def _install(library: Library, root: Path) -> Path:
    """The library's bytes in the cache: the file ``build`` wrote if it holds them, else a
    copy under a name derived from their sha256 (a library carried in an artifact)."""
    built = root / f"{library.module}{EXT_SUFFIX}"
    if built.is_file() and sha256(built.read_bytes()) == library.sha256:
        return built
    target = root / f"{library.module}-{library.sha256[:16]}{EXT_SUFFIX}"
    if not (target.is_file() and sha256(target.read_bytes()) == library.sha256):
        fd, tmp = tempfile.mkstemp(prefix=f"{library.module}-", dir=root)
        with os.fdopen(fd, "wb") as fh:
            fh.write(library.data)
        os.replace(tmp, target)
    return target


# -- carrying source and library in an artifact ------------------------------------------------


def pack(magic: bytes, header: dict[str, Any], source: str, library: Library | None) -> bytes:
    """``magic``, an 8-byte little-endian header length, a JSON header (yours plus the sizes
    and sha256 of source and library, the module name, host and toolchain), the source (UTF-8),
    then the library's bytes (absent when ``library`` is None): ``byoc.artifact.write_header``'s
    layout."""
    text = source.encode("utf-8")
    data = library.data if library else b""
    full = {
        **header,
        "source_size": len(text),
        "source_sha256": sha256(text),
        "module": library.module if library else "",
        "library_size": len(data),
        "library_sha256": library.sha256 if library else "",
        "host": library.host if library else "",
        "toolchain": library.toolchain if library else {},
    }
    return artifact.write_header(magic, full, text + data)


def unpack(data: bytes, magic: bytes, where: str) -> tuple[dict[str, Any], str, Library | None]:
    """Check and split what ``pack`` wrote; ``ArtifactError`` (prefixed ``where``) names the
    first problem: magic, sizes, hashes, encoding, module name (``byoc.artifact.read_header``
    checks the magic and the header)."""
    header, body = artifact.read_header(data, magic, where)
    source_size = field_of(header, "source_size", int, where)
    library_size = field_of(header, "library_size", int, where)
    if source_size < 0 or library_size < 0 or source_size + library_size != len(body):
        raise ArtifactError(
            f"{where}: the header announces {source_size} + {library_size} bytes of source and "
            f"library, the file has {len(body)}: it is truncated or damaged"
        )
    source_bytes, library_bytes = body[:source_size], body[source_size:]
    if sha256(source_bytes) != field_of(header, "source_sha256", str, where):
        raise ArtifactError(f"{where}: the source does not match its sha256: it is damaged")
    try:
        source = source_bytes.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ArtifactError(f"{where}: the source is not UTF-8: {exc}") from None
    module = field_of(header, "module", str, where)
    library_sha = field_of(header, "library_sha256", str, where)
    host = field_of(header, "host", str, where)
    toolchain = header.get("toolchain", {})
    if not isinstance(toolchain, dict):
        raise ArtifactError(f"{where}: 'toolchain' must be an object")
    if not library_bytes:
        return header, source, None
    if not _MODULE.fullmatch(module):
        raise ArtifactError(f"{where}: module name {module!r} is not one byoc.native writes")
    if sha256(library_bytes) != library_sha:
        raise ArtifactError(f"{where}: the compiled library does not match its sha256")
    return header, source, Library(module, library_bytes, library_sha, host, toolchain)


def field_of(header: dict[str, Any], key: str, kind: type, where: str) -> Any:
    """``header[key]``, checked to be a ``kind`` (never a bool), else an ``ArtifactError``."""
    value = header.get(key)
    if not isinstance(value, kind) or isinstance(value, bool):
        raise ArtifactError(f"{where}: header field '{key}' must be {kind.__name__}, got {value!r}")
    return value
