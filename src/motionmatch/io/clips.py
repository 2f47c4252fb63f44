"""Motion files of every kind the library reads, by their name: BVH (.bvh, .bvh.gz), glTF binary (.glb)
and, with the `fbx` extra installed, FBX (.fbx). One file gives one or more clips (a glTF or FBX file
holds an animation per clip)."""
from __future__ import annotations

from pathlib import Path

from ..motion.animation import Animation
from .bvh import BVHError, read_bvh
from .fbx import FBXError
from .gltf import GLTFError
from .gltf_clips import read_gltf_clips
from .fbx import read_fbx_clips

# The errors a motion file that cannot be read raises (all ValueErrors naming the file).
CLIP_ERRORS = (BVHError, GLTFError, FBXError, OSError)


def read_clips(path, unit: str = "auto") -> list[Animation]:
    """The clips of one motion file (see the module docstring). unit applies to BVH only (glTF is
    metres; FBX carries its own unit). Raises BVHError / GLTFError / OSError naming the file."""
    path = Path(path)
    name = path.name.lower()
    if name.endswith((".glb", ".gltf")):
        return read_gltf_clips(path)
    if name.endswith(".fbx"):
        return read_fbx_clips(path)
    return [read_bvh(path, unit=unit)]


def read_first_clip(path, unit: str = "auto") -> Animation:
    """The first clip of a motion file (the one that fixes a database's skeleton)."""
    return read_clips(path, unit)[0]
