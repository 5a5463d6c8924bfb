"""tb-syncfinder: the Sync Advisor for PyTorch profiler traces."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tb_syncfinder.models import SCHEMA, Report

__version__ = "0.1.0"


def analyze(path, **options) -> Report:
    """Analyse a trace file, run folder or logdir; see ``tb_syncfinder.engine.analyze``.
    Traces of the bundled demo resolve to its installed sources.

    ``path`` may also be a stopped ``torch.profiler.profile`` (in a notebook, right after
    its ``with`` block): its trace is exported to a temporary file, analysed and deleted.
    Source lines are looked for under ``source_roots``, default the working directory."""
    from tb_syncfinder.demo.sources import SOURCE_PACKS
    from tb_syncfinder.engine import analyze as _analyze

    options.setdefault("source_packs", SOURCE_PACKS)
    if hasattr(path, "export_chrome_trace"):
        return _analyze_profiler(path, _analyze, options)
    return _analyze(path, **options)


def _analyze_profiler(profiler: Any, analyze_path: Any, options: dict[str, Any]) -> Report:
    import os
    import tempfile

    with tempfile.TemporaryDirectory(prefix="tb_syncfinder_") as folder:
        path = os.path.join(folder, "profile.pt.trace.json")
        try:
            profiler.export_chrome_trace(path)
        except (AssertionError, AttributeError, RuntimeError) as exc:
            # torch says "Profiler must be initialized" before start and fails on a None
            # inside it while it runs: neither names what to do.
            raise ValueError(
                "cannot export this profiler's trace: analyse it after it has stopped "
                f"(after its `with` block, or prof.stop()) ({type(exc).__name__}: {exc})"
            ) from exc
        return analyze_path(path, **options)


def __getattr__(name: str) -> Any:
    # The records are imported on first use, so that ``tb-syncfinder --help`` and the
    # plugin's registration with TensorBoard do not pay for them.
    if name in ("SCHEMA", "Report"):
        from tb_syncfinder import models

        return getattr(models, name)
    raise AttributeError(f"module 'tb_syncfinder' has no attribute {name!r}")


__all__ = ["SCHEMA", "Report", "analyze", "__version__"]
