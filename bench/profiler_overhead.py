"""The profiler's own cost per recorded host event: what a profiled host-bound step takes
beyond the same step unprofiled, over the host events the trace records per step.

    python bench/profiler_overhead.py [--device cuda|cpu] [--steps 50] [--rounds 3] [--json OUT]

The loop is launch-bound on purpose (a small MLP at a small batch: the host's Python and
launches bound each step), so every microsecond the profiler adds to the host shows in the
step time. Three settings: ``with_stack`` and ``record_shapes`` (how the demo and most users
profile), ``record_shapes`` only, and neither. For each: the median unprofiled step (timed
between two device synchronizations), the median profiled ``ProfilerStep`` span, the host
events recorded per step (cpu_op, python_function, cuda_runtime, cuda_driver,
user_annotation) and their ratio: microseconds of overhead per recorded event. The engine's
estimate of the profiler's overhead (``profiler_overhead_per_step_us``) takes this figure.
"""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
from torch import nn

HOST_CATEGORIES = {"cpu_op", "python_function", "cuda_runtime", "cuda_driver", "user_annotation"}
SETTINGS = {
    "stack+shapes": {"with_stack": True, "record_shapes": True},
    "shapes": {"with_stack": False, "record_shapes": True},
    "plain": {"with_stack": False, "record_shapes": False},
}


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _loop(device: torch.device, steps: int, on_step) -> None:
    torch.manual_seed(0)
    model = nn.Sequential(*[nn.Sequential(nn.Linear(64, 64), nn.GELU()) for _ in range(8)])
    model = model.to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(64, 64, device=device)
    target = torch.randn(64, 64, device=device)
    for _ in range(steps):
        loss = nn.functional.mse_loss(model(x), target)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        on_step()


def unprofiled_ms(device: torch.device, steps: int, warmup: int = 10) -> float:
    marks = []
    done = 0

    def on_step() -> None:
        nonlocal done
        done += 1
        if done in (warmup, warmup + steps):
            _sync(device)
            marks.append(time.perf_counter())

    _loop(device, warmup + steps, on_step)
    return (marks[1] - marks[0]) * 1000 / steps


def profiled(device: torch.device, steps: int, options: dict) -> tuple[float, float]:
    """Median ProfilerStep span (ms) and host events per step."""
    activities = [torch.profiler.ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "trace.json"
        with torch.profiler.profile(
            activities=activities,
            schedule=torch.profiler.schedule(wait=1, warmup=2, active=steps, repeat=1),
            on_trace_ready=lambda p: p.export_chrome_trace(str(path)),
            **options,
        ) as prof:
            _loop(device, 3 + steps, prof.step)
        _sync(device)
        text = path.read_bytes()
    if text[:2] == b"\x1f\x8b":
        text = gzip.decompress(text)
    events = [e for e in json.loads(text)["traceEvents"] if e.get("ph") == "X"]
    spans = [
        e
        for e in events
        if e.get("cat") == "user_annotation" and str(e.get("name", "")).startswith("ProfilerStep#")
    ]
    starts = sorted(e["ts"] for e in spans)
    ends = sorted(e["ts"] + e["dur"] for e in spans)
    host = [e for e in events if e.get("cat") in HOST_CATEGORIES]
    counted = sum(1 for e in host if starts[0] <= e["ts"] < ends[-1]) - len(spans)
    return statistics.median(e["dur"] / 1000 for e in spans), counted / len(spans)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        print("profiler_overhead: no CUDA device; use --device cpu", file=sys.stderr)
        return 2
    device = torch.device(args.device)
    # The first run of each pays one-time costs (kernels' first launch, the profiler's start).
    unprofiled_ms(device, 5)
    profiled(device, 5, SETTINGS["stack+shapes"])
    rows = {}
    for name, options in SETTINGS.items():
        bare, spans, events = [], [], []
        for _ in range(args.rounds):  # interleaved: a slow spell hits both sides
            bare.append(unprofiled_ms(device, args.steps))
            span, count = profiled(device, args.steps, options)
            spans.append(span)
            events.append(count)
        bare_ms, span_ms = statistics.median(bare), statistics.median(spans)
        per_step = statistics.median(events)
        rows[name] = {
            "unprofiled_ms": bare_ms,
            "profiled_ms": span_ms,
            "host_events_per_step": per_step,
            "overhead_us_per_event": (span_ms - bare_ms) * 1000 / per_step,
            "rounds": {"unprofiled_ms": bare, "profiled_ms": spans, "events": events},
        }
        print(
            f"{name:<13} unprofiled {bare_ms:6.3f} ms  profiled {span_ms:6.3f} ms  "
            f"{per_step:6.0f} host events/step  {rows[name]['overhead_us_per_event']:5.2f} us "
            "per event",
            flush=True,
        )
    info = {
        "torch": torch.__version__,
        "device": torch.cuda.get_device_name(0) if device.type == "cuda" else "cpu",
        "steps": args.steps,
        "rounds": args.rounds,
        "settings": rows,
    }
    if args.json:
        args.json.write_text(json.dumps(info, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
