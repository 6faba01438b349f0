"""Run by the vLLM venv's Python (tests/integrations/test_vllm_plugin.py): vllm.LLM on an HF dir,
greedy, fp32, eager, on prompts given as token ids (vLLM loads no tokenizer: Gemma 3's 262k-entry
one takes ~10 s to load here); writes the tokens and our op counters as JSON.
Usage: vllm_generate.py MODEL_DIR PROMPT_IDS_JSON MAX_TOKENS OUT_JSON."""
import json
import os
import sys

# The engine core in this process (no engine subprocess), so our counters are this process's.
os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"

if __name__ == "__main__":
    model_dir, prompts_json, max_tokens, out_json = sys.argv[1:5]
    from vllm import LLM, SamplingParams

    from ascendtile.integrations.vllm.counters import op_calls

    llm = LLM(model_dir, dtype="float32", enforce_eager=True, max_model_len=256, seed=0, skip_tokenizer_init=True)
    prompts = [{"prompt_token_ids": ids} for ids in json.loads(open(prompts_json).read())]
    outputs = llm.generate(prompts, SamplingParams(temperature=0, max_tokens=int(max_tokens), detokenize=False))
    with open(out_json, "w") as f:
        json.dump({"tokens": [list(o.outputs[0].token_ids) for o in outputs], "op_calls": op_calls()}, f)
