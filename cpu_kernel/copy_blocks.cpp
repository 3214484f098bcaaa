// copy_blocks, native CPU kernel ("cpu" backend).
// Inputs: key_caches[0..L-1], value_caches[0..L-1] (2L caches of one shape [num_blocks, ...] and
// dtype, written in place), block_mapping int32/int64 [n, 2]; output: a dummy int32 [1]. The lists
// arrive flattened, their lengths in dyn_input_sizes (mskv::InputSpans). For every cache, block src
// is copied to block dst for each row (src, dst) of block_mapping, pairs applied in order (mskv::CopyBlockPairs);
// pairs with an id outside [0, num_blocks) are skipped (Python rejects them before launch).
#include <vector>

#include "kv_copy.h"

using mskv::AotArgs;
using mskv::KernelError;

MSKV_AOT_EXPORT int MskvCopyBlocks(int nparam, void** params, int* ndims, int64_t** shapes, const char** dtypes,
                               void* /*stream*/, void* extra) {
  MSKV_AOT_GUARD("copy_blocks", {
    AotArgs a{nparam, params, ndims, shapes, dtypes, static_cast<mindspore::AotExtra*>(extra)};
    const std::vector<mskv::InputSpan> in = mskv::InputSpans(a, 3);
    if (in[0].count != in[1].count || in[1].first != in[0].first + in[0].count)
      throw KernelError("expected as many value caches as key caches, got " + std::to_string(in[0].count) + " and " +
                        std::to_string(in[1].count));
    const int ncaches = in[0].count + in[1].count;
    const int bm = in[2].first;
    if (a.rank(0) < 1) throw KernelError("caches must have rank >= 1");
    const mskv::DType dt = a.dtype(0);
    const size_t elem = mskv::DTypeSize(dt);
    if (elem == 0) throw KernelError("unsupported cache dtype");
    for (int c = 1; c < ncaches; ++c) {
      if (a.dtype(c) != dt || a.rank(c) != a.rank(0)) throw KernelError("caches differ in dtype or rank");
      for (int d = 0; d < a.rank(0); ++d) {
        if (a.dim(c, d) != a.dim(0, d)) throw KernelError("caches differ in shape");
      }
    }
    if (a.rank(bm) != 2 || a.dim(bm, 1) != 2) throw KernelError("block_mapping must be [n, 2]");
    mskv::RequireIndexDType(a.dtype(bm), "block_mapping");
    const int64_t nb = a.dim(0, 0);
    mskv::StrictCheckBlockMapping(a, a.ptr<void>(bm), a.dtype(bm), a.dim(bm, 0), nb, nb);
    const int64_t block_bytes = nb > 0 ? a.numel(0) / nb * static_cast<int64_t>(elem) : 0;
    std::vector<mskv::BlockPlane> planes(static_cast<size_t>(ncaches));
    for (int c = 0; c < ncaches; ++c) planes[c] = {a.ptr(c), a.ptr(c)};
    mskv::CopyBlockPairs(planes.data(), ncaches, block_bytes, a.ptr<void>(bm), a.dtype(bm), a.dim(bm, 0), nb, nb);
  })
}
