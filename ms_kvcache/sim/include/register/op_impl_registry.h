// AscendC CPU emulation: gert::OpImplRegisterV2 and the IMPL_OP* registration macros of CANN's
// register/op_impl_registry.h. Registrations go to the emulation's per-op-type registry, merged with
// what the OpDef (SetInferShape / SetInferDataType / AICore().SetTiling) declares:
//   IMPL_OP_INFERSHAPE(Op).InferShape(f).InferDataType(g);
//   IMPL_OP_OPTILING(Op).Tiling(t).TilingParse<CompileInfo>(p);
//   IMPL_OP(Op).InferShape(f).Tiling(t);
#ifndef ASCENDC_SIM_REGISTER_OP_IMPL_REGISTRY_H_
#define ASCENDC_SIM_REGISTER_OP_IMPL_REGISTRY_H_

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "graph/types.h"
#include "graph/ascend_string.h"
#include "exe_graph/runtime/base_type.h"
#include "exe_graph/runtime/infer_shape_context.h"
#include "exe_graph/runtime/infer_datatype_context.h"
#include "exe_graph/runtime/tiling_context.h"
#include "exe_graph/runtime/tiling_parse_context.h"

#ifndef VAR_UNUSED
#define VAR_UNUSED __attribute__((unused))
#endif

namespace gert {
class InferShapeRangeContext;
class KernelContext;
class InferFormatContext;
class OpExecuteContext;

enum TilingPlacement { TILING_ON_HOST = 0, TILING_ON_AICPU = 1 };

class OpImplRegisterV2 {
 public:
  using InferShapeKernelFunc = UINT32 (*)(InferShapeContext*);
  using InferShapeRangeKernelFunc = UINT32 (*)(InferShapeRangeContext*);
  using TilingKernelFunc = UINT32 (*)(TilingContext*);
  using InferDataTypeKernelFunc = UINT32 (*)(InferDataTypeContext*);
  using GenSimplifiedKeyKernelFunc = UINT32 (*)(TilingContext*, ge::char_t*);
  using OpExecFunc = UINT32 (*)(OpExecuteContext*);
  using KernelFunc = UINT32 (*)(KernelContext* context);
  using TilingParseFunc = UINT32 (*)(TilingParseContext* context);
  using InferFormatFunc = UINT32 (*)(InferFormatContext* context);
  using CompileInfoCreatorFunc = void* (*)();
  using CompileInfoDeleterFunc = void (*)(void*);
  using OpType = ge::AscendString;

  explicit OpImplRegisterV2(const ge::char_t* op_type);
  OpImplRegisterV2(const OpImplRegisterV2& other) = default;
  OpImplRegisterV2(OpImplRegisterV2&& other) noexcept = default;
  OpImplRegisterV2& operator=(const OpImplRegisterV2&) = delete;
  OpImplRegisterV2& operator=(OpImplRegisterV2&&) = delete;
  ~OpImplRegisterV2() = default;

  OpImplRegisterV2& InferShape(InferShapeKernelFunc infer_shape_func);
  OpImplRegisterV2& InferShapeRange(InferShapeRangeKernelFunc) { return *this; }
  OpImplRegisterV2& InferDataType(InferDataTypeKernelFunc infer_datatype_func);
  OpImplRegisterV2& InferOutDataTypeSameWithFirstInput();
  OpImplRegisterV2& Tiling(TilingKernelFunc tiling_func, size_t max_tiling_data_size = 2048);
  OpImplRegisterV2& GenSimplifiedKey(GenSimplifiedKeyKernelFunc) { return *this; }
  OpImplRegisterV2& PrivateAttr(const ge::char_t*) { return *this; }
  OpImplRegisterV2& PrivateAttr(const ge::char_t*, int64_t) { return *this; }
  OpImplRegisterV2& PrivateAttr(const ge::char_t*, const std::vector<int64_t>&) { return *this; }
  OpImplRegisterV2& PrivateAttr(const ge::char_t*, const ge::char_t*) { return *this; }
  OpImplRegisterV2& PrivateAttr(const ge::char_t*, ge::float32_t) { return *this; }
  OpImplRegisterV2& PrivateAttr(const ge::char_t*, bool) { return *this; }
  template <typename T>
  OpImplRegisterV2& TilingParse(KernelFunc const tiling_parse_func) {
    return TilingParseImpl(reinterpret_cast<TilingParseFunc>(tiling_parse_func), CreateCompileInfo<T>,
                           DeleteCompileInfo<T>);
  }
  template <typename T>
  OpImplRegisterV2& TilingParse(TilingParseFunc const tiling_parse_func) {
    return TilingParseImpl(tiling_parse_func, CreateCompileInfo<T>, DeleteCompileInfo<T>);
  }
  OpImplRegisterV2& InputsDataDependency(std::initializer_list<int32_t>) { return *this; }
  OpImplRegisterV2& OpExecuteFunc(OpExecFunc) { return *this; }
  OpImplRegisterV2& HostInputs(std::initializer_list<int32_t>) { return *this; }
  OpImplRegisterV2& TilingInputsDataDependency(std::initializer_list<int32_t>) { return *this; }
  OpImplRegisterV2& TilingInputsDataDependency(std::initializer_list<int32_t>, std::initializer_list<TilingPlacement>) {
    return *this;
  }
  OpImplRegisterV2& OutputShapeDependOnCompute(std::initializer_list<int32_t>) { return *this; }
  OpImplRegisterV2& InferFormat(InferFormatFunc) { return *this; }
  OpImplRegisterV2& NullableOutputs(std::initializer_list<int32_t>) { return *this; }

 private:
  OpImplRegisterV2& TilingParseImpl(TilingParseFunc f, CompileInfoCreatorFunc c, CompileInfoDeleterFunc d);
  template <typename T>
  static void* CreateCompileInfo() { return new T(); }
  template <typename T>
  static void DeleteCompileInfo(void* const obj) { delete reinterpret_cast<T*>(obj); }
  std::string op_type_;
};
}  // namespace gert

#define IMPL_OP_COUNTER(op_type, name, counter) \
  static gert::OpImplRegisterV2 VAR_UNUSED name##counter = gert::OpImplRegisterV2(#op_type)
#define IMPL_OP_COUNTER_NUMBER(op_type, name, counter) IMPL_OP_COUNTER(op_type, name, counter)
#define IMPL_OP(op_type) IMPL_OP_COUNTER_NUMBER(op_type, op_impl_register_##op_type, __COUNTER__)
#define IMPL_OP_DEFAULT() IMPL_OP(DefaultImpl)
#define IMPL_OP_INFERSHAPE(op_type) \
  static gert::OpImplRegisterV2 VAR_UNUSED op_impl_register_infershape_##op_type = gert::OpImplRegisterV2(#op_type)
#define IMPL_OP_OPTILING(op_type) \
  static gert::OpImplRegisterV2 VAR_UNUSED op_impl_register_optiling_##op_type = gert::OpImplRegisterV2(#op_type)

#endif  // ASCENDC_SIM_REGISTER_OP_IMPL_REGISTRY_H_
