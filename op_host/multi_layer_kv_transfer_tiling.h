// Tiling data of MskvMultiLayerKvTransfer: MultiLayerKvTransferTilingData (op_host/multi_layer_tiling_data.h).
#ifndef MS_KVCACHE_OP_HOST_MULTI_LAYER_KV_TRANSFER_TILING_H_
#define MS_KVCACHE_OP_HOST_MULTI_LAYER_KV_TRANSFER_TILING_H_

#include "register/tilingdata_base.h"
#include "multi_layer_tiling_data.h"

namespace optiling {
REGISTER_TILING_DATA_CLASS(MskvMultiLayerKvTransfer, MultiLayerKvTransferTilingData)
}  // namespace optiling

#endif  // MS_KVCACHE_OP_HOST_MULTI_LAYER_KV_TRANSFER_TILING_H_
