"""Run under torchrun by tests/runtime/test_tensor_parallel_llm.py: every rank builds
LLM(directory, tensor_parallel_size=WORLD_SIZE) and generates the same token prompts greedily
(SPMD), then writes its tokens and stats to OUT/rank{RANK}.json.

usage: torchrun --nproc-per-node N torchrun_generate.py DIRECTORY OUT PROMPTS_JSON MAX_TOKENS"""
import json
import os
import sys
from pathlib import Path

import torch

from ascendkit.runtime import LLM, SamplingParams


def main(directory: str, out: str, prompts: str, max_tokens: str) -> None:
    torch.set_num_threads(1)
    llm = LLM(directory, tensor_parallel_size=int(os.environ["WORLD_SIZE"]), num_kv_blocks=1100, max_num_seqs=4,
              tp_timeout_s=120)
    outputs = llm.generate(json.loads(prompts), SamplingParams(max_tokens=int(max_tokens), ignore_eos=True),
                           use_tqdm=False)
    result = {"tokens": [list(o.outputs[0].token_ids) for o in outputs], "pids": [os.getpid()],
              "in_process": llm.engine is not None, "collective_bytes": llm.last_stats.collective_bytes}
    (Path(out) / f"rank{os.environ['RANK']}.json").write_text(json.dumps(result))


if __name__ == "__main__":
    main(*sys.argv[1:])
