"""EgoDex (Apple, 2025): ``[<split>/]<task>/<n>.hdf5`` with its video ``<n>.mp4`` beside it.

Each ``.hdf5`` anchors one episode; the two files land as ``episode.hdf5`` and
``episode.mp4`` of an ``egodex`` capture (`ego_assets.capture.egodex`), keyed
``egodex-<split>.<task>.<n>``.
"""

from __future__ import annotations

from ego_assets.capture.egodex import HDF5_FILE, VIDEO_FILE
from ego_assets.importers.core import Importer, Source, SourceEpisode, episode_key

LICENCE = (
    "EgoDex is released by Apple under the Creative Commons "
    "Attribution-NonCommercial-NoDerivatives 4.0 International licence (CC BY-NC-ND 4.0)."
)


class EgoDexImporter(Importer):
    kind = "egodex"
    capture_kind = "egodex"
    dataset = "egodex"
    licence = LICENCE

    def is_anchor(self, rel: str) -> bool:
        return rel.endswith(".hdf5") and "/" in rel

    def episode(self, source: Source, rel: str) -> SourceEpisode:
        video = rel.removesuffix(".hdf5") + ".mp4"
        if not (source.root / video).is_file():
            raise self.error(rel, video, "the episode's video is missing")
        return SourceEpisode(
            episode_key(self.dataset, rel), rel, {HDF5_FILE: rel, VIDEO_FILE: video}
        )
