"""sampling: every kernel at each real vocabulary (the batch is a runtime size: one compile
serves batch 1 and 32)."""
from __future__ import annotations

from ascendtile.kernels import sampling as k
from ascendtile.lowering.case import LoweringCase, signature_types
from ascendtile.lowering.shape_grid import VOCAB_SIZES

_POINTERS = {
    "process_logits": (k.process_logits_kernel, {"top_k_ptr": "*i32"}),
    "sample_tokens": (k.sample_tokens_kernel, {"token_ids_ptr": "*i32", "seeds_ptr": "*i64", "steps_ptr": "*i64"}),
    "apply_penalties": (k.apply_penalties_kernel, {"counts_ptr": "*i32", "prompt_ptr": "*i8", "count_rows_ptr": "*i32"}),
    "gather_logprobs": (k.gather_logprobs_kernel, {"ids_ptr": "*i32", "rows_ptr": "*i32", "token_ids_ptr": "*i32"}),
}


def cases() -> list[LoweringCase]:
    cases = [LoweringCase(name="update_token_counts", kernel=k.update_token_counts_kernel,
                          arg_types=signature_types(k.update_token_counts_kernel, "i32"))]
    for vocab in VOCAB_SIZES:
        for op, (kernel, pointers) in _POINTERS.items():
            constexprs = {"V": vocab, "BLOCK": k.block_for(vocab)}
            if op == "process_logits":
                constexprs["STEPS"] = k.THRESHOLD_BITS
            cases.append(LoweringCase(name=f"{op}[vocab={vocab}]", kernel=kernel,
                                      arg_types=signature_types(kernel, "fp32", **pointers), constexprs=constexprs))
    return cases
