// AscendC CPU emulation: ops::OpDefFactory (CANN register/op_def_factory.h), the registry OP_ADD fills.
#ifndef ASCENDC_SIM_REGISTER_OP_DEF_FACTORY_H_
#define ASCENDC_SIM_REGISTER_OP_DEF_FACTORY_H_

#include <functional>
#include "register/op_def.h"

namespace ops {
using OpDefCreator = std::function<OpDef(const char*)>;
class OpDefFactory {
 public:
  // Registers (or, for a name already registered, replaces) the creator of an op definition. The
  // definition is created and validated on first use (simhost::GetOpDef). Returns 0.
  static int OpDefRegister(const char* name, OpDefCreator creator);
};
}  // namespace ops

#endif
