"""TACO-style MANO sequences: one folder per sequence with ``right_hand.pkl`` in it.

The folder holds the hand pickles, shapes, ``egocentric_intrinsic.txt``,
``egocentric_frame_extrinsic.npy`` and one egocentric video (``*.mp4``; TACO ships its
videos in a separate tree: put each beside its poses). A ``mano_sequence.json`` in the
folder, else at the source root, declares a PCA pose (`ego_assets.capture.mano_sequence`).
Each sequence lands as one ``mano_sequence`` capture, keyed ``taco-<folder path>``.
"""

from __future__ import annotations

from ego_assets.capture.mano_sequence import (
    DECLARATION_FILE,
    EXTRINSIC_FILE,
    HAND_FILE,
    HANDS,
    INTRINSIC_FILE,
    SHAPE_FILE,
    VIDEO_FILE,
)
from ego_assets.importers.core import Importer, Source, SourceEpisode, episode_key

LICENCE = "TACO: see the dataset's terms of use (no licence file was found in the source)."
ANCHOR = "right_hand.pkl"


class ManoSequenceImporter(Importer):
    kind = "mano-sequence"
    capture_kind = "mano_sequence"
    dataset = "taco"
    licence = LICENCE

    def is_anchor(self, rel: str) -> bool:
        return rel.endswith("/" + ANCHOR)

    def episode(self, source: Source, rel: str) -> SourceEpisode:
        folder = rel.rsplit("/", 1)[0]
        names = [f.format(side=s) for s in HANDS for f in (HAND_FILE, SHAPE_FILE)]
        names += [INTRINSIC_FILE, EXTRINSIC_FILE]
        files = {name: f"{folder}/{name}" for name in names}
        videos = sorted(p.name for p in (source.root / folder).iterdir() if p.name.endswith(".mp4"))
        if len(videos) != 1:
            found = ", ".join(videos) or "none"
            raise self.error(rel, folder, f"needs exactly one egocentric .mp4 video, found {found}")
        files[VIDEO_FILE] = f"{folder}/{videos[0]}"
        if (source.root / folder / DECLARATION_FILE).is_file():
            files[DECLARATION_FILE] = f"{folder}/{DECLARATION_FILE}"
        elif (source.root / DECLARATION_FILE).is_file():
            files[DECLARATION_FILE] = DECLARATION_FILE
        return SourceEpisode(episode_key(self.dataset, folder), rel, files)
