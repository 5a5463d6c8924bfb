"""Sync Advisor plugin in a real TensorBoard: start-up to first answer, then a load test.

1. Builds a logdir: the real traces of ../shared/traces/real symlinked into one run, or,
   without ../shared, CPU traces that real torch profiles here; with ``--job N``, a job of
   N small rank traces with their per-trace summaries written (docs/scale.md).
2. Starts ``tensorboard`` twice on it with the same fresh ``--sync_advisor_cache_dir``:
   cold (nothing cached) and warm (disk cache filled by the first launch), and prints the
   time from process start, and from TensorBoard's first HTTP answer, to the first 200 of
   ``sites`` and to the run being fully loaded.
3. Waits until TensorBoard's processes are idle (torch-tb-profiler parses every trace in
   processes of its own after start-up: tens of seconds on the real traces), printing how
   long that took; ``--no-settle`` starts the load at once, during that parse.
4. Load test on loopback only: N client threads (default 32) for D seconds (default 20)
   alternating ``sites`` and ``sync`` (detail) requests, each on a new connection as
   TensorBoard's werkzeug server closes every one; prints requests/s, p50/p95/p99, and the
   CPU time per request of TensorBoard's server process and of this load generator (both
   share the machine's cores). ``--gzip`` sends ``Accept-Encoding: gzip`` as a browser
   does (the default client, like urllib or curl, takes plain JSON).

TensorBoard is always killed (process group) at the end, also on errors or Ctrl-C.
Usage: python bench/bench_plugin.py [--standalone] [--job 1000] [--gzip] [--logdir DIR]
           [--clients 32] [--duration 20] [--no-settle]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import runpy
import shutil
import statistics
import subprocess
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


def build_job(root: Path, ranks: int) -> tuple[Path, str]:
    """``ranks`` copies of one small rank trace (as bench_scale.py makes them) in one run,
    each with the per-trace summary ``tb-syncfinder report --write-summaries`` writes."""
    sys.path.insert(0, str(REPO / "tests"))
    from kineto_builder import KinetoTraceBuilder, item_sync

    builder = KinetoTraceBuilder()
    for n in range(1, 4):
        with builder.step(n):
            for _ in range(20):
                builder.kernel(dur=200)
            item_sync(builder, stack=[("train.py", 8, "train_step")])
    run = root / "logs" / "job"
    first = builder.write(run / "rank0.pt.trace.json.gz")
    for rank in range(1, ranks):
        shutil.copy(first, run / f"rank{rank}.pt.trace.json.gz")
    started = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "tb_syncfinder", "report", "--write-summaries", str(run)]
        + ["--json", "-o", os.devnull],
        check=True,
        capture_output=True,
    )
    took = time.perf_counter() - started
    return root / "logs", f"a job of {ranks} rank traces, summaries written in {took:.1f} s"


def build_logdir(root: Path, logdir: str | None, job: int = 0) -> tuple[Path, str]:
    if logdir:
        return Path(logdir), "given logdir"
    if job:
        return build_job(root, job)
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


def fetch(
    url: str, timeout: float = 30, headers: dict[str, str] | None = None
) -> tuple[int, bytes]:
    try:
        request = urllib.request.Request(url, headers=headers or {})
        with urllib.request.urlopen(request, timeout=timeout) as response:
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
        self.answering = time.perf_counter() - self.started  # its first HTTP answer
        self.base = f"http://127.0.0.1:{self.process.port}/data/plugin/sync_advisor/"

    def __enter__(self) -> TensorBoard:
        return self

    def __exit__(self, *exc: object) -> None:
        self.process.stop(timeout=15)

    def cpu_seconds(self) -> tuple[float, float]:
        """CPU time (user + system) of TensorBoard's server process, and of the other
        processes of its group (torch-tb-profiler's parsers, TensorBoard's data server)."""
        tick = os.sysconf("SC_CLK_TCK")
        pid = self.process.process.pid
        server = others = 0.0
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[2]) != pid:  # its process group: start_new_session
                continue
            used = (int(fields[11]) + int(fields[12])) / tick
            if int(entry) == pid:
                server = used
            else:
                others += used
        return server, others

    def settle(self, idle_cores: float = 0.1, timeout_s: float = 300) -> float:
        """Seconds until TensorBoard's processes use under ``idle_cores`` over 2 s."""
        started = time.perf_counter()
        last = sum(self.cpu_seconds())
        while time.perf_counter() - started < timeout_s:
            time.sleep(2)
            now = sum(self.cpu_seconds())
            if now - last < 2 * idle_cores:
                break
            last = now
        return time.perf_counter() - started

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


def machine_busy_seconds() -> float:
    """CPU time every program on this machine has used (all cores), from /proc/stat."""
    with open("/proc/stat") as f:
        fields = [int(v) for v in f.readline().split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q / 100 * len(ordered)))]


def load_test(
    board: TensorBoard, run: str, clients: int, duration_s: float, gzip: bool = False
) -> None:
    status, body = fetch(board.url("syncs", run=run, limit=500))
    syncs = json.loads(body)["items"] if status == 200 else []
    if not syncs:
        status, body = fetch(board.url("syncs", run=run, limit=500, latent=1))
        syncs = json.loads(body)["items"]
    ids = [s["id"] for s in syncs]
    latencies: dict[str, list[float]] = {"sites": [], "sync": []}
    failures: list[str] = []
    lock = threading.Lock()
    headers = {"Accept-Encoding": "gzip"} if gzip else {}
    load_before = os.getloadavg()[0]
    server_cpu, others_cpu = board.cpu_seconds()
    own = resource.getrusage(resource.RUSAGE_SELF)
    machine = machine_busy_seconds()
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
                status, _ = fetch(url, headers=headers)
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
    server_now, others_now = board.cpu_seconds()
    server_used, others_used = server_now - server_cpu, others_now - others_cpu
    after = resource.getrusage(resource.RUSAGE_SELF)
    own_used = after.ru_utime + after.ru_stime - own.ru_utime - own.ru_stime
    rest = machine_busy_seconds() - machine - server_used - others_used - own_used
    total = sum(len(v) for v in latencies.values())
    print(f"\nload test: {clients} clients, {wall:.1f} s, loopback, run {run!r} "
          f"({len(ids)} sync ids), {'gzip' if gzip else 'plain JSON'} answers, "
          f"load average {load_before:.2f} before")  # fmt: skip
    print(f"  all      {total / wall:8.1f} req/s   failures {len(failures)}")
    per_request = 1e3 / max(total, 1)
    print(
        f"  CPU per request: TensorBoard server {server_used * per_request:.2f} ms, "
        f"this load generator {own_used * per_request:.2f} ms; TensorBoard's other "
        f"processes {others_used:.1f} s in all ({os.cpu_count()} cores, "
        f"{(server_used + own_used + others_used) / wall:.2f} cores busy with these, "
        f"{max(rest, 0.0) / wall:.2f} with other programs)"
    )
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
        "--job",
        type=int,
        default=0,
        metavar="N",
        help="serve a job of N small rank traces read from their summaries",
    )
    parser.add_argument(
        "--gzip", action="store_true", help="clients take gzip (Accept-Encoding), as browsers"
    )
    parser.add_argument(
        "--no-settle",
        action="store_true",
        help="start the load at once instead of when TensorBoard's processes are idle",
    )
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
        logdir, what = build_logdir(root, args.logdir, args.job)
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
                http = board.answering
                print(f"{phase:<5} cache: first sites answer {first:6.2f} s after start "
                      f"({first - http:5.2f} s after TensorBoard's first HTTP answer at "
                      f"{http:5.2f} s), run fully loaded {loaded:6.2f} s")  # fmt: skip
                if phase == "warm":
                    if not args.no_settle:
                        waited = board.settle()
                        print(f"TensorBoard's processes idle {waited:.0f} s later "
                              f"({time.perf_counter() - board.started:.0f} s after "
                              "start); load test from then")  # fmt: skip
                    load_test(board, run, args.clients, args.duration, args.gzip)
        cold, warm = timings["cold"][1], timings["warm"][1]
        print(f"\nwarm / cold time to a fully loaded run: {warm / cold:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
