// MskvMultiLayerBlockTransferQuant: OpDef of multi_layer_block_transfer(..., scale_caches=...,
// scale_host_blocks=...) (tiling: MultiLayerBlockTransferTiling with scale caches, op_host/multi_layer_tiling_impl.h).
//
// Inputs (= ms_kvcache.ops.multi_layer_block_transfer_quant.SPEC): block_ids, staging (OPTIONAL, int8: one
// block of every data and scale plane), host_blocks (DYNAMIC, int8, one per plane), kv_caches (DYNAMIC, int8),
// scale_host_blocks (DYNAMIC, float32 [n, block_size, L, heads] per plane), scale_caches (DYNAMIC, float32,
// L * planes); host blocks written for "d2h", caches for "h2d". Output: status, int32 [1], never written.
#include "multi_layer_block_transfer_quant_tiling.h"
#include "multi_layer_tiling_impl.h"

namespace ops {
class MskvMultiLayerBlockTransferQuant : public OpDef {
 public:
  explicit MskvMultiLayerBlockTransferQuant(const char* name) : OpDef(name) {
    mskv_ml_tiling::DeclareTransferAttrs(*this, mskv_attr::kDirH2D, mskv_attr::kLayoutBNSD);
    mskv_tiling::DeclareOnEverySoc(*this, mskv_ml_tiling::kScaleRows, mskv_ml_tiling::kScaleRows,
                                   optiling::mskv_ml_impl::BlockTransferQuantTiling);
  }

  // The parameters, with the dtype rows r of one compute unit (DeclareOnEverySoc).
  template <typename Def> static void Declare(Def& d, const mskv_ml_tiling::ScaleRows& r) {
    mskv_tiling::DeclareParams(d, r.fmt, {{"block_ids", r.index}, {"staging", r.kv, OPTIONAL},
                                          {"host_blocks", r.kv, DYNAMIC},
                                          {"kv_caches", r.kv, DYNAMIC}, {"scale_host_blocks", r.scale, DYNAMIC},
                                          {"scale_caches", r.scale, DYNAMIC}},
                               {{"status", r.status}});
  }
};
OP_ADD(MskvMultiLayerBlockTransferQuant);
}  // namespace ops
