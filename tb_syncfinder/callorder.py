"""The order in which one Python function runs the calls that matter, as a small automaton,
and the alignment of what a trace saw that function call with it.

A modern trace names a frame by its def line (or, for a frame already running when profiling
started, by its current line), never by the line that made a call. What it does show is the
*order* of what the frame called: its child frames in time (``<built-in method item ...>``,
``torch/profiler/profiler.py(...): step``) and the operators it ran with no call frame of
their own (``float(t)``, ``if t:``, ``t[mask]``). The source says in which order the frame's
calls can run: statements in order, expressions in evaluation order, loops repeating their
bodies, branches taking one side. So the k-th observed ``item`` call of one invocation is one
of the ``.item()`` calls the model can place k-th in *every* way of running the function that
produces exactly the observed sequence; when all those ways agree, the line is exact, and when
they do not, the disagreeing lines are the candidates. No way at all means the source and the
trace disagree (another version, an alias): nothing is claimed.

The automaton has ``N`` transitions (one of the calls looked for, each with its line), ``P``
transitions (the profiler's ``step()``, which marks iteration boundaries) and epsilon moves.
A call that may or may not show in the trace (``float(x)`` on a Python float, a subscript
with an int) is an ``N`` transition with an epsilon beside it.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Iterable, Sequence

import msgspec

N = "N"  # one of the calls looked for
P = "P"  # the profiler's step() call
# A call of another name the frame made, as its child frame's name follows (``A:backward``):
# it places the calls looked for between the calls around them (which branch ran).
ANCHOR = "A:"

# What an evaluation point is: a call, a subscript read or write, an implicit truth test, an
# f-string field's __format__, an ``in`` test's __contains__, a ``str()``, ``%`` or ``!r``
# field's __repr__, a binary operation, a for loop's __iter__ / __next__, a with item's
# __enter__ / __exit__. A matcher turns (kind, node) into (label, optional): the label is
# None (nothing observable), a token, or a tuple of tokens when the point may show as any
# one of them (a subscript may run aten::index, or __index__ on a list).
Matcher = Callable[[str, ast.AST], "tuple[str | tuple[str, ...] | None, bool]"]

_NESTED_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)
_COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)


class Automaton(msgspec.Struct):
    """States are ints; ``edges[s]`` holds (label, destination, line) and ``eps[s]`` the
    epsilon moves. ``accepting`` None means every state accepts (the sequence may stop
    anywhere: a frame cut by the end of profiling)."""

    eps: list[list[int]] = msgspec.field(default_factory=list)
    edges: list[list[tuple[str, int, int]]] = msgspec.field(default_factory=list)
    start: int = 0
    accepting: frozenset[int] | None = None
    _closures: dict[int, frozenset[int]] = msgspec.field(default_factory=dict)

    def new(self) -> int:
        self.eps.append([])
        self.edges.append([])
        return len(self.eps) - 1

    def closure(self, state: int) -> frozenset[int]:
        found = self._closures.get(state)
        if found is None:
            seen = {state}
            todo = [state]
            while todo:
                for nxt in self.eps[todo.pop()]:
                    if nxt not in seen:
                        seen.add(nxt)
                        todo.append(nxt)
            found = self._closures[state] = frozenset(seen)
        return found

    def closure_of(self, states: Iterable[int]) -> set[int]:
        out: set[int] = set()
        for s in states:
            out |= self.closure(s)
        return out

    def reachable_lines(self, label: str = N) -> list[int]:
        """Lines of the ``label`` transitions reachable from the start, sorted."""
        seen = {self.start}
        todo = [self.start]
        lines = set()
        while todo:
            s = todo.pop()
            nexts = list(self.eps[s])
            for lab, dst, line in self.edges[s]:
                if lab == label:
                    lines.add(line)
                nexts.append(dst)
            for nxt in nexts:
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        return sorted(lines)

    def accepts(self, states: Iterable[int]) -> bool:
        if self.accepting is None:
            return True
        return any(self.closure(s) & self.accepting for s in states)


def align(automaton: Automaton, tokens: Sequence[str]) -> list[frozenset[int]] | None:
    """For each position of ``tokens``, the lines an ``N`` there can come from over every run
    of the automaton that produces exactly ``tokens``; None when no run does. Positions that
    hold a ``P`` get the lines of the ``P`` transitions (unused by callers)."""
    forward: list[set[int]] = [set(automaton.closure(automaton.start))]
    for token in tokens:
        step: set[int] = set()
        for s in forward[-1]:
            for label, dst, _line in automaton.edges[s]:
                if label == token:
                    step.add(dst)
        if not step:
            return None
        forward.append(automaton.closure_of(step))
    last = forward[-1]
    if automaton.accepting is None:
        live = set(last)
    else:
        live = {s for s in last if automaton.closure(s) & automaton.accepting}
    if not live:
        return None
    lines: list[frozenset[int]] = [frozenset()] * len(tokens)
    for position in range(len(tokens) - 1, -1, -1):
        token = tokens[position]
        used: set[int] = set()
        sources: set[int] = set()
        for s in forward[position]:
            for label, dst, line in automaton.edges[s]:
                if label == token and automaton.closure(dst) & live:
                    used.add(line)
                    sources.add(s)
        lines[position] = frozenset(used)
        live = {s for s in forward[position] if automaton.closure(s) & sources}
    return lines


class _Builder:
    """Thompson-style construction over statements and expressions in evaluation order."""

    def __init__(self, match: Matcher) -> None:
        self.match = match
        self.a = Automaton()
        self.end = self.a.new()
        self.loops: list[tuple[int, int]] = []  # (continue target, break target)
        self.after: dict[int, int] = {}  # id(stmt) -> state after it
        self.resume: dict[int, int] = {}  # id(compound stmt) -> where its header resumes
        self.yields: list[int] = []  # states after a yield/await: where a generator resumes

    # -- helpers ---------------------------------------------------------------------
    def emit(
        self,
        s: int,
        kind: str,
        node: ast.AST,
        optional_all: bool = False,
        repeated: bool = False,
    ) -> int:
        """The point ``node`` of ``kind``; ``repeated``: one that may run its call any
        number of times, none included (``str`` of a container runs ``__repr__`` once per
        element; of a number, none the trace shows)."""
        label, optional = self.match(kind, node)
        if not label:
            return s
        t = self.a.new()
        line = _line_of(kind, node)
        for one in (label,) if isinstance(label, str) else label:
            self.a.edges[s].append((one, t, line))
            if repeated:
                self.a.edges[t].append((one, t, line))
        if optional or optional_all or repeated:
            self.a.eps[s].append(t)
        return t

    def link(self, s: int, t: int) -> None:
        self.a.eps[s].append(t)

    def contains(self, s: int, op: ast.cmpop, node: ast.Compare, opt: bool) -> int:
        """``a in b`` calls ``b.__contains__(a)`` once both sides are evaluated."""
        if isinstance(op, (ast.In, ast.NotIn)):
            return self.emit(s, "contains", node, opt)
        return s

    # -- expressions -----------------------------------------------------------------
    def expr(self, node: ast.AST | None, s: int, opt: bool = False) -> int:
        if node is None:
            return s
        if isinstance(node, ast.Call):
            func = node.func
            s = (
                self.expr(func.value if isinstance(func, ast.Attribute) else func, s, opt)
                if not isinstance(func, ast.Name)
                else s
            )
            for arg in node.args:
                s = self.expr(arg, s, opt)
            for kw in node.keywords:
                s = self.expr(kw.value, s, opt)
            s = self.emit(s, "call", node, opt)
            if _may_run_repr_call(node):
                # A type called (or passed, ``map(str, rows)``): no frame of its own, the
                # argument's __repr__ (or each element's, for a container) runs right under
                # this one.
                s = self.emit(s, "repr", node, repeated=True)
            return s
        if isinstance(node, ast.Subscript):
            s = self.expr(node.value, s, opt)
            s = self.expr(node.slice, s, opt)
            if isinstance(node.ctx, ast.Load):
                return self.subscript(s, "load", node, opt)
            return s  # a store is emitted by its assignment, after the value
        if isinstance(node, ast.BoolOp):
            join = self.a.new()
            for i, value in enumerate(node.values):
                s = self.expr(value, s, opt)
                if i < len(node.values) - 1:
                    s = self.emit(s, "truth", value, opt)
                    self.link(s, join)  # short circuit
            self.link(s, join)
            return join
        if isinstance(node, ast.IfExp):
            s = self.expr(node.test, s, opt)
            s = self.emit(s, "truth", node.test, opt)
            join = self.a.new()
            self.link(self.expr(node.body, s, opt), join)
            self.link(self.expr(node.orelse, s, opt), join)
            return join
        if isinstance(node, ast.UnaryOp):
            s = self.expr(node.operand, s, opt)
            if isinstance(node.op, ast.Not):
                s = self.emit(s, "truth", node.operand, opt)
            return s
        if isinstance(node, _COMPREHENSIONS):
            return self.comprehension(node, s, opt)
        if isinstance(node, ast.Lambda):
            for default in (*node.args.defaults, *node.args.kw_defaults):
                s = self.expr(default, s, opt)
            return s
        if isinstance(node, ast.JoinedStr):
            for value in node.values:
                s = self.expr(value, s, opt)
            return s
        if isinstance(node, ast.FormattedValue):
            s = self.expr(node.value, s, opt)
            s = self.expr(node.format_spec, s, opt)
            if node.conversion != -1:  # ``!s`` / ``!r`` / ``!a``: repr() first, then a str's format
                return self.emit(s, "repr", node, repeated=True)
            s = self.emit(s, "format", node, opt)
            if _may_be_empty(node.format_spec):
                # object.__format__ (a list, dict or tuple of tensors) runs str(): each
                # element's __repr__ right under this frame. Any other spec makes it raise.
                s = self.emit(s, "repr", node, repeated=True)
            return s
        if isinstance(node, (ast.Yield, ast.YieldFrom, ast.Await)):
            s = self.expr(node.value, s, opt)
            # The frame is suspended here and resumed later as a new call event.
            self.link(s, self.end)
            resumed = self.a.new()
            self.yields.append(resumed)
            self.link(s, resumed)
            return resumed
        if isinstance(node, ast.Dict):
            for key, value in zip(node.keys, node.values, strict=True):
                s = self.expr(key, s, opt)
                s = self.expr(value, s, opt)
            return s
        if isinstance(node, ast.BinOp):
            s = self.expr(node.left, s, opt)
            s = self.expr(node.right, s, opt)
            # ``"%d + %d = %d" % (a, b, c)``: a numeric conversion reads each value that is a
            # tensor (minGPT's adder prints four); one point per conversion.
            if isinstance(node.op, ast.Mod) and format_pieces(node.left) is not None:
                # A format built by arithmetic (ultralytics' ``("%11s" * 2 + "%11.4g" * (2 +
                # n)) % (...)``): how many numeric conversions it has is not written out.
                s = self.emit(s, "binop", node, opt, repeated=True)
            else:
                for _ in range(_numeric_conversions(node)):
                    s = self.emit(s, "binop", node, opt)
            if isinstance(node.op, ast.Mod) and _may_run_repr(node.left, node.right):
                s = self.emit(s, "repr", node, repeated=True)  # ``"%s" % t``: str(t) of each value
            return s
        if isinstance(node, ast.Compare):
            s = self.expr(node.left, s, opt)
            if len(node.comparators) == 1:
                s = self.expr(node.comparators[0], s, opt)
                return self.contains(s, node.ops[0], node, opt)
            # A chain (``0 < t < 1``) takes the truth of each comparison but the last, and
            # stops at the first false one, as ``and`` does.
            join = self.a.new()
            for i, (op, comparator) in enumerate(zip(node.ops, node.comparators, strict=True)):
                s = self.expr(comparator, s, opt)
                s = self.contains(s, op, node, opt)
                if i < len(node.comparators) - 1:
                    s = self.emit(s, "truth", node, opt)
                    self.link(s, join)  # short circuit
            self.link(s, join)
            return join
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.expr):
                s = self.expr(child, s, opt)
            elif isinstance(child, (ast.keyword, ast.comprehension, ast.arguments)):
                s = self.expr(getattr(child, "value", None), s, opt)
        return s

    def comprehension(self, node: ast.AST, s: int, opt: bool) -> int:
        """The first iterable runs in the enclosing frame; the rest runs zero or more times
        (in its own frame before Python 3.12, inline since: either way, any number)."""
        generators = node.generators  # type: ignore[attr-defined]
        s = self.expr(generators[0].iter, s, opt)
        if isinstance(node, ast.GeneratorExp):
            return s  # consumed lazily, elsewhere
        # Before Python 3.12 the comprehension is a call of a frame of its own here
        # (``<listcomp>``); since, it runs inline and no trace shows such a call.
        s = self.emit(s, "comprehension", node, opt)
        head = self.a.new()
        self.link(s, head)
        t = head
        for i, gen in enumerate(generators):
            if i:
                t = self.expr(gen.iter, t, True)
            for cond in gen.ifs:
                t = self.expr(cond, t, True)
                t = self.emit(t, "truth", cond, True)
        if isinstance(node, ast.DictComp):
            t = self.expr(node.key, t, True)
            t = self.expr(node.value, t, True)
        else:
            t = self.expr(node.elt, t, True)  # type: ignore[attr-defined]
        self.link(t, head)
        return head

    def subscript(self, s: int, kind: str, node: ast.Subscript, opt: bool = False) -> int:
        """A subscript's ``kind`` point (``load`` or ``store``), then one ``bound`` point per
        further slice bound that may be a tensor: each reads its value back through
        ``__index__`` (x-transformers' ``self.data[start : start + n]`` reads two)."""
        s = self.emit(s, kind, node, opt)
        for _ in range(_slice_bounds(node.slice) - 1):
            s = self.emit(s, "bound", node, opt)
        return s

    def store(self, target: ast.AST, s: int, opt: bool = False) -> int:
        if isinstance(target, ast.Subscript):
            s = self.expr(target.value, s, opt)
            s = self.expr(target.slice, s, opt)
            return self.subscript(s, "store", target, opt)
        if isinstance(target, ast.Attribute):
            return self.expr(target.value, s, opt)
        if isinstance(target, (ast.Tuple, ast.List)):
            for elt in target.elts:
                s = self.store(elt, s, opt)
            return s
        if isinstance(target, ast.Starred):
            return self.store(target.value, s, opt)
        return s

    # -- statements ------------------------------------------------------------------
    def block(self, stmts: Sequence[ast.stmt], s: int) -> int:
        for stmt in stmts:
            s = self.stmt(stmt, s)
        return s

    def stmt(self, node: ast.stmt, s: int) -> int:
        out = self._stmt(node, s)
        self.after[id(node)] = out
        return out

    def _stmt(self, node: ast.stmt, s: int) -> int:
        if isinstance(node, ast.Expr):
            return self.expr(node.value, s)
        if isinstance(node, ast.Assign):
            s = self.expr(node.value, s)
            for target in node.targets:
                s = self.store(target, s)
            return s
        if isinstance(node, ast.AugAssign):
            target = node.target
            if isinstance(target, ast.Subscript):
                s = self.expr(target.value, s)
                s = self.expr(target.slice, s)
                s = self.subscript(s, "load", target)
                s = self.expr(node.value, s)
                return self.subscript(s, "store", target)
            s = self.expr(target.value, s) if isinstance(target, ast.Attribute) else s
            s = self.expr(node.value, s)
            if isinstance(node.op, ast.Mod) and _may_run_repr(target, node.value):
                s = self.emit(s, "repr", node, repeated=True)  # ``msg %= t``
            return s
        if isinstance(node, ast.AnnAssign):
            if node.value is None:
                return s
            return self.store(node.target, self.expr(node.value, s))
        if isinstance(node, (ast.Return, ast.Raise)):
            values = [node.value] if isinstance(node, ast.Return) else [node.exc, node.cause]
            for value in values:
                s = self.expr(value, s)
            self.link(s, self.end)
            return self.a.new()  # nothing after it runs
        if isinstance(node, ast.Delete):
            for target in node.targets:
                if isinstance(target, ast.Subscript):
                    s = self.expr(target.value, s)
                    s = self.expr(target.slice, s)
            return s
        if isinstance(node, ast.Assert):
            s = self.expr(node.test, s)
            s = self.emit(s, "truth", node.test)
            failed = self.expr(node.msg, s)
            self.link(failed, self.end)
            return s
        if isinstance(node, ast.If):
            s = self.expr(node.test, s)
            s = self.emit(s, "truth", node.test)
            self.resume[id(node)] = s
            join = self.a.new()
            self.link(self.block(node.body, s), join)
            self.link(self.block(node.orelse, s), join)
            return join
        if isinstance(node, (ast.For, ast.AsyncFor)):
            s = self.expr(node.iter, s)
            s = self.emit(s, "iter", node)
            head = self.a.new()
            self.link(s, head)
            nxt = self.emit(head, "next", node)
            if nxt == head:
                nxt = self.a.new()
                self.link(head, nxt)
            # Running at the header: in its ``__next__``, which may still show (a loader
            # wrapper's generator stepping the profiler as profiling starts); where the
            # matcher gives ``__next__`` nothing, ``head`` moves to ``nxt`` by epsilon alone.
            self.resume[id(node)] = head
            exit_ = self.a.new()
            self.link(nxt, exit_)  # __next__ raised StopIteration
            after = self.a.new()
            self.loops.append((head, after))
            body = self.block(node.body, self.store(node.target, nxt))
            self.loops.pop()
            self.link(body, head)
            self.link(self.block(node.orelse, exit_), after)
            return after
        if isinstance(node, ast.While):
            head = self.a.new()
            self.link(s, head)
            tested = self.emit(self.expr(node.test, head), "truth", node.test)
            self.resume[id(node)] = head
            exit_ = self.a.new()
            self.link(tested, exit_)
            after = self.a.new()
            self.loops.append((head, after))
            body = self.block(node.body, tested)
            self.loops.pop()
            self.link(body, head)
            self.link(self.block(node.orelse, exit_), after)
            return after
        if isinstance(node, (ast.With, ast.AsyncWith)):
            for item in node.items:
                s = self.expr(item.context_expr, s)
                s = self.emit(s, "enter", item)
                if item.optional_vars is not None:
                    s = self.store(item.optional_vars, s)
            self.resume[id(node)] = s
            s = self.block(node.body, s)
            for item in reversed(node.items):
                s = self.emit(s, "exit", item)
            return s
        if isinstance(node, ast.Try) or type(node).__name__ == "TryStar":
            first = len(self.a.eps)
            self.resume[id(node)] = s
            body = self.block(node.body, s)
            last = len(self.a.eps)
            dispatch = self.a.new()
            for state in [s, *range(first, last)]:
                self.link(state, dispatch)  # an exception may leave the body anywhere
            final = self.a.new()
            self.link(self.block(node.orelse, body), final)
            for handler in node.handlers:  # type: ignore[attr-defined]
                self.link(self.block(handler.body, self.expr(handler.type, dispatch)), final)
            return self.block(node.finalbody, final)
        if type(node).__name__ == "Match":
            s = self.expr(node.subject, s)  # type: ignore[attr-defined]
            join = self.a.new()
            self.link(s, join)  # no case matched
            for case in node.cases:  # type: ignore[attr-defined]
                t = s
                if case.guard is not None:
                    t = self.emit(self.expr(case.guard, t), "truth", case.guard)
                self.link(self.block(case.body, t), join)
            return join
        if isinstance(node, ast.Break):
            if self.loops:
                self.link(s, self.loops[-1][1])
            return self.a.new()
        if isinstance(node, ast.Continue):
            if self.loops:
                self.link(s, self.loops[-1][0])
            return self.a.new()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for dec in node.decorator_list:
                s = self.expr(dec, s)
            for default in (*node.args.defaults, *node.args.kw_defaults):
                s = self.expr(default, s)
            return s
        if isinstance(node, ast.ClassDef):
            for expr in (*node.decorator_list, *node.bases, *(k.value for k in node.keywords)):
                s = self.expr(expr, s)
            return s
        return s  # pass, import, global, nonlocal


def _is_text(node: ast.expr) -> bool:
    return isinstance(node, ast.JoinedStr) or (
        isinstance(node, ast.Constant) and isinstance(node.value, str)
    )


# A %-format's conversion that runs str() or repr() of its value (not %d, %f, %x...).
_REPR_CONVERSION = re.compile(r"%(?:\([^)]*\))?[#0 +-]*(?:\*|\d+)?(?:\.(?:\*|\d+))?[hlL]?[sra]")


# A %-format's numeric conversions (%d, %.2f, %x...), each of which reads a tensor value.
_NUMERIC_CONVERSION = re.compile(
    r"%(?:\([^)]*\))?[#0 +-]*(?:\*|\d+)?(?:\.(?:\*|\d+))?[hlL]?[diouxXeEfFgGc]"
)


def _numeric_conversions(node: ast.BinOp) -> int:
    """How many values ``node`` may read as numbers: a literal format's numeric
    conversions (at least one: any other ``%`` is one point, as before)."""
    left = node.left
    if (
        isinstance(node.op, ast.Mod)
        and isinstance(left, ast.Constant)
        and isinstance(left.value, str)
    ):
        return max(1, len(_NUMERIC_CONVERSION.findall(left.value.replace("%%", ""))))
    return 1


def format_pieces(node: ast.expr) -> list[str] | None:
    """The literal pieces of a text format built by ``+`` and ``*`` from strings
    (``"%11s" * 2 + "%11.4g" * (2 + n)``); None where ``node`` is not such arithmetic (a
    literal alone, a number's)."""
    if not (isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Mult))):
        return None

    def pieces(part: ast.expr) -> list[str] | None:
        if isinstance(part, ast.Constant) and isinstance(part.value, str):
            return [part.value]
        if isinstance(part, ast.BinOp) and isinstance(part.op, ast.Add):
            left, right = pieces(part.left), pieces(part.right)
            return None if left is None or right is None else left + right
        if isinstance(part, ast.BinOp) and isinstance(part.op, ast.Mult):
            # ``"%11s" * 2``: the text either side, the count the other.
            return pieces(part.left) or pieces(part.right)
        return None

    return pieces(node)


def _may_run_repr(left: ast.expr, right: ast.expr) -> bool:
    """Whether ``left % right`` may run ``__repr__``: a literal format (or one built from
    literals) only with %s, %r or %a (``"run%d" % step`` does not); a name or a call may
    hold a format, but not when the right side is a number or the left is arithmetic
    (``step % 2``, ``(i + 1) % n``)."""
    built = format_pieces(left)
    if built is not None:
        return any(_REPR_CONVERSION.search(text.replace("%%", "")) for text in built)
    if isinstance(left, ast.Constant):
        if isinstance(left.value, (str, bytes)):
            text = left.value if isinstance(left.value, str) else left.value.decode("latin-1")
            return bool(_REPR_CONVERSION.search(text.replace("%%", "")))
        return False
    if isinstance(left, ast.JoinedStr):
        return True
    if isinstance(right, ast.Constant) and isinstance(right.value, (int, float)):
        return False
    return not isinstance(left, (ast.BinOp, ast.UnaryOp))


# Built-ins that, passed as a value (``map(str, rows)``, ``map("{}".format, rows)``), turn
# each element into text with no frame of their own; ``defaultdict(str)`` calls its
# argument with none.
_TEXT_FUNCTIONS = frozenset({"str", "repr", "ascii"})


def _may_run_repr_call(node: ast.Call) -> bool:
    """Whether a call may run ``__repr__`` right under the calling frame: ``str(x)`` (not of
    a literal), or a text function passed to another call."""
    func = node.func
    if isinstance(func, ast.Name) and func.id == "str":
        return not (node.args and _is_text(node.args[0]))
    if isinstance(func, ast.Name) and func.id == "defaultdict":
        return False
    passed = [*node.args, *(keyword.value for keyword in node.keywords)]
    return any(
        (isinstance(arg, ast.Name) and arg.id in _TEXT_FUNCTIONS)
        or (isinstance(arg, ast.Attribute) and arg.attr == "format")
        for arg in passed
    )


def _may_be_empty(spec: ast.expr | None) -> bool:
    """Whether an f-string field's format spec may be empty (``f"{x}"``, ``f"{x:}"``,
    ``f"{x:{width}}"``): only then does ``object.__format__`` accept it."""
    if spec is None:
        return True
    values = spec.values if isinstance(spec, ast.JoinedStr) else [spec]
    return not any(isinstance(v, ast.Constant) and v.value for v in values)


def _slice_bounds(index: ast.AST) -> int:
    """How many bounds of a subscript's slices may be tensors (not written as numbers)."""
    slices = index.elts if isinstance(index, ast.Tuple) else [index]
    return sum(
        1
        for part in slices
        if isinstance(part, ast.Slice)
        for bound in (part.lower, part.upper, part.step)
        if bound is not None and not _is_number(bound)
    )


def _is_number(node: ast.AST) -> bool:
    if isinstance(node, ast.UnaryOp):
        node = node.operand
    return isinstance(node, ast.Constant)


def _line_of(kind: str, node: ast.AST) -> int:
    if kind == "truth" or isinstance(node, ast.withitem):
        expr = node.context_expr if isinstance(node, ast.withitem) else node
        # ``if a and b:`` tests ``a`` where it stands (the BoolOp emits it) and the whole
        # test is ``b``'s truth: where ``b`` is, on a condition split over lines
        # (transformers' ``and (mask == 1).all()`` three lines below its ``if (``).
        while isinstance(expr, ast.BoolOp):
            expr = expr.values[-1]
        return expr.lineno  # type: ignore[attr-defined]
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        # A method call's line is its name's (Python 3.11 on: the line tracebacks and the
        # profiler record), not where a chain split over lines starts:
        # ``y.abs()`` / ``.sum()`` / ``.item()`` is at ``.item()``'s line.
        return node.func.end_lineno or node.lineno
    return node.lineno  # type: ignore[attr-defined]


def scope_body(scope: ast.AST) -> list[ast.stmt]:
    """A scope's statements; a lambda or comprehension as one expression statement."""
    if isinstance(scope, ast.Lambda):
        return [
            ast.Expr(value=scope.body, lineno=scope.body.lineno, col_offset=scope.body.col_offset)
        ]
    if isinstance(scope, _COMPREHENSIONS):
        return []
    return list(getattr(scope, "body", []))


def innermost_statement(scope: ast.AST, line: int) -> ast.stmt | None:
    """The deepest statement of ``scope`` (not of nested scopes) whose lines hold ``line``."""
    best: ast.stmt | None = None
    stack: list[ast.AST] = list(scope_body(scope))
    while stack:
        node = stack.pop()
        if isinstance(node, ast.stmt):
            end = getattr(node, "end_lineno", None) or node.lineno
            if node.lineno <= line <= end and (best is None or node.lineno >= best.lineno):
                best = node
            if isinstance(node, _NESTED_SCOPES):
                continue
            for name in ("body", "orelse", "finalbody", "handlers", "cases"):
                for child in getattr(node, name, []) or []:
                    if isinstance(child, ast.stmt):
                        stack.append(child)
                    else:  # except handlers, match cases
                        stack.extend(getattr(child, "body", []))
    return best


def _header_holds(stmt: ast.stmt, line: int) -> bool:
    """Whether ``line`` is in a compound statement's header (before its body)."""
    body = getattr(stmt, "body", None)
    if not body or not isinstance(body, list) or not isinstance(body[0], ast.stmt):
        return False
    return line < body[0].lineno


def build(
    scope: ast.AST, match: Matcher, *, start_line: int | None = None, prefix: bool = False
) -> Automaton:
    """The automaton of ``scope`` (a function, lambda, comprehension or module).

    ``start_line``: the frame was already running at that line when profiling started, so
    the sequence starts there (the rest of that statement, then what follows it).
    ``prefix``: the observed sequence may stop anywhere (the profile ended while the frame
    ran); otherwise it must reach the end of the scope.
    """
    b = _Builder(match)
    entry = b.a.new()
    if isinstance(scope, _COMPREHENSIONS):
        # A comprehension's own frame: everything after its first iterable, any times.
        last = b.comprehension(scope, entry, True)
    else:
        last = b.block(scope_body(scope), entry)
    b.link(last, b.end)
    automaton = b.a
    automaton.start = entry
    if b.yields and isinstance(scope, (ast.FunctionDef, ast.AsyncFunctionDef)):
        # Each resume of a generator or coroutine is recorded as a new call of it.
        start = automaton.new()
        automaton.eps[start] = [entry, *b.yields]
        automaton.start = start
        prefix = True
    if start_line is not None:
        automaton.start = _running_start(b, scope, start_line, entry)
    automaton.accepting = None if prefix else frozenset({b.end})
    return automaton


def _running_start(b: _Builder, scope: ast.AST, line: int, entry: int) -> int:
    """Where a frame that was running at ``line`` goes on from."""
    stmt = innermost_statement(scope, line)
    if stmt is None:
        return entry
    if _header_holds(stmt, line) and id(stmt) in b.resume:
        return b.resume[id(stmt)]
    # Inside a statement: any part of it may still be running or done, then what follows.
    start = b.a.new()
    s = start
    if not isinstance(
        stmt,
        (
            ast.If,
            ast.For,
            ast.AsyncFor,
            ast.While,
            ast.With,
            ast.AsyncWith,
            ast.Try,
            *_NESTED_SCOPES,
        ),
    ):
        saved = b.after.get(id(stmt))
        s = _optional_statement(b, stmt, s)
        after = saved if saved is not None else b.end
        if isinstance(stmt, (ast.Return, ast.Raise)):
            after = b.end
        b.link(s, after)
        return start
    after = b.after.get(id(stmt), b.end)
    b.link(start, after)
    return start


def _optional_statement(b: _Builder, stmt: ast.stmt, s: int) -> int:
    for node in ast.iter_child_nodes(stmt):
        if isinstance(node, ast.expr):
            s = b.expr(node, s, True)
    targets = getattr(stmt, "targets", None) or (
        [stmt.target] if isinstance(stmt, (ast.AugAssign, ast.AnnAssign)) else []
    )
    for target in targets:
        if isinstance(target, ast.Subscript):
            s = b.emit(s, "store", target, True)
    return s
