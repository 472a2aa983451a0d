# SPDX-License-Identifier: GPL-2.0
"""Two vLLM KV connectors for the engine bench, controls beside
kvshare.vllm:

NoopConnector does nothing: it never matches, loads or saves.  What vLLM
itself costs an engine configured with any connector (its scheduling and
worker paths change once kv_transfer_config is set) is told apart from
what kvshare's connector costs.

ClaimConnector claims every full prompt block beyond vLLM's local hit as
loaded and copies nothing (its outputs are wrong: a control, never a
connector to serve with).  A request then costs what vLLM itself pays for
an external hit (blocks allocated for it, the step's sync-load path, the
blocks cached when it ends) under a load that takes no time: the floor
under any connector's TTFT for that prompt.  Its first
kv_connector_extra_config "claim_after" requests (default 0) it claims
nothing of, so that they compute and write the engine's blocks (the
bench's untimed warm-up and cycling ones).

    --kv-transfer-config '{"kv_connector": "NoopConnector",
                           "kv_connector_module_path": "noop_connector",
                           "kv_role": "kv_both"}'
(this directory on PYTHONPATH; "ClaimConnector" the same way)."""
from vllm.distributed.kv_transfer.kv_connector.v1.base import (
    KVConnectorBase_V1, KVConnectorMetadata)


class NoopConnectorMetadata(KVConnectorMetadata):
    pass


class NoopConnector(KVConnectorBase_V1):
    # Worker side: nothing to load, nothing to save.
    def start_load_kv(self, forward_context, **kwargs):
        pass

    def wait_for_layer_load(self, layer_name):
        pass

    def save_kv_layer(self, layer_name, kv_layer, attn_metadata, **kwargs):
        pass

    def wait_for_save(self):
        pass

    # Scheduler side: no external hit, no state.
    def get_num_new_matched_tokens(self, request, num_computed_tokens):
        return 0, False

    def update_state_after_alloc(self, request, blocks, num_external_tokens):
        pass

    def build_connector_meta(self, scheduler_output):
        return NoopConnectorMetadata()


class ClaimConnector(NoopConnector):
    def get_num_new_matched_tokens(self, request, num_computed_tokens):
        # The scheduler asks again for a request that waits: the first
        # claim_after requests are remembered, not counted twice.
        computed = self.__dict__.setdefault("_computed", set())
        extra = self._vllm_config.kv_transfer_config.kv_connector_extra_config or {}
        if request.request_id in computed or len(computed) < int(extra.get("claim_after", 0)):
            computed.add(request.request_id)
            return 0, False
        bs = self._vllm_config.cache_config.block_size
        full = (len(request.prompt_token_ids) - 1) // bs * bs
        return max(0, full - num_computed_tokens), False

    def build_connector_meta(self, scheduler_output):
        # As kvshare.vllm does for the blocks it loads: no zeroing of
        # blocks a load overwrites whole.
        scheduler_output.new_block_ids_to_zero = None
        return NoopConnectorMetadata()


CONFIG = {"kv_connector": "NoopConnector", "kv_connector_module_path": "noop_connector",
          "kv_role": "kv_both"}
CLAIM_CONFIG = dict(CONFIG, kv_connector="ClaimConnector")
