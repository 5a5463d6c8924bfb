"""`tb-syncfinder demo`: the four runs, their latent findings at the marked lines, and
TensorBoard serving them.

The expected lines are not hard-coded: each workload line that syncs on a GPU carries a
``# sync: <what>`` comment, and the tests find the lines by scanning the source.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")  # the demo's workloads run on it

from tb_syncfinder.demo import cli as demo_cli  # noqa: E402
from tb_syncfinder.demo import cnn, seg  # noqa: E402
from tb_syncfinder.demo.runner import (  # noqa: E402
    DEMO_DIR,
    RUNS,
    DemoError,
    DemoRun,
    add_bundled_gpu_runs,
    bundled_gpu_traces,
    resolve_device,
)

TINY_STEPS = 2
REPO = Path(__file__).resolve().parents[1]
# What the ``tb-syncfinder`` console script runs.
CLI = "import sys; from tb_syncfinder.cli import main; sys.exit(main())"
# The marker word -> (finding kind, a word the operator chain must contain).
EXPECTED_ON_CPU = {
    "item": ("scalar_readback", "item"),
    "nonzero": ("dynamic_shape", "nonzero"),
    "unique": ("dynamic_shape", "unique"),
    "mask": ("dynamic_shape", "index"),
    # The gradient of a boolean-mask index runs nonzero on the mask again in backward.
    "mask_backward": ("dynamic_shape", "IndexBackward"),
}


def marker_lines(path: Path) -> dict[int, str]:
    """line number -> marker word, for every ``# sync: <word>`` comment in ``path``."""
    found = {}
    for number, text in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        match = re.search(r"#\s*sync:\s*(\w+)", text)
        if match:
            found[number] = match.group(1)
    return found


def demo_findings(report) -> dict[tuple[str, int], list]:
    """(workload file name, line) -> latent findings whose source is a demo workload file.
    A sync of a backward pass counts at the line that ran it (``loss.backward()``, where the
    marker is, as torch's own detector names it); its source line is the forward op's."""
    by_line: dict[tuple[str, int], list] = {}
    for sync in report.latent:
        source = sync.source
        if source is not None and source.backward and source.run_by is not None:
            source = source.run_by
        if source is None or source.line is None:
            continue
        name = os.path.basename(source.file)
        if Path(source.file).parent.name == "demo" and name in ("cnn.py", "seg.py"):
            by_line.setdefault((name, source.line), []).append(sync)
    return by_line


@pytest.fixture(scope="module")
def demo_logdir(tmp_path_factory) -> tuple[Path, str, int]:
    """The demo as a user runs it (the console script, in its own process, stdout and stderr
    together as a terminal shows them), on the CPU with tiny sizes and no TensorBoard."""
    user_dir = tmp_path_factory.mktemp("demo")
    logdir = user_dir / "logs"
    command = [
        sys.executable, "-c", CLI, "demo", "--logdir", str(logdir), "--device", "cpu",
        "--size", "tiny", "--steps", str(TINY_STEPS), "--no-tensorboard",
    ]  # fmt: skip
    env = dict(os.environ, PYTHONPATH=str(REPO))  # this checkout, not the installed one
    done = subprocess.run(
        command, cwd=user_dir, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True, timeout=600,
    )  # fmt: skip
    return logdir, done.stdout, done.returncode


@pytest.fixture(scope="module")
def reports(demo_logdir):
    from tb_syncfinder import analyze

    logdir = demo_logdir[0]
    return {run: analyze(str(logdir / run)) for run in RUNS}


def test_demo_writes_the_four_runs_with_a_trace_each(demo_logdir):
    logdir, output, status = demo_logdir
    assert status == 0
    for run in RUNS:
        traces = list((logdir / run).glob("*.pt.trace.json.gz"))
        assert len(traces) == 1, f"{run}: {traces}"
        events = json.loads(gzip.decompress(traces[0].read_bytes()))["traceEvents"]
        steps = {e["name"] for e in events if e.get("name", "").startswith("ProfilerStep#")}
        assert len(steps) == TINY_STEPS, f"{run}: {sorted(steps)}"


def test_demo_prints_a_progress_line_per_run_and_report_hints(demo_logdir):
    logdir, output, status = demo_logdir
    assert status == 0, output
    for index, run in enumerate(RUNS, start=1):
        assert re.search(rf"\[{index}/4\] {run}\s+{TINY_STEPS} steps on cpu", output), output
        assert f"tb-syncfinder report {logdir / run}" in output
    assert "latent" in output
    # The real GPU runs bundled with the package are added beside the CPU runs, once.
    assert output.count("real GPU runs recorded on NVIDIA H100") == 1, output
    for run in RUNS:
        assert f"tb-syncfinder report {logdir / ('gpu_' + run)}" in output
    for workload in ("cnn", "seg"):
        base, new = logdir / f"gpu_{workload}_baseline", logdir / f"gpu_{workload}_optimized"
        assert f"tb-syncfinder compare {base} {new}" in output


def test_demo_summary_shows_the_bundled_gpu_baselines_waiting_at_their_lines(demo_logdir):
    output = demo_logdir[1]
    summary = output.split("What the Sync Advisor finds:", 1)[1].split("Reports on", 1)[0]
    gpu_part = summary.split("  gpu_cnn_baseline", 1)[1]
    for run in ("gpu_cnn_baseline", "gpu_seg_baseline"):
        found = re.search(rf"^\s+{run}\s+\d+ syncs in \d+ sites, host wait (\d+\.?\d*) ms, "
                          r"GPU idle after them [\d.]+ (?:us|ms), over \d+ steps$",
                          summary, re.M)  # fmt: skip
        assert found and float(found.group(1)) > 0, (run, summary)
    for word, name in (("item", "cnn.py"), ("nonzero", "seg.py"), ("mask", "seg.py")):
        line = next(n for n, w in marker_lines(DEMO_DIR / name).items() if w == word)
        # e.g. "dynamic_shape aten::nonzero at seg.py:77 x5, host wait 71 us in all, saves ~2 us
        # a step": the figure the sites are listed by is said, and which figure is per step.
        found = re.search(
            rf" at {name}:{line} x\d+, host wait (\d+\.?\d*) (?:us|ms) in all, "
            r"saves ~[\d.]+ (?:us|ms) a step$",
            gpu_part,
            re.M,
        )
        assert found and float(found.group(1)) > 0, (word, summary)
    # An explicit synchronize has no operator: the line names the API, never "?".
    assert " ? at " not in summary


def test_demo_output_holds_none_of_the_profilers_own_stderr_lines(demo_logdir):
    # torch writes "USDT: ... profiler_start/stop" and a CPUAllocator notice to fd 2 around
    # every profiled run; the demo keeps them out of what the user reads.
    output = demo_logdir[1]
    assert output.startswith("Profiling the Sync Advisor demo into"), output[:500]
    assert not re.search(r"profiler_(start|stop)|CPUAllocator\.cpp|Memory block of unknown",
                         output), output  # fmt: skip


def test_quiet_profiler_output_drops_only_the_profilers_noise(capfd):
    import warnings

    from tb_syncfinder.demo.runner import QuietProfilerOutput

    noise = (
        "USDT:2026-11-23 07:53:13 12931:12931 SyncActivityProfilerHandler.cpp:52] "
        "profiler_start\n[W1123 07:53:13.211513094 CPUAllocator.cpp:245] Memory block of "
        "unknown size was allocated before the profiling started, profiler results will not "
        "include the deallocation event\n"
    )
    with pytest.raises(RuntimeError, match="in the run"):
        with QuietProfilerOutput():
            os.write(2, noise.encode())
            os.write(2, b"a real error line\n")
            warnings.warn("Warning: Profiler clears events at the end of each cycle.", stacklevel=1)
            raise RuntimeError("in the run")
    captured = capfd.readouterr()
    assert captured.err == "a real error line\n"
    os.write(2, b"after\n")  # fd 2 is back where it was
    assert capfd.readouterr().err == "after\n"


def test_demo_without_bundled_traces_says_so_once_without_naming_unshipped_files(
    tmp_path, monkeypatch, capsys
):
    from tb_syncfinder.demo import runner

    (tmp_path / "empty").mkdir()
    monkeypatch.setattr(
        demo_cli, "add_bundled_gpu_runs",
        lambda logdir: runner.add_bundled_gpu_runs(logdir, directory=tmp_path / "empty"),
    )  # fmt: skip
    monkeypatch.setattr(
        demo_cli, "run_demo",
        lambda logdir, **kw: [DemoRun("seg_baseline", str(tmp_path / "no_run"), "cpu")],
    )  # fmt: skip
    parser = argparse.ArgumentParser()
    demo_cli.add_arguments(parser)
    args = parser.parse_args(["--logdir", str(tmp_path / "logs"), "--no-tensorboard"])
    assert demo_cli.run(args) == 0
    output = capsys.readouterr().out
    assert output.count("No bundled GPU traces") == 1, output
    assert "bench/" not in output  # bench/ is in the repository, not in the package
    assert "gpu_" not in output


@pytest.mark.parametrize("size, warned", [("large", True), ("small", False)])
def test_the_large_size_on_a_cpu_is_announced_as_slow_before_it_starts(
    tmp_path, monkeypatch, capsys, size, warned
):
    monkeypatch.setattr(demo_cli, "run_demo", lambda logdir, **kw: [])
    parser = argparse.ArgumentParser()
    demo_cli.add_arguments(parser)
    args = parser.parse_args(
        ["--logdir", str(tmp_path), "--device", "cpu", "--size", size, "--no-tensorboard"]
    )
    assert demo_cli.run(args) == 0
    assert ("sized for a data-centre GPU" in capsys.readouterr().out) == warned


def test_traces_carry_python_stacks_modules_and_loss_labels(demo_logdir):
    logdir = demo_logdir[0]
    trace = next((logdir / "seg_baseline").glob("*.pt.trace.json.gz"))
    events = json.loads(gzip.decompress(trace.read_bytes()))["traceEvents"]
    names = {e.get("name", "") for e in events}
    assert any(re.search(r"demo/seg\.py\(\d+\): baseline_loss", n) for n in names)
    assert any(n.startswith("nn.Module: SmallSegNet") for n in names)
    assert "loss" in names  # record_function label around the loss


def test_cnn_baseline_item_is_a_latent_scalar_readback_at_the_marked_line(reports):
    expected = {
        line for line, word in marker_lines(DEMO_DIR / "cnn.py").items() if word in EXPECTED_ON_CPU
    }
    found = demo_findings(reports["cnn_baseline"])
    assert {line for (name, line) in found if name == "cnn.py"} == expected
    for line in expected:
        syncs = found[("cnn.py", line)]
        assert len(syncs) == TINY_STEPS  # once per profiled step
        for sync in syncs:
            assert sync.kind == "scalar_readback"
            assert sync.latent and sync.host_wait_us == 0
            assert sync.source.line_exact
            assert any("item" in op for op in [sync.op or "", *sync.op_chain])


def test_seg_baseline_has_nonzero_unique_and_mask_both_ways_latent_at_the_marked_lines(reports):
    markers = {
        line: word
        for line, word in marker_lines(DEMO_DIR / "seg.py").items()
        if word in EXPECTED_ON_CPU
    }
    assert sorted(markers.values()) == ["mask", "mask_backward", "nonzero", "unique"]
    found = demo_findings(reports["seg_baseline"])
    assert {line for (name, line) in found if name == "seg.py"} == set(markers)
    for line, word in markers.items():
        kind, op_word = EXPECTED_ON_CPU[word]
        syncs = found[("seg.py", line)]
        assert len(syncs) == TINY_STEPS, f"{word} at seg.py:{line}"
        for sync in syncs:
            assert sync.kind == kind, f"{word} at seg.py:{line}: {sync.kind}"
            assert sync.source.line_exact
            chain = " ".join([sync.op or "", sync.trigger_op or "", *sync.op_chain])
            assert op_word in chain, f"{word} at seg.py:{line}: {chain}"
            if word == "mask_backward":
                # Attributed to the forward line that built the mask index, run by line 127.
                forward = next(n for n, w in markers.items() if w == "mask")
                assert (sync.source.line, sync.source.backward) == (forward, True)
                assert sync.source.run_by.line_exact and sync.forward_op == "aten::index"


def test_baseline_sites_point_at_the_marked_lines(reports):
    sites = [s for run in ("cnn_baseline", "seg_baseline") for s in reports[run].latent_sites]
    lines = {(os.path.basename(s.file), s.line) for s in sites if s.file}
    lines |= {(os.path.basename(s.run_by.file), s.run_by.line) for s in sites if s.run_by}
    for name in ("cnn.py", "seg.py"):
        for line, word in marker_lines(DEMO_DIR / name).items():
            if word in EXPECTED_ON_CPU:
                assert (name, line) in lines


def test_demo_lines_resolve_exactly_from_any_working_directory(demo_logdir, tmp_path, monkeypatch):
    # An installed package's frames are recorded relative to site-packages
    # ("tb_syncfinder/demo/seg.py"): the engine's built-in demo source root finds them from
    # anywhere, with no --source-root / --path-map.
    from tb_syncfinder import analyze

    monkeypatch.chdir(tmp_path)
    report = analyze(str(demo_logdir[0] / "seg_baseline"))
    markers = {
        line for line, word in marker_lines(DEMO_DIR / "seg.py").items() if word in EXPECTED_ON_CPU
    }
    found = demo_findings(report)
    assert {line for (_, line) in found} == markers
    for syncs in found.values():
        for sync in syncs:
            assert sync.source.line_exact
            assert Path(sync.source.resolved_path).resolve() == (DEMO_DIR / "seg.py").resolve()


@pytest.mark.parametrize("run", ["cnn_optimized", "seg_optimized"])
def test_optimized_runs_have_no_latent_sync_in_the_workloads(reports, run):
    report = reports[run]
    assert demo_findings(report) == {}
    assert report.summary.sync_count == 0
    assert not any(s.kind in ("scalar_readback", "dynamic_shape") for s in report.latent)


def test_optimized_seg_loss_computes_the_same_value_as_the_baseline():
    torch.manual_seed(1)
    size = seg.SIZES["tiny"]
    images, labels = seg.make_batch(size, 3, torch.device("cpu"))
    logits = seg.SmallSegNet(size.channels)(images)
    criterion = torch.nn.CrossEntropyLoss(ignore_index=seg.BACKGROUND)
    baseline = seg.baseline_loss(logits, labels)
    optimized = seg.optimized_loss(logits, labels, criterion)
    assert (labels == seg.BACKGROUND).any() and (labels != seg.BACKGROUND).any()
    torch.testing.assert_close(optimized, baseline.to(optimized.dtype), rtol=1e-5, atol=1e-6)


def test_optimized_cnn_training_gives_the_same_mean_loss_as_the_baseline():
    device = torch.device("cpu")
    size = cnn.SIZES["tiny"]
    baseline = cnn.train_baseline(device, size, 3, lambda: None)
    optimized = cnn.train_optimized(device, size, 3, lambda: None)
    assert optimized == pytest.approx(baseline, rel=1e-5)


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_device_cuda_without_a_gpu_is_a_clear_error(tmp_path, capsys):
    with pytest.raises(DemoError, match="no CUDA device"):
        resolve_device("cuda")
    parser = argparse.ArgumentParser()
    demo_cli.add_arguments(parser)
    args = parser.parse_args(["--logdir", str(tmp_path), "--device", "cuda", "--no-tensorboard"])
    assert demo_cli.run(args) == 2
    assert "no CUDA device" in capsys.readouterr().err
    assert not any(tmp_path.iterdir())


def test_bundled_gpu_traces_are_copied_as_they_are_with_their_portable_paths(tmp_path):
    bundled = tmp_path / "bundled"
    bundled.mkdir()
    assert bundled_gpu_traces(tmp_path / "missing") == {}
    event = {
        "ph": "X",
        "cat": "python_function",
        "name": "tb_syncfinder/demo/seg.py(71): f",
        "ts": 1,
        "dur": 2,
        "pid": 1,
        "tid": 1,
    }
    other = dict(event, name="/opt/x/site-packages/not_tb_syncfinder/demo/seg.py(1): g")
    trace = {"traceEvents": [event, other]}
    (bundled / "seg_baseline.pt.trace.json.gz").write_bytes(
        gzip.compress(json.dumps(trace).encode())
    )
    (bundled / "versions.json").write_text(json.dumps({"worker": "h100", "gpu": "H100"}))
    runs = add_bundled_gpu_runs(tmp_path / "logs", directory=bundled)
    assert [r.name for r in runs] == ["gpu_seg_baseline"]
    copied = tmp_path / "logs" / "gpu_seg_baseline" / "h100.pt.trace.json.gz"
    # Byte for byte: the demo's source pack resolves tb_syncfinder/demo/seg.py wherever the
    # package is installed (a copy naming this installation's path broke on a reinstall).
    assert copied.read_bytes() == (bundled / "seg_baseline.pt.trace.json.gz").read_bytes()


def test_tensorboard_serves_the_demo_runs_in_the_sync_advisor(demo_logdir):
    from tb_syncfinder.demo.serve import PLUGIN_NAME, start_tensorboard

    # Started as `tb-syncfinder demo` starts it: no --sync_advisor_* flags.
    from tests.e2e.helpers import checkout_env

    board = start_tensorboard(demo_logdir[0], env=checkout_env())
    try:
        assert board.process.poll() is None
        assert board.sync_advisor_url == f"http://localhost:{board.port}/#sync_advisor"
        assert PLUGIN_NAME in board.plugins()
        url = f"http://localhost:{board.port}/data/plugin/{PLUGIN_NAME}/runs"
        deadline = time.monotonic() + 120
        names: set[str] = set()
        while time.monotonic() < deadline:
            with urllib.request.urlopen(url, timeout=10) as response:
                listing = json.loads(response.read())
            names = {run["name"] for run in listing["runs"]}
            if names >= set(RUNS):
                break
            time.sleep(0.5)
        assert names >= set(RUNS)
        # The source view shows the workload line, named as torch records installed files.
        nonzero_line = next(
            n for n, w in marker_lines(DEMO_DIR / "seg.py").items() if w == "nonzero"
        )
        query = urllib.parse.urlencode(
            {"file": "tb_syncfinder/demo/seg.py", "line": nonzero_line, "context": 0}
        )
        source_url = f"http://localhost:{board.port}/data/plugin/{PLUGIN_NAME}/source?{query}"
        with urllib.request.urlopen(source_url, timeout=10) as response:
            source = json.loads(response.read())
        assert source["line"] == nonzero_line
        assert any("torch.nonzero" in text for text in source["lines"])
    finally:
        board.stop()
    assert board.process.poll() is not None


def _bench_module(name: str):
    import importlib.util

    path = Path(__file__).resolve().parents[1] / "bench" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"bench_{name}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while being built
    spec.loader.exec_module(module)
    return module


def test_recorded_frame_paths_are_stored_relative_to_the_package():
    record = _bench_module("record_gpu_traces")
    recorded = json.dumps({"name": f"{DEMO_DIR / 'cnn.py'}(85): baseline_step"})
    portable = record.portable_paths(recorded)
    assert json.loads(portable)["name"] == "tb_syncfinder/demo/cnn.py(85): baseline_step"


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_record_gpu_traces_without_cuda_exits_2_and_says_why(tmp_path, capsys):
    record = _bench_module("record_gpu_traces")
    assert record.main(["--out", str(tmp_path / "traces")]) == 2
    assert "no CUDA device" in capsys.readouterr().err
    assert not (tmp_path / "traces").exists()


def test_unprofiled_timing_interleaves_the_runs_and_takes_each_runs_median():
    record = _bench_module("record_gpu_traces")
    calls = []
    fake = {"cnn_baseline": [9.0, 5.0, 7.0], "cnn_optimized": [4.0, 6.0, 3.0]}

    def timer(run, size, device, warmup, steps):
        calls.append((run, size, warmup, steps))
        return fake[run][sum(1 for c in calls if c[0] == run) - 1]

    times = record.time_unprofiled(
        ("cnn_baseline", "cnn_optimized"), "large", torch.device("cpu"),
        warmup=10, steps=50, rounds=3, timer=timer,
    )  # fmt: skip
    assert [c[0] for c in calls] == ["cnn_baseline", "cnn_optimized"] * 3  # interleaved
    assert {c[1:] for c in calls} == {("large", 10, 50)}
    assert times["runs"]["cnn_baseline"] == {"median_ms": 7.0, "rounds_ms": [9.0, 5.0, 7.0]}
    assert times["runs"]["cnn_optimized"]["median_ms"] == 4.0
    assert (times["steps_timed"], times["warmup_steps"], times["rounds"]) == (50, 10, 3)
    assert record.saving_lines(times) == [
        "cnn: baseline 7.00 ms, optimized 4.00 ms per step unprofiled (saving +42.9%)"
    ]


def test_time_run_counts_only_the_steps_after_the_warm_up(monkeypatch):
    record = _bench_module("record_gpu_traces")

    def fake_train(device, size, total_steps, on_step):
        for step in range(total_steps):
            time.sleep(0.2 if step < 2 else 0.01)  # slow warm-up steps, fast timed ones
            on_step()

    monkeypatch.setattr(record, "workload", lambda run, size: (fake_train, None))
    per_step_ms = record.time_run("seg_baseline", "tiny", torch.device("cpu"), warmup=2, steps=3)
    assert 9 <= per_step_ms < 100, per_step_ms
    # And a real demo workload runs through it (CPU, tiny).
    assert record.time_run("cnn_optimized", "tiny", torch.device("cpu"), 1, 1) > 0


def _training_flops(workload: str, size) -> int:
    """Floating-point operations of one forward and backward pass of the workload's model."""
    from torch.utils.flop_counter import FlopCounterMode

    network = cnn.SmallCnn if workload == "cnn" else seg.SmallSegNet
    with torch.device("meta"):  # shapes only: nothing is computed
        model = network(size.channels)
        images = torch.randn(size.batch_size, 3, size.image_size, size.image_size)
    with FlopCounterMode(display=False) as counter:
        model(images).sum().backward()
    return counter.get_total_flops()


def test_the_gpu_record_size_gives_the_gpu_far_more_work_per_step_than_small():
    # At "small" the runs are CPU-bound on an H100 (4.30 vs 4.43 ms per step unprofiled): the
    # size bench/record_gpu_traces.py records at must multiply the GPU's arithmetic while the
    # host's work per step stays that of "small" (the cnn's batches are made on the host).
    from tb_syncfinder.demo.runner import DEFAULT_STEPS, GPU_RECORD_SIZE

    assert GPU_RECORD_SIZE == "large" and GPU_RECORD_SIZE in DEFAULT_STEPS
    for module, name in ((cnn, "cnn"), (seg, "seg")):
        small, large = module.SIZES["small"], module.SIZES[GPU_RECORD_SIZE]
        ratio = _training_flops(name, large) / _training_flops(name, small)
        assert ratio > 1000, (name, ratio)
    small, large = cnn.SIZES["small"], cnn.SIZES[GPU_RECORD_SIZE]
    assert (large.batch_size, large.image_size) == (small.batch_size, small.image_size)
    record = _bench_module("record_gpu_traces")
    assert record.GPU_RECORD_SIZE == GPU_RECORD_SIZE


def test_sync_debug_check_keeps_only_warnings_of_the_profiled_steps(monkeypatch):
    # The warn-mode half needs CUDA; its bookkeeping does not: a fake workload warns once
    # per step, and only the profiled (active) steps may count.
    validate = _bench_module("validate_sync_debug")
    modes = []
    monkeypatch.setattr(torch.cuda, "set_sync_debug_mode", modes.append)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)

    def fake_train(device, size, total_steps, on_step):
        import warnings

        warnings.warn("before the first step: set-up", stacklevel=1)
        for step in range(total_steps):
            warnings.warn(f"called a synchronizing CUDA operation in step {step}", stacklevel=1)
            on_step()

    monkeypatch.setattr(validate, "workload", lambda run, size: (fake_train, None))
    check = validate.RunCheck("seg_baseline", "cuda")
    validate.run_under_sync_debug(check, "tiny", steps=3)
    assert modes == ["warn", 0]
    first = validate.WAIT_STEPS + validate.WARMUP_STEPS
    assert [w.rsplit(" ", 1)[-1] for w in check.warned_elsewhere] == [
        str(step) for step in range(first, first + 3)
    ]
    assert check.warn_ran and not check.warned


def test_a_logdir_that_cannot_be_written_is_a_clear_error(tmp_path, capsys):
    not_a_folder = tmp_path / "file"
    not_a_folder.write_text("x")
    parser = argparse.ArgumentParser()
    demo_cli.add_arguments(parser)
    args = parser.parse_args(
        ["--logdir", str(not_a_folder), "--device", "cpu", "--size", "tiny", "--no-tensorboard"]
    )
    assert demo_cli.run(args) == 2
    error = capsys.readouterr().err
    assert "cannot write the runs into" in error and str(not_a_folder) in error


def test_a_port_left_in_time_wait_by_a_stopped_server_counts_as_free():
    from tb_syncfinder.demo.serve import port_is_free

    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("localhost", 0))
    server.listen(1)
    port = server.getsockname()[1]
    client = socket.create_connection(("localhost", port))
    accepted, _ = server.accept()
    assert not port_is_free(port)  # listening: taken
    # The server closes first, as TensorBoard does on Ctrl-C: its side waits in TIME_WAIT.
    accepted.close()
    server.close()
    client.recv(1)
    client.close()
    assert port_is_free(port)


def test_a_port_given_and_taken_is_said_so_first_with_what_to_do(tmp_path, capsys):
    """``demo --port N`` on a taken port printed the last 2,000 characters of TensorBoard's
    log: the plugins' worker processes stopping, with the reason cut off above them."""
    from tb_syncfinder.demo import cli as demo_cli
    from tb_syncfinder.demo.serve import exit_reason

    bind = (
        "E1127 07:30:01 program.py:720] TensorBoard could not bind to port 6107, it was "
        "already in use"
    )
    noise = "Traceback (most recent call last):\n  File ...\nFileNotFoundError: SemLock\n" * 60
    assert exit_reason(f"starting\n{bind}\n{noise}") == bind
    assert exit_reason("nothing said\n" + noise).endswith("SemLock")

    taken = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    taken.bind(("localhost", 0))
    taken.listen(1)
    port = taken.getsockname()[1]
    try:
        assert demo_cli._serve(tmp_path, port, bind_all=False) == 2
    finally:
        taken.close()
    err = capsys.readouterr().err
    assert f"could not bind to port {port}" in err and "Traceback" not in err
    assert f"port {port} is taken: give another with --port" in err


def test_a_port_given_and_taken_is_refused_before_any_profiling(tmp_path, capsys):
    """``demo --port N`` with N taken profiled every run (a minute on 2 cores) before
    TensorBoard failed to bind it: now it is refused first, nothing written."""
    from tb_syncfinder.demo import cli as demo_cli

    taken = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    taken.bind(("localhost", 0))
    taken.listen(1)
    port = taken.getsockname()[1]
    logdir = tmp_path / "logs"
    try:
        parser = argparse.ArgumentParser()
        demo_cli.add_arguments(parser)
        args = parser.parse_args(["--logdir", str(logdir), "--port", str(port)])
        assert demo_cli.run(args) == 2
    finally:
        taken.close()
    captured = capsys.readouterr()
    assert f"port {port} is taken: give another with --port" in captured.err
    assert "Profiling" not in captured.out and not logdir.exists()
