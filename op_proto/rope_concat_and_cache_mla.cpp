// MskvRopeConcatAndCacheMla: InferShape / InferDataType (op_proto/rope_cache_infer.h: q_pe_out, k_pe_out, kv_c_out shaped and
// typed like q_pe, k_pe and kv_c; the caches are written in place through their input addresses).
#include "register/op_impl_registry.h"
#include "rope_cache_infer.h"

namespace ops {
IMPL_OP_INFERSHAPE(MskvRopeConcatAndCacheMla)
    .InferShape(rope_cache_infer::InferShapeN<3>)
    .InferDataType(rope_cache_infer::InferDataTypeN<3>);
}  // namespace ops
