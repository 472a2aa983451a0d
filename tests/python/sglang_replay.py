# SPDX-License-Identifier: GPL-2.0
"""One SGLang engine process for test_sglang.py's two-process replay.

  sglang_replay.py write SOCKET POOL_PREFIX
  sglang_replay.py read SOCKET POOL_PREFIX

For every layout (MHA: layer_first, page_first, page_first_direct,
page_head; MLA: layer_first, page_first, page_first_direct) the process
attaches KVShareStorage through SGLang's factory, as TP ranks 0 and 1 of 2,
and runs three controller threads at once, each on its own request (three
chains that share their first pages).  "write" backs them up (MLA: rank 0
only, as SGLang's backup_skip does); "read" prefetches them
(batch_exists, then batch_get_v1) into a fresh host pool and checks every
page against the bytes the writer's rank put there.  One JSON line out.
"""
import json
import sys
import threading

import sglang_harness as H

LAYOUTS = [(lay, False) for lay in ("layer_first", "page_first", "page_first_direct",
                                    "page_head")] + \
          [(lay, True) for lay in ("layer_first", "page_first", "page_first_direct")]
PS, LAYERS = 16, 4
SHARED, OWN = 40, 150          # tokens of the common prefix, of each request


def chains():
    common = list(range(1000, 1000 + SHARED))
    return [H.page_keys(common + [t * 7919 + i for i in range(OWN)], PS) for t in range(3)]


def host_pool(layout, mla):
    if mla:
        return H.HostPool(layout, LAYERS, PS, 3 * (SHARED + OWN), mla_dim=24)
    return H.HostPool(layout, LAYERS, PS, 3 * (SHARED + OWN), heads=2, head_dim=8)


def run(sg, mode, socket, prefix):
    out = {}
    for layout, mla in LAYOUTS:
        pool = "%s-%s-%s" % (prefix, "mla" if mla else "mha", layout)
        for rank in (0, 1):
            if mode == "write" and mla and rank:
                continue                   # SGLang: with MLA only rank 0 backs up
            host = host_pool(layout, mla)
            cfg = H.storage_config(sg, H.kvshare_extra(pool, arbiter=socket, create=True,
                                                       pages=64), tp_rank=rank, tp_size=2,
                                   mla=mla)
            backend = H.attach(sg, cfg, host)
            salt = 0 if mla else rank      # whose bytes the pages must be
            lock = threading.Lock()
            res = {"pages": 0, "bad": 0}

            def one(keys):
                if mode == "write":
                    with lock:
                        slots = host.alloc(len(keys) * PS)
                        H.fill(host, slots, keys, salt)
                    n = H.backup(sg, backend, host, keys, slots)
                    bad = 0
                else:
                    with lock:
                        hit = H.query(sg, backend, keys)
                        slots = host.alloc(hit * PS)
                    n = H.load(sg, backend, host, keys[:hit], slots)
                    bad = 0
                    for i in range(n):
                        want = H.page_content(keys[i], H.page_bytes(host, slots[0]).numel(),
                                              salt)
                        bad += not bool((H.page_bytes(host, slots[i * PS]) == want).all())
                with lock:
                    res["pages"] += n
                    res["bad"] += bad

            threads = [threading.Thread(target=one, args=(c,)) for c in chains()]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            res["errors"] = backend.stats()["errors"]
            backend.close()
            out["%s/%s/%d" % ("mla" if mla else "mha", layout, rank)] = res
    return out


def main():
    mode, socket, prefix = sys.argv[1:4]
    sg = H.import_sglang()
    print(json.dumps(run(sg, mode, socket, prefix)), flush=True)


if __name__ == "__main__":
    main()
