# SPDX-License-Identifier: GPL-2.0
"""python3 -m kvshare.demo on its embedded default: every verified request
equals the run without sharing, and a damaged shared page is caught."""
import os
import subprocess
import sys

import pytest

pytest.importorskip("torch")
SMALL = ["--workers", "2", "--requests", "3", "--system-tokens", "64", "--doc-tokens",
         "64", "--question-tokens", "8", "--gen-tokens", "3", "--verify", "1"]


def demo(*args):
    env = dict(os.environ)
    env.pop("KVSHARE_ARBITER", None)       # the demo starts its own kvshared
    return subprocess.run([sys.executable, "-m", "kvshare.demo", *SMALL, *args], env=env,
                          capture_output=True, text=True, timeout=300)


def test_demo_equal_to_unshared_run():
    out = demo()
    assert out.returncode == 0, out.stdout + out.stderr
    assert "6 requests recomputed without sharing: equal (torch.equal)" in out.stdout
    assert "hit rate" in out.stdout and "pages shared" in out.stdout
    assert "prefill time saved" in out.stdout and " 0 held" in out.stdout


def test_demo_catches_a_damaged_shared_page():
    out = demo("--workers", "1", "--corrupt")
    assert out.returncode == 1, out.stdout + out.stderr
    assert "MISMATCH" in out.stdout and "differs from the run without sharing" in out.stderr
    # The request that computed the page itself still verified.
    assert "2 MISMATCH(ES)" in out.stdout


def test_demo_bad_arguments():
    out = demo("--workers", "0")
    assert out.returncode == 2 and "--workers must be at least 1" in out.stderr
