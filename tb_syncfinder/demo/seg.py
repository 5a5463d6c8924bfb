"""Demo workload 2: a small per-pixel segmentation model trained on generated masks.

``baseline_loss`` is written the way segmentation losses often are: it ignores background
pixels with ``torch.nonzero``, counts the classes present with ``torch.unique`` and selects
foreground logits with a boolean mask. Each of these produces a tensor whose size depends on
the data, so on a GPU the host must wait for the GPU to learn that size: three syncs per step.

``optimized_loss`` computes the same value with fixed shapes only: ``CrossEntropyLoss`` with
``ignore_index`` for the background, a class count by ``scatter_add_`` into a fixed-size
tensor (``torch.bincount`` and ``torch.unique`` both read a size back on CUDA), and
``torch.where`` instead of the boolean mask. Nothing is read back, so nothing waits.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

NUM_CLASSES = 5
BACKGROUND = 0  # label of the pixels the loss ignores
ENTROPY_WEIGHT = 0.01


@dataclass(frozen=True)
class SegSize:
    batch_size: int
    image_size: int
    channels: int


SIZES = {
    "tiny": SegSize(batch_size=2, image_size=16, channels=4),
    "small": SegSize(batch_size=8, image_size=64, channels=16),
}


class SmallSegNet(nn.Module):
    """A few conv layers that keep the resolution and predict one class per pixel."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(3, channels, kernel_size=3, padding=1),
            nn.ReLU(),
            nn.Conv2d(channels, channels, kernel_size=3, padding=1),
            nn.ReLU(),
        )
        self.head = nn.Conv2d(channels, NUM_CLASSES, kernel_size=1)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(images))


def make_batch(
    size: SegSize, index: int, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    """Generated images and label maps (about half background), made on the device: no
    host-to-device copy, and ``torch.where`` rather than a masked assignment."""
    generator = torch.Generator(device=device).manual_seed(index)
    shape = (size.batch_size, size.image_size, size.image_size)
    images = torch.randn((shape[0], 3, *shape[1:]), generator=generator, device=device)
    labels = torch.randint(1, NUM_CLASSES, shape, generator=generator, device=device)
    is_background = torch.rand(shape, generator=generator, device=device) < 0.5
    return images, torch.where(is_background, BACKGROUND, labels)


def baseline_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Cross entropy over foreground pixels, scaled by the classes present, plus an entropy
    penalty on foreground pixels: written with data-dependent shapes (three syncs)."""
    flat_logits = logits.permute(0, 2, 3, 1).reshape(-1, NUM_CLASSES)
    flat_labels = labels.reshape(-1)
    present = torch.unique(flat_labels)  # sync: unique
    foreground = torch.nonzero(flat_labels != BACKGROUND).squeeze(1)  # sync: nonzero
    loss = F.cross_entropy(
        flat_logits.index_select(0, foreground), flat_labels.index_select(0, foreground)
    )
    loss = loss * (NUM_CLASSES / present.numel())
    fg_logits = flat_logits[flat_labels != BACKGROUND]  # sync: mask
    fg_log_probs = fg_logits.log_softmax(dim=1)
    entropy = -(fg_log_probs.exp() * fg_log_probs).sum(dim=1).mean()
    return loss + ENTROPY_WEIGHT * entropy


def optimized_loss(
    logits: torch.Tensor, labels: torch.Tensor, criterion: nn.CrossEntropyLoss
) -> torch.Tensor:
    """The same value as ``baseline_loss`` with fixed shapes only: no sync."""
    flat_logits = logits.permute(0, 2, 3, 1).reshape(-1, NUM_CLASSES)
    flat_labels = labels.reshape(-1)
    counts = torch.zeros(NUM_CLASSES, device=labels.device, dtype=torch.long)
    counts.scatter_add_(0, flat_labels, torch.ones_like(flat_labels))
    present_count = (counts > 0).sum()
    loss = criterion(flat_logits, flat_labels)  # ignore_index=BACKGROUND skips background
    loss = loss * (NUM_CLASSES / present_count)
    is_fg = flat_labels != BACKGROUND
    log_probs = flat_logits.log_softmax(dim=1)
    pixel_entropy = -(log_probs.exp() * log_probs).sum(dim=1)
    fg_entropy = torch.where(is_fg, pixel_entropy, torch.zeros_like(pixel_entropy))
    entropy = fg_entropy.sum() / is_fg.sum()
    return loss + ENTROPY_WEIGHT * entropy


def _setup(device: torch.device, size: SegSize):
    torch.manual_seed(0)
    model = SmallSegNet(size.channels).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    return model, optimizer


def baseline_step(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    images: torch.Tensor,
    labels: torch.Tensor,
) -> torch.Tensor:
    with torch.profiler.record_function("forward"):
        logits = model(images)
    with torch.profiler.record_function("loss"):
        loss = baseline_loss(logits, labels)
    with torch.profiler.record_function("backward_step"):
        optimizer.zero_grad(set_to_none=True)
        # The boolean mask's gradient (IndexBackward0) runs nonzero on the mask again.
        loss.backward()  # sync: mask_backward
        optimizer.step()
    return loss.detach()


def optimized_step(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    images: torch.Tensor,
    labels: torch.Tensor,
    criterion: nn.CrossEntropyLoss,
) -> torch.Tensor:
    with torch.profiler.record_function("forward"):
        logits = model(images)
    with torch.profiler.record_function("loss"):
        loss = optimized_loss(logits, labels, criterion)
    with torch.profiler.record_function("backward_step"):
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    return loss.detach()


def train_baseline(
    device: torch.device, size: SegSize, steps: int, on_step: Callable[[], None]
) -> None:
    model, optimizer = _setup(device, size)
    for step in range(steps):
        images, labels = make_batch(size, step, device)
        baseline_step(model, optimizer, images, labels)
        on_step()


def train_optimized(
    device: torch.device, size: SegSize, steps: int, on_step: Callable[[], None]
) -> None:
    model, optimizer = _setup(device, size)
    criterion = nn.CrossEntropyLoss(ignore_index=BACKGROUND)
    for step in range(steps):
        images, labels = make_batch(size, step, device)
        optimized_step(model, optimizer, images, labels, criterion)
        on_step()


# Appended, not in SIZES above: the bundled GPU traces name lines of this file, so existing
# lines keep their numbers (tests/test_bundled_gpu_traces.py checks it).
# "large": the same kernel launches per step as "small" (the batches are made on the device),
# about 1800 times the arithmetic (0.95 TFLOP per training step instead of 0.5 GFLOP, torch's
# FlopCounterMode) and 16 x 256 x 256 pixels for the loss: on an H100 the step is bound by the
# GPU, not by Python. Far too slow for a CPU.
SIZES["large"] = SegSize(batch_size=16, image_size=256, channels=128)
