"""The plugin's kept answers (issue 14/18: p95 under 32 clients): a repeated request is
served from the encoded answer the first one made, and that must be exactly what an
uncached plugin sends, gzipped or not; a re-analysed trace must change it; the caches are
bounded.

The run holds two of the real GPU traces bundled with the package, as two workers.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import urllib.parse
from pathlib import Path
from typing import Any

import pytest
from tensorboard.backend import http_util
from tensorboard.backend.application import TensorBoardWSGI
from tensorboard.plugins import base_plugin
from werkzeug import wrappers
from werkzeug.test import Client, EnvironBuilder, run_wsgi_app

from tb_syncfinder.plugin import SyncAdvisorPlugin, api
from tb_syncfinder.plugin import plugin as plugin_module
from tb_syncfinder.plugin.selection import Answer, AnswerCache, gzip_json
from tb_syncfinder.plugin.settings import PluginSettings

# The demo's bundled traces (not through the demo's runner, which needs torch).
BUNDLED_TRACES_DIR = Path(__file__).resolve().parents[1] / "tb_syncfinder" / "demo" / "traces"


PLUGIN = "/data/plugin/sync_advisor/"
BASELINE = BUNDLED_TRACES_DIR / "cnn_baseline.pt.trace.json.gz"
OTHER = BUNDLED_TRACES_DIR / "seg_baseline.pt.trace.json.gz"
OPTIMIZED = BUNDLED_TRACES_DIR / "cnn_optimized.pt.trace.json.gz"
GZIP = {"Accept-Encoding": "gzip, deflate, br"}


def make_plugin(logdir: Path, cache: Path) -> SyncAdvisorPlugin:
    settings = PluginSettings(
        logdirs=[(None, str(logdir))],
        cache_dir=str(cache),
        reload_interval_s=3600,
        use_processes=False,
    )
    context = base_plugin.TBContext(logdir=str(logdir), flags=argparse.Namespace())
    plugin = SyncAdvisorPlugin(context, settings, start=False)
    plugin.loader.poll()
    assert plugin.loader.wait_idle(120)
    return plugin


@pytest.fixture(scope="module")
def logdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run = tmp_path_factory.mktemp("answers") / "logs" / "gpu"
    run.mkdir(parents=True)
    shutil.copy(BASELINE, run / "w0.pt.trace.json.gz")
    shutil.copy(OTHER, run / "w1.pt.trace.json.gz")
    return run.parent


@pytest.fixture(scope="module")
def plugin(logdir: Path) -> SyncAdvisorPlugin:
    return make_plugin(logdir, logdir.parent / "cache")


def _uncached(plugin: SyncAdvisorPlugin, route: str, query: dict[str, Any], headers: dict):
    """What the route answered before answers were kept: the api function's dict on a
    freshly built selection, gzipped and sent by ``http_util.Respond`` (which unzips it for
    a client that does not take gzip)."""
    environ = EnvironBuilder(
        path=PLUGIN + route, query_string=urllib.parse.urlencode(query), headers=headers
    ).get_environ()
    request = wrappers.Request(environ)
    worker, span = query.get("worker"), query.get("span")
    run = plugin.selections.lookup(query["run"], worker, span)
    sel = plugin.selections._build(run, worker, span)  # not memoised: no kept answers
    key, make = plugin_module.ANSWER_ROUTES["/" + route](request)
    body = gzip_json(make(sel))
    response = http_util.Respond(request, body, "application/json", content_encoding="gzip")
    body_iter, status, sent_headers = run_wsgi_app(response, environ)
    return status, list(sent_headers.items()), b"".join(body_iter)


def _queries(client: Client) -> list[tuple[str, dict[str, Any]]]:
    def items(route: str, **query: Any) -> list[dict[str, Any]]:
        return client.get(PLUGIN + route, query_string={**query, "limit": 500}).get_json()["items"]

    queries: list[tuple[str, dict[str, Any]]] = []
    for worker in (None, "w0", "w1"):
        base = {"run": "gpu", **({"worker": worker} if worker else {})}
        sites, syncs = items("sites", **base), items("syncs", **base)
        assert sites and syncs, "the bundled traces hold synchronisations"
        queries += [(route, base) for route in ("summary", "steps", "job")]
        for sort in (None, "host_wait_us", "gpu_idle_us", "count", "line", "ops", "kind"):
            for order in (None, "asc", "desc"):
                extra = {"sort": sort} if sort else {}
                queries.append(("sites", {**base, **extra, **({"order": order} if order else {})}))
        for extra in ({"latent": 1}, {"offset": 2, "limit": 3}, {"kind": "scalar_readback"}):
            queries += [("sites", {**base, **extra}), ("syncs", {**base, **extra})]
        queries += [("sites", {**base, "step": 3}), ("syncs", {**base, "step": 3})]
        queries += [("syncs", {**base, "site": s["key"]}) for s in sites[:5]]
        ids = [s["id"] for s in syncs[:25] + items("syncs", **base, latent=1)[:5]]
        queries += [("sync", {**base, "id": i}) for i in ids]
    return queries


def test_kept_answers_are_the_uncached_answers_byte_for_byte(plugin: SyncAdvisorPlugin) -> None:
    client = Client(TensorBoardWSGI([plugin]))
    queries = _queries(client)
    ok = 0
    for route, query in queries:
        for headers in (GZIP, {}):
            expected = _uncached(plugin, route, query, headers)
            # First sight (arguments parsed, answer made) and again (both kept), each in
            # either order of gzip and plain so the plain form is made from a kept answer.
            for attempt in range(2):
                response = client.get(PLUGIN + route, query_string=query, headers=headers)
                got = response.status, list(response.headers.items()), response.get_data()
                assert got == expected, (route, query, headers, attempt)
            ok += expected[0] == "200 OK"
    assert ok > 150
    assert len(plugin.selections.answers) > 0


def test_errors_are_answered_as_before_by_the_full_path(plugin: SyncAdvisorPlugin) -> None:
    client = Client(TensorBoardWSGI([plugin]))
    cases = [
        ("sites", "run=gpu&sort=bogus", 400),
        ("sites", "run=nope&kind=bogus", 404),  # the run is looked up first, as before
        ("sites", "run=gpu&kind=bogus", 400),
        ("sites", "run=gpu&worker=w9", 404),
        ("sync", "run=gpu", 400),
        ("sync", "run=gpu&id=nope", 404),
        ("sites", "run=gpu&run=gpu", 400),
        ("summary", "", 400),
    ]
    for route, query, status in cases:
        for _ in range(2):
            response = client.get(PLUGIN + route + "?" + query)
            assert response.status_code == status, (route, query)
            assert response.headers["X-Content-Type-Options"] == "nosniff"
            assert response.get_json()["error"]
    head = client.head(PLUGIN + "sites?run=gpu")
    assert head.status_code == 200 and head.get_data() == b""
    plain = client.get(PLUGIN + "sites?run=gpu").get_data()
    assert head.headers["Content-Length"] == str(len(plain))
    assert client.post(PLUGIN + "sites?run=gpu").status_code == 405


def test_a_reanalysed_trace_changes_the_answers_and_drops_the_old_ones(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    (logs / "gpu").mkdir(parents=True)
    trace = logs / "gpu" / "w0.pt.trace.json.gz"
    shutil.copy(BASELINE, trace)
    plugin = make_plugin(logs, tmp_path / "cache")
    client = Client(TensorBoardWSGI([plugin]))
    query = {"run": "gpu", "sort": "host_wait_us"}
    before = client.get(PLUGIN + "sites", query_string=query).get_data()
    assert client.get(PLUGIN + "sites", query_string=query).get_data() == before
    old_tokens = {token for token, _ in plugin.selections.answers._entries}

    shutil.copy(OPTIMIZED, trace)  # the same file name, other content: analysed again
    stat = trace.stat()
    os.utime(trace, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    plugin.loader.poll()
    assert plugin.loader.wait_idle(120)
    after = client.get(PLUGIN + "sites", query_string=query)
    assert after.get_data() != before
    assert (after.status, list(after.headers.items()), after.get_data()) == _uncached(
        plugin, "sites", query, {}
    )
    assert not old_tokens & {token for token, _ in plugin.selections.answers._entries}


def test_answer_cache_is_bounded_in_entries_and_bytes() -> None:
    cache = AnswerCache(max_entries=3, max_bytes=1000)
    answers = [Answer(gzip_json({"n": n, "pad": "x" * 100})) for n in range(5)]
    for n, answer in enumerate(answers):
        assert cache.put(("sel",), (n,), answer) is answer
    assert len(cache) == 3 and cache.get(("sel",), (0,)) is None
    assert cache.get(("sel",), (4,)) is answers[4]
    assert cache.bytes == sum(len(a.gzip) for a in answers[2:])
    # Another thread's answer for the same key, kept first, is the one returned.
    assert cache.put(("sel",), (4,), Answer(answers[4].gzip)) is answers[4]

    # The plain form of a kept answer counts once made, and pushes out the oldest.
    plain = answers[4].plain
    assert plain == json.dumps({"n": 4, "pad": "x" * 100}, separators=(",", ":")).encode()
    cache.resized(("sel",), (4,))
    assert cache.bytes == sum(a.size for a, _ in cache._entries.values()) <= 1000

    # An answer over the whole budget is sent but not kept, and pushes out nothing.
    kept = list(cache._entries)
    big = Answer(gzip_json({"pad": os.urandom(2000).hex()}))
    assert cache.put(("other",), ("big",), big) is big
    assert cache.get(("other",), ("big",)) is None and list(cache._entries) == kept

    cache.put(("other",), ("small",), Answer(gzip_json({"n": 1})))
    assert len(cache) == 3
    cache.drop(("sel",))
    assert [key for key in cache._entries] == [(("other",), ("small",))]
    assert cache.bytes == cache._entries[(("other",), ("small",))][1]
    cache.drop(("other",))
    assert len(cache) == 0 and cache.bytes == 0 and cache._keys_of == {}


def test_parsed_queries_are_bounded(
    plugin: SyncAdvisorPlugin, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(plugin_module, "QUERIES_MAX", 4)
    client = Client(TensorBoardWSGI([plugin]))
    for offset in range(10):
        assert client.get(PLUGIN + f"sites?run=gpu&offset={offset}").status_code == 200
    assert len(plugin._queries) <= 4
    long_query = "run=gpu&file=" + "a" * plugin_module.QUERY_MAX_CHARS
    assert client.get(PLUGIN + "sites?" + long_query).status_code in (200, 400)
    assert all(len(qs) <= plugin_module.QUERY_MAX_CHARS for _, qs in plugin._queries)


def test_the_gzip_test_is_tensorboards() -> None:
    pattern = getattr(http_util, "_ALLOWS_GZIP_PATTERN", None)
    if pattern is None:
        pytest.skip("this TensorBoard names its Accept-Encoding test differently")
    assert plugin_module._ALLOWS_GZIP.pattern == pattern.pattern
    assert api.MAX_LIMIT >= 1
