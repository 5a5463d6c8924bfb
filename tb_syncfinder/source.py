"""Find the user's source file for a stack frame and the exact line of the syncing call.

Modern stacks (``python_function`` events) record the line where the function is *defined*
(``co_firstlineno``). The calling line is recovered from the source: parse the file with
``ast``, find the function defined at that line, and inside it the call whose name matches
what the frame called (``item``, ``nonzero``, ``cpu``, a subscript for a boolean mask...).
When several calls match, the n-th sync of one invocation maps to the n-th matching call
only when the counts agree; otherwise the result says ``line_exact=False`` and points at
the def line. Nothing is guessed silently.

A frame that was already running when profiling started (a training loop's ``<module>``
or ``main``) records its *current* line instead, e.g. the ``prof.step()`` line. Only calls
that can still run after that line are candidates: the rest of the current statement,
everything after it, and, when it sits in a loop, the whole of the outermost enclosing loop
(the next iterations). One candidate line is exact. Several are exact only inside one loop
whose body runs them unconditionally in order, so that the n-th sync after the recorded line
is the n-th call in that cycle; anything else stays ``line_exact=False`` at the recorded line.

Legacy ``Call stack`` lines are call lines already (``line_exact=True``).
"""

from __future__ import annotations

import ast
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tb_syncfinder.catalogue import API_CALLEES, OP_CALLEES
from tb_syncfinder.models import Attribution, Frame, Source

# Directories never searched for sources when matching path suffixes.
_SKIP_DIRS = frozenset(
    {".git", ".hg", ".svn", "node_modules", "__pycache__", "site-packages", "dist-packages",
     ".venv", "venv", ".tox", ".mypy_cache", ".pytest_cache", "build", "dist"}
)
_MAX_INDEXED_FILES = 50_000
_MAX_SOURCE_BYTES = 5_000_000

def callee_groups(called: str | None, ops: Sequence[str], api: str | None = None) -> list[
        list[str]]:
    """Candidate callee names, most specific first: what the frame called (from the stack),
    then per operator, the outermost first (it is what Python called), then the others."""
    groups: list[list[str]] = []
    if called:
        groups.append([called])
        if called in ("__bool__", "bool"):
            groups.append(["__bool__", "bool"])
    ordered = list(ops[:1]) + list(reversed(ops[1:]))
    for op in ordered:
        groups.extend(OP_CALLEES.get(op, []))
    if not ops and api:
        groups.extend(API_CALLEES)
    unique: list[list[str]] = []
    for group in groups:
        if group not in unique:
            unique.append(group)
    return unique


def _call_name(node: ast.AST) -> str | None:
    if isinstance(node, ast.Call):
        func = node.func
        if isinstance(func, ast.Attribute):
            return func.attr
        if isinstance(func, ast.Name):
            return func.id
    return None


def _matches(node: ast.AST, names: set[str]) -> bool:
    name = _call_name(node)
    if name is not None and name in names:
        return True
    if isinstance(node, ast.Subscript):
        store = isinstance(node.ctx, ast.Store)
        return ("__setitem__" if store else "__getitem__") in names
    if "__bool__" in names and isinstance(node, (ast.If, ast.While, ast.Assert, ast.IfExp)):
        return True
    if "format" in names and isinstance(node, ast.FormattedValue):
        return True
    return False


def _walk_body(func: ast.AST) -> Iterable[ast.AST]:
    """Every node inside a function, not descending into nested defs, lambdas or classes."""
    stack = list(ast.iter_child_nodes(func))
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            continue
        yield node
        stack.extend(ast.iter_child_nodes(node))


def _node_line(node: ast.AST) -> int:
    # For an `if` the sync happens in its test expression.
    if isinstance(node, (ast.If, ast.While, ast.Assert)):
        return node.test.lineno
    return node.lineno  # type: ignore[attr-defined]


_LOOPS = (ast.For, ast.AsyncFor, ast.While)
# Statements that run every child statement exactly once, in order, when they run.
_STRAIGHT_STATEMENTS = (ast.Expr, ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Return,
                        ast.Delete, ast.With, ast.AsyncWith)
# Expressions that may skip or repeat their parts (comprehensions run in their own frame).
_BRANCHING_EXPRESSIONS = (ast.IfExp, ast.BoolOp, ast.ListComp, ast.SetComp, ast.DictComp,
                          ast.GeneratorExp, ast.Lambda, ast.comprehension)


def _parent_links(scope: ast.AST) -> dict[ast.AST, ast.AST]:
    parents: dict[ast.AST, ast.AST] = {}
    for node in [scope, *_walk_body(scope)]:
        for child in ast.iter_child_nodes(node):
            parents[child] = node
    return parents


def _ancestors(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> list[ast.AST]:
    chain = []
    while node in parents:
        node = parents[node]
        chain.append(node)
    return chain


def _innermost_statement(scope: ast.AST, line: int) -> ast.stmt | None:
    """The deepest statement of ``scope`` (not of nested defs) whose lines contain ``line``."""
    best: ast.stmt | None = None
    for node in _walk_body(scope):
        if isinstance(node, ast.stmt):
            end = getattr(node, "end_lineno", None) or node.lineno
            if node.lineno <= line <= end and (best is None or node.lineno >= best.lineno):
                best = node
    return best


def _has_loop_exit(loop: ast.AST) -> bool:
    """A ``break``/``continue`` of this loop (not of a nested one) in its body."""
    stack = list(getattr(loop, "body", []))
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.Break, ast.Continue)):
            return True
        if isinstance(node, (*_LOOPS, ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda,
                             ast.ClassDef)):
            continue
        stack.extend(ast.iter_child_nodes(node))
    return False


class _RunningFrame:
    """Calls of a frame that was running at ``line`` when profiling started."""

    def __init__(self, scope: ast.AST, line: int) -> None:
        self.scope = scope
        self.line = line
        self.parents = _parent_links(scope)
        self.current = _innermost_statement(scope, line)
        chain = [] if self.current is None else [self.current, *_ancestors(self.current,
                                                                             self.parents)]
        self.loops = [n for n in chain if isinstance(n, _LOOPS)]  # innermost first

    def reachable(self, names: set[str]) -> list[ast.AST]:
        """Matching calls that may still run after the recorded line, in source order."""
        if self.current is None:
            return []
        outermost = self.loops[-1] if self.loops else None
        found = []
        for node in _walk_body(self.scope):
            if not _matches(node, names):
                continue
            if _node_line(node) >= self.current.lineno or (
                    outermost is not None and outermost in _ancestors(node, self.parents)):
                found.append(node)
        return sorted(found, key=lambda n: (_node_line(n), getattr(n, "col_offset", 0)))

    def cycle(self, calls: list[ast.AST]) -> list[int] | None:
        """The lines of ``calls`` in the order they run after the recorded line, repeating
        once per loop iteration; None unless that order is certain: all of them in the body
        of the innermost loop around the line, each run exactly once per iteration (no branch,
        no nested loop, no break/continue), none in the recorded statement itself, and
        several calls in one statement only on one line (a statement's evaluation order is
        not its line order)."""
        if not self.loops or self.current is None:
            return None
        loop = self.loops[0]
        if _has_loop_exit(loop):
            return None
        current_nodes = set(ast.walk(self.current)) if self.current is not loop else set()
        lines_per_statement: dict[int, set[int]] = {}
        for call in calls:
            if call in current_nodes:
                return None
            chain = [call, *_ancestors(call, self.parents)]
            if loop not in chain:
                return None
            top = chain[chain.index(loop) - 1]
            if not any(top is stmt for stmt in loop.body):
                return None  # a for loop's iterable, a while test, an else branch
            for node in chain[1:chain.index(loop)]:
                if isinstance(node, ast.stmt) and not isinstance(node, _STRAIGHT_STATEMENTS):
                    return None
                if isinstance(node, _BRANCHING_EXPRESSIONS):
                    return None
            lines_per_statement.setdefault(id(top), set()).add(_node_line(call))
        if any(len(lines) > 1 for lines in lines_per_statement.values()):
            return None
        lines = [_node_line(call) for call in calls]
        start = self.line if self.current is loop else self.current.lineno
        return [n for n in lines if n > start] + [n for n in lines if n < start]


class _ParsedFile:
    def __init__(self, tree: ast.Module) -> None:
        self.tree = tree
        self.functions: dict[int, ast.AST] = {}
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                first = node.lineno
                decorators = getattr(node, "decorator_list", None)
                if decorators:
                    # co_firstlineno of a decorated function is its first decorator's line.
                    self.functions.setdefault(min(d.lineno for d in decorators), node)
                self.functions.setdefault(first, node)

    def calls_in(self, func: ast.AST, names: set[str]) -> list[int]:
        found = sorted(
            ((_node_line(n), getattr(n, "col_offset", 0)) for n in _walk_body(func)
             if _matches(n, names)),
        )
        return [line for line, _ in found]

    def running_scope(self, line: int, func_name: str) -> ast.AST:
        """The function (or, for ``<module>``, the module body) running at ``line``."""
        if func_name != "<module>":
            first = self.enclosing_function_line(line)
            if first is not None:
                return self.functions[first]
        return self.tree

    def enclosing_function_line(self, line: int) -> int | None:
        best: tuple[int, int] | None = None
        for first, node in self.functions.items():
            end = getattr(node, "end_lineno", None) or first
            if first <= line <= end and (best is None or first > best[0]):
                best = (first, end)
        return best[0] if best else None


@dataclass(frozen=True)
class SourcePack:
    """Python sources a package ships for the traces recorded from it (the demo's workloads).

    torch records an installed file relative to site-packages (``tb_syncfinder/demo/seg.py``),
    so such a trace's lines only resolve with ``directory`` as a source root and
    ``recorded_prefix`` mapped to it. Files directly under the prefix are the user's code
    (they stand in for a training script) except ``library_files``.
    """

    recorded_prefix: str  # how traces name its files, ending in "/"
    directory: str  # where they are on this machine
    # A tuple, not a set: options are hashed by their repr for cache keys, and a set's
    # order changes from one process to the next.
    library_files: tuple[str, ...] = ()


def parse_path_map(entries: Iterable[str | tuple[str, str]]) -> list[tuple[str, str]]:
    """``FROM=TO`` strings (or pairs) as (trace prefix, local prefix) pairs: the one rule the
    CLI, the engine and the plugin flags share. Raises ValueError naming a bad entry."""
    pairs = []
    for entry in entries:
        if isinstance(entry, str):
            source_prefix, sep, local_prefix = entry.partition("=")
        else:
            sep = "="
            source_prefix, local_prefix = (str(part) for part in entry)
        if not sep or not source_prefix or not local_prefix:
            raise ValueError(
                f"path map {entry!r}: expected FROM=TO "
                "(the path prefix in the trace = the local one, neither empty)"
            )
        pairs.append((source_prefix, local_prefix))
    return pairs


def with_source_packs(
    source_roots: Sequence[str], path_map: Sequence[tuple[str, str]],
    packs: Sequence[SourcePack] = (),
) -> tuple[list[str], list[tuple[str, str]]]:
    """The user's source roots and path map plus each pack's folder and prefix mapping, after
    them so that a user's own mapping of the same prefix wins."""
    roots = list(source_roots)
    pairs = list(path_map)
    for pack in packs:
        directory = os.path.realpath(pack.directory)
        if not os.path.isdir(directory):
            continue
        if directory not in roots:
            roots.append(directory)
        mapping = (pack.recorded_prefix, directory + os.sep)
        if mapping not in pairs:
            pairs.append(mapping)
    return roots, pairs


class SourceResolver:
    """Finds source files (``--source-root``, ``--path-map``) and exact call lines."""

    def __init__(
        self,
        roots: Sequence[str] | None = None,
        path_map: Sequence[tuple[str, str]] = (),
    ) -> None:
        self.roots = [_resolved(r) for r in (roots or [os.getcwd()])]
        self.path_map = [(str(a), str(b)) for a, b in path_map]
        self._found: dict[str, Path | None] = {}
        self._parsed: dict[Path, _ParsedFile | None] = {}
        self._index: dict[str, list[Path]] | None = None

    # -- files -------------------------------------------------------------------------
    def _suffix_index(self) -> dict[str, list[Path]]:
        if self._index is None:
            index: dict[str, list[Path]] = {}
            seen: set[Path] = set()  # nested roots (a checkout and its demo folder) walk twice
            count = 0
            for root in self.roots:
                for dirpath, dirnames, filenames in os.walk(root):
                    dirnames[:] = [d for d in dirnames
                                   if d not in _SKIP_DIRS and not d.startswith(".")]
                    for name in filenames:
                        path = Path(dirpath, name)
                        if name.endswith(".py") and path not in seen:
                            seen.add(path)
                            index.setdefault(name, []).append(path)
                            count += 1
                    if count > _MAX_INDEXED_FILES:
                        break
            self._index = index
        return self._index

    def find_file(self, trace_file: str) -> Path | None:
        """The readable local file for a path as the trace names it, or None."""
        if trace_file in self._found:
            return self._found[trace_file]
        found = self._find(trace_file)
        self._found[trace_file] = found
        return found

    def _find(self, trace_file: str) -> Path | None:
        if not trace_file or trace_file.startswith("<"):
            return None
        norm = trace_file.replace("\\", "/")
        for src, dst in self.path_map:
            src_norm = src.replace("\\", "/")
            if norm.startswith(src_norm):
                candidate = Path(dst + norm[len(src_norm):])
                if candidate.is_file():
                    return candidate
        candidate = Path(norm)
        if candidate.is_absolute() and candidate.is_file():
            return candidate
        if not candidate.is_absolute() and not norm.startswith(".."):
            for root in self.roots:
                joined = Path(root, norm)
                if joined.is_file():
                    return joined
        # Suffix match: the trace was recorded elsewhere; find the file under a root whose
        # path ends with the longest run of the same components. A tie is ambiguous: None.
        parts = [p for p in norm.split("/") if p and p not in (".", "..")]
        if not parts:
            return None
        candidates = self._suffix_index().get(parts[-1], [])
        best: list[Path] = []
        best_len = 0
        for path in candidates:
            cparts = path.parts
            n = 0
            while n < len(parts) and n < len(cparts) and parts[-1 - n] == cparts[-1 - n]:
                n += 1
            if n > best_len:
                best, best_len = [path], n
            elif n == best_len:
                best.append(path)
        # A broken symlink is listed as a file by os.walk: only a readable file counts.
        return best[0] if len(best) == 1 and best[0].is_file() else None

    def _parse(self, path: Path) -> _ParsedFile | None:
        if path not in self._parsed:
            parsed = None
            try:
                if path.stat().st_size <= _MAX_SOURCE_BYTES:
                    parsed = _ParsedFile(ast.parse(path.read_bytes(), filename=str(path)))
            except (OSError, SyntaxError, ValueError, RecursionError, MemoryError):
                # Unreadable, not Python, not UTF-8 (ValueError) or nested past the parser's
                # limits: the sync keeps its def line, marked inexact.
                parsed = None
            self._parsed[path] = parsed
        return self._parsed[path]

    # -- lines -------------------------------------------------------------------------
    def resolve(
        self,
        stack: Sequence[Frame],
        called_names: Sequence[str] | Sequence[Sequence[str]] | None = None,
        *,
        call_lines: bool = False,
        occurrence: tuple[int, int] | None = None,
    ) -> Source | None:
        """The source line for a stack (innermost first); None when no user frame.

        ``called_names``: names (or groups of names, most specific first) of what the
        innermost user frame called. ``call_lines``: the frame lines are call lines (legacy
        ``Call stack``). ``occurrence``: (index, count) of this sync among the syncs of the
        same invocation of that function calling the same thing.
        """
        frame = next((f for f in stack if f.user), None)
        if frame is None:
            return None
        groups = _as_groups(called_names)
        path = self.find_file(frame.file)
        parsed = self._parse(path) if path is not None else None
        resolved = str(path) if path is not None else None
        if call_lines:
            def_line = None
            if parsed is not None and frame.line is not None:
                def_line = parsed.enclosing_function_line(frame.line)
            return Source(frame.file, frame.line, def_line, frame.func, True, resolved)
        if parsed is None or frame.line is None:
            return Source(frame.file, frame.line, frame.line, frame.func, False, resolved)
        func = parsed.functions.get(frame.line)
        if func is None:
            # Not a def line: a frame already running when profiling started shows its
            # current line (see the module docstring).
            def_line = parsed.enclosing_function_line(frame.line)
            running = _RunningFrame(parsed.running_scope(frame.line, frame.func), frame.line)
            for group in groups:
                calls = running.reachable(set(group))
                if not calls:
                    continue
                distinct = sorted({_node_line(c) for c in calls})
                if len(distinct) == 1:
                    return Source(frame.file, distinct[0], def_line, frame.func, True, resolved)
                cycle = running.cycle(calls) if occurrence is not None else None
                if cycle:
                    return Source(frame.file, cycle[occurrence[0] % len(cycle)], def_line,
                                  frame.func, True, resolved)
                break  # several candidates and no proof which: do not guess
            return Source(frame.file, frame.line, def_line, frame.func, False, resolved)
        for group in groups:
            lines = parsed.calls_in(func, set(group))
            if not lines:
                continue
            distinct = sorted(set(lines))
            if len(distinct) == 1:
                return Source(frame.file, distinct[0], frame.line, frame.func, True, resolved)
            if occurrence is not None and occurrence[1] == len(lines):
                return Source(frame.file, lines[occurrence[0]], frame.line, frame.func, True,
                              resolved)
            break  # several candidates and no proof which: do not guess
        return Source(frame.file, frame.line, frame.line, frame.func, False, resolved)


def _resolved(root: str) -> str:
    """An absolute root; a symlink loop (RuntimeError before Python 3.13) stays as given,
    absolute: looking in it finds nothing, which is the truth."""
    try:
        return str(Path(root).resolve())
    except (OSError, RuntimeError):
        return os.path.abspath(root)


def _as_groups(called: Sequence[str] | Sequence[Sequence[str]] | None) -> list[list[str]]:
    if not called:
        return []
    if all(isinstance(c, str) for c in called):
        return [[str(c) for c in called]]
    return [[str(n) for n in group] for group in called]


def resolve_sources(resolver: SourceResolver, attributions: Sequence[Attribution]
                    ) -> list[Source | None]:
    """The source line of each attributed sync (None without a user frame); the n-th sync
    of one function invocation calling the same thing is matched to the n-th such call in
    the source (``SourceResolver.resolve``'s ``occurrence``)."""
    keyed: list[tuple[Any, list[list[str]]]] = []
    counts: dict[Any, int] = {}
    for attribution in attributions:
        groups = callee_groups(attribution.called, attribution.op_chain,
                               None if attribution.op_chain else attribution.api)
        invocation = attribution.invocation
        key = (invocation, tuple(tuple(g) for g in groups[:1])) if invocation else None
        keyed.append((key, groups))
        if key is not None:
            counts[key] = counts.get(key, 0) + 1
    seen: dict[Any, int] = {}
    sources: list[Source | None] = []
    for (key, groups), attribution in zip(keyed, attributions, strict=True):
        occurrence = None
        if key is not None:
            index = seen.get(key, 0)
            seen[key] = index + 1
            occurrence = (index, counts[key])
        source = None
        if attribution.stack:
            source = resolver.resolve(attribution.stack, groups,
                                      call_lines=attribution.call_lines, occurrence=occurrence)
        sources.append(source)
    return sources
