# SPDX-License-Identifier: MIT
"""Build kvshare._kvshare for the interpreter that runs pip (pyproject.toml).

The extension is python/kvshare/*.c with libkv's sources compiled in, the
way python/python.mk builds it for Debian's python3: hidden visibility, so
the module exports PyInit__kvshare alone and libkv's symbols cannot clash
with another copy in the process.  What it compiles and links comes from
libkv/libkv.mk (LIBKV_SRCS, LIBKV_LDLIBS, LIBKV_CUDA_INC), the version from
dist/VERSION: one list and one version for make and pip alike.

Those files are found in the checkout (python/ is a subdirectory of it) or,
in an sdist, in the copy under libkv-src/ that `setup.py sdist` puts there.
In a checkout the build's outputs go to the checkout's build/pip/, with the
rest of what the project generates.
"""
import glob
import os
import re
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.command.build_py import build_py
from setuptools.command.sdist import sdist

HERE = os.path.dirname(os.path.abspath(__file__))
VENDORED = "libkv-src"
# What an sdist carries of the checkout, relative to its root.
ROOT_FILES = ["dist/VERSION", "libkv/libkv.mk", "libkv/client/*.[ch]",
              "libkv/cache/*.[ch]", "include/kvshare/*.h", "include/uapi/linux/*.h"]


def die(msg):
    sys.exit("kvshare setup.py: error: " + msg)


def find_root():
    """The directory holding libkv/, include/ and dist/VERSION."""
    for root in (os.path.join(HERE, VENDORED), os.path.dirname(HERE)):
        if all(os.path.isfile(os.path.join(root, f))
               for f in ("dist/VERSION", "libkv/libkv.mk")):
            return root
    die("libkv's sources are not in %s/.. (a kvshare checkout) nor in %s/%s "
        "(an sdist): build from a checkout (pip install <checkout>/python; "
        "pip older than 21.3 copies python/ away from it: upgrade pip) "
        "or from an sdist made by 'python3 setup.py sdist' there"
        % (HERE, HERE, VENDORED))


def make_vars(path):
    """The NAME := / += / ?= assignments of a make fragment, as lists of
    words (continuation lines joined; $(...) references left as they are)."""
    with open(path) as f:
        text = f.read().replace("\\\n", " ")
    out = {}
    for m in re.finditer(r"^([A-Z_]+)\s*([:?+]?=)\s*(.*)$", text, re.M):
        name, op, words = m.group(1), m.group(2), m.group(3).split()
        if op == "+=":
            out.setdefault(name, []).extend(words)
        elif op != "?=" or name not in out:
            out[name] = words
    return out


def cuda_include(default):
    """cuda.h's directory: device pools load the driver at run time
    (dlopen), so the header is all the build needs of CUDA."""
    cands = [os.environ.get("LIBKV_CUDA_INC")]
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(var):
            cands.append(os.path.join(os.environ[var], "include"))
    cands += default
    for d in cands:
        if d and os.path.isfile(os.path.join(d, "cuda.h")):
            return d
    die("cuda.h not found in %s: libkv's device pools need the header (not "
        "the library); set LIBKV_CUDA_INC=/path/to/cuda/include or CUDA_HOME"
        % ", ".join(d for d in cands if d))


def numpy_include():
    try:
        import numpy
    except ImportError:
        die("numpy is not installed in the build environment: install it "
            "(Debian: python3-numpy), or let pip build in isolation")
    return numpy.get_include()


ROOT = find_root()
with open(os.path.join(ROOT, "dist", "VERSION")) as f:
    VERSION = f.read().strip()
if not re.fullmatch(r"[0-9A-Za-z.+~-]+", VERSION):
    die("dist/VERSION holds %r, not a version" % VERSION)
LIBKV = make_vars(os.path.join(ROOT, "libkv", "libkv.mk"))
LIBKV_SRCS = [os.path.join(ROOT, s) for s in LIBKV["LIBKV_SRCS"]]
for s in LIBKV_SRCS:
    if not os.path.isfile(s):
        die("%s (LIBKV_SRCS in libkv/libkv.mk) is missing" % s)
LDLIBS = LIBKV["LIBKV_LDLIBS"]
IN_CHECKOUT = ROOT == os.path.dirname(HERE)


def ext_sources():
    """python/kvshare/*.c, as make's wildcard finds them, then libkv."""
    own = sorted(glob.glob(os.path.join(HERE, "kvshare", "*.c")))
    if not own:
        die("no kvshare/*.c next to %s" % __file__)
    return [os.path.relpath(s, HERE) for s in own] + LIBKV_SRCS


def ext_depends():
    """What a kept build is rebuilt after: the headers, libkv, dist/VERSION
    and this file (the flags)."""
    own = glob.glob(os.path.join(HERE, "kvshare", "*.h")) + [__file__]
    lib = [g for p in ROOT_FILES for g in glob.glob(os.path.join(ROOT, p))]
    return sorted(os.path.relpath(s, HERE) for s in own) + sorted(lib)


kvshare_ext = Extension(
    "kvshare._kvshare",
    sources=ext_sources(),
    depends=ext_depends(),
    include_dirs=[os.path.join(ROOT, "include"),
                  os.path.join(ROOT, "include", "uapi")],
    define_macros=[("_GNU_SOURCE", None),
                   ("KVSHARE_VERSION", '"%s"' % VERSION)],
    extra_compile_args=[
        "-fvisibility=hidden", "-Wall", "-Wextra",
        "-Werror=implicit-function-declaration",
        "-Wno-unused-parameter", "-Wno-missing-field-initializers",
        # No debug information, which Python's CFLAGS ask for: a wheel a
        # third the size.  No build directory in __FILE__ or any debug
        # information left: the wheel holds no absolute build path.
        "-g0", "-ffile-prefix-map=%s=kvshare" % ROOT],
    libraries=[w[2:] for w in LDLIBS if w.startswith("-l")],
    extra_link_args=[w for w in LDLIBS if not w.startswith("-l")],
)


class BuildExt(build_ext):
    """numpy's headers and cuda.h are looked for only when compiling, so
    that metadata and an sdist need neither."""

    def build_extensions(self):
        for ext in self.extensions:
            ext.include_dirs.append(numpy_include())
            ext.extra_compile_args[:0] = [
                "-isystem", cuda_include(LIBKV.get("LIBKV_CUDA_INC", []))]
        super().build_extensions()


class BuildPy(build_py):
    """Drops modules of an earlier build that python/kvshare/ no longer
    has: the build directory is kept between builds, and a stale module
    must not end up in the wheel."""

    def run(self):
        have = {os.path.basename(p)
                for p in glob.glob(os.path.join(HERE, "kvshare", "*.py"))}
        for old in glob.glob(os.path.join(self.build_lib, "kvshare", "*.py")):
            if os.path.basename(old) not in have:
                os.remove(old)
        super().run()


class Sdist(sdist):
    """An sdist that builds anywhere: libkv's sources, its headers and the
    version go in, under libkv-src/, where find_root() looks first."""

    def make_release_tree(self, base_dir, files):
        super().make_release_tree(base_dir, files)
        for pattern in ROOT_FILES:
            for src in glob.glob(os.path.join(ROOT, pattern)):
                rel = os.path.relpath(src, ROOT)
                dst = os.path.join(base_dir, VENDORED, rel)
                self.mkpath(os.path.dirname(dst))
                self.copy_file(src, dst)


# In a checkout, build where the project builds everything else.
OPTIONS = {}
if IN_CHECKOUT:
    base = os.path.join(ROOT, "build", "pip")
    OPTIONS = {"build": {"build_base": base}, "egg_info": {"egg_base": base}}
    os.makedirs(base, exist_ok=True)

setup(
    version=VERSION,
    # Every python/kvshare/*.py is a module of the package, found by
    # setuptools (the adapters included); nothing else is.
    packages=["kvshare"],
    include_package_data=False,
    zip_safe=False,
    ext_modules=[kvshare_ext],
    cmdclass={"build_ext": BuildExt, "build_py": BuildPy, "sdist": Sdist},
    options=OPTIONS,
)
