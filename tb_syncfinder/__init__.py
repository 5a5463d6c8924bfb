"""tb-syncfinder: the Sync Advisor for PyTorch profiler traces."""

from tb_syncfinder.models import SCHEMA, Report

__version__ = "0.1.0"


def analyze(path, **options) -> Report:
    """Analyse a trace file, run folder or logdir; see ``tb_syncfinder.engine.analyze``.
    Traces of the bundled demo resolve to its installed sources."""
    from tb_syncfinder.demo.sources import SOURCE_PACKS
    from tb_syncfinder.engine import analyze as _analyze

    options.setdefault("source_packs", SOURCE_PACKS)
    return _analyze(path, **options)


__all__ = ["SCHEMA", "Report", "analyze", "__version__"]
