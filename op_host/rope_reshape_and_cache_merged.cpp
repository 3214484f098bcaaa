// MskvRopeReshapeAndCacheMerged: OpDef and tiling.
//
// Inputs (MindSpore ops.Custom order, = ms_kvcache.ops.rope_reshape_and_cache_merged.SPEC): positions, query,
// key, value, cos_sin_cache, kv_cache [2, nb, ...] (K plane 0, V plane 1, written in place through its
// input address), slot_mapping. Outputs: query_out, key_out. Attrs: is_neox_style, cache_layout. The
// tiling is op_host/rope_cache_tiling_impl.h (shared with MskvRopeReshapeAndCache).
#include "rope_reshape_and_cache_merged_tiling.h"
#include "rope_cache_tiling_impl.h"

namespace ops {
class MskvRopeReshapeAndCacheMerged : public OpDef {
 public:
  explicit MskvRopeReshapeAndCacheMerged(const char* name) : OpDef(name) {
    mskv_rope_tiling::DeclareGqaRopeOnEverySoc(*this, optiling::rope_cache::RopeCacheTilingOf<true>);
  }

  // The parameters, with the dtype rows r of one compute unit (DeclareOnEverySoc).
  template <typename Def> static void Declare(Def& d, const mskv_rope_tiling::RopeRows& r) {
    mskv_tiling::DeclareParams(d, r.fmt, {{"positions", r.pos}, {"query", r.data}, {"key", r.data}, {"value", r.data},
                                          {"cos_sin_cache", r.table}, {"kv_cache", r.data},
                                          {"slot_mapping", r.slots}}, {{"query_out", r.data}, {"key_out", r.data}});
  }
};
OP_ADD(MskvRopeReshapeAndCacheMerged);
}  // namespace ops
