// Argument parsing shared by the quantizing ops' CPU kernels (see kv_quant.h).
#include "kv_quant_args.h"

#include <cmath>
#include <string>

namespace mskv {
namespace quant {

void StrictCheckScales(const char* what, const float* v, int64_t n, bool positive) {
  for (int64_t i = 0; i < n; ++i) {
    const float x = v[i];
    if (!std::isfinite(x) || (positive && !(x > 0.0f))) {
      throw KernelError(std::string(what) + ": expected " + (positive ? "finite values > 0" : "finite values") +
                        ", got " + std::to_string(x) + " at flat index " + std::to_string(i) +
                        " (checked at launch: was it modified after the call?)");
    }
  }
}

bool ReadDynamic(const AotArgs& a) {
  const int64_t mode = a.attr_int("quant_mode", mskv_attr::kQuantSTATIC);
  if (mode == mskv_attr::kQuantDYNAMIC) return true;
  if (mode != mskv_attr::kQuantSTATIC) {
    throw KernelError("quant_mode must be " + std::to_string(mskv_attr::kQuantSTATIC) + " (static) or " +
                      std::to_string(mskv_attr::kQuantDYNAMIC) + " (dynamic), got " + std::to_string(mode));
  }
  return false;
}

Code CacheCode(const AotArgs& a, int idx, const char* what) {
  Code c;
  if (!CodeOf(a.dtype(idx), &c)) {
    throw KernelError(std::string(what) + " dtype " + DTypeName(a.dtype(idx)) +
                      " has no quantization rule (int8, float8_e4m3fn, float8_e5m2)");
  }
  return c;
}

PlaneQuant ParsePlaneQuant(const AotArgs& a, Code code, bool dynamic, int scale_idx, int offset_idx, int cache_idx,
                           const rope::CachePlane& cp, const char* plane) {
  const std::string p(plane);
  PlaneQuant q;
  q.code = code;
  q.dynamic = dynamic;
  const int64_t channels = cp.heads * cp.head_size;
  if (dynamic) {
    if (a.numel(scale_idx) != 0 || a.numel(offset_idx) != 0)
      throw KernelError(p + ": static scales / offsets given with quant_mode dynamic");
    if (a.dtype(cache_idx) != DType::kF32) throw KernelError(p + " scale cache must be float32");
    if (a.numel(cache_idx) != cp.num_slots() * cp.heads ||
        (a.rank(cache_idx) != 3 && !(a.rank(cache_idx) == 4 && a.dim(cache_idx, -1) == 1)))
      throw KernelError(p + " scale cache must be the cache plane with head_size 1 ([nb, bs, heads(, 1)] / "
                        "[nb, heads, bs(, 1)] / MLA [nb, bs, 1])");
    q.scale_cache = a.ptr<float>(cache_idx);
    return q;
  }
  if (a.numel(cache_idx) != 0) throw KernelError(p + ": a scale cache given with quant_mode static");
  if (a.dtype(scale_idx) != DType::kF32) throw KernelError(p + " scale must be float32");
  const int64_t n = a.numel(scale_idx);
  if (n != 1 && n != channels && n != cp.heads) {
    throw KernelError(p + " scale must hold 1 value (per tensor), " + std::to_string(cp.heads) + " (per head) or " +
                      std::to_string(channels) + " (per channel), got " + std::to_string(n));
  }
  q.per_channel = n != 1 && n == channels;  // (1 channel: both readings are the same)
  q.per_head = n != 1 && !q.per_channel;    // n == heads
  q.scale = a.ptr<float>(scale_idx);
  const int64_t no = a.numel(offset_idx);
  if (no != 0) {
    if (code != Code::kInt8) throw KernelError(p + " offset: offsets apply to int8 caches only");
    if (a.dtype(offset_idx) != DType::kF32 || no != n) throw KernelError(p + " offset must be float32 shaped like its scale");
    q.offset = a.ptr<float>(offset_idx);
  }
  if (rope::Strict(a)) {
    StrictCheckScales((p + " scale").c_str(), q.scale, n, true);
    if (q.offset != nullptr) StrictCheckScales((p + " offset").c_str(), q.offset, n, false);
  }
  return q;
}

}  // namespace quant
}  // namespace mskv
