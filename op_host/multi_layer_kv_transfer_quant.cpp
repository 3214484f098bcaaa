// MskvMultiLayerKvTransferQuant: OpDef of multi_layer_kv_transfer(..., scale_caches=...) (tiling:
// MultiLayerKvTransferTiling with scale caches, op_host/multi_layer_tiling_impl.h).
//
// Inputs (= ms_kvcache.ops.multi_layer_kv_transfer_quant.SPEC): buffer (int8 1-D: the data planes, then the
// float32 scale planes as bytes, [L, T, 4 * scales_p] each), written for "d2h"; slot_mapping int32/int64 [T];
// kv_caches (DYNAMIC, int8, L * tensorsPerLayer), scale_caches (DYNAMIC, float32, L * planes), written for
// "h2d". Output: status, int32 [1], never written. Attrs: those of MskvMultiLayerKvTransfer.
#include "multi_layer_kv_transfer_quant_tiling.h"
#include "multi_layer_tiling_impl.h"

namespace ops {
class MskvMultiLayerKvTransferQuant : public OpDef {
 public:
  explicit MskvMultiLayerKvTransferQuant(const char* name) : OpDef(name) {
    mskv_ml_tiling::DeclareTransferAttrs(*this, mskv_attr::kDirD2H, mskv_attr::kLayoutBSND);
    mskv_tiling::DeclareOnEverySoc(*this, mskv_ml_tiling::kScaleRows, mskv_ml_tiling::kScaleRows,
                                   optiling::mskv_ml_impl::KvTransferQuantTiling);
  }

  // The parameters, with the dtype rows r of one compute unit (DeclareOnEverySoc).
  template <typename Def> static void Declare(Def& d, const mskv_ml_tiling::ScaleRows& r) {
    mskv_tiling::DeclareParams(d, r.fmt, {{"buffer", r.kv}, {"slot_mapping", r.index}, {"kv_caches", r.kv, DYNAMIC},
                                          {"scale_caches", r.scale, DYNAMIC}},
                               {{"status", r.status}});
  }
};
OP_ADD(MskvMultiLayerKvTransferQuant);
}  // namespace ops
