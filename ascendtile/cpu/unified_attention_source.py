"""The C++ source of the CPU unified attention (unified_attention.py): any batch of sequences, each
bringing q_len >= 1 new tokens, over float paged caches, with fp32 math.

One work item is a tile of up to TILE_TOKENS consecutive new tokens of one sequence with the G =
heads / kv_heads query heads of one KV head: R = tokens · G rows of fp32 queries (scaled), held
while the item's keys pass in chunks of CHUNK_KEYS. Each chunk's key rows are read once from the
cache through the block table, widened and laid out transposed ([D][keys]), its value rows widened
([keys][D]); keys of a block id outside [0, num_blocks) are zeros there and hidden. The scores are
then a register-blocked product (4 rows x 16 keys of fp32 accumulators, a query element broadcast
against two vectors of transposed keys), and the values' product the same shape (4 rows x 16 head
dims, a probability broadcast against a value row), so every loaded vector feeds four FMAs, as in a
GEMM's inner kernel. The softmax is online (flash attention's): each row keeps its running max and
sum, and its accumulators are rescaled when the max grows. Chunks start at the item's first
visible key and end at its last token's position, so a causal item reads no key past it.

What a row sees: keys j < seqused_k (bounded by the table's columns), j <= its position p =
seqused_k - q_len + t (bottom-right causal), p - window < j with a sliding window, block id in
range. A row with no visible key, or with a NaN or +inf score among its visible keys, is written as
zeros (as the decode kernel and the reference's masked path give). Unused slots are never read.
256-bit GCC vector extensions over vector_source.py's prelude.

On AMX (a library built with build.AMX_FLAGS, amx_source.py): bf16 variants whose head dim is a
multiple of 32 multiply on tiles instead. The queries stay bf16 (the scores are scaled in fp32);
each chunk's keys and values are laid out in AMX's pairs of rows; blocks of 16 rows take one tile
product per 16 keys for the scores and one per 64 head dims for the values. The probabilities go
into the values' product as two bf16 (the rounded value and what rounding left), so it holds them
to ~16 bits, not bf16's 8 (rounded once, 28 % of a test's outputs differed from the fp32 kernel's
rounded; split, 0.14 %); it accumulates in fp32. A
chunk holding a NaN or infinite value takes the 4-row fp32 product for its values instead, so the
value never reaches a row through a zero probability. The softmax runs on 512-bit vectors in such a
library (AVX-512 comes with AMX), and a row's exp stops at its last visible key's vector. On SmolLM2's
prefill shapes (16 prompts of 128 tokens, 9 / 3 heads of 64) this took 1.49 ms against 3.14 on the
256-bit fp32 FMAs (2-core Xeon with AMX, 2026-11-29; bench/results/2026-11-29-amx-prefill-attention.md)."""

from ascendtile.cpu.amx_source import SOURCE as AMX
from ascendtile.cpu.vector_source import EXP8, PRELUDE

TILE_TOKENS = 32
CHUNK_KEYS = 64

SOURCE = PRELUDE + EXP8 + AMX + rf'''
constexpr int TILE_TOKENS = {TILE_TOKENS}, CHUNK_KEYS = {CHUNK_KEYS};
''' + r'''
// s[4 rows][k] = q[4 rows][D] . kt[D][k] for the keys k < 16 * key_blocks of the chunk
template <int D>
static inline void score_rows(const float* q, const float* kt, float* s, int key_blocks) {
  for (int k0 = 0; k0 < 16 * key_blocks; k0 += 16) {
    v8 acc[4][2] = {};
    for (int d = 0; d < D; ++d) {
      v8 b0, b1;
      std::memcpy(&b0, kt + d * CHUNK_KEYS + k0, 32);
      std::memcpy(&b1, kt + d * CHUNK_KEYS + k0 + 8, 32);
      for (int i = 0; i < 4; ++i) {
        const v8 a = splat(q[i * D + d]);
        acc[i][0] += a * b0;
        acc[i][1] += a * b1;
      }
    }
    for (int i = 0; i < 4; ++i) {
      std::memcpy(s + i * CHUNK_KEYS + k0, &acc[i][0], 32);
      std::memcpy(s + i * CHUNK_KEYS + k0 + 8, &acc[i][1], 32);
    }
  }
}

// o[4 rows][D] += p[4 rows][CHUNK_KEYS] . v[CHUNK_KEYS][D], over the first `keys` keys
template <int D>
static inline void add_values(const float* p, const float* v, float* o, int keys) {
  for (int c0 = 0; c0 < D; c0 += 16) {
    v8 acc[4][2];
    for (int i = 0; i < 4; ++i) {
      std::memcpy(&acc[i][0], o + i * D + c0, 32);
      std::memcpy(&acc[i][1], o + i * D + c0 + 8, 32);
    }
    for (int k = 0; k < keys; ++k) {
      v8 b0, b1;
      std::memcpy(&b0, v + k * D + c0, 32);
      std::memcpy(&b1, v + k * D + c0 + 8, 32);
      for (int i = 0; i < 4; ++i) {
        const v8 a = splat(p[i * CHUNK_KEYS + k]);
        acc[i][0] += a * b0;
        acc[i][1] += a * b1;
      }
    }
    for (int i = 0; i < 4; ++i) {
      std::memcpy(o + i * D + c0, &acc[i][0], 32);
      std::memcpy(o + i * D + c0 + 8, &acc[i][1], 32);
    }
  }
}

#ifndef ASCENDTILE_AMX
#define ASCENDTILE_AMX 0
#endif

// Whether a variant multiplies on AMX tiles: bf16, a head dim of whole 32-element tile rows, a
// library built for AMX (amx_source.py) in a process Linux lends the tiles to.
template <typename T, int D>
static bool tiled() {
#if ASCENDTILE_AMX
  if constexpr (std::is_same_v<T, bf16_t> && D % 32 == 0) {
    static_assert(D <= int(sizeof(ZERO_ROW) / sizeof(bf16_t)), "a hidden key's row is ZERO_ROW");
    return amx_permitted();
  }
#endif
  return false;
}

// Returns whether it multiplied on AMX tiles (tiled<T, D>()).
template <typename T, int D>
static bool attend(T* out, const T* query, const T* key_cache, const T* value_cache, const int32_t* block_table,
                   const int32_t* cu_q, const int32_t* seq_lens, int64_t num_seqs, int64_t heads, int64_t kv_heads,
                   int64_t num_blocks, int64_t block_size, int64_t table_cols, int64_t table_stride, int64_t q_st,
                   int64_t q_sh, int64_t o_st, int64_t o_sh, int64_t c_sblk, int64_t c_sslot, int64_t c_sh,
                   float scale, float softcap, int64_t window, int threads) {
  const bool tiles = tiled<T, D>();
  const int64_t group = heads / kv_heads, block_rows = tiles ? 16 : 4;
  const int rows_max = int((TILE_TOKENS * group + 15) / 16 * 16);
  const float ninf = -std::numeric_limits<float>::infinity();
  row_i lane;
  for (int l = 0; l < ROW_LANES; ++l) lane[l] = l;
  // items (sequence, first token, KV head), a sequence's last tiles (the most keys) first
  std::vector<int64_t> items;
  for (int64_t b = 0; b < num_seqs; ++b) {
    const int64_t q_len = cu_q[b + 1] - cu_q[b];
    for (int64_t t0 = (q_len - 1) / TILE_TOKENS * TILE_TOKENS; q_len > 0 && t0 >= 0; t0 -= TILE_TOKENS)
      for (int64_t kh = 0; kh < kv_heads; ++kh) { items.push_back(b); items.push_back(t0); items.push_back(kh); }
  }
  const int64_t num_items = int64_t(items.size()) / 3;
  #pragma omp parallel num_threads(threads)
  {
    std::vector<float> q(rows_max * D), o(rows_max * D), s(rows_max * CHUNK_KEYS), kt(D * CHUNK_KEYS, 0.f),
                       v(CHUNK_KEYS * D, 0.f), run_max(rows_max), run_sum(rows_max);
    std::vector<int64_t> pos(rows_max);
    std::vector<char> bad(rows_max);
    std::vector<int32_t> shown(CHUNK_KEYS);  // -1: the key's block id is in range
#if ASCENDTILE_AMX
    // On tiles: the queries as they come (the scores are scaled instead), the chunk's keys and
    // values in VNNI pairs (keys: pairs of head dims, [D / 2][CHUNK_KEYS]; values: pairs of keys,
    // [CHUNK_KEYS / 2][D]), the probabilities as two bf16 each (high, low), one block's value product.
    std::vector<bf16_t> qb(tiles ? rows_max * D : 0), pb(tiles ? 2 * rows_max * CHUNK_KEYS : 0);
    bf16_t* const pb_low = pb.data() + rows_max * CHUNK_KEYS;
    std::vector<uint32_t> ktp(tiles ? D / 2 * CHUNK_KEYS : 0), vp(tiles ? CHUNK_KEYS / 2 * D : 0);
    std::vector<float> pv(tiles ? 16 * D : 0);
    const bf16_t* key_rows[CHUNK_KEYS];
    const bf16_t* value_rows[CHUNK_KEYS];
    if (tiles) amx_configure();
#endif
    #pragma omp for schedule(dynamic, 1)
    for (int64_t item = 0; item < num_items; ++item) {
      const int64_t b = items[3 * item], t0 = items[3 * item + 1], kh = items[3 * item + 2];
      const int64_t q_len = cu_q[b + 1] - cu_q[b];
      const int64_t kv_len = std::min<int64_t>(seq_lens[b], table_cols * block_size);
      const int64_t tokens = std::min<int64_t>(TILE_TOKENS, q_len - t0), rows = tokens * group;
      const int64_t first = seq_lens[b] - q_len + t0, last = first + tokens - 1;  // positions of the tile's tokens
      const int64_t lo = std::max<int64_t>(0, window > 0 ? first - window + 1 : 0);
      const int64_t hi = std::min<int64_t>(kv_len, last + 1);  // keys [lo, hi) may be visible to some row
      // the products run on blocks of block_rows rows: rows past `rows` in the last block are zero
      // queries (their accumulators are never written out); the rest of each buffer is set below
      const int64_t padded = (rows + block_rows - 1) / block_rows * block_rows;
      std::fill(q.begin() + rows * D, q.begin() + padded * D, 0.f);
      std::fill(o.begin(), o.begin() + padded * D, 0.f);
      std::fill(run_max.begin(), run_max.begin() + rows, ninf);
      std::fill(run_sum.begin(), run_sum.begin() + rows, 0.f);
      std::fill(bad.begin(), bad.begin() + rows, 0);
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t t = t0 + r / group, h = kh * group + r % group;
        pos[r] = first + r / group;
        const T* src = query + (cu_q[b] + t) * q_st + h * q_sh;
#if ASCENDTILE_AMX
        if (tiles) { std::memcpy(qb.data() + r * D, src, 2 * D); continue; }  // tiles: T is bf16_t
#endif
        for (int d = 0; d < D; ++d) q[r * D + d] = widen(src[d]) * scale;
      }
#if ASCENDTILE_AMX
      if (tiles) {  // zero queries and probabilities in the last block's rows past `rows`
        std::fill(qb.begin() + rows * D, qb.begin() + padded * D, bf16_t(0));
        std::fill(pb.begin() + rows * CHUNK_KEYS, pb.begin() + padded * CHUNK_KEYS, bf16_t(0));
        std::fill(pb_low + rows * CHUNK_KEYS, pb_low + padded * CHUNK_KEYS, bf16_t(0));
      }
#endif
      const int32_t* ids = block_table + b * table_stride;
      for (int64_t j0 = lo; j0 < hi; j0 += CHUNK_KEYS) {
        const int keys = int(std::min<int64_t>(CHUNK_KEYS, hi - j0));
#if ASCENDTILE_AMX
        bool odd_values = false;
        if (tiles) {  // T is bf16_t: the chunk's rows into VNNI pairs, a hidden key's as zeros
          for (int k = 0; k < CHUNK_KEYS; ++k) {
            const int64_t j = j0 + k, id = k < keys ? ids[j / block_size] : -1;
            shown[k] = id >= 0 && id < num_blocks ? -1 : 0;
            const int64_t at = id * c_sblk + (j % block_size) * c_sslot + kh * c_sh;
            key_rows[k] = shown[k] ? reinterpret_cast<const bf16_t*>(key_cache + at) : ZERO_ROW;
            value_rows[k] = shown[k] ? reinterpret_cast<const bf16_t*>(value_cache + at) : ZERO_ROW;
          }
          for (int k = 0; k < keys; ++k)
            for (int i = 0; i < D / 2; ++i) std::memcpy(&ktp[i * CHUNK_KEYS + k], key_rows[k] + 2 * i, 4);
          uint16_t odd = 0;  // a NaN or infinite value: its chunk's values take the exact path below
          for (int k = 0; k < CHUNK_KEYS; k += 2) {  // past `keys`: zeros, as a tile takes 32 keys
            const bf16_t *even = value_rows[k], *next = value_rows[k + 1];
            for (int d = 0; d < D; ++d) {
              vp[k / 2 * D + d] = uint32_t(even[d]) | uint32_t(next[d]) << 16;
              odd |= uint16_t((even[d] & 0x7f80) == 0x7f80) | uint16_t((next[d] & 0x7f80) == 0x7f80);
            }
          }
          odd_values = odd != 0;
        } else
#endif
        for (int k = 0; k < keys; ++k) {  // keys past `keys` are masked, whatever kt holds there
          const int64_t j = j0 + k, id = ids[j / block_size];
          shown[k] = id >= 0 && id < num_blocks ? -1 : 0;
          if (!shown[k]) {  // zeros: a hidden key's probability is 0, and 0 times a NaN would not be
            for (int d = 0; d < D; ++d) { kt[d * CHUNK_KEYS + k] = 0.f; v[k * D + d] = 0.f; }
            continue;
          }
          const int64_t at = id * c_sblk + (j % block_size) * c_sslot + kh * c_sh;
          for (int d = 0; d < D; ++d) { kt[d * CHUNK_KEYS + k] = widen(key_cache[at + d]); v[k * D + d] = widen(value_cache[at + d]); }
        }
        for (int k = keys; k < CHUNK_KEYS; ++k) shown[k] = 0;
        // a block of `size` rows from row r needs the keys up to its last row's position (a causal
        // tile's diagonal)
        auto block_keys = [&](int64_t r, int64_t size) {
          return std::min<int64_t>(keys, pos[std::min(r + size - 1, rows - 1)] + 1 - j0);
        };
        for (int64_t r = 0; r < rows; r += block_rows) {
          const int64_t needed = block_keys(r, block_rows);
          if (needed <= 0) continue;
#if ASCENDTILE_AMX
          if (tiles) {
            float* sr = s.data() + r * CHUNK_KEYS;
            const int key_tiles = int((needed + 15) / 16);
            amx_product(qb.data() + r * D, nullptr, D, ktp.data(), CHUNK_KEYS, sr, CHUNK_KEYS, D, key_tiles);
            for (int64_t i = 0; i < std::min<int64_t>(16, rows - r); ++i)
              for (int k = 0; k < 16 * key_tiles; ++k) sr[i * CHUNK_KEYS + k] *= scale;
            continue;
          }
#endif
          score_rows<D>(q.data() + r * D, kt.data(), s.data() + r * CHUNK_KEYS, int((needed + 15) / 16));
        }
        for (int64_t r = 0; r < rows; ++r) {
          float* sr = s.data() + r * CHUNK_KEYS;
          // the row's visible keys in this chunk: [from, to) less the hidden ones
          const int64_t from = window > 0 ? std::max<int64_t>(0, pos[r] - window + 1 - j0) : 0;
          const int64_t to = std::min<int64_t>(keys, pos[r] + 1 - j0);
          if (bad[r] || to <= from) { std::fill(sr, sr + CHUNK_KEYS, 0.f); continue; }
          if (softcap > 0.f) for (int64_t k = from; k < to; ++k) sr[k] = softcap * std::tanh(sr[k] / softcap);
          // the row's probabilities: exp over whole vectors up to `to`, zeros past them
          const int width = int((to + ROW_LANES - 1) / ROW_LANES * ROW_LANES);
          row_v top_lanes = row_v{} + ninf;
          row_i wrong = {};
          for (int k = 0; k < width; k += ROW_LANES) {
            row_v x; std::memcpy(&x, sr + k, sizeof(x));
            row_i seen; std::memcpy(&seen, shown.data() + k, sizeof(seen));
            seen &= (lane + k >= int32_t(from)) & (lane + k < int32_t(to));
            wrong |= seen & ((x != x) | (x == -ninf));
            x = seen ? x : row_v{} + ninf;
            top_lanes = x > top_lanes ? x : top_lanes;
            std::memcpy(sr + k, &x, sizeof(x));
          }
          std::fill(sr + width, sr + CHUNK_KEYS, 0.f);
          const float top = lanes_max(top_lanes);
          for (int l = 0; l < ROW_LANES; ++l) bad[r] |= wrong[l] != 0;
          if (bad[r] || top == ninf) { std::fill(sr, sr + CHUNK_KEYS, 0.f); continue; }
          const float grown = std::max(run_max[r], top);
          if (grown > run_max[r] && run_sum[r] > 0.f) {  // rescale what the row has summed so far
            const float factor = std::exp(run_max[r] - grown);
            run_sum[r] *= factor;
            for (int d = 0; d < D; ++d) o[r * D + d] *= factor;
          }
          run_max[r] = grown;
          row_v sums = {};
          for (int k = 0; k < width; k += ROW_LANES) {
            row_v x; std::memcpy(&x, sr + k, sizeof(x));
            x = exp_lanes<row_v, row_i>(x - grown); sums += x;
            std::memcpy(sr + k, &x, sizeof(x));
          }
          run_sum[r] += lanes_sum(sums);
        }
#if ASCENDTILE_AMX
        if (tiles && !odd_values) {  // the probabilities, high and low bf16, times the values
          for (int64_t r = 0; r < rows; r += 16) {
            const int64_t needed = block_keys(r, block_rows), block = std::min<int64_t>(16, rows - r);
            if (needed <= 0) continue;
            for (int64_t i = 0; i < block; ++i)
              split_to_bf16(s.data() + (r + i) * CHUNK_KEYS, pb.data() + (r + i) * CHUNK_KEYS,
                            pb_low + (r + i) * CHUNK_KEYS, CHUNK_KEYS);
            for (int c0 = 0; c0 < D; c0 += 64)
              amx_product(pb.data() + r * CHUNK_KEYS, pb_low + r * CHUNK_KEYS, CHUNK_KEYS, vp.data() + c0, D, pv.data() + c0, D,
                          int((needed + 31) / 32 * 32), std::min(4, (D - c0) / 16));
            for (int64_t i = 0; i < block * D; ++i) o[r * D + i] += pv[i];
          }
          continue;
        }
        if (tiles)  // a NaN or infinite value: the chunk's values widened for the exact path
          for (int k = 0; k < keys; ++k)
            for (int d = 0; d < D; ++d) v[k * D + d] = widen(value_rows[k][d]);
#endif
        for (int64_t r = 0; r < rows; r += 4) {  // add_values's blocks of 4 rows, on tiles as well
          const int64_t needed = block_keys(r, 4);
          if (needed > 0) add_values<D>(s.data() + r * CHUNK_KEYS, v.data(), o.data() + r * D, int(needed));
        }
      }
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t t = t0 + r / group, h = kh * group + r % group;
        T* dst = out + (cu_q[b] + t) * o_st + h * o_sh;
        const float inv = bad[r] || run_sum[r] == 0.f ? 0.f : 1.f / run_sum[r];
        for (int d = 0; d < D; ++d) narrow(o[r * D + d] * inv, dst + d);
      }
    }
#if ASCENDTILE_AMX
    if (tiles) _tile_release();
#endif
  }
  return tiles;
}

// Every sequence's query rows inside the query's num_tokens rows: cu_q starts at 0, never decreases
// and ends at num_tokens (no sequences: nothing is read).
static bool rows_in_order(const int32_t* cu_q, int64_t num_seqs, int64_t num_tokens) {
  if (num_seqs == 0) return true;
  if (cu_q[0] != 0 || cu_q[num_seqs] != num_tokens) return false;
  for (int64_t b = 0; b < num_seqs; ++b)
    if (cu_q[b + 1] < cu_q[b]) return false;
  return true;
}

// One variant: elements T, head dim D (build.load_variants). Status 0: done; 1: done on AMX tiles;
// 2: cu_q out of order (nothing read or written).
#define EXPORT(NAME, T, D) \
extern "C" int NAME(void* out, const void* q, const void* kc, const void* vc, const int32_t* bt, \
    const int32_t* cu_q, const int32_t* lens, int64_t num_seqs, int64_t num_tokens, int64_t heads, int64_t kv_heads, \
    int64_t num_blocks, int64_t block_size, int64_t table_cols, int64_t table_stride, int64_t q_st, int64_t q_sh, \
    int64_t o_st, int64_t o_sh, int64_t c_sblk, int64_t c_sslot, int64_t c_sh, float scale, float softcap, \
    int64_t window, int threads) { \
  if (!rows_in_order(cu_q, num_seqs, num_tokens)) return 2; \
  return attend<T, D>((T*)out, (const T*)q, (const T*)kc, (const T*)vc, bt, cu_q, lens, num_seqs, heads, kv_heads, num_blocks, \
               block_size, table_cols, table_stride, q_st, q_sh, o_st, o_sh, c_sblk, c_sslot, c_sh, scale, softcap, \
               window, threads) ? 1 : 0; }
'''
