"""A CPU-only trace's latent reads right after other reads, with nothing queued between: on
a GPU the first read waits for the device's queue and the next find it empty. pytorch/
examples' imagenet formats four tensor meters per log line (``top1.val``, ``top1.avg``,
...): one wait on a GPU, listed as four reads of equal weight."""

from __future__ import annotations

import runpy
import textwrap

import pytest

from tb_syncfinder import analyze

torch = pytest.importorskip("torch")

_SCRIPT = textwrap.dedent(
    """\
    import torch

    w = torch.randn(8, 8, device=DEVICE)
    prof = torch.profiler.profile(
        activities=[torch.profiler.ProfilerActivity.CPU],
        with_stack=True,
        schedule=torch.profiler.schedule(wait=1, warmup=1, active=4),
        on_trace_ready=torch.profiler.tensorboard_trace_handler(LOGDIR),
    )
    prof.start()
    for step in range(6):
        loss = (w @ w).sum()
        acc = (w > 0).float().mean()
        loss_value = loss.item()
        acc_value = acc.item()
        norm = w.norm()
        print(f"{norm:.3f} {loss:.3f} {acc:.3f}")
        prof.step()
    prof.stop()
    """
)


def _report(tmp_path, script: str):
    path = tmp_path / "w.py"
    path.write_text(script)
    logdir = tmp_path / "logs"
    runpy.run_path(str(path), init_globals={"LOGDIR": str(logdir), "DEVICE": "cpu"})
    report = analyze(str(logdir), source_roots=[str(tmp_path)])
    return report, {site.line: site for site in report.latent_sites}


def test_a_read_right_after_another_names_it_and_costs_little(tmp_path):
    report, sites = _report(tmp_path, _SCRIPT)
    assert sorted(sites) == [14, 15, 17]
    loss_read, acc_read = sites[14], sites[15]
    # The first read of the step follows the step's matmul: it waits.
    assert (loss_read.after_read_count, loss_read.after_read) == (0, None)
    # ``acc.item()`` right after ``loss.item()``, nothing between.
    assert acc_read.after_read_count == 4
    assert acc_read.after_read is not None
    assert (acc_read.after_read.line, acc_read.after_read.line_exact) == (14, True)
    by_id = {sync.id: sync for sync in report.latent}
    for sync in report.latent:
        if sync.source.line == 15:
            assert by_id[sync.after_read].source.line == 14
    text = " ".join(report.to_text().split())
    assert (
        "right after the read at line 14, nothing queued between: on a GPU the host waits "
        "there first, so this read costs little until that one goes"
    ) in text


def test_reads_of_one_line_after_its_first_are_counted(tmp_path):
    """``w.norm()`` queues work after ``acc.item()``: the print's first read waits for it,
    its next two (each after a ``detach``, which queues nothing) do not."""
    report, sites = _report(tmp_path, _SCRIPT)
    printed = sites[17]
    assert printed.count == 12
    assert (printed.after_read_count, printed.after_read) == (8, None)
    assert "8 of these 12 reads come right after another read" in " ".join(report.to_text().split())


def test_a_read_after_a_copys_numpy_follows_the_copy(tmp_path):
    """``y_pred = b_values.cpu().numpy()`` then ``v_loss.item()`` (CleanRL's PPO): the
    ``aten::to`` that ``.numpy()`` runs on the host copy queues nothing on a GPU, but was
    taken for device work, so the read after it was not said to follow the copy (a walk).
    A ``.to()`` of the program's own between stays device work."""
    script = _SCRIPT.replace(
        "    acc_value = acc.item()\n",
        "    as_array = w.cpu().numpy()\n    acc_value = acc.item()\n",
    )
    _, sites = _report(tmp_path, script)
    assert sites[16].after_read is not None and sites[16].after_read.line == 15
    moved = script.replace(
        "    acc_value = acc.item()\n",
        "    acc = acc.to(DEVICE)\n    acc_value = acc.item()\n",
    )
    (tmp_path / "moved").mkdir()
    _, sites = _report(tmp_path / "moved", moved)
    assert sites[17].after_read_count == 0


@pytest.mark.parametrize(
    ("copy", "after"),
    [
        # CycleGAN's ``tensor2im``: ``image_tensor[0].cpu().float().numpy()`` per visual.
        ("    as_array = w.cpu().float().numpy()\n", True),
        ("    as_array = w.cpu().double()\n", True),
        # A cast of another tensor between queues its kernel on a GPU.
        ("    as_array = w.cpu()\n    other = w.float()\n", False),
    ],
)
def test_a_read_after_a_copy_converted_on_the_host_follows_the_copy(tmp_path, copy, after):
    """The ``.float()`` of the host copy a line just made runs on the host: the read after
    it was not said to follow the copy (a walk of CycleGAN: 16 copies a display step, one
    wait on a GPU)."""
    script = _SCRIPT.replace("    acc_value = acc.item()\n", copy + "    acc_value = acc.item()\n")
    _, sites = _report(tmp_path, script)
    read = sites[15 + copy.count("\n")]
    assert (read.after_read is not None) is after


def test_a_modules_copies_to_the_host_follow_each_other(tmp_path):
    """``net.cpu()`` copies each parameter after ``nn.Module._apply``'s metadata check
    (``aten::_has_compatible_shallow_copy_type``), which queues nothing: on a GPU only the
    first copy waits (CycleGAN's checkpoint, 184 copies a save, said to be 184 waits)."""
    script = _SCRIPT.replace(
        "    loss_value = loss.item()\n",
        "    net = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 4))\n"
        "    net.cpu()\n"
        "    loss_value = loss.item()\n",
    )
    _, sites = _report(tmp_path, script)
    copies = [site for site in sites.values() if site.line == 15]
    assert copies and copies[0].count == 16  # 4 tensors, 4 steps
    assert copies[0].after_read_count == 12


def test_a_read_after_device_work_is_not_said_to_cost_little(tmp_path):
    report, sites = _report(
        tmp_path,
        _SCRIPT.replace(
            "    acc_value = acc.item()\n",
            "    acc = acc * 2\n    acc_value = acc.item()\n",
        ),
    )
    assert sorted(sites) == [14, 16, 18]
    assert sites[16].after_read_count == 0
    assert "right after the read" not in report.to_text()


def test_a_read_after_an_unrun_synchronize_and_a_read_says_both(tmp_path):
    """build-nanogpt logs ``loss_accum.item()`` and ``norm`` on one line after its timing
    synchronize: the second read is cheap while the synchronize stays, and after it goes
    while the first read stays."""
    script = _SCRIPT.replace(
        '    print(f"{norm:.3f} {loss:.3f} {acc:.3f}")\n',
        "    if DEVICE == 'cuda':\n        torch.cuda.synchronize()\n"
        '    print(f"{loss.item():.3f} {norm:.3f}")\n',
    )
    report, sites = _report(tmp_path, script)
    text = " ".join(report.to_text().split())
    assert (
        "after torch.cuda.synchronize() (line 18, not run here): on a GPU the host waits there "
        "first, so this read costs little until that synchronize goes; right after another "
        "read on this line too, nothing queued between: it costs little while that one stays"
    ) in text


def test_the_summary_says_how_many_latent_reads_come_right_after_another(tmp_path):
    """fast_neural_style's checkpoint moves its model to the host, 248 copies a save one
    after another: the summary said all "would make the host wait on a GPU" (a walk), where
    each site said only the first of each run waits."""
    report, sites = _report(tmp_path, _SCRIPT)
    after = sum(site.after_read_count for site in sites.values())
    assert after == 12  # acc.item() after loss.item() (4), and 8 of the print's 12
    text = " ".join(report.to_text().split())
    assert (
        "would make the host wait on a GPU (12 of them right after another read: on a GPU "
        "only the first of each such run waits)"
    ) in text
