"""rejection: the verification kernels once per variant (every size is a runtime argument), the
recovered draw at each real vocabulary, with draft probabilities and with one-hot (n-gram) drafts."""
from __future__ import annotations

from ascendtile.kernels import rejection as k
from ascendtile.lowering.case import LoweringCase, signature_types
from ascendtile.lowering.shape_grid import VOCAB_SIZES

_IDS = {"out_ptr": "*i32", "cu_ptr": "*i32", "draft_ptr": "*i32", "bonus_ptr": "*i32", "is_greedy_ptr": "*i8"}
_DRAWS = {"seeds_ptr": "*i64", "steps_ptr": "*i64"}


def cases() -> list[LoweringCase]:
    greedy, random_, recovered = (k.rejection_greedy_sample_kernel, k.rejection_random_sample_kernel,
                                  k.sample_recovered_tokens_kernel)
    cases = [
        LoweringCase(name="rejection_greedy_sample", kernel=greedy, constexprs={"ALL_GREEDY": False},
                     arg_types=signature_types(greedy, "i32", is_greedy_ptr="*i8")),
        LoweringCase(name="rejection_greedy_sample[all_greedy]", kernel=greedy,
                     constexprs={"ALL_GREEDY": True, "is_greedy_ptr": None},
                     arg_types=signature_types(greedy, "i32", {"is_greedy_ptr": None})),
    ]
    for one_hot in (False, True):
        cases.append(LoweringCase(
            name=f"rejection_random_sample[one_hot={one_hot}]", kernel=random_, constexprs={"ONE_HOT": one_hot},
            arg_types=signature_types(random_, "fp32", **_IDS, recovered_ptr="*i32", **_DRAWS)))
        for vocab in VOCAB_SIZES:
            cases.append(LoweringCase(
                name=f"sample_recovered_tokens[vocab={vocab},one_hot={one_hot}]", kernel=recovered,
                constexprs={"V": vocab, "BLOCK": k.block_for(vocab), "ONE_HOT": one_hot},
                arg_types=signature_types(recovered, "fp32", recovered_ptr="*i32", cu_ptr="*i32", draft_ptr="*i32",
                                          **_DRAWS)))
    return cases
