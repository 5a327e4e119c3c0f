"""Hand skeletons as line strips: the bones of a joint set, cut where joints are untracked.

The bone tree of a joint set (`ego_assets.trajectory.joints.PARENTS`) is split into
chains (wrist -> thumb tip, wrist -> index tip, ...): one line strip per chain draws
every bone once with few repeated points. In a sample, a bone is drawn only when both
of its joints are tracked (hand valid, joint valid where the source says, finite); a
chain with an untracked joint is cut there, and an untracked hand draws nothing.

Everything is vectorized over samples; the result is the Arrow layout of Rerun's
``LineStrip3D`` component (list of fixed-size-3 float32 lists), partitioned per sample.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import numpy as np
import pyarrow as pa

from ego_assets.trajectory.joints import PARENTS

POINT_TYPE = pa.list_(pa.field("item", pa.float32(), nullable=False), 3)
STRIP_TYPE = pa.list_(pa.field("item", POINT_TYPE, nullable=False))


@cache
def chains(joint_set: str) -> tuple[tuple[int, ...], ...]:
    """Joint chains covering every bone of ``joint_set`` once, each from a root or fork.

    A chain follows the first child of each joint; every further child starts a new
    chain at its parent, so a hand gives one chain per finger (and forearm).
    """
    parents = PARENTS[joint_set]
    children: dict[int, list[int]] = {j: [] for j in range(len(parents))}
    for child, parent in enumerate(parents):
        if parent >= 0:
            children[parent].append(child)
    out: list[tuple[int, ...]] = []
    starts = [(root,) for root, parent in enumerate(parents) if parent < 0]
    pending = [list(s) for s in starts]
    while pending:
        chain = pending.pop(0)
        joint = chain[-1]
        while children[joint]:
            first, *rest = children[joint]
            pending.extend([joint, other] for other in rest)
            chain.append(first)
            joint = first
        if len(chain) > 1:
            out.append(tuple(chain))
    return tuple(out)


@dataclass(frozen=True, slots=True)
class Strips:
    """Line strips of every sample, in sample order.

    Attributes:
        strips: Arrow array of every strip (``STRIP_TYPE``), float32 metres.
        offsets: (T + 1,) int32: sample t draws ``strips[offsets[t]:offsets[t + 1]]``.
    """

    strips: pa.Array
    offsets: np.ndarray

    @property
    def strips_per_sample(self) -> np.ndarray:
        """(T,) number of strips drawn per sample (0 where the hand is untracked)."""
        return np.diff(self.offsets)


def skeleton_strips(positions: np.ndarray, tracked: np.ndarray, joint_set: str) -> Strips:
    """Line strips of a skeleton stream.

    Args:
        positions: (T, J, 3) joint positions, metres.
        tracked: (T, J) bool, joint usable (hand valid and joint valid and finite).
        joint_set: key of `PARENTS`.

    Returns:
        `Strips`: per sample, one strip per run of consecutive tracked bones of a chain.
    """
    n = len(positions)
    order = np.concatenate([np.asarray(c) for c in chains(joint_set)])
    chain_of = np.concatenate([np.full(len(c), i) for i, c in enumerate(chains(joint_set))])
    width = len(order)
    ok = tracked[:, order]
    # link k joins point k and k+1 of the concatenated chains; the last column is a
    # separator so runs never cross samples.
    links = np.zeros((n, width), bool)
    links[:, :-1] = (chain_of[:-1] == chain_of[1:]) & ok[:, :-1] & ok[:, 1:]
    flat = links.ravel()
    edges = np.diff(np.concatenate(([False], flat, [False])).astype(np.int8))
    run_start = np.flatnonzero(edges == 1)
    run_end = np.flatnonzero(edges == -1)  # exclusive, in links
    lengths = run_end - run_start + 1  # points per strip
    total = int(lengths.sum())
    strip_offsets = np.zeros(len(lengths) + 1, np.int64)
    np.cumsum(lengths, out=strip_offsets[1:])
    point_index = np.repeat(run_start - strip_offsets[:-1], lengths) + np.arange(total)
    grid = positions[:, order, :].reshape(n * width, 3).astype(np.float32)
    points = grid[point_index].ravel()
    per_sample = np.bincount(run_start // width, minlength=n)
    sample_offsets = np.zeros(n + 1, np.int32)
    np.cumsum(per_sample, out=sample_offsets[1:])
    values = pa.FixedSizeListArray.from_arrays(pa.array(points, pa.float32()), type=POINT_TYPE)
    strips = pa.ListArray.from_arrays(pa.array(strip_offsets, pa.int32()), values, type=STRIP_TYPE)
    return Strips(strips, sample_offsets)
