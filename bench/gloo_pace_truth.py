"""The measured truth for a CPU gloo job whose late rank sets the pace (docs/validation.md,
section 7): rank 0's mean step without the profiler, with rank 1's sleep and without it.

    python bench/gloo_pace_truth.py [--rounds 3] [--steps 20] [--delay 0.03]

Runs ``tests/gloo_workload.py``'s ``in_flight`` step (three all-reduces in flight from each
step to the next, rank 1 sleeping between waiting for them and starting the next) in two
forked processes on 127.0.0.1, rounds alternated, and prints each round's step times and
their difference: what fixing the sleep saves a step.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))


def _worker(rank, world, init, delay, steps, out):  # noqa: ANN001 - mp entry point
    import torch
    import torch.distributed as dist

    workload = _load_workload()
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world)
    bufs = [torch.randn(2 * 1024 * 1024) for _ in range(3)]
    pending = workload.train_step_in_flight(bufs, [], False, 0.0)
    dist.barrier()
    start = time.perf_counter()
    for _ in range(steps):
        pending = workload.train_step_in_flight(bufs, pending, rank == 1, delay)
    for work in pending:
        work.wait()
    if rank == 0:
        Path(out).write_text(str((time.perf_counter() - start) / steps))
    dist.barrier()
    dist.destroy_process_group()


def _load_workload():  # noqa: ANN202 - the workload module
    from gloo_workload import WORKLOAD

    folder = Path(tempfile.mkdtemp(prefix="gloo-pace-"))
    script = folder / "train_gloo.py"
    script.write_text(WORKLOAD)
    spec = importlib.util.spec_from_file_location("train_gloo", script)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


def _step_s(delay: float, steps: int) -> float:
    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory() as folder:
        out = os.path.join(folder, "step")
        init = "file://" + os.path.join(folder, "rendezvous")
        mp.start_processes(
            _worker, args=(2, init, delay, steps, out), nprocs=2, start_method="fork"
        )
        return float(Path(out).read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--delay", type=float, default=0.03, help="rank 1's sleep, s")
    args = parser.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    for n in range(args.rounds):
        late = _step_s(args.delay, args.steps)
        fixed = _step_s(0.0, args.steps)
        print(
            f"round {n + 1}: step with the sleep {late * 1e3:.1f} ms, without {fixed * 1e3:.1f} "
            f"ms: fixing it saves {(late - fixed) * 1e3:.1f} ms a step"
        )


if __name__ == "__main__":
    main()
