// AscendC CPU emulation: tensors and the types they need (namespace AscendC) - CANN's kernel_tensor.h.
//
// GlobalTensor / LocalTensor, TPosition, HardEvent, the DataCopy parameter structs and the enums keep
// CANN's declarations (so unchanged kernel sources compile with g++) and forward to the runtime
// (ascendc_sim/rt.h), which moves the bytes and enforces the documented hardware rules. As in the
// official headers this part is reachable from "kernel_operator.h" and from
// "kernel_operator_list_tensor_intf.h"; the rest of the API only from "kernel_operator.h".
#ifndef ASCENDC_SIM_KERNEL_TENSOR_H_
#define ASCENDC_SIM_KERNEL_TENSOR_H_

#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <utility>

#include "ascendc_sim/arch.h"
#include "ascendc_sim/rt.h"
#include "ascendc_sim/types.h"

// ----------------------------------------------------------------------------- compiler keywords
#ifndef __aicore__
#define __aicore__
#endif
#ifndef __global__
#ifdef ASCENDC_SIM_SCAN  // ms_kvcache.sim.build() finds kernel entries in the preprocessed source
#define __global__ ascendc_sim_global_marker
#else
#define __global__
#endif
#endif
#ifndef __gm__
#define __gm__
#endif
#ifndef __ubuf__
#define __ubuf__
#endif
#ifndef __inout_pipe__
#define __inout_pipe__(x)
#endif
#ifndef __in_pipe__
#define __in_pipe__(x)
#endif
#ifndef __out_pipe__
#define __out_pipe__(x)
#endif
#ifndef GM_ADDR
#define GM_ADDR __gm__ uint8_t*
#endif

// Kernel type declarations (AIV-only kernels are all the emulation runs).
#define KERNEL_TASK_TYPE_DEFAULT(type)
#define KERNEL_TASK_TYPE(key, type)
#define ASCEND_IS_AIV (true)
#define ASCEND_IS_AIC (false)
enum KernelMetaType {
  KERNEL_TYPE_AIV_ONLY,
  KERNEL_TYPE_AIC_ONLY,
  KERNEL_TYPE_MIX_AIV_1_0,
  KERNEL_TYPE_MIX_AIC_1_0,
  KERNEL_TYPE_MIX_AIC_1_1,
  KERNEL_TYPE_MIX_AIC_1_2,
  KERNEL_TYPE_AICORE,
  KERNEL_TYPE_VECTORCORE,
  KERNEL_TYPE_MIX_AICORE,
  KERNEL_TYPE_MIX_VECTOR_CORE,
  KERNEL_TYPE_MAX
};

// ----------------------------------------------------------------------------- bisheng builtins
enum pipe_t : uint8_t { PIPE_S = 0, PIPE_V, PIPE_M, PIPE_MTE1, PIPE_MTE2, PIPE_MTE3, PIPE_FIX, PIPE_ALL };
enum event_t : uint8_t { EVENT_ID0 = 0, EVENT_ID1, EVENT_ID2, EVENT_ID3, EVENT_ID4, EVENT_ID5, EVENT_ID6, EVENT_ID7 };

inline int64_t get_block_idx() { return ascendc_sim::rt::BlockIdx(); }
inline int64_t get_block_num() { return ascendc_sim::rt::BlockNum(); }
inline void pipe_barrier(pipe_t p, ASCENDC_SIM_LOC_PARAM) {
  ASCENDC_SIM_AT;
  ascendc_sim::rt::Barrier(static_cast<ascendc_sim::Pipe>(p));
}
inline void set_flag(pipe_t src, pipe_t dst, event_t id, ASCENDC_SIM_LOC_PARAM) {
  ASCENDC_SIM_AT;
  ascendc_sim::rt::SetFlag((static_cast<int>(src) << 4) | static_cast<int>(dst), id);
}
inline void wait_flag(pipe_t src, pipe_t dst, event_t id, ASCENDC_SIM_LOC_PARAM) {
  ASCENDC_SIM_AT;
  ascendc_sim::rt::WaitFlag((static_cast<int>(src) << 4) | static_cast<int>(dst), id);
}

ASCENDC_SIM_BEGIN_NAMESPACE

using ascendc_sim::DT;
using ascendc_sim::DTOf;

// ----------------------------------------------------------------------------- enums / constants
enum class TPosition : uint8_t {
  GM, A1, A2, B1, B2, C1, C2, CO1, CO2, VECIN, VECOUT, VECCALC, SPM, TSCM, C2PIPE2GM, C2PIPE2LOCAL, MAX,
  LCM = VECCALC,
  SHM = SPM,
};
using QuePosition = TPosition;

#define ASCENDC_SIM_EV(s, d) ((static_cast<int>(s) << 4) | static_cast<int>(d))
enum class HardEvent : uint8_t {
  MTE2_MTE1 = ASCENDC_SIM_EV(PIPE_MTE2, PIPE_MTE1),
  MTE1_MTE2 = ASCENDC_SIM_EV(PIPE_MTE1, PIPE_MTE2),
  MTE1_M = ASCENDC_SIM_EV(PIPE_MTE1, PIPE_M),
  M_MTE1 = ASCENDC_SIM_EV(PIPE_M, PIPE_MTE1),
  MTE2_V = ASCENDC_SIM_EV(PIPE_MTE2, PIPE_V),
  V_MTE2 = ASCENDC_SIM_EV(PIPE_V, PIPE_MTE2),
  MTE3_V = ASCENDC_SIM_EV(PIPE_MTE3, PIPE_V),
  V_MTE3 = ASCENDC_SIM_EV(PIPE_V, PIPE_MTE3),
  M_V = ASCENDC_SIM_EV(PIPE_M, PIPE_V),
  V_M = ASCENDC_SIM_EV(PIPE_V, PIPE_M),
  V_V = ASCENDC_SIM_EV(PIPE_V, PIPE_V),
  MTE3_MTE1 = ASCENDC_SIM_EV(PIPE_MTE3, PIPE_MTE1),
  MTE1_MTE3 = ASCENDC_SIM_EV(PIPE_MTE1, PIPE_MTE3),
  MTE1_V = ASCENDC_SIM_EV(PIPE_MTE1, PIPE_V),
  MTE2_M = ASCENDC_SIM_EV(PIPE_MTE2, PIPE_M),
  M_MTE2 = ASCENDC_SIM_EV(PIPE_M, PIPE_MTE2),
  V_MTE1 = ASCENDC_SIM_EV(PIPE_V, PIPE_MTE1),
  M_FIX = ASCENDC_SIM_EV(PIPE_M, PIPE_FIX),
  FIX_M = ASCENDC_SIM_EV(PIPE_FIX, PIPE_M),
  MTE3_MTE2 = ASCENDC_SIM_EV(PIPE_MTE3, PIPE_MTE2),
  MTE2_MTE3 = ASCENDC_SIM_EV(PIPE_MTE2, PIPE_MTE3),
  S_V = ASCENDC_SIM_EV(PIPE_S, PIPE_V),
  V_S = ASCENDC_SIM_EV(PIPE_V, PIPE_S),
  S_MTE2 = ASCENDC_SIM_EV(PIPE_S, PIPE_MTE2),
  MTE2_S = ASCENDC_SIM_EV(PIPE_MTE2, PIPE_S),
  S_MTE3 = ASCENDC_SIM_EV(PIPE_S, PIPE_MTE3),
  MTE3_S = ASCENDC_SIM_EV(PIPE_MTE3, PIPE_S),
  MTE2_FIX = ASCENDC_SIM_EV(PIPE_MTE2, PIPE_FIX),
  FIX_MTE2 = ASCENDC_SIM_EV(PIPE_FIX, PIPE_MTE2),
  FIX_S = ASCENDC_SIM_EV(PIPE_FIX, PIPE_S),
  M_S = ASCENDC_SIM_EV(PIPE_M, PIPE_S),
  FIX_MTE3 = ASCENDC_SIM_EV(PIPE_FIX, PIPE_MTE3),
  MTE1_FIX = ASCENDC_SIM_EV(PIPE_MTE1, PIPE_FIX),
  FIX_MTE1 = ASCENDC_SIM_EV(PIPE_FIX, PIPE_MTE1),
  FIX_FIX = ASCENDC_SIM_EV(PIPE_FIX, PIPE_FIX),
  MAX = 0xff,
};
#undef ASCENDC_SIM_EV

using TEventID = int8_t;
using TTagType = int32_t;

// CAST_HYBRID / CAST_EVEN / CAST_ZERO exist only for __NPU_ARCH__ 3510 / 5102 / 3003 in CANN: not here.
enum class RoundMode : uint8_t { CAST_NONE = 0, CAST_RINT, CAST_FLOOR, CAST_CEIL, CAST_ROUND, CAST_TRUNC, CAST_ODD, UNKNOWN = 0xFF };
enum class MaskMode : uint8_t { NORMAL = 0, COUNTER };
enum class PaddingMode : uint8_t { Normal = 0, Compact };
enum class CacheMode { CACHE_MODE_DISABLE = 0, CACHE_MODE_NORMAL = 1, CACHE_MODE_LAST = 2, CACHE_MODE_PERSISTENT = 4 };
enum class CacheRwMode { READ = 1, WRITE = 2, RW = 3 };

// AscendC type helpers (kernel_utils): device code has no <type_traits>.
template <typename T, typename U> struct IsSameType { static constexpr bool value = false; };
template <typename T> struct IsSameType<T, T> { static constexpr bool value = true; };

constexpr int32_t ONE_BLK_SIZE = 32;
constexpr int32_t ONE_REPEAT_BYTE_SIZE = 256;
constexpr int32_t MAX_REPEAT_TIMES = 255;
constexpr int32_t DEFAULT_BLK_NUM = 8;
constexpr int32_t DEFAULT_BLK_STRIDE = 1;
constexpr uint8_t DEFAULT_REPEAT_STRIDE = 8;
constexpr uint16_t DEFAULT_DATA_COPY_NBURST = 1;
constexpr uint16_t DEFAULT_DATA_COPY_STRIDE = 0;
constexpr uint64_t MASK_PLACEHOLDER = 0;
constexpr uint64_t MASK_PLACEHOLDER_LIST[2] = {0, 0};

// ----------------------------------------------------------------------------- parameter structs
struct DataCopyParams {
  __aicore__ DataCopyParams() {}
  __aicore__ DataCopyParams(const uint16_t count, const uint16_t len, const uint16_t srcStrideIn,
                            const uint16_t dstStrideIn)
      : blockCount(count), blockLen(len), srcStride(srcStrideIn), dstStride(dstStrideIn) {}
  uint16_t blockCount = DEFAULT_DATA_COPY_NBURST;
  uint16_t blockLen = 0;
  union {
    uint16_t srcGap = 0;
    uint16_t srcStride;
  };
  union {
    uint16_t dstGap = 0;
    uint16_t dstStride;
  };
};

struct DataCopyExtParams {
  __aicore__ DataCopyExtParams() {}
  __aicore__ DataCopyExtParams(const uint16_t count, const uint32_t len, const uint32_t srcStrideIn,
                               const uint32_t dstStrideIn, const uint32_t rsvIn)
      : blockCount(count), blockLen(len), srcStride(srcStrideIn), dstStride(dstStrideIn), rsv(rsvIn) {}
  uint16_t blockCount = DEFAULT_DATA_COPY_NBURST;
  uint32_t blockLen = 0;
  uint32_t srcStride = DEFAULT_DATA_COPY_STRIDE;
  uint32_t dstStride = DEFAULT_DATA_COPY_STRIDE;
  uint32_t rsv = 0;
};

struct DataCopyPadParams {
  __aicore__ DataCopyPadParams() {}
  __aicore__ DataCopyPadParams(const bool isPadValue, const uint8_t leftPadValue, const uint8_t rightPadValue,
                               const uint64_t padValue)
      : isPad(isPadValue), leftPadding(leftPadValue), rightPadding(rightPadValue), paddingValue(padValue) {}
  bool isPad = false;
  uint8_t leftPadding = 0;
  uint8_t rightPadding = 0;
  uint64_t paddingValue = 0;
};

template <typename T>
struct DataCopyPadExtParams {
  __aicore__ DataCopyPadExtParams() : paddingValue(T(0)) {}
  __aicore__ DataCopyPadExtParams(const bool isPadValue, const uint8_t leftPadValue, const uint8_t rightPadValue,
                                  T padValue)
      : isPad(isPadValue), leftPadding(leftPadValue), rightPadding(rightPadValue), paddingValue(padValue) {}
  bool isPad = false;
  uint8_t leftPadding = 0;
  uint8_t rightPadding = 0;
  T paddingValue;
};

struct BinaryRepeatParams {
  __aicore__ BinaryRepeatParams() {}
  __aicore__ BinaryRepeatParams(const uint8_t dstBlkStrideIn, const uint8_t src0BlkStrideIn,
                                const uint8_t src1BlkStrideIn, const uint8_t dstRepStrideIn,
                                const uint8_t src0RepStrideIn, const uint8_t src1RepStrideIn)
      : dstBlkStride(dstBlkStrideIn), src0BlkStride(src0BlkStrideIn), src1BlkStride(src1BlkStrideIn),
        dstRepStride(dstRepStrideIn), src0RepStride(src0RepStrideIn), src1RepStride(src1RepStrideIn) {}
  uint32_t blockNumber = DEFAULT_BLK_NUM;
  uint8_t dstBlkStride = DEFAULT_BLK_STRIDE;
  uint8_t src0BlkStride = DEFAULT_BLK_STRIDE;
  uint8_t src1BlkStride = DEFAULT_BLK_STRIDE;
  uint8_t dstRepStride = DEFAULT_REPEAT_STRIDE;
  uint8_t src0RepStride = DEFAULT_REPEAT_STRIDE;
  uint8_t src1RepStride = DEFAULT_REPEAT_STRIDE;
  bool repeatStrideMode = false;
  bool strideSizeMode = false;
};

struct UnaryRepeatParams {
  __aicore__ UnaryRepeatParams() {}
  __aicore__ UnaryRepeatParams(const uint16_t dstBlkStrideIn, const uint16_t srcBlkStrideIn,
                               const uint8_t dstRepStrideIn, const uint8_t srcRepStrideIn)
      : dstBlkStride(dstBlkStrideIn), srcBlkStride(srcBlkStrideIn), dstRepStride(dstRepStrideIn),
        srcRepStride(srcRepStrideIn) {}
  __aicore__ UnaryRepeatParams(const uint16_t dstBlkStrideIn, const uint16_t srcBlkStrideIn,
                               const uint8_t dstRepStrideIn, const uint8_t srcRepStrideIn, const bool halfBlockIn)
      : dstBlkStride(dstBlkStrideIn), srcBlkStride(srcBlkStrideIn), dstRepStride(dstRepStrideIn),
        srcRepStride(srcRepStrideIn), halfBlock(halfBlockIn) {}
  uint32_t blockNumber = DEFAULT_BLK_NUM;
  uint16_t dstBlkStride = DEFAULT_BLK_STRIDE;
  uint16_t srcBlkStride = DEFAULT_BLK_STRIDE;
  uint8_t dstRepStride = DEFAULT_REPEAT_STRIDE;
  uint8_t srcRepStride = DEFAULT_REPEAT_STRIDE;
  bool repeatStrideMode = false;
  bool strideSizeMode = false;
  bool halfBlock = false;
};

// ----------------------------------------------------------------------------- tensors
template <typename T> class LocalTensor;
template <typename T> class GlobalTensor;
namespace ascendc_sim_detail {
template <typename T> ascendc_sim::UbRef Ub(const LocalTensor<T>& t);
template <typename T> LocalTensor<T> MakeLocal(const ascendc_sim::UbRef& ub, uint32_t size, TPosition pos);
}  // namespace ascendc_sim_detail

template <typename T>
class GlobalTensor {
 public:
  using PrimType = T;
  __aicore__ inline GlobalTensor() {}
  __aicore__ inline void SetGlobalBuffer(__gm__ PrimType* buffer, uint64_t bufferSize) {
    ptr_ = buffer;
    size_ = bufferSize;
    region_ = ascendc_sim::rt::GmResolve(buffer);
  }
  __aicore__ inline void SetGlobalBuffer(__gm__ PrimType* buffer) { SetGlobalBuffer(buffer, 0); }
  __aicore__ inline const __gm__ PrimType* GetPhyAddr() const { return ptr_; }
  __aicore__ inline __gm__ PrimType* GetPhyAddr(const uint64_t offset) const { return ptr_ + offset; }
  __aicore__ inline PrimType GetValue(const uint64_t offset, ASCENDC_SIM_LOC_PARAM) const {
    ASCENDC_SIM_AT;
    ascendc_sim::rt::RequireDtype(DTOf<T>::value, "GlobalTensor::GetValue");
    T v;
    ascendc_sim::rt::GmScalarRead(region_, ptr_ + offset, sizeof(T), &v, "GlobalTensor::GetValue");
    return v;
  }
  // non-const, as in CANN's kernel_tensor.h (a const GlobalTensor cannot be written through)
  __aicore__ inline void SetValue(const uint64_t offset, PrimType value, ASCENDC_SIM_LOC_PARAM) {
    ASCENDC_SIM_AT;
    ascendc_sim::rt::RequireDtype(DTOf<T>::value, "GlobalTensor::SetValue");
    ascendc_sim::rt::GmScalarWrite(region_, ptr_ + offset, sizeof(T), &value, "GlobalTensor::SetValue");
  }
  __aicore__ inline uint64_t GetSize() const { return size_; }
  __aicore__ inline GlobalTensor operator[](const uint64_t offset) const {
    GlobalTensor r(*this);
    r.ptr_ = ptr_ + offset;
    r.size_ = size_ > offset ? size_ - offset : 0;
    return r;
  }
  // A hint only: the emulation has no L2 model.
  template <CacheRwMode rwMode = CacheRwMode::RW>
  __aicore__ inline void SetL2CacheHint(CacheMode mode) {
    cacheMode_ = mode;
  }
  // CANN declares GlobalTensor::ReinterpretCast for __NPU_ARCH__ 3510 / 5102 (Ascend 950) only.
  template <typename U>
  __aicore__ inline GlobalTensor<U> ReinterpretCast() const {
    static_assert(AscendcSimNever<U>::value,
                  "GlobalTensor::ReinterpretCast is not declared for this __NPU_ARCH__: CANN offers it on arch 3510 "
                  "(Ascend 950) only; build a second GlobalTensor with SetGlobalBuffer on the reinterpreted pointer");
    return GlobalTensor<U>();
  }
  // emulation internals
  __gm__ T* sim_ptr() const { return ptr_; }
  int32_t sim_region() const { return region_; }

 private:
  __gm__ T* ptr_ = nullptr;
  uint64_t size_ = 0;
  int32_t region_ = -1;
  CacheMode cacheMode_ = CacheMode::CACHE_MODE_NORMAL;
};

template <typename T>
class LocalTensor {
 public:
  using PrimType = T;
  __aicore__ inline LocalTensor() : ub_{0, -1, 0, 0}, size_(0), pos_(TPosition::VECCALC) {}
  __aicore__ inline PrimType GetValue(const uint32_t index, ASCENDC_SIM_LOC_PARAM) const {
    ASCENDC_SIM_AT;
    ascendc_sim::rt::RequireDtype(DTOf<T>::value, "LocalTensor::GetValue");
    T v;
    ascendc_sim::rt::UbScalarRead(ub_, static_cast<uint64_t>(index) * sizeof(T), sizeof(T), &v);
    return v;
  }
  template <typename S>
  __aicore__ inline void SetValue(const uint32_t index, const S value, ASCENDC_SIM_LOC_PARAM) const {
    ASCENDC_SIM_AT;
    ascendc_sim::rt::RequireDtype(DTOf<T>::value, "LocalTensor::SetValue");
    const T v = static_cast<T>(value);
    ascendc_sim::rt::UbScalarWrite(ub_, static_cast<uint64_t>(index) * sizeof(T), sizeof(T), &v);
  }
  __aicore__ inline LocalTensor operator[](const uint32_t offset) const {
    LocalTensor r(*this);
    r.ub_.addr = ub_.addr + offset * static_cast<uint32_t>(sizeof(T));
    r.size_ = size_ > offset ? size_ - offset : 0;
    return r;
  }
  template <typename U>
  __aicore__ inline LocalTensor<U> ReinterpretCast() const {
    return ascendc_sim_detail::MakeLocal<U>(ub_, static_cast<uint32_t>(size_ * sizeof(T) / sizeof(U)), pos_);
  }
  // CANN returns int32_t (the TPosition value), not a TPosition
  __aicore__ inline int32_t GetPosition() const { return static_cast<int32_t>(pos_); }
  __aicore__ inline void SetSize(const uint32_t size) { size_ = size; }
  __aicore__ inline uint32_t GetSize() const { return size_; }
  [[deprecated("LocalTensor::GetLength is deprecated in CANN (scheduled for removal): use GetSize() * sizeof(T)")]] __aicore__ inline uint32_t
  GetLength() const {
    return size_ * static_cast<uint32_t>(sizeof(T));
  }
  __aicore__ inline void SetBufferLen(uint32_t dataLen) { size_ = dataLen / static_cast<uint32_t>(sizeof(T)); }
  __aicore__ inline void SetUserTag(const TTagType tag) { tag_ = tag; }
  __aicore__ inline TTagType GetUserTag() const { return tag_; }
  // The raw UB address is not emulated: its type differs between CANN's NPU build (uint64_t) and its
  // CPU-debug build (T*), and a kernel using it bypasses every check.
  template <typename U = T>
  __aicore__ inline uint64_t GetPhyAddr() const {
    static_assert(AscendcSimNever<U>::value,
                  "LocalTensor::GetPhyAddr is not emulated (uint64_t on the NPU, T* in CANN's CPU debug build)");
    return 0;
  }
  template <typename U = T>
  __aicore__ inline uint64_t GetPhyAddr(const uint32_t) const {
    static_assert(AscendcSimNever<U>::value,
                  "LocalTensor::GetPhyAddr is not emulated (uint64_t on the NPU, T* in CANN's CPU debug build)");
    return 0;
  }

 private:
  template <typename U> friend ascendc_sim::UbRef ascendc_sim_detail::Ub(const LocalTensor<U>& t);
  template <typename U>
  friend LocalTensor<U> ascendc_sim_detail::MakeLocal(const ascendc_sim::UbRef& ub, uint32_t size, TPosition pos);
  ascendc_sim::UbRef ub_;
  uint32_t size_;
  TPosition pos_;
  TTagType tag_ = 0;
};

namespace ascendc_sim_detail {
template <typename T> inline ascendc_sim::UbRef Ub(const LocalTensor<T>& t) { return t.ub_; }
template <typename T>
inline LocalTensor<T> MakeLocal(const ascendc_sim::UbRef& ub, uint32_t size, TPosition pos) {
  LocalTensor<T> r;
  r.ub_ = ub;
  r.size_ = size;
  r.pos_ = pos;
  return r;
}
inline ascendc_sim::Pos P(TPosition p) {
  return static_cast<ascendc_sim::Pos>(static_cast<uint8_t>(p));
}
}  // namespace ascendc_sim_detail

ASCENDC_SIM_END_NAMESPACE

#endif  // ASCENDC_SIM_KERNEL_TENSOR_H_
