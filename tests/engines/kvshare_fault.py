# SPDX-License-Identifier: GPL-2.0
"""kvshare.vllm's connector with one fault injected, for the engine suite:
``kv_connector_module_path: "kvshare_fault"`` (this directory on
PYTHONPATH) loads the same KVShareConnector class, whose worker's first
hook of a step (handle_preemptions in vLLM 0.32, where a host engine's
loads begin; start_load_kv without it) first evicts every cached page of
the pool when the file named by $KVS_TEST_EVICT_ARM exists and the step
loads pages (the file holds {"socket", "pool"} and is removed).  That is
the window the issue names: after the scheduler's lookup
(get_num_new_matched_tokens), before the worker's load.  Everything else
is the real connector in the real engine."""
import json
import os

import kvshare
from kvshare.vllm import KVShareConnector, KVShareConnectorMetadata  # noqa: F401

ARM_FILE_ENV = "KVS_TEST_EVICT_ARM"
_handle_preemptions = KVShareConnector.handle_preemptions
_start_load_kv = KVShareConnector.start_load_kv


def _evict_all(socket, pool):
    """Another handle ALLOCs the whole pool (evicting every cached page
    nobody holds), then gives the pages back FREE."""
    with kvshare.Pool(pool, socket) as p:
        p.put(p.alloc(p.n_pages))


def _evict_if_armed(meta):
    arm = os.environ.get(ARM_FILE_ENV)
    if arm and os.path.exists(arm) and any(r["load"][0] < r["load"][1] for r in meta.reqs):
        with open(arm) as f:
            spec = json.load(f)
        os.unlink(arm)
        _evict_all(spec["socket"], spec["pool"])


def handle_preemptions(self, kv_connector_metadata):
    _evict_if_armed(kv_connector_metadata)
    return _handle_preemptions(self, kv_connector_metadata)


def start_load_kv(self, forward_context, **kwargs):
    _evict_if_armed(self._get_connector_metadata())
    return _start_load_kv(self, forward_context, **kwargs)


KVShareConnector.handle_preemptions = handle_preemptions
KVShareConnector.start_load_kv = start_load_kv
