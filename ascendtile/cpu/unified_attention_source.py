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
256-bit GCC vector extensions over vector_source.py's prelude."""

from ascendtile.cpu.vector_source import EXP8, PRELUDE

TILE_TOKENS = 32
CHUNK_KEYS = 64

SOURCE = PRELUDE + EXP8 + rf'''
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

template <typename T, int D>
static void attend(T* out, const T* query, const T* key_cache, const T* value_cache, const int32_t* block_table,
                   const int32_t* cu_q, const int32_t* seq_lens, int64_t num_seqs, int64_t heads, int64_t kv_heads,
                   int64_t num_blocks, int64_t block_size, int64_t table_cols, int64_t table_stride, int64_t q_st,
                   int64_t q_sh, int64_t o_st, int64_t o_sh, int64_t c_sblk, int64_t c_sslot, int64_t c_sh,
                   float scale, float softcap, int64_t window, int threads) {
  const int64_t group = heads / kv_heads;
  const int rows_max = int((TILE_TOKENS * group + 3) / 4 * 4);
  const float ninf = -std::numeric_limits<float>::infinity();
  const i8 lane = {0, 1, 2, 3, 4, 5, 6, 7};
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
    #pragma omp for schedule(dynamic, 1)
    for (int64_t item = 0; item < num_items; ++item) {
      const int64_t b = items[3 * item], t0 = items[3 * item + 1], kh = items[3 * item + 2];
      const int64_t q_len = cu_q[b + 1] - cu_q[b];
      const int64_t kv_len = std::min<int64_t>(seq_lens[b], table_cols * block_size);
      const int64_t tokens = std::min<int64_t>(TILE_TOKENS, q_len - t0), rows = tokens * group;
      const int64_t first = seq_lens[b] - q_len + t0, last = first + tokens - 1;  // positions of the tile's tokens
      const int64_t lo = std::max<int64_t>(0, window > 0 ? first - window + 1 : 0);
      const int64_t hi = std::min<int64_t>(kv_len, last + 1);  // keys [lo, hi) may be visible to some row
      // the products run on blocks of 4 rows: rows past `rows` in the last block are zero queries
      // (their accumulators are never written out); the rest of each buffer is set below
      const int64_t padded = (rows + 3) / 4 * 4;
      std::fill(q.begin() + rows * D, q.begin() + padded * D, 0.f);
      std::fill(o.begin(), o.begin() + padded * D, 0.f);
      std::fill(run_max.begin(), run_max.begin() + rows, ninf);
      std::fill(run_sum.begin(), run_sum.begin() + rows, 0.f);
      std::fill(bad.begin(), bad.begin() + rows, 0);
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t t = t0 + r / group, h = kh * group + r % group;
        pos[r] = first + r / group;
        const T* src = query + (cu_q[b] + t) * q_st + h * q_sh;
        for (int d = 0; d < D; ++d) q[r * D + d] = widen(src[d]) * scale;
      }
      const int32_t* ids = block_table + b * table_stride;
      for (int64_t j0 = lo; j0 < hi; j0 += CHUNK_KEYS) {
        const int keys = int(std::min<int64_t>(CHUNK_KEYS, hi - j0));
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
        // a block of 4 rows needs the keys up to its last row's position (a causal tile's diagonal)
        auto block_keys = [&](int64_t r) { return std::min<int64_t>(keys, pos[std::min(r + 3, rows - 1)] + 1 - j0); };
        for (int64_t r = 0; r < rows; r += 4)
          if (block_keys(r) > 0) score_rows<D>(q.data() + r * D, kt.data(), s.data() + r * CHUNK_KEYS, int((block_keys(r) + 15) / 16));
        for (int64_t r = 0; r < rows; ++r) {
          float* sr = s.data() + r * CHUNK_KEYS;
          // the row's visible keys in this chunk: [from, to) less the hidden ones
          const int64_t from = window > 0 ? std::max<int64_t>(0, pos[r] - window + 1 - j0) : 0;
          const int64_t to = std::min<int64_t>(keys, pos[r] + 1 - j0);
          if (bad[r] || to <= from) { std::fill(sr, sr + CHUNK_KEYS, 0.f); continue; }
          if (softcap > 0.f) for (int64_t k = from; k < to; ++k) sr[k] = softcap * std::tanh(sr[k] / softcap);
          v8 top8 = splat(ninf);
          i8 wrong = {};
          for (int k = 0; k < CHUNK_KEYS; k += 8) {
            v8 x; std::memcpy(&x, sr + k, 32);
            i8 seen; std::memcpy(&seen, shown.data() + k, 32);
            seen &= (lane + k >= int32_t(from)) & (lane + k < int32_t(to));
            wrong |= seen & ((x != x) | (x == splat(-ninf)));
            x = seen ? x : splat(ninf);
            top8 = x > top8 ? x : top8;
            std::memcpy(sr + k, &x, 32);
          }
          float top = ninf;
          for (int l = 0; l < 8; ++l) { top = std::max(top, top8[l]); bad[r] |= wrong[l] != 0; }
          if (bad[r] || top == ninf) { std::fill(sr, sr + CHUNK_KEYS, 0.f); continue; }
          const float grown = std::max(run_max[r], top);
          if (grown > run_max[r] && run_sum[r] > 0.f) {  // rescale what the row has summed so far
            const float factor = std::exp(run_max[r] - grown);
            run_sum[r] *= factor;
            for (int d = 0; d < D; ++d) o[r * D + d] *= factor;
          }
          run_max[r] = grown;
          v8 sums = {};
          for (int k = 0; k < CHUNK_KEYS; k += 8) {
            v8 x; std::memcpy(&x, sr + k, 32);
            x = exp8(x - grown); sums += x;
            std::memcpy(sr + k, &x, 32);
          }
          for (int l = 0; l < 8; ++l) run_sum[r] += sums[l];
        }
        for (int64_t r = 0; r < rows; r += 4)
          if (block_keys(r) > 0) add_values<D>(s.data() + r * CHUNK_KEYS, v.data(), o.data() + r * D, int(block_keys(r)));
      }
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t t = t0 + r / group, h = kh * group + r % group;
        T* dst = out + (cu_q[b] + t) * o_st + h * o_sh;
        const float inv = bad[r] || run_sum[r] == 0.f ? 0.f : 1.f / run_sum[r];
        for (int d = 0; d < D; ++d) narrow(o[r * D + d] * inv, dst + d);
      }
    }
  }
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

// One variant: elements T, head dim D (build.load_variants). Status 0: done; 2: cu_q out of order
// (nothing read or written).
#define EXPORT(NAME, T, D) \
extern "C" int NAME(void* out, const void* q, const void* kc, const void* vc, const int32_t* bt, \
    const int32_t* cu_q, const int32_t* lens, int64_t num_seqs, int64_t num_tokens, int64_t heads, int64_t kv_heads, \
    int64_t num_blocks, int64_t block_size, int64_t table_cols, int64_t table_stride, int64_t q_st, int64_t q_sh, \
    int64_t o_st, int64_t o_sh, int64_t c_sblk, int64_t c_sslot, int64_t c_sh, float scale, float softcap, \
    int64_t window, int threads) { \
  if (!rows_in_order(cu_q, num_seqs, num_tokens)) return 2; \
  attend<T, D>((T*)out, (const T*)q, (const T*)kc, (const T*)vc, bt, cu_q, lens, num_seqs, heads, kv_heads, num_blocks, \
               block_size, table_cols, table_stride, q_st, q_sh, o_st, o_sh, c_sblk, c_sslot, c_sh, scale, softcap, \
               window, threads); \
  return 0; }
'''
