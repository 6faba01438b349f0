"""C++ for AMX tile products in bf16 (Intel Sapphire Rapids and later), which the CPU unified
attention (unified_attention_source.py) runs its scores and values through when its library is
built with build.AMX_FLAGS. It follows vector_source.py's prelude and defines ASCENDTILE_AMX only
when the compiler targets AMX-BF16 and AVX-512 BF16.

Every tile is configured as 16 rows of 64 bytes (amx_configure can make some shorter, as
linear_source.py does for a product's last rows): 16 x 32 bf16 for a left operand, 16 pairs of rows
x 16 columns for a right one (AMX's VNNI layout: each 32-bit element holds the bf16 of two
consecutive rows of the same column), 16 x 16 fp32 for an accumulator. Tiles 0-3 accumulate, 4
and 5 hold left operands, 6 and 7 the right. A thread loads the configuration before its first tile
instruction (it is per thread) and releases the tiles after its last.

Linux lends a process the tile registers only after it asks (arch_prctl ARCH_REQ_XCOMP_PERM for
XFEATURE_XTILEDATA); torch's oneDNN asks when it first multiplies with AMX, but a kernel of ours
may run before it does, so amx_permitted() asks once per library."""

SOURCE = r'''
#if defined(__AMX_BF16__) && defined(__AVX512BF16__)
#define ASCENDTILE_AMX 1
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

static bool amx_permitted() {
  static const bool granted = syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XTILEDATA */) == 0;
  return granted;
}

static const bf16_t ZERO_ROW[256] = {};  // a hidden key's row (head dims up to 256)

struct TileConfig {
  uint8_t palette = 1, start_row = 0, reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

// every tile 16 rows of 64 bytes, except the tiles in the bit mask `short_tiles`, which hold
// `short_rows` rows (a product's last m tile and its accumulators, linear_source.py)
static inline void amx_configure(unsigned short_tiles = 0, int short_rows = 16) {
  TileConfig config;
  for (int t = 0; t < 8; ++t) { config.colsb[t] = 64; config.rows[t] = short_tiles >> t & 1 ? short_rows : 16; }
  _tile_loadconfig(&config);
}

// c[16][0 : 16 * col_tiles) (fp32, row stride c_ld floats) = a[16][K] (bf16, row stride a_ld) .
// b (VNNI pairs of rows: b[K / 2][b_ld] of 32-bit pairs), over K in steps of 32 (K % 32 == 0) and
// up to 4 column tiles of 16; with a_low (same layout as a), a_low . b is added as well.
static inline void amx_product(const bf16_t* a, const bf16_t* a_low, int64_t a_ld, const uint32_t* b, int64_t b_ld,
                               float* c, int64_t c_ld, int K, int col_tiles) {
  _tile_zero(0); _tile_zero(1); _tile_zero(2); _tile_zero(3);
  for (int k0 = 0; k0 < K; k0 += 32) {
    _tile_loadd(4, a + k0, 2 * a_ld);
    if (a_low) _tile_loadd(5, a_low + k0, 2 * a_ld);
    const uint32_t* rows = b + k0 / 2 * b_ld;
    // column tile J of b into tile T (6 and 7 in turn), times a into accumulator J
#define ASCENDTILE_COLUMN(J, T) \
    if (col_tiles > J) { \
      _tile_loadd(T, rows + 16 * J, 4 * b_ld); _tile_dpbf16ps(J, 4, T); \
      if (a_low) _tile_dpbf16ps(J, 5, T); \
    }
    ASCENDTILE_COLUMN(0, 6) ASCENDTILE_COLUMN(1, 7) ASCENDTILE_COLUMN(2, 6) ASCENDTILE_COLUMN(3, 7)
#undef ASCENDTILE_COLUMN
  }
  _tile_stored(0, c, 4 * c_ld);
  if (col_tiles > 1) _tile_stored(1, c + 16, 4 * c_ld);
  if (col_tiles > 2) _tile_stored(2, c + 32, 4 * c_ld);
  if (col_tiles > 3) _tile_stored(3, c + 48, 4 * c_ld);
}

// n fp32 (n % 32 == 0) as the sum of two bf16: high = x rounded to nearest even (as torch's cast),
// low = what is left, rounded the same way; high + low holds x to ~16 bits of its mantissa
static inline void split_to_bf16(const float* x, bf16_t* high, bf16_t* low, int n) {
  for (int i = 0; i < n; i += 32) {
    const __m512 x0 = _mm512_loadu_ps(x + i), x1 = _mm512_loadu_ps(x + i + 16);
    const __m512bh h = _mm512_cvtne2ps_pbh(x1, x0);
    const __m512 h0 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm512_castsi512_si256((__m512i)h)), 16));
    const __m512 h1 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm512_extracti64x4_epi64((__m512i)h, 1)), 16));
    const __m512bh l = _mm512_cvtne2ps_pbh(_mm512_sub_ps(x1, h1), _mm512_sub_ps(x0, h0));
    _mm512_storeu_si512(high + i, (__m512i)h);
    _mm512_storeu_si512(low + i, (__m512i)l);
  }
}
#endif
'''
