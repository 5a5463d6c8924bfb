"""A two-rank data-parallel loop for checking the job-level saving (issue 17): gloo over CUDA
tensors, both ranks on one GPU (NCCL refuses two ranks on one device).

Each rank makes its batch on the host (the data pipeline), runs an MLP step on the GPU and
all-reduces the step's statistics (loss and gradient norm, for logging and for clipping by
the global norm) without waiting: the reduction is waited for in the next step, after the
host has made that step's batch, so that the host's work overlaps the GPU's. The ranks are
coupled through that all-reduce: a rank that falls behind makes the other wait in
``Work.wait()``.

Variants: ``baseline`` (the late rank reads its loss back every step, for logging),
``fixed`` (no rank reads back; the loss stays on the device), ``both`` (every rank reads
back, the same line on each). The syncing line carries a ``# sync:`` marker that the recorder
checks against ``torch.cuda.set_sync_debug_mode("warn")``.
"""

from __future__ import annotations

from collections.abc import Callable

import savings_workloads as wl
import torch
import torch.distributed as dist

VARIANTS = ("baseline", "fixed", "both")
LATE_RANK = 1
CLIP_NORM = 1.0

SIZES = {
    "tiny": wl.SIZES["tiny"],
    # The savings pairs' MLP (about 10 ms of tensor-core work per step on an H100) on the late
    # rank, so that its launches take a fraction of its GPU time even under the profiler and
    # a read-back waits for most of the step's GPU work, recorded or not.
    "gpu": wl.SIZES["gpu"],
}


# The other ranks make the same batch on the host but train on a sixteenth of it on the GPU.
# The ranks share one GPU: equal ranks would queue behind each other's kernels, and what a
# read-back costs would then be the GPU's contention, which a job of one GPU per rank does not
# have (docs/validation.md section 6).
LIGHT_BATCH_DIVISOR = 16


def gpu_batch(rank: int, size: wl.PairSize) -> int:
    if rank == LATE_RANK:
        return size.batch
    return max(1, size.batch // LIGHT_BATCH_DIVISOR)


def reads_back(variant: str, rank: int) -> bool:
    return variant == "both" or (variant == "baseline" and rank == LATE_RANK)


def grad_norm(model: torch.nn.Module) -> torch.Tensor:
    norms = [p.grad.float().norm() for p in model.parameters() if p.grad is not None]
    return torch.linalg.vector_norm(torch.stack(norms))


def train(
    variant: str,
    rank: int,
    device: torch.device,
    size: wl.PairSize,
    steps: int,
    on_step: Callable[[], None],
) -> list[float]:
    batch = gpu_batch(rank, size)
    model, optimizer = wl.mlp(device, size)
    generator = torch.Generator().manual_seed(rank)
    world = dist.get_world_size()
    history: list = []
    pending = None
    stats = None
    for _ in range(steps):
        x, labels = wl.host_batch(generator, size, size.host_passes)
        x, labels = x[:batch], labels[:batch]
        if pending is not None:
            pending.wait()  # the peers' statistics of the step before
            scale = CLIP_NORM / (stats[1] / world).clamp(min=CLIP_NORM)
            for p in model.parameters():
                p.grad.mul_(scale)
            optimizer.step()
        x, labels = wl.to_device(x, device), wl.to_device(labels, device)
        loss = wl.forward_loss(model, x, labels)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        stats = torch.stack([loss.detach().float(), grad_norm(model)])
        pending = dist.all_reduce(stats, async_op=True)
        if reads_back(variant, rank):
            history.append(loss.item())  # sync: item
        else:
            history.append(loss.detach())
        on_step()
    if pending is not None:
        pending.wait()
        optimizer.step()
    return [float(v) for v in history]
