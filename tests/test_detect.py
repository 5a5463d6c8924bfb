"""Detection and classification on Kineto-shaped fixture traces (one per kind + negatives)."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest
from kineto_builder import KinetoTraceBuilder, item_sync

from tb_syncfinder import analyze, catalogue
from tb_syncfinder.engine import analyze_trace


def _analyze(b: KinetoTraceBuilder, tmp_path: Path, name: str = "w.pt.trace.json"):
    result = analyze_trace(str(b.write(tmp_path / name)))
    assert result.info.error is None
    return result


def test_item_on_cuda_is_one_scalar_readback_with_host_wait(tmp_path):
    b = KinetoTraceBuilder()
    with b.step(1):
        item_sync(b, kernel_us=400)
    result = _analyze(b, tmp_path)
    assert len(result.syncs) == 1
    sync = result.syncs[0]
    assert sync.kind == catalogue.SCALAR_READBACK
    assert sync.apis == ["cudaMemcpyAsync", "cudaStreamSynchronize"]
    assert sync.api == "cudaStreamSynchronize"
    assert sync.op == "aten::item" and sync.trigger_op == "aten::_local_scalar_dense"
    assert sync.host_wait_us > 300
    assert sync.bytes == 4 and sync.device_id == 0


@pytest.mark.parametrize(
    ("ops", "kind"),
    [
        (["aten::nonzero"], catalogue.DYNAMIC_SHAPE),
        (["aten::unique_dim"], catalogue.DYNAMIC_SHAPE),
        (["aten::_unique2"], catalogue.DYNAMIC_SHAPE),
        (["aten::masked_select"], catalogue.DYNAMIC_SHAPE),
        (["aten::index", "aten::nonzero"], catalogue.DYNAMIC_SHAPE),
        (["aten::index_put_", "aten::nonzero"], catalogue.DYNAMIC_SHAPE),
        (["aten::where", "aten::nonzero"], catalogue.DYNAMIC_SHAPE),
        (["aten::repeat_interleave"], catalogue.DYNAMIC_SHAPE),
        (["aten::argwhere", "aten::nonzero"], catalogue.DYNAMIC_SHAPE),
        (
            ["aten::is_nonzero", "aten::item", "aten::_local_scalar_dense"],
            catalogue.SCALAR_READBACK,
        ),
        (["aten::to", "aten::_to_copy", "aten::copy_"], catalogue.DEVICE_TO_HOST_COPY),
    ],
)
def test_operator_chain_decides_the_kind(tmp_path, ops, kind):
    b = KinetoTraceBuilder()
    with b.step(1):
        b.kernel(dur=200)
        with b.op(ops[0]):
            if len(ops) > 1:
                with b.op(ops[1]):
                    if len(ops) > 2:
                        with b.op(ops[2]):
                            b.runtime("cudaMemcpyAsync", memcpy=("DtoH", "Pageable"))
                            b.runtime("cudaStreamSynchronize")
                    else:
                        b.runtime("cudaMemcpyAsync", memcpy=("DtoH", "Pageable"))
                        b.runtime("cudaStreamSynchronize")
            else:
                b.runtime("cudaMemcpyAsync", memcpy=("DtoH", "Pageable"))
                b.runtime("cudaStreamSynchronize")
    (sync,) = _analyze(b, tmp_path).syncs
    assert sync.kind == kind
    assert sync.op_chain == ops


def test_pageable_host_to_device_copy_is_blocking(tmp_path):
    b = KinetoTraceBuilder()
    with b.step(1), b.op("aten::to"), b.op("aten::_to_copy"), b.op("aten::copy_"):
        b.runtime("cudaMemcpyAsync", dur=30, memcpy=("HtoD", "Pageable"), bytes=4096)
    (sync,) = _analyze(b, tmp_path).syncs
    assert sync.kind == catalogue.BLOCKING_HOST_TO_DEVICE
    assert sync.api == "cudaMemcpyAsync" and sync.bytes == 4096


@pytest.mark.parametrize(
    "memcpy, kind, guessed",
    [
        (None, catalogue.DEVICE_TO_HOST_COPY, True),  # no copy record: which way, unknown
        (("DtoH", "Pageable"), catalogue.DEVICE_TO_HOST_COPY, False),
        (("HtoD", "Pageable"), catalogue.BLOCKING_HOST_TO_DEVICE, False),
    ],
)
def test_a_copy_without_a_record_of_its_direction_says_its_kind_is_a_guess(
    tmp_path, memcpy, kind, guessed
):
    """A stream sync inside .to() with no copy record (torch_npu's host side, a CUPTI
    range-mode trace) was reported as a copy to the host with that fix, though a 19 MB
    upload of a batch looks the same: the site now says the direction is not recorded."""
    from tb_syncfinder.outputs.text import COPY_DIRECTION_NOTE

    b = KinetoTraceBuilder()
    with b.step(1):
        b.kernel(dur=300)
        with b.op("aten::to"), b.op("aten::_to_copy"), b.op("aten::copy_"):
            if memcpy:
                b.runtime("cudaMemcpyAsync", dur=30, memcpy=memcpy, bytes=4096)
            b.runtime("cudaStreamSynchronize")
    path = b.write(tmp_path / "w.pt.trace.json")
    report = analyze(str(path))
    (sync,) = report.syncs
    (site,) = report.sites
    assert sync.kind == site.kind == kind
    assert sync.copy_direction_guessed is site.copy_direction_guessed is guessed
    assert (COPY_DIRECTION_NOTE in " ".join(report.to_text().split())) is guessed


@pytest.mark.parametrize(
    "api",
    [
        "cudaDeviceSynchronize",
        "cudaEventSynchronize",
        "cudaStreamSynchronize",
        "hipDeviceSynchronize",
        "AscendCL@aclrtSynchronizeStream",
    ],
)
def test_bare_synchronize_call_is_explicit_sync_without_operator(tmp_path, api):
    b = KinetoTraceBuilder()
    with b.step(1):
        b.kernel(dur=300)
        b.runtime(api)
    (sync,) = _analyze(b, tmp_path).syncs
    assert sync.kind == catalogue.EXPLICIT_SYNC
    assert sync.op is None and sync.api == api


def test_driver_synchronize_is_detected(tmp_path):
    b = KinetoTraceBuilder()
    with b.step(1):
        b.kernel(dur=100)
        b.runtime("cuCtxSynchronize", cat="cuda_driver")
    (sync,) = _analyze(b, tmp_path).syncs
    assert sync.api == "cuCtxSynchronize"


def test_synchronous_hip_copy_is_blocking(tmp_path):
    b = KinetoTraceBuilder()
    with b.step(1), b.op("aten::to"), b.op("aten::_to_copy"), b.op("aten::copy_"):
        b.runtime("hipMemcpyWithStream", dur=60, memcpy=("HtoD", "Host"))
    (sync,) = _analyze(b, tmp_path).syncs
    assert sync.kind == catalogue.BLOCKING_HOST_TO_DEVICE


def test_unknown_api_joined_to_a_cuda_sync_record_is_a_sync(tmp_path):
    b = KinetoTraceBuilder()
    with b.step(1):
        b.kernel(dur=100)
        b.runtime("cudaSomeFutureWait", sync="Stream Sync")
    (sync,) = _analyze(b, tmp_path).syncs
    assert sync.api == "cudaSomeFutureWait"


def test_allocator_calls_count_inside_steps_only(tmp_path):
    b = KinetoTraceBuilder()
    b.runtime("cudaMalloc", dur=200)  # warm-up allocation before the first step
    with b.step(1), b.op("aten::empty"):
        b.runtime("cudaFree", dur=150)
    (sync,) = _analyze(b, tmp_path).syncs
    assert sync.kind == catalogue.ALLOCATOR_SYNC and sync.api == "cudaFree"


def test_calls_of_one_operator_invocation_form_one_episode(tmp_path):
    b = KinetoTraceBuilder()
    with b.step(1):
        with b.op("aten::to"), b.op("aten::_to_copy"), b.op("aten::copy_"):
            b.runtime("cudaMemcpyAsync", memcpy=("DtoH", "Pageable"))
            b.runtime("cudaStreamSynchronize")
            b.runtime("cudaMemcpyAsync", memcpy=("DtoH", "Pageable"))
        item_sync(b)
    syncs = _analyze(b, tmp_path).syncs
    assert [len(s.apis) for s in syncs] == [3, 2]


def test_each_read_in_the_python_of_an_autograd_function_is_its_own_sync(tmp_path):
    """A ``torch.autograd.Function``'s ``apply`` is recorded as an operator named after its
    class, holding the Python of its ``forward``: linear_operator's conjugate gradients
    read their residual every iteration inside one ``InvQuadLogdet``. Each read is a call
    of its own, waited for apart; the operator does not make them one (a walk counted 5
    of 85 reads on a CPU trace)."""
    b = KinetoTraceBuilder()
    with b.step(1), b.op("Solve", stack=[("train.py", 8, "train_step")]):
        for _ in range(3):
            item_sync(b, stack=[("solver.py", 20, "forward"), ("solver.py", 4, "cg")])
    syncs = _analyze(b, tmp_path).syncs
    assert [s.op_chain[:2] for s in syncs] == [["Solve", "aten::item"]] * 3
    assert all(s.apis == ["cudaMemcpyAsync", "cudaStreamSynchronize"] for s in syncs)


def test_pinned_non_blocking_copy_wait_event_and_event_query_are_not_syncs(tmp_path):
    b = KinetoTraceBuilder()
    with b.step(1):
        with b.op("aten::to"), b.op("aten::_to_copy"), b.op("aten::copy_"):
            b.runtime("cudaMemcpyAsync", memcpy=("HtoD", "Pinned"), bytes=1 << 20)
        b.kernel(dur=100)
        b.runtime("cudaStreamWaitEvent", sync="Stream Wait Event")
        b.runtime("cudaEventQuery", dur=1, sync="Event Sync")
        b.runtime("cudaMemcpyAsync", memcpy=("DtoD", "Device"))
        b.kernel(dur=100)
    result = _analyze(b, tmp_path)
    assert result.syncs == []
    assert result.latent == []  # a GPU trace has no latent findings


def test_trace_without_syncs_has_zero_findings_and_a_step(tmp_path):
    b = KinetoTraceBuilder()
    for n in range(3):
        with b.step(n), b.op("aten::add"):
            b.kernel(dur=20)
    result = _analyze(b, tmp_path)
    assert result.syncs == []
    assert [s.step for s in result.steps] == [0, 1, 2]
    assert all(s.sync_count == 0 for s in result.steps)


def test_correlation_falls_back_to_ac2g_flows(tmp_path):
    b = KinetoTraceBuilder()
    with b.step(1), b.op("aten::to"), b.op("aten::_to_copy"), b.op("aten::copy_"):
        b.runtime("cudaMemcpyAsync", memcpy=("HtoD", "Pageable"), correlation=False)
    (sync,) = _analyze(b, tmp_path).syncs
    assert sync.kind == catalogue.BLOCKING_HOST_TO_DEVICE


def test_html_in_names_is_kept_as_data(tmp_path):
    evil = "<img src=x onerror=alert(1)>"
    b = KinetoTraceBuilder()
    with b.step(1), b.op(evil, stack=[(f"{evil}.py", 3, evil)], called="item"):
        b.runtime("cudaStreamSynchronize", dur=50)
    (sync,) = _analyze(b, tmp_path).syncs
    assert sync.op == evil
    assert sync.stack[1].func == evil


@pytest.mark.parametrize("string_ts", [False, True])
def test_cpu_only_trace_lists_latent_ops_and_repeat_interleave_with_output_size_is_not(
    tmp_path, string_ts
):
    """As torch's CPU kernels run them: ``repeat_interleave`` reads its repeats' total
    (an ``item`` inside it) only without ``output_size`` and with tensor repeats, where a
    GPU would wait; the read, not the operator's name, makes it a latent sync, also in a
    trace recorded without ``record_shapes`` (no Concrete Inputs)."""
    b = KinetoTraceBuilder(gpu=False)
    with b.step(1):
        with b.op("aten::repeat_interleave", args={"Concrete Inputs": ["", "", "", "12"]}):
            pass
        with b.op("aten::repeat_interleave"):  # output_size, or int repeats: no read
            pass
        with b.op("aten::repeat_interleave", args={"Concrete Inputs": ["", "", "", ""]}):
            with b.op("aten::cumsum"):
                pass
            with b.op("aten::item"), b.op("aten::_local_scalar_dense"):
                pass
            with b.op("aten::item"), b.op("aten::_local_scalar_dense"):
                pass
        with b.op("aten::item"), b.op("aten::_local_scalar_dense"):
            pass
    doc = b.to_dict()
    if string_ts:  # forces the lenient slow path
        for event in doc["traceEvents"]:
            event["ts"] = str(event["ts"])
    path = tmp_path / "cpu.pt.trace.json"
    path.write_text(__import__("json").dumps(doc))
    result = analyze_trace(str(path))
    assert result.syncs == []
    assert [(s.op, s.trigger_op, s.kind) for s in result.latent] == [
        ("aten::repeat_interleave", "aten::_local_scalar_dense", catalogue.DYNAMIC_SHAPE),
        ("aten::item", "aten::_local_scalar_dense", catalogue.SCALAR_READBACK),
    ]
    assert result.info.device == "cpu"


def test_a_barrier_is_a_collective_wait_at_its_line_with_the_barrier_advice(tmp_path):
    source = tmp_path / "train.py"
    source.write_text(
        "import torch.distributed as dist\n\n\ndef train_step(loss):\n"
        "    loss.backward()\n    dist.barrier()\n    return loss\n"
    )
    b = KinetoTraceBuilder()
    with b.step(1):
        b.kernel(dur=300)
        with b.op(
            "c10d::barrier",
            stack=[
                (str(source), 4, "train_step"),
                ("torch/distributed/c10d_logger.py", 79, "wrapper"),
            ],
        ):
            b.runtime("cudaDeviceSynchronize")
    path = b.write(tmp_path / "w.pt.trace.json")
    report = analyze(str(path), source_roots=[str(tmp_path)])
    (site,) = report.sites
    assert site.kind == catalogue.COLLECTIVE_WAIT
    assert (site.line, site.line_exact) == (6, True)
    assert "barrier" in site.advice["title"]


@pytest.mark.parametrize(
    ("annotations", "kind"),
    [
        (["## SplitsAllToAllAwaitable wait() ##"], catalogue.COLLECTIVE_WAIT),
        (["nccl:all_to_all"], catalogue.COLLECTIVE_WAIT),
        # A pageable copy made inside the wait, in a region of its own: the copy is the cause.
        (
            ["## KJTAllToAllSplitsAwaitable wait() ##", "## all2all_data:recat_permute_gen ##"],
            catalogue.DEVICE_TO_HOST_COPY,
        ),
        (["## sparse_data_dist ##"], catalogue.DEVICE_TO_HOST_COPY),
    ],
)
def test_a_copy_whose_innermost_region_is_a_collective_wait_waits_on_the_collective(
    tmp_path, annotations, kind
):
    b = KinetoTraceBuilder()
    with b.step(1):
        b.kernel(dur=300)
        with contextlib.ExitStack() as regions:
            for name in annotations:
                regions.enter_context(b.annotation(name))
            with b.op("aten::to"), b.op("aten::_to_copy"), b.op("aten::copy_"):
                b.runtime("cudaMemcpyAsync", dur=4, memcpy=("DtoH", "Pageable"), bytes=64)
                b.runtime("cudaStreamSynchronize")
    path = b.write(tmp_path / "w.pt.trace.json")
    (sync,) = analyze(str(path)).syncs
    assert sync.kind == kind


def test_a_line_that_copies_both_ways_says_its_other_kind(tmp_path):
    """A Hugging Face pipeline's helper moves its inputs to the device and its outputs back
    from one line: 55 copies back and 25 uploads read as one device_to_host_copy site with
    the copy-back fix only. The site now counts its other kind, and the table says so."""
    b = KinetoTraceBuilder()
    stack = [("pipelines/base.py", 1173, "_ensure_tensor_on_device")]
    with b.step(1):
        for memcpy in (("DtoH", "Pageable"), ("DtoH", "Pageable"), ("HtoD", "Pageable")):
            b.kernel(dur=200)
            with b.op("aten::to", stack=stack), b.op("aten::_to_copy"), b.op("aten::copy_"):
                b.runtime("cudaMemcpyAsync", dur=30, memcpy=memcpy, bytes=4096)
                b.runtime("cudaStreamSynchronize")
    report = analyze(str(b.write(tmp_path / "w.pt.trace.json")))
    (site,) = report.sites
    assert site.kind == catalogue.DEVICE_TO_HOST_COPY and site.count == 3
    assert site.other_kinds == {catalogue.BLOCKING_HOST_TO_DEVICE: 1}
    label = catalogue.kind(catalogue.BLOCKING_HOST_TO_DEVICE).label
    assert f"also 1 {label}, whose fix is not the one below" in " ".join(report.to_text().split())


def test_a_rocm_upload_that_may_be_from_pageable_memory_is_said_not_judged(tmp_path, capsys):
    """ROCm names every upload ``Memcpy HtoD (Host -> Device)``: a ``non_blocking`` copy
    from pageable memory (which blocks the host) looks like a pinned one. The report said
    "No host-device synchronizations found"; it now counts them, with the host's time in
    them, as not judged. A CUDA trace names the memory, so has none."""
    from tb_syncfinder.cli import main

    b = KinetoTraceBuilder(device_name="AMD Instinct MI250X")
    with b.step(1), b.op("aten::to"), b.op("aten::_to_copy"), b.op("aten::copy_"):
        b.runtime("hipMemcpyAsync", dur=2500, memcpy=("HtoD", "Host"), bytes=64 << 20)
    with b.step(2), b.op("aten::to"), b.op("aten::_to_copy"), b.op("aten::copy_"):
        b.runtime("hipMemcpyWithStream", dur=60, memcpy=("HtoD", "Host"))  # blocking: a sync
    result = _analyze(b, tmp_path)
    trace = result.info
    assert trace.device == "rocm" and len(result.syncs) == 1
    assert (trace.unjudged_uploads, trace.unjudged_upload_host_us) == (1, 2500.0)
    assert main(["report", str(tmp_path)]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "Not judged: 1 asynchronous host-to-device copy (2.50 ms of host time" in text
    pinned = KinetoTraceBuilder()
    with pinned.step(1), pinned.op("aten::to"), pinned.op("aten::copy_"):
        pinned.runtime("cudaMemcpyAsync", dur=10, memcpy=("HtoD", "Pinned"), bytes=4096)
    assert _analyze(pinned, tmp_path / "cuda").info.unjudged_uploads == 0
