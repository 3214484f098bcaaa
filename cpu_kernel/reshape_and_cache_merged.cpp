// reshape_and_cache_merged, native CPU kernel ("cpu" backend).
// Inputs: key, value [T', H, D] (or [T', H*D]); kv_cache [2, nb, bs, H, D] (BSND) or
// [2, nb, H, bs, D] (BNSD) or [2, nb, H*D/C0, bs, C0] (NZ), K plane at index 0 and V plane at index 1, written in place;
// slot_mapping int32/int64 [T], T <= T'. Output: a dummy int32 [1]. Attr: cache_layout.
// Same row writer as reshape_and_cache (mskv::ReshapeAndCacheImpl); the V plane starts
// nb*bs*H*D elements (64-bit offset) after the K plane.
#include "kv_copy.h"
#include "nz_copy.h"

using mskv::AotArgs;
using mskv::KernelError;

MSKV_AOT_EXPORT int MskvReshapeAndCacheMerged(int nparam, void** params, int* ndims, int64_t** shapes,
                                          const char** dtypes, void* /*stream*/, void* extra) {
  MSKV_AOT_GUARD("reshape_and_cache_merged", {
    AotArgs a{nparam, params, ndims, shapes, dtypes, static_cast<mindspore::AotExtra*>(extra)};
    if (nparam != 5) throw KernelError("expected 4 inputs + 1 output, got " + std::to_string(nparam));
    const int64_t layout = a.attr_int("cache_layout", mskv_attr::kLayoutBSND);
    const bool nz = mskv::LayoutIsNz(layout);
    const bool bnsd = nz || mskv::LayoutIsBnsd(layout);  // NZ [2, nb, H*D/C0, bs, C0]: the BNSD geometry
    if (a.rank(2) != 5 || a.dim(2, 0) != 2) throw KernelError("kv_cache must be [2, ...] of rank 5");
    if (a.rank(3) != 1) throw KernelError("slot_mapping must be rank 1");
    const int64_t nb = a.dim(2, 1);
    const int64_t bs = bnsd ? a.dim(2, 3) : a.dim(2, 2);
    const int64_t heads = bnsd ? a.dim(2, 2) : a.dim(2, 3);
    const int64_t hd = a.dim(2, 4);
    const int64_t T = a.dim(3, 0);
    const size_t elem = mskv::DTypeSize(a.dtype(2));
    if (elem == 0 || a.dtype(0) != a.dtype(2) || a.dtype(1) != a.dtype(2))
      throw KernelError("dtype mismatch between key/value and kv_cache");
    if (a.rank(0) < 2 || a.rank(1) < 2 || a.numel(0) != a.dim(0, 0) * heads * hd ||
        a.numel(1) != a.dim(1, 0) * heads * hd)
      throw KernelError("key/value rows must hold num_kv_heads * head_size elements");
    if (a.dim(0, 0) < T || a.dim(1, 0) < T) throw KernelError("key/value have fewer rows than slot_mapping");
    const mskv::DType sd = a.dtype(3);
    mskv::RequireIndexDType(sd, "slot_mapping");
    const bool distinct = mskv::StrictCheckSlots(a, a.ptr<void>(3), sd, T, nb * bs);
    uint8_t* k_plane = a.ptr(2);
    uint8_t* v_plane = k_plane + nb * bs * heads * hd * static_cast<int64_t>(elem);
    if (nz) {
      const int64_t e = static_cast<int64_t>(elem);
      const mskv::NzSrcPlane planes[2] = {{a.ptr(0), heads * hd * e, mskv::NzPlaneOf(k_plane, nb, heads, bs, hd, e, "kv_cache")},
                                          {a.ptr(1), heads * hd * e, mskv::NzPlaneOf(v_plane, nb, heads, bs, hd, e, "kv_cache")}};
      mskv::ScatterSlotsNz(planes, 2, a.ptr<void>(3), sd, T, distinct);
      return 0;
    }
    mskv::ReshapeAndCacheImpl(a.ptr(0), a.ptr(1), k_plane, v_plane, a.ptr<void>(3), sd, T, nb, bs, heads, hd,
                              elem, bnsd, distinct);
  })
}
