"""Cost of the what-if replay (issue 11): a full analysis with and without it.

    python bench/bench_whatif.py [TRACE] [-n 7]

"With" is the engine's ``analyze_trace`` as the CLI runs it (the what-if stage included);
"without" the same with ``Options(whatif=False)`` (every saving the bound). The two
alternate, ``-n`` times each, in one process (after a warm-up of each); the best and the
median of each are printed, and their ratio (the verdict on the median CPU time).
Target: with / without <= 1.3 on the 54 MB A100 trace.

CPU time is printed beside wall time: on a shared machine it is the steadier of the two.

    python bench/bench_whatif.py --sites 100 [-n 3]

Builds (``tests/kineto_builder.py``) traces of 8 steps, each calling ``.item()`` at N and
at 4N different lines (sites), in two shapes: GPU-bound steps (removing a site's syncs
shifts everything after each), and steps where autograd's thread launches most of the
work (nothing shifts uniformly); prints with / without for each, and how much the
replay's own time (with - without) grows for 4x the sites: about 4x when each site's
what-if costs its own syncs, 16x when it costs the trace (as before 7d00412).
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

DEFAULT_TRACE_NAME = "a100_df_index_resolver.pt.trace.json.gz"
CANDIDATES = [
    Path("/work/shared/traces/real") / DEFAULT_TRACE_NAME,
    REPO.parent / "shared" / "traces" / "real" / DEFAULT_TRACE_NAME,
]
TARGET = 1.3


def _time(call: Callable[[], Any]) -> tuple[float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    call()
    return time.perf_counter() - wall, time.process_time() - cpu


def _sites_trace(folder: Path, shape: str, sites: int) -> str:
    """8 steps of ``sites`` ``.item()`` calls at different lines (see the docstring)."""
    sys.path.insert(0, str(REPO / "tests"))
    from trace_shapes import sites_in_steps

    if shape == "gpu-bound":
        builder = sites_in_steps(8, sites, kernels=20)
    else:
        builder = sites_in_steps(8, sites, kernels=5, second_thread=True)
    return str(builder.write(folder / f"{shape.replace(' ', '_')}_{sites}.pt.trace.json"))


def _median_cpu(path: str, options: engine.Options, repeat: int) -> float:
    return statistics.median(
        _time(lambda: engine.analyze_trace(path, options))[1] for _ in range(repeat)
    )


def sites_scaling(sites: int, repeat: int) -> None:
    import tempfile

    without = engine.Options(whatif=False, contexts=False, window_bytes=0)
    with_replay = engine.Options(whatif=True, contexts=False, window_bytes=0)
    with tempfile.TemporaryDirectory() as tmp:
        print(f"{'shape':<14} {'sites':>6} {'MB':>6} {'without':>9} {'with':>9} {'ratio':>7}")
        for shape in ("gpu-bound", "second thread"):
            replay_s = []
            for count in (sites, 4 * sites):
                path = _sites_trace(Path(tmp), shape, count)
                engine.analyze_trace(path, without)  # warm-up: page cache
                off = _median_cpu(path, without, repeat)
                on = _median_cpu(path, with_replay, repeat)
                replay_s.append(on - off)
                size = Path(path).stat().st_size / 1e6
                figures = f"{off:>8.2f}s {on:>8.2f}s {on / off:>6.2f}x"
                print(f"{shape:<14} {count:>6} {size:>6.1f} {figures}")
            print(f"{shape:<14} replay time for 4x the sites: {replay_s[1] / replay_s[0]:.1f}x")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("trace", nargs="?", help=f"default: {DEFAULT_TRACE_NAME}")
    parser.add_argument(
        "-n", "--repeat", type=int, default=None, help="runs of each (7; 3 with --sites)"
    )
    parser.add_argument("--sites", type=int, help="built traces of N and 4N sites per step instead")
    args = parser.parse_args(argv)
    if args.sites:
        sites_scaling(args.sites, args.repeat or 3)
        return 0
    args.repeat = args.repeat or 7
    path = args.trace or next((str(p) for p in CANDIDATES if p.is_file()), None)
    if not path or not Path(path).is_file():
        print("bench_whatif: no trace found", file=sys.stderr)
        return 2
    without = engine.Options(whatif=False, contexts=True)
    with_replay = engine.Options(whatif=True, contexts=True)
    engine.analyze_trace(path, without)  # warm-up: imports, caches, page cache
    result = engine.analyze_trace(path, with_replay)
    runs: dict[str, list[tuple[float, float]]] = {"without": [], "with": []}
    # Interleaved, so a machine whose load changes slows both alike.
    for _ in range(args.repeat):
        runs["without"].append(_time(lambda: engine.analyze_trace(path, without)))
        runs["with"].append(_time(lambda: engine.analyze_trace(path, with_replay)))
    print(f"trace: {path}")
    print(
        f"replay: method={result.savings.method} ({result.savings.reason or 'replayed'}) "
        f"worst step error={result.savings.fidelity_error:.3%}"
    )
    print(f"{'':<9} {'best wall':>10} {'median wall':>12} {'best cpu':>10} {'median cpu':>11}")
    figures = {}
    for name, values in runs.items():
        walls = [w for w, _ in values]
        cpus = [c for _, c in values]
        figures[name] = (min(walls), statistics.median(walls), min(cpus), statistics.median(cpus))
        print(
            f"{name:<9} {figures[name][0]:>9.3f}s {figures[name][1]:>11.3f}s "
            f"{figures[name][2]:>9.3f}s {figures[name][3]:>10.3f}s"
        )
    ratios = [w / wo for w, wo in zip(figures["with"], figures["without"], strict=True)]
    print(
        f"{'ratio':<9} {ratios[0]:>9.2f}x {ratios[1]:>11.2f}x {ratios[2]:>9.2f}x "
        f"{ratios[3]:>10.2f}x"
    )
    verdict = "PASS" if ratios[3] <= TARGET else "MISS"
    print(
        f"analysis with the replay / without (median CPU time): {ratios[3]:.2f}x "
        f"(target <= {TARGET}x)  {verdict}"
    )
    return 0 if verdict == "PASS" else 1


if __name__ == "__main__":
    sys.exit(main())
