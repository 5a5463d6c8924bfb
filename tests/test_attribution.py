"""Operator chain, step, annotations, module path, thread and stacks (both formats)."""

from __future__ import annotations

import json

import pytest
from kineto_builder import KinetoTraceBuilder, item_sync

from tb_syncfinder.attribute import is_user_file, parse_call_stack, parse_frame
from tb_syncfinder.demo.sources import SOURCE_PACKS
from tb_syncfinder.engine import analyze_trace


def test_sync_carries_step_annotations_module_thread_and_python_stack(tmp_path):
    b = KinetoTraceBuilder(tid=77)
    with (
        b.step(5),
        b.annotation("loss"),
        b.frame(("train.py", 3, "main")),
        b.frame("nn.Module: Net_0"),
        b.frame(("model.py", 20, "forward")),
        b.frame("nn.Module: Linear_1"),
    ):
        b.kernel(dur=100)
        with (
            b.op("aten::item", stack=[("model.py", 40, "helper")], called="item"),
            b.op("aten::_local_scalar_dense"),
        ):
            b.runtime("cudaStreamSynchronize")
    (sync,) = analyze_trace(str(b.write(tmp_path / "w.pt.trace.json"))).syncs
    assert sync.step == 5
    assert sync.annotations == ["loss"]
    assert sync.module == "Net.Linear"
    assert sync.thread == 77
    assert [(f.file, f.line, f.func, f.user) for f in sync.stack] == [
        ("<built-in>", None, "item", False),
        ("model.py", 40, "helper", True),
        ("model.py", 20, "forward", True),
        ("train.py", 3, "main", True),
    ]


def test_legacy_call_stack_argument_gives_the_stack(tmp_path):
    b = KinetoTraceBuilder()
    with (
        b.step(1),
        b.op("aten::item", call_stack="model.py(50): forward;\r\ntrain.py(112): train_batch"),
        b.op("aten::_local_scalar_dense", call_stack=""),
    ):
        b.runtime("cudaStreamSynchronize", dur=20)
    (sync,) = analyze_trace(str(b.write(tmp_path / "w.pt.trace.json"))).syncs
    assert [(f.file, f.line) for f in sync.stack] == [("model.py", 50), ("train.py", 112)]
    assert sync.source is not None and sync.source.line == 50 and sync.source.line_exact


def test_sync_outside_any_step_has_no_step(tmp_path):
    b = KinetoTraceBuilder()
    with b.step(1):
        b.kernel()
    b.runtime("cudaDeviceSynchronize")
    # More work after it: not the profiler stopping (the last bare synchronize).
    with b.op("aten::add"):
        b.runtime("cudaLaunchKernel", dur=4)
    (sync,) = analyze_trace(str(b.write(tmp_path / "w.pt.trace.json"))).syncs
    assert sync.step is None and sync.op is None and sync.stack == []


def test_code_torch_compile_generated_is_not_the_users():
    """With ``capture_scalar_outputs``, a compiled graph's reads run in the module inductor
    wrote (``/tmp/torchinductor_<user>/kc/ckcc....py``, named by a hash): it was named as the
    user's line, exact, a file that changes with every compile (a walk: 3 of 5 sites)."""
    generated = "ckccvyuyrl7vxlsahadhcedwupsofoaqtpz5ktnr4fh6ann6ujuc.py"
    assert not is_user_file(f"/tmp/torchinductor_root/kc/{generated}")
    assert not is_user_file(f"inductor_cache/kc/{generated}")
    assert is_user_file(f"inductor_cache/ab/{generated}")  # not in its hash's folder
    assert is_user_file("kc/ckcc.py")


def test_user_frames_exclude_torch_site_packages_builtins_and_stdlib():
    assert is_user_file("train.py")
    assert is_user_file("/home/me/project/model.py")
    assert not is_user_file("torch/nn/modules/module.py")
    assert not is_user_file("/usr/lib/python3/dist-packages/foo.py")
    assert not is_user_file("/venv/lib/python3.11/site-packages/timm/x.py")
    assert not is_user_file("/usr/lib/python3.11/threading.py")
    assert not is_user_file("enum.py")
    assert not is_user_file("<built-in method item of Tensor object at 0x1>")
    assert not is_user_file("my/profiler.py")
    # Lightning's helpers and torchmetrics, as torch shortens them, on a machine that does
    # not have them installed (a laptop reading a cluster's traces): not the user's code.
    assert not is_user_file("lightning_utilities/core/apply_func.py")
    assert not is_user_file("torchmetrics/functional/classification/stat_scores.py")
    # Stable-Baselines3 and the environments it steps, likewise: a CI job with tb-syncfinder
    # alone listed its rollout's reads at its def lines as the user's, and failed the gate.
    assert not is_user_file("stable_baselines3/common/on_policy_algorithm.py")
    assert not is_user_file("gymnasium/wrappers/common.py")
    # A project's own folder of a common name stays the user's.
    assert is_user_file("datasets/coco.py")


def test_a_script_named_as_a_standard_module_is_the_users_code():
    """torchvision's detection walk saved its script as ``bisect.py``: torch names a script
    and a standard module alike (``bisect.py``), and its nonzero read "(no stack)". The
    frame's function tells: the module's own (``insort_right``) or the script's."""
    assert is_user_file("bisect.py", (), "<module>")
    assert is_user_file("code.py", (), "train_step")
    assert not is_user_file("bisect.py", (), "insort_right")
    assert not is_user_file("typing.py", (), "inner")
    assert not is_user_file("copy.py", (), "<listcomp>")  # not told apart: the module's
    assert not is_user_file("logging/__init__.py", (), "info")
    assert parse_frame("queue.py(12): <module>").user
    assert not parse_frame("queue.py(154): get").user


def test_frame_parsing_handles_builtins_and_module_entries():
    assert parse_frame("<built-in method nonzero of type object at 0x7f>").func == "nonzero"
    assert parse_frame("<built-in function linear>").func == "linear"
    assert parse_frame("nn.Module: Linear_0") is None
    assert parse_frame("a b(c).py(12): f").line == 12
    assert parse_call_stack("") == []


@pytest.mark.parametrize(
    ("path", "user"),
    [
        ("tb_syncfinder/demo/seg.py", True),
        ("/venv/lib/python3.11/site-packages/tb_syncfinder/demo/cnn.py", True),
        ("/home/me/tb-syncfinder/tb_syncfinder/demo/cnn.py", True),
        ("tb_syncfinder/demo/runner.py", False),
        ("tb_syncfinder/demo/cli.py", False),
        ("/home/me/tb-syncfinder/tb_syncfinder/cli.py", False),
        ("tb_syncfinder/plugin/loader.py", False),
        ("my_tb_syncfinder/train.py", True),
        ("train.py", True),
    ],
)
def test_demo_workloads_are_user_code_but_the_demo_driver_is_not(path, user):
    assert is_user_file(path, SOURCE_PACKS) is user


def test_without_the_demo_source_pack_its_files_are_the_tools_own_library_code():
    # The core knows nothing of the demo: only its registered source pack makes the
    # workloads user code.
    assert not is_user_file("tb_syncfinder/demo/seg.py")
    assert is_user_file("train.py")


def test_a_python_parent_missing_from_the_trace_keeps_the_outer_frames_found_by_time(tmp_path):
    # A dropped python_function event (ring buffer full, a damaged trace) breaks the
    # "Python parent id" chain; the frames around it that time nesting still finds belong
    # to the stack, or the user's outer frames (and the source line) are lost.
    import json

    b = KinetoTraceBuilder()
    with b.step(1), b.frame(("train.py", 3, "main")), b.frame(("model.py", 20, "forward")):
        b.kernel(dur=100)
        with (
            b.op("aten::item", stack=[("model.py", 40, "helper")], called="item"),
            b.op("aten::_local_scalar_dense"),
        ):
            b.runtime("cudaStreamSynchronize")
    trace = b.to_dict()
    trace["traceEvents"] = [
        e for e in trace["traceEvents"] if e.get("name") != "model.py(20): forward"
    ]
    path = tmp_path / "w.pt.trace.json"
    path.write_text(json.dumps(trace))
    (sync,) = analyze_trace(str(path)).syncs
    assert [(f.file, f.func) for f in sync.stack] == [
        ("<built-in>", "item"),
        ("model.py", "helper"),
        ("train.py", "main"),
    ]


def test_an_operator_written_before_the_one_enclosing_it_from_the_same_start_is_nested(
    tmp_path,
):
    """Nesting follows (start, longest first), not the order the file lists them in."""
    b = KinetoTraceBuilder()
    with b.step(1):
        item_sync(b)
    doc = b.to_dict()
    events = doc["traceEvents"]
    outer = next(e for e in events if e.get("name") == "aten::item")
    inner = next(e for e in events if e.get("name") == "aten::_local_scalar_dense")
    inner["dur"] -= inner["ts"] - outer["ts"]
    inner["ts"] = outer["ts"]
    events.remove(inner)
    events.insert(events.index(outer), inner)  # the inner one first, same start
    path = tmp_path / "same_start.pt.trace.json"
    path.write_text(json.dumps(doc))
    (sync,) = analyze_trace(str(path)).syncs
    assert sync.op_chain == ["aten::item", "aten::_local_scalar_dense"]


def test_frames_entered_after_the_profiler_started_are_told_from_those_running_then(tmp_path):
    """A real torch trace: ``train_step`` is called while profiling runs (its recorded line
    is its def line); ``main`` was running when the profiler started (its line is the
    ``prof.step()`` it was at). Source resolution takes the first as entered."""
    from cpu_workload import WORKLOAD, profile_workload

    from tb_syncfinder.attribute import Attributor
    from tb_syncfinder.detect import detect_latent, detect_syncs
    from tb_syncfinder.reader import read_trace
    from tb_syncfinder.timeline import build_timeline

    trace = tmp_path / "w.pt.trace.json"
    profile_workload(WORKLOAD, tmp_path / "src" / "workload.py", trace)
    tl = build_timeline(read_trace(str(trace)))
    attribute = Attributor(tl)
    calls = [attribute(e).user_call for e in detect_latent(tl)]
    entered = {(c.frame.func, c.frame.line, c.entered) for c in calls if c is not None}
    assert ("train_step", 4, True) in entered
    assert not any(func == "main" and flag for func, _line, flag in entered)
    # A thread that does not show the profiler starting tells nothing.
    b = KinetoTraceBuilder()
    with b.step(1):
        item_sync(b, stack=[("train.py", 8, "train_step")])
    built = build_timeline(read_trace(str(b.write(tmp_path / "b.pt.trace.json"))))
    (episode,) = detect_syncs(built)
    call = Attributor(built)(episode).user_call
    assert call is not None and (call.frame.func, call.entered) == ("train_step", False)
