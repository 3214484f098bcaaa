// MskvConcatAndCacheMlaQuant: InferShape / InferDataType.
//
// The op writes its caches in place through their input addresses (inputs: kv_c, k_pe, kv_c_cache,
// k_pe_cache, slot_mapping and the scales; dynamic mode: the scale caches too); its only output is the
// int32 [1] "status" placeholder that MindSpore's
// ops.Custom allocates for an in-place primitive (docs/design.md, "In-place ops in CANN OpDefs"). The
// kernel never writes it.
#include "register/op_impl_registry.h"

namespace ops {
namespace {

ge::graphStatus InferShapeConcatAndCacheMlaQuant(gert::InferShapeContext* context) {
  gert::Shape* status = context->GetOutputShape(0);
  if (status == nullptr) return ge::GRAPH_FAILED;
  status->SetDimNum(1);
  status->SetDim(0, 1);
  return ge::GRAPH_SUCCESS;
}

ge::graphStatus InferDataTypeConcatAndCacheMlaQuant(gert::InferDataTypeContext* context) {
  return context->SetOutputDataType(0, ge::DT_INT32);
}

}  // namespace

IMPL_OP_INFERSHAPE(MskvConcatAndCacheMlaQuant).InferShape(InferShapeConcatAndCacheMlaQuant).InferDataType(InferDataTypeConcatAndCacheMlaQuant);
}  // namespace ops
