// MskvRopeConcatAndCacheMlaQuant: OpDef and tiling (rope_concat_and_cache_mla with int8 caches: kv_c_out and the
// rotated k_pe_out, as returned, quantized into them; formulas: docs/quantization.md).
//
// Inputs (MindSpore ops.Custom order, = ms_kvcache.ops.rope_concat_and_cache_mla_quant.SPEC): positions, q_pe,
// k_pe, kv_c, cos_sin_cache (as rope_concat_and_cache_mla); kv_c_cache [nb, bs, L], k_pe_cache [nb, bs, R] int8,
// written in place; slot_mapping; kv_c_norm_weight (OPTIONAL); kv_c_scale, k_pe_scale, kv_c_offset, k_pe_offset
// (OPTIONAL, static) and kv_c_scale_cache, k_pe_scale_cache (OPTIONAL, dynamic [nb, bs, 1], written in place):
// as concat_and_cache_mla_quant (mskv_quant_tiling::MlaScales). Outputs: q_pe_out, k_pe_out, kv_c_out. Attrs:
// is_neox_style, epsilon, quant_mode (int code).
//
// Tiling: rope_concat_and_cache_mla's (op_host/rope_mla_tiling_impl.h) with the row quantizer's UB (one kv_c or
// k_pe row, mskv_quant_tiling::QuantUbBytes) set aside, and the MLA quantizing writes' SoC rules
// (MlaQuantRules: Ascend310P static scales and rows of 32-byte multiples only). Tiling key = quant_mode *
// 100000 + RopeKey (DataCopyPad: some rope, table, kv_c, weight or code row is not a multiple of 32 bytes).
#include "rope_concat_and_cache_mla_quant_tiling.h"
#include "kv_quant_tiling_common.h"
#include "rope_mla_tiling_impl.h"

namespace optiling {
namespace {

constexpr const char* kOp = "MskvRopeConcatAndCacheMlaQuant";
constexpr int kCScale = 9;  // kv_c_scale, k_pe_scale, kv_c_offset, k_pe_offset, kv_c_scale_cache, k_pe_scale_cache

ge::graphStatus RopeConcatAndCacheMlaQuantTiling(gert::TilingContext* context) {
  using namespace mskv_tiling;
  using namespace mskv_quant_tiling;
  bool dynamic = false;
  if (QuantModeAttr(context, 2, kOp, &dynamic) != ge::GRAPH_SUCCESS) return ge::GRAPH_FAILED;
  rope_mla::RopeMlaShapes s;
  if (rope_mla::ReadRopeMla(context, kOp, true, &s) != ge::GRAPH_SUCCESS) return ge::GRAPH_FAILED;
  if (CacheDType(kOp, s.hw, "kv_c_cache", context->GetInputDesc(5)->GetDataType()) != ge::GRAPH_SUCCESS ||
      CacheDType(kOp, s.hw, "k_pe_cache", context->GetInputDesc(6)->GetDataType()) != ge::GRAPH_SUCCESS) {
    return ge::GRAPH_FAILED;
  }
  int kinds[2] = {0, 0};
  bool hasOffset = false;
  if (MlaScales(context, kOp, kCScale, dynamic, s.nb, s.bs, s.L, s.R, kinds, &hasOffset) != ge::GRAPH_SUCCESS ||
      MlaQuantRules(kOp, s.hw, dynamic, s.L, s.R) != ge::GRAPH_SUCCESS) {
    return ge::GRAPH_FAILED;
  }

  // ---- the quantizer's UB: one row (kv_c at the norm / copy pitch, k_pe at the rotation's pitch) of the
  // larger plane, its codes at a 32-code pitch
  const int64_t cOut = AlignUp(s.L, kBlockBytes), pOut = AlignUp(s.R, kBlockBytes);
  const int64_t row = Max64(s.kvPitch, s.g.pitch), outRow = Max64(cOut, pOut);
  const int64_t tree = TreeElems(row);
  RopeConcatAndCacheMlaQuantTilingData td;
  int64_t cores = 0;
  const int64_t quantUb = QuantUbBytes(1, row, outRow, s.esz, dynamic, false, hasOffset, tree);
  if (rope_mla::PlanRopeMla(kOp, s, quantUb, true, td.rope, &cores) != ge::GRAPH_SUCCESS) {
    return ge::GRAPH_FAILED;
  }
  td.set_cOutPitch(cOut);
  td.set_pOutPitch(pOut);
  td.set_quantRow(row);
  td.set_quantOutRow(outRow);
  td.set_quantTree(tree);
  td.set_cScaleKind(kinds[0]);
  td.set_pScaleKind(kinds[1]);
  td.set_hasOffset(hasOffset ? 1 : 0);
  const bool pad = s.pad || s.L % kBlockBytes != 0 || s.R % kBlockBytes != 0;
  return FinishTiling(context, kOp, s.hw, td, cores,
                      mskv_keys::RopeQuantKey(dynamic, pad, s.wcode, s.dcode, s.tableIsData, s.neox));
}

// The OpDef dtype rows (ms_kvcache._spec.OpSpec.dtype_rows order): the MLA rotary op's positions, data, table,
// slot and weight columns (mskv_rope_tiling::kRopeMla*), int8 caches and float32 scales in every row.
static const std::vector<ge::DataType> kRopeMlaQuantCacheDTypes = {
    ge::DT_INT8, ge::DT_INT8, ge::DT_INT8, ge::DT_INT8, ge::DT_INT8, ge::DT_INT8, ge::DT_INT8, ge::DT_INT8,
    ge::DT_INT8, ge::DT_INT8, ge::DT_INT8, ge::DT_INT8, ge::DT_INT8, ge::DT_INT8, ge::DT_INT8, ge::DT_INT8,
    ge::DT_INT8, ge::DT_INT8, ge::DT_INT8, ge::DT_INT8, ge::DT_INT8, ge::DT_INT8, ge::DT_INT8, ge::DT_INT8,
    ge::DT_INT8, ge::DT_INT8, ge::DT_INT8, ge::DT_INT8, ge::DT_INT8, ge::DT_INT8, ge::DT_INT8, ge::DT_INT8,
    ge::DT_INT8, ge::DT_INT8, ge::DT_INT8, ge::DT_INT8};
static const std::vector<ge::DataType> kRopeMlaQuantScaleDTypes = {
    ge::DT_FLOAT, ge::DT_FLOAT, ge::DT_FLOAT, ge::DT_FLOAT, ge::DT_FLOAT, ge::DT_FLOAT, ge::DT_FLOAT, ge::DT_FLOAT,
    ge::DT_FLOAT, ge::DT_FLOAT, ge::DT_FLOAT, ge::DT_FLOAT, ge::DT_FLOAT, ge::DT_FLOAT, ge::DT_FLOAT, ge::DT_FLOAT,
    ge::DT_FLOAT, ge::DT_FLOAT, ge::DT_FLOAT, ge::DT_FLOAT, ge::DT_FLOAT, ge::DT_FLOAT, ge::DT_FLOAT, ge::DT_FLOAT,
    ge::DT_FLOAT, ge::DT_FLOAT, ge::DT_FLOAT, ge::DT_FLOAT, ge::DT_FLOAT, ge::DT_FLOAT, ge::DT_FLOAT, ge::DT_FLOAT,
    ge::DT_FLOAT, ge::DT_FLOAT, ge::DT_FLOAT, ge::DT_FLOAT};
static const std::vector<ge::DataType> kRopeMlaQuantCacheDTypes310P = {
    ge::DT_INT8, ge::DT_INT8, ge::DT_INT8, ge::DT_INT8, ge::DT_INT8, ge::DT_INT8, ge::DT_INT8, ge::DT_INT8,
    ge::DT_INT8, ge::DT_INT8, ge::DT_INT8, ge::DT_INT8, ge::DT_INT8, ge::DT_INT8, ge::DT_INT8, ge::DT_INT8,
    ge::DT_INT8, ge::DT_INT8, ge::DT_INT8, ge::DT_INT8};
static const std::vector<ge::DataType> kRopeMlaQuantScaleDTypes310P = {
    ge::DT_FLOAT, ge::DT_FLOAT, ge::DT_FLOAT, ge::DT_FLOAT, ge::DT_FLOAT, ge::DT_FLOAT, ge::DT_FLOAT, ge::DT_FLOAT,
    ge::DT_FLOAT, ge::DT_FLOAT, ge::DT_FLOAT, ge::DT_FLOAT, ge::DT_FLOAT, ge::DT_FLOAT, ge::DT_FLOAT, ge::DT_FLOAT,
    ge::DT_FLOAT, ge::DT_FLOAT, ge::DT_FLOAT, ge::DT_FLOAT};

struct RopeMlaQuantRows {
  const mskv_tiling::DTypes &pos, &data, &table, &slots, &weight, &cache, &scale;
  const mskv_tiling::Formats &fmt;
};
static const RopeMlaQuantRows kRopeMlaQuantRows = {
    mskv_rope_tiling::kRopeMlaPDTypes, mskv_rope_tiling::kRopeMlaTDTypes, mskv_rope_tiling::kRopeMlaCDTypes,
    mskv_rope_tiling::kRopeMlaSDTypes, mskv_rope_tiling::kRopeMlaWDTypes, kRopeMlaQuantCacheDTypes,
    kRopeMlaQuantScaleDTypes, mskv_rope_tiling::kRopeMlaFormats};
static const RopeMlaQuantRows kRopeMlaQuantRows310P = {
    mskv_rope_tiling::kRopeMlaPDTypes310P, mskv_rope_tiling::kRopeMlaTDTypes310P, mskv_rope_tiling::kRopeMlaCDTypes310P,
    mskv_rope_tiling::kRopeMlaSDTypes310P, mskv_rope_tiling::kRopeMlaWDTypes310P, kRopeMlaQuantCacheDTypes310P,
    kRopeMlaQuantScaleDTypes310P, mskv_rope_tiling::kRopeMlaFormats310P};

}  // namespace
}  // namespace optiling

namespace ops {
class MskvRopeConcatAndCacheMlaQuant : public OpDef {
 public:
  explicit MskvRopeConcatAndCacheMlaQuant(const char* name) : OpDef(name) {
    mskv_rope_tiling::DeclareMlaRopeAttrs(*this);
    this->Attr("quant_mode").AttrType(OPTIONAL).Int(mskv_attr::kQuantSTATIC);
    mskv_tiling::DeclareOnEverySoc(*this, optiling::kRopeMlaQuantRows, optiling::kRopeMlaQuantRows310P,
                                   optiling::RopeConcatAndCacheMlaQuantTiling);
  }

  // The parameters, with the dtype rows r of one compute unit (DeclareOnEverySoc).
  template <typename Def>
  static void Declare(Def& d, const optiling::RopeMlaQuantRows& r) {
    mskv_tiling::DeclareParams(d, r.fmt,
                               {{"positions", r.pos}, {"q_pe", r.data}, {"k_pe", r.data}, {"kv_c", r.data},
                                {"cos_sin_cache", r.table}, {"kv_c_cache", r.cache}, {"k_pe_cache", r.cache},
                                {"slot_mapping", r.slots}, {"kv_c_norm_weight", r.weight, OPTIONAL},
                                {"kv_c_scale", r.scale, OPTIONAL}, {"k_pe_scale", r.scale, OPTIONAL},
                                {"kv_c_offset", r.scale, OPTIONAL}, {"k_pe_offset", r.scale, OPTIONAL},
                                {"kv_c_scale_cache", r.scale, OPTIONAL}, {"k_pe_scale_cache", r.scale, OPTIONAL}},
                               {{"q_pe_out", r.data}, {"k_pe_out", r.data}, {"kv_c_out", r.data}});
  }
};
OP_ADD(MskvRopeConcatAndCacheMlaQuant);
}  // namespace ops
