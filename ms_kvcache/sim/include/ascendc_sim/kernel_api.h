// AscendC CPU emulation: the kernel-side AscendC API subset (namespace AscendC).
//
// Each API keeps CANN's signature (so unchanged kernel sources compile with g++) and forwards to the
// runtime (ascendc_sim/rt.h), which moves the bytes and enforces the documented hardware rules.
// Include it through "kernel_operator.h".
#ifndef ASCENDC_SIM_KERNEL_API_H_
#define ASCENDC_SIM_KERNEL_API_H_

#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <utility>

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
inline void pipe_barrier(pipe_t p) { ascendc_sim::rt::Barrier(static_cast<ascendc_sim::Pipe>(p)); }
inline void set_flag(pipe_t src, pipe_t dst, event_t id) {
  ascendc_sim::rt::SetFlag((static_cast<int>(src) << 4) | static_cast<int>(dst), id);
}
inline void wait_flag(pipe_t src, pipe_t dst, event_t id) {
  ascendc_sim::rt::WaitFlag((static_cast<int>(src) << 4) | static_cast<int>(dst), id);
}

namespace AscendC {

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

enum class RoundMode : uint8_t { CAST_NONE = 0, CAST_RINT, CAST_FLOOR, CAST_CEIL, CAST_ROUND, CAST_TRUNC, CAST_ODD, CAST_HYBRID };
enum class MaskMode : uint8_t { NORMAL = 0, COUNTER };
enum class PaddingMode : uint8_t { Normal = 0, Compact };
enum class CacheMode : uint8_t { CACHE_MODE_NORMAL = 0, CACHE_MODE_DISABLE, CACHE_MODE_LAST, CACHE_MODE_PERSISTENT };

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
  __aicore__ GlobalTensor() {}
  __aicore__ inline void SetGlobalBuffer(__gm__ T* buffer, uint64_t bufferSize) {
    ptr_ = buffer;
    size_ = bufferSize;
    region_ = ascendc_sim::rt::GmResolve(buffer);
  }
  __aicore__ inline void SetGlobalBuffer(__gm__ T* buffer) { SetGlobalBuffer(buffer, 0); }
  __aicore__ inline T GetValue(const uint64_t offset) const {
    ascendc_sim::rt::RequireDtype(DTOf<T>::value, "GlobalTensor::GetValue");
    T v;
    ascendc_sim::rt::GmScalarRead(region_, ptr_ + offset, sizeof(T), &v, "GlobalTensor::GetValue");
    return v;
  }
  __aicore__ inline void SetValue(const uint64_t offset, T value) const {
    ascendc_sim::rt::RequireDtype(DTOf<T>::value, "GlobalTensor::SetValue");
    ascendc_sim::rt::GmScalarWrite(region_, ptr_ + offset, sizeof(T), &value, "GlobalTensor::SetValue");
  }
  __aicore__ inline GlobalTensor operator[](const uint64_t offset) const {
    GlobalTensor r(*this);
    r.ptr_ = ptr_ + offset;
    r.size_ = size_ > offset ? size_ - offset : 0;
    return r;
  }
  __aicore__ inline const __gm__ T* GetPhyAddr() const { return ptr_; }
  __aicore__ inline __gm__ T* GetPhyAddr(const uint64_t offset) const { return ptr_ + offset; }
  __aicore__ inline uint64_t GetSize() const { return size_; }
  __aicore__ inline void SetL2CacheHint(CacheMode) {}
  template <CacheMode mode> __aicore__ inline void SetL2CacheHint() {}
  template <typename U>
  __aicore__ inline GlobalTensor<U> ReinterpretCast() const {
    GlobalTensor<U> r;
    r.SetGlobalBuffer(reinterpret_cast<__gm__ U*>(ptr_), size_ * sizeof(T) / sizeof(U));
    return r;
  }
  // emulation internals
  __gm__ T* sim_ptr() const { return ptr_; }
  int32_t sim_region() const { return region_; }

 private:
  __gm__ T* ptr_ = nullptr;
  uint64_t size_ = 0;
  int32_t region_ = -1;
};

template <typename T>
class LocalTensor {
 public:
  using PrimType = T;
  __aicore__ LocalTensor() : ub_{0, -1, 0, 0}, size_(0), pos_(TPosition::VECCALC) {}
  __aicore__ inline T GetValue(const uint32_t index) const {
    ascendc_sim::rt::RequireDtype(DTOf<T>::value, "LocalTensor::GetValue");
    T v;
    ascendc_sim::rt::UbScalarRead(ub_, static_cast<uint64_t>(index) * sizeof(T), sizeof(T), &v);
    return v;
  }
  __aicore__ inline void SetValue(const uint32_t index, const T value) const {
    ascendc_sim::rt::RequireDtype(DTOf<T>::value, "LocalTensor::SetValue");
    ascendc_sim::rt::UbScalarWrite(ub_, static_cast<uint64_t>(index) * sizeof(T), sizeof(T), &value);
  }
  __aicore__ inline LocalTensor operator[](const uint32_t offset) const {
    LocalTensor r(*this);
    r.ub_.addr = ub_.addr + offset * static_cast<uint32_t>(sizeof(T));
    r.size_ = size_ > offset ? size_ - offset : 0;
    return r;
  }
  __aicore__ inline uint32_t GetSize() const { return size_; }
  __aicore__ inline void SetSize(const uint32_t size) { size_ = size; }
  __aicore__ inline uint32_t GetLength() const { return size_ * static_cast<uint32_t>(sizeof(T)); }
  __aicore__ inline void SetBufferLen(const uint32_t len) { size_ = len / static_cast<uint32_t>(sizeof(T)); }
  __aicore__ inline uint64_t GetPhyAddr() const { return ub_.addr; }
  __aicore__ inline uint64_t GetPhyAddr(const uint32_t offset) const { return ub_.addr + offset * sizeof(T); }
  __aicore__ inline TPosition GetPosition() const { return pos_; }
  __aicore__ inline void SetUserTag(const int32_t tag) { tag_ = tag; }
  __aicore__ inline int32_t GetUserTag() const { return tag_; }
  template <typename U>
  __aicore__ inline LocalTensor<U> ReinterpretCast() const {
    return ascendc_sim_detail::MakeLocal<U>(ub_, static_cast<uint32_t>(size_ * sizeof(T) / sizeof(U)), pos_);
  }

 private:
  template <typename U> friend ascendc_sim::UbRef ascendc_sim_detail::Ub(const LocalTensor<U>& t);
  template <typename U>
  friend LocalTensor<U> ascendc_sim_detail::MakeLocal(const ascendc_sim::UbRef& ub, uint32_t size, TPosition pos);
  ascendc_sim::UbRef ub_;
  uint32_t size_;
  TPosition pos_;
  int32_t tag_ = 0;
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

// ----------------------------------------------------------------------------- pipe, queues, buffers
class TPipe;
template <TPosition src, TPosition dst, int32_t depth, auto mask = 0>
class TQueBind {
 public:
  __aicore__ TQueBind() {}
  TQueBind(const TQueBind&) = delete;
  TQueBind& operator=(const TQueBind&) = delete;
  ~TQueBind() { ascendc_sim::rt::QueDestroy(h_, gen_); }

  template <typename T>
  __aicore__ inline LocalTensor<T> AllocTensor() {
    if (depth == 0) ascendc_sim::rt::Fail("QUE_DEPTH", "AllocTensor(): the non-inplace form needs depth != 0 (TQue depth is 0)");
    return Alloc<T>();
  }
  template <typename T>
  __aicore__ inline void AllocTensor(LocalTensor<T>& t) {
    if (depth != 0) ascendc_sim::rt::Fail("QUE_DEPTH", "AllocTensor(LocalTensor&): the inplace form needs TQue depth 0, got %d", static_cast<int>(depth));
    t = Alloc<T>();
  }
  template <typename T>
  __aicore__ inline bool EnQue(const LocalTensor<T>& t) {
    ascendc_sim::rt::QueEnQue(h_, gen_, ascendc_sim_detail::Ub(t), ascendc_sim::Pos::MAX, ascendc_sim::Pos::MAX);
    return true;
  }
  template <TPosition srcUserPos, TPosition dstUserPos, typename T>
  __aicore__ inline bool EnQue(const LocalTensor<T>& t) {
    ascendc_sim::rt::QueEnQue(h_, gen_, ascendc_sim_detail::Ub(t), ascendc_sim_detail::P(srcUserPos),
                              ascendc_sim_detail::P(dstUserPos));
    return true;
  }
  template <typename T>
  __aicore__ inline LocalTensor<T> DeQue() {
    uint32_t len = 0;
    ascendc_sim::UbRef ub = ascendc_sim::rt::QueDeQue(h_, gen_, &len, ascendc_sim::Pos::MAX, ascendc_sim::Pos::MAX);
    return ascendc_sim_detail::MakeLocal<T>(ub, len / static_cast<uint32_t>(sizeof(T)), dst);
  }
  template <typename T>
  __aicore__ inline void DeQue(LocalTensor<T>& t) { t = DeQue<T>(); }
  template <TPosition srcUserPos, TPosition dstUserPos, typename T>
  __aicore__ inline LocalTensor<T> DeQue() {
    uint32_t len = 0;
    ascendc_sim::UbRef ub = ascendc_sim::rt::QueDeQue(h_, gen_, &len, ascendc_sim_detail::P(srcUserPos),
                                                      ascendc_sim_detail::P(dstUserPos));
    return ascendc_sim_detail::MakeLocal<T>(ub, len / static_cast<uint32_t>(sizeof(T)), dstUserPos);
  }
  template <typename T>
  __aicore__ inline void FreeTensor(const LocalTensor<T>& t) {
    ascendc_sim::rt::QueFree(h_, gen_, ascendc_sim_detail::Ub(t));
  }
  __aicore__ inline bool VacantInQue() { return ascendc_sim::rt::QueInfo(h_, gen_, 1) != 0; }
  __aicore__ inline bool HasTensorInQue() { return ascendc_sim::rt::QueInfo(h_, gen_, 0) > 0; }
  __aicore__ inline int32_t GetTensorCountInQue() { return ascendc_sim::rt::QueInfo(h_, gen_, 0); }
  __aicore__ inline bool HasIdleBuffer() { return ascendc_sim::rt::QueInfo(h_, gen_, 2) > 0; }
  __aicore__ inline void FreeAllEvent() { ascendc_sim::rt::QueFreeAllEvent(h_, gen_); }

  // called by TPipe::InitBuffer
  void sim_init(uint32_t num, uint32_t len) {
    ascendc_sim::rt::PipeInitQue(&h_, &gen_, ascendc_sim_detail::P(src), ascendc_sim_detail::P(dst), depth, num, len);
  }

 private:
  template <typename T>
  LocalTensor<T> Alloc() {
    uint32_t len = 0;
    ascendc_sim::UbRef ub = ascendc_sim::rt::QueAlloc(h_, gen_, &len);
    ascendc_sim::rt::RequireDtype(DTOf<T>::value, "AllocTensor");
    return ascendc_sim_detail::MakeLocal<T>(ub, len / static_cast<uint32_t>(sizeof(T)), src);
  }
  int32_t h_ = -1;
  uint32_t gen_ = 0;
};

template <TPosition pos, int32_t depth, auto mask = 0>
class TQue : public TQueBind<pos, pos, depth, mask> {};

template <TPosition pos = TPosition::VECCALC>
class TBuf {
 public:
  __aicore__ TBuf() {}
  TBuf(const TBuf&) = delete;
  TBuf& operator=(const TBuf&) = delete;
  template <typename T>
  __aicore__ inline LocalTensor<T> Get() {
    uint32_t len = 0;
    ascendc_sim::UbRef ub = ascendc_sim::rt::TBufGet(h_, gen_, &len);
    ascendc_sim::rt::RequireDtype(DTOf<T>::value, "TBuf::Get");
    return ascendc_sim_detail::MakeLocal<T>(ub, len / static_cast<uint32_t>(sizeof(T)), pos);
  }
  template <typename T>
  __aicore__ inline LocalTensor<T> Get(const uint32_t len) {
    uint32_t bytes = 0;
    ascendc_sim::UbRef ub = ascendc_sim::rt::TBufGet(h_, gen_, &bytes);
    ascendc_sim::rt::RequireDtype(DTOf<T>::value, "TBuf::Get");
    if (static_cast<uint64_t>(len) * sizeof(T) > bytes)
      ascendc_sim::rt::Fail("UB_OUT_OF_BUFFER", "TBuf::Get<%s>(%u): %llu bytes requested, the TBuf has %u bytes",
                            ascendc_sim::rt::DTName(DTOf<T>::value), len,
                            static_cast<unsigned long long>(len) * sizeof(T), bytes);
    return ascendc_sim_detail::MakeLocal<T>(ub, len, pos);
  }
  template <typename T>
  __aicore__ inline LocalTensor<T> GetWithOffset(const uint32_t size, const uint32_t bufOffset) {
    uint32_t bytes = 0;
    ascendc_sim::UbRef ub = ascendc_sim::rt::TBufGet(h_, gen_, &bytes);
    ascendc_sim::rt::RequireDtype(DTOf<T>::value, "TBuf::GetWithOffset");
    if (static_cast<uint64_t>(bufOffset) + static_cast<uint64_t>(size) * sizeof(T) > bytes)
      ascendc_sim::rt::Fail("UB_OUT_OF_BUFFER",
                            "TBuf::GetWithOffset<%s>(size=%u, bufOffset=%u): ends at byte %llu, the TBuf has %u bytes",
                            ascendc_sim::rt::DTName(DTOf<T>::value), size, bufOffset,
                            static_cast<unsigned long long>(bufOffset) + static_cast<unsigned long long>(size) * sizeof(T),
                            bytes);
    ub.addr += bufOffset;
    return ascendc_sim_detail::MakeLocal<T>(ub, size, pos);
  }
  void sim_init(uint32_t len) { ascendc_sim::rt::PipeInitTBuf(&h_, &gen_, ascendc_sim_detail::P(pos), len); }

 private:
  int32_t h_ = -1;
  uint32_t gen_ = 0;
};

class TPipe {
 public:
  __aicore__ TPipe() { ascendc_sim::rt::PipeCreate(this); }
  ~TPipe() { ascendc_sim::rt::PipeDestroy(this); }
  TPipe(const TPipe&) = delete;
  TPipe& operator=(const TPipe&) = delete;
  template <class Q>
  __aicore__ inline bool InitBuffer(Q& que, uint8_t num, uint32_t len) {
    que.sim_init(num, len);
    return true;
  }
  template <TPosition bufPos>
  __aicore__ inline bool InitBuffer(TBuf<bufPos>& buf, uint32_t len) {
    buf.sim_init(len);
    return true;
  }
  __aicore__ inline void Init() {}
  __aicore__ inline void Reset() { ascendc_sim::rt::PipeReset(this); }
  __aicore__ inline void Destroy() { ascendc_sim::rt::PipeReset(this); }
  template <HardEvent evt>
  __aicore__ inline TEventID FetchEventID() { return static_cast<TEventID>(ascendc_sim::rt::FetchEventID(static_cast<int>(evt))); }
  __aicore__ inline TEventID FetchEventID(HardEvent evt) {
    return static_cast<TEventID>(ascendc_sim::rt::FetchEventID(static_cast<int>(evt)));
  }
  template <HardEvent evt>
  __aicore__ inline TEventID AllocEventID() { return static_cast<TEventID>(ascendc_sim::rt::AllocEventID(static_cast<int>(evt))); }
  template <HardEvent evt>
  __aicore__ inline void ReleaseEventID(TEventID id) { ascendc_sim::rt::ReleaseEventID(static_cast<int>(evt), id); }
};

// ----------------------------------------------------------------------------- core / tiling helpers
__aicore__ inline int64_t GetBlockIdx() { return ascendc_sim::rt::BlockIdx(); }
__aicore__ inline int64_t GetBlockNum() { return ascendc_sim::rt::BlockNum(); }
__aicore__ inline int64_t GetSubBlockIdx() { return 0; }
__aicore__ inline int64_t GetSubBlockNum() { return 1; }
__aicore__ inline int64_t GetTaskRation() { return 1; }
__aicore__ inline GM_ADDR GetUserWorkspace(GM_ADDR workspace) { return ascendc_sim::rt::UserWorkspace(workspace); }
__aicore__ inline GM_ADDR GetSysWorkSpacePtr() { return ascendc_sim::rt::SysWorkspace(); }
__aicore__ inline void SetSysWorkspace(GM_ADDR) {}
template <bool isAIVOnly = true>
__aicore__ inline void SyncAll() {
  ascendc_sim::rt::UnsupportedApi("SyncAll", "cross-core synchronisation is not emulated (cores run one by one)");
}
template <typename T>
__aicore__ inline void SetAtomicAdd() {
  ascendc_sim::rt::UnsupportedApi("SetAtomicAdd", "atomic GM accumulation is not emulated");
}
__aicore__ inline void SetAtomicNone() {}

// device printf (AscendC::printf / PRINTF): printed on the host as "[<op> core <i>] ..."
template <typename... Args>
__aicore__ inline void printf(const char* fmt, Args... args) {
  ascendc_sim::rt::KernelPrintf(fmt, args...);
}
template <typename... Args>
__aicore__ inline void PRINTF(const char* fmt, Args... args) {
  ascendc_sim::rt::KernelPrintf(fmt, args...);
}

// ----------------------------------------------------------------------------- sync
template <pipe_t pipe>
__aicore__ inline void PipeBarrier() {
  ascendc_sim::rt::Barrier(static_cast<ascendc_sim::Pipe>(pipe));
}
template <HardEvent event>
__aicore__ inline void SetFlag(int32_t eventID) {
  ascendc_sim::rt::SetFlag(static_cast<int>(event), eventID);
}
template <HardEvent event>
__aicore__ inline void WaitFlag(int32_t eventID) {
  ascendc_sim::rt::WaitFlag(static_cast<int>(event), eventID);
}
template <pipe_t src, pipe_t dst>
class TQueSync {
 public:
  __aicore__ inline void SetFlag(TEventID id) {
    ascendc_sim::rt::SetFlag((static_cast<int>(src) << 4) | static_cast<int>(dst), id);
  }
  __aicore__ inline void WaitFlag(TEventID id) {
    ascendc_sim::rt::WaitFlag((static_cast<int>(src) << 4) | static_cast<int>(dst), id);
  }
};

// ----------------------------------------------------------------------------- data movement
namespace ascendc_sim_detail {
inline ascendc_sim::CopyParamsRaw Raw(uint32_t count, uint64_t len, uint64_t ss, uint64_t ds) {
  ascendc_sim::CopyParamsRaw r;
  r.block_count = count;
  r.block_len = len;
  r.src_stride = ss;
  r.dst_stride = ds;
  return r;
}
}  // namespace ascendc_sim_detail

template <typename T>
__aicore__ inline void DataCopy(const LocalTensor<T>& dst, const GlobalTensor<T>& src, const uint32_t count) {
  ascendc_sim::rt::CopyGmToUb(ascendc_sim_detail::Ub(dst), src.sim_region(),
                              reinterpret_cast<const uint8_t*>(src.sim_ptr()), DTOf<T>::value, ascendc_sim::kCopyCount,
                              ascendc_sim_detail::Raw(1, static_cast<uint64_t>(count) * sizeof(T), 0, 0), nullptr,
                              "DataCopy(GM->UB, count)");
}
template <typename T>
__aicore__ inline void DataCopy(const GlobalTensor<T>& dst, const LocalTensor<T>& src, const uint32_t count) {
  ascendc_sim::rt::CopyUbToGm(dst.sim_region(), reinterpret_cast<uint8_t*>(dst.sim_ptr()), ascendc_sim_detail::Ub(src),
                              DTOf<T>::value, ascendc_sim::kCopyCount,
                              ascendc_sim_detail::Raw(1, static_cast<uint64_t>(count) * sizeof(T), 0, 0),
                              "DataCopy(UB->GM, count)");
}
template <typename T>
__aicore__ inline void DataCopy(const LocalTensor<T>& dst, const LocalTensor<T>& src, const uint32_t count) {
  ascendc_sim::rt::CopyUbToUb(ascendc_sim_detail::Ub(dst), ascendc_sim_detail::Ub(src), DTOf<T>::value,
                              ascendc_sim::kCopyCount,
                              ascendc_sim_detail::Raw(1, static_cast<uint64_t>(count) * sizeof(T), 0, 0),
                              "DataCopy(UB->UB, count)");
}
template <typename T>
__aicore__ inline void DataCopy(const LocalTensor<T>& dst, const GlobalTensor<T>& src, const DataCopyParams& p) {
  ascendc_sim::rt::CopyGmToUb(ascendc_sim_detail::Ub(dst), src.sim_region(),
                              reinterpret_cast<const uint8_t*>(src.sim_ptr()), DTOf<T>::value,
                              ascendc_sim::kCopyParams,
                              ascendc_sim_detail::Raw(p.blockCount, p.blockLen, p.srcStride, p.dstStride), nullptr,
                              "DataCopy(GM->UB, DataCopyParams)");
}
template <typename T>
__aicore__ inline void DataCopy(const GlobalTensor<T>& dst, const LocalTensor<T>& src, const DataCopyParams& p) {
  ascendc_sim::rt::CopyUbToGm(dst.sim_region(), reinterpret_cast<uint8_t*>(dst.sim_ptr()), ascendc_sim_detail::Ub(src),
                              DTOf<T>::value, ascendc_sim::kCopyParams,
                              ascendc_sim_detail::Raw(p.blockCount, p.blockLen, p.srcStride, p.dstStride),
                              "DataCopy(UB->GM, DataCopyParams)");
}
template <typename T>
__aicore__ inline void DataCopy(const LocalTensor<T>& dst, const LocalTensor<T>& src, const DataCopyParams& p) {
  ascendc_sim::rt::CopyUbToUb(ascendc_sim_detail::Ub(dst), ascendc_sim_detail::Ub(src), DTOf<T>::value,
                              ascendc_sim::kCopyParams,
                              ascendc_sim_detail::Raw(p.blockCount, p.blockLen, p.srcStride, p.dstStride),
                              "DataCopy(UB->UB, DataCopyParams)");
}

template <typename T, PaddingMode mode = PaddingMode::Normal>
__aicore__ inline void DataCopyPad(const LocalTensor<T>& dst, const GlobalTensor<T>& src, const DataCopyExtParams& p,
                                   const DataCopyPadExtParams<T>& pad) {
  if (mode != PaddingMode::Normal)
    ascendc_sim::rt::UnsupportedApi("DataCopyPad<PaddingMode::Compact>", "Compact mode exists on Ascend 950 only");
  ascendc_sim::PadSpec ps;
  ps.left = pad.leftPadding;
  ps.right = pad.rightPadding;
  ps.is_pad = pad.isPad;
  ps.value = 0;
  std::memcpy(&ps.value, &pad.paddingValue, sizeof(T) <= 8 ? sizeof(T) : 8);
  ascendc_sim::rt::CopyGmToUb(ascendc_sim_detail::Ub(dst), src.sim_region(),
                              reinterpret_cast<const uint8_t*>(src.sim_ptr()), DTOf<T>::value,
                              ascendc_sim::kCopyPadExt,
                              ascendc_sim_detail::Raw(p.blockCount, p.blockLen, p.srcStride, p.dstStride), &ps,
                              "DataCopyPad(GM->UB, DataCopyExtParams)");
}
template <typename T, PaddingMode mode = PaddingMode::Normal>
__aicore__ inline void DataCopyPad(const GlobalTensor<T>& dst, const LocalTensor<T>& src, const DataCopyExtParams& p) {
  if (mode != PaddingMode::Normal)
    ascendc_sim::rt::UnsupportedApi("DataCopyPad<PaddingMode::Compact>", "Compact mode exists on Ascend 950 only");
  ascendc_sim::rt::CopyUbToGm(dst.sim_region(), reinterpret_cast<uint8_t*>(dst.sim_ptr()), ascendc_sim_detail::Ub(src),
                              DTOf<T>::value, ascendc_sim::kCopyPadExt,
                              ascendc_sim_detail::Raw(p.blockCount, p.blockLen, p.srcStride, p.dstStride),
                              "DataCopyPad(UB->GM, DataCopyExtParams)");
}
template <typename T>
__aicore__ inline void DataCopyPad(const LocalTensor<T>& dst, const GlobalTensor<T>& src, const DataCopyParams& p,
                                   const DataCopyPadParams& pad) {
  ascendc_sim::PadSpec ps;
  ps.left = pad.leftPadding;
  ps.right = pad.rightPadding;
  ps.is_pad = pad.isPad;
  ps.value = pad.paddingValue;
  ascendc_sim::rt::CopyGmToUb(ascendc_sim_detail::Ub(dst), src.sim_region(),
                              reinterpret_cast<const uint8_t*>(src.sim_ptr()), DTOf<T>::value,
                              ascendc_sim::kCopyPadLegacy,
                              ascendc_sim_detail::Raw(p.blockCount, p.blockLen, p.srcStride, p.dstStride), &ps,
                              "DataCopyPad(GM->UB, DataCopyParams)");
}
template <typename T>
__aicore__ inline void DataCopyPad(const GlobalTensor<T>& dst, const LocalTensor<T>& src, const DataCopyParams& p) {
  ascendc_sim::rt::CopyUbToGm(dst.sim_region(), reinterpret_cast<uint8_t*>(dst.sim_ptr()), ascendc_sim_detail::Ub(src),
                              DTOf<T>::value, ascendc_sim::kCopyPadLegacy,
                              ascendc_sim_detail::Raw(p.blockCount, p.blockLen, p.srcStride, p.dstStride),
                              "DataCopyPad(UB->GM, DataCopyParams)");
}
template <typename T, TPosition pos = TPosition::MAX>
__aicore__ inline void SetPadValue(T paddingValue) {
  uint64_t bits = 0;
  std::memcpy(&bits, &paddingValue, sizeof(T) <= 8 ? sizeof(T) : 8);
  ascendc_sim::rt::SetPadValue(bits, sizeof(T));
}

// ----------------------------------------------------------------------------- vector compute
namespace ascendc_sim_detail {
template <typename T>
inline ascendc_sim::VecOperand Opnd(const LocalTensor<T>& t, uint32_t blk, uint32_t rep) {
  ascendc_sim::VecOperand o;
  o.ub = Ub(t);
  o.dt = DTOf<T>::value;
  o.blk_stride = blk;
  o.rep_stride = rep;
  o.avail = t.GetSize();
  return o;
}
inline ascendc_sim::VecShape CountShape(int64_t count) {
  ascendc_sim::VecShape s;
  s.mode = ascendc_sim::kVecCount;
  s.count = count < 0 ? ~0ull : static_cast<uint64_t>(count);
  s.mask[0] = s.mask[1] = 0;
  s.repeat = 0;
  if (count < 0) ascendc_sim::rt::Fail("VEC_PARAMS", "count must be >= 0, got %lld", static_cast<long long>(count));
  return s;
}
inline ascendc_sim::VecShape BitsShape(const uint64_t mask[], uint8_t repeat) {
  ascendc_sim::VecShape s;
  s.mode = ascendc_sim::kVecMaskBits;
  s.count = 0;
  s.mask[0] = mask[0];
  s.mask[1] = mask[1];
  s.repeat = repeat;
  return s;
}
inline ascendc_sim::VecShape LenShape(uint64_t mask, uint8_t repeat) {
  ascendc_sim::VecShape s;
  s.mode = ascendc_sim::kVecMaskLen;
  s.count = 0;
  s.mask[0] = mask;
  s.mask[1] = 0;
  s.repeat = repeat;
  return s;
}
}  // namespace ascendc_sim_detail

#define ASCENDC_SIM_BINARY_OP(NAME)                                                                                \
  template <typename T, bool isSetMask = true>                                                                     \
  __aicore__ inline void NAME(const LocalTensor<T>& dst, const LocalTensor<T>& src0, const LocalTensor<T>& src1,   \
                              const int32_t& count) {                                                              \
    auto d = ascendc_sim_detail::Opnd(dst, 1, 8), a = ascendc_sim_detail::Opnd(src0, 1, 8),                        \
         b = ascendc_sim_detail::Opnd(src1, 1, 8);                                                                 \
    ascendc_sim::rt::Vec(ascendc_sim::VecOp::NAME, #NAME, ascendc_sim_detail::CountShape(count), !isSetMask, d,    \
                         &a, &b, nullptr, 0);                                                                      \
  }                                                                                                                \
  template <typename T, bool isSetMask = true>                                                                     \
  __aicore__ inline void NAME(const LocalTensor<T>& dst, const LocalTensor<T>& src0, const LocalTensor<T>& src1,   \
                              const uint64_t mask[], const uint8_t repeatTime, const BinaryRepeatParams& p) {      \
    auto d = ascendc_sim_detail::Opnd(dst, p.dstBlkStride, p.dstRepStride),                                        \
         a = ascendc_sim_detail::Opnd(src0, p.src0BlkStride, p.src0RepStride),                                     \
         b = ascendc_sim_detail::Opnd(src1, p.src1BlkStride, p.src1RepStride);                                     \
    ascendc_sim::rt::Vec(ascendc_sim::VecOp::NAME, #NAME, ascendc_sim_detail::BitsShape(mask, repeatTime),         \
                         !isSetMask, d, &a, &b, nullptr, 0);                                                       \
  }                                                                                                                \
  template <typename T, bool isSetMask = true>                                                                     \
  __aicore__ inline void NAME(const LocalTensor<T>& dst, const LocalTensor<T>& src0, const LocalTensor<T>& src1,   \
                              uint64_t mask, const uint8_t repeatTime, const BinaryRepeatParams& p) {              \
    auto d = ascendc_sim_detail::Opnd(dst, p.dstBlkStride, p.dstRepStride),                                        \
         a = ascendc_sim_detail::Opnd(src0, p.src0BlkStride, p.src0RepStride),                                     \
         b = ascendc_sim_detail::Opnd(src1, p.src1BlkStride, p.src1RepStride);                                     \
    ascendc_sim::rt::Vec(ascendc_sim::VecOp::NAME, #NAME, ascendc_sim_detail::LenShape(mask, repeatTime),          \
                         !isSetMask, d, &a, &b, nullptr, 0);                                                       \
  }

ASCENDC_SIM_BINARY_OP(Add)
ASCENDC_SIM_BINARY_OP(Sub)
ASCENDC_SIM_BINARY_OP(Mul)
ASCENDC_SIM_BINARY_OP(Max)
ASCENDC_SIM_BINARY_OP(Min)
ASCENDC_SIM_BINARY_OP(Div)
#undef ASCENDC_SIM_BINARY_OP

#define ASCENDC_SIM_SCALAR_OP(NAME)                                                                                \
  template <typename T, bool isSetMask = true>                                                                     \
  __aicore__ inline void NAME(const LocalTensor<T>& dst, const LocalTensor<T>& src, const T& scalarValue,           \
                              const int32_t& count) {                                                              \
    auto d = ascendc_sim_detail::Opnd(dst, 1, 8), a = ascendc_sim_detail::Opnd(src, 1, 8);                         \
    ascendc_sim::rt::Vec(ascendc_sim::VecOp::NAME, #NAME, ascendc_sim_detail::CountShape(count), !isSetMask, d,    \
                         &a, nullptr, &scalarValue, 0);                                                            \
  }                                                                                                                \
  template <typename T, bool isSetMask = true>                                                                     \
  __aicore__ inline void NAME(const LocalTensor<T>& dst, const LocalTensor<T>& src, const T& scalarValue,           \
                              const uint64_t mask[], const uint8_t repeatTime, const UnaryRepeatParams& p) {       \
    auto d = ascendc_sim_detail::Opnd(dst, p.dstBlkStride, p.dstRepStride),                                        \
         a = ascendc_sim_detail::Opnd(src, p.srcBlkStride, p.srcRepStride);                                        \
    ascendc_sim::rt::Vec(ascendc_sim::VecOp::NAME, #NAME, ascendc_sim_detail::BitsShape(mask, repeatTime),         \
                         !isSetMask, d, &a, nullptr, &scalarValue, 0);                                             \
  }                                                                                                                \
  template <typename T, bool isSetMask = true>                                                                     \
  __aicore__ inline void NAME(const LocalTensor<T>& dst, const LocalTensor<T>& src, const T& scalarValue,           \
                              uint64_t mask, const uint8_t repeatTime, const UnaryRepeatParams& p) {               \
    auto d = ascendc_sim_detail::Opnd(dst, p.dstBlkStride, p.dstRepStride),                                        \
         a = ascendc_sim_detail::Opnd(src, p.srcBlkStride, p.srcRepStride);                                        \
    ascendc_sim::rt::Vec(ascendc_sim::VecOp::NAME, #NAME, ascendc_sim_detail::LenShape(mask, repeatTime),          \
                         !isSetMask, d, &a, nullptr, &scalarValue, 0);                                             \
  }

ASCENDC_SIM_SCALAR_OP(Adds)
ASCENDC_SIM_SCALAR_OP(Muls)
ASCENDC_SIM_SCALAR_OP(Maxs)
ASCENDC_SIM_SCALAR_OP(Mins)
#undef ASCENDC_SIM_SCALAR_OP

#define ASCENDC_SIM_UNARY_OP(NAME)                                                                                 \
  template <typename T, bool isSetMask = true>                                                                     \
  __aicore__ inline void NAME(const LocalTensor<T>& dst, const LocalTensor<T>& src, const int32_t& count) {         \
    auto d = ascendc_sim_detail::Opnd(dst, 1, 8), a = ascendc_sim_detail::Opnd(src, 1, 8);                         \
    ascendc_sim::rt::Vec(ascendc_sim::VecOp::NAME, #NAME, ascendc_sim_detail::CountShape(count), !isSetMask, d,    \
                         &a, nullptr, nullptr, 0);                                                                 \
  }                                                                                                                \
  template <typename T, bool isSetMask = true>                                                                     \
  __aicore__ inline void NAME(const LocalTensor<T>& dst, const LocalTensor<T>& src, const uint64_t mask[],          \
                              const uint8_t repeatTime, const UnaryRepeatParams& p) {                              \
    auto d = ascendc_sim_detail::Opnd(dst, p.dstBlkStride, p.dstRepStride),                                        \
         a = ascendc_sim_detail::Opnd(src, p.srcBlkStride, p.srcRepStride);                                        \
    ascendc_sim::rt::Vec(ascendc_sim::VecOp::NAME, #NAME, ascendc_sim_detail::BitsShape(mask, repeatTime),         \
                         !isSetMask, d, &a, nullptr, nullptr, 0);                                                  \
  }                                                                                                                \
  template <typename T, bool isSetMask = true>                                                                     \
  __aicore__ inline void NAME(const LocalTensor<T>& dst, const LocalTensor<T>& src, uint64_t mask,                 \
                              const uint8_t repeatTime, const UnaryRepeatParams& p) {                              \
    auto d = ascendc_sim_detail::Opnd(dst, p.dstBlkStride, p.dstRepStride),                                        \
         a = ascendc_sim_detail::Opnd(src, p.srcBlkStride, p.srcRepStride);                                        \
    ascendc_sim::rt::Vec(ascendc_sim::VecOp::NAME, #NAME, ascendc_sim_detail::LenShape(mask, repeatTime),          \
                         !isSetMask, d, &a, nullptr, nullptr, 0);                                                  \
  }

ASCENDC_SIM_UNARY_OP(Abs)
ASCENDC_SIM_UNARY_OP(Relu)
ASCENDC_SIM_UNARY_OP(Sqrt)
#undef ASCENDC_SIM_UNARY_OP

template <typename T, bool isSetMask = true>
__aicore__ inline void Duplicate(const LocalTensor<T>& dst, const T& scalarValue, const int32_t& count) {
  auto d = ascendc_sim_detail::Opnd(dst, 1, 8);
  ascendc_sim::rt::Vec(ascendc_sim::VecOp::Duplicate, "Duplicate", ascendc_sim_detail::CountShape(count), !isSetMask, d,
                       nullptr, nullptr, &scalarValue, 0);
}
template <typename T, bool isSetMask = true>
__aicore__ inline void Duplicate(const LocalTensor<T>& dst, const T& scalarValue, const uint64_t mask[],
                                 const uint8_t repeatTime, const uint16_t dstBlockStride, const uint8_t dstRepeatStride) {
  auto d = ascendc_sim_detail::Opnd(dst, dstBlockStride, dstRepeatStride);
  ascendc_sim::rt::Vec(ascendc_sim::VecOp::Duplicate, "Duplicate", ascendc_sim_detail::BitsShape(mask, repeatTime),
                       !isSetMask, d, nullptr, nullptr, &scalarValue, 0);
}
template <typename T, bool isSetMask = true>
__aicore__ inline void Duplicate(const LocalTensor<T>& dst, const T& scalarValue, uint64_t mask,
                                 const uint8_t repeatTime, const uint16_t dstBlockStride, const uint8_t dstRepeatStride) {
  auto d = ascendc_sim_detail::Opnd(dst, dstBlockStride, dstRepeatStride);
  ascendc_sim::rt::Vec(ascendc_sim::VecOp::Duplicate, "Duplicate", ascendc_sim_detail::LenShape(mask, repeatTime),
                       !isSetMask, d, nullptr, nullptr, &scalarValue, 0);
}

// Gather, tensor front-n form (the mask / repeat forms are not emulated): dst[i] = the element of src at
// byte srcBaseAddr + srcOffset[i] (offsets in bytes, relative to src's start), i < count.
template <typename T>
__aicore__ inline void Gather(const LocalTensor<T>& dst, const LocalTensor<T>& src, const LocalTensor<uint32_t>& srcOffset,
                              const uint32_t srcBaseAddr, const uint32_t count) {
  auto d = ascendc_sim_detail::Opnd(dst, 1, 8), a = ascendc_sim_detail::Opnd(src, 1, 8),
       o = ascendc_sim_detail::Opnd(srcOffset, 1, 8);
  ascendc_sim::rt::Gather(d, a, o, srcBaseAddr, count);
}

template <typename T, typename U, bool isSetMask = true>
__aicore__ inline void Cast(const LocalTensor<T>& dst, const LocalTensor<U>& src, const RoundMode& roundMode,
                            const uint32_t count) {
  auto d = ascendc_sim_detail::Opnd(dst, 1, 8), a = ascendc_sim_detail::Opnd(src, 1, 8);
  ascendc_sim::rt::Vec(ascendc_sim::VecOp::Cast, "Cast", ascendc_sim_detail::CountShape(count), !isSetMask, d, &a,
                       nullptr, nullptr, static_cast<int>(roundMode));
}
template <typename T, typename U, bool isSetMask = true>
__aicore__ inline void Cast(const LocalTensor<T>& dst, const LocalTensor<U>& src, const RoundMode& roundMode,
                            const uint64_t mask[], const uint8_t repeatTime, const UnaryRepeatParams& p) {
  auto d = ascendc_sim_detail::Opnd(dst, p.dstBlkStride, p.dstRepStride),
       a = ascendc_sim_detail::Opnd(src, p.srcBlkStride, p.srcRepStride);
  ascendc_sim::rt::Vec(ascendc_sim::VecOp::Cast, "Cast", ascendc_sim_detail::BitsShape(mask, repeatTime), !isSetMask,
                       d, &a, nullptr, nullptr, static_cast<int>(roundMode));
}
template <typename T, typename U, bool isSetMask = true>
__aicore__ inline void Cast(const LocalTensor<T>& dst, const LocalTensor<U>& src, const RoundMode& roundMode,
                            const uint64_t mask, const uint8_t repeatTime, const UnaryRepeatParams& p) {
  auto d = ascendc_sim_detail::Opnd(dst, p.dstBlkStride, p.dstRepStride),
       a = ascendc_sim_detail::Opnd(src, p.srcBlkStride, p.srcRepStride);
  ascendc_sim::rt::Vec(ascendc_sim::VecOp::Cast, "Cast", ascendc_sim_detail::LenShape(mask, repeatTime), !isSetMask,
                       d, &a, nullptr, nullptr, static_cast<int>(roundMode));
}

// mask registers (isSetMask = false forms)
__aicore__ inline void SetMaskCount() { ascendc_sim::rt::SetMaskMode(true); }
__aicore__ inline void SetMaskNorm() { ascendc_sim::rt::SetMaskMode(false); }
template <typename T, MaskMode mode = MaskMode::NORMAL>
__aicore__ inline void SetVectorMask(const uint64_t maskHigh, const uint64_t maskLow) {
  ascendc_sim::rt::SetVectorMask(maskHigh, maskLow, DTOf<T>::value);
}
template <typename T, MaskMode mode = MaskMode::NORMAL>
__aicore__ inline void SetVectorMask(int32_t len) {
  ascendc_sim::rt::SetVectorMaskLen(len, DTOf<T>::value);
}
__aicore__ inline void ResetMask() { ascendc_sim::rt::ResetMask(); }

__aicore__ inline TPipe* GetTPipePtr() { return static_cast<TPipe*>(ascendc_sim::rt::CurrentPipe()); }

}  // namespace AscendC

// ----------------------------------------------------------------------------- tiling data / keys
#define TILING_KEY_IS(k) (::ascendc_sim::rt::TilingKey() == static_cast<uint64_t>(k))
#define ASCENDC_SIM_STR_(x) #x
#define ASCENDC_SIM_STR(x) ASCENDC_SIM_STR_(x)
#define ASCENDC_SIM_TILING_TYPE_OF_(op) ASCENDC_SIM_TILING_TYPE(op)
// GET_TILING_DATA needs the op type: the generated wrapper defines ASCENDC_SIM_OP_TYPE, and
// register/tilingdata_base.h (kernel mode) defines ASCENDC_SIM_TILING_TYPE(op).
#define GET_TILING_DATA(var, tiling)                                          \
  ASCENDC_SIM_TILING_TYPE_OF_(ASCENDC_SIM_OP_TYPE) var;                       \
  ::ascendc_sim::rt::CopyTiling(&var, reinterpret_cast<const uint8_t*>(tiling), sizeof(var), \
                                ASCENDC_SIM_STR(ASCENDC_SIM_OP_TYPE) " tiling data")
#define GET_TILING_DATA_WITH_STRUCT(type, var, tiling) \
  type var;                                            \
  ::ascendc_sim::rt::CopyTiling(&var, reinterpret_cast<const uint8_t*>(tiling), sizeof(type), #type)
#define GET_TILING_DATA_PTR_WITH_STRUCT(type, ptr, tiling) \
  const type* ptr = reinterpret_cast<const type*>(        \
      ::ascendc_sim::rt::TilingPtr(reinterpret_cast<const uint8_t*>(tiling), sizeof(type), #type))
#define GET_TILING_DATA_MEMBER(type, member, var, tiling)                                                          \
  decltype(type::member) var;                                                                                      \
  {                                                                                                                \
    type ascendc_sim_whole_;                                                                                       \
    ::ascendc_sim::rt::CopyTiling(&ascendc_sim_whole_, reinterpret_cast<const uint8_t*>(tiling), sizeof(type), #type); \
    var = ascendc_sim_whole_.member;                                                                               \
  }
#define REGISTER_TILING_DEFAULT(type)
#define REGISTER_TILING_FOR_TILINGKEY(cond, type)
#define REGISTER_NONE_TILING

// ----------------------------------------------------------------------------- kernel registration
namespace ascendc_sim {
template <typename... A, size_t... I>
inline void InvokeKernelImpl(void (*fn)(A...), void** args, std::index_sequence<I...>) {
  (void)args;
  fn(reinterpret_cast<A>(args[I])...);
}
template <typename... A>
inline void InvokeKernel(void* fn, void** args, int) {
  InvokeKernelImpl(reinterpret_cast<void (*)(A...)>(fn), args, std::index_sequence_for<A...>{});
}
template <typename... A>
struct KernelRegistrar {
  KernelRegistrar(const char* name, void (*fn)(A...), const char* where) {
    rt::RegisterKernel(name, reinterpret_cast<void*>(fn), static_cast<int>(sizeof...(A)), &InvokeKernel<A...>, where);
  }
};
}  // namespace ascendc_sim
#define ASCENDC_SIM_REGISTER_KERNEL(name, fn) \
  static ::ascendc_sim::KernelRegistrar ascendc_sim_kernel_registrar_##name(#name, &fn, __FILE__);

#endif  // ASCENDC_SIM_KERNEL_API_H_
