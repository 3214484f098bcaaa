// AOT argument parsing of the quantizing ops' CPU kernels (kv_quant.cpp): the quant_mode attribute, the
// cache dtype's code and one plane's scale / offset / scale-cache inputs. The inputs of a plane follow
// the OpSpec convention: an absent optional input arrives as an empty [0] tensor.
#pragma once

#include "kv_quant.h"
#include "rope_common.h"

namespace mskv {
namespace quant {

// Attribute quant_mode (int-coded, op_host/mskv_attr_codes.h): kQuantSTATIC (false) or kQuantDYNAMIC
// (true); throws otherwise.
bool ReadDynamic(const AotArgs& a);

// The code of cache input `idx`; throws naming `what` for a dtype without a quantization rule.
Code CacheCode(const AotArgs& a, int idx, const char* what);

// One plane's quantization from its scale (scale_idx), offset (offset_idx) and scale cache
// (cache_idx) inputs, checked against the plane geometry `cp`: static scale of 1, heads or heads*head_size
// float32 values, offset absent or shaped like the scale (int8 only), scale cache absent; dynamic: a
// float32 scale cache of num_slots * heads values, static inputs absent. The static values are checked
// at every launch (finite, scales > 0: CheckScaleValues naming '<plane>_scale' / '<plane>_offset'), so
// the op fails before its first write in graph mode too; call it before writing anything.
PlaneQuant ParsePlaneQuant(const AotArgs& a, Code code, bool dynamic, int scale_idx, int offset_idx, int cache_idx,
                           const rope::CachePlane& cp, const char* plane);

// The K and V cache planes of a GQA quantizing write from inputs key_idx / value_idx: kv_format 2
// (SEPARATE_KV) two rank-4 caches of one shape and dtype; kv_format 1 (MERGED_KV) the rank-5 [2, nb, ...]
// cache at key_idx (its V plane behind the K plane) and an empty value_cache. Reads kv_format and
// cache_layout; throws on anything else. An NZ cache takes its heads / head_size from the key rows [T', H, D]
// at input rows_idx (rope::NzPlaneArg).
void GqaPlanes(const AotArgs& a, int key_idx, int value_idx, rope::CachePlane* kc, rope::CachePlane* vc, int rows_idx);

// The two planes of a quantizing scatter (reshape_and_cache_quant: K, V; concat_and_cache_mla_quant:
// kv_c, k_pe) from the plane geometries `cp` (source rows: inputs 0 and 1, dtype of input 0, contiguous
// heads * head_size rows), slot_mapping (input 4), and each plane's scale / offset / scale-cache inputs
// (5 + p, 7 + p, 9 + p; names[p] in messages); the cache dtype (input 2, `cache_name`) gives the code. Strict mode: the slots are checked here (distinct, in range).
ScatterArgs ScatterOf(const AotArgs& a, const rope::CachePlane cp[2], const char* const names[2], const char* cache_name);

}  // namespace quant
}  // namespace mskv

// The exported AOT entry point `symbol` of a quantizing op (`op`: its name in messages): checks that it
// got `nparam_expected` inputs + outputs, then runs the body (the remaining arguments, a braced block)
// with `a`, the argument view, under MSKV_AOT_GUARD.
#define MSKV_QUANT_ENTRY(symbol, op, nparam_expected, ...)                                                 \
  MSKV_AOT_EXPORT int symbol(int nparam, void** params, int* ndims, int64_t** shapes, const char** dtypes, \
                             void* /*stream*/, void* extra) {                                              \
    MSKV_AOT_GUARD(op, {                                                                                   \
      ::mskv::AotArgs a{nparam, params, ndims, shapes, dtypes, static_cast<mindspore::AotExtra*>(extra)};  \
      ::mskv::rope::Require(nparam == (nparam_expected), "expected " + std::to_string(nparam_expected) +   \
                                                             " inputs + outputs, got " + std::to_string(nparam)); \
      __VA_ARGS__                                                                                          \
    })                                                                                                     \
  }
