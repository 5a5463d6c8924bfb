"""Real H200 recordings of ``torch.linalg``'s error checks (docs/validation.md, section
11): ``inv``, ``solve``, ``cholesky``, ``lu_factor`` and ``eigh`` read their error code on
the host, their ``_ex`` forms do not. ``gpu_linalg/linalg_checks_probe.*`` (``bench/
record_linalg_checks.py``) calls each at its own line, profiled and under
``torch.cuda.set_sync_debug_mode("warn")``; ``gpu_linalg/pairs.json`` and its two traces
(``bench/record_savings_pairs.py --only linalg_checks``) are a GPU-bound training loop with
a ``cholesky`` each step and its ``cholesky_ex`` fix, timed without the profiler. The
scripts beside them are the sources the traces name. No GPU is needed here; the CPU test
records its own trace with torch."""

from __future__ import annotations

import importlib.util
import json
import statistics
import sys
from pathlib import Path

import pytest

from tb_syncfinder import analyze

HERE = Path(__file__).resolve().parent / "gpu_linalg"
PROBE = json.loads((HERE / "linalg_checks_probe.json").read_text(encoding="utf-8"))
PAIRS = json.loads((HERE / "pairs.json").read_text(encoding="utf-8"))
MORE = json.loads((HERE / "linalg_checks_more.json").read_text(encoding="utf-8"))
EX_TITLE = "Use the torch.linalg _ex form and check its info later"
NEGATIVE_POWER_TITLE = "Invert with inv_ex, then raise to a positive power"
EIGH_TITLE = "Call torch.linalg.eigh less often"
LESS_OFTEN = "Call this torch.linalg function less often"
PROBE_SOURCE = (HERE / "record_linalg_checks.py").read_text(encoding="utf-8").splitlines()


def _warned_lines(info: dict | None = None) -> set[int]:
    """The lines of the probe's file torch warned at (``file:line message`` each)."""
    warned = (PROBE if info is None else info)["warned"]
    return {int(w.split(" ", 1)[0].rsplit(":", 1)[1]) for w in warned}


def _called_at(line: int) -> str:
    return PROBE_SOURCE[line - 1].strip()


def test_each_line_torch_warned_at_is_a_site_at_its_exact_line_and_nothing_else() -> None:
    """torch warned at inv, solve, cholesky (one matrix and a batch), lu_factor and eigh;
    at none of the ``_ex`` forms nor ``det``. The report names the same six lines, exact
    (``torch.linalg.X`` runs as the built-in ``linalg_X``), and nothing else of the probe's."""
    report = analyze(HERE / "linalg_checks_probe.pt.trace.json.gz", source_roots=[str(HERE)])
    probe_sites = [s for s in report.sites if s.func == "probe"]
    assert {s.line for s in probe_sites} == _warned_lines()
    assert len(_warned_lines()) == 6
    for site in probe_sites:
        assert site.line_exact
        called = _called_at(site.line)
        assert "_ex(" not in called and "det(" not in called
        assert site.advice["title"] == (EIGH_TITLE if "eigh(" in called else EX_TITLE)


@pytest.mark.parametrize(("function", "recorded"), [("probe", "probe"), ("probe_more", "more")])
def test_a_cpu_trace_lists_as_latent_the_lines_that_sync_on_the_gpu(
    tmp_path: Path, function: str, recorded: str
) -> None:
    """On the CPU ``inv_ex`` and ``solve_ex`` read pivots inside ``linalg_lu_solve`` and
    ``cholesky_inverse`` checks an error code (CPU kernels' checks): they were latent
    findings that the GPU's warnings contradict. The CPU trace of each probe now lists
    exactly the lines torch warned at on the H200."""
    torch = pytest.importorskip("torch")
    spec = importlib.util.spec_from_file_location("linalg_probe", HERE / "record_linalg_checks.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["linalg_probe"] = module
    spec.loader.exec_module(module)
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], with_stack=True) as prof:
        getattr(module, function)(torch.device("cpu"))
    path = tmp_path / "run" / "probe.pt.trace.json"
    path.parent.mkdir()
    prof.export_chrome_trace(str(path))
    report = analyze(path, source_roots=[str(HERE)])
    lines = {s.source.line for s in report.latent if s.source and s.source.func == function}
    assert lines == _warned_lines(MORE if recorded == "more" else PROBE)


def test_the_cholesky_pairs_read_is_found_with_the_ex_fix_and_its_saving_measured() -> None:
    """A GPU-bound loop with a ``cholesky`` of its logits' covariance each step: torch
    warned at that line in each of 5 steps, and at nothing in the ``cholesky_ex`` fix.
    Unprofiled, the fix saved 1.5-5.8 ms a step in 3 alternated rounds (median 3.1); the
    report predicts 1.56 ms, inside that range."""
    row = PAIRS["pairs"]["linalg_checks"]
    assert row["baseline"]["warned"] == {"397": 5} and row["fixed"]["warned"] == {}
    base = analyze(HERE / "linalg_checks_baseline.pt.trace.json.gz", source_roots=[str(HERE)])
    (site,) = base.sites
    assert (site.line, site.line_exact, site.count) == (397, True, 5)
    assert site.advice["title"] == EX_TITLE
    fixed = analyze(HERE / "linalg_checks_fixed.pt.trace.json.gz", source_roots=[str(HERE)])
    assert fixed.sites == []
    rounds = [
        b - f for b, f in zip(row["baseline"]["rounds_ms"], row["fixed"]["rounds_ms"], strict=True)
    ]
    predicted_ms = base.summary.predicted_saving_per_step_us / 1000
    assert min(rounds) <= predicted_ms <= max(rounds), (predicted_ms, rounds)
    assert predicted_ms < statistics.median(rounds)  # below it: see docs/validation.md


def test_functions_without_an_ex_form_are_not_told_to_use_one(tmp_path: Path) -> None:
    """A review's case: the ``_ex`` advice matched ``_linalg_check_errors`` anywhere, so
    ``svd``, ``lstsq``, ``pinv`` and ``matrix_rank`` were told to use an ``_ex`` form they
    do not have. Only the functions that have one are; the others are told to call less
    often (a CPU trace). ``cholesky_inverse`` checks its error code on the CPU only (no
    warning on the H200): no latent finding."""
    torch = pytest.importorskip("torch")
    from torch.profiler import ProfilerActivity, profile

    source = tmp_path / "checked.py"
    source.write_text(
        "import torch\n"
        "\n"
        "\n"
        "def step(a, spd, b):\n"
        "    u, s, vh = torch.linalg.svd(a)\n"
        "    sol = torch.linalg.lstsq(a, b)\n"
        "    p = torch.linalg.pinv(a)\n"
        "    r = torch.linalg.matrix_rank(a)\n"
        "    ci = torch.cholesky_inverse(spd)\n"
        "    inv = torch.linalg.inv(a)\n"
        "    chol = torch.linalg.cholesky(spd)\n"
        "    return u, sol, p, r, ci, inv, chol\n"
    )
    spec = importlib.util.spec_from_file_location("checked", source)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    a = torch.randn(8, 8) + 8 * torch.eye(8)
    with profile(activities=[ProfilerActivity.CPU], with_stack=True) as prof:
        module.step(a, a @ a.T, torch.randn(8, 2))
    path = tmp_path / "run" / "c.pt.trace.json"
    path.parent.mkdir()
    prof.export_chrome_trace(str(path))
    report = analyze(path, source_roots=[str(tmp_path)])
    titles = {site.line: site.advice["title"] for site in report.latent_sites}
    assert titles == {5: LESS_OFTEN, 6: LESS_OFTEN, 7: LESS_OFTEN, 8: LESS_OFTEN,
                      10: EX_TITLE, 11: EX_TITLE}  # fmt: skip


def test_the_decompositions_without_an_ex_form_are_found_where_torch_warned() -> None:
    """``LINALG_PROBE=more``: torch warned at ``svd``, ``svdvals``, ``lstsq``, ``pinv``,
    ``matrix_rank``, ``cond``, ``eig``, ``eigvals``, ``matrix_power(a, -2)`` and
    ``matrix_norm(ord=2)``; not at ``cholesky_inverse``, ``slogdet``, ``qr``, ``lu``,
    ``lu_solve`` or ``solve_triangular``. The report names the same ten lines, exact; the
    ones with no ``_ex`` form are told to call less often (``svd``'s copies inside the
    decomposition were a bare device-to-host copy's advice), the negative power, which
    inverts, to invert with ``inv_ex`` and raise the inverse to a positive power."""
    warned = _warned_lines(MORE)
    assert len(warned) == 10
    report = analyze(HERE / "linalg_checks_more.pt.trace.json.gz", source_roots=[str(HERE)])
    sites = [s for s in report.sites if s.func == "probe_more"]
    assert {s.line for s in sites} == warned
    for site in sites:
        assert site.line_exact
        called = _called_at(site.line)
        title = NEGATIVE_POWER_TITLE if "matrix_power" in called else LESS_OFTEN
        assert site.advice["title"] == title, called
