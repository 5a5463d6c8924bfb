"""The plugin's background loader and disk cache, with a counting stand-in for the engine.

The stand-in parses the JSON file itself and fails like the engine's decoder does on a
file that is still being written ("Input data was truncated"), so these tests check the
loader's bookkeeping (cache, retries, bounds, progressive publication) without depending on
the analysis itself; tests/test_plugin_endpoints.py runs the real engine.
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from tb_syncfinder.models import TraceRef
from tb_syncfinder.plugin import loader as loader_module
from tb_syncfinder.plugin.cache import DiskCache, cache_key
from tb_syncfinder.plugin.loader import (
    DONE,
    ERROR,
    MAX_TRANSIENT_ATTEMPTS,
    RETRY,
    TraceLoader,
    error_result,
    looks_transient,
)


class CountingAnalyzer:
    """Stand-in for engine.analyze_trace: counts calls and concurrent calls."""

    def __init__(self, delay_s: float = 0.0) -> None:
        self.calls: list[str] = []
        self.delay_s = delay_s
        self.active = 0
        self.max_active = 0
        self.lock = threading.Lock()

    def __call__(self, ref: TraceRef, options: Any) -> Any:
        with self.lock:
            self.calls.append(ref.path)
            self.active += 1
            self.max_active = max(self.max_active, self.active)
        try:
            time.sleep(self.delay_s)
            text = Path(ref.path).read_text()
            if text.startswith("broken"):
                raise ValueError("not a trace: expected an object at byte 0")
            try:
                events = json.loads(text)["traceEvents"]
            except json.JSONDecodeError:
                raise ValueError("Input data was truncated") from None
            info = SimpleNamespace(path=ref.path, error=None, worker=ref.worker)
            return SimpleNamespace(info=info, syncs=[], latent=[], steps=[], events=len(events))
        finally:
            with self.lock:
                self.active -= 1


def write_trace(path: Path, events: int = 1) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"traceEvents": [{"ph": "X", "name": "x"}] * events}))


def make_loader(logdir: Path, cache_dir: Path, analyzer: CountingAnalyzer, **kw: Any):
    return TraceLoader(
        [(None, str(logdir))],
        {"roots": []},
        DiskCache(str(cache_dir)),
        analyze_fn=analyzer,
        reload_interval_s=3600,
        **kw,
    )


def poll_and_wait(loader: TraceLoader) -> None:
    loader.poll()
    assert loader.wait_idle(30)


def statuses(loader: TraceLoader) -> dict[str, str]:
    return {
        os.path.basename(path): state.status
        for name in loader.run_names()
        for path, state in loader.get_run(name).traces.items()
    }


def test_restart_answers_from_the_disk_cache_without_analysing_again(tmp_path: Path) -> None:
    write_trace(tmp_path / "logs" / "run_a" / "w0.pt.trace.json")
    write_trace(tmp_path / "logs" / "run_b" / "w1.123.pt.trace.json")
    first = CountingAnalyzer()
    poll_and_wait(make_loader(tmp_path / "logs", tmp_path / "cache", first))
    assert len(first.calls) == 2

    second = CountingAnalyzer()
    restarted = make_loader(tmp_path / "logs", tmp_path / "cache", second)
    restarted.poll()
    assert second.calls == []
    assert not restarted.loading
    assert statuses(restarted) == {"w0.pt.trace.json": DONE, "w1.123.pt.trace.json": DONE}


def test_a_changed_file_is_analysed_again(tmp_path: Path) -> None:
    trace = tmp_path / "logs" / "run" / "w0.pt.trace.json"
    write_trace(trace, events=1)
    analyzer = CountingAnalyzer()
    loader = make_loader(tmp_path / "logs", tmp_path / "cache", analyzer)
    poll_and_wait(loader)
    generation = loader.get_run("run").generation
    write_trace(trace, events=3)
    poll_and_wait(loader)
    assert len(analyzer.calls) == 2
    state = loader.get_run("run").traces[str(trace)]
    assert state.result.events == 3
    assert loader.get_run("run").generation > generation


class SourceAnalyzer(CountingAnalyzer):
    """A result with one sync whose line was resolved in ``source``, read as the engine
    reads it (stamped just before): ``gate`` holds each analysis after the first until it
    is set; ``read`` is set once an analysis held by ``hold_after_read`` has read it."""

    def __init__(self, source: Path) -> None:
        super().__init__()
        self.source = source
        self.gate = threading.Event()
        self.read = threading.Event()
        self.hold_after_read = threading.Event()
        self.hold_after_read.set()

    def __call__(self, ref: TraceRef, options: Any) -> Any:
        if self.calls:
            assert self.gate.wait(30)
        super().__call__(ref, options)
        stat = self.source.stat()
        text = self.source.read_text()
        self.read.set()
        assert self.hold_after_read.wait(30)
        src = SimpleNamespace(resolved_path=str(self.source), run_by=None, library=None)
        sync = SimpleNamespace(source=src, text=text)
        info = SimpleNamespace(path=ref.path, error=None, worker=ref.worker)
        stamps = {str(self.source): (stat.st_size, stat.st_mtime_ns)}
        return SimpleNamespace(info=info, syncs=[sync], latent=[], steps=[], source_stamps=stamps)


def test_a_trace_whose_source_files_changed_is_analysed_again_while_running(
    tmp_path: Path,
) -> None:
    """Lines are resolved in the files as they were: an edit while TensorBoard runs has
    the trace analysed again at the next poll, its old findings served meanwhile."""
    source = tmp_path / "train.py"
    source.write_text("def train_step(loss):\n    return loss.item()\n")
    write_trace(tmp_path / "logs" / "run" / "w0.pt.trace.json")
    analyzer = SourceAnalyzer(source)
    loader = make_loader(tmp_path / "logs", tmp_path / "cache", analyzer)
    poll_and_wait(loader)
    run = loader.get_run("run")
    [first] = loader.results(run, None, None)
    poll_and_wait(loader)  # nothing changed: not analysed again
    assert len(analyzer.calls) == 1

    source.write_text("import torch\n\n\ndef train_step(loss):\n    return loss.item()\n")
    loader.poll()
    assert run.loading
    assert loader.results(run, None, None) == [first]  # the old findings, while it runs
    analyzer.gate.set()
    assert loader.wait_idle(30)
    [second] = loader.results(run, None, None)
    assert len(analyzer.calls) == 2
    assert second.syncs[0].text.startswith("import torch")
    poll_and_wait(loader)
    assert len(analyzer.calls) == 2


class MissingSourceAnalyzer(CountingAnalyzer):
    """A result whose line was not found: ``source`` absent, probed where it would be."""

    def __init__(self, source: Path) -> None:
        super().__init__()
        self.source = source

    def __call__(self, ref: TraceRef, options: Any) -> Any:
        super().__call__(ref, options)
        found = self.source.exists()
        src = SimpleNamespace(resolved_path=str(self.source) if found else None)
        src.run_by = src.library = None
        sync = SimpleNamespace(source=src, text=self.source.read_text() if found else None)
        info = SimpleNamespace(path=ref.path, error=None, worker=ref.worker)
        stat = self.source.stat() if found else None
        return SimpleNamespace(
            info=info,
            syncs=[sync],
            latent=[],
            steps=[],
            source_stamps={str(self.source): (stat.st_size, stat.st_mtime_ns)} if stat else {},
            source_probes=[] if found else [str(self.source)],
        )


def test_a_source_file_copied_in_after_the_analysis_has_the_trace_analysed_again(
    tmp_path: Path,
) -> None:
    """Its lines were not found; the user copies the file in: the running TensorBoard and a
    restarted one (the disk cache) served the inexact lines until the trace changed."""
    source = tmp_path / "train.py"
    write_trace(tmp_path / "logs" / "run" / "w0.pt.trace.json")
    analyzer = MissingSourceAnalyzer(source)
    loader = make_loader(tmp_path / "logs", tmp_path / "cache", analyzer)
    poll_and_wait(loader)
    [first] = loader.results(loader.get_run("run"), None, None)
    assert first.syncs[0].text is None
    poll_and_wait(loader)
    assert len(analyzer.calls) == 1
    source.write_text("def train_step(loss):\n    return loss.item()\n")
    poll_and_wait(loader)
    [second] = loader.results(loader.get_run("run"), None, None)
    assert len(analyzer.calls) == 2 and second.syncs[0].text == source.read_text()

    source.unlink()
    restarted = MissingSourceAnalyzer(source)
    cold = make_loader(tmp_path / "logs", tmp_path / "cache2", restarted)
    poll_and_wait(cold)
    source.write_text("def train_step(loss):\n    return loss.item()\n")
    again = MissingSourceAnalyzer(source)
    warm = make_loader(tmp_path / "logs", tmp_path / "cache2", again)
    poll_and_wait(warm)
    assert len(again.calls) == 1  # the cached inexact result was not served


def test_an_edit_made_while_a_trace_is_analysed_is_seen_at_the_next_poll(
    tmp_path: Path,
) -> None:
    """The files are stamped as the analysis reads them: an edit saved after that read
    (the user still typing) has the trace analysed again, and a restarted TensorBoard's
    disk cache does not serve the lines of the version before."""
    source = tmp_path / "train.py"
    source.write_text("v1\n")
    write_trace(tmp_path / "logs" / "run" / "w0.pt.trace.json")
    analyzer = SourceAnalyzer(source)
    analyzer.gate.set()
    analyzer.hold_after_read.clear()
    analyzer.read.clear()
    loader = make_loader(tmp_path / "logs", tmp_path / "cache", analyzer)
    loader.poll()
    assert analyzer.read.wait(30)
    time.sleep(0.01)  # a later mtime on coarse clocks
    source.write_text("v2, saved while it was analysed\n")
    analyzer.hold_after_read.set()
    assert loader.wait_idle(30)
    poll_and_wait(loader)  # sees the edit: analysed again
    run = loader.get_run("run")
    [result] = loader.results(run, None, None)
    assert result.syncs[0].text == source.read_text()
    assert len(analyzer.calls) == 2

    restarted = SourceAnalyzer(source)
    again = make_loader(tmp_path / "logs", tmp_path / "cache", restarted)
    poll_and_wait(again)
    [cached] = again.results(again.get_run("run"), None, None)
    assert cached.syncs[0].text == source.read_text() and restarted.calls == []


def test_a_truncated_file_completed_later_is_loaded_on_the_next_poll(tmp_path: Path) -> None:
    trace = tmp_path / "logs" / "run" / "w0.pt.trace.json"
    trace.parent.mkdir(parents=True)
    full = json.dumps({"traceEvents": [{"ph": "X", "name": "x"}] * 5})
    trace.write_text(full[: len(full) // 2])
    analyzer = CountingAnalyzer()
    loader = make_loader(tmp_path / "logs", tmp_path / "cache", analyzer)
    poll_and_wait(loader)
    assert statuses(loader) == {"w0.pt.trace.json": RETRY}
    assert loader.get_run("run").loading  # still expected to finish

    trace.write_text(full)
    poll_and_wait(loader)
    assert statuses(loader) == {"w0.pt.trace.json": DONE}
    assert loader.get_run("run").traces[str(trace)].result.events == 5


def test_an_unchanged_truncated_file_just_written_is_retried_then_a_cached_error(
    tmp_path: Path,
) -> None:
    trace = tmp_path / "logs" / "run" / "w0.pt.trace.json"
    trace.parent.mkdir(parents=True)
    trace.write_text('{"traceEvents": [')
    analyzer = CountingAnalyzer()
    loader = make_loader(tmp_path / "logs", tmp_path / "cache", analyzer)
    for _ in range(loader_module.MAX_TRANSIENT_ATTEMPTS + 2):
        poll_and_wait(loader)
    assert len(analyzer.calls) == loader_module.MAX_TRANSIENT_ATTEMPTS
    state = loader.get_run("run").traces[str(trace)]
    assert "truncated" in state.error and not state.being_written
    assert not loader.loading
    [result] = loader.results(loader.get_run("run"), None, None)
    assert "truncated" in result.info.error
    # Given up on: the answer is cached as a result would be.
    restarted = CountingAnalyzer()
    poll_and_wait(make_loader(tmp_path / "logs", tmp_path / "cache", restarted))
    assert restarted.calls == []


def make_old(path: Path, age_s: float = 3600) -> None:
    """Last written ``age_s`` ago: not being written any more."""
    then = time.time() - age_s
    os.utime(path, (then, then))


def test_an_old_truncated_file_is_read_once_and_its_failure_cached_until_it_changes(
    tmp_path: Path,
) -> None:
    """A trace cut short by a writer that died long ago is a final answer: not read again
    on later polls (each read of a 750 MB cut file took a process), nor after a restart,
    and read again once the file changes."""
    run = tmp_path / "logs" / "run"
    trace = run / "cut.pt.trace.json"
    trace.parent.mkdir(parents=True)
    full = json.dumps({"traceEvents": [{"ph": "X", "name": "x"}] * 5})
    trace.write_text(full[: len(full) // 2])
    make_old(trace)
    write_trace(run / "good.pt.trace.json")
    analyzer = CountingAnalyzer()
    loader = make_loader(tmp_path / "logs", tmp_path / "cache", analyzer)
    poll_and_wait(loader)
    state = loader.get_run("run").traces[str(trace)]
    assert state.status != RETRY and not state.being_written
    assert "truncated" in state.error and not loader.loading
    poll_and_wait(loader)
    assert sorted(os.path.basename(path) for path in analyzer.calls) == [
        "cut.pt.trace.json",
        "good.pt.trace.json",
    ]

    restarted = CountingAnalyzer()
    again = make_loader(tmp_path / "logs", tmp_path / "cache", restarted)
    poll_and_wait(again)
    assert restarted.calls == [] and not again.loading
    errors = [r.info.error for r in again.results(again.get_run("run"), None, None)]
    assert set(errors) == {None, state.error}

    trace.write_text(full)  # completed after all: read again
    poll_and_wait(again)
    assert [os.path.basename(path) for path in restarted.calls] == ["cut.pt.trace.json"]
    assert again.get_run("run").traces[str(trace)].result.events == 5


def test_a_truncated_file_written_to_recently_is_read_again_on_the_next_poll(
    tmp_path: Path,
) -> None:
    trace = tmp_path / "logs" / "run" / "w0.pt.trace.json"
    trace.parent.mkdir(parents=True)
    trace.write_text('{"traceEvents": [')
    make_old(trace, age_s=loader_module.WRITING_QUIET_S / 2)
    analyzer = CountingAnalyzer()
    loader = make_loader(tmp_path / "logs", tmp_path / "cache", analyzer)
    poll_and_wait(loader)
    state = loader.get_run("run").traces[str(trace)]
    assert (state.status, state.being_written) == (RETRY, True)
    # It has been quiet for long when it is read again: that read is its answer.
    loader.clock = lambda: time.time() + loader_module.WRITING_QUIET_S
    poll_and_wait(loader)
    poll_and_wait(loader)
    assert len(analyzer.calls) == 2
    assert state.status == DONE and "truncated" in state.error and not loader.loading


def test_a_broken_trace_is_an_error_entry_and_its_neighbours_load(tmp_path: Path) -> None:
    run = tmp_path / "logs" / "run"
    write_trace(run / "good.pt.trace.json")
    run.joinpath("bad.pt.trace.json").write_text("broken")
    analyzer = CountingAnalyzer()
    loader = make_loader(tmp_path / "logs", tmp_path / "cache", analyzer)
    poll_and_wait(loader)
    assert statuses(loader) == {"good.pt.trace.json": DONE, "bad.pt.trace.json": ERROR}
    bad = loader.get_run("run").traces[str(run / "bad.pt.trace.json")]
    assert bad.error == "not a trace: expected an object at byte 0"
    poll_and_wait(loader)
    assert len(analyzer.calls) == 2  # a broken, unchanged file is not parsed on every poll


def test_new_runs_and_files_appear_and_removed_ones_go_without_restart(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    write_trace(logs / "run_a" / "w0.pt.trace.json")
    loader = make_loader(logs, tmp_path / "cache", CountingAnalyzer())
    assert not loader.found_any
    poll_and_wait(loader)
    assert loader.found_any
    assert loader.run_names() == ["run_a"]

    write_trace(logs / "run_b" / "w0.pt.trace.json")
    write_trace(logs / "run_a" / "w1.pt.trace.json")
    write_trace(logs / "run_0" / "w0.pt.trace.json")
    poll_and_wait(loader)
    # In a restart's order (a review: a run found later was listed last).
    assert loader.run_names() == ["run_0", "run_a", "run_b"]
    assert len(loader.get_run("run_a").traces) == 2

    for f in (logs / "run_b").iterdir():
        f.unlink()
    (logs / "run_b").rmdir()
    poll_and_wait(loader)
    assert loader.run_names() == ["run_0", "run_a"]


def test_at_most_max_workers_files_are_analysed_at_once(tmp_path: Path) -> None:
    for i in range(6):
        write_trace(tmp_path / "logs" / "run" / f"w{i}.pt.trace.json")
    analyzer = CountingAnalyzer(delay_s=0.05)
    loader = make_loader(tmp_path / "logs", tmp_path / "cache", analyzer, max_workers=2)
    poll_and_wait(loader)
    assert len(analyzer.calls) == 6
    assert analyzer.max_active == 2


def test_each_trace_is_published_as_soon_as_it_is_analysed(tmp_path: Path) -> None:
    gate = threading.Event()

    class SlowForRunB(CountingAnalyzer):
        def __call__(self, ref: TraceRef, options: Any) -> Any:
            if ref.run == "run_b":
                gate.wait(10)
            return super().__call__(ref, options)

    write_trace(tmp_path / "logs" / "run_a" / "w0.pt.trace.json")
    write_trace(tmp_path / "logs" / "run_b" / "w0.pt.trace.json")
    loader = make_loader(tmp_path / "logs", tmp_path / "cache", SlowForRunB(), max_workers=2)
    loader.poll()
    deadline = time.monotonic() + 10
    while loader.get_run("run_a").loading and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not loader.get_run("run_a").loading
    assert loader.get_run("run_b").loading and loader.loading
    gate.set()
    assert loader.wait_idle(10)


def names(paths: list[str]) -> list[str]:
    return [os.path.basename(path) for path in paths]


def test_the_smallest_traces_are_analysed_first_so_small_runs_are_usable_at_once(
    tmp_path: Path,
) -> None:
    """Queued in path order, a small run waited for the big traces sorted before it."""
    logs = tmp_path / "logs"
    write_trace(logs / "a_big" / "w0.pt.trace.json", events=400)
    write_trace(logs / "a_big" / "w1.pt.trace.json", events=300)
    write_trace(logs / "b_small" / "w0.pt.trace.json", events=1)
    write_trace(logs / "c_medium" / "w0.pt.trace.json", events=20)
    analyzer = CountingAnalyzer()
    loader = make_loader(logs, tmp_path / "cache", analyzer, max_workers=1)
    poll_and_wait(loader)
    assert [Path(p).parent.name + "/" + Path(p).name for p in analyzer.calls] == [
        "b_small/w0.pt.trace.json",
        "c_medium/w0.pt.trace.json",
        "a_big/w1.pt.trace.json",
        "a_big/w0.pt.trace.json",
    ]


def test_a_big_trace_starts_once_smaller_ones_passed_it_by_its_own_size(
    tmp_path: Path,
) -> None:
    """Smallest first, but fair: smaller traces may pass a big one by as many bytes as
    its own, then it is next, before smaller ones queued with it."""
    logs = tmp_path / "logs" / "run"
    write_trace(logs / "big.pt.trace.json", events=300)
    small_size = (logs / "big.pt.trace.json").stat().st_size // 3 + 1
    for i in range(5):
        write_trace(logs / f"s{i}.pt.trace.json", events=100)
        assert (logs / f"s{i}.pt.trace.json").stat().st_size < small_size * 1.1
    analyzer = CountingAnalyzer()
    loader = make_loader(tmp_path / "logs", tmp_path / "cache", analyzer, max_workers=1)
    poll_and_wait(loader)
    order = names(analyzer.calls)
    assert order.index("big.pt.trace.json") == 3, order


def test_big_traces_leave_a_process_free_for_a_small_run_found_later(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two processes, two big traces: one is analysed at a time, so a small run written
    meanwhile is analysed at once instead of waiting for a big one to end."""
    monkeypatch.setattr(loader_module, "BIG_TRACE_BYTES", 1000)
    logs = tmp_path / "logs"
    write_trace(logs / "big" / "w0.pt.trace.json", events=100)
    write_trace(logs / "big" / "w1.pt.trace.json", events=100)
    gate = threading.Event()
    small_done = threading.Event()
    big_started: list[str] = []

    class BigWaits(CountingAnalyzer):
        def __call__(self, ref: TraceRef, options: Any) -> Any:
            if ref.run == "big":
                big_started.append(ref.path)
                assert gate.wait(30)
            result = super().__call__(ref, options)
            if ref.run == "small":
                small_done.set()
            return result

    analyzer = BigWaits()
    loader = make_loader(logs, tmp_path / "cache", analyzer, max_workers=2)
    try:
        loader.poll()
        write_trace(logs / "small" / "w0.pt.trace.json", events=1)
        loader.poll()
        assert small_done.wait(30), "the small run waited for the big traces"
        deadline = time.monotonic() + 30
        while loader.get_run("small").loading and time.monotonic() < deadline:
            time.sleep(0.01)
        assert not loader.get_run("small").loading and loader.get_run("big").loading
        assert len(big_started) == 1
    finally:
        gate.set()
    assert loader.wait_idle(30)
    assert set(statuses(loader).values()) == {DONE}


def test_a_single_process_still_analyses_big_traces(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(loader_module, "BIG_TRACE_BYTES", 10)
    for i in range(2):
        write_trace(tmp_path / "logs" / "run" / f"w{i}.pt.trace.json", events=10)
    analyzer = CountingAnalyzer()
    poll_and_wait(make_loader(tmp_path / "logs", tmp_path / "cache", analyzer, max_workers=1))
    assert len(analyzer.calls) == 2


def test_a_queued_trace_that_changes_before_it_starts_is_analysed_once_as_it_is_now(
    tmp_path: Path,
) -> None:
    logs = tmp_path / "logs" / "run"
    write_trace(logs / "a.pt.trace.json", events=1)
    write_trace(logs / "b.pt.trace.json", events=2)
    gate = threading.Event()

    class FirstWaits(CountingAnalyzer):
        def __call__(self, ref: TraceRef, options: Any) -> Any:
            if ref.path.endswith("a.pt.trace.json"):
                assert gate.wait(30)
            return super().__call__(ref, options)

    analyzer = FirstWaits()
    loader = make_loader(tmp_path / "logs", tmp_path / "cache", analyzer, max_workers=1)
    loader.poll()  # a runs, b waits in the queue
    write_trace(logs / "b.pt.trace.json", events=7)
    loader.poll()
    gate.set()
    assert loader.wait_idle(30)
    assert sorted(names(analyzer.calls)) == ["a.pt.trace.json", "b.pt.trace.json"]
    assert loader.get_run("run").traces[str(logs / "b.pt.trace.json")].result.events == 7


def test_several_logdirs_prefix_their_runs(tmp_path: Path) -> None:
    write_trace(tmp_path / "a" / "run" / "w0.pt.trace.json")
    write_trace(tmp_path / "b" / "run" / "w0.pt.trace.json")
    loader = TraceLoader(
        [("first", str(tmp_path / "a")), ("second", str(tmp_path / "b"))],
        None,
        DiskCache(None),
        analyze_fn=CountingAnalyzer(),
    )
    poll_and_wait(loader)
    assert loader.run_names() == ["first/run", "second/run"]
    assert {s.ref.run for s in loader.get_run("first/run").traces.values()} == {"first/run"}


def test_a_missing_logdir_is_reported_and_the_others_still_load(tmp_path: Path) -> None:
    write_trace(tmp_path / "a" / "run" / "w0.pt.trace.json")
    loader = TraceLoader(
        [("gone", str(tmp_path / "nowhere")), ("a", str(tmp_path / "a"))],
        None,
        DiskCache(None),
        analyze_fn=CountingAnalyzer(),
    )
    poll_and_wait(loader)
    assert loader.run_names() == ["a/run"]
    assert "nowhere" in loader.logdir_errors[0]["reason"]


def test_a_trace_under_a_name_of_the_users_is_listed_with_why_beside_the_runs(
    tmp_path: Path,
) -> None:
    write_trace(tmp_path / "logs" / "run" / "w0.pt.trace.json")
    unnamed = tmp_path / "logs" / "accel" / "profile_0.json"
    unnamed.parent.mkdir(parents=True)
    unnamed.write_bytes((tmp_path / "logs" / "run" / "w0.pt.trace.json").read_bytes())
    loader = make_loader(tmp_path / "logs", tmp_path / "cache", CountingAnalyzer())
    poll_and_wait(loader)
    assert loader.run_names() == ["run"]
    (error,) = loader.logdir_errors
    assert error["path"] == str(unnamed)
    assert "NAME.pt.trace.json" in error["reason"]


def test_background_thread_polls_on_its_own(tmp_path: Path) -> None:
    write_trace(tmp_path / "logs" / "run" / "w0.pt.trace.json")
    loader = make_loader(tmp_path / "logs", tmp_path / "cache", CountingAnalyzer())
    loader.reload_interval_s = 0.05
    loader.start()
    try:
        assert loader.wait_idle(10)
        write_trace(tmp_path / "logs" / "run2" / "w0.pt.trace.json")
        deadline = time.monotonic() + 10
        while "run2" not in loader.run_names() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert "run2" in loader.run_names()
    finally:
        loader.stop()


def test_corrupt_cache_entry_is_a_miss(tmp_path: Path) -> None:
    cache = DiskCache(str(tmp_path / "cache"))
    key = cache_key("/x.pt.trace.json", 10, 20, "opts")
    cache.put(key, {"a": 1})
    assert cache.get(key) == {"a": 1}
    (tmp_path / "cache" / (key + ".pickle")).write_bytes(b"not a pickle")
    assert cache.get(key) is None
    assert cache_key("/x.pt.trace.json", 11, 20, "opts") != key


@pytest.mark.parametrize(
    "reason, transient",
    [
        ("Input data was truncated", True),
        ("Compressed file ended before the end-of-stream marker was reached", True),
        ("Unterminated string starting at: line 1", True),
        ("Invalid \\escape: line 1", False),
        ("not a Kineto trace: no traceEvents", False),
    ],
)
def test_transient_read_errors_are_told_apart(reason: str, transient: bool) -> None:
    assert looks_transient(reason) is transient


def test_a_trace_that_fails_for_good_changes_the_runs_generation(tmp_path: Path) -> None:
    # The plugin memoises a run's report (and its "loading" flag) per generation: a trace
    # settling as an error changes what results() returns, so the generation must move, or
    # the summary keeps saying "loading" and never lists the failed trace.
    run_dir = tmp_path / "logs" / "run"
    write_trace(run_dir / "good.pt.trace.json")
    run_dir.joinpath("bad.pt.trace.json").write_text("broken")
    gate = threading.Event()

    class BadWaits(CountingAnalyzer):
        def __call__(self, ref: TraceRef, options: Any) -> Any:
            if ref.path.endswith("bad.pt.trace.json"):
                gate.wait(10)
            return super().__call__(ref, options)

    loader = make_loader(tmp_path / "logs", tmp_path / "cache", BadWaits(), max_workers=2)
    loader.poll()
    run = loader.get_run("run")
    deadline = time.monotonic() + 10
    while len(loader.results(run, None, None)) < 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    generation = run.generation
    assert len(loader.results(run, None, None)) == 1 and run.loading
    gate.set()
    assert loader.wait_idle(10)
    assert len(loader.results(run, None, None)) == 2 and not run.loading
    assert run.generation != generation


def test_results_never_show_a_trace_half_settled(tmp_path: Path) -> None:
    # Request threads call results() while the loader settles a trace. Whatever a reader
    # sees at any point of _settle must be whole: never status DONE with no result yet.
    # (The lock is re-entrant, so reading from inside _settle shows each intermediate state.)
    write_trace(tmp_path / "logs" / "run" / "w0.pt.trace.json")
    loader = make_loader(tmp_path / "logs", tmp_path / "cache", CountingAnalyzer())
    seen: list[list[Any]] = []
    original_setattr = loader_module.TraceState.__setattr__

    def read_midway(state: Any, name: str, value: Any) -> None:
        original_setattr(state, name, value)
        run = loader.get_run("run")
        if run is not None and state.ref.path in run.traces:
            seen.append(loader.results(run, None, None))

    loader_module.TraceState.__setattr__ = read_midway  # type: ignore[method-assign]
    try:
        poll_and_wait(loader)
    finally:
        loader_module.TraceState.__setattr__ = original_setattr  # type: ignore[method-assign]
    assert seen and all(None not in results for results in seen)
    assert len(seen[-1]) == 1


class FakePool:
    """An executor whose futures the test completes by hand."""

    def __init__(self) -> None:
        import concurrent.futures

        self.futures: list[concurrent.futures.Future] = []
        self.shut_down = False
        self.broken = False  # a broken pool fails its jobs itself; shutdown cancels none

    def submit(self, fn: Any, *args: Any) -> Any:
        import concurrent.futures

        future: concurrent.futures.Future = concurrent.futures.Future()
        self.futures.append(future)
        return future

    def shutdown(self, wait: bool = True, cancel_futures: bool = False) -> None:
        self.shut_down = True
        if cancel_futures and not self.broken:
            for future in self.futures:
                future.cancel()


def fake_pools(loader: TraceLoader) -> list[FakePool]:
    pools: list[FakePool] = []

    def new_pool() -> FakePool:
        pools.append(FakePool())
        return pools[-1]

    loader._new_pool = new_pool  # type: ignore[method-assign]
    return pools


def done_result(name: str) -> Any:
    info = SimpleNamespace(path=name, error=None, worker="w")
    return SimpleNamespace(info=info, syncs=[], latent=[], steps=[])


def test_a_late_failure_of_a_failed_pool_does_not_shut_down_its_replacement(
    tmp_path: Path,
) -> None:
    from tb_syncfinder.plugin.workers import WorkerStartError

    for name in ("a", "b"):
        write_trace(tmp_path / "logs" / "run" / f"{name}.pt.trace.json")
    loader = make_loader(tmp_path / "logs", tmp_path / "cache", CountingAnalyzer())
    loader.use_processes = True
    pools = fake_pools(loader)
    loader.poll()
    first = pools[0]
    assert len(first.futures) == 2
    first.broken = True
    # No analysis process could start: its jobs fail one after another, and each is
    # analysed again at once in the pool that replaced it (threads from now on).
    first.futures[0].set_exception(WorkerStartError("cannot run python"))
    assert not loader.use_processes
    second = pools[1]
    assert len(second.futures) == 1
    first.futures[1].set_exception(WorkerStartError("cannot run python"))
    assert not second.shut_down and len(pools) == 2
    assert len(second.futures) == 2
    for future, name in zip(second.futures, ("a", "b"), strict=True):
        future.set_result(done_result(name))
    assert list(statuses(loader).values()) == [DONE, DONE]


def test_a_trace_whose_process_died_is_retried_then_an_error_naming_the_process(
    tmp_path: Path,
) -> None:
    from tb_syncfinder.plugin.workers import WorkerDied

    for name in ("a", "b"):
        write_trace(tmp_path / "logs" / "run" / f"{name}.pt.trace.json")
    loader = make_loader(tmp_path / "logs", tmp_path / "cache", CountingAnalyzer())
    pools = fake_pools(loader)
    died = WorkerDied(4321, "was killed (SIGKILL: out of memory?)")
    for attempt in range(1, MAX_TRANSIENT_ATTEMPTS + 1):
        loader.poll()
        jobs = pools[0].futures[-2:] if attempt == 1 else pools[0].futures[-1:]
        if attempt == 1:
            jobs[1].set_result(done_result("b"))  # its neighbour, in another process
        jobs[0].set_exception(died)
        expected = RETRY if attempt < MAX_TRANSIENT_ATTEMPTS else ERROR
        assert statuses(loader) == {"a.pt.trace.json": expected, "b.pt.trace.json": DONE}
    assert len(pools) == 1 and not pools[0].shut_down  # one dead process, not a dead pool
    state = loader.get_run("run").traces[str(tmp_path / "logs" / "run" / "a.pt.trace.json")]
    assert state.error == (
        "the analysis process (pid 4321) was killed (SIGKILL: out of memory?) while it read "
        "this trace"
    )
    assert not state.being_written
    loader.poll()
    assert len(pools[0].futures) == MAX_TRANSIENT_ATTEMPTS + 1  # given up on: not again


def test_where_no_analysis_process_can_start_traces_are_analysed_in_threads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import functools

    from tb_syncfinder.plugin.workers import ProcessPool

    for name in ("a", "b", "c"):
        write_trace(tmp_path / "logs" / "run" / f"{name}.pt.trace.json")
    missing = str(tmp_path / "no-such-python")
    monkeypatch.setattr(
        loader_module, "ProcessPool", functools.partial(ProcessPool, executable=missing)
    )
    analyzer = CountingAnalyzer()
    loader = make_loader(tmp_path / "logs", tmp_path / "cache", analyzer, max_workers=2)
    loader.use_processes = True  # as without an injected analyser
    poll_and_wait(loader)
    assert not loader.use_processes
    assert set(statuses(loader).values()) == {DONE}
    assert sorted(os.path.basename(path) for path in analyzer.calls) == [
        "a.pt.trace.json",
        "b.pt.trace.json",
        "c.pt.trace.json",
    ]


def test_a_trace_submitted_as_its_pool_is_replaced_is_analysed_by_the_replacement(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another job's failure can shut the pool down (no analysis process could start: on to
    threads) between the loader taking it and submitting to it: the job goes to the new
    pool instead of failing with "cannot schedule new futures after shutdown" (a race the
    test above met under load)."""
    import concurrent.futures

    write_trace(tmp_path / "logs" / "run" / "a.pt.trace.json")
    analyzer = CountingAnalyzer()
    loader = make_loader(tmp_path / "logs", tmp_path / "cache", analyzer)
    shut_down = concurrent.futures.ThreadPoolExecutor(max_workers=1)
    shut_down.shutdown()
    pools = iter([shut_down, concurrent.futures.ThreadPoolExecutor(max_workers=1)])
    monkeypatch.setattr(loader, "_new_pool", lambda: next(pools))
    poll_and_wait(loader)
    assert statuses(loader) == {"a.pt.trace.json": DONE}
    assert [os.path.basename(path) for path in analyzer.calls] == ["a.pt.trace.json"]


def test_a_new_model_field_changes_the_cache_key_so_old_pickles_are_not_served(monkeypatch):
    from tb_syncfinder.plugin import cache

    before = cache.cache_key("/t.json", 10, 1, "opts")
    monkeypatch.setattr(cache, "STORED_SHAPE", cache.STORED_SHAPE + ",new_field")
    assert cache.cache_key("/t.json", 10, 1, "opts") != before
    assert "TraceInfo:" in cache.STORED_SHAPE and "repairs" in cache.STORED_SHAPE


def test_a_cached_result_whose_source_files_changed_since_is_a_miss(tmp_path: Path) -> None:
    """Its lines were resolved in the files as they were: an edited file (or one gone)
    has them found again, and what the report says of a file changed since profiling."""
    from types import SimpleNamespace

    train = tmp_path / "train.py"
    lib = tmp_path / "lib.py"
    train.write_text("def train_step(loss):\n    return loss.item()\n")
    lib.write_text("def fit():\n    pass\n")
    source = SimpleNamespace(
        resolved_path=str(train),
        run_by=None,
        library=SimpleNamespace(resolved_path=str(lib), run_by=None, library=None),
    )
    result = SimpleNamespace(syncs=[SimpleNamespace(source=source)], latent=[])
    cache = DiskCache(str(tmp_path / "cache"))
    key = cache_key("/x.pt.trace.json", 10, 20, "opts")
    cache.put(key, result)
    assert cache.get(key).syncs[0].source.resolved_path == str(train)
    lib.write_text("\n\ndef fit():\n    pass\n")  # two lines added above fit
    assert cache.get(key) is None
    cache.put(key, result)
    train.unlink()
    assert cache.get(key) is None


def test_the_cache_key_follows_the_packages_code(monkeypatch) -> None:
    from tb_syncfinder.code_version import code_digest
    from tb_syncfinder.plugin import cache

    assert cache.CODE_DIGEST == code_digest()
    before = cache.cache_key("/t.json", 10, 1, "opts")
    monkeypatch.setattr(cache, "CODE_DIGEST", "other code")
    assert cache.cache_key("/t.json", 10, 1, "opts") != before


def test_the_plugins_cache_key_is_the_same_in_every_process(tmp_path) -> None:
    """A warm disk cache only helps if a restarted TensorBoard computes the same key: the
    options must not hash differently per process (string hashing is randomised)."""
    import os
    import subprocess
    import sys

    code = (
        "from tb_syncfinder.plugin.plugin import make_engine_options\n"
        "from tb_syncfinder.plugin.settings import PluginSettings\n"
        "from tb_syncfinder.plugin.loader import TraceLoader\n"
        "from tb_syncfinder.plugin.cache import DiskCache\n"
        "opts = make_engine_options(PluginSettings(logdirs=[], source_roots=['/src']))\n"
        "print(TraceLoader([], opts, DiskCache(None)).options_digest)\n"
    )
    digests = set()
    for seed in ("1", "2", "3"):
        env = dict(os.environ, PYTHONHASHSEED=seed, PYTHONPATH=str(Path.cwd()))
        done = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True
        )
        digests.add(done.stdout.strip())
    assert len(digests) == 1, digests


def test_each_analysis_sizes_its_windows_from_its_share_of_the_memory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Large traces run side by side in all but one of the workers: each sized its windows
    from all the memory available, as if alone (two 0.3 GB traces read whole at once beside
    torch-tb-profiler's processes took the machine to 2 GB free). The share changes no
    cached result: read whole or in windows, the findings are the same."""
    from tb_syncfinder import windows
    from tb_syncfinder.engine import Options

    options = Options()
    seen: list[Any] = []

    def analyze(ref: Any, given: Any) -> Any:
        seen.append(given)
        return error_result(ref, "not analysed here")

    write_trace(tmp_path / "logs" / "run" / "w.pt.trace.json")
    loader = TraceLoader(
        [(None, str(tmp_path / "logs"))],
        options,
        DiskCache(str(tmp_path / "cache")),
        analyze_fn=analyze,
        reload_interval_s=3600,
        max_workers=4,
    )
    poll_and_wait(loader)
    assert [given.memory_share for given in seen] == [1 / 3]
    alone = TraceLoader(
        [(None, str(tmp_path / "logs"))], options, DiskCache(str(tmp_path / "c2")), max_workers=1
    )
    assert alone.options.memory_share == 1.0
    assert alone.options_digest == loader.options_digest
    budget = 30 * windows.MIN_WINDOW_BYTES * windows.PEAK_PER_JSON_BYTE
    monkeypatch.setattr(windows, "available_memory_bytes", lambda: int(budget))
    assert windows.auto_window_bytes(1 / 3) == windows.auto_window_bytes() // 3


def test_a_cut_trace_that_went_quiet_is_said_not_to_be_written_even_from_the_cache(
    tmp_path: Path,
) -> None:
    """A newcomer's trace cut in half two hours before read "(still being written?)" in
    TensorBoard, whose runs list said it was not. A truncated trace quiet for
    WRITING_QUIET_S is answered "cut short, not being written", with the time it last
    changed (the answer is cached: an age would go stale); one given up on while fresh
    keeps the question until it has been quiet that long, at a later poll or restart."""
    run = tmp_path / "logs" / "run"
    run.mkdir(parents=True)
    old, fresh = run / "old.pt.trace.json", run / "fresh.pt.trace.json"
    old.write_text('{"traceEvents": [')
    fresh.write_text('{"traceEvents": [')
    make_old(old, 7200)
    make_old(fresh, 5)

    def loader(clock_offset_s: float) -> TraceLoader:
        from tb_syncfinder.engine import Options

        made = TraceLoader(
            [(None, str(tmp_path / "logs"))],
            Options(),
            DiskCache(str(tmp_path / "cache")),
            reload_interval_s=3600,
            use_processes=False,
        )
        made.clock = lambda: time.time() + clock_offset_s
        return made

    def reasons(of: TraceLoader) -> dict[str, str]:
        return {
            os.path.basename(r.info.path): r.info.error
            for r in of.results(of.get_run("run"), None, None)
        }

    first = loader(0)
    for _ in range(loader_module.MAX_TRANSIENT_ATTEMPTS):
        poll_and_wait(first)
    since = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(old.stat().st_mtime))
    settled = f"truncated JSON (unchanged since {since}: cut short, not being written)"
    assert reasons(first) == {
        "old.pt.trace.json": settled,
        "fresh.pt.trace.json": "truncated JSON (still being written?)",
    }
    since = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(fresh.stat().st_mtime))
    answered = f"truncated JSON (unchanged since {since}: cut short, not being written)"
    generation = first.get_run("run").generation
    first.clock = lambda: time.time() + 3600  # the same TensorBoard, an hour later
    poll_and_wait(first)
    assert reasons(first)["fresh.pt.trace.json"] == answered
    assert first.get_run("run").generation > generation  # clients are told to ask again
    later = loader(3600)  # TensorBoard restarted an hour later: answers from the cache
    poll_and_wait(later)
    assert reasons(later)["fresh.pt.trace.json"] == answered


def _engine(ref: TraceRef, options: Any) -> Any:
    from tb_syncfinder.engine import analyze_trace

    return analyze_trace(ref)


@pytest.mark.timeout(120)
def test_a_link_to_nothing_and_a_fifo_are_error_entries_and_loading_goes_on(
    tmp_path: Path,
) -> None:
    """A dangling symlink named like a trace was left out without a word (a run of it alone
    read as a trace without device activity), and a FIFO held its analysis process forever
    (two held every process of the pool, and no run loaded any more). Each is now an error
    entry naming why, analysed once, and the traces beside them and after them load."""
    from kineto_builder import KinetoTraceBuilder, item_sync

    run = tmp_path / "logs" / "run"
    b = KinetoTraceBuilder()
    with b.step(1):
        item_sync(b)
    b.write(run / "good.pt.trace.json")
    (run / "gone.pt.trace.json.gz").symlink_to(tmp_path / "nowhere.json.gz")
    os.mkfifo(run / "pipe.pt.trace.json")
    loader = make_loader(tmp_path / "logs", tmp_path / "cache", _engine, max_workers=1)
    poll_and_wait(loader)
    traces = loader.get_run("run").traces
    errors = {os.path.basename(path): state.error for path, state in traces.items()}
    assert errors == {
        "good.pt.trace.json": None,
        "gone.pt.trace.json.gz": (
            f"a symbolic link to {tmp_path / 'nowhere.json.gz'}, which does not exist"
        ),
        "pipe.pt.trace.json": (
            "a named pipe (FIFO) that nothing writes to, not a trace file: nothing to read"
        ),
    }
    b.write(tmp_path / "logs" / "after" / "late.pt.trace.json")
    poll_and_wait(loader)
    assert statuses(loader)["late.pt.trace.json"] == DONE
    poll_and_wait(loader)
    # Each analysed once, not at every poll.
    assert (
        loader.get_run("run").traces[str(run / "gone.pt.trace.json.gz")]
        is traces[str(run / "gone.pt.trace.json.gz")]
    )
