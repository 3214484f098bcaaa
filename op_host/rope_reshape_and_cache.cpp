// MskvRopeReshapeAndCache: OpDef and tiling.
//
// Inputs (MindSpore ops.Custom order, = ms_kvcache.ops.rope_reshape_and_cache.SPEC): positions, query, key,
// value, cos_sin_cache, key_cache, value_cache (written in place through their input addresses),
// slot_mapping. Outputs: query_out, key_out (shapes / dtype of query and key). Attrs: is_neox_style,
// cache_layout. The tiling is op_host/rope_cache_tiling_impl.h (shared with the merged-cache variant).
#include "rope_reshape_and_cache_tiling.h"
#include "rope_cache_tiling_impl.h"

namespace ops {
class MskvRopeReshapeAndCache : public OpDef {
 public:
  explicit MskvRopeReshapeAndCache(const char* name) : OpDef(name) {
    mskv_rope_tiling::DeclareGqaRopeOnEverySoc(*this, optiling::rope_cache::RopeCacheTilingOf<false>);
  }

  // The parameters, with the dtype rows r of one compute unit (DeclareOnEverySoc).
  template <typename Def> static void Declare(Def& d, const mskv_rope_tiling::RopeRows& r) {
    mskv_tiling::DeclareParams(d, r.fmt, {{"positions", r.pos}, {"query", r.data}, {"key", r.data}, {"value", r.data},
                                          {"cos_sin_cache", r.table}, {"key_cache", r.data}, {"value_cache", r.data},
                                          {"slot_mapping", r.slots}}, {{"query_out", r.data}, {"key_out", r.data}});
  }
};
OP_ADD(MskvRopeReshapeAndCache);
}  // namespace ops
