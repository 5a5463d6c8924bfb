"""Attribute an episode: operator chain, step, annotations, nn.Module path, thread and the
Python stack (modern ``python_function`` tree and legacy ``Call stack`` argument), as one
``Attribution`` record. Which frames are the user's code is decided here (``is_user_file``)."""

from __future__ import annotations

import re
import sys
from collections.abc import Sequence
from typing import Any

from tb_syncfinder.detect import Episode, op_chain
from tb_syncfinder.models import Attribution, Frame
from tb_syncfinder.source import SourcePack
from tb_syncfinder.timeline import ANNOTATION, OP, PYTHON, STEP_RE, HostThread, Timeline

_FRAME_RE = re.compile(r"^(.*)\((\d+)\): (.*)$")
_BUILTIN_RE = re.compile(r"^<built-in (?:method|function) ([^ >]*)")
_MODULE_PREFIX = "nn.Module: "
_MODULE_INDEX_RE = re.compile(r"_\d+$")

# Libraries whose files show up with paths shortened to the package (relative to
# site-packages) in modern traces; anything under them is library code.
_LIBRARY_PACKAGES = frozenset(
    {
        "torch",
        "torchvision",
        "torchaudio",
        "torchtext",
        "functorch",
        "triton",
        "numpy",
        "transformers",
        "accelerate",
        "lightning",
        "pytorch_lightning",
        "lightning_fabric",
        "deepspeed",
        "fairscale",
        "apex",
        "timm",
        "tqdm",
        "torch_npu",
        "typing_extensions",
    }
)
_STDLIB = frozenset(getattr(sys, "stdlib_module_names", ())) - {"__main__"}
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


def is_user_file(path: str, packs: Sequence[SourcePack] = ()) -> bool:
    """True for the user's own code; False for torch, site-packages, built-ins, stdlib.
    Files shipped in ``packs`` (the demo's workloads) count as user code even installed."""
    if not path or path.startswith("<"):
        return False  # <built-in ...>, <frozen importlib._bootstrap>, <string>
    norm = path.replace("\\", "/")
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
    return top not in _LIBRARY_PACKAGES and top not in _STDLIB


def parse_frame(name: str, packs: Sequence[SourcePack] = ()) -> Frame | None:
    """A stack frame from a python_function name or a legacy ``Call stack`` entry."""
    name = name.strip()
    if not name or name.startswith(_MODULE_PREFIX):
        return None
    match = _FRAME_RE.match(name)
    if match:
        path = match.group(1)
        return Frame(file=path, line=int(match.group(2)), func=match.group(3),
                     user=is_user_file(path, packs))
    builtin = _BUILTIN_RE.match(name)
    if builtin:
        return Frame(file="<built-in>", line=None, func=builtin.group(1) or name, user=False)
    return Frame(file=name, line=None, func=name, user=False)


def parse_call_stack(text: str, packs: Sequence[SourcePack] = ()) -> list[Frame]:
    """Legacy ``Call stack`` argument: ``a.py(50): f;b.py(112): g``, innermost first."""
    frames = []
    for part in re.split(r";\r?\n?", text):
        frame = parse_frame(part, packs)
        if frame is not None:
            frames.append(frame)
    return frames


def module_name(python_function_name: str) -> str:
    """``nn.Module: Linear_0`` -> ``Linear``."""
    return _MODULE_INDEX_RE.sub("", python_function_name[len(_MODULE_PREFIX):].strip())


def _python_nodes(thread: HostThread, anchor: int) -> list[int]:
    """Python frame nodes of the stack at ``anchor``, innermost first.

    Time nesting finds the innermost frame; from there the ``Python parent id`` links are
    followed (they are what the profiler recorded); when they are missing or break early,
    the frames found by time nesting are used.
    """
    by_time = [i for i in thread.ancestors(anchor) if thread.kinds[i] == PYTHON]
    if not by_time or not thread.python_by_id:
        return by_time
    first_args = thread.nodes[by_time[0]].args
    if first_args is None or first_args.python_id is None:
        return by_time
    chain = []
    index: int | None = by_time[0]
    seen = set()
    missing_parent = False
    while index is not None and index not in seen:
        seen.add(index)
        chain.append(index)
        args = thread.nodes[index].args
        parent_id = args.python_parent_id if args is not None else None
        index = thread.python_by_id.get(parent_id) if parent_id is not None else None
        missing_parent = parent_id is not None and index is None
    # Python frames' durations are not always nested properly (record_function's enter
    # frame can span the whole block), so the recorded parent links win when they exist.
    if missing_parent:
        # The recorded parent is not in the trace (a dropped event): go on with the frames
        # that enclose the last linked one in time.
        kinds = thread.kinds
        chain.extend(i for i in thread.ancestors(chain[-1])[1:]
                     if kinds[i] == PYTHON and i not in seen)
    return chain


def stack_of(thread: HostThread, anchor: int, op_nodes: list[int],
             packs: Sequence[SourcePack] = ()) -> tuple[list[Frame], list[str], bool, Any]:
    """(stack innermost first, module path outer first, stack has call lines, invocation).

    ``invocation`` identifies the call of the innermost user function (its python_function
    node) so that several syncs inside one call can be matched to several source lines.
    """
    frames: list[Frame] = []
    modules: list[str] = []
    invocation: Any = None
    for index in _python_nodes(thread, anchor):
        name = thread.nodes[index].name
        if name.startswith(_MODULE_PREFIX):
            modules.append(module_name(name))
            continue
        frame = parse_frame(name, packs)
        if frame is None:
            continue
        if invocation is None and frame.user:
            invocation = (thread.pid, thread.tid, index)
        frames.append(frame)
    modules.reverse()
    if frames:
        return frames, modules, False, invocation
    # Legacy traces: the stack is an argument of the operators, innermost op first.
    for index in reversed(op_nodes):
        args = thread.nodes[index].args
        if args is not None and args.call_stack:
            frames = parse_call_stack(args.call_stack, packs)
            if frames:
                return frames, modules, True, (thread.pid, thread.tid, index)
    return [], modules, False, None


def called_name(stack: list[Frame]) -> str | None:
    """What the innermost user frame called: the frame just inside it (a built-in's name,
    ``item``, ``nonzero``, or a library function's name, ``cross_entropy``)."""
    for i, frame in enumerate(stack):
        if frame.user:
            return stack[i - 1].func if i > 0 else None
    return None


def attribute(tl: Timeline, episode: Episode,
              packs: Sequence[SourcePack] = ()) -> Attribution:
    """Where the episode came from: operators, step, annotations, module, stack, the call the
    host waited in, the device and bytes its calls worked on."""
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
    stack, modules, call_lines, invocation = stack_of(thread, anchor, op_nodes, packs)
    step = tl.step_at(episode.ts)
    calls = episode.calls
    if calls:
        apis = [c.event.name for c in calls]
        # The call the host waited in: the longest one (for .item(), the stream sync).
        waited = max(calls, key=lambda c: c.event.dur)
        api = waited.event.name
        device_id = None
        copied = 0
        for call in calls:
            for d in call.device_events:
                if device_id is None:
                    device_id = tl.device_of_event(d)
                if d.cat != "cuda_sync" and d.args is not None and call.reason != "sync":
                    value = d.args.bytes
                    if isinstance(value, (int, float)):
                        copied += int(value)
        nbytes = copied or None
    else:
        api = chain[-1] if chain else nodes[anchor].name
        apis = [api]
        device_id = None
        nbytes = None
    return Attribution(
        api=api,
        apis=apis,
        op_chain=chain,
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
    )


__all__ = [
    "Attribution",
    "attribute",
    "called_name",
    "is_user_file",
    "module_name",
    "parse_call_stack",
    "parse_frame",
    "OP",
]
