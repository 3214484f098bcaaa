// Argument parsing shared by the quantizing ops' CPU kernels (see kv_quant.h).
#include "kv_quant_args.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>

namespace mskv {
namespace quant {

std::string ScaleValuesProblem(const std::string& arg, const float* v, int64_t n, bool positive) {
  for (int64_t i = 0; i < n; ++i) {
    const float x = v[i];
    if (!std::isfinite(x) || (positive && !(x > 0.0f))) {
      char got[32];
      std::snprintf(got, sizeof(got), "%.9g", static_cast<double>(x));  // 0, -1, nan, inf, 1e-05
      return "argument '" + arg + "': expected " + (positive ? "finite values > 0" : "finite values") + ", got " +
             got + " at flat index " + std::to_string(i);
    }
  }
  return std::string();
}

void CheckScaleValues(const std::string& arg, const float* v, int64_t n, bool positive, bool strict) {
  const std::string problem = ScaleValuesProblem(arg, v, n, positive);
  if (problem.empty()) return;
  throw KernelError(problem + (strict ? " (checked at launch: was it modified after the call?)" :
                                        " (checked at launch); nothing was written"));
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
  // every launch (graph mode and ops.Custom too, where Python never sees the values), before any write
  const bool strict = rope::Strict(a);
  CheckScaleValues(p + "_scale", q.scale, n, true, strict);
  if (q.offset != nullptr) CheckScaleValues(p + "_offset", q.offset, n, false, strict);
  return q;
}

void GqaPlanes(const AotArgs& a, int key_idx, int value_idx, rope::CachePlane* kc, rope::CachePlane* vc, int rows_idx) {
  const int64_t layout = rope::LayoutCode(a);
  const bool nz = LayoutIsNz(layout);
  const bool bnsd = !nz && LayoutIsBnsd(layout);
  const int64_t fmt = a.attr_int("kv_format", 2);
  rope::Require(fmt == 1 || fmt == 2, "kv_format must be 1 (MERGED_KV) or 2 (SEPARATE_KV)");
  const int k = key_idx, v = value_idx;
  if (fmt == 2) {
    rope::Require(a.rank(k) == 4 && a.rank(v) == 4, "caches must be rank 4");
    for (int d = 0; d < 4; ++d) rope::Require(a.dim(k, d) == a.dim(v, d), "key_cache and value_cache shapes differ");
    rope::Require(a.dtype(v) == a.dtype(k), "key_cache and value_cache dtypes differ");
    *kc = nz ? rope::NzPlaneArg(a, k, 0, rows_idx) : rope::PlaneArg(a, k, bnsd);
    *vc = nz ? rope::NzPlaneArg(a, v, 0, rows_idx) : rope::PlaneArg(a, v, bnsd);
    return;
  }
  rope::Require(a.rank(k) == 5 && a.dim(k, 0) == 2, "a MERGED_KV cache must be [2, nb, ...] rank 5");
  rope::Require(a.numel(v) == 0, "value_cache must be empty for MERGED_KV");
  if (nz) {
    *kc = rope::NzPlaneArg(a, k, 1, rows_idx);
    *vc = *kc;
    vc->base = kc->base + kc->num_slots() * kc->heads * kc->head_size * static_cast<int64_t>(kc->elem);
    return;
  }
  kc->base = a.ptr(k);
  kc->elem = 1;
  kc->num_blocks = a.dim(k, 1);
  kc->block_size = bnsd ? a.dim(k, 3) : a.dim(k, 2);
  kc->heads = bnsd ? a.dim(k, 2) : a.dim(k, 3);
  kc->head_size = a.dim(k, 4);
  kc->bnsd = bnsd;
  *vc = *kc;
  vc->base = kc->base + kc->num_slots() * kc->heads * kc->head_size;
}

ScatterArgs ScatterOf(const AotArgs& a, const rope::CachePlane cp[2], const char* const names[2], const char* cache_name) {
  const Code code = CacheCode(a, 2, cache_name);
  const bool dynamic = ReadDynamic(a);
  const DType dt = a.dtype(0);
  rope::Require(rope::IsFloat(dt) && a.dtype(1) == dt,
                std::string(names[0]) + "/" + names[1] + " must be float16, bfloat16 or float32 of one dtype");
  rope::Require(a.rank(4) == 1 && rope::IsIndex(a.dtype(4)), "slot_mapping must be int32/int64 [T]");
  const int64_t T = a.dim(4, 0);
  ScatterArgs s;
  s.dtype = dt;
  s.num_planes = 2;
  s.slots = a.ptr<void>(4);
  s.slot_dtype = a.dtype(4);
  s.num_tokens = T;
  for (int p = 0; p < 2; ++p) {
    const int64_t row = cp[p].heads * cp[p].head_size;
    rope::Require(a.rank(p) >= 2 && a.numel(p) == a.dim(p, 0) * row,
                  std::string(names[p]) + " rows must hold " + std::to_string(row) + " elements (the cache row)");
    rope::Require(a.dim(p, 0) >= T, std::string(names[p]) + " has fewer rows than slot_mapping");
    ScatterPlane& sp = s.plane[p];
    sp.src = a.ptr(p);
    sp.src_row_bytes = row * static_cast<int64_t>(DTypeSize(dt));
    sp.cache = cp[p].base;
    sp.num_blocks = cp[p].num_blocks;
    sp.block_size = cp[p].block_size;
    sp.heads = cp[p].heads;
    sp.head_size = cp[p].head_size;
    sp.bnsd = cp[p].bnsd;
    sp.nz_c0 = cp[p].nz_c0;
    sp.q = ParsePlaneQuant(a, code, dynamic, 5 + p, 7 + p, 9 + p, cp[p], names[p]);
  }
  if (rope::Strict(a)) {
    rope::StrictSlots(s.slots, s.slot_dtype, T, std::min(cp[0].num_slots(), cp[1].num_slots()));
    s.slots_distinct = true;
  }
  return s;
}

}  // namespace quant
}  // namespace mskv

namespace {
// The static scale / offset inputs of the quantizing writes' AOT entries (the OpSpec order, shared by the cpu
// and sim backends), plane by plane in the order ParsePlaneQuant checks them, with the public names.
struct TrapCauseOp {
  const char* op_type;
  int nparam;
  const char* plane[2];
  int scale[2];
  int offset[2];
};
constexpr TrapCauseOp kTrapCauseOps[] = {
    {"MskvReshapeAndCacheQuant", 12, {"k", "v"}, {5, 6}, {7, 8}},
    {"MskvConcatAndCacheMlaQuant", 12, {"kv_c", "k_pe"}, {5, 6}, {7, 8}},
    {"MskvRopeReshapeAndCacheQuant", 16, {"k", "v"}, {8, 9}, {10, 11}},
    {"MskvRopeConcatAndCacheMlaQuant", 18, {"kv_c", "k_pe"}, {9, 10}, {11, 12}},
};
}  // namespace

// The cause of an AscendC::Trap() of a quantizing write's kernel (the sim backend's AOT entry calls it after a
// launch failed with rule TRAP: ms_kvcache/_backends/sim.py registers it with _sim.set_error_diagnoser): the
// first static scale / offset value CheckScaleValues refuses (the kernels' TrapOnBadStatic, op_kernel/
// kv_quant_kernel.h, applies the same rule), in the cpu kernel's order and with its argument names, written to
// buf (NUL-terminated, at most buflen - 1 bytes); returns its length, 0 when nothing is wrong with these values
// (dynamic mode, an op not listed, or a trap for another reason). Reads the inputs only; never throws.
MSKV_AOT_EXPORT int MskvQuantTrapCause(const char* op_type, int nparam, void** params, int* ndims, int64_t** shapes,
                                       const char** dtypes, void* extra, char* buf, int buflen) {
  using namespace mskv;
  using namespace mskv::quant;
  if (op_type == nullptr || buf == nullptr || buflen <= 0) return 0;
  buf[0] = '\0';
  try {
    for (const TrapCauseOp& op : kTrapCauseOps) {
      if (std::string(op_type) != op.op_type || nparam != op.nparam) continue;
      const AotArgs a{nparam, params, ndims, shapes, dtypes, static_cast<mindspore::AotExtra*>(extra)};
      if (ReadDynamic(a)) return 0;
      for (int p = 0; p < 2; ++p) {
        const std::string name(op.plane[p]);
        for (int o = 0; o < 2; ++o) {
          const int idx = o == 0 ? op.scale[p] : op.offset[p];
          if (a.numel(idx) == 0 || a.dtype(idx) != DType::kF32) continue;
          const std::string problem =
              ScaleValuesProblem(name + (o == 0 ? "_scale" : "_offset"), a.ptr<float>(idx), a.numel(idx), o == 0);
          if (problem.empty()) continue;
          const int n = static_cast<int>(std::min<size_t>(problem.size(), static_cast<size_t>(buflen - 1)));
          std::memcpy(buf, problem.data(), static_cast<size_t>(n));
          buf[n] = '\0';
          return n;
        }
      }
      return 0;
    }
  } catch (...) {  // an attribute or dtype it cannot read: no cause to add
  }
  return 0;
}
