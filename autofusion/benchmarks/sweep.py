"""`python -m autofusion.benchmarks.sweep`: every architecture of a list, in many export variants, at every
fusion level, against ONNX Runtime.

    python -m autofusion.benchmarks.sweep                                    # everything, into sweep-out/
    python -m autofusion.benchmarks.sweep --models 'resnet|bert' --variants ts17,ts17-dyn --levels 0,2
    python -m autofusion.benchmarks.sweep --backends native,torch --out sweep-out --timeout 600
    python -m autofusion.benchmarks.sweep --variants ts17 --levels 2 --precision bf16 --out sweep-bf16

The architectures (ARCHITECTURES, below) are torchvision's classification, segmentation,
detection and video models and transformers models built from configs, all with random seeded
weights (autofusion/benchmarks/models.py builds them; nothing is downloaded). transformers models use small
configs (two layers, hidden size 64 or so: the graph has every op of the full model, a fraction
of its size) except bert-base and gpt2, the benchmark zoo's full-size models; the summary says
which is which.

A variant is an export: `ts<opset>` the TorchScript exporter, `dynamo<opset>` the torch.export
based one, `-dyn` with dynamic axes (batch, and height/width for images, sequence for text; a
dynamic export is made at batch 2, since torch.export specialises a size of 1, and run at two
sizes). An export that fails is the exporter's failure: it is recorded and skipped, as is one
ONNX Runtime cannot run. Each exported variant is compiled at each level on each backend, run on
fixed random inputs and every output compared with ONNX Runtime's: a float output passes when
max|ours - ORT| <= TOLERANCE[precision] * max|ORT|, any other output when it is equal. With
--precision bf16 or fp16 autofusion compiles at that precision (ONNX Runtime stays fp32), and the
tolerance is a reduced precision's: it catches a wrong result, not rounding.

Each variant runs in a subprocess of its own with a time limit (a crash or hang costs that
variant only; its unfinished runs are recorded as timeout or crash). Results go to
<out>/variants/<architecture>__<variant>.json as they come; a rerun into the same --out skips
the variants already finished (--fresh starts over). After each variant <out>/sweep.json (every
result) and <out>/sweep.md (the summary) are rewritten.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import nn

from . import models
from .machine import machine_info
from .systems import PRECISION_TOLERANCE, max_rel_diff
from ..measure import time_in_blocks
from .timing import summarize

# float outputs: max abs difference / the ORT output's max magnitude, per autofusion precision
# (a reduced one's is the zoo's: systems.py)
TOLERANCE = {"fp32": 1e-3, "bf16": PRECISION_TOLERANCE["bf16"], "fp16": PRECISION_TOLERANCE["bf16"]}
LEVELS = (0, 1, 2)
BACKENDS = ("native", "torch")
DEFAULT_VARIANTS = ("ts17", "ts17-dyn", "dynamo18", "dynamo18-dyn", "ts13", "ts20-dyn")
DYNAMIC_EXPORT_BATCH = 2    # torch.export specialises a dimension of size 1
SECOND_BATCH = 3            # a dynamic variant's second run


# ---- the architectures ----------------------------------------------------------------------

Inputs = Callable[[int, int], dict[str, torch.Tensor]]   # (batch, size) -> named inputs, in order


@dataclass(frozen=True)
class Architecture:
    name: str
    family: str                             # "torchvision/classification", "transformers/text", ...
    build: Callable[[], nn.Module]          # a module returning plain tensors
    inputs: Inputs
    size: int                               # image side, sequence length or samples at export
    size_step: int                          # a dynamic variant's second run: size + size_step
    dynamic: dict[str, dict[int, str]]      # the axes a -dyn variant makes symbolic, per input
    package: str
    config: str = "full"                    # "full", or the small config used
    outputs: tuple[str, ...] = ()           # the exported outputs' names (default: the exporter's)

    def spec(self) -> models.ModelSpec:
        return models.ModelSpec(self.name, self.build, lambda b: self.inputs(b, self.size), (),
                                self.package)


def _image_inputs(batch: int, size: int) -> dict[str, torch.Tensor]:
    return models._image(size)(batch)


def _video_inputs(batch: int, size: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(models.SEED)
    return {"video": torch.randn(batch, 3, 4, size, size, generator=g)}      # 4 frames


def _audio_inputs(batch: int, size: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(models.SEED)
    return {"input_values": torch.randn(batch, size, generator=g)}


def _text_inputs(names: tuple[str, ...], vocab: int) -> Inputs:
    return lambda batch, seq: models._tokens(names, vocab, seq)(batch)


IMAGE_AXES = {"pixel_values": {0: "batch", 2: "height", 3: "width"}}
BATCH_AXIS = {"pixel_values": {0: "batch"}}


class _OutputKey(nn.Module):
    """A torchvision segmentation model returning its "out" tensor instead of a dict."""

    def __init__(self, model: nn.Module, key: str):
        super().__init__()
        self.model, self.key = model, key

    def forward(self, x):
        return self.model(x)[self.key]


class _Detections(nn.Module):
    """A torchvision detector on one image: its boxes, scores and labels as plain tensors."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, x):
        found = self.model([x[0]])[0]
        return found["boxes"], found["scores"], found["labels"]


class _FirstOutput(nn.Module):
    """A transformers model called with named inputs, returning the first tensor of its output
    (the last hidden state) instead of a ModelOutput."""

    def __init__(self, model: nn.Module, names: tuple[str, ...]):
        super().__init__()
        self.model, self.names = model, names

    def forward(self, *args):
        return self.model(**dict(zip(self.names, args)), return_dict=True).to_tuple()[0]


def _wrapped(build: Callable[[], nn.Module], wrap) -> Callable[[], nn.Module]:
    return lambda: wrap(build())


def _tv(name: str, arch: str | None = None, size: int = 224, any_size: bool = True,
        **kwargs) -> Architecture:
    """A torchvision classifier. any_size=False: it takes only its own image size (ViT, Swin)."""
    return Architecture(name, "torchvision/classification",
                        models._torchvision(arch or name, name, **kwargs), _image_inputs, size, 32,
                        IMAGE_AXES if any_size else BATCH_AXIS, "torchvision")


def _tv_segmentation(name: str) -> Architecture:
    build = models._torchvision("segmentation." + name, name, weights_backbone=None)
    return Architecture(name, "torchvision/segmentation", _wrapped(build, lambda m: _OutputKey(m, "out")),
                        _image_inputs, 224, 32, IMAGE_AXES, "torchvision")


def _tv_detection(name: str, **kwargs) -> Architecture:
    # min_size/max_size: the detector resizes every image to 320 on its shorter side
    build = models._torchvision("detection." + name, name, weights_backbone=None, **kwargs)
    return Architecture(name, "torchvision/detection", _wrapped(build, _Detections), _image_inputs,
                        320, 64, {"pixel_values": {2: "height", 3: "width"}}, "torchvision",
                        outputs=("boxes", "scores", "labels"))


def _tv_video(name: str) -> Architecture:
    build = models._torchvision("video." + name, name)
    return Architecture(name, "torchvision/video", build, _video_inputs, 64, 32,
                        {"video": {0: "batch", 3: "height", 4: "width"}}, "torchvision")


def _hf(model_type: str, **config) -> Callable[[], nn.Module]:
    """A transformers base model (AutoModel) built from its config, random weights."""
    def build() -> nn.Module:
        tf = models._require("transformers", model_type)
        return tf.AutoModel.from_config(tf.AutoConfig.for_model(model_type, **config))
    return build


def _config_text(config: dict) -> str:
    return "small: " + ", ".join(f"{k}={v}" for k, v in config.items() if k != "use_cache")


TEXT_VOCAB = 1000
# the small config of a BERT-like model; each entry below adds or overrides what it names
SMALL_TEXT = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
                  vocab_size=TEXT_VOCAB)
SMALL_DECODER = dict(SMALL_TEXT, use_cache=False)
TEXT = ("input_ids", "attention_mask")
SEQ2SEQ = ("input_ids", "attention_mask", "decoder_input_ids")


def _hf_text(name: str, model_type: str, config: dict, names: tuple[str, ...] = TEXT) -> Architecture:
    return Architecture(name, "transformers/text",
                        _wrapped(_hf(model_type, **config), lambda m: _FirstOutput(m, names)),
                        _text_inputs(names, TEXT_VOCAB), 16, 8,
                        {n: {0: "batch", 1: "sequence"} for n in names}, "transformers",
                        _config_text(config))


def _hf_image(name: str, model_type: str, config: dict, any_size: bool = False) -> Architecture:
    config = dict(config, image_size=64) if "image_size" not in config and not any_size else config
    return Architecture(name, "transformers/vision",
                        _wrapped(_hf(model_type, **config), lambda m: _FirstOutput(m, ("pixel_values",))),
                        _image_inputs, 64, 32, IMAGE_AXES if any_size else BATCH_AXIS,
                        "transformers", _config_text(config))


def _hf_audio(name: str, model_type: str, config: dict) -> Architecture:
    """0.1 s of 16 kHz audio (1,600 samples), 320 more in a dynamic variant's second run."""
    return Architecture(name, "transformers/audio",
                        _wrapped(_hf(model_type, **config), lambda m: _FirstOutput(m, ("input_values",))),
                        _audio_inputs, 1600, 320, {"input_values": {0: "batch", 1: "samples"}},
                        "transformers", _config_text(config))


def _zoo_text(name: str, names: tuple[str, ...], vocab: int) -> Architecture:
    """A transformer of the benchmark zoo (autofusion/benchmarks/models.py), full size, 32 tokens."""
    return Architecture(name, "transformers/text", models.spec(name).build, _text_inputs(names, vocab),
                        32, 16, {n: {0: "batch", 1: "sequence"} for n in names}, "transformers")


VIT = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
           patch_size=16)
LLAMA = dict(SMALL_DECODER, num_key_value_heads=2)

ARCHITECTURES: dict[str, Architecture] = {a.name: a for a in [
    # torchvision classification, random weights, the image size they were trained at
    _tv("alexnet"), _tv("vgg11"), _tv("vgg16_bn"),
    _tv("resnet18"), _tv("resnet34"), _tv("resnet50"), _tv("resnet101"), _tv("resnext50_32x4d"),
    _tv("wide_resnet50_2"), _tv("squeezenet1_0"), _tv("squeezenet1_1"), _tv("densenet121"),
    _tv("inception_v3", size=299, init_weights=True), _tv("googlenet", init_weights=True),
    _tv("shufflenet_v2_x1_0"), _tv("mobilenet_v2"), _tv("mobilenet_v3_small"),
    _tv("mobilenet_v3_large"), _tv("mnasnet1_0"), _tv("efficientnet_b0"),
    _tv("efficientnet_b4", size=380), _tv("efficientnet_v2_s"), _tv("regnet_x_400mf"),
    _tv("regnet_y_400mf"), _tv("convnext_tiny"), _tv("vit_b_16", any_size=False),
    _tv("vit_b_32", any_size=False), _tv("swin_t", any_size=False), _tv("swin_v2_t", any_size=False),
    _tv("maxvit_t", any_size=False),
    # torchvision segmentation, detection (images resized to 320) and video (4 frames of 64x64)
    _tv_segmentation("fcn_resnet50"), _tv_segmentation("deeplabv3_resnet50"),
    _tv_segmentation("deeplabv3_mobilenet_v3_large"), _tv_segmentation("lraspp_mobilenet_v3_large"),
    _tv_detection("fasterrcnn_resnet50_fpn", min_size=320, max_size=320),
    _tv_detection("fasterrcnn_mobilenet_v3_large_320_fpn"),
    _tv_detection("retinanet_resnet50_fpn", min_size=320, max_size=320),
    _tv_detection("fcos_resnet50_fpn", min_size=320, max_size=320),
    _tv_detection("maskrcnn_resnet50_fpn", min_size=320, max_size=320),
    _tv_detection("ssdlite320_mobilenet_v3_large"),
    _tv_video("r3d_18"), _tv_video("mc3_18"), _tv_video("r2plus1d_18"),
    # the benchmark zoo's full-size transformers
    _zoo_text("bert-base", ("input_ids", "attention_mask", "token_type_ids"), 30522),
    _zoo_text("gpt2", ("input_ids",), 50257),
    # transformers encoders, small configs
    _hf_text("bert", "bert", SMALL_TEXT),
    _hf_text("roberta", "roberta", SMALL_TEXT),
    _hf_text("xlm-roberta", "xlm-roberta", SMALL_TEXT),
    _hf_text("distilbert", "distilbert", dict(dim=64, n_layers=2, n_heads=4, hidden_dim=128,
                                              vocab_size=TEXT_VOCAB)),
    _hf_text("albert", "albert", dict(SMALL_TEXT, embedding_size=32)),
    _hf_text("electra", "electra", dict(SMALL_TEXT, embedding_size=32)),
    _hf_text("deberta-v2", "deberta-v2", SMALL_TEXT),
    _hf_text("mobilebert", "mobilebert", dict(SMALL_TEXT, embedding_size=32, intra_bottleneck_size=32,
                                              true_hidden_size=32, num_feedforward_networks=2)),
    _hf_text("squeezebert", "squeezebert", dict(SMALL_TEXT, embedding_size=64)),
    _hf_text("mpnet", "mpnet", SMALL_TEXT),
    _hf_text("roformer", "roformer", SMALL_TEXT),
    _hf_text("ernie", "ernie", SMALL_TEXT),
    # decoders
    _hf_text("gpt2-small-config", "gpt2", dict(n_embd=64, n_layer=2, n_head=4, vocab_size=TEXT_VOCAB,
                                               use_cache=False)),
    _hf_text("gpt-neo", "gpt_neo", dict(hidden_size=64, num_layers=2, num_heads=4, vocab_size=TEXT_VOCAB,
                                        attention_types=[[["global", "local"], 1]], window_size=8,
                                        use_cache=False)),
    _hf_text("gptj", "gptj", dict(n_embd=64, n_layer=2, n_head=4, rotary_dim=8, vocab_size=TEXT_VOCAB,
                                  use_cache=False)),
    _hf_text("codegen", "codegen", dict(n_embd=64, n_layer=2, n_head=4, rotary_dim=8,
                                        vocab_size=TEXT_VOCAB, use_cache=False)),
    _hf_text("gpt-bigcode", "gpt_bigcode", dict(n_embd=64, n_layer=2, n_head=4, vocab_size=TEXT_VOCAB,
                                                use_cache=False)),
    _hf_text("opt", "opt", dict(SMALL_DECODER, ffn_dim=128, word_embed_proj_dim=64)),
    _hf_text("bloom", "bloom", dict(hidden_size=64, n_layer=2, n_head=4, vocab_size=TEXT_VOCAB,
                                    use_cache=False)),
    _hf_text("falcon", "falcon", SMALL_DECODER),
    _hf_text("llama", "llama", LLAMA),
    _hf_text("mistral", "mistral", dict(LLAMA, sliding_window=8)),
    _hf_text("qwen2", "qwen2", LLAMA),
    _hf_text("gemma", "gemma", dict(LLAMA, head_dim=16)),
    _hf_text("phi", "phi", SMALL_DECODER),
    _hf_text("stablelm", "stablelm", dict(SMALL_DECODER, num_key_value_heads=4)),
    # encoder-decoders
    _hf_text("t5", "t5", dict(d_model=64, d_ff=128, d_kv=16, num_layers=2, num_heads=4,
                              vocab_size=TEXT_VOCAB, use_cache=False), SEQ2SEQ),
    _hf_text("bart", "bart", dict(d_model=64, encoder_layers=2, decoder_layers=2,
                                  encoder_attention_heads=4, decoder_attention_heads=4,
                                  encoder_ffn_dim=128, decoder_ffn_dim=128, vocab_size=TEXT_VOCAB,
                                  use_cache=False), SEQ2SEQ),
    # vision transformers and CNNs from transformers, small configs, 64x64 images
    _hf_image("hf-vit", "vit", VIT),
    _hf_image("deit", "deit", VIT),
    _hf_image("beit", "beit", VIT),
    _hf_image("dinov2", "dinov2", dict(VIT, patch_size=8)),
    _hf_image("hf-swin", "swin", dict(patch_size=4, embed_dim=32, depths=[1, 1], num_heads=[2, 4],
                                      window_size=4)),
    _hf_image("hf-convnext", "convnext", dict(num_stages=2, hidden_sizes=[16, 32], depths=[1, 1]),
              any_size=True),
    _hf_image("mobilevit", "mobilevit", dict(hidden_sizes=[32, 48, 64], neck_hidden_sizes=[8, 8, 16, 16, 24, 32, 64])),
    _hf_image("segformer", "segformer", dict(depths=[1, 1, 1, 1], hidden_sizes=[16, 32, 48, 64],
                                             num_attention_heads=[1, 2, 4, 8], decoder_hidden_size=64), any_size=True),
    _hf_image("poolformer", "poolformer", dict(depths=[1, 1, 1, 1], hidden_sizes=[16, 32, 48, 64]),
              any_size=True),
    # audio: wav2vec2's convolutional feature extractor and encoder on 0.1 s of 16 kHz
    _hf_audio("wav2vec2", "wav2vec2", dict(
        hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
        conv_dim=[32, 32], conv_stride=[5, 2], conv_kernel=[10, 3], num_conv_pos_embeddings=16,
        num_conv_pos_embedding_groups=4)),
    # built here from plain torch (runs without torchvision: the sweep's own test)
    Architecture("tiny_resnet", "builtin", models.spec("tiny_resnet").build, _image_inputs, 64, 32,
                 IMAGE_AXES, "torch"),
]}


# ---- variants -------------------------------------------------------------------------------

@dataclass(frozen=True)
class Variant:
    name: str
    exporter: str       # "torchscript" or "dynamo"
    opset: int
    dynamic: bool


VARIANT_FORM = re.compile(r"(ts|dynamo)(\d+)(-dyn)?")


def parse_variant(name: str) -> Variant:
    m = VARIANT_FORM.fullmatch(name)
    if not m:
        raise ValueError(f"variant {name!r} is not ts<opset>[-dyn] or dynamo<opset>[-dyn] "
                         f"(e.g. {', '.join(DEFAULT_VARIANTS)})")
    return Variant(name, "torchscript" if m[1] == "ts" else "dynamo", int(m[2]), bool(m[3]))


# ---- one variant (runs in the worker process) -----------------------------------------------

def compare_output(got: np.ndarray, want: np.ndarray, tolerance: float = TOLERANCE["fp32"]) -> dict:
    """Our output against ONNX Runtime's: max abs and rel (to max|want|) difference and whether
    it passes (floats within `tolerance`, anything else equal; shapes must agree)."""
    got, want = np.asarray(got), np.asarray(want)
    if got.shape != want.shape:
        return {"ok": False, "max_abs": None, "max_rel": None,
                "why": f"shape {list(got.shape)}, ONNX Runtime {list(want.shape)}"}
    if not want.size:
        return {"ok": True, "max_abs": 0.0, "max_rel": 0.0}
    g64, w64 = got.astype(np.float64), want.astype(np.float64)
    finite = np.isfinite(g64) & np.isfinite(w64)
    max_abs = float(np.abs(g64[finite] - w64[finite]).max()) if finite.any() else 0.0
    if np.issubdtype(want.dtype, np.floating):
        rel = max_rel_diff([g64], [w64])
        ok = rel <= tolerance
    else:
        rel = 0.0 if np.array_equal(got, want) else float("inf")
        ok = rel == 0.0
    return {"ok": bool(ok), "max_abs": max_abs, "max_rel": rel}


ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;]*m")


def first_line(e: BaseException) -> str:
    """The error's type and first line, and its root cause's (the exporters wrap theirs)."""
    def line(x: BaseException) -> str:
        text = ANSI_ESCAPE.sub("", str(x)).strip().splitlines()
        return f"{type(x).__name__}: {text[0] if text else ''}"[:300]
    root = e
    while root.__cause__ is not None:
        root = root.__cause__
    return line(e) + (f" (cause: {line(root)})" if root is not e else "")


def _symbolic_axes(path: str, wanted: dict[str, dict[int, str]]) -> dict[str, list[int]]:
    """The axes of `wanted` that the exported file really leaves symbolic, per input."""
    import onnx
    graph = onnx.load(path, load_external_data=False).graph
    dims = {i.name: i.type.tensor_type.shape.dim for i in graph.input}
    return {name: [a for a in axes if name in dims and a < len(dims[name])
                   and not dims[name][a].HasField("dim_value")]
            for name, axes in wanted.items()}


def run_sizes(arch: Architecture, variant: Variant, path: str) -> tuple[list[tuple[int, int]], str]:
    """(batch, size) to run at: the export's, and for a dynamic variant a second one changing
    each kind of axis the export left symbolic; and a note when the exporter fixed one."""
    first = (DYNAMIC_EXPORT_BATCH if variant.dynamic and _has_batch(arch) else 1, arch.size)
    if not variant.dynamic:
        return [first], ""
    symbolic = _symbolic_axes(path, arch.dynamic)
    kept = [f"{n}[{a}]" for n, axes in arch.dynamic.items() for a in axes if a not in symbolic[n]]
    def free(is_batch: bool) -> bool:      # axes of that kind exist, and all are symbolic
        axes = [(n, a) for n, ax in arch.dynamic.items() for a, d in ax.items() if (d == "batch") == is_batch]
        return bool(axes) and all(a in symbolic[n] for n, a in axes)
    batch_free, size_free = free(True), free(False)
    second = (SECOND_BATCH if batch_free else first[0],
              arch.size + arch.size_step if size_free else arch.size)
    note = f"the exporter kept {', '.join(kept)} static" if kept else ""
    return ([first, second] if second != first else [first]), note


def _has_batch(arch: Architecture) -> bool:
    return any(d == "batch" for axes in arch.dynamic.values() for d in axes.values())


def _ort_session(path: str, threads: int):
    import onnxruntime as ort
    options = ort.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = threads
    return ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])


def _eager_outputs(module: nn.Module, inputs: dict[str, torch.Tensor]) -> list[np.ndarray]:
    with torch.no_grad():
        out = module(*inputs.values())
    return [t.numpy() for t in (out if isinstance(out, tuple) else (out,))]


def worst_difference(got: list[dict], want: list[dict]) -> float | None:
    """The largest max rel difference over the outputs both have, at every size (None: no
    output to compare, or one whose shape differs)."""
    rels = [compare_output(g[n], w[n])["max_rel"] for g, w in zip(got, want) for n in w if n in g]
    return None if not rels or None in rels else max(rels)


def reference_kernels(model) -> dict[str, str]:
    """The nodes some step of which runs a oneDNN reference implementation ("ref:any", ...: what
    oneDNN picks where none of its fast kernels takes the problem, often hundreds of times slower),
    at every set of input sizes its native partitions were set up for: node name -> what runs it."""
    return {n.name: k for part in model.program.native.values() for built in part.builds()
            for n, k in zip(part.node_list, built.kernels)
            if any(step.removeprefix("reorder ").startswith("ref") for step in k.split(" + "))}


def time_against(ours: Callable[[], object], theirs: Callable[[], object], rounds: int) -> dict:
    """Median ms of ours and of ONNX Runtime's run of the same inputs, alternating in blocks of
    three runs (timing.py says why), and ORT's over ours (> 1: ours faster)."""
    t = time_in_blocks({"ours": ours, "ort": theirs}, rounds=rounds, block=3, warmup=3, pause_s=0.05)
    if t.errors:
        return {"timing_error": "; ".join(f"{k}: {v}" for k, v in t.errors.items())}
    ms, ort_ms = (summarize(t.samples[k]).median_ms for k in ("ours", "ort"))
    return {"ms": round(ms, 3), "ort_ms": round(ort_ms, 3), "vs_ort": round(ort_ms / ms, 3)}


def _run_level(path: str, level: int, backend: str, threads: int, precision: str,
               feeds: list[dict], refs: list[dict], eager: list[dict],
               ort_run: Callable[[], object] | None = None, rounds: int = 0) -> dict:
    """One (level, backend) run: compile, run at every size, compare every output with ONNX
    Runtime's (and with PyTorch eager's: when ONNX Runtime differs, which one is off); with
    `rounds`, time the first size against ONNX Runtime (`ort_run`)."""
    import autofusion
    t = time.monotonic()
    try:
        model = autofusion.compile(path, level=level, backend=backend, threads=threads,
                                   precision=precision)
    except Exception as e:  # noqa: BLE001 - any failure is a result to record, not a stop
        return {"status": "compile error", "error": first_line(e)}
    result = {"compile_s": round(time.monotonic() - t, 2), "outputs": []}
    ours = []
    for feed, ref in zip(feeds, refs):
        try:
            got = model.run(feed)
        except Exception as e:  # noqa: BLE001
            return {**result, "status": "run error", "error": first_line(e)}
        ours.append(got)
        result["outputs"].append({n: compare_output(got[n], want, TOLERANCE[precision]) if n in got else
                                  {"ok": False, "why": "output missing"} for n, want in ref.items()})
    bad = [f"{n}: {c.get('why') or 'max rel %.3g' % c['max_rel']}"
           for size in result["outputs"] for n, c in size.items() if not c["ok"]]
    rels = [c["max_rel"] for size in result["outputs"] for c in size.values()
            if c.get("max_rel") is not None]
    result["max_rel"] = max(rels) if rels else None
    result["eager_max_rel"] = worst_difference(ours, eager)
    result["status"] = "mismatch" if bad else "pass"
    result["error"] = "; ".join(bad[:3]) or None
    result["reference_kernels"] = reference_kernels(model)
    if rounds and ort_run is not None:
        result.update(time_against(lambda: model.run(feeds[0]), ort_run, rounds))
    return result


def run_variant(arch: Architecture, variant: Variant, levels: list[int], backends: list[str],
                workdir: Path, threads: int, save: Callable[[dict], None], precision: str = "fp32",
                rounds: int = 0) -> dict:
    """Export, run ONNX Runtime, then every (level, backend) (timed against ONNX Runtime in
    `rounds` rounds, where not 0); `save` gets the record after each step, so a timeout or crash
    leaves what was done."""
    record = {"architecture": arch.name, "family": arch.family, "config": arch.config,
              "variant": variant.name, "status": "running", "runs": [],
              "planned": [[lv, b] for lv in levels for b in backends]}
    save(record)
    path = str(workdir / f"{arch.name}.{variant.name}.onnx")
    batch = DYNAMIC_EXPORT_BATCH if variant.dynamic and _has_batch(arch) else 1
    t = time.monotonic()
    try:
        module = models.build_module(arch.spec())
        models.export_module(module, arch.inputs(batch, arch.size), path, variant.exporter,
                             variant.opset, arch.outputs, arch.dynamic if variant.dynamic else None)
    except Exception as e:  # noqa: BLE001 - the exporter's failure, recorded and skipped
        record.update(status="export error", error=first_line(e))
        save(record)
        return record
    record["export_s"] = round(time.monotonic() - t, 1)
    save(record)
    sizes, record["note"] = run_sizes(arch, variant, path)
    try:
        eager = [_eager_outputs(module, arch.inputs(b, s)) for b, s in sizes]
    except Exception as e:  # noqa: BLE001 - only a second opinion
        eager = [[] for _ in sizes]
        record["note"] = (record["note"] + "; " if record["note"] else "") + \
            f"PyTorch eager failed: {first_line(e)}"
    module = None
    try:
        session = _ort_session(path, threads)
        names = [i.name for i in session.get_inputs()]     # an exporter may drop unused inputs
        feeds = [{n: x.numpy() for n, x in arch.inputs(b, s).items() if n in names} for b, s in sizes]
        outputs = [o.name for o in session.get_outputs()]
        refs = [dict(zip(outputs, session.run(None, f))) for f in feeds]
    except Exception as e:  # noqa: BLE001 - ONNX Runtime cannot run what the exporter wrote
        record.update(status="reference error", error=first_line(e))
        save(record)
        return record
    record["inputs"] = [{n: list(a.shape) for n, a in f.items()} for f in feeds]
    eager = [dict(zip(outputs, e)) if len(e) == len(outputs) else {} for e in eager]
    record["ort_vs_eager"] = worst_difference(refs, eager)
    ort_run = lambda: session.run(None, feeds[0])
    for level in levels:
        for backend in backends:
            record["runs"].append({"level": level, "backend": backend, **_run_level(
                path, level, backend, threads, precision, feeds, refs, eager, ort_run, rounds)})
            save(record)
    record["status"] = "done"
    save(record)
    return record


# ---- the sweep (parent process) -------------------------------------------------------------

def _variant_file(out: Path, arch: str, variant: str) -> Path:
    return out / "variants" / f"{arch}__{variant}.json"


def _finished(path: Path) -> bool:
    try:
        return json.loads(path.read_text())["status"] != "running"
    except (OSError, ValueError, KeyError):
        return False


def _close_unfinished(path: Path, arch: Architecture, variant: Variant, why: str, error: str) -> None:
    """After a worker timed out or crashed: the runs it did not finish get `why`."""
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError):
        record = {"architecture": arch.name, "family": arch.family, "config": arch.config,
                  "variant": variant.name, "runs": [], "planned": []}
    if record.get("status") not in (None, "running"):
        return
    if not record.get("export_s"):          # it died exporting: the exporter's (or torch's) doing
        record.update(status=f"export {why}", error=error)
    else:
        done = {(r["level"], r["backend"]) for r in record["runs"]}
        record["runs"] += [{"level": lv, "backend": b, "status": why, "error": error}
                           for lv, b in record["planned"] if (lv, b) not in done]
        record["status"] = "done"
    path.write_text(json.dumps(record, indent=1))


def _worker_command(arch: str, variant: str, args) -> list[str]:
    return [sys.executable, "-m", "autofusion.benchmarks.sweep", "--worker", arch, variant,
            "--levels", ",".join(map(str, args.levels)), "--backends", ",".join(args.backends),
            "--threads", str(args.threads), "--precision", args.precision, "--out", str(args.out),
            "--time", str(args.time), *(["--keep-onnx"] if args.keep_onnx else [])]


def _run_worker(arch: Architecture, variant: Variant, args) -> None:
    """The variant in a subprocess of its own (own process group: a timeout kills its compiler
    children too)."""
    path = _variant_file(args.out, arch.name, variant.name)
    log = args.out / "logs" / f"{arch.name}__{variant.name}.log"
    with open(log, "w") as f:
        proc = subprocess.Popen(_worker_command(arch.name, variant.name, args), stdout=f,
                                stderr=subprocess.STDOUT, start_new_session=True)
        try:
            rc = proc.wait(timeout=args.timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            _close_unfinished(path, arch, variant, "timeout", f"no result within {args.timeout} s")
            return
    if rc != 0:
        lines = [ln for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
        _close_unfinished(path, arch, variant, "crash",
                          f"worker exited with {rc}: {lines[-1][:300] if lines else ''}")


def load_records(out: Path) -> list[dict]:
    records = []
    for p in sorted((out / "variants").glob("*.json")):
        try:
            records.append(json.loads(p.read_text()))
        except ValueError:
            continue
    order = {n: i for i, n in enumerate(ARCHITECTURES)}
    return sorted(records, key=lambda r: (order.get(r["architecture"], len(order)), r["variant"]))


def totals(records: list[dict]) -> dict:
    exported = [r for r in records if r.get("status") == "done"]
    runs = [run for r in exported for run in r["runs"]]
    return {"architectures": len({r["architecture"] for r in records}),
            "variants": len(exported), "variants_tried": len(records),
            "runs": len(runs), "passed": sum(run["status"] == "pass" for run in runs)}


def total_line(t: dict) -> str:
    return (f"{t['architectures']} architectures, {t['variants']} variants, {t['passed']} of "
            f"{t['runs']} level×variant runs equal to ONNX Runtime")


def _rel(x: float | None) -> str:
    return "-" if x is None else f"{x:.2g}"


def _cell(text) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def summary_markdown(records: list[dict], command: str, levels: list[int], backends: list[str],
                     precision: str = "fp32") -> str:
    t = totals(records)
    skipped = [r for r in records if r.get("status") != "done"]
    lines = ["# Architecture sweep", "",
             f"`{command}`, {datetime.date.today().isoformat()}. Random weights; each exported "
             f"variant compiled at each level and backend and compared with ONNX Runtime (float "
             f"outputs within {TOLERANCE[precision]:g} of the output's largest magnitude, others equal; "
             f"autofusion in {precision}).", "",
             f"**{total_line(t)}** ({t['variants_tried'] - t['variants']} of {t['variants_tried']} "
             f"variants not run: the exporter or ONNX Runtime failed, listed below).", "",
             "## Per variant", "", "| variant | architectures exported | runs equal to ONNX Runtime |",
             "| --- | ---: | ---: |"]
    for v in dict.fromkeys(r["variant"] for r in records):
        mine = [r for r in records if r["variant"] == v]
        runs = [run for r in mine if r.get("status") == "done" for run in r["runs"]]
        lines.append(f"| {v} | {sum(r.get('status') == 'done' for r in mine)} of {len(mine)} | "
                     f"{sum(run['status'] == 'pass' for run in runs)} of {len(runs)} |")
    lines += ["", "## Per architecture", ""]
    columns = [(lv, b) for lv in levels for b in backends]
    head = [f"L{lv}" + (f" {b}" if len(backends) > 1 else "") for lv, b in columns]
    lines += ["| architecture | family | config | variants run | " + " | ".join(head) + " |",
              "| --- | --- | --- | --- | " + " | ".join("---:" for _ in head) + " |"]
    by_arch: dict[str, list[dict]] = {}
    for r in records:
        by_arch.setdefault(r["architecture"], []).append(r)
    for name, rs in by_arch.items():
        done = [r for r in rs if r.get("status") == "done"]
        cells = []
        for lv, b in columns:
            mine = [run for r in done for run in r["runs"] if (run["level"], run["backend"]) == (lv, b)]
            cells.append(f"{sum(run['status'] == 'pass' for run in mine)}/{len(mine)}")
        variants = ", ".join(r["variant"] for r in done) or "none"
        lines.append(f"| {name} | {rs[0]['family']} | {_cell(rs[0]['config'])} | "
                     f"{len(done)}/{len(rs)}: {variants} | " + " | ".join(cells) + " |")
    failures = [(r, run) for r in records if r.get("status") == "done" for run in r["runs"]
                if run["status"] != "pass"]
    lines += ["", f"## Runs that differ from ONNX Runtime or fail ({len(failures)})", ""]
    if failures:
        lines += ["PyTorch eager is a second opinion: max rel difference of our outputs and of ONNX "
                  "Runtime's from the PyTorch module's ('-': not compared).", "",
                  "| architecture | variant | level | backend | result | error | ours vs PyTorch | "
                  "ORT vs PyTorch |", "| --- | --- | ---: | --- | --- | --- | ---: | ---: |"]
        lines += [f"| {r['architecture']} | {r['variant']} | {run['level']} | {run['backend']} | "
                  f"{run['status']} | {_cell(run.get('error') or '')} | {_rel(run.get('eager_max_rel'))} | "
                  f"{_rel(r.get('ort_vs_eager'))} |" for r, run in failures]
    else:
        lines.append("None.")
    lines += ["", f"## Variants not run: export or ONNX Runtime failed ({len(skipped)})", ""]
    if skipped:
        lines += ["| architecture | variant | what failed | error |", "| --- | --- | --- | --- |"]
        lines += [f"| {r['architecture']} | {r['variant']} | {r.get('status')} | "
                  f"{_cell(r.get('error') or '')} |" for r in skipped]
    else:
        lines.append("None.")
    lines += speed_markdown(records) + reference_markdown(records)
    notes = [r for r in records if r.get("note")]
    if notes:
        lines += ["", "## Notes", ""]
        lines += [f"- {r['architecture']} {r['variant']}: {r['note']}" for r in notes]
    return "\n".join(lines) + "\n"


def speed_markdown(records: list[dict]) -> list[str]:
    """The timed runs (--time), the slowest against ONNX Runtime first."""
    timed = sorted(((r, run) for r in records if r.get("status") == "done" for run in r["runs"]
                    if run.get("vs_ort") is not None), key=lambda x: x[1]["vs_ort"])
    if not timed:
        return []
    slower = sum(run["vs_ort"] < 1 for _, run in timed)
    lines = ["", f"## Speed against ONNX Runtime ({len(timed)} runs timed, {slower} slower than it)", "",
             "Median ms at the first input size; ORT / ours > 1: ours faster.", "",
             "| architecture | variant | level | backend | ms | ONNX Runtime ms | ORT / ours |",
             "| --- | --- | ---: | --- | ---: | ---: | ---: |"]
    lines += [f"| {r['architecture']} | {r['variant']} | {run['level']} | {run['backend']} | "
              f"{run['ms']:.3g} | {run['ort_ms']:.3g} | {run['vs_ort']:.2f}x |" for r, run in timed]
    return lines


def reference_markdown(records: list[dict]) -> list[str]:
    """The runs in which a node runs a oneDNN reference implementation."""
    found = [(r, run) for r in records if r.get("status") == "done" for run in r["runs"]
             if run.get("reference_kernels")]
    if not found:
        return []
    lines = ["", f"## Nodes on oneDNN's reference kernels ({len(found)} runs)", "",
             "| architecture | variant | level | backend | nodes | first |", "| --- | --- | ---: | --- | ---: | --- |"]
    for r, run in found:
        (name, kernel), *_ = run["reference_kernels"].items()
        lines.append(f"| {r['architecture']} | {r['variant']} | {run['level']} | {run['backend']} | "
                     f"{len(run['reference_kernels'])} | {_cell(name)}: {_cell(kernel)} |")
    return lines


def write_summary(out: Path, command: str, levels: list[int], backends: list[str],
                  precision: str = "fp32") -> str:
    records = load_records(out)
    (out / "sweep.json").write_text(json.dumps(
        {"machine": machine_info(command), "precision": precision, "tolerance": TOLERANCE[precision],
         "totals": totals(records), "variants": records}, indent=1))
    text = summary_markdown(records, command, levels, backends, precision)
    (out / "sweep.md").write_text(text)
    return text


# ---- the command ----------------------------------------------------------------------------

def _int_list(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x]


def _backends(text: str) -> list[str]:
    chosen = [b for b in text.split(",") if b]
    unknown = [b for b in chosen if b not in BACKENDS]
    if unknown or not chosen:
        raise argparse.ArgumentTypeError(f"backends are {', '.join(BACKENDS)}, not {text!r}")
    return chosen


def _variants(text: str) -> list[Variant]:
    try:
        return [parse_variant(v) for v in text.split(",") if v]
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m autofusion.benchmarks.sweep", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", metavar="PATTERN", default="",
                   help="a regular expression: the architectures whose name it finds (default all)")
    p.add_argument("--variants", type=_variants, default=_variants(",".join(DEFAULT_VARIANTS)),
                   help=f"comma-separated, run in this order (default {','.join(DEFAULT_VARIANTS)})")
    p.add_argument("--levels", type=_int_list, default=list(LEVELS))
    p.add_argument("--backends", type=_backends, default=["native"],
                   help=f"comma-separated from {','.join(BACKENDS)} (default native)")
    p.add_argument("--out", type=Path, default=Path("sweep-out"))
    p.add_argument("--jobs", type=int, default=1, help="variants run at the same time")
    p.add_argument("--timeout", type=float, default=900, help="seconds per variant (default 900)")
    p.add_argument("--threads", type=int, default=1,
                   help="threads for ONNX Runtime and autofusion in each variant (default 1)")
    p.add_argument("--precision", choices=list(TOLERANCE), default="fp32",
                   help="autofusion's precision (default fp32; the tolerance follows it)")
    p.add_argument("--time", type=int, default=0, metavar="ROUNDS",
                   help="also time each run against ONNX Runtime at the first input size, in ROUNDS "
                        "rounds of 3 runs each, alternating (default 0: not timed)")
    p.add_argument("--fresh", action="store_true", help="rerun the variants already finished")
    p.add_argument("--keep-onnx", action="store_true", help="keep the exported files in <out>/onnx")
    p.add_argument("--list", action="store_true", help="list the architectures and exit")
    p.add_argument("--worker", nargs=2, metavar=("ARCH", "VARIANT"), help=argparse.SUPPRESS)
    return p


def _worker(args) -> int:
    arch, variant = ARCHITECTURES[args.worker[0]], parse_variant(args.worker[1])
    torch.set_num_threads(args.threads)
    path = _variant_file(args.out, arch.name, variant.name)
    save = lambda record: path.write_text(json.dumps(record, indent=1))
    workdir = args.out / "onnx"
    run_variant(arch, variant, args.levels, args.backends, workdir, args.threads, save, args.precision,
                args.time)
    if not args.keep_onnx:
        for f in workdir.glob(f"{arch.name}.{variant.name}.onnx*"):
            f.unlink()
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.worker:
        return _worker(args)
    archs = [a for a in ARCHITECTURES.values() if re.search(args.models, a.name)]
    if args.list:
        for a in archs:
            print(f"{a.name:32} {a.family:28} {a.config}")
        return 0
    if not archs:
        parser.error(f"--models {args.models!r} matches none of: {', '.join(ARCHITECTURES)}")
    command = "python -m autofusion.benchmarks.sweep " + shlex.join(argv if argv is not None else sys.argv[1:])
    for sub in ("variants", "logs", "onnx"):
        (args.out / sub).mkdir(parents=True, exist_ok=True)
    todo, skipped = [], 0
    for variant in args.variants:           # variant-major: every architecture gets the first one
        for arch in archs:
            path = _variant_file(args.out, arch.name, variant.name)
            if _finished(path) and not args.fresh:
                skipped += 1
            else:
                path.unlink(missing_ok=True)
                todo.append((arch, variant))
    if skipped:
        print(f"skipping {skipped} variants finished in {args.out} (--fresh reruns them)",
              file=sys.stderr)
    _run_all(todo, args, command)
    text = write_summary(args.out, command, args.levels, args.backends, args.precision)
    print(text)
    return 0


def _run_all(todo: list[tuple[Architecture, Variant]], args, command: str) -> None:
    """Run the variants, --jobs at a time, rewriting the summary after each."""
    from concurrent.futures import ThreadPoolExecutor, as_completed
    start = time.monotonic()
    with ThreadPoolExecutor(max(1, args.jobs)) as pool:
        futures = {pool.submit(_run_worker, a, v, args): (a, v) for a, v in todo}
        for i, f in enumerate(as_completed(futures), 1):
            f.result()
            a, v = futures[f]
            record = json.loads(_variant_file(args.out, a.name, v.name).read_text())
            runs = record.get("runs", [])
            passed = sum(r["status"] == "pass" for r in runs)
            print(f"[{time.monotonic() - start:6.0f}s] {i}/{len(todo)} {a.name} {v.name}: "
                  f"{record.get('status')}" + (f", {passed}/{len(runs)} pass" if runs else
                                                f" ({record.get('error')})"),
                  file=sys.stderr, flush=True)
            write_summary(args.out, command, args.levels, args.backends, args.precision)


if __name__ == "__main__":
    sys.exit(main())
