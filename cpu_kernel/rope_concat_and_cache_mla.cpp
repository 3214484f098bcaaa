// rope_concat_and_cache_mla, native CPU kernel ("cpu" backend): DeepSeek MLA. RoPE on q_pe and
// k_pe, optional RMSNorm of kv_c, then kv_c and k_pe rows written into their cache planes.
// Inputs: positions [T']; q_pe [T', Hq, rope_dim] (or [T', Hq*rope_dim]); k_pe [T', rope_dim] (or
// [T', 1, rope_dim]); kv_c [T', kv_lora_rank]; cos_sin_cache [max_position, rotary_dim];
// kv_c_cache [nb, bs, kv_lora_rank], k_pe_cache [nb, bs, rope_dim] (written in place);
// slot_mapping [T]; kv_c_norm_weight [kv_lora_rank] fp32 or the data dtype, or [0] = no norm.
// Outputs: q_pe_out, k_pe_out, kv_c_out (normalised kv_c, or a copy). Attrs: is_neox_style, epsilon.
#include "rope_common.h"

namespace mskv {
namespace rope {

RopeCacheArgs MlaArgs(const AotArgs& a, int out_idx, bool quantized) {
  RopeCacheArgs r;
  r.dtype = a.dtype(1);
  Require(IsFloat(r.dtype), "q_pe dtype must be float16, bfloat16 or float32");
  for (int i : {2, 3, out_idx, out_idx + 1, out_idx + 2}) Require(a.dtype(i) == r.dtype, "dtypes of q_pe/k_pe/kv_c/outputs differ");
  if (quantized) {
    Require(a.dtype(6) == a.dtype(5) && DTypeSize(a.dtype(5)) == 1, "quantized caches must be int8 or float8 of one dtype");
  } else {
    for (int i : {5, 6}) Require(a.dtype(i) == r.dtype, "dtypes of q_pe/k_pe/kv_c/caches/outputs differ");
  }
  Require(a.rank(5) == 3 && a.rank(6) == 3, "MLA caches must be rank 3");
  const CachePlane kvc = PlaneArg(a, 5, false);
  const CachePlane kpc = PlaneArg(a, 6, false);
  Require(kvc.num_blocks == kpc.num_blocks && kvc.block_size == kpc.block_size, "cache planes disagree");
  r.rows = a.dim(1, 0);
  r.head_size = kpc.head_size;
  r.k_heads = 1;
  r.kv_c_dim = kvc.head_size;
  Require(r.head_size > 0 && a.numel(1) % r.head_size == 0, "q_pe size is not a multiple of rope_dim");
  r.q_heads = r.rows > 0 ? a.numel(1) / (r.rows * r.head_size) : 0;
  Require(a.dim(2, 0) == r.rows && a.numel(2) == r.rows * r.head_size, "k_pe shape mismatch");
  Require(a.dim(3, 0) == r.rows && a.numel(3) == r.rows * r.kv_c_dim, "kv_c shape mismatch");
  Require(a.numel(out_idx) == a.numel(1) && a.numel(out_idx + 1) == a.numel(2) && a.numel(out_idx + 2) == a.numel(3),
          "output shapes mismatch");
  Require(a.rank(0) == 1 && a.dim(0, 0) == r.rows && IsIndex(a.dtype(0)), "positions must be int [T']");
  r.positions = a.ptr<void>(0);
  r.pos_dtype = a.dtype(0);
  r.table = TableArg(a, 4, r.dtype, r.head_size);
  Require(a.rank(7) == 1 && IsIndex(a.dtype(7)), "slot_mapping must be int [T]");
  r.num_write = a.dim(7, 0);
  Require(r.num_write <= r.rows, "slot_mapping longer than k_pe");
  r.slots = a.ptr<void>(7);
  r.slot_dtype = a.dtype(7);
  Require(a.rank(8) == 1, "kv_c_norm_weight must be rank 1");
  if (a.numel(8) > 0) {
    Require(a.numel(8) == r.kv_c_dim, "kv_c_norm_weight size differs from kv_lora_rank");
    Require(a.dtype(8) == DType::kF32 || a.dtype(8) == r.dtype, "kv_c_norm_weight dtype");
    r.norm_weight = a.ptr<void>(8);
    r.norm_dtype = a.dtype(8);
  }
  r.epsilon = static_cast<float>(a.attr_float("epsilon", 1e-6));
  r.neox = a.attr_bool("is_neox_style", false);
  r.q = a.ptr(1);
  r.k = a.ptr(2);
  r.kv_c = a.ptr(3);
  r.q_out = a.ptr(out_idx);
  r.k_out = a.ptr(out_idx + 1);
  r.kv_c_out = a.ptr(out_idx + 2);
  r.k_cache = kpc;
  r.v_cache = kvc;
  return r;
}

}  // namespace rope
}  // namespace mskv

MSKV_AOT_EXPORT int MskvRopeConcatAndCacheMla(int nparam, void** params, int* ndims, int64_t** shapes,
                                          const char** dtypes, void* /*stream*/, void* extra) {
  MSKV_AOT_GUARD("rope_concat_and_cache_mla", {
    mskv::AotArgs a{nparam, params, ndims, shapes, dtypes, static_cast<mindspore::AotExtra*>(extra)};
    mskv::rope::Require(nparam == 12, "expected 9 inputs + 3 outputs, got " + std::to_string(nparam));
    mskv::rope::RopeCacheArgs r = mskv::rope::MlaArgs(a, 9);
    mskv::rope::StrictCheck(a, r);
    mskv::rope::RopeAndCache(r);
  })
}
