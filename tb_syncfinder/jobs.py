"""The job stage wired into the pipeline (issue 17): per trace, its ``RankTrace``; per run,
its traces seen as one job (``ranks.py``), folded back into the run's report.

Per trace (``rank_trace``, called by ``engine`` while the timeline is in memory): the rank's
collectives, steps and host waits, or None for a trace without ``distributedInfo``. It rides
on ``TraceResult.rank`` through the summaries and the Ray fan-out.

Per run (``job_stage``, called by ``engine.report_runs`` before aggregation):

1. group the run's rank traces into jobs and analyse each (``ranks.analyze_ranks``);
2. the what-ifs (``job_what_ifs``: the one place a replay plugs in; bounds until then);
3. relabel, on ranks that were waiting for a late peer, the syncs whose wait was that wait
   (``Sync.waiting_for_rank`` / ``peer_wait_us``);
4. after aggregation (``JobStage.annotate``): per site the wait it causes on other ranks and
   the job-level saving, the peer-wait part and the local saving net of it; and the run's
   ``Report.job`` object (``JobStage.to_json``).

A run none of whose traces is a rank (``distributedInfo`` with a world size above 1) is not a
job: no stage, nothing changes.
"""

from __future__ import annotations

import dataclasses
import os
from collections import Counter, defaultdict
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import msgspec

from tb_syncfinder import ranks as R
from tb_syncfinder.collectives import (
    RankTrace,
    ReaderArgs,
    extract_rank,
    parse_distributed_info,
)
from tb_syncfinder.models import (
    BLOCKING_CALL,
    HostWait,
    Report,
    Site,
    Sync,
    TraceInfo,
    TraceRef,
    TraceResult,
)
from tb_syncfinder.timeline import Timeline

__all__ = ["JobStage", "ReplayedEarlier", "job_stage", "job_what_ifs", "rank_trace"]

# Per rank: wait id (a Sync.id or blocking call id) -> that rank's collective index -> how
# much earlier the rank would have arrived there without that wait (a what-if replay).
ReplayedEarlier = Mapping[int, Mapping[str, Mapping[int, float]]]

TOP_SITES = 50  # job sites kept in the JSON, by job saving


def rank_trace(
    tl: Timeline,
    ref: TraceRef,
    distributed_info: Mapping[str, Any] | None,
    syncs: Sequence[Sync],
    resolver: Any,
    id_prefix: str,
    base_time_ns: int | None = None,
    host_name: str | None = None,
) -> RankTrace | None:
    """The job stage's input from one trace; None for a trace that is no rank of a job
    (no ``distributedInfo``, or a world size of 1).

    The collective arguments and clock facts are the reader's (``ReaderArgs``)."""
    if not isinstance(distributed_info, Mapping):
        return None
    dist = parse_distributed_info(distributed_info)
    if dist is None or dist.world_size is None or dist.world_size <= 1:
        return None
    return extract_rank(
        tl,
        distributed_info,
        comm=ReaderArgs(base_time_ns, host_name),
        syncs=syncs,
        resolver=resolver,
        worker=ref.worker,
        id_prefix=id_prefix,
    )


def job_what_ifs(
    analysis: R.JobAnalysis, replayed: ReplayedEarlier | None = None
) -> tuple[list[R.WhatIf], bool]:
    """The what-ifs the job is costed with, and whether any is a bound.

    ``replayed``: a what-if replay's results per rank (``ReplayedEarlier``); the ranks it
    covers are costed with them (``ranks.what_ifs_for_rank``), the others with the bounds of
    ``ranks.fallback_what_ifs`` (a late rank's host wait explains at most min(its wait, the
    lateness))."""
    replayed = {
        rank: earlier for rank, earlier in (replayed or {}).items() if rank in analysis.ranks
    }
    # Per (rank, wait, collective): the replay's figure where it has one, else the bound.
    # The replay knows syncs, and collectives with a kernel or (gloo) an enqueue; blocking
    # calls keep their bounds.
    covered = {
        (rank, wait_id, index)
        for rank, earlier in replayed.items()
        for wait_id, per in earlier.items()
        for index in per
    }
    # A wait the replay moved some collective by was replayed at every collective it can
    # re-time (a kernel's, or a gloo collective's enqueue): where it gave no figure, the
    # wait did not delay that collective, and a bound there would only add slivers.
    retimed = {
        rank: {c.index for c in analysis.ranks[rank].collectives if c.retimed}
        for rank in replayed
        if rank in analysis.ranks
    }
    out = [
        w
        for w in R.fallback_what_ifs(analysis)
        if (w.rank, w.wait_id, w.collective_index) not in covered
        and not (
            w.wait_id in replayed.get(w.rank, {}) and w.collective_index in retimed.get(w.rank, ())
        )
    ]
    for rank, earlier in replayed.items():
        out.extend(R.what_ifs_for_rank(rank, earlier))
    return out, any(w.bound for w in out)


@dataclass
class _JobFigures:
    analysis: R.JobAnalysis
    costs: list[R.SiteJobCost]
    arrivals: list[R.LateArrival]
    peer_waits: list[R.PeerWait]
    bound: bool
    costed: bool  # any what-if at all (none where no host wait could be costed)


@dataclass
class JobStage:
    """One run's job analysis, ready to fold into its report."""

    jobs: list[_JobFigures]
    issues: list[R.JobIssue]  # about traces in no job
    results: list[TraceResult]  # the run's results, syncs relabelled

    def annotate(self, report: Report) -> None:
        """Add the job-level site fields and the ``job`` object to the run's report."""
        costs = [c for j in self.jobs for c in j.costs]
        by_site: dict[str, list[R.SiteJobCost]] = defaultdict(list)
        for c in costs:
            by_site[c.site_key].append(c)
        peer: dict[str, Counter[int]] = defaultdict(Counter)
        waited: dict[str, Counter[int]] = defaultdict(Counter)  # syncs per late rank
        for sync in (s for r in self.results for s in r.syncs + r.latent):
            if sync.waiting_for_rank is not None and sync.peer_wait_us > 0:
                peer[sync.site_key][sync.waiting_for_rank] += sync.peer_wait_us
                waited[sync.site_key][sync.waiting_for_rank] += 1
        for site in report.sites + report.latent_sites:
            _annotate_site(
                site, by_site.get(site.key, []), peer.get(site.key), waited.get(site.key)
            )
        report.job = self.to_json()

    def to_json(self) -> dict[str, Any]:
        """The run's ``job`` object: its main job (most ranks) in full, others named."""
        run_issues = [_issue(i) for i in self.issues]
        if not self.jobs:
            return {
                "key": None,
                "world_size": None,
                "ranks": [],
                "missing_ranks": [],
                "complete": False,
                "issues": run_issues,
                "other_jobs": [],
            }
        main, *others = sorted(self.jobs, key=lambda j: -len(j.analysis.ranks))
        doc = _job_json(main)
        doc["issues"] = doc["issues"] + run_issues
        doc["other_jobs"] = [_job_json(j) for j in others]
        return doc


def _annotate_site(
    site: Site,
    costs: list[R.SiteJobCost],
    peer: Counter[int] | None,
    waited: Counter[int] | None = None,
) -> None:
    site.caused_wait_us = sum((c.caused_wait_us for c in costs), 0.0)
    site.job_saving_us = sum((c.job_saving_us for c in costs), 0.0)
    site.job_saving_per_step_us = sum((c.job_saving_per_step_us for c in costs), 0.0)
    site.peer_wait_us = min(sum(peer.values()), site.host_wait_us) if peer else 0.0
    if peer:
        late_rank = peer.most_common(1)[0][0]
        site.waiting_for_rank = late_rank
        # A site merges the line's syncs of every rank, the late rank's own among them
        # (they waited for no one): say how many of them waited for it.
        count = (waited or Counter()).get(late_rank, 0)
        site.waiting_for = (
            f"{count} of its {site.count} syncs waiting for rank {late_rank}"
            if count and count < site.count
            else f"waiting for rank {late_rank}"
        )
    site.local_saving_us = max(0.0, site.host_wait_us + site.gpu_idle_us - site.peer_wait_us)


def _issue(issue: R.JobIssue) -> dict[str, Any]:
    return dataclasses.asdict(issue)


def _rank_totals(j: _JobFigures) -> list[dict[str, Any]]:
    """Per rank: host wait in syncs and blocking calls beside its wait in collectives."""
    rows: dict[int, dict[str, Any]] = {}
    for rank, rt in sorted(j.analysis.ranks.items()):
        rows[rank] = {
            "rank": rank,
            "worker": rt.worker,
            "path": rt.path,
            "host": rt.host_name,
            "collectives": len(rt.collectives),
            "steps": len(rt.steps),
            "sync_wait_us": sum((w.wait_us for w in rt.waits if w.is_sync), 0.0),
            "blocking_wait_us": sum((w.wait_us for w in rt.waits if not w.is_sync), 0.0),
            "wait_in_collectives_us": 0.0,
            "late_us": 0.0,
            "caused_wait_us": 0.0,
            "carried_in_us": 0.0,
            "peer_wait_in_syncs_us": 0.0,
        }
    for rs in j.analysis.rank_steps:
        row = rows.get(rs.rank)
        if row is not None:
            row["wait_in_collectives_us"] += rs.wait_us
            row["late_us"] += rs.late_us
            row["caused_wait_us"] += rs.caused_wait_us
            row["carried_in_us"] += rs.carried_in_us
    for pw in j.peer_waits:
        if pw.rank in rows:
            rows[pw.rank]["peer_wait_in_syncs_us"] += pw.overlap_us
    return list(rows.values())


def _lateness_totals(arrivals: list[R.LateArrival]) -> dict[str, float]:
    """All lateness, and how much of it host waits explain, was carried in from before the
    window, or is not explained by host waits (never pinned on a sync)."""
    carried = sum((a.unexplained_us for a in arrivals if a.carried_in), 0.0)
    return {
        "late_us": sum((a.lateness_us for a in arrivals), 0.0),
        "explained_us": sum((a.explained_us for a in arrivals), 0.0),
        "carried_in_us": carried,
        "not_explained_us": sum((a.unexplained_us for a in arrivals if not a.carried_in), 0.0),
    }


def _job_json(j: _JobFigures) -> dict[str, Any]:
    a = j.analysis
    job_step_us = sum(s.time_us for s in a.job_steps)
    saving = sum((c.job_saving_us for c in j.costs), 0.0)
    return {
        "key": a.job.key,
        "world_size": a.job.world_size,
        "backend": a.job.backend,
        "ranks": sorted(a.ranks),
        "missing_ranks": list(a.job.missing),
        "complete": not a.job.missing,
        "issues": [_issue(i) for i in a.issues],
        "noise_us": a.noise_us,
        "clocks": [dataclasses.asdict(c) for c in a.clocks],
        "groups": [
            {**dataclasses.asdict(g), "counts": {str(k): v for k, v in g.counts.items()}}
            for g in a.groups
        ],
        "collective_count": len(a.collectives),
        "late_collective_count": sum(1 for c in a.collectives if c.last_rank is not None),
        "steps": [dataclasses.asdict(s) for s in a.job_steps],
        "step_time_us": job_step_us,
        "rank_steps": [dataclasses.asdict(s) for s in a.rank_steps],
        "rank_totals": _rank_totals(j),
        "sites": [dataclasses.asdict(c) for c in j.costs[:TOP_SITES]],
        "site_count": len(j.costs),
        "job_saving_us": saving,
        "job_saving_per_step_us": saving / a.step_count,
        "what_if": "bound" if j.bound else "replay" if j.costed else "none",
        "late_arrivals": [
            {
                **dataclasses.asdict(x),
                "contributors": [
                    {"wait_id": w, "site_key": k, "earlier_us": us} for w, k, us in x.contributors
                ],
            }
            for x in j.arrivals
        ],
        "lateness": _lateness_totals(j.arrivals),
    }


def _site_savings_per_step(
    results: Sequence[TraceResult],
) -> tuple[dict[str, dict[str, float]], set[str]]:
    """Per trace (its path): site key -> what removing the site saves its rank per step.
    By path: a run may hold several jobs, or several profiled windows of one, with the same
    rank numbers.

    A replayed trace: its replay's savings. Any other (a CPU-only gloo rank, a trace the
    replay could not take): upper bounds, its sites' bounds and the time its blocking calls
    (``time.sleep``, a lock, a queue) held the rank. Without those, a rank that sleeps
    before its collectives and sets the job's pace got no pace figure: its line was costed
    22 ms a step as an "upper bound" where fixing it saved 31-37 ms. Only blocking calls
    inside a step count (``collectives`` keeps those of the threads that run the steps).
    Also returns the paths whose figures are such bounds."""
    out: dict[str, dict[str, float]] = {}
    bounds: set[str] = set()
    for r in results:
        if r.rank is None:
            continue
        steps = max(1, len(r.rank.steps))
        if r.savings.method == "replay":
            out[r.rank.path] = {key: us / steps for key, us in r.savings.sites.items() if us > 0}
            continue
        totals = {key: us for key, us in r.savings.sites.items() if us > 0}
        for wait in r.rank.waits:
            if wait.kind == BLOCKING_CALL and wait.wait_us > 0 and wait.step is not None:
                totals[wait.site_key] = totals.get(wait.site_key, 0.0) + wait.wait_us
        out[r.rank.path] = {key: us / steps for key, us in totals.items()}
        bounds.add(r.rank.path)
    return out, bounds


def _with_pace(
    analysis: R.JobAnalysis,
    costs: list[R.SiteJobCost],
    per_step: Mapping[str, Mapping[str, float]],
    bound_paths: Collection[str] = (),
) -> None:
    """Each site's job saving (the sum over its ranks' rows) at least what it saves the job
    in a long run (``ranks.paced_savings``): the profiled window may end before a rank that
    falls behind a step at a time makes the others wait. The difference goes to the pace
    rank's row of the site, added where it has none."""
    paced = R.paced_savings(
        analysis,
        {rank: per_step.get(rt.path, {}) for rank, rt in analysis.ranks.items()},
    )
    if not paced:
        return
    steps = analysis.step_count
    by_key = {(c.rank, c.site_key): c for c in costs}
    # Each key's rows gathered in one pass (a pass per paced site was quadratic in a job's
    # sites), in list order, and added up by ``sum`` as before: since Python 3.12 ``sum``
    # compensates its rounding, which a running total would not. Only a key's own rows
    # change in the loop below.
    rows_by_key: dict[str, list[float]] = {}
    for c in costs:
        rows_by_key.setdefault(c.site_key, []).append(c.job_saving_us)
    waits_by_rank: dict[int, dict[str, list[HostWait]]] = {}
    for key, (saving, rank) in paced.items():
        total = saving * steps
        counted = sum(rows_by_key.get(key, ()))
        if total <= counted:
            continue
        # From a rank without a replay the pace figure is an upper bound, said as such.
        bound = analysis.ranks[rank].path in bound_paths
        found = by_key.get((rank, key))
        if found is not None:
            found.job_saving_us += total - counted
            found.job_saving_per_step_us = found.job_saving_us / steps
            found.bound = found.bound or bound
            continue
        waits_by_key = waits_by_rank.get(rank)
        if waits_by_key is None:
            waits_by_key = waits_by_rank[rank] = {}
            for w in analysis.ranks[rank].waits:
                waits_by_key.setdefault(w.site_key, []).append(w)
        waits = waits_by_key.get(key)
        if not waits:
            continue
        wait = waits[0]
        costs.append(
            R.SiteJobCost(
                site_key=key,
                rank=rank,
                file=wait.file,
                line=wait.line,
                func=wait.func,
                kind=wait.kind,
                op=wait.op,
                is_sync=wait.is_sync,
                wait_ids=[w.id for w in waits],
                caused_wait_us=0.0,
                job_saving_us=total - counted,
                job_saving_per_step_us=(total - counted) / steps,
                late_collectives=0,
                steps=[],
                bound=bound,
                line_exact=wait.line_exact,
            )
        )
    costs.sort(key=lambda s: (-s.job_saving_us, -s.caused_wait_us, s.rank, s.site_key))


def _relabelled(results: Sequence[TraceResult], peer_waits: list[R.PeerWait]) -> list[TraceResult]:
    """The results with each sync that absorbed a wait for a late peer relabelled: its
    peer-wait part (capped at its host wait) and the peer it mostly waited for."""
    per_sync: dict[str, Counter[int]] = defaultdict(Counter)
    for pw in peer_waits:
        per_sync[pw.wait_id][pw.late_rank] += pw.overlap_us
    if not per_sync:
        return list(results)

    def relabel(syncs: list[Sync]) -> list[Sync]:
        out = []
        for s in syncs:
            peers = per_sync.get(s.id)
            if peers:
                s = msgspec.structs.replace(
                    s,
                    waiting_for_rank=peers.most_common(1)[0][0],
                    peer_wait_us=min(sum(peers.values()), s.host_wait_us),
                )
            out.append(s)
        return out

    return [
        msgspec.structs.replace(r, syncs=relabel(r.syncs), latent=relabel(r.latent))
        if any(s.id in per_sync for s in r.syncs + r.latent)
        else r
        for r in results
    ]


def _unreadable_may_be_missing(missing: list[int], unreadable: list[TraceInfo]) -> R.JobIssue:
    """A rank said to have no trace where the run holds a trace that could not be read: that
    trace may be the rank's (a trace that cannot be read says no rank), which "no trace of
    rank 1" beside rank1.pt.trace.json did not say."""
    shown = unreadable[:4]
    more = f" and {len(unreadable) - len(shown)} more" if len(unreadable) > len(shown) else ""
    return R.JobIssue(
        R.UNREADABLE_TRACES,
        f"{len(unreadable)} {'trace' if len(unreadable) == 1 else 'traces'} of this run "
        "could not be read ("
        + "; ".join(f"{os.path.basename(t.path)}: {t.error}" for t in shown)
        + f"{more}): the trace of {'rank' if len(missing) == 1 else 'ranks'} "
        f"{', '.join(map(str, missing[:12]))}{' ...' if len(missing) > 12 else ''} "
        "may be among them",
        ranks=list(missing),
        paths=[t.path for t in unreadable],
    )


def _say_ranks_without_device_activity(
    analysis: R.JobAnalysis, on_device: Mapping[str, bool]
) -> None:
    """A rank with no device activity in a job whose other ranks have some: profiled
    without the device (``ProfilerActivity.CUDA`` left out on that rank), its syncs and
    step times are not the device's, which nothing else in the report says."""
    without = sorted(r for r, rt in analysis.ranks.items() if not on_device.get(rt.path, True))
    if not without or len(without) == len(analysis.ranks):
        return
    analysis.issues.append(
        R.JobIssue(
            R.NO_DEVICE_ACTIVITY,
            f"{'rank' if len(without) == 1 else 'ranks'} {', '.join(map(str, without))} "
            "recorded no GPU activity where the other ranks did: profiled without the "
            "device (ProfilerActivity.CUDA left out there?), "
            f"{'its' if len(without) == 1 else 'their'} waits for the GPU and "
            f"{'its' if len(without) == 1 else 'their'} GPU work are not in the trace",
            ranks=without,
            paths=[analysis.ranks[r].path for r in without],
        )
    )


def job_stage(
    results: Sequence[TraceResult], replayed: ReplayedEarlier | None = None
) -> JobStage | None:
    """The job analysis of one run's results; None when no trace of it is a rank."""
    traces = [r.rank for r in results if r.rank is not None and r.info.error is None]
    if not traces:
        return None
    run = R.analyze_ranks(traces)
    per_step, bound_paths = _site_savings_per_step(results)
    on_device = {r.rank.path: r.info.has_gpu_activity for r in results if r.rank is not None}
    unreadable = [r.info for r in results if r.info.error]
    jobs = []
    for analysis in run.jobs:
        _say_ranks_without_device_activity(analysis, on_device)
        if analysis.job.missing and unreadable:
            analysis.issues.append(_unreadable_may_be_missing(analysis.job.missing, unreadable))
        # Each job's ranks' own replays (a run may hold several jobs with the same ranks).
        job_replayed = replayed
        if job_replayed is None:
            job_replayed = {
                rank: rt.replayed_earlier
                for rank, rt in analysis.ranks.items()
                if rt.replayed_earlier
            }
        what_ifs, bound = job_what_ifs(analysis, job_replayed)
        costs = R.site_job_costs(analysis, what_ifs)
        _with_pace(analysis, costs, per_step, bound_paths)
        pace = R.pace_issue(analysis)
        if pace is not None:
            analysis.issues.append(pace)
        jobs.append(
            _JobFigures(
                analysis,
                costs,
                R.late_arrivals(analysis, what_ifs),
                R.peer_waits(analysis),
                bound,
                bool(what_ifs),
            )
        )
    peer = [pw for j in jobs for pw in j.peer_waits]
    return JobStage(jobs, run.issues, _relabelled(results, peer))
