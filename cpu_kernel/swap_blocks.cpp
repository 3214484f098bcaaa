// swap_blocks, native CPU kernel ("cpu" backend; on the CPU both caches are host memory).
// Inputs: src_cache [src_blocks, ...], dst_cache [dst_blocks, ...] (same block shape and dtype;
// dst written in place), block_mapping int32/int64 [n, 2]; output: a dummy int32 [1]. Block
// block_mapping[i][0] of src_cache is copied to block block_mapping[i][1] of dst_cache, pairs in
// order (mskv::CopyBlockPairs); out-of-range ids are skipped.
#include "kv_copy.h"

using mskv::AotArgs;
using mskv::KernelError;

MSKV_AOT_EXPORT int MskvSwapBlocks(int nparam, void** params, int* ndims, int64_t** shapes, const char** dtypes,
                               void* /*stream*/, void* extra) {
  MSKV_AOT_GUARD("swap_blocks", {
    AotArgs a{nparam, params, ndims, shapes, dtypes, static_cast<mindspore::AotExtra*>(extra)};
    if (nparam != 4) throw KernelError("expected 3 inputs + 1 output, got " + std::to_string(nparam));
    if (a.rank(0) < 1 || a.rank(0) != a.rank(1)) throw KernelError("caches must have the same rank >= 1");
    for (int d = 1; d < a.rank(0); ++d) {
      if (a.dim(0, d) != a.dim(1, d)) throw KernelError("caches differ in block shape");
    }
    const size_t elem = mskv::DTypeSize(a.dtype(0));
    if (elem == 0 || a.dtype(0) != a.dtype(1)) throw KernelError("caches differ in dtype");
    if (a.rank(2) != 2 || a.dim(2, 1) != 2) throw KernelError("block_mapping must be [n, 2]");
    mskv::RequireIndexDType(a.dtype(2), "block_mapping");
    const int64_t src_nb = a.dim(0, 0), dst_nb = a.dim(1, 0);
    mskv::StrictCheckBlockMapping(a, a.ptr<void>(2), a.dtype(2), a.dim(2, 0), src_nb, dst_nb);
    const int64_t block_bytes = src_nb > 0 ? a.numel(0) / src_nb * static_cast<int64_t>(elem)
                                           : (dst_nb > 0 ? a.numel(1) / dst_nb * static_cast<int64_t>(elem) : 0);
    const mskv::BlockPlane plane{a.ptr(0), a.ptr(1)};
    mskv::CopyBlockPairs(&plane, 1, block_bytes, a.ptr<void>(2), a.dtype(2), a.dim(2, 0), src_nb, dst_nb);
  })
}
