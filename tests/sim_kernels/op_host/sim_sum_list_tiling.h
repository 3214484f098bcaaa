// Tiling data of the emulation test op SimSumList (out = bias + sum of a DYNAMIC list of tensors).
#ifndef SIM_SUM_LIST_TILING_H_
#define SIM_SUM_LIST_TILING_H_
#include "register/tilingdata_base.h"

namespace optiling {
BEGIN_TILING_DATA_DEF(SimSumListTilingData)
  TILING_DATA_FIELD_DEF(uint32_t, n);            // elements per tensor
  TILING_DATA_FIELD_DEF(uint32_t, count);        // tensors in the list
  TILING_DATA_FIELD_DEF(uint32_t, blockLength);  // elements per core
END_TILING_DATA_DEF;
REGISTER_TILING_DATA_CLASS(SimSumList, SimSumListTilingData)
}  // namespace optiling
#endif  // SIM_SUM_LIST_TILING_H_
