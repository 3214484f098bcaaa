// MskvRopeReshapeAndCacheMerged: InferShape / InferDataType.
//
// Outputs: query_out and key_out have the shapes and the dtype of query (input 1) and key (input 2); the
// caches key_cache / value_cache are written in place through their input addresses (docs/design.md,
// "In-place ops in CANN OpDefs": an op with real outputs needs no status placeholder).
#include "register/op_impl_registry.h"

namespace ops {
namespace {

ge::graphStatus InferShapeRopeReshapeAndCacheMerged(gert::InferShapeContext* context) {
  const gert::Shape* query = context->GetInputShape(1);
  const gert::Shape* key = context->GetInputShape(2);
  gert::Shape* queryOut = context->GetOutputShape(0);
  gert::Shape* keyOut = context->GetOutputShape(1);
  if (query == nullptr || key == nullptr || queryOut == nullptr || keyOut == nullptr) return ge::GRAPH_FAILED;
  *queryOut = *query;
  *keyOut = *key;
  return ge::GRAPH_SUCCESS;
}

ge::graphStatus InferDataTypeRopeReshapeAndCacheMerged(gert::InferDataTypeContext* context) {
  const ge::DataType dt = context->GetInputDataType(1);
  if (context->SetOutputDataType(0, dt) != ge::GRAPH_SUCCESS) return ge::GRAPH_FAILED;
  return context->SetOutputDataType(1, dt);
}

}  // namespace

IMPL_OP_INFERSHAPE(MskvRopeReshapeAndCacheMerged)
    .InferShape(InferShapeRopeReshapeAndCacheMerged)
    .InferDataType(InferDataTypeRopeReshapeAndCacheMerged);
}  // namespace ops
