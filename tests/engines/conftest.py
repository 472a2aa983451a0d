# SPDX-License-Identifier: GPL-2.0
"""Fixtures of the engine suite: a private kvshared for the module (the
engines attach it through the connector's `socket`), the model
directories, and a log directory whose engine logs are kept for a failing
test (build/results/engines/)."""
import os
import shutil

import pytest

from kvshare.session import Daemon

import engines

BUILD = os.environ.get("KVS_BUILD") or os.path.join(
    os.path.dirname(__file__), "..", "..", "build")


def kvshared_binary():
    for c in (os.environ.get("KVSHARED"), os.path.join(BUILD, "kvshared")):
        if c and os.access(c, os.X_OK):
            return c
    pytest.fail("kvshared is not built (%s/kvshared)" % BUILD)


@pytest.fixture(scope="module")
def daemon():
    d = Daemon(kvshared=kvshared_binary(), args=["--max-pools", "64"])
    d.start()
    yield d
    d.stop()


@pytest.fixture(scope="session")
def workdir(tmp_path_factory):
    return str(tmp_path_factory.mktemp("engines"))


@pytest.fixture(scope="session")
def logdir():
    d = os.path.join(BUILD, "results", "engines")
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    return d


@pytest.fixture(scope="session")
def models(workdir):
    """"a": the suite's Llama; "b": another model of the same KV geometry
    (a wider MLP), whose pages must never be served to "a"."""
    return {"a": engines.write_model(os.path.join(workdir, "llama-a")),
            "b": engines.write_model(os.path.join(workdir, "llama-b"),
                                     intermediate_size=768)}
