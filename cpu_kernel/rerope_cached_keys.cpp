// rerope_cached_keys, native CPU kernel ("cpu" backend): for each i, rotate the cached key heads at
// slot_mapping[i] by the angle of new_positions[i] minus old_positions[i] (undo RoPE at the old
// position and apply it at the new one, one pass, in place; see rope_common.h / rope_body.inl).
// Inputs: key_cache [nb, bs, H, D] (BSND) / [nb, H, bs, D] (BNSD) or [nb, bs, D] (one head, e.g.
// the MLA k_pe plane), written in place; slot_mapping, old_positions, new_positions [N] int;
// cos_sin_cache [max_position, rotary_dim]. Output: dummy int32 [1].
// Attrs: is_neox_style, cache_layout. Invalid slots/positions are skipped (strict mode of the PyNative
// fast path, attribute mskv_strict: they make the op fail before anything is written).
#include "rope_common.h"

MSKV_AOT_EXPORT int MskvReropeCachedKeys(int nparam, void** params, int* ndims, int64_t** shapes,
                                     const char** dtypes, void* /*stream*/, void* extra) {
  MSKV_AOT_GUARD("rerope_cached_keys", {
    mskv::AotArgs a{nparam, params, ndims, shapes, dtypes, static_cast<mindspore::AotExtra*>(extra)};
    using mskv::rope::Require;
    Require(nparam == 6, "expected 5 inputs + 1 output, got " + std::to_string(nparam));
    mskv::rope::ReropeArgs r;
    const bool bnsd = mskv::rope::LayoutAttr(a);
    r.cache = mskv::rope::PlaneArg(a, 0, bnsd);
    r.dtype = a.dtype(0);
    Require(mskv::rope::IsFloat(r.dtype), "key_cache dtype must be float16, bfloat16 or float32");
    r.table = mskv::rope::TableArg(a, 4, r.dtype, r.cache.head_size);
    Require(a.rank(1) == 1 && a.rank(2) == 1 && a.rank(3) == 1, "slot_mapping/positions must be rank 1");
    r.count = a.dim(1, 0);
    Require(a.dim(2, 0) == r.count && a.dim(3, 0) == r.count, "old/new positions length differs from slot_mapping");
    Require(mskv::rope::IsIndex(a.dtype(1)) && mskv::rope::IsIndex(a.dtype(2)) && a.dtype(2) == a.dtype(3),
            "index dtypes");
    r.slots = a.ptr<void>(1);
    r.slot_dtype = a.dtype(1);
    r.old_positions = a.ptr<void>(2);
    r.new_positions = a.ptr<void>(3);
    r.pos_dtype = a.dtype(2);
    r.neox = a.attr_bool("is_neox_style", true);
    mskv::rope::StrictCheck(a, r);
    mskv::rope::Rerope(r);
  })
}
