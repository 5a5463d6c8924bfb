"""The catalogue is the one place that knows the sync kinds and patterns: every kind has
every part, every consumer reads it, and nobody keeps a copy."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tb_syncfinder import catalogue
from tb_syncfinder.catalogue import KIND_NAMES, KINDS

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.name)
def test_every_kind_has_every_part(kind: catalogue.SyncKind) -> None:
    for field in ("name", "label", "summary", "description", "removes"):
        assert getattr(kind, field).strip(), f"{kind.name} has no {field}"
    for field in ("title", "text", "before", "after"):
        assert getattr(kind.advice, field).strip(), f"{kind.name} advice has no {field}"
    assert re.fullmatch(r"[a-z][a-z0-9_]*", kind.name)
    for colour in (kind.colour, kind.colour_dark):
        assert re.fullmatch(r"#[0-9a-f]{6}", colour), f"{kind.name}: colour {colour!r}"


def test_kind_names_and_colours_are_unique() -> None:
    assert len(set(KIND_NAMES)) == len(KIND_NAMES)
    assert len({k.colour for k in KINDS}) == len(KINDS)
    assert len({k.colour_dark for k in KINDS}) == len(KINDS)


def test_every_kind_detection_can_produce_is_in_the_catalogue() -> None:
    produced = set(catalogue.OP_KINDS.values())
    detect_source = (REPO / "tb_syncfinder" / "detect.py").read_text()
    produced |= {
        getattr(catalogue, name)
        for name in re.findall(r"catalogue\.([A-Z_]+)\b", detect_source)
        if isinstance(getattr(catalogue, name, None), str)
    }
    assert produced <= set(KIND_NAMES)
    assert produced, "detect.py no longer names its kinds through the catalogue"


def test_every_refinement_names_catalogued_kinds_and_sync_operators() -> None:
    for entry in catalogue.OP_ADVICE:
        assert entry.kinds <= set(KIND_NAMES)
        assert entry.ops and all(
            op.startswith(("aten::", "torchvision::")) or catalogue.is_collective_op(op)
            for op in entry.ops
        )
    for op in catalogue.LATENT_TRIGGERS:
        assert op in catalogue.OP_KINDS or op in catalogue.LATENT_CTC_KINDS


def test_advice_follows_the_outermost_operator_and_says_what_it_removes() -> None:
    mask = catalogue.advice_for(catalogue.DYNAMIC_SHAPE, ["aten::index", "aten::nonzero"])
    assert "ignore_index" in mask["after"]
    assert mask["removes"] == catalogue.kind(catalogue.DYNAMIC_SHAPE).removes
    # An operator refinement never leaks into a kind it does not apply to.
    readback = catalogue.advice_for(catalogue.SCALAR_READBACK, ["aten::nonzero"])
    assert readback["title"] == catalogue.kind(catalogue.SCALAR_READBACK).advice.title


def test_unknown_kinds_get_a_neutral_record_not_an_error() -> None:
    record = catalogue.kind("some_future_kind")
    assert record.label == "some future kind" and record.advice.title


@pytest.mark.parametrize(
    ("names", "expected"),
    [
        ({"hipMemcpyWithStream", "hipLaunchKernel"}, "rocm"),
        ({"AscendCL@aclrtSynchronizeStream"}, "npu"),
        ({"cudaLaunchKernel", "cudaStreamSynchronize"}, "cuda"),
        (set(), "cpu"),
    ],
)
def test_device_kind_follows_the_runtime_call_names(names: set[str], expected: str) -> None:
    assert catalogue.device_kind_of(names, False) == expected


def test_explicit_sync_families_are_recognised_by_prefix() -> None:
    assert catalogue.is_explicit_sync_api("AscendCL@aclrtSynchronizeStreamWithTimeout")
    assert catalogue.is_explicit_sync_api("cuStreamSynchronize")
    assert not catalogue.is_explicit_sync_api("cudaStreamWaitEvent")
    assert not catalogue.may_block("cudaLaunchKernel")


def test_the_dashboard_keeps_no_copy_of_the_kinds() -> None:
    """A kind added to the catalogue must show in the dashboard with no frontend edit: the
    frontend sources may not name any kind (they read the plugin's catalogue route)."""
    sources = {p.name: p.read_text() for p in (REPO / "frontend" / "src").glob("*.*")}
    for name in KIND_NAMES:
        holders = [f for f, text in sources.items() if name in text]
        assert not holders, f"{name} is spelled out in frontend/src/{holders}"


def test_no_module_but_the_catalogue_spells_out_sync_api_names() -> None:
    """The runtime API tables live in the catalogue only (one place to add a backend)."""
    pattern = re.compile(r'"(cudaStreamSynchronize|hipMemcpyWithStream|AscendCL@)')
    for path in (REPO / "tb_syncfinder").rglob("*.py"):
        if path.name == "catalogue.py" or "demo" in path.parts:
            continue
        assert not pattern.search(path.read_text()), f"{path} spells out sync API names"


def test_whether_a_thread_runs_python_is_read_once_per_thread_not_once_per_sync():
    # The collective-worker rule asks whether the sync's thread runs Python. Asked per
    # sync, it was a pass over the thread's nodes each time: on a trace without stacks
    # (no Python node to stop at), 18,000 syncs took 4.6 s.
    import json

    from kineto_builder import KinetoTraceBuilder, item_sync

    from tb_syncfinder import engine
    from tb_syncfinder.attribute import Attributor
    from tb_syncfinder.detect import detect_syncs
    from tb_syncfinder.reader import decode_trace
    from tb_syncfinder.timeline import build_timeline

    b = KinetoTraceBuilder()
    with b.step(1):
        for _ in range(40):
            item_sync(b, stack=())
    tl = build_timeline(decode_trace("t.json", json.dumps(b.to_dict()).encode()))
    episodes = detect_syncs(tl)
    attribute = Attributor(tl)
    attributions = [attribute(e) for e in episodes]

    class CountingKinds(list):
        asked = 0

        def __contains__(self, kind: object) -> bool:
            CountingKinds.asked += 1
            return super().__contains__(kind)

    for thread in tl.threads.values():
        thread.kinds = CountingKinds(thread.kinds)
    flags = engine._on_collective_worker(episodes, attributions)
    assert len(episodes) == 40 and not any(flags)
    assert CountingKinds.asked <= len(tl.threads)


def test_a_sync_inside_grad_scalers_step_gets_the_fused_optimizer_fix() -> None:
    step_frames = {
        ("torch/amp/grad_scaler.py", "<genexpr>"),
        ("torch/amp/grad_scaler.py", "_maybe_opt_step"),
        ("train.py", "main"),
    }
    ops = ["aten::item", "aten::_local_scalar_dense"]
    advice = catalogue.advice_for(catalogue.SCALAR_READBACK, ops, frames=step_frames)
    assert advice["title"].startswith("Use a fused optimizer") and "fused=True" in advice["after"]
    # Windows paths too; and scaler.get_scale() reads the scale the user asked for: the
    # kind's own fix (read it every N steps).
    windows = {("C:\\venv\\Lib\\site-packages\\torch\\amp\\grad_scaler.py", "<genexpr>")}
    assert catalogue.advice_for(catalogue.SCALAR_READBACK, ops, frames=windows) == advice
    get_scale = {("torch/amp/grad_scaler.py", "get_scale")}
    plain = catalogue.advice_for(catalogue.SCALAR_READBACK, ops, frames=get_scale)
    assert plain["title"] == catalogue.kind(catalogue.SCALAR_READBACK).advice.title


def test_reads_of_host_tensors_by_construction_are_not_latent() -> None:
    host_only = catalogue.in_host_only_library
    counter = [
        ("torch/optim/optimizer.py", "_get_value"),
        ("torch/optim/adam.py", "_single_tensor_adam"),
    ]
    assert host_only([*counter, ("train.py", "main")])
    assert host_only([("torch/utils/data/dataloader.py", "__iter__")])
    assert host_only([("train.py", "main")], ["aten::_fused_adamw_", "aten::item"])
    assert not host_only([("torch/optim/optimizer.py", "step"), ("train.py", "main")])
    # ASGD keeps its step, eta and mu on the parameter's device: its reads sync on a GPU.
    asgd = [
        ("torch/optim/optimizer.py", "_get_value"),
        ("torch/optim/asgd.py", "_single_tensor_asgd"),
    ]
    assert not host_only(asgd)
    assert not host_only([("torch/amp/grad_scaler.py", "<genexpr>")], ["aten::item"])


def test_a_library_fix_needs_its_frame_and_where_it_says_so_its_operators() -> None:
    encoder_forward = {("torch/nn/modules/transformer.py", "forward")}
    nested = catalogue.advice_for(
        catalogue.DEVICE_TO_HOST_COPY,
        ["aten::_nested_tensor_from_mask", "aten::copy_"],
        frames=encoder_forward,
    )
    assert "enable_nested_tensor=False" in nested["after"]
    # Another sync in the same forward (the user's own .item() on a hook, say) keeps its
    # kind's fix; and so does any sync outside the library's frames.
    other = catalogue.advice_for(catalogue.SCALAR_READBACK, ["aten::item"], frames=encoder_forward)
    assert other["title"] == catalogue.kind(catalogue.SCALAR_READBACK).advice.title
    for entry in catalogue.LIBRARY_ADVICE:
        assert entry.file.startswith(
            (
                "torch/",
                "transformers/",
                "torchmetrics/",
                "trainer/connectors/logger_connector/",
                "numpy/",
                "torch_geometric/",
                "monai/",
                "x_transformers/",
                "gpytorch/",
                "whisper/",
                "pyro/",
                "torchdiffeq/",
                "linear_operator/",
                "pytorch_metric_learning/",
                "segment_anything/",
                "sentence_transformers/",
                "torchrl/",
                "ignite/",
                "lightning/fabric/",
                "lightning_fabric/",
                "pykeen/",
                "evaluate/",
                "accelerate/",
                "pytorch_lightning/",
                "lightning/pytorch/",
                "captum/",
                "botorch/",
                "torchtune/",
                "avalanche/",
                "transformer_lens/",
                "sbi/",
            )
        ) and entry.file.endswith(".py")
        assert all(op.startswith("aten::") for op in entry.ops)


def test_sampling_with_torch_normal_gets_the_reparameterised_draw() -> None:
    advice = catalogue.advice_for(
        catalogue.SCALAR_READBACK, ["aten::normal", "aten::item", "aten::_local_scalar_dense"]
    )
    assert "rsample().detach()" in advice["after"]


def test_an_event_sync_inside_a_convolution_is_cudnns_benchmark_not_a_debugging_sync(
    tmp_path: Path,
) -> None:
    """torch-tb-profiler's own ResNet-50 samples: cudaEventSynchronize (with
    cudaEventElapsedTime) inside cudnn_convolution_backward_weight, which read as
    explicit_sync with "Drop debugging synchronizes", a line the user never wrote."""
    from kineto_builder import KinetoTraceBuilder

    from tb_syncfinder import analyze

    b = KinetoTraceBuilder()
    with b.step(1):
        b.kernel(dur=300)
        with b.op("aten::convolution_backward", stack=[("train.py", 9, "train_step")]):
            with b.op("aten::cudnn_convolution_backward_weight"):
                b.runtime("cudaEventRecord", dur=2)
                b.kernel(dur=50)
                b.runtime("cudaEventSynchronize")
                b.runtime("cudaEventElapsedTime", dur=1)
    report = analyze(b.write(tmp_path / "run" / "w.pt.trace.json"))
    (site,) = report.sites
    assert site.kind == catalogue.EXPLICIT_SYNC
    assert site.advice["title"].startswith("cuDNN benchmark mode")
    assert "drop_last=True" in site.advice["after"]


def test_a_training_loops_own_read_gets_its_knob_and_a_read_deeper_under_it_does_not() -> None:
    """Trainer's NaN check reads in ``_run_epoch`` itself; the model's mask check runs under
    the same frame, deeper: only the first is the loop's, and each gets its own fix."""
    loop = ("transformers/trainer.py", "_run_epoch")
    truth = ["aten::is_nonzero", "aten::item", "aten::_local_scalar_dense"]
    nan_check = catalogue.advice_for(catalogue.SCALAR_READBACK, truth, frames=[loop])
    assert "logging_nan_inf_filter=False" in nan_check["after"]
    # No Python frame between the loop and the read but no_grad's wrapper: still its own.
    wrapped = [("torch/utils/_contextlib.py", "decorate_context"), loop]
    assert catalogue.advice_for(catalogue.SCALAR_READBACK, truth, frames=wrapped) == nan_check
    bert_mask = [("transformers/masking_utils.py", "_ignore_bidirectional_mask_sdpa"), loop]
    mask = catalogue.advice_for(catalogue.SCALAR_READBACK, truth, frames=bert_mask)
    assert mask["title"] == "Pass attention_mask=None when no sequence is padded"
    in_model = [("transformers/models/bert/modeling_bert.py", "forward"), loop]
    other = catalogue.advice_for(catalogue.SCALAR_READBACK, truth, frames=in_model)
    assert "logging_nan_inf_filter" not in other["after"]
    # The logging step's reads, and generate()'s stop check after each token.
    logging = catalogue.advice_for(
        catalogue.SCALAR_READBACK,
        ["aten::item", "aten::_local_scalar_dense"],
        frames=[
            ("<built-in>", "item"),
            ("transformers/trainer.py", "_maybe_log_save_evaluate"),
            loop,
        ],
    )
    assert "logging_steps=100" in logging["after"]
    stop = catalogue.advice_for(
        catalogue.SCALAR_READBACK,
        truth,
        frames=[
            ("transformers/generation/utils.py", "__call__"),
            ("transformers/generation/utils.py", "_sample"),
            ("transformers/generation/utils.py", "generate"),
        ],
    )
    assert stop["title"].startswith("generate() reads whether to stop after every token")
    assert "padding=True" in stop["after"]


def test_torchmetrics_checks_get_validate_args_false_and_lightnings_reads_their_settings() -> None:
    unique = ["aten::unique_dim", "aten::_unique2"]
    check = catalogue.advice_for(
        catalogue.DYNAMIC_SHAPE,
        unique,
        frames=[
            ("torch/functional.py", "_unique_impl"),
            (
                "torchmetrics/functional/classification/stat_scores.py",
                "_multiclass_stat_scores_tensor_validation",
            ),
            ("torchmetrics/classification/stat_scores.py", "update"),
        ],
    )
    assert "validate_args=False" in check["after"]
    item = ["aten::item", "aten::_local_scalar_dense"]
    helper = ("lightning/fabric/utilities/apply_func.py", "to_item")
    bar = catalogue.library_fix(
        [helper, ("lightning/pytorch/trainer/connectors/logger_connector/result.py", "metrics")],
        item,
    )
    logs = catalogue.library_fix(
        [
            helper,
            (
                "lightning/pytorch/trainer/connectors/logger_connector/logger_connector.py",
                "log_metrics",
            ),
        ],
        item,
    )
    assert bar is not None and logs is not None
    assert "prog_bar" in bar[0].advice.title and bar[1][1] == "metrics"
    assert "log_every_n_steps" in logs[0].advice.title and logs[1][1] == "log_metrics"


def test_a_library_frame_above_the_users_code_gives_no_fix_of_its_own() -> None:
    """Lightning's ``metrics()`` computes the user's own ``Metric.compute``, whose ``.item()``
    is the user's read: "drop prog_bar=True" is not its fix. The library code a fix is about
    is what the user's innermost line called."""
    from tb_syncfinder.models import Frame

    result = ("lightning/pytorch/trainer/connectors/logger_connector/result.py", 470, "metrics")
    user_compute = Frame("my_metric.py", 10, "compute", True)
    stack = [
        Frame("<built-in>", None, "item", False),
        user_compute,
        Frame(*result, False),
        Frame("train.py", 57, "<module>", True),
    ]
    frames = catalogue.library_frames(stack)
    assert frames == [("<built-in>", "item")]
    assert catalogue.library_fix(frames, ["aten::item"]) is None
    # Under the library's own helper (no user frame between), the fix stands.
    inside = [Frame("lightning/fabric/utilities/apply_func.py", 134, "to_item", False)]
    found = catalogue.library_fix(
        catalogue.library_frames([*inside, Frame(*result, False), stack[-1]]), ["aten::item"]
    )
    assert found is not None and found[1] == (result[0], "metrics")


def test_torchvisions_nms_is_a_dynamic_shape_with_its_own_fix(tmp_path):
    """torchvision's ``nms`` keeps a data-dependent number of boxes and waits on CUDA (its
    kernel learns the count on the host); its CPU kernel reads nothing, so a CPU trace of a
    detection model listed none of its 6 calls a step (a walk of torchvision's detection
    reference)."""
    from tb_syncfinder import analyze
    from tests.test_cli import write_cpu_trace

    assert catalogue.OP_KINDS["torchvision::nms"] == catalogue.DYNAMIC_SHAPE
    trace = write_cpu_trace(tmp_path / "run" / "cpu.pt.trace.json", op="torchvision::nms", count=3)
    [site] = analyze(str(trace)).latent_sites
    assert (site.kind, site.count) == (catalogue.DYNAMIC_SHAPE, 3)
    assert site.advice["title"] == "Run NMS once per batch, not once per image or class"


@pytest.mark.parametrize(
    ("frames", "title"),
    [
        (
            [
                ("torch_geometric/utils/loop.py", "add_remaining_self_loops"),
                ("torch_geometric/nn/conv/gcn_conv.py", "gcn_norm"),
            ],  # fmt: skip
            "Add the self-loops once, not in every forward",
        ),
        (
            [
                ("torch_geometric/utils/_scatter.py", "scatter"),
                ("torch_geometric/nn/pool/glob.py", "global_add_pool"),
            ],  # fmt: skip
            "Give PyG's pooling and scatter their output size",
        ),
        (
            [
                ("torch_geometric/utils/num_nodes.py", "maybe_num_nodes"),
                ("torch_geometric/utils/undirected.py", "to_undirected"),
            ],  # fmt: skip
            "Give PyG's graph utilities num_nodes",
        ),
    ],
)
def test_pyg_reads_get_the_argument_that_removes_them(frames, title):
    """PyTorch Geometric's own reads (self-loops, scatter's size, the node count) were told
    to use ignore_index or keep the value on the device, which a caller cannot do in PyG's
    code (a walk of its examples: 20 of gcn's 100 reads); the arguments that remove them
    (checked to give the same outputs with PyG 2.x) are said now."""
    found = catalogue.library_fix([("<built-in>", "item"), *frames], ["aten::item"])
    assert found is not None and found[0].advice.title == title


@pytest.mark.parametrize(
    ("frames", "library"),
    [
        # ultralytics' loss syncs in torch's wrapper: the library the user called is named.
        (
            [("torch/functional.py", "_unique_impl"), ("ultralytics/utils/loss.py", "preprocess")],
            "ultralytics",
        ),
        (
            [("/venv/lib/python3.11/site-packages/transformers/trainer.py", "train")],
            "transformers",
        ),
        # diffusers' pipeline under ``@torch.no_grad()``: its wrapper is not the code called.
        (
            [
                ("diffusers/schedulers/scheduling_ddpm.py", "step"),
                ("diffusers/pipelines/ddpm/pipeline_ddpm.py", "__call__"),
                ("torch/utils/_contextlib.py", "decorate_context"),
            ],
            "diffusers",
        ),
        # torch's own code (the user called it), a checkout outside site-packages, or a
        # package not known: the fix is not said to be another library's.
        ([("torch/nn/utils/clip_grad.py", "clip_grad_norm_")], None),
        ([("torch/utils/_contextlib.py", "decorate_context")], None),
        ([("/home/me/ultralytics/ultralytics/utils/loss.py", "preprocess")], None),
        ([("mylib/loss.py", "f")], None),
        ([], None),
    ],
)
def test_the_library_a_users_line_called_is_told_from_torchs_own_code(frames, library):
    assert catalogue.called_library(frames) == library


def test_a_fix_inside_a_library_says_it_is_an_edit_there_unless_the_library_has_its_own():
    """ultralytics' trainer reads its losses in its own code: the fix written for a user's
    read is an edit of ultralytics, which the advice now says (``library_code``); PyG's
    reads have fixes of PyG's own (an argument), which need no such word."""
    ultralytics = [("<built-in>", "item"), ("ultralytics/utils/tal.py", "make_anchors")]
    advice = catalogue.advice_for("scalar_readback", ["aten::item"], frames=ultralytics)
    assert advice["library_code"] == "ultralytics"
    pyg = [
        ("<built-in>", "item"),
        ("torch_geometric/utils/num_nodes.py", "maybe_num_nodes"),
        ("torch_geometric/utils/undirected.py", "to_undirected"),
    ]
    advice = catalogue.advice_for("scalar_readback", ["aten::item"], frames=pyg)
    assert "library_code" not in advice
    assert "library_code" not in catalogue.advice_for("scalar_readback", ["aten::item"])


@pytest.mark.parametrize(
    ("path", "func", "wraps"),
    [
        ("torch/functional.py", "_unique_impl", True),
        ("/venv/lib/python3.11/site-packages/torch/_ops.py", "__call__", True),
        ("torch/_tensor.py", "unique", True),
        # torchvision's nms only calls its operator: the caller's line is the one to name.
        ("torchvision/ops/boxes.py", "nms", True),
        ("torchvision/ops/boxes.py", "_batched_nms_vanilla", False),
        ("torch/nn/utils/clip_grad.py", "clip_grad_norm_", False),
        ("ultralytics/utils/loss.py", "preprocess", False),
    ],
)
def test_wrappers_of_one_operator_are_told_from_code_that_chose_to_call_it(path, func, wraps):
    assert catalogue.wraps_one_op(path, func) is wraps


def test_monai_decollating_a_metatensors_metadata_reads_host_values():
    """``decollate_batch(batch.meta)``: MONAI calls itself directly only for a MetaTensor's
    metadata, which ``MetaTensor.to(device)`` leaves on the host (a walk: 8 of 21 of a
    validation's listed reads). A dict's values, decollated through ``_non_zipping_check``,
    may be the user's device tensors: still reads."""
    utils = "/venv/lib/python3.11/site-packages/monai/data/utils.py"
    read = [("<built-in>", "item"), (utils, "<listcomp>"), (utils, "decollate_batch")]
    metadata = [*read, (utils, "_non_zipping_check"), (utils, "decollate_batch")]
    assert catalogue.in_host_only_library([*metadata, (utils, "decollate_batch")])
    assert not catalogue.in_host_only_library(metadata)


def test_monais_window_weights_read_gets_the_roi_weight_map_fix():
    """``sliding_window_inference`` builds its window weights every call and
    ``compute_importance_map`` reads their minimum: MONAI's own ``roi_weight_map=`` removes
    it, where the report said no setting was known (a walk, checked there: the read gone,
    the Dice the same)."""
    frames = [
        ("<built-in>", "item"),
        ("monai/data/utils.py", "compute_importance_map"),
        ("monai/inferers/utils.py", "sliding_window_inference"),
    ]
    advice = catalogue.advice_for("scalar_readback", ["aten::item"], frames=frames)
    assert advice["title"] == "Pass sliding_window_inference a roi_weight_map computed once"
    assert "roi_weight_map=roi_w" in advice["after"]
    assert "library_code" not in advice or advice["library_code"] is None


@pytest.mark.parametrize(
    ("frames", "title"),
    [
        (
            [
                ("<built-in>", "unique"),
                (
                    "torchmetrics/functional/classification/precision_recall_curve.py",
                    "_multiclass_precision_recall_curve_tensor_validation",
                ),
            ],
            "Build torchmetrics' metrics with validate_args=False",
        ),
        (
            [("torchmetrics/aggregation.py", "_cast_and_nan_check_input")],
            'Build torchmetrics\' aggregations with nan_strategy="disable"',
        ),
    ],
)
def test_torchmetrics_auroc_checks_and_nan_checks_get_their_settings(frames, title):
    """AUROC's input check and MeanMetric's NaN check were "an edit of torchmetrics' own
    code" where ``validate_args=False`` and ``nan_strategy="disable"`` remove them (a walk,
    both applied there: the reads gone, the results the same)."""
    advice = catalogue.advice_for("scalar_readback", ["aten::is_nonzero"], frames=frames)
    assert advice["title"] == title
    assert advice.get("library_code") is None


@pytest.mark.parametrize(
    ("frames", "title", "setting"),
    [
        (
            [
                ("<built-in>", "item"),
                ("ignite/engine/__init__.py", "<lambda>"),
                ("ignite/engine/__init__.py", "update"),
            ],
            "Return the loss tensor from Ignite's trainer: output_transform=... loss.detach()",
            "output_transform=lambda x, y, y_pred, loss: loss.detach()",
        ),
        (
            [
                ("<built-in>", "item"),
                ("ignite/handlers/base_logger.py", "handle_value_fn"),
                ("ignite/handlers/base_logger.py", "_setup_output_metrics_state_attrs"),
            ],
            "Attach Ignite's progress bar and loggers every N iterations, not every one",
            "event_name=Events.ITERATION_COMPLETED(every=50)",
        ),
        (
            [
                ("<built-in>", "item"),
                ("ignite/metrics/accuracy.py", "compute"),
                ("ignite/metrics/metric.py", "completed"),
            ],
            "Build Ignite's metrics with device=device",
            "Accuracy(device=device)",
        ),
    ],
)
def test_ignites_default_output_and_progress_bar_reads_get_their_settings(frames, title, setting):
    """``create_supervised_trainer``'s default ``output_transform`` (``loss.item()``), a
    ``ProgressBar`` attached to every iteration and a metric's ``compute()`` were "an edit of
    ignite's own code: no setting of it is known" (a walk: ``loss.detach()`` returned left no
    read; ``every=4``, 1 in 4; a metric on the CPU, the default, copies every batch)."""
    advice = catalogue.advice_for("scalar_readback", ["aten::item"], frames=frames)
    assert advice["title"] == title
    assert setting in advice["after"]
    assert advice.get("library_code") is None


def test_gpytorchs_debug_checks_get_the_setting_that_turns_them_off() -> None:
    """``ExactGP.__call__`` compares its inputs with the training data (``torch.equal``) under
    ``gpytorch.settings.debug``, on by default: it was "an edit of gpytorch's own code"
    with the generic ``torch.equal`` fix (a walk: the read gone with the setting off). Other
    ``torch.equal`` reads of GPyTorch (a kernel's ``covar_dist``) keep the generic fix."""
    check = [("<built-in>", "equal"), ("gpytorch/models/exact_gp.py", "<genexpr>")]
    advice = catalogue.advice_for("scalar_readback", ["aten::equal"], frames=check)
    assert advice["title"].endswith("gpytorch.settings.debug(False)")
    assert "with gpytorch.settings.debug(False):" in advice["after"]
    kernel = [("<built-in>", "equal"), ("gpytorch/kernels/kernel.py", "covar_dist")]
    other = catalogue.advice_for("scalar_readback", ["aten::equal"], frames=kernel)
    assert "gpytorch.settings" not in other["title"]


@pytest.mark.parametrize(
    ("file", "func"),
    [
        ("linear_operator/utils/linear_cg.py", "linear_cg"),
        ("linear_operator/utils/lanczos.py", "lanczos_tridiag"),
        ("linear_operator/functions/_pivoted_cholesky.py", "forward"),
    ],
)
def test_gpytorchs_iterative_solvers_reads_get_the_cholesky_size_setting(file, func) -> None:
    """Above ``max_cholesky_size`` GPyTorch's CG, Lanczos and pivoted Cholesky read back
    every iteration (a walk at 2,000 points: 1,130 reads a run in Lanczos alone), which the
    setting raised above the training size removes (164 to 13 training reads, 1,220 to 30
    in prediction); they were "an edit of linear_operator's own code"."""
    frames = [("<built-in>", "item"), (file, func), ("gpytorch/models/exact_gp.py", "__call__")]
    advice = catalogue.advice_for("scalar_readback", ["aten::is_nonzero"], frames=frames)
    assert "max_cholesky_size" in advice["after"]


@pytest.mark.parametrize("package", ["fastcore", "fastprogress", "gpytorch", "linear_operator"])
def test_fastais_and_gpytorchs_own_packages_are_known_libraries(package: str) -> None:
    """With fastai not installed where the report ran, fastcore's dispatch
    (``fastcore/basics.py``'s ``__call__``) was taken for the user's code and every site
    put there (a walk); GPyTorch's linear algebra is linear_operator's."""
    frames = [("<built-in>", "item"), (f"{package}/core.py", "f"), ("fastai/learner.py", "fit")]
    assert catalogue.library_package(f"{package}/core.py") == package
    assert catalogue.called_library(frames[:2]) == package


def test_whispers_timestamp_rules_get_without_timestamps_and_its_other_reads_do_not() -> None:
    """Whisper's ``ApplyTimestampRules.apply`` reads back several values a token: its fix was
    a generic one, with no word that it is whisper's code, where ``without_timestamps=True``
    removes every one of them (a walk: 81 reads a step down to 22 with a language given)."""
    rules = [("<built-in>", "item"), ("whisper/decoding.py", "apply")]
    advice = catalogue.advice_for("scalar_readback", ["aten::is_nonzero"], frames=rules)
    assert "without_timestamps=True" in advice["after"]
    loop = [("<built-in>", "item"), ("whisper/decoding.py", "_main_loop")]
    other = catalogue.advice_for("scalar_readback", ["aten::is_nonzero"], frames=loop)
    assert "without_timestamps" not in other["title"]
    assert other["library_code"] == "whisper"


def test_pyros_nan_and_inf_checks_get_its_validation_setting() -> None:
    """Pyro's ``warn_if_nan`` / ``warn_if_inf`` at every sample site were "Do not branch on a
    GPU tensor", an edit of pyro/util.py, where ``pyro.enable_validation(False)`` removes
    them (a walk: 44.0 reads a step to 8.0, the loss the same)."""
    for func in ("warn_if_nan", "warn_if_inf"):
        frames = [("<built-in>", "item"), ("pyro/util.py", func), ("pyro/infer/svi.py", "step")]
        advice = catalogue.advice_for("scalar_readback", ["aten::is_nonzero"], frames=frames)
        assert "pyro.enable_validation(False)" in advice["after"]


def test_torchdiffeqs_step_control_gets_fewer_steps_and_its_checks_do_not() -> None:
    """torchdiffeq's adaptive solvers read every step they try; the fix a user has is the
    steps they ask for (tolerances, a fixed-step method), for the reads of the step
    control's own code only: its input checks, once a call, keep theirs."""
    step = [("<built-in>", "item"), ("torchdiffeq/_impl/rk_common.py", "_adaptive_step")]
    advice = catalogue.advice_for("scalar_readback", ["aten::is_nonzero"], frames=step)
    assert "method='rk4'" in advice["after"]
    under = [("torchdiffeq/_impl/misc.py", "_check_inputs"), *step[1:]]
    other = catalogue.advice_for("scalar_readback", ["aten::is_nonzero"], frames=under)
    assert "rk4" not in other["after"] and other["library_code"] == "torchdiffeq"


@pytest.mark.parametrize(
    ("file", "edited"),
    [
        ("odesolve/_impl/rk_common.py", "odesolve"),
        ("/venv/lib/python3.11/site-packages/odesolve/solver.py", "odesolve"),
        ("logging/__init__.py", None),
        ("torch/_tensor.py", None),
        ("solver.py", None),
    ],
)
def test_a_fix_in_an_installed_library_the_catalogue_does_not_know_says_whose_code_it_edits(
    file: str, edited: str | None
) -> None:
    """torchdiffeq, installed where the report ran but not in the catalogue: its reads got
    fixes written for the user's own code, with no word that they are edits of torchdiffeq
    (a walk: 22 of 24 sites). A library frame's package is named, unless it is Python's own
    (a ``logging`` call formatting a tensor) or torch's."""
    frames = [("<built-in>", "item"), (file, "step")]
    advice = catalogue.advice_for("scalar_readback", ["aten::is_nonzero"], frames=frames)
    assert advice.get("library_code") == edited


def test_a_fix_in_a_librarys_backward_run_by_torch_says_it_edits_that_library() -> None:
    """The user's ``loss.backward()`` is torch's, which ran a library's ``Function.backward``
    (torchdiffeq's adjoint): the code a fix edits is that library's, not torch's."""
    frames = [
        ("<built-in>", "item"),
        ("odelib/adjoint.py", "_solve"),
        ("odelib/adjoint.py", "backward"),
        ("torch/autograd/function.py", "apply"),
        ("torch/_tensor.py", "backward"),
    ]
    advice = catalogue.advice_for("scalar_readback", ["aten::is_nonzero"], frames=frames)
    assert advice["library_code"] == "odelib"
    torch_only = [("<built-in>", "item"), ("torch/_tensor.py", "__repr__")]
    assert "library_code" not in catalogue.advice_for(
        "scalar_readback", ["aten::item"], frames=torch_only
    )


def test_pytorch_metric_learnings_threshold_reducer_gets_the_mean_reducer() -> None:
    """The triplet and contrastive losses' default reducer keeps the losses above zero with a
    boolean mask (a read, and another in its backward): "an edit of
    pytorch_metric_learning's own code" where ``reducer=MeanReducer()`` removes both (a
    walk: 7.6 reads a step to 5.6, the script still training)."""
    frames = [
        ("<built-in>", "nonzero"),
        ("pytorch_metric_learning/reducers/threshold_reducer.py", "element_reduction_helper"),
        ("pytorch_metric_learning/losses/base_metric_loss_function.py", "forward"),
    ]
    advice = catalogue.advice_for("dynamic_shape", ["aten::index", "aten::nonzero"], frames=frames)
    assert "reducer=reducers.MeanReducer()" in advice["after"]


def test_a_read_in_compiled_code_says_what_its_fix_means_there():
    """torch.compile's walk: the fixes were eager code's word for word, with nothing saying a
    read in a compiled function also breaks its graph, or that one captured in the graph
    still waits."""
    ops = ["aten::item", "aten::_local_scalar_dense"]
    eager = catalogue.advice_for(catalogue.SCALAR_READBACK, ops)
    assert "compiled" not in eager
    broken = catalogue.advice_for(catalogue.SCALAR_READBACK, ops, compiled=catalogue.GRAPH_BREAK)
    assert "breaks the graph" in broken["compiled"]
    captured = catalogue.advice_for(catalogue.SCALAR_READBACK, ops, compiled=catalogue.IN_GRAPH)
    assert "still waits" in captured["compiled"]
    assert {k: v for k, v in broken.items() if k != "compiled"} == eager


def test_segment_anythings_per_batch_reads_get_points_per_batch() -> None:
    """Segment Anything's automatic mask generator filters every batch of points on the
    host: its reads said "an edit of segment_anything's own code: no setting of it is known
    to avoid this", and its ``if not torch.all(keep_mask)`` got "Do not branch", which,
    applied, filtered 5 more keys every batch (80 reads to 120). A larger
    ``points_per_batch`` halved them (150 to 75, a walk). Its per-crop NMS keeps its own."""
    batch = ("segment_anything/automatic_mask_generator.py", "_process_batch")
    guard = [
        ("<built-in>", "all"),
        batch,
        ("segment_anything/automatic_mask_generator.py", "generate"),
    ]
    advice = catalogue.advice_for("scalar_readback", ["aten::is_nonzero"], frames=guard)
    assert "points_per_batch=" in advice["after"]
    assert advice.get("library_code") is None
    filtering = [("segment_anything/utils/amg.py", "filter"), batch]
    mask = catalogue.advice_for("dynamic_shape", ["aten::index", "aten::nonzero"], frames=filtering)
    assert mask["title"] == advice["title"]
    crop = [
        ("torchvision/ops/boxes.py", "batched_nms"),
        ("segment_anything/automatic_mask_generator.py", "_process_crop"),
    ]
    nms = catalogue.advice_for("dynamic_shape", ["torchvision::nms"], frames=crop)
    assert "points_per_batch" not in nms["title"]
    assert catalogue.library_package("segment_anything/utils/amg.py") == "segment_anything"


def test_the_attention_mask_fix_is_only_where_the_user_makes_the_models_batch() -> None:
    """Hugging Face's mask check says "Pass attention_mask=None": right where the user's
    line or the Trainer (the user's dataset) calls the model. Under sentence-transformers
    (a walk), which tokenizes and passes the mask itself, nothing of the user's can drop it:
    ``encode``'s reads get its batch size and ``convert_to_tensor``, its trainer's none."""
    truth = ["aten::is_nonzero", "aten::item", "aten::_local_scalar_dense"]
    mask = ("transformers/masking_utils.py", "_ignore_bidirectional_mask_sdpa")
    bert = ("transformers/models/bert/modeling_bert.py", "forward")
    module = ("torch/nn/modules/module.py", "_call_impl")
    st_module = ("sentence_transformers/models/Transformer.py", "forward")

    def title(*outside: tuple[str, str]) -> str:
        frames = [mask, bert, module, *outside]
        return catalogue.advice_for(catalogue.SCALAR_READBACK, truth, frames=frames)["title"]

    hf = "Pass attention_mask=None when no sequence is padded"
    assert title() == hf
    assert title(("transformers/trainer.py", "compute_loss")) == hf
    encode = title(
        st_module,
        module,
        ("sentence_transformers/sentence_transformer/model.py", "_inference"),
        ("sentence_transformers/sentence_transformer/model.py", "encode"),
    )
    assert encode == "Encode in larger batches, and keep the embeddings on the device"
    training = title(
        st_module,
        ("sentence_transformers/losses/MultipleNegativesRankingLoss.py", "forward"),
        ("transformers/trainer.py", "compute_loss"),
    )
    assert training not in (hf, encode)


def test_torchrls_tanh_normal_bounds_check_gets_python_number_bounds() -> None:
    """A TorchRL PPO walk: ``TanhNormal`` checks tensor bounds on the host once per action
    sampled; the fix said "an edit of torchrl's own code: no setting of it is known",
    where bounds given as Python numbers took 1,920 reads away in 5 steps. Only for the
    reads in its ``__init__`` itself (not a sampling method's)."""
    tanh = ("torchrl/modules/distributions/continuous.py", "__init__")
    frames = [("<built-in>", "all"), tanh, ("tensordict/nn/probabilistic.py", "get_dist")]
    advice = catalogue.advice_for(catalogue.SCALAR_READBACK, ["aten::is_nonzero"], frames=frames)
    assert advice["title"] == "Pass TanhNormal's low and high as Python numbers"
    assert advice.get("library_code") is None
    deeper = [("torchrl/modules/distributions/utils.py", "safeatanh"), *frames[1:]]
    other = catalogue.advice_for(catalogue.SCALAR_READBACK, ["aten::is_nonzero"], frames=deeper)
    assert other["title"] != advice["title"]


def test_a_fix_in_a_library_another_library_called_edits_the_one_whose_line_reads():
    """denoising-diffusion-pytorch's Trainer calls ema_pytorch's ``EMA.update``, which
    reads its step counter: the fix was "an edit of denoising_diffusion_pytorch's own
    code" beside "synced in ema_pytorch/ema_pytorch.py:280" (a walk). A known library the
    user called does not come first either (a BoTorch walk: gpytorch's and linear_operator's
    reads named botorch's under one call, gpytorch's under another), and a torch frame
    between is passed over."""
    from tb_syncfinder.catalogue import edited_library

    site = "/venv/lib/python3.11/site-packages"
    frames = [
        (f"{site}/ema_pytorch/ema_pytorch.py", "update"),
        (f"{site}/torch/utils/_contextlib.py", "decorate_context"),
        (f"{site}/denoising_diffusion_pytorch/denoising_diffusion_pytorch.py", "train"),
    ]
    assert edited_library(frames) == "ema_pytorch"
    assert edited_library([(f"{site}/torch/nn/modules/module.py", "_call_impl"), *frames]) == (
        "ema_pytorch"
    )
    known = [*frames[:2], (f"{site}/ultralytics/engine/trainer.py", "train")]
    assert edited_library(known) == "ema_pytorch"
    botorch = [
        (f"{site}/linear_operator/utils/cholesky.py", "psd_safe_cholesky"),
        (f"{site}/gpytorch/distributions/multivariate_normal.py", "rsample"),
        (f"{site}/botorch/optim/optimize.py", "optimize_acqf"),
    ]
    assert edited_library(botorch) == "linear_operator"
    assert edited_library(botorch[1:]) == "gpytorch"


def test_a_known_librarys_operator_read_is_an_edit_of_the_package_calling_it():
    """ultralytics calls torchvision's NMS per image (through a torch wrapper, so the user's
    line called no known library first): the fix is in ultralytics' loop, not an edit of
    torchvision, whose operator reads by its nature."""
    from tb_syncfinder.catalogue import edited_library

    site = "/venv/lib/python3.11/site-packages"
    frames = [
        ("<built-in>", "nms"),
        (f"{site}/torch/_ops.py", "__call__"),
        (f"{site}/torchvision/ops/boxes.py", "nms"),
        (f"{site}/ultralytics/utils/nms.py", "non_max_suppression"),
        (f"{site}/ultralytics/models/yolo/detect/predict.py", "postprocess"),
        (f"{site}/ultralytics/engine/predictor.py", "stream_inference"),
        ("<built-in>", "send"),
        (f"{site}/torch/utils/_contextlib.py", "generator_context"),
    ]
    assert edited_library(frames) == "ultralytics"


def test_a_librarys_conversion_helper_is_passed_for_the_line_that_called_it() -> None:
    """Tianshou copies through ``to_numpy`` (``x.detach().cpu().numpy()``) everywhere: its
    copies were all named at that one line (a walk); the calling line tells an action's copy
    from a statistic's. Its other functions are its own code."""
    site = "/venv/lib/python3.11/site-packages/tianshou/data/utils/converter.py"
    assert catalogue.wraps_one_op(site, "to_numpy")
    assert not catalogue.wraps_one_op(site, "to_torch")
    assert not catalogue.wraps_one_op("tianshou/algorithm/modelfree/dqn.py", "forward")


def test_a_running_averages_read_on_completion_gets_no_metric_device_fix() -> None:
    """``Metric.completed`` reads a metric computed as a tensor (``RunningAverage``, every
    iteration): on any device it waits there, so ``device=device`` removes nothing (a
    review). An ``Accuracy``'s ``compute()`` read keeps that fix."""
    frames = [("<built-in>", "item"), ("ignite/metrics/metric.py", "completed")]
    advice = catalogue.advice_for("scalar_readback", ["aten::item"], frames=frames)
    assert advice["title"] != "Build Ignite's metrics with device=device"


@pytest.mark.parametrize(
    ("frames", "edited"),
    [
        # TRL's SFTTrainer.compute_loss, run by transformers' Trainer.train().
        (
            [
                ("<built-in>", "item"),
                ("trl/trainer/sft_trainer.py", "compute_loss"),
                ("transformers/trainer.py", "training_step"),
                ("transformers/trainer.py", "_inner_training_loop"),
                ("transformers/trainer.py", "train"),
            ],
            "trl",
        ),
        # A LightningModule of another package, run by Lightning's fit loop.
        (
            [
                ("<built-in>", "item"),
                ("pytorch_forecasting/models/base_model.py", "training_step"),
                ("lightning/pytorch/loops/fit_loop.py", "run"),
                ("lightning/pytorch/trainer/trainer.py", "fit"),
            ],
            "pytorch_forecasting",
        ),
        # A LightningModule's step run through torch's optimizer closure (Lightning's
        # automatic optimization): torch's frames between are no package's to edit.
        (
            [
                ("<built-in>", "item"),
                ("pytorch_forecasting/models/temporal_fusion_transformer/_tft.py", "forward"),
                ("pytorch_forecasting/models/base/_base_model.py", "training_step"),
                ("lightning/pytorch/core/module.py", "_closure"),
                ("torch/optim/optimizer.py", "wrapper"),
                ("torch/optim/adam.py", "step"),
                ("lightning/pytorch/core/optimizer.py", "step"),
                ("lightning/pytorch/loops/fit_loop.py", "run"),
                ("lightning/pytorch/trainer/trainer.py", "fit"),
            ],
            "pytorch_forecasting",
        ),
        # transformers' mask check in a model sentence-transformers' loss runs under
        # transformers' Trainer: transformers', whose line reads.
        (
            [
                ("<built-in>", "item"),
                ("transformers/masking_utils.py", "_ignore_bidirectional_mask_sdpa"),
                ("transformers/models/bert/modeling_bert.py", "forward"),
                ("sentence_transformers/models/Transformer.py", "forward"),
                ("sentence_transformers/trainer.py", "compute_loss"),
                ("transformers/trainer.py", "training_step"),
                ("transformers/trainer.py", "train"),
            ],
            "transformers",
        ),
        # Trainer's own read, and the model it runs: transformers'.
        (
            [
                ("<built-in>", "item"),
                ("transformers/models/llama/modeling_llama.py", "forward"),
                ("transformers/trainer.py", "training_step"),
                ("transformers/trainer.py", "train"),
            ],
            "transformers",
        ),
    ],
)
def test_a_read_in_code_a_librarys_loop_runs_is_an_edit_of_that_code(frames, edited) -> None:
    """Reads in TRL's ``compute_loss``, under ``trainer.train()``, were "an edit of
    transformers' own code" (a walk: 17 of DPO's 25 reads a step): the loop's library runs
    other packages' code, and the first package its frames call into is the one to edit."""
    advice = catalogue.advice_for("scalar_readback", ["aten::item"], frames=frames)
    assert advice.get("library_code") == edited


def test_fabrics_clip_and_log_get_the_fix_of_the_users_call() -> None:
    """Lightning Fabric's ``clip_gradients`` checks the norm by default: the fix said to
    leave ``error_if_nonfinite`` off "(the default)", a call the user never wrote; and
    ``fabric.log("loss", loss)`` was "an edit of lightning's own code" (a walk)."""
    clip = [
        ("<built-in>", "item"),
        ("torch/nn/utils/clip_grad.py", "_get_total_norm"),
        ("torch/nn/utils/clip_grad.py", "clip_grad_norm_"),
        ("lightning/fabric/fabric.py", "clip_gradients"),
    ]
    advice = catalogue.advice_for("scalar_readback", ["aten::is_nonzero"], frames=clip)
    assert advice["title"] == "Pass error_if_nonfinite=False to fabric.clip_gradients"
    log = [
        ("<built-in>", "item"),
        ("lightning/fabric/utilities/apply_func.py", "convert_tensors_to_scalars"),
        ("lightning/fabric/loggers/csv_logs.py", "log_metrics"),
        ("lightning/fabric/fabric.py", "log_dict"),
        ("lightning/fabric/fabric.py", "log"),
    ]
    advice = catalogue.advice_for("scalar_readback", ["aten::item"], frames=log)
    assert advice.get("library_code") is None


@pytest.mark.parametrize(
    ("frames", "ops", "title"),
    [
        (
            [("<built-in>", "nonzero"), ("pykeen/losses.py", "process_lcwa_scores")],
            ["aten::nonzero"],
            'Train PyKEEN\'s LCWA loop with a pointwise loss: loss="BCEWithLogits"',
        ),
        (
            [
                ("<built-in>", "nonzero"),
                ("pykeen/evaluation/evaluator.py", "create_sparse_positive_filter_"),
            ],
            ["aten::nonzero"],
            "Evaluate PyKEEN with a larger batch_size: its reads are per evaluation batch",
        ),
    ],
)
def test_pykeens_loss_and_evaluation_reads_get_its_settings(frames, ops, title) -> None:
    """PyKEEN's LCWA margin loss and filtered evaluation were "an edit of pykeen's own code:
    no setting of it is known" (a walk: ``loss="BCEWithLogits"`` left no read; the
    evaluation's reads follow its batch size)."""
    advice = catalogue.advice_for("dynamic_shape", ops, frames=frames)
    assert advice["title"] == title


def test_pykeens_de_duplication_of_its_host_triples_is_no_latent_read() -> None:
    """``prepare_filter_triples`` runs ``unique(dim=0)`` on the triples factory's CPU
    triples, through torch's ``Tensor.unique`` wrapper (a walk: listed, told to count into a
    fixed-size tensor)."""
    frames = [
        ("<built-in>", "unique_dim"),
        ("torch/_tensor.py", "unique"),
        ("pykeen/utils.py", "prepare_filter_triples"),
    ]
    assert catalogue.in_host_only_library(frames)


@pytest.mark.parametrize(
    ("frames", "title"),
    [
        # The read is the statistics function's own: its setting turns it off.
        (
            [
                ("<built-in>", "item"),
                ("pytorch_metric_learning/miners/pair_margin_miner.py", "set_stats"),
                ("pytorch_metric_learning/miners/pair_margin_miner.py", "mine"),
                ("pytorch_metric_learning/miners/base_miner.py", "forward"),
            ],
            "Collect the statistics only when you log them: collect_stats=False",
        ),
        # A read of the miner's own, outside its statistics: no setting is known.
        (
            [
                ("<built-in>", "item"),
                ("pytorch_metric_learning/miners/pair_margin_miner.py", "mine"),
                ("pytorch_metric_learning/miners/base_miner.py", "forward"),
            ],
            "Keep the value on the device; read it every N steps",
        ),
    ],
)
def test_pytorch_metric_learnings_statistics_reads_get_their_setting(frames, title) -> None:
    """A walk: ``PairMarginMiner(..., collect_stats=True)`` read two means a step in
    ``set_stats``, under ``if self.collect_stats:``, and was told "an edit of
    pytorch_metric_learning's own code: no setting of it is known"."""
    advice = catalogue.advice_for(
        "scalar_readback", ["aten::item", "aten::_local_scalar_dense"], frames=frames
    )
    assert advice["title"] == title


def test_a_backward_a_librarys_loop_ran_takes_the_fix_of_its_forwards_library() -> None:
    """A walk: under pytorch-metric-learning's ``MetricLossOnly`` trainer, the reducer's
    mask got ``reducer=MeanReducer()`` in its forward row and "an edit of
    pytorch_metric_learning's own code" in its backward row, run by the trainer's
    ``loss.backward()``: one setting removes both."""
    from tb_syncfinder.models import Frame

    user = Frame("train.py", 184, "main", True)
    backward = [
        Frame("torch/_tensor.py", 625, "backward", False),
        Frame("pytorch_metric_learning/trainers/base_trainer.py", 169, "backward", False),
        Frame("pytorch_metric_learning/trainers/base_trainer.py", 120, "train", False),
        user,
    ]
    forward = [
        Frame(
            "pytorch_metric_learning/reducers/threshold_reducer.py",
            36,
            "element_reduction_helper",
            False,
        ),
        Frame(
            "pytorch_metric_learning/trainers/base_trainer.py", 160, "forward_and_backward", False
        ),
        user,
    ]
    frames = catalogue.fix_frames(backward, forward)
    advice = catalogue.advice_for("dynamic_shape", ["aten::nonzero"], frames=frames)
    assert advice["title"] == "Average every loss: reducer=reducers.MeanReducer()"
    # A backward whose own library has a fix keeps it.
    assert catalogue.fix_frames(forward, backward) == catalogue.library_frames(forward)


@pytest.mark.parametrize(
    "frames",
    [
        [("<built-in>", "item"), ("opacus/layers/dp_rnn.py", "forward_layer")],
        [("<built-in>", "__int__"), ("opacus/layers/dp_rnn.py", "forward")],
        [("<built-in>", "item"), ("opacus/utils/packed_sequences.py", "compute_seq_lengths")],
    ],
)
def test_opacus_dp_rnns_reads_of_a_packed_sequences_batch_sizes_are_no_latent_reads(frames):
    """A walk: Opacus' ``DPLSTM`` on packed input read its ``batch_sizes`` (a CPU tensor by
    construction) 48 times a step in Python, listed as three sites to edit Opacus for."""
    assert catalogue.in_host_only_library(frames)
    assert not catalogue.in_host_only_library(
        [("<built-in>", "item"), ("opacus/optimizers/optimizer.py", "clip_and_accumulate")]
    )


def test_a_librarys_tensor_like_forwarding_the_users_read_is_no_edit_of_the_library() -> None:
    """A walk: with Opacus' ghost clipping the loss is its ``DPTensorFastGradientClipping``,
    whose ``item()`` is ``return self.detach().item()``: the user's ``loss.item()`` was
    told to be "an edit of opacus' own code"."""
    from tb_syncfinder.models import Frame

    user = Frame("train.py", 28, "train", True)
    forwarded = [
        Frame("<built-in>", None, "item", False),
        Frame("opacus/utils/fast_gradient_clipping_utils.py", 52, "item", False),
        user,
    ]
    assert catalogue.library_frames(forwarded) == []
    assert catalogue.edited_library(catalogue.library_frames(forwarded)) is None
    # A library's own method that reads through its own code is the library's.
    own = [
        Frame("<built-in>", None, "item", False),
        Frame("opacus/accountants/rdp.py", 80, "get_epsilon", False),
        Frame("opacus/privacy_engine.py", 600, "get_epsilon", False),
        user,
    ]
    assert catalogue.library_frames(own) == [
        ("<built-in>", "item"),
        ("opacus/accountants/rdp.py", "get_epsilon"),
        ("opacus/privacy_engine.py", "get_epsilon"),
    ]


def test_an_evaluate_metrics_copies_of_the_users_tensors_are_the_users_with_a_fix() -> None:
    """A walk of accelerate's examples: ``metric.add_batch(predictions=..., references=...)``
    of device tensors copied each to the host through ``datasets``' conversion, and the
    copies were left to the footnote of library copies, no site listed."""
    frames = [
        ("<built-in>", "cpu"),
        ("datasets/features/features.py", "_cast_to_python_objects"),
        ("datasets/features/features.py", "cast_to_python_objects"),
        ("evaluate/module.py", "add_batch"),
    ]
    assert catalogue.converts_a_logged_value(frames)
    advice = catalogue.advice_for(
        "device_to_host_copy", ["aten::to", "aten::_to_copy"], frames=frames
    )
    assert advice["title"].startswith("Keep the predictions on the device")
    assert "library_code" not in advice
    assert not catalogue.converts_a_logged_value(
        [("<built-in>", "cpu"), ("transformers/trainer_pt_utils.py", "nested_numpify")]
    )


def test_accelerates_trigger_check_is_told_to_run_every_n_steps() -> None:
    """A walk: ``if accelerator.check_trigger(): break`` every batch was told "an edit of
    accelerate's own code: no setting of it is known"; how often it runs is the user's."""
    frames = [("<built-in>", "item"), ("accelerate/accelerator.py", "check_trigger")]
    advice = catalogue.advice_for(
        "scalar_readback", ["aten::item", "aten::_local_scalar_dense"], frames=frames
    )
    assert advice["title"].startswith("Check the trigger every N steps")
    assert "library_code" not in advice


def test_lightnings_checkpoint_name_gets_its_own_fix_not_a_prints() -> None:
    """A walk of lightly's Lightning MoCo: ``ModelCheckpoint``'s file name, formatted from
    the host tensors ``epoch`` and ``step`` once a save, was told "Do not print device
    tensors inside the step"; the user prints nothing."""
    ops = [catalogue.TENSOR_TEXT_OP, "aten::item", "aten::_local_scalar_dense"]
    frames = [
        ("torch/_tensor.py", "__format__"),
        ("pytorch_lightning/callbacks/model_checkpoint.py", "_format_checkpoint_name"),
        ("pytorch_lightning/callbacks/model_checkpoint.py", "format_checkpoint_name"),
    ]
    advice = catalogue.advice_for("scalar_readback", ops, frames=frames)
    assert advice["title"].startswith("Lightning's checkpoint name")
    # Another library's print keeps the print's fix.
    other = [("torch/_tensor.py", "__format__"), ("mylib/report.py", "show")]
    assert catalogue.advice_for("scalar_readback", ops, frames=other)["title"] == (
        "Do not print device tensors inside the step"
    )


def test_captums_reads_of_a_one_element_target_are_told_to_pass_an_int() -> None:
    """A Captum walk: ``target=model(x).argmax(1)`` for one example is read with ``.item()``
    twice a forward in ``_select_targets``, told "an edit of captum's own code"."""
    frames = [("<built-in>", "item"), ("captum/_utils/common.py", "_select_targets")]
    advice = catalogue.advice_for(
        "scalar_readback", ["aten::item", "aten::_local_scalar_dense"], frames=frames
    )
    assert advice["title"].startswith("Give Captum a one-element target as an int")
    assert "library_code" not in advice


def test_botorchs_input_checks_get_their_setting() -> None:
    """A BoTorch walk: a model built each iteration checks its data (``check_no_nans``,
    ``check_standardization``), told "an edit of botorch's own code: no setting of it is
    known"; ``validate_input_scaling(False)`` skips them."""
    for func in ("check_no_nans", "check_min_max_scaling", "check_standardization"):
        frames = [
            ("<built-in>", "item"),
            ("botorch/models/utils/assorted.py", func),
            ("botorch/models/utils/assorted.py", "validate_input_scaling"),
        ]
        advice = catalogue.advice_for(
            "scalar_readback", ["aten::item", "aten::_local_scalar_dense"], frames=frames
        )
        assert advice["title"].startswith("Skip BoTorch's input checks"), func


def test_scipys_conversion_of_what_it_is_given_is_no_edit_of_scipy() -> None:
    """A BoTorch walk: scipy's L-BFGS-B converts its bounds with ``float()`` of each
    element it is given (``old_bound_to_new``), told "an edit of scipy's own code"; as with
    numpy, the caller handing it tensors is the one to change."""
    frames = [
        ("<built-in>", "item"),
        ("scipy/optimize/_constraints.py", "<listcomp>"),
        ("scipy/optimize/_constraints.py", "old_bound_to_new"),
        ("scipy/optimize/_minimize.py", "minimize"),
        ("botorch/optim/utils/timeout.py", "minimize_with_timeout"),
    ]
    assert catalogue.edited_library(frames) == "botorch"
    assert catalogue.edited_library(frames[:4]) is None


@pytest.mark.parametrize(
    ("func", "title"),
    [
        ("mask_inputs", "Set mask_ignored_tokens=False"),
        ("forward", "Use CEWithChunkedOutputLoss"),
    ],
)
def test_torchtunes_linear_cross_entropy_reads_get_its_settings(func, title) -> None:
    """A torchtune walk: its default loss's gather and count of the valid tokens were told
    "an edit of torchtune's own code: no setting of it is known", the count a gather's fix."""
    frames = [
        ("<built-in>", "nonzero_numpy"),
        ("torchtune/modules/loss/cross_entropy_loss.py", func),
        ("torchtune/modules/loss/cross_entropy_loss.py", "forward"),
    ]
    advice = catalogue.advice_for("dynamic_shape", ["aten::nonzero"], frames=frames)
    assert advice["title"].startswith(title)
    assert "library_code" not in advice


def test_a_torchtune_loggers_conversion_is_the_users_read() -> None:
    """A torchtune walk: its ``DiskLogger`` writes the recipe's tensors with ``.tolist()``,
    left to the footnote of library copies where its stdout logger's were listed."""
    frames = [
        ("<built-in>", "tolist"),
        ("torchtune/training/metric_logging.py", "<lambda>"),
        ("json/encoder.py", "iterencode"),
        ("torchtune/training/metric_logging.py", "log_dict"),
    ]
    assert catalogue.converts_a_logged_value(frames)
    assert catalogue.edited_library(frames) is None


def test_avalanches_training_metrics_reads_get_their_arguments() -> None:
    """An Avalanche walk: its minibatch and epoch metrics read each iteration's value in
    ``after_training_iteration``, told "an edit of avalanche's own code: no setting"."""
    frames = [
        ("<built-in>", "__float__"),
        ("avalanche/evaluation/metrics/accuracy.py", "update"),
        ("avalanche/evaluation/metric_definitions.py", "update"),
        ("avalanche/evaluation/metric_definitions.py", "after_training_iteration"),
        ("avalanche/training/templates/base_sgd.py", "_after_training_iteration"),
        ("avalanche/training/templates/base.py", "train"),
    ]
    advice = catalogue.advice_for(
        "scalar_readback", ["aten::item", "aten::_local_scalar_dense"], frames=frames
    )
    assert advice["title"].startswith("Drop Avalanche's per-iteration metrics")


@pytest.mark.parametrize(
    ("frames", "title"),
    [
        (
            [("<built-in>", "item"), ("transformer_lens/HookedTransformer.py", "to_single_token")],
            "Look the token up once",
        ),
        (
            [("<built-in>", "__bool__"), ("transformer_lens/ActivationCache.py", "__getitem__")],
            "Look the cache up with a Python int",
        ),
        (
            [
                ("<built-in>", "item"),
                ("transformer_lens/utilities/exploratory_utils.py", "test_prompt"),
            ],
            "Call test_prompt once",
        ),
    ],
)
def test_transformer_lens_reads_the_caller_can_avoid_get_their_fix(frames, title) -> None:
    """A TransformerLens walk: a token looked up in a metric each patch, and a cache looked
    up with a tensor layer, were told "an edit of transformer_lens' own code"."""
    advice = catalogue.advice_for(
        "scalar_readback", ["aten::item", "aten::_local_scalar_dense"], frames=frames
    )
    assert advice["title"].startswith(title)
    assert "library_code" not in advice


def test_sbis_rejection_loop_gets_its_arguments() -> None:
    """An sbi walk: the posterior's rejection loop read its acceptance counts each pass,
    told "an edit of sbi's own code: no setting"; ``reject_outside_prior=False`` and
    ``set_default_x`` took them from 20 a step to 1."""
    frames = [
        ("<built-in>", "item"),
        ("sbi/samplers/rejection/rejection.py", "accept_reject_sample"),
        ("sbi/inference/posteriors/direct_posterior.py", "sample"),
    ]
    advice = catalogue.advice_for(
        "scalar_readback", ["aten::item", "aten::_local_scalar_dense"], frames=frames
    )
    assert advice["title"].startswith("Sample without rejection")


def test_a_backward_a_library_only_called_is_its_forwards_librarys_edit() -> None:
    """An sbi walk: nflows' boolean masks' backward, run by sbi's training loop calling
    ``loss.backward()``, was "an edit of sbi's own code", where its forward named nflows."""
    from tb_syncfinder.models import Frame

    user = Frame("train.py", 30, "<module>", True)
    backward = [
        Frame("torch/autograd/graph.py", 829, "_engine_run_backward", False),
        Frame("torch/autograd/__init__.py", 347, "backward", False),
        Frame("torch/_tensor.py", 625, "backward", False),
        Frame("sbi/inference/trainers/npe/npe_base.py", 400, "train", False),
        user,
    ]
    forward = [
        Frame("nflows/transforms/splines/rational_quadratic.py", 37, "unconstrained_rqs", False),
        Frame("sbi/inference/trainers/npe/npe_base.py", 390, "train", False),
        user,
    ]
    frames = catalogue.fix_frames(backward, forward)
    assert catalogue.edited_library(frames) == "nflows"
