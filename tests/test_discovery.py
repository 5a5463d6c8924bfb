from __future__ import annotations

import gzip
import os
from pathlib import Path

import pytest

from tb_syncfinder.discovery import (
    TraceNotFoundError,
    find_traces,
    is_trace_file_name,
    list_runs,
    open_trace_bytes,
    unnamed_traces,
)


def touch(path: Path, content: bytes = b'{"traceEvents": []}') -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content)
    return path


def test_worker_name_follows_torch_tb_profiler_pattern() -> None:
    assert is_trace_file_name("host_123.pt.trace.json")
    assert is_trace_file_name("host_123.1619499959628.pt.trace.json.gz")
    assert not is_trace_file_name("host_123.json")
    assert not is_trace_file_name("notes.pt.trace.json.bak")


def test_logdir_of_runs_names_runs_relative_to_logdir(tmp_path: Path) -> None:
    touch(tmp_path / "run1" / "worker0.pt.trace.json")
    touch(tmp_path / "run1" / "worker1.pt.trace.json.gz")
    touch(tmp_path / "group" / "run2" / "w.pt.trace.json")
    touch(tmp_path / "empty" / "readme.txt")

    runs = list_runs(str(tmp_path))

    assert list(runs) == ["group/run2", "run1"]
    assert [(r.worker, r.span) for r in runs["run1"]] == [("worker0", None), ("worker1", None)]
    assert runs["group/run2"][0].run == "group/run2"
    assert all(os.path.isabs(r.path) for refs in runs.values() for r in refs)


def test_run_folder_is_named_after_itself(tmp_path: Path) -> None:
    run = tmp_path / "my_run"
    touch(run / "w.pt.trace.json")
    assert list(list_runs(str(run))) == ["my_run"]
    assert list(list_runs(str(run) + "/")) == ["my_run"]


def test_timestamp_becomes_span_and_spans_sort_numerically(tmp_path: Path) -> None:
    touch(tmp_path / "w.1700000000999.pt.trace.json")
    touch(tmp_path / "w.999.pt.trace.json")
    touch(tmp_path / "w.1700000000001.pt.trace.json.gz")

    refs = find_traces(str(tmp_path))

    assert [r.worker for r in refs] == ["w", "w", "w"]
    assert [r.span for r in refs] == ["999", "1700000000001", "1700000000999"]


def test_worker_name_keeps_dots_before_the_timestamp(tmp_path: Path) -> None:
    touch(tmp_path / "node.rank0.1619499959628.pt.trace.json")
    (ref,) = find_traces(str(tmp_path))
    assert (ref.worker, ref.span) == ("node.rank0", "1619499959628")


def test_directory_named_like_a_trace_is_not_a_trace(tmp_path: Path) -> None:
    (tmp_path / "odd.pt.trace.json").mkdir()
    touch(tmp_path / "real.pt.trace.json")
    assert [r.worker for r in find_traces(str(tmp_path))] == ["real"]


def test_ascend_worker_directories_are_workers_of_their_parent_run(tmp_path: Path) -> None:
    run = tmp_path / "npu_run"
    touch(run / "rank0_20240101123456789_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "trace_view.json")
    touch(run / "rank1_20240101123456790_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "trace_view.json")
    # No trace_view.json: torch-tb-profiler-ascend would show other views, we have nothing.
    touch(run / "rank2_20240101123456791_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "kernel.csv")

    runs = list_runs(str(tmp_path))

    assert list(runs) == ["npu_run"]
    assert [(r.worker, r.span) for r in runs["npu_run"]] == [
        ("rank0", "20240101123456789"),
        ("rank1", "20240101123456790"),
    ]
    assert runs["npu_run"][0].path.endswith("ASCEND_PROFILER_OUTPUT/trace_view.json")


def test_single_ascend_trace_file_gets_worker_from_its_directory(tmp_path: Path) -> None:
    trace = touch(
        tmp_path
        / "run"
        / "rank3_1700000000_ascend_pt"
        / "ASCEND_PROFILER_OUTPUT"
        / "trace_view.json"
    )
    (ref,) = find_traces(str(trace))
    assert (ref.run, ref.worker, ref.span) == ("run", "rank3", "1700000000")


def test_single_file_with_any_name_is_one_trace(tmp_path: Path) -> None:
    trace = touch(tmp_path / "exp" / "my_profile.json.gz")
    (ref,) = find_traces(str(trace))
    assert (ref.run, ref.worker, ref.span) == ("exp", "my_profile", None)
    assert ref.path == str(trace)


def test_nonexistent_path_raises_naming_the_path(tmp_path: Path) -> None:
    missing = str(tmp_path / "nope")
    with pytest.raises(TraceNotFoundError, match="nope: no such file"):
        find_traces(missing)
    with pytest.raises(FileNotFoundError):
        list_runs(missing)


def test_directory_without_traces_finds_nothing(tmp_path: Path) -> None:
    touch(tmp_path / "a" / "b.json")
    assert find_traces(str(tmp_path)) == []


def test_symlinked_run_is_followed(tmp_path: Path) -> None:
    real = tmp_path / "elsewhere" / "run"
    touch(real / "w.pt.trace.json")
    logdir = tmp_path / "logdir"
    logdir.mkdir()
    (logdir / "linked").symlink_to(real, target_is_directory=True)
    assert list(list_runs(str(logdir))) == ["linked"]


def test_open_trace_bytes_returns_raw_file_bytes(tmp_path: Path) -> None:
    data = gzip.compress(b'{"traceEvents": []}')
    trace = touch(tmp_path / "w.pt.trace.json.gz", data)
    assert open_trace_bytes(str(trace)) == data


def test_remote_logdir_goes_through_torch_tb_profiler_io(tmp_path: Path) -> None:
    """A remote scheme registered in torch_tb_profiler.io is walked and read through it."""
    from remote_fs import remote_bucket

    root = tmp_path / "bucket"
    touch(root / "runA" / "w.123.pt.trace.json", b"remote-bytes")
    with remote_bucket(root) as bucket:
        runs = list_runs(bucket)
        assert list(runs) == ["runA"]
        (ref,) = runs["runA"]
        assert ref.path == f"{bucket}/runA/w.123.pt.trace.json"
        assert (ref.worker, ref.span) == ("w", "123")
        assert open_trace_bytes(ref.path) == b"remote-bytes"


def test_names_whose_bytes_are_not_utf8_are_text_a_url_can_carry(tmp_path: Path) -> None:
    """A folder or file name with bytes that are not UTF-8 came out with lone surrogates:
    the tab's encodeURIComponent threw on such a run name (its whole run list stayed
    "Loading runs...") and no request could name it. The name is text now; the path keeps
    the real bytes, so the file is still read."""
    folder = os.fsdecode(os.fsencode(str(tmp_path)) + b"/a\xffname")
    trace = Path(folder) / os.fsdecode(b"h\xfex.pt.trace.json")
    touch(trace)
    ((ref,),) = list_runs(str(tmp_path)).values()
    assert (ref.run, ref.worker) == ("a\\xffname", "h\\xfex")
    assert ref.run.encode("utf-8") and ref.worker.encode("utf-8")  # no lone surrogate
    assert ref.path == str(trace) and os.path.exists(ref.path)
    assert list(list_runs(str(tmp_path))) == ["a\\xffname"]


def test_links_between_two_run_folders_are_not_followed_round_and_round(tmp_path: Path) -> None:
    """Two folders linking to each other made 82 runs, 41 folders deep, each analysed: a
    folder is not entered again below itself. Reached by a path that is no loop, it is a
    run there too, as in the PyTorch Profiler tab."""
    touch(tmp_path / "loopA" / "a.pt.trace.json")
    touch(tmp_path / "loopB" / "b.pt.trace.json")
    (tmp_path / "loopA" / "toB").symlink_to(tmp_path / "loopB")
    (tmp_path / "loopB" / "toA").symlink_to(tmp_path / "loopA")
    assert list(list_runs(str(tmp_path))) == ["loopA", "loopA/toB", "loopB", "loopB/toA"]


def test_a_trace_beside_its_gzipped_copy_is_read_once_from_the_newer(tmp_path: Path) -> None:
    """``gzip -k`` leaves ``w.pt.trace.json`` beside ``w.pt.trace.json.gz``: both were read
    and every count of the worker's span doubled."""
    plain = touch(tmp_path / "run" / "w.123.pt.trace.json")
    packed = touch(tmp_path / "run" / "w.123.pt.trace.json.gz", gzip.compress(plain.read_bytes()))
    touch(tmp_path / "run" / "other.123.pt.trace.json")
    os.utime(plain, ns=(1_000_000_000, 1_000_000_000))
    paths = [ref.path for ref in find_traces(str(tmp_path))]
    assert paths == [str(tmp_path / "run" / "other.123.pt.trace.json"), str(packed)]
    os.utime(packed, ns=(500_000_000, 500_000_000))  # gunzip -k: the plain file is newer
    assert str(plain) in [ref.path for ref in find_traces(str(tmp_path))]
    assert str(packed) not in [ref.path for ref in find_traces(str(tmp_path))]


def test_a_gzipped_copy_that_is_a_link_to_nothing_leaves_the_readable_one(tmp_path: Path) -> None:
    """A git-annex or DVC logdir with one copy not fetched: the dangling .gz was kept and
    the readable trace beside it dropped (a review)."""
    plain = touch(tmp_path / "run" / "w.123.pt.trace.json")
    (tmp_path / "run" / "w.123.pt.trace.json.gz").symlink_to(tmp_path / "annex" / "missing")
    assert [ref.path for ref in find_traces(str(tmp_path))] == [str(plain)]


def test_a_shown_name_taken_by_a_folder_of_that_text_keeps_both_runs(tmp_path: Path) -> None:
    raw = os.fsdecode(os.fsencode(str(tmp_path)) + b"/a\xffb")
    touch(Path(raw) / "w.pt.trace.json")
    touch(tmp_path / "a\\xffb" / "w.pt.trace.json")
    assert sorted(list_runs(str(tmp_path))) == ["a\\xffb", "a\\xffb (2)"]


def test_a_trace_under_a_name_of_the_users_is_found_beside_the_runs(tmp_path: Path) -> None:
    """accelerate's ``ProfileKwargs(output_trace_dir=...)`` writes ``profile_0.json``: no
    tab lists it, and in a logdir with other runs nothing said so. A trace of any name is
    told by its first bytes (gzipped too, and the legacy profiler's list of events); the
    JSON a training run writes beside its traces is not one."""
    touch(tmp_path / "run" / "w.pt.trace.json")
    kineto = touch(tmp_path / "accel" / "profile_0.json", b'{\n  "schemaVersion": 1,\n')
    legacy = touch(tmp_path / "accel" / "legacy.json", b'[{"name": "aten::mm", "ph": "X"}]')
    zipped = touch(tmp_path / "deep" / "a" / "t.json.gz", gzip.compress(b'{"traceEvents": []}'))
    touch(tmp_path / "out" / "config.json", b'{"hidden_size": 64}')
    touch(tmp_path / "out" / "trainer_state.json", b'{"best_metric": null, "log_history": []}')
    memo: dict = {}
    found = unnamed_traces(str(tmp_path), limit=10, memo=memo)
    assert sorted(found) == sorted(map(str, (kineto, legacy, zipped)))
    assert len(memo) == 5  # each JSON file's first bytes read once, kept for the next poll
    assert unnamed_traces(str(tmp_path), limit=1) == [str(legacy)]  # the first, by name
    assert unnamed_traces(str(tmp_path / "run")) == []


def test_the_look_for_traces_under_other_names_neither_hangs_nor_loops_nor_names_npu_traces(
    tmp_path: Path,
) -> None:
    """A named pipe is never opened (it waits for a writer: in the plugin's poll thread); a
    link back up names a file once; torch_npu's trace_view.json, read as its worker's trace
    when its folder is given, is no trace under another name."""
    kineto = touch(tmp_path / "logs" / "accel" / "profile_0.json", b'{"schemaVersion": 1}')
    os.mkfifo(tmp_path / "logs" / "accel" / "pipe.json")
    (tmp_path / "logs" / "accel" / "up").symlink_to(tmp_path / "logs")
    assert unnamed_traces(str(tmp_path / "logs"), limit=10) == [str(kineto)]
    output = tmp_path / "npu" / "w_1_ascend_pt" / "ASCEND_PROFILER_OUTPUT"
    touch(output / "trace_view.json", b'{"traceEvents": []}')
    for given in (output, output.parent, output.parent.parent):
        assert unnamed_traces(str(given)) == []
