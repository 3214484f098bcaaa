// AscendC CPU emulation: gert::TilingParseContext (CANN exe_graph/runtime/tiling_parse_context.h). The
// emulation runs an op's TilingParse function once before each tiling call, with an empty compiled
// JSON and a fresh compile-info object created by the type registered with TilingParse<T>().
#ifndef ASCENDC_SIM_EXE_GRAPH_TILING_PARSE_CONTEXT_H_
#define ASCENDC_SIM_EXE_GRAPH_TILING_PARSE_CONTEXT_H_

#include "exe_graph/runtime/extended_kernel_context.h"

namespace fe { class PlatFormInfos; }

namespace gert {
class TilingParseContext : public ExtendedKernelContext {
 public:
  using ExtendedKernelContext::ExtendedKernelContext;
  const char* GetCompiledJson() const;
  template <typename T>
  T* GetCompiledInfo() { return static_cast<T*>(GetCompiledInfoPtr()); }
  fe::PlatFormInfos* GetPlatformInfo() const;

 private:
  void* GetCompiledInfoPtr();
};
}  // namespace gert

#endif
