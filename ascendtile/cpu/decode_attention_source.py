"""The C++ source of the CPU decode attention (decode_attention.py). One work item is one sequence
with all its KV heads (each block's rows one run of memory), or one KV head of it when there are
fewer than two sequences per thread. Each KV head's G = heads / kv_heads query rows, fp32, are
scored against each visible key row, read once in its cache dtype and widened; the G products of
8 keys are summed by a shuffle tree into one vector of 8 scores (no horizontal sum per key); a
max-subtracted softmax with a vector exp (Cephes' polynomial, ~1 ulp); then the value rows, again
read once each, are added into G fp32 accumulators. Keys whose block id is outside [0, num_blocks), beyond the sequence's
length or outside the sliding window are never read, so unused slots may hold anything. A row
with no visible key, or with a NaN or infinite score, is written as zeros, as the traceable form's
softmax followed by nan_to_num gives. 256-bit GCC vector extensions over vector_source.py's
prelude: AVX2 code on x86 with build.X86_VECTOR_FLAGS, whatever the target has elsewhere."""

from ascendtile.cpu.vector_source import EXP8, PRELUDE

SOURCE = PRELUDE + EXP8 + r'''
template <typename T, int NV>  // NV: head dim / 8
static void attend(T* out, const T* query, const T* key_cache, const T* value_cache, const int32_t* block_table,
                   const int32_t* seq_lens, int64_t batch, int64_t heads, int64_t kv_heads, int64_t num_blocks,
                   int64_t block_size, int64_t table_cols, int64_t table_stride, int64_t max_len, int64_t q_sb, int64_t q_sh,
                   int64_t o_sb, int64_t o_sh, int64_t c_sblk, int64_t c_sslot, int64_t c_sh, float scale,
                   float softcap, int64_t window, int threads) {
  const int64_t group = heads / kv_heads;
  // a work item: a sequence with all its KV heads (each block's rows are one run of memory), or
  // one KV head of it when there are too few sequences to keep the threads busy
  const int64_t chunks = batch >= 2 * threads ? 1 : kv_heads, per = kv_heads / chunks, rows_of_item = per * group;
  const float ninf = -std::numeric_limits<float>::infinity();
  #pragma omp parallel num_threads(threads)
  {
    std::vector<v8> qv(rows_of_item * NV), acc(rows_of_item * NV);
    std::vector<float> scores;
    v8 tile[8 * NV], part[8];
    #pragma omp for schedule(static)
    for (int64_t item = 0; item < batch * chunks; ++item) {
      const int64_t b = item / chunks, h0 = item % chunks * per;
      const int64_t len = std::min<int64_t>(std::min<int64_t>(seq_lens[b], max_len), table_cols * block_size);
      const int64_t start = window > 0 ? std::max<int64_t>(0, len - window) : 0;
      const int64_t n = std::max<int64_t>(0, len - start), stride = (n + 7) / 8 * 8;
      scores.assign(rows_of_item * stride, ninf);
      for (int64_t r = 0; r < rows_of_item; ++r) {
        const T* q = query + b * q_sb + (h0 * group + r) * q_sh;
        for (int c = 0; c < NV; ++c) for (int l = 0; l < 8; ++l) qv[r * NV + c][l] = widen(q[c * 8 + l]) * scale;
      }
      const int32_t* ids = block_table + b * table_stride;
      for (int64_t blk = start / block_size; blk * block_size < len; ++blk) {
        const int64_t id = ids[blk];
        if (id < 0 || id >= num_blocks) continue;
        const int64_t j0 = std::max(blk * block_size, start), j1 = std::min((blk + 1) * block_size, len);
        // the rows this item reads next: the next block's keys, and this block's values (the
        // value pass reads them after the softmax, from cache); into L2 (locality 2): ~200 prefetches
        // a block into L1 held its fill buffers and stalled (bf16, 32 sequences of 129-192 keys:
        // 431 -> 354 µs, bench/results/2026-11-28-cpu-prefill-kernels.md)
        const int64_t next = blk + 1 < table_cols && (blk + 1) * block_size < len ? ids[blk + 1] : -1;
        for (int64_t slot = j0 - blk * block_size; slot < j1 - blk * block_size; ++slot) {
          for (int64_t kh = h0; kh < h0 + per; ++kh) {
            for (int64_t byte = 0; byte < NV * 8 * int64_t(sizeof(T)); byte += 64) {
              if (next >= 0 && next < num_blocks)
                __builtin_prefetch((const char*)(key_cache + next * c_sblk + kh * c_sh + slot * c_sslot) + byte, 0, 2);
              __builtin_prefetch((const char*)(value_cache + id * c_sblk + kh * c_sh + slot * c_sslot) + byte, 0, 2);
            }
          }
        }
        for (int64_t j = j0; j < j1; j += 8) {
          const int64_t m = std::min<int64_t>(8, j1 - j), slot = j - blk * block_size;
          for (int64_t kh = h0; kh < h0 + per; ++kh) {
            const T* rows = key_cache + id * c_sblk + kh * c_sh;
            for (int64_t k = 0; k < m; ++k)
              for (int c = 0; c < NV; ++c) for (int l = 0; l < 8; ++l) tile[k * NV + c][l] = widen(rows[(slot + k) * c_sslot + c * 8 + l]);
            for (int64_t r = (kh - h0) * group; r < (kh - h0 + 1) * group; ++r) {
              const v8* qr = qv.data() + r * NV;
              for (int64_t k = 0; k < 8; ++k) {
                v8 s = {};
                if (k < m) for (int c = 0; c < NV; ++c) s += qr[c] * tile[k * NV + c];
                part[k] = s;
              }
              const v8 total = __builtin_shuffle(sum8(part), POS);
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
        v8 mx = splat(ninf);
        i8 bad = {};
        for (int64_t c = 0; c < stride; c += 8) {
          v8 x; std::memcpy(&x, s + c, 32);
          bad |= (x != x) | (x == splat(-ninf));
          mx = x > mx ? x : mx;
        }
        float top = ninf; bool skip = false;
        for (int l = 0; l < 8; ++l) { top = std::max(top, mx[l]); skip |= bad[l] != 0; }
        if (skip || top == ninf) { std::fill(s, s + stride, 0.f); continue; }
        v8 sums = {};
        for (int64_t c = 0; c < stride; c += 8) {
          v8 x; std::memcpy(&x, s + c, 32);
          x = exp8(x - top); sums += x;
          std::memcpy(s + c, &x, 32);
        }
        float total = 0.f;
        for (int l = 0; l < 8; ++l) total += sums[l];
        const float inv = 1.f / total;
        for (int64_t j = 0; j < n; ++j) s[j] *= inv;
      }
      std::fill(acc.begin(), acc.end(), v8{});
      for (int64_t blk = start / block_size; blk * block_size < len; ++blk) {
        const int64_t id = ids[blk];
        if (id < 0 || id >= num_blocks) continue;
        const int64_t j0 = std::max(blk * block_size, start), j1 = std::min((blk + 1) * block_size, len);
        for (int64_t j = j0; j < j1; ++j) {
          for (int64_t kh = h0; kh < h0 + per; ++kh) {
            const T* row = value_cache + id * c_sblk + kh * c_sh + (j - blk * block_size) * c_sslot;
            for (int c = 0; c < NV; ++c) for (int l = 0; l < 8; ++l) tile[c][l] = widen(row[c * 8 + l]);
            for (int64_t r = (kh - h0) * group; r < (kh - h0 + 1) * group; ++r) {
              const float p = scores[r * stride + (j - start)];
              v8* a = acc.data() + r * NV;
              for (int c = 0; c < NV; ++c) a[c] += p * tile[c];
            }
          }
        }
      }
      for (int64_t r = 0; r < rows_of_item; ++r) {
        T* o = out + b * o_sb + (h0 * group + r) * o_sh;
        for (int c = 0; c < NV; ++c) for (int l = 0; l < 8; ++l) narrow(acc[r * NV + c][l], o + c * 8 + l);
      }
    }
  }
}

// One variant: elements T, head dim D (build.load_variants), D / 8 vectors a row.
#define EXPORT(NAME, T, D) \
extern "C" int NAME(void* out, const void* q, const void* kc, const void* vc, const int32_t* bt, \
    const int32_t* lens, int64_t batch, int64_t heads, int64_t kv_heads, int64_t num_blocks, int64_t block_size, \
    int64_t table_cols, int64_t table_stride, int64_t max_len, int64_t q_sb, int64_t q_sh, int64_t o_sb, int64_t o_sh, \
    int64_t c_sblk, int64_t c_sslot, int64_t c_sh, float scale, float softcap, int64_t window, int threads) { \
  attend<T, D / 8>((T*)out, (const T*)q, (const T*)kc, (const T*)vc, bt, lens, batch, heads, kv_heads, num_blocks, \
                   block_size, table_cols, table_stride, max_len, q_sb, q_sh, o_sb, o_sh, c_sblk, c_sslot, c_sh, scale, \
                   softcap, window, threads); \
  return 0; }
'''
