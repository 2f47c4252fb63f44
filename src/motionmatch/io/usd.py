"""USD out (UsdSkel): skinned characters and their motion as one stage, for the film, visual-effects and
simulation tools that exchange animated characters this way (Maya, Houdini, Blender, Unreal, Omniverse).

Pixar's library (`pxr`, PyPI `usd-core`) is the optional extra `usd` (`pip install motionmatch[usd]`):
nothing else in the package needs it, and without it require_usd raises USDError naming the extra.

Layout of a written stage (.usda text, .usdc binary, .usdz a package holding the stage and its textures):

- metadata: metersPerUnit 1, upAxis Y, timeCodesPerSecond = framesPerSecond = the motion's frame rate,
  startTimeCode 0, endTimeCode the last frame; defaultPrim /World. Time code t is frame t.
- /World/Looks/NAME: one Material per surface (UsdPreviewSurface: diffuse colour, opacity, metallic,
  roughness, emissive; a base colour texture through UsdUVTexture reading the mesh's `st`).
- /World/NAME: a SkelRoot per character (a crowd: one per agent), holding
  - Skeleton: `joints` the joints' paths ("Hips", "Hips/Spine", ...; each name made a valid prim name,
    the original names in `jointNames`), bindTransforms the bind pose's world matrices, restTransforms
    its local ones; `skel:animationSource` -> Motion;
  - Motion (SkelAnimation): per joint translations, rotations and scales, one time sample per frame;
  - one Mesh per skinned part: points and normals in the bind pose, `st` (glTF's v flipped: USD's
    origin is bottom left), up to 4 joints per vertex (skel:jointIndices / skel:jointWeights), bound
    to the Skeleton and its Material. A part several characters share (a crowd's body) is written once:
    the others' meshes reference the first and bind it to their own Skeleton.

Matrices: Gf matrices multiply row vectors, so each is the transpose of the library's column-vector
matrix. Quaternions: Gf stores (x, y, z, w); the library (w, x, y, z).
"""
from __future__ import annotations

import os
import re
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..maths.kinematics import forward_kinematics
from ..maths.rotations import quat_to_matrix, quat_unroll
from ..motion.animation import Animation
from .gltf import MeshPart

USD_SUFFIXES = (".usda", ".usdc", ".usdz")
USD_CORE_VERSION = "26.11"
USD_HELP = (f"writing USD needs Pixar's library, the optional extra `usd`: pip install motionmatch[usd] "
            f"(usd-core {USD_CORE_VERSION}); in a clone, make install")


class USDError(ValueError):
    """A USD file that cannot be written as asked (or no Pixar library to write it with)."""


@dataclass
class UsdCharacter:
    """One skeleton on the stage: name (its prim's, made valid), anim (local joint transforms per frame,
    metres), bind_positions (J, 3) / bind_rotations (J, 4) the local bind pose its meshes were skinned
    in, parts its skinned meshes (vertices in that bind pose's world frame) with their materials."""

    name: str
    anim: Animation
    bind_positions: np.ndarray
    bind_rotations: np.ndarray
    parts: list[MeshPart] = field(default_factory=list)


def require_usd(path) -> None:
    """USDError naming `path` and the extra unless Pixar's library can be imported."""
    try:
        import pxr.Usd  # noqa: F401
        import pxr.UsdSkel  # noqa: F401
    except ImportError:
        raise USDError(f"{path}: {USD_HELP}") from None


def prim_name(name: str) -> str:
    """`name` as a valid USD prim name (letters, digits and underscores, not starting with a digit):
    `mixamorig:Hips` -> `mixamorig_Hips`."""
    out = re.sub(r"[^A-Za-z0-9_]", "_", name) or "_"
    return "_" + out if out[0].isdigit() else out


def _unique(names: list[str], taken=()) -> list[str]:
    seen, out = set(taken), []
    for n in names:
        base, k = n, 1
        while n in seen:
            n, k = f"{base}_{k}", k + 1
        seen.add(n)
        out.append(n)
    return out


def joint_paths(names: list[str], parents) -> list[str]:
    """UsdSkel's joint tokens: each joint's path from the root through its ancestors, names made valid
    prim names (prim_name) and unique among siblings. Joints are parents first."""
    leaf = [prim_name(n) for n in names]
    for p in sorted(set(int(q) for q in parents)):        # siblings share a parent: unique among them
        kids = [j for j, q in enumerate(parents) if q == p]
        for j, n in zip(kids, _unique([leaf[j] for j in kids])):
            leaf[j] = n
    paths = []
    for j, p in enumerate(parents):
        paths.append(leaf[j] if p < 0 else f"{paths[p]}/{leaf[j]}")
    return paths


def _matrices(positions: np.ndarray, rotations: np.ndarray) -> np.ndarray:
    """(J, 4, 4) row-vector matrices (Gf's layout) of translations (J, 3) and rotations (J, 4)."""
    m = np.zeros((len(positions), 4, 4))
    m[:, :3, :3] = quat_to_matrix(np.asarray(rotations, np.float64)).transpose(0, 2, 1)
    m[:, 3, :3] = positions
    m[:, 3, 3] = 1.0
    return m


def write_usd(path, characters: list[UsdCharacter]) -> Path:
    """Write the characters as one stage (see the module docstring); the format is the suffix's (.usda,
    .usdc, .usdz). Every character's motion must share one frame rate. The file (and, for .usda/.usdc
    with textures, the folder STEM_textures beside it) appears whole or not at all. Returns the path."""
    path = Path(path)
    kind = path.suffix.lower()
    if kind not in USD_SUFFIXES:
        raise USDError(f"{path}: USD files end in {', '.join(USD_SUFFIXES)} (got {path.suffix or 'no extension'})")
    require_usd(path)
    if not characters:
        raise USDError(f"{path}: nothing to write")
    rates = sorted({float(c.anim.fps) for c in characters})
    if len(rates) > 1:
        raise USDError(f"{path}: the motions run at {', '.join(f'{r:g}' for r in rates)} fps; one stage holds one "
                       f"frame rate")
    if min(c.anim.num_frames for c in characters) < 1:
        raise USDError(f"{path}: a motion has no frames")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", dir=path.parent))
    try:
        textures = "textures" if kind == ".usdz" else f"{path.stem}_textures"
        layer = tmp / (f"{path.stem}.usdc" if kind == ".usdz" else path.name)
        files = _write_stage(layer, characters, rates[0], textures)
        if kind == ".usdz":
            from pxr import Sdf, UsdUtils
            package = tmp / path.name
            if not UsdUtils.CreateNewUsdzPackage(Sdf.AssetPath(str(layer)), str(package)):
                raise USDError(f"{path}: Pixar's library could not package the stage")
            os.replace(package, path)
        else:
            if files:
                (path.parent / textures).mkdir(exist_ok=True)
            for f in files:
                os.replace(tmp / f, path.parent / f)
            os.replace(layer, path)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return path


def _write_stage(layer: Path, characters: list[UsdCharacter], fps: float, textures: str) -> list[str]:
    """Author the stage into `layer`; texture files go to layer's folder / textures. Returns the texture
    files written (relative to layer's folder)."""
    from pxr import Usd, UsdGeom, UsdSkel, Vt

    stage = Usd.Stage.CreateNew(str(layer))
    UsdGeom.SetStageMetersPerUnit(stage, 1.0)
    UsdGeom.SetStageUpAxis(stage, UsdGeom.Tokens.y)
    stage.SetTimeCodesPerSecond(fps)
    stage.SetFramesPerSecond(fps)
    stage.SetStartTimeCode(0)
    stage.SetEndTimeCode(max(c.anim.num_frames for c in characters) - 1)
    world = UsdGeom.Xform.Define(stage, "/World")
    stage.SetDefaultPrim(world.GetPrim())
    looks, files = _write_materials(stage, layer.parent, characters, textures)
    names = _unique([prim_name(c.name) for c in characters], taken=("Looks",))
    written = {}                   # id(MeshPart) -> the path of its mesh on the stage
    for c, name in zip(characters, names):
        root = UsdSkel.Root.Define(stage, f"/World/{name}")
        skel_path = root.GetPath().AppendChild("Skeleton")
        skel = UsdSkel.Skeleton.Define(stage, skel_path)
        sk = c.anim.skeleton
        joints = joint_paths(sk.names, sk.parents)
        bpos, brot = forward_kinematics(np.asarray(c.bind_positions, np.float64)[None],
                                        np.asarray(c.bind_rotations, np.float64)[None], sk.parents)
        skel.CreateJointsAttr(Vt.TokenArray(joints))
        skel.CreateJointNamesAttr(Vt.TokenArray(list(sk.names)))
        skel.CreateBindTransformsAttr(Vt.Matrix4dArray.FromNumpy(_matrices(bpos[0], brot[0])))
        skel.CreateRestTransformsAttr(Vt.Matrix4dArray.FromNumpy(_matrices(c.bind_positions, c.bind_rotations)))
        anim = UsdSkel.Animation.Define(stage, root.GetPath().AppendChild("Motion"))
        anim.CreateJointsAttr(Vt.TokenArray(joints))
        rot = quat_unroll(np.asarray(c.anim.rotations, np.float64), axis=0)    # no long-way blends between keys
        xyzw = np.ascontiguousarray(np.concatenate([rot[..., 1:], rot[..., :1]], axis=-1), np.float32)
        pos = np.ascontiguousarray(c.anim.positions, np.float32)
        t_attr, r_attr = anim.CreateTranslationsAttr(), anim.CreateRotationsAttr()
        for f in range(c.anim.num_frames):
            t_attr.Set(Vt.Vec3fArray.FromNumpy(pos[f]), Usd.TimeCode(f))
            r_attr.Set(Vt.QuatfArray.FromNumpy(xyzw[f]), Usd.TimeCode(f))
        anim.CreateScalesAttr(Vt.Vec3hArray.FromNumpy(np.ones((sk.num_joints, 3), np.float16)))
        UsdSkel.BindingAPI.Apply(skel.GetPrim()).CreateAnimationSourceRel().SetTargets([anim.GetPath()])
        for part, mesh_name in zip(c.parts, _unique([prim_name(p.name) for p in c.parts], ("Skeleton", "Motion"))):
            where = root.GetPath().AppendChild(mesh_name)
            if id(part) in written:
                # A crowd's agents share their body: later agents reference the first one's mesh and bind
                # it to their own skeleton (20 agents: a tenth of the file).
                mesh = stage.DefinePrim(where, "Mesh")
                mesh.GetReferences().AddInternalReference(written[id(part)])
                UsdSkel.BindingAPI.Apply(mesh).CreateSkeletonRel().SetTargets([skel_path])
            else:
                _write_mesh(stage, where, part, skel_path, looks[id(part.material)])
                written[id(part)] = where
    stage.GetRootLayer().Save()
    return files


def _write_mesh(stage, where, part: MeshPart, skel_path, material) -> None:
    from pxr import Gf, Sdf, UsdGeom, UsdShade, UsdSkel, Vt
    m = part.mesh
    mesh = UsdGeom.Mesh.Define(stage, where)
    points = np.ascontiguousarray(m.positions, np.float32)
    mesh.CreatePointsAttr(Vt.Vec3fArray.FromNumpy(points))
    mesh.CreateExtentAttr(Vt.Vec3fArray.FromNumpy(np.stack([points.min(0), points.max(0)])))
    tri = np.asarray(m.triangles, np.int32).reshape(-1, 3)
    mesh.CreateFaceVertexCountsAttr(Vt.IntArray.FromNumpy(np.full(len(tri), 3, np.int32)))
    mesh.CreateFaceVertexIndicesAttr(Vt.IntArray.FromNumpy(np.ascontiguousarray(tri.reshape(-1))))
    mesh.CreateSubdivisionSchemeAttr(UsdGeom.Tokens.none)     # triangles as they are, with their normals
    mesh.CreateDoubleSidedAttr(bool(part.material.double_sided))
    if np.abs(m.normals).max(initial=0.0) > 0.0:
        mesh.CreateNormalsAttr(Vt.Vec3fArray.FromNumpy(np.ascontiguousarray(m.normals, np.float32)))
        mesh.SetNormalsInterpolation(UsdGeom.Tokens.vertex)
    if m.uvs is not None:
        st = np.array(m.uvs, np.float32)
        st[:, 1] = 1.0 - st[:, 1]
        UsdGeom.PrimvarsAPI(mesh).CreatePrimvar("st", Sdf.ValueTypeNames.TexCoord2fArray,
                                                UsdGeom.Tokens.vertex).Set(Vt.Vec2fArray.FromNumpy(st))
    binding = UsdSkel.BindingAPI.Apply(mesh.GetPrim())
    binding.CreateSkeletonRel().SetTargets([skel_path])
    width = np.asarray(m.joints).shape[1]
    binding.CreateJointIndicesPrimvar(False, width).Set(
        Vt.IntArray.FromNumpy(np.ascontiguousarray(np.asarray(m.joints, np.int32).reshape(-1))))
    binding.CreateJointWeightsPrimvar(False, width).Set(
        Vt.FloatArray.FromNumpy(np.ascontiguousarray(np.asarray(m.weights, np.float32).reshape(-1))))
    binding.CreateGeomBindTransformAttr(Gf.Matrix4d(1.0))        # points are in the bind pose's world frame
    UsdShade.MaterialBindingAPI.Apply(mesh.GetPrim()).Bind(material)


def _write_materials(stage, folder: Path, characters: list[UsdCharacter], textures: str):
    """One Material per distinct Material object of the characters' parts, under /World/Looks. Returns
    ({id(material): UsdShade.Material}, texture files written relative to folder)."""
    from pxr import Gf, Sdf, UsdShade
    distinct = {}
    for c in characters:
        for p in c.parts:
            distinct.setdefault(id(p.material), p.material)
    out, files, by_bytes = {}, [], {}
    if not distinct:
        return out, files
    stage.DefinePrim("/World/Looks", "Scope")
    names = _unique([prim_name(m.name) for m in distinct.values()])
    for (key, mat), name in zip(distinct.items(), names):
        look = UsdShade.Material.Define(stage, f"/World/Looks/{name}")
        surface = UsdShade.Shader.Define(stage, look.GetPath().AppendChild("PreviewSurface"))
        surface.CreateIdAttr("UsdPreviewSurface")
        r, g, b, a = (float(v) for v in mat.base_color)
        surface.CreateInput("opacity", Sdf.ValueTypeNames.Float).Set(a)
        surface.CreateInput("metallic", Sdf.ValueTypeNames.Float).Set(float(mat.metallic))
        surface.CreateInput("roughness", Sdf.ValueTypeNames.Float).Set(float(mat.roughness))
        surface.CreateInput("emissiveColor", Sdf.ValueTypeNames.Color3f).Set(Gf.Vec3f(*map(float, mat.emissive)))
        diffuse = surface.CreateInput("diffuseColor", Sdf.ValueTypeNames.Color3f)
        if mat.texture is None:
            diffuse.Set(Gf.Vec3f(r, g, b))
        else:
            if mat.texture not in by_bytes:
                by_bytes[mat.texture] = f"{textures}/{name}.{mat.texture_type}"
                (folder / textures).mkdir(exist_ok=True)
                (folder / by_bytes[mat.texture]).write_bytes(mat.texture)
                files.append(by_bytes[mat.texture])
            reader = UsdShade.Shader.Define(stage, look.GetPath().AppendChild("StReader"))
            reader.CreateIdAttr("UsdPrimvarReader_float2")
            reader.CreateInput("varname", Sdf.ValueTypeNames.String).Set("st")
            reader.CreateOutput("result", Sdf.ValueTypeNames.Float2)
            tex = UsdShade.Shader.Define(stage, look.GetPath().AppendChild("BaseColor"))
            tex.CreateIdAttr("UsdUVTexture")
            tex.CreateInput("file", Sdf.ValueTypeNames.Asset).Set(Sdf.AssetPath("./" + by_bytes[mat.texture]))
            tex.CreateInput("st", Sdf.ValueTypeNames.Float2).ConnectToSource(reader.ConnectableAPI(), "result")
            tex.CreateInput("sourceColorSpace", Sdf.ValueTypeNames.Token).Set("sRGB")
            tex.CreateInput("wrapS", Sdf.ValueTypeNames.Token).Set("repeat")
            tex.CreateInput("wrapT", Sdf.ValueTypeNames.Token).Set("repeat")
            # glTF multiplies the texture by the base colour factor; UsdUVTexture's scale does the same.
            tex.CreateInput("scale", Sdf.ValueTypeNames.Float4).Set(Gf.Vec4f(r, g, b, a))
            tex.CreateOutput("rgb", Sdf.ValueTypeNames.Float3)
            diffuse.ConnectToSource(tex.ConnectableAPI(), "rgb")
        look.CreateSurfaceOutput().ConnectToSource(surface.ConnectableAPI(), "surface")
        out[key] = look
    return out, files
