# SPDX-License-Identifier: GPL-2.0
"""One SGLang scheduler process's HiCache, for test_real_sglang.py.

  sglang_real_proc.py write SOCKET POOL_PREFIX
  sglang_real_proc.py read SOCKET POOL_PREFIX

The process publishes SGLang's configuration as TP rank 0 of 2, then rank
1 (SGLang allows a re-publish), and for each rank and every layout (MHA:
layer_first, page_first, page_first_direct, page_head; MLA: layer_first,
page_first, page_first_direct) builds SGLang's own device pool, host pool
and HiCacheController with kvshare attached through the "dynamic" factory
path (sglang_engine.py).  Three requests sharing their first pages go to
the controller at once.  "write" fills their host pages and backs them up
(the controller's backup thread; MLA: its backup_skip leaves rank 1's to
rank 0); "read" prefetches them into fresh host pages (prefetch thread,
then prefetch-IO thread) and checks every page against the bytes the
writer's rank put there.  "read" also attaches a controller for another
model name, and one with float16 pages, that must hit nothing (the latter is refused
at attach: the pool holds bfloat16 pages).  One JSON
line out: {"mha/page_first/0": {"tokens": n, "bad": b, "errors": e}, ...}.
"""
import json
import sys

import torch

import sglang_engine as E

SHARED, OWN = 3, 9                 # pages: common to the three requests, each one's own


def requests():
    common = list(range(1000, 1000 + SHARED * E.PS))
    return [common + [t * 7919 + i for i in range(OWN * E.PS)] for t in range(3)]


def one_layout(mode, socket, pool, mla, layout, rank, out):
    dev, alloc = E.device_pool(mla)
    host = E.host_pool(dev, layout)
    extra = E.kvshare_extra(pool, arbiter=socket, create=True)
    ctl = E.controller(alloc, host, extra=extra)
    salt = 0 if mla else rank          # MLA pages are every rank's
    reqs = requests()
    res = {"tokens": 0, "bad": 0}
    try:
        if mode == "write":
            ops = []
            for tokens in reqs:
                keys = E.storage_keys(tokens)
                idx = host.alloc(len(tokens))
                E.fill(host, idx, keys, salt)
                ops.append(ctl.write_storage(idx, tokens, hash_value=keys))
            done = {}
            while len(done) < len(ops):
                op = E._take(ctl.ack_backup_queue, lambda o: o.id in ops, 60)
                done[op.id] = op.completed_tokens
            res["tokens"] = sum(done.values())
        else:
            for i, tokens in enumerate(reqs):
                n, idx = E.prefetch(ctl, "req%d" % i, tokens)
                res["tokens"] += n
                res["bad"] += E.bad_pages(host, idx, E.storage_keys(tokens)[:n // E.PS],
                                          salt)
            # Another model's, another dtype's controller: no hit.
            other = E.controller(alloc, host, extra=extra, model="other/model")
            res["other_model"] = E.prefetch(other, "other", reqs[0])[0]
            other.detach_storage_backend()
            # float16 pages of the same size: the pool's geometry says
            # bfloat16, so SGLang refuses the backend at attach.
            dev16, alloc16 = E.device_pool(mla, dtype=torch.float16)
            try:
                E.controller(alloc16, E.host_pool(dev16, layout), extra=extra)
                res["other_dtype"] = "attached"
            except ValueError as e:
                res["other_dtype"] = str(e)
        res["errors"] = ctl.storage_backend.stats()["errors"]
        res["backend"] = type(ctl.storage_backend).__name__
    finally:
        ctl.detach_storage_backend()
    out["%s/%s/%d" % ("mla" if mla else "mha", layout, rank)] = res


def main():
    mode, socket, prefix = sys.argv[1:4]
    out = {}
    for rank in (0, 1):
        E.publish(tp_rank=rank, tp_size=2)
        for mla, layouts in ((False, E.MHA_LAYOUTS), (True, E.MLA_LAYOUTS)):
            for layout in layouts:
                pool = "%s-%s-%s" % (prefix, "mla" if mla else "mha", layout)
                one_layout(mode, socket, pool, mla, layout, rank, out)
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
