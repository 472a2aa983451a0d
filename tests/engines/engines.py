# SPDX-License-Identifier: GPL-2.0
"""Real vLLM engine processes for the engine suites, the bench and the demo:
a small Llama-architecture model written as a config.json (weights are
vLLM's dummy ones), the connector configured as docs/engines.md tells an
operator, and Engine, one engine_proc.py process driven over a pipe."""
import json
import os
import select
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
BLOCK = 32          # the smallest block size vLLM's CPU attention (CPU_ATTN) takes

# A small Llama-architecture model: 2 layers, GQA (4 query heads, 2 KV
# heads), head dim 64.  Granite is Llama's architecture with four scalar
# multipliers, which make vLLM's dummy weights (uniform in +-1e-3) give
# outputs that depend on the KV cache: with plain Llama the attention
# adds about 1e-4 of the residual stream and the logits are flat to the
# last bit, so a connector that loaded nothing at all went unnoticed
# (a mutant test showed it).  residual_multiplier lets each block's output
# dominate the embedding; logits_scaling spreads the logits.
LLAMA = {"architectures": ["GraniteForCausalLM"], "model_type": "granite",
         "residual_multiplier": 1e5, "embedding_multiplier": 1.0,
         "attention_multiplier": 0.125, "logits_scaling": 1e-4,
         "hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 2,
         "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64,
         "vocab_size": 1024, "max_position_embeddings": 16384, "rms_norm_eps": 1e-5,
         "rope_theta": 10000.0, "torch_dtype": "float32", "tie_word_embeddings": False,
         "bos_token_id": 1, "eos_token_id": 2, "hidden_act": "silu"}


def write_model(path, **changes):
    """A model directory holding only config.json (LLAMA with @changes)."""
    os.makedirs(path, exist_ok=True)
    cfg = dict(LLAMA, **changes)
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(cfg, f)
    return path


def connector(pool, socket, create_pages=256, module="kvshare.vllm", **extra):
    """--kv-transfer-config as docs/engines.md gives it."""
    ex = dict(pool=pool, arbiter=socket, create=True, pages=create_pages)
    ex.update(extra)
    return {"kv_connector": "KVShareConnector", "kv_role": "kv_both",
            "kv_connector_module_path": module, "kv_load_failure_policy": "recompute",
            "kv_connector_extra_config": ex}


def engine_env():
    """Environment of an engine process: offline, quiet, this directory
    importable (kvshare_fault).  vLLM binds its OpenMP threads itself."""
    env = dict(os.environ)
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", VLLM_NO_USAGE_STATS="1",
               VLLM_DO_NOT_TRACK="1", TOKENIZERS_PARALLELISM="false",
               VLLM_TARGET_DEVICE="cpu")
    env["PYTHONPATH"] = HERE + (":" + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


class EngineError(RuntimeError):
    pass


class Engine:
    """One vLLM engine process (engine_proc.py).  start() returns at once;
    ready() waits for the engine; generate() serves a prompt set."""

    def __init__(self, name, model, log_dir, dtype="float32", kv_transfer_config=None,
                 prefix_caching=True, kv_cache_bytes=256 << 20, max_model_len=4096,
                 env=None, python=sys.executable, kv_cache_dtype=None):
        self.name = name
        self.cfg = dict(model=model, dtype=dtype, kv_cache_dtype=kv_cache_dtype,
                        kv_transfer_config=kv_transfer_config,
                        prefix_caching=prefix_caching, kv_cache_bytes=kv_cache_bytes,
                        max_model_len=max_model_len)
        self.log_path = os.path.join(log_dir, "engine-%s.log" % name)
        self.env = engine_env()
        self.env.update(env or {})
        self.python = python
        self.proc = None
        self.start_s = None

    def start(self):
        rfd, wfd = os.pipe()
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                [self.python, os.path.join(HERE, "engine_proc.py"), json.dumps(self.cfg)],
                stdin=subprocess.PIPE, stdout=log, stderr=subprocess.STDOUT,
                env=dict(self.env, KVS_REPLY_FD=str(wfd)), pass_fds=(wfd,),
                start_new_session=True)
        os.close(wfd)
        self._reply = os.fdopen(rfd, "r")
        return self

    def _read(self, timeout):
        r, _, _ = select.select([self._reply], [], [], timeout)
        line = self._reply.readline() if r else ""
        if not line:
            raise EngineError("engine %s: no reply within %.0f s (exit status %s); "
                              "log %s:\n%s" % (self.name, timeout, self.proc.poll(),
                                               self.log_path, self.log_tail()))
        msg = json.loads(line)
        if "error" in msg:
            raise EngineError("engine %s: %s\n%s\nlog tail:\n%s" % (
                self.name, msg["error"], msg.get("trace", ""), self.log_tail()))
        return msg

    def ready(self, timeout=400):
        if self.start_s is None:
            self.start_s = self._read(timeout)["ready"]
        return self

    def call(self, timeout=300, **cmd):
        self.ready()
        self.proc.stdin.write((json.dumps(cmd) + "\n").encode())
        self.proc.stdin.flush()
        return self._read(timeout)

    def generate(self, prompts, max_tokens=4, timeout=300):
        return self.call(op="generate", prompts=prompts, max_tokens=max_tokens,
                         timeout=timeout)["outputs"]

    def metrics(self):
        return self.call(op="metrics")["metrics"]

    def log_tail(self, n=4000):
        try:
            with open(self.log_path, errors="replace") as f:
                return f.read()[-n:]
        except OSError:
            return ""

    def log(self):
        with open(self.log_path, errors="replace") as f:
            return f.read()

    def stop(self, timeout=60):
        """Ask the engine to exit; returns its exit status."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            try:
                if self.start_s is not None:
                    self.call(op="exit", timeout=timeout)
                self.proc.stdin.close()
                self.proc.wait(timeout)
            except (EngineError, OSError, subprocess.TimeoutExpired, ValueError):
                self.kill()
        st = self.proc.returncode
        self._reply.close()
        return st

    def kill(self):
        """SIGKILL the engine's whole process group (EngineCore, workers)."""
        try:
            os.killpg(self.proc.pid, 9)
        except ProcessLookupError:
            pass
        self.proc.wait()


def prompt(seed, n_tokens, prefix=None):
    """Deterministic token ids in [3, 1000): @prefix (a list) then tokens
    drawn from @seed, @n_tokens in all."""
    out = list(prefix or [])
    x = seed * 2654435761 % (1 << 32) or 1
    while len(out) < n_tokens:
        x = (x * 1103515245 + 12345) % (1 << 31)
        out.append(3 + x % 997)
    return out[:n_tokens]


def wait_all(engines, timeout=600):
    deadline = time.monotonic() + timeout
    for e in engines:
        e.ready(max(1, deadline - time.monotonic()))
