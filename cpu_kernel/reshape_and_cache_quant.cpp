// reshape_and_cache_quant, native CPU kernel ("cpu" backend): reshape_and_cache / _merged with float
// K/V quantized into int8 or float8 caches (formulas: kv_quant.h, docs/quantization.md).
// Inputs (OpSpec order): key, value [T', H, D] (or [T', H*D]) float16/bfloat16/float32;
// key_cache: kv_format 2 (SEPARATE_KV) [nb, bs, H, D] (BSND) / [nb, H, bs, D] (BNSD), kv_format 1
// (MERGED_KV) [2, nb, ...] holding both planes; value_cache: the V cache (SEPARATE_KV) or an empty [0]
// tensor (MERGED_KV); slot_mapping [T]; k_scale, v_scale, k_offset, v_offset (static: [] / [1] or
// [H, D] float32, offsets optional); k_scale_cache, v_scale_cache (dynamic: [nb, bs, H, 1] /
// [nb, H, bs, 1] float32, written in place). Absent optional inputs are empty [0] tensors.
// Output: the dummy int32 [1] status. Attrs: cache_layout, kv_format, quant_mode ("static" | "dynamic").
#include "kv_quant_args.h"

using mskv::AotArgs;
using mskv::KernelError;
namespace q = mskv::quant;
namespace rp = mskv::rope;

MSKV_AOT_EXPORT int MskvReshapeAndCacheQuant(int nparam, void** params, int* ndims, int64_t** shapes,
                                             const char** dtypes, void* /*stream*/, void* extra) {
  MSKV_AOT_GUARD("reshape_and_cache_quant", {
    AotArgs a{nparam, params, ndims, shapes, dtypes, static_cast<mindspore::AotExtra*>(extra)};
    if (nparam != 12) throw KernelError("expected 11 inputs + 1 output, got " + std::to_string(nparam));
    const bool bnsd = rp::LayoutAttr(a);
    const int64_t fmt = a.attr_int("kv_format", 2);
    if (fmt != 1 && fmt != 2) throw KernelError("kv_format must be 1 (MERGED_KV) or 2 (SEPARATE_KV)");
    const bool dynamic = q::ReadDynamic(a);
    const q::Code code = q::CacheCode(a, 2, "key_cache");
    rp::CachePlane kc, vc;
    if (fmt == 2) {
      rp::Require(a.rank(2) == 4 && a.rank(3) == 4, "caches must be rank 4");
      for (int d = 0; d < 4; ++d) rp::Require(a.dim(2, d) == a.dim(3, d), "key_cache and value_cache shapes differ");
      rp::Require(a.dtype(3) == a.dtype(2), "key_cache and value_cache dtypes differ");
      kc = rp::PlaneArg(a, 2, bnsd);
      vc = rp::PlaneArg(a, 3, bnsd);
    } else {
      rp::Require(a.rank(2) == 5 && a.dim(2, 0) == 2, "a MERGED_KV cache must be [2, nb, ...] rank 5");
      rp::Require(a.numel(3) == 0, "value_cache must be empty for MERGED_KV");
      kc.base = a.ptr(2);
      kc.elem = 1;
      kc.num_blocks = a.dim(2, 1);
      kc.block_size = bnsd ? a.dim(2, 3) : a.dim(2, 2);
      kc.heads = bnsd ? a.dim(2, 2) : a.dim(2, 3);
      kc.head_size = a.dim(2, 4);
      kc.bnsd = bnsd;
      vc = kc;
      vc.base = kc.base + kc.num_slots() * kc.heads * kc.head_size;
    }
    const mskv::DType dt = a.dtype(0);
    rp::Require(rp::IsFloat(dt) && a.dtype(1) == dt, "key/value must be float16, bfloat16 or float32 of one dtype");
    const int64_t T = a.dim(4, 0);
    rp::Require(a.rank(4) == 1 && rp::IsIndex(a.dtype(4)), "slot_mapping must be int32/int64 [T]");
    const int64_t row = kc.heads * kc.head_size;
    for (int i : {0, 1}) {
      rp::Require(a.rank(i) >= 2 && a.numel(i) == a.dim(i, 0) * row, "key/value rows must hold num_kv_heads * head_size");
      rp::Require(a.dim(i, 0) >= T, "key/value have fewer rows than slot_mapping");
    }
    q::ScatterArgs s;
    s.dtype = dt;
    s.num_planes = 2;
    s.slots = a.ptr<void>(4);
    s.slot_dtype = a.dtype(4);
    s.num_tokens = T;
    const rp::CachePlane* planes[2] = {&kc, &vc};
    for (int p = 0; p < 2; ++p) {
      q::ScatterPlane& sp = s.plane[p];
      const rp::CachePlane& cp = *planes[p];
      sp.src = a.ptr(p);
      sp.src_row_bytes = row * static_cast<int64_t>(mskv::DTypeSize(dt));
      sp.cache = cp.base;
      sp.num_blocks = cp.num_blocks;
      sp.block_size = cp.block_size;
      sp.heads = cp.heads;
      sp.head_size = cp.head_size;
      sp.bnsd = cp.bnsd;
      sp.q = q::ParsePlaneQuant(a, code, dynamic, 5 + p, 7 + p, 9 + p, cp, p == 0 ? "k" : "v");
    }
    if (rp::Strict(a)) {
      rp::StrictSlots(s.slots, s.slot_dtype, T, kc.num_slots());
      s.slots_distinct = true;
    }
    q::QuantScatter(s);
  })
}
