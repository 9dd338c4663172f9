"""Small PyTorch models with a loss, shared by the benchmarks, the demo and the notebooks.

Each entry of ZOO makes a model and a forward that returns its scalar loss:

    model, forward = refgrad.zoo.ZOO["transformer"](dtype=torch.float32, seed=0)
    loss = forward(model)          # a fresh forward each call, same inputs every time

The inputs are drawn once, from `seed`, when the entry is made; forward() reuses
them, so two forwards of the same model give the same loss.
"""
from __future__ import annotations

from typing import Callable

import torch
from torch import nn

Forward = Callable[[nn.Module], torch.Tensor]


def mlp(dtype: torch.dtype = torch.float32, seed: int = 0) -> tuple[nn.Module, Forward]:
    """Linear-Tanh-Linear on a batch of 64, mean squared error."""
    generator = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(16, 64), nn.Tanh(), nn.Linear(64, 4)).to(dtype)
    x = torch.randn(64, 16, generator=generator, dtype=dtype)
    target = torch.randn(64, 4, generator=generator, dtype=dtype)
    return model, lambda m: nn.functional.mse_loss(m(x), target)


def cnn(dtype: torch.dtype = torch.float32, seed: int = 0) -> tuple[nn.Module, Forward]:
    """Conv2d, BatchNorm2d (train mode), ReLU, MaxPool2d, AdaptiveAvgPool2d, Linear; cross entropy."""
    generator = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    model = nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 10)).to(dtype)
    model.train()
    images = torch.randn(8, 3, 16, 16, generator=generator, dtype=dtype)
    labels = torch.randint(0, 10, (8,), generator=generator)
    return model, lambda m: nn.functional.cross_entropy(m(images), labels)


def transformer(dtype: torch.dtype = torch.float32, seed: int = 0) -> tuple[nn.Module, Forward]:
    """nn.TransformerEncoderLayer (d_model 32, 4 heads, dropout 0) on (4, 10, 32); mean of squares."""
    generator = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    model = nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True).to(dtype)
    x = torch.randn(4, 10, 32, generator=generator, dtype=dtype)
    return model, lambda m: (m(x) ** 2).mean()


def embedding(dtype: torch.dtype = torch.float32, seed: int = 0) -> tuple[nn.Module, Forward]:
    """nn.Embedding looked up, softmax over features, cumsum over the sequence, a weighted sum."""
    generator = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    model = nn.Embedding(100, 16).to(dtype)
    tokens = torch.randint(0, 100, (8, 12), generator=generator)
    weights = torch.linspace(-1, 1, 16, dtype=dtype)
    return model, lambda m: (m(tokens).softmax(-1).cumsum(1) * weights).sum()


ZOO: dict[str, Callable[..., tuple[nn.Module, Forward]]] = {
    "mlp": mlp, "cnn": cnn, "transformer": transformer, "embedding": embedding,
}


# Mid-size models, for the benchmarks (bench/bench_models.py): big enough that the
# kernels, not the per-instruction overhead, decide the time.

def mlp_wide(dtype: torch.dtype = torch.float32, seed: int = 0) -> tuple[nn.Module, Forward]:
    """Linear(1024, 1024)-GELU-Linear(1024, 1024) on a batch of 256, mean squared error."""
    generator = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(1024, 1024), nn.GELU(), nn.Linear(1024, 1024)).to(dtype)
    x = torch.randn(256, 1024, generator=generator, dtype=dtype)
    target = torch.randn(256, 1024, generator=generator, dtype=dtype)
    return model, lambda m: nn.functional.mse_loss(m(x), target)


def cnn_mid(dtype: torch.dtype = torch.float32, seed: int = 0) -> tuple[nn.Module, Forward]:
    """Two Conv2d 3x3-BatchNorm2d-ReLU-MaxPool2d blocks (3 -> 16 -> 32 channels) on 16x3x32x32 images,
    AdaptiveAvgPool2d, Linear; cross entropy."""
    generator = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    model = nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 10)).to(dtype)
    model.train()
    images = torch.randn(16, 3, 32, 32, generator=generator, dtype=dtype)
    labels = torch.randint(0, 10, (16,), generator=generator)
    return model, lambda m: nn.functional.cross_entropy(m(images), labels)


def transformer_mid(dtype: torch.dtype = torch.float32, seed: int = 0) -> tuple[nn.Module, Forward]:
    """Four pre-norm nn.TransformerEncoderLayer (d_model 256, 8 heads, 1024 feed-forward, dropout 0) on
    8 sequences of 128 tokens; mean of squares."""
    generator = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    layer = nn.TransformerEncoderLayer(256, 8, 1024, dropout=0.0, batch_first=True, norm_first=True)
    model = nn.TransformerEncoder(layer, 4, enable_nested_tensor=False).to(dtype)
    x = torch.randn(8, 128, 256, generator=generator, dtype=dtype)
    return model, lambda m: (m(x) ** 2).mean()


MID_SIZE: dict[str, Callable[..., tuple[nn.Module, Forward]]] = {
    "mlp_wide": mlp_wide, "cnn_mid": cnn_mid, "transformer_mid": transformer_mid,
}
