// rope_reshape_and_cache_quant, native CPU kernel ("cpu" backend): rope_reshape_and_cache / _merged
// whose caches hold int8 or float8 codes: the rotated key (key_out, as returned) and the value are
// quantized into them (formulas: kv_quant.h, docs/quantization.md), in the same pass as the rotation.
// Inputs (OpSpec order): positions, query, key, value, cos_sin_cache (as rope_reshape_and_cache);
// key_cache: [nb, bs, Hk, D] / [nb, Hk, bs, D] (kv_format 2, SEPARATE_KV) or the merged [2, nb, ...]
// (kv_format 1, MERGED_KV); value_cache: the V cache or an empty [0] tensor (MERGED_KV);
// slot_mapping; k_scale, v_scale, k_offset, v_offset (static); k_scale_cache, v_scale_cache (dynamic,
// [nb, bs, Hk, 1] / [nb, Hk, bs, 1], written in place). Absent optional inputs are empty [0] tensors.
// Outputs: query_out, key_out. Attrs: is_neox_style, cache_layout, kv_format, quant_mode (int codes).
#include "kv_quant_args.h"

namespace q = mskv::quant;
namespace rp = mskv::rope;

MSKV_QUANT_ENTRY(MskvRopeReshapeAndCacheQuant, "rope_reshape_and_cache_quant", 16, {
  const bool dynamic = q::ReadDynamic(a);
  const q::Code code = q::CacheCode(a, 5, "key_cache");
  rp::CachePlane kc, vc;
  q::GqaPlanes(a, 5, 6, &kc, &vc, /*rows_idx=*/2);
  rp::RopeCacheArgs r = rp::GqaArgs(a, kc, vc, 7, 14, /*quantized=*/true);
  const q::PlaneQuant kq = q::ParsePlaneQuant(a, code, dynamic, 8, 10, 12, kc, "k");
  const q::PlaneQuant vq = q::ParsePlaneQuant(a, code, dynamic, 9, 11, 13, vc, "v");
  r.k_quant = &kq;
  r.v_quant = &vq;
  rp::StrictCheck(a, r);
  rp::RopeAndCache(r);
})
