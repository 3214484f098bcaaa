#include "aot_abi.h"

#include <cstdlib>
#include <mutex>

namespace mskv {

DType ParseDType(const char* s) {
  if (s == nullptr) return DType::kUnknown;
  if (!std::strcmp(s, "float16")) return DType::kF16;
  if (!std::strcmp(s, "bfloat16")) return DType::kBF16;
  if (!std::strcmp(s, "float32")) return DType::kF32;
  if (!std::strcmp(s, "int8")) return DType::kI8;
  if (!std::strcmp(s, "uint8")) return DType::kU8;
  if (!std::strcmp(s, "int32")) return DType::kI32;
  if (!std::strcmp(s, "int64")) return DType::kI64;
  if (!std::strcmp(s, "bool")) return DType::kBool;
  return DType::kUnknown;
}

const char* DTypeName(DType d) {
  switch (d) {
    case DType::kF16: return "float16";
    case DType::kBF16: return "bfloat16";
    case DType::kF32: return "float32";
    case DType::kI8: return "int8";
    case DType::kU8: return "uint8";
    case DType::kI32: return "int32";
    case DType::kI64: return "int64";
    case DType::kBool: return "bool";
    default: return "unknown";
  }
}

size_t DTypeSize(DType d) {
  switch (d) {
    case DType::kF16: case DType::kBF16: return 2;
    case DType::kF32: case DType::kI32: return 4;
    case DType::kI8: case DType::kU8: case DType::kBool: return 1;
    case DType::kI64: return 8;
    default: return 0;
  }
}

namespace {
std::mutex g_err_mu;
std::string g_last_error;
}  // namespace

void SetLastError(const std::string& msg) {
  std::lock_guard<std::mutex> lk(g_err_mu);
  g_last_error = msg;
}

std::string LastError() {
  std::lock_guard<std::mutex> lk(g_err_mu);
  return g_last_error;
}

std::string AotArgs::attr_str(const char* name, const std::string& dflt) const {
  return (extra && extra->HasAttr(name)) ? extra->GetAttrStr(name) : dflt;
}
int64_t AotArgs::attr_int(const char* name, int64_t dflt) const {
  return (extra && extra->HasAttr(name)) ? extra->GetAttrInt(name) : dflt;
}
double AotArgs::attr_float(const char* name, double dflt) const {
  return (extra && extra->HasAttr(name)) ? extra->GetAttrFloat(name) : dflt;
}
bool AotArgs::attr_bool(const char* name, bool dflt) const {
  return (extra && extra->HasAttr(name)) ? extra->GetAttrBool(name) : dflt;
}

int NumThreads() {
  static const int n = [] {
    const char* env = std::getenv("MS_KVCACHE_NUM_THREADS");
    int v = env ? std::atoi(env) : 0;
    return v > 0 ? v : omp_get_num_procs();
  }();
  return n;
}

int64_t ParallelThresholdBytes() {
  static const int64_t n = [] {
    const char* env = std::getenv("MS_KVCACHE_PARALLEL_BYTES");
    long long v = env ? std::atoll(env) : 0;
    return v > 0 ? static_cast<int64_t>(v) : int64_t{1} << 18;  // 256 KiB
  }();
  return n;
}

}  // namespace mskv

// C view of the last error for loaders that call the AOT entries directly (the PyNative fast path):
// copies at most size-1 bytes plus a NUL into buf and returns the full message length.
MSKV_AOT_EXPORT int MskvLastError(char* buf, int size) {
  const std::string msg = mskv::LastError();
  if (buf != nullptr && size > 0) {
    const size_t n = msg.size() < static_cast<size_t>(size - 1) ? msg.size() : static_cast<size_t>(size - 1);
    std::memcpy(buf, msg.data(), n);
    buf[n] = '\0';
  }
  return static_cast<int>(msg.size());
}
