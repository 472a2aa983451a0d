# SPDX-License-Identifier: GPL-2.0
"""SGLang as its storage backends see it, on Debian's torch 1.13 (CPU).

* import_sglang(): the installed sglang's modules where sglang is
  installed (the engine environment); else SGLang's REAL interface files
  from the peers tree (../shared/peers/sglang, verbatim upstream), imported
  as SGLang imports them: a bare ``sglang`` package (its real __init__ pulls in the whole
  engine) whose __path__ is the peers tree.  Two modules absent from the
  peers tree are stood in for: ``sglang.srt.environ`` (SGLang's env-var
  registry: every variable unset) and ``human_readable_int`` (HiCacheFile's
  size parser, unused while no size cap is configured).
* HostPool: the memory of SGLang's MHA and MLA host pools (pool_host/mha.py,
  mla.py) for every layout, with the four methods storage backends use
  (get_page_buffer_meta, get_data_page, get_dummy_flat_data_page,
  set_from_flat_data_page) and the controller's page-aligned alloc/free.
  The real classes need torch >= 2.1 (dtype.itemsize) and the CUDA kernels.
* The controller's storage calls (managers/cache_controller.py): backup in
  128-page batches, prefetch = batch_exists batches then batch_get_v1 (or
  the generic batch_get + set_from_flat_data_page).
"""
import hashlib
import importlib.metadata
import os
import sys
import types

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
PEERS = os.environ.get("KVS_SGLANG_PEERS") or os.path.normpath(
    os.path.join(HERE, "..", "..", "..", "shared", "peers", "sglang", "python"))
STORAGE_BATCH = 128          # hicache_storage.STORAGE_BATCH_SIZE


class _EnvVar:
    def __init__(self, name):
        self.name = name

    def get(self):
        return os.environ.get(self.name) or None


class _Envs:
    def __getattr__(self, name):
        return _EnvVar(name)


def _human_readable_int(s):
    units = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
    s = s.strip().lower().rstrip("ib")
    return int(float(s[:-1]) * units[s[-1]]) if s[-1:] in units else int(s)


def _installed():
    """Whether an installed sglang (the engine environment's) is there."""
    try:
        importlib.metadata.version("sglang")
        return True
    except importlib.metadata.PackageNotFoundError:
        return False


def import_sglang():
    """A namespace with SGLang's real HiCacheStorage, HiCacheStorageConfig,
    HiCacheStorageExtraInfo, StorageBackendFactory and HiCacheFile: the
    installed sglang's where there is one, else the peers tree's."""
    tree = os.path.join(PEERS, "sglang")
    if _installed():
        pass
    elif not os.path.isfile(os.path.join(tree, "srt", "mem_cache", "hicache_storage.py")):
        raise FileNotFoundError("SGLang's interface files are not at %s "
                                "(set $KVS_SGLANG_PEERS)" % tree)
    elif "sglang" not in sys.modules:
        pkg = types.ModuleType("sglang")
        pkg.__path__ = [tree]
        sys.modules["sglang"] = pkg
        env = types.ModuleType("sglang.srt.environ")
        env.envs = _Envs()
        sys.modules["sglang.srt.environ"] = env
        utils = types.ModuleType("sglang.srt.utils")
        utils.__path__ = []
        common = types.ModuleType("sglang.srt.utils.common")
        common.human_readable_int = _human_readable_int
        sys.modules["sglang.srt.utils"] = utils
        sys.modules["sglang.srt.utils.common"] = common
    from sglang.srt.mem_cache import hicache_storage as hs
    from sglang.srt.mem_cache.storage.backend_factory import StorageBackendFactory
    return types.SimpleNamespace(
        HiCacheStorage=hs.HiCacheStorage, HiCacheStorageConfig=hs.HiCacheStorageConfig,
        HiCacheStorageExtraInfo=hs.HiCacheStorageExtraInfo, HiCacheFile=hs.HiCacheFile,
        StorageBackendFactory=StorageBackendFactory, STORAGE_BATCH_SIZE=hs.STORAGE_BATCH_SIZE)


class HostPool:
    """An SGLang host KV pool's memory and storage-facing methods.

    MHA (heads, head_dim) or MLA (mla_dim = kv_lora_rank + qk_rope_head_dim);
    ``tokens`` slots rounded as SGLang does (page_num = tokens // ps + 1)."""

    def __init__(self, layout, layers, page_size, tokens, dtype=torch.bfloat16,
                 heads=None, head_dim=None, mla_dim=None):
        self.layout, self.layer_num, self.page_size, self.dtype = (
            layout, layers, page_size, dtype)
        self.page_num = tokens // page_size + 1
        self.size = self.page_num * page_size
        self.dcp_size = 1
        L, S, P, ps = layers, self.size, self.page_num, page_size
        if mla_dim is not None:
            self.kv_cache_dim = C = mla_dim
            dims = {"layer_first": (L, S, 1, C), "page_first": (S, L, 1, C),
                    "page_first_direct": (P, L, ps, 1, C)}[layout]
        else:
            self.head_num, self.head_dim = H, D = heads, head_dim
            dims = {"layer_first": (2, L, S, H, D), "page_first": (2, S, L, H, D),
                    "page_first_direct": (2, P, L, ps, H, D),
                    "page_head": (2, P, H, ps, L, D)}[layout]
        self.kv_buffer = torch.zeros(dims, dtype=dtype)
        self.free_pages = list(range(self.page_num))
        self._meta = self._page_layout()

    @property
    def is_mla(self):
        return hasattr(self, "kv_cache_dim")

    # The controller's allocator: whole pages, not necessarily adjacent.
    def alloc(self, tokens):
        n = tokens // self.page_size
        if n > len(self.free_pages):
            return None
        pages, self.free_pages = self.free_pages[:n], self.free_pages[n:]
        return torch.cat([torch.arange(p * self.page_size, (p + 1) * self.page_size)
                          for p in pages]) if pages else torch.empty(0, dtype=torch.int64)

    def free(self, slots):
        self.free_pages += sorted({int(s) // self.page_size for s in slots.tolist()})

    def _page(self, slot):
        """The view of the page starting at host slot @slot."""
        ps, b = self.page_size, self.kv_buffer
        if self.is_mla:
            return {"layer_first": lambda: b[:, slot:slot + ps],
                    "page_first": lambda: b[slot:slot + ps],
                    "page_first_direct": lambda: b[slot // ps:slot // ps + 1]}[self.layout]()
        return {"layer_first": lambda: b[:, :, slot:slot + ps],
                "page_first": lambda: b[:, slot:slot + ps],
                "page_first_direct": lambda: b[:, slot // ps:slot // ps + 1],
                "page_head": lambda: b[:, slot // ps:slot // ps + 1]}[self.layout]()

    def get_data_page(self, index, flat=True):
        page = self._page(int(index))
        return page.flatten() if flat else page

    def get_dummy_flat_data_page(self):
        shape = ((self.layer_num, self.page_size, 1, self.kv_cache_dim) if self.is_mla else
                 (2, self.layer_num, self.page_size, self.head_num, self.head_dim))
        return torch.zeros(shape, dtype=self.dtype).flatten()

    def set_from_flat_data_page(self, index, data_page):
        page = self._page(int(index))
        page.copy_(data_page.reshape(page.shape))

    def _pieces(self, slot):
        """The contiguous pieces of the page at host slot @slot, in meta
        order: per layer in layer_first, one K and one V block (MHA) or one
        block (MLA) otherwise."""
        page = self._page(slot)
        if self.layout == "layer_first":
            pieces = ([page[l] for l in range(self.layer_num)] if self.is_mla else
                      [page[kv, l] for l in range(self.layer_num) for kv in (0, 1)])
        elif self.is_mla:
            pieces = [page]
        else:
            pieces = [page[0], page[1]]
        assert all(p.is_contiguous() for p in pieces)
        return [p.data_ptr() for p in pieces], [p.numel() * p.element_size() for p in pieces]

    def _page_layout(self):
        """Page 0's pieces (from its views) and the distance from one page
        to the next, which the views of page 1 must agree with."""
        ptrs0, sizes = self._pieces(0)
        step = 0
        if self.page_num > 1:
            ptrs1, _ = self._pieces(self.page_size)
            step = ptrs1[0] - ptrs0[0]
            assert ptrs1 == [p + step for p in ptrs0]
        return ptrs0, sizes, step

    def get_page_buffer_meta(self, indices):
        """Per page, its pieces' addresses and byte counts, as Python ints.
        By arithmetic, as SGLang's own host pools do it: page 0's pieces
        moved by the page step (_page_layout)."""
        assert len(indices) % self.page_size == 0
        ps = self.page_size
        ptrs0, sizes, step = self._meta
        ptrs = []
        for first in indices.tolist()[::ps]:
            at = first // ps * step
            ptrs += [p + at for p in ptrs0]
        return ptrs, sizes * (len(ptrs) // len(ptrs0))


def page_keys(tokens, page_size, prior=None):
    """SGLang's chained page keys: sha256(previous key's bytes || the page's
    tokens as uint32 little-endian), as 64 lowercase hex digits."""
    keys, prev = [], prior
    for i in range(0, len(tokens) - len(tokens) % page_size, page_size):
        h = hashlib.sha256()
        if prev is not None:
            h.update(bytes.fromhex(prev))
        for t in tokens[i:i + page_size]:
            h.update(int(t).to_bytes(4, "little"))
        prev = h.hexdigest()
        keys.append(prev)
    return keys


def page_content(key, nbytes, salt=0):
    """Deterministic bytes of the page stored under @key (salt: e.g. the TP
    rank, whose pages differ), as uint8."""
    g = torch.Generator().manual_seed((int(key[:15], 16) ^ salt) & ((1 << 62) - 1))
    return torch.randint(0, 256, (nbytes,), dtype=torch.uint8, generator=g)


def fill(host, slots, keys, salt=0):
    """Write page_content(key) into the host pages at @slots."""
    ps = host.page_size
    for i, k in enumerate(keys):
        flat = host.get_dummy_flat_data_page()
        nbytes = flat.numel() * flat.element_size()
        host.set_from_flat_data_page(slots[i * ps], page_content(k, nbytes, salt).view(
            host.dtype))


def page_bytes(host, slot):
    """A host page's flat bytes."""
    return host.get_data_page(int(slot)).contiguous().view(torch.uint8)


def storage_config(sg, extra, tp_rank=0, tp_size=1, mla=False, model="m/test",
                   pp=(0, 1), cp=(0, 1)):
    return sg.HiCacheStorageConfig(
        tp_rank=tp_rank, tp_size=tp_size, pp_rank=pp[0], pp_size=pp[1],
        attn_cp_rank=cp[0], attn_cp_size=cp[1], is_mla_model=mla,
        enable_storage_metrics=False, is_page_first_layout=False, model_name=model,
        extra_config=dict(extra))


def kvshare_extra(pool, **kw):
    """The extra config an operator passes for this backend."""
    extra = {"backend_name": "kvshare", "module_path": "kvshare.sglang",
             "class_name": "KVShareStorage", "interface_v1": 1, "pool": pool}
    extra.update(kw)
    return extra


def attach(sg, cfg, host):
    """What HiCacheController.attach_storage_backend does."""
    backend = sg.StorageBackendFactory.create_backend("dynamic", cfg, host)
    backend.register_mem_pool_host(host)
    return backend


def backup(sg, backend, host, keys, slots, v1=True):
    """The backup thread's _page_backup: batch_set_v1 (or the generic
    batch_set of get_data_page copies) per 128 pages, stopping at the first
    failure.  Pages stored."""
    ps = host.page_size
    for i in range(0, len(keys), STORAGE_BATCH):
        bk = keys[i:i + STORAGE_BATCH]
        bi = slots[i * ps:(i + len(bk)) * ps]
        if v1:
            ok = all(backend.batch_set_v1(bk, bi, sg.HiCacheStorageExtraInfo()))
        else:
            ok = backend.batch_set(bk, [host.get_data_page(bi[j * ps])
                                        for j in range(len(bk))])
        if not ok:
            return i
    return len(keys)


def query(sg, backend, keys):
    """The prefetch thread's _storage_hit_query: batch_exists per 128 keys
    until one comes back short.  Pages hit."""
    hit = 0
    for i in range(0, len(keys), STORAGE_BATCH):
        bk = keys[i:i + STORAGE_BATCH]
        n = backend.batch_exists(bk, sg.HiCacheStorageExtraInfo())
        hit += n
        if n < len(bk):
            break
    return hit


def load(sg, backend, host, keys, slots, v1=True):
    """The prefetch-IO thread's _page_transfer: batch_get_v1 (or the
    generic batch_get, then set_from_flat_data_page) per 128 pages; only a
    leading run of successes counts.  Pages loaded."""
    ps, done = host.page_size, 0
    for i in range(0, len(keys), STORAGE_BATCH):
        bk = keys[i:i + STORAGE_BATCH]
        bi = slots[i * ps:(i + len(bk)) * ps]
        if v1:
            res = backend.batch_get_v1(bk, bi, sg.HiCacheStorageExtraInfo())
            n = res.index(False) if False in res else len(res)
        else:
            got = backend.batch_get(bk, [host.get_dummy_flat_data_page() for _ in bk])
            n = 0
            for j, page in enumerate(got or []):
                if page is None:
                    break
                host.set_from_flat_data_page(bi[j * ps], page)
                n += 1
        done += n
        if n < len(bk):
            break
    return done


def prefetch(sg, backend, host, keys, v1=True):
    """Query, allocate host pages for the hits, load: (pages loaded, slots)."""
    hit = query(sg, backend, keys)
    slots = host.alloc(hit * host.page_size)
    return load(sg, backend, host, keys[:hit], slots, v1), slots
