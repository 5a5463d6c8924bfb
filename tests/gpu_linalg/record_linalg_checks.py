"""Record which ``torch.linalg`` functions read their error code on the host, and what
their ``_ex`` forms do, on a CUDA GPU: one trace with Python stacks of each function called
at its own line, and the lines ``torch.cuda.set_sync_debug_mode("warn")`` warns at.

    python bench/record_linalg_checks.py --out DIR [--device cpu]

Writes ``DIR/linalg_checks_probe.pt.trace.json.gz`` (a schedule of one wait, one warm-up
and 2 active steps, so that no library sets itself up in them) and
``DIR/linalg_checks_probe.json`` (versions and the warned lines, ``file:line`` of the
innermost frame in this file).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import warnings
from pathlib import Path

import torch


def probe(device: torch.device) -> None:
    n = 256
    a = torch.randn(n, n, device=device)
    spd = a @ a.T + n * torch.eye(n, device=device)
    b = torch.randn(n, 8, device=device)
    batch = spd.expand(4, n, n).contiguous()
    torch.linalg.inv(spd)
    torch.linalg.inv_ex(spd)
    torch.linalg.solve(spd, b)
    torch.linalg.solve_ex(spd, b)
    torch.linalg.cholesky(spd)
    torch.linalg.cholesky_ex(spd)
    torch.linalg.cholesky(batch)
    torch.linalg.lu_factor(spd)
    torch.linalg.lu_factor_ex(spd)
    torch.linalg.eigh(spd)
    torch.linalg.det(spd)


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

    path = args.out / "linalg_checks_probe.pt.trace.json"
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
    if device.type == "cuda":
        torch.cuda.set_sync_debug_mode("warn")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            probe(device)
        torch.cuda.set_sync_debug_mode(0)
        here = Path(__file__).name
        for w in caught:
            # The innermost frame in this file: the line that called into torch.
            warned.append(f"{Path(w.filename).name}:{w.lineno} {str(w.message)[:120]}")
        warned = [w for w in warned if w.startswith(here)] or warned
    info = {
        "torch": torch.__version__,
        "gpu": torch.cuda.get_device_name() if device.type == "cuda" else "none",
        "warned": warned,
    }
    (args.out / "linalg_checks_probe.json").write_text(json.dumps(info, indent=1) + "\n")
    print(json.dumps(info))


# More functions, added after the first recording (below main, so that its trace still names
# this file's lines): LINALG_PROBE=more records them instead, into the same file names.
import os  # noqa: E402


def probe_more(device: torch.device) -> None:
    n = 128
    a = torch.randn(n, n, device=device)
    spd = a @ a.T + n * torch.eye(n, device=device)
    b = torch.randn(n, 4, device=device)
    torch.linalg.svd(a)
    torch.linalg.svdvals(a)
    torch.linalg.lstsq(a, b)
    torch.linalg.pinv(a)
    torch.linalg.matrix_rank(a)
    torch.linalg.cond(a)
    torch.linalg.eig(a)
    torch.linalg.eigvals(a)
    torch.cholesky_inverse(torch.linalg.cholesky_ex(spd).L)
    torch.linalg.matrix_power(a, -2)
    torch.linalg.slogdet(a)
    torch.linalg.qr(a)
    torch.linalg.lu(a)
    torch.linalg.lu_solve(*torch.linalg.lu_factor_ex(spd)[:2], b)
    torch.linalg.solve_triangular(torch.triu(spd), b, upper=True)
    torch.linalg.matrix_norm(a, ord=2)


if os.environ.get("LINALG_PROBE") == "more":
    probe = probe_more  # noqa: F811 (main calls probe by name)


if __name__ == "__main__":
    main()
