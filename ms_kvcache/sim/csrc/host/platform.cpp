// Platform table of the emulated SoCs and the CANN platform API on top of it
// (fe::PlatFormInfos, platform_ascendc::PlatformAscendC).
//
// Sources (numbers are CANN's platform_config/<SoC>.ini values; no hardware was measured):
//  [A2] Ascend910B1 / Ascend910B3: cube/vector core counts, L2, L1, L0A/B/C and UB sizes as listed per
//       SoC in MindSpore AKG's NPU hardware table (mindspore/akg, AnalysisForNpu.h kHardwareConfigs:
//       910B1 24 AIC/48 AIV, 910B3 20 AIC/40 AIV, UB 196608, L1 524288, L0A/L0B 65536, L0C 131072,
//       L2 201326592), consistent with the Ascend910B1.ini excerpt quoted in public tooling tests
//       ([version] Short_SoC_version=Ascend910B, NpuArch=2201; [SoCInfo] cube_core_cnt=24,
//       vector_core_cnt=48, memory_size=68719476736, l2_size=201326592,
//       core_type_list=CubeCore,VectorCore; [AICoreSpec] ub_size=196608, l1_size=524288).
//  [A3] Ascend910_93xx: [version] Short_SoC_version=Ascend910_93, NpuArch 2201 (same DAV_2201 core as
//       A2); [SoCInfo] ai_core_cnt=24, cube_core_cnt=24, vector_core_cnt=48; [AICoreSpec]
//       ub_size=196608 (Ascend910_9392.ini excerpt in public material; CANN docs on
//       aicore_num/limit_core_num quote the same 24/24/48 SoCInfo block). 9391 is taken equal to 9392.
//  [310P] Ascend310P3: 8 AI cores (coupled Cube+Vector), UB 262144, no DataCopyPad, no bf16
//       (gathered from the CANN platform ini and AscendC API docs; see docs/emulation.md).
//  [API] Behaviour of PlatformAscendC (core counts on split/coupled SoCs, the 256-byte KFC reserve of
//       GetCoreMemSize(UB/L1) on ASCEND910B-class SoCs, Short_SoC_version -> SocVersion mapping,
//       GetLibApiWorkSpaceSize 16 MiB on NpuArch 2201 else 2 MiB, CalcTschNumBlocks): CANN's
//       platform_ascendc implementation and the AscendC API reference (GetCoreNum, GetCoreNumAiv,
//       CalcTschBlockDim pages).
#include <cctype>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>

#include "sim_host_internal.h"
#include "tiling/platform/platform_ascendc.h"

namespace simhost {
namespace {
constexpr uint64_t KiB = 1024;
constexpr uint64_t MiB = 1024 * KiB;
constexpr uint64_t GiB = 1024 * MiB;

const std::vector<Platform>& Table() {
  static const std::vector<Platform> table = [] {
    std::vector<Platform> t;
    Platform b1;
    b1.soc = "Ascend910B1";
    b1.short_soc = "ascend910b";
    b1.short_soc_version = "Ascend910B";
    b1.npu_arch = 2201;
    b1.aiv_cores = 48;
    b1.aic_cores = 24;
    b1.ai_core_cnt = 24;
    b1.vector_core_cnt = 48;
    b1.ub_size = 192 * KiB;
    b1.l1_size = 512 * KiB;
    b1.l0a_size = 64 * KiB;
    b1.l0b_size = 64 * KiB;
    b1.l0c_size = 128 * KiB;
    b1.l2_size = 192 * MiB;
    b1.hbm_size = 64 * GiB;
    b1.has_datacopy_pad = true;
    b1.has_bf16 = true;
    b1.split_core = true;
    b1.ub_kfc_reserved = 256;
    b1.sys_workspace_size = 16 * MiB;
    b1.source = "CANN platform_config/Ascend910B1.ini (via MindSpore AKG hardware table; see docs/emulation.md)";
    t.push_back(b1);

    Platform b3 = b1;
    b3.soc = "Ascend910B3";
    b3.aiv_cores = 40;
    b3.aic_cores = 20;
    b3.ai_core_cnt = 20;
    b3.vector_core_cnt = 40;
    b3.source = "CANN platform_config/Ascend910B3.ini (via MindSpore AKG hardware table; see docs/emulation.md)";
    t.push_back(b3);

    Platform a3 = b1;
    a3.soc = "Ascend910_9391";
    a3.short_soc = "ascend910_93";
    a3.short_soc_version = "Ascend910_93";
    a3.l2_size = 0;
    a3.hbm_size = 0;
    a3.source = "CANN platform_config/Ascend910_93xx.ini SoCInfo/AICoreSpec excerpts (see docs/emulation.md)";
    a3.unverified = "l1_size, l0a_size, l0b_size, l0c_size taken equal to A2 (same DAV_2201 core); l2_size and "
                    "hbm_size unknown (0)";
    t.push_back(a3);

    Platform p3;
    p3.soc = "Ascend310P3";
    p3.short_soc = "ascend310p";
    p3.short_soc_version = "Ascend310P";
    p3.npu_arch = 2002;
    p3.aiv_cores = 8;
    p3.aic_cores = 8;
    p3.ai_core_cnt = 8;
    p3.vector_core_cnt = 7;
    p3.ub_size = 256 * KiB;
    p3.l1_size = 1024 * KiB;
    p3.l0a_size = 64 * KiB;
    p3.l0b_size = 64 * KiB;
    p3.l0c_size = 256 * KiB;
    p3.l2_size = 0;
    p3.hbm_size = 0;
    p3.has_datacopy_pad = false;
    p3.has_bf16 = false;
    p3.split_core = false;
    p3.ub_kfc_reserved = 0;
    p3.sys_workspace_size = 2 * MiB;
    p3.source = "CANN platform_config/Ascend310P3.ini and the AscendC API docs (see docs/emulation.md)";
    p3.unverified = "vector_core_cnt (7), l1_size, l0a_size, l0b_size, l0c_size are not backed by a cited "
                    "source; l2_size and hbm_size unknown (0)";
    t.push_back(p3);
    return t;
  }();
  return table;
}

std::string Lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::map<std::string, std::map<std::string, std::string>> IniOf(const Platform& p) {
  std::map<std::string, std::map<std::string, std::string>> ini;
  ini["version"]["SoC_version"] = p.soc;
  ini["version"]["Short_SoC_version"] = p.short_soc_version;
  ini["version"]["NpuArch"] = std::to_string(p.npu_arch);
  ini["SoCInfo"]["ai_core_cnt"] = std::to_string(p.ai_core_cnt);
  if (p.split_core) ini["SoCInfo"]["cube_core_cnt"] = std::to_string(p.aic_cores);
  ini["SoCInfo"]["vector_core_cnt"] = std::to_string(p.vector_core_cnt);
  ini["SoCInfo"]["core_type_list"] = p.split_core ? "CubeCore,VectorCore" : "AiCore,VectorCore";
  ini["SoCInfo"]["cube_vector_combine"] = p.split_core ? "split" : "fuse";
  ini["SoCInfo"]["l2_size"] = std::to_string(p.l2_size);
  ini["SoCInfo"]["memory_size"] = std::to_string(p.hbm_size);
  ini["AICoreSpec"]["ub_size"] = std::to_string(p.ub_size);
  ini["AICoreSpec"]["l1_size"] = std::to_string(p.l1_size);
  ini["AICoreSpec"]["l0_a_size"] = std::to_string(p.l0a_size);
  ini["AICoreSpec"]["l0_b_size"] = std::to_string(p.l0b_size);
  ini["AICoreSpec"]["l0_c_size"] = std::to_string(p.l0c_size);
  ini["AICoreSpec"]["ubblock_size"] = "32";
  return ini;
}
}  // namespace

const Platform& GetPlatform(const std::string& soc) {
  const std::string want = Lower(soc);
  for (const auto& p : Table())
    if (Lower(p.soc) == want) return p;
  std::string known;
  for (const auto& p : Table()) known += (known.empty() ? "" : ", ") + p.soc;
  detail::Fail("PLATFORM_UNKNOWN_SOC", "", "unknown SoC '" + soc + "' (emulated: " + known + ")");
}

std::vector<std::string> ListPlatforms() {
  std::vector<std::string> v;
  for (const auto& p : Table()) v.push_back(p.soc);
  return v;
}

namespace detail {
fe::PlatFormInfos* PlatformInfosFor(const std::string& soc) {
  static std::mutex mu;
  static std::map<std::string, std::unique_ptr<fe::PlatFormInfos>> cache;
  const Platform& p = GetPlatform(soc);
  std::lock_guard<std::mutex> lock(mu);
  auto& slot = cache[p.soc];
  if (!slot) slot.reset(new fe::PlatFormInfos(&p));
  return slot.get();
}
}  // namespace detail
}  // namespace simhost

// ------------------------------------------------------------------------------------ fe
namespace fe {
PlatFormInfos::PlatFormInfos(const simhost::Platform* platform) : platform_(platform) {}

bool PlatFormInfos::GetPlatformRes(const std::string& label, const std::string& key, std::string& val) {
  return GetPlatformResWithLock(label, key, val);
}
bool PlatFormInfos::GetPlatformResWithLock(const std::string& label, const std::string& key, std::string& val) {
  if (platform_ == nullptr) return false;
  const auto ini = simhost::IniOf(*platform_);
  auto s = ini.find(label);
  if (s == ini.end()) return false;
  auto k = s->second.find(key);
  if (k == s->second.end()) return false;
  val = k->second;
  return true;
}
bool PlatFormInfos::GetPlatformResWithLock(const std::string& label, std::map<std::string, std::string>& res) {
  if (platform_ == nullptr) return false;
  const auto ini = simhost::IniOf(*platform_);
  auto s = ini.find(label);
  if (s == ini.end()) return false;
  res = s->second;
  return true;
}
uint32_t PlatFormInfos::GetCoreNum() const {
  if (platform_ == nullptr) return 0;
  return platform_->split_core ? platform_->aiv_cores : platform_->ai_core_cnt;
}
void PlatFormInfos::GetLocalMemSize(const LocalMemType& mem_type, uint64_t& size) {
  size = 0;
  if (platform_ == nullptr) return;
  switch (mem_type) {
    case LocalMemType::L0_A: size = platform_->l0a_size; break;
    case LocalMemType::L0_B: size = platform_->l0b_size; break;
    case LocalMemType::L0_C: size = platform_->l0c_size; break;
    case LocalMemType::L1: size = platform_->l1_size; break;
    case LocalMemType::L2: size = platform_->l2_size; break;
    case LocalMemType::UB: size = platform_->ub_size; break;
    case LocalMemType::HBM: size = platform_->hbm_size; break;
    default: size = 0;
  }
}
void PlatFormInfos::GetLocalMemBw(const LocalMemType&, uint64_t& bw_size) { bw_size = 0; }
}  // namespace fe

// ------------------------------------------------------------------------------------ platform_ascendc
namespace platform_ascendc {
namespace {
const simhost::Platform* P(fe::PlatFormInfos* infos) {
  if (infos == nullptr || infos->SimPlatform() == nullptr)
    simhost::detail::Fail("PLATFORM_NULL", "", "PlatformAscendC constructed from a null PlatFormInfos");
  return infos->SimPlatform();
}
}  // namespace

fe::PlatFormInfos* PlatformAscendC::GetPlatFormInfo(void) const {
  (void)P(platformInfo_);
  return platformInfo_;
}
uint32_t PlatformAscendC::GetCoreNum(void) const { return GetPlatFormInfo()->GetCoreNum(); }
uint32_t PlatformAscendC::GetCoreNumAic(void) const {
  const auto* p = P(platformInfo_);
  return p->split_core ? p->aic_cores : p->ai_core_cnt;
}
uint32_t PlatformAscendC::GetCoreNumAiv(void) const {
  const auto* p = P(platformInfo_);
  return p->split_core ? p->aiv_cores : p->ai_core_cnt;
}
uint32_t PlatformAscendC::GetCoreNumVector(void) const {
  const auto* p = P(platformInfo_);
  return GetSocVersion() == SocVersion::ASCEND310P ? p->vector_core_cnt : 0;
}
uint32_t PlatformAscendC::CalcTschNumBlocks(uint32_t sliceNum, uint32_t aicCoreNum, uint32_t aivCoreNum) const {
  // Mixed (AIC+AIV) kernels start in groups of aiv/aic vector cores per cube core.
  if (aicCoreNum == 0 || aivCoreNum == 0 || aicCoreNum > aivCoreNum) return sliceNum;
  const uint32_t ratio = aivCoreNum / aicCoreNum;
  const uint32_t blocks = (sliceNum + ratio - 1) / ratio;
  if (ratio == 2 && blocks > aicCoreNum) return 0;  // more groups than physical cube cores
  return blocks;
}
uint32_t PlatformAscendC::CalcTschBlockDim(uint32_t sliceNum, uint32_t aicCoreNum, uint32_t aivCoreNum) const {
  return CalcTschNumBlocks(sliceNum, aicCoreNum, aivCoreNum);
}
uint32_t PlatformAscendC::GetLibApiWorkSpaceSize(void) const {
  return GetCurNpuArch() == NpuArch::DAV_2201 ? 16U * 1024U * 1024U : 2U * 1024U * 1024U;
}
uint32_t PlatformAscendC::GetResCubeGroupWorkSpaceSize(void) const {
  return GetSocVersion() == SocVersion::ASCEND910B ? 1U * 1024U * 1024U : static_cast<uint32_t>(-1);
}
uint32_t PlatformAscendC::GetResGroupBarrierWorkSpaceSize(void) const {
  return GetSocVersion() == SocVersion::ASCEND910B ? 1U * 1024U * 1024U : static_cast<uint32_t>(-1);
}
void PlatformAscendC::GetCoreMemSize(const CoreMemType& memType, uint64_t& size) const {
  const auto* p = P(platformInfo_);
  GetPlatFormInfo()->GetLocalMemSize(static_cast<fe::LocalMemType>(memType), size);
  if ((memType == CoreMemType::UB || memType == CoreMemType::L1) && GetSocVersion() == SocVersion::ASCEND910B)
    size -= p->ub_kfc_reserved;
  if (memType == CoreMemType::UB) size -= reservedMemSize_;
  if (memType == CoreMemType::FB || memType == CoreMemType::BT) size = 0;
}
void PlatformAscendC::GetCoreMemBw(const CoreMemType& memType, uint64_t& bwSize) const {
  GetPlatFormInfo()->GetLocalMemBw(static_cast<fe::LocalMemType>(memType), bwSize);
}
void PlatformAscendC::ReserveLocalMemory(ReservedSize size) {
  switch (size) {
    case ReservedSize::RESERVED_SIZE_8K: reservedMemSize_ = 8 * 1024; break;
    case ReservedSize::RESERVED_SIZE_16K: reservedMemSize_ = 16 * 1024; break;
    case ReservedSize::RESERVED_SIZE_32K: reservedMemSize_ = 32 * 1024; break;
  }
}
SocVersion PlatformAscendC::GetSocVersion(void) const {
  const std::string& s = P(platformInfo_)->short_soc_version;
  if (s == "Ascend910B" || s == "Ascend910_93") return SocVersion::ASCEND910B;  // CANN maps A3 to ASCEND910B
  if (s == "Ascend310P") return SocVersion::ASCEND310P;
  if (s == "Ascend910") return SocVersion::ASCEND910;
  if (s == "Ascend310B") return SocVersion::ASCEND310B;
  return SocVersion::RESERVED_VERSION;
}
NpuArch PlatformAscendC::GetCurNpuArch(void) const { return static_cast<NpuArch>(P(platformInfo_)->npu_arch); }
uint32_t PlatformAscendC::GetVecRegLen(void) const { return 0; }

PlatformAscendC* PlatformAscendCManager::GetInstance() {
  const char* env = std::getenv("ASCENDC_SIM_SOC_VERSION");
  return GetInstance(env != nullptr && env[0] != '\0' ? env : "Ascend910B1");
}
PlatformAscendC* PlatformAscendCManager::GetInstance(const char* customSocVersion) {
  static std::mutex mu;
  static PlatformAscendC* instance = nullptr;
  std::lock_guard<std::mutex> lock(mu);
  if (instance == nullptr) {
    fe::PlatFormInfos* infos =
        simhost::detail::PlatformInfosFor(customSocVersion != nullptr ? customSocVersion : "Ascend910B1");
    instance = new PlatformAscendC(infos);  // process-lifetime singleton, as in CANN
  }
  return instance;
}
}  // namespace platform_ascendc
