"""The one place sites and syncs are filtered, sorted and paged (``tb_syncfinder.query``)."""

from __future__ import annotations

import pytest
from kineto_builder import KinetoTraceBuilder, item_sync
from test_plugin_endpoints import client_for, get, make_plugin

from tb_syncfinder import query


def test_sorting_by_location_orders_by_file_then_line_both_ways():
    sites = [
        {"key": "a", "file": "seg.py", "line": 82},
        {"key": "b", "file": "seg.py", "line": 77},
        {"key": "c", "file": "cnn.py", "line": 95},
        {"key": "d", "file": "seg.py", "line": 76},
        {"key": "e", "file": None, "line": None},
    ]
    ascending = [s["key"] for s in query.sort_sites(sites, "file", "asc")]
    assert ascending == ["c", "d", "b", "a", "e"]  # no location: last either way
    descending = [s["key"] for s in query.sort_sites(sites, "file", "desc")]
    assert descending == ["a", "b", "d", "c", "e"]


def test_a_sites_occurrences_sort_by_cost_largest_first_and_ties_keep_the_order_they_ran():
    syncs = [
        {"id": "a", "ts_us": 10.0, "host_wait_us": 5.0, "predicted_saving_us": 1.0},
        {"id": "b", "ts_us": 20.0, "host_wait_us": 90.0, "predicted_saving_us": 1.0},
        {"id": "c", "ts_us": 30.0, "host_wait_us": 5.0, "predicted_saving_us": 7.0},
        {"id": "d", "ts_us": 40.0, "host_wait_us": 40.0},  # no saving: last either way
    ]
    ids = lambda items: [s["id"] for s in items]  # noqa: E731
    assert ids(query.sort_syncs(syncs)) == ["a", "b", "c", "d"]
    assert ids(query.sort_syncs(syncs, "host_wait_us")) == ["b", "d", "a", "c"]
    assert ids(query.sort_syncs(syncs, "host_wait_us", "asc")) == ["a", "c", "d", "b"]
    assert ids(query.sort_syncs(syncs, "predicted_saving_us")) == ["c", "a", "b", "d"]
    assert ids(query.sort_syncs(syncs, "predicted_saving_us", "asc")) == ["a", "b", "c", "d"]
    assert ids(query.sort_syncs(syncs, "ts_us", "desc")) == ["d", "c", "b", "a"]
    with pytest.raises(ValueError, match="unknown sort 'line'"):
        query.sort_syncs(syncs, "line")
    with pytest.raises(ValueError, match="order must be"):
        query.sort_syncs(syncs, "ts_us", "up")
    assert query.to_json()["sync_sorts"]["host_wait_us"] == "desc"


def test_a_sites_figures_in_one_step_count_only_that_steps_syncs():
    sites = [{"key": "k", "count": 3, "host_wait_us": 60.0}, {"key": "other"}]
    syncs = [
        {
            "site_key": "k",
            "step": 1,
            "host_wait_us": 10.0,
            "end_us": 100.0,
            "gpu_idle_after_us": 50.0,
            "trace": "t",
            "device_id": 0,
        },
        # Its bubble overlaps the first one's: counted once.
        {
            "site_key": "k",
            "step": 1,
            "host_wait_us": 20.0,
            "end_us": 120.0,
            "gpu_idle_after_us": 50.0,
            "trace": "t",
            "device_id": 0,
        },
        {
            "site_key": "k",
            "step": 2,
            "host_wait_us": 30.0,
            "end_us": 500.0,
            "gpu_idle_after_us": 5.0,
            "trace": "t",
            "device_id": 0,
        },
    ]
    first, other = query.in_step(sites, syncs, 1)
    assert first["in_step"] == {"step": 1, "count": 2, "host_wait_us": 30.0, "gpu_idle_us": 70.0}
    assert other["in_step"]["count"] == 0
    assert first["count"] == 3 and "in_step" not in sites[0]  # whole-run figures kept


def test_union_length_counts_a_shared_stretch_once():
    assert query.union_length([(0.0, 10.0), (5.0, 15.0), (20.0, 21.0)]) == pytest.approx(16.0)
    assert query.union_length([]) == 0.0


def test_the_sites_route_gives_each_site_its_figures_in_the_selected_step(tmp_path):
    b = KinetoTraceBuilder()
    for n, items in ((1, 2), (2, 1), (3, 0)):
        with b.step(n):
            for _ in range(items):
                item_sync(b)
            b.kernel(dur=50)
    b.write(tmp_path / "logs" / "run_gpu" / "w.pt.trace.json")
    (tmp_path / "src").mkdir()
    client = client_for(make_plugin(tmp_path / "logs", tmp_path))
    _, whole = get(client, "sites", run="run_gpu")
    (site,) = whole["items"]
    assert site["count"] == 3 and "in_step" not in site
    for step, count in ((1, 2), (2, 1)):
        _, in_step = get(client, "sites", run="run_gpu", step=step)
        (stepped,) = in_step["items"]
        _, syncs = get(client, "syncs", run="run_gpu", step=step, site=site["key"])
        assert stepped["in_step"]["count"] == count == syncs["total"]
        assert stepped["in_step"]["host_wait_us"] == pytest.approx(
            sum(s["host_wait_us"] for s in syncs["items"])
        )
        assert stepped["count"] == 3  # the site's own figures stay the whole run's
    _, none = get(client, "sites", run="run_gpu", step=3)
    assert none["items"] == []


def test_sites_of_one_step_sort_by_their_figures_in_that_step():
    sites = [
        {"key": "a", "count": 10, "in_step": {"step": 1, "count": 1, "host_wait_us": 5.0}},
        {"key": "b", "count": 2, "in_step": {"step": 1, "count": 2, "host_wait_us": 1.0}},
    ]
    assert [s["key"] for s in query.sort_sites(sites, "count")] == ["b", "a"]
    assert [s["key"] for s in query.sort_sites(sites, "host_wait_us")] == ["a", "b"]


def _varied_waits_run(tmp_path):
    """A GPU run of one ``.item()`` site over 6 steps whose waits differ (its kernel runs
    300, 900, 100, 700, 500, 1100 us) and so do the GPU's idle stretches after them (the
    host does other work for 250, 40, 600, 130, 20, 400 us before the next kernel), and
    the plugin's client on it."""
    b = KinetoTraceBuilder()
    kernels = (300.0, 900.0, 100.0, 700.0, 500.0, 1100.0)
    gaps = (250.0, 40.0, 600.0, 130.0, 20.0, 400.0)
    for n, (kernel_us, gap_us) in enumerate(zip(kernels, gaps, strict=True), start=1):
        with b.step(n):
            item_sync(b, kernel_us=kernel_us)
            b.advance(gap_us)
    b.write(tmp_path / "logs" / "run_gpu" / "w.pt.trace.json")
    (tmp_path / "src").mkdir()
    return client_for(make_plugin(tmp_path / "logs", tmp_path))


def test_the_syncs_route_sorts_a_sites_occurrences_before_paging(tmp_path):
    client = _varied_waits_run(tmp_path)
    _, ran = get(client, "syncs", run="run_gpu")
    assert ran["total"] == 6
    site = ran["items"][0]["site_key"]
    steps = [s["step"] for s in ran["items"]]
    assert steps == [1, 2, 3, 4, 5, 6]  # no sort: the report's order, as they ran
    by_wait = sorted(ran["items"], key=lambda s: -s["host_wait_us"])
    # Sorted over the whole list, then paged: each page is the next of the sorted list.
    for sort, order in (
        ("host_wait_us", [6, 2, 4, 5, 1, 3]),
        ("gpu_idle_after_us", [3, 6, 1, 4, 2, 5]),
        ("predicted_saving_us", [6, 1, 4, 3, 2, 5]),
    ):
        want = sorted(ran["items"], key=lambda s: -s[sort])
        assert [s["step"] for s in want] == order, sort  # the fixture's costs all differ
        pages = []
        for offset in (0, 2, 4):
            status, page = get(
                client, "syncs", run="run_gpu", site=site, sort=sort, offset=offset, limit=2
            )
            assert status == 200, page
            assert (page["total"], page["offset"], page["limit"]) == (6, offset, 2)
            pages += page["items"]
        assert [s["id"] for s in pages] == [s["id"] for s in want], sort
    # The default order is the field's first click: largest wait first; asc the other way.
    _, desc = get(client, "syncs", run="run_gpu", sort="host_wait_us", limit=3)
    assert [s["step"] for s in desc["items"]] == [6, 2, 4]
    _, named = get(client, "syncs", run="run_gpu", sort="host_wait_us", order="desc", limit=3)
    assert named["items"] == desc["items"]
    _, asc = get(client, "syncs", run="run_gpu", sort="host_wait_us", order="asc", limit=3)
    assert [s["step"] for s in asc["items"]] == [3, 1, 5]
    _, by_ts = get(client, "syncs", run="run_gpu", sort="ts_us")
    assert [s["step"] for s in by_ts["items"]] == steps
    _, late_first = get(client, "syncs", run="run_gpu", sort="ts_us", order="desc")
    assert [s["step"] for s in late_first["items"]] == steps[::-1]
    # The answer's fields are what they were: only the order changes.
    assert set(desc) == set(ran) == {"total", "offset", "limit", "items", "loading"}
    assert sorted(desc["items"], key=lambda s: s["id"]) == sorted(
        by_wait[:3], key=lambda s: s["id"]
    )


def test_the_syncs_route_refuses_an_unknown_sort_or_order(tmp_path):
    client = _varied_waits_run(tmp_path)
    for params, says in (
        ({"sort": "line"}, "unknown sort 'line'; one of ts_us, predicted_saving_us"),
        ({"sort": "host_wait_us", "order": "up"}, "order must be asc or desc"),
        ({"order": "sideways"}, "order must be asc or desc"),
        ({"sort": "host_wait_us", "order": ["asc", "desc"]}, "given 2 times"),
    ):
        # Twice: the second request goes the way of a query seen before.
        for _ in range(2):
            status, body = get(client, "syncs", run="run_gpu", **params)
            assert status == 400, (params, body)
            assert says in body["error"], (params, body)
