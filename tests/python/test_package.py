# SPDX-License-Identifier: GPL-2.0
"""The package as a package (issue 22): its version is dist/VERSION, and
kvshare.session finds kvshared where the issue says, in its order -- the
one `make install` installed, then $KVSHARED, then PATH -- or says how to
get one.  Each case lays real kvshared binaries out under tmp_path and
points the search's two settings (INSTALL_PREFIXES, PACKAGE_DIR) there; the
Daemon found is then started for real.  Run against the build tree
(python_test) and against a pip-installed copy (tests/pip)."""
import importlib.metadata
import os

import pytest

import kvshare
from kvshare import session

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")


def test_version_is_dist_version():
    """One version for kvshare.pc, the DKMS tree and the package."""
    with open(os.path.join(ROOT, "dist", "VERSION")) as f:
        want = f.read().strip()
    assert kvshare.__version__ == want
    try:
        meta = importlib.metadata.version("kvshare")
    except importlib.metadata.PackageNotFoundError:
        meta = None             # the build tree has no metadata
    assert meta in (None, want)


@pytest.fixture
def layout(tmp_path, monkeypatch, daemon):
    """place(rel) puts a real kvshared at tmp_path/rel and returns its path;
    the search starts with nothing: no install prefix, a package directory
    with nothing beside it, no $KVSHARED, an empty PATH."""
    real = daemon.binary

    def place(rel):
        p = tmp_path / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.symlink_to(real)
        return str(p)

    monkeypatch.setattr(session, "INSTALL_PREFIXES", (str(tmp_path / "usr"),))
    monkeypatch.setattr(session, "PACKAGE_DIR",
                        str(tmp_path / "venv/lib/python3/site-packages/kvshare"))
    monkeypatch.delenv("KVSHARED", raising=False)
    monkeypatch.setenv("PATH", "")
    place.root = tmp_path
    return place


def started_with(path):
    """A Daemon with no kvshared given starts `path`, and it serves."""
    with session.Daemon() as d:
        assert d.binary == path
        assert d.proc.args[0] == path
        with kvshare.Arbiter(d.socket) as a:
            assert a.pools() == []


def test_find_order_installed_env_path(layout, monkeypatch):
    installed = layout("usr/sbin/kvshared")
    env = layout("env/kvshared")
    on_path = layout("bin2/kvshared")
    monkeypatch.setenv("KVSHARED", env)
    monkeypatch.setenv("PATH", "%s:%s" % (layout.root / "empty", layout.root / "bin2"))
    assert session.find_kvshared() == installed
    started_with(installed)
    os.unlink(installed)
    assert session.find_kvshared() == env
    started_with(env)
    monkeypatch.delenv("KVSHARED")
    assert session.find_kvshared() == on_path
    started_with(on_path)


def test_package_of_make_install_finds_its_prefix(layout, monkeypatch):
    """`make install` prefix=P puts the package in
    P/lib/python3.X/dist-packages and kvshared in P/sbin."""
    mine = layout("opt/kvs/sbin/kvshared")
    layout("usr/sbin/kvshared")
    monkeypatch.setattr(session, "PACKAGE_DIR",
                        str(layout.root / "opt/kvs/lib/python3.11/dist-packages/kvshare"))
    assert session.find_kvshared() == mine


def test_build_tree_kvshared_only_for_the_build_tree(layout, monkeypatch):
    tree = layout("build/kvshared")
    layout("usr/sbin/kvshared")
    monkeypatch.setattr(session, "PACKAGE_DIR", str(layout.root / "build/python/kvshare"))
    assert session.find_kvshared() == tree
    # The same relative place next to an installed copy is not looked at.
    layout("venv/lib/python3/kvshared")
    monkeypatch.setattr(session, "PACKAGE_DIR",
                        str(layout.root / "venv/lib/python3/site-packages/kvshare"))
    assert session.find_kvshared() == str(layout.root / "usr/sbin/kvshared")


def test_none_found_says_how_to_get_one(layout, monkeypatch):
    """Empty PATH, no $KVSHARED, nothing installed: the error names where it
    looked and the two ways to get one."""
    assert session.find_kvshared() is None
    with pytest.raises(FileNotFoundError) as e:
        session.Daemon()
    msg = str(e.value)
    assert "kvshared not found" in msg
    assert str(layout.root / "usr/sbin/kvshared") in msg
    assert "'make && sudo make install'" in msg
    assert "$KVSHARED=/path/to/checkout/build/kvshared" in msg
    # A $KVSHARED that is no program is named as such, not run.
    bad = layout.root / "not-a-program"
    bad.write_text("#!/bin/sh\n")
    monkeypatch.setenv("KVSHARED", str(bad))
    assert session.find_kvshared() is None
    with pytest.raises(FileNotFoundError, match=r"\$KVSHARED=.*not-a-program is not an executable"):
        session.Daemon()
