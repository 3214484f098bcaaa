// MskvReshapeAndCacheQuant: OpDef and tiling (the quantizing writes of reshape_and_cache and
// reshape_and_cache_merged into int8 caches; formulas: docs/quantization.md).
//
// Inputs (MindSpore ops.Custom order, = ms_kvcache.ops.reshape_and_cache_quant.SPEC): key, value [T', H, D]
// or [T', H*D] float16 / bfloat16 / float32; key_cache int8: kv_format 2 (SEPARATE_KV) [nb, bs, H, D]
// ("BSND"), [nb, H, bs, D] ("BNSD") or [nb, H*D/32, bs, 32] ("NZ", key [T', H, D], D a multiple of 32; its scale
// caches BSND), kv_format 1 (MERGED_KV) [2, nb, ...] holding the K then the V plane;
// value_cache (OPTIONAL: the V cache, absent / [0] for MERGED_KV); slot_mapping int32/int64 [T];
// k_scale, v_scale, k_offset, v_offset (OPTIONAL float32: static scales [] / [1] per tensor, [H] per head,
// [H, D] per channel; offsets shaped like their scale); k_scale_cache, v_scale_cache (OPTIONAL float32,
// dynamic mode: [nb, bs, H(, 1)] / [nb, H, bs(, 1)], written in place). Output: status int32 [1], never
// written. Attrs: cache_layout, kv_format, quant_mode (int codes).
//
// Tiling: T tokens over all vector cores (main/tail share); each core quantizes its tokens one at a time
// (both planes). Tiling key = quant_mode * 10000 + layout * 1000 + data dtype * 100 + slot dtype * 10 +
// DataCopyPad (head_size not a multiple of 32 codes; A2/A3 only).
#include "reshape_and_cache_quant_tiling.h"
#include "kv_copy_tiling_common.h"
#include "kv_quant_tiling_common.h"

namespace optiling {
namespace {

constexpr const char* kOp = "MskvReshapeAndCacheQuant";
enum {
  kKey = 0, kValue, kKeyCache, kValueCache, kSlotMapping, kKScale, kVScale, kKOffset, kVOffset, kKScaleCache,
  kVScaleCache
};

ge::graphStatus ReshapeAndCacheQuantTiling(gert::TilingContext* context) {
  using namespace mskv_tiling;
  using namespace mskv_quant_tiling;
  Hardware hw;
  if (GetHardware(context, kOp, &hw) != ge::GRAPH_SUCCESS) return ge::GRAPH_FAILED;
  const gert::StorageShape* shapes[3];
  const int req[3] = {kKey, kValue, kKeyCache};
  for (int i = 0; i < 3; ++i) {
    shapes[i] = context->GetInputShape(req[i]);
    if (shapes[i] == nullptr || context->GetInputDesc(req[i]) == nullptr) return Fail(kOp, "input %d is missing", req[i]);
  }
  // slot_mapping follows the OPTIONAL value_cache: read it by IR index (GetInputShape / GetInputDesc count
  // instantiated inputs, which skip an absent optional one)
  const gert::StorageShape* smShape = context->GetRequiredInputShape(kSlotMapping);
  const gert::CompileTimeTensorDesc* smDesc = context->GetRequiredInputDesc(kSlotMapping);
  if (smShape == nullptr || smDesc == nullptr) return Fail(kOp, "input 4 (slot_mapping) is missing");
  const gert::Shape& key = shapes[0]->GetStorageShape();
  const gert::Shape& value = shapes[1]->GetStorageShape();
  const gert::Shape& kc = shapes[2]->GetStorageShape();
  const gert::Shape& sm = smShape->GetStorageShape();

  // ---- attrs
  int64_t layout = 0;
  if (LayoutCodeAttr(context, 0, kOp, mskv_attr::kLayoutBSND, true, &layout) != ge::GRAPH_SUCCESS) {
    return ge::GRAPH_FAILED;
  }
  const bool bnsd = layout == mskv_attr::kLayoutBNSD;  // (the scale cache of an NZ cache is BSND)
  const bool nz = layout == mskv_attr::kLayoutNZ;
  bool merged = false, dynamic = false;
  if (GqaQuantAttrs(context, 1, kOp, &merged, &dynamic) != ge::GRAPH_SUCCESS) return ge::GRAPH_FAILED;

  // ---- dtypes
  int64_t elem = 0;
  uint64_t dcode = 0;
  int scode = 0;
  const ge::DataType kdt = context->GetInputDesc(kKey)->GetDataType();
  if (DataDType(kOp, hw, "key", kdt, &elem, &dcode) != ge::GRAPH_SUCCESS) return ge::GRAPH_FAILED;
  const ge::DataType vdt = context->GetInputDesc(kValue)->GetDataType();
  if (vdt != kdt) return Fail(kOp, "value: expected dtype %s (as key), got %s", DTypeName(kdt), DTypeName(vdt));
  const char* cname = merged ? "kv_cache" : "key_cache";
  if (CacheDType(kOp, hw, cname, context->GetInputDesc(kKeyCache)->GetDataType()) != ge::GRAPH_SUCCESS) {
    return ge::GRAPH_FAILED;
  }
  scode = IndexDTypeCode(smDesc->GetDataType());
  if (scode < 0) return Fail(kOp, "slot_mapping: expected int32 or int64, got %s", DTypeName(smDesc->GetDataType()));

  // ---- caches
  char b1[160], b2[160];
  // value_cache: absent ([0], MERGED_KV) or a rank-4 cache (SEPARATE_KV; possibly with zero-sized dims)
  ge::DataType vcdt = ge::DT_UNDEFINED;
  const gert::StorageShape* vcShape = context->GetOptionalInputShape(kValueCache);
  const gert::CompileTimeTensorDesc* vcDesc = context->GetOptionalInputDesc(kValueCache);
  const gert::Shape* vc = (vcShape == nullptr || vcDesc == nullptr) ? nullptr : &vcShape->GetStorageShape();
  if (vc != nullptr && vc->GetDimNum() == 1 && vc->GetDim(0) == 0) vc = nullptr;
  if (vc != nullptr) vcdt = vcDesc->GetDataType();
  for (int i = 0; i < 2; ++i) {
    if (CheckTensorSize(kOp, i == 0 ? "key" : "value", i == 0 ? key : value, elem) != ge::GRAPH_SUCCESS)
      return ge::GRAPH_FAILED;
  }
  if (CheckTensorSize(kOp, cname, kc, 1) != ge::GRAPH_SUCCESS) return ge::GRAPH_FAILED;
  if (CheckTensorSize(kOp, "slot_mapping", sm, scode == 0 ? 4 : 8) != ge::GRAPH_SUCCESS) return ge::GRAPH_FAILED;
  if (merged) {
    if (vc != nullptr) return Fail(kOp, "value_cache: expected absent ([0]) with kv_format 1 (MERGED_KV)");
    if (kc.GetDimNum() != 5 || kc.GetDim(0) != 2) {
      return Fail(kOp, "kv_cache: expected shape [2, num_blocks, ...] (K plane, V plane), got %s",
                  ShapeText(kc, b1, sizeof(b1)));
    }
  } else {
    if (kc.GetDimNum() != 4) return Fail(kOp, "key_cache: expected rank 4, got shape %s", ShapeText(kc, b1, sizeof(b1)));
    if (vc == nullptr || !SameShape(*vc, kc)) {
      return Fail(kOp, "value_cache: expected shape %s (as key_cache), got %s", ShapeText(kc, b1, sizeof(b1)),
                  vc == nullptr ? "none" : ShapeText(*vc, b2, sizeof(b2)));
    }
    if (CacheDType(kOp, hw, "value_cache", vcdt) != ge::GRAPH_SUCCESS) return ge::GRAPH_FAILED;
  }
  if (sm.GetDimNum() != 1) return Fail(kOp, "slot_mapping: expected rank 1, got shape %s", ShapeText(sm, b1, sizeof(b1)));
  ScatterGeom g;
  const size_t f = merged ? 1 : 0;
  if (nz && CheckNzCache(kOp, cname, kc, f, ge::DT_INT8, 1) != ge::GRAPH_SUCCESS) return ge::GRAPH_FAILED;
  CacheGeom(kc, f, bnsd || nz, &g);  // NZ [nb, H*D/32, bs, 32]: the BNSD geometry of its 32-code pieces
  g.numTokens = sm.GetDim(0);
  const int64_t nb = kc.GetDim(f);
  int64_t H = bnsd ? kc.GetDim(f + 1) : kc.GetDim(f + 2);
  int64_t D = kc.GetDim(f + 3);
  if (nz) {  // the heads from the key rows [T', H, D] (scales are per head / channel), each head whole pieces
    if (key.GetDimNum() != 3 || key.GetDim(1) * key.GetDim(2) != g.rowElems || key.GetDim(2) % kBlockBytes != 0) {
      return Fail(kOp, "key: with an NZ cache expected [T', num_kv_heads, head_size] with num_kv_heads * head_size = "
                  "%lld and head_size a multiple of 32, got shape %s", static_cast<long long>(g.rowElems),
                  ShapeText(key, b1, sizeof(b1)));
    }
    H = key.GetDim(1);
    D = key.GetDim(2);
  }
  if (CheckTokenRows(kOp, "key", key, g.numTokens, g.rowElems) != ge::GRAPH_SUCCESS) return ge::GRAPH_FAILED;
  if (CheckTokenRows(kOp, "value", value, g.numTokens, g.rowElems) != ge::GRAPH_SUCCESS) return ge::GRAPH_FAILED;

  // ---- scales
  int kinds[2] = {0, 0};
  bool hasOffset = false;
  if (GqaScales(context, kOp, kKScale, dynamic, bnsd, nb, g.blockSize, H, D, kinds, &hasOffset) != ge::GRAPH_SUCCESS) {
    return ge::GRAPH_FAILED;
  }

  // ---- SoC rules and UB plan (nothing to write: zero-sized rows or no slots -> no-op launch)
  const bool noWork = g.rowElems == 0 || g.numSlots == 0 || g.numTokens == 0;
  const bool pad = D % kBlockBytes != 0;  // a head of D int8 codes is not a multiple of 32 bytes
  const int64_t P = pad ? AlignUp(D, kBlockBytes) : D;
  const int64_t tree = TreeElems(P);
  if (!noWork) {
    if (GqaQuantRules(kOp, hw, dynamic, bnsd, H, D, g.blockSize) != ge::GRAPH_SUCCESS) return ge::GRAPH_FAILED;
    auto need = [&](int64_t h) { return QuantUbBytes(h, P, P, elem, dynamic, bnsd, hasOffset, tree); };
    const int64_t budget = hw.ubBytes - kUbReserveBytes;
    if (need(H) > budget) {
      int64_t fit = H - 1;  // the most heads of this head_size that fit
      while (fit > 0 && need(fit) > budget) --fit;
      return Fail(kOp, "key: expected a token row of num_kv_heads * head_size <= %lld elements (num_kv_heads <= %lld "
                  "at head_size %lld: the row and its quantization buffers in the %lld bytes of UB of %s), got %lld "
                  "(num_kv_heads %lld, %lld bytes needed)", static_cast<long long>(fit * D), static_cast<long long>(fit),
                  static_cast<long long>(D), static_cast<long long>(budget), SocName(hw),
                  static_cast<long long>(g.rowElems), static_cast<long long>(H), static_cast<long long>(need(H)));
    }
  }
  const CoreSplit split = noWork ? NoWork() : SplitWork(g.numTokens, hw.cores);

  ReshapeAndCacheQuantTilingData td;
  td.set_numTokens(noWork ? 0 : g.numTokens);
  td.set_numSlots(g.numSlots);
  td.set_blockSize(g.blockSize);
  SetCoreSplit(td, split);
  td.set_heads(H);
  td.set_headSize(D);
  td.set_pitch(P);
  td.set_blockStride(g.blockStride);
  td.set_slotStride(g.slotStride);
  td.set_headStride(nz ? g.blockSize * kBlockBytes : (bnsd ? g.blockSize * D : D));
  td.set_segElems(nz ? kBlockBytes : 0);
  td.set_planeElems(merged ? nb * g.blockStride : 0);
  td.set_scHeadStride(bnsd ? g.blockSize : 1);
  SetGqaQuantTiling(td, g.blockSize, H, bnsd, tree, kinds, hasOffset);
  return FinishTiling(context, kOp, hw, td, split.usedCoreNum,
                      mskv_keys::QuantLayoutCopyKey(dynamic, static_cast<uint64_t>(layout), dcode,
                                                    static_cast<uint64_t>(scode), pad));
}

}  // namespace
}  // namespace optiling

namespace ops {
class MskvReshapeAndCacheQuant : public OpDef {
 public:
  // The parameters, with the dtype rows r of one compute unit (DeclareOnEverySoc).
  template <typename Def> static void Declare(Def& d, const mskv_quant_tiling::QuantRows& r) {
    mskv_tiling::DeclareParams(d, r.fmt,
                               {{"key", r.data}, {"value", r.data}, {"key_cache", r.cache},
                                {"value_cache", r.cache, OPTIONAL}, {"slot_mapping", r.index},
                                {"k_scale", r.scale, OPTIONAL}, {"v_scale", r.scale, OPTIONAL},
                                {"k_offset", r.scale, OPTIONAL}, {"v_offset", r.scale, OPTIONAL},
                                {"k_scale_cache", r.scale, OPTIONAL}, {"v_scale_cache", r.scale, OPTIONAL}},
                               {{"status", r.status}});
  }

  explicit MskvReshapeAndCacheQuant(const char* name) : OpDef(name) {
    this->Attr("cache_layout").AttrType(OPTIONAL).Int(mskv_attr::kLayoutBSND);
    this->Attr("kv_format").AttrType(OPTIONAL).Int(2);
    this->Attr("quant_mode").AttrType(OPTIONAL).Int(mskv_attr::kQuantSTATIC);
    mskv_tiling::DeclareOnEverySoc(*this, mskv_quant_tiling::kQuantRows, mskv_quant_tiling::kQuantRows310P,
                                   optiling::ReshapeAndCacheQuantTiling);
  }
};
OP_ADD(MskvReshapeAndCacheQuant);
}  // namespace ops
