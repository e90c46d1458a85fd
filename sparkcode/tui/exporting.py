"""``/export``: written once for both fronts in :mod:`sparkcode.operations.export`."""

from sparkcode.operations.export import (
    USAGE,
    ExportScreen,
    current_session,
    export_transcript,
    parse_export,
)

__all__ = ["USAGE", "ExportScreen", "current_session", "export_transcript", "parse_export"]
