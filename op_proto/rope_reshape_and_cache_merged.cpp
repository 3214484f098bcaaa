// MskvRopeReshapeAndCacheMerged: InferShape / InferDataType (op_proto/rope_cache_infer.h: query_out / key_out
// shaped and typed like query and key; the caches are written in place through their input addresses).
#include "register/op_impl_registry.h"
#include "rope_cache_infer.h"

namespace ops {
IMPL_OP_INFERSHAPE(MskvRopeReshapeAndCacheMerged)
    .InferShape(rope_cache_infer::InferShape)
    .InferDataType(rope_cache_infer::InferDataType);
}  // namespace ops
