// MskvMultiLayerKvTransferQuant: InferShape / InferDataType.
//
// The op writes its caches (h2d) or its buffer / host blocks (d2h) in place through their input
// addresses (inputs: see op_host/multi_layer_kv_transfer_quant.cpp); its only output is the int32 [1] "status" placeholder that
// MindSpore's ops.Custom allocates for an in-place primitive (docs/design.md, "In-place ops in CANN
// OpDefs"). The kernel never writes it.
#include "register/op_impl_registry.h"

namespace ops {
namespace {

ge::graphStatus InferShapeMultiLayerKvTransferQuant(gert::InferShapeContext* context) {
  gert::Shape* status = context->GetOutputShape(0);
  if (status == nullptr) return ge::GRAPH_FAILED;
  status->SetDimNum(1);
  status->SetDim(0, 1);
  return ge::GRAPH_SUCCESS;
}

ge::graphStatus InferDataTypeMultiLayerKvTransferQuant(gert::InferDataTypeContext* context) {
  return context->SetOutputDataType(0, ge::DT_INT32);
}

}  // namespace

IMPL_OP_INFERSHAPE(MskvMultiLayerKvTransferQuant).InferShape(InferShapeMultiLayerKvTransferQuant).InferDataType(InferDataTypeMultiLayerKvTransferQuant);
}  // namespace ops
