// Test op of the emulated CANN host API (tests/test_sim_host_*.py): tiling data with a mix of field
// types, an array and a nested struct, written exactly as CANN documents TilingData definitions.
#ifndef SIM_HOST_ADD_TILING_H
#define SIM_HOST_ADD_TILING_H
#include "register/tilingdata_base.h"

namespace optiling {
BEGIN_TILING_DATA_DEF(SimHostAddSplit)
  TILING_DATA_FIELD_DEF(uint32_t, blockFactor);
  TILING_DATA_FIELD_DEF(uint32_t, tailFactor);
  TILING_DATA_FIELD_DEF(uint8_t, usedCores);
END_TILING_DATA_DEF;
REGISTER_TILING_DATA_CLASS(SimHostAddSplitOp, SimHostAddSplit)

BEGIN_TILING_DATA_DEF(SimHostAddTilingData)
  TILING_DATA_FIELD_DEF(uint8_t, hasBias);
  TILING_DATA_FIELD_DEF(uint32_t, totalLength);
  TILING_DATA_FIELD_DEF(uint64_t, tileElems);
  TILING_DATA_FIELD_DEF(float, alpha);
  TILING_DATA_FIELD_DEF(int16_t, dtypeCode);
  TILING_DATA_FIELD_DEF_ARR(uint8_t, 3, flags);
  TILING_DATA_FIELD_DEF(int64_t, ubBytes);
  TILING_DATA_FIELD_DEF_STRUCT(SimHostAddSplit, split);
  TILING_DATA_FIELD_DEF(uint16_t, bufferNum);
  TILING_DATA_FIELD_DEF_ARR(int32_t, 2, shapeTail);
END_TILING_DATA_DEF;
REGISTER_TILING_DATA_CLASS(SimHostAdd, SimHostAddTilingData)
}  // namespace optiling
#endif
