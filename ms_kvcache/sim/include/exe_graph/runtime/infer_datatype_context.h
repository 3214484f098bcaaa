// AscendC CPU emulation: gert::InferDataTypeContext (CANN exe_graph/runtime/infer_datatype_context.h).
// Output dtypes start as DT_UNDEFINED and are written by the op's InferDataType function.
#ifndef ASCENDC_SIM_EXE_GRAPH_INFER_DATATYPE_CONTEXT_H_
#define ASCENDC_SIM_EXE_GRAPH_INFER_DATATYPE_CONTEXT_H_

#include "graph/types.h"
#include "exe_graph/runtime/extended_kernel_context.h"

namespace gert {
class InferDataTypeContext : public ExtendedKernelContext {
 public:
  using ExtendedKernelContext::ExtendedKernelContext;
  ge::DataType GetInputDataType(const size_t index) const;
  ge::DataType GetOptionalInputDataType(const size_t ir_index) const { return GetDynamicInputDataType(ir_index, 0); }
  ge::DataType GetDynamicInputDataType(const size_t ir_index, const size_t relative_index) const;
  ge::DataType GetRequiredInputDataType(const size_t ir_index) const { return GetDynamicInputDataType(ir_index, 0); }
  ge::DataType GetOutputDataType(const size_t index) const;
  ge::graphStatus SetOutputDataType(const size_t index, const ge::DataType datatype);
};
}  // namespace gert

#endif
