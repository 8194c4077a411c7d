"""`python -m benchmarks.conv_floor`: the oneDNN floor of the conv-chain micro benchmark.

Compiles benchmarks/native/conv_chain_floor.cpp with the native backend's toolchain (the same
compiler, flags and oneDNN) and runs it with the given threads: 64 1x1 convolutions as bare
oneDNN primitives, no framework. Compare its "per chain" time with `python -m benchmarks.micro
--models conv-chain`: no runtime that calls oneDNN once per convolution can beat it.

    python -m benchmarks.conv_floor --threads 2
"""
from __future__ import annotations

import argparse
import os
import subprocess
import tempfile
from pathlib import Path

from autofusion.backend.native.build import FLAGS, Toolchain, link_name, toolchain

SOURCE = Path(__file__).parent / "native" / "conv_chain_floor.cpp"


def main(argv=None) -> None:
    p = argparse.ArgumentParser(prog="python -m benchmarks.conv_floor", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    args = p.parse_args(argv)
    tc = toolchain()
    if not isinstance(tc, Toolchain):
        raise SystemExit(f"cannot build native code here: {tc}")
    with tempfile.TemporaryDirectory() as tmp:
        exe = Path(tmp) / "conv_chain_floor"
        flags = [f for f in FLAGS if f not in ("-shared", "-fPIC")]
        subprocess.run([tc.compiler, *flags, str(SOURCE), "-o", str(exe), f"-I{tc.include}",
                        f"-L{tc.lib}", link_name(tc.lib), f"-Wl,-rpath,{tc.lib}"], check=True)
        print(f"oneDNN {tc.onednn}, {args.threads} thread(s)")
        subprocess.run([str(exe)], check=True, env={**os.environ, "OMP_NUM_THREADS": str(args.threads)})


if __name__ == "__main__":
    main()
