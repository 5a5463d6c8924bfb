"""GPU-bound training loops in pairs, each a baseline that syncs and its fix, for checking the
what-if replay's predicted saving against the fix measured without the profiler (issue 11).

Every pair trains on batches made on the host (the data pipeline: a few CPU tensor ops,
sized by ``host_passes`` so that the host's work per step is a set share of the GPU's) and
runs a bf16 model big enough that the GPU, not Python, bounds the step. The baseline syncs
where such code usually does; the fix does the same arithmetic without waiting. Each syncing
line carries a ``# sync: <what>`` marker that the recorder checks against
``torch.cuda.set_sync_debug_mode("warn")``.

``train(pair, variant, device, size, steps, on_step)`` runs ``steps`` steps and calls
``on_step()`` after each (``prof.step`` when profiled, a timer's mark when timed).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F
from torch import nn

PAIRS = (
    "item_logging",
    "dynamic_shapes",
    "pageable_copy",
    "readback_metrics",
    "explicit_synchronize",
    "transformer_logging",
    "copy_and_item",
)
VARIANTS = ("baseline", "fixed")
# Variants that fix one site of a pair's baseline and keep the others: the measured saving of
# one site's fix, against the saving the report predicts for that site. Each names the
# marker of the line it fixes.
PARTIALS = {
    "readback_metrics": {"fix_cpu": "cpu", "fix_tolist": "tolist"},
    "copy_and_item": {"fix_item": "item", "fix_copy": "h2d"},
}


@dataclass(frozen=True)
class PairSize:
    batch: int
    d_in: int
    width: int
    layers: int
    classes: int
    host_passes: int  # CPU passes over the batch per step: the data pipeline's work
    seq: int  # transformer_logging only
    d_model: int
    heads: int
    blocks: int
    vocab: int
    host_passes_transformer: int


SIZES = {
    "tiny": PairSize(64, 32, 64, 2, 8, 1, 16, 32, 2, 1, 64, 1),
    # 9 layers of 4096 x 4096 at a batch of 8192: about 7.4 TFLOP per step (forward and
    # backward), about 10 ms of tensor-core work on an H100; the transformer (16 sequences of
    # 1024 tokens, 8 blocks of 1024) about 13 TFLOP. host_passes are calibrated on the GPU.
    "gpu": PairSize(8192, 128, 4096, 8, 16, 0, 1024, 1024, 16, 8, 8192, 0),
}


def with_host_passes(size: PairSize, mlp: int, transformer: int) -> PairSize:
    return replace(size, host_passes=mlp, host_passes_transformer=transformer)


def _dtype(device: torch.device) -> torch.dtype:
    return torch.bfloat16 if device.type == "cuda" else torch.float32


def host_batch(
    generator: torch.Generator, size: PairSize, passes: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """The data pipeline: features made and normalised on the host, in pageable memory."""
    raw = torch.rand(size.batch, size.d_in, generator=generator)
    x = (raw - raw.mean(0)) / (raw.std(0) + 1e-6)
    for _ in range(passes):
        x = torch.tanh(x * 0.9 + 0.1)
    labels = torch.randint(0, size.classes, (size.batch,), generator=generator)
    return x, labels


def host_tokens(
    generator: torch.Generator, size: PairSize, passes: int
) -> tuple[torch.Tensor, torch.Tensor]:
    tokens = torch.randint(0, size.vocab, (size.batch // 512 or 1, size.seq), generator=generator)
    weights = torch.rand(tokens.shape, generator=generator)
    for _ in range(passes):
        weights = torch.tanh(weights * 0.9 + 0.1)
    tokens = torch.where(weights > 2.0, 0, tokens)  # never true: the pipeline's cleaning pass
    return tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()


def to_device(tensor: torch.Tensor, device: torch.device) -> torch.Tensor:
    """The fixed way: pinned memory, non-blocking (the caching host allocator reuses the
    pinned block only once the copy that read it has run)."""
    if device.type != "cuda":
        return tensor
    return tensor.pin_memory().to(device, non_blocking=True)


def mlp(device: torch.device, size: PairSize) -> tuple[nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    layers: list[nn.Module] = [nn.Linear(size.d_in, size.width)]
    for _ in range(size.layers):
        layers += [nn.GELU(), nn.Linear(size.width, size.width)]
    layers += [nn.GELU(), nn.Linear(size.width, size.classes)]
    model = nn.Sequential(*layers).to(device, _dtype(device))
    return model, torch.optim.SGD(model.parameters(), lr=1e-4)


def forward_loss(model: nn.Module, x: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(model(x.to(_dtype(x.device))).float(), labels)


def backward_step(optimizer: torch.optim.Optimizer, loss: torch.Tensor) -> None:
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()


# --- the pairs ---------------------------------------------------------------------------


def item_logging(variant, device, size, steps, on_step):
    model, optimizer = mlp(device, size)
    generator = torch.Generator().manual_seed(0)
    history = []
    for _ in range(steps):
        x, labels = host_batch(generator, size, size.host_passes)
        x, labels = to_device(x, device), to_device(labels, device)
        loss = forward_loss(model, x, labels)
        backward_step(optimizer, loss)
        if variant == "baseline":
            history.append(loss.item())  # sync: item
        else:
            history.append(loss.detach())
        on_step()
    return [float(v) for v in history]


def dynamic_shapes(variant, device, size, steps, on_step):
    model, optimizer = mlp(device, size)
    generator = torch.Generator().manual_seed(0)
    for _ in range(steps):
        x, labels = host_batch(generator, size, size.host_passes)
        x, labels = to_device(x, device), to_device(labels, device)
        logits = model(x.to(_dtype(device))).float()
        keep = labels != 0  # class 0 is "ignore"
        if variant == "baseline":
            picked = logits[keep]  # sync: mask
            kept = labels[keep]  # sync: mask
            seen = torch.unique(kept)  # sync: unique
            first = torch.nonzero(kept == seen[0]).squeeze(1)  # sync: nonzero
            loss = F.cross_entropy(picked, kept) + 0.0 * picked[first].sum()
        else:
            weight = keep.float()
            per_sample = F.cross_entropy(logits, labels, reduction="none")
            loss = (per_sample * weight).sum() / weight.sum().clamp(min=1.0)
            present = torch.zeros(size.classes, device=device).index_fill_(0, labels, 1.0)
            loss = loss + 0.0 * present.sum()
        backward_step(optimizer, loss)
        on_step()


def pageable_copy(variant, device, size, steps, on_step):
    model, optimizer = mlp(device, size)
    generator = torch.Generator().manual_seed(0)
    for _ in range(steps):
        x, labels = host_batch(generator, size, size.host_passes)
        if variant == "baseline":
            x = x.to(device)  # sync: h2d (pageable memory, blocking copy)
            labels = labels.to(device)  # sync: h2d
        else:
            x, labels = to_device(x, device), to_device(labels, device)
        loss = forward_loss(model, x, labels)
        backward_step(optimizer, loss)
        on_step()


def readback_metrics(variant, device, size, steps, on_step):
    model, optimizer = mlp(device, size)
    generator = torch.Generator().manual_seed(0)
    correct = torch.zeros((), device=device, dtype=torch.long)
    tops = []
    for _ in range(steps):
        x_host, labels_host = host_batch(generator, size, size.host_passes)
        x, labels = to_device(x_host, device), to_device(labels_host, device)
        logits = model(x.to(_dtype(device))).float()
        loss = F.cross_entropy(logits, labels)
        backward_step(optimizer, loss)
        if variant in ("baseline", "fix_tolist"):
            predicted = logits.argmax(1).cpu()  # sync: cpu
            correct += int((predicted == labels_host).sum())
        else:
            correct += (logits.argmax(1) == labels).sum()
        if variant in ("baseline", "fix_cpu"):
            tops.append(logits[:4].max(1).values.tolist())  # sync: tolist
        else:
            tops.append(logits[:4].max(1).values.detach())
        on_step()
    return int(correct)


def explicit_synchronize(variant, device, size, steps, on_step):
    model, optimizer = mlp(device, size)
    generator = torch.Generator().manual_seed(0)
    timings = []
    for _ in range(steps):
        x, labels = host_batch(generator, size, size.host_passes)
        x, labels = to_device(x, device), to_device(labels, device)
        loss = forward_loss(model, x, labels)
        backward_step(optimizer, loss)
        if device.type == "cuda":
            if variant == "baseline":
                torch.cuda.synchronize()  # sync: synchronize
                timings.append(time.perf_counter())
            else:
                event = torch.cuda.Event(enable_timing=True)
                event.record()
                timings.append(event)
        on_step()
    return timings


class TinyLM(nn.Module):
    def __init__(self, size: PairSize) -> None:
        super().__init__()
        self.embed = nn.Embedding(size.vocab, size.d_model)
        layer = nn.TransformerEncoderLayer(
            size.d_model, size.heads, 4 * size.d_model, dropout=0.0, batch_first=True
        )
        self.blocks = nn.TransformerEncoder(layer, size.blocks, enable_nested_tensor=False)
        self.head = nn.Linear(size.d_model, size.vocab)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.head(self.blocks(self.embed(tokens)))


def transformer_logging(variant, device, size, steps, on_step):
    torch.manual_seed(0)
    model = TinyLM(size).to(device, _dtype(device))
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-4)
    generator = torch.Generator().manual_seed(0)
    log = []
    for _ in range(steps):
        tokens, targets = host_tokens(generator, size, size.host_passes_transformer)
        tokens, targets = to_device(tokens, device), to_device(targets, device)
        logits = model(tokens).float()
        loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten())
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        grad_norm = nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        if variant == "baseline":
            log.append((loss.item(), grad_norm.item()))  # sync: item
        else:
            log.append(torch.stack([loss.detach(), grad_norm.detach().float()]))
        on_step()
    return log


def copy_and_item(variant, device, size, steps, on_step):
    """The classic loop: a batch copied from pageable memory, the loss read every step."""
    model, optimizer = mlp(device, size)
    generator = torch.Generator().manual_seed(0)
    history = []
    for _ in range(steps):
        x, labels = host_batch(generator, size, size.host_passes)
        if variant in ("baseline", "fix_item"):
            x, labels = x.to(device), labels.to(device)  # sync: h2d
        else:
            x, labels = to_device(x, device), to_device(labels, device)
        loss = forward_loss(model, x, labels)
        backward_step(optimizer, loss)
        if variant in ("baseline", "fix_copy"):
            history.append(loss.item())  # sync: item
        else:
            history.append(loss.detach())
        on_step()
    return [float(v) for v in history]


TRAIN: dict[str, Callable] = {
    "item_logging": item_logging,
    "dynamic_shapes": dynamic_shapes,
    "pageable_copy": pageable_copy,
    "readback_metrics": readback_metrics,
    "explicit_synchronize": explicit_synchronize,
    "transformer_logging": transformer_logging,
    "copy_and_item": copy_and_item,
}


def train(
    pair: str,
    variant: str,
    device: torch.device,
    size: PairSize,
    steps: int,
    on_step: Callable[[], None],
):
    known = VARIANTS + tuple(PARTIALS.get(pair, ())) + EXTRAS.get(pair, ())
    if variant not in known:
        raise ValueError(f"{pair}: variant {variant!r}: expected one of {known}")
    return TRAIN[pair](variant, device, size, steps, on_step)


# --- pairs added later (kept below, so that the lines the recorded traces name stay) --------


def grad_scaler(variant, device, size, steps, on_step):
    """Mixed precision with a GradScaler. ``scaler.step`` reads whether a gradient overflowed
    (``found_inf.item()``) before it steps an optimizer without a fused step; a fused
    optimizer (``fused=True``) takes the flag on the device and skips the update there.
    ``baseline``: fused AdamW with GradScaler's fused path turned off, so that the pair
    measures the read alone; ``fixed``: fused AdamW as built; ``foreach``: the default AdamW
    (the read and the slower unfused kernels, what most code has)."""
    torch.manual_seed(0)
    layers: list[nn.Module] = [nn.Linear(size.d_in, size.width)]
    for _ in range(size.layers):
        layers += [nn.GELU(), nn.Linear(size.width, size.width)]
    layers += [nn.GELU(), nn.Linear(size.width, size.classes)]
    model = nn.Sequential(*layers).to(device)  # float32 weights, as AMP keeps them
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=variant != "foreach")
    if variant == "baseline":
        optimizer._step_supports_amp_scaling = False
    scaler = torch.amp.GradScaler(device.type)
    amp_dtype = torch.float16 if device.type == "cuda" else torch.bfloat16
    generator = torch.Generator().manual_seed(0)
    for _ in range(steps):
        x, labels = host_batch(generator, size, size.host_passes)
        x, labels = to_device(x, device), to_device(labels, device)
        with torch.autocast(device.type, dtype=amp_dtype):
            loss = F.cross_entropy(model(x).float(), labels)
        optimizer.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        scaler.step(optimizer)  # sync: grad_scaler
        scaler.update()
        on_step()


def policy_sampling(variant, device, size, steps, on_step):
    """A policy-gradient step: the MLP gives each sample's Normal, an action is drawn and its
    log-probability weighted. ``torch.distributions`` checks the parameters when the Normal
    is built and the action in ``log_prob`` on the host, and ``sample`` (``torch.normal``)
    checks the std: read-backs in the middle of the step. The fix turns validation off and
    draws with ``rsample().detach()``."""
    model, optimizer = mlp(device, size)
    generator = torch.Generator().manual_seed(0)
    fixed = variant == "fixed"
    for _ in range(steps):
        x, labels = host_batch(generator, size, size.host_passes)
        x, labels = to_device(x, device), to_device(labels, device)
        out = model(x.to(_dtype(device))).float()
        mean, std = out[:, :4], out[:, 4:8].clamp(-5, 2).exp()
        policy = torch.distributions.Normal(mean, std, validate_args=not fixed)  # sync: validate
        action = policy.rsample().detach() if fixed else policy.sample()  # sync: normal
        advantage = (labels.float() - 7.5).unsqueeze(1)
        loss = -(policy.log_prob(action) * advantage).mean()  # sync: validate
        backward_step(optimizer, loss)
        on_step()


PAIRS = (*PAIRS, "grad_scaler", "policy_sampling")
TRAIN["grad_scaler"] = grad_scaler
TRAIN["policy_sampling"] = policy_sampling
# Variants beside the pair's baseline and fix that change more than its syncs (recorded and
# timed, not part of the pair's predicted-vs-measured figure).
EXTRAS: dict[str, tuple[str, ...]] = {"grad_scaler": ("foreach",)}


def linalg_checks(variant, device, size, steps, on_step):
    """A log-determinant regulariser on the logits' covariance, factored with Cholesky each
    step (as Gaussian-likelihood losses, whitening and second-order preconditioners do).
    ``torch.linalg.cholesky`` reads the factorization's error code on the host after the
    forward; the fix calls ``cholesky_ex``, whose code stays on the device, unread (the
    covariance is regularised to be positive-definite)."""
    model, optimizer = mlp(device, size)
    generator = torch.Generator().manual_seed(0)
    for _ in range(steps):
        x, labels = host_batch(generator, size, size.host_passes)
        x, labels = to_device(x, device), to_device(labels, device)
        out = model(x.to(_dtype(device))).float()
        centred = out - out.mean(0)
        eye = torch.eye(out.shape[1], device=device)
        cov = centred.T @ centred / out.shape[0] + 1e-3 * eye
        if variant == "fixed":
            chol = torch.linalg.cholesky_ex(cov).L
        else:
            chol = torch.linalg.cholesky(cov)  # sync: linalg
        loss = F.cross_entropy(out, labels) + 1e-3 * chol.diagonal().log().sum()
        backward_step(optimizer, loss)
        on_step()


PAIRS = (*PAIRS, "linalg_checks")
TRAIN["linalg_checks"] = linalg_checks
