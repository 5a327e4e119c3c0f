"""Episode viewer: a Rerun recording of one canonical trajectory and its quality report.

The names below are read where no recording is built (the quality step's code version,
the Dagster assets' metadata), so they live here: importing them loads no Rerun.
"""

APPLICATION_ID = "ego_assets"
RECORDING_FILE = "episode.rrd"
# Bumped when the recording of an unchanged trajectory changes (part of the quality
# step's code version: the recording is written beside the quality report).
VIEWER_VERSION = "viewer-2"

__all__ = ["APPLICATION_ID", "RECORDING_FILE", "VIEWER_VERSION"]
