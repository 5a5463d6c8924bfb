"""A concrete fix per finding kind, refined per operator where the fix differs."""

from __future__ import annotations

from typing import Any

from tb_syncfinder import models

_WAIT_AND_IDLE = "the host wait and the GPU idle time after it"

_BY_KIND: dict[str, dict[str, str]] = {
    models.SCALAR_READBACK: {
        "title": "Keep the value on the device; read it every N steps",
        "text": (
            "`.item()`, `float(t)`, `.tolist()`, `print(t)` and `if t:` copy a GPU value to "
            "the host and wait for every queued kernel first. Accumulate on the device and "
            "read the value only when you log (e.g. every 100 steps)."
        ),
        "before": (
            "for step, (x, y) in enumerate(loader):\n"
            "    loss = criterion(model(x), y)\n"
            "    loss.backward(); opt.step()\n"
            "    total += loss.item()          # waits for the GPU every step\n"
        ),
        "after": (
            "total = torch.zeros((), device=device)\n"
            "for step, (x, y) in enumerate(loader):\n"
            "    loss = criterion(model(x), y)\n"
            "    loss.backward(); opt.step()\n"
            "    total += loss.detach()        # stays on the GPU\n"
            "    if step % 100 == 0:\n"
            "        print(total.item() / (step + 1))  # one sync per 100 steps\n"
        ),
    },
    models.DYNAMIC_SHAPE: {
        "title": "Avoid data-dependent output shapes",
        "text": (
            "Operators whose output size depends on tensor values (nonzero, unique, "
            "masked_select, boolean-mask indexing) must copy the size to the host before "
            "allocating. Use fixed-shape alternatives: `torch.where`, masks multiplied in, "
            "`ignore_index`, `scatter_add_` into a fixed-size tensor."
        ),
        "before": "selected = logits[mask]\n",
        "after": "selected = torch.where(mask.unsqueeze(-1), logits, torch.zeros_like(logits))\n",
    },
    models.DEVICE_TO_HOST_COPY: {
        "title": "Do not copy to the host inside the step",
        "text": (
            "`.cpu()`, `.numpy()`, `.to('cpu')` wait for the GPU and copy into pageable "
            "memory. Keep the computation on the device, or copy into a pinned buffer with "
            "`non_blocking=True` and read it after an event says it is ready."
        ),
        "before": "preds = logits.argmax(1).cpu().numpy()\n",
        "after": (
            "host_buf = torch.empty(n, dtype=torch.long, pin_memory=True)\n"
            "host_buf.copy_(logits.argmax(1), non_blocking=True)\n"
            "done = torch.cuda.Event(); done.record()\n"
            "# ... later, when needed: done.synchronize(); use host_buf\n"
        ),
    },
    models.BLOCKING_HOST_TO_DEVICE: {
        "title": "Pin host memory and copy with non_blocking=True",
        "text": (
            "Copies from pageable host memory are staged and block the host. Load batches "
            "into pinned memory (`DataLoader(pin_memory=True)`) and copy them with "
            "`non_blocking=True`; create constant tensors directly on the device."
        ),
        "before": (
            "loader = DataLoader(ds, batch_size=64)\n"
            "x = x.to(device)\n"
            "w = torch.tensor([0.2, 0.8]).to(device)\n"
        ),
        "after": (
            "loader = DataLoader(ds, batch_size=64, pin_memory=True, num_workers=4)\n"
            "x = x.to(device, non_blocking=True)\n"
            "w = torch.tensor([0.2, 0.8], device=device)\n"
        ),
    },
    models.EXPLICIT_SYNC: {
        "title": "Drop debugging synchronizes",
        "text": (
            "`torch.cuda.synchronize()`, `event.synchronize()` and `stream.synchronize()` "
            "stop the host until the GPU is done. Remove them from the training loop (they "
            "are only needed around timing code); use events and `stream.wait_event` to "
            "order work between streams without blocking the host."
        ),
        "before": "loss.backward()\ntorch.cuda.synchronize()   # debugging leftover\nopt.step()\n",
        "after": (
            "loss.backward()\nopt.step()\n"
            "# to order streams without blocking the host:\n"
            "# other_stream.wait_event(done_event)\n"
        ),
    },
    models.ALLOCATOR_SYNC: {
        "title": "Pre-allocate; let the caching allocator reuse memory",
        "text": (
            "`cudaMalloc` / `cudaFree` inside a step synchronize the device. They happen "
            "when the caching allocator has to grow or is emptied: avoid "
            "`torch.cuda.empty_cache()` in the loop, keep shapes stable (pad variable "
            "lengths), pre-allocate buffers once, and consider "
            "`PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True`."
        ),
        "before": (
            "for x in batches:            # every batch a new length\n"
            "    out = model(x)\n"
            "    torch.cuda.empty_cache()\n"
        ),
        "after": (
            "for x in batches:\n"
            "    out = model(pad_to_bucket(x))   # few distinct shapes, memory reused\n"
        ),
    },
}

# Operator-specific refinements: (operator names, fields that replace the kind's).
_BY_OP: list[tuple[frozenset[str], dict[str, str]]] = [
    (
        frozenset({"aten::nonzero", "aten::argwhere", "aten::where"}),
        {
            "title": "Use torch.where (fixed shape) instead of nonzero",
            "text": (
                "`torch.nonzero(mask)` / `torch.where(mask)` with one argument return as many "
                "rows as there are True values, so the host must wait to learn the count. "
                "Keep the full shape and mask the values instead, or use "
                "`nonzero_static(size=...)` when an upper bound is known."
            ),
            "before": (
                "idx = torch.nonzero(target != ignore)\n"
                "loss = per_pixel[idx[:, 0], idx[:, 1]].mean()\n"
            ),
            "after": (
                "valid = (target != ignore).float()\n"
                "loss = (per_pixel * valid).sum() / valid.sum().clamp_min(1)\n"
            ),
        },
    ),
    (
        frozenset({"aten::unique", "aten::_unique", "aten::_unique2", "aten::unique_dim",
                   "aten::unique_consecutive", "aten::unique_dim_consecutive"}),
        {
            "title": "Count into a fixed-size tensor instead of unique",
            "text": (
                "`torch.unique` returns a data-dependent number of values, which makes the "
                "host wait. When the value range is known, count with `scatter_add_` into a "
                "tensor of `num_classes` zeros (fixed size, no sync). Not `torch.bincount`: "
                "on CUDA it reads the input's min and max back to the host."
            ),
            "before": "labels, counts = torch.unique(target, return_counts=True)\n",
            "after": (
                "flat = target.flatten()\n"
                "counts = torch.zeros(num_classes, dtype=torch.long, device=flat.device)\n"
                "counts.scatter_add_(0, flat, torch.ones_like(flat))\n"
                "present = counts > 0   # fixed shape, stays on the GPU\n"
            ),
        },
    ),
    (
        frozenset({"aten::index", "aten::index_put_", "aten::index_put",
                   "aten::masked_select"}),
        {
            "title": "Replace the boolean mask with ignore_index or a multiplied mask",
            "text": (
                "Indexing with a boolean mask (`x[mask]`, `masked_select`) produces a "
                "data-dependent shape and waits for the GPU. For losses use "
                "`CrossEntropyLoss(ignore_index=...)`; elsewhere use `torch.where` or "
                "multiply by the mask so shapes stay fixed."
            ),
            "before": (
                "keep = target != 255\n"
                "loss = F.cross_entropy(logits.permute(0, 2, 3, 1)[keep], target[keep])\n"
            ),
            "after": "loss = F.cross_entropy(logits, target, ignore_index=255)\n",
        },
    ),
    (
        frozenset({"aten::repeat_interleave"}),
        {
            "title": "Pass output_size to repeat_interleave",
            "text": (
                "`repeat_interleave(repeats)` must read the sum of `repeats` on the host. "
                "When you know the total, pass `output_size=` and it stays asynchronous."
            ),
            "before": "out = x.repeat_interleave(repeats, dim=0)\n",
            "after": "out = x.repeat_interleave(repeats, dim=0, output_size=total)\n",
        },
    ),
    (
        frozenset({"aten::is_nonzero"}),
        {
            "title": "Do not branch on a GPU tensor",
            "text": (
                "`if t:`, `while t:`, `bool(t)` and `assert t` read the tensor on the host. "
                "Express the condition with `torch.where`, or check it every N steps."
            ),
            "before": "if (loss > 10).any():\n    loss = loss.clamp(max=10)\n",
            "after": "loss = torch.where(loss > 10, loss.clamp(max=10), loss)\n",
        },
    ),
]


def advice_for(kind: str, ops: list[str]) -> dict[str, Any]:
    """``{"title", "text", "before", "after", "removes"}`` for a site of this kind/ops."""
    base = dict(_BY_KIND.get(kind, _BY_KIND[models.EXPLICIT_SYNC]))
    if kind in (models.DYNAMIC_SHAPE, models.SCALAR_READBACK):
        # The outermost operator is what the user wrote (x[mask] -> aten::index), so it
        # picks the refinement before the inner ones (aten::nonzero).
        refinement = next(
            (fields for op in ops for op_names, fields in _BY_OP
             if op in op_names and (kind == models.DYNAMIC_SHAPE or op == "aten::is_nonzero")),
            None,
        )
        if refinement is not None:
            base.update(refinement)
    base["removes"] = _WAIT_AND_IDLE
    if kind == models.ALLOCATOR_SYNC:
        base["removes"] = "the allocator's device synchronization and the GPU idle after it"
    return base
