"""fetch-data against a local HTTP server (the real sources are not reachable here), and data paths."""
from __future__ import annotations

import argparse
import gzip
import io
import tarfile
import threading
import zipfile
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from bvh_fixtures import tiny_bvh_text
from motionmatch.posedb import datapaths
from motionmatch.posedb.datapaths import DataNotFoundError, find_data, list_bvh_files
from motionmatch.cli.fetch import add_fetch_args, run_fetch
from motionmatch.posedb.fetch import MARKER, FetchError, Source, fetch, unpack
from motionmatch.io.bvh import read_bvh

BVH_A = tiny_bvh_text("ZXY", rows=((0, 1, 0, 0, 0, 0, 0, 0, 0), (0, 1, 0.1, 0, 10, 0, 0, 0, 5)))
BVH_B = tiny_bvh_text("XYZ", rows=((0, 1, 0, 5, 0, 0, 0, 0, 0),))


def _zip_bytes(members: dict[str, bytes | str]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return buf.getvalue()


def _tar_gz_bytes(members: dict[str, bytes | str], symlink: tuple[str, str] | None = None) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tf:
        for name, data in members.items():
            data = data.encode() if isinstance(data, str) else data
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
        if symlink:
            info = tarfile.TarInfo(symlink[0])
            info.type = tarfile.SYMTYPE
            info.linkname = symlink[1]
            tf.addfile(info)
    return buf.getvalue()


GOOD_ZIP = _zip_bytes({"repo-main/data/walk_a.bvh": BVH_A, "repo-main/data/sub/run_b.bvh": BVH_B,
                       "repo-main/README.md": "tiny"})


class _Server:
    """Serves `files` (path -> bytes) on 127.0.0.1 with Range support; records the requests."""

    def __init__(self):
        self.files: dict[str, bytes] = {}
        self.requests: list[tuple[str, str | None]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                outer.requests.append((self.path, self.headers.get("Range")))
                data = outer.files.get(self.path)
                if data is None:
                    self.send_error(404, "Not Found")
                    return
                rng = self.headers.get("Range")
                start = int(rng.split("=")[1].split("-")[0]) if rng else 0
                if start >= len(data) and rng:
                    self.send_error(416)
                    return
                self.send_response(206 if rng else 200)
                self.send_header("Content-Length", str(len(data) - start))
                self.end_headers()
                self.wfile.write(data[start:])

            def log_message(self, *a):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    def url(self, path):
        return f"http://127.0.0.1:{self.httpd.server_address[1]}{path}"


@pytest.fixture
def server():
    s = _Server()
    s.thread.start()
    try:
        yield s
    finally:
        s.httpd.shutdown()
        s.httpd.server_close()
        s.thread.join(timeout=5)


def test_fetch_zip_unpacks_and_skips_second_time(server, tmp_path):
    server.files["/tiny.zip"] = GOOD_ZIP
    out = fetch("tiny", url=server.url("/tiny.zip"), cache=tmp_path, progress=False)
    assert out == tmp_path / "tiny" and (out / MARKER).exists()
    files = list_bvh_files(out)
    assert [str(f.relative_to(out)) for f in files] == ["repo-main/data/sub/run_b.bvh", "repo-main/data/walk_a.bvh"]
    assert read_bvh(files[1]).num_frames == 2
    assert (out / "repo-main" / "README.md").read_text() == "tiny"
    # no temporary folders or partial downloads left behind
    assert sorted(p.name for p in tmp_path.iterdir()) == [".downloads", "tiny"]
    assert [p.suffix for p in (tmp_path / ".downloads").iterdir()] == [".archive"]
    n = len(server.requests)
    assert fetch("tiny", url=server.url("/tiny.zip"), cache=tmp_path, progress=False) == out
    assert len(server.requests) == n  # already there: no request
    fetch("tiny", url=server.url("/tiny.zip"), cache=tmp_path, progress=False, force=True)
    assert len(server.requests) == n + 1


def test_fetch_tar_gz_and_member_filters(server, tmp_path):
    server.files["/set.tar.gz"] = _tar_gz_bytes({
        "proj/Assets/Animations/BVH/Locomotion.txt": BVH_A,     # a BVH stored as .txt (Unity asset)
        "proj/Assets/Animations/BVH/Locomotion.txt.meta": "unity",
        "proj/Assets/Animations/BVH/walk1_subject1.txt": BVH_B,  # dropped by the filter
        "proj/Assets/Animations/BVH/notes.txt": "not a bvh",
        "proj/LICENSE": "MIT",
        "proj/Code/main.cs": "code"})
    src = Source(url=server.url("/set.tar.gz"), keep=("*/Animations/BVH/*.txt", "*/LICENSE*"),
                 drop=("*subject*", "*.meta"), text_bvh=True)
    from motionmatch.posedb import fetch as fetch_mod
    fetch_mod.SOURCES["test-set"] = src
    try:
        out = fetch("test-set", cache=tmp_path, progress=False)
    finally:
        del fetch_mod.SOURCES["test-set"]
    kept = sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file())
    assert kept == [MARKER, "proj/Assets/Animations/BVH/Locomotion.bvh", "proj/Assets/Animations/BVH/notes.txt",
                    "proj/LICENSE"]
    assert read_bvh(out / "proj/Assets/Animations/BVH/Locomotion.bvh").num_frames == 2


def test_nested_zip_is_unpacked(server, tmp_path):
    inner = _zip_bytes({"data/clip_1.bvh": BVH_A, "data/clip_2.bvh": BVH_B})
    server.files["/outer.zip"] = _zip_bytes({"r/dataset-1/data.zip": inner, "r/README.md": "x"})
    out = fetch("nested", url=server.url("/outer.zip"), cache=tmp_path, progress=False)
    assert [f.name for f in list_bvh_files(out)] == ["clip_1.bvh", "clip_2.bvh"]
    assert not (out / "r/dataset-1/data.zip").exists()


@pytest.mark.parametrize("members", [{"../evil.bvh": BVH_A}, {"/abs/evil.bvh": BVH_A},
                                     {"ok/../../evil.bvh": BVH_A}])
def test_path_traversal_refused(server, tmp_path, members):
    cache = tmp_path / "cache"
    server.files["/evil.zip"] = _zip_bytes({"good/a.bvh": BVH_A, **members})
    with pytest.raises(FetchError, match="unsafe"):
        fetch("evil", url=server.url("/evil.zip"), cache=cache, progress=False)
    assert not (tmp_path / "evil.bvh").exists() and not (cache / "evil.bvh").exists()
    assert not Path("/abs/evil.bvh").exists()
    assert not (cache / "evil").exists()  # no half-unpacked data set
    assert [p.name for p in cache.iterdir()] == [".downloads"]


def test_tar_symlink_refused(tmp_path):
    arc = tmp_path / "link.tar.gz"
    arc.write_bytes(_tar_gz_bytes({"a/x.bvh": BVH_A}, symlink=("a/y.bvh", "/etc/passwd")))
    with pytest.raises(FetchError, match="link"):
        unpack(arc, tmp_path / "out")
    arc.write_bytes(_tar_gz_bytes({"../up.bvh": BVH_A}))
    with pytest.raises(FetchError, match="unsafe"):
        unpack(arc, tmp_path / "out")
    assert not (tmp_path / "up.bvh").exists()


def test_resume_partial_download(server, tmp_path):
    import random
    noise = random.Random(0).randbytes(100_000)  # incompressible, so the archive is ~100 kB
    big = _zip_bytes({"r/a.bvh": BVH_A, "r/noise.bin": noise})
    assert len(big) > 100_000
    server.files["/big.zip"] = big
    url = server.url("/big.zip")
    import hashlib
    tag = hashlib.sha1(url.encode()).hexdigest()[:10]
    part = tmp_path / ".downloads" / f"resume-{tag}.archive.part"
    part.parent.mkdir(parents=True)
    part.write_bytes(big[:5000])
    out = fetch("resume", url=url, cache=tmp_path, progress=False)
    assert server.requests[-1] == ("/big.zip", "bytes=5000-")
    assert (tmp_path / ".downloads" / f"resume-{tag}.archive").read_bytes() == big
    assert (out / "r" / "noise.bin").read_bytes() == noise


def test_errors_404_not_archive_no_bvh(server, tmp_path):
    with pytest.raises(FetchError, match="HTTP 404"):
        fetch("missing", url=server.url("/nope.zip"), cache=tmp_path, progress=False)
    server.files["/plain.zip"] = b"this is not an archive"
    with pytest.raises(FetchError, match="not a zip or tar"):
        fetch("plain", url=server.url("/plain.zip"), cache=tmp_path, progress=False)
    server.files["/nobvh.zip"] = _zip_bytes({"r/readme.txt": "hello"})
    with pytest.raises(FetchError, match="no BVH"):
        fetch("nobvh", url=server.url("/nobvh.zip"), cache=tmp_path, progress=False)
    with pytest.raises(FetchError, match="unknown data set"):
        fetch("no-such-set", cache=tmp_path, progress=False)


def test_cli_run_fetch(server, tmp_path, capsys):
    server.files["/tiny.zip"] = GOOD_ZIP
    parser = argparse.ArgumentParser()
    add_fetch_args(parser)
    args = parser.parse_args(["--url", server.url("/tiny.zip"), "--cache", str(tmp_path), "--name", "cli-set",
                              "--quiet"])
    assert run_fetch(args) == 0
    assert "cli-set: 2 BVH files" in capsys.readouterr().out
    args = parser.parse_args(["--url", server.url("/gone.zip"), "--cache", str(tmp_path), "--name", "x", "--quiet"])
    assert run_fetch(args) == 1
    assert "HTTP 404" in capsys.readouterr().err


# ---------------------------------------------------------------- datapaths

@pytest.fixture
def clean_env(monkeypatch, tmp_path):
    monkeypatch.delenv("MOTIONMATCH_DATA", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    return monkeypatch


def test_find_data_order(clean_env, tmp_path, server):
    given = tmp_path / "given"
    given.mkdir()
    env = tmp_path / "env"
    env.mkdir()
    clean_env.setenv("MOTIONMATCH_DATA", str(env))
    assert find_data("whatever", data=str(given)) == given
    assert find_data("whatever") == env
    clean_env.delenv("MOTIONMATCH_DATA")
    shared = datapaths.project_root().parent / "shared" / "mocap" / "jlpm22-locomotion"
    if shared.exists():
        assert find_data() == shared
    # the fetch cache is the last resort, and where fetch puts things by default
    server.files["/tiny.zip"] = GOOD_ZIP
    fetched = fetch("tiny-set", url=server.url("/tiny.zip"), progress=False)
    assert fetched == tmp_path / "xdg" / "motionmatch" / "tiny-set"
    assert find_data("tiny-set") == fetched


def test_find_data_not_found_message(clean_env, tmp_path):
    with pytest.raises(DataNotFoundError) as err:
        find_data("no-such-set")
    msg = str(err.value)
    assert isinstance(err.value, FileNotFoundError)
    assert "shared/mocap/no-such-set" in msg and str(tmp_path / "xdg" / "motionmatch" / "no-such-set") in msg
    assert "motionmatch fetch-data" in msg and "--data" in msg and "MOTIONMATCH_DATA" in msg
    # an explicit --data that does not exist is reported, not silently replaced
    with pytest.raises(DataNotFoundError, match="--data: .*nowhere"):
        find_data("jlpm22-locomotion", data=str(tmp_path / "nowhere"))


def test_list_bvh_files(tmp_path):
    for rel in ["b/walk_2.bvh", "a/walk_1.bvh.gz", "a/run_1.bvh", "a/notes.txt", "a/walk_1.bvh.meta",
                "c/deep/er/idle.BVH"]:
        p = tmp_path / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(gzip.compress(BVH_A.encode()) if rel.endswith(".gz") else BVH_A.encode())
    names = lambda fs: [str(f.relative_to(tmp_path)) for f in fs]
    assert names(list_bvh_files(tmp_path)) == ["a/run_1.bvh", "a/walk_1.bvh.gz", "b/walk_2.bvh", "c/deep/er/idle.BVH"]
    assert names(list_bvh_files([tmp_path / "b", tmp_path / "a"], include="walk*")) == ["a/walk_1.bvh.gz",
                                                                                      "b/walk_2.bvh"]
    assert names(list_bvh_files(tmp_path, include=["walk*", "idle*"], exclude="*.gz")) == ["b/walk_2.bvh",
                                                                                         "c/deep/er/idle.BVH"]
    assert names(list_bvh_files([tmp_path / "a/run_1.bvh", tmp_path / "a"])) == ["a/run_1.bvh", "a/walk_1.bvh.gz"]
    assert read_bvh(tmp_path / "a/walk_1.bvh.gz").num_frames == 2
    with pytest.raises(FileNotFoundError):
        list_bvh_files(tmp_path / "missing")
