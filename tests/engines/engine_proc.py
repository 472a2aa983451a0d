# SPDX-License-Identifier: GPL-2.0
"""One real vLLM engine process for the engine suites and benchmarks,
driven over a pipe: the engine starts once (tens of seconds on two cores)
and serves many prompt sets.

    engine_proc.py CONFIG_JSON        (commands on stdin, replies on fd $KVS_REPLY_FD)

CONFIG_JSON: {"model": dir, "dtype": ..., "kv_cache_dtype": ... (vLLM's
--kv-cache-dtype, "auto" unless given), "kv_transfer_config": {...} or
null, "prefix_caching": bool, "kv_cache_bytes": n, "max_model_len": n}.
The engine is vllm.LLM with load_format="dummy" (no weights on disk),
skip_tokenizer_init (prompts are token ids), enforce_eager, block size 32
(the smallest CPU_ATTN takes), and kv_transfer_config passed as an operator
would pass --kv-transfer-config.

Commands, one JSON object a line; each gets one JSON reply line:
  {"op": "generate", "prompts": [[ids...]...], "max_tokens": n}
      -> {"outputs": [{"tokens", "logprobs", "cached", "ttft"}], "wall": s}
  {"op": "metrics"}  -> {"metrics": {name: value}} (vLLM's own counters)
  {"op": "evict_before_next_load", "socket": s, "pool": p}
      -> {"ok": true}: fault injection, for an engine whose
      kv_connector_module_path is kvshare_fault (see there): the next
      step that loads pages finds every cached page of the pool evicted,
      after the scheduler's lookup and before the worker's load.  The
      worker is another process (vLLM's executor), so this arms a file.
  {"op": "exit"}
Errors reply {"error": "..."}; the process keeps serving.
"""
import json
import os
import sys
import time
import traceback

ARM_FILE_ENV = "KVS_TEST_EVICT_ARM"


def _metrics(llm):
    out = {}
    for m in llm.get_metrics():
        v = getattr(m, "value", None)
        if isinstance(v, (int, float)):
            out[m.name] = out.get(m.name, 0) + v
    return out


def main():
    cfg = json.loads(sys.argv[1])
    reply = os.fdopen(int(os.environ["KVS_REPLY_FD"]), "w")
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    def send(obj):
        reply.write(json.dumps(obj) + "\n")
        reply.flush()

    kw = dict(model=cfg["model"], skip_tokenizer_init=True, load_format="dummy",
              enforce_eager=True, dtype=cfg.get("dtype", "float32"), block_size=32,
              kv_cache_memory_bytes=cfg.get("kv_cache_bytes", 256 << 20),
              max_model_len=cfg.get("max_model_len", 4096), seed=0,
              enable_prefix_caching=cfg.get("prefix_caching", True),
              disable_log_stats=False, kv_cache_dtype=cfg.get("kv_cache_dtype") or "auto")
    if cfg.get("kv_transfer_config"):
        kw["kv_transfer_config"] = cfg["kv_transfer_config"]
    t0 = time.monotonic()
    try:
        llm = LLM(**kw)
    except Exception as e:      # noqa: BLE001 -- the test reads why
        send({"error": "engine start failed: %s" % e, "trace": traceback.format_exc()})
        return 1
    send({"ready": time.monotonic() - t0})
    for line in sys.stdin:
        cmd = json.loads(line)
        op = cmd.get("op")
        try:
            if op == "exit":
                send({"ok": True})
                break
            if op == "metrics":
                send({"metrics": _metrics(llm)})
            elif op == "evict_before_next_load":
                with open(os.environ[ARM_FILE_ENV] + ".tmp", "w") as f:
                    json.dump({"socket": cmd["socket"], "pool": cmd["pool"]}, f)
                os.rename(os.environ[ARM_FILE_ENV] + ".tmp", os.environ[ARM_FILE_ENV])
                send({"ok": True})
            elif op == "generate":
                sp = SamplingParams(max_tokens=cmd.get("max_tokens", 4), temperature=0,
                                    logprobs=0, ignore_eos=True)
                t = time.monotonic()
                outs = llm.generate([TokensPrompt(prompt_token_ids=p)
                                     for p in cmd["prompts"]], sp, use_tqdm=False)
                wall = time.monotonic() - t
                res = []
                for o in outs:
                    c = o.outputs[0]
                    lps = [lp[tok].logprob for tok, lp in zip(c.token_ids, c.logprobs)]
                    m = getattr(o, "metrics", None)
                    ttft = getattr(m, "first_token_latency", None) if m else None
                    res.append(dict(tokens=list(c.token_ids), logprobs=lps,
                                    cached=o.num_cached_tokens or 0, ttft=ttft))
                send({"outputs": res, "wall": wall})
            else:
                send({"error": "unknown op %r" % op})
        except Exception as e:  # noqa: BLE001
            send({"error": "%s failed: %s" % (op, e), "trace": traceback.format_exc()})
    del llm
    return 0


if __name__ == "__main__":
    sys.exit(main())
