// Instruction-set dispatch of the rope kernels (see rope_common.h, rope_body.inl).
#include "rope_common.h"

#include <cstdlib>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define MSKV_ROPE_HAVE_X86 1
#else
#define MSKV_ROPE_HAVE_X86 0
#endif

namespace mskv {
namespace rope {

namespace isa_generic {
#define MSKV_ROPE_AVX2 0
#define MSKV_ROPE_AVX512 0
#define MSKV_ROPE_AVX512BF16 0
#include "rope_body.inl"
#undef MSKV_ROPE_AVX512BF16
#undef MSKV_ROPE_AVX512
#undef MSKV_ROPE_AVX2
}  // namespace isa_generic

#if MSKV_ROPE_HAVE_X86
#pragma GCC push_options
#pragma GCC target("avx2,f16c")
namespace isa_avx2 {
#define MSKV_ROPE_AVX2 1
#define MSKV_ROPE_AVX512 0
#define MSKV_ROPE_AVX512BF16 0
#include "rope_body.inl"
#undef MSKV_ROPE_AVX512BF16
#undef MSKV_ROPE_AVX512
#undef MSKV_ROPE_AVX2
}  // namespace isa_avx2
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx2,f16c")
namespace isa_avx512 {
#define MSKV_ROPE_AVX2 1
#define MSKV_ROPE_AVX512 1
#define MSKV_ROPE_AVX512BF16 0
#include "rope_body.inl"
#undef MSKV_ROPE_AVX512BF16
#undef MSKV_ROPE_AVX512
#undef MSKV_ROPE_AVX2
}  // namespace isa_avx512
#pragma GCC pop_options

// AVX-512 + AVX512_BF16 (Cooper Lake, Sapphire Rapids, Zen 4): fp32 -> bf16 with VCVTNEPS2BF16,
// whose RNE and NaN results are those of F32ToBf16; it flushes subnormal inputs to zero, so 16-lane
// groups holding a subnormal take the integer path (same bits as every other path).
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,avx2,f16c")
namespace isa_avx512bf16 {
#define MSKV_ROPE_AVX2 1
#define MSKV_ROPE_AVX512 1
#define MSKV_ROPE_AVX512BF16 1
#include "rope_body.inl"
#undef MSKV_ROPE_AVX512BF16
#undef MSKV_ROPE_AVX512
#undef MSKV_ROPE_AVX2
}  // namespace isa_avx512bf16
#pragma GCC pop_options
#endif

namespace {

// Best path this CPU runs: 0 generic, 1 AVX2 + F16C, 2 AVX-512 (F, BW, VL) + AVX2 + F16C,
// 3 = 2 + AVX512_BF16 + AVX512DQ.
int CpuBestIsa() {
#if MSKV_ROPE_HAVE_X86
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("f16c")) return 0;
  if (!__builtin_cpu_supports("avx512f") || !__builtin_cpu_supports("avx512bw") || !__builtin_cpu_supports("avx512vl"))
    return 1;
  if (__builtin_cpu_supports("avx512bf16") && __builtin_cpu_supports("avx512dq")) return 3;
  return 2;
  return 1;
#else
  return 0;
#endif
}

int DefaultIsa() {
  const int best = CpuBestIsa();
  const char* env = std::getenv("MS_KVCACHE_ROPE_ISA");
  if (env != nullptr && std::strcmp(env, "generic") == 0) return 0;
  if (env != nullptr && std::strcmp(env, "avx2") == 0) return best >= 1 ? 1 : best;
  if (env != nullptr && std::strcmp(env, "avx512") == 0) return best >= 2 ? 2 : best;
  return best;
}

int g_isa = -1;  // -1: not chosen yet

}  // namespace

int ActiveIsa() {
  if (g_isa < 0) g_isa = DefaultIsa();
  return g_isa;
}

void RopeAndCache(const RopeCacheArgs& a) {
#if MSKV_ROPE_HAVE_X86
  if (ActiveIsa() == 3) return isa_avx512bf16::RopeAndCacheImpl(a);
  if (ActiveIsa() == 2) return isa_avx512::RopeAndCacheImpl(a);
  if (ActiveIsa() == 1) return isa_avx2::RopeAndCacheImpl(a);
#endif
  isa_generic::RopeAndCacheImpl(a);
}

}  // namespace rope

namespace quant {

void QuantScatter(const ScatterArgs& a) {
#if MSKV_ROPE_HAVE_X86
  if (rope::ActiveIsa() == 3) return rope::isa_avx512bf16::QuantScatterImpl(a);
  if (rope::ActiveIsa() == 2) return rope::isa_avx512::QuantScatterImpl(a);
  if (rope::ActiveIsa() == 1) return rope::isa_avx2::QuantScatterImpl(a);
#endif
  rope::isa_generic::QuantScatterImpl(a);
}

}  // namespace quant

namespace rope {

void Rerope(const ReropeArgs& a) {
#if MSKV_ROPE_HAVE_X86
  if (ActiveIsa() == 3) return isa_avx512bf16::ReropeImpl(a);
  if (ActiveIsa() == 2) return isa_avx512::ReropeImpl(a);
  if (ActiveIsa() == 1) return isa_avx2::ReropeImpl(a);
#endif
  isa_generic::ReropeImpl(a);
}

}  // namespace rope
}  // namespace mskv

// ------------------------------------------------------------------ test hooks (ctypes)

// Select the rope kernels' instruction-set path: 0 = portable, 1 = AVX2 + F16C, 2 = AVX-512,
// 3 = AVX-512 + AVX512_BF16 (a path
// the CPU lacks is ignored: the active path stays unchanged), -1 = query only. Returns the active path.
MSKV_AOT_EXPORT int MskvRopeSetIsa(int isa) {
  if (isa >= 0 && isa <= mskv::rope::CpuBestIsa()) mskv::rope::g_isa = isa;
  return mskv::rope::ActiveIsa();
}

// Convert n values with the active path's row conversions: kind 0 f16->f32, 1 bf16->f32,
// 2 f32->f16, 3 f32->bf16.
MSKV_AOT_EXPORT int MskvRopeConvert(int kind, const void* src, void* dst, int64_t n) {
#if MSKV_ROPE_HAVE_X86
  if (mskv::rope::ActiveIsa() == 3) {
    mskv::rope::isa_avx512bf16::ConvertImpl(kind, src, dst, n);
    return 0;
  }
  if (mskv::rope::ActiveIsa() == 2) {
    mskv::rope::isa_avx512::ConvertImpl(kind, src, dst, n);
    return 0;
  }
  if (mskv::rope::ActiveIsa() == 1) {
    mskv::rope::isa_avx2::ConvertImpl(kind, src, dst, n);
    return 0;
  }
#endif
  mskv::rope::isa_generic::ConvertImpl(kind, src, dst, n);
  return 0;
}
