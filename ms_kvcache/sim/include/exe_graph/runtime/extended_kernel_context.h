// AscendC CPU emulation: gert::ExtendedKernelContext, the common base of the tiling / infer-shape /
// infer-datatype contexts (CANN exe_graph/runtime/extended_kernel_context.h). Every accessor returns
// nullptr for an index out of range or an absent optional input, as CANN does.
#ifndef ASCENDC_SIM_EXE_GRAPH_EXTENDED_KERNEL_CONTEXT_H_
#define ASCENDC_SIM_EXE_GRAPH_EXTENDED_KERNEL_CONTEXT_H_

#include <cstddef>

#include "graph/types.h"
#include "exe_graph/runtime/compute_node_info.h"
#include "exe_graph/runtime/runtime_attrs.h"

namespace gert {
class ExtendedKernelContext {
 public:
  explicit ExtendedKernelContext(simhost::detail::ContextData* d) : d_(d) {}
  ExtendedKernelContext(const ExtendedKernelContext&) = delete;
  ExtendedKernelContext& operator=(const ExtendedKernelContext&) = delete;

  const CompileTimeTensorDesc* GetInputDesc(const size_t index) const;
  const CompileTimeTensorDesc* GetOptionalInputDesc(const size_t ir_index) const;
  const CompileTimeTensorDesc* GetRequiredInputDesc(const size_t ir_index) const;
  const CompileTimeTensorDesc* GetDynamicInputDesc(const size_t ir_index, const size_t relative_index) const;
  const CompileTimeTensorDesc* GetOutputDesc(const size_t index) const;
  const AnchorInstanceInfo* GetIrInputInstanceInfo(const size_t ir_index) const;
  const AnchorInstanceInfo* GetIrOutputInstanceInfo(const size_t ir_index) const;
  size_t GetComputeNodeInputNum() const;
  size_t GetComputeNodeOutputNum() const;
  const RuntimeAttrs* GetAttrs() const;
  const ge::char_t* GetNodeType() const;
  const ge::char_t* GetNodeName() const;
  const ComputeNodeInfo* GetComputeNodeInfo() const;
  const ge::char_t* GetKernelName() const;
  const ge::char_t* GetKernelType() const;

 protected:
  // instance index of (ir_index, relative_index) or -1 when absent / out of range
  long InputInstance(size_t ir_index, size_t relative_index) const;
  simhost::detail::ContextData* d_;
};
}  // namespace gert

#endif
