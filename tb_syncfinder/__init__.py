"""tb-syncfinder: the Sync Advisor for PyTorch profiler traces."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tb_syncfinder.models import SCHEMA, Report

__version__ = "0.1.0"


def analyze(path: Any, **options: Any) -> Report:
    """Analyse a trace file, run folder or logdir (a path); see
    ``tb_syncfinder.engine.analyze`` for the options (``source_roots``, ``path_map``,
    ``jobs``, ``whatif``, ``unprofiled_step_us``, ...). Traces of the bundled demo resolve to its
    installed sources. Raises ``engine.NoTracesError`` (a ``FileNotFoundError``) where the
    path holds no trace; a trace that cannot be read is named in the report with why.
    ``report.to_text()`` is the terminal's report, ``report.to_json()`` the JSON.

    ``path`` may also be a stopped ``torch.profiler.profile`` (in a notebook, right after
    its ``with`` block): its trace (with a schedule, its last cycle's) is exported once to
    a temporary file, run ``profiler``, kept while the profiler object lives, so that
    calling this again (other ``source_roots``) reads the same; ``ValueError`` says why
    where it cannot be (never started, its trace already saved by ``on_trace_ready``).
    Source lines are looked for under ``source_roots``, default the working directory."""
    from tb_syncfinder.demo.sources import SOURCE_PACKS
    from tb_syncfinder.engine import analyze as analyze_path

    options.setdefault("source_packs", SOURCE_PACKS)
    if hasattr(path, "export_chrome_trace"):
        options["source_roots"] = _with_scripts_folder(options.get("source_roots"))
        return analyze_path(_exported_trace(path), **options)
    return analyze_path(path, **options)


def _with_scripts_folder(roots: Any) -> list[Any]:
    """``roots`` (default: the working directory) and, after them, the folder of the script
    this process runs: torch records a frame's file relative to its ``sys.path`` entry, so
    ``python scripts/train.py`` records ``train.py``, which the working directory holds
    nowhere but in folders of other scripts of that name (``examples/train.py``)."""
    import os
    import sys

    if roots is None or isinstance(roots, (str, os.PathLike)):
        roots = [roots] if roots is not None else []
    roots = list(roots) or [os.getcwd()]
    script = getattr(sys.modules.get("__main__"), "__file__", None)
    if not script:
        return roots  # a notebook, an interactive interpreter
    folder = os.path.dirname(os.path.abspath(script))
    norm = folder.replace("\\", "/")
    if "site-packages" in norm or "dist-packages" in norm or folder == os.path.dirname(folder):
        return roots  # a launcher (ipykernel's), or the file system's root
    return roots + [folder]


# Where a profiler object's exported trace is kept (an attribute of the profiler, so that
# it lives and goes with it): Kineto saves a trace once only.
_EXPORTED = "_tb_syncfinder_trace"


def _exported_trace(profiler: Any) -> str:
    """The file holding ``profiler``'s trace, exported on the first call; ``ValueError``
    saying what to do where it cannot be."""
    import os

    path = getattr(profiler, _EXPORTED, None)
    if path is not None and os.path.exists(path):
        return path
    import shutil
    import tempfile
    import weakref

    folder = tempfile.mkdtemp(prefix="tb_syncfinder_")
    run = os.path.join(folder, "profiler")  # the report's run name
    os.mkdir(run)
    path = os.path.join(run, "profile.pt.trace.json")
    try:
        profiler.export_chrome_trace(path)
    except (AssertionError, AttributeError, RuntimeError) as exc:
        shutil.rmtree(folder, ignore_errors=True)
        raise ValueError(_export_refused(profiler, exc)) from exc
    weakref.finalize(profiler, shutil.rmtree, folder, True)
    setattr(profiler, _EXPORTED, path)
    return path


def _export_refused(profiler: Any, exc: BaseException) -> str:
    """Why torch would not export the trace, in terms of what to do (its own messages:
    "Trace is already saved.", "Profiler must be initialized...", a None's AttributeError)."""
    text = str(exc)
    if "already saved" in text:
        folder = _handler_folder(profiler)
        where = f"its on_trace_ready handler wrote it to {folder}" if folder else "it was"
        return (
            "this profiler's trace was already saved, and torch saves a trace once: "
            f"{where}; analyse that file (tb_syncfinder.analyze(FOLDER_OR_FILE))"
        )
    if isinstance(exc, AssertionError) or getattr(profiler, "profiler", True) is None:
        return (
            "this profiler recorded nothing: it was never started, or its schedule never "
            "reached an active step (wait + warmup steps ran out first)"
        )
    return (
        "cannot export this profiler's trace: analyse it after it has stopped (after its "
        f"`with` block, or prof.stop()) ({type(exc).__name__}: {exc})"
    )


def _handler_folder(profiler: Any) -> str | None:
    """The folder ``tensorboard_trace_handler(folder)`` was made with, where the profiler
    has one as ``on_trace_ready`` (read from the handler's closure), else None."""
    import os

    handler = getattr(profiler, "on_trace_ready", None)
    for cell in getattr(handler, "__closure__", None) or ():
        value = cell.cell_contents
        if isinstance(value, str) and os.path.isdir(value):
            return value
    return None


def __getattr__(name: str) -> Any:
    # The records are imported on first use, so that ``tb-syncfinder --help`` and the
    # plugin's registration with TensorBoard do not pay for them.
    if name in ("SCHEMA", "Report"):
        from tb_syncfinder import models

        return getattr(models, name)
    raise AttributeError(f"module 'tb_syncfinder' has no attribute {name!r}")


__all__ = ["SCHEMA", "Report", "analyze", "__version__"]
