"""Group syncs into sites (source line + operator), total them into a summary, and attach
the advice. Input: the per-trace results of ``engine.analyze_trace``; a pure function of
them (nothing is written back into the syncs)."""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

import msgspec

from tb_syncfinder.catalogue import (
    ALLOCATOR_SYNC,
    CHECKED,
    DEVICE_TO_HOST_COPY,
    KIND_NAMES,
    TENSOR_TEXT_OP,
    advice_for,
    advice_on_device,
    fix_frames,
    is_framework_file,
    is_warmup_annotation,
    lightning_loop,
)
from tb_syncfinder.cost import (
    FIX_WITH_OWN_SHARE,
    FIX_WITH_STEP_SHARE,
    HOST_BOUND_SHARE,
    PROFILER_NOTE_SHARE,
    PROFILER_US_PER_HOST_EVENT,
    PROFILER_US_PER_PYTHON_EVENT,
    estimated_saving_us,
    idle_union_us,
    profiler_overhead_us,
)
from tb_syncfinder.models import (
    CallerCount,
    CollectiveWorker,
    LineCount,
    ProfilerOverhead,
    RankCount,
    ReadLine,
    Report,
    Site,
    Source,
    StepStats,
    Summary,
    Sync,
    TraceResult,
    TraceSavings,
    WarmupAllocator,
)
from tb_syncfinder.query import rank_sites

# One line on how the predicted saving was obtained, by method (Summary.saving_how).
SAVING_HOW = {
    "replay": "predicted by replaying each profiled step from its dependency graph without "
    "the sync's edges (step time: the longer of host and device span)",
    "bound": "upper bound: host wait plus the GPU bubble after each sync, per step (the "
    "trace could not be replayed)",
    "mixed": "replayed where the trace allowed it; the upper bound (host wait plus bubble) "
    "for traces that could not be replayed",
}

# How, where every trace is an NPU's with its tasks read: the bubble is the NPU's, and its
# own work in a step caps what the step can lose (``cost.StepBounds``).
SAVING_HOW_NPU = (
    "upper bound: host wait plus the NPU bubble after each sync, per step, at most the step "
    "less the NPU's work in it (the trace could not be replayed)"
)

# How, where no trace's device activity was read (torch_npu): the bound lacks the bubble.
SAVING_HOW_IDLE_UNREAD = (
    "not predicted: only the host wait is known, and it is no upper bound (the trace holds "
    "no task of the NPU's own, so its idle time after each sync is not known: the saving may "
    "be larger, or smaller where the NPU is busy)"
)


def site_key(
    source: Source | None,
    op: str | None,
    api: str,
    kind: str = "",
    library: tuple[str, str] | None = None,
) -> str:
    """``file:line:op`` of a sync (``file:line:api`` outside any operator). Without a source
    line: ``op:kind``, or ``-:api:kind`` outside any operator. The operator alone puts unlike
    syncs together (in a trace without stacks every blocking ``aten::to`` copy is one,
    whether a read-back, a pageable upload or a collective's result awaited) and a site has
    one kind and one fix; the API call that waited longest varies from call to call of one
    copy (the copy or the stream synchronize after it), so it is no part of the key.

    A sync inside a library the user's line called adds ``@file:function`` of the library's
    code that synced: one call of the user's (``trainer.train()``, ``model.generate()``)
    runs many reads of the library's, each with its own fix, and one site of them named the
    first one's. By function, not line: one fix for one function's reads (Trainer's logging
    reads the loss and the gradient norm). Not for a printed tensor: one print is one site,
    whatever lines of torch's formatting read it. ``library``: the ``(file, function)`` a
    library's fix is about (``catalogue.library_fix``), which keys the site instead of the
    innermost library frame: Lightning's progress bar and its loggers read through one
    helper, ``to_item``, for two fixes."""
    if source is not None and source.file:
        key = f"{source.file}:{source.line}:{op or api}"
        if library is None and source.library is not None and source.library.file:
            library = (source.library.file, source.library.func)
        if library is not None and op != TENSOR_TEXT_OP:
            key += f"@{library[0]}:{library[1]}"
        return key
    if not kind:
        return f"{op or '-'}:{api}"
    return f"{op}:{kind}" if op else f"-:{api}:{kind}"


def key_library(key: str) -> tuple[str, str] | None:
    """The ``(file, function)`` of the library code a ``site_key`` names after its ``@``,
    else None. The last ``@`` (a user's path may hold one before it; a function's name
    cannot), and the last ``:`` after it. Only for a site with a ``library``, whose key ends
    so: a key without that part may hold an ``@`` in its user's path."""
    _head, at, tail = key.rpartition("@")
    file, colon, func = tail.rpartition(":")
    return (file, func) if at and colon and file else None


def _method(methods: set[str]) -> str:
    if len(methods) == 1:
        return next(iter(methods))
    return "mixed" if methods else "bound"


def _common(values: set[str | None]) -> str | None:
    """The one value every member has; None where they differ."""
    return next(iter(values)) if len(values) == 1 else None


def _one_device(members: Sequence[Sync], devices: Mapping[str, str | None] | None) -> str | None:
    """The device kind of every trace of these syncs, where it is one (None otherwise)."""
    if not devices:
        return None
    found = {devices.get(s.trace) for s in members}
    return found.pop() if len(found) == 1 else None


def build_sites(
    syncs: list[Sync],
    step_count: int,
    step_time_us: float,
    latent: bool = False,
    savings: Sequence[tuple[str, TraceSavings]] = (),
    wall_time_us: float | None = None,
    devices: Mapping[str, str | None] | None = None,
    job: JobRanks | None = None,
) -> list[Site]:
    """Sites of these syncs (grouped by their ``site_key``), sorted by predicted saving,
    then cost or count. ``savings``: (trace path, its what-if figures) of the traces the
    syncs come from; a site's predicted saving is the sum of its traces' figures.
    ``wall_time_us``: the steps' wall time in all (default ``step_time_us``), which a site's
    saving with the others must reach a share of for its "fix together" note.
    ``devices``: each trace's device kind (``TraceInfo.device``): the advice of a site all
    of whose traces are of one device is worded for it (``catalogue.advice_on_device``).
    ``job``: where the syncs' traces are the ranks of one job, which trace is which rank
    (each site's syncs by rank, ``Site.ranks``)."""
    by_trace = dict(savings)
    groups: dict[str, list[Sync]] = {}
    for sync in syncs:
        groups.setdefault(sync.site_key, []).append(sync)
    by_id = {sync.id: sync for sync in syncs if sync.latent}
    sites = []
    for key, members in groups.items():
        first = members[0]
        kinds = Counter(s.kind for s in members)
        kind = kinds.most_common(1)[0][0]
        ops: list[str] = []
        apis: list[str] = []
        # The operators around each sync's own (an autograd Function's, GPyTorch's
        # ``Solve``): said where every sync of the site ran inside the same ones.
        around: set[tuple[str, ...]] = set()
        for s in members:
            # A recorded Tensor method with no operator in a CPU trace (``.tolist()``) has
            # the one it runs on a GPU as its ``op``: the site names it, as a GPU run's.
            chain = s.op_chain or ([s.op] if s.op else [])
            at = chain.index(s.op) if s.op in chain else 0
            around.add(tuple(chain[:at]))
            for name in chain[at:]:
                if name not in ops:
                    ops.append(name)
            for name in s.apis:
                if name not in apis:
                    apis.append(name)
        if len(around) == 1:
            ops = [*next(iter(around)), *ops]
        # A tensor printed: said first (the key's operator part, file:line:op with a
        # source line, op:kind without one, e.g. a print inside a logging library).
        if key.endswith(":" + TENSOR_TEXT_OP) or key.startswith(TENSOR_TEXT_OP + ":"):
            ops.insert(0, TENSOR_TEXT_OP)
        wait = sum((s.host_wait_us for s in members), 0.0)
        idle = idle_union_us(members)
        source = first.source
        predicted = 0.0
        methods: set[str] = set()
        notes: list[str] = []
        # Measured only where every trace of the site had its device read: an NPU trace's
        # host-wait-only figure summed with a GPU's would pass as a bound.
        idle_read = True
        # Without the profiler: from every trace of the site, else None (one not fitted).
        unprofiled_parts: list[float | None] = []
        for trace in dict.fromkeys(s.trace for s in members):
            figures = by_trace.get(trace)
            if figures is None:
                continue
            idle_read = idle_read and figures.device_idle_read
            predicted += figures.sites.get(key, 0.0)
            unprofiled_parts.append(figures.unprofiled_sites.get(key))
            bound_why = figures.bound_sites.get(key)
            methods.add("bound" if bound_why else figures.method)
            if figures.method == "bound" and figures.reason and figures.reason not in notes:
                notes.append(figures.reason)
            if bound_why and bound_why not in notes:
                notes.append(bound_why)
        unprofiled = (
            sum(unprofiled_parts)  # type: ignore[arg-type]
            if unprofiled_parts and None not in unprofiled_parts
            else None
        )
        with_others = _with_others(key, members, by_trace)
        spread = _step_spread(members)
        by_rank = job.counts(members) if job else []
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
                advice=advice_on_device(
                    advice_for(
                        kind,
                        ops,
                        max((s.bytes or 0) for s in members) or None,
                        list(dict.fromkeys(s.forward_op for s in members if s.forward_op)),
                        # One member's stack: a site's syncs come through one call of one
                        # line, so through the same library code (a long run has thousands).
                        fix_frames(
                            next((s.stack for s in members if s.stack), []),
                            next((s.forward_stack for s in members if s.forward_stack), []),
                        ),
                        # What every sync called, and the library call each is the first of:
                        # a fix that one sync's calls tell (a library's set-up) is not that of
                        # the site's others.
                        set.intersection(*(set(s.apis) for s in members)),
                        None
                        if any(s.first_call_of is None for s in members)
                        else [
                            (
                                s.first_call_of,
                                bool(s.op_chain) and s.op_chain[-1] == s.first_call_of,
                            )
                            for s in members
                        ],
                        # A selection per group: every sync's line in a loop over groups
                        # (a backward pass does not run once per pass of it).
                        all(
                            s.source is not None
                            and s.source.loop_line is not None
                            and not s.source.backward
                            for s in members
                        ),
                        # A read that sets a size (a slice bound, range(n)): every sync's.
                        all(_line_fact(s, "read_as_size") for s in members),
                        # A loop's element read one at a time: every sync's.
                        all(_line_fact(s, "reads_elements") for s in members),
                        # A sampled value the host needs at once: every sync's.
                        all(_line_fact(s, "reads_sample") for s in members),
                        # Read in torch.compile'd code, the same way: every sync's.
                        _common({s.source.compiled if s.source else None for s in members}),
                        # A copy a host call takes at once (a checkpoint): every sync's.
                        _common({_line_fact(s, "host_use") for s in members}),
                        # Read every N steps already: by its own or its call's `%` test,
                        # every sync, and not in every step.
                        all(map(_under_a_periodic_test, members))
                        and _in_some_steps(spread["steps_with_syncs"], step_count, by_rank),
                    ),
                    _one_device(members, devices),
                ),
                mean_host_wait_us=wait / len(members),
                line_exact=all(s.source is not None and s.source.line_exact for s in members),
                def_line=source.def_line if source else None,
                apis=apis,
                steps=sorted({s.step for s in members if s.step is not None}),
                **spread,
                # An inexact line's where all its candidates run under one test.
                periodic_guard=source.periodic_guard if source else None,
                callers=_callers(members),
                **_after_reads(members, by_id),
                after_sync=(
                    source.after_sync
                    if source is not None
                    and all(
                        s.source is not None and s.source.after_sync == source.after_sync
                        for s in members
                    )
                    else None
                ),
                latent=latent,
                candidates=_candidates(members),
                backward=bool(source and source.backward),
                run_by=source.run_by if source else None,
                library=_site_library(members, source),
                library_lines=_library_lines(members),
                predicted_saving_us=predicted,
                predicted_saving_per_step_us=predicted / step_count if step_count else predicted,
                unprofiled_predicted_saving_per_step_us=(
                    None
                    if unprofiled is None
                    else unprofiled / step_count
                    if step_count
                    else unprofiled
                ),
                saving_method=_method(methods),
                saving_note="; ".join(notes) or None,
                recorded_line=source.recorded_line if source else None,
                source_read=(
                    any(s.source is not None and bool(s.source.resolved_path) for s in members)
                    if source is not None and source.file
                    else None
                ),
                other_run_copy=next(
                    (s.source.other_run_copy for s in members if s.source is not None),
                    None,
                ),
                copies_found=max(
                    (s.source.copies_found for s in members if s.source is not None), default=0
                ),
                cell=source.cell if source else None,
                annotations=[
                    name
                    for name, _ in Counter(
                        s.annotations[-1] for s in members if s.annotations
                    ).most_common(3)
                ],
                predicted_saving_with_others_us=with_others,
                predicted_saving_with_others_per_step_us=(
                    None if with_others is None else with_others / max(step_count, 1)
                ),
                copy_direction_guessed=kind == DEVICE_TO_HOST_COPY
                and all(s.copy_direction_guessed for s in members if s.kind == kind),
                other_kinds={k: n for k, n in kinds.most_common() if k != kind},
                gpu_idle_measured=idle_read,
                ranks=by_rank,
                job_ranks=len(job.steps) if job else 0,
            )
        )
    if not latent:
        wall = step_time_us if wall_time_us is None else wall_time_us
        for site in sites:
            _fix_with(site, groups, by_trace, step_count, wall)
    return rank_sites(sites)


def _with_others(key: str, members: list[Sync], by_trace: dict[str, TraceSavings]) -> float | None:
    """A site's saving with every other site fixed too, over its traces; None unless each
    of them has the figure (``TraceSavings.with_others``)."""
    total = 0.0
    for trace in dict.fromkeys(s.trace for s in members):
        figures = by_trace.get(trace)
        if figures is None or key not in figures.with_others:
            return None
        total += figures.with_others[key]
    return total


# A "fix together" note also gives the site's saving with every other site fixed when
# fixing it with its partner alone saves less than this share of that (a third site, or
# more, waits for the same device work).
FIX_WITH_PAIR_SHARE = 0.75
# A partner is named only where fixing the pair recovers at least this share of what the
# site's saving with every other site fixed adds to its own (the pair gains that much over
# the site alone); else the note says the others wait for the same work, naming none.
FIX_WITH_PARTNER_SHARE = 0.5


def _fix_with(
    site: Site,
    groups: dict[str, list[Sync]],
    by_trace: dict[str, TraceSavings],
    step_count: int,
    wall_time_us: float,
) -> None:
    """Where fixing a site alone saves much less than with the others fixed too (its own
    saving below ``FIX_WITH_OWN_SHARE`` of that, which is at least ``FIX_WITH_STEP_SHARE``
    of the steps' time), say so in ``fix_with_note``, and name the other site its syncs then
    wait for where each of its traces named the same one (``whatif.fix_together``) and
    fixing both recovers at least ``FIX_WITH_PARTNER_SHARE`` of the difference."""
    with_others = site.predicted_saving_with_others_us
    if with_others is None or site.saving_method != "replay":
        return
    if with_others < FIX_WITH_STEP_SHARE * wall_time_us:
        return
    own = site.predicted_saving_us
    if own >= FIX_WITH_OWN_SHARE * with_others:
        return
    from tb_syncfinder.outputs.text import format_us

    steps = max(step_count, 1)
    partner, together = _partner(site.key, groups, by_trace)
    if partner is None or together - own < FIX_WITH_PARTNER_SHARE * (with_others - own):
        site.fix_with_note = (
            f"Fixing this alone saves {format_us(own / steps)} per step; once every other "
            f"site is fixed, fixing this one saves {format_us(with_others / steps)} per step: "
            "other syncs wait for the same GPU work."
        )
        return
    site.fix_with = [partner]
    site.fix_with_saving_us = together
    site.fix_with_saving_per_step_us = together / steps
    other = groups[partner][0]
    note = (
        f"Fixing this alone saves {format_us(own / steps)} per step: "
        f"{_call_text(other, site.file)}{_under_text(partner, groups)} then waits for the "
        "same GPU work. Fixed together "
        f"they save {format_us(together / steps)} per step."
    )
    if together < FIX_WITH_PAIR_SHARE * with_others:  # more sites wait for that work
        note += (
            f" Once every other site is fixed, fixing this one saves "
            f"{format_us(with_others / steps)} per step."
        )
    site.fix_with_note = note


def _partner(
    key: str, groups: dict[str, list[Sync]], by_trace: dict[str, TraceSavings]
) -> tuple[str | None, float]:
    """The site every trace of site ``key`` named as its partner (``TraceSavings.fix_with``)
    and what fixing both saves over them; (None, 0) where one named none or another one."""
    partner: str | None = None
    together = 0.0
    for trace in dict.fromkeys(s.trace for s in groups[key]):
        named = by_trace[trace].fix_with.get(key)
        if named is None or (partner is not None and named[0] != partner):
            return None, 0.0
        partner = named[0]
        together += named[1]
    if partner is None or partner not in groups:
        return None, 0.0
    return partner, together


def _under_text(key: str, groups: Mapping[str, list[Sync]]) -> str:
    """``, under lib/file.py (func)`` where site ``key`` shares its line and operator with
    another site, split from it by the library code that synced (``site_key``): Lightning's
    progress bar and loggers read under one ``trainer.fit()`` line, and a partner named by
    that line alone named either."""
    library = key_library(key)
    # Only a key that carries a library part: one of its syncs ran that library code (a
    # user's path may hold an ``@`` too, ``/ws/job@2/train.py``).
    members = groups.get(key) or []
    if library is None or not any(
        not frame.user and frame.func == library[1] and frame.file.endswith(library[0])
        for sync in members[:1]
        for frame in sync.stack
    ):
        return ""
    head = key[: -len(f"@{library[0]}:{library[1]}")]
    shared = (k for k in groups if k != key and (k == head or k.startswith(head + "@")))
    if next(shared, None) is None:
        return ""
    return f", under {library[0]} ({library[1]})"


def _call_text(sync: Sync, file: str | None) -> str:
    """A site named by its first sync, as a sentence says it: ``the .tolist() at line 204``
    (the Tensor method or function called, where the trace recorded it, else the operator
    or API call; the line, with the file when it is not ``file``)."""
    frame = sync.stack[0] if sync.stack else None
    if frame is not None and frame.file == "<built-in>" and not frame.func.startswith("_"):
        call = f".{frame.func}()"
    else:
        call = sync.op or sync.api
    source = sync.source
    if source is None or not source.file:
        return f"the {call}"
    where = f"line {source.line}" if source.file == file else f"{source.file}:{source.line}"
    return f"the {call} at {where}"


def _line_fact(sync: Sync, name: str) -> Any:
    """A fact of the line that read (``Source.read_as_size``, ``reads_elements``,
    ``reads_sample``, ``host_use``): the library's line where the read is in a library's
    code (pytorch-forecasting's ``_tft.py`` slicing by a tensor's item: a size, told "keep
    it on the device"), else the user's."""
    source = sync.source
    if source is None:
        return None
    library = source.library
    if library is not None and library.line_exact and not is_framework_file(library.file):
        return getattr(library, name)
    # torch's own Python around the read (``Tensor.__format__`` of a ``print``): the user's
    # line says what is read.
    return getattr(source, name)


def _under_a_periodic_test(sync: Sync) -> bool:
    """Whether a sync's line, or the line of the user's that called its function, runs
    under a ``%`` test (``Source.periodic_guard``): read every N steps already."""
    source = sync.source
    if source is None:
        return False
    called = source.called_from
    return bool(source.periodic_guard) or (called is not None and bool(called.periodic_guard))


class JobRanks(msgspec.Struct, frozen=True):
    """The ranks of a job whose traces a report is of: each trace's rank and each rank's
    profiled steps."""

    rank_of: dict[str, int]  # trace path -> its rank
    steps: dict[int, int]  # rank -> its profiled steps, over its traces

    def counts(self, members: Sequence[Sync]) -> list[RankCount]:
        """A site's syncs by rank, each rank that had any."""
        count: Counter[int] = Counter()
        steps_with: dict[int, set[tuple[str, int]]] = {}
        for sync in members:
            rank = self.rank_of.get(sync.trace)
            if rank is None:
                continue
            count[rank] += 1
            if sync.step is not None:
                steps_with.setdefault(rank, set()).add((sync.trace, sync.step))
        return [
            RankCount(
                rank=rank,
                count=count[rank],
                steps=self.steps.get(rank, 0),
                steps_with_syncs=len(steps_with.get(rank, ())),
            )
            for rank in sorted(count)
        ]


def job_ranks(analysed: Sequence[TraceResult]) -> JobRanks | None:
    """Which trace is which rank, where the analysed traces are the ranks of one job (two
    ranks or more, one run); None otherwise (a per-rank split of one rank says nothing)."""
    if not analysed or len({r.info.run for r in analysed}) > 1:
        return None
    rank_of: dict[str, int] = {}
    steps: Counter[int] = Counter()
    for result in analysed:
        rank = result.rank.rank if result.rank is not None else None
        if rank is None:
            return None
        rank_of[result.info.path] = rank
        steps[rank] += len(result.steps)
    return JobRanks(rank_of, dict(steps)) if len(steps) > 1 else None


def _in_some_steps(steps_with_syncs: int, step_count: int, by_rank: list[RankCount]) -> bool:
    """Whether a site synced in some of the steps but not all; in a job, some of a rank's
    own (a read on rank 0 alone in each of its steps is in every step there, though in half
    of the job's rank-steps)."""
    if by_rank:
        return any(0 < entry.steps_with_syncs < entry.steps for entry in by_rank)
    return 0 < steps_with_syncs < step_count


def _step_spread(members: list[Sync]) -> dict[str, int]:
    """``steps_with_syncs`` and ``max_per_step`` of a site's syncs (by trace and step)."""
    per_step = Counter((s.trace, s.step) for s in members if s.step is not None)
    return {
        "steps_with_syncs": len(per_step),
        "max_per_step": max(per_step.values(), default=0),
    }


def _after_reads(members: Sequence[Sync], by_id: Mapping[str, Sync]) -> dict[str, Any]:
    """``after_read_count`` and ``after_read`` of a site's syncs (``Sync.after_read``)."""
    before = [by_id.get(s.after_read) for s in members if s.after_read]
    lines = {
        (b.source.file, b.source.line, b.source.func, b.source.line_exact)
        for b in before
        if b is not None and b.source is not None
    }
    one = len(before) == len(members) and len(lines) == 1
    return {
        "after_read_count": len(before),
        "after_read": ReadLine(*lines.pop()) if one else None,
    }


def _callers(members: Sequence[Sync]) -> list[CallerCount]:
    """A site's syncs by the user's line that called its function, most first (ties by
    place); empty where no user frame called it."""
    counts: dict[tuple[str, int | None, str, bool, str | None, str | None, int | None], int] = {}
    for sync in members:
        called_from = sync.source.called_from if sync.source is not None else None
        if called_from is not None:
            key = (
                called_from.file,
                called_from.line,
                called_from.func,
                called_from.line_exact,
                called_from.periodic_guard,
                called_from.periodic_guard_file,
                called_from.periodic_guard_line,
            )
            counts[key] = counts.get(key, 0) + 1
    ordered = sorted(counts.items(), key=lambda item: (-item[1], item[0][0], item[0][1] or 0))
    return [
        CallerCount(file, line, func, exact, count, guard, guard_file, guard_line)
        for (file, line, func, exact, guard, guard_file, guard_line), count in ordered
    ]


def _site_library(members: Sequence[Sync], source: Source | None) -> Source | None:
    """The library line a site's syncs synced in: the first one's, where every member's
    is exact (one line, or each named by ``_library_lines``) or all are inexact alike. Where
    some are exact and others not, or their candidates differ, no one line holds for the
    site: its function's, inexact, with every line any of them names as a candidate
    (diffusers' ``DDPMScheduler.step``: half of its ``is_nonzero`` reads at line 504, exact,
    the others inexact, had all been named at 504, exact)."""
    library = source.library if source is not None else None
    if library is None:
        return None
    exact_lines: set[int] = set()
    candidates: set[int] = set()
    every_exact = True
    for sync in members:
        other = sync.source.library if sync.source is not None else None
        if other is None or (other.file, other.func) != (library.file, library.func):
            return library  # other code: the site's fix names the first one's
        if other.line_exact and other.line is not None:
            exact_lines.add(other.line)
        else:
            every_exact = False
            candidates.update(other.candidates)
    if every_exact or (not exact_lines and candidates == set(library.candidates)):
        return library
    # The facts of an exact line (its loop, its every-N-steps test) hold for no one line.
    return msgspec.structs.replace(
        library,
        line=library.def_line if library.def_line is not None else library.line,
        line_exact=False,
        candidates=sorted(exact_lines | candidates),
        loop_line=None,
        read_as_size=False,
        reads_elements=False,
        reads_sample=False,
        periodic_guard=None,
    )


def _library_lines(members: Sequence[Sync]) -> list[LineCount]:
    """A site's syncs by the exact line of its library code that synced, in line order,
    where there are two or more such lines; empty where any is inexact or of other code."""
    first = members[0].source.library if members[0].source is not None else None
    if first is None:
        return []
    counts: dict[int, int] = {}
    for sync in members:
        library = sync.source.library if sync.source is not None else None
        if (
            library is None
            or library.line is None
            or not library.line_exact
            or (library.file, library.func) != (first.file, first.func)
        ):
            return []
        counts[library.line] = counts.get(library.line, 0) + 1
    if len(counts) < 2:
        return []
    return [LineCount(line, count) for line, count in sorted(counts.items())]


def _candidates(members: list[Sync]) -> list[int]:
    """The lines an inexact site's syncs may be on (all members' candidates)."""
    lines: set[int] = set()
    for sync in members:
        if sync.source is not None and not sync.source.line_exact:
            lines.update(sync.source.candidates)
    return sorted(lines)


def _notes_by_trace(notes: list[tuple[TraceResult, str | None]], several: bool) -> list[str]:
    """Each distinct note once; among several traces, followed by the traces it is about
    (a note of one trace read as the run's would misstate the others)."""
    # Per note its traces, in order, each once (a dict: a list's membership test made a
    # note shared by 4,000 traces a quadratic 0.4 s).
    traces_of: dict[str, dict[str, None]] = {}
    for result, note in notes:
        if note:
            name = result.info.worker or os.path.basename(result.info.path)
            traces_of.setdefault(note, {})[name] = None
    if not several:
        return list(traces_of)
    return [f"{note} ({', '.join(names)})" for note, names in traces_of.items()]


def build_report(results: list[TraceResult]) -> Report:
    """The report of one or more analysed traces (a run, or a worker/span of it)."""
    traces = [r.info for r in results]
    syncs = [s for r in results for s in r.syncs]
    latent = [s for r in results for s in r.latent]
    steps: list[StepStats] = [st for r in results for st in r.steps]
    step_count = len(steps)
    step_time = sum((st.step_time_us for st in steps), 0.0)
    wait = sum((s.host_wait_us for s in syncs), 0.0)
    idle = idle_union_us(syncs)
    saving = sum((estimated_saving_us(r.steps, r.syncs, r.info.step_markers) for r in results), 0.0)
    mean_step = step_time / step_count if step_count else 0.0
    by_kind = Counter(s.kind for s in syncs)
    analysed = [r for r in results if not r.info.error]
    savings = [(r.info.path, r.savings) for r in analysed]
    devices = {r.info.path: r.info.device for r in analysed}
    job = job_ranks(analysed)
    predicted = sum((r.savings.all_syncs_us for r in analysed), 0.0)
    wall = sum((st.wall_time_us or st.step_time_us for st in steps), 0.0)
    mean_wall = wall / step_count if step_count else 0.0
    replayed = [r.savings for r in analysed if r.savings.method == "replay"]
    # The traces the saving is about: a CPU-only trace without syncs has nothing to replay,
    # and neither its method nor its reason is the run's.
    counted = [r for r in analysed if r.syncs or r.info.has_gpu_activity]
    # Unprofiled: only where every trace the saving is about was fitted (one trace left at
    # its profiled figure would pass for an unprofiled one).
    fitted = [r.savings.unprofiled_all_syncs_us for r in counted]
    unprofiled = sum(fitted) if fitted and None not in fitted else None  # type: ignore[arg-type]
    method = _method({r.savings.method for r in counted})
    window = sum((s.window_us for s in replayed), 0.0)
    idle_from_syncs = sum((s.gpu_idle_from_syncs_us for s in replayed), 0.0)
    about = counted or analysed  # CPU-only traces alone: their own reason
    reasons = _notes_by_trace(
        [(r, r.savings.reason) for r in about if r.savings.method == "bound"]
        + [(r, r.info.window_note) for r in analysed],
        several=len(about) > 1,
    )
    # A trace the figures are about has its device activity unread (torch_npu): its zero
    # idle is no measurement, and a bound summed with it no upper bound.
    idle_read = all(r.savings.device_idle_read for r in about)
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
        predicted_saving_us=predicted,
        predicted_saving_per_step_us=predicted / step_count if step_count else predicted,
        predicted_step_time_us=max(0.0, mean_wall - predicted / step_count) if step_count else 0.0,
        unprofiled_predicted_saving_per_step_us=(
            None if unprofiled is None else unprofiled / step_count if step_count else unprofiled
        ),
        saving_method=method,
        saving_note="; ".join(reasons) or None,
        saving_how=(
            SAVING_HOW_IDLE_UNREAD
            if not idle_read
            else SAVING_HOW_NPU
            if method == "bound" and about and all(r.info.device == "npu" for r in about)
            else SAVING_HOW[method]
        ),
        mean_device_step_time_us=_mean_device_step_us(results),
        mean_wall_step_time_us=mean_wall,
        gpu_idle_from_syncs_us=idle_from_syncs,
        sync_idle_share=idle_from_syncs / window if window > 0 else 0.0,
        replay_fidelity_error=max((s.fidelity_error for s in replayed), default=0.0),
        gpu_idle_measured=idle_read,
        traces_without_step_markers=sum(
            1 for r in analysed if not r.info.step_markers and r.info.steps > 0
        ),
    )
    summary.steps_by_worker, summary.steps_note = _steps_of_unrelated_workers(analysed)
    _profiler_summary(summary, analysed)
    overhead = [s for r in results for s in getattr(r, "profiler_overhead", ())]
    warmup = [s for r in results for s in getattr(r, "warmup_allocator", ())]
    worker = [s for r in results for s in getattr(r, "collective_worker", ())]
    return Report(
        traces=traces,
        summary=summary,
        syncs=syncs,
        sites=build_sites(
            syncs,
            step_count,
            step_time,
            savings=savings,
            wall_time_us=wall,
            devices=devices,
            job=job,
        ),
        latent=latent,
        steps=steps,
        latent_sites=build_sites(
            latent, step_count, step_time, latent=True, devices=devices, job=job
        ),
        profiler_overhead=ProfilerOverhead(
            count=len(overhead),
            host_wait_us=sum((s.host_wait_us for s in overhead), 0.0),
            syncs=overhead,
        ),
        warmup_allocator=build_warmup_allocator(warmup, devices),
        collective_worker=CollectiveWorker(
            count=len(worker), host_wait_us=sum((s.host_wait_us for s in worker), 0.0), syncs=worker
        ),
    )


def _steps_of_unrelated_workers(
    analysed: list[TraceResult],
) -> tuple[dict[str, int], str | None]:
    """Each worker's steps, and the note that the per-step figures average them, where the
    analysed traces are of several workers that are not all ranks of a job (whose steps
    run side by side, so their mean is the job's step). Lightning's training and validation
    traces in one folder were read as 0.7 reads per step for a read of every training
    step, without a word. Across runs (the merged report of several), ``run/worker``: two
    jobs' ranks included, as their runs' steps are averaged together as any others'."""
    runs = {r.info.run for r in analysed if r.steps}
    if all(r.rank is not None for r in analysed) and len(runs) < 2:
        return {}, None
    steps: dict[str, int] = {}
    for r in analysed:
        if not r.steps:  # a trace that recorded no step adds none to the average
            continue
        name = r.info.worker or os.path.basename(r.info.path)
        if len(runs) > 1:
            name = f"{r.info.run or ''}/{name}"
        steps[name] = steps.get(name, 0) + len(r.steps)
    if len(steps) < 2:
        return {}, None
    listed = ", ".join(f"{name} ({_plural_steps(n)})" for name, n in steps.items())
    loops = [lightning_loop(name) for name in steps]
    if len(runs) > 1:
        what = f"{len(runs)} runs"
        pick = "each run's own are under its name (report --run NAME)"
    else:
        what = (
            "Lightning's " + " and ".join(dict.fromkeys(loop for loop in loops if loop)) + " loops"
            if all(loops)
            # Not "not ranks": a DDP job's traces lack distributedInfo where torch wrote
            # none (before 1.10, or exported before init_process_group).
            else f"{len(steps)} workers whose traces do not name them ranks of one job"
        )
        pick = "pick one worker to see its own (the tab's Worker menu, or report --worker NAME)"
    note = (
        f"per-step figures are over the {_plural_steps(sum(steps.values()))} of {what}, "
        f"averaged together: {listed}; {pick}"
    )
    return steps, note


def _plural_steps(count: int) -> str:
    return f"{count} step" if count == 1 else f"{count} steps"


def _mean_device_step_us(results: list[TraceResult]) -> float:
    """The device's time per step over the steps of traces with device activity: a rank
    without a GPU (a CPU gloo rank beside a CUDA one) halved the CUDA rank's 31.6 ms."""
    steps = [st for r in results if r.info.has_gpu_activity for st in r.steps]
    return sum(st.device_time_us for st in steps) / len(steps) if steps else 0.0


def _profiler_summary(summary: Summary, analysed: list[TraceResult]) -> None:
    """The summary's figures of the profiler's own overhead over the analysed traces'
    steps and, where it is at least ``PROFILER_NOTE_SHARE`` of the mean step of a run with
    syncs on a device, what that means for the predicted saving (``profiler_note``; not
    in ``saving_note``, which keeps its meaning: why the saving is a bound or partial)."""
    steps = sum(len(r.steps) for r in analysed)
    if not steps:
        return
    events = sum(r.savings.host_events for r in analysed)
    python = sum(r.savings.python_events for r in analysed)
    summary.host_events_per_step = events / steps
    summary.profiler_overhead_per_step_us = profiler_overhead_us(events, python) / steps
    busy = [r for r in analysed if r.savings.device_busy_us is not None]
    busy_steps = sum(len(r.steps) for r in busy)
    if busy_steps:
        summary.device_busy_per_step_us = (
            sum(r.savings.device_busy_us or 0.0 for r in busy) / busy_steps
        )
    busiest_worker, device = _busiest_worker(busy)
    summary.busiest_worker_device_busy_per_step_us = device
    mean_step = summary.mean_wall_step_time_us or summary.mean_step_time_us
    overhead = summary.profiler_overhead_per_step_us
    on_device = any(r.info.device not in (None, "cpu") for r in analysed)
    if not summary.sync_count or not on_device or mean_step <= 0:
        return
    if overhead < PROFILER_NOTE_SHARE * mean_step:
        return
    from tb_syncfinder.outputs.text import format_us

    per_python = python / steps
    if per_python >= 0.5:
        weights = (
            f"{per_python:,.0f} of them Python frames; about {PROFILER_US_PER_HOST_EVENT:g} us "
            f"per operator, runtime call or annotation and {PROFILER_US_PER_PYTHON_EVENT:g} us "
            "per Python frame"
        )
    else:
        weights = f"at about {PROFILER_US_PER_HOST_EVENT:g} us each"
    host_step = summary.mean_step_time_us
    if host_step > 0 and overhead >= host_step:
        # The per-event costs were measured on one H100 host: a host that records events
        # faster (a vLLM step of 119k Python frames in 59 ms) would read "144 ms of a 58 ms
        # step". Said as what it is: many events, their cost here unknown.
        note = (
            f"The profiler recorded {summary.host_events_per_step:,.0f} host events per step "
            f"here ({weights}, measured on one H100 host): at those costs they would take "
            f"{format_us(overhead)}, more than the host's whole step ({format_us(host_step)}), "
            "so this host records them faster and their cost here is not known; the figures "
            "are the profiled program's and may differ without the profiler"
        )
    else:
        note = (
            f"The profiler's own overhead is about {format_us(overhead)} of the host's time "
            f"per step here ({summary.host_events_per_step:,.0f} host events per step, "
            f"{weights}): the figures are the profiled program's and may differ without the "
            "profiler"
        )
    # The busy time is known where the replay linked the device work to its launches (None
    # without the replay: a trace whose correlations were lost reaches little of it).
    replayed = summary.saving_method == "replay" and device is not None and device > 0
    no_sync = summary.predicted_step_time_us
    whose = (
        "the GPU's busy time"
        if busiest_worker is None
        else f"the busiest worker's GPU busy time ({busiest_worker})"
    )
    if replayed and no_sync > (1 + HOST_BOUND_SHARE) * device:
        longer = f"{no_sync / device - 1:.0%} more than {whose}"
        if host_step > 0 and no_sync > (1 + HOST_BOUND_SHARE) * host_step:
            # Longer than the host's own step too: not the host. A rank of a job (its NCCL
            # kernels waiting for ranks not in the trace) said "the host bounds the step"
            # beside a 215 ms host step and a 373 ms one.
            note += (
                f"; without its syncs the replayed step still takes {format_us(no_sync)}, "
                f"{longer} and longer than the host's {format_us(host_step)}: the device's "
                "timeline waits on what no sync of this trace explains (other streams, "
                "events, other ranks' collectives), so removing the syncs leaves the step as "
                "long"
            )
        else:
            note += (
                f"; without its syncs the replayed step still takes {format_us(no_sync)}, "
                f"{longer}: under the profiler the host bounds the step, so syncs that would "
                "stall a GPU-bound program may look free"
            )
    note += "."
    if replayed:
        note += (
            " Without the profiler no fix that keeps the GPU's work makes a step shorter "
            f"than {whose}, {format_us(device)}: if a step takes T unprofiled, fixing every "
            f"sync saves at most T - {format_us(device)}."
        )
    summary.profiler_note = note


def _busiest_worker(busy: list[TraceResult]) -> tuple[str | None, float | None]:
    """(the worker, its device busy time per step) of the worker whose device is busiest
    per step over its traces' steps; the worker is None where only one has a busy time.
    The ranks of a job step together, so no step of the job is shorter than its busiest
    device's work: the mean over ranks (2.4 and 11.6 ms a step on the H200 pair of
    docs/validation.md, section 6) would bound the saving at 16.4 ms where 11.8 holds."""
    per_worker: dict[str, tuple[float, int]] = {}
    for r in busy:
        total, steps = per_worker.get(r.info.worker, (0.0, 0))
        busy_us = r.savings.device_busy_us or 0.0
        per_worker[r.info.worker] = (total + busy_us, steps + len(r.steps))
    per_step = {worker: total / steps for worker, (total, steps) in per_worker.items() if steps}
    if not per_step:
        return None, None
    worker = max(per_step, key=per_step.__getitem__)
    return (worker if len(per_step) > 1 else None), per_step[worker]


def build_warmup_allocator(
    syncs: list[Sync], devices: Mapping[str, str | None] | None = None
) -> WarmupAllocator:
    """The allocator syncs listed apart as warm-up: their cost, the warm-up regions they ran
    in and the allocator advice (for the operators that allocated most often), in the words
    of their traces' device (``devices``, as ``build_sites``)."""
    if not syncs:
        return WarmupAllocator()
    regions = list(
        dict.fromkeys(a for s in syncs for a in s.annotations if is_warmup_annotation(a))
    )
    ops = Counter(op for s in syncs for op in dict.fromkeys(s.op_chain))
    return WarmupAllocator(
        count=len(syncs),
        host_wait_us=sum((s.host_wait_us for s in syncs), 0.0),
        gpu_idle_us=idle_union_us(syncs),
        regions=regions,
        advice=advice_on_device(
            advice_for(ALLOCATOR_SYNC, [op for op, _ in ops.most_common()]),
            _one_device(syncs, devices),
        ),
        syncs=syncs,
    )
