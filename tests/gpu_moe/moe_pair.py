"""Mixture-of-experts layers on a GPU: where their expert dispatch waits for the GPU, what
the report says of it, and what the advised ways save, measured without the profiler.

Two probes, each a GPU-bound training step in several ways, rounds alternated:

- ``custom``: a stack of MoE layers written by hand, in the three ways such code is written:
  ``loop`` selects each expert's tokens with ``torch.where(expert_mask[e])`` (Mixtral's
  code in transformers 4.x, copied into many code bases: one read per expert per layer);
  ``counts`` sorts the tokens by expert once and splits them with one ``.tolist()`` of the
  counts per layer; ``grouped`` runs every expert at once with
  ``torch.nn.functional.grouped_mm`` and offsets kept on the device (no read). The same
  weights in each: the outputs and gradients are compared.
- ``transformers``: a small Mixtral of Hugging Face Transformers (random weights, no
  download) trained with ``experts_implementation="eager"`` (the expert loop) and
  ``"grouped_mm"`` (its default where the kernel is available).

    python bench/moe_pair.py --out DIR [--device cpu] [--rounds 5] [--steps 10] [--probe NAME]

Writes per probe and way ``DIR/moe_<probe>_<way>.pt.trace.json.gz`` (with stacks) and
``DIR/moe_pair.json``: versions, per-round mean step times (ms, unprofiled, between two
device synchronizations), the lines ``torch.cuda.set_sync_debug_mode("warn")`` warned at
(``file:line`` of the innermost frame in this file, and of the innermost frame of all) and
how far each way's outputs and gradients are from the first way's. Each sync site of this
file is marked ``# SYNC: name``, each line of a fix ``# FIX: name``.
"""

from __future__ import annotations

import argparse
import copy
import json
import subprocess
import time
import traceback
import warnings
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

HERE = Path(__file__).name


class CustomMoE(nn.Module):
    """Top-k routed experts with gated MLPs, their weights stacked (as grouped_mm takes them
    and transformers 5 stores them)."""

    def __init__(self, dim: int, hidden: int, experts: int, top_k: int, way: str) -> None:
        super().__init__()
        self.experts, self.top_k, self.way = experts, top_k, way
        self.router = nn.Linear(dim, experts, bias=False)
        self.w_up = nn.Parameter(torch.randn(experts, dim, 2 * hidden) * dim**-0.5)
        self.w_down = nn.Parameter(torch.randn(experts, hidden, dim) * hidden**-0.5)
        # ``loop``: the tokens each expert got, per call; ``loop_static`` takes them as known.
        self.seen_counts: list[int] = []
        self.static_counts: list[int] | None = None

    def route(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        probs = self.router(x).softmax(-1, dtype=torch.float)
        weights, chosen = probs.topk(self.top_k, dim=-1)
        return (weights / weights.sum(-1, keepdim=True)).to(x.dtype), chosen

    def expert(self, e: int, rows: torch.Tensor) -> torch.Tensor:
        gate, up = (rows @ self.w_up[e]).chunk(2, dim=-1)
        return (F.silu(gate) * up) @ self.w_down[e]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weights, chosen = self.route(x)
        if self.way == "loop":
            return self.forward_loop(x, weights, chosen)
        if self.way == "counts":
            return self.forward_counts(x, weights, chosen)
        return self.forward_grouped(x, weights, chosen)

    def forward_loop(self, x, weights, chosen) -> torch.Tensor:  # noqa: ANN001
        out = torch.zeros_like(x)
        expert_mask = F.one_hot(chosen, num_classes=self.experts).permute(2, 1, 0)
        for e in range(self.experts):
            if self.static_counts is None:
                slot, token = torch.where(expert_mask[e])  # SYNC: moe_loop
                self.seen_counts.append(token.shape[0])
            else:  # the oracle: the same kernels, each expert's count known beforehand
                size = self.static_counts[e]
                slot, token = torch.nonzero_static(expert_mask[e], size=size).unbind(1)
            y = self.expert(e, x[token]) * weights[token, slot, None]
            out.index_add_(0, token, y)
        return out

    def _sorted(self, chosen: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        flat = chosen.flatten()
        order = flat.argsort(stable=True)  # FIX: moe_loop
        counts = torch.zeros(self.experts, dtype=torch.long, device=flat.device)  # FIX: moe_loop
        counts.scatter_add_(0, flat, torch.ones_like(flat))  # FIX: moe_loop
        return order, order // self.top_k, counts

    def forward_counts(self, x, weights, chosen) -> torch.Tensor:  # noqa: ANN001
        order, token, counts = self._sorted(chosen)
        sizes = counts.tolist()  # SYNC: moe_counts
        rows = x[token].split(sizes)  # FIX: moe_loop
        y = torch.cat([self.expert(e, r) for e, r in enumerate(rows)])  # FIX: moe_loop
        y = y * weights.flatten()[order, None]  # FIX: moe_loop
        return torch.zeros_like(x).index_add_(0, token, y)  # FIX: moe_loop

    def forward_grouped(self, x, weights, chosen) -> torch.Tensor:  # noqa: ANN001
        order, token, counts = self._sorted(chosen)
        offs = counts.cumsum(0, dtype=torch.int32)  # FIX: moe_counts
        gate, up = F.grouped_mm(x[token], self.w_up, offs=offs).chunk(2, dim=-1)  # FIX: moe_counts
        y = F.grouped_mm(F.silu(gate) * up, self.w_down, offs=offs)  # FIX: moe_counts
        y = y * weights.flatten()[order, None]  # FIX: moe_counts
        return torch.zeros_like(x).index_add_(0, token, y)  # FIX: moe_counts


class CustomStack(nn.Module):
    def __init__(self, layers: int, dim: int, hidden: int, experts: int, top_k: int, way: str):
        super().__init__()
        self.norms = nn.ModuleList(nn.RMSNorm(dim) for _ in range(layers))
        self.moes = nn.ModuleList(
            CustomMoE(dim, hidden, experts, top_k, way) for _ in range(layers)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for norm, moe in zip(self.norms, self.moes, strict=True):
            x = x + moe(norm(x))
        return x


def custom_probe(device: torch.device, small: bool) -> dict[str, Callable[[], None]]:
    dim, hidden, experts, top_k, layers, tokens = (
        (64, 64, 8, 2, 2, 256) if small else (2048, 2048, 8, 2, 4, 16384)
    )
    dtype = torch.float32 if device.type == "cpu" else torch.bfloat16
    torch.manual_seed(0)
    reference = CustomStack(layers, dim, hidden, experts, top_k, "loop").to(device, dtype)
    x = torch.randn(tokens, dim, device=device, dtype=dtype)
    with torch.no_grad():
        reference(x)  # each layer's tokens per expert, for the oracle
    steps = {}
    for way in ("loop", "loop_static", "counts", "grouped"):
        model = CustomStack(layers, dim, hidden, experts, top_k, way).to(device, dtype)
        model.load_state_dict(reference.state_dict())
        if way == "loop_static":
            for moe, known in zip(model.moes, reference.moes, strict=True):
                moe.way, moe.static_counts = "loop", known.seen_counts[:experts]
        # No learning: the routing, and so each expert's count, stays the same every step.
        opt = torch.optim.SGD(model.parameters(), lr=0.0)

        def step(model: nn.Module = model, opt: torch.optim.Optimizer = opt) -> None:
            loss = model(x).float().square().mean()
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()

        step.model = model  # type: ignore[attr-defined]
        step.forward = lambda model=model: model(x)  # type: ignore[attr-defined]
        steps[way] = step
    return steps


def transformers_probe(device: torch.device, small: bool) -> dict[str, Callable[[], None]]:
    from transformers import MixtralConfig, MixtralForCausalLM

    config = MixtralConfig(
        vocab_size=1024 if small else 32000,
        hidden_size=64 if small else 1024,
        intermediate_size=64 if small else 2048,
        num_hidden_layers=2 if small else 4,
        num_attention_heads=4 if small else 16,
        num_key_value_heads=2 if small else 8,
        num_local_experts=8,
        num_experts_per_tok=2,
        max_position_embeddings=4096,
    )
    batch, length = (2, 64) if small else (4, 2048)
    dtype = torch.float32 if device.type == "cpu" else torch.bfloat16
    torch.manual_seed(0)
    ids = torch.randint(0, config.vocab_size, (batch, length), device=device)
    steps = {}
    state = None
    for way in ("eager", "grouped_mm"):
        torch.manual_seed(0)
        # A config of its own: the implementation is set on the model's config.
        model = MixtralForCausalLM(copy.deepcopy(config)).to(device, dtype)
        if state is None:
            state = model.state_dict()
        model.load_state_dict(state)
        model.set_experts_implementation(way)
        model.train()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=device.type == "cuda")

        losses: list[torch.Tensor] = []

        def step(
            model: nn.Module = model, opt: torch.optim.Optimizer = opt, losses: list = losses
        ) -> None:
            out = model(input_ids=ids, labels=ids)  # SYNC: hf_eager
            opt.zero_grad(set_to_none=True)
            out.loss.backward()
            opt.step()
            if len(losses) < 8:  # the first steps' losses, read after the timing
                losses.append(out.loss.detach())

        step.model = model  # type: ignore[attr-defined]
        step.forward = lambda model=model: model(input_ids=ids).logits  # type: ignore[attr-defined]
        step.way = model.get_experts_implementation()[""]  # type: ignore[attr-defined]
        step.losses = losses  # type: ignore[attr-defined]
        steps[way] = step
    return steps


PROBES = {"custom": custom_probe, "transformers": transformers_probe}


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(step: Callable[[], None], steps: int, device: torch.device) -> float:
    synchronize(device)
    start = time.perf_counter()
    for _ in range(steps):
        step()
    synchronize(device)
    return (time.perf_counter() - start) / steps * 1000


def differences(steps: dict[str, Callable[[], None]], device: torch.device) -> dict[str, dict]:
    """Each way's output and gradients (of the output's mean square) against the first
    way's, from the same weights (before any step), as the largest difference over the
    largest value."""
    found: dict[str, tuple[torch.Tensor, list[torch.Tensor]]] = {}
    for way, step in steps.items():
        model = step.model  # type: ignore[attr-defined]
        model.zero_grad(set_to_none=True)
        out = step.forward()  # type: ignore[attr-defined]
        out.float().square().mean().backward()
        grads = [p.grad.float().clone() for p in model.parameters() if p.grad is not None]
        found[way] = (out.detach().float(), grads)
        model.zero_grad(set_to_none=True)
    first = next(iter(found.values()))

    def relative(a: torch.Tensor, b: torch.Tensor) -> float:
        return float((a - b).abs().max() / b.abs().max().clamp_min(1e-30))

    return {
        way: {
            "output": relative(out, first[0]),
            "gradients": max(relative(g, h) for g, h in zip(grads, first[1], strict=True)),
        }
        for way, (out, grads) in found.items()
    }


def warned_lines(step: Callable[[], None], device: torch.device) -> list[str]:
    if device.type != "cuda":
        return []
    warned: list[str] = []

    def note(message, category, filename, lineno, file=None, line=None) -> None:  # noqa: ANN001
        stack = traceback.extract_stack()[:-1]
        ours = [f for f in stack if Path(f.filename).name == HERE]
        inner = [f for f in stack if "warnings" not in f.filename]
        where = f"{HERE}:{ours[-1].lineno}" if ours else "?"
        deepest = f"{Path(inner[-1].filename).name}:{inner[-1].lineno}" if inner else "?"
        warned.append(f"{where} {deepest} {str(message)[:80]}")

    torch.cuda.set_sync_debug_mode("warn")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("always")
            warnings.showwarning = note
            step()
            synchronize(device)
    finally:
        torch.cuda.set_sync_debug_mode(0)
    return [f"{line} x{n}" for line, n in Counter(warned).items()]


def record(path: Path, step: Callable[[], None], device: torch.device) -> None:
    from torch.profiler import ProfilerActivity, profile, schedule

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with profile(
        activities=activities,
        schedule=schedule(wait=1, warmup=1, active=3, repeat=1),
        on_trace_ready=lambda prof: prof.export_chrome_trace(str(path)),
        with_stack=True,
    ) as prof:
        for _ in range(5):
            step()
            prof.step()
    synchronize(device)
    subprocess.run(["gzip", "-f", str(path)], check=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--probe", choices=sorted(PROBES), action="append")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    device = torch.device(args.device)
    small = device.type == "cpu"
    info: dict = {
        "torch": torch.__version__,
        "gpu": torch.cuda.get_device_name() if device.type == "cuda" else "none",
        "probes": {},
    }
    for name in args.probe or PROBES:
        try:
            steps = PROBES[name](device, small)
        except ImportError as exc:
            info["probes"][name] = {"skipped": str(exc)}
            continue
        if name == "transformers":
            import transformers

            info["transformers"] = transformers.__version__
        found: dict = {"ways": {}, "step_ms": {way: [] for way in steps}}
        found["differences"] = differences(steps, device)
        for step in steps.values():
            timed(step, 3, device)  # warm: kernels, cuBLAS, the allocator's pool
        for _ in range(args.rounds):
            for way, step in steps.items():
                found["step_ms"][way].append(round(timed(step, args.steps, device), 3))
        for way, step in steps.items():
            found["ways"][way] = {
                "implementation": getattr(step, "way", way),
                "warned": warned_lines(step, device),
            }
            if hasattr(step, "losses"):
                found["ways"][way]["first_losses"] = [round(float(v), 5) for v in step.losses]
            record(args.out / f"moe_{name}_{way}.pt.trace.json", step, device)
        info["probes"][name] = found
        print(name, json.dumps(found), flush=True)
    (args.out / "moe_pair.json").write_text(json.dumps(info, indent=1) + "\n")


if __name__ == "__main__":
    main()
