"""Run by the vLLM venv's Python (tests/integrations/test_vllm_w4a16.py): vllm.LLM on each W4A16
(compressed-tensors pack-quantized) checkpoint directory, bf16 (vLLM's CPU W4A16 kernel takes 16-bit
activations only), eager, without our plugin, greedy on token-id prompts (no tokenizer); writes
{directory: tokens per prompt} as JSON. Usage: vllm_w4a16_generate.py PROMPTS_JSON MAX_TOKENS OUT_JSON DIR..."""
import json
import os
import sys

os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"

if __name__ == "__main__":
    prompts_json, max_tokens, out_json, *directories = sys.argv[1:]
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    prompts = [TokensPrompt(prompt_token_ids=p) for p in json.loads(open(prompts_json).read())]
    params = SamplingParams(temperature=0, max_tokens=int(max_tokens), ignore_eos=True, detokenize=False)
    tokens = {}
    for directory in directories:
        llm = LLM(directory, dtype="bfloat16", enforce_eager=True, max_model_len=256, seed=0, skip_tokenizer_init=True)
        tokens[directory] = [list(o.outputs[0].token_ids) for o in llm.generate(prompts, params)]
        del llm
    with open(out_json, "w") as f:
        json.dump(tokens, f)
