"""A real multi-rank job on the CPU: ``torch.distributed`` with the gloo backend, N processes
on 127.0.0.1, profiled with ``torch.profiler`` (``with_stack=True``), one rank made late at a
known line by a deliberate host wait and a CPU tensor readback. Other ``mode``s:

- ``"overlapped"``: each step's all-reduce is started without waiting and waited for
  (``Work.wait``) at the start of the next step; every rank then computes for 0.4 times the
  delay (so a rank that is not late has that slack before it waits), and the late rank's
  host wait comes after that;
- ``"two_at_once"``: each step starts two all-reduces and then waits for both (gloo runs them
  on its two worker threads at once), after the late rank's host wait;
- ``"ddp"``: a model wrapped in ``DistributedDataParallel``, whose reducer starts and waits
  for its all-reduces in C++ during ``backward()``; the late rank's host wait comes before
  the forward pass;
- ``"ddp_hook"``: the same with DDP's Python comm hook (``allreduce_hook``: the all-reduce
  is called from Python during backward, waited for in C++), and an all-reduce of the loss
  for logging after the step (waited for from Python);
- ``"out_of_order"``: two all-reduces started together, the second of 16 MB, waited for
  second first;
- ``"functional"``: a functional collective (``_functional_collectives.all_reduce``) and an
  all-reduce of a metric each step;
- ``"heartbeat"``: the default step, every rank also running a thread that sleeps 5 ms in
  a loop (a heartbeat: its sleeps hold no step back);
- ``"in_flight"``: three 8 MB all-reduces started at the end of each step and waited for at
  the start of the next, the late rank's host wait between the two (the first step opens
  with no operator before it: the collectives are the step's only operators).

The workload is written to a folder as ``train_gloo.py`` and run as a script in a child
process (as a user's training script would be), so the frames name that file. Processes are
forked, not spawned: a spawned child re-imports torch and, on its first profiler start,
torch._dynamo (about 4 s each on two cores); forked ones inherit them (the job then takes
about 5 s in all).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import warnings
from pathlib import Path

WORKLOAD = """\
import os
import sys
import threading
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def train_step(x, w, late, delay):
    y = torch.tanh(x @ w)
    if late:
        time.sleep(delay)  # LATE: the deliberate host wait
    value = y.sum().item()  # READBACK: a CPU tensor readback
    dist.all_reduce(y)
    return value


def train_step_overlapped(x, w, late, delay, pending):
    if pending is not None:
        pending.wait()  # WAIT: the reduction of the step before
    y = torch.tanh(x @ w)
    work = dist.all_reduce(y, async_op=True)
    busy_until = time.perf_counter() + 0.4 * delay
    while time.perf_counter() < busy_until:  # the host's own work meanwhile
        pass
    if late:
        time.sleep(delay)  # LATE_OVERLAPPED: the deliberate host wait
    return work


def train_step_two_at_once(x, w, late, delay):
    if late:
        time.sleep(delay)  # LATE_TWO: the deliberate host wait
    a = torch.tanh(x @ w)
    b = torch.tanh(w @ x)
    first = dist.all_reduce(a, async_op=True)
    second = dist.all_reduce(b, async_op=True)
    first.wait()
    second.wait()


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(64, 64)

    def forward(self, x):
        return torch.tanh(self.layer(x))


def train_step_ddp(model, optimizer, x, late, delay):
    if late:
        time.sleep(delay)  # LATE_DDP: the deliberate host wait
    loss = model(x).sum()
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()


def train_step_ddp_hook(model, optimizer, x, late, delay):
    if late:
        time.sleep(delay)  # LATE_HOOK: the deliberate host wait
    loss = model(x).sum()
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    logged = loss.detach().clone()
    dist.all_reduce(logged)


def train_step_out_of_order(x, w, big, late, delay):
    if late:
        time.sleep(delay)  # LATE_OOO: the deliberate host wait
    first = dist.all_reduce(torch.tanh(x @ w), async_op=True)
    second = dist.all_reduce(big, async_op=True)
    second.wait()
    first.wait()


def train_step_functional(x, w, late, delay):
    import torch.distributed._functional_collectives as funcol

    if late:
        time.sleep(delay)  # LATE_FUNCOL: the deliberate host wait
    y = funcol.all_reduce(torch.tanh(x @ w), "sum", dist.group.WORLD)
    metric = (y + 1).sum().clone()
    dist.all_reduce(metric)


def train_step_in_flight(bufs, pending, late, delay):
    for work in pending:
        work.wait()  # the step before's reductions, still in flight
    if late:
        time.sleep(delay)  # LATE_IN_FLIGHT: the deliberate host wait
    return [dist.all_reduce(b, async_op=True) for b in bufs]


def heartbeat():
    while True:
        time.sleep(0.005)  # HEARTBEAT: a side thread's sleep, holding no step back


def worker(rank, world, init, out, late_rank, delay, steps, mode="blocking"):
    torch.set_num_threads(1)  # idle intra-op threads must not spin on the two cores
    if mode == "heartbeat":
        threading.Thread(target=heartbeat, daemon=True).start()
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world)
    x = torch.randn(64, 64)
    w = torch.randn(64, 64)
    train_step(x, w, False, 0.0)
    big = torch.randn(4 * 1024 * 1024)
    bufs = [torch.randn(2 * 1024 * 1024) for _ in range(3)]
    in_flight = train_step_in_flight(bufs, [], False, 0.0) if mode == "in_flight" else []
    if mode in ("ddp", "ddp_hook"):
        model = torch.nn.parallel.DistributedDataParallel(Model())
        if mode == "ddp_hook":
            from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

            model.register_comm_hook(None, default_hooks.allreduce_hook)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
        train_step_ddp(model, optimizer, x, False, 0.0)
    dist.barrier()
    with torch.profiler.profile(
        activities=[torch.profiler.ProfilerActivity.CPU],
        with_stack=True,
        schedule=torch.profiler.schedule(wait=0, warmup=1, active=steps),
        on_trace_ready=lambda p: p.export_chrome_trace(
            os.path.join(out, f"rank{rank}.pt.trace.json")),
    ) as prof:
        pending = None
        for _ in range(steps + 1):
            if mode == "overlapped":
                pending = train_step_overlapped(x, w, rank == late_rank, delay, pending)
            elif mode == "two_at_once":
                train_step_two_at_once(x, w, rank == late_rank, delay)
            elif mode == "ddp":
                train_step_ddp(model, optimizer, x, rank == late_rank, delay)
            elif mode == "ddp_hook":
                train_step_ddp_hook(model, optimizer, x, rank == late_rank, delay)
            elif mode == "out_of_order":
                train_step_out_of_order(x, w, big, rank == late_rank, delay)
            elif mode == "functional":
                train_step_functional(x, w, rank == late_rank, delay)
            elif mode == "in_flight":
                in_flight = train_step_in_flight(bufs, in_flight, rank == late_rank, delay)
            else:
                train_step(x, w, rank == late_rank, delay)
            prof.step()
        if pending is not None:
            pending.wait()
    for work in in_flight:
        work.wait()
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    out, world, late_rank, delay, steps, mode = sys.argv[1:7]
    import torch._inductor  # noqa: F401  (what the profiler's first start imports)

    mp.start_processes(
        worker,
        args=(int(world), "file://" + os.path.join(out, "rendezvous"), out, int(late_rank),
              float(delay), int(steps), mode),
        nprocs=int(world), start_method="fork")
"""
SCRIPT = "train_gloo.py"


def line_of(marker: str) -> int:
    """1-based line of the workload that holds ``marker``."""
    for n, text in enumerate(WORKLOAD.splitlines(), 1):
        if marker in text:
            return n
    raise ValueError(marker)


SLEEP_LINE = line_of("# LATE:")
OVERLAPPED_SLEEP_LINE = line_of("# LATE_OVERLAPPED:")
TWO_SLEEP_LINE = line_of("# LATE_TWO:")
DDP_SLEEP_LINE = line_of("# LATE_DDP:")
SLEEP_LINES = {
    "ddp": DDP_SLEEP_LINE,
    "ddp_hook": line_of("# LATE_HOOK:"),
    "out_of_order": line_of("# LATE_OOO:"),
    "functional": line_of("# LATE_FUNCOL:"),
    "in_flight": line_of("# LATE_IN_FLIGHT:"),
}
WAIT_LINE = line_of("# WAIT:")
READBACK_LINE = line_of("# READBACK:")


# A forked rank of this job has died by SIGSEGV inside torch's profiler about once in a few
# hundred runs (torch 2.13 CPU, once in CI, 0 of 30 runs in a loop here); the job is then
# run again, a bounded number of times, so the tests still fail on any other failure.
CRASH_ATTEMPTS = 3


def crashed_in_torch(stderr: str) -> bool:
    """Whether a rank crashed (SIGSEGV, SIGBUS), not an error of the job: an abort (a
    gloo error), a kill (out of memory) or a stop is no crash."""
    return re.search(r"terminated with signal SIG(SEGV|BUS)\b", stderr) is not None


def record_gloo_job(
    folder: Path,
    world: int = 3,
    late_rank: int = 1,
    delay_s: float = 0.05,
    steps: int = 4,
    timeout_s: float = 120.0,
    mode: str = "blocking",
) -> list[Path]:
    """Run the job; returns the traces (``rank<N>.pt.trace.json``) in rank order."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / SCRIPT).write_text(WORKLOAD)
    env = dict(os.environ, OMP_NUM_THREADS="1")
    command = [
        sys.executable,
        SCRIPT,
        str(folder),
        str(world),
        str(late_rank),
        str(delay_s),
        str(steps),
        mode,
    ]
    attempts = 0
    while True:
        attempts += 1
        for stale in folder.glob("rank*.pt.trace.json"):
            stale.unlink()
        (folder / "rendezvous").unlink(missing_ok=True)
        proc = subprocess.run(
            command, cwd=folder, env=env, capture_output=True, text=True, timeout=timeout_s
        )
        if proc.returncode == 0 or attempts == CRASH_ATTEMPTS:
            break
        if not crashed_in_torch(proc.stderr):
            break
        warnings.warn(
            f"a rank of the gloo job crashed (attempt {attempts}): run again", stacklevel=2
        )
    if proc.returncode != 0:
        raise RuntimeError(
            f"gloo job failed ({proc.returncode}, attempt {attempts}):\n{proc.stderr[-3000:]}"
        )
    traces = [folder / f"rank{r}.pt.trace.json" for r in range(world)]
    missing = [str(t) for t in traces if not t.is_file()]
    if missing:
        raise RuntimeError(f"gloo job wrote no trace at {missing}:\n{proc.stderr[-3000:]}")
    return traces
