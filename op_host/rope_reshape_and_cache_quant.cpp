// MskvRopeReshapeAndCacheQuant: OpDef and tiling (rope_reshape_and_cache / rope_reshape_and_cache_merged with
// int8 caches: the rotated key and the value quantized into them; formulas: docs/quantization.md).
//
// Inputs (MindSpore ops.Custom order, = ms_kvcache.ops.rope_reshape_and_cache_quant.SPEC): positions, query,
// key, value, cos_sin_cache (as rope_reshape_and_cache); key_cache int8: kv_format 2 (SEPARATE_KV)
// [nb, bs, Hk, D] ("BSND") / [nb, Hk, bs, D] ("BNSD"), kv_format 1 (MERGED_KV) [2, nb, ...]; value_cache
// (OPTIONAL: absent / [0] for MERGED_KV); slot_mapping; k_scale, v_scale, k_offset, v_offset (OPTIONAL, static)
// and k_scale_cache, v_scale_cache (OPTIONAL, dynamic, written in place): as reshape_and_cache_quant
// (mskv_quant_tiling::GqaScales). Outputs: query_out, key_out. Attrs: is_neox_style, cache_layout, kv_format,
// quant_mode (int codes).
//
// Tiling: the rotation's (op_host/rope_cache_tiling_impl.h, ReadRopeCache / PlanUb) with the row quantizer's
// UB (one token's K or V row of all kv heads, mskv_quant_tiling::QuantUbBytes) set aside, and the quantizing
// writes' SoC rules (GqaQuantRules). Tiling key = quant_mode * 100000 + RopeKey (DataCopyPad: some head,
// table or code row is not a multiple of 32 bytes).
#include "rope_reshape_and_cache_quant_tiling.h"
#include "kv_quant_tiling_common.h"
#include "rope_cache_tiling_impl.h"

namespace optiling {
namespace {

constexpr const char* kOp = "MskvRopeReshapeAndCacheQuant";
constexpr int kKScale = 8;  // k_scale, v_scale, k_offset, v_offset, k_scale_cache, v_scale_cache: 8 .. 13

ge::graphStatus RopeReshapeAndCacheQuantTiling(gert::TilingContext* context) {
  using namespace mskv_tiling;
  using namespace mskv_rope_tiling;
  using namespace mskv_quant_tiling;
  Hardware hw;
  if (GetHardware(context, kOp, &hw) != ge::GRAPH_SUCCESS) return ge::GRAPH_FAILED;
  bool merged = false, dynamic = false;
  if (GqaQuantAttrs(context, 2, kOp, &merged, &dynamic) != ge::GRAPH_SUCCESS) return ge::GRAPH_FAILED;
  const char* cname = merged ? "kv_cache" : "key_cache";
  if (context->GetInputDesc(5) == nullptr) return Fail(kOp, "input 5 (%s) is missing", cname);
  if (CacheDType(kOp, hw, cname, context->GetInputDesc(5)->GetDataType()) != ge::GRAPH_SUCCESS) {
    return ge::GRAPH_FAILED;
  }
  if (!merged) {
    const gert::CompileTimeTensorDesc* vd = context->GetOptionalInputDesc(6);
    if (vd != nullptr && CacheDType(kOp, hw, "value_cache", vd->GetDataType()) != ge::GRAPH_SUCCESS) {
      return ge::GRAPH_FAILED;
    }
  }
  rope_cache::RopeCacheShapes s;
  if (rope_cache::ReadRopeCache(context, kOp, hw, merged, true, &s) != ge::GRAPH_SUCCESS) return ge::GRAPH_FAILED;
  if (s.dt == ge::DT_BF16 && hw.is310P) return Fail(kOp, "query: bfloat16 is not supported on Ascend310P");
  int kinds[2] = {0, 0};
  bool hasOffset = false;
  if (GqaScales(context, kOp, kKScale, dynamic, s.bnsd, s.nb, s.bs, s.hk, s.d, kinds, &hasOffset) !=
      ge::GRAPH_SUCCESS) {
    return ge::GRAPH_FAILED;
  }
  if (GqaQuantRules(kOp, hw, dynamic, s.bnsd, s.hk, s.d, s.bs) != ge::GRAPH_SUCCESS) return ge::GRAPH_FAILED;

  // ---- work split and UB plan: the rotation's buffers (no pass-through value queue: the value rows go
  // through the quantizer) plus the quantizer's, sized for one token's row of all kv heads
  const int64_t outPitch = AlignUp(s.d, kBlockBytes);
  const int64_t tree = TreeElems(s.g.pitch);
  const CoreSplit split = SplitWork(s.rows, hw.cores);
  PlanInputs in;
  in.g = s.g;
  in.rotHeads = Max64(s.hq, s.hk);
  in.copyHeads = 0;
  in.extraBytes = QuantUbBytes(s.hk, s.g.pitch, outPitch, s.esz, dynamic, s.bnsd, hasOffset, tree);
  RopePlan plan;
  if (PlanUb(kOp, hw, in, split.formerLen, &plan) != ge::GRAPH_SUCCESS) return ge::GRAPH_FAILED;
  if (dynamic && hw.is310P && plan.headsPerChunk < s.hk && (plan.headsPerChunk * 4) % kBlockBytes != 0) {
    return Fail(kOp, "dynamic scales on Ascend310P: a token's %lld key heads are rotated in groups of %lld, whose "
                "scale rows are not a multiple of 32 bytes (Ascend310P has no DataCopyPad)",
                static_cast<long long>(s.hk), static_cast<long long>(plan.headsPerChunk));
  }

  RopeReshapeAndCacheQuantTilingData td;
  rope_cache::SetRopeCacheTiling(td.rope, s, in, plan, split, merged);
  td.set_outPitch(outPitch);
  SetGqaQuantTiling(td, s.bs, s.hk, s.bnsd, tree, kinds, hasOffset);
  const bool pad = s.g.pad || s.d % kBlockBytes != 0;  // rotated rows, table rows or code rows
  return FinishTiling(context, kOp, hw, td, split.usedCoreNum,
                      mskv_keys::RopeQuantKey(dynamic, pad, static_cast<uint64_t>(s.layout), s.dcode,
                                              s.csDt != ge::DT_FLOAT, s.neox));
}

// The OpDef dtype rows (ms_kvcache._spec.OpSpec.dtype_rows order): the rotary ops' positions, data, table and
// slot columns (mskv_rope_tiling::kRope*), int8 caches and float32 scales in every row.
static const std::vector<ge::DataType> kRopeQuantCacheDTypes = {
    ge::DT_INT8, ge::DT_INT8, ge::DT_INT8, ge::DT_INT8, ge::DT_INT8, ge::DT_INT8, ge::DT_INT8, ge::DT_INT8, ge::DT_INT8,
    ge::DT_INT8, ge::DT_INT8, ge::DT_INT8, ge::DT_INT8, ge::DT_INT8, ge::DT_INT8, ge::DT_INT8, ge::DT_INT8, ge::DT_INT8,
    ge::DT_INT8, ge::DT_INT8};
static const std::vector<ge::DataType> kRopeQuantScaleDTypes = {
    ge::DT_FLOAT, ge::DT_FLOAT, ge::DT_FLOAT, ge::DT_FLOAT, ge::DT_FLOAT, ge::DT_FLOAT, ge::DT_FLOAT, ge::DT_FLOAT,
    ge::DT_FLOAT, ge::DT_FLOAT, ge::DT_FLOAT, ge::DT_FLOAT, ge::DT_FLOAT, ge::DT_FLOAT, ge::DT_FLOAT, ge::DT_FLOAT,
    ge::DT_FLOAT, ge::DT_FLOAT, ge::DT_FLOAT, ge::DT_FLOAT};
static const std::vector<ge::DataType> kRopeQuantCacheDTypes310P = {
    ge::DT_INT8, ge::DT_INT8, ge::DT_INT8, ge::DT_INT8, ge::DT_INT8, ge::DT_INT8, ge::DT_INT8, ge::DT_INT8, ge::DT_INT8,
    ge::DT_INT8, ge::DT_INT8, ge::DT_INT8};
static const std::vector<ge::DataType> kRopeQuantScaleDTypes310P = {
    ge::DT_FLOAT, ge::DT_FLOAT, ge::DT_FLOAT, ge::DT_FLOAT, ge::DT_FLOAT, ge::DT_FLOAT, ge::DT_FLOAT, ge::DT_FLOAT,
    ge::DT_FLOAT, ge::DT_FLOAT, ge::DT_FLOAT, ge::DT_FLOAT};

struct RopeQuantRows {
  const mskv_tiling::DTypes &pos, &data, &table, &slots, &cache, &scale;
  const mskv_tiling::Formats &fmt;
};
static const RopeQuantRows kRopeQuantRows = {
    mskv_rope_tiling::kRopePDTypes, mskv_rope_tiling::kRopeTDTypes, mskv_rope_tiling::kRopeCDTypes,
    mskv_rope_tiling::kRopeSDTypes, kRopeQuantCacheDTypes, kRopeQuantScaleDTypes, mskv_rope_tiling::kRopeFormats};
static const RopeQuantRows kRopeQuantRows310P = {
    mskv_rope_tiling::kRopePDTypes310P, mskv_rope_tiling::kRopeTDTypes310P, mskv_rope_tiling::kRopeCDTypes310P,
    mskv_rope_tiling::kRopeSDTypes310P, kRopeQuantCacheDTypes310P, kRopeQuantScaleDTypes310P,
    mskv_rope_tiling::kRopeFormats310P};

}  // namespace
}  // namespace optiling

namespace ops {
class MskvRopeReshapeAndCacheQuant : public OpDef {
 public:
  explicit MskvRopeReshapeAndCacheQuant(const char* name) : OpDef(name) {
    mskv_rope_tiling::DeclareGqaRopeAttrs(*this);
    this->Attr("kv_format").AttrType(OPTIONAL).Int(2);
    this->Attr("quant_mode").AttrType(OPTIONAL).Int(mskv_attr::kQuantSTATIC);
    mskv_tiling::DeclareOnEverySoc(*this, optiling::kRopeQuantRows, optiling::kRopeQuantRows310P,
                                   optiling::RopeReshapeAndCacheQuantTiling);
  }

  // The parameters, with the dtype rows r of one compute unit (DeclareOnEverySoc).
  template <typename Def>
  static void Declare(Def& d, const optiling::RopeQuantRows& r) {
    mskv_tiling::DeclareParams(d, r.fmt,
                               {{"positions", r.pos}, {"query", r.data}, {"key", r.data}, {"value", r.data},
                                {"cos_sin_cache", r.table}, {"key_cache", r.cache},
                                {"value_cache", r.cache, OPTIONAL}, {"slot_mapping", r.slots},
                                {"k_scale", r.scale, OPTIONAL}, {"v_scale", r.scale, OPTIONAL},
                                {"k_offset", r.scale, OPTIONAL}, {"v_offset", r.scale, OPTIONAL},
                                {"k_scale_cache", r.scale, OPTIONAL}, {"v_scale_cache", r.scale, OPTIONAL}},
                               {{"query_out", r.data}, {"key_out", r.data}});
  }
};
OP_ADD(MskvRopeReshapeAndCacheQuant);
}  // namespace ops
