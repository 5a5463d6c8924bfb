"""Plain data passed between the pipeline's stages, and the JSON report schema.

Stage records (built once each, never filled in later): ``Attribution`` (attribute ->
source, cost), ``Source`` (source), ``SyncCost`` (cost); the engine then builds each
``Sync`` from them in one go. ``TraceResult`` is what one trace's analysis returns (what the
plugin caches); ``RunsReport`` what the job-level stages make of several.

The report schema (``tb_syncfinder.report/1``) is a contract read by the plugin, the
dashboard, the CLI and other tools: fields may be added, never renamed or dropped.
All times are microseconds (``*_us``), relative to nothing: ``ts_us`` is the trace's own
clock, as Kineto wrote it.

The records are ``msgspec.Struct`` classes rather than dataclasses: defining a dataclass
compiles its generated methods at import, which cost every ``tb-syncfinder report`` 33 ms
of start-up for these 24 classes (issue 14); a Struct is defined in C. Copy one with
``msgspec.structs.replace``, turn one into builtins with ``msgspec.to_builtins``.
"""

from __future__ import annotations

import gc
import os
import re
from collections.abc import Collection, Iterable
from typing import Any, Optional

import msgspec
from msgspec import field

SCHEMA = "tb_syncfinder.report/1"
# How site keys are made (the report's ``site_keys``): 2 since a site without a source line
# is ``op:kind`` (before: ``op:api``, unlike syncs together) and a printed tensor is one
# ``print(tensor)`` site. Reports without it are older; compare says so instead of calling
# their merged sites fixed or new.
# 3 since 2026-11-28: an f-string of a tensor is the print's site, ``x[mask] = t`` of a tensor
# a dynamic shape, ``x.cpu().item()`` one copy, and a Jupyter cell's site is keyed by its
# notebook cell (compare).
# 4 since 2026-11-28, later: a sync inside a library the user's line called is keyed by the
# library's function too (``trainer.train()``'s NaN check and its model's mask check were one
# site, named after the first).
SITE_KEYS = 4
# The Tensor methods a CPU-only trace's latent findings list where they were recorded as
# calls (``catalogue.LATENT_TENSOR_METHODS``; absent from reports before 2026-11-25;
# ``to`` since 2026-11-28, a ``.to('cpu')`` by its line): ``compare`` tells a site of a
# newly listed kind from a regression with it.
LATENT_METHODS = ["cpu", "tolist", "to"]
# Likewise the operators listed as latent since a version (absent from reports before
# 2026-11-28): a CTC loss's copies.
LATENT_OPS = ["aten::ctc_loss"]


# The step times without the profiler a report takes, in ms (the CLI's
# --unprofiled-step-ms, the plugin's ``unprofiled`` route): a microsecond to an hour, so
# that each is echoed as given (``outputs.text.given_ms``).
UNPROFILED_STEP_MIN_MS = 0.001
UNPROFILED_STEP_MAX_MS = 3_600_000.0
# How the reason a trace was not fitted to a step time (``TraceInfo.unprofiled_note``)
# starts when that step is longer than the profiled one or shorter than the device's work
# (a step of another program), or when the trace has no steps.
NOT_FITTED_LONGER_THAN_PROFILED = "not fitted: the step time given is longer than the profiled"
NOT_FITTED_SHORTER_THAN_BUSY = "not fitted: the step time given is shorter than the"
NOT_FITTED_NO_STEPS = "not fitted: the trace has no ProfilerStep markers"
# The notes of a step time ruled out by the trace (or, without step markers, that no step
# of it is): an "at most" bound from that time is none.
STEP_TIME_RULED_OUT = (
    NOT_FITTED_LONGER_THAN_PROFILED,
    NOT_FITTED_SHORTER_THAN_BUSY,
    NOT_FITTED_NO_STEPS,
)
# The note of a trace with no sync to remove, fitted to a step time or not.
NO_SYNC_TO_REMOVE = "no sync to remove: nothing to save, with the profiler or without"
# A step given this much longer than the profiled step is no unprofiled step of it (a host
# jitters from run to run: within it, the profiled figures stand).
UNPROFILED_STEP_ABOVE = 0.25
# Within this share of the step given, a replayed step reproduces it.
UNPROFILED_FIT_TOL = 0.001


class TraceRef(msgspec.Struct, frozen=True):
    """One trace file as the PyTorch Profiler tab names it: run / worker / span."""

    path: str
    run: str
    worker: str
    span: str | None = None


class Frame(msgspec.Struct, omit_defaults=True):
    """One Python frame of a ``with_stack`` stack, innermost first in a list."""

    file: str
    line: int | None
    func: str
    user: bool  # True for the user's own code (not torch, site-packages or built-ins)
    # A Jupyter cell's frame (``KERNEL_CELL``): the notebook cell under the source roots
    # that holds its code, as ``Source.cell``; left out of the JSON for any other frame.
    cell: NotebookCell | None = None


# ipykernel (6 and later) compiles a Jupyter cell under ``<tmp>/ipykernel_<pid>/<n>.py``, ``n``
# the murmur2 hash of the cell's text (ipykernel/compiler.py), and never writes that file.
KERNEL_CELL = re.compile(r"(?:^|/)ipykernel_\d+/(\d+)\.py\Z")

# The frames Python (before 3.12) gives a comprehension: code of the function around it,
# called by syntax at its own line.
COMPREHENSION_FRAMES = frozenset({"<listcomp>", "<setcomp>", "<dictcomp>", "<genexpr>"})

# A source file as an analysis read it: its size and mtime (ns); a notebook's also the
# digest of what it held of the trace's cells and their numbers (``cells_digest``), a
# folder's the notebooks in it, so that a save that changed only outputs is no change
# (``stamp_holds``). As ``file_stamps`` takes one now, a notebook's third part is what it
# holds (``source.stamp_content``), from which the digest of any cells is made.
Stamp = tuple[Any, ...]


class NotebookCell(msgspec.Struct):
    """The Jupyter cell a frame ran in, found in a notebook saved under the source roots.

    ipykernel compiles a cell under ``<tmp>/ipykernel_<pid>/<hash of its text>.py``, a file
    it never writes; a notebook cell with the same text (the same hash) is that code.
    ``notebook``: the ``.ipynb`` file here; ``index``: the cell's place among the notebook's
    cells, from 1; ``execution_count``: its ``In [n]`` as the notebook was saved (None when
    saved without it); ``copies``: how many cells under the roots hold the same text (the
    one named is in the notebook holding the most of the trace's cells, then the nearest
    the trace: ``SourceResolver._notebook_rank``); ``id``: the cell's nbformat id (4.5 and
    later; None before), which stays as cells are added above it."""

    notebook: str
    index: int
    execution_count: int | None = None
    copies: int = 1
    id: str | None = None


class UnrunSync(msgspec.Struct, omit_defaults=True):
    """An explicit synchronize (``torch.cuda.synchronize()``, ``event.synchronize()``) in a
    function a CPU-only trace shows running, which did not run there: read from the source,
    it would make the host wait on a GPU wherever its condition holds (``guard``: the test
    of the innermost ``if`` around it, as Python prints it). Or a copy to the host that runs
    only where its tensor is off the host (Keras' ``if x.device != torch.device("cpu"): x =
    x.cpu()``), which no CPU trace shows either (``source.guarded_copies``)."""

    file: str  # as the trace names it
    line: int
    func: str
    code: str  # the call, as Python prints it (``ast.unparse``: quotes may differ)
    guard: str | None = None
    # Where it runs under more than one ``if``: each one's test whose body holds it,
    # outermost first (``args.synchronize_step``, then ``device.type == 'cuda'``).
    guards: list[str] = field(default_factory=list)
    # In a known library's own code (ultralytics' ``Profile.time``, called by its validator
    # and predictor): the package, and how many times its function ran in the trace (None
    # where it was already running when profiling started: the loop it holds ran on).
    library: str | None = None
    calls: int | None = None


class LibraryCopy(msgspec.Struct, omit_defaults=True):
    """Copies to the host a library made in its own code, seen in a CPU-only trace as its
    recorded ``.cpu()`` / ``.tolist()`` (or a ``.to()`` whose line names the host): not
    listed as latent syncs, since a library copies host tensors as often as not, but
    counted (``TraceInfo.library_copies``): on a GPU each waits where its tensor lives
    there (Stable-Baselines3's ``actions.cpu().numpy()`` of the policy's output, once per
    environment step). By the library's line and the user's line that called it."""

    file: str  # the library's file, as the trace names it
    line: int | None
    func: str
    line_exact: bool
    method: str  # the Tensor method called: "cpu", "tolist" or "to"
    count: int
    user_file: str | None = None  # the user's line that called the library, where one did
    user_line: int | None = None
    user_func: str | None = None
    # False where that line is not certain (the frame's recorded line, as a site's ``*``:
    # a loop's ``prof.step()`` line where its calls of that name could not be told apart).
    user_line_exact: bool = True
    # In how many steps of the trace these copies were made (0: not counted, a report of an
    # earlier version): a metric's ``compute()`` copies all its states in one step.
    steps_with_copies: int = 0

    def place(self) -> tuple[Any, ...]:
        """What copies are counted together by (``tally_library_copies``)."""
        return (
            self.file,
            self.line,
            self.func,
            self.line_exact,
            self.method,
            self.user_file,
            self.user_line,
            self.user_func,
            self.user_line_exact,
        )


# Of a trace's library copies, at most this many places are kept (most first).
LIBRARY_COPIES_KEPT = 20


def tally_library_copies(copies: Iterable[LibraryCopy]) -> list[LibraryCopy]:
    """Library copies counted by place (library line, method, the user's line that called
    it), most first, the first ``LIBRARY_COPIES_KEPT``: a trace's (one record a copy) or
    two windows' of one trace. The records given are not changed."""
    by_place: dict[tuple[Any, ...], LibraryCopy] = {}
    for copy in copies:
        place = copy.place()
        kept = by_place.get(place)
        if kept is None:
            by_place[place] = msgspec.structs.replace(copy)
        else:
            kept.count += copy.count
            # Two windows' steps are their own (each counts the copies of its range).
            kept.steps_with_copies += copy.steps_with_copies
    ordered = sorted(by_place.values(), key=lambda c: (-c.count, c.file, c.line or 0))
    return ordered[:LIBRARY_COPIES_KEPT]


class CallSite(msgspec.Struct, omit_defaults=True):
    """A line of the user's that called the function a sync is in (``Source.called_from``):
    a helper's read (``def to_float(t): return t.item()``) is one site at the helper's
    line, and the calls of it are where the user changes what is read and how often."""

    file: str
    line: int | None
    func: str
    line_exact: bool
    # As on Source: the ``%`` test that exact calling line runs under (a logging helper
    # called under ``if step % log_every == 0:``: its reads are already every N steps);
    # else the test a call further out runs under, on ``periodic_guard_line`` of
    # ``periodic_guard_file`` (the loop's ``progress.display(i)``, two calls out).
    periodic_guard: str | None = None
    periodic_guard_file: str | None = None
    periodic_guard_line: int | None = None


class CallerCount(msgspec.Struct):
    """A site's syncs by the user's line that called the function they are in
    (``Site.callers``)."""

    file: str
    line: int | None
    func: str
    line_exact: bool
    count: int
    periodic_guard: str | None = None  # as on CallSite
    periodic_guard_file: str | None = None
    periodic_guard_line: int | None = None


class RankCount(msgspec.Struct):
    """A site's syncs on one rank of a job (``Site.ranks``): how many, and in how many of
    that rank's profiled steps."""

    rank: int
    count: int
    steps: int  # the rank's profiled steps (of its traces in the run)
    steps_with_syncs: int


class LineCount(msgspec.Struct):
    """A site's syncs at one line of the library code they ran (``Site.library_lines``)."""

    line: int
    count: int


class Source(msgspec.Struct):
    """The user source line a finding points at.

    ``line`` is the exact call line when ``line_exact`` is True; otherwise it falls back
    to ``def_line`` (where the function is defined, which is all a modern trace records).
    ``resolved_path`` is the readable local file after ``--source-root``/``--path-map``.

    Extensions: ``candidates`` lists the lines the call may be on when ``line_exact`` is
    False and the source narrows it down (empty when it does not). ``backward``: the sync
    runs in the backward pass of the forward operation built at ``line``; ``run_by`` is the
    line that ran that backward pass (``loss.backward()``). When the forward operation is not
    in the trace, ``line`` is the line that ran the backward pass and ``run_by`` is None.
    ``library``: the line inside a library (``transformers``, a training framework) that
    made the sync, when the user's line (``line``) called into that library.
    ``recorded_line``: set when the file here no longer has the function at the line the
    trace recorded (the file changed since profiling): that line; ``line`` and
    ``def_line`` are then the function's first line in the file as it is, never exact,
    and ``candidates`` the lines of its calls that may be the sync. When the file has no
    one function of that name to follow (none, or several), ``line`` is the recorded line
    and ``def_line`` None: the file here cannot say more. ``def_line`` is None too where
    the file was not read (``resolved_path`` None): a definition line is only ever read
    from the file.
    """

    file: str
    line: int | None
    def_line: int | None
    func: str
    line_exact: bool
    resolved_path: str | None = None
    candidates: list[int] = field(default_factory=list)
    backward: bool = False
    run_by: Source | None = None
    library: Source | None = None
    recorded_line: int | None = None
    # The only file of that name found, not taken: it lies in another run's folder, beside
    # that run's traces, and may be another version (``SourceResolver._in_another_run``).
    other_run_copy: str | None = None
    # Different files of that name found under the roots, none in the trace's folder or
    # above it, so none taken (0: not so): the line is the recorded one for that reason.
    copies_found: int = 0
    # An exact line inside a loop of its function (a ``for`` or ``while`` body, or a
    # comprehension), so run once per pass: the first line of the innermost such loop.
    loop_line: int | None = None
    # An exact line whose scalar read sets a size on the host (a slice bound, ``range(n)``, a
    # factory's size, an index: ``source.read_as_size``): it cannot stay on the device.
    read_as_size: bool = False
    # An exact line whose reads are each of one element of what a loop over it iterates
    # (``[itos[int(i)] for i in y]``: ``source.reads_elements``): one read per element,
    # where one ``.tolist()`` of the whole would do.
    reads_elements: bool = False
    # An exact line whose reads are each of a value a sampling call drew (``m.sample()
    # .item()``: ``source.reads_sample``): an action or a token the host needs at once.
    reads_sample: bool = False
    # An exact line whose copy to the host a host call takes at once (``torch.save`` of it,
    # a checkpoint; scipy's ``linear_sum_assignment`` given it: ``source.host_use``): the
    # copy cannot be deferred or kept on the device, only made once for many. ``logging``:
    # a line that builds a logger's message (``logger.info(f"{loss}")``), read shown or not.
    host_use: str | None = None
    # An exact line run only where a setting holds (``source.setting_guard``): a parameter
    # or an attribute of ``self`` tested for truth (``if stop_at_eos and finished.all():``,
    # ``if self.collect_stats:``), or compared with a number where it is one
    # (``if freq_penalty > 0:``, ``if self.write_interval > 0:``): that test, as Python prints
    # it. On a library's line, the caller's argument or the object's setting behind it may
    # turn the read off.
    setting_guard: str | None = None
    # An exact line run only when a test with a ``%`` holds (``if step % log_every == 0:``,
    # ``source.periodic_guard``): that test, as Python prints it; its reads are already made every
    # N steps, not every step. An inexact line's, where every candidate runs under that test.
    periodic_guard: str | None = None
    # A Jupyter cell's code (``file`` is ipykernel's name for it): the notebook cell that
    # holds it, ``line`` counted in the cell as IPython counts it ("Cell In[4], line 6") and
    # ``resolved_path`` the notebook.
    cell: NotebookCell | None = None
    # A CPU-only trace's explicit synchronize that did not run (``TraceInfo.unrun_syncs``)
    # and stands before this exact line in the same pass of its loop, with nothing between
    # but calls that queue no device work (``source.sync_before``): on a GPU the host waits
    # there first, and this read waits little until that synchronize goes.
    after_sync: UnrunSync | None = None
    # The user's line that called this line's function, where another user frame did
    # (``Attribution.caller_call``); None where none (a loop's own frame, a script's top).
    called_from: CallSite | None = None
    # Read in torch.compile'd code (``catalogue.COMPILED_READS``): ``"graph_break"``, in the
    # compiled function's own frame where its graph broke (the function resumes after this
    # line in another graph); ``"in_graph"``, inside a compiled graph
    # (``capture_scalar_outputs``, ``capture_dynamic_output_shape_ops``). None: neither, or
    # not told.
    compiled: str | None = None


class TraceInfo(msgspec.Struct):
    """One analysed trace file, or the reason it could not be analysed (``error``)."""

    path: str
    worker: str
    span: str | None
    run: str | None = None
    device: str | None = None  # "cuda", "rocm", "npu", "cpu"
    device_name: str | None = None  # e.g. "NVIDIA A100-SXM4-80GB"
    steps: int = 0
    error: str | None = None
    has_stacks: bool = False
    has_gpu_activity: bool = False
    event_count: int = 0
    torch_version: str | None = None
    repairs: list[str] = field(default_factory=list)  # what reading had to fix or skip
    # False when the trace has no ProfilerStep#N markers: it then counts as one step (0).
    step_markers: bool = True
    # Without ProfilerStep markers: the ``record_function`` name whose spans were counted as
    # the steps (``report --step-annotation``; ``step_markers`` is then True), and, where
    # none was asked for, the name whose top-level spans repeat most (trailing digits as
    # ``*``), with how many: what to ask for (None / 0: no name repeats).
    steps_from_annotation: str | None = None
    # The names (trailing digits as ``*``) whose spans ``steps_from_annotation`` took: more
    # than one when a pattern matched several (each span of each counted as a step).
    step_annotation_names: list[str] = field(default_factory=list)
    step_annotation_hint: str | None = None
    step_annotation_hint_count: int = 0
    # A CPU-only trace: the explicit synchronizes of the functions it shows running, none of
    # which ran there (``UnrunSync``), by file and line.
    unrun_syncs: list[UnrunSync] = field(default_factory=list)
    # A CPU-only trace: the copies to the host libraries made in their own code, not listed
    # (``LibraryCopy``), most first.
    library_copies: list[LibraryCopy] = field(default_factory=list)
    saving_method: str = "bound"  # "replay" when the what-if replay gave its savings
    saving_note: str | None = None  # why the bound was used, or what the replay noted
    # Analysed in this many windows of whole steps (a trace past the memory budget,
    # ``windows``), and what that leaves out; 0 / None: read whole.
    windows: int = 0
    window_note: str | None = None
    # The profiler's own overhead (``cost.host_event_counts``): host events it recorded
    # per profiled step (operators, Python frames, runtime and driver calls, annotations on
    # host threads), what they cost the profiled program (``cost.profiler_overhead_us``:
    # ``PROFILER_US_PER_HOST_EVENT`` each, ``PROFILER_US_PER_PYTHON_EVENT`` per Python frame),
    # and the device's busy time per step (the union of the activity of the device
    # work launched in each step, mean over the steps; None where the saving was not
    # replayed: without device activity, or without the links from work to launches).
    # Without the profiler no fix that keeps the device's work makes a step shorter than
    # that busy time.
    host_events_per_step: float = 0.0
    profiler_overhead_per_step_us: float = 0.0
    device_busy_per_step_us: float | None = None
    # With the step time measured without the profiler (``Options.unprofiled_step_us``,
    # ``report --unprofiled-step-ms``): the scale of the profiler's estimated host overhead
    # whose removal makes the replayed steps take that time (``whatif.unprofiled_savings``;
    # 0: the profiled replay is no slower), and why there is none (None: not asked, or fitted).
    unprofiled_overhead_scale: float | None = None
    unprofiled_note: str | None = None
    # Whether the trace holds runtime / driver / AscendCL calls: a device trace without any
    # (torch_npu's default profiler level) shows no wait for the device at all.
    has_runtime: bool = False
    # Asynchronous host-to-device copies whose records do not say whether the host memory
    # was pinned (ROCm's): from pageable memory each blocks the host, which the trace does
    # not show, so they are counted, with the host's time in them, not judged
    # (``detect.unjudged_uploads``).
    unjudged_uploads: int = 0
    unjudged_upload_host_us: float = 0.0


class Observed(msgspec.Struct, frozen=True):
    """The calls of one kind one invocation made, in time order, as the trace shows them:
    ``"N"`` for each call of that kind (syncing or not), ``"P"`` for each ``prof.step()``;
    ``index`` is the position of the call this query is about; ``key`` names the sequence
    (one per invocation and kind of call), so that it is aligned with the source once."""

    tokens: tuple[str, ...]
    index: int
    key: Any
    # The functions the frame called whose frames hold the profiler's step below them (a
    # loader wrapper's generator or ``__next__``, a callback's hook), each as (name, (file,
    # line of one of its frames)): every call of one is a ``"P"`` of ``tokens``, which the
    # source marks at calls of that name, or at a ``for`` loop's ``__next__`` where the
    # function is an iterator's (a generator, or ``__next__``).
    step_calls: tuple[tuple[str, tuple[str, int | None]], ...] = ()
    # ``tokens`` with the frame's other child frames between them, each ``"A:" + its
    # function's name`` (``callorder.ANCHOR``), in time order: which of two branches calling
    # the same name ran (``scaler.step(opt)`` or ``opt.step()``; a module-level loop's
    # validation block or its logging) shows in the calls around it. Empty for frameless
    # operators.
    calls: tuple[str, ...] = ()


class CallQuery(msgspec.Struct, frozen=True):
    """What source resolution needs to find one call's line in one frame (not reported).

    ``groups``: the names of what the frame called, most specific first (a child frame's
    name, the names of the frames under a wrapper), or one of ``"<truth>"``, ``"<scalar>"``,
    ``"<load>"``, ``"<store>"`` for operators the interpreter ran without a call frame
    (``if t:``, ``float(t)``, ``t[mask]``, ``t[mask] = v``). ``observed``: per group, the
    sequence it belongs to (None when unknown). ``truncated``: the invocation may go on past
    the end of the profile. ``optional_calls``: a call of those names may show no frame
    (the trace records no built-in calls). ``entered``: the frame began after the profiler
    started tracing its thread, so its line is where its function starts (or, for a
    resumed generator, the ``yield`` it resumed at), never a line it was running when
    profiling started; False when the trace does not tell. ``called_before``: for an
    operator the frame ran without a call frame (``if t.any():``), the name of the last
    call the frame made before it (``any``): the call whose result a truth test reads.
    """

    frame: Frame
    groups: tuple[tuple[str, ...], ...]
    observed: tuple[Observed | None, ...] = ()
    truncated: bool = False
    optional_calls: bool = False
    entered: bool = False
    called_before: str | None = None
    # The frame's operators ran in torch.compile's graph of its own code: the calls are
    # matched by their names alone (the graph's order is not the source's).
    in_compiled_graph: bool = False
    # The frame is torch.compile's frame of a function, and the call ran in it at the graph
    # break of this line: the frame called the function resuming after it next.
    graph_break: int | None = None


class Attribution(msgspec.Struct):
    """Where one sync came from (the attribute stage's output; not part of the report)."""

    api: str  # the call the host waited in (the longest blocking call)
    apis: list[str]  # every blocking call of the episode, in order
    op_chain: list[str]  # operators enclosing the sync, outermost first
    step: int | None  # N of ProfilerStep#N
    thread: int | str
    ts_us: float
    end_us: float
    annotations: list[str]  # record_function path, outer first
    module: str | None  # nn.Module path, outer.inner
    stack: list[Frame]  # innermost first
    device_id: int | None  # the device its calls worked on, if any did
    bytes: int | None  # bytes copied by its calls
    # For source resolution: the frames carry call lines already (legacy Call stack); the
    # identity of the innermost user function's invocation (several syncs in one call map
    # to several lines); and what that frame called (a built-in's name, e.g. "item").
    call_lines: bool = False
    invocation: Any = None
    called: str | None = None
    # What the trace says about each call line to find (modern python_function stacks):
    # the user's call, the library's call under it, and for a sync in a backward pass the
    # forward operation's call and the call that ran the backward pass.
    user_call: CallQuery | None = None
    library_call: CallQuery | None = None
    # The call of the user's function (the innermost user frame) by the next user frame
    # out, where there is one: the line that called the helper the sync is in.
    caller_call: CallQuery | None = None
    # The calls by the user frames further out, innermost first, up to the frame that
    # steps the profiler (the training loop's): where the caller's line runs under no
    # ``%`` test, one of theirs may (ProgressMeter's ``display`` called under ``if i %
    # print_freq == 0:``, two calls above ``AverageMeter.__str__``).
    outer_calls: list[CallQuery] = field(default_factory=list)
    # The user's frame steps the profiler itself (a training loop's function): the lines
    # that called it are outside the steps, and a ``%`` test there is about epochs.
    steps_own_frame: bool = False
    backward: bool = False
    forward_op: str | None = None
    forward_stack: list[Frame] = field(default_factory=list)
    forward_call: CallQuery | None = None
    run_by_call: CallQuery | None = None
    # The forward was an indexed assignment of a Python number (``x[mask] = 0.5``): on CUDA
    # it and its backward fill through the mask with a host number, reading nothing.
    forward_assigns_number: bool = False
    # The library operator (``catalogue.LIBRARY_SETUP_OPS``, the chain's innermost such)
    # whose call set its library up with the sync inside: cuBLAS's or cuDNN's first call on
    # the thread in the trace, where the sync made a set-up call
    # (``catalogue.SETUP_CALLS``), or a cuFFT transform that made a plan (device copies
    # without a recorded call inside it), where the sync allocated; None otherwise.
    first_call_of: str | None = None
    profiler_overhead: bool = False  # issued by the profiler's own code (torch/profiler)


class SyncCost(msgspec.Struct):
    """What one sync cost (the cost stage's output; not part of the report)."""

    host_wait_us: float
    gpu_idle_after_us: float
    device_id: int | None  # the device charged: the sync's own, else the busiest one


class Sync(msgspec.Struct):
    """One host-device synchronization: all blocking calls of one operator invocation
    (or one standalone API call outside any operator)."""

    kind: str  # a catalogue.KIND_NAMES value
    api: str  # the call the host waited in: cudaStreamSynchronize, cudaMemcpyAsync...
    apis: list[str]  # every blocking call grouped into this finding, in order
    op: str | None  # outermost operator, e.g. aten::item; None for a bare API call
    trigger_op: str | None  # innermost operator, e.g. aten::_local_scalar_dense
    step: int | None  # N of ProfilerStep#N
    thread: int | str  # host tid
    ts_us: float  # start of the first blocking call
    host_wait_us: float  # time the host thread spent inside the blocking calls
    gpu_idle_after_us: float  # on that device: from the sync's return to next activity
    annotations: list[str] = field(default_factory=list)  # record_function path, outer first
    module: str | None = None  # nn.Module path, e.g. "Net.fc1" (outer.inner)
    stack: list[Frame] = field(default_factory=list)  # innermost first
    source: Source | None = None
    trace: str = ""  # TraceInfo.path of the file it came from
    # Extensions (allowed: the schema only grows).
    id: str = ""  # stable across reloads: "<first 8 hex of sha1(trace path)>-<n>"
    op_chain: list[str] = field(default_factory=list)  # outermost .. innermost operator
    end_us: float = 0.0  # end of the last blocking call
    device_id: int | None = None
    bytes: int | None = None  # bytes copied, for copies
    latent: bool = False  # True for would-sync-on-GPU findings in CPU-only traces
    site_key: str = ""  # Site.key of the site this sync belongs to
    # For a sync in a backward pass: the forward operation it is the gradient of, and that
    # operation's Python stack (the sync's own thread has none on a GPU).
    forward_op: str | None = None
    forward_stack: list[Frame] = field(default_factory=list)
    # Issued by the profiler itself (prof.step() / profiler stop): listed apart
    # (Report.profiler_overhead), never among the findings.
    profiler_overhead: bool = False
    # An allocator sync inside a warm-up region (catalogue.is_warmup_listed): listed apart
    # (Report.warmup_allocator), never among the findings.
    warmup_allocator: bool = False
    # A communication library's worker thread waiting for its own device copies
    # (catalogue.is_collective_worker_sync): listed apart (Report.collective_worker).
    collective_worker: bool = False
    # Job stage (issue 17): on a rank that was at the time waiting for a late peer, the
    # part of this sync's host wait that was that wait, and the peer ("waiting for rank L").
    waiting_for_rank: int | None = None
    peer_wait_us: float = 0.0
    # What removing this sync alone saves over the trace's profiled steps: the what-if
    # replay's figure (``saving_method`` "replay"), or the upper bound of ``cost.py``
    # (its wait and bubble, "bound") when the trace could not be replayed.
    predicted_saving_us: float = 0.0
    saving_method: str = "bound"
    # A copy whose direction no record of the trace gives (no CUPTI copy record, torch_npu's
    # host side): its kind, device_to_host_copy, is a guess (an upload looks the same).
    copy_direction_guessed: bool = False
    # Inside the first call on its thread in the trace of this library operator, where the
    # sync made a library set-up's call (``catalogue.SETUP_CALLS``): a library (cuBLAS,
    # cuDNN) setting itself up; or inside a cuFFT transform that made a plan; None
    # otherwise (``Attribution.first_call_of``).
    first_call_of: str | None = None
    # A CPU-only trace's latent read right after another listed read on its thread, with no
    # operator between (``cost.reads_right_after``): that read's id. On a GPU the host
    # waits at that one and finds the queue empty here; None otherwise.
    after_read: str | None = None


class ReadLine(msgspec.Struct, omit_defaults=True):
    """The line of the read every one of a site's reads came right after
    (``Site.after_read``)."""

    file: str | None
    line: int | None
    func: str | None
    line_exact: bool = False


class Site(msgspec.Struct):
    """Syncs grouped by source line + operator."""

    key: str  # stable id: "file:line:op"
    file: str | None
    line: int | None
    func: str | None
    kind: str
    ops: list[str]
    count: int
    per_step: float
    host_wait_us: float
    gpu_idle_us: float
    share_of_step: float  # (host_wait + gpu_idle) / total step time, 0..1
    advice: dict[str, Any]  # {"title", "text", "before", "after", "removes"}
    mean_host_wait_us: float = 0.0
    line_exact: bool = False
    def_line: int | None = None
    apis: list[str] = field(default_factory=list)
    steps: list[int] = field(default_factory=list)
    latent: bool = False
    # As on Source: candidate lines (all members' when inexact), backward pass, the line
    # that ran it, the library line.
    candidates: list[int] = field(default_factory=list)
    backward: bool = False
    run_by: Source | None = None
    library: Source | None = None
    # Job stage (issue 17), on runs that are multi-rank jobs (0 / None otherwise): the wait
    # this site causes on the other ranks (summed over ranks and steps), the job's step time
    # it would save; on waiting ranks, the part of its host wait that was a wait for a late
    # peer, that peer ("waiting for rank L"), and its local saving net of that part
    # (host_wait_us + gpu_idle_us - peer_wait_us; None when the run is not a job).
    caused_wait_us: float = 0.0
    job_saving_us: float = 0.0
    job_saving_per_step_us: float = 0.0
    peer_wait_us: float = 0.0
    waiting_for_rank: int | None = None
    waiting_for: str | None = None
    local_saving_us: float | None = None
    # What removing all of this site's syncs together saves over the profiled steps (the
    # replay's figure per trace, the upper bound where a trace was not replayed); the
    # report ranks by it. ``saving_method``: "replay", "bound" or "mixed" (both, from
    # several traces); ``saving_note`` says why the bound was used.
    predicted_saving_us: float = 0.0
    predicted_saving_per_step_us: float = 0.0
    saving_method: str = "bound"
    saving_note: str | None = None
    # As on Source: the line the trace recorded when the file changed since profiling.
    recorded_line: int | None = None
    # What fixing this site saves when every other site is fixed too: saving(all syncs) -
    # saving(all syncs but this site's), the replay's figure added over its traces; None
    # where not replayed so (a trace not replayed, analysed in windows, or the site past
    # ``whatif.WITH_OTHERS_SITES`` / its work budget in one of its traces).
    predicted_saving_with_others_us: float | None = None
    predicted_saving_with_others_per_step_us: float | None = None
    # When its own saving is much smaller than that (below ``cost.FIX_WITH_OWN_SHARE`` of
    # it, which is at least ``cost.FIX_WITH_STEP_SHARE`` of the mean step): the key of the
    # other site whose syncs then wait for the same device work (``whatif.fix_together``;
    # named only where fixing both recovers at least half of what the others add to its
    # own saving; empty otherwise), what fixing both saves, and that in a sentence (also
    # without a partner: that the others wait for the same work).
    fix_with: list[str] = field(default_factory=list)
    fix_with_saving_us: float | None = None
    fix_with_saving_per_step_us: float | None = None
    fix_with_note: str | None = None
    # Its syncs are copies whose direction no record gives (``Sync.copy_direction_guessed``).
    copy_direction_guessed: bool = False
    # Syncs of the site of another kind than ``kind`` (its most frequent), by kind: one line
    # that copies both ways (a helper moving a pipeline's tensors to the device, and its
    # outputs back), whose ``advice`` is the most frequent kind's only.
    other_kinds: dict[str, int] = field(default_factory=dict)
    # Whether the source file of its line was read here (True: for one of its syncs at
    # least; None: no source file, a stackless site): why an inexact line is inexact.
    source_read: bool | None = None
    # As on Source: the file not taken because it lies in another run's folder.
    other_run_copy: str | None = None
    # As on Source: the different files of that name, none taken.
    copies_found: int = 0
    # As on Source: the Jupyter cell of its line.
    cell: NotebookCell | None = None
    # The innermost annotation (``record_function``, ``## name ##``) its syncs ran in, most
    # frequent first, at most 3: what tells apart sites of a trace without Python stacks.
    annotations: list[str] = field(default_factory=list)
    # False when one of its traces' device activity is not read (torch_npu's "Ascend
    # Hardware" rows): ``gpu_idle_us`` is then 0 for want of a record, not measured, and
    # the bound in ``predicted_saving_us`` is the host wait alone, not an upper bound.
    gpu_idle_measured: bool = True
    # As on Summary: what removing this site's syncs saves per step without the profiler
    # (None: not asked, or one of its traces could not be fitted).
    unprofiled_predicted_saving_per_step_us: float | None = None
    # How its syncs fall over the steps: in how many steps (of a trace each) it synced, and
    # the most in one. ``per_step`` is their mean over every step: 3.5 a step may be 7 in
    # every second step (a log every N steps), which these say (0: no step markers).
    steps_with_syncs: int = 0
    max_per_step: int = 0
    # As on Source: the ``%`` test its exact line runs under (already every N steps).
    periodic_guard: str | None = None
    # As on Source: the unrun explicit synchronize before its exact line in each pass (a
    # CPU-only trace's), where every one of its syncs has it.
    after_sync: UnrunSync | None = None
    # Its syncs by the user's line that called its function (``Source.called_from``), most
    # first; empty where no user frame called it. A helper called from several lines
    # (``to_float(loss)``, ``to_float(acc)``) is one site with several callers.
    callers: list[CallerCount] = field(default_factory=list)
    # How many of its latent reads came right after another read with nothing queued
    # between (``Sync.after_read``): on a GPU only the first of such a run waits. Where
    # every one of them did, and after reads of one line, that line (``after_read``).
    after_read_count: int = 0
    after_read: ReadLine | None = None
    # Its syncs by the line of its library code (``library``) that synced, in line order,
    # where they ran two or more lines of it, each exact: one user call (``model.learn()``)
    # runs a library function's several reads, each its own line (``ppo.py`` reads four
    # losses with ``.item()``); ``library`` is the first of them. Empty otherwise.
    library_lines: list[LineCount] = field(default_factory=list)
    # In a run whose traces are the ranks of one job (two or more traced; ``job_ranks`` of
    # them, the ranks traced, which may be fewer than the job's world size):
    # its syncs on each rank that had any, by rank. ``per_step`` is over every rank's steps,
    # so a read on rank 0 alone in each step of a two-rank job is 0.5 a step there; these
    # say it is 1.0 a step on rank 0 and none on rank 1. Empty / 0 otherwise.
    ranks: list[RankCount] = field(default_factory=list)
    job_ranks: int = 0


class StepStats(msgspec.Struct):
    step: int
    step_time_us: float  # the host's ProfilerStep span
    sync_count: int
    host_wait_us: float
    gpu_idle_us: float
    trace: str = ""
    # The device timeline (from the what-if replay; 0 when the trace was not replayed):
    # first start to last end of the device work launched in the step, the longer of host
    # and device span, and what removing every sync saves in this step (the bubble of a
    # step-end sync counts in the next step). ``wall_time_us`` falls back to the host span.
    device_time_us: float = 0.0
    wall_time_us: float = 0.0
    predicted_saving_us: float = 0.0
    replayed_time_us: float = 0.0  # the unmodified replay's step time (fidelity check)


class TraceSavings(msgspec.Struct):
    """The what-if stage's per-trace output (``whatif_stage.trace_savings``): what removing
    the syncs saves, by replay or (``method`` "bound", ``reason`` says why) the bound."""

    method: str = "bound"
    reason: str | None = None
    all_syncs_us: float = 0.0  # every sync of the program removed, over the profiled steps
    sites: dict[str, float] = field(default_factory=dict)  # site key -> saving (us)
    window_us: float = 0.0  # first step start to last step completion (recorded)
    gpu_idle_us: float = 0.0  # device idle inside the window
    gpu_idle_from_syncs_us: float = 0.0  # the part of it that goes away with the syncs
    fidelity_error: float = 0.0  # worst |replayed / recorded - 1| step time over steps
    notes: list[str] = field(default_factory=list)
    # Sites whose figure is the bound although the trace was replayed (a sync past the
    # replay budget, see ``whatif.replay``), with why.
    bound_sites: dict[str, str] = field(default_factory=dict)
    # Host events the profiler recorded in the profiled steps (``cost.host_event_counts``)
    # and the device's busy time in them (None: not replayed).
    host_events: int = 0
    python_events: int = 0  # of those, the Python frames (cheaper each)
    device_busy_us: float | None = None
    # "Fix together" (``whatif.fix_together``, whole traces only): site key -> saving(every
    # sync) - saving(every sync but the site's); sites left out were not replayed so. And a
    # site that saves much less alone than that -> (the site whose syncs then wait for the
    # same device work, what fixing both saves).
    with_others: dict[str, float] = field(default_factory=dict)
    fix_with: dict[str, tuple[str, float]] = field(default_factory=dict)
    # False where the device's work is in the trace but not read (``catalogue.
    # NPU_NOT_REPLAYED``): no bubble after a sync is known, so the bound is the host wait.
    device_idle_read: bool = True
    # ``whatif.unprofiled_savings`` where a step time measured without the profiler was
    # given: what every sync and each site (key) save unprofiled over the profiled steps,
    # as ``all_syncs_us`` and ``sites`` (None: not fitted).
    unprofiled_all_syncs_us: float | None = None
    unprofiled_sites: dict[str, float] = field(default_factory=dict)


class Summary(msgspec.Struct):
    sync_count: int
    host_wait_us: float
    gpu_idle_us: float
    step_time_us: float  # total of the ProfilerStep spans (or the trace span if none)
    step_count: int = 0
    syncs_per_step: float = 0.0
    share_of_step: float = 0.0
    estimated_saving_us: float = 0.0  # per-run estimate of the time the syncs cost
    estimated_step_time_us: float = 0.0  # mean step time with that saving removed
    mean_step_time_us: float = 0.0
    by_kind: dict[str, int] = field(default_factory=dict)
    latent_count: int = 0
    error_count: int = 0
    checked: list[str] = field(default_factory=list)  # what was looked for, for "no syncs"
    # The what-if replay (issue 11). ``estimated_saving_us`` above keeps its meaning (the
    # upper bound); these are the replay's figures, with the bound standing in for traces
    # that could not be replayed (``saving_method`` "bound" or "mixed", ``saving_note``).
    predicted_saving_us: float = 0.0  # all syncs removed, over the profiled steps
    predicted_saving_per_step_us: float = 0.0
    predicted_step_time_us: float = 0.0  # mean wall step time with that saving removed
    saving_method: str = "bound"
    saving_note: str | None = None
    saving_how: str = ""  # one line: how the predicted saving was obtained
    # Step time from the device timeline as well: mean span of each step's device work,
    # and the mean of the longer of host and device span (the step time compare uses).
    mean_device_step_time_us: float = 0.0
    mean_wall_step_time_us: float = 0.0
    gpu_idle_from_syncs_us: float = 0.0  # device idle that goes away with the syncs
    sync_idle_share: float = 0.0  # that idle as a share of the replayed window
    replay_fidelity_error: float = 0.0  # worst per-step error of the unmodified replay
    # The profiler's own overhead, as on ``TraceInfo`` over every trace's profiled steps
    # (``device_busy_per_step_us`` over the replayed traces; None: none was),
    # and, where that overhead is at least ``cost.PROFILER_NOTE_SHARE`` of the mean step,
    # what it means for the predicted saving (a field of its own: not in ``saving_note``).
    host_events_per_step: float = 0.0
    profiler_overhead_per_step_us: float = 0.0
    device_busy_per_step_us: float | None = None
    profiler_note: str | None = None
    # The device busy time per step of the worker whose device is busiest (over its own
    # traces' steps; the mean above where the run has one worker): the ranks of a job step
    # together, so no step of the job is shorter than it. What ``profiler_note`` and
    # ``unprofiled_saving_at_most_per_step_us`` bound the saving by. None: as above.
    busiest_worker_device_busy_per_step_us: float | None = None
    # As on Site: False when a trace of the run has its device activity unread (torch_npu):
    # ``gpu_idle_us`` is 0 for want of a record and the predicted saving is no upper bound.
    gpu_idle_measured: bool = True
    # With the step time measured without the profiler: what removing every sync saves per
    # step in the program running without it (each trace replayed with the profiler's
    # estimated host overhead scaled to reproduce that step, ``TraceInfo.
    # unprofiled_overhead_scale``; per step as ``predicted_saving_per_step_us``, which it
    # equals at a scale of 0). None: not asked, or a trace could not be fitted.
    unprofiled_predicted_saving_per_step_us: float | None = None
    # How many of the traces read have no ProfilerStep markers (``TraceInfo.step_markers``):
    # each counts as one step, so where this is not 0 the figures per step are, in part or
    # all, per trace file (a tool reading the summary alone could not tell).
    traces_without_step_markers: int = 0
    # Where the per-step figures average the steps of several workers that are not ranks
    # of one job (Lightning's training and validation loops written into one folder, or
    # two programs' traces in one run): each worker's steps (``run/worker`` across runs),
    # and one line saying so. Empty / None where the steps are one program's (a single
    # worker, or the ranks of a job, which step together).
    steps_by_worker: dict[str, int] = field(default_factory=dict)
    steps_note: str | None = None


class ProfilerOverhead(msgspec.Struct):
    """The profiler's own synchronizations (``prof.step()`` and profiler stop waiting for the
    device): its cost, not the program's, so kept out of the findings and totals."""

    count: int = 0
    host_wait_us: float = 0.0
    syncs: list[Sync] = field(default_factory=list)


class WarmupAllocator(msgspec.Struct):
    """Allocator syncs inside warm-up regions (user annotations named warm-up): cuDNN's
    benchmark and the caching allocator filling up, expected once, so kept out of the
    findings and totals; listed with the allocator advice in case they recur later."""

    count: int = 0
    host_wait_us: float = 0.0
    gpu_idle_us: float = 0.0
    regions: list[str] = field(default_factory=list)  # the warm-up annotations, first seen first
    advice: dict[str, Any] = field(default_factory=dict)  # the allocator kind's; {} when none
    syncs: list[Sync] = field(default_factory=list)


class CollectiveWorker(msgspec.Struct):
    """Syncs of a communication library's worker thread (gloo's, with CUDA tensors) waiting
    for its own device copies: they block no thread of the program, so they are kept out of
    the findings and totals."""

    count: int = 0
    host_wait_us: float = 0.0
    syncs: list[Sync] = field(default_factory=list)


class Report(msgspec.Struct):
    traces: list[TraceInfo]
    summary: Summary
    syncs: list[Sync]
    sites: list[Site]
    latent: list[Sync]
    steps: list[StepStats] = field(default_factory=list)
    latent_sites: list[Site] = field(default_factory=list)
    profiler_overhead: ProfilerOverhead = field(default_factory=ProfilerOverhead)
    warmup_allocator: WarmupAllocator = field(default_factory=WarmupAllocator)
    collective_worker: CollectiveWorker = field(default_factory=CollectiveWorker)
    # The job stage's view of a multi-rank run (``jobs.JobReport.to_json()``); None otherwise.
    job: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        """The report as the JSON-ready dict of schema ``tb_syncfinder.report/1``.

        msgspec's converter: about 10x faster than ``dataclasses.asdict`` would be,
        which a 1,000-trace job's report (rebuilt as its traces load) needs. The cyclic GC
        is paused meanwhile: the ~10^5 dicts and lists it makes form no cycles, and the
        collections their allocation set off were 4/5 of the time (20,000 syncs: 0.8 s,
        0.2 s without; the plugin's first answer for a run waits for it)."""
        was_enabled = gc.isenabled()
        gc.disable()
        try:
            return self._json()
        finally:
            if was_enabled:
                gc.enable()

    def _json(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "traces": _plain(self.traces),
            "summary": _plain(self.summary),
            "syncs": _plain(self.syncs),
            "sites": _plain(self.sites),
            "latent": _plain(self.latent),
            "steps": _plain(self.steps),
            "latent_sites": _plain(self.latent_sites),
            "profiler_overhead": _plain(self.profiler_overhead),
            "warmup_allocator": _plain(self.warmup_allocator),
            "collective_worker": _plain(self.collective_worker),
            "job": self.job,
            "site_keys": SITE_KEYS,
            "latent_methods": LATENT_METHODS,
            "latent_ops": LATENT_OPS,
        }

    def to_text(self, top: int | None = None, width: int | None = 100) -> str:
        """The report as ``tb-syncfinder report`` prints it (no colours): ``top`` sites at
        most (None: all), ``width`` columns (None: the terminal's)."""
        from tb_syncfinder.outputs.text import render_report

        return render_report(self, top=top, width=width, python=True)

    def __str__(self) -> str:
        # print(report) is the text (the ten costliest sites), not thousands of fields.
        return self.to_text(top=10)

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        # IPython and Jupyter show a report as its text, not as thousands of fields.
        printer.text("Report(...)" if cycle else self.to_text(top=10))


def _plain(records: Any) -> Any:
    """Records (or lists of them) as JSON-ready builtins."""
    return msgspec.to_builtins(records)


class TraceResult(msgspec.Struct):
    """One analysed trace: what the plugin caches. Holds no raw events (picklable)."""

    info: TraceInfo
    syncs: list[Sync] = field(default_factory=list)
    latent: list[Sync] = field(default_factory=list)
    steps: list[StepStats] = field(default_factory=list)
    contexts: dict[str, dict[str, Any]] = field(default_factory=dict)
    profiler_overhead: list[Sync] = field(default_factory=list)  # not in syncs or steps
    warmup_allocator: list[Sync] = field(default_factory=list)  # not in syncs or steps
    collective_worker: list[Sync] = field(default_factory=list)  # not in syncs or steps
    # What the job stage needs of this trace (rank, collectives, host waits); None for a
    # trace without distributedInfo.
    rank: RankTrace | None = None
    savings: TraceSavings = field(default_factory=TraceSavings)
    # Each source file its lines were resolved in, as it was read (``Stamp``): the plugin
    # and the summaries compare them with the files now to see edits since.
    source_stamps: dict[str, Stamp] = field(default_factory=dict)
    # Paths where a source file its lines did not find would have been found (under a root
    # at its recorded path or by its name, beside the trace), absent then: one that appears
    # (the user copied the file in) makes a cached result stale, as an edit does.
    source_probes: list[str] = field(default_factory=list)


class RunsReport(msgspec.Struct):
    """The job-level result over several traces: every selected trace's report merged, and
    each run's own (per-step figures over that run's steps only), in listing order."""

    report: Report
    runs: dict[str, Report]
    results: list[TraceResult] = field(default_factory=list)


# -- the job stage's input (collectives.extract_rank builds it; ranks.py reads it) ------

# Collectives after which every rank leaves at nearly the same instant: their ends estimate
# the clock offsets between hosts. Broadcast (the root may finish first), point-to-point and
# uneven all-to-all are not such collectives.
BLOCKING_COLLECTIVES = frozenset(
    {
        "allreduce",
        "allgather",
        "reducescatter",
        "barrier",
        "allreducecoalesced",
        "allgathercoalesced",
        "reducescattercoalesced",
    }
)
# Sizes are the same on every rank only for these; all-to-all(v), gather and scatter may
# differ per rank legitimately, so only their name and dtype are compared.
SYMMETRIC_COLLECTIVES = BLOCKING_COLLECTIVES | {"broadcast", "reduce"}


class ProcessGroupInfo(msgspec.Struct, frozen=True):
    """One process group as ``distributedInfo.pg_config`` (or a collective) names it."""

    name: str  # pg_name ("0" is the default group), or str(Process Group ID) before 2024
    ranks: Optional[tuple[int, ...]] = None  # global ranks, None when not recorded
    desc: Optional[str] = None  # "default_pg", "undefined"...
    size: Optional[int] = None
    backend_config: Optional[str] = None


class DistributedInfo(msgspec.Struct, frozen=True):
    """``distributedInfo`` of one trace."""

    rank: Optional[int]
    world_size: Optional[int]
    backend: Optional[str] = None
    groups: tuple[ProcessGroupInfo, ...] = ()  # pg_config; empty before 2024
    nccl_version: Optional[str] = None


class Collective(msgspec.Struct):
    """One collective as one rank saw it. Times are this trace's ``ts`` (microseconds, on
    its own clock: see ``RankTrace.base_time_ns``); the job stage converts them."""

    index: int  # position among this rank's collectives, in issue order
    name: str  # canonical_collective(...)
    group: str  # process group name ("" = not recorded)
    group_ranks: Optional[tuple[int, ...]] = None
    in_nelems: Optional[int] = None
    out_nelems: Optional[int] = None
    dtype: Optional[str] = None
    host_op: Optional[str] = None  # outermost host op: c10d::allreduce_, record_param_comms
    enqueue_ts: Optional[float] = None  # host op start / end (None: before the window)
    enqueue_end: Optional[float] = None
    exec_ts: Optional[float] = None  # kernel (or gloo op) start / end (None: not recorded)
    exec_end: Optional[float] = None
    exec_kind: Optional[str] = None  # "kernel" | "cpu_op" | None
    exec_name: Optional[str] = None  # kernel or gloo op name
    thread: Any = None  # host tid of the enqueue
    step: Optional[int] = None  # ProfilerStep number at the enqueue (or the execution)
    seq: Optional[int] = None  # ``Seq`` argument (2026+); recorded, not trusted for matching
    # A collective gloo runs on its worker thread, in a trace with the calling thread's
    # Python frames (with_stack): how long that thread was blocked in ``Work.wait`` while
    # the collective ran (0: its result was waited for after it was done, or never), and
    # when the thread was free of it (the end of that wait, else of the enqueue). None:
    # not known (no Python frames, or a collective on the device); the job stage then
    # takes the time from a rank's arrival to the last arrival as its wait, as a blocking
    # collective's.
    blocked_us: Optional[float] = None
    released_ts: Optional[float] = None
    # The trace's what-if replay can re-time it (``whatif.retimed_collectives``): where a
    # wait's replayed figures name no such collective, the wait did not delay it.
    retimed: bool = False

    @property
    def arrival_ts(self) -> Optional[float]:
        """When this rank reached the collective: the kernel (or gloo op) start, else the
        host enqueue (a kernel not in the trace)."""
        return self.exec_ts if self.exec_ts is not None else self.enqueue_ts

    @property
    def arrival_source(self) -> str:
        if self.exec_ts is not None:
            return self.exec_kind or "kernel"
        return "enqueue"

    @property
    def exit_ts(self) -> Optional[float]:
        """When this rank left it: the execution's end, else the host op's end."""
        return self.exec_end if self.exec_end is not None else self.enqueue_end

    def signature(self) -> tuple[Any, ...]:
        """What must agree between the ranks' k-th collective of a group."""
        if self.name in SYMMETRIC_COLLECTIVES:
            return (self.name, self.dtype, self.in_nelems, self.out_nelems)
        return (self.name, self.dtype)

    def describe(self) -> str:
        parts = [self.name]
        if self.in_nelems is not None:
            parts.append(f"{self.in_nelems} elems")
        if self.dtype:
            parts.append(self.dtype)
        return " ".join(parts)


BLOCKING_CALL = "blocking_call"  # HostWait.kind of a blocking Python call (not a sync)


class HostWait(msgspec.Struct):
    """A stretch of host time one rank spent blocked, with the line that blocked it: a
    host-device sync found by the engine, or a blocking Python call (``time.sleep``, a lock,
    a queue) found here. What the cause fallback may hold responsible for lateness."""

    id: str  # Sync.id for syncs; "<trace prefix>-w<n>" for blocking calls
    kind: str  # the sync's kind (scalar_readback...) or "blocking_call"
    site_key: str  # "file:line:op", as aggregate.site_key
    ts: float  # this trace's clock
    end: float
    wait_us: float  # time blocked (for a sync: the blocking calls' total, packed at the end)
    op: Optional[str] = None  # aten::item / time.sleep
    file: Optional[str] = None
    line: Optional[int] = None
    func: Optional[str] = None
    line_exact: bool = False
    step: Optional[int] = None
    thread: Any = None
    is_sync: bool = True
    latent: bool = False  # a CPU-only trace's would-sync (no wait of its own)


class StepSpan(msgspec.Struct, frozen=True):
    number: int
    ts: float
    end: float

    @property
    def duration(self) -> float:
        return self.end - self.ts


class RankTrace(msgspec.Struct):
    """Everything the job stage needs from one trace (no raw events: picklable, small)."""

    path: str
    worker: str
    dist: Optional[DistributedInfo]
    base_time_ns: Optional[int]  # baseTimeNanoseconds; None: ts are absolute unix us
    host_name: Optional[str]
    span: tuple[float, float]  # first / last instant of the trace (its clock)
    collectives: list[Collective] = field(default_factory=list)
    steps: list[StepSpan] = field(default_factory=list)
    waits: list[HostWait] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # what could not be read, and why
    # The what-if replay's answer for the job stage (``whatif.collective_earlier``): per
    # Sync.id, per Collective.index, how much earlier this rank's collective kernel would
    # start without that sync. Empty without a replay or without collective kernels.
    replayed_earlier: dict[str, dict[int, float]] = field(default_factory=dict)

    @property
    def rank(self) -> Optional[int]:
        return self.dist.rank if self.dist is not None else None

    @property
    def base_us(self) -> float:
        """Add to ``ts`` for unix microseconds (0 for pre-2024 absolute timestamps)."""
        return (self.base_time_ns or 0) / 1000.0


def _every_sync(result: Any) -> list[Any]:
    """A result's syncs of every list (found, latent, and those listed apart)."""
    return [
        *getattr(result, "syncs", ()),
        *getattr(result, "latent", ()),
        *getattr(result, "profiler_overhead", ()),
        *getattr(result, "warmup_allocator", ()),
        *getattr(result, "collective_worker", ()),
    ]


def source_files_of(result: Any) -> list[str]:
    """The local source files a result's lines were resolved in (its syncs' sources, the
    callers and library frames they name)."""
    files: set[str] = set()
    for sync in _every_sync(result):
        pending = [sync.source]
        while pending:
            source = pending.pop()
            if source is None:
                continue
            if source.resolved_path:
                files.add(source.resolved_path)
            pending += [source.run_by, source.library]
    return sorted(files)


def unread_source_files(result: Any) -> list[str]:
    """The recorded paths of the user files a result's lines were not found in (its syncs'
    sources and the lines that ran them; not libraries')."""
    files: set[str] = set()
    for sync in _every_sync(result):
        for source in (sync.source, sync.source.run_by if sync.source else None):
            if source is not None and source.file and not source.resolved_path:
                if not source.file.startswith("<"):
                    files.add(source.file)
    return sorted(files)


def file_stamps(
    files: Iterable[str],
    notebooks: Collection[str] = (),
    read: dict[str, Stamp] | None = None,
) -> dict[str, Stamp | None]:
    """Size and mtime (ns) of each file as it is now (None: gone); each of ``notebooks``
    with the digest of its code cells too, read again only where ``read`` (what the caller
    keeps of the notebooks read before, filled here) has it at another size or mtime."""
    stamps: dict[str, Stamp | None] = {}
    notebooks = set(notebooks)
    for path in files:
        try:
            stat = os.stat(path)
        except OSError:
            stamps[path] = None
            continue
        stamp: Stamp = (stat.st_size, stat.st_mtime_ns)
        if path in notebooks:
            known = read.get(path) if read is not None else None
            if known is not None and known[:2] == stamp:
                stamp = known
            else:
                from tb_syncfinder.source import stamp_content

                stamp = (*stamp, stamp_content(path))
                if read is not None:
                    read[path] = stamp
        stamps[path] = stamp
    return stamps


def cells_digest(held: Any, numbers: Iterable[int]) -> str | None:
    """The digest of what a notebook holds (``source._held``: each code cell's number,
    place, execution count and id) of the cells ``numbers``, but their execution counts: a
    result read from the notebook for a trace of those cells is stale once this changes
    (one of them edited, moved, or saved for the first time), and not for another cell's
    change, nor for one of them run again (a later run is no run the trace recorded)."""
    if held is None:
        return None
    wanted = set(numbers)
    # Not the execution count: running the profiling cell again (In[5] -> In[9]) would have
    # every earlier trace of it analysed again, and named by a run it was not recorded in.
    picked = [[cell[0], cell[1], cell[3]] for cell in held if cell[0] in wanted]
    return _sha1(msgspec.json.encode(picked))


def stamp_holds(recorded: Stamp | None, now: Stamp | None) -> bool:
    """Whether a file is as a result read it: of the same size and mtime, or a notebook
    holding its trace's cells as it did (a save of new outputs, or a change to another
    cell, changes nothing: ``cells_digest``), or a folder holding the same notebooks."""
    if recorded is None or now is None:
        return recorded is None and now is None
    if tuple(recorded[:2]) == tuple(now[:2]):
        return True
    if len(recorded) > 3:  # a notebook's: (size, mtime, digest of its cells, their numbers)
        return len(now) > 2 and recorded[2] == cells_digest(now[2], recorded[3])
    return len(recorded) > 2 and len(now) > 2 and recorded[2] == now[2]


def stamps_hold(recorded: dict[str, Any], read: dict[str, Stamp] | None = None) -> bool:
    """Whether every file of ``recorded`` (path -> ``Stamp`` or None: absent then) is as it
    was; a notebook or folder is read only where its size or mtime changed (``read``: as
    in ``file_stamps``, what the caller keeps of those read before)."""
    now = file_stamps(recorded)
    moved = [path for path, stamp in recorded.items() if not stamp_holds(stamp, now[path])]
    notebooks = [path for path in moved if recorded[path] is not None and len(recorded[path]) > 2]
    if len(notebooks) < len(moved):
        return False
    now.update(file_stamps(notebooks, notebooks, read))
    return all(stamp_holds(recorded[path], now[path]) for path in notebooks)


def result_stamps(result: Any) -> dict[str, Stamp | None]:
    """Size and mtime of each source file a result's lines came from, as the analysis read
    it (``TraceResult.source_stamps``), else as it is now (None: gone). Taken at read time,
    an edit made while the trace was analysed still differs from the file afterwards."""
    recorded = getattr(result, "source_stamps", None) or {}
    files = source_files_of(result)
    stamps = file_stamps([f for f in files if f not in recorded])
    # Every file recorded, not only those the lines came from: the notebooks looked in for
    # a Jupyter cell not found (saved since, one may hold it).
    stamps.update({f: tuple(stamp) for f, stamp in recorded.items()})
    # Absent at analysis (None), as a file gone is: one that appears is a change.
    for probe in getattr(result, "source_probes", None) or ():
        stamps.setdefault(probe, None)
    return dict(sorted(stamps.items()))


def sync_id_prefix(trace_path: str) -> str:
    """The first 8 hex digits of the SHA-1 of a trace's path: every sync id of the trace
    starts with it, so that ids are unique across a run's traces."""
    return _sha1(trace_path.encode("utf-8", "surrogateescape"))[:8]


def _sha1(data: bytes) -> str:
    """The SHA-1 of ``data`` in hex."""
    try:
        # hashlib's import loads OpenSSL (~3 ms of every report's start-up); the builtin
        # module gives the same digest. Builds without it (FIPS) fall back to hashlib.
        from _sha1 import sha1
    except ImportError:
        from hashlib import sha1
    return sha1(data).hexdigest()
