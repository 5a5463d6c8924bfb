"""The real GPU traces bundled with the package (``tb_syncfinder/demo/traces/``): four demo
runs recorded on an NVIDIA H100 at commit 88cb004 (size ``large``, GPU-bound there), which
``tb-syncfinder demo`` shows beside its CPU runs on any machine.

Everything here reads package data only: no GPU, no ``../shared`` folder.

The traces are fixed data: they name the lines of ``tb_syncfinder/demo/cnn.py`` and
``seg.py`` as they were when they were recorded. ``RECORDED_SYNC_LINES`` says which lines
those are; the first tests fail as soon as an edit of the workload files moves them (the
installed source must still hold each ``# sync:`` marker there, and each recorded Python
frame must still lie in its function), because the bundled findings would then point at the
wrong line.

Not asserted, on purpose (other issues change them): the kinds and advice of the sites. The
profiler's own ``cudaDeviceSynchronize`` when a profiling cycle stops is listed apart, out of
the findings (``tests/test_h100_demo_lines.py``). The boolean mask's gradient
(``seg.py:127``, ``# sync: mask_backward``) runs ``IndexBackward0`` on the autograd thread,
which has no Python frames: it is a backward site at its forward line ``seg.py:82``, run by
``loss.backward()`` at ``seg.py:127`` (issue 10).
"""

from __future__ import annotations

import ast
import gzip
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import msgspec
import pytest

pytest.importorskip("torch")  # the demo's runner imports its workloads

from tb_syncfinder import analyze  # noqa: E402
from tb_syncfinder.compare import compare, site_match_key
from tb_syncfinder.demo.runner import (
    BUNDLED_TRACES_DIR,
    DEMO_DIR,
    RUNS,
    add_bundled_gpu_runs,
    bundled_gpu_traces,
    bundled_versions,
)

REPO = Path(__file__).resolve().parents[1]
# The lines of the program's own syncs that the bundled H100 traces record (what the engine
# reported on them when they were bundled), with the ``# sync:`` marker each carried at
# commit 88cb004 (the same lines as at 518521f, where the earlier ``small`` traces were
# recorded). Written out rather than read from the source: the traces cannot change,
# the source can, and these lines must keep their markers.
RECORDED_SYNC_LINES = {
    "cnn_baseline": {("cnn.py", 95): "h2d", ("cnn.py", 96): "h2d", ("cnn.py", 104): "item"},
    "seg_baseline": {("seg.py", 76): "unique", ("seg.py", 77): "nonzero", ("seg.py", 82): "mask"},
}
# marker -> a word the sync's operator chain holds
OPERATOR_OF = {
    "h2d": "aten::copy_",
    "item": "aten::item",
    "unique": "aten::_unique2",
    "nonzero": "aten::nonzero",
    "mask": "aten::index",
}
WORKLOAD_FILES = ("cnn.py", "seg.py")
FRAME = re.compile(r"^tb_syncfinder/demo/(\w+\.py)\((\d+)\): (\w+)$")
MARKER = re.compile(r"#\s*sync:\s*(\w+)")


def marker_lines(path: Path) -> dict[int, str]:
    """line number -> marker word, for every ``# sync: <word>`` comment in ``path``."""
    found = {}
    for number, text in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        match = MARKER.search(text)
        if match:
            found[number] = match.group(1)
    return found


def all_marked_lines() -> set[tuple[str, int]]:
    return {(name, line) for name in WORKLOAD_FILES for line in marker_lines(DEMO_DIR / name)}


def chain(sync) -> str:
    return " ".join([sync.op or "", sync.trigger_op or "", *sync.op_chain])


def workload_syncs(report) -> dict[tuple[str, int], list]:
    """(workload file name, line) -> the report's forward syncs placed on that line (a
    backward pass's sync is placed on its forward line too, as a site of its own)."""
    by_line: dict[tuple[str, int], list] = {}
    for sync in report.syncs:
        if sync.source is None or sync.source.line is None or sync.source.backward:
            continue
        name = os.path.basename(sync.source.file)
        if name in WORKLOAD_FILES:
            by_line.setdefault((name, sync.source.line), []).append(sync)
    return by_line


@pytest.fixture(scope="module")
def reports(tmp_path_factory) -> dict:
    """Each bundled trace analysed as it ships, from a working directory that holds no
    source: its ``tb_syncfinder/demo/*.py`` frames resolve through the engine's built-in
    demo source root alone."""
    elsewhere = tmp_path_factory.mktemp("elsewhere")
    cwd = os.getcwd()
    os.chdir(elsewhere)
    try:
        return {run: analyze(str(path)) for run, path in bundled_gpu_traces().items()}
    finally:
        os.chdir(cwd)


@pytest.fixture(scope="module")
def demo_gpu_logdir(tmp_path_factory) -> Path:
    """The ``gpu_*`` runs as ``tb-syncfinder demo`` writes them into its logdir."""
    logdir = tmp_path_factory.mktemp("demo_gpu") / "logs"
    runs = add_bundled_gpu_runs(logdir)
    assert [r.name for r in runs] == [f"gpu_{run}" for run in RUNS]
    return logdir


def test_the_package_bundles_the_four_h100_runs_with_versions_and_provenance():
    assert set(bundled_gpu_traces()) == set(RUNS)
    versions = bundled_versions()
    assert versions["gpu"].startswith("NVIDIA H100")
    assert versions["torch"].startswith("2.") and versions["cuda"]
    provenance = (BUNDLED_TRACES_DIR / "README.md").read_text(encoding="utf-8")
    assert versions["commit"] == "88cb004" and versions["size"] == "large"
    assert "88cb004" in provenance and "bench/record_gpu_traces.py" in provenance
    # The recorded SHA-256 of each trace is the file's: the traces were not touched since.
    import hashlib

    for run, path in bundled_gpu_traces().items():
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        assert f"{digest}  {path.name}" in provenance, run
    times = json.loads((BUNDLED_TRACES_DIR / "unprofiled_step_times.json").read_text())
    assert set(times["runs"]) == set(RUNS)


@pytest.mark.parametrize("run", sorted(RECORDED_SYNC_LINES))
def test_recorded_sync_lines_still_hold_their_markers_in_the_installed_sources(run):
    for (name, line), word in RECORDED_SYNC_LINES[run].items():
        markers = marker_lines(DEMO_DIR / name)
        assert markers.get(line) == word, (
            f"{name}:{line} no longer holds '# sync: {word}' (it has {markers.get(line)!r}); "
            "the bundled GPU traces name this line: keep the line numbers of existing code in "
            "tb_syncfinder/demo/*.py (add code at the end) or re-record the traces"
        )


def _functions(path: Path) -> tuple[dict[str, list[tuple[int, int]]], set[int]]:
    """function name -> its (def line, last line) spans; and the lines where a call starts."""
    spans: dict[str, list[tuple[int, int]]] = {}
    calls: set[int] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            spans.setdefault(node.name, []).append((node.lineno, node.end_lineno or node.lineno))
        elif isinstance(node, ast.Call):
            calls.add(node.lineno)
    return spans, calls


def test_every_recorded_python_frame_of_the_demo_files_still_lies_in_its_function():
    # A frame is recorded as ``file(line): function``, with the line where the function is
    # defined, or the current line for frames already running when profiling started
    # (``runner.py(125): profile_run``). An edit above it breaks the frame shown in the
    # detail view and the engine's search for the call line.
    frames: set[tuple[str, int, str]] = set()
    for path in bundled_gpu_traces().values():
        for event in json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]:
            match = FRAME.match(event.get("name", ""))
            if event.get("cat") == "python_function" and match:
                frames.add((match.group(1), int(match.group(2)), match.group(3)))
    assert {name for name, _, _ in frames} == {"cnn.py", "seg.py", "runner.py"}
    assert len(frames) > 10
    parsed = {name: _functions(DEMO_DIR / name) for name, _, _ in frames}
    for name, line, func in sorted(frames):
        spans, calls = parsed[name]
        candidates = spans.get(func, [])
        # At its def line, or inside it on the line of the call it was making.
        assert any(
            first == line or (first < line <= end and line in calls) for first, end in candidates
        ), (
            f"{name}({line}): {func} recorded in the bundled traces; {func} is now at "
            f"{candidates} in {DEMO_DIR / name}"
        )


@pytest.mark.parametrize("run", sorted(RECORDED_SYNC_LINES))
def test_baseline_syncs_waited_on_the_gpu_at_their_exact_demo_lines(reports, run):
    report = reports[run]
    steps = bundled_versions()["steps"]
    assert report.summary.step_count == steps
    assert report.traces[0].device == "cuda" and report.traces[0].has_gpu_activity
    found = workload_syncs(report)
    for (name, line), word in RECORDED_SYNC_LINES[run].items():
        syncs = found.get((name, line), [])
        assert len(syncs) == steps, f"{run} {name}:{line} (# sync: {word}): {len(syncs)} syncs"
        for sync in syncs:
            assert not sync.latent and sync.host_wait_us > 0, (name, line, sync.host_wait_us)
            assert sync.source.line_exact, (name, line)
            assert Path(sync.source.resolved_path).resolve() == (DEMO_DIR / name).resolve()
            assert OPERATOR_OF[word] in chain(sync), (name, line, chain(sync))
    # Every sync an operator issued that the engine places exactly on a demo line is on a
    # marked line (the profiler's own cudaDeviceSynchronize has no operator).
    placed = {
        key for key, syncs in found.items() if any(s.op and s.source.line_exact for s in syncs)
    }
    assert placed <= all_marked_lines(), placed - all_marked_lines()
    sites = {(os.path.basename(s.file or ""), s.line): s for s in report.sites}
    for key in RECORDED_SYNC_LINES[run]:
        assert sites[key].host_wait_us > 0 and sites[key].line_exact, key


def test_the_mask_gradient_in_seg_baseline_waits_on_the_gpu_every_step(reports):
    # seg.py:127 (# sync: mask_backward): IndexBackward0 runs nonzero on the mask again, on
    # the autograd thread: placed at the mask's forward line, run by loss.backward().
    backward = [s for s in reports["seg_baseline"].syncs if "IndexBackward0" in chain(s)]
    assert len(backward) == bundled_versions()["steps"]
    assert all("aten::nonzero" in chain(s) and s.host_wait_us > 0 for s in backward)
    for sync in backward:
        source = sync.source
        assert (os.path.basename(source.file), source.line, source.backward) == ("seg.py", 82, True)
        assert (source.run_by.line, source.run_by.line_exact) == (127, True)
    assert marker_lines(DEMO_DIR / "seg.py").get(127) == "mask_backward"


@pytest.mark.parametrize("workload", ["cnn", "seg"])
def test_optimized_runs_have_none_of_the_baseline_sites(reports, workload):
    base, new = reports[f"{workload}_baseline"], reports[f"{workload}_optimized"]
    base_keys = {site_match_key(msgspec.to_builtins(s)) for s in base.sites}
    new_keys = {site_match_key(msgspec.to_builtins(s)) for s in new.sites}
    assert base_keys and not base_keys & new_keys, base_keys & new_keys
    name = f"{workload}.py"
    marked = set(marker_lines(DEMO_DIR / name))
    assert not any(
        os.path.basename(s.file or "") == name and s.line in marked for s in new.sites
    ), [(s.file, s.line) for s in new.sites]
    # No data-dependent shape, no readback and no blocking copy is left in the program.
    assert not any(
        any(OPERATOR_OF[w] in chain(s) for w in OPERATOR_OF) or "IndexBackward0" in chain(s)
        for s in new.syncs
    ), [chain(s) for s in new.syncs]


def _fixed_lines(result: dict, name: str) -> set[int]:
    return {
        line
        for row in result["sites"]
        if row["status"] == "fixed" and os.path.basename(row["file"] or "") == name
        for line in row["before"]["lines"]
    }


def _assert_compare_fixes_the_marked_sites(result: dict, workload: str) -> None:
    name = f"{workload}.py"
    recorded = {line for (_, line) in RECORDED_SYNC_LINES[f"{workload}_baseline"]}
    assert recorded <= _fixed_lines(result, name), result["sites"]
    marked = set(marker_lines(DEMO_DIR / name))
    for row in result["sites"]:
        if row["status"] != "fixed":
            # Whatever else the optimized run shows is not a marked sync of the program.
            assert not (os.path.basename(row["file"] or "") == name and row["line"] in marked), row
    assert result["note"] is None  # both runs are GPU runs: compared by cost
    assert result["new"]["syncs_per_step"] < result["base"]["syncs_per_step"]


@pytest.mark.parametrize("workload", ["cnn", "seg"])
def test_tb_syncfinder_compare_of_the_demo_gpu_runs_says_the_marked_syncs_are_fixed(
    demo_gpu_logdir, workload, capsys
):
    from tb_syncfinder.cli import main

    base = str(demo_gpu_logdir / f"gpu_{workload}_baseline")
    new = str(demo_gpu_logdir / f"gpu_{workload}_optimized")
    assert main(["compare", base, new, "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    _assert_compare_fixes_the_marked_sites(result, workload)
    # The table a user reads: a "fixed" row for each of them (sites of one function, operator
    # and kind are one row: cnn.py:95 and :96 both copy a batch with .to(device)).
    assert main(["compare", base, new, "--color", "never"]) == 0
    table = capsys.readouterr().out
    name = f"{workload}.py"
    rows = [
        r
        for r in result["sites"]
        if r["status"] == "fixed"
        and r["line"] in {line for (_, line) in RECORDED_SYNC_LINES[f"{workload}_baseline"]}
    ]
    assert rows
    for row in rows:
        # A row of several lines (cnn.py:95 and :96, one copy each) names every one.
        side = row["before"] or row["after"]
        lines = ",".join(str(line) for line in side.get("lines") or [row["line"]])
        assert re.search(rf"^fixed .*{re.escape(name)}:{lines} ", table, re.M), table


def test_the_plugin_compare_route_says_the_marked_syncs_are_fixed(demo_gpu_logdir, tmp_path):
    import argparse

    from tensorboard.backend.application import TensorBoardWSGI
    from tensorboard.plugins import base_plugin
    from werkzeug.test import Client

    from tb_syncfinder.plugin import SyncAdvisorPlugin
    from tb_syncfinder.plugin.settings import PluginSettings

    settings = PluginSettings(
        logdirs=[(None, str(demo_gpu_logdir))],
        source_roots=[str(tmp_path)],  # nothing there: the built-in demo root must do
        cache_dir=str(tmp_path / "cache"),
        reload_interval_s=3600,
        use_processes=False,
    )
    context = base_plugin.TBContext(logdir=str(demo_gpu_logdir), flags=argparse.Namespace())
    plugin = SyncAdvisorPlugin(context, settings, start=False)
    plugin.loader.poll()
    assert plugin.loader.wait_idle(120)
    client = Client(TensorBoardWSGI([plugin]))
    for workload in ("cnn", "seg"):
        response = client.get(
            "/data/plugin/sync_advisor/compare",
            query_string={"run": f"gpu_{workload}_optimized", "base": f"gpu_{workload}_baseline"},
        )
        assert response.status_code == 200
        body = json.loads(response.get_data())
        _assert_compare_fixes_the_marked_sites(body, workload)
        # The same answer as the library's compare of the same reports.
        direct = compare(
            analyze(str(demo_gpu_logdir / f"gpu_{workload}_baseline")).to_json(),
            analyze(str(demo_gpu_logdir / f"gpu_{workload}_optimized")).to_json(),
        )
        assert _fixed_lines(body, f"{workload}.py") == _fixed_lines(direct, f"{workload}.py")


# ----- once installed ----------------------------------------------------------------------
INSTALLED_CHECK = textwrap.dedent(
    """
    import json, os, sys, tempfile
    import tb_syncfinder
    from tb_syncfinder import analyze
    from tb_syncfinder.demo.runner import add_bundled_gpu_runs, bundled_gpu_traces

    out = {"package": tb_syncfinder.__file__, "bundled": {}, "demo": {}}
    for run, path in bundled_gpu_traces().items():
        out["bundled"][run] = str(path)
    def sites(path):
        report = analyze(str(path))
        return [
            {"file": s.source.file, "resolved": s.source.resolved_path, "line": s.source.line,
             "exact": s.source.line_exact, "wait": s.host_wait_us, "op": s.op}
            for s in report.syncs if s.source is not None
        ]
    for run in ("cnn_baseline", "seg_baseline"):
        out["bundled"][run + ":syncs"] = sites(bundled_gpu_traces()[run])
    with tempfile.TemporaryDirectory() as logdir:
        for demo_run in add_bundled_gpu_runs(logdir):
            if demo_run.name.endswith("_baseline"):
                out["demo"][demo_run.name] = sites(demo_run.path)
    print(json.dumps(out))
    """
)


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> tuple[Path, dict]:
    """This checkout installed (not editable) into a throwaway folder with pip, then the
    bundled traces analysed by that copy from a folder outside the checkout."""
    pytest.importorskip("setuptools")
    tmp = tmp_path_factory.mktemp("installed")
    source = tmp / "src"
    source.mkdir()
    for name in ("setup.py", "pyproject.toml", "README.md"):
        shutil.copy(REPO / name, source / name)
    shutil.copytree(
        REPO / "tb_syncfinder",
        source / "tb_syncfinder",
        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"),
    )
    target = tmp / "site"
    pip = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index",
         "--no-build-isolation", "--target", str(target), str(source)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert pip.returncode == 0, pip.stdout + pip.stderr
    user_dir = tmp / "user"
    user_dir.mkdir()
    env = dict(os.environ, PYTHONPATH=str(target))
    check = subprocess.run(
        [sys.executable, "-c", INSTALLED_CHECK],
        cwd=user_dir, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert check.returncode == 0, check.stdout + check.stderr
    return target, json.loads(check.stdout.splitlines()[-1])


def test_an_installed_package_ships_the_traces_and_resolves_their_lines_to_itself(installed):
    target, out = installed
    package = (target / "tb_syncfinder").resolve()
    assert Path(out["package"]).resolve().parent == package  # not this checkout
    assert set(RUNS) <= set(out["bundled"])
    for run in RUNS:
        assert Path(out["bundled"][run]).resolve().parent == package / "demo" / "traces"
    assert (package / "demo" / "traces" / "README.md").is_file()
    assert (package / "demo" / "traces" / "versions.json").is_file()
    # As shipped (frames "tb_syncfinder/demo/x.py", the built-in demo root) and as the demo
    # copies them (frames rewritten to the installation), the recorded lines are exact.
    for run, lines in RECORDED_SYNC_LINES.items():
        for syncs in (out["bundled"][f"{run}:syncs"], out["demo"][f"gpu_{run}"]):
            exact = {
                (os.path.basename(s["file"]), s["line"]): s
                for s in syncs
                if s["op"] and s["exact"] and os.path.basename(s["file"]) in WORKLOAD_FILES
            }
            assert set(lines) <= set(exact) <= all_marked_lines(), (run, sorted(exact))
            for (name, _line), sync in exact.items():
                assert Path(sync["resolved"]).resolve() == package / "demo" / name
                assert sync["wait"] > 0


def test_the_readmes_gpu_example_is_what_the_report_prints(tmp_path, monkeypatch, capsys):
    """README shows `tb-syncfinder report syncfinder-demo-logs/gpu_seg_baseline` word for
    word; a newcomer diffing it against their terminal found a line it had lost."""
    from tb_syncfinder.cli import main

    command = "tb-syncfinder report syncfinder-demo-logs/gpu_seg_baseline"
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    shown = readme[readme.index(f"$ {command}\n") + len(command) + 3 :]
    shown = shown[: shown.index("```")]
    run = tmp_path / "syncfinder-demo-logs" / "gpu_seg_baseline"
    run.mkdir(parents=True)
    trace = BUNDLED_TRACES_DIR / "seg_baseline.pt.trace.json.gz"
    (run / trace.name).write_bytes(trace.read_bytes())
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COLUMNS", "100")
    monkeypatch.delenv("NO_COLOR", raising=False)
    main(["report", "syncfinder-demo-logs/gpu_seg_baseline"])
    assert capsys.readouterr().out == shown
