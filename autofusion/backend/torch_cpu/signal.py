"""Signal processing: DFT, STFT, the Hann, Hamming and Blackman windows, MelWeightMatrix.

A complex tensor is ONNX's real form: a last axis of 2 (real, imaginary), or 1 for a real
signal.
"""
from __future__ import annotations

import math

import numpy as np
import torch

from ...ir import Node
from .common import Kernel, kernel, opset, torch_dtype


def as_complex(x: torch.Tensor) -> torch.Tensor:
    """ONNX's [..., 1] (real) or [..., 2] (real, imaginary) as a torch tensor without that axis,
    in float32 at least (torch's CPU transforms have no half precision)."""
    x = x.to(torch.promote_types(x.dtype, torch.float32))
    return x[..., 0] if x.shape[-1] == 1 else torch.complex(x[..., 0], x[..., 1])


def as_real_pairs(y: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return torch.stack([y.real, y.imag], -1).to(dtype)


@kernel("DFT")
def _dft(node: Node) -> Kernel:
    """The DFT along `axis` (an attribute, default 1, before opset 20; an input, default -2,
    from then on) of length dft_length (zero-padded or cut); onesided keeps the first
    n/2 + 1 frequencies, and its inverse reads them as a real signal's."""
    inverse, onesided = node.attr("inverse", 0), node.attr("onesided", 0)
    axis_attr = node.attr("axis", 1) if opset(node) < 20 else None

    def run(x, dft_length=None, axis=None):
        a = (axis_attr if axis_attr is not None else (-2 if axis is None else int(axis))) % x.dim()
        n = int(dft_length) if dft_length is not None else \
            (2 * (x.shape[a] - 1) if inverse and onesided else x.shape[a])
        signal = as_complex(x)
        if inverse and onesided:
            return torch.fft.irfft(signal, n, dim=a).unsqueeze(-1).to(x.dtype)
        y = (torch.fft.ifft if inverse else torch.fft.fft)(signal, n, dim=a)
        if onesided:
            y = y.narrow(a, 0, n // 2 + 1)
        return as_real_pairs(y, x.dtype)
    return run


@kernel("STFT")
def _stft(node: Node) -> Kernel:
    """[batch, frames, bins, 2]: the DFT of each frame_length-long frame, frame_step apart,
    times the window; onesided (the default) keeps frame_length/2 + 1 bins."""
    onesided = node.attr("onesided", 1)

    def run(x, frame_step, window=None, frame_length=None):
        n = int(frame_length) if frame_length is not None else \
            (window.shape[0] if window is not None else x.shape[1])
        frames = as_complex(x).unfold(1, n, int(frame_step))        # [batch, frames, n]
        if window is not None:
            frames = frames * window
        y = torch.fft.fft(frames, n, dim=-1)
        return as_real_pairs(y[..., : n // 2 + 1] if onesided else y, x.dtype)
    return run


# ---- windows --------------------------------------------------------------------------------
# w[i] = Σ_k a_k·cos(2πk·i / N), N the size (periodic) or the size - 1 (symmetric)
_WINDOWS = {"HannWindow": (0.5, -0.5), "HammingWindow": (25 / 46, -21 / 46),
            "BlackmanWindow": (0.42, -0.5, 0.08)}


@kernel(*_WINDOWS)
def _window(node: Node) -> Kernel:
    coefficients, periodic = _WINDOWS[node.op_type], node.attr("periodic", 1)
    out = torch_dtype(node.attr("output_datatype", 1))

    def run(size):
        n = int(size)
        i = torch.arange(n, dtype=torch.float64) * (2 * math.pi / (n if periodic else n - 1))
        return sum(a * torch.cos(k * i) for k, a in enumerate(coefficients)).to(out)
    return run


def _mel(hertz: float) -> float:
    return 2595 * np.log1p(hertz / 700) / np.log(10)


@kernel("MelWeightMatrix")
def _mel_weight_matrix(node: Node) -> Kernel:
    """[dft_length/2 + 1, num_mel_bins]: triangular filters spaced evenly on the mel scale
    between the edge frequencies, on the DFT's bins (integer bin edges, as the spec's
    reference)."""
    out = torch_dtype(node.attr("output_datatype", 1))

    def run(num_mel_bins, dft_length, sample_rate, lower_hertz, upper_hertz):
        bins, n_fft, rate = int(num_mel_bins), int(dft_length), int(sample_rate)
        low, high = _mel(float(lower_hertz)), _mel(float(upper_hertz))
        points = np.arange(bins + 2) * ((high - low) / (bins + 2)) + low
        edges = (((n_fft + 1) * (700 * np.expm1(points / 2595 * np.log(10)))) // rate).astype(int)
        w = np.zeros((n_fft // 2 + 1, bins))
        for m in range(bins):
            left, centre, right = edges[m], edges[m + 1], edges[m + 2]
            if centre == left:
                w[centre, m] = 1
            else:
                w[left:centre + 1, m] = (np.arange(left, centre + 1) - left) / (centre - left)
            if right > centre:
                w[centre:right, m] = (right - np.arange(centre, right)) / (right - centre)
        return torch.from_numpy(w).to(out)
    return run
