from __future__ import annotations

import copy
from typing import Any

from tb_syncfinder.compare import compare, site_match_key
from tb_syncfinder.models import Report


def _site(report: dict[str, Any], kind: str) -> dict[str, Any]:
    return next(s for s in report["sites"] if s["kind"] == kind)


def _status(result: dict[str, Any], kind: str) -> str:
    return next(s["status"] for s in result["sites"] if s["kind"] == kind)


def test_identical_runs_are_all_same(sample_report: Report) -> None:
    report = sample_report.to_json()
    result = compare(report, copy.deepcopy(report))
    assert {s["status"] for s in result["sites"]} == {"same"}
    assert result["step_time_change_us"] == 0.0
    assert result["counts"]["same"] == 2


def test_site_gone_is_fixed_and_site_appearing_is_new(sample_report: Report) -> None:
    base = sample_report.to_json()
    new = copy.deepcopy(base)
    new["sites"] = [s for s in new["sites"] if s["kind"] != "dynamic_shape"]
    assert _status(compare(base, new), "dynamic_shape") == "fixed"
    assert _status(compare(new, base), "dynamic_shape") == "new"
    fixed = next(s for s in compare(base, new)["sites"] if s["status"] == "fixed")
    assert fixed["before"]["count"] == 4 and fixed["after"] is None


def test_moved_line_still_matches_by_file_function_op_and_kind(sample_report: Report) -> None:
    base = sample_report.to_json()
    new = copy.deepcopy(base)
    moved = _site(new, "scalar_readback")
    moved["line"] = 50
    moved["file"] = "/other/checkout/train.py"  # recorded in another checkout
    result = compare(base, new)
    assert _status(result, "scalar_readback") == "same"
    row = next(s for s in result["sites"] if s["kind"] == "scalar_readback")
    assert (row["before"]["line"], row["after"]["line"]) == (42, 50)


def test_cost_change_beyond_ten_percent_is_better_or_worse(sample_report: Report) -> None:
    base = sample_report.to_json()
    cheaper = copy.deepcopy(base)
    _site(cheaper, "scalar_readback")["host_wait_us"] = 2000.0  # 4000 -> 3000 us: -25 %
    assert _status(compare(base, cheaper), "scalar_readback") == "better"
    dearer = copy.deepcopy(base)
    _site(dearer, "scalar_readback")["gpu_idle_us"] = 1500.0  # 4000 -> 4500 us: +12.5 %
    assert _status(compare(base, dearer), "scalar_readback") == "worse"
    noisy = copy.deepcopy(base)
    _site(noisy, "scalar_readback")["host_wait_us"] = 3300.0  # +7.5 %: noise
    assert _status(compare(base, noisy), "scalar_readback") == "same"


def test_a_site_syncing_more_often_is_worse_even_where_it_measured_cheaper(
    sample_report: Report,
) -> None:
    """A rank that also called .item() every step: twice the syncs, each waiting less.
    Judged by cost alone it was 'better' and passed --fail-on-regression."""
    base = sample_report.to_json()
    twice = copy.deepcopy(base)
    site = _site(twice, "scalar_readback")
    site["count"] *= 2
    site["host_wait_us"] /= 2
    assert _status(compare(base, twice), "scalar_readback") == "worse"
    # Half the syncs at the same cost per step: better, by its count.
    half = copy.deepcopy(base)
    _site(half, "scalar_readback")["count"] //= 2
    assert _status(compare(base, half), "scalar_readback") == "better"


def test_cost_is_compared_per_step_not_in_total(sample_report: Report) -> None:
    base = sample_report.to_json()
    longer = copy.deepcopy(base)
    longer["summary"]["step_count"] = 8  # twice the steps, same total cost: half per step
    assert _status(compare(base, longer), "scalar_readback") == "better"


def test_two_sites_with_the_same_key_are_merged(sample_report: Report) -> None:
    base = sample_report.to_json()
    twice = copy.deepcopy(_site(base, "scalar_readback"))
    twice["line"] = 44
    base["sites"].append(twice)
    new = sample_report.to_json()
    result = compare(base, new)
    row = next(s for s in result["sites"] if s["kind"] == "scalar_readback")
    assert row["before"]["lines"] == [42, 44] and row["before"]["count"] == 16
    assert row["status"] == "better"
    assert len(result["sites"]) == 2


def test_match_key_uses_basename_function_first_op_and_kind() -> None:
    site = {
        "file": "C:\\proj\\train.py",
        "func": "step",
        "ops": ["aten::item", "x"],
        "kind": "scalar_readback",
        "line": 3,
    }
    assert site_match_key(site) == "train.py:step:aten::item:scalar_readback"
    assert (
        site_match_key({"file": None, "func": None, "ops": [], "kind": "explicit_sync"})
        == ":::explicit_sync"
    )
    # Outside any operator, the API call: two explicit syncs of a stackless trace differ.
    bare = {"file": None, "func": None, "ops": [], "kind": "explicit_sync"}
    device = site_match_key({**bare, "apis": ["cudaDeviceSynchronize"]})
    event = site_match_key({**bare, "apis": ["cudaEventSynchronize"]})
    assert device == "::cudaDeviceSynchronize:explicit_sync" and device != event


def test_step_time_change_comes_from_mean_step_time(sample_report: Report) -> None:
    base = sample_report.to_json()
    new = copy.deepcopy(base)
    new["summary"]["mean_step_time_us"] = 7_500.0
    result = compare(base, new)
    assert result["step_time_change_us"] == -2_500.0
    assert result["base"]["mean_step_time_us"] == 10_000.0


def test_latent_sites_are_compared_by_count(sample_report: Report) -> None:
    base = sample_report.to_json()
    latent = copy.deepcopy(_site(base, "dynamic_shape"))
    latent.update(host_wait_us=0.0, gpu_idle_us=0.0, latent=True)
    base["latent_sites"] = [latent]
    new = copy.deepcopy(base)
    new["latent_sites"] = []
    assert compare(base, new)["latent_sites"][0]["status"] == "fixed"


def test_each_unreadable_trace_of_either_run_is_named_with_its_reason(
    sample_report: Report,
) -> None:
    base = sample_report.to_json()
    new = copy.deepcopy(base)
    base["traces"].append({"path": "/runs/a/x.pt.trace.json", "error": "empty file"})
    new["traces"].append({"path": "/runs/b/t.pt.trace.json.gz", "error": "truncated gzip"})
    assert compare(base, new)["unreadable"] == [
        {"side": "base", "path": "/runs/a/x.pt.trace.json", "error": "empty file"},
        {"side": "new", "path": "/runs/b/t.pt.trace.json.gz", "error": "truncated gzip"},
    ]
    assert compare(sample_report.to_json(), sample_report.to_json())["unreadable"] == []


def test_a_compare_row_carries_the_sites_api_calls(sample_report: Report) -> None:
    base = sample_report.to_json()
    row = next(s for s in compare(base, base)["sites"] if s["kind"] == "dynamic_shape")
    assert row["apis"] == ["cudaMemcpyAsync"]


def test_a_report_from_before_todays_site_keys_is_said_to_differ(sample_report: Report) -> None:
    current = sample_report.to_json()
    assert current["site_keys"] == 4
    assert compare(current, current)["keys_differ"] is None
    older = {k: v for k, v in current.items() if k != "site_keys"}
    why = compare(older, current)["keys_differ"]
    assert why and why.startswith("the baseline report was written by another version of")


def test_each_side_carries_the_reports_predicted_saving_beside_its_cost(
    sample_report: Report,
) -> None:
    # The cost (wait + idle per step) overstates what a fix saves where other work fills
    # the gap: a newcomer read 8.78 ms "was costing" where the report predicted 3.20 ms.
    from tb_syncfinder.outputs.text import render_compare

    base = sample_report.to_json()
    gone = _site(base, "dynamic_shape")
    new = copy.deepcopy(base)
    new["sites"] = [s for s in new["sites"] if s["kind"] != "dynamic_shape"]
    result = compare(base, new)
    row = next(s for s in result["sites"] if s["status"] == "fixed")
    assert row["before"]["predicted_saving_per_step_us"] == gone["predicted_saving_per_step_us"]
    assert row["before"]["saving_method"] == gone["saving_method"]
    approx = "~" if gone["saving_method"] == "replay" else "≤"
    assert f"fixing it saves {approx}" in render_compare(result, width=200)
    # Merged sites add up; a report without the figure (an older version) has none.
    twice = copy.deepcopy(_site(base, "scalar_readback"))
    twice["line"] = 44
    base["sites"].append(twice)
    merged = next(s for s in compare(base, new)["sites"] if s["kind"] == "scalar_readback")
    one = _site(new, "scalar_readback")["predicted_saving_per_step_us"]
    assert merged["before"]["predicted_saving_per_step_us"] == 2 * one
    for site in base["sites"]:
        del site["predicted_saving_per_step_us"]
    old = next(s for s in compare(base, new)["sites"] if s["status"] == "fixed")
    assert old["before"]["predicted_saving_per_step_us"] is None
    assert old["before"]["saving_method"] is None
    assert "fixing it saves" not in render_compare(compare(base, new), width=200)
    # A latent site (a CPU-only trace) saves nothing where it was seen: no figure either.
    cpu = sample_report.to_json()
    cpu["latent_sites"] = [dict(s, latent=True) for s in cpu["sites"]]
    latent_rows = compare(cpu, copy.deepcopy(cpu))["latent_sites"]
    assert latent_rows and all(
        r["before"]["predicted_saving_per_step_us"] is None for r in latent_rows
    )


def test_both_detection_notes_mark_their_rows_together(sample_report: Report) -> None:
    """A CPU baseline from a version that did not list .tolist(), against a GPU run with a
    .tolist() latent site and a .to() copy: the first note's marking skipped the second
    (a short-circuit `or`), and the copy failed the gate."""
    base = sample_report.to_json()
    base["sites"], base["syncs"] = [], []
    base["traces"][0].update(device="cpu", has_gpu_activity=False)
    base["latent_methods"] = []
    base["latent_sites"] = [copy.deepcopy(_site(sample_report.to_json(), "scalar_readback"))]
    base["latent_sites"][0]["latent"] = True
    new = sample_report.to_json()
    new["latent_methods"] = ["tolist"]
    copy_site = copy.deepcopy(_site(new, "scalar_readback"))
    copy_site.update(kind="blocking_host_to_device", ops=["aten::to"], key="t.py:1:aten::to")
    tolist = copy.deepcopy(_site(new, "dynamic_shape"))
    tolist.update(kind="device_to_host_copy", ops=[], apis=["Tensor.tolist"], key="t.py:2:")
    new["sites"] = [*new["sites"], copy_site, tolist]
    result = compare(base, new)
    by_kind = {row["kind"]: row for row in result["sites"]}
    assert by_kind["blocking_host_to_device"].get("newly_listed") is True
    assert by_kind["device_to_host_copy"].get("newly_listed") is True
    assert "CPU-only trace cannot show" in result["detection_note"]
    assert ".tolist()" in result["detection_note"]


def test_a_ctc_loss_newly_listed_on_the_cpu_is_not_a_regression_of_an_older_baseline(
    sample_report: Report,
) -> None:
    """CPU-only traces list a CTC loss's copies since 2026-11-28: against a baseline written
    before (no ``latent_ops``) they are newly listed, not new; against one that lists them,
    they gate as usual."""
    base = sample_report.to_json()
    base["sites"], base["syncs"], base["latent_sites"] = [], [], []
    base["traces"][0].update(device="cpu", has_gpu_activity=False)
    base.pop("latent_ops", None)
    new = copy.deepcopy(base)
    new["latent_ops"] = ["aten::ctc_loss"]
    ctc = copy.deepcopy(_site(sample_report.to_json(), "scalar_readback"))
    ctc.update(
        kind="device_to_host_copy", ops=["aten::ctc_loss"], apis=["aten::ctc_loss"], latent=True
    )
    ctc["key"] = "t.py:3:aten::ctc_loss"
    new["latent_sites"] = [ctc]
    (row,) = compare(base, new)["latent_sites"]
    assert row["status"] == "new" and row.get("newly_listed") is True
    base["latent_ops"] = new["latent_ops"]
    (row,) = compare(base, new)["latent_sites"]
    assert row["status"] == "new" and not row.get("newly_listed")


def test_a_library_read_fixed_under_a_call_still_reading_elsewhere_is_a_fixed_row() -> None:
    """``trainer.train()`` ran the Trainer's NaN check and the model's mask check; with
    ``logging_nan_inf_filter=False`` the first is gone. Rows by library function say that,
    where one row for the line read "better"."""

    def site(func: str, line: int, count: int) -> dict:
        return {
            "file": "/w/train.py",
            "line": 36,
            "func": "<module>",
            "kind": "scalar_readback",
            "ops": ["aten::is_nonzero", "aten::item"],
            "count": count,
            "latent": True,
            "library": {"file": f"transformers/{func[0]}.py", "line": line, "func": func[1]},
        }

    nan_check = site(("trainer", "_run_epoch"), 1920, 6)
    mask = site(("masking_utils", "_ignore_bidirectional_mask_sdpa"), 354, 3)

    def report(sites: list) -> dict:
        return {"summary": {"step_count": 3}, "site_keys": 4, "traces": [], "latent_sites": sites}

    result = compare(report([nan_check, mask]), report([mask]))
    rows = {row["library"]["func"]: row["status"] for row in result["latent_sites"]}
    assert rows == {"_run_epoch": "fixed", "_ignore_bidirectional_mask_sdpa": "same"}
    # Lightning's two reads through one helper: the report's keys say which code each is.
    helper = {"file": "lightning/fabric/utilities/apply_func.py", "line": 134, "func": "to_item"}
    bar, logs = (
        {
            **site(("x", "y"), 0, count),
            "library": helper,
            "key": f"/w/train.py:36:aten::item@lightning/pytorch/{where}",
        }
        for where, count in (
            ("trainer/connectors/logger_connector/result.py:metrics", 6),
            ("trainer/connectors/logger_connector/logger_connector.py:log_metrics", 1),
        )
    )
    rows = compare(report([bar, logs]), report([logs]))["latent_sites"]
    assert sorted((r["status"], r["before"]["count"]) for r in rows) == [("fixed", 6), ("same", 1)]
    from tb_syncfinder.outputs.text import render_compare

    text = render_compare(result, width=200)
    assert "fixed  /w/train.py:36" in text
    assert "· synced in transformers/trainer.py:1920* (_run_epoch)" in text
