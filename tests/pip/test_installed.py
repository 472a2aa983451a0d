# SPDX-License-Identifier: GPL-2.0
"""The pip-installed package (issue 22), run by tests/pip/venv_test.sh in
the venv it made ($KVS_VENV) with the wheel it built ($KVS_WHEEL): kvshare
is the venv's copy, not the build tree's; the wheel holds every module of
python/kvshare and the extension, no build path, and an extension that
exports PyInit__kvshare alone; its metadata has dist/VERSION."""
import glob
import importlib
import importlib.metadata
import os
import subprocess
import sys
import sysconfig
import zipfile

import pytest

import kvshare

ROOT = os.path.realpath(os.path.join(os.path.dirname(__file__), "..", ".."))
VENV = os.environ.get("KVS_VENV")
WHEEL = os.environ.get("KVS_WHEEL")
BUILD = os.environ.get("KVS_BUILD", os.path.join(ROOT, "build"))
SOURCE_MODULES = sorted(os.path.basename(p)[:-3]
                        for p in glob.glob(os.path.join(ROOT, "python", "kvshare", "*.py")))

pytestmark = pytest.mark.skipif(not (VENV and WHEEL),
                                reason="run by tests/pip/venv_test.sh, in the venv it makes")


def under(path, top):
    path, top = os.path.realpath(path), os.path.realpath(top)
    return os.path.commonpath([path, top]) == top


def test_package_is_the_venvs():
    assert under(kvshare.__file__, VENV), kvshare.__file__
    assert under(kvshare._kvshare.__file__, VENV), kvshare._kvshare.__file__
    assert under(sys.prefix, VENV) and sys.prefix != sys.base_prefix
    assert not under(os.getcwd(), ROOT), "the suite must run outside the checkout"
    for p in sys.path:
        assert not under(p or ".", os.path.join(BUILD, "python")), sys.path
        assert not under(p or ".", os.path.join(ROOT, "python")), sys.path


@pytest.mark.parametrize("name", SOURCE_MODULES)
def test_every_module_is_installed_and_imports(name):
    """Every python/kvshare/*.py (the engines' adapters included) is in the
    package without being listed anywhere."""
    mod = importlib.import_module("kvshare." + name)
    assert under(mod.__file__, VENV)


def test_version_metadata():
    with open(os.path.join(ROOT, "dist", "VERSION")) as f:
        want = f.read().strip()
    assert importlib.metadata.version("kvshare") == want == kvshare.__version__
    meta = importlib.metadata.metadata("kvshare")
    assert meta["Requires-Python"] == ">=3.10"
    assert "numpy" in meta.get_all("Requires-Dist")
    assert os.path.basename(WHEEL).startswith("kvshare-%s-" % want)


def test_wheel_contents():
    with zipfile.ZipFile(WHEEL) as z:
        names = z.namelist()
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    py = sorted(n[len("kvshare/"):-3] for n in names
                if n.startswith("kvshare/") and n.endswith(".py"))
    assert py == SOURCE_MODULES
    assert [n for n in names if n.startswith("kvshare/") and not n.endswith(".py")] \
        == ["kvshare/_kvshare" + suffix]
    assert all(n.startswith(("kvshare/", "kvshare-")) for n in names), names


def test_wheel_holds_no_build_path():
    """Neither the checkout, nor its build directory, nor the temporary
    directory the venv and the wheel were made in, appear in any file."""
    paths = {ROOT, os.path.realpath(BUILD), os.path.dirname(os.path.realpath(VENV))}
    with zipfile.ZipFile(WHEEL) as z:
        for n in z.namelist():
            data = z.read(n)
            for p in paths:
                assert p.encode() not in data, "%s holds %s" % (n, p)
            assert b"/build/pip/" not in data, n


def test_extension_exports_only_its_init():
    """libkv is compiled in with hidden visibility: nothing of it can
    clash with another copy in the engine's process."""
    out = subprocess.run(["nm", "-D", "--defined-only", kvshare._kvshare.__file__],
                         capture_output=True, text=True, check=True).stdout
    syms = [line.split()[-1] for line in out.splitlines() if line.strip()]
    assert syms == ["PyInit__kvshare"]
