"""Record real CUDA traces of the profiler settings and program shapes users have, for the
reader's fast path and the report's lines on them (issue 14: every trace shape on the fast
path; the synthetic shapes of ``tests/trace_shapes.py`` are checked against these).

    python bench/record_real_shapes.py --out DIR [--steps 3] [--only SHAPE ...]

Shapes (each profiled after one wait and one warm-up step, then ``--steps`` steps):

- ``resnet50_all_options``: torchvision's ResNet-50 (batch 64, 224 x 224, bf16 autocast,
  channels_last, SGD) with every profiler option a user turns on: ``record_shapes``,
  ``with_stack``, ``profile_memory``, ``with_flops`` and CUPTI's sync records; the loss read
  with ``loss.item()`` each step.
- ``compiled``: an MLP under ``torch.compile`` (Inductor's Triton kernels, launched through
  the driver API), the loss read each step.
- ``cudagraphs``: the same MLP under ``torch.compile(mode="reduce-overhead")``: the forward
  and backward replayed as CUDA graphs.

and, as ``<name>_baseline`` / ``<name>_fixed`` pairs, syncs that torch makes inside a library
call the user wrote (``LIBRARY``; ``--only`` picks them, all run by default): a
``torch.distributions.Normal`` validated and sampled, ``pack_padded_sequence`` on unsorted
lengths, ``clip_grad_norm_(error_if_nonfinite=True)``, ``nn.TransformerEncoder`` with a
padding mask at inference (nested tensors) and with a causal mask but no ``is_causal``, a Hugging
Face GPT-2 given an attention mask of ones. Also ``compiled_graph_break`` (``loss.item()``
inside a compiled function) and ``hf_gpt2`` (the GPT-2 on padded batches).

Each shape also runs its profiled steps under ``torch.cuda.set_sync_debug_mode("warn")``; the
innermost frame of each warning in this file gives the line torch says syncs. Writes
``DIR/<shape>.pt.trace.json.gz`` (frame paths relative to the repository) and
``DIR/shapes.json`` (versions, warned lines, marked lines, trace sizes). On a CPU (``--device
cpu``) the script checks itself; the traces then hold no device work.
"""

from __future__ import annotations

import argparse
import gzip
import json
import platform
import re
import sys
import tempfile
import time
import traceback
import warnings
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

THIS_FILE = Path(__file__).resolve()
BENCH = THIS_FILE.parent
WAIT, WARMUP = 1, 1


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def resnet50_all_options(device: torch.device, steps: int, on_step: Callable[[], None]) -> None:
    from torchvision.models import resnet50

    torch.manual_seed(0)
    batch, side = (64, 224) if device.type == "cuda" else (2, 64)
    model = resnet50().to(device, memory_format=torch.channels_last)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    images = torch.randn(batch, 3, side, side, device=device).to(memory_format=torch.channels_last)
    labels = torch.randint(0, 1000, (batch,), device=device)
    amp = torch.bfloat16
    for _ in range(steps):
        with torch.autocast(device.type, dtype=amp):
            loss = F.cross_entropy(model(images), labels)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        print_every = loss.item()  # sync: item
        del print_every
        on_step()


def _mlp(
    device: torch.device,
) -> tuple[nn.Module, torch.optim.Optimizer, torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    width, batch = (2048, 4096) if device.type == "cuda" else (64, 32)
    model = nn.Sequential(
        nn.Linear(width, width), nn.GELU(), nn.Linear(width, width), nn.GELU(), nn.Linear(width, 16)
    ).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-4)
    x = torch.randn(batch, width, device=device)
    labels = torch.randint(0, 16, (batch,), device=device)
    return model, optimizer, x, labels


def _compiled_steps(
    device: torch.device, steps: int, on_step: Callable[[], None], mode: str | None
) -> None:
    model, optimizer, x, labels = _mlp(device)
    compiled = torch.compile(model, mode=mode)
    for _ in range(steps):
        loss = F.cross_entropy(compiled(x), labels)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        logged = loss.item()  # sync: item
        del logged
        on_step()


def compiled(device: torch.device, steps: int, on_step: Callable[[], None]) -> None:
    _compiled_steps(device, steps, on_step, None)


def cudagraphs(device: torch.device, steps: int, on_step: Callable[[], None]) -> None:
    _compiled_steps(device, steps, on_step, "reduce-overhead" if device.type == "cuda" else None)


# --- syncs inside library calls: each a baseline and its fix ---------------------------------


def _small_mlp(device: torch.device) -> tuple[nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(256, 256), nn.GELU(), nn.Linear(256, 8)).to(device)
    return model, torch.optim.SGD(model.parameters(), lr=1e-3)


def distributions(fixed: bool, device: torch.device, steps: int, on_step) -> None:
    """A policy's Normal, built each step: argument validation checks the parameters and
    each sample on the host (``torch.distributions`` validates by default), and ``sample``
    runs ``torch.normal(loc, scale)``, which checks ``scale >= 0`` on the host. The fix
    turns validation off and samples as ``loc + scale * noise`` (``rsample``)."""
    model, optimizer = _small_mlp(device)
    obs = torch.randn(512, 256, device=device)
    for _ in range(steps):
        out = model(obs)
        mean, std = out[:, :4], out[:, 4:].clamp(-5, 2).exp()
        policy = torch.distributions.Normal(mean, std, validate_args=not fixed)  # sync: validate
        action = policy.rsample().detach() if fixed else policy.sample()  # sync: normal
        loss = -policy.log_prob(action).mean()  # sync: validate
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        on_step()


def pack_padded(fixed: bool, device: torch.device, steps: int, on_step) -> None:
    """A GRU over padded sequences. ``pack_padded_sequence(..., enforce_sorted=False)`` sorts
    the lengths on the CPU and copies the order to the device each call; the fix sorts the
    batch by length once, where it is made, and passes ``enforce_sorted=True``."""
    torch.manual_seed(0)
    rnn = nn.GRU(64, 128, batch_first=True).to(device)
    optimizer = torch.optim.SGD(rnn.parameters(), lr=1e-3)
    lengths = torch.randint(10, 51, (64,))
    x = torch.randn(64, 50, 64, device=device)
    if fixed:
        lengths, order = lengths.sort(descending=True)
        x = x[order.to(device)]
    pack = nn.utils.rnn.pack_padded_sequence
    for _ in range(steps):
        packed = pack(x, lengths, batch_first=True, enforce_sorted=fixed)  # sync: sort
        _, hidden = rnn(packed)
        loss = hidden.pow(2).mean()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        on_step()


def clip_nonfinite(fixed: bool, device: torch.device, steps: int, on_step) -> None:
    """``clip_grad_norm_(..., error_if_nonfinite=True)`` checks the norm on the host."""
    model, optimizer = _small_mlp(device)
    x = torch.randn(512, 256, device=device)
    clip = nn.utils.clip_grad_norm_
    for _ in range(steps):
        loss = model(x).pow(2).mean()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        clip(model.parameters(), 1.0, error_if_nonfinite=not fixed)  # sync: nonfinite
        optimizer.step()
        on_step()


def encoder_padding(fixed: bool, device: torch.device, steps: int, on_step) -> None:
    """Inference through ``nn.TransformerEncoder`` with a padding mask: its fast path turns
    the batch into a nested tensor, whose sizes it reads from the mask on the host."""
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(128, 4, 256, batch_first=True)
    encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=not fixed).to(device).eval()
    x = torch.randn(32, 40, 128, device=device)
    pad = torch.arange(40, device=device)[None, :] >= torch.randint(5, 41, (32, 1), device=device)
    with torch.inference_mode():
        for _ in range(steps):
            out = encoder(x, src_key_padding_mask=pad)  # sync: nested
            del out
            on_step()


def causal_mask(fixed: bool, device: torch.device, steps: int, on_step) -> None:
    """Training through ``nn.TransformerEncoder`` with a causal mask: given a mask and no
    ``is_causal``, it compares the mask with a causal one on the host to find out."""
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(128, 4, 256, batch_first=True)
    encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False).to(device)
    optimizer = torch.optim.SGD(encoder.parameters(), lr=1e-3)
    x = torch.randn(32, 40, 128, device=device)
    causal = nn.Transformer.generate_square_subsequent_mask(40, device=device)
    for _ in range(steps):
        out = encoder(x, mask=causal, is_causal=True if fixed else None)  # sync: causal
        loss = out.pow(2).mean()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        on_step()


def compiled_graph_break(device: torch.device, steps: int, on_step: Callable[[], None]) -> None:
    """``loss.item()`` inside a compiled function: a graph break, the rest of the function
    run by torch.compile's resume function."""
    model, optimizer, x, labels = _mlp(device)

    @torch.compile
    def train_step() -> tuple[torch.Tensor, float]:
        loss = F.cross_entropy(model(x), labels)
        logged = loss.item()  # sync: item
        return loss * 1.0, logged

    for _ in range(steps):
        loss, _logged = train_step()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        on_step()


def hf_gpt2(device: torch.device, steps: int, on_step: Callable[[], None]) -> None:
    """A Hugging Face GPT-2 (built from a config) trained on padded batches: whatever its
    own code reads back is placed at the model's call."""
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    config = GPT2Config(n_layer=2, n_embd=256, n_head=4, vocab_size=8192, n_positions=256)
    model = GPT2LMHeadModel(config).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    ids = torch.randint(0, 8192, (16, 128), device=device)
    mask = torch.ones_like(ids)
    mask[:, 100:] = 0
    for _ in range(steps):
        out = model(ids, attention_mask=mask, labels=ids)  # sync: model
        out.loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        on_step()


def hf_attention_mask(fixed: bool, device: torch.device, steps: int, on_step) -> None:
    """A Hugging Face GPT-2 on batches without padding, given the attention mask of ones a
    tokenizer returns: Transformers checks on the host whether it masks anything, before
    SDPA's causal kernel. The fix passes no mask."""
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    config = GPT2Config(n_layer=2, n_embd=256, n_head=4, vocab_size=8192, n_positions=256)
    model = GPT2LMHeadModel(config).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    ids = torch.randint(0, 8192, (16, 128), device=device)
    mask = None if fixed else torch.ones_like(ids)
    for _ in range(steps):
        out = model(ids, attention_mask=mask, labels=ids)  # sync: hf_mask
        out.loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        on_step()


LIBRARY = {
    "distributions": distributions,
    "pack_padded": pack_padded,
    "clip_nonfinite": clip_nonfinite,
    "encoder_padding": encoder_padding,
    "causal_mask": causal_mask,
    "hf_attention_mask": hf_attention_mask,
}


def _variant(run, fixed: bool):
    return lambda device, steps, on_step: run(fixed, device, steps, on_step)


RUN = {
    "resnet50_all_options": resnet50_all_options,
    "compiled": compiled,
    "cudagraphs": cudagraphs,
    "compiled_graph_break": compiled_graph_break,
    "hf_gpt2": hf_gpt2,
    **{
        f"{name}_{variant}": _variant(run, variant == "fixed")
        for name, run in LIBRARY.items()
        for variant in ("baseline", "fixed")
    },
}


def markers() -> dict[int, str]:
    found = {}
    for number, text in enumerate(THIS_FILE.read_text(encoding="utf-8").splitlines(), 1):
        match = re.search(r"#\s*sync:\s*(\w+)", text)
        if match:
            found[number] = match.group(1)
    return found


def portable(text: str) -> str:
    local = json.dumps(str(BENCH) + "/")[1:-1]
    return text.replace(local, "bench/")


def profile(shape: str, device: torch.device, steps: int, out: Path) -> Path:
    activities = [torch.profiler.ProfilerActivity.CPU]
    options = {}
    if device.type == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
        options["experimental_config"] = torch._C._profiler._ExperimentalConfig(
            enable_cuda_sync_events=True
        )
    all_options = shape == "resnet50_all_options"
    with tempfile.TemporaryDirectory(prefix="real-shape-") as run_dir:
        with torch.profiler.profile(
            activities=activities,
            schedule=torch.profiler.schedule(wait=WAIT, warmup=WARMUP, active=steps, repeat=1),
            on_trace_ready=torch.profiler.tensorboard_trace_handler(
                run_dir, worker_name=shape, use_gzip=True
            ),
            record_shapes=True,
            with_stack=True,
            profile_memory=all_options,
            with_flops=all_options,
            **options,
        ) as profiler:
            RUN[shape](device, WAIT + WARMUP + steps, profiler.step)
        _sync(device)
        traces = sorted(Path(run_dir).glob("*.pt.trace.json.gz"))
        if len(traces) != 1:
            raise RuntimeError(f"{shape}: expected one trace, got {traces}")
        text = gzip.decompress(traces[0].read_bytes()).decode("utf-8")
    target = out / f"{shape}.pt.trace.json.gz"
    target.write_bytes(gzip.compress(portable(text).encode("utf-8"), 9))
    return target


def warned_lines(shape: str, device: torch.device, steps: int) -> dict[str, int]:
    """Lines of this file torch's sync detector warns at in the steps the profiler records."""
    counts: Counter = Counter()
    done = 0

    def on_step() -> None:
        nonlocal done
        done += 1

    def record(message, category, filename, lineno, file=None, line=None) -> None:
        if not WAIT + WARMUP <= done < WAIT + WARMUP + steps:
            return
        frames = [
            f for f in traceback.extract_stack()[:-1] if Path(f.filename).resolve() == THIS_FILE
        ]
        counts[str(frames[-1].lineno) if frames else "elsewhere"] += 1

    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.showwarning = record
        torch.cuda.set_sync_debug_mode("warn")
        try:
            RUN[shape](device, WAIT + WARMUP + steps, on_step)
        finally:
            torch.cuda.set_sync_debug_mode(0)
    _sync(device)
    return dict(counts)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--steps", type=int, default=3, help="profiled (active) steps")
    parser.add_argument("--only", nargs="*", choices=tuple(RUN), default=None)
    args = parser.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        print("record_real_shapes: no CUDA device; --device cpu checks the script", file=sys.stderr)
        return 2
    device = torch.device(args.device)
    args.out.mkdir(parents=True, exist_ok=True)
    info: dict = {
        "versions": {
            "torch": torch.__version__,
            "cuda": torch.version.cuda,
            "gpu": torch.cuda.get_device_name(0) if device.type == "cuda" else None,
            "python": platform.python_version(),
            "recorded": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        },
        "markers": markers(),
        "steps": args.steps,
        "shapes": {},
    }
    for shape in args.only or tuple(RUN):
        row: dict = {}
        started = time.perf_counter()
        try:
            trace = profile(shape, device, args.steps, args.out)
            row["trace"] = trace.name
            row["gz_bytes"] = trace.stat().st_size
            row["json_bytes"] = len(gzip.decompress(trace.read_bytes()))
            row["profile_s"] = round(time.perf_counter() - started, 1)
            if device.type == "cuda":
                row["warned"] = warned_lines(shape, device, args.steps)
        except Exception as error:  # one shape failing must not lose the others
            row["error"] = f"{type(error).__name__}: {error}"
            traceback.print_exc()
        info["shapes"][shape] = row
        (args.out / "shapes.json").write_text(json.dumps(info, indent=1) + "\n", encoding="utf-8")
        print(shape, json.dumps(row), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
