"""Every endpoint of the Sync Advisor plugin, through TensorBoard's own WSGI routing.

Traces are made by real torch on the CPU from workload files written under a source root,
so the stack frames, steps and latent findings are what a user's profile holds. A broken
file, a file still being written and a crafted trace whose stack names files outside the
roots sit next to them.
"""

from __future__ import annotations

import argparse
import csv
import gzip
import io
import json
import os
import random
import shutil
import threading
from pathlib import Path
from typing import Any

import pytest
from cpu_workload import ITEM_LINE, NONZERO_LINE, WORKLOAD, profile_workload
from tensorboard.backend.application import TensorBoardWSGI
from tensorboard.plugins import base_plugin
from werkzeug.test import Client

from tb_syncfinder import engine
from tb_syncfinder.plugin import SyncAdvisorLoader, SyncAdvisorPlugin
from tb_syncfinder.plugin import api as api_module
from tb_syncfinder.plugin import plugin as plugin_module
from tb_syncfinder.plugin.loader import RETRY
from tb_syncfinder.plugin.settings import PluginSettings, parse_logdir_spec, settings_from_flags

# The same workload after the fix: no nonzero (compare must call that site fixed).
WORKLOAD_FIXED = WORKLOAD.replace("torch.nonzero(y > 0)", "(y > 0).sum(0)")

PLUGIN = "/data/plugin/sync_advisor/"


def craft_outside_stack(trace: Path, workload: Path, out: Path, outside: str) -> None:
    """A copy of ``trace`` whose Python frames name ``outside`` instead of the workload."""
    text = trace.read_text().replace(str(workload), outside)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)


def make_plugin(logdir: Path, tmp: Path, **kw: Any) -> SyncAdvisorPlugin:
    settings = PluginSettings(
        logdirs=[(None, str(logdir))],
        source_roots=[str(tmp / "src")],
        cache_dir=str(tmp / "cache"),
        reload_interval_s=3600,
        use_processes=False,
    )
    context = base_plugin.TBContext(logdir=str(logdir), flags=argparse.Namespace())
    plugin = SyncAdvisorPlugin(context, settings, start=False, **kw)
    plugin.loader.poll()
    assert plugin.loader.wait_idle(120)
    return plugin


def client_for(plugin: SyncAdvisorPlugin) -> Client:
    return Client(TensorBoardWSGI([plugin]))


def get(client: Client, route: str, **params: Any) -> tuple[int, Any]:
    response = client.get(PLUGIN + route, query_string=params)
    assert response.headers["X-Content-Type-Options"] == "nosniff"
    body = response.get_data()
    if response.mimetype == "application/json":
        return response.status_code, json.loads(body)
    return response.status_code, body


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("plugin_endpoints")
    logs = tmp / "logs"
    workload = tmp / "src" / "workload.py"
    profile_workload(WORKLOAD, workload, logs / "run_cpu" / "w0.pt.trace.json")
    profile_workload(
        WORKLOAD_FIXED, tmp / "src" / "v2" / "workload.py", logs / "run_fixed" / "w0.pt.trace.json"
    )
    mixed = logs / "run_mixed"
    shutil.copy(
        logs / "run_cpu" / "w0.pt.trace.json",
        mixed.mkdir(parents=True) or mixed / "good.pt.trace.json",
    )
    (mixed / "broken.pt.trace.json").write_text("{ this is not json")
    craft_outside_stack(
        logs / "run_cpu" / "w0.pt.trace.json",
        workload,
        logs / "run_crafted" / "passwd.pt.trace.json",
        "/etc/passwd",
    )
    craft_outside_stack(
        logs / "run_crafted" / "passwd.pt.trace.json",
        Path("/etc/passwd"),
        logs / "run_crafted" / "secret.pt.trace.json",
        "../secret.py",
    )
    (tmp / "secret.py").write_text("TOKEN = 'never served'\n")
    return tmp


@pytest.fixture(scope="module")
def plugin(workspace: Path) -> SyncAdvisorPlugin:
    return make_plugin(workspace / "logs", workspace)


@pytest.fixture(scope="module")
def client(plugin: SyncAdvisorPlugin) -> Client:
    return client_for(plugin)


def latent_site(client: Client, run: str, op: str) -> dict:
    status, sites = get(client, "sites", run=run, latent=1, op=op)
    assert status == 200 and sites["items"], sites
    return sites["items"][0]


# ----- runs, workers, spans ---------------------------------------------------------------
def test_runs_lists_every_run_with_its_workers_and_the_broken_file_with_its_reason(
    client: Client, workspace: Path
) -> None:
    status, body = get(client, "runs")
    assert status == 200
    assert body["loading"] is False
    runs = {r["name"]: r for r in body["runs"]}
    assert set(runs) == {"run_cpu", "run_fixed", "run_mixed", "run_crafted"}
    assert runs["run_cpu"]["workers"] == [{"name": "w0", "spans": [None]}]
    assert runs["run_mixed"]["trace_count"] == 2
    assert runs["run_mixed"]["error_count"] == 1
    (error,) = body["errors"]
    assert error["run"] == "run_mixed"
    assert error["path"] == str(workspace / "logs" / "run_mixed" / "broken.pt.trace.json")
    assert error["reason"]


def test_workers_and_spans_of_a_run(client: Client) -> None:
    assert get(client, "workers", run="run_mixed") == (
        200,
        {"workers": [{"name": "broken", "spans": [None]}, {"name": "good", "spans": [None]}]},
    )
    assert get(client, "spans", run="run_cpu", worker="w0") == (200, {"spans": [None]})


def test_unknown_run_worker_span_are_404_and_missing_run_is_400(client: Client) -> None:
    for route in ("workers", "summary", "steps", "sites", "syncs", "export"):
        status, body = get(client, route, run="no_such_run")
        assert status == 404 and "no_such_run" in body["error"], route
        assert get(client, route)[0] == 400, route
    assert get(client, "spans", run="run_cpu", worker="w9")[0] == 404
    assert get(client, "summary", run="run_cpu", worker="w9")[0] == 404
    assert get(client, "summary", run="run_cpu", span="123")[0] == 404
    assert get(client, "spans", run="run_cpu")[0] == 400


# ----- summary, steps -----------------------------------------------------------------------
def test_summary_of_a_cpu_run_counts_latent_findings_and_names_the_device(client: Client) -> None:
    status, body = get(client, "summary", run="run_cpu")
    assert status == 200
    assert body["device"] == "cpu"
    assert body["has_stacks"] is True
    assert body["has_gpu_activity"] is False
    assert body["summary"]["sync_count"] == 0
    assert body["summary"]["latent_count"] >= 2 * 3  # item and nonzero, in each of 3 steps
    assert [t["worker"] for t in body["traces"]] == ["w0"]
    assert body["top_kinds"] == []  # nothing really synced on the CPU


def test_summary_of_a_run_with_a_broken_file_counts_the_error(client: Client) -> None:
    status, body = get(client, "summary", run="run_mixed")
    assert status == 200
    assert body["summary"]["error_count"] == 1
    assert {t["worker"]: bool(t["error"]) for t in body["traces"]} == {
        "good": False,
        "broken": True,
    }


def test_steps_series_has_one_entry_per_profiler_step(client: Client) -> None:
    status, body = get(client, "steps", run="run_cpu")
    assert status == 200
    assert len(body["steps"]) >= 2
    assert all(s["step_time_us"] > 0 for s in body["steps"])


# ----- sites ---------------------------------------------------------------------------------
def test_sites_point_at_the_exact_lines_of_item_and_nonzero(
    client: Client, workspace: Path
) -> None:
    item = latent_site(client, "run_cpu", "aten::item")
    nonzero = latent_site(client, "run_cpu", "aten::nonzero")
    assert (item["kind"], item["line"], item["line_exact"]) == ("scalar_readback", ITEM_LINE, True)
    assert (nonzero["kind"], nonzero["line"]) == ("dynamic_shape", NONZERO_LINE)
    assert item["file"].endswith("workload.py")
    assert item["advice"]["title"]


def test_sites_filter_by_kind_file_op_and_step(client: Client) -> None:
    _, everything = get(client, "sites", run="run_cpu", latent=1)
    _, readbacks = get(client, "sites", run="run_cpu", latent=1, kind="scalar_readback")
    assert 0 < readbacks["total"] < everything["total"]
    assert {s["kind"] for s in readbacks["items"]} == {"scalar_readback"}
    _, by_file = get(client, "sites", run="run_cpu", latent=1, file="workload.py")
    assert by_file["total"] >= 2 and all("workload.py" in s["file"] for s in by_file["items"])
    _, none = get(client, "sites", run="run_cpu", latent=1, file="other.py")
    assert none["total"] == 0
    step = latent_site(client, "run_cpu", "aten::item")["steps"][0]
    _, in_step = get(client, "sites", run="run_cpu", latent=1, step=step)
    assert in_step["total"] >= 1 and all(step in s["steps"] for s in in_step["items"])
    _, no_step = get(client, "sites", run="run_cpu", latent=1, step=10_000)
    assert no_step["total"] == 0


def test_sites_sort_and_paginate(client: Client) -> None:
    _, asc = get(client, "sites", run="run_cpu", latent=1, sort="line", order="asc")
    lines = [s["line"] for s in asc["items"] if s["line"] is not None]
    assert lines == sorted(lines)
    _, desc = get(client, "sites", run="run_cpu", latent=1, sort="count")
    counts = [s["count"] for s in desc["items"]]
    assert counts == sorted(counts, reverse=True)
    _, page = get(client, "sites", run="run_cpu", latent=1, sort="count", offset=1, limit=1)
    assert (page["total"], page["offset"], page["limit"]) == (desc["total"], 1, 1)
    assert page["items"] == desc["items"][1:2]


def test_sites_reject_malformed_parameters(client: Client) -> None:
    bad = [
        {"sort": "bogus"},
        {"order": "sideways"},
        {"kind": "not_a_kind"},
        {"limit": "0"},
        {"limit": "501"},
        {"limit": "ten"},
        {"offset": "-1"},
        {"step": "1.5"},
        {"latent": "yes"},
        {"offset": "\uff11"},  # a full-width 1: a digit to a regex's \d, no number to a client
        {"offset": "\u0661"},  # an Arabic-Indic 1
    ]
    for params in bad:
        status, body = get(client, "sites", run="run_cpu", **params)
        assert status == 400 and body["error"], params


# ----- syncs and sync detail -----------------------------------------------------------------
def test_syncs_filter_by_site_and_detail_carries_site_and_context(client: Client) -> None:
    site = latent_site(client, "run_cpu", "aten::item")
    status, syncs = get(client, "syncs", run="run_cpu", latent=1, site=site["key"])
    assert status == 200 and syncs["total"] == site["count"]
    first = syncs["items"][0]
    assert first["site_key"] == site["key"] and first["latent"] is True
    status, detail = get(client, "sync", run="run_cpu", id=first["id"])
    assert status == 200
    assert detail["sync"]["id"] == first["id"]
    assert detail["site"]["key"] == site["key"]
    assert detail["sync"]["op_chain"][0] == "aten::item"
    assert any(frame["user"] for frame in detail["sync"]["stack"])
    context = detail["context"]
    assert context["window"][0] <= detail["sync"]["ts_us"] <= context["window"][1]
    assert any(e["name"] == "aten::item" for e in context["host"])


def test_syncs_filter_by_kind_and_step_and_paginate(client: Client) -> None:
    _, dyn = get(client, "syncs", run="run_cpu", latent=1, kind="dynamic_shape", limit=1)
    assert dyn["total"] >= 3 and len(dyn["items"]) == 1
    step = dyn["items"][0]["step"]
    _, in_step = get(client, "syncs", run="run_cpu", latent=1, step=step)
    assert in_step["total"] >= 2 and {s["step"] for s in in_step["items"]} == {step}
    _, real = get(client, "syncs", run="run_cpu")
    assert real["total"] == 0  # a CPU trace has no real syncs


def test_unknown_sync_id_is_404(client: Client) -> None:
    status, body = get(client, "sync", run="run_cpu", id="deadbeef-0")
    assert status == 404 and "deadbeef-0" in body["error"]
    assert get(client, "sync", run="run_cpu")[0] == 400


# ----- source ----------------------------------------------------------------------------------
def test_source_serves_the_line_a_finding_points_at(client: Client) -> None:
    item = latent_site(client, "run_cpu", "aten::item")
    status, body = get(client, "source", file=item["file"], line=item["line"], context=1)
    assert status == 200
    assert body["line"] == ITEM_LINE and body["start"] == ITEM_LINE - 1
    assert body["lines"][1].strip() == "return y.sum().item() + keep.shape[0]"
    status, body = get(client, "source", file="workload.py", line=1, context=0)
    assert (status, body["lines"]) == (200, ["import torch"])


@pytest.mark.parametrize(
    "name, statuses",
    [
        ("../secret.py", {403}),
        ("v2/../../secret.py", {403}),
        ("/etc/passwd", {403}),
        ("%2e%2e/secret.py", {400}),  # arrives as "%2e%2e/..." only if it was encoded twice
        ("..%2fsecret.py", {400}),
        ("workload.py\x00.txt", {400}),
        ("", {400}),
    ],
)
def test_source_refuses_traversal_and_encoded_names(
    client: Client, workspace: Path, name: str, statuses: set[int]
) -> None:
    status, body = get(client, "source", file=name, line=1)
    assert status in statuses and body["error"]
    status, body = get(client, "source", file=str(workspace / "secret.py"), line=1)
    assert status == 403 and "hint" in body


def test_source_refuses_encoded_traversal_in_the_raw_url(client: Client) -> None:
    for raw in ("file=%2e%2e%2fsecret.py", "file=%252e%252e%252fsecret.py", "file=x%00.py"):
        response = client.get(PLUGIN + "source?line=1&" + raw)
        assert response.status_code in (400, 403), raw
        assert "never served" not in response.get_data(as_text=True)


def test_source_through_a_symlink_out_of_the_root_is_refused(
    client: Client, workspace: Path
) -> None:
    link = workspace / "src" / "escape.py"
    link.symlink_to(workspace / "secret.py")
    try:
        status, body = get(client, "source", file="escape.py", line=1)
        assert status == 403 and "never served" not in json.dumps(body)
    finally:
        link.unlink()


def test_a_crafted_trace_naming_files_outside_the_roots_cannot_read_them(client: Client) -> None:
    status, syncs = get(client, "syncs", run="run_crafted", latent=1, limit=500)
    assert status == 200 and syncs["total"] > 0
    named = {f["file"] for s in syncs["items"] for f in s["stack"]}
    assert {"/etc/passwd", "../secret.py"} <= named
    for name in named:
        status, body = get(client, "source", file=name, line=1)
        text = json.dumps(body)
        assert "never served" not in text and "root:" not in text
        if name in ("/etc/passwd", "../secret.py"):
            assert status == 403


def test_source_of_a_name_the_file_system_refuses_is_a_404_not_a_server_error(
    client: Client,
) -> None:
    """A review: a name part over 255 bytes raised ENAMETOOLONG out of ``Path.is_file``
    (it swallows only "not there"), a 500 with a traceback in the log."""
    for name in ("a" * 300 + ".py", "v2/" + "a" * 256 + ".py"):  # in folders that exist
        for missing_ok in ({}, {"missing_ok": 1}):
            status, body = get(client, "source", file=name, line=1, **missing_ok)
            assert status == (200 if missing_ok else 404), (name[:8], missing_ok, status)
            assert "file name too long" in json.dumps(body).lower()


def test_source_rejects_bad_line_and_context(client: Client) -> None:
    assert get(client, "source", file="workload.py", line=0)[0] == 400
    assert get(client, "source", file="workload.py", line="x")[0] == 400
    assert get(client, "source", file="workload.py", line=1, context=51)[0] == 400
    assert get(client, "source", file="workload.py", line=999)[0] == 404


SOURCE_FIELDS = {"file", "path", "start", "line", "lines"}


def test_source_with_missing_ok_answers_a_missing_file_as_200_saying_so(client: Client) -> None:
    # Without it, a missing file is still the 404 other clients read.
    status, refused = get(client, "source", file="gone.py", line=3)
    assert status == 404 and refused["error"] and refused["hint"]
    # With it (the dashboard): 200, every field a served answer has (empty), missing, and
    # the 404's error and hint word for word.
    status, body = get(client, "source", file="gone.py", line=3, missing_ok=1)
    assert status == 200, body
    assert SOURCE_FIELDS <= set(body)
    assert body["missing"] is True
    assert (body["file"], body["line"], body["lines"]) == ("gone.py", 3, [])
    assert body["path"] is None and body["start"] is None
    assert (body["error"], body["hint"]) == (refused["error"], refused["hint"])
    # A line past the end of a file that is there: missing too (its 404 has no hint).
    status, body = get(client, "source", file="workload.py", line=999, missing_ok=1)
    assert status == 200 and body["missing"] is True and "999" in body["error"]
    assert "hint" not in body


def test_source_with_missing_ok_still_serves_and_refuses_as_before(
    client: Client, workspace: Path
) -> None:
    # A file that is there: the same answer, with missing false (added to every answer).
    plain = get(client, "source", file="workload.py", line=1, context=0)
    status, body = get(client, "source", file="workload.py", line=1, context=0, missing_ok=1)
    assert (status, body) == plain
    assert status == 200 and SOURCE_FIELDS <= set(body) and body["missing"] is False
    assert body["lines"] == ["import torch"]
    # A file not served (outside the roots, whether or not it exists; not .py) is a 200
    # saying so to the dashboard: a trace from another machine names its frames by paths
    # outside the roots, and each site opened logged a failed request. Without missing_ok
    # it is the 403 as before, and a bad name stays a 400.
    for name, code in [
        (str(workspace / "secret.py"), 403),
        ("/etc/passwd", 403),
        ("/home/u/gone.py", 403),
        ("../gone.py", 403),
        ("notes.txt", 403),
        ("..%2fsecret.py", 400),
    ]:
        status, body = get(client, "source", file=name, line=1, missing_ok=1)
        if code == 400:
            assert status == 400 and "missing" not in body and body["error"], (name, body)
            continue
        assert status == 200 and body["missing"] is True and body["status"] == 403, (name, body)
        assert (
            body["lines"] == []
            and body["error"] == get(client, "source", file=name, line=1)[1]["error"]
        )
        assert get(client, "source", file=name, line=1)[0] == 403
    assert get(client, "source", file="workload.py", line=0, missing_ok=1)[0] == 400
    assert get(client, "source", file="gone.py", line=1, missing_ok="x")[0] == 400


# ----- compare, export -----------------------------------------------------------------------
def test_compare_marks_the_removed_nonzero_fixed(client: Client) -> None:
    status, body = get(client, "compare", run="run_fixed", base="run_cpu")
    assert status == 200
    by_op = {(s["ops"] or [""])[0]: s["status"] for s in body["latent_sites"]}
    assert by_op["aten::nonzero"] == "fixed"
    assert by_op["aten::item"] == "same"
    assert get(client, "compare", run="run_fixed", base="nope")[0] == 404
    assert get(client, "compare", run="run_fixed")[0] == 400
    assert get(client, "compare", run="run_fixed", base="run_cpu", base_worker="w9")[0] == 404


def test_export_json_csv_sarif_and_annotated_trace_are_downloads(client: Client) -> None:
    response = client.get(PLUGIN + "export", query_string={"run": "run_cpu"})
    assert response.status_code == 200
    assert 'filename="run_cpu.json"' in response.headers["Content-Disposition"]
    assert json.loads(response.get_data())["schema"] == "tb_syncfinder.report/1"
    response = client.get(PLUGIN + "export", query_string={"run": "run_cpu", "format": "csv"})
    assert response.status_code == 200 and response.mimetype == "text/csv"
    rows = list(csv.reader(io.StringIO(response.get_data(as_text=True))))
    # The same columns as `tb-syncfinder report --format csv`, with the run of each row.
    header = rows[0]
    assert header[0] == "rank" and "run" in header
    assert len(rows) > 1 and all(row[header.index("run")] == "run_cpu" for row in rows[1:])
    response = client.get(PLUGIN + "export", query_string={"run": "run_cpu", "format": "sarif"})
    assert json.loads(response.get_data())["version"] == "2.1.0"
    response = client.get(PLUGIN + "export", query_string={"run": "run_cpu", "format": "trace"})
    assert response.status_code == 200
    trace = json.loads(response.get_data())
    names = [e.get("args", {}).get("name") for e in trace["traceEvents"] if e.get("ph") == "M"]
    assert "Sync Advisor" in names


def test_export_trace_needs_a_single_trace_and_format_must_be_known(client: Client) -> None:
    status, body = get(client, "export", run="run_crafted", format="trace")
    assert status == 400 and "worker" in body["error"]
    assert get(client, "export", run="run_crafted", worker="passwd", format="trace")[0] == 200
    assert get(client, "export", run="run_cpu", format="xml")[0] == 400


# ----- robustness ------------------------------------------------------------------------------
ROUTES = ("runs", "workers", "spans", "summary", "steps", "sites", "syncs", "sync", "source",
          "compare", "export")  # fmt: skip
PARAMS = ("run", "worker", "span", "id", "file", "line", "context", "kind", "op", "step",
          "latent", "sort", "order", "offset", "limit", "site", "base", "format")  # fmt: skip
NASTY = ["", "run_cpu", "w0", "-1", "0", "1", "99999999999999999999", "1e9", "NaN", "null",
         "../../etc/passwd", "/etc/passwd", "%00", "\x00", "\u202e\u0000x", "' OR 1=1",
         "<script>", "a" * 5000, "workload.py", "json", "trace", "asc", "é.py"]  # fmt: skip


def test_fuzzed_parameters_never_cause_a_server_error(client: Client) -> None:
    rng = random.Random(1234)
    for _ in range(600):
        route = rng.choice(ROUTES)
        params = {name: rng.choice(NASTY) for name in rng.sample(PARAMS, rng.randint(0, 6))}
        if rng.random() < 0.7:
            params["run"] = rng.choice(["run_cpu", "run_mixed", "run_crafted"])
        response = client.get(PLUGIN + route, query_string=params)
        assert response.status_code in (200, 400, 403, 404), (route, params)
        if response.status_code != 200:
            assert "error" in json.loads(response.get_data()), (route, params)


def test_repeated_parameters_and_non_get_methods_are_refused_as_json(client: Client) -> None:
    response = client.get(PLUGIN + "summary?run=run_cpu&run=run_mixed")
    assert response.status_code == 400 and "run" in response.get_json()["error"]
    response = client.post(PLUGIN + "summary?run=run_cpu")
    assert response.status_code == 405 and response.get_json()["error"]
    assert response.headers["Allow"] == "GET, HEAD"  # RFC 9110: a 405 names them


def test_an_export_of_a_trace_replaced_since_its_analysis_is_refused_not_mislabelled(
    workspace: Path, tmp_path: Path
) -> None:
    """A review: the annotated trace reads the file again, so a trace replaced by another
    valid one before the next poll got the old analysis's findings drawn onto its events."""
    logdir = tmp_path / "logs"
    shutil.copytree(workspace / "logs" / "run_cpu", logdir / "run_cpu")
    client = client_for(make_plugin(logdir, tmp_path))
    assert get(client, "export", run="run_cpu", format="trace")[0] == 200
    (trace,) = (logdir / "run_cpu").iterdir()
    before = trace.stat()
    shutil.copy(workspace / "logs" / "run_fixed" / "w0.pt.trace.json", trace)
    os.utime(trace, ns=(before.st_atime_ns, before.st_mtime_ns + 5_000_000_000))
    status, body = get(client, "export", run="run_cpu", format="trace")
    assert status == 409 and "changed since it was analysed" in body["error"]
    assert get(client, "export", run="run_cpu", format="json")[0] == 200  # the report itself


def test_an_export_of_a_run_named_beyond_ascii_keeps_its_name_for_the_browser(
    workspace: Path, tmp_path: Path
) -> None:
    """A review: the download of run ``ünïcode-ラン`` was named ``n_code-.csv``: the header
    now also carries the name as RFC 6266's ``filename*``, which browsers prefer."""
    from werkzeug.http import parse_options_header

    logdir = tmp_path / "logs"
    shutil.copytree(workspace / "logs" / "run_cpu", logdir / "ünïcode-ラン")
    client = client_for(make_plugin(logdir, tmp_path))
    response = client.get(PLUGIN + "export", query_string={"run": "ünïcode-ラン", "format": "csv"})
    assert response.status_code == 200
    header = response.headers["Content-Disposition"]
    assert 'filename="n_code-.csv"' in header  # for clients without RFC 6266
    assert parse_options_header(header)[1]["filename"] == "ünïcode-ラン.csv"


def test_an_export_of_a_trace_removed_since_its_analysis_is_a_client_error(
    workspace: Path, tmp_path: Path
) -> None:
    """A review: the annotated trace reads the file again, and a file gone since its
    analysis raised FileNotFoundError out of the route, a 500. Then a 400 "Invalid
    argument ... cannot be read"; now a 409 saying so, as for a file replaced."""
    logdir = tmp_path / "logs"
    shutil.copytree(workspace / "logs" / "run_cpu", logdir / "run_cpu")
    client = client_for(make_plugin(logdir, tmp_path))
    assert get(client, "export", run="run_cpu", format="trace")[0] == 200
    for trace in (logdir / "run_cpu").iterdir():
        trace.unlink()
    status, body = get(client, "export", run="run_cpu", format="trace")
    assert status == 409 and "removed since it was analysed" in body["error"], body


def test_concurrent_requests_build_each_report_once(workspace: Path) -> None:
    plugin = make_plugin(workspace / "logs", workspace)
    calls = []
    original = plugin.selections._build
    plugin.selections._build = lambda *a: calls.append(a) or original(*a)  # type: ignore[method-assign]
    client = client_for(plugin)
    errors = []

    def hit() -> None:
        try:
            assert client.get(PLUGIN + "sites?run=run_cpu&latent=1").status_code == 200
        except Exception as exc:  # noqa: BLE001 - collected for the main thread
            errors.append(exc)

    threads = [threading.Thread(target=hit) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and len(calls) == 1


# ----- static --------------------------------------------------------------------------------
def test_missing_dashboard_bundle_is_a_clear_404_json(
    client: Client, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(plugin_module, "STATIC_DIR", tmp_path)
    status, body = get(client, "index.js")
    assert status == 404 and "index.js" in body["error"] and "npm" in body["hint"]


def test_dashboard_bundle_is_served_as_javascript(
    client: Client, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "index.js").write_text("export function render() {}\n")
    (tmp_path / "secret.txt").write_text("no")
    monkeypatch.setattr(plugin_module, "STATIC_DIR", tmp_path)
    response = client.get(PLUGIN + "index.js")
    assert response.status_code == 200 and response.mimetype == "text/javascript"
    assert b"render" in response.get_data()
    assert client.get(PLUGIN + "static/secret.txt").status_code == 404
    assert client.get(PLUGIN + "static/../plugin.py").status_code == 404
    # A review: a NUL byte or a name part over 255 bytes raised out of ``Path.resolve`` /
    # ``is_file``, a 500 whose log line carried the raw NUL.
    for raw in ("static/%00.js", "static/a%00b.css", "static/" + "a" * 300 + ".js"):
        response = client.get(PLUGIN + raw)
        assert response.status_code == 404 and response.get_json()["error"], raw


# ----- loading lifecycle -----------------------------------------------------------------------
def test_plugin_listing_and_is_active(plugin: SyncAdvisorPlugin, tmp_path: Path) -> None:
    assert plugin.is_active()
    metadata = plugin.frontend_metadata()
    assert (metadata.es_module_path, metadata.tab_name) == ("/index.js", "Sync Advisor")
    (tmp_path / "empty").mkdir()
    empty = make_plugin(tmp_path / "empty", tmp_path)
    assert not empty.is_active()
    status, body = get(client_for(empty), "runs")
    assert (status, body["runs"], body["loading"]) == (200, [], False)


def test_restarted_plugin_answers_from_the_disk_cache_without_analysing(workspace: Path) -> None:
    calls: list[str] = []

    def counting(ref, options):
        calls.append(ref.path)
        return engine.analyze_trace(ref, options)

    restarted = make_plugin(workspace / "logs", workspace, analyze_fn=counting)
    assert calls == []
    status, body = get(client_for(restarted), "sites", run="run_cpu", latent=1)
    assert status == 200 and body["total"] > 0


def test_a_trace_still_being_written_is_loaded_once_complete(
    workspace: Path, tmp_path: Path
) -> None:
    logs = tmp_path / "logs"
    (logs / "run").mkdir(parents=True)
    full = (workspace / "logs" / "run_cpu" / "w0.pt.trace.json").read_bytes()
    partial = logs / "run" / "w0.pt.trace.json.gz"
    partial.write_bytes(gzip.compress(full)[: len(full) // 40])
    plugin = make_plugin(logs, tmp_path)
    client = client_for(plugin)
    _, runs = get(client, "runs")
    assert runs["runs"][0]["loading"] is True
    assert runs["errors"][0]["retrying"] is True
    assert runs["errors"][0]["being_written"] is True
    assert plugin.loader.get_run("run").traces[str(partial)].status == RETRY

    partial.write_bytes(gzip.compress(full))
    plugin.loader.poll()
    assert plugin.loader.wait_idle(60)
    _, runs = get(client, "runs")
    assert runs["errors"] == [] and runs["loading"] is False
    assert get(client, "sites", run="run", latent=1)[1]["total"] > 0


def test_a_new_trace_in_a_run_changes_its_report_after_the_next_poll(
    workspace: Path, tmp_path: Path
) -> None:
    logs = tmp_path / "logs"
    (logs / "run").mkdir(parents=True)
    shutil.copy(
        workspace / "logs" / "run_cpu" / "w0.pt.trace.json", logs / "run" / "w0.pt.trace.json"
    )
    plugin = make_plugin(logs, tmp_path)
    client = client_for(plugin)
    before = get(client, "summary", run="run")[1]["summary"]["latent_count"]
    shutil.copy(
        workspace / "logs" / "run_cpu" / "w0.pt.trace.json", logs / "run" / "w1.pt.trace.json"
    )
    plugin.loader.poll()
    assert plugin.loader.wait_idle(60)
    after = get(client, "summary", run="run")[1]
    assert after["summary"]["latent_count"] == 2 * before
    assert [t["worker"] for t in after["traces"]] == ["w0", "w1"]
    assert get(client, "summary", run="run", worker="w1")[1]["summary"]["latent_count"] == before


# ----- flags -------------------------------------------------------------------------------------
def test_loader_flags_reach_the_plugin_settings(tmp_path: Path) -> None:
    parser = argparse.ArgumentParser()
    SyncAdvisorLoader().define_flags(parser)
    flags = parser.parse_args(
        [
            "--sync_advisor_source_root", str(tmp_path),
            "--sync_advisor_source_root", str(tmp_path / "b"),
            "--sync_advisor_path_map", "/remote/proj=" + str(tmp_path),
            "--sync_advisor_cache_dir", "none",
            "--sync_advisor_reload_interval", "2.5",
            "--sync_advisor_window_mb", "256",
        ]
    )  # fmt: skip
    SyncAdvisorLoader().fix_flags(flags)
    settings = settings_from_flags(flags, str(tmp_path))
    assert settings.window_mb == 256.0
    assert plugin_module.make_engine_options(settings).window_bytes == 256_000_000
    assert settings.source_roots == [str(tmp_path.resolve()), str((tmp_path / "b").resolve())]
    assert settings.path_map == [("/remote/proj", str(tmp_path))]
    assert settings.cache_dir is None
    assert settings.reload_interval_s == 2.5
    assert settings.logdirs == [(None, str(tmp_path.resolve()))]
    defaults = settings_from_flags(parser.parse_args([]), str(tmp_path))
    assert defaults.source_roots and defaults.cache_dir and defaults.reload_interval_s == 10
    assert plugin_module.make_engine_options(defaults).window_bytes is None  # from memory
    never = settings_from_flags(parser.parse_args(["--sync_advisor_window_mb", "0"]), "")
    assert plugin_module.make_engine_options(never).window_bytes == 0


def test_malformed_flags_are_flag_errors() -> None:
    parser = argparse.ArgumentParser()
    SyncAdvisorLoader().define_flags(parser)
    for argv in (
        ["--sync_advisor_path_map", "nonsense"],
        ["--sync_advisor_reload_interval", "0"],
        ["--sync_advisor_window_mb", "-5"],
        ["--sync_advisor_window_mb", "lots"],
    ):
        with pytest.raises(base_plugin.FlagsError):
            SyncAdvisorLoader().fix_flags(parser.parse_args(argv))


def test_logdir_spec_gives_one_prefixed_logdir_per_entry(tmp_path: Path) -> None:
    spec = f"base:{tmp_path / 'a'},{tmp_path / 'b'}"
    assert parse_logdir_spec(spec) == [("base", str(tmp_path / "a")), ("b", str(tmp_path / "b"))]
    flags = argparse.Namespace(logdir="", logdir_spec=spec)
    assert len(settings_from_flags(flags, "").logdirs) == 2


def test_runs_say_which_hold_device_activity_so_the_dashboard_opens_on_one(
    tmp_path: Path,
) -> None:
    from kineto_builder import KinetoTraceBuilder, item_sync

    logs = tmp_path / "logs"
    cpu = KinetoTraceBuilder(gpu=False)
    with cpu.step(1), cpu.op("aten::add"):
        cpu.advance(50)
    cpu.write(logs / "a_cpu" / "w0.pt.trace.json")
    gpu = KinetoTraceBuilder()
    with gpu.step(1):
        item_sync(gpu)
    gpu.write(logs / "b_gpu" / "w0.pt.trace.json")
    _, body = get(client_for(make_plugin(logs, tmp_path)), "runs")
    assert {r["name"]: r["device_activity"] for r in body["runs"]} == {
        "a_cpu": False,
        "b_gpu": True,
    }


def test_runs_say_which_have_findings_so_a_logdir_of_cpu_runs_opens_on_one(
    tmp_path: Path,
) -> None:
    """A newcomer's two CPU runs opened on the empty one ("fixed"), not on their own."""
    from kineto_builder import KinetoTraceBuilder

    logs = tmp_path / "logs"
    for run, op in (("a_fixed", "aten::add"), ("b_mine", "aten::nonzero")):
        cpu = KinetoTraceBuilder(gpu=False)
        with cpu.step(1), cpu.op(op):
            cpu.advance(50)
        cpu.write(logs / run / "w0.pt.trace.json")
    _, body = get(client_for(make_plugin(logs, tmp_path)), "runs")
    runs = {r["name"]: (r["device_activity"], r["findings"]) for r in body["runs"]}
    assert runs == {"a_fixed": (False, False), "b_mine": (False, True)}


def test_a_runs_device_activity_is_unknown_until_one_of_its_traces_says(tmp_path: Path) -> None:
    from types import SimpleNamespace

    def result(has_gpu: bool) -> Any:
        return SimpleNamespace(info=SimpleNamespace(has_gpu_activity=has_gpu))

    def analysed(has_gpu: bool) -> Any:
        return SimpleNamespace(result=result(has_gpu), previous_result=None)

    pending = SimpleNamespace(result=None, previous_result=None)
    assert api_module._device_activity([pending, analysed(False)], loading=True) is None
    assert api_module._device_activity([pending, analysed(True)], loading=True) is True
    assert api_module._device_activity([analysed(False)], loading=False) is False
    assert api_module._device_activity([pending], loading=False) is None  # its trace failed
    # Analysed again after an edit of its sources: what it had still holds meanwhile.
    again = SimpleNamespace(result=None, previous_result=result(True))
    assert api_module._device_activity([again], loading=True) is True


# ----- real traces (skipped without ../shared) ----------------------------------------------------
def test_real_gpu_traces_give_cuda_findings_with_device_context(
    real_traces_dir: Path, tmp_path: Path
) -> None:
    plugin = make_plugin(real_traces_dir, tmp_path)
    client = client_for(plugin)
    _, runs = get(client, "runs")
    assert runs["errors"] == []
    (run,) = runs["runs"]
    selection = {"run": run["name"], "worker": "a100_item_heavy_rank0"}
    status, body = get(client, "summary", **selection)
    assert status == 200 and body["device"] == "cuda" and body["summary"]["sync_count"] > 0
    _, sites = get(client, "sites", **selection, sort="host_wait_us", limit=1)
    top = sites["items"][0]
    assert top["host_wait_us"] > 0
    _, syncs = get(client, "syncs", **selection, site=top["key"], limit=1)
    status, detail = get(client, "sync", **selection, id=syncs["items"][0]["id"])
    assert status == 200 and detail["site"]["key"] == top["key"]
    assert detail["context"]["host"] and detail["context"]["device"]


# ----- catalogue -----------------------------------------------------------------------------
def test_catalogue_serves_every_kind_and_the_sortable_site_columns(client: Client) -> None:
    from tb_syncfinder import catalogue, query

    status, body = get(client, "catalogue")
    assert status == 200
    assert [k["name"] for k in body["kinds"]] == list(catalogue.KIND_NAMES)
    assert all(k["label"] and k["colour"] and k["advice"]["title"] for k in body["kinds"])
    assert body["site_sorts"] == query.SITE_SORTS


def test_a_source_file_edited_while_tensorboard_runs_gets_its_lines_found_again(
    tmp_path: Path,
) -> None:
    """The real engine behind the routes: lines added above ``train_step`` after it was
    analysed. The next poll analyses the trace again, and ``sites`` answers with the
    function as it is now (the recorded line kept, the call a candidate), not the line
    number that now points at another statement."""
    import os

    from kineto_builder import KinetoTraceBuilder, item_sync

    train = tmp_path / "src" / "train.py"
    train.parent.mkdir()
    train.write_text("import torch\n\n\ndef train_step(loss):\n    return loss.item()\n")
    b = KinetoTraceBuilder()
    for n in range(2):
        with b.step(n):
            item_sync(b, stack=[("train.py", 4, "train_step")], kernel_us=200)
    b.write(tmp_path / "logs" / "run" / "worker0.pt.trace.json")
    plugin = make_plugin(tmp_path / "logs", tmp_path)
    client = client_for(plugin)
    _, sites = get(client, "sites", run="run")
    [site] = sites["items"]
    assert (site["line"], site["line_exact"], site["recorded_line"]) == (5, True, None)
    _, runs = get(client, "runs")
    [before] = runs["runs"]

    train.write_text(
        "import torch\nimport math\n\n\ndef train_step(loss):\n    return loss.item()\n"
    )
    stat = train.stat()
    os.utime(train, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))  # coarse clocks
    plugin.loader.poll()
    assert plugin.loader.wait_idle(120)
    _, sites = get(client, "sites", run="run")
    [site] = sites["items"]
    assert (site["line"], site["line_exact"]) == (5, False)
    assert (site["recorded_line"], site["candidates"]) == (4, [6])
    # The runs list says the run's answers changed, though nothing else in it did: the
    # dashboard drops the answers it kept.
    _, runs = get(client, "runs")
    [after] = runs["runs"]
    assert after["generation"] != before["generation"]
    assert {k: v for k, v in after.items() if k != "generation"} == {
        k: v for k, v in before.items() if k != "generation"
    }
