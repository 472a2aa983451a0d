# SPDX-License-Identifier: GPL-2.0
"""The installed SGLang's own KV classes on a CPU, for test_real_sglang.py.

Everything here is SGLang's code as ``pip install sglang==`` ships it
(python/requirements/sglang.txt), built the way SGLang's scheduler builds
it, with device="cpu" where a GPU would be:

* publish(): SGLang's ServerArgs for a small Llama config this module
  writes, published with runtime_context.publish() as a scheduler process
  of TP rank r of n (what the launcher does before any pool exists).
* device_pool(): the real MHATokenToKVPool / MLATokenToKVPool and the real
  PagedTokenToKVPoolAllocator over it.
* host_pool(): the real MHATokenToKVPoolHost / MLATokenToKVPoolHost built
  from the device pool's own get_device_pool_infos() (the buffer info the
  scheduler passes), in any layout, with SGLang's mmap host allocator.
* controller(): the real HiCacheController with a storage backend, which
  attaches it through the real StorageBackendFactory and starts its real
  prefetch, prefetch-IO, prefetch-sync and backup threads.
* backup() / prefetch(): the calls HiRadixCache makes on the controller
  (write_storage; prefetch, then the scheduler's drain of the hit queue:
  host allocation, prefetch_buffer.put), waiting for the controller's acks.

Nothing of SGLang is replaced: on a CPU the host pools never import
sgl_kernel.kvcacheio (pool_host/mha.py imports it only on CUDA/ROCm/XPU),
and the storage threads move pages between the host pool and the backend
only.  What needs a GPU and is not run: the device<->host transfers
(HiCacheController.write/load, the kvcacheio kernels), the forward pass.
No process group is built (tp_group=None): each TP rank is its own process
and the controller's rank all-reduces have nothing to reduce.
"""
import json
import os
import queue
import tempfile
import threading
import time

import torch

LAYERS, PS = 4, 16
HEADS, HEAD_DIM = 2, 16            # MHA: kv heads x head dim
KV_LORA, ROPE = 32, 16             # MLA: the latent vector is 48 wide
MHA_LAYOUTS = ("layer_first", "page_first", "page_first_direct", "page_head")
MLA_LAYOUTS = ("layer_first", "page_first", "page_first_direct")


def llama_dir():
    """A model directory with a small Llama config.json (no weights: the
    pools only read the geometry the test passes them)."""
    d = tempfile.mkdtemp(prefix="kvs-sglang-model-")
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump({"architectures": ["LlamaForCausalLM"], "model_type": "llama",
                   "hidden_size": HEADS * 2 * HEAD_DIM, "num_attention_heads": HEADS * 2,
                   "num_key_value_heads": HEADS, "head_dim": HEAD_DIM,
                   "num_hidden_layers": LAYERS, "intermediate_size": 128,
                   "vocab_size": 1000, "max_position_embeddings": 4096}, f)
    return d


def publish(tp_rank=0, tp_size=1, backend="dynamic"):
    """SGLang's process configuration for a scheduler of TP rank
    @tp_rank of @tp_size, with the hierarchical cache on."""
    from sglang.srt import runtime_context as rc
    from sglang.srt.server_args import ServerArgs
    args = ServerArgs(model_path=llama_dir(), device="cpu", skip_tokenizer_init=True,
                      page_size=PS, tp_size=tp_size, enable_hierarchical_cache=True,
                      hicache_storage_backend=backend)
    rc.publish(args, role="scheduler", ranks=rc.SpawnRanks(world_rank=tp_rank))
    return args


def device_pool(mla=False, tokens=1024, dtype=torch.bfloat16):
    """SGLang's device KV pool on the CPU and its paged allocator."""
    from sglang.srt.mem_cache.allocator.paged import PagedTokenToKVPoolAllocator
    from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool, MLATokenToKVPool
    if mla:
        dev = MLATokenToKVPool(size=tokens, page_size=PS, dtype=dtype, kv_lora_rank=KV_LORA,
                               qk_rope_head_dim=ROPE, layer_num=LAYERS, device="cpu",
                               enable_memory_saver=False)
    else:
        dev = MHATokenToKVPool(size=tokens, page_size=PS, dtype=dtype, head_num=HEADS,
                               head_dim=HEAD_DIM, layer_num=LAYERS, device="cpu",
                               enable_memory_saver=False)
    alloc = PagedTokenToKVPoolAllocator(size=tokens, page_size=PS, dtype=dtype,
                                        device="cpu", kvcache=dev, need_sort=False)
    return dev, alloc


def host_pool(dev, layout, ratio=2.0):
    """SGLang's host pool for device pool @dev in @layout, built as the
    scheduler builds it (host_size 0: @ratio times the device pool)."""
    from sglang.srt.mem_cache.memory_pool import MLATokenToKVPool
    from sglang.srt.mem_cache.pool_host.mha import MHATokenToKVPoolHost
    from sglang.srt.mem_cache.pool_host.mla import MLATokenToKVPoolHost
    info = dev.get_device_pool_infos()[0].buffer_info
    common = dict(pin_memory=False, device="cpu", device_capacity_tokens=dev.size,
                  start_layer=0, end_layer=LAYERS)
    if isinstance(dev, MLATokenToKVPool):
        return MLATokenToKVPoolHost(info, ratio, 0, PS, layout, target_layer_num=LAYERS,
                                    **common)
    return MHATokenToKVPoolHost(info, ratio, 0, PS, layout, **common)


def kvshare_extra(pool, **kw):
    """The extra config docs/engines.md gives an operator."""
    extra = {"backend_name": "kvshare", "module_path": "kvshare.sglang",
             "class_name": "KVShareStorage", "interface_v1": 1, "pool": pool}
    extra.update(kw)
    return extra


def controller(alloc, host, backend="dynamic", extra=None, model="test/llama"):
    """SGLang's HiCacheController over @host with storage @backend attached
    (the storage threads run from here on); detach_storage_backend() ends it."""
    from sglang.srt.managers.cache_controller import HiCacheController
    return HiCacheController(alloc, host, PS, None, threading.Event(), io_backend="direct",
                             storage_backend=backend, model_name=model,
                             storage_backend_extra_config=extra)


def storage_keys(tokens):
    """SGLang's own page keys of @tokens (what backup and prefetch use)."""
    from sglang.srt.mem_cache.utils import get_storage_hash_str
    return get_storage_hash_str(tokens, None, page_size=PS)


def _take(q, want, timeout):
    """The first item of queue @q for which want(item) holds."""
    end = time.monotonic() + timeout
    while True:
        left = end - time.monotonic()
        if left <= 0:
            raise TimeoutError("the HiCache controller did not answer in %gs" % timeout)
        try:
            item = q.get(timeout=left)
        except queue.Empty:
            continue
        if want(item):
            return item


def backup(ctl, tokens, host_indices, timeout=60):
    """write_storage() the pages at @host_indices (SGLang's keys of @tokens)
    and wait for the backup thread's ack: the tokens it stored."""
    keys = storage_keys(tokens)
    op_id = ctl.write_storage(host_indices, tokens, hash_value=keys)
    op = _take(ctl.ack_backup_queue, lambda o: o.id == op_id, timeout)
    return op.completed_tokens


def prefetch(ctl, rid, tokens, timeout=60):
    """What HiRadixCache does for a request with @tokens: prefetch(), then,
    as the scheduler thread, take the hit count from the prefetch thread,
    allocate host pages for the hits and hand the operation to the
    prefetch-IO thread; wait for its completion ack.
    (tokens loaded, host indices)."""
    op = ctl.prefetch(rid, tokens)
    op = _take(ctl.prefetch_hit_queue, lambda o: o.request_id == rid, timeout)
    hit = op.storage_hit_count
    if hit == 0:
        return 0, torch.empty(0, dtype=torch.int64)
    host_indices = ctl.alloc_prefetch_host_buffers(op, hit)
    if host_indices is None:
        raise RuntimeError("the host pool has no room for %d prefetched tokens" % hit)
    op.host_indices = host_indices
    ctl.prefetch_buffer.put(op)
    # The IO thread acks each 128-page batch with the tokens loaded so far
    # (rank-reduced), then the whole request.
    done = []

    def last(ack):
        if ack.completed_tokens is not None:
            done.append(ack.completed_tokens)
        return getattr(ack, "completed_req", False)
    _take(ctl.ack_prefetch_queue, lambda a: a.rid == rid and last(a), timeout)
    return max(done, default=0), host_indices


def page_content(key, nbytes, salt=0):
    """Deterministic bytes of the page stored under @key (salt: the TP
    rank, whose pages differ), as uint8."""
    g = torch.Generator().manual_seed((int(key[:15], 16) ^ salt) & ((1 << 62) - 1))
    return torch.randint(0, 256, (nbytes,), dtype=torch.uint8, generator=g)


def fill(host, host_indices, keys, salt=0):
    """Write page_content(key) into the host pages at @host_indices with
    the host pool's own set_from_flat_data_page."""
    flat = host.get_dummy_flat_data_page()
    nbytes = flat.numel() * flat.element_size()
    for i, k in enumerate(keys):
        host.set_from_flat_data_page(int(host_indices[i * PS]),
                                     page_content(k, nbytes, salt).view(host.dtype))


def bad_pages(host, host_indices, keys, salt=0):
    """How many of the host pages at @host_indices do not hold
    page_content(key), read with the host pool's own get_data_page."""
    bad = 0
    for i, k in enumerate(keys):
        got = host.get_data_page(int(host_indices[i * PS])).contiguous().view(torch.uint8)
        bad += not torch.equal(got, page_content(k, got.numel(), salt))
    return bad
