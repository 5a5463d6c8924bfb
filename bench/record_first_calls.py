"""Record what a library's first call in a process looks like in a CUDA trace: cuBLAS and
cuBLASLt set up their handles and workspaces inside the first ``aten::mm`` / ``aten::addmm``
/ ``aten::bmm``, and a trace whose profiled steps include that first call shows a blocking
copy or allocation there that no later call makes. Also records same-device copies
(``copy_``, ``clone``, ``.to(copy=True)``), whose copy records say ``DtoD``.

    python bench/record_first_calls.py --out DIR

Cases: ``first_matmul`` (the first calls in the first profiled step), ``first_matmul_warmed``
(the same with one unprofiled call before: the fix), ``matmul_new_stream`` (the calls on a
new stream every step), ``same_device_copies``; ``first_conv`` (cuDNN, forward and
backward) and ``first_conv_warmed``, ``first_lstm`` (cuDNN's RNN), ``first_sdpa``
(scaled dot-product attention in half precision). Each case runs in a fresh process (a first
call is per process): profiled (``with_stack``, ``record_shapes``, a schedule of 3 active
steps without warm-up, the first call in step 0), under
``torch.cuda.set_sync_debug_mode("warn")`` (the lines torch warns at), and unprofiled (the host
time of each step's calls, synchronized at the end of each step). Writes
``DIR/<case>.pt.trace.json.gz`` and ``DIR/first_calls.json``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
import warnings
from pathlib import Path

CASES = (
    "first_matmul",
    "first_matmul_warmed",
    "matmul_new_stream",
    "same_device_copies",
    "first_conv",
    "first_conv_warmed",
    "first_lstm",
    "first_sdpa",
)
STEPS = 3
DEVICE = "cuda"  # --device cpu: the script checks itself without a GPU


def first_matmul(device, torch) -> None:  # noqa: ANN001 (torch is imported by the caller)
    linear = torch.nn.Linear(1024, 1024, device=device)
    x = torch.randn(256, 1024, device=device)
    a = torch.randn(8, 256, 256, device=device)
    y = linear(x)  # first call: aten::addmm (cuBLASLt)
    z = torch.mm(x, x.t())  # aten::mm (cuBLAS)
    w = torch.bmm(a, a)  # aten::bmm
    del y, z, w


def matmul_new_stream(device, torch) -> None:  # noqa: ANN001
    if device.type != "cuda":
        first_matmul(device, torch)
        return
    stream = torch.cuda.Stream()  # a new stream every step: does cuBLAS set up again?
    with torch.cuda.stream(stream):
        first_matmul(device, torch)
    torch.cuda.current_stream().wait_stream(stream)


def same_device_copies(device, torch) -> None:  # noqa: ANN001
    a = torch.randn(1024, 1024, device=device)
    b = torch.empty_like(a)
    b.copy_(a)
    c = a.clone()
    d = a.to(device, copy=True)
    e = a.t().contiguous()
    del c, d, e


def first_conv(device, torch) -> None:  # noqa: ANN001
    conv = torch.nn.Conv2d(64, 64, 3, padding=1, device=device)
    x = torch.randn(32, 64, 56, 56, device=device, requires_grad=True)
    y = conv(x)  # first call: aten::cudnn_convolution
    y.sum().backward()  # aten::convolution_backward
    del y


def first_lstm(device, torch) -> None:  # noqa: ANN001
    lstm = torch.nn.LSTM(256, 256, batch_first=True, device=device)
    x = torch.randn(16, 64, 256, device=device)
    out, _state = lstm(x)  # first call: aten::_cudnn_rnn
    del out


def first_sdpa(device, torch) -> None:  # noqa: ANN001
    dtype = torch.float16 if device.type == "cuda" else torch.float32
    q, k, v = (torch.randn(8, 8, 512, 64, device=device, dtype=dtype) for _ in range(3))
    out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    del out


def _child(case: str, mode: str, out: Path) -> dict:
    import torch

    device = torch.device(DEVICE)
    torch.zeros(1, device=device)  # the context, before any profiled step
    sync = torch.cuda.synchronize if device.type == "cuda" else lambda: None
    sync()
    body = globals()[case.removesuffix("_warmed")]
    if case.endswith("_warmed"):  # the fix: the first call made before the profiled steps
        body(device, torch)
        sync()
    result: dict = {"case": case, "mode": mode}
    if mode == "profiled":
        from torch.profiler import ProfilerActivity, profile, schedule

        path = out / f"{case}.pt.trace.json"
        with profile(
            activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA],
            schedule=schedule(wait=0, warmup=0, active=STEPS, repeat=1),
            on_trace_ready=lambda prof: prof.export_chrome_trace(str(path)),
            record_shapes=True,
            with_stack=True,
        ) as prof:
            for _ in range(STEPS):
                body(device, torch)
                sync()
                prof.step()
        subprocess.run(["gzip", "-f", str(path)], check=True)
        result["trace"] = path.name + ".gz"
    elif mode == "warn" and device.type == "cuda":
        torch.cuda.set_sync_debug_mode("warn")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for _ in range(STEPS):
                body(device, torch)
        torch.cuda.set_sync_debug_mode(0)
        result["warned"] = [f"{Path(w.filename).name}:{w.lineno} {w.message}"[:200] for w in caught]
    elif mode == "unprofiled":
        step_ms = []
        for _ in range(STEPS + 2):
            start = time.perf_counter()
            body(device, torch)
            sync()
            step_ms.append((time.perf_counter() - start) * 1e3)
        result["step_ms"] = step_ms
    result["torch"] = torch.__version__
    result["gpu"] = torch.cuda.get_device_name() if device.type == "cuda" else "none"
    return result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--child", nargs=2, metavar=("CASE", "MODE"))
    parser.add_argument("--device", default="cuda")
    args = parser.parse_args()
    global DEVICE
    DEVICE = args.device
    args.out.mkdir(parents=True, exist_ok=True)
    if args.child:
        print(json.dumps(_child(*args.child, args.out)))
        return
    results = []
    for case in CASES:
        for mode in ("profiled", "warn", "unprofiled"):
            proc = subprocess.run(
                [sys.executable, __file__, "--out", str(args.out), "--device", DEVICE]
                + ["--child", case, mode],
                capture_output=True,
                text=True,
                check=False,
            )
            line = proc.stdout.strip().splitlines()[-1:] or ["{}"]
            try:
                results.append(json.loads(line[0]))
            except json.JSONDecodeError:
                results.append({"case": case, "mode": mode, "error": proc.stderr[-2000:]})
            print(json.dumps(results[-1])[:600], flush=True)
    (args.out / "first_calls.json").write_text(json.dumps(results, indent=1) + "\n")


# Cases added after the first recordings (cuFFT, the flash and memory-efficient attention
# kernels, and the LSTM's fix). They stay below the rest so that the traces recorded before
# still name this file's lines; FIRST_CALL_CASES=a,b records only those.
import os  # noqa: E402


def first_fft(device, torch) -> None:  # noqa: ANN001
    x = torch.randn(64, 256, 256, device=device)
    y = torch.fft.rfft2(x)  # first call: cuFFT makes its plan
    z = torch.fft.irfft2(y)  # the inverse: a second plan
    del z


def _sdpa_backend(device, torch, backend: str) -> None:  # noqa: ANN001
    from torch.nn.attention import SDPBackend, sdpa_kernel

    dtype = torch.float16 if device.type == "cuda" else torch.float32
    q, k, v = (torch.randn(8, 8, 512, 64, device=device, dtype=dtype) for _ in range(3))
    chosen = getattr(SDPBackend, backend) if device.type == "cuda" else SDPBackend.MATH
    with sdpa_kernel(chosen):
        out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    del out


def first_flash_sdpa(device, torch) -> None:  # noqa: ANN001
    _sdpa_backend(device, torch, "FLASH_ATTENTION")


def first_efficient_sdpa(device, torch) -> None:  # noqa: ANN001
    _sdpa_backend(device, torch, "EFFICIENT_ATTENTION")


CASES = CASES + (
    "first_fft",
    "first_fft_warmed",
    "first_flash_sdpa",
    "first_efficient_sdpa",
    "first_lstm_warmed",
)


# A signal of a new length every step, and the fix the advice gives (a few fixed lengths).
_LENGTHS = iter(range(3000, 1 << 20, 97))


def fft_new_length(device, torch) -> None:  # noqa: ANN001
    wave = torch.randn(64, next(_LENGTHS), device=device)
    spec = torch.fft.rfft(wave)  # a new length: a new plan
    del spec


def fft_fixed_length(device, torch) -> None:  # noqa: ANN001
    wave = torch.randn(64, next(_LENGTHS), device=device)
    n = 1 << (wave.shape[-1] - 1).bit_length()
    spec = torch.fft.rfft(wave, n=n)  # padded: one plan
    del spec


CASES = CASES + ("fft_new_length", "fft_fixed_length")
if os.environ.get("FIRST_CALL_CASES"):
    CASES = tuple(os.environ["FIRST_CALL_CASES"].split(","))


if __name__ == "__main__":
    main()
