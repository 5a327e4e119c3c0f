"""Names, slice offsets and schema strings of the EgoSmith WebDataset format (one place).

``lowdim.npy`` is a float32 vector of 116 values, six segments in this order (every
hand quantity in the capture's world frame, metres; see docs/formats/egosmith-webdataset.md):

=============  ======  =====================================================================
segment        slice   layout
=============  ======  =====================================================================
wrist_state    0:18    left wrist xyz, right wrist xyz, left rot6d, right rot6d
hand_state     18:48   left fingertips (thumb, index, middle, ring, pinky) x xyz, then right
wrist_action   48:66   wrist_state of the next frame of the episode
hand_action    66:96   hand_state of the next frame of the episode
extrinsic      96:112  world -> camera 4x4 (OpenCV camera axes), row-major
intrinsic      112:116 fx, fy, cx, cy in pixels
=============  ======  =====================================================================

``rot6d`` is the first column then the second column of the wrist -> world rotation
matrix: ``(R[0,0], R[1,0], R[2,0], R[0,1], R[1,1], R[2,1])``.
"""

from __future__ import annotations

from types import MappingProxyType

LOWDIM_DIM = 116
LOWDIM_SCHEMA = "hawor_wrist_world_v2"
WRIST_TRANSLATION_SEMANTICS = "mano_joint_0_world"
CAMERA_EXTRINSIC_CONVENTION = "w2c"
DEPTH_SCHEMA = "metric_depth_m"
DEPTH_ENCODING = "npy_float32_hw"

HANDS = ("left", "right")
FINGERS = ("thumb", "index", "middle", "ring", "pinky")

# segment name -> slice of lowdim.npy, in file order
SEGMENTS = MappingProxyType(
    {
        "wrist_state": slice(0, 18),
        "hand_state": slice(18, 48),
        "wrist_action": slice(48, 66),
        "hand_action": slice(66, 96),
        "extrinsic": slice(96, 112),
        "intrinsic": slice(112, 116),
    }
)
WRIST_STATE = SEGMENTS["wrist_state"]
HAND_STATE = SEGMENTS["hand_state"]
WRIST_ACTION = SEGMENTS["wrist_action"]
HAND_ACTION = SEGMENTS["hand_action"]
EXTRINSIC = SEGMENTS["extrinsic"]
INTRINSIC = SEGMENTS["intrinsic"]
STATE = slice(WRIST_STATE.start, HAND_STATE.stop)  # wrist_state + hand_state (48)
ACTION = slice(WRIST_ACTION.start, HAND_ACTION.stop)  # wrist_action + hand_action (48)

# Inside wrist_state (add WRIST_ACTION.start for the same field of the action).
LEFT_TRANS = slice(0, 3)
RIGHT_TRANS = slice(3, 6)
LEFT_ROT6D = slice(6, 12)
RIGHT_ROT6D = slice(12, 18)
# Inside hand_state (add HAND_ACTION.start for the action): 5 fingertips x xyz per hand.
LEFT_TIPS = slice(0, 15)
RIGHT_TIPS = slice(15, 30)

# presence bitmask
PRESENCE_LEFT = 1
PRESENCE_RIGHT = 2

# mano.npy: float32 (2, 6 + P + B), row 0 left, row 1 right: transl (3, m, world) |
# global_orient (3, rad axis-angle, wrist -> world) | hand_pose (P) | betas (B)
MANO_TRANSL = slice(0, 3)
MANO_GLOBAL_ORIENT = slice(3, 6)
MANO_POSE_START = 6
DEFAULT_MANO_PCA = 45
DEFAULT_MANO_BETAS = 10

# Member extensions of one sample, in the order they are written.
EXTENSIONS = ("image.jpg", "lowdim.npy", "mano.npy", "meta.json", "depth.npy")
REQUIRED_EXTENSIONS = ("image.jpg", "lowdim.npy", "mano.npy", "meta.json")

SHARD_PATTERN = "shard-{:06d}.tar"
KEY_PATTERN = "{dataset}_ep{episode:06d}_f{frame:06d}"
MAX_EPISODE = 999_999
MAX_FRAME = 999_999

# meta.json fields every sample has (depth_schema / depth_encoding only with depth.npy).
META_FIELDS = (
    "dataset_name",
    "clip_id",
    "episode_index",
    "split",
    "instruction",
    "instruction_num",
    "language",
    "presence",
    "lowdim_schema",
    "wrist_translation_semantics",
    "camera_extrinsic_convention",
)
DEPTH_META_FIELDS = ("depth_schema", "depth_encoding")
