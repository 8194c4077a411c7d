"""The real-model corpus: models as their usual exporters write them, each built from a package on
PyPI with random or packaged weights (nothing is downloaded at run time), with its export recipe
and the inputs it is run at. `realworld.py` compares the systems on them; the tests run the
CI-sized ones (torch alone) against ONNX Runtime.

Each entry: its name, where it comes from, how it is exported (a function writing the ONNX file),
its input feeds at one or more sizes, and the package it needs (missing: the entry is skipped with
that reason). Models of another framework are exported by that framework's exporter in a virtual
environment of their own (`--tf-python`, `--paddle-python`: tensorflow and paddlepaddle pin
other numpy and protobuf versions than this project's).
"""
from __future__ import annotations

import os
import subprocess
import textwrap
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from torch import nn

from . import models
from .models import ModelUnavailable, _conv_bn_silu, _require, export_module

SEED = 0
Feeds = dict[str, np.ndarray]


@dataclass
class Entry:
    name: str
    source: str                                # the package (and class) it is built from
    recipe: str                                # how its users export it, in a line
    export: Callable[[Path], None]             # writes the ONNX file at the path
    sizes: dict[str, Callable[[], Feeds]]      # size label -> the inputs at that size
    ci: bool = False                           # small and torch-only: the tests run it
    environment: dict = field(default_factory=dict)   # other interpreters it needs (tf, paddle)


def _rng() -> np.random.Generator:
    return np.random.default_rng(SEED)


def image(h: int, w: int, name: str = "images", batch: int = 1) -> Callable[[], Feeds]:
    return lambda: {name: _rng().random((batch, 3, h, w), dtype=np.float32)}


def tokens(seq: int, vocab: int, batch: int = 1, mask: bool = True, types: bool = False) -> Callable[[], Feeds]:
    def feeds() -> Feeds:
        out = {"input_ids": _rng().integers(0, vocab, (batch, seq)).astype(np.int64)}
        if mask:
            out["attention_mask"] = np.ones((batch, seq), np.int64)
        if types:
            out["token_type_ids"] = np.zeros((batch, seq), np.int64)
        return out
    return feeds


def _torch_export(build: Callable[[], nn.Module], example: Callable[[], Feeds], axes: dict | None,
                  outputs: tuple[str, ...] = ()) -> Callable[[Path], None]:
    """The TorchScript exporter, as torch.onnx.export users call it (opset 17, eval mode)."""
    def export(path: Path) -> None:
        torch.manual_seed(SEED)
        module = build().eval()
        models._perturb_constant_tensors(module)
        inputs = {k: torch.from_numpy(v) for k, v in example().items()}
        export_module(module, inputs, path, outputs=outputs, dynamic_axes=axes)
    return export


# ---- hand-built architectures (torch alone) ---------------------------------------------------

class UNet(nn.Module):
    """A U-Net for segmentation: four levels of two 3x3 conv-BN-ReLU, max-pool down, ConvTranspose
    2x up, skip concatenations, a 1x1 head over `classes`."""

    def __init__(self, classes: int = 3, width: int = 16):
        super().__init__()
        def block(cin, cout):
            return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(),
                                 nn.Conv2d(cout, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU())
        c = [width * 2 ** k for k in range(4)]
        self.down = nn.ModuleList([block(3, c[0]), block(c[0], c[1]), block(c[1], c[2])])
        self.bottom = block(c[2], c[3])
        self.up = nn.ModuleList(nn.ConvTranspose2d(c[k + 1], c[k], 2, stride=2) for k in reversed(range(3)))
        self.merge = nn.ModuleList(block(2 * c[k], c[k]) for k in reversed(range(3)))
        self.head = nn.Conv2d(c[0], classes, 1)

    def forward(self, images):
        skips, x = [], images
        for d in self.down:
            x = d(x)
            skips.append(x)
            x = nn.functional.max_pool2d(x, 2)
        x = self.bottom(x)
        for up, merge, skip in zip(self.up, self.merge, reversed(skips)):
            x = merge(torch.cat((up(x), skip), 1))
        return self.head(x)


class DBDetector(nn.Module):
    """A DB-style text detector (PaddleOCR det's shape): a MobileNet-like backbone to strides 4-32,
    an FPN (1x1 laterals, nearest upsampling, 3x3 smoothing, each level upsampled to stride 4
    and concatenated), and the probability head: conv-BN-ReLU, two ConvTranspose 2x up to the
    input size, a sigmoid."""

    def __init__(self, width: int = 96):
        super().__init__()
        chans = (16, 24, 40, 96)
        stages, cin = [], 3
        for k, c in enumerate(chans):
            stride = 4 if k == 0 else 2
            stages.append(nn.Sequential(_conv_bn_silu(cin, c, 3, 2), _conv_bn_silu(c, c, 3, stride // 2)))
            cin = c
        self.stages = nn.ModuleList(stages)
        self.lateral = nn.ModuleList(nn.Conv2d(c, width, 1, bias=False) for c in chans)
        self.smooth = nn.ModuleList(nn.Conv2d(width, width // 4, 3, padding=1, bias=False) for _ in chans)
        self.head = nn.Sequential(nn.Conv2d(width, width // 4, 3, padding=1, bias=False), nn.BatchNorm2d(width // 4),
                                  nn.ReLU(), nn.ConvTranspose2d(width // 4, width // 4, 2, 2), nn.BatchNorm2d(width // 4),
                                  nn.ReLU(), nn.ConvTranspose2d(width // 4, 1, 2, 2))

    def forward(self, images):
        feats, x = [], images
        for s in self.stages:
            x = s(x)
            feats.append(x)
        lat = [l(f) for l, f in zip(self.lateral, feats)]
        for k in reversed(range(3)):
            lat[k] = lat[k] + nn.functional.interpolate(lat[k + 1], scale_factor=2, mode="nearest")
        outs = [nn.functional.interpolate(s(l), scale_factor=2 ** k, mode="nearest") if k else s(l)
                for k, (s, l) in enumerate(zip(self.smooth, lat))]
        return torch.sigmoid(self.head(torch.cat(outs, 1)))


class CRNN(nn.Module):
    """A CRNN text recognizer: a VGG-like conv stack to one row of columns, a two-layer
    bidirectional LSTM over the columns, a per-column classifier (CTC's log-probabilities)."""

    def __init__(self, classes: int = 97, hidden: int = 96):
        super().__init__()
        def conv(cin, cout, pool):
            return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(),
                                 nn.MaxPool2d(pool, pool))
        self.convs = nn.Sequential(conv(3, 32, 2), conv(32, 64, 2), conv(64, 128, (2, 1)), conv(128, 128, (2, 1)))
        self.rnn = nn.LSTM(128 * 3, hidden, num_layers=2, bidirectional=True)   # 48 rows pooled to 3
        self.head = nn.Linear(2 * hidden, classes)

    def forward(self, images):
        x = self.convs(images)                          # [b, 128, 3, w / 4]
        x = x.flatten(1, 2).permute(2, 0, 1)            # [w / 4, b, 256]
        x, _ = self.rnn(x)
        return self.head(x).log_softmax(-1)


class GRUDenoiser(nn.Module):
    """A speech-enhancement model in the manner of RNNoise: a magnitude spectrogram's frames
    [b, 257, t] encoded by a 1-D convolution, two GRU layers over the frames, and a gain in [0, 1]
    per frequency bin and frame applied to the input."""

    def __init__(self, bins: int = 257, hidden: int = 128):
        super().__init__()
        self.encode = nn.Conv1d(bins, hidden, 3, padding=1)
        self.gru = nn.GRU(hidden, hidden, num_layers=2)
        self.gain = nn.Linear(hidden, bins)

    def forward(self, spectrogram):                                # [b, bins, t]
        x = torch.relu(self.encode(spectrogram)).permute(2, 0, 1)  # [t, b, hidden]
        x, _ = self.gru(x)
        return spectrogram * torch.sigmoid(self.gain(x)).permute(1, 2, 0)


class HiFiGAN(nn.Module):
    """A HiFi-GAN-style vocoder: mel frames [b, 80, t] up to samples [b, 1, 256 t] by four
    ConvTranspose1d stages (8, 8, 2, 2), each followed by a residual block of dilated 1-D
    convolutions with leaky ReLUs, and a tanh."""

    def __init__(self, mels: int = 80, width: int = 128):
        super().__init__()
        self.pre = nn.Conv1d(mels, width, 7, padding=3)
        ups, blocks, c = [], [], width
        for r in (8, 8, 2, 2):
            ups.append(nn.ConvTranspose1d(c, c // 2, 2 * r, stride=r, padding=r // 2))
            c //= 2
            blocks.append(nn.ModuleList(nn.Conv1d(c, c, 3, dilation=d, padding=d) for d in (1, 3, 5)))
        self.ups, self.blocks = nn.ModuleList(ups), nn.ModuleList(blocks)
        self.post = nn.Conv1d(c, 1, 7, padding=3)

    def forward(self, mels):
        x = self.pre(mels)
        for up, block in zip(self.ups, self.blocks):
            x = up(nn.functional.leaky_relu(x, 0.1))
            for conv in block:
                x = x + conv(nn.functional.leaky_relu(x, 0.1))
        return torch.tanh(self.post(nn.functional.leaky_relu(x, 0.1)))


def _hand_built(name: str, source: str, build, sizes: dict, axes: dict, ci: bool = True) -> Entry:
    example = next(iter(sizes.values()))
    return Entry(name, source, "torch.onnx.export (TorchScript), opset 17, dynamic axes " + str(axes),
                 _torch_export(build, example, axes), sizes, ci=ci)


# ---- from packages -------------------------------------------------------------------------

def _torchvision_detection(arch: str, size: int, sized: bool) -> Callable[[], nn.Module]:
    def build() -> nn.Module:
        _require("torchvision", arch)
        import torchvision.models.detection as det
        # weights None everywhere: nothing is downloaded; `sized`: the model takes min/max_size
        kw = dict(min_size=size, max_size=size) if sized else {}
        return getattr(det, arch)(weights=None, weights_backbone=None, **kw)
    return build


class _Detections(nn.Module):
    """torchvision's detectors return a list of dicts: the exporter wants tensors."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, images):
        out = self.model(images)[0]
        return tuple(out[k] for k in sorted(out))


def _detection(arch: str, size: int, sized: bool = True) -> Entry:
    build = _torchvision_detection(arch, size, sized)
    return Entry(arch, f"torchvision.models.detection.{arch}(weights=None, weights_backbone=None)",
                 "torch.onnx.export (TorchScript), opset 17, dynamic height/width, as torchvision's docs do",
                 _torch_export(lambda: _Detections(build()), image(size, size),
                               {"images": {2: "height", 3: "width"}}),
                 {f"{size}": image(size, size), f"{size}x{size * 3 // 4}": image(size, size * 3 // 4)})


class _Segmentation(nn.Module):
    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, images):
        return self.model(images)["out"]


def _segmentation(arch: str, size: int) -> Entry:
    def build() -> nn.Module:
        _require("torchvision", arch)
        import torchvision.models.segmentation as seg
        return _Segmentation(getattr(seg, arch)(weights=None, weights_backbone=None))
    return Entry(arch, f"torchvision.models.segmentation.{arch}(weights=None, weights_backbone=None)",
                 "torch.onnx.export (TorchScript), opset 17, dynamic height/width",
                 _torch_export(build, image(size, size), {"images": {2: "height", 3: "width"}}),
                 {f"{size}": image(size, size), f"{size * 3 // 4}": image(size * 3 // 4, size * 3 // 4)})


def _transformers(name: str, source: str, build: Callable[[], nn.Module], sizes: dict, axes: dict,
                  outputs: tuple[str, ...]) -> Entry:
    def guarded() -> nn.Module:
        _require("transformers", name)
        return build()
    example = next(iter(sizes.values()))
    return Entry(name, source, f"torch.onnx.export (TorchScript), opset 17, dynamic axes {axes}",
                 _torch_export(guarded, example, axes, outputs), sizes)


class _FirstOutput(nn.Module):
    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, *args):
        out = self.model(*args)
        return out[0] if isinstance(out, (tuple, list)) else getattr(out, "last_hidden_state", out)


def _distilbert() -> nn.Module:
    from transformers import DistilBertConfig, DistilBertModel
    return _FirstOutput(DistilBertModel(DistilBertConfig()))


def _t5_encoder() -> nn.Module:
    from transformers import T5Config, T5EncoderModel
    return _FirstOutput(T5EncoderModel(T5Config(d_model=512, d_ff=2048, num_layers=6, num_heads=8)))


def _wav2vec2() -> nn.Module:
    from transformers import Wav2Vec2Config, Wav2Vec2Model
    config = Wav2Vec2Config(hidden_size=384, num_hidden_layers=4, num_attention_heads=6, intermediate_size=1536)
    return _FirstOutput(Wav2Vec2Model(config))


def _whisper_encoder() -> nn.Module:
    from transformers import WhisperConfig
    from transformers.models.whisper.modeling_whisper import WhisperEncoder
    config = WhisperConfig(d_model=384, encoder_layers=4, encoder_attention_heads=6, encoder_ffn_dim=1536)
    return _FirstOutput(WhisperEncoder(config))


def _speecht5_hifigan() -> nn.Module:
    from transformers import SpeechT5HifiGan, SpeechT5HifiGanConfig
    return SpeechT5HifiGan(SpeechT5HifiGanConfig())


def _ultralytics_yolo(path: Path) -> None:
    """ultralytics' own exporter from its model yaml (random weights): YOLO(yaml).export."""
    _require("ultralytics", "yolov8n")
    os.environ.setdefault("YOLO_OFFLINE", "1")
    from ultralytics import YOLO
    model = YOLO("yolov8n.yaml")
    exported = model.export(format="onnx", dynamic=True, imgsz=320, simplify=False, opset=17)
    os.replace(exported, path)


def _silero_vad(path: Path) -> None:
    """The model file the silero-vad package ships (its packaged weights)."""
    _require("silero_vad", "silero_vad")
    from importlib import resources
    data = resources.files("silero_vad") / "data" / "silero_vad.onnx"
    path.write_bytes(data.read_bytes())


def vad_chunk(samples: int, rate: int) -> Callable[[], Feeds]:
    return lambda: {"input": (_rng().standard_normal((1, samples)) * 0.1).astype(np.float32),
                    "state": np.zeros((2, 1, 128), np.float32), "sr": np.array(rate, np.int64)}


TF_SCRIPT = """
import sys, tensorflow as tf, tf2onnx
tf.keras.utils.set_random_seed(0)
model = tf.keras.applications.MobileNetV2(weights=None, input_shape=(224, 224, 3))
spec = (tf.TensorSpec((None, 224, 224, 3), tf.float32, name="images"),)
tf2onnx.convert.from_keras(model, input_signature=spec, opset=17, output_path=sys.argv[1])
"""

# its environment: pip install paddlepaddle paddle2onnx packaging (tensorflow's: tensorflow-cpu tf2onnx)
PADDLE_SCRIPT = """
import sys, subprocess, tempfile, os, paddle
paddle.seed(0)
model = paddle.vision.models.mobilenet_v3_small(pretrained=False)
model.eval()
with tempfile.TemporaryDirectory() as d:
    spec = [paddle.static.InputSpec([None, 3, 224, 224], "float32", "images")]
    paddle.jit.save(model, os.path.join(d, "model"), input_spec=spec)
    files = os.listdir(d)
    graph = next(f for f in files if f.endswith((".pdmodel", ".json")))
    subprocess.run([sys.executable, "-m", "paddle2onnx.command", "--model_dir", d, "--model_filename", graph,
                    "--params_filename", "model.pdiparams", "--save_file", sys.argv[1], "--opset_version", "17"],
                   check=True)
"""


def _other_framework(variable: str, script: str, what: str) -> Callable[[Path], None]:
    """An export run by another interpreter (a virtual environment with that framework)."""
    def export(path: Path) -> None:
        python = os.environ.get(variable)
        if not python:
            raise ModelUnavailable(f"{what}: set {variable} to a Python with it installed")
        done = subprocess.run([python, "-c", textwrap.dedent(script), str(path)], capture_output=True, text=True)
        if done.returncode or not path.exists():
            raise ModelUnavailable(f"{what}: the export failed: {done.stderr.strip().splitlines()[-1:]}")
    return export


CORPUS: dict[str, Entry] = {e.name: e for e in [
    # detectors
    Entry("yolov8n_ultralytics", "ultralytics YOLO('yolov8n.yaml') (random weights)",
          "model.export(format='onnx', dynamic=True, imgsz=320, simplify=False, opset=17)", _ultralytics_yolo,
          {"320": image(320, 320), "640x480": image(480, 640)}),
    _hand_built("yolo_detector", "autofusion.benchmarks.models (YOLOv8-style: C2f, SPPF, FPN/PAN, DFL)",
                lambda: models.build("yolo_detector"), {"320": image(320, 320, "pixel_values"),
                                                        "640": image(640, 640, "pixel_values")},
                {"pixel_values": {0: "batch", 2: "height", 3: "width"}}),
    _detection("fasterrcnn_mobilenet_v3_large_320_fpn", 320),
    _detection("retinanet_resnet50_fpn", 320),
    _detection("ssdlite320_mobilenet_v3_large", 320, sized=False),
    _detection("keypointrcnn_resnet50_fpn", 320),
    # segmentation
    _segmentation("deeplabv3_mobilenet_v3_large", 320),
    _segmentation("fcn_resnet50", 320),
    _segmentation("lraspp_mobilenet_v3_large", 320),
    _hand_built("unet", "a U-Net (four levels, ConvTranspose up)", UNet,
                {"256": image(256, 256), "320x192": image(192, 320)}, {"images": {2: "height", 3: "width"}}),
    # OCR
    _hand_built("db_text_detector", "a DB-style text detector (FPN, nearest Resize, ConvTranspose head)",
                DBDetector, {"640": image(640, 640), "960x544": image(544, 960)},
                {"images": {2: "height", 3: "width"}}),
    _hand_built("crnn_recognizer", "a CRNN recognizer (VGG-like convs, BiLSTM, CTC head)", CRNN,
                {"48x320": image(48, 320), "48x640": image(48, 640)}, {"images": {3: "width"}}),
    _hand_built("svtr_recognizer", "autofusion.benchmarks.models.ocr_recognizer (SVTR-style)",
                lambda: models.build("ocr_recognizer"), {"48x320": image(48, 320, "pixel_values"),
                                                          "48x640": image(48, 640, "pixel_values")},
                {"pixel_values": {3: "width"}}),
    # speech
    _transformers("wav2vec2_encoder", "transformers Wav2Vec2Model (4 layers, 384 wide, random)", _wav2vec2,
                  {"1s": lambda: {"input_values": _rng().standard_normal((1, 16000)).astype(np.float32)},
                   "2s": lambda: {"input_values": _rng().standard_normal((1, 32000)).astype(np.float32)}},
                  {"input_values": {0: "batch", 1: "samples"}}, ("last_hidden_state",)),
    _transformers("whisper_encoder", "transformers WhisperEncoder (Whisper-tiny's shape, random)",
                  _whisper_encoder,
                  {"30s": lambda: {"input_features": _rng().standard_normal((1, 80, 3000)).astype(np.float32)}},
                  {"input_features": {0: "batch"}}, ("last_hidden_state",)),
    _hand_built("gru_denoiser", "a GRU speech enhancer (RNNoise-style: conv encoder, two GRU layers, per-bin gain)",
                GRUDenoiser,
                {"100 frames": lambda: {"spectrogram": _rng().random((1, 257, 100), dtype=np.float32)},
                 "250 frames": lambda: {"spectrogram": _rng().random((1, 257, 250), dtype=np.float32)}},
                {"spectrogram": {2: "frames"}}),
    _hand_built("hifigan_vocoder", "a HiFi-GAN-style vocoder (ConvTranspose1d x4, dilated residual convs)",
                HiFiGAN, {"64 frames": lambda: {"mels": _rng().standard_normal((1, 80, 64)).astype(np.float32)},
                          "200 frames": lambda: {"mels": _rng().standard_normal((1, 80, 200)).astype(np.float32)}},
                {"mels": {0: "batch", 2: "frames"}}),
    _transformers("speecht5_hifigan", "transformers SpeechT5HifiGan (default config, random)", _speecht5_hifigan,
                  {"50 frames": lambda: {"spectrogram": _rng().standard_normal((50, 80)).astype(np.float32)}},
                  {"spectrogram": {0: "frames"}}, ("waveform",)),
    Entry("silero_vad", "the silero-vad package's silero_vad.onnx (packaged weights)",
          "shipped as ONNX by its authors (If on the sample rate, LSTM decoder)", _silero_vad,
          {"16 kHz 512": vad_chunk(512, 16000), "8 kHz 256": vad_chunk(256, 8000)}),
    # text
    _transformers("bert_base", "transformers BertModel (bert-base-uncased's config, random)",
                  lambda: models.build("bert-base"),
                  {"64": tokens(64, 30522, types=True), "128x2": tokens(128, 30522, 2, types=True)},
                  models.DYNAMIC_AXES["bert-base"], ("last_hidden_state", "pooler_output")),
    _transformers("distilbert", "transformers DistilBertModel (default config, random)", _distilbert,
                  {"64": tokens(64, 30522), "128x2": tokens(128, 30522, 2)},
                  {"input_ids": {0: "batch", 1: "sequence"}, "attention_mask": {0: "batch", 1: "sequence"}},
                  ("last_hidden_state",)),
    _transformers("t5_encoder", "transformers T5EncoderModel (t5-small's shape, random)", _t5_encoder,
                  {"64": tokens(64, 32128), "128x2": tokens(128, 32128, 2)},
                  {"input_ids": {0: "batch", 1: "sequence"}, "attention_mask": {0: "batch", 1: "sequence"}},
                  ("last_hidden_state",)),
    _transformers("gpt2_no_cache", "transformers GPT2Model (gpt2's config, random), no KV cache",
                  lambda: models.build("gpt2"), {"64": tokens(64, 50257, mask=False),
                                                 "128x2": tokens(128, 50257, 2, mask=False)},
                  {"input_ids": {0: "batch", 1: "sequence"}}, ("last_hidden_state",)),
    # other frameworks' exporters
    Entry("keras_mobilenet_v2_tf2onnx", "keras.applications.MobileNetV2(weights=None)",
          "tf2onnx.convert.from_keras, opset 17 (NHWC input, dynamic batch)",
          _other_framework("AUTOFUSION_TF_PYTHON", TF_SCRIPT, "tf2onnx"),
          {"224": lambda: {"images": _rng().random((1, 224, 224, 3), dtype=np.float32)}}),
    Entry("paddle_mobilenet_v3_paddle2onnx", "paddle.vision.models.mobilenet_v3_small(pretrained=False)",
          "paddle.jit.save, then paddle2onnx, opset 17 (dynamic batch)",
          _other_framework("AUTOFUSION_PADDLE_PYTHON", PADDLE_SCRIPT, "paddle2onnx"),
          {"224": image(224, 224)}),
]}


def ci_entries() -> list[Entry]:
    return [e for e in CORPUS.values() if e.ci]
