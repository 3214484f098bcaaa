// MskvRopeConcatAndCacheMla: OpDef and tiling.
//
// Inputs (MindSpore ops.Custom order, = ms_kvcache.ops.rope_concat_and_cache_mla.SPEC): positions [T'],
// q_pe [T', Hq, R] or [T', Hq*R], k_pe [T', R] or [T', 1, R], kv_c [T', L], cos_sin_cache [max_position, rd],
// kv_c_cache [nb, bs, L] and k_pe_cache [nb, bs, R] (written in place through their input addresses),
// slot_mapping [T], kv_c_norm_weight [L] (OPTIONAL: absent or an empty [0] tensor = no RMSNorm).
// Outputs: q_pe_out, k_pe_out, kv_c_out (kv_c normalised, or a copy). Attrs: is_neox_style, epsilon.
//
// Tiling: the T' rows over all vector cores (main/tail share); UB batches as for MskvRopeReshapeAndCache
// (op_host/rope_tiling_common.h), the kv_c rows (RMSNorm) going through the rotated-chunk buffers.
// Tiling key = pad * 10000 + weight (0 none, 1 float32, 2 the data dtype) * 1000 + dtype * 100 +
// table * 10 + style (1 NeoX, 0 GPT-J).
#include "rope_mla_tiling_impl.h"

namespace optiling {
namespace {

constexpr const char* kOp = "MskvRopeConcatAndCacheMla";

ge::graphStatus RopeConcatAndCacheMlaTiling(gert::TilingContext* context) {
  rope_mla::RopeMlaShapes s;
  if (rope_mla::ReadRopeMla(context, kOp, false, &s) != ge::GRAPH_SUCCESS) return ge::GRAPH_FAILED;
  RopeConcatAndCacheMlaTilingData td;
  int64_t cores = 0;
  if (rope_mla::PlanRopeMla(kOp, s, 0, false, td, &cores) != ge::GRAPH_SUCCESS) return ge::GRAPH_FAILED;
  return mskv_tiling::FinishTiling(context, kOp, s.hw, td, cores,
                                   mskv_keys::RopeKey(s.pad, s.wcode, s.dcode, s.tableIsData, s.neox));
}

}  // namespace
}  // namespace optiling

namespace ops {
class MskvRopeConcatAndCacheMla : public OpDef {
 public:
  explicit MskvRopeConcatAndCacheMla(const char* name) : OpDef(name) {
    mskv_rope_tiling::DeclareMlaRopeOnEverySoc(*this, optiling::RopeConcatAndCacheMlaTiling);
  }

  // The parameters, with the dtype rows r of one compute unit (DeclareOnEverySoc).
  template <typename Def> static void Declare(Def& d, const mskv_rope_tiling::RopeMlaRows& r) {
    mskv_tiling::DeclareParams(d, r.fmt, {{"positions", r.pos}, {"q_pe", r.data}, {"k_pe", r.data}, {"kv_c", r.data},
                                          {"cos_sin_cache", r.table}, {"kv_c_cache", r.data}, {"k_pe_cache", r.data},
                                          {"slot_mapping", r.slots}, {"kv_c_norm_weight", r.weight, OPTIONAL}},
                                          {{"q_pe_out", r.data}, {"k_pe_out", r.data}, {"kv_c_out", r.data}});
  }
};
OP_ADD(MskvRopeConcatAndCacheMla);
}  // namespace ops
