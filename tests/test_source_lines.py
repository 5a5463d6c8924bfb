"""SourceResolver: finding files and recovering exact call lines with ast."""

from __future__ import annotations

import ast
import json
import textwrap

import pytest

from tb_syncfinder import source
from tb_syncfinder.models import CallQuery, Frame, Observed
from tb_syncfinder.source import SourceResolver

WORKLOAD = textwrap.dedent(
    """\
    import torch


    def train_step(model, x, y):
        out = model(x)
        idx = torch.nonzero(y > 0)
        loss = out.sum()
        print("x")
        val = loss.item()
        second = out.mean().item()
        kept = out[y > 0]
        return val, second, idx, kept


    @torch.no_grad()
    def evaluate(x):
        return x.cpu()


    def loop(xs):
        for x in xs:
            x.item()
    """
)


def _stack(line: int, func: str, called: str | None = None) -> list[Frame]:
    frames = [Frame("work.py", line, func, True), Frame("run.py", 1, "<module>", True)]
    if called:
        frames.insert(0, Frame("<built-in>", None, called, False))
    return frames


def _resolver(tmp_path) -> SourceResolver:
    (tmp_path / "work.py").write_text(WORKLOAD)
    return SourceResolver([str(tmp_path)])


def test_def_line_and_builtin_name_give_the_exact_call_line(tmp_path):
    source = _resolver(tmp_path).resolve(_stack(4, "train_step", "nonzero"), ["nonzero"])
    assert (source.line, source.def_line, source.line_exact) == (6, 4, True)
    assert source.resolved_path == str(tmp_path / "work.py")


def test_nth_sync_maps_to_nth_matching_call_when_counts_agree(tmp_path):
    resolver = _resolver(tmp_path)
    lines = [
        resolver.resolve(_stack(4, "train_step", "item"), ["item"], occurrence=(n, 2)).line
        for n in range(2)
    ]
    assert lines == [9, 10]


def test_counts_that_disagree_fall_back_to_the_def_line_marked_inexact(tmp_path):
    source = _resolver(tmp_path).resolve(
        _stack(4, "train_step", "item"), ["item"], occurrence=(0, 3)
    )
    assert (source.line, source.line_exact) == (4, False)


def test_boolean_mask_maps_to_the_subscript(tmp_path):
    source = _resolver(tmp_path).resolve(_stack(4, "train_step"), [["__getitem__"]])
    assert (source.line, source.line_exact) == (11, True)


def test_decorated_function_and_loop_resolve(tmp_path):
    resolver = _resolver(tmp_path)
    assert resolver.resolve(_stack(15, "evaluate", "cpu"), ["cpu"]).line == 17
    loop = resolver.resolve(_stack(20, "loop", "item"), ["item"], occurrence=(3, 5))
    assert (loop.line, loop.line_exact) == (22, True)  # one call site, many syncs


def test_legacy_call_lines_are_exact(tmp_path):
    source = _resolver(tmp_path).resolve(_stack(9, "train_step"), ["item"], call_lines=True)
    assert (source.line, source.def_line, source.line_exact) == (9, 4, True)


def test_unreadable_file_keeps_the_recorded_line_and_claims_a_def_line_only_if_entered(tmp_path):
    """Unread, a recorded line is where the function starts only if the trace shows the
    frame entered while profiling ran; a frame running then recorded where it was."""
    resolver = SourceResolver([str(tmp_path)])
    source = resolver.resolve(_stack(4, "train_step", "item"), ["item"])
    assert (source.line, source.def_line, source.line_exact) == (4, None, False)
    assert source.resolved_path is None
    frame = _stack(4, "train_step", "item")[1]
    entered = resolver.resolve_call(CallQuery(frame, (("item",),), entered=True))
    assert (entered.line, entered.def_line, entered.line_exact) == (4, 4, False)


def test_path_map_and_suffix_match_find_moved_files(tmp_path):
    (tmp_path / "proj" / "pkg").mkdir(parents=True)
    (tmp_path / "proj" / "pkg" / "work.py").write_text(WORKLOAD)
    mapped = SourceResolver([str(tmp_path)], [("/remote/job", str(tmp_path / "proj"))])
    assert mapped.find_file("/remote/job/pkg/work.py") == tmp_path / "proj" / "pkg" / "work.py"
    suffix = SourceResolver([str(tmp_path)])
    assert suffix.find_file("/cluster/home/u/pkg/work.py") == tmp_path / "proj" / "pkg" / "work.py"
    assert suffix.find_file("/elsewhere/other.py") is None


def test_no_user_frame_gives_no_source(tmp_path):
    stack = [Frame("torch/nn/functional.py", 10, "f", False)]
    assert _resolver(tmp_path).resolve(stack, ["item"]) is None


RUNNING = textwrap.dedent(
    """\
    import torch

    scale = torch.ones(1).item()
    for x in xs:
        idx = torch.nonzero(x)
        loss = x.sum().item()
        peak = x.max().item()
        prof.step()
    print(x.min().item())


    def main(xs, prof):
        first = xs[0].item()
        for x in xs:
            if x.numel():
                a = x.sum().item()
            b = x.max().item()
            prof.step()
        return first
    """
)


def _running_resolver(tmp_path) -> SourceResolver:
    (tmp_path / "run.py").write_text(RUNNING)
    return SourceResolver([str(tmp_path)])


def _running(line: int, func: str, called: str) -> list[Frame]:
    return [Frame("<built-in>", None, called, False), Frame("run.py", line, func, True)]


def test_running_module_frame_finds_the_only_reachable_call_in_the_loop(tmp_path):
    # Recorded at prof.step() (line 8); nonzero is in the loop body above it.
    source = _running_resolver(tmp_path).resolve(_running(8, "<module>", "nonzero"), ["nonzero"])
    assert (source.line, source.def_line, source.line_exact) == (5, None, True)


def test_running_loop_with_a_matching_call_after_the_loop_stays_ambiguous(tmp_path):
    # After line 8 the loop runs 6, 7, 6, 7...; line 3 ran before profiling started, but
    # line 9 (after the loop) may run too. Three item() calls are 6, 7 then either 6 (one
    # more iteration) or 9 (the loop ended): the third stays ambiguous, with both lines.
    resolver = _running_resolver(tmp_path)
    stack = _running(8, "<module>", "item")
    third = resolver.resolve(stack, ["item"], occurrence=(2, 3))
    assert (third.line, third.line_exact, third.candidates) == (8, False, [6, 9])
    assert [resolver.resolve(stack, ["item"], occurrence=(n, 3)).line for n in range(2)] == [6, 7]
    # Four calls cannot end after the loop (only one call is left there): all exact.
    assert [resolver.resolve(stack, ["item"], occurrence=(n, 4)).line for n in range(4)] == [
        6,
        7,
        6,
        7,
    ]


def test_running_loop_cycle_starts_after_the_recorded_line(tmp_path):
    loop = textwrap.dedent(
        """\
        scale = w.item()
        for x in xs:
            loss = x.sum().item()
            prof.step()
            peak = x.max().item()
        """
    )
    (tmp_path / "loop.py").write_text(loop)
    resolver = SourceResolver([str(tmp_path)])
    stack = [Frame("<built-in>", None, "item", False), Frame("loop.py", 4, "<module>", True)]
    lines = [resolver.resolve(stack, ["item"], occurrence=(n, 5)) for n in range(5)]
    assert [s.line for s in lines] == [5, 3, 5, 3, 5]
    assert all(s.line_exact for s in lines)
    # Without knowing which sync of the invocation it is, two lines stay ambiguous.
    assert resolver.resolve(stack, ["item"]).line_exact is False


def test_running_loop_with_a_conditional_call_is_not_guessed(tmp_path):
    resolver = _running_resolver(tmp_path)
    source = resolver.resolve(_running(18, "main", "item"), ["item"], occurrence=(0, 4))
    assert (source.line, source.def_line, source.line_exact) == (18, 12, False)


def test_running_frame_ignores_calls_that_ran_before_the_recorded_line(tmp_path):
    # Recorded at prof.step() (line 18) of main: x.max() on line 17 is the only max call.
    resolver = _running_resolver(tmp_path)
    source = resolver.resolve(_running(18, "main", "max"), ["max"])
    assert (source.line, source.def_line, source.line_exact) == (17, 12, True)
    before = textwrap.dedent(
        """\
        def main(x, prof):
            a = x.item()
            prof.step()
            return x.nonzero()
        """
    )
    (tmp_path / "straight.py").write_text(before)
    stack = [Frame("<built-in>", None, "item", False), Frame("straight.py", 3, "main", True)]
    missing = SourceResolver([str(tmp_path)]).resolve(stack, ["item"])
    assert (missing.line, missing.line_exact) == (3, False)  # nothing left to call item()
    stack[0] = Frame("<built-in>", None, "nonzero", False)
    assert SourceResolver([str(tmp_path)]).resolve(stack, ["nonzero"]).line == 4


def test_running_frame_at_the_loop_header_cycles_from_the_top_of_the_body(tmp_path):
    # A DataLoader's __next__ started the profiler: the frame is at the `for` line.
    loop = textwrap.dedent(
        """\
        for x in loader:
            a = x.sum().item()
            b = x.max().item()
        """
    )
    (tmp_path / "header.py").write_text(loop)
    stack = [Frame("<built-in>", None, "item", False), Frame("header.py", 1, "<module>", True)]
    resolver = SourceResolver([str(tmp_path)])
    assert [resolver.resolve(stack, ["item"], occurrence=(n, 3)).line for n in range(3)] == [
        2,
        3,
        2,
    ]


def test_running_frame_with_continue_in_the_loop_is_certain_only_until_the_branch(tmp_path):
    loop = textwrap.dedent(
        """\
        for x in loader:
            a = x.sum().item()
            if a > 3:
                continue
            b = x.max().item()
            prof.step()
        """
    )
    (tmp_path / "skip.py").write_text(loop)
    stack = [Frame("<built-in>", None, "item", False), Frame("skip.py", 6, "<module>", True)]
    resolver = SourceResolver([str(tmp_path)])
    # After prof.step() the next item() is line 2 whatever the branch does; the one after
    # it is line 5, or line 2 again when the `continue` was taken.
    first = resolver.resolve(stack, ["item"], occurrence=(0, 2))
    assert (first.line, first.line_exact) == (2, True)
    second = resolver.resolve(stack, ["item"], occurrence=(1, 2))
    assert (second.line, second.line_exact, second.candidates) == (6, False, [2, 5])


@pytest.mark.parametrize("entry", ["no-equals-sign", "=/local", "/remote=", ("", "/local")])
def test_path_map_entries_need_both_prefixes_in_the_engine_and_the_cli(entry):
    from tb_syncfinder.cli import main
    from tb_syncfinder.engine import Options

    with pytest.raises(ValueError, match="expected FROM=TO"):
        Options(path_map=[entry]).resolver()
    if isinstance(entry, str):
        assert main(["report", "x", "--path-map", entry]) == 2


STEP_WITH_CHAINS = textwrap.dedent(
    """\
    class Trainer:

        def train_step(self, x, device):
            x = x.to(device)
            out = self.model(x)
            self.acc = float(out.mean())
            top = out[:4].max(1).values.tolist()
            return top
    """
)


def test_chained_and_implicit_calls_of_a_cuda_step_each_get_their_line(tmp_path):
    # float(t) runs aten::item with no frame of its own: it used to be matched by the
    # operator's likely callees ("item", then "tolist"), i.e. to the tolist() line.
    from kineto_builder import KinetoTraceBuilder

    from tb_syncfinder.engine import Options, analyze_trace

    (tmp_path / "trainer.py").write_text(STEP_WITH_CHAINS)
    b = KinetoTraceBuilder()
    with b.step(1), b.frame(("trainer.py", 3, "train_step")):
        with b.op("aten::to", called="to"), b.op("aten::_to_copy"), b.op("aten::copy_"):
            b.runtime("cudaMemcpyAsync", dur=5, memcpy=("HtoD", "Pageable"), bytes=512)
        b.kernel(dur=300)
        with b.op("aten::item"), b.op("aten::_local_scalar_dense"):
            b.runtime("cudaMemcpyAsync", dur=5, memcpy=("DtoH", "Pageable"), bytes=4)
            b.runtime("cudaStreamSynchronize")
        with b.op("aten::to", called="tolist"), b.op("aten::_to_copy"), b.op("aten::copy_"):
            b.runtime("cudaMemcpyAsync", dur=5, memcpy=("DtoH", "Pageable"), bytes=16)
            b.runtime("cudaStreamSynchronize")
    result = analyze_trace(
        str(b.write(tmp_path / "w.pt.trace.json")), Options(source_roots=(str(tmp_path),))
    )
    assert [(s.source.line, s.source.line_exact) for s in result.syncs] == [
        (4, True),
        (6, True),
        (7, True),
    ]


def test_a_bare_runtime_call_without_a_child_frame_is_looked_for_as_synchronize(tmp_path):
    # Traces that record no built-in calls show torch.cuda.synchronize()'s runtime call
    # right under the user's frame: the calls that usually make one are the candidates.
    from kineto_builder import KinetoTraceBuilder

    from tb_syncfinder.engine import Options, analyze_trace

    (tmp_path / "sync.py").write_text(
        "import torch\n\n\ndef step(x):\n    y = x * 2\n    torch.cuda.synchronize()\n"
        "    return y\n"
    )
    b = KinetoTraceBuilder()
    with b.step(1), b.frame(("sync.py", 4, "step")):
        b.kernel(dur=100)
        b.runtime("cudaDeviceSynchronize")
    (sync,) = analyze_trace(
        str(b.write(tmp_path / "w.pt.trace.json")), Options(source_roots=(str(tmp_path),))
    ).syncs
    assert (sync.source.line, sync.source.line_exact) == (6, True)


def test_implicit_index_reads_are_candidates_not_a_confident_float_line(tmp_path):
    # names[t] reads a 0-dim tensor back through __index__ (aten::item with no frame, like
    # float(t)): both are candidates for such an item, and a third, unexplained one makes
    # none of them certain.
    from kineto_builder import KinetoTraceBuilder

    from tb_syncfinder.engine import Options, analyze_trace

    (tmp_path / "labels.py").write_text(
        "def step(names, t, acc):\n    name = names[t]\n    value = float(acc)\n"
        "    return name, value\n"
    )

    def trace(items: int, frame: tuple = ("labels.py", 1, "step")) -> list:
        b = KinetoTraceBuilder()
        with b.step(1), b.frame(frame):
            with b.frame("<built-in method size of Tensor object at 0x1>"):
                pass  # the trace records built-in calls: an item without one is implicit
            for _ in range(items):
                b.kernel(dur=50)
                with b.op("aten::item"), b.op("aten::_local_scalar_dense"):
                    b.runtime("cudaMemcpyAsync", dur=5, memcpy=("DtoH", "Pageable"), bytes=4)
                    b.runtime("cudaStreamSynchronize")
        path = b.write(tmp_path / f"w{items}.pt.trace.json")
        return analyze_trace(str(path), Options(source_roots=(str(tmp_path),))).syncs

    assert [(s.source.line, s.source.line_exact) for s in trace(2)] == [(2, True), (3, True)]
    (one,) = trace(1)
    assert (one.source.line_exact, one.source.candidates) == (False, [2, 3])
    assert all(not s.source.line_exact and s.source.candidates == [2, 3] for s in trace(3))
    # One float() but two frameless items: the one line is not proof for either.
    (tmp_path / "single.py").write_text("def g(acc):\n    return float(acc)\n")
    syncs = trace(2, ("single.py", 1, "g"))
    assert [(s.source.line_exact, s.source.candidates) for s in syncs] == [(False, [2])] * 2
    assert [(s.source.line, s.source.line_exact) for s in trace(1, ("single.py", 1, "g"))] == [
        (2, True)
    ]


def test_a_slice_with_two_tensor_bounds_reads_twice_at_its_line(tmp_path):
    """x-transformers' ``self.data[start : start + n]`` reads both bounds back through
    ``__index__``: two frameless items that one point could not place, so the line was
    marked inexact (and its host check never ran)."""
    from kineto_builder import KinetoTraceBuilder

    from tb_syncfinder.engine import Options, analyze_trace

    (tmp_path / "sampler.py").write_text(
        "def sample(self, start):\n    return self.data[start : start + 65].long()\n"
    )
    b = KinetoTraceBuilder()
    with b.step(1), b.frame(("sampler.py", 1, "sample")):
        for _ in range(2):
            with b.op("aten::item"), b.op("aten::_local_scalar_dense"):
                pass
        with b.frame("<built-in method long of Tensor object at 0x1>"):
            pass  # the trace records built-in calls: an item without one is implicit
    path = b.write(tmp_path / "w.pt.trace.json")
    syncs = analyze_trace(str(path), Options(source_roots=(str(tmp_path),))).latent
    assert [(s.source.line, s.source.line_exact) for s in syncs] == [(2, True), (2, True)]


def test_the_whole_recorded_path_under_a_root_is_found_without_walking_the_roots(
    tmp_path, monkeypatch
):
    (tmp_path / "cluster" / "job" / "pkg").mkdir(parents=True)
    (tmp_path / "cluster" / "job" / "pkg" / "work.py").write_text("def f():\n    pass\n")

    def no_walk(*_args, **_kwargs):
        raise AssertionError("the roots were walked")

    monkeypatch.setattr(source.os, "walk", no_walk)
    resolver = SourceResolver([str(tmp_path)])
    found = resolver.find_file("/cluster/job/pkg/work.py")
    assert found == tmp_path / "cluster" / "job" / "pkg" / "work.py"


def test_the_file_matching_more_of_the_recorded_path_wins_over_a_shorter_tail(tmp_path):
    # root/models/net.py matches the tail models/net.py; the checkout below matches
    # myproj/models/net.py: the longer match is the recorded file.
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "net.py").write_text("x = 1\n")
    checkout = tmp_path / "checkouts" / "myproj" / "models"
    checkout.mkdir(parents=True)
    (checkout / "net.py").write_text("x = 2\n")
    resolver = SourceResolver([str(tmp_path)])
    assert resolver.find_file("/mnt/run42/myproj/models/net.py") == checkout / "net.py"
    # With no longer match anywhere, the tail under the root is the file.
    assert resolver.find_file("/mnt/run42/other/models/net.py") == tmp_path / "models" / "net.py"


def test_a_bare_file_name_match_under_the_root_still_goes_through_the_walk(tmp_path):
    # root/work.py shares only the file name with the recorded path; the walk finds the
    # file whose folder matches too.
    (tmp_path / "work.py").write_text("x = 1\n")
    (tmp_path / "fork" / "pkg").mkdir(parents=True)
    (tmp_path / "fork" / "pkg" / "work.py").write_text("x = 2\n")
    resolver = SourceResolver([str(tmp_path)])
    assert resolver.find_file("/cluster/job/pkg/work.py") == tmp_path / "fork" / "pkg" / "work.py"


def test_the_source_search_stops_in_a_huge_folder_and_says_how_to_name_the_code(
    tmp_path, monkeypatch, caplog
):
    monkeypatch.setattr(source, "_MAX_WALKED_ENTRIES", 500)
    home = tmp_path / "home"
    for n in range(30):
        folder = home / "data" / f"shard{n:02d}"
        folder.mkdir(parents=True)
        for m in range(40):
            (folder / f"img{m}.jpg").touch()
    resolver = SourceResolver([str(home)])
    with caplog.at_level("WARNING"):
        assert resolver.find_file("/cluster/elsewhere/train.py") is None
    assert resolver.search_cut == [str(home)]
    assert "--source-root" in caplog.text and str(home) in caplog.text
    # Named as a root, the code folder is found.
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "train.py").write_text("x = 1\n")
    named = SourceResolver([str(tmp_path / "code")])
    assert named.find_file("/cluster/elsewhere/train.py") == tmp_path / "code" / "train.py"
    assert named.search_cut == []


LIBRARY = textwrap.dedent(
    '''\
    import torch


    class Trainer:
        @torch.no_grad()
        def evaluate(self, x):
            banner = """
    a string line at column 0
    """
            return x.cpu(), banner

        def fit(self, x):
            total = x.sum()
            first = total.item()
            return first, x.max().item()


    def broken(:
        pass
    '''
)


def _library_query(line: int, func: str, called: str) -> CallQuery:
    return CallQuery(Frame("lib/trainer.py", line, func, False), ((called,),))


def test_a_library_frame_resolves_from_its_function_alone(tmp_path):
    # The file as a whole does not parse (a newer Python's syntax, a broken vendored
    # file): a fresh call's line is still found from its own function's block.
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "trainer.py").write_text(LIBRARY)
    resolver = SourceResolver([str(tmp_path)])
    fit = resolver.resolve_call(_library_query(12, "fit", "item"))
    assert (fit.line, fit.def_line, fit.line_exact, fit.candidates) == (12, 12, False, [14, 15])
    observed = Observed(("N", "N"), 1, "fit")
    second = resolver.resolve_call(
        CallQuery(Frame("lib/trainer.py", 12, "fit", False), (("item",),), (observed,))
    )
    assert (second.line, second.line_exact) == (15, True)
    # A block cut inside its string does not parse on its own, and the file does not
    # either: the def line, marked inexact, rather than a guess.
    evaluate = resolver.resolve_call(_library_query(5, "evaluate", "cpu"))
    assert (evaluate.line, evaluate.line_exact) == (5, False)


def test_a_library_function_alone_gives_the_lines_the_whole_file_gives(tmp_path):
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "trainer.py").write_text(LIBRARY.replace("def broken(:", "def fine():"))
    resolver = SourceResolver([str(tmp_path)])
    # (5, 12: fresh calls at the def line; 14: a frame already running in fit's body)
    cases = ((5, "evaluate", "cpu"), (12, "fit", "item"), (12, "fit", "sum"), (14, "fit", "item"))
    for line, func, called in cases:
        as_library = resolver.resolve_call(_library_query(line, func, called))
        user_frame = Frame("lib/trainer.py", line, func, True)
        as_user = resolver.resolve_call(CallQuery(user_frame, ((called,),)))
        assert as_library == as_user, (func, called)
    assert resolver.resolve_call(_library_query(5, "evaluate", "cpu")).line == 10
    assert resolver.resolve_call(_library_query(12, "fit", "sum")).line == 13
    # A frame whose def line names another function says nothing of that function.
    other = resolver.resolve_call(_library_query(12, "evaluate", "item"))
    assert (other.line, other.line_exact) == (12, False)


def test_a_library_path_is_looked_for_in_site_packages_before_walking_the_roots(
    tmp_path, monkeypatch
):
    installed = tmp_path / "venv" / "lib" / "site-packages"
    (installed / "lib").mkdir(parents=True)
    (installed / "lib" / "trainer.py").write_text(LIBRARY)
    # A copy deep under the root, which only a walk of the root finds.
    (tmp_path / "home" / "src" / "lib").mkdir(parents=True)
    (tmp_path / "home" / "src" / "lib" / "trainer.py").write_text(LIBRARY)
    monkeypatch.setattr(source, "_library_dirs", lambda: [str(installed)])
    resolver = SourceResolver([str(tmp_path / "home")])
    assert resolver.find_library_file("lib/trainer.py") == installed / "lib" / "trainer.py"
    assert resolver._index == {}  # the root was not walked
    # Not installed here: the walk still finds it.
    monkeypatch.setattr(source, "_library_dirs", lambda: [])
    walked = SourceResolver([str(tmp_path / "home")])
    assert (
        walked.find_library_file("lib/trainer.py")
        == tmp_path / "home" / "src" / "lib" / "trainer.py"
    )


def test_a_library_not_installed_is_not_any_file_of_its_name_under_the_roots(tmp_path, monkeypatch):
    # Without torch installed, torch/cuda/__init__.py was the demo's own __init__.py.
    (tmp_path / "proj" / "pkg").mkdir(parents=True)
    (tmp_path / "proj" / "pkg" / "__init__.py").write_text("def synchronize():\n    pass\n")
    (tmp_path / "proj" / "vendor" / "torch" / "cuda").mkdir(parents=True)
    monkeypatch.setattr(source, "_library_dirs", lambda: [])
    resolver = SourceResolver([str(tmp_path / "proj")])
    assert resolver.find_library_file("torch/cuda/__init__.py") is None
    # A user's file is still found by its name alone.
    assert resolver.find_file("pkg/__init__.py") == tmp_path / "proj" / "pkg" / "__init__.py"
    # A checkout of the library under the roots holds its whole path: found.
    vendored = tmp_path / "proj" / "vendor" / "torch" / "cuda" / "__init__.py"
    vendored.write_text("def synchronize():\n    pass\n")
    again = SourceResolver([str(tmp_path / "proj")])
    assert again.find_library_file("torch/cuda/__init__.py") == vendored
    # Recorded as an absolute path of another machine: its last three parts must match.
    remote = "/opt/conda/lib/python3.10/site-packages/torch/cuda/__init__.py"
    assert SourceResolver([str(tmp_path / "proj")]).find_library_file(remote) == vendored


def test_a_library_frame_of_a_function_this_version_lacks_says_only_its_recorded_line(tmp_path):
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "trainer.py").write_text(LIBRARY)
    resolver = SourceResolver([str(tmp_path)])
    # Recorded by another version of the library, where line 13 was in ``_unique_impl``:
    # here it is in ``fit``, whose def line is not the recorded function's.
    gone = resolver.resolve_call(_library_query(13, "_unique_impl", "item"))
    assert (gone.line, gone.def_line, gone.line_exact, gone.candidates) == (13, None, False, [])
    assert resolver._parsed == {}  # told from the text, without parsing the file
    # A running frame in a file that does not parse as a whole still gets its lines.
    running = resolver.resolve_call(_library_query(14, "fit", "item"))
    assert (running.def_line, running.line_exact, running.candidates) == (12, False, [14, 15])


def test_a_function_moved_since_the_recording_gives_its_call_lines_here_as_candidates(tmp_path):
    """Lines added above ``train_step`` after profiling: the recorded def line (2) is blank
    now and in no function. Its one ``def`` here is searched, never claimed exact (the
    call itself may have changed too)."""
    source = _resolver(tmp_path).resolve(_stack(2, "train_step", "nonzero"), ["nonzero"])
    assert (source.line, source.def_line, source.line_exact) == (4, 4, False)
    assert source.candidates == [6]
    # Recorded inside another function (``evaluate``, decorated, first line 15): the same.
    source = _resolver(tmp_path).resolve(_stack(17, "loop", "item"), ["item"])
    assert (source.line, source.def_line, source.line_exact) == (20, 20, False)
    assert source.candidates == [22]


def test_a_frame_entered_while_profiling_at_a_line_inside_its_function_means_it_moved(tmp_path):
    """Six lines removed above ``train_step`` after profiling: its recorded def line (10) is
    now inside it, at the second ``item()``. A frame entered while profiling ran records
    where its function starts, so this is no frame running at line 10: the file changed,
    and neither ``item()`` is claimed."""
    resolver = _resolver(tmp_path)
    frame = Frame("work.py", 10, "train_step", True)
    entered = resolver.resolve_call(CallQuery(frame, (("item",),), entered=True))
    assert (entered.line, entered.def_line, entered.line_exact) == (4, 4, False)
    assert (entered.recorded_line, entered.candidates) == (10, [9, 10])
    # The same line of a frame already running when profiling started: followed from it.
    running = resolver.resolve_call(CallQuery(frame, (("item",),)))
    assert (running.line, running.line_exact, running.recorded_line) == (10, True, None)
    # An entered frame at its def line, as recorded: unchanged.
    fresh = resolver.resolve_call(
        CallQuery(Frame("work.py", 4, "train_step", True), (("nonzero",),), entered=True)
    )
    assert (fresh.line, fresh.line_exact, fresh.recorded_line) == (6, True, None)


def test_a_generator_entered_again_at_its_yield_is_followed_from_there(tmp_path):
    """A generator resumed while profiling ran records the ``yield`` it stopped at: no
    file change, and its next call is found after it."""
    (tmp_path / "gen.py").write_text(
        "def batches(xs):\n"
        "    for x in xs:\n"
        "        v = x.item()\n"
        "        yield v\n"
        "        w = x.cpu()\n"
    )
    frame = Frame("gen.py", 4, "batches", True)
    source = SourceResolver([str(tmp_path)]).resolve_call(
        CallQuery(frame, (("cpu",),), entered=True)
    )
    assert (source.line, source.line_exact, source.recorded_line) == (5, True, None)


def test_a_function_named_twice_in_a_changed_file_is_not_guessed(tmp_path):
    (tmp_path / "work.py").write_text(WORKLOAD + "\n\ndef train_step():\n    pass\n")
    source = SourceResolver([str(tmp_path)]).resolve(
        _stack(2, "train_step", "nonzero"), ["nonzero"]
    )
    assert (source.line, source.line_exact, source.candidates) == (2, False, [])
    assert (source.def_line, source.recorded_line) == (None, 2)


def test_a_function_gone_from_the_file_names_no_other_functions_def_line(tmp_path):
    """``fit`` renamed since profiling: its recorded line (17) is in ``evaluate`` now. The
    def line said is not ``evaluate``'s (it was, as for a frame running there): the
    recorded line is all the file can say, and the note says the file changed."""
    source = _resolver(tmp_path).resolve(_stack(17, "fit", "item"), ["item"])
    assert (source.line, source.def_line, source.line_exact) == (17, None, False)
    assert (source.recorded_line, source.candidates) == (17, [])
    # A frame of a function that is there, running at a line of it: unchanged.
    running = _resolver(tmp_path).resolve(_stack(17, "evaluate", "cpu"), ["cpu"])
    assert (running.line, running.line_exact, running.recorded_line) == (17, True, None)
    # A frame running at module level, or a class body at import: unchanged.
    module = _resolver(tmp_path).resolve(_stack(2, "<module>", "item"), ["item"])
    assert module.recorded_line is None
    (tmp_path / "cfg.py").write_text("import torch\n\n\nclass Config:\n    n = t.item()\n")
    frames = [Frame("<built-in>", None, "item", False), Frame("cfg.py", 5, "Config", True)]
    body = SourceResolver([str(tmp_path)]).resolve(frames, ["item"])
    assert (body.line, body.line_exact, body.recorded_line) == (5, False, None)


@pytest.mark.parametrize("entered", [False, True])
@pytest.mark.parametrize("prefix", ["", "Model."])
def test_torch_compiles_resume_function_is_the_function_it_resumes_running_from_there(
    tmp_path, entered, prefix
):
    """After a graph break, torch.compile runs the rest of ``train_step`` as a function of
    its own, ``torch_dynamo_resume_in_train_step_at_10``, whose first line is 10. Its sync
    is the ``item()`` at or after line 10 (not the one at line 9), and the function is
    ``train_step``: not a function gone from the file."""
    frame = Frame("work.py", 10, f"{prefix}torch_dynamo_resume_in_train_step_at_10", True)
    source = _resolver(tmp_path).resolve_call(CallQuery(frame, (("item",),), entered=entered))
    assert (source.line, source.line_exact, source.func) == (10, True, "train_step")
    assert (source.def_line, source.recorded_line) == (4, None)


def test_copies_of_one_script_found_under_the_roots_resolve_and_different_files_do_not(tmp_path):
    """A script copied beside each run's logs: the recorded path matches every copy
    equally; identical copies give the same lines, different files stay ambiguous."""
    for run in ("run_a", "run_b"):
        (tmp_path / run).mkdir()
        (tmp_path / run / "train.py").write_text("x = 1\n")
    recorded = "/cluster/job/train.py"
    found = SourceResolver([str(tmp_path)]).find_file(recorded)
    assert found is not None and found.name == "train.py"
    (tmp_path / "run_b" / "train.py").write_text("x = 2\n")
    assert SourceResolver([str(tmp_path)]).find_file(recorded) is None


def _edited_copies(tmp_path):
    """``train.py`` as each of two runs ran it: run_b's has a line added above the item()."""
    body = (
        "import torch\n\n\ndef train_step(model, x):\n    loss = model(x)\n"
        "{}    return loss.item()\n"
    )
    (tmp_path / "run_a" / "profile").mkdir(parents=True)
    (tmp_path / "run_b" / "profile").mkdir(parents=True)
    (tmp_path / "run_a" / "train.py").write_text(body.format(""))
    (tmp_path / "run_b" / "train.py").write_text(body.format("    loss = loss * 2\n"))


def test_a_run_takes_the_copy_of_an_edited_script_nearest_its_trace(tmp_path):
    """Different copies of one script, one beside each run's traces: the recorded path
    (``/cluster/job/train.py``) matches both equally. The trace's own run's copy is the
    one that ran; a trace near neither leaves the file unnamed."""
    _edited_copies(tmp_path)
    resolver = SourceResolver([str(tmp_path)])
    stack = [
        Frame("<built-in>", None, "item", False),
        Frame("/cluster/job/train.py", 4, "train_step", True),
    ]
    lines = {}
    for run in ("run_a", "run_b"):
        near = resolver.beside(str(tmp_path / run / "profile" / "w.pt.trace.json"))
        source = near.resolve(stack, ["item"])
        assert source.resolved_path == str(tmp_path / run / "train.py")
        lines[run] = (source.line, source.line_exact)
    assert lines == {"run_a": (6, True), "run_b": (7, True)}
    elsewhere = resolver.beside(str(tmp_path / "w.pt.trace.json"))
    assert elsewhere.find_file("/cluster/job/train.py") is None
    assert resolver.find_file("/cluster/job/train.py") is None
    # The roots were walked once for every trace's view.
    assert len(resolver._index["train.py"]) == 2


def test_the_report_names_each_runs_line_from_the_script_beside_it(tmp_path):
    """End to end: two runs' traces in one logdir, each beside the version of the script
    it ran; each run's item() is named at its own line, exact."""
    from kineto_builder import KinetoTraceBuilder, item_sync

    from tb_syncfinder.engine import Options, analyze_trace

    _edited_copies(tmp_path)
    options = Options(source_roots=(str(tmp_path),), contexts=False)
    found = {}
    for run in ("run_a", "run_b"):
        b = KinetoTraceBuilder()
        frame = ("/cluster/job/train.py", 4, "train_step")
        with b.step(1), b.frame(frame):
            item_sync(b, stack=[frame])
        trace = b.write(tmp_path / run / "profile" / "w.pt.trace.json")
        result = analyze_trace(str(trace), options)
        assert result.info.error is None
        found[run] = {(s.source.line, s.source.line_exact) for s in result.syncs}
    assert found == {"run_a": {(6, True)}, "run_b": {(7, True)}}


def test_a_run_without_its_own_copy_never_takes_another_runs(tmp_path):
    """run_b's copy is nearer run_a's trace than anything else, but it is run_b's: another
    version, whose line would be named exact. A copy in a folder above the trace (the
    project's own file) is taken, as a single file would be."""
    _edited_copies(tmp_path)
    (tmp_path / "run_c" / "profile").mkdir(parents=True)
    resolver = SourceResolver([str(tmp_path)])
    run_c = resolver.beside(str(tmp_path / "run_c" / "profile" / "w.pt.trace.json"))
    assert run_c.find_file("/cluster/job/train.py") is None
    (tmp_path / "train.py").write_text((tmp_path / "run_a" / "train.py").read_text() + "\n")
    again = SourceResolver([str(tmp_path)])
    for run, expected in (("run_c", tmp_path / "train.py"), ("run_b", tmp_path / "run_b")):
        view = again.beside(str(tmp_path / run / "profile" / "w.pt.trace.json"))
        found = view.find_file("/cluster/job/train.py")
        assert found == (expected if expected.suffix else expected / "train.py")


def test_the_only_copy_of_a_script_is_not_taken_for_a_run_it_was_not_archived_with(tmp_path):
    """Only run_a archived its script beside its traces: run_b, profiled before the
    archiving began, may have run another version, whose line would be named exact. A
    script whose subfolder holds traces (``scripts/log/``, an earlier
    ``tensorboard_trace_handler("./log")``) is the project's, taken for every run, as is
    a file in no run's folder."""
    _edited_copies(tmp_path)
    (tmp_path / "run_b" / "train.py").unlink()
    (tmp_path / "run_a" / "w.pt.trace.json").write_text("[]")
    (tmp_path / "run_b" / "profile" / "w.pt.trace.json").write_text("[]")
    resolver = SourceResolver([str(tmp_path)])
    run_b = resolver.beside(str(tmp_path / "run_b" / "profile" / "w.pt.trace.json"))
    assert run_b.find_file("/cluster/job/train.py") is None
    assert run_b.refused_copy("/cluster/job/train.py") == tmp_path / "run_a" / "train.py"
    run_a = resolver.beside(str(tmp_path / "run_a" / "w.pt.trace.json"))
    assert run_a.find_file("/cluster/job/train.py") == tmp_path / "run_a" / "train.py"
    assert run_a.refused_copy("/cluster/job/train.py") is None
    # torch_npu's runs: worker folders, not trace files, beside the script.
    (tmp_path / "run_a" / "w.pt.trace.json").unlink()
    (tmp_path / "run_a" / "host_1_ascend_pt").mkdir()
    again = SourceResolver([str(tmp_path)]).beside(str(tmp_path / "run_b" / "profile" / "x.json"))
    assert again.find_file("/cluster/job/train.py") is None
    # Its traces in a folder of its own named as this trace's (the same layout): the same.
    (tmp_path / "run_a" / "host_1_ascend_pt").rmdir()
    (tmp_path / "run_a" / "profile" / "w.pt.trace.json").write_text("[]")
    mirrored = SourceResolver([str(tmp_path)])
    view = mirrored.beside(str(tmp_path / "run_b" / "profile" / "w.pt.trace.json"))
    assert view.find_file("/cluster/job/train.py") is None
    # Without a trace to place it (a resolver of no run), the single file is taken.
    assert SourceResolver([str(tmp_path)]).find_file("/cluster/job/train.py") is not None
    # The project's script beside a folder of old traces of its own: taken.
    (tmp_path / "run_a" / "train.py").unlink()
    (tmp_path / "scripts" / "log").mkdir(parents=True)
    (tmp_path / "scripts" / "log" / "old.pt.trace.json").write_text("[]")
    (tmp_path / "scripts" / "train.py").write_text("x = 1\n")
    project = SourceResolver([str(tmp_path)])
    for run in ("run_a", "run_b"):
        view = project.beside(str(tmp_path / run / "profile" / "w.pt.trace.json"))
        assert view.find_file("/cluster/job/train.py") == tmp_path / "scripts" / "train.py"


def test_a_relative_script_beside_the_trace_beats_the_one_in_the_folder_the_report_runs(
    tmp_path,
):
    """torch names a script by its path from its ``sys.path`` entry (``train.py``): a run
    recorded in ``exp_c/`` with its logs in ``exp_c/logs`` was read with the project
    folder's ``train.py`` (another version), its lines claimed exact (a MONAI walk: 5 of 5
    lines of a fixed run named from the baseline script). The copy in the trace's folder
    or the nearest folder above it, under the root, is the run's."""
    (tmp_path / "train.py").write_text("x = 1\n")
    (tmp_path / "exp_c" / "logs" / "run").mkdir(parents=True)
    (tmp_path / "exp_c" / "train.py").write_text("y = 2\n")
    resolver = SourceResolver([str(tmp_path)])
    exp_c = resolver.beside(str(tmp_path / "exp_c" / "logs" / "run" / "w.pt.trace.json"))
    assert exp_c.find_file("train.py") == tmp_path / "exp_c" / "train.py"
    top = resolver.beside(str(tmp_path / "logs" / "w.pt.trace.json"))
    assert top.find_file("train.py") == tmp_path / "train.py"
    # A trace outside every root: the roots' file, as before.
    elsewhere = resolver.beside("/elsewhere/logs/w.pt.trace.json")
    assert elsewhere.find_file("train.py") == tmp_path / "train.py"


def test_a_runs_own_copy_beside_logs_under_no_root_beats_the_folder_the_report_runs_in(
    tmp_path,
):
    """``report ../logs/r`` run in the project's folder: the run's logs lie under no root,
    and its own copy of the script (kept in its folder, another version) was passed over
    for the project's, its lines claimed exact (a DLRM walk: 2 of 2 sites of a fixed run).
    The logs' folders are searched up to the folder they share with the root, that folder
    left out."""
    (tmp_path / "proj").mkdir()
    (tmp_path / "proj" / "train.py").write_text("x = 1\n")
    (tmp_path / "train.py").write_text("z = 3\n")  # the shared folder's: no run's copy
    (tmp_path / "logs" / "r").mkdir(parents=True)
    (tmp_path / "logs" / "r" / "train.py").write_text("y = 2\n")
    (tmp_path / "logs" / "s").mkdir()
    resolver = SourceResolver([str(tmp_path / "proj")])
    own = resolver.beside(str(tmp_path / "logs" / "r" / "w.pt.trace.json"))
    assert own.find_file("train.py") == tmp_path / "logs" / "r" / "train.py"
    # A run without a copy of its own: the root's file, not the shared folder's.
    other = resolver.beside(str(tmp_path / "logs" / "s" / "w.pt.trace.json"))
    assert other.find_file("train.py") == tmp_path / "proj" / "train.py"


def test_of_copies_holding_the_run_s_functions_one_written_after_the_trace_did_not_run(
    tmp_path,
):
    """``cp -r proj proj_fixed`` to try a fix, then ``report logs/base`` from the folder
    holding both: each copy holds the functions the run ran, so neither was taken, and
    every line of the run's report went inexact (a segmentation walk: 25 latent syncs to
    61, the host reads unfiltered). A copy written after the trace is not what it ran."""
    import os

    for name, extra in (("proj", ""), ("proj_fixed", "    loss = loss * 2\n")):
        (tmp_path / name).mkdir()
        (tmp_path / name / "train.py").write_text(
            f"import torch\n\n\ndef train_step(model, x):\n    loss = model(x)\n"
            f"{extra}    return loss.item()\n"
        )
    (tmp_path / "logs" / "base").mkdir(parents=True)
    trace = tmp_path / "logs" / "base" / "w.pt.trace.json"
    trace.write_text("[]")
    os.utime(tmp_path / "proj" / "train.py", ns=(1_000_000_000, 1_000_000_000))
    os.utime(trace, ns=(2_000_000_000, 2_000_000_000))
    os.utime(tmp_path / "proj_fixed" / "train.py", ns=(3_000_000_000, 3_000_000_000))
    stack = [Frame("<built-in>", None, "item", False), Frame("train.py", 4, "train_step", True)]
    view = SourceResolver([str(tmp_path)]).beside(str(trace))
    view.prefer_copies(stack)
    source = view.resolve(stack, ["item"])
    assert (source.resolved_path, source.line, source.line_exact) == (
        str(tmp_path / "proj" / "train.py"),
        6,
        True,
    )
    # Both written before the trace (``cp -p``): the trace cannot tell, as before.
    os.utime(tmp_path / "proj_fixed" / "train.py", ns=(1_000_000_000, 1_000_000_000))
    view = SourceResolver([str(tmp_path)]).beside(str(trace))
    view.prefer_copies(stack)
    assert view.find_file("train.py") is None


def test_a_line_whose_only_file_is_another_runs_says_so(tmp_path, capsys):
    """The footnote blamed --source-root ("its source file was not found") for a file
    that was found, and refused as another run's copy."""
    from kineto_builder import KinetoTraceBuilder, item_sync

    from tb_syncfinder.cli import main

    _edited_copies(tmp_path)
    (tmp_path / "run_b" / "train.py").unlink()
    (tmp_path / "run_a" / "old.pt.trace.json").write_text("[]")
    b = KinetoTraceBuilder()
    frame = ("/cluster/job/train.py", 4, "train_step")
    with b.step(1), b.frame(frame):
        item_sync(b, stack=[frame])
    trace = b.write(tmp_path / "run_b" / "profile" / "w.pt.trace.json")
    assert main(["report", str(trace), "--source-root", str(tmp_path), "--json"]) == 0
    (site,) = json.loads(capsys.readouterr().out)["sites"]
    assert site["other_run_copy"] == str(tmp_path / "run_a" / "train.py")
    assert site["line_exact"] is False
    assert main(["report", str(trace), "--source-root", str(tmp_path)]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "lies in another run's folder" in text and "was not found" not in text
    assert str(tmp_path / "run_a" / "train.py") in text


def test_a_trace_stored_as_a_symlink_keeps_its_runs_copy(tmp_path):
    """git-annex and DVC keep a trace as a link into a cache folder: the run is the folder
    the link is in."""
    _edited_copies(tmp_path)
    cache = tmp_path / ".cache"
    cache.mkdir()
    for run in ("run_a", "run_b"):
        stored = cache / f"{run}.json"
        stored.write_text("{}")
        (tmp_path / run / "w.pt.trace.json").symlink_to(stored)
    resolver = SourceResolver([str(tmp_path)])
    for run in ("run_a", "run_b"):
        view = resolver.beside(str(tmp_path / run / "w.pt.trace.json"))
        assert view.find_file("/cluster/job/train.py") == tmp_path / run / "train.py"


def test_the_class_an_init_belongs_to_is_read_from_each_runs_own_copy(tmp_path):
    """A class renamed between two runs' copies of a module: each run reads its own copy's
    name, whichever run is resolved first (the name was cached by the recorded path)."""
    for run, cls in (("run_a", "Normal"), ("run_b", "Gaussian")):
        (tmp_path / run / "mylib").mkdir(parents=True)
        (tmp_path / run / "mylib" / "dist.py").write_text(
            f"class {cls}:\n    def __init__(self, x):\n        self.x = x\n"
        )
    frame = Frame("/cluster/job/mylib/dist.py", 2, "__init__", True)
    group = (source.init_call(frame),)
    parsed = source._ParsedFile(__import__("ast").parse("x = 1\n"))
    for order in (("run_a", "run_b"), ("run_b", "run_a")):
        resolver = SourceResolver([str(tmp_path)])
        names = {}
        for run in order:
            view = resolver.beside(str(tmp_path / run / "w.pt.trace.json"))
            names[run] = view._class_called(group, parsed)
        assert names == {"run_a": ("Normal",), "run_b": ("Gaussian",)}


def test_many_runs_copies_are_indexed_by_folder_once_for_every_run(tmp_path):
    """Each trace looked at every copy (a realpath each): 3,000 runs took minutes. Now a
    trace looks up the folders above it in one index of the copies."""
    runs = 600
    for i in range(runs):
        (tmp_path / f"r{i}").mkdir()
        (tmp_path / f"r{i}" / "train.py").write_text(f"x = {i}\n")
    resolver = SourceResolver([str(tmp_path)])
    resolver.find_file("/cluster/job/train.py")  # the walk, once
    calls = []
    built = []
    for i in range(runs):
        view = resolver.beside(str(tmp_path / f"r{i}" / "w.pt.trace.json"))
        calls.append(view.find_file("/cluster/job/train.py"))
        built.append(id(next(iter(resolver._by_folder.values()))))
    assert calls == [tmp_path / f"r{i}" / "train.py" for i in range(runs)]
    # Counted, not timed: the folder index is built once for all the views (one object).
    assert len(resolver._by_folder) == 1 and len(set(built)) == 1


def test_looking_up_a_script_copied_in_many_runs_again_never_hashes_its_copies(
    tmp_path, monkeypatch
):
    """Each sync's lookup of a file found in many folders hashed every copy's path (the
    copies were a tuple, the key of the per-trace caches): 2,000 lookups took 2 s with a
    script copied into 2,000 experiment folders. Counted, not timed."""
    import pathlib

    for i in range(50):
        (tmp_path / f"exp{i}").mkdir()
        (tmp_path / f"exp{i}" / "train.py").write_text(f"x = {i}\n")
    (tmp_path / "exp7" / "logs").mkdir()
    view = SourceResolver([str(tmp_path)]).beside(str(tmp_path / "exp7" / "logs" / "w.json"))
    assert view.find_file("/cluster/job/train.py") == tmp_path / "exp7" / "train.py"
    hashed = []
    real_hash = pathlib.PurePath.__hash__

    def counting_hash(path: pathlib.PurePath) -> int:
        hashed.append(path)
        return real_hash(path)

    monkeypatch.setattr(pathlib.PurePath, "__hash__", counting_hash)
    for _ in range(10):
        assert view.find_file("/cluster/job/train.py") == tmp_path / "exp7" / "train.py"
        assert view.refused_copy("/cluster/job/train.py") is None
    assert hashed == []


def test_a_site_says_whether_its_source_file_was_read(tmp_path):
    """The dashboard told an unread file's def line from a read file's by the def line
    alone, and so said a different reason from the CLI's (a review)."""
    from kineto_builder import KinetoTraceBuilder, item_sync

    from tb_syncfinder import analyze

    b = KinetoTraceBuilder()
    frame = ("train.py", 4, "train_step")
    with b.step(1), b.frame(frame):
        item_sync(b, stack=[frame])
    trace = b.write(tmp_path / "run" / "w.pt.trace.json")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (site,) = analyze(trace, source_roots=[str(elsewhere)]).sites
    assert (site.line_exact, site.source_read) == (False, False)
    (tmp_path / "train.py").write_text(
        "import torch\n\n\ndef train_step(model, x):\n    loss = model(x)\n    return loss.item()\n"
    )
    (site,) = analyze(trace, source_roots=[str(tmp_path)]).sites
    assert (site.line, site.line_exact, site.source_read) == (6, True, True)


def test_one_source_root_given_as_a_string_is_one_root(tmp_path, monkeypatch):
    """``analyze(path, source_roots="src")`` made a root of each character ("s", "r",
    "c"; with "/tmp/x", "/": the whole file system walked) and named the def line."""
    from kineto_builder import KinetoTraceBuilder, item_sync

    from tb_syncfinder import analyze

    b = KinetoTraceBuilder()
    frame = ("train.py", 4, "train_step")
    with b.step(1), b.frame(frame):
        item_sync(b, stack=[frame])
    trace = b.write(tmp_path / "run" / "w.pt.trace.json")
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "train.py").write_text(
        "import torch\n\n\ndef train_step(model, x):\n    loss = model(x)\n    return loss.item()\n"
    )
    monkeypatch.chdir(tmp_path)
    for roots in ("src", tmp_path / "src", [tmp_path / "src"]):
        (site,) = analyze(trace, source_roots=roots).sites
        assert (site.line, site.line_exact) == (6, True), roots
    with pytest.raises(TypeError, match="unexpected keyword argument 'source_root'.*source_roots"):
        analyze(trace, source_root="src")


def test_a_line_left_inexact_for_several_copies_says_so_not_not_found(tmp_path):
    """Two different train.py under the root and none beside the trace: none is taken, and
    the footnote said "its source file was not found" of a file found twice (a review)."""
    from kineto_builder import KinetoTraceBuilder, item_sync

    from tb_syncfinder import analyze

    b = KinetoTraceBuilder()
    frame = ("train.py", 4, "train_step")
    with b.step(1), b.frame(frame):
        item_sync(b, stack=[frame])
    trace = b.write(tmp_path / "logs" / "run" / "w.pt.trace.json")
    for folder, extra in (("scripts", ""), ("examples", "\n# another version\n")):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "train.py").write_text(
            "import torch\n\n\ndef train_step(model, x):\n    return model(x).item()\n" + extra
        )
    report = analyze(trace, source_roots=[str(tmp_path)])
    (site,) = report.sites
    assert (site.line, site.line_exact, site.copies_found) == (4, False, 2)
    text = " ".join(report.to_text().split())
    assert "2 different files of its name lie under the source roots" in text
    assert "was not found" not in text


def test_a_relative_recorded_path_is_found_only_by_its_whole_path(tmp_path):
    """torch records a file under a ``sys.path`` entry relative to it (an installed
    package's ``metricpkg/metrics.py``): its folders are the module's. A tail of it is
    another module: an unrelated ``./metrics.py``, and the demo's own ``__init__.py`` for a
    package's ``__init__.py`` (a user walk of timm found both taken, lines and all)."""
    (tmp_path / "metrics.py").write_text("# another module\n")
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "__init__.py").write_text("# another package\n")
    (tmp_path / "repo" / "pkg").mkdir(parents=True)
    (tmp_path / "repo" / "pkg" / "model.py").write_text("x = 1\n")
    (tmp_path / "train.py").write_text("x = 1\n")
    resolver = SourceResolver([str(tmp_path)])
    assert resolver.find_file("metricpkg/metrics.py") is None
    assert resolver.find_file("metricpkg/__init__.py") is None
    # The whole relative path under a folder of the root, and a bare script name: found.
    assert resolver.find_file("pkg/model.py") == tmp_path / "repo" / "pkg" / "model.py"
    assert resolver.find_file("train.py") == tmp_path / "train.py"
    # An absolute path recorded on another machine is found by its longest tail, as before.
    assert resolver.find_file("/home/alice/proj/train.py") == tmp_path / "train.py"


def test_a_plain_test_no_path_reaches_right_after_the_call_that_preceded_the_read():
    """x-transformers' per-token ``if is_eos_tokens.any(dim=-1).all():`` read was named at
    its function's line, marked, with 18 candidates: ``if greedy:`` calls nothing, so it
    might be the truth read, though in every pass ``exists(...)`` runs between the
    ``.all()`` the trace shows last and it (a walk: 78 % of a generate run's reads)."""
    from tb_syncfinder.source import _truths_reading, _truths_right_after

    code = textwrap.dedent(
        """\
        def generate(out, seq_len, eos_token=None, greedy=False):
            for _ in range(seq_len):
                if exists(eos_token) and seq_len > 10:
                    raise ValueError("too long")
                if greedy:
                    pass
                out = torch.cat((out, out[:, -1:]), dim=-1)
                if not exists(eos_token):
                    continue
                is_eos = out == eos_token
                if is_eos.any(dim=-1).all():
                    break
            return out
        """
    )
    scope = ast.parse(code).body[0]
    right_after = _truths_right_after(scope, "all")
    assert right_after == frozenset({11})
    assert _truths_reading(scope, [5, 11], "all", right_after) == [11]
    # Without that evidence (no path known), the plain test stays a candidate.
    assert _truths_reading(scope, [5, 11], "all") == [5, 11]


def test_a_test_of_a_setting_is_no_candidate_for_a_tensors_truth():
    """CleanRL's PPO: ``if args.target_kl is not None and approx_kl > args.target_kl:`` read
    the tensor, and ``if args.norm_adv:`` and ``if args.clip_vloss:`` in the same loop were
    its candidates with it (its line the loop's ``prof.step()``, marked: a walk). An
    attribute of the parsed command line or config is a setting, never a tensor; one of
    any other name stays a candidate."""
    from tb_syncfinder.source import _truths_reading

    code = textwrap.dedent(
        """\
        def update(args, approx_kl, model):
            for epoch in range(args.update_epochs):
                if args.norm_adv:
                    pass
                if cfg.train.clip:
                    pass
                if args.target_kl is not None and approx_kl > args.target_kl:
                    break
                if model.training:
                    pass
        """
    )
    scope = ast.parse(code).body[0]
    assert _truths_reading(scope, [3, 5, 7], "gt") == [7]
    assert _truths_reading(scope, [3, 7, 9], "gt") == [7, 9]


def test_a_bool_call_of_the_call_just_made_is_the_truth_read_right_after_it():
    """kornia's ``positive = bool((host_sigma > 0).all())`` reads the truth in ``bool(...)``,
    which the search for the truths right after ``all`` passed over as a call of a type: its
    line was missing from the candidates, and the test of ``positive`` on the next line and
    a later ``if separable:`` were given (a walk: 2 of 4 library sites)."""
    from tb_syncfinder.source import _truths_right_after

    code = textwrap.dedent(
        """        def blur(sigma, separable, check):
            positive = bool((sigma > 0).all())
            check(positive, "ok" if positive else "sigma must be positive")
            if separable:
                return sigma
            return bool(separable)
        """
    )
    scope = ast.parse(code).body[0]
    assert _truths_right_after(scope, "all") == frozenset({2})


def test_torch_size_of_a_list_of_elements_may_be_a_scalar_read():
    """kornia's ``torch.Size(new_batch_shape)`` of a list holding a tensor's elements reads
    each as an index (``__index__``, 2 a call): its line was no candidate of those reads."""
    from tb_syncfinder.source import _frameless_labels

    call = ast.parse("torch.Size(shape)").body[0].value
    assert _frameless_labels("call", call) == ("<scalar>",)
    other = ast.parse("torch.zeros(shape)").body[0].value
    assert _frameless_labels("call", other) == ()


def test_a_conversion_of_literals_reads_no_tensor():
    """``for _ in range(2):`` beside ``print(float(l))`` under a module-level ``with
    profile(...)``: the read's line was either (39 or 41, marked), ``range(2)`` taken for a
    conversion that may read a tensor. A literal is no tensor."""
    from tb_syncfinder.source import _frameless_labels

    for literal in ("range(2)", "range(0, 10, -1)", "float('nan')", "int(3)"):
        assert _frameless_labels("call", ast.parse(literal).body[0].value) == (), literal
    for read in ("range(n)", "range(2, n)", "float(loss)", "int(-t)"):
        assert _frameless_labels("call", ast.parse(read).body[0].value) == ("<scalar>",), read
