"""Sync Advisor plugin in a real TensorBoard: start-up to first answer, then a load test.

1. Builds a logdir: the real traces of ../shared/traces/real symlinked into one run, or,
   without ../shared, CPU traces that real torch profiles here.
2. Starts ``tensorboard`` twice on it with the same fresh ``--sync_advisor_cache_dir``:
   cold (nothing cached) and warm (disk cache filled by the first launch), and prints the
   time from process start to the first 200 of ``sites`` and to the run being fully loaded.
3. Load test on loopback only: N client threads (default 32) for D seconds (default 20)
   alternating ``sites`` and ``sync`` (detail) requests; prints requests/s and p50/p95/p99.

TensorBoard is always killed (process group) at the end, also on errors or Ctrl-C.
Usage: python bench/bench_plugin.py [--logdir DIR] [--clients 32] [--duration 20]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import runpy
import statistics
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

from tb_syncfinder.demo.serve import free_port, start_tensorboard

REPO = Path(__file__).resolve().parents[1]
REAL_TRACES = REPO.parent / "shared" / "traces" / "real"
RUN = "bench"

CPU_WORKLOAD = """\
import torch


def train_step(x, mask_threshold):
    y = torch.relu(x @ x)
    keep = torch.nonzero(y > mask_threshold)
    values = torch.unique(keep[:, 0])
    return y.sum().item() + values.numel()


def main(trace_path, steps=5):
    x = torch.randn(64, 64)
    with torch.profiler.profile(
        activities=[torch.profiler.ProfilerActivity.CPU],
        with_stack=True,
        schedule=torch.profiler.schedule(wait=0, warmup=1, active=steps),
        on_trace_ready=lambda prof: prof.export_chrome_trace(trace_path),
    ) as prof:
        for _ in range(steps + 1):
            train_step(x, 0.5)
            prof.step()
"""


def build_logdir(root: Path, logdir: str | None) -> tuple[Path, str]:
    if logdir:
        return Path(logdir), "given logdir"
    run = root / "logs" / RUN
    run.mkdir(parents=True)
    if REAL_TRACES.is_dir():
        for trace in sorted(REAL_TRACES.glob("*.pt.trace.json*")):
            (run / trace.name).symlink_to(trace)
        return root / "logs", f"real traces from {REAL_TRACES}"
    workload = root / "src" / "workload.py"
    workload.parent.mkdir(parents=True)
    workload.write_text(CPU_WORKLOAD)
    main = runpy.run_path(str(workload))["main"]
    for worker in range(4):
        main(str(run / f"worker{worker}.pt.trace.json"))
    return root / "logs", "CPU traces profiled by torch here (no ../shared)"


def fetch(url: str, timeout: float = 30) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()


class TensorBoard:
    """A tensorboard process on loopback, killed with its process group on exit."""

    def __init__(self, logdir: Path, cache_dir: Path, standalone: bool = False) -> None:
        self.started = time.perf_counter()
        self.process = start_tensorboard(
            logdir,
            free_port("127.0.0.1"),
            host="127.0.0.1",
            module="tb_syncfinder.plugin.standalone" if standalone else "tensorboard.main",
            extra_args=[
                "--sync_advisor_cache_dir",
                str(cache_dir),
                "--sync_advisor_reload_interval",
                "2",
            ],  # fmt: skip
        )
        self.base = f"http://127.0.0.1:{self.process.port}/data/plugin/sync_advisor/"

    def __enter__(self) -> TensorBoard:
        return self

    def __exit__(self, *exc: object) -> None:
        self.process.stop(timeout=15)

    def url(self, route: str, **params: object) -> str:
        return self.base + route + "?" + urllib.parse.urlencode(params)

    def time_to_sites(self, run: str, timeout_s: float = 300) -> tuple[float, float]:
        """Seconds from process start to the first 200 of sites, and to the run loaded."""
        first = None
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.process.poll() is not None:
                raise SystemExit(f"tensorboard exited:\n{self.process.output()}")
            try:
                status, body = fetch(self.url("sites", run=run, limit=10), timeout=5)
            except OSError:
                status, body = 0, b""
            if status == 200:
                now = time.perf_counter() - self.started
                first = first if first is not None else now
                if not json.loads(body).get("loading"):
                    return first, now
            time.sleep(0.05)
        raise SystemExit(f"no answer from sites in {timeout_s}s:\n{self.process.output()}")


def first_run(board: TensorBoard) -> str:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            status, body = fetch(board.url("runs"), timeout=5)
            runs = json.loads(body)["runs"] if status == 200 else []
        except OSError:
            runs = []
        if runs:
            return runs[0]["name"]
        time.sleep(0.1)
    raise SystemExit("no run found")


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q / 100 * len(ordered)))]


def load_test(board: TensorBoard, run: str, clients: int, duration_s: float) -> None:
    status, body = fetch(board.url("syncs", run=run, limit=500))
    syncs = json.loads(body)["items"] if status == 200 else []
    if not syncs:
        status, body = fetch(board.url("syncs", run=run, limit=500, latent=1))
        syncs = json.loads(body)["items"]
    ids = [s["id"] for s in syncs]
    latencies: dict[str, list[float]] = {"sites": [], "sync": []}
    failures: list[str] = []
    lock = threading.Lock()
    stop_at = time.perf_counter() + duration_s

    def client(seed: int) -> None:
        rng = random.Random(seed)
        sorts = ["host_wait_us", "gpu_idle_us", "count", "share_of_step", "line"]
        n = 0
        while time.perf_counter() < stop_at:
            if n % 2 == 0 or not ids:
                name, url = "sites", board.url("sites", run=run, sort=rng.choice(sorts))
            else:
                name, url = "sync", board.url("sync", run=run, id=rng.choice(ids))
            t0 = time.perf_counter()
            try:
                status, _ = fetch(url)
            except OSError as exc:
                status = f"{type(exc).__name__}"
            elapsed = time.perf_counter() - t0
            with lock:
                if status == 200:
                    latencies[name].append(elapsed)
                else:
                    failures.append(f"{name}: {status}")
            n += 1

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - started
    total = sum(len(v) for v in latencies.values())
    print(f"\nload test: {clients} clients, {wall:.1f} s, loopback, run {run!r} "
          f"({len(ids)} sync ids)")  # fmt: skip
    print(f"  all      {total / wall:8.1f} req/s   failures {len(failures)}")
    for name, values in latencies.items():
        if not values:
            continue
        p50, p95, p99 = (percentile(values, q) * 1e3 for q in (50, 95, 99))
        print(
            f"  {name:<8} {len(values) / wall:8.1f} req/s   p50 {p50:7.1f} ms"
            f"   p95 {p95:7.1f} ms   p99 {p99:7.1f} ms"
            f"   mean {statistics.mean(values) * 1e3:7.1f} ms"
        )
    if failures:
        print("  first failures:", failures[:5])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--logdir", help="a logdir to serve (default: see module docstring)")
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--duration", type=float, default=20.0, help="seconds of load")
    parser.add_argument(
        "--standalone",
        action="store_true",
        help="TensorBoard without torch-tb-profiler (python -m "
        "tb_syncfinder.plugin.standalone), whose loader starts a process "
        "per trace",
    )
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory(prefix="bench_plugin_") as tmp:
        root = Path(tmp)
        logdir, what = build_logdir(root, args.logdir)
        cache = root / "cache"
        print(
            f"logdir: {logdir} ({what}); cores: {os.cpu_count()}; "
            f"{'without' if args.standalone else 'with'} torch-tb-profiler"
        )
        timings = {}
        for phase in ("cold", "warm"):
            with TensorBoard(logdir, cache, args.standalone) as board:
                run = first_run(board)
                timings[phase] = board.time_to_sites(run)
                first, loaded = timings[phase]
                print(f"{phase:<5} cache: first sites answer {first:6.2f} s after start, "
                      f"run fully loaded {loaded:6.2f} s")  # fmt: skip
                if phase == "warm":
                    load_test(board, run, args.clients, args.duration)
        cold, warm = timings["cold"][1], timings["warm"][1]
        print(f"\nwarm / cold time to a fully loaded run: {warm / cold:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
