"""A Jupyter cell's syncs are placed in the notebook under the source roots that holds the
cell: ipykernel compiles a cell under ``<tmp>/ipykernel_<pid>/<murmur2 of its text>.py``, a
file that never exists, so the trace names that file.

The traces here are recorded by torch on the CPU from code compiled under ipykernel's name
for it, as ipykernel compiles a cell; ``test_a_notebook_run_by_a_real_kernel_*`` runs a
notebook in a real kernel (where ipykernel and nbclient are installed) to check the name.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tb_syncfinder import analyze
from tb_syncfinder.plugin.safety import SourceError, SourceGuard
from tb_syncfinder.source import _as_run, kernel_cell_hash

torch = pytest.importorskip("torch")

STEP_CELL = """import torch


def train_step(x, step):
    y = x @ x
    loss = y.mean()
    total = loss.item()
    return total"""
ITEM_LINE = 7  # of the cell, as IPython counts it ("Cell In[3], line 7")

LOOP_CELL = """def profile_steps(trace_path, steps=3):
    with torch.profiler.profile(
        activities=[torch.profiler.ProfilerActivity.CPU],
        with_stack=True,
        schedule=torch.profiler.schedule(wait=0, warmup=1, active=steps),
        on_trace_ready=lambda prof: prof.export_chrome_trace(trace_path),
    ) as prof:
        for n in range(steps + 1):
            train_step(torch.randn(8, 8), n)
            prof.step()"""


def _reference_murmur2(data: str, seed: int) -> int:
    """ipykernel's own ``compiler.murmur2_x86``, as it is written there."""
    m = 0x5BD1E995
    chars = [chr(d) for d in str.encode(data, "utf8")]
    length = len(chars)
    h = seed ^ length
    rounded_end = length & 0xFFFFFFFC
    for i in range(0, rounded_end, 4):
        k = (
            (ord(chars[i]) & 0xFF)
            | ((ord(chars[i + 1]) & 0xFF) << 8)
            | ((ord(chars[i + 2]) & 0xFF) << 16)
            | (ord(chars[i + 3]) << 24)
        )
        k = (k * m) & 0xFFFFFFFF
        k ^= k >> 24
        k = (k * m) & 0xFFFFFFFF
        h = (h * m) & 0xFFFFFFFF
        h ^= k
    val = length & 0x03
    k = 0
    if val == 3:
        k = (ord(chars[rounded_end + 2]) & 0xFF) << 16
    if val in [2, 3]:
        k |= (ord(chars[rounded_end + 1]) & 0xFF) << 8
    if val in [1, 2, 3]:
        k |= ord(chars[rounded_end]) & 0xFF
        h ^= k
        h = (h * m) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * m) & 0xFFFFFFFF
    h ^= h >> 15
    return h


def test_a_cells_number_is_ipykernels_for_texts_of_every_length_and_script() -> None:
    for text in ["", "a", "ab", "abc", "abcd", STEP_CELL, LOOP_CELL, "x = 'ü€😀'\n", "é" * 7]:
        assert kernel_cell_hash(text) == _reference_murmur2(text, 0xC70F6907), text


def _cell_file(pid: int, text: str) -> str:
    return f"{tempfile.gettempdir()}/ipykernel_{pid}/{kernel_cell_hash(text)}.py"


def _run_as_cells(cells: list[str], trace: Path, pid: int = 4242) -> None:
    """Each cell's code compiled under ipykernel's name for it and run, as a kernel runs
    a notebook's cells; the last profiles the steps into ``trace``."""
    namespace: dict[str, object] = {}
    for text in cells:
        exec(compile(text, _cell_file(pid, text), "exec"), namespace)  # noqa: S102
    trace.parent.mkdir(parents=True, exist_ok=True)
    namespace["profile_steps"](str(trace))  # type: ignore[operator]


def _notebook(path: Path, cells: list[str], first_count: int = 3) -> None:
    """A notebook as Jupyter saves it (nbformat 4, one JSON string per source line)."""
    document = {
        "cells": [
            {"cell_type": "markdown", "id": "intro", "metadata": {}, "source": ["# Training\n"]},
            *(
                {
                    "cell_type": "code",
                    "execution_count": first_count + i,
                    "id": f"c{i}",
                    "metadata": {},
                    "outputs": [],
                    "source": text.splitlines(keepends=True),
                }
                for i, text in enumerate(cells)
            ),
        ],
        "metadata": {},
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    path.write_text(json.dumps(document, indent=1, sort_keys=True, ensure_ascii=False) + "\n")


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A notebook's two cells run as a kernel runs them, profiled into logs/run."""
    folder = tmp_path_factory.mktemp("notebook")
    _run_as_cells([STEP_CELL, LOOP_CELL], folder / "logs" / "run" / "w.pt.trace.json")
    return folder


def test_a_cells_sync_is_placed_in_its_notebook_cell_at_the_exact_line(
    recorded: Path, tmp_path: Path
) -> None:
    _notebook(tmp_path / "train.ipynb", [STEP_CELL, LOOP_CELL])
    report = analyze(recorded / "logs", source_roots=[str(tmp_path)])
    (site,) = report.latent_sites
    assert site.file == _cell_file(4242, STEP_CELL)  # what the trace names, as before
    assert (site.line, site.line_exact, site.func) == (ITEM_LINE, True, "train_step")
    assert site.cell is not None
    assert (site.cell.notebook, site.cell.index, site.cell.execution_count) == (
        str(tmp_path / "train.ipynb"),
        2,  # after the markdown cell
        3,
    )
    assert site.cell.copies == 1


def test_the_terminal_names_the_notebook_and_the_cell_as_ipython_does(
    recorded: Path, tmp_path: Path
) -> None:
    _notebook(tmp_path / "train.ipynb", [STEP_CELL, LOOP_CELL])
    shown = subprocess.run(
        [sys.executable, "-m", "tb_syncfinder", "report", str(recorded / "logs")],
        capture_output=True,
        text=True,
        cwd=tmp_path,  # the notebook's folder: the default source root
        env={**os.environ, "COLUMNS": "120"},
        timeout=120,
        check=True,
    ).stdout
    assert f"train.ipynb In[3]:{ITEM_LINE} " in shown
    assert "ipykernel_4242" not in shown


def test_a_cell_edited_since_the_run_is_not_guessed(recorded: Path, tmp_path: Path) -> None:
    """Another text is another cell: the notebook as saved no longer holds the code that
    ran, so nothing is placed in it and the recorded line stays, inexact."""
    edited = STEP_CELL.replace("total = loss.item()", "total = loss.detach()")
    _notebook(tmp_path / "train.ipynb", [edited, LOOP_CELL])
    (site,) = analyze(recorded / "logs", source_roots=[str(tmp_path)]).latent_sites
    assert site.cell is None
    assert not site.line_exact


def test_copies_of_a_cell_are_counted_and_the_notebook_holding_the_runs_cells_named(
    recorded: Path, tmp_path: Path
) -> None:
    """An edited copy (``a_edited``: its loop cell changed) sorts first, a duplicate
    (``train-Copy1``) holds every cell too: the cells are named in the one notebook that
    holds all the trace's cells, by Jupyter's name for the original; the stack's frames
    too, so that one sync's cells are never named in two notebooks."""
    _notebook(tmp_path / "a_edited.ipynb", [STEP_CELL, LOOP_CELL + "\n# edited"], first_count=9)
    _notebook(tmp_path / "train.ipynb", [STEP_CELL, LOOP_CELL])
    _notebook(tmp_path / "train-Copy1.ipynb", [STEP_CELL, LOOP_CELL])
    data = analyze(recorded / "logs", source_roots=[str(tmp_path)]).to_json()
    (site,) = data["latent_sites"]
    assert (Path(site["cell"]["notebook"]).name, site["cell"]["copies"]) == ("train.ipynb", 3)
    named = {Path(f["cell"]["notebook"]).name for f in data["latent"][0]["stack"] if "cell" in f}
    assert named == {"train.ipynb"}


def test_each_experiments_trace_is_named_in_its_own_folders_copy_of_the_notebook(
    recorded: Path, tmp_path: Path
) -> None:
    """A notebook copied into each experiment's folder beside its logs: a run's cells are
    named in the copy beside them, as a script's copy is."""
    (trace,) = (recorded / "logs" / "run").iterdir()
    for experiment in ("a_exp", "b_exp"):
        (tmp_path / experiment / "logs" / "run").mkdir(parents=True)
        _notebook(tmp_path / experiment / "train.ipynb", [STEP_CELL, LOOP_CELL])
        (tmp_path / experiment / "logs" / "run" / trace.name).write_bytes(trace.read_bytes())
    for experiment in ("a_exp", "b_exp"):
        logs = tmp_path / experiment / "logs"
        (site,) = analyze(logs, source_roots=[str(tmp_path)]).latent_sites
        assert site.cell is not None and site.cell.notebook == str(
            tmp_path / experiment / "train.ipynb"
        )
    # Both in one analysis (one resolver; the traces come from one kernel, so they name
    # the cells alike): each trace's sync and its stack's frames in its own copy.
    data = analyze(tmp_path, source_roots=[str(tmp_path)]).to_json()
    for sync in data["latent"]:
        experiment = Path(sync["trace"]).parents[2].name
        named = {sync["source"]["cell"]["notebook"]}
        named |= {f["cell"]["notebook"] for f in sync["stack"] if "cell" in f}
        assert named == {str(tmp_path / experiment / "train.ipynb")}, (experiment, named)


def test_sarif_points_at_the_notebooks_json_line_that_holds_the_cells_line(
    recorded: Path, tmp_path: Path
) -> None:
    _notebook(tmp_path / "train.ipynb", [STEP_CELL, LOOP_CELL])
    out = subprocess.run(
        [sys.executable, "-m", "tb_syncfinder", "report", str(recorded / "logs")]
        + ["--format", "sarif", "--source-root", str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
        check=True,
    ).stdout
    (result,) = json.loads(out)["runs"][0]["results"]
    location = result["locations"][0]["physicalLocation"]
    assert location["artifactLocation"]["uri"] == "train.ipynb"
    line = location["region"]["startLine"]
    text = (tmp_path / "train.ipynb").read_text().splitlines()[line - 1]
    assert json.loads(text.strip().removesuffix(",")) == "    total = loss.item()\n"


def test_csv_names_the_notebook_and_the_cell_in_columns_of_their_own(
    recorded: Path, tmp_path: Path
) -> None:
    import csv
    import io

    _notebook(tmp_path / "train.ipynb", [STEP_CELL, LOOP_CELL])
    out = subprocess.run(
        [sys.executable, "-m", "tb_syncfinder", "report", str(recorded / "logs")]
        + ["--format", "csv", "--source-root", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    (row,) = csv.DictReader(io.StringIO(out))
    assert (row["notebook"], row["notebook_cell"], row["line"]) == (
        str(tmp_path / "train.ipynb"),
        "In[3]",
        str(ITEM_LINE),
    )


def test_the_tabs_source_view_reads_the_cell_from_the_notebook_inside_the_roots_only(
    tmp_path: Path,
) -> None:
    inside, outside = tmp_path / "project", tmp_path / "elsewhere"
    inside.mkdir()
    outside.mkdir()
    _notebook(inside / "train.ipynb", [STEP_CELL])
    _notebook(outside / "other.ipynb", [LOOP_CELL])
    lines = SourceGuard([str(inside)]).read(_cell_file(7, STEP_CELL), ITEM_LINE, 1)
    assert lines.lines == ["    loss = y.mean()", "    total = loss.item()", "    return total"]
    assert lines.path == str((inside / "train.ipynb").resolve())
    # A cell only a notebook outside the roots holds is not served.
    with pytest.raises(SourceError):
        SourceGuard([str(inside)]).read(_cell_file(7, LOOP_CELL), 1, 1)


NOTEBOOK_RUN = r"""
import json, sys
import nbformat
from nbclient import NotebookClient

cells = json.loads(sys.argv[1])
nb = nbformat.v4.new_notebook()
nb.cells = [nbformat.v4.new_code_cell(text) for text in cells]
NotebookClient(nb, timeout=300, kernel_name="python3").execute()
nbformat.write(nb, sys.argv[2])
"""


def test_a_notebook_run_by_a_real_kernel_is_placed_in_its_cells(tmp_path: Path) -> None:
    """The name checked against ipykernel itself: a notebook executed in a Jupyter kernel
    (nbclient), saved with its execution counts, profiled from its own cells."""
    pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    trace = tmp_path / "logs" / "run" / "w.pt.trace.json"
    cells = [STEP_CELL, LOOP_CELL, f"profile_steps({str(trace)!r})"]
    trace.parent.mkdir(parents=True)
    subprocess.run(
        [sys.executable, "-c", NOTEBOOK_RUN, json.dumps(cells), str(tmp_path / "train.ipynb")],
        check=True,
        timeout=600,
        cwd=tmp_path,
    )
    (site,) = analyze(tmp_path / "logs", source_roots=[str(tmp_path)]).latent_sites
    assert "ipykernel_" in site.file
    assert site.cell is not None
    assert (site.cell.index, site.cell.execution_count, site.line) == (1, 1, ITEM_LINE)
    assert site.line_exact


TWO_READS_CELL = """import torch


def train_step(x, step):
    y = x @ x
    peak = y.max().item()
    total = y.mean().item()
    return total + peak"""
ONE_READ_CELL = TWO_READS_CELL.replace("peak = y.max().item()", "peak = 0.0")


def test_compare_matches_a_cells_sites_across_an_edit_of_the_cell(tmp_path: Path) -> None:
    """Fixing one read of a cell gives the cell another name (ipykernel hashes its text):
    the function's reads are still one site, one line fewer, not one fixed and one new."""
    from tb_syncfinder.compare import compare

    reports = []
    for name, cell in (("base", TWO_READS_CELL), ("new", ONE_READ_CELL)):
        _run_as_cells([cell, LOOP_CELL], tmp_path / name / "logs" / "run" / "w.pt.trace.json")
        _notebook(tmp_path / name / "train.ipynb", [cell, LOOP_CELL])
        report = analyze(tmp_path / name / "logs", source_roots=[str(tmp_path / name)])
        reports.append(report.to_json())
    (row,) = compare(*reports)["latent_sites"]
    assert (row["status"], row["lines_fixed"], row["line"]) == ("better", [6], 7)
    assert row["cell"]["notebook"] == str(tmp_path / "new" / "train.ipynb")


def test_compare_matches_a_cell_the_notebook_no_longer_holds_with_its_edited_cell(
    tmp_path: Path,
) -> None:
    """Two runs of one notebook session, the first analysed after its cell was edited (the
    notebook holds only the new text, so the first run's cell keeps ipykernel's name): its
    reads are still the function's one site, fewer, not a new site and a fixed one, and the
    gate passes."""
    from tb_syncfinder.cli import main
    from tb_syncfinder.compare import compare

    _run_as_cells([TWO_READS_CELL, LOOP_CELL], tmp_path / "logs" / "run1" / "w.pt.trace.json")
    _run_as_cells([ONE_READ_CELL, LOOP_CELL], tmp_path / "logs" / "run2" / "w.pt.trace.json")
    _notebook(tmp_path / "train.ipynb", [ONE_READ_CELL, LOOP_CELL])
    base, new = (
        analyze(tmp_path / "logs" / run, source_roots=[str(tmp_path)]).to_json()
        for run in ("run1", "run2")
    )
    assert base["latent_sites"][0]["cell"] is None and new["latent_sites"][0]["cell"]
    (row,) = compare(base, new)["latent_sites"]
    assert (row["status"], row["func"]) == ("better", "train_step")
    assert row["cell"]["notebook"] == str(tmp_path / "train.ipynb")
    logs = tmp_path / "logs"
    argv = ["compare", str(logs / "run1"), str(logs / "run2"), "--fail-on-regression"]
    assert main([*argv, "--source-root", str(tmp_path)]) == 0


def test_compare_does_not_join_two_cells_top_level_reads_by_their_module_name() -> None:
    """Every cell's top-level code is ``<module>``: a read gone from one cell (not found,
    edited since) and another added in another cell are one fixed and one new, not one
    "same" row that lets the gate miss the new read."""
    from tb_syncfinder.compare import compare

    def report(site: dict) -> dict:
        return {"summary": {"step_count": 1}, "site_keys": 4, "traces": [], "sites": [site]}

    gone = {"file": _cell_file(1, "a.item()"), "func": "<module>", "kind": "scalar_readback"}
    added = {**gone, "file": _cell_file(1, "b.item()")}
    added["cell"] = {"notebook": "/n/train.ipynb", "index": 3, "id": "c3"}
    for site in (gone, added):
        site.update(ops=["aten::item"], count=1, host_wait_us=10.0, line=1)
    statuses = sorted(row["status"] for row in compare(report(gone), report(added))["sites"])
    assert statuses == ["fixed", "new"]


def test_in_the_kernel_a_saved_notebook_names_the_cell_and_linecache_serves_without_one(
    recorded: Path, tmp_path: Path
) -> None:
    """``analyze(prof)`` in the notebook: the kernel holds the cell's lines (``linecache``),
    so the line is exact either way; a notebook saved with the cell names it."""
    import linecache

    name = _cell_file(4242, STEP_CELL)
    linecache.cache[name] = (len(STEP_CELL), None, STEP_CELL.splitlines(True), name)
    try:
        (alone,) = analyze(recorded / "logs", source_roots=[str(tmp_path)]).latent_sites
        _notebook(tmp_path / "train.ipynb", [STEP_CELL, LOOP_CELL])
        (named,) = analyze(recorded / "logs", source_roots=[str(tmp_path)]).latent_sites
    finally:
        linecache.cache.pop(name, None)
    assert (alone.line, alone.line_exact, alone.cell) == (ITEM_LINE, True, None)
    assert (named.line, named.line_exact) == (ITEM_LINE, True)
    assert named.cell is not None and named.cell.execution_count == 3


def test_a_cell_no_notebook_held_is_looked_for_again_once_a_notebook_changes(
    recorded: Path, tmp_path: Path
) -> None:
    """The tab says to save the notebook: a result whose cell no notebook held records the
    notebooks it looked in, so that saving one is a change (the plugin analyses the trace
    again, a summary is stale) and the cell is found then."""
    from tb_syncfinder.engine import Options, analyze_trace
    from tb_syncfinder.models import result_stamps, stamps_hold

    notebook = tmp_path / "train.ipynb"
    _notebook(notebook, [STEP_CELL.replace("loss.item()", "loss.detach()"), LOOP_CELL])
    (trace,) = (recorded / "logs" / "run").iterdir()
    options = Options(source_roots=[str(tmp_path)])
    before = analyze_trace(str(trace), options)
    stamps = result_stamps(before)
    assert str(notebook) in stamps and all(s.source.cell is None for s in before.latent)
    _notebook(notebook, [STEP_CELL, LOOP_CELL])  # saved with the cell as it ran
    os.utime(notebook, ns=(notebook.stat().st_atime_ns, notebook.stat().st_mtime_ns + 10**9))
    assert not stamps_hold(stamps)
    after = analyze_trace(str(trace), options)
    assert {s.source.line for s in after.latent if s.source.cell} == {ITEM_LINE}


def test_notebooks_that_cannot_be_read_are_passed_over_not_fatal(
    recorded: Path, tmp_path: Path
) -> None:
    """A notebook of invalid UTF-8, one with a BOM, and a FIFO named ``.ipynb`` beside the
    one that holds the cell: the cell is found, nothing waits for a writer, nothing fails."""
    (tmp_path / "a_bad.ipynb").write_bytes(b'{"cells":[{"cell_type":"code","source":"x = \xe9"}]}')
    if hasattr(os, "mkfifo"):
        os.mkfifo(tmp_path / "b_pipe.ipynb")
    _notebook(tmp_path / "c_train.ipynb", [STEP_CELL, LOOP_CELL])
    bom = tmp_path / "d_bom.ipynb"
    _notebook(bom, [STEP_CELL, LOOP_CELL])
    bom.write_bytes(b"\xef\xbb\xbf" + bom.read_bytes())
    (site,) = analyze(recorded / "logs", source_roots=[str(tmp_path)]).latent_sites
    assert site.cell is not None and Path(site.cell.notebook).name == "c_train.ipynb"
    assert site.cell.copies == 2  # the BOM's notebook holds it too
    guard = SourceGuard([str(tmp_path)])
    assert guard.read(_cell_file(5, STEP_CELL), ITEM_LINE, 0).lines == ["    total = loss.item()"]


def test_the_source_view_checks_a_cell_name_as_any_other_and_sees_a_notebook_saved_later(
    tmp_path: Path,
) -> None:
    guard = SourceGuard([str(tmp_path)])
    for bad in ("/" + "a" * 300 + "/ipykernel_1/2.py", "x" * 10_000 + "/ipykernel_1/2.py"):
        with pytest.raises(SourceError) as raised:
            guard.read(bad, 1, 0)
        assert raised.value.status in (400, 403, 404)  # an answer, not an OSError (a 500)
    # The hint says to save the notebook: the view finds the cell once it is.
    notebook = tmp_path / "train.ipynb"
    _notebook(notebook, [LOOP_CELL])
    with pytest.raises(SourceError):
        guard.read(_cell_file(9, STEP_CELL), ITEM_LINE, 0)
    _notebook(notebook, [STEP_CELL, LOOP_CELL])
    os.utime(notebook, ns=(notebook.stat().st_atime_ns, notebook.stat().st_mtime_ns + 10**9))
    assert guard.read(_cell_file(9, STEP_CELL), ITEM_LINE, 0).lines == ["    total = loss.item()"]


def test_a_cell_with_leading_empty_lines_and_a_magic_keeps_its_exact_line(tmp_path: Path) -> None:
    """IPython compiles a cell without its leading empty lines, a magic as a call on its
    line: the trace's lines are of that text, and so is the line named (a real kernel)."""
    pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    trace = tmp_path / "logs" / "run" / "w.pt.trace.json"
    step = "\n\n%env TB_SYNCFINDER_TEST=1\n" + STEP_CELL
    cells = [step, LOOP_CELL, f"profile_steps({str(trace)!r})"]
    trace.parent.mkdir(parents=True)
    subprocess.run(
        [sys.executable, "-c", NOTEBOOK_RUN, json.dumps(cells), str(tmp_path / "train.ipynb")],
        check=True,
        timeout=600,
        cwd=tmp_path,
    )
    (site,) = analyze(tmp_path / "logs", source_roots=[str(tmp_path)]).latent_sites
    assert site.cell is not None and site.line_exact
    assert site.line == ITEM_LINE + 1  # the magic's line; the empty lines above are dropped
    guard = SourceGuard([str(tmp_path)])
    assert guard.read(site.file, site.line, 0).lines == ["    total = loss.item()"]
    # The view shows the magic as written, not the statement IPython ran in its place.
    assert guard.read(site.file, 1, 0).lines == ["%env TB_SYNCFINDER_TEST=1"]


def test_a_cell_whose_first_line_is_indented_is_read_dedented_as_ipython_runs_it(
    tmp_path: Path,
) -> None:
    """A block pasted from inside a function: IPython takes the first line's indent off
    every line before compiling it, so the cell runs, and its lines parse as it ran."""
    transform = pytest.importorskip("IPython.core.inputtransformer2").TransformerManager()
    pasted = "".join(f"    {line}" if line.strip() else line for line in STEP_CELL.splitlines(True))
    trace = tmp_path / "logs" / "run" / "w.pt.trace.json"
    namespace: dict[str, object] = {}
    for raw in (pasted, LOOP_CELL):
        # As ipykernel runs a cell: IPython's text compiled under the raw text's name.
        code = compile(transform.transform_cell(raw), _cell_file(4343, raw), "exec")
        exec(code, namespace)  # noqa: S102
    trace.parent.mkdir(parents=True)
    namespace["profile_steps"](str(trace))  # type: ignore[operator]
    _notebook(tmp_path / "train.ipynb", [pasted, LOOP_CELL])
    (site,) = analyze(tmp_path / "logs", source_roots=[str(tmp_path)]).latent_sites
    assert site.cell is not None and (site.line, site.line_exact) == (ITEM_LINE, True)
    assert site.func == "train_step"
    lines = SourceGuard([str(tmp_path)]).read(site.file, site.line, 0).lines
    assert lines == ["        total = loss.item()"]  # the view shows the cell as written


def _saved_with_outputs(notebook: Path) -> None:
    """The notebook saved again as Jupyter autosaves it while a cell prints: new outputs
    and metadata, the same code; a later mtime."""
    document = json.loads(notebook.read_text())
    for cell in document["cells"]:
        if cell["cell_type"] == "code":
            cell["outputs"] = [{"name": "stdout", "output_type": "stream", "text": ["step 9\n"]}]
    document["metadata"]["widgets"] = {"state": {}}
    mtime = notebook.stat().st_mtime_ns
    notebook.write_text(json.dumps(document, indent=1))
    os.utime(notebook, ns=(mtime + 10**9, mtime + 10**9))


def test_a_save_of_new_outputs_leaves_a_result_standing_and_an_edit_of_code_does_not(
    recorded: Path, tmp_path: Path
) -> None:
    """Jupyter saves a notebook every two minutes while a training cell prints: a result
    whose lines are in its cells is stale only once one of the trace's cells changes
    (edited, moved), not another cell, as a summary and the plugin's cache read it."""
    from tb_syncfinder.engine import Options, analyze_trace
    from tb_syncfinder.models import result_stamps, stamps_hold

    notebook = tmp_path / "train.ipynb"
    _notebook(notebook, [STEP_CELL, LOOP_CELL])
    (trace,) = (recorded / "logs" / "run").iterdir()
    result = analyze_trace(str(trace), Options(source_roots=[str(tmp_path)]))
    assert {s.source.cell.notebook for s in result.latent if s.source.cell} == {str(notebook)}
    stamps = result_stamps(result)
    _saved_with_outputs(notebook)
    assert stamps_hold(stamps)
    # Another cell added and run (not one the trace ran): nothing the result shows changed.
    document = json.loads(notebook.read_text())
    other = {**document["cells"][1], "id": "new", "execution_count": 20}
    document["cells"].append({**other, "source": ["print('hello')"]})
    notebook.write_text(json.dumps(document, indent=1))
    assert stamps_hold(stamps)
    document["cells"].insert(1, {**other, "id": "above", "source": ["x = 1"]})
    notebook.write_text(json.dumps(document, indent=1))  # a cell added above: moved
    assert not stamps_hold(stamps)
    _notebook(notebook, [STEP_CELL + "\n", LOOP_CELL])
    assert not stamps_hold(stamps)


def test_the_plugin_analyses_again_on_a_code_edit_of_a_cells_notebook_not_on_an_autosave(
    recorded: Path, tmp_path: Path
) -> None:
    """The running TensorBoard: an autosave of outputs is no reason to analyse again (a
    large trace took seconds of a core every two minutes), nor to read the notebook at
    every poll; saving an edited cell is."""
    from tb_syncfinder.engine import Options
    from tb_syncfinder.models import source_files_of
    from tb_syncfinder.plugin.cache import DiskCache
    from tb_syncfinder.plugin.loader import TraceLoader

    notebook = tmp_path / "src" / "train.ipynb"
    notebook.parent.mkdir()
    _notebook(notebook, [STEP_CELL, LOOP_CELL])
    loader = TraceLoader(
        [(None, str(recorded / "logs"))],
        Options(source_roots=[str(notebook.parent)]),
        DiskCache(None),
        use_processes=False,
        reload_interval_s=3600,
    )
    loader.poll()
    assert loader.wait_idle(60)
    run = loader.get_run("run")
    (first,) = loader.results(run, None, None)
    assert str(notebook) in source_files_of(first)
    generation = run.generation
    _saved_with_outputs(notebook)
    reads = []
    import tb_syncfinder.source as source_module

    real = source_module.stamp_content

    def counted(path: str) -> object:
        reads.append(path)
        return real(path)

    source_module.stamp_content = counted
    try:
        for _ in range(3):
            loader.poll()
            assert loader.wait_idle(60)
    finally:
        source_module.stamp_content = real
    assert run.generation == generation and loader.results(run, None, None) == [first]
    assert reads == [str(notebook)]  # read once for the save, not at every poll
    _notebook(notebook, [STEP_CELL.replace("loss.item()", "float(loss)"), LOOP_CELL])
    loader.poll()
    assert loader.wait_idle(60)
    assert run.generation > generation
    (second,) = loader.results(run, None, None)
    assert all(s.source.cell is None for s in second.latent)  # no notebook holds the cell now


def test_a_summary_of_a_cells_trace_outlives_an_autosave_not_an_edit_of_the_cell(
    recorded: Path, tmp_path: Path
) -> None:
    """``report --summaries`` on a cluster: the summary stored beside the trace still
    answers after Jupyter saved new outputs, and not after the cell's code changed."""
    from tb_syncfinder.discovery import find_traces
    from tb_syncfinder.engine import Options, analyze_trace
    from tb_syncfinder.summaries import SummaryStore

    notebook = tmp_path / "train.ipynb"
    _notebook(notebook, [STEP_CELL, LOOP_CELL])
    logs = tmp_path / "logs"
    (logs / "run").mkdir(parents=True)
    (trace,) = (recorded / "logs" / "run").iterdir()
    (logs / "run" / trace.name).write_bytes(trace.read_bytes())
    (ref,) = find_traces(str(logs))
    options = Options(source_roots=[str(tmp_path)])
    store = SummaryStore(str(tmp_path / "summaries"))
    assert store.put(ref, analyze_trace(ref, options), options)
    _saved_with_outputs(notebook)
    assert store.get(ref, options).same_options
    _notebook(notebook, [STEP_CELL.replace("loss.item()", "float(loss)"), LOOP_CELL])
    assert not store.get(ref, options).same_options


def test_stack_frames_of_other_cells_are_named_by_their_cells_and_others_carry_no_cell(
    recorded: Path, tmp_path: Path
) -> None:
    """``train_step`` is defined in one cell and called by ``profile_steps`` in the next:
    the detail's stack shows each frame's cell, not ipykernel's file names."""
    _notebook(tmp_path / "train.ipynb", [STEP_CELL, LOOP_CELL])
    data = analyze(recorded / "logs", source_roots=[str(tmp_path)]).to_json()
    sync = data["latent"][0]
    cells = {f["func"]: f["cell"] for f in sync["stack"] if "cell" in f}
    assert {func: cell["execution_count"] for func, cell in cells.items()} == {
        "train_step": 3,
        "profile_steps": 4,
    }
    assert cells["profile_steps"]["notebook"] == str(tmp_path / "train.ipynb")
    others = [f for f in sync["stack"] if f["func"] not in cells]
    assert others and all(set(f) == {"file", "line", "func", "user"} for f in others)


def test_the_annotated_trace_names_a_cells_sync_by_its_notebook_cell(tmp_path: Path) -> None:
    from tb_syncfinder.cli import main
    from tests.kineto_builder import KinetoTraceBuilder, item_sync

    builder = KinetoTraceBuilder()
    with builder.step(0):
        item_sync(builder, stack=[(_cell_file(4242, STEP_CELL), 4, "train_step")])
    trace = tmp_path / "logs" / "run" / "w.pt.trace.json"
    builder.write(trace)
    _notebook(tmp_path / "train.ipynb", [STEP_CELL, LOOP_CELL])
    out = tmp_path / "annotated.json"
    argv = ["report", str(trace), "--source-root", str(tmp_path), "--annotate", str(out)]
    assert main([*argv, "-o", str(tmp_path / "report")]) == 0
    events = json.loads(out.read_text())["traceEvents"]
    sources = {e["args"]["source"] for e in events if e.get("cat") == "sync_advisor"}
    assert sources == {f"{tmp_path / 'train.ipynb'} In[3]:{ITEM_LINE}"}


# Cells whose lines IPython runs as written, or as a call in a magic's place: black's layout
# of a %-format continued on the next line, a comparison continued, strings and comments
# holding what looks like a magic, a backslash continuation, prompts of a pasted session.
IPYTHON_CELLS = [
    'print(\n    "epoch %d loss %.4f"\n    % (epoch, loss.item())\n)\n%time f()\n',
    "keep = (\n    y\n    != 0\n)\n!ls -l\nfiles = !ls\n",
    'doc = """\n%not a magic\n!nor this\n"""\n%env A=1\n',
    "x = 1 + \\\n    2  # % comment \\\n%who\n",
    "for i in range(3):\n    %time g(i)\n    y = [\n        i,\n        !i,\n    ]\n",
    "s = 'it\\'s'  # (\n%pwd\n",
    ">>> x = torch.ones(3)\n>>> idx = x.nonzero()\n... \n",
    "In [3]: x = torch.ones(3)\n   ...: y = x.sum()\n",
    "    a = 1\n    %time b = a\n      c = 2\n",
    "s = 'a\u2028%b'  # a line separator inside a string is text\n%pwd\n",
]


@pytest.mark.parametrize("cell", IPYTHON_CELLS)
def test_a_cell_is_read_line_for_line_as_ipython_transforms_it(cell: str) -> None:
    """Against IPython's own transformer: a line IPython runs as a call in a magic's place
    is a ``pass`` here (an ``%`` continuing a statement is Python's operator: taken for a
    magic, black's layout of a %-format lost every exact line of its cell); every other
    line is what IPython compiles; the view's text is the cell as written."""
    transform = pytest.importorskip("IPython.core.inputtransformer2").TransformerManager()
    compiled, shown = _as_run(cell)
    ran = transform.transform_cell(cell).splitlines()
    ours = compiled.splitlines()
    assert len(ours) == len(ran), (ours, ran)
    for mine, theirs in zip(ours, ran, strict=True):
        if "get_ipython()" in theirs:
            assert mine.strip() == "pass" and mine[: -len("pass")] == theirs[: len(mine) - 4]
        else:
            assert mine == theirs
    assert shown.splitlines() == cell.splitlines()


def test_a_percent_format_continued_on_its_own_line_keeps_the_cells_exact_lines(
    tmp_path: Path,
) -> None:
    """black writes a long %-format's operator at the start of a line: the mask and the
    read in that cell are named at their own lines, not at the cell's def line."""
    step = (
        "import torch\n"
        "\n"
        "\n"
        "def train_step(x, step):\n"
        "    y = (x @ x).relu()\n"
        "    loss = y.mean()\n"
        "    print(\n"
        '        "step %d loss %.4f"\n'
        "        % (step, loss.item())\n"
        "    )\n"
        "    return y"
    )
    _run_as_cells([step, LOOP_CELL], tmp_path / "logs" / "run" / "w.pt.trace.json")
    _notebook(tmp_path / "train.ipynb", [step, LOOP_CELL])
    sites = analyze(tmp_path / "logs", source_roots=[str(tmp_path)]).latent_sites
    reads = [s for s in sites if s.func == "train_step"]
    assert reads and all(s.cell is not None and s.line_exact for s in reads)
    assert {s.line for s in reads} == {9}


def test_a_notebook_saved_after_the_analysis_beside_the_others_is_a_change_a_save_is_not(
    recorded: Path, tmp_path: Path
) -> None:
    """The cell was not found (its notebook not saved yet: VS Code's untitled notebook);
    saving it under the roots, beside the notebooks there, makes the result stale, so the
    plugin analyses the trace again. Jupyter's save of another notebook (through a hidden
    copy beside it) moves the folder's mtime and changes nothing."""
    from tb_syncfinder.engine import Options, analyze_trace
    from tb_syncfinder.models import result_stamps, stamps_hold

    other = tmp_path / "other.ipynb"
    _notebook(other, [LOOP_CELL])
    (trace,) = (recorded / "logs" / "run").iterdir()
    options = Options(source_roots=[str(tmp_path)])
    before = analyze_trace(str(trace), options)
    assert all(s.source.cell is None for s in before.latent)
    stamps = result_stamps(before)
    # As jupyter_server saves: a hidden copy beside it while it writes, then removed.
    backup = tmp_path / ".~other.ipynb"
    backup.write_text(other.read_text())
    _saved_with_outputs(other)
    folder = os.stat(tmp_path)
    os.utime(tmp_path, ns=(folder.st_atime_ns, folder.st_mtime_ns + 10**9))
    assert stamps_hold(stamps)  # polled while the copy is there
    backup.unlink()
    assert stamps_hold(stamps)
    _notebook(tmp_path / "Untitled-1.ipynb", [STEP_CELL, LOOP_CELL])
    os.utime(tmp_path, ns=(folder.st_atime_ns, folder.st_mtime_ns + 2 * 10**9))
    assert not stamps_hold(stamps)
    after = analyze_trace(str(trace), options)
    assert {s.source.line for s in after.latent if s.source.cell} == {ITEM_LINE}


def test_sarif_points_at_no_line_of_a_cell_whose_text_changed_since_the_analysis(
    tmp_path: Path,
) -> None:
    """A report rendered once the notebook was edited: the cell at the recorded place holds
    other code now, so no line of it is pointed at (the file's first line instead)."""
    from tb_syncfinder.outputs.sarif import notebook_file_line

    notebook = tmp_path / "train.ipynb"
    _notebook(notebook, [STEP_CELL, LOOP_CELL])
    ran = kernel_cell_hash(STEP_CELL)
    line = notebook_file_line(str(notebook), 2, ITEM_LINE, ran)
    assert line is not None and "total = loss.item()" in notebook.read_text().splitlines()[line - 1]
    _notebook(notebook, [LOOP_CELL, STEP_CELL])  # cells moved: index 2 is the loop's now
    assert notebook_file_line(str(notebook), 2, ITEM_LINE, ran) is None


WINDOW_A_CELL = """def step_a(x):
    y = x @ x
    return y.mean().item()"""
WINDOW_B_CELL = """def step_b(x):
    y = x + x
    return y.sum().item()"""
WINDOW_LOOP_CELL = """import torch


def profile_steps(trace_path, steps=8):
    with torch.profiler.profile(
        activities=[torch.profiler.ProfilerActivity.CPU],
        with_stack=True,
        schedule=torch.profiler.schedule(wait=0, warmup=1, active=steps),
        on_trace_ready=lambda prof: prof.export_chrome_trace(trace_path),
    ) as prof:
        for n in range(steps + 1):
            x = torch.randn(8, 8)
            for _ in range(20):
                (step_a if n < 5 else step_b)(x)
            prof.step()"""


def test_a_trace_read_in_windows_is_stamped_by_the_cells_of_all_its_windows(
    tmp_path: Path,
) -> None:
    """The first steps run one cell's function, the last another's: read in windows, the
    result still goes stale when the first cell is edited, as read whole."""
    from tb_syncfinder.engine import Options, analyze_trace
    from tb_syncfinder.models import result_stamps, stamps_hold

    cells = [WINDOW_A_CELL, WINDOW_B_CELL, WINDOW_LOOP_CELL]
    trace = tmp_path / "logs" / "run" / "w.pt.trace.json"
    _run_as_cells(cells, trace)
    notebook = tmp_path / "src" / "train.ipynb"
    notebook.parent.mkdir()
    _notebook(notebook, cells)
    windowed = Options(source_roots=[str(notebook.parent)], window_bytes=trace.stat().st_size // 4)
    result = analyze_trace(str(trace), windowed)
    assert result.info.windows > 1
    assert {s.source.func for s in result.latent if s.source.cell} >= {"step_a", "step_b"}
    stamps = result_stamps(result)
    _notebook(notebook, [WINDOW_A_CELL.replace(".item()", ".tolist()"), *cells[1:]])
    os.utime(notebook, ns=(notebook.stat().st_atime_ns, notebook.stat().st_mtime_ns + 10**9))
    assert not stamps_hold(stamps)


def test_running_the_profiling_cell_again_leaves_the_earlier_traces_standing(
    recorded: Path, tmp_path: Path
) -> None:
    """Each profiling run runs the profiling cell again (In[5], then In[9]): that is no
    change to the traces recorded before, which would all be analysed again."""
    from tb_syncfinder.engine import Options, analyze_trace
    from tb_syncfinder.models import result_stamps, stamps_hold

    notebook = tmp_path / "train.ipynb"
    _notebook(notebook, [STEP_CELL, LOOP_CELL])
    (trace,) = (recorded / "logs" / "run").iterdir()
    stamps = result_stamps(analyze_trace(str(trace), Options(source_roots=[str(tmp_path)])))
    _notebook(notebook, [STEP_CELL, LOOP_CELL], first_count=9)
    assert stamps_hold(stamps)


def test_what_a_notebook_holds_reads_the_same_at_analysis_and_at_a_poll(tmp_path: Path) -> None:
    """The analysis stamps a notebook from the cells it hashed, a poll from a light read:
    the two agree, or every poll would take an unchanged notebook for a changed one."""
    from tb_syncfinder.source import SourceResolver, stamp_content

    cells = ["\n%time x = 1\n", STEP_CELL, "%%capture\nprint(1)", LOOP_CELL, "", "  y = 2"]
    notebook = tmp_path / "train.ipynb"
    _notebook(notebook, cells)
    resolver = SourceResolver([str(tmp_path)])
    assert resolver.frame_cell(_cell_file(1, STEP_CELL)) is not None
    assert resolver._notebooks_read[str(notebook)][2] == stamp_content(str(notebook))
