"""The C++ source of the CPU decode attention (decode_attention.py). One work item is one sequence
with all its KV heads (each block's rows one run of memory), or one KV head of it when there are
fewer than two sequences per thread. Each KV head's G = heads / kv_heads query rows, fp32, are
scored against each visible key row, read in its cache dtype (widened once into a tile unless fp32,
which is read in place): 8 keys at a time, the head dim outer so the 8 sums are independent FMA
chains, summed by one shuffle tree into one vector of 8 scores (no horizontal sum per key); a
max-subtracted softmax with a vector exp (Cephes' polynomial, ~1 ulp); then the value rows are
added into fp32 accumulators held in registers, blocks of up to 3 query rows by 4 vectors, so each
value vector is read once per 3 rows. Against per-key sums into accumulators in memory this halved
the kernel on cached rows (SmolLM2's heads, 1 thread, AVX2 EPYC: 41 -> 20 µs a 200-key sequence,
bench/results/2026-11-29-cpu-decode-attention-registers.md); from DRAM it is bound by the reads.
Keys whose block id is outside [0, num_blocks), beyond the sequence's length or outside the sliding
window are never read, so unused slots may hold anything. A row with no visible key, or with a NaN
or infinite score, is written as zeros, as the traceable form's softmax followed by nan_to_num
gives. GCC vector extensions over vector_source.py's prelude: 256-bit (AVX2 code on x86 with
build.X86_VECTOR_FLAGS, whatever the target has elsewhere); in a library built with AVX-512
(build.avx512_bf16_flags) the softmax and the value pass run on 512-bit vectors, and with AVX-512
BF16 bf16 rows of whole 32-element chunks are scored by dot products of bf16 pairs in place of the
widened tile (`dot_scores`; the entry point returns whether it did, which the op body counts).
SmolLM2's heads, bf16, 32 sequences of 129-192 keys, 2 threads, the old and new kernels in one
process: 372 -> 332 µs a layer with 30 layers' caches read from memory, 225 -> 182 from L2
(bench/results/2026-11-30-cpu-decode-dot-scores.md)."""

from ascendtile.cpu.vector_source import EXP8, PRELUDE

SOURCE = PRELUDE + EXP8 + r'''
// A zero row: the key rows of a last chunk of fewer than 8 keys (their scores are never stored).
alignas(32) static const float ZERO_ROW[256] = {};

// One query row's scores against 8 key rows (fp32, NV vectors each), in key order: the head dim
// outer, so the 8 sums are independent FMA chains, then one shuffle tree.
template <int NV>
static inline v8 score8(const v8* q, const float* const* keys) {
  v8 s[8] = {};
  for (int c = 0; c < NV; ++c)
    for (int k = 0; k < 8; ++k) s[k] += q[c] * load8(keys[k] + c * 8);
  return __builtin_shuffle(sum8(s), POS);
}

#if defined(__AVX512BF16__)
// Whether a variant scores with bf16 dot products (dot_score8): bf16 rows of whole 32-element
// chunks, in a library built with AVX-512 BF16 (build.avx512_bf16_flags).
template <typename T, int NV>
constexpr bool dot_scores = std::is_same<T, bf16_t>::value && NV % 4 == 0;

// One bf16 query row's scores against 8 bf16 key rows, in key order: vdpbf16ps multiplies 32
// elements' pairs exactly and sums them in fp32 (subnormals read as zero), each key's 16 lanes one
// chain; one shuffle tree then sums the 8 keys' lanes into a vector of 8. The rows are read in
// place: no widening into a tile, and a quarter of the 256-bit FMAs.
template <int NV>
static inline v8 dot_score8(const bf16_t* q, const bf16_t* const* keys) {
  v16 s[8];
  for (int k = 0; k < 8; ++k) {
    __m512 a = _mm512_setzero_ps();
    for (int c = 0; c < NV / 4; ++c)
      a = _mm512_dpbf16_ps(a, (__m512bh)_mm512_loadu_si512(q + c * 32), (__m512bh)_mm512_loadu_si512(keys[k] + c * 32));
    s[k] = (v16)a;
  }
  // halving: lanes of 2 keys (8 each), then 4 keys (4 each), then 8 keys (2 each), then 1 each
  const i16 lo8 = {0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23};
  const i16 hi8 = {8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31};
  const i16 lo4 = {0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19, 24, 25, 26, 27};
  const i16 hi4 = {4, 5, 6, 7, 12, 13, 14, 15, 20, 21, 22, 23, 28, 29, 30, 31};
  const i16 lo2 = {0, 1, 4, 5, 8, 9, 12, 13, 16, 17, 20, 21, 24, 25, 28, 29};
  const i16 hi2 = {2, 3, 6, 7, 10, 11, 14, 15, 18, 19, 22, 23, 26, 27, 30, 31};
  const i16 lo1 = {0, 2, 4, 6, 8, 10, 12, 14, 0, 2, 4, 6, 8, 10, 12, 14};
  const i16 hi1 = {1, 3, 5, 7, 9, 11, 13, 15, 1, 3, 5, 7, 9, 11, 13, 15};
  v16 a[4], b[2];
  for (int i = 0; i < 4; ++i)
    a[i] = __builtin_shuffle(s[2 * i], s[2 * i + 1], lo8) + __builtin_shuffle(s[2 * i], s[2 * i + 1], hi8);
  for (int i = 0; i < 2; ++i)
    b[i] = __builtin_shuffle(a[2 * i], a[2 * i + 1], lo4) + __builtin_shuffle(a[2 * i], a[2 * i + 1], hi4);
  const v16 c = __builtin_shuffle(b[0], b[1], lo2) + __builtin_shuffle(b[0], b[1], hi2);
  const v16 d = __builtin_shuffle(c, lo1) + __builtin_shuffle(c, hi1);
  v8 out; std::memcpy(&out, &d, 32); return out;
}
#else
template <typename T, int NV>
constexpr bool dot_scores = false;
#endif

// V-wide vectors of 8 or 16 fp32 lanes: a row's elements widened, and a broadcast
template <typename T> static inline v8 widen_vec(v8, const T* p) { return load8(p); }
static inline v8 splat_vec(v8, float x) { return splat(x); }
#if defined(__AVX512F__)
static inline v16 widen_vec(v16, const float* p) { v16 v; std::memcpy(&v, p, 64); return v; }
static inline v16 widen_vec(v16, const bf16_t* p) {
  return (v16)_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i*)p)), 16);
}
static inline v16 widen_vec(v16, const _Float16* p) {
  return (v16)_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i*)p));
}
static inline v16 splat_vec(v16, float x) { return (v16){x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x}; }
#endif

// acc[r][c] = sum over the visible keys j of p[r][j] * value row j's vectors c0 + c, for R query
// rows and CB V-wide vectors (<= 12 accumulators held in registers): each value row's CB vectors
// read once for the R rows. acc holds 8-lane vectors: a V of 16 lanes fills two.
template <typename V, typename T, int R, int CB>
static void add_values(v8* acc, int64_t nv, const float* p, int64_t p_stride, const T* values, const int32_t* ids,
                       int64_t start, int64_t len, int64_t block_size, int64_t num_blocks, int64_t c_sblk,
                       int64_t c_sslot) {
  constexpr int v_lanes = sizeof(V) / sizeof(float);
  V a[R][CB] = {};
  for (int64_t blk = start / block_size; blk * block_size < len; ++blk) {
    const int64_t id = ids[blk];
    if (id < 0 || id >= num_blocks) continue;
    const int64_t j0 = std::max(blk * block_size, start), j1 = std::min((blk + 1) * block_size, len);
    const T* row = values + id * c_sblk + (j0 - blk * block_size) * c_sslot;
    for (int64_t j = j0; j < j1; ++j, row += c_sslot) {
      V v[CB];
      for (int c = 0; c < CB; ++c) v[c] = widen_vec(V{}, row + c * v_lanes);
      for (int r = 0; r < R; ++r) {
        const V pr = splat_vec(V{}, p[r * p_stride + j - start]);
        for (int c = 0; c < CB; ++c) a[r][c] += pr * v[c];
      }
    }
  }
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < CB; ++c) std::memcpy(acc + r * nv + c * (v_lanes / 8), &a[r][c], sizeof(V));
}

template <typename T, int R>
static void add_values_rows(v8* acc, int64_t nv, const float* p, int64_t p_stride, const T* values,
                            const int32_t* ids, int64_t start, int64_t len, int64_t block_size, int64_t num_blocks,
                            int64_t c_sblk, int64_t c_sslot) {
  // NV is even: blocks of 4 vectors of 8 lanes (2 only when 256-bit rows are widened: 4 spilled
  // there), or of 4, 2 and 1 vectors of 16 lanes
  constexpr bool sixteen = ROW_LANES == 16;
  constexpr int width = sixteen ? 8 : std::is_same<T, float>::value ? 4 : 2;
  int64_t c = 0;
  for (; c + width <= nv; c += width)
    add_values<row_v, T, R, width * 8 / ROW_LANES>(acc + c, nv, p, p_stride, values + c * 8, ids,
        start, len, block_size, num_blocks, c_sblk, c_sslot);
  if (sixteen && c + 4 <= nv) {
    add_values<row_v, T, R, 2>(acc + c, nv, p, p_stride, values + c * 8, ids, start, len, block_size, num_blocks,
                                 c_sblk, c_sslot);
    c += 4;
  }
  if (c < nv)
    add_values<row_v, T, R, sixteen ? 1 : 2>(acc + c, nv, p, p_stride, values + c * 8, ids, start, len, block_size,
                                            num_blocks, c_sblk, c_sslot);
}

// Returns whether the scores were bf16 dot products (dot_scores<T, NV>).
template <typename T, int NV>  // NV: head dim / 8
static int attend(T* out, const T* query, const T* key_cache, const T* value_cache, const int32_t* block_table,
                  const int32_t* seq_lens, int64_t batch, int64_t heads, int64_t kv_heads, int64_t num_blocks,
                  int64_t block_size, int64_t table_cols, int64_t table_stride, int64_t max_len, int64_t q_sb,
                  int64_t q_sh, int64_t o_sb, int64_t o_sh, int64_t c_sblk, int64_t c_sslot, int64_t c_sh, float scale,
                  float softcap, int64_t window, int threads) {
  const int64_t group = heads / kv_heads;
  // a work item: a sequence with all its KV heads (each block's rows are one run of memory), or
  // one KV head of it when there are too few sequences to keep the threads busy
  const int64_t chunks = batch >= 2 * threads ? 1 : kv_heads, per = kv_heads / chunks, rows_of_item = per * group;
  const float ninf = -std::numeric_limits<float>::infinity();
  constexpr bool wide = std::is_same<T, float>::value;
  #pragma omp parallel num_threads(threads)
  {
    std::vector<v8> qv(rows_of_item * NV), acc(rows_of_item * NV);
    std::vector<float> scores;
    alignas(32) float tile[wide ? 1 : 8 * NV * 8];
    const float* keys[8];
    #pragma omp for schedule(static)
    for (int64_t item = 0; item < batch * chunks; ++item) {
      const int64_t b = item / chunks, h0 = item % chunks * per;
      const int64_t len = std::min<int64_t>(std::min<int64_t>(seq_lens[b], max_len), table_cols * block_size);
      const int64_t start = window > 0 ? std::max<int64_t>(0, len - window) : 0;
      const int64_t n = std::max<int64_t>(0, len - start), stride = (n + ROW_LANES - 1) / ROW_LANES * ROW_LANES;
      scores.assign(rows_of_item * stride, ninf);
      if constexpr (!dot_scores<T, NV>)  // dot_score8 reads the bf16 rows themselves
        for (int64_t r = 0; r < rows_of_item; ++r) {
          const T* q = query + b * q_sb + (h0 * group + r) * q_sh;
          for (int c = 0; c < NV; ++c) for (int l = 0; l < 8; ++l) qv[r * NV + c][l] = widen(q[c * 8 + l]) * scale;
        }
      const int32_t* ids = block_table + b * table_stride;
      for (int64_t blk = start / block_size; blk * block_size < len; ++blk) {
        const int64_t id = ids[blk];
        if (id < 0 || id >= num_blocks) continue;
        const int64_t j0 = std::max(blk * block_size, start), j1 = std::min((blk + 1) * block_size, len);
        // each 8-key chunk below asks for the rows this item reads later: the next block's keys of
        // the same slots, and this block's values (the value pass reads them after the softmax, from
        // cache); into L2 (locality 2): ~200 prefetches a block into L1 held its fill buffers and
        // stalled (bf16, 32 sequences of 129-192 keys: 431 -> 354 µs,
        // bench/results/2026-11-28-cpu-prefill-kernels.md), and the same prefetches in one burst at
        // the top of each block, rather than spread over its chunks, left the reads bunched
        // (bf16, 2 threads: 176 -> 159 µs, bench/results/2026-12-01-decode-attention-prefetch.md)
        const int64_t next = blk + 1 < table_cols && (blk + 1) * block_size < len ? ids[blk + 1] : -1;
        for (int64_t j = j0; j < j1; j += 8) {
          const int64_t m = std::min<int64_t>(8, j1 - j), slot = j - blk * block_size;
          for (int64_t kh = h0; kh < h0 + per; ++kh) {
            const T* rows = key_cache + id * c_sblk + kh * c_sh + slot * c_sslot;
            for (int64_t k = 0; k < m; ++k)
              for (int64_t byte = 0; byte < NV * 8 * int64_t(sizeof(T)); byte += 64) {
                if (next >= 0 && next < num_blocks)
                  __builtin_prefetch((const char*)(key_cache + next * c_sblk + kh * c_sh + (slot + k) * c_sslot) + byte, 0, 2);
                __builtin_prefetch((const char*)(value_cache + id * c_sblk + kh * c_sh + (slot + k) * c_sslot) + byte, 0, 2);
              }
#if defined(__AVX512BF16__)
            if constexpr (dot_scores<T, NV>) {
              const bf16_t* rows8[8];
              for (int64_t k = 0; k < 8; ++k) rows8[k] = k < m ? rows + k * c_sslot : (const bf16_t*)ZERO_ROW;
              for (int64_t r = (kh - h0) * group; r < (kh - h0 + 1) * group; ++r) {
                const v8 total = dot_score8<NV>(query + b * q_sb + (h0 * group + r) * q_sh, rows8) * splat(scale);
                float* dst = scores.data() + r * stride + (j - start);
                if (m == 8) std::memcpy(dst, &total, 32);
                else for (int64_t k = 0; k < m; ++k) dst[k] = total[k];
              }
              continue;
            }
#endif
            for (int64_t k = 0; k < 8; ++k) {
              if (k >= m) { keys[k] = ZERO_ROW; continue; }
              if constexpr (wide) { keys[k] = (const float*)(rows + k * c_sslot); continue; }
              for (int c = 0; c < NV; ++c) {
                const v8 x = load8(rows + k * c_sslot + c * 8);
                std::memcpy(tile + (k * NV + c) * 8, &x, 32);
              }
              keys[k] = tile + k * NV * 8;
            }
            for (int64_t r = (kh - h0) * group; r < (kh - h0 + 1) * group; ++r) {
              const v8 total = score8<NV>(qv.data() + r * NV, keys);
              float* dst = scores.data() + r * stride + (j - start);
              if (m == 8) std::memcpy(dst, &total, 32);
              else for (int64_t k = 0; k < m; ++k) dst[k] = total[k];
            }
          }
        }
      }
      for (int64_t r = 0; r < rows_of_item; ++r) {
        float* s = scores.data() + r * stride;
        if (softcap > 0.f) for (int64_t j = 0; j < n; ++j) s[j] = softcap * std::tanh(s[j] / softcap);
        row_v mx = splat_vec(row_v{}, ninf);
        row_i bad = {};
        for (int64_t c = 0; c < stride; c += ROW_LANES) {
          row_v x; std::memcpy(&x, s + c, sizeof x);
          bad |= (x != x) | (x == splat_vec(row_v{}, -ninf));
          mx = x > mx ? x : mx;
        }
        const float top = lanes_max(mx);
        bool skip = false;
        for (int l = 0; l < ROW_LANES; ++l) skip |= bad[l] != 0;
        if (skip || top == ninf) { std::fill(s, s + stride, 0.f); continue; }
        row_v sums = {};
        for (int64_t c = 0; c < stride; c += ROW_LANES) {
          row_v x; std::memcpy(&x, s + c, sizeof x);
          x = exp_lanes<row_v, row_i>(x - top); sums += x;
          std::memcpy(s + c, &x, sizeof x);
        }
        const float inv = 1.f / lanes_sum(sums);
        for (int64_t j = 0; j < n; ++j) s[j] *= inv;
      }
      // the value pass: per KV head, its query rows in register blocks of up to 3 rows x 4 vectors
      for (int64_t kh = h0; kh < h0 + per; ++kh) {
        const T* values = value_cache + kh * c_sh;
        for (int64_t r = (kh - h0) * group; r < (kh - h0 + 1) * group; r += 3) {
          const int64_t rows = std::min<int64_t>(3, (kh - h0 + 1) * group - r);
          v8* a = acc.data() + r * NV;
          const float* p = scores.data() + r * stride;
          if (rows == 3) add_values_rows<T, 3>(a, NV, p, stride, values, ids, start, len, block_size, num_blocks, c_sblk, c_sslot);
          else if (rows == 2) add_values_rows<T, 2>(a, NV, p, stride, values, ids, start, len, block_size, num_blocks, c_sblk, c_sslot);
          else add_values_rows<T, 1>(a, NV, p, stride, values, ids, start, len, block_size, num_blocks, c_sblk, c_sslot);
        }
      }
      for (int64_t r = 0; r < rows_of_item; ++r) {
        T* o = out + b * o_sb + (h0 * group + r) * o_sh;
        for (int c = 0; c < NV; ++c) for (int l = 0; l < 8; ++l) narrow(acc[r * NV + c][l], o + c * 8 + l);
      }
    }
  }
  return dot_scores<T, NV>;
}

// One variant: elements T, head dim D (build.load_variants), D / 8 vectors a row.
#define EXPORT(NAME, T, D) \
extern "C" int NAME(void* out, const void* q, const void* kc, const void* vc, const int32_t* bt, \
    const int32_t* lens, int64_t batch, int64_t heads, int64_t kv_heads, int64_t num_blocks, int64_t block_size, \
    int64_t table_cols, int64_t table_stride, int64_t max_len, int64_t q_sb, int64_t q_sh, int64_t o_sb, int64_t o_sh, \
    int64_t c_sblk, int64_t c_sslot, int64_t c_sh, float scale, float softcap, int64_t window, int threads) { \
  return attend<T, D / 8>((T*)out, (const T*)q, (const T*)kc, (const T*)vc, bt, lens, batch, heads, kv_heads, \
                          num_blocks, block_size, table_cols, table_stride, max_len, q_sb, q_sh, o_sb, o_sh, c_sblk, \
                          c_sslot, c_sh, scale, softcap, window, threads); }
'''
