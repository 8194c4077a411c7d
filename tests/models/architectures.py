"""Small but real architectures, built in PyTorch and exported to ONNX inside the tests.

Each mirrors the structure of a model family the product targets: a ResNet bottleneck stack with
BatchNorm, a MobileNetV3 block (depthwise conv, squeeze-excite, hard-swish), a BERT encoder
layer (multi-head attention with an additive mask, GELU feed-forward, post-LN LayerNorm), and a
GPT-2 decoder block (pre-LN, causal attention, tanh GELU, tied LM head), and a LLaMA decoder
block (RMSNorm, rotary embeddings, grouped-query attention, SiLU-gated MLP). The ONNX files
are exported with constant folding off so they stay what a framework emits.
"""
from __future__ import annotations

import io
import math

import onnx
import torch
from torch import nn


class Bottleneck(nn.Module):
    def __init__(self, cin: int, width: int, stride: int = 1):
        super().__init__()
        cout = width * 4
        self.conv1, self.bn1 = nn.Conv2d(cin, width, 1, bias=False), nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3, self.bn3 = nn.Conv2d(width, cout, 1, bias=False), nn.BatchNorm2d(cout)
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        y = torch.relu(self.bn1(self.conv1(x)))
        y = torch.relu(self.bn2(self.conv2(y)))
        y = self.bn3(self.conv3(y))
        return torch.relu(y + (x if self.down is None else self.down(x)))


class ResNetStack(nn.Module):
    def __init__(self, classes: int = 10):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 7, 2, 3, bias=False), nn.BatchNorm2d(16),
                                  nn.ReLU(), nn.MaxPool2d(3, 2, 1))
        self.blocks = nn.Sequential(Bottleneck(16, 8), Bottleneck(32, 8), Bottleneck(32, 16, 2))
        self.fc = nn.Linear(64, classes)

    def forward(self, x):
        x = self.blocks(self.stem(x))
        return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1))


class SqueezeExcite(nn.Module):
    def __init__(self, c: int, r: int = 4):
        super().__init__()
        self.fc1, self.fc2 = nn.Conv2d(c, c // r, 1), nn.Conv2d(c // r, c, 1)

    def forward(self, x):
        s = nn.functional.adaptive_avg_pool2d(x, 1)
        return x * nn.functional.hardsigmoid(self.fc2(torch.relu(self.fc1(s))))


class MobileNetBlock(nn.Module):
    """MobileNetV3 inverted residual: expand 1x1, depthwise 3x3, SE, project 1x1, residual."""

    def __init__(self, c: int = 16, expand: int = 4):
        super().__init__()
        e = c * expand
        self.stem = nn.Sequential(nn.Conv2d(3, c, 3, 2, 1, bias=False), nn.BatchNorm2d(c), nn.Hardswish())
        self.expand = nn.Sequential(nn.Conv2d(c, e, 1, bias=False), nn.BatchNorm2d(e), nn.Hardswish())
        self.dw = nn.Sequential(nn.Conv2d(e, e, 3, 1, 1, groups=e, bias=False), nn.BatchNorm2d(e),
                                nn.Hardswish())
        self.se = SqueezeExcite(e)
        self.project = nn.Sequential(nn.Conv2d(e, c, 1, bias=False), nn.BatchNorm2d(c))
        self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(c, 10))

    def forward(self, x):
        x = self.stem(x)
        return self.head(x + self.project(self.se(self.dw(self.expand(x)))))


class BertLayer(nn.Module):
    """One BERT encoder layer, written out as BERT does it (not nn.MultiheadAttention)."""

    def __init__(self, hidden: int = 64, heads: int = 4, ffn: int = 128, vocab: int = 100):
        super().__init__()
        self.heads, self.dh = heads, hidden // heads
        self.embed = nn.Embedding(vocab, hidden)
        self.q, self.k, self.v = (nn.Linear(hidden, hidden) for _ in range(3))
        self.o = nn.Linear(hidden, hidden)
        self.ln1, self.ln2 = nn.LayerNorm(hidden, eps=1e-12), nn.LayerNorm(hidden, eps=1e-12)
        self.ff1, self.ff2 = nn.Linear(hidden, ffn), nn.Linear(ffn, hidden)

    def _split(self, x):   # as transformers writes it: the head count left to view's -1
        return x.view(*x.shape[:-1], -1, self.dh).transpose(1, 2)

    def forward(self, input_ids, attention_mask):
        x = self.embed(input_ids)
        mask = (1.0 - attention_mask[:, None, None, :].to(x.dtype)) * -10000.0
        q, k, v = self._split(self.q(x)), self._split(self.k(x)), self._split(self.v(x))
        scores = q @ k.transpose(-1, -2) / math.sqrt(self.dh) + mask
        ctx = (torch.softmax(scores, -1) @ v).transpose(1, 2).reshape(x.shape)
        x = self.ln1(x + self.o(ctx))
        return self.ln2(x + self.ff2(nn.functional.gelu(self.ff1(x))))


class Conv1D(nn.Module):
    """GPT-2's linear layer: the rows flattened, one addmm, the shape restored."""

    def __init__(self, d_in: int, d_out: int):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(d_in, d_out) * 0.1)
        self.bias = nn.Parameter(torch.randn(d_out) * 0.1)

    def forward(self, x):
        y = torch.addmm(self.bias, x.view(-1, x.size(-1)), self.weight)
        return y.view(x.size()[:-1] + (y.size(-1),))


class GPTBlock(nn.Module):
    """One GPT-2 decoder block with its embeddings, final LayerNorm and tied LM head, written as
    GPT-2 does it: pre-LN, a causal mask picked out of a lower-triangular buffer, tanh GELU."""

    def __init__(self, hidden: int = 64, heads: int = 4, vocab: int = 100, context: int = 32):
        super().__init__()
        self.heads, self.dh = heads, hidden // heads
        self.wte, self.wpe = nn.Embedding(vocab, hidden), nn.Embedding(context, hidden)
        self.ln_1, self.ln_2, self.ln_f = (nn.LayerNorm(hidden) for _ in range(3))
        self.c_attn, self.c_proj = Conv1D(hidden, 3 * hidden), Conv1D(hidden, hidden)
        self.c_fc, self.mlp_proj = Conv1D(hidden, 4 * hidden), Conv1D(4 * hidden, hidden)
        self.register_buffer("causal", torch.tril(torch.ones(context, context, dtype=torch.bool))[None, None])

    def _split(self, x):
        b, s, _ = x.shape
        return x.view(b, s, self.heads, self.dh).transpose(1, 2)

    def forward(self, input_ids):
        s = input_ids.shape[1]
        x = self.wte(input_ids) + self.wpe(torch.arange(s))
        q, k, v = map(self._split, self.c_attn(self.ln_1(x)).split(x.shape[-1], dim=2))
        w = q @ k.transpose(-1, -2) / math.sqrt(self.dh)
        w = torch.where(self.causal[:, :, :s, :s], w, torch.finfo(w.dtype).min)
        x = x + self.c_proj((torch.softmax(w, -1) @ v).transpose(1, 2).reshape(x.shape))
        x = x + self.mlp_proj(nn.functional.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))
        return self.ln_f(x) @ self.wte.weight.T


class LlamaBlock(nn.Module):
    """One LLaMA decoder block as transformers writes it: RMSNorm, rotary position embeddings
    (rotate_half), grouped-query attention with repeat_kv, a SiLU-gated MLP, tied head."""

    def __init__(self, hidden: int = 64, heads: int = 4, kv_heads: int = 2, vocab: int = 100):
        super().__init__()
        self.heads, self.kv_heads, self.dh = heads, kv_heads, hidden // heads
        self.embed = nn.Embedding(vocab, hidden)
        self.norm_weights = nn.ParameterList(nn.Parameter(1 + 0.1 * torch.randn(hidden)) for _ in range(3))
        self.q = nn.Linear(hidden, hidden, bias=False)
        self.k, self.v = (nn.Linear(hidden, kv_heads * self.dh, bias=False) for _ in range(2))
        self.o = nn.Linear(hidden, hidden, bias=False)
        self.gate, self.up = (nn.Linear(hidden, 2 * hidden, bias=False) for _ in range(2))
        self.down = nn.Linear(2 * hidden, hidden, bias=False)
        self.register_buffer("inv_freq", 1.0 / 10000 ** (torch.arange(0, self.dh, 2).float() / self.dh))

    def _norm(self, x, i):
        return self.norm_weights[i] * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6))

    def _heads(self, x, n):
        return x.view(*x.shape[:-1], n, self.dh).transpose(1, 2)

    def forward(self, input_ids):
        x = self.embed(input_ids)
        b, s = input_ids.shape
        angles = torch.arange(s).float()[None, :, None] * self.inv_freq[None, None, :]
        emb = torch.cat([angles, angles], -1)[:, None]                 # [1, 1, s, dh]
        cos, sin = emb.cos(), emb.sin()

        def rotary(t):
            half = t.shape[-1] // 2
            return t * cos + torch.cat([-t[..., half:], t[..., :half]], -1) * sin

        h = self._norm(x, 0)
        q, k, v = self._heads(self.q(h), self.heads), self._heads(self.k(h), self.kv_heads), \
            self._heads(self.v(h), self.kv_heads)
        q, k = rotary(q), rotary(k)
        rep = self.heads // self.kv_heads                                # repeat_kv
        k, v = (t[:, :, None].expand(b, self.kv_heads, rep, s, self.dh).reshape(b, self.heads, s, self.dh)
                for t in (k, v))
        causal = torch.full((s, s), torch.finfo(x.dtype).min).triu(1)
        w = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(self.dh) + causal, -1)
        x = x + self.o((w @ v).transpose(1, 2).reshape(b, s, -1))
        h = self._norm(x, 1)
        x = x + self.down(nn.functional.silu(self.gate(h)) * self.up(h))
        return self._norm(x, 2) @ self.embed.weight.T


def export(module: nn.Module, args: tuple, input_names: list[str], dynamic: dict | None = None,
           opset: int = 17) -> onnx.ModelProto:
    """Export with the TorchScript exporter, constant folding off (the raw framework graph)."""
    torch.manual_seed(0)
    module.eval()
    with torch.no_grad():
        for m in module.modules():  # non-trivial BatchNorm statistics, so folding would matter
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.uniform_(-0.5, 0.5)
                m.running_var.uniform_(0.5, 1.5)
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.5, 0.5)
    f = io.BytesIO()
    torch.onnx.export(module, args, f, input_names=input_names, output_names=["output"],
                      dynamic_axes=dynamic, opset_version=opset, do_constant_folding=False,
                      dynamo=False)
    return onnx.load_from_string(f.getvalue())


def resnet_stack() -> tuple[onnx.ModelProto, dict]:
    torch.manual_seed(0)
    x = torch.randn(2, 3, 64, 64)
    model = export(ResNetStack(), (x,), ["image"], {"image": {0: "batch"}})
    return model, {"image": x.numpy()}


def mobilenet_block() -> tuple[onnx.ModelProto, dict]:
    torch.manual_seed(0)
    x = torch.randn(1, 3, 32, 32)
    return export(MobileNetBlock(), (x,), ["image"]), {"image": x.numpy()}


def bert_layer() -> tuple[onnx.ModelProto, dict]:
    torch.manual_seed(0)
    ids = torch.randint(0, 100, (2, 16))
    mask = torch.ones(2, 16, dtype=torch.int64)
    mask[1, 10:] = 0
    dyn = {"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "seq"}}
    model = export(BertLayer(), (ids, mask), ["input_ids", "attention_mask"], dyn)
    return model, {"input_ids": ids.numpy(), "attention_mask": mask.numpy()}


def gpt_block() -> tuple[onnx.ModelProto, dict]:
    torch.manual_seed(0)
    ids = torch.randint(0, 100, (2, 16))
    model = export(GPTBlock(), (ids,), ["input_ids"], {"input_ids": {0: "batch", 1: "seq"}})
    return model, {"input_ids": ids.numpy()}


def llama_block() -> tuple[onnx.ModelProto, dict]:
    torch.manual_seed(0)
    ids = torch.randint(0, 100, (2, 12))
    model = export(LlamaBlock(), (ids,), ["input_ids"], {"input_ids": {0: "batch", 1: "seq"}})
    return model, {"input_ids": ids.numpy()}


ARCHITECTURES = {"resnet_stack": resnet_stack, "mobilenet_block": mobilenet_block,
                 "bert_layer": bert_layer, "gpt_block": gpt_block, "llama_block": llama_block}
