"""Which ways of calling ``F.ctc_loss`` on CUDA wait for the GPU: each variant run under
``torch.cuda.set_sync_debug_mode("warn")`` (warnings counted per call) and profiled with
stacks into ``DIR/ctc_VARIANT.pt.trace.json.gz``.

    python bench/check_ctc_loss.py --out DIR
"""

from __future__ import annotations

import argparse
import json
import subprocess
import warnings
from pathlib import Path

import torch
import torch.nn.functional as F

T, N, C, S = 50, 4, 20, 10


def variants(device: torch.device) -> dict[str, tuple]:
    log_probs = torch.randn(T, N, C, device=device).log_softmax(2).requires_grad_(True)
    targets_2d = torch.randint(1, C, (N, S), device=device)
    lengths = torch.full((N,), T, dtype=torch.long)
    target_lengths = torch.full((N,), S, dtype=torch.long)
    flat_cpu = targets_2d.cpu().flatten().int()
    return {
        "device_lengths": (log_probs, targets_2d, lengths.to(device), target_lengths.to(device)),
        "cpu_lengths": (log_probs, targets_2d, lengths, target_lengths),
        "list_lengths": (log_probs, targets_2d, lengths.tolist(), target_lengths.tolist()),
        "cudnn_cpu_int32": (log_probs, flat_cpu, lengths.int(), target_lengths.int()),
        "cudnn_lists": (log_probs, flat_cpu, lengths.tolist(), target_lengths.tolist()),
        "cudnn_device_int32": (
            log_probs,
            flat_cpu.to(device),
            lengths.int().to(device),
            target_lengths.int().to(device),
        ),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--only", action="append", help="variants to run (default all)")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    device = torch.device("cuda")
    found = {}
    for name, call in variants(device).items():
        if args.only and name not in args.only:
            continue
        try:
            F.ctc_loss(*call)  # warm: cuDNN and kernels set up
        except RuntimeError as error:  # a variant torch refuses (devices of its arguments)
            found[name] = {"error": str(error)[:200]}
            print(name, found[name], flush=True)
            continue
        for backward in (False, True):
            loss = F.ctc_loss(*call)
            if backward:
                loss.backward()
            torch.cuda.synchronize()
            torch.cuda.set_sync_debug_mode("warn")
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                loss = F.ctc_loss(*call)
                forward_waits = len(caught)
                if backward:
                    loss.backward()
            torch.cuda.set_sync_debug_mode(0)
            torch.cuda.synchronize()
            key = name + ("+backward" if backward else "")
            found[key] = {"forward_waits": forward_waits, "waits": len(caught)}
            print(key, found[key], flush=True)
        from torch.profiler import ProfilerActivity, profile

        path = args.out / f"ctc_{name}.pt.trace.json"
        with profile(
            activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], with_stack=True
        ) as prof:
            F.ctc_loss(*call).backward()
            torch.cuda.synchronize()
        prof.export_chrome_trace(str(path))
        subprocess.run(["gzip", "-f", str(path)], check=True)
    info = {"torch": torch.__version__, "gpu": torch.cuda.get_device_name(), "waits": found}
    (args.out / "ctc_loss.json").write_text(json.dumps(info, indent=1) + "\n")


if __name__ == "__main__":
    main()
