// Tiling data of the emulation test op SimAxpy (z = x + alpha * y).
#ifndef SIM_AXPY_TILING_H_
#define SIM_AXPY_TILING_H_
#include "register/tilingdata_base.h"

namespace optiling {
BEGIN_TILING_DATA_DEF(SimAxpyTilingData)
  TILING_DATA_FIELD_DEF(uint64_t, totalLength);  // elements of x / y / z
  TILING_DATA_FIELD_DEF(uint32_t, blockLength);  // elements per core (the last core may get fewer)
  TILING_DATA_FIELD_DEF(uint32_t, tileLength);   // elements per UB tile
  TILING_DATA_FIELD_DEF(float, alpha);
END_TILING_DATA_DEF;
REGISTER_TILING_DATA_CLASS(SimAxpy, SimAxpyTilingData)
}  // namespace optiling
#endif  // SIM_AXPY_TILING_H_
