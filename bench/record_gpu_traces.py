"""Record the demo workloads on a CUDA GPU and bundle the traces with the package (issue 6).

    python bench/record_gpu_traces.py [--size small] [--steps 5] [--out tb_syncfinder/demo/traces]

Profiles ``cnn_baseline``, ``cnn_optimized``, ``seg_baseline`` and ``seg_optimized`` exactly as
``tb-syncfinder demo`` does (``with_stack``, ``with_modules``, CUDA sync records), writes each
as ``<run>.pt.trace.json.gz`` plus ``versions.json`` (torch, CUDA, cuDNN, GPU, driver) into
``--out``. Frame paths of the demo workloads are stored relative to the package
(``tb_syncfinder/demo/seg.py``); ``tb-syncfinder demo`` points them at the user's installation
when it copies the traces into a logdir, so the source lines resolve on every machine.
Then it analyses each trace with the engine and prints what it found, as a sanity check.

Exits with status 2 and a clear message when no CUDA device is available.
"""

from __future__ import annotations

import argparse
import gzip
import json
import platform
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from tb_syncfinder.demo.runner import (
    BUNDLED_TRACES_DIR,
    DEFAULT_STEPS,
    DEMO_DIR,
    RUNS,
    profile_run,
)

PORTABLE_PREFIX = "tb_syncfinder/demo/"


def portable_paths(text: str) -> str:
    """Replace this machine's absolute demo directory by the package-relative prefix."""
    local = json.dumps(str(DEMO_DIR) + "/")[1:-1]
    return text.replace(local, PORTABLE_PREFIX)


def driver_version() -> str | None:
    try:
        output = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return output.strip().splitlines()[0] if output.strip() else None


def versions(size: str, steps: int) -> dict:
    gpu = torch.cuda.get_device_name(0)
    return {
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version(),
        "gpu": gpu,
        "driver": driver_version(),
        "python": platform.python_version(),
        "worker": re.sub(r"[^A-Za-z0-9_]+", "_", gpu).strip("_").lower() or "gpu",
        "size": size,
        "steps": steps,
        "recorded": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def summarize(path: Path) -> str:
    from tb_syncfinder import analyze

    report = analyze(str(path))
    summary = report.summary
    sites = ", ".join(
        f"{s.kind}@{Path(s.file).name if s.file else '?'}:{s.line} x{s.count}" for s in report.sites
    )
    return (
        f"{summary.sync_count} syncs, host wait {summary.host_wait_us / 1000:.2f} ms, "
        f"GPU idle after {summary.gpu_idle_us / 1000:.2f} ms; sites: {sites or 'none'}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", choices=tuple(DEFAULT_STEPS), default="small")
    parser.add_argument("--steps", type=int, default=None)
    parser.add_argument("--out", type=Path, default=BUNDLED_TRACES_DIR)
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print(
            f"record_gpu_traces: no CUDA device is available to torch {torch.__version__}; "
            "the bundled GPU traces can only be recorded on a machine with an NVIDIA GPU "
            "and a CUDA build of torch.",
            file=sys.stderr,
        )
        return 2
    steps = args.steps or DEFAULT_STEPS[args.size]
    args.out.mkdir(parents=True, exist_ok=True)
    device = torch.device("cuda")
    with tempfile.TemporaryDirectory(prefix="tb-syncfinder-record-") as logdir:
        for run in RUNS:
            result = profile_run(run, logdir, device, steps, args.size)
            if len(result.traces) != 1:
                print(f"{run}: expected one trace, got {result.traces}", file=sys.stderr)
                return 1
            text = gzip.decompress(Path(result.traces[0]).read_bytes()).decode("utf-8")
            target = args.out / f"{run}.pt.trace.json.gz"
            target.write_bytes(gzip.compress(portable_paths(text).encode("utf-8"), 9))
            print(
                f"{run}: {target} ({target.stat().st_size / 1e6:.2f} MB) "
                f"in {result.seconds:.1f} s; {summarize(Path(result.path))}"
            )
    info = versions(args.size, steps)
    (args.out / "versions.json").write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")
    print(f"versions: {json.dumps(info)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
