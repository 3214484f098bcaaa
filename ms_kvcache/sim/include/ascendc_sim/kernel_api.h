// AscendC CPU emulation: the kernel-side AscendC API subset (namespace AscendC) - CANN's kernel_operator.h.
//
// Each API keeps CANN's declaration for the arch being compiled (__NPU_ARCH__, see ascendc_sim/arch.h)
// and forwards to the runtime (ascendc_sim/rt.h), which moves the bytes and enforces the documented
// hardware rules. Include it through "kernel_operator.h".
#ifndef ASCENDC_SIM_KERNEL_API_H_
#define ASCENDC_SIM_KERNEL_API_H_

#include "ascendc_sim/kernel_tensor.h"

ASCENDC_SIM_BEGIN_NAMESPACE

// ----------------------------------------------------------------------------- pipe, queues, buffers
class TPipe;

namespace ascendc_sim_detail {
// CANN's GetBufferLogicPos (kernel_event.h): TQue<pos> is the TQueBind of these two positions, so
// TQue<VECIN> is a TQueBind<GM, VECIN> and TQue<VECOUT> a TQueBind<VECOUT, GM>; VECCALC / GM / MAX
// have no queue (MAX).
constexpr TPosition QueLogicPos(TPosition pos, bool isSrc) {
  return pos == TPosition::A1    ? (isSrc ? TPosition::GM : TPosition::A1)
       : pos == TPosition::B1    ? (isSrc ? TPosition::GM : TPosition::B1)
       : pos == TPosition::C1    ? (isSrc ? TPosition::GM : TPosition::C1)
       : pos == TPosition::A2    ? (isSrc ? TPosition::A1 : TPosition::A2)
       : pos == TPosition::B2    ? (isSrc ? TPosition::B1 : TPosition::B2)
       : pos == TPosition::C2    ? (isSrc ? TPosition::C1 : TPosition::C2)
       : pos == TPosition::CO1   ? (isSrc ? TPosition::CO1 : TPosition::CO2)
       : pos == TPosition::CO2   ? (isSrc ? TPosition::CO2 : TPosition::GM)
       : pos == TPosition::VECIN ? (isSrc ? TPosition::GM : TPosition::VECIN)
       : pos == TPosition::VECOUT ? (isSrc ? TPosition::VECOUT : TPosition::GM)
       : pos == TPosition::SPM   ? (isSrc ? TPosition::VECOUT : TPosition::GM)
       : pos == TPosition::C2PIPE2GM ? (isSrc ? TPosition::B1 : TPosition::C2PIPE2GM)
                                 : TPosition::MAX;
}
// CANN's GetPosition(src, dst): the position a queue's buffers (and their LocalTensors) belong to.
constexpr TPosition QueBufferPos(TPosition src, TPosition dst) {
#if __NPU_ARCH__ == 2002
  return (dst == TPosition::GM || (dst == TPosition::CO2 && src == TPosition::CO1)) ? src : dst;
#else
  return (dst == TPosition::GM || dst == TPosition::CO2) ? src : dst;
#endif
}
constexpr bool IsUserQuePos(TPosition p) {
  return p == TPosition::GM || p == TPosition::VECIN || p == TPosition::VECOUT || p == TPosition::VECCALC;
}
}  // namespace ascendc_sim_detail

template <TPosition src, TPosition dst, int32_t depth, auto mask = 0>
class TQueBind {
 public:
  __aicore__ inline TQueBind() {}
  TQueBind(const TQueBind&) = delete;
  TQueBind& operator=(const TQueBind&) = delete;
  ~TQueBind() { ascendc_sim::rt::QueDestroy(h_, gen_); }

  template <typename T>
  __aicore__ inline LocalTensor<T> AllocTensor(ASCENDC_SIM_LOC_PARAM) {
    ASCENDC_SIM_AT;
    static_assert((depth != 0), "TQue::AllocTensor<T>(): a queue of depth 0 has only the in-place form AllocTensor(LocalTensor<T>&)");
    return Alloc<T>();
  }
  template <typename T>
  __aicore__ inline void AllocTensor(LocalTensor<T>& t, ASCENDC_SIM_LOC_PARAM) {
    ASCENDC_SIM_AT;
    static_assert((depth == 0), "TQue::AllocTensor(LocalTensor<T>&): the in-place form is for a queue of depth 0 only");
    t = Alloc<T>();
  }
  // non-const reference, as in CANN's kernel_tpipe.h
  template <typename T>
  __aicore__ inline void FreeTensor(LocalTensor<T>& t, ASCENDC_SIM_LOC_PARAM) {
    ASCENDC_SIM_AT;
    ascendc_sim::rt::QueFree(h_, gen_, ascendc_sim_detail::Ub(t));
  }
  template <typename T>
  __aicore__ inline bool EnQue(const LocalTensor<T>& t, ASCENDC_SIM_LOC_PARAM) {
    ASCENDC_SIM_AT;
    ascendc_sim::rt::QueEnQue(h_, gen_, ascendc_sim_detail::Ub(t), ascendc_sim::Pos::MAX, ascendc_sim::Pos::MAX);
    return true;
  }
  template <TPosition srcUserPos, TPosition dstUserPos, typename T>
  __aicore__ inline bool EnQue(const LocalTensor<T>& t, ASCENDC_SIM_LOC_PARAM) {
    ASCENDC_SIM_AT;
    static_assert((depth != 0), "TQue::EnQue<srcUserPos, dstUserPos>(): not available on a queue of depth 0");
    static_assert(ascendc_sim_detail::IsUserQuePos(srcUserPos),
                  "TQue::EnQue<srcUserPos, ...>(): srcUserPos must be GM, VECIN, VECOUT or VECCALC");
    static_assert(ascendc_sim_detail::IsUserQuePos(dstUserPos),
                  "TQue::EnQue<..., dstUserPos>(): dstUserPos must be GM, VECIN, VECOUT or VECCALC");
    static_assert(!(srcUserPos == TPosition::GM && dstUserPos == TPosition::GM),
                  "TQue::EnQue<GM, GM>(): source and destination cannot both be GM");
    ascendc_sim::rt::QueEnQue(h_, gen_, ascendc_sim_detail::Ub(t), ascendc_sim_detail::P(srcUserPos),
                              ascendc_sim_detail::P(dstUserPos));
    return true;
  }
  template <typename T>
  __aicore__ inline void DeQue(LocalTensor<T>& t, ASCENDC_SIM_LOC_PARAM) {
    ASCENDC_SIM_AT;
    static_assert((depth == 0), "TQue::DeQue(LocalTensor<T>&): the in-place form is for a queue of depth 0 only");
    t = Take<T>(ascendc_sim::Pos::MAX, ascendc_sim::Pos::MAX);
  }
  template <typename T>
  __aicore__ inline LocalTensor<T> DeQue(ASCENDC_SIM_LOC_PARAM) {
    ASCENDC_SIM_AT;
    static_assert((depth != 0), "TQue::DeQue<T>(): a queue of depth 0 has only the in-place form DeQue(LocalTensor<T>&)");
    return Take<T>(ascendc_sim::Pos::MAX, ascendc_sim::Pos::MAX);
  }
  template <TPosition srcUserPos, TPosition dstUserPos, typename T>
  __aicore__ inline LocalTensor<T> DeQue(ASCENDC_SIM_LOC_PARAM) {
    ASCENDC_SIM_AT;
    static_assert((depth != 0), "TQue::DeQue<T>(): a queue of depth 0 has only the in-place form DeQue(LocalTensor<T>&)");
    static_assert(ascendc_sim_detail::IsUserQuePos(srcUserPos),
                  "TQue::DeQue<srcUserPos, ...>(): srcUserPos must be GM, VECIN, VECOUT or VECCALC");
    static_assert(ascendc_sim_detail::IsUserQuePos(dstUserPos),
                  "TQue::DeQue<..., dstUserPos>(): dstUserPos must be GM, VECIN, VECOUT or VECCALC");
    static_assert(!(srcUserPos == TPosition::GM && dstUserPos == TPosition::GM),
                  "TQue::DeQue<GM, GM>(): source and destination cannot both be GM");
    return Take<T>(ascendc_sim_detail::P(srcUserPos), ascendc_sim_detail::P(dstUserPos));
  }
  __aicore__ inline bool VacantInQue(ASCENDC_SIM_LOC_PARAM) {
    ASCENDC_SIM_AT;
    static_assert((depth != 0), "TQue::VacantInQue(): not available on a queue of depth 0");
    return ascendc_sim::rt::QueInfo(h_, gen_, 1) != 0;
  }
  __aicore__ inline bool HasTensorInQue(ASCENDC_SIM_LOC_PARAM) {
    ASCENDC_SIM_AT;
    static_assert((depth != 0), "TQue::HasTensorInQue(): not available on a queue of depth 0");
    return ascendc_sim::rt::QueInfo(h_, gen_, 0) > 0;
  }
  __aicore__ inline int32_t GetTensorCountInQue(ASCENDC_SIM_LOC_PARAM) {
    ASCENDC_SIM_AT;
    static_assert((depth != 0), "TQue::GetTensorCountInQue(): not available on a queue of depth 0");
    return ascendc_sim::rt::QueInfo(h_, gen_, 0);
  }
  __aicore__ inline bool HasIdleBuffer(ASCENDC_SIM_LOC_PARAM) {
    ASCENDC_SIM_AT;
    static_assert((depth != 0), "TQue::HasIdleBuffer(): not available on a queue of depth 0");
    return ascendc_sim::rt::QueInfo(h_, gen_, 2) > 0;
  }
  __aicore__ inline void FreeAllEvent(ASCENDC_SIM_LOC_PARAM) {
    ASCENDC_SIM_AT;
    static_assert((depth != 0), "TQue::FreeAllEvent(): not available on a queue of depth 0");
    ascendc_sim::rt::QueFreeAllEvent(h_, gen_);
  }

  // called by TPipe::InitBuffer
  void sim_init(uint32_t num, uint32_t len) {
    ascendc_sim::rt::PipeInitQue(&h_, &gen_, ascendc_sim_detail::P(src), ascendc_sim_detail::P(dst), depth, num, len);
  }

 private:
  static constexpr TPosition kBufPos = ascendc_sim_detail::QueBufferPos(src, dst);
  template <typename T>
  LocalTensor<T> Alloc() {
    uint32_t len = 0;
    ascendc_sim::UbRef ub = ascendc_sim::rt::QueAlloc(h_, gen_, &len);
    ascendc_sim::rt::RequireDtype(DTOf<T>::value, "AllocTensor");
    return ascendc_sim_detail::MakeLocal<T>(ub, len / static_cast<uint32_t>(sizeof(T)), kBufPos);
  }
  template <typename T>
  LocalTensor<T> Take(ascendc_sim::Pos su, ascendc_sim::Pos du) {
    uint32_t len = 0;
    ascendc_sim::UbRef ub = ascendc_sim::rt::QueDeQue(h_, gen_, &len, su, du);
    return ascendc_sim_detail::MakeLocal<T>(ub, len / static_cast<uint32_t>(sizeof(T)), kBufPos);
  }
  int32_t h_ = -1;
  uint32_t gen_ = 0;
};

// As in CANN: TQue<pos> derives from TQueBind<GetBufferLogicPos(pos, true), GetBufferLogicPos(pos, false)>.
template <TPosition pos, int32_t depth, auto mask = 0>
class TQue : public TQueBind<ascendc_sim_detail::QueLogicPos(pos, true), ascendc_sim_detail::QueLogicPos(pos, false),
                             depth, mask> {
  static_assert(pos != TPosition::VECCALC,
                "TQue<TPosition::VECCALC, ...> does not compile against the official headers (GetBufferLogicPos "
                "asserts pos != VECCALC): VECCALC has no queue; use TBuf<TPosition::VECCALC> for work buffers");
  static_assert(pos != TPosition::GM && pos != TPosition::MAX,
                "TQue<TPosition::GM / MAX, ...>: not a queue position (GetBufferLogicPos asserts it)");

 public:
  __aicore__ inline TQue() = default;
};

template <TPosition pos = TPosition::LCM>
class TBuf {
 public:
  __aicore__ inline TBuf() {}
  TBuf(const TBuf&) = delete;
  TBuf& operator=(const TBuf&) = delete;
  template <typename T>
  __aicore__ inline LocalTensor<T> Get(ASCENDC_SIM_LOC_PARAM) {
    ASCENDC_SIM_AT;
    uint32_t len = 0;
    ascendc_sim::UbRef ub = ascendc_sim::rt::TBufGet(h_, gen_, &len);
    ascendc_sim::rt::RequireDtype(DTOf<T>::value, "TBuf::Get");
    return ascendc_sim_detail::MakeLocal<T>(ub, len / static_cast<uint32_t>(sizeof(T)), pos);
  }
  // CANN's CPU-debug TBuf::Get(len) asserts len > 0 and len * sizeof(T) a multiple of 32 bytes (TBUF_LEN)
  template <typename T>
  __aicore__ inline LocalTensor<T> Get(uint32_t len, ASCENDC_SIM_LOC_PARAM) {
    ASCENDC_SIM_AT;
    uint32_t bytes = 0;
    ascendc_sim::UbRef ub = ascendc_sim::rt::TBufGet(h_, gen_, &bytes);
    ascendc_sim::rt::RequireDtype(DTOf<T>::value, "TBuf::Get");
    const uint64_t want = static_cast<uint64_t>(len) * sizeof(T);
    if (len == 0 || want % 32 != 0)
      ascendc_sim::rt::Fail("TBUF_LEN",
                            "TBuf::Get<%s>(len=%u): len * sizeof(%s) = %llu B must be > 0 and a multiple of 32 B",
                            ascendc_sim::rt::DTName(DTOf<T>::value), len, ascendc_sim::rt::DTName(DTOf<T>::value),
                            static_cast<unsigned long long>(want));
    if (want > bytes)
      ascendc_sim::rt::Fail("UB_OUT_OF_BUFFER", "TBuf::Get<%s>(%u): %llu bytes requested, the TBuf has %u bytes",
                            ascendc_sim::rt::DTName(DTOf<T>::value), len, static_cast<unsigned long long>(want), bytes);
    return ascendc_sim_detail::MakeLocal<T>(ub, len, pos);
  }
  // The documented rule: bufOffset is 32-byte aligned (TBUF_OFFSET); size * sizeof(T) + bufOffset fits the TBuf.
  template <typename T>
  __aicore__ inline LocalTensor<T> GetWithOffset(uint32_t size, uint32_t bufOffset, ASCENDC_SIM_LOC_PARAM) {
    ASCENDC_SIM_AT;
    uint32_t bytes = 0;
    ascendc_sim::UbRef ub = ascendc_sim::rt::TBufGet(h_, gen_, &bytes);
    ascendc_sim::rt::RequireDtype(DTOf<T>::value, "TBuf::GetWithOffset");
    if (bufOffset % 32 != 0)
      ascendc_sim::rt::Fail("TBUF_OFFSET",
                            "TBuf::GetWithOffset<%s>(size=%u, bufOffset=%u): bufOffset must be a multiple of 32 B",
                            ascendc_sim::rt::DTName(DTOf<T>::value), size, bufOffset);
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
  __aicore__ TPipe(ASCENDC_SIM_LOC_PARAM) {
    ASCENDC_SIM_AT;
    ascendc_sim::rt::PipeCreate(this);
  }
  ~TPipe() { ascendc_sim::rt::PipeDestroy(this); }
  TPipe(const TPipe&) = delete;
  TPipe& operator=(const TPipe&) = delete;
  template <class Q>
  __aicore__ inline bool InitBuffer(Q& que, uint8_t num, uint32_t len, ASCENDC_SIM_LOC_PARAM) {
    ASCENDC_SIM_AT;
    que.sim_init(num, len);
    return true;
  }
  template <TPosition bufPos>
  __aicore__ inline bool InitBuffer(TBuf<bufPos>& buf, uint32_t len, ASCENDC_SIM_LOC_PARAM) {
    ASCENDC_SIM_AT;
    buf.sim_init(len);
    return true;
  }
  __aicore__ inline void Init() {}
  __aicore__ inline void Reset(ASCENDC_SIM_LOC_PARAM) {
    ASCENDC_SIM_AT;
    ascendc_sim::rt::PipeReset(this);
  }
  __aicore__ inline void Destroy(ASCENDC_SIM_LOC_PARAM) {
    ASCENDC_SIM_AT;
    ascendc_sim::rt::PipeReset(this);
  }
  template <HardEvent evt>
  __aicore__ inline TEventID FetchEventID(ASCENDC_SIM_LOC_PARAM) {
    ASCENDC_SIM_AT;
    return static_cast<TEventID>(ascendc_sim::rt::FetchEventID(static_cast<int>(evt)));
  }
  __aicore__ inline TEventID FetchEventID(HardEvent evt, ASCENDC_SIM_LOC_PARAM) {
    ASCENDC_SIM_AT;
    return static_cast<TEventID>(ascendc_sim::rt::FetchEventID(static_cast<int>(evt)));
  }
  template <HardEvent evt>
  __aicore__ inline TEventID AllocEventID(ASCENDC_SIM_LOC_PARAM) {
    ASCENDC_SIM_AT;
    return static_cast<TEventID>(ascendc_sim::rt::AllocEventID(static_cast<int>(evt)));
  }
  template <HardEvent evt>
  __aicore__ inline void ReleaseEventID(TEventID id, ASCENDC_SIM_LOC_PARAM) {
    ASCENDC_SIM_AT;
    ascendc_sim::rt::ReleaseEventID(static_cast<int>(evt), id);
  }
};

// ----------------------------------------------------------------------------- core / tiling helpers
__aicore__ inline int64_t GetBlockIdx() { return ascendc_sim::rt::BlockIdx(); }
__aicore__ inline int64_t GetBlockNum() { return ascendc_sim::rt::BlockNum(); }
__aicore__ inline int64_t GetSubBlockIdx() { return 0; }
__aicore__ inline int64_t GetSubBlockNum() { return 1; }
__aicore__ inline int64_t GetTaskRation() { return 1; }
__aicore__ inline GM_ADDR GetUserWorkspace(GM_ADDR workspace, ASCENDC_SIM_LOC_PARAM) {
  ASCENDC_SIM_AT;
  return ascendc_sim::rt::UserWorkspace(workspace);
}
__aicore__ inline GM_ADDR GetSysWorkSpacePtr() { return ascendc_sim::rt::SysWorkspace(); }
[[deprecated("SetSysWorkspace is deprecated in CANN (scheduled for removal): the framework sets the system workspace")]]
__aicore__ inline void SetSysWorkspace(GM_ADDR) {}
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
__aicore__ inline void PipeBarrier(ASCENDC_SIM_LOC_PARAM) {
  ASCENDC_SIM_AT;
  ascendc_sim::rt::Barrier(static_cast<ascendc_sim::Pipe>(pipe));
}
template <HardEvent event>
__aicore__ inline void SetFlag(int32_t eventID, ASCENDC_SIM_LOC_PARAM) {
  ASCENDC_SIM_AT;
  ascendc_sim::rt::SetFlag(static_cast<int>(event), eventID);
}
template <HardEvent event>
__aicore__ inline void WaitFlag(int32_t eventID, ASCENDC_SIM_LOC_PARAM) {
  ASCENDC_SIM_AT;
  ascendc_sim::rt::WaitFlag(static_cast<int>(event), eventID);
}
template <pipe_t src, pipe_t dst>
class TQueSync {
 public:
  __aicore__ inline void SetFlag(TEventID id, ASCENDC_SIM_LOC_PARAM) {
    ASCENDC_SIM_AT;
    ascendc_sim::rt::SetFlag((static_cast<int>(src) << 4) | static_cast<int>(dst), id);
  }
  __aicore__ inline void WaitFlag(TEventID id, ASCENDC_SIM_LOC_PARAM) {
    ASCENDC_SIM_AT;
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
__aicore__ inline void DataCopy(const LocalTensor<T>& dst, const GlobalTensor<T>& src, const uint32_t count, ASCENDC_SIM_LOC_PARAM) {
  ASCENDC_SIM_AT;
  ascendc_sim::rt::CopyGmToUb(ascendc_sim_detail::Ub(dst), src.sim_region(),
                              reinterpret_cast<const uint8_t*>(src.sim_ptr()), DTOf<T>::value, ascendc_sim::kCopyCount,
                              ascendc_sim_detail::Raw(1, static_cast<uint64_t>(count) * sizeof(T), 0, 0), nullptr,
                              "DataCopy(GM->UB, count)");
}
template <typename T>
__aicore__ inline void DataCopy(const GlobalTensor<T>& dst, const LocalTensor<T>& src, const uint32_t count, ASCENDC_SIM_LOC_PARAM) {
  ASCENDC_SIM_AT;
  ascendc_sim::rt::CopyUbToGm(dst.sim_region(), reinterpret_cast<uint8_t*>(dst.sim_ptr()), ascendc_sim_detail::Ub(src),
                              DTOf<T>::value, ascendc_sim::kCopyCount,
                              ascendc_sim_detail::Raw(1, static_cast<uint64_t>(count) * sizeof(T), 0, 0),
                              "DataCopy(UB->GM, count)");
}
template <typename T>
__aicore__ inline void DataCopy(const LocalTensor<T>& dst, const LocalTensor<T>& src, const uint32_t count, ASCENDC_SIM_LOC_PARAM) {
  ASCENDC_SIM_AT;
  ascendc_sim::rt::CopyUbToUb(ascendc_sim_detail::Ub(dst), ascendc_sim_detail::Ub(src), DTOf<T>::value,
                              ascendc_sim::kCopyCount,
                              ascendc_sim_detail::Raw(1, static_cast<uint64_t>(count) * sizeof(T), 0, 0),
                              "DataCopy(UB->UB, count)");
}
template <typename T>
__aicore__ inline void DataCopy(const LocalTensor<T>& dst, const GlobalTensor<T>& src, const DataCopyParams& p, ASCENDC_SIM_LOC_PARAM) {
  ASCENDC_SIM_AT;
  ascendc_sim::rt::CopyGmToUb(ascendc_sim_detail::Ub(dst), src.sim_region(),
                              reinterpret_cast<const uint8_t*>(src.sim_ptr()), DTOf<T>::value,
                              ascendc_sim::kCopyParams,
                              ascendc_sim_detail::Raw(p.blockCount, p.blockLen, p.srcStride, p.dstStride), nullptr,
                              "DataCopy(GM->UB, DataCopyParams)");
}
template <typename T>
__aicore__ inline void DataCopy(const GlobalTensor<T>& dst, const LocalTensor<T>& src, const DataCopyParams& p, ASCENDC_SIM_LOC_PARAM) {
  ASCENDC_SIM_AT;
  ascendc_sim::rt::CopyUbToGm(dst.sim_region(), reinterpret_cast<uint8_t*>(dst.sim_ptr()), ascendc_sim_detail::Ub(src),
                              DTOf<T>::value, ascendc_sim::kCopyParams,
                              ascendc_sim_detail::Raw(p.blockCount, p.blockLen, p.srcStride, p.dstStride),
                              "DataCopy(UB->GM, DataCopyParams)");
}
template <typename T>
__aicore__ inline void DataCopy(const LocalTensor<T>& dst, const LocalTensor<T>& src, const DataCopyParams& p, ASCENDC_SIM_LOC_PARAM) {
  ASCENDC_SIM_AT;
  ascendc_sim::rt::CopyUbToUb(ascendc_sim_detail::Ub(dst), ascendc_sim_detail::Ub(src), DTOf<T>::value,
                              ascendc_sim::kCopyParams,
                              ascendc_sim_detail::Raw(p.blockCount, p.blockLen, p.srcStride, p.dstStride),
                              "DataCopy(UB->UB, DataCopyParams)");
}

// DataCopyPad: CANN marks it "an unsupported API on current device" on the Atlas inference series
// (__NPU_ARCH__ 2002, Ascend310P): there it does not compile in the emulation. The PaddingMode
// template parameter exists for arch 3510 / 5102 only.
#if __NPU_ARCH__ == 2002
#define ASCENDC_SIM_NO_DATACOPYPAD(T)                                                                              \
  static_assert(AscendcSimNever<T>::value,                                                                         \
                "DataCopyPad is an unsupported API on the Atlas inference series (Ascend310P, __NPU_ARCH__ 2002): " \
                "CANN marks it deprecated-unsupported there; guard the call (op_kernel/mskv_arch.h: MSKV_HAS_BF16_AND_PAD)")
#else
#define ASCENDC_SIM_NO_DATACOPYPAD(T) static_assert(true, "")
#endif
template <typename T>
__aicore__ inline void DataCopyPad(const LocalTensor<T>& dst, const GlobalTensor<T>& src, const DataCopyExtParams& p,
                                   const DataCopyPadExtParams<T>& pad, ASCENDC_SIM_LOC_PARAM) {
  ASCENDC_SIM_AT;
  ASCENDC_SIM_NO_DATACOPYPAD(T);
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
template <typename T>
__aicore__ inline void DataCopyPad(const GlobalTensor<T>& dst, const LocalTensor<T>& src, const DataCopyExtParams& p, ASCENDC_SIM_LOC_PARAM) {
  ASCENDC_SIM_AT;
  ASCENDC_SIM_NO_DATACOPYPAD(T);
  ascendc_sim::rt::CopyUbToGm(dst.sim_region(), reinterpret_cast<uint8_t*>(dst.sim_ptr()), ascendc_sim_detail::Ub(src),
                              DTOf<T>::value, ascendc_sim::kCopyPadExt,
                              ascendc_sim_detail::Raw(p.blockCount, p.blockLen, p.srcStride, p.dstStride),
                              "DataCopyPad(UB->GM, DataCopyExtParams)");
}
template <typename T>
__aicore__ inline void DataCopyPad(const LocalTensor<T>& dst, const GlobalTensor<T>& src, const DataCopyParams& p,
                                   const DataCopyPadParams& pad, ASCENDC_SIM_LOC_PARAM) {
  ASCENDC_SIM_AT;
  ASCENDC_SIM_NO_DATACOPYPAD(T);
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
__aicore__ inline void DataCopyPad(const GlobalTensor<T>& dst, const LocalTensor<T>& src, const DataCopyParams& p, ASCENDC_SIM_LOC_PARAM) {
  ASCENDC_SIM_AT;
  ASCENDC_SIM_NO_DATACOPYPAD(T);
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
                              const int32_t& count, ASCENDC_SIM_LOC_PARAM) { ASCENDC_SIM_AT;                             \
    auto d = ascendc_sim_detail::Opnd(dst, 1, 8), a = ascendc_sim_detail::Opnd(src0, 1, 8),                        \
         b = ascendc_sim_detail::Opnd(src1, 1, 8);                                                                 \
    ascendc_sim::rt::Vec(ascendc_sim::VecOp::NAME, #NAME, ascendc_sim_detail::CountShape(count), !isSetMask, d,    \
                         &a, &b, nullptr, 0);                                                                      \
  }                                                                                                                \
  template <typename T, bool isSetMask = true>                                                                     \
  __aicore__ inline void NAME(const LocalTensor<T>& dst, const LocalTensor<T>& src0, const LocalTensor<T>& src1,   \
                              const uint64_t mask[], const uint8_t repeatTime, const BinaryRepeatParams& p, ASCENDC_SIM_LOC_PARAM) { ASCENDC_SIM_AT; \
    auto d = ascendc_sim_detail::Opnd(dst, p.dstBlkStride, p.dstRepStride),                                        \
         a = ascendc_sim_detail::Opnd(src0, p.src0BlkStride, p.src0RepStride),                                     \
         b = ascendc_sim_detail::Opnd(src1, p.src1BlkStride, p.src1RepStride);                                     \
    ascendc_sim::rt::Vec(ascendc_sim::VecOp::NAME, #NAME, ascendc_sim_detail::BitsShape(mask, repeatTime),         \
                         !isSetMask, d, &a, &b, nullptr, 0);                                                       \
  }                                                                                                                \
  template <typename T, bool isSetMask = true>                                                                     \
  __aicore__ inline void NAME(const LocalTensor<T>& dst, const LocalTensor<T>& src0, const LocalTensor<T>& src1,   \
                              uint64_t mask, const uint8_t repeatTime, const BinaryRepeatParams& p, ASCENDC_SIM_LOC_PARAM) { ASCENDC_SIM_AT; \
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
                              const int32_t& count, ASCENDC_SIM_LOC_PARAM) { ASCENDC_SIM_AT;                             \
    auto d = ascendc_sim_detail::Opnd(dst, 1, 8), a = ascendc_sim_detail::Opnd(src, 1, 8);                         \
    ascendc_sim::rt::Vec(ascendc_sim::VecOp::NAME, #NAME, ascendc_sim_detail::CountShape(count), !isSetMask, d,    \
                         &a, nullptr, &scalarValue, 0);                                                            \
  }                                                                                                                \
  template <typename T, bool isSetMask = true>                                                                     \
  __aicore__ inline void NAME(const LocalTensor<T>& dst, const LocalTensor<T>& src, const T& scalarValue,           \
                              const uint64_t mask[], const uint8_t repeatTime, const UnaryRepeatParams& p, ASCENDC_SIM_LOC_PARAM) { ASCENDC_SIM_AT; \
    auto d = ascendc_sim_detail::Opnd(dst, p.dstBlkStride, p.dstRepStride),                                        \
         a = ascendc_sim_detail::Opnd(src, p.srcBlkStride, p.srcRepStride);                                        \
    ascendc_sim::rt::Vec(ascendc_sim::VecOp::NAME, #NAME, ascendc_sim_detail::BitsShape(mask, repeatTime),         \
                         !isSetMask, d, &a, nullptr, &scalarValue, 0);                                             \
  }                                                                                                                \
  template <typename T, bool isSetMask = true>                                                                     \
  __aicore__ inline void NAME(const LocalTensor<T>& dst, const LocalTensor<T>& src, const T& scalarValue,           \
                              uint64_t mask, const uint8_t repeatTime, const UnaryRepeatParams& p, ASCENDC_SIM_LOC_PARAM) { ASCENDC_SIM_AT; \
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
  __aicore__ inline void NAME(const LocalTensor<T>& dst, const LocalTensor<T>& src, const int32_t& count, ASCENDC_SIM_LOC_PARAM) { ASCENDC_SIM_AT; \
    auto d = ascendc_sim_detail::Opnd(dst, 1, 8), a = ascendc_sim_detail::Opnd(src, 1, 8);                         \
    ascendc_sim::rt::Vec(ascendc_sim::VecOp::NAME, #NAME, ascendc_sim_detail::CountShape(count), !isSetMask, d,    \
                         &a, nullptr, nullptr, 0);                                                                 \
  }                                                                                                                \
  template <typename T, bool isSetMask = true>                                                                     \
  __aicore__ inline void NAME(const LocalTensor<T>& dst, const LocalTensor<T>& src, const uint64_t mask[],          \
                              const uint8_t repeatTime, const UnaryRepeatParams& p, ASCENDC_SIM_LOC_PARAM) { ASCENDC_SIM_AT; \
    auto d = ascendc_sim_detail::Opnd(dst, p.dstBlkStride, p.dstRepStride),                                        \
         a = ascendc_sim_detail::Opnd(src, p.srcBlkStride, p.srcRepStride);                                        \
    ascendc_sim::rt::Vec(ascendc_sim::VecOp::NAME, #NAME, ascendc_sim_detail::BitsShape(mask, repeatTime),         \
                         !isSetMask, d, &a, nullptr, nullptr, 0);                                                  \
  }                                                                                                                \
  template <typename T, bool isSetMask = true>                                                                     \
  __aicore__ inline void NAME(const LocalTensor<T>& dst, const LocalTensor<T>& src, uint64_t mask,                 \
                              const uint8_t repeatTime, const UnaryRepeatParams& p, ASCENDC_SIM_LOC_PARAM) { ASCENDC_SIM_AT; \
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
__aicore__ inline void Duplicate(const LocalTensor<T>& dst, const T& scalarValue, const int32_t& count, ASCENDC_SIM_LOC_PARAM) {
  ASCENDC_SIM_AT;
  auto d = ascendc_sim_detail::Opnd(dst, 1, 8);
  ascendc_sim::rt::Vec(ascendc_sim::VecOp::Duplicate, "Duplicate", ascendc_sim_detail::CountShape(count), !isSetMask, d,
                       nullptr, nullptr, &scalarValue, 0);
}
template <typename T, bool isSetMask = true>
__aicore__ inline void Duplicate(const LocalTensor<T>& dst, const T& scalarValue, const uint64_t mask[],
                                 const uint8_t repeatTime, const uint16_t dstBlockStride, const uint8_t dstRepeatStride, ASCENDC_SIM_LOC_PARAM) {
  ASCENDC_SIM_AT;
  auto d = ascendc_sim_detail::Opnd(dst, dstBlockStride, dstRepeatStride);
  ascendc_sim::rt::Vec(ascendc_sim::VecOp::Duplicate, "Duplicate", ascendc_sim_detail::BitsShape(mask, repeatTime),
                       !isSetMask, d, nullptr, nullptr, &scalarValue, 0);
}
template <typename T, bool isSetMask = true>
__aicore__ inline void Duplicate(const LocalTensor<T>& dst, const T& scalarValue, uint64_t mask,
                                 const uint8_t repeatTime, const uint16_t dstBlockStride, const uint8_t dstRepeatStride, ASCENDC_SIM_LOC_PARAM) {
  ASCENDC_SIM_AT;
  auto d = ascendc_sim_detail::Opnd(dst, dstBlockStride, dstRepeatStride);
  ascendc_sim::rt::Vec(ascendc_sim::VecOp::Duplicate, "Duplicate", ascendc_sim_detail::LenShape(mask, repeatTime),
                       !isSetMask, d, nullptr, nullptr, &scalarValue, 0);
}

// Gather, tensor front-n form (the mask / repeat forms are not emulated): dst[i] = the element of src at
// byte srcBaseAddr + srcOffset[i] (offsets in bytes, relative to src's start), i < count.
template <typename T>
__aicore__ inline void Gather(const LocalTensor<T>& dst, const LocalTensor<T>& src, const LocalTensor<uint32_t>& srcOffset,
                              const uint32_t srcBaseAddr, const uint32_t count, ASCENDC_SIM_LOC_PARAM) {
  ASCENDC_SIM_AT;
  auto d = ascendc_sim_detail::Opnd(dst, 1, 8), a = ascendc_sim_detail::Opnd(src, 1, 8),
       o = ascendc_sim_detail::Opnd(srcOffset, 1, 8);
  ascendc_sim::rt::Gather(d, a, o, srcBaseAddr, count);
}

// Cast from or to bfloat16_t: the 310P (__NPU_ARCH__ 2002) implementation of the official headers has no
// conversion for bfloat16 (no matching overload there), so the 310P build rejects it at compile time; on
// A2/A3 the run-time table (CAST_UNSUPPORTED) decides the pair.
#if __NPU_ARCH__ == 2002
#define ASCENDC_SIM_NO_BF16_CAST(T, U)                                                                   \
  static_assert(!IsSameType<T, bfloat16_t>::value && !IsSameType<U, bfloat16_t>::value,               \
                "Cast from or to bfloat16_t does not exist on the Atlas inference series (Ascend310P, "   \
                "__NPU_ARCH__ 2002): guard it (op_kernel/mskv_arch.h: MSKV_HAS_BF16_AND_PAD)")
#else
#define ASCENDC_SIM_NO_BF16_CAST(T, U) static_assert(true, "")
#endif
template <typename T, typename U, bool isSetMask = true>
__aicore__ inline void Cast(const LocalTensor<T>& dst, const LocalTensor<U>& src, const RoundMode& roundMode,
                            const uint32_t count, ASCENDC_SIM_LOC_PARAM) {
  ASCENDC_SIM_AT;
  ASCENDC_SIM_NO_BF16_CAST(T, U);
  auto d = ascendc_sim_detail::Opnd(dst, 1, 8), a = ascendc_sim_detail::Opnd(src, 1, 8);
  ascendc_sim::rt::Vec(ascendc_sim::VecOp::Cast, "Cast", ascendc_sim_detail::CountShape(count), !isSetMask, d, &a,
                       nullptr, nullptr, static_cast<int>(roundMode));
}
template <typename T, typename U, bool isSetMask = true>
__aicore__ inline void Cast(const LocalTensor<T>& dst, const LocalTensor<U>& src, const RoundMode& roundMode,
                            const uint64_t mask[], const uint8_t repeatTime, const UnaryRepeatParams& p, ASCENDC_SIM_LOC_PARAM) {
  ASCENDC_SIM_AT;
  ASCENDC_SIM_NO_BF16_CAST(T, U);
  auto d = ascendc_sim_detail::Opnd(dst, p.dstBlkStride, p.dstRepStride),
       a = ascendc_sim_detail::Opnd(src, p.srcBlkStride, p.srcRepStride);
  ascendc_sim::rt::Vec(ascendc_sim::VecOp::Cast, "Cast", ascendc_sim_detail::BitsShape(mask, repeatTime), !isSetMask,
                       d, &a, nullptr, nullptr, static_cast<int>(roundMode));
}
template <typename T, typename U, bool isSetMask = true>
__aicore__ inline void Cast(const LocalTensor<T>& dst, const LocalTensor<U>& src, const RoundMode& roundMode,
                            const uint64_t mask, const uint8_t repeatTime, const UnaryRepeatParams& p, ASCENDC_SIM_LOC_PARAM) {
  ASCENDC_SIM_AT;
  ASCENDC_SIM_NO_BF16_CAST(T, U);
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
__aicore__ inline void SetVectorMask(int32_t len, ASCENDC_SIM_LOC_PARAM) {
  ASCENDC_SIM_AT;
  ascendc_sim::rt::SetVectorMaskLen(len, DTOf<T>::value);
}
__aicore__ inline void ResetMask() { ascendc_sim::rt::ResetMask(); }
// Trap (kernel_operator_sys_var_intf.h; dav_c220 / dav_m200 implement it as trap()): on the NPU it stops
// the AI Core and the launch fails (Trap.md: "NPU模式下会中断AI Core的运行"). The emulation raises
// EmulationError rule "TRAP" naming the core and the tiling key; nothing after it runs. ms_kvcache kernels
// trap on a tiling key their entry has no branch for (op_kernel/mskv_tiling_keys.h) and when tensors they
// write share memory with another tensor of the launch (op_kernel/kv_copy_common.h TrapOnAliasedWrites).
__aicore__ inline void Trap() {
  ascendc_sim::rt::Fail("TRAP", "AscendC::Trap() on core %lld (tiling key %llu)",
                        static_cast<long long>(ascendc_sim::rt::BlockIdx()),
                        static_cast<unsigned long long>(ascendc_sim::rt::TilingKey()));
}

ASCENDC_SIM_END_NAMESPACE

// CANN declares GetTPipePtr at global scope (kernel_common.h), not in namespace AscendC.
__aicore__ inline AscendC::TPipe* GetTPipePtr() { return static_cast<AscendC::TPipe*>(ascendc_sim::rt::CurrentPipe()); }

// ----------------------------------------------------------------------------- tiling data / keys
#define TILING_KEY_IS(k) (::ascendc_sim::rt::TilingKey() == static_cast<uint64_t>(k))
#define ASCENDC_SIM_STR_(x) #x
#define ASCENDC_SIM_STR(x) ASCENDC_SIM_STR_(x)
#define ASCENDC_SIM_TILING_TYPE_OF_(op) ASCENDC_SIM_TILING_TYPE(op)
// GET_TILING_DATA needs the op type: the generated wrapper defines ASCENDC_SIM_OP_TYPE, and
// register/tilingdata_base.h (kernel mode) defines ASCENDC_SIM_TILING_TYPE(op).
// Each names its own line in an error (ASCENDC_SIM_TILING_AT), then no location is current again.
#define ASCENDC_SIM_TILING_AT(call) (::ascendc_sim::rt::At(__FILE__, __LINE__), (call), ::ascendc_sim::rt::At(nullptr, 0))
#define GET_TILING_DATA(var, tiling)                                                                  \
  ASCENDC_SIM_TILING_TYPE_OF_(ASCENDC_SIM_OP_TYPE) var;                                               \
  ASCENDC_SIM_TILING_AT(::ascendc_sim::rt::CopyTiling(&var, reinterpret_cast<const uint8_t*>(tiling), \
                                                      sizeof(var),                                    \
                                                      ASCENDC_SIM_STR(ASCENDC_SIM_OP_TYPE) " tiling data"))
#define GET_TILING_DATA_WITH_STRUCT(type, var, tiling) \
  type var;                                            \
  ASCENDC_SIM_TILING_AT(::ascendc_sim::rt::CopyTiling(&var, reinterpret_cast<const uint8_t*>(tiling), sizeof(type), #type))
#define GET_TILING_DATA_PTR_WITH_STRUCT(type, ptr, tiling)                                                         \
  const type* ptr = reinterpret_cast<const type*>((::ascendc_sim::rt::At(__FILE__, __LINE__),                      \
                                                   ::ascendc_sim::rt::TilingPtr(reinterpret_cast<const uint8_t*>(tiling), \
                                                                                sizeof(type), #type)))
#define GET_TILING_DATA_MEMBER(type, member, var, tiling)                                                          \
  decltype(type::member) var;                                                                                      \
  {                                                                                                                \
    type ascendc_sim_whole_;                                                                                       \
    ASCENDC_SIM_TILING_AT(::ascendc_sim::rt::CopyTiling(&ascendc_sim_whole_, reinterpret_cast<const uint8_t*>(tiling), \
                                                        sizeof(type), #type));                                     \
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
  // npu_arch comes from the macro (expanded in the kernel's TU): this template is shared by the builds of
  // every arch and must not depend on __NPU_ARCH__ itself.
  KernelRegistrar(const char* name, void (*fn)(A...), const char* where, int npu_arch, const char* arg_names) {
    rt::RegisterKernel(name, reinterpret_cast<void*>(fn), static_cast<int>(sizeof...(A)), &InvokeKernel<A...>, where,
                       npu_arch, arg_names);
  }
};
}  // namespace ascendc_sim
// ASCENDC_SIM_REGISTER_KERNEL(name, fn [, "x;y;workspace;tiling"]): the optional string names the entry's
// parameters (ms_kvcache.sim.build passes them), so GM tensors of a launch_kernel are named in messages.
#define ASCENDC_SIM_REGISTER_KERNEL(name, fn, ...)                                                     \
  static ::ascendc_sim::KernelRegistrar ascendc_sim_kernel_registrar_##name(#name, &fn, __FILE__, __NPU_ARCH__, \
                                                                            "" __VA_ARGS__);

#include "ascendc_sim/kernel_sync.h"  // SyncAll, DataCacheCleanAndInvalid

#endif  // ASCENDC_SIM_KERNEL_API_H_
