"""Start-up of ``tb-syncfinder``: how long a command takes above the bare interpreter.

    python bench/bench_startup.py [-n 15] [--trace SMALL_TRACE ...]

Runs, as fresh processes and interleaved (round 1 of every subject, then round 2, ...):
``python -c pass`` (the interpreter with this environment's ``site``), ``python -m
tb_syncfinder --help``, and ``python -m tb_syncfinder report TRACE`` on each small trace
(by default the bundled CPU-less demo trace ``cnn_optimized`` and, where ``../shared`` is
beside the repository, the 7 KB ROCm trace and the 46 KB CPU-only trace). Prints the
median wall and CPU time of each, their excess over the interpreter (the start-up that
issue 14 wants under 0.1 s) and, from one ``-X importtime`` run, which imports that excess
is made of. Bytecode caches are written first, as an installed package has them.
``--baseline DIR`` runs the reports of another checkout in the same rounds and prints
each report's ratio to it.
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared" / "traces" / "real"
TARGET_S = 0.1  # issue 14: start-up above the interpreter for a report on a small trace


def _default_traces() -> list[Path]:
    traces = [REPO / "tb_syncfinder" / "demo" / "traces" / "cnn_optimized.pt.trace.json.gz"]
    for name in ("rocm_mi250_minitoy.pt.trace.json.gz", "cpu_legacy_call_stack.pt.trace.json.gz"):
        if (SHARED / name).exists():
            traces.append(SHARED / name)
    return traces


def _run(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(wall seconds, CPU seconds of the child) of one run."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def _imports_ms(argv: list[str], env: dict[str, str]) -> dict[str, float]:
    """Top-level imports of one run with ``-X importtime``: module -> cumulative ms."""
    proc = subprocess.run(
        [argv[0], "-X", "importtime", *argv[1:]],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        check=False,
    )
    out: dict[str, float] = {}
    for line in proc.stderr.splitlines():
        m = re.match(r"import time:\s+\d+ \|\s+(\d+) \| (\S.*)$", line)
        if m and not m.group(2).startswith(" "):  # top level only: no double counting
            out[m.group(2).strip()] = int(m.group(1)) / 1000.0
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=15, help="rounds (default 15)")
    parser.add_argument("--trace", action="append", type=Path, help="a small trace (repeat)")
    parser.add_argument(
        "--baseline",
        type=Path,
        help="a checkout of another version (git worktree add DIR REV): its reports are run "
        "in the same rounds, and each report's ratio to it printed",
    )
    args = parser.parse_args()
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # an installed package has its .pyc files
    baseline_env = dict(env)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    # -P: the working directory is not put first on sys.path, so that run from a checkout
    # ``-m tb_syncfinder`` imports the PYTHONPATH's copy (a --baseline's) and not that one.
    py = [sys.executable, "-P"] if sys.version_info >= (3, 11) else [sys.executable]
    subjects: dict[str, tuple[list[str], dict[str, str]]] = {
        "interpreter (python -c pass)": ([*py, "-c", "pass"], env),
        "tb-syncfinder --help": ([*py, "-m", "tb_syncfinder", "--help"], env),
    }
    for trace in args.trace or _default_traces():
        argv = [*py, "-m", "tb_syncfinder", "report", str(trace)]
        subjects[f"report {trace.name}"] = (argv, env)
        if args.baseline is not None:
            baseline_env["PYTHONPATH"] = str(args.baseline.resolve())
            subjects[f"baseline report {trace.name}"] = (argv, baseline_env)
    for argv, run_env in subjects.values():  # warm: bytecode written, files in page cache
        _run(argv, run_env)
    walls: dict[str, list[float]] = {k: [] for k in subjects}
    cpus: dict[str, list[float]] = {k: [] for k in subjects}
    for _ in range(args.n):
        for name, (argv, run_env) in subjects.items():
            wall, cpu = _run(argv, run_env)
            walls[name].append(wall)
            cpus[name].append(cpu)
    base = next(iter(subjects))
    base_wall = statistics.median(walls[base])
    base_cpu = statistics.median(cpus[base])
    print(f"median of {args.n} interleaved rounds, load average {os.getloadavg()[0]:.1f}")
    print(f"{'subject':<52} {'wall':>8} {'cpu':>8} {'wall above python':>18}")
    worst = 0.0
    for name in subjects:
        wall = statistics.median(walls[name])
        cpu = statistics.median(cpus[name])
        above = wall - base_wall
        if name.startswith("report"):
            worst = max(worst, above)
        print(
            f"{name:<52} {wall * 1000:>6.0f} ms {cpu * 1000:>5.0f} ms {above * 1000:>15.0f} ms"
            + ("" if name == base else f"  (cpu {(cpu - base_cpu) * 1000:+.0f} ms)")
        )
    if args.baseline is not None:
        for name in subjects:
            if name.startswith("report"):
                now = statistics.median(walls[name]) - base_wall
                before = statistics.median(walls["baseline " + name]) - base_wall
                print(f"{name}: {now / before:.2f}x the baseline's time above the interpreter")
    verdict = "PASS" if worst < TARGET_S else "MISS"
    print(
        f"report start-up above the interpreter: {worst * 1000:.0f} ms (target < 100 ms) {verdict}"
    )
    for name, (argv, run_env) in subjects.items():
        if not name.startswith("report"):
            continue
        imports = _imports_ms(argv, run_env)
        ours = {m: ms for m, ms in imports.items() if m.split(".")[0] in ("tb_syncfinder", "numpy")}
        listed = ", ".join(f"{m} {ms:.0f}" for m, ms in sorted(ours.items(), key=lambda i: -i[1]))
        print(f"imports of {name} (ms, one run): {listed}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
