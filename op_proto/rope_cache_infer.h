// InferShape / InferDataType of the GQA fused RoPE writes (MskvRopeReshapeAndCache, MskvRopeReshapeAndCacheMerged,
// MskvRopeReshapeAndCacheQuant): query_out and key_out have the shapes and the dtype of query (input 1) and key
// (input 2); the caches (and scale caches) are written in place through their input addresses (docs/design.md,
// "In-place ops in CANN OpDefs": an op with real outputs needs no status placeholder).
#ifndef MS_KVCACHE_OP_PROTO_ROPE_CACHE_INFER_H_
#define MS_KVCACHE_OP_PROTO_ROPE_CACHE_INFER_H_

#include "register/op_impl_registry.h"

namespace ops {
namespace rope_cache_infer {

inline ge::graphStatus InferShape(gert::InferShapeContext* context) {
  const gert::Shape* query = context->GetInputShape(1);
  const gert::Shape* key = context->GetInputShape(2);
  gert::Shape* queryOut = context->GetOutputShape(0);
  gert::Shape* keyOut = context->GetOutputShape(1);
  if (query == nullptr || key == nullptr || queryOut == nullptr || keyOut == nullptr) return ge::GRAPH_FAILED;
  *queryOut = *query;
  *keyOut = *key;
  return ge::GRAPH_SUCCESS;
}

inline ge::graphStatus InferDataType(gert::InferDataTypeContext* context) {
  const ge::DataType dt = context->GetInputDataType(1);
  if (context->SetOutputDataType(0, dt) != ge::GRAPH_SUCCESS) return ge::GRAPH_FAILED;
  return context->SetOutputDataType(1, dt);
}

}  // namespace rope_cache_infer
}  // namespace ops

#endif  // MS_KVCACHE_OP_PROTO_ROPE_CACHE_INFER_H_
