"""The C++ source of the CPU kernels' op bodies (dispatch.py): `cpu_decode_attention`,
`cpu_unified_attention`, `cpu_linear` and `cpu_rotary_embedding` check their operands, pick the
kernel variant for them from a table that dispatch.register fills, and call it, all inside torch's
dispatcher; `cpu_reshape_and_cache_flash` checks its operands and copies the rows itself. A failed
check names the argument in torch's dtype and shape spelling, as ValueError, or as RuntimeError
for a variant not loaded. `@HEAD_DIMS@`, `@DTYPES@` and the `@LINEAR_…@` row
bounds are filled in from paged_operands.HEAD_DIMS, build.DTYPES and linear_source's bounds; the kernel
tables are indexed in build.DTYPES' order, which `ascendtile_dtype_index` gives Python by name
(a rope cache's dtype code is that index too)."""

SOURCE = r'''
#include <algorithm>
#include <atomic>
#include <cstring>
#include <optional>
#include <sstream>
#include <string>
#include <tuple>
#include <utility>

#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/linear.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

namespace {

constexpr at::ScalarType DTYPES[] = {at::kFloat, at::kBFloat16, at::kHalf};  // build.DTYPES' order
constexpr int64_t HEAD_DIMS[] = {@HEAD_DIMS@};
constexpr int64_t MAX_HEAD_DIM = std::ranges::max(HEAD_DIMS);  // the attention tables' last index

using DecodeFn = int (*)(void*, const void*, const void*, const void*, const void*, const void*, int64_t, int64_t,
                         int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t,
                         int64_t, int64_t, int64_t, float, float, int64_t, int);
using UnifiedFn = int (*)(void*, const void*, const void*, const void*, const void*, const void*, const void*, int64_t,
                          int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t,
                          int64_t, int64_t, int64_t, int64_t, float, float, int64_t, int);
using LinearFn = int (*)(void*, const void*, const void*, const void*, const void*, int64_t, int64_t, int64_t, int64_t,
                         int64_t, int64_t, int);
using RopeFn = int (*)(const void*, int, void*, int64_t, int64_t, int64_t, void*, int64_t, int64_t, int64_t, const void*,
                       int, int64_t, int64_t, int, int64_t, int, int64_t, int);

std::atomic<DecodeFn> decode_kernels[3][MAX_HEAD_DIM + 1];
std::atomic<UnifiedFn> unified_kernels[3][MAX_HEAD_DIM + 1];
std::atomic<LinearFn> linear_kernels[3];
std::atomic<RopeFn> rope_kernels[3];
std::atomic<int64_t> decode_calls{0}, decode_dot_calls{0}, unified_calls{0}, unified_tiled_calls{0}, linear_calls{0},
    linear_tiled_calls{0}, rope_calls{0}, kv_write_calls{0};
std::atomic<int64_t> linear_max_rows{@LINEAR_MAX_ROWS@};  // more rows: oneDNN or aten
std::atomic<int64_t> linear_wide_rows{0};  // the most rows the loaded wide kernel takes (fp32, x86 builds; 0: none)
std::atomic<bool> linear_tiled{false};  // and the tile one (bf16 over a weight's tiles, AMX builds)

int dtype_index(at::ScalarType t) {
  for (int i = 0; i < 3; ++i) if (DTYPES[i] == t) return i;
  return -1;
}

// torch's Python spelling, as the errors of the Python checks gave it
std::string dtype_name(at::ScalarType t) {
  switch (t) {
    case at::kFloat: return "torch.float32";
    case at::kDouble: return "torch.float64";
    case at::kHalf: return "torch.float16";
    case at::kBFloat16: return "torch.bfloat16";
    case at::kInt: return "torch.int32";
    case at::kLong: return "torch.int64";
    default: return std::string("torch.") + c10::toString(t);
  }
}

std::string tuple(at::IntArrayRef sizes) {
  std::ostringstream s;
  s << "(";
  for (size_t i = 0; i < sizes.size(); ++i) s << (i ? ", " : "") << sizes[i];
  s << (sizes.size() == 1 ? ",)" : ")");
  return s.str();
}

bool served_head_dim(int64_t d) {
  for (int64_t h : HEAD_DIMS) if (h == d) return true;
  return false;
}

bool attention_served(const at::Tensor& query, const at::Tensor& key_cache) {
  return query.is_cpu() && dtype_index(query.scalar_type()) >= 0 && key_cache.scalar_type() == query.scalar_type()
      && query.dim() == 3 && served_head_dim(query.size(2)) && key_cache.dim() == 4
      && key_cache.size(3) == query.size(2) && query.size(1) % key_cache.size(2) == 0;
}

// What both attention ops take alike: query rows [N, H, D] over paged caches [num_blocks, block_size,
// KVH, D] of one float dtype, a head dim with a loaded kernel (in `table`); the entry point.
template <typename Fn>
Fn check_paged(const char* op, const char* module, std::atomic<Fn> (&table)[3][MAX_HEAD_DIM + 1], const at::Tensor& out,
               const at::Tensor& query, const at::Tensor& key_cache, const at::Tensor& value_cache) {
  const auto dtype = query.scalar_type();
  TORCH_CHECK_VALUE(attention_served(query, key_cache), "query / key_cache: no kernel for ", dtype_name(dtype), " ",
                    tuple(query.sizes()), " over ", dtype_name(key_cache.scalar_type()), " ",
                    tuple(key_cache.sizes()), " (head dims (@HEAD_DIMS@))");
  const Fn kernel = table[dtype_index(dtype)][query.size(2)].load();
  TORCH_CHECK(kernel, op, ": the kernel is not loaded for ", dtype_name(dtype), " and head dim ", query.size(2),
              " (ascendtile.cpu.", module, ".load)");
  TORCH_CHECK_VALUE(out.scalar_type() == dtype, "out: dtype ", dtype_name(out.scalar_type()), ", expected the query's ",
                    dtype_name(dtype));
  TORCH_CHECK_VALUE(value_cache.scalar_type() == dtype, "value_cache: dtype ", dtype_name(value_cache.scalar_type()),
                    ", expected the query's ", dtype_name(dtype));
  TORCH_CHECK_VALUE(out.sizes() == query.sizes() && value_cache.sizes() == key_cache.sizes()
                    && value_cache.strides() == key_cache.strides(),
                    "out / value_cache: shapes (and the caches' strides) must match query's and key_cache's");
  TORCH_CHECK_VALUE(out.stride(2) == 1, "out: the last dim must be contiguous");
  TORCH_CHECK_VALUE(query.stride(2) == 1, "query: the last dim must be contiguous");
  TORCH_CHECK_VALUE(key_cache.stride(3) == 1, "key_cache: the last dim must be contiguous");
  return kernel;
}

void cpu_decode_attention(const at::Tensor& out, const at::Tensor& query, const at::Tensor& key_cache,
                          const at::Tensor& value_cache, const at::Tensor& block_table, const at::Tensor& seqused_k,
                          int64_t max_seqlen_k, double scale, double softcap, int64_t sliding_window) {
  const DecodeFn kernel = check_paged("cpu_decode_attention", "decode_attention", decode_kernels, out, query, key_cache,
                                      value_cache);
  const int64_t batch = query.size(0);
  TORCH_CHECK_VALUE(block_table.scalar_type() == at::kInt && block_table.dim() == 2 && block_table.size(0) == batch,
                    "block_table: int32 with one row per query row, got ", dtype_name(block_table.scalar_type()), " ",
                    tuple(block_table.sizes()));
  TORCH_CHECK_VALUE(block_table.stride(1) == 1, "block_table: the last dim must be contiguous");
  TORCH_CHECK_VALUE(seqused_k.scalar_type() == at::kInt && seqused_k.dim() == 1 && seqused_k.size(0) == batch,
                    "seqused_k: int32 with one row per query row, got ", dtype_name(seqused_k.scalar_type()), " ",
                    tuple(seqused_k.sizes()));
  TORCH_CHECK_VALUE(seqused_k.is_contiguous(), "seqused_k: must be contiguous");
  const int64_t block_size = key_cache.size(1);
  const int dot = kernel(out.data_ptr(), query.data_ptr(), key_cache.data_ptr(), value_cache.data_ptr(),
                         block_table.data_ptr(), seqused_k.data_ptr(), batch, query.size(1), key_cache.size(2),
                         key_cache.size(0), block_size, block_table.size(1), block_table.stride(0),
                         (max_seqlen_k + block_size - 1) / block_size * block_size, query.stride(0), query.stride(1),
                         out.stride(0), out.stride(1), key_cache.stride(0), key_cache.stride(1), key_cache.stride(2),
                         float(scale), float(softcap), sliding_window, at::get_num_threads());
  decode_calls++;
  decode_dot_calls += dot;  // the kernel scored with bf16 dot products
}

void cpu_unified_attention(const at::Tensor& out, const at::Tensor& query, const at::Tensor& key_cache,
                           const at::Tensor& value_cache, const at::Tensor& block_table, const at::Tensor& cu_seqlens_q,
                           const at::Tensor& seqused_k, double scale, double softcap, int64_t sliding_window) {
  const UnifiedFn kernel = check_paged("cpu_unified_attention", "unified_attention", unified_kernels, out, query,
                                       key_cache, value_cache);
  const int64_t num_seqs = seqused_k.dim() == 1 ? seqused_k.size(0) : -1;
  const std::pair<const char*, const at::Tensor*> rows[] = {
      {"block_table", &block_table}, {"seqused_k", &seqused_k}, {"cu_seqlens_q", &cu_seqlens_q}};
  for (const auto& [name, t] : rows) {
    const bool cu = std::strcmp(name, "cu_seqlens_q") == 0, table = std::strcmp(name, "block_table") == 0;
    TORCH_CHECK_VALUE(t->scalar_type() == at::kInt && t->dim() == 1 + table && t->size(0) == num_seqs + cu, name,
                      ": int32, ", num_seqs + cu, " rows for ", num_seqs, " sequences, got ",
                      dtype_name(t->scalar_type()), " ", tuple(t->sizes()));
  }
  TORCH_CHECK_VALUE(block_table.stride(1) == 1, "block_table: the last dim must be contiguous");
  TORCH_CHECK_VALUE(cu_seqlens_q.is_contiguous(), "cu_seqlens_q: must be contiguous");
  TORCH_CHECK_VALUE(seqused_k.is_contiguous(), "seqused_k: must be contiguous");
  const int status = kernel(
      out.data_ptr(), query.data_ptr(), key_cache.data_ptr(), value_cache.data_ptr(), block_table.data_ptr(),
      cu_seqlens_q.data_ptr(), seqused_k.data_ptr(), num_seqs, query.size(0), query.size(1), key_cache.size(2),
      key_cache.size(0), key_cache.size(1), block_table.size(1), block_table.stride(0), query.stride(0),
      query.stride(1), out.stride(0), out.stride(1), key_cache.stride(0), key_cache.stride(1), key_cache.stride(2),
      float(scale), float(softcap), sliding_window, at::get_num_threads());
  if (status == 2) {  // the kernel read cu_seqlens_q's values out of order (no host read here before)
    std::ostringstream values;
    const int32_t* cu = cu_seqlens_q.data_ptr<int32_t>();
    for (int64_t i = 0; i <= num_seqs; ++i) values << (i ? ", " : "[") << cu[i];
    TORCH_CHECK_VALUE(false, "cu_seqlens_q: must start at 0, never decrease and end at query's ", query.size(0),
                      " rows, got ", values.str(), "]");
  }
  unified_calls++;
  unified_tiled_calls += status == 1;  // the kernel multiplied on AMX tiles
}

// linear.supports
bool linear_served(const at::Tensor& weight) {
  return weight.is_cpu() && dtype_index(weight.scalar_type()) >= 0 && weight.dim() == 2 && weight.size(1) % 16 == 0
      && weight.stride(1) == 1;
}

// where the traced call would have gone: onednn_linear's own choice between the packed copy and aten
// (model/layers/linear.py), else aten
at::Tensor linear_elsewhere(const at::Tensor& x, const at::Tensor& weight, const std::optional<at::Tensor>& packed,
                            const std::optional<at::Tensor>& bias) {
  if (packed) {
    static const auto onednn_linear = c10::Dispatcher::singleton()
        .findSchemaOrThrow("ascendtile::onednn_linear", "")
        .typed<at::Tensor(const at::Tensor&, const at::Tensor&, const at::Tensor&, const std::optional<at::Tensor>&)>();
    return onednn_linear.call(x, weight, *packed, bias);
  }
  return at::linear(x, weight, bias);
}

// tiles: weight [N, K] in tile order, [N / 16, K / 32, 16, 16, 2] contiguous (linear_source.py)
void check_tiles(const at::Tensor& tiles, const at::Tensor& weight) {
  const int64_t n = weight.size(0), k = weight.size(1);
  TORCH_CHECK_VALUE(weight.scalar_type() == at::kBFloat16 && n % 16 == 0 && k % 32 == 0,
                    "tiles: only for a bf16 weight of whole 16 x 32 tiles, got weight ",
                    dtype_name(weight.scalar_type()), " ", tuple(weight.sizes()));
  TORCH_CHECK_VALUE(tiles.scalar_type() == at::kBFloat16 && tiles.is_contiguous()
                    && tiles.sizes().equals({n / 16, k / 32, 16, 16, 2}),
                    "tiles: expected a contiguous torch.bfloat16 (", n / 16, ", ", k / 32, ", 16, 16, 2) for weight ",
                    tuple(weight.sizes()), ", got ", dtype_name(tiles.scalar_type()), " ", tuple(tiles.sizes()),
                    " with strides ", tuple(tiles.strides()));
}

at::Tensor cpu_linear(const at::Tensor& x, const at::Tensor& weight, const std::optional<at::Tensor>& packed,
                      const std::optional<at::Tensor>& bias, const std::optional<at::Tensor>& tiles) {
  int64_t rows = 1;
  for (int64_t i = 0; i + 1 < x.dim(); ++i) rows *= x.size(i);
  if (tiles) check_tiles(*tiles, weight);
  // the rows the kernels take (linear_source.py); others go where the traced call would have gone
  const int64_t bound = linear_max_rows.load();
  const bool wide = x.scalar_type() == at::kFloat && rows >= @LINEAR_WIDE_MIN_ROWS@ && rows <= linear_wide_rows.load();
  const bool tiled = tiles && linear_tiled.load() && rows > @LINEAR_FEW_ROWS@;
  if (x.dim() == 0 || rows > bound || (rows > @LINEAR_FEW_ROWS@ && !wide && !tiled))
    return linear_elsewhere(x, weight, packed, bias);
  const auto dtype = weight.scalar_type();
  TORCH_CHECK_VALUE(linear_served(weight), "weight: no kernel for ", dtype_name(dtype), " ", tuple(weight.sizes()),
                    " with strides ", tuple(weight.strides()),
                    " (2-D, rows contiguous, the input dim a multiple of 16; dtypes (@DTYPES@))");
  const LinearFn kernel = linear_kernels[dtype_index(dtype)].load();
  TORCH_CHECK(kernel, "cpu_linear: the kernel is not loaded for ", dtype_name(dtype), " (ascendtile.cpu.linear.load)");
  const int64_t n = weight.size(0), k = weight.size(1);
  TORCH_CHECK_VALUE(x.scalar_type() == dtype && x.size(-1) == k, "x: ", dtype_name(x.scalar_type()), " ",
                    tuple(x.sizes()), " does not fit weight ", dtype_name(dtype), " ", tuple(weight.sizes()));
  TORCH_CHECK_VALUE(!bias || (bias->scalar_type() == dtype && bias->dim() == 1 && bias->size(0) == n
                              && bias->is_contiguous()),
                    "bias: expected ", dtype_name(dtype), " (", n, ",), got ",
                    dtype_name(bias->scalar_type()), " ", tuple(bias->sizes()));
  at::Tensor flat = x.dim() == 2 ? x : x.reshape({rows, k});
  if (flat.stride(1) != 1) flat = flat.contiguous();
  at::Tensor out = at::empty({rows, n}, x.options());
  const int status = kernel(out.data_ptr(), flat.data_ptr(), weight.data_ptr(), tiled ? tiles->data_ptr() : nullptr,
                            bias ? bias->data_ptr() : nullptr, rows, n, k, flat.stride(0), weight.stride(0),
                            out.stride(0), at::get_num_threads());
  // the tile kernel declines (1) where Linux does not lend the process AMX's tiles
  if (tiled && status == 1) return linear_elsewhere(x, weight, packed, bias);
  TORCH_INTERNAL_ASSERT(status == 0, "cpu_linear: no kernel for ", rows, " rows of ", k);  // ruled out above
  linear_calls++;
  linear_tiled_calls += tiled;
  if (x.dim() == 2) return out;
  std::vector<int64_t> shape(x.sizes().begin(), x.sizes().end() - 1);
  shape.push_back(n);
  return out.view(shape);
}

// query / key [T, H, D] or [T, H * D] as (heads, token stride, head stride), checked
std::tuple<int64_t, int64_t, int64_t> rope_heads(const char* name, const at::Tensor& x, int64_t head_size,
                                                 int64_t tokens) {
  const bool flat = x.dim() == 2 && head_size > 0 && x.size(1) % head_size == 0;
  const bool fits = flat ? x.size(0) == tokens && x.stride(1) == 1
                         : x.dim() == 3 && x.size(0) == tokens && x.size(2) == head_size && x.stride(2) == 1;
  TORCH_CHECK_VALUE(fits, name, ": expected [", tokens, ", H, ", head_size, "] or [", tokens, ", H * ", head_size,
                    "] with its last dim contiguous, got ", tuple(x.sizes()), " (strides ", tuple(x.strides()), ")");
  return flat ? std::make_tuple(x.size(1) / head_size, x.stride(0), head_size)
              : std::make_tuple(x.size(1), x.stride(0), x.stride(1));
}

void cpu_rotary_embedding(const at::Tensor& positions, const at::Tensor& query, const std::optional<at::Tensor>& key,
                          int64_t head_size, const at::Tensor& cos_sin_cache, bool is_neox, int64_t rope_dim_offset,
                          bool inverse) {
  TORCH_CHECK_VALUE((positions.scalar_type() == at::kInt || positions.scalar_type() == at::kLong)
                    && positions.dim() == 1 && positions.is_contiguous(),
                    "positions: contiguous int32 / int64 [T], got ", dtype_name(positions.scalar_type()), " ",
                    tuple(positions.sizes()));
  const int64_t tokens = positions.size(0);
  const auto [q_heads, q_st, q_sh] = rope_heads("query", query, head_size, tokens);
  int64_t k_heads = 0, k_st = 0, k_sh = 0;
  if (key) std::tie(k_heads, k_st, k_sh) = rope_heads("key", *key, head_size, tokens);
  const auto dtype = query.scalar_type();
  TORCH_CHECK_VALUE(dtype_index(dtype) >= 0 && (!key || key->scalar_type() == dtype),
                    "query / key: fp32, bf16 or fp16 alike, got ", dtype_name(dtype), " and ",
                    key ? dtype_name(key->scalar_type()) : std::string("None"));
  const RopeFn kernel = rope_kernels[dtype_index(dtype)].load();
  TORCH_CHECK(kernel, "cpu_rotary_embedding: the kernel is not loaded for ", dtype_name(dtype),
              " (ascendtile.cpu.rotary_embedding.load)");
  const int64_t rot_dim = cos_sin_cache.dim() == 2 ? cos_sin_cache.size(1) : 0;
  TORCH_CHECK_VALUE(dtype_index(cos_sin_cache.scalar_type()) >= 0 && cos_sin_cache.is_contiguous() && rot_dim % 2 == 0
                    && rope_dim_offset >= 0 && 0 < rot_dim && rot_dim <= head_size - rope_dim_offset,
                    "cos_sin_cache: contiguous [rows, rot_dim] (rot_dim even, rope_dim_offset + rot_dim <= head_size ",
                    head_size, "), got ", dtype_name(cos_sin_cache.scalar_type()), " ", tuple(cos_sin_cache.sizes()),
                    " with rope_dim_offset ", rope_dim_offset);
  kernel(positions.data_ptr(), positions.scalar_type() == at::kInt, query.data_ptr(), q_st, q_sh, q_heads,
         key ? key->data_ptr() : nullptr, k_st, k_sh, k_heads, cos_sin_cache.data_ptr(),
         dtype_index(cos_sin_cache.scalar_type()), cos_sin_cache.size(0), rot_dim, is_neox, rope_dim_offset, inverse,
         tokens, at::get_num_threads());
  rope_calls++;
}

// The rows of tokens [0, slots) of key / value [T, KVH, D] into their slots of the caches
// [num_blocks, block_size, KVH, D]; slots outside the caches are skipped (reference: kv_cache.py).
void cpu_reshape_and_cache_flash(const at::Tensor& key, const at::Tensor& value, const at::Tensor& key_cache,
                                 const at::Tensor& value_cache, const at::Tensor& slot_mapping) {
  const auto dtype = key.scalar_type();
  TORCH_CHECK_VALUE(key.is_cpu() && dtype_index(dtype) >= 0 && key.dim() == 3 && key.stride(2) == 1,
                    "key: fp32, bf16 or fp16 [T, KVH, D] on the CPU with its last dim contiguous, got ",
                    dtype_name(dtype), " ", tuple(key.sizes()), " (strides ", tuple(key.strides()), ")");
  TORCH_CHECK_VALUE(value.scalar_type() == dtype && value.sizes() == key.sizes() && value.stride(2) == 1,
                    "value: expected key's ", dtype_name(dtype), " ", tuple(key.sizes()),
                    " with its last dim contiguous, got ", dtype_name(value.scalar_type()), " ", tuple(value.sizes()));
  TORCH_CHECK_VALUE(key_cache.scalar_type() == dtype && key_cache.dim() == 4 && key_cache.size(2) == key.size(1)
                    && key_cache.size(3) == key.size(2) && key_cache.stride(3) == 1,
                    "key_cache: expected ", dtype_name(dtype), " [num_blocks, block_size, ", key.size(1), ", ",
                    key.size(2), "] with its last dim contiguous, got ", dtype_name(key_cache.scalar_type()), " ",
                    tuple(key_cache.sizes()));
  TORCH_CHECK_VALUE(value_cache.scalar_type() == dtype && value_cache.sizes() == key_cache.sizes()
                    && value_cache.stride(3) == 1,
                    "value_cache: expected key_cache's ", dtype_name(dtype), " ", tuple(key_cache.sizes()),
                    " with its last dim contiguous, got ", dtype_name(value_cache.scalar_type()), " ",
                    tuple(value_cache.sizes()));
  const bool int32 = slot_mapping.scalar_type() == at::kInt;
  TORCH_CHECK_VALUE((int32 || slot_mapping.scalar_type() == at::kLong) && slot_mapping.dim() == 1
                    && slot_mapping.is_contiguous() && slot_mapping.size(0) <= key.size(0),
                    "slot_mapping: contiguous int32 / int64 [S], S <= key's ", key.size(0), " tokens, got ",
                    dtype_name(slot_mapping.scalar_type()), " ", tuple(slot_mapping.sizes()));
  const int64_t heads = key.size(1), dim = key.size(2), block_size = key_cache.size(1);
  const int64_t slots = key_cache.size(0) * block_size;
  const int64_t elem = c10::elementSize(dtype), row_bytes = dim * elem;
  const void* ids = slot_mapping.data_ptr();
  // rows [T, KVH, D] into a cache, as bytes: taken from the tensors once, not per token
  struct Copy {
    const char* src;
    int64_t src_token, src_head;
    char* dst;
    int64_t dst_block, dst_row, dst_head;
    bool one_run;  // a token's heads are one run of memory in both: one memcpy
  };
  const auto copy_of = [&](const at::Tensor& rows, const at::Tensor& cache) {
    return Copy{static_cast<const char*>(rows.data_ptr()), rows.stride(0) * elem, rows.stride(1) * elem,
                static_cast<char*>(cache.data_ptr()), cache.stride(0) * elem, cache.stride(1) * elem,
                cache.stride(2) * elem, rows.stride(1) == dim && cache.stride(2) == dim};
  };
  const Copy copies[] = {copy_of(key, key_cache), copy_of(value, value_cache)};
  // ~40 tokens of SmolLM2's rows (3 heads of 64) are a few µs of copying: fewer run on this thread
  at::parallel_for(0, slot_mapping.size(0), 64, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const int64_t slot = int32 ? static_cast<const int32_t*>(ids)[t] : static_cast<const int64_t*>(ids)[t];
      if (slot < 0 || slot >= slots) continue;
      const int64_t block = slot / block_size, row = slot % block_size;
      for (const Copy& c : copies) {
        const char* src = c.src + t * c.src_token;
        char* dst = c.dst + block * c.dst_block + row * c.dst_row;
        if (c.one_run) {
          std::memcpy(dst, src, heads * row_bytes);
          continue;
        }
        for (int64_t h = 0; h < heads; ++h) std::memcpy(dst + h * c.dst_head, src + h * c.src_head, row_bytes);
      }
    }
  });
  kv_write_calls++;
}

}  // namespace

extern "C" int ascendtile_dtype_index(const char* name) {
  for (int i = 0; i < 3; ++i) if (dtype_name(DTYPES[i]) == name) return i;
  return -1;
}

extern "C" void ascendtile_set_decode_attention(int dtype, int64_t head_dim, void* kernel) {
  decode_kernels[dtype][head_dim] = reinterpret_cast<DecodeFn>(kernel);
}

extern "C" void ascendtile_set_unified_attention(int dtype, int64_t head_dim, void* kernel) {
  unified_kernels[dtype][head_dim] = reinterpret_cast<UnifiedFn>(kernel);
}

extern "C" void ascendtile_set_linear(int dtype, void* kernel) {
  linear_kernels[dtype] = reinterpret_cast<LinearFn>(kernel);
}

extern "C" void ascendtile_set_rotary_embedding(int dtype, void* kernel) {
  rope_kernels[dtype] = reinterpret_cast<RopeFn>(kernel);
}

extern "C" void ascendtile_set_linear_max_rows(int64_t rows) { linear_max_rows = rows; }
extern "C" void ascendtile_set_linear_kernels(int64_t wide_rows, int tiled) {
  linear_wide_rows = wide_rows;
  linear_tiled = tiled != 0;
}

extern "C" int64_t ascendtile_calls(const char* op) {
  if (std::strcmp(op, "cpu_decode_attention") == 0) return decode_calls.load();
  if (std::strcmp(op, "cpu_decode_attention:dot") == 0) return decode_dot_calls.load();
  if (std::strcmp(op, "cpu_unified_attention") == 0) return unified_calls.load();
  if (std::strcmp(op, "cpu_unified_attention:tiled") == 0) return unified_tiled_calls.load();
  if (std::strcmp(op, "cpu_linear") == 0) return linear_calls.load();
  if (std::strcmp(op, "cpu_linear:tiled") == 0) return linear_tiled_calls.load();
  if (std::strcmp(op, "cpu_rotary_embedding") == 0) return rope_calls.load();
  if (std::strcmp(op, "cpu_reshape_and_cache_flash") == 0) return kv_write_calls.load();
  return -1;
}

TORCH_LIBRARY_IMPL(ascendtile, CPU, m) {
  m.impl("cpu_decode_attention", &cpu_decode_attention);
  m.impl("cpu_unified_attention", &cpu_unified_attention);
  m.impl("cpu_linear", &cpu_linear);
  m.impl("cpu_rotary_embedding", &cpu_rotary_embedding);
  m.impl("cpu_reshape_and_cache_flash", &cpu_reshape_and_cache_flash);
}

// a oneDNN-packed weight is an MkldnnCPU tensor, whose key the dispatcher picks over CPU
TORCH_LIBRARY_IMPL(ascendtile, MkldnnCPU, m) {
  m.impl("cpu_linear", &cpu_linear);
}
'''
