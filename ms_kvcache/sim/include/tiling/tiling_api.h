// AscendC CPU emulation: tiling/tiling_api.h as op_host code includes it. Only the tiling data macros and
// the platform API are provided (no matmul / high-level API tiling).
#ifndef ASCENDC_SIM_TILING_TILING_API_H_
#define ASCENDC_SIM_TILING_TILING_API_H_
#include "register/tilingdata_base.h"
#include "tiling/platform/platform_ascendc.h"
#endif
