// MskvCopyBlocks: OpDef and tiling.
//
// Inputs (MindSpore ops.Custom order, = ms_kvcache.ops.copy_blocks.SPEC): key_caches (DYNAMIC, one
// tensor per layer), value_caches (DYNAMIC, same count), all caches of one shape
// [num_blocks, ...] and dtype, written in place through their input addresses; block_mapping
// int64 (or int32) [n, 2] of (src, dst) block ids. Output: status, int32 [1], never written
// (docs/design.md). No attributes.
//
// Semantics: for each cache, the pairs (src, dst) are applied in order (as ms_kvcache's cpu backend;
// vLLM leaves chained pairs undefined). Pairs with an id outside [0, num_blocks) are skipped.
//
// Tiling: work units = the 2 * num_layers caches, each split into byte ranges ("pieces") so that the
// units fill the cores evenly; units are spread over all vector cores (main/tail share); every
// piece moves through double-buffered UB chunks sized from the platform's UB. Tiling key =
// dtype * 100 + index dtype * 10 + DataCopyPad.
#include "copy_blocks_tiling.h"
#include "kv_copy_tiling_common.h"

namespace optiling {
namespace {

constexpr const char* kOp = "MskvCopyBlocks";
enum { kKeyCaches = 0, kValueCaches, kBlockMapping };
// A block is split into pieces of at least this many bytes to keep cores busy when caches are few.
constexpr int64_t kMinPieceBytes = 1024;

ge::graphStatus CopyBlocksTiling(gert::TilingContext* context) {
  using namespace mskv_tiling;
  Hardware hw;
  if (GetHardware(context, kOp, &hw) != ge::GRAPH_SUCCESS) return ge::GRAPH_FAILED;
  char b1[128], b2[128];

  // ---- the caches: every instance of both dynamic inputs has the first key cache's shape and dtype
  int64_t layers = 0;
  while (context->GetDynamicInputShape(kKeyCaches, layers) != nullptr) ++layers;
  int64_t vlayers = 0;
  while (context->GetDynamicInputShape(kValueCaches, vlayers) != nullptr) ++vlayers;
  if (vlayers != layers) {
    return Fail(kOp, "value_caches: expected %lld caches (as key_caches), got %lld", static_cast<long long>(layers),
                static_cast<long long>(vlayers));
  }
  if (layers == 0) return Fail(kOp, "key_caches: expected at least one cache, got none");
  const gert::Shape& c0 = context->GetDynamicInputShape(kKeyCaches, 0)->GetStorageShape();
  const gert::CompileTimeTensorDesc* d0 = context->GetDynamicInputDesc(kKeyCaches, 0);
  if (d0 == nullptr) return Fail(kOp, "key_caches[0]: no tensor description");
  const ge::DataType dt = d0->GetDataType();
  uint64_t dcode = 0;
  const int64_t elem = KvDTypeSize(dt, &dcode);
  if (elem == 0) return Fail(kOp, "key_caches[0]: expected float16, bfloat16, float32 or int8, got %s", DTypeName(dt));
  if (CheckSameDType(context, kOp, hw, dt, "key_caches[0]", nullptr, 0) != ge::GRAPH_SUCCESS) return ge::GRAPH_FAILED;
  if (c0.GetDimNum() < 2) return Fail(kOp, "key_caches[0]: expected rank >= 2, got shape %s", ShapeText(c0, b1, sizeof(b1)));
  for (int list = kKeyCaches; list <= kValueCaches; ++list) {
    const char* lname = list == kKeyCaches ? "key_caches" : "value_caches";
    for (int64_t i = 0; i < layers; ++i) {
      const gert::Shape& ci = context->GetDynamicInputShape(list, i)->GetStorageShape();
      const gert::CompileTimeTensorDesc* di = context->GetDynamicInputDesc(list, i);
      if (di == nullptr) return Fail(kOp, "%s[%lld]: no tensor description", lname, static_cast<long long>(i));
      if (di->GetDataType() != dt) {
        return Fail(kOp, "%s[%lld]: expected dtype %s (as key_caches[0]), got %s", lname, static_cast<long long>(i),
                    DTypeName(dt), DTypeName(di->GetDataType()));
      }
      if (i == 0 && CheckTensorSize(kOp, lname, ci, elem) != ge::GRAPH_SUCCESS) return ge::GRAPH_FAILED;
      if (!SameShape(ci, c0)) {
        return Fail(kOp, "%s[%lld]: expected shape %s (as key_caches[0]), got %s", lname, static_cast<long long>(i),
                    ShapeText(c0, b1, sizeof(b1)), ShapeText(ci, b2, sizeof(b2)));
      }
    }
  }

  // ---- block_mapping
  const gert::Shape* bmp = nullptr;
  int icode = 0;
  if (RequiredIndexInput(context, kOp, kBlockMapping, "block_mapping", &bmp, &icode) != ge::GRAPH_SUCCESS) {
    return ge::GRAPH_FAILED;
  }
  const gert::Shape& bm = *bmp;
  if (bm.GetDimNum() != 2 || bm.GetDim(1) != 2) {
    return Fail(kOp, "block_mapping: expected shape [n, 2], got %s", ShapeText(bm, b1, sizeof(b1)));
  }
  if (CheckTensorSize(kOp, "block_mapping", bm, icode == 0 ? 4 : 8) != ge::GRAPH_SUCCESS) return ge::GRAPH_FAILED;
  const int64_t pairs = bm.GetDim(0);

  // ---- geometry
  const int64_t numBlocks = c0.GetDim(0);
  int64_t blockElems = 0;
  DimProduct(c0, 1, 1, &blockElems);  // in range: CheckTensorSize above
  const int64_t blockBytes = blockElems * elem;
  // Nothing to copy (no pairs, no blocks, or zero-sized blocks): a no-op launch.
  const bool noWork = pairs == 0 || numBlocks == 0 || blockElems == 0;
  const bool pad = !noWork && (blockBytes % kBlockBytes) != 0;
  if (pad && hw.is310P) {
    return Fail(kOp, "cache blocks of %lld bytes are not a multiple of 32 bytes; Ascend310P has no DataCopyPad, so "
                "such caches are unsupported there", static_cast<long long>(blockBytes));
  }

  // ---- pieces, work split and UB chunks. Pieces per block: the smallest count (pieces >= 1 KiB)
  // that gives every core work and keeps >= 95% of the cores' work slots busy
  // (units / (ceil(units / cores) * cores)), else the best count found up to 64.
  const int64_t caches = 2 * layers;
  const int64_t maxPieces = Min64(Max64(blockBytes / kMinPieceBytes, 1), 64);
  int64_t pieces = 1, pieceElems = blockElems;
  double bestEff = -1.0;
  for (int64_t p = 1; p <= maxPieces && !noWork; ++p) {
    const int64_t pe = AlignUp(CeilDiv(blockElems, p) * elem, kBlockBytes) / elem;
    const int64_t actual = CeilDiv(blockElems, pe);
    const int64_t units = caches * actual;
    const double eff = static_cast<double>(units) / static_cast<double>(CeilDiv(units, hw.cores) * hw.cores);
    if (eff > bestEff + 1e-9) {
      bestEff = eff;
      pieces = actual;
      pieceElems = pe;
    }
    if (bestEff >= 0.95 && caches * pieces >= hw.cores) break;
  }
  const CoreSplit split = noWork ? NoWork() : SplitWork(caches * pieces, hw.cores);
  const int64_t maxChunkElems = AlignDown(hw.bufferBytes, kBlockBytes) / elem;
  const int64_t chunkElems = Max64(Min64(pieceElems, maxChunkElems), 1);
  if (pieces < 1) pieces = 1;  // the kernel divides a unit index by it

  CopyBlocksTilingData td;
  td.set_numLayers(layers);
  td.set_numPairs(pairs);
  td.set_numBlocks(numBlocks);
  td.set_blockElems(blockElems);
  td.set_piecesPerBlock(pieces);
  td.set_pieceElems(pieceElems);
  td.set_chunkElems(chunkElems);
  td.set_bufferBytes(AlignUp(chunkElems * elem, kBlockBytes));
  SetCoreSplit(td, split);

  return FinishTiling(context, kOp, hw, td, split.usedCoreNum,
                      mskv_keys::CopyKey(dcode, static_cast<uint64_t>(icode), pad));
}

}  // namespace
}  // namespace optiling

namespace ops {
class MskvCopyBlocks : public OpDef {
 public:
  explicit MskvCopyBlocks(const char* name) : OpDef(name) {
    mskv_tiling::DeclareOnEverySoc(*this, mskv_tiling::kCopyRows, mskv_tiling::kCopyRows310P,
                                   optiling::CopyBlocksTiling);
  }

  // The parameters, with the dtype rows r of one compute unit (DeclareOnEverySoc).
  template <typename Def> static void Declare(Def& d, const mskv_tiling::CopyRows& r) {
    mskv_tiling::DeclareParams(d, r.fmt, {{"key_caches", r.kv, DYNAMIC}, {"value_caches", r.kv, DYNAMIC},
                                          {"block_mapping", r.index}}, {{"status", r.status}});
  }
};
OP_ADD(MskvCopyBlocks);
}  // namespace ops
