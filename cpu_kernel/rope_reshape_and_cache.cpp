// rope_reshape_and_cache, native CPU kernel ("cpu" backend): RoPE on query and key, then write the
// rotated key and the value rows into a paged cache, in one pass over K (see rope_common.h).
// Inputs: positions [T'] int32/int64; query [T', Hq, D] (or [T', Hq*D]); key, value [T', Hk, D]
// (or [T', Hk*D]); cos_sin_cache [max_position, rotary_dim] fp32 or the data dtype;
// key_cache, value_cache [nb, bs, Hk, D] (BSND) or [nb, Hk, bs, D] (BNSD), written in place;
// slot_mapping [T] int32/int64, T <= T'.
// Outputs: query_out, key_out (shapes of query, key). Attrs: is_neox_style (bool), cache_layout.
#include "rope_common.h"

namespace mskv {
namespace rope {

RopeCacheArgs GqaArgs(const AotArgs& a, const CachePlane& kc, const CachePlane& vc, int slot_idx, int out_idx,
                      bool quantized) {
  RopeCacheArgs r;
  r.dtype = a.dtype(1);
  Require(IsFloat(r.dtype), "query dtype must be float16, bfloat16 or float32");
  Require(a.dtype(2) == r.dtype && a.dtype(3) == r.dtype && a.dtype(out_idx) == r.dtype &&
              a.dtype(out_idx + 1) == r.dtype,
          "query/key/value/outputs dtypes differ");
  Require(quantized ? (kc.elem == 1 && vc.elem == 1) : (DTypeSize(r.dtype) == kc.elem && DTypeSize(r.dtype) == vc.elem),
          quantized ? "quantized caches must be int8 or float8" : "cache dtype differs from key");
  r.head_size = kc.head_size;
  r.k_heads = kc.heads;
  Require(vc.heads == kc.heads && vc.head_size == kc.head_size && vc.num_blocks == kc.num_blocks &&
              vc.block_size == kc.block_size,
          "key_cache and value_cache shapes differ");
  r.rows = a.dim(1, 0);
  Require(r.head_size > 0 && a.numel(1) % r.head_size == 0, "query size is not a multiple of head_size");
  r.q_heads = r.rows > 0 ? a.numel(1) / (r.rows * r.head_size) : 0;
  Require(a.numel(1) == r.rows * r.q_heads * r.head_size, "query shape inconsistent");
  Require(a.dim(2, 0) == r.rows && a.numel(2) == r.rows * r.k_heads * r.head_size, "key shape mismatch");
  Require(a.dim(3, 0) == r.rows && a.numel(3) == r.rows * r.k_heads * r.head_size, "value shape mismatch");
  Require(a.numel(out_idx) == a.numel(1) && a.numel(out_idx + 1) == a.numel(2), "output shapes mismatch");
  Require(a.rank(0) == 1 && a.dim(0, 0) == r.rows && IsIndex(a.dtype(0)), "positions must be int [T']");
  r.positions = a.ptr<void>(0);
  r.pos_dtype = a.dtype(0);
  r.table = TableArg(a, 4, r.dtype, r.head_size);
  Require(a.rank(slot_idx) == 1 && IsIndex(a.dtype(slot_idx)), "slot_mapping must be int [T]");
  r.num_write = a.dim(slot_idx, 0);
  Require(r.num_write <= r.rows, "slot_mapping longer than key");
  r.slots = a.ptr<void>(slot_idx);
  r.slot_dtype = a.dtype(slot_idx);
  r.neox = a.attr_bool("is_neox_style", true);
  r.q = a.ptr(1);
  r.k = a.ptr(2);
  r.v = a.ptr(3);
  r.q_out = a.ptr(out_idx);
  r.k_out = a.ptr(out_idx + 1);
  r.k_cache = kc;
  r.v_cache = vc;
  return r;
}

}  // namespace rope
}  // namespace mskv

MSKV_AOT_EXPORT int MskvRopeReshapeAndCache(int nparam, void** params, int* ndims, int64_t** shapes,
                                        const char** dtypes, void* /*stream*/, void* extra) {
  MSKV_AOT_GUARD("rope_reshape_and_cache", {
    mskv::AotArgs a{nparam, params, ndims, shapes, dtypes, static_cast<mindspore::AotExtra*>(extra)};
    mskv::rope::Require(nparam == 10, "expected 8 inputs + 2 outputs, got " + std::to_string(nparam));
    const int64_t layout = mskv::rope::LayoutCode(a);
    const bool nz = mskv::LayoutIsNz(layout);
    const bool bnsd = !nz && mskv::LayoutIsBnsd(layout);
    const mskv::rope::CachePlane kc = nz ? mskv::rope::NzPlaneArg(a, 5, 0, 2) : mskv::rope::PlaneArg(a, 5, bnsd);
    const mskv::rope::CachePlane vc = nz ? mskv::rope::NzPlaneArg(a, 6, 0, 2) : mskv::rope::PlaneArg(a, 6, bnsd);
    mskv::rope::Require(a.rank(5) == 4 && a.rank(6) == 4, "caches must be rank 4");
    mskv::rope::RopeCacheArgs r = mskv::rope::GqaArgs(a, kc, vc, 7, 8);
    mskv::rope::StrictCheck(a, r);
    mskv::rope::RopeAndCache(r);
  })
}
