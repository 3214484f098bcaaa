// rope_reshape_and_cache_merged, native CPU kernel ("cpu" backend): as rope_reshape_and_cache, with
// the merged per-layer cache kv_cache [2, nb, bs, Hk, D] (BSND) or [2, nb, Hk, bs, D] (BNSD),
// K plane at index 0 and V plane at index 1, written in place.
// Inputs: positions, query, key, value, cos_sin_cache, kv_cache, slot_mapping.
// Outputs: query_out, key_out. Attrs: is_neox_style, cache_layout.
#include "rope_common.h"

MSKV_AOT_EXPORT int MskvRopeReshapeAndCacheMerged(int nparam, void** params, int* ndims, int64_t** shapes,
                                              const char** dtypes, void* /*stream*/, void* extra) {
  MSKV_AOT_GUARD("rope_reshape_and_cache_merged", {
    mskv::AotArgs a{nparam, params, ndims, shapes, dtypes, static_cast<mindspore::AotExtra*>(extra)};
    using mskv::rope::Require;
    Require(nparam == 9, "expected 7 inputs + 2 outputs, got " + std::to_string(nparam));
    const int64_t layout = mskv::rope::LayoutCode(a);
    const bool nz = mskv::LayoutIsNz(layout);
    const bool bnsd = !nz && mskv::LayoutIsBnsd(layout);
    Require(a.rank(5) == 5 && a.dim(5, 0) == 2, "kv_cache must be [2, ...] rank 5");
    mskv::rope::CachePlane kc;
    if (nz) {
      kc = mskv::rope::NzPlaneArg(a, 5, 1, 2);
    } else {
      kc.base = a.ptr(5);
      kc.elem = mskv::DTypeSize(a.dtype(5));
      Require(kc.elem > 0, "unsupported cache dtype");
      kc.num_blocks = a.dim(5, 1);
      kc.block_size = bnsd ? a.dim(5, 3) : a.dim(5, 2);
      kc.heads = bnsd ? a.dim(5, 2) : a.dim(5, 3);
      kc.head_size = a.dim(5, 4);
      kc.bnsd = bnsd;
    }
    mskv::rope::CachePlane vc = kc;
    vc.base = kc.base + kc.num_blocks * kc.block_size * kc.heads * kc.head_size * static_cast<int64_t>(kc.elem);
    mskv::rope::RopeCacheArgs r = mskv::rope::GqaArgs(a, kc, vc, 6, 7);
    mskv::rope::StrictCheck(a, r);
    mskv::rope::RopeAndCache(r);
  })
}
