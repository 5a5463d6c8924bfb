"""CUDA-like Kineto traces for the dashboard's browser tests, and the source file they
point at. Written here (not with tests/kineto_builder.py) so the e2e tier depends only on
the trace format Kineto writes: operators with runtime calls nested in time, ``ac2g``
flows, ``gpu_memcpy`` names, device kernels, ``ProfilerStep#N`` and ``python_function``
stacks whose lines are the functions' definition lines, as modern torch records them.
"""

from __future__ import annotations

import gzip
import json
import os
import time
from pathlib import Path
from typing import Any

HOST_PID = 4242
HOST_TID = 4242
STREAM = 7

# The workload the traces claim to profile. Line numbers below are asserted by the tests.
TRAIN_PY = """import torch


def train_step(model, batch, opt):
    out = model(batch)
    loss = out.sum()
    loss.backward()
    opt.step()
    total = loss.item()
    return total


def select_foreground(logits, labels):
    fg = torch.nonzero(labels)
    return logits[fg]


if __name__ == "__main__":
    prof = torch.profiler.profile(with_stack=True)
    for step in range(4):
        if step % 2:
            print(loss.item())
        else:
            print(acc.item())
        prof.step()
"""
TRAIN_STEP_DEF = 4
ITEM_LINE = 9
SELECT_DEF = 13
NONZERO_LINE = 14
# A ``<module>`` frame already running when profiling started records its current line, the
# ``prof.step()`` line; either conditional ``.item()`` after it may be the sync: not exact.
RUNNING_LOOP_LINE = 25
# A file the trace names that is not under TensorBoard's source roots.
REMOTE_FILE = "/workspace/gone/remote_train.py"
# A Windows path that profilers on Windows have written without escaping its backslashes
# (``\U``, ``\d``, ``\S`` are invalid JSON escapes): the reader repairs the trace.
WINDOWS_FILE = "C:\\Users\\dev\\Sync\\win_train.py"

XSS = "<img src=x onerror=window.__xss=1>"


class TraceWriter:
    """Accumulates Kineto events on one host thread and one GPU stream."""

    def __init__(
        self, gpu: bool = True, stacks: bool = True, dist: dict[str, Any] | None = None
    ) -> None:
        self.gpu = gpu  # False: a CPU-only trace (no runtime calls, no device events)
        self.stacks = stacks  # False: profiled without with_stack (no python_function)
        self.dist = dist or {"rank": 0}  # distributedInfo
        self.events: list[dict[str, Any]] = []
        self.python_id = 0
        self.python_events: dict[int, dict[str, Any]] = {}  # Python id -> its event
        self.correlation = 1000
        self.device_free_at = 0.0  # when the stream's last kernel ends

    def x(self, name: str, cat: str, ts: float, dur: float, **args: Any) -> None:
        self.events.append(
            {
                "ph": "X",
                "cat": cat,
                "name": name,
                "pid": HOST_PID,
                "tid": HOST_TID,
                "ts": ts,
                "dur": dur,
                "args": args,
            }
        )

    def py(self, name: str, ts: float, dur: float, parent: int | None) -> int:
        self.python_id += 1
        args = {"Python id": self.python_id, "Python thread": 0}
        if parent is not None:
            args["Python parent id"] = parent
        if not self.stacks:
            self.python_events[self.python_id] = {"ts": ts, "dur": dur}  # not written
            return self.python_id
        self.x(name, "python_function", ts, dur, **args)
        self.python_events[self.python_id] = self.events[-1]
        return self.python_id

    def close(self, python_id: int, end: float) -> None:
        """Set a python frame's duration once its end is known."""
        event = self.python_events[python_id]
        event["dur"] = end - event["ts"]

    def runtime(self, name: str, ts: float, dur: float) -> int:
        self.correlation += 1
        self.x(
            name,
            "cuda_runtime",
            ts,
            dur,
            correlation=self.correlation,
            **{"External id": self.correlation},
        )
        return self.correlation

    def device(self, name: str, cat: str, ts: float, dur: float, corr: int, **args: Any) -> None:
        self.events.append(
            {
                "ph": "X",
                "cat": cat,
                "name": name,
                "pid": 0,
                "tid": STREAM,
                "ts": ts,
                "dur": dur,
                "args": {"correlation": corr, "device": 0, "stream": STREAM, **args},
            }
        )
        for ph, pid, tid, t in (("s", HOST_PID, HOST_TID, ts - 5), ("f", 0, STREAM, ts)):
            self.events.append(
                {
                    "ph": ph,
                    "id": corr,
                    "pid": pid,
                    "tid": tid,
                    "ts": t,
                    "cat": "ac2g",
                    "name": "ac2g",
                    **({"bp": "e"} if ph == "f" else {}),
                }
            )
        self.device_free_at = max(self.device_free_at, ts + dur)

    def kernel(self, name: str, ts: float, dur: float) -> None:
        """A launch at ``ts`` on the host; the kernel runs when the stream is free."""
        if not self.gpu:
            self.x("aten::mm", "cpu_op", ts, 6)
            return
        corr = self.runtime("cudaLaunchKernel", ts, 6)
        start = max(ts + 8, self.device_free_at)
        self.device(name, "kernel", start, dur, corr)

    def readback(
        self, op: str, inner: str, ts: float, parent: int, builtin: str, idle_after: float
    ) -> float:
        """``op`` -> ``inner`` -> cudaMemcpyAsync (DtoH pageable) + cudaStreamSynchronize,
        called from the python frame ``parent``; returns when the host is free again.
        On a CPU-only trace the operators run alone (no copy, no wait)."""
        if not self.gpu:
            self.py(builtin, ts, 12, parent)
            self.x(op, "cpu_op", ts + 1, 10)
            self.x(inner, "cpu_op", ts + 2, 8)
            return ts + 14
        wait_until = self.device_free_at + 12
        end = wait_until + 10
        self.py(builtin, ts, end - ts, parent)
        self.x(op, "cpu_op", ts + 1, end - ts - 2)
        self.x(inner, "cpu_op", ts + 2, end - ts - 4)
        corr = self.runtime("cudaMemcpyAsync", ts + 3, 6)
        self.device(
            "Memcpy DtoH (Device -> Pageable)",
            "gpu_memcpy",
            self.device_free_at + 1,
            2,
            corr,
            bytes=4,
        )
        self.runtime("cudaStreamSynchronize", ts + 10, wait_until - (ts + 10))
        # The GPU stays idle after the sync until the host launches the next kernel.
        self.device_free_at = end + idle_after
        return end

    def to_json(self) -> dict[str, Any]:
        return {
            "schemaVersion": 1,
            "deviceProperties": [{"id": 0, "name": "NVIDIA Test GPU", "totalGlobalMem": 1 << 34}],
            "distributedInfo": self.dist,
            "traceEvents": self.events,
        }


def write_run(
    logdir: Path,
    run: str,
    *,
    item: bool,
    nonzero: bool,
    steps: int = 4,
    file_name: str = "train.py",
    func_names: tuple[str, str] | None = None,
    op_names: tuple[str, str] | None = None,
    gpu: bool = True,
    stacks: bool = True,
    frame_line: int = TRAIN_STEP_DEF,
    first_step: int = 1,
    worker: str = "worker0",
    dist: dict[str, Any] | None = None,
    span: str = "1700000000000",
    kernel_us: float = 900,
    markers: bool = True,
) -> Path:
    """One run folder with one worker trace: ``steps`` training steps numbered from
    ``first_step``, each with an ``.item()`` readback in train_step (when ``item``) and a
    ``nonzero`` in select_foreground (when ``nonzero``); the train frame is recorded at
    ``frame_line``; ``dist`` is its ``distributedInfo`` (rank 0 of no stated world), ``span``
    the time tensorboard_trace_handler puts in the file name (epoch ms), ``kernel_us`` how
    long the step's first kernel runs (what the first readback waits for); ``markers``
    False: no ProfilerStep spans (a profile without a schedule's steps)."""
    train_fn, select_fn = func_names or ("train_step", "select_foreground")
    item_op, nonzero_op = op_names or ("aten::item", "aten::nonzero")
    w = TraceWriter(gpu=gpu, stacks=stacks, dist=dist)
    t = 1000.0
    for step in range(first_step, first_step + steps):
        start = t
        # Host-only work first (data loading): the GPU idles here, but not because of a sync.
        w.x(
            "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__",
            "user_annotation",
            t,
            1500,
        )
        t += 1510
        frame = w.py(f"{file_name}({frame_line}): {train_fn}", t, 0, None)
        w.kernel("volta_sgemm_128x64_nn", t + 5, kernel_us)
        w.kernel("elementwise_kernel", t + 20, 150)
        t += 40
        if item:
            t = w.readback(
                item_op,
                "aten::_local_scalar_dense",
                t,
                frame,
                "<built-in method item of Tensor object at 0x7f00>",
                idle_after=120,
            )
        if nonzero:
            sel = w.py(f"{file_name}({SELECT_DEF}): {select_fn}", t, 0, frame)
            w.kernel("index_kernel", t + 2, 300)
            t = w.readback(
                nonzero_op,
                "aten::nonzero",
                t + 10,
                sel,
                "<built-in method nonzero of type object at 0x7f01>",
                idle_after=60,
            )
            w.close(sel, t + 1)
        w.kernel("optimizer_kernel", t + 5, 200)
        t = max(t + 30, w.device_free_at - 100)
        w.close(frame, t)
        if markers:
            w.x(f"ProfilerStep#{step}", "user_annotation", start - 1, t - start + 2)
        t += 50
    run_dir = logdir / run
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / f"{worker}.{span}.pt.trace.json"
    path.write_text(json.dumps(w.to_json()), encoding="utf-8")
    return path


def write_collective_run(logdir: Path, steps: int = 2) -> Path:
    """Run ``distributed``: a ``dist.barrier()`` in each step, a host wait on a collective
    (a kind the dashboard knows only from the plugin's catalogue)."""
    w = TraceWriter()
    t = 1000.0
    for step in range(1, steps + 1):
        start = t
        frame = w.py(f"train.py({TRAIN_STEP_DEF}): train_step", t, 0, None)
        w.kernel("volta_sgemm_128x64_nn", t + 5, 900)
        t += 20
        end = w.device_free_at + 10
        w.x("c10d::barrier", "cpu_op", t, end - t)
        w.runtime("cudaDeviceSynchronize", t + 2, w.device_free_at + 2 - (t + 2))
        t = end + 20
        w.close(frame, t)
        w.x(f"ProfilerStep#{step}", "user_annotation", start - 1, t - start + 2)
        t += 50
    run_dir = logdir / "distributed"
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / "worker0.1700000000000.pt.trace.json"
    path.write_text(json.dumps(w.to_json()), encoding="utf-8")
    return path


def write_fixture(root: Path) -> Path:
    """logdir with runs `baseline` (item + nonzero), `optimized` (nonzero only, plus an
    unreadable second worker file), `html_names` (function, operator and file names holding
    markup), `cpu_only` and `cpu_only_fixed` (latent findings, the item fixed in the
    second), `running_loop` (an item under a ``<module>`` frame recorded at its current line),
    `remote_paths` (a source file that cannot be read), `windows_paths` (unescaped backslashes
    in a Windows file name: read with repairs), `no_stacks`, `clean` (no sync),
    `distributed` (a barrier per step), `two_machines` (two workers' traces, steps 1-3
    and 550-551), `unreadable` (its only trace file truncated) and `unrelated_ranks` (one
    rank's trace of each of two jobs), `two_spans` (one worker's two profiled spans) and
    `long_wait` (a 150 ms wait, then a 120 µs bubble) and `no_markers` (steps without
    ProfilerStep spans);
    train.py beside it in ``root``, TensorBoard's working directory."""
    (root / "train.py").write_text(TRAIN_PY, encoding="utf-8")
    logdir = root / "logs"
    write_run(logdir, "baseline", item=True, nonzero=True)
    write_run(logdir, "optimized", item=False, nonzero=True)
    write_run(
        logdir,
        "html_names",
        item=True,
        nonzero=False,
        steps=2,
        file_name=f"m{XSS}.py",
        func_names=(XSS, XSS),
        op_names=(f"aten::{XSS}", XSS),
    )
    write_run(logdir, "cpu_only", item=True, nonzero=True, steps=2, gpu=False)
    write_run(logdir, "cpu_only_fixed", item=False, nonzero=True, steps=2, gpu=False)
    write_run(
        logdir,
        "running_loop",
        item=True,
        nonzero=False,
        steps=2,
        func_names=("<module>", "select_foreground"),
        frame_line=RUNNING_LOOP_LINE,
    )
    write_run(logdir, "remote_paths", item=True, nonzero=False, steps=2, file_name=REMOTE_FILE)
    windows = write_run(
        logdir, "windows_paths", item=True, nonzero=False, steps=2, file_name=WINDOWS_FILE
    )
    # Undo json.dumps' escaping of the file name's backslashes, as such writers do.
    windows.write_text(windows.read_text(encoding="utf-8").replace("\\\\", "\\"), "utf-8")
    write_run(logdir, "no_stacks", item=True, nonzero=False, steps=2, stacks=False)
    write_run(logdir, "clean", item=False, nonzero=False, steps=2)
    write_collective_run(logdir)
    # Loose trace files of two machines in one folder: each counts its own steps.
    write_run(logdir, "two_machines", item=True, nonzero=False, steps=3, worker="hostA_101")
    write_run(
        logdir, "two_machines", item=True, nonzero=True, steps=2, first_step=550, worker="hostB_202"
    )
    # Two traces of two unrelated jobs (a folder of traces collected from elsewhere): rank 1
    # of a 2-rank job, rank 0 of a 16-rank one.
    for worker, dist in (("hostA_1", (1, 2)), ("hostB_2", (0, 16))):
        write_run(
            logdir,
            "unrelated_ranks",
            item=True,
            nonzero=False,
            steps=2,
            worker=worker,
            dist={"rank": dist[0], "world_size": dist[1], "backend": "nccl"},
        )
    # A readback waiting 150 ms for a long kernel, then 120 µs of GPU idle: a bubble far
    # thinner than a pixel at the scale of the wait.
    write_run(logdir, "long_wait", item=True, nonzero=False, steps=2, kernel_us=150_000)
    write_run(logdir, "no_markers", item=True, nonzero=False, steps=2, markers=False)
    # One worker profiled twice: two spans, named by their epoch-ms times.
    for span in ("1700000000000", "1700000100000"):
        write_run(
            logdir, "two_spans", item=True, nonzero=False, steps=2, worker="host_1", span=span
        )
    broken = logdir / "optimized" / "worker1.1700000000001.pt.trace.json"
    broken.write_text("this is not a trace", encoding="utf-8")
    # A run whose only trace is cut short (a copy that stopped half-way): nothing to read.
    whole = gzip.compress(json.dumps(TraceWriter().to_json()).encode("utf-8"))
    (logdir / "unreadable").mkdir()
    cut = logdir / "unreadable" / "worker0.1700000000000.pt.trace.json.gz"
    cut.write_bytes(whole[: len(whole) // 2])
    # Cut two hours ago: its reason ("still being written?" for a minute, "cut short"
    # after) would otherwise change while the module runs, and with it the runs answer,
    # which makes every open page drop its cache and redraw under a test.
    old = time.time() - 7200
    os.utime(cut, (old, old))
    return logdir
