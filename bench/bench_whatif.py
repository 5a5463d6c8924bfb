"""Cost of the what-if replay (issue 11): a full analysis with and without it.

    python bench/bench_whatif.py [TRACE] [-n 7]

"With" runs the engine's ``analyze_trace`` with ``whatif.replay`` added where a wired-in
stage would run: on the same timeline and episodes, inside the analysis (its cyclic GC
paused, as for every stage), by wrapping ``engine.measure`` for the duration of the call.
"Without" is ``analyze_trace`` as it is. The two alternate, ``-n`` times each, in one
process (after a warm-up of each); the best and the median of each are printed, and their
ratio. Target: with / without <= 1.3 on the 54 MB A100 trace.

CPU time is printed beside wall time: on a shared machine it is the steadier of the two.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tb_syncfinder import engine  # noqa: E402
from tb_syncfinder.whatif import profiler_episodes, replay  # noqa: E402

DEFAULT_TRACE_NAME = "a100_df_index_resolver.pt.trace.json.gz"
CANDIDATES = [Path("/work/shared/traces/real") / DEFAULT_TRACE_NAME,
              REPO.parent / "shared" / "traces" / "real" / DEFAULT_TRACE_NAME]
TARGET = 1.3


def _with_replay(path: str, sink: list[Any]) -> Any:
    original = engine.measure

    def measure_and_replay(tl: Any, syncs: Any, episodes: Any = None) -> Any:
        if episodes is not None:
            profiler = set(profiler_episodes(tl, episodes))
            sink.append(replay(tl, episodes, counted=[
                i for i in range(len(episodes)) if i not in profiler]))
        return original(tl, syncs, episodes)

    engine.measure = measure_and_replay
    try:
        return engine.analyze_trace(path)
    finally:
        engine.measure = original


def _time(call: Callable[[], Any]) -> tuple[float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    call()
    return time.perf_counter() - wall, time.process_time() - cpu


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("trace", nargs="?", help=f"default: {DEFAULT_TRACE_NAME}")
    parser.add_argument("-n", "--repeat", type=int, default=7, help="runs of each (default 7)")
    args = parser.parse_args(argv)
    path = args.trace or next((str(p) for p in CANDIDATES if p.is_file()), None)
    if not path or not Path(path).is_file():
        print("bench_whatif: no trace found", file=sys.stderr)
        return 2
    sink: list[Any] = []
    engine.analyze_trace(path)  # warm-up: imports, caches, page cache
    _with_replay(path, sink)
    result = sink[-1]
    runs: dict[str, list[tuple[float, float]]] = {"without": [], "with": []}
    for _ in range(args.repeat):
        runs["without"].append(_time(lambda: engine.analyze_trace(path)))
        runs["with"].append(_time(lambda: _with_replay(path, sink)))
    print(f"trace: {path}")
    print(f"replay: available={result.available} steps={len(result.steps)} "
          f"nodes={result.stats.get('nodes', 0):.0f} "
          f"worst step error={result.fidelity_error:.3%}")
    print(f"{'':<9} {'best wall':>10} {'median wall':>12} {'best cpu':>10} {'median cpu':>11}")
    figures = {}
    for name, values in runs.items():
        walls = [w for w, _ in values]
        cpus = [c for _, c in values]
        figures[name] = (min(walls), statistics.median(walls), min(cpus),
                         statistics.median(cpus))
        print(f"{name:<9} {figures[name][0]:>9.3f}s {figures[name][1]:>11.3f}s "
              f"{figures[name][2]:>9.3f}s {figures[name][3]:>10.3f}s")
    ratios = [w / wo for w, wo in zip(figures["with"], figures["without"], strict=True)]
    print(f"{'ratio':<9} {ratios[0]:>9.2f}x {ratios[1]:>11.2f}x {ratios[2]:>9.2f}x "
          f"{ratios[3]:>10.2f}x")
    verdict = "PASS" if ratios[2] <= TARGET else "MISS"
    print(f"analysis with the replay / without (best CPU time): {ratios[2]:.2f}x "
          f"(target <= {TARGET}x)  {verdict}")
    return 0 if verdict == "PASS" else 1


if __name__ == "__main__":
    sys.exit(main())
