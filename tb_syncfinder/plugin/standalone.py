"""TensorBoard with every plugin but torch-tb-profiler's, for logdirs of many traces.

torch-tb-profiler's run loader starts one process per trace file, all at once: on a
1,000-rank job that is 1,000 Python processes parsing traces whether the PyTorch Profiler
tab is opened or not, and the machine, TensorBoard and the Sync Advisor with it, stall for
minutes. The Sync Advisor reads such a job from its per-trace summaries in about a second;
run TensorBoard this way to get that:

    python -m tb_syncfinder.plugin.standalone --logdir logs/job [any tensorboard flag]

Everything else is TensorBoard's own command line (``--port``, ``--bind_all``,
``--sync_advisor_*``...).
"""

from __future__ import annotations

import sys
from typing import Any


def plugins_without_pytorch_profiler() -> list[Any]:
    """TensorBoard's plugin loaders (built-in and installed), less torch-tb-profiler's."""
    from tensorboard import default

    def from_pytorch_profiler(plugin: Any) -> bool:
        module = getattr(plugin, "__module__", "") or type(plugin).__module__
        return module.split(".")[0] == "torch_tb_profiler"

    return [p for p in default.get_plugins() if not from_pytorch_profiler(p)]


def main() -> None:
    """``tensorboard``'s own entry point (tensorboard.main.run_main), with these plugins."""
    from absl import app
    from tensorboard import main_lib, program
    from tensorboard.plugins import base_plugin

    main_lib.global_init()
    board = program.TensorBoard(plugins=plugins_without_pytorch_profiler())
    try:
        app.run(board.main, flags_parser=board.configure)
    except base_plugin.FlagsError as exc:
        print(f"Error: {exc}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
