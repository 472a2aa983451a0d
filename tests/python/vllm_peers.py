# SPDX-License-Identifier: GPL-2.0
"""vLLM's REAL KV-connector interface files, loaded the way vLLM imports
them, without installing vLLM (research/engine-adapters.md, "What
importing the interface files pulls in").

vllm/__init__.py and the package __init__ files along the way are heavy
(they import the whole engine), so the files are loaded by path from
../shared/peers/vllm under their real module names: base.py (the class
KVConnectorBase_V1 that kvshare.vllm subclasses), factory.py
(KVConnectorFactory.create_connector, which builds the connector from
kv_connector_module_path exactly as EngineCore and the workers do),
v1/core/sched/output.py (SchedulerOutput, NewRequestData,
CachedRequestData).  Stubbed, and only these,
because their real files import the engine: vllm.logger.init_logger,
vllm.v1.attention.backend (two type names), vllm.v1.outputs
(KVConnectorOutput), vllm.config.ec_manager_config (one type name),
vllm.config.kv_transfer.KVTransferConfig (the real one is a pydantic
config; the stub keeps its fields and get_from_extra_config),
vllm.utils.func_utils.supports_kw (not among the peer files; the stub
answers what the real one does for a plain __init__: whether the
signature has that parameter)."""
import dataclasses
import importlib.util
import inspect
import logging
import os
import sys
import types

PEERS = os.environ.get("KVS_PEERS") or os.path.join(
    os.path.dirname(__file__), "..", "..", "..", "shared", "peers")
VLLM = os.path.abspath(os.path.join(PEERS, "vllm", "vllm"))


def _package(name, path=None):
    mod = sys.modules.get(name)
    if mod is None:
        mod = types.ModuleType(name)
        mod.__path__ = [path] if path else []
        sys.modules[name] = mod
        parent, _, child = name.rpartition(".")
        if parent:
            setattr(_package(parent), child, mod)
    return mod


def _stub(name, **attrs):
    mod = types.ModuleType(name)
    mod.__dict__.update(attrs)
    sys.modules[name] = mod
    parent, _, child = name.rpartition(".")
    setattr(_package(parent), child, mod)
    return mod


def _load(name, relpath):
    """The real file vllm/<relpath> as module name."""
    if name in sys.modules and getattr(sys.modules[name], "__file__", None):
        return sys.modules[name]
    path = os.path.join(VLLM, relpath)
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    parent, _, child = name.rpartition(".")
    setattr(_package(parent), child, mod)
    spec.loader.exec_module(mod)
    return mod


@dataclasses.dataclass
class KVTransferConfig:
    """The fields of vllm/config/kv_transfer.py that connectors read."""
    kv_connector: str = None
    engine_id: str = None
    kv_role: str = None
    kv_connector_extra_config: dict = dataclasses.field(default_factory=dict)
    kv_connector_module_path: str = None
    kv_load_failure_policy: str = "recompute"

    @property
    def is_kv_producer(self):
        return self.kv_role in ("kv_producer", "kv_both")

    @property
    def is_kv_consumer(self):
        return self.kv_role in ("kv_consumer", "kv_both")

    def get_from_extra_config(self, key, default):
        return self.kv_connector_extra_config.get(key, default)


@dataclasses.dataclass
class KVConnectorOutput:
    """vllm/v1/outputs.py's KVConnectorOutput (its file imports the engine)."""
    finished_sending: set = None
    finished_recving: set = None
    kv_connector_stats: object = None
    kv_cache_events: object = None
    invalid_block_ids: set = dataclasses.field(default_factory=set)
    expected_finished_count: int = 0


def _supports_kw(callable_, kw_name):
    try:
        params = inspect.signature(callable_).parameters
    except (TypeError, ValueError):
        return False
    return kw_name in params or any(
        p.kind == p.VAR_KEYWORD for p in params.values())


def load():
    """-> namespace of the real base, factory and sched output modules."""
    if not os.path.isfile(os.path.join(VLLM, "distributed", "kv_transfer",
                                       "kv_connector", "v1", "base.py")):
        raise FileNotFoundError("vLLM's peer files are not at %s" % VLLM)
    _package("vllm", VLLM)
    if "vllm.logger" not in sys.modules:
        _stub("vllm.logger", init_logger=logging.getLogger)
        _stub("vllm.v1.attention.backend", AttentionBackend=object,
              AttentionMetadata=object)
        _stub("vllm.v1.outputs", KVConnectorOutput=KVConnectorOutput)
        _stub("vllm.config.ec_manager_config", EncoderCacheManagerMetadata=object)
        _stub("vllm.config.kv_transfer", KVTransferConfig=KVTransferConfig)
        _stub("vllm.utils.func_utils", supports_kw=_supports_kw)
    output = _load("vllm.v1.core.sched.output", "v1/core/sched/output.py")
    base = _load("vllm.distributed.kv_transfer.kv_connector.v1.base",
                 "distributed/kv_transfer/kv_connector/v1/base.py")
    # The v1 package's own __init__ imports decode_bench_connector (the
    # engine); the names factory.py takes from it are base.py's.
    v1 = _package("vllm.distributed.kv_transfer.kv_connector.v1")
    for n in ("KVConnectorBase_V1", "KVConnectorRole", "SupportsHMA", "supports_hma"):
        setattr(v1, n, getattr(base, n))
    kbase = _load("vllm.distributed.kv_transfer.kv_connector.base",
                  "distributed/kv_transfer/kv_connector/base.py")
    factory = _load("vllm.distributed.kv_transfer.kv_connector.factory",
                    "distributed/kv_transfer/kv_connector/factory.py")
    return types.SimpleNamespace(base=base, factory=factory, output=output,
                                 kbase=kbase,
                                 KVTransferConfig=KVTransferConfig,
                                 KVConnectorOutput=KVConnectorOutput)
