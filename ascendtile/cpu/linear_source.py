"""The C++ source of the CPU linear (linear.py): out [M, N] = x [M, K] · weight [N, K]ᵀ (+ bias [N])
for M of 1 or 2 rows (the few-row kernel), where the product is bound by reading the weight once,
and, in a build with AVX-512, fp32 M of WIDE_MIN_ROWS to MAX_ROWS (the wide kernel, below).

A tile is 8 fp32 accumulators: M rows × 8 / M outputs, so each 16-element chunk of a weight row is
widened once for both rows. The x rows are widened to fp32 once a call, in the order the chunks
are widened in: a bf16 chunk is one 32-byte load split into its even elements (a shift) and its
odd ones (a mask), so x's even and odd elements are laid out apart. The 8 accumulators are summed
by one shuffle tree. Each tile prefetches the next tile's weight rows, a sixteenth of them per
chunk: 8 interleaved rows of ~1 KB are too short a stream for the hardware prefetcher (bf16, 1
row, SmolLM2's 121 linears: 14.8 ms without, 10.2 with; AMD EPYC, 2 threads, 2026-11-28). Threads
split the output tiles. 256-bit GCC vector extensions over vector_source.py's prelude. K must be a
multiple of 16. More rows are compute-bound in 256-bit fp32 FMAs (3 and 4 rows, in tiles of 2 or 4
rows, lost to oneDNN's bf16 dot products in some runs: bench/results/2026-11-28-cpu-few-rows-linear.md).

In a build with AVX-512 (build.avx512_flags), fp32 products of WIDE_MIN_ROWS to MAX_ROWS rows run a
second kernel on 512-bit vectors: tiles of WIDE_O weight rows, each multiplied by the x rows in passes of
up to WIDE_R rows (24 accumulators), the passes of a tile balanced in size. There the product is
bound by its arithmetic as much as by its reads, and oneDNN's 32-row products took about the sum
of both times, the reads not overlapping the arithmetic. So each pass prefetches its share of the
next tile's weight rows, spread over its chunks: the reads run under every pass's arithmetic, not
only the first's (SmolLM2's 120 layer products at 32 fp32 rows, 2 threads, Intel Xeon with AMX:
43.5-54.5 against oneDNN's 51.2-59.1 ms; prefetching in the first pass only, 59.2-73.7;
bench/results/2026-11-29-wide-fp32-linear.md). At 3 rows the product is bound by its reads, which
aten's (MKL's) kernel, where onednn_linear sends them on an Intel CPU, streamed faster (30.0-33.2
against 33.9-36.8 ms for the 120 products; from 4 rows the kernel was faster), so those stay there.
Other dtypes keep oneDNN's dot products past 2 rows (bf16 on an AMX CPU: Inductor's GEMM template
in the decode graph)."""

from ascendtile.cpu.vector_source import PRELUDE

FEW_ROWS = 2  # the most rows the few-row kernel takes, in every dtype and build
WIDE_MIN_ROWS, MAX_ROWS = 4, 64  # the rows the wide kernel takes (fp32, AVX-512 builds); dispatch returns 1 for others

_SOURCE = PRELUDE + r'''

// 16 consecutive weight elements -> two fp32 vectors; bf16: the even elements, then the odd ones
static inline void load16(const float* p, v8& a, v8& b) { std::memcpy(&a, p, 32); std::memcpy(&b, p + 8, 32); }
static inline void load16(const _Float16* p, v8& a, v8& b) {
  h8 lo, hi; std::memcpy(&lo, p, 16); std::memcpy(&hi, p + 8, 16);
  a = __builtin_convertvector(lo, v8); b = __builtin_convertvector(hi, v8);
}
static inline void load16(const bf16_t* p, v8& a, v8& b) {
  i8 w; std::memcpy(&w, p, 32);
  const i8 even = w << 16, odd = w & (i8){} - 65536;
  std::memcpy(&a, &even, 32); std::memcpy(&b, &odd, 32);
}
// an x row in fp32, each 16-element chunk in load16's order
template <typename T> static void widen_row(const T* x, float* o, int64_t k) {
  constexpr bool split = std::is_same<T, bf16_t>::value;
  for (int64_t c = 0; c < k; c += 16)
    for (int l = 0; l < 16; ++l) o[c + (split ? l % 2 * 8 + l / 2 : l)] = widen(x[c + l]);
}

// A tile's O weight rows from row n0 (rows past n: the last row again, its outputs never written)
// and the span of the next tile's rows, which the tile prefetches while it multiplies.
template <typename T, int O>
struct TileRows {
  const T* row[O];
  const char* next;
  int64_t next_bytes;
  TileRows(const T* w, int64_t n0, int64_t n, int64_t w_s) {
    for (int i = 0; i < O; ++i) row[i] = w + std::min(n0 + i, n - 1) * w_s;
    next = (const char*)(w + std::min(n0 + O, n - 1) * w_s);
    next_bytes = (std::min(n0 + 2 * O, n) - std::min(n0 + O, n)) * w_s * int64_t(sizeof(T));
  }
};

// bytes [from, from + count) of span, up to `end`, a cache line at a time
static inline void prefetch_share(const char* span, int64_t from, int64_t count, int64_t end) {
  for (int64_t byte = from; byte < std::min(from + count, end); byte += 64) __builtin_prefetch(span + byte);
}

// R rows (all of them) x outputs [n0, n0 + 8 / R)
template <typename T, int R>
static void tile(T* out, const float* xs, const T* w, const T* bias, int64_t n0, int64_t n, int64_t k,
                 int64_t w_s, int64_t o_s) {
  constexpr int O = 8 / R;
  const TileRows<T, O> rows(w, n0, n, w_s);
  const int64_t step_bytes = O * 16 * int64_t(sizeof(T));
  v8 acc[8] = {};
  for (int64_t c = 0; c < k; c += 16) {
    prefetch_share(rows.next, c / 16 * step_bytes, step_bytes, rows.next_bytes);
    for (int i = 0; i < O; ++i) {
      v8 a, b;
      load16(rows.row[i] + c, a, b);
      for (int r = 0; r < R; ++r) {
        v8 xa, xb;
        std::memcpy(&xa, xs + r * k + c, 32); std::memcpy(&xb, xs + r * k + c + 8, 32);
        acc[i * R + r] += xa * a;
        acc[i * R + r] += xb * b;
      }
    }
  }
  const v8 total = __builtin_shuffle(sum8(acc), POS);
  for (int i = 0; i < O && n0 + i < n; ++i)
    for (int r = 0; r < R; ++r)
      narrow(total[i * R + r] + (bias ? widen(bias[n0 + i]) : 0.f), out + r * o_s + n0 + i);
}

template <typename T, int R>
static void product(T* out, const T* x, const T* w, const T* bias, int64_t n, int64_t k, int64_t x_s,
                    int64_t w_s, int64_t o_s, int threads) {
  constexpr int O = 8 / R;
  std::vector<float> xs(R * k);
  for (int r = 0; r < R; ++r) widen_row(x + r * x_s, xs.data() + r * k, k);
  #pragma omp parallel for schedule(static) num_threads(threads)
  for (int64_t n0 = 0; n0 < n; n0 += O) tile<T, R>(out, xs.data(), w, bias, n0, n, k, w_s, o_s);
}

#if defined(__AVX512F__)
constexpr int WIDE_O = 6, WIDE_R = 4;

// x rows [0, R) (row stride x_s) x the tile's weight rows wr over the whole of k; the first
// `written` outputs of each row go to out. Prefetches ahead_bytes from `ahead`, spread over the chunks.
template <int R>
static void wide_pass(float* out, const float* x, const float* const* wr, int written, const float* bias,
                      int64_t n0, int64_t k, int64_t x_s, int64_t o_s, const char* ahead, int64_t ahead_bytes) {
  v16 acc[WIDE_O * R] = {};
  const int64_t step = (ahead_bytes / std::max<int64_t>(k / 16, 1) + 63) / 64 * 64;  // k = 0: no chunks
  for (int64_t c = 0, pf = 0; c < k; c += 16, pf += step) {
    prefetch_share(ahead, pf, step, ahead_bytes);
    v16 wv[WIDE_O];
    for (int i = 0; i < WIDE_O; ++i) std::memcpy(&wv[i], wr[i] + c, 64);
    for (int r = 0; r < R; ++r) {
      v16 xv;
      std::memcpy(&xv, x + r * x_s + c, 64);
      for (int i = 0; i < WIDE_O; ++i) acc[i * R + r] += xv * wv[i];
    }
  }
  // each accumulator's halves added, then sum8 over eight at a time
  constexpr int H = (WIDE_O * R + 7) / 8 * 8;
  v8 half[H] = {};
  for (int j = 0; j < WIDE_O * R; ++j) {
    v8 lo, hi;
    std::memcpy(&lo, &acc[j], 32); std::memcpy(&hi, (const char*)&acc[j] + 32, 32);
    half[j] = lo + hi;
  }
  for (int g = 0; g < H; g += 8) {
    const v8 total = __builtin_shuffle(sum8(half + g), POS);
    for (int l = 0; l < 8 && g + l < WIDE_O * R; ++l) {
      const int i = (g + l) / R, r = (g + l) % R;
      if (i < written) out[r * o_s + n0 + i] = total[l] + (bias ? bias[n0 + i] : 0.f);
    }
  }
}

// Threads split the tiles (TileRows: a tile's rows past n are not written).
static void wide_product(float* out, const float* x, const float* w, const float* bias, int64_t rows, int64_t n,
                         int64_t k, int64_t x_s, int64_t w_s, int64_t o_s, int threads) {
  const int64_t passes = (rows + WIDE_R - 1) / WIDE_R;
  #pragma omp parallel for schedule(static) num_threads(threads)
  for (int64_t n0 = 0; n0 < n; n0 += WIDE_O) {
    const TileRows<float, WIDE_O> weights(w, n0, n, w_s);
    const int written = int(std::min<int64_t>(WIDE_O, n - n0));
    for (int64_t p = 0, r0 = 0; p < passes; ++p) {  // each pass prefetches its share of the next tile
      const int64_t r1 = rows * (p + 1) / passes;
      const int64_t pf0 = weights.next_bytes * p / passes / 64 * 64;
      const int64_t pf1 = p + 1 == passes ? weights.next_bytes : weights.next_bytes * (p + 1) / passes / 64 * 64;
#define PASS(R) wide_pass<R>(out + r0 * o_s, x + r0 * x_s, weights.row, written, bias, n0, k, x_s, o_s, weights.next + pf0, \
                             pf1 - pf0)
      switch (r1 - r0) {
        case 1: PASS(1); break;
        case 2: PASS(2); break;
        case 3: PASS(3); break;
        default: PASS(4); break;
      }
#undef PASS
      r0 = r1;
    }
  }
}
#endif

template <typename T>
static int dispatch(void* out, const void* x, const void* w, const void* bias, int64_t rows, int64_t n, int64_t k,
                    int64_t x_s, int64_t w_s, int64_t o_s, int threads) {
  if (k % 16 != 0 || rows > @MAX_ROWS@) return 1;
  if (rows > @FEW_ROWS@) {  // the op body sends only the wide kernel's products here (dispatch.set_linear_wide)
#if defined(__AVX512F__)
    if constexpr (std::is_same<T, float>::value) {
      if (rows < @WIDE_MIN_ROWS@) return 1;
      if (n > 0) wide_product((float*)out, (const float*)x, (const float*)w, (const float*)bias, rows, n, k, x_s, w_s,
                              o_s, threads);
      return 0;
    }
#endif
    return 1;
  }
  if (rows == 0 || n == 0) return 0;
#define PRODUCT(R) product<T, R>((T*)out, (const T*)x, (const T*)w, (const T*)bias, n, k, x_s, w_s, o_s, threads)
  if (rows == 1) PRODUCT(1); else PRODUCT(2);
#undef PRODUCT
  return 0;
}

// One variant: elements T (build.load_variants).
#define EXPORT(NAME, T) \
extern "C" int NAME(void* out, const void* x, const void* w, const void* bias, int64_t rows, int64_t n, int64_t k, \
                    int64_t x_s, int64_t w_s, int64_t o_s, int threads) { \
  return dispatch<T>(out, x, w, bias, rows, n, k, x_s, w_s, o_s, threads); }
'''

SOURCE = (_SOURCE.replace("@FEW_ROWS@", str(FEW_ROWS)).replace("@WIDE_MIN_ROWS@", str(WIDE_MIN_ROWS))
          .replace("@MAX_ROWS@", str(MAX_ROWS)))
