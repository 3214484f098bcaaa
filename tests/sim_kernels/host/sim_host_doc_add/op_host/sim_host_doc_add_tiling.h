// Test op in the exact shape of CANN's documented custom-op template (msopgen "AddCustom" style):
// a TilingData class literally named TilingData, fields set with set_*, SaveToBuffer + SetDataSize.
#ifndef SIM_HOST_DOC_ADD_TILING_H
#define SIM_HOST_DOC_ADD_TILING_H
#include "register/tilingdata_base.h"

namespace optiling {
BEGIN_TILING_DATA_DEF(TilingData)
TILING_DATA_FIELD_DEF(uint32_t, totalLength);
TILING_DATA_FIELD_DEF(uint32_t, tileNum);
END_TILING_DATA_DEF;

REGISTER_TILING_DATA_CLASS(SimHostDocAdd, TilingData)
}  // namespace optiling
#endif
