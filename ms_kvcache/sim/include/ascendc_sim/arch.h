// AscendC CPU emulation: the target architecture of a kernel translation unit.
//
// bisheng compiles a kernel once per target and predefines, for Atlas A2 / A3 vector cores,
// __NPU_ARCH__=2201 __CCE_AICORE__=220 __DAV_C220__ __DAV_C220_VEC__ and, for Ascend310P (Atlas
// inference series AI cores), __NPU_ARCH__=2002 __CCE_AICORE__=200 __DAV_M200__. The emulation does the
// same: ms_kvcache.sim.build() and cmake/sim.cmake compile every kernel file once per arch family with
// these macros on the command line (ms_kvcache.sim.arch_defines(soc) lists them), so `#if
// __CCE_AICORE__ ...` branches of a kernel are the code that launches on that SoC run, and an API the
// official headers do not offer on an arch fails to compile for it.
//
// Everything the emulation declares in namespace AscendC lives in an inline namespace named after the
// arch (ascendc_sim_arch_2201 / ascendc_sim_arch_2002), so the two builds of one kernel can be linked
// into one module without their inline functions and templates colliding.
#ifndef ASCENDC_SIM_ARCH_H_
#define ASCENDC_SIM_ARCH_H_

#if !defined(__NPU_ARCH__)
#error "ms_kvcache sim: __NPU_ARCH__ is not defined. Kernels are compiled per target as bisheng does: Atlas A2/A3 -D__NPU_ARCH__=2201 -D__CCE_AICORE__=220 -D__DAV_C220__ -D__DAV_C220_VEC__, Ascend310P -D__NPU_ARCH__=2002 -D__CCE_AICORE__=200 -D__DAV_M200__ (ms_kvcache.sim.arch_defines(soc); sim.build() and the _sim build pass them)"
#endif

#if __NPU_ARCH__ == 2201
#if !defined(__CCE_AICORE__) || __CCE_AICORE__ != 220 || !defined(__DAV_C220__) || !defined(__DAV_C220_VEC__)
#error "ms_kvcache sim: __NPU_ARCH__=2201 (Atlas A2/A3 vector core) needs __CCE_AICORE__=220, __DAV_C220__ and __DAV_C220_VEC__, as bisheng defines them"
#endif
#if defined(__DAV_M200__)
#error "ms_kvcache sim: __DAV_M200__ is the Ascend310P core; it is not defined for __NPU_ARCH__=2201"
#endif
#define ASCENDC_SIM_ARCH_NS ascendc_sim_arch_2201
#elif __NPU_ARCH__ == 2002
#if !defined(__CCE_AICORE__) || __CCE_AICORE__ != 200 || !defined(__DAV_M200__)
#error "ms_kvcache sim: __NPU_ARCH__=2002 (Ascend310P) needs __CCE_AICORE__=200 and __DAV_M200__, as bisheng defines them"
#endif
#if defined(__DAV_C220__) || defined(__DAV_C220_VEC__)
#error "ms_kvcache sim: __DAV_C220__ / __DAV_C220_VEC__ are the Atlas A2/A3 core; they are not defined for __NPU_ARCH__=2002"
#endif
#define ASCENDC_SIM_ARCH_NS ascendc_sim_arch_2002
#else
#error "ms_kvcache sim: the emulation models __NPU_ARCH__ 2201 (Atlas A2/A3: Ascend910B1/B3, Ascend910_9391) and 2002 (Ascend310P3) only"
#endif

// Opens / closes namespace AscendC with the arch's inline namespace.
#define ASCENDC_SIM_BEGIN_NAMESPACE \
  namespace AscendC {               \
  inline namespace ASCENDC_SIM_ARCH_NS {
#define ASCENDC_SIM_END_NAMESPACE \
  }                               \
  }

// A call the official headers do not offer on this arch: a static_assert naming the API fires when a
// kernel instantiates it (dependent on a template parameter, so merely declaring it costs nothing).
template <typename... T>
struct AscendcSimNever {
  static constexpr bool value = false;
};

#endif  // ASCENDC_SIM_ARCH_H_
