"""The code the advice tells users to write instead gives the results the code it replaces
gave: run here on CPU tensors (whether a fix removes the sync is the GPU validation's
question, docs/validation.md; whether it changes the numbers is this file's). A review
found fixes that silently changed results: a multiply by a mask turning a NaN at an ignored
pixel into a NaN loss, a ``torch.where`` that kept every row where the code it replaced
kept some, a count that failed on int32 labels."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from tb_syncfinder import catalogue  # noqa: E402


def _op_advice(op: str) -> catalogue.Advice:
    (found,) = [entry.advice for entry in catalogue.OP_ADVICE if op in entry.ops]
    return found


def _run(code: str, **names: object) -> dict[str, object]:
    scope: dict[str, object] = {"torch": torch, **names}
    exec(code, scope)  # the advice's own snippet, as the user would paste it
    return scope


def test_the_nonzero_fix_gives_the_same_loss_with_a_nan_at_an_ignored_pixel() -> None:
    advice = _op_advice("aten::nonzero")
    per_pixel = torch.tensor([[1.0, float("nan")], [3.0, 2.0]])
    target = torch.tensor([[1, 255], [2, 1]])
    before = _run(advice.before, per_pixel=per_pixel, target=target, ignore=255)["loss"]
    after = _run(advice.after, per_pixel=per_pixel, target=target, ignore=255)["loss"]
    assert torch.isfinite(after) and torch.allclose(before, after)


def test_the_dynamic_shape_fix_keeps_the_mean_of_the_kept_rows() -> None:
    advice = catalogue.kind(catalogue.DYNAMIC_SHAPE).advice
    logits = torch.arange(12.0).reshape(4, 3)
    mask = torch.tensor([True, False, True, False])
    before = _run(advice.before, logits=logits, mask=mask)["mean"]
    after = _run(advice.after, logits=logits, mask=mask)["mean"]
    assert torch.allclose(before, after)


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.uint8])
def test_the_unique_fix_counts_labels_of_any_integer_type(dtype: torch.dtype) -> None:
    advice = _op_advice("aten::unique")
    target = torch.tensor([[0, 2, 2], [3, 0, 2]], dtype=dtype)
    scope = _run(advice.after, target=target, num_classes=5)
    labels, counts = torch.unique(target, return_counts=True)
    assert scope["counts"][labels.long()].tolist() == counts.tolist()
    assert scope["present"].nonzero().flatten().tolist() == labels.long().tolist()


def test_the_branch_fix_gives_the_branchs_result() -> None:
    advice = _op_advice("aten::is_nonzero")
    for values in ([3.0, 12.0], [1.0, 2.0]):
        loss = torch.tensor(values)
        before = _run(advice.before, loss=loss.clone())["loss"]
        after = _run(advice.after, loss=loss.clone())["loss"]
        assert torch.equal(before, after)


def test_the_normal_fix_draws_independent_rows_at_the_broadcast_shape() -> None:
    """``mean + std * randn_like(std)`` with a (4, 3) mean and a (3,) std reused one noise
    row for all four; the advice names the broadcast shape instead."""
    text = _op_advice("aten::normal").text
    assert "torch.broadcast_shapes(mean.shape, std.shape)" in text and ".detach()" in text
    mean, std = torch.zeros(4, 3), torch.ones(3)
    torch.manual_seed(0)
    noise = torch.randn(torch.broadcast_shapes(mean.shape, std.shape))
    sample = (mean + std * noise).detach()
    assert sample.shape == torch.normal(mean, std.expand(4, 3)).shape
    assert len({tuple(row.tolist()) for row in sample}) == 4


def test_the_repeat_interleave_fix_gives_the_same_rows_with_the_right_total() -> None:
    advice = _op_advice("aten::repeat_interleave")
    x, repeats = torch.arange(6).reshape(3, 2), torch.tensor([1, 0, 2])
    before = _run(advice.before, x=x, repeats=repeats)["out"]
    after = _run(advice.after, x=x, repeats=repeats, total=int(repeats.sum()))["out"]
    assert torch.equal(before, after)
    assert "must equal `repeats.sum()` exactly" in advice.text


def test_the_indexed_assign_fix_assigns_what_the_indexing_did() -> None:
    advice = catalogue.HOST_TO_DEVICE_ADVICE["indexed_assign"]
    inds = torch.tensor([0, 2])
    before = _run(advice.before, target=torch.zeros(4), inds=inds)["target"]
    after = _run(advice.after, target=torch.zeros(4), inds=inds)["target"]
    assert torch.equal(before, after)


def test_the_fixes_for_arguments_left_out_give_the_same_results() -> None:
    labels = torch.tensor([0, 3, 1, 3])
    one_hot = _op_advice("aten::one_hot")
    scope = {"labels": labels, "num_classes": 4, "F": torch.nn.functional}
    assert torch.equal(
        _run(one_hot.before, **scope)["onehot"], _run(one_hot.after, **scope)["onehot"]
    )
    bincount = _op_advice("aten::bincount")
    for dtype in (torch.int32, torch.int64):
        scope = {"labels": labels.to(dtype), "num_classes": 5}
        before = _run(bincount.before, **scope)["counts"]
        assert torch.equal(before, _run(bincount.after, **scope)["counts"])
    histc = _op_advice("aten::histc")
    x = torch.tensor([-4.0, -1.0, 0.5, 4.0])  # its own range is the one the fix passes
    assert torch.equal(_run(histc.before, x=x)["hist"], _run(histc.after, x=x)["hist"])


def test_the_equal_fix_counts_the_mismatches_torch_equal_counted() -> None:
    advice = _op_advice("aten::equal")
    for pred, target in (
        (torch.tensor([1, 2]), torch.tensor([1, 2])),
        (torch.tensor([1, 2]), torch.tensor([1, 3])),
    ):
        before = _run(advice.before, pred=pred, target=target, mismatches=0)["mismatches"]
        after = _run(advice.after, pred=pred, target=target, mismatches=0)["mismatches"]
        assert int(after) == before


def test_the_ctc_loss_fix_gives_the_mean_loss_of_padded_targets_and_tensor_lengths() -> None:
    """cuDNN's way of calling ctc_loss (1-D int32 targets, lists, no reduction, the mean on
    the device) gives the loss of the padded targets and tensor lengths it replaces:
    inputs and targets of different lengths (a review found the first version passing
    every input as full length), an empty target. Run here by torch's own CPU kernel;
    where cuDNN's differs (an empty or unalignable target: 0) the advice says so."""
    advice = _op_advice("aten::_ctc_loss")
    torch.manual_seed(0)
    scope = {
        "F": torch.nn.functional,
        "device": "cpu",
        "log_probs": torch.randn(30, 4, 12).log_softmax(2),
        "targets": torch.randint(1, 12, (4, 10)),
        "input_lengths": torch.tensor([30, 20, 25, 12]),
        "target_lengths": torch.tensor([10, 7, 0, 3]),
    }
    for zero_infinity in (False, True):
        if zero_infinity:  # the advice says to keep it: both calls pass it
            scope["F"] = _with_zero_infinity(torch.nn.functional)
        log_probs = scope["log_probs"].clone().requires_grad_(True)
        before = _run(advice.before, **{**scope, "log_probs": log_probs})["loss"]
        (grad_before,) = torch.autograd.grad(before, log_probs)
        after = _run(advice.after, **{**scope, "log_probs": log_probs})["loss"]
        (grad_after,) = torch.autograd.grad(after, log_probs)
        assert torch.isfinite(before) and torch.allclose(before, after)
        assert torch.allclose(grad_before, grad_after, atol=1e-6)
    flat = _run(advice.after, **scope)["flat"]
    assert flat.dim() == 1 and flat.dtype == torch.int32
    assert "flat = targets.int()" in advice.after  # targets given 1-D already


def _with_zero_infinity(functional: object) -> object:
    """``F`` whose ctc_loss passes zero_infinity=True, as a user's call that had it would."""

    class _F:
        def __getattr__(self, name: str) -> object:
            return getattr(functional, name)

        @staticmethod
        def ctc_loss(*args: object, **kwargs: object) -> object:
            return functional.ctc_loss(*args, zero_infinity=True, **kwargs)

    return _F()


def test_the_fix_for_ctc_loss_already_on_cudnn_gives_the_mean_it_replaces() -> None:
    """cuDNN's way with the mean reduction: ``reduction='none'`` and the mean on the device
    gives the same loss (each divided by its target length, clamped to 1)."""
    (advice,) = [
        entry.advice for entry in catalogue.OP_ADVICE if "aten::_cudnn_ctc_loss" in entry.ops
    ][:1]
    assert advice.title.startswith("ctc_loss on cuDNN")
    torch.manual_seed(0)
    lengths = [10, 7, 0, 3]
    scope = {
        "F": torch.nn.functional,
        "device": "cpu",
        "log_probs": torch.randn(30, 4, 12).log_softmax(2),
        "flat": torch.randint(1, 12, (sum(lengths),)).int(),
        "input_lengths": [30, 30, 30, 30],
        "target_lengths": lengths,
        "lengths_tensor": torch.tensor(lengths),
    }
    before = _run(advice.before, **scope)["loss"]
    after = _run(advice.after, **scope)["loss"]
    assert torch.allclose(before, after)


def test_the_cumprod_fix_gives_the_same_values_and_gradient_with_no_read_in_backward() -> None:
    """nerf-pytorch's transmittance ``torch.cumprod(1 - alpha + 1e-10, -1)``: torch's
    cumprod backward reads ``(input == 0).any()`` on the host (a walk got the ``.item()``
    fix for it); the advised form of a positive input gives the same values and gradient,
    and its backward runs no ``item``."""
    from torch.profiler import ProfilerActivity, profile

    advice = _op_advice("aten::cumprod_backward")
    base = torch.rand(4, 6, dtype=torch.float64) * 0.9 + 0.05
    results = []
    for code in (advice.before, advice.after):
        x = base.clone().requires_grad_()
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            t = _run(code, x=x)["t"]
            t.sum().backward()
        names = {event.name for event in prof.events()}
        results.append((t.detach(), x.grad, "aten::item" in names))
    (t_before, grad_before, read_before), (t_after, grad_after, read_after) = results
    assert torch.allclose(t_before, t_after) and torch.allclose(grad_before, grad_after)
    assert read_before and not read_after
