"""paged_attention, the op contract: the reference vs an independent per-sequence fp64 formula,
opcheck and torch.compile on both kernel paths, the functional wrapper and bad inputs; over an
int8 cache too (the error against the float cache: tests/ops/test_attention_unified.py).
(Triton kernel vs reference numerics: tests/kernels/test_attention_paged.py.)"""
import pytest
import torch

import ascendtile.ops as ak
from ascendtile.ops._registry import unchecked
from ascendtile.ops.reference._decode_plan import MIN_SAVED_ROWS, decode_plan, split_by_length
from opchecks import compiles, kernel_path, op_contract_tests, raises_naming
from ops._attention import corrupt_table, dequantized, make_paged_batch, paged_formula, quantize_paged

OPS = torch.ops.ascend


@pytest.mark.parametrize("softcap,window", [(0.0, 0), (20.0, 5)])
def test_reference_matches_independent(softcap, window):
    kv_lens = [1, 17, 64, 0, 33]
    query, kc, vc, table, _, seqused = make_paged_batch([1] * 5, kv_lens, 8, 2, 64, 16)
    got = ak.paged_attention(query, kc, vc, table, seqused, 0.125, softcap, window)
    expect = paged_formula(query, kc, vc, table, [1] * 5, kv_lens, 0.125, softcap, window)
    torch.testing.assert_close(got.double(), expect, rtol=1e-5, atol=1e-5)
    assert (got[3] == 0).all()


def _args():
    query, kc, vc, table, _, seqused = make_paged_batch([1, 1], [19, 5], 4, 2, 16, 16)
    return [torch.empty_like(query), query, kc, vc, table, seqused, 0.25, 10.0, 6]


def _int8_args():
    out, query, kc, vc, table, seqused, *rest = _args()
    kq, vq, ks, vs = quantize_paged(kc, vc)
    return [out, query, kq, vq, table, seqused, *rest, "int8", ks, vs]


test_opcheck, test_compile = op_contract_tests({"paged_attention": _args, "paged_attention:int8": _int8_args})


def test_wrapper_compiles():
    def step(query, kc, vc, table, seq_lens):
        return ak.paged_attention(query, kc, vc, table, seq_lens, 0.25) + 1

    compiles(step, *_args()[1:6])


def test_bad_inputs(values_checked):
    out, query, kc, vc, table, seqused, scale, cap, win = _args()
    op = OPS.paged_attention
    raises_naming(TypeError, "query", op, out, query.int(), kc, vc, table, seqused, scale, cap, win)
    raises_naming(ValueError, "key_cache", op, torch.empty(2, 5, 16), torch.randn(2, 5, 16), kc, vc, table, seqused, scale, cap, win)
    raises_naming(ValueError, "block_tables", op, out, query, kc, vc, table[:1], seqused, scale, cap, win)
    # A table too short for a sequence's length: seq_len > capacity (checked where it needs no sync).
    raises_naming(ValueError, "seq_lens", op, out, query, kc, vc, table[:, :1], seqused, scale, cap, win)
    raises_naming(ValueError, "seq_lens", op, out, query, kc, vc, table, torch.tensor([19], dtype=torch.int32), scale, cap, win)
    raises_naming(TypeError, "seq_lens", op, out, query, kc, vc, table, seqused.long(), scale, cap, win)
    raises_naming(ValueError, "block_tables", op, out, query, kc, vc, table.to("meta"), seqused, scale, cap, win)
    raises_naming(ValueError, "query", op, out, torch.randn(2, 16, 4).transpose(1, 2), kc, vc, table, seqused, scale, cap, win)


@pytest.mark.parametrize("path", ["reference", "triton"])
def test_check_indices_switch(path, monkeypatch):
    out, query, kc, vc, table, seqused, scale, cap, win = _args()  # lengths 19 and 5: 2 and 1 blocks of 16
    num_blocks = kc.shape[0]
    monkeypatch.setenv("ASCENDTILE_KERNELS", path)
    monkeypatch.setenv("ASCENDTILE_CHECK_INDICES", "1")
    out.fill_(7.0)
    for (b, j), bad in [((0, 1), num_blocks), ((1, 0), -1)]:
        wrong = table.clone()
        wrong[b, j] = bad
        with pytest.raises(ValueError, match=rf"^block_tables: entry \[{b}, {j}\] is {bad}, outside \[0, {num_blocks}\)"):
            OPS.paged_attention(out, query, kc, vc, wrong, seqused, scale, cap, win)
    assert (out == 7.0).all()
    padded = table.clone()
    padded[1, 1:] = num_blocks + 5  # past sequence 1's length: never read, so accepted
    OPS.paged_attention(out, query, kc, vc, padded, seqused, scale, cap, win)
    monkeypatch.setenv("ASCENDTILE_CHECK_INDICES", "0")  # off: the bad block's keys are hidden, no error
    OPS.paged_attention(out, query, kc, vc, wrong, seqused, scale, cap, win)


@pytest.mark.parametrize("softcap,window", [(0.0, 0), (20.0, 5), (0.0, 3)])
def test_step_plan_follows_in_place_changes(softcap, window):
    """The CPU path memoises its gather index per step (ops/reference/_decode_plan.py). Mutating the
    table or the lengths in place between calls, as a runtime reusing its buffers would, must give
    the new inputs' result: a stale index reads the old blocks or masks the old lengths."""
    kv_lens = [5, 40, 17, 0, 33]
    query, kc, vc, table, _, seqused = make_paged_batch([1] * 5, kv_lens, 6, 2, 24, 16)
    num_blocks = kc.shape[0]

    def check():
        lens = seqused.tolist()
        got = ak.paged_attention(query, kc, vc, table, seqused, 0.2, softcap, window)
        expect = paged_formula(query, kc, vc, table, [1] * 5, lens, 0.2, softcap, window)
        torch.testing.assert_close(got.double(), expect, rtol=1e-5, atol=1e-5)
        assert (got[[b for b, n in enumerate(lens) if n == 0]] == 0).all()

    check()
    table[1, :2] = table[1, [1, 0]]  # same length, its two full blocks read in the other order
    check()
    seqused[1] -= 3  # same table, shorter: keys 37..39 (real data) now hidden
    seqused[2] -= 16  # one key left
    check()
    table[[0, 4]] = table[[4, 0]].clone()  # sequences trade blocks and lengths
    seqused[[0, 4]] = seqused[[4, 0]].clone()
    check()
    bad = corrupt_table(table, seqused.tolist(), 16, num_blocks)
    table.copy_(bad)  # read ids out of range: those keys hidden, never a plan built for valid ids
    lens = seqused.tolist()
    got = torch.empty_like(query)
    unchecked("paged_attention")(got, query, kc, vc, table, seqused, 0.2, softcap, window)  # no index check
    expect = paged_formula(query, kc, vc, table, [1] * 5, lens, 0.2, softcap, window)
    torch.testing.assert_close(got.double(), expect, rtol=1e-5, atol=1e-5)


def test_step_plan_is_shared_by_equal_inputs():
    """Layers of one step pass equal (often the same) tensors: one plan serves them all, and its
    gather buffers are reused; new contents build a new plan."""
    _, kc, _, table, _, seqused = make_paged_batch([1] * 3, [9, 30, 1], 4, 2, 16, 16)
    plan = decode_plan(table, seqused, kc.shape[0], kc.shape[1])
    assert decode_plan(table.clone(), seqused.clone(), kc.shape[0], kc.shape[1]) is plan
    first = plan.groups[0].gather(kc, "key")
    assert plan.groups[0].gather(kc, "key").data_ptr() == first.data_ptr()
    seqused[0] += 1
    assert decode_plan(table, seqused, kc.shape[0], kc.shape[1]) is not plan
    assert decode_plan(table.long(), seqused, kc.shape[0], kc.shape[1]) is not plan


def test_split_by_length():
    """Similar lengths stay one group in batch order; a few long sequences among short ones are
    attended apart, so the short ones are not padded to the longest."""
    assert split_by_length([100, 90, 117, 95]) == [[0, 1, 2, 3]]
    assert split_by_length([5, 300, 7, 2, 280]) == [[3, 0, 2], [4, 1]]
    long = MIN_SAVED_ROWS // 3  # three sequences of this length beside short ones save too few rows
    assert split_by_length([long, 1, 1, 1]) == [[0, 1, 2, 3]]


@pytest.mark.parametrize("softcap,window", [(0.0, 0), (30.0, 7)])
def test_grouped_lengths_match_independent(softcap, window):
    """Lengths from 0 to 300: the plan attends them in several groups (scattered back to their rows)."""
    kv_lens = [3, 300, 0, 17, 260, 1, 90, 5, 288]
    query, kc, vc, table, _, seqused = make_paged_batch([1] * 9, kv_lens, 4, 1, 32, 16)
    assert len(decode_plan(table, seqused, kc.shape[0], kc.shape[1]).groups) > 1
    got = ak.paged_attention(query, kc, vc, table, seqused, 0.15, softcap, window)
    expect = paged_formula(query, kc, vc, table, [1] * 9, kv_lens, 0.15, softcap, window)
    torch.testing.assert_close(got.double(), expect, rtol=1e-5, atol=1e-5)
    assert (got[2] == 0).all()


@pytest.mark.parametrize("softcap,window", [(0.0, 0), (20.0, 5)])
def test_int8_reference_matches_independent(softcap, window):
    """Over the int8 cache: the fp64 formula over the dequantized cache, through the step's shared
    gather plan (several length groups) and through the general path (a bad block id hides its
    keys; the plan is not built)."""
    kv_lens = [1, 17, 300, 0, 33, 280]
    query, kc, vc, table, _, seqused = make_paged_batch([1] * 6, kv_lens, 8, 2, 64, 16)
    kq, vq, ks, vs = quantize_paged(kc, vc)
    kd, vd = dequantized(kq, ks), dequantized(vq, vs)
    assert len(decode_plan(table, seqused, kc.shape[0], kc.shape[1]).groups) > 1
    for t in (table, corrupt_table(table, kv_lens, 16, kc.shape[0])):
        got = torch.empty_like(query)
        unchecked("paged_attention")(got, query, kq, vq, t, seqused, 0.125, softcap, window, "int8", ks, vs)
        expect = paged_formula(query, kd, vd, t, [1] * 6, kv_lens, 0.125, softcap, window)
        torch.testing.assert_close(got.double(), expect, rtol=1e-5, atol=1e-5)
        assert (got[3] == 0).all()


@pytest.mark.parametrize("path", ["reference", "triton"])
def test_int8_non_finite_row_reads_as_in_the_float_cache(path):
    """A key row written with a NaN (or inf) gets scale NaN and dequantizes to NaN: each output is
    finite exactly where the same attention over the float cache holding that row is, and close to
    it there; the queries that do not read the row (another KV head, another sequence, outside the
    window) are untouched by it."""
    kv_lens = [20, 20, 9]
    query, kc, vc, table, _, seqused = make_paged_batch([1] * 3, kv_lens, 4, 2, 32, 16)
    # The +inf row meets queries of positive first coordinate: it scores +inf over the float cache and
    # NaN over the int8 one (the row's scale is NaN), the same output. A negative one would score it
    # -inf over the float cache, dropping the key, which the int8 cache cannot do (a GPU run's data).
    query[1, :2, 0] = query[1, :2, 0].abs()
    for b, j, head, bad in ((0, 3, 1, float("nan")), (1, 2, 0, float("inf"))):
        kc[int(table[b, j // 16]), j % 16, head, 0] = bad
    kq, vq, ks, vs = quantize_paged(kc, vc)
    assert ks.isnan().sum() - vs.isnan().sum() == 2  # the two rows' scales, beside the unused slots'
    for window in (0, 8):  # keys 3 and 2 are outside the last 8
        with kernel_path(path):
            ref = ak.paged_attention(query, kc, vc, table, seqused, 0.2, 0.0, window)
            got = ak.paged_attention(query, kq, vq, table, seqused, 0.2, 0.0, window, "int8", ks, vs)
        assert torch.equal(got.isfinite(), ref.isfinite())
        ok = ref.isfinite()
        assert ok[0, :2].all() and ok[1, 2:].all() and ok[2].all() and (ok.all() if window else True)
        torch.testing.assert_close(got[ok], ref[ok], rtol=0, atol=0.05)


def test_bad_inputs_int8(values_checked):
    out, query, kq, vq, table, seqused, scale, cap, win, _, ks, vs = _int8_args()
    op = OPS.paged_attention
    raises_naming(TypeError, "key_cache", op, out, query, kq.float(), vq.float(), table, seqused, scale, cap, win,
                  "int8", ks, vs)
    raises_naming(TypeError, "k_scale", op, out, query, kq, vq, table, seqused, scale, cap, win, "int8", None, vs)
    raises_naming(ValueError, "v_scale", op, out, query, kq, vq, table, seqused, scale, cap, win, "int8", ks,
                  vs[:1])
    raises_naming(ValueError, "kv_cache_dtype", op, out, query, kq, vq, table, seqused, scale, cap, win, "fp8_e5m2",
                  ks, vs)
