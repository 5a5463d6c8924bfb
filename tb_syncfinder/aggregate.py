"""Group syncs into sites (source line + operator), total them into a summary, and attach
the advice. Input: the per-trace results of ``engine.analyze_trace``; a pure function of
them (nothing is written back into the syncs)."""

from __future__ import annotations

from collections import Counter

from tb_syncfinder.catalogue import CHECKED, KIND_NAMES, advice_for
from tb_syncfinder.cost import estimated_saving_us, idle_union_us
from tb_syncfinder.models import Report, Site, Source, StepStats, Summary, Sync, TraceResult
from tb_syncfinder.query import rank_sites


def site_key(source: Source | None, op: str | None, api: str) -> str:
    """``file:line:op`` of a sync; without a source line, built from the operator and the
    API call."""
    if source is not None and source.file:
        return f"{source.file}:{source.line}:{op or api}"
    return f"{op or '-'}:{api}"


def build_sites(syncs: list[Sync], step_count: int, step_time_us: float,
                latent: bool = False) -> list[Site]:
    """Sites of these syncs (grouped by their ``site_key``), sorted by cost or count."""
    groups: dict[str, list[Sync]] = {}
    for sync in syncs:
        groups.setdefault(sync.site_key, []).append(sync)
    sites = []
    for key, members in groups.items():
        first = members[0]
        kind = Counter(s.kind for s in members).most_common(1)[0][0]
        ops: list[str] = []
        apis: list[str] = []
        for s in members:
            for name in s.op_chain:
                if name not in ops:
                    ops.append(name)
            for name in s.apis:
                if name not in apis:
                    apis.append(name)
        wait = sum(s.host_wait_us for s in members)
        idle = idle_union_us(members)
        source = first.source
        sites.append(
            Site(
                key=key,
                file=source.file if source else None,
                line=source.line if source else None,
                func=source.func if source else None,
                kind=kind,
                ops=ops,
                count=len(members),
                per_step=len(members) / step_count if step_count else float(len(members)),
                host_wait_us=wait,
                gpu_idle_us=idle,
                share_of_step=min(1.0, (wait + idle) / step_time_us) if step_time_us else 0.0,
                advice=advice_for(kind, ops),
                mean_host_wait_us=wait / len(members),
                line_exact=all(s.source is not None and s.source.line_exact for s in members),
                def_line=source.def_line if source else None,
                apis=apis,
                steps=sorted({s.step for s in members if s.step is not None}),
                latent=latent,
            )
        )
    return rank_sites(sites)


def build_report(results: list[TraceResult]) -> Report:
    """The report of one or more analysed traces (a run, or a worker/span of it)."""
    traces = [r.info for r in results]
    syncs = [s for r in results for s in r.syncs]
    latent = [s for r in results for s in r.latent]
    steps: list[StepStats] = [st for r in results for st in r.steps]
    step_count = len(steps)
    step_time = sum(st.step_time_us for st in steps)
    wait = sum(s.host_wait_us for s in syncs)
    idle = idle_union_us(syncs)
    saving = sum(estimated_saving_us(r.steps, r.syncs, r.info.step_markers) for r in results)
    mean_step = step_time / step_count if step_count else 0.0
    by_kind = Counter(s.kind for s in syncs)
    summary = Summary(
        sync_count=len(syncs),
        host_wait_us=wait,
        gpu_idle_us=idle,
        step_time_us=step_time,
        step_count=step_count,
        syncs_per_step=len(syncs) / step_count if step_count else float(len(syncs)),
        share_of_step=min(1.0, (wait + idle) / step_time) if step_time else 0.0,
        estimated_saving_us=saving,
        estimated_step_time_us=max(0.0, mean_step - saving / step_count) if step_count else 0.0,
        mean_step_time_us=mean_step,
        by_kind={k: by_kind[k] for k in KIND_NAMES if by_kind.get(k)},
        latent_count=len(latent),
        error_count=sum(1 for t in traces if t.error),
        checked=list(CHECKED),
    )
    return Report(
        traces=traces,
        summary=summary,
        syncs=syncs,
        sites=build_sites(syncs, step_count, step_time),
        latent=latent,
        steps=steps,
        latent_sites=build_sites(latent, step_count, step_time, latent=True),
    )
