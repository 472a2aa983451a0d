# SPDX-License-Identifier: GPL-2.0
"""Pool memory reaches numpy and torch without a copy: the arrays sit on
the mapping itself, and a write through one process's tensor is read by
another process's array."""
import os
import subprocess
import sys

import numpy as np
import pytest

import kvshare

torch = pytest.importorskip("torch")


def test_views_are_the_mapping(mkpool):
    name = mkpool(pages=32, layers=3, kv_heads=2, head_dim=8, tokens_per_page=4)
    with kvshare.Pool(name) as p:
        base, pb = p.address, p.page_bytes
        for start, count in ((0, 32), (5, 1), (7, 16), (31, 1)):
            t = p.tensor(start, count)
            assert t.data_ptr() == base + start * pb
            assert t.shape == (count,) + p.page_shape and t.dtype == torch.bfloat16
            assert t.is_contiguous()
            a = p.numpy(start, count)
            assert a.__array_interface__["data"][0] == base + start * pb
            assert a.shape == t.shape and a.dtype == np.uint16 and a.flags.writeable
            del t, a
        pt = p.page_tensor(9)
        assert pt.data_ptr() == base + 9 * pb and pt.shape == p.page_shape
        # A write through the tensor is in the array, bit for bit.
        pt[1, 0, 2, 1].copy_(torch.arange(8, dtype=torch.bfloat16))
        a = p.numpy(9, 1)[0]
        assert a[1, 0, 2, 1].tolist() == torch.arange(8, dtype=torch.bfloat16).view(
            torch.int16).tolist()
        mv = memoryview(p.page(9))
        assert mv.shape == (1,) + p.page_shape and mv.format == "H" and not mv.readonly
        del pt, a, mv


@pytest.mark.parametrize("dtype,tdtype,fmt", [("f16", "float16", "e"),
                                              ("f32", "float32", "f")])
def test_dtypes(mkpool, dtype, tdtype, fmt):
    with kvshare.Pool(mkpool(pages=4, dtype=dtype)) as p:
        t = p.tensor()
        assert t.dtype == getattr(torch, tdtype)
        a = p.numpy()
        assert a.dtype == np.dtype(tdtype) and memoryview(p.view()).format == fmt
        t[2].fill_(0.25)
        assert (a[2] == 0.25).all() and (a[:2] == 0).all()
        del t, a


def test_dlpack_capsule_protocol(mkpool):
    with kvshare.Pool(mkpool(pages=4)) as p:
        v = p.view(1, 2)
        assert v.__dlpack_device__() == (1, 0)
        cap = v.__dlpack__()
        assert type(cap).__name__ == "PyCapsule"
        del cap                              # never consumed: freed, export dropped
        with pytest.raises(BufferError):
            v.__dlpack__(stream=1)
        t = torch.from_dlpack(v)
        assert t.data_ptr() == p.address + p.page_bytes
        del t, v


CHILD = r"""
import sys, kvshare, torch
p = kvshare.Pool(sys.argv[1])
page = int(sys.argv[2])
t = p.page_tensor(page)
assert t.data_ptr() == p.address + page * p.page_bytes
# Read what the parent wrote, then answer through the same memory.
want = torch.full(p.page_shape, 3.0, dtype=torch.bfloat16)
ok = torch.equal(t, want)
t.copy_(torch.arange(t.numel(), dtype=torch.float32).reshape(p.page_shape).to(torch.bfloat16))
print("child-saw-parent" if ok else "child-saw-other")
"""


def test_write_seen_by_another_process(mkpool):
    name = mkpool(pages=16, layers=2, kv_heads=2, head_dim=16, tokens_per_page=8)
    with kvshare.Pool(name) as p:
        page = int(p.alloc(1)[0])
        t = p.page_tensor(page)
        a = p.numpy(page, 1)[0]
        t.fill_(3.0)
        out = subprocess.run([sys.executable, "-c", CHILD, name, str(page)],
                             env=os.environ, capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip() == "child-saw-parent"
        want = torch.arange(t.numel(), dtype=torch.float32).reshape(p.page_shape).to(
            torch.bfloat16)
        assert torch.equal(t, want)             # the child's writes, in our tensor
        assert np.array_equal(a, want.view(torch.int16).numpy().view(np.uint16))
        p.put([page])
        del t, a


def test_engine_dtypes_are_the_c_table():
    """The engines' torch dtype -> pool dtype map (kvshare.blockcopy) is the C
    table's (_kvshare.dtypes()): every entry torch knows by name, the
    one-byte entry for the engines' fp8 storage, each of the table's size."""
    from kvshare import _kvshare
    from kvshare.blockcopy import DTYPE_NAMES

    sizes = {tname: size for _, tname, _, size in _kvshare.dtypes()}
    assert set(DTYPE_NAMES.values()) == set(sizes)
    for tname in ("float16", "bfloat16", "float32"):
        assert DTYPE_NAMES[getattr(torch, tname)] == tname
    assert DTYPE_NAMES[torch.uint8] == "fp8"
    for t, name in DTYPE_NAMES.items():
        assert torch.empty((), dtype=t).element_size() == sizes[name]
