// reshape_and_cache, native CPU kernel ("cpu" backend).
// Inputs: key, value [T', H, D] (or [T', H*D]); key_cache, value_cache [nb, bs, H, D] (BSND) or
// [nb, H, bs, D] (BNSD) or [nb, H*D/C0, bs, C0] (NZ, nz_copy.h), written in place; slot_mapping int32/int64
// [T], T <= T'. Output: a dummy int32 [1]. Attr: cache_layout (int code: 0 BSND, 1 BNSD, 2 NZ).
// Tokens with slot < 0 or slot >= nb*bs are skipped (Python rejects the latter before launch).
#include "kv_copy.h"
#include "nz_copy.h"

using mskv::AotArgs;
using mskv::KernelError;

MSKV_AOT_EXPORT int MskvReshapeAndCache(int nparam, void** params, int* ndims, int64_t** shapes,
                                    const char** dtypes, void* /*stream*/, void* extra) {
  MSKV_AOT_GUARD("reshape_and_cache", {
    AotArgs a{nparam, params, ndims, shapes, dtypes, static_cast<mindspore::AotExtra*>(extra)};
    if (nparam != 6) throw KernelError("expected 5 inputs + 1 output, got " + std::to_string(nparam));
    const int64_t layout = a.attr_int("cache_layout", mskv_attr::kLayoutBSND);
    const bool nz = mskv::LayoutIsNz(layout);
    const bool bnsd = nz || mskv::LayoutIsBnsd(layout);  // NZ [nb, H*D/C0, bs, C0]: the BNSD geometry
    if (a.rank(2) != 4 || a.rank(3) != 4) throw KernelError("caches must be rank 4");
    for (int d = 0; d < 4; ++d) {
      if (a.dim(2, d) != a.dim(3, d)) throw KernelError("key_cache and value_cache shapes differ");
    }
    if (a.rank(4) != 1) throw KernelError("slot_mapping must be rank 1");
    const int64_t nb = a.dim(2, 0);
    const int64_t bs = bnsd ? a.dim(2, 2) : a.dim(2, 1);
    const int64_t heads = bnsd ? a.dim(2, 1) : a.dim(2, 2);
    const int64_t hd = a.dim(2, 3);
    const int64_t T = a.dim(4, 0);
    const size_t elem = mskv::DTypeSize(a.dtype(2));
    if (elem == 0 || a.dtype(0) != a.dtype(2) || a.dtype(1) != a.dtype(3) || a.dtype(0) != a.dtype(1))
      throw KernelError("dtype mismatch between key/value and caches");
    if (a.rank(0) < 2 || a.rank(1) < 2 || a.numel(0) != a.dim(0, 0) * heads * hd ||
        a.numel(1) != a.dim(1, 0) * heads * hd)
      throw KernelError("key/value rows must hold num_kv_heads * head_size elements");
    if (a.dim(0, 0) < T || a.dim(1, 0) < T) throw KernelError("key/value have fewer rows than slot_mapping");
    const mskv::DType sd = a.dtype(4);
    mskv::RequireIndexDType(sd, "slot_mapping");
    const bool distinct = mskv::StrictCheckSlots(a, a.ptr<void>(4), sd, T, nb * bs);
    if (nz) {
      const int64_t e = static_cast<int64_t>(elem);
      const mskv::NzSrcPlane planes[2] = {
          {a.ptr(0), heads * hd * e, mskv::NzPlaneOf(a.ptr(2), nb, heads, bs, hd, e, "key_cache")},
          {a.ptr(1), heads * hd * e, mskv::NzPlaneOf(a.ptr(3), nb, heads, bs, hd, e, "value_cache")}};
      mskv::ScatterSlotsNz(planes, 2, a.ptr<void>(4), sd, T, distinct);
      return 0;
    }
    mskv::ReshapeAndCacheImpl(a.ptr(0), a.ptr(1), a.ptr(2), a.ptr(3), a.ptr<void>(4), sd, T, nb, bs,
                              heads, hd, elem, bnsd, distinct);
  })
}
