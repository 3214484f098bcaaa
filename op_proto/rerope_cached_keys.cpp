// MskvReropeCachedKeys: InferShape / InferDataType.
//
// The op rotates key_cache in place through its input address (inputs: key_cache, slot_mapping,
// old_positions, new_positions, cos_sin_cache); its only output is the int32 [1] "status" placeholder
// that MindSpore's ops.Custom allocates for an in-place primitive (docs/design.md, "In-place ops in CANN
// OpDefs"). The kernel never writes it.
#include "register/op_impl_registry.h"

namespace ops {
namespace {

ge::graphStatus InferShapeReropeCachedKeys(gert::InferShapeContext* context) {
  gert::Shape* status = context->GetOutputShape(0);
  if (status == nullptr) return ge::GRAPH_FAILED;
  status->SetDimNum(1);
  status->SetDim(0, 1);
  return ge::GRAPH_SUCCESS;
}

ge::graphStatus InferDataTypeReropeCachedKeys(gert::InferDataTypeContext* context) {
  return context->SetOutputDataType(0, ge::DT_INT32);
}

}  // namespace

IMPL_OP_INFERSHAPE(MskvReropeCachedKeys).InferShape(InferShapeReropeCachedKeys).InferDataType(InferDataTypeReropeCachedKeys);
}  // namespace ops
