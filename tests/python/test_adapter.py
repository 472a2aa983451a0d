# SPDX-License-Identifier: GPL-2.0
"""kvshare.adapter, the options both engine adapters share: the same keys
in kvshare.sglang's and kvshare.vllm's extra configs, the renamed ones
still accepted for one release with a warning."""
import logging

import pytest

from kvshare import adapter

COMMON = dict(pool="p1", arbiter="/run/kvshared.sock", owner=0, create=True, pages=64,
              mode="0660", timeout_ms=500, retry_s=0.5, namespace="t")


def opts(extra, strict=True, **defaults):
    return adapter.Options(extra, "kvshare.test", dict({"pool": "dflt"}, **defaults),
                           own={"kv_layout": (str, "")}, strict=strict)


def test_common_keys():
    o = opts(COMMON)
    assert (o.pool, o.arbiter, o.owner, o.create, o.pages, o.mode, o.timeout_ms,
            o.retry_s, o.namespace, o.kv_layout) == (
        "p1", "/run/kvshared.sock", 0, True, 64, 0o660, 500, 0.5, "t", None)
    assert opts({}).pool == "dflt" and opts({}).create is None


@pytest.mark.parametrize("old,new", [
    (dict(socket="/s"), dict(arbiter="/s")),
    (dict(create_mode=0o640), dict(mode=0o640)),
    (dict(create_pages=128), dict(create=True, pages=128)),
    (dict(create_pages=0), dict(create=False)),
])
def test_renamed_keys_work_with_a_warning(caplog, old, new):
    with caplog.at_level(logging.WARNING):
        o = opts(old)
    for k, v in new.items():
        assert getattr(o, k) == v
    (key,) = old
    assert any("%r is deprecated" % key in r.getMessage() for r in caplog.records)


def test_the_new_keys_warn_nothing(caplog):
    with caplog.at_level(logging.WARNING):
        opts(COMMON)
    assert not caplog.records


@pytest.mark.parametrize("extra,what", [
    (dict(socket="/a", arbiter="/b"), "both 'socket'"),
    (dict(create_pages=8, pages=9), "both 'create_pages'"),
    (dict(create_pages=-1), "create_pages"),
    (dict(pol="x"), "unknown extra config keys"),
    (dict(pool="a/b"), "pool 'a/b'"),
    (dict(pages=0), "pages 0"),
    (dict(mode="rw"), "octal"),
    (dict(mode=0o1777), "permission bits"),
    (dict(timeout_ms=-1), "timeout_ms -1"),
    (dict(retry_s=-1), "retry_s"),
    (dict(create="yes"), "'create': expected bool"),
    (dict(pages=True), "'pages': expected int"),
])
def test_bad_options_are_refused(extra, what):
    with pytest.raises(ValueError, match=what):
        opts(extra)


def test_lenient_leaves_the_engines_keys():
    o = opts(dict(COMMON, backend_name="kvshare", interface_v1=1), strict=False)
    assert o.pool == "p1"


def test_both_adapters_take_the_same_keys():
    """kvshare.sglang's options are kvshare.adapter's: every common key."""
    torch = pytest.importorskip("torch")  # noqa: F841
    import sglang_harness as H
    try:
        H.import_sglang()
    except FileNotFoundError as e:
        pytest.skip(str(e))
    from kvshare import sglang as ks
    o = ks.BackendOptions(dict(COMMON, backend_name="kvshare"))
    assert isinstance(o, adapter.Options)
    assert (o.arbiter, o.create, o.pages, o.mode) == ("/run/kvshared.sock", True, 64, 0o660)


def test_reopen():
    r = adapter.Reopen(60.0)
    assert r.ready()
    assert r.failed(adapter.DAEMON_GONE[0]) == 0 and r.ready()   # restarted: at once
    assert r.failed(110) == 60.0 and not r.ready()                # timed out: wait


def test_salt_text():
    assert adapter.salt_text("t/1", [("a", 1), ("b", "x")]) == "t/1|a=1|b=x"
    assert adapter.salt_digest("t/1", [("a", 1)]) != adapter.salt_digest("t/1", [("a", 2)])
