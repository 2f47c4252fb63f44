"""`motionmatch export`: BVH motion as glTF binary (.glb), USD (.usda, .usdc, .usdz) or BVH, optionally
with a skinned body; a crowd's agents (a `synth --crowd` folder) as one USD stage;
`motionmatch convert`: any motion file the library reads (BVH, glTF, FBX) as BVH or glTF, a file per clip.
The output's extension names its format and is checked before any input is read (cli/outputs.py)."""
from __future__ import annotations

import argparse
import re
from pathlib import Path

from .inputs import existing_file
from .outputs import UsageError, output_suffix

USD_SUFFIXES = (".usda", ".usdc", ".usdz")       # io.usd.USD_SUFFIXES, without importing numpy here
EXPORT_SUFFIXES = (".bvh", ".glb") + USD_SUFFIXES
CONVERT_SUFFIXES = (".bvh", ".glb")


def add_export_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("motion", nargs="+",
                        help="motion file (.bvh), or a synth output folder (its motion.bvh; a crowd's agent_*.bvh); "
                             "several motions (a crowd) need a USD output: one stage, a skeleton each")
    parser.add_argument("-o", "--out", required=True,
                        help="file to write; its extension names the format: .glb (60 fps), .usda/.usdc/.usdz "
                             "(the motion's frame rate; extra `usd`) or .bvh")
    parser.add_argument("--mesh", default=None, metavar="auto|MODEL.glb",
                        help="add a skinned body: 'auto' (generated for the skeleton) or a rigged humanoid .glb")
    parser.add_argument("--unit", default="auto", help="BVH length unit: auto, m, cm (default auto)")


def motion_files(paths) -> list[Path]:
    """The BVH files `export` reads: each path a .bvh file, or a synth output folder (its agent_*.bvh when
    it holds a crowd's, else its motion.bvh)."""
    files = []
    for given in paths:
        src = Path(given)
        if src.is_dir():
            found = sorted(src.glob("agent_*.bvh")) or sorted(src.glob("motion.bvh"))
            if not found:
                raise FileNotFoundError(f"{src}: a folder without motion.bvh or agent_*.bvh (export takes a BVH file "
                                        f"or a synth output folder)")
            files += found
            continue
        if not src.is_file():
            raise FileNotFoundError(f"{src}: no such file")
        if src.suffix.lower() != ".bvh":
            raise ValueError(f"{src}: only BVH motion can be exported (got {src.suffix or 'no extension'})")
        files.append(src)
    return files


def _motion_names(files: list[Path]) -> list[str]:
    """A prim name per motion: the file's stem, or its folder's name for a synth's motion.bvh."""
    return [f.parent.name if f.name == "motion.bvh" and f.parent.name else f.stem for f in files]


def run_export(args) -> int:
    kind = output_suffix(args.out, EXPORT_SUFFIXES, "-o", "export")
    if kind == ".bvh" and args.mesh is not None:
        raise UsageError(f"-o {args.out}: a BVH holds no mesh; --mesh needs a .glb or USD output")
    if kind in USD_SUFFIXES:
        from ..io.usd import require_usd
        require_usd(args.out)
    files = motion_files(args.motion)
    if len(files) > 1 and kind not in USD_SUFFIXES:
        raise UsageError(f"-o {args.out}: {len(files)} motions make one USD stage (.usda, .usdc or .usdz); a {kind} "
                         f"holds one motion")
    if args.mesh not in (None, "auto") and not Path(args.mesh).is_file():
        raise FileNotFoundError(f"{args.mesh}: no such model file (--mesh takes 'auto' or a .glb)")
    from ..io.bvh import read_bvh
    anims = [read_bvh(f, unit=args.unit) for f in files]
    mesh = f", mesh {args.mesh}" if args.mesh else ""
    if kind in USD_SUFFIXES:
        from ..body.export import export_usd
        out = export_usd(anims, args.out, _motion_names(files), args.mesh)
        frames = max(a.num_frames for a in anims)
        print(f"wrote {out} ({len(anims)} skeleton{'s' if len(anims) > 1 else ''}, {frames / anims[0].fps:.1f} s of "
              f"motion at {anims[0].fps:g} fps{mesh})")
    elif kind == ".glb":
        from ..body.export import EXPORT_FPS, export_gltf
        out = export_gltf(anims[0], args.out, args.mesh)
        print(f"wrote {out} ({anims[0].duration:.1f} s of motion at {EXPORT_FPS:g} fps{mesh})")
    else:
        from ..io.bvh import write_bvh
        write_bvh(args.out, anims[0])
        print(f"wrote {args.out} ({anims[0].duration:.1f} s of motion at {anims[0].fps:g} fps)")
    return 0


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("._")[:60] or "clip"


def run_convert(args) -> int:
    kind = output_suffix(args.out, CONVERT_SUFFIXES, "", "convert")
    existing_file(args.motion, "", "motion file")
    from ..io.bvh import write_bvh
    from ..io.clips import read_clips
    from ..io.gltf import write_gltf
    src, out = Path(args.motion), Path(args.out)
    clips = read_clips(src, unit=args.unit)
    if args.clip is not None:
        clips = [c for c in clips if c.name == args.clip]
        if not clips:
            raise ValueError(f"{src}: no clip named {args.clip!r}")
    for c in clips:
        # Several clips: one file each, the clip's name after the output's stem.
        path = out if len(clips) == 1 else out.with_name(f"{out.stem}_{_safe(c.name)}{out.suffix}")
        if kind == ".bvh":
            write_bvh(path, c)
        else:
            write_gltf(path, c)
        print(f"wrote {path} ({c.name or src.name}: {c.num_frames} frames at {c.fps:g} fps, "
              f"{c.skeleton.num_joints} joints)")
    return 0


def register(sub) -> None:
    p = sub.add_parser("export", help="write motion as glTF (.glb), USD (.usda/.usdc/.usdz) or BVH, optionally with "
                                      "a skinned body")
    add_export_args(p)
    p.set_defaults(func=run_export)
    p = sub.add_parser("convert", help="convert a motion file (.bvh, .glb, .fbx) to .bvh or .glb, one file per clip")
    p.add_argument("motion", help="motion file (.bvh, .glb; .fbx with the Blender environment, docs/IMPORTING.md)")
    p.add_argument("out", help="file to write (.bvh or .glb); with several clips, OUT_<clip name>.EXT each")
    p.add_argument("--clip", default=None, help="convert only the clip (animation) of this name")
    p.add_argument("--unit", default="auto", help="BVH length unit of the input: auto, m, cm (default auto)")
    p.set_defaults(func=run_convert)
