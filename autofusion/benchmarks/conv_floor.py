"""`python -m autofusion.benchmarks.conv_floor`: bare oneDNN programs, no framework, for the floors and
costs the runtime and the rules are measured against.

Compiles one of autofusion/benchmarks/native/*.cpp with the native backend's toolchain (the same compiler,
flags and oneDNN) and runs it with the given threads:

    conv_chain_floor  64 1x1 convolutions as bare oneDNN primitives: compare its "per chain"
                      time with `python -m autofusion.benchmarks.micro --models conv-chain`; no runtime that
                      calls oneDNN once per convolution can beat it (the default)
    gate_cost         a squeeze-excitation gate over the activation against over the weight and
                      its reorder: the cost ratio behind ConvGateFusionOp's GATED_WEIGHT_COST
    depthwise_cost    oneDNN's bf16 depthwise convolutions (MobileNetV3-L's and EfficientNet-B4's)
                      against the runtime's own loop (runtime/depthwise.h), with the difference
                      between their results
    activation_cost   oneDNN's depthwise and 1x1 convolutions with swish as a post-op, and
                      matrix products with GELU, against without it and without it followed by
                      the runtime's own (runtime/gated.h): what oneDNN's SiLU and GELU cost
    attention_cost    an attention's products: q·kᵀ with the mask as a post-op against without,
                      and q·kᵀ + p·v over a tail of keys against the keys padded to a multiple
                      of 32, in bf16 (AMX) and f32 (the runtime pads on AMX only)
    softmax_cost      oneDNN's softmax over attention scores (ViT-B, BERT-Base) against the
                      runtime's own row loop (runtime/softmax.h)
    layernorm_cost    oneDNN's layer normalization (with the residual add before it, for BERT)
                      against the runtime's own row loop (runtime/layernorm.h)
    dw_fusion_cost    MobileNetV3-L's 1x1 -> 3x3 depthwise pairs as two oneDNN primitives against
                      one (the depthwise as the 1x1's append_dw post-op): oneDNN 3.2 runs the
                      fused form as ref_fused_convolution, the same two kernels in turn, and
                      refuses it at stride 2
    gate_tiling_cost  a 1x1 convolution and the SiLU after it over the whole result against in
                      tiles of pixels, each convolved and gated by one thread while in its cache
                      (the runtime's gate_in_tiles for results of 16 MB and more)
    gemv_cost         oneDNN's matmul for the zoo's classifier heads at batch 1, f32 and bf16,
                      weights warm and cold, against the runtime's own (runtime/gemv.h)
    channel_scale_cost  a squeeze-excitation's scale on a channels-last activation (MobileNetV3-L's
                      eight): oneDNN's binary multiply against the runtime's own loop
                      (runtime/channel_scale.h)
    unroll_cost       elementwise-8's generated kernel one vector a step against 2, 4 and 8
                      (kernels.py's unrolled loop): no oneDNN, only the runtime's lanes.h
    layout_cost       ResNet-50's 52 convolutions (the stem left out), bf16 and f32, with the
                      activations channels-last (nhwc, as the runtime's convolutions run) against
                      blocked by 16 channels (nChw16c): the same speed either way (2026-12-04-per-layer-openvino)
    residual_cost     ResNet-50's bottleneck ends (1x1 + residual + ReLU) with the residual as a
                      binary add post-op into a new buffer against a sum post-op over the
                      residual's own: equal in cache (both warm here); in a network the sum
                      touches one buffer fewer (the runtime's conv step, steps.cpp, over_residual)

    python -m autofusion.benchmarks.conv_floor --threads 2
    python -m autofusion.benchmarks.conv_floor --program gate_cost
"""
from __future__ import annotations

import argparse
import os
import subprocess
import tempfile
from pathlib import Path

from autofusion.backend.native.build import FLAGS, RUNTIME_DIR, Toolchain, link_name, toolchain

PROGRAMS = {p.stem: p for p in (Path(__file__).parent / "native").glob("*.cpp")}


def main(argv=None) -> None:
    p = argparse.ArgumentParser(prog="python -m autofusion.benchmarks.conv_floor", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    p.add_argument("--program", choices=sorted(PROGRAMS), default="conv_chain_floor")
    args = p.parse_args(argv)
    tc = toolchain()
    if not isinstance(tc, Toolchain):
        raise SystemExit(f"cannot build native code here: {tc}")
    with tempfile.TemporaryDirectory() as tmp:
        exe = Path(tmp) / args.program
        # the runtime's flags, and its scalar.h with the generated kernels' math flag
        flags = [f for f in FLAGS if f not in ("-shared", "-fPIC")] + ["-fno-math-errno", f"-I{RUNTIME_DIR}"]
        subprocess.run([tc.compiler, *flags, str(PROGRAMS[args.program]), "-o", str(exe), f"-I{tc.include}",
                        f"-L{tc.lib}", link_name(tc.lib), f"-Wl,-rpath,{tc.lib}"], check=True)
        print(f"oneDNN {tc.onednn}, {args.threads} thread(s)")
        subprocess.run([str(exe)], check=True, env={**os.environ, "OMP_NUM_THREADS": str(args.threads)})


if __name__ == "__main__":
    main()
