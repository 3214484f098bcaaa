// MskvMultiLayerBlockTransfer: OpDef (tiling: MultiLayerBlockTransferTiling, op_host/multi_layer_tiling_impl.h).
//
// Inputs (MindSpore ops.Custom order, = ms_kvcache.ops.multi_layer_block_transfer.SPEC): block_ids
// int32/int64 [n]; staging (OPTIONAL, written: absent or an empty [0] tensor = direct mode);
// host_blocks (DYNAMIC: one tensor per plane, [n, block_size, L, H, D] for MERGED/SEPARATE,
// [n, block_size, L, hidden] for MLA/DSA), written for "d2h"; kv_caches (DYNAMIC: L * tensorsPerLayer
// caches, layer-major), written for "h2d". Output: status, int32 [1], never written.
// Attrs: kv_format, direction, cache_layout (default BNSD), num_layers, aiv_num (0 = all cores).
#include "multi_layer_block_transfer_tiling.h"
#include "multi_layer_tiling_impl.h"

namespace ops {
class MskvMultiLayerBlockTransfer : public OpDef {
 public:
  explicit MskvMultiLayerBlockTransfer(const char* name) : OpDef(name) {
    mskv_ml_tiling::DeclareTransferAttrs(*this, mskv_attr::kDirH2D, mskv_attr::kLayoutBNSD);
    mskv_tiling::DeclareOnEverySoc(*this, mskv_tiling::kCopyRows, mskv_tiling::kCopyRows310P,
                                   optiling::mskv_ml_impl::BlockTransferTiling);
  }

  // The parameters, with the dtype rows r of one compute unit (DeclareOnEverySoc).
  template <typename Def> static void Declare(Def& d, const mskv_tiling::CopyRows& r) {
    mskv_tiling::DeclareParams(d, r.fmt, {{"block_ids", r.index}, {"staging", r.kv, OPTIONAL},
                                          {"host_blocks", r.kv, DYNAMIC},
                                          {"kv_caches", r.kv, DYNAMIC}},
                               {{"status", r.status}});
  }
};
OP_ADD(MskvMultiLayerBlockTransfer);
}  // namespace ops
