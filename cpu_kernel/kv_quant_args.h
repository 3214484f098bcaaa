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
// (cache_idx) inputs, checked against the plane geometry `cp`: static scale of 1 or heads*head_size
// float32 values, offset absent or shaped like the scale (int8 only), scale cache absent; dynamic: a
// float32 scale cache of num_slots * heads values, static inputs absent. Strict mode re-checks the
// static values (finite, scales > 0).
PlaneQuant ParsePlaneQuant(const AotArgs& a, Code code, bool dynamic, int scale_idx, int offset_idx, int cache_idx,
                           const rope::CachePlane& cp, const char* plane);

}  // namespace quant
}  // namespace mskv
