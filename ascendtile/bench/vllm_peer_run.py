"""Run by the vLLM venv's Python (never imported: vLLM's CPU wheel pulls upstream triton, which
cannot sit beside triton-ascend), for `ascendtile bench e2e --compare vllm`: vllm.LLM on an HF
directory, one warm-up generate, then one timed generate of the given token prompts. Imports
nothing of ascendtile; with our plugin loaded by vLLM, reads its op counters from sys.modules.
Usage: vllm_peer_run.py REQUEST_JSON RESULT_JSON (the request's keys: see main)."""
import json
import os
import sys
import time

COUNTERS = "ascendtile.integrations.vllm.counters"


def op_calls() -> dict:
    """Our plugin's per-op call counts ({} when vLLM did not load the plugin)."""
    counters = sys.modules.get(COUNTERS)
    return counters.op_calls() if counters is not None else {}


def main(request_json: str, result_json: str) -> None:
    # The engine core in this process, not in a subprocess of its own: the timed generate() and the
    # plugin's op counters are this process's. Read when vllm is imported.
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    import vllm
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    request = json.loads(open(request_json).read())
    prompts, output_len = request["prompts"], request["output_len"]
    # log stats on: each RequestOutput then carries its RequestStateStats (the timestamps below)
    llm = LLM(request["model"], dtype=request["dtype"], enforce_eager=request["enforce_eager"], seed=0,
              max_model_len=max(map(len, prompts)) + output_len, max_num_seqs=len(prompts),
              max_num_batched_tokens=request["max_num_batched_tokens"], enable_prefix_caching=False,
              disable_log_stats=False)
    sampling = {"temperature": request["temperature"], "top_p": request["top_p"], "ignore_eos": True}
    llm.generate([TokensPrompt(prompt_token_ids=prompts[0])], SamplingParams(max_tokens=2, **sampling),
                 use_tqdm=False)  # warm-up, as every engine gets one
    before = op_calls()
    start = time.perf_counter()
    outputs = llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompts],
                           SamplingParams(max_tokens=output_len, min_tokens=output_len, **sampling), use_tqdm=False)
    wall = time.perf_counter() - start
    after = op_calls()
    stats = [o.metrics for o in outputs]
    result = {
        "vllm_version": vllm.__version__, "wall_s": wall,
        "token_ids": [list(o.outputs[0].token_ids) for o in outputs],
        # arrival (generate() adding the request) -> first token, wall clock
        "ttft_s": [s.first_token_latency for s in stats],
        # engine-core times of the first and last token over the tokens between them
        "tpot_s": [(s.last_token_ts - s.first_token_ts) / (s.num_generation_tokens - 1)
                   if s.num_generation_tokens > 1 else 0.0 for s in stats],
        "plugin_loaded": COUNTERS in sys.modules,
        "op_calls": {op: calls - before.get(op, 0) for op, calls in after.items()},
    }
    with open(result_json, "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main(*sys.argv[1:3])
