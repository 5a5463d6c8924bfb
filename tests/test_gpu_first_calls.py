"""Real H100 recordings of a library's first call (docs/validation.md, section 10): cuBLAS
sets itself up inside the first matrix multiply (allocations and a free made by the
multiply itself), which the allocator's advice misread; same-device copies, which never
wait. ``gpu_first_calls/first_calls.json`` (``bench/record_first_calls.py``) holds each
case's unprofiled step times and what ``set_sync_debug_mode("warn")`` said; the script
beside it is the source the traces name. No GPU is needed here."""

from __future__ import annotations

import json
import statistics
from contextlib import nullcontext
from pathlib import Path

import pytest

from tb_syncfinder import analyze, catalogue

HERE = Path(__file__).resolve().parent / "gpu_first_calls"
RECORDED = {
    (row["case"], row["mode"]): row
    for row in json.loads((HERE / "first_calls.json").read_text(encoding="utf-8"))
}
CUBLAS_TITLE = "cuBLAS setting itself up in its first matrix multiply"
SCRIPT = (HERE / "record_first_calls.py").read_text(encoding="utf-8").splitlines()


def _report(case: str):
    return analyze(HERE / f"{case}.pt.trace.json.gz", source_roots=[str(HERE)])


def _line(number: int) -> str:
    return SCRIPT[number - 1].strip()


def _step_ms(case: str) -> list[float]:
    return RECORDED[(case, "unprofiled")]["step_ms"]


def test_the_recordings_are_what_the_advice_says() -> None:
    """The first step of a process that multiplies matrices takes ~85 ms of set-up that no
    later step takes; one multiply before the steps removes it; torch's sync detector warns
    at none of it (the syncs are the library's allocations)."""
    first, *rest = _step_ms("first_matmul")
    assert first > 100 * statistics.median(rest)
    warmed_first, *warmed_rest = _step_ms("first_matmul_warmed")
    assert warmed_first < 5 * statistics.median(warmed_rest)
    assert all(RECORDED[(case, "warn")]["warned"] == [] for case in ("first_matmul",))


def test_the_first_matrix_multiply_gets_cublas_setup_advice_not_the_allocators() -> None:
    report = _report("first_matmul")
    by_ops = {tuple(site.ops): site for site in report.sites}
    setup = by_ops[("aten::linear", "aten::addmm")]
    assert setup.kind == catalogue.ALLOCATOR_SYNC
    assert setup.advice["title"] == CUBLAS_TITLE
    assert setup.count == 1 and report.summary.step_count == 3  # once, in the first step
    assert _line(setup.line) == "y = linear(x)  # first call: aten::addmm (cuBLASLt)"
    # The module's own parameters, allocated by aten::empty: the allocator's, as before.
    allocation = by_ops[("aten::empty",)]
    assert allocation.advice["title"] == catalogue.kind(catalogue.ALLOCATOR_SYNC).advice.title
    assert _line(allocation.line).startswith("linear = torch.nn.Linear(")


def test_a_warm_up_before_the_profiled_steps_leaves_no_sync_in_the_multiply() -> None:
    report = _report("first_matmul_warmed")
    assert not any(set(site.ops) & catalogue.MATMUL_OPS for site in report.sites)


def test_a_new_stream_every_step_allocates_in_the_multiply_every_step() -> None:
    """Step 1 sets cuBLAS up; steps 2 and 3 allocate the output and workspace on the new
    stream's own cache (cudaMalloc twice, no free): one site, whose advice covers both."""
    report = _report("matmul_new_stream")
    (setup,) = [s for s in report.sites if s.ops and s.ops[-1] in catalogue.MATMUL_OPS]
    assert setup.advice["title"] == CUBLAS_TITLE
    assert setup.count == report.summary.step_count == 3
    assert "create side streams once" in setup.advice["text"]


def test_same_device_copies_are_not_syncs() -> None:
    """copy_, clone, .to(copy=True): cudaMemcpyAsync DtoD, which never waits."""
    report = _report("same_device_copies")
    kinds = {site.kind for site in report.sites}
    assert catalogue.DEVICE_TO_HOST_COPY not in kinds
    assert catalogue.BLOCKING_HOST_TO_DEVICE not in kinds


@pytest.mark.parametrize(
    ("inner", "apis", "title"),
    [
        # cuBLAS's own set-up, as the H100 recorded it and as an older cuBLAS copied its
        # tables (a public trace's cudaFree and blocking HtoD copy inside aten::addmm).
        ("aten::addmm", ("cudaMalloc", "cudaFree"), CUBLAS_TITLE),
        ("aten::addmm", ("cudaFree", "cudaMemcpy"), CUBLAS_TITLE),
        ("aten::mm", ("hipMalloc", "hipFree"), CUBLAS_TITLE),
        # A structured kernel's output allocated with no aten::empty under it (a cache
        # miss: shapes that change), and the output's aten::empty: the allocator's advice.
        ("aten::addmm", ("cudaMalloc",), None),
        ("aten::empty", ("cudaMalloc",), None),
    ],
)
def test_only_a_sync_made_by_the_multiply_itself_while_freeing_is_cublas_setup(
    tmp_path: Path, inner: str, apis: tuple[str, ...], title: str | None
) -> None:
    from kineto_builder import KinetoTraceBuilder

    b = KinetoTraceBuilder()
    with b.step(1):
        b.kernel(dur=300)
        with b.op("aten::linear", stack=[("train.py", 9, "train_step")]):
            with b.op("aten::addmm" if inner == "aten::empty" else inner):
                with b.op(inner) if inner == "aten::empty" else nullcontext():
                    for api in apis:
                        if api == "cudaMemcpy":
                            b.runtime(api, memcpy=("HtoD", "Pageable"), bytes=112)
                        else:  # a syncing call waits until the device drains
                            b.runtime(api, dur=max(5, b.device_now - b.now + 1))
                b.kernel(dur=50)
    report = analyze(b.write(tmp_path / "run" / "w.pt.trace.json"))
    (site,) = report.sites
    copies = "cudaMemcpy" in apis
    assert site.kind == (catalogue.BLOCKING_HOST_TO_DEVICE if copies else catalogue.ALLOCATOR_SYNC)
    if title is None:
        assert site.advice["title"] == catalogue.kind(catalogue.ALLOCATOR_SYNC).advice.title
    else:
        assert site.advice["title"] == title
