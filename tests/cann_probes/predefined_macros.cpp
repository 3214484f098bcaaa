// probe: the target's predefined macros, as bisheng defines them for device code: __NPU_ARCH__ with the
// matching __CCE_AICORE__ and __DAV_* macros (A2/A3 vector core: 2201, 220, __DAV_C220__ +
// __DAV_C220_VEC__; 310P: 2002, 200, __DAV_M200__)
// official: accepted (the CPU-debug configuration defines them: asc-devkit header checker, asc-tools cpudebug)
// expect: accept
// run: ok
#include "kernel_operator.h"

#if !defined(__NPU_ARCH__) || !defined(__CCE_AICORE__)
#error "__NPU_ARCH__ and __CCE_AICORE__ must be defined for a device build"
#endif
#if __NPU_ARCH__ == 2201
#if __CCE_AICORE__ != 220 || !defined(__DAV_C220__) || !defined(__DAV_C220_VEC__) || defined(__DAV_M200__)
#error "dav-c220-vec: __CCE_AICORE__ 220, __DAV_C220__ and __DAV_C220_VEC__"
#endif
#elif __NPU_ARCH__ == 2002
#if __CCE_AICORE__ != 200 || !defined(__DAV_M200__) || defined(__DAV_C220__)
#error "dav-m200: __CCE_AICORE__ 200 and __DAV_M200__"
#endif
#else
#error "ms_kvcache targets __NPU_ARCH__ 2201 (A2/A3) and 2002 (310P)"
#endif

extern "C" __global__ __aicore__ void probe_predefined_macros(GM_ADDR x, GM_ADDR workspace, GM_ADDR tiling) {
  (void)x;
  (void)workspace;
  (void)tiling;
}
