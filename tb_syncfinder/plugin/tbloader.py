"""The TBLoader that TensorBoard's ``tensorboard_plugins`` entry point names.

A loader (rather than the plugin class itself) lets the plugin add its own
``--sync_advisor_*`` flags to ``tensorboard``'s command line.
"""

from __future__ import annotations

from typing import Any

from tensorboard.plugins import base_plugin

from tb_syncfinder.plugin import settings


class SyncAdvisorLoader(base_plugin.TBLoader):
    """Defines the plugin's flags and builds the plugin from TensorBoard's context."""

    def define_flags(self, parser: Any) -> None:
        settings.define_flags(parser)

    def fix_flags(self, flags: Any) -> None:
        try:
            settings.check_flags(flags)
        except ValueError as exc:
            raise base_plugin.FlagsError(str(exc)) from None

    def load(self, context: base_plugin.TBContext) -> base_plugin.TBPlugin:
        from tb_syncfinder.plugin.plugin import SyncAdvisorPlugin

        return SyncAdvisorPlugin(
            context, settings.settings_from_flags(context.flags, context.logdir)
        )
