"""Build hook: wheels carry the browser page's JavaScript dependencies (three.js), so an installed
`motionmatch serve` works without node or npm. The files are copied at build time from node_modules
(`npm ci`, or $MOTIONMATCH_NODE_MODULES) into motionmatch/app/vendor/three/, following the ES-module
imports of three.js's entry point and of every `three/addons/...` module the page imports; nothing is
vendored in git. A source distribution carries the copied files too, so a wheel built from it has them.
Everything else about the package is in pyproject.toml."""
import os
import re
import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.command.sdist import sdist

HERE = Path(__file__).resolve().parent
STATIC = HERE / "src" / "motionmatch" / "app" / "static"
IN_SDIST = HERE / "src" / "motionmatch" / "app" / "vendor"     # present only in an unpacked sdist
IMPORT = re.compile(r"""(?:\bfrom\s*|\bimport\s*\(?\s*)['"]([^'"]+)['"]""")
COMMENT = re.compile(r"/\*.*?\*/|^\s*//.*?$", re.S | re.M)


def _imports(text):
    return IMPORT.findall(COMMENT.sub("", text))


def _three_dir():
    for root in (os.environ.get("MOTIONMATCH_NODE_MODULES"), HERE / "node_modules"):
        if root and (Path(root) / "three" / "build" / "three.module.js").is_file():
            return (Path(root) / "three").resolve()    # a symlinked node_modules: paths below compare resolved
    return None


def copy_three(dest: Path) -> int:
    """Copy three.js's entry module and the page's addons with everything they import; returns the file count."""
    three = _three_dir()
    if three is None:
        if (IN_SDIST / "three").is_dir():
            shutil.copytree(IN_SDIST, dest, dirs_exist_ok=True)
            return sum(1 for p in dest.rglob("*") if p.is_file())
        raise SystemExit("motionmatch build: three.js not found; run `npm ci` (make node_modules) first "
                         "or set MOTIONMATCH_NODE_MODULES")
    todo = [three / "build" / "three.module.js"]
    for page in STATIC.glob("*.js"):
        todo += [three / "examples" / "jsm" / s[len("three/addons/"):] for s in _imports(page.read_text())
                 if s.startswith("three/addons/")]
    seen = set()
    while todo:
        f = todo.pop().resolve()
        if f in seen or not f.is_file():
            continue
        seen.add(f)
        out = dest / "three" / f.relative_to(three)
        out.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(f, out)
        todo += [(f.parent / s) for s in _imports(f.read_text()) if s.startswith(".")]
        todo += [three / "build" / "three.module.js" for s in _imports(f.read_text()) if s == "three"]
    shutil.copyfile(three / "LICENSE", dest / "three" / "LICENSE")
    return len(seen)


class BuildPyWithThree(build_py):
    def run(self):
        super().run()
        if getattr(self, "editable_mode", False):
            return   # an editable install serves three.js from the checkout's node_modules, which may come later
        n = copy_three(Path(self.build_lib) / "motionmatch" / "app" / "vendor")
        print(f"motionmatch build: {n} three.js modules packaged")


class SdistWithThree(sdist):
    def make_release_tree(self, base_dir, files):
        super().make_release_tree(base_dir, files)
        copy_three(Path(base_dir) / "src" / "motionmatch" / "app" / "vendor")


setup(cmdclass={"build_py": BuildPyWithThree, "sdist": SdistWithThree})
