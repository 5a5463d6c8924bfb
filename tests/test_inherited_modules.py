"""A module a library base class builds, called by the attribute it set: pytorch/examples'
word_language_model subclasses ``nn.Transformer`` and calls ``self.encoder(src, mask=...)``,
whose causal-mask check reads back. The file never assigns that ``self.encoder``, and its
other model (``RNNModel``) assigns one of another class, so the call was not placed: the
site was the ``forward`` def line, starred."""

from __future__ import annotations

import runpy
import textwrap

import pytest

from tb_syncfinder import analyze

torch = pytest.importorskip("torch")

_SCRIPT = textwrap.dedent(
    """\
    import torch
    import torch.nn as nn


    class RNNModel(nn.Module):
        def __init__(self):
            super().__init__()
            self.encoder = nn.Embedding(50, 16)

        def forward(self, src):
            return self.encoder(src)


    class TransformerModel(nn.Transformer):
        def __init__(self):
            super().__init__(d_model=16, nhead=2, dim_feedforward=16, num_encoder_layers=1)
            self.emb = nn.Embedding(50, 16)
            self.decoder = nn.Linear(16, 50)

        def forward(self, src, mask):
            x = self.emb(src)
            x = self.encoder(x, mask=mask)
            return self.decoder(x)


    model = TransformerModel()
    mask = torch.log(torch.tril(torch.ones(10, 10)))
    prof = torch.profiler.profile(
        activities=[torch.profiler.ProfilerActivity.CPU],
        with_stack=True,
        schedule=torch.profiler.schedule(wait=1, warmup=1, active=3),
        on_trace_ready=torch.profiler.tensorboard_trace_handler(LOGDIR),
    )
    prof.start()
    for step in range(5):
        src = torch.randint(0, 50, (10, 4))
        loss = model(src, mask).logsumexp(-1).mean()
        loss.backward()
        prof.step()
    prof.stop()
    """
)


def test_a_module_a_library_base_class_built_is_placed_at_its_call(tmp_path):
    script = tmp_path / "model.py"
    script.write_text(_SCRIPT)
    logdir = tmp_path / "logs"
    runpy.run_path(str(script), init_globals={"LOGDIR": str(logdir)})
    report = analyze(str(logdir), source_roots=[str(tmp_path)])
    (site,) = [s for s in report.latent_sites if s.func == "forward"]
    assert (site.line, site.line_exact, site.count) == (22, True, 3)
