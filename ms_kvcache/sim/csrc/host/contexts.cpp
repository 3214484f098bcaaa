// The gert contexts (tiling, tiling parse, infer shape, infer datatype) over simhost::detail::ContextData.
#include "exe_graph/runtime/infer_datatype_context.h"
#include "exe_graph/runtime/infer_shape_context.h"
#include "exe_graph/runtime/tiling_context.h"
#include "exe_graph/runtime/tiling_parse_context.h"
#include "sim_host_internal.h"

namespace simhost {
namespace detail {
ContextData::ContextData() {
  node_info.reset(new gert::ComputeNodeInfo(this));
  runtime_attrs.reset(new gert::RuntimeAttrs(&attrs));
  workspace_holder = gert::ContinuousVector::Create<size_t>(kWorkspaceCapacity);
}
}  // namespace detail
}  // namespace simhost

namespace gert {
using simhost::detail::ContextData;

// ------------------------------------------------------------------------------------ RuntimeAttrs
size_t RuntimeAttrs::GetAttrNum() const { return store_ == nullptr ? 0 : store_->ptrs.size(); }
const void* RuntimeAttrs::GetPointerByIndex(size_t index) const {
  if (store_ == nullptr || index >= store_->ptrs.size()) return nullptr;
  return store_->ptrs[index];
}

// ------------------------------------------------------------------------------------ ComputeNodeInfo
const ge::char_t* ComputeNodeInfo::GetNodeType() const { return d_->op_type.c_str(); }
const ge::char_t* ComputeNodeInfo::GetNodeName() const { return d_->node_name.c_str(); }
size_t ComputeNodeInfo::GetIrInputsNum() const { return d_->ir_inputs.size(); }
size_t ComputeNodeInfo::GetIrOutputsNum() const { return d_->ir_outputs.size(); }
size_t ComputeNodeInfo::GetInputsNum() const { return d_->in_desc.size(); }
size_t ComputeNodeInfo::GetOutputsNum() const { return d_->out_desc.size(); }
const AnchorInstanceInfo* ComputeNodeInfo::GetInputInstanceInfo(const size_t ir_index) const {
  return ir_index < d_->ir_inputs.size() ? &d_->ir_inputs[ir_index] : nullptr;
}
const AnchorInstanceInfo* ComputeNodeInfo::GetOutputInstanceInfo(const size_t ir_index) const {
  return ir_index < d_->ir_outputs.size() ? &d_->ir_outputs[ir_index] : nullptr;
}
const CompileTimeTensorDesc* ComputeNodeInfo::GetInputTdInfo(const size_t index) const {
  return index < d_->in_desc.size() ? &d_->in_desc[index] : nullptr;
}
const CompileTimeTensorDesc* ComputeNodeInfo::GetOutputTdInfo(const size_t index) const {
  return index < d_->out_desc.size() ? &d_->out_desc[index] : nullptr;
}
const RuntimeAttrs* ComputeNodeInfo::GetAttrs() const { return d_->runtime_attrs.get(); }

// ------------------------------------------------------------------------------------ ExtendedKernelContext
long ExtendedKernelContext::InputInstance(size_t ir_index, size_t relative_index) const {
  if (ir_index >= d_->ir_inputs.size()) return -1;
  const auto& info = d_->ir_inputs[ir_index];
  if (relative_index >= info.GetInstanceNum()) return -1;
  return static_cast<long>(info.GetInstanceStart() + relative_index);
}
const CompileTimeTensorDesc* ExtendedKernelContext::GetInputDesc(const size_t index) const {
  return d_->node_info->GetInputTdInfo(index);
}
const CompileTimeTensorDesc* ExtendedKernelContext::GetOptionalInputDesc(const size_t ir_index) const {
  return GetDynamicInputDesc(ir_index, 0);
}
const CompileTimeTensorDesc* ExtendedKernelContext::GetRequiredInputDesc(const size_t ir_index) const {
  return GetDynamicInputDesc(ir_index, 0);
}
const CompileTimeTensorDesc* ExtendedKernelContext::GetDynamicInputDesc(const size_t ir_index,
                                                                         const size_t relative_index) const {
  const long i = InputInstance(ir_index, relative_index);
  return i < 0 ? nullptr : &d_->in_desc[static_cast<size_t>(i)];
}
const CompileTimeTensorDesc* ExtendedKernelContext::GetOutputDesc(const size_t index) const {
  return d_->node_info->GetOutputTdInfo(index);
}
const AnchorInstanceInfo* ExtendedKernelContext::GetIrInputInstanceInfo(const size_t ir_index) const {
  return d_->node_info->GetInputInstanceInfo(ir_index);
}
const AnchorInstanceInfo* ExtendedKernelContext::GetIrOutputInstanceInfo(const size_t ir_index) const {
  return d_->node_info->GetOutputInstanceInfo(ir_index);
}
size_t ExtendedKernelContext::GetComputeNodeInputNum() const { return d_->in_desc.size(); }
size_t ExtendedKernelContext::GetComputeNodeOutputNum() const { return d_->out_desc.size(); }
const RuntimeAttrs* ExtendedKernelContext::GetAttrs() const { return d_->runtime_attrs.get(); }
const ge::char_t* ExtendedKernelContext::GetNodeType() const { return d_->op_type.c_str(); }
const ge::char_t* ExtendedKernelContext::GetNodeName() const { return d_->node_name.c_str(); }
const ComputeNodeInfo* ExtendedKernelContext::GetComputeNodeInfo() const { return d_->node_info.get(); }
const ge::char_t* ExtendedKernelContext::GetKernelName() const { return d_->node_name.c_str(); }
const ge::char_t* ExtendedKernelContext::GetKernelType() const { return d_->op_type.c_str(); }

// ------------------------------------------------------------------------------------ TilingContext
const void* TilingContext::GetCompileInfo() const { return d_->compile_info; }
const StorageShape* TilingContext::GetInputShape(const size_t index) const {
  return index < d_->in_shape.size() ? &d_->in_shape[index] : nullptr;
}
const Tensor* TilingContext::GetInputTensor(const size_t index) const {
  return index < d_->in_tensor.size() ? &d_->in_tensor[index] : nullptr;
}
const Tensor* TilingContext::GetDynamicInputTensor(const size_t ir_index, const size_t relative_index) const {
  const long i = InputInstance(ir_index, relative_index);
  return i < 0 ? nullptr : &d_->in_tensor[static_cast<size_t>(i)];
}
const StorageShape* TilingContext::GetDynamicInputShape(const size_t ir_index, const size_t relative_index) const {
  const long i = InputInstance(ir_index, relative_index);
  return i < 0 ? nullptr : &d_->in_shape[static_cast<size_t>(i)];
}
const StorageShape* TilingContext::GetOutputShape(const size_t index) const {
  return index < d_->out_shape.size() ? &d_->out_shape[index] : nullptr;
}
ge::graphStatus TilingContext::SetTilingKey(const uint64_t tiling_key) {
  d_->tiling_key = tiling_key;
  d_->tiling_key_set = true;
  return ge::GRAPH_SUCCESS;
}
uint64_t TilingContext::GetTilingKey() const { return d_->tiling_key; }
ge::graphStatus TilingContext::SetScheduleMode(const uint32_t schedule_mode) {
  d_->schedule_mode = schedule_mode;
  return ge::GRAPH_SUCCESS;
}
uint32_t TilingContext::GetScheduleMode() const { return d_->schedule_mode; }
ge::graphStatus TilingContext::SetSimdNumBlocks(const uint32_t num_blocks) {
  d_->block_dim = num_blocks;
  d_->block_dim_set = true;
  return ge::GRAPH_SUCCESS;
}
uint32_t TilingContext::GetSimdNumBlocks() const { return d_->block_dim; }
ge::graphStatus TilingContext::SetAicpuNumBlocks(uint32_t num_blocks) {
  d_->aicpu_block_dim = num_blocks;
  return ge::GRAPH_SUCCESS;
}
uint32_t TilingContext::GetAicpuNumBlocks() const { return d_->aicpu_block_dim; }
ge::graphStatus TilingContext::SetTilingCond(int32_t tiling_cond) {
  d_->tiling_cond = tiling_cond;
  return ge::GRAPH_SUCCESS;
}
int32_t TilingContext::GetTilingCond() const { return d_->tiling_cond; }
ge::graphStatus TilingContext::SetNeedAtomic(const bool atomic) {
  d_->need_atomic = atomic;
  return ge::GRAPH_SUCCESS;
}
bool TilingContext::NeedAtomic() const { return d_->need_atomic; }
TilingData* TilingContext::GetRawTilingData() { return d_->tiling_data; }
size_t* TilingContext::GetWorkspaceSizes(const size_t workspace_count) {
  auto* v = reinterpret_cast<TypedContinuousVector<size_t>*>(d_->workspace_holder.get());
  const size_t old = v->GetSize();
  if (v->SetSize(workspace_count) != ge::GRAPH_SUCCESS) return nullptr;
  for (size_t i = old; i < workspace_count; ++i) v->MutableData()[i] = simhost::detail::kWorkspaceUnset;
  d_->workspace_requested = true;
  return v->MutableData();
}
size_t TilingContext::GetWorkspaceNum() const {
  return reinterpret_cast<const TypedContinuousVector<size_t>*>(d_->workspace_holder.get())->GetSize();
}
fe::PlatFormInfos* TilingContext::GetPlatformInfo() const { return d_->platform; }
int32_t TilingContext::GetDeterministic() const { return 0; }
int32_t TilingContext::GetDeterministicLevel() const { return 0; }
ge::graphStatus TilingContext::SetDynUBufSize(const uint32_t dyn_ubuf_size) {
  d_->dyn_ubuf_size = dyn_ubuf_size;
  return ge::GRAPH_SUCCESS;
}
uint32_t TilingContext::GetDynUBufSize() const { return d_->dyn_ubuf_size; }

// ------------------------------------------------------------------------------------ TilingParseContext
const char* TilingParseContext::GetCompiledJson() const { return "{}"; }
void* TilingParseContext::GetCompiledInfoPtr() { return d_->compile_info; }
fe::PlatFormInfos* TilingParseContext::GetPlatformInfo() const { return d_->platform; }

// ------------------------------------------------------------------------------------ InferShapeContext
const Shape* InferShapeContext::GetInputShape(const size_t index) const {
  return index < d_->in_shape.size() ? &d_->in_shape[index].GetOriginShape() : nullptr;
}
const Tensor* InferShapeContext::GetInputTensor(const size_t index) const {
  return index < d_->in_tensor.size() ? &d_->in_tensor[index] : nullptr;
}
const Shape* InferShapeContext::GetDynamicInputShape(const size_t ir_index, const size_t relative_index) const {
  const long i = InputInstance(ir_index, relative_index);
  return i < 0 ? nullptr : &d_->in_shape[static_cast<size_t>(i)].GetOriginShape();
}
const Tensor* InferShapeContext::GetDynamicInputTensor(const size_t ir_index, const size_t relative_index) const {
  const long i = InputInstance(ir_index, relative_index);
  return i < 0 ? nullptr : &d_->in_tensor[static_cast<size_t>(i)];
}
Shape* InferShapeContext::GetOutputShape(const size_t index) {
  return index < d_->infer_out_shape.size() ? &d_->infer_out_shape[index] : nullptr;
}

// ------------------------------------------------------------------------------------ InferDataTypeContext
ge::DataType InferDataTypeContext::GetInputDataType(const size_t index) const {
  return index < d_->in_desc.size() ? d_->in_desc[index].GetDataType() : ge::DT_UNDEFINED;
}
ge::DataType InferDataTypeContext::GetDynamicInputDataType(const size_t ir_index, const size_t relative_index) const {
  const long i = InputInstance(ir_index, relative_index);
  return i < 0 ? ge::DT_UNDEFINED : d_->in_desc[static_cast<size_t>(i)].GetDataType();
}
ge::DataType InferDataTypeContext::GetOutputDataType(const size_t index) const {
  return index < d_->infer_out_dtype.size() ? d_->infer_out_dtype[index] : ge::DT_UNDEFINED;
}
ge::graphStatus InferDataTypeContext::SetOutputDataType(const size_t index, const ge::DataType datatype) {
  if (index >= d_->infer_out_dtype.size()) return ge::GRAPH_FAILED;
  d_->infer_out_dtype[index] = datatype;
  return ge::GRAPH_SUCCESS;
}
}  // namespace gert
