"""Run under torchrun by tests/runtime/test_tensor_parallel_llm.py: every rank builds
LLM(directory, tensor_parallel_size=WORLD_SIZE, compilation_config=level) for each level and
generates the same token prompts greedily (SPMD), then writes its tokens and stats per level to
OUT/rank{RANK}.json.

usage: torchrun --nproc-per-node N torchrun_generate.py DIRECTORY OUT PROMPTS_JSON MAX_TOKENS LEVELS_JSON"""
import json
import os
import sys
from pathlib import Path

import torch

from ascendtile.runtime import LLM, SamplingParams


def main(directory: str, out: str, prompts: str, max_tokens: str, levels: str) -> None:
    torch.set_num_threads(1)
    result = {}
    for level in json.loads(levels):
        llm = LLM(directory, tensor_parallel_size=int(os.environ["WORLD_SIZE"]), num_kv_blocks=1100, max_num_seqs=4,
                  tp_timeout_s=120, compilation_config=level)
        outputs = llm.generate(json.loads(prompts), SamplingParams(max_tokens=int(max_tokens), ignore_eos=True),
                               use_tqdm=False)
        result[level] = {"tokens": [list(o.outputs[0].token_ids) for o in outputs], "in_process": llm.engine is not None,
                         "collective_bytes": llm.last_stats.collective_bytes, "compiles": _compiles(llm)}
    (Path(out) / f"rank{os.environ['RANK']}.json").write_text(json.dumps(result))


def _compiles(llm: LLM) -> int:
    backend = getattr(llm.engine.model, "backend", None)  # a CompiledModel's; level 0 runs the model itself
    return 0 if backend is None else backend.num_compiles


if __name__ == "__main__":
    main(*sys.argv[1:])
