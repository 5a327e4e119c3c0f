"""Small canonical trajectories built by hand, shared by the tests."""

from __future__ import annotations

from pathlib import Path

import av
import numpy as np

from ego_assets.capture.manifest import write_marker
from ego_assets.synth import synthesize
from ego_assets.trajectory.model import (
    Annotations,
    CameraCalibration,
    CaptureInfo,
    Characteristic,
    FileRef,
    MediaRef,
    ProcedureStep,
    Quirk,
    Segment,
    StudyInfo,
    TaskSpecification,
    Trajectory,
    TranscriptSegment,
    TranscriptToken,
    VlmOutput,
)
from ego_assets.trajectory.streams import Stream, make_stream

START_NS = 1_793_000_000_000_000_000


def hand_stream(n: int = 9, rate_hz: float = 90.0, hand: str = "right", joints: int = 27):
    """A hand_joints stream whose joint j of sample i is at (i, j, 0.5) mm-scaled metres."""
    ts = START_NS + (np.arange(n) * (1e9 / rate_hz)).astype(np.int64)
    pos = np.zeros((n, joints, 3))
    pos[..., 0] = np.arange(n)[:, None] * 0.001
    pos[..., 1] = np.arange(joints)[None, :] * 0.01
    pos[..., 2] = 0.5
    rot = np.tile([0.0, 0.0, 0.0, 1.0], (n, joints, 1))
    valid = np.ones((n, joints), bool)
    valid[2, 3] = False
    return make_stream(
        f"hand_{hand}_world",
        "hand_joints",
        ts,
        START_NS,
        {
            "position": pos,
            "rotation": rot,
            "joint_valid": valid,
            "hand_valid": np.ones(n, bool),
        },
        {"joint_set": "arkit27", "hand": hand, "frame": "world", "nominal_rate_hz": rate_hz},
    )


def full_trajectory() -> Trajectory:
    """A trajectory using every header record type."""
    head, frames = _full_streams()
    return Trajectory(
        info=_full_info(),
        streams=(head, hand_stream(), frames),
        annotations=_full_annotations(),
        media=(
            MediaRef(
                "camera_left",
                "media/camera_left.mov",
                "video/quicktime",
                "video",
                codec="h264",
                width=320,
                height=240,
                fps=30.0,
                frame_count=3,
                frames_stream="camera_left_frames",
            ),
        ),
        files=(FileRef("thumbnail", "thumbnail.jpg", "image/jpeg"),),
        extra_files=("notes/extra.txt",),
        quirks=(Quirk("x.csv", "odd", rows=2, field="f"),),
    )


def _full_streams() -> tuple[Stream, Stream]:
    """`full_trajectory`'s head pose (6 samples at 60 Hz, the last ``limited``) and camera
    frames (3 at 30 Hz)."""
    head_ts = START_NS + np.arange(6, dtype=np.int64) * 16_666_667
    head = make_stream(
        "device_pose",
        "pose",
        head_ts,
        START_NS,
        {
            "position": np.column_stack([np.zeros(6), np.full(6, 1.6), np.linspace(0, 0.1, 6)]),
            "rotation": np.tile([0.0, 0.0, 0.0, 1.0], (6, 1)),
            "valid": np.ones(6, bool),
            "tracking_state": np.array(["normal"] * 5 + ["limited"], dtype=object),
        },
        {"frame": "world", "nominal_rate_hz": 60.0},
    )
    frames = make_stream(
        "camera_left_frames",
        "media_frames",
        START_NS + np.arange(3, dtype=np.int64) * 33_333_333,
        START_NS,
        {
            "frame_index": np.arange(3, dtype=np.int64),
            "intrinsics": np.tile([300.0, 300.0, 160.0, 120.0], (3, 1)),
            "world_to_camera": np.tile(np.eye(4), (3, 1, 1)),
        },
        {"media": "camera_left"},
    )
    return head, frames


def _full_info() -> CaptureInfo:
    """`full_trajectory`'s capture info: one calibrated camera, characteristics, study
    and task specification."""
    return CaptureInfo(
        capture_id="cap-1",
        source_kind="holos-visionpro",
        source_version="1",
        start_ns=START_NS,
        device="Apple Vision Pro",
        world_frame="arkit_world",
        cameras=(
            CameraCalibration(
                "camera_left",
                "pinhole-radtan5",
                320,
                240,
                300.0,
                300.0,
                160.0,
                120.0,
                distortion=(0.01, -0.002, 0.0, 0.0, 0.0),
                rms_error_px=0.3,
                sample_count=40,
            ),
        ),
        characteristics=(
            Characteristic("display_refresh_hz", "known", 90),
            Characteristic("depth_sensing", "unavailable"),
        ),
        study=StudyInfo(headset_id="HS-7", demonstrator_id="fox,,otter,copper"),
        task_specification=TaskSpecification("1.0.0", "ab" * 32, "task.json", "Pour"),
    )


def _full_annotations() -> Annotations:
    """`full_trajectory`'s annotations: instructions, language, two segments, a procedure
    step, a transcript with a token, a VLM output."""
    return Annotations(
        instructions=("pick up the cup", "pour"),
        language="pour water",
        segments=(
            Segment("s0", "pour", 0, 0, 0, "retry", START_NS, START_NS + 10**9, 0, 30),
            Segment(
                "s1",
                "pour",
                0,
                0,
                1,
                "success",
                START_NS + 10**9,
                START_NS + 2 * 10**9,
                30,
                60,
                {"note": "clean"},
            ),
        ),
        procedure_steps=(ProcedureStep(0, "grasp", "Grasp the cup", 0.0, 0.8),),
        transcript=(TranscriptSegment(0.1, 0.9, "grab the cup", True),),
        transcript_tokens=(TranscriptToken(0, 0.1, 0.3, "grab"),),
        vlm=(VlmOutput(5123.5, "2026-11-02T10:15:00.250Z", 0.25, "what?", "a cup"),),
    )


def write_h264(path: Path, frames: int, rate_hz: int = 30) -> None:
    """A tiny 32x24 H.264 clip whose frame i is a flat grey of level 50 * i."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with av.open(str(path), "w") as container:
        stream = container.add_stream("libx264", rate=rate_hz)
        stream.width, stream.height, stream.pix_fmt = 32, 24, "yuv420p"
        for i in range(frames):
            image = np.full((24, 32, 3), i * 50, dtype=np.uint8)
            for packet in stream.encode(av.VideoFrame.from_ndarray(image, format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)


def garble_holos_pose_row(capture: Path) -> None:
    """Make row 4 of a Holos capture's ``device_pose.csv`` unparseable (a text cell) and
    write its marker again, so the capture lands complete but fails at its trajectory."""
    csv = capture / "device_pose.csv"
    lines = csv.read_text().splitlines()
    lines[4] = lines[4].replace(",", ",not-a-number,", 1)
    csv.write_text("\n".join(lines) + "\n")
    write_marker(capture, "holos")


def synth_blocked_capture(folder: Path, key: str, seconds: float = 6) -> Path:
    """A WebXR capture ``key`` in ``folder`` whose left hand is never seen (seed 12): its
    tracking loss fails, so the export policy blocks every export of it. ``seconds`` is
    written as given (6, not 6.0, in session.json)."""
    return synthesize(
        "webxr", folder, seconds=seconds, seed=12, faults=["hand_never_seen"], capture_id=key
    )
