"""Allocator syncs inside warm-up regions (issue 13): cuDNN's benchmark and the caching
allocator filling up on the first iterations are expected once, so they are listed apart,
like the profiler's own synchronize: out of the findings, totals and CI gate, visible in the
JSON report (``warmup_allocator``) and in the terminal's "Listed apart" section, with the
allocator advice."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from kineto_builder import KinetoTraceBuilder, item_sync

from tb_syncfinder import analyze, catalogue
from tb_syncfinder.cli import main as cli_main
from tb_syncfinder.engine import Options, analyze_trace
from tb_syncfinder.outputs.text import render_report

WARMUP = "## warm-up ##"


def _conv_allocation(b: KinetoTraceBuilder, api: str = "cudaMalloc", dur: float = 900) -> None:
    """A convolution whose workspace the allocator has to get from the device."""
    with b.op("aten::conv2d"), b.op("aten::cudnn_convolution"):
        b.kernel(dur=100)
        b.runtime(api, dur=dur)


def _warmup_trace(tmp_path: Path) -> Path:
    """Step 1: a warm-up region (cuDNN benchmark allocations, and one .item() that is a
    real sync all the same); steps 2-3: measured, one allocation in step 3 and an .item()
    in each."""
    b = KinetoTraceBuilder()
    with b.step(1):
        with b.annotation(WARMUP):
            _conv_allocation(b, "cudaMalloc", 900)
            _conv_allocation(b, "cudaFree", 400)
            item_sync(b)
    for n in (2, 3):
        with b.step(n):
            b.kernel(dur=100)
            if n == 3:
                _conv_allocation(b, "cudaMalloc", 300)  # after warm-up: a finding
            item_sync(b)
    return b.write(tmp_path / "run" / "worker0.pt.trace.json")


def test_allocator_syncs_in_a_warmup_region_are_listed_apart_out_of_findings_and_totals(tmp_path):
    trace = _warmup_trace(tmp_path)
    result = analyze_trace(str(trace), Options())
    assert [(s.api, s.step, s.warmup_allocator) for s in result.warmup_allocator] == [
        ("cudaMalloc", 1, True),
        ("cudaFree", 1, True),
    ]
    assert all(s.id in result.contexts for s in result.warmup_allocator)
    # The findings: the .item() of every step (warm-up or not) and step 3's allocation.
    assert sorted((s.kind, s.step) for s in result.syncs) == [
        (catalogue.ALLOCATOR_SYNC, 3),
        (catalogue.SCALAR_READBACK, 1),
        (catalogue.SCALAR_READBACK, 2),
        (catalogue.SCALAR_READBACK, 3),
    ]
    assert not any(s.warmup_allocator for s in result.syncs)
    step1 = next(s for s in result.steps if s.step == 1)
    assert step1.sync_count == 1  # the warm-up .item() only

    report = analyze(str(trace))
    apart = report.warmup_allocator
    wait = sum(s.host_wait_us for s in result.warmup_allocator)
    assert (apart.count, apart.host_wait_us, apart.regions) == (2, wait, [WARMUP])
    assert apart.advice == catalogue.advice_for(catalogue.ALLOCATOR_SYNC, [])
    assert report.summary.sync_count == 4
    assert report.summary.host_wait_us == sum(s.host_wait_us for s in result.syncs)
    assert report.summary.by_kind[catalogue.ALLOCATOR_SYNC] == 1
    assert all(not s.warmup_allocator for s in report.syncs)
    (allocator_site,) = [s for s in report.sites if s.kind == catalogue.ALLOCATOR_SYNC]
    assert allocator_site.count == 1 and allocator_site.steps == [3]

    doc = json.loads(json.dumps(report.to_json()))
    assert doc["warmup_allocator"]["count"] == 2
    assert [s["api"] for s in doc["warmup_allocator"]["syncs"]] == ["cudaMalloc", "cudaFree"]
    assert (
        doc["warmup_allocator"]["advice"]["title"]
        == catalogue.kind(catalogue.ALLOCATOR_SYNC).advice.title
    )
    # The existing fields are all still there (the schema only grows).
    assert {"profiler_overhead", "sites", "syncs", "summary", "latent"} <= set(doc)


def test_the_ci_gate_does_not_count_warmup_allocator_syncs(tmp_path, capsys):
    trace = _warmup_trace(tmp_path)
    # Step 1 holds three syncs, two of them warm-up allocations; step 3 holds two.
    assert cli_main(["report", str(trace.parent), "--max-syncs-per-step", "2"]) == 0
    assert cli_main(["report", str(trace.parent), "--max-syncs-per-step", "1"]) == 1
    assert "has 2 syncs" in capsys.readouterr().err


def test_the_terminal_lists_warmup_allocations_apart_with_the_allocator_fix(tmp_path):
    text = render_report(analyze(str(_warmup_trace(tmp_path))), width=100)
    apart = text[text.index("Listed apart") :]
    assert "warm-up allocator  2 syncs" in apart and WARMUP in apart
    assert catalogue.kind(catalogue.ALLOCATOR_SYNC).advice.title.split(";")[0] in apart
    assert "profiler overhead" not in apart  # none in this trace
    # The table above lists the measured allocation only.
    table = text[: text.index("Summary")]
    assert table.count("allocator_sync") == 1


def test_a_report_without_warmup_allocations_has_an_empty_field_and_no_section(tmp_path):
    b = KinetoTraceBuilder()
    with b.step(1):
        _conv_allocation(b)
        item_sync(b)
    report = analyze(str(b.write(tmp_path / "w.pt.trace.json")))
    assert report.to_json()["warmup_allocator"] == {
        "count": 0,
        "host_wait_us": 0.0,
        "gpu_idle_us": 0.0,
        "regions": [],
        "advice": {},
        "syncs": [],
    }
    assert "Listed apart" not in render_report(report, width=100)
    assert [s.kind for s in report.sites].count(catalogue.ALLOCATOR_SYNC) == 1


@pytest.mark.parametrize(
    ("name", "warmup"),
    [
        ("warmup", True),
        ("Warm-up", True),
        ("WARM_UP", True),
        ("warm up", True),
        ("[param|pytorch.model.alex_net|0|0|0|warmup|forward]", True),
        ("cudnn_warmup_3", True),
        ("measure", False),
        ("warmer", False),
        ("upwarm", False),
        ("ProfilerStep#1", False),
    ],
)
def test_warmup_regions_are_named_warmup_warm_up_or_warm_hyphen_up_in_any_case(name, warmup):
    assert catalogue.is_warmup_annotation(name) is warmup


def test_only_allocator_syncs_are_listed_apart_in_a_warmup_region():
    inside = ["train", "warmup"]
    assert catalogue.is_warmup_listed(catalogue.ALLOCATOR_SYNC, inside)
    assert not catalogue.is_warmup_listed(catalogue.ALLOCATOR_SYNC, ["train"])
    for kind in set(catalogue.KIND_NAMES) - {catalogue.ALLOCATOR_SYNC}:
        assert not catalogue.is_warmup_listed(kind, inside)


def test_alexnets_cudnn_warmup_allocations_are_listed_apart_not_the_top_hotspot(real_traces_dir):
    path = real_traces_dir / "alexnet_cuda_sync_events.pt.trace.json.gz"
    report = analyze(str(path))
    apart = report.warmup_allocator
    # The five allocations of the 'warmup' forward (cudaFree in the first conv2d: 6.5 s).
    assert apart.count == 5 and len(apart.syncs) == 5
    assert all(s.kind == catalogue.ALLOCATOR_SYNC and s.warmup_allocator for s in apart.syncs)
    assert all(any("warmup" in a for a in s.annotations) for s in apart.syncs)
    assert apart.regions == ["[param|pytorch.model.alex_net|0|0|0|warmup|forward]"]
    assert apart.host_wait_us > 8e6
    # What is left: no finding from the warm-up region is an allocator sync, the measured
    # forward's allocations still are, and the top site costs less than a second.
    assert not any(
        s.kind == catalogue.ALLOCATOR_SYNC and any("warmup" in a for a in s.annotations)
        for s in report.syncs
    )
    assert any(
        s.kind == catalogue.ALLOCATOR_SYNC and any("measure" in a for a in s.annotations)
        for s in report.syncs
    )
    top = report.sites[0]
    assert top.host_wait_us + top.gpu_idle_us < 1e6
    # The trace's last device synchronize is the profiler stopping: listed apart too.
    # 35: a cudaMalloc of 1.3 ms whose return a kernel launched before it ran through (it
    # did not wait for the device) is no sync (tests/test_allocator_drain.py).
    assert report.summary.sync_count == 35 and report.profiler_overhead.count == 1


def test_the_whatif_counts_no_warmup_allocation_in_a_site_or_every_sync_removed(tmp_path):
    # The warm-up cudaMalloc and step 3's share a site key (same operator, no stack): the
    # site's predicted saving is step 3's sync alone, and "every sync removed" leaves the
    # warm-up allocations in place.
    trace = _warmup_trace(tmp_path)
    result = analyze_trace(str(trace), Options())
    (warm_malloc, _free) = result.warmup_allocator
    (measured,) = [s for s in result.syncs if s.kind == catalogue.ALLOCATOR_SYNC]
    assert warm_malloc.site_key == measured.site_key
    report = analyze(str(trace))
    (site,) = [s for s in report.sites if s.kind == catalogue.ALLOCATOR_SYNC]
    assert site.predicted_saving_us == pytest.approx(measured.predicted_saving_us)
    assert result.savings.method == "replay"
    program = sum(s.predicted_saving_us for s in result.syncs)
    warm = min(s.predicted_saving_us for s in result.warmup_allocator)
    assert program - 1 <= result.savings.all_syncs_us < program + warm


def test_the_tabs_summary_says_what_was_listed_apart_and_why(tmp_path):
    import argparse

    from tensorboard.plugins import base_plugin

    from tb_syncfinder.plugin import api
    from tb_syncfinder.plugin.plugin import SyncAdvisorPlugin
    from tb_syncfinder.plugin.settings import PluginSettings

    trace = _warmup_trace(tmp_path)
    settings = PluginSettings(
        logdirs=[(None, str(trace.parent))],
        cache_dir=None,
        reload_interval_s=3600,
        use_processes=False,
    )
    plugin = SyncAdvisorPlugin(
        base_plugin.TBContext(logdir=str(trace.parent), flags=argparse.Namespace()),
        settings,
        start=False,
    )
    plugin.loader.poll()
    assert plugin.loader.wait_idle(60)
    (run,) = plugin.loader.run_names()
    answer = api.summary_impl(plugin.selections.get(plugin.loader.get_run(run), None, None))
    warmup = answer["listed_apart"]["warmup_allocator"]
    assert warmup["count"] >= 1 and warmup["host_wait_us"] > 0
    assert warmup["regions"] and "warm" in warmup["regions"][0].lower()
    assert warmup["advice"]["title"] == catalogue.kind(catalogue.ALLOCATOR_SYNC).advice.title
    assert answer["listed_apart"]["profiler_overhead"]["count"] == 0
