// AscendC CPU emulation: the runtime interface used by the kernel-side headers.
//
// Everything that checks a hardware rule, touches emulated memory or keeps per-core state lives in
// libascendc_sim.so behind these functions, so a kernel translation unit stays small and quick to
// compile. The functions act on the calling thread's current core (set by the runner), and raise
// ascendc_sim::EmulationError (a C++ exception) when a rule is violated.
#ifndef ASCENDC_SIM_RT_H_
#define ASCENDC_SIM_RT_H_

#include <cstddef>
#include <cstdint>

#include "ascendc_sim/types.h"

#define ASCENDC_SIM_API __attribute__((visibility("default")))

namespace ascendc_sim {

// Logical positions (AscendC::TPosition has the same enumerators, in this order).
enum class Pos : uint8_t {
  GM, A1, A2, B1, B2, C1, C2, CO1, CO2, VECIN, VECOUT, VECCALC, SPM, TSCM, C2PIPE2GM, C2PIPE2LOCAL, MAX
};
// Hardware pipes tracked by the emulation.
enum class Pipe : uint8_t { S, V, M, MTE1, MTE2, MTE3, FIX, ALL };

// Reference to a piece of unified buffer held by a LocalTensor.
struct UbRef {
  uint32_t addr;   // byte address in UB
  int32_t buf;     // buffer index in the current pipe (-1: not from a buffer)
  uint32_t gen;    // pipe generation the buffer belongs to
  uint32_t lease;  // which AllocTensor of a queue buffer handed it out (0 for a TBuf); FreeTensor ends it
};

// Copy parameters as the kernel wrote them (units depend on `CopyKind`).
struct CopyParamsRaw {
  uint32_t block_count;
  uint64_t block_len;
  uint64_t src_stride;
  uint64_t dst_stride;
};
// kCopyCount: DataCopy(dst, src, count), block_len = count * sizeof(T) bytes.
// kCopyParams: DataCopy(dst, src, DataCopyParams), block_len and strides in 32-byte blocks.
// kCopyPadExt: DataCopyPad with DataCopyExtParams (block_len bytes; GM stride bytes, UB stride blocks).
// kCopyPadLegacy: DataCopyPad with DataCopyParams (same units as kCopyPadExt, uint16 fields).
enum CopyKind : int { kCopyCount = 0, kCopyParams = 1, kCopyPadExt = 2, kCopyPadLegacy = 3 };

struct PadSpec {             // DataCopyPad GM -> UB padding
  uint32_t left;             // leftPadding (elements)
  uint32_t right;            // rightPadding (elements)
  bool is_pad;               // fill pads with `value`
  uint64_t value;            // padding value bits (sizeof(T) low bytes)
};

// Mask / repeat description of a vector instruction.
enum VecMode : uint8_t {
  kVecCount = 0,    // tensor front-n API: `count` contiguous elements
  kVecMaskBits = 1, // high-dimensional API, bit-wise mask mask[0] (low), mask[1] (high)
  kVecMaskLen = 2,  // high-dimensional API, continuous mask: first mask[0] elements of every repeat
};
struct VecShape {
  VecMode mode;
  uint64_t count;
  uint64_t mask[2];
  uint32_t repeat;
};
struct VecOperand {
  UbRef ub;
  DT dt;
  uint32_t blk_stride;  // data-block stride within one repeat (blocks)
  uint32_t rep_stride;  // stride between repeats (blocks)
  uint32_t avail;       // elements the tensor object claims (for messages only)
};

enum class VecOp : uint8_t { Add, Sub, Mul, Adds, Muls, Duplicate, Cast, CopyUb, Max, Min, Maxs, Mins, Abs, Relu, Div, Sqrt };

namespace rt {
// The kernel source location of the AscendC API call being executed (set by every emulated API that can
// fail, from a defaulted SrcLoc argument): an EmulationError message ends with " (at <file>:<line>)".
ASCENDC_SIM_API void At(const char* file, uint32_t line);
}  // namespace rt

// Where an emulated API was called from: every API that can raise an EmulationError takes a trailing
// `SrcLoc loc = SrcLoc::Here()` (kernel code never passes it), so __builtin_FILE / __builtin_LINE name
// the kernel's call. Not constructible from anything else, so no call the official headers reject
// binds to it.
class SrcLoc {
 public:
  static constexpr SrcLoc Here(const char* file = __builtin_FILE(), uint32_t line = __builtin_LINE()) {
    return SrcLoc(file, line);
  }
  // the API's call is the current one until the returned Scope ends (then no location is current, so an
  // error raised outside an annotated API never shows a stale line)
  struct Scope {
    Scope() = default;
    Scope(const Scope&) = delete;
    ~Scope() { rt::At(nullptr, 0); }
  };
  Scope Mark() const {
    rt::At(file_, line_);
    return Scope();
  }

 private:
  constexpr SrcLoc(const char* file, uint32_t line) : file_(file), line_(line) {}
  const char* file_;
  uint32_t line_;
};

// the trailing parameter of an annotated API, and its first statement
#define ASCENDC_SIM_LOC_PARAM ::ascendc_sim::SrcLoc ascendc_sim_loc = ::ascendc_sim::SrcLoc::Here()
#define ASCENDC_SIM_AT const ::ascendc_sim::SrcLoc::Scope ascendc_sim_at_ = ascendc_sim_loc.Mark()

namespace rt {

// --------------------------------------------------------------------------------------- errors
[[noreturn]] ASCENDC_SIM_API void Fail(const char* rule, const char* fmt, ...)
    __attribute__((format(printf, 2, 3)));
ASCENDC_SIM_API const char* DTName(DT dt);

// --------------------------------------------------------------------------------------- core info
ASCENDC_SIM_API int64_t BlockIdx();
ASCENDC_SIM_API int64_t BlockNum();
ASCENDC_SIM_API uint64_t TilingKey();
ASCENDC_SIM_API void RequireDtype(DT dt, const char* api);      // bf16 on a SoC without bf16, ...
ASCENDC_SIM_API void UnsupportedApi(const char* api, const char* why);
ASCENDC_SIM_API void KernelPrintf(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
ASCENDC_SIM_API uint8_t* UserWorkspace(uint8_t* workspace);
ASCENDC_SIM_API uint8_t* SysWorkspace();
ASCENDC_SIM_API void CopyTiling(void* dst, const uint8_t* tiling, size_t bytes, const char* type_name);
ASCENDC_SIM_API const void* TilingPtr(const uint8_t* tiling, size_t bytes, const char* type_name);

// --------------------------------------------------------------------------------------- GM
ASCENDC_SIM_API int32_t GmResolve(const void* p);
ASCENDC_SIM_API void GmScalarRead(int32_t region, const void* p, uint32_t bytes, void* out, const char* api);
ASCENDC_SIM_API void GmScalarWrite(int32_t region, void* p, uint32_t bytes, const void* in, const char* api);
// DataCacheCleanAndInvalid: entire = ENTIRE_DATA_CACHE; dst = DcciDst value (0 ALL, 1 UB, 2 OUT, 3 ATOMIC), -1 none.
ASCENDC_SIM_API void DcacheCleanInvalid(const void* p, int entire, int dst, const char* api);

// --------------------------------------------------------------------------------------- pipe / buffers
ASCENDC_SIM_API void PipeCreate(void* pipe);
ASCENDC_SIM_API void* CurrentPipe();
ASCENDC_SIM_API void PipeDestroy(void* pipe);
ASCENDC_SIM_API void PipeReset(void* pipe);
ASCENDC_SIM_API void PipeInitQue(int32_t* handle, uint32_t* gen, Pos src, Pos dst, int32_t depth, uint32_t num,
                                 uint32_t len);
ASCENDC_SIM_API void PipeInitTBuf(int32_t* handle, uint32_t* gen, Pos pos, uint32_t len);
ASCENDC_SIM_API UbRef QueAlloc(int32_t h, uint32_t gen, uint32_t* len);
ASCENDC_SIM_API void QueEnQue(int32_t h, uint32_t gen, const UbRef& t, Pos src_user, Pos dst_user);
ASCENDC_SIM_API UbRef QueDeQue(int32_t h, uint32_t gen, uint32_t* len, Pos src_user, Pos dst_user);
ASCENDC_SIM_API void QueFree(int32_t h, uint32_t gen, const UbRef& t);
ASCENDC_SIM_API int32_t QueInfo(int32_t h, uint32_t gen, int what);  // 0 count in queue, 1 vacant, 2 idle bufs
ASCENDC_SIM_API void QueFreeAllEvent(int32_t h, uint32_t gen);
ASCENDC_SIM_API void QueDestroy(int32_t h, uint32_t gen);
ASCENDC_SIM_API UbRef TBufGet(int32_t h, uint32_t gen, uint32_t* len);
ASCENDC_SIM_API uint32_t BufferEnd(const UbRef& t);  // end address of the tensor's buffer
ASCENDC_SIM_API Pos BufferPos(const UbRef& t);

// --------------------------------------------------------------------------------------- UB scalar
ASCENDC_SIM_API void UbScalarRead(const UbRef& t, uint64_t byte_off, uint32_t bytes, void* out);
ASCENDC_SIM_API void UbScalarWrite(const UbRef& t, uint64_t byte_off, uint32_t bytes, const void* in);
ASCENDC_SIM_API uint8_t* UbHostPtr(uint32_t addr);

// --------------------------------------------------------------------------------------- data movement
ASCENDC_SIM_API void CopyGmToUb(const UbRef& dst, int32_t region, const uint8_t* src, DT dt, CopyKind kind,
                                const CopyParamsRaw& p, const PadSpec* pad, const char* api);
ASCENDC_SIM_API void CopyUbToGm(int32_t region, uint8_t* dst, const UbRef& src, DT dt, CopyKind kind,
                                const CopyParamsRaw& p, const char* api);
ASCENDC_SIM_API void CopyUbToUb(const UbRef& dst, const UbRef& src, DT dt, CopyKind kind, const CopyParamsRaw& p,
                                const char* api);
ASCENDC_SIM_API void SetPadValue(uint64_t bits, uint32_t elem);

// --------------------------------------------------------------------------------------- vector
ASCENDC_SIM_API void Vec(VecOp op, const char* api, const VecShape& shape, bool use_mask_reg, const VecOperand& dst,
                         const VecOperand* src0, const VecOperand* src1, const void* scalar, int round_mode);
// Gather (tensor front-n form): dst[i] = element at byte src + base + offsets[i], i < count.
ASCENDC_SIM_API void Gather(const VecOperand& dst, const VecOperand& src, const VecOperand& offsets, uint32_t base,
                            uint64_t count);
ASCENDC_SIM_API void SetMaskMode(bool counter);
ASCENDC_SIM_API void SetVectorMask(uint64_t hi, uint64_t lo, DT dt);
ASCENDC_SIM_API void SetVectorMaskLen(int64_t len, DT dt);
ASCENDC_SIM_API void ResetMask();

// --------------------------------------------------------------------------------------- sync
ASCENDC_SIM_API void SetFlag(int event, int64_t id);
ASCENDC_SIM_API void WaitFlag(int event, int64_t id);
ASCENDC_SIM_API void Barrier(Pipe p);
ASCENDC_SIM_API int32_t FetchEventID(int event);
ASCENDC_SIM_API int32_t AllocEventID(int event);
ASCENDC_SIM_API void ReleaseEventID(int event, int64_t id);
// SyncAll (soft: the gmWorkspace / ubWorkspace form; gm_bytes / ub_bytes as the tensors report them).
ASCENDC_SIM_API void SyncAll(bool aiv_only, bool soft, const void* gm, uint64_t gm_bytes, const UbRef* ub,
                             uint32_t ub_bytes, int32_t used_cores);

// --------------------------------------------------------------------------------------- kernels
using KernelInvoker = void (*)(void* fn, void** args, int nargs);
// npu_arch: the __NPU_ARCH__ the kernel was compiled for; a launch on a SoC runs the build of its arch.
// arg_names: the entry's parameter names, ';'-separated ("" if unknown), for GM tensor names in messages.
ASCENDC_SIM_API void RegisterKernel(const char* name, void* fn, int nargs, KernelInvoker invoke, const char* where,
                                    int npu_arch, const char* arg_names);

}  // namespace rt
}  // namespace ascendc_sim

#endif  // ASCENDC_SIM_RT_H_
