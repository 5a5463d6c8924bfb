"""Predicted vs measured job saving for a recording of ``bench/record_job_pair.py`` (issue 17).

    python bench/validate_job_pair.py DIR [--json]

For each variant that syncs (``baseline``: the late rank reads back; ``both``: every rank
does), the report over the variant's run folder gives the job's predicted saving per step
(the what-if replay of each rank without its syncs, re-timing the collectives) and the
saving each rank's own report predicts; the measured saving is the variant's unprofiled job
step minus the fixed one's, as the median and the range over the interleaved rounds.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

from tb_syncfinder.discovery import find_traces
from tb_syncfinder.engine import Options, analyze_runs

REPO = Path(__file__).resolve().parent.parent


def job_figures(run: Path, markers: dict[str, str]) -> dict[str, Any]:
    analysed = analyze_runs(find_traces(str(run)), Options(source_roots=[str(REPO)]))
    job = analysed.report.to_json().get("job") or {}
    steps = max(1, len(job.get("steps", [])))
    # Each rank's own prediction: every sync of its trace removed, per step of its trace.
    per_rank = {
        r.info.worker: {
            "predicted_saving_per_step_us": r.savings.all_syncs_us / max(1, len(r.steps)),
            "saving_method": r.savings.method,
        }
        for r in analysed.results
    }
    marked = [
        {
            "line": s.get("line"),
            "rank": s.get("rank"),
            "job_saving_per_step_us": s.get("job_saving_per_step_us"),
            "caused_wait_us": s.get("caused_wait_us"),
        }
        for s in job.get("sites", [])
        if str(s.get("line")) in markers
    ]
    return {
        "job_step_us": job.get("step_time_us", 0.0) / steps,
        "job_saving_per_step_us": job.get("job_saving_per_step_us"),
        "what_if": job.get("what_if"),
        "issues": [i.get("message") for i in job.get("issues", [])],
        "marked_sites": marked,
        "ranks": per_rank,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dir", type=Path)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    info = json.loads((args.dir / "job_pair.json").read_text())
    markers = info["markers"]
    fixed = info["variants"]["fixed"]
    rows = {}
    for variant, row in info["variants"].items():
        figures = job_figures(args.dir / row["run"], markers)
        if variant != "fixed" and row.get("rounds_ms") and fixed.get("rounds_ms"):
            per_round = [b - f for b, f in zip(row["rounds_ms"], fixed["rounds_ms"], strict=False)]
            figures["measured_saving_ms"] = row["median_ms"] - fixed["median_ms"]
            figures["measured_round_savings_ms"] = per_round
        figures["unprofiled_step_ms"] = row.get("median_ms")
        figures["warned"] = row.get("warned")
        rows[variant] = figures
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    print(
        f"{'variant':9} {'unprofiled':>10} {'profiled':>9} {'predicted':>9} "
        f"{'measured':>9} {'rounds':>16}  per-rank predicted"
    )
    for variant, r in rows.items():
        predicted = (r["job_saving_per_step_us"] or 0.0) / 1000
        rounds = r.get("measured_round_savings_ms") or []
        span = f"{min(rounds):.2f}..{max(rounds):.2f}" if rounds else "-"
        measured = r.get("measured_saving_ms")
        ranks = ", ".join(
            f"{w} {(v['predicted_saving_per_step_us'] or 0) / 1000:.2f}"
            for w, v in sorted(r["ranks"].items())
        )
        print(
            f"{variant:9} {r['unprofiled_step_ms'] or float('nan'):10.2f} "
            f"{r['job_step_us'] / 1000:9.2f} {predicted:9.2f} "
            f"{measured if measured is not None else float('nan'):9.2f} {span:>16}  {ranks}"
        )
        for site in r["marked_sites"]:
            print(
                f"    line {site['line']} rank {site['rank']}: job saving "
                f"{(site['job_saving_per_step_us'] or 0) / 1000:.2f} ms per step, caused "
                f"wait {(site['caused_wait_us'] or 0) / 1000:.2f} ms"
            )
        for issue in r["issues"]:
            print(f"    issue: {issue}")
    if any(r.get("measured_round_savings_ms") for r in rows.values()):
        medians = [
            statistics.median(r["measured_round_savings_ms"])
            for r in rows.values()
            if r.get("measured_round_savings_ms")
        ]
        print(f"median per-round measured savings: {', '.join(f'{m:.2f}' for m in medians)} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
