"""Real H100 recordings of a library's first call (docs/validation.md, section 10): cuBLAS
sets itself up inside the first matrix multiply, cuDNN inside the first convolution, RNN and
cuDNN attention (allocations and a free made by the operation itself), which the
allocator's advice misread; same-device copies, which never
wait. ``gpu_first_calls/first_calls.json`` (``bench/record_first_calls.py``) holds each
case's unprofiled step times and what ``set_sync_debug_mode("warn")`` said; the script
beside it is the source the traces name. No GPU is needed here."""

from __future__ import annotations

import json
import statistics
from contextlib import ExitStack
from pathlib import Path

import pytest

from tb_syncfinder import analyze, catalogue

HERE = Path(__file__).resolve().parent / "gpu_first_calls"
RECORDED = {
    (row["case"], row["mode"]): row
    for row in json.loads((HERE / "first_calls.json").read_text(encoding="utf-8"))
}
CUBLAS_TITLE = "cuBLAS setting itself up in its first matrix multiply"
ROCBLAS_TITLE = CUBLAS_TITLE.replace("cuBLAS", "rocBLAS")
CUDNN_TITLE = "cuDNN setting itself up on its first call"
MIOPEN_TITLE = CUDNN_TITLE.replace("cuDNN", "MIOpen")
ALLOCATOR_TITLE = catalogue.kind(catalogue.ALLOCATOR_SYNC).advice.title
SCRIPT = (HERE / "record_first_calls.py").read_text(encoding="utf-8").splitlines()


def _report(case: str):
    return analyze(HERE / f"{case}.pt.trace.json.gz", source_roots=[str(HERE)])


def _line(number: int) -> str:
    return SCRIPT[number - 1].strip()


def _step_ms(case: str) -> list[float]:
    return RECORDED[(case, "unprofiled")]["step_ms"]


@pytest.mark.parametrize("case", ["first_matmul", "first_conv", "first_lstm", "first_sdpa"])
def test_the_recordings_are_what_the_advice_says(case: str) -> None:
    """The first step of a process that calls the library takes 70-240 ms of set-up that
    no later step takes; torch's sync detector warns at none of it (the syncs are the
    library's allocations); where recorded, one call before the steps removes it."""
    first, *rest = _step_ms(case)
    assert first > 40 * statistics.median(rest)
    assert RECORDED[(case, "warn")]["warned"] == []
    if (f"{case}_warmed", "unprofiled") in RECORDED:
        warmed_first, *warmed_rest = _step_ms(f"{case}_warmed")
        assert warmed_first < 5 * statistics.median(warmed_rest)


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
    assert allocation.advice["title"] == ALLOCATOR_TITLE
    assert _line(allocation.line).startswith("linear = torch.nn.Linear(")


@pytest.mark.parametrize(
    ("case", "library_ops"),
    [("first_matmul_warmed", catalogue.MATMUL_OPS), ("first_conv_warmed", catalogue.CUDNN_OPS)],
)
def test_a_warm_up_before_the_profiled_steps_leaves_no_sync_in_the_library(
    case: str, library_ops: frozenset[str]
) -> None:
    report = _report(case)
    assert not any(set(site.ops) & library_ops for site in report.sites)


def test_cudnns_first_calls_get_its_setup_advice_and_its_output_allocations_do_not() -> None:
    """The convolution forward and backward, the LSTM's weight flattening and the cuDNN
    attention free while they allocate: cuDNN's set-up. The LSTM's forward allocates its
    output (a cudaMalloc alone under aten::empty) and keeps the allocator's advice."""
    conv = _report("first_conv")
    setup = [s for s in conv.sites if set(s.ops) & catalogue.CUDNN_OPS]
    assert len(setup) == 2 and {s.advice["title"] for s in setup} == {CUDNN_TITLE}
    assert {_line(s.line) for s in setup} == {"y = conv(x)  # first call: aten::cudnn_convolution"}
    assert sorted(s.backward for s in setup) == [False, True]
    lstm = {tuple(s.ops): s for s in _report("first_lstm").sites}
    assert lstm[("aten::_cudnn_rnn_flatten_weight",)].advice["title"] == CUDNN_TITLE
    assert lstm[("aten::lstm", "aten::_cudnn_rnn", "aten::empty")].advice["title"] == (
        ALLOCATOR_TITLE
    )
    (attention,) = [s for s in _report("first_sdpa").sites if s.func == "first_sdpa"]
    assert "aten::_cudnn_attention_forward" in attention.ops
    assert attention.advice["title"] == CUDNN_TITLE
    assert _line(attention.line).startswith(
        "out = torch.nn.functional.scaled_dot_product_attention"
    )


def test_a_site_that_allocates_in_later_steps_too_keeps_the_allocators_advice() -> None:
    """A new stream every step: step 1 sets cuBLAS up; steps 2 and 3 allocate the output
    and workspace on the new stream's own cache (cudaMalloc twice, no free). One site at
    the line, syncing every step: not a first call, whatever its first sync was."""
    report = _report("matmul_new_stream")
    (site,) = [s for s in report.sites if s.ops and s.ops[-1] in catalogue.MATMUL_OPS]
    assert site.count == report.summary.step_count == 3
    assert "cudaFree" in site.apis  # the first step's set-up is among its syncs
    assert site.advice["title"] == ALLOCATOR_TITLE


def test_same_device_copies_are_not_syncs() -> None:
    """copy_, clone, .to(copy=True): cudaMemcpyAsync DtoD, which never waits."""
    report = _report("same_device_copies")
    kinds = {site.kind for site in report.sites}
    assert catalogue.DEVICE_TO_HOST_COPY not in kinds
    assert catalogue.BLOCKING_HOST_TO_DEVICE not in kinds


def _write(path: Path, chains: list[tuple[list[str], tuple[str, ...]]]) -> Path:
    """A trace with a step per entry of ``chains``: the operators, outermost first, and
    the blocking calls made in the innermost (none: the operators run without syncing)."""
    from kineto_builder import KinetoTraceBuilder

    b = KinetoTraceBuilder()
    # Kineto numbers the first profiled step of a schedule without a wait ProfilerStep#0.
    for number, (ops, apis) in enumerate(chains):
        with b.step(number):
            b.kernel(dur=300)
            with ExitStack() as scope:
                scope.enter_context(b.op(ops[0], stack=[("train.py", 9, "train_step")]))
                for op in ops[1:]:
                    scope.enter_context(b.op(op))
                for api in apis:
                    if api == "cudaMemcpy":
                        b.runtime(api, memcpy=("HtoD", "Pageable"), bytes=112)
                    elif api in ("cudaHostAlloc", "hipHostMalloc"):
                        b.runtime(api, dur=5)
                    else:  # a syncing call waits until the device drains
                        b.runtime(api, dur=max(5, b.device_now - b.now + 1))
                b.kernel(dur=50)
    return b.write(path)


def _site(tmp_path: Path, chains: list[tuple[list[str], tuple[str, ...]]]):
    """The one site of a trace of ``chains`` (``_write``)."""
    report = analyze(_write(tmp_path / "run" / "w.pt.trace.json", chains))
    (site,) = report.sites
    return site


LINEAR = ["aten::linear", "aten::addmm"]
CONV = ["aten::conv2d", "aten::convolution", "aten::_convolution", "aten::cudnn_convolution"]


@pytest.mark.parametrize(
    ("steps", "title"),
    [
        # cuBLAS's own set-up, as the H100 recorded it, as an older cuBLAS copied its tables
        # (a public trace's cudaFree and blocking HtoD copy inside aten::addmm), through the
        # driver API, and on ROCm.
        ([(LINEAR, ("cudaMalloc", "cudaFree"))], CUBLAS_TITLE),
        ([(LINEAR, ("cudaFree", "cudaMemcpy"))], CUBLAS_TITLE),
        ([(LINEAR, ("cuMemAlloc_v2", "cuMemFree_v2"))], CUBLAS_TITLE),
        # (On ROCm the library is named as ROCm names it.)
        ([(["aten::matmul", "aten::mm"], ("hipMalloc", "hipFree"))], ROCBLAS_TITLE),
        # cuDNN's: a free and pinned host memory, forward and (below a clone) backward.
        ([(CONV, ("cudaMalloc", "cudaFree", "cudaHostAlloc"))], CUDNN_TITLE),
        (
            [
                (
                    ["aten::convolution_backward", "aten::contiguous", "aten::empty"],
                    ("cudaMalloc", "cudaFree", "cudaHostAlloc"),
                )
            ],
            CUDNN_TITLE,
        ),
        (
            [(["aten::conv2d", "aten::miopen_convolution"], ("hipFree", "hipHostMalloc"))],
            MIOPEN_TITLE,
        ),
        # A structured kernel's output allocated with no aten::empty under it (a cache
        # miss: shapes that change), and the output's aten::empty: the allocator's.
        ([(LINEAR, ("cudaMalloc",))], None),
        ([(["aten::linear", "aten::addmm", "aten::empty"], ("cudaMalloc",))], None),
        ([(CONV, ("cudaMalloc",))], None),
        # The allocator freeing its cache to retry: under another operator than the
        # multiply, in a convolution that is not cuDNN's (no pinned memory), or every step.
        ([(["aten::matmul", "aten::reshape", "aten::clone"], ("cudaMalloc", "cudaFree"))], None),
        (
            [
                (
                    ["aten::conv2d", "aten::_conv_depthwise2d"],
                    ("cudaMalloc", "cudaFree", "cudaMalloc"),
                )
            ],
            None,
        ),
        ([(LINEAR, ("cudaMalloc", "cudaFree", "cudaMalloc"))] * 3, None),
        # A set-up in step 1 and cache misses at the same line after it: one site, not a
        # first call.
        ([(LINEAR, ("cudaMalloc", "cudaFree"))] + [(LINEAR, ("cudaMalloc",))] * 2, None),
    ],
)
def test_only_a_librarys_own_calls_made_once_are_its_setup(
    tmp_path: Path, steps: list[tuple[list[str], tuple[str, ...]]], title: str | None
) -> None:
    site = _site(tmp_path, steps)
    copies = any("cudaMemcpy" in apis for _ops, apis in steps)
    assert site.kind == (catalogue.BLOCKING_HOST_TO_DEVICE if copies else catalogue.ALLOCATOR_SYNC)
    assert site.count == len(steps)
    assert site.advice["title"] == (title or ALLOCATOR_TITLE)
    if title:
        assert site.advice["removes"].startswith("the set-up from the profiled steps")


def test_a_free_in_a_multiply_that_ran_before_is_no_setup(tmp_path: Path) -> None:
    """A review's case: the multiply runs 20 steps without syncing, then frees and
    allocates once in step 21 (the allocator retrying): not the library's first call."""
    quiet = [(LINEAR, ())] * 20
    site = _site(tmp_path, [*quiet, (LINEAR, ("cudaMalloc", "cudaFree"))])
    assert site.count == 1 and site.steps == [20]
    assert site.advice["title"] == ALLOCATOR_TITLE


def test_each_sync_of_a_site_must_be_its_own_operators_first_call(tmp_path: Path) -> None:
    """A review's case: one line, two ranks. Rank 0 frees under the multiply's output
    allocation (aten::empty: the allocator's), rank 1 in the multiply itself (cuBLAS's
    set-up). The merged operator list ends in the multiply; the site is not all set-up."""
    run = tmp_path / "run"
    _write(run / "r0.pt.trace.json", [(LINEAR + ["aten::empty"], ("cudaMalloc", "cudaFree"))])
    _write(
        run / "r1.pt.trace.json", [(["aten::linear", "aten::matmul", "aten::mm"], ("cudaFree",))]
    )
    report = analyze(run)
    (site,) = report.sites
    assert site.count == 2
    assert site.advice["title"] == ALLOCATOR_TITLE
    firsts = {s.trace.rsplit("/", 1)[-1]: s.first_call_of for s in report.syncs}
    assert firsts == {"r0.pt.trace.json": "aten::addmm", "r1.pt.trace.json": "aten::mm"}


def test_the_json_names_the_library_call_a_sync_is_the_first_of() -> None:
    data = _report("first_conv").to_json()
    firsts = sorted(s["first_call_of"] or "" for s in data["syncs"])
    assert firsts == ["", "", "", "", "aten::convolution_backward", "aten::cudnn_convolution"]


def test_compare_says_the_measured_change_holds_the_setup_the_warm_up_moved_out() -> None:
    """first_conv against first_conv_warmed: the mean profiled step fell from 235 ms to
    4.4 ms, against a predicted ~0 us, because the warmed run's steps hold no set-up work
    (which no sync's removal saves): the comparison says so. The other way round the
    new run's steps hold the set-up, and its measured slowdown is said to be that; a run
    against itself says nothing."""
    from tb_syncfinder.compare import compare

    base, warmed = _report("first_conv").to_json(), _report("first_conv_warmed").to_json()
    result = compare(base, warmed)
    assert result["measured_saving_us"] > 1000 * max(result["predicted_saving_us"], 1.0)
    assert (
        "the baseline's profiled steps hold more syncs in a library's first-call set-up "
        "(cuBLAS or cuDNN; 2 a trace against 0)"
    ) in result["runs_note"]
    assert "the measured saving includes that set-up's own host work" in result["runs_note"]
    backwards = compare(warmed, base)["runs_note"] or ""
    assert "the new run's profiled steps hold more syncs in a library's first-call" in backwards
    assert "the measured slowdown is that set-up's own host work" in backwards
    assert "set-up" not in (compare(base, _report("first_conv").to_json())["runs_note"] or "")


def test_compare_of_the_cufft_pair_says_nothing_of_a_warm_up() -> None:
    """A review's case: a new signal length every step against padded lengths measures
    320 ms a step saved against ~0 predicted. That is the fix's own saving (a plan every
    step, which no warm-up removes): no note sends the user to profile after a warm-up."""
    from tb_syncfinder.compare import compare

    result = compare(_report("fft_new_length").to_json(), _report("fft_fixed_length").to_json())
    assert result["measured_saving_us"] > 100_000
    assert "set-up" not in (result["runs_note"] or "")


def test_compare_says_nothing_of_setup_it_cannot_tell_or_that_changed_nothing() -> None:
    """A review's cases: a report written before ``first_call_of`` existed has no such
    field (not a run without set-up), and a measured change that is no larger than the
    prediction needs no explaining."""
    from tb_syncfinder.compare import compare

    base, warmed = _report("first_conv").to_json(), _report("first_conv_warmed").to_json()
    older = json.loads(json.dumps(warmed))
    for sync in older["syncs"]:
        del sync["first_call_of"]
    assert "set-up" not in (compare(base, older)["runs_note"] or "")
    same_speed = json.loads(json.dumps(warmed))
    for field in ("mean_wall_step_time_us", "mean_step_time_us"):
        same_speed["summary"][field] = base["summary"][field]
    result = compare(base, same_speed)
    assert abs(result["measured_saving_us"]) < 1.0
    assert "set-up" not in (result["runs_note"] or "")


def test_another_multiplys_first_call_after_cublas_set_up_is_no_setup(tmp_path: Path) -> None:
    """A third review's case: cuBLAS sets up once per thread (in the recording the first
    addmm frees, the first mm and bmm do not). A retry in the first bmm of step 20, after
    addmm ran since step 0, is the allocator's."""
    steps = [(LINEAR, ("cudaMalloc", "cudaFree"))] + [(LINEAR, ())] * 19
    report = analyze(
        _write(
            tmp_path / "run" / "w.pt.trace.json",
            [*steps, (["aten::matmul", "aten::bmm"], ("cudaMalloc", "cudaFree"))],
        )
    )
    by_ops = {tuple(s.ops): s for s in report.sites}
    assert by_ops[tuple(LINEAR)].advice["title"] == CUBLAS_TITLE
    assert by_ops[("aten::matmul", "aten::bmm")].advice["title"] == ALLOCATOR_TITLE


def test_a_trace_that_starts_after_step_0_holds_no_first_call(tmp_path: Path) -> None:
    """A schedule that waited (the trace's first step is #20) profiled no first call: a
    free in its first multiply is the allocator's."""
    from kineto_builder import KinetoTraceBuilder

    b = KinetoTraceBuilder()
    with b.step(20):
        b.kernel(dur=300)
        with b.op("aten::linear", stack=[("train.py", 9, "train_step")]), b.op("aten::addmm"):
            for api in ("cudaMalloc", "cudaFree"):
                b.runtime(api, dur=max(5, b.device_now - b.now + 1))
    report = analyze(b.write(tmp_path / "run" / "w.pt.trace.json"))
    (site,) = report.sites
    assert site.advice["title"] == ALLOCATOR_TITLE
    assert [s.first_call_of for s in report.syncs] == [None]


# --- cuFFT's plans, flash and memory-efficient attention, and the LSTM warmed (H200) -------

CUFFT_TITLE = "cuFFT making a plan for a new transform"
FFT = ["aten::fft_rfft2", "aten::_fft_r2c"]


def test_the_h200_recordings_say_what_the_advice_says() -> None:
    """cuFFT's first transform costs the first step 11.7 ms that no later step pays (0.1-0.3
    ms), and one transform before the steps removes it; flash and memory-efficient
    attention load their kernels in the first step (5.6-5.8 ms) without a sync; an LSTM run
    once before the steps leaves its steps at 1.6-3.1 ms. Torch warned at none of them."""
    first, *rest = _step_ms("first_fft")
    assert first > 40 * statistics.median(rest)
    warmed_first, *warmed_rest = _step_ms("first_fft_warmed")
    assert warmed_first < 5 * statistics.median(warmed_rest)
    for case in ("first_fft", "first_flash_sdpa", "first_efficient_sdpa", "first_lstm_warmed"):
        assert RECORDED[(case, "warn")]["warned"] == []
        assert RECORDED[(case, "profiled")]["gpu"] == "NVIDIA H200"


def test_cuffts_plans_get_its_advice_at_the_transforms_exact_lines() -> None:
    """The recording's transforms allocate their outputs while cuFFT makes their plans
    (driver copies without a recorded call inside them): cuFFT's advice, at the lines that
    call ``torch.fft.rfft2`` and ``irfft2`` (built-ins the trace names ``fft_rfft2``). The
    input's ``randn`` allocates too: the allocator's."""
    report = _report("first_fft")
    by_ops = {tuple(site.ops): site for site in report.sites}
    rfft = by_ops[("aten::fft_rfft2", "aten::_fft_r2c", "aten::empty")]
    irfft = by_ops[("aten::fft_irfft2", "aten::_fft_c2r", "aten::empty")]
    for site, line in ((rfft, "y = torch.fft.rfft2(x)"), (irfft, "z = torch.fft.irfft2(y)")):
        assert site.advice["title"] == CUFFT_TITLE
        assert site.line_exact and _line(site.line).startswith(line)
        assert site.advice["removes"].startswith("making a plan in the profiled steps")
    assert by_ops[("aten::randn", "aten::empty")].advice["title"] == ALLOCATOR_TITLE
    firsts = sorted(s.first_call_of or "" for s in report.syncs)
    assert firsts == ["", "", "", "", "aten::_fft_c2r", "aten::_fft_r2c"]


def test_a_trace_with_cuffts_unrecorded_copies_is_still_replayed() -> None:
    """5 of the trace's 26 device activities are cuFFT's copies, whose driver calls Kineto
    does not record. They were counted as broken links and the trace fell back to an upper
    bound of 60.7 ms a step; every kernel is linked, so it is replayed, the copies kept at
    their recorded times, and the saving is what the warm-up measured of syncs: ~0."""
    report = _report("first_fft")
    assert report.summary.saving_method == "replay"
    assert report.summary.predicted_saving_per_step_us < 100
    (trace,) = report.traces
    assert "5 device copies have no recorded call" in (trace.saving_note or "")


def test_cuffts_unrecorded_plan_memsets_do_not_stop_the_replay_either() -> None:
    """A new signal length every step: each plan's tables uploaded (12 copies) and its
    buffers cleared (8 memsets) through the driver API, none of them with a recorded call.
    The memsets were taken for broken links and the trace fell back to an upper bound of
    287 us a step; every kernel is linked, so it is replayed, and making a plan is host
    work, not a wait: ~0 saving (docs/validation.md, section 10)."""
    report = _report("fft_new_length")
    assert report.summary.saving_method == "replay"
    assert report.summary.predicted_saving_per_step_us < 100
    (trace,) = report.traces
    assert "12 device copies and 8 memsets have no recorded call" in (trace.saving_note or "")


def test_a_transform_made_before_the_steps_leaves_no_sync_in_cufft() -> None:
    report = _report("first_fft_warmed")
    assert not any(set(site.ops) & catalogue.FFT_OPS for site in report.sites)


@pytest.mark.parametrize("case", ["first_flash_sdpa", "first_efficient_sdpa", "first_lstm_warmed"])
def test_flash_and_efficient_attention_and_a_warmed_lstm_sync_nowhere_in_their_kernels(
    case: str,
) -> None:
    """Flash and memory-efficient attention set nothing up that syncs (their first step's
    5.6-5.8 ms is loading kernels); the only allocation is the inputs' ``randn``. An LSTM
    called once before the steps makes no allocation in them: the first forward's
    ``cudaMalloc`` in ``first_lstm`` was its first call's (which the advice cannot tell
    from a cache miss, docs/validation.md section 10)."""
    report = _report(case)
    for site in report.sites:
        assert not any("attention" in op or "rnn" in op or "lstm" in op for op in site.ops)
        assert site.ops in (["aten::randn", "aten::empty"], [])


def _fft_trace(path: Path, steps: list[tuple[int, bool]]) -> Path:
    """A step per entry: a transform that allocates its output (``cudaMalloc``) and makes
    ``copies`` unrecorded driver copies inside it (cuFFT making a plan), or after it
    (``inside`` False: another library's, after the transform returned)."""
    from kineto_builder import KinetoTraceBuilder

    b = KinetoTraceBuilder()
    for number, (copies, inside) in enumerate(steps):
        with b.step(number):
            b.kernel(dur=300)
            with ExitStack() as scope:
                scope.enter_context(b.op(FFT[0], stack=[("train.py", 9, "train_step")]))
                scope.enter_context(b.op(FFT[1]))
                with b.op("aten::empty"):
                    b.runtime("cudaMalloc", dur=max(5, b.device_now - b.now + 1))
                for _ in range(copies if inside else 0):
                    b.driver_copy()
                b.kernel(dur=50)
            for _ in range(0 if inside else copies):
                b.driver_copy()
    return b.write(path)


@pytest.mark.parametrize(
    ("steps", "title"),
    [
        ([(3, True)], CUFFT_TITLE),  # a plan made in the first step
        ([(3, True)] * 3, CUFFT_TITLE),  # a new shape every step: a plan every step
        ([(0, True)] * 2, ALLOCATOR_TITLE),  # a cached plan, a cache miss of the output
        ([(3, False)], ALLOCATOR_TITLE),  # copies after the transform: not its plan's
    ],
)
def test_only_a_transform_that_makes_a_plan_gets_cuffts_advice(
    tmp_path: Path, steps: list[tuple[int, bool]], title: str
) -> None:
    report = analyze(_fft_trace(tmp_path / "run" / "w.pt.trace.json", steps))
    (site,) = report.sites
    assert site.kind == catalogue.ALLOCATOR_SYNC and site.count == len(steps)
    assert site.advice["title"] == title
    assert report.summary.saving_method == "replay"


def test_unlinked_kernels_still_stop_the_replay_where_unlinked_copies_do_not(
    tmp_path: Path,
) -> None:
    """Copies without a recorded call are a library's driver copies; kernels without one
    mean the trace's links are broken: the replay is not trusted then."""
    from kineto_builder import KinetoTraceBuilder

    b = KinetoTraceBuilder()
    with b.step(0):
        with b.op("aten::item", stack=[("train.py", 9, "train_step")]):
            b.kernel(dur=50)
            # Kernels whose correlation ids name no launch (a trace whose links broke).
            for _ in range(5):
                b.kernel(dur=50)["args"]["correlation"] += 10**6
            b.runtime("cudaStreamSynchronize")
    report = analyze(b.write(tmp_path / "run" / "w.pt.trace.json"))
    assert report.summary.saving_method != "replay"
    assert "have no launching runtime call" in (report.traces[0].saving_note or "")


def test_a_new_signal_length_every_step_makes_a_plan_every_step_and_fixed_lengths_once() -> None:
    """A new length every step: 2.5-302 ms a step unprofiled (lengths with large prime
    factors plan slowly); padded to a power of two, as cuFFT's advice says: 16.7 ms in the
    first step, 0.06-0.2 ms after. The report gives cuFFT's advice to the transform in
    each step that allocated while planning, and to the padded one in its first step
    only."""
    new, fixed = _step_ms("fft_new_length"), _step_ms("fft_fixed_length")
    assert min(new) > 10 * max(fixed[1:])
    assert fixed[0] > 50 * statistics.median(fixed[1:])
    for case, steps in (("fft_new_length", [0, 1]), ("fft_fixed_length", [0])):
        report = _report(case)
        (site,) = (s for s in report.sites if "aten::_fft_r2c" in s.ops)
        assert site.advice["title"] == CUFFT_TITLE and site.steps == steps
        assert _line(site.line).startswith("spec = torch.fft.rfft(wave")


def _late_library_trace(path: Path, first_step: int, sync_step: int, steps: int = 60) -> Path:
    """``steps`` steps of filler kernels; a multiply in every step from ``first_step`` on,
    which frees and allocates in ``sync_step``."""
    from kineto_builder import KinetoTraceBuilder

    b = KinetoTraceBuilder()
    for number in range(steps):
        with b.step(number):
            for _ in range(30):
                b.kernel(dur=5)
            if number < first_step:
                continue
            with b.op(LINEAR[0], stack=[("train.py", 9, "train_step")]), b.op(LINEAR[1]):
                if number == sync_step:
                    for api in ("cudaMalloc", "cudaFree"):
                        b.runtime(api, dur=max(5, b.device_now - b.now + 1))
                b.kernel(dur=50)
    return b.write(path)


@pytest.mark.parametrize(
    ("first_step", "sync_step", "title"),
    [
        (40, 40, CUBLAS_TITLE),  # the first multiply, in a later window
        (0, 40, ALLOCATOR_TITLE),  # a retry in a multiply that ran since the first window
        (39, 40, ALLOCATOR_TITLE),  # the multiply ran the step before, across windows
    ],
)
def test_a_trace_analysed_in_windows_tells_a_first_call_as_a_whole_trace_does(
    tmp_path: Path, first_step: int, sync_step: int, title: str
) -> None:
    """Each window saw only its own steps: a window after the first took its first step
    for the trace's (not ``ProfilerStep#0``), so a library's first call there read as the
    allocator's. The windows now carry which libraries ran before them."""
    path = _late_library_trace(tmp_path / "run" / "w.pt.trace.json", first_step, sync_step)
    whole = analyze(path, window_bytes=0)
    windowed = analyze(path, window_bytes=100_000)
    assert windowed.traces[0].windows > 5 and whole.traces[0].windows == 0
    for report in (whole, windowed):
        (site,) = report.sites
        assert site.steps == [sync_step]
        assert site.advice["title"] == title


def test_copies_queued_before_the_trace_or_on_another_device_are_no_plan(tmp_path: Path) -> None:
    """A review's cases: copies without a recorded call that were queued before the
    trace began (a schedule that starts mid-run: a real A100 trace has 140 such copies in
    its first step), or that ran on another device during a transform whose plan was
    cached, are not its plan being made: the allocator's advice."""
    from kineto_builder import KinetoTraceBuilder

    for case in ("queued_before", "other_device"):
        b = KinetoTraceBuilder()
        if case == "queued_before":
            b._device_event("kernel", "void backlog()", 2000.0, b._corr(), None, b.now - 50)
            for _ in range(3):
                b._device_event(
                    "gpu_memcpy", "Memcpy DtoD (Device -> Device)", 20.0, b._corr(), None,
                    b.now - 50, {"bytes": 1 << 20},
                )  # fmt: skip
        with b.step(0):
            b.kernel(dur=50)
            with b.op(FFT[0], stack=[("train.py", 9, "train_step")]), b.op(FFT[1]):
                with b.op("aten::empty"):
                    b.runtime("cudaMalloc", dur=max(5, b.device_now - b.now + 1))
                if case == "other_device":
                    b.device, b.stream = 1, 20
                    b.driver_copy()
                    b.device, b.stream = 0, 7
                b.kernel(dur=50)
        report = analyze(b.write(tmp_path / case / "w.pt.trace.json"))
        (site,) = report.sites
        assert site.advice["title"] == ALLOCATOR_TITLE, case
        assert [s.first_call_of for s in report.syncs] == [None]


def test_memsets_without_their_call_still_stop_the_replay(tmp_path: Path) -> None:
    """A review's case: Kineto records memsets' calls, so a memset whose correlation names
    no call is a broken link. Exempting memsets with copies let such a trace be replayed
    and predict a third of the saving its intact twin gives."""
    from kineto_builder import KinetoTraceBuilder

    b = KinetoTraceBuilder()
    for number in range(3):
        with b.step(number):
            for _ in range(10):
                with b.op("aten::zeros"):
                    b.memset(dur=30)
                b.kernel(dur=20)
            with b.op("aten::item", stack=[("train.py", 9, "train_step")]):
                b.runtime("cudaStreamSynchronize")
            b.advance(500)
    for event in b.events:
        if event.get("cat") == "gpu_memset":
            event["args"]["correlation"] += 10**6
    report = analyze(b.write(tmp_path / "run" / "w.pt.trace.json"))
    assert report.summary.saving_method != "replay"
    assert "have no launching runtime call" in (report.traces[0].saving_note or "")


def test_a_plan_made_for_a_transform_on_a_side_stream_is_its_plan(tmp_path: Path) -> None:
    """A review's H200 recording: ``torch.fft.rfft`` under ``torch.cuda.stream(s)`` runs its
    kernels on the side stream while cuFFT uploads the plan's tables on the legacy default
    stream. The plan is told by the device the transform launched work on, not its
    stream; the same for a transform that is the first work on its stream."""
    from kineto_builder import KinetoTraceBuilder

    b = KinetoTraceBuilder()
    with b.step(0):
        with b.op(FFT[0], stack=[("train.py", 9, "train_step")]), b.op(FFT[1]):
            with b.op("aten::empty"):
                b.runtime("cudaMalloc", dur=max(5, b.device_now - b.now + 1))
            b.driver_copy()  # on stream 7, the default
            b.kernel(dur=50, stream=13)  # the transform's own kernel, on the side stream
    report = analyze(b.write(tmp_path / "run" / "w.pt.trace.json"))
    (site,) = report.sites
    assert site.advice["title"] == CUFFT_TITLE
    assert [s.first_call_of for s in report.syncs] == ["aten::_fft_r2c"]


def test_a_library_call_spanning_windows_is_remembered_after_them(tmp_path: Path) -> None:
    """A review's case: a second thread's first multiply (cuBLAS's set-up, long host work)
    spans 5 of the main thread's steps; a window keeps it only in the windows of its start
    and the one after, so a later window took a retry on that thread in step 20 for the
    library's first call. The windows carry each library's earliest end per thread."""
    from kineto_builder import KinetoTraceBuilder

    b = KinetoTraceBuilder()
    first_call: list[dict] = []
    for number in range(60):
        with b.step(number):
            for _ in range(30):
                b.kernel(dur=5)
            if number in (10, 20):
                with b.thread(9999):
                    with (
                        b.op(LINEAR[0], stack=[("worker.py", 5, "prep")]) as outer,
                        b.op(LINEAR[1]) as inner,
                    ):
                        if number == 20:
                            for api in ("cudaMalloc", "cudaFree"):
                                b.runtime(api, dur=max(5, b.device_now - b.now + 1))
                        b.kernel(dur=50)
                if number == 10:
                    first_call += [outer, inner]
    steps = sorted(
        (e["ts"], e["ts"] + e["dur"]) for e in b.events if e["name"].startswith("ProfilerStep#")
    )
    for op in first_call:  # its set-up's host work, to the end of step 14
        op["dur"] = steps[14][1] - 5 - op["ts"]
    path = b.write(tmp_path / "run" / "w.pt.trace.json")
    for window_bytes in (0, 60_000):
        report = analyze(path, window_bytes=window_bytes)
        assert (report.traces[0].windows > 5) == bool(window_bytes)
        (site,) = report.sites
        assert site.steps == [20] and site.advice["title"] == ALLOCATOR_TITLE


@pytest.mark.parametrize("names_its_operator", [True, False])
def test_another_threads_plan_is_not_this_transforms(
    tmp_path: Path, names_its_operator: bool
) -> None:
    """A third review's case: thread A's transform (its plan cached) allocates and waits
    while thread B's transform of another shape makes its plan on the same GPU. The H200
    recordings' uploads carry the external id of the transform that made them: where they
    do, B's upload is B's. A trace whose copies name no operator cannot tell the two
    apart, and the upload during A's call is taken for A's (the older traces' way)."""
    from kineto_builder import KinetoTraceBuilder

    b = KinetoTraceBuilder()
    with b.step(0):
        b.kernel(dur=300)
        with b.op(FFT[0], stack=[("a.py", 9, "worker_a")]), b.op(FFT[1]):
            with b.op("aten::empty"):
                b.runtime("cudaMalloc", dur=max(5, b.device_now - b.now + 1))
            with b.thread(9999), b.op(FFT[0], stack=[("b.py", 5, "worker_b")]):
                with b.op(FFT[1]) as other:
                    b.driver_copy(op=other if names_its_operator else None)
                    b.kernel(dur=50)
            b.kernel(dur=50)
    report = analyze(b.write(tmp_path / "run" / "w.pt.trace.json"))
    (site,) = report.sites
    assert site.func == "worker_a"
    assert site.advice["title"] == (ALLOCATOR_TITLE if names_its_operator else CUFFT_TITLE)


def test_the_recorded_plan_uploads_name_the_transform_that_made_them() -> None:
    """In the H200 recording each upload's ``External id`` is its transform's: rfft2's
    three and irfft2's two, each credited to its own transform."""
    report = _report("first_fft")
    firsts = sorted(s.first_call_of or "" for s in report.syncs)
    assert firsts == ["", "", "", "", "aten::_fft_c2r", "aten::_fft_r2c"]
