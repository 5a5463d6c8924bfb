"""The engine's sync-attributed GPU idle next to the idle time HolisticTraceAnalysis measures.

    pip install HolisticTraceAnalysis      # benchmark environment only (not a dependency)
    python bench/hta_idle_compare.py [TRACE ...] [--out results.md]

Without TRACE arguments it compares the GPU traces in ``../shared/traces/real/`` and the
bundled demo traces (``tb_syncfinder/demo/traces/``) that exist.

Per trace:
- engine: the syncs, their host wait, and ``gpu_idle_after_us`` summed (the GPU bubbles the
  syncs left: from each sync's return to the device's next activity);
- HTA: ``get_temporal_breakdown`` idle time (time in the GPU span when no kernel, memcpy or
  memset runs on any stream) and ``get_idle_time_breakdown`` per idle category (host wait,
  kernel wait, other; summed over streams, so it can exceed the device-level idle);
- consistency: the part of the engine's idle intervals that lies inside HTA's analysed span
  and overlaps none of the GPU activity HTA parsed. The attributed idle must be idle for HTA
  too (close to 100 %) and can only be a part of HTA's total idle (syncs are one cause of
  idleness among others: launch overhead, data loading, the Python between kernels).
"""

from __future__ import annotations

import argparse
import bisect
import contextlib
import io
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHARED_REAL = REPO.parent / "shared" / "traces" / "real"
BUNDLED = REPO / "tb_syncfinder" / "demo" / "traces"
# CPU-only traces have no GPU activity to compare.
SKIP_NAMES = ("cpu_legacy_call_stack",)


@dataclass
class Comparison:
    trace: str
    engine_syncs: int
    engine_host_wait_us: float
    engine_idle_us: float  # the report's summary.gpu_idle_us
    engine_idle_sum_us: float  # sum of the syncs' gpu_idle_after_us
    engine_idle_union_us: float  # union of their idle intervals
    engine_idle_in_span_us: float
    engine_idle_confirmed_us: float  # of the in-span part, what HTA also sees as idle
    hta_span_us: float
    hta_idle_us: float
    hta_host_wait_us: float
    hta_kernel_wait_us: float
    hta_other_us: float
    engine_seconds: float
    hta_seconds: float


def _import_hta():
    try:
        from hta.trace_analysis import TraceAnalysis
    except ImportError as error:
        raise SystemExit(
            "hta_idle_compare: HolisticTraceAnalysis is not installed "
            f"({error}); install it in the benchmark environment only: "
            "pip install HolisticTraceAnalysis"
        ) from error
    return TraceAnalysis


def _merge(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
    merged: list[tuple[float, float]] = []
    for start, end in sorted(intervals):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def _overlap(start: float, end: float, busy: list[tuple[float, float]], starts: list[float]):
    """Time of [start, end) covered by the merged, sorted ``busy`` intervals."""
    covered = 0.0
    i = max(bisect.bisect_right(starts, start) - 1, 0)
    while i < len(busy) and busy[i][0] < end:
        covered += max(0.0, min(end, busy[i][1]) - max(start, busy[i][0]))
        i += 1
    return covered


def hta_measure(path: Path):
    """HTA's idle numbers and the GPU activity intervals it parsed (trace clock, us)."""
    trace_analysis = _import_hta()
    with tempfile.TemporaryDirectory(prefix="hta-") as folder:
        # HTA reads every trace of a folder as one rank each: give it this one alone.
        (Path(folder) / path.name).symlink_to(path.resolve())
        quiet = io.StringIO()
        with contextlib.redirect_stdout(quiet), contextlib.redirect_stderr(quiet):
            analysis = trace_analysis(trace_dir=folder)
            temporal = analysis.get_temporal_breakdown(visualize=False)
            idle, _ = analysis.get_idle_time_breakdown(
                ranks=list(analysis.t.traces), visualize=False
            )
        frames = list(analysis.t.traces.values())
    categories = idle.groupby("idle_category")["idle_time"].sum().to_dict()
    busy = []
    for frame in frames:
        gpu = frame[frame["stream"].ne(-1)]
        # HTA shifts ``ts`` to start at 0 but keeps ``end`` on the trace's clock.
        busy += list(zip((gpu["end"] - gpu["dur"]).tolist(), gpu["end"].tolist(), strict=True))
    return temporal, categories, _merge(busy)


def compare(path: Path) -> Comparison:
    from tb_syncfinder import analyze

    started = time.perf_counter()
    report = analyze(str(path))
    engine_seconds = time.perf_counter() - started
    errors = [t.error for t in report.traces if t.error]
    if errors:
        raise SystemExit(f"{path}: the engine cannot read it: {errors[0]}")
    started = time.perf_counter()
    temporal, categories, busy = hta_measure(path)
    hta_seconds = time.perf_counter() - started
    starts = [b[0] for b in busy]
    span = (busy[0][0], busy[-1][1]) if busy else (0.0, 0.0)
    # Several syncs in a row can share one bubble (each one's idle runs to the same next
    # activity): compare the union of the intervals, not their sum.
    attributed = _merge(
        [
            (s.end_us, s.end_us + s.gpu_idle_after_us)
            for s in report.syncs
            if s.gpu_idle_after_us > 0
        ]
    )
    in_span = confirmed = 0.0
    for idle_start, idle_end in attributed:
        start, end = max(idle_start, span[0]), min(idle_end, span[1])
        if end <= start:
            continue
        in_span += end - start
        confirmed += (end - start) - _overlap(start, end, busy, starts)
    return Comparison(
        trace=path.name.replace(".pt.trace.json.gz", ""),
        engine_syncs=report.summary.sync_count,
        engine_host_wait_us=report.summary.host_wait_us,
        engine_idle_us=report.summary.gpu_idle_us,
        engine_idle_sum_us=sum(s.gpu_idle_after_us for s in report.syncs),
        engine_idle_union_us=sum(end - start for start, end in attributed),
        engine_idle_in_span_us=in_span,
        engine_idle_confirmed_us=confirmed,
        hta_span_us=float(temporal["kernel_time(us)"].sum()),
        hta_idle_us=float(temporal["idle_time(us)"].sum()),
        hta_host_wait_us=float(categories.get("host_wait", 0.0)),
        hta_kernel_wait_us=float(categories.get("kernel_wait", 0.0)),
        hta_other_us=float(categories.get("other", 0.0)),
        engine_seconds=engine_seconds,
        hta_seconds=hta_seconds,
    )


def _ms(us: float) -> str:
    return f"{us / 1000:.2f}"


def _pct(part: float, whole: float) -> str:
    return "-" if whole <= 0 else f"{100 * part / whole:.1f} %"


def render(rows: list[Comparison]) -> str:
    import hta

    import tb_syncfinder

    version = getattr(hta, "__version__", None)
    if version is None:
        from importlib.metadata import version as dist_version

        version = dist_version("HolisticTraceAnalysis")
    lines = [
        f"HolisticTraceAnalysis {version}, tb-syncfinder {tb_syncfinder.__version__}, "
        f"Python {sys.version.split()[0]}",
        "",
        "| trace | syncs | host wait ms | engine GPU idle ms (summary / sum / union) "
        "| of the union, in HTA span ms "
        "| of that, idle for HTA too | HTA GPU span ms | HTA idle ms | engine idle / HTA idle "
        "| HTA host-wait / kernel-wait / other ms (per stream, summed) | engine s | HTA s |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r.trace} | {r.engine_syncs} | {_ms(r.engine_host_wait_us)} | "
            f"{_ms(r.engine_idle_us)} / {_ms(r.engine_idle_sum_us)} / "
            f"{_ms(r.engine_idle_union_us)} | {_ms(r.engine_idle_in_span_us)} | "
            f"{_pct(r.engine_idle_confirmed_us, r.engine_idle_in_span_us)} | "
            f"{_ms(r.hta_span_us)} | {_ms(r.hta_idle_us)} | "
            f"{_pct(r.engine_idle_in_span_us, r.hta_idle_us)} | "
            f"{_ms(r.hta_host_wait_us)} / {_ms(r.hta_kernel_wait_us)} / {_ms(r.hta_other_us)} | "
            f"{r.engine_seconds:.2f} | {r.hta_seconds:.2f} |"
        )
    return "\n".join(lines) + "\n"


def default_traces() -> list[Path]:
    traces = []
    for folder in (SHARED_REAL, BUNDLED):
        if folder.is_dir():
            traces += sorted(
                p
                for p in folder.glob("*.pt.trace.json.gz")
                if not any(p.name.startswith(name) for name in SKIP_NAMES)
            )
    return traces


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("traces", nargs="*", type=Path)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    _import_hta()
    traces = args.traces or default_traces()
    if not traces:
        print(
            f"hta_idle_compare: no traces given and none in {SHARED_REAL} or {BUNDLED}",
            file=sys.stderr,
        )
        return 2
    rows = []
    for path in traces:
        if not path.is_file():
            print(f"hta_idle_compare: {path}: no such file", file=sys.stderr)
            return 2
        try:
            rows.append(compare(path))
        except SystemExit:
            raise
        except Exception as error:  # one trace HTA cannot take must not hide the others
            print(f"hta_idle_compare: {path}: {type(error).__name__}: {error}", file=sys.stderr)
        else:
            print(f"compared {path.name}", file=sys.stderr)
    text = render(rows)
    print(text)
    if args.out:
        args.out.write_text(text, encoding="utf-8")
    return 0 if rows else 1


if __name__ == "__main__":
    sys.exit(main())
