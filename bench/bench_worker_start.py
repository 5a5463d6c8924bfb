"""Start-up of the plugin's analysis processes: multiprocessing spawn (before issue 14) against
``workers.ProcessPool`` (after), for the main modules TensorBoard runs under.

    python bench/bench_worker_start.py [-n 5] [--trace FILE]

Each measurement is its own driver process whose ``__main__`` is one of:

* ``console_script``: a script that imports ``tensorboard.main`` at the top and runs it
  under a main guard, as the ``tensorboard`` console script does (``python -m
  tensorboard.main`` re-imports the same module in a spawn worker);
* ``torch_script``: a training script that imports torch and TensorBoard at the top (its
  TensorBoard start guarded here, so that it can be measured at all);
* ``no_main_file``: ``python -c``, as in Jupyter or VS Code's interactive window (spawn
  already skips the main module there).

The driver makes a one-process pool, asks it for ``os.getpid`` (start-up: the new
interpreter, whatever it imports before it can answer, and the pool's own set-up), reads
that process's RSS, then has it analyse ``--trace`` (default: the bundled demo trace
``cnn_baseline``) with the plugin's ``analyze_in_worker`` (first analysis: the engine's
import included). Runs are interleaved and the median of ``-n`` rounds is printed, as the
machine may be shared: compare before with after, not the seconds across machines.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT_TRACE = REPO / "tb_syncfinder" / "demo" / "traces" / "cnn_baseline.pt.trace.json.gz"
POOLS = ("spawn", "workers")
MAINS = {
    "console_script": "from tensorboard.main import run_main  # noqa: F401\n",
    "torch_script": "import torch  # noqa: F401\nfrom tensorboard import program  # noqa: F401\n",
    "no_main_file": "",
}
DRIVER = """
import json, os, sys, time

def rss_mb(pid):
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        return None

def measure(kind, trace):
    from tb_syncfinder.models import TraceRef
    from tb_syncfinder.plugin.loader import analyze_in_worker
    from tb_syncfinder.plugin.plugin import make_engine_options
    from tb_syncfinder.plugin.settings import PluginSettings

    options = make_engine_options(PluginSettings(logdirs=[], source_roots=[]))
    ref = TraceRef(path=trace, worker="w0", span=None, run="run")
    started = time.perf_counter()
    if kind == "spawn":
        import concurrent.futures, multiprocessing
        pool = concurrent.futures.ProcessPoolExecutor(
            1, mp_context=multiprocessing.get_context("spawn"))
    else:
        from tb_syncfinder.plugin.workers import ProcessPool
        pool = ProcessPool(1)
    pid = pool.submit(os.getpid).result()
    ready = time.perf_counter()
    memory = rss_mb(pid)
    result = pool.submit(analyze_in_worker, ref, options).result()
    analysed = time.perf_counter()
    pool.shutdown()
    assert result.info.error is None, result.info.error
    print(json.dumps({"start_s": ready - started, "first_analysis_s": analysed - started,
                      "worker_rss_mb": memory}))

if __name__ == "__main__":
    measure(sys.argv[1], sys.argv[2])
"""


def run_once(folder: Path, main: str, pool: str, trace: Path) -> dict:
    script = folder / f"driver_{main}.py"
    script.write_text(MAINS[main] + DRIVER)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    if main == "no_main_file":
        # exec'd by -c: __main__ has no file, as in a notebook.
        command = [
            sys.executable,
            "-c",
            f"import sys; sys.argv[1:] = {[pool, str(trace)]!r}; "
            f"exec(compile(open({str(script)!r}).read(), '<driver>', 'exec'))",
        ]
    else:
        command = [sys.executable, str(script), pool, str(trace)]
    done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=folder)
    if done.returncode != 0:
        raise SystemExit(f"{main}/{pool} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("-n", type=int, default=5, help="rounds (median reported)")
    parser.add_argument("--trace", type=Path, default=DEFAULT_TRACE)
    args = parser.parse_args()
    samples: dict[tuple[str, str], list[dict]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-worker-start-") as tmp:
        for _ in range(args.n):
            for main in MAINS:
                for pool in POOLS:
                    sample = run_once(Path(tmp), main, pool, args.trace.resolve())
                    samples.setdefault((main, pool), []).append(sample)
    print(f"{args.n} rounds, median; trace {args.trace.name}; {os.cpu_count()} CPUs")
    print("| main module | pool | worker start-up | first analysis | worker RSS |")
    print("|---|---|---|---|---|")
    for (main, pool), runs in samples.items():
        start = statistics.median(r["start_s"] for r in runs)
        first = statistics.median(r["first_analysis_s"] for r in runs)
        memory = [r["worker_rss_mb"] for r in runs if r["worker_rss_mb"] is not None]
        rss = f"{statistics.median(memory):.0f} MB" if memory else "n/a"
        print(f"| {main} | {pool} | {start:.2f} s | {first:.2f} s | {rss} |")


if __name__ == "__main__":
    main()
