"""``python -m tb_syncfinder``: the same as the ``tb-syncfinder`` command."""

from tb_syncfinder.cli import run

run()
