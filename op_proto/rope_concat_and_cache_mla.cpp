// MskvRopeConcatAndCacheMla: InferShape / InferDataType.
//
// Outputs q_pe_out, k_pe_out, kv_c_out have the shapes and the dtype of q_pe, k_pe and kv_c (inputs 1, 2,
// 3); the caches kv_c_cache / k_pe_cache are written in place through their input addresses.
#include "register/op_impl_registry.h"

namespace ops {
namespace {

ge::graphStatus InferShapeRopeConcatAndCacheMla(gert::InferShapeContext* context) {
  for (size_t i = 0; i < 3; ++i) {
    const gert::Shape* in = context->GetInputShape(1 + i);
    gert::Shape* out = context->GetOutputShape(i);
    if (in == nullptr || out == nullptr) return ge::GRAPH_FAILED;
    *out = *in;
  }
  return ge::GRAPH_SUCCESS;
}

ge::graphStatus InferDataTypeRopeConcatAndCacheMla(gert::InferDataTypeContext* context) {
  const ge::DataType dt = context->GetInputDataType(1);
  for (size_t i = 0; i < 3; ++i) {
    if (context->SetOutputDataType(i, dt) != ge::GRAPH_SUCCESS) return ge::GRAPH_FAILED;
  }
  return ge::GRAPH_SUCCESS;
}

}  // namespace

IMPL_OP_INFERSHAPE(MskvRopeConcatAndCacheMla)
    .InferShape(InferShapeRopeConcatAndCacheMla)
    .InferDataType(InferDataTypeRopeConcatAndCacheMla);
}  // namespace ops
