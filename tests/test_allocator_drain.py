"""An allocator call is a sync only where the device drained during it: ``cudaHostAlloc``
while a GPU-bound program's queue keeps running (the DataLoader's ``pin_memory`` in the
bundled demo's ``cnn_optimized``, 1.8 ms to pin pages while the GPU ran 50 ms of queued
work) did not wait for the device and is no finding."""

from __future__ import annotations

from kineto_builder import KinetoTraceBuilder

from tb_syncfinder import analyze


def _trace(tmp_path, queue_runs_through: bool):
    b = KinetoTraceBuilder()
    with b.step(1):
        b.kernel("void queued_work()", dur=5_000 if queue_runs_through else 100)
        b.advance(200)
        # The allocation returns while the kernel launched before it still runs (or after
        # the device went idle, as a draining cudaMalloc does).
        b.runtime("cudaHostAlloc", dur=1_500)
        b.kernel("void next_work()", dur=100)
    return b.write(tmp_path / "worker0.pt.trace.json")


def test_an_allocation_while_work_launched_before_it_runs_on_is_no_sync(tmp_path):
    report = analyze(str(_trace(tmp_path, queue_runs_through=True)))
    assert report.summary.sync_count == 0 and report.sites == []


def test_an_allocation_the_device_drained_during_stays_an_allocator_sync(tmp_path):
    report = analyze(str(_trace(tmp_path, queue_runs_through=False)))
    assert [(s.kind, s.count) for s in report.sites] == [("allocator_sync", 1)]
