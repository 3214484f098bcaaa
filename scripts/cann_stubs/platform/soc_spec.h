// ms_kvcache conformance-check stub for "platform/soc_spec.h".
//
// Stands in for platform/soc_spec.h of CANN's binary platform package (installed under
// $ASCEND_HOME_PATH/include/platform/). asc-devkit's tiling/platform/platform_ascendc.h includes it
// and forward-declares `enum class NpuArch : uint32_t`, which this header defines. Only the
// enumerators the public sources name (NpuArch::DAV_<arch>) are declared, valued as the arch number;
// nothing else of the real header is provided. Written for scripts/check_cann_headers.py (compile
// checks only, never linked or run); not the real header.
#ifndef MSKV_CANN_STUB_PLATFORM_SOC_SPEC_H_
#define MSKV_CANN_STUB_PLATFORM_SOC_SPEC_H_
#include <cstdint>

enum class NpuArch : uint32_t {
  DAV_1001 = 1001,
  DAV_2002 = 2002,
  DAV_2201 = 2201,
  DAV_3002 = 3002,
  DAV_3003 = 3003,
  DAV_3102 = 3102,
  DAV_3113 = 3113,
  DAV_3505 = 3505,
  DAV_3510 = 3510,
  DAV_5102 = 5102,
  DAV_RESV = 0xFFFFFFFFu
};

#endif  // MSKV_CANN_STUB_PLATFORM_SOC_SPEC_H_
