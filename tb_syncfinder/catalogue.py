"""Everything the Sync Advisor knows about host-device synchronization, in one place.

* **Kinds**: one ``SyncKind`` record per finding kind (label, SARIF texts, badge colours,
  the fix and what it removes), in the order reports list them.
* **Backends**: per runtime (CUDA runtime and driver, HIP, Ascend CL), the API names that
  always block the host, synchronous and asynchronous copies, allocator calls and calls that
  never block, plus how its calls are named (to tell the device kind of a trace).
* **Operators**: which ``aten::`` operators read a scalar back or have data-dependent
  output shapes, which copy, and which would sync on a GPU when seen in a CPU-only trace.
* **Source resolution**: the Python callee names to look for in the user's source, per
  operator and for bare API calls.
* **Advice refinements**: a more specific fix when a given operator is in the chain, and
  for blocking host-to-device copies by what was copied (chain and size).

Detection (``detect``), the timeline's backend guess (``timeline``), source resolution
(``source``), advice (``aggregate``), the outputs and the dashboard (through the plugin's
``catalogue`` route) all read these tables; none keeps its own copy. The recipe for a new
pattern or kind is in docs/DESIGN.md ("How to add a sync pattern"), and
tests/test_catalogue.py fails when a kind lacks any part.

Sources for the patterns: ``../shared/KINETO_NOTES.md`` (checked on real traces).
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import msgspec

# --- kinds ----------------------------------------------------------------------------

SCALAR_READBACK = "scalar_readback"
DYNAMIC_SHAPE = "dynamic_shape"
DEVICE_TO_HOST_COPY = "device_to_host_copy"
BLOCKING_HOST_TO_DEVICE = "blocking_host_to_device"
EXPLICIT_SYNC = "explicit_sync"
COLLECTIVE_WAIT = "collective_wait"
ALLOCATOR_SYNC = "allocator_sync"


class Advice(msgspec.Struct, frozen=True, omit_defaults=True):
    """A concrete fix: a title, why and how, and code before / after."""

    title: str
    text: str
    before: str
    after: str
    # What applying it removes, where that is not the kind's (``SyncKind.removes``).
    removes: str = ""


class SyncKind(msgspec.Struct, frozen=True):
    """One kind of finding, with everything every output needs to show it."""

    name: str  # the schema value of Sync.kind / Site.kind
    label: str  # short human name (dashboard badge, terminal)
    summary: str  # one line: SARIF rule shortDescription
    description: str  # what happens and why it costs: SARIF fullDescription, tooltips
    colour: str  # badge background on the light theme (#rrggbb)
    colour_dark: str  # badge background on the dark theme
    advice: Advice  # the fix for the kind; refined per operator by OP_ADVICE
    removes: str  # what applying the fix removes

    def to_json(self) -> dict[str, Any]:
        return msgspec.to_builtins(self)


_WAIT_AND_IDLE = "the host wait and the GPU idle time after it"

KINDS: tuple[SyncKind, ...] = (
    SyncKind(
        name=SCALAR_READBACK,
        label="scalar readback",
        summary="Scalar read back to the host",
        description=(
            "A GPU value is read on the host (.item(), bool(tensor), tolist, print): the host "
            "waits for every queued kernel to finish, then the GPU idles until new work "
            "arrives."
        ),
        colour="#c63f12",  # 5.1:1 under white badge text (#d84315 was 4.44:1)
        colour_dark="#ff8a65",
        advice=Advice(
            title="Keep the value on the device; read it every N steps",
            text=(
                "`.item()`, `float(t)`, `.tolist()`, `print(t)` and `if t:` copy a GPU value to "
                "the host and wait for every queued kernel first. Accumulate on the device and "
                "read the value only when you log (e.g. every 100 steps). Where a number is "
                "needed after the loop (a value returned to a JSON log or a scheduler), "
                "convert it there once with `.item()`."
            ),
            before=(
                "for step, (x, y) in enumerate(loader):\n"
                "    loss = criterion(model(x), y)\n"
                "    loss.backward(); opt.step()\n"
                "    total += loss.item()          # waits for the GPU every step\n"
            ),
            after=(
                "total = torch.zeros((), device=device)\n"
                "for step, (x, y) in enumerate(loader):\n"
                "    loss = criterion(model(x), y)\n"
                "    loss.backward(); opt.step()\n"
                "    total += loss.detach()        # stays on the GPU\n"
                "    if step % 100 == 0:\n"
                "        print(total.item() / (step + 1))  # one sync per 100 steps\n"
            ),
        ),
        removes=_WAIT_AND_IDLE,
    ),
    SyncKind(
        name=DYNAMIC_SHAPE,
        label="dynamic shape",
        summary="Data-dependent output shape",
        description=(
            "nonzero, unique, boolean masks, masked_select, repeat_interleave or one-argument "
            "where need the result size on the host before they can allocate their output, "
            "so the host waits for the GPU."
        ),
        colour="#6a1b9a",
        colour_dark="#ce93d8",
        advice=Advice(
            title="Avoid data-dependent output shapes",
            text=(
                "Operators whose output size depends on tensor values (nonzero, unique, "
                "masked_select, boolean-mask indexing) must copy the size to the host before "
                "allocating. Use fixed-shape alternatives: `torch.where(mask, x, 0)` or "
                "`masked_fill` (not `x * mask`: a NaN or inf at a masked position survives a "
                "multiply), `ignore_index`, `scatter_add_` into a fixed-size tensor. The "
                "result keeps every row, so divide by the mask's count, not the length."
            ),
            before="selected = logits[mask]            # (K, C)\nmean = selected.mean(0)\n",
            after=(
                "selected = logits.masked_fill(~mask.unsqueeze(-1), 0)  # (N, C), 0 outside\n"
                "mean = selected.sum(0) / mask.sum().clamp_min(1)      # over the K kept rows\n"
            ),
        ),
        removes=_WAIT_AND_IDLE,
    ),
    SyncKind(
        name=DEVICE_TO_HOST_COPY,
        label="device→host copy",
        summary="Blocking device-to-host copy",
        description=(
            "A copy from the GPU to the host (.cpu(), .to('cpu'), also before .numpy()) "
            "blocks the host until the copy and everything queued before it finish."
        ),
        colour="#00838f",
        colour_dark="#4dd0e1",
        advice=Advice(
            title="Do not copy to the host inside the step",
            text=(
                "`.cpu()` and `.to('cpu')` (also before `.numpy()`) wait for all queued work on "
                "the GPU, then copy. Keep the computation on the device, or copy into a pinned "
                "buffer with `non_blocking=True` and read it after an event says it is ready."
            ),
            before="preds = logits.argmax(1).cpu().numpy()\n",
            after=(
                "host_buf = torch.empty(n, dtype=torch.long, pin_memory=True)\n"
                "host_buf.copy_(logits.argmax(1), non_blocking=True)\n"
                "done = torch.cuda.Event(); done.record()\n"
                "# ... later, when needed: done.synchronize(); use host_buf\n"
            ),
        ),
        removes=_WAIT_AND_IDLE,
    ),
    SyncKind(
        name=BLOCKING_HOST_TO_DEVICE,
        label="blocking host→device",
        summary="Blocking host-to-device copy",
        description=(
            "A host-to-device copy without non_blocking=True waits for the copy and the work "
            "queued before it, pinned or not; from pageable memory even a non_blocking copy "
            "is staged synchronously. Pinned memory with non_blocking=True lets it overlap "
            "with compute."
        ),
        colour="#2e7d32",
        colour_dark="#81c784",
        advice=Advice(
            title="Pin host memory and copy with non_blocking=True",
            text=(
                "`.to(device)` without `non_blocking=True` ends in a stream synchronize: the "
                "host waits for the copy and everything queued before it, pinned or not; from "
                "pageable memory the copy is staged on the host even with `non_blocking=True`. "
                "Load batches into pinned memory (`DataLoader(pin_memory=True)`) and copy them "
                "with `non_blocking=True` (both are needed), so the copy overlaps with the "
                "work already queued on the GPU."
            ),
            before=(
                "loader = DataLoader(ds, batch_size=64)\n"
                "for x, y in loader:\n"
                "    x, y = x.to(device), y.to(device)\n"
            ),
            after=(
                "loader = DataLoader(ds, batch_size=64, pin_memory=True, num_workers=4)\n"
                "for x, y in loader:\n"
                "    x = x.to(device, non_blocking=True)\n"
                "    y = y.to(device, non_blocking=True)\n"
            ),
        ),
        removes=_WAIT_AND_IDLE,
    ),
    SyncKind(
        name=EXPLICIT_SYNC,
        label="explicit sync",
        summary="Explicit synchronization",
        description=(
            "torch.cuda.synchronize, stream or event synchronize: the host waits for the device."
        ),
        colour="#ad1457",
        colour_dark="#f48fb1",
        advice=Advice(
            title="Drop debugging synchronizes",
            text=(
                "`torch.cuda.synchronize()`, `event.synchronize()` and `stream.synchronize()` "
                "stop the host until the GPU is done. Remove the ones left from debugging or "
                "timing. One that guards a host read of a `non_blocking` copy, or data another "
                "stream or process uses, must stay: move it as late as possible, or poll "
                "`event.query()`. Use events and `stream.wait_event` to order work between "
                "streams without blocking the host."
            ),
            before=(
                "loss.backward()\ntorch.cuda.synchronize()   # debugging leftover\nopt.step()\n"
            ),
            after=(
                "loss.backward()\nopt.step()\n"
                "# to order streams without blocking the host:\n"
                "# other_stream.wait_event(done_event)\n"
            ),
        ),
        removes=_WAIT_AND_IDLE,
    ),
    SyncKind(
        name=COLLECTIVE_WAIT,
        label="collective wait",
        summary="Host waits on a collective",
        description=(
            "The host blocks until a torch.distributed collective (all-reduce, all-to-all, "
            "broadcast, barrier) has finished, or reads its result back (all-to-all split "
            "sizes): the step waits for the slowest rank as well as for its own GPU."
        ),
        colour="#1565c0",
        colour_dark="#90caf9",
        advice=Advice(
            title="Overlap the collective; wait for it as late as possible",
            text=(
                "Launch collectives with `async_op=True` and call `work.wait()` just before the "
                "result is needed, so compute overlaps communication; keep `dist.barrier()` "
                "out of the step; exchange the values the host needs (all-to-all split sizes, "
                "which `all_to_all_single` takes as host lists) a step ahead (torchrec's "
                "`TrainPipelineSparseDist` fetches the next batch's splits while this one "
                "computes)."
            ),
            before=(
                "dist.all_reduce(stats)  # gloo, or NCCL with TORCH_NCCL_BLOCKING_WAIT=1:\n"
                "                        # the host waits for every rank (plain NCCL: the\n"
                "                        # stream does, and nothing after it overlaps)\n"
                "loss = criterion(model(x), y)\n"
            ),
            after=(
                "work = dist.all_reduce(stats, async_op=True)\n"
                "loss = criterion(model(x), y)     # overlaps with the all-reduce\n"
                "work.wait()                       # only when stats is needed\n"
            ),
        ),
        removes=(
            "the host's wait for the collective; a late peer's delay moves to where the "
            "result is needed, it does not vanish"
        ),
    ),
    SyncKind(
        name=ALLOCATOR_SYNC,
        label="allocator sync",
        summary="Allocator synchronization",
        description=(
            "cudaMalloc / cudaFree / cudaHostAlloc inside a step synchronize the device; the "
            "caching allocator ran out of cached blocks or the cache was emptied."
        ),
        colour="#5d4037",
        colour_dark="#bcaaa4",
        advice=Advice(
            title="Let the caching allocator reuse memory; keep shapes stable",
            text=(
                "`cudaMalloc` / `cudaFree` synchronize the device. PyTorch's caching allocator "
                "calls them only when it has to grow or give memory back: in the first steps "
                "(a library's first call, cuDNN benchmark warm-up, the optimizer's state) "
                "that is expected; in later steps it means new shapes, fragmentation or an "
                "emptied cache. Do not call "
                "`torch.cuda.empty_cache()` in the loop, pad variable lengths to a few bucket "
                "sizes, allocate buffers once, and set "
                "`PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True` so the allocator grows a "
                "segment instead of allocating new ones (`torch.cuda.memory_stats()` counts "
                "the `cudaMalloc` and `cudaFree` calls in `num_device_alloc` and "
                "`num_device_free`)."
            ),
            before=(
                "for x in batches:            # every batch a new length\n"
                "    out = model(x)\n"
                "    torch.cuda.empty_cache()\n"
            ),
            after=(
                "# PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True python train.py\n"
                "for x in batches:\n"
                "    out = model(pad_to_bucket(x))   # few distinct shapes, memory reused\n"
            ),
        ),
        removes="the allocator's device synchronization and the GPU idle after it",
    ),
)

KIND_NAMES: tuple[str, ...] = tuple(k.name for k in KINDS)
_BY_NAME = {k.name: k for k in KINDS}


def kind(name: str) -> SyncKind:
    """The record of a kind; an unknown name (a report from a newer version) gets a
    neutral record built from the name, so outputs never fail on it."""
    found = _BY_NAME.get(name)
    if found is not None:
        return found
    fallback = _BY_NAME[EXPLICIT_SYNC]
    label = name.replace("_", " ")
    return SyncKind(
        name, label, label, label, "#757575", "#bdbdbd", fallback.advice, fallback.removes
    )


def kind_rank(name: str) -> int:
    """Position of a kind in the listing order (unknown kinds last)."""
    return KIND_NAMES.index(name) if name in _BY_NAME else len(KIND_NAMES)


# --- backends: runtime API names ------------------------------------------------------


class Backend(msgspec.Struct, frozen=True):
    """The host-side API of one device runtime, as Kineto names its calls."""

    device_kind: str  # TraceInfo.device for traces of this runtime
    call_prefixes: tuple[str, ...]  # how its runtime calls are named
    explicit_sync: frozenset[str] = frozenset()  # always block until the device is done
    explicit_sync_prefixes: tuple[str, ...] = ()  # families of explicit syncs
    sync_copy: frozenset[str] = frozenset()  # copies that block the host
    async_copy: frozenset[str] = frozenset()  # block only from pageable memory, or when a
    # stream sync follows inside the same operator (.item(), .cpu())
    allocator: frozenset[str] = frozenset()  # synchronize the device inside a step
    non_blocking: frozenset[str] = frozenset()  # never block, even with a CUPTI sync record
    # The explicit syncs that wait for the whole device (not one stream or event), and the
    # calls that make a stream wait for an event on the device (the what-if replay's edges).
    device_sync: frozenset[str] = frozenset()
    stream_wait_event: frozenset[str] = frozenset()
    # Kineto files this runtime's calls under no runtime category: events of an unknown
    # category whose name starts with one of these are runtime calls all the same.
    uncategorised_call_prefix: str | None = None


CUDA = Backend(
    device_kind="cuda",
    call_prefixes=("cuda", "cu"),
    explicit_sync=frozenset(
        {
            "cudaDeviceSynchronize",
            "cudaStreamSynchronize",
            "cudaEventSynchronize",
            "cudaThreadSynchronize",
            "cuCtxSynchronize",
            "cuStreamSynchronize",
            "cuEventSynchronize",
        }
    ),
    sync_copy=frozenset(
        {
            "cudaMemcpy",
            "cudaMemcpy2D",
            "cudaMemcpy3D",
            "cudaMemcpyFromSymbol",
            "cudaMemcpyToSymbol",
            "cuMemcpyDtoH",
            "cuMemcpyDtoH_v2",
            "cuMemcpyHtoD",
            "cuMemcpyHtoD_v2",
            "cuMemcpy",
        }
    ),
    async_copy=frozenset(
        {
            "cudaMemcpyAsync",
            "cudaMemcpy2DAsync",
            "cudaMemcpy3DAsync",
            "cuMemcpyAsync",
            "cuMemcpyDtoHAsync",
            "cuMemcpyDtoHAsync_v2",
            "cuMemcpyHtoDAsync",
            "cuMemcpyHtoDAsync_v2",
        }
    ),
    allocator=frozenset(
        {
            "cudaMalloc",
            "cudaFree",
            "cudaHostAlloc",
            "cudaMallocHost",
            "cudaFreeHost",
            "cuMemAlloc",
            "cuMemAlloc_v2",
            "cuMemFree",
            "cuMemFree_v2",
        }
    ),
    non_blocking=frozenset(
        {
            "cudaEventQuery",
            "cudaStreamQuery",
            "cudaStreamWaitEvent",
            "cuEventQuery",
            "cuStreamQuery",
            "cuStreamWaitEvent",
        }
    ),
    device_sync=frozenset({"cudaDeviceSynchronize", "cudaThreadSynchronize", "cuCtxSynchronize"}),
    stream_wait_event=frozenset({"cudaStreamWaitEvent", "cuStreamWaitEvent"}),
)

ROCM = Backend(
    device_kind="rocm",
    call_prefixes=("hip",),
    explicit_sync=frozenset(
        {
            "hipDeviceSynchronize",
            "hipStreamSynchronize",
            "hipEventSynchronize",
            "hipCtxSynchronize",
        }
    ),
    sync_copy=frozenset({"hipMemcpy", "hipMemcpyWithStream", "hipMemcpyDtoH", "hipMemcpyHtoD"}),
    async_copy=frozenset({"hipMemcpyAsync", "hipMemcpyDtoHAsync", "hipMemcpyHtoDAsync"}),
    allocator=frozenset(
        {
            "hipMalloc",
            "hipFree",
            "hipHostMalloc",
            "hipHostFree",
            "hipMallocHost",
            "hipFreeHost",
        }
    ),
    non_blocking=frozenset({"hipEventQuery", "hipStreamQuery", "hipStreamWaitEvent"}),
    device_sync=frozenset({"hipDeviceSynchronize", "hipCtxSynchronize"}),
    stream_wait_event=frozenset({"hipStreamWaitEvent"}),
)

ASCEND = Backend(
    device_kind="npu",
    call_prefixes=("AscendCL@", "acl"),
    explicit_sync_prefixes=("AscendCL@aclrtSynchronize",),
    device_sync=frozenset({"AscendCL@aclrtSynchronizeDevice"}),
    sync_copy=frozenset({"AscendCL@aclrtMemcpy"}),
    async_copy=frozenset({"AscendCL@aclrtMemcpyAsync"}),
    uncategorised_call_prefix="AscendCL@",
)

# In the order a trace's device kind is decided: the first backend any runtime call of the
# trace belongs to wins (HIP before Ascend before CUDA, whose "cu" prefix is the widest).
BACKENDS: tuple[Backend, ...] = (ROCM, ASCEND, CUDA)


def _union(attr: str) -> frozenset[str]:
    return frozenset().union(*(getattr(b, attr) for b in BACKENDS))


EXPLICIT_SYNC_APIS = _union("explicit_sync")
EXPLICIT_SYNC_PREFIXES = tuple(p for b in BACKENDS for p in b.explicit_sync_prefixes)
SYNC_COPY_APIS = _union("sync_copy")
ASYNC_COPY_APIS = _union("async_copy")
ALLOCATOR_APIS = _union("allocator")
NON_BLOCKING_APIS = _union("non_blocking")
DEVICE_SYNC_APIS = _union("device_sync")
# What the profiler calls as it stops (``torch.autograd.profiler.profile.__exit__`` runs
# ``torch.cuda.synchronize()``; torch_npu's profiler ``aclrtSynchronizeDevice``, bare, after
# the last step with nothing of the program's after it, in MindStudio Insight's published
# level-2 recordings): told by its place in a trace without stacks.
PROFILER_STOP_APIS = frozenset(
    {"cudaDeviceSynchronize", "hipDeviceSynchronize", "AscendCL@aclrtSynchronizeDevice"}
)
# The profiler's own Python code, as a python_function event names its file
# (``torch/profiler/profiler.py(1135): stop``): its synchronize on stopping, the step its
# exit closes.
PROFILER_FRAMES = ("torch/profiler/", "torch/autograd/profiler.py")


def is_profiler_frame(name: str) -> bool:
    """Whether a python_function event's name is a frame of the profiler's own code."""
    norm = name.replace("\\", "/")
    return any(marker in norm for marker in PROFILER_FRAMES)


STREAM_WAIT_EVENT_APIS = _union("stream_wait_event")
# Runtime calls worth classifying at all (most runtime calls are kernel launches).
INTERESTING_APIS = EXPLICIT_SYNC_APIS | SYNC_COPY_APIS | ASYNC_COPY_APIS | ALLOCATOR_APIS
UNCATEGORISED_CALL_PREFIXES = tuple(
    b.uncategorised_call_prefix for b in BACKENDS if b.uncategorised_call_prefix
)

# CUPTI synchronization records (cat "cuda_sync") that mean the host was blocked; "Stream
# Wait Event" is a device-side wait and is left out on purpose.
BLOCKING_SYNC_RECORDS = frozenset({"Stream Sync", "Event Sync", "Context Sync"})


def is_explicit_sync_api(name: str) -> bool:
    """An API call that always blocks the host until the device is done."""
    return name in EXPLICIT_SYNC_APIS or name.startswith(EXPLICIT_SYNC_PREFIXES)


def may_block(name: str) -> bool:
    """A runtime call detection must look at (without CUPTI sync records to go by)."""
    return name in INTERESTING_APIS or name.startswith(EXPLICIT_SYNC_PREFIXES)


def device_kind_of(
    runtime_names: Iterable[str],
    has_device_activity: bool,
    process_labels: Iterable[str] = (),
    npu_tasks: bool = False,
) -> str:
    """The trace's device kind from the names of its runtime calls: "rocm", "npu", "cuda",
    or "cpu" when it has neither runtime calls nor device activity. A trace without either
    whose processes are labelled "NPU" (torch_npu's "Ascend Hardware", recorded at its
    default profiler level, which writes no AscendCL call) is "npu": not a CPU-only one;
    so is one whose device activity is an NPU's tasks (``npu_tasks``), calls or none."""
    names = set(runtime_names)
    for backend in BACKENDS:
        if backend is CUDA:
            break
        if any(n.startswith(backend.call_prefixes) for n in names):
            return backend.device_kind
    if npu_tasks:
        return ASCEND.device_kind
    if names or has_device_activity:
        return CUDA.device_kind
    if any(str(label).upper().startswith("NPU") for label in process_labels):
        return ASCEND.device_kind
    return "cpu"


# torch_npu files the NPU's tasks in a process of this name, a row per stream, with no
# category; the timeline reads them as the device's lanes.
NPU_TASK_PROCESS = "Ascend Hardware"
# ... and its AscendCL calls in one of this name (only at profiler level 1 and up).
NPU_CALL_PROCESS = "CANN"
# NPU tasks that are no work of the device's: a stream waiting for an event (what
# cudaStreamWaitEvent is on CUDA, which writes no device record) and the profiler's own
# placeholders. Without them the NPU's busy time of MindStudio Insight's published level-2
# recording is 105.6 ms, its own "Computing" plus "Communication (not overlapped)" 104.8 ms
# and a 0.83 ms host-to-device copy it counts in neither (docs/validation.md, section 9).
NPU_IDLE_TASK_TYPES = frozenset({"EVENT_WAIT_SQE", "PLACE_HOLDER_SQE"})
# NPU tasks that wait for another rank (HCCL's "Notify Wait"): the NPU is not idle then,
# as an NCCL kernel waiting for its peers is not on CUDA, but it is no work of its own that
# a step must last for: fixing the peers' syncs may shorten it. Left out of the work that
# caps the bound (``cost.device_busy_by_step``): 95.8 of the 105.6 ms of the published
# level-2 recording's step.
NPU_PEER_WAIT_TASK_TYPES = frozenset({"Notify Wait"})

# Why the replay does not run on an NPU trace: without "Ascend Hardware" rows the device's
# work is not in the trace at all (``NPU_NOT_REPLAYED``); with them its idle time is read,
# but the replay does not follow torch_npu's task queue, through which the calls launch
# the tasks, so the saving is the bound of the host wait and the idle after each sync.
NPU_NOT_REPLAYED = (
    "the trace holds no task of the NPU's own (torch_npu's \"Ascend Hardware\" rows): nothing "
    "to replay"
)
NPU_TASKS_NOT_LINKED = (
    "the NPU's tasks are read for its idle time, but the replay does not follow torch_npu's "
    "task queue, through which the calls launch them: not replayed"
)


def npu_without_calls(trace: Mapping[str, Any]) -> bool:
    """Whether a report's trace (``TraceInfo`` as JSON) is a torch_npu trace recorded at its
    default profiler level: NPU work, but no runtime call, so no wait for the device in it
    (neither CPU-only nor clean)."""
    return (
        trace.get("device") == "npu"
        and not trace.get("has_runtime")
        and not trace.get("has_gpu_activity")
    )


# What a torch_npu trace without AscendCL calls needs (its default profiler level records
# none, so no wait for the device is in it).
NPU_LEVEL_ADVICE = (
    "torch_npu's default profiler level (Level0) records no AscendCL call, so no wait for "
    "the NPU is in this trace: to see them, profile with "
    "profiler_level=torch_npu.profiler.ProfilerLevel.Level1 in "
    "torch_npu.profiler._ExperimentalConfig"
)


# --- operators ------------------------------------------------------------------------

SCALAR_OPS = frozenset(
    {"aten::item", "aten::_local_scalar_dense", "aten::is_nonzero", "aten::tolist"}
)
DYNAMIC_OPS = frozenset(
    {
        "aten::nonzero",
        "aten::argwhere",
        "aten::unique",
        "aten::_unique",
        "aten::_unique2",
        "aten::unique_dim",
        "aten::unique_consecutive",
        "aten::unique_dim_consecutive",
        "aten::masked_select",
        "aten::repeat_interleave",
        # torchvision's non-maximum suppression keeps a data-dependent number of boxes: its
        # CUDA kernel learns it on the host (``masked_select`` of its keep mask, or a copy
        # of the mask back); its CPU kernel reads nothing, so a CPU trace shows only it.
        "torchvision::nms",
    }
)
COPY_OPS = frozenset({"aten::to", "aten::_to_copy", "aten::copy_", "aten::_copy_from", "aten::cpu"})

# torch.distributed: a sync inside one of these operators, or whose innermost record_function
# annotation is one of these, waits on a collective (c10d ops; the nccl:/gloo: annotations
# ProcessGroup writes around its work; torchrec's "## KJTAllToAllTensorsAwaitable wait() ##").
COLLECTIVE_OP_PREFIXES = ("c10d::", "_c10d_functional::", "c10d_functional::", "nccl:", "gloo:")
COLLECTIVE_OPS = frozenset({"record_param_comms"})
COLLECTIVE_ANNOTATION_PREFIXES = ("nccl:", "gloo:")
COLLECTIVE_ANNOTATION_MARKERS = ("Awaitable wait()",)


def is_collective_op(name: str) -> bool:
    return name in COLLECTIVE_OPS or name.startswith(COLLECTIVE_OP_PREFIXES)


def is_collective_wait_annotation(name: str) -> bool:
    text = name.strip("# ")
    return text.startswith(COLLECTIVE_ANNOTATION_PREFIXES) or any(
        marker in text for marker in COLLECTIVE_ANNOTATION_MARKERS
    )


# A communication library's own worker thread: gloo runs each collective on a thread of its
# own, inside a ``gloo:*`` annotation, and with CUDA tensors that thread synchronizes with its
# device copies. Such a sync blocks no thread of the program (the program waits, if at all, in
# ``Work.wait``) and makes no rank late: listed apart (``Report.collective_worker``), out of
# the findings, totals and CI gate.
COLLECTIVE_WORKER_ANNOTATION_PREFIXES = ("gloo:",)


def is_collective_worker_sync(
    annotations: Iterable[str],
    op_chain: Iterable[str],
    thread_runs_python: bool,
    thread_op_names: Callable[[], Iterable[str]],
) -> bool:
    """Whether a sync is a communication library's worker waiting for its own device work:
    inside a ``gloo:*`` annotation, under no collective operator, on a thread that runs no
    Python and issues no collective (a program's thread that calls ``irecv`` records
    ``gloo:recv`` around its own later work). ``thread_op_names``: the names of the
    thread's operators and annotations, asked for only when the rest holds."""
    return (
        not thread_runs_python
        and any(a.startswith(COLLECTIVE_WORKER_ANNOTATION_PREFIXES) for a in annotations)
        and not any(is_collective_op(op) for op in op_chain)
        and not any(
            is_collective_op(name) and not name.startswith(COLLECTIVE_WORKER_ANNOTATION_PREFIXES)
            for name in thread_op_names()
        )
    )


# Warm-up: a user annotation (record_function) whose name says warm-up marks steps run to let
# cuDNN's benchmark pick its algorithms and the caching allocator fill its cache. Allocator
# syncs there are expected once and are not the program's steady cost: listed apart
# (``Report.warmup_allocator``), out of the findings, totals and CI gate, with the allocator
# advice should they recur in measured steps.
WARMUP_ANNOTATION = re.compile(r"warm[-_ ]?up", re.IGNORECASE)
WARMUP_LISTED_KINDS = frozenset({ALLOCATOR_SYNC})


def is_warmup_annotation(name: str) -> bool:
    """Whether a record_function name marks a warm-up region ('warmup', 'Warm-up',
    'warm_up', any case, anywhere in the name)."""
    return WARMUP_ANNOTATION.search(name) is not None


def is_warmup_listed(kind_name: str, annotations: Iterable[str]) -> bool:
    """Whether a sync of this kind inside these annotations is listed apart as warm-up."""
    return kind_name in WARMUP_LISTED_KINDS and any(map(is_warmup_annotation, annotations))


# A ``DataLoader``'s fetch (its iterator's ``__next__``), as the span torch opens around it.
DATALOADER_FETCH = "enumerate(DataLoader)#"
# The ``record_function`` spans torch (and its profiler) open by themselves, by prefix: not
# a user's step, whatever they repeat (a ``DataLoader``'s fetches, an optimizer's calls).
TORCH_OWN_ANNOTATIONS = (
    "ProfilerStep#",
    DATALOADER_FETCH,
    "Optimizer.",
    "## ",
    "Torch-Compiled Region",
    "CompiledFunction",
    "DistributedDataParallel.",
    "DataParallel.",
    "nccl:",
    "gloo:",
    "c10d::",
    "[pl][",  # Lightning's profiler
    "[LightningModule]",
    "[Strategy]",
    "[Callback]",
)


# Lightning's ``PyTorchProfiler`` writes one trace per loop it profiles into one folder,
# named ``<stage>-<filename>-<action>.<ns>.pt.trace.json`` with the action the loop's step
# hook (``[Strategy]SingleDeviceStrategy.training_step``, ``...validation_step``): the
# worker names of a run whose traces are steps of different loops, not ranks of one job.
LIGHTNING_LOOP_WORKER = re.compile(r"\.(training|validation|test|predict)_step$")


def lightning_loop(worker: str) -> str | None:
    """The loop (``training_step``, ``validation_step``, ...) a Lightning profiler's trace
    was recorded in, from its worker name; None for any other worker."""
    match = LIGHTNING_LOOP_WORKER.search(worker)
    return f"{match.group(1)}_step" if match else None


# Operators whose CUDA kernels read a value back inside while their CPU kernels do not
# (so no aten::item shows on a CPU trace): ``torch.equal`` (``.all().item()``),
# ``torch.bincount`` (its input's min and max).
READING_OPS = frozenset({"aten::equal", "aten::bincount"})

# What a CTC loss runs as, forward and backward, cuDNN's, MIOpen's and torch's own kernels:
# each copies between host and device inside (their fix is how ctc_loss is called).
CTC_LOSS_OPS = frozenset(
    {
        "aten::ctc_loss",
        "aten::_ctc_loss",
        "aten::_ctc_loss_backward",
        "aten::_cudnn_ctc_loss",
        "aten::_use_cudnn_ctc_loss",
        "aten::miopen_ctc_loss",
        "aten::_use_miopen_ctc_loss",
    }
)
# The kind a CPU-only trace gives a CTC loss that would copy between host and device on a GPU,
# as a GPU trace gives it (docs/validation.md, section 14): its forward reads the targets
# and lengths back. Only where its line shows the mean reduction (the default), which waits
# on every GPU kernel (its upload of the target lengths): cuDNN's kernel with
# ``reduction='none'`` waits for nothing, and torch's with it does, which a CPU trace cannot
# tell apart (``ctc_waits_by_line``); nor its backward (cuDNN's keeps its forward's gradients).
LATENT_CTC_KINDS = {"aten::ctc_loss": DEVICE_TO_HOST_COPY}
_CTC_CALL = re.compile(r"\bctc_loss\(")
_REDUCTION = re.compile(r"""\breduction\s*=\s*(?:(['"])(\w+)\1)?""")
CTC_TITLE = "Call ctc_loss the way cuDNN takes it, and average on the device"
CUDNN_CTC_TITLE = "ctc_loss on cuDNN: take the mean on the device, the rest stays"

# The kind an operator in the chain gives a sync.
OP_KINDS: dict[str, str] = {
    **{op: SCALAR_READBACK for op in SCALAR_OPS | READING_OPS},
    **{op: DYNAMIC_SHAPE for op in DYNAMIC_OPS},
}
# A chain holding operators of several kinds takes the first of these, wherever in the chain
# they are: on CUDA torch.unique reads its output size back through aten::item inside
# aten::_unique2, and the finding is the data-dependent shape (the fix is unique's), the same
# kind the operator gets on a CPU-only trace.
OP_KIND_PRECEDENCE: tuple[str, ...] = (DYNAMIC_SHAPE, SCALAR_READBACK)

# Ops that always sync when their inputs are on a GPU: latent findings in CPU-only traces.
# aten::tolist has never been one (a latent finding for it would be a behaviour change of its
# own to decide), hence the difference.
LATENT_TRIGGERS = (
    (SCALAR_OPS - {"aten::tolist"}) | DYNAMIC_OPS | READING_OPS | set(LATENT_CTC_KINDS)
)
# Operators whose CPU kernels read a scalar that their CUDA kernels keep on the device: a
# trigger inside one is no latent sync. ``torch.linalg.lu_solve`` on the CPU reads its
# pivots (``aten::item``), so ``inv_ex`` and ``solve_ex`` read there, and
# ``torch.cholesky_inverse`` checks an error code; on an H200 none of them made torch's
# sync detector warn (docs/validation.md, section 11). ``torch.cholesky_solve`` checks its
# error code on the CPU too; CUDA's cuSOLVER path reads it only in a debug build
# (``TORCH_INTERNAL_ASSERT_DEBUG_ONLY`` in ``_cholesky_solve_helper_cuda_cusolver``: read
# in torch's source, not measured), and MAGMA's returns it on the host.
# (Not ``aten::_grouped_mm``: it reads nothing on an H100/H200-class GPU in bfloat16, as
# section 15 measured, but its fallback, for other dtypes and GPUs, copies the offsets to the
# host, and a CPU trace does not say which a GPU run would take.)
LATENT_CPU_ONLY_READS = frozenset(
    {"aten::linalg_lu_solve", "aten::cholesky_inverse", "aten::cholesky_solve"}
)
# Operators whose CPU kernels read a scalar (``aten::item``) where their CUDA kernels read
# none, though other triggers inside them would be real: ``std``/``var`` over all elements
# read the mean on the CPU only; ``_assert_async`` (``torch.multinomial``) asserts on the
# device; the backward of ``max()``, ``min()``, ``median()`` and ``nanmedian()``
# (``evenly_distribute_backward``) reads ``isnan`` on the CPU only. (``x[mask] = 0``, a
# ``masked_fill_`` of a host number on CUDA, is told apart in ``detect`` by the number
# lifted just before it: ``x[mask] = t`` of a device tensor runs nonzero there.)
INDEX_PUT_IMPL = "aten::_index_put_impl_"
LIFTED_NUMBER = "aten::lift_fresh"
# torch's own seed draw, ``torch.empty((), dtype=torch.int64).random_().item()``: the
# DataLoader's base seed at each ``iter(loader)`` and a shuffling ``RandomSampler``'s seed,
# sibling operators in this order. A host tensor: in a trace with stacks torch's frames say
# so; without stacks these operators are all there is, and every shuffled DataLoader of a
# CPU trace listed a read no line of the program makes.
HOST_SEED_DRAW = ("aten::empty", "aten::random_", "aten::item")
LATENT_CPU_ONLY_SCALAR_READS = frozenset(
    {
        "aten::std",
        "aten::var",
        "aten::_assert_async",
        "MaxBackward1",
        "MinBackward1",
        "MedianBackward0",
        "NanmedianBackward0",
    }
)

# Tensor methods that copy a GPU tensor to the host and wait for the copy, but run no
# operator of their own that says so on the CPU (``.tolist()`` runs none, ``.cpu()`` an
# ``aten::to`` that ``.to(device)`` uploads run too). A CPU-only trace recorded with stacks
# shows them as built-in calls, ``<built-in method tolist of Tensor object at 0x...>``:
# latent findings where the user's own code calls them, with the kind and the operator a
# GPU trace gives them (its chain is aten::to -> aten::_to_copy -> aten::copy_, a DtoH
# copy), so that a CPU run and a GPU run key the line alike. Library code is left out:
# torch's samplers call ``torch.randperm(n).tolist()`` on tensors that never leave the
# host. ``.numpy()`` is left out: it refuses a GPU tensor, so the copy before it is a
# ``.cpu()`` of its own; so is a ``.tolist()`` right after a ``.cpu()`` (``x.cpu().tolist()``
# copies once).
LATENT_TENSOR_METHODS: dict[str, tuple[str, str]] = {
    "cpu": (DEVICE_TO_HOST_COPY, "aten::to"),
    "tolist": (DEVICE_TO_HOST_COPY, "aten::to"),
    "to": (DEVICE_TO_HOST_COPY, "aten::to"),
}
# Of those, the methods that copy to the host only as some calls make them: ``.to(device)``
# is an upload as often as not, so a ``.to()`` is a latent copy only where its source line
# names the host (``to_the_host``).
LATENT_METHODS_BY_LINE = frozenset({"to"})
# Operators kept as latent only where their line says they wait (``ctc_waits_by_line``).
LATENT_OPS_BY_LINE = frozenset(LATENT_CTC_KINDS)
_TO_CALL = re.compile(r"\.to\(")
_FIRST_ARG_CPU = re.compile(r"""\s*(?:(['"])cpu\1|torch\.device\(\s*(['"])cpu\2\s*\))""")
_DEVICE_ARG_CPU = re.compile(r"""\bdevice\s*=\s*(?:(['"])cpu\1|torch\.device\(\s*(['"])cpu\2)""")
_NON_BLOCKING = re.compile(r"\bnon_blocking\s*=\s*True\b")


def call_arguments(line: str, start: int) -> str | None:
    """The text between the parenthesis opened just before ``start`` and the one closing it
    on this line (brackets inside string literals skipped); None where the call goes on to
    the next line or a comment comes first: its arguments are not all on the line."""
    depth = 1
    quote = ""
    index = start
    while index < len(line):
        char = line[index]
        if quote:
            if char == "\\":
                index += 1
            elif char == quote:
                quote = ""
        elif char in "'\"":
            quote = char
        elif char == "#":
            return None
        elif char in "([{":
            depth += 1
        elif char in ")]}":
            depth -= 1
            if depth == 0:
                return line[start:index]
        index += 1
    return None


def ctc_waits_by_line(line: str) -> bool:
    """Whether a source line's one ``ctc_loss(...)`` call takes the mean reduction (given or
    by default), which waits for the GPU whichever kernel runs it."""
    calls = list(_CTC_CALL.finditer(line))
    if len(calls) != 1:
        return False
    args = call_arguments(line, calls[0].end())
    if args is None:
        return False
    reduction = _REDUCTION.search(args)
    return reduction is None or reduction.group(2) == "mean"


# Tensors made on the host from Python data, by these factories of ``torch`` called without
# a ``device=``: a read of one (``torch.tensor(list(self.deque)).median().item()``, the
# smoothed values of torchvision's reference ``MetricLogger``) waits for no device on a GPU
# run either, so a CPU trace's read of it is no latent sync. And the methods that may move
# a tensor elsewhere, after which nothing is known of where it lives.
HOST_TENSOR_FACTORIES = frozenset({"tensor", "as_tensor", "from_numpy"})
# Operators that launch no device kernel: views, metadata, and allocations from the
# caching allocator. Between two reads of a CPU-only trace they queue nothing the second
# waits for (``cost.reads_right_after``): ``Tensor.__format__`` runs ``self.detach().item()``,
# so four formatted meters are four reads with a ``detach`` before each, and one wait on a
# GPU. A view that has to copy (``reshape`` of a strided tensor) shows its copy's
# operator under it, which is not one of these.
QUEUES_NO_DEVICE_WORK = frozenset(
    {
        "detach",
        "aten::detach",
        "aten::alias",
        "aten::view",
        "aten::_reshape_alias",
        "aten::reshape",
        "aten::as_strided",
        "aten::select",
        "aten::slice",
        "aten::unsqueeze",
        "aten::squeeze",
        "aten::expand",
        "aten::t",
        "aten::transpose",
        "aten::permute",
        "aten::lift_fresh",
        "aten::resolve_conj",
        "aten::resolve_neg",
        "aten::empty",
        "aten::empty_strided",
        # ``nn.Module._apply``'s check before each tensor it moves (``net.cpu()``).
        "aten::_has_compatible_shallow_copy_type",
    }
)
# A line converting the host copy it just made (``t.cpu().float().numpy()``, torchvision's
# and many image loggers' ``tensor2im``): the conversion's operators run on the host copy,
# queueing nothing on the device before the next read (``cost.reads_right_after``).
CONVERTED_COPY = re.compile(
    r"\.cpu\(\s*\)\s*\.(float|double|half|bfloat16|long|int|short|bool|byte|to|type)\("
)
# The operators of a read itself: a scalar's (``.item()``, a truth test) or a copy to the
# host's (``.cpu()``, ``.tolist()``); a read made of these waits for the queue and runs
# nothing of its own on the device first (``cost.reads_right_after``).
READ_ONLY_OPS = frozenset(
    {
        "aten::item",
        "aten::_local_scalar_dense",
        "aten::is_nonzero",
        "aten::to",
        "aten::_to_copy",
        "aten::copy_",
    }
)
# And the factories that take sizes and a seed, never data: without a ``device=`` their
# tensor is on the host whatever their arguments are (nanoGPT's ``get_batch`` draws its
# indices with ``torch.randint(...)`` and indexes a memmap with each: 144 reads of a
# 5-step CPU trace, none of which waits for a GPU on a GPU run).
HOST_SHAPE_FACTORIES = frozenset(
    {
        "zeros",
        "ones",
        "empty",
        "full",
        "arange",
        "linspace",
        "logspace",
        "eye",
        "rand",
        "randn",
        "randint",
        "randperm",
    }
)


def numpy_index_read(library_file: str, func: str) -> bool:
    """Whether a read made under this library frame, called from the user's code, reads
    the index of a subscript: NumPy's Python ``__getitem__`` (``np.memmap``'s) holds no
    tensor but the one it is indexed with, which it turns into an int."""
    return library_file.startswith("numpy/") and func == "__getitem__"


DEVICE_MOVES = frozenset({"to", "cuda", "npu", "xpu", "mps", "type", "pin_memory"})
# The calls that read a tensor's value back to the host (as a latent scalar read names it).
HOST_READ_METHODS = frozenset({"item", "tolist"})
HOST_READ_BUILTINS = frozenset({"float", "int", "bool"})


def to_the_host(line: str) -> bool:
    """Whether a source line's one ``.to(...)`` call copies to the host and waits: its
    device is the literal ``'cpu'`` (or ``torch.device('cpu')``), and not
    ``non_blocking=True`` (a copy to pinned memory that does not wait). A line of several
    ``.to(`` calls, or whose device is a variable, cannot say which the trace recorded; only
    the call's own arguments count (not another call's ``device="cpu"``, nor a comment's)."""
    calls = list(_TO_CALL.finditer(line))
    if len(calls) != 1:
        return False
    args = call_arguments(line, calls[0].end())
    if args is None:
        return False
    to_cpu = _FIRST_ARG_CPU.match(args) or _DEVICE_ARG_CPU.search(args)
    return bool(to_cpu) and not _NON_BLOCKING.search(args)


# torch's Python tracer names a built-in after the type of its first receiver in a
# session: ``<built-in method cpu of Parameter object>`` names every later ``.cpu()`` too.
# Any type but these is a tensor's (numpy's and array's names hold a dot: never matched).
_TENSOR_METHOD_RE = re.compile(r"<built-in method (\w+) of (\w+) object")
_NOT_TENSOR_TYPES = frozenset({"memoryview"})


def tensor_method(name: str) -> str | None:
    """``tolist`` for a recorded ``<built-in method tolist of Tensor object at 0x7f..>``
    call (or of a tensor subclass's: ``Parameter``), else None."""
    if not name.startswith("<built-in method "):
        return None
    match = _TENSOR_METHOD_RE.match(name)
    if match is None or match.group(2) in _NOT_TENSOR_TYPES:
        return None
    return match.group(1)


# What detection looks for, said to the user when nothing was found.
CHECKED = (
    "explicit synchronize calls (cudaDeviceSynchronize, cudaStreamSynchronize, "
    "cudaEventSynchronize, cu*/hip*/aclrt* forms)",
    "blocking copies (cudaMemcpy, pageable cudaMemcpyAsync, hipMemcpyWithStream)",
    "CUPTI cuda_sync records joined to their runtime call",
    "allocator syncs inside steps (cudaMalloc, cudaFree, cudaHostAlloc, cudaFreeHost)",
    "scalar readbacks (.item(), .tolist(), bool/if on a tensor)",
    "dynamic shapes (nonzero, unique, masked_select, boolean masks, repeat_interleave)",
    "waits on torch.distributed collectives (c10d operators, nccl:/gloo: regions, "
    "awaitable wait())",
)

# --- source resolution: what the user's code called -----------------------------------

# Callee names to look for, per operator, in order of likelihood: the first group that
# matches any call in the function wins.
_SCALAR_CALLEES = [["item"], ["tolist"], ["float", "int", "bool"], ["print", "format", "str"]]
_TO_CALLEES = [["to", "cpu", "cuda", "numpy", "tolist"], ["tensor", "as_tensor"]]
OP_CALLEES: dict[str, list[list[str]]] = {
    "aten::item": _SCALAR_CALLEES,
    "aten::_local_scalar_dense": _SCALAR_CALLEES,
    "aten::is_nonzero": [["__bool__", "bool"], ["any", "all"]],
    "aten::nonzero": [["nonzero"], ["argwhere"], ["where"], ["__getitem__"]],
    "aten::argwhere": [["argwhere"]],
    "aten::unique": [["unique"]],
    "aten::_unique": [["unique"]],
    "aten::_unique2": [["unique"], ["unique_consecutive"]],
    "aten::unique_dim": [["unique"]],
    "aten::unique_consecutive": [["unique_consecutive"], ["unique"]],
    "aten::unique_dim_consecutive": [["unique_consecutive"], ["unique"]],
    "aten::masked_select": [["masked_select"], ["__getitem__"]],
    "aten::index": [["__getitem__"]],
    "aten::index_put_": [["__setitem__"], ["index_put_", "index_put"]],
    "aten::index_put": [["__setitem__"], ["index_put"]],
    "aten::where": [["where"]],
    "aten::repeat_interleave": [["repeat_interleave"]],
    "aten::equal": [["equal"]],
    "aten::bincount": [["bincount"]],
    "aten::to": _TO_CALLEES,
    "aten::_to_copy": _TO_CALLEES,
    "aten::copy_": [["copy_"], *_TO_CALLEES[:1], ["__setitem__"]],
    "c10d::barrier": [["barrier"]],
    "c10d::allreduce_": [["all_reduce"]],
    "c10d::allgather_": [["all_gather"]],
    "c10d::broadcast_": [["broadcast"]],
    "c10d::alltoall_": [["all_to_all", "all_to_all_single"]],
    "c10d::alltoall_base_": [["all_to_all_single", "all_to_all"]],
    "_c10d_functional::wait_tensor": [["wait_tensor", "wait"]],
}
# Callees of a bare API call outside any operator (torch.cuda.synchronize(), event waits).
API_CALLEES: list[list[str]] = [["synchronize"], ["wait", "record"]]
# Methods whose call waits for a device by itself, whatever it is called on
# (``torch.cuda.synchronize()``, ``torch.accelerator.synchronize()``, ``event.synchronize()``,
# ``stream.synchronize()``): on a CPU-only trace none of them ran (torch.cuda's raises without
# a GPU), so the profiled functions' calls of them are read from the source instead.
EXPLICIT_SYNC_METHODS: frozenset[str] = frozenset({"synchronize"})

# --- advice refinements ---------------------------------------------------------------


class OpAdvice(msgspec.Struct, frozen=True):
    """A fix more specific than the kind's, for syncs of ``kinds`` with one of ``ops`` in
    their operator chain."""

    ops: frozenset[str]
    kinds: frozenset[str]
    advice: Advice
    # Only for sites each of whose syncs made every call of one of these sets (empty: any
    # calls). Such an entry tells what the calls did: it is checked before the copy
    # patterns and the entries without calls.
    apis: tuple[frozenset[str], ...] = ()
    # Only where one of ``ops`` is the chain's innermost operator (the sync is its own
    # code, not that of an operator it calls).
    innermost: bool = False
    # Only for sites each of whose syncs is inside the first call of one of ``ops`` on its
    # thread in the trace (``Sync.first_call_of``).
    first_call: bool = False


# Convolutions as the trace names them (cuDNN's and MIOpen's own, and the dispatching ops
# above them): an explicit event synchronize inside one is the library timing its
# algorithms (``torch.backends.cudnn.benchmark``); nothing else in a convolution waits so.
CONVOLUTION_OPS = frozenset(
    {
        "aten::convolution",
        "aten::_convolution",
        "aten::convolution_backward",
        "aten::conv1d",
        "aten::conv2d",
        "aten::conv3d",
        "aten::conv_transpose1d",
        "aten::conv_transpose2d",
        "aten::conv_transpose3d",
        "aten::cudnn_convolution",
        "aten::cudnn_convolution_backward",
        "aten::cudnn_convolution_backward_input",
        "aten::cudnn_convolution_backward_weight",
        "aten::cudnn_convolution_transpose",
        "aten::cudnn_convolution_transpose_backward",
        "aten::cudnn_convolution_transpose_backward_input",
        "aten::cudnn_convolution_transpose_backward_weight",
        "aten::miopen_convolution",
        "aten::miopen_convolution_backward",
        "aten::miopen_convolution_backward_input",
        "aten::miopen_convolution_backward_weight",
    }
)

# A library setting itself up on its first call in a process (docs/validation.md, section
# 10): inside the first call of its operator, with calls the operation's own output and
# workspace allocations never make. cuBLAS frees inside the multiply itself (an H100's
# recording and a public trace's): ``aten::mm`` allocates its output with no
# ``aten::empty`` under it, so a ``cudaMalloc`` alone there is the caching allocator's
# cache miss, and a free under another operator is the allocator freeing its cache to
# retry. cuDNN frees and allocates pinned host memory (every recording: a convolution
# forward and backward, an RNN's weights, cuDNN attention), which the device's caching
# allocator never does.
CUBLAS_SETUP_CALLS = tuple(
    frozenset({name}) for name in ("cudaFree", "cuMemFree", "cuMemFree_v2", "hipFree")
)
CUDNN_SETUP_CALLS = (
    frozenset({"cudaFree", "cudaHostAlloc"}),
    frozenset({"hipFree", "hipHostMalloc"}),
)
# Matrix multiplies as the trace names them: cuBLAS and cuBLASLt (hipBLAS / hipBLASLt on
# ROCm) run inside them.
MATMUL_OPS = frozenset(
    {
        "aten::mm",
        "aten::addmm",
        "aten::_addmm_activation",
        "aten::bmm",
        "aten::baddbmm",
        "aten::addbmm",
        "aten::mv",
        "aten::addmv",
        "aten::dot",
        "aten::vdot",
        "aten::matmul",
        "aten::linear",
        "aten::_scaled_mm",
        "aten::_int_mm",
    }
)

# cuDNN's (MIOpen's) operations besides the convolutions: its RNNs and its attention.
CUDNN_OPS = CONVOLUTION_OPS | frozenset(
    {
        "aten::_cudnn_rnn",
        "aten::_cudnn_rnn_backward",
        "aten::_cudnn_rnn_flatten_weight",
        "aten::_cudnn_init_dropout_state",
        "aten::miopen_rnn",
        "aten::miopen_rnn_backward",
        "aten::_scaled_dot_product_cudnn_attention",
        "aten::_scaled_dot_product_cudnn_attention_backward",
        "aten::_cudnn_attention_forward",
        "aten::_cudnn_attention_backward",
    }
)

# cuFFT's transforms as the trace names them (the ``aten::fft_*`` functions call these).
# cuFFT makes a plan for each new transform (size, type, batch) and caches it
# (``torch.backends.cuda.cufft_plan_cache``); making one uploads its tables with the
# driver's blocking copies, which Kineto records as device copies without their call (an
# H200's recording, docs/validation.md section 10). Those copies, inside the transform's
# call, are what tells a plan being made: the set-up has no call of its own in the trace.
FFT_OPS = frozenset({"aten::_fft_r2c", "aten::_fft_c2r", "aten::_fft_c2c"})
ALLOCATOR_CALLS = tuple(
    frozenset({name})
    for name in ("cudaMalloc", "cudaFree", "cuMemAlloc_v2", "cuMemFree_v2", "cuMemFree")
)

# The operators whose call may set their library up, and the calls that tell such a
# set-up (any of them): the attribute stage asks whether a sync is inside such a call only
# where it made one of these (``Sync.first_call_of``). cuBLAS and cuDNN set up on their
# first call on a thread; cuFFT on each call that makes a plan.
LIBRARY_SETUP_OPS = MATMUL_OPS | CUDNN_OPS | FFT_OPS
SETUP_CALLS = frozenset().union(*CUBLAS_SETUP_CALLS, *CUDNN_SETUP_CALLS)
FFT_SETUP_CALLS = frozenset().union(*ALLOCATOR_CALLS)

OP_ADVICE: tuple[OpAdvice, ...] = (
    OpAdvice(
        MATMUL_OPS,
        frozenset({ALLOCATOR_SYNC, BLOCKING_HOST_TO_DEVICE}),
        Advice(
            title="cuBLAS setting itself up in its first matrix multiply",
            text=(
                "The first matrix multiply in a process creates cuBLAS's handle and "
                "workspace and loads its kernels: `cudaMalloc` and `cudaFree`, or a blocking "
                "copy, made by the multiply itself, once. On an H100 with CUDA 13 such a "
                "first step took 84-102 ms, the steps after it 0.2-1.2 ms. It is not a cost "
                "of the steady state: profile after a warm-up step, or run one multiply "
                "before profiling, and the profile shows the steps as they run."
            ),
            before=(
                "prof = profile(schedule=schedule(wait=0, warmup=0, active=3))\n"
                "for batch in loader:\n"
                "    train_step(batch); prof.step()\n"
            ),
            after=(
                "prof = profile(schedule=schedule(wait=1, warmup=1, active=3))\n"
                "for batch in loader:\n"
                "    train_step(batch); prof.step()\n"
            ),
            removes="the set-up from the profiled steps (it still runs once, before them)",
        ),
        apis=CUBLAS_SETUP_CALLS,
        innermost=True,
        first_call=True,
    ),
    OpAdvice(
        CUDNN_OPS,
        frozenset({ALLOCATOR_SYNC, BLOCKING_HOST_TO_DEVICE}),
        Advice(
            title="cuDNN setting itself up on its first call",
            text=(
                "The first convolution, RNN or cuDNN attention in a process creates cuDNN's "
                "handle, allocates its workspace and builds or loads its kernels: "
                "`cudaMalloc`, `cudaFree` and `cudaHostAlloc` made inside the operation, "
                "once. On an H100 such a first step took 239 ms with a convolution and "
                "71 ms with cuDNN attention, the steps after it 0.1-1.5 ms. It is not a cost "
                "of the steady state: profile after a warm-up step, or run the model once "
                "before profiling, and the profile shows the steps as they run."
            ),
            before=(
                "prof = profile(schedule=schedule(wait=0, warmup=0, active=3))\n"
                "for batch in loader:\n"
                "    loss = model(batch).sum(); loss.backward(); prof.step()\n"
            ),
            after=(
                "prof = profile(schedule=schedule(wait=1, warmup=1, active=3))\n"
                "for batch in loader:\n"
                "    loss = model(batch).sum(); loss.backward(); prof.step()\n"
            ),
            removes="the set-up from the profiled steps (it still runs once, before them)",
        ),
        apis=CUDNN_SETUP_CALLS,
        first_call=True,
    ),
    OpAdvice(
        FFT_OPS,
        frozenset({ALLOCATOR_SYNC, BLOCKING_HOST_TO_DEVICE}),
        Advice(
            title="cuFFT making a plan for a new transform",
            text=(
                "cuFFT makes a plan the first time it sees a transform's size, type and "
                "batch, uploads the plan's tables with blocking copies, and caches it "
                "(`torch.backends.cuda.cufft_plan_cache`). On an H200 the first step with "
                "an `rfft2` took 11.7 ms, the steps after it 0.1-0.3 ms. Once per shape it is "
                "not a cost of the steady state: profile after a warm-up step, or run each "
                "transform once before. If the site shows in every step, the shapes change "
                "from step to step (or outgrow the cache's `max_size`): pad the signals to "
                "a few fixed lengths so that each plan is made once. Padding changes the "
                "spectrum (`n // 2 + 1` bins, spaced `1 / n`): crop or resample downstream "
                "where the bins must match the original length."
            ),
            before=(
                "for wave in loader:  # a different length every step\n"
                "    spec = torch.fft.rfft(wave.to(device))\n"
            ),
            after=(
                "n = 1 << (wave.shape[-1] - 1).bit_length()  # a few fixed lengths\n"
                "spec = torch.fft.rfft(wave.to(device, non_blocking=True), n=n)\n"
            ),
            removes="making a plan in the profiled steps (each plan is still made once)",
        ),
        apis=ALLOCATOR_CALLS,
        first_call=True,
    ),
    OpAdvice(
        CONVOLUTION_OPS,
        frozenset({EXPLICIT_SYNC}),
        Advice(
            title="cuDNN benchmark mode timing its algorithms: once per input shape",
            text=(
                "With `torch.backends.cudnn.benchmark = True` (MIOpen's find mode on ROCm), "
                "the library times every convolution algorithm the first time it meets an "
                "input shape, waiting for the GPU between them (`cudaEventSynchronize` inside "
                "the convolution). Once per shape is expected: profile after a few warm-up "
                "steps. Seen in every step, the shapes change: keep them fixed "
                "(`drop_last=True`, pad to a few sizes), or turn benchmark mode off."
            ),
            before=(
                "torch.backends.cudnn.benchmark = True\n"
                "loader = DataLoader(data, batch_size=64)   # last batch smaller\n"
                "prof = profile(schedule=schedule(wait=0, warmup=0, active=3))\n"
            ),
            after=(
                "torch.backends.cudnn.benchmark = True\n"
                "loader = DataLoader(data, batch_size=64, drop_last=True)\n"
                "prof = profile(schedule=schedule(wait=1, warmup=2, active=3))\n"
            ),
        ),
    ),
    OpAdvice(
        frozenset({"torchvision::nms"}),
        frozenset({DYNAMIC_SHAPE}),
        Advice(
            title="Run NMS once per batch, not once per image or class",
            text=(
                "torchvision's `nms` returns as many boxes as it keeps, so on a GPU it "
                "learns that count on the host, waiting for the detection head's work: "
                "that is what non-maximum suppression is. Call it as few times as you can: "
                "once for all images and classes of a batch with `batched_nms`, whose "
                "`idxs` keep each image's (and class's) boxes apart, rather than in a loop. "
                "torchvision's own detection models already call it once per image."
            ),
            before=("keep = [nms(b, s, 0.5) for b, s in zip(boxes, scores)]   # one wait each\n"),
            after=(
                "image = torch.cat([torch.full((len(b),), i) for i, b in enumerate(boxes)])\n"
                "keep = batched_nms(torch.cat(boxes), torch.cat(scores), image, 0.5)  # one\n"
            ),
            removes="a wait per call: one per batch stays",
        ),
    ),
    OpAdvice(
        frozenset({"aten::nonzero", "aten::argwhere", "aten::where"}),
        frozenset({DYNAMIC_SHAPE}),
        Advice(
            title="Keep the full shape: three-argument torch.where(mask, x, y), not nonzero",
            text=(
                "`torch.nonzero(mask)` / `torch.where(mask)` with one argument return as many "
                "rows as there are True values, so the host must wait to learn the count. "
                "Keep the full shape and mask the values with `torch.where` instead (a "
                "multiply by the mask keeps a NaN or inf from a masked position). "
                "`torch.nonzero_static(mask, size=K)` has a fixed shape too, but pads with "
                "`fill_value` (-1 by default, which indexes the last element: mask those rows "
                "out) and silently drops matches beyond K. Where only their number is used "
                "(`torch.where(m)[0].numel()`, `len(m.nonzero())`), `m.sum()` counts them on "
                "the device."
            ),
            before=(
                "idx = torch.nonzero(target != ignore)\n"
                "loss = per_pixel[idx[:, 0], idx[:, 1]].mean()\n"
            ),
            after=(
                "valid = target != ignore\n"
                "loss = torch.where(valid, per_pixel, 0.0).sum() / valid.sum().clamp_min(1)\n"
                "# (no valid pixel: 0, where the mean of none was NaN)\n"
            ),
        ),
    ),
    OpAdvice(
        frozenset(
            {
                "aten::unique",
                "aten::_unique",
                "aten::_unique2",
                "aten::unique_dim",
                "aten::unique_consecutive",
                "aten::unique_dim_consecutive",
            }
        ),
        frozenset({DYNAMIC_SHAPE}),
        Advice(
            title="Count into a fixed-size tensor instead of unique",
            text=(
                "`torch.unique` returns a data-dependent number of values, which makes the "
                "host wait. When the value range is known, count with `scatter_add_` into a "
                "tensor of `num_classes` zeros (fixed size, no sync). Not `torch.bincount`: "
                "on CUDA it reads the input's min and max back to the host."
            ),
            before="labels, counts = torch.unique(target, return_counts=True)\n",
            after=(
                "flat = target.flatten().long()   # scatter_add_ indexes with int64\n"
                "counts = torch.zeros(num_classes, dtype=torch.long, device=flat.device)\n"
                "counts.scatter_add_(0, flat, torch.ones_like(flat))\n"
                "present = counts > 0   # fixed shape, stays on the GPU\n"
            ),
        ),
    ),
    OpAdvice(
        frozenset({"aten::index", "aten::index_put_", "aten::index_put", "aten::masked_select"}),
        frozenset({DYNAMIC_SHAPE}),
        Advice(
            title="Replace the boolean mask with ignore_index or torch.where",
            text=(
                "Indexing with a boolean mask (`x[mask]`, `masked_select`) produces a "
                "data-dependent shape and waits for the GPU. For losses use "
                "`CrossEntropyLoss(ignore_index=...)`; elsewhere use `torch.where` or "
                "`masked_fill` so shapes stay fixed (not a multiply by the mask: a NaN or inf "
                "at a masked position survives it)."
            ),
            before=(
                "keep = target != 255\n"
                "loss = F.cross_entropy(logits.permute(0, 2, 3, 1)[keep], target[keep])\n"
            ),
            after="loss = F.cross_entropy(logits, target, ignore_index=255)\n",
        ),
    ),
    OpAdvice(
        frozenset({"aten::repeat_interleave"}),
        frozenset({DYNAMIC_SHAPE}),
        Advice(
            title="Pass output_size to repeat_interleave",
            text=(
                "`repeat_interleave(repeats)` must read the sum of `repeats` on the host. "
                "When you know the total, pass `output_size=` and it stays asynchronous. It "
                "must equal `repeats.sum()` exactly: on CUDA a wrong value is a device-side "
                "assert, not an error you can catch."
            ),
            before="out = x.repeat_interleave(repeats, dim=0)\n",
            after="out = x.repeat_interleave(repeats, dim=0, output_size=total)\n",
        ),
    ),
    OpAdvice(
        frozenset({"c10d::barrier"}),
        frozenset({COLLECTIVE_WAIT}),
        Advice(
            title="Keep dist.barrier() out of the training step",
            text=(
                "`dist.barrier()` makes every rank wait for the slowest and, with NCCL, "
                "synchronizes the host with the current stream. Collectives already order the "
                "ranks' work: drop the "
                "barrier from the loop (keep it around checkpointing or setup if needed)."
            ),
            before="loss.backward()\ndist.barrier()          # every step\nopt.step()\n",
            after="loss.backward()\nopt.step()\n",
        ),
    ),
    OpAdvice(
        frozenset({"aten::normal"}),
        frozenset({SCALAR_READBACK}),
        Advice(
            title="Sample as mean + std * noise, not torch.normal(mean, std)",
            text=(
                "`torch.normal(mean, std)` with a tensor `std`, and `Normal(...).sample()`, "
                "which calls it, check on the host that no std is negative: read-backs that "
                "wait for the GPU on every call. Draw the noise at the broadcast shape and "
                "scale it: `(mean + std * torch.randn(torch.broadcast_shapes(mean.shape, "
                "std.shape), device=std.device, dtype=std.dtype)).detach()` (not "
                "`randn_like(std)`, which reuses one noise row where `mean` has more rows; "
                "`.detach()` keeps `torch.normal`'s zero gradients: drop it only to train "
                "through the sample). For a distribution object, `rsample().detach()` does "
                "that."
            ),
            before="action = policy.sample()            # torch.normal: checks std on the host\n",
            after="action = policy.rsample().detach()  # loc + scale * noise, no check\n",
        ),
    ),
    OpAdvice(
        frozenset({"aten::linalg_eigh", "aten::_linalg_eigh", "aten::linalg_eigvalsh"}),
        frozenset({SCALAR_READBACK, DEVICE_TO_HOST_COPY}),
        Advice(
            title="Call torch.linalg.eigh less often",
            text=(
                "`torch.linalg.eigh` and `eigvalsh` wait for the GPU inside the "
                "decomposition: on an H200 one 256 x 256 `eigh` copied to the host and "
                "waited 13 times, 2.2 ms in all, and it checks its error code on the host "
                "too. No `_ex` form avoids that. Refresh the decomposition every N steps, "
                "as preconditioners and whitening do. A batched call waits once only for "
                "small matrices (up to 32 x 32, cuSOLVER's batched path); larger ones are "
                "decomposed one at a time."
            ),
            before=(
                "for step, batch in enumerate(loader):\n"
                "    evals, evecs = torch.linalg.eigh(cov)  # waits every step\n"
            ),
            after=(
                "for step, batch in enumerate(loader):\n"
                "    if step % 100 == 0:\n"
                "        evals, evecs = torch.linalg.eigh(cov)  # waits every 100 steps\n"
            ),
        ),
    ),
    OpAdvice(
        # The functions that have an ``_ex`` form (outermost in the chain, what was called;
        # ``torch.inverse`` and ``torch.cholesky`` are the older names of two of them).
        frozenset(
            {
                "aten::linalg_inv",
                "aten::inverse",
                "aten::linalg_solve",
                "aten::linalg_cholesky",
                "aten::cholesky",
                "aten::linalg_lu_factor",
                "aten::linalg_ldl_factor",
            }
        ),
        frozenset({SCALAR_READBACK, DEVICE_TO_HOST_COPY}),
        Advice(
            title="Use the torch.linalg _ex form and check its info later",
            text=(
                "`torch.linalg.inv`, `cholesky`, `solve`, `lu_factor` and `ldl_factor` read "
                "the factorization's error code (`info`) on the host after every call, "
                "waiting for the GPU to finish it. Their `_ex` forms (`inv_ex`, "
                "`cholesky_ex`, `solve_ex`, `lu_factor_ex`, `ldl_factor_ex`) return `info` "
                "as a device tensor instead: check it every N steps or with the logged "
                "loss, or not at all where the matrix is regularised to be well-formed "
                "(`+ eps * I`). On an H200 the `_ex` forms made torch's sync detector warn "
                "at none of their calls."
            ),
            before="L = torch.linalg.cholesky(cov)          # reads info on the host\n",
            after=(
                "L, info = torch.linalg.cholesky_ex(cov)  # info stays on the device\n"
                "# every N steps: assert not info.any(), 'cov not positive-definite'\n"
            ),
        ),
    ),
    OpAdvice(
        # A negative power inverts with ``linalg_inv`` inside: the ``_ex`` fix applies to
        # the inverse, which the user did not call by name.
        frozenset({"aten::linalg_matrix_power", "aten::matrix_power"}),
        frozenset({SCALAR_READBACK, DEVICE_TO_HOST_COPY}),
        Advice(
            title="Invert with inv_ex, then raise to a positive power",
            text=(
                "`torch.linalg.matrix_power` with a negative power inverts the matrix with "
                "`torch.linalg.inv`, which reads the inversion's error code (`info`) on the "
                "host and waits for the GPU. Invert with `torch.linalg.inv_ex`, whose "
                "`info` stays on the device (check it every N steps, or not at all where "
                "the matrix is regularised), and raise the inverse to the positive power."
            ),
            before="m = torch.linalg.matrix_power(a, -2)  # inverts, reads info on the host\n",
            after=(
                "inv_a, info = torch.linalg.inv_ex(a)    # info stays on the device\n"
                "m = torch.linalg.matrix_power(inv_a, 2)\n"
            ),
        ),
    ),
    OpAdvice(
        # The functions that wait and have no ``_ex`` form: the decompositions that copy
        # to the host inside (``svd``, ``eig``, and those that call them), and the other
        # functions that check an error code (``lstsq``), whichever is outermost.
        frozenset(
            {
                "aten::_linalg_check_errors",
                "aten::linalg_svd",
                "aten::_linalg_svd",
                "aten::svd",
                "aten::linalg_svdvals",
                "aten::linalg_eig",
                "aten::linalg_eigvals",
                "aten::_linalg_eigvals",
            }
        ),
        frozenset({SCALAR_READBACK, DEVICE_TO_HOST_COPY}),
        Advice(
            title="Call this torch.linalg function less often",
            text=(
                "This `torch.linalg` function waits for the GPU on every call and has no "
                "`_ex` form that stays on the device. `svd` and `svdvals` (and `pinv`, "
                "`matrix_rank`, `cond` and `matrix_norm(ord=2)`, which call them), `eig` "
                "and `eigvals` copy to the host and wait inside the decomposition, many "
                "times a call (on an H200 a 128 x 128 `svd` 15 times, `eig` about 170); "
                "`lstsq` reads its solver's error code on the host. Call it every N steps "
                "rather than every step. A batched call of small matrices (up to 32 x 32, "
                "cuSOLVER's batched path) waits once; larger ones are still decomposed, and "
                "waited for, one matrix at a time."
            ),
            before=(
                "for step, batch in enumerate(loader):\n"
                "    s = torch.linalg.svdvals(w)  # waits every step\n"
            ),
            after=(
                "for step, batch in enumerate(loader):\n"
                "    if step % 100 == 0:\n"
                "        s = torch.linalg.svdvals(w)  # waits every 100 steps\n"
            ),
        ),
    ),
    OpAdvice(
        frozenset({"aten::is_nonzero"}),
        frozenset({DYNAMIC_SHAPE, SCALAR_READBACK}),
        Advice(
            title="Do not branch on a GPU tensor",
            text=(
                "`if t:`, `while t:`, `bool(t)` and `assert t` read the tensor on the host. "
                "Express the condition with `torch.where` or an operator that needs no "
                "branch, check it every N steps, or turn an `assert t` into "
                "`torch._assert_async(t)`, which fails on the device."
            ),
            before="if (loss > 10).any():\n    loss = loss.clamp(max=10)\n",
            after="loss = loss.clamp(max=10)   # no branch: the same result\n",
        ),
    ),
    OpAdvice(
        frozenset({"aten::equal"}),
        frozenset({SCALAR_READBACK}),
        Advice(
            title="Compare on the device: (a == b).all() instead of torch.equal",
            text=(
                "`torch.equal(a, b)` returns a Python bool, so on a GPU it reads "
                "`(a == b).all()` back to the host and waits. `(a == b).all()` is the same "
                "answer as a device tensor: keep it there, combine it with `torch.where`, or "
                "read it only when you log. Where the shapes may differ, compare them first "
                "(`a.shape == b.shape` reads nothing). Where the answer picks a branch or "
                "raises (`if torch.equal(x1, x2):`, a check), `(a == b).all()` has to be read "
                "back as well: decide it without the values (`x1 is x2`, a flag the caller "
                "passes), compute both outcomes with `torch.where`, or check every N steps; "
                "an `assert` of it, a library's too, is skipped under `python -O`."
            ),
            before="if not torch.equal(pred, target):\n    mismatches += 1\n",
            after="mismatches += (pred != target).any()  # a device tensor (same shapes)\n",
        ),
    ),
    # torch's own backward of ``cumprod`` reads ``(input == 0).any()`` on the host, on every
    # device (``cumprod_backward`` in FunctionsManual.cpp), to pick its formula: the forward
    # line reads nothing (nerf-pytorch's transmittance, a walk, got the ``.item()`` fix).
    OpAdvice(
        frozenset({"aten::cumprod_backward"}),
        frozenset({SCALAR_READBACK}),
        Advice(
            title="For a positive input, cumprod as exp(cumsum(log(x)))",
            text=(
                "The backward of `torch.cumprod` checks its input for zeros on the host "
                "(`(input == 0).any().item()`), waiting for the GPU in every backward pass; "
                "no argument avoids it. Where the input is positive (probabilities, "
                "transmittances `1 - alpha + eps`), `torch.exp(torch.cumsum(torch.log(x), "
                "dim))` gives the same values and a backward that reads nothing. Where it may "
                "hold zeros, the read stays: keep cumprod."
            ),
            before="t = torch.cumprod(x, dim=-1)\n",
            after="t = torch.exp(torch.cumsum(torch.log(x), dim=-1))  # x > 0\n",
        ),
    ),
    # Operators that read a value back inside when an argument is left out (the number of
    # classes, the range): the fix is to pass it.
    OpAdvice(
        frozenset({"aten::one_hot"}),
        frozenset({SCALAR_READBACK}),
        Advice(
            title="Pass num_classes to one_hot",
            text=(
                "`F.one_hot(x)` without `num_classes` reads `x.max()` on the host to size its "
                "output, waiting for the GPU. Pass `num_classes=` and on CUDA it reads "
                "nothing. (On the CPU one_hot reads the range either way, to check it, so a "
                "CPU trace recorded without `record_shapes` shows this read with "
                "`num_classes` too: with it, the recorded inputs tell them apart.)"
            ),
            before="onehot = F.one_hot(labels)\n",
            after="onehot = F.one_hot(labels, num_classes=num_classes)\n",
        ),
    ),
    OpAdvice(
        frozenset({"aten::bincount"}),
        frozenset({SCALAR_READBACK, DEVICE_TO_HOST_COPY}),
        Advice(
            title="Count with scatter_add_ into a fixed-size tensor, not bincount",
            text=(
                "`torch.bincount` on CUDA reads the input's min and max on the host to size "
                "its output, with or without `minlength`. When the number of classes is "
                "known, count with `scatter_add_` (or `index_add_`) into a tensor of that "
                "size: no read, a fixed shape."
            ),
            before="counts = torch.bincount(labels, minlength=num_classes)\n",
            after=(
                "idx = labels.long()\n"
                "counts = torch.zeros(num_classes, dtype=torch.long, device=idx.device)\n"
                "counts.scatter_add_(0, idx, torch.ones_like(idx))\n"
            ),
        ),
    ),
    OpAdvice(
        frozenset({"aten::histc"}),
        # On CUDA the range is copied back (DtoH), on the CPU read as a scalar.
        frozenset({SCALAR_READBACK, DEVICE_TO_HOST_COPY}),
        Advice(
            title="Pass min and max to histc",
            text=(
                "`torch.histc(x, bins)` with the default `min=max=0` reads the input's min and "
                "max on the host to find its range, waiting for the GPU. Pass the range "
                "(`min=`, `max=`) when it is known: then it reads nothing."
            ),
            before="hist = torch.histc(x, bins=64)\n",
            after="hist = torch.histc(x, bins=64, min=-4.0, max=4.0)  # the known range\n",
        ),
    ),
    # A ctc_loss already on cuDNN's kernel: its own label uploads are in the chain, and the
    # wait, if any, is the mean reduction's (the episode takes the first call's chain).
    OpAdvice(
        frozenset({"aten::_cudnn_ctc_loss"}),
        frozenset({BLOCKING_HOST_TO_DEVICE}),
        Advice(
            title=CUDNN_CTC_TITLE,
            text=(
                "This `F.ctc_loss` already runs cuDNN's kernel. Its own small uploads of the "
                "labels show here as blocking copies but do not wait for the GPU's queue "
                "(measured on an H200, torch 2.11: under 40 us a step, nothing to save). With "
                "`reduction='mean'` (the default) torch then uploads the target lengths to "
                "divide by them, and that copy waits for all the work queued before the "
                "loss: use `reduction='none'` and take the mean on the device (a 45 ms step "
                "ran 1.4 ms faster). With `reduction='none'` or `'sum'` already, there is "
                "nothing to change."
            ),
            before=(
                "loss = F.ctc_loss(log_probs, flat, input_lengths, target_lengths)"
                "  # lists: cuDNN's\n"
            ),
            after=(
                "per_seq = F.ctc_loss(log_probs, flat, input_lengths, target_lengths,\n"
                "                     reduction='none')\n"
                "# lengths_tensor: the loader's target lengths (pin_memory=True), not a list\n"
                "divide = lengths_tensor.to(device, non_blocking=True).clamp_min(1)\n"
                "loss = (per_seq / divide).mean()  # what reduction='mean' gives\n"
            ),
            removes="the mean's upload of the target lengths (cuDNN's own uploads stay)",
        ),
    ),
    # Measured on an H200 (torch 2.11, docs/validation.md section 14): torch's own kernel
    # waits however it is called; cuDNN's, given lists, with no reduction, waits nothing
    # (a review found the one wait first put down to cuDNN: it was the mean's upload).
    OpAdvice(
        CTC_LOSS_OPS,
        frozenset({DEVICE_TO_HOST_COPY, SCALAR_READBACK, BLOCKING_HOST_TO_DEVICE}),
        Advice(
            title=CTC_TITLE,
            text=(
                "`F.ctc_loss` on CUDA waits for the GPU inside: torch's own kernel copies the "
                "targets and lengths between host and device with blocking copies however "
                "they are given (measured on an H200, torch 2.11: 8 waits a call with "
                "lengths as device tensors, 6 as CPU tensors, 5 as lists, and 3 more in its "
                "backward), and `reduction='mean'` uploads the target lengths to divide by "
                "them. cuDNN's kernel with `reduction='none'`, and the mean taken on the "
                "device, waits none (a 45 ms step ran about 2 ms faster); its own small uploads "
                "of the labels stay in the trace, but do not wait for the GPU's queue. torch "
                "takes it when cuDNN is enabled, the targets are one contiguous 1-D int32 "
                "tensor on the CPU, both lengths are Python lists, every input length is "
                "`log_probs.size(0)`, `blank=0`, `log_probs` is float32 and no target is "
                "longer than 255 labels or than its input; otherwise the same code runs "
                "torch's kernel with 4 waits (keep a `blank=` you pass: the code is right "
                "either way). (int32 lengths as device tensors reach cuDNN "
                "too, but torch reads them back to choose it: 20 waits.) Check your data "
                "first: where torch's kernel gives an empty target its loss and a target that "
                "cannot be aligned `inf`, cuDNN gives 0 for both."
            ),
            before=(
                "loss = F.ctc_loss(log_probs, targets.to(device),  # (N, S) padded\n"
                "                  input_lengths.to(device), target_lengths.to(device))\n"
            ),
            after=(
                "lengths = target_lengths.tolist()  # the loader's CPU tensors, never sent\n"
                "flat = torch.cat([t[:n] for t, n in zip(targets, lengths)]).int()\n"
                "# (targets already 1-D: flat = targets.int())\n"
                "per_seq = F.ctc_loss(log_probs, flat, input_lengths.tolist(), lengths,\n"
                "                     reduction='none')  # keep your zero_infinity=\n"
                "# reduction='mean' on the device (pin_memory=True in the loader: no wait)\n"
                "divide = target_lengths.to(device, non_blocking=True).clamp_min(1)\n"
                "loss = (per_seq / divide).mean()\n"
            ),
        ),
    ),
)


# A blocking host-to-device copy is fixed according to what was copied: the value of an
# indexed assignment (``target[inds] = -1``: torch builds the Python number as a CPU tensor
# and copies it inside index_put_), a CPU tensor used by a device operator, a few bytes built
# on the host each step (``torch.tensor([...]).to(device)``), or a batch (the kind's advice).
INDEX_PUT_OPS = frozenset({"aten::index_put_", "aten::index_put", "aten::_index_put_impl_"})
# At most this many bytes is a handful of Python numbers, not a batch (8 int64 labels are 64
# bytes: a batch that small gets this advice too, which says so).
SMALL_COPY_BYTES = 64

HOST_TO_DEVICE_ADVICE: dict[str, Advice] = {
    "indexed_assign": Advice(
        title="Assign the value on the device: index_fill_ or torch.where",
        text=(
            "`target[inds] = -1` with a Python number and an index tensor makes torch build "
            "`-1` as a CPU tensor and copy it to the GPU inside `index_put_`, waiting for the "
            "copy. Methods that take the number as an argument copy nothing: "
            "`target.index_fill_(0, inds, -1)`, `torch.where(mask, -1, target)`; or build the "
            "value on the device once and pass it to `index_put_`. (With a boolean mask on "
            "the device, `target[mask] = -1` is already a `masked_fill_`: no copy.)"
        ),
        before="target[inds] = -1            # -1 is copied from the host every time\n",
        after="target.index_fill_(0, inds, -1)   # inds: an index tensor on the GPU\n",
    ),
    "cpu_tensor_in_device_op": Advice(
        title="Create the tensor on the device, once, instead of mixing in a CPU tensor",
        text=(
            "A CPU tensor used by an operator on GPU tensors (most often an index tensor: "
            "`x[:, idx]`) is copied to the GPU first, and the host waits for that copy. "
            "Create it on the device, once, outside the step, and reuse it; a single value "
            "can stay a Python number."
        ),
        before=(
            "for x in loader:\n"
            "    idx = torch.tensor([0, 2, 5])       # on the CPU\n"
            "    picked = x.to(device)[:, idx]        # copied to the GPU every step\n"
        ),
        after=(
            "idx = torch.tensor([0, 2, 5], device=device)   # once, before the loop\n"
            "for x in loader:\n"
            "    picked = x.to(device, non_blocking=True)[:, idx]\n"
        ),
    ),
    "small_copy": Advice(
        title="Build the small tensor on the device, outside the step",
        text=(
            "A copy of a few bytes each step is usually a tensor built from Python numbers "
            "(`torch.tensor([...]).to(device)`): it is staged from pageable memory and the "
            "host waits. `torch.tensor(..., device=device)` copies from the host the same "
            "way, so build such constants once, before the loop, or on the device with "
            "`torch.full` / `torch.arange` / `torch.zeros`, which need no host data. A "
            "batch this small: pin it and copy with `non_blocking=True`."
        ),
        before=(
            "for x, y in loader:\n"
            "    w = torch.tensor([0.2, 0.8]).to(device)   # every step\n"
            "    loss = F.cross_entropy(model(x), y, weight=w)\n"
        ),
        after=(
            "w = torch.tensor([0.2, 0.8], device=device)     # once\n"
            "for x, y in loader:\n"
            "    loss = F.cross_entropy(model(x), y, weight=w)\n"
        ),
    ),
}


def host_to_device_pattern(ops: list[str], nbytes: int | None) -> str | None:
    """Which ``HOST_TO_DEVICE_ADVICE`` a blocking host-to-device copy gets, from its
    operator chain (outermost first) and the bytes it copied; None: a batch copy (the
    kind's advice)."""
    if any(op in INDEX_PUT_OPS for op in ops):
        return "indexed_assign"
    if ops and ops[0] not in COPY_OPS:
        return "cpu_tensor_in_device_op"
    if nbytes is not None and 0 < nbytes <= SMALL_COPY_BYTES:
        return "small_copy"
    return None


# --- syncs made inside a library the user called ------------------------------------------


class LibraryAdvice(msgspec.Struct, frozen=True):
    """A fix for syncs whose stack runs a function of ``funcs`` in a library file ending in
    ``file``: the user called the library, whose code they do not change, so the fix is in
    how they call it."""

    file: str
    funcs: frozenset[str]
    advice: Advice
    # Only for syncs with one of these operators in their chain (empty: any).
    ops: frozenset[str] = frozenset()
    # Only where the frame just inside the matched one (the function it called) is in a
    # file whose path matches this (None: any).
    called_file: str | None = None
    # Only where the matched frame is the sync's innermost (but for frames a call passes
    # through): the read is that function's own, not one in a function it called. For a
    # training loop's function, whose frame is on the stack of every sync of the step.
    innermost: bool = False
    # Whether the matched frame keys the site, one site for the reads under it (Lightning's
    # ``to_item``, a helper its progress bar's and loggers' reads share). False for a
    # library's loop whose setting is the fix of the many functions it runs: each of those
    # stays a site of its own lines.
    keys_site: bool = True
    # A fix of the arguments of a model's call: only where the model (the outermost frame
    # whose file matches this; None: any) was called by the user's own line or by a file
    # matching ``model_callers``, not by another library that makes those arguments itself
    # (sentence-transformers' ``encode`` tokenizes and passes the attention mask).
    model: str | None = None
    model_callers: str | None = None
    # Frames around the model's that are its library's decorators of its ``forward``.
    model_wrappers: str | None = None
    # The fix of the library's own formatting of a tensor (a print's): it takes the place
    # of a print's fix, which every other entry leaves to the print.
    formats: bool = False


# Hugging Face Transformers checks whether an attention mask masks anything before SDPA
# (5.x: masking_utils; 4.x: modeling_attn_mask_utils, same function). Measured on an H200
# with transformers 5.17: one read per forward with a mask of ones, none without a mask.
# A Hugging Face model's files, the decorators transformers puts on their ``forward``, and
# the callers of a model whose batches are the user's: the
# user's own line (``model(**batch)``) or the Trainer (the user's dataset and collator).
# Not a library that tokenizes itself (a sentence-transformers walk, docs/validation.md
# section 29: its ``encode`` and its losses pass the mask they make), nor ``generate()``.
_HF_MODEL = r"(transformers/models/[^/]+|transformers_modules/.+)/modeling_[^/]+\.py$"
_HF_MODEL_WRAPPERS = r"transformers/utils/(generic|output_capturing)\.py$"
_HF_MASK_CALLERS = r"transformers/trainer\.py$"
_HF_MASK_ADVICE = Advice(
    title="Pass attention_mask=None when no sequence is padded",
    text=(
        "Before attention, Hugging Face Transformers reads on the host whether the attention "
        "mask masks anything (`_ignore_causal_mask_sdpa`; `_ignore_bidirectional_mask_sdpa` "
        "in an encoder such as BERT), to run SDPA without a mask: a read-back on every "
        "forward. When batches are not padded "
        "(fixed-length or packed sequences), do not pass the mask: a tokenizer returns one "
        "of ones anyway. With padded batches the read stays."
    ),
    before=(
        'batch = tokenizer(texts, return_tensors="pt").to(device)\n'
        "out = model(**batch)                 # attention_mask of ones: read on the host\n"
    ),
    after=(
        'batch = tokenizer(texts, return_tensors="pt").to(device)\n'
        'out = model(batch["input_ids"])     # no padding: no mask to check\n'
    ),
)

# transformers 5 runs an MoE model's experts through the ``forward`` its
# ``use_experts_implementation`` decorator wraps them in (integrations/moe.py), whichever
# implementation is chosen: a read inside it is the eager expert loop's (grouped_mm reads
# none). Measured on an H200 with transformers 5.17 (docs/validation.md, section 15).
HF_EXPERTS_ADVICE = Advice(
    title="Run transformers' experts with grouped_mm, not the eager loop",
    text=(
        'With `experts_implementation="eager"`, the mixture-of-experts layers of Hugging '
        "Face Transformers loop over the experts that got tokens, and each pass reads the "
        "GPU back five times (the `if` on the expert's index, `torch.where` on its routing "
        "mask, three tensors indexed with the index, a GPU scalar), plus once per layer for "
        'the list of experts hit. `experts_implementation="grouped_mm"`, the default in '
        "transformers 5, sorts the tokens by expert and runs every expert in two grouped "
        "matmuls, reading nothing back in bfloat16 on an H100, H200 or later GPU (elsewhere "
        "torch's or transformers' fallback copies the offsets to the host once per grouped "
        "matmul: a few reads a layer instead of 5 per expert). Measured on "
        "an H200 (a Mixtral of 4 layers of 8 experts, bf16): 164 reads a step to none, "
        "100 ms to 37 ms a step. Its sums run in float32 where the loop's ran in bfloat16: "
        "results differ by rounding."
    ),
    before=(
        "model = AutoModelForCausalLM.from_pretrained(\n"
        '    name, experts_implementation="eager")   # 5 reads per expert and layer\n'
    ),
    after=(
        "model = AutoModelForCausalLM.from_pretrained(\n"
        '    name, experts_implementation="grouped_mm")\n'
        '# a model already built: model.set_experts_implementation("grouped_mm")\n'
    ),
)

# Hugging Face Transformers' Trainer checks each step's loss for NaN and inf on the host,
# in its training loop's own code (``torch.isnan(tr_loss_step) or torch.isinf(...)``:
# ``_run_epoch`` in 5.x, ``_inner_training_loop`` in 4.x), to leave such a loss out of the
# logged average. Checked with transformers 5.24 (a CPU run's latent reads, docs/validation.md
# section 18): 3 reads a step with the default, 1 with the filter off.
_HF_TRAINER_NAN_FILTER_ADVICE = Advice(
    title="Pass logging_nan_inf_filter=False to TrainingArguments",
    text=(
        "Trainer checks every step's loss for NaN and inf on the host (`torch.isnan(loss) or "
        "torch.isinf(loss)`, with `logging_nan_inf_filter=True`, the default), to leave such "
        "a loss out of the loss it logs: a read-back per step that waits for the step's "
        "forward and backward. The check only touches the logged average, not training: "
        "`TrainingArguments(logging_nan_inf_filter=False)` drops it (a NaN loss then shows "
        "in the log, which is where you want to see it)."
    ),
    before="args = TrainingArguments(output_dir=out)   # checks every loss on the host\n",
    after="args = TrainingArguments(output_dir=out, logging_nan_inf_filter=False)\n",
)

# Trainer's logging step reads the loss summed since the last log and the gradient norm
# (``tr_loss ... .mean().item()``, ``grad_norm.item()`` in ``_maybe_log_save_evaluate``).
_HF_TRAINER_LOGGING_ADVICE = Advice(
    title="Log less often: raise logging_steps",
    text=(
        "On each logging step Trainer reads on the host the loss summed since the last log "
        "and the gradient norm (`.item()` in `_maybe_log_save_evaluate`): each read waits for "
        "all the work queued. With `logging_steps=1` that is every step. Log every 50 to 500 "
        "steps (`logging_steps`; 500 by default): the logged loss is still the mean over the "
        "steps since the last log."
    ),
    before="args = TrainingArguments(output_dir=out, logging_steps=1)   # reads every step\n",
    after="args = TrainingArguments(output_dir=out, logging_steps=100)\n",
)

# ``generate()`` decides after each new token whether every sequence has finished:
# ``StopCheck.__call__`` reads ``bool(unfinished_sequences.max() == 0)`` in transformers 5
# (a read one token late, ``DeferredStopCheck``, only on Apple's MPS), 4.x reads the same flag
# in ``_has_unfinished_sequences``. One read per token, whatever the batch.
_HF_GENERATE_STOP_ADVICE = Advice(
    title="generate() reads whether to stop after every token: batch the prompts",
    text=(
        "After each new token, `generate()` reads on the host whether every sequence has "
        "finished (`bool(unfinished_sequences.max() == 0)`), so the host waits for each "
        "token's forward pass before it queues the next. The read is transformers', not your "
        "code's, and no `generate()` argument removes it on CUDA (transformers reads it a "
        "token late only on Apple's MPS). It is one read per token whatever the batch: "
        "generating for many prompts in one call makes the same reads serve all of them."
    ),
    before=(
        "for prompt in prompts:   # one read per token per prompt\n"
        '    batch = tokenizer(prompt, return_tensors="pt").to(device)\n'
        "    out = model.generate(**batch, max_new_tokens=64)\n"
    ),
    after=(
        'tokenizer.padding_side = "left"   # a decoder-only model pads on the left\n'
        'batch = tokenizer(prompts, return_tensors="pt", padding=True).to(device)\n'
        "out = model.generate(**batch, max_new_tokens=64)   # one read per token for all\n"
    ),
    removes="reads per prompt: one read per token serves the whole batch",
)

# Lightning's ``ModelCheckpoint`` formats its file name from its monitor candidates when it
# saves (``_format_checkpoint_name``: ``filename.format(...)``): ``epoch`` and ``step`` are
# tensors it makes on the host (``torch.tensor(trainer.current_epoch)``), a metric named in
# ``filename=`` is the logged tensor. A walk of lightly's Lightning MoCo: its default name,
# read once an epoch, was told "Do not print device tensors inside the step".
_LIGHTNING_CHECKPOINT_NAME_ADVICE = Advice(
    title="Lightning's checkpoint name: epoch and step are read on the host, once a save",
    text=(
        "`ModelCheckpoint` formats its file name (`{epoch}-{step}` by default) each time it "
        "saves. `epoch` and `step` are tensors Lightning makes on the host: their reads wait "
        "for no GPU, and a CPU trace cannot tell them from a metric's. A metric named in "
        "`filename=` (`{val_loss:.2f}`) is read where it was logged, once a save: save less "
        "often (`every_n_epochs`, `every_n_train_steps`), or leave it out of the name."
    ),
    before='ModelCheckpoint(filename="{epoch}-{val_loss:.2f}", every_n_train_steps=1)\n',
    after='ModelCheckpoint(filename="{epoch}-{step}", every_n_train_steps=1000)\n',
    removes="a metric's read at every save",
)

# Lightning turns every tensor logged with ``prog_bar=True`` into a number each training
# step (``_ResultCollection.metrics``: ``convert_tensors_to_scalars``, an ``.item()``), for
# the bar, shown or not; and every logged tensor when it writes the loggers (``log_metrics``,
# each ``log_every_n_steps`` steps, and at an epoch's end). Checked with lightning 2.6 on CPU
# traces (docs/validation.md, section 18): ``prog_bar=False`` left no read in the steps.
_LIGHTNING_PROGRESS_BAR_ADVICE = Advice(
    title="Drop prog_bar=True from values Lightning logs every step",
    text=(
        "Lightning turns every tensor you `self.log(..., prog_bar=True)` into a Python number "
        "(`.item()`) every training step, to show it in the progress bar, and does so with "
        "the bar hidden too (`enable_progress_bar=False`): each read waits for the step's GPU "
        "work. Leave `prog_bar` off for values logged every step: the loggers still get them, "
        "read only when they are written (every `log_every_n_steps` steps)."
    ),
    before='self.log("train_loss", loss, prog_bar=True)   # read every step\n',
    after='self.log("train_loss", loss)   # written (and read) every log_every_n_steps steps\n',
)
_LIGHTNING_LOGGER_ADVICE = Advice(
    title="Write Lightning's logs less often: raise log_every_n_steps",
    text=(
        "When Lightning writes what you `self.log` to its loggers it turns each tensor into a "
        "Python number (`.item()`), waiting for the GPU: every `log_every_n_steps` steps "
        "(50 by default) for values logged on each step, and at an epoch's end for those "
        "logged `on_epoch`. With `Trainer(log_every_n_steps=1)` that is every step."
    ),
    before="trainer = Trainer(log_every_n_steps=1)    # reads the logged values every step\n",
    after="trainer = Trainer(log_every_n_steps=50)   # the default\n",
)

# torchmetrics checks a classification metric's inputs on the host in every ``update()``
# while ``validate_args`` is on (the default): how many distinct values the targets and
# integer predictions hold (``len(torch.unique(t))``), whether binary labels are 0 or 1.
# Read in torchmetrics 1.9 (``classification/stat_scores.py``: ``if self.validate_args:``).
_TORCHMETRICS_VALIDATION_ADVICE = Advice(
    title="Build torchmetrics' metrics with validate_args=False",
    text=(
        "With `validate_args=True`, the default, a torchmetrics classification metric "
        "(`Accuracy`, `F1Score`, `Precision`, `AUROC`, `StatScores`, ...) checks every "
        "`update()`'s "
        "inputs on the host: the distinct values of the targets and of integer predictions "
        "(`torch.unique`), whether binary labels are 0 or 1. Each check reads the GPU back. "
        "Check the inputs once while developing, then build the metric with "
        "`validate_args=False`."
    ),
    before='acc = Accuracy(task="multiclass", num_classes=10)   # checks every update\n',
    after='acc = Accuracy(task="multiclass", num_classes=10, validate_args=False)\n',
)

# torchmetrics' aggregations (``MeanMetric``, ``SumMetric``, ...) look for NaN in every
# ``update()`` (``if nans.any() or nans_weight.any():`` in ``_cast_and_nan_check_input``)
# unless ``nan_strategy="disable"``. Checked on a CPU trace of torchmetrics 1.9
# (docs/validation.md, section 27): the reads gone, the results the same.
_TORCHMETRICS_NAN_ADVICE = Advice(
    title='Build torchmetrics\' aggregations with nan_strategy="disable"',
    text=(
        "A torchmetrics aggregation (`MeanMetric`, `SumMetric`, `MaxMetric`, ...) looks for "
        "NaN in every `update()`'s values (`nans.any()`), a read-back per update, to warn, "
        "drop or raise. Where the values hold no NaN, or a NaN should show in the result, "
        'build it with `nan_strategy="disable"`: no check, no read.'
    ),
    before="mean_loss = MeanMetric()               # checks every update for NaN\n",
    after='mean_loss = MeanMetric(nan_strategy="disable")\n',
)

# PyTorch-Ignite's ``create_supervised_trainer`` returns ``loss.item()`` from every
# iteration by default (its ``output_transform``, a lambda in ``ignite/engine/__init__.py``).
# Checked on CPU traces of pytorch-ignite 0.5.5 (docs/validation.md, section 31): with
# ``loss.detach()`` returned, no read is left in the iterations.
_IGNITE_OUTPUT_TRANSFORM_ADVICE = Advice(
    title="Return the loss tensor from Ignite's trainer: output_transform=... loss.detach()",
    text=(
        "`create_supervised_trainer` turns every iteration's loss into a Python number "
        "(`output_transform` defaults to `lambda x, y, y_pred, loss: loss.item()`), a "
        "read-back that waits for the iteration's forward and backward. Pass an "
        "`output_transform` returning the tensor, and read it where you log it, every N "
        "iterations. A `ProgressBar` or `RunningAverage` given that output reads it on each "
        "event it is attached to: attach them every N iterations too."
    ),
    before="trainer = create_supervised_trainer(model, optimizer, loss_fn, device=device)\n",
    after=(
        "trainer = create_supervised_trainer(\n"
        "    model, optimizer, loss_fn, device=device,\n"
        "    output_transform=lambda x, y, y_pred, loss: loss.detach())\n"
        "\n"
        "@trainer.on(Events.ITERATION_COMPLETED(every=100))\n"
        "def log_loss(engine):\n"
        '    print(f"loss {engine.state.output.item():.4f}")   # one read per 100\n'
    ),
)

# Ignite's output handlers (``ProgressBar``, the TensorBoard, Visdom, ... loggers' output
# handlers) turn each 0-d tensor they show into a number (``handle_value_fn``'s
# ``value.item()`` in ``ignite/handlers/base_logger.py``) on every event they are attached
# to. Checked on CPU traces of pytorch-ignite 0.5.5 (docs/validation.md, section 31): 5
# reads in 5 iterations attached to every iteration, 1 with ``every=4``.
_IGNITE_HANDLER_EVERY_ADVICE = Advice(
    title="Attach Ignite's progress bar and loggers every N iterations, not every one",
    text=(
        "An Ignite output handler (`ProgressBar`, a TensorBoard or other logger's "
        "`OutputHandler`) turns each tensor it shows into a Python number (`.item()`) on "
        "every event it is attached to: every iteration by default, each read waiting for "
        "the GPU. Attach it to `Events.ITERATION_COMPLETED(every=N)`; the values it shows "
        "are then read once per N iterations."
    ),
    before='pbar.attach(trainer, output_transform=lambda out: {"loss": out})\n',
    after=(
        'pbar.attach(trainer, output_transform=lambda out: {"loss": out},\n'
        "            event_name=Events.ITERATION_COMPLETED(every=50))\n"
    ),
)

# Ignite's metrics keep their totals on ``device``, the CPU unless given one: each
# ``update()`` copies its batch's result there (``torch.sum(correct).to(self._device)``, a
# copy to the host and a wait per batch on a GPU, which a CPU run cannot show), and
# ``compute()`` reads the totals (``.item()``: a host read with the default device, one
# read per computation with ``device=device``). Read in pytorch-ignite 0.5.5
# (``metrics/accuracy.py``, ``loss.py``; docs/validation.md, section 31).
_IGNITE_METRIC_DEVICE_ADVICE = Advice(
    title="Build Ignite's metrics with device=device",
    text=(
        "An Ignite metric (`Accuracy`, `Loss`, ...) keeps its totals on "
        "its `device`, the CPU unless you pass one: on a GPU each `update()` then copies "
        "its batch's result to the host and waits for it, once per batch (a CPU trace "
        "cannot show those copies; what it shows is `compute()` reading the totals). With "
        "`device=device` the totals stay on the GPU and `compute()` reads them once, when "
        "the metric is computed."
    ),
    before=('metrics = {"acc": Accuracy(), "nll": Loss(loss_fn)}   # a copy per batch each\n'),
    after=('metrics = {"acc": Accuracy(device=device), "nll": Loss(loss_fn, device=device)}\n'),
)

# Lightning Fabric's ``clip_gradients`` passes ``error_if_nonfinite=True`` (its default) to
# ``clip_grad_norm_``, whose check of the norm then reads it every call (a Fabric walk).
_FABRIC_CLIP_ADVICE = Advice(
    title="Pass error_if_nonfinite=False to fabric.clip_gradients",
    text=(
        "Fabric's `clip_gradients` checks the gradients' norm for NaN and inf on the host "
        "(`error_if_nonfinite=True`, its default, unlike `clip_grad_norm_`'s): a read-back per "
        "call that waits for the backward pass. Pass `error_if_nonfinite=False`; where a "
        "non-finite norm should stop the run, check the norm it returns every N steps."
    ),
    before="fabric.clip_gradients(model, optimizer, max_norm=1.0)   # reads every step\n",
    after=(
        "norm = fabric.clip_gradients(model, optimizer, max_norm=1.0, error_if_nonfinite=False)\n"
        "if step % 100 == 0 and not torch.isfinite(norm):   # one read per 100 steps\n"
        '    raise RuntimeError(f"non-finite gradient norm at step {step}")\n'
    ),
)

# PyKEEN's margin ranking loss pairs every positive with its negatives under LCWA with
# masks and ``nonzero`` (``process_lcwa_scores``: 4 reads a batch, 2 more in the backward);
# a pointwise loss takes the scores as they are. Checked on CPU traces of pykeen 1.11.1
# (docs/validation.md, section 31): ``loss="BCEWithLogits"`` left no read.
_PYKEEN_LCWA_LOSS_ADVICE = Advice(
    title='Train PyKEEN\'s LCWA loop with a pointwise loss: loss="BCEWithLogits"',
    text=(
        "Under the LCWA training loop, PyKEEN's margin ranking loss (the pipeline's default) "
        "pairs each positive with its negatives through boolean masks and `nonzero`: "
        "read-backs every batch, and again in the backward. A pointwise loss "
        '(`loss="BCEWithLogits"`, `"softplus"`) scores all entities as they are, with no '
        "read; or keep the margin loss with the sLCWA loop."
    ),
    before='pipeline(dataset=..., model="ComplEx", training_loop="LCWA")\n',
    after='pipeline(dataset=..., model="ComplEx", training_loop="LCWA", loss="BCEWithLogits")\n',
)
# PyKEEN's filtered evaluation finds the known triples of each batch with ``nonzero`` and
# checks the filtered scores, once per batch and side.
_PYKEEN_EVAL_BATCH_ADVICE = Advice(
    title="Evaluate PyKEEN with a larger batch_size: its reads are per evaluation batch",
    text=(
        "PyKEEN's filtered rank-based evaluation finds each batch's known triples with "
        "`nonzero` and checks the filtered scores on the host: read-backs once per batch "
        "and side. A larger evaluation `batch_size` (the stopper's `evaluation_batch_size`, "
        "and a lower `frequency` for early stopping) makes fewer of them."
    ),
    before="evaluator.evaluate(model, triples, batch_size=64)\n",
    after="evaluator.evaluate(model, triples, batch_size=1024)   # 16x fewer reads\n",
)

# GPyTorch's ``ExactGP.__call__`` compares the inputs with the training data element by
# element (``torch.equal``, a read-back each) to catch calling a model in training mode on
# other data, or in eval mode on its own, only under ``gpytorch.settings.debug``, on by
# default. A GPyTorch walk's CPU trace (docs/validation.md, section 28): one read a call
# gone with the setting off, the loss the same.
_GPYTORCH_DEBUG_ADVICE = Advice(
    title="Turn GPyTorch's debug checks off: gpytorch.settings.debug(False)",
    text=(
        "An `ExactGP` model compares its inputs with its training data (`torch.equal`, a "
        "read-back) on every call, to warn when it is called on the wrong data for its mode; "
        "`gpytorch.settings.debug` runs those checks and is on by default. Once the "
        "training loop is known to pass the training inputs, run it (and prediction) with "
        "the setting off."
    ),
    before="output = model(train_x)\n",
    after="with gpytorch.settings.debug(False):\n    output = model(train_x)\n",
)

# Whisper's decoding applies its timestamp rules to every token of every sample (a mask
# and two truth tests read back each, ``ApplyTimestampRules.apply``). A Whisper walk's CPU
# trace (docs/validation.md, section 28): with ``without_timestamps=True`` (and a language
# given, which skips its detection) the reads a step went from 81 to 22.
_WHISPER_TIMESTAMPS_ADVICE = Advice(
    title="Decode with without_timestamps=True where no timestamps are needed",
    text=(
        "Whisper applies its timestamp rules to the logits of every token it decodes, each "
        "time reading back which tokens were timestamps and whether a timestamp is likely: "
        "several read-backs a token. Where the text alone is wanted, decode without "
        "timestamps (`DecodingOptions(without_timestamps=True)`, or "
        "`model.transcribe(audio, without_timestamps=True)`): the rules are not applied."
    ),
    before='options = whisper.DecodingOptions(language="en")\n',
    after='options = whisper.DecodingOptions(language="en", without_timestamps=True)\n',
)

# torchdiffeq's adaptive solvers (dopri5, the default) accept or reject each step on the
# host: the error norm, the new step size and the interpolation points are read back every
# solver step, so the reads grow with the steps the tolerances ask for. A torchdiffeq walk's
# CPU traces (docs/validation.md, section 28): ode_demo's solve 85.4 reads a step with dopri5
# at rtol 1e-7, 28 with rk4 at a step of 0.05, the training still converging.
_TORCHDIFFEQ_ADAPTIVE_ADVICE = Advice(
    title="Take fewer solver steps: looser rtol/atol, or a fixed-step method",
    text=(
        "torchdiffeq's adaptive solvers (`dopri5`, the default) read back the error of every "
        "step they try, to accept it and size the next: reads grow with the number of "
        "steps. Looser tolerances (`rtol`, `atol`) take fewer steps; a fixed-step method "
        "(`method='rk4', options=dict(step_size=...)`) sets its steps in advance and reads "
        "less a step. Both change the solution's accuracy: check the loss."
    ),
    before="pred_y = odeint(func, batch_y0, batch_t)\n",
    after=(
        "pred_y = odeint(func, batch_y0, batch_t, method='rk4', options=dict(step_size=0.05))\n"
    ),
)

# Pyro checks every sample site's log-probability for NaN and infinity (``warn_if_nan``,
# ``warn_if_inf``: a read-back each) while its validation is on, the default. A Pyro walk's
# CPU trace (docs/validation.md, section 28): SVI's reads a step 44.0 with it, 8.0 with
# ``pyro.enable_validation(False)``, the loss the same.
_PYRO_VALIDATION_ADVICE = Advice(
    title="Turn Pyro's validation off once the model runs: pyro.enable_validation(False)",
    text=(
        "With validation on (Pyro's default), every sample site's log-probability is checked "
        "for NaN and infinity and every distribution's arguments and samples are checked: "
        "read-backs at each site, each step. Once the model and guide run without "
        "warnings, turn it off for training; turn it on again to debug."
    ),
    before="for step in range(n_steps):\n    loss = svi.step(x, y)\n",
    after="pyro.enable_validation(False)\nfor step in range(n_steps):\n    loss = svi.step(x, y)\n",
)

# Above ``max_cholesky_size`` (800 points by default) GPyTorch solves with conjugate
# gradients, a Lanczos tridiagonalization and a pivoted-Cholesky preconditioner, each of
# which reads its convergence or its pivot back every iteration. The GPyTorch walk at 2,000
# points (docs/validation.md, section 28): with ``max_cholesky_size(2500)`` the training
# reads 164 to 13 in 5 steps, the prediction's 1,220 to 30, the loss about the same.
_GPYTORCH_CHOLESKY_ADVICE = Advice(
    title="Solve with Cholesky at this size: gpytorch.settings.max_cholesky_size(n)",
    text=(
        "Above `max_cholesky_size` (800 points by default) GPyTorch solves with conjugate "
        "gradients and Lanczos, which read their convergence back every iteration. Up to a "
        "few thousand points a Cholesky factorization, chosen by raising the setting above "
        "the training set's size, reads once a call instead; it takes O(n^3) time and "
        "O(n^2) memory: time both."
    ),
    before="loss = -mll(model(train_x), train_y)\n",
    after=(
        "with gpytorch.settings.max_cholesky_size(len(train_x) + 1):\n"
        "    loss = -mll(model(train_x), train_y)\n"
    ),
)

# pytorch-metric-learning's default reducer for its triplet and contrastive losses,
# ``AvgNonZeroReducer`` (a ``ThresholdReducer``), keeps the losses above zero with a boolean
# mask and counts them: a read each, and its backward another. A walk's CPU traces
# (docs/validation.md, section 28): ``reducer=MeanReducer()`` took a triplet loop from 7.6
# reads a step to 5.6, the loss now a mean over every triplet (0.108 to 0.036 at the start).
_PML_REDUCER_ADVICE = Advice(
    title="Average every loss: reducer=reducers.MeanReducer()",
    text=(
        "The loss's reducer (`AvgNonZeroReducer`, the default of most losses, or a "
        "`ThresholdReducer` given) keeps only the losses above zero or its threshold (a "
        "boolean mask, read back to size its result, in the forward and again in the "
        "backward) and averages those. `MeanReducer()`, given to whichever loss you use, "
        "averages every pair's or triplet's loss, zeros included: no mask, no read. It "
        "changes the loss's scale as training goes on (easy triplets count as zeros): check "
        "that the learning rate still suits it."
    ),
    before="loss_func = losses.TripletMarginLoss(margin=0.2)\n",
    after="loss_func = losses.TripletMarginLoss(margin=0.2, reducer=reducers.MeanReducer())\n",
)

# Hugging Face ``evaluate``'s ``add_batch`` converts what it is given to Python and NumPy
# (``datasets``' ``_cast_to_python_objects``: ``.detach().cpu().numpy()`` of each tensor),
# two copies to the host an evaluation batch in accelerate's examples (a walk).
_EVALUATE_ADD_BATCH_ADVICE = Advice(
    title="Keep the predictions on the device; give add_batch the whole pass at once",
    text=(
        "`metric.add_batch(predictions=..., references=...)` converts each tensor it is "
        "given to NumPy: a copy to the host per tensor per batch, each waiting for the "
        "GPU's queue. Collect the batches' predictions and references on the device and "
        "hand them to `add_batch` once after the loop (one copy each for the pass), or use "
        "a metric that accumulates on the device (torchmetrics)."
    ),
    before=(
        "for batch in eval_dataloader:\n"
        "    predictions = model(**batch).logits.argmax(dim=-1)\n"
        '    metric.add_batch(predictions=predictions, references=batch["labels"])\n'
    ),
    after=(
        "predictions, references = [], []\n"
        "for batch in eval_dataloader:\n"
        "    predictions.append(model(**batch).logits.argmax(dim=-1))\n"
        '    references.append(batch["labels"])\n'
        "metric.add_batch(predictions=torch.cat(predictions), references=torch.cat(references))\n"
    ),
    removes="every batch's copies but one for the pass",
)

# accelerate's ``check_trigger()`` all-reduces a flag on the device and reads it back
# (``flag_tensor.item()``): the read is the call's purpose, and how often it runs is the
# user's (a walk: ``if accelerator.check_trigger(): break`` every batch of its
# early_stopping example was told to edit accelerate).
_ACCELERATE_TRIGGER_ADVICE = Advice(
    title="Check the trigger every N steps: if step % N == 0 and accelerator.check_trigger()",
    text=(
        "`accelerator.check_trigger()` reduces the trigger flag over the processes on the "
        "device and reads it back: one wait for the GPU's queue a call. Calling it every N "
        "steps (at the same steps on every process, as it reduces over them), or once an "
        "epoch, stops a little later at most and waits N times less often."
    ),
    before=(
        "for step, batch in enumerate(train_dataloader):\n"
        "    ...\n"
        "    if accelerator.check_trigger():\n"
        "        break\n"
    ),
    after=(
        "for step, batch in enumerate(train_dataloader):\n"
        "    ...\n"
        "    if step % 50 == 0 and accelerator.check_trigger():   # every process alike\n"
        "        break\n"
    ),
    removes="every check's read but one in N",
)

# Captum selects the target's output column in every forward of an attribution
# (``_select_targets``): a one-element target tensor is read there with ``target.item()``,
# twice a forward, where an int needs no read and a tensor of the batch's length is gathered
# on the device. A walk (Captum 0.9.0): 12 reads a step for one example's IntegratedGradients
# with ``internal_batch_size=4``, 106 of the 204 a step of nine attribution methods.
_CAPTUM_TARGET_ADVICE = Advice(
    title="Give Captum a one-element target as an int: target=int(pred)",
    text=(
        "Captum reads a one-element target tensor with `.item()` in every forward it runs "
        "for an attribution (each internal batch of integrated gradients' steps, each "
        "perturbation): each read waits for the GPU's queue. Read it once yourself and pass "
        "an int, or, for a batch of several examples, the tensor of one target per example "
        "(gathered on the device, no read)."
    ),
    before=(
        "target = model(x).argmax(1)   # one example: a one-element tensor\n"
        "attr = ig.attribute(x, target=target, internal_batch_size=4)\n"
    ),
    after=(
        "target = int(model(x).argmax(1))   # read once\n"
        "attr = ig.attribute(x, target=target, internal_batch_size=4)\n"
    ),
    removes="every forward's reads of the target but one",
)

# BoTorch checks a model's training data in its constructor (``validate_input_scaling``:
# ``check_no_nans``, ``check_min_max_scaling``, ``check_standardization``), reading each
# result back; ``settings.validate_input_scaling(False)`` skips them all (a walk of its closed
# loop, checked without the profiler: 6 reads a BO iteration, none with the setting).
_BOTORCH_INPUT_CHECKS_ADVICE = Advice(
    title="Skip BoTorch's input checks: with settings.validate_input_scaling(False)",
    text=(
        "A BoTorch model checks its training data when it is built (NaNs, inputs scaled to "
        "the unit cube, standardized outcomes), each check read back on the host. Once the "
        "data are known to be clean and scaled, build the model under "
        "`botorch.settings.validate_input_scaling(False)`: no check, no read."
    ),
    before="model = SingleTaskGP(train_x, train_y)\n",
    after=(
        "with botorch.settings.validate_input_scaling(False):\n"
        "    model = SingleTaskGP(train_x, train_y)\n"
    ),
    removes="the model's input checks' reads",
)

# torchtune's default loss for its recipes, ``LinearCrossEntropyLoss``, gathers the rows of
# valid tokens (``mask_inputs``: ``torch.where(target != ignore_index)[0]``) where
# ``mask_ignored_tokens=True`` (its default), and counts them on the host in ``forward``
# (``torch.where(...)[0].numel()``). A walk of its single-device recipes, checked without
# the profiler: ``loss.mask_ignored_tokens=False`` removes the gather's read,
# ``CEWithChunkedOutputLoss`` (which counts with ``(labels != ignore_index).sum()``) both.
_TORCHTUNE_MASK_ADVICE = Advice(
    title="Set mask_ignored_tokens=False on torchtune's LinearCrossEntropyLoss",
    text=(
        "With `mask_ignored_tokens=True`, its default, `LinearCrossEntropyLoss` gathers the "
        "rows of the tokens that are not ignored before the output projection: their number "
        "is read back on the host each step. With `False` the cross-entropy runs over every "
        "token, the ignored ones masked by `ignore_index`: the same loss, no read. In a "
        "recipe's config: `loss.mask_ignored_tokens=False`."
    ),
    before="loss:\n  _component_: torchtune.modules.loss.LinearCrossEntropyLoss\n",
    after=(
        "loss:\n  _component_: torchtune.modules.loss.LinearCrossEntropyLoss\n"
        "  mask_ignored_tokens: False\n"
    ),
    removes="the gather's read of the valid tokens",
)
_TORCHTUNE_COUNT_ADVICE = Advice(
    title="Use CEWithChunkedOutputLoss: it counts the valid tokens on the device",
    text=(
        "`LinearCrossEntropyLoss` counts the valid tokens on the host "
        "(`torch.where(targets != ignore_index)[0].numel()`) to normalise the loss, each "
        "step. torchtune's `CEWithChunkedOutputLoss` counts them on the device "
        "(`(labels != ignore_index).sum()`): in a recipe's config, "
        "`loss._component_=torchtune.modules.loss.CEWithChunkedOutputLoss`."
    ),
    before="loss:\n  _component_: torchtune.modules.loss.LinearCrossEntropyLoss\n",
    after="loss:\n  _component_: torchtune.modules.loss.CEWithChunkedOutputLoss\n",
    removes="the count's read (and the gather's)",
)

# Avalanche's training metrics: each of ``minibatch=True``, ``epoch=True`` and
# ``epoch_running=True`` (a review: avalanche-lib 0.6.0 updates every train-mode metric) in an
# ``EvaluationPlugin``'s ``accuracy_metrics``/``loss_metrics`` reads the iteration's value
# back (``float(...)``) in ``after_training_iteration``. A walk (avalanche-lib 0.6.0),
# checked without the profiler: 2.0 + 2.0 reads an iteration; 1.0 + 1.0 with
# ``minibatch=False``; none with ``epoch=False`` too (the experience and stream metrics are
# computed in eval).
_AVALANCHE_METRICS_ADVICE = Advice(
    title=(
        "Drop Avalanche's per-iteration metrics: minibatch=False, epoch=False, epoch_running=False"
    ),
    text=(
        "Each training metric of the `EvaluationPlugin` built with `minibatch=True`, "
        "`epoch=True` or `epoch_running=True` (`accuracy_metrics`, `loss_metrics`, ...) "
        "reads its value back on the host in every training iteration, one wait for the "
        "GPU's queue each. A minibatch or running metric has to be read every iteration; "
        "without the three (`minibatch=False, epoch=False, epoch_running=False`) the "
        "experience and stream metrics, computed in evaluation, remain and the iterations "
        "read nothing."
    ),
    before=(
        "EvaluationPlugin(\n"
        "    accuracy_metrics(minibatch=True, epoch=True, experience=True, stream=True),\n"
        "    loss_metrics(minibatch=True, epoch=True, experience=True, stream=True),\n"
        ")\n"
    ),
    after=(
        "EvaluationPlugin(\n"
        "    accuracy_metrics(experience=True, stream=True),\n"
        "    loss_metrics(experience=True, stream=True),\n"
        ")\n"
    ),
    removes="the training metrics' reads of every iteration",
)

# TransformerLens: ``model.to_single_token(" w")`` tokenizes a string and reads the token with
# ``.item()``, each call (a walk: twice per activation patch, inside the demos' metric); and an
# ``ActivationCache`` looked up with a tensor layer (``cache["attn", layer]`` of a loop over a
# tensor) compares it (``if key[1] < 0:``) each lookup.
_TLENS_SINGLE_TOKEN_ADVICE = Advice(
    title="Look the token up once, before the loop: tok = model.to_single_token(' w')",
    text=(
        "`to_single_token` tokenizes its string and reads the token's id back with "
        "`.item()` each call. A token of a fixed string is a constant: take it once before "
        "the loop (or the metric's closure) and use the int."
    ),
    before=("def metric(logits):\n    return logits[0, -1, model.to_single_token(' Mary')]\n"),
    after=(
        "mary = model.to_single_token(' Mary')   # once\n"
        "def metric(logits):\n"
        "    return logits[0, -1, mary]\n"
    ),
    removes="every call's read of the token",
)
_TLENS_TEST_PROMPT_ADVICE = Advice(
    title="Call test_prompt once, outside the loop: it prints each top token it reads",
    text=(
        "TransformerLens' `test_prompt` is a utility for looking at one prompt: it ranks the "
        "answer and prints the top tokens with their probabilities, reading each back with "
        "`.item()`. In a loop it reads them at every pass: call it once on the prompt you "
        "look at, or with `print_details=False`, and keep the loop's metric on the device."
    ),
    before="for prompt in prompts:\n    utils.test_prompt(prompt, answer, model)\n",
    after="utils.test_prompt(prompts[0], answer, model)   # once, to look\n",
    removes="the loop's reads of the printed tokens",
)
_TLENS_CACHE_KEY_ADVICE = Advice(
    title="Look the cache up with a Python int: cache['attn', int(layer)]",
    text=(
        "An `ActivationCache` lookup checks its layer (`if key[1] < 0:`): a layer given as "
        "a tensor (an element of a loop over a tensor) is read back there, each lookup. "
        "Give it a Python int: convert the tensor once (`for layer in layers.tolist():`)."
    ),
    before="for layer in top_layers:   # a tensor\n    pattern = cache['attn', layer]\n",
    after="for layer in top_layers.tolist():\n    pattern = cache['attn', layer]\n",
    removes="each lookup's read of the layer",
)

# sbi's posteriors reject samples outside the prior's support in a loop
# (``accept_reject_sample``), reading how many each pass accepted; ``log_prob`` estimates the
# leakage so for each new observation. A walk (sbi 0.27.0, NPE), checked without the
# profiler: ``reject_outside_prior=False`` and ``set_default_x`` took a sampling loop's reads
# from 20 a step to 1.
_SBI_REJECTION_ADVICE = Advice(
    title="Sample without rejection and fix the observation: reject_outside_prior=False",
    text=(
        "sbi's posterior rejects samples outside the prior's support in a loop, reading back "
        "how many each pass accepted (the loop's own test needs the number); `log_prob` "
        "runs such a loop to normalise for each new observation. Where the estimator's "
        "support fits the prior, `sample(..., reject_outside_prior=False)` skips the loop; "
        "`posterior.set_default_x(x_o)` normalises once for that observation, and "
        "`log_prob(..., norm_posterior=False)` not at all."
    ),
    before=(
        "for step in range(n):\n"
        "    theta = posterior.sample((200,), x=x_o)\n"
        "    lp = posterior.log_prob(theta, x=x_o)\n"
    ),
    after=(
        "posterior.set_default_x(x_o)\n"
        "for step in range(n):\n"
        "    theta = posterior.sample((200,), reject_outside_prior=False)\n"
        "    lp = posterior.log_prob(theta)\n"
    ),
    removes="the rejection loop's reads",
)

# pytorch-metric-learning's statistics: its miners, losses, reducers, regularizers and
# distances read a mean or a count back with ``.item()`` in these functions, each only under
# ``if self.collect_stats:`` (False unless passed, or set for all with
# ``c_f.COLLECT_STATS``). A walk (pytorch-metric-learning 2.8.1, ``PairMarginMiner(...,
# collect_stats=True)``): two reads a step in ``set_stats``, told "no setting is known".
_PML_COLLECT_STATS_ADVICE = Advice(
    title="Collect the statistics only when you log them: collect_stats=False",
    text=(
        "pytorch-metric-learning records its statistics (mean distances and angles, how many "
        "pairs passed a margin) only where `collect_stats=True` was passed to the miner, "
        "loss, reducer or distance, or set for all with `c_f.COLLECT_STATS = True`; each "
        "one is a `.item()` read back on the host on every call. Leave it off, the default, "
        "while training, or set the object's `collect_stats` only in the steps that log "
        "the statistics."
    ),
    before=(
        "miner = miners.PairMarginMiner(pos_margin=0.2, neg_margin=0.8, collect_stats=True)\n"
        "for step, (data, labels) in enumerate(loader):\n"
        "    pairs = miner(model(data), labels)\n"
    ),
    after=(
        "miner = miners.PairMarginMiner(pos_margin=0.2, neg_margin=0.8)\n"
        "for step, (data, labels) in enumerate(loader):\n"
        "    miner.collect_stats = step % log_every == 0   # read only when logged\n"
        "    pairs = miner(model(data), labels)\n"
    ),
    removes="the statistics' reads in the steps that do not log them",
)
_PML_STATS_FUNCTIONS = (
    ("miners/pair_margin_miner.py", "set_stats"),
    ("miners/triplet_margin_miner.py", "set_stats"),
    ("miners/batch_easy_hard_miner.py", "set_stats"),
    ("miners/angular_miner.py", "set_stats"),
    ("losses/angular_loss.py", "set_stats"),
    ("losses/tuplet_margin_loss.py", "set_stats"),
    ("losses/large_margin_softmax_loss.py", "get_angles"),
    ("regularizers/sparse_centers_regularizer.py", "set_stats"),
    ("reducers/threshold_reducer.py", "set_stats"),
    ("distances/base_distance.py", "set_default_stats"),
)

# Segment Anything's automatic mask generator runs its prompts in batches of
# ``points_per_batch`` per crop, and each batch filters its masks on the host (``MaskData.
# filter``'s boolean masks, ``if not torch.all(keep_mask)``, the prompt encoder's label
# masks, each mask's run lengths). A Segment Anything walk's CPU traces (docs/validation.md,
# section 28): with ``points_per_batch=16`` for 16 points (one batch per crop) those reads
# went from 150 to 75 in 5 steps, the masks the same. Its ``if`` is the cheap path: without
# it every batch filters 5 more keys (80 reads went to 120).
_SAM_BATCH_ADVICE = Advice(
    title="Raise points_per_batch: fewer batches, fewer reads per image",
    text=(
        "`SamAutomaticMaskGenerator` decodes its grid of points in batches of "
        "`points_per_batch` (64 by default) in every crop, and filters each batch's masks on "
        "the host: its boolean masks, `if not torch.all(keep_mask)` and each mask's run "
        "lengths read back once per batch. A larger `points_per_batch` (up to "
        "`points_per_side ** 2`, as the GPU's memory allows) runs fewer batches; "
        "`crop_n_layers=0` runs one crop, and higher `pred_iou_thresh` and "
        "`stability_score_thresh` keep fewer masks to encode. The masks are the same for "
        "the same thresholds."
    ),
    before="generator = SamAutomaticMaskGenerator(sam, points_per_side=32)\n",
    after=(
        "generator = SamAutomaticMaskGenerator(sam, points_per_side=32, points_per_batch=256)\n"
    ),
    removes="reads per batch: those of the batches no longer run",
)

# sentence-transformers' ``encode`` runs the model once per ``batch_size`` sentences (32 by
# default): every forward reads back whether the attention mask pads anything (Hugging
# Face's check; the mask is encode's own), and with ``convert_to_numpy=True`` (the default)
# each batch's embeddings are copied to the host. A sentence-transformers walk's CPU traces
# (docs/validation.md, section 29): ``convert_to_tensor=True`` took its copies away (180 to
# 90 reads logged in 5 steps), the same top hit found.
_ST_ENCODE_ADVICE = Advice(
    title="Encode in larger batches, and keep the embeddings on the device",
    text=(
        "`encode` runs the model once per `batch_size` sentences (32 by default), and every "
        "forward reads back whether its attention mask pads anything; with "
        "`convert_to_numpy=True`, the default, it also copies each batch's embeddings to "
        "the host. A larger `batch_size` runs fewer forwards (as the GPU's memory allows); "
        "`convert_to_tensor=True` keeps the embeddings on the device, where `util.cos_sim` "
        "and `util.semantic_search` take them as they are."
    ),
    before="embeddings = model.encode(sentences)\n",
    after="embeddings = model.encode(sentences, batch_size=256, convert_to_tensor=True)\n",
    removes="reads per batch: those of the batches no longer run, and the copies",
)

# TorchRL's ``TanhNormal`` (the PPO tutorial's policy distribution) checks on the host that
# tensor bounds have ``high > low`` every time it is built, once per action sampled, and
# whether they are the trivial -1 and 1 (``non_trivial_max``, read later). A TorchRL walk's
# CPU traces (docs/validation.md, section 29): with the bounds passed as Python numbers the
# first check compares numbers, 1,920 reads fewer in 5 steps, training and evaluation
# unchanged; the second stays.
_TORCHRL_TANH_BOUNDS_ADVICE = Advice(
    title="Pass TanhNormal's low and high as Python numbers",
    text=(
        "TorchRL's `TanhNormal` checks that tensor bounds have `high > low` on the host each "
        "time it is built: once per action the policy samples. Where the action bounds are "
        "one number for every dimension (`env.action_spec.space.low` all -2.0, say), pass "
        "them as Python numbers in `distribution_kwargs`: the check then compares numbers. "
        "Its test of whether the bounds are the trivial -1 and 1 still reads back."
    ),
    before=(
        'distribution_kwargs={"low": env.action_spec.space.low,\n'
        '                     "high": env.action_spec.space.high},\n'
    ),
    after=(
        'distribution_kwargs={"low": env.action_spec.space.low.min().item(),    # once\n'
        '                     "high": env.action_spec.space.high.max().item()},\n'
    ),
    removes="the bounds check's read each time a distribution is built",
)

LIBRARY_ADVICE: tuple[LibraryAdvice, ...] = (
    LibraryAdvice(
        "torchrl/modules/distributions/continuous.py",
        frozenset({"__init__"}),
        _TORCHRL_TANH_BOUNDS_ADVICE,
        innermost=True,
    ),
    # Each of encode's reads stays a site of its own lines.
    LibraryAdvice(
        "sentence_transformers/sentence_transformer/model.py",
        frozenset({"encode"}),
        _ST_ENCODE_ADVICE,
        keys_site=False,
    ),
    LibraryAdvice(
        "sentence_transformers/SentenceTransformer.py",
        frozenset({"encode"}),
        _ST_ENCODE_ADVICE,
        keys_site=False,
    ),
    LibraryAdvice(
        "segment_anything/automatic_mask_generator.py",
        frozenset({"_process_batch"}),
        _SAM_BATCH_ADVICE,
        keys_site=False,
    ),
    LibraryAdvice(
        "pytorch_metric_learning/reducers/threshold_reducer.py",
        frozenset({"element_reduction_helper"}),
        _PML_REDUCER_ADVICE,
    ),
    LibraryAdvice(
        "evaluate/module.py", frozenset({"add_batch", "add"}), _EVALUATE_ADD_BATCH_ADVICE
    ),
    LibraryAdvice(
        "accelerate/accelerator.py", frozenset({"check_trigger"}), _ACCELERATE_TRIGGER_ADVICE
    ),
    LibraryAdvice(
        "torchtune/modules/loss/cross_entropy_loss.py",
        frozenset({"mask_inputs"}),
        _TORCHTUNE_MASK_ADVICE,
        innermost=True,
    ),
    LibraryAdvice(
        "torchtune/modules/loss/cross_entropy_loss.py",
        frozenset({"forward"}),
        _TORCHTUNE_COUNT_ADVICE,
        innermost=True,
    ),
    LibraryAdvice(
        "transformer_lens/HookedTransformer.py",
        frozenset({"to_single_token"}),
        _TLENS_SINGLE_TOKEN_ADVICE,
        innermost=True,
    ),
    *(
        LibraryAdvice(file, frozenset({"test_prompt"}), _TLENS_TEST_PROMPT_ADVICE)
        for file in (
            "transformer_lens/utilities/exploratory_utils.py",
            "transformer_lens/utils.py",
        )
    ),
    LibraryAdvice(
        "transformer_lens/ActivationCache.py",
        frozenset({"__getitem__"}),
        _TLENS_CACHE_KEY_ADVICE,
        innermost=True,
    ),
    LibraryAdvice(
        "sbi/samplers/rejection/rejection.py",
        frozenset({"accept_reject_sample"}),
        _SBI_REJECTION_ADVICE,
    ),
    LibraryAdvice(
        "avalanche/evaluation/metric_definitions.py",
        frozenset({"after_training_iteration"}),
        _AVALANCHE_METRICS_ADVICE,
    ),
    LibraryAdvice(
        "botorch/models/utils/assorted.py",
        frozenset({"check_no_nans", "check_min_max_scaling", "check_standardization"}),
        _BOTORCH_INPUT_CHECKS_ADVICE,
    ),
    LibraryAdvice(
        "captum/_utils/common.py",
        frozenset({"_select_targets"}),
        _CAPTUM_TARGET_ADVICE,
        innermost=True,
    ),
    *(
        LibraryAdvice(
            f"pytorch_metric_learning/{file}",
            frozenset({func}),
            _PML_COLLECT_STATS_ADVICE,
            innermost=True,
        )
        for file, func in _PML_STATS_FUNCTIONS
    ),
    LibraryAdvice(
        "linear_operator/utils/linear_cg.py",
        frozenset({"linear_cg"}),
        _GPYTORCH_CHOLESKY_ADVICE,
        innermost=True,
    ),
    LibraryAdvice(
        "linear_operator/utils/lanczos.py",
        frozenset({"lanczos_tridiag"}),
        _GPYTORCH_CHOLESKY_ADVICE,
        innermost=True,
    ),
    LibraryAdvice(
        "linear_operator/functions/_pivoted_cholesky.py",
        frozenset({"forward"}),
        _GPYTORCH_CHOLESKY_ADVICE,
        innermost=True,
    ),
    LibraryAdvice(
        "pyro/util.py", frozenset({"warn_if_nan", "warn_if_inf"}), _PYRO_VALIDATION_ADVICE
    ),
    # Each for the reads of its own function's code, which stay sites of their own lines.
    LibraryAdvice(
        "torchdiffeq/_impl/rk_common.py",
        frozenset({"_advance", "_adaptive_step", "_runge_kutta_step"}),
        _TORCHDIFFEQ_ADAPTIVE_ADVICE,
        innermost=True,
    ),
    LibraryAdvice(
        "torchdiffeq/_impl/misc.py",
        frozenset({"_optimal_step_size"}),
        _TORCHDIFFEQ_ADAPTIVE_ADVICE,
        innermost=True,
    ),
    LibraryAdvice(
        "torchdiffeq/_impl/interp.py",
        frozenset({"_interp_evaluate"}),
        _TORCHDIFFEQ_ADAPTIVE_ADVICE,
        innermost=True,
    ),
    LibraryAdvice("whisper/decoding.py", frozenset({"apply"}), _WHISPER_TIMESTAMPS_ADVICE),
    LibraryAdvice(
        "gpytorch/models/exact_gp.py",
        frozenset({"<genexpr>"}),
        _GPYTORCH_DEBUG_ADVICE,
        frozenset({"aten::equal"}),
    ),
    LibraryAdvice(
        "transformers/masking_utils.py",
        frozenset({"_ignore_causal_mask_sdpa", "_ignore_bidirectional_mask_sdpa"}),
        _HF_MASK_ADVICE,
        model=_HF_MODEL,
        model_callers=_HF_MASK_CALLERS,
        model_wrappers=_HF_MODEL_WRAPPERS,
    ),
    LibraryAdvice(
        "torchmetrics/functional/classification/stat_scores.py",
        frozenset(
            {
                "_binary_stat_scores_tensor_validation",
                "_multiclass_stat_scores_tensor_validation",
                "_multilabel_stat_scores_tensor_validation",
            }
        ),
        _TORCHMETRICS_VALIDATION_ADVICE,
    ),
    # AUROC, ROC and the precision-recall curves check their inputs the same way
    # (``len(torch.unique(target))``), under the same flag. Checked on a CPU trace of
    # torchmetrics 1.9 (docs/validation.md, section 27): the read gone with the flag.
    LibraryAdvice(
        "torchmetrics/functional/classification/precision_recall_curve.py",
        frozenset(
            {
                "_binary_precision_recall_curve_tensor_validation",
                "_multiclass_precision_recall_curve_tensor_validation",
                "_multilabel_precision_recall_curve_tensor_validation",
            }
        ),
        _TORCHMETRICS_VALIDATION_ADVICE,
    ),
    LibraryAdvice(
        "torchmetrics/aggregation.py",
        frozenset({"_cast_and_nan_check_input"}),
        _TORCHMETRICS_NAN_ADVICE,
    ),
    LibraryAdvice(
        "ignite/engine/__init__.py",
        frozenset({"<lambda>"}),
        _IGNITE_OUTPUT_TRANSFORM_ADVICE,
        innermost=True,
    ),
    LibraryAdvice(
        "ignite/handlers/base_logger.py",
        frozenset({"handle_value_fn"}),
        _IGNITE_HANDLER_EVERY_ADVICE,
        innermost=True,
    ),
    *(
        LibraryAdvice(
            f"ignite/metrics/{name}.py",
            frozenset({func}),
            _IGNITE_METRIC_DEVICE_ADVICE,
            innermost=True,
        )
        # Not ``metric.py``'s ``completed`` (``result.item()`` of a metric computed as a
        # tensor): a ``RunningAverage`` computed every iteration reads there on any device.
        for name, func in (("accuracy", "compute"), ("loss", "compute"))
    ),
    *(
        LibraryAdvice(f"{package}/fabric.py", frozenset({"clip_gradients"}), _FABRIC_CLIP_ADVICE)
        for package in ("lightning/fabric", "lightning_fabric")
    ),
    LibraryAdvice("pykeen/losses.py", frozenset({"process_lcwa_scores"}), _PYKEEN_LCWA_LOSS_ADVICE),
    LibraryAdvice(
        "pykeen/evaluation/evaluator.py",
        frozenset({"create_sparse_positive_filter_", "filter_scores_"}),
        _PYKEEN_EVAL_BATCH_ADVICE,
    ),
    LibraryAdvice(
        "trainer/connectors/logger_connector/result.py",
        frozenset({"metrics"}),
        _LIGHTNING_PROGRESS_BAR_ADVICE,
    ),
    *(
        LibraryAdvice(
            f"{package}/callbacks/model_checkpoint.py",
            frozenset({"_format_checkpoint_name"}),
            _LIGHTNING_CHECKPOINT_NAME_ADVICE,
            formats=True,
        )
        for package in ("pytorch_lightning", "lightning/pytorch")
    ),
    LibraryAdvice(
        "trainer/connectors/logger_connector/logger_connector.py",
        frozenset({"log_metrics"}),
        _LIGHTNING_LOGGER_ADVICE,
    ),
    LibraryAdvice(
        "transformers/trainer.py",
        frozenset({"_run_epoch", "_inner_training_loop"}),
        _HF_TRAINER_NAN_FILTER_ADVICE,
        frozenset({"aten::is_nonzero"}),
        innermost=True,
    ),
    LibraryAdvice(
        "transformers/trainer.py",
        frozenset({"_maybe_log_save_evaluate"}),
        _HF_TRAINER_LOGGING_ADVICE,
        innermost=True,
    ),
    LibraryAdvice(
        "transformers/generation/utils.py",
        frozenset({"__call__", "_has_unfinished_sequences"}),
        _HF_GENERATE_STOP_ADVICE,
        innermost=True,
    ),
    LibraryAdvice(
        "transformers/integrations/moe.py",
        frozenset({"forward"}),
        HF_EXPERTS_ADVICE,
        frozenset(
            {"aten::nonzero", "aten::where", "aten::is_nonzero", "aten::_local_scalar_dense"}
        ),
        # The wrapper calling the model's own experts' forward: the eager loop (not
        # batched_mm, grouped_mm's fallback or an implementation a user registered).
        r"(transformers/models/[^/]+|transformers_modules/.+)/modeling_[^/]+\.py$",
    ),
    LibraryAdvice(
        "transformers/modeling_attn_mask_utils.py",
        frozenset({"_ignore_causal_mask_sdpa", "_ignore_bidirectional_mask_sdpa"}),
        _HF_MASK_ADVICE,
        model=_HF_MODEL,
        model_callers=_HF_MASK_CALLERS,
        model_wrappers=_HF_MODEL_WRAPPERS,
    ),
    # x-transformers' AutoregressiveWrapper.generate checks after every token whether each
    # sequence has reached eos_token (``if is_eos_tokens.any(dim=-1).all(): break``), its
    # only read per token; without eos_token it generates seq_len tokens. Checked on a CPU
    # trace of x-transformers 2.26.4 (docs/validation.md, section 27): the 71 reads of 5
    # calls gone, the script working.
    LibraryAdvice(
        "x_transformers/autoregressive_wrapper.py",
        frozenset({"generate"}),
        Advice(
            title="Generate without eos_token, and cut at the first eos afterwards",
            text=(
                "x-transformers' `generate` checks after every token whether each sequence "
                "has produced `eos_token` (`is_eos_tokens.any(dim=-1).all()`), to stop early: "
                "a read-back per token. Without `eos_token` it generates `seq_len` tokens "
                "with no read; mask what follows each sequence's first eos once, on the "
                "device, after the call. It also generates the tokens after the last "
                "sequence's eos: worth it where sequences run close to `seq_len` anyway."
            ),
            before="out = model.generate(prompts, seq_len, eos_token=eos)\n",
            after=(
                "out = model.generate(prompts, seq_len)\n"
                "is_eos = (out == eos).int()\n"
                "after_eos = (is_eos.cumsum(dim=-1) - is_eos) > 0  # past each first eos\n"
                "out = out.masked_fill(after_eos, model.pad_value)\n"
            ),
        ),
        ops=frozenset({"aten::is_nonzero"}),
        innermost=True,
    ),
    # MONAI's sliding_window_inference builds its window weights on every call with
    # compute_importance_map, which reads their minimum (``torch.min(importance_map).item()``,
    # on the windows' device). A map passed in is used as it is. Checked on a CPU trace of
    # MONAI 1.6.1 (docs/validation.md, section 27): the read gone, the Dice scores the same.
    LibraryAdvice(
        "monai/data/utils.py",
        frozenset({"compute_importance_map"}),
        Advice(
            title="Pass sliding_window_inference a roi_weight_map computed once",
            text=(
                "`sliding_window_inference` computes its windows' weight map on every call, "
                "and `compute_importance_map` reads the map's minimum back to the host "
                "(`torch.min(importance_map).item()`). Compute the map once, on the device, "
                "with the call's `mode` and `sigma_scale`, before the loop and pass it as "
                "`roi_weight_map=`: it is used as it is, "
                "without that read, wherever the window is the whole `roi_size` (an image at "
                "least that large)."
            ),
            before=(
                "for batch in val_loader:\n"
                "    out = sliding_window_inference(x, roi_size, sw_batch_size, model)\n"
            ),
            after=(
                "from monai.data.utils import compute_importance_map\n"
                'roi_w = compute_importance_map(roi_size, mode="constant", device=device)\n'
                "for batch in val_loader:\n"
                "    out = sliding_window_inference(\n"
                "        x, roi_size, sw_batch_size, model, roi_weight_map=roi_w\n"
                "    )\n"
            ),
        ),
    ),
    # GradScaler.step reads found_inf (``sum(v.item() ...)`` in ``_maybe_opt_step``) for an
    # optimizer without a fused step; a fused one takes found_inf as a tensor. Measured on an
    # H200 (docs/validation.md, section 8): the read cost 3.8 ms of a 16.9 ms step.
    LibraryAdvice(
        "torch/amp/grad_scaler.py",
        frozenset({"_maybe_opt_step", "<genexpr>"}),
        Advice(
            title="Use a fused optimizer: GradScaler.step then reads nothing back",
            text=(
                "`scaler.step(optimizer)` checks whether a gradient overflowed with "
                "`found_inf.item()` before it steps an optimizer, and that read waits for the "
                "whole backward pass. An optimizer built with `fused=True` (Adam, AdamW, SGD, "
                "Adagrad) takes the flag on the device and skips the update there, with no "
                "read, and its kernels are faster too. Or train in bfloat16, which needs no "
                "GradScaler."
            ),
            before=(
                "optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)\n"
                "...\n"
                "scaler.step(optimizer)   # reads found_inf: waits for the backward\n"
            ),
            after=(
                "optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, fused=True)\n"
                "...\n"
                "scaler.step(optimizer)   # found_inf stays on the device\n"
            ),
        ),
    ),
    # PyTorch Geometric's layers add and remove self-loops in every forward (GCNConv's
    # ``gcn_norm`` runs ``add_remaining_self_loops``, GATConv ``remove_self_loops`` then
    # ``add_self_loops``): boolean masks of the edges, read back on a GPU. A walk of PyG
    # 2.x's examples (docs/validation.md, section 24): ``cached=True`` removed GCNConv's.
    LibraryAdvice(
        "torch_geometric/utils/loop.py",
        frozenset({"add_remaining_self_loops", "remove_self_loops", "add_self_loops"}),
        Advice(
            title="Add the self-loops once, not in every forward",
            text=(
                "PyTorch Geometric's `GCNConv` and `GATConv` add self-loops to the graph in "
                "every forward (`add_remaining_self_loops`, `remove_self_loops`): boolean "
                "masks of the edges, each read back from the GPU. Where the graph does not "
                "change (full-batch training on one graph), build `GCNConv(..., "
                "cached=True)`, which keeps the normalised graph after its first forward; or "
                "add the loops once before training and build the layers with "
                "`add_self_loops=False`."
            ),
            before="conv = GATConv(in_dim, out_dim)   # adds self-loops every forward\n",
            after=(
                "edge_index, _ = add_self_loops(remove_self_loops(edge_index)[0], "
                "num_nodes=n)\n"
                "conv = GATConv(in_dim, out_dim, add_self_loops=False)\n"
            ),
        ),
    ),
    # PyG's ``scatter`` (and the pools built on it: ``global_add_pool``...) infers its output
    # size from ``int(index.max()) + 1`` where none is given: a read back on a GPU.
    LibraryAdvice(
        "torch_geometric/utils/_scatter.py",
        frozenset({"scatter"}),
        Advice(
            title="Give PyG's pooling and scatter their output size",
            text=(
                "PyTorch Geometric's `scatter`, and the pools built on it "
                "(`global_add_pool`, `global_mean_pool`, `global_max_pool`), read "
                "`int(index.max()) + 1` back from the GPU to learn how many outputs to make "
                "when no size is given. Pass it: `global_add_pool(x, batch, "
                "size=data.num_graphs)`, `scatter(src, index, dim_size=num_nodes)`."
            ),
            before="out = global_add_pool(x, batch)   # reads index.max()\n",
            after="out = global_add_pool(x, batch, size=num_graphs)\n",
        ),
    ),
    # ``maybe_num_nodes`` reads ``int(edge_index.max()) + 1`` where no ``num_nodes`` is given.
    LibraryAdvice(
        "torch_geometric/utils/num_nodes.py",
        frozenset({"maybe_num_nodes"}),
        Advice(
            title="Give PyG's graph utilities num_nodes",
            text=(
                "Without `num_nodes`, PyTorch Geometric's graph utilities (`to_undirected`, "
                "`degree`, `softmax`, `negative_sampling`, `subgraph`...) read "
                "`int(edge_index.max()) + 1` back from the GPU to count the nodes. Pass "
                "`num_nodes=data.num_nodes` (a Python int on the host)."
            ),
            before="edge_index = to_undirected(edge_index)\n",
            after="edge_index = to_undirected(edge_index, num_nodes=data.num_nodes)\n",
        ),
    ),
    # LBFGS decides on the host, in every inner iteration, whether to go on (torch 2.13
    # ``torch/optim/lbfgs.py``): ``float(orig_loss)``, ``if opt_cond:`` of
    # ``flat_grad.abs().max() <= tolerance_grad``, ``if ys > 1e-10:``, ``if gtd >
    # -tolerance_change:``, and ``_strong_wolfe``'s tests. pytorch/examples'
    # time_sequence_prediction: 16,835 of its 16,940 latent reads (a user's walk).
    LibraryAdvice(
        "torch/optim/lbfgs.py",
        frozenset({"step", "_strong_wolfe", "_cubic_interpolate", "_directional_evaluate"}),
        Advice(
            title="LBFGS reads on the host every iteration: run fewer, or on the CPU",
            text=(
                "`torch.optim.LBFGS.step` decides on the host, in every inner iteration, "
                "whether to go on: it reads the loss (`float(loss)`), the largest gradient "
                "(`flat_grad.abs().max() <= tolerance_grad`), the curvature (`ys > 1e-10`) "
                "and the step's change, and its two-loop recursion turns two numbers per "
                "stored pair into Python floats (`alpha=-al[i]`); each read waits for the GPU "
                "work before it. How it is called does not remove them: they grow with the "
                "iterations it runs (`max_iter`, 20 by default, per `step`) and the pairs it "
                "keeps (`history_size`, 100). Fewer of either read less; a small model (a few "
                "thousand parameters) is often faster on the CPU, where the reads cost "
                "nothing; a first-order optimizer (Adam) reads nothing."
            ),
            before=(
                "optimizer = torch.optim.LBFGS(model.parameters(), lr=0.8)\n"
                "optimizer.step(closure)   # up to 20 iterations, several reads each\n"
            ),
            after=(
                "optimizer = torch.optim.LBFGS(\n"
                "    model.parameters(), lr=0.8, max_iter=5, history_size=10\n"
                ")\n"
                "optimizer.step(closure)   # fewer iterations and pairs, fewer reads\n"
            ),
        ),
        innermost=True,
    ),
    # AveragedModel (torch.optim.swa_utils; torchvision's ExponentialMovingAverage derives
    # from it) reads its step counter ``n_averaged``, a buffer on the model's device, twice
    # per update: ``bool(self.n_averaged == 0)`` and ``if self.n_averaged > 0:`` (torch 2.13).
    LibraryAdvice(
        "torch/optim/swa_utils.py",
        frozenset({"update_parameters"}),
        Advice(
            title="Update the AveragedModel every N steps, not every step",
            text=(
                "`AveragedModel.update_parameters` (torchvision's `ExponentialMovingAverage` "
                "is one) reads its step counter `n_averaged`, a tensor on the model's "
                "device, twice on the host every update, and each read waits for the step's "
                "GPU work. For an exponential moving average, update it every N steps with "
                "the decay raised to the power N, as torchvision's reference scripts do "
                "(`--model-ema-steps`, 32 by default), or keep the average with "
                "`torch._foreach_lerp_` over the parameters, which reads nothing (timm's "
                "`ModelEmaV3` does so). SWA's plain average is updated once an epoch, where "
                "the reads cost nothing."
            ),
            before="ema.update_parameters(model)            # 2 reads, every step\n",
            after=(
                "if step % ema_steps == 0:               # decay ** ema_steps per update\n"
                "    ema.update_parameters(model)        # 2 reads every ema_steps steps\n"
            ),
        ),
        innermost=True,
    ),
    # Indexing a NumPy memmap (nanoGPT's and llm.c's data loaders) with tensors: memmap's
    # Python ``__getitem__`` turns each tensor bound into an int (``__index__``, a read).
    # nanoGPT draws the indices with ``torch.randint`` on the CPU: reads of host tensors.
    *(
        LibraryAdvice(
            f"numpy/{package}memmap.py",
            frozenset({"__getitem__"}),
            Advice(
                title="Index NumPy data with CPU indices",
                text=(
                    "Indexing a NumPy array or memmap with a tensor reads each index back "
                    "to the host. Whether that waits for a GPU depends on where the indices "
                    "live, which a CPU trace cannot tell: drawn on the CPU "
                    "(`torch.randint(...)` without `device=`, as nanoGPT's `get_batch` "
                    "does) they wait for nothing, and this read costs nothing on a GPU run; "
                    "on the GPU, each index waits for the GPU's queued work. Keep the indices "
                    "on the CPU, and index with Python ints (`ix.tolist()`): one conversion "
                    "instead of one per bound."
                ),
                before=(
                    "ix = torch.randint(len(data) - T, (B,), device=device)\n"
                    "x = torch.stack([torch.from_numpy(data[i:i+T]) for i in ix])\n"
                ),
                after=(
                    "ix = torch.randint(len(data) - T, (B,)).tolist()   # on the CPU\n"
                    "x = torch.stack([torch.from_numpy(data[i:i+T]) for i in ix])\n"
                ),
            ),
        )
        for package in ("_core/", "core/")
    ),
    LibraryAdvice(
        "torch/distributions/distribution.py",
        frozenset({"__init__", "_validate_sample"}),
        Advice(
            title="Turn off torch.distributions' argument checks in the training loop",
            text=(
                "A distribution checks its parameters when it is built, and every value given "
                "to `log_prob`, on the host: each check reads the GPU's result back and waits. "
                "Validation is on by default; pass `validate_args=False`, or call "
                "`torch.distributions.Distribution.set_default_validate_args(False)` once at "
                "start-up (and keep it on while debugging)."
            ),
            before=(
                "policy = Normal(mean, std)            # checks mean and std on the host\n"
                "logp = policy.log_prob(action)        # checks action on the host\n"
            ),
            after=(
                "torch.distributions.Distribution.set_default_validate_args(False)  # once\n"
                "policy = Normal(mean, std)\n"
                "logp = policy.log_prob(action)\n"
            ),
        ),
    ),
    LibraryAdvice(
        "torch/nn/utils/clip_grad.py",
        frozenset(),
        Advice(
            title="Leave error_if_nonfinite off in clip_grad_norm_",
            text=(
                "`clip_grad_norm_(..., error_if_nonfinite=True)` reads whether the norm is "
                "finite on the host every step. Leave it off (the default) and check the "
                "returned norm every N steps, or let a GradScaler skip steps whose gradients "
                "overflowed."
            ),
            before="clip_grad_norm_(model.parameters(), 1.0, error_if_nonfinite=True)\n",
            after=(
                "norm = clip_grad_norm_(model.parameters(), 1.0)\n"
                "if step % 100 == 0 and not torch.isfinite(norm):   # one read per 100 steps\n"
                '    raise FloatingPointError(f"gradient norm {norm}")\n'
            ),
        ),
    ),
    LibraryAdvice(
        "torch/nn/utils/rnn.py",
        frozenset({"pack_padded_sequence"}),
        Advice(
            title="Sort the batch by length where it is made; pass enforce_sorted=True",
            text=(
                "`pack_padded_sequence(..., enforce_sorted=False)` sorts the lengths on the "
                "CPU and copies the order to the GPU on every call, and the host waits for the "
                "copy. Sort each batch by length, longest first, in the data loader's "
                "`collate_fn` and pass `enforce_sorted=True`; keep the lengths a CPU tensor or "
                "a list."
            ),
            before="packed = pack_padded_sequence(x, lengths, True, enforce_sorted=False)\n",
            after=(
                "# in collate_fn: batch.sort(key=len, reverse=True)\n"
                "packed = pack_padded_sequence(x, lengths, True, enforce_sorted=True)\n"
            ),
        ),
    ),
    # nn.TransformerEncoder's inference fast path with a padding mask: the batch becomes a
    # nested tensor (lengths read from the mask) and is padded again at the end. Measured on
    # an H200: 7 sync warnings per call with it, none without.
    LibraryAdvice(
        "torch/nn/modules/transformer.py",
        frozenset({"forward"}),
        Advice(
            title="Build nn.TransformerEncoder with enable_nested_tensor=False",
            text=(
                "At inference with a `src_key_padding_mask`, `nn.TransformerEncoder` turns the "
                "padded batch into a nested tensor: torch reads the sequence lengths from the "
                "mask on the host, and copies back and forth around the layers, waiting each "
                "time. With `enable_nested_tensor=False` the padded positions are computed and "
                "masked instead, without waiting (an `nn.Transformer` builds its own encoder: "
                "set `model.encoder.use_nested_tensor = False`). With heavy padding the nested "
                "path saves compute: time both."
            ),
            before=(
                "encoder = nn.TransformerEncoder(layer, num_layers)\n"
                "out = encoder(x, src_key_padding_mask=pad)\n"
            ),
            after=(
                "encoder = nn.TransformerEncoder(layer, num_layers, enable_nested_tensor=False)\n"
                "out = encoder(x, src_key_padding_mask=pad)\n"
            ),
        ),
        frozenset(
            {
                "aten::_nested_tensor_from_mask",
                "aten::_nested_tensor_from_mask_left_aligned",
                "aten::to_padded_tensor",
                "aten::_transformer_encoder_layer_fwd",
            }
        ),
    ),
    LibraryAdvice(
        "torch/nn/modules/transformer.py",
        frozenset({"_detect_is_causal_mask"}),
        Advice(
            title="Pass is_causal=True with a causal mask",
            text=(
                "Given a mask and no word on whether it is causal, `nn.TransformerEncoder`, "
                "`nn.TransformerDecoder` and `nn.Transformer` compare the mask with a causal "
                "one on the host to pick the causal kernels: a read-back on every call. Say "
                "what the mask is: `is_causal=True` (or `False`) to an encoder, "
                "`tgt_is_causal=True` to a decoder, `src_is_causal` / `tgt_is_causal` to an "
                "`nn.Transformer`."
            ),
            before="out = encoder(x, mask=causal)\n",
            after="out = encoder(x, mask=causal, is_causal=True)\n",
        ),
    ),
)


def _frame_matches(path: str, func: str, file: str, funcs: frozenset[str]) -> bool:
    return path.replace("\\", "/").endswith(file) and (not funcs or func in funcs)


def fix_frames(stack: Sequence[Any], forward_stack: Sequence[Any] = ()) -> list[tuple[str, str]]:
    """The library frames a sync's fix is read from (``library_frames``): its own stack's;
    for a backward that ran no library code of its own, its forward call's (the library
    whose operation it is the gradient of)."""
    own = library_frames(stack)
    if not forward_stack:
        return own
    if edited_library(own) is None:
        return library_frames(forward_stack)  # (torch's own backward machinery alone)
    forward = library_frames(forward_stack)
    if library_fix(own) is None and library_fix(forward) is not None:
        # A library's loop ran the backward (pytorch-metric-learning's trainer calling
        # ``loss.backward()``), and a setting of the forward's library removes both reads:
        # the forward row's fix (a reducer's mask, a walk) is the backward row's.
        return forward
    if _only_calls_backward(own) and edited_library(forward) is not None:
        # The library only called ``backward()`` (sbi's training loop): the operation whose
        # gradient reads is the forward's library's (an sbi walk: nflows' masks' backward
        # was "an edit of sbi's own code", its forward nflows').
        return forward
    return own


def _only_calls_backward(frames: Sequence[tuple[str, str]]) -> bool:
    """Whether a backward's library frames (innermost first) reach their first library
    frame through torch's own alone: the library called ``backward()``, ran no code of its
    own in the pass."""
    for path, _func in frames:
        if path == BUILTIN_FRAME or passes_through(path):
            continue
        if is_framework_file(path):
            continue
        return _called_torchs_backward(frames)
    return False


def _called_torchs_backward(frames: Sequence[tuple[str, str]]) -> bool:
    return any(
        func in ("backward", "_engine_run_backward") and is_framework_file(path)
        for path, func in frames
    )


def library_frames(stack: Iterable[Any]) -> list[tuple[str, str]]:
    """``(file, function)`` of a sync's frames (``Frame``s, innermost first) inside the
    user's innermost one: the library code the user's line called. A library frame above
    it called the user's code (Lightning's ``metrics()`` computing the user's own
    ``Metric.compute``): its fix is not the user's read's."""
    stack = list(stack)
    frames = []
    for n, frame in enumerate(stack):
        # A model's own code loaded with trust_remote_code (``transformers_modules/``) is
        # named as the user's, but it is the library's to call: transformers' MoE wrapper
        # runs it (``HF_EXPERTS_ADVICE``'s ``called_file``).
        if frame.user and "transformers_modules/" not in frame.file.replace("\\", "/"):
            break
        if dispatches_for_its_caller(frame.file, frame.func, stack[n - 1].file if n else None):
            continue
        frames.append((frame.file, frame.func))
    if frames and _forwards_the_users_read(frames):
        return []
    return frames


# Methods a tensor-like object of a library forwards a read to (Opacus' ghost clipping
# loss, ``DPTensorFastGradientClipping.item``: ``return self.detach().item()``).
_FORWARDED_READS = frozenset(
    {"item", "tolist", "__float__", "__int__", "__bool__", "__index__", "__format__"}
)


def _forwards_the_users_read(frames: list[tuple[str, str]]) -> bool:
    """Whether a library's frames (innermost first) are only its method of a read's name,
    called from the user's line, and the read it makes at once: the user's ``loss.item()``
    of a library's tensor-like result. A walk: Opacus' ghost clipping loss made the user's
    own ``loss.item()`` "an edit of opacus' own code"."""
    path, func = frames[-1]
    if func not in _FORWARDED_READS or path == BUILTIN_FRAME or is_framework_file(path):
        return False
    return all(
        inner == BUILTIN_FRAME or passes_through(inner) or is_framework_file(inner)
        for inner, _func in frames[:-1]
    )


# A tensor subclass's dispatchers (MONAI's ``MetaTensor.__torch_function__``) run every
# operator on the subclass for whoever called it: not the code called. Named as a library's
# line, they hid the line that read (``meandice.py:392``) and made a user's own
# ``loss.item()`` of a MetaTensor an edit of MONAI.
SUBCLASS_DISPATCH = frozenset({"__torch_function__", "__torch_dispatch__"})
_TORCH_FILE = re.compile(r"(?:^|/)torch/")


def dispatches_for_its_caller(file: str, func: str, inner_file: str | None) -> bool:
    """Whether a frame of ``func`` in ``file``, whose next frame inward is in
    ``inner_file``, is a dispatcher passing its caller's operator on: torch's own
    (``Tensor.__torch_function__``), or a tensor subclass's that hands it to torch
    (``super().__torch_function__``, an ``OpOverload``'s call). Not where a read it leads
    to is made; a dispatcher whose own code reads (``out[0].item()`` in a checking
    subclass's ``__torch_dispatch__``) is."""
    return func in SUBCLASS_DISPATCH and any(
        where is not None and _TORCH_FILE.search(where.replace("\\", "/")) is not None
        for where in (file, inner_file)
    )


def library_advice(frames: Iterable[tuple[str, str]], ops: Iterable[str] = ()) -> Advice | None:
    """The ``LIBRARY_ADVICE`` fix of a sync whose stack has these ``(file, function)``
    frames (any order) and operator chain, if one of them ran the library code that
    syncs."""
    found = library_fix(frames, ops)
    return found[0].advice if found is not None else None


def library_fix(
    frames: Iterable[tuple[str, str]], ops: Iterable[str] = ()
) -> tuple[LibraryAdvice, tuple[str, str]] | None:
    """The ``LIBRARY_ADVICE`` entry that fixes a sync with these ``(file, function)`` frames
    (innermost first) and operator chain, and the frame it matched: the library code whose
    read the fix is about, which tells a site's syncs apart where the innermost frame is a
    helper they share (Lightning's ``to_item`` under its progress bar's and its loggers'
    reads)."""
    frames = list(frames)  # innermost first
    chain = set(ops)
    for entry in LIBRARY_ADVICE:
        if entry.ops and entry.ops.isdisjoint(chain):
            continue
        for n, (path, func) in enumerate(frames):
            if not _frame_matches(path, func, entry.file, entry.funcs):
                continue
            if entry.innermost and not all(
                p == BUILTIN_FRAME or passes_through(p) for p, _f in frames[:n]
            ):
                continue  # (a built-in's frame is the read itself: ``.item()``)
            if entry.model is not None and not _model_called_by(
                frames, entry.model, entry.model_callers, entry.model_wrappers
            ):
                continue
            if entry.called_file is not None:
                inner = [
                    p.replace("\\", "/") for p, _f in reversed(frames[:n]) if not passes_through(p)
                ]
                if not inner or not re.search(entry.called_file, inner[0]):
                    continue
            return entry, (path, func)
    return None


def _model_called_by(
    frames: list[tuple[str, str]], model: str, callers: str | None, wrappers: str | None
) -> bool:
    """Whether the model whose frames (innermost first) match ``model`` was called by the
    user's line (no library frame outside the model's but torch's) or by a file matching
    ``callers``: the first frame outside the innermost run of the model's frames (a model
    calling its submodels) and of ``wrappers`` (its library's decorators on a ``forward``).
    True where no frame matches (the user's line called the code that reads)."""
    outside = [
        p.replace("\\", "/")
        for p, _f in frames
        if not passes_through(p) and package_of(p) not in _FRAMEWORK_PACKAGES
    ]
    at = next((k for k, p in enumerate(outside) if re.search(model, p)), None)
    if at is None:
        return True
    while at < len(outside) and (
        re.search(model, outside[at]) or (wrappers and re.search(wrappers, outside[at]))
    ):
        at += 1
    if at == len(outside):
        return True
    return callers is not None and re.search(callers, outside[at]) is not None


# Frames a call passes through on its way to the function it names (torch.compile's and
# no_grad's wrappers, functools'): not the function called.
_PASS_THROUGH = re.compile(r"(torch/_dynamo/|torch/utils/_contextlib\.py$|/functools\.py$)")


def passes_through(path: str) -> bool:
    """Whether a frame of this file is a wrapper a call passes through (``no_grad``'s,
    torch.compile's, functools'), not the function called."""
    return _PASS_THROUGH.search(path.replace("\\", "/")) is not None


# torch's Python wrappers around one operator (``Tensor.unique`` and ``torch.unique``'s
# ``_unique_impl``, an operator's ``__call__``, ``handle_torch_function``; a tensor's text,
# ``_tensor_str``, under tqdm's ``set_postfix``): where a library's
# code called them, the library's own line is the one to name (ultralytics' ``loss.py:400``
# ``batch_idx.unique(...)``, not ``torch/functional.py:973``).
_ONE_OP_WRAPPERS = re.compile(
    r"torch/(?:functional|_ops|_tensor|_tensor_str|_jit_internal|overrides)\.py$"
)


# Library functions that only call one operator (``torchvision.ops.nms`` calls
# ``torch.ops.torchvision.nms``), or only convert what they are given (Tianshou's
# ``to_numpy``, ``x.detach().cpu().numpy()``, under every one of its copies: a walk's "32.0 a
# step at converter.py:20" were an action's copies and a statistic's): the line that called
# them is the one to name.
_ONE_OP_FUNCTIONS = frozenset(
    {
        ("torchvision/ops/boxes.py", "nms"),
        ("tianshou/data/utils/converter.py", "to_numpy"),
    }
)


def wraps_one_op(path: str, func: str = "") -> bool:
    """Whether a frame of this file (and function) is a Python wrapper around one
    operator: torch's, or a library function that only calls one (``_ONE_OP_FUNCTIONS``)."""
    normal = path.replace("\\", "/")
    if _ONE_OP_WRAPPERS.search(normal) is not None:
        return True
    return any(normal.endswith(file) and func == name for file, name in _ONE_OP_FUNCTIONS)


# --- a tensor turned into text ----------------------------------------------------------

# torch's own module that formats a tensor as text: ``print(t)``, ``str(t)``, ``repr(t)``,
# f-strings and logging run it, and on a GPU tensor it reads values back several ways
# (``item`` per element shown, ``is_nonzero`` and ``masked_select`` to pick the format).
TENSOR_TEXT_FILES = ("torch/_tensor_str.py",)
# An f-string or ``format()`` with a spec (``f"{loss:.3f}"``) of a one-element tensor does not
# go through that module: ``Tensor.__format__`` reads it with ``item()`` and formats the
# number. The same print, the same fix.
TENSOR_FORMAT_FUNCS = (("torch/_tensor.py", frozenset({"__format__"})),)
# The site's operator for such syncs: one print is one site, whatever ops it ran.
TENSOR_TEXT_OP = "print(tensor)"
TENSOR_TEXT_ADVICE = Advice(
    title="Do not print device tensors inside the step",
    text=(
        "`print(t)`, `str(t)`, f-strings and logging of a GPU tensor format it on the host: "
        "torch reads its values back, several times per print (each element shown, and "
        "masked reads to choose the format), and each read waits for every queued kernel. "
        "Print a Python number every N steps instead, or keep the value on the device and "
        "read it once when you log."
    ),
    before=(
        "for step, (x, y) in enumerate(loader):\n"
        "    loss = criterion(model(x), y)\n"
        "    print(loss)                       # formats a GPU tensor: waits for the GPU\n"
    ),
    after=(
        "for step, (x, y) in enumerate(loader):\n"
        "    loss = criterion(model(x), y)\n"
        "    if step % 100 == 0:\n"
        '        print(f"{loss.item():.4f}")   # one sync per 100 steps\n'
    ),
)


# A print of a tensor in a logger's message built in the call (``source.host_use`` of
# ``"logging"``): the f-string runs, and reads, whether or not the logger's level is on.
LAZY_LOG_ADVICE = Advice(
    title="Give the tensor to the logger as an argument, and log it every N steps",
    text=(
        "An f-string (or `.format`, or `%`) in a logger's call formats the tensor before the "
        "logger looks at its level: each call reads the tensor back and waits for every "
        "queued kernel, even where the message is never shown. Passed as an argument, the "
        "logger formats it only when it shows the message: no read at all while that level "
        "is off. Where it is shown (the trace cannot tell which level was on), it still "
        "reads once a call: log it every N steps."
    ),
    before=(
        "for step, (x, y) in enumerate(loader):\n"
        "    loss = criterion(model(x), y)\n"
        '    logger.info(f"step {step} loss {loss}")   # reads the GPU tensor, shown or not\n'
    ),
    after=(
        "for step, (x, y) in enumerate(loader):\n"
        "    loss = criterion(model(x), y)\n"
        "    if step % 100 == 0:   # read only when INFO is on, every 100 steps\n"
        '        logger.info("step %d loss %s", step, loss)\n'
    ),
    removes="every read while the logger's level is off, and all but one in N where it is on",
)


# Library code that works on host tensors by construction: data loading runs before the
# batch is moved to the device (DataLoader seeds its workers with ``.item()``, samplers
# shuffle with ``torch.randperm(n).tolist()``). Its would-be syncs in a CPU-only trace
# are not listed as latent: on a GPU they wait for nothing.
HOST_ONLY_LIBRARY_DIRS = ("torch/utils/data/",)
# Library functions whose reads are of host tensors on a GPU run too, by the optimizer that
# calls them: these keep a parameter's step counter on the CPU unless the optimizer is
# capturable or fused, and read it with ``_get_value`` (``item``) every step, once per
# parameter. ASGD keeps its step, eta and mu on the parameter's device: its reads sync.
HOST_ONLY_LIBRARY_FUNCS = (("torch/optim/optimizer.py", frozenset({"_get_value"})),)
_HOST_STEP_OPTIMIZERS = (
    ("adam", "Adam"),
    ("adamw", "AdamW"),
    ("adamax", "Adamax"),
    ("adagrad", "Adagrad"),
    ("nadam", "NAdam"),
    ("radam", "RAdam"),
)
HOST_STEP_OPTIMIZER_FILES = tuple(f"torch/optim/{name}.py" for name, _ in _HOST_STEP_OPTIMIZERS)
# Their profiler spans, for a trace without stacks: a read directly inside one is
# ``_get_value``'s, unless a closure ran in it (``opt.step(closure)``, whose backward
# shows: ``BACKWARD_OP_PREFIX``), whose reads may be of the program's device tensors.
HOST_STEP_OPTIMIZER_SPANS = frozenset(
    f"Optimizer.step#{cls}.step" for _, cls in _HOST_STEP_OPTIMIZERS
)
# The autograd engine's node of each backward function it runs.
BACKWARD_OP_PREFIX = "autograd::engine::evaluate_function"
# The file of a built-in function's frame (``<built-in method zeros ...>``), as attribution
# names it.
BUILTIN_FRAME = "<built-in>"
# Library functions whose own reads are of host tensors on every device, whatever calls
# them: torch's RNNs read a ``PackedSequence``'s ``batch_sizes`` (``int(batch_sizes[0])``,
# ``max_batch_size = batch_sizes[0]`` as a size), a CPU tensor by construction
# (``pack_padded_sequence`` makes it from CPU lengths). A tutorials walk: two phantom syncs
# a call on every packed GRU's line. Only where the function's frame is the read's
# innermost: a hook it runs is another's code.
HOST_READING_LIBRARY_FUNCS = (
    ("torch/nn/modules/rnn.py", frozenset({"get_expected_hidden_size", "forward"})),
    # PyKEEN de-duplicates its triples factory's CPU triples before the evaluator moves
    # them to the device (a walk: ``unique(dim=0)`` told to count into a fixed-size tensor).
    ("pykeen/utils.py", frozenset({"prepare_filter_triples"})),
    # Opacus' DP RNNs (``DPLSTM``, ``DPGRU``, ``DPRNN``) run a packed sequence's time steps
    # in Python, reading its ``batch_sizes`` (a CPU tensor by construction, as for torch's
    # own RNNs): a walk's ``DPLSTM`` on packed input, 48 phantom reads a step, each told
    # to edit Opacus. These functions read nothing else.
    ("opacus/layers/dp_rnn.py", frozenset({"forward", "forward_layer"})),
    ("opacus/utils/packed_sequences.py", frozenset({"compute_seq_lengths"})),
)
# Library functions that call themselves directly only for a tensor's metadata, which stays
# on the host: MONAI's ``decollate_batch(batch.meta)`` for a MetaTensor (``MetaTensor.to``
# moves the array, not ``.meta``), whose ``[t.item() for t in out_list]`` reads each
# collated metadata scalar (``original_channel_dim``). Its other reads (a dict's values,
# through ``_non_zipping_check``) may be of the user's device tensors.
HOST_METADATA_RECURSION = (("monai/data/utils.py", frozenset({"decollate_batch"})),)
# Fused optimizer kernels whose CPU implementation reads its step counters and learning rate
# with ``item``; their device kernels take them as tensors.
CPU_KERNEL_READ_OPS = frozenset(
    {"aten::_fused_adam_", "aten::_fused_adamw_", "aten::_fused_sgd_", "aten::_fused_adagrad_"}
)


def in_host_only_library(frames: Iterable[tuple[str, str]], ops: Iterable[str] = ()) -> bool:
    """Whether a latent sync with these ``(file, function)`` stack frames (innermost first)
    and operator chain reads host tensors by construction: host-only library code, a
    library function reading host tensors of its own (an RNN's ``batch_sizes``), an
    optimizer's step counter, or a fused optimizer's CPU kernel."""
    if any(op in CPU_KERNEL_READ_OPS for op in ops):
        return True
    normal = [(path.replace("\\", "/"), func) for path, func in frames if path]
    innermost = next(
        (
            frame
            for frame in normal
            if frame[0] != BUILTIN_FRAME and not wraps_one_op(frame[0], frame[1])
        ),
        None,
    )
    if innermost is not None and any(
        _frame_matches(*innermost, file, funcs) for file, funcs in HOST_READING_LIBRARY_FUNCS
    ):
        return True
    for index, (path, func) in enumerate(normal):
        if any(marker in path for marker in HOST_ONLY_LIBRARY_DIRS):
            return True
        caller, caller_func = normal[index + 1] if index + 1 < len(normal) else ("", "")
        if caller.endswith(HOST_STEP_OPTIMIZER_FILES) and any(
            _frame_matches(path, func, file, funcs) for file, funcs in HOST_ONLY_LIBRARY_FUNCS
        ):
            return True
        if any(
            _frame_matches(path, func, file, funcs)
            and _frame_matches(caller, caller_func, file, funcs)
            for file, funcs in HOST_METADATA_RECURSION
        ):
            return True
    return False


def formats_tensor(frames: Iterable[tuple[str, str]]) -> bool:
    """Whether a sync whose stack has these ``(file, function)`` frames (any order) came
    from turning a tensor into text: it is then a scalar read-back at the print, whichever
    operator ran."""
    for path, func in frames:
        if not path:
            continue
        normal = path.replace("\\", "/")
        if normal.endswith(TENSOR_TEXT_FILES) or any(
            _frame_matches(normal, func, file, funcs) for file, funcs in TENSOR_FORMAT_FUNCS
        ):
            return True
    return False


# Selecting each group's rows by a mask, once per pass of a loop over the groups (the
# experts of a mixture of experts, classes): each selection reads its count back. Measured on
# an H200 (section 15): an MoE layer's expert loop read 32 times a step; one .tolist() of the
# counts per layer, 4 (47 -> 35 ms a step); grouped_mm, none (27 ms); the same outputs.
LOOP_SELECTION_OPS = frozenset(
    {"aten::nonzero", "aten::argwhere", "aten::where", "aten::index", "aten::masked_select"}
)
LOOP_SELECTION_ADVICE = Advice(
    title="Select the groups once, not once per pass of the loop",
    text=(
        "This selection runs once per pass of a loop, and each pass waits for the GPU to "
        "learn how many rows it selected. When the loop visits groups (the experts of a "
        "mixture of experts, classes, buckets), sort the rows by group once (`argsort`), "
        "count them into a fixed-size tensor (`scatter_add_`, or `histc` with `min` and "
        "`max`: no read), and then either split them with one `.tolist()` of the counts for "
        "the whole loop, or read nothing: run per-group matrix multiplies in one "
        "`torch.nn.functional.grouped_mm(rows, weights, offs=counts.cumsum(0, "
        "dtype=torch.int32))` (torch 2.10+; it reads nothing in bfloat16 on an H100, H200 or "
        "later GPU, and copies the offsets to the host once per call elsewhere), and "
        "per-group sums with `index_add_` / `scatter_add_`."
    ),
    before=(
        "for e in range(num_experts):\n"
        "    slot, token = torch.where(expert_mask[e])    # one read per expert\n"
        "    out.index_add_(0, token, expert(e, x[token]) * w[token, slot, None])\n"
    ),
    after=(
        "flat = chosen.flatten()                          # (tokens * top_k,) expert ids\n"
        "order = flat.argsort(stable=True)\n"
        "counts = torch.zeros(num_experts, dtype=torch.long, device=flat.device)\n"
        "counts.scatter_add_(0, flat, torch.ones_like(flat))\n"
        "token = order // top_k\n"
        "offs = counts.cumsum(0, dtype=torch.int32)      # no read: grouped_mm takes it\n"
        "gate, up = F.grouped_mm(x[token], w_up, offs=offs).chunk(2, dim=-1)\n"
        "y = F.grouped_mm(F.silu(gate) * up, w_down, offs=offs) * w.flatten()[order, None]\n"
        "out = torch.zeros_like(x).index_add_(0, token, y)\n"
    ),
)


# A scalar read whose value sets a size on the host (``source.read_as_size``): a slice
# bound, ``range(n)``, a factory's size, an index. Keeping it on the device is no fix there.
SIZE_READ_ADVICE = Advice(
    title="This read sets a size: take it from the host, or keep the shape fixed",
    text=(
        "The value read here decides a size on the host (a slice bound, `range(n)`, a "
        "tensor's shape, an index), so it cannot stay on the device, and each read waits "
        "for all the GPU work queued before it. Where the value is known on the host "
        "already, use that copy: the lengths from the data loader before `.to(device)`, a "
        "count from the batch's Python lists. Where it is not, keep the shape fixed so that "
        "nothing is read: pad to the fixed maximum and mask the padding, or give the "
        "operator its size (`output_size=`, `minlength=`). To index with a one-element "
        "tensor, keep it a tensor: `x.index_select(0, i.view(1))` reads nothing."
    ),
    before=(
        "lengths = batch_lengths.to(device)\n"
        "x = x[:, : lengths.max()]              # reads the max back: waits for the GPU\n"
    ),
    after=(
        "lengths = batch_lengths.to(device, non_blocking=True)  # loader's CPU tensor\n"
        "x = x[:, : int(batch_lengths.max())]   # read on the host: no wait\n"
    ),
    removes="the read of the size",
)


# Scalar reads of a tensor's elements one by one in a loop (``source.reads_elements``):
# one read converts them all.
ELEMENT_READ_ADVICE = Advice(
    title="Convert the tensor once, not each element",
    text=(
        "Each element read here (`int(i)`, `i.item()`, `float(i)`) is a read of its own, "
        "and the first of them waits for all the GPU work queued before it. Convert the "
        "whole tensor in one read with `.tolist()` and loop over the Python numbers; for a "
        "list of tensors, `torch.stack(xs).tolist()`. A tensor made again from the elements "
        "(`torch.LongTensor([[t[i][0] for i in range(n)]])`, the chatbot tutorial's next "
        "decoder input) is made on the device by indexing, with no read at all: "
        "`t[:, 0].view(1, -1)`."
    ),
    before="text = ''.join([itos[int(i)] for i in y])   # one read per element\n",
    after="text = ''.join([itos[i] for i in y.tolist()])  # one read\n",
    removes="every read but one",
)


# A value a sampling call drew, read every step (``source.reads_sample``): an action for
# an environment, a token to decode. The host needs it at once, so "read it every N
# steps" does not apply; one read can serve many.
SAMPLE_READ_ADVICE = Advice(
    title="Sample or choose for many at once: one read serves them all",
    text=(
        "The host needs this sampled or chosen value at once (an action for the "
        "environment, a token to print or feed back), so it cannot wait to be read every N "
        "steps, and each read waits for the forward pass before it. Sample (or take the "
        "`argmax`) for several environments "
        "or sequences in one batch (`gymnasium.vector`, Stable-Baselines3's `n_envs`, a "
        "batch of prompts) and read them with one `.tolist()`; a small policy often runs "
        "as fast on the CPU, where the read costs nothing; a token fed back can stay on "
        "the device and be decoded at the end."
    ),
    before=(
        "action = Categorical(probs).sample()\n"
        "state, reward, done, *_ = env.step(action.item())     # one read per step\n"
    ),
    after=(
        "actions = Categorical(probs).sample()                # one per environment\n"
        "states, rewards, dones, *_ = envs.step(actions.tolist())   # one read for all\n"
    ),
    removes="reads per environment or sequence: one read serves the batch",
)


# A read in torch.compile'd code (``Source.compiled``), and what the fix means there: the
# advice's ``compiled``.
GRAPH_BREAK = "graph_break"
IN_GRAPH = "in_graph"
COMPILED_READS = {
    GRAPH_BREAK: (
        "In torch.compile'd code this read also breaks the graph: the fix joins the graphs "
        "around this line."
    ),
    IN_GRAPH: (
        "Captured in a torch.compile graph: it still waits for the GPU there, as in eager "
        "code (the graph records no lines: this one is found by the read's name)."
    ),
}


# A scalar read made every N steps already (under ``if step % log_every == 0:``): its
# kind's fix is what the code does. CycleGAN's ``get_current_losses`` reads 8 losses one
# by one each ``print_freq`` iterations (a walk: on a GPU the first waits, the rest follow).
PERIODIC_READ_ADVICE = Advice(
    title="Read every N steps already: read the values together, or less often",
    text=(
        "This read runs only every N steps already, so little is left to gain here: each "
        "time it runs it waits once for the GPU's queue. Where it reads several tensors "
        "one after another (a dict of losses, a row of meters), stack them on the device "
        "and read them with one `.tolist()`: one copy for all of them. A larger N reads "
        "less often."
    ),
    before=(
        "if step % log_every == 0:\n"
        "    logged = {name: float(losses[name]) for name in names}   # a read each\n"
    ),
    after=(
        "if step % log_every == 0:\n"
        "    values = torch.stack([losses[name].detach() for name in names]).tolist()\n"
        "    logged = dict(zip(names, values))   # one read for all\n"
    ),
    removes="every read of a logging step but one",
)

# Copies to the host that a host call takes at once (``source.host_use``): neither kept
# on the device nor read later, only made once for many, or differently.
HOST_USE_ADVICE: dict[str, Advice] = {
    # CycleGAN's ``save_networks``: ``torch.save(net.module.cpu().state_dict(), path)`` then
    # ``net.cuda()``, every parameter and gradient copied to the host and uploaded back.
    "torch.save": Advice(
        title="Save the checkpoint from the device: torch.save(net.state_dict(), path)",
        text=(
            "A checkpoint has to reach the host, so this copy waits for the GPU wherever it "
            "is made. Moving the model to the host to save it (`net.cpu()`) copies every "
            "parameter and gradient one by one, and moving it back (`net.cuda()`) uploads "
            "them all again. `torch.save(net.state_dict(), path)` copies each tensor to the "
            "host itself and leaves the model where it is (load it with `map_location`). "
            "Save every N epochs, not every few steps; "
            "`torch.distributed.checkpoint.async_save` writes it in the background."
        ),
        before="torch.save(net.cpu().state_dict(), path)\nnet.cuda()\n",
        after=(
            "torch.save(net.state_dict(), path)   # no move to the host and back\n"
            "# later: net.load_state_dict(torch.load(path, map_location=device))\n"
        ),
        removes="the copies of the gradients, and the uploads back: the parameters are copied once",
    ),
    # DETR's ``HungarianMatcher``: the cost matrix copied to the host for scipy, once per
    # decoder layer with auxiliary losses (6 a step by default), its result needed by the
    # loss of the same step.
    "linear_sum_assignment": Advice(
        title="One copy for every matching: scipy's solver needs the cost matrix at once",
        text=(
            "scipy's `linear_sum_assignment` runs on the host, and the step's loss needs its "
            "result, so the cost matrix has to be copied there and the host waits: a pinned "
            "buffer read later does not help. What can go is one wait per matching: a "
            "matcher called once per decoder layer (auxiliary losses) copies once per layer. "
            "Build the cost matrices of all layers on the device, copy them with one "
            "`.cpu()`, then solve each on the host; or solve the assignment on the GPU."
        ),
        before=(
            "for aux in outputs['aux_outputs']:          # one copy per decoder layer\n"
            "    indices = self.matcher(aux, targets)   # C.cpu() -> linear_sum_assignment\n"
        ),
        after=(
            "costs = torch.stack([cost_matrix(o, targets) for o in all_outputs])\n"
            "costs = costs.cpu()                         # one copy for every layer\n"
            "indices = [\n"
            "    [linear_sum_assignment(c[i]) for i, c in enumerate(layer.split(sizes, -1))]\n"
            "    for layer in costs\n"
            "]\n"
        ),
        removes="the waits of every matching but one a step",
    ),
}


def advice_for(
    kind_name: str,
    ops: list[str],
    bytes: int | None = None,
    forward_ops: Sequence[str] = (),
    frames: Iterable[tuple[str, str]] = (),
    apis: Iterable[str] = (),
    first_calls: Iterable[tuple[str, bool]] | None = None,
    in_loop: bool = False,
    as_size: bool = False,
    per_element: bool = False,
    sampled: bool = False,
    compiled: str | None = None,
    host_use: str | None = None,
    periodic: bool = False,
) -> dict[str, Any]:
    """``{"title", "text", "before", "after", "removes"}`` for a site of this kind,
    operator chain (outermost first) and, for copies, the most bytes one of its syncs
    copied (None: unknown). ``forward_ops``: a backward site's forward operators, what the
    user wrote (``x[mask]``'s backward syncs in ``aten::nonzero``, and its fix is the
    mask's): they pick an operator's fix first; the copy patterns read ``ops`` alone.
    ``frames``: ``(file, function)`` of the syncs' stacks, for a library's own fix.
    ``apis``: the blocking calls every one of the syncs made, and ``first_calls`` the
    library operator each sync is inside the first call of, with whether that operator
    is its chain's innermost (None: some sync is in no first call), for the fixes that
    depend on them (a library's set-up). ``in_loop``: every sync's line runs once per pass
    of a loop of its function (``Source.loop_line``): a selection there is one per group.
    ``as_size``: every sync's read sets a size on the host (``Source.read_as_size``).
    ``per_element``: every sync reads one element of what a loop iterates
    (``Source.reads_elements``). ``sampled``: every sync reads a value a sampling call
    drew (``Source.reads_sample``). ``compiled``: every sync was read in torch.compile'd
    code, so (``Source.compiled``): the advice's ``compiled`` says what the fix means there.
    ``host_use``: the host call every sync's copy is taken by at once (``Source.host_use``),
    or ``logging``: every sync's print is a logger's message built in its call.
    ``periodic``: every sync is read under a ``%`` test (``Source.periodic_guard``, its own
    or its caller's), in some steps only: read every N steps already."""
    record = kind(kind_name)
    frames = list(frames)
    # A print, then a library's own fix (its code is not the user's to change), then an
    # operator's own fix for its copies inside (ctc_loss), then what was copied, then the
    # operators.
    found = library_fix(frames, ops)
    if TENSOR_TEXT_OP in ops:
        refinement = found[0].advice if found and found[0].formats else TENSOR_TEXT_ADVICE
    else:
        refinement = found[0].advice if found else None
    if refinement is TENSOR_TEXT_ADVICE and per_element and kind_name == SCALAR_READBACK:
        # Each element of a tensor formatted one at a time (a label a loop's element makes,
        # TransformerLens' ``f"L{layer}H{head}"`` of ``for head in heads``): one conversion.
        refinement = ELEMENT_READ_ADVICE
    elif refinement is TENSOR_TEXT_ADVICE and host_use == "logging":
        # A logger's message formatted in the call: the logger's own arguments make no
        # read while its level is off, and one only when the message is shown.
        refinement = LAZY_LOG_ADVICE
    elif refinement is TENSOR_TEXT_ADVICE and periodic and kind_name == SCALAR_READBACK:
        # A print every N steps already: "print a number every N steps" is what it does.
        refinement = PERIODIC_READ_ADVICE
    # A fix for code of a library the user called, where no entry of the library's own
    # says what of it to set: an edit of that library, and the report says so.
    edits_library = None if refinement is not None else edited_library(frames)
    if refinement is None and ops:
        called = set(apis)
        firsts = None if first_calls is None else list(first_calls)
        refinement = next(
            (
                entry.advice
                for entry in OP_ADVICE
                if entry.apis
                and kind_name in entry.kinds
                and any(calls <= called for calls in entry.apis)
                and (ops[-1] in entry.ops if entry.innermost else not entry.ops.isdisjoint(ops))
                and (
                    not entry.first_call
                    or (
                        bool(firsts)
                        and all(
                            op in entry.ops and (innermost or not entry.innermost)
                            for op, innermost in firsts  # type: ignore[union-attr]
                        )
                    )
                )
            ),
            None,
        )
    if refinement is None and kind_name == BLOCKING_HOST_TO_DEVICE:
        # An operator that copies inside itself (ctc_loss) is fixed by how it is called,
        # not by what it copied; the innermost such operator is the one that copied.
        refinement = _operator_fix(reversed(ops), kind_name)
    if refinement is None and kind_name == BLOCKING_HOST_TO_DEVICE:
        pattern = host_to_device_pattern(ops, bytes)
        refinement = HOST_TO_DEVICE_ADVICE[pattern] if pattern else None
    if (
        refinement is None
        and in_loop
        and kind_name == DYNAMIC_SHAPE
        and not LOOP_SELECTION_OPS.isdisjoint((*forward_ops, *ops))
    ):
        refinement = LOOP_SELECTION_ADVICE
    if refinement is None and per_element and kind_name == SCALAR_READBACK:
        # Before the branch's fix: ``if t[i] != 0:`` in a loop over ``range(n)`` reads an
        # element a pass; one ``.tolist()`` before the loop reads them all.
        refinement = ELEMENT_READ_ADVICE
    if refinement is None:
        # The outermost operator is what the user wrote (x[mask] -> aten::index), so it
        # picks the refinement before the inner ones (aten::nonzero).
        refinement = _operator_fix((*forward_ops, *ops), kind_name)
    if refinement is None and as_size and kind_name == SCALAR_READBACK:
        refinement = SIZE_READ_ADVICE
    if refinement is None and host_use in HOST_USE_ADVICE and kind_name == DEVICE_TO_HOST_COPY:
        refinement = HOST_USE_ADVICE[host_use]
    if refinement is None and sampled and kind_name in (SCALAR_READBACK, DEVICE_TO_HOST_COPY):
        # A copy of a sampled action (``action.cpu().numpy()``) is needed at once as well:
        # a pinned buffer read later does not help (a CleanRL walk).
        refinement = SAMPLE_READ_ADVICE
    if refinement is None and periodic and kind_name == SCALAR_READBACK:
        # Its kind's fix ("read it every N steps") is what the code does already.
        refinement = PERIODIC_READ_ADVICE
    if refinement is None:
        refinement = record.advice
    fields = msgspec.to_builtins(refinement)
    fields["removes"] = refinement.removes or record.removes
    if edits_library is not None:
        fields["library_code"] = edits_library
    if compiled in COMPILED_READS:
        fields["compiled"] = COMPILED_READS[compiled]
    return fields


# Packages whose functions a user's code calls directly, with the fixes written for such
# calls (torch's own; numpy's; scipy's, which convert what they are given as numpy does: a
# BoTorch walk's reads of its bounds in scipy's ``old_bound_to_new`` were "an edit of
# scipy's own code", where the caller handing it tensors is the one to change).
_FRAMEWORK_PACKAGES = frozenset({"torch", "functorch", "triton", "numpy", "torch_npu", "scipy"})


def called_library(frames: Sequence[tuple[str, str]]) -> str | None:
    """The known library (``LIBRARY_PACKAGES``, torch and numpy aside) whose code the user's
    line called, of a sync's library frames (``library_frames``, innermost first): the
    package of the outermost one (ultralytics' ``model.train()``, whose loss syncs through
    torchvision and torch); None where it is torch's or not known. A wrapper the call
    passes through (``@torch.no_grad()``'s, around diffusers' ``DDPMPipeline.__call__``) is
    not the code called."""
    outermost = next((file for file, _func in reversed(frames) if not passes_through(file)), None)
    if outermost is None:
        return None
    package = library_package(outermost)
    return package if package not in _FRAMEWORK_PACKAGES else None


def edited_library(frames: Sequence[tuple[str, str]]) -> str | None:
    """Whose code a fix of a sync in library frames (``library_frames``) edits: under a
    loop's library (``LOOP_LIBRARIES``), the innermost package's, whose line reads; the
    known library's the user's line called (``called_library``), else the package of the
    innermost of those frames that is neither Python's own nor torch's nor one the
    catalogue knows, the one whose line reads: one the attribution found installed
    (torchdiffeq's solvers), or one torch called back (a custom Function's ``backward``,
    run by the user's ``loss.backward()``); else the outermost known one. (The outermost's
    named the package that called it: denoising-diffusion-pytorch's Trainer for the reads in
    ema_pytorch's ``update``.)
    None where the user's line called the library's ``cpu`` (a TensorDict's ``td.cpu()``):
    the copy is the user's to move or drop."""
    called = next(((f, func) for f, func in reversed(frames) if not passes_through(f)), None)
    if (
        called is not None
        and called[1] == "cpu"
        and package_of(called[0]) not in _FRAMEWORK_PACKAGES
    ):
        return None
    known = called_library(frames)
    if known in LOGGING_LIBRARIES or any(
        _frame_matches(path, func, file, funcs)
        for path, func in frames
        for file, funcs in LOGGING_CALLS
    ):
        # A logger converting the value the user's line gave it (``wandb.log({"loss":
        # loss})`` reads ``loss.item()`` in wandb's code): the fix is the user's, what and how
        # often to log, not an edit of the logger.
        return None
    packages = [
        package
        for file, _func in frames
        if not passes_through(file)
        and not wraps_one_op(file, _func)
        and (package := package_of(file)) is not None
        and package not in _FRAMEWORK_PACKAGES
        and package not in _STDLIB_MODULES
        and package.isidentifier()
    ]
    if known in LOOP_LIBRARIES and packages:
        # A loop's library runs other packages' code (TRL's ``compute_loss`` of a Trainer
        # subclass; a LightningModule of pytorch-forecasting, through torch's optimizer
        # closure): the innermost package, whose line reads, is the one to edit (a TRL walk:
        # 17 of DPO's 25 reads a step were said to be transformers'). A model of the loop's
        # own library that code runs is its own again (transformers' mask check under
        # sentence-transformers' loss).
        return packages[0]
    # The innermost package, whose line reads, whichever the user's line called: a BoTorch
    # walk's reads in gpytorch's ``kernel.py`` and linear_operator's ``cholesky.py`` were
    # "an edit of botorch's own code" under ``optimize_acqf(...)`` and gpytorch's under
    # ``mll(...)``, one read with two owners. A known library's operator that reads by its
    # nature, through a one-op wrapper (torchvision's NMS), is not its line: the package
    # calling it is (ultralytics').
    return packages[0] if packages else known


_STDLIB_MODULES = frozenset(sys.stdlib_module_names)
# Loggers' conversions of the values they are given (TensorBoard's ``add_scalar(tag,
# loss, step)`` runs ``make_np``: ``loss.detach().cpu().numpy()``): a copy there is the
# user's read of the value logged, not a library's own copy counted apart (a walk:
# ``add_scalar(loss)`` was said to fix ``add_scalar(loss.item())``). torch's own logger,
# and the packages of ``LOGGING_LIBRARIES``.
_TORCH_LOGGER = "torch/utils/tensorboard/"


def converts_a_logged_value(frames: Iterable[tuple[str, str]]) -> bool:
    """Whether a copy's frames run through a logger's conversion, or a metric's of what the
    user's line gave it to accumulate (``METRIC_CONVERSIONS``)."""
    return any(
        _TORCH_LOGGER in path.replace("\\", "/")
        or package_of(path) in LOGGING_LIBRARIES
        or any(
            _frame_matches(path, func, file, funcs)
            for file, funcs in (*METRIC_CONVERSIONS, *LOGGING_CALLS)
        )
        for path, func in frames
    )


# Metrics that take the user's tensors and convert them to Python or NumPy there:
# Hugging Face ``evaluate``'s ``metric.add_batch(predictions=..., references=...)``, through
# ``datasets``' ``_cast_to_python_objects`` (``obj.detach().cpu().numpy()`` of each). A
# walk of accelerate's examples: every evaluation batch's two copies were left to the
# footnote of library copies, none listed, though they copy the user's device tensors.
METRIC_CONVERSIONS = (
    ("evaluate/module.py", frozenset({"add_batch", "add"})),
    ("datasets/features/features.py", frozenset({"_cast_to_python_objects"})),
)


# Libraries that write checkpoints, whose copies to the host in a CPU trace's unrun code
# (safetensors' ``tensor.to('cpu')`` of each tensor off the host, under accelerate's
# ``save_state``) are a checkpoint's own: it has to reach the host.
CHECKPOINT_WRITERS = frozenset({"safetensors"})

# Logging calls of libraries that are more than loggers (Lightning Fabric's ``fabric.log``,
# ``log_dict``): what they read is a value the user's line gave them.
LOGGING_CALLS = (
    *(
        (f"{package}/fabric.py", frozenset({"log", "log_dict"}))
        for package in ("lightning/fabric", "lightning_fabric")
    ),
    # torchtune's metric loggers (a recipe's ``self._metric_logger.log_dict(...)``): its
    # ``DiskLogger`` writes a tensor with ``.tolist()`` (a walk: the recipe's tokens per
    # second and gradient norm, left to the footnote of library copies, none listed).
    ("torchtune/training/metric_logging.py", frozenset()),
)
# Loggers and progress bars: what they read is a value the user's line gave them.
LOGGING_LIBRARIES = frozenset(
    {
        "wandb",
        "tensorboardX",
        "mlflow",
        "tqdm",
        "rich",
        "comet_ml",
        "neptune",
        "clearml",
        "aim",
        "dvclive",
    }
)
# Libraries whose training loop runs other packages' code: Hugging Face's ``Trainer`` (TRL's
# and sentence-transformers' subclasses), Lightning's (a LightningModule of another
# package), accelerate's, Ignite's ``Engine``, Keras' and fastai's fit, Composer's.
LOOP_LIBRARIES = frozenset(
    {
        "transformers",
        "lightning",
        "pytorch_lightning",
        "lightning_fabric",
        "accelerate",
        "ignite",
        "keras",
        "fastai",
        "composer",
    }
)


def package_of(path: str) -> str | None:
    """The top package of a library file: the folder after ``site-packages`` (or
    ``dist-packages``), else the first folder of a path torch shortened to its package
    (``open_clip_train/train.py``); None for a file in no package, or at an absolute path
    outside site-packages (a checkout: the user's)."""
    parts = [part for part in path.replace("\\", "/").split("/") if part and part != "."]
    for marker in ("site-packages", "dist-packages"):
        if marker in parts:
            parts = parts[len(parts) - parts[::-1].index(marker) :]
            break
    else:
        if path.startswith(("/", "\\", "<")) or (len(path) > 1 and path[1] == ":"):
            return None
    return parts[0] if len(parts) > 1 else None


def is_framework_file(path: str) -> bool:
    """Whether a file is torch's (or numpy's, triton's...) own Python."""
    return package_of(path) in _FRAMEWORK_PACKAGES


def library_package(path: str) -> str | None:
    """The known library (``LIBRARY_PACKAGES``) a file is of (``package_of``); None for
    any other."""
    top = package_of(path)
    return top if top in LIBRARY_PACKAGES else None


def _operator_fix(ops: Iterable[str], kind_name: str) -> Advice | None:
    """The fix of the first of ``ops`` (in the order given) that an ``OP_ADVICE`` entry
    without calls has for this kind; None: none has."""
    return next(
        (
            entry.advice
            for op in ops
            for entry in OP_ADVICE
            if not entry.apis and op in entry.ops and kind_name in entry.kinds
        ),
        None,
    )


# The advice is written for CUDA (ROCm's torch build keeps ``torch.cuda``); torch_npu's
# API has the same calls under ``torch.npu`` and its allocator the same options.
_NPU_WORDS = (
    (re.compile(r"\btorch\.cuda\."), "torch.npu."),
    (re.compile(r"\bPYTORCH_CUDA_ALLOC_CONF\b"), "PYTORCH_NPU_ALLOC_CONF"),
    (re.compile(r"\bcudaMalloc\b"), "aclrtMalloc"),
    (re.compile(r"\bcudaFree\b"), "aclrtFree"),
    (re.compile(r"\bcudaHostAlloc\b"), "aclrtMallocHost"),
    # torch_npu's counters are not known to be torch.cuda's: the parenthesis naming them goes.
    (re.compile(r" \(`torch\.npu\.memory_stats\(\)` counts .*?`num_device_free`\)"), ""),
    (re.compile(r"\b([Aa]) GPU\b"), r"\1n NPU"),
    (re.compile(r"\bGPU\b"), "NPU"),
)


# ROCm keeps torch.cuda and torch.backends.cudnn; its libraries and runtime calls are
# named otherwise.
_ROCM_WORDS = (
    (re.compile(r"\bcuDNN\b"), "MIOpen"),
    (re.compile(r"\bcuBLAS\b"), "rocBLAS"),
    (re.compile(r"\bcuFFT\b"), "rocFFT"),
    (re.compile(r"\bcuSOLVER\b"), "rocSOLVER"),
    (re.compile(r"\bcudaMalloc\b"), "hipMalloc"),
    (re.compile(r"\bcudaFree\b"), "hipFree"),
    (re.compile(r"\bcudaHostAlloc\b"), "hipHostMalloc"),
    (re.compile(r"\bcudaEventSynchronize\b"), "hipEventSynchronize"),
)
_DEVICE_WORDS = {"npu": _NPU_WORDS, "rocm": _ROCM_WORDS}


# Advice whose vendor words are facts of a measurement on CUDA (the waits of cuDNN's
# ctc_loss): on another device they are kept as they are, and what is known there is said.
_MEASURED_ON_CUDA = {
    "rocm": (
        " (All measured with CUDA and cuDNN. On ROCm torch's own kernel is the same code; "
        "MIOpen's ctc_loss, which torch takes under similar conditions, was not measured.)"
    ),
    "npu": (
        " (All measured with CUDA and cuDNN. On an NPU torch_npu runs its own CTC kernel: "
        "whether and where it waits was not measured.)"
    ),
}
_MEASURED_ON_CUDA_TITLES = frozenset({CTC_TITLE, CUDNN_CTC_TITLE})


def advice_on_device(advice: dict[str, Any], device: str | None) -> dict[str, Any]:
    """``advice`` (``advice_for``'s) in the words of the device its syncs waited for: on an
    NPU, ``torch.npu.Event()`` and "the NPU" where it says ``torch.cuda.Event()`` and "the
    GPU"; on ROCm, MIOpen and ``hipMalloc`` where it says cuDNN and ``cudaMalloc``. Other
    devices: ``advice`` itself. Advice measured on CUDA keeps its words, with a note."""
    words = _DEVICE_WORDS.get(device or "")
    if words is None:
        return advice
    if advice.get("title") in _MEASURED_ON_CUDA_TITLES:
        return {**advice, "text": advice["text"] + _MEASURED_ON_CUDA[device or ""]}
    worded = dict(advice)
    for field in ("title", "text", "before", "after", "removes"):
        value = worded.get(field)
        if isinstance(value, str):
            for pattern, word in words:
                value = pattern.sub(word, value)
            worded[field] = value
    return worded


def to_json() -> dict[str, Any]:
    """What the dashboard needs of the catalogue (the plugin's ``catalogue`` route)."""
    return {"kinds": [k.to_json() for k in KINDS], "checked": list(CHECKED)}


# Libraries whose files show up with paths shortened to the package (relative to
# site-packages) in modern traces; anything under them is library code. Their functions
# compute where the tensors they are given are (``source._host_made``).
LIBRARY_PACKAGES = frozenset(
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
        # Lightning's and torchmetrics' own: taken for the user's code where the machine
        # analysing the trace has them not installed (a laptop, a CI job with tb-syncfinder
        # alone), naming lightning_utilities/core/apply_func.py as the user's line.
        "lightning_utilities",
        "torchmetrics",
        "peft",
        "trl",
        "diffusers",
        "xformers",
        "flash_attn",
        "bitsandbytes",
        "torchao",
        "einops",
        "deepspeed",
        "fairscale",
        "apex",
        "timm",
        "tqdm",
        "torch_npu",
        "typing_extensions",
        # Reinforcement learning: Stable-Baselines3's rollouts and updates read the policy's
        # actions and losses in its own code under one ``model.learn()``. Not installed
        # where the trace was analysed, its files were the user's (every site at one of
        # its def lines, none at ``model.learn()``, a gate failing that passed where it was).
        "stable_baselines3",
        "sb3_contrib",
        "rl_zoo3",
        "gymnasium",
        "gym",
        "torchrl",
        "tensordict",
        # Tianshou's collectors and trainers: under one ``run_training(...)`` (a walk of its
        # DQN, PPO and SAC, where it was not installed: 100 reads a step at its def lines
        # instead of 66 at the user's call, and a gate failing that passed where it was).
        "tianshou",
        # Other training and model libraries with names of their own (not ``datasets`` or
        # ``models``, which are as often a project's own folders).
        "ultralytics",
        "mmcv",
        "mmengine",
        "mmdet",
        "mmseg",
        "mmpretrain",
        "detectron2",
        "fairseq",
        "torch_geometric",
        "dgl",
        "kornia",
        "segment_anything",
        "monai",
        "pytorch3d",
        "sentence_transformers",
        "open_clip",
        "open_clip_train",
        "keras",
        "fastai",
        # OpenAI's Whisper (``openai-whisper``): its decoding reads every token.
        "whisper",
        # Opacus (differential privacy): its clipping, its DP layers and its accountant,
        # under the user's ``optimizer.step()`` and model calls.
        "opacus",
        # Captum (interpretability): its attributions' forwards and perturbations.
        "captum",
        # BoTorch (Bayesian optimisation, on GPyTorch): its fits, acquisition functions and
        # their optimisation, under the user's ``optimize_acqf(...)``.
        "botorch",
        # Avalanche (continual learning): its strategies, plugins and metrics, under the
        # user's ``strategy.train(experience)``.
        "avalanche",
        # TransformerLens (interpretability): its hooked models, caches and utilities.
        "transformer_lens",
        # skrl (reinforcement learning): its agents, memories and trainers, under the
        # user's ``trainer.train()``.
        "skrl",
        # sbi (simulation-based inference) and the flows it trains.
        "sbi",
        "nflows",
        # fastai's own: its callbacks run through fastcore's dispatch (``basics.py``'s
        # ``__call__``), which a report where fastai is not installed named as the user's.
        "fastcore",
        "fastprogress",
        "gpytorch",
        "linear_operator",
        "x_transformers",
        "torchdiffeq",
        # PyKEEN's ``pipeline(...)`` trains and evaluates in its own code.
        "pykeen",
        "pyro",
        "pytorch_metric_learning",
        "torchtune",
        "torchtitan",
        "megatron",
        "nemo",
        "ignite",
        # skorch's ``NeuralNet`` runs the loop (``fit``, ``predict_proba``) in its own code,
        # and copies outputs to the host there (``to_numpy``'s ``if X.is_cuda:``).
        "skorch",
        "composer",
        "huggingface_hub",
        "safetensors",
        "tokenizers",
        "sentencepiece",
        "tiktoken",
        "wandb",
        "mlflow",
        "tensorboardX",
        "sklearn",
        "scipy",
        "pandas",
    }
)
