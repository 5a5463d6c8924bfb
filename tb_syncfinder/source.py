"""Find the user's source file for a stack frame and the exact line of the syncing call.

Modern stacks (``python_function`` events) record the line where the function is *defined*
(``co_firstlineno``). What the trace does give is what the frame called, in order: the
attribute stage hands over a ``CallQuery`` per call to find (the frame; the names of what it
called, or the class of syntax that ran the operator without a call frame: ``if t``,
``float(t)``, ``t[mask]``, ``t[m] = v``; and the sequence of such calls that invocation
made, with the profiler's ``step()`` calls). Here the function is parsed with ``ast`` and
``callorder`` models the order its calls can run in; the observed sequence is aligned with
that model. One line left for this call: ``line_exact=True``. Several: ``line_exact=False``
at the def line, with ``candidates``. A sequence the source cannot produce (another version
of the file, an alias) claims nothing beyond a single candidate. Nothing is guessed silently.

A frame that was already running when profiling started (a training loop's ``<module>``
or ``main``) records its *current* line instead: the ``with profile(`` line, or the
``prof.step()`` that started a schedule's recording. Its model starts there (the rest of
that statement, then what follows, loops repeating) and may stop anywhere (the profile ended
while it ran); the profiler's ``step()`` calls in the sequence anchor each iteration. A frame
the trace shows entered after the profiler started (``CallQuery.entered``) cannot be one:
its line is where its function started (a resumed generator's, the ``yield`` it resumed at),
so a line that starts no function of its name means the file changed since the recording.

A library frame (the user's call went into ``transformers``, a training framework) is
resolved the same way to give ``Source.library``; its file is also looked for in this
interpreter's site-packages, and used only when its def line names the same function.
A sync in a backward pass takes the forward operation's line (``Source.backward``) and
the line that ran the backward pass (``Source.run_by``).

Legacy ``Call stack`` lines are call lines already (``line_exact=True``).
"""

from __future__ import annotations

import ast
import builtins
import copy
import os
import re
import site
import stat
import sys
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import msgspec

from tb_syncfinder.callorder import (
    _NESTED_SCOPES,
    ANCHOR,
    Automaton,
    Matcher,
    N,
    P,
    align,
    build,
    format_pieces,
)
from tb_syncfinder.catalogue import (
    API_CALLEES,
    DEVICE_MOVES,
    EXPLICIT_SYNC_METHODS,
    GRAPH_BREAK,
    HOST_READ_BUILTINS,
    HOST_READ_METHODS,
    HOST_SHAPE_FACTORIES,
    HOST_TENSOR_FACTORIES,
    IN_GRAPH,
    LIBRARY_PACKAGES,
    OP_CALLEES,
    called_library,
    to_the_host,
)
from tb_syncfinder.models import (
    KERNEL_CELL,
    Attribution,
    CallQuery,
    CallSite,
    Frame,
    NotebookCell,
    Observed,
    Source,
    Stamp,
    UnrunSync,
)

# Directories never searched for sources when matching path suffixes.
_SKIP_DIRS = frozenset(
    {
        ".git",
        ".hg",
        ".svn",
        "node_modules",
        "__pycache__",
        "site-packages",
        "dist-packages",
        ".venv",
        "venv",
        ".tox",
        ".mypy_cache",
        ".pytest_cache",
        "build",
        "dist",
    }
)
_MAX_INDEXED_FILES = 50_000
# Directory entries the suffix search lists under the roots before it stops: the default
# root is the working directory, which may be a home folder or hold a dataset (a million
# images took 3 s per run, in every plugin worker).
_MAX_WALKED_ENTRIES = 200_000
_MAX_SOURCE_BYTES = 5_000_000


def callee_groups(
    called: str | None, ops: Sequence[str], api: str | None = None
) -> list[list[str]]:
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


# torch's namespaced functions run as built-ins named with their namespace:
# ``torch.fft.rfft2(x)`` shows as ``<built-in function fft_rfft2>``, ``torch.linalg.inv``
# as ``linalg_inv``, ``torch.special.erf`` as ``special_erf``.
_BUILTIN_NAMESPACES = frozenset({"fft", "linalg", "special", "nested"})
# What a name imported as one of those namespaces is bound to (``import torch.linalg as
# LA``, ``from torch import fft``); a function imported from one (``from torch.fft import
# rfft2``) is bound to its built-in's name, ``fft_rfft2``.
TORCH_NAMESPACE = "<torch namespace>"
# Under this name in ``Bindings.names``: every function name the file defines.
DEFINED = "<defined>"


def _import_bindings(node: ast.AST, alias: ast.alias) -> list[str]:
    """What an import binds its name to, besides an alias's plain name: a torch namespace
    (``TORCH_NAMESPACE`` + its name) or a function of one (its built-in's name); for
    ``from torch.fft import *``, the namespace, under the name ``*``."""
    if isinstance(node, ast.ImportFrom) and node.level == 0:
        module = node.module or ""
        space = module.removeprefix("torch.")
        if module.startswith("torch.") and space in _BUILTIN_NAMESPACES:
            if alias.name == "*":
                return [TORCH_NAMESPACE + space]
            return [f"{space}_{alias.name}"]
        if module == "torch" and alias.name in _BUILTIN_NAMESPACES:
            return [TORCH_NAMESPACE + alias.name]
    elif isinstance(node, ast.Import) and alias.asname:
        space = alias.name.removeprefix("torch.")
        if alias.name.startswith("torch.") and space in _BUILTIN_NAMESPACES:
            return [TORCH_NAMESPACE + space]
    return []


# An assignment whose value is a name or a name's namespace (``t = torch``, ``L2 = LA``,
# ``LA = th.linalg``): what it binds to depends on that name's own binding, known once the
# whole file is read (``Bindings`` resolves it: ``_followed``).
PATH_OF = "<path>"


def _namespace_value(value: ast.AST | None) -> str | None:
    """``TORCH_NAMESPACE`` + the namespace for ``torch.linalg`` (an assignment such as
    ``LA = torch.linalg``); ``PATH_OF`` + the dotted path for a name or another name's
    namespace; else None."""
    if isinstance(value, ast.Name):
        return PATH_OF + value.id
    if (
        isinstance(value, ast.Attribute)
        and value.attr in _BUILTIN_NAMESPACES
        and isinstance(value.value, ast.Name)
    ):
        if value.value.id == "torch":
            return TORCH_NAMESPACE + value.attr
        return f"{PATH_OF}{value.value.id}.{value.attr}"
    return None


def _followed(
    visible: dict[str, frozenset[str]], own: dict[str, set[str]]
) -> dict[str, frozenset[str]]:
    """One scope's names (``own``) with each ``PATH_OF`` binding replaced by what its path
    leads to among the names that scope sees (``visible``: its own over those of the
    scopes around it, already followed): torch (``"torch"``) or a torch namespace, through
    names bound to them (``import torch as th``; ``t = torch``; ``L2 = LA``); nothing for
    anything else (``LA = np.linalg``). An assignment is followed where it ran: a
    function's own ``t = a.sum()`` does not change what the module's ``LA = t.linalg``
    was."""

    def direct(name: str) -> set[str]:
        bound = visible.get(name)
        if not bound:  # ``import torch`` binds the name to nothing else
            return {"torch"} if name == "torch" else set()
        return {b for b in bound if b == "torch" or b.startswith(TORCH_NAMESPACE)}

    def split(path: str) -> tuple[str, str]:
        root, _, space = path.partition(".")
        return root, space

    # Every name the scope's paths reach, with its own paths, followed to a fixed point:
    # what a name leads to only grows, to at most torch and its few namespaces, so cycles
    # (``u = t``, ``t = u``) end without cutting any name's answer short.
    paths: dict[str, list[tuple[str, str]]] = {}
    todo = [
        split(b[len(PATH_OF) :])[0]
        for bound in own.values()
        for b in bound
        if b.startswith(PATH_OF)
    ]
    while todo:
        name = todo.pop()
        if name in paths:
            continue
        paths[name] = [
            split(b[len(PATH_OF) :]) for b in visible.get(name, ()) if b.startswith(PATH_OF)
        ]
        todo.extend(root for root, _space in paths[name])
    reach = {name: direct(name) for name in paths}

    def leads_to(root: str, space: str) -> set[str]:
        found = reach[root]
        if not space:
            return found
        return {TORCH_NAMESPACE + space} if "torch" in found else set()

    # A worklist over reversed paths: a name is looked at again only when a name it leads
    # through grew (sweeping every path until none changed was quadratic on a chain).
    users: dict[str, list[tuple[str, str]]] = {}
    for name, outs in paths.items():
        for root, space in outs:
            users.setdefault(root, []).append((name, space))
    grown = [name for name in paths if reach[name]]
    while grown:
        root = grown.pop()
        for name, space in users.get(root, ()):
            more = leads_to(root, space) - reach[name]
            if more:
                reach[name] |= more
                grown.append(name)

    return {
        name: frozenset(
            {b for b in bound if not b.startswith(PATH_OF)}
            | {
                found
                for b in bound
                if b.startswith(PATH_OF)
                for found in leads_to(*split(b[len(PATH_OF) :]))
            }
        )
        for name, bound in own.items()
    }


def _builtin_names(func: ast.AST, bindings: Bindings) -> set[str]:
    """The built-in name a call of ``func`` shows as in a trace besides its own, when it
    is a function of a torch namespace: ``fft_rfft2`` for ``torch.fft.rfft2`` (``torch``
    or a name ``import torch as`` bound), and for ``LA.inv`` where ``LA`` is bound to
    ``torch.linalg``. Never for another library's (``np.linalg.inv``); a function imported
    from a namespace matches through its binding (``Bindings.of_call``)."""
    if isinstance(func, ast.Name):  # a star import's: ``from torch.fft import *``
        # Unless the name is bound otherwise (imported, assigned, or a function of the
        # file's own, which Python would find before the star import's).
        if func.id in bindings.names or func.id in bindings.names.get(DEFINED, ()):
            return set()
        return {
            f"{bound[len(TORCH_NAMESPACE) :]}_{func.id}"
            for bound in bindings.names.get("*", ())
            if bound.startswith(TORCH_NAMESPACE)
        }
    if not isinstance(func, ast.Attribute):
        return set()
    space = func.value
    if isinstance(space, ast.Attribute) and space.attr in _BUILTIN_NAMESPACES:
        root = space.value
        if isinstance(root, ast.Name) and (
            root.id == "torch" or "torch" in bindings.names.get(root.id, ())
        ):
            return {f"{space.attr}_{func.attr}"}
    elif isinstance(space, ast.Name):
        for bound in bindings.names.get(space.id, ()):
            if bound.startswith(TORCH_NAMESPACE):
                return {f"{bound[len(TORCH_NAMESPACE) :]}_{func.attr}"}
    return set()


# What a frame called, by its name in the trace, when that is no call by name in the source:
# the evaluation points that run it (callorder's kinds).
_DUNDER_KINDS = {
    "__format__": "format",
    "__iter__": "iter",
    "__next__": "next",
    "__enter__": "enter",
    "__exit__": "exit",
    "__getitem__": "load",
    "__setitem__": "store",
    "__bool__": "truth",
    "__contains__": "contains",
    # ``str(t)``, ``"%s" % t``, ``f"{t!r}"`` run ``Tensor.__repr__`` with no frame between
    # (``repr(t)`` and ``print(t)`` show as built-in calls).
    "__repr__": "repr",
    "__str__": "repr",
    "format": "format",
}
# The special methods that turn a tensor into text.
_TEXT_DUNDERS = frozenset({"__repr__", "__str__"})
# Names in ``OP_CALLEES`` that stand for an evaluation point without a call (a truth test,
# a subscript, a format): guessed from an operator, never what a called Python frame of
# another name was (``Normal(..., validate_args=not fixed)`` syncs in ``__init__``).
EVALUATION_POINTS = frozenset({"__bool__", "__getitem__", "__setitem__", "__format__", "format"})
# Operators run without a call frame (attribute's classes): ``if t`` / ``bool(t)`` run
# is_nonzero; ``float(t)``, ``int(t)``, and ``__index__`` (``lst[t]``, ``x[:t]``,
# ``range(t)``, ``"%d" % t``) run item; ``t[mask]`` runs index; ``t[m] = v`` index_put_ or
# copy_. Any of these points may also run nothing (a Python number, a list index).
_FRAMELESS = ("<truth>", "<scalar>", "<load>", "<store>")
_SCALAR_TYPES = frozenset({"float", "int", "complex", "range"})


# Calls whose result is a Python bool, whatever they are given.
_BOOL_CALLS = frozenset({"isinstance", "issubclass", "hasattr", "callable"})


def _tests_no_tensor(test: ast.AST) -> bool:
    """Whether a truth test's value is a Python bool however it runs: ``x is None``,
    ``mode == "train"`` (a tensor compared with a string is not equal, without a read),
    ``isinstance(x, T)``, a constant, ``not``/``and``/``or`` of such tests. A TRL walk:
    ``if mode == "train":`` beside its ``.item()`` reads made their lines inexact."""
    if isinstance(test, ast.Constant):
        return True
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return _tests_no_tensor(test.operand)
    if isinstance(test, ast.BoolOp):
        return all(_tests_no_tensor(value) for value in test.values)
    if isinstance(test, ast.Call):
        return isinstance(test.func, ast.Name) and test.func.id in _BOOL_CALLS
    if isinstance(test, ast.Compare):
        if all(isinstance(op, (ast.Is, ast.IsNot)) for op in test.ops):
            return True
        return all(isinstance(op, (ast.Eq, ast.NotEq)) for op in test.ops) and any(
            isinstance(part, ast.Constant) and isinstance(part.value, str)
            for part in (test.left, *test.comparators)
        )
    return False


def _frameless_labels(
    kind: str,
    node: ast.AST,
    counters: frozenset[str] = frozenset(),
    lookups: frozenset[int] = frozenset(),
) -> tuple[str, ...]:
    if kind == "truth":
        flag = isinstance(node, ast.Name) and node.id in counters
        return () if flag or _tests_no_tensor(node) else ("<truth>",)
    if kind == "call":
        func = node.func  # type: ignore[attr-defined]
        if isinstance(func, ast.Name):
            if func.id == "bool":
                return ("<truth>",)
            if func.id in _SCALAR_TYPES:
                # ``range(2)``, ``float("nan")``: a literal is no tensor to read.
                literals = all(
                    isinstance(arg, ast.Constant)
                    or (isinstance(arg, ast.UnaryOp) and isinstance(arg.operand, ast.Constant))
                    for arg in node.args  # type: ignore[attr-defined]
                )
                return () if literals and not node.keywords else ("<scalar>",)  # type: ignore[attr-defined]
        if isinstance(func, ast.Attribute) and func.attr == "Size":
            # ``torch.Size(shape)`` reads each of its elements as an index (kornia's
            # ``torch.Size(new_batch_shape)`` of a list holding a tensor's elements).
            return ("<scalar>",)
        return ()
    if kind == "bound":
        return ("<scalar>",)  # a slice's further bound read through ``__index__``
    if kind in ("load", "store"):
        index = node.slice  # type: ignore[attr-defined]
        if (isinstance(index, ast.Name) and index.id in counters) or id(node) in lookups:
            # A loop's int counter (``_loop_counters``), or a lookup whose result is then
            # looked up by a string (``_dict_lookups``): no tensor is indexed.
            return ()
        labels = ["<load>" if kind == "load" else "<store>"]
        if kind == "load" and not _may_index_with_tensor(index):
            labels = []
        if _may_index_with_tensor(index, slices=True):
            labels.append("<scalar>")
        return tuple(labels)
    if kind == "binop":
        left = node.left  # type: ignore[attr-defined]
        if isinstance(node.op, ast.Mod) and (  # type: ignore[attr-defined]
            (isinstance(left, ast.Constant) and isinstance(left.value, str))
            or format_pieces(left) is not None
        ):
            return ("<scalar>",)
    return ()


_PROFILE_CLASSES = frozenset({"profile", "_KinetoProfile"})


# What a profiler made out of sight is called (``prof``, ``profiler``, ``torch_profiler``,
# ``self.prof``): never an optimizer or a scheduler.
_PROFILER_NAME = re.compile(r"(?:^|_)prof(?:iler)?(?:_|$)")


def _receiver_name(call: ast.Call) -> str | None:
    """The name a method is called on: ``prof`` of ``prof.step()`` and of
    ``self.prof.step()``; None for another receiver (``make()[0].step()``)."""
    func = call.func
    if not isinstance(func, ast.Attribute):
        return None
    receiver = func.value
    if isinstance(receiver, ast.Name):
        return receiver.id
    if isinstance(receiver, ast.Attribute):
        return receiver.attr
    return None


def _may_index_with_tensor(node: ast.AST, slices: bool = False) -> bool:
    """Whether a subscript's index can be a tensor or a list (aten::index, a sync for a
    mask): not for constants, slices and tuples of those. With ``slices``, also whether a
    slice bound can be a tensor (``x[:n]`` reads n back through ``__index__``)."""
    if isinstance(node, ast.Constant):
        return False
    if isinstance(node, ast.UnaryOp) and isinstance(node.operand, ast.Constant):
        return False
    if isinstance(node, ast.Slice):
        return slices and any(
            bound is not None and _may_index_with_tensor(bound)
            for bound in (node.lower, node.upper, node.step)
        )
    if isinstance(node, ast.Tuple):
        return any(_may_index_with_tensor(elt, slices) for elt in node.elts)
    return True


class Bindings(NamedTuple):
    """What the callee of a call may be bound to, by the name it is called with: another
    function's name (an alias: ``clip = nn.utils.clip_grad_norm_``) or ``INSTANCE_OF`` and
    a class (``encoder = nn.TransformerEncoder(...)``), for calls of an nn.Module, which the
    trace names by its class. ``names``: plain names as the calling function sees them (its
    own, its enclosers', the module's; a name it rebinds to anything else is bound to
    nothing); ``attributes``: attributes assigned anywhere in the file (``self.encoder =
    ...`` in ``__init__``, called as ``self.encoder(x)``)."""

    names: dict[str, frozenset[str]]
    attributes: dict[str, frozenset[str]]
    # The names of the file's own functions and methods.
    defined: frozenset[str] = frozenset()
    # Names and attributes the file binds other than by assigning them (a parameter, a
    # ``for`` or ``with`` target, ``+=``, ``global``): what their assignments say is not all
    # they may hold.
    loose: frozenset[str] = frozenset()

    def _receiver(self, func: ast.AST) -> frozenset[str]:
        """What a method call's receiver (``stats`` of ``stats.update(...)``, or
        ``self.stats``) is bound to by its assignments; empty where that is not all it may
        hold (a parameter, a loop's target) or it is no name or attribute."""
        if not isinstance(func, ast.Attribute):
            return frozenset()
        receiver = func.value
        if isinstance(receiver, ast.Name):
            name, bound = receiver.id, self.names.get(receiver.id)
        elif isinstance(receiver, ast.Attribute):
            name, bound = receiver.attr, self.attributes.get(receiver.attr)
        else:
            return frozenset()
        return frozenset() if bound is None or name in self.loose else bound

    def holds_builtin(self, func: ast.AST) -> bool:
        """Whether a method call's receiver only ever holds a built-in container, whose
        methods run no Python frame: its call is not a Python function of the same name the
        trace shows."""
        return self._receiver(func) == {BUILTIN_VALUE}

    def receiver_classes(self, func: ast.AST) -> frozenset[str] | None:
        """The classes a method call's receiver is an instance of, where every assignment
        of it constructs one (``metric = MeanMetric()``); None where anything else may be
        bound to it."""
        bound = self._receiver(func)
        if not bound:
            return None
        classes = set()
        for held in bound:
            if not held.startswith(INSTANCE_OF) or held == SOME_INSTANCE:
                return None
            classes.add(held[len(INSTANCE_OF) :])
        return frozenset(classes)

    def only_loose(self, bound: frozenset[str]) -> bool:
        """Whether ``bound`` holds only names the file binds otherwise than by assigning
        them (a parameter, a loop's target) and defines no function of: what they hold
        is not known."""
        return bool(bound) and all(b in self.loose and b not in self.defined for b in bound)

    def of_call(self, node: ast.AST) -> frozenset[str]:
        """What the callee of ``node`` (a call) may be bound to."""
        func = getattr(node, "func", None)
        if isinstance(func, ast.Name):
            return self.names.get(func.id, frozenset())
        if isinstance(func, ast.Attribute):
            return self.attributes.get(func.attr, frozenset())
        return frozenset()


INSTANCE_OF = "<instance>"
# A model a factory built, of a class the source does not name: Hugging Face's
# ``AutoModelForCausalLM.from_pretrained(...)`` gives a ``GPT2LMHeadModel``. A call of it
# may be any module's; only calls that align with the trace's are claimed.
SOME_INSTANCE = "<instance>*"
_FACTORIES = frozenset({"from_pretrained", "from_config"})


def _constructed_class(value: ast.AST) -> str | None:
    """``Cls`` for ``Cls(...)``, ``mod.Cls(...)`` and method chains on one
    (``nn.GRU(...).to(device).eval()``): a call of a capitalised name."""
    while isinstance(value, ast.Call):
        name = _call_name(value)
        if name and name[:1].isupper():
            return name
        func = value.func
        value = func.value if isinstance(func, ast.Attribute) else None
    return None


def _bound_to(value: ast.AST | None) -> str | None:
    """What an assignment's value binds its target to, for ``Bindings`` (None: nothing
    known, which still shadows a binding of the same name further out)."""
    if isinstance(value, ast.Name):
        return value.id
    if isinstance(value, ast.Attribute):
        return value.attr
    if isinstance(value, (ast.Dict, ast.List, ast.Set, ast.DictComp, ast.ListComp, ast.SetComp)):
        return BUILTIN_VALUE
    if isinstance(value, ast.Call) and _call_name(value) in _BUILTIN_CONTAINERS:
        func = value.func
        if isinstance(func, ast.Name) or (
            isinstance(func, ast.Attribute) and getattr(func.value, "id", None) == "collections"
        ):
            return BUILTIN_VALUE
    cls = _constructed_class(value) if value is not None else None
    if cls is None and _call_name(value) in _FACTORIES:
        return SOME_INSTANCE
    return INSTANCE_OF + cls if cls else None


# Calls that return a callable running the function given first, under its own name:
# ``step_fn = torch.compile(compute_loss)`` runs ``compute_loss``'s frame (dynamo's resume
# frames carry its name too), as ``functools.partial(f, ...)`` does.
_RUNS_THE_FUNCTION_GIVEN = frozenset({"compile", "partial"})


def _values_bound(value: ast.AST | None, functions: frozenset[str]) -> list[str]:
    """What an assignment's value may bind its target to: ``_bound_to``'s, both branches
    of a conditional (``torch.compile(f) if compile else f``), and a function of the file
    (``functions``) wrapped by a call that runs it under its own name."""
    if isinstance(value, ast.IfExp):
        return [*_values_bound(value.body, functions), *_values_bound(value.orelse, functions)]
    if (
        isinstance(value, ast.Call)
        and _call_name(value) in _RUNS_THE_FUNCTION_GIVEN
        and value.args
        and isinstance(value.args[0], ast.Name)
        and value.args[0].id in functions
    ):
        return [value.args[0].id]
    bound = _bound_to(value)
    return [bound] if bound is not None else []


def _names_bound_by(target: ast.AST) -> Iterator[str]:
    """The names and attributes a binding target binds (``a, self.b`` binds a and b; an
    item, ``d[k]``, binds neither)."""
    if isinstance(target, ast.Name):
        yield target.id
    elif isinstance(target, ast.Attribute):
        yield target.attr
    elif isinstance(target, (ast.Tuple, ast.List)):
        for element in target.elts:
            yield from _names_bound_by(element)
    elif isinstance(target, ast.Starred):
        yield from _names_bound_by(target.value)


def _targets(node: ast.AST) -> list[ast.AST]:
    if isinstance(node, ast.Assign):
        return node.targets
    return [node.target]  # type: ignore[attr-defined]  # AnnAssign, NamedExpr


def _start(node: ast.AST) -> tuple[int, int]:
    return (node.lineno, node.col_offset)  # type: ignore[attr-defined]


def _end(node: ast.AST) -> tuple[int, int]:
    return (
        node.end_lineno or node.lineno,  # type: ignore[attr-defined]
        node.end_col_offset if node.end_col_offset is not None else 1 << 30,  # type: ignore[attr-defined]
    )


class _BindingIndex:
    """Every assignment's binding: plain names by the function that binds them (None: the
    module), attributes for the whole file. Built from the assignments and functions the
    file's one walk found, by their source positions, in one sweep (a visitor over the
    tree took 9 ms on a 400-line script)."""

    def __init__(
        self,
        assignments: list[ast.AST],
        functions: list[ast.AST],
        classes: Sequence[ast.ClassDef] = (),
        loose: frozenset[str] = frozenset(),
    ) -> None:
        self.loose = loose
        self.functions = sorted(functions, key=_start)
        self.names: dict[int | None, dict[str, set[str]]] = {}
        self.attributes: dict[str, set[str]] = {}
        # The same, by the class whose body (its methods) assigns them; None: outside any.
        self.classes = list(classes)
        self.class_attributes: dict[int | None, dict[str, set[str]]] = {}
        self._class_bindings: dict[int, dict[str, frozenset[str]]] = {}
        # Per owner, its names with their paths followed (``_followed``), once.
        self._followed: dict[int | None, dict[str, frozenset[str]]] = {}
        function_names = frozenset(getattr(f, "name", "") for f in self.functions)
        open_functions: list[ast.AST] = []  # enclosing the sweep's position, outermost first
        following = iter(self.functions)
        upcoming = next(following, None)
        for node in sorted(assignments, key=_start):
            at = _start(node)
            while upcoming is not None and _start(upcoming) <= at:
                while open_functions and _end(open_functions[-1]) < _start(upcoming):
                    open_functions.pop()
                open_functions.append(upcoming)
                upcoming = next(following, None)
            while open_functions and _end(open_functions[-1]) < at:
                open_functions.pop()
            owner = id(open_functions[-1]) if open_functions else None
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                # ``from torch.distributions import Normal as Gauss``: Gauss(...) is Normal.
                for alias in node.names:
                    # Every imported name is bound (to nothing known, unless it is an
                    # alias or torch's): ``from numpy import linalg`` in a function hides
                    # the module's ``from torch import linalg`` there.
                    bound_name = alias.asname or alias.name.partition(".")[0]
                    names = self.names.setdefault(owner, {}).setdefault(bound_name, set())
                    if alias.asname:
                        names.add(alias.name.rpartition(".")[2])
                    names.update(_import_bindings(node, alias))
                continue
            bound = _values_bound(node.value, function_names)  # type: ignore[attr-defined]
            namespace = _namespace_value(node.value)  # type: ignore[attr-defined]
            for target in _targets(node):
                if isinstance(target, ast.Name):
                    names = self.names.setdefault(owner, {}).setdefault(target.id, set())
                    names.update(bound)
                    if namespace is not None:
                        names.add(namespace)
                elif isinstance(target, ast.Attribute) and bound:
                    self.attributes.setdefault(target.attr, set()).update(bound)
                    owner_class = self._class_at(node)
                    by_class = self.class_attributes.setdefault(
                        id(owner_class) if owner_class is not None else None, {}
                    )
                    by_class.setdefault(target.attr, set()).update(bound)

    def bindings(self, scope: ast.AST) -> Bindings:
        owners: list[int | None] = [None]
        if hasattr(scope, "lineno"):
            first, last = _start(scope), _end(scope)
            owners += [id(f) for f in self.functions if _start(f) <= first and last <= _end(f)]
        names: dict[str, frozenset[str]] = {}
        # Outermost first: the innermost binding of a name wins, as Python looks it up.
        for owner in owners:
            followed = self._followed.get(owner)
            if followed is None:  # what encloses an owner, hence ``names`` here, never varies
                own = self.names.get(owner, {})
                visible = {**names, **{name: frozenset(bound) for name, bound in own.items()}}
                followed = self._followed[owner] = _followed(visible, own)
            names.update(followed)
        attributes = self._attributes_for(scope)
        if "*" in names:  # a star import: which bare names the file's own functions hold
            names[DEFINED] = frozenset(getattr(f, "name", "") for f in self.functions)
        defined = frozenset(getattr(f, "name", "") for f in self.functions)
        return Bindings(names, attributes, defined, self.loose)

    def _class_at(self, node: ast.AST) -> ast.ClassDef | None:
        """The innermost class of the file whose body holds ``node``."""
        at, end = _start(node), _end(node)
        holding = [c for c in self.classes if _start(c) <= at and end <= _end(c)]
        return max(holding, key=_start) if holding else None

    def _attributes_for(self, scope: ast.AST) -> dict[str, frozenset[str]]:
        """Attribute bindings as a call in ``scope`` sees them: in a class's method, those
        its class and its bases in the file (and code outside any class) assign; another
        class's ``self.encoder = nn.Embedding(...)`` is not this one's (word_language_model's
        ``TransformerModel`` gets its ``self.encoder`` from nn.Transformer). Elsewhere,
        every attribute assigned in the file."""
        cls = self._class_at(scope) if hasattr(scope, "lineno") else None
        if cls is None:
            return {name: frozenset(bound) for name, bound in self.attributes.items()}
        found = self._class_bindings.get(id(cls))
        if found is None:
            by_name = {c.name: c for c in self.classes}
            chain, pending = [], [cls]
            while pending:
                current = pending.pop()
                if current in chain:
                    continue
                chain.append(current)
                for base in current.bases:
                    named = _base_name(base)
                    if named in by_name:
                        pending.append(by_name[named])
            merged: dict[str, set[str]] = {}
            for owner in [None, *(id(c) for c in chain)]:
                for name, bound in self.class_attributes.get(owner, {}).items():
                    merged.setdefault(name, set()).update(bound)
            found = self._class_bindings[id(cls)] = {
                name: frozenset(bound) for name, bound in merged.items()
            }
        return found


# A group for a call of an nn.Module: the class the trace's ``nn.Module: Cls_0`` entry
# names, after this prefix (attribute makes it; the source matches instances of it).
MODULE_CALL = "<module>"
# A group for a class called (its frame is ``__init__``): ``init_call(frame)`` of that
# ``__init__``, whose class the source resolver reads there.
INIT_CALL = "<init>"
# Stands for a class whose name could not be read: any capitalised call may be it.
SOME_CLASS = "<class>"
# A group for an object called (its frame is its class's ``__call__``, not an nn.Module's):
# ``instance_call(frame)`` of that ``__call__``, whose class the resolver reads there.
CALL_CALL = "<call>"
# With such a group: an instance of another class may be one of a subclass that inherits
# that ``__call__`` (MONAI's ``DiceMetric``, whose ``__call__`` is its base class's in
# another file); claimed only where the alignment leaves it alone.
ANY_INSTANCE = "<instance>?"


# Beside a group's name: where the Python function of that name the trace shows is
# (``method_at(frame)``), for the resolver to read the class it is a method of, if any, as
# ``METHOD_OF`` and that class's name (and of the calling file's subclasses of it): a
# call of that name on an instance of another class (a ``MeanMetric``'s ``update`` beside
# a ``MetricCollection``'s) may run another function of that name.
METHOD_AT = "<method-at>"
METHOD_OF = "<method-of>"
# With those: a call on an instance of none of those classes is not the method (tried
# first; see ``SourceResolver._resolve_call``).
STRICT_CLASSES = "<strict>"
# What a name or attribute is bound to when assigned a built-in container (``stats = {}``,
# ``history = []``, ``dict(...)``): its methods run no Python frame of their name.
BUILTIN_VALUE = "<builtin>"
_BUILTIN_CONTAINERS = frozenset(
    {"dict", "list", "set", "frozenset", "tuple", "defaultdict", "OrderedDict", "Counter", "deque"}
)


def method_at(frame: Frame) -> str:
    """The group entry saying where the function of ``frame`` is, written as
    ``init_call``'s."""
    return f"{METHOD_AT}{'U' if frame.user else 'L'}{frame.file}:{frame.line}"


def init_call(frame: Frame) -> str:
    """The group name of a call of the class whose ``__init__`` frame is ``frame``: where
    that ``__init__`` is (``U`` a user file, ``L`` a library's, then ``FILE:LINE``)."""
    return f"{INIT_CALL}{'U' if frame.user else 'L'}{frame.file}:{frame.line}"


def instance_call(frame: Frame) -> str:
    """The group name of a call of an instance of the class whose ``__call__`` frame is
    ``frame`` (diffusers' ``pipe(...)``), written as ``init_call``'s."""
    return f"{CALL_CALL}{'U' if frame.user else 'L'}{frame.file}:{frame.line}"


# Library base classes any class may derive from, out of sight of the file: a call of one of
# their methods on an instance of any other class may run it (CycleGAN's ``net.cpu()`` of a
# ``torch.nn.Sequential``, beside ``net.module.cpu()``).
_OPEN_BASE_CLASSES = frozenset({"Module"})


def _matcher(
    group: tuple[str, ...],
    optional_calls: bool,
    profiler_names: frozenset[str],
    bindings: Bindings,
    step_calls: tuple[str, ...] = (),
    steps_in_next: bool = False,
    start_line: int | None = None,
    anchors: frozenset[str] = frozenset(),
    counters: frozenset[str] = frozenset(),
    lookups: frozenset[int] = frozenset(),
) -> Matcher:
    """What in the source emits the group's calls and the profiler's step (``P``). A group
    of names emits ``N``; a frameless class emits every frameless class, each its own label
    (the observed sequence holds them all, so that each orders the others). ``step_calls``:
    the names of functions whose frames ran the profiler's step below them (``Observed.
    step_calls``), each call of which the trace shows as a ``P``: a call of such a name
    may emit it (may: the name may be another object's). ``steps_in_next``: one of them is
    an iterator's (a generator resumed by a ``for`` loop, or a ``__next__``), so a ``for``
    loop's ``__next__`` may emit ``P``, and must at the loop whose header a running frame
    was at (``start_line``) when profiling started: that ``__next__`` ran the iterator,
    which stepped the profiler into recording, and each of its calls shows. ``anchors``:
    names of other calls the trace shows the frame making (``Observed.calls``): a call of
    one may emit ``ANCHOR + name`` (may: it may run no Python frame, or be another's).
    ``counters``: names only ever bound as a loop's int counter (``_loop_counters``): an
    index by one reads no tensor; ``lookups``: the ids of subscripts whose result is looked
    up by a string (``_dict_lookups``), no tensor's."""
    wrapped = frozenset(step_calls)
    frameless = bool(group) and group[0] in _FRAMELESS
    kinds: set[str] = set()  # evaluation point kinds that emit N
    typed_calls: set[str] = set()  # bare calls of types (no frame) that may emit N
    calls = set() if frameless else set(group)
    method_of = {n[len(METHOD_OF) :] for n in calls if n.startswith(METHOD_OF)}
    calls.difference_update(METHOD_OF + n for n in method_of)
    # A method of a base class every model derives from, in libraries too (``Module.cpu``):
    # an instance of a class the file does not define (``nn.Sequential``) may be one.
    strict_classes = STRICT_CLASSES in calls and method_of.isdisjoint(_OPEN_BASE_CLASSES)
    calls.discard(STRICT_CLASSES)
    modules = {INSTANCE_OF + n[len(MODULE_CALL) :] for n in calls if n.startswith(MODULE_CALL)}
    some_class = SOME_CLASS in calls
    any_instance = ANY_INSTANCE in calls

    def maybe_the_object(name: str | None, bound: frozenset[str]) -> str | tuple[str, ...]:
        """A call that may be the group's object (an nn.Module's, an instance's) or not:
        then it shows as the function of its name (``sliding_window_inference(...)``) or,
        an instance of another class, as its own ``__call__`` (MONAI's ``post(...)``, an
        ``AsDiscrete``, beside ``dice_metric(...)``) among the frame's other calls. The
        alignment tells which."""
        labels = [N]
        if any_instance and "__call__" in anchors:
            labels.append(ANCHOR + "__call__")
        labels.extend(ANCHOR + n for n in sorted(anchors.intersection((name or "", *bound))))
        return labels[0] if len(labels) == 1 else tuple(labels)

    for name in calls:
        if name in _DUNDER_KINDS:
            kinds.add(_DUNDER_KINDS[name])
    if "__iter__" in calls:
        # An ``__iter__`` written as a generator (TorchRL's collectors) runs its frame on
        # each ``next`` of the loop over it, not where ``iter`` makes it.
        kinds.add("next")
    if "__bool__" in calls:
        typed_calls.add("bool")

    def match(kind: str, node: ast.AST) -> tuple[str | tuple[str, ...] | None, bool]:
        if frameless:
            labels = _frameless_labels(kind, node, counters, lookups)
            if labels:
                return labels, True
        if kind == "call":
            func = node.func  # type: ignore[attr-defined]
            name = _call_name(node)
            if isinstance(func, ast.Name) and name in typed_calls:
                return N, True
            # ``prof.step()`` is the profiler's even when the sync is in another ``step``
            # (``scaler.step(optimizer)``, ``optimizer.step()``): the trace observes it so.
            if name == "step" and _receiver_name(node) in profiler_names:
                return P, False
            if name in calls and bindings.holds_builtin(func):
                # ``stats.update(...)`` of a dict: a built-in call, never the Python function
                # of that name below which the read ran. The trace shows it as a call of
                # that name only where it records built-in calls and the read's function
                # was called directly (not through a wrapper: torchmetrics' ``update`` runs
                # as ``wrapped_func``): it may show, or not.
                return N, True
            bound = bindings.of_call(node)
            namespaced = _builtin_names(func, bindings)
            if name in calls and method_of:
                held = bindings.receiver_classes(func)
                if held is not None and held.isdisjoint(method_of):
                    # An instance of another class: its method of that name may be the one
                    # the trace shows (inherited from that class in a library) or another
                    # (a ``MeanMetric``'s ``update`` beside a ``MetricCollection``'s);
                    # ``STRICT_CLASSES``: taken for another.
                    return (None, False) if strict_classes else (N, True)
            if name in calls or not calls.isdisjoint(bound) or not calls.isdisjoint(namespaced):
                return N, optional_calls
            if modules and (not modules.isdisjoint(bound) or SOME_INSTANCE in bound):
                return N, optional_calls
            if any_instance and any(b.startswith(INSTANCE_OF) for b in bound):
                return maybe_the_object(name, bound), True
            if (
                modules
                and (not bound or bindings.only_loose(bound))
                and (_on_self(func) or (isinstance(func, ast.Name) and name not in _BUILTINS))
                and name not in bindings.defined
            ):
                # An attribute the file never binds nor defines: one a library base class
                # set (``self.encoder`` of a subclass of nn.Transformer); or a name bound
                # to what the source does not tell (a parameter: torchvision's detection
                # ``train_one_epoch(model, ...)``; a factory's result, ``model =
                # get_model(...)``); or an attribute set from one (DETR's ``self.matcher =
                # matcher`` in ``__init__``). It may be the module; claimed only where the
                # alignment leaves it alone.
                return maybe_the_object(name, bound), True
            if some_class and name and name[:1].isupper():
                return N, True  # a class called, or a class without a Python __init__
            if name == "step" and not profiler_names:
                return P, True  # which .step() is the profiler's is not known
            if name in wrapped:
                return P, True
            if anchors:
                # By the name it is called by, or one bound to it (``log = helper``).
                named = anchors.intersection((name, *bound))
                if named:
                    return tuple(ANCHOR + n for n in sorted(named)), True
            return None, False
        if kind == "next" and steps_in_next:
            return P, getattr(node, "lineno", None) != start_line
        if kind == "comprehension":
            # Its frame's name (``<listcomp>``), called by syntax where it stands.
            name = _SCOPE_NAMES.get(type(node), "")
            if name in calls:
                return N, optional_calls
            if name in anchors:
                return ANCHOR + name, True
            return None, False
        if kind not in kinds:
            return None, False
        # (A loop counter's index is kept here: ``dataset[i]`` runs ``__getitem__``.)
        if kind == "load" and not _may_index_with_tensor(node.slice):  # type: ignore[attr-defined]
            return None, False
        if kind in ("iter", "next") and _over_a_range(node):
            return None, False  # a ``range``'s iterator runs no Python frame
        if (
            kind in ("format", "repr")
            and isinstance(getattr(node, "value", None), ast.Name)
            and node.value.id in counters  # type: ignore[attr-defined]
        ):
            # A loop's int counter formatted (``f"step{step}.ckpt"``) runs no tensor's
            # ``__format__``: a Fabric walk's guarded print lost its line to one.
            return None, False
        return N, True

    return match


def _over_a_range(node: ast.AST) -> bool:
    """Whether a loop iterates a ``range(...)`` (the inner ``for _ in range(epochs):`` of
    TorchRL's PPO, beside the ``for data in collector:`` whose generator it was taken for)."""
    iterable = getattr(node, "iter", None)
    return (
        isinstance(iterable, ast.Call)
        and isinstance(iterable.func, ast.Name)
        and iterable.func.id == "range"
    )


def _base_name(base: ast.expr) -> str:
    """A base class's name as written: ``Transformer`` of ``nn.Transformer``."""
    return base.attr if isinstance(base, ast.Attribute) else getattr(base, "id", "")


_BUILTINS = frozenset(dir(builtins))


def _on_self(func: ast.AST) -> bool:
    return (
        isinstance(func, ast.Attribute)
        and isinstance(func.value, ast.Name)
        and func.value.id == "self"
    )


def _is_generator(scope: ast.AST) -> bool:
    """A ``yield`` in the function's own body (not in a function defined in it)."""
    stack = list(ast.iter_child_nodes(scope))
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.Yield, ast.YieldFrom)):
            return True
        if not isinstance(node, _NESTED_SCOPES):
            stack.extend(ast.iter_child_nodes(node))
    return False


def _without_steps(observed: Observed) -> Observed:
    """``observed`` without its profiler steps (``P``), its index moved to match."""
    tokens = tuple(t for t in observed.tokens if t != P)
    index = observed.index - observed.tokens[: observed.index].count(P)
    return Observed(tokens, index, ("without steps", observed.key))


def _label(group: tuple[str, ...]) -> str:
    """The token a group's calls are observed as."""
    return group[0] if group and group[0] in _FRAMELESS else N


_SCOPE_NAMES = {
    ast.Lambda: "<lambda>",
    ast.ListComp: "<listcomp>",
    ast.SetComp: "<setcomp>",
    ast.DictComp: "<dictcomp>",
    ast.GeneratorExp: "<genexpr>",
}


# torch.compile's code after a graph break runs as a function of its own, named after the
# function it resumes and the line it resumes at (torch/_dynamo/resume_execution.py), with
# that line as its first: ``torch_dynamo_resume_in_train_step_at_42`` (its qualified name may
# lead with ``Model.``).
_DYNAMO_RESUME = re.compile(r"(?:.*\.)?torch_dynamo_resume_in_(.+)_at_(\d+)$")


def dynamo_resumed(func: str) -> str | None:
    """The name of the function a torch.compile resume function's frame resumes; None for
    any other frame's."""
    match = _DYNAMO_RESUME.match(func)
    return match.group(1) if match is not None else None


def dynamo_resume_line(func: str) -> int | None:
    """The line a torch.compile resume function's frame resumes after (where its function's
    graph broke); None for any other frame's."""
    match = _DYNAMO_RESUME.match(func)
    return int(match.group(2)) if match is not None else None


def _dynamo_resumed(query: CallQuery) -> CallQuery:
    """A frame of torch.compile's resume function as what it is: the function it resumes,
    running from the line it resumes at (its calls after that line), whether or not it
    began while profiling ran."""
    frame = query.frame
    resumed_func = dynamo_resumed(frame.func)
    if resumed_func is None or frame.line is None:
        return query
    resumed = msgspec.structs.replace(frame, func=resumed_func)
    return msgspec.structs.replace(query, frame=resumed, entered=False)


def _scope_name(node: ast.AST) -> str:
    return getattr(node, "name", None) or _SCOPE_NAMES.get(type(node), "")


# A call that makes a profiler object: a file with one is parsed whole (_parse_function).
_PROFILER_CALL = re.compile(rb"\b(?:profile|_KinetoProfile)\s*\(")
_DEF_LINE = re.compile(rb"([ \t]*)(?:async[ \t]+)?def[ \t]+(\w+)")
_DECORATOR_LINE = re.compile(rb"([ \t]*)@")
_DECORATOR_LOOKAHEAD = 40  # lines from a first decorator to its def


def _indent(text: bytes) -> int:
    return len(text) - len(text.lstrip(b" \t"))


# How IPython names a cell's code where no file stands for it (the terminal, kernels
# without ipykernel 6's compiler, Colab): ``<ipython-input-4-faad06d10617>``, its lines in
# ``linecache`` as a Jupyter cell's ``/tmp/ipykernel_<pid>/<hash>.py`` are.
IPYTHON_CELL = re.compile(r"<ipython-input-\d+-[0-9a-f]+>\Z")

# A trace read outside the kernel (TensorBoard, the CLI) finds a cell's text (``KERNEL_CELL``)
# in the notebook saved under the roots, by ipykernel's hash of it. An edited cell hashes to
# another name: no guess is made.
_KERNEL_CELL_SEED = 0xC70F6907
_MURMUR_M = 0x5BD1E995
_MASK32 = 0xFFFFFFFF
# A notebook past this size is mostly outputs (images): not read for its cells.
_MAX_NOTEBOOK_BYTES = 64 << 20
# Jupyter's name for a duplicated notebook (File > Duplicate): ``train-Copy1.ipynb``.
_JUPYTER_DUPLICATE = re.compile(r"-Copy\d+\.ipynb\Z")
# A key of the roots' walk index: the notebooks found (file names never hold "\0").
_NOTEBOOKS = "\0notebooks"


def kernel_cell_hash(text: str) -> int:
    """ipykernel's number for a cell of this text: murmur2 (x86, 32 bits) of its UTF-8
    bytes with ipykernel's seed, as ``<tmp>/ipykernel_<pid>/<number>.py`` names it."""
    data = text.encode("utf-8", "surrogatepass")
    length = len(data)
    h = _KERNEL_CELL_SEED ^ length
    whole = length & ~3
    for i in range(0, whole, 4):
        k = (int.from_bytes(data[i : i + 4], "little") * _MURMUR_M) & _MASK32
        k ^= k >> 24
        k = (k * _MURMUR_M) & _MASK32
        h = ((h * _MURMUR_M) & _MASK32) ^ k
    if length & 3:
        h ^= int.from_bytes(data[whole:], "little")
        h = (h * _MURMUR_M) & _MASK32
    h ^= h >> 13
    h = (h * _MURMUR_M) & _MASK32
    return h ^ (h >> 15)


class _KernelCell(NamedTuple):
    notebook: Path
    index: int  # among the notebook's cells, from 1
    execution_count: int | None
    text: bytes  # as IPython compiles it (``_as_run``): the trace's lines are of it
    id: str | None
    number: int  # ipykernel's name for it: the hash of its text as written
    shown: bytes  # as written, on the same lines as ``text``: what the source view shows


# What makes a statement a magic or a shell command in IPython (``%time f()``, ``!ls``, ``x =
# !ls``, ``,f a`` autocall): it compiles a call in its place, on the same line. Only at the
# start of a statement: ``% (epoch, loss)`` continuing a ``print(`` is Python's operator.
_MAGIC_START = re.compile(r"(\s*)(?:[%!?,;/]|[\w.,\s]+=\s*[%!])")
# A line as Python's compiler counts them: ended by \n, \r\n or \r (or the text's end).
_PYTHON_LINES = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+\Z")
# IPython's ``leading_indent``: a cell whose first line is indented loses that indent.
_LEADING_INDENT = re.compile(r"^[ \t]+")
# IPython's prompt strippers: a cell pasted from a session (``>>> x = f()``, ``In [3]: ``)
# runs without its prompts, where its first line (or its second) has one. (initial, every)
_PROMPTS = (
    (re.compile(r"^>>>( |$)"), re.compile(r"^(>>>|\.\.\.)( |$)")),
    (re.compile(r"^(In \[\d+\]: |\s*\.{3,}: ?)"), re.compile(r"^(In \[\d+\]: |\s*\.{3,}: ?)")),
)


def _as_run(source: str) -> tuple[str, str]:
    """A cell's text as IPython compiles it, for a parse, and as written, for the view: the
    two on the same lines, as the trace counts them. Its leading empty lines are dropped
    (IPython drops them: the trace's line 1 is the first line with code); for the parse,
    IPython's clean-up follows (the first line's indent taken off every line that starts
    with it: a block pasted from inside a function; a session's prompts stripped), then
    each statement that is a magic or a shell command becomes a ``pass`` of its indent."""
    # Lines as Python counts them: not at the form feeds, separators and ``\u2028`` that
    # ``str.splitlines`` also breaks at (inside a string they are text).
    lines = _PYTHON_LINES.findall(source)
    first = 0
    while first < len(lines) and not lines[first].strip():
        first += 1
    shown = lines = lines[first:]
    indent = _LEADING_INDENT.match(lines[0]) if lines else None
    if indent is not None:
        space = indent.group(0)
        lines = [line[len(space) :] if line.startswith(space) else line for line in lines]
    for initial, prompt in _PROMPTS:
        if lines and (initial.match(lines[0]) or (len(lines) > 1 and prompt.match(lines[1]))):
            lines = [prompt.sub("", line, count=1) for line in lines]
    compiled = []
    scan = _StatementScan()
    for line in lines:
        magic = _MAGIC_START.match(line) if scan.at_start() else None
        if magic is not None:
            compiled.append(f"{magic.group(1)}pass\n")
            scan.after_magic(line)
        else:
            compiled.append(line)
            scan.feed(line)
    return "".join(compiled), "".join(shown)


class _StatementScan:
    """Whether the next line of a cell starts a statement: not inside brackets, a string
    or a backslash continuation (what IPython reads from its tokens, read here without a
    tokenizer, which differs between Python versions on ``!``)."""

    def __init__(self) -> None:
        self.depth = 0
        self.quote: str | None = None  # the open string's delimiter
        self.continued = False

    def at_start(self) -> bool:
        return self.depth == 0 and self.quote is None and not self.continued

    def after_magic(self, line: str) -> None:
        self.continued = line.rstrip("\r\n").endswith("\\")

    def feed(self, line: str) -> None:
        text = line.rstrip("\r\n")
        i, n = 0, len(text)
        comment = False
        while i < n:
            char = text[i]
            if self.quote is not None:
                if char == "\\":
                    i += 2
                    continue
                if text.startswith(self.quote, i):
                    i += len(self.quote)
                    self.quote = None
                    continue
                i += 1
                continue
            if char == "#":
                comment = True  # a backslash ending it continues nothing
                break
            if char in "'\"":
                triple = char * 3
                self.quote = triple if text.startswith(triple, i) else char
                i += len(self.quote)
                continue
            if char in "([{":
                self.depth += 1
            elif char in ")]}":
                self.depth = max(0, self.depth - 1)
            i += 1
        ends_escaped = not comment and text.endswith("\\")
        self.continued = ends_escaped and self.quote is None
        if self.quote is not None and len(self.quote) == 1 and not ends_escaped:
            self.quote = None  # a one-line string cannot go on: the line is broken, not it


def _read_notebook(path: Path) -> list[Any] | None:
    """The cells of a saved notebook as written (nbformat 4); None for one that cannot be
    read, or a FIFO or other file that is not a regular one (reading it could wait
    forever)."""
    try:
        status = path.stat()
        if not stat.S_ISREG(status.st_mode) or status.st_size > _MAX_NOTEBOOK_BYTES:
            return None
        data = path.read_bytes()
        # A BOM some editors write; invalid UTF-8 in a string is a ValueError of its own.
        document = msgspec.json.decode(data[3:] if data.startswith(b"\xef\xbb\xbf") else data)
    except (OSError, ValueError, RecursionError, MemoryError):
        return None
    cells = document.get("cells") if isinstance(document, dict) else None
    return cells if isinstance(cells, list) else []


def _held(cells: list[Any]) -> tuple[tuple[int, int, int | None, str | None], ...]:
    """What a notebook (``_read_notebook``'s cells) holds for the analysis: each code
    cell's number (ipykernel's name for its text), place, execution count and id. A result
    read from it depends on those of its trace's cells alone (``models.cells_digest``): not
    on outputs, which Jupyter saves every two minutes while a cell prints, nor on the cells
    it never ran. (Without reading each cell as IPython runs it: a save is read for this.)"""
    return tuple(
        (kernel_cell_hash(source), index, count, cell_id)
        for index, source, count, cell_id in _code_cells(cells)
    )


def stamp_content(path: str) -> Any:
    """What a result read from a notebook or a folder depends on, as it is now: the
    notebook's code cells (``_held``), the names of the notebooks in the folder (one saved
    there since may hold a cell not found: ``_folder_notebooks``). None where it cannot be
    read."""
    if os.path.isdir(path):
        names = _folder_notebooks(path)
        return None if names is None else "\0".join(names)
    cells = _read_notebook(Path(path))
    return None if cells is None else _held(cells)


def _folder_notebooks(folder: str) -> list[str] | None:
    """The notebooks in a folder, by name (not its other files, nor the hidden copy
    ``.~train.ipynb`` Jupyter keeps while it saves one: a save moves the folder's mtime and
    is no new notebook)."""
    try:
        return sorted(
            name
            for name in os.listdir(folder)
            if name.endswith(".ipynb") and not name.startswith(".")
        )
    except OSError:
        return None


def _code_cells(cells: list[Any]) -> Iterator[tuple[int, str, int | None, str | None]]:
    """Each code cell of a notebook (``_read_notebook``'s) that ipykernel names by its text:
    its place (from 1), text as written, execution count and id."""
    for index, cell in enumerate(cells, start=1):
        if not isinstance(cell, dict) or cell.get("cell_type") != "code":
            continue
        source = cell.get("source")
        if isinstance(source, list) and all(isinstance(part, str) for part in source):
            source = "".join(source)
        if not isinstance(source, str) or len(source) > _MAX_SOURCE_BYTES:
            continue
        if source.lstrip().startswith("%%"):
            continue  # a cell magic runs its body under another name
        count = cell.get("execution_count")
        cell_id = cell.get("id")
        yield (
            index,
            source,
            count if type(count) is int else None,
            cell_id if isinstance(cell_id, str) else None,
        )


def _notebook_cells(cells: list[Any], path: Path) -> list[_KernelCell]:
    """The code cells of a notebook (``_read_notebook``'s), each with ipykernel's name for
    it and its text as IPython compiles it."""
    found: list[_KernelCell] = []
    for index, source, count, cell_id in _code_cells(cells):
        compiled, shown = _as_run(source)
        found.append(
            _KernelCell(
                path,
                index,
                count,
                compiled.encode("utf-8", "surrogatepass"),
                cell_id,
                kernel_cell_hash(source),
                shown.encode("utf-8", "surrogatepass"),
            )
        )
    return found


def _unsaved_source(name: str) -> bytes | None:
    """The source of code that has no file, where this process holds it: a Jupyter cell
    (``/tmp/ipykernel_<pid>/<hash>.py``) is compiled under a file name that does not
    exist, its lines kept in ``linecache`` without a modification time. Only a trace
    analysed in the kernel that ran the cell (``analyze(prof)`` in the notebook) has it."""
    import linecache  # loaded by now in any notebook; a report need not load it

    entry = linecache.cache.get(name)
    if entry is None or len(entry) != 4 or entry[1] is not None:
        return None  # not there, or a real file's cached lines (read from the file itself)
    text = "".join(entry[2])
    if len(text) > _MAX_SOURCE_BYTES:
        return None
    return text.encode("utf-8", "surrogatepass")


def _function_end(lines: list[bytes], first: int, func: str) -> int | None:
    """The index past the last line of the function ``func`` whose def (or first
    decorator) is ``lines[first]``; None when that line does not start it."""
    if not 0 <= first < len(lines):
        return None
    head = _DEF_LINE.match(lines[first]) or _DECORATOR_LINE.match(lines[first])
    if head is None:
        return None
    indent = len(head.group(1))
    body = first
    while True:
        match = _DEF_LINE.match(lines[body])
        if match is not None and len(match.group(1)) == indent:
            if match.group(2) != func.encode():
                return None
            break
        body += 1
        if body >= len(lines) or body - first > _DECORATOR_LOOKAHEAD:
            return None
    for index in range(body + 1, len(lines)):
        text = lines[index].strip()
        # A closing bracket at the def's own indent (black's ``) -> None:`` under a long
        # signature) ends the signature, not the function: taken for its end, the block of
        # transformers' ``Trainer._run_epoch`` held its signature alone.
        if (
            text
            and not text.startswith(b"#")
            and text[:1] not in b")]}"
            and _indent(lines[index]) <= indent
        ):
            return index
    return len(lines)


def _function_block(
    path: Path, lines: list[bytes], line: int, func: str
) -> _ParsedFile | None | bool:
    """The parsed block of the function a frame named ``func`` runs at ``line``: the one
    that starts there (a fresh call: its def or first decorator line), else the innermost
    ``def func`` whose block holds the line (a frame already running when profiling
    started). False when no ``def func`` holds the line; None when its text cannot tell
    (a block that does not parse alone, a frame of a lambda or a module)."""
    end = _function_end(lines, line - 1, func)
    if end is not None:
        parsed = _parse_block(path, lines, line - 1, end)
        return parsed if parsed is not None and parsed.scope_at(line, func) else None
    if not (func.isascii() and func.isidentifier()):
        return None  # _DEF_LINE's \w is ASCII: only the whole file's parse can tell
    name = func.encode()
    for first in range(min(line - 2, len(lines) - 1), -1, -1):
        match = _DEF_LINE.match(lines[first])
        if match is None or match.group(2) != name:
            continue
        end = _function_end(lines, first, func)
        if end is None:
            return None
        if end < line:
            continue  # ended above the line: an outer def of that name may hold it
        indent = _indent(lines[first])
        while first > 0 and lines[first - 1].lstrip().startswith(b"@"):
            if _indent(lines[first - 1]) != indent:
                break
            first -= 1  # its decorators: the whole file's parse keys the function by them
        parsed = _parse_block(path, lines, first, end)
        return parsed if parsed is not None and parsed.running_scope(line, func) else None
    return False


def _parse_block(path: Path, lines: list[bytes], first: int, end: int) -> _ParsedFile | None:
    """``lines[first:end]`` parsed with their own line numbers, or None when they do not
    parse alone (the block was cut inside a string or brackets)."""
    # "if 1:" lets an indented block (a method) parse as it is, columns kept.
    snippet = b"if 1:\n" + b"".join(lines[first:end])
    try:
        tree = ast.parse(snippet, filename=str(path))
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    ast.increment_lineno(tree, first - 1)
    return _ParsedFile(tree)


_CLASS_LINE = re.compile(rb"^([ \t]*)class[ \t]+(\w+)")
_ANY_DEF_LINE = re.compile(rb"^([ \t]*)(?:async[ \t]+)?def[ \t]")
_METHOD_DEF_LINES: dict[str, re.Pattern[bytes]] = {}


def _method_def_line(method: str) -> re.Pattern[bytes]:
    pattern = _METHOD_DEF_LINES.get(method)
    if pattern is None:
        pattern = _METHOD_DEF_LINES[method] = re.compile(
            rb"^([ \t]*)(?:async[ \t]+)?def[ \t]+" + re.escape(method.encode()) + rb"\b"
        )
    return pattern


def _class_around(lines: list[bytes], def_line: int, method: str = "__init__") -> str | None:
    """The class whose ``def __init__`` (or ``method``) is at ``def_line`` of a file's
    ``lines`` (the nearest ``class`` above it, less indented), read as text: a library's file
    is long to parse. None for a function defined in another function (a ``def`` less
    indented comes first): a closure is no method of the class around that function. A
    metaclass's name is marked (``METACLASS`` before it)."""
    line = _class_line_around(lines, def_line, method)
    if line is None:
        return None
    match = _CLASS_LINE.match(line)
    name = match.group(2).decode("ascii", "replace") if match else ""
    return METACLASS + name if _METACLASS_BASES.search(line) else name


# Pyro's ``class DistributionMeta(ABCMeta):``, whose ``__call__`` runs for every
# ``dist.Normal(...)``: the call of a class, not of an object.
_METACLASS_BASES = re.compile(rb"^[ \t]*class[ \t]+\w+[ \t]*\([^)]*\b(?:type|\w*Meta)\b")
METACLASS = "<metaclass>"


def _class_line_around(lines: list[bytes], def_line: int, method: str) -> bytes | None:
    """The ``class`` line of ``_class_around``'s class."""
    if not 0 < def_line <= len(lines):
        return None
    # A decorated method's frame starts at its first decorator: its def is below them.
    index = def_line - 1
    while index < len(lines) - 1 and _DECORATOR_LINE.match(lines[index]):
        index += 1
    at = _method_def_line(method).match(lines[index])
    if at is None:
        return None  # another version of the file: no such method there
    indent = len(at.group(1).expandtabs())
    for text in reversed(lines[: def_line - 1]):  # above the decorators too
        match = _CLASS_LINE.match(text)
        if match and len(match.group(1).expandtabs()) < indent:
            return text
        outer = _ANY_DEF_LINE.match(text)
        if outer and len(outer.group(1).expandtabs()) < indent:
            return None
    return None


_COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)


def periodic_guard(
    scope: ast.AST, line: int, profilers: frozenset[str] = frozenset()
) -> str | None:
    """The test (as Python prints it) of the innermost ``if`` of ``scope`` whose body (not its
    ``else``) runs ``line`` and whose test takes a remainder (``update_idx %
    args.log_interval == 0``): the line runs every N passes, not every one. None: none.
    A test whose body steps one of the ``profilers`` (by name) is passed over: it holds
    the profiled steps (MONAI's ``if (epoch + 1) % val_interval == 0:`` around its
    validation loop and the read after it), so it says which runs were profiled, not how
    often a profiled step reads. A name tested that every binding reaching the ``if`` sets
    from a remainder counts too (DLRM's ``should_print = ((j + 1) % args.print_freq == 0)
    or ...`` then ``if should_print:``)."""
    found: str | None = None
    for node in _nodes_holding(scope, line):
        if (
            isinstance(node, ast.If)
            and _in_body(node, line)
            and _takes_a_remainder(scope, node.test)
            and not (profilers and any(_steps_a_profiler(n, profilers) for n in node.body))
            # Gradient accumulation's test (``if (batch_count + 1) % accum_steps == 0:``
            # around ``optimizer.step()``): it marks each training step, not a logging
            # interval (a torchtune walk, its profiler stepped per micro-batch). Not a test
            # around one optimizer's step of two (a WGAN's generator every ``n_critic``
            # steps, its critic's every step: a review).
            and not _accumulates_gradients(scope, node, line)
        ):
            found = ast.unparse(node.test)  # the walk goes inwards: the innermost last
    return found or _every_n_decorator(scope) or _after_a_stepping_loop(scope, line, profilers)


_LOOPS = (ast.For, ast.AsyncFor, ast.While)


def loop_header(loop: ast.For | ast.AsyncFor | ast.While) -> str:
    """A loop's first line as Python prints it: ``for epoch in range(epochs):``."""
    if isinstance(loop, ast.While):
        return f"while {ast.unparse(loop.test)}:"
    keyword = "async for" if isinstance(loop, ast.AsyncFor) else "for"
    return f"{keyword} {ast.unparse(loop.target)} in {ast.unparse(loop.iter)}:"


def _after_a_stepping_loop(scope: ast.AST, line: int, profilers: frozenset[str]) -> str | None:
    """The header of the loop of ``scope`` that runs ``line`` once a pass beside a loop of its
    body that steps one of the ``profilers`` (an epoch loop's ``print(f"... {total / n}")``
    after its loop over batches): each pass of it is many profiled steps, so the line runs
    every N steps already (a walk's epoch-end print of a loss kept on the device, the fix
    the tool itself gives, was told not to print inside the step). None: the innermost loop
    around ``line`` that steps a profiler steps it beside ``line`` (each pass is a step),
    or none does."""
    if profilers and any(_steps_a_profiler(node, profilers) for node in _own_statements(scope)):

        def steps(code: ast.AST) -> bool:
            return _steps_a_profiler(code, profilers)

    else:
        # The profiler stepped where this code does not say (a hook on the optimizer's
        # step, a driver running the script): the loop that runs an optimizer's step is
        # the loop of training steps (a walk of lightly's examples, each one's epoch print
        # told not to print inside the step).
        steps = _runs_an_optimizer_step
    loops = [
        node
        for node in _nodes_holding(scope, line)
        if isinstance(node, _LOOPS)
        and node.body
        and node.body[0].lineno <= line <= (node.body[-1].end_lineno or node.body[-1].lineno)
    ]
    if not loops:
        return None
    # The innermost loop around the line only: a line in a loop of its own beside the loop
    # of steps (a validation loop's reads, 20 a pass) runs many times a pass (a review).
    loop = loops[-1]
    holding = [s for s in loop.body if s.lineno <= line <= (s.end_lineno or s.lineno)]
    if any(steps(s) for s in holding):
        return None  # the line is beside the step, or inside what steps it
    steppers = [s for s in loop.body if s not in holding and steps(s)]
    if steppers and all(
        any(isinstance(node, _LOOPS) and steps(node) for node in ast.walk(stepper))
        for stepper in steppers
    ):
        return loop_header(loop)
    return None


def _own_statements(scope: ast.AST) -> list[ast.AST]:
    """``scope``'s statements (a module's, a function's body); a lambda's or a
    comprehension's frame, whose body is an expression, itself."""
    body = getattr(scope, "body", None)
    return list(body) if isinstance(body, list) else [scope]


def _runs_an_optimizer_step(code: ast.AST) -> bool:
    """Whether code calls an optimizer's ``step()`` (a receiver named like one:
    ``optimizer``, ``opt``, ``self.optim``, ``d_optimizer``)."""
    return any(
        isinstance(node, ast.Call)
        and _call_name(node) == "step"
        and not node.args
        and _names_an_optimizer(_receiver_name(node))
        for node in ast.walk(code)
    )


def _names_an_optimizer(receiver: str | None) -> bool:
    """Whether a receiver's name is an optimizer's (``optimizer``, ``opt``, ``d_optim``)."""
    return receiver is not None and (receiver == "opt" or "optim" in receiver.lower())


def _accumulates_gradients(scope: ast.AST, test: ast.If, line: int) -> bool:
    """Whether an ``if`` is gradient accumulation's: its body runs an optimizer's step, and
    the innermost loop around it runs no optimizer's step outside it."""
    if not any(_runs_an_optimizer_step(n) for n in test.body):
        return False
    loops = [n for n in _nodes_holding(scope, line) if isinstance(n, _LOOPS)]
    around = next((n for n in reversed(loops) if n.lineno < test.lineno), None)
    body = around.body if around is not None else _own_statements(scope)
    inside = {id(n) for n in ast.walk(test)}
    return not any(
        _runs_an_optimizer_step(node) and id(node) not in inside
        for statement in body
        for node in ast.walk(statement)
        if isinstance(node, ast.Call)
    )


def setting_guard(scope: ast.AST, line: int) -> str | None:
    """The test (as Python prints it) of the innermost ``if`` or ``while`` of ``scope`` that
    runs ``line`` only where a setting holds: its body holds the line, or its test is the
    line and starts ``setting and ...``. A setting is a parameter of the function or an
    attribute of ``self`` tested for truth (``if stop_at_eos and finished.all():``,
    pytorch-metric-learning's ``if self.collect_stats:``), or a parameter whose default is a
    number compared with a number (TransformerLens' ``if freq_penalty > 0:``). In a
    library's code, the caller's argument or the object's setting may turn the read off (a
    walk: each such read was told "no setting of it is known"). Not a comparison of tensors
    (``if loss < self.best:``, ``if x[0] > 0:``: a review). None: none."""
    settings = _setting_parameters(scope)
    found: str | None = None
    for node in _nodes_holding(scope, line):
        if not isinstance(node, (ast.If, ast.While)):
            continue
        test = node.test
        if _in_body(node, line) and _is_a_setting_test(test, settings):  # type: ignore[arg-type]
            found = ast.unparse(test)
        elif (
            test.lineno == line
            and isinstance(test, ast.BoolOp)
            and isinstance(test.op, ast.And)
            and _is_a_setting_test(test.values[0], settings)
        ):
            found = ast.unparse(test)
    return found


def _setting_parameters(scope: ast.AST) -> dict[str, ast.expr | None]:
    """The parameters of a function (but ``self``/``cls``), each with its default (None:
    none)."""
    args = getattr(scope, "args", None)
    if not isinstance(args, ast.arguments):
        return {}
    positional = [*args.posonlyargs, *args.args]
    defaults: list[ast.expr | None] = [None] * (len(positional) - len(args.defaults))
    defaults += list(args.defaults)
    found = dict(zip((a.arg for a in positional), defaults, strict=True))
    found.update(zip((a.arg for a in args.kwonlyargs), args.kw_defaults, strict=True))
    found.pop("self", None)
    found.pop("cls", None)
    return found


def _is_a_setting_test(test: ast.expr, settings: Mapping[str, ast.expr | None]) -> bool:
    """Whether a test is a setting's: a parameter or ``self``'s attribute tested for truth
    (or its ``not``), or a parameter defaulting to a number compared with a number."""
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        test = test.operand
    if isinstance(test, ast.Name):
        return test.id in settings
    if isinstance(test, ast.Attribute):
        return isinstance(test.value, ast.Name) and test.value.id == "self"
    if isinstance(test, ast.Compare) and len(test.comparators) == 1:
        left, right = test.left, test.comparators[0]
        if isinstance(left, ast.Constant):
            left, right = right, left
        if not (isinstance(right, ast.Constant) and isinstance(right.value, (int, float))):
            return False
        if (
            isinstance(left, ast.Attribute)
            and isinstance(left.value, ast.Name)
            and left.value.id == "self"
        ):
            # An attribute named as a setting (skrl's ``if self.write_interval > 0:``, a
            # walk), not any attribute: a buffer's count (``self.count > 100``) is a tensor.
            return _SETTING_NAME.search(left.attr) is not None
        default = settings.get(left.id) if isinstance(left, ast.Name) else None
        return (
            isinstance(default, ast.Constant)
            and isinstance(default.value, (int, float))
            and not isinstance(default.value, bool)
        )
    return False


# Names of settings an object keeps (how often it logs, writes, checks; how verbose), as
# parts of its name between underscores (``write_interval``, ``log_every``; not ``logits``).
_SETTING_NAME = re.compile(
    r"(?:^|_)(?:interval|every|freq|frequency|period|verbose|verbosity|debug|log|logging|level"
    r"|enable|enabled|stats|print|write|track|tracking|check)(?:_|$)",
    re.IGNORECASE,
)


def _every_n_decorator(scope: ast.AST) -> str | None:
    """``@`` and the decorator of ``scope`` that runs it on every N-th event, as Python
    prints it: PyTorch-Ignite's ``@trainer.on(Events.ITERATION_COMPLETED(every=100))``, a
    handler logging ``engine.state.output`` (its reads are every N iterations already);
    None where there is none (or ``every=1``)."""
    for decorator in getattr(scope, "decorator_list", ()):
        for node in ast.walk(decorator):
            for keyword in getattr(node, "keywords", ()):
                if keyword.arg == "every" and not (
                    isinstance(keyword.value, ast.Constant) and keyword.value.value in (None, 1)
                ):
                    return "@" + ast.unparse(decorator)
    return None


def _has_remainder(expr: ast.AST) -> bool:
    """Whether ``expr`` takes a remainder: a ``%`` of numbers, not a string's formatting
    (``"loss_%s" % name``)."""
    return any(
        isinstance(n, ast.BinOp)
        and isinstance(n.op, ast.Mod)
        and not isinstance(n.left, ast.JoinedStr)
        and not (isinstance(n.left, ast.Constant) and isinstance(n.left.value, (str, bytes)))
        for n in ast.walk(expr)
    )


def _flags_tested(test: ast.expr) -> list[str]:
    """The names a test takes as truth values (``if should_print:``, ``if a or not b:``),
    not those it computes with (``hist[slot] > 0``)."""
    if isinstance(test, ast.Name):
        return [test.id]
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return _flags_tested(test.operand)
    if isinstance(test, ast.BoolOp):
        return [name for value in test.values for name in _flags_tested(value)]
    return []


def _takes_a_remainder(scope: ast.AST, test: ast.expr) -> bool:
    """Whether a test takes a remainder, itself or through a flag it tests each value of
    which reaching the test does."""
    if _has_remainder(test):
        return True
    for name in _flags_tested(test):
        values = _reaching_values(scope, name, test.lineno)
        if values and all(v is not None and _has_remainder(v) for v in values):
            return True
    return False


def _nodes_holding(scope: ast.AST, line: int) -> Iterator[ast.AST]:
    """The nodes of ``scope``'s own code (not of a function or class defined in it) whose
    lines hold ``line``, each before the nodes inside it."""
    stack = list(ast.iter_child_nodes(scope))
    while stack:
        node = stack.pop()
        if isinstance(node, _NESTED_SCOPES):
            continue
        first, end = getattr(node, "lineno", None), getattr(node, "end_lineno", None)
        if first is not None and end is not None and not first <= line <= end:
            continue
        yield node
        stack.extend(ast.iter_child_nodes(node))


def _in_body(node: ast.If, line: int) -> bool:
    """Whether an ``if``'s body (not its ``else``) holds ``line``."""
    return bool(node.body) and (
        node.body[0].lineno <= line <= (node.body[-1].end_lineno or node.body[-1].lineno)
    )


def _steps_a_profiler(code: ast.AST, profilers: frozenset[str]) -> bool:
    """Whether code calls ``.step()`` of one of these profilers (by name)."""
    return any(
        isinstance(node, ast.Call)
        and _call_name(node) == "step"
        and _receiver_name(node) in profilers
        for node in ast.walk(code)
    )


def explicit_syncs(scope: ast.AST) -> list[tuple[int, str, str | None]]:
    """The calls of ``scope``'s own code (not of a function or class defined in it) that
    wait for a device by themselves (``EXPLICIT_SYNC_METHODS``: ``torch.cuda.synchronize()``,
    ``event.synchronize()``), each as (line, the call, the test of the innermost
    ``if`` whose body holds it, or ``not (test)`` where its ``else`` does, or None; both as
    Python prints them: quotes and parentheses may differ from the file's), by line. (The
    ``else`` had the test itself: tensordict's non-CUDA synchronize was said to run "under
    ``if device_type == 'cuda':``", a TorchRL walk.)"""

    def guards(node: ast.If, test: str) -> tuple[str, str]:
        return test, f"not ({test})"

    found = {
        (node.lineno, ast.unparse(node), guard)
        for node, guard in _calls_under_tests(scope, guards)
        if isinstance(node.func, ast.Attribute) and node.func.attr in EXPLICIT_SYNC_METHODS
    }
    return sorted(found, key=lambda f: (f[0], f[1]))


# A file that may hold an explicit synchronize or a copy to the host: read further.
_MAY_WAIT_UNRUN = re.compile(rb"synchronize\(|\.cpu\(|\.to\(")


def guarded_copies(scope: ast.AST) -> list[tuple[int, str, str | None]]:
    """The copies to the host of ``scope``'s own code (``.cpu()``, ``.to("cpu")``) that
    run only where a tensor is not on the host: in the body of an ``if`` that tests so
    (``if x.device != torch.device("cpu"):``, ``if t.is_cuda:``), or in the ``else`` of
    one that tests the opposite. On a CPU run they never run, and no trace shows them:
    Keras' ``convert_to_numpy`` copies each metric so, two a training step on a GPU. As
    ``explicit_syncs``: (line, the call, the ``if``'s test), by line."""

    def guards(node: ast.If, test: str) -> tuple[str | None, str | None]:
        off = _off_host_test(node.test)
        # (In the ``else`` of a test for the host, its negation is the guard.)
        return (test if off is True else None), (f"not ({test})" if off is False else None)

    found = {
        (node.lineno, ast.unparse(node), guard)
        for node, guard in _calls_under_tests(scope, guards, keep_outer=True)
        if guard is not None and _moved_to_host(node)
    }
    return sorted(found, key=lambda f: (f[0], f[1]))


def _scope_run(
    parsed: Any, frame: Frame, lines_run: Mapping[tuple[str, str], Collection[int]]
) -> tuple[ast.AST | None, set[int] | None]:
    """The scope a frame's explicit synchronizes are read in, and the lines known to have
    run in it: None for a fresh call (its function ran whole while profiled); for a frame
    already running when recording began, the line it was at then (the prof.step() of a
    schedule, in the loop) and its syncs' lines (its reads may all be a helper's)."""
    scope = parsed.scope_at(frame.line, frame.func)
    if scope is not None:
        return scope, None
    scope = parsed.running_scope(frame.line, frame.func)
    return scope, {frame.line, *lines_run.get((frame.file, frame.func), ())}


def _unrun_in(scope: ast.AST, ran: Collection[int] | None) -> list[tuple[int, str, str | None]]:
    """``explicit_syncs`` and ``guarded_copies`` of ``scope``; with ``ran`` (a running
    frame's lines), only those sharing a loop with one of them: the code before and after
    the profiled loop ran outside it, if at all."""
    found = [*explicit_syncs(scope), *guarded_copies(scope)]
    if ran is None:
        return found
    return [
        entry
        for entry in found
        if any(
            first <= other <= end for first, end in loops_around(scope, entry[0]) for other in ran
        )
    ]


def _calls_under_tests(
    scope: ast.AST,
    guards: Callable[[ast.If, str], tuple[str | None, str | None]],
    keep_outer: bool = False,
) -> list[tuple[ast.Call, str | None]]:
    """The calls of ``scope``'s own code, each with the guard of the innermost ``if``
    around it: ``guards`` gives an ``if``'s guard for its body and for its ``else``
    (from its test as Python prints it); a None there keeps the guard from further out
    where ``keep_outer``, else none."""
    found: list[tuple[ast.Call, str | None]] = []
    stack: list[tuple[ast.AST, str | None]] = [(node, None) for node in ast.iter_child_nodes(scope)]
    while stack:
        node, guard = stack.pop()
        if isinstance(node, _NESTED_SCOPES):
            continue
        if isinstance(node, ast.Call):
            found.append((node, guard))
        if isinstance(node, ast.If):
            body, orelse = guards(node, ast.unparse(node.test))
            if keep_outer:
                body, orelse = body or guard, orelse or guard
            stack.append((node.test, guard))
            stack.extend((child, body) for child in node.body)
            stack.extend((child, orelse) for child in node.orelse)
        else:
            stack.extend((child, guard) for child in ast.iter_child_nodes(node))
    return found


_DEVICE_FLAGS = {"is_cuda": True, "is_cpu": False}


def _off_host_test(test: ast.expr) -> bool | None:
    """True for a test that holds where a tensor is not on the host (``x.device !=
    torch.device("cpu")``, ``x.device.type == "cuda"``, ``x.is_cuda``), False for its
    opposite (``x.device.type == "cpu"``, ``x.is_cpu``), None for any other test."""
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        inner = _off_host_test(test.operand)
        return None if inner is None else not inner
    if isinstance(test, ast.Attribute) and test.attr in _DEVICE_FLAGS:
        return _DEVICE_FLAGS[test.attr]
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1):
        return None
    sides = [test.left, test.comparators[0]]
    if not any(isinstance(n, ast.Attribute) and n.attr in ("device", "type") for n in sides):
        return None
    names = [
        n.value
        for side in sides
        for n in ast.walk(side)
        if isinstance(n, ast.Constant) and n.value in ("cpu", "cuda")
    ]
    if len(names) != 1:
        return None
    equal = isinstance(test.ops[0], (ast.Eq, ast.Is))
    if not equal and not isinstance(test.ops[0], (ast.NotEq, ast.IsNot)):
        return None
    return (names[0] == "cuda") == equal


def runs_on_the_host_only(scope: ast.AST, line: int) -> bool:
    """Whether ``line`` runs only where a tensor is on the host: in the body of an ``if``
    of ``scope``'s own code whose test holds only there (``if tensor.device ==
    torch.device("cpu"):``, torchmetrics' ``normalize_logits_if_needed``, whose GPU path
    reads nothing), or in the ``else`` of one that holds only off it."""
    for node in _nodes_holding(scope, line):
        off_host = _off_host_test(node.test) if isinstance(node, ast.If) else None
        if off_host is not None:
            in_body = _in_body(node, line)  # type: ignore[arg-type]
            orelse = node.orelse  # type: ignore[attr-defined]
            in_else = not in_body and bool(orelse) and orelse[0].lineno <= line
            if (in_body and off_host is False) or (in_else and off_host is True):
                return True
    return False


def guards_around(scope: ast.AST, line: int) -> list[str]:
    """The tests of the ``if`` statements of ``scope``'s own code whose body (not their
    ``else``) holds ``line``, outermost first, as Python prints them: timm's
    ``torch.cuda.synchronize()`` runs under ``if args.synchronize_step:`` and then ``if
    device.type == 'cuda':``, and the inner test alone read as every CUDA step."""
    found = [
        (node.lineno, ast.unparse(node.test))
        for node in _nodes_holding(scope, line)
        if isinstance(node, ast.If)
        and any(child.lineno <= line <= (child.end_lineno or child.lineno) for child in node.body)
    ]
    return [test for _line, test in sorted(found)]


def loops_around(scope: ast.AST, line: int) -> list[tuple[int, int]]:
    """The first and last lines of each ``for`` and ``while`` loop of ``scope``'s own code
    whose body runs ``line``, outermost first."""
    return sorted(
        (node.lineno, node.end_lineno)
        for node in _nodes_holding(scope, line)
        if isinstance(node, (ast.For, ast.AsyncFor, ast.While)) and node.lineno and node.end_lineno
    )


# The calls that queue no device work, between a synchronize and a read after it: a step's
# timing and its log (build-nanogpt's ``t1 = time.time()`` and ``print(f"... {loss_accum.
# item():.6f} ...")``), by builtin name, by method name (not of ``torch``), or of ``time``.
_HOST_ONLY_CALLS = frozenset(
    {"print", "len", "int", "float", "str", "round", "abs", "format", "open"}
)
_HOST_ONLY_METHODS = frozenset(
    {"item", "tolist", "write", "flush", "append", "info", "debug", "warning", "format"}
)
_HOST_ONLY_MODULES = frozenset({"time", "datetime", "math", "logging", "logger", "os", "sys"})


def runs_just_before(
    scope: ast.AST,
    sync_line: int,
    read_line: int,
    function_named: Callable[[str], ast.AST | None] | None = None,
) -> bool:
    """Whether the statement at ``sync_line`` runs before ``read_line`` in each pass of the
    innermost loop of ``scope`` that runs the read (or in each run of ``scope`` where no
    loop does), on the same path (not in another branch of an ``if``), with no call
    between them that may queue device work (``_HOST_ONLY_CALLS``; ``function_named``:
    the file's one function of a name, a call of which counts by the calls in it, as
    llm.c's ``print0`` wraps ``print``): a read there finds the device idle."""
    loops = loops_around(scope, read_line)
    if loops:
        first, _end = loops[-1]
        loop = next(
            node
            for node, _ in _scope_walk(scope)
            if isinstance(node, (ast.For, ast.AsyncFor, ast.While)) and node.lineno == first
        )
        body: list[ast.stmt] = loop.body
    else:
        body = getattr(scope, "body", None) or []
        if not isinstance(body, list):  # a lambda's body is one expression
            return False
    while True:
        at_sync = _statement_holding(body, sync_line)
        at_read = _statement_holding(body, read_line)
        if at_sync is None or at_read is None:
            return False
        if at_sync is at_read:
            inner = _block_holding_both(at_sync, sync_line, read_line)
            if inner is None:
                return False
            body = inner
            continue
        if at_sync.lineno > at_read.lineno:
            return False
        after = at_sync.end_lineno or at_sync.lineno
        between = body[body.index(at_sync) + 1 : body.index(at_read) + 1]
        # A function defined between them runs none of its body there.
        nodes = [
            node
            for statement in between
            if not isinstance(statement, _NESTED_SCOPES)
            for node in (statement, *(n for n, _ in _scope_walk(statement)))
        ]
        return all(
            _queues_no_device_work(node, function_named or _no_function)
            for node in nodes
            if isinstance(node, ast.Call) and after < node.lineno <= read_line
        )


def _statement_holding(body: list[ast.stmt], line: int) -> ast.stmt | None:
    return next(
        (s for s in body if s.lineno <= line <= (s.end_lineno or s.lineno)),
        None,
    )


def _block_holding_both(statement: ast.stmt, first: int, second: int) -> list[ast.stmt] | None:
    """The block of a compound statement holding both lines (an ``if``'s body, or its
    ``else``; a ``with``'s or ``try``'s body); None where they are in different blocks,
    or the statement has none (one statement spanning both lines)."""
    if isinstance(statement, (ast.For, ast.AsyncFor, ast.While)):
        return None  # a loop inside the pass: its body runs many times, or none
    for name in ("body", "orelse", "finalbody"):
        block = getattr(statement, name, None)
        if (
            isinstance(block, list)
            and block
            and all(_statement_holding(block, line) is not None for line in (first, second))
        ):
            return block
    return None


def _no_function(_name: str) -> ast.AST | None:
    return None


def _queues_no_device_work(
    call: ast.Call, function_named: Callable[[str], ast.AST | None], depth: int = 0
) -> bool:
    func = call.func
    if isinstance(func, ast.Name):
        if func.id in _HOST_ONLY_CALLS:
            return True
        helper = function_named(func.id) if depth < 2 else None
        return helper is not None and all(
            _queues_no_device_work(node, function_named, depth + 1)
            for node, _ in _scope_walk(helper)
            if isinstance(node, ast.Call)
        )
    if not isinstance(func, ast.Attribute):
        return False
    root = func.value
    while isinstance(root, ast.Attribute):
        root = root.value
    if isinstance(root, ast.Name) and root.id == "torch":
        return False
    if isinstance(root, ast.Name) and root.id in _HOST_ONLY_MODULES:
        return True
    return func.attr in _HOST_ONLY_METHODS


# Calls that end a training step: a loop making them is the training loop, one pass per
# step, not a loop over the groups of one step.
_TRAINING_STEP_CALLS = frozenset({"backward", "step", "zero_grad"})


def _steps_training(loop: ast.AST) -> bool:
    """Whether a loop's body (not a function defined in it) runs ``loss.backward()``,
    ``optimizer.step()``, ``optimizer.zero_grad()`` or ``prof.step()``: the training loop
    (PyG's ``for batch in loader:`` with a mask of the batch's labels was told to select
    the groups once)."""
    stack: list[ast.AST] = list(getattr(loop, "body", []))
    while stack:
        node = stack.pop()
        if isinstance(node, _NESTED_SCOPES):
            continue
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in _TRAINING_STEP_CALLS
        ):
            return True
        stack.extend(ast.iter_child_nodes(node))
    return False


def loop_around(scope: ast.AST, line: int) -> int | None:
    """The first line of the innermost loop of ``scope`` (not of a function or class
    defined in it) that runs ``line`` once per pass with the pass's own value: a ``for``
    body or a comprehension whose loop variable the statement at ``line`` uses
    (``torch.where(expert_mask[e])`` in ``for e in range(n)``): a selection per group. Not a
    ``for`` header (its iterable is made once), an ``else``, or a ``while`` (no value of its
    own per pass); a comprehension whose read may be in its first iterable (``_per_element``).
    None: none."""
    if isinstance(scope, _COMPREHENSIONS):  # the frame of a comprehension (``<genexpr>``)
        return scope.lineno if _per_element(scope) else None
    used = _names_at(scope, line)
    if used is None:
        return None
    found: int | None = None
    stack = list(ast.iter_child_nodes(scope))
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            continue
        first, end = getattr(node, "lineno", None), getattr(node, "end_lineno", None)
        if first is not None and end is not None and not first <= line <= end:
            continue
        per_pass = False
        if isinstance(node, (ast.For, ast.AsyncFor)):
            body_end = node.body[-1].end_lineno or node.body[-1].lineno
            if node.body[0].lineno <= line <= body_end and line > (node.iter.end_lineno or 0):
                per_pass = (
                    bool(_bound_names(node.target) & used)
                    and not _steps_training(node)
                    # A loop over a list written out (``for mask in [train_mask, val_mask]``
                    # in PyG's ``test()``) visits a few named things, not a step's groups.
                    and not isinstance(node.iter, (ast.List, ast.Tuple))
                )
        elif isinstance(node, _COMPREHENSIONS):
            per_pass = _per_element(node)
        if per_pass and first is not None and (found is None or first > found):
            found = first
        stack.extend(ast.iter_child_nodes(node))
    return found


# Calls whose arguments are sizes, counts or bounds the host must know: ``range(n)``, torch's
# factories and the shape methods. A value read back into one sets a shape, not a number to log.
_SIZE_CALLS = frozenset(
    {
        "range",
        "arange",
        "zeros",
        "ones",
        "empty",
        "full",
        "rand",
        "randn",
        "randint",
        "randperm",
        "linspace",
        "eye",
        "new_zeros",
        "new_ones",
        "new_empty",
        "new_full",
        "view",
        "reshape",
        "expand",
        "narrow",
        "repeat",
        "topk",
        "multinomial",
    }
)
# Of those, the keywords that are sizes, the calls whose second argument is a fill value,
# and the functions of ``torch`` that take the tensor first.
_SIZE_KEYWORDS = frozenset(
    {"size", "start", "end", "step", "steps", "low", "high", "n", "m", "k", "length", "num_samples"}
)
_FILLS = frozenset({"full", "new_full"})
_TENSOR_FIRST = frozenset({"view", "reshape", "expand", "narrow", "repeat", "topk", "multinomial"})
# Explicit reads of one value (``t.item()``, ``int(t)``).
_READ_METHODS = frozenset({"item"})
_READ_FUNCTIONS = frozenset({"int"})


def read_as_size(
    scope: ast.AST, line: int, frameless: bool = False, module: ast.AST | None = None
) -> bool:
    """Whether a scalar read at ``line`` sets a size on the host: the read (``t.item()``,
    ``int(t)``; with ``frameless``, any expression but a Python number, as an implicit
    ``__index__`` reads the tensor itself) is a slice bound or an argument of a size-taking
    call (``range``, a factory, a shape method). Such a value cannot stay on the device.
    ``module``: where names ``scope`` does not bind are looked up (the chatbot tutorial's
    ``range(batch_size)`` of a module's ``batch_size = 64``, beside the elements its line
    reads, is no read)."""
    for statement in _statements_at(scope, line):
        stack: list[tuple[ast.AST, bool]] = [(statement, False)]
        while stack:
            node, in_size = stack.pop()
            if (
                in_size
                and getattr(node, "lineno", line) == line
                and _reads_a_value(node, frameless)
                and not (
                    frameless
                    and isinstance(node, ast.expr)
                    and _host_made(scope, node, line, module=module)
                )
            ):
                return True
            for child in ast.iter_child_nodes(node):
                stack.append((child, in_size or _is_size_position(node, child)))
    return _bound_read_used_as_size(scope, line)


def _bound_read_used_as_size(scope: ast.AST, line: int) -> bool:
    """Whether ``line`` binds a name to a read (``ptr = int(self.bank_ptr)``) that a later
    line, before the name is bound again, uses as a slice bound or a size (``self.bank[ptr :
    ptr + batch_size] = ...``): a walk of lightly's memory bank, whose queue pointer was told
    to stay on the device, though each step's slice needs it on the host."""
    statements = _statements_at(scope, line)
    if len(statements) != 1 or not isinstance(statements[0], ast.Assign):
        return False
    assign = statements[0]
    if not (
        len(assign.targets) == 1
        and isinstance(assign.targets[0], ast.Name)
        and _reads_a_value(assign.value, False)
    ):
        return False
    name = assign.targets[0].id
    rebound = min(
        (at for at, _value in _bindings(scope, name) if at > line), default=_AFTER_EVERY_LINE
    )
    stack: list[tuple[ast.AST, bool]] = [(scope, False)]
    while stack:
        node, in_size = stack.pop()
        if isinstance(node, _NESTED_SCOPES) and node is not scope:
            continue
        if (
            in_size
            and isinstance(node, ast.Name)
            and node.id == name
            and line < node.lineno < rebound
        ):
            return True
        for child in ast.iter_child_nodes(node):
            stack.append((child, in_size or _is_size_position(node, child)))
    return False


def reads_elements(scope: ast.AST, line: int) -> bool:
    """Whether every value read at ``line`` (``int(i)``, ``i.item()``, ``float(i)``) is the
    plain target of a ``for`` loop or a comprehension around the line, over anything but
    ``range()``: an element of a tensor (or of a list of them), read one at a time where
    one ``.tolist()`` would read them all (chargpt's ``[itos[int(i)] for i in y]``)."""
    iterables: dict[str, ast.expr] = {}
    filled: set[str] = set()  # tensors a loop around the line writes element by element
    for node, _ in [(scope, None), *_scope_walk(scope)]:
        if isinstance(node, (ast.For, ast.AsyncFor)):
            pairs = [(node.target, node.iter)]
        elif isinstance(node, _COMPREHENSIONS):
            pairs = [(g.target, g.iter) for g in node.generators]
        else:
            continue
        if node.lineno <= line <= (node.end_lineno or node.lineno):
            iterables.update((t.id, i) for t, i in pairs if isinstance(t, ast.Name))
            # ``for tag, conf in zip(tags, confs)`` (flair's decoding, a walk): each name an
            # element of its own iterable.
            for target, iterable in pairs:
                if isinstance(target, (ast.Tuple, ast.List)):
                    iterables.update(_zipped_names(target, iterable, _varargs(scope)))
            if isinstance(node, (ast.For, ast.AsyncFor)):
                filled.update(_filled_by_element(node))
    roots = [scope] if isinstance(scope, _COMPREHENSIONS) else _statements_at(scope, line)
    receivers: list[ast.expr] = _read_receivers(roots, line)
    if not receivers:
        # No call reads: a truth test or an index reads the elements (a CRNN decode's
        # ``[alphabet[i - 1] for i in t]`` and ``for i in range(n): if t[i] != 0:``, 84 %
        # of a walk's reads, were told to read every N steps and not to branch), or an
        # f-string formats them (TransformerLens' demo's ``f"L{layer}H{head}"``).
        receivers = (
            [
                statement.test
                for statement in roots
                if isinstance(statement, (ast.If, ast.While, ast.Assert))
                and statement.test.lineno == line
            ]
            + _subscript_operands(roots, line)
            + _constructor_elements(roots, line)
            + _formatted_values(roots, line)
        )
    # Names the loop's body binds before the line from its elements (``layer = head //
    # n_heads``), as what they are bound to.
    derived, loop_bound = _loop_body_bindings(scope, line, iterables)
    receivers = [_through(r, derived) for r in receivers]
    # An index that is a Python number (``t[i]`` of a ``range()`` loop's ``i``) reads nothing.
    # A tensor the loop fills as it goes (a decoder's ``tokens[t] = out.argmax()`` then ``if
    # tokens[t] == eos:``) cannot be converted before it: not an element read.
    kinds = [_element_of_a_loop(r, iterables, filled, loop_bound) for r in receivers]
    kinds = [kind for kind in kinds if kind != "plain"]
    return bool(kinds) and all(kind == "element" for kind in kinds)


# torch's legacy constructors of CPU tensors (``torch.cuda.LongTensor`` is the GPU's): a
# flair walk's ``lengths = torch.LongTensor(lengths)`` of a list, read as a GPU tensor's 379
# times in 5 steps, where ``torch.tensor(lengths)`` was known to be the host's.
_LEGACY_CONSTRUCTORS = frozenset(
    {
        "Tensor",
        "LongTensor",
        "FloatTensor",
        "IntTensor",
        "BoolTensor",
        "DoubleTensor",
        "HalfTensor",
        "ByteTensor",
        "ShortTensor",
        "CharTensor",
    }
)
# Calls that make a tensor from Python data, reading each tensor element given to them.
_TENSOR_CONSTRUCTORS = frozenset({"tensor", "as_tensor"}) | _LEGACY_CONSTRUCTORS


def _constructor_elements(roots: Sequence[ast.AST], line: int) -> list[ast.expr]:
    """The elements given to a tensor constructor on ``line`` in a list or comprehension
    (``torch.LongTensor([[topi[i][0] for i in range(n)]])``: each ``topi[i][0]``)."""
    elements: list[ast.expr] = []
    for root in roots:
        for node in ast.walk(root):
            if (
                getattr(node, "lineno", None) == line
                and _call_name(node) in _TENSOR_CONSTRUCTORS
                and node.args  # type: ignore[attr-defined]
            ):
                pending = [node.args[0]]  # type: ignore[attr-defined]
                while pending:
                    value = pending.pop()
                    if isinstance(value, (ast.List, ast.Tuple)):
                        pending.extend(value.elts)
                    elif isinstance(value, (ast.ListComp, ast.GeneratorExp)):
                        pending.append(value.elt)
                    elif not isinstance(value, ast.Constant):
                        elements.append(value)
    return elements


def _filled_by_element(loop: ast.For | ast.AsyncFor) -> set[str]:
    """The names a loop's body assigns through an index (``tokens[t] = ...``)."""
    names: set[str] = set()
    for node in ast.walk(loop):
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        else:
            continue
        for target in targets:
            if isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name):
                names.add(target.value.id)
    return names


def _formatted_values(roots: Sequence[ast.AST], line: int) -> list[ast.expr]:
    """The values an f-string on ``line`` formats."""
    return [
        value.value
        for root in roots
        for node in ast.walk(root)
        if isinstance(node, ast.JoinedStr) and getattr(node, "lineno", None) == line
        for value in node.values
        if isinstance(value, ast.FormattedValue)
    ]


def _loop_body_bindings(
    scope: ast.AST, line: int, iterables: Mapping[str, ast.expr]
) -> tuple[dict[str, ast.expr], set[str]]:
    """The plain ``name = value`` of the ``for`` loops' bodies around ``line``, before it,
    of names the loops do not bind themselves: the one binding of each (none where bound
    twice); and every name those bodies bind, anyhow (what a pass computes)."""
    found: dict[str, ast.expr] = {}
    twice: set[str] = set()
    bound: set[str] = set()
    for node, _ in _scope_walk(scope):
        if not (
            isinstance(node, (ast.For, ast.AsyncFor))
            and node.lineno < line <= (node.end_lineno or node.lineno)
        ):
            continue
        for inner in node.body:
            for sub in ast.walk(inner):
                if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Store):
                    bound.add(sub.id)
        for statement in node.body:
            if statement.lineno >= line:
                break
            if (
                isinstance(statement, ast.Assign)
                and len(statement.targets) == 1
                and isinstance(statement.targets[0], ast.Name)
            ):
                name = statement.targets[0].id
                if name in iterables:
                    continue
                if name in found:
                    twice.add(name)
                found[name] = statement.value
    return {name: value for name, value in found.items() if name not in twice}, bound


def _through(expr: ast.expr, derived: Mapping[str, ast.expr]) -> ast.expr:
    """``expr`` with the names of ``derived`` replaced by what they are bound to (one level
    of each, in names and arithmetic)."""
    if isinstance(expr, ast.Name) and expr.id in derived:
        return derived[expr.id]
    if isinstance(expr, ast.BinOp):
        return ast.BinOp(_through(expr.left, derived), expr.op, _through(expr.right, derived))
    return expr


def _varargs(scope: ast.AST) -> frozenset[str]:
    """The names of a function's ``*args`` and ``**kwargs``: tuples of its arguments."""
    args = getattr(scope, "args", None)
    if not isinstance(args, ast.arguments):
        return frozenset()
    return frozenset(a.arg for a in (args.vararg, args.kwarg) if a is not None)


def _zipped_names(
    target: ast.Tuple | ast.List, iterable: ast.expr, varargs: Collection[str] = ()
) -> dict[str, ast.expr]:
    """Each plain name of a loop's tuple target over ``zip(a, b, ...)`` (through ``list(...)``
    and a slice of it, ``list(zip(a, b))[:n]``), with the iterable it is an element of; not
    over a function's ``*args`` (d2l's ``Accumulator.add``: ``[a + float(b) for a, b in
    zip(self.data, args)]`` reads one value an argument, a walk)."""
    while True:
        if isinstance(iterable, ast.Subscript) and isinstance(iterable.slice, ast.Slice):
            iterable = iterable.value
        elif (
            isinstance(iterable, ast.Call)
            and isinstance(iterable.func, ast.Name)
            and iterable.func.id in ("list", "tuple")
            and len(iterable.args) == 1
        ):
            iterable = iterable.args[0]
        else:
            break
    if not (
        isinstance(iterable, ast.Call)
        and isinstance(iterable.func, ast.Name)
        and iterable.func.id == "zip"
        and not iterable.keywords
        and len(iterable.args) == len(target.elts)
        and not any(isinstance(a, ast.Starred) for a in iterable.args)
    ):
        return {}
    return {
        part.id: source
        for part, source in zip(target.elts, iterable.args, strict=True)
        if isinstance(part, ast.Name)
        and not (isinstance(source, ast.Name) and source.id in varargs)
    }


def _bound_outside(expr: ast.expr, loop_bound: Collection[str]) -> bool:
    """Whether ``expr`` is a name (or an attribute of one) the loops around do not bind."""
    while isinstance(expr, ast.Attribute):
        expr = expr.value
    return isinstance(expr, ast.Name) and expr.id not in loop_bound


def _element_of_a_loop(
    expr: ast.expr,
    iterables: dict[str, ast.expr],
    filled: Collection[str] = (),
    loop_bound: Collection[str] = (),
) -> str | None:
    """ "element" where ``expr`` is an element of what a loop around iterates, or arithmetic
    and tests of such elements with Python numbers: the target of a loop over anything but
    ``range()`` (``for i in t``), or an index by a ``range()`` loop's target (``t[i]``,
    ``t[i - 1]``); "plain" for a constant or a ``range()`` loop's target (a Python int);
    None for anything else."""
    if isinstance(expr, ast.Constant):
        return "plain"
    if isinstance(expr, ast.Name):
        iterable = iterables.get(expr.id)
        if iterable is None:
            return None
        return "plain" if _is_range(iterable) else "element"
    if isinstance(expr, ast.Subscript):
        if isinstance(expr.value, ast.Name) and expr.value.id in filled:
            return None
        index = _element_of_a_loop(expr.slice, iterables, filled, loop_bound)
        if index == "plain" and _names_a_range_target(expr.slice, iterables):
            return "element"
        # A part of an element by a constant index (``topi[i][0]``, ``row[0]``).
        if isinstance(expr.slice, ast.Constant) and (
            _element_of_a_loop(expr.value, iterables, filled, loop_bound) == "element"
        ):
            return "element"
        return None
    if isinstance(expr, (ast.BinOp, ast.UnaryOp, ast.Compare, ast.BoolOp)):
        if isinstance(expr, ast.BinOp):
            parts = [expr.left, expr.right]
        elif isinstance(expr, ast.UnaryOp):
            parts = [expr.operand]
        elif isinstance(expr, ast.Compare):
            parts = [expr.left, *expr.comparators]
        else:
            parts = list(expr.values)
        kinds = [_element_of_a_loop(part, iterables, filled, loop_bound) for part in parts]
        if (
            "element" in kinds
            and isinstance(expr, ast.BinOp)
            and all(
                kind is not None or _bound_outside(part, loop_bound)
                for part, kind in zip(parts, kinds, strict=True)
            )
        ):
            # An element with an operand the loop does not make (``head // n_heads``): a
            # read of each element still, converted once as ``(heads // n_heads).tolist()``.
            # Not one the pass computes (``y - model(x)``, an RNN's hidden state: a review).
            return "element"
        if None in kinds:
            return None
        return "element" if "element" in kinds else "plain"
    reduced = _reduced(expr)
    if (
        reduced is not None
        and _element_of_a_loop(reduced, iterables, filled, loop_bound) == "element"
    ):
        # A reduction of an element, a tensor of a list (Captum's ``sum(torch.sum(mask)
        # .item() for mask in masks)``): a read each, where one ``torch.stack`` reads all.
        return "element"
    return None


# Reductions of one tensor to a value, read one per element of a list of tensors.
_ELEMENT_REDUCTIONS = frozenset(
    {"sum", "max", "min", "mean", "prod", "norm", "amax", "amin", "count_nonzero", "any", "all"}
)


def _reduced(expr: ast.expr) -> ast.expr | None:
    """What ``expr`` reduces, where it is a reduction with constant arguments of one tensor:
    ``m.sum()``, ``torch.max(m)``; None otherwise."""
    if not (isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute)):
        return None
    if expr.func.attr not in _ELEMENT_REDUCTIONS or expr.keywords:
        return None
    receiver = expr.func.value
    if isinstance(receiver, ast.Name) and receiver.id == "torch":
        if not expr.args or not all(isinstance(a, ast.Constant) for a in expr.args[1:]):
            return None
        return expr.args[0]
    if not all(isinstance(a, ast.Constant) for a in expr.args):
        return None
    return receiver


def _names_a_range_target(expr: ast.expr, iterables: dict[str, ast.expr]) -> bool:
    return any(
        isinstance(n, ast.Name) and n.id in iterables and _is_range(iterables[n.id])
        for n in ast.walk(expr)
    )


# Calls that draw a random value from what a model computed, or choose one: a
# distribution's ``sample()``, ``torch.multinomial`` / ``probs.multinomial``, a greedy
# ``q.argmax()`` (DQN's action, greedy decoding's token).
_SAMPLING_CALLS = frozenset({"sample", "multinomial", "argmax", "argmin"})
_DRAWING_CALLS = frozenset({"sample", "multinomial"})


def reads_sample(scope: ast.AST, line: int) -> bool:
    """Whether every value read at ``line`` (``action.item()``) is one drawn by a sampling
    call (``_SAMPLING_CALLS``), on the line or bound to a name every value of which before
    the line is one, through methods of constant arguments (``.squeeze(0)``): an action
    for an environment, a token to decode, which the host needs at once (pytorch/examples'
    actor_critic and reinforce read ``m.sample().item()`` every environment step), or
    copies to the host (CleanRL's ``envs.step(action.cpu().numpy())``: the same need)."""
    roots = _statements_at(scope, line)
    reads = _read_receivers(roots, line)
    copies = _read_receivers(roots, line, _copy_receiver)
    listed = _read_receivers(roots, line, _tolist_receiver)
    # Greedy picks given to an environment's ``step`` (a DQN's ``envs.step(actions)``) are
    # needed at once as drawn ones are; elsewhere a batch's copy or ``.tolist()`` of them is
    # an evaluation's or a library's targets as often as not (``preds.append(out.argmax(1)
    # .cpu())``; a Captum walk's ``model(x).argmax(1).tolist()`` told to "choose for many
    # at once"): only a drawn sample's is.
    stepped = _given_to_a_step(scope, roots, line)
    if listed and not stepped and not all(_sampled(scope, r, line, _DRAWING_CALLS) for r in listed):
        return False
    return bool(reads or copies) and (
        all(_sampled(scope, r, line) for r in reads)
        and all(
            _sampled(scope, r, line, _SAMPLING_CALLS if stepped else _DRAWING_CALLS) for r in copies
        )
    )


def _given_to_a_step(scope: ast.AST, roots: Sequence[ast.AST], line: int) -> bool:
    """Whether what ``line`` reads goes to an environment's ``step`` (a call of ``step``
    on anything but an optimizer, a scheduler or a profiler): on the line (``envs.step(
    action.cpu().numpy())``), or through the name the line binds, on a later line
    (``actions = q.argmax(1).tolist()`` then ``envs.step(actions)``)."""

    def steps_with(node: ast.AST, names: set[str] | None) -> bool:
        for call in ast.walk(node):
            if not (isinstance(call, ast.Call) and _call_name(call) == "step" and call.args):
                continue
            receiver = _receiver_name(call)
            if _names_an_optimizer(receiver):
                continue
            name = (receiver or "").lower()
            if "sched" in name or "prof" in name or name in ("scaler", "lr"):
                continue  # a scheduler's, a profiler's, a grad scaler's step
            if names is None or any(
                isinstance(n, ast.Name) and n.id in names
                for arg in call.args
                for n in ast.walk(arg)
            ):
                return True
        return False

    if any(steps_with(root, None) for root in roots if getattr(root, "lineno", 0) == line):
        return True
    bound = {
        name
        for root in roots
        if isinstance(root, ast.Assign)
        for target in root.targets
        for name in _names_bound_by(target)
    }
    if not bound:
        return False
    # The statements of the next few lines (an agent's step reads its actions, then steps).
    return any(
        isinstance(node, ast.stmt) and line < node.lineno <= line + 5 and steps_with(node, bound)
        for node in ast.walk(scope)
    )


def _method_receiver(node: ast.AST, method: str) -> ast.expr | None:
    """What a call of ``method`` without arguments is called on, else None."""
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == method
        and not node.args
    ):
        return node.func.value
    return None


def _tolist_receiver(node: ast.AST) -> ast.expr | None:
    """The tensor a ``.tolist()`` call reads, else None."""
    return _method_receiver(node, "tolist")


def _copy_receiver(node: ast.AST) -> ast.expr | None:
    """The tensor a ``.cpu()`` call copies to the host, else None."""
    return _method_receiver(node, "cpu")


def _sampled(
    scope: ast.AST,
    expr: ast.expr,
    line: int,
    calls: frozenset[str] = _SAMPLING_CALLS,
    depth: int = 0,
) -> bool:
    while isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute):
        if expr.func.attr in calls:
            return True
        if not _constant_arguments(expr):
            return False
        expr = expr.func.value
    if isinstance(expr, ast.Name) and depth < 3:
        values = _reaching_values(scope, expr.id, line)
        return bool(values) and all(
            value is not None
            and _sampled(scope, value, getattr(value, "lineno", line), calls, depth + 1)
            for value in values
        )
    return False


# What a model is put in a mode by, or reached through, on its way to be saved
# (``net.module.eval().cpu()``): calls of these, without arguments, keep it the model.
_MODEL_CHAIN_METHODS = frozenset({"eval", "train", "cpu", "float", "half", "double"})


def _model_chain_root(expr: ast.expr | None) -> str | None:
    """The name a model expression starts from: attributes and argument-free mode calls
    (``net``, ``self.net.module``, ``net.eval()``); None for anything that computes
    (``self.model(x)``, ``x.softmax(-1)``): that is a tensor, not a model."""
    while True:
        if isinstance(expr, ast.Attribute):
            expr = expr.value
        elif (
            isinstance(expr, ast.Call)
            and isinstance(expr.func, ast.Attribute)
            and expr.func.attr in _MODEL_CHAIN_METHODS
            and not expr.args
            and not expr.keywords
        ):
            expr = expr.func.value
        else:
            return expr.id if isinstance(expr, ast.Name) else None


def _saved_state(call: ast.Call) -> str | None:
    """The model whose ``state_dict()`` a ``torch.save(...)`` call saves
    (``_model_chain_root`` of ``X`` in ``torch.save(X.state_dict(), path)``), else None."""
    if _call_name(call) != "save" or _receiver_name(call) != "torch" or not call.args:
        return None
    saved = call.args[0]
    if not (
        isinstance(saved, ast.Call)
        and isinstance(saved.func, ast.Attribute)
        and saved.func.attr == "state_dict"
    ):
        return None
    return _model_chain_root(saved.func.value)


def host_use(scope: ast.AST, line: int) -> str | None:
    """The host call that takes what ``line`` copies to the host (a ``.cpu()``) at once,
    as ``catalogue.HOST_USE_ADVICE`` names it: ``torch.save`` of it on the line (a
    checkpoint, CycleGAN's ``torch.save(net.module.cpu().state_dict(), path)``), or
    scipy's ``linear_sum_assignment`` given, later in the scope, the name the line binds
    (DETR's Hungarian matcher, ``C = C.view(bs, q, -1).cpu()``). None for any other copy:
    such a copy cannot be deferred, only made once for many. For a line that copies
    nothing: ``logging`` where it builds a logger's message (``logger.info(f"{loss}")``),
    whose read is made at once, shown or not."""
    roots = _statements_at(scope, line)
    copies = [
        node
        for root in roots
        for node in ast.walk(root)
        if getattr(node, "lineno", None) == line and _copy_receiver(node) is not None
    ]
    if not copies:
        # A logger's message built on the line: ``logger.info(f"loss {loss}")`` formats the
        # tensor before the logger looks at its level (a walk: a read a step, nothing shown).
        eager = any(
            _builds_a_log_message(node)
            for root in roots
            for node in ast.walk(root)
            if getattr(node, "lineno", None) == line
        )
        return "logging" if eager else None
    # Copies of a model (``net.module.cpu()``), not of what it computed (``model(x).cpu()``).
    moved = {
        name for copy in copies if (name := _model_chain_root(_copy_receiver(copy))) is not None
    }
    for root in roots:
        for call in ast.walk(root):
            if (
                isinstance(call, ast.Call)
                and _saved_state(call) is not None
                and any(node in copies for node in ast.walk(call.args[0]))
                and moved
            ):
                return "torch.save"
    bound = {
        name
        for root in roots
        if isinstance(root, ast.Assign) and any(node in copies for node in ast.walk(root.value))
        for target in root.targets
        for name in _names_bound_by(target)
    }
    for node in ast.walk(scope):
        # ``transformer.eval().cpu()``, then ``torch.save(transformer.state_dict(), path)``
        # lines later (pytorch/examples' fast_neural_style): the model moved to be saved.
        if (
            moved
            and isinstance(node, ast.Call)
            and node.lineno > line
            and _saved_state(node) in moved
        ):
            return "torch.save"
    if not bound:
        return None
    for node in ast.walk(scope):
        if (
            isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Expr, ast.Return))
            and node.lineno > line
            and any(_call_name(c) == "linear_sum_assignment" for c in ast.walk(node))
            and any(isinstance(n, ast.Name) and n.id in bound for n in ast.walk(node))
        ):
            return "linear_sum_assignment"
    return None


# A logger's methods that take a message (``logger.log`` after its level).
_LOG_METHODS = frozenset(
    {"debug", "info", "warning", "warn", "error", "critical", "exception", "fatal", "log"}
)


def _builds_a_log_message(node: ast.AST) -> bool:
    """Whether ``node`` calls a logger (a receiver named like one: ``logger``, ``log``,
    ``logging``, ``self.logger``) with a message formatted in the call, an f-string with a
    value, ``"...".format(...)`` or ``"..." % ...``: built whether or not the level is on,
    where the logger's own ``%`` arguments are formatted only when the message is shown."""
    if not (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in _LOG_METHODS
    ):
        return False
    receiver = _receiver_name(node)
    if receiver is None or "log" not in receiver.lower():
        return False
    args = node.args[1:] if node.func.attr == "log" else node.args
    if not args:
        return False
    message = args[0]
    if isinstance(message, ast.JoinedStr):
        return any(isinstance(value, ast.FormattedValue) for value in message.values)
    if isinstance(message, ast.Call) and isinstance(message.func, ast.Attribute):
        formatted = message.func.value
        return message.func.attr == "format" and (
            isinstance(formatted, ast.Constant) and isinstance(formatted.value, str)
        )
    return (
        isinstance(message, ast.BinOp)
        and isinstance(message.op, ast.Mod)
        and isinstance(message.left, ast.Constant)
        and isinstance(message.left.value, str)
    )


def calls_a_mean_ctc_loss_module(scope: ast.AST, line: int, module: ast.AST) -> bool:
    """Whether a call on ``line`` is of an ``nn.CTCLoss`` made with the mean reduction (given
    or by default; ``CTCLoss(blank, reduction, zero_infinity)``): ``criterion(preds, text,
    preds_size, length)`` of a ``criterion = nn.CTCLoss()``, bound in ``scope``, the module,
    or as an attribute (``self.criterion = ...``) anywhere in the file. Such a call waits on
    a GPU as ``F.ctc_loss(...)`` written out does (``catalogue.ctc_waits_by_line``); a
    CRNN walk's 28 calls of one were never listed."""
    for statement in _statements_at(scope, line):
        for call in ast.walk(statement):
            if not isinstance(call, ast.Call) or call.lineno != line:
                continue
            func = call.func
            values: list[ast.expr | None] = []
            if isinstance(func, ast.Name):
                # ``criterion = criterion.cuda()`` moves the same loss: the bindings that made it.
                values = [
                    v
                    for v in _reaching_values(scope, func.id, line)
                    if v is not None and not _moves_itself(v, func.id)
                ]
                if not values:
                    values = [v for _at, v in _bindings(scope, func.id)]
                if not values:  # a parameter (``def train(net, criterion, ...)``): the module's
                    values = _reaching_values(module, func.id, _AFTER_EVERY_LINE)
                values = [v for v in values if not _moves_itself(v, func.id)]
            elif isinstance(func, ast.Attribute):
                values = [
                    node.value
                    for node in ast.walk(module)
                    if isinstance(node, ast.Assign)
                    and any(
                        isinstance(t, ast.Attribute) and t.attr == func.attr for t in node.targets
                    )
                ]
            if values and all(_makes_a_mean_ctc_loss(value) for value in values):
                return True
    return False


def _moves_itself(value: ast.expr | None, name: str) -> bool:
    """Whether ``value`` is ``name.cuda()``, ``name.to(...)`` or the like: the same module."""
    return (
        isinstance(value, ast.Call)
        and isinstance(value.func, ast.Attribute)
        and value.func.attr in ("cuda", "to", "cpu")
        and isinstance(value.func.value, ast.Name)
        and value.func.value.id == name
    )


def _makes_a_mean_ctc_loss(value: ast.expr | None) -> bool:
    # ``nn.CTCLoss(zero_infinity=True).to(device)``: the loss made, then moved.
    while (
        isinstance(value, ast.Call)
        and isinstance(value.func, ast.Attribute)
        and value.func.attr in ("cuda", "to", "cpu")
    ):
        value = value.func.value
    if not (isinstance(value, ast.Call) and _call_name(value) == "CTCLoss"):
        return False
    reduction = next((kw.value for kw in value.keywords if kw.arg == "reduction"), None)
    if reduction is None and len(value.args) > 1:
        reduction = value.args[1]
    if any(kw.arg is None for kw in value.keywords) or any(
        isinstance(arg, ast.Starred) for arg in value.args
    ):
        return False  # ``**kwargs``: the reduction is not in the source
    return reduction is None or (isinstance(reduction, ast.Constant) and reduction.value == "mean")


def _is_range(node: ast.expr) -> bool:
    return (
        isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "range"
    )


def _bool_flags(scope: ast.AST) -> frozenset[str]:
    """``scope``'s parameters that are flags, annotated ``bool`` or with a default of
    ``True`` or ``False``, and bound nowhere else in it: a test of one reads no tensor
    (PyKEEN's ``if backward:`` of ``backward: bool = True`` beside its ``isfinite`` read
    left that line marked)."""
    args = getattr(scope, "args", None)
    if not isinstance(args, ast.arguments):
        return frozenset()
    positional = [*args.posonlyargs, *args.args]
    defaults: dict[str, ast.expr] = dict(
        zip(
            (a.arg for a in positional[len(positional) - len(args.defaults) :]),
            args.defaults,
            strict=True,
        )
    )
    defaults.update(
        (a.arg, d) for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True) if d is not None
    )
    flags = {
        arg.arg
        for arg in (*positional, *args.kwonlyargs)
        if (isinstance(arg.annotation, ast.Name) and arg.annotation.id == "bool")
        or (
            isinstance(defaults.get(arg.arg), ast.Constant)
            and isinstance(defaults[arg.arg].value, bool)  # type: ignore[union-attr]
        )
    }
    rebound = {
        node.id
        for node in ast.walk(scope)
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store)
    }
    return frozenset(flags - rebound)


def _loop_counters(scope: ast.AST) -> frozenset[str]:
    """Names ``scope`` binds only as a loop's counter, a Python int: the index of ``for i,
    x in enumerate(...)`` or the target of ``for i in range(...)`` (in a comprehension
    too). An index by one (``results[i]``) reads no tensor (DETR's ``PostProcessSegm``:
    its slice bounds were not told from the ``results[i]["masks"]`` beside them)."""
    counters: set[str] = set()
    other: set[str] = set()
    pending: list[ast.AST] = list(ast.iter_child_nodes(scope))
    if isinstance(scope, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
        args = scope.args
        for arg in (*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg):
            if arg is not None:
                other.add(arg.arg)
    while pending:
        node = pending.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            other.add(getattr(node, "name", ""))
            continue
        if isinstance(node, (ast.For, ast.AsyncFor, ast.comprehension)):
            target, iterable = node.target, node.iter
            counter = None
            if isinstance(target, ast.Name) and _is_range(iterable):
                counter = target
            elif (
                isinstance(target, ast.Tuple)
                and target.elts
                and isinstance(target.elts[0], ast.Name)
                and _call_name(iterable) == "enumerate"
            ):
                counter = target.elts[0]
                other.update(n for e in target.elts[1:] for n in _names_bound_by(e))
            if counter is not None:
                counters.add(counter.id)
            else:
                other.update(_names_bound_by(target))
        pending.extend(ast.iter_child_nodes(node))
    # Any other binding of a counter's name (an assignment, ``+=``, a ``with`` target) makes
    # it something else there.
    for node in ast.walk(scope):
        if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.NamedExpr)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                other.update(_names_bound_by(target))
        elif isinstance(node, (ast.With, ast.AsyncWith)):
            for item in node.items:
                if item.optional_vars is not None:
                    other.update(_names_bound_by(item.optional_vars))
    return frozenset(counters - other)


def _dict_lookups(scope: ast.AST) -> frozenset[int]:
    """The ids of ``scope``'s subscripts whose result is subscripted by a string
    (``METRICS[mode]`` of ``METRICS[mode]["acc"]``): a tensor takes no string index, so the
    value looked up is no tensor and the lookup indexes none (TRL's
    ``self._metrics[mode]["..."]`` beside its masks made their lines inexact)."""
    return frozenset(
        id(node.value)
        for node in ast.walk(scope)
        if isinstance(node, ast.Subscript)
        and isinstance(node.value, ast.Subscript)
        and isinstance(node.slice, ast.Constant)
        and isinstance(node.slice.value, str)
    )


def _read_receivers(
    roots: Sequence[ast.AST],
    line: int,
    receiver_of: Callable[[ast.AST], ast.expr | None] | None = None,
) -> list[ast.expr]:
    """The tensors the value-reading calls on ``line`` under ``roots`` read
    (``_read_receiver``), or those another kind of call takes (``_copy_receiver``)."""
    receiver_of = receiver_of or _read_receiver
    return [
        receiver
        for root in roots
        for node in ast.walk(root)
        if getattr(node, "lineno", None) == line and (receiver := receiver_of(node)) is not None
    ]


# ``with torch.device("cuda"):`` makes the factories in it put their tensors there too.
_DEFAULT_DEVICE_SET = re.compile(
    rb"set_default_device|set_default_tensor_type|\bwith\b[^\n]*\btorch\.device\s*\("
)
# Of those, on a line that is no comment, the settings that may put another file's
# factories on a GPU: a default device given (unless the literal CPU or meta), a CUDA tensor
# type (``torch.cuda.FloatTensor``, nerf-pytorch's), a device context (unless CPU or meta).
_GPU_DEFAULT_SET = re.compile(
    rb"^[^#\n]*(?:set_default_device\s*\((?!\s*['\"](?:cpu|meta)['\"])"
    rb"|set_default_tensor_type\s*\([^\n]*cuda"
    rb"|\bwith\b[^\n]*\btorch\.device\s*\((?!\s*['\"](?:cpu|meta)['\"]))",
    re.MULTILINE,
)


# Calls that turn their arguments into text (a tensor's through its ``__format__``/``__str__``).
_TEXT_CALLS = frozenset({"print", "str", "repr", "format"})


def prints_host_values(scope: ast.AST, line: int, module: ast.AST | None = None) -> bool:
    """Whether every value the statement at ``line`` turns into text (the arguments of
    ``print``, ``str``, ``repr``, ``format``, an f-string's values, ``"...".format(...)``'s)
    is a host value (``_host_made``): a print of a ``.cpu()`` copy made on the line
    (TransformerLens' demo, ``print(..., x.detach().cpu().round(3))``: 21 reads a step a
    walk listed) waits for no GPU; only the copy does."""
    statements = _statements_at(scope, line)
    if not statements and isinstance(scope, (*_COMPREHENSIONS, ast.Lambda)):
        statements = [scope]
    printed: list[ast.expr] = []
    for statement in statements:
        for node in ast.walk(statement):
            if isinstance(node, ast.JoinedStr):
                printed += [v.value for v in node.values if isinstance(v, ast.FormattedValue)]
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                if node.func.id in _TEXT_CALLS:
                    printed += [a for a in node.args if not isinstance(a, ast.JoinedStr)]
            elif (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "format"
                and isinstance(node.func.value, ast.Constant)
            ):
                printed += list(node.args)
    return bool(printed) and all(
        isinstance(value, ast.Constant)  # a label printed beside it
        or (not isinstance(value, ast.Starred) and _host_made(scope, value, line, module=module))
        for value in printed
    )


def reads_host_made_tensor(
    scope: ast.AST, line: int, module: ast.AST | None = None, by_factory: bool = False
) -> bool:
    """Whether every read of a tensor's value at ``line`` (``.item()``, ``.tolist()``,
    ``float(t)``) is of a tensor made on the host from Python data: by ``torch.tensor``
    and the like without a ``device=`` (``catalogue.HOST_TENSOR_FACTORIES``), on that line
    or bound to a name every assignment of which in ``scope`` before the line is one, with
    only methods that keep its device between (``d.median().item()``). Such a read waits
    for no GPU: torchvision's ``SmoothedValue.median`` was a latent sync on every CPU
    trace, ranked first. False where any read may be of another tensor. ``module``: the
    file's, where the names a function does not bind are looked up. ``by_factory``: the
    reads ``torch.tensor([R])`` makes of the tensors its list holds (pytorch/examples'
    actor_critic reads each return so): each must be host-made, and every such call on
    the line must be of a list or tuple written out."""
    statements = _statements_at(scope, line)
    if not statements and isinstance(scope, (*_COMPREHENSIONS, ast.Lambda)):
        statements = [scope]  # an expression's frame: its reads are in it
    if by_factory:
        elements = _factory_elements(statements, line)
        return bool(elements) and all(
            _host_made(scope, element, line, module=module) for element in elements
        )
    reads = _read_receivers(statements, line)
    # A truth test on the line reads its tensor too (``if not correct[i]:`` of a ``.cpu()``
    # result, minGPT's adder): its tested values must all be host-made as well.
    tests = [
        statement.test
        for statement in statements
        if isinstance(statement, (ast.If, ast.While, ast.Assert)) and statement.test.lineno == line
    ]
    if not (reads or tests):
        # No call reads a value there: a subscript's index or slice bounds are read
        # through ``__index__`` (x-transformers' ``self.data[start : start + n]`` of a
        # ``torch.randint`` drawn on the host).
        reads = _subscript_operands(statements, line)
    return bool(reads or tests) and (
        all(_host_made(scope, receiver, line, module=module) for receiver in reads)
        and all(_host_truth(scope, test, line, module) for test in tests)
    )


def _subscript_operands(roots: Sequence[ast.AST], line: int) -> list[ast.expr]:
    """The indices and slice bounds (not written as numbers) of the subscripts on ``line``."""
    found: list[ast.expr] = []
    for root in roots:
        for node in ast.walk(root):
            if not isinstance(node, ast.Subscript) or node.lineno != line:
                continue
            parts = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
            for part in parts:
                bounds = (
                    [part.lower, part.upper, part.step] if isinstance(part, ast.Slice) else [part]
                )
                found += [b for b in bounds if b is not None and not isinstance(b, ast.Constant)]
    return found


def touches_only_host_values(scope: ast.AST, line: int, module: ast.AST | None = None) -> bool:
    """Whether every value the statement at ``line`` reads is on the host (``_host_made``),
    through the builtins, the module's functions whose results are on the host and known
    libraries' functions (which compute where they are given: ``catalogue.
    LIBRARY_PACKAGES``); no method of an object the code did not make on the host
    (``model(x)``, ``optimizer.step()``) and no move to a device. A mask, a read or a
    library's read on such a line waits for no GPU on a GPU run either: PyG's
    ``remove_self_loops(ei)`` on a loader's batch before its ``.to(device)``, ``h[h > 0]``
    of a helper's ``.cpu()`` result. False where the line holds anything else."""
    parts: list[ast.expr] = []
    for statement in _statements_at(scope, line):
        if isinstance(statement, (ast.If, ast.While)):
            parts.append(statement.test)
        elif isinstance(statement, (ast.For, ast.AsyncFor)):
            parts.append(statement.iter)
        elif isinstance(statement, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target]
            if statement.value is None:
                return False
            parts.append(statement.value)
            # ``x[mask] = 0`` writes through a mask: it reads ``x`` and ``mask``.
            parts += [n for t in targets for n in ast.walk(t) if isinstance(n, ast.Subscript)]
            if isinstance(statement, ast.AugAssign):
                parts.append(statement.target)
        elif isinstance(statement, (ast.Expr, ast.Return)) and statement.value is not None:
            parts.append(statement.value)
        else:
            return False
    if not parts and isinstance(scope, _COMPREHENSIONS):
        parts = [scope]  # a comprehension's own frame: its expression is the line's
    return bool(parts) and all(_host_only(scope, part, line, module) for part in parts)


def _host_only(scope: ast.AST, expr: ast.expr, line: int, module: ast.AST | None) -> bool:
    """Whether evaluating ``expr`` reads host values only (``touches_only_host_values``)."""

    def each(parts: Iterable[ast.expr | None]) -> bool:
        return all(p is None or _host_only(scope, p, line, module) for p in parts)

    if isinstance(expr, ast.Constant):
        return True
    if isinstance(expr, ast.Name):
        return _host_made(scope, expr, line, module=module)
    if isinstance(expr, (ast.BinOp, ast.Compare, ast.BoolOp, ast.List, ast.Tuple, ast.Set)):
        return each(_operands(expr) if not isinstance(expr, ast.Set) else expr.elts)
    if isinstance(expr, ast.UnaryOp):
        return _host_only(scope, expr.operand, line, module)
    if isinstance(expr, ast.IfExp):
        return each((expr.test, expr.body, expr.orelse))
    if isinstance(expr, ast.Dict):
        return each(expr.keys) and each(expr.values)
    if isinstance(expr, (ast.Starred, ast.FormattedValue)):
        return _host_only(scope, expr.value, line, module)
    if isinstance(expr, ast.JoinedStr):
        return each(expr.values)
    if isinstance(expr, ast.Slice):
        return each((expr.lower, expr.upper, expr.step))
    if isinstance(expr, ast.Subscript):
        return each((expr.value, expr.slice))
    if isinstance(expr, ast.Attribute):
        return _constant_value(expr) or _host_only(scope, expr.value, line, module)
    if isinstance(expr, _COMPREHENSIONS) and module is not None:
        # Its parts read in its own scope: its variables are elements of what it iterates,
        # its other names the scopes' around it.
        parts = [
            *(g.iter for g in expr.generators),
            *(test for g in expr.generators for test in g.ifs),
            *(getattr(expr, name) for name in ("elt", "key", "value") if hasattr(expr, name)),
        ]
        return all(_host_only(expr, part, line, module) for part in parts)
    if not isinstance(expr, ast.Call):
        return False  # a lambda: not followed
    if not (each(expr.args) and each(k.value for k in expr.keywords)):
        return False
    func = expr.func
    if isinstance(func, ast.Name):
        if module is not None and (
            _module_def(module, scope, func) is not None
            or _library_function(module, scope, func) is not None
        ):
            return _host_made(scope, expr, line, module=module)
        return (
            func.id in _BUILTINS
            and not _assigned_before(scope, func.id, _AFTER_EVERY_LINE)
            # Not rebound by the module either (``print = log.info``).
            and not (
                module is not None and (_imports(module).get(func.id) or _bindings(module, func.id))
            )
        )
    if not isinstance(func, ast.Attribute):
        return False
    # A module's function is called by a dotted name; a method of a call's result
    # (``torch.nonzero(m).flatten()``) is the result's, read as one below.
    root = _dotted_root(func)
    if root is not None and (root == "torch" or (module is not None and root in _imports(module))):
        # A module's function: a known library's that stays on the host, or not known.
        return (
            module is not None
            and _library_function(module, scope, func) is not None
            and _host_made(scope, expr, line, module=module)
        )
    if func.attr in DEVICE_MOVES and not _moved_to_host(expr):
        return False
    return _host_only(scope, func.value, line, module)  # a method of a host value


def _factory_elements(statements: Sequence[ast.AST], line: int) -> list[ast.expr]:
    """The values ``torch.tensor([...])`` / ``torch.as_tensor((...))`` calls on ``line``
    read (the elements of their written-out list, numbers aside); empty where one such
    call is given anything else (``torch.tensor(losses)``: what it holds is not known)."""
    elements: list[ast.expr] = []
    for root in statements:
        for node in ast.walk(root):
            if not (
                getattr(node, "lineno", None) == line
                and isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("tensor", "as_tensor")
                and isinstance(node.func.value, ast.Name)
                and node.func.value.id == "torch"
                and node.args
            ):
                continue
            data = node.args[0]
            if not isinstance(data, (ast.List, ast.Tuple)):
                return []
            elements += [e for e in data.elts if not _host_number(e)]
    return elements


def _host_number(node: ast.expr) -> bool:
    """A number written out (``1e-8``, ``-1``, ``True``)."""
    if isinstance(node, ast.UnaryOp):
        node = node.operand
    return isinstance(node, ast.Constant) and isinstance(node.value, (int, float))


def _host_truth(scope: ast.AST, test: ast.expr, line: int, module: ast.AST | None = None) -> bool:
    """Whether every tensor a truth test may read is made on the host: ``not``, ``and``,
    ``or`` of such tests, a comparison of host-made tensors with constants, or a host-made
    tensor itself. A name of unknown value (``mistakes < 5``) may be a tensor: False."""
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return _host_truth(scope, test.operand, line, module)
    if isinstance(test, ast.BoolOp):
        return all(_host_truth(scope, value, line, module) for value in test.values)
    if isinstance(test, ast.Compare):
        return all(
            isinstance(part, ast.Constant) or _host_made(scope, part, line, module=module)
            for part in (test.left, *test.comparators)
        )
    return _host_made(scope, test, line, module=module)


def _read_receiver(node: ast.AST) -> ast.expr | None:
    """The tensor expression a value-reading call reads, else None."""
    if not isinstance(node, ast.Call):
        return None
    func = node.func
    if isinstance(func, ast.Attribute) and func.attr in HOST_READ_METHODS and not node.args:
        return func.value
    if isinstance(func, ast.Name) and func.id in HOST_READ_BUILTINS and len(node.args) == 1:
        return node.args[0]
    return None


# Calls whose result is a Python number, whatever they are given.
_PYTHON_NUMBER_CALLS = frozenset({"float", "int", "bool", "len"})
_PYTHON_VALUE_METHODS = frozenset({"item", "tolist"})
# How many bindings deep a name is followed (``n = n + 1`` would go on for ever).
_HOST_DEPTH = 6


def _host_made(
    scope: ast.AST,
    expr: ast.expr,
    line: int,
    depth: int = 0,
    module: ast.AST | None = None,
) -> bool:
    """Whether ``expr``, evaluated at ``line`` of ``scope``, is a value on the host: a
    tensor made there from Python data (or moved there), a part of one, arithmetic of
    such values and numbers, or a Python number. ``module``: where names ``scope`` does
    not bind are looked up (a module-level ``eps = np.finfo(np.float32).eps.item()``)."""
    if depth > _HOST_DEPTH:
        return False
    if _host_number(expr):
        return True
    if isinstance(expr, _LoopElement):
        # ``for data in loader: ... data = data.to(device)``: the loop moves what it is
        # given to the device, so the loader gives it on the host; so it gives the rest of
        # the batch, where it moves a part of it and not this one.
        return (
            _moves_to_a_device(expr.loop, expr.name)
            or (
                _moves_a_part_of_its_batch(expr.loop, expr.name)
                and not _made_from_device_tensors(scope, expr.loop.iter, expr.loop.lineno, module)
            )
            or _host_made(scope, expr.value, line, depth, module)
        )
    if isinstance(expr, ast.UnaryOp):
        return _host_made(scope, expr.operand, line, depth, module)
    if isinstance(expr, (ast.BinOp, ast.Compare, ast.BoolOp, ast.List, ast.Tuple)):
        # A GPU operand would put the result on the GPU: every operand must be the host's.
        return all(_host_made(scope, part, line, depth, module) for part in _operands(expr))
    if isinstance(expr, ast.Attribute) and not isinstance(expr.value, ast.Call):
        # A field of a host value (a loader's batch: ``data.edge_index``).
        return _host_made(scope, expr.value, line, depth, module)
    if isinstance(expr, ast.Call) and (
        (isinstance(expr.func, ast.Name) and expr.func.id in _PYTHON_NUMBER_CALLS)
        or (isinstance(expr.func, ast.Attribute) and expr.func.attr in _PYTHON_VALUE_METHODS)
    ):
        return True  # a Python value (the read that made it is a read of its own)
    if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name) and module is not None:
        return _call_on_host(scope, expr, line, depth, module)
    # Through the methods that keep a tensor where it is and take no other tensor
    # (``.median()``, ``.sum(0)``): ``.mul(loss)`` of a GPU ``loss`` is on the GPU; and
    # through indexing, which keeps it where it is too (``correct[i]``).
    while isinstance(expr, (ast.Call, ast.Subscript)):
        if isinstance(expr, ast.Subscript):
            expr = expr.value
            continue
        if not isinstance(expr.func, ast.Attribute):
            break
        if _is_host_factory(expr, scope, line) or _moved_to_host(expr):
            return True  # whatever it was made from: ``(pred == gt).cpu()`` is on the host
        if module is not None and _library_function(module, scope, expr.func) is not None:
            return _call_on_host(scope, expr, line, depth, module)  # ``torch.cat([a, b])``
        if expr.func.attr in DEVICE_MOVES or not (
            _constant_arguments(expr) or _host_arguments(scope, expr, line, depth, module)
        ):
            return False
        expr = expr.func.value
    if isinstance(expr, (ast.BinOp, ast.UnaryOp, ast.Constant, ast.Attribute)):
        return _host_made(scope, expr, line, depth + 1, module)  # ``(h * 2 - 1).sum()``
    if not isinstance(expr, ast.Name):
        return False
    if isinstance(scope, _COMPREHENSIONS):
        # A comprehension's variable: an element of what it iterates (Segment Anything's
        # ``[masks[i] for i in keep]`` of a ``torch.nonzero(...)`` of host masks).
        for generator in scope.generators:
            if expr.id in _bound_names(generator.target):
                element = _element_of(generator.target, generator.iter, expr.id)
                return element is not None and _host_made(scope, element, line, depth + 1, module)
    values = _reaching_values(scope, expr.id, line)
    if not values and module is not None and _module_function(module, scope):
        # Not bound in a function of the module's own: the module's (a function runs after
        # the module bound it).
        scope, line = module, _AFTER_EVERY_LINE
        values = _reaching_values(module, expr.id, line)
    elif not values and module is not None and scope is not module:
        # Not bound in a comprehension, a lambda or a nested function: a scope around it
        # binds it. A comprehension runs where it stands (whisper's ``{j: p[i, j].item()
        # for j in ...}`` of ``p = probs.cpu()`` just above); a function after the one
        # around it bound the name (a closure over a schedule's host tensor), or the module.
        inner = scope
        for outer in _enclosing_scopes(module, scope):
            later: list[ast.expr | None] = []
            if outer is module and not isinstance(inner, (*_COMPREHENSIONS, ast.Lambda)):
                line = _AFTER_EVERY_LINE
            elif not isinstance(inner, (*_COMPREHENSIONS, ast.Lambda)):
                # What reaches its ``def``, and what the function around it binds after.
                line = _first_line(inner)
                later = [v for at, v in _bindings(outer, expr.id) if at > line]
            scope = inner = outer
            values = _reaching_values(outer, expr.id, line) + later
            if values:
                break
    # ``b += 1`` in a loop reaches its own line again: what it adds to is what the other
    # bindings made (a fixed point), so that pass adds nothing to check.
    values = [
        v for v in values if not (isinstance(v, _AugmentedValue) and v.lineno == line)
    ] or values
    # ``x = x[n:]`` in a loop keeps ``x`` where its other bindings put it (an index keeps
    # its device): nothing to check, where another binding says where (a flair walk's
    # ``scores_batch = scores_batch[n:]`` after ``scores_batch, _ = torch.max(copy, 1)``).
    values = [v for v in values if not _indexes_itself(v, expr.id)] or values
    # Each value where it is evaluated: ``returns = torch.tensor(returns)`` reads the list
    # the name held on that line, not what it holds at the read.
    # A list bound to a name may have anything appended to it later (``ls.append(loss)``).
    return bool(values) and all(
        value is not None
        and not isinstance(value, ast.List)
        and _host_made(scope, value, getattr(value, "lineno", line), depth + 1, module)
        for value in values
    )


def _indexes_itself(value: ast.expr | None, name: str) -> bool:
    """Whether ``value`` is ``name`` indexed (``name[n:]``, ``name[i][0]``)."""
    if not isinstance(value, ast.Subscript):
        return False
    while isinstance(value, ast.Subscript):
        value = value.value
    return isinstance(value, ast.Name) and value.id == name


def _operands(expr: ast.expr) -> list[ast.expr]:
    if isinstance(expr, ast.BinOp):
        return [expr.left, expr.right]
    if isinstance(expr, ast.Compare):
        return [expr.left, *expr.comparators]
    if isinstance(expr, ast.BoolOp):
        return list(expr.values)
    return list(expr.elts)  # type: ignore[attr-defined]


def _call_on_host(scope: ast.AST, call: ast.Call, line: int, depth: int, module: ast.AST) -> bool:
    """Whether a function's result is on the host: a function of the module each of whose
    ``return`` values is (``def infer(t): return (t * 2).cpu()``), or a known library's
    function (``catalogue.LIBRARY_PACKAGES``: torch's, PyG's ``remove_self_loops``,
    ``DataLoader``) given host values, at least one of them not a constant (with constants
    alone, where it puts its result is the library's choice), and no device."""
    defined = _module_def(module, scope, call.func)
    if defined is not None:
        nodes = [node for node, _ in _scope_walk(defined)]
        returns = [node.value for node in nodes if isinstance(node, ast.Return)]
        yields = any(isinstance(node, (ast.Yield, ast.YieldFrom)) for node in nodes)
        return (
            bool(returns)
            and not yields
            and all(
                value is not None and _host_made(defined, value, value.lineno, depth + 1, module)
                for value in returns
            )
        )
    if _library_function(module, scope, call.func) is None:
        return False
    if any(isinstance(a, ast.Starred) for a in call.args):
        return False
    values: list[ast.expr] = list(call.args)
    for keyword in call.keywords:
        if keyword.arg is None:
            return False  # ``**kwargs``: not known
        if keyword.arg == "device":
            if not _names_the_host(keyword.value):
                return False
            continue
        values.append(keyword.value)
    given = [v for v in values if not _constant_value(v)]
    return bool(given) and all(_host_made(scope, v, line, depth + 1, module) for v in given)


def _constant_value(node: ast.expr) -> bool:
    """A constant, or an attribute of ``torch`` (a dtype, ``torch.long``)."""
    return isinstance(node, ast.Constant) or (
        isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == "torch"
    )


# Namespaces of a library's calls that put their results on a device of their own.
_DEVICE_NAMESPACES = frozenset({"cuda", "npu", "xpu", "mps", "distributed"})


def _library_function(module: ast.AST, scope: ast.AST, func: ast.expr) -> str | None:
    """The module a called name or dotted name comes from where that is a known library
    (``catalogue.LIBRARY_PACKAGES``) and ``scope`` does not bind it otherwise: ``degree``
    after ``from torch_geometric.utils import degree``, ``F.cross_entropy``, ``torch.cat``;
    None for anything else, and for ``torch.cuda.*`` and the like, whose results are on
    their device."""
    parts: list[str] = []
    while isinstance(func, ast.Attribute):
        parts.append(func.attr)
        func = func.value
    if not isinstance(func, ast.Name) or _DEVICE_NAMESPACES.intersection(parts):
        return None
    if _assigned_before(scope, func.id, _AFTER_EVERY_LINE) or (
        scope is not module and _bindings(module, func.id)
    ):
        return None
    source = _imports(module).get(func.id)
    if source is None or source.split(".")[0] not in LIBRARY_PACKAGES:
        return None
    return source


def _imports(module: ast.AST) -> dict[str, str]:
    """The names a module's imports bind (at its top, and in its ``if`` and ``try``
    blocks), each with the module it comes from; relative imports left out."""
    found: dict[str, str] = {}
    stack = list(getattr(module, "body", ()))
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    found[alias.asname] = alias.name
                else:
                    root = alias.name.split(".")[0]
                    found[root] = root
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                found[alias.asname or alias.name] = node.module
        elif isinstance(node, (ast.If, ast.Try)):
            stack.extend(stmt for block in _blocks_of(node) for stmt in block)
    return found


def _module_def(module: ast.AST, scope: ast.AST, func: ast.expr) -> ast.FunctionDef | None:
    """The function at the top of ``module`` a called name names, where neither ``scope``
    nor the module binds the name otherwise."""
    if not isinstance(func, ast.Name):
        return None
    if _assigned_before(scope, func.id, _AFTER_EVERY_LINE) or _bindings(module, func.id):
        return None
    return next(
        (
            node
            for node in getattr(module, "body", ())
            if isinstance(node, ast.FunctionDef) and node.name == func.id
        ),
        None,
    )


def _moves_to_a_device(loop: ast.For | ast.AsyncFor, name: str) -> bool:
    """Whether ``loop``'s body moves ``name`` itself to a device: ``name.to(device)``,
    ``name.cuda()``, or each of its elements in a comprehension over it (``{k: v.to(device)
    for k, v in name.items()}``, ``tuple(t.to(device) for t in name)``); not a move of one
    field (PyG's ``batch.edge_index.to(device)``, where ``batch.y`` may be on the device
    already), not ``.to(torch.float16)``, a dtype, nor a copy to the host."""
    body = ast.Module(body=loop.body, type_ignores=[])
    # A comprehension's variables over the name (or its ``items()``) stand for its elements.
    movers = {name}
    for node, _ in _scope_walk(body):
        if isinstance(node, _COMPREHENSIONS):
            for generator in node.generators:
                if _iterates(generator.iter, name):
                    movers |= _bound_names(generator.target)
    return any(
        _moves_off_the_host(node)
        and isinstance(node.func.value, ast.Name)  # type: ignore[attr-defined]
        and node.func.value.id in movers  # type: ignore[attr-defined]
        for node, _ in _scope_walk(body)
    )


def _moves_off_the_host(node: ast.AST) -> bool:
    """Whether ``node`` is a call moving its receiver to a device: ``.cuda()``, ``.to(device)``;
    not ``.to(torch.float16)``, a dtype, nor ``.to("cpu")``."""
    if not (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in _DEVICE_MOVE_CALLS
    ):
        return False
    if node.func.attr != "to":
        return True
    device = _to_device(node)
    return device is not None and not _names_the_host(device) and not _is_dtype(device)


def _moves_a_part_of_its_batch(loop: ast.For | ast.AsyncFor, name: str) -> bool:
    """Whether ``loop`` unpacks ``name`` beside other parts of one batch (``for data,
    labels in loader:``, ``for i, (data, labels) in enumerate(loader):``), moves one of
    them to a device and never ``name``: the loader gives its batches on the host, and this
    part stays there (pytorch-metric-learning's README loop moves ``data`` alone; its
    losses move their own copy of ``labels``, and a walk's ``torch.unique(labels)`` was
    listed as a read a GPU run would wait for). Not over ``zip(...)``: its parts come from
    several iterables."""
    iterable = loop.iter
    if isinstance(iterable, ast.Call) and _call_name(iterable) in ("zip", "zip_longest"):
        return False
    batch = next(
        (
            node
            for node in ast.walk(loop.target)
            if isinstance(node, (ast.Tuple, ast.List))
            and any(isinstance(e, ast.Name) and e.id == name for e in node.elts)
        ),
        None,
    )
    if batch is None or _moves_to_a_device(loop, name):
        return False
    return any(
        isinstance(part, ast.Name) and part.id != name and _moves_to_a_device(loop, part.id)
        for part in batch.elts
    )


def _made_from_device_tensors(
    scope: ast.AST, expr: ast.expr, line: int, module: ast.AST | None, depth: int = 0
) -> bool:
    """Whether ``expr`` (a loop's iterable) is made, through the names it is bound from, of
    something moved to a device: a data set of tensors moved there (``TensorDataset(X.to(
    device), Y.to(device))``), whose every part stays there (a review: the labels of such a
    loader, beside its moved inputs, were taken for the host's)."""
    if depth > 3:
        return False
    for node in ast.walk(expr):
        if _moves_off_the_host(node):
            return True
        if isinstance(node, ast.keyword) and node.arg == "device":
            if not _names_the_host(node.value):
                return True
        if isinstance(node, ast.Name) and not (isinstance(node.ctx, ast.Store)):
            values = _reaching_values(scope, node.id, line)
            if not values and module is not None and scope is not module:
                values = _reaching_values(module, node.id, _AFTER_EVERY_LINE)
            for value in values:
                if value is not None and not isinstance(value, _LoopElement):
                    at = getattr(value, "lineno", line)
                    if _made_from_device_tensors(scope, value, at, module, depth + 1):
                        return True
    return False


def _iterates(iterable: ast.expr, name: str) -> bool:
    """``name``, ``name.items()`` or ``name.values()``."""
    if (
        isinstance(iterable, ast.Call)
        and isinstance(iterable.func, ast.Attribute)
        and iterable.func.attr in ("items", "values")
        and not iterable.args
    ):
        iterable = iterable.func.value
    return isinstance(iterable, ast.Name) and iterable.id == name


# The moves that put a tensor on a device (not a cast, ``type``; not ``pin_memory``).
_DEVICE_MOVE_CALLS = DEVICE_MOVES - {"type", "pin_memory"}


def _dotted_root(expr: ast.expr) -> str | None:
    """The name a dotted name starts from (``torch`` of ``torch.linalg.norm``); None where
    something else is between (a call, an item)."""
    while isinstance(expr, ast.Attribute):
        expr = expr.value
    return expr.id if isinstance(expr, ast.Name) else None


def _root_name(expr: ast.expr) -> str | None:
    """The name an expression's attributes, items and method calls start from."""
    while True:
        if isinstance(expr, (ast.Attribute, ast.Subscript)):
            expr = expr.value
        elif isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute):
            expr = expr.func.value
        else:
            return expr.id if isinstance(expr, ast.Name) else None


def _is_dtype(node: ast.expr) -> bool:
    """``torch.float16``, ``x.dtype``, a name of a dtype (``dtype``, ``ptdtype``)."""
    if isinstance(node, ast.Attribute):
        return node.attr == "dtype" or (
            isinstance(node.value, ast.Name) and node.value.id == "torch"
        )
    return isinstance(node, ast.Name) and "dtype" in node.id


def _host_arguments(
    scope: ast.AST, call: ast.Call, line: int, depth: int, module: ast.AST | None
) -> bool:
    """Whether every argument of a method call is a host value (``_host_made``: a number,
    a host tensor): the result stays where its receiver is (torchvision's ``torch.empty(1)
    .uniform_(0.0, float(len(k))).item()``); a GPU tensor given would move it there."""
    if any(isinstance(a, ast.Starred) for a in call.args) or any(
        k.arg is None for k in call.keywords
    ):
        return False  # ``*args``, ``**kwargs``: not known
    return all(
        (isinstance(v, ast.Constant) and not isinstance(v.value, str))
        or _host_made(scope, v, line, depth + 1, module)
        for v in [*call.args, *(k.value for k in call.keywords)]
    )


def _enclosing_scopes(module: ast.AST, scope: ast.AST) -> list[ast.AST]:
    """The functions, lambdas and comprehensions of ``module`` around ``scope``, innermost
    first, then ``module``; empty where ``scope`` is not in it."""
    parents: dict[int, ast.AST] = {}
    for node in ast.walk(module):
        for child in ast.iter_child_nodes(node):
            parents[id(child)] = node
        if node is scope:
            break
    if id(scope) not in parents:
        return []
    found: list[ast.AST] = []
    node = parents[id(scope)]
    while node is not module:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, *_COMPREHENSIONS)):
            found.append(node)
        node = parents[id(node)]
    return [*found, module]


def _module_function(module: ast.AST, scope: ast.AST) -> bool:
    """Whether ``scope`` is a function at the top of ``module`` or a method of a class
    there: its free names are the module's (a nested function's may be its outer one's)."""
    for node in getattr(module, "body", ()):
        if node is scope:
            return isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        if isinstance(node, ast.ClassDef) and any(child is scope for child in node.body):
            return isinstance(scope, (ast.FunctionDef, ast.AsyncFunctionDef))
    return False


def _reaching_values(scope: ast.AST, name: str, line: int) -> list[ast.expr | None]:
    """The values ``name`` may hold at ``line`` of ``scope`` (``_assigned_before``'s, each
    None where unknown), less those no path brings there. From the innermost block that
    holds the line outwards: after a plain ``name = value`` in that block, that value and
    the bindings after it (``returns = torch.tensor(returns)`` then ``returns = (returns -
    returns.mean()) / ...``: the list it was before is gone; in a loop's body, ``ei =
    ei[0]`` at the top of a pass); else, in the body of a ``for`` loop that binds it, the
    element of what the loop iterates (``_LoopElement``: ``for (log_prob, value), R in
    zip(saved_actions, returns)``, an element of ``returns``) and the bindings before the
    line in the pass. A binding after the line counts where a loop inside the block runs
    the line again."""
    body = getattr(scope, "body", None)
    if not isinstance(body, list):
        return _assigned_before(scope, name, line)
    path = _blocks_holding(body, line)
    for depth in range(len(path) - 1, -1, -1):
        block, index, owner = path[depth]
        # A loop inside this block that holds the line runs it again after later bindings.
        again = any(isinstance(o, _LOOPS) for _, _, o in path[depth + 1 :])
        last = next(
            (
                at
                for at in range(index - 1, -1, -1)
                if _plain_assignment(block[at], name) is not None
            ),
            None,
        )
        if last is not None:
            value = _plain_assignment(block[last], name)
            return [value, *_bindings_between(block[last + 1 : index + 1], name, line, again)]
        if (
            isinstance(owner, (ast.For, ast.AsyncFor))
            and block is owner.body
            and name in _bound_names(owner.target)
        ):
            element = _element_of(owner.target, owner.iter, name)
            marked = None if element is None else _LoopElement(element, owner, name)
            return [marked, *_bindings_between(block[: index + 1], name, line, again)]
    return _assigned_before(scope, name, line)


_LOOPS = (ast.For, ast.AsyncFor, ast.While)


class _LoopElement(ast.expr):
    """What a ``for`` loop's target binds a name to in a pass (``value``: an expression
    of the loop's iterable), with the loop: its body may move the element to a device,
    which says where the iterable keeps it (``for data in loader: ... data.to(device)``).
    Evaluated where the loop starts."""

    _fields = ("value",)

    def __init__(self, value: ast.expr, loop: ast.For | ast.AsyncFor, name: str) -> None:
        super().__init__(value=value, lineno=loop.lineno, col_offset=loop.col_offset)
        self.loop = loop
        self.name = name


def _blocks_holding(
    body: list[ast.stmt], line: int
) -> list[tuple[list[ast.stmt], int, ast.AST | None]]:
    """The statement lists that hold ``line``, outermost first: each with the index of
    its statement that holds the line and the compound statement it is a block of (None:
    the scope's own body). Nested functions and classes are not entered."""
    path: list[tuple[list[ast.stmt], int, ast.AST | None]] = []
    block, owner = body, None
    while True:
        index = next(
            (
                n
                for n, statement in enumerate(block)
                if statement.lineno <= line <= (statement.end_lineno or statement.lineno)
            ),
            None,
        )
        if index is None:
            return path
        path.append((block, index, owner))
        statement = block[index]
        if isinstance(statement, _NESTED_SCOPES):
            return path
        inner = next(
            (
                child
                for child in _blocks_of(statement)
                if child and child[0].lineno <= line <= (child[-1].end_lineno or child[-1].lineno)
            ),
            None,
        )
        if inner is None:
            return path
        block, owner = inner, statement


def _blocks_of(statement: ast.stmt) -> list[list[ast.stmt]]:
    """The statement lists a compound statement holds (its body, ``else``, handlers, cases)."""
    blocks = [
        getattr(statement, field)
        for field in ("body", "orelse", "finalbody")
        if isinstance(getattr(statement, field, None), list)
    ]
    blocks += [handler.body for handler in getattr(statement, "handlers", ())]
    blocks += [case.body for case in getattr(statement, "cases", ())]
    return blocks


def _plain_assignment(statement: ast.stmt, name: str) -> ast.expr | None:
    """The value a statement binds ``name`` to where it is ``name = value`` (or ``a, name
    = x, y``, a display of as many elements); else None."""
    if isinstance(statement, ast.AnnAssign):  # ``mask: torch.Tensor = tokens.ge(4)``
        target = statement.target
        return statement.value if isinstance(target, ast.Name) and target.id == name else None
    if not isinstance(statement, ast.Assign):
        return None
    if len(statement.targets) == 1 and isinstance(statement.targets[0], ast.Name):
        return statement.value if statement.targets[0].id == name else None
    return _paired_value(statement, name)


def _bindings_between(
    statements: list[ast.stmt], name: str, line: int, again: bool
) -> list[ast.expr | None]:
    """The values the bindings of ``name`` in ``statements`` give it (None: unknown): those
    before ``line``, or all of them where ``again`` (a loop runs the line after them)."""
    inner = ast.Module(body=statements, type_ignores=[])
    return [value for at, value in _bindings(inner, name) if again or at < line]


class _AugmentedValue(ast.BinOp):
    """What ``name += value`` binds: ``name + value``, ``name`` read where it stands."""


def _bindings(scope: ast.AST, name: str) -> list[tuple[int, ast.expr | None]]:
    """Each binding of ``name`` in ``scope`` (not in nested functions) with its line: the
    value of a plain ``name = value`` (or of its element in ``block_size, batch_size = 8,
    2``; of ``name + value`` for ``name += value``), else None (a loop target, ``with ...
    as``, a walrus)."""
    found: list[tuple[int, ast.expr | None]] = []
    stack = list(ast.iter_child_nodes(scope))
    while stack:
        node = stack.pop()
        if isinstance(node, _NESTED_SCOPES):
            continue
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == name for t in node.targets
        ):
            plain = len(node.targets) == 1
            found.append((node.lineno, node.value if plain else None))
            stack.append(node.value)
            continue
        if isinstance(node, ast.Assign) and (paired := _paired_value(node, name)) is not None:
            found.append((node.lineno, paired))
            stack.append(node.value)
            continue
        if (
            isinstance(node, ast.AnnAssign)
            and isinstance(node.target, ast.Name)
            and node.target.id == name
            and node.value is not None
        ):
            found.append((node.lineno, node.value))
            stack.append(node.value)
            continue
        if isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name):
            if node.target.id == name:
                # ``b += 1`` binds what ``b + 1`` is (a host tensor plus a number stays on
                # the host: the char-RNN tutorial's ``loss += l`` of ``torch.Tensor([0])``).
                value = ast.copy_location(
                    _AugmentedValue(ast.Name(name, ast.Load()), node.op, node.value), node
                )
                found.append((node.lineno, value))
            stack.append(node.value)
            continue
        if isinstance(node, ast.Name) and node.id == name and isinstance(node.ctx, ast.Store):
            found.append((node.lineno, None))
        stack.extend(ast.iter_child_nodes(node))
    return found


def _element_of(target: ast.expr, iterable: ast.expr, name: str) -> ast.expr | None:
    """What a loop's ``target`` binds ``name`` to, as an expression of ``iterable``: a part
    of an element of it (``iterable[0]`` stands for any, ``iterable[0][0]`` for a part of
    one: ``for x, y in loader``), through ``zip(a, b)`` and ``enumerate(x)``; None where
    that is not told (a starred target)."""
    if _is_range(iterable):
        return ast.Constant(0) if isinstance(target, ast.Name) else None  # a Python int
    if any(isinstance(node, ast.Starred) for node in ast.walk(target)):
        return None
    if isinstance(target, ast.Name):
        return _any_element(iterable)
    if not isinstance(target, (ast.Tuple, ast.List)):
        return None
    parts = target.elts
    sources: list[ast.expr] | None = None
    if isinstance(iterable, ast.Call) and isinstance(iterable.func, ast.Name):
        func, args = iterable.func.id, iterable.args
        if func == "zip" and not iterable.keywords and len(args) == len(parts):
            sources = list(args)
        elif func == "enumerate" and len(args) == 1 and len(parts) == 2:
            sources = [ast.Constant(0), args[0]]  # the count is a Python int
    if sources is None:
        # Unpacked from one element: each part is a part of it.
        return _any_element(_any_element(iterable))
    for part, source in zip(parts, sources, strict=True):
        if name not in _bound_names(part):
            continue
        if isinstance(source, ast.Constant):
            return source if isinstance(part, ast.Name) else None
        element = _any_element(source)
        return element if isinstance(part, ast.Name) else _any_element(element)
    return None


def _any_element(iterable: ast.expr) -> ast.Subscript:
    return ast.Subscript(value=iterable, slice=ast.Constant(0), ctx=ast.Load())


def _moved_to_host(call: ast.Call) -> bool:
    """``t.cpu()``, or ``t.to("cpu")`` / ``t.to(torch.device("cpu"))`` / ``t.to(device=
    "cpu")``: its result is on the host, wherever ``t`` was (the copy itself is a read of
    its own, listed at its line)."""
    func = call.func
    if not isinstance(func, ast.Attribute):
        return False
    if func.attr == "cpu":
        return not call.args and not call.keywords
    if func.attr != "to":
        return False
    device = _to_device(call)
    return device is not None and _names_the_host(device)


def _to_device(call: ast.Call) -> ast.expr | None:
    """The device a ``.to(...)`` call is given, first or as ``device=``; None: none, or
    more than one."""
    targets = [*call.args[:1], *(k.value for k in call.keywords if k.arg == "device")]
    return targets[0] if len(targets) == 1 else None


def _to_host_by_name(chain: Sequence[ast.AST], line: int) -> bool:
    """Whether ``line`` of ``chain[0]`` (the scopes around it after it) holds one ``.to(X)``
    call, not ``non_blocking=True``, whose device ``X`` is a name every value of which where
    the line runs names the host; looked up in the innermost scope that binds it."""
    scope = chain[0]
    # A comprehension's frame (Python before 3.12) is an expression: no statements.
    roots = [scope] if isinstance(scope, _COMPREHENSIONS) else _statements_at(scope, line)
    calls = [
        node
        for statement in roots
        for node in ast.walk(statement)
        if isinstance(node, ast.Call)
        and getattr(node, "lineno", None) == line
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "to"
    ]
    if len(calls) != 1:
        return False
    call = calls[0]
    if any(
        k.arg == "non_blocking" and not (isinstance(k.value, ast.Constant) and not k.value.value)
        for k in call.keywords
    ):
        return False
    device = _to_device(call)
    if not isinstance(device, ast.Name):
        return False
    name = device.id
    for at, scope in enumerate(chain):
        values = _reaching_values(scope, name, line if at == 0 else _AFTER_EVERY_LINE)
        if values:
            return all(v is not None and _names_the_host(v) for v in values)
    return False


def _names_the_host(node: ast.expr) -> bool:
    if isinstance(node, ast.Constant):
        return node.value == "cpu"
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "device"
        and len(node.args) == 1
        and isinstance(node.args[0], ast.Constant)
        and node.args[0].value == "cpu"
    )


def _is_host_factory(call: ast.Call, scope: ast.AST | None = None, line: int = 0) -> bool:
    """``torch.tensor(data)`` and the like without a device, of Python data: a display, a
    comprehension, a constant or ``list(...)``, or a name ``scope`` binds only to those
    before ``line`` (minGPT's ``results = []`` appended to); a tensor given as the data
    keeps its device, ``torch.tensor(t)`` of a GPU ``t`` is on the GPU; ``from_numpy`` takes
    an array only; or a factory of sizes without a device (``torch.randint(n, (B,))``)."""
    func = call.func
    if not (
        isinstance(func, ast.Attribute)
        and func.attr in HOST_TENSOR_FACTORIES | HOST_SHAPE_FACTORIES | _LEGACY_CONSTRUCTORS
        and isinstance(func.value, ast.Name)
        and func.value.id == "torch"
        and call.args
        and not any(k.arg in ("device", None) for k in call.keywords)  # None: ``**kwargs``
    ):
        return False
    if func.attr in HOST_SHAPE_FACTORIES:
        return True
    data = call.args[0]
    if isinstance(data, ast.Name) and scope is not None and func.attr != "from_numpy":
        values = _reaching_values(scope, data.id, line)
        return bool(values) and all(v is not None and _python_data(v) for v in values)
    return func.attr == "from_numpy" or _python_data(data)


def _python_data(node: ast.expr) -> bool:
    if isinstance(node, (ast.Constant, ast.List, ast.Tuple, ast.ListComp, ast.GeneratorExp)):
        return True
    if isinstance(node, ast.UnaryOp):
        return isinstance(node.operand, ast.Constant)
    if not isinstance(node, ast.Call):
        return False
    if isinstance(node.func, ast.Name):
        return node.func.id in ("list", "tuple", "range", "sorted")
    # A NumPy function's result (Segment Anything's ``torch.as_tensor(np.stack(masks))``):
    # an array on the host.
    root = node.func
    while isinstance(root, ast.Attribute):
        root = root.value
    return isinstance(root, ast.Name) and root.id in ("np", "numpy")


def _constant_arguments(call: ast.Call) -> bool:
    """Whether a method call's arguments are all constants (a dim, a dtype's name)."""
    values = [*call.args, *(k.value for k in call.keywords)]
    return all(
        isinstance(v, ast.Constant)
        or (
            isinstance(v, ast.Attribute) and isinstance(v.value, ast.Name) and v.value.id == "torch"
        )
        for v in values
    )


def _assigned_before(scope: ast.AST, name: str, line: int) -> list[ast.expr | None]:
    """The values ``name`` is bound to in ``scope`` (not in nested functions), each
    ``None`` where the binding is not a plain ``name = value`` before ``line`` (a
    parameter, a loop target, an augmented assignment, a later one): then nothing is
    known. Empty: never bound here (a global, an enclosing function's)."""
    values: list[ast.expr | None] = []
    args = getattr(scope, "args", None)
    if isinstance(args, ast.arguments):
        every = [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg]
        if any(a is not None and a.arg == name for a in every):
            values.append(None)
    return values + [value if at < line else None for at, value in _bindings(scope, name)]


# torch's operators (and methods) that return a tuple of tensors, each where the input is.
_TUPLE_RESULTS = frozenset(
    {
        "max",
        "min",
        "sort",
        "topk",
        "median",
        "mode",
        "kthvalue",
        "aminmax",
        "std_mean",
        "var_mean",
        "split",
        "chunk",
        "unbind",
    }
)


def _paired_value(node: ast.Assign, name: str) -> ast.expr | None:
    """The element of ``a, b = x, y`` bound to ``name`` (of ``v, i = t.max(1)``, the call:
    each part lives where its result does); None where the assignment is not of a display
    of as many elements to plain names, or does not bind ``name``."""
    if len(node.targets) != 1:
        return None
    target, value = node.targets[0], node.value
    if (
        isinstance(target, (ast.Tuple, ast.List))
        and all(isinstance(t, ast.Name) for t in target.elts)
        and any(t.id == name for t in target.elts)  # type: ignore[attr-defined]
        and isinstance(value, ast.Call)
        and isinstance(value.func, ast.Attribute)
        and value.func.attr in _TUPLE_RESULTS
    ):
        # A part of a tensor operator's tuple of results lives where the result does, on
        # the device of its input (a flair walk: ``v, i = torch.max(host_copy, dim=1)``).
        return value
    if not (
        isinstance(target, (ast.Tuple, ast.List))
        and isinstance(value, (ast.Tuple, ast.List))
        and len(target.elts) == len(value.elts)
        and all(isinstance(t, ast.Name) for t in target.elts)
        and not any(isinstance(v, ast.Starred) for v in value.elts)
    ):
        return None
    return next(
        (v for t, v in zip(target.elts, value.elts, strict=True) if t.id == name),  # type: ignore[attr-defined]
        None,
    )


def indexes_host_values(
    scope: ast.AST, enclosing: Sequence[ast.AST], line: int | None = None
) -> bool:
    """Whether every index that a subscript in ``scope`` reads (on ``line``; None: anywhere
    in the scope) is a value the host has without a device: a number, or a tensor made on
    the host (``_host_made``) or an element of one. ``enclosing``: the scopes around
    ``scope``, innermost first, where its free names are bound (a comprehension's iterable
    and the names it reads from its function, then the module's).

    nanoGPT's ``[torch.from_numpy(data[i:i+block_size]) for i in ix]`` with ``ix =
    torch.randint(...)`` reads each bound through ``np.memmap.__getitem__``: on a GPU run
    the indices are still on the CPU, and those reads wait for nothing. False where any
    index may be another tensor, or there is no subscript to read."""
    parts = [
        (part, [*comprehensions, scope, *enclosing])
        for node, comprehensions in _scope_walk(scope)
        if isinstance(node, ast.Subscript)
        and isinstance(node.ctx, ast.Load)
        and (line is None or node.lineno <= line <= (node.end_lineno or node.lineno))
        for part in _index_parts(node.slice)
    ]
    return bool(parts) and all(_host_value(part, chain, line) for part, chain in parts)


def _scope_walk(scope: ast.AST) -> Iterator[tuple[ast.AST, list[ast.AST]]]:
    """The nodes of ``scope``, not those of the functions nested in it (whose frames are
    their own), each with the comprehensions around it in ``scope``, innermost first (in
    Python 3.12 most run in their function's frame)."""
    stack: list[tuple[ast.AST, list[ast.AST]]] = [
        (child, []) for child in ast.iter_child_nodes(scope)
    ]
    while stack:
        node, comprehensions = stack.pop()
        if isinstance(node, _NESTED_SCOPES):
            continue
        yield node, comprehensions
        inner = [node, *comprehensions] if isinstance(node, _COMPREHENSIONS) else comprehensions
        stack.extend((child, inner) for child in ast.iter_child_nodes(node))


def _index_parts(index: ast.expr) -> list[ast.expr]:
    if isinstance(index, ast.Slice):
        return [part for part in (index.lower, index.upper, index.step) if part is not None]
    if isinstance(index, ast.Tuple):
        return [part for element in index.elts for part in _index_parts(element)]
    return [index]


_HOST_NUMBER_CALLS = frozenset({"len"})


def _host_value(expr: ast.expr, chain: Sequence[ast.AST], line: int | None, depth: int = 0) -> bool:
    """Whether ``expr``, evaluated in ``chain[0]`` (the scopes around it after it), is a
    number or a tensor on the host. Arithmetic of such values is one too; a GPU operand
    would put the result on the GPU, so every operand must be one. ``line``: where the
    innermost function (or the module) of ``chain`` runs; None: anywhere."""
    if depth > 4 or not chain:  # ``n = n + 1``, or a chain too long to follow
        return False
    if isinstance(expr, ast.Constant):
        return isinstance(expr.value, (int, float, bool))
    if isinstance(expr, ast.UnaryOp):
        return _host_value(expr.operand, chain, line, depth)
    if isinstance(expr, ast.BinOp):
        return _host_value(expr.left, chain, line, depth) and _host_value(
            expr.right, chain, line, depth
        )
    if isinstance(expr, ast.Subscript):
        # Part of a host tensor is on the host (a GPU index into it is an error).
        return _host_value(expr.value, chain, line, depth)
    running = next((at for at, s in enumerate(chain) if not isinstance(s, _COMPREHENSIONS)), None)
    if running is None:
        return False
    if isinstance(expr, ast.Call):
        if isinstance(expr.func, ast.Name) and expr.func.id in _HOST_NUMBER_CALLS:
            return True
        return _host_made(chain[running], expr, line if line is not None else _AFTER_EVERY_LINE)
    if not isinstance(expr, ast.Name):
        return False
    for at, scope in enumerate(chain):
        if isinstance(scope, _COMPREHENSIONS):
            for number, generator in enumerate(scope.generators):
                if expr.id in _bound_names(generator.target):
                    if not isinstance(generator.target, ast.Name):
                        return False  # an element unpacked: its parts are not followed
                    # The first iterable is evaluated in the scope around the comprehension.
                    where = chain[at + 1 :] if number == 0 else chain[at:]
                    return _host_value(generator.iter, where, line, depth + 1)
            continue
        # The running scope's bindings count before its line; an outer function's or the
        # module's, wherever they are (a function runs after the module has bound them).
        before = line if at == running and line is not None else _AFTER_EVERY_LINE
        values = _assigned_before(scope, expr.id, before)
        if values:
            # A ``for`` loop's plain target (one unknown binding each) is an element of
            # what it iterates: ``for i in ix: data[i:i + T]``.
            iterables = _loop_iterables(scope, expr.id)
            known = [value for value in values if value is not None]
            return len(values) - len(known) == len(iterables) and all(
                _host_value(value, chain[at:], before, depth + 1) for value in known + iterables
            )
    return False


def _loop_iterables(scope: ast.AST, name: str) -> list[ast.expr]:
    """What the ``for`` loops of ``scope`` (not of the functions in it) whose target is
    ``name`` itself iterate."""
    return [
        node.iter
        for node, _ in _scope_walk(scope)
        if isinstance(node, (ast.For, ast.AsyncFor))
        and isinstance(node.target, ast.Name)
        and node.target.id == name
    ]


_AFTER_EVERY_LINE = 1 << 30


def _statements_at(scope: ast.AST, line: int) -> list[ast.stmt]:
    """The innermost statements of ``scope`` that hold ``line``."""
    found: list[ast.stmt] = []
    stack = list(ast.iter_child_nodes(scope))
    while stack:
        node = stack.pop()
        first, end = getattr(node, "lineno", None), getattr(node, "end_lineno", None)
        if first is None or end is None or not first <= line <= end:
            continue
        if isinstance(node, ast.stmt):
            inner = [c for c in ast.iter_child_nodes(node) if isinstance(c, ast.stmt)]
            if not any((c.lineno <= line <= (c.end_lineno or c.lineno)) for c in inner):
                found.append(node)
                continue
        stack.extend(ast.iter_child_nodes(node))
    return found


def _is_size_position(parent: ast.AST, child: ast.AST) -> bool:
    """Whether ``child`` of ``parent`` is a size, bound or index the host needs."""
    if isinstance(parent, ast.Slice):
        return True
    # Not a subscript's plain index: ``counts[int(t)] += 1`` looks a Python list up (a count
    # to keep on the device), ``x[i]`` sets no size either.
    if not isinstance(parent, ast.Call) or child is parent.func:
        return False
    func = parent.func
    name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
    if name not in _SIZE_CALLS:
        return False
    if isinstance(child, ast.keyword):
        return child.arg in _SIZE_KEYWORDS
    position = next((n for n, arg in enumerate(parent.args) if arg is child), -1)
    if name in _FILLS:
        return position == 0  # the size; the value it fills with is a number
    # ``torch.narrow(x, 0, 0, n)``: the tensor first, then sizes (``x.narrow(0, 0, n)``).
    namespace = isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name)
    if namespace and func.value.id == "torch" and name in _TENSOR_FIRST:  # type: ignore[union-attr]
        return position > 0
    return position >= 0


def _reads_a_value(node: ast.AST, frameless: bool) -> bool:
    if isinstance(node, ast.Call):
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr in _READ_METHODS:
            return True
        if isinstance(func, ast.Name) and func.id in _READ_FUNCTIONS:
            return True
    return frameless and isinstance(node, (ast.Name, ast.Attribute, ast.Subscript))


def _bound_names(target: ast.AST) -> set[str]:
    """The names a loop's target binds (``for i, (a, *b) in``), not those of an attribute
    or item it assigns (``for self.x in``: ``self`` is only read)."""
    return {
        n.id for n in ast.walk(target) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)
    }


def _per_element(node: ast.AST) -> bool:
    """Whether a comprehension's per-element parts (its element, conditions, inner
    iterables) call something with its loop variables around: its first iterable is made
    once."""
    generators = node.generators  # type: ignore[attr-defined]
    targets = set().union(*(_bound_names(g.target) for g in generators))
    parts = [getattr(node, name) for name in ("elt", "key", "value") if hasattr(node, name)]
    parts += [condition for g in generators for condition in g.ifs]
    parts += [g.iter for g in generators[1:]]
    nodes = [n for part in parts for n in ast.walk(part)]
    used = {n.id for n in nodes if isinstance(n, ast.Name)}
    # A call among them (one that may read back); without one the line's read is in the
    # first iterable (``[r for r in torch.nonzero(x)]``), made once.
    return bool(targets & used) and any(isinstance(n, ast.Call) for n in nodes)


def _names_at(scope: ast.AST, line: int) -> set[str] | None:
    """The names the innermost statement of ``scope`` holding ``line`` uses (on a compound
    statement's header line, the header's alone: its test, iterable, target or items);
    None: no statement holds it."""
    best: ast.stmt | None = None
    stack = list(ast.iter_child_nodes(scope))
    while stack:
        node = stack.pop()
        first, end = getattr(node, "lineno", None), getattr(node, "end_lineno", None)
        if first is None or end is None or not first <= line <= end:
            continue
        if isinstance(node, ast.stmt):
            best = node
        stack.extend(ast.iter_child_nodes(node))
    if best is None:
        return None
    parts: list[Any] = [best]
    if hasattr(best, "body") and line == best.lineno:
        # A header: only what the header holds, not the body below it.
        parts = [getattr(best, name, None) for name in ("test", "iter", "target", "items")]
    return {n.id for part in parts if part for n in _walk(part) if isinstance(n, ast.Name)}


def _walk(part: Any) -> Iterator[ast.AST]:
    """``ast.walk`` of a node or of each node in a list (a ``with`` header's items)."""
    for node in part if isinstance(part, list) else [part]:
        yield from ast.walk(node)


def _on_one_line(scope: ast.AST) -> bool:
    """Whether a comprehension or lambda's frame runs one line only: any call it makes,
    by syntax or by name, is on that line."""
    return isinstance(scope, (*_COMPREHENSIONS, ast.Lambda)) and scope.lineno == getattr(
        scope, "end_lineno", None
    )


def _first_line(node: ast.AST) -> int:
    """Where a scope's frame starts (``co_firstlineno``): its first decorator's line, if any."""
    decorators = getattr(node, "decorator_list", None) or []
    return min([d.lineno for d in decorators] + [node.lineno])  # type: ignore[attr-defined]


# A Windows path recorded on Windows (``C:/Users/a/train.py``): absolute there, not here.
_WINDOWS_DRIVE = re.compile(r"[A-Za-z]:/")


class _ParsedFile:
    def __init__(self, tree: ast.Module) -> None:
        self.tree = tree
        # co_firstlineno -> code objects starting there (a decorated function's is its first
        # decorator's line; lambdas and comprehensions have their own frames too).
        self.scopes: dict[int, list[ast.AST]] = {}
        self.functions: dict[int, ast.AST] = {}
        names: set[str] = set()
        step_receivers: set[str] = set()
        assignments: list[ast.AST] = []
        loose: set[str] = set()  # ``Bindings.loose``
        function_nodes: list[ast.AST] = []
        class_nodes: list[ast.ClassDef] = []
        self._subclasses: dict[str, set[str]] = {}  # a base class's name -> classes here
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, *_SCOPE_NAMES)):
                first = node.lineno
                if getattr(node, "decorator_list", None):
                    self.scopes.setdefault(_first_line(node), []).append(node)
                    if not isinstance(node, tuple(_SCOPE_NAMES)):
                        self.functions.setdefault(_first_line(node), node)
                self.scopes.setdefault(first, []).append(node)
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                    self.functions.setdefault(first, node)
                    function_nodes.append(node)
            elif isinstance(node, ast.withitem) and node.optional_vars is not None:
                loose.update(_names_bound_by(node.optional_vars))
                if _call_name(node.context_expr) in _PROFILE_CLASSES and isinstance(
                    node.optional_vars, ast.Name
                ):
                    names.add(node.optional_vars.id)
            elif isinstance(node, (ast.For, ast.AsyncFor, ast.comprehension, ast.AugAssign)):
                loose.update(_names_bound_by(node.target))
            elif isinstance(node, ast.arg):
                loose.add(node.arg)
            elif isinstance(node, (ast.Global, ast.Nonlocal)):
                loose.update(node.names)
            elif isinstance(
                node, (ast.Assign, ast.AnnAssign, ast.NamedExpr, ast.Import, ast.ImportFrom)
            ):
                assignments.append(node)
                if isinstance(node, ast.Assign) and _call_name(node.value) in _PROFILE_CLASSES:
                    names.update(t.id for t in node.targets if isinstance(t, ast.Name))
            elif isinstance(node, ast.ClassDef):
                class_nodes.append(node)
                for base in node.bases:
                    name = _base_name(base)
                    if name:
                        self._subclasses.setdefault(name, set()).add(node.name)
            elif isinstance(node, ast.Call) and _call_name(node) == "step":
                receiver = _receiver_name(node)
                if receiver is not None:
                    step_receivers.add(receiver)
        # Names bound to a torch.profiler.profile object: their .step() is the profiler's.
        # A profiler made elsewhere (``prof = make_profiler(cfg)``, torchtitan's ``with
        # maybe_enable_profiling(...) as torch_profiler``) is known by its name: with no
        # name for it, every ``.step()`` might be it and need not be (the optimizer's), so
        # a loop's passes aligned without it (llm.c's validation reads fit its train read).
        self.profiler_names = frozenset(names)
        # Used only where the trace shows the profiler's steps in the frame: a synthetic
        # or callback-stepped profiler's are not there to align with.
        self.named_profilers = frozenset(
            () if names else (r for r in step_receivers if _PROFILER_NAME.search(r))
        )
        self._assignments = assignments
        self._loose = frozenset(loose)
        self._function_nodes = function_nodes
        self._class_nodes = class_nodes
        self._index: _BindingIndex | None = None

    def subclasses(self, cls: str) -> list[str]:
        """The classes this file derives from ``cls``, directly or not, by name: calling
        one without an ``__init__`` of its own runs ``cls``'s."""
        found: list[str] = []
        pending = [cls]
        while pending:
            for sub in sorted(self._subclasses.get(pending.pop(), ())):
                if sub not in found and sub != cls:
                    found.append(sub)
                    pending.append(sub)
        return found

    def bindings(self, scope: ast.AST) -> Bindings:
        """What the names a call in ``scope`` uses are bound to (indexed once, when a call
        is first looked for in this file)."""
        if self._index is None:
            self._index = _BindingIndex(
                self._assignments, self._function_nodes, self._class_nodes, self._loose
            )
        return self._index.bindings(scope)

    def scope_at(self, line: int, func: str) -> ast.AST | None:
        """The function (lambda, comprehension) whose frame is named ``func`` at its first
        line ``line``, as modern traces name a fresh call."""
        for node in self.scopes.get(line, ()):
            if _scope_name(node) == func:
                return node
        return None

    def running_scope(self, line: int, func: str) -> ast.AST | None:
        """The scope a frame named ``func`` runs while at ``line`` (a frame that was already
        running when profiling started), or None when the source does not have it there."""
        if func == "<module>":
            return self.tree
        best = None
        for nodes in self.scopes.values():
            for node in nodes:
                end = getattr(node, "end_lineno", None) or node.lineno
                if (
                    node.lineno <= line <= end
                    and _scope_name(node) == func
                    and (best is None or node.lineno > best.lineno)
                ):
                    best = node
        return best

    def enclosing_scopes(self, scope: ast.AST) -> list[ast.AST]:
        """The scopes whose names ``scope`` reads, innermost first, the module last (a
        class body's names are not among them: its methods do not see them)."""
        pending: list[tuple[ast.AST, list[ast.AST]]] = [(self.tree, [])]
        while pending:
            node, around = pending.pop()
            if node is scope:
                return [*reversed(around), self.tree]
            scopes = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, *_COMPREHENSIONS)
            inner = [*around, node] if isinstance(node, scopes) else around
            pending.extend((child, inner) for child in ast.iter_child_nodes(node))
        return [self.tree]

    def resumes_at(self, line: int, func: str) -> bool:
        """Whether a frame named ``func`` can be at ``line`` when it is entered again: a
        generator or coroutine resumed at a ``yield`` or ``await`` on that line."""
        scope = self.running_scope(line, func)
        if scope is None or scope is self.tree:
            return False
        return any(
            isinstance(node, (ast.Yield, ast.YieldFrom, ast.Await))
            and node.lineno <= line <= (node.end_lineno or node.lineno)
            for node in ast.walk(scope)
        )

    def only_function_named(self, func: str) -> ast.AST | None:
        """The file's one ``def`` named ``func`` (None: none, or several)."""
        found = {
            id(node): node
            for nodes in self.scopes.values()
            for node in nodes
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == func
        }
        return next(iter(found.values())) if len(found) == 1 else None

    def class_body_at(self, line: int, name: str) -> bool:
        """Whether ``line`` is in the body of a class ``name`` (a frame running a class
        body at import is named after the class, and is no function's)."""
        return any(
            isinstance(node, ast.ClassDef)
            and node.name == name
            and node.lineno <= line <= (node.end_lineno or node.lineno)
            for node in ast.walk(self.tree)
        )

    def enclosing_function_line(self, line: int) -> int | None:
        best: tuple[int, int] | None = None
        for first, node in self.functions.items():
            end = getattr(node, "end_lineno", None) or first
            if first <= line <= end and (best is None or first > best[0]):
                best = (first, end)
        return best[0] if best else None


def _entered_elsewhere(query: CallQuery, parsed: _ParsedFile) -> bool:
    """A user frame entered while profiling ran (``CallQuery.entered``) whose recorded
    line starts no function of its name here and is no ``yield``/``await`` it resumed at."""
    frame = query.frame
    return (
        query.entered
        and frame.user
        and frame.line is not None
        and frame.func != "<module>"
        and not parsed.resumes_at(frame.line, frame.func)
    )


class SourcePack(msgspec.Struct, frozen=True):
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
    source_roots: Sequence[str],
    path_map: Sequence[tuple[str, str]],
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


def _truths_reading(
    scope: ast.AST, lines: list[int], called: str, right_after: frozenset[int] = frozenset()
) -> list[int]:
    """Of the truth tests on ``lines``, those whose expression calls ``called``: the frame
    called it last before its truth operator ran (``if t.any():`` beside ``if
    torch.cuda.is_available():``). Only that positive evidence narrows: a recorded frame
    name is often not the name the code wrote (an nn.Module call records ``_call_impl``,
    a lambda ``<lambda>``, a decorated function its wrapper), so when no test calls it, or
    a test calls nothing (``if t:``, which may be the one), every line stays; but for the
    tests that call nothing and that no path reaches from a call of ``called`` without
    another call between (``right_after``, ``_truths_right_after``): x-transformers'
    ``if greedy:`` runs after ``exists(...)`` in every pass, never right after the
    ``.all()`` of its per-token ``if is_eos_tokens.any(dim=-1).all():``."""
    if right_after and right_after.intersection(lines):
        lines = [line for line in lines if line in right_after]
    names: dict[int, set[str]] = {}
    plain: dict[int, bool] = {}
    for node in ast.walk(scope):
        test = getattr(node, "test", None) if isinstance(node, _TRUTH_TESTED) else None
        if test is None or test.lineno not in lines:
            continue
        plain[test.lineno] = plain.get(test.lineno, True) and _plain_test(test)
        called_here = names.setdefault(test.lineno, set())
        for call in ast.walk(test):
            if isinstance(call, ast.Call):
                func = call.func
                name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
                called_here.add(name)
    # A test of Python values only (``if isinstance(out, tuple):``, ``if any(flags):``,
    # ``if len(y.shape) == 2:``) reads no tensor: never the truth that synced.
    tensorish = [line for line in lines if not plain.get(line, False)]
    if tensorish and len(tensorish) < len(lines):
        lines = tensorish
    if any(not names.get(line) for line in lines):
        return lines  # a test of a plain name may be the one: no evidence against it
    kept = [line for line in lines if called in names[line]]
    return kept or lines


def _truths_right_after(scope: ast.AST, called: str) -> frozenset[int]:
    """The lines of ``scope``'s truth tests that a path reaches from a call named ``called``
    with no other call between: where a truth operator run right after that call may be.
    A call of the frame's shows in the trace (its Python frame, a built-in's included), as
    the frame's last call before an operator is read from it; but a class called may show
    none (``float(step)``: a type's call, or a class without a Python ``__init__``), and
    is passed through."""

    def match(kind: str, node: ast.AST) -> tuple[str | None, bool]:
        if kind == "call":
            name = _call_name(node)
            if name == called:
                return "C", False
            if name == "bool" and isinstance(node.func, ast.Name):  # type: ignore[attr-defined]
                # ``positive = bool((sigma > 0).all())``: the truth of its argument (kornia),
                # certain where that argument is the call just made.
                made_here = any(
                    isinstance(inner, ast.Call) and _call_name(inner) == called
                    for inner in ast.walk(node)
                )
                return "T", not made_here
            return "X", isinstance(getattr(builtins, name or "", None), type) or (
                bool(name) and name[:1].isupper()
            )
        if kind == "truth":
            return "T", True  # a test of a Python value runs no operator: passed through
        return None, False

    automaton = build(scope, match)
    found: set[int] = set()
    for edges in automaton.edges:
        for label, dest, _line in edges:
            if label == "C":
                for state in automaton.closure(dest):
                    found.update(line for kind, _d, line in automaton.edges[state] if kind == "T")
    return frozenset(found)


_TRUTH_TESTED = (ast.If, ast.While, ast.IfExp, ast.Assert)
# Python's built-in functions whose result is a plain Python value, never a tensor: a test
# made of them reads nothing back (``if any(flags):`` beside ``if float(step) >= 0 and t:``,
# whose frameless ``float`` left ``any`` the last call seen before ``t``'s truth). Not
# ``bool``: ``if bool(t):`` is a tensor's truth.
_PLAIN_VALUE_BUILTINS = frozenset(
    {
        "any",
        "all",
        "len",
        "isinstance",
        "issubclass",
        "callable",
        "hasattr",
        "int",
        "float",
        "str",
        "repr",
        "type",
        "id",
        "hash",
    }
)


# The names scripts give their parsed command line or config (``args = parser.parse_args()``,
# CleanRL's ``args = tyro.cli(Args)``, Hydra's ``cfg``): an attribute of one is a setting,
# never a tensor (CleanRL's ``if args.norm_adv:`` was a candidate for its ``approx_kl`` test).
_SETTINGS_NAMES = frozenset({"args", "opt", "opts", "hparams", "flags", "FLAGS", "cfg", "config"})


def _plain_test(test: ast.expr) -> bool:
    """Whether a truth test is made only of those built-ins' results, constants and
    settings (``args.norm_adv``, ``_SETTINGS_NAMES``), joined by ``and``/``or``/``not`` and
    comparisons: no other name, attribute or call whose value may be a tensor."""
    if isinstance(test, ast.Attribute):
        base = test.value
        while isinstance(base, ast.Attribute):
            base = base.value
        return isinstance(base, ast.Name) and base.id in _SETTINGS_NAMES
    if isinstance(test, ast.BoolOp):
        return all(_plain_test(value) for value in test.values)
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return _plain_test(test.operand)
    if isinstance(test, ast.Compare):
        return all(_plain_test(part) for part in (test.left, *test.comparators))
    if isinstance(test, ast.Constant):
        return True
    return (
        isinstance(test, ast.Call)
        and isinstance(test.func, ast.Name)
        and test.func.id in _PLAIN_VALUE_BUILTINS
    )


# How trace files' names end (``*.pt.trace.json[.gz]``): another run's folder holds them.
_TRACE_SUFFIXES = (".pt.trace.json", ".pt.trace.json.gz")
# The suffix index's mark that the roots were walked (no file is named this).
_WALKED = "/"
# Tied candidates compared byte for byte, at most this many (each read whole).
_SAME_COPIES_MAX = 8


def _is_within(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


def _shared_folder(path: str, folder: str) -> str:
    """The deepest folder holding both (absolute paths); "" where none does (other drives)."""
    try:
        return os.path.commonpath([path, folder])
    except ValueError:
        return ""


def _mtime_ns(path: Path) -> int | None:
    try:
        return path.stat().st_mtime_ns
    except OSError:
        return None


def _all_same_bytes(paths: list[Path]) -> bool:
    try:
        first = paths[0].read_bytes()
        return all(path.read_bytes() == first for path in paths[1:])
    except OSError:
        return False


# Trailing path components a library file found by the roots' walk must share with its
# recorded path (all of them where it has fewer): its package's folders, not its name only.
LIBRARY_TAIL_MIN = 3


def _names_the_library_file(found: Path | _Copies | None, recorded: str) -> bool:
    """Whether ``found`` (by the roots' walk) ends with enough of the recorded library path."""
    if found is None:
        return True
    parts = [p for p in recorded.split("/") if p and p not in (".", "..")]
    need = min(len(parts), LIBRARY_TAIL_MIN)
    for path in found.paths if isinstance(found, _Copies) else (found,):
        tail = path.parts[-need:] if need else ()
        if list(tail) != parts[-need:]:
            return False
    return True


class _Copies:
    """Different files under the roots that match a recorded path equally: the last
    ``matched`` parts of each are the recorded path's.

    Made once per recorded path (``SourceResolver._found``) and then a key of the per-trace
    caches, so it hashes by identity: a tuple's hash walks every path, and a script copied
    into each of 2,000 experiment folders cost 0.8 ms per sync looked up."""

    __slots__ = ("paths", "matched")

    def __init__(self, paths: tuple[Path, ...], matched: int) -> None:
        self.paths = paths
        self.matched = matched


class SourceResolver:
    """Finds source files (``--source-root``, ``--path-map``) and exact call lines."""

    def __init__(
        self,
        roots: Sequence[str] | None = None,
        path_map: Sequence[tuple[str, str]] = (),
    ) -> None:
        self.roots = [_resolved(r) for r in (roots or [os.getcwd()])]
        self.path_map = [(str(a), str(b)) for a, b in path_map]
        # A path the trace names -> its file here; ``_Copies``: different files that match
        # it equally (``_nearest`` picks among them for each trace).
        self._found: dict[str, Path | _Copies | None] = {}
        self._found_library: dict[str, Path | _Copies | None] = {}
        # The folder of the trace being resolved (``beside``): of different files that
        # match a recorded path equally, the one in the trace's folder or the nearest
        # folder above it is its run's copy.
        self._trace_dir: str | None = None
        # When the trace being resolved was written (``beside``): a tied copy of a file
        # written after it is not what the run ran (``_copy_that_ran``).
        self._trace_written_ns: int | None = None
        # Such tied files by their folder, built once and shared with every view.
        self._by_folder: dict[_Copies, dict[str, Path]] = {}
        self._nearest_of: dict[_Copies, Path | None] = {}
        # Per trace (``beside``): a relative recorded path's file in the trace's folder or
        # the nearest one above it, under a root (``_beside_trace``).
        self._beside_of: dict[str, Path | None] = {}
        # Folder -> whether it holds trace files (``_holds_traces``), shared.
        self._trace_folders: dict[str, bool] = {}
        # Of this trace's view: a lone match not taken, as it lies in another run's folder.
        self._refused: dict[_Copies, Path] = {}
        # The functions this trace ran, by recorded file (``prefer_copies``).
        self._ran: dict[str, set[tuple[str, int | None]]] = {}
        # Whether a file of the program this trace ran sets the default device (``_ran``'s
        # files): a factory's tensor anywhere in it is then made there.
        self._sets_default_device: bool | None = None
        # (scope, candidate lines, profilers) -> the ``%`` test all run under (``_shared_guard``).
        self._shared_guards: dict[tuple[Any, ...], str | None] = {}
        self._shared_host_uses: dict[tuple[Any, ...], str | None] = {}
        # (file, line, function) -> whether it calls a mean CTC loss module.
        self._ctc_modules: dict[tuple[str, int, str], bool] = {}
        self._def_lines: dict[tuple[str, str], int] = {}
        # An exact line -> whether its ``.to()`` names the host through a name
        # (``copies_to_the_host_by_name``).
        self._host_copies: dict[tuple[str, int, str], bool] = {}
        # A library file -> whether a ``.to()`` of it names the host (``may_copy_to_the_host``).
        self._names_host: dict[str, bool] = {}
        # (the file read, the __init__'s line) -> its class: by the file, not the recorded
        # path, which names each run's copy alike.
        self._init_classes: dict[tuple[Path | None, str, str], str | None] = {}
        self._parsed: dict[Path, _ParsedFile | None] = {}
        self._functions: dict[tuple[Path, int, str], _ParsedFile | None | bool] = {}
        self._bytes: dict[Path, bytes | None] = {}
        # Size and mtime (ns) of each file read, taken just before reading it: a result
        # records them for its lines' files, so an edit made while (or after) the trace was
        # analysed shows as a change (``models.result_stamps``).
        self.read_stamps: dict[str, Stamp] = {}
        self._lines: dict[Path, list[bytes] | None] = {}
        # The suffix walk's index (file name -> paths), walked once: the dict is shared with
        # every ``beside`` view, so the walk's completion is a key of it, not an attribute.
        self._index: dict[str, list[Path]] = {}
        self.search_cut: list[str] = []  # roots whose suffix search stopped early
        self._automata: dict[Any, Automaton] = {}
        # Per scope: its names that hold Python values (loop counters, flags) and its
        # lookups a string then indexes, for every automaton of it (``_python_indices``).
        self._scope_indices: dict[int, tuple[frozenset[str], frozenset[int]]] = {}
        self._alignments: dict[Any, Any] = {}
        self._scope_calls: dict[int, frozenset[str]] = {}  # id(scope) -> ``_call_names``
        # ipykernel's cell number -> the notebook cells of that text (built at the first
        # cell frame, shared with every view); a recorded cell path found so -> those cells
        # (shared), and -> the one named in this trace's view (``_cell_for``).
        self._kernel_cells: dict[int, list[_KernelCell]] = {}
        self._copies_of: dict[str, list[_KernelCell]] = {}
        self._cell_of: dict[str, NotebookCell] = {}
        # ... and its text as written (magics, prompts), for the source view.
        self._cell_shown: dict[str, bytes] = {}
        # Of this trace's view: the numbers of its cells' frames (``prefer_cells``), and how
        # many of them each notebook holds (made at the first copy ranked).
        self._trace_cells: frozenset[int] = frozenset()
        self._cells_held: dict[Path, int] | None = None
        # (scope, line, frameless) -> an exact line's loop and size facts (``_line_facts``);
        # the scopes are kept alive by ``_parsed`` and ``_functions``, so ids stay theirs.
        self._facts: dict[tuple[int, int, bool], dict[str, Any]] = {}
        # Per scope and call name: ``_truths_right_after``'s lines.
        self._truths_after: dict[tuple[int, str], frozenset[int]] = {}
        # (file, line, function, which check) -> whether it holds (``_holds_on_its_lines``)
        self._host_checks: dict[tuple[Any, ...], bool] = {}
        self._host_indexes: dict[tuple[str, int, str, bool], bool] = {}
        self._iterators: dict[tuple[str, int | None, str], bool] = {}
        # Each notebook read for its cells -> its size and mtime then, and what it held
        # (``_held``); each folder looked in -> its size, mtime and the notebooks in it.
        self._notebooks_read: dict[str, tuple[int, int, Any]] = {}
        self._folders_read: dict[str, Stamp] = {}
        # A file's lines for ``line_text``, split once.
        self._split: dict[Path, list[bytes]] = {}

    # -- files -------------------------------------------------------------------------
    def beside(self, trace_path: str) -> SourceResolver:
        """This resolver for one trace: what it finds and parses is shared with every other
        trace's; of different files that match a recorded path equally (a script copied
        beside each run's logs, edited between runs), it takes the one in the trace's
        folder or the nearest folder above it: that run's copy. A copy of another run is
        never taken, however near: it may be another version."""
        view = copy.copy(self)
        view._trace_dir = None
        if "://" not in trace_path:
            # The folder resolved, not the file: a trace stored as a symlink (git-annex,
            # DVC) stays in its run's folder.
            view._trace_dir = os.path.realpath(os.path.dirname(os.path.abspath(trace_path)))
        view._trace_written_ns = None
        if "://" not in trace_path:
            view._trace_written_ns = _mtime_ns(Path(trace_path))
        view._nearest_of = {}
        view._refused = {}
        view._ran = {}
        view._sets_default_device = None
        view._trace_cells = frozenset()
        view._cells_held = None
        view._cell_of = {}
        view._beside_of = {}
        return view

    def probes(self, files: Iterable[str], limit: int = 64) -> list[str]:
        """Where each recorded file, not found now, would be found if the user copied it
        in, as ``_find`` looks: at its recorded path, at a --path-map target, under a root
        at its relative path, at each tail of it of a folder and more (a checkout of the
        recorded tree) or by its name, beside the trace when that is under a root; those
        absent now, at most ``limit``. (A file only the roots' walk would find, deeper, is
        not among them.)"""
        found: list[str] = []
        for trace_file in files:
            norm = trace_file.replace("\\", "/")
            parts = [p for p in norm.split("/") if p and p not in (".", "..")]
            if not parts or KERNEL_CELL.search(norm):
                continue  # a Jupyter cell's code is read from a notebook, never its own file
            places = [norm] if norm.startswith("/") else []
            for src, dst in self.path_map:
                src_norm = src.replace("\\", "/")
                if norm.startswith(src_norm):
                    places.append(dst + norm[len(src_norm) :])
            for root in self.roots:
                if not norm.startswith(("/", "..")) and ":" not in parts[0]:
                    places.append(os.path.join(root, *parts))
                for keep in range(min(len(parts), 4), 0, -1):  # _under_root's tails
                    places.append(os.path.join(root, *parts[-keep:]))
            if self._trace_dir is not None and any(
                _is_within(self._trace_dir, root) for root in self.roots
            ):
                places.append(os.path.join(self._trace_dir, parts[-1]))
            for place in places:
                if place not in found and not os.path.exists(place):
                    found.append(place)
                    if len(found) >= limit:
                        return found
        return found

    def _nearest(self, found: Path | _Copies | None) -> Path | None:
        """``found``, or of several different files the one whose folder (above the tail
        that matched the recorded path) is the trace's folder or the nearest one above it;
        None when none is there."""
        if not isinstance(found, _Copies):
            return found
        if self._trace_dir is None:
            return found.paths[0] if len(found.paths) == 1 else None
        if found not in self._nearest_of:
            folders = self._by_folder.get(found)
            if folders is None:
                # Each copy's folder is where the recorded path's matched tail starts
                # (``run_a`` for ``run_a/mylib/dist.py`` matching ``mylib/dist.py``). The
                # walk's paths: the roots resolved, and os.walk follows no link.
                folders = self._by_folder[found] = {
                    str(p.parents[found.matched - 1]): p for p in found.paths
                }
            folder = self._trace_dir
            while (nearest := folders.get(folder)) is None and os.path.dirname(folder) != folder:
                folder = os.path.dirname(folder)
            if nearest is None and len(found.paths) == 1:
                # The only file of that name, not above this trace: the project's file,
                # unless it lies in another run's folder (a copy archived with that run,
                # maybe another version of the script).
                (copy_folder,) = folders
                if self._in_another_run(copy_folder):
                    self._refused[found] = found.paths[0]
                else:
                    nearest = found.paths[0]
            self._nearest_of[found] = nearest
        return self._nearest_of[found]

    def copies_found(self, trace_file: str) -> int:
        """How many different files match ``trace_file`` equally where ``find_file`` took
        none of them (none in the trace's folder or above it, and not one refused as
        another run's): 0 otherwise."""
        found = self._found.get(trace_file)
        if not isinstance(found, _Copies) or len(found.paths) < 2 or found in self._refused:
            return 0
        return len(found.paths) if self._nearest(found) is None else 0

    def refused_copy(self, trace_file: str) -> Path | None:
        """The file found for ``trace_file`` and not taken for this trace because it lies in
        another run's folder (``find_file`` gave None for it), else None."""
        found = self._found.get(trace_file)
        return self._refused.get(found) if isinstance(found, _Copies) else None

    def _in_another_run(self, folder: str) -> bool:
        """Whether ``folder`` (neither the trace's folder nor above it) is, or is inside, a
        run's folder below the root it is under: one that holds trace files or torch_npu
        worker folders itself (``run_a/train.py`` beside ``run_a/*.pt.trace.json``), or in
        a subfolder named as the trace's own folder (``run_a/profile/`` for a trace in
        ``run_b/profile/``: the same layout). Not ``scripts/train.py`` beside a
        ``scripts/log/`` of old traces (an earlier ``tensorboard_trace_handler("./log")``):
        the project's script."""
        root = max((r for r in self.roots if _is_within(folder, r)), key=len, default=None)
        if root is None:
            return False
        trace_dir = self._trace_dir or ""
        layout = os.path.basename(trace_dir)
        while folder != root and not _is_within(trace_dir, folder):
            if self._holds_traces(folder) or (
                layout and self._holds_traces(os.path.join(folder, layout))
            ):
                return True
            parent = os.path.dirname(folder)
            if parent == folder:
                break
            folder = parent
        return False

    def _holds_traces(self, folder: str) -> bool:
        """Whether ``folder`` holds a trace file or a torch_npu worker folder (listed once
        per folder)."""
        from tb_syncfinder.discovery import ASCEND_DIR_PATTERN

        if folder not in self._trace_folders:
            holds = False
            try:
                with os.scandir(folder) as entries:
                    # By the name's ending, as tensorboard_trace_handler writes it: the
                    # PyTorch Profiler tab's own pattern costs torch_tb_profiler's import
                    # (~20 ms of a report's start-up).
                    holds = any(
                        e.name.endswith(_TRACE_SUFFIXES) or ASCEND_DIR_PATTERN.match(e.name)
                        for e in entries
                    )
            except OSError:
                pass
            self._trace_folders[folder] = holds
        return self._trace_folders[folder]

    def _suffix_index(self) -> dict[str, list[Path]]:
        index = self._index
        if _WALKED not in index:
            index[_WALKED] = []
            seen: set[Path] = set()  # nested roots (a checkout and its demo folder) walk twice
            count = 0
            for root in self.roots:
                walked = 0
                for dirpath, dirnames, filenames in os.walk(root):
                    dirnames[:] = [
                        d for d in dirnames if d not in _SKIP_DIRS and not d.startswith(".")
                    ]
                    walked += len(dirnames) + len(filenames)
                    for name in filenames:
                        if name.endswith(".py"):
                            path = Path(dirpath, name)
                            if path not in seen:
                                seen.add(path)
                                index.setdefault(name, []).append(path)
                                count += 1
                        elif name.endswith(".ipynb") and not name.startswith("."):
                            # (not Jupyter's hidden copy made while saving, ``.~x.ipynb``)
                            path = Path(dirpath, name)
                            if path not in seen:
                                seen.add(path)
                                index.setdefault(_NOTEBOOKS, []).append(path)
                    if count > _MAX_INDEXED_FILES or walked > _MAX_WALKED_ENTRIES:
                        self.search_cut.append(root)
                        import logging  # only here: a CLI run that never cuts skips it

                        logging.getLogger(__name__).warning(
                            "sync advisor: the search for recorded source files under %s "
                            "stopped after %d entries (%d Python files); name the folder of "
                            "your code with --source-root (or a --path-map)",
                            root,
                            walked,
                            count,
                        )
                        break
        return self._index

    def _under_root(self, parts: list[str]) -> tuple[Path | None, int]:
        """The file a root holds at the longest tail of the recorded path, when that tail
        is at least a folder and a file (or the whole recorded path), and how many parts
        of it match: a checkout of the recorded tree, found with a few stats."""
        for keep in range(len(parts), 0, -1):
            if keep < 2 and keep != len(parts):
                break  # a bare file name could be any file of that name: the walk decides
            for root in self.roots:
                candidate = Path(root, *parts[-keep:])
                if candidate.is_file():
                    return candidate, keep
        return None, 0

    def find_file(self, trace_file: str) -> Path | None:
        """The readable local file for a path as the trace names it, or None."""
        if trace_file not in self._found:
            self._found[trace_file] = self._find(trace_file)
        found = self._found[trace_file]
        if isinstance(found, Path):
            # One file under a root at the recorded relative path: a copy beside the trace,
            # nearer, is that run's (the root's may be another version of the script).
            beside = self._beside_trace(trace_file)
            if beside is not None:
                return beside
        nearest = self._nearest(found)
        if nearest is None and isinstance(found, _Copies):
            nearest = self._copy_that_ran(trace_file, found)
            if nearest is not None:
                self._nearest_of[found] = nearest
        return nearest

    def _beside_trace(self, trace_file: str) -> Path | None:
        """The file at a relative recorded path (torch names a script by its path from its
        ``sys.path`` entry: ``train.py``) in the trace's folder or the nearest folder above
        it, below the root that holds the trace; None where there is none, or the path is
        absolute. A run's logs written beside its script (``exp_c/logs``) are read with
        ``exp_c/train.py``, not the same name in the folder the report runs in (a walk: every
        line of a fixed run read from the baseline script, claimed exact). Logs under no
        root (``report ../logs/r`` run in the script's folder) are searched up to the folder
        they share with the nearest root, that folder left out as a root's own is: the
        current folder's script had been read for a run whose own copy lay in its folder."""
        if trace_file in self._beside_of:
            return self._beside_of[trace_file]
        found = None
        norm = trace_file.replace("\\", "/")
        trace_dir = self._trace_dir
        if trace_dir is not None and not norm.startswith(("/", "..", "<")) and ":" not in norm:
            root = max((r for r in self.roots if _is_within(trace_dir, r)), key=len, default=None)
            if root is None:
                shared = max(
                    (_shared_folder(trace_dir, r) for r in self.roots), key=len, default=""
                )
                root = shared or None
            folder = trace_dir
            while root is not None and folder != root and _is_within(folder, root):
                candidate = Path(folder, norm)
                if candidate.is_file():
                    found = candidate
                    break
                folder = os.path.dirname(folder)
        self._beside_of[trace_file] = found
        return found

    def _find(self, trace_file: str, walk: bool = True) -> Path | _Copies | None:
        if not trace_file:
            return None
        if trace_file.startswith("<"):
            # Built-ins and frozen modules have no source; an IPython cell's may be here.
            cell = IPYTHON_CELL.match(trace_file) and _unsaved_source(trace_file)
            return Path(trace_file) if cell else None
        norm = trace_file.replace("\\", "/")
        for src, dst in self.path_map:
            src_norm = src.replace("\\", "/")
            if norm.startswith(src_norm):
                candidate = Path(dst + norm[len(src_norm) :])
                if candidate.is_file():
                    return candidate
        candidate = Path(norm)
        kernel_cell = KERNEL_CELL.search(norm)
        if kernel_cell is not None and walk and not candidate.is_file():
            # Its notebook names the cell; in the kernel that ran it (``analyze(prof)``)
            # its lines are in ``linecache`` too, but a notebook saved since names it.
            in_notebook = self._kernel_cell(norm, int(kernel_cell.group(1)))
            if in_notebook is not None:
                return in_notebook
        if candidate.is_absolute() and (candidate.is_file() or _unsaved_source(norm)):
            return candidate
        if kernel_cell is not None:
            return None
        if not candidate.is_absolute() and not norm.startswith(".."):
            in_roots = [path for root in self.roots if (path := Path(root, norm)).is_file()]
            if len(in_roots) == 1 or (
                1 < len(in_roots) <= _SAME_COPIES_MAX and _all_same_bytes(in_roots)
            ):
                return in_roots[0]
            if in_roots:
                # ``main.py`` under two roots (pytorch/examples names every script so): the
                # trace's own folder, or the one whose functions the trace ran, decides
                # (``_nearest``, ``prefer_copies``); not the first root given.
                return _Copies(tuple(in_roots), len(Path(norm).parts))
        # Suffix match: the trace was recorded elsewhere; find the file under a root whose
        # path ends with the longest run of the same components. A tie is ambiguous: None.
        parts = [p for p in norm.split("/") if p and p not in (".", "..")]
        if not parts:
            return None
        direct, direct_len = self._under_root(parts)
        if direct is not None and direct_len == len(parts):
            return direct  # the whole recorded path: nothing can match longer
        if not walk:
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
        if best_len < len(parts) and not candidate.is_absolute() and not _WINDOWS_DRIVE.match(norm):
            # A relative path is torch's for a file under a ``sys.path`` entry (an installed
            # package's ``metricpkg/metrics.py``): its folders are the module's, so only the
            # whole path names it. A tail of it is another module (``./metrics.py``), and a
            # bare ``__init__.py`` any package's.
            return None
        if direct is not None and best_len <= direct_len:
            # Nothing under the roots matches more of the recorded path than the file at
            # that tail (the walk may have been cut, or tie with a copy elsewhere).
            return direct
        # A broken symlink is listed as a file by os.walk: only a readable file counts.
        files = [path for path in best if path.is_file()]
        if len(files) == 1:
            # Found by its tail alone: whether it may stand for this trace's file depends
            # on where it lies against the trace (``_nearest``).
            return _Copies((files[0],), best_len)
        # Copies of one file (a script copied beside each run's logs): any of them gives
        # the same lines. Different files of one name stay ambiguous.
        if 1 < len(files) <= _SAME_COPIES_MAX and _all_same_bytes(files):
            return files[0]
        # Different files: the trace's run may have its own copy (``_nearest``).
        return _Copies(tuple(files), best_len) if len(files) > 1 else None

    def _kernel_cell(self, recorded: str, number: int) -> Path | None:
        """The recorded path of a Jupyter cell's code, standing for the text of the notebook
        cell it hashes to (read like a file's: ``_source_bytes``); None when no notebook
        under the roots holds a cell of that text."""
        cells = self._kernel_cells
        if -1 not in cells:  # the notebooks' cells, read once (-1: no cell's number)
            notebooks = sorted(self._suffix_index().get(_NOTEBOOKS, []))
            # The folders a notebook saved later would most likely be in (the roots, those
            # of the notebooks found), by the notebooks they hold then.
            for folder in {*map(str, self.roots), *(str(n.parent) for n in notebooks)}:
                try:
                    status = os.stat(folder)
                except OSError:
                    continue
                self._folders_read[folder] = (
                    status.st_size,
                    status.st_mtime_ns,
                    stamp_content(folder),
                )
            for notebook in notebooks:
                try:
                    status = notebook.stat()
                except OSError:
                    continue
                read = _read_notebook(notebook)
                found = _notebook_cells(read, notebook) if read is not None else []
                # What it held of code, not its outputs (``notebook_stamps``).
                self._notebooks_read[str(notebook)] = (
                    status.st_size,
                    status.st_mtime_ns,
                    # As ``_held`` reads it, from the cells just hashed.
                    tuple((c.number, c.index, c.execution_count, c.id) for c in found)
                    if read is not None
                    else None,
                )
                for cell in found:
                    cells.setdefault(cell.number, []).append(cell)
            cells[-1] = []
        found = cells.get(number)
        if not found:
            return None
        path = Path(recorded)
        # Copies of one text have the same lines: which copy names it is each trace's
        # (``_cell_for``), the text everyone's.
        self._bytes[path] = found[0].text
        self._cell_shown[str(path)] = found[0].shown
        self._copies_of[str(path)] = found
        return path

    def _cell_for(self, recorded: str | None) -> NotebookCell | None:
        """The notebook cell that a Jupyter cell's recorded path (found by ``_kernel_cell``)
        stands for in this trace's view: of copies, the one ``_notebook_rank`` puts first,
        once per view, so that a sync's line and its stack's frames name one notebook."""
        if recorded is None:
            return None
        chosen = self._cell_of.get(recorded)
        if chosen is None:
            found = self._copies_of.get(recorded)
            if not found:
                return None
            cell = min(found, key=self._notebook_rank) if len(found) > 1 else found[0]
            chosen = self._cell_of[recorded] = NotebookCell(
                str(cell.notebook), cell.index, cell.execution_count, len(found), cell.id
            )
        return chosen

    def prefer_def_lines(self, entered: Mapping[tuple[str, str], set[int]]) -> None:
        """This trace's frames entered while profiling ran, by (file, function): the lines
        they recorded, their def line. An unread file's frame already running when
        profiling started recorded where it was instead; it is named at that def line, as
        the frames of its function entered later are (one site, not two: Stable-Baselines3's
        rollout read at 162* and 192* where its source was not found)."""
        self._def_lines = {
            key: next(iter(lines)) for key, lines in entered.items() if len(lines) == 1
        }

    def prefer_copies(self, frames: Iterable[Frame]) -> None:
        """This trace's user frames: of different files that match a recorded path equally
        and none of which lies by the trace (``_nearest``), ``find_file`` takes the one file
        that holds every function the trace ran from that path where the trace says
        (``main.py`` of two scripts given as two source roots: each run reads its own).
        Only noted here: a file is looked for when a line of it is."""
        ran: dict[str, set[tuple[str, int | None]]] = {}
        for frame in frames:
            if frame.user:
                ran.setdefault(frame.file, set()).add((frame.func, frame.line))
        self._ran = ran

    def _copy_that_ran(self, trace_file: str, found: _Copies) -> Path | None:
        """Of ``found``'s files, the one holding every function the trace ran from
        ``trace_file`` (``prefer_copies``); None: none or several."""
        functions = self._ran.get(trace_file)
        if not functions or len(found.paths) < 2 or found in self._refused:
            return None
        holding = [path for path in found.paths if self._holds(path, functions)]
        if len(holding) > 1 and self._trace_written_ns is not None:
            # Of copies that all hold those functions, one written after the trace is not
            # the version that ran (``cp -r proj proj_fixed`` to try a fix made every line of
            # the run's report inexact, its host reads listed again: a segmentation walk).
            holding = [
                path
                for path in holding
                if (written := _mtime_ns(path)) is not None and written <= self._trace_written_ns
            ]
        return holding[0] if len(holding) == 1 else None

    def _holds(self, path: Path, functions: set[tuple[str, int | None]]) -> bool:
        """Whether ``path`` has each (function, line) as a frame: a def of that name that
        starts at the line or holds it (``<module>``: a statement of the module's own, not
        a def's or a class's body)."""
        parsed = self._parse(path)
        if parsed is None:
            return False
        module_lines = [
            (statement.lineno, statement.end_lineno or statement.lineno)
            for statement in parsed.tree.body
            if not isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
        ]
        return all(
            line is not None
            and (
                any(first <= line <= last for first, last in module_lines)
                if func == "<module>"
                else parsed.scope_at(line, func) is not None
                or parsed.running_scope(line, func) is not None
            )
            for func, line in functions
        )

    def prefer_cells(self, trace_files: Iterable[str]) -> None:
        """This trace's frames' files: of copies of a cell (a notebook duplicated, copied
        into each experiment's folder, an edited copy), the one in the notebook that holds
        the most of the trace's cells is named, so that one trace's cells are named in one
        notebook (``_notebook_rank``)."""
        numbers = set(self._trace_cells)  # a trace read in windows: each window's, added
        for trace_file in trace_files:
            number = KERNEL_CELL.search(trace_file.replace("\\", "/"))
            if number is not None:
                numbers.add(int(number.group(1)))
        if numbers != self._trace_cells:
            self._trace_cells = frozenset(numbers)
            self._cells_held = None

    def _notebook_rank(self, cell: _KernelCell) -> tuple[int, int, bool, str]:
        """How a copy of a cell ranks (lowest first): its notebook holding more of the
        trace's cells (``prefer_cells``), then lying nearer the trace (its folder or one
        above: that run's copy), then not named as Jupyter names a duplicate
        (``train-Copy1.ipynb``), then by path."""
        held = self._cells_held
        if held is None:
            held = self._cells_held = {}
            for number in self._trace_cells:
                for copy_ in {c.notebook for c in self._kernel_cells.get(number, ())}:
                    held[copy_] = held.get(copy_, 0) + 1
        shared = 0
        if self._trace_dir is not None:
            folder = os.path.realpath(cell.notebook.parent)
            try:
                shared = len(Path(os.path.commonpath([folder, self._trace_dir])).parts)
            except ValueError:  # another drive
                shared = 0
        duplicate = _JUPYTER_DUPLICATE.search(cell.notebook.name) is not None
        return (-held.get(cell.notebook, 0), -shared, duplicate, str(cell.notebook))

    def notebook_stamps(
        self, paths: Collection[str] | None = None, numbers: Iterable[int] | None = None
    ) -> dict[str, Stamp]:
        """Each notebook the cells were looked for in (of ``paths``, where given) as it was
        read: its size and mtime (ns), and what it held of the cells ``numbers`` (default:
        this trace's, ``prefer_cells``) as ``models.cells_digest`` and those numbers, so
        that running or editing another cell changes nothing. Without ``paths``, also the
        folders, by the notebooks they held (none of either before a cell frame was): a
        cell not found may be in a notebook once it is saved again, or in a notebook saved
        since beside them (VS Code's untitled notebook, saved once run)."""
        from tb_syncfinder.models import cells_digest

        wanted = tuple(sorted(set(self._trace_cells if numbers is None else numbers)))
        # Copied first, in one step: the plugin's source view reads from several threads,
        # and another may be filling these while this one iterates.
        read, folders = dict(self._notebooks_read), dict(self._folders_read)
        stamps: dict[str, Stamp] = {
            path: (size, mtime_ns, cells_digest(held, wanted), wanted)
            for path, (size, mtime_ns, held) in read.items()
            if paths is None or path in paths
        }
        if paths is None:
            stamps.update(folders)
        return stamps

    def frame_cell(self, trace_file: str) -> NotebookCell | None:
        """The notebook cell a frame's recorded file stands for where it is a Jupyter cell's
        code (``KERNEL_CELL``) that a notebook under the roots holds; None otherwise."""
        norm = trace_file.replace("\\", "/")
        number = KERNEL_CELL.search(norm)
        if number is None:
            return None
        path = self._kernel_cell(norm, int(number.group(1)))
        return self._cell_for(str(path)) if path is not None else None

    def notebook_cell(self, trace_file: str) -> tuple[NotebookCell, bytes] | None:
        """The notebook cell a Jupyter cell's recorded path stands for, and its text as
        written (its magics, not what IPython ran in their place); None for any other path,
        or a cell no notebook under the roots holds."""
        path = self.find_file(trace_file)
        cell = self._cell_for(str(path)) if path is not None else None
        text = self._cell_shown.get(str(path)) if path is not None else None
        return (cell, text) if cell is not None and text is not None else None

    def line_text(self, source: Source | None) -> str | None:
        """The text of a source's exact line as read (a cell's from its notebook cell); None
        where the line is not exact or its file was not read."""
        if source is None or not source.line_exact or source.line is None:
            return None
        if source.resolved_path is None:
            return None
        # A cell's text is kept under its recorded name (``_kernel_cell``).
        cell = source.cell is not None
        path = Path(source.file.replace("\\", "/") if cell else source.resolved_path)
        lines = self._split.get(path)
        if lines is None:
            data = self._bytes.get(path)
            if data is None and not cell:
                data = self._source_bytes(path)
            if data is None:
                return None
            lines = self._split[path] = data.splitlines()  # once per file, not per sync
        if not 1 <= source.line <= len(lines):
            return None
        return lines[source.line - 1].decode("utf-8", "replace")

    def reads_host_made(self, source: Source | None, by_factory: bool = False) -> bool:
        """Whether a source's line reads only tensors made on the host from Python data
        (``reads_host_made_tensor``): its exact line, or else every one of its candidate
        lines (a library's ``while`` loop that draws ``torch.randn(1, generator=g).item()``
        until it fits, timm's learning-rate noise); False where there are none, or its file
        or function is not here as recorded (a notebook cell's is not looked at).
        ``by_factory``: the reads are ``torch.tensor([...])``'s of what its list holds."""

        def check(scope: ast.AST, line: int, module: ast.AST | None) -> bool:
            return reads_host_made_tensor(scope, line, module, by_factory)

        return self._holds_on_its_lines(source, ("reads", by_factory), check)

    def prints_host_values(self, source: Source | None) -> bool:
        """Whether a source's line turns only host values into text (``prints_host_values``),
        on its exact line or every candidate line."""
        return self._holds_on_its_lines(source, ("prints",), prints_host_values)

    def runs_on_the_host_only(self, source: Source | None) -> bool:
        """Whether a source's line runs only where its tensor is on the host
        (``runs_on_the_host_only``), as ``reads_host_made`` reads its lines."""

        def check(scope: ast.AST, line: int, _module: ast.AST | None) -> bool:
            return runs_on_the_host_only(scope, line)

        return self._holds_on_its_lines(source, ("host branch",), check)

    def touches_only_host(self, source: Source | None) -> bool:
        """Whether a source's line reads only values on the host (``touches_only_host_
        values``), as ``reads_host_made`` reads its lines."""
        return self._holds_on_its_lines(source, ("touches",), touches_only_host_values)

    def _holds_on_its_lines(
        self,
        source: Source | None,
        check_key: tuple[Any, ...],
        check: Callable[[ast.AST, int, ast.AST | None], bool],
    ) -> bool:
        """Whether ``check`` (scope, line, module) holds on a source's exact line, or else on
        every one of its candidate lines; False where there are none, or its file or
        function is not here as recorded. Once per line and check: a CPU trace of a long
        run has thousands of reads on a few lines."""
        if source is None or source.line is None:
            return False
        lines = [source.line] if source.line_exact else list(source.candidates)
        path = source.resolved_path
        if not lines or path is None or source.cell is not None:
            return False
        default_device = self._program_sets_default_device()
        for line in lines:
            key = (path, line, source.func, default_device, *check_key)
            found = self._host_checks.get(key)
            if found is None:
                parsed = self._parse_for_host_check(Path(path))
                scope = parsed.running_scope(line, source.func) if parsed else None
                found = scope is not None and check(scope, line, parsed.tree if parsed else None)
                self._host_checks[key] = found
            if not found:
                return False
        return True

    def _parse_for_host_check(self, path: Path) -> _ParsedFile | None:
        """``path`` parsed for the checks of tensors made on the host; None where the
        program sets the default device, which makes its factories' tensors there: in this
        file, or in another file of the program (nerf-pytorch's ``run_nerf.py`` sets
        ``torch.cuda.FloatTensor`` as the default type for its helpers' ``torch.Tensor
        ([10.])``, whose read was dropped as a host tensor's)."""
        data = self._source_bytes(path) or b""
        if _DEFAULT_DEVICE_SET.search(data) or self._program_sets_default_device():
            return None
        return self._parse(path)

    def _program_sets_default_device(self) -> bool:
        """Whether a file of the program this trace ran (``prefer_copies``'s user files)
        sets a default device that may be a GPU (``_GPU_DEFAULT_SET``: not ``with
        torch.device("meta")`` nor a CPU tensor type, which a file's own check still takes);
        found once per trace."""
        if self._sets_default_device is None:
            self._sets_default_device = any(
                (path := self.find_file(recorded)) is not None
                and _GPU_DEFAULT_SET.search(self._source_bytes(path) or b"") is not None
                for recorded in sorted(self._ran)
            )
        return self._sets_default_device

    def sync_before(self, source: Source, unrun: Sequence[UnrunSync]) -> UnrunSync | None:
        """Of a CPU-only trace's unrun synchronizes, the one that runs just before this
        source's exact line in each pass of its loop (``runs_just_before``); None: none."""
        if not source.line_exact or source.line is None or source.resolved_path is None:
            return None
        if source.cell is not None:
            return None
        before = [
            u
            for u in unrun
            if u.file == source.file and u.func == source.func and u.line < source.line
        ]
        if not before:
            return None
        parsed = self._parse(Path(source.resolved_path))
        scope = parsed.running_scope(source.line, source.func) if parsed else None
        if scope is None:
            return None
        return next(
            (
                u
                for u in sorted(before, key=lambda u: -u.line)
                if runs_just_before(scope, u.line, source.line, parsed.only_function_named)
            ),
            None,
        )

    def calls_a_mean_ctc_loss_module(self, source: Source | None) -> bool:
        """Whether a source's exact line calls an ``nn.CTCLoss`` of the mean reduction
        (``calls_a_mean_ctc_loss_module``)."""
        if source is None or not source.line_exact or source.line is None:
            return False
        path = source.resolved_path
        if path is None or source.cell is not None:
            return False
        key = (path, source.line, source.func)
        found = self._ctc_modules.get(key)
        if found is None:  # once per line: a long run calls its loss every step
            parsed = self._parse(Path(path))
            scope = parsed.running_scope(source.line, source.func) if parsed else None
            found = self._ctc_modules[key] = (
                parsed is not None
                and scope is not None
                and calls_a_mean_ctc_loss_module(scope, source.line, parsed.tree)
            )
        return found

    def copies_to_the_host_by_name(self, source: Source | None) -> bool:
        """Whether a source's exact line holds one ``.to(device)`` call whose device is a name
        bound, where the line runs, only to the host (``cpu_device = torch.device("cpu")``
        in torchvision's detection ``evaluate``, then ``v.to(cpu_device)`` in a
        comprehension), and not ``non_blocking=True``: the name ``catalogue.to_the_host``
        cannot read."""
        if source is None or not source.line_exact or source.line is None:
            return False
        if source.resolved_path is None or source.cell is not None:
            return False
        key = (source.resolved_path, source.line, source.func)
        found = self._host_copies.get(key)
        if found is None:
            parsed = self._parse(Path(source.resolved_path))
            scope = parsed.running_scope(source.line, source.func) if parsed else None
            found = False
            if parsed is not None and scope is not None:
                chain = [
                    scope,
                    *(parsed.enclosing_scopes(scope) if scope is not parsed.tree else []),
                ]
                found = _to_host_by_name(chain, source.line)
            self._host_copies[key] = found
        return found

    def indexes_host_made(self, source: Source | None) -> bool:
        """Whether a read made by a library's ``__getitem__`` under this source (``np.memmap``
        indexed with tensors) reads only indices the host has without a device
        (``indexes_host_values``): of the source's exact line, or else of any subscript in
        its function. False where the file or function is not here as recorded."""
        if source is None or source.line is None or source.resolved_path is None:
            return False
        if source.cell is not None:
            return False
        key = (
            source.resolved_path,
            source.line,
            source.func,
            source.line_exact,
            self._program_sets_default_device(),
        )
        found = self._host_indexes.get(key)
        if found is None:
            parsed = self._parse_for_host_check(Path(source.resolved_path))
            scope = parsed.running_scope(source.line, source.func) if parsed else None
            found = (
                parsed is not None
                and scope is not None
                and indexes_host_values(
                    scope,
                    parsed.enclosing_scopes(scope) if scope is not parsed.tree else [],
                    source.line if source.line_exact else None,
                )
            )
            self._host_indexes[key] = found
        return found

    def unrun_syncs(
        self, frames: Iterable[Frame], lines_run: Mapping[tuple[str, str], Collection[int]]
    ) -> list[UnrunSync]:
        """The explicit synchronizes (``explicit_syncs``) of the user's functions these
        frames ran, for a CPU-only trace, where none of them ran: a timing loop's
        ``torch.cuda.synchronize()`` under ``if device_type == "cuda":`` waits on every step
        of a GPU run, and the trace had nothing to say of it. A frame's function is looked
        for as the source resolution does (a fresh call's at its def line: all of it ran
        while profiled; a running one's around its line, a module's top level: only what
        shares a loop with a line its syncs were found on, ``lines_run`` by (file,
        function), as the code before and after the profiled loop ran outside it); a
        notebook cell's is not."""
        found: dict[tuple[str, int, str], UnrunSync] = {}
        seen: set[tuple[str, int | None, str]] = set()
        for frame in frames:
            key = (frame.file, frame.line, frame.func)
            if not frame.user or frame.line is None or frame.cell is not None or key in seen:
                continue
            seen.add(key)
            path = self.find_file(frame.file)
            parsed = self._parse(path) if path is not None else None
            if parsed is None:
                continue
            scope, ran = _scope_run(parsed, frame, lines_run)
            if scope is None:
                continue
            for line, code, guard in _unrun_in(scope, ran):
                guards = guards_around(scope, line)
                found.setdefault(
                    (frame.file, line, code),
                    UnrunSync(
                        frame.file, line, frame.func, code, guard, guards if len(guards) > 1 else []
                    ),
                )
        return [found[k] for k in sorted(found)]

    def unrun_library_syncs(
        self,
        calls: Iterable[tuple[Frame, int]],
        lines_run: Mapping[tuple[str, str], Collection[int]] | None = None,
    ) -> list[UnrunSync]:
        """The explicit synchronizes (``explicit_syncs``) in the functions of known
        libraries' own code a CPU-only trace shows called (``Attributor.library_functions_run``:
        each frame with how many times it ran), none of which ran: ultralytics' ``Profile.
        time`` synchronizes under ``if self.accelerator is not None:`` 8 times a validation
        batch on a GPU. A file is parsed only where it calls a ``synchronize``. A function
        already running when profiling started (``open_clip_train``'s ``train_one_epoch``,
        holding the profiled loop) is read as ``unrun_syncs`` reads the user's: only what
        shares a loop with its recorded line or its syncs' library lines (``lines_run``);
        how often those ran the trace cannot say (``calls`` None)."""
        found: dict[tuple[str, int, str], UnrunSync] = {}
        for frame, count in calls:
            if frame.line is None:
                continue
            path = self.find_library_file(frame.file)
            data = self._source_bytes(path) if path is not None else None
            if path is None or data is None or not _MAY_WAIT_UNRUN.search(data):
                continue
            parsed = self._parse_function(path, frame.line, frame.func)
            if parsed is None:
                parsed = self._parse(path)
            if not parsed:  # (False: another version of the library, without that function)
                continue
            scope, ran = _scope_run(parsed, frame, lines_run or {})
            if scope is None:
                continue
            if ran is not None:
                count = None  # its loop ran on: how many passes, no call counts
            library = called_library([(frame.file, frame.func)])
            for line, code, guard in _unrun_in(scope, ran):
                key = (frame.file, line, code)
                if key in found:
                    known = found[key].calls
                    found[key].calls = None if known is None or count is None else known + count
                    continue
                guards = guards_around(scope, line)
                found[key] = UnrunSync(
                    frame.file,
                    line,
                    frame.func,
                    code,
                    guard,
                    guards if len(guards) > 1 else [],
                    library=library,
                    calls=count,
                )
        return [found[k] for k in sorted(found)]

    def _in_cell(self, source: Source) -> Source:
        """``source`` with the notebook cell its file stands for, if it is a cell's code."""
        cell = self._cell_for(source.resolved_path)
        if cell is None:
            return source
        return msgspec.structs.replace(source, resolved_path=cell.notebook, cell=cell)

    def may_copy_to_the_host(self, trace_file: str) -> bool:
        """Whether a library file has a line whose ``.to(...)`` names the host
        (``catalogue.to_the_host``), read once per file; True where it is not found (the
        caller then resolves the line, which tells). A file without one (torch's
        ``clip_grad.py``, 80 of nanoGPT's ``.to()`` calls a run) needs no line resolved."""
        found = self._names_host.get(trace_file)
        if found is None:
            path = self.find_library_file(trace_file)
            data = self._source_bytes(path) if path is not None else None
            found = data is None or any(
                to_the_host(line.decode("utf-8", "replace"))
                for line in data.splitlines()
                if b".to(" in line
            )
            self._names_host[trace_file] = found
        return found

    def find_library_file(self, trace_file: str) -> Path | None:
        """A library's file: at its recorded path, under the path map or a root; else under
        this interpreter's site-packages (traces name library files relative to theirs:
        ``transformers/generation/utils.py``); else by the roots' suffix walk."""
        if trace_file in self._found_library:
            return self._nearest(self._found_library[trace_file])
        # The roots' walk comes last: a path recorded relative to site-packages is most
        # likely the installed copy, and walking a home folder for it took seconds.
        found: Path | _Copies | None = self._find(trace_file, walk=False)
        norm = trace_file.replace("\\", "/")
        if found is None and norm and not norm.startswith(("<", "/", "..")):
            for folder in _library_dirs():
                candidate = Path(folder, norm)
                if candidate.is_file():
                    found = candidate
                    break
        if found is None:
            self.find_file(trace_file)
            found = self._found[trace_file]
            if not _names_the_library_file(found, norm):
                # A user's file is found by its name alone (``train.py``); a library's
                # ``torch/cuda/__init__.py`` is not any ``__init__.py`` under the roots
                # (without torch installed, the demo's own ``__init__.py`` was taken).
                found = None
        self._found_library[trace_file] = found
        return self._nearest(found)

    def _parse_function(self, path: Path, line: int, func: str) -> _ParsedFile | None | bool:
        """Only the function of a library frame, parsed; False when the file holds no
        function ``func`` at ``line`` (another version of the library: the whole file would
        not say more); None to parse the whole file.

        A library's file is long (``torch/nn/functional.py``: 7,300 lines, 0.17 s to parse)
        and a frame needs only its own function. A file that binds a profiler object (whose
        ``.step()`` the matcher must know) is parsed whole."""
        key = (path, line, func)
        if key not in self._functions:
            lines = self._function_lines(path)
            found = _function_block(path, lines, line, func) if lines is not None else None
            self._functions[key] = found
        return self._functions[key]

    def _function_lines(self, path: Path) -> list[bytes] | None:
        """The file's lines for parsing one function at a time, or None when it must be
        parsed whole (unreadable, or it binds a profiler object); split once per file."""
        if path not in self._lines:
            data = self._source_bytes(path)
            usable = data is not None and not _PROFILER_CALL.search(data)
            self._lines[path] = data.splitlines(keepends=True) if usable else None
        return self._lines[path]

    def _source_bytes(self, path: Path) -> bytes | None:
        """The file's bytes, read once for both kinds of parse (None: unreadable or over
        ``_MAX_SOURCE_BYTES``)."""
        if path not in self._bytes:
            data = None
            try:
                stat = path.stat()
                self.read_stamps[str(path)] = (stat.st_size, stat.st_mtime_ns)
                if stat.st_size <= _MAX_SOURCE_BYTES:
                    data = path.read_bytes()
            except OSError:
                data = _unsaved_source(str(path))
            self._bytes[path] = data
        return self._bytes[path]

    def _parse(self, path: Path) -> _ParsedFile | None:
        if path not in self._parsed:
            parsed = None
            data = self._source_bytes(path)
            if data is not None:
                try:
                    parsed = _ParsedFile(ast.parse(data, filename=str(path)))
                except (SyntaxError, ValueError, RecursionError, MemoryError):
                    # Not Python, not UTF-8 (ValueError) or nested past the parser's limits:
                    # the sync keeps its def line, marked inexact.
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
        ``Call stack``). ``occurrence``: (index, count) of this call among the calls of the
        same names that one invocation of that function made (``resolve_call`` takes the
        full sequence a trace shows, profiler steps included).
        """
        frame = next((f for f in stack if f.user), None)
        if frame is None:
            return None
        groups = _as_groups(called_names)
        if call_lines:
            path = self.find_file(frame.file)
            parsed = self._parse(path) if path is not None else None
            def_line = None
            if parsed is not None and frame.line is not None:
                def_line = parsed.enclosing_function_line(frame.line)
            return self._in_cell(
                Source(
                    frame.file,
                    frame.line,
                    def_line,
                    frame.func,
                    True,
                    str(path) if path is not None else None,
                )
            )
        observed = None
        if occurrence is not None:
            observed = Observed((N,) * occurrence[1], occurrence[0], ("occurrence", occurrence))
        query = CallQuery(frame, tuple(tuple(g) for g in groups), (observed,) * len(groups))
        return self.resolve_call(query)

    def resolve_call(self, query: CallQuery) -> Source:
        """The line of the call ``query`` describes, exact when the source and the observed
        sequence of such calls leave one line; otherwise the frame's line, inexact, with the
        candidate lines. A frame already running when profiling started is followed from its
        recorded line; a library frame's file is also looked for in this interpreter's
        site-packages (and its def line must name the same function, or nothing is said). A
        Jupyter cell's code is read from its notebook (``Source.cell``)."""
        return self._in_cell(self._resolve_call(query))

    def _resolve_call(self, query: CallQuery) -> Source:
        query = _dynamo_resumed(query)
        frame = query.frame
        path = self.find_file(frame.file) if frame.user else self.find_library_file(frame.file)
        parsed = None
        absent = False  # the library's file here has no such function at that line
        if path is not None:
            if not frame.user and frame.line is not None:
                found = self._parse_function(path, frame.line, frame.func)
                absent = found is False
                parsed = found or None
            if parsed is None and not absent:
                parsed = self._parse(path)
        resolved = str(path) if path is not None else None
        if parsed is None or frame.line is None:
            # Unread, the recorded line is where the function starts only if the trace shows
            # the frame entered while profiling ran; else it may be where a running frame
            # was (a loop calling prof.step()): no def line is claimed, unless the frames of
            # that function entered later all recorded one (``prefer_def_lines``).
            def_line = frame.line if query.entered else None
            line = frame.line
            if not query.entered:
                def_line = self._def_lines.get((frame.file, frame.func))
                line = def_line if def_line is not None else frame.line
            refused = self.refused_copy(frame.file) if path is None else None
            return Source(
                frame.file,
                line,
                def_line,
                frame.func,
                False,
                resolved,
                other_run_copy=str(refused) if refused is not None else None,
                copies_found=self.copies_found(frame.file) if path is None else 0,
            )
        scope = parsed.scope_at(frame.line, frame.func)
        start = None
        line: int | None = frame.line  # the line said when no call line is certain
        def_line: int | None = frame.line
        recorded_line = None  # set when the file changed since the recording
        if scope is None and _entered_elsewhere(query, parsed):
            # Entered while profiling ran, so the line recorded was where the function
            # started then, and no def of it starts there now (lines removed or added
            # above it): the file changed since the recording. As below, its one ``def`` is
            # searched, never claimed exact.
            scope = parsed.only_function_named(frame.func)
            if scope is not None:
                line = def_line = _first_line(scope)
                recorded_line = frame.line
        if scope is None:
            # Not a def line of that function: a frame already running when profiling
            # started shows its current line (see the module docstring).
            start = frame.line
            scope = parsed.running_scope(frame.line, frame.func)
            def_line = parsed.enclosing_function_line(frame.line)
            if scope is None and frame.user:
                # Neither a def of it nor in it, while the file has one function of that
                # name: the file changed since the recording (lines added above it, the
                # function moved). Its calls are looked for from its start (a frame that
                # was running is not told apart: its calls are taken as a prefix), and the
                # line stays inexact whatever is found: the call may have changed too.
                scope = parsed.only_function_named(frame.func)
                if scope is not None:
                    start = None
                    line = def_line = _first_line(scope)
                    recorded_line = frame.line
            if scope is None:
                if frame.user and not parsed.class_body_at(frame.line, frame.func):
                    # No function of that name holds the line, and the file has not one of
                    # that name to follow (none, or several): the file changed since the
                    # recording, or the one found is another file. The recorded line is
                    # all there is; the function around it here is not the frame's.
                    return Source(
                        frame.file,
                        frame.line,
                        None,
                        frame.func,
                        False,
                        resolved,
                        recorded_line=frame.line,
                    )
                return Source(frame.file, frame.line, def_line, frame.func, False, resolved)
        prefix = start is not None or query.truncated or recorded_line is not None
        compiled = IN_GRAPH if query.in_compiled_graph else None
        for g, named in enumerate(query.groups):
            group = self._class_called(named, parsed)
            observed = query.observed[g] if g < len(query.observed) else None
            wrappers = observed.step_calls if observed is not None else ()
            step_calls = tuple(name for name, _where in wrappers)
            steps_in_next = any(self._is_iterator(name, where) for name, where in wrappers)
            steps_seen = observed is not None and P in observed.tokens
            # First with the calls on instances of other classes as not the method: a
            # branch calling ``sal.attribute(...)`` (Captum's Saliency) beside one calling
            # ``nt.attribute(...)`` (its NoiseTunnel) fits the trace either way where they
            # may be it. Where that does not fit (the method inherited by another class, in
            # a library), they may be it again.
            tried = [group]
            if observed is not None and any(n.startswith(METHOD_OF) for n in group):
                tried.insert(0, (*group, STRICT_CLASSES))
            for candidate in tried:
                automaton = self._automaton(
                    path,
                    parsed,
                    scope,
                    candidate,
                    query.optional_calls,
                    start,
                    prefix,
                    step_calls,
                    steps_in_next,
                    steps_seen=steps_seen,
                )
                group = candidate
                if observed is None or self._align(automaton, observed) is not None:
                    break
            label = _label(group)
            reachable = automaton.reachable_lines(label)
            if not reachable:
                continue
            lines = reachable
            # Text formatting runs __repr__ from more places than the model has (``msg %=
            # t``, an alias of str, ``map(ascii, rows)``...): one of those would fit any
            # place that may run it, so its lines are candidates, never claimed; but a
            # comprehension or lambda on one line runs it only there (ProgressMeter's
            # ``[str(meter) for meter in self.meters]``).
            certain = recorded_line is None and (
                not _TEXT_DUNDERS.intersection(named) or _on_one_line(scope)
            )
            if observed is not None:
                aligned = self._align(automaton, observed)
                if aligned is None and step_calls:
                    # The steps where the source does not place them (a call by another
                    # name): aligned without them, as before they were seen.
                    automaton = self._automaton(
                        path, parsed, scope, group, query.optional_calls, start, prefix
                    )
                    aligned = self._align(automaton, _without_steps(observed))
                elif aligned is not None and len(aligned) > 1 and observed.calls:
                    # Several lines fit the calls of this name alone: the frame's other
                    # calls around them may tell which branch ran. Only narrowed: where
                    # those do not fit the source (a call by another name), as before.
                    # Every other name the scope calls: one automaton per scope and name,
                    # whichever of them an invocation shows.
                    anchors = self._call_names(scope).difference(group)
                    if ANY_INSTANCE in group:
                        # Other objects' calls show as their ``__call__`` frames.
                        anchors = anchors | {"__call__"}
                    if anchors:
                        narrowed = self._align_anchored(
                            self._automaton(
                                path,
                                parsed,
                                scope,
                                group,
                                query.optional_calls,
                                start,
                                prefix,
                                step_calls,
                                steps_in_next,
                                anchors,
                                steps_seen,
                            ),
                            observed,
                            anchors,
                        )
                        if narrowed and set(narrowed) < set(aligned):
                            aligned = narrowed
                if aligned is not None:
                    lines = aligned
                else:
                    # The trace's calls do not fit the source's: more frameless operators
                    # than its implicit calls can run, or calls made by other names (a loop
                    # variable, an index, a parameter holding the function or module). A
                    # line found is one of them, not the one.
                    certain = False
            if query.graph_break in lines and recorded_line is None:
                # Run in a compiled function's own frame, not in its graph: the
                # instruction that broke the graph, whatever else the source might call.
                lines, certain, compiled = [query.graph_break], True, GRAPH_BREAK
            if len(lines) > 1 and label == "<truth>" and query.called_before:
                key = (id(scope), query.called_before)
                right_after = self._truths_after.get(key)
                if right_after is None:
                    right_after = _truths_right_after(scope, query.called_before)
                    self._truths_after[key] = right_after
                lines = _truths_reading(scope, lines, query.called_before, right_after)
            if len(lines) == 1 and certain:
                return Source(
                    frame.file,
                    lines[0],
                    def_line,
                    frame.func,
                    True,
                    resolved,
                    # Read without a call of its own (``x[:n]``), or by the size-taking
                    # call itself (``torch.arange(n)`` reads ``n``): the tensor is the read.
                    **self._line_facts(
                        scope,
                        lines[0],
                        label == "<scalar>" or bool(_SIZE_CALLS & set(group)),
                        parsed.profiler_names or parsed.named_profilers,
                        parsed.tree,
                    ),
                    compiled=compiled,
                )
            return Source(
                frame.file,
                line,
                def_line,
                frame.func,
                False,
                resolved,
                candidates=list(lines),
                recorded_line=recorded_line,
                compiled=compiled,
                # Not where the file changed since the recording: its lines are guesses.
                periodic_guard=None
                if recorded_line is not None
                else self._shared_guard(
                    scope, lines, parsed.profiler_names or parsed.named_profilers
                ),
                host_use=None if recorded_line is not None else self._shared_host_use(scope, lines),
            )
        if recorded_line is None and _on_one_line(scope) and not query.in_compiled_graph:
            return self._one_line_scope(frame, scope, def_line, resolved, parsed)
        return Source(
            frame.file,
            line,
            def_line,
            frame.func,
            False,
            resolved,
            recorded_line=recorded_line,
            compiled=compiled,
        )

    def _one_line_scope(
        self, frame: Frame, scope: ast.AST, def_line: int | None, resolved: str, parsed: Any
    ) -> Source:
        """The exact line of a call in a comprehension or lambda on one line, whatever the
        calls' alignment: every call it makes is there (Captum's ``sum(torch.sum(m).item()
        for m in masks)``, marked at its def line where no name of the read was found)."""
        return Source(
            frame.file,
            scope.lineno,  # type: ignore[attr-defined]
            def_line,
            frame.func,
            True,
            resolved,
            **self._line_facts(
                scope,
                scope.lineno,  # type: ignore[attr-defined]
                False,
                parsed.profiler_names or parsed.named_profilers,
                parsed.tree,
            ),
        )

    def _shared_guard(
        self, scope: ast.AST, lines: Sequence[int], profilers: frozenset[str]
    ) -> str | None:
        """The ``%`` test every one of an inexact line's candidates runs under, where it is
        one: a call in both branches of an ``if``/``else`` under ``if i % print_freq == 0:``
        (torchvision's ``MetricLogger.log_every``: 58 of a walk's 63 reads told to read
        every N steps, which they did)."""
        key = (id(scope), tuple(lines), profilers)
        if key not in self._shared_guards:
            guards = {periodic_guard(scope, line, profilers) for line in lines}
            self._shared_guards[key] = guards.pop() if len(guards) == 1 else None
        return self._shared_guards[key]

    def _shared_host_use(self, scope: ast.AST, lines: Sequence[int]) -> str | None:
        """The host call every one of an inexact line's candidates gives its copy to
        (``host_use``): CycleGAN's ``torch.save(net.module.cpu().state_dict(), path)`` and
        ``torch.save(net.cpu().state_dict(), path)``, in the two branches of ``if``."""
        key = (id(scope), tuple(lines))
        if key not in self._shared_host_uses:
            uses = {host_use(scope, line) for line in lines}
            self._shared_host_uses[key] = uses.pop() if len(uses) == 1 else None
        return self._shared_host_uses[key]

    def _line_facts(
        self,
        scope: ast.AST,
        line: int,
        frameless: bool,
        profilers: frozenset[str] = frozenset(),
        module: ast.AST | None = None,
    ) -> dict[str, Any]:
        """``loop_line`` and ``read_as_size`` of an exact line, walked once per line: a
        trace resolves one line for each of its calls (thousands a run). ``profilers``: the
        names of the file's profilers (``periodic_guard``)."""
        key = (id(scope), line, frameless)
        facts = self._facts.get(key)
        if facts is None:
            facts = self._facts[key] = {
                "loop_line": loop_around(scope, line),
                "read_as_size": read_as_size(scope, line, frameless, module),
                "reads_elements": reads_elements(scope, line),
                "reads_sample": reads_sample(scope, line),
                "host_use": host_use(scope, line),
                "periodic_guard": periodic_guard(scope, line, profilers),
                "setting_guard": setting_guard(scope, line),
            }
        return facts

    def _class_called(self, group: tuple[str, ...], parsed: _ParsedFile) -> tuple[str, ...]:
        """A class called (an ``init_call`` group) as its name, read from the ``class``
        statement around its ``__init__``, and the names of the calling file's classes
        derived from it; ``SOME_CLASS`` when that file is not here or holds no such
        ``__init__`` there (the trace came from another version of it). An instance called
        (an ``instance_call`` group) as a call of an instance of that class or those, as an
        nn.Module's call is matched (``MODULE_CALL``); as a call of ``__call__`` (which no
        line names) where the class cannot be read."""
        if not group:
            return group
        named = tuple(n for n in group if not n.startswith(METHOD_AT))
        if named and len(named) < len(group):
            classes: list[str] = []
            for where in group[len(named) :]:
                cls = self._class_of_method(where[len(METHOD_AT) :], named[0])
                if cls is not None:
                    classes.extend((cls, *parsed.subclasses(cls)))
            return (*named, *(METHOD_OF + c for c in dict.fromkeys(classes)))
        if group[0].startswith(CALL_CALL):
            cls = self._class_of_method(group[0][len(CALL_CALL) :], "__call__")
            if cls is None:
                return ("__call__",)
            if cls.startswith(METACLASS):
                return (SOME_CLASS,)  # a class called: any capitalised call may be it
            classes = (cls, *parsed.subclasses(cls))
            return (*(MODULE_CALL + name for name in classes), ANY_INSTANCE)
        if not group[0].startswith(INIT_CALL):
            return group
        cls = self._class_of_method(group[0][len(INIT_CALL) :], "__init__")
        return (cls, *parsed.subclasses(cls)) if cls else (SOME_CLASS,)

    def _class_of_method(self, where: str, method: str) -> str | None:
        """The class whose ``method`` frame is at ``where`` (``U``/``L``, then ``FILE:LINE``,
        as ``init_call`` writes it), read once per place; None where it cannot be read."""
        file, _, line = where[1:].rpartition(":")
        # A library's path is looked up as a library's first: a user file of the same
        # name (a ``normal.py`` of one's own) is not torch's.
        if where[0] == "U":
            found = self.find_file(file)
        else:
            found = self.find_library_file(file) or self.find_file(file)
        if (found, line, method) not in self._init_classes:
            data = self._source_bytes(found) if found is not None else None
            cls = None
            if data is not None and line.isdigit():
                cls = _class_around(data.splitlines(), int(line), method)
            self._init_classes[(found, line, method)] = cls
        return self._init_classes[(found, line, method)]

    def _automaton(
        self,
        path: Path | None,
        parsed: _ParsedFile,
        scope: ast.AST,
        group: tuple[str, ...],
        optional_calls: bool,
        start: int | None,
        prefix: bool,
        step_calls: tuple[str, ...] = (),
        steps_in_next: bool = False,
        anchors: frozenset[str] = frozenset(),
        steps_seen: bool = False,
    ) -> Automaton:
        """``steps_seen``: the frame's observed calls hold the profiler's steps, so a
        profiler known only by its name (``_ParsedFile.named_profilers``) steps there."""
        profilers = parsed.profiler_names or (parsed.named_profilers if steps_seen else frozenset())
        key = (
            path,
            id(scope),
            group,
            optional_calls,
            start,
            prefix,
            step_calls,
            steps_in_next,
            anchors,
            profilers,
        )
        automaton = self._automata.get(key)
        if automaton is None:
            matcher = _matcher(
                group,
                optional_calls,
                profilers,
                parsed.bindings(scope),
                step_calls,
                steps_in_next,
                start,
                anchors,
                *self._python_indices(scope),
            )
            automaton = build(scope, matcher, start_line=start, prefix=prefix)
            self._automata[key] = automaton
        return automaton

    def _python_indices(self, scope: ast.AST) -> tuple[frozenset[str], frozenset[int]]:
        """``scope``'s loop counters and flag parameters, and its string-indexed lookups
        (``_loop_counters``, ``_bool_flags``, ``_dict_lookups``), walked once per scope."""
        found = self._scope_indices.get(id(scope))
        if found is None:
            found = self._scope_indices[id(scope)] = (
                _loop_counters(scope) | _bool_flags(scope),
                _dict_lookups(scope),
            )
        return found

    def _is_iterator(self, name: str, where: tuple[str, int | None]) -> bool:
        """Whether a function the trace named ``name`` at ``where`` (file, line of one of
        its frames) runs as an iterator: a ``__next__``, or a generator (a ``yield`` in its
        own body, read from its file: a callback reached by another name, ``hooks.after =
        self._after_batch``, is no loop's ``__next__``). False where the file is not here."""
        if name == "__next__":
            return True
        file, line = where
        key = (file, line, name)
        found = self._iterators.get(key)
        if found is None:
            found = False
            path = self.find_file(file) or self.find_library_file(file)
            if path is not None and line is not None:
                parsed = self._parse_function(path, line, name)
                if parsed is None:
                    parsed = self._parse(path)
                if isinstance(parsed, _ParsedFile):
                    scope = parsed.scope_at(line, name) or parsed.running_scope(line, name)
                    found = scope is not None and _is_generator(scope)
            self._iterators[key] = found
        return found

    def _call_names(self, scope: ast.AST) -> frozenset[str]:
        """The names ``scope``'s own code calls (not a function or class defined in it),
        less those a ``for`` loop's iterable calls: a generator's frames show once per
        resume (build-nanogpt's ``enumerate(iterate_examples("val"))``), not once per call,
        and would fit no branch."""
        names = self._scope_calls.get(id(scope))
        if names is None:
            found: set[str] = set()
            iterated: set[str] = set()
            stack: list[tuple[ast.AST, bool]] = [(n, False) for n in ast.iter_child_nodes(scope)]
            while stack:
                node, in_iter = stack.pop()
                if isinstance(node, _NESTED_SCOPES):
                    continue
                if isinstance(node, ast.Call):
                    name = _call_name(node)
                    if name:
                        (iterated if in_iter else found).add(name)
                if isinstance(node, (ast.For, ast.AsyncFor, ast.comprehension)):
                    stack.append((node.iter, True))
                    stack.extend(
                        (child, in_iter)
                        for child in ast.iter_child_nodes(node)
                        if child is not node.iter
                    )
                else:
                    stack.extend((child, in_iter) for child in ast.iter_child_nodes(node))
            names = self._scope_calls[id(scope)] = frozenset(found - iterated)
        return names

    def _align_anchored(
        self, automaton: Automaton, observed: Observed, anchors: frozenset[str]
    ) -> list[int] | None:
        """``_align`` over ``observed.calls``: the calls looked for among the frame's other
        calls of ``anchors``' names (the rest, calls the source makes by other names or
        none, left out). None where the source cannot produce that sequence."""
        # Once per invocation: each of its calls of that name asks in turn, with the same
        # ``calls`` (the attribute stage's one tuple per frame), so that tuple's identity
        # keys it: hashing it, thousands of calls long in a long run's module-level loop,
        # for each read was quadratic. The entry holds the tuple, so its id is not reused
        # while the entry lives; another window's calls of the same invocation are another
        # tuple.
        key = (id(automaton), observed.key, id(observed.calls), "anchored")
        cached = self._alignments.get(key)
        if cached is None or cached[2] is not observed.calls:
            tokens: list[str] = []
            at: list[int | None] = []  # ``observed.tokens``' positions -> ``tokens``'
            keep_steps = P not in observed.tokens or bool(automaton.reachable_lines(P))
            for token in observed.calls:
                if token.startswith(ANCHOR):
                    if token[len(ANCHOR) :] in anchors:
                        tokens.append(token)
                    continue
                if token == P and not keep_steps:
                    at.append(None)
                    continue
                at.append(len(tokens))
                tokens.append(token)
            self._alignments[key] = (align(automaton, tokens), at, observed.calls)
        aligned, at, _calls = self._alignments[key]
        index = at[observed.index] if observed.index < len(at) else None
        if aligned is None or index is None:
            return None
        return sorted(aligned[index])

    def _align(self, automaton: Automaton, observed: Observed) -> list[int] | None:
        """The lines the observed call at ``observed.index`` can be on, or None when the
        source cannot produce the observed sequence."""
        # The tokens too: one resolver serves every window of a trace read in windows,
        # where the same invocation (its key) is seen with another window's calls.
        key = (id(automaton), observed.key, observed.tokens)
        if key not in self._alignments:
            tokens = observed.tokens
            if P in tokens and not automaton.reachable_lines(P):
                # Steps come from a call the source does not name (on_step = prof.step).
                tokens = tuple(t for t in tokens if t != P)
            self._alignments[key] = (align(automaton, tokens), tokens is observed.tokens)
        aligned, kept_steps = self._alignments[key]
        if aligned is None:
            return None
        index = observed.index
        if not kept_steps:
            index -= observed.tokens[:index].count(P)
        return sorted(aligned[index])


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


def _library_dirs() -> list[str]:
    """This interpreter's site-packages and dist-packages folders (``sys.path`` first)."""
    dirs = [
        p
        for p in sys.path
        if os.path.basename(p.rstrip("/\\")) in ("site-packages", "dist-packages")
    ]
    try:
        dirs += [*site.getsitepackages(), site.getusersitepackages()]
    except AttributeError:  # virtualenv's old site module
        pass
    return list(dict.fromkeys(d for d in dirs if os.path.isdir(d)))


def resolve_sources(
    resolver: SourceResolver, attributions: Sequence[Attribution]
) -> list[Source | None]:
    """The source line of each attributed sync (None without a user frame).

    Modern stacks: the user's call line (``Attribution.user_call``) and, when it went into a
    library, the library's line (``Source.library``); for a sync in a backward pass, the line
    of the forward operation it is the gradient of, with the line that ran the backward pass
    (``Source.run_by``). Legacy ``Call stack`` lines are call lines already.
    """
    sources: list[Source | None] = []
    for attribution in attributions:
        sources.append(_source_of(resolver, attribution))
    return sources


def _source_of(resolver: SourceResolver, attribution: Attribution) -> Source | None:
    if attribution.call_lines:
        return resolver.resolve(attribution.stack, call_lines=True)
    if attribution.backward:
        run_by = (
            resolver.resolve_call(attribution.run_by_call)
            if attribution.run_by_call is not None
            else None
        )
        # A library's Python that ran the backward (torchdiffeq's adjoint) read at its own
        # line, kept as the read's library line.
        library = (
            resolver.resolve_call(attribution.library_call)
            if attribution.library_call is not None
            else None
        )
        if attribution.forward_call is not None:
            forward = resolver.resolve_call(attribution.forward_call)
            return msgspec.structs.replace(
                forward,
                backward=True,
                run_by=run_by,
                library=library,
                # The forward broke the graph, not its backward, which autograd runs.
                compiled=None if forward.compiled == GRAPH_BREAK else forward.compiled,
            )
        if run_by is not None:
            return msgspec.structs.replace(run_by, backward=True, library=library)
        return None
    if attribution.user_call is None:
        return None
    source = resolver.resolve_call(attribution.user_call)
    if attribution.library_call is not None:
        source.library = resolver.resolve_call(attribution.library_call)
    if attribution.caller_call is not None:
        caller = resolver.resolve_call(attribution.caller_call)
        source.called_from = CallSite(
            caller.file,
            caller.line,
            caller.func,
            caller.line_exact,
            # An inexact line's: the test all its candidates run under (``_shared_guard``).
            caller.periodic_guard if not attribution.steps_own_frame else None,
        )
        if source.called_from.periodic_guard is None:
            _guard_further_out(resolver, attribution.outer_calls, source.called_from)
    return source


def _guard_further_out(
    resolver: SourceResolver, outer_calls: Sequence[CallQuery], called_from: CallSite
) -> None:
    """The first ``%`` test an exact line further out runs under, set on ``called_from``:
    every call below that line runs under it too, whatever lines the frames between ran
    (an inexact one between is passed over: the test further out holds all the same)."""
    for query in outer_calls:
        outer = resolver.resolve_call(query)
        if outer.periodic_guard is not None:
            called_from.periodic_guard = outer.periodic_guard
            called_from.periodic_guard_file = outer.file
            called_from.periodic_guard_line = outer.line
            return
