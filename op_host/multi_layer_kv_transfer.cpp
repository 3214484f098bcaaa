// MskvMultiLayerKvTransfer: OpDef (tiling: MultiLayerKvTransferTiling, op_host/multi_layer_tiling_impl.h).
//
// Inputs (MindSpore ops.Custom order, = ms_kvcache.ops.multi_layer_kv_transfer.SPEC): buffer
// (MERGED/SEPARATE [2, L, T, H*D]; MLA/DSA 1-D, planes [L, T, hidden_p] one after another), written
// for direction "d2h"; slot_mapping int32/int64 [T]; kv_caches (DYNAMIC: L * tensorsPerLayer caches,
// layer-major), written for "h2d". Output: status, int32 [1], never written (docs/design.md).
// Attrs: kv_format, direction, cache_layout, num_layers, aiv_num (cap on cores, 0 = all).
#include "multi_layer_kv_transfer_tiling.h"
#include "multi_layer_tiling_impl.h"

namespace ops {
class MskvMultiLayerKvTransfer : public OpDef {
 public:
  explicit MskvMultiLayerKvTransfer(const char* name) : OpDef(name) {
    mskv_ml_tiling::DeclareTransferAttrs(*this, mskv_attr::kDirD2H, mskv_attr::kLayoutBSND);
    mskv_tiling::DeclareOnEverySoc(*this, mskv_tiling::kCopyRows, mskv_tiling::kCopyRows310P,
                                   optiling::mskv_ml_impl::KvTransferTiling);
  }

  // The parameters, with the dtype rows r of one compute unit (DeclareOnEverySoc).
  template <typename Def> static void Declare(Def& d, const mskv_tiling::CopyRows& r) {
    mskv_tiling::DeclareParams(d, r.fmt, {{"buffer", r.kv}, {"slot_mapping", r.index}, {"kv_caches", r.kv, DYNAMIC}},
                               {{"status", r.status}});
  }
};
OP_ADD(MskvMultiLayerKvTransfer);
}  // namespace ops
