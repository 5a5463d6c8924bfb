"""The Sync Advisor TensorBoard plugin (``tensorboard_plugins`` entry point ``sync_advisor``).

``SyncAdvisorLoader`` is what the entry point names (it adds the ``--sync_advisor_*`` flags);
``SyncAdvisorPlugin`` is the plugin itself.
"""

from tb_syncfinder.plugin.routes import PLUGIN_NAME, SyncAdvisorPlugin
from tb_syncfinder.plugin.tbloader import SyncAdvisorLoader

__all__ = ["PLUGIN_NAME", "SyncAdvisorLoader", "SyncAdvisorPlugin"]
