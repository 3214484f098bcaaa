// Test op: shape/dtype inference registered the way CANN op_proto code does it.
#include "register/op_impl_registry.h"

namespace ops {
static ge::graphStatus InferShapeSimHostAdd(gert::InferShapeContext* context) {
  const gert::Shape* x = context->GetInputShape(0);
  gert::Shape* z = context->GetOutputShape(0);
  if (x == nullptr || z == nullptr) return ge::GRAPH_FAILED;
  *z = *x;
  return ge::GRAPH_SUCCESS;
}
static ge::graphStatus InferDataTypeSimHostAdd(gert::InferDataTypeContext* context) {
  return context->SetOutputDataType(0, context->GetInputDataType(0));
}
IMPL_OP_INFERSHAPE(SimHostAdd).InferShape(InferShapeSimHostAdd).InferDataType(InferDataTypeSimHostAdd);
}  // namespace ops
