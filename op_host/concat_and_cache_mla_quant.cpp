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
  const gert::Shape* shapes[5];
  if (GetHardwareAndShapes(context, kOp, &hw, 5, shapes) != ge::GRAPH_SUCCESS) return ge::GRAPH_FAILED;
  const gert::Shape &kvc = *shapes[kKvc], &kpe = *shapes[kKpe], &cc = *shapes[kKvcCache], &pc = *shapes[kKpeCache],
                    &sm = *shapes[kSlotMapping];

  // ---- attrs
  bool dynamic = false;
  if (QuantModeAttr(context, 0, kOp, &dynamic) != ge::GRAPH_SUCCESS) return ge::GRAPH_FAILED;

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
  char b1[160];
  const char* names[4] = {"kv_c", "k_pe", "kv_c_cache", "k_pe_cache"};
  for (int i = 0; i < 4; ++i) {
    if (CheckTensorSize(kOp, names[i], *shapes[i], i < 2 ? elem : 1) != ge::GRAPH_SUCCESS)
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
  int kinds[2] = {0, 0};
  bool hasOffset = false;
  if (MlaScales(context, kOp, kCScale, dynamic, nb, bs, L, R, kinds, &hasOffset) != ge::GRAPH_SUCCESS)
    return ge::GRAPH_FAILED;

  // ---- SoC rules and UB plan (nothing to write: no slots or tokens, or both planes empty -> no-op launch)
  const bool noWork = (L == 0 && R == 0) || nb * bs == 0 || T == 0;
  const bool pad = (L % kBlockBytes) != 0 || (R % kBlockBytes) != 0;
  const int64_t cP = AlignUp(L, kBlockBytes), pP = AlignUp(R, kBlockBytes);
  const int64_t row = Max64(cP, pP);
  int64_t tree = 8;
  while (tree < row) tree *= 2;
  if (!noWork) {
    if (MlaQuantRules(kOp, hw, dynamic, L, R) != ge::GRAPH_SUCCESS) return ge::GRAPH_FAILED;
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
  // The parameters, with the dtype rows r of one compute unit (DeclareOnEverySoc).
  template <typename Def> static void Declare(Def& d, const mskv_quant_tiling::QuantRows& r) {
    mskv_tiling::DeclareParams(d, r.fmt,
                               {{"kv_c", r.data}, {"k_pe", r.data}, {"kv_c_cache", r.cache}, {"k_pe_cache", r.cache},
                                {"slot_mapping", r.index}, {"kv_c_scale", r.scale, OPTIONAL},
                                {"k_pe_scale", r.scale, OPTIONAL}, {"kv_c_offset", r.scale, OPTIONAL},
                                {"k_pe_offset", r.scale, OPTIONAL}, {"kv_c_scale_cache", r.scale, OPTIONAL},
                                {"k_pe_scale_cache", r.scale, OPTIONAL}},
                               {{"status", r.status}});
  }

  explicit MskvConcatAndCacheMlaQuant(const char* name) : OpDef(name) {
    this->Attr("quant_mode").AttrType(OPTIONAL).Int(mskv_attr::kQuantSTATIC);
    mskv_tiling::DeclareOnEverySoc(*this, mskv_quant_tiling::kQuantRows, mskv_quant_tiling::kQuantRows310P,
                                   optiling::ConcatAndCacheMlaQuantTiling);
  }
};
OP_ADD(MskvConcatAndCacheMlaQuant);
}  // namespace ops
