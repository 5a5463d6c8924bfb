"""The Sync Advisor TensorBoard plugin (``tensorboard_plugins`` entry point ``sync_advisor``).

``SyncAdvisorLoader`` is what the entry point names (it adds the ``--sync_advisor_*`` flags);
``SyncAdvisorPlugin`` is the plugin itself: routes in ``plugin.py``, their answers in
``api.py``, memoised reports in ``selection.py``, background loading in ``loader.py``.
"""

from __future__ import annotations

from typing import Any

from tb_syncfinder.plugin.metadata import PLUGIN_NAME

__all__ = ["PLUGIN_NAME", "SyncAdvisorLoader", "SyncAdvisorPlugin"]


def __getattr__(name: str) -> Any:
    # Imported on use: ``tb_syncfinder.plugin.metadata`` (the name) must not cost a
    # TensorBoard import to the demo's launcher.
    if name == "SyncAdvisorPlugin":
        from tb_syncfinder.plugin.plugin import SyncAdvisorPlugin

        return SyncAdvisorPlugin
    if name == "SyncAdvisorLoader":
        from tb_syncfinder.plugin.tbloader import SyncAdvisorLoader

        return SyncAdvisorLoader
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
