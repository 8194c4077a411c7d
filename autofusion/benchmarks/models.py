"""The benchmark model zoo: real architectures with random (seeded) weights, and their ONNX export.

No weights are downloaded: every model is built from its architecture alone and initialised from
a fixed seed, so two builds — and two exports — of the same model are identical. torchvision and
transformers are imported only when a model that needs them is built; when one is missing,
`ModelUnavailable` says which, so a benchmark can skip that model and go on.

    from autofusion.benchmarks.models import MODELS, build, example_inputs, export_onnx
    export_onnx("resnet50", "/tmp/resnet50.onnx")                  # TorchScript exporter
    export_onnx("bert-base", "/tmp/bert.onnx", exporter="dynamo")  # torch.export-based exporter

Both exporters run with their own graph optimisation off (no constant folding, no fusion), so
the file keeps the graph as PyTorch wrote it — BatchNormalization stays a node of its own — and
any fusion seen later is autofusion's doing.

`tiny_resnet` is a small ResNet-style CNN built here from plain torch, for quick smoke runs that
must work without torchvision (`python -m autofusion.benchmarks --quick`).

Input sizes: the size each model's torchvision weights were trained at (224x224, except
EfficientNet-B4 at 380x380); BERT and GPT-2 take 128 tokens. Models whose forward returns a
ModelOutput are wrapped to return plain tensors. BERT and GPT-2 use transformers' "eager"
attention, which exports as the textbook MatMul/Softmax/MatMul subgraph rather than as whatever
the installed transformers maps scaled_dot_product_attention to.
"""
from __future__ import annotations

import importlib
import inspect
import os
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

SEED = 0
SEQ_LEN = 128
EXPORTERS = ("torchscript", "dynamo")
TORCHSCRIPT_OPSET = 17


class ModelUnavailable(RuntimeError):
    """A model cannot be built here, e.g. its package (torchvision, transformers) is missing."""


@dataclass(frozen=True)
class ModelSpec:
    name: str
    build: Callable[[], nn.Module]                     # eval-mode module, plain-tensor outputs
    inputs: Callable[[int], dict[str, torch.Tensor]]   # batch -> named example inputs, in order
    outputs: tuple[str, ...]
    package: str                                       # the package the builder needs


def _require(package: str, model: str, *names: str):
    """The package, with `names` resolved from it. A package that is missing, or installed but
    broken (torchvision built for another torch raises RuntimeError on import; transformers then
    fails lazily on its model classes), makes the model unavailable rather than an error."""
    try:
        module = __import__(package)
        for name in names:
            getattr(module, name)
        return module
    except Exception as e:
        raise ModelUnavailable(f"{model}: needs {package}, which does not import here "
                               f"({type(e).__name__}: {e})") from e


# ---- vision (torchvision) ------------------------------------------------------------------

def _torchvision(arch: str, name: str, **kwargs) -> Callable[[], nn.Module]:
    """arch: a builder in torchvision.models, or in one of its packages ("detection.ssd300_vgg16");
    kwargs go to the builder (weights are always None)."""
    def build() -> nn.Module:
        _require("torchvision", name)
        package, _, builder = arch.rpartition(".")
        # the submodules are not imported by torchvision itself
        module = importlib.import_module("torchvision.models" + ("." + package if package else ""))
        return getattr(module, builder)(weights=None, **kwargs)
    return build


def _image(size: int) -> Callable[[int], dict[str, torch.Tensor]]:
    def inputs(batch: int) -> dict[str, torch.Tensor]:
        g = torch.Generator().manual_seed(SEED)
        return {"pixel_values": torch.randn(batch, 3, size, size, generator=g)}
    return inputs


# ---- language (transformers) ---------------------------------------------------------------

class _Bert(nn.Module):
    """BertModel returning (last_hidden_state, pooler_output) instead of a ModelOutput."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask, token_type_ids):
        out = self.model(input_ids=input_ids, attention_mask=attention_mask,
                         token_type_ids=token_type_ids, return_dict=True)
        return out.last_hidden_state, out.pooler_output


class _GPT2(nn.Module):
    """GPT2Model returning last_hidden_state, without the key/value cache."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, input_ids):
        # An explicit all-ones mask: without one, transformers looks for packed sequences in the
        # position ids with torch.diff, which the TorchScript exporter cannot export.
        mask = torch.ones_like(input_ids)
        out = self.model(input_ids=input_ids, attention_mask=mask, use_cache=False, return_dict=True)
        return out.last_hidden_state


def _bert() -> nn.Module:
    tf = _require("transformers", "bert-base", "BertConfig", "BertModel")
    config = tf.BertConfig(attn_implementation="eager")    # bert-base-uncased dimensions
    return _Bert(tf.BertModel(config, add_pooling_layer=True))


def _gpt2() -> nn.Module:
    tf = _require("transformers", "gpt2", "GPT2Config", "GPT2Model")
    config = tf.GPT2Config(attn_implementation="eager")    # GPT-2 small (124M)
    return _GPT2(tf.GPT2Model(config))


def _tokens(names: tuple[str, ...], vocab: int,
            seq_len: int = SEQ_LEN) -> Callable[[int], dict[str, torch.Tensor]]:
    def inputs(batch: int) -> dict[str, torch.Tensor]:
        g = torch.Generator().manual_seed(SEED)
        make = {
            "input_ids": lambda: torch.randint(0, vocab, (batch, seq_len), generator=g),
            "decoder_input_ids": lambda: torch.randint(0, vocab, (batch, seq_len), generator=g),
            "attention_mask": lambda: torch.ones(batch, seq_len, dtype=torch.int64),
            "token_type_ids": lambda: torch.zeros(batch, seq_len, dtype=torch.int64),
        }
        return {n: make[n]() for n in names}
    return inputs


# ---- built in (plain torch) ---------------------------------------------------------------

class _Residual(nn.Module):
    """A basic ResNet block: two 3x3 Conv+BN, a projection on the skip when the shape changes."""

    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(),
            nn.Conv2d(cout, cout, 3, 1, 1, bias=False), nn.BatchNorm2d(cout))
        self.skip = (nn.Identity() if stride == 1 and cin == cout else
                     nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout)))

    def forward(self, x):
        return torch.relu(self.body(x) + self.skip(x))


def _tiny_resnet() -> nn.Module:
    """Three residual stages (16, 32, 64 channels) and a linear head: 78k parameters."""
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, 1, 1, bias=False), nn.BatchNorm2d(16), nn.ReLU(),
        _Residual(16, 16, 1), _Residual(16, 32, 2), _Residual(32, 64, 2),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 10))


class _MixingBlock(nn.Module):
    """A pre-norm transformer block over the columns of a text line (SVTR's global mixing)."""

    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.heads = heads
        self.n1, self.n2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim))

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = (y.view(b, t, self.heads, -1).transpose(1, 2) for y in self.qkv(self.n1(x)).split(d, -1))
        a = (q @ k.transpose(-1, -2) * (d // self.heads) ** -0.5).softmax(-1) @ v
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, d))
        return x + self.mlp(self.n2(x))


def _ocr_recognizer() -> nn.Module:
    """An SVTR-style text-line recognizer for 48-pixel lines of any width: a strided conv stem to
    a sequence of one column per 4 pixels, two global mixing blocks, a per-column classifier over
    97 characters (CTC's log-probabilities)."""
    def conv(cin, cout, stride):
        return nn.Sequential(nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout), nn.Hardswish())

    class Recognizer(nn.Module):
        def __init__(self, dim: int = 128):
            super().__init__()
            self.stem = nn.Sequential(conv(3, 32, 2), conv(32, 64, 2), conv(64, dim, (2, 1)), conv(dim, dim, (2, 1)))
            self.blocks = nn.Sequential(_MixingBlock(dim, 4), _MixingBlock(dim, 4))
            self.head = nn.Linear(dim, 97)

        def forward(self, pixel_values):
            x = self.stem(pixel_values).mean(2)            # [b, dim, w / 4]
            x = self.blocks(x.transpose(1, 2))             # [b, w / 4, dim]
            return self.head(x).log_softmax(-1)
    return Recognizer()


def _conv_bn_silu(cin: int, cout: int, k: int = 1, stride: int = 1) -> nn.Module:
    return nn.Sequential(nn.Conv2d(cin, cout, k, stride, k // 2, bias=False), nn.BatchNorm2d(cout), nn.SiLU())


class _C2f(nn.Module):
    """YOLOv8's cross-stage block: a 1x1 conv split in two, a chain of residual 3x3 pairs on one
    half, every intermediate concatenated into a last 1x1 conv."""

    def __init__(self, cin: int, cout: int, n: int = 1):
        super().__init__()
        self.c = cout // 2
        self.cv1, self.cv2 = _conv_bn_silu(cin, 2 * self.c), _conv_bn_silu((2 + n) * self.c, cout)
        self.m = nn.ModuleList(nn.Sequential(_conv_bn_silu(self.c, self.c, 3), _conv_bn_silu(self.c, self.c, 3))
                               for _ in range(n))

    def forward(self, x):
        y = list(self.cv1(x).split((self.c, self.c), 1))
        for m in self.m:
            y.append(y[-1] + m(y[-1]))
        return self.cv2(torch.cat(y, 1))


class _Detector(nn.Module):
    """A YOLOv8-style detector for images of any size (multiples of 32): a C2f backbone with an
    SPPF, an FPN/PAN neck (nearest 2x upsampling, concatenations), a decoupled head per stride,
    the boxes decoded in the graph from a 16-bin distribution (a softmax over the bins, an inner
    axis) and an anchor grid made from the feature maps' sizes. Outputs [b, 4 + classes,
    anchors]."""

    def __init__(self, classes: int = 20):
        super().__init__()
        self.p3 = nn.Sequential(_conv_bn_silu(3, 16, 3, 2), _conv_bn_silu(16, 32, 3, 2), _C2f(32, 32),
                                _conv_bn_silu(32, 64, 3, 2), _C2f(64, 64, 2))
        self.p4 = nn.Sequential(_conv_bn_silu(64, 128, 3, 2), _C2f(128, 128, 2))
        self.p5 = nn.Sequential(_conv_bn_silu(128, 128, 3, 2), _C2f(128, 128))
        self.sppf_in, self.sppf_out, self.pool = _conv_bn_silu(128, 64), _conv_bn_silu(256, 128), nn.MaxPool2d(5, 1, 2)
        self.up = nn.Upsample(scale_factor=2, mode="nearest")
        self.top, self.n3 = _C2f(256, 128), _C2f(192, 64)
        self.down3, self.n4 = _conv_bn_silu(64, 64, 3, 2), _C2f(192, 128)
        self.down4, self.n5 = _conv_bn_silu(128, 128, 3, 2), _C2f(256, 128)
        self.box = nn.ModuleList(nn.Sequential(_conv_bn_silu(c, 64, 3), _conv_bn_silu(64, 64, 3), nn.Conv2d(64, 64, 1))
                                 for c in (64, 128, 128))
        self.cls = nn.ModuleList(nn.Sequential(_conv_bn_silu(c, 64, 3), _conv_bn_silu(64, 64, 3),
                                               nn.Conv2d(64, classes, 1)) for c in (64, 128, 128))
        self.dfl = nn.Conv2d(16, 1, 1, bias=False).requires_grad_(False)   # the bins' expectation
        self.dfl.weight.copy_(torch.arange(16, dtype=torch.float32).view(1, 16, 1, 1))

    def forward(self, pixel_values):
        p3 = self.p3(pixel_values)
        p4 = self.p4(p3)
        x = self.sppf_in(self.p5(p4))
        y1 = self.pool(x)
        y2 = self.pool(y1)
        p5 = self.sppf_out(torch.cat((x, y1, y2, self.pool(y2)), 1))
        t = self.top(torch.cat((self.up(p5), p4), 1))
        n3 = self.n3(torch.cat((self.up(t), p3), 1))
        n4 = self.n4(torch.cat((self.down3(n3), t), 1))
        n5 = self.n5(torch.cat((self.down4(n4), p5), 1))
        b = pixel_values.shape[0]
        heads, anchors, strides = [], [], []
        for k, (f, stride) in enumerate(((n3, 8), (n4, 16), (n5, 32))):
            heads.append(torch.cat((self.box[k](f), self.cls[k](f)), 1).flatten(2))
            h, w = f.shape[2:]
            ys, xs = torch.meshgrid(torch.arange(h, dtype=torch.float32) + 0.5,
                                    torch.arange(w, dtype=torch.float32) + 0.5, indexing="ij")
            anchors.append(torch.stack((xs, ys)).flatten(1))
            strides.append(torch.full((1, h * w), float(stride)))
        out = torch.cat(heads, 2)
        dist, scores = out[:, :64], out[:, 64:]
        dist = self.dfl(dist.view(b, 4, 16, -1).transpose(1, 2).softmax(1)).view(b, 4, -1)
        grid, stride = torch.cat(anchors, 1), torch.cat(strides, 1)
        lt, rb = dist[:, :2], dist[:, 2:]
        boxes = torch.cat(((grid + (rb - lt) / 2), lt + rb), 1) * stride
        return torch.cat((boxes, scores.sigmoid()), 1)


def _line(width: int) -> Callable[[int], dict[str, torch.Tensor]]:
    def inputs(batch: int) -> dict[str, torch.Tensor]:
        g = torch.Generator().manual_seed(SEED)
        return {"pixel_values": torch.rand(batch, 3, 48, width, generator=g)}
    return inputs


# ---- the registry --------------------------------------------------------------------------

def _vision(name: str, arch: str, size: int = 224) -> ModelSpec:
    return ModelSpec(name, _torchvision(arch, name), _image(size), ("logits",), "torchvision")


MODELS: dict[str, ModelSpec] = {s.name: s for s in [
    _vision("resnet50", "resnet50"),
    _vision("resnet101", "resnet101"),
    _vision("efficientnet_b4", "efficientnet_b4", 380),
    _vision("vit_b_16", "vit_b_16"),
    _vision("mobilenet_v3_large", "mobilenet_v3_large"),
    _vision("convnext_tiny", "convnext_tiny"),
    ModelSpec("bert-base", _bert,
              _tokens(("input_ids", "attention_mask", "token_type_ids"), vocab=30522),
              ("last_hidden_state", "pooler_output"), "transformers"),
    ModelSpec("gpt2", _gpt2, _tokens(("input_ids",), vocab=50257),
              ("last_hidden_state",), "transformers"),
    ModelSpec("tiny_resnet", _tiny_resnet, _image(64), ("logits",), "torch"),
    ModelSpec("ocr_recognizer", _ocr_recognizer, _line(320), ("logits",), "torch"),
    ModelSpec("yolo_detector", _Detector, _image(640), ("detections",), "torch"),
]}


# the axes each model's dynamic export leaves symbolic (autofusion/benchmarks/dynamic.py)
_IMAGE_AXES = {"pixel_values": {0: "batch", 2: "height", 3: "width"}}
_TEXT_AXES = {n: {0: "batch", 1: "sequence"} for n in ("input_ids", "attention_mask", "token_type_ids")}
DYNAMIC_AXES: dict[str, dict] = {
    "resnet50": _IMAGE_AXES, "resnet101": _IMAGE_AXES, "efficientnet_b4": _IMAGE_AXES,
    "mobilenet_v3_large": _IMAGE_AXES, "convnext_tiny": _IMAGE_AXES,
    "vit_b_16": {"pixel_values": {0: "batch"}},   # its position embedding is for 224x224 alone
    "bert-base": _TEXT_AXES, "gpt2": {"input_ids": _TEXT_AXES["input_ids"]},
    "tiny_resnet": _IMAGE_AXES, "ocr_recognizer": {"pixel_values": {0: "batch", 3: "width"}},
    "yolo_detector": _IMAGE_AXES,
}


def inputs_at(name: str, size: int, batch: int = 1) -> dict[str, torch.Tensor]:
    """Example inputs with the model's dynamic axis at `size`: the image's height and width (a
    text line's width), or the token sequence's length; a model dynamic in batch alone (ViT)
    takes `size` as its batch."""
    s = spec(name)
    axes = DYNAMIC_AXES[name]
    first = next(iter(axes.values()))
    if set(first.values()) == {"batch"}:
        return s.inputs(size)
    if "sequence" in first.values():
        vocab = {"bert-base": 30522, "gpt2": 50257}[name]
        return _tokens(tuple(s.inputs(batch)), vocab, size)(batch)
    if name == "ocr_recognizer":
        return _line(size)(batch)
    return _image(size)(batch)


def spec(name: str) -> ModelSpec:
    try:
        return MODELS[name]
    except KeyError:
        raise KeyError(f"unknown model {name!r}; known: {', '.join(MODELS)}") from None


def build(name: str) -> nn.Module:
    """The model in eval mode, its weights drawn from the fixed seed."""
    return build_module(spec(name))


def build_module(s: ModelSpec) -> nn.Module:
    """`s`'s model in eval mode, its weights drawn from the fixed seed (also for specs that are
    not in MODELS, such as the architecture sweep's)."""
    torch.manual_seed(SEED)
    model = s.build().eval()
    _perturb_constant_tensors(model)
    return model


@torch.no_grad()
def _perturb_constant_tensors(model: nn.Module) -> None:
    """Give every all-equal float weight or buffer (fresh norms: weight 1, bias 0, mean 0, var 1;
    zero biases; layer scales) small random variation around its value. Otherwise every
    BatchNorm is an identity, Conv+BN folding is tested on trivial numbers, and the TorchScript
    exporter merges the equal tensors into one initializer plus Identity nodes."""
    g = torch.Generator().manual_seed(SEED + 1)
    for t in [*model.parameters(), *model.buffers()]:
        if t.is_floating_point() and t.numel() > 1 and bool((t == t.flatten()[0]).all()):
            c = float(t.flatten()[0])
            noise = torch.randn(t.shape, generator=g, dtype=t.dtype)
            t.copy_(c * (1 + 0.1 * noise) if c else 0.02 * noise)


def example_inputs(name: str, batch: int = 1) -> dict[str, torch.Tensor]:
    """Named example inputs, in the order the model's forward takes them."""
    return spec(name).inputs(batch)


def export_onnx(name: str, path: str | os.PathLike, batch: int = 1,
                exporter: str = "torchscript", opset: int | None = None) -> str:
    """Export `name` to an ONNX file at `path` (static shapes, exporter optimisation off).

    exporter="torchscript": the TorchScript exporter, opset 17 unless given, no constant folding,
    eval-mode export (BatchNormalization kept as nodes). exporter="dynamo": the torch.export-based
    exporter, its default opset unless given, optimize=False. Weights are stored in the file.
    """
    s = spec(name)
    export_module(build(name), example_inputs(name, batch), path, exporter, opset, s.outputs)
    return path


def export_module(model: nn.Module, inputs: dict[str, torch.Tensor], path: str | os.PathLike,
                  exporter: str = "torchscript", opset: int | None = None,
                  outputs: tuple[str, ...] = (), dynamic_axes: dict | None = None) -> None:
    """Export a built model as export_onnx does. dynamic_axes: {input name: {axis: dim name}}
    for the axes left symbolic (None: all static)."""
    if exporter not in EXPORTERS:
        raise ValueError(f"exporter must be one of {EXPORTERS}, not {exporter!r}")
    path = os.fspath(path)
    # nn.MultiheadAttention (ViT) in eval mode takes a fused fast path, an op no exporter knows;
    # switch it off so attention exports as its parts.
    fastpath = torch.backends.mha.get_fastpath_enabled()
    torch.backends.mha.set_fastpath_enabled(False)
    try:
        _export(model, tuple(inputs.values()), path, exporter, opset, list(inputs), list(outputs),
                dynamic_axes)
    finally:
        torch.backends.mha.set_fastpath_enabled(fastpath)


def _export(model, args, path, exporter, opset, input_names, output_names,
            dynamic_axes=None) -> None:
    with torch.no_grad():
        if exporter == "torchscript":
            torch.onnx.export(model, args, path, dynamo=False, do_constant_folding=False,
                              opset_version=opset or TORCHSCRIPT_OPSET,
                              training=torch.onnx.TrainingMode.EVAL, dynamic_axes=dynamic_axes,
                              input_names=input_names, output_names=output_names)
        else:
            # Dim.AUTO: torch.export finds each axis' range and keeps static what the model fixes
            # (its conversion of dynamic_axes fails on models with several inputs)
            shapes = None if dynamic_axes is None else tuple(
                {a: torch.export.Dim.AUTO for a in dynamic_axes.get(n, {})} or None
                for n in input_names)
            if shapes is not None and any(p.kind is p.VAR_POSITIONAL
                                          for p in inspect.signature(model.forward).parameters.values()):
                shapes = (shapes,)      # forward(*args): torch.export sees one argument, a tuple
            torch.onnx.export(model, args, path, dynamo=True, optimize=False,
                              opset_version=opset, external_data=False, dynamic_shapes=shapes,
                              input_names=input_names, output_names=output_names)
