"""The plugin's name, defined once: TensorBoard's route prefix
(``data/plugin/sync_advisor/``), the ``--sync_advisor_*`` flags and the tab's title."""

PLUGIN_NAME = "sync_advisor"
TAB_NAME = "Sync Advisor"


def flag_name(option: str) -> str:
    """The attribute of TensorBoard's parsed flags for one of ours (``source_root`` ->
    ``sync_advisor_source_root``, given on the command line as ``--sync_advisor_source_root``)."""
    return f"{PLUGIN_NAME}_{option}"
