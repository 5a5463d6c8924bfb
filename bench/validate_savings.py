"""Predicted vs measured saving of the what-if replay (issue 11), and its fidelity.

    python bench/validate_savings.py [--traces DIR] [--pair NAME BASE FIXED BASE_MS FIXED_MS]
                                     [--json OUT]

1. For paired runs (a baseline trace, the fixed program's trace, and both programs' step
   times measured without the profiler) it prints the saving the report predicts from the
   baseline trace alone (every sync of the program removed: the summary's
   ``predicted_saving_per_step_us``, the mean over every profiled step) next to the measured
   one, and their ratio; the replay's steady state (the steps after the first) beside it.
   Default pairs: the H100 demo runs in ``<traces>/h100_demo`` with their
   ``unprofiled_step_times.json`` (medians of interleaved rounds).
2. For every GPU trace under ``<traces>/real`` and ``<traces>/h100_demo`` it prints how well
   the unmodified replay reproduces the recorded step times (goal: within 2 % per step),
   and what the replayed window's critical path is made of.

The profiler's own ``cudaDeviceSynchronize`` (under ``torch/profiler`` frames, see
``../shared/KINETO_NOTES.md``) is not the program's: it is left out of "all syncs removed"
(``whatif.profiler_episodes``). Traces without Python stacks cannot tell it apart; it sits
after the last step in every trace here, so it moves nothing inside the window anyway.

Predictions come from profiled traces: their host time includes the profiler's overhead
(the demo's profiled steps take 5-10 ms, unprofiled 2-4 ms), so the share of the step is
printed next to the absolute figure, and the ratio of the shares next to that in ms (the
verdict's, as the report promises milliseconds).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tb_syncfinder import analyze  # noqa: E402
from tb_syncfinder.detect import detect_syncs  # noqa: E402
from tb_syncfinder.reader import read_trace  # noqa: E402
from tb_syncfinder.timeline import build_timeline  # noqa: E402
from tb_syncfinder.whatif import WhatIf, profiler_episodes, replay  # noqa: E402

DEFAULT_TRACES = [Path("/work/shared/traces"), REPO.parent / "shared" / "traces"]
SUFFIX = ".pt.trace.json.gz"
NO_GAIN_SHARE = 0.03  # below this share of the step a saving counts as "none"


@dataclass
class Pair:
    name: str
    base: Path
    fixed: Path
    base_ms: float
    fixed_ms: float


def _replay(path: Path) -> tuple[WhatIf, int, int]:
    tl = build_timeline(read_trace(str(path)))
    episodes = detect_syncs(tl)
    profiler = set(profiler_episodes(tl, episodes))
    counted = [i for i in range(len(episodes)) if i not in profiler]
    return replay(tl, episodes, counted=counted, explain=True), len(counted), len(profiler)


def _steady_interval(result: WhatIf, no_sync: bool = False) -> float:
    """Mean step time (completion to completion), leaving out the first step."""
    values = [s.no_sync_interval_us if no_sync else s.interval_us for s in result.steps]
    rest = values[1:] if len(values) > 1 else values
    return sum(rest) / len(rest) if rest else 0.0


def _report_figures(path: Path) -> dict[str, float]:
    """What ``tb-syncfinder report`` shows for a trace, per step (us): the promise checked."""
    summary = analyze(str(path)).summary
    steps = summary.step_count
    return {
        "predicted_saving_us": summary.predicted_saving_per_step_us or 0.0,
        "step_us": summary.mean_wall_step_time_us or summary.mean_step_time_us,
        "predicted_step_us": summary.predicted_step_time_us or 0.0,
        "bound_us": summary.estimated_saving_us / steps if steps else 0.0,
    }


def validate_pair(pair: Pair) -> dict[str, Any]:
    result, counted, profiler = _replay(pair.base)
    fixed, _, _ = _replay(pair.fixed)
    row: dict[str, Any] = {
        "pair": pair.name,
        "counted_syncs": counted,
        "profiler_syncs": profiler,
        "available": result.available,
        "reason": result.reason,
    }
    measured_ms = pair.base_ms - pair.fixed_ms
    row.update(
        measured_base_ms=pair.base_ms,
        measured_fixed_ms=pair.fixed_ms,
        measured_saving_ms=measured_ms,
        measured_share=measured_ms / pair.base_ms,
    )
    if not result.available:
        return row
    # The prediction checked is the report's ("saving ~X ms per step": the mean over every
    # profiled step). The replay's steady state (the steps after the first) is given beside
    # it: it leaves out the first step's warm-up, so it differs where that step does.
    report = _report_figures(pair.base)
    fixed_report = _report_figures(pair.fixed)
    step = report["step_us"]
    predicted = report["predicted_saving_us"]
    steady_step = _steady_interval(result)
    row.update(
        profiled_step_ms=step / 1e3,
        predicted_saving_ms=predicted / 1e3,
        predicted_share=predicted / step if step else 0.0,
        predicted_step_ms=report["predicted_step_us"] / 1e3,
        bound_saving_ms=report["bound_us"] / 1e3,
        profiled_fixed_step_ms=fixed_report["step_us"] / 1e3,
        fixed_steady_step_ms=_steady_interval(fixed) / 1e3 if fixed.available else None,
        steady_step_ms=steady_step / 1e3,
        steady_predicted_saving_ms=result.all_syncs.steady_us / 1e3,
        critical_path={k: v / result.window_us for k, v in result.critical_path.items()},
        device_busy_ms=(result.window_us - result.gpu_idle_us) / len(result.steps) / 1e3,
        host_blocked_ms=result.stats.get("blocked_us", 0.0) / len(result.steps) / 1e3,
        host_waiting_ms=result.stats.get("blocked_explained_us", 0.0) / len(result.steps) / 1e3,
    )
    share_m = row["measured_share"]
    share_p = row["predicted_share"]
    row["share_ratio"] = share_p / share_m if share_m > NO_GAIN_SHARE else None
    if share_m <= NO_GAIN_SHARE:
        row["verdict"] = (
            "agrees: no gain"
            if share_p <= NO_GAIN_SHARE
            else "predicts a gain the measurement does not show"
        )
        row["ratio"] = None
    else:
        # In ms, as the report promises it (the profiled step is longer than the unprofiled
        # one, so the ratio of shares is printed too).
        row["ratio"] = predicted / 1e3 / measured_ms
        row["verdict"] = "within 25 %" if abs(row["ratio"] - 1) <= 0.25 else "off"
    return row


def fidelity(path: Path) -> dict[str, Any]:
    result, counted, profiler = _replay(path)
    row: dict[str, Any] = {
        "trace": f"{path.parent.name}/{path.name[: -len(SUFFIX)]}",
        "available": result.available,
        "reason": result.reason,
    }
    if not result.available:
        return row
    row.update(
        steps=len(result.steps),
        step_markers=result.step_markers,
        worst_step_error=result.fidelity_error,
        per_step=[round(s.fidelity, 6) for s in result.steps],
        window_ms=result.window_us / 1e3,
        replayed_window_ms=result.replayed_window_us / 1e3,
        all_syncs_saving_per_step_ms=result.all_syncs.steady_us / 1e3,
        gpu_idle_share=result.gpu_idle_us / result.window_us if result.window_us else 0.0,
        gpu_idle_from_syncs_share=result.gpu_idle_share,
        counted_syncs=counted,
        profiler_syncs=profiler,
        critical_path={k: v / result.window_us for k, v in result.critical_path.items()},
        stats=result.stats,
        notes=result.notes,
    )
    return row


def _default_pairs(traces: Path) -> list[Pair]:
    return demo_pairs(traces / "h100_demo")


def demo_pairs(demo: Path) -> list[Pair]:
    """The demo's cnn and seg pairs in a folder written by ``bench/record_gpu_traces.py``."""
    times_file = demo / "unprofiled_step_times.json"
    if not times_file.is_file():
        return []
    runs = json.loads(times_file.read_text())["runs"]
    pairs = []
    for name in ("cnn", "seg"):
        base, fixed = f"{name}_baseline", f"{name}_optimized"
        if base in runs and fixed in runs:
            pairs.append(
                Pair(
                    name,
                    demo / f"{base}{SUFFIX}",
                    demo / f"{fixed}{SUFFIX}",
                    runs[base]["median_ms"],
                    runs[fixed]["median_ms"],
                )
            )
    return pairs


def recorded_pairs(folder: Path) -> list[Pair]:
    """The pairs in a folder written by ``bench/record_savings_pairs.py`` (``pairs.json``)."""
    info = json.loads((folder / "pairs.json").read_text(encoding="utf-8"))
    pairs = []
    for name, row in info["pairs"].items():
        if "error" in row:
            print(f"validate_savings: {name}: not recorded: {row['error']}", file=sys.stderr)
            continue
        pairs.append(
            Pair(
                name,
                folder / row["baseline"]["trace"],
                folder / row["fixed"]["trace"],
                row["baseline"]["median_ms"],
                row["fixed"]["median_ms"],
            )
        )
    return pairs


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:6.1%}"


def _print_pairs(rows: list[dict[str, Any]]) -> None:
    print("Predicted (the report's figure) vs measured saving per step, every sync removed")
    print(
        f"{'pair':<20} {'syncs':>5} {'profiled':>9} {'predicted':>17} {'bound today':>12} "
        f"{'measured (unprofiled)':>29} {'ratio':>6} {'ratio':>7}  verdict"
    )
    print(
        f"{'':<20} {'':>5} {'step ms':>9} {'ms / share':>17} {'ms':>12} "
        f"{'base -> fixed: saving / share':>29} {'(ms)':>6} {'(share)':>7}"
    )
    for r in rows:
        if not r["available"]:
            print(f"{r['pair']:<20} replay unavailable: {r['reason']}")
            continue
        ratio = "n/a" if r["ratio"] is None else f"{r['ratio']:.2f}"
        share_ratio = "n/a" if r["share_ratio"] is None else f"{r['share_ratio']:.2f}"
        measured = (
            f"{r['measured_base_ms']:.2f} -> {r['measured_fixed_ms']:.2f}: "
            f"{r['measured_saving_ms']:+.2f} / {r['measured_share']:+.1%}"
        )
        print(
            f"{r['pair']:<20} {r['counted_syncs']:>5} {r['profiled_step_ms']:>9.2f} "
            f"{r['predicted_saving_ms']:>8.3f} / {r['predicted_share']:>6.1%} "
            f"{r['bound_saving_ms']:>12.3f} {measured:>29} {ratio:>6} {share_ratio:>7}  "
            f"{r['verdict']}"
        )
    for r in rows:
        if r["available"]:
            path = ", ".join(f"{k} {v:.0%}" for k, v in r["critical_path"].items() if v >= 0.005)
            fixed = r["profiled_fixed_step_ms"]
            print(
                f"  {r['pair']}: profiled baseline step {r['profiled_step_ms']:.2f} ms "
                f"(critical path: {path}); with its syncs removed "
                f"{r['predicted_step_ms']:.2f} ms (the replay's steady state, steps after "
                f"the first: {r['steady_step_ms']:.2f} -> "
                f"{r['steady_step_ms'] - r['steady_predicted_saving_ms']:.2f} ms); the fixed "
                f"program's profiled step {fixed:.2f} ms (steady: "
                f"{r['fixed_steady_step_ms'] or float('nan'):.2f} ms). Per step the device is busy "
                f"{r['device_busy_ms']:.2f} ms, the host sits in sync calls "
                f"{r['host_blocked_ms']:.3f} ms, {r['host_waiting_ms']:.3f} ms of it "
                f"waiting for the device. {r['profiler_syncs']} profiler sync left out."
            )
            if r["bound_saving_ms"] == 0 and r["counted_syncs"]:
                print(
                    f"  {r['pair']}: today's bound is 0: the engine attributes these syncs "
                    "to no step (Timeline.steps also holds the device lane's "
                    "ProfilerStep spans)"
                )


def _print_fidelity(rows: list[dict[str, Any]]) -> None:
    print()
    print("Unmodified replay vs recording, every GPU trace (goal: within 2 % per step)")
    print(
        f"{'trace':<34} {'steps':>5} {'worst step':>10} {'window ms':>11} {'replayed':>10} "
        f"{'all syncs':>10} {'GPU idle':>8} {'by syncs':>8}  critical path"
    )
    for r in rows:
        if not r["available"]:
            print(f"{r['trace']:<34} replay unavailable: {r['reason']}")
            continue
        steps = f"{r['steps']}" if r["step_markers"] else "1*"
        path = ", ".join(f"{k} {v:.0%}" for k, v in r["critical_path"].items() if v >= 0.005)
        ok = "ok" if r["worst_step_error"] <= 0.02 else "MISS"
        print(
            f"{r['trace']:<34} {steps:>5} {r['worst_step_error']:>8.3%} {ok:<2}"
            f"{r['window_ms']:>10.2f} {r['replayed_window_ms']:>10.2f} "
            f"{r['all_syncs_saving_per_step_ms']:>7.3f} ms {_pct(r['gpu_idle_share'])} "
            f"{_pct(r['gpu_idle_from_syncs_share'])}  {path}"
        )
        for note in r["notes"]:
            print(f"{'':<36}note: {note}")
    print(
        "  all syncs: predicted saving per step with every counted sync removed; "
        "1* = no ProfilerStep markers (the trace is one step)"
    )


def _traces_dir(arg: str | None) -> Path | None:
    for candidate in [Path(arg)] if arg else DEFAULT_TRACES:
        if candidate.is_dir():
            return candidate
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--traces", help="the shared traces folder (real/, h100_demo/)")
    parser.add_argument(
        "--pair",
        nargs=5,
        action="append",
        default=[],
        metavar=("NAME", "BASE", "FIXED", "BASE_MS", "FIXED_MS"),
        help="a paired run: traces and unprofiled step times (repeatable)",
    )
    parser.add_argument(
        "--pairs-dir",
        action="append",
        default=[],
        type=Path,
        help="a folder of bench/record_savings_pairs.py (pairs.json) or of "
        "bench/record_gpu_traces.py (unprofiled_step_times.json); repeatable",
    )
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args(argv)
    traces = _traces_dir(args.traces)
    if traces is None:
        print("validate_savings: no traces folder found", file=sys.stderr)
        return 2
    pairs = [Pair(n, Path(b), Path(f), float(bm), float(fm)) for n, b, f, bm, fm in args.pair]
    for folder in args.pairs_dir:
        pairs += recorded_pairs(folder) if (folder / "pairs.json").is_file() else demo_pairs(folder)
    pairs = pairs or _default_pairs(traces)
    pair_rows = [validate_pair(p) for p in pairs]
    _print_pairs(pair_rows)
    gpu_traces = sorted((traces / "real").glob(f"*{SUFFIX}")) + sorted(
        (traces / "h100_demo").glob(f"*{SUFFIX}")
    )
    fidelity_rows = [fidelity(p) for p in gpu_traces]
    fidelity_rows = [
        r
        for r in fidelity_rows
        if r["available"] or "no device activity" not in (r["reason"] or "")
    ]
    _print_fidelity(fidelity_rows)
    if args.json:
        Path(args.json).write_text(
            json.dumps({"pairs": pair_rows, "fidelity": fidelity_rows}, indent=1, default=str)
        )
    misses = sum(1 for r in fidelity_rows if r["available"] and r["worst_step_error"] > 0.02)
    return 1 if misses else 0


if __name__ == "__main__":
    sys.exit(main())
