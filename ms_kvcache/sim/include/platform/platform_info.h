// AscendC CPU emulation: fe::PlatFormInfos, the platform handle a tiling context hands out
// (GetPlatformInfo()) and platform_ascendc::PlatformAscendC reads. Values come from the emulation's
// platform table (ms_kvcache/sim/csrc/host/platform.cpp), exposed with the section/key names of CANN's
// platform_config/<SoC>.ini files ("version"/"Short_SoC_version", "SoCInfo"/"vector_core_cnt",
// "AICoreSpec"/"ub_size", ...).
#ifndef ASCENDC_SIM_PLATFORM_PLATFORM_INFO_H_
#define ASCENDC_SIM_PLATFORM_PLATFORM_INFO_H_

#include <cstdint>
#include <map>
#include <string>

namespace simhost { struct Platform; }

namespace fe {
enum class LocalMemType { L0_A = 0, L0_B = 1, L0_C = 2, L1 = 3, L2 = 4, UB = 5, HBM = 6, RESERVED };

class PlatFormInfos {
 public:
  explicit PlatFormInfos(const simhost::Platform* platform);
  bool GetPlatformRes(const std::string& label, const std::string& key, std::string& val);
  bool GetPlatformResWithLock(const std::string& label, const std::string& key, std::string& val);
  bool GetPlatformResWithLock(const std::string& label, std::map<std::string, std::string>& res);
  uint32_t GetCoreNum() const;
  void GetLocalMemSize(const LocalMemType& mem_type, uint64_t& size);
  void GetLocalMemBw(const LocalMemType& mem_type, uint64_t& bw_size);
  const simhost::Platform* SimPlatform() const { return platform_; }

 private:
  const simhost::Platform* platform_;
};
}  // namespace fe

#endif
