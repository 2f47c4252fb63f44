"""Runs inside Blender's Python (the `bpy` module in its own environment, see io/fbx.py), never imported
by the library: Blender pins an older numpy than the library's, so the two live in separate interpreters
and talk through files.

    python blender_worker.py read IN.fbx OUT.npz      armatures' rest pose and every action, sampled
    python blender_worker.py glb IN.glb OUT.npz       the same for a glTF binary (the interop check)
    python blender_worker.py fbx IN.bvh OUT.fbx       a BVH as a Blender-made FBX (tests make theirs)
    python blender_worker.py usd IN.usda OUT.npz      every armature of a USD stage (a crowd has several)

OUT.npz holds: names (J,), parents (J,) int, rest (J, 4, 4) and, per action k, clip_k (F, J, 4, 4):
the bones' world matrices in Blender's frame (Z up, metres), their translations the bone heads (the
joints); action_names (K,), fps (scene frames per second), frame_start (K,), and for `glb` the number of
armatures, mesh objects and the scene's frame range. `usd` writes, for every armature k (ordered by
object name), names_k, parents_k, rest_k, clip_k (its own action) and meshes_k (the mesh objects it
deforms), armature_names (K,) (each one's parent's name: the character's SkelRoot), fps and
scene_range. Only this file's arguments are opened.
"""
import sys

import bpy
import numpy as np

# Sampled matrices the worker may write (frames x bones over all actions: 128 bytes each, 2 GB): a
# file whose action claims a billion frames is refused before the worker loops over them. Mirrored in
# io/fbx.py (this file cannot import the library).
MAX_SAMPLES = 16_000_000
MAX_BONES = 1024


def _clear():
    bpy.ops.wm.read_factory_settings(use_empty=True)


def _armature():
    arms = [o for o in bpy.data.objects if o.type == "ARMATURE"]
    if not arms:
        raise SystemExit("no armature in the file")
    # The armature with most bones: a rig plus a stray prop armature still reads as the rig.
    return max(arms, key=lambda o: len(o.data.bones)), len(arms)


def _bones(arm):
    bones = list(arm.data.bones)          # Blender lists bones parents first
    index = {b.name: i for i, b in enumerate(bones)}
    parents = np.array([index[b.parent.name] if b.parent else -1 for b in bones])
    return bones, parents


def _matrix(m):
    return np.array([[m[i][j] for j in range(4)] for i in range(4)], np.float64)


def _sample(path_in, out):
    arm, n_arms = _armature()
    bones, parents = _bones(arm)
    if len(bones) > MAX_BONES:
        raise SystemExit(f"the armature has {len(bones)} bones, at most {MAX_BONES}")
    scene = bpy.context.scene
    fps = scene.render.fps / scene.render.fps_base
    world = arm.matrix_world.copy()
    rest = np.array([_matrix(world @ b.matrix_local) for b in bones])
    arrays = {"names": np.array([b.name for b in bones]), "parents": parents, "rest": rest, "fps": fps,
              "armatures": n_arms, "meshes": sum(o.type == "MESH" and o.find_armature() is not None for o in bpy.data.objects),
              "scene_range": np.array([scene.frame_start, scene.frame_end])}
    actions = list(bpy.data.actions)
    if arm.animation_data is None:
        arm.animation_data_create()
    names, starts = [], []
    spans = [int(round(a.frame_range[1])) - int(round(a.frame_range[0])) + 1 for a in actions]
    if sum(spans) * len(bones) > MAX_SAMPLES:
        raise SystemExit(f"the actions hold {sum(spans):,} frames of {len(bones)} bones, beyond "
                         f"{MAX_SAMPLES:,} sampled bone matrices")
    for k, action in enumerate(actions):
        arm.animation_data.action = action
        if hasattr(arm.animation_data, "action_suitable_slots") and arm.animation_data.action_slot is None:
            slots = list(arm.animation_data.action_suitable_slots)
            if slots:
                arm.animation_data.action_slot = slots[0]
        f0, f1 = (int(round(v)) for v in action.frame_range)
        frames = []
        for f in range(f0, f1 + 1):
            scene.frame_set(f)
            w = arm.matrix_world
            frames.append([_matrix(w @ pb.matrix) for pb in (arm.pose.bones[b.name] for b in bones)])
        arrays[f"clip_{k}"] = np.array(frames)
        names.append(action.name)
        starts.append(f0)
    arrays["action_names"] = np.array(names)
    arrays["frame_start"] = np.array(starts)
    np.savez(out, **arrays)


def _sample_each(out):
    """Every armature with its own action (USD: one skeleton and its animation each). The scene is
    evaluated once per frame for all of them (each evaluation deforms every mesh)."""
    arms = sorted((o for o in bpy.data.objects if o.type == "ARMATURE"), key=lambda o: o.name)
    if not arms:
        raise SystemExit("no armature in the file")
    scene = bpy.context.scene
    # Blender names every armature after its Skeleton prim ("Skeleton", "Skeleton.001"): the SkelRoot
    # above it, an empty, carries the character's name.
    arrays = {"armature_names": np.array([a.parent.name if a.parent else a.name for a in arms]),
              "fps": scene.render.fps / scene.render.fps_base,
              "scene_range": np.array([scene.frame_start, scene.frame_end])}
    spans, order, total = [], [], 0
    for k, arm in enumerate(arms):
        bones, parents = _bones(arm)
        action = arm.animation_data.action if arm.animation_data else None
        span = tuple(int(round(v)) for v in action.frame_range) if action else (scene.frame_start, scene.frame_start)
        total += (span[1] - span[0] + 1) * len(bones)
        if len(bones) > MAX_BONES or total > MAX_SAMPLES:
            raise SystemExit(f"the armatures hold over {MAX_SAMPLES:,} sampled bone matrices or {MAX_BONES} bones")
        world = arm.matrix_world.copy()
        arrays[f"names_{k}"] = np.array([b.name for b in bones])
        arrays[f"parents_{k}"] = parents
        arrays[f"rest_{k}"] = np.array([_matrix(world @ b.matrix_local) for b in bones])
        arrays[f"meshes_{k}"] = sum(o.type == "MESH" and o.find_armature() == arm for o in bpy.data.objects)
        spans.append(span)
        order.append([arm.pose.bones[b.name] for b in bones])
    frames = [[] for _ in arms]
    for f in range(min(a for a, _ in spans), max(b for _, b in spans) + 1):
        scene.frame_set(f)
        for k, arm in enumerate(arms):
            if spans[k][0] <= f <= spans[k][1]:
                w = arm.matrix_world
                frames[k].append([_matrix(w @ pb.matrix) for pb in order[k]])
    for k in range(len(arms)):
        arrays[f"clip_{k}"] = np.array(frames[k])
    np.savez(out, **arrays)


def main(argv):
    if len(argv) != 3 or argv[0] not in ("read", "glb", "fbx", "usd"):
        raise SystemExit(__doc__)
    what, path_in, out = argv
    _clear()
    if what == "fbx":
        bpy.ops.import_anim.bvh(filepath=path_in, global_scale=1.0, use_fps_scale=False,
                                update_scene_fps=True, update_scene_duration=True, axis_forward="-Z", axis_up="Y")
        bpy.ops.export_scene.fbx(filepath=out, bake_anim=True, add_leaf_bones=False, bake_anim_simplify_factor=0.0)
        return
    if what == "usd":
        bpy.ops.wm.usd_import(filepath=path_in, import_skeletons=True, set_frame_range=True)
        _sample_each(out)
        return
    if what == "read":
        bpy.ops.import_scene.fbx(filepath=path_in, use_anim=True)
    else:
        # Blender places glTF keys at the scene's frame rate: at 60 fps our keys land on whole frames.
        bpy.context.scene.render.fps, bpy.context.scene.render.fps_base = 60, 1.0
        bpy.ops.import_scene.gltf(filepath=path_in)
    _sample(path_in, out)


if __name__ == "__main__":
    main(sys.argv[1:])
