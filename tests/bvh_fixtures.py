"""Small BVH texts generated in code, for tests (import as `from bvh_fixtures import ...`).

The LAFAN1-layout skeleton below has LAFAN1's joint names and hierarchy (Ubisoft's dataset is not
shipped here) with made-up but plausible offsets in centimetres; root 6 channels, others ZYX rotations.
"""
from __future__ import annotations

import math
from pathlib import Path

# name, parent name, offset (cm)
LAFAN1_JOINTS = [
    ("Hips", None, (0.0, 95.0, 0.0)),
    ("LeftUpLeg", "Hips", (10.0, -5.0, 0.0)),
    ("LeftLeg", "LeftUpLeg", (0.0, -42.0, 0.0)),
    ("LeftFoot", "LeftLeg", (0.0, -41.0, -2.0)),
    ("LeftToe", "LeftFoot", (0.0, -6.0, 13.0)),
    ("RightUpLeg", "Hips", (-10.0, -5.0, 0.0)),
    ("RightLeg", "RightUpLeg", (0.0, -42.0, 0.0)),
    ("RightFoot", "RightLeg", (0.0, -41.0, -2.0)),
    ("RightToe", "RightFoot", (0.0, -6.0, 13.0)),
    ("Spine", "Hips", (0.0, 10.0, 0.0)),
    ("Spine1", "Spine", (0.0, 12.0, 0.0)),
    ("Spine2", "Spine1", (0.0, 12.0, 0.0)),
    ("Neck", "Spine2", (0.0, 15.0, 0.0)),
    ("Head", "Neck", (0.0, 10.0, 2.0)),
    ("LeftShoulder", "Spine2", (4.0, 12.0, 0.0)),
    ("LeftArm", "LeftShoulder", (14.0, 0.0, 0.0)),
    ("LeftForeArm", "LeftArm", (28.0, 0.0, 0.0)),
    ("LeftHand", "LeftForeArm", (25.0, 0.0, 0.0)),
    ("RightShoulder", "Spine2", (-4.0, 12.0, 0.0)),
    ("RightArm", "RightShoulder", (-14.0, 0.0, 0.0)),
    ("RightForeArm", "RightArm", (-28.0, 0.0, 0.0)),
    ("RightHand", "RightForeArm", (-25.0, 0.0, 0.0)),
]
LAFAN1_NAMES = [j[0] for j in LAFAN1_JOINTS]


def hierarchy_text(joints, channels, indent="  ", end_site=(0.0, 5.0, 0.0)) -> str:
    """HIERARCHY text for joints [(name, parent, offset)] (parents first) and channels {name: [..]}.
    Leaves get an End Site."""
    kids = {n: [c for c, p, _ in joints if p == n] for n, _, _ in joints}
    by_name = {n: (p, o) for n, p, o in joints}
    out = ["HIERARCHY"]

    def emit(name, depth):
        pad = indent * depth
        parent, off = by_name[name]
        out.append(f"{pad}{'ROOT' if parent is None else 'JOINT'} {name}")
        out.append(f"{pad}{{")
        out.append(f"{pad}{indent}OFFSET {off[0]:.4f} {off[1]:.4f} {off[2]:.4f}")
        ch = channels[name]
        out.append(f"{pad}{indent}CHANNELS {len(ch)} {' '.join(ch)}")
        for c in kids[name]:
            emit(c, depth + 1)
        if not kids[name]:
            out.append(f"{pad}{indent}End Site")
            out.append(f"{pad}{indent}{{")
            out.append(f"{pad}{indent * 2}OFFSET {end_site[0]:.4f} {end_site[1]:.4f} {end_site[2]:.4f}")
            out.append(f"{pad}{indent}}}")
        out.append(f"{pad}}}")

    emit(joints[0][0], 0)
    return "\n".join(out) + "\n"


def motion_text(rows, fps: float) -> str:
    lines = ["MOTION", f"Frames: {len(rows)}", f"Frame Time: {1.0 / fps:.8f}"]
    lines += [" ".join(f"{v:.6f}" for v in r) for r in rows]
    return "\n".join(lines) + "\n"


def lafan1_bvh_text(frames: int = 8, fps: float = 30.0, newline: str = "\n") -> str:
    """A LAFAN1-layout BVH (cm; Hips 6 channels Xpos Ypos Zpos Zrot Yrot Xrot, others Zrot Yrot Xrot)
    walking slowly along +Z with swinging legs."""
    rot = ["Zrotation", "Yrotation", "Xrotation"]
    channels = {n: (["Xposition", "Yposition", "Zposition"] + rot if p is None else rot)
                for n, p, _ in LAFAN1_JOINTS}
    rows = []
    for f in range(frames):
        t = f / fps
        row = [0.0, 95.0 + 2.0 * math.sin(4 * t), 100.0 * t, 0.0, 5.0 * math.sin(2 * t), 0.0]
        for name, parent, _ in LAFAN1_JOINTS[1:]:
            swing = 30.0 * math.sin(6 * t) * (1 if "Left" in name else -1) if "UpLeg" in name else 0.0
            row += [1.0, 2.0, swing + 3.0]  # Z, Y, X
        rows.append(row)
    text = hierarchy_text(LAFAN1_JOINTS, channels) + motion_text(rows, fps)
    return text.replace("\n", newline)


def write_lafan1_bvh(path, **kw) -> Path:
    path = Path(path)
    path.write_text(lafan1_bvh_text(**kw), newline="")
    return path


def tiny_bvh_text(order: str = "XYZ", rows=((0.0, 0.0, 0.0, 30.0, 45.0, 60.0, 10.0, 20.0, 30.0),),
                  fps: float = 30.0) -> str:
    """Two joints (Root with 6 channels, Child with 3), both with rotation order `order`, metres.
    rows: per frame [x, y, z, root angles in `order`, child angles in `order`] in degrees."""
    joints = [("Root", None, (0.0, 1.0, 0.0)), ("Child", "Root", (0.0, 0.5, 0.0))]
    rot = [f"{a}rotation" for a in order]
    channels = {"Root": ["Xposition", "Yposition", "Zposition"] + rot, "Child": rot}
    return hierarchy_text(joints, channels, end_site=(0.0, 0.0, 0.25)) + motion_text(rows, fps)
