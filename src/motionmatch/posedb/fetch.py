"""`motionmatch fetch-data`: download the public motion capture sets into a cache folder.

Archives (zip, tar, tar.gz) are downloaded to `<cache>/.downloads/<name>-<hash>.part` (resumed with an HTTP
Range request when a partial file is there), renamed when complete, then unpacked into a temporary
folder that is renamed to `<cache>/<name>` at the end, so an interrupted run never leaves a half data set.
Unpacking refuses absolute paths, '..' components, links and device files. Already fetched sets are
skipped (a `.motionmatch-complete` marker) unless --force.
"""
from __future__ import annotations

import fnmatch
import hashlib
import os
import shutil
import tarfile
import tempfile
import urllib.error
import urllib.request
import zipfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from .datapaths import DEFAULT_NAME, cache_root

MARKER = ".motionmatch-complete"
_CHUNK = 1 << 16


@dataclass(frozen=True)
class Source:
    url: str
    keep: tuple[str, ...] = ("*",)      # globs on archive member paths to extract
    drop: tuple[str, ...] = ()          # globs on member paths to skip
    text_bvh: bool = False              # rename '*.txt' files that hold BVH (Unity assets) to '.bvh'
    nested: bool = True                 # unpack archives found inside the archive
    note: str = ""


# The two public sets the project uses (GitHub repository archives of the default branch). The member
# filters keep the motion capture and licences and leave out code, Unity assets and unrelated clips.
SOURCES: dict[str, Source] = {
    "jlpm22-locomotion": Source(
        url="https://github.com/JLPM22/MotionMatching/archive/HEAD.zip",
        keep=("*/Animations/BVH/*.txt", "*/Animations/BVH/*.bvh", "*/LICENSE*"),
        drop=("*subject*", "*TPose*", "*tpose*", "*/LearnedMotionMatching/*", "*/02_01*", "*.meta"),
        text_bvh=True,
        note="JLPM22/MotionMatching (MIT, Jose Luis Ponton); BVH files are stored there as .txt"),
    "bandai-namco": Source(
        url="https://github.com/BandaiNamcoResearchInc/Bandai-Namco-Research-Motiondataset/archive/HEAD.zip",
        keep=("*.bvh", "*/data.zip", "*/cfg/*", "*LICENSE*", "*/README.md"),
        note="Bandai-Namco-Research-Motiondataset (CC BY-NC 4.0); clips come in nested data.zip files"),
}


class FetchError(RuntimeError):
    """A download or unpack that failed; the message says what and where."""


# ---------------------------------------------------------------- download

def _download(url: str, dest: Path, progress: bool = True, timeout: float = 60.0) -> Path:
    """Download url to dest through dest.part, resuming a previous partial download."""
    if dest.exists():
        return dest
    part = dest.with_name(dest.name + ".part")
    dest.parent.mkdir(parents=True, exist_ok=True)
    have = part.stat().st_size if part.exists() else 0
    req = urllib.request.Request(url, headers={"User-Agent": "motionmatch-fetch"})
    if have:
        req.add_header("Range", f"bytes={have}-")
    try:
        resp = urllib.request.urlopen(req, timeout=timeout)
    except urllib.error.HTTPError as e:
        if e.code == 416 and have:  # the partial file is already whole
            os.replace(part, dest)
            return dest
        raise FetchError(f"download failed: {url}: HTTP {e.code} {e.reason}") from None
    except (urllib.error.URLError, OSError) as e:
        raise FetchError(f"download failed: {url}: {getattr(e, 'reason', e)}") from None
    with resp:
        resumed = have and resp.status == 206
        if not resumed:
            have = 0  # the server ignored the Range: start over
        length = resp.headers.get("Content-Length")
        total = have + int(length) if length and length.isdigit() else None
        from tqdm import tqdm
        with open(part, "ab" if resumed else "wb") as f, \
                tqdm(total=total, initial=have, unit="B", unit_scale=True, unit_divisor=1024,
                     desc=dest.name.split("-")[0], disable=not progress, leave=False) as bar:
            while True:
                try:
                    chunk = resp.read(_CHUNK)
                except OSError as e:
                    raise FetchError(f"download interrupted: {url}: {e} (run again to resume)") from None
                if not chunk:
                    break
                f.write(chunk)
                bar.update(len(chunk))
    if total is not None and part.stat().st_size != total:
        raise FetchError(f"download incomplete: {url}: {part.stat().st_size} of {total} bytes "
                         f"(run again to resume)")
    os.replace(part, dest)
    return dest


# ---------------------------------------------------------------- safe unpacking

def _safe_member(name: str) -> PurePosixPath:
    """A relative path with no '..' or absolute parts, or FetchError."""
    p = PurePosixPath(name.replace("\\", "/"))
    if p.is_absolute() or name.startswith(("/", "\\")) or (p.parts and ":" in p.parts[0]):
        raise FetchError(f"unsafe absolute path in archive: {name!r}")
    if any(part == ".." for part in p.parts):
        raise FetchError(f"unsafe path with '..' in archive: {name!r}")
    return p


def _glob(member: PurePosixPath, pattern: str) -> bool:
    """Glob on the member path ('*' also crosses '/'); a pattern without a leading '*' matches a tail."""
    pat = pattern if pattern.startswith("*") else "*/" + pattern.lstrip("/")
    return fnmatch.fnmatchcase("/" + str(member), pat)


def _wanted(member: PurePosixPath, src: Source) -> bool:
    return any(_glob(member, g) for g in src.keep) and not any(_glob(member, g) for g in src.drop)


def _write_member(dest_root: Path, rel: PurePosixPath, fileobj) -> Path:
    out = dest_root.joinpath(*rel.parts)
    # belt and braces: the resolved path must stay inside dest_root
    if not out.resolve().is_relative_to(dest_root.resolve()):
        raise FetchError(f"unsafe path in archive: {str(rel)!r}")
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out, "wb") as f:
        shutil.copyfileobj(fileobj, f, _CHUNK)
    return out


def _archive_kind(path: Path) -> str:
    with open(path, "rb") as f:
        head = f.read(512)
    if head[:4] == b"PK\x03\x04" or head[:4] == b"PK\x05\x06":
        return "zip"
    if head[:2] == b"\x1f\x8b" or head[:3] == b"BZh" or head[:6] == b"\xfd7zXZ\x00" or head[257:262] == b"ustar":
        return "tar"
    raise FetchError(f"{path}: not a zip or tar archive")


def unpack(archive: Path, dest: Path, src: Source = Source(url="")) -> list[Path]:
    """Extract the wanted regular files of a zip/tar(.gz) archive under dest, safely. Returns them."""
    kind = _archive_kind(archive)
    written: list[Path] = []
    if kind == "zip":
        with zipfile.ZipFile(archive) as zf:
            for info in zf.infolist():
                rel = _safe_member(info.filename)
                if info.is_dir():
                    continue
                mode = info.external_attr >> 16
                if mode and (mode & 0o170000) not in (0, 0o100000):  # symlink or special file
                    raise FetchError(f"{archive}: refusing non-regular file {info.filename!r}")
                if _wanted(rel, src):
                    with zf.open(info) as f:
                        written.append(_write_member(dest, rel, f))
    else:
        with tarfile.open(archive, "r:*") as tf:
            for m in tf:
                rel = _safe_member(m.name)
                if m.isdir():
                    continue
                if not m.isfile():
                    raise FetchError(f"{archive}: refusing link or special file {m.name!r}")
                if _wanted(rel, src):
                    written.append(_write_member(dest, rel, tf.extractfile(m)))
    return written


def _postprocess(files: list[Path], dest: Path, src: Source) -> list[Path]:
    """Unpack nested archives (in place, then delete them) and rename text BVHs to .bvh."""
    out = []
    for f in files:
        low = f.name.lower()
        if src.nested and low.endswith((".zip", ".tgz", ".tar.gz", ".tar")):
            inner = Source(url="", keep=("*",), drop=src.drop, text_bvh=src.text_bvh, nested=False)
            sub = f.parent
            out += _postprocess(unpack(f, sub, inner), dest, inner)
            f.unlink()
            continue
        if src.text_bvh and f.suffix.lower() == ".txt":
            with open(f, "rb") as fh:
                head = fh.read(64).lstrip(b"\xef\xbb\xbf \t\r\n")
            if head.startswith(b"HIERARCHY"):
                g = f.with_suffix(".bvh")
                os.replace(f, g)
                f = g
        out.append(f)
    return out


# ---------------------------------------------------------------- fetch

def fetch(name: str = DEFAULT_NAME, url: str | None = None, cache: str | os.PathLike | None = None,
          force: bool = False, progress: bool = True) -> Path:
    """Download and unpack data set `name` into `<cache>/<name>` (default cache: ~/.cache/motionmatch).
    url overrides the known source (then everything in the archive is kept). Returns the folder."""
    if url:
        src = Source(url=url)
    elif name in SOURCES:
        src = SOURCES[name]
    else:
        raise FetchError(f"unknown data set {name!r}: known {', '.join(SOURCES)}; or give --url")
    root = Path(cache).expanduser() if cache else cache_root()
    target = root / name
    if (target / MARKER).exists() and not force:
        return target
    tag = hashlib.sha1(src.url.encode()).hexdigest()[:10]
    archive = root / ".downloads" / f"{name}-{tag}.archive"
    if force and archive.exists():
        archive.unlink()
    _download(src.url, archive, progress=progress)

    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{name}.", dir=root))
    try:
        files = _postprocess(unpack(archive, tmp, src), tmp, src)
        if not any(f.suffix.lower() == ".bvh" or f.name.lower().endswith(".bvh.gz") for f in files):
            raise FetchError(f"{src.url}: the archive holds no BVH files (kept {len(files)} files)")
        (tmp / MARKER).write_text(f"{src.url}\n{len(files)} files\n")
        if target.exists():
            shutil.rmtree(target)
        os.replace(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return target
