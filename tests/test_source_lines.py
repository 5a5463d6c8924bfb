"""SourceResolver: finding files and recovering exact call lines with ast."""

from __future__ import annotations

import textwrap

from tb_syncfinder.models import Frame
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
    lines = [resolver.resolve(_stack(4, "train_step", "item"), ["item"],
                              occurrence=(n, 2)).line for n in range(2)]
    assert lines == [9, 10]


def test_counts_that_disagree_fall_back_to_the_def_line_marked_inexact(tmp_path):
    source = _resolver(tmp_path).resolve(_stack(4, "train_step", "item"), ["item"],
                                         occurrence=(0, 3))
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


def test_unreadable_file_keeps_the_def_line_inexact(tmp_path):
    source = SourceResolver([str(tmp_path)]).resolve(_stack(4, "train_step", "item"),
                                                     ["item"])
    assert (source.line, source.def_line, source.line_exact) == (4, 4, False)
    assert source.resolved_path is None


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
