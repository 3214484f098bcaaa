// MskvConcatAndCacheMlaQuant: OpDef and tiling (the quantizing write of concat_and_cache_mla into int8 MLA
// caches; formulas: docs/quantization.md).
//
// Inputs (MindSpore ops.Custom order, = ms_kvcache.ops.concat_and_cache_mla_quant.SPEC): kv_c [T', L],
// k_pe [T', R] or [T', 1, R] float16 / bfloat16 / float32; kv_c_cache [nb, bs, L], k_pe_cache [nb, bs, R]
// int8, written in place; slot_mapping int32/int64 [T]; kv_c_scale, k_pe_scale, kv_c_offset, k_pe_offset
// (OPTIONAL float32, static: [] / [1] per tensor or [L] / [R] per channel, offsets shaped like their scale);
// kv_c_scale_cache, k_pe_scale_cache (OPTIONAL float32 [nb, bs, 1], dynamic: one scale per token and plane,
// written in place). Output: status int32 [1], never written. Attr: quant_mode (int code).
//
// Tiling: T tokens over all vector cores (main/tail share); each core quantizes its tokens one at a time
// (both planes). Tiling key = quant_mode * 1000 + data dtype * 100 + slot dtype * 10 + DataCopyPad (a plane's
// hidden size not a multiple of 32 codes; A2/A3 only).
#include "concat_and_cache_mla_quant_tiling.h"
#include "kv_copy_tiling_common.h"
#include "kv_quant_tiling_common.h"

namespace optiling {
namespace {

constexpr const char* kOp = "MskvConcatAndCacheMlaQuant";
enum { kKvc = 0, kKpe, kKvcCache, kKpeCache, kSlotMapping, kCScale };

ge::graphStatus ConcatAndCacheMlaQuantTiling(gert::TilingContext* context) {
  using namespace mskv_tiling;
  using namespace mskv_quant_tiling;
  Hardware hw;
  if (GetHardware(context, kOp, &hw) != ge::GRAPH_SUCCESS) return ge::GRAPH_FAILED;
  const gert::StorageShape* shapes[5];
  if (GetInputShapes(context, kOp, 5, shapes) != ge::GRAPH_SUCCESS) return ge::GRAPH_FAILED;
  const gert::Shape& kvc = shapes[kKvc]->GetStorageShape();
  const gert::Shape& kpe = shapes[kKpe]->GetStorageShape();
  const gert::Shape& cc = shapes[kKvcCache]->GetStorageShape();
  const gert::Shape& pc = shapes[kKpeCache]->GetStorageShape();
  const gert::Shape& sm = shapes[kSlotMapping]->GetStorageShape();

  // ---- attrs
  const gert::RuntimeAttrs* attrs = context->GetAttrs();
  const int64_t* mp = attrs == nullptr ? nullptr : attrs->GetAttrPointer<int64_t>(0);
  const int64_t mode = mp == nullptr ? mskv_attr::kQuantSTATIC : *mp;
  if (mode != mskv_attr::kQuantSTATIC && mode != mskv_attr::kQuantDYNAMIC) {
    return Fail(kOp, "quant_mode: expected %lld (static) or %lld (dynamic), got %lld",
                static_cast<long long>(mskv_attr::kQuantSTATIC), static_cast<long long>(mskv_attr::kQuantDYNAMIC),
                static_cast<long long>(mode));
  }
  const bool dynamic = mode == mskv_attr::kQuantDYNAMIC;

  // ---- dtypes
  int64_t elem = 0;
  uint64_t dcode = 0;
  int scode = 0;
  const ge::DataType dt = context->GetInputDesc(kKvc)->GetDataType();
  if (DataDType(kOp, hw, "kv_c", dt, &elem, &dcode) != ge::GRAPH_SUCCESS) return ge::GRAPH_FAILED;
  const ge::DataType pdt = context->GetInputDesc(kKpe)->GetDataType();
  if (pdt != dt) return Fail(kOp, "k_pe: expected dtype %s (as kv_c), got %s", DTypeName(dt), DTypeName(pdt));
  if (CacheDType(kOp, hw, "kv_c_cache", context->GetInputDesc(kKvcCache)->GetDataType()) != ge::GRAPH_SUCCESS ||
      CacheDType(kOp, hw, "k_pe_cache", context->GetInputDesc(kKpeCache)->GetDataType()) != ge::GRAPH_SUCCESS ||
      IndexDType(context, kOp, kSlotMapping, "slot_mapping", &scode) != ge::GRAPH_SUCCESS) {
    return ge::GRAPH_FAILED;
  }

  // ---- shapes
  char b1[160], b2[160];
  const char* names[4] = {"kv_c", "k_pe", "kv_c_cache", "k_pe_cache"};
  for (int i = 0; i < 4; ++i) {
    if (CheckTensorSize(kOp, names[i], shapes[i]->GetStorageShape(), i < 2 ? elem : 1) != ge::GRAPH_SUCCESS)
      return ge::GRAPH_FAILED;
  }
  if (CheckTensorSize(kOp, "slot_mapping", sm, scode == 0 ? 4 : 8) != ge::GRAPH_SUCCESS) return ge::GRAPH_FAILED;
  if (cc.GetDimNum() != 3) return Fail(kOp, "kv_c_cache: expected rank 3, got shape %s", ShapeText(cc, b1, sizeof(b1)));
  if (pc.GetDimNum() != 3 || pc.GetDim(0) != cc.GetDim(0) || pc.GetDim(1) != cc.GetDim(1)) {
    return Fail(kOp, "k_pe_cache: expected shape [%lld, %lld, rope_dim] (as kv_c_cache), got %s",
                static_cast<long long>(cc.GetDim(0)), static_cast<long long>(cc.GetDim(1)), ShapeText(pc, b1, sizeof(b1)));
  }
  if (sm.GetDimNum() != 1) return Fail(kOp, "slot_mapping: expected rank 1, got shape %s", ShapeText(sm, b1, sizeof(b1)));
  const int64_t nb = cc.GetDim(0), bs = cc.GetDim(1), L = cc.GetDim(2), R = pc.GetDim(2), T = sm.GetDim(0);
  if (CheckTokenRows(kOp, "kv_c", kvc, T, L) != ge::GRAPH_SUCCESS) return ge::GRAPH_FAILED;
  if (CheckTokenRows(kOp, "k_pe", kpe, T, R) != ge::GRAPH_SUCCESS) return ge::GRAPH_FAILED;

  // ---- scales
  const char* sn[6] = {"kv_c_scale", "k_pe_scale", "kv_c_offset", "k_pe_offset", "kv_c_scale_cache", "k_pe_scale_cache"};
  const gert::Shape* q[6];
  for (int i = 0; i < 6; ++i) {
    ge::DataType sdt = ge::DT_UNDEFINED;
    q[i] = Optional(context, kCScale + i, &sdt);
    if (q[i] != nullptr && sdt != ge::DT_FLOAT) return Fail(kOp, "%s: expected dtype float32, got %s", sn[i], DTypeName(sdt));
    if (q[i] != nullptr && CheckTensorSize(kOp, sn[i], *q[i], 4) != ge::GRAPH_SUCCESS) return ge::GRAPH_FAILED;
  }
  const int64_t dims[2] = {L, R};
  int kinds[2] = {0, 0};
  bool hasOffset = false;
  for (int p = 0; p < 2; ++p) {
    const gert::Shape* s = q[p];
    const gert::Shape* o = q[2 + p];
    const gert::Shape* c = q[4 + p];
    if (dynamic) {
      if (s != nullptr || o != nullptr) return Fail(kOp, "%s: expected absent with quant_mode dynamic", s ? sn[p] : sn[2 + p]);
      if (c == nullptr) return Fail(kOp, "%s: expected a float32 scale cache for quant_mode dynamic, got none", sn[4 + p]);
      if (c->GetDimNum() != 3 || c->GetDim(0) != nb || c->GetDim(1) != bs || c->GetDim(2) != 1) {
        return Fail(kOp, "%s: expected shape [%lld, %lld, 1], got %s", sn[4 + p], static_cast<long long>(nb),
                    static_cast<long long>(bs), ShapeText(*c, b1, sizeof(b1)));
      }
      continue;
    }
    if (c != nullptr) return Fail(kOp, "%s: expected absent with quant_mode static", sn[4 + p]);
    if (s == nullptr) return Fail(kOp, "%s: expected a float32 scale for quant_mode static, got none", sn[p]);
    if (s->GetDimNum() == 0 || (s->GetDimNum() == 1 && s->GetDim(0) == 1)) {
      kinds[p] = 0;
    } else if (s->GetDimNum() == 1 && s->GetDim(0) == dims[p]) {
      kinds[p] = 2;
    } else {
      return Fail(kOp, "%s: expected shape [] or [1] (per tensor) or [%lld] (per channel), got %s", sn[p],
                  static_cast<long long>(dims[p]), ShapeText(*s, b1, sizeof(b1)));
    }
    if (o != nullptr && !SameShape(*o, *s)) {
      return Fail(kOp, "%s: expected shape %s (as %s), got %s", sn[2 + p], ShapeText(*s, b1, sizeof(b1)), sn[p],
                  ShapeText(*o, b2, sizeof(b2)));
    }
    if ((o != nullptr) != (q[3 - p] != nullptr)) return Fail(kOp, "kv_c_offset, k_pe_offset: expected both or neither");
    hasOffset = o != nullptr;
  }

  // ---- SoC rules and UB plan (nothing to write: no slots or tokens, or both planes empty -> no-op launch)
  const bool noWork = (L == 0 && R == 0) || nb * bs == 0 || T == 0;
  const bool pad = (L % kBlockBytes) != 0 || (R % kBlockBytes) != 0;
  const int64_t cP = AlignUp(L, kBlockBytes), pP = AlignUp(R, kBlockBytes);
  const int64_t row = Max64(cP, pP);
  int64_t tree = 8;
  while (tree < row) tree *= 2;
  if (!noWork) {
    if (pad && hw.is310P) {
      return Fail(kOp, "kv_lora_rank %lld / rope_dim %lld: a row of int8 codes that is not a multiple of 32 bytes needs "
                  "DataCopyPad, which Ascend310P does not have (use sizes that are multiples of 32)",
                  static_cast<long long>(L), static_cast<long long>(R));
    }
    if (dynamic && hw.is310P) {
      return Fail(kOp, "dynamic scales on Ascend310P: a token's scale is one 4-byte write per plane, which needs "
                  "DataCopyPad (not on Ascend310P; a 32-byte read-modify-write would race with the other cores, "
                  "docs/quantization.md); use static scales there");
    }
    auto need = [&](int64_t r) {  // UB bytes for rows of r (padded) elements
      int64_t t = 8;
      while (t < r) t *= 2;
      const int64_t n = 2 * AlignUp(r * elem, kBlockBytes) + r * 4 + r * 2 + 2 * r;
      return dynamic ? n + r * 4 + t * 4 + 2 * 256 : n + (hasOffset ? 4 : 2) * r * 4;
    };
    const int64_t budget = hw.ubBytes - kUbReserveBytes;
    if (need(row) > budget) {
      int64_t fit = row - kBlockBytes;  // the longest row (a multiple of 32 elements) that fits
      while (fit > 0 && need(fit) > budget) fit -= kBlockBytes;
      const bool latent = L >= R;  // the longer plane sets the UB plan
      return Fail(kOp, "%s: expected a row of %s <= %lld elements (the row and its quantization buffers in the %lld "
                  "bytes of UB of %s), got %lld (%lld bytes needed)", latent ? "kv_c" : "k_pe",
                  latent ? "kv_lora_rank" : "rope_dim", static_cast<long long>(fit > 0 ? fit : 0),
                  static_cast<long long>(budget), SocName(hw), static_cast<long long>(latent ? L : R),
                  static_cast<long long>(need(row)));
    }
  }
  const CoreSplit split = noWork ? NoWork() : SplitWork(T, hw.cores);

  ConcatAndCacheMlaQuantTilingData td;
  td.set_numTokens(noWork ? 0 : T);
  td.set_numSlots(nb * bs);
  td.set_blockSize(bs);
  SetCoreSplit(td, split);
  td.set_cDim(L);
  td.set_cPitch(pad ? cP : L);
  td.set_pDim(R);
  td.set_pPitch(pad ? pP : R);
  td.set_treeElems(tree);
  td.set_cScaleKind(kinds[0]);
  td.set_pScaleKind(kinds[1]);
  td.set_hasOffset(hasOffset ? 1 : 0);
  return FinishTiling(context, kOp, hw, td, split.usedCoreNum,
                      mskv_keys::QuantCopyKey(dynamic, dcode, static_cast<uint64_t>(scode), pad));
}

}  // namespace
}  // namespace optiling

namespace ops {
class MskvConcatAndCacheMlaQuant : public OpDef {
 public:
  explicit MskvConcatAndCacheMlaQuant(const char* name) : OpDef(name) {
    Declare(*this, mskv_quant_tiling::kQuantDataDTypes, mskv_quant_tiling::kQuantCacheDTypes,
            mskv_quant_tiling::kQuantIndexDTypes, mskv_quant_tiling::kQuantScaleDTypes,
            mskv_quant_tiling::kQuantStatusDTypes, mskv_quant_tiling::kQuantFormats);
    this->Attr("quant_mode").AttrType(OPTIONAL).Int(mskv_attr::kQuantSTATIC);
    this->AICore().SetTiling(optiling::ConcatAndCacheMlaQuantTiling);
    this->AICore().AddConfig("ascend910b");
    this->AICore().AddConfig("ascend910_93");
    OpAICoreConfig cfg310p;
    Declare(cfg310p, mskv_quant_tiling::kQuantDataDTypes310P, mskv_quant_tiling::kQuantCacheDTypes310P,
            mskv_quant_tiling::kQuantIndexDTypes310P, mskv_quant_tiling::kQuantScaleDTypes310P,
            mskv_quant_tiling::kQuantStatusDTypes310P, mskv_quant_tiling::kQuantFormats310P);
    mskv_tiling::SetStaticCompileFlags(cfg310p);
    this->AICore().AddConfig("ascend310p", cfg310p);
  }

 private:
  template <typename Def>
  static void Declare(Def& d, const std::vector<ge::DataType>& data, const std::vector<ge::DataType>& cache,
                      const std::vector<ge::DataType>& index, const std::vector<ge::DataType>& scale,
                      const std::vector<ge::DataType>& status, const std::vector<ge::Format>& fmt) {
    d.Input("kv_c").ParamType(REQUIRED).DataType(data).Format(fmt).UnknownShapeFormat(fmt);
    d.Input("k_pe").ParamType(REQUIRED).DataType(data).Format(fmt).UnknownShapeFormat(fmt);
    d.Input("kv_c_cache").ParamType(REQUIRED).DataType(cache).Format(fmt).UnknownShapeFormat(fmt);
    d.Input("k_pe_cache").ParamType(REQUIRED).DataType(cache).Format(fmt).UnknownShapeFormat(fmt);
    d.Input("slot_mapping").ParamType(REQUIRED).DataType(index).Format(fmt).UnknownShapeFormat(fmt);
    d.Input("kv_c_scale").ParamType(OPTIONAL).DataType(scale).Format(fmt).UnknownShapeFormat(fmt);
    d.Input("k_pe_scale").ParamType(OPTIONAL).DataType(scale).Format(fmt).UnknownShapeFormat(fmt);
    d.Input("kv_c_offset").ParamType(OPTIONAL).DataType(scale).Format(fmt).UnknownShapeFormat(fmt);
    d.Input("k_pe_offset").ParamType(OPTIONAL).DataType(scale).Format(fmt).UnknownShapeFormat(fmt);
    d.Input("kv_c_scale_cache").ParamType(OPTIONAL).DataType(scale).Format(fmt).UnknownShapeFormat(fmt);
    d.Input("k_pe_scale_cache").ParamType(OPTIONAL).DataType(scale).Format(fmt).UnknownShapeFormat(fmt);
    d.Output("status").ParamType(REQUIRED).DataType(status).Format(fmt).UnknownShapeFormat(fmt);
  }
};
OP_ADD(MskvConcatAndCacheMlaQuant);
}  // namespace ops
