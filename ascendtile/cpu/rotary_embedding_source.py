"""The C++ source of the CPU rotary embedding (rotary_embedding.py): threads split the tokens; each
token's cos / sin row is widened to fp32 once (negated sin for the inverse), then every head of
query and key rotates its dims [offset, offset + rot_dim) in place, neox halves or GPT-J pairs,
eight lanes at a time where the halves allow (neox, rot_dim / 2 a multiple of 8) and one element at
a time otherwise. Each product is rounded to fp32 before the sum, as the reference's separate
multiplies and add give (a compiler barrier keeps the two from fusing into an FMA), and the result
is rounded once to the tensor's dtype: bit-equal to the reference. A token whose position is
outside [0, rows) is left as it is."""

from ascendtile.cpu.vector_source import PRELUDE

SOURCE = PRELUDE + r'''
typedef uint16_t u16x16 __attribute__((vector_size(32)));

static inline void store8(v8 v, float* p) { std::memcpy(p, &v, 32); }
static inline void store8(v8 v, bf16_t* p) {  // round to nearest even, NaN stays NaN (as narrow())
  u8v u; std::memcpy(&u, &v, 32);
  const u8v rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  const u8v nan = (u & 0x7fffffffu) > 0x7f800000u;
  const u8v bits = nan ? (u >> 16) | 0x40u : rounded;
  u16x16 halves; std::memcpy(&halves, &bits, 32);
  const u16x16 low = __builtin_shuffle(halves, (u16x16){0, 2, 4, 6, 8, 10, 12, 14, 0, 2, 4, 6, 8, 10, 12, 14});
  std::memcpy(p, &low, 16);  // the low halves: each lane's bf16 bits
}
static inline void store8(v8 v, _Float16* p) { const h8 h = __builtin_convertvector(v, h8); std::memcpy(p, &h, 16); }

// An empty asm that takes v in a register and may change it: the compiler cannot fuse the product
// that made v into the add that uses it.
#if defined(__x86_64__) || defined(__i386__)
#define ROUNDED(v) asm("" : "+x"(v))
#elif defined(__aarch64__)
#define ROUNDED(v) asm("" : "+w"(v))
#else
#define ROUNDED(v) do { volatile auto held = v; v = held; } while (0)
#endif

// a * c - b * s and b * c + a * s with each product rounded to fp32 first (no FMA), as the
// reference's separate operations round them
template <typename V>
static inline void rotate_pair(V a, V b, V c, V s, V* o1, V* o2) {
  V ac = a * c, bs = b * s, bc = b * c, as = a * s;
  ROUNDED(ac); ROUNDED(bs); ROUNDED(bc); ROUNDED(as);
  *o1 = ac - bs; *o2 = bc + as;
}

template <typename T>
static void rotate(T* x, int64_t h_stride, int64_t heads, int64_t half, bool neox,
                   const float* c, const float* s) {
  for (int64_t h = 0; h < heads; ++h) {
    T* r = x + h * h_stride;
    if (neox && half % 8 == 0) {
      for (int64_t i = 0; i < half; i += 8) {
        v8 o1, o2;
        rotate_pair(load8(r + i), load8(r + half + i), load8(c + i), load8(s + i), &o1, &o2);
        store8(o1, r + i); store8(o2, r + half + i);
      }
      continue;
    }
    for (int64_t i = 0; i < half; ++i) {
      T* p1 = neox ? r + i : r + 2 * i;
      T* p2 = neox ? r + half + i : r + 2 * i + 1;
      float o1, o2;
      rotate_pair(widen(*p1), widen(*p2), c[i], s[i], &o1, &o2);
      narrow(o1, p1); narrow(o2, p2);
    }
  }
}

template <typename C>
static void cos_sin(const C* row, int64_t half, bool inverse, float* c, float* s) {
  for (int64_t i = 0; i < half; ++i) { c[i] = widen(row[i]); s[i] = inverse ? -widen(row[half + i]) : widen(row[half + i]); }
}

template <typename T>
static int rope(const void* positions, int pos_int32, T* query, int64_t q_st, int64_t q_sh, int64_t q_heads, T* key,
                int64_t k_st, int64_t k_sh, int64_t k_heads, const void* cache, int cache_code, int64_t rows,
                int64_t rot_dim, int neox, int64_t offset, int inverse, int64_t tokens, int threads) {
  const int64_t half = rot_dim / 2;
  #pragma omp parallel num_threads(threads)
  {
    std::vector<float> c(half), s(half);
    #pragma omp for schedule(static)
    for (int64_t t = 0; t < tokens; ++t) {
      const int64_t p = pos_int32 ? ((const int32_t*)positions)[t] : ((const int64_t*)positions)[t];
      if (p < 0 || p >= rows) continue;
      if (cache_code == 0) cos_sin((const float*)cache + p * rot_dim, half, inverse, c.data(), s.data());
      else if (cache_code == 1) cos_sin((const bf16_t*)cache + p * rot_dim, half, inverse, c.data(), s.data());
      else cos_sin((const _Float16*)cache + p * rot_dim, half, inverse, c.data(), s.data());
      rotate(query + t * q_st + offset, q_sh, q_heads, half, neox, c.data(), s.data());
      if (key) rotate(key + t * k_st + offset, k_sh, k_heads, half, neox, c.data(), s.data());
    }
  }
  return 0;
}

// One variant: elements T (build.load_variants).
#define EXPORT(NAME, T) \
extern "C" int NAME(const void* positions, int pos_int32, void* query, int64_t q_st, int64_t q_sh, int64_t q_heads, \
    void* key, int64_t k_st, int64_t k_sh, int64_t k_heads, const void* cache, int cache_code, int64_t rows, \
    int64_t rot_dim, int neox, int64_t offset, int inverse, int64_t tokens, int threads) { \
  return rope<T>(positions, pos_int32, (T*)query, q_st, q_sh, q_heads, (T*)key, k_st, k_sh, k_heads, cache, cache_code, \
                 rows, rot_dim, neox, offset, inverse, tokens, threads); }
'''
