"""callorder: the order a function runs its calls in, and where each observed call fits."""

from __future__ import annotations

import ast
import textwrap

from tb_syncfinder.callorder import N, P, align, build


def _names(*names: str, step_optional: bool = False):
    """Calls named ``names`` emit N; ``prof.step()`` emits P."""

    def match(kind, node):
        if kind != "call":
            return None, False
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
        if name in names:
            return N, False
        if name == "step" and isinstance(func.value, ast.Name) and func.value.id == "prof":
            return P, step_optional
        return None, False

    return match


def _scope(source: str) -> ast.AST:
    tree = ast.parse(textwrap.dedent(source))
    return next((n for n in tree.body if isinstance(n, ast.FunctionDef)), tree)


def _lines(source: str, tokens, match=None, **kw):
    automaton = build(_scope(source), match or _names("item"), **kw)
    aligned = align(automaton, tokens)
    return None if aligned is None else [sorted(lines) for lines in aligned]


def test_a_straight_function_maps_each_call_to_its_line_in_order():
    source = """\
        def f(x, y):
            a = x.item()
            b = y.item()
            return a + b
        """
    assert _lines(source, (N, N)) == [[2], [3]]


def test_a_count_the_source_cannot_produce_has_no_alignment():
    source = """\
        def f(x):
            return x.item()
        """
    assert _lines(source, (N, N)) is None
    assert _lines(source, ()) is None  # a complete call must reach the end


def test_calls_in_one_statement_follow_evaluation_order_not_line_order():
    # The value of an assignment runs before its target's subscript.
    source = """\
        def f(d, k, v):
            d[
                k.item()
            ] = (
                v.item()
            )
        """
    assert _lines(source, (N, N)) == [[5], [3]]
    args = """\
        def f(x, y):
            return combine(
                x.item(),
                y.item(),
            ).item()
        """
    # The method's own line: ``).item()``, where Python (3.11 on) and the profiler put it.
    assert _lines(args, (N, N, N)) == [[3], [4], [5]]


def test_a_loop_repeats_its_body_any_number_of_times():
    source = """\
        def f(xs):
            first = xs[0].item()
            for x in xs:
                a = x.sum().item()
                b = x.max().item()
            return first
        """
    assert _lines(source, (N,) * 5) == [[2], [4], [5], [4], [5]]
    assert _lines(source, (N, N)) is None  # half an iteration cannot end the function


def test_a_branch_leaves_the_calls_after_it_ambiguous():
    source = """\
        def f(x):
            if x.numel():
                a = x.sum().item()
            b = x.max().item()
        """
    assert _lines(source, (N,)) == [[4]]
    assert _lines(source, (N, N)) == [[3], [4]]
    assert _lines(_scope_text_with_two_branches(), (N,)) == [[3, 5]]


def _scope_text_with_two_branches() -> str:
    return """\
        def f(x, flag):
            if flag:
                a = x.sum().item()
            else:
                b = x.max().item()
        """


def test_short_circuit_and_conditional_expressions_may_skip_calls():
    source = """\
        def f(a, b):
            ok = (a.item() > 0
                  and b.item() > 0)
        """
    assert _lines(source, (N,)) == [[2]]
    assert _lines(source, (N, N)) == [[2], [3]]


def test_profiler_steps_fix_the_phase_of_a_loop_the_profile_entered_anywhere():
    # A frame running since before profiling (prefix): the trace may start mid-iteration,
    # but prof.step() marks where each iteration ends.
    source = """\
        for x in loader:
            a = x.sum().item()
            prof.step()
            b = x.max().item()
        """
    tokens = (N, P, N, N, P, N)
    assert _lines(source, tokens, start_line=1, prefix=True) == [[2], [3], [4], [2], [3], [4]]


def test_a_running_frame_starts_after_its_recorded_line():
    source = """\
        def main(loader, prof):
            warm = loader[0].item()
            with profile() as prof:
                for x in loader:
                    acc = x.sum().item()
                    log.append(x.max().item())
                    prof.step()
        """
    # Recorded at the `with profile(` line: warm-up's item() ran before profiling.
    lines = _lines(source, (N, N, P, N, N, P), start_line=3, prefix=True)
    assert lines == [[5], [6], [7], [5], [6], [7]]
    # Recorded at prof.step() (a schedule started profiling there): the next iteration.
    lines = _lines(source, (P, N, N, P), start_line=7, prefix=True)
    assert lines == [[7], [5], [6], [7]]


def test_break_continue_return_and_exceptions_are_paths_too():
    source = """\
        def f(xs):
            for x in xs:
                if x.sum().item() > 3:
                    break
                try:
                    y = x.max().item()
                except ValueError:
                    return x.min().item()
        """
    # After the first item(): the loop broke (end), or max() ran (or raised into min()).
    assert _lines(source, (N, N)) == [[3], [6, 8]]


def test_a_generator_resumes_after_each_yield():
    source = """\
        def gen(xs):
            for x in xs:
                yield x.item()
                yield x.max().item()
        """
    # Each resume is a new call event: it may start after any yield.
    assert _lines(source, (N,)) == [[3, 4]]


def test_comprehensions_run_their_calls_any_number_of_times():
    source = """\
        def f(xs):
            vals = [x.item() for x in xs]
            return xs[0].item()
        """
    assert _lines(source, (N, N, N)) == [[2], [2], [3]]


def test_a_method_chain_split_over_lines_is_at_the_methods_line_and_a_chained_compare_has_truths():
    """``y.abs()`` / ``.sum()`` / ``.item()`` over three lines was named at the chain's first
    line (Python records ``.item()``'s); ``0 < t < 1`` takes the truth of ``0 < t`` before
    going on, which the model had none of (its truth went to another ``if``)."""
    chain = """\
        def f(y):
            v = (
                y.abs()
                .sum()
                .item()
            )
        """
    assert _lines(chain, (N,)) == [[5]]
    compare = """\
        def f(t, step):
            if step >= 0:
                pass
            if 0 < t < 1:
                pass
        """

    def any_truth(kind, node):  # each truth may read a tensor, or a number (no sync)
        return (N, True) if kind == "truth" else (None, False)

    # Two truths seen: both at the chain's line, or one at ``if step >= 0`` first. The
    # model without the chain's own truth could only say (2, 4), named exact.
    assert _lines(compare, (N, N), any_truth) == [[2, 4], [4]]


def test_an_in_test_calls_contains_after_both_sides_and_a_chain_once_per_in():
    """``a in b`` runs ``b.__contains__(a)`` once both sides are evaluated (a list's runs
    nothing the trace shows, so each may be missing); a chain (``0 < t in s``) runs it
    once, unless its first comparison is false; ``==`` runs none."""

    def contains(kind, node):
        return (N, True) if kind == "contains" else (None, False)

    source = """\
        def f(t, s):
            hit = 3.0 in t
            miss = t not in s
            same = t == s
            both = 0 < t in s
        """
    assert _lines(source, (N,), contains) == [[2, 3, 5]]
    assert _lines(source, (N, N, N), contains) == [[2], [3], [5]]
    assert _lines(source, (N, N, N, N), contains) is None


def test_str_percent_and_a_conversion_field_may_each_run_repr_any_number_of_times():
    """``str(x)``, ``"%s" % x`` and ``f"{x!r}"`` run ``__repr__`` with no frame between:
    none for a number, one per tensor in a container. ``f"{x}"`` runs ``__format__``."""

    def repr_points(kind, node):
        return (N, False) if kind == "repr" else (None, False)

    source = """\
        def f(t, step):
            tag = str(step)
            msg = "%s %s" % (t, t)
            note = f"{t!r} {t}"
        """
    assert _lines(source, (N,), repr_points) == [[2, 3, 4]]
    assert _lines(source, (N, N, N), repr_points) == [[2, 3, 4], [2, 3, 4], [2, 3, 4]]
    only_percent = """\
        def f(t):
            msg = "%s" % t
        """
    assert _lines(only_percent, (N, N), repr_points) == [[2], [2]]


def test_only_a_format_that_may_convert_with_str_or_repr_runs_repr():
    """``"run%d" % n`` and ``"lr %.3f" % lr`` convert with no ``__repr__``; ``FMT % x``
    may (a name may hold any format); ``str("text")`` cannot; ``f"{d}"`` without a spec
    may (``object.__format__`` runs ``str()``), ``f"{v:.3f}"`` cannot; ``map(str, rows)``
    may."""

    def repr_points(kind, node):
        return (N, False) if kind == "repr" else (None, False)

    source = """\
        def f(t, n, lr, d, v, rows):
            a = "run%d" % n
            b = "lr %.3f" % lr
            c = FMT % t
            e = str("text")
            g = f"{d}"
            h = f"{v:.3f}"
            k = list(map(str, rows))
            m = "%(name)s done, 100%%" % d
        """
    assert _lines(source, (N,), repr_points) == [[4, 6, 8, 9]]
