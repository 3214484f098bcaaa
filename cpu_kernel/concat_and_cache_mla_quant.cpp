// concat_and_cache_mla_quant, native CPU kernel ("cpu" backend): concat_and_cache_mla with float
// kv_c / k_pe quantized into int8 or float8 caches, each plane with its own scales (formulas:
// kv_quant.h, docs/quantization.md).
// Inputs (OpSpec order): kv_c [T', kv_lora_rank], k_pe [T', rope_dim] (or [T', 1, rope_dim])
// float16/bfloat16/float32; kv_c_cache [nb, bs, kv_lora_rank], k_pe_cache [nb, bs, rope_dim] (int8 /
// float8, written in place); slot_mapping [T]; kv_c_scale, k_pe_scale, kv_c_offset, k_pe_offset
// (static: [] / [1] or [hidden] float32, offsets optional); kv_c_scale_cache, k_pe_scale_cache
// (dynamic: [nb, bs, 1] float32, one scale per token, written in place). Absent optional inputs are
// empty [0] tensors. Output: the dummy int32 [1] status. Attr: quant_mode ("static" | "dynamic").
#include "kv_quant_args.h"

using mskv::AotArgs;
using mskv::KernelError;
namespace q = mskv::quant;
namespace rp = mskv::rope;

MSKV_AOT_EXPORT int MskvConcatAndCacheMlaQuant(int nparam, void** params, int* ndims, int64_t** shapes,
                                               const char** dtypes, void* /*stream*/, void* extra) {
  MSKV_AOT_GUARD("concat_and_cache_mla_quant", {
    AotArgs a{nparam, params, ndims, shapes, dtypes, static_cast<mindspore::AotExtra*>(extra)};
    if (nparam != 12) throw KernelError("expected 11 inputs + 1 output, got " + std::to_string(nparam));
    const bool dynamic = q::ReadDynamic(a);
    const q::Code code = q::CacheCode(a, 2, "kv_c_cache");
    rp::Require(a.dtype(3) == a.dtype(2), "kv_c_cache and k_pe_cache dtypes differ");
    rp::Require(a.rank(2) == 3 && a.rank(3) == 3, "MLA caches must be rank 3");
    const rp::CachePlane cc = rp::PlaneArg(a, 2, false);
    const rp::CachePlane pc = rp::PlaneArg(a, 3, false);
    rp::Require(cc.num_blocks == pc.num_blocks && cc.block_size == pc.block_size, "cache planes disagree");
    const mskv::DType dt = a.dtype(0);
    rp::Require(rp::IsFloat(dt) && a.dtype(1) == dt, "kv_c/k_pe must be float16, bfloat16 or float32 of one dtype");
    const int64_t T = a.dim(4, 0);
    rp::Require(a.rank(4) == 1 && rp::IsIndex(a.dtype(4)), "slot_mapping must be int32/int64 [T]");
    rp::Require(a.numel(0) == a.dim(0, 0) * cc.head_size && a.dim(0, 0) >= T, "kv_c shape mismatch");
    rp::Require(a.numel(1) == a.dim(1, 0) * pc.head_size && a.dim(1, 0) >= T, "k_pe shape mismatch");
    q::ScatterArgs s;
    s.dtype = dt;
    s.num_planes = 2;
    s.slots = a.ptr<void>(4);
    s.slot_dtype = a.dtype(4);
    s.num_tokens = T;
    const rp::CachePlane* planes[2] = {&cc, &pc};
    for (int p = 0; p < 2; ++p) {
      q::ScatterPlane& sp = s.plane[p];
      const rp::CachePlane& cp = *planes[p];
      sp.src = a.ptr(p);
      sp.src_row_bytes = cp.head_size * static_cast<int64_t>(mskv::DTypeSize(dt));
      sp.cache = cp.base;
      sp.num_blocks = cp.num_blocks;
      sp.block_size = cp.block_size;
      sp.heads = 1;
      sp.head_size = cp.head_size;
      sp.q = q::ParsePlaneQuant(a, code, dynamic, 5 + p, 7 + p, 9 + p, cp, p == 0 ? "kv_c" : "k_pe");
    }
    if (rp::Strict(a)) {
      rp::StrictSlots(s.slots, s.slot_dtype, T, cc.num_slots());
      s.slots_distinct = true;
    }
    q::QuantScatter(s);
  })
}
