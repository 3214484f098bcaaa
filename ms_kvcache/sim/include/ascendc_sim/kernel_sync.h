// AscendC CPU emulation: cross-core synchronisation (SyncAll) and the data cache
// (DataCacheCleanAndInvalid), with the official declarations per arch (asc-devkit
// include/basic_api/kernel_operator_block_sync_intf.h, kernel_operator_cache_intf.h,
// impl/basic_api/kernel_reg.h). Included by kernel_api.h.
#ifndef ASCENDC_SIM_KERNEL_SYNC_H_
#define ASCENDC_SIM_KERNEL_SYNC_H_

#include "ascendc_sim/kernel_tensor.h"

ASCENDC_SIM_BEGIN_NAMESPACE

// ----------------------------------------------------------------------------- SyncAll
// Hardware form. The runtime suspends the core until every core of the launch arrives (in every core
// order), then checks the finished phase (GM_RACE, DCACHE_CONFLICT, WORKSPACE_UNINIT_READ). Not on the
// Atlas inference series (the official dav_m200 implementation reports "Hardware SyncAll" unsupported).
template <bool isAIVOnly = true>
__aicore__ inline void SyncAll() {
  ascendc_sim::rt::SyncAll(isAIVOnly, false, nullptr, 0, nullptr, 0, 0);
}
// Software form: gmWorkspace >= GetBlockNum() * 32 bytes, zero-initialised; ubWorkspace >= GetBlockNum() * 32 bytes.
template <bool isAIVOnly = true>
__aicore__ inline void SyncAll(const GlobalTensor<int32_t>& gmWorkspace, const LocalTensor<int32_t>& ubWorkspace,
                               const int32_t usedCores = 0) {
  const ascendc_sim::UbRef ub = ascendc_sim_detail::Ub(ubWorkspace);
  ascendc_sim::rt::SyncAll(isAIVOnly, true, gmWorkspace.GetPhyAddr(), gmWorkspace.GetSize() * sizeof(int32_t), &ub,
                           ubWorkspace.GetSize() * static_cast<uint32_t>(sizeof(int32_t)), usedCores);
}

// ----------------------------------------------------------------------------- data cache
enum class CacheLine : uint64_t { SINGLE_CACHE_LINE = 0, ENTIRE_DATA_CACHE };
enum class DcciDst : uint64_t { CACHELINE_ALL = 0, CACHELINE_UB, CACHELINE_OUT, CACHELINE_ATOMIC };

// Writes this core's data-cache lines dirtied by GlobalTensor::SetValue out to GM (the line of dst's
// address, or all lines with ENTIRE_DATA_CACHE) and invalidates them.
template <typename T, CacheLine entireType>
__aicore__ inline void DataCacheCleanAndInvalid(const GlobalTensor<T>& dst) {
  ascendc_sim::rt::DcacheCleanInvalid(dst.GetPhyAddr(), entireType == CacheLine::ENTIRE_DATA_CACHE ? 1 : 0, -1,
                                      "DataCacheCleanAndInvalid");
}
#if __NPU_ARCH__ == 2002
// Atlas inference series AI core: only the form without dcciDst exists (the official implementation
// defines the dcciDst forms for __NPU_ARCH__ 2201 / 3002 / 3510 / 5102 / 3003 / 3113 only).
template <typename T, CacheLine entireType, DcciDst dcciDst>
__aicore__ inline void DataCacheCleanAndInvalid(const GlobalTensor<T>&) {
  static_assert(AscendcSimNever<T>::value,
                "DataCacheCleanAndInvalid<T, entireType, dcciDst> is not available on Atlas inference series "
                "(__NPU_ARCH__ 2002): use DataCacheCleanAndInvalid<T, entireType>(dst)");
}
template <typename T, CacheLine entireType, DcciDst dcciDst>
__aicore__ inline void DataCacheCleanAndInvalid(const LocalTensor<T>&) {
  static_assert(AscendcSimNever<T>::value,
                "DataCacheCleanAndInvalid<T, entireType, dcciDst>(LocalTensor) is not available on Atlas inference "
                "series (__NPU_ARCH__ 2002)");
}
#else
template <typename T, CacheLine entireType, DcciDst dcciDst>
__aicore__ inline void DataCacheCleanAndInvalid(const GlobalTensor<T>& dst) {
  ascendc_sim::rt::DcacheCleanInvalid(dst.GetPhyAddr(), entireType == CacheLine::ENTIRE_DATA_CACHE ? 1 : 0,
                                      static_cast<int>(dcciDst), "DataCacheCleanAndInvalid");
}
// DCache <-> UB coherence: the emulation has no scalar cache in front of UB, so nothing to write out.
template <typename T, CacheLine entireType, DcciDst dcciDst>
__aicore__ inline void DataCacheCleanAndInvalid(const LocalTensor<T>& dst) {
  (void)ascendc_sim_detail::Ub(dst);
  ascendc_sim::rt::DcacheCleanInvalid(nullptr, 0, dcciDst == DcciDst::CACHELINE_ATOMIC ? 3 : 1,
                                      "DataCacheCleanAndInvalid(LocalTensor)");
}
#endif

ASCENDC_SIM_END_NAMESPACE

#endif  // ASCENDC_SIM_KERNEL_SYNC_H_
