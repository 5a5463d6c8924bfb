"""The advice a user reads follows the pattern that synced: one row per pattern, from the
operator chain and the copy as Kineto records them, through detection and aggregation, to
the site's kind and fix. The texts come from the catalogue; the rows say which fix each
pattern must get (a word of its ``after`` code that no other row's fix has)."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import SHARED_DIR
from kineto_builder import KinetoTraceBuilder

from tb_syncfinder import analyze, catalogue

H100_SEG = SHARED_DIR / "traces" / "h100_demo" / "seg_baseline.pt.trace.json.gz"


@dataclass(frozen=True)
class Pattern:
    name: str
    ops: tuple[str, ...]  # the operator chain, outermost first
    calls: tuple[tuple[str, tuple[str, str] | None, int], ...]  # (API, memcpy, bytes)
    kind: str
    fix: str  # in the advice's "after" code
    annotation: str | None = None


READBACK = (("cudaMemcpyAsync", ("DtoH", "Pageable"), 8), ("cudaStreamSynchronize", None, 0))
H2D_SMALL = (("cudaMemcpyAsync", ("HtoD", "Pageable"), 8), ("cudaStreamSynchronize", None, 0))
TO = ("aten::to", "aten::_to_copy", "aten::copy_")

PATTERNS = [
    # torch.unique on CUDA reads its output size back through aten::item: still unique's fix.
    Pattern(
        "unique",
        ("aten::_unique2", "aten::item", "aten::_local_scalar_dense"),
        READBACK,
        catalogue.DYNAMIC_SHAPE,
        "scatter_add_",
    ),
    Pattern("nonzero", ("aten::nonzero",), READBACK, catalogue.DYNAMIC_SHAPE, "valid.sum()"),
    Pattern(
        "mask", ("aten::index", "aten::nonzero"), READBACK, catalogue.DYNAMIC_SHAPE, "ignore_index"
    ),
    Pattern(
        "item",
        ("aten::item", "aten::_local_scalar_dense"),
        READBACK,
        catalogue.SCALAR_READBACK,
        "loss.detach()",
    ),
    # target[inds] = -1: the Python number is built on the CPU and copied inside index_put_.
    Pattern(
        "index_put scalar",
        ("aten::index_put_", "aten::_index_put_impl_", *TO),
        H2D_SMALL,
        catalogue.BLOCKING_HOST_TO_DEVICE,
        "index_fill_",
    ),
    Pattern(
        "pageable batch copy",
        TO,
        (("cudaMemcpyAsync", ("HtoD", "Pageable"), 1_572_864), ("cudaStreamSynchronize", None, 0)),
        catalogue.BLOCKING_HOST_TO_DEVICE,
        "pin_memory=True",
    ),
    # torch.tensor([...]).to(device) each step.
    Pattern(
        "small CPU tensor",
        TO,
        H2D_SMALL,
        catalogue.BLOCKING_HOST_TO_DEVICE,
        "torch.tensor([0.2, 0.8], device=device)",
    ),
    # x[:, idx] with idx a CPU tensor: the index is copied to the GPU inside aten::index.
    Pattern(
        "CPU tensor in a device op",
        ("aten::index", *TO),
        H2D_SMALL,
        catalogue.BLOCKING_HOST_TO_DEVICE,
        "[:, idx]",
    ),
    Pattern(
        "collective wait",
        ("c10d::allreduce_",),
        (("cudaStreamSynchronize", None, 0),),
        catalogue.COLLECTIVE_WAIT,
        "async_op=True",
    ),
    Pattern(
        "awaitable wait",
        TO,
        (("cudaMemcpyAsync", ("DtoH", "Pageable"), 64), ("cudaStreamSynchronize", None, 0)),
        catalogue.COLLECTIVE_WAIT,
        "async_op=True",
        annotation="## KJTAllToAllSplitsAwaitable wait() ##",
    ),
    Pattern(
        "allocator",
        ("aten::empty",),
        (("cudaMalloc", None, 0),),
        catalogue.ALLOCATOR_SYNC,
        "pad_to_bucket",
    ),
]


def _site_of(pattern: Pattern, tmp_path: Path):
    b = KinetoTraceBuilder()
    with b.step(1):
        b.kernel(dur=300)
        with contextlib.ExitStack() as scope:
            if pattern.annotation:
                scope.enter_context(b.annotation(pattern.annotation))
            for op in pattern.ops:
                scope.enter_context(b.op(op))
            for api, memcpy, nbytes in pattern.calls:
                dur = None if "Synchronize" in api else 5
                if api == "cudaMalloc":  # a syncing allocation waits until the device drains
                    dur = max(5, b.device_now - b.now + 1)
                b.runtime(api, dur=dur, memcpy=memcpy, bytes=nbytes or 4)
    path = b.write(tmp_path / "w.pt.trace.json")
    (site,) = analyze(str(path)).sites
    return site


@pytest.mark.parametrize("pattern", PATTERNS, ids=lambda p: p.name)
def test_each_pattern_gets_its_kind_and_its_own_fix(pattern: Pattern, tmp_path: Path) -> None:
    site = _site_of(pattern, tmp_path)
    assert site.kind == pattern.kind
    assert pattern.fix in site.advice["after"], (pattern.name, site.advice["title"])
    others = [p for p in PATTERNS if p.kind == pattern.kind and p.fix != pattern.fix]
    for other in others:
        assert other.fix not in site.advice["after"], (pattern.name, other.name)


def test_patterns_of_one_kind_get_different_fixes() -> None:
    """Each row names a fix only its pattern gets, so the table cannot pass with one advice
    per kind."""
    titles = {}
    for p in PATTERNS:
        ops = list(p.ops)
        nbytes = max(n for _, _, n in p.calls) or None
        titles.setdefault(p.kind, set()).add(catalogue.advice_for(p.kind, ops, nbytes)["title"])
    assert len(titles[catalogue.DYNAMIC_SHAPE]) == 3
    assert len(titles[catalogue.BLOCKING_HOST_TO_DEVICE]) == 4


def test_host_to_device_copies_are_told_apart_by_chain_and_size() -> None:
    assert catalogue.host_to_device_pattern(list(TO), 1_572_864) is None  # a batch
    assert catalogue.host_to_device_pattern(list(TO), None) is None  # size unknown: a batch
    assert catalogue.host_to_device_pattern(list(TO), catalogue.SMALL_COPY_BYTES) == "small_copy"
    assert catalogue.host_to_device_pattern(list(TO), 256) is None  # 32 int64 labels
    assert catalogue.host_to_device_pattern(["aten::index_put_", *TO], 4096) == "indexed_assign"
    assert catalogue.host_to_device_pattern(["aten::where", *TO], 8) == "cpu_tensor_in_device_op"
    assert catalogue.host_to_device_pattern([], 8) == "small_copy"  # a bare cudaMemcpy


@pytest.mark.skipif(not H100_SEG.exists(), reason="no shared H100 traces")
def test_unique_on_a_real_h100_trace_is_a_dynamic_shape_with_the_unique_fix() -> None:
    report = analyze(str(H100_SEG))
    (site,) = [s for s in report.sites if s.line == 76 and s.file.endswith("seg.py")]
    assert site.ops[:2] == ["aten::_unique2", "aten::item"]
    assert site.kind == catalogue.DYNAMIC_SHAPE
    assert "unique" in site.advice["title"]


def test_a_backward_copys_fix_is_read_from_its_own_chain_not_its_forward_operator() -> None:
    # The forward operator picks an operator's fix first (x[mask]'s backward syncs in
    # aten::nonzero, its fix is the mask's); a copy's pattern is its own chain's: the
    # backward of x.cpu() uploads the gradient, whatever the forward operator was.
    chain = ["autograd::engine::evaluate_function: ToCopyBackward0", "aten::to", "aten::copy_"]
    alone = catalogue.advice_for(catalogue.BLOCKING_HOST_TO_DEVICE, chain, 64)
    with_forward = catalogue.advice_for(catalogue.BLOCKING_HOST_TO_DEVICE, chain, 64, ["aten::to"])
    assert with_forward == alone
    mask = ["autograd::engine::evaluate_function: IndexBackward0", "aten::nonzero"]
    by_forward = catalogue.advice_for(catalogue.DYNAMIC_SHAPE, mask, None, ["aten::index"])
    assert "boolean mask" in by_forward["title"]
    assert "boolean mask" not in catalogue.advice_for(catalogue.DYNAMIC_SHAPE, mask)["title"]


def test_a_rocm_sites_advice_names_rocms_libraries_and_calls(tmp_path) -> None:
    """A ROCm user was told "`cudaMalloc` / `cudaFree` synchronize the device" for a
    ``hipMalloc``, and of "cuDNN benchmark mode" inside ``miopen_convolution_backward``."""
    from tb_syncfinder.aggregate import build_report
    from tb_syncfinder.engine import analyze_trace

    b = KinetoTraceBuilder(device_name="AMD Instinct MI300X")
    for step in (1, 2):
        with b.step(step):
            b.advance(1000)
            with b.op("aten::convolution_backward"), b.op("aten::miopen_convolution_backward"):
                b.runtime("hipEventSynchronize", dur=100)
                b.kernel("MIOpenConvBwd", dur=100)
            b.advance(1000)
            with b.op("aten::empty"):
                b.runtime("hipMalloc", dur=150)
    result = analyze_trace(str(b.write(tmp_path / "w.pt.trace.json")))
    assert result.info.device == "rocm"
    advice = {s.kind: s.advice for s in build_report([result]).sites}
    allocator = " ".join(advice[catalogue.ALLOCATOR_SYNC].values())
    assert "hipMalloc" in allocator and "cudaMalloc" not in allocator
    assert advice[catalogue.EXPLICIT_SYNC]["title"].startswith("MIOpen benchmark mode")
    # On CUDA, the advice as written.
    cuda = catalogue.advice_for(catalogue.ALLOCATOR_SYNC, ["aten::empty"])
    assert catalogue.advice_on_device(cuda, "cuda") == cuda and "cudaMalloc" in cuda["text"]


def test_an_npu_sites_advice_reads_as_english_and_names_no_cuda_counter() -> None:
    """ "Do not branch on a NPU tensor"; and under torch.npu, the allocator's advice named
    torch.cuda's counters of cudaMalloc calls."""
    branch = catalogue.advice_on_device(
        catalogue.advice_for("scalar_readback", ["aten::is_nonzero"]), "npu"
    )
    assert branch["title"] == "Do not branch on an NPU tensor"
    allocator = catalogue.advice_on_device(
        catalogue.advice_for("allocator_sync", ["aten::empty"]), "npu"
    )
    text = allocator["text"]
    assert "aclrtMalloc" in text and "cudaMalloc" not in text and "num_device_alloc" not in text
    assert "PYTORCH_NPU_ALLOC_CONF" in text


def test_advice_measured_on_cuda_keeps_its_words_on_rocm_and_an_npu_and_says_so() -> None:
    """ctc_loss's advice is a measurement of cuDNN on CUDA: translated word for word on
    ROCm it claimed that MIOpen's kernel waits none and saved 2 ms, which nobody measured.
    It keeps its words, and says what is known on the other device."""
    for ops in (["aten::ctc_loss", "aten::to"], ["aten::ctc_loss", "aten::_cudnn_ctc_loss"]):
        cuda = catalogue.advice_for(catalogue.BLOCKING_HOST_TO_DEVICE, ops)
        assert catalogue.advice_on_device(cuda, "cuda") == cuda
        for device, known in (("rocm", "MIOpen's ctc_loss"), ("npu", "torch_npu runs its own")):
            worded = catalogue.advice_on_device(cuda, device)
            assert worded["title"] == cuda["title"] and "cuDNN" in worded["text"]
            assert worded["text"].startswith(cuda["text"]) and known in worded["text"]
            assert "was not measured" in worded["text"]
    on_rocm = catalogue.advice_for(
        catalogue.BLOCKING_HOST_TO_DEVICE, ["aten::ctc_loss", "aten::miopen_ctc_loss"]
    )
    assert on_rocm["title"] == catalogue.CTC_TITLE
