# SPDX-License-Identifier: GPL-2.0
"""A vLLM KV connector that does nothing: it never matches, loads or
saves.  The engine bench runs it beside kvshare.vllm so that what vLLM
itself costs an engine configured with any connector (its scheduling and
worker paths change once kv_transfer_config is set) is told apart from
what kvshare's connector costs.

    --kv-transfer-config '{"kv_connector": "NoopConnector",
                           "kv_connector_module_path": "noop_connector",
                           "kv_role": "kv_both"}'
(this directory on PYTHONPATH)."""
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


CONFIG = {"kv_connector": "NoopConnector", "kv_connector_module_path": "noop_connector",
          "kv_role": "kv_both"}
