"""A GPU-bound CTC training step, its loss called torch's own way (padded targets and lengths
on the GPU), cuDNN's (1-D int32 targets on the CPU, lengths as lists) or as the catalogue
advises (cuDNN's, ``reduction='none'`` and the mean on the device): unprofiled step times,
rounds alternated, and one profiled trace of each with stacks.

    python bench/ctc_pair.py --out DIR [--rounds 5] [--steps 30]

Writes ``DIR/ctc_WAY.pt.trace.json.gz`` for each way and ``DIR/ctc_pair.json`` (per-round
mean step times, ms).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import time
from pathlib import Path

import torch
import torch.nn.functional as F

T, N, C, S, WIDTH = 100, 32, 48, 30, 4096
WAYS = ("native", "cudnn", "advised")


def make_model(device: torch.device) -> torch.nn.Module:
    layers: list[torch.nn.Module] = []
    for _ in range(6):
        layers += [torch.nn.Linear(WIDTH, WIDTH), torch.nn.GELU()]
    return torch.nn.Sequential(*layers, torch.nn.Linear(WIDTH, C)).to(device)


def batch() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """What a loader gives: features, padded targets and target lengths, on the CPU."""
    target_lengths = torch.randint(S // 2, S + 1, (N,))
    targets = torch.randint(1, C, (N, S))
    return torch.randn(T, N, WIDTH), targets, target_lengths


def step(model, opt, features, targets, target_lengths, way: str, device) -> None:
    log_probs = model(features.to(device, non_blocking=True)).log_softmax(2)
    if way == "native":
        loss = F.ctc_loss(
            log_probs,
            targets.to(device),
            torch.full((N,), T, device=device),
            target_lengths.to(device),
        )  # the native way
    elif way == "cudnn":
        lengths = target_lengths.tolist()
        flat = torch.cat([t[:n] for t, n in zip(targets, lengths, strict=True)]).int()
        loss = F.ctc_loss(log_probs, flat, [T] * N, lengths)  # the cuDNN way
    else:  # the advice: cuDNN's way, no reduction, the mean on the device
        lengths = target_lengths.tolist()
        flat = torch.cat([t[:n] for t, n in zip(targets, lengths, strict=True)]).int()
        per_seq = F.ctc_loss(log_probs, flat, [T] * N, lengths, reduction="none")
        divide = target_lengths.to(device, non_blocking=True).clamp_min(1)
        loss = (per_seq / divide).mean()
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()


def timed(model, opt, batches, way: str, device, steps: int) -> float:
    torch.cuda.synchronize()
    start = time.perf_counter()
    for i in range(steps):
        step(model, opt, *batches[i % len(batches)], way, device)
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / steps * 1000


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=30)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    device = torch.device("cuda")
    torch.manual_seed(0)
    model = make_model(device)
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)
    # pin_memory=True in a loader: every tensor of the batch pinned (the advice's
    # non_blocking upload of the target lengths then waits for nothing).
    batches = [tuple(t.pin_memory() for t in batch()) for _ in range(4)]
    for way in WAYS:
        timed(model, opt, batches, way, device, 10)  # warm: kernels, cuBLAS, cuDNN
    times: dict[str, list[float]] = {way: [] for way in WAYS}
    for _ in range(args.rounds):
        for way in WAYS:
            times[way].append(round(timed(model, opt, batches, way, device, args.steps), 3))
    from torch.profiler import ProfilerActivity, profile, schedule

    for way in WAYS:
        path = args.out / f"ctc_{way}.pt.trace.json"
        with profile(
            activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA],
            schedule=schedule(wait=1, warmup=1, active=4, repeat=1),
            on_trace_ready=lambda prof, path=path: prof.export_chrome_trace(str(path)),
            with_stack=True,
        ) as prof:
            for i in range(6):
                step(model, opt, *batches[i % len(batches)], way, device)
                prof.step()
        subprocess.run(["gzip", "-f", str(path)], check=True)
    info = {"torch": torch.__version__, "gpu": torch.cuda.get_device_name(), "step_ms": times}
    (args.out / "ctc_pair.json").write_text(json.dumps(info, indent=1) + "\n")
    print(json.dumps(info))


if __name__ == "__main__":
    main()
