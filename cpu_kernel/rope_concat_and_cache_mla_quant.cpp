// rope_concat_and_cache_mla_quant, native CPU kernel ("cpu" backend): rope_concat_and_cache_mla whose
// caches hold int8 or float8 codes: kv_c_out (the normalised or copied latent, as returned) and
// k_pe_out (rotated) are quantized into them, each plane with its own scales (formulas: kv_quant.h,
// docs/quantization.md), in the same pass as the rotation and the norm.
// Inputs (OpSpec order): positions, q_pe, k_pe, kv_c, cos_sin_cache, kv_c_cache, k_pe_cache,
// slot_mapping, kv_c_norm_weight (as rope_concat_and_cache_mla); kv_c_scale, k_pe_scale, kv_c_offset,
// k_pe_offset (static); kv_c_scale_cache, k_pe_scale_cache (dynamic, [nb, bs, 1], written in place).
// Absent optional inputs are empty [0] tensors. Outputs: q_pe_out, k_pe_out, kv_c_out.
// Attrs: is_neox_style, epsilon, quant_mode (int code).
#include "kv_quant_args.h"

namespace q = mskv::quant;
namespace rp = mskv::rope;

MSKV_QUANT_ENTRY(MskvRopeConcatAndCacheMlaQuant, "rope_concat_and_cache_mla_quant", 18, {
  const bool dynamic = q::ReadDynamic(a);
  const q::Code code = q::CacheCode(a, 5, "kv_c_cache");
  rp::RopeCacheArgs r = rp::MlaArgs(a, 15, /*quantized=*/true);
  // r.v_cache is the kv_c plane, r.k_cache the k_pe plane
  const q::PlaneQuant cq = q::ParsePlaneQuant(a, code, dynamic, 9, 11, 13, r.v_cache, "kv_c");
  const q::PlaneQuant pq = q::ParsePlaneQuant(a, code, dynamic, 10, 12, 14, r.k_cache, "k_pe");
  r.k_quant = &pq;
  r.v_quant = &cq;
  rp::StrictCheck(a, r);
  rp::RopeAndCache(r);
})
