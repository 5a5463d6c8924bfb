from __future__ import annotations

import csv
import gzip
import io
import json
from pathlib import Path

import jsonschema
import msgspec
import pytest
from conftest import make_site

from tb_syncfinder.models import Report
from tb_syncfinder.outputs.annotated_trace import annotate_trace, load_trace_json
from tb_syncfinder.outputs.csv import to_csv
from tb_syncfinder.outputs.sarif import sarif_uri, to_sarif

# The parts of the SARIF 2.1.0 schema (OASIS sarif-schema-2.1.0.json) our output uses,
# with their required properties and types, so a structural break fails without network.
SARIF_SUBSET_SCHEMA = {
    "type": "object",
    "required": ["version", "runs"],
    "properties": {
        "$schema": {"type": "string", "format": "uri"},
        "version": {"enum": ["2.1.0"]},
        "runs": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["tool"],
                "properties": {
                    "tool": {
                        "type": "object",
                        "required": ["driver"],
                        "properties": {
                            "driver": {
                                "type": "object",
                                "required": ["name"],
                                "properties": {
                                    "name": {"type": "string"},
                                    "version": {"type": "string"},
                                    "informationUri": {"type": "string"},
                                    "rules": {
                                        "type": "array",
                                        "items": {
                                            "type": "object",
                                            "required": ["id"],
                                            "properties": {
                                                "id": {"type": "string"},
                                                "shortDescription": {
                                                    "type": "object",
                                                    "required": ["text"],
                                                },
                                                "fullDescription": {
                                                    "type": "object",
                                                    "required": ["text"],
                                                },
                                                "defaultConfiguration": {
                                                    "type": "object",
                                                    "properties": {
                                                        "level": {
                                                            "enum": [
                                                                "none",
                                                                "note",
                                                                "warning",
                                                                "error",
                                                            ]
                                                        }
                                                    },
                                                },
                                            },
                                        },
                                    },
                                },
                            },
                        },
                    },
                    "results": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "required": ["message"],
                            "properties": {
                                "ruleId": {"type": "string"},
                                "ruleIndex": {"type": "integer", "minimum": -1},
                                "level": {"enum": ["none", "note", "warning", "error"]},
                                "message": {
                                    "type": "object",
                                    "required": ["text"],
                                    "properties": {"text": {"type": "string"}},
                                },
                                "locations": {
                                    "type": "array",
                                    "items": {
                                        "type": "object",
                                        "properties": {
                                            "physicalLocation": {
                                                "type": "object",
                                                "properties": {
                                                    "artifactLocation": {
                                                        "type": "object",
                                                        "properties": {
                                                            "uri": {"type": "string"},
                                                            "uriBaseId": {"type": "string"},
                                                        },
                                                    },
                                                    "region": {
                                                        "type": "object",
                                                        "properties": {
                                                            "startLine": {
                                                                "type": "integer",
                                                                "minimum": 1,
                                                            }
                                                        },
                                                    },
                                                },
                                            }
                                        },
                                    },
                                },
                                "partialFingerprints": {
                                    "type": "object",
                                    "additionalProperties": {"type": "string"},
                                },
                            },
                        },
                    },
                },
            },
        },
    },
}


def test_csv_has_one_row_per_site_sorted_by_cost(sample_report: Report) -> None:
    rows = list(csv.DictReader(io.StringIO(to_csv(sample_report.to_json()))))
    assert [r["file"] for r in rows] == ["/home/me/proj/train.py", "/home/me/proj/model.py"]
    first = rows[0]
    assert first["line"] == "42" and first["kind"] == "scalar_readback"
    assert first["ops"] == "aten::item > aten::_local_scalar_dense"
    assert float(first["host_wait_us"]) == 3000.0 and first["count"] == "8"
    assert first["advice"] == "fix scalar_readback" and first["latent"] == "0"


def test_csv_quotes_commas_and_marks_latent_sites(sample_report: Report) -> None:
    report = sample_report.to_json()
    latent = make_site("a,b.py", 3, "f", "dynamic_shape", ["aten::unique"], 2, 0, 0)
    report["latent_sites"] = [msgspec.to_builtins(latent)]
    rows = list(csv.DictReader(io.StringIO(to_csv(report))))
    assert rows[-1]["file"] == "a,b.py" and rows[-1]["latent"] == "1"


def test_sarif_is_structurally_valid_2_1_0(sample_report: Report, tmp_path: Path) -> None:
    sarif = to_sarif(sample_report.to_json(), root="/home/me/proj")
    jsonschema.validate(sarif, SARIF_SUBSET_SCHEMA)
    assert sarif["$schema"].endswith("sarif-2.1.0.json")
    run = sarif["runs"][0]
    rule_ids = [r["id"] for r in run["tool"]["driver"]["rules"]]
    assert rule_ids == ["scalar_readback", "dynamic_shape"]
    for result in run["results"]:
        assert rule_ids[result["ruleIndex"]] == result["ruleId"]


def test_sarif_results_point_at_relative_file_and_line_with_cost_and_advice(
    sample_report: Report,
) -> None:
    results = to_sarif(sample_report.to_json(), root="/home/me/proj")["runs"][0]["results"]
    first = results[0]
    location = first["locations"][0]["physicalLocation"]
    assert location["artifactLocation"]["uri"] == "train.py"
    assert location["region"]["startLine"] == 42
    assert first["level"] == "error"  # 4 ms of a 40 ms run: 10 %
    assert "host wait 3.00 ms" in first["message"]["text"]
    assert "Fix: fix scalar_readback" in first["message"]["text"]
    assert results[1]["level"] == "warning"


def test_a_replayed_sites_sarif_level_is_what_fixing_it_saves_not_its_wait(
    sample_report: Report,
) -> None:
    """A real A100 site with 68 % of the step in host wait that the replay said saves 0 us
    (the GPU's work hid the wait) was an error; a site that saves 18 % of the step fixed
    with its partner is one, and one that saves only once every other site is fixed is not
    (three of the demo seg's sites each got that figure, a 2 us one among them)."""
    report = sample_report.to_json()
    report["summary"]["mean_wall_step_time_us"] = 10_000.0
    hidden, together = report["sites"][:2]
    hidden.update(
        share_of_step=0.68,
        saving_method="replay",
        predicted_saving_per_step_us=0.0,
        predicted_saving_with_others_per_step_us=1_800.0,
    )
    together.update(
        share_of_step=0.01,
        saving_method="replay",
        predicted_saving_per_step_us=100.0,
        fix_with_saving_per_step_us=1_800.0,
    )
    results = to_sarif(report)["runs"][0]["results"]
    levels = {
        r["locations"][0]["physicalLocation"]["region"]["startLine"]: r["level"] for r in results
    }
    assert levels[hidden["line"]] == "warning"
    assert levels[together["line"]] == "error"


def _stackless_report(sample_report: Report) -> dict:
    """The sample report plus a site without a Python stack whose syncs were found in
    ``/home/me/proj/traces/w1.pt.trace.json``."""
    report = sample_report.to_json()
    site = msgspec.to_builtins(
        make_site(
            None,
            None,
            None,
            "explicit_sync",
            [],
            3,
            5.0,
            0.0,
            apis=["cudaDeviceSynchronize"],
            key="-:cudaDeviceSynchronize",
        )
    )
    report["sites"].append(site)
    sync = dict(
        report["syncs"][0], site_key=site["key"], trace="/home/me/proj/traces/w1.pt.trace.json"
    )
    report["syncs"].append(sync)
    return report


def test_sarif_reports_a_site_without_a_python_stack_at_its_trace_file(
    sample_report: Report,
) -> None:
    log = to_sarif(_stackless_report(sample_report), root="/home/me/proj")
    jsonschema.validate(log, SARIF_SUBSET_SCHEMA)
    run = log["runs"][0]
    results = run["results"]
    assert len(results) == 3  # every site, none dropped
    stackless = results[-1]
    location = stackless["locations"][0]
    assert location["physicalLocation"]["artifactLocation"]["uri"] == "traces/w1.pt.trace.json"
    assert location["physicalLocation"]["region"]["startLine"] == 1  # code scanning needs one
    assert location["logicalLocations"][0]["fullyQualifiedName"] == "cudaDeviceSynchronize"
    assert "No Python stack was recorded" in stackless["message"]["text"]
    assert "with_stack=True" in stackless["message"]["text"]
    # Outside any operator the call is named: it was "a CUDA API call" on every device.
    assert stackless["message"]["text"].startswith("cudaDeviceSynchronize (explicit_sync)")
    rules = run["tool"]["driver"]["rules"]
    assert rules[stackless["ruleIndex"]]["id"] == stackless["ruleId"] == "explicit_sync"
    (note,) = run["invocations"][0]["toolExecutionNotifications"]
    assert note["properties"] == {"siteCount": 1, "syncCount": 3}


def test_sarif_names_a_trace_outside_the_root_by_its_absolute_file_uri(
    sample_report: Report,
) -> None:
    """A logdir outside the repository: stripping the trace path's anchor gave
    "home/me/proj/traces/w1.pt.trace.json" relative to the root, a file that is not there."""
    log = to_sarif(_stackless_report(sample_report), root="/srv/repo")
    jsonschema.validate(log, SARIF_SUBSET_SCHEMA)
    artifact = log["runs"][0]["results"][-1]["locations"][0]["physicalLocation"]["artifactLocation"]
    assert artifact == {"uri": "file:///home/me/proj/traces/w1.pt.trace.json"}
    properties = log["runs"][0]["results"][-1]["properties"]
    assert properties["trace"] == artifact["uri"]  # the same place, said once way


def test_sarif_keeps_a_remote_trace_url_as_it_is(sample_report: Report) -> None:
    report = _stackless_report(sample_report)
    report["syncs"][-1]["trace"] = "gs://bucket/logs/w1.pt.trace.json"
    log = to_sarif(report, root="/srv/repo")
    location = log["runs"][0]["results"][-1]["locations"][0]["physicalLocation"]
    assert location["artifactLocation"] == {"uri": "gs://bucket/logs/w1.pt.trace.json"}


def test_sarif_results_with_a_source_line_are_unchanged_by_stackless_sites(
    sample_report: Report,
) -> None:
    plain = to_sarif(sample_report.to_json(), root="/home/me/proj")["runs"][0]
    mixed = to_sarif(_stackless_report(sample_report), root="/home/me/proj")["runs"][0]
    assert mixed["results"][:2] == plain["results"]
    assert "invocations" not in plain  # a log with every line found reads as before


@pytest.mark.parametrize(
    "file, root, uri",
    [
        ("/home/me/proj/pkg/train.py", "/home/me/proj", "pkg/train.py"),
        ("/elsewhere/pkg/train.py", "/home/me/proj", "elsewhere/pkg/train.py"),
        ("C:\\Users\\me\\my proj\\train.py", "/x", "Users/me/my%20proj/train.py"),
        ("./pkg/train.py", "/x", "pkg/train.py"),
        ("pkg\\sub\\m.py", "/x", "pkg/sub/m.py"),
    ],
)
def test_sarif_uris_are_relative_with_forward_slashes(file: str, root: str, uri: str) -> None:
    assert sarif_uri(file, root) == uri


def _trace_bytes() -> bytes:
    events = [
        {
            "ph": "X",
            "cat": "cpu_op",
            "name": "aten::item",
            "pid": 100,
            "tid": 7,
            "ts": 1000.0,
            "dur": 400.0,
        },
        {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 900.0, "dur": 300.0},
    ]
    return json.dumps({"schemaVersion": 1, "traceEvents": events}).encode()


def test_annotated_trace_adds_a_sync_advisor_process_with_wait_and_idle_slices(
    sample_report: Report, tmp_path: Path
) -> None:
    trace = tmp_path / "w.pt.trace.json.gz"
    trace.write_bytes(gzip.compress(_trace_bytes()))
    report = sample_report.to_json()

    out = json.loads(annotate_trace(str(trace), report["syncs"], report["sites"]))

    events = out["traceEvents"]
    assert out["schemaVersion"] == 1 and events[0]["name"] == "aten::item"
    advisor = [e for e in events if e.get("pid") == 101]
    names = {e["args"]["name"] for e in advisor if e["name"] in ("process_name", "thread_name")}
    assert names == {"Sync Advisor", "host wait", "GPU idle after"}
    wait, idle = [e for e in advisor if e["ph"] == "X"]
    assert (wait["ts"], wait["dur"]) == (1000.0, 375.0)
    assert (idle["ts"], idle["dur"]) == (1375.0, 125.0)
    assert wait["args"]["kind"] == "scalar_readback" and wait["args"]["op"] == "aten::item"
    assert wait["args"]["source"] == "/home/me/proj/train.py:42"
    assert wait["args"]["advice"] == "fix scalar_readback"


def test_annotate_reads_traces_with_unquoted_na_and_raw_windows_paths(tmp_path: Path) -> None:
    raw = (
        b'{"traceEvents": [{"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": 1, '
        b'"dur": N/A, "args": {"file": "C:\\Users\\me\\model.py"}}]}'
    )
    trace = tmp_path / "win.pt.trace.json"
    trace.write_bytes(raw)
    data = load_trace_json(str(trace))
    event = data["traceEvents"][0]
    assert event["dur"] == "N/A" and event["args"]["file"] == "C:\\Users\\me\\model.py"
    assert json.loads(annotate_trace(str(trace), []))["traceEvents"][-1]["ph"] == "M"


def test_annotate_names_the_file_when_it_is_not_json(tmp_path: Path) -> None:
    trace = tmp_path / "broken.pt.trace.json"
    trace.write_bytes(b'{"traceEvents": [')
    with pytest.raises(ValueError, match="broken.pt.trace.json: not valid JSON"):
        annotate_trace(str(trace), [])


@pytest.mark.parametrize(
    "text, expected",
    [
        (b'{"traceEvents": [{"ph": "X", "name": "a", "ts": 1, "dur": NaN}]}', None),
        (
            b'{"traceEvents": [{"ph": "X", "args": {"deep": '
            + b"[" * 50_000
            + b"]" * 50_000
            + b"}}]}",
            "nested too deeply",
        ),
    ],
)
def test_annotate_reads_with_the_readers_repairs_and_names_what_it_cannot(
    tmp_path: Path, text: bytes, expected: str | None
) -> None:
    trace = tmp_path / "odd.pt.trace.json"
    trace.write_bytes(text)
    if expected is None:  # NaN read as null, as the analysis reads it
        assert load_trace_json(str(trace))["traceEvents"][0]["dur"] is None
        return
    with pytest.raises(ValueError, match=f"odd.pt.trace.json: not valid JSON .*{expected}"):
        annotate_trace(str(trace), [])


# The columns as they were before any was added: a reader may take them by position.
FIRST_CSV_COLUMNS = (
    "rank,latent,file,line,line_exact,def_line,func,kind,ops,apis,count,per_step,"
    "host_wait_us,mean_host_wait_us,gpu_idle_us,share_of_step,steps,advice,key"
).split(",")


def test_csv_carries_what_each_site_saves_fixed_together_and_with_which_sites(tmp_path) -> None:
    from pathlib import Path

    from tb_syncfinder import analyze

    pairs = Path(__file__).resolve().parent / "gpu_pairs"
    report = analyze(
        str(pairs / "readback_metrics_baseline.pt.trace.json.gz"), source_roots=[str(pairs)]
    ).to_json()
    rows = {int(r["line"]): r for r in csv.DictReader(io.StringIO(to_csv(report)))}
    keys = {site["line"]: site["key"] for site in report["sites"]}
    assert rows[199]["fix_with"] == keys[204] and rows[204]["fix_with"] == keys[199]
    assert float(rows[199]["predicted_saving_with_others_per_step_us"]) > 10 * float(
        rows[199]["predicted_saving_per_step_us"]
    )


def test_sarif_tells_each_of_two_sites_waiting_for_the_same_work_to_fix_the_other_too() -> None:
    from pathlib import Path

    from tb_syncfinder import analyze
    from tb_syncfinder.outputs.sarif import to_sarif

    pairs = Path(__file__).resolve().parent / "gpu_pairs"
    report = analyze(
        str(pairs / "readback_metrics_baseline.pt.trace.json.gz"), source_roots=[str(pairs)]
    ).to_json()
    keys = {site["key"]: site["line"] for site in report["sites"]}
    results = to_sarif(report)["runs"][0]["results"]
    by_line = {r["locations"][0]["physicalLocation"]["region"]["startLine"]: r for r in results}
    assert "then waits for the same GPU work" in by_line[199]["message"]["text"]
    assert [keys[k] for k in by_line[199]["properties"]["fixWith"]] == [204]
    assert [keys[k] for k in by_line[204]["properties"]["fixWith"]] == [199]


def test_csv_ends_with_the_predicted_saving_it_is_ranked_by_and_its_method(
    sample_report: Report,
) -> None:
    report = sample_report.to_json()
    for site in report["sites"]:
        saving = 2400.0 if site["file"].endswith("model.py") else 800.0
        site.update(
            predicted_saving_us=saving,
            predicted_saving_per_step_us=saving / 4,
            saving_method="replay",
        )
    latent = make_site("a.py", 3, "f", "dynamic_shape", ["aten::unique"], 2, 0, 0, latent=True)
    report["latent_sites"] = [msgspec.to_builtins(latent)]
    text = to_csv(report)
    header = next(csv.reader(io.StringIO(text)))
    assert header[: len(FIRST_CSV_COLUMNS)] == FIRST_CSV_COLUMNS
    assert header[len(FIRST_CSV_COLUMNS) :] == [
        "predicted_saving_us",
        "predicted_saving_per_step_us",
        "saving_method",
        "waiting_for",
        "predicted_saving_with_others_per_step_us",
        "fix_with",
        "unprofiled_predicted_saving_per_step_us",
        "notebook",
        "notebook_cell",
        "library_line",  # added last: no column moves
        "library_func",
        "library_lines",
        "ranks",
    ]
    rows = list(csv.DictReader(io.StringIO(text)))
    assert [(r["file"], r["predicted_saving_us"]) for r in rows[:2]] == [
        ("/home/me/proj/model.py", "2400"),  # ranked by predicted saving, not by cost
        ("/home/me/proj/train.py", "800"),
    ]
    assert rows[0]["predicted_saving_per_step_us"] == "600" and rows[0]["saving_method"] == "replay"
    assert (rows[2]["latent"], rows[2]["predicted_saving_us"], rows[2]["saving_method"]) == (
        "1",
        "",
        "",
    )


def test_sarif_at_a_def_line_says_the_call_line_is_unknown_and_names_the_candidates(
    sample_report: Report,
) -> None:
    report = sample_report.to_json()
    exact = report["sites"][0]
    inexact = dict(exact, key="train.py:12:aten::is_nonzero", line=12, line_exact=False)
    inexact.update(candidates=[24, 27], def_line=12)
    changed = dict(exact, key="train.py:3:aten::item", line=3, line_exact=False)
    changed.update(def_line=None, recorded_line=3)
    report["sites"] += [inexact, changed]
    results = to_sarif(report, root="/home/me/proj")["runs"][0]["results"]
    by_line = {r["locations"][0]["physicalLocation"]["region"]["startLine"]: r for r in results}
    text = by_line[12]["message"]["text"]
    assert "The exact call line is not known; this is the function's definition" in text
    assert "(candidate lines 24, 27)" in text
    assert "not known" not in by_line[exact["line"]]["message"]["text"]
    moved = by_line[3]["message"]["text"]
    assert "the file changed since profiling" in moved and "definition" not in moved


def test_sarif_says_which_traces_it_could_not_read_and_that_it_is_partial(
    sample_report: Report,
) -> None:
    """A review's upload of a run with three unreadable traces carried no word of them."""
    report = sample_report.to_json()
    report["traces"].append({"path": "/logs/run/w1.pt.trace.json", "error": "truncated"})
    sarif = to_sarif(report, root="/home/me/proj")
    jsonschema.validate(sarif, SARIF_SUBSET_SCHEMA)
    (invocation,) = sarif["runs"][0]["invocations"]
    assert invocation["executionSuccessful"] is False
    errors = [n for n in invocation["toolExecutionNotifications"] if n["level"] == "error"]
    assert [n["message"]["text"] for n in errors] == ["/logs/run/w1.pt.trace.json: truncated"]
    assert "invocations" not in to_sarif(sample_report.to_json(), root="/home/me/proj")["runs"][0]


def test_sarif_places_a_site_at_its_file_as_found_under_the_root(
    sample_report: Report, tmp_path: Path
) -> None:
    """The trace records the path on the machine that ran it; --source-root found the file
    at src/model/train.py under the working directory: that is what code scanning places."""
    report = sample_report.to_json()
    site = next(s for s in report["sites"] if s["key"] == report["syncs"][0]["site_key"])
    found = tmp_path / "src" / "model" / Path(site["file"]).name
    for sync in report["syncs"]:
        if sync["site_key"] == site["key"]:
            sync["source"]["resolved_path"] = str(found)
    sarif = to_sarif(report, root=str(tmp_path))
    uris = [
        r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"]
        for r in sarif["runs"][0]["results"]
    ]
    assert f"src/model/{found.name}" in uris


def test_sarif_places_a_site_found_in_an_installed_package_at_the_repositorys_copy(
    sample_report: Report, tmp_path: Path
) -> None:
    """A virtual environment inside the clone (``.venv``, as the README sets up) holds an
    installed copy of the project: a line found there is placed at the repository's own
    file, which code scanning knows, not inside ``.venv`` (gitignored); where the
    repository has no such file, at the path the trace recorded."""
    report = sample_report.to_json()
    site = next(s for s in report["sites"] if s["key"] == report["syncs"][0]["site_key"])
    name = Path(site["file"]).name
    installed = tmp_path / ".venv" / "lib" / "python3.11" / "site-packages" / "proj" / name
    for sync in report["syncs"]:
        if sync["site_key"] == site["key"]:
            sync["source"]["resolved_path"] = str(installed)

    def uri() -> str:
        result = next(
            r
            for r in to_sarif(report, root=str(tmp_path))["runs"][0]["results"]
            if r["locations"][0]["physicalLocation"]["region"]["startLine"] == site["line"]
        )
        return result["locations"][0]["physicalLocation"]["artifactLocation"]["uri"]

    assert uri() == Path(site["file"]).as_posix().lstrip("/")  # no repository copy
    (tmp_path / "proj").mkdir()
    (tmp_path / "proj" / name).write_text("x = 1\n" * 50)
    assert uri() == f"proj/{name}"
