// MskvRopeReshapeAndCacheMerged: OpDef and tiling.
//
// Inputs (MindSpore ops.Custom order, = ms_kvcache.ops.rope_reshape_and_cache_merged.SPEC): positions, query,
// key, value, cos_sin_cache, kv_cache [2, nb, ...] (K plane 0, V plane 1, written in place through its
// input address), slot_mapping. Outputs: query_out, key_out. Attrs: is_neox_style, cache_layout. The
// tiling is op_host/rope_cache_tiling_impl.h (shared with MskvRopeReshapeAndCache).
#include "rope_reshape_and_cache_merged_tiling.h"
#include "rope_cache_tiling_impl.h"

namespace optiling {
namespace {

ge::graphStatus RopeReshapeAndCacheTiling(gert::TilingContext* context) {
  return rope_cache::RopeCacheTiling(context, "MskvRopeReshapeAndCacheMerged", true);
}

}  // namespace
}  // namespace optiling

namespace ops {
class MskvRopeReshapeAndCacheMerged : public OpDef {
 public:
  explicit MskvRopeReshapeAndCacheMerged(const char* name) : OpDef(name) {
    Declare(*this, mskv_rope_tiling::kRopePDTypes, mskv_rope_tiling::kRopeTDTypes, mskv_rope_tiling::kRopeCDTypes,
            mskv_rope_tiling::kRopeSDTypes, mskv_rope_tiling::kRopeFormats);
    this->Attr("is_neox_style").AttrType(OPTIONAL).Bool(true);
    this->Attr("cache_layout").AttrType(OPTIONAL).Int(mskv_attr::kLayoutBSND);
    this->AICore().SetTiling(optiling::RopeReshapeAndCacheTiling);
    this->AICore().AddConfig("ascend910b");
    this->AICore().AddConfig("ascend910_93");
    OpAICoreConfig cfg310p;
    Declare(cfg310p, mskv_rope_tiling::kRopePDTypes310P, mskv_rope_tiling::kRopeTDTypes310P,
            mskv_rope_tiling::kRopeCDTypes310P, mskv_rope_tiling::kRopeSDTypes310P, mskv_rope_tiling::kRopeFormats310P);
    mskv_tiling::SetStaticCompileFlags(cfg310p);
    this->AICore().AddConfig("ascend310p", cfg310p);
  }

 private:
  template <typename Def>
  static void Declare(Def& d, const std::vector<ge::DataType>& pos, const std::vector<ge::DataType>& data,
                      const std::vector<ge::DataType>& table, const std::vector<ge::DataType>& slots,
                      const std::vector<ge::Format>& fmt) {
    d.Input("positions").ParamType(REQUIRED).DataType(pos).Format(fmt).UnknownShapeFormat(fmt);
    d.Input("query").ParamType(REQUIRED).DataType(data).Format(fmt).UnknownShapeFormat(fmt);
    d.Input("key").ParamType(REQUIRED).DataType(data).Format(fmt).UnknownShapeFormat(fmt);
    d.Input("value").ParamType(REQUIRED).DataType(data).Format(fmt).UnknownShapeFormat(fmt);
    d.Input("cos_sin_cache").ParamType(REQUIRED).DataType(table).Format(fmt).UnknownShapeFormat(fmt);
    d.Input("kv_cache").ParamType(REQUIRED).DataType(data).Format(fmt).UnknownShapeFormat(fmt);
    d.Input("slot_mapping").ParamType(REQUIRED).DataType(slots).Format(fmt).UnknownShapeFormat(fmt);
    d.Output("query_out").ParamType(REQUIRED).DataType(data).Format(fmt).UnknownShapeFormat(fmt);
    d.Output("key_out").ParamType(REQUIRED).DataType(data).Format(fmt).UnknownShapeFormat(fmt);
  }
};
OP_ADD(MskvRopeReshapeAndCacheMerged);
}  // namespace ops
