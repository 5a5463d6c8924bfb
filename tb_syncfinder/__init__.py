"""tb-syncfinder: the Sync Advisor for PyTorch profiler traces."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tb_syncfinder.models import SCHEMA, Report

__version__ = "0.1.0"


def analyze(path, **options) -> Report:
    """Analyse a trace file, run folder or logdir; see ``tb_syncfinder.engine.analyze``.
    Traces of the bundled demo resolve to its installed sources."""
    from tb_syncfinder.demo.sources import SOURCE_PACKS
    from tb_syncfinder.engine import analyze as _analyze

    options.setdefault("source_packs", SOURCE_PACKS)
    return _analyze(path, **options)


def __getattr__(name: str) -> Any:
    # The records are imported on first use, so that ``tb-syncfinder --help`` and the
    # plugin's registration with TensorBoard do not pay for them.
    if name in ("SCHEMA", "Report"):
        from tb_syncfinder import models

        return getattr(models, name)
    raise AttributeError(f"module 'tb_syncfinder' has no attribute {name!r}")


__all__ = ["SCHEMA", "Report", "analyze", "__version__"]
