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
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F

T, N, C, S = 50, 4, 20, 10


def variants(device: torch.device) -> tuple[torch.Tensor, dict[str, Callable[[], torch.Tensor]]]:
    """The log-probabilities, and each way of calling it on them, as a call that returns the
    loss."""
    log_probs = torch.randn(T, N, C, device=device).log_softmax(2).requires_grad_(True)
    targets_2d = torch.randint(1, C, (N, S), device=device)
    lengths = torch.full((N,), T, dtype=torch.long)
    target_lengths = torch.full((N,), S, dtype=torch.long)
    flat_cpu = targets_2d.cpu().flatten().int()
    pinned_lengths = target_lengths.pin_memory() if device.type == "cuda" else target_lengths
    varied = torch.tensor([T, T - 10, T - 5, T - 20])

    def advised(input_lengths: torch.Tensor) -> torch.Tensor:
        # The catalogue's advice: cuDNN's way, no reduction, the mean on the device.
        per_seq = F.ctc_loss(
            log_probs, flat_cpu, input_lengths.tolist(), target_lengths.tolist(), reduction="none"
        )
        return (per_seq / pinned_lengths.to(device, non_blocking=True).clamp_min(1)).mean()

    def call(*args: object, **kwargs: object) -> Callable[[], torch.Tensor]:
        return lambda: F.ctc_loss(log_probs, *args, **kwargs)

    return log_probs, {
        "device_lengths": call(targets_2d, lengths.to(device), target_lengths.to(device)),
        "cpu_lengths": call(targets_2d, lengths, target_lengths),
        "list_lengths": call(targets_2d, lengths.tolist(), target_lengths.tolist()),
        "cudnn_cpu_int32": call(flat_cpu, lengths.int(), target_lengths.int()),
        "cudnn_lists": call(flat_cpu, lengths.tolist(), target_lengths.tolist()),
        "cudnn_device_int32": call(
            flat_cpu.to(device), lengths.int().to(device), target_lengths.int().to(device)
        ),
        "cudnn_lists_sum": call(
            flat_cpu, lengths.tolist(), target_lengths.tolist(), reduction="sum"
        ),
        "advised": lambda: advised(lengths),
        "advised_inputs_varied": lambda: advised(varied),
        "native_inputs_varied": call(targets_2d, varied.to(device), target_lengths.to(device)),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--only", action="append", help="variants to run (default all)")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    device = torch.device("cuda")
    found = {}
    for name, call in variants(device)[1].items():
        if args.only and name not in args.only:
            continue
        try:
            call()  # warm: cuDNN and kernels set up
        except RuntimeError as error:  # a variant torch refuses (devices of its arguments)
            found[name] = {"error": str(error)[:200]}
            print(name, found[name], flush=True)
            continue
        for backward in (False, True):
            loss = call()
            if backward:
                loss.backward()
            torch.cuda.synchronize()
            torch.cuda.set_sync_debug_mode("warn")
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                loss = call()
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
            call().backward()
            torch.cuda.synchronize()
        prof.export_chrome_trace(str(path))
        subprocess.run(["gzip", "-f", str(path)], check=True)
        found[name]["cudnn"] = any(e.name == "aten::_cudnn_ctc_loss" for e in prof.events())
    # The advice against what it replaces, on the GPU: cuDNN's loss and gradient.
    log_probs, calls = variants(device)
    same: dict[str, dict[str, float]] = {}
    for advised, replaced in (
        ("advised", "device_lengths"),
        ("advised_inputs_varied", "native_inputs_varied"),
    ):
        results = []
        for name in (advised, replaced):
            loss = calls[name]()
            (grad,) = torch.autograd.grad(loss, log_probs)
            results.append((loss.detach(), grad))
        (loss_a, grad_a), (loss_r, grad_r) = results
        same[advised] = {
            "loss": float(loss_a),
            "replaced_loss": float(loss_r),
            "grad_max_diff": float((grad_a - grad_r).abs().max()),
        }
        print(advised, same[advised], flush=True)
    info = {
        "torch": torch.__version__,
        "gpu": torch.cuda.get_device_name(),
        "waits": found,
        "advice_against_replaced": same,
    }
    (args.out / "ctc_loss.json").write_text(json.dumps(info, indent=1) + "\n")


if __name__ == "__main__":
    main()
