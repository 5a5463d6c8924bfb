"""Record the savings pairs of ``bench/savings_workloads.py`` on a CUDA GPU: the traces and
unprofiled step times behind "predicted vs measured" in docs/validation.md (issue 11).

    python bench/record_savings_pairs.py --out DIR [--size gpu] [--steps 5] [--rounds 3]
        [--timed-steps 30] [--warmup-steps 5] [--host-share 0.5] [--only PAIR ...]

1. **Calibrate** (GPU only): time the model's step on the GPU alone and one pass of the host's
   data pipeline, and pick ``host_passes`` so that the host's work per step is
   ``--host-share`` of the GPU's. A sync then costs what the host does after it, which the
   GPU cannot overlap; without it the GPU bounds the step.
2. **Profile** each pair's baseline and fix as the demo does (``with_stack``,
   ``record_shapes``, CUDA sync records; one wait and one warm-up step, then ``--steps``):
   ``DIR/<pair>_<variant>.pt.trace.json.gz``, frame paths relative to the repository.
3. **Warn half**: the same steps under ``torch.cuda.set_sync_debug_mode("warn")``; each
   warning's innermost frame in the workloads file gives the line torch says syncs.
4. **Time without the profiler**: ``--warmup-steps`` then ``--timed-steps`` steps between two
   device synchronizations, baseline and fix alternated in each of ``--rounds`` rounds,
   median per variant.

Writes ``DIR/pairs.json``. ``python bench/validate_savings.py --pairs-dir DIR`` then prints
the engine's predicted saving next to the measured one. On a CPU (``--device cpu --size
tiny``) steps 2 and 4 run as a check of this script; the numbers mean nothing there.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import platform
import re
import shutil
import statistics
import sys
import tempfile
import time
import traceback
import warnings
from collections import Counter
from pathlib import Path

import torch

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

import savings_workloads as wl  # noqa: E402

WORKLOADS_FILE = Path(wl.__file__).resolve()
WAIT, WARMUP = 1, 1
PAIRS_FILE = "pairs.json"


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def portable(text: str) -> str:
    """The recording machine's path of this folder becomes ``bench/``."""
    local = json.dumps(str(BENCH) + "/")[1:-1]
    return text.replace(local, "bench/")


def markers(path: Path = WORKLOADS_FILE) -> dict[int, str]:
    """The lines of a workload file that carry a ``# sync: <what>`` marker."""
    found = {}
    for number, text in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        match = re.search(r"#\s*sync:\s*(\w+)", text)
        if match:
            found[number] = match.group(1)
    return found


def _timed(fn, repeats: int) -> float:
    started = time.perf_counter()
    for _ in range(repeats):
        fn()
    return (time.perf_counter() - started) * 1000 / repeats


def calibrate(device: torch.device, size: wl.PairSize, share: float) -> tuple[wl.PairSize, dict]:
    """``host_passes`` for the MLP pairs and the transformer pair, from measured times."""
    generator = torch.Generator().manual_seed(1)
    model, optimizer = wl.mlp(device, size)
    x, labels = wl.host_batch(generator, size, 0)
    x, labels = x.to(device), labels.to(device)

    def gpu_step() -> None:
        wl.backward_step(optimizer, wl.forward_loss(model, x, labels))

    for _ in range(3):
        gpu_step()
    _sync(device)
    started = time.perf_counter()
    for _ in range(10):
        gpu_step()
    _sync(device)
    mlp_gpu_ms = (time.perf_counter() - started) * 100

    torch.manual_seed(0)
    lm = wl.TinyLM(size).to(device, wl._dtype(device))
    lm_opt = torch.optim.SGD(lm.parameters(), lr=1e-4)
    tokens, targets = wl.host_tokens(generator, size, 0)
    tokens, targets = tokens.to(device), targets.to(device)

    def lm_step() -> None:
        loss = torch.nn.functional.cross_entropy(
            lm(tokens).float().flatten(0, 1), targets.flatten()
        )
        wl.backward_step(lm_opt, loss)

    for _ in range(3):
        lm_step()
    _sync(device)
    started = time.perf_counter()
    for _ in range(5):
        lm_step()
    _sync(device)
    lm_gpu_ms = (time.perf_counter() - started) * 200

    def passes_for(make, gpu_ms: float) -> tuple[int, float, float]:
        make(0)
        base = _timed(lambda: make(0), 5)
        per_pass = max((_timed(lambda: make(4), 5) - base) / 4, 1e-3)
        passes = int(min(max(round((share * gpu_ms - base) / per_pass), 0), 200))
        return passes, base, per_pass

    mlp_passes, mlp_base, mlp_pass = passes_for(
        lambda n: wl.host_batch(generator, size, n), mlp_gpu_ms
    )
    lm_passes, lm_base, lm_pass = passes_for(
        lambda n: wl.host_tokens(generator, size, n), lm_gpu_ms
    )
    info = {
        "host_share_target": share,
        "mlp_gpu_step_ms": mlp_gpu_ms,
        "mlp_host_base_ms": mlp_base,
        "mlp_host_pass_ms": mlp_pass,
        "mlp_host_passes": mlp_passes,
        "transformer_gpu_step_ms": lm_gpu_ms,
        "transformer_host_base_ms": lm_base,
        "transformer_host_pass_ms": lm_pass,
        "transformer_host_passes": lm_passes,
    }
    return wl.with_host_passes(size, mlp_passes, lm_passes), info


def profile(
    pair: str,
    variant: str,
    device: torch.device,
    size: wl.PairSize,
    steps: int,
    out: Path,
    with_stack: bool = True,
) -> Path:
    activities = [torch.profiler.ProfilerActivity.CPU]
    options = {}
    if device.type == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
        try:
            options["experimental_config"] = torch._C._profiler._ExperimentalConfig(
                enable_cuda_sync_events=True
            )
        except (AttributeError, TypeError):
            pass
    with tempfile.TemporaryDirectory(prefix="savings-pair-") as run_dir:
        with torch.profiler.profile(
            activities=activities,
            schedule=torch.profiler.schedule(wait=WAIT, warmup=WARMUP, active=steps, repeat=1),
            on_trace_ready=torch.profiler.tensorboard_trace_handler(
                run_dir, worker_name=f"{pair}_{variant}", use_gzip=True
            ),
            record_shapes=True,
            with_stack=with_stack,
            **options,
        ) as profiler:
            wl.train(pair, variant, device, size, WAIT + WARMUP + steps, profiler.step)
        _sync(device)
        traces = sorted(Path(run_dir).glob("*.pt.trace.json.gz"))
        if len(traces) != 1:
            raise RuntimeError(f"{pair} {variant}: expected one trace, got {traces}")
        text = gzip.decompress(traces[0].read_bytes()).decode("utf-8")
    target = out / f"{pair}_{variant}.pt.trace.json.gz"
    target.write_bytes(gzip.compress(portable(text).encode("utf-8"), 9))
    return target


def warned_lines(
    pair: str, variant: str, device: torch.device, size: wl.PairSize, steps: int
) -> dict[str, int]:
    """Lines of the workloads file that torch's sync detector warns at, in the steps the
    profiler records (after the same wait and warm-up steps)."""
    counts: Counter = Counter()
    done = 0

    def on_step() -> None:
        nonlocal done
        done += 1

    def record(message, category, filename, lineno, file=None, line=None) -> None:
        if not WAIT + WARMUP <= done < WAIT + WARMUP + steps:
            return
        frames = [
            f
            for f in traceback.extract_stack()[:-1]
            if Path(f.filename).resolve() == WORKLOADS_FILE
        ]
        counts[str(frames[-1].lineno) if frames else "elsewhere"] += 1

    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.showwarning = record
        torch.cuda.set_sync_debug_mode("warn")
        try:
            wl.train(pair, variant, device, size, WAIT + WARMUP + steps, on_step)
        finally:
            torch.cuda.set_sync_debug_mode(0)
    _sync(device)
    return dict(counts)


def time_variant(
    pair: str, variant: str, device: torch.device, size: wl.PairSize, warmup: int, steps: int
) -> float:
    marks: list[float] = []
    done = 0

    def on_step() -> None:
        nonlocal done
        done += 1
        if done in (warmup, warmup + steps):
            _sync(device)
            marks.append(time.perf_counter())

    wl.train(pair, variant, device, size, warmup + steps, on_step)
    return (marks[1] - marks[0]) * 1000 / steps


def versions(size_name: str) -> dict:
    cuda = torch.cuda.is_available()
    return {
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "gpu": torch.cuda.get_device_name(0) if cuda else None,
        "python": platform.python_version(),
        "size": size_name,
        "recorded": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--size", choices=tuple(wl.SIZES), default=None)
    parser.add_argument("--steps", type=int, default=5, help="profiled (active) steps")
    parser.add_argument("--timed-steps", type=int, default=30)
    parser.add_argument("--warmup-steps", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--host-share", type=float, default=0.5)
    parser.add_argument("--only", nargs="*", choices=wl.PAIRS, default=None)
    parser.add_argument(
        "--no-stack",
        action="store_true",
        help="profile without with_stack (less profiler overhead on the host, no lines)",
    )
    args = parser.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        print(
            "record_savings_pairs: no CUDA device; use --device cpu --size tiny to check "
            "the script",
            file=sys.stderr,
        )
        return 2
    device = torch.device(args.device)
    size_name = args.size or ("gpu" if device.type == "cuda" else "tiny")
    size = wl.SIZES[size_name]
    args.out.mkdir(parents=True, exist_ok=True)
    info: dict = {"versions": versions(size_name), "markers": markers(), "pairs": {}}
    info["workloads_sha256"] = hashlib.sha256(WORKLOADS_FILE.read_bytes()).hexdigest()
    if device.type == "cuda":
        size, info["calibration"] = calibrate(device, size, args.host_share)
        print("calibration:", json.dumps(info["calibration"]), flush=True)
    info["size"] = size.__dict__
    info["settings"] = {
        "steps": args.steps,
        "timed_steps": args.timed_steps,
        "warmup_steps": args.warmup_steps,
        "rounds": args.rounds,
        "with_stack": not args.no_stack,
    }
    for pair in args.only or wl.PAIRS:
        row: dict = {}
        variants = wl.VARIANTS + tuple(wl.PARTIALS.get(pair, ())) + wl.EXTRAS.get(pair, ())
        try:
            for variant in variants:
                started = time.perf_counter()
                trace = profile(
                    pair, variant, device, size, args.steps, args.out, not args.no_stack
                )
                row[variant] = {
                    "trace": trace.name,
                    "profile_s": round(time.perf_counter() - started, 2),
                }
                if device.type == "cuda":
                    row[variant]["warned"] = warned_lines(pair, variant, device, size, args.steps)
            rounds: dict[str, list[float]] = {v: [] for v in variants}
            for _ in range(args.rounds):
                for variant in variants:
                    rounds[variant].append(
                        time_variant(
                            pair, variant, device, size, args.warmup_steps, args.timed_steps
                        )
                    )
            for variant in variants:
                row[variant]["rounds_ms"] = rounds[variant]
                row[variant]["median_ms"] = statistics.median(rounds[variant])
        except Exception as error:  # one pair failing must not lose the others' figures
            row["error"] = f"{type(error).__name__}: {error}"
            traceback.print_exc()
        info["pairs"][pair] = row
        (args.out / PAIRS_FILE).write_text(json.dumps(info, indent=1) + "\n", encoding="utf-8")
        base, fixed = row.get("baseline", {}), row.get("fixed", {})
        for partial in (*wl.PARTIALS.get(pair, ()), *wl.EXTRAS.get(pair, ())):
            if "median_ms" in row.get(partial, {}):
                print(f"  {pair} {partial}: {row[partial]['median_ms']:.2f} ms per step")
        print(
            f"{pair}: baseline {base.get('median_ms', float('nan')):.2f} ms, "
            f"fixed {fixed.get('median_ms', float('nan')):.2f} ms per step; "
            f"warned {base.get('warned')} / fixed {fixed.get('warned')}"
            + (f"; ERROR {row['error']}" if "error" in row else ""),
            flush=True,
        )
    shutil.copy(WORKLOADS_FILE, args.out / WORKLOADS_FILE.name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
