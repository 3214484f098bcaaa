// AscendC CPU emulation: register/op_def_registry.h with OP_ADD (CANN's single-library form: the OpDef
// is registered once; its infer/tiling functions are picked up from the definition when used).
#ifndef ASCENDC_SIM_REGISTER_OP_DEF_REGISTRY_H_
#define ASCENDC_SIM_REGISTER_OP_DEF_REGISTRY_H_

#include "register/op_def.h"
#include "register/op_def_factory.h"

#define OP_ADD(opType, ...)                                                                 \
  static int VAR_UNUSED g_##opType##_added = ::ops::OpDefFactory::OpDefRegister(           \
      #opType, [](const char* name) -> ::ops::OpDef { return ::ops::OpDef(opType(name)); })

#endif
