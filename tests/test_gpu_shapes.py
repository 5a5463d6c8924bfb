"""Real H200 recordings (docs/validation.md, section 8): the profiler settings and program
shapes users have, and syncs torch makes inside library calls, against what torch's own
sync detector said on the GPU; and a mixed-precision pair timed without the profiler.

``gpu_shapes/shapes.json`` (``bench/record_real_shapes.py``): per recording, the lines
``torch.cuda.set_sync_debug_mode("warn")`` warned at in the profiled steps; each library
case as a baseline that syncs and the fix the report gives, which warned nothing.
``gpu_shapes/pairs.json`` (``bench/record_savings_pairs.py --only grad_scaler``): the
GradScaler pair's unprofiled step times. The two scripts beside them are the sources the
traces name, as they were then. No GPU is needed here.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tb_syncfinder import analyze
from tb_syncfinder.reader import read_trace

HERE = Path(__file__).resolve().parent / "gpu_shapes"
SHAPES = json.loads((HERE / "shapes.json").read_text(encoding="utf-8"))
PAIRS = json.loads((HERE / "pairs.json").read_text(encoding="utf-8"))
MARKERS = {int(line): what for line, what in SHAPES["markers"].items()}
RECORDINGS = tuple(SHAPES["shapes"])
TRACES = tuple(sorted(p.name for p in HERE.glob("*.pt.trace.json.gz")))
# The fix each library case's baseline gets (its sites' advice titles).
FIXES = {
    "distributions_baseline": {
        "Turn off torch.distributions' argument checks in the training loop",
        "Sample as mean + std * noise, not torch.normal(mean, std)",
    },
    "pack_padded_baseline": {"Sort the batch by length where it is made; pass enforce_sorted=True"},
    "clip_nonfinite_baseline": {"Leave error_if_nonfinite off in clip_grad_norm_"},
    "encoder_padding_baseline": {"Build nn.TransformerEncoder with enable_nested_tensor=False"},
    "causal_mask_baseline": {"Pass is_causal=True with a causal mask"},
    "hf_attention_mask_baseline": {"Pass attention_mask=None when no sequence is padded"},
}


def _analyze(name: str):
    return analyze(HERE / name, source_roots=[str(HERE)])


@pytest.fixture(scope="module")
def reports():
    return {shape: _analyze(row["trace"]) for shape, row in SHAPES["shapes"].items()}


@pytest.mark.parametrize("trace", TRACES)
def test_every_real_recording_decodes_on_the_fast_path(trace: str) -> None:
    """ResNet-50 with every profiler option (record_shapes, stacks, memory, flops, CUPTI
    sync records), Inductor's Triton kernels (cuLaunchKernel), a graph break, CUDA graphs,
    cuDNN's RNN, a Hugging Face model."""
    data = read_trace(str(HERE / trace))
    assert data.fast_path and data.slow_chunks == 0 and data.repairs == []


@pytest.mark.parametrize("shape", RECORDINGS)
def test_each_line_torch_warned_at_is_found_exact_and_nothing_else(reports, shape: str) -> None:
    warned = {int(line) for line in SHAPES["shapes"][shape]["warned"]}
    report = reports[shape]
    found = {s.line for s in report.sites}
    assert found == warned, (shape, found, warned)
    assert all(s.line_exact for s in report.sites), shape
    # Every recording replays (a GRU's cuDNN memsets with no device record included).
    assert all(s.saving_method == "replay" for s in report.sites), shape
    # Every warned line carries a marker saying what syncs there.
    assert warned <= set(MARKERS)


@pytest.mark.parametrize("case", sorted(FIXES))
def test_each_library_sync_gets_the_fix_that_removed_it_on_the_gpu(reports, case: str) -> None:
    assert {s.advice["title"] for s in reports[case].sites} == FIXES[case]
    fixed = case.replace("_baseline", "_fixed")
    assert SHAPES["shapes"][fixed]["warned"] == {} and reports[fixed].sites == []


def test_grad_scalers_read_is_found_with_the_fused_fix_and_its_saving_measured() -> None:
    """``scaler.step`` reads found_inf for an optimizer without a fused step: fused AdamW
    with GradScaler's fused path off (``baseline``) against fused AdamW (``fixed``), timed
    alternately in 5 rounds. The predicted saving lies inside the per-round savings."""
    row = PAIRS["pairs"]["grad_scaler"]
    line = next(n for n, what in PAIRS["markers"].items() if what == "grad_scaler")
    assert row["baseline"]["warned"] == {line: 5} and row["fixed"]["warned"] == {}
    baseline = _analyze(row["baseline"]["trace"])
    (site,) = baseline.sites
    assert (site.line, site.line_exact) == (int(line), True)
    assert site.advice["title"] == "Use a fused optimizer: GradScaler.step then reads nothing back"
    assert site.saving_method == "replay"
    assert _analyze(row["fixed"]["trace"]).sites == []
    rounds = [
        base - fixed
        for base, fixed in zip(row["baseline"]["rounds_ms"], row["fixed"]["rounds_ms"], strict=True)
    ]
    predicted_ms = site.predicted_saving_per_step_us / 1e3
    assert min(rounds) <= predicted_ms <= max(rounds), (predicted_ms, rounds)
    # The default AdamW (foreach) reads the same way, one site at the same line.
    (foreach,) = _analyze(row["foreach"]["trace"]).sites
    assert (foreach.line, foreach.advice["title"]) == (site.line, site.advice["title"])
