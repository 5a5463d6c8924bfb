"""Check the fixes the catalogue advises on a CUDA GPU: each sync the catalogue has an
operator's fix for, called at its own line, and the fix's code (the advice's ``after``)
at the next, in one trace with Python stacks, plus the lines
``torch.cuda.set_sync_debug_mode("warn")`` warns at.

    python bench/record_advised_fixes.py --out DIR [--device cpu]

Writes ``DIR/advised_fixes.pt.trace.json.gz`` (a schedule of one wait, one warm-up and 2
active steps, so that no library sets itself up in them) and ``DIR/advised_fixes.json``
(versions and the warned lines, ``file:line`` of the innermost frame in this file). Each
call carries a marker, ``# SYNC: name`` or ``# FIX: name``, that the tests read the lines
from.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import traceback
import warnings
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
    mean = torch.zeros(256, device=device)
    std = torch.ones(256, device=device)
    torch.normal(mean, std)  # SYNC: normal
    mean + std * torch.randn_like(std)  # FIX: normal
    loss = torch.rand((), device=device) * 20
    if (loss > 10).any():  # SYNC: branch
        loss = loss.clamp(max=10)
    loss = torch.where(loss > 10, loss.clamp(max=10), loss)  # FIX: branch
    logits = torch.randn(512, 10, device=device)
    target = torch.randint(0, 11, (512,), device=device)
    target = torch.where(target == 10, 255, target)
    valid = target != 255
    F.cross_entropy(logits[valid], target[valid])  # SYNC: mask
    F.cross_entropy(logits, target, ignore_index=255)  # FIX: mask
    torch.nonzero(valid)  # SYNC: nonzero
    valid.float().sum().clamp_min(1)  # FIX: nonzero
    torch.unique(target)  # SYNC: unique
    counts = torch.zeros(10, dtype=torch.long, device=device)  # FIX: unique
    counts.scatter_add_(0, target.clamp(max=9), valid.long())  # FIX: unique


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--device", default="cuda")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    device = torch.device(args.device)
    sync = torch.cuda.synchronize if device.type == "cuda" else lambda: None
    probe(device)  # libraries set up before anything is recorded
    sync()
    from torch.profiler import ProfilerActivity, profile, schedule

    path = args.out / "advised_fixes.pt.trace.json"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with profile(
        activities=activities,
        schedule=schedule(wait=1, warmup=1, active=2, repeat=1),
        on_trace_ready=lambda prof: prof.export_chrome_trace(str(path)),
        record_shapes=True,
        with_stack=True,
    ) as prof:
        for _ in range(4):
            probe(device)
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
        with warnings.catch_warnings():
            warnings.simplefilter("always")
            warnings.showwarning = note
            probe(device)
        torch.cuda.set_sync_debug_mode(0)
    info = {
        "torch": torch.__version__,
        "gpu": torch.cuda.get_device_name() if device.type == "cuda" else "none",
        "warned": warned,
    }
    (args.out / "advised_fixes.json").write_text(json.dumps(info, indent=1) + "\n")
    print(json.dumps(info))


if __name__ == "__main__":
    main()
