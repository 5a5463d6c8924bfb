"""Traces of every shape the reader must decode on its fast path, built event by event.

Each function returns the JSON document (a dict, or a list for the array format) of one
trace shape, with the fields and value types its producer writes:

* ``cuda_stacks``: CUDA, ``with_stack`` python_function trees and ``nn.Module`` frames;
* ``record_shapes``: operators with ``Input Dims`` / ``Input type`` / ``Input Strides`` /
  ``Concrete Inputs`` (lists of strings, ``['', '']`` mostly), as torch 2.x writes them;
* ``cuda_sync_events``: CUPTI ``cuda_sync`` records (``enable_cuda_sync_events``);
* ``rocm``: ``hip*`` runtime names, ``stream`` as a hex string, ``kind`` as a string;
* ``ascend``: torch_npu's ``trace_view.json``: a bare array, ``ts`` written as strings,
  ``AscendCL@`` calls, counters (``C``) and flows with string ids;
* ``legacy``: torch 1.x: ``Operator`` / ``Runtime`` categories, ``Call stack`` argument.

``sites_in_steps(steps, sites)`` repeats ``.item()`` at ``sites`` lines in every step (each
site's saving is a what-if removing one sync per step), GPU-bound or with autograd's
thread launching most of the work; for the what-if's tests and ``bench/bench_whatif.py``.

``resnet_like(steps)`` is a bigger CUDA trace recorded with shapes and stacks (the shape of
a ResNet training step: conv / batch_norm / relu / add operators and their kernels, one
``loss.item()`` per step), for benchmarks and chunking tests.
"""

from __future__ import annotations

import copy
from typing import Any

from kineto_builder import KinetoTraceBuilder, item_sync

SHAPES = ("cuda_stacks", "record_shapes", "cuda_sync_events", "rocm", "ascend", "legacy")


def _shape_args(dims: list[list[int]], concrete: list[str] | None = None) -> dict[str, Any]:
    return {
        "Input Dims": dims,
        "Input type": ["float" if d else "Scalar" for d in dims],
        "Input Strides": [[max(1, n) for n in d] for d in dims],
        "Concrete Inputs": concrete if concrete is not None else ["" for _ in dims],
    }


def cuda_stacks() -> dict[str, Any]:
    b = KinetoTraceBuilder()
    for step in (1, 2):
        with b.step(step), b.frame(("train.py", 20, "main")), b.frame("nn.Module: Net_0"):
            with b.op("aten::conv2d", stack=[("model.py", 8, "forward")]):
                b.kernel("void implicit_convolve_sgemm<float>()", dur=120)
            item_sync(b, stack=[("train.py", 31, "train_step")])
    return b.to_dict()


def record_shapes() -> dict[str, Any]:
    b = KinetoTraceBuilder()
    for step in (1, 2):
        with b.step(step):
            with b.op(
                "aten::conv2d",
                args=_shape_args(
                    [[8, 3, 32, 32], [16, 3, 3, 3], [], [], [], [], []],
                    ["", "", "", "[1, 1]", "[1, 1]", "[1, 1]", "1"],
                ),
            ):
                b.kernel("void implicit_convolve_sgemm<float>()", dur=150)
            with b.op("aten::add_", args=_shape_args([[16], [16], []], ["", "", "1"])):
                b.kernel(dur=10)
            with b.op(
                "aten::repeat_interleave", args=_shape_args([[4], [], [], []], ["", "", "", "12"])
            ):
                b.kernel(dur=5)
            with (
                b.op("aten::item", args=_shape_args([[]]), called="item"),
                b.op("aten::_local_scalar_dense", args=_shape_args([[]])),
            ):
                b.runtime("cudaMemcpyAsync", dur=5, memcpy=("DtoH", "Pageable"), bytes=4)
                b.runtime("cudaStreamSynchronize")
    doc = b.to_dict()
    doc.update({"record_shapes": 1, "with_stack": 0, "trace_id": "FD6D08A345224A0E"})
    return doc


def cuda_sync_events() -> dict[str, Any]:
    b = KinetoTraceBuilder()
    with b.step(1):
        b.kernel(dur=300)
        with b.op("aten::item"), b.op("aten::_local_scalar_dense"):
            b.runtime("cudaMemcpyAsync", dur=5, memcpy=("DtoH", "Pageable"), bytes=4)
            b.runtime("cudaStreamSynchronize", sync="Stream Sync")
        b.kernel(dur=100)
        b.runtime("cudaEventSynchronize", sync="Event Sync")
        b.runtime("cudaStreamWaitEvent", dur=2, sync="Stream Wait Event")
        b.runtime("cudaDeviceSynchronize", sync="Context Sync")
    doc = b.to_dict()
    for event in doc["traceEvents"]:
        if event.get("cat") == "cuda_sync" and event["name"] == "Event Sync":
            event["args"].update({"wait_on_stream": -1, "wait_on_cuda_event_record_corr_id": 1})
    return doc


def rocm() -> dict[str, Any]:
    b = KinetoTraceBuilder(device_name="AMD Instinct MI250X")
    with b.step(1):
        b.kernel(dur=200)
        with b.op("aten::to"), b.op("aten::_to_copy"), b.op("aten::copy_"):
            b.runtime("hipMemcpyWithStream", dur=60, memcpy=("DtoH", "Pageable"), bytes=2560)
        b.runtime("hipDeviceSynchronize")
    doc = b.to_dict()
    for event in doc["traceEvents"]:
        args = event.get("args")
        if event.get("name") == "cudaLaunchKernel":
            event["name"] = "hipLaunchKernel"
        if event.get("name") == "hipMemcpyWithStream":
            args.update(
                {"stream": "0x0", "kind": "2", "size": "2560", "src": "0x5567", "dst": "0x7fda"}
            )
        if event.get("cat") == "kernel":
            args.update({"grid": [3, 1, 1], "block": [128, 1, 1], "stream": "0x0"})
    return doc


def ascend() -> list[dict[str, Any]]:
    """torch_npu's ``trace_view.json``: ``TraceEventManager.create_x_event`` writes ``ts``
    with ``convert_ns2us_str`` (a string) and ``dur`` as a float."""
    pid, tid = 2011890, 2011890
    events: list[dict[str, Any]] = [
        {"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": "Python"}},
        {"ph": "M", "name": "process_labels", "pid": pid, "tid": 0, "args": {"labels": "CPU"}},
        {
            "ph": "M",
            "name": "thread_name",
            "pid": pid,
            "tid": tid,
            "args": {"name": f"Thread {tid}"},
        },
    ]
    ts = 1_700_000_000_000.0
    for step in (1, 2):
        events.append(
            {
                "ph": "X",
                "name": f"ProfilerStep#{step}",
                "pid": pid,
                "tid": tid,
                "ts": f"{ts:.3f}",
                "dur": 900.0,
                "cat": "cpu_op",
                "args": {"Sequence number": -1, "Fwd thread id": 0},
            }
        )
        events.append(
            {
                "ph": "X",
                "name": "aten::item",
                "pid": pid,
                "tid": tid,
                "ts": f"{ts + 10:.3f}",
                "dur": 500.5,
                "cat": "cpu_op",
                "args": {
                    "Sequence number": -1,
                    "Fwd thread id": 0,
                    "Input Dims": [[]],
                    "Input type": ["float"],
                },
            }
        )
        # CANN API calls carry no "cat".
        events.append(
            {
                "ph": "X",
                "name": "AscendCL@aclrtSynchronizeStream",
                "pid": pid,
                "tid": tid,
                "ts": f"{ts + 20:.3f}",
                "dur": 480.25,
                "args": {
                    "Thread Id": tid,
                    "Mode": "ACL_OP",
                    "level": "acl",
                    "id": "0",
                    "item_id": "0",
                    "connection_id": 7,
                },
            }
        )
        events.append(
            {
                "ph": "s",
                "name": "HostToDevice",
                "id": f"{step}7",
                "pid": pid,
                "tid": tid,
                "ts": f"{ts + 20:.3f}",
                "cat": "HostToDevice",
            }
        )
        events.append(
            {
                "ph": "f",
                "name": "HostToDevice",
                "id": f"{step}7",
                "pid": 3,
                "tid": 2,
                "ts": f"{ts + 30:.3f}",
                "cat": "HostToDevice",
                "bp": "e",
            }
        )
        events.append(
            {
                "ph": "X",
                "name": "MatMulV2",
                "pid": 3,
                "tid": 2,
                "ts": f"{ts + 30:.3f}",
                "dur": 400.0,
                "args": {
                    "Model Id": 4294967295,
                    "Task Type": "AI_CORE",
                    "Stream Id": 2,
                    "Task Id": 12,
                    "Batch Id": 0,
                    "connection_id": 7,
                },
            }
        )
        events.append(
            {
                "ph": "C",
                "name": "HBM",
                "pid": 3,
                "tid": 0,
                "ts": f"{ts + 40:.3f}",
                "args": {"Read(MB/s)": 11.2},
            }
        )
        ts += 1000
    return events


def legacy() -> dict[str, Any]:
    b = KinetoTraceBuilder()
    with b.step(1):
        b.kernel(dur=200)
        with (
            b.op("aten::item", call_stack="model.py(50): forward;train.py(112): train"),
            b.op("aten::_local_scalar_dense"),
        ):
            b.runtime("cudaMemcpyAsync", dur=5, memcpy=("DtoH", "Pageable"), bytes=4)
            b.runtime("cudaStreamSynchronize")
    doc = b.to_dict()
    renamed = {
        "cpu_op": "Operator",
        "cuda_runtime": "Runtime",
        "gpu_memcpy": "Memcpy",
        "kernel": "Kernel",
    }
    for event in doc["traceEvents"]:
        if event.get("cat") in renamed:
            event["cat"] = renamed[event["cat"]]
            args = event.get("args", {})
            if "External id" in args:
                args["external id"] = args.pop("External id")
    doc["pytorch_version"] = "1.10.0"
    return doc


def shape(name: str) -> Any:
    """A fresh copy of the trace of shape ``name`` (one of ``SHAPES``)."""
    return copy.deepcopy(globals()[name]())


def sites_in_steps(
    steps: int, sites: int, kernels: int = 20, second_thread: bool = False
) -> KinetoTraceBuilder:
    """Per step and site, ``kernels`` kernels then ``.item()`` at line ``10 + site``:
    back-to-back 20 us kernels (GPU-bound), or with ``second_thread`` launches 3 us apart
    and, after the sync, thirty kernels launched by a second thread (autograd's backward
    thread) that does not move when the main thread does."""
    b = KinetoTraceBuilder()
    for n in range(1, steps + 1):
        with b.step(n):
            for site in range(sites):
                for k in range(kernels):
                    if second_thread:
                        b.kernel(dur=100 + 7 * ((n + k) % 5))
                        b.advance(3)
                    else:
                        b.kernel(dur=20)
                item_sync(b, stack=[("train.py", 10 + site, "train_step")], kernel_us=None)
                if second_thread:
                    b.advance(20)
                    with b.thread(2):
                        for k in range(30):
                            b.kernel(dur=60 + 5 * (k % 3))
                            b.advance(4)
                    b.advance(30 + 5 * (n % 3))
    return b


def resnet_like(steps: int, blocks: int = 16) -> dict[str, Any]:
    """A CUDA training trace the shape of ResNet-50's, recorded with ``record_shapes``
    and ``with_stack``: per step, ``blocks`` residual blocks of conv / batch_norm / relu
    (each op with its shape arguments, nested aten ops, kernels on the device), the
    backward pass on the autograd thread, and one ``loss.item()``."""
    b = KinetoTraceBuilder(device_name="NVIDIA H100 80GB HBM3")
    main = (("train.py", 40, "main"), ("train.py", 25, "train_step"))
    for step in range(1, steps + 1):
        with b.step(step), b.frame(main[0]), b.frame(main[1]), b.frame("nn.Module: ResNet_0"):
            for block in range(blocks):
                with b.frame(f"nn.Module: Bottleneck_{block}"):
                    for _conv in range(3):
                        dims = [[32, 64, 56, 56], [64, 64, 3, 3], [], [], [], [], []]
                        concrete = ["", "", "", "[1, 1]", "[1, 1]", "[1, 1]", "1"]
                        with (
                            b.frame(("torchvision/models/resnet.py", 140, "forward")),
                            b.op("aten::conv2d", args=_shape_args(dims, concrete)),
                            b.op("aten::convolution", args=_shape_args(dims, concrete)),
                            b.op(
                                "aten::cudnn_convolution",
                                args=_shape_args(dims[:2] + [[]] * 5, concrete),
                            ),
                        ):
                            b.kernel(
                                "void cudnn::cnn::conv2d_grouped_direct_kernel<float>()", dur=180
                            )
                        with (
                            b.op(
                                "aten::batch_norm",
                                args=_shape_args(
                                    [[32, 64, 56, 56], [64], [64], [64], [64], [], [], [], []],
                                    ["", "", "", "", "", "True", "0.1", "1e-05", "True"],
                                ),
                            ),
                            b.op(
                                "aten::cudnn_batch_norm",
                                args=_shape_args([[32, 64, 56, 56], [64], [64]]),
                            ),
                        ):
                            b.kernel("void cudnn::bn_fw_tr_1C11_kernel_NCHW<float>()", dur=60)
                        with b.op("aten::relu_", args=_shape_args([[32, 64, 56, 56]])):
                            b.kernel("void at::native::vectorized_elementwise_kernel<4>()", dur=25)
                    with b.op(
                        "aten::add_",
                        args=_shape_args([[32, 256, 56, 56], [32, 256, 56, 56], []], ["", "", "1"]),
                    ):
                        b.kernel(dur=30)
            item_sync(b, stack=[main[0], main[1]])
    doc = b.to_dict()
    doc.update({"record_shapes": 1, "with_stack": 1, "with_modules": 1})
    return doc
