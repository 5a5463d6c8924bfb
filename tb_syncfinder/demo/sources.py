"""The demo's workloads as a source pack, so findings in traces recorded from an installed
copy (frames named ``tb_syncfinder/demo/seg.py``) resolve to their lines from any folder.

The CLI, the plugin and ``tb_syncfinder.analyze`` pass ``SOURCE_PACKS`` in the engine's
``Options``; the engine itself knows nothing of the demo. Light on purpose (no torch).
"""

from __future__ import annotations

import os

from tb_syncfinder.source import SourcePack

DEMO_DIR = os.path.dirname(os.path.realpath(__file__))
RECORDED_PREFIX = "tb_syncfinder/demo/"

SOURCE_PACKS = (
    SourcePack(
        recorded_prefix=RECORDED_PREFIX,
        directory=DEMO_DIR,
        # The demo's driver: library code like the rest of tb_syncfinder; cnn.py and seg.py
        # stand in for a user's training script.
        library_files=("__init__.py", "cli.py", "runner.py", "serve.py", "sources.py"),
    ),
)
