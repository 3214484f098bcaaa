// rope_reshape_and_cache_quant, native CPU kernel ("cpu" backend): rope_reshape_and_cache / _merged
// whose caches hold int8 or float8 codes: the rotated key (key_out, as returned) and the value are
// quantized into them (formulas: kv_quant.h, docs/quantization.md), in the same pass as the rotation.
// Inputs (OpSpec order): positions, query, key, value, cos_sin_cache (as rope_reshape_and_cache);
// key_cache: [nb, bs, Hk, D] / [nb, Hk, bs, D] (kv_format 2, SEPARATE_KV) or the merged [2, nb, ...]
// (kv_format 1, MERGED_KV); value_cache: the V cache or an empty [0] tensor (MERGED_KV);
// slot_mapping; k_scale, v_scale, k_offset, v_offset (static); k_scale_cache, v_scale_cache (dynamic,
// [nb, bs, Hk, 1] / [nb, Hk, bs, 1], written in place). Absent optional inputs are empty [0] tensors.
// Outputs: query_out, key_out. Attrs: is_neox_style, cache_layout, kv_format, quant_mode.
#include "kv_quant_args.h"

namespace q = mskv::quant;
namespace rp = mskv::rope;

MSKV_AOT_EXPORT int MskvRopeReshapeAndCacheQuant(int nparam, void** params, int* ndims, int64_t** shapes,
                                                 const char** dtypes, void* /*stream*/, void* extra) {
  MSKV_AOT_GUARD("rope_reshape_and_cache_quant", {
    mskv::AotArgs a{nparam, params, ndims, shapes, dtypes, static_cast<mindspore::AotExtra*>(extra)};
    rp::Require(nparam == 16, "expected 14 inputs + 2 outputs, got " + std::to_string(nparam));
    const bool bnsd = rp::LayoutAttr(a);
    const int64_t fmt = a.attr_int("kv_format", 2);
    rp::Require(fmt == 1 || fmt == 2, "kv_format must be 1 (MERGED_KV) or 2 (SEPARATE_KV)");
    const bool dynamic = q::ReadDynamic(a);
    const q::Code code = q::CacheCode(a, 5, "key_cache");
    rp::CachePlane kc, vc;
    if (fmt == 2) {
      rp::Require(a.rank(5) == 4 && a.rank(6) == 4, "caches must be rank 4");
      rp::Require(a.dtype(6) == a.dtype(5), "key_cache and value_cache dtypes differ");
      kc = rp::PlaneArg(a, 5, bnsd);
      vc = rp::PlaneArg(a, 6, bnsd);
    } else {
      rp::Require(a.rank(5) == 5 && a.dim(5, 0) == 2, "a MERGED_KV cache must be [2, nb, ...] rank 5");
      rp::Require(a.numel(6) == 0, "value_cache must be empty for MERGED_KV");
      kc.base = a.ptr(5);
      kc.elem = 1;
      kc.num_blocks = a.dim(5, 1);
      kc.block_size = bnsd ? a.dim(5, 3) : a.dim(5, 2);
      kc.heads = bnsd ? a.dim(5, 2) : a.dim(5, 3);
      kc.head_size = a.dim(5, 4);
      kc.bnsd = bnsd;
      vc = kc;
      vc.base = kc.base + kc.num_slots() * kc.heads * kc.head_size;
    }
    rp::RopeCacheArgs r = rp::GqaArgs(a, kc, vc, 7, 14, /*quantized=*/true);
    const q::PlaneQuant kq = q::ParsePlaneQuant(a, code, dynamic, 8, 10, 12, kc, "k");
    const q::PlaneQuant vq = q::ParsePlaneQuant(a, code, dynamic, 9, 11, 13, vc, "v");
    r.k_quant = &kq;
    r.v_quant = &vq;
    rp::StrictCheck(a, r);
    rp::RopeAndCache(r);
  })
}
