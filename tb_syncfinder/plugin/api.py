"""What each route answers, as data: ``*_impl`` functions of already-checked arguments that
return JSON-ready dicts (or an export's bytes). The plugin class only parses requests and
wraps these answers; the tests can call them without HTTP."""

from __future__ import annotations

import os
import re
from collections import Counter
from typing import Any
from urllib.parse import quote

from tensorboard import errors

from tb_syncfinder import catalogue, query
from tb_syncfinder.discovery import is_trace_file_name
from tb_syncfinder.plugin.loader import ERROR, NO_SUMMARY, RETRY, TraceLoader
from tb_syncfinder.plugin.selection import Selection, workers_of

MAX_LIMIT = 500
DEFAULT_LIMIT = 100


def catalogue_impl() -> dict[str, Any]:
    """The sync kinds (labels, colours, descriptions) and the sortable site columns: the
    dashboard keeps no copy of either."""
    return {**catalogue.to_json(), **query.to_json()}


def runs_impl(loader: TraceLoader) -> dict[str, Any]:
    runs = []
    errors_found = []
    no_summary: list[dict[str, Any]] = []
    for name in loader.run_names():
        run = loader.get_run(name)
        if run is None:
            continue
        with loader.lock:
            states = list(run.traces.values())
            loading = run.loading
            generation = run.generation
        unsummarised = [s for s in states if s.status == NO_SUMMARY]
        # A retried file waiting for its next poll still shows its last failure.
        failed = [
            s
            for s in states
            if s.status != NO_SUMMARY and (s.status in (ERROR, RETRY) or s.error is not None)
        ]
        runs.append(
            {
                "name": name,
                "loading": loading,
                "workers": workers_of(loader, run),
                "trace_count": len(states),
                "error_count": len(failed),
                "no_summary_count": len(unsummarised),
                "device_activity": _device_activity(states, loading),
                "findings": _findings(states, loading),
                # Changes whenever what the run's routes answer changes (a trace analysed,
                # changed, removed, or analysed again after its sources were edited): a
                # client that keeps answers asks again.
                "generation": generation,
            }
        )
        if unsummarised:
            no_summary.append(_no_summary_entry(loader, name, unsummarised))
        errors_found.extend(
            # being_written: truncated, or changed while it was read; shown as such until
            # a complete read replaces the entry with the report.
            {
                "path": state.ref.path,
                "run": name,
                "reason": state.error,
                "retrying": state.status == RETRY,
                "being_written": state.being_written,
            }
            for state in failed
        )
    with loader.lock:
        errors_found = list(loader.logdir_errors) + errors_found
    return {
        "loading": loader.loading,
        "runs": runs,
        "errors": errors_found,
        "no_summary": no_summary,
    }


# The paths listed per run in "no_summary": the count says how many there are in all.
NO_SUMMARY_PATHS_SHOWN = 20


def _device_activity(states: list[Any], loading: bool) -> bool | None:
    """Whether some trace of the run holds device (GPU, NPU) activity: True as soon as one
    analysed trace does, False once every trace is analysed and none does, else None
    (not known yet). The dashboard opens on the first run that has it: a CPU-only run can
    only list what would synchronize."""
    # A trace analysed again after its sources changed still has the activity it had.
    results = [r for state in states if (r := state.result or state.previous_result) is not None]
    if any(result.info.has_gpu_activity for result in results):
        return True
    return None if loading or not results else False


def _findings(states: list[Any], loading: bool) -> bool | None:
    """Whether some trace of the run has a finding (a sync, or on a CPU trace a latent
    one), as ``_device_activity`` answers: where no run has device activity the dashboard
    opens on the first run with findings, not on an empty one."""
    results = [r for state in states if (r := state.result or state.previous_result) is not None]
    if any(getattr(r, "syncs", None) or getattr(r, "latent", None) for r in results):
        return True
    return None if loading or not results else False


def _no_summary_entry(loader: TraceLoader, run: str, states: list[Any]) -> dict[str, Any]:
    """A summarised run's traces that have no valid summary, why, and the command that
    writes them (run in the folder that holds them all)."""
    from tb_syncfinder.summaries import summarise_command

    paths = sorted(state.ref.path for state in states)
    folder = _common_folder(paths)
    reasons = sorted({state.error or "no summary" for state in states})
    return {
        "run": run,
        "count": len(paths),
        "paths": paths[:NO_SUMMARY_PATHS_SHOWN],
        "reasons": reasons,
        "folder": folder,
        "command": summarise_command(folder, loader.summaries),
    }


def _common_folder(paths: list[str]) -> str:
    if any("://" in p for p in paths):
        folders = [p.rsplit("/", 1)[0] for p in paths]
        prefix = os.path.commonprefix(folders)
        return prefix if prefix in folders else prefix.rsplit("/", 1)[0]
    return os.path.commonpath([os.path.dirname(p) for p in paths])


def summary_impl(sel: Selection) -> dict[str, Any]:
    from tb_syncfinder.outputs.text import recorded_nothing

    report = sel.report_json
    # Each trace says whether the PyTorch Profiler tab lists it (a file named as its loader
    # takes workers; not torch_npu's ``*_ascend_pt/.../trace_view.json``): the detail
    # tells where to look there only for a trace that tab shows.
    traces = [
        {**t, "profiler_tab": is_trace_file_name(os.path.basename(str(t.get("path") or "")))}
        for t in report["traces"]
    ]
    # A file that recorded nothing defaults to "cpu": beside a GPU trace it took the run's
    # device (and the with_stack snippet dropped ProfilerActivity.CUDA).
    devices = Counter(
        t["device"]
        for t in traces
        if t.get("device") and not t.get("error") and not recorded_nothing(t)
    )
    return {
        "summary": report["summary"],
        "traces": traces,
        "top_kinds": sel.top_kinds,
        "device": devices.most_common(1)[0][0] if devices else "unknown",
        "has_stacks": any(t.get("has_stacks") for t in traces),
        "has_gpu_activity": any(t.get("has_gpu_activity") for t in traces),
        # Runtime calls without device activity (an NPU trace without its "Ascend
        # Hardware" rows): its syncs are real ones, not latent findings of a CPU run.
        "has_runtime": any(t.get("has_runtime") for t in traces),
        # What the latent list leaves out (the terminal's line under it); null without one.
        "latent_not_listed": _latent_not_listed(report, traces),
        # A CPU-only run's explicit synchronizes that never ran (the terminal's line too).
        "unrun_syncs": _unrun_syncs(traces),
        # The copies to the host libraries made in their own code, counted, not listed
        # (the terminal's line under the latent list; null without).
        "library_copies": _library_copies(traces),
        "loading": sel.loading,
        "listed_apart": _listed_apart(report),
        # The ranks of the job these traces are (0: not a job): its steps add up over them.
        "job_ranks": len((report.get("job") or {}).get("ranks") or []),
    }


class ConflictError(errors.PublicError):
    """A trace replaced since its analysis (409): answered from the file now, the answer
    would not be the analysis shown."""

    http_code = 409


class UnavailableError(errors.PublicError):
    """An answer that could not be made now and may be later (503): not kept."""

    http_code = 503


def refuse_traces_changed_since_analysis(states: list[Any], then: str) -> None:
    """409 when one of ``states``' files is not the one analysed (and the next poll has not
    seen it yet): read again now (an export drawing the findings onto the trace, a replay
    with another step time), it would not be the analysis shown. ``then``: what the user
    does after the next poll ("export again then")."""
    from tb_syncfinder.discovery import stat_trace

    for state in states:
        if state.size is None:  # a remote file: its size was not read with a stat
            continue
        try:
            now = stat_trace(state.ref.path)
        except OSError:
            # Gone (deleted, moved): said as a change is, not as a bad argument (400).
            raise ConflictError(
                f"{state.ref.path} was removed since it was analysed; it leaves the list at "
                "the next reload"
            ) from None
        if now != (state.size, state.mtime_ns):
            raise ConflictError(
                f"{state.ref.path} changed since it was analysed; it is analysed again at "
                f"the next reload: {then}"
            )


# The saving without the profiler replays each trace of the selection again: a selection
# of more traces than this (a job's ranks) is refused, the user picks a worker.
UNPROFILED_MAX_TRACES = 16
# What the answer carries of the summary (the rest is the selection's summary as it is).
UNPROFILED_SUMMARY_FIELDS = (
    "unprofiled_step_time_us",
    "unprofiled_predicted_saving_per_step_us",
    "unprofiled_saving_at_most_per_step_us",
    "predicted_saving_per_step_us",
    "saving_method",
)


def unprofiled_impl(
    loader: TraceLoader, run: Any, worker: str | None, span: str | None, step_ms: float
) -> dict[str, Any]:
    """What fixing the syncs saves without the profiler, given the step time the user
    measured without it (the CLI's ``report --unprofiled-step-ms``): each replayed trace
    of the selection analysed again with that step time, in the analysis processes; the
    others as they are. ``summary``: the report's unprofiled fields; ``sites``: each site's
    ``unprofiled_predicted_saving_per_step_us`` by key; ``text``: the terminal's
    "unprofiled" line; ``traces``: each trace's fit (scale, or the note why none)."""
    import msgspec

    from tb_syncfinder.engine import report_runs

    with loader.lock:
        states = [
            state
            for state in run.traces.values()
            if (worker is None or state.ref.worker == worker)
            and (span is None or state.ref.span == span)
        ]
    kept = loader.results(run, worker, span)
    by_path = {result.info.path: result for result in kept}
    again = [
        state
        for state in states
        if (result := by_path.get(state.ref.path)) is not None
        and not result.info.error
        and result.savings.method == "replay"
    ]
    if not again:
        bounded = _unprofiled_bound(kept, step_ms)
        if bounded is not None:
            return bounded
        raise errors.InvalidArgumentError(
            "no trace here was replayed (CPU-only, without device activity, or not analysed "
            "yet): a step time without the profiler has nothing to be fitted to"
        )
    if len(again) > UNPROFILED_MAX_TRACES:
        raise errors.InvalidArgumentError(
            f"the saving without the profiler replays each trace again: {len(again)} traces "
            f"here, at most {UNPROFILED_MAX_TRACES}; pick a worker (or a span)"
        )
    refuse_traces_changed_since_analysis(again, "ask again then")
    step_us = step_ms * 1000.0
    options = msgspec.structs.replace(loader.options, unprofiled_step_us=step_us)
    redone = dict(
        zip((state.ref.path for state in again), loader.analyze_again(again, options), strict=True)
    )
    results = [redone.get(result.info.path, result) for result in kept]
    report = query.with_unprofiled_step(report_runs(results).report.to_json(), step_us)
    failed = [
        f"{os.path.basename(path)}: {result.info.error}"
        for path, result in redone.items()
        if result.info.error
    ]
    if failed:
        # Without a trace the figures (and the bound) would be the others' only, under the
        # selection's profiled figures: no answer, and none kept (asked again, it is tried
        # again).
        raise UnavailableError(
            "not analysed again with this step time: " + "; ".join(failed),
        )
    return _unprofiled_answer(step_ms, report, "GPU")


def _unprofiled_answer(step_ms: float, report: dict[str, Any], device: str) -> dict[str, Any]:
    """The ``unprofiled`` route's answer from a report with the step time given."""
    from tb_syncfinder.outputs.text import unprofiled_fits, unprofiled_text

    summary = report["summary"]
    readable = [t for t in report["traces"] if not t.get("error")]
    return {
        "step_ms": step_ms,
        "summary": {name: summary.get(name) for name in UNPROFILED_SUMMARY_FIELDS},
        "text": unprofiled_text(summary, *unprofiled_fits(readable), device=device),
        "sites": {
            site["key"]: site.get("unprofiled_predicted_saving_per_step_us")
            for site in report["sites"]
        },
        "traces": [
            {
                "path": t.get("path"),
                "error": t.get("error"),
                "unprofiled_overhead_scale": t.get("unprofiled_overhead_scale"),
                "unprofiled_note": t.get("unprofiled_note"),
            }
            for t in report["traces"]
        ],
    }


def _unprofiled_bound(kept: list[Any], step_ms: float) -> dict[str, Any] | None:
    """The answer for a selection not replayed whose device's own work per step is read
    (torch_npu's tasks): the most fixing every sync saves in a step of ``step_ms``, that
    step less the work, as ``report --unprofiled-step-ms`` says it; no trace is analysed
    again. None where the selection gives no such bound."""
    from tb_syncfinder.engine import report_runs

    if all(result.info.error for result in kept):
        return None
    report = report_runs(kept).report.to_json()
    if not query.bounded_by_device_work(report["summary"]):
        return None
    device = "NPU" if query.all_on_npu(report) else "device"
    return _unprofiled_answer(step_ms, query.with_unprofiled_step(report, step_ms * 1000.0), device)


def _library_copies(traces: list[dict[str, Any]]) -> str | None:
    from tb_syncfinder.outputs.text import library_copies_text

    return library_copies_text([t for t in traces if not t.get("error")])


def _unrun_syncs(traces: list[dict[str, Any]]) -> str | None:
    from tb_syncfinder.outputs.text import unrun_syncs_text

    return unrun_syncs_text([t for t in traces if not t.get("error")])


def _latent_not_listed(report: dict[str, Any], traces: list[dict[str, Any]]) -> str | None:
    if not report.get("latent_sites"):
        return None
    from tb_syncfinder.outputs.text import latent_not_listed

    return latent_not_listed([t for t in traces if not t.get("error")])


def _listed_apart(report: dict[str, Any]) -> dict[str, Any]:
    """The syncs kept out of the findings and totals (the profiler's own synchronize,
    allocator syncs in warm-up regions, a communication library's worker waiting for its
    own copies), as totals: the dashboard says they exist and why
    they are not ranked; the JSON export holds them one by one."""
    profiler = report.get("profiler_overhead") or {}
    warmup = report.get("warmup_allocator") or {}
    worker = report.get("collective_worker") or {}
    return {
        "profiler_overhead": {
            "count": profiler.get("count", 0),
            "host_wait_us": profiler.get("host_wait_us", 0.0),
        },
        "collective_worker": {
            "count": worker.get("count", 0),
            "host_wait_us": worker.get("host_wait_us", 0.0),
        },
        "warmup_allocator": {
            key: warmup.get(key, default)
            for key, default in (
                ("count", 0),
                ("host_wait_us", 0.0),
                ("gpu_idle_us", 0.0),
                ("regions", []),
                ("advice", {}),
            )
        },
    }


def steps_impl(sel: Selection) -> dict[str, Any]:
    return {"steps": sel.report_json["steps"], "loading": sel.loading}


def sites_impl(
    sel: Selection,
    *,
    latent: bool,
    kind: str | None,
    file: str | None,
    op: str | None,
    step: int | None,
    sort: str | None,
    order: str | None,
    offset: int,
    limit: int,
) -> dict[str, Any]:
    sites = sel.report_json["latent_sites" if latent else "sites"]
    sites = query.filter_sites(sites, kind=kind, file=file, op=op, step=step)
    if step is not None:  # each site with its figures in that step, sorted by those
        sites = query.in_step(sites, sel.report_json["latent" if latent else "syncs"], step)
    try:
        ordered = query.sort_sites(sites, sort, order)
    except ValueError as exc:
        raise errors.InvalidArgumentError(str(exc)) from None
    return query.page(ordered, offset, limit, loading=sel.loading)


def syncs_impl(
    sel: Selection,
    *,
    latent: bool,
    site: str | None,
    kind: str | None,
    step: int | None,
    sort: str | None,
    order: str | None,
    offset: int,
    limit: int,
) -> dict[str, Any]:
    """A page of the syncs that pass the filters, in the report's order (as they ran, per
    trace) or sorted by one of ``query.SYNC_SORTS`` (a site's costliest first)."""
    syncs = sel.report_json["latent" if latent else "syncs"]
    syncs = query.filter_syncs(syncs, site=site, kind=kind, step=step)
    try:
        ordered = query.sort_syncs(syncs, sort, order)
    except ValueError as exc:
        raise errors.InvalidArgumentError(str(exc)) from None
    return query.page(ordered, offset, limit, loading=sel.loading)


def sync_impl(sel: Selection, sync_id: str) -> dict[str, Any]:
    sync = sel.syncs_by_id.get(sync_id)
    if sync is None:
        raise errors.NotFoundError(f"unknown sync id {sync_id!r} in run {sel.run!r}")
    return {
        "sync": sync,
        "site": sel.sites_by_key.get(sync.get("site_key") or ""),
        "context": sel.contexts.get(sync_id),
    }


def job_impl(sel: Selection) -> dict[str, Any]:
    """The run's job (issue 17): ranks, issues, rank x step lateness, per-rank waits, top
    sites by cost to the job; ``job`` is null for a run whose traces are no job's ranks."""
    return {"job": sel.report_json.get("job"), "loading": sel.loading}


def compare_impl(base: Selection, new: Selection) -> dict[str, Any]:
    from tb_syncfinder.compare import compare

    return compare(base.report_json, new.report_json)


def _safe_filename(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("._") or "report"


def _content_disposition(stem: str, extension: str) -> str:
    """An attachment's header: its name in ASCII (for every client) and, where a run or
    worker name holds other characters, ``filename*`` (RFC 6266 / 5987) with them kept:
    the ASCII name alone made ``ünïcode-ラン`` a ``n_code-.csv``."""
    header = f'attachment; filename="{_safe_filename(stem)}{extension}"'
    named = re.sub(r'[\x00-\x1f\x7f/\\:*?"<>|]+', "_", stem).strip(". _")
    if named and not named.isascii():
        header += f"; filename*=UTF-8''{quote(named + extension, safe='')}"
    return header


def export_impl(sel: Selection, fmt: str, stem_parts: list[str | None]) -> tuple[bytes, str, str]:
    """``(body, media type, Content-Disposition)`` of the selection in an output format."""
    from tb_syncfinder import outputs

    output = outputs.FORMATS.get(fmt)
    if output is None:
        raise errors.InvalidArgumentError(
            f"unknown format {fmt!r}; one of {', '.join(outputs.FORMATS)}"
        )
    report_set = outputs.ReportSet(sel.report_json, {sel.run: sel.report_json})
    try:
        body = output.render(report_set, outputs.RenderOptions())
    except ValueError as exc:
        raise errors.InvalidArgumentError(f"format={fmt}: {exc}") from None
    stem = "-".join(p for p in stem_parts if p)
    return body, output.media_type, _content_disposition(stem, output.extension)
