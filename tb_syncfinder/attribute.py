"""Attribute an episode: operator chain, step, annotations, nn.Module path, thread and the
Python stack (modern ``python_function`` tree and legacy ``Call stack`` argument), as one
``Attribution`` record. Which frames are the user's code is decided here (``is_user_file``)."""

from __future__ import annotations

import importlib.util
import os
import re
import sys
import sysconfig
from bisect import bisect_left, bisect_right
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from itertools import compress
from operator import attrgetter, itemgetter, methodcaller
from typing import TYPE_CHECKING, Any, NamedTuple

import msgspec

from tb_syncfinder.callorder import ANCHOR, N, P
from tb_syncfinder.catalogue import (
    API_CALLEES,
    CUDNN_OPS,
    FFT_OPS,
    FFT_SETUP_CALLS,
    INDEX_PUT_IMPL,
    LIBRARY_PACKAGES,
    LIBRARY_SETUP_OPS,
    MATMUL_OPS,
    PROFILER_STOP_APIS,
    SETUP_CALLS,
    SUBCLASS_DISPATCH,
    called_library,
    dispatches_for_its_caller,
    edited_library,
    is_framework_file,
    package_of,
    passes_through,
    wraps_one_op,
)
from tb_syncfinder.detect import Episode, assigns_a_host_number, op_chain
from tb_syncfinder.models import COMPREHENSION_FRAMES, Attribution, CallQuery, Frame, Observed
from tb_syncfinder.source import (
    CALL_CALL,
    EVALUATION_POINTS,
    INIT_CALL,
    IPYTHON_CELL,
    MODULE_CALL,
    SourcePack,
    callee_groups,
    dynamo_resume_line,
    dynamo_resumed,
    init_call,
    instance_call,
    method_at,
)
from tb_syncfinder.timeline import (
    ANNOTATION,
    OP,
    PYTHON,
    STEP_RE,
    HostThread,
    Timeline,
    correlation_of,
)

if TYPE_CHECKING:
    from tb_syncfinder.reader import Args

_FRAME_RE = re.compile(r"^(.*)\((\d+)\): (.*)$")
_BUILTIN_RE = re.compile(r"^<built-in (?:method|function) ([^ >]*)")
_MODULE_PREFIX = "nn.Module: "
# User frames past the caller whose ``%`` tests a sync's site may run under.
_OUTER_FRAMES = 3
# The profiler's frame that starts tracing (torch.profiler.profile and the autograd
# profiler it drives), and how many python frames into a thread it is looked for.
_PROFILER_START = re.compile(
    r"torch/(?:autograd/profiler|profiler/profiler)\.py\(\d+\): _?start_trace$"
)
_PROFILER_START_WITHIN = 5000
_MODULE_INDEX_RE = re.compile(r"_\d+$")

_STDLIB = frozenset(getattr(sys, "stdlib_module_names", ())) - {"__main__"}
# A module inductor wrote for a compiled graph (``/tmp/torchinductor_<user>/kc/ckcc...py``,
# or under ``TORCHINDUCTOR_CACHE_DIR``): named by a hash, in a folder of its first two
# characters. Its ``call`` reads what ``capture_scalar_outputs`` captured; its line is no
# line of the user's, and the name changes with every compile.
_INDUCTOR_CODE = re.compile(r"(?:^|/)([a-z0-9]{2})/c\1[a-z0-9]{49}\.py$")
_OWN_PACKAGE = "tb_syncfinder/"


def _at_component(norm: str, prefix: str) -> str | None:
    """What follows ``prefix`` in ``norm`` when it starts a path component there, else None."""
    head, sep, rest = norm.rpartition(prefix)
    if not sep or (head and not head.endswith("/")):
        return None
    return rest


def _packed_or_own(norm: str, packs: Sequence[SourcePack]) -> bool | None:
    """For a file a source pack ships (e.g. the demo's workloads): True for its user code,
    False for its library modules; any other file of this package (CLI, plugin) is library
    code; None for everything else."""
    for pack in packs:
        rest = _at_component(norm, pack.recorded_prefix)
        if rest is not None and "/" not in rest:
            return rest not in pack.library_files
    return False if _at_component(norm, _OWN_PACKAGE) is not None else None


def is_user_file(
    path: str,
    packs: Sequence[SourcePack] = (),
    func: str | None = None,
    library_roots: Sequence[str] = (),
) -> bool:
    """True for the user's own code; False for torch, site-packages, built-ins, stdlib.
    Files shipped in ``packs`` (the demo's workloads) count as user code even installed.
    ``func``: the frame's function, which tells a script named as a standard module
    (``code.py``, ``queue.py``) from that module (``_stdlib_function``). ``library_roots``:
    site-packages folders named as source roots (``library_roots``), whose packages are
    libraries where the report runs without them installed."""
    if not path:
        return False
    if path.startswith("<"):
        # <built-in ...>, <frozen importlib._bootstrap>, <string>; but an IPython cell's
        # code, <ipython-input-4-faad06d10617>, is the user's.
        return IPYTHON_CELL.match(path) is not None
    norm = path.replace("\\", "/")
    if _INDUCTOR_CODE.search(norm):
        return False  # code torch.compile generated: the user's line is the compiled call's
    packed = _packed_or_own(norm, packs)
    if packed is not None:
        return packed
    if "site-packages/" in norm or "dist-packages/" in norm or "/torch/" in norm:
        return False
    if norm.rsplit("/", 1)[-1] == "profiler.py":
        return False
    parts = [p for p in norm.split("/") if p and p != "."]
    if not parts:
        return False
    if norm.startswith("/"):
        # An absolute path inside a Python installation's lib/pythonX.Y is the stdlib.
        return re.search(r"/lib/python\d+(\.\d+)?/", norm) is None
    top = parts[0][:-3] if len(parts) == 1 and parts[0].endswith(".py") else parts[0]
    if top in LIBRARY_PACKAGES:
        return False
    if top in _STDLIB:
        # A script of the user's may have a standard module's name (``code.py``, a
        # ``bisect.py``): torch shortens both alike. The module's own frames run functions
        # it defines; a script's top level, or a function the module has not, is the user's.
        return len(parts) == 1 and func is not None and not _stdlib_function(parts[0], func)
    if any(os.path.isfile(os.path.join(root, *parts)) for root in library_roots):
        return False
    return not _installed_here(parts)


def library_roots(source_roots: Sequence[str]) -> tuple[str, ...]:
    """The source roots that are a Python environment's site-packages (or dist-packages)
    folder, or inside one: the report runs where the traced program's libraries are not
    installed (TensorBoard in an environment of its own), and the user named their folder
    for their source (a Captum and a pytorch-tabnet walk: their code was taken for the
    user's, every fix an edit of "your" code)."""
    found = []
    for root in source_roots:
        parts = os.path.abspath(root).replace("\\", "/").split("/")
        if "site-packages" in parts or "dist-packages" in parts:
            found.append(root)
    return tuple(found)


_STDLIB_DEFS: dict[str, frozenset[bytes] | None] = {}
_DEF_NAME = re.compile(rb"^[ \t]*(?:async[ \t]+)?(?:def|class)[ \t]+(\w+)", re.MULTILINE)


def _stdlib_function(file: str, func: str) -> bool:
    """Whether this interpreter's standard module ``file`` (``bisect.py``) defines a
    function or class named ``func``, or ``func`` is no plain name (``<lambda>``,
    ``<listcomp>``: not told apart). True where the module is not a file here (then
    nothing tells the frame is not its)."""
    if not func.isidentifier():
        return func != "<module>"
    names = _STDLIB_DEFS.get(file, b"")
    if names == b"":
        try:
            with open(os.path.join(sysconfig.get_paths()["stdlib"], file), "rb") as handle:
                names = frozenset(_DEF_NAME.findall(handle.read()))
        except OSError:
            names = None
        _STDLIB_DEFS[file] = names
    return names is None or func.encode() in names


_INSTALLED: dict[tuple[str, tuple[str, ...]], tuple[str, ...]] = {}


def _installed_here(parts: list[str]) -> bool:
    """Whether a path as torch shortens it (relative to a ``sys.path`` entry, e.g.
    ``fakelib/gen.py``) names a file of a package installed in a site-packages or
    dist-packages folder of this interpreter: a library the list above does not know."""
    top = parts[0][:-3] if len(parts) == 1 and parts[0].endswith(".py") else parts[0]
    if not top.isidentifier():
        return False
    key = (top, tuple(sys.path))
    locations = _INSTALLED.get(key)
    if locations is None:
        try:
            spec = importlib.util.find_spec(top)
        except Exception:  # noqa: BLE001 - any finder may fail on a name it does not know
            spec = None
        found: list[str] = []
        if spec is not None:
            found = list(spec.submodule_search_locations or []) or (
                [os.path.dirname(spec.origin)] if spec.origin else []
            )
        locations = _INSTALLED[key] = tuple(
            loc
            for loc in found
            if "site-packages" in loc.replace("\\", "/").split("/")
            or "dist-packages" in loc.replace("\\", "/").split("/")
        )
    rest = parts[1:] if len(parts) > 1 else parts
    return any(os.path.isfile(os.path.join(loc, *rest)) for loc in locations)


def parse_frame(
    name: str, packs: Sequence[SourcePack] = (), library_roots: Sequence[str] = ()
) -> Frame | None:
    """A stack frame from a python_function name or a legacy ``Call stack`` entry."""
    name = name.strip()
    if not name or name.startswith(_MODULE_PREFIX):
        return None
    match = _FRAME_RE.match(name)
    if match:
        path = match.group(1)
        return Frame(
            file=path,
            line=int(match.group(2)),
            func=match.group(3),
            user=is_user_file(path, packs, match.group(3), library_roots),
        )
    builtin = _BUILTIN_RE.match(name)
    if builtin:
        return Frame(file="<built-in>", line=None, func=builtin.group(1) or name, user=False)
    return Frame(file=name, line=None, func=name, user=False)


def parse_call_stack(
    text: str, packs: Sequence[SourcePack] = (), library_roots: Sequence[str] = ()
) -> list[Frame]:
    """Legacy ``Call stack`` argument: ``a.py(50): f;b.py(112): g``, innermost first."""
    frames = []
    for part in re.split(r";\r?\n?", text):
        frame = parse_frame(part, packs, library_roots)
        if frame is not None:
            frames.append(frame)
    return frames


def module_name(python_function_name: str) -> str:
    """``nn.Module: Linear_0`` -> ``Linear``."""
    return _MODULE_INDEX_RE.sub("", python_function_name[len(_MODULE_PREFIX) :].strip())


# Operators the interpreter runs for a user's line without a call frame of their own (with
# builtin calls recorded, ``.item()`` shows ``<built-in method item ...>``; ``float(t)``,
# ``if t:`` and ``t[mask]`` show nothing), by the class of syntax that runs them.
_FRAMELESS_CLASSES = {
    "aten::is_nonzero": "<truth>",
    "aten::item": "<scalar>",
    "aten::_local_scalar_dense": "<scalar>",
    "aten::index": "<load>",
    "aten::index_put_": "<store>",
    "aten::index_put": "<store>",
    "aten::_index_put_impl_": "<store>",
    "aten::masked_fill_": "<store>",
    "aten::copy_": "<store>",
}
# Frame names a Python-level wrapper runs under (decorators, nn.Module calls): the name the
# user's code called is further down.
_MAX_CALL_DEPTH = 3
_MAX_WRAPPERS = 4


_DYNAMO_FILE = re.compile(r"(?:^|/)torch/_dynamo/")
_TORCH_FILE = re.compile(r"(?:^|/)torch/")
# torch.fx's generated ``forward`` of a graph (a backend that runs the graph as it is).
_FX_CODE = "<eval_with_key>"


def _runs_its_compiled_graph(below: list[tuple[int, Frame]]) -> bool:
    """Whether ``below`` (the frames under a user frame, innermost first) is torch.compile
    running that frame's own compiled graph: dynamo's frame right under it, and nothing
    but torch's frames and the code torch.fx or inductor generated further in (a library's
    compiled function called from the user's frame has its own frame among them)."""
    if not below or not _DYNAMO_FILE.search(below[-1][1].file.replace("\\", "/")):
        return False
    for _index, frame in below:
        file = frame.file.replace("\\", "/")
        if (
            file == "<built-in>"
            or file.startswith(_FX_CODE)
            or _TORCH_FILE.search(file)
            or _INDUCTOR_CODE.search(file)
        ):
            continue
        return False
    return True


def _past_resume_chain(frames: list[tuple[int, Frame]], user: int, callers: list[int]) -> list[int]:
    """``callers`` (the user frames above ``frames[user]``) without the frames that only
    continue the same compiled function: after a graph break, torch.compile's frame of a
    function calls its resume function, which calls the next one; none of those calls is
    in the source, whose caller is the frame above the chain."""
    inner = frames[user][1]
    while callers:
        resumed = dynamo_resumed(inner.func)
        outer = frames[callers[0]][1]
        if resumed is None or outer.file != inner.file:
            break
        if outer.func != resumed and dynamo_resumed(outer.func) != resumed:
            break
        inner = outer
        callers = callers[1:]
    return callers


# The names decorators give the function they return (``functools.wraps`` keeps the
# decorated function's name on the object, not on its frame).
_DECORATOR_FRAMES = frozenset(
    {"wrapper", "wrapper_fn", "wrapped", "wrapped_func", "inner", "decorated", "_wrapper"}
)


def _a_librarys_decorator(frame: Frame) -> bool:
    """Whether a library frame is a decorator's wrapper (wandb's ``Run.log`` runs as three
    of them, ``wrapper``, ``wrapper_fn``, ``wrapper``, before ``log``): passed over, as a
    call's own name is deeper."""
    return not frame.user and frame.func in _DECORATOR_FRAMES


def _call_depths(below: list[tuple[int, Frame]]) -> int:
    """How many frames under the user's (``below``, innermost first) may name the call
    its line made: ``_MAX_CALL_DEPTH`` of them, not counting the wrappers a call passes
    through on the way (``no_grad``'s, functools') or a frame repeating the one above it
    (a decorator applied twice): ``model.generate(...)`` runs two of transformers'
    ``wrapped_func`` and ``decorate_context`` before ``generate``, and its line was not
    found."""
    counted = 0
    above: Frame | None = None
    for depth, (_index, frame) in enumerate(reversed(below), 1):
        repeated = above is not None and (frame.file, frame.func, frame.line) == (
            above.file,
            above.func,
            above.line,
        )
        above = frame
        # At most _MAX_WRAPPERS passed over: a function calling itself hundreds deep repeats
        # its frame too, and the paths of names made of them overflowed the stack.
        if depth == _MAX_CALL_DEPTH + _MAX_WRAPPERS:
            return depth
        if repeated or passes_through(frame.file) or _a_librarys_decorator(frame):
            continue
        counted += 1
        if counted == _MAX_CALL_DEPTH:
            return depth
    return len(below)


def _runs_an_op(thread: HostThread, index: int) -> bool:
    """Whether an operator runs inside a node (a built-in's frame that calls one, not
    ``isinstance`` or a context manager's ``__exit__``)."""
    starts, ends, kinds = thread.starts, thread.ends, thread.kinds
    end = ends[index]
    for i in range(index + 1, len(starts)):
        if starts[i] > end:
            return False
        if kinds[i] == OP and ends[i] <= end:
            return True
    return False


_PROFILER_DIRS = ("torch/profiler/",)
# A Python frame's event name (``file(line): func``) of a tensor subclass's dispatcher.
_DISPATCH_SUFFIXES = tuple(": " + func for func in sorted(SUBCLASS_DISPATCH))
_BACKWARD_SUFFIX_RE = re.compile(r"Backward\d*$")
_CAMEL_RE = re.compile(r"(?<!^)(?=[A-Z])")


def _is_profiler_file(path: str) -> bool:
    norm = path.replace("\\", "/")
    return any(_at_component(norm, prefix) is not None for prefix in _PROFILER_DIRS)


def is_profiler_stack(stack: Sequence[Frame]) -> bool:
    """Whether a sync with this stack (innermost first) was issued by the profiler's own code
    (``prof.step()`` or the profiler stopping waits for the device): a frame of
    ``torch/profiler/`` inside the user's innermost frame, or the legacy
    ``torch.autograd.profiler.profile`` calling ``torch.cuda.synchronize()``."""
    for i, frame in enumerate(stack):
        if frame.user:
            return False
        if _is_profiler_file(frame.file):
            return True
        norm = frame.file.replace("\\", "/")
        if (
            norm.endswith("torch/autograd/profiler.py")
            and i > 0
            and stack[i - 1].file.replace("\\", "/").endswith("torch/cuda/__init__.py")
        ):
            return True
    return False


# The profiler's step frames, by name first (``torch/profiler/profiler.py(794): step``), and
# how far above one a frame still counts as holding it (``_holds_profiler_step``): a loader
# wrapper's ``__next__`` calling ``prof.step()`` is one level, a callback list two or three.
_NAME = attrgetter("name")
_ENDS_AS_STEP = methodcaller("endswith", "): step")
_STEP_HOLDER_DEPTH = 3


class _PythonTree:
    """One host thread's python_function frames: parents (recorded ``Python parent id``,
    else time nesting among frames only) and children in time order. Built once per thread:
    annotations such as ``ProfilerStep#N`` start inside the profiler's step frame and end
    after it, so time nesting over all events would put the next frames under that step."""

    def __init__(self, thread: HostThread) -> None:
        kinds = thread.kinds
        # In C: a thread has several operators per frame.
        self.order = list(compress(range(len(kinds)), map(PYTHON.__eq__, kinds)))
        self.starts = list(map(thread.starts.__getitem__, self.order))
        ends = thread.ends
        by_id = thread.python_by_id
        self.parent: dict[int, int] = {}
        self.children: dict[int, list[int]] = {}
        stack: list[int] = []
        for i in self.order:
            ts = thread.starts[i]
            while stack and ends[stack[-1]] <= ts:
                stack.pop()
            parent = stack[-1] if stack else -1
            args = thread.nodes[i].args
            recorded = args.python_parent_id if args is not None else None
            if recorded is not None and recorded in by_id:
                parent = by_id[recorded]
            self.parent[i] = parent
            self.children.setdefault(parent, []).append(i)
            stack.append(i)
        self.ends = ends

    def innermost(self, ts: float, end: float) -> int:
        """The innermost frame holding [ts, end], or -1."""
        k = bisect_right(self.starts, ts) - 1
        if k < 0:
            return -1
        i = self.order[k]
        seen = 0
        while i >= 0 and self.ends[i] + 1e-3 < end:
            i = self.parent.get(i, -1)
            seen += 1
            if seen > 10_000:  # a broken parent cycle in a damaged trace
                return -1
        return i

    def chain(self, index: int) -> list[int]:
        """``index`` and its ancestors, innermost first."""
        out = []
        seen = set()
        while index >= 0 and index not in seen:
            seen.add(index)
            out.append(index)
            index = self.parent.get(index, -1)
        return out


_FIRST = itemgetter(0)


class _Sequence(NamedTuple):
    """``Attributor._sequence``'s answer for one frame and kind of call."""

    tokens: tuple[str, ...]
    positions: dict[int, int]  # node index -> its token's position
    step_calls: tuple[tuple[str, tuple[str, int | None]], ...]
    calls: tuple[str, ...]  # ``Observed.calls``

    def observed(self, position: int | None, where: tuple[HostThread, int, Any]) -> Observed | None:
        """The ``Observed`` of the call at ``position`` (None: not one of them)."""
        if position is None:
            return None
        thread, index, match = where
        key = (thread.pid, thread.tid, index, match)
        return Observed(self.tokens, position, key, self.step_calls, self.calls)


class LibraryCalls(msgspec.Struct):
    """What the windows before tell a window's attribution of a library's first call
    (``Attributor.first_call_of``): whether the whole trace starts at ``ProfilerStep#0``
    (None: not known yet, the first window sets it), and per (pid, tid, cuBLAS?) the
    earliest end of a call of that library on that thread in an earlier window."""

    starts_at_first_step: bool | None = None
    # The earliest end of a call of each library on each thread in the windows so far: a
    # call that spans windows ends in a later one than it starts (kept in the windows of
    # its start and the one after only).
    first_ends: dict[tuple[Any, Any, bool], float] = msgspec.field(default_factory=dict)


class Attributor:
    """Attributes the episodes of one timeline; keeps the per-thread indexes it builds.
    ``library_calls``: a window's, carried from the windows before it and updated for
    the next (``note_library_calls``)."""

    def __init__(
        self,
        tl: Timeline,
        packs: Sequence[SourcePack] = (),
        library_calls: LibraryCalls | None = None,
        library_roots: Sequence[str] = (),
    ) -> None:
        self.tl = tl
        self.packs = packs
        self.library_roots = tuple(library_roots)
        self.library_calls = library_calls
        if library_calls is not None and library_calls.starts_at_first_step is None:
            library_calls.starts_at_first_step = not tl.steps or tl.steps[0].number == 0
        self._trees: dict[Any, _PythonTree] = {}
        self._frames: dict[tuple[Any, int], Frame | None] = {}
        # By name too: a frame's name repeats in every step, and each parse of a relative
        # path asks the file system whether an installed package has it (frames are never
        # changed once made, so syncs may share them).
        self._frames_by_name: dict[str, Frame | None] = {}
        self._tokens: dict[Any, _Sequence] = {}  # (thread, frame, match) -> ``_sequence``'s
        self._step_holders: dict[tuple[Any, Any], set[int]] = {}
        self._wrappers: dict[tuple[Any, Any, int], dict[str, tuple[str, int | None]]] = {}
        self._direct_ops: dict[Any, list[int]] = {}
        self._builtins: bool | None = None
        self._profiler_stop: Any = None  # the profiler's stop call (False: none), found once
        self._builtin_names: frozenset[str] | None = None
        self._forward: dict[Any, list[tuple[HostThread, int]]] | None = None
        self._fwd_threads: dict[Any, Any] | None = None
        self._ends: dict[Any, float] = {}
        self._kid_lists: dict[tuple[Any, Any, int], list[int]] = {}
        self._kid_starts: dict[tuple[Any, Any, int], list[float]] = {}
        self._steps_the_profiler: dict[tuple[Any, Any, int], bool] = {}
        self._builtins_of: dict[tuple[Any, Any, int], frozenset[str]] = {}
        self._resumes_of: dict[tuple[Any, Any, int], tuple[list[float], list[int]]] = {}
        self._started: dict[Any, float | None] = {}
        # The lines the frames of a (file, function) entered while profiling ran recorded:
        # their def line (``entered_lines``).
        self._entered: dict[tuple[str, str], set[int]] = {}
        self._first_library_calls: dict[Any, float] = {}
        self._unrecorded_copies: dict[Any, tuple[list[float], list[Any]]] | None = None
        self._program: str | None = None  # ``_program_package``'s, "" for none

    # -- indexes -----------------------------------------------------------------------
    def first_call_of(
        self, thread: HostThread, op_nodes: Sequence[int], apis: Iterable[str]
    ) -> str | None:
        """The library operator (``LIBRARY_SETUP_OPS``, the innermost such of ``op_nodes``)
        whose call set its library up, given the blocking calls ``apis`` the sync made:
        for cuBLAS and cuDNN (a set-up call among ``apis``), when no call of that library
        (cuBLAS: any multiply; cuDNN: any of its operations) ended on the thread before it
        began, in a trace that starts at the program's first step (a schedule that waited
        profiled no first call); for cuFFT (an allocator call among ``apis``), when device
        copies without a recorded call ran inside it (a plan being made). None
        otherwise."""
        nodes = thread.nodes
        index = next((i for i in reversed(op_nodes) if nodes[i].name in LIBRARY_SETUP_OPS), -1)
        if index < 0:
            return None
        if nodes[index].name in FFT_OPS:
            if FFT_SETUP_CALLS.isdisjoint(apis):
                return None
            return nodes[index].name if self._made_unrecorded_copies(thread, index) else None
        carried = self.library_calls
        if carried is None:
            from_first_step = not self.tl.steps or self.tl.steps[0].number == 0
        else:  # a window: the whole trace's first step, and the windows before's calls
            from_first_step = bool(carried.starts_at_first_step)
        if SETUP_CALLS.isdisjoint(apis) or not from_first_step:
            return None
        is_matmul = nodes[index].name in MATMUL_OPS
        first_end = self._first_library_end(thread, is_matmul)
        if carried is not None:
            key = (thread.pid, thread.tid, is_matmul)
            first_end = min(first_end, carried.first_ends.get(key, first_end))
        return nodes[index].name if thread.starts[index] < first_end else None

    def _first_library_end(self, thread: HostThread, is_matmul: bool) -> float:
        """When the first call of cuBLAS (``is_matmul``) or cuDNN on the thread ended (inf:
        none); one pass per thread and library, for the first that asks."""
        key = (thread.pid, thread.tid, is_matmul)
        first_end = self._first_library_calls.get(key)
        if first_end is None:
            library = MATMUL_OPS if is_matmul else CUDNN_OPS
            kinds, ends = thread.kinds, thread.ends
            first_end = self._first_library_calls[key] = min(
                (
                    ends[i]
                    for i, node in enumerate(thread.nodes)
                    if node.name in library and kinds[i] == OP
                ),
                default=float("inf"),
            )
        return first_end

    def note_library_calls(self) -> None:
        """Keeps in ``library_calls`` the earliest end of a cuBLAS or cuDNN call on each
        thread, for the windows after this one."""
        carried = self.library_calls
        if carried is None:
            return
        for thread in self.tl.threads.values():
            for is_matmul in (True, False):
                end = self._first_library_end(thread, is_matmul)
                key = (thread.pid, thread.tid, is_matmul)
                if end < carried.first_ends.get(key, float("inf")):
                    carried.first_ends[key] = end

    def _unrecorded_copy_starts(self) -> dict[Any, tuple[list[float], list[Any]]]:
        """Per device, the starts (sorted) and the operators' external ids of the copies
        from pageable host memory whose call the trace did not record: a library's
        blocking uploads through the driver API (cuFFT's plan tables, ``FFT_OPS``). A
        pageable upload is staged while its call runs, so it cannot be work queued before
        the trace began (a backlog of device-to-device copies can). The external id is the
        operator that made the copy where the trace says so (torch 2.11 on an H200: the
        transform's own id, not the copy's correlation id); else None. Found once."""
        if self._unrecorded_copies is None:
            tl = self.tl
            recorded = {
                tl.correlation(call, thread)
                for thread in tl.threads.values()
                for call in thread.runtime
            }
            found: dict[Any, list[tuple[float, Any]]] = {}
            for lane, events in tl.lanes.items():
                for event in events:
                    if (
                        event.cat == "gpu_memcpy"
                        and "Pageable -> Device" in event.name
                        and (corr := correlation_of(event)) is not None
                        and corr not in recorded
                    ):
                        external = event.args.external_id if event.args is not None else None
                        device = tl.lane_device.get(lane, lane[0])
                        found.setdefault(device, []).append(
                            (event.ts, None if external == corr else external)
                        )
            self._unrecorded_copies = {
                device: ([ts for ts, _ in copies], [ext for _, ext in copies])
                for device, copies in ((d, sorted(c, key=_FIRST)) for d, c in found.items())
            }
        return self._unrecorded_copies

    def _made_unrecorded_copies(self, thread: HostThread, index: int) -> bool:
        """Whether an upload without a recorded call started during node ``index`` on a
        device the node launched work on (a plan's tables, for its kernels, on whichever
        stream the library uses: the legacy default stream in an H200 recording whose
        transform ran on a side stream), made by this node or one inside it where the
        copy names its operator (another thread's transform may make a plan meanwhile)."""
        copies = self._unrecorded_copy_starts()
        if not copies:
            return False
        start, end = thread.starts[index], thread.ends[index]
        tl = self.tl
        devices = set()
        runtime = thread.runtime
        for k in range(bisect_left(thread.runtime_starts, start), len(runtime)):
            call = runtime[k]
            if call.ts > end:
                break
            devices.update(
                tl.lane_device.get((d.pid, d.tid), d.pid) for d in tl.device_events(call, thread)
            )
        own: set[Any] | None = None  # the external ids of the node and those inside it
        for device in devices:
            starts, externals = copies.get(device, ((), ()))
            at = bisect_left(starts, start)
            while at < len(starts) and starts[at] <= end:
                external = externals[at]
                if external is None:
                    return True
                if own is None:
                    own = self._external_ids_within(thread, index)
                if external in own:
                    return True
                at += 1
        return False

    @staticmethod
    def _external_ids_within(thread: HostThread, index: int) -> set[Any]:
        nodes, starts, end = thread.nodes, thread.starts, thread.ends[index]
        ids = set()
        i = index
        while i < len(nodes) and starts[i] <= end:
            args = nodes[i].args
            if args is not None and args.external_id is not None:
                ids.add(args.external_id)
            i += 1
        return ids

    def tree(self, thread: HostThread) -> _PythonTree:
        key = (thread.pid, thread.tid)
        tree = self._trees.get(key)
        if tree is None:
            tree = self._trees[key] = _PythonTree(thread)
        return tree

    def entered_lines(self) -> dict[tuple[str, str], set[int]]:
        """The lines the frames of each (file, function) recorded where they were entered
        while profiling ran (their def line), of the syncs attributed so far."""
        return self._entered

    def frames_made(self) -> list[Frame]:
        """Every frame made so far, once each: the stacks that hold a frame share it."""
        return [frame for frame in self._frames_by_name.values() if frame is not None]

    def frames_run(self) -> list[Frame]:
        """A frame for each distinct Python function the trace shows running, made where
        no sync made it (a loop with nothing to read: its explicit synchronizes are still
        worth naming); once per name, as ``frame`` makes them."""
        for thread in self.tl.threads.values():
            kinds = thread.kinds
            nodes = thread.nodes
            names = {nodes[i].name for i in compress(range(len(kinds)), map(PYTHON.__eq__, kinds))}
            for name in names - self._frames_by_name.keys():
                self._frames_by_name[name] = parse_frame(name, self.packs, self.library_roots)
        return self.frames_made()

    def user_frame(self, frames: Sequence[tuple[int, Frame]]) -> int | None:
        """The position in ``frames`` (innermost first) of the user's innermost frame; where
        none is the user's, the innermost of the package run as the program (``python -m
        open_clip_train.main``: every frame is a library's, and every read had no line)."""
        found = next((n for n, (_i, f) in enumerate(frames) if f.user), None)
        if found is not None:
            return found
        program = self._program_package()
        if program is None:
            return None
        return next((n for n, (_i, f) in enumerate(frames) if package_of(f.file) == program), None)

    def _program_package(self) -> str | None:
        """The package of a library module run as the program by ``python -m`` (its
        ``<module>`` frame called by ``runpy``); None: the program is the user's script."""
        if self._program is None:
            self._program = ""
            for thread in self.tl.threads.values():
                kinds, nodes, parent = thread.kinds, thread.nodes, thread.parent
                for i in compress(range(len(kinds)), map(PYTHON.__eq__, kinds)):
                    name = nodes[i].name
                    if not name.endswith(": <module>") or parent[i] < 0:
                        continue
                    if "runpy" not in nodes[parent[i]].name:
                        continue
                    if name not in self._frames_by_name:
                        self._frames_by_name[name] = parse_frame(
                            name, self.packs, self.library_roots
                        )
                    frame = self._frames_by_name[name]
                    if frame is not None and not frame.user:
                        self._program = package_of(frame.file) or ""
                    if self._program:
                        break
                if self._program:
                    break
        return self._program or None

    def library_functions_run(self) -> list[tuple[Frame, int]]:
        """Each function of a known library's own code the trace shows running (not
        torch's, ``catalogue.called_library``), with how many times it was entered: where
        its explicit synchronizes are looked for on a CPU-only trace."""
        counts: Counter[str] = Counter()
        for thread in self.tl.threads.values():
            kinds = thread.kinds
            nodes = thread.nodes
            counts.update(
                nodes[i].name for i in compress(range(len(kinds)), map(PYTHON.__eq__, kinds))
            )
        found: list[tuple[Frame, int]] = []
        for name, calls in counts.items():
            if name not in self._frames_by_name:
                self._frames_by_name[name] = parse_frame(name, self.packs, self.library_roots)
            frame = self._frames_by_name[name]
            if (
                frame is not None
                and not frame.user
                and frame.line is not None
                and called_library([(frame.file, frame.func)]) is not None
            ):
                found.append((frame, calls))
        return found

    def frame(self, thread: HostThread, index: int) -> Frame | None:
        key = (thread.pid, thread.tid, index)
        if key not in self._frames:
            name = thread.nodes[index].name
            if name not in self._frames_by_name:
                self._frames_by_name[name] = parse_frame(name, self.packs, self.library_roots)
            self._frames[key] = self._frames_by_name[name]
        return self._frames[key]

    def is_profiler_stop(self, episode: Episode) -> bool:
        """Whether a sync recorded without a stack is the profiler's own stop: torch's
        profiler waits for the whole device as it stops (``torch.autograd.profiler.profile.
        __exit__`` calls ``torch.cuda.synchronize()``), so a trace of CUDA or ROCm activity
        ends with that call. It is one call per trace: of the bare device synchronizes (no
        operator around them) that end their thread's host calls, after the last
        ProfilerStep where there are steps, the latest. A synchronize of the program's own
        comes before it: after the loop on the same thread, or one ending a worker thread
        while the main thread went on."""
        if episode.outer_op >= 0 or len(episode.calls) != 1:
            return False
        if self._profiler_stop is None:
            self._profiler_stop = self._find_profiler_stop() or False
        return episode.calls[0].event is self._profiler_stop

    def _find_profiler_stop(self) -> Any:
        steps = self.tl.steps
        after = max(step.end for step in steps) if steps else float("-inf")
        found = None
        for thread in self.tl.threads.values():
            if not thread.runtime:
                continue
            call = thread.runtime[-1]
            if call.name not in PROFILER_STOP_APIS or call.ts < after:
                continue
            if found is not None and found.ts >= call.ts:
                continue
            end = call.ts + call.dur
            inside = thread.innermost(call.ts, end)
            if any(thread.kinds[i] == OP for i in thread.ancestors(inside)):
                continue  # inside an operator: not torch.cuda.synchronize()
            # An operator or annotation begun after it (python frames do not count: they
            # are the interpreter unwinding the profiler's ``with``).
            kinds, starts = thread.kinds, thread.starts
            later = False
            for i in range(len(starts) - 1, -1, -1):
                if starts[i] < call.ts:
                    break
                if kinds[i] != PYTHON and starts[i] >= end:
                    later = True
                    break
            if not later:
                found = call
        return found

    def profiling_started(self, thread: HostThread) -> float | None:
        """When the profiler started tracing on this thread: the start of its
        ``start_trace`` frame, which the frames already running then enclose (they record
        their current line) and every frame entered later follows (they record their def
        line). None: the thread does not show it (another thread, an older trace)."""
        key = (thread.pid, thread.tid)
        if key not in self._started:
            found = None
            seen = 0
            # The profiler's start comes with the first frames: a bounded look.
            for node, kind, start in zip(thread.nodes, thread.kinds, thread.starts, strict=True):
                if kind != PYTHON:
                    continue
                name = node.name
                if name.endswith("start_trace") and _PROFILER_START.search(name):
                    found = start
                    break
                seen += 1
                if seen > _PROFILER_START_WITHIN:
                    break
            self._started[key] = found
        return self._started[key]

    def records_builtins(self) -> bool:
        """Whether the trace records calls of built-in functions (``<built-in method ...>``
        frames); without them every operator looks frameless."""
        if self._builtins is None:
            self._builtins = bool(self.builtin_names())
        return self._builtins

    def builtin_names(self) -> frozenset[str]:
        """Names the trace shows called as built-ins (``<built-in method item ...>``)."""
        if self._builtin_names is None:
            names = {
                thread.nodes[i].name
                for thread in self.tl.threads.values()
                for i in self.tree(thread).order
                if thread.nodes[i].name.startswith("<built-in")
            }
            found = (_BUILTIN_RE.match(name) for name in names)
            self._builtin_names = frozenset(m.group(1) for m in found if m and m.group(1))
        return self._builtin_names

    def _graph_break_after(self, thread: HostThread, index: int, node: int) -> int | None:
        """The line of the graph break ``node`` (a child of frame ``index``, or an
        operator it ran) ran at, where that frame is torch.compile's frame of a function (or
        of one of its resume functions): it runs its code as a graph, then the instruction
        that broke the graph in its own frame, then calls the function resuming after that
        line, ``torch_dynamo_resume_in_<func>_at_<line>``. None where the frame calls no
        such function after ``node``. The resume calls are read once per frame."""
        key = (thread.pid, thread.tid, index)
        resumes = self._resumes_of.get(key)
        if resumes is None:
            starts: list[float] = []
            lines: list[int] = []
            for kid in self._kids(thread, index):
                called = self.frame(thread, kid)
                line = dynamo_resume_line(called.func) if called is not None else None
                if line is not None:
                    starts.append(thread.starts[kid])
                    lines.append(line)
            resumes = self._resumes_of[key] = (starts, lines)
        starts, lines = resumes
        at = bisect_left(starts, thread.starts[node])
        return lines[at] if at < len(lines) else None

    def _builtins_called(self, thread: HostThread, index: int) -> frozenset[str]:
        """Names of the built-ins frame ``index`` called itself (its children); once per
        frame: the calls further out of each sync ask it of a loop's frame."""
        key = (thread.pid, thread.tid, index)
        names = self._builtins_of.get(key)
        if names is None:
            found = (_BUILTIN_RE.match(thread.nodes[k].name) for k in self._kids(thread, index))
            names = frozenset(m.group(1) for m in found if m and m.group(1))
            self._builtins_of[key] = names
        return names

    def _kids(self, thread: HostThread, index: int) -> list[int]:
        """Python children of a frame in time order, ``nn.Module: X`` entries opened up (they
        stand in for the module's ``_wrapped_call_impl`` frame). Kept per frame (never to
        be changed by the caller): every sync under a frame asks for them, and a frame
        with a child per step (a training loop) made that a pass over the steps per sync
        (5 s for 4,000 syncs)."""
        key = (thread.pid, thread.tid, index)
        kids = self._kid_lists.get(key)
        if kids is None:
            kids = []
            for child in self.tree(thread).children.get(index, ()):
                name = thread.nodes[child].name
                if name.startswith(_MODULE_PREFIX):
                    kids.extend(self._kids(thread, child))
                elif name.endswith(_DISPATCH_SUFFIXES):
                    # A tensor subclass's dispatcher (``MetaTensor.__torch_function__``):
                    # the operator's call in it is the caller's; its own bookkeeping calls
                    # (MONAI's ``update_meta``) are no calls of the caller's source.
                    kids.extend(
                        k
                        for k in self._kids(thread, child)
                        if thread.nodes[k].name.startswith("<built-in") and _runs_an_op(thread, k)
                    )
                else:
                    kids.append(child)
            self._kid_lists[key] = kids
        return kids

    def _steps_profiler(self, thread: HostThread, index: int) -> bool:
        """Whether a frame called the profiler's ``step`` (a training loop's frame)."""
        key = (thread.pid, thread.tid, index)
        found = self._steps_the_profiler.get(key)
        if found is None:
            found = self._steps_the_profiler[key] = any(
                self._is_profiler_step(thread, c) for c in self._kids(thread, index)
            )
        return found

    def _last_end(self, thread: HostThread) -> float:
        key = (thread.pid, thread.tid)
        end = self._ends.get(key)
        if end is None:
            end = self._ends[key] = max(thread.ends, default=0.0)
        return end

    def _is_profiler_step(self, thread: HostThread, index: int) -> bool:
        # A Python frame's event is named ``file(line): func``: only a ``step`` is parsed.
        if not thread.nodes[index].name.endswith("step"):
            return False
        frame = self.frame(thread, index)
        return frame is not None and frame.func == "step" and _is_profiler_file(frame.file)

    def _module_class(self, thread: HostThread, index: int) -> str | None:
        """The class of the nn.Module whose call a frame (``_call_impl``) is the body of."""
        parent = self.tree(thread).parent.get(index, -1)
        name = thread.nodes[parent].name if parent >= 0 else ""
        return module_name(name) if name.startswith(_MODULE_PREFIX) else None

    def _has_path(self, thread: HostThread, index: int, names: tuple[str, ...]) -> bool:
        if names[0].startswith(MODULE_CALL):
            return self._module_class(thread, index) == names[0][len(MODULE_CALL) :]
        frame = self.frame(thread, index)
        if names[0].startswith(INIT_CALL):
            return frame is not None and frame.func == "__init__" and init_call(frame) == names[0]
        if names[0].startswith(CALL_CALL):
            return (
                frame is not None and frame.func == "__call__" and instance_call(frame) == names[0]
            )
        if frame is None or frame.func != names[0]:
            return False
        return len(names) == 1 or any(
            self._has_path(thread, child, names[1:]) for child in self._kids(thread, index)
        )

    def _direct(self, thread: HostThread, frame_index: int) -> list[int]:
        """Outermost operators a frame ran itself (no python frame between), in time order."""
        key = (thread.pid, thread.tid, frame_index)
        found = self._direct_ops.get(key)
        if found is None:
            tree = self.tree(thread)
            kinds = thread.kinds
            parent = thread.parent
            end = thread.ends[frame_index]
            starts = thread.starts
            found = []
            j = frame_index + 1
            n = len(starts)
            while j < n and starts[j] < end:
                if kinds[j] == OP:
                    k = parent[j]
                    while k >= 0 and kinds[k] == ANNOTATION:
                        k = parent[k]
                    outermost = k < 0 or kinds[k] != OP
                    if outermost and tree.innermost(starts[j], thread.ends[j]) == frame_index:
                        found.append(j)
                j += 1
            self._direct_ops[key] = found
        return found

    def _sequence(self, thread: HostThread, frame_index: int, match: Any) -> _Sequence:
        """The observed calls of one kind a frame made as tokens ("N" for a child frame on
        the ``match`` path of names; for frameless operators their class, every class at
        once so that each orders the others; "P" for the profiler's step, or for a child
        frame holding it below: a loader wrapper's ``__next__``, a callback), the token
        position of each matching node, those functions (``_step_wrappers``), and for a
        path of names the tokens with the other child frames between them (``Observed.
        calls``)."""
        key = (thread.pid, thread.tid, frame_index, match)
        cached = self._tokens.get(key)
        if cached is not None:
            return cached
        tokens: list[str] = []
        calls: list[str] = []
        positions: dict[int, int] = {}
        kids = self._kids(thread, frame_index)
        wrappers = self._step_wrappers(thread, frame_index, kids)
        if isinstance(match, tuple):  # a path of call names under this frame
            for child in kids:
                # The profiler's step first: a sync in another ``step`` (``scaler.step``,
                # ``sched.step``) has the group ("step",) too.
                if self._is_profiler_step(thread, child):
                    tokens.append(P)
                    calls.append(P)
                elif self._has_path(thread, child, match):
                    positions[child] = len(tokens)
                    tokens.append(N)
                    calls.append(N)
                else:
                    func = self._func_of(thread, child)
                    if wrappers and func in wrappers:
                        tokens.append(P)
                        calls.append(P)
                    elif func:
                        calls.append(ANCHOR + func)
        else:  # frameless operators: ``match`` holds (operator name, token) pairs
            labels = dict(match)
            steps = [
                c
                for c in kids
                if self._is_profiler_step(thread, c)
                or (wrappers and self._func_of(thread, c) in wrappers)
            ]
            ops = [j for j in self._direct(thread, frame_index) if thread.nodes[j].name in labels]
            events = sorted(
                [(thread.starts[j], 0, j) for j in ops] + [(thread.starts[c], 1, c) for c in steps]
            )
            for _ts, is_step, j in events:
                if is_step:
                    tokens.append(P)
                else:
                    positions[j] = len(tokens)
                    tokens.append(labels[thread.nodes[j].name])
        result = _Sequence(tuple(tokens), positions, tuple(wrappers.items()), tuple(calls))
        self._tokens[key] = result
        return result

    def _func_of(self, thread: HostThread, index: int) -> str | None:
        frame = self.frame(thread, index)
        return frame.func if frame is not None else None

    def _step_wrappers(
        self, thread: HostThread, frame_index: int, kids: list[int]
    ) -> dict[str, tuple[str, int | None]]:
        """The functions a frame called that ran the profiler's step below them (a loader
        wrapper's generator, a callback), by name, with the file and line of one of their
        frames (for the source to tell a generator). Every call of such a function counts
        as a step boundary of the frame, stepping or not: a wrapper that steps every second
        batch still marks each ``__next__``."""
        key = (thread.pid, thread.tid, frame_index)
        found = self._wrappers.get(key)
        if found is None:
            found = {}
            for child in kids:
                if not self._is_profiler_step(thread, child) and self._holds_profiler_step(
                    thread, child
                ):
                    frame = self.frame(thread, child)
                    if frame is not None and frame.func not in found:
                        found[frame.func] = (frame.file, frame.line)
            self._wrappers[key] = found
        return found

    def _holds_profiler_step(self, thread: HostThread, index: int) -> bool:
        """Whether the profiler's step runs in a frame's frames a few levels below it (a
        loader wrapper's ``__next__`` calling ``prof.step()``, a callback's hook): its
        call marks a step boundary in the frame that made it, as ``prof.step()`` itself
        does. Found from the profiler's steps up (a handful a trace), not by a walk down
        every child."""
        key = (thread.pid, thread.tid)
        holders = self._step_holders.get(key)
        if holders is None:
            holders = set()
            tree = self.tree(thread)
            for step in self._profiler_steps(thread):
                j = tree.parent.get(step, -1)
                for _level in range(_STEP_HOLDER_DEPTH):
                    if j < 0:
                        break
                    holders.add(j)
                    j = tree.parent.get(j, -1)
            self._step_holders[key] = holders
        return index in holders

    def _profiler_steps(self, thread: HostThread) -> list[int]:
        """The frames of the profiler's ``step`` on a thread (found by name first: a C-level
        scan of the names; only those frames are made)."""
        nodes = thread.nodes
        named = compress(range(len(nodes)), map(_ENDS_AS_STEP, map(_NAME, nodes)))
        return [i for i in named if self._is_profiler_step(thread, i)]

    # -- stacks ------------------------------------------------------------------------
    def python_stack(
        self, thread: HostThread, ts: float, end: float
    ) -> tuple[list[tuple[int, Frame]], list[str]]:
        """The frames holding [ts, end] on ``thread`` (node, frame), innermost first, and the
        nn.Module path (outer first)."""
        tree = self.tree(thread)
        frames: list[tuple[int, Frame]] = []
        modules: list[str] = []
        innermost = tree.innermost(ts, end)
        if innermost < 0:
            return frames, modules
        for index in tree.chain(innermost):
            name = thread.nodes[index].name
            if name.startswith(_MODULE_PREFIX):
                modules.append(module_name(name))
                continue
            frame = self.frame(thread, index)
            if frame is not None:
                frames.append((index, frame))
        modules.reverse()
        return frames, modules

    def query(
        self,
        thread: HostThread,
        frames: list[tuple[int, Frame]],
        level: int,
        op: int,
        in_compiled_graph: bool = False,
    ) -> CallQuery:
        """What ``frames[level]`` called to reach the sync: the frames below it (innermost
        first before it in ``frames``) or, with none, the operator ``op`` it ran itself.
        ``in_compiled_graph``: ``op`` ran in torch.compile's graph of the frame's code
        (``CallQuery.in_compiled_graph``)."""
        index, frame = frames[level]
        path = [f.func for _i, f in reversed(frames[:level])]
        truncated = thread.ends[index] + 1.0 >= self._last_end(thread) or self._steps_profiler(
            thread, index
        )
        groups: list[tuple[str, ...]] = []
        observed: list[Observed | None] = []
        optional = False
        called_before = None
        if path:
            child = frames[level - 1][0]
            cls = self._module_class(thread, child)
            if cls is not None:
                # An nn.Module called: the source calls it by the name of an instance of
                # its class (``encoder(x)``), not by any frame's name.
                names = (MODULE_CALL + cls,)
                seq = self._sequence(thread, index, names)
                groups.append(names)
                observed.append(seq.observed(seq.positions.get(child), (thread, index, names)))
            named = len(groups)  # the groups of frame names start here
            # Below a special method run by syntax (``3.0 in t`` runs ``__contains__``,
            # which calls ``.item()``) the source has no call of the deeper names: they
            # would match another line's (``t.sum().item()``), exact.
            depths = 1 if _is_dunder(path[0]) else _call_depths(frames[:level])
            user_above = False
            for depth in range(depths):
                callee = frames[level - 1 - depth][1]
                if user_above and callee.file == "<built-in>":
                    # A built-in under the user's own function is a call of that function's
                    # body, never the name the caller called it by: a function called
                    # through an alias (``step_fn = torch.compile(f)``) had its ``.item()``
                    # taken for the caller's own ``loss.item()`` line, exact.
                    break
                user_above = user_above or callee.user
                names = tuple(path[: depth + 1])
                if names == ("__init__",):
                    # A class called: the source calls it by the class's name, which only
                    # its ``__init__``'s file and line tell (and only its own calls count).
                    names = (init_call(frames[level - 1][1]),)
                elif names[-1] == "__call__" and frames[level - 1 - depth][1].func == "__call__":
                    # An object called (diffusers' ``pipe(...)``), maybe through a decorator
                    # (``@torch.no_grad()``): the source calls it by the name of an instance
                    # of the class whose ``__call__`` that is, as an nn.Module's.
                    names = (*names[:-1], instance_call(frames[level - 1 - depth][1]))
                if names[-1] == callee.func and _maybe_a_method(callee):
                    # Where that function is: the resolver reads the class it is a method
                    # of, to tell its calls from another class's of the same name.
                    groups.append((names[-1], method_at(callee)))
                else:
                    groups.append((names[-1],))
                seq = self._sequence(thread, index, names)
                observed.append(seq.observed(seq.positions.get(child), (thread, index, names)))
            called = frames[level - 1][1]
            if (
                called.file != "<built-in>"
                # torch's own Python (``torch.unique`` runs as ``fn``): another library's
                # function is called by its own names, and the operator's (``item``) are
                # its code's, deeper (wandb's ``log`` reads in ``json_friendly``: a
                # ``val.item()`` elsewhere in the caller was taken for it, exact).
                and (package_of(called.file) is None or is_framework_file(called.file))
                and op >= 0
                # Below a user's function (a caller's query), its own body ran the operator.
                and not any(f.user for _i, f in frames[:level])
                and not _is_dunder(called.func)
                # A comprehension is called by syntax at its own line, never by another
                # name, so the names that usually run its operator are not looked for
                # (minGPT's ``[itos[int(i)] for i in y]`` fit a ``loss.item()`` elsewhere).
                and called.func not in COMPREHENSION_FRAMES
            ):
                # A Python function whose frames carry another name than the one called
                # (torch.unique runs as boolean_dispatch's ``fn``): the names that usually
                # run the operator, except those the trace shows as built-in calls (a
                # ``.item()`` in the user's code would have its own built-in frame), and
                # never an evaluation point without a frame: the frame was called
                # (``Normal(loc, scale, validate_args=not fixed)`` syncs in ``__init__``,
                # not at ``not fixed``). Not for a special method, which syntax calls
                # (``3.0 in t`` runs ``__contains__``, ``str(t)`` ``__repr__``): the source
                # names no call of it, and another call of those names (a ``float(step)``)
                # would be taken for it, exact.
                # Only the built-ins this frame called itself: ``torch.unique_consecutive``
                # calls its built-in from torch's own Python, and a trace-wide list dropped
                # the name, leaving ``unique`` to match another line (a dead branch's).
                builtins = self._builtins_called(thread, index)
                chain = [thread.nodes[i].name for i in op_chain(thread, op)]
                first = observed[named] if len(observed) > named else None
                for group in callee_groups(None, chain):
                    kept = tuple(
                        n for n in group if n not in builtins and n not in EVALUATION_POINTS
                    )
                    if kept and kept not in groups:
                        groups.append(kept)
                        observed.append(first)
        elif op >= 0:
            name = thread.nodes[op].name
            cls = _FRAMELESS_CLASSES.get(name)
            # A compiled graph's read has no built-in frame even where the source calls
            # one (``n = mask.sum().item()``).
            if cls is not None and self.records_builtins() and not in_compiled_graph:
                match = frozenset(_FRAMELESS_CLASSES.items())
                groups.append((cls,))
            else:
                # No class for it, or builtin calls not recorded: look for the names that
                # usually run this operator, any of which may show no frame.
                chain = [thread.nodes[i].name for i in op_chain(thread, op)]
                groups.extend(tuple(g) for g in callee_groups(None, chain))
                match = frozenset({(name, N)})
                optional = True
            seq = self._sequence(thread, index, match)
            observed = [seq.observed(seq.positions.get(op), (thread, index, match))] * len(groups)
            called_before = self._called_before(thread, index, op)
        else:
            # A runtime call outside any operator, with no frame under this one (a trace
            # recording no built-in calls): the calls that usually make one.
            groups.extend(tuple(g) for g in API_CALLEES)
            observed = [None] * len(groups)
            optional = True
        if in_compiled_graph:
            observed = [None] * len(groups)
            called_before = None
        # Only torch.compile's frames of a function (dynamo's frame calls them, or they
        # are resume functions) call resume functions.
        at = frames[level - 1][0] if path else op
        compiled_frame = dynamo_resumed(frame.func) is not None or (
            level + 1 < len(frames) and _DYNAMO_FILE.search(frames[level + 1][1].file) is not None
        )
        graph_break = (
            self._graph_break_after(thread, index, at) if at >= 0 and compiled_frame else None
        )
        started = self.profiling_started(thread)
        entered = started is not None and thread.starts[index] > started
        if entered and frame.line is not None:
            self._entered.setdefault((frame.file, frame.func), set()).add(frame.line)
        return CallQuery(
            frame,
            tuple(groups),
            tuple(observed),
            truncated,
            optional,
            entered,
            called_before,
            in_compiled_graph,
            graph_break,
        )

    def _called_before(self, thread: HostThread, index: int, op: int) -> str | None:
        """The name of the last call frame ``index`` made that ended before ``op`` began."""
        start = thread.starts[op]
        kids = self._kids(thread, index)
        key = (thread.pid, thread.tid, index)
        kid_starts = self._kid_starts.get(key)
        if kid_starts is None:
            kid_starts = self._kid_starts[key] = [thread.starts[c] for c in kids]
        # The last child that began before the operator and had ended by then.
        before = None
        for j in range(bisect_left(kid_starts, start) - 1, -1, -1):
            if thread.ends[kids[j]] <= start + 1e-3:
                before = kids[j]
                break
        if before is None:
            return None
        frame = self.frame(thread, before)
        return frame.func if frame is not None else None

    def _frame_queries(
        self,
        thread: HostThread,
        frames: list[tuple[int, Frame]],
        op: int,
        with_callers: bool = True,
    ) -> tuple[CallQuery | None, CallQuery | None, CallQuery | None, list[CallQuery], bool]:
        """The user's call (innermost user frame); when that call went into a library, the
        library's own call that synced (its innermost Python frame); and, ``with_callers``,
        the call of the user's function by the next user frame out, where one called it,
        the calls by the user frames further out (``Attribution.outer_calls``), and whether
        the user's frame steps the profiler itself (``Attribution.steps_own_frame``)."""
        # A tensor subclass's dispatchers run each operator for the code that called it:
        # the calls are matched as if they were not there (``_kids`` opens them up too).
        frames = [
            entry
            for n, entry in enumerate(frames)
            if not dispatches_for_its_caller(
                entry[1].file, entry[1].func, frames[n - 1][1].file if n else None
            )
        ]
        user = self.user_frame(frames)
        if user is None:
            return None, None, None, [], False
        if _runs_its_compiled_graph(frames[:user]):
            # torch.compile's graph of the user's function, run from that function's own
            # frame: its operators are the function's own lines (which ones, the graph
            # does not say), not a call of dynamo's; the generated module's line, named
            # by a hash that changes with each compile, is no library line.
            # Nor is the graph's order of operators the source's.
            frames = frames[user:]
            user_query = self.query(thread, frames, 0, op, in_compiled_graph=True)
            user = 0
        else:
            user_query = self.query(thread, frames, user, op)
        inside = [n for n, (_i, f) in enumerate(frames[:user]) if f.file != "<built-in>"]
        # The innermost frame of the library's own code, past torch's wrappers of one
        # operator and the wrappers a call passes through; torch's frame where there is
        # no other (the user's ``torch.unique(x)``).
        library = next(
            (
                n
                for n in inside
                if not (
                    wraps_one_op(frames[n][1].file, frames[n][1].func)
                    or passes_through(frames[n][1].file)
                )
            ),
            inside[0] if inside else None,
        )
        library_query = self.query(thread, frames, library, op) if library is not None else None
        callers = [n for n in range(user + 1, len(frames)) if frames[n][1].user]
        callers = _past_resume_chain(frames, user, callers)
        if not callers or not with_callers:
            return user_query, library_query, None, [], False
        caller_query = self.query(thread, frames, callers[0], op)
        if self._steps_profiler(thread, frames[user][0]):
            # The sync's own frame steps the profiler: its callers are outside the steps,
            # and a test around its call is about epochs.
            return user_query, library_query, caller_query, [], True
        outer: list[CallQuery] = []
        # Out to the frame that steps the profiler, for the same reason. Three frames at
        # most, where none does (no steps).
        for inner, level in zip(callers, callers[1 : _OUTER_FRAMES + 1], strict=False):
            if self._steps_profiler(thread, frames[inner][0]):
                break
            outer.append(self.query(thread, frames, level, op))
        return user_query, library_query, caller_query, outer, False

    # -- backward passes ---------------------------------------------------------------
    def _forward_index(self) -> dict[Any, list[tuple[HostThread, int]]]:
        """Forward operators by autograd sequence number (backward ops carry the number of
        the forward op they are the gradient of, and a nonzero ``Fwd thread id``)."""
        if self._forward is None:
            index: dict[Any, list[tuple[HostThread, int]]] = {}
            for thread, i, args in self._numbered_ops(forward=True):
                index.setdefault(args.sequence_number, []).append((thread, i))
            self._forward = index
        return self._forward

    def _numbered_ops(self, forward: bool) -> Iterator[tuple[HostThread, int, Args]]:
        """(thread, node, its args) of every operator with an autograd sequence number, of
        the forward pass or of the backward pass."""
        for thread in self.tl.threads.values():
            kinds = thread.kinds
            for i, node in enumerate(thread.nodes):
                args = node.args
                if (
                    kinds[i] == OP
                    and args is not None
                    and args.sequence_number is not None
                    and _is_forward(args.fwd_thread_id) == forward
                ):
                    yield thread, i, args

    def _forward_thread_of(self, fwd_id: Any) -> Any:
        """The host thread a ``Fwd thread id`` names, learnt from the backward ops whose
        sequence number only one thread has (the id is torch's, not the trace's tid)."""
        if self._fwd_threads is None:
            votes: dict[Any, dict[Any, int]] = {}
            forward = self._forward_index()
            for _thread, _i, args in self._numbered_ops(forward=False):
                owners = {(t.pid, t.tid) for t, _j in forward.get(args.sequence_number, ())}
                if len(owners) == 1:
                    count = votes.setdefault(args.fwd_thread_id, {})
                    owner = next(iter(owners))
                    count[owner] = count.get(owner, 0) + 1
            self._fwd_threads = {fid: max(c, key=c.get) for fid, c in votes.items()}
        return self._fwd_threads.get(fwd_id)

    def forward_of(
        self, thread: HostThread, op_nodes: list[int]
    ) -> tuple[int, HostThread, int] | None:
        """(backward op node, forward thread, forward op node) for a sync inside a backward
        op, or None."""
        for i in op_nodes:
            args = thread.nodes[i].args
            if args is None or args.sequence_number is None or _is_forward(args.fwd_thread_id):
                continue
            candidates = [
                (t, j)
                for t, j in self._forward_index().get(args.sequence_number, ())
                if thread.starts[i] >= t.starts[j]
            ]
            owners = {(t.pid, t.tid) for t, _j in candidates}
            if len(owners) > 1:
                owner = self._forward_thread_of(args.fwd_thread_id)
                candidates = [(t, j) for t, j in candidates if (t.pid, t.tid) == owner]
            if not candidates:
                # No forward op of that number (autograd's ``CopySlices``, wrapping an
                # in-place write to a view, ``out[mask, :n] = v``): the node it wraps has
                # one (its ``IndexPutBackward0``). An Avalanche walk: the backward was
                # named at torch's autograd runner, no line of the user's.
                continue
            wanted = _forward_name(thread.nodes[i].name)
            named = [
                (t, j)
                for t, j in candidates
                if t.nodes[j].name.split("::")[-1].lstrip("_") == wanted
            ]
            # The op that made the autograd node is the last one of that number.
            fthread, j = max(named or candidates, key=lambda c: c[0].starts[c[1]])
            return i, fthread, j
        return None

    # -- the stage ---------------------------------------------------------------------
    def __call__(self, episode: Episode) -> Attribution:
        tl = self.tl
        thread = episode.thread
        nodes = thread.nodes
        anchor = episode.anchor
        op_nodes = op_chain(thread, anchor)
        chain = [nodes[i].name for i in op_nodes]
        annotations = [
            nodes[i].name
            for i in reversed(thread.ancestors(anchor))
            if thread.kinds[i] == ANNOTATION and not STEP_RE.match(nodes[i].name)
        ]
        if anchor >= 0:
            span = (thread.starts[anchor], thread.ends[anchor])
        else:
            span = (episode.ts, episode.end)
        located, modules = self.python_stack(thread, *span)
        stack = [f for _i, f in located]
        call_lines = False
        invocation: Any = None
        # The call's own outermost operator, below the Python frames: an operator holding
        # Python (a ``torch.autograd.Function``'s) ran those frames, not the read.
        outer = episode.outer_op if episode.outer_op >= 0 else (op_nodes[0] if op_nodes else -1)
        user_call = library_call = caller_call = None
        outer_calls: list[CallQuery] = []
        steps_own_frame = False
        if located:
            user_call, library_call, caller_call, outer_calls, steps_own_frame = (
                self._frame_queries(thread, located, outer)
            )
            at = self.user_frame(located)
            user = located[at][0] if at is not None else None
            invocation = (thread.pid, thread.tid, user) if user is not None else None
        else:
            # Legacy traces: the stack is an argument of the operators, innermost op first.
            for index in reversed(op_nodes):
                args = nodes[index].args
                if args is not None and args.call_stack:
                    stack = parse_call_stack(args.call_stack, self.packs, self.library_roots)
                    if stack:
                        call_lines = True
                        invocation = (thread.pid, thread.tid, index)
                        break
        step = tl.step_at(episode.ts)
        api, apis, device_id, nbytes = _calls_of(
            tl, episode, chain, nodes[anchor].name if anchor >= 0 else ""
        )
        first_call = None
        if op_nodes and not (SETUP_CALLS.isdisjoint(apis) and FFT_SETUP_CALLS.isdisjoint(apis)):
            first_call = self.first_call_of(thread, op_nodes, apis)
        attribution = Attribution(
            api=api,
            apis=apis,
            op_chain=chain,
            first_call_of=first_call,
            step=step.number if step is not None else None,
            thread=thread.tid,
            ts_us=episode.ts,
            end_us=episode.end,
            annotations=annotations,
            module=".".join(modules) if modules else None,
            stack=stack,
            device_id=device_id,
            bytes=nbytes,
            call_lines=call_lines,
            invocation=invocation,
            called=called_name(stack),
            user_call=user_call,
            library_call=library_call,
            caller_call=caller_call,
            outer_calls=outer_calls,
            steps_own_frame=steps_own_frame,
            profiler_overhead=is_profiler_stack(stack)
            or (not stack and self.is_profiler_stop(episode)),
        )
        link = self.forward_of(thread, op_nodes)
        # A backward the user wrote (a custom Function's ``backward``, a module's backward
        # hook) syncs at its own line: the forward call is where it came from, not the line.
        if link is not None and not _user_code_inside(thread, located, link[0]):
            self._attach_forward(
                attribution, thread, link, _library_code_inside(thread, located, link[0])
            )
        return attribution

    def _attach_forward(
        self,
        attribution: Attribution,
        thread: HostThread,
        link: tuple[int, HostThread, int],
        library_inside: bool = False,
    ) -> None:
        """``library_inside``: a library's Python ran the backward (a custom Function's
        ``backward`` in torchdiffeq's adjoint): its line is where the read is, kept with
        the forward call the user wrote."""
        backward_op, fthread, forward_op = link
        attribution.backward = True
        if fthread.nodes[forward_op].name in _INDEX_PUTS:
            # The assignment's own kernel: its number lifted just before it says what the
            # backward fills with (pytorch-metric-learning's ``x[mask] = finfo.min``).
            end = fthread.ends[forward_op]
            j = forward_op
            while j < len(fthread.nodes) and fthread.starts[j] <= end:
                if fthread.nodes[j].name == INDEX_PUT_IMPL:
                    attribution.forward_assigns_number = assigns_a_host_number(fthread, j)
                    break
                j += 1
        attribution.forward_op = fthread.nodes[forward_op].name
        outer = op_chain(fthread, forward_op)[0]
        frames, _modules = self.python_stack(fthread, fthread.starts[outer], fthread.ends[outer])
        attribution.forward_stack = [f for _i, f in frames]
        forward_library = None
        if frames:
            attribution.forward_call, forward_library, *_rest = self._frame_queries(
                fthread, frames, outer, with_callers=False
            )
        if not library_inside:
            # The backward of a library's operation (pytorch-metric-learning's reducer's
            # boolean mask): its line is the library's that made it.
            attribution.library_call = forward_library
        if attribution.user_call is not None:
            attribution.run_by_call = attribution.user_call  # backward ran on this thread
            return
        # On a GPU the backward pass runs on autograd's own thread, which has no Python
        # frames; the thread that called backward() waits inside it meanwhile.
        ts, end = thread.starts[backward_op], thread.ends[backward_op]
        waiting, _modules = self.python_stack(fthread, ts, end)
        if waiting:
            attribution.run_by_call, *_rest = self._frame_queries(
                fthread, waiting, -1, with_callers=False
            )


def _is_forward(fwd_thread_id: Any) -> bool:
    return fwd_thread_id in (None, 0, "0")


def _forward_name(backward_op: str) -> str:
    """``autograd::engine::evaluate_function: LogSoftmaxBackward0`` -> ``log_softmax``."""
    name = backward_op.rsplit(": ", 1)[-1].split("::")[-1]
    return _CAMEL_RE.sub("_", _BACKWARD_SUFFIX_RE.sub("", name)).lower().lstrip("_")


def _calls_of(
    tl: Timeline, episode: Episode, chain: list[str], anchor_name: str
) -> tuple[str, list[str], int | None, int | None]:
    """(the call the host waited in, every blocking call, device, bytes copied)."""
    calls = episode.calls
    if not calls:
        # A recorded Tensor method (``.tolist()`` on the CPU) is named as the method: its
        # recorded name holds the tensor's address, different in every run.
        if episode.method:
            api = f"Tensor.{episode.method}"
        else:
            api = chain[-1] if chain else anchor_name
        return api, [api], None, None
    apis = [c.event.name for c in calls]
    # The call the host waited in: the longest one (for .item(), the stream sync).
    api = max(calls, key=lambda c: c.event.dur).event.name
    device_id = None
    copied = 0
    if tl.npu_of_process:
        # An AscendCL call has no device record of its own: its process says its NPU.
        device_id = next(
            (tl.npu_of_process[c.event.pid] for c in calls if c.event.pid in tl.npu_of_process),
            None,
        )
    for call in calls:
        for d in call.device_events:
            if device_id is None:
                device_id = tl.device_of_event(d)
            if d.cat != "cuda_sync" and d.args is not None and call.reason != "sync":
                value = d.args.bytes
                if isinstance(value, (int, float)):
                    copied += int(value)
    return api, apis, device_id, copied or None


def called_name(stack: list[Frame]) -> str | None:
    """What the innermost user frame called: the frame just inside it (a built-in's name,
    ``item``, ``nonzero``, or a library function's name, ``cross_entropy``)."""
    for i, frame in enumerate(stack):
        if frame.user:
            return stack[i - 1].func if i > 0 else None
    return None


def attribute(tl: Timeline, episode: Episode, packs: Sequence[SourcePack] = ()) -> Attribution:
    """Where the episode came from: operators, step, annotations, module, stack, the call the
    host waited in, the device and bytes its calls worked on (one-off form of
    ``Attributor``, which keeps its indexes across the episodes of a trace)."""
    return Attributor(tl, packs)(episode)


__all__ = [
    "Attribution",
    "Attributor",
    "attribute",
    "is_profiler_stack",
    "called_name",
    "is_user_file",
    "module_name",
    "parse_call_stack",
    "parse_frame",
    "OP",
]


def _maybe_a_method(frame: Frame) -> bool:
    """Whether a frame may be a method called by its name on an object (``metric.
    update(...)``): a Python function's, not a special method (syntax calls those), a
    comprehension's, a lambda's or a module's."""
    return (
        frame.file != "<built-in>"
        and frame.line is not None
        and not _is_dunder(frame.func)
        and frame.func.isidentifier()
    )


def _is_dunder(name: str) -> bool:
    return len(name) > 4 and name.startswith("__") and name.endswith("__")


_INDEX_PUTS = frozenset({"aten::index_put_", "aten::index_put", INDEX_PUT_IMPL})


def _library_code_inside(thread: HostThread, located: list[tuple[int, Frame]], op: int) -> bool:
    """Whether a library's own Python frame (not torch's, not a built-in) of ``located`` ran
    inside operator ``op``."""
    start, end = thread.starts[op], thread.ends[op]
    return any(
        not frame.user
        and i >= 0
        and start <= thread.starts[i]
        and thread.ends[i] <= end
        and edited_library([(frame.file, frame.func)]) is not None
        for i, frame in located
    )


def _user_code_inside(thread: HostThread, located: list[tuple[int, Frame]], op: int) -> bool:
    """Whether a user frame of ``located`` ran inside operator ``op`` (its own Python)."""
    start, end = thread.starts[op], thread.ends[op]
    return any(
        frame.user and i >= 0 and start <= thread.starts[i] and thread.ends[i] <= end
        for i, frame in located
    )
