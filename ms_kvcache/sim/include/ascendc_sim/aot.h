// AscendC CPU emulation: MindSpore CPU AOT entry points of emulated ops.
//
// ASCENDC_SIM_AOT_ENTRY(OpType) defines
//   extern "C" int OpType(int nparam, void** params, int* ndims, int64_t** shapes,
//                         const char** dtypes, void* stream, void* extra)
// (MindSpore's ops.Custom(func_type="aot") CPU signature). It runs the op's registered tiling for the
// given shapes / attributes (read from MindSpore's AotExtra by the OpDef attribute names and types)
// on the SoC chosen with ms_kvcache.sim.set_soc / MS_KVCACHE_SIM_SOC, then its kernel on every core,
// in place over MindSpore's buffers. It returns 0; when the emulation rejects the launch it records the
// error message (ascendc_sim_last_error()), prints it on stderr and throws it as std::runtime_error
// (MindSpore's CPU AOT kernel puts it into the Python exception text), or returns non-zero to a caller
// that passes no AotExtra (extra == nullptr).
#ifndef ASCENDC_SIM_AOT_H_
#define ASCENDC_SIM_AOT_H_

#include <cstdint>

extern "C" {
__attribute__((visibility("default"))) int ascendc_sim_aot_launch(const char* op_type, int nparam, void** params,
                                                                   int* ndims, int64_t** shapes, const char** dtypes,
                                                                   void* extra);
__attribute__((visibility("default"))) const char* ascendc_sim_last_error();
}

#define ASCENDC_SIM_AOT_ENTRY(OpType)                                                                              \
  extern "C" __attribute__((visibility("default"))) int OpType(int nparam, void** params, int* ndims,               \
                                                                int64_t** shapes, const char** dtypes, void* stream, \
                                                                void* extra) {                                      \
    (void)stream;                                                                                                  \
    return ascendc_sim_aot_launch(#OpType, nparam, params, ndims, shapes, dtypes, extra);                          \
  }

#endif  // ASCENDC_SIM_AOT_H_
