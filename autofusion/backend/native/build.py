"""Building native code: the toolchain, the flags, and the on-disk cache of shared libraries.

Libraries: the runtime (runtime/*.cpp over oneDNN, built once per machine, which reads the
partitions' programs: program.py), and one of generated kernels per model that has any (its
regions' loop nests: kernels.py, rows.py; a fraction of a second to build, nothing to build for
a model without). Each is cached under AUTOFUSION_CACHE_DIR (default: the user's cache
directory) by a hash of its source, the compiler and its version, the flags, the CPU and the
oneDNN version, so a second compile of the same model builds nothing. Builds write to a private
file and rename it into place, under a file lock, so two processes compiling the same model at
once are safe.
"""
from __future__ import annotations

import fcntl
import functools
import hashlib
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from ...errors import AutofusionError

RUNTIME_DIR = Path(__file__).parent / "runtime"
FLAGS = ("-O3", "-march=native", "-std=c++17", "-fopenmp", "-fPIC", "-shared")
# the generated kernels' loops (vectorised for this CPU, OpenMP)
KERNEL_FLAGS = ("-O2", "-march=native", "-fno-math-errno", "-std=c++17", "-fopenmp", "-fPIC", "-shared")


class NativeBuildError(AutofusionError):
    """The C++ compiler failed on a source file (the message names it)."""


@dataclass(frozen=True)
class Toolchain:
    compiler: str
    version: str            # the compiler's first --version line
    include: Path           # holds oneapi/dnnl/dnnl.hpp
    lib: Path               # holds libdnnl.so
    onednn: str             # "3.2.0"

    def key(self, *sources: str) -> str:
        h = hashlib.sha256()
        for part in (self.compiler, self.version, " ".join(FLAGS + KERNEL_FLAGS), self.onednn, _cpu(),
                     *sources):
            h.update(part.encode())
            h.update(b"\0")
        return h.hexdigest()[:20]


def cache_dir() -> Path:
    root = os.environ.get("AUTOFUSION_CACHE_DIR")
    if root:
        return Path(root)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "autofusion"


@functools.lru_cache(maxsize=None)
def toolchain() -> Toolchain | str:
    """The toolchain, or why there is none (one line, for the report)."""
    compiler = os.environ.get("CXX") or shutil.which("g++") or shutil.which("clang++")
    if not compiler or not shutil.which(compiler):
        return "no C++ compiler (set CXX, or install g++ or clang++)"
    try:
        version = subprocess.run([compiler, "--version"], capture_output=True, text=True,
                                 timeout=30).stdout.splitlines()[0]
    except (OSError, IndexError, subprocess.SubprocessError) as e:
        return f"the C++ compiler {compiler!r} does not run: {e}"
    found = _find_onednn()
    if found is None:
        return "no oneDNN (pip install onednn-cpu-gomp onednn-devel-cpu-gomp)"
    include, lib, onednn = found
    return Toolchain(compiler, version, include, lib, onednn)


def unavailable() -> str | None:
    """Why native code cannot run on this machine (one line), or None."""
    tc = toolchain()
    return tc if isinstance(tc, str) else None


def _find_onednn() -> tuple[Path, Path, str] | None:
    roots = dict.fromkeys(Path(p) for p in (os.environ.get("AUTOFUSION_ONEDNN_ROOT"), sys.prefix,
                                            sys.base_prefix, "/usr/local", "/usr") if p)
    for root in roots:
        header = root / "include" / "oneapi" / "dnnl" / "dnnl_version.h"
        lib = next((d for d in (root / "lib", root / "lib64", root / "lib" / "x86_64-linux-gnu")
                    if (d / "libdnnl.so").exists() or (d / "libdnnl.so.3").exists()), None)
        if header.exists() and lib is not None:
            text = header.read_text()
            parts = [re.search(rf"#define DNNL_VERSION_{k} (\d+)", text) for k in ("MAJOR", "MINOR", "PATCH")]
            if all(parts):
                return root / "include", lib, ".".join(m.group(1) for m in parts)
    return None


@functools.lru_cache(maxsize=None)
def vector_lanes() -> int:
    """How many floats a generated elementwise loop computes at a time (runtime/lanes.h): 16
    where the CPU has AVX-512 and the compiler is GCC (whose vector extensions lanes.h is
    written in), else 1 (a scalar loop the compiler vectorises as it can)."""
    tc = toolchain()
    gcc = isinstance(tc, Toolchain) and "clang" not in tc.version.lower()
    return 16 if gcc and " avx512f " in f" {_cpu().split('|')[-1]} " else 1


def has_vnni() -> bool:
    """u8·s8 dot products summed exactly in s32 (AVX-512 VNNI, AVX-VNNI, AMX-int8); without them
    oneDNN's int8 kernels add products in pairs into saturating 16-bit lanes."""
    flags = set(_cpu().split("|")[-1].split())
    return bool({"avx512_vnni", "avx_vnni", "amx_int8"} & flags)


def _cpu() -> str:
    """The CPU's model and flags: -march=native code is only valid on the CPU it was built for."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return os.uname().machine
    fields = dict(re.findall(r"^(model name|flags)\s*:\s*(.*)$", text, re.M))
    return f"{fields.get('model name', '')}|{fields.get('flags', '')}"


def link_name(lib: Path) -> str:
    return "-l:" + next(n for n in ("libdnnl.so.3", "libdnnl.so") if (lib / n).exists())


def _headers() -> list[str]:
    """Every header in runtime/, for the cache keys: one list to keep is one too many."""
    return [p.read_text() for p in sorted(RUNTIME_DIR.glob("*.h"))]


def runtime_library(tc: Toolchain) -> Path:
    """The runtime library, built on first use."""
    sources = sorted(RUNTIME_DIR.glob("*.cpp"))   # its rooms (partition.h) and program.cpp
    out = cache_dir() / f"libafrt-{tc.key(*_headers(), *(s.read_text() for s in sources))}.so"
    return _build(tc, out, sources, FLAGS,
                  [f"-I{RUNTIME_DIR}", f"-I{tc.include}", f"-L{tc.lib}", link_name(tc.lib),
                   f"-Wl,-rpath,{tc.lib}"])


def kernel_library(tc: Toolchain, source: str) -> Path:
    """A shared library of generated kernels (their table `af_kernels`, runtime/kernel.h; no
    runtime, no oneDNN), built unless cached: a model's, or a region's called from a torch
    partition."""
    key = tc.key(source, *_headers())
    src = cache_dir() / f"kernel-{key}.cpp"
    out = src.with_suffix(".so")
    if not out.exists():
        _write_atomic(src, source)
    return _build(tc, out, [src], KERNEL_FLAGS, [f"-I{RUNTIME_DIR}"])


def _build(tc: Toolchain, out: Path, sources: list[Path], flags: tuple[str, ...], extra: list[str]) -> Path:
    if out.exists():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)   # another process may be building the same library
        if out.exists():
            return out
        tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
        objects = [tmp.with_name(f"{tmp.name}.{i}.o") for i in range(len(sources))]
        try:
            # each source to an object file at once (the runtime's rooms build side by side), then linked
            compiles = [(src, subprocess.Popen([tc.compiler, *flags, "-c", str(src), "-o", str(obj), *extra],
                                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True))
                        for src, obj in zip(sources, objects)]
            failed = [(src, job.communicate()[1], job.returncode) for src, job in compiles]
            for src, stderr, returncode in failed:
                _check(stderr, returncode, [src])
            done = subprocess.run([tc.compiler, *flags, *map(str, objects), "-o", str(tmp), *extra],
                                  capture_output=True, text=True)
            _check(done.stderr, done.returncode, sources)
            os.replace(tmp, out)
        finally:
            tmp.unlink(missing_ok=True)
            for obj in objects:
                obj.unlink(missing_ok=True)
    return out


def _check(stderr: str, returncode: int, sources: list[Path]) -> None:
    if returncode != 0:
        tail = "\n".join(stderr.strip().splitlines()[-20:])
        raise NativeBuildError(f"the C++ compiler failed on {', '.join(map(str, sources))}:\n{tail}")


def _write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
