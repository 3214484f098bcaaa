// reshape_and_cache_quant, native CPU kernel ("cpu" backend): reshape_and_cache / _merged with float
// K/V quantized into int8 or float8 caches (formulas: kv_quant.h, docs/quantization.md).
// Inputs (OpSpec order): key, value [T', H, D] (or [T', H*D]) float16/bfloat16/float32;
// key_cache: kv_format 2 (SEPARATE_KV) [nb, bs, H, D] (BSND) / [nb, H, bs, D] (BNSD), kv_format 1
// (MERGED_KV) [2, nb, ...] holding both planes; value_cache: the V cache (SEPARATE_KV) or an empty [0]
// tensor (MERGED_KV); slot_mapping [T]; k_scale, v_scale, k_offset, v_offset (static: [] / [1] or
// [H, D] float32, offsets optional); k_scale_cache, v_scale_cache (dynamic: [nb, bs, H, 1] /
// [nb, H, bs, 1] float32, written in place). Absent optional inputs are empty [0] tensors.
// Output: the dummy int32 [1] status. Attrs: cache_layout, kv_format, quant_mode (int codes,
// op_host/mskv_attr_codes.h).
#include "kv_quant_args.h"

MSKV_QUANT_ENTRY(MskvReshapeAndCacheQuant, "reshape_and_cache_quant", 12, {
  mskv::rope::CachePlane cp[2];
  mskv::quant::GqaPlanes(a, 2, 3, &cp[0], &cp[1], /*rows_idx=*/0);
  static const char* const kNames[2] = {"k", "v"};
  mskv::quant::QuantScatter(mskv::quant::ScatterOf(a, cp, kNames, "key_cache"));
})
