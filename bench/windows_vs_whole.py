"""Traces read in windows against the same traces read whole (``windows``): how far
"every sync removed", each site's saving and each step's saving are from the whole read.

Built traces (``tests/kineto_builder.py``, random step kinds and durations: a kernel and an
``item()``, a kernel alone, a boolean mask, host work only, two streams) and, where
``../shared`` is beside the checkout, its real and H100 traces; each read whole and in 2, 3,
5 and one-step windows. Prints, per source, how many comparisons are exact (< 0.1 %) and
within 1 %, and the worst.

    python bench/windows_vs_whole.py --seeds 60
"""

from __future__ import annotations

import argparse
import gzip
import os
import random
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

from kineto_builder import KinetoTraceBuilder, item_sync, mask_index_sync  # noqa: E402

from tb_syncfinder.engine import Options, analyze_trace  # noqa: E402

FRACTIONS = (2, 3, 5, 1000)  # window = JSON size / this (1000: a window per step)


def random_trace(path: Path, seed: int) -> Path:
    rng = random.Random(seed)
    b = KinetoTraceBuilder(concurrent_streams=rng.random() < 0.5)
    with b.frame(("train.py", 1, "<module>")):
        for n in range(1, rng.randint(6, 16) + 1):
            kind = rng.choice(["gpu", "gpu", "gpu_nosync", "host", "mask", "two_streams"])
            with b.step(n), b.frame(("train.py", 20, "main")):
                if kind == "host":
                    with b.op("aten::cat"):
                        b.advance(rng.uniform(100, 2000))
                elif kind == "gpu_nosync":
                    for _ in range(rng.randint(1, 4)):
                        b.kernel("void fwd_kernel<float>()", dur=rng.uniform(50, 1500))
                        b.advance(rng.uniform(5, 50))
                elif kind == "two_streams":
                    b.kernel("void a<float>()", dur=rng.uniform(100, 900), stream=7)
                    b.kernel("void b<float>()", dur=rng.uniform(100, 900), stream=9)
                    item_sync(b, [("train.py", 8, "train_step")], rng.uniform(50, 500))
                elif kind == "mask":
                    b.kernel("void fwd_kernel<float>()", dur=rng.uniform(50, 1500))
                    mask_index_sync(b, sequence_number=n, stack=[("train.py", 12, "train_step")])
                else:
                    b.kernel("void fwd_kernel<float>()", dur=rng.uniform(50, 2000))
                    item_sync(b, [("train.py", 8, "train_step")], rng.uniform(50, 800))
                b.advance(rng.uniform(10, 400))
    return b.write(path)


def json_size(path: str) -> int:
    if path.endswith(".gz"):
        with gzip.open(path, "rb") as f:
            return sum(len(chunk) for chunk in iter(lambda: f.read(1 << 20), b""))
    return os.path.getsize(path)


def errors(path: str) -> tuple[list[float], list[float], list[float]]:
    """Relative errors of "every sync removed" and of each site's saving; each step's
    saving's error in us (steps save a few us, where a relative error says little)."""
    whole = analyze_trace(path, Options(window_bytes=0, contexts=False))
    size = json_size(path)
    all_syncs, sites, steps = [], [], []

    def rel(a: float, b: float) -> float:
        return abs(a - b) / max(abs(b), 1.0)

    for fraction in FRACTIONS:
        windowed = analyze_trace(
            path, Options(window_bytes=max(size // fraction, 1), contexts=False)
        )
        if not windowed.info.windows:
            continue
        all_syncs.append(rel(windowed.savings.all_syncs_us, whole.savings.all_syncs_us))
        sites += [
            rel(windowed.savings.sites.get(k, 0.0), v) for k, v in whole.savings.sites.items()
        ]
        saved = {s.step: s.predicted_saving_us for s in windowed.steps}
        steps += [abs(saved.get(s.step, 0.0) - s.predicted_saving_us) for s in whole.steps]
    return all_syncs, sites, steps


def line(name: str, values: list[float]) -> str:
    if not values:
        return f"  {name:22s} no comparison"
    if name == "step savings":
        return (
            f"  {name:22s} {len(values):5d} compared: {sum(v < 0.5 for v in values):5d} "
            f"within 0.5 us, {sum(v < 10 for v in values):5d} within 10 us, "
            f"worst {max(values):.1f} us"
        )
    exact = sum(v < 0.001 for v in values)
    near = sum(v < 0.01 for v in values)
    return (
        f"  {name:22s} {len(values):5d} compared: {exact:5d} exact (< 0.1 %), "
        f"{near:5d} within 1 %, worst {100 * max(values):.1f} %"
    )


def report(title: str, paths: list[str]) -> None:
    found: tuple[list[float], list[float], list[float]] = ([], [], [])
    for path in paths:
        for total, part in zip(found, errors(path), strict=True):
            total += part
    print(f"{title} ({len(paths)} traces)")
    for name, values in zip(
        ("every sync removed", "site savings", "step savings"), found, strict=True
    ):
        print(line(name, values))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=60, help="random built traces")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        built = [
            str(random_trace(Path(folder) / f"r{n}.pt.trace.json", n)) for n in range(args.seeds)
        ]
        report("built traces", built)
    shared = REPO.parent / "shared" / "traces"
    real = sorted(str(p) for p in shared.glob("*/*.pt.trace.json.gz"))
    if real:
        report(f"traces in {shared}", real)


if __name__ == "__main__":
    main()
