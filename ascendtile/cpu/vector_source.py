"""C++ that the CPU kernels' sources share (decode_attention_source.py, unified_attention_source.py,
linear_source.py, rotary_embedding_source.py), placed before each: 256-bit GCC vector types (and
512-bit ones, v16 and i16, where the compiler targets AVX-512), the element types' widening to
fp32 (one element, or eight into a vector) and rounding back (to nearest even, as torch's casts),
sum8, a shuffle tree that sums eight vectors' lanes at once, and the attention kernels' softmax
rows (row_v: 512-bit where the compiler targets AVX-512, else 256-bit; lanes_max, lanes_sum); EXP8,
the attention kernels' vector exp (any width; exp8 on 256 bits), follows it in theirs."""

PRELUDE = r'''
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

typedef float v8 __attribute__((vector_size(32)));
typedef int32_t i8 __attribute__((vector_size(32)));
typedef uint16_t bf16_t;

static inline float widen(float x) { return x; }
static inline float widen(bf16_t x) { uint32_t u = uint32_t(x) << 16; float f; std::memcpy(&f, &u, 4); return f; }
static inline float widen(_Float16 x) { return float(x); }
static inline void narrow(float v, float* o) { *o = v; }
static inline void narrow(float v, _Float16* o) { *o = _Float16(v); }
static inline void narrow(float v, bf16_t* o) {  // round to nearest even, as torch's cast; NaN stays NaN
  uint32_t u; std::memcpy(&u, &v, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) { *o = bf16_t((u >> 16) | 0x40); return; }
  u += 0x7fffu + ((u >> 16) & 1u); *o = bf16_t(u >> 16);
}

typedef uint16_t u16x8 __attribute__((vector_size(16)));
typedef uint32_t u8v __attribute__((vector_size(32)));
typedef _Float16 h8 __attribute__((vector_size(16)));

// 8 consecutive elements widened to fp32 in one vector
static inline v8 load8(const float* p) { v8 v; std::memcpy(&v, p, 32); return v; }
#if defined(__AVX2__)
#include <immintrin.h>
// one 256-bit zero extension (GCC 12 splits __builtin_convertvector's into two 128-bit halves)
static inline v8 load8(const bf16_t* p) {
  return (v8)_mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i*)p)), 16));
}
#else
static inline v8 load8(const bf16_t* p) {
  u16x8 h; std::memcpy(&h, p, 16);
  const u8v w = __builtin_convertvector(h, u8v) << 16;
  v8 v; std::memcpy(&v, &w, 32); return v;
}
#endif
static inline v8 load8(const _Float16* p) { h8 h; std::memcpy(&h, p, 16); return __builtin_convertvector(h, v8); }

#if defined(__AVX512F__)
// 512-bit vectors, for the kernels built with AVX-512 (build.AVX512_FLAGS; build.AMX_FLAGS include it)
typedef float v16 __attribute__((vector_size(64)));
typedef int32_t i16 __attribute__((vector_size(64)));
// the attention kernels' rows of scores (and the decode kernel's values): the widest vectors the
// library is built for
typedef v16 row_v;
typedef i16 row_i;
#else
typedef v8 row_v;
typedef i8 row_i;
#endif
constexpr int ROW_LANES = int(sizeof(row_v) / 4);

// the lanes' max and sum by halving (a chain of 16 scalar adds took ~10 % of the tiled unified
// attention's time)
static inline float lanes_max(row_v x) {
  for (int w = ROW_LANES / 2; w > 0; w /= 2)
    for (int l = 0; l < w; ++l) x[l] = std::max(x[l], x[l + w]);
  return x[0];
}
static inline float lanes_sum(row_v x) {
  for (int w = ROW_LANES / 2; w > 0; w /= 2)
    for (int l = 0; l < w; ++l) x[l] += x[l + w];
  return x[0];
}

// a broadcast: `(v8){} + x` had cost a scalar add before each (0 + x is not x for x = -0)
static inline v8 splat(float x) { return (v8){x, x, x, x, x, x, x, x}; }

// Eight vectors of partial sums -> one vector of their totals, in the order POS gives (lane l
// holds the total of p[POS[l]]; POS is its own inverse).
static const i8 POS = {0, 4, 2, 6, 1, 5, 3, 7};
static inline v8 sum8(const v8* p) {
  const i8 lo4 = {0, 1, 2, 3, 8, 9, 10, 11}, hi4 = {4, 5, 6, 7, 12, 13, 14, 15};
  const i8 lo2 = {0, 1, 8, 9, 4, 5, 12, 13}, hi2 = {2, 3, 10, 11, 6, 7, 14, 15};
  const i8 lo1 = {0, 8, 2, 10, 4, 12, 6, 14}, hi1 = {1, 9, 3, 11, 5, 13, 7, 15};
  v8 a[4], b[2];
  for (int i = 0; i < 4; ++i) a[i] = __builtin_shuffle(p[2 * i], p[2 * i + 1], lo4) + __builtin_shuffle(p[2 * i], p[2 * i + 1], hi4);
  for (int i = 0; i < 2; ++i) b[i] = __builtin_shuffle(a[2 * i], a[2 * i + 1], lo2) + __builtin_shuffle(a[2 * i], a[2 * i + 1], hi2);
  return __builtin_shuffle(b[0], b[1], lo1) + __builtin_shuffle(b[0], b[1], hi1);
}
'''

EXP8 = r'''
// e^x of each lane of V (a float vector; I: the int32 vector of as many lanes), x <= 0 (scores
// minus their max); below -87.3 (and -inf) gives 0.
template <typename V, typename I>
static inline V exp_lanes(V x) {
  const I zero = x < -87.3f;
  x = x < -87.3f ? V{} - 87.3f : x;
  const V t = x * 1.44269504088896341f + 0.5f;
  I n = __builtin_convertvector(t, I);
  n = __builtin_convertvector(n, V) > t ? n - 1 : n;  // floor
  const V f = __builtin_convertvector(n, V);
  x = x - f * 0.693359375f + f * 2.12194440e-4f;
  V y = V{} + 1.9875691500e-4f;
  y = y * x + 1.3981999507e-3f; y = y * x + 8.3334519073e-3f; y = y * x + 4.1665795894e-2f;
  y = y * x + 1.6666665459e-1f; y = y * x + 5.0000001201e-1f;
  y = y * x * x + x + 1.f;
  const I bits = (n + 127) << 23;
  V two_n; std::memcpy(&two_n, &bits, sizeof(V));
  return zero ? V{} : y * two_n;
}
static inline v8 exp8(v8 x) { return exp_lanes<v8, i8>(x); }
'''
