// AscendC CPU emulation: gert::InferShapeContext (CANN exe_graph/runtime/infer_shape_context.h). Input
// shapes are the origin shapes of the call; output shapes start empty (rank 0) and are written by the
// op's InferShape function.
#ifndef ASCENDC_SIM_EXE_GRAPH_INFER_SHAPE_CONTEXT_H_
#define ASCENDC_SIM_EXE_GRAPH_INFER_SHAPE_CONTEXT_H_

#include "exe_graph/runtime/shape.h"
#include "exe_graph/runtime/runtime_tensor.h"
#include "exe_graph/runtime/extended_kernel_context.h"

namespace gert {
class InferShapeContext : public ExtendedKernelContext {
 public:
  using ExtendedKernelContext::ExtendedKernelContext;
  const Shape* GetInputShape(const size_t index) const;
  const Tensor* GetInputTensor(const size_t index) const;
  const Tensor* GetOptionalInputTensor(const size_t ir_index) const { return GetDynamicInputTensor(ir_index, 0); }
  const Shape* GetOptionalInputShape(const size_t ir_index) const { return GetDynamicInputShape(ir_index, 0); }
  const Shape* GetDynamicInputShape(const size_t ir_index, const size_t relative_index) const;
  const Tensor* GetDynamicInputTensor(const size_t ir_index, const size_t relative_index) const;
  const Tensor* GetRequiredInputTensor(const size_t ir_index) const { return GetDynamicInputTensor(ir_index, 0); }
  const Shape* GetRequiredInputShape(const size_t ir_index) const { return GetDynamicInputShape(ir_index, 0); }
  Shape* GetOutputShape(const size_t index);
};
}  // namespace gert

#endif
