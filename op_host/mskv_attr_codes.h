// Integer codes of the named-mode attributes (cache_layout, direction, quant_mode), shared by the OpDefs and tilings
// in op_host/ and the native CPU kernels in cpu_kernel/.
//
// The declaration is ms_kvcache/_spec.py (AttrSpec.codes, values in ms_kvcache/_formats.py); the
// structural check (python -m ms_kvcache._structure) fails if a constant here differs from it. The
// attributes are OpDef Int attributes (aclnn: int64_t) rather than String ones because MindSpore 2.7.x /
// 2.8.0 cannot pass a string attribute to an Ascend C custom op (their aclnn code generator has no str /
// char* type); the Python API still takes the names and encodes them.
#ifndef MS_KVCACHE_OP_HOST_MSKV_ATTR_CODES_H_
#define MS_KVCACHE_OP_HOST_MSKV_ATTR_CODES_H_

#include <cstdint>

namespace mskv_attr {

// cache_layout: BSND = [num_blocks, block_size, num_kv_heads, head_size], BNSD = [num_blocks,
// num_kv_heads, block_size, head_size], NZ = FRACTAL_NZ [num_blocks, num_kv_heads * head_size / C0,
// block_size, C0] with C0 = 32 bytes of elements (the layout digit of the copy kernels' tiling keys).
constexpr int64_t kLayoutBSND = 0;
constexpr int64_t kLayoutBNSD = 1;
constexpr int64_t kLayoutNZ = 2;

// direction of the multi-layer transfers: CANN's aclrtMemcpyKind values.
constexpr int64_t kDirH2D = 1;  // ACL_MEMCPY_HOST_TO_DEVICE: host buffer -> caches
constexpr int64_t kDirD2H = 2;  // ACL_MEMCPY_DEVICE_TO_HOST: caches -> host buffer

// quant_mode of the quantized cache writes: static scales or dynamic per-token scales (scale caches).
constexpr int64_t kQuantSTATIC = 0;
constexpr int64_t kQuantDYNAMIC = 1;

inline const char* LayoutName(int64_t code) {
  return code == kLayoutBSND ? "BSND" : code == kLayoutBNSD ? "BNSD" : code == kLayoutNZ ? "NZ" : "unknown";
}
inline const char* DirectionName(int64_t code) {
  return code == kDirH2D ? "h2d" : code == kDirD2H ? "d2h" : "unknown";
}
inline const char* QuantModeName(int64_t code) {
  return code == kQuantSTATIC ? "static" : code == kQuantDYNAMIC ? "dynamic" : "unknown";
}

}  // namespace mskv_attr

#endif  // MS_KVCACHE_OP_HOST_MSKV_ATTR_CODES_H_
