"""Write CUDA traces the way Kineto does, for tests (engine, plugin, dashboard, demo).

The shapes are copied from the real A100 traces in ``../shared/traces/real``: ``cpu_op`` /
``cuda_runtime`` events nested in time on the host thread, runtime ``args`` with
``External id`` == ``correlation``, device events (``kernel``, ``gpu_memcpy`` named
``Memcpy DtoH (Device -> Pageable)``, ``gpu_memset``, CUPTI ``cuda_sync`` records) on
``pid`` = device / ``tid`` = stream, ``ac2g`` flow pairs, ``python_function`` trees with
``Python id`` / ``Python parent id`` and ``nn.Module: Name_0`` entries, ``ProfilerStep#N``
user annotations, metadata events and ``deviceProperties``.

Example::

    b = KinetoTraceBuilder()
    with b.step(1):
        b.kernel("void fwd_kernel<float>()", dur=300)
        with b.op("aten::item", stack=[("train.py", 8, "train_step")], called="item"):
            with b.op("aten::_local_scalar_dense"):
                b.runtime("cudaMemcpyAsync", dur=5, memcpy=("DtoH", "Pageable"), bytes=4)
                b.runtime("cudaStreamSynchronize")  # waits until the GPU is done
    b.write(tmp_path / "worker0.pt.trace.json")

Times are microseconds. The host clock ``b.now`` advances as events are added; the device
clock runs behind it like a real GPU queue: a sync call without ``dur`` lasts until the
device has finished what was queued.

``KinetoTraceBuilder(concurrent_streams=True)`` gives each stream its own queue (streams
run concurrently; ``cudaStreamSynchronize`` waits for its own stream only), with
``event_record`` / ``stream_wait_event`` for cross-stream waits.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Union

FrameSpec = Union[tuple[str, int, str], str]  # (file, def line, func) or "nn.Module: Net_0"

_MEMKIND = {"Pageable": "Pageable", "Pinned": "Pinned", "Device": "Device"}


class KinetoTraceBuilder:
    """Builds one Kineto trace (one worker) event by event."""

    def __init__(
        self,
        pid: int = 4515,
        tid: int = 4515,
        device: int = 0,
        stream: int = 7,
        start_us: int = 1_683_564_901_548_000,
        device_name: str = "NVIDIA A100-SXM4-80GB",
        gpu: bool = True,
        concurrent_streams: bool = False,
    ) -> None:
        self.pid = pid
        self.tid = tid
        self.device = device
        self.stream = stream
        self.gpu = gpu
        self.device_name = device_name
        self.start_us = start_us
        self.now: float = start_us + 100
        self.device_now: float = self.now
        self.events: list[dict[str, Any]] = []
        self._external_id = 0
        self._correlation = 800_000
        self._python_id = 0
        self._python_stack: list[int] = []  # open python frame ids (for parent ids)
        self.extra_top_level: dict[str, Any] = {}
        # concurrent_streams: one queue per stream, and pending cross-stream waits.
        self.concurrent_streams = concurrent_streams
        self.stream_now: dict[int, float] = {}
        self._stream_waits: dict[int, float] = {}
        self._events: dict[int, float] = {}  # event token -> when its stream's work is done
        self._event_streams: dict[int, int] = {}  # event token -> the stream it was recorded on

    # -- clocks ------------------------------------------------------------------------
    def advance(self, us: float) -> None:
        """Let host time pass (Python code between operators)."""
        self.now += us

    def _ext(self) -> int:
        self._external_id += 1
        return self._external_id

    def _corr(self) -> int:
        self._correlation += 1
        return self._correlation

    # -- host side ---------------------------------------------------------------------
    def _x(
        self,
        cat: str,
        name: str,
        ts: float,
        dur: float,
        args: dict[str, Any],
        pid: Any = None,
        tid: Any = None,
    ) -> dict[str, Any]:
        event = {
            "ph": "X",
            "cat": cat,
            "name": name,
            "pid": self.pid if pid is None else pid,
            "tid": self.tid if tid is None else tid,
            "ts": ts,
            "dur": dur,
            "args": args,
        }
        self.events.append(event)
        return event

    @contextmanager
    def _span(self, cat: str, name: str, args: dict[str, Any]) -> Iterator[dict[str, Any]]:
        event = self._x(cat, name, self.now, 0, args)
        self.now += 1
        yield event
        self.now += 1
        event["dur"] = self.now - event["ts"]

    @contextmanager
    def step(self, n: int) -> Iterator[None]:
        """A ``ProfilerStep#n`` span (what ``prof.step()`` records)."""
        with self._span(
            "user_annotation", f"ProfilerStep#{n}", {"External id": self._ext(), "Ev Idx": 0}
        ):
            yield

    @contextmanager
    def annotation(self, name: str) -> Iterator[None]:
        """A ``record_function(name)`` span."""
        with self._span("user_annotation", name, {"External id": self._ext(), "Ev Idx": 0}):
            yield

    @contextmanager
    def frame(self, frame: FrameSpec) -> Iterator[None]:
        """A python_function frame (``("train.py", 8, "train_step")``, a def line as modern
        traces record it) or ``"nn.Module: Net_0"``, open until the block ends."""
        if isinstance(frame, tuple):
            file, line, func = frame
            name = f"{file}({line}): {func}"
        else:
            name = frame
        self._python_id += 1
        args: dict[str, Any] = {
            "Python parent id": self._python_stack[-1] if self._python_stack else None,
            "Python id": self._python_id,
            "Ev Idx": 0,
        }
        if name.startswith("nn.Module: "):
            args["Python module id"] = 0
        self._python_stack.append(self._python_id)
        try:
            with self._span("python_function", name, args):
                yield
        finally:
            self._python_stack.pop()

    @contextmanager
    def thread(self, tid: int) -> Iterator[None]:
        """Host events inside go to thread ``tid`` (autograd's backward thread on a GPU) on
        the same clock; the Python frames open on the calling thread stay open meanwhile,
        as the thread that called ``backward()`` waits inside it."""
        saved = self.tid, self._python_stack
        self.tid, self._python_stack = tid, []
        try:
            yield
        finally:
            self.tid, self._python_stack = saved

    @contextmanager
    def frames(self, frames: Sequence[FrameSpec]) -> Iterator[None]:
        """Several python_function frames, outermost first, open until the block ends."""
        with self._frames(frames):
            yield

    @contextmanager
    def _frames(self, frames: Sequence[FrameSpec]) -> Iterator[None]:
        if not frames:
            yield
            return
        with self.frame(frames[0]), self._frames(frames[1:]):
            yield

    @contextmanager
    def op(
        self,
        name: str,
        stack: Sequence[FrameSpec] = (),
        called: str | None = None,
        call_stack: str | None = None,
        args: dict[str, Any] | None = None,
    ) -> Iterator[dict[str, Any]]:
        """A ``cpu_op``. ``stack``: python frames around it, outermost first. ``called``: the
        built-in the innermost frame called (``item`` gives ``<built-in method item of
        Tensor object at 0x...>``). ``call_stack``: the legacy ``Call stack`` argument."""
        frames = list(stack)
        if called:
            frames.append(f"<built-in method {called} of Tensor object at 0x7f2a5c0e3f60>")
        op_args: dict[str, Any] = {
            "External id": self._ext(),
            "Ev Idx": 0,
            "Fwd thread id": 0,
            "Sequence number": 1,
        }
        if call_stack is not None:
            op_args["Call stack"] = call_stack
        op_args.update(args or {})
        with self._frames(frames), self._span("cpu_op", name, op_args) as event:
            yield event

    # -- runtime calls and the device --------------------------------------------------
    def _device_event(
        self,
        cat: str,
        name: str,
        dur: float,
        corr: int,
        stream: int | None,
        launched_at: float,
        extra: dict[str, Any] | None = None,
    ) -> dict:
        stream = self.stream if stream is None else stream
        if self.concurrent_streams and cat != "cuda_sync":
            start = max(
                self.stream_now.get(stream, self.start_us),
                launched_at + 2,
                self._stream_waits.pop(stream, 0.0),
            )
            self.stream_now[stream] = start + dur
        else:
            start = max(self.device_now, launched_at + 2)
        args = {
            "External id": corr,
            "device": self.device,
            "context": 1,
            "stream": stream,
            "correlation": corr,
        }
        args.update(extra or {})
        event = self._x(cat, name, start, dur, args, pid=self.device, tid=stream)
        if cat != "cuda_sync":
            self.device_now = (
                max(self.device_now, start + dur) if self.concurrent_streams else start + dur
            )
        return event

    def _flow(self, corr: int, host_ts: float, device_ts: float, stream: int) -> None:
        self.events.append(
            {
                "ph": "s",
                "id": corr,
                "pid": self.pid,
                "tid": self.tid,
                "ts": host_ts,
                "cat": "ac2g",
                "name": "ac2g",
            }
        )
        self.events.append(
            {
                "ph": "f",
                "id": corr,
                "pid": self.device,
                "tid": stream,
                "ts": device_ts,
                "cat": "ac2g",
                "name": "ac2g",
                "bp": "e",
            }
        )

    def runtime(
        self,
        name: str,
        dur: float | None = None,
        memcpy: tuple[str, str] | None = None,
        bytes: int = 4,
        sync: str | None = None,
        device_dur: float = 2.0,
        stream: int | None = None,
        cat: str = "cuda_runtime",
        correlation: bool = True,
    ) -> dict[str, Any]:
        """A runtime (or driver, ``cat="cuda_driver"``) call on the host thread.

        ``memcpy=("DtoH", "Pageable")`` adds its device copy (``Memcpy DtoH (Device ->
        Pageable)``); ``sync="Stream Sync"`` adds the CUPTI ``cuda_sync`` record. Without
        ``dur``, a sync-like call lasts until the device is idle (at least 1 us).
        """
        corr = self._corr()
        ts = self.now
        if dur is None:
            done = self.device_now
            if self.concurrent_streams and "StreamSynchronize" in name:
                done = self.stream_now.get(self.stream if stream is None else stream, ts)
            dur = max(1.0, done - ts) if (sync or "Synchronize" in name) else 3.0
        args: dict[str, Any] = {"External id": corr, "cbid": 0}
        if correlation:
            args["correlation"] = corr
        else:
            del args["External id"]
        event = self._x(cat, name, ts, dur, args)
        stream_id = self.stream if stream is None else stream
        if memcpy is not None:
            direction, memory = memcpy
            if direction == "DtoH":
                label = f"Memcpy DtoH (Device -> {_MEMKIND.get(memory, memory)})"
            elif direction == "HtoD":
                label = f"Memcpy HtoD ({_MEMKIND.get(memory, memory)} -> Device)"
            else:
                label = "Memcpy DtoD (Device -> Device)"
            dev = self._device_event(
                "gpu_memcpy",
                label,
                device_dur,
                corr,
                stream,
                ts,
                {"bytes": bytes, "memory bandwidth (GB/s)": 1.0},
            )
            self._flow(corr, ts, dev["ts"], stream_id)
        if sync is not None:
            wait_start = max(ts, self.device_now - 1)
            self._x(
                "cuda_sync",
                sync,
                wait_start,
                1,
                {
                    "External id": corr,
                    "cuda_sync_kind": sync,
                    "stream": stream_id,
                    "correlation": corr,
                    "device": self.device,
                    "context": 1,
                },
                pid=self.device,
                tid=stream_id if sync != "Context Sync" else -1,
            )
        self.now = ts + dur + 1
        return event

    def driver_copy(
        self, bytes: int = 4096, host_dur: float = 100.0, op: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """A library's blocking copy through the driver API (cuFFT uploading a new plan's
        tables with ``cuMemcpyHtoD``) as Kineto writes it: the device copy and the flow's
        device end, and no call on the host (Kineto records the driver's launches only), so
        its correlation id names nothing there. The host is busy for ``host_dur``. ``op``:
        the operator event that made it, whose external id the copy then carries (torch
        2.11 writes it so); else its ``External id`` is its correlation id (as for every
        other device event here)."""
        corr = self._corr()
        ts = self.now
        extra: dict[str, Any] = {"bytes": bytes, "memory bandwidth (GB/s)": 1.0}
        if op is not None:
            extra["External id"] = op["args"]["External id"]
        dev = self._device_event(
            "gpu_memcpy", "Memcpy HtoD (Pageable -> Device)", 2.0, corr, None, ts, extra
        )
        self.events.append(
            {
                "ph": "f",
                "id": corr,
                "pid": self.device,
                "tid": self.stream,
                "ts": dev["ts"],
                "cat": "ac2g",
                "name": "ac2g",
                "bp": "e",
            }
        )
        self.now = max(ts + host_dur, dev["ts"] + dev["dur"] + 1)
        return dev

    def kernel(
        self,
        name: str = "void at::native::elementwise_kernel<128, 2>()",
        dur: float = 50.0,
        stream: int | None = None,
        link: bool = True,
    ) -> dict[str, Any]:
        """``cudaLaunchKernel`` on the host and the kernel on the device queue.
        ``link=False``: the launch carries no correlation and no ac2g flow is written (a
        trace whose correlations were lost)."""
        corr = self._corr()
        ts = self.now
        launch_args: dict[str, Any] = {"External id": corr, "cbid": 211, "correlation": corr}
        if not link:
            launch_args = {"cbid": 211}
        self._x("cuda_runtime", "cudaLaunchKernel", ts, 4, launch_args)
        kernel = self._device_event(
            "kernel", name, dur, corr, stream, ts, {"queued": 0, "registers per thread": 32}
        )
        if link:
            self._flow(corr, ts, kernel["ts"], self.stream if stream is None else stream)
        self.now = ts + 5
        return kernel

    def event_record(self, stream: int | None = None) -> int:
        """``cudaEventRecord`` on ``stream`` (no device activity, as in Kineto); returns a
        token for ``stream_wait_event``."""
        stream = self.stream if stream is None else stream
        corr = self._corr()
        self._x(
            "cuda_runtime",
            "cudaEventRecord",
            self.now,
            2,
            {"External id": corr, "cbid": 135, "correlation": corr},
        )
        self.now += 3
        self._events[corr] = self.stream_now.get(stream, self.device_now)
        self._event_streams[corr] = stream
        return corr

    def stream_wait_event(self, stream: int, event: int, record: bool = False) -> dict[str, Any]:
        """``cudaStreamWaitEvent(stream, event)``: the next work on ``stream`` starts after
        the work recorded by ``event``. ``record=True`` adds CUPTI's ``Stream Wait Event``
        record (``enable_cuda_sync_events``) naming both streams."""
        corr = self._corr()
        ts = self.now
        call = self._x(
            "cuda_runtime",
            "cudaStreamWaitEvent",
            ts,
            2,
            {"External id": corr, "cbid": 147, "correlation": corr},
        )
        self._stream_waits[stream] = max(self._stream_waits.get(stream, 0.0), self._events[event])
        if record:
            self._x(
                "cuda_sync",
                "Stream Wait Event",
                ts + 1,
                1,
                {
                    "External id": corr,
                    "cuda_sync_kind": "Stream Wait Event",
                    "wait_on_stream": self._event_streams[event],
                    "wait_on_cuda_event_record_corr_id": event,
                    "stream": stream,
                    "correlation": corr,
                    "device": self.device,
                    "context": 1,
                },
                pid=self.device,
                tid=stream,
            )
        self.now = ts + 3
        return call

    def memset(self, dur: float = 1.0) -> dict[str, Any]:
        corr = self._corr()
        ts = self.now
        self._x(
            "cuda_runtime",
            "cudaMemsetAsync",
            ts,
            3,
            {"External id": corr, "cbid": 51, "correlation": corr},
        )
        event = self._device_event(
            "gpu_memset", "Memset (Device)", dur, corr, None, ts, {"bytes": 1024}
        )
        self.now = ts + 4
        return event

    # -- many ranks (additive: collectives, distributedInfo, clocks) --------------------
    def set_distributed(
        self,
        rank: int,
        world_size: int,
        backend: str = "nccl",
        pg_config: Sequence[dict[str, Any]] | None = None,
        nccl_version: str | None = "2.21.5",
    ) -> None:
        """``distributedInfo`` as Kineto writes it since 2024 (``pg_config`` when given)."""
        info: dict[str, Any] = {"backend": backend, "rank": rank, "world_size": world_size}
        if pg_config is not None:
            info["pg_count"] = len(pg_config)
            info["pg_config"] = [dict(pg) for pg in pg_config]
        if nccl_version is not None and backend == "nccl":
            info["nccl_version"] = nccl_version
        self.extra_top_level["distributedInfo"] = info

    @staticmethod
    def pg_entry(
        name: str, ranks: Sequence[int], desc: str = "undefined", backend_config: str = "cuda:nccl"
    ) -> dict[str, Any]:
        """One ``pg_config`` entry."""
        return {
            "pg_name": name,
            "pg_desc": desc,
            "backend_config": backend_config,
            "pg_size": len(ranks),
            "ranks": list(ranks),
        }

    def set_clock(self, base_time_ns: int | None = None, host_name: str | None = None) -> None:
        """``baseTimeNanoseconds`` (``ts`` are then relative to it) and ``host_name``."""
        if base_time_ns is not None:
            self.extra_top_level["baseTimeNanoseconds"] = base_time_ns
        if host_name is not None:
            self.extra_top_level["host_name"] = host_name

    def shift_clock(self, delta_us: float) -> None:
        """Move every event by ``delta_us``: another host's clock, ahead or behind."""
        for event in self.events:
            if "ts" in event:
                event["ts"] += delta_us
        self.start_us += delta_us
        self.now += delta_us
        self.device_now += delta_us

    # (c10d op, nccl annotation, kernel word) per Collective name.
    _COLLECTIVE_NAMES = {
        "allreduce": ("c10d::allreduce_", "nccl:all_reduce", "AllReduce"),
        "allgather": ("c10d::_allgather_base_", "nccl:_all_gather_base", "AllGather"),
        "reduce_scatter": (
            "c10d::_reduce_scatter_base_",
            "nccl:_reduce_scatter_base",
            "ReduceScatter",
        ),
        "broadcast": ("c10d::broadcast_", "nccl:broadcast", "Broadcast"),
        "all_to_allv": ("c10d::alltoall_base_", "nccl:all_to_all", "SendRecv"),
        "barrier": ("c10d::barrier", "nccl:all_reduce", "AllReduce"),
    }

    def nccl_collective(
        self,
        name: str = "allreduce",
        nelems: int = 1 << 20,
        dtype: str = "Float",
        pg_name: str = "0",
        pg_ranks: Sequence[int] = (0, 1),
        pg_desc: str = "default_pg",
        kernel_dur: float = 100.0,
        kernel_start: float | None = None,
        legacy: bool = False,
        pg_id: int | None = None,
        seq: int | None = None,
        stream: int | None = None,
        external_id_is_correlation: bool = False,
    ) -> dict[str, Any]:
        """One NCCL collective issued at ``now``; returns its kernel event (a caller may set
        its ``dur`` afterwards: the kernel ends when the last rank has arrived).

        Modern shape (2024+): ``c10d::*`` cpu_op > ``record_param_comms`` (Collective name,
        Process Group Name/Ranks, In/Out msg nelems, dtype) > ``nccl:*`` annotation >
        ``cudaLaunchKernel``; the ``ncclDevKernel_*`` kernel carries the same arguments.
        ``legacy`` (2023): a ``nccl:*`` cpu_op with only ``Input Dims`` / ``Input type`` and an
        ``ncclKernel_*`` kernel without them (``Process Group ID`` when ``pg_id`` is given).
        The kernel starts at ``kernel_start`` if given, else when the device queue reaches it.
        """
        c10d, annotation, word = self._COLLECTIVE_NAMES[name]
        ranks_text = str(list(pg_ranks))
        comm_args: dict[str, Any] = {
            "Collective name": name,
            "In msg nelems": nelems,
            "Out msg nelems": nelems,
            "Group size": len(pg_ranks),
            "dtype": dtype,
            "In split size": "[]",
            "Out split size": "[]",
            "Process Group Name": pg_name,
            "Process Group Description": pg_desc,
            "Process Group Ranks": ranks_text,
        }
        if seq is not None:
            comm_args["Seq"] = seq
        stream_id = self.stream if stream is None else stream
        kernel_holder: dict[str, Any] = {}

        def launch() -> None:
            corr = self._corr()
            ts = self.now
            self._x(
                "cuda_runtime",
                "cudaLaunchKernelExC",
                ts,
                6,
                {"External id": corr, "cbid": 430, "correlation": corr},
            )
            start = kernel_start if kernel_start is not None else max(self.device_now, ts + 2)
            if legacy:
                kname = (
                    f"ncclKernel_{word}_RING_LL_Sum_{dtype.lower()}"
                    "(ncclDevComm*, unsigned long, ncclWork*)"
                )
                kargs: dict[str, Any] = {}
                if pg_id is not None:
                    kargs["Process Group ID"] = pg_id
            else:
                kname = (
                    f"ncclDevKernel_{word}_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"
                )
                kargs = dict(comm_args)
            args = {
                "External id": corr if external_id_is_correlation else self._ext(),
                "queued": 0,
                "device": self.device,
                "context": 1,
                "stream": stream_id,
                "correlation": corr,
                "registers per thread": 96,
            }
            args.update(kargs)
            kernel = self._x(
                "kernel", kname, start, kernel_dur, args, pid=self.device, tid=stream_id
            )
            self._flow(corr, ts, start, stream_id)
            self.device_now = start + kernel_dur
            self.now = ts + 7
            kernel_holder["kernel"] = kernel

        if legacy:
            legacy_args = {"Input Dims": [[nelems]], "Input type": [dtype.lower()]}
            with self.op(annotation, args=legacy_args):
                launch()
        else:
            with (
                self.op(c10d),
                self.op("record_param_comms", args=comm_args),
                self.annotation(annotation),
            ):
                launch()
        return kernel_holder["kernel"]

    # -- output ------------------------------------------------------------------------
    def _metadata(self) -> list[dict[str, Any]]:
        ts = self.start_us
        meta = [
            {
                "name": "process_name",
                "ph": "M",
                "ts": ts,
                "pid": self.pid,
                "tid": 0,
                "args": {"name": "python3.11"},
            },
            {
                "name": "process_labels",
                "ph": "M",
                "ts": ts,
                "pid": self.pid,
                "tid": 0,
                "args": {"labels": "CPU"},
            },
            {
                "name": "thread_name",
                "ph": "M",
                "ts": ts,
                "pid": self.pid,
                "tid": self.tid,
                "args": {"name": "thread 1 (python3.11)"},
            },
        ]
        if self.gpu:
            meta += [
                {
                    "name": "process_name",
                    "ph": "M",
                    "ts": ts,
                    "pid": self.device,
                    "tid": 0,
                    "args": {"name": "python3.11"},
                },
                {
                    "name": "process_labels",
                    "ph": "M",
                    "ts": ts,
                    "pid": self.device,
                    "tid": 0,
                    "args": {"labels": f"GPU {self.device}"},
                },
                {
                    "name": "thread_name",
                    "ph": "M",
                    "ts": ts,
                    "pid": self.device,
                    "tid": self.stream,
                    "args": {"name": f"stream {self.stream}"},
                },
            ]
        return meta

    def to_dict(self, record_window_end: float | None = None) -> dict[str, Any]:
        """The trace as Kineto writes it; ``record_window_end`` overrides that instant's ts
        (real traces sometimes carry a huge meaningless value there)."""
        end = max([self.now, self.device_now] + [e["ts"] + e.get("dur", 0) for e in self.events])
        events = (
            self._metadata()
            + list(self.events)
            + [
                {
                    "ph": "X",
                    "cat": "Trace",
                    "ts": self.start_us,
                    "dur": end - self.start_us,
                    "pid": "Spans",
                    "tid": "PyTorch Profiler",
                    "name": "PyTorch Profiler (0)",
                    "args": {"Op count": 0},
                },
                {
                    "name": "Iteration Start: PyTorch Profiler",
                    "ph": "i",
                    "s": "g",
                    "pid": "Traces",
                    "tid": "Trace PyTorch Profiler",
                    "ts": self.start_us,
                },
                {
                    "name": "Record Window End",
                    "ph": "i",
                    "s": "g",
                    "pid": "",
                    "tid": "",
                    "ts": record_window_end if record_window_end is not None else end + 10,
                },
            ]
        )
        doc: dict[str, Any] = {"schemaVersion": 1}
        if self.gpu:
            doc["deviceProperties"] = [
                {
                    "id": self.device,
                    "name": self.device_name,
                    "totalGlobalMem": 84990623744,
                    "computeMajor": 8,
                    "computeMinor": 0,
                    "maxThreadsPerBlock": 1024,
                    "numSms": 108,
                    "warpSize": 32,
                }
            ]
        doc["distributedInfo"] = {"backend": "nccl", "rank": 0, "world_size": 1}
        doc.update(self.extra_top_level)
        doc["traceEvents"] = events
        return doc

    def write(self, path: str | Path, record_window_end: float | None = None) -> Path:
        """Write the trace (gzip when the name ends in .gz); returns the path."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        data = json.dumps(self.to_dict(record_window_end)).encode()
        if path.name.endswith(".gz"):
            data = gzip.compress(data)
        path.write_bytes(data)
        return path


def item_sync(
    b: KinetoTraceBuilder,
    stack: Sequence[FrameSpec] = (("train.py", 8, "train_step"),),
    kernel_us: float | None = 400.0,
) -> None:
    """A GPU kernel followed by ``loss.item()``: the classic scalar readback (``kernel_us``
    None: the ``.item()`` alone, after kernels of the caller's)."""
    if kernel_us is not None:
        b.kernel(dur=kernel_us)
    with b.op("aten::item", stack=stack, called="item"), b.op("aten::_local_scalar_dense"):
        b.runtime("cudaMemcpyAsync", dur=5, memcpy=("DtoH", "Pageable"), bytes=4)
        b.runtime("cudaStreamSynchronize")


# The frames torch 2.11 records when prof.step() ends a profiling cycle and waits for the
# device (seen in ../shared/traces/h100_demo), outermost first, from prof.step() down.
PROFILER_STEP_FRAMES: tuple[FrameSpec, ...] = (
    ("torch/profiler/profiler.py", 884, "step"),
    ("torch/profiler/profiler.py", 924, "_transit_action"),
    ("torch/profiler/profiler.py", 278, "stop_trace"),
    ("torch/autograd/profiler.py", 403, "__exit__"),
    ("torch/cuda/__init__.py", 1152, "synchronize"),
    "<built-in function _cuda_synchronize>",
)
# What loss.backward() runs through down to the engine, outermost first.
BACKWARD_FRAMES: tuple[FrameSpec, ...] = (
    ("torch/_tensor.py", 576, "backward"),
    ("torch/autograd/__init__.py", 253, "backward"),
    ("torch/autograd/graph.py", 860, "_engine_run_backward"),
    "<built-in method run_backward of torch._C._EngineBase object at 0x7f569e72c7e0>",
)


def profiler_step_sync(b: KinetoTraceBuilder) -> None:
    """The profiler's own ``cudaDeviceSynchronize`` inside ``prof.step()``."""
    with b.frames(PROFILER_STEP_FRAMES):
        b.runtime("cudaDeviceSynchronize")


def mask_index_sync(
    b: KinetoTraceBuilder, sequence_number: int, stack: Sequence[FrameSpec] = ()
) -> None:
    """``t[mask]`` on a GPU: aten::index runs nonzero, which reads the count back. The
    forward op carries its autograd sequence number (``Fwd thread id`` 0: a forward op)."""
    with (
        b.op(
            "aten::index",
            stack=stack,
            args={"Sequence number": sequence_number, "Fwd thread id": 0},
        ),
        b.op("aten::nonzero"),
    ):
        b.runtime("cudaMemcpyAsync", dur=5, memcpy=("DtoH", "Pageable"), bytes=8)
        b.runtime("cudaStreamSynchronize")


def mask_backward_sync(
    b: KinetoTraceBuilder, sequence_number: int, tid: int, fwd_thread_id: int = 1
) -> None:
    """IndexBackward0 on autograd's thread ``tid`` (no Python frames there): its
    index_put_ runs nonzero on the mask again. It carries the forward op's sequence number
    and a nonzero ``Fwd thread id`` (torch's id of the forward thread, not a tid)."""
    link = {"Sequence number": sequence_number, "Fwd thread id": fwd_thread_id}
    with (
        b.thread(tid),
        b.op("autograd::engine::evaluate_function: IndexBackward0", args=link),
        b.op("IndexBackward0", args=link),
        b.op("aten::_index_put_impl_"),
        b.op("aten::nonzero"),
    ):
        b.runtime("cudaMemcpyAsync", dur=5, memcpy=("DtoH", "Pageable"), bytes=8)
        b.runtime("cudaStreamSynchronize")
