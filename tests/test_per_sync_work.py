"""What each sync costs must not grow with the trace: a stage that scans a whole thread, or
every runtime call, once per sync (or per site) makes a long trace quadratic: a review
found several, in which traces of 4,000 to 8,000 syncs took 5 to 34 s. Each test counts
the passes on a trace of many syncs instead of timing it."""

from __future__ import annotations

import json
from typing import Any

from kineto_builder import KinetoTraceBuilder

from tb_syncfinder import detect
from tb_syncfinder.attribute import Attributor
from tb_syncfinder.context import sync_contexts
from tb_syncfinder.detect import detect_syncs
from tb_syncfinder.engine import Options, analyze_trace
from tb_syncfinder.reader import decode_trace
from tb_syncfinder.timeline import build_timeline

STEPS = 40


def _timeline(b: KinetoTraceBuilder) -> Any:
    return build_timeline(decode_trace("t.json", json.dumps(b.to_dict()).encode()))


def test_launch_times_are_gathered_once_when_no_call_has_a_correlation(monkeypatch):
    # A trace whose runtime calls lost their correlation ids: the map of launch times stays
    # empty, and "empty" used to mean "not gathered yet" at every allocator call.
    b = KinetoTraceBuilder()
    for step in range(1, STEPS + 1):
        with b.step(step):
            for _ in range(5):
                b.kernel(dur=20, link=False)
            b.runtime("cudaFree", correlation=False)
    gathered = []
    real = detect._launch_times
    monkeypatch.setattr(detect, "_launch_times", lambda tl: (gathered.append(1), real(tl))[1])
    episodes = detect_syncs(_timeline(b))
    assert len(episodes) == STEPS
    assert len(gathered) == 1


class _CountingIter(list):
    """A list that counts the passes over it (``max``, ``any``, a for loop)."""

    passes = 0

    def __iter__(self) -> Any:
        type(self).passes += 1
        return super().__iter__()


def test_a_threads_last_end_is_found_once_for_the_detail_views_of_its_syncs(tmp_path):
    # A CPU trace's syncs are latent and start no runtime call: each detail view looked for
    # its thread by the thread's span, a pass over all of its nodes' ends per sync.
    b = KinetoTraceBuilder(gpu=False)
    for step in range(1, STEPS + 1):
        with b.step(step):
            with b.op("aten::add"):
                pass
            with b.op("aten::item"), b.op("aten::_local_scalar_dense"):
                pass
    path = b.write(tmp_path / "cpu.pt.trace.json")
    result = analyze_trace(str(path), Options(contexts=False))
    assert len(result.latent) == STEPS
    tl = _timeline(b)
    for thread in tl.threads.values():
        thread.ends = _CountingIter(thread.ends)

    class CountingThreads(dict):
        passes = 0

        def values(self) -> Any:
            CountingThreads.passes += 1
            return super().values()

    tl.threads = CountingThreads(tl.threads)
    _CountingIter.passes = 0
    contexts = sync_contexts(tl, result.latent)
    assert len(contexts) == STEPS and all(c["host"] for c in contexts.values())
    # Once per thread for its last end, once for the tree of ends that finds what is open
    # before a window (``_Depths.open_before``): never once per sync.
    assert _CountingIter.passes <= 2 * len(tl.threads) < STEPS
    # The threads by tid, once for all the syncs (a pass over every thread per sync before).
    assert CountingThreads.passes <= 1


def test_a_frames_children_are_listed_once_for_all_the_syncs_under_it():
    # A training loop's frame has a child per step; each sync under it listed them again
    # (to see whether the frame called the profiler's step, and what it called before).
    b = KinetoTraceBuilder()
    with b.frame(("train.py", 1, "<module>")):
        with b.frame(("train.py", 30, "train_epoch")):
            for step in range(1, STEPS + 1):
                with b.step(step):
                    with b.frame(("train.py", 40, "helper")):
                        pass
                    b.kernel(dur=20)
                    with b.op("aten::item"), b.op("aten::_local_scalar_dense"):
                        b.runtime("cudaMemcpyAsync", dur=5, memcpy=("DtoH", "Pageable"), bytes=4)
                        b.runtime("cudaStreamSynchronize")
        with b.frame(("train.py", 50, "evaluate")), b.op("aten::add"):
            b.advance(100)
    tl = _timeline(b)
    episodes = detect_syncs(tl)
    attribute = Attributor(tl)
    for thread in tl.threads.values():
        children = attribute.tree(thread).children
        for frame, kids in children.items():
            children[frame] = _CountingIter(kids)
    _CountingIter.passes = 0
    attributions = [attribute(e) for e in episodes]
    assert len(episodes) == STEPS
    calls = [a.user_call for a in attributions]
    assert all(c is not None and not c.truncated and c.called_before == "helper" for c in calls)
    # Each frame's children are gone through once, not once per sync under the frame.
    assert _CountingIter.passes <= 3, _CountingIter.passes  # was 2 per sync + 1


def test_a_sites_bound_looks_at_the_steps_its_syncs_are_in_only(monkeypatch):
    # Without the replay each site's saving is bounded step by step; building the step
    # map for every site was a pass over all steps per site (1,200 sites in 8,000 steps:
    # 4.9 s).
    from tb_syncfinder import cost
    from tb_syncfinder.models import StepStats, Sync

    steps = [StepStats(n, 1000.0, 0, 0.0, 0.0) for n in range(1, 10 * STEPS + 1)]
    bounds = cost.StepBounds(steps)
    measured = []
    real = cost.union_length
    monkeypatch.setattr(cost, "union_length", lambda v: (measured.append(1), real(v))[1])
    site = [
        Sync(
            kind="scalar_readback",
            api="cudaStreamSynchronize",
            apis=["cudaStreamSynchronize"],
            op="aten::item",
            trigger_op="aten::_local_scalar_dense",
            step=n,
            thread=1,
            ts_us=n * 1000.0,
            host_wait_us=50.0,
            gpu_idle_after_us=0.0,
            end_us=n * 1000.0 + 50,
        )
        for n in (3, 7)
    ]
    assert bounds.saving_us(site) == 100.0
    assert len(measured) == 2
    assert cost.estimated_saving_us(steps, site) == 100.0


def test_a_ranks_collectives_move_in_each_what_if_as_the_replay_moves_them(tmp_path, monkeypatch):
    # Each wait's what-if reads how much earlier every collective of the rank starts: a
    # Python call per collective and wait was quadratic in the rank's length (1,600 steps:
    # 3.1 s). The array it now reads must hold, for every what-if, what the replay's own
    # per-variable answer gives.
    from nccl_job import JobSpec, write_job

    from tb_syncfinder import whatif
    from tb_syncfinder.models import TraceRef

    paths = write_job(
        tmp_path / "job", JobSpec(world=2, ranks_per_host=2, steps=12, late={(1, 4): 800.0})
    )
    checked = []
    real = whatif._moved_earlier_at

    def compared(graph, changed, item_vars, items_of_var):
        moved = real(graph, changed, item_vars, items_of_var)
        by_var = graph.moved_earlier(changed)
        assert moved.tolist() == [by_var(int(var)) for var in item_vars]
        checked.append(bool(moved.any()))
        return moved

    monkeypatch.setattr(whatif, "_moved_earlier_at", compared)
    for rank, path in paths.items():
        result = analyze_trace(TraceRef(str(path), "job", f"rank{rank}"), Options(contexts=False))
        assert result.rank is not None and result.rank.replayed_earlier
    assert len(checked) >= 2 * 12 and any(checked)


def test_threads_are_paired_for_waits_only_where_their_activity_overlaps(tmp_path, monkeypatch):
    # The replay looks for a thread waiting on another (autograd's backward thread and the
    # main thread) by testing pairs of threads: every pair was tested, quadratic in the
    # threads (a trace whose side work ran on a new thread each step, 800 steps: 6.4 s).
    from kineto_builder import item_sync

    from tb_syncfinder import whatif

    b = KinetoTraceBuilder()
    for step in range(1, STEPS + 1):
        with b.step(step):
            for _ in range(3):
                b.kernel(dur=20)
                b.advance(3)
            with b.thread(10000 + step):
                for _ in range(3):
                    with b.op("aten::add"):
                        b.kernel(dur=30)
                    b.advance(4)
            b.advance(20)
            item_sync(b, stack=[("train.py", 10 + step % 7, "train_step")], kernel_us=100)
    tested = []
    real = whatif._Builder._burst

    def burst(self, a, b, *rest):
        tested.append((a, b))
        return real(self, a, b, *rest)

    monkeypatch.setattr(whatif._Builder, "_burst", burst)
    result = analyze_trace(str(b.write(tmp_path / "t.pt.trace.json")), Options(contexts=False))
    assert result.savings.method == "replay" and len(result.syncs) == STEPS
    # Each worker thread overlaps the main thread only: a few tests per thread, not one
    # per pair of the 41 threads (1,640 pairs).
    assert 0 < len(set(tested)) <= 4 * STEPS, len(set(tested))


def test_a_jobs_paced_sites_are_added_up_in_one_pass_over_its_rows(monkeypatch):
    # Each paced site summed the job's rows of its key, and went through its rank's waits
    # twice, to credit the pace rank: a pass per site, quadratic in a job's sites (1,000
    # sites: 63 ms).
    from types import SimpleNamespace

    from tb_syncfinder import jobs, ranks
    from tb_syncfinder.models import HostWait

    keys = [f"train.py:{n}:aten::item" for n in range(STEPS)]
    tenths = "train.py:99:aten::item"  # ten rows of 0.1 us against a paced 1.0 us

    def row(key: str, rank: int, saving_us: float) -> ranks.SiteJobCost:
        return ranks.SiteJobCost(
            key, rank, "train.py", 1, "f", "scalar_readback", "aten::item", True, [], 0.0,
            saving_us, saving_us / 4, 0, [], False,
        )  # fmt: skip

    # Half the sites have rows on rank 0, some on rank 2 too, some on the pace rank 1.
    costs = _CountingIter(row(k, 0, 100.1 * (n % 3)) for n, k in enumerate(keys) if n % 2)
    costs.extend(row(k, 2, 50.3) for k in keys[1:8:2])
    costs.extend(row(k, 1, 10.7) for k in keys[10:20:3])
    costs.extend(row(tenths, 0, 0.1) for _ in range(10))
    waits = _CountingIter(
        HostWait(f"w{n}-{i}", "scalar_readback", k, 0.0, 1.0, 1.0, "aten::item", "train.py", n)
        for n, k in enumerate([*keys, tenths])
        for i in range(2)
    )
    analysis = SimpleNamespace(
        job_steps=[None] * 4,
        step_count=4,
        ranks={0: SimpleNamespace(path="r0", waits=[]), 1: SimpleNamespace(path="r1", waits=waits)},
    )
    paced = {k: (80.0, 1) for k in keys} | {tenths: (0.25, 1)}
    before = {k: [c.job_saving_us for c in list.__iter__(costs) if c.site_key == k] for k in paced}
    monkeypatch.setattr(ranks, "paced_savings", lambda _a, _s: paced)
    _CountingIter.passes = 0
    jobs._with_pace(analysis, costs, {})  # type: ignore[arg-type]
    assert _CountingIter.passes <= 3, _CountingIter.passes
    # What ``sum`` over each site's rows gives, as before (Python 3.12's compensated sum
    # included): where the paced total is more, the difference goes to the pace rank's
    # row, added with that rank's waits of the site where it had none.
    for n, key in enumerate([*keys, tenths]):
        rows = [c for c in list.__iter__(costs) if c.site_key == key]
        counted = sum(before[key])
        total = paced[key][0] * 4
        on_pace = [c for c in rows if c.rank == 1]
        if total <= counted:
            assert [c.job_saving_us for c in rows] == before[key]
            continue
        (pace_row,) = on_pace
        if len(rows) == len(before[key]):  # the pace rank had a row: it gets the difference
            assert pace_row.job_saving_us == 10.7 + (total - counted)
        else:
            assert pace_row.job_saving_us == total - counted
            assert pace_row.wait_ids == [f"w{n}-0", f"w{n}-1"]
            assert pace_row.line == n
