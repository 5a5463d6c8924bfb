"""Check on a CUDA GPU the fixes the catalogue advises and the lines the report names, in
two probes recorded with Python stacks, each beside the lines
``torch.cuda.set_sync_debug_mode("warn")`` warns at:

- ``advised_fixes``: each sync the catalogue has an operator's fix for, called at its own
  line (``# SYNC: name``), and the fix's code (the advice's ``after``) at the next lines
  (``# FIX: name``);
- ``tricky_lines``: Python shapes that once got a wrong line (a comprehension, a lambda, a
  property, a decorated function, ``nn.Module.forward``, ``3.0 in t``, ``str(t)``, a
  chained comparison, a method chain over lines, a custom ``backward``,
  ``unique_consecutive``, Python's ``any``, two reads on one line, ``while t:``), each read
  marked ``# READ: name``, and calls the report says read nothing on CUDA (a number
  assigned through a mask, ``std``, ``multinomial``, ``one_hot`` given ``num_classes``, a
  full ``max()``'s backward...) marked ``# NO READ: name``.

    python bench/record_advised_fixes.py --out DIR [--device cpu] [--probe NAME]

Writes ``DIR/NAME.pt.trace.json.gz`` for each probe (a schedule of one wait, one warm-up
and 2 active steps, so that no library sets itself up in them) and ``DIR/NAME.json``
(versions and the warned lines, ``file:line`` of the innermost frame in this file).
"""

from __future__ import annotations

import argparse
import functools
import json
import subprocess
import traceback
import warnings
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F


def probe(device: torch.device) -> None:
    n = 128
    a = torch.randn(n, n, device=device) + n * torch.eye(n, device=device)
    torch.linalg.matrix_power(a, -2)  # SYNC: matrix_power
    inv_a, info = torch.linalg.inv_ex(a)  # FIX: matrix_power
    torch.linalg.matrix_power(inv_a, 2)  # FIX: matrix_power
    x = torch.randn(64, 16, device=device)
    repeats = torch.full((64,), 3, device=device)
    total = 64 * 3  # known to the host
    x.repeat_interleave(repeats, dim=0)  # SYNC: repeat_interleave
    x.repeat_interleave(repeats, dim=0, output_size=total)  # FIX: repeat_interleave
    mean = torch.zeros(4, 256, device=device)
    std = torch.ones(256, device=device)
    torch.normal(mean, std.expand(4, 256))  # SYNC: normal
    noise = torch.randn(torch.broadcast_shapes(mean.shape, std.shape), device=device)  # FIX: normal
    (mean + std * noise).detach()  # FIX: normal
    policy = torch.distributions.Normal(mean, std, validate_args=False)
    policy.sample()  # SYNC: normal_sample
    policy.rsample().detach()  # FIX: normal_sample
    loss = torch.rand((), device=device) * 20
    if (loss > 10).any():  # SYNC: branch
        loss = loss.clamp(max=10)
    loss = loss.clamp(max=10)  # FIX: branch
    logits = torch.randn(512, 10, device=device)
    target = torch.randint(0, 11, (512,), device=device)
    target = torch.where(target == 10, 255, target)
    valid = target != 255
    F.cross_entropy(logits[valid], target[valid])  # SYNC: mask
    F.cross_entropy(logits, target, ignore_index=255)  # FIX: mask
    per_pixel = torch.rand(512, device=device)
    idx = torch.nonzero(valid)  # SYNC: nonzero
    per_pixel[idx[:, 0]].mean()
    torch.where(valid, per_pixel, 0.0).sum() / valid.sum().clamp_min(1)  # FIX: nonzero
    torch.unique(target)  # SYNC: unique
    flat = target.clamp(max=9).flatten().long()  # FIX: unique
    counts = torch.zeros(10, dtype=torch.long, device=flat.device)  # FIX: unique
    counts.scatter_add_(0, flat, torch.ones_like(flat))  # FIX: unique
    labels = torch.randint(0, 10, (512,), device=device)
    F.one_hot(labels)  # SYNC: one_hot
    F.one_hot(labels, num_classes=10)  # FIX: one_hot
    torch.histc(per_pixel, bins=64)  # SYNC: histc
    torch.histc(per_pixel, bins=64, min=0.0, max=1.0)  # FIX: histc
    torch.bincount(labels, minlength=10)  # SYNC: bincount
    counts = torch.zeros(10, dtype=torch.long, device=labels.device)  # FIX: bincount
    counts.scatter_add_(0, labels, torch.ones_like(labels))  # FIX: bincount
    pred = labels.clone()
    torch.equal(pred, labels)  # SYNC: equal
    (pred != labels).any()  # FIX: equal
    log_probs = torch.randn(50, 4, 20, device=device).log_softmax(2)
    ctc_targets = torch.randint(1, 20, (4, 10))
    lengths = torch.full((4,), 50, dtype=torch.long)
    target_lengths = torch.full((4,), 10, dtype=torch.long)
    on_device = ctc_targets.to(device), lengths.to(device), target_lengths.to(device)
    pinned_lengths = target_lengths.pin_memory() if device.type == "cuda" else target_lengths
    F.ctc_loss(log_probs, *on_device)  # SYNC: ctc_loss
    # A recording of 2026-11-27 marked CPU lengths as the fix: they wait 6 times, not 8.
    flat = ctc_targets.flatten().int()  # FIX: ctc_loss
    per_seq = F.ctc_loss(log_probs, flat, [50] * 4, [10] * 4, reduction="none")  # FIX: ctc_loss
    (per_seq / pinned_lengths.to(device, non_blocking=True).clamp_min(1)).mean()  # FIX: ctc_loss


class Gate(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.sum() > 0:  # READ: module_forward
            return x * 2
        return x


class Holder:
    def __init__(self, t: torch.Tensor) -> None:
        self.t = t

    @property
    def peak(self) -> float:
        return self.t.max().item()  # READ: property

    def total(self) -> float:
        return float(self.t.sum())  # READ: method


def logged(fn: Callable) -> Callable:
    @functools.wraps(fn)
    def inner(*args: object) -> object:
        return fn(*args)

    return inner


@logged
def decorated(t: torch.Tensor) -> float:
    return t.mean().item()  # READ: decorated


class Scale(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):  # noqa: ANN001, ANN205
        return x * 2

    @staticmethod
    def backward(ctx, g):  # noqa: ANN001, ANN205
        ctx.seen = g.abs().max().item()  # READ: custom_backward
        return g * 2


def tricky_lines(device: torch.device) -> None:
    torch.manual_seed(0)
    x = torch.randn(64, 32, device=device)
    step = 3
    [row.sum().item() for row in x[:3]]  # READ: comprehension
    (lambda t: t.norm().item())(x)  # READ: lambda

    def nested(t: torch.Tensor) -> float:
        return t.std().item()  # READ: nested

    nested(x)
    _peak = Holder(x).peak
    Holder(x).total()
    decorated(x)
    Gate()(x)
    lr = float(step)
    x * lr
    _hit = 3.0 in x  # READ: contains
    str(x[0, :2])  # READ: str
    t = x.abs().mean()
    if 0 < t < 1:  # READ: chain_compare
        pass
    flags = [step > 0, step > 1]
    ready = (x > -1e9).all()
    if any(flags):
        pass
    if ready:  # READ: tensor_truth
        pass
    # fmt: off
    (
        x.abs()
        .sum()
        .item()  # READ: method_chain
    )
    # fmt: on
    w = x.clone().requires_grad_(True)
    Scale.apply(w).pow(2).mean().backward()
    torch.unique_consecutive((x[0] > 0).long())  # READ: unique_consecutive
    if step < 0:
        torch.unique(x)
    f"loss {t.item():.3f}"  # READ: fstring
    x[0, 0].item(), x[0, 1].item()  # READ: two_on_one_line
    left = torch.tensor(3, device=device)
    while left > 0:  # READ: while_truth
        left = left - 1
    y = x.clone()
    y[y > 0] = 0  # NO READ: masked_fill_number
    y[x > 0] = t  # READ: masked_assign_tensor
    x.std() + x.var()  # NO READ: std_var
    torch.multinomial(torch.softmax(x[0], 0), 2)  # NO READ: multinomial
    torch._assert_async(t > -1e9)  # NO READ: assert_async
    labels = (x[0] * 2).abs().long().clamp(max=3)
    F.one_hot(labels, num_classes=4)  # NO READ: one_hot_num_classes
    torch.histc(x, bins=8, min=-4.0, max=4.0)  # NO READ: histc_range
    w2 = x.clone().requires_grad_(True)
    w2.max().backward()  # NO READ: max_backward
    w3 = x.clone().requires_grad_(True)
    w3.median().backward()  # NO READ: median_backward


PROBES: dict[str, Callable[[torch.device], None]] = {
    "advised_fixes": probe,
    "tricky_lines": tricky_lines,
}


def record(name: str, run: Callable[[torch.device], None], out: Path, device: torch.device) -> dict:
    sync = torch.cuda.synchronize if device.type == "cuda" else lambda: None
    run(device)  # libraries set up before anything is recorded
    sync()
    from torch.profiler import ProfilerActivity, profile, schedule

    path = out / f"{name}.pt.trace.json"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with profile(
        activities=activities,
        schedule=schedule(wait=1, warmup=1, active=2, repeat=1),
        on_trace_ready=lambda prof: prof.export_chrome_trace(str(path)),
        record_shapes=True,
        with_stack=True,
    ) as prof:
        for _ in range(4):
            run(device)
            sync()
            prof.step()
    subprocess.run(["gzip", "-f", str(path)], check=True)
    warned: list[str] = []
    here = Path(__file__).name

    def note(message, category, filename, lineno, file=None, line=None) -> None:  # noqa: ANN001
        # The innermost frame in this file, the line that called into torch: a warning
        # names the innermost Python frame, torch's own for torch.unique (a Python function).
        ours = [f for f in traceback.extract_stack()[:-1] if Path(f.filename).name == here]
        where = f"{here}:{ours[-1].lineno}" if ours else f"{Path(filename).name}:{lineno}"
        warned.append(f"{where} {str(message)[:120]}")

    if device.type == "cuda":
        torch.cuda.set_sync_debug_mode("warn")
        with warnings.catch_warnings():  # restores showwarning too
            warnings.simplefilter("always")
            warnings.showwarning = note
            run(device)
            sync()
        torch.cuda.set_sync_debug_mode(0)
    info = {
        "torch": torch.__version__,
        "gpu": torch.cuda.get_device_name() if device.type == "cuda" else "none",
        "warned": warned,
    }
    (out / f"{name}.json").write_text(json.dumps(info, indent=1) + "\n")
    return info


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--probe", choices=sorted(PROBES), action="append")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    for name in args.probe or PROBES:
        print(name, json.dumps(record(name, PROBES[name], args.out, torch.device(args.device))))


if __name__ == "__main__":
    main()
