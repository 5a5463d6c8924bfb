"""A GPU-bound training step that also computes per-step metrics the way that reads back
(``torch.equal``, ``torch.bincount``, ``F.one_hot`` without ``num_classes``, ``torch.histc``
without a range) or the way the catalogue advises (each read-free): unprofiled step times,
rounds alternated, and one profiled trace of each with stacks.

    python bench/metrics_pair.py --out DIR [--rounds 5] [--steps 30]

Writes ``DIR/metrics_reads.pt.trace.json.gz``, ``DIR/metrics_fixed.pt.trace.json.gz`` and
``DIR/metrics_pair.json`` (per-round mean step times, ms).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import time
from pathlib import Path

import torch
import torch.nn.functional as F

BATCH, WIDTH, CLASSES = 4096, 4096, 10


def make_model(device: torch.device) -> torch.nn.Module:
    layers: list[torch.nn.Module] = []
    for _ in range(6):
        layers += [torch.nn.Linear(WIDTH, WIDTH), torch.nn.GELU()]
    return torch.nn.Sequential(*layers, torch.nn.Linear(WIDTH, CLASSES)).to(device)


def metrics_reads(logits, labels, stats) -> None:
    pred = logits.argmax(1)
    stats["same"] += torch.equal(pred, labels)  # reads back
    stats["counts"] += torch.bincount(pred, minlength=CLASSES)  # reads back
    onehot = F.one_hot(pred)  # reads back: as wide as the largest class seen
    stats["onehot"][: onehot.shape[1]] += onehot.sum(0)
    stats["hist"] += torch.histc(logits.detach().float(), bins=16)  # reads back


def metrics_fixed(logits, labels, stats) -> None:
    pred = logits.argmax(1)
    stats["same"] += ~(pred != labels).any()
    counts = torch.zeros(CLASSES, dtype=torch.long, device=pred.device)
    stats["counts"] += counts.scatter_add_(0, pred, torch.ones_like(pred))
    stats["onehot"] += F.one_hot(pred, num_classes=CLASSES).sum(0)
    stats["hist"] += torch.histc(logits.detach().float(), bins=16, min=-4.0, max=4.0)


def run(way: str, device: torch.device):
    torch.manual_seed(0)
    model = make_model(device)
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)
    features = torch.randn(BATCH, WIDTH, device=device)
    labels = torch.randint(0, CLASSES, (BATCH,), device=device)
    stats = {
        "same": torch.zeros((), dtype=torch.long, device=device),
        "counts": torch.zeros(CLASSES, dtype=torch.long, device=device),
        "onehot": torch.zeros(CLASSES, dtype=torch.long, device=device),
        "hist": torch.zeros(16, device=device),
    }
    metrics = metrics_reads if way == "reads" else metrics_fixed

    def step() -> None:
        logits = model(features)
        loss = F.cross_entropy(logits, labels)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        metrics(logits, labels, stats)

    return step


def timed(step, steps: int) -> float:
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(steps):
        step()
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
    steps = {way: run(way, device) for way in ("reads", "fixed")}
    for step in steps.values():
        timed(step, 10)  # warm: kernels, cuBLAS
    times: dict[str, list[float]] = {way: [] for way in steps}
    for _ in range(args.rounds):
        for way, step in steps.items():
            times[way].append(round(timed(step, args.steps), 3))
    from torch.profiler import ProfilerActivity, profile, schedule

    for way, step in steps.items():
        path = args.out / f"metrics_{way}.pt.trace.json"
        with profile(
            activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA],
            schedule=schedule(wait=1, warmup=1, active=4, repeat=1),
            on_trace_ready=lambda prof, path=path: prof.export_chrome_trace(str(path)),
            with_stack=True,
        ) as prof:
            for _ in range(6):
                step()
                prof.step()
        subprocess.run(["gzip", "-f", str(path)], check=True)
    info = {"torch": torch.__version__, "gpu": torch.cuda.get_device_name(), "step_ms": times}
    (args.out / "metrics_pair.json").write_text(json.dumps(info, indent=1) + "\n")
    print(json.dumps(info))


if __name__ == "__main__":
    main()
