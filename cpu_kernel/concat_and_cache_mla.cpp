// concat_and_cache_mla, native CPU kernel ("cpu" backend).
// Inputs: kv_c [T', kv_lora_rank]; k_pe [T', rope_dim] or [T', 1, rope_dim]; kv_c_cache
// [nb, bs, kv_lora_rank] and k_pe_cache [nb, bs, rope_dim], written in place; slot_mapping
// int32/int64 [T], T <= T'. Output: a dummy int32 [1].
// Two planes of different widths through the shared slot writer (mskv::ScatterSlots).
#include "kv_copy.h"

using mskv::AotArgs;
using mskv::KernelError;

MSKV_AOT_EXPORT int MskvConcatAndCacheMla(int nparam, void** params, int* ndims, int64_t** shapes,
                                      const char** dtypes, void* /*stream*/, void* extra) {
  MSKV_AOT_GUARD("concat_and_cache_mla", {
    AotArgs a{nparam, params, ndims, shapes, dtypes, static_cast<mindspore::AotExtra*>(extra)};
    if (nparam != 6) throw KernelError("expected 5 inputs + 1 output, got " + std::to_string(nparam));
    if (a.rank(2) != 3 || a.rank(3) != 3) throw KernelError("caches must be rank 3");
    if (a.dim(2, 0) != a.dim(3, 0) || a.dim(2, 1) != a.dim(3, 1))
      throw KernelError("kv_c_cache and k_pe_cache must share num_blocks and block_size");
    if (a.rank(4) != 1) throw KernelError("slot_mapping must be rank 1");
    const int64_t nb = a.dim(2, 0), bs = a.dim(2, 1);
    const int64_t rank_c = a.dim(2, 2), rope = a.dim(3, 2);
    const int64_t T = a.dim(4, 0);
    const size_t elem = mskv::DTypeSize(a.dtype(2));
    if (elem == 0 || a.dtype(0) != a.dtype(2) || a.dtype(1) != a.dtype(2) || a.dtype(3) != a.dtype(2))
      throw KernelError("dtype mismatch between inputs and caches");
    if (a.rank(0) != 2 || a.dim(0, 1) != rank_c) throw KernelError("kv_c must be [T', kv_lora_rank]");
    if (a.rank(1) < 2 || a.numel(1) != a.dim(1, 0) * rope) throw KernelError("k_pe rows must hold rope_dim elements");
    if (a.dim(0, 0) < T || a.dim(1, 0) < T) throw KernelError("kv_c/k_pe have fewer rows than slot_mapping");
    const mskv::DType sd = a.dtype(4);
    mskv::RequireIndexDType(sd, "slot_mapping");
    const bool distinct = mskv::StrictCheckSlots(a, a.ptr<void>(4), sd, T, nb * bs);
    const int64_t e = static_cast<int64_t>(elem);
    const mskv::SlotPlane planes[2] = {
        {a.ptr(0), rank_c * e, a.ptr(2), 1, rank_c * e, false},
        {a.ptr(1), rope * e, a.ptr(3), 1, rope * e, false},
    };
    mskv::ScatterSlots(planes, 2, a.ptr<void>(4), sd, T, nb, bs, distinct);
  })
}
