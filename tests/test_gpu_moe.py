"""Mixture-of-experts layers recorded on an H200 (``gpu_moe/``, docs/validation.md section
15): where their expert dispatch waits for the GPU, the lines the report names against the
lines torch's sync detector warned at, and the fix it gives. No GPU is needed here; the
CPU tests record real torch traces.

A hand-written expert loop (``torch.where(expert_mask[e])`` per expert, as Mixtral's code
in transformers 4.x and many copies of it) was told to "use torch.where with a fixed
shape", which for a router's selection means computing every expert on every token; the
reads of transformers' own eager experts were each told a generic fix of code the user
does not own.
"""

from __future__ import annotations

import ast
import json
import sys
from collections import Counter
from pathlib import Path

import pytest

from tb_syncfinder import analyze, catalogue
from tb_syncfinder.source import loop_around

MOE_DIR = Path(__file__).resolve().parent / "gpu_moe"
INFO = json.loads((MOE_DIR / "moe_pair.json").read_text(encoding="utf-8"))
SOURCE = (MOE_DIR / "moe_pair.py").read_text(encoding="utf-8").splitlines()


def _report(way: str):  # noqa: ANN202
    return analyze(str(MOE_DIR / f"moe_{way}.pt.trace.json.gz"), source_roots=[str(MOE_DIR)])


def _warned(probe: str, way: str) -> Counter:
    """``moe_pair.py`` line -> warnings in one step (the innermost frame in the file)."""
    found: Counter = Counter()
    for entry in INFO["probes"][probe]["ways"][way]["warned"]:
        line = int(entry.split()[0].split(":")[1])
        found[line] += int(entry.rsplit("x", 1)[1])
    return found


@pytest.mark.parametrize(
    ("probe", "way"),
    [("custom", "loop"), ("custom", "counts"), ("transformers", "eager")],
)
def test_every_line_torch_warned_at_is_a_site_with_as_many_syncs_a_step(
    probe: str, way: str
) -> None:
    report = _report(f"{probe}_{way}")
    steps = report.summary.step_count
    by_line: Counter = Counter()
    for site in report.sites:
        assert site.file == "moe_pair.py" and site.line_exact
        by_line[site.line] += site.count / steps
    assert by_line == _warned(probe, way)
    assert all(
        SOURCE[line - 1].rstrip().endswith(f"# SYNC: {probe_word(probe, way)}") for line in by_line
    )


def probe_word(probe: str, way: str) -> str:
    return {"loop": "moe_loop", "counts": "moe_counts", "eager": "hf_eager"}[way]


@pytest.mark.parametrize("way", ["custom_grouped", "custom_loop_static", "transformers_grouped_mm"])
def test_the_ways_that_read_nothing_have_no_sync(way: str) -> None:
    probe, name = way.split("_", 1)
    assert INFO["probes"][probe]["ways"][name]["warned"] == []
    report = _report(way)
    assert report.syncs == [] and report.sites == []


def test_an_expert_loop_is_told_to_select_the_groups_once() -> None:
    (site,) = _report("custom_loop").sites
    assert site.line == 83 and site.advice["title"] == catalogue.LOOP_SELECTION_ADVICE.title
    (sync, *_) = _report("custom_loop").syncs
    assert sync.source.loop_line == 81  # for e in range(self.experts):


def test_one_read_per_layer_is_not_a_selection_in_a_loop() -> None:
    (site,) = _report("custom_counts").sites
    assert site.advice["title"] != catalogue.LOOP_SELECTION_ADVICE.title
    assert site.kind == catalogue.DEVICE_TO_HOST_COPY


def test_transformers_eager_experts_are_told_to_use_grouped_mm() -> None:
    report = _report("transformers_eager")
    assert report.summary.syncs_per_step == 164  # 5 per expert and layer, 1 per layer
    assert {site.advice["title"] for site in report.sites} == {catalogue.HF_EXPERTS_ADVICE.title}
    for site in report.sites:
        assert site.library is not None and site.library.file.endswith("modeling_mixtral.py")


def test_the_grouped_ways_keep_the_loops_results() -> None:
    """Recorded: the outputs of the three ways from the same weights are equal, their
    gradients within bfloat16's rounding."""
    differences = INFO["probes"]["custom"]["differences"]
    for way in ("counts", "grouped", "loop_static"):
        assert differences[way]["output"] < 1e-2 and differences[way]["gradients"] < 1e-2


def test_the_loop_advices_code_gives_the_loops_output() -> None:
    torch = pytest.importorskip("torch")
    functional = torch.nn.functional
    if not hasattr(functional, "grouped_mm"):
        pytest.skip("torch without grouped_mm")
    advice = catalogue.LOOP_SELECTION_ADVICE
    torch.manual_seed(0)
    tokens, dim, hidden, num_experts, top_k = 24, 16, 8, 4, 2
    x = torch.randn(tokens, dim)
    w_up = torch.randn(num_experts, dim, 2 * hidden)
    w_down = torch.randn(num_experts, hidden, dim)
    w, chosen = torch.randn(tokens, num_experts).softmax(-1).topk(top_k, dim=-1)
    expert_mask = functional.one_hot(chosen, num_experts).permute(2, 1, 0)

    def expert(e: int, rows: torch.Tensor) -> torch.Tensor:
        gate, up = (rows @ w_up[e]).chunk(2, dim=-1)
        return (functional.silu(gate) * up) @ w_down[e]

    names = dict(torch=torch, F=functional, x=x, w=w, w_up=w_up, w_down=w_down)
    names.update(chosen=chosen, expert_mask=expert_mask, expert=expert)
    names.update(num_experts=num_experts, top_k=top_k, out=torch.zeros_like(x))
    before: dict = dict(names)
    exec(advice.before, before)  # the advice's own snippets, as a user would paste them
    after: dict = dict(names)
    exec(advice.after, after)
    assert torch.allclose(before["out"], after["out"], atol=1e-4)


def test_a_cpu_trace_of_grouped_mm_still_lists_its_read(tmp_path: Path) -> None:
    """grouped_mm's CPU kernel reads its offsets (``aten::item``); CUDA's reads none in
    bfloat16 on an H100/H200 (section 15), but its fallback for other dtypes and GPUs copies
    them to the host: a CPU trace cannot say which, so the read stays listed."""
    torch = pytest.importorskip("torch")
    if not hasattr(torch.nn.functional, "grouped_mm"):
        pytest.skip("torch without grouped_mm")
    from torch.profiler import ProfilerActivity, profile

    x = torch.randn(40, 32, requires_grad=True)
    w = torch.randn(4, 32, 48, requires_grad=True)
    offs = torch.tensor([5, 17, 30, 40], dtype=torch.int32)
    path = tmp_path / "grouped.pt.trace.json"
    with profile(activities=[ProfilerActivity.CPU], with_stack=True) as prof:
        out = torch.nn.functional.grouped_mm(x, w, offs=offs)
        out.backward(torch.ones_like(out))  # (a sum's expanded gradient fails on the CPU)
    prof.export_chrome_trace(str(path))
    report = analyze(str(path))
    assert report.latent and all("aten::_grouped_mm" in s.op_chain for s in report.latent)


def test_a_cpu_trace_of_an_expert_loop_gets_the_loop_advice(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    sys.path.insert(0, str(MOE_DIR))
    try:
        import moe_pair
    finally:
        sys.path.remove(str(MOE_DIR))
    from torch.profiler import ProfilerActivity, profile

    torch.manual_seed(0)
    layer = moe_pair.CustomMoE(16, 16, 4, 2, "loop")
    x = torch.randn(32, 16)
    path = tmp_path / "loop.pt.trace.json"
    with profile(activities=[ProfilerActivity.CPU], with_stack=True) as prof:
        layer(x).sum().backward()
    prof.export_chrome_trace(str(path))
    report = analyze(str(path), source_roots=[str(MOE_DIR)])
    loop = [s for s in report.latent_sites if s.line == 83]
    assert loop and loop[0].line_exact
    assert loop[0].advice["title"] == catalogue.LOOP_SELECTION_ADVICE.title


@pytest.mark.parametrize(
    ("line", "loop"),
    [
        (3, 2),  # the loop's variable selects the group
        (4, None),  # in the loop, but no selection by its variable
        (5, None),  # a for header: its iterable is made once
        (7, None),  # a while has no value of its own per pass
        (9, 9),  # a comprehension
        (10, None),
        (13, None),  # another function's loop
        (15, None),  # a micro-batch loop whose mask is not the loop's
        (19, None),  # a while's else runs once
        (20, None),  # a one-line for: its header
        (22, None),  # the comprehension's read is in its iterable, made once
        (24, None),  # an attribute as the loop's target: `h` is only read
        (25, 23),
        (26, 26),  # a generator passed to sum()
    ],
)
def test_a_line_is_in_a_loop_over_groups_when_it_uses_the_loops_value(
    line: int, loop: int | None
) -> None:
    source = (
        "def f(x, masks, m):\n"
        "    for e in range(8):\n"
        "        a, b = torch.where(m[e])\n"
        "        y = g(a)\n"
        "    for i in torch.nonzero(x):\n"
        "        pass\n"
        "    while x.any():\n"
        "        x = x - 1\n"
        "    z = [torch.nonzero(k) for k in masks]\n"
        "    t = torch.nonzero(x)\n"
        "    def inner():\n"
        "        for q in r:\n"
        "            torch.nonzero(q)\n"
        "    for micro in range(2):\n"
        "        sel = x[mask]\n"
        "    while t:\n"
        "        pass\n"
        "    else:\n"
        "        u = torch.nonzero(x)\n"
        "    for e in m.nonzero(): h(e)\n"
        "    return t\n"
        "    rows = [r for r in torch.nonzero(x > 0)]\n"
        "    for h.cur, (a, b) in masks:\n"
        "        z = torch.nonzero(h.mask)\n"
        "        w = torch.nonzero(a)\n"
        "    s = sum(torch.nonzero(k).numel() for k in masks)\n"
    )
    (function,) = ast.parse(source).body
    assert loop_around(function, line) == loop


def test_transformers_experts_advice_is_for_the_models_own_loop_only() -> None:
    """The wrapper in integrations/moe.py also runs batched_mm, grouped_mm's fallback and
    implementations a user registers: only the model's own experts' forward under it is the
    eager loop."""
    wrapper = ("/venv/site-packages/transformers/integrations/moe.py", "forward")
    ops = ["aten::item", "aten::_local_scalar_dense"]
    eager = ("/venv/site-packages/transformers/models/qwen3_moe/modeling_qwen3_moe.py", "forward")
    assert catalogue.library_advice([eager, wrapper], ops) == catalogue.HF_EXPERTS_ADVICE
    mine = ("/home/me/my_experts.py", "my_sorted_experts")
    assert catalogue.library_advice([mine, wrapper], ops) is None


def test_transformers_experts_advice_sees_through_wrappers_and_remote_code() -> None:
    wrapper = ("C:\\venv\\Lib\\site-packages\\transformers\\integrations\\moe.py", "forward")
    ops = ["aten::nonzero"]
    dynamo = ("/venv/site-packages/torch/_dynamo/eval_frame.py", "_fn")
    remote = (
        "/home/me/.cache/huggingface/modules/transformers_modules/org/repo/abc123/modeling_x.py",
        "forward",
    )
    assert catalogue.library_advice([remote, dynamo, wrapper], ops) == catalogue.HF_EXPERTS_ADVICE
