// Shared plumbing of the native CPU kernels (the "cpu" backend).
//
// Every op exports one function with MindSpore's CPU AOT signature
//   extern "C" int OpType(int nparam, void** params, int* ndims, int64_t** shapes,
//                         const char** dtypes, void* stream, void* extra);
// params are the op inputs in OpSpec order followed by its outputs. Attributes (cache_layout, ...)
// come from the primitive through MindSpore's AotExtra object, whose virtual interface is mirrored
// below (include/mindspore/ccsrc/utils/custom_aot_extra.h, the same in MindSpore 2.7.0-2.10.0;
// pre-C++11 string ABI). Named modes (cache_layout, direction) arrive as int codes
// (op_host/mskv_attr_codes.h, ms_kvcache AttrSpec.codes), read with attr_int: no kernel reads a string.
// A kernel returns 0 on success; on failure it records a message (mskv::LastError) and throws it to
// MindSpore, which raises it as a RuntimeError with that text (MSKV_AOT_GUARD; a caller passing no
// AotExtra gets a non-zero return instead). Python validates before launching, so a failure means a
// check was bypassed (graph mode) and is never a partial write.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "mskv_attr_codes.h"

#define MSKV_AOT_EXPORT extern "C" __attribute__((visibility("default")))

namespace mindspore {
class AotKernelData {
 public:
  virtual ~AotKernelData() = default;
};
// Layout- and vtable-compatible mirror of mindspore::AotExtra (declaration order matters).
class AotExtra {
 public:
  virtual ~AotExtra() = default;
  virtual bool HasAttr(std::string name) = 0;
  virtual bool GetAttrBool(std::string name) = 0;
  virtual int64_t GetAttrInt(std::string name) = 0;
  virtual float GetAttrFloat(std::string name) = 0;
  virtual std::string GetAttrStr(std::string name) = 0;
  virtual std::vector<int64_t> GetAttrIntVec(std::string name) = 0;
  virtual std::vector<float> GetAttrFloatVec(std::string name) = 0;
  std::vector<size_t> workspace_;
  AotKernelData* kernel_data_{nullptr};
};
}  // namespace mindspore

namespace mskv {

// kF8E4M3 / kF8E5M2: float8_e4m3fn / float8_e5m2 (MindSpore's AOT dtype strings "float8e4m3fn",
// "float8e5m2"): quantized caches; the copy and transfer kernels move their bytes like int8.
enum class DType : int { kF16, kBF16, kF32, kI8, kU8, kI32, kI64, kBool, kF8E4M3, kF8E5M2, kUnknown };

DType ParseDType(const char* name);
const char* DTypeName(DType d);
size_t DTypeSize(DType d);

// Thread-safe "last error" of the most recent failing kernel call (read by Python).
void SetLastError(const std::string& msg);
std::string LastError();

// Read-only view over the AOT argument arrays.
struct AotArgs {
  int nparam;
  void** params;
  int* ndims;
  int64_t** shapes;
  const char** dtypes;
  mindspore::AotExtra* extra;

  template <typename T = uint8_t>
  T* ptr(int i) const { return static_cast<T*>(params[i]); }
  int rank(int i) const { return ndims[i]; }
  int64_t dim(int i, int d) const {
    if (d < 0) d += ndims[i];
    return shapes[i][d];
  }
  int64_t numel(int i) const {
    int64_t n = 1;
    for (int d = 0; d < ndims[i]; ++d) n *= shapes[i][d];
    return n;
  }
  DType dtype(int i) const { return ParseDType(dtypes[i]); }
  std::string attr_str(const char* name, const std::string& dflt) const;
  int64_t attr_int(const char* name, int64_t dflt) const;
  double attr_float(const char* name, double dflt) const;
  bool attr_bool(const char* name, bool dflt) const;
};

// Where the tensors of each OpSpec input are among the params. A list input (TensorSpec dynamic=True)
// reaches the kernel flattened; the attribute dyn_input_sizes (MindSpore's convention, set by every
// ms_kvcache primitive with list inputs and by the PyNative fast path) has one entry per OpSpec input:
// the tensor count of a list input, -1 for a plain input. Without the attribute every input is one
// tensor. Throws KernelError unless the spans and `num_outputs` outputs cover exactly nparam params.
struct InputSpan {
  int first;  // index of the input's first tensor in params
  int count;  // tensors of the input (1 for a plain input)
};
std::vector<InputSpan> InputSpans(const AotArgs& a, int num_inputs, int num_outputs = 1);

// Raised inside kernels for inconsistent arguments; reported by MSKV_AOT_GUARD (FailAotCall).
struct KernelError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Run body(begin, end) over disjoint ranges covering [0, n), on the calling thread and the pool's
// helper threads when the work is worth it (total_bytes >= parallel threshold), inline otherwise.
// body may be called several times per thread, with any partition of [0, n) (see parallel.inl).
template <typename F>
void ParallelFor(int64_t n, int64_t total_bytes, F&& body);

// Threads of the pool (MS_KVCACHE_NUM_THREADS, 1 .. 4x the CPUs this process may use; default: those CPUs).
int NumThreads();
// Bytes per call from which the pool is used (MS_KVCACHE_PARALLEL_BYTES, 4 KiB .. 1 GiB; default 256 KiB).
int64_t ParallelThresholdBytes();
// Longest spin MS_KVCACHE_SPIN_US may ask for (us).
constexpr int64_t kMaxSpinMicros = 10000;
// How long (us) an idle pool helper spins (yielding) for the next job before it sleeps
// (MS_KVCACHE_SPIN_US, 0 .. kMaxSpinMicros, default 200; 0 = sleep at once).
int64_t SpinMicros();
// An integer environment setting, bounded: unset / empty -> def; out of [lo, hi] -> the nearest bound,
// unparsable -> def, each with one warning line on stderr naming the variable. unit: appended to it.
int64_t EnvInt(const char* name, int64_t def, int64_t lo, int64_t hi, const char* unit);
// Jobs the pool ran with helpers, and how many of them had to wake a sleeping helper.
struct PoolCounters {
  uint64_t jobs;
  uint64_t wakes;
};
PoolCounters PoolStats();

// The named-mode attributes (int codes of op_host/mskv_attr_codes.h); KernelError for any other value.
// LayoutIsBnsd: an op without NZ caches (NZ is refused too); an op with NZ caches asks LayoutIsNz first.
inline bool LayoutIsNz(int64_t code) { return code == mskv_attr::kLayoutNZ; }
inline bool LayoutIsBnsd(int64_t code) {
  if (code == mskv_attr::kLayoutNZ) throw KernelError("cache_layout NZ is not supported by this op");
  if (code != mskv_attr::kLayoutBSND && code != mskv_attr::kLayoutBNSD)
    throw KernelError("unknown cache_layout code " + std::to_string(code) + " (0 BSND, 1 BNSD, 2 NZ)");
  return code == mskv_attr::kLayoutBNSD;
}
inline bool DirectionIsD2H(int64_t code) {
  if (code != mskv_attr::kDirH2D && code != mskv_attr::kDirD2H)
    throw KernelError("unknown direction code " + std::to_string(code) + " (1 h2d, 2 d2h)");
  return code == mskv_attr::kDirD2H;
}

// Index helpers: read element i of an int32/int64 index tensor as int64.
inline int64_t ReadIndex(const void* p, DType d, int64_t i) {
  return d == DType::kI32 ? static_cast<int64_t>(static_cast<const int32_t*>(p)[i])
                          : static_cast<const int64_t*>(p)[i];
}

// Alias rule of a launch by MindSpore (graph mode, ops.Custom): the ms_kvcache primitive sets the
// attributes mskv_disjoint (flat indices of the inputs the op writes), mskv_disjoint_read (inputs read
// whole that must not overlap a written one) and mskv_arg_names (argument names, ';'-separated). Throws
// KernelError naming both arguments if two written tensors, or a written and such a read tensor, share
// a byte; does nothing when the attributes are absent (the PyNative fast path checks in Python).
void CheckDisjointArgs(int nparam, void** params, int* ndims, int64_t** shapes, const char** dtypes,
                       mindspore::AotExtra* extra);

// End of a failed AOT call: records `msg` (LastError) and returns 1 to a caller that passed no AotExtra;
// otherwise throws std::runtime_error(msg), which MindSpore's CPU AOT kernel catches and puts in the
// Python exception text ("... Error message is <msg>"); the PyNative fast path catches it too.
int FailAotCall(const std::string& msg, void* extra);

// The op name for messages: the primitive's mskv_op_name attribute when MindSpore passes one (the
// public op of an internal primitive: a quantizing reshape_and_cache runs the kernel
// reshape_and_cache_quant but is reported as reshape_and_cache), else `kernel_op`.
std::string AotOpName(const char* kernel_op, void* extra);

}  // namespace mskv

#define MSKV_AOT_GUARD(opname, ...)                                                                   \
  try {                                                                                               \
    ::mskv::CheckDisjointArgs(nparam, params, ndims, shapes, dtypes,                                  \
                              static_cast<::mindspore::AotExtra*>(extra));                            \
    __VA_ARGS__;                                                                                      \
    return 0;                                                                                         \
  } catch (const std::exception& e) {                                                                 \
    return ::mskv::FailAotCall(::mskv::AotOpName(opname, extra) + ": " + e.what(), extra);            \
  }

#include "parallel.inl"
