// AscendC CPU emulation (ms_kvcache.sim): platform_ascendc::PlatformAscendC as CANN declares it
// (tiling/platform/platform_ascendc.h), answering from the emulation's platform table
// (ms_kvcache/sim/csrc/host/platform.cpp; sources cited there and in docs/emulation.md).
// Behaviour follows CANN's implementation:
//  - GetCoreNumAiv/GetCoreNumAic: vector / cube core count on split (A2/A3) SoCs, the AI core count
//    on coupled SoCs (310P); GetCoreNum(): vector cores on split SoCs, AI cores on coupled ones.
//  - GetCoreMemSize(UB|L1) on ASCEND910B-class SoCs (A2 and A3) is the physical size minus 256 bytes
//    reserved for KFC; UB additionally minus ReserveLocalMemory().
//  - GetSocVersion(): Ascend910B*/Ascend910_93xx -> ASCEND910B, Ascend310P* -> ASCEND310P.
//  - GetLibApiWorkSpaceSize(): 16 MiB on NpuArch 2201 (A2/A3), 2 MiB otherwise.
#ifndef ASCENDC_SIM_TILING_PLATFORM_PLATFORM_ASCENDC_H_
#define ASCENDC_SIM_TILING_PLATFORM_PLATFORM_ASCENDC_H_

#include <cstdint>

namespace fe { class PlatFormInfos; }

enum class NpuArch : uint32_t {
  DAV_1001 = 1001,
  DAV_2002 = 2002,
  DAV_2201 = 2201,
  DAV_3002 = 3002,
  DAV_3510 = 3510,
  DAV_RESV = 0xFFFFFFFFU
};

namespace platform_ascendc {
enum class CoreMemType { L0_A = 0, L0_B = 1, L0_C = 2, L1 = 3, L2 = 4, UB = 5, HBM = 6, FB = 7, BT = 8, RESERVED };

enum class SocVersion {
  ASCEND910 = 0,
  ASCEND910B,
  ASCEND310P,
  ASCEND310B,
  ASCEND950,
  ASCEND910_55,
  AS31XM1,
  ASCEND031,
  ASCEND035,
  ASCEND310,
  ASCEND610,
  ASCEND610Lite,
  ASCEND910_93,
  BS9SX1A,
  BS9SX2A,
  HI3796CV300CS,
  HI3796CV300ES,
  MC61AM21A,
  MC62CM12A,
  SD3403,
  KIRINX90,
  KIRIN9030,
  RESERVED_VERSION = 99999
};

enum class ReservedSize { RESERVED_SIZE_8K, RESERVED_SIZE_16K, RESERVED_SIZE_32K };

class PlatformAscendC {
 public:
  PlatformAscendC() = delete;
  ~PlatformAscendC() = default;
  explicit PlatformAscendC(fe::PlatFormInfos* platformInfo) : platformInfo_(platformInfo) {}
  uint32_t GetCoreNum(void) const;
  uint32_t GetCoreNumAic(void) const;
  uint32_t GetCoreNumAiv(void) const;
  uint32_t GetCoreNumVector(void) const;
  uint32_t CalcTschBlockDim(uint32_t sliceNum, uint32_t aicCoreNum, uint32_t aivCoreNum) const;
  uint32_t CalcTschNumBlocks(uint32_t sliceNum, uint32_t aicCoreNum, uint32_t aivCoreNum) const;
  uint32_t GetLibApiWorkSpaceSize(void) const;
  uint32_t GetResCubeGroupWorkSpaceSize(void) const;
  uint32_t GetResGroupBarrierWorkSpaceSize(void) const;
  void GetCoreMemSize(const CoreMemType& memType, uint64_t& size) const;
  void GetCoreMemBw(const CoreMemType& memType, uint64_t& bwSize) const;
  void ReserveLocalMemory(ReservedSize size);
  SocVersion GetSocVersion(void) const;
  NpuArch GetCurNpuArch(void) const;
  uint32_t GetVecRegLen(void) const;

 private:
  fe::PlatFormInfos* GetPlatFormInfo(void) const;
  fe::PlatFormInfos* platformInfo_;
  uint32_t reservedMemSize_ = 0;
};

class PlatformAscendCManager {
 public:
  // CANN: a singleton; only the first call's SoC takes effect. Without an argument the emulation uses
  // $ASCENDC_SIM_SOC_VERSION, else Ascend910B1.
  static PlatformAscendC* GetInstance();
  static PlatformAscendC* GetInstance(const char* customSocVersion);
};
}  // namespace platform_ascendc

#endif  // ASCENDC_SIM_TILING_PLATFORM_PLATFORM_ASCENDC_H_
