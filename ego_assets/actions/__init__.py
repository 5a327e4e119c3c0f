"""Robot-ready state and actions derived from the canonical trajectory (pure core).

`ActionSpace` is what a release declares (the spec's ``[actions]`` table);
`derive_actions` turns one `Trajectory` into an `ActionTable` on a clock: wrist pose in
the head or world frame with a grasp aperture and gripper bit (``eef_pose_gripper``), or
the fingertips in the wrist frame (``fingertips``), and future chunks of them as
actions. Conventions: `ego_assets.actions.derive`; per joint set, what comes exactly,
by approximation or not at all: `ego_assets.actions.sources` and
docs/trajectory-model.md.
"""

from ego_assets.actions.derive import ActionTable, derive_actions
from ego_assets.actions.space import ActionSpace, ActionSpaceError

__all__ = ["ActionSpace", "ActionSpaceError", "ActionTable", "derive_actions"]
