"""The C++ source of the CPU linear (linear.py): out [M, N] = x [M, K] · weight [N, K]ᵀ (+ bias [N])
for M of 1 or 2 rows (the few-row kernel), where the product is bound by reading the weight once,
and fp32 M of WIDE_MIN_ROWS to MAX_ROWS (the wide kernel, below; served on x86 CPUs:
linear.wide_rows).

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

fp32 products of WIDE_MIN_ROWS to MAX_ROWS rows run a second kernel: tiles of WIDE_O weight rows,
each multiplied by the x rows in passes of up to WIDE_R rows, the passes of a tile balanced in
size; in a build with AVX-512 (build.avx512_flags) on 512-bit vectors, 6 x 4 (24 accumulators),
else on 256-bit ones, 3 x 4 (12 accumulators, 3 weight vectors and an x vector: AVX2's 16
registers; its loops unrolled by pragma, without which GCC kept them in memory and the products
took ~4x as long). There the product is bound by its arithmetic as much as by its reads, and
oneDNN's 32-row products took about the sum of both times, the reads not overlapping the
arithmetic. So each pass prefetches its share of the next tile's weight rows, spread over its
chunks: the reads run under every pass's arithmetic, not only the first's (SmolLM2's 120 layer
products at 32 fp32 rows, 2 threads, Intel Xeon with AMX: 43.5-54.5 against oneDNN's 51.2-59.1 ms;
prefetching in the first pass only, 59.2-73.7; bench/results/2026-11-29-wide-fp32-linear.md). A
pass sums its accumulators' lanes in registers, every index a constant (write_pass): an array of
them, zeroed and copied, had cost a pass as much as ~40 of its chunks, and a loop over an array of
folded sums had GCC keep AVX-512's 24 accumulators in memory through the chunks (the 120 products
and the head at 32 rows, Intel Xeon with AMX, 2 threads: 82.2 ms, against 43.4 now and oneDNN's
54.2; at 64 rows 168.4, 72.2 and 90.5; bench/results/2026-12-01-avx512-wide-epilogue.md). On 256-bit
vectors (an AVX2 AMD EPYC, 2 threads) it then ran the 120 products and the 49,152 x 576 head at 32
rows in 82.5 / 94.2 ms (best / median of 13 rounds) against oneDNN's 117.4 / 128.5, at 64 rows in
133.9 / 186.7 against 192.5 / 219.4 (11 rounds), and a decode step at batch 32 in 128.5 against
171.1 ms (bench/results/2026-12-01-wide-linear-epilogue.md); before that change it had lost to
oneDNN from 48 rows in one run of two.
At 3 rows the product is bound by its reads, which aten's (MKL's) kernel, where onednn_linear sends
them on an Intel CPU, streamed faster (30.0-33.2 against 33.9-36.8 ms for the 120 products; from 4
rows the kernel was faster), so those stay there.
fp16 keeps oneDNN's dot products past 2 rows, and so does bf16 except on AMX.

In a build with AMX (build.AMX_FLAGS, amx_source.py), bf16 products of 3 to MAX_ROWS rows over the
weight's tiles run the tile kernel (below): the weight bytes are read once, in order, and the
arithmetic is a small part of the time. Over SmolLM2's 120 layer products at 32 rows it took 11.7
against 12.9 ms for Inductor's AMX GEMM template over frozen weights, both on huge pages, and 2.4
against 3.2 ms for the 49,152 x 576 head (2 threads, Intel Xeon with AMX, one process;
bench/results/2026-11-30-amx-tile-linear.md)."""

from ascendtile.cpu.amx_source import SOURCE as AMX
from ascendtile.cpu.vector_source import PRELUDE

FEW_ROWS = 2  # the most rows the few-row kernel takes, in every dtype and build
WIDE_MIN_ROWS, MAX_ROWS = 4, 64  # the rows the wide kernel takes (fp32, x86 builds); dispatch returns 1 for others

_SOURCE = PRELUDE + AMX + r'''
#include <utility>

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

// The wide kernel's vectors and tile: 512-bit in a build with AVX-512 (build.avx512_flags), 6
// weight rows x passes of up to 4 x rows (24 accumulators of AVX-512's 32 registers); else 256-bit,
// 3 x 4, whose 12 accumulators leave AVX2's 16 registers the tile's 3 weight vectors and an x
// vector (on an AVX2 EPYC, 32 rows: 61-64 ms for SmolLM2's 120 products; 4 x 3, 67-70; 2 x 4, 73).
#if defined(__AVX512F__)
typedef v16 wide_v;
constexpr int WIDE_O = 6, WIDE_R = 4;
static inline v8 fold8(const v16& a) {  // the two halves added, as shuffles (a copy through memory kept a there)
  return __builtin_shufflevector(a, a, 0, 1, 2, 3, 4, 5, 6, 7)
       + __builtin_shufflevector(a, a, 8, 9, 10, 11, 12, 13, 14, 15);
}
#else
typedef v8 wide_v;
constexpr int WIDE_O = 3, WIDE_R = 4;
static inline v8 fold8(const v8& a) { return a; }
#endif
constexpr int WIDE_LANES = int(sizeof(wide_v) / sizeof(float));

// Accumulator J folded to 8 lanes, zeros past the A accumulators.
template <int J, int A> static inline v8 folded(const wide_v* acc) {
  if constexpr (J < A) return fold8(acc[J]); else return v8{};
}

// Accumulators [G, G + 8) of a pass over R rows summed by one sum8 tree; their outputs of the first
// `written` weight rows go to out.
template <int R, int G, int... L>
static inline void write_group(float* out, const wide_v* acc, int written, const float* bias, int64_t n0, int64_t o_s,
                               std::integer_sequence<int, L...>) {
  constexpr int A = WIDE_O * R;
  const v8 group[8] = {folded<G + L, A>(acc)...};
  const v8 total = __builtin_shuffle(sum8(group), POS);
#pragma GCC unroll 8
  for (int l = 0; l < 8; ++l) {
    const int i = (G + l) / R, r = (G + l) % R;
    if (G + l < A && i < written) out[r * o_s + n0 + i] = total[l] + (bias ? bias[n0 + i] : 0.f);
  }
}

// The pass's accumulators summed eight at a time, every index a constant: over loops and arrays GCC
// zeroed and copied the sums in memory (AVX2, ~40 chunks' time a pass), or kept AVX-512's
// accumulators there through the chunks (the docstring above).
template <int R, int... G>
static inline void write_pass(float* out, const wide_v* acc, int written, const float* bias, int64_t n0, int64_t o_s,
                              std::integer_sequence<int, G...>) {
  (write_group<R, 8 * G>(out, acc, written, bias, n0, o_s, std::make_integer_sequence<int, 8>{}), ...);
}

// x rows [0, R) (row stride x_s) x the tile's weight rows wr over the whole of k; the first
// `written` outputs of each row go to out. Prefetches ahead_bytes from `ahead`, spread over the chunks.
template <int R>
static void wide_pass(float* out, const float* x, const float* const* wr, int written, const float* bias,
                      int64_t n0, int64_t k, int64_t x_s, int64_t o_s, const char* ahead, int64_t ahead_bytes) {
  wide_v acc[WIDE_O * R] = {};
  const int64_t step = (ahead_bytes / std::max<int64_t>(k / WIDE_LANES, 1) + 63) / 64 * 64;  // k = 0: no chunks
  for (int64_t c = 0, pf = 0; c < k; c += WIDE_LANES, pf += step) {
    prefetch_share(ahead, pf, step, ahead_bytes);
    wide_v wv[WIDE_O];
#pragma GCC unroll 8
    for (int i = 0; i < WIDE_O; ++i) std::memcpy(&wv[i], wr[i] + c, sizeof(wide_v));
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      wide_v xv;
      std::memcpy(&xv, x + r * x_s + c, sizeof(wide_v));
#pragma GCC unroll 8
      for (int i = 0; i < WIDE_O; ++i) acc[i * R + r] += xv * wv[i];
    }
  }
  write_pass<R>(out, acc, written, bias, n0, o_s, std::make_integer_sequence<int, (WIDE_O * R + 7) / 8>{});
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
        default: PASS(WIDE_R); break;
      }
#undef PASS
      r0 = r1;
    }
  }
}

#ifdef ASCENDTILE_AMX
// AMX (a library built with build.AMX_FLAGS): bf16 products of up to MAX_ROWS rows over the weight
// in tile order, tiles[N / 16][K / 32][16][16][2] (model/layers/linear.py PackedWeight.tiles): each
// 16-output block's K / 32 tiles of 1 KiB follow each other, so a thread reads its blocks as one
// stream. x rows are the left operand, loaded in place: rows [16 t, 16 t + 16) are m tile t, the
// last of them holding the rows left (its tile configured that short). Accumulators 0-3 hold
// m tile t times block j: with MT m tiles, a group of WB = 4 / MT blocks (at most 4) goes
// through the whole of K at a time.
//   MT == 1: x in tile 4, the blocks in 6 and 7 in turn, accumulator j;
//   MT == 2: x in tiles 4 and 5, the blocks in 6 and 7, accumulator 2 j + t;
//   MT 3, 4 (WB 1): the block in 6, x tiles in 4 and 5 in turn and the last one in 7, accumulator t.
// Each block prefetches its tiles TILE_AHEAD bytes ahead of its reads, 4 tiles: the stream of a
// thread's blocks outran the hardware prefetcher alone (SmolLM2's 49,152 x 576 head at 32 rows:
// 1.63 against 2.28 ms).
#include <omp.h>
constexpr int64_t TILE_AHEAD = 4096;

// the last m tile's x tile and accumulators (tile_groups' registers) hold last_rows rows
static void tile_configure(int mt, int last_rows) {
  const unsigned short_tiles = mt == 1 ? 0b11111u : mt == 2 ? 0b101010u : (1u << 7 | 1u << (mt - 1));
  amx_configure(short_tiles, last_rows);
}

// accumulator `acc` (m tile t times output block `block`) + bias -> out, the tile's first `rows` rows
static inline void tile_store(int acc, float* c, bf16_t* out, const bf16_t* bias, int t, int rows, int64_t block,
                              int64_t o_s) {
  switch (acc) {
    case 0: _tile_stored(0, c, 64); break;
    case 1: _tile_stored(1, c, 64); break;
    case 2: _tile_stored(2, c, 64); break;
    default: _tile_stored(3, c, 64); break;
  }
  __m512 b = _mm512_setzero_ps();
  if (bias) {  // 16 bf16 widened: each the high half of an fp32
    const __m256i raw = _mm256_loadu_si256((const __m256i*)(bias + 16 * block));
    b = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(raw), 16));
  }
  for (int m = 0; m < rows; ++m) {
    const __m256bh v = _mm512_cvtneps_pbh(_mm512_add_ps(_mm512_load_ps(c + 16 * m), b));
    std::memcpy(out + (16 * t + m) * o_s + 16 * block, &v, 32);
  }
}

// blocks [b0, b0 + WB * groups) in groups of WB
template <int MT, int WB>
static void tile_groups(bf16_t* out, const bf16_t* x, const bf16_t* tiles, const bf16_t* bias, int64_t b0,
                        int64_t groups, int64_t k, int64_t x_s, int64_t o_s, int last_rows) {
  alignas(64) float c[256];
  const int64_t k_tiles = k / 32, block_elems = k_tiles * 512;
  for (int64_t g = 0; g < groups; ++g) {
    const int64_t block = b0 + g * WB;
    const bf16_t* b = tiles + block * block_elems;
    _tile_zero(0); _tile_zero(1); _tile_zero(2); _tile_zero(3);
    for (int64_t kt = 0; kt < k_tiles; ++kt) {
      for (int j = 0; j < WB; ++j) {
        const char* ahead = (const char*)(b + j * block_elems + kt * 512) + TILE_AHEAD;
        for (int line = 0; line < 1024; line += 64) _mm_prefetch(ahead + line, _MM_HINT_T0);
      }
      const bf16_t* a = x + kt * 32;
      const bf16_t* w = b + kt * 512;
      if constexpr (MT == 1) {
        _tile_loadd(4, a, 2 * x_s);
        _tile_loadd(6, w, 64); _tile_dpbf16ps(0, 4, 6);
        if constexpr (WB > 1) { _tile_loadd(7, w + block_elems, 64); _tile_dpbf16ps(1, 4, 7); }
        if constexpr (WB > 2) { _tile_loadd(6, w + 2 * block_elems, 64); _tile_dpbf16ps(2, 4, 6); }
        if constexpr (WB > 3) { _tile_loadd(7, w + 3 * block_elems, 64); _tile_dpbf16ps(3, 4, 7); }
      } else if constexpr (MT == 2) {
        _tile_loadd(4, a, 2 * x_s); _tile_loadd(5, a + 16 * x_s, 2 * x_s);
        _tile_loadd(6, w, 64); _tile_dpbf16ps(0, 4, 6); _tile_dpbf16ps(1, 5, 6);
        if constexpr (WB > 1) { _tile_loadd(7, w + block_elems, 64); _tile_dpbf16ps(2, 4, 7); _tile_dpbf16ps(3, 5, 7); }
      } else {
        _tile_loadd(6, w, 64);
        _tile_loadd(4, a, 2 * x_s); _tile_dpbf16ps(0, 4, 6);
        if constexpr (MT == 3) {
          _tile_loadd(5, a + 16 * x_s, 2 * x_s); _tile_dpbf16ps(1, 5, 6);
          _tile_loadd(7, a + 32 * x_s, 2 * x_s); _tile_dpbf16ps(2, 7, 6);
        } else {
          _tile_loadd(5, a + 16 * x_s, 2 * x_s); _tile_dpbf16ps(1, 5, 6);
          _tile_loadd(4, a + 32 * x_s, 2 * x_s); _tile_dpbf16ps(2, 4, 6);
          _tile_loadd(7, a + 48 * x_s, 2 * x_s); _tile_dpbf16ps(3, 7, 6);
        }
      }
    }
    for (int j = 0; j < WB; ++j)
      for (int t = 0; t < MT; ++t)
        tile_store(MT == 2 ? 2 * j + t : j + t, c, out, bias, t, t == MT - 1 ? last_rows : 16, block + j, o_s);
  }
}

template <int MT>
static void tile_product_rows(bf16_t* out, const bf16_t* x, const bf16_t* tiles, const bf16_t* bias, int64_t n,
                              int64_t k, int64_t x_s, int64_t o_s, int last_rows, int threads) {
  constexpr int WB = 4 / MT;
  const int64_t blocks = n / 16, groups = blocks / WB;
  #pragma omp parallel num_threads(threads)
  {
    const int64_t id = omp_get_thread_num(), count = omp_get_num_threads();
    const int64_t g0 = groups * id / count, g1 = groups * (id + 1) / count;
    const bool tail = id == count - 1 && blocks % WB;  // the last thread takes the blocks past the groups
    if (g1 > g0 || tail) {
      tile_configure(MT, last_rows);
      tile_groups<MT, WB>(out, x, tiles, bias, g0 * WB, g1 - g0, k, x_s, o_s, last_rows);
      if (tail) tile_groups<MT, 1>(out, x, tiles, bias, groups * WB, blocks % WB, k, x_s, o_s, last_rows);
      _tile_release();
    }
  }
}

// 0 where it multiplied; 1 where Linux does not lend this process the tiles
static int tile_product(bf16_t* out, const bf16_t* x, const bf16_t* tiles, const bf16_t* bias, int64_t rows,
                        int64_t n, int64_t k, int64_t x_s, int64_t o_s, int threads) {
  if (!amx_permitted()) return 1;
  const int last_rows = int(rows - (rows - 1) / 16 * 16);
#define ROWS(MT) tile_product_rows<MT>(out, x, tiles, bias, n, k, x_s, o_s, last_rows, threads)
  switch ((rows + 15) / 16) {
    case 1: ROWS(1); break;
    case 2: ROWS(2); break;
    case 3: ROWS(3); break;
    default: ROWS(4); break;
  }
#undef ROWS
  return 0;
}
#endif

template <typename T>
static int dispatch(void* out, const void* x, const void* w, const void* tiles, const void* bias, int64_t rows,
                    int64_t n, int64_t k, int64_t x_s, int64_t w_s, int64_t o_s, int threads) {
  if (k % 16 != 0 || rows > @MAX_ROWS@) return 1;
  if (tiles) {  // the op body sends them only where the library has the tile kernel (dispatch.set_linear_tiled)
#ifdef ASCENDTILE_AMX
    if constexpr (std::is_same<T, bf16_t>::value)
      return rows == 0 || n == 0 ? 0 : tile_product((bf16_t*)out, (const bf16_t*)x, (const bf16_t*)tiles,
                                                     (const bf16_t*)bias, rows, n, k, x_s, o_s, threads);
#endif
    return 1;
  }
  if (rows > @FEW_ROWS@) {  // the op body sends only the wide kernel's products here (dispatch.set_linear_kernels)
    if constexpr (std::is_same<T, float>::value) {
      if (rows < @WIDE_MIN_ROWS@) return 1;
      if (n > 0) wide_product((float*)out, (const float*)x, (const float*)w, (const float*)bias, rows, n, k, x_s, w_s,
                              o_s, threads);
      return 0;
    }
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
extern "C" int NAME(void* out, const void* x, const void* w, const void* tiles, const void* bias, int64_t rows, \
                    int64_t n, int64_t k, int64_t x_s, int64_t w_s, int64_t o_s, int threads) { \
  return dispatch<T>(out, x, w, tiles, bias, rows, n, k, x_s, w_s, o_s, threads); }
'''

SOURCE = (_SOURCE.replace("@FEW_ROWS@", str(FEW_ROWS)).replace("@WIDE_MIN_ROWS@", str(WIDE_MIN_ROWS))
          .replace("@MAX_ROWS@", str(MAX_ROWS)))
