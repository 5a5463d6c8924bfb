"""Demo workload 1: a small CNN classifier trained on generated images.

``train_baseline`` is written the way many training loops are: data loaded with
``num_workers=0`` into pageable memory, copied with a blocking ``.to(device)``, and the loss
read back with ``loss.item()`` on every step. On a GPU each ``.item()`` makes the host wait
until every queued kernel has finished, and the GPU then idles while Python issues the next
step.

``train_optimized`` does the same training but keeps the running loss on the device and reads
it once after the loop; batches come from pinned memory (when CUDA is there) and are copied
with ``non_blocking=True``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

NUM_CLASSES = 10


@dataclass(frozen=True)
class CnnSize:
    batch_size: int
    image_size: int
    channels: int  # width of the first conv layer


SIZES = {
    "tiny": CnnSize(batch_size=4, image_size=16, channels=4),
    "small": CnnSize(batch_size=32, image_size=64, channels=16),
}


class RandomImages(Dataset):
    """Generated RGB images and class labels: no download, same data for every run."""

    def __init__(self, count: int, image_size: int, seed: int = 0) -> None:
        self.count = count
        self.image_size = image_size
        self.seed = seed

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        generator = torch.Generator().manual_seed(self.seed + index)
        image = torch.randn(3, self.image_size, self.image_size, generator=generator)
        label = torch.randint(0, NUM_CLASSES, (), generator=generator)
        return image, label


class SmallCnn(nn.Module):
    def __init__(self, channels: int) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, channels, kernel_size=3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(channels, 2 * channels, kernel_size=3, padding=1),
            nn.ReLU(),
            nn.AdaptiveAvgPool2d(1),
        )
        self.classifier = nn.Linear(2 * channels, NUM_CLASSES)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.classifier(torch.flatten(self.features(images), 1))


def _setup(device: torch.device, size: CnnSize, steps: int, pin_memory: bool):
    torch.manual_seed(0)
    model = SmallCnn(size.channels).to(device)
    # SGD, not Adam: Adam's step counter is read back on the host in some torch versions,
    # which would add a sync that is not the one this demo is about.
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    dataset = RandomImages(steps * size.batch_size, size.image_size)
    loader = DataLoader(dataset, batch_size=size.batch_size, num_workers=0, pin_memory=pin_memory)
    return model, optimizer, loader, nn.CrossEntropyLoss()


def baseline_step(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    criterion: nn.Module,
    images: torch.Tensor,
    labels: torch.Tensor,
    device: torch.device,
) -> float:
    """One training step as often written: blocking copies, and the loss read every step."""
    with torch.profiler.record_function("data_to_device"):
        images = images.to(device)  # sync: h2d (pageable memory, blocking copy)
        labels = labels.to(device)  # sync: h2d (pageable memory, blocking copy)
    with torch.profiler.record_function("forward_loss"):
        loss = criterion(model(images), labels)
    with torch.profiler.record_function("backward_step"):
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    with torch.profiler.record_function("log_loss"):
        return loss.item()  # sync: item


def optimized_step(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    criterion: nn.Module,
    images: torch.Tensor,
    labels: torch.Tensor,
    device: torch.device,
) -> torch.Tensor:
    """The same step without waiting: non-blocking copies, the loss stays on the device."""
    with torch.profiler.record_function("data_to_device"):
        images = images.to(device, non_blocking=True)
        labels = labels.to(device, non_blocking=True)
    with torch.profiler.record_function("forward_loss"):
        loss = criterion(model(images), labels)
    with torch.profiler.record_function("backward_step"):
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    return loss.detach()


def train_baseline(
    device: torch.device, size: CnnSize, steps: int, on_step: Callable[[], None]
) -> float:
    """The slow loop: pageable memory, blocking copies and ``loss.item()`` every step."""
    model, optimizer, loader, criterion = _setup(device, size, steps, pin_memory=False)
    total_loss = 0.0
    for images, labels in loader:
        total_loss += baseline_step(model, optimizer, criterion, images, labels, device)
        on_step()
    return total_loss / max(steps, 1)


def train_optimized(
    device: torch.device, size: CnnSize, steps: int, on_step: Callable[[], None]
) -> float:
    """The same training without syncs: pinned non-blocking copies, loss kept on the device."""
    pin_memory = device.type == "cuda"  # pinning needs CUDA; on a CPU it only costs time
    model, optimizer, loader, criterion = _setup(device, size, steps, pin_memory=pin_memory)
    total_loss = torch.zeros((), device=device)
    for images, labels in loader:
        with torch.profiler.record_function("log_loss"):
            total_loss += optimized_step(model, optimizer, criterion, images, labels, device)
        on_step()
    # One read after the loop (outside the profiled steps) instead of one per step.
    return total_loss.item() / max(steps, 1)


# Appended, not in SIZES above: the bundled GPU traces name lines of this file, so existing
# lines keep their numbers (tests/test_bundled_gpu_traces.py checks it).
# "large" keeps the host's work per step of "small" (the same 32 images of 64x64 generated and
# copied, the same kernel launches) and gives the GPU about 1850 times the arithmetic
# (2.1 TFLOP per training step instead of 1.1 GFLOP, torch's FlopCounterMode): on an H100 the
# step is then bound by the GPU, not by Python, and the syncs' cost shows in the step time.
# Far too slow for a CPU.
SIZES["large"] = CnnSize(batch_size=32, image_size=64, channels=768)
