"""The job stage: many ranks' traces of one run, seen as one job (issue 17).

Input: the ``collectives.RankTrace`` of each trace of a run (no timelines). Output:

1. **Jobs** (``group_jobs``): workers grouped by ``distributedInfo`` (world size, process
   groups) and by time (the windows of one job overlap). Missing ranks, duplicated ranks and
   traces of another job are named in ``JobIssue``s, never merged silently: a duplicated
   rank is left out of the analysis (its traces are listed), a trace whose process groups
   disagree with its job's is another job.
2. **Matched collectives** (``analyze_job``): the k-th collective of each process group on
   each member rank, checked by name, dtype and (for collectives whose sizes are the same on
   every rank) sizes. Sequences that differ are refused with the first difference named;
   a rank whose trace ends early is matched as far as it goes and absent after.
3. **Clocks**: ranks on one host (same ``host_name``) share a clock. Hosts (a trace without
   ``host_name`` is a host of its own) are aligned with the matched blocking collectives:
   every member leaves an all-reduce / all-gather / reduce-scatter / barrier at nearly the
   same instant, so the median difference of their exits is the offset. What is left (the
   spread of the aligned exits) is reported as the residual skew, and it sets the noise
   floor below which no rank is called late.
4. **Lateness and waiting**: per collective, each member's arrival (kernel or gloo op start,
   else its host enqueue), the last to arrive, the time each other member waited; per rank
   and step, time waiting on peers vs time being waited for. When a member has no trace
   (missing, or its trace ended), the last present arrival is the last only if the
   collective did not go on waiting after it: its exits are compared with the fastest
   transfer of the same collective; otherwise the lateness belongs to an absent rank and no
   present rank is blamed.
5. **The cause hook** (``site_job_costs``): given ``WhatIf``s (how much earlier the late rank
   would reach collective k without one of its syncs), per-site job-level figures: the wait
   it causes on the other ranks and the job-level saving (the job's step is the slowest
   rank's step). ``fallback_what_ifs`` provides bounds until the what-if replay does:
   a host wait of the late rank between its previous collective and the late one explains
   at most min(its wait, the lateness).

Times in the output are microseconds on the job's clock: the first rank's, after alignment
(``JobAnalysis.clocks`` says how each rank's was moved).
"""

from __future__ import annotations

import statistics
from bisect import bisect_left, bisect_right
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from itertools import accumulate
from operator import attrgetter
from typing import Optional

import msgspec

from tb_syncfinder.collectives import (
    BLOCKING_COLLECTIVES,
    POINT_TO_POINT,
    Collective,
    HostWait,
    RankTrace,
)

__all__ = [
    "Arrival",
    "ClockDomain",
    "GroupMatch",
    "Job",
    "JobAnalysis",
    "JobIssue",
    "JobStep",
    "LateArrival",
    "MatchedCollective",
    "PeerWait",
    "RankStep",
    "RunAnalysis",
    "SiteJobCost",
    "WhatIf",
    "analyze_job",
    "analyze_ranks",
    "fallback_what_ifs",
    "group_jobs",
    "job_causes",
    "late_arrivals",
    "peer_waits",
    "site_job_costs",
    "what_ifs_for_rank",
]

# Issue codes (stable: tests and the UI key on them).
NO_DISTRIBUTED_INFO = "no_distributed_info"
SINGLE_PROCESS = "single_process"
MISSING_RANKS = "missing_ranks"
DUPLICATE_RANK = "duplicate_rank"
OTHER_JOB = "other_job"
RANK_OUT_OF_RANGE = "rank_out_of_range"
SEQUENCE_MISMATCH = "sequence_mismatch"
STOPPED_EARLY = "stopped_early"
STARTED_EARLIER = "started_earlier"
STEPS_RENUMBERED = "steps_renumbered"
STEPS_DISJOINT = "steps_disjoint"
NO_DEVICE_ACTIVITY = "no_device_activity"
UNREADABLE_TRACES = "unreadable_traces"
NOISE_FLOOR_HIGH = "noise_floor_high"
NO_GROUP = "no_process_group"
POINT_TO_POINT_SKIPPED = "point_to_point_not_matched"
CLOCK_UNALIGNED = "clock_unaligned"
CLOCK_SKEW = "clock_skew"
ABSENT_RANK_LATE = "absent_rank_late"
PACE = "pace"
TRACE_NOTE = "trace_note"

MIN_NOISE_US = 20.0  # lateness below this is never called lateness (kernel-end jitter: 1-7 us)


# -- data model ---------------------------------------------------------------------------


@dataclass
class JobIssue:
    """Something about the run the user must know: what was not merged, matched or aligned."""

    code: str
    message: str
    ranks: list[int] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)
    group: Optional[str] = None
    severity: str = "warning"  # "warning" | "info"


@dataclass
class Job:
    """The traces of one job's profiled window, one per rank."""

    key: str
    world_size: int
    backend: Optional[str]
    ranks: dict[int, RankTrace]
    missing: list[int]
    issues: list[JobIssue] = field(default_factory=list)


@dataclass
class ClockDomain:
    """Ranks sharing a clock (one host), and how their times were moved onto the job's."""

    name: str  # host_name, or "rank N" for a trace without one
    ranks: list[int]
    offset_us: float  # subtracted from this domain's times (after the base-time shift)
    samples: int  # blocking collectives the offset was estimated from
    method: str  # "reference" | "collectives" | "none"
    residual_us: Optional[float] = None  # median |exit - reference exit| after alignment
    residual_max_us: Optional[float] = None


@dataclass
class Arrival:
    rank: int
    ts_us: float  # job clock
    raw_ts: float  # the rank's own trace clock (to look up its host waits)
    source: str  # "kernel" | "cpu_op" | "enqueue"
    # Time it waited for the last arrival (0 for the last): the gap to the last arrival, or,
    # where its calling thread's waits are known (``Collective.blocked_us``: gloo, with
    # Python frames), the part of that gap it spent blocked in ``Work.wait``.
    wait_us: float
    exit_us: Optional[float]  # job clock
    collective_index: int  # Collective.index on that rank
    blocked_us: Optional[float] = None  # Collective.blocked_us


@dataclass
class MatchedCollective:
    """The k-th collective of one process group, on every member that has a trace of it."""

    group: str
    k: int
    name: str
    in_nelems: Optional[int]
    dtype: Optional[str]
    step: Optional[int]
    blocking: bool
    arrivals: list[Arrival]
    absent: list[int]  # members without a trace of it (missing rank, or its trace ended)
    last_rank: Optional[int]  # None: nobody late, or the last arrival was an absent rank
    last_us: float  # last present arrival (job clock)
    # What the last present arrival held the others alone: its gap to the next arrival,
    # capped, where every other member's waits are known, at the longest of their waits
    # (a collective whose result is waited for later lets a late rank's gap pass unseen).
    lateness_us: float
    last_certain: bool  # False: an absent member may have arrived later still
    absent_late_us: float = 0.0  # estimated wait for an absent member (0 when none seen)
    carried_in: bool = False  # the late rank's first collective in the window
    # Arrivals of different kinds (a kernel start on some ranks, a host enqueue where the
    # kernel is missing on others) are not comparable: nobody is called late then.
    mixed_sources: bool = False
    arrival_gap_us: float = 0.0  # last present arrival minus the next one, waited for or not

    def others_waited_us(self, held_us: float) -> float:
        """What ``held_us`` of the last rank's lateness cost the other members together:
        each waited at most its own wait."""
        return sum(
            (min(held_us, a.wait_us) for a in self.arrivals if a.rank != self.last_rank), 0.0
        )

    def arrival_of(self, rank: int) -> Optional[Arrival]:
        for a in self.arrivals:
            if a.rank == rank:
                return a
        return None


@dataclass
class GroupMatch:
    """How one process group's sequences matched."""

    group: str
    members: list[int]
    present: list[int]
    counts: dict[int, int]  # collectives per present member (after trimming)
    matched: int  # collectives matched (on at least two members)
    status: str  # "matched" | "partial" | "refused" | "skipped"
    reason: Optional[str] = None


@dataclass
class RankStep:
    """One rank in one step: time waiting on peers vs time being waited for."""

    rank: int
    step: int
    step_time_us: Optional[float]
    wait_us: float = 0.0  # waiting in collectives for later peers
    late_us: float = 0.0  # holding collectives as the last to arrive (beyond the next one)
    caused_wait_us: float = 0.0  # peer time spent waiting for it (late_us x waiting peers)
    sync_wait_us: float = 0.0  # host waits in syncs found by the engine
    blocking_wait_us: float = 0.0  # host waits in blocking Python calls
    absent_wait_us: float = 0.0  # estimated further wait for ranks without a trace
    collectives: int = 0
    carried_in_us: float = 0.0  # part of late_us at its first collective of the window


@dataclass
class JobStep:
    step: int
    time_us: float  # the job's step: the slowest rank's ProfilerStep span
    # The rank with the longest span: often one that waited for a late peer, as a rank
    # that waits in a collective spans the same time as the one it waits for.
    slowest_rank: int
    ranks: int
    # The rank the others waited for most in this step (``RankStep.caused_wait_us``), the
    # one to look at; None when no rank was late beyond the noise. Its lateness may have
    # started in the step before (``RankStep.carried_in_us``): it is where they waited.
    late_rank: Optional[int] = None
    late_rank_caused_wait_us: float = 0.0


@dataclass
class JobAnalysis:
    job: Job
    clocks: list[ClockDomain]
    groups: list[GroupMatch]
    collectives: list[MatchedCollective]
    rank_steps: list[RankStep]
    job_steps: list[JobStep]
    noise_us: float  # lateness at or below this is not lateness
    issues: list[JobIssue]

    @property
    def ranks(self) -> dict[int, RankTrace]:
        return self.job.ranks

    @property
    def common_steps(self) -> set[int]:
        """The job's steps from the first one every rank with steps recorded: those its
        collectives are matched in (a rank whose window started a step later has no first
        step, and the others' collectives of that step are not matched; a rank whose trace
        ends early leaves the later steps to the others, matched without it). Every job
        step where none is left (numbers that say nothing of each other)."""
        firsts = [min(s.number for s in rt.steps) for rt in self.ranks.values() if rt.steps]
        steps = {s.step for s in self.job_steps}
        start = max(firsts, default=None)
        return {n for n in steps if start is None or n >= start} or steps

    @property
    def step_count(self) -> int:
        """What a job's total per step is over (``common_steps``; at least 1): dividing
        the savings of the 4 steps in which a late-starting rank took part by the 5 steps
        of the others gave 40.4 ms a step where 50 ms was saved."""
        return max(1, len(self.common_steps))


@dataclass
class RunAnalysis:
    jobs: list[JobAnalysis]
    issues: list[JobIssue]  # about traces that are in no job


@dataclass(frozen=True)
class WhatIf:
    """How much earlier ``rank`` would have reached its collective number
    ``collective_index`` (``Collective.index`` in its own trace: a per-trace replay knows it
    without the job) without the host wait ``wait_id`` (``HostWait.id``: a ``Sync.id`` or a
    blocking call's id), its exit from its previous collective being as recorded
    (interval-local, so figures add up over collectives). ``bound``: an upper bound, not a
    replayed time."""

    rank: int
    wait_id: str
    collective_index: int
    earlier_us: float
    bound: bool = False


def what_ifs_for_rank(
    rank: int, earlier: Mapping[str, Mapping[int, float]], bound: bool = False
) -> list[WhatIf]:
    """``WhatIf``s from a per-trace replay's result: wait id -> collective index -> how much
    earlier the rank would have arrived there without that wait."""
    return [
        WhatIf(rank, wait_id, index, us, bound)
        for wait_id, per in earlier.items()
        for index, us in per.items()
        if us > 0
    ]


@dataclass
class SiteJobCost:
    """A site on one rank, costed for the job (the additive per-site fields of issue 17)."""

    site_key: str
    rank: int
    file: Optional[str]
    line: Optional[int]
    func: Optional[str]
    kind: str
    op: Optional[str]
    is_sync: bool
    wait_ids: list[str]
    caused_wait_us: float  # wait it causes on the other ranks, summed over ranks and steps
    job_saving_us: float  # job step time saved over the profiled steps
    job_saving_per_step_us: float
    late_collectives: int  # late arrivals it explains part of
    steps: list[int]
    bound: bool  # True: figures are upper bounds (fallback), not a replay
    line_exact: bool = False  # as the site's: False where ``line`` is a def or recorded line


@dataclass
class LateArrival:
    """One late arrival and what explains it."""

    group: str
    k: int
    step: Optional[int]
    rank: int
    lateness_us: float
    carried_in: bool
    explained_us: float  # by the host waits below (capped at the lateness)
    unexplained_us: float
    label: str  # what the unexplained part is (or that there is none)
    contributors: list[tuple[str, str, float]]  # (wait id, site key, earlier_us)
    bound: bool


@dataclass
class PeerWait:
    """A host wait on a rank that was waiting for a late peer at the time: analysed alone it
    looks like the rank's own cost; part of it (``overlap_us``) is the peer's."""

    rank: int
    wait_id: str
    site_key: str
    late_rank: int
    group: str
    k: int
    overlap_us: float


# -- grouping ------------------------------------------------------------------------------


_RANK = attrgetter("rank")


def _abs_span(rt: RankTrace) -> tuple[float, float]:
    return rt.span[0] + rt.base_us, rt.span[1] + rt.base_us


def _groups_of(t: RankTrace) -> dict[str, tuple[int, ...]]:
    """A trace's process groups with their ranks recorded: name -> ranks (the last of a
    name)."""
    if t.dist is None:
        return {}
    return {g.name: g.ranks for g in t.dist.groups if g.ranks is not None}


def _time_clusters(traces: list[RankTrace]) -> list[list[RankTrace]]:
    """Traces whose windows overlap (transitively): one profiled window of one job."""
    ordered = sorted(traces, key=lambda t: _abs_span(t)[0])
    clusters: list[list[RankTrace]] = []
    hi = float("-inf")
    for t in ordered:
        lo, end = _abs_span(t)
        if clusters and lo <= hi:
            clusters[-1].append(t)
            hi = max(hi, end)
        else:
            clusters.append([t])
            hi = end
    return clusters


# The longest window of hosts taken for one job's on clocks apart, as a multiple of the
# shortest: the ranks of one profiled window record about as long as each other.
SKEWED_WINDOW_RATIO = 3.0


def _one_job_on_skewed_clocks(world: int, clusters: list[list[RankTrace]]) -> Optional[JobIssue]:
    """Where windows that do not overlap in time are one job's on hosts whose clocks are
    apart by more than the window (2 s on an H200 pair; the job was split in two, each half
    a rank short): the issue that says so, else None. Only when the windows hold every rank
    of the world once between them, no host's traces in two windows, and the windows about
    as long as each other; the collectives then align the clocks as for any skew."""
    if len(clusters) < 2:
        return None
    ranks = [t.rank for cluster in clusters for t in cluster]
    if sorted(ranks) != list(range(world)):
        return None
    hosts = [{t.host_name or t.path for t in cluster} for cluster in clusters]
    if any(a & b for i, a in enumerate(hosts) for b in hosts[i + 1 :]):
        return None
    spans = [(min(_abs_span(t)[0] for t in c), max(_abs_span(t)[1] for t in c)) for c in clusters]
    lengths = [end - start for start, end in spans]
    if min(lengths) <= 0 or max(lengths) > SKEWED_WINDOW_RATIO * min(lengths):
        return None
    first = spans[0][0]
    apart = ", ".join(
        f"{', '.join(sorted(h for h in hosts[i]))} (rank"
        f"{'s' if len(c) > 1 else ''} {', '.join(str(t.rank) for t in sorted(c, key=_RANK))}) "
        f"{(start - first) / 1e6:+.3f} s"
        for i, (c, (start, _end)) in enumerate(zip(clusters, spans, strict=True))
        if i > 0
    )
    return JobIssue(
        CLOCK_SKEW,
        f"the ranks' windows do not overlap in time, but between them they hold every rank "
        f"of the world once, each host in one window: taken as one job on clocks apart by "
        f"more than the window (against the first window's start: {apart}) and aligned on "
        "the collectives; check the hosts' clocks (NTP)",
        ranks=sorted(t.rank for c in clusters[1:] for t in c),
        paths=[t.path for c in clusters[1:] for t in c],
    )


def group_jobs(traces: Sequence[RankTrace]) -> tuple[list[Job], list[JobIssue]]:
    """Jobs of a run, and issues about the traces that are in none."""
    issues: list[JobIssue] = []
    by_world: dict[tuple[int, str], list[RankTrace]] = defaultdict(list)
    for t in traces:
        if t.dist is None or t.dist.rank is None or t.dist.world_size is None:
            issues.append(
                JobIssue(
                    NO_DISTRIBUTED_INFO,
                    f"{t.path}: no distributedInfo rank/world size; analysed alone",
                    paths=[t.path],
                    severity="info",
                )
            )
            continue
        if t.dist.world_size <= 1:
            issues.append(
                JobIssue(
                    SINGLE_PROCESS,
                    f"{t.path}: world size 1; analysed alone",
                    paths=[t.path],
                    severity="info",
                )
            )
            continue
        if not 0 <= t.dist.rank < t.dist.world_size:
            issues.append(
                JobIssue(
                    RANK_OUT_OF_RANGE,
                    f"{t.path}: rank {t.dist.rank} outside world size "
                    f"{t.dist.world_size}; left out",
                    ranks=[t.dist.rank],
                    paths=[t.path],
                )
            )
            continue
        by_world[(t.dist.world_size, (t.dist.backend or "").lower())].append(t)
    jobs: list[Job] = []
    for (world, backend), members in sorted(by_world.items()):
        clusters = _time_clusters(members)
        skewed = _one_job_on_skewed_clocks(world, clusters)
        if skewed is not None:
            clusters = [[t for cluster in clusters for t in cluster]]
        for cluster in clusters:
            found = _split_cluster(world, backend or None, cluster)
            if skewed is not None:
                for job in found:
                    job.issues.append(skewed)
            jobs.extend(found)
    if len(jobs) > 1:
        for job in jobs:
            others = [_job_label(j) for j in jobs if j is not job]
            job.issues.append(
                JobIssue(
                    OTHER_JOB,
                    f"the run holds {len(jobs)} jobs (or profiled windows): "
                    f"{_job_label(job)} is analysed apart from {', '.join(others)}",
                    ranks=sorted(job.ranks),
                    paths=[t.path for t in job.ranks.values()],
                )
            )
    return jobs, issues


def _job_label(job: Job) -> str:
    """A job as a user tells it from another: its world, backend and when its window began
    (UTC), where its key gives the start in epoch seconds."""
    starts = [_abs_span(t)[0] for t in job.ranks.values()]
    if not starts:
        return job.key
    from datetime import datetime, timezone

    try:
        when = datetime.fromtimestamp(min(starts) / 1e6, tz=timezone.utc)
    except (OverflowError, OSError, ValueError):
        return job.key
    backend = f" ({job.backend})" if job.backend else ""
    return f"world {job.world_size}{backend} recorded from {when:%Y-%m-%d %H:%M:%S} UTC"


def _parts(cluster: list[RankTrace]) -> list[list[RankTrace]]:
    """The traces of one time cluster in parts of one job each (by rank, then path): a
    trace joins the first part none of whose traces gives one of its process groups other
    ranks (two ranks of one job agree on every group they both name)."""
    # Each part keeps, per group name, the rank tuples its traces give it: checking each
    # trace against every trace placed was cubic in the ranks (1,024 ranks: 8.4 s).
    parts: list[tuple[list[RankTrace], dict[str, set[tuple[int, ...]]]]] = []
    for t in sorted(cluster, key=lambda t: (t.rank, t.path)):
        mine = _groups_of(t)
        joined = None
        for part in parts:
            seen = part[1]
            if not any(
                name in seen and any(other != ranks for other in seen[name])
                for name, ranks in mine.items()
            ):
                joined = part
                break
        if joined is None:
            joined = ([], {})
            parts.append(joined)
        members, seen = joined
        members.append(t)
        if t.dist is not None:
            for g in t.dist.groups:
                if g.ranks is not None:
                    seen.setdefault(g.name, set()).add(g.ranks)
    return [members for members, _seen in parts]


def _split_cluster(world: int, backend: Optional[str], cluster: list[RankTrace]) -> list[Job]:
    """One time cluster: separate traces whose process groups conflict (another job), name
    duplicated ranks (left out) and missing ones."""
    jobs = []
    for part in _parts(cluster):
        start = min(_abs_span(t)[0] for t in part)
        key = f"world {world} from {start / 1e6:.6f}s" + (f" ({backend})" if backend else "")
        by_rank: dict[int, list[RankTrace]] = defaultdict(list)
        for t in part:
            by_rank[t.rank].append(t)  # type: ignore[index]
        issues = []
        ranks: dict[int, RankTrace] = {}
        for rank, found in sorted(by_rank.items()):
            if len(found) > 1:
                issues.append(
                    JobIssue(
                        DUPLICATE_RANK,
                        f"rank {rank} has {len(found)} traces in one window "
                        f"({', '.join(t.path for t in found)}): none is used, the rank counts as "
                        "missing",
                        ranks=[rank],
                        paths=[t.path for t in found],
                    )
                )
            else:
                ranks[rank] = found[0]
        missing = [r for r in range(world) if r not in ranks]
        if missing:
            issues.append(
                JobIssue(
                    MISSING_RANKS,
                    f"{len(missing)} of {world} ranks have no trace: "
                    f"{_ranks_text(missing)}; the analysis is partial",
                    ranks=missing,
                )
            )
        jobs.append(Job(key, world, backend, ranks, missing, issues))
    return jobs


def _ranks_text(ranks: Sequence[int], limit: int = 12) -> str:
    ranks = sorted(ranks)
    spans: list[str] = []
    i = 0
    while i < len(ranks):
        j = i
        while j + 1 < len(ranks) and ranks[j + 1] == ranks[j] + 1:
            j += 1
        spans.append(str(ranks[i]) if i == j else f"{ranks[i]}-{ranks[j]}")
        i = j + 1
    text = ", ".join(spans[:limit])
    return text + (f" and {len(spans) - limit} more ranges" if len(spans) > limit else "")


# -- matching -------------------------------------------------------------------------------


@dataclass
class _GroupIndex:
    """One pass over the job's collectives: each group's members and per-rank sequences."""

    members_of: dict[str, list[int]]  # group -> global ranks, where any trace says
    by_group: dict[str, dict[int, list[Collective]]]  # group -> rank -> its collectives
    p2p: Counter  # group -> point-to-point ops (not matched)


def _index(job: Job) -> _GroupIndex:
    members: dict[str, list[int]] = {}
    by_group: dict[str, dict[int, list[Collective]]] = defaultdict(dict)
    p2p: Counter = Counter()
    for r, rt in sorted(job.ranks.items()):
        if rt.dist is not None:
            for g in rt.dist.groups:
                if g.ranks is not None:
                    members.setdefault(g.name, list(g.ranks))
        for c in rt.collectives:
            if c.name in POINT_TO_POINT:
                p2p[c.group] += 1
                continue
            seq = by_group[c.group].get(r)
            if seq is None:
                seq = by_group[c.group][r] = []
            seq.append(c)
            if c.group and c.group_ranks is not None and c.group not in members:
                members[c.group] = list(c.group_ranks)
    return _GroupIndex(members, dict(by_group), p2p)


def _sequences(
    job: Job, index: _GroupIndex, group: str, members: Sequence[int]
) -> dict[int, list[Collective]]:
    """Each member's collectives of the group (a member with a trace but none: empty)."""
    mine = index.by_group.get(group, {})
    return {r: list(mine.get(r, ())) for r in members if r in job.ranks}


def _trim_to_common_start(
    seqs: dict[int, list[Collective]], group: str, issues: list[JobIssue]
) -> None:
    """Windows that started in different steps: drop what precedes the first step every
    rank recorded, so that the k-th collectives are the same ones."""
    firsts, lasts = {}, {}
    for r, seq in seqs.items():
        stepped = [c.step for c in seq if c.step is not None]
        if not stepped:
            return
        firsts[r], lasts[r] = min(stepped), max(stepped)
    common = max(firsts.values())
    if common > min(lasts.values()):
        # No step every rank recorded: numbers that say nothing of each other (profilers
        # stepped apart on hosts whose clocks cannot tell which steps ran together).
        # Matched as they are, the sequences are refused with the first step that differs.
        spans = ", ".join(
            f"rank {r}: {firsts[r]}-{lasts[r]}"
            if firsts[r] != lasts[r]
            else f"rank {r}: {firsts[r]}"
            for r in sorted(seqs)
        )
        issues.append(
            JobIssue(
                STEPS_DISJOINT,
                f"group {group!r}: the ranks' collectives share no step number ({spans}) and "
                "their clocks do not show which steps ran together: each rank's profiler "
                "was stepped a different number of times before the window, or the traces "
                "are of different windows",
                ranks=sorted(seqs),
                group=group,
            )
        )
        return
    for r, seq in seqs.items():
        if firsts[r] >= common:
            continue
        keep = next(i for i, c in enumerate(seq) if c.step is not None and c.step >= common)
        issues.append(
            JobIssue(
                STARTED_EARLIER,
                f"rank {r}: {keep} collectives of group {group!r} before step "
                f"{common} (its window started earlier than the others') are not matched",
                ranks=[r],
                group=group,
                severity="info",
            )
        )
        seqs[r] = seq[keep:]


# A rank's collective is paired with the reference rank's of the same group and name that
# ended nearest to it, if within this share of the reference's median step: the ranks of a
# collective leave it together, whatever their steps (ranks that wait for an all-reduce a
# step later drift up to a step apart, and their steps' times pair the wrong ones).
SAME_EXIT_STEP_SHARE = 0.2
# The share of a rank's paired collectives that must say one difference of step numbers.
SHIFT_AGREEMENT = 0.8


def _step_shift(ref: RankTrace, rt: RankTrace) -> Optional[int]:
    """What to add to ``rt``'s step numbers to number its steps as ``ref``'s, where their
    collectives decide it (one clock): each of its collectives with a recorded end and step
    is paired with ``ref``'s of the same group and name that ended nearest to it (within
    ``SAME_EXIT_STEP_SHARE`` of a step), and the difference of their steps is the shift,
    where ``SHIFT_AGREEMENT`` of the pairs say the same; None otherwise (no collectives
    with ends: nothing to go by). Both lists are in time order: a bisection per collective."""
    durations = sorted(s.duration for s in ref.steps)
    if not durations:
        return None
    window = SAME_EXIT_STEP_SHARE * durations[len(durations) // 2]
    theirs: dict[tuple[str, str], tuple[list[float], list[int]]] = {}
    for c in sorted(ref.collectives, key=lambda c: c.exec_end or 0.0):
        if c.exec_end is not None and c.step is not None:
            ends, steps = theirs.setdefault((c.group, c.name), ([], []))
            ends.append(c.exec_end + ref.base_us)
            steps.append(c.step)
    shifts: Counter[int] = Counter()
    for c in rt.collectives:
        found = theirs.get((c.group, c.name))
        if found is None or c.exec_end is None or c.step is None:
            continue
        ends, steps = found
        end = c.exec_end + rt.base_us
        i = bisect_left(ends, end)
        near = min((k for k in (i - 1, i) if 0 <= k < len(ends)), key=lambda k: abs(ends[k] - end))
        if abs(ends[near] - end) <= window:
            shifts[steps[near] - c.step] += 1
    if not shifts:
        return None
    shift, count = shifts.most_common(1)[0]
    return shift if count >= SHIFT_AGREEMENT * sum(shifts.values()) else None


def _steps_numbered_alike(job: Job, issues: list[JobIssue]) -> Job:
    """The job with ranks' steps numbered alike where their collectives show they are
    numbered apart.
    A profiler stepped more often before its window (``prof.step()`` called by a rank's own
    warm-up) numbers the same iterations 6-10 where the others say 1-5: matched by number,
    the collectives of different iterations were paired (a rank 50 ms late each step read as
    none late) or no step was in common (the report failed). Only ranks of one host (one
    clock, named by ``host_name``) are compared, each with the host's lowest rank
    (``_step_shift``); the numbering most of them share is kept, and only the others are
    renumbered and named."""
    by_host: dict[str, list[int]] = defaultdict(list)
    for r, rt in sorted(job.ranks.items()):
        if rt.steps and rt.host_name:
            by_host[rt.host_name].append(r)
    renumbered = dict(job.ranks)
    for ranks in by_host.values():
        if len(ranks) < 2:
            continue
        first = job.ranks[ranks[0]]
        shifts = {ranks[0]: 0}
        for r in ranks[1:]:
            shift = _step_shift(first, job.ranks[r])
            if shift is not None:
                shifts[r] = shift
        counts = Counter(shifts.values())
        kept = max(counts, key=lambda shift: (counts[shift], shift == 0))
        majority = [r for r, shift in shifts.items() if shift == kept]
        for r, shift in shifts.items():
            if shift == kept:
                continue
            rt = job.ranks[r]
            moved = shift - kept
            renumbered[r] = _renumbered(rt, moved)
            numbers = [s.number for s in rt.steps]
            issues.append(
                JobIssue(
                    STEPS_RENUMBERED,
                    f"rank {r}'s steps are numbered {min(numbers)}-{max(numbers)} where the "
                    f"other ranks' over the same time are {min(numbers) + moved}-"
                    f"{max(numbers) + moved} (rank {r}'s profiler was stepped {abs(moved)} "
                    f"{'time' if abs(moved) == 1 else 'times'} "
                    f"{'more' if moved < 0 else 'fewer'} before the window): the job counts "
                    f"them as rank {majority[0]}'s",
                    ranks=[r],
                    paths=[rt.path],
                    severity="info",
                )
            )
    if renumbered == job.ranks:
        return job
    return replace(job, ranks=renumbered)


def _renumbered(rt: RankTrace, shift: int) -> RankTrace:
    def moved(number: Optional[int]) -> Optional[int]:
        return None if number is None else number + shift

    return msgspec.structs.replace(
        rt,
        steps=[msgspec.structs.replace(s, number=s.number + shift) for s in rt.steps],
        collectives=[msgspec.structs.replace(c, step=moved(c.step)) for c in rt.collectives],
        waits=[msgspec.structs.replace(w, step=moved(w.step)) for w in rt.waits],
    )


def _first_difference(seqs: dict[int, list[Collective]]) -> Optional[str]:
    ranks = sorted(seqs)
    ref = ranks[0]
    depth = min(len(s) for s in seqs.values())
    for k in range(depth):
        a = seqs[ref][k]
        for r in ranks[1:]:
            b = seqs[r][k]
            if a.signature() != b.signature():
                return (
                    f"collective #{k}: rank {ref} has {a.describe()}, rank {r} has {b.describe()}"
                )
            if a.step is not None and b.step is not None and a.step != b.step:
                return (
                    f"collective #{k} ({a.describe()}) is in step {a.step} on rank {ref} "
                    f"but in step {b.step} on rank {r}"
                )
    return None


def _match_groups(
    job: Job, index: _GroupIndex, issues: list[JobIssue]
) -> tuple[list[GroupMatch], dict[tuple[str, int], dict[int, Collective]]]:
    members_of = index.members_of
    all_ranks = list(range(job.world_size))
    matches: list[GroupMatch] = []
    table: dict[tuple[str, int], dict[int, Collective]] = {}
    for group, count in sorted(index.p2p.items()):
        issues.append(
            JobIssue(
                POINT_TO_POINT_SKIPPED,
                f"{count} point-to-point ops of "
                + ("no recorded process group" if group == "" else f"group {group!r}")
                + " are not matched",
                group=group,
                severity="info",
            )
        )
    for group in sorted(index.by_group):
        if group == "" and len(members_of) > 1:
            issues.append(
                JobIssue(
                    NO_GROUP,
                    "collectives without a process group in a job with "
                    f"{len(members_of)} groups: they are not matched",
                )
            )
            matches.append(GroupMatch(group, [], [], {}, 0, "refused", "no process group recorded"))
            continue
        if group in members_of:
            members = members_of[group]
        elif group == "" or not members_of:
            members = all_ranks  # no group recorded anywhere: the world
        else:
            # A group named by its collectives only (Process Group ID): its members are
            # the ranks that have it, so absent members cannot be named.
            members = sorted(index.by_group[group])
        seqs = _sequences(job, index, group, members)
        present = sorted(seqs)
        if len(present) < 2:
            matches.append(
                GroupMatch(
                    group,
                    members,
                    present,
                    {r: len(s) for r, s in seqs.items()},
                    0,
                    "skipped",
                    "fewer than two members have a trace",
                )
            )
            continue
        _trim_to_common_start(seqs, group, issues)
        counts = {r: len(s) for r, s in seqs.items()}
        reason = _first_difference(seqs)
        if reason is not None:
            issues.append(
                JobIssue(
                    SEQUENCE_MISMATCH,
                    f"group {group!r}: the ranks' collective sequences differ "
                    f"({reason}); its collectives are not matched",
                    ranks=present,
                    group=group,
                )
            )
            matches.append(GroupMatch(group, members, present, counts, 0, "refused", reason))
            continue
        longest = max(counts.values())
        for r, n in sorted(counts.items()):
            if n < longest:
                last = seqs[r][-1] if n else None
                where = f" (after step {last.step})" if last is not None and last.step else ""
                issues.append(
                    JobIssue(
                        STOPPED_EARLY,
                        f"rank {r}'s trace ends early{where}: {n} collectives of "
                        f"group {group!r} where others have {longest}; the rest are matched "
                        "without it",
                        ranks=[r],
                        group=group,
                    )
                )
        matched = 0
        for k in range(longest):
            at = {r: s[k] for r, s in seqs.items() if k < len(s)}
            if len(at) < 2:
                continue
            table[(group, k)] = at
            matched += 1
        status = (
            "matched"
            if len(present) == len(members) and len(set(counts.values())) == 1
            else "partial"
        )
        matches.append(GroupMatch(group, members, present, counts, matched, status))
    return matches, table


# -- clocks -----------------------------------------------------------------------------------


def _domains(job: Job) -> dict[str, list[int]]:
    domains: dict[str, list[int]] = defaultdict(list)
    for r, rt in sorted(job.ranks.items()):
        domains[rt.host_name if rt.host_name else f"rank {r}"].append(r)
    return dict(domains)


def _align(
    job: Job, table: dict[tuple[str, int], dict[int, Collective]], issues: list[JobIssue]
) -> tuple[list[ClockDomain], dict[int, float]]:
    """Per-rank shift onto the job clock: base-time difference, then the host offset
    estimated from blocking collectives' exits."""
    ref_base = min(rt.base_us for rt in job.ranks.values())
    base_shift = {r: rt.base_us - ref_base for r, rt in job.ranks.items()}
    domains = _domains(job)
    domain_of = {r: name for name, rs in domains.items() for r in rs}
    # Per blocking collective: each domain's median exit, on base-shifted clocks.
    exits: list[dict[str, float]] = []
    for (_group, _k), at in table.items():
        first = next(iter(at.values()))
        if first.name not in BLOCKING_COLLECTIVES:
            continue
        per_domain: dict[str, list[float]] = defaultdict(list)
        for r, c in at.items():
            if c.exec_end is not None:
                per_domain[domain_of[r]].append(c.exec_end + base_shift[r])
        if len(per_domain) >= 1:
            exits.append({d: statistics.median(v) for d, v in per_domain.items()})
    names = sorted(domains, key=lambda d: min(domains[d]))
    ref = names[0]
    offsets: dict[str, float] = {ref: 0.0}
    samples: dict[str, int] = {ref: 0}
    # Breadth first from the reference: a domain is aligned to any already aligned one it
    # shares collectives with (subgroups may not include the reference).
    frontier = [ref]
    while frontier:
        nxt = []
        for known in frontier:
            for d in names:
                if d in offsets:
                    continue
                deltas = [e[d] - e[known] for e in exits if d in e and known in e]
                if deltas:
                    offsets[d] = offsets[known] + statistics.median(deltas)
                    samples[d] = len(deltas)
                    nxt.append(d)
        frontier = nxt
    clocks = []
    for d in names:
        method = "reference" if d == ref else ("collectives" if d in offsets else "none")
        if d not in offsets and len(names) > 1:
            issues.append(
                JobIssue(
                    CLOCK_UNALIGNED,
                    f"{d}: no blocking collective shared with the other hosts; "
                    "its clock is taken as is (base time only)",
                    ranks=domains[d],
                )
            )
        clocks.append(ClockDomain(d, domains[d], offsets.get(d, 0.0), samples.get(d, 0), method))
    shift = {r: base_shift[r] - offsets.get(domain_of[r], 0.0) for r in job.ranks}
    # Residual: how far each domain's aligned exits still are from the reference's.
    for clock in clocks:
        resid = []
        for e in exits:
            if clock.name in e and ref in e:
                resid.append(abs(e[clock.name] - offsets.get(clock.name, 0.0) - e[ref]))
        if clock.name == ref:
            # Within the reference host: the spread of its own ranks' exits.
            resid = _within_domain_spread(table, clock.ranks, shift)
        if resid:
            clock.residual_us = statistics.median(resid)
            clock.residual_max_us = max(resid)
    if len(clocks) > 1:
        aligned = [c for c in clocks[1:] if c.method == "collectives" and c.residual_us is not None]
        # The largest offsets, a handful: every host's (the job's ``clocks``) in the JSON.
        named = sorted(aligned, key=lambda c: -abs(c.offset_us))[:_SKEWS_NAMED]
        skews = ", ".join(
            f"{c.name}: {c.offset_us:+.1f} us (residual {c.residual_us:.1f} us)" for c in named
        )
        if len(aligned) > len(named):
            worst = max(c.residual_us for c in aligned)
            skews += (
                f", and {len(aligned) - len(named)} more hosts (largest residual "
                f"{worst:.1f} us; every one in the job's clocks)"
            )
        if skews:
            issues.append(
                JobIssue(CLOCK_SKEW, f"clocks aligned on {ref}: {skews}", severity="info")
            )
    return clocks, shift


# Hosts named in the clock-skew note; the rest are counted (a 40-host job named every one).
_SKEWS_NAMED = 6


def _within_domain_spread(
    table: dict[tuple[str, int], dict[int, Collective]],
    ranks: Sequence[int],
    shift: dict[int, float],
) -> list[float]:
    spread = []
    wanted = set(ranks)
    for at in table.values():
        first = next(iter(at.values()))
        if first.name not in BLOCKING_COLLECTIVES:
            continue
        ends = [
            c.exec_end + shift[r] for r, c in at.items() if r in wanted and c.exec_end is not None
        ]
        if len(ends) >= 2:
            spread.append(max(ends) - min(ends))
    return spread


# -- lateness and waits ---------------------------------------------------------------------


def _noise_floor(clocks: Sequence[ClockDomain]) -> float:
    residuals = [c.residual_us for c in clocks if c.residual_us is not None]
    return max([MIN_NOISE_US] + [2.0 * r for r in residuals])


def _majority_step(at: dict[int, Collective]) -> Optional[int]:
    steps = [c.step for c in at.values() if c.step is not None]
    if not steps:
        return None
    first = steps[0]
    if steps.count(first) == len(steps):  # the usual case, without a Counter
        return first
    return Counter(steps).most_common(1)[0][0]


def _transfer_baselines(
    table: dict[tuple[str, int], dict[int, Collective]], shift: dict[int, float]
) -> dict[tuple[str, tuple], float]:
    """Per (group, signature): the shortest time from the last present arrival to the first
    exit, over its occurrences: the collective's own duration with nobody left to wait for."""
    best: dict[tuple[str, tuple], float] = {}
    for (group, _k), at in table.items():
        gap = _apparent_transfer(at, shift)
        if gap is None:
            continue
        key = (group, next(iter(at.values())).signature())
        if key not in best or gap < best[key]:
            best[key] = gap
    return best


def _apparent_transfer(at: dict[int, Collective], shift: dict[int, float]) -> Optional[float]:
    exits = [c.exec_end + shift[r] for r, c in at.items() if c.exec_end is not None]
    if len(exits) != len(at):
        return None
    last = max(
        c.arrival_ts + shift[r]
        for r, c in at.items()  # type: ignore[operator]
        if c.arrival_ts is not None
    )
    return min(exits) - last


def _match_collectives(
    job: Job,
    table: dict[tuple[str, int], dict[int, Collective]],
    members_of: dict[str, list[int]],
    shift: dict[int, float],
    noise: float,
    issues: list[JobIssue],
) -> list[MatchedCollective]:
    baselines: Optional[dict[tuple[str, tuple], float]] = None  # only if a member is absent
    out: list[MatchedCollective] = []
    absent_late: list[tuple[str, int, float, list[int]]] = []
    everyone = list(range(job.world_size))
    for (group, k), at in table.items():
        first = next(iter(at.values()))
        members = members_of.get(group) or everyone
        absent = [r for r in members if r not in at] if len(members) != len(at) else []
        arrivals = []
        for r, c in sorted(at.items()):
            raw = c.exec_ts if c.exec_ts is not None else c.enqueue_ts
            if raw is None:
                continue
            exit_ts = c.exec_end if c.exec_end is not None else c.enqueue_end
            arrivals.append(
                Arrival(
                    rank=r,
                    ts_us=raw + shift[r],
                    raw_ts=raw,
                    source=c.arrival_source,
                    wait_us=0.0,
                    exit_us=exit_ts + shift[r] if exit_ts is not None else None,
                    collective_index=c.index,
                    blocked_us=c.blocked_us,
                )
            )
        if len(arrivals) < 2:
            continue
        ordered = sorted(arrivals, key=_ARRIVAL_TS)
        last, second = ordered[-1], ordered[-2]
        lateness = last.ts_us - second.ts_us
        certain = True
        absent_wait = 0.0
        if absent:
            if baselines is None:
                baselines = _transfer_baselines(table, shift)
            gap = _apparent_transfer(at, shift)
            base = baselines.get((group, first.signature()))
            if gap is None or base is None:
                certain = False  # no exits to tell whether the collective waited on
            else:
                extra = gap - base
                if extra > max(noise, 0.25 * base):
                    certain = False
                    absent_wait = extra
                    absent_late.append((group, k, extra, absent))
        mixed = len({a.source for a in arrivals}) > 1
        if mixed:
            certain = False
        last_us = last.ts_us
        for a in arrivals:
            a.wait_us = last_us - a.ts_us
            if a.blocked_us is not None:
                a.wait_us = min(a.wait_us, a.blocked_us)
        gap = lateness
        others = [a for a in arrivals if a is not last]
        if others and all(a.blocked_us is not None for a in others):
            lateness = min(lateness, max(a.wait_us for a in others))
        late_rank = last.rank if certain and lateness > noise else None
        carried = False
        if late_rank is not None:
            c_late = at[late_rank]
            carried = c_late.index == 0
        out.append(
            MatchedCollective(
                group=group,
                k=k,
                name=first.name,
                in_nelems=first.in_nelems,
                dtype=first.dtype,
                step=_majority_step(at),
                blocking=first.name in BLOCKING_COLLECTIVES,
                arrivals=arrivals,
                absent=absent,
                last_rank=late_rank,
                last_us=last_us,
                lateness_us=lateness,
                last_certain=certain,
                absent_late_us=absent_wait,
                carried_in=carried,
                mixed_sources=mixed,
                arrival_gap_us=gap,
            )
        )
    # In the order the job reached them (the first arrival), whatever the group.
    out.sort(key=lambda c: min(a.ts_us for a in c.arrivals))
    if absent_late:
        total = sum((x[2] for x in absent_late), 0.0)
        ranks = sorted({r for x in absent_late for r in x[3]})
        issues.append(
            JobIssue(
                ABSENT_RANK_LATE,
                f"{len(absent_late)} collectives went on waiting after the last "
                f"rank with a trace arrived ({total / 1000:.2f} ms in all): a rank without a trace "
                f"({_ranks_text(ranks)}) was later still; no present rank is blamed there",
                ranks=ranks,
            )
        )
    return out


_ARRIVAL_TS = attrgetter("ts_us")


def _rank_steps(job: Job, collectives: Sequence[MatchedCollective]) -> list[RankStep]:
    table: dict[tuple[int, int], RankStep] = {}
    durations = {(r, s.number): s.duration for r, rt in job.ranks.items() for s in rt.steps}

    def row(rank: int, step: int) -> RankStep:
        key = (rank, step)
        found = table.get(key)
        if found is None:
            found = table[key] = RankStep(rank, step, durations.get(key))
        return found

    for c in collectives:
        if c.step is None:
            continue
        for a in c.arrivals:
            r = row(a.rank, c.step)
            r.collectives += 1
            r.wait_us += a.wait_us
            r.absent_wait_us += c.absent_late_us
        if c.last_rank is not None:
            r = row(c.last_rank, c.step)
            r.late_us += c.lateness_us
            r.caused_wait_us += c.others_waited_us(c.lateness_us)
            if c.carried_in:
                r.carried_in_us += c.lateness_us
    for rank, rt in job.ranks.items():
        for w in rt.waits:
            if w.step is None:
                continue
            r = row(rank, w.step)
            if w.is_sync:
                r.sync_wait_us += w.wait_us
            else:
                r.blocking_wait_us += w.wait_us
    return [table[k] for k in sorted(table)]


def _job_steps(job: Job, rank_steps: list[RankStep]) -> list[JobStep]:
    per_step: dict[int, list[tuple[float, int]]] = defaultdict(list)
    for rank, rt in job.ranks.items():
        for s in rt.steps:
            per_step[s.number].append((s.duration, rank))
    # Ties go to the higher rank, as slowest_rank's do, whatever the table's order.
    late: dict[int, tuple[float, int]] = {}
    for r in rank_steps:
        if r.caused_wait_us > 0 and (r.caused_wait_us, r.rank) > late.get(r.step, (0.0, -1)):
            late[r.step] = (r.caused_wait_us, r.rank)
    out = []
    for number in sorted(per_step):
        time_us, slowest = max(per_step[number])
        caused_us, late_rank = late.get(number, (0.0, None))
        out.append(JobStep(number, time_us, slowest, len(per_step[number]), late_rank, caused_us))
    return out


# A noise floor above this share of the median step hides most lateness: said so.
NOISE_FLOOR_STEP_SHARE = 0.25


def _noise_floor_share(job: Job, noise: float) -> Optional[float]:
    """The noise floor as a share of the job's median step (None without steps)."""
    durations = [s.duration for rt in job.ranks.values() for s in rt.steps]
    return noise / statistics.median(durations) if durations else None


def _say_a_noise_floor_that_hides_lateness(
    job: Job, clocks: Sequence[ClockDomain], noise: float, issues: list[JobIssue]
) -> None:
    """Ranks named on one host leave the same collective far apart (two containers with
    one host name and their own clocks, 20 ms apart, read as a floor of 43.5 ms and a rank
    50 ms late a step as none late, unsaid): the floor is named where it is a large share
    of a step, with the spread that set it."""
    share = _noise_floor_share(job, noise)
    if share is None or share <= NOISE_FLOOR_STEP_SHARE:
        return
    worst = max(clocks, key=lambda c: c.residual_us or 0.0)
    issues.append(
        JobIssue(
            NOISE_FLOOR_HIGH,
            f"lateness below {noise / 1000:.1f} ms is not called lateness here, "
            f"{share:.0%} of a step: the ranks of "
            f"{worst.name} leave the same collective {(worst.residual_us or 0.0) / 1000:.1f} "
            "ms apart (median), where ranks sharing a clock leave it together. Ranks named "
            "on one host whose clocks differ (containers with one host name?), or a host "
            "too busy to time them",
            ranks=list(worst.ranks),
        )
    )


def analyze_job(job: Job) -> JobAnalysis:
    """Match, align and measure one job (see the module docstring)."""
    issues = list(job.issues)
    for rank, rt in sorted(job.ranks.items()):
        for note in rt.notes:
            issues.append(
                JobIssue(
                    TRACE_NOTE,
                    f"rank {rank}: {note}",
                    ranks=[rank],
                    paths=[rt.path],
                    severity="info",
                )
            )
    if not job.ranks:
        # Every rank of the window was duplicated (copies of one trace): its issues say so,
        # and there is nothing to match.
        return JobAnalysis(job, [], [], [], [], [], 0.0, issues)
    job = _steps_numbered_alike(job, issues)
    index = _index(job)
    groups, table = _match_groups(job, index, issues)
    clocks, shift = _align(job, table, issues)
    noise = _noise_floor(clocks)
    _say_a_noise_floor_that_hides_lateness(job, clocks, noise, issues)
    collectives = _match_collectives(job, table, index.members_of, shift, noise, issues)
    rank_steps = _rank_steps(job, collectives)
    return JobAnalysis(
        job,
        clocks,
        groups,
        collectives,
        rank_steps,
        _job_steps(job, rank_steps),
        noise,
        issues,
    )


def analyze_ranks(traces: Sequence[RankTrace]) -> RunAnalysis:
    """Every job of a run, analysed; plus issues about traces that are in no job."""
    jobs, issues = group_jobs(traces)
    return RunAnalysis([analyze_job(j) for j in jobs], issues)


# -- causes -----------------------------------------------------------------------------------


def _by_rank_index(analysis: JobAnalysis) -> dict[tuple[int, int], MatchedCollective]:
    """(rank, its Collective.index) -> the matched collective it took part in."""
    return {(a.rank, a.collective_index): c for c in analysis.collectives for a in c.arrivals}


def _reduction(c: MatchedCollective, rank: int, earlier_us: float) -> float:
    """How much sooner everyone could leave collective ``c`` if ``rank`` arrived
    ``earlier_us`` sooner: nothing unless it was the (certain) last; at most its lateness."""
    if c.last_rank != rank or earlier_us <= 0:
        return 0.0
    second = max(a.ts_us for a in c.arrivals if a.rank != rank)
    new_last = max(second, c.last_us - earlier_us)
    return min(max(0.0, c.last_us - new_last), c.lateness_us)


def site_job_costs(analysis: JobAnalysis, what_ifs: Iterable[WhatIf]) -> list[SiteJobCost]:
    """Per (rank, site): the wait it causes on the other ranks and the job-level saving.

    What-ifs of one site at one collective add up (several syncs of one line in one
    interval), the saving at a collective being capped by its lateness; a step's saving is
    capped by the job's step time (the slowest rank's step)."""
    collectives = _by_rank_index(analysis)
    waits = {(r, w.id): w for r, rt in analysis.ranks.items() for w in rt.waits}
    job_step = {s.step: s.time_us for s in analysis.job_steps}
    step_count = analysis.step_count
    per_site: dict[tuple[int, str], dict[tuple[int, int], float]] = defaultdict(
        lambda: defaultdict(float)
    )
    members: dict[tuple[int, str], list[HostWait]] = defaultdict(list)
    member_ids: dict[tuple[int, str], set[str]] = defaultdict(set)
    bounds: dict[tuple[int, str], bool] = defaultdict(bool)
    for w in what_ifs:
        hw = waits.get((w.rank, w.wait_id))
        where = (w.rank, w.collective_index)
        if hw is None or where not in collectives:
            continue  # a wait or collective the job stage did not match: nothing to cost
        key = (w.rank, hw.site_key)
        per_site[key][where] += w.earlier_us
        # A wait once per site, by its id (unique on its rank): a list's membership test,
        # comparing the waits field by field, was quadratic in a site's waits.
        if hw.id not in member_ids[key]:
            member_ids[key].add(hw.id)
            members[key].append(hw)
        bounds[key] = bounds[key] or w.bound
    out = []
    for key, at in per_site.items():
        rank, site = key
        caused = 0.0
        saving_by_step: dict[Optional[int], float] = defaultdict(float)
        late = 0
        for ck, earlier in at.items():
            c = collectives[ck]
            saved = _reduction(c, rank, earlier)
            if saved <= 0:
                continue
            late += 1
            caused += c.others_waited_us(saved)
            saving_by_step[c.step] += saved
        saving = sum(
            (min(v, job_step.get(s, v)) if s is not None else v for s, v in saving_by_step.items()),
            0.0,
        )
        first = members[key][0]
        out.append(
            SiteJobCost(
                site_key=site,
                rank=rank,
                file=first.file,
                line=first.line,
                func=first.func,
                kind=first.kind,
                op=first.op,
                is_sync=first.is_sync,
                wait_ids=[w.id for w in members[key]],
                caused_wait_us=caused,
                job_saving_us=saving,
                job_saving_per_step_us=saving / step_count,
                late_collectives=late,
                steps=sorted(s for s in saving_by_step if s is not None),
                bound=bounds[key],
                line_exact=first.line_exact,
            )
        )
    out.sort(key=lambda s: (-s.job_saving_us, -s.caused_wait_us, s.rank, s.site_key))
    return out


def _interval(
    analysis: JobAnalysis, c: MatchedCollective, rank: int
) -> Optional[tuple[float, float]]:
    """The late rank's own-clock interval in which it became late: from its exit of its
    previous collective (any group) to its arrival here; from its window start when this is
    its first collective (its first step's start: ``span`` begins at the first operator,
    after a wait that opens the step, for data or a peer, which made the step-1 lateness
    'carried in')."""
    rt = analysis.ranks[rank]
    arrival = c.arrival_of(rank)
    if arrival is None:
        return None
    index = arrival.collective_index
    start = min([rt.span[0], *(s.ts for s in rt.steps)])
    if index > 0:
        prev = rt.collectives[index - 1]
        # A gloo collective's calling thread is free once it stops waiting for it (or, never
        # waiting, once it is enqueued): what it does after that can make it late here.
        freed = prev.released_ts if prev.released_ts is not None else prev.exit_ts
        if freed is not None:
            start = freed
    return start, arrival.raw_ts


class _WaitsIndex:
    """One rank's waits found by the interval they overlap: by start, with the running
    latest end (a scan of every wait of the rank per collective or arrival was quadratic
    in the job's length). ``overlapping`` answers in the order of the rank's list."""

    def __init__(self, waits: Sequence[HostWait]) -> None:
        self.waits = waits
        self.order = sorted(range(len(waits)), key=lambda n: waits[n].ts)
        self.starts = [waits[n].ts for n in self.order]
        self.latest_end = list(accumulate((waits[n].end for n in self.order), max))

    def overlapping(self, lo: float, hi: float) -> list[HostWait]:
        """The waits with ``end > lo`` and ``ts < hi``."""
        last = bisect_left(self.starts, hi)  # those starting before hi
        first = bisect_right(self.latest_end, lo, 0, last)  # none before ends after lo
        found = sorted(n for n in self.order[first:last] if self.waits[n].end > lo)
        return [self.waits[n] for n in found]


def _waits_index(analysis: JobAnalysis) -> dict[int, _WaitsIndex]:
    return {rank: _WaitsIndex(rt.waits) for rank, rt in analysis.ranks.items()}


def fallback_what_ifs(analysis: JobAnalysis) -> list[WhatIf]:
    """Bounds in place of the what-if replay: a host wait of the late rank inside the
    interval in which it became late (``_interval``) explains at most min(its wait there,
    the lateness). A sync's wait is taken as packed at its end (the blocking calls; the
    host work between them was not waiting), as ``cost.py`` does."""
    out = []
    index_of = _waits_index(analysis)
    for c in analysis.collectives:
        if c.last_rank is None:
            continue
        span = _interval(analysis, c, c.last_rank)
        if span is None:
            continue
        lo, hi = span
        for w in index_of[c.last_rank].overlapping(lo, hi):
            if w.wait_us <= 0:
                continue
            waited_from = w.end - w.wait_us
            overlap = min(w.end, hi) - max(waited_from, lo)
            if overlap <= 0:
                continue
            index = c.arrival_of(c.last_rank).collective_index  # type: ignore[union-attr]
            out.append(WhatIf(c.last_rank, w.id, index, min(overlap, c.lateness_us), bound=True))
    return out


# A rank's own step must exceed every other's by this share of it to be called the job's pace.
PACE_MIN_SHARE = 0.02


def own_steps(analysis: JobAnalysis) -> dict[int, float]:
    """Per rank with steps: its mean step time less its mean wait for peers in collectives
    (``Arrival.wait_us``): the time its own work takes per step. In a long run the job goes
    at the pace of the largest (a collective whose result is waited for a step later lets
    a slower rank fall behind for a while before the others wait)."""
    # Over the steps every rank recorded: a step of one rank's whose collectives were not
    # matched (the others' window started later) has its waits in its duration, uncounted.
    common = analysis.common_steps
    waited: dict[int, float] = defaultdict(float)
    for c in analysis.collectives:
        if c.step is None or c.step in common:
            for a in c.arrivals:
                waited[a.rank] += a.wait_us
    out = {}
    for rank, rt in analysis.ranks.items():
        steps = [s for s in rt.steps if s.number in common] or rt.steps
        if steps:
            out[rank] = (sum(s.duration for s in steps) - waited.get(rank, 0.0)) / len(steps)
    return out


def _pace(own: Mapping[int, float]) -> Optional[tuple[int, int]]:
    """(the pace rank, the next slowest) where one rank's own step exceeds every other's by
    more than ``PACE_MIN_SHARE`` of it; else None."""
    if len(own) < 2:
        return None
    first, second = sorted(own, key=lambda r: (-own[r], r))[:2]
    if own[first] - own[second] <= PACE_MIN_SHARE * own[first]:
        return None
    return first, second


def paced_savings(
    analysis: JobAnalysis, site_savings: Mapping[int, Mapping[str, float]]
) -> dict[str, tuple[float, int]]:
    """Per site key, what fixing it on every rank where it is saves the job per step in a
    long run, and the rank it is counted on: the largest own step (``own_steps``) before,
    less the largest after, each rank's own step shortened by the site's saving per step on
    that rank (``site_savings``: rank -> site key -> saving per step, from its replay).
    A sync on a rank that is not the job's pace saves the job nothing there; the same line
    on every rank is costed once, as the job's. Nothing where no rank sets the pace (by
    ``PACE_MIN_SHARE``): the collectives' own figures hold then."""
    own = own_steps(analysis)
    ranks = _pace(own)
    if ranks is None:
        return {}
    pace_rank = ranks[0]
    keys = {k for per in site_savings.values() for k in per}
    out = {}
    for key in keys:
        after = max(own[r] - min(site_savings.get(r, {}).get(key, 0.0), own[r]) for r in own)
        saving = own[pace_rank] - after
        if saving > 0:
            out[key] = (saving, pace_rank)
    return out


def pace_issue(analysis: JobAnalysis) -> Optional[JobIssue]:
    """Which rank sets the job's pace, when one does by more than ``PACE_MIN_SHARE``."""
    own = own_steps(analysis)
    ranks = _pace(own)
    if ranks is None:
        return None
    rank, second_rank = ranks
    slowest, second = own[rank], own[second_rank]
    held = sum((c.lateness_us for c in analysis.collectives if c.last_rank == rank), 0.0)
    gaps = sum((c.arrival_gap_us for c in analysis.collectives if c.arrival_gap_us > 0), 0.0)
    note = ""
    share = _noise_floor_share(analysis.job, analysis.noise_us)
    floor_high = share is not None and share > NOISE_FLOOR_STEP_SHARE
    if floor_high and held <= 0:
        # No lateness is called below the floor, so "waited 0 ms of it so far" would be
        # false: the others' waits for it are in the grid, uncalled.
        note = (
            "; no collective calls it late: lateness below the job's noise floor "
            f"({analysis.noise_us / 1000:.1f} ms) is not called lateness here"
        )
    elif not floor_high and gaps > held + max(analysis.noise_us, 0.05 * gaps):
        # (Under a high floor the lateness held is only what the floor let through: no
        # measure of what is waited for later.)
        note = (
            "; its collectives' results are waited for later, so the others have waited "
            f"{held / 1000:.2f} ms of it so far: in a longer run they wait for it each step"
        )
    return JobIssue(
        PACE,
        f"rank {rank} sets the job's pace: its own work takes {slowest / 1000:.2f} ms per "
        f"step, {(slowest - second) / 1000:.2f} ms more than rank {second_rank}'s{note}",
        ranks=[rank],
        severity="info",
    )


def job_causes(analysis: JobAnalysis) -> list[SiteJobCost]:
    """The sites that made ranks late, costed for the job, with the fallback's bounds."""
    return site_job_costs(analysis, fallback_what_ifs(analysis))


def late_arrivals(analysis: JobAnalysis, what_ifs: Iterable[WhatIf]) -> list[LateArrival]:
    """Every late arrival with what explains it; the rest is labelled, never pinned on a
    sync: carried in from before the window, or not explained by host waits (data loading,
    Python, GPU compute)."""
    waits = {(r, w.id): w for r, rt in analysis.ranks.items() for w in rt.waits}
    by_collective: dict[tuple[int, int], list[WhatIf]] = defaultdict(list)
    for w in what_ifs:
        by_collective[(w.rank, w.collective_index)].append(w)
    out = []
    for c in analysis.collectives:
        if c.last_rank is None:
            continue
        late = c.arrival_of(c.last_rank)
        mine = by_collective.get((c.last_rank, late.collective_index), []) if late else []
        contributors = []
        for w in mine:
            hw = waits.get((w.rank, w.wait_id))
            contributors.append((w.wait_id, hw.site_key if hw else "?", w.earlier_us))
        contributors.sort(key=lambda x: -x[2])
        explained = min(c.lateness_us, sum((x[2] for x in contributors), 0.0))
        rest = c.lateness_us - explained
        if rest <= analysis.noise_us:
            label = "explained by the host waits listed" + (
                " (upper bounds)" if any(w.bound for w in mine) else ""
            )
        elif c.carried_in:
            label = "carried in from before the profiled window, or not explained by host waits"
        else:
            label = "not explained by host waits (data loading, Python, GPU compute)"
        out.append(
            LateArrival(
                c.group,
                c.k,
                c.step,
                c.last_rank,
                c.lateness_us,
                c.carried_in,
                explained,
                rest,
                label,
                contributors,
                any(w.bound for w in mine),
            )
        )
    return out


def peer_waits(analysis: JobAnalysis) -> list[PeerWait]:
    """Host waits of ranks that were, at the time, waiting for a late peer's arrival: the
    part of each that overlaps the rank's wait at the collective (its own clock)."""
    out = []
    index_of = _waits_index(analysis)
    for c in analysis.collectives:
        if c.last_rank is None:
            continue
        for a in c.arrivals:
            if a.rank == c.last_rank or a.wait_us <= analysis.noise_us:
                continue
            lo, hi = a.raw_ts, a.raw_ts + a.wait_us
            for w in index_of[a.rank].overlapping(lo, hi):
                if w.wait_us <= 0:
                    continue
                overlap = min(w.end, hi) - max(w.end - w.wait_us, lo)
                if overlap > 0:
                    out.append(
                        PeerWait(a.rank, w.id, w.site_key, c.last_rank, c.group, c.k, overlap)
                    )
    return out
