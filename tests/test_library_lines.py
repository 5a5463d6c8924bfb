"""A library function that reads several tensors, each at its own line (Stable-Baselines3's
``PPO.train`` reads four losses with ``.item()`` at ppo.py:230, 231, 245, 254 and 292): one
user call (``model.learn()``) makes them one site, which named only the first line, exact,
for all of them (65 of the site's 85 reads were elsewhere)."""

from __future__ import annotations

import csv
import io
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tb_syncfinder import analyze
from tb_syncfinder.outputs.csv import to_csv
from tb_syncfinder.outputs.text import render_report

torch = pytest.importorskip("torch")


_READS = """\
def train(model, x):
    loss = model(x).sum()
    a = loss.item()
    b = (loss * 2).item()
    for _ in range(2):
        c = (loss * 3).item()
    return a + b + c
"""


def _record(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    library_code: str = _READS,
    package: str = "readlib",
) -> Path:
    packages = tmp_path / "site-packages"
    (packages / package).mkdir(parents=True)
    (packages / package / "__init__.py").write_text("")
    (packages / package / "algo.py").write_text(library_code)
    (tmp_path / "learn.py").write_text(
        textwrap.dedent(
            f"""\
            import torch
            from {package} import algo


            def run(out):
                model = torch.nn.Linear(4, 2)
                x = torch.randn(8, 4)
                with torch.profiler.profile(
                    activities=[torch.profiler.ProfilerActivity.CPU],
                    with_stack=True,
                    schedule=torch.profiler.schedule(wait=1, warmup=1, active=3),
                    on_trace_ready=lambda p: p.export_chrome_trace(out),
                ) as prof:
                    for step in range(5):
                        algo.train(model, x)
                        prof.step()
            """
        )
    )
    out = tmp_path / "host_1.1700000000000.pt.trace.json"
    # In a process of its own: torch shortens a frame's path by the ``sys.path`` its
    # profiler first saw in a process (an earlier test's), as a user's run does.
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(packages)])}
    subprocess.run(
        [sys.executable, "-c", f"import learn; learn.run({str(out)!r})"],
        env=env,
        cwd=tmp_path,
        check=True,
        capture_output=True,
    )
    # Where the report runs, ``readlib`` is installed: a library.
    monkeypatch.syspath_prepend(str(packages))
    return out


def _run_program(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    package: str,
    modules: dict[str, str],
    program: str,
) -> Path:
    """A known library ``package`` (``modules``: file name -> code) installed beside a
    program of the user's (``main.py``, run with the trace's path as its argument) in a
    process of its own; the library importable where the report runs. The trace's path."""
    packages = tmp_path / "site-packages"
    (packages / package).mkdir(parents=True)
    (packages / package / "__init__.py").write_text("")
    for name, code in modules.items():
        (packages / package / name).write_text(code)
    (tmp_path / "main.py").write_text(program)
    out = tmp_path / "host_1.1700000000000.pt.trace.json"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(packages)])}
    subprocess.run(
        [sys.executable, "main.py", str(out)],
        env=env,
        cwd=tmp_path,
        check=True,
        capture_output=True,
    )
    monkeypatch.syspath_prepend(str(packages))
    return out


def _profiled_loop(imports: str, setup: list[str], body: list[str]) -> str:
    """A user's ``main.py``: ``setup`` lines, then five passes of ``body`` lines under a
    profiler started and stopped around the loop (cycles of wait 1, warm-up 1, active 3)."""
    lines = [
        "import sys",
        "",
        "import torch",
        imports,
        "",
        "",
        "def main(out):",
        "    model = torch.nn.Linear(4, 4)",
        *("    " + line for line in setup),
        "    prof = torch.profiler.profile(",
        "        activities=[torch.profiler.ProfilerActivity.CPU],",
        "        with_stack=True,",
        "        schedule=torch.profiler.schedule(wait=1, warmup=1, active=3),",
        "        on_trace_ready=lambda p: p.export_chrome_trace(out),",
        "    )",
        "    prof.start()",
        "    for step in range(5):",
        *("        " + line for line in body),
        "        prof.step()",
        "    prof.stop()",
        "",
        "",
        "main(sys.argv[1])",
    ]
    return "\n".join(lines) + "\n"


def _line_of(program: str, text: str) -> int:
    """The number of the first line of ``program`` holding ``text``."""
    return next(n for n, line in enumerate(program.splitlines(), 1) if text in line)


def test_a_librarys_reads_at_several_lines_are_each_named_with_their_count(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = _record(tmp_path, monkeypatch)
    report = analyze(str(out), source_roots=[str(tmp_path)])
    [site] = report.latent_sites
    assert (site.file.rsplit("/", 1)[-1], site.line, site.count) == ("learn.py", 15, 12)
    assert site.library is not None and site.library.func == "train"
    assert [(entry.line, entry.count) for entry in site.library_lines] == [(3, 3), (4, 3), (6, 6)]
    text = render_report(report.to_json(), width=200)
    assert "synced in readlib/algo.py (train) at lines 3 (3), 4 (3), 6 (6)" in text
    [row] = csv.DictReader(io.StringIO(to_csv(report.to_json())))
    assert row["library_lines"] == "3:3 4:3 6:6"
    assert row["library_line"] == "readlib/algo.py:3"


def test_a_package_not_installed_where_the_report_runs_is_said_to_be_maybe_a_library(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same trace read where ``readlib`` is not installed (a CI job with tb-syncfinder
    alone): its files are taken for the user's, at their recorded lines, and the footnote
    of those lines says what to do if the package is a library."""
    out = _record(tmp_path, monkeypatch)
    monkeypatch.undo()  # readlib off sys.path: not importable here
    report = analyze(str(out), source_roots=[str(tmp_path)])
    assert {s.file for s in report.latent_sites} == {"readlib/algo.py"}
    text = " ".join(render_report(report.to_json(), width=400).split())
    assert "if its package is a library (installed where the trace was recorded, not here)" in text


def test_a_site_packages_folder_named_as_a_source_root_holds_libraries(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Read where ``readlib`` is not installed (TensorBoard in an environment of its own),
    with the training environment's site-packages named as a source root: its files were
    the user's (a Captum and a pytorch-tabnet walk: the user's ``fit(...)`` line named
    nowhere, every fix an edit of "your" code). They are a library's: the site is at the
    user's line, with the library's lines under it."""
    out = _record(tmp_path, monkeypatch)
    monkeypatch.undo()  # readlib off sys.path: not importable here
    roots = [str(tmp_path), str(tmp_path / "site-packages")]
    report = analyze(str(out), source_roots=roots)
    [site] = report.latent_sites
    assert (site.file.rsplit("/", 1)[-1], site.line) == ("learn.py", 15)
    assert site.library is not None and site.library.file == "readlib/algo.py"


def test_a_cpu_run_whose_only_reads_are_library_copies_does_not_say_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pytorch-tabnet walk: every read was a ``.cpu()`` in its own code, counted apart,
    and the summary said "none: no operator here would synchronize on a GPU"."""
    out = _record(tmp_path, monkeypatch, "def train(model, x):\n    return model(x).cpu()\n")
    report = analyze(str(out), source_roots=[str(tmp_path)])
    assert report.latent_sites == []
    text = " ".join(render_report(report.to_json(), width=400).split())
    assert "no operator here would synchronize" not in text
    assert "latent syncs none listed; 3 copies to the host in libraries' own code" in text


_COPIES = """\
def train(model, x):
    out = model(x)
    for _ in range(2):
        actions = out.argmax(1).cpu()
    ids = out.argmax(1).tolist()
    host = out.to("cpu")
    back = host.to(x.device)
    both = out.argmax(1).cpu().tolist()
    return actions, ids, back, both
"""


def test_a_librarys_copies_to_the_host_are_counted_apart_by_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Stable-Baselines3's ``actions.cpu().numpy()`` of the policy's output, once per
    environment step, and its buffers' ``.cpu()``: 197 of PPO's 350 device reads a step
    were dropped without a word (a library copies host tensors as often as not, so they
    are not listed). They are counted now, by the library's line and the user's that
    called it; a library's ``.to()`` only where its line names the host."""
    out = _record(tmp_path, monkeypatch, _COPIES)
    report = analyze(str(out), source_roots=[str(tmp_path)])
    assert report.latent_sites == []
    [trace] = report.traces
    copies = {(c.file, c.line, c.line_exact, c.method): c.count for c in trace.library_copies}
    assert copies == {
        ("readlib/algo.py", 4, True, "cpu"): 6,
        ("readlib/algo.py", 5, True, "tolist"): 3,
        ("readlib/algo.py", 6, True, "to"): 3,
        # ``.cpu().tolist()``: one copy (PyG's ``unbatch_edge_index`` was counted twice).
        ("readlib/algo.py", 8, True, "cpu"): 3,
    }
    assert {(c.user_file.rsplit("/", 1)[-1], c.user_line) for c in trace.library_copies} == {
        ("learn.py", 15)
    }
    text = " ".join(render_report(report.to_json(), width=400).split())
    assert (
        "Copies to the host that libraries made in their own code, not listed: on a GPU each "
        "waits where its tensor lives there" in text
    )
    assert (
        "2.0 a step at readlib/algo.py:4 (train, .cpu()); 1.0 a step at readlib/algo.py:5" in text
    )
    assert "5.0 a step in all, under learn.py:15." in text
    assert "the other copies libraries make in their own code" in text


def test_a_trace_read_in_windows_counts_each_library_copy_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A trace read in windows counted the library copies of each window's context, which
    the windows either side count too: Segment Anything's predictor copies, 1.0 a step,
    read 2.6 in five windows (a walk: 27.6 a step against the truth's 19.8)."""
    import json

    from tb_syncfinder.cli import main

    out = _record(tmp_path, monkeypatch, _COPIES)
    counts = []
    for window_mb in ("0", "0.05"):
        assert main(["report", str(out), "--json", "--window-mb", window_mb]) == 0
        [trace] = json.loads(capsys.readouterr().out)["traces"]
        counts.append({(c["line"], c["method"]): c["count"] for c in trace["library_copies"]})
    assert trace.get("windows", 1) > 1
    assert counts[0] == counts[1] == {(4, "cpu"): 6, (5, "tolist"): 3, (6, "to"): 3, (8, "cpu"): 3}


_EPOCH_END_COPIES = """\
def compute(states):
    return [s.cpu() for s in states]
"""


def test_library_copies_made_in_one_step_say_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """torchmetrics' ``MeanAveragePrecision.compute()`` copies all its states in the one step
    it runs: the note said "159.8 a step", as if every step copied (a walk). It says in how
    many of the steps they were made."""
    program = _profiled_loop(
        "from metriclib.metric import compute",
        ["states = [torch.ones(2) for _ in range(4)]"],
        ["model(torch.ones(2, 4))", "if step == 4:", "    host = compute(states)"],
    )
    out = _run_program(
        tmp_path, monkeypatch, "metriclib", {"metric.py": _EPOCH_END_COPIES}, program
    )
    report = analyze(str(out), source_roots=[str(tmp_path)])
    [trace] = report.traces
    [copy] = trace.library_copies
    assert (copy.line, copy.count, copy.steps_with_copies) == (2, 4, 1)
    text = " ".join(render_report(report.to_json(), width=400).split())
    assert "1.3 a step (in 1 of 3 steps) at metriclib/metric.py:2 (<listcomp>, .cpu())" in text


def test_library_copies_under_an_uncertain_user_line_mark_it() -> None:
    """torchmetrics' ``compute_on_cpu`` copies, made through its ``update`` wrapper, were said
    to be under the loop's ``prof.step()`` line as if certain (a walk): the user's line of a
    library copy is marked as a site's is where it is not certain."""
    from tb_syncfinder.outputs.text import library_copies_text

    copy = {"file": "lib/m.py", "line": 5, "line_exact": True, "func": "f", "method": "to"}
    copy.update(count=5, user_file="run.py", user_line=13, user_line_exact=False)
    text = library_copies_text([{"steps": 5, "library_copies": [copy]}])
    assert text is not None and text.endswith("under run.py:13*.")
    copy["user_line_exact"] = True
    assert library_copies_text([{"steps": 5, "library_copies": [copy]}]).endswith("run.py:13.")


def test_library_copies_a_step_count_the_steps_of_the_runs_traces_without_copies() -> None:
    """One copy in two traces of 5 steps each read "0.2 a step (in 1 of 5 steps)": the
    steps of the trace without a copy were left out (a denoising-diffusion walk)."""
    from tb_syncfinder.outputs.text import library_copies_text

    copy = {"file": "lib/m.py", "line": 5, "line_exact": True, "func": "save", "method": "cpu"}
    copy.update(count=1, steps_with_copies=1, user_file="run.py", user_line=13)
    text = library_copies_text([{"steps": 5, "library_copies": [copy]}, {"steps": 5}])
    assert text is not None and "0.1 a step (in 1 of 10 steps) at lib/m.py:5" in text


def test_two_windows_library_copies_add_up_by_place() -> None:
    from tb_syncfinder.models import LibraryCopy, tally_library_copies

    a = [
        LibraryCopy("lib/a.py", 4, "f", True, "cpu", 3),
        LibraryCopy("lib/a.py", 5, "f", True, "cpu", 1),
    ]
    b = [LibraryCopy("lib/a.py", 5, "f", True, "cpu", 4)]
    merged = tally_library_copies([*a, *b])
    assert [(c.line, c.count) for c in merged] == [(5, 5), (4, 3)]
    assert a[1].count == 1  # the first window's records are not changed


_ROLLOUT = """\
import torch


def collect(policy, n, on_start):
    on_start()  # the user's callback steps the profiler (SB3's on_rollout_start)
    obs = torch.zeros(1, 4)
    for _ in range(n):
        action = policy(obs).argmax(dim=1)
        action = action.cpu()
"""

_LEARN = """\
import sys

import torch
from rollpkg.algo import collect

policy = torch.nn.Linear(4, 2)
with torch.profiler.profile(
    activities=[torch.profiler.ProfilerActivity.CPU],
    with_stack=True,
    schedule=torch.profiler.schedule(wait=1, warmup=1, active=5, repeat=1),
    on_trace_ready=torch.profiler.tensorboard_trace_handler(sys.argv[1]),
) as prof:
    for it in range(8):
        collect(policy, 8, prof.step)
"""


def test_a_frame_running_when_profiling_started_is_one_site_with_its_later_calls(
    tmp_path: Path,
) -> None:
    """A package whose source is not found, whose function steps the profiler through a
    callback (Stable-Baselines3's ``collect_rollouts``): that call's frame recorded the
    line it was at when tracing started, the later calls' their def line, and one line
    read 8 times a step was two sites, 6.4 and 1.6 a step."""
    package = tmp_path / "site-packages" / "rollpkg"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "algo.py").write_text(_ROLLOUT)
    (tmp_path / "learn.py").write_text(_LEARN)
    subprocess.run(
        [sys.executable, "learn.py", str(tmp_path / "logs" / "run")],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(tmp_path / "site-packages")},
        check=True,
        capture_output=True,
    )
    report = analyze(str(tmp_path / "logs" / "run"), source_roots=[str(tmp_path / "elsewhere")])
    sites = [(s.file, s.line, s.line_exact, s.per_step) for s in report.latent_sites]
    assert sites == [("rollpkg/algo.py", 4, False, 8.0)]


_NONZERO_SCRIPT = """\
import sys

import torch

prof = torch.profiler.profile(
    activities=[torch.profiler.ProfilerActivity.CPU],
    with_stack=True,
    schedule=torch.profiler.schedule(wait=1, warmup=1, active=3, repeat=1),
    on_trace_ready=torch.profiler.tensorboard_trace_handler(sys.argv[1]),
)
prof.start()
for _ in range(5):
    x = torch.randn(100, device="cpu")
    idx = torch.nonzero(x > 0)
    prof.step()
prof.stop()
"""


def test_a_script_named_as_a_standard_module_is_reported_at_its_line(tmp_path: Path) -> None:
    """A script saved as ``bisect.py`` (a walk of torchvision's detection reference): its
    reads were "(no stack)", the script taken for the standard module."""
    (tmp_path / "bisect.py").write_text(_NONZERO_SCRIPT)
    subprocess.run(
        [sys.executable, "bisect.py", str(tmp_path / "logs" / "run")],
        cwd=tmp_path,
        check=True,
        capture_output=True,
    )
    report = analyze(str(tmp_path / "logs" / "run"), source_roots=[str(tmp_path)])
    assert [(s.file, s.line, s.line_exact, s.per_step) for s in report.latent_sites] == [
        ("bisect.py", 14, True, 1.0)
    ]


_TRAINER = """\
def train(model, x):
    out = model(x)
    labels = out.argmax(1)
    _, counts = labels.unique(return_counts=True)
    losses = out.mean(0)
    desc = ("%11s" * 2 + "%11.4g" * len(losses)) % ("1/1", "0G", *losses)
    return desc, counts
"""


def test_a_known_librarys_reads_are_named_at_its_own_lines_and_its_fixes_said_to_be_its(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ultralytics' trainer (a walk of YOLO training): its ``batch_idx.unique(...)`` was
    named at torch's wrapper (``torch/functional.py:973``, ``_unique_impl``), its progress
    bar's ``("%11s" * 2 + "%11.4g" * n) % (...)`` at the trainer's def line with the true
    line not a candidate, and its fixes read as the user's to make. Each is now named at
    the library's own line, exact, and its fix is said to be an edit of the library."""
    out = _record(tmp_path, monkeypatch, _TRAINER, package="ultralytics")
    report = analyze(str(out), source_roots=[str(tmp_path)])
    found = {
        (site.kind, site.library.file, site.library.line, site.library.line_exact): site.count
        for site in report.latent_sites
        if site.library is not None
    }
    assert found == {
        ("dynamic_shape", "ultralytics/algo.py", 4, True): 3,
        ("scalar_readback", "ultralytics/algo.py", 6, True): 6,
    }, found
    assert all(site.advice["library_code"] == "ultralytics" for site in report.latent_sites)
    text = " ".join(render_report(report.to_json(), width=200).split())
    assert "(an edit of ultralytics' own code: no setting of it is known to avoid this)" in text


_TIMED = """\
import torch


class Profile:
    def __init__(self, device):
        self.cuda = device.type == "cuda"

    def time(self):
        if self.cuda:
            torch.cuda.synchronize()
        return 0.0


def train(model, x):
    timer = Profile(x.device)
    out = model(x)
    timer.time()
    timer.time()
    return out
"""


def test_a_known_librarys_synchronize_not_run_on_the_cpu_is_named_with_its_calls(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ultralytics' ``Profile.time`` synchronizes under ``if self.accelerator is not
    None:``, 8 times a validation batch on a GPU: the most frequent syncs of validation and
    prediction, which a CPU-only report did not name (only the user's functions were
    read). Now named, as the library's code, with how often its function ran."""
    out = _record(tmp_path, monkeypatch, _TIMED, package="ultralytics")
    report = analyze(str(out), source_roots=[str(tmp_path)])
    [unrun] = report.traces[0].unrun_syncs
    assert (unrun.file, unrun.line, unrun.func, unrun.library) == (
        "ultralytics/algo.py",
        10,
        "time",
        "ultralytics",
    )
    assert unrun.guard == "self.cuda" and unrun.calls == 6  # 2 a step, 3 steps
    text = " ".join(render_report(report.to_json(), width=200).split())
    assert (
        "ultralytics/algo.py:10 torch.cuda.synchronize() (ultralytics' own code, in time, "
        "under `if self.cuda:`; its function ran 6 times, 2.0 a step)"
    ) in text
    assert "Fix: an edit of the library's own code" in text


_THREE_READS = """\
def _log(loss):
    return loss.item()


def _count(out):
    return int((out > 0).sum())


def train(model, x):
    out = model(x)
    loss = out.sum()
    a = _log(loss) if {log} else 0.0
    b = _count(out)
    c = [(out * 2).sum().item() for _ in range(1)]
    return a, b, c
"""


def test_a_librarys_sites_under_one_call_keep_their_sarif_identity_when_one_is_fixed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Three reads in a library under one user line (a YOLO walk: ultralytics' under
    ``model.train()``) were numbered by place: with one fixed, the next took its
    fingerprint, and code scanning kept the fixed alert open and closed another. Each is
    now told by its library function."""
    from tb_syncfinder.outputs.sarif import to_sarif

    prints = {}
    for name, log in (("before", True), ("after", False)):
        out = _record(tmp_path / name, monkeypatch, _THREE_READS.format(log=log), "readlib")
        report = analyze(str(out), source_roots=[str(tmp_path / name)])
        sarif = to_sarif(report.to_json())
        prints[name] = {
            r["partialFingerprints"]["syncSite/v2"].rsplit("#", 1)[-1]: r["partialFingerprints"][
                "syncSite/v2"
            ]
            for r in sarif["runs"][0]["results"]
        }
    assert set(prints["before"]) == {
        "lib:algo.py:_log",
        "lib:algo.py:_count",
        "lib:algo.py:<listcomp>",
    }
    assert prints["after"] == {
        key: value for key, value in prints["before"].items() if key != "lib:algo.py:_log"
    }


def test_a_known_library_not_installed_here_says_why_its_lines_are_marked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The YOLO trace read with a Python that has no ultralytics: its lines became def
    lines marked ``*`` and nothing said why (a second walk). The table now says its source
    is not readable here and what to do; SARIF says the fix is an edit of the library."""
    from tb_syncfinder.outputs.sarif import to_sarif

    out = _record(tmp_path, monkeypatch, _TRAINER, package="ultralytics")
    monkeypatch.undo()  # not importable where the report runs
    report = analyze(str(out), source_roots=[str(tmp_path / "elsewhere")])
    assert report.latent_sites and all(
        site.library is not None and not site.library.line_exact for site in report.latent_sites
    )
    text = " ".join(render_report(report.to_json(), width=200).split())
    assert (
        "Library lines marked * are the lines the trace recorded for their functions, not the "
        "calls that synced: the source of ultralytics is not readable here."
    ) in text
    messages = [r["message"]["text"] for r in to_sarif(report.to_json())["runs"][0]["results"]]
    assert all(
        "(An edit of ultralytics' own code: no setting of it is known to avoid this.)" in m
        for m in messages
    )


_RUNNING_LOOP = """\
import torch


def fit(prof, nw=0):
    w = torch.randn(8, 1, requires_grad=True)
    for i in range(5):
        if nw and i <= nw:
            lr = float(i / nw)
        loss = (torch.randn(4, 8) @ w).pow(2).mean()
        loss.backward()
        desc = ("%8s" + "%10.4g") % (f"{i}/5", loss.detach())
        prof.step()
"""


def test_a_computed_format_in_a_running_library_loop_is_never_beaten_by_a_dead_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A library's loop already running when profiling started (ultralytics' ``_do_train``
    steps the profiler through a callback) reads its loss through a computed ``%``-format;
    a ``float()`` in a branch that never runs was named the line, exact (a second YOLO
    walk). The format is a read now: the line is not claimed, and both are candidates."""
    packages = tmp_path / "site-packages"
    (packages / "looplib").mkdir(parents=True)
    (packages / "looplib" / "__init__.py").write_text(_RUNNING_LOOP)
    out = tmp_path / "host_1.1700000000000.pt.trace.json"
    script = textwrap.dedent(
        f"""\
        import torch, looplib
        with torch.profiler.profile(
            activities=[torch.profiler.ProfilerActivity.CPU],
            with_stack=True,
            schedule=torch.profiler.schedule(wait=1, warmup=1, active=3),
            on_trace_ready=lambda p: p.export_chrome_trace({str(out)!r}),
        ) as prof:
            looplib.fit(prof)
        """
    )
    (tmp_path / "run.py").write_text(script)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(packages)])}
    subprocess.run(
        [sys.executable, "run.py"], env=env, cwd=tmp_path, check=True, capture_output=True
    )
    monkeypatch.syspath_prepend(str(packages))
    report = analyze(str(out), source_roots=[str(tmp_path)])
    [site] = report.latent_sites
    assert site.library is not None and site.library.file == "looplib/__init__.py"
    assert not site.library.line_exact
    assert 11 in site.library.candidates


_METRICS = """\
import torch


def train(model, x):
    out = model(x)
    logits = out.detach().cpu()
    ranking = torch.argsort(logits, descending=True)
    hits = torch.where(ranking == 0)[1]
    kept = out[out > 0]
    return hits, kept
"""


def test_a_librarys_mask_of_its_own_host_copy_is_not_listed_its_device_mask_is(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """OpenCLIP's ``get_clip_metrics`` ranks a ``.cpu()`` copy and takes ``torch.where`` of
    it: no GPU wait, left out in the user's code but listed in the library's (2 of
    evaluation's 4 latent syncs, enough to fail ``--max-syncs-per-step 2``). The library's
    line is checked as the user's is; its mask of the model's output stays."""
    out = _record(tmp_path, monkeypatch, _METRICS, package="open_clip_train")
    report = analyze(str(out), source_roots=[str(tmp_path)])
    found = sorted(
        (site.kind, site.library.line) for site in report.latent_sites if site.library is not None
    )
    assert found == [("dynamic_shape", 9)], found


_LOGGED = """\
_calls = [0]


def train(model, x, log_every=2):
    _calls[0] += 1
    step = _calls[0]
    loss = model(x).sum()
    if step % log_every == 0:
        print(loss.item())
    return loss
"""


def test_a_librarys_own_every_n_steps_test_is_said_with_the_setting_behind_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """OpenCLIP logs under ``if i % args.log_every_n_steps == 0:`` in its own loop: the
    report said "no setting of it is known", though its ``--log-every-n-steps`` is that
    setting and the library's line's test was in the JSON. Said now."""
    out = _record(tmp_path, monkeypatch, _LOGGED, package="open_clip_train")
    report = analyze(str(out), source_roots=[str(tmp_path)])
    [site] = report.latent_sites
    assert site.library is not None and site.library.periodic_guard == "step % log_every == 0"
    text = " ".join(render_report(report.to_json(), width=300).split())
    assert "already every N steps (under `if step % log_every == 0:` in the library's code)" in text
    assert (
        "(an edit of open_clip_train's own code, which reads it only under `if step % "
        "log_every == 0:`: the setting of open_clip_train behind that test reads it less often)"
    ) in text


_KERAS_LIKE = """\
import numpy as np
import torch


def convert_to_numpy(x):
    if x.device != torch.device("cpu"):
        x = x.cpu()
    return np.array(x)


def train(model, x):
    loss = model(x).sum()
    return convert_to_numpy(loss.detach())
"""


def test_a_librarys_copy_made_only_off_the_host_is_named_with_its_calls(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Keras' ``convert_to_numpy``, which copies each metric for the progress bar only
    where it is off the host: a CPU report of ``model.fit()`` said no operator would
    synchronize (a Keras walk: every per-batch read missed). Named now, as the library's,
    with how often its function ran."""
    out = _record(tmp_path, monkeypatch, _KERAS_LIKE, package="keras")
    report = analyze(str(out), source_roots=[str(tmp_path)])
    assert report.latent_sites == []
    [unrun] = report.traces[0].unrun_syncs
    assert (unrun.file, unrun.line, unrun.code, unrun.library, unrun.calls) == (
        "keras/algo.py",
        7,
        "x.cpu()",
        "keras",
        3,
    )
    text = " ".join(render_report(report.to_json(), width=200).split())
    assert "keras/algo.py:7 x.cpu() (keras' own code, in convert_to_numpy, under `if" in text
    assert "its function ran 3 times, 1.0 a step" in text


_RUN_AS_MODULE = """\
import sys

import torch


def train_one_epoch(out):
    model = torch.nn.Linear(4, 2)
    with torch.profiler.profile(
        activities=[torch.profiler.ProfilerActivity.CPU],
        with_stack=True,
        schedule=torch.profiler.schedule(wait=1, warmup=1, active=3),
        on_trace_ready=lambda p: p.export_chrome_trace(out),
    ) as prof:
        for step in range(5):
            loss = model(torch.randn(8, 4)).square().mean()
            loss.backward()
            value = loss.item()
            top = model.weight.grad.abs().max().item()
            prof.step()


if __name__ == "__main__":
    train_one_epoch(sys.argv[1])
"""


def test_a_librarys_module_run_as_the_program_is_read_as_the_users_code(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """OpenCLIP runs as ``python -m open_clip_train.main``: every frame is a library's, and
    every read was "(no stack)", reads of different lines one site with one read's fix (a
    walk: 24 of 24). The package run as the program stands for the user's code."""
    packages = tmp_path / "site-packages"
    (packages / "trainlib").mkdir(parents=True)
    (packages / "trainlib" / "__init__.py").write_text("")
    (packages / "trainlib" / "train.py").write_text(_RUN_AS_MODULE)
    out = tmp_path / "host_1.1700000000000.pt.trace.json"
    env = {**os.environ, "PYTHONPATH": str(packages)}
    subprocess.run(
        [sys.executable, "-m", "trainlib.train", str(out)],
        env=env,
        cwd=tmp_path,
        check=True,
        capture_output=True,
    )
    monkeypatch.syspath_prepend(str(packages))
    report = analyze(str(out), source_roots=[str(tmp_path / "elsewhere")])
    found = sorted((site.line, site.line_exact, site.count) for site in report.latent_sites)
    assert found == [(17, True, 3), (18, True, 3)], found
    assert all(site.file.endswith("trainlib/train.py") for site in report.latent_sites)


_HOLDS_THE_LOOP = """\
import torch


def train_one_epoch(model, out):
    device = next(model.parameters()).device
    if device.type == "cuda":
        torch.cuda.synchronize()  # before the loop: ran once, before profiling
    with torch.profiler.profile(
        activities=[torch.profiler.ProfilerActivity.CPU],
        with_stack=True,
        schedule=torch.profiler.schedule(wait=1, warmup=1, active=3),
        on_trace_ready=lambda p: p.export_chrome_trace(out),
    ) as prof:
        for step in range(5):
            loss = model(torch.randn(8, 4)).square().mean()
            if device.type == "cuda":
                torch.cuda.synchronize()
            value = loss.item()
            prof.step()
    if device.type == "cuda":
        torch.cuda.synchronize()  # after it
"""


def test_a_synchronize_in_the_library_loop_running_when_profiling_began_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """OpenCLIP's ``train_one_epoch`` holds the profiled loop: a timing synchronize in it,
    under ``if device.type == "cuda":``, was not named on a CPU trace (only the library's
    functions called while profiled were read), while the same loop in the user's code
    was (a walk's repro). Now named, in the loop's lines only, with no call count the
    trace cannot give."""
    out = _run_program(
        tmp_path,
        monkeypatch,
        "open_clip_train",
        {"train.py": _HOLDS_THE_LOOP},
        "import sys\n\nimport torch\nfrom open_clip_train import train\n\n"
        "train.train_one_epoch(torch.nn.Linear(4, 2), sys.argv[1])\n",
    )
    report = analyze(str(out), source_roots=[str(tmp_path)])
    [site] = report.latent_sites
    assert site.library is not None and site.library.line == 18 and site.count == 3
    [unrun] = report.traces[0].unrun_syncs
    assert (unrun.file, unrun.line, unrun.func, unrun.library, unrun.calls) == (
        "open_clip_train/train.py",
        17,
        "train_one_epoch",
        "open_clip_train",
        None,
    )
    text = " ".join(render_report(report.to_json(), width=200).split())
    assert (
        "open_clip_train/train.py:17 torch.cuda.synchronize() (open_clip_train's own code, in "
        "train_one_epoch, under `if device.type == 'cuda':`; in the loop it was running when "
        "profiling started)"
    ) in text


_PIPELINE = """\
import torch


class Pipeline:
    def __init__(self):
        self.unet = torch.nn.Linear(4, 4)

    @torch.no_grad()
    def __call__(self, steps=3):
        x = self.unet(torch.ones(2, 4))
        for t in range(steps):
            x = self.unet(x)
            if x.sum().item() > 100:
                x = x * 0
        return x


class PlainPipeline(Pipeline):
    def __call__(self, steps=3):
        x = self.unet(torch.ones(2, 4))
        if x.abs().max().item() > 100:
            x = x * 0
        return x
"""


@pytest.mark.parametrize(("cls", "library_line"), [("Pipeline", 13), ("PlainPipeline", 21)])
def test_a_read_in_a_library_objects_call_is_named_at_the_users_call_of_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cls: str, library_line: int
) -> None:
    """diffusers' ``DDPMPipeline.__call__`` (under ``@torch.no_grad()``), called as
    ``images = pipe(...)``: its reads were put on the loop's ``prof.step()`` line, marked,
    with a line after ``prof.stop()`` as the candidate, and the fix did not say it was an
    edit of diffusers (a walk: 610 of 610 reads of the sampling run). The call of an
    object is now matched as an nn.Module's call is, by an instance of its class."""
    program = _profiled_loop(
        f"from diffusers.pipe import {cls}", [f"pipe = {cls}()"], ["images = pipe(steps=3)"]
    )
    out = _run_program(tmp_path, monkeypatch, "diffusers", {"pipe.py": _PIPELINE}, program)
    report = analyze(str(out), source_roots=[str(tmp_path)])
    [site] = report.latent_sites
    assert (site.file, site.line, site.line_exact) == ("main.py", _line_of(program, "pipe("), True)
    assert site.library is not None
    assert (site.library.line, site.library.line_exact) == (library_line, True)
    assert site.advice["library_code"] == "diffusers"


_SCHEDULER = """\
import torch


class Scheduler:
    def __init__(self):
        self.alphas = torch.linspace(0.99, 0.01, 10)
        self.one = torch.tensor(1.0)
        self.clip = True

    def step(self, x, t):
        prev_t = t - 1
        a = self.alphas[t]
        a_prev = self.alphas[prev_t] if prev_t >= 0 else self.one
        if self.clip:
            x = x.clamp(-1, 1)
        x = x * (a / a_prev)
        if t > 0:
            x = x + torch.randn_like(x)
        return x


def train(model, x):
    scheduler = Scheduler()
    for t in torch.arange(9, -1, -1):
        x = scheduler.step(x, t)
    return x
"""


def test_a_sites_library_line_is_not_claimed_exact_where_its_reads_ran_several_lines(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """diffusers' ``DDPMScheduler.step`` branches on ``prev_t >= 0`` and on ``t > 0``: the
    first reads resolved exact, the others not, and the site took the first read's line,
    exact, for all of them (a walk: 95 of 195 reads named at the wrong line, ``if t > 0:``
    never named). Such a site is now at the function's line, inexact, with every line its
    reads may be at as candidates."""
    out = _record(tmp_path, monkeypatch, _SCHEDULER, package="diffusers")
    report = analyze(str(out), source_roots=[str(tmp_path)])
    truth_tests = [site for site in report.latent_sites if site.ops[0] == "aten::is_nonzero"]
    [site] = truth_tests
    assert site.library is not None and site.library.func == "step"
    assert not site.library.line_exact and site.library.line == 10
    assert {13, 17} <= set(site.library.candidates), site.library.candidates
    text = " ".join(render_report(report.to_json(), width=200).split())
    assert "synced in diffusers/algo.py:10* (step; candidate lines" in text


_SUBCLASS = """\
import torch


class MetaTensor(torch.Tensor):
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        return super().__torch_function__(func, types, args, kwargs or {})


def dice(y_pred, y):
    y_o = torch.sum(y)
    if y_o > 0:
        return torch.sum(torch.masked_select(y, y_pred > 0)) / y_o
    return y_o
"""


def test_a_tensor_subclass_dispatcher_is_not_named_as_the_library_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """MONAI's ``MetaTensor.__torch_function__`` runs every operator on its tensors: it was
    named as the line that synced for MONAI's reads (hiding ``meandice.py:392``) and for
    the user's own ``.item()`` of a MetaTensor, whose fix became "an edit of monai" (a
    walk: 18 of 31 reads). A subclass's dispatcher is passed over as a wrapper."""
    program = _profiled_loop(
        "from monai.metrics import MetaTensor, dice",
        ["x = torch.ones(2, 4)"],
        ["y = model(x).as_subclass(MetaTensor)", "d = dice(y, y.abs())", "v = d.mean().item()"],
    )
    out = _run_program(tmp_path, monkeypatch, "monai", {"metrics.py": _SUBCLASS}, program)
    report = analyze(str(out), source_roots=[str(tmp_path)])
    by_line = {}
    for site in report.latent_sites:
        library = site.library
        by_line[(site.line, site.ops[0])] = (
            (library.file, library.line, library.line_exact) if library else None,
            site.advice.get("library_code"),
        )
    call, read = _line_of(program, "dice("), _line_of(program, "d.mean()")
    assert by_line[(call, "aten::is_nonzero")] == (("monai/metrics.py", 12, True), "monai")
    assert by_line[(call, "aten::masked_select")] == (("monai/metrics.py", 13, True), "monai")
    assert by_line[(read, "aten::item")] == (None, None)  # the user's own read


_METRIC_BASE = """\
class Cumulative:
    def __call__(self, y_pred, y):
        return self._compute(y_pred, y)
"""

_METRIC = """\
import torch

from monai.base import Cumulative


class Dice(Cumulative):
    def _compute(self, y_pred, y):
        y_o = torch.sum(y)
        if y_o > 0:
            return torch.sum(y_pred * y) / y_o
        return y_o


class Post:
    def __call__(self, x):
        return torch.softmax(x, dim=-1)


def infer(x):
    return x * 2
"""


def test_an_object_whose_call_a_library_base_class_defines_is_named_at_its_call(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """MONAI's ``dice_metric(...)``: DiceMetric inherits ``__call__`` from a base class in
    another file, so the instance the user's line calls is of no class that call names.
    Its reads were at the loop's ``prof.step()`` line, marked, with the lines around the
    call as candidates and not the call (a walk: 8 of 21 validation reads). Another class's
    object called beside it (``post(...)``) shows as its own ``__call__``, and a function
    (``infer(...)``, a name the file does not bind) as itself: the call is told from them."""
    program = _profiled_loop(
        "from monai.metrics import Dice, Post, infer",
        ["post = Post()", "dice_metric = Dice()"],
        ["p = post(infer(model(torch.ones(2, 4))))", "dice_metric(p, model(torch.ones(2, 4)))"],
    )
    modules = {"base.py": _METRIC_BASE, "metrics.py": _METRIC}
    out = _run_program(tmp_path, monkeypatch, "monai", modules, program)
    report = analyze(str(out), source_roots=[str(tmp_path)])
    [site] = report.latent_sites
    assert (site.file, site.line, site.line_exact) == (
        "main.py",
        _line_of(program, "dice_metric(p"),
        True,
    )
    assert site.library is not None and (site.library.line, site.library.line_exact) == (9, True)


_GENERATE = """\
import torch


def exists(v):
    return v is not None


@torch.no_grad()
def generate(prompt, seq_len, eos_token=None, greedy=False):
    out = prompt
    for _ in range(seq_len):
        if exists(eos_token) and seq_len > 10**6:
            raise ValueError("too long")
        if greedy:
            pass
        out = torch.cat((out, (out[:, -1:] * 7 + 3) % 11), dim=-1)
        if not exists(eos_token):
            continue
        is_eos_tokens = out == eos_token
        if is_eos_tokens.any(dim=-1).all():
            break
    return out
"""


def test_a_generate_loops_eos_check_is_named_at_its_line_past_a_plain_flag_test(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """x-transformers' per-token eos check was named at ``generate``'s decorator line,
    marked, because ``if greedy:`` (which calls nothing) might have been the truth read
    (a walk): no path reaches it right after the ``.all()`` the trace shows last. Its fix
    is x-transformers' own setting, where it had the generic "Do not branch"."""
    program = _profiled_loop(
        "from x_transformers.autoregressive_wrapper import generate",
        [],
        ["tokens = generate(model(torch.ones(1, 4)).long(), 8, eos_token=99)"],
    )
    modules = {"autoregressive_wrapper.py": _GENERATE}
    out = _run_program(tmp_path, monkeypatch, "x_transformers", modules, program)
    report = analyze(str(out), source_roots=[str(tmp_path)])
    [site] = report.latent_sites
    assert site.library is not None
    assert (site.library.line, site.library.line_exact) == (20, True)
    # x-transformers' own setting: no eos_token (a walk: the 71 reads of 5 calls gone).
    assert site.advice["title"].startswith("Generate without eos_token")


_CPU_BRANCH = """\
import torch


def normalize(tensor):
    if tensor.device == torch.device("cpu"):
        if not torch.all((tensor >= 0) * (tensor <= 1)):
            tensor = tensor.sigmoid()
        return tensor
    condition = ((tensor < 0) | (tensor > 1)).any()
    return torch.where(condition, tensor.sigmoid(), tensor)
"""


def test_a_librarys_read_only_on_the_cpu_path_is_no_latent_sync(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """torchmetrics' ``normalize_logits_if_needed`` reads only under ``if tensor.device ==
    torch.device("cpu"):``; its GPU path is a ``torch.where``. A CPU trace listed the read
    as a GPU sync, 1.0 a step, "do not branch on a GPU tensor" (a walk)."""
    program = _profiled_loop(
        "from torchmetrics.compute import normalize",
        [],
        ["p = normalize(model(torch.ones(2, 4)))"],
    )
    out = _run_program(tmp_path, monkeypatch, "torchmetrics", {"compute.py": _CPU_BRANCH}, program)
    report = analyze(str(out), source_roots=[str(tmp_path)])
    assert report.latent_sites == []


_METRICS_UPDATE = """\
import torch


class Metric:
    def __init__(self):
        update = self.update

        def wrapped_func(*args):
            return update(*args)

        self.update = wrapped_func


class Mean(Metric):
    def __init__(self):
        super().__init__()
        self.total = torch.zeros(())

    def update(self, x):
        if torch.isnan(x).any():
            x = torch.nan_to_num(x)
        self.total = self.total + x.sum()


class Collection:
    def __init__(self):
        self.seen = torch.zeros((), dtype=torch.long)

    def update(self, logits, y):
        if y.max() >= logits.shape[-1]:
            raise ValueError("a class out of range")
        self.seen = self.seen + y.numel()


class Sum(Mean):
    pass
"""


def test_a_dicts_update_beside_a_librarys_update_is_not_taken_for_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """torchmetrics' ``metric.update(x)`` beside a dict's ``stats.update(step=i)`` in the
    same loop: calls were told apart by name only, and the metric's ``update`` runs
    through the wrapper its base class put on it (torchmetrics' ``wrapped_func``), so the
    read went to the loop's ``prof.step()`` line, marked, with both calls as candidates (a
    walk: 43 of 43 reads). A dict's method runs no Python frame of its name."""
    program = _profiled_loop(
        "from torchmetrics.metrics import Mean",
        ["mean = Mean()", "stats = {}", "x = torch.ones(8)"],
        ["mean.update(model(x[:4]).mean())", "stats.update(step=step)"],
    )
    out = _run_program(
        tmp_path, monkeypatch, "torchmetrics", {"metrics.py": _METRICS_UPDATE}, program
    )
    report = analyze(str(out), source_roots=[str(tmp_path)])
    [site] = report.latent_sites
    assert (site.line, site.line_exact) == (_line_of(program, "mean.update("), True)
    assert site.library is not None and (site.library.line, site.library.line_exact) == (20, True)


def test_two_objects_calls_of_one_method_name_are_told_apart_by_their_classes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A ``MetricCollection``'s ``update`` and a ``MeanMetric``'s, one after the other in
    the loop: each object's reads are named at its own call, by the class whose method the
    trace shows, and not both at the ``prof.step()`` line with both calls as candidates
    (the walk's 8 of 8 sites). An instance of a class inheriting that method (``Sum``) is
    still its call where no other call fits."""
    program = _profiled_loop(
        "from torchmetrics.metrics import Collection, Mean, Sum",
        [
            "metrics = Collection()",
            "mean = Mean()",
            "total = Sum()",
            "x = torch.ones(8, 4)",
            "y = torch.zeros(8, dtype=torch.long)",
        ],
        [
            "logits = model(x)",
            "metrics.update(logits, y)",
            "mean.update(logits.mean())",
            "if step == 4:",
            "    total.update(logits.sum())",
        ],
    )
    out = _run_program(
        tmp_path, monkeypatch, "torchmetrics", {"metrics.py": _METRICS_UPDATE}, program
    )
    report = analyze(str(out), source_roots=[str(tmp_path)])
    found = {
        (site.line, site.line_exact, site.library.line if site.library else None, site.count)
        for site in report.latent_sites
    }
    assert found == {
        (_line_of(program, "metrics.update("), True, 30, 3),
        (_line_of(program, "mean.update("), True, 20, 3),
        (_line_of(program, "total.update("), True, 20, 1),
    }, found


_METACLASS = """\
import torch


class DistributionMeta(type):
    def __call__(cls, *args, **kwargs):
        return super().__call__(*args, **kwargs)


class Normal(metaclass=DistributionMeta):
    def __init__(self, loc, scale):
        if not (scale > 0).all():
            raise ValueError("scale must be positive")
        self.loc, self.scale = loc, scale
"""


def test_a_class_called_through_its_metaclass_is_named_at_the_classs_call(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Pyro's distributions are made through a metaclass's ``__call__``: the reads of their
    argument checks were taken for a call of an instance of the metaclass, and put on the
    line calling the model (``self.linear(x)``, which reads nothing) as the candidate (a
    walk: 1 of 8 sites). A metaclass's ``__call__`` is the call of a class."""
    program = _profiled_loop(
        "from pyro.dists import Normal",
        ["x = torch.ones(2, 4)"],
        ["s = model(x).abs() + 1", "y = model(x)", "d = Normal(y, s)"],
    )
    out = _run_program(tmp_path, monkeypatch, "pyro", {"dists.py": _METACLASS}, program)
    report = analyze(str(out), source_roots=[str(tmp_path)])
    [site] = report.latent_sites
    assert (site.line, site.line_exact) == (_line_of(program, "Normal(y, s)"), True)
    assert site.library is not None and site.library.line == 11


_ADJOINT = """\
import torch


def _solve(x):
    n = 0
    while x.abs().sum() > 1e-3 and n < 3:
        x = x * 0.5
        n += 1
    return x


class Solve(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return _solve(x.clone())

    @staticmethod
    def backward(ctx, grad):
        return _solve(grad.clone())


def odeint(x):
    return Solve.apply(x)
"""


def test_a_librarys_backward_that_reads_keeps_its_line_and_says_whose_code_it_is(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """torchdiffeq's adjoint solves backwards in its own ``Function.backward``: those reads
    were one site, "backward of this line", with no library line and a fix written for the
    user's code (a walk: 2,040 of the adjoint run's 3,798 reads). The library's line is
    kept, and the fix said to be an edit of it."""
    program = _profiled_loop(
        "from odelib.adjoint import odeint",
        ["w = torch.ones(4, requires_grad=True)"],
        ["y = odeint(w * 2.0)", "y.sum().backward()"],
    )
    out = _run_program(tmp_path, monkeypatch, "odelib", {"adjoint.py": _ADJOINT}, program)
    report = analyze(str(out), source_roots=[str(tmp_path)])
    backward = [site for site in report.latent_sites if site.backward]
    assert len(backward) == 1, report.latent_sites
    [site] = backward
    assert site.line == _line_of(program, "odeint(w")
    assert site.library is not None and (site.library.file, site.library.line) == (
        "odelib/adjoint.py",
        6,
    )
    assert site.advice["library_code"] == "odelib"


_CHECKED_TWICE = """\
import torch


def _check(t):
    assert (t[1:] > t[:-1]).all()


class Double(torch.autograd.Function):
    @staticmethod
    def forward(ctx, t):
        _check(t)
        return t * 2

    @staticmethod
    def backward(ctx, grad):
        return grad * 2


def run(t):
    _check(t)
    return Double.apply(t)
"""


def test_one_library_read_run_inside_and_outside_an_autograd_function_is_one_site(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """torchdiffeq checks its inputs before its adjoint Function and again inside its
    ``forward``: the same line of the same user call was two rows of the same text, told
    apart only by the operator around one of them (a walk: three lines listed twice;
    GPyTorch's Cholesky check likewise). The site is keyed by the read's own operator."""
    program = _profiled_loop(
        "from chklib.run import run", ["t = torch.arange(5.0)"], ["y = run(t)"]
    )
    out = _run_program(tmp_path, monkeypatch, "chklib", {"run.py": _CHECKED_TWICE}, program)
    report = analyze(str(out), source_roots=[str(tmp_path)])
    [site] = report.latent_sites
    assert (site.line, site.count, site.per_step) == (_line_of(program, "run(t)"), 6, 2.0)
    assert site.library is not None and site.library.line == 5
    assert site.ops[0] == "aten::is_nonzero"


_REDUCER = """\
import torch


def reduce(losses, threshold=0.1):
    kept = losses[losses > threshold]
    return kept.mean()
"""


def test_the_backward_of_a_librarys_mask_names_the_library_line_that_made_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """pytorch-metric-learning's reducer keeps the losses above a threshold with a boolean
    mask: the mask's backward (``IndexBackward0``, run by ``loss.backward()``) was a site
    with no library line and a fix for a mask on the user's line (a walk: 5 to 10 reads a
    run in three of six). It names the library's line and says the fix is an edit of it."""
    program = _profiled_loop(
        "from pml.reducers import reduce",
        ["w = torch.randn(8, requires_grad=True)"],
        ["loss = reduce(w * 2.0)", "loss.backward()"],
    )
    out = _run_program(tmp_path, monkeypatch, "pml", {"reducers.py": _REDUCER}, program)
    report = analyze(str(out), source_roots=[str(tmp_path)])
    [backward] = [site for site in report.latent_sites if site.backward]
    assert backward.line == _line_of(program, "reduce(w")
    assert backward.library is not None and backward.library.file == "pml/reducers.py"
    assert backward.library.line == 5
    assert backward.advice["library_code"] == "pml"


_ATTRIBUTIONS = """\
import functools

import torch


def log_usage(func):
    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        return func(*args, **kwargs)

    return wrapper


class Saliency:
    @log_usage
    def attribute(self, x):
        return x.abs()


class NoiseTunnel:
    @log_usage
    def attribute(self, x):
        noisy = x + torch.ones_like(x)
        if noisy.sum() > 1e9:
            noisy = noisy * 0
        return noisy
"""


def test_a_branch_calling_one_method_name_on_another_class_is_not_taken_for_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Captum's ``sal.attribute(...)`` and ``nt.attribute(...)`` in the two branches of a
    loop, both through the same logging wrapper: NoiseTunnel's read fitted either branch
    (a Saliency's call may be the method where it inherits it), so it was put on the
    ``prof.step()`` line, marked, with both as candidates (a walk: 1 of 1 site of every
    NoiseTunnel run). Another class's call is first taken for another method."""
    program = _profiled_loop(
        "from captum.attrs import NoiseTunnel, Saliency",
        ["sal = Saliency()", "nt = NoiseTunnel()", "x = torch.ones(2, 4)"],
        [
            "if step % 2 == 1:",
            "    a = sal.attribute(model(x))",
            "else:",
            "    b = nt.attribute(model(x))",
        ],
    )
    out = _run_program(tmp_path, monkeypatch, "captum", {"attrs.py": _ATTRIBUTIONS}, program)
    report = analyze(str(out), source_roots=[str(tmp_path)])
    [site] = report.latent_sites
    assert (site.line, site.line_exact) == (_line_of(program, "nt.attribute("), True)


_HOST_MASKS = """\
import numpy as np
import torch


def postprocess(arrays):
    masks = torch.as_tensor(np.stack(arrays))
    keep = torch.nonzero(masks.sum((1, 2)) > 3).flatten()
    return [arrays[i] for i in keep]
"""


def test_a_librarys_reads_of_masks_it_made_from_numpy_are_no_latent_syncs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Segment Anything's ``postprocess_small_regions`` stacks NumPy masks into a tensor,
    takes ``torch.nonzero`` of it and indexes a list with each kept index: all on the host,
    on a GPU run too. They were listed (a walk: 50 of 1,218 reads, its user's same lines
    as well)."""
    program = _profiled_loop(
        "from sam.amg import postprocess",
        [
            "import numpy as np",
            "arrays = [np.random.default_rng(i).random((8, 8)) > 0.5 for i in range(6)]",
        ],
        ["kept = postprocess(arrays)"],
    )
    out = _run_program(tmp_path, monkeypatch, "sam", {"amg.py": _HOST_MASKS}, program)
    report = analyze(str(out), source_roots=[str(tmp_path)])
    assert report.latent_sites == []


def test_a_librarys_loop_fix_keeps_each_of_its_functions_reads_a_site(tmp_path: Path) -> None:
    """Segment Anything's ``_process_batch`` runs its batch's filters (``MaskData.filter``)
    and its own ``if not torch.all(keep_mask)``: both are fixed by ``points_per_batch``
    (a walk: the fix was "an edit of segment_anything's own code"), and each stays a site
    of its own lines: keyed by the loop's frame, they were one row named at one of them."""
    from tests.kineto_builder import KinetoTraceBuilder, item_sync

    run = ("run.py", 49, "<module>")
    batch = ("segment_anything/automatic_mask_generator.py", 300, "_process_batch")
    builder = KinetoTraceBuilder()
    for n in range(3):
        with builder.step(n):
            item_sync(builder, stack=[run, batch, ("segment_anything/utils/amg.py", 49, "filter")])
            item_sync(builder, stack=[run, batch])
    trace = tmp_path / "logs" / "sam" / "worker0.pt.trace.json"
    builder.write(trace)
    report = analyze(str(tmp_path / "logs"))
    sites = {s.library.func if s.library else None: s for s in report.sites}
    assert set(sites) == {"filter", "_process_batch"}
    for site in sites.values():
        assert site.count == 3
        assert site.advice["title"].startswith("Raise points_per_batch")
        assert "library_code" not in site.advice


_COLLECTOR = """\
import torch


class Collector:
    def __init__(self, policy, steps):
        self.policy, self.steps = policy, steps

    def __iter__(self):
        w = next(self.policy.parameters())
        for _ in range(self.steps):
            x = self.policy(torch.randn(4, 8, device=w.device))
            if (x > 10).any():
                x = x.clamp(max=10)
            yield x
"""


def test_a_librarys_generator_read_under_a_loop_with_an_inner_range_loop_is_listed(
    tmp_path: Path,
) -> None:
    """TorchRL's PPO: ``for data in collector:`` resumes the collector's ``__iter__``
    generator, whose reads are the library's; with the epochs' ``for _ in range(2):``
    inside, the read was taken for that inner loop's (a range runs no Python) and, that
    line reading host values only, dropped: 71 % of the walk's reads."""
    packages = tmp_path / "site-packages"
    (packages / "genlib").mkdir(parents=True)
    (packages / "genlib" / "__init__.py").write_text(_COLLECTOR)
    (tmp_path / "ppo.py").write_text(
        textwrap.dedent(
            """\
            import torch
            from genlib import Collector


            def run(out):
                collector = Collector(torch.nn.Linear(8, 8), 6)
                with torch.profiler.profile(
                    activities=[torch.profiler.ProfilerActivity.CPU],
                    with_stack=True,
                    schedule=torch.profiler.schedule(wait=1, warmup=0, active=4, repeat=1),
                    on_trace_ready=lambda p: p.export_chrome_trace(out),
                ) as prof:
                    for data in collector:
                        for _ in range(2):
                            loss = data.sum().item()
                        prof.step()
            """
        )
    )
    out = tmp_path / "host_1.1700000000000.pt.trace.json"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(packages)])}
    subprocess.run(
        [sys.executable, "-c", f"import ppo; ppo.run({str(out)!r})"],
        env=env,
        cwd=tmp_path,
        check=True,
        capture_output=True,
    )
    report = analyze(str(out), source_roots=[str(tmp_path), str(packages)])
    by_line = {(s.line, s.line_exact): s for s in report.latent_sites}
    assert set(by_line) == {(13, True), (15, True)}
    collected = by_line[(13, True)]
    assert collected.library is not None and collected.library.func == "__iter__"


_BOX = """\
class Box:
    def __init__(self, **tensors):
        self.tensors = tensors

    def to(self, device):
        return Box(**{k: v.to(device) for k, v in self.tensors.items()})

    def cpu(self):
        return self.to("cpu")
"""


def test_the_users_cpu_of_a_container_is_the_users_copy(tmp_path: Path) -> None:
    """TorchRL's ``replay_buffer.extend(data_view.cpu())``: a TensorDict's ``cpu()`` moves
    each tensor with ``.to(device)`` in tensordict's code, whose line does not name the
    host, so the copy was neither listed nor counted (a walk; a tensor's ``.cpu()`` on the
    next line was). It is the user's line's copy, and the user's to move or drop."""
    packages = tmp_path / "site-packages"
    (packages / "boxlib").mkdir(parents=True)
    (packages / "boxlib" / "__init__.py").write_text(_BOX)
    (tmp_path / "loop.py").write_text(
        textwrap.dedent(
            """\
            import torch
            from boxlib import Box


            def run(out):
                model = torch.nn.Linear(4, 4)
                with torch.profiler.profile(
                    activities=[torch.profiler.ProfilerActivity.CPU],
                    with_stack=True,
                    schedule=torch.profiler.schedule(wait=1, warmup=0, active=3, repeat=1),
                    on_trace_ready=lambda p: p.export_chrome_trace(out),
                ) as prof:
                    for _ in range(5):
                        box = Box(out=model(torch.randn(8, 4, requires_grad=True)))
                        host = box.cpu()
                        prof.step()
            """
        )
    )
    out = tmp_path / "host_1.1700000000000.pt.trace.json"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(packages)])}
    subprocess.run(
        [sys.executable, "-c", f"import loop; loop.run({str(out)!r})"],
        env=env,
        cwd=tmp_path,
        check=True,
        capture_output=True,
    )
    report = analyze(str(out), source_roots=[str(tmp_path), str(packages)])
    [site] = report.latent_sites
    assert (site.line, site.line_exact, site.count) == (15, True, 3)
    assert site.kind == "device_to_host_copy"
    assert "library_code" not in site.advice


_DECORATED_LOGGER = """\
import functools


def _attach(func):
    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        return func(*args, **kwargs)

    return wrapper


def _noop(func):
    @functools.wraps(func)
    def wrapper_fn(*args, **kwargs):
        return func(*args, **kwargs)

    return wrapper_fn


def json_friendly(value):
    return value.item() if hasattr(value, "item") else value


@_attach
@_noop
@_attach
def log(data, step=None):
    return {key: json_friendly(value) for key, value in data.items()}
"""


def test_a_loggers_read_under_its_decorators_is_at_the_logging_call(tmp_path, monkeypatch):
    """wandb's ``log`` runs as three decorator frames (``wrapper``, ``wrapper_fn``,
    ``wrapper``) before ``log``: the call at the user's line was not found by that name, and
    the read's own name, ``item``, was matched to another line's ``val.item()``, exact (a
    walk). The fix is the user's: what and how often to log, not an edit of the logger."""
    program = _profiled_loop(
        "import wandb",
        [],
        [
            "loss = model(torch.ones(2, 4)).sum()",
            'wandb.log({"loss": loss}, step=step)',
            "if step % 100 == 99:",
            '    wandb.log({"val": loss.item()}, step=step)',
        ],
    )
    out = _run_program(tmp_path, monkeypatch, "wandb", {"__init__.py": _DECORATED_LOGGER}, program)
    report = analyze(str(out), source_roots=[str(tmp_path)])
    (site,) = report.latent_sites
    assert (site.line, site.line_exact, site.count) == (18, True, 3)
    assert site.advice.get("library_code") is None


def test_a_tensor_given_to_tensorboards_add_scalar_is_the_users_read(tmp_path):
    """``writer.add_scalar("loss", loss, step)`` copies the tensor to the host in torch's
    TensorBoard code (``make_np``): it was a library's copy, counted apart, and a compare of
    ``add_scalar(loss.item())`` against it said "fixed" (a walk)."""
    from torch.utils.tensorboard import SummaryWriter

    script = tmp_path / "w.py"
    script.write_text(
        textwrap.dedent(
            """\
            import torch


            def train(writer, steps, step_hook):
                model = torch.nn.Linear(4, 1)
                for step in range(steps):
                    loss = model(torch.ones(2, 4)).sum()
                    writer.add_scalar("loss", loss, step)
                    step_hook()
            """
        )
    )
    monkeypatch_path = str(tmp_path)
    sys.path.insert(0, monkeypatch_path)
    try:
        import importlib

        module = importlib.import_module("w")
        logdir = tmp_path / "logs" / "run"
        with torch.profiler.profile(
            activities=[torch.profiler.ProfilerActivity.CPU],
            with_stack=True,
            schedule=torch.profiler.schedule(wait=1, warmup=1, active=3),
            on_trace_ready=torch.profiler.tensorboard_trace_handler(str(logdir)),
        ) as prof:
            writer = SummaryWriter(str(tmp_path / "tb"))
            module.train(writer, 5, prof.step)
            writer.close()
    finally:
        sys.path.remove(monkeypatch_path)
        sys.modules.pop("w", None)
    report = analyze(str(logdir), source_roots=[str(tmp_path)])
    (site,) = report.latent_sites
    assert (site.line, site.line_exact, site.count) == (8, True, 3)
    assert site.kind == "device_to_host_copy"


_SIZE_IN_LIBRARY = """\
def padded(lengths, x):
    longest = lengths.max()
    return x[:, :longest]
"""


def test_a_size_a_librarys_line_reads_gets_the_size_fix(tmp_path, monkeypatch):
    """pytorch-forecasting slices by a tensor's maximum in its own code (``_tft.py``): the
    library's line was known to read a size (``read_as_size``), but the fix came from the
    user's ``trainer.fit(...)`` line: "keep the value on the device" (a walk, 5 of TFT's 17
    reads a step)."""
    program = _profiled_loop(
        "from sizelib.ops import padded",
        [],
        ["x = model(torch.ones(2, 4))", "padded(torch.tensor([2, 3]), x)"],
    )
    out = _run_program(tmp_path, monkeypatch, "sizelib", {"ops.py": _SIZE_IN_LIBRARY}, program)
    report = analyze(str(out), source_roots=[str(tmp_path)])
    (site,) = report.latent_sites
    assert site.library is not None and (site.library.line, site.library.line_exact) == (3, True)
    assert site.advice["title"].startswith("This read sets a size")


def test_a_checkpoint_writers_unrun_copies_are_told_to_save_less_often() -> None:
    """A walk of accelerate's ``save_state`` every N steps: safetensors' ``tensor.to('cpu')``
    of each tensor off the host, unrun on the CPU, was told "an edit of the library's own
    code: no setting of it is known"; how often a checkpoint is saved is the user's."""
    from tb_syncfinder.outputs.text import unrun_syncs_text

    unrun = {
        "file": "safetensors/torch.py",
        "line": 479,
        "func": "_to_ndarray",
        "code": "tensor.to('cpu')",
        "guard": "tensor.device.type != 'cpu'",
        "library": "safetensors",
        "calls": 8,
    }
    text = unrun_syncs_text([{"steps": 5, "unrun_syncs": [unrun]}])
    assert text is not None and "save less often" in text
    assert "no setting of it is known" not in text
    other = {**unrun, "file": "ultralytics/algo.py", "library": "ultralytics"}
    assert "no setting of it is known" in (
        unrun_syncs_text([{"steps": 5, "unrun_syncs": [other]}]) or ""
    )


@pytest.mark.parametrize(
    ("code", "line", "guard"),
    [
        # TransformerLens' generate and sampling: the read only where the caller's argument
        # holds, in the test itself or under it.
        (
            "def generate(self, stop_at_eos=True):\n"
            "    if stop_at_eos and finished.all():\n"
            "        return\n",
            2,
            "stop_at_eos and finished.all()",
        ),
        (
            "def sample(logits, freq_penalty=0.0):\n"
            "    if freq_penalty > 0:\n"
            "        counts = torch.bincount(tokens)\n",
            3,
            "freq_penalty > 0",
        ),
        # pytorch-metric-learning's statistics: an attribute of the object.
        (
            "def set_stats(self, d):\n    if self.collect_stats:\n"
            "        self.m = d.mean().item()\n",
            3,
            "self.collect_stats",
        ),
        # A test of computed values, or a remainder's: no setting.
        ("def f(x):\n    if x.sum() > 0:\n        y = x.item()\n", 3, None),
        ("def f(x, n):\n    if n % 10 == 0:\n        y = x.item()\n", 3, None),
        ("def f(x):\n    if x.any():\n        return\n", 2, None),
        # Comparisons of tensors (a review): a parameter, an element, a buffer.
        (
            "def f(self, loss):\n    if loss < self.best:\n        self.v = loss.item()\n",
            3,
            None,
        ),
        ("def f(x):\n    if x[0] > 0:\n        y = x.item()\n", 3, None),
        ("def f(self, x):\n    if self.count > 100:\n        y = x.item()\n", 3, None),
        # An attribute named as a setting (skrl's tracking, a walk).
        (
            "def f(self, x):\n    if self.write_interval > 0:\n        y = x.item()\n",
            3,
            "self.write_interval > 0",
        ),
        # ... as a part of its name: ``logit_scale`` is no logging setting.
        ("def f(self, x):\n    if self.logit_scale > 0:\n        y = x.item()\n", 3, None),
    ],
)
def test_a_librarys_read_under_a_test_of_its_arguments_names_that_test(code, line, guard):
    """A TransformerLens walk: reads under ``if freq_penalty > 0:`` and in ``if stop_at_eos
    and finished.all():`` were told "an edit of transformer_lens' own code: no setting of it
    is known"; the caller's argument turns them off."""
    import ast

    from tb_syncfinder.source import setting_guard

    assert setting_guard(ast.parse(code).body[0], line) == guard


def test_the_setting_behind_a_librarys_read_is_said_in_its_fix() -> None:
    from tb_syncfinder.outputs.text import library_code_text

    site = {
        "advice": {"library_code": "transformer_lens"},
        "library": {"setting_guard": "freq_penalty > 0"},
    }
    assert library_code_text(site) == (
        "(an edit of transformer_lens' own code, which reads it only where `freq_penalty > 0` "
        "holds: the argument or setting of transformer_lens behind that test may avoid it)"
    )
