// InferShape / InferDataType of the fused RoPE writes. GQA (MskvRopeReshapeAndCache, MskvRopeReshapeAndCacheMerged,
// MskvRopeReshapeAndCacheQuant; InferShape / InferDataType): query_out and key_out have the shapes and the dtype of query (input 1) and key
// (input 2); the caches (and scale caches) are written in place through their input addresses (docs/design.md,
// "In-place ops in CANN OpDefs": an op with real outputs needs no status placeholder). MLA
// (MskvRopeConcatAndCacheMla(Quant); InferShapeN<3> / InferDataTypeN<3>): q_pe_out, k_pe_out, kv_c_out like q_pe,
// k_pe, kv_c.
#ifndef MS_KVCACHE_OP_PROTO_ROPE_CACHE_INFER_H_
#define MS_KVCACHE_OP_PROTO_ROPE_CACHE_INFER_H_

#include "register/op_impl_registry.h"

namespace ops {
namespace rope_cache_infer {

// Outputs 0 .. N-1 shaped and typed like inputs 1 .. N (the MLA writes: N = 3, q_pe / k_pe / kv_c).
template <size_t N>
inline ge::graphStatus InferShapeN(gert::InferShapeContext* context) {
  for (size_t i = 0; i < N; ++i) {
    const gert::Shape* in = context->GetInputShape(1 + i);
    gert::Shape* out = context->GetOutputShape(i);
    if (in == nullptr || out == nullptr) return ge::GRAPH_FAILED;
    *out = *in;
  }
  return ge::GRAPH_SUCCESS;
}

template <size_t N>
inline ge::graphStatus InferDataTypeN(gert::InferDataTypeContext* context) {
  const ge::DataType dt = context->GetInputDataType(1);
  for (size_t i = 0; i < N; ++i) {
    if (context->SetOutputDataType(i, dt) != ge::GRAPH_SUCCESS) return ge::GRAPH_FAILED;
  }
  return ge::GRAPH_SUCCESS;
}

inline ge::graphStatus InferShape(gert::InferShapeContext* context) { return InferShapeN<2>(context); }
inline ge::graphStatus InferDataType(gert::InferDataTypeContext* context) { return InferDataTypeN<2>(context); }

}  // namespace rope_cache_infer
}  // namespace ops

#endif  // MS_KVCACHE_OP_PROTO_ROPE_CACHE_INFER_H_
