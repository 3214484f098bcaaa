// concat_and_cache_mla_quant, native CPU kernel ("cpu" backend): concat_and_cache_mla with float
// kv_c / k_pe quantized into int8 or float8 caches, each plane with its own scales (formulas:
// kv_quant.h, docs/quantization.md).
// Inputs (OpSpec order): kv_c [T', kv_lora_rank], k_pe [T', rope_dim] (or [T', 1, rope_dim])
// float16/bfloat16/float32; kv_c_cache [nb, bs, kv_lora_rank], k_pe_cache [nb, bs, rope_dim] (int8 /
// float8, written in place); slot_mapping [T]; kv_c_scale, k_pe_scale, kv_c_offset, k_pe_offset
// (static: [] / [1] or [hidden] float32, offsets optional); kv_c_scale_cache, k_pe_scale_cache
// (dynamic: [nb, bs, 1] float32, one scale per token, written in place). Absent optional inputs are
// empty [0] tensors. Output: the dummy int32 [1] status. Attr: quant_mode (int code,
// op_host/mskv_attr_codes.h).
#include "kv_quant_args.h"

namespace rp = mskv::rope;

MSKV_QUANT_ENTRY(MskvConcatAndCacheMlaQuant, "concat_and_cache_mla_quant", 12, {
  rp::Require(a.dtype(3) == a.dtype(2), "kv_c_cache and k_pe_cache dtypes differ");
  rp::Require(a.rank(2) == 3 && a.rank(3) == 3, "MLA caches must be rank 3");
  const rp::CachePlane cp[2] = {rp::PlaneArg(a, 2, false), rp::PlaneArg(a, 3, false)};
  rp::Require(cp[0].num_blocks == cp[1].num_blocks && cp[0].block_size == cp[1].block_size, "cache planes disagree");
  static const char* const kNames[2] = {"kv_c", "k_pe"};
  mskv::quant::QuantScatter(mskv::quant::ScatterOf(a, cp, kNames, "kv_c_cache"));
})
