"""Per-trace summaries: written once, read back instead of parsing, and never trusted when
the trace, its sources, the options or the package changed."""

from __future__ import annotations

import os
from pathlib import Path

import msgspec
import pytest
from kineto_builder import KinetoTraceBuilder, item_sync
from remote_fs import remote_bucket

from tb_syncfinder import __version__, summaries
from tb_syncfinder.cli import main
from tb_syncfinder.code_version import code_version
from tb_syncfinder.discovery import find_traces
from tb_syncfinder.engine import Options, analyze_runs
from tb_syncfinder.summaries import SummaryStore

TRAIN_PY = "import torch\n\n\ndef train_step(loss):\n    loss.backward()\n    return loss.item()\n"


def write_trace(root: Path, name: str = "worker0", steps: int = 3) -> Path:
    source = root / "src" / "train.py"
    source.parent.mkdir(parents=True, exist_ok=True)
    source.write_text(TRAIN_PY)
    b = KinetoTraceBuilder()
    for n in range(1, steps + 1):
        with b.step(n):
            item_sync(b, stack=[(str(source), 4, "train_step")])
    return b.write(root / "logs" / "run" / f"{name}.pt.trace.json")


def options(root: Path) -> Options:
    return Options(source_roots=(str(root / "src"),))


def never_called(refs, options, store):
    raise AssertionError(f"traces parsed again: {[r.path for r in refs]}")
    yield  # pragma: no cover - makes this a generator like a real mapper


def test_a_written_summary_is_read_back_instead_of_parsing_the_trace(tmp_path: Path) -> None:
    write_trace(tmp_path)
    refs = find_traces(str(tmp_path / "logs"))
    store = SummaryStore()
    first = analyze_runs(refs, options(tmp_path), summaries=store, write_summaries=True)
    summary = Path(store.path_for(refs[0].path))
    assert summary.parent.name == ".sync_advisor" and summary.is_file()
    heard = []
    second = analyze_runs(
        refs,
        options(tmp_path),
        summaries=store,
        mapper=never_called,
        on_result=lambda result, from_summary: heard.append(from_summary),
    )
    assert heard == [True]
    assert second.report.to_json() == first.report.to_json()
    # The summary also holds what the plugin's detail view needs.
    assert second.results[0].contexts and second.results[0].syncs[0].source.line == 6


def test_an_edit_saved_while_the_trace_was_analysed_makes_its_summary_stale(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The source files are stamped as the analysis reads them, not when the summary is
    written: a file saved in between no longer matches, and the trace is analysed again."""
    from tb_syncfinder.source import SourceResolver

    write_trace(tmp_path)
    source = tmp_path / "src" / "train.py"
    refs = find_traces(str(tmp_path / "logs"))
    read = SourceResolver._source_bytes

    def read_then_edit(self: SourceResolver, path: Path) -> bytes | None:
        data = read(self, path)
        os.utime(source, ns=(source.stat().st_atime_ns, source.stat().st_mtime_ns + 10**9))
        return data

    monkeypatch.setattr(SourceResolver, "_source_bytes", read_then_edit)
    first = analyze_runs(refs, options(tmp_path), summaries=SummaryStore(), write_summaries=True)
    monkeypatch.undo()
    stamp = first.results[0].source_stamps[str(source)]
    assert stamp[1] == source.stat().st_mtime_ns - 10**9
    heard = []
    analyze_runs(
        refs,
        options(tmp_path),
        summaries=SummaryStore(),
        on_result=lambda result, from_summary: heard.append(from_summary),
    )
    assert heard == [False]


@pytest.mark.parametrize("change", ["trace", "source", "options", "version", "code", "corrupt"])
def test_a_summary_that_no_longer_matches_is_recomputed_never_trusted(
    tmp_path: Path, change: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    trace = write_trace(tmp_path)
    refs = find_traces(str(tmp_path / "logs"))
    store = SummaryStore()
    analyze_runs(refs, options(tmp_path), summaries=store, write_summaries=True)
    summary = Path(store.path_for(refs[0].path))
    used_options = options(tmp_path)
    if change == "trace":
        trace.write_text(trace.read_text() + " ")
    elif change == "source":
        source = tmp_path / "src" / "train.py"
        source.write_text("\n\n" + TRAIN_PY)  # the line moved: the stored line is stale
    elif change == "options":
        used_options = Options(source_roots=(str(tmp_path),))
    elif change == "version":
        envelope = msgspec.msgpack.decode(summary.read_bytes())
        envelope["version"] = "0.0.1"
        summary.write_bytes(msgspec.msgpack.encode(envelope))
    elif change == "code":  # the same version string, read by changed code
        assert msgspec.msgpack.decode(summary.read_bytes())["version"] == code_version()
        version = __version__
        monkeypatch.setattr(summaries, "code_version", lambda: f"{version}+0123456789abcdef")
    else:
        summary.write_bytes(b"\x00not a summary")
    heard = []
    report = analyze_runs(
        refs,
        used_options,
        summaries=store,
        on_result=lambda result, from_summary: heard.append(from_summary),
    )
    assert heard == [False]
    if change == "source":
        # Read against the moved source, the recorded def line no longer holds the function:
        # the recomputed line says it is not exact (the stored one claimed line 6, exact).
        assert report.report.syncs[0].source.line_exact is False


def test_a_trace_that_failed_gets_no_summary(tmp_path: Path) -> None:
    broken = tmp_path / "logs" / "run" / "worker0.pt.trace.json"
    broken.parent.mkdir(parents=True)
    broken.write_text('{"traceEvents": [')
    refs = find_traces(str(tmp_path / "logs"))
    store = SummaryStore()
    result = analyze_runs(refs, Options(), summaries=store, write_summaries=True).results[0]
    assert result.info.error
    assert not os.path.exists(store.path_for(refs[0].path))


def test_summaries_in_a_folder_of_their_own_one_file_per_trace(tmp_path: Path) -> None:
    write_trace(tmp_path, "worker0")
    write_trace(tmp_path, "worker1")
    refs = find_traces(str(tmp_path / "logs"))
    store = SummaryStore(str(tmp_path / "summaries"))
    analyze_runs(refs, options(tmp_path), summaries=store, write_summaries=True)
    files = sorted(p.name for p in (tmp_path / "summaries").rglob(f"*{summaries.SUFFIX}"))
    assert len(files) == 2 and not (tmp_path / "logs" / "run" / summaries.FOLDER).exists()


def test_summaries_beside_remote_traces_go_through_the_io_layer(tmp_path: Path) -> None:
    write_trace(tmp_path)
    with remote_bucket(tmp_path / "logs", writable=True) as bucket:
        refs = find_traces(f"{bucket}/run")
        store = SummaryStore()
        analyze_runs(refs, options(tmp_path), summaries=store, write_summaries=True)
        assert (tmp_path / "logs" / "run" / summaries.FOLDER).is_dir()
        heard = []
        analyze_runs(
            refs,
            options(tmp_path),
            summaries=store,
            mapper=never_called,
            on_result=lambda result, from_summary: heard.append(from_summary),
        )
        assert heard == [True]


def test_the_cli_writes_summaries_when_asked_and_reads_them_next_time(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    write_trace(tmp_path)
    monkeypatch.chdir(tmp_path / "src")
    logs = str(tmp_path / "logs")
    assert (
        main(["report", logs, "--json", "-o", str(tmp_path / "a.json"), "--write-summaries"]) == 0
    )
    capsys.readouterr()
    assert main(["report", logs, "--json", "-o", str(tmp_path / "b.json")]) == 0
    assert "1 from summaries, 0 analysed" in capsys.readouterr().err
    assert (tmp_path / "a.json").read_bytes() == (tmp_path / "b.json").read_bytes()
    assert main(["report", logs, "--no-summaries", "-o", str(tmp_path / "c.txt")]) == 0
    assert "from summaries" not in capsys.readouterr().err


def test_the_code_digest_reads_a_crlf_checkout_of_the_same_code_as_the_same(
    tmp_path: Path,
) -> None:
    """Summaries name the code that wrote them: a Windows checkout (CRLF line endings) of
    the same package reads what a Linux cluster wrote; a changed file does not."""
    import shutil

    from tb_syncfinder.code_version import code_digest, digest_of

    package = Path(summaries.__file__).resolve().parent
    copy = tmp_path / "tb_syncfinder"
    shutil.copytree(package, copy, ignore=shutil.ignore_patterns("__pycache__", "static"))
    for file in copy.rglob("*.py"):
        file.write_bytes(file.read_bytes().replace(b"\n", b"\r\n"))
    assert digest_of(copy) == code_digest()
    (copy / "engine.py").write_bytes((copy / "engine.py").read_bytes() + b"# edited\r\n")
    assert digest_of(copy) != code_digest()


def test_a_summary_made_without_its_source_file_is_recomputed_once_the_file_is_there(
    tmp_path: Path,
) -> None:
    """The site kept its def line, inexact, while the file was missing; the user copies it
    in: the summary (stamps of the files read only) was still served, unchanged."""
    write_trace(tmp_path)
    source = tmp_path / "src" / "train.py"
    source.unlink()
    refs = find_traces(str(tmp_path / "logs"))
    store = SummaryStore()
    first = analyze_runs(refs, options(tmp_path), summaries=store, write_summaries=True)
    sync = first.results[0].syncs[0]
    assert (sync.source.line, sync.source.line_exact) == (4, False)
    assert str(source) in first.results[0].source_probes
    analyze_runs(refs, options(tmp_path), summaries=store, mapper=never_called)
    source.write_text(TRAIN_PY)
    heard = []
    second = analyze_runs(
        refs,
        options(tmp_path),
        summaries=store,
        on_result=lambda result, from_summary: heard.append(from_summary),
    )
    assert heard == [False]
    sync = second.results[0].syncs[0]
    assert (sync.source.line, sync.source.line_exact) == (6, True)


def test_a_checkout_of_the_recorded_tree_cloned_under_the_root_makes_the_summary_stale(
    tmp_path: Path,
) -> None:
    """Recorded on another machine as /home/alice/proj/bench/train.py: a clone under the
    root holding proj/bench/train.py is found by its tail, and was not watched."""
    b = KinetoTraceBuilder()
    with b.step(1):
        item_sync(b, stack=[("/home/alice/proj/bench/train.py", 4, "train_step")])
    b.write(tmp_path / "logs" / "run" / "w.pt.trace.json")
    root = tmp_path / "work"
    root.mkdir()
    used = Options(source_roots=(str(root),))
    refs = find_traces(str(tmp_path / "logs"))
    store = SummaryStore()
    first = analyze_runs(refs, used, summaries=store, write_summaries=True)
    assert first.results[0].syncs[0].source.line_exact is False
    # Beside the trace is outside every root: the finder never looks there, nor a probe.
    assert not any(p.startswith(str(tmp_path / "logs")) for p in first.results[0].source_probes)
    (root / "proj" / "bench").mkdir(parents=True)
    (root / "proj" / "bench" / "train.py").write_text(TRAIN_PY)
    heard = []
    second = analyze_runs(
        refs, used, summaries=store, on_result=lambda r, from_summary: heard.append(from_summary)
    )
    assert heard == [False]
    sync = second.results[0].syncs[0]
    assert (sync.source.line, sync.source.line_exact) == (6, True)
