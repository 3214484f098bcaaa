// reshape_and_cache, native CPU kernel ("cpu" backend).
// Inputs: key, value [T', H, D] (or [T', H*D]); key_cache, value_cache [nb, bs, H, D] (BSND) or
// [nb, H, bs, D] (BNSD), written in place; slot_mapping int32/int64 [T], T <= T'.
// Output: a dummy int32 [1]. Attr: cache_layout "BSND" | "BNSD".
// Tokens with slot < 0 or slot >= nb*bs are skipped (Python rejects the latter before launch).
#include "aot_abi.h"

namespace {

using mskv::AotArgs;
using mskv::KernelError;

// Copy one token's [H, D] row into a cache at slot; BSND rows are contiguous, BNSD rows are H
// strided pieces of D elements.
inline void WriteRow(uint8_t* cache, const uint8_t* src, int64_t slot, int64_t bs, int64_t heads,
                     int64_t row_bytes, int64_t head_bytes, bool bnsd) {
  if (!bnsd) {
    std::memcpy(cache + slot * row_bytes, src, static_cast<size_t>(row_bytes));
    return;
  }
  const int64_t block = slot / bs, off = slot % bs;
  uint8_t* base = cache + (block * heads * bs + off) * head_bytes;
  for (int64_t h = 0; h < heads; ++h) {
    std::memcpy(base + h * bs * head_bytes, src + h * head_bytes, static_cast<size_t>(head_bytes));
  }
}

}  // namespace

namespace mskv {

// Shared by reshape_and_cache and reshape_and_cache_merged: write key and value rows of the first T
// tokens into (key_cache, value_cache), both of shape [nb, bs, H, D] or [nb, H, bs, D].
void ReshapeAndCacheImpl(const uint8_t* key, const uint8_t* value, uint8_t* key_cache,
                         uint8_t* value_cache, const void* slots, DType slot_dtype, int64_t num_tokens,
                         int64_t num_blocks, int64_t block_size, int64_t heads, int64_t head_size,
                         size_t elem, bool bnsd) {
  const int64_t head_bytes = head_size * static_cast<int64_t>(elem);
  const int64_t row_bytes = heads * head_bytes;
  const int64_t num_slots = num_blocks * block_size;
  ParallelFor(num_tokens, 2 * num_tokens * row_bytes, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const int64_t slot = ReadIndex(slots, slot_dtype, t);
      if (slot < 0 || slot >= num_slots) continue;
      WriteRow(key_cache, key + t * row_bytes, slot, block_size, heads, row_bytes, head_bytes, bnsd);
      WriteRow(value_cache, value + t * row_bytes, slot, block_size, heads, row_bytes, head_bytes, bnsd);
    }
  });
}

}  // namespace mskv

MSKV_AOT_EXPORT int ReshapeAndCache(int nparam, void** params, int* ndims, int64_t** shapes,
                                    const char** dtypes, void* /*stream*/, void* extra) {
  MSKV_AOT_GUARD("reshape_and_cache", {
    AotArgs a{nparam, params, ndims, shapes, dtypes, static_cast<mindspore::AotExtra*>(extra)};
    if (nparam != 6) throw KernelError("expected 5 inputs + 1 output, got " + std::to_string(nparam));
    const std::string layout = a.attr_str("cache_layout", "BSND");
    const bool bnsd = layout == "BNSD";
    if (!bnsd && layout != "BSND") throw KernelError("unknown cache_layout " + layout);
    if (a.rank(2) != 4 || a.rank(3) != 4) throw KernelError("caches must be rank 4");
    const int64_t nb = a.dim(2, 0);
    const int64_t bs = bnsd ? a.dim(2, 2) : a.dim(2, 1);
    const int64_t heads = bnsd ? a.dim(2, 1) : a.dim(2, 2);
    const int64_t hd = a.dim(2, 3);
    const int64_t T = a.dim(4, 0);
    const size_t elem = mskv::DTypeSize(a.dtype(2));
    if (elem == 0 || a.dtype(0) != a.dtype(2) || a.dtype(1) != a.dtype(3) || a.dtype(0) != a.dtype(1))
      throw KernelError("dtype mismatch between key/value and caches");
    if (a.numel(0) < T * heads * hd || a.numel(1) < T * heads * hd)
      throw KernelError("key/value have fewer rows than slot_mapping");
    const mskv::DType sd = a.dtype(4);
    if (sd != mskv::DType::kI32 && sd != mskv::DType::kI64) throw KernelError("slot_mapping must be int32/int64");
    mskv::ReshapeAndCacheImpl(a.ptr(0), a.ptr(1), a.ptr(2), a.ptr(3), a.ptr<void>(4), sd, T, nb, bs,
                              heads, hd, elem, bnsd);
  })
}
