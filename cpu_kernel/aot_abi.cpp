#include "aot_abi.h"

#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

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
  if (!std::strcmp(s, "float8e4m3fn") || !std::strcmp(s, "float8_e4m3fn")) return DType::kF8E4M3;
  if (!std::strcmp(s, "float8e5m2") || !std::strcmp(s, "float8_e5m2")) return DType::kF8E5M2;
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
    case DType::kF8E4M3: return "float8_e4m3fn";
    case DType::kF8E5M2: return "float8_e5m2";
    default: return "unknown";
  }
}

size_t DTypeSize(DType d) {
  switch (d) {
    case DType::kF16: case DType::kBF16: return 2;
    case DType::kF32: case DType::kI32: return 4;
    case DType::kI8: case DType::kU8: case DType::kBool: case DType::kF8E4M3: case DType::kF8E5M2: return 1;
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

namespace {
struct Span {
  uintptr_t lo, hi;  // [lo, hi) bytes of a tensor
  int index;         // flat input index
  bool written;
};

std::string ArgName(const std::vector<std::string>& names, int i) {
  return i >= 0 && static_cast<size_t>(i) < names.size() ? names[i] : "input " + std::to_string(i);
}
}  // namespace

void CheckDisjointArgs(int nparam, void** params, int* ndims, int64_t** shapes, const char** dtypes,
                       mindspore::AotExtra* extra) {
  if (extra == nullptr || !extra->HasAttr("mskv_disjoint")) return;
  const std::vector<int64_t> written = extra->GetAttrIntVec("mskv_disjoint");
  const std::vector<int64_t> read =
      extra->HasAttr("mskv_disjoint_read") ? extra->GetAttrIntVec("mskv_disjoint_read") : std::vector<int64_t>();
  std::vector<Span> spans;
  spans.reserve(written.size() + read.size());
  auto add = [&](int64_t i, bool w) {
    if (i < 0 || i >= nparam || params[i] == nullptr) return;
    uint64_t n = DTypeSize(ParseDType(dtypes[i]));
    for (int d = 0; d < ndims[i]; ++d) n *= static_cast<uint64_t>(shapes[i][d] < 0 ? 0 : shapes[i][d]);
    if (n == 0) return;  // nothing to share
    const auto lo = reinterpret_cast<uintptr_t>(params[i]);
    spans.push_back(Span{lo, lo + n, static_cast<int>(i), w});
  };
  for (int64_t i : written) add(i, true);
  for (int64_t i : read) add(i, false);
  if (spans.size() < 2) return;
  std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) {
    return a.lo != b.lo ? a.lo < b.lo : a.index < b.index;
  });
  const Span* reach_any = nullptr;      // the span reaching furthest so far
  const Span* reach_written = nullptr;  // the written span reaching furthest so far
  for (const Span& s : spans) {
    const Span* other = s.written ? reach_any : reach_written;  // read spans may overlap each other
    if (other != nullptr && s.lo < other->hi) {
      std::vector<std::string> names;
      if (extra->HasAttr("mskv_arg_names")) {
        const std::string all = extra->GetAttrStr("mskv_arg_names");
        size_t p = 0;
        while (p <= all.size()) {
          const size_t q = all.find(';', p);
          names.push_back(all.substr(p, q == std::string::npos ? std::string::npos : q - p));
          if (q == std::string::npos) break;
          p = q + 1;
        }
      }
      const Span& first = other->index < s.index ? *other : s;
      const Span& second = other->index < s.index ? s : *other;
      const bool same = first.lo == second.lo && first.hi == second.hi;
      const std::string how = same ? "the same memory as" :
          "memory sharing bytes " + std::to_string(std::max(first.lo, second.lo) - first.lo) + ".." +
          std::to_string(std::min(first.hi, second.hi) - first.lo) + " of";
      if (first.written && second.written) {
        throw KernelError("argument '" + ArgName(names, second.index) + "': expected a distinct cache tensor (no "
                          "memory shared with another argument the op writes), got " + how + " '" +
                          ArgName(names, first.index) + "' (in a graph: the same Parameter given twice, or two "
                          "Parameters over one buffer); nothing was written");
      }
      const Span& w = first.written ? first : second;
      const Span& r = first.written ? second : first;
      throw KernelError("argument '" + ArgName(names, w.index) + "': expected a tensor sharing no memory with the "
                        "tensors the op reads, got " + (same ? std::string("the same memory as") :
                        std::string("memory shared with")) + " '" + ArgName(names, r.index) +
                        "'; writing it would change the data being read; nothing was written");
    }
    if (reach_any == nullptr || s.hi > reach_any->hi) reach_any = &s;
    if (s.written && (reach_written == nullptr || s.hi > reach_written->hi)) reach_written = &s;
  }
}

int FailAotCall(const std::string& msg, void* extra) {
  SetLastError(msg);
  if (extra == nullptr) return 1;
  throw std::runtime_error(msg);
}

std::string AotOpName(const char* kernel_op, void* extra) {
  auto* ex = static_cast<mindspore::AotExtra*>(extra);
  try {
    if (ex != nullptr && ex->HasAttr("mskv_op_name")) {
      std::string name = ex->GetAttrStr("mskv_op_name");
      if (!name.empty()) return name;
    }
  } catch (const std::exception&) {  // an attribute of another type: keep the kernel's name
  }
  return kernel_op;
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

std::vector<InputSpan> InputSpans(const AotArgs& a, int num_inputs, int num_outputs) {
  std::vector<int64_t> sizes;
  if (a.extra != nullptr && a.extra->HasAttr("dyn_input_sizes")) sizes = a.extra->GetAttrIntVec("dyn_input_sizes");
  if (!sizes.empty() && static_cast<int>(sizes.size()) != num_inputs)
    throw KernelError("attribute dyn_input_sizes has " + std::to_string(sizes.size()) + " entries, expected one per "
                      "input (" + std::to_string(num_inputs) + ")");
  std::vector<InputSpan> spans(static_cast<size_t>(num_inputs));
  int pos = 0;
  for (int i = 0; i < num_inputs; ++i) {
    const int64_t k = sizes.empty() ? -1 : sizes[static_cast<size_t>(i)];
    if (k == 0 || k < -1) throw KernelError("attribute dyn_input_sizes: bad entry " + std::to_string(k));
    spans[static_cast<size_t>(i)] = {pos, k < 0 ? 1 : static_cast<int>(k)};
    pos += spans[static_cast<size_t>(i)].count;
  }
  if (pos + num_outputs != a.nparam)
    throw KernelError("expected " + std::to_string(pos) + " input tensors (dyn_input_sizes) + " +
                      std::to_string(num_outputs) + " output(s), got " + std::to_string(a.nparam) + " params");
  return spans;
}

namespace {

int AllowedCpus() {
  cpu_set_t set;  // the CPUs this process may run on (taskset / cgroup cpusets), not the machine's
  if (sched_getaffinity(0, sizeof(set), &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
  const unsigned hw = std::thread::hardware_concurrency();
  return hw > 0 ? static_cast<int>(hw) : 1;
}

}  // namespace

// An integer setting from the environment: unset or empty -> `def` (silently); a base-10 integer in
// [lo, hi] -> that value; out of range -> the nearest bound, unparsable (text, a trailing unit, beyond
// int64) -> `def`, each with one line on stderr naming the variable, the value and what is used instead
// (each variable is read once per process).
int64_t EnvInt(const char* name, int64_t def, int64_t lo, int64_t hi, const char* unit) {
  const char* env = std::getenv(name);
  if (env == nullptr || *env == '\0') return def;
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(env, &end, 10);
  while (end != nullptr && (*end == ' ' || *end == '\t' || *end == '\n')) ++end;
  if (end == env || end == nullptr || *end != '\0' || errno == ERANGE) {
    std::fprintf(stderr, "ms_kvcache: warning: environment variable %s=%.64s is not an integer; using the "
                 "default %lld%s\n", name, env, static_cast<long long>(def), unit);
    return def;
  }
  if (v < lo || v > hi) {
    const int64_t used = v < lo ? lo : hi;
    std::fprintf(stderr, "ms_kvcache: warning: environment variable %s=%lld is outside [%lld, %lld]; using "
                 "%lld%s\n", name, v, static_cast<long long>(lo), static_cast<long long>(hi),
                 static_cast<long long>(used), unit);
    return used;
  }
  return static_cast<int64_t>(v);
}

// MS_KVCACHE_NUM_THREADS: 1 .. 4x the CPUs this process may use (unset or 0: that CPU count).
int NumThreads() {
  static const int n = [] {
    const int cpus = AllowedCpus();
    const char* env = std::getenv("MS_KVCACHE_NUM_THREADS");
    if (env != nullptr && !std::strcmp(env, "0")) return cpus;
    return static_cast<int>(EnvInt("MS_KVCACHE_NUM_THREADS", cpus, 1, int64_t{4} * cpus, ""));
  }();
  return n;
}

// MS_KVCACHE_PARALLEL_BYTES: bytes per call from which the pool is used, 4 KiB .. 1 GiB (default 256 KiB).
int64_t ParallelThresholdBytes() {
  static const int64_t n = EnvInt("MS_KVCACHE_PARALLEL_BYTES", int64_t{1} << 18, int64_t{1} << 12,
                                  int64_t{1} << 30, " bytes");
  return n;
}

// Helpers spin for SpinMicros() after a job (watching epoch_, no syscall) before they sleep on cv_: a
// PyNative loop of writes calls the pool every ~10-100 us, and waking a sleeping helper (futex wake, on a
// VM an IPI to a halted vCPU) cost ~20-35 us of the caller's time per call on this 2-core VM (perf:
// try_to_wake_up under pthread_cond_broadcast, 26% of a concat_and_cache_mla T = 1024 loop). The caller
// only makes the wake syscall when a helper actually sleeps. MS_KVCACHE_SPIN_US: 0 .. 10000 (10 ms;
// default 200): an idle helper spins at most that long, so a process that stopped calling goes idle.
int64_t SpinMicros() {
  static const int64_t n = EnvInt("MS_KVCACHE_SPIN_US", 200, 0, kMaxSpinMicros, " us");
  return n;
}

static std::atomic<uint64_t> g_pool_jobs{0};  // jobs run with the pool's helpers (PoolStats)
static std::atomic<uint64_t> g_pool_wakes{0};  // of them, jobs that woke a sleeping helper (a futex syscall)

PoolCounters PoolStats() {
  return {g_pool_jobs.load(std::memory_order_relaxed), g_pool_wakes.load(std::memory_order_relaxed)};
}

namespace {

// The pool behind RunChunks (see parallel.inl). One job at a time; a second concurrent caller (another
// thread, or a kernel called from inside a chunk) runs its chunks inline.
struct Job {
  int64_t n;
  int64_t chunks;
  void (*fn)(void*, int64_t, int64_t);
  void* ctx;
  std::atomic<int64_t> next{0};
};

void Work(Job& j) {
  for (;;) {
    const int64_t c = j.next.fetch_add(1, std::memory_order_relaxed);
    if (c >= j.chunks) return;
    j.fn(j.ctx, c * j.n / j.chunks, (c + 1) * j.n / j.chunks);
  }
}

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#endif
}

class Pool {
 public:
  explicit Pool(int helpers) {
    for (int i = 0; i < helpers; ++i) std::thread([this] { Loop(); }).detach();
  }

  void Run(Job& job) {
    std::unique_lock<std::mutex> busy(run_mu_, std::try_to_lock);
    if (!busy.owns_lock()) {
      Work(job);
      return;
    }
    bool wake = false;
    {
      std::lock_guard<std::mutex> lk(mu_);
      job_ = &job;
      epoch_.store(epoch_.load(std::memory_order_relaxed) + 1, std::memory_order_release);
      wake = sleepers_ > 0;
    }
    g_pool_jobs.fetch_add(1, std::memory_order_relaxed);
    if (wake) {
      g_pool_wakes.fetch_add(1, std::memory_order_relaxed);
      cv_.notify_all();
    }
    Work(job);
    {
      std::lock_guard<std::mutex> lk(mu_);
      job_ = nullptr;  // helpers that have not joined yet never will
    }
    while (active_.load(std::memory_order_acquire) != 0) std::this_thread::yield();
  }

 private:
  void Loop() {
    uint64_t seen = 0;
    for (;;) {
      // Spin phase: no lock, no syscall; a new epoch ends it early.
      const int64_t spin = SpinMicros();
      if (spin > 0 && epoch_.load(std::memory_order_acquire) == seen) {
        const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(spin);
        // Yield between short pause bursts: a runnable thread on this core (MindSpore's pipeline, another
        // process) gets it at once, so the spin only uses a core nobody else wants.
        while (epoch_.load(std::memory_order_acquire) == seen) {
          for (int n = 0; n < 32 && epoch_.load(std::memory_order_relaxed) == seen; ++n) CpuRelax();
          std::this_thread::yield();
          if (std::chrono::steady_clock::now() >= until) break;
        }
      }
      Job* j = nullptr;
      {
        std::unique_lock<std::mutex> lk(mu_);
        if (job_ == nullptr && epoch_.load(std::memory_order_relaxed) != seen) {
          seen = epoch_.load(std::memory_order_relaxed);  // a job that ended before this helper joined it
          continue;                                         // back to spinning for the next one
        }
        if (!(job_ != nullptr && epoch_.load(std::memory_order_relaxed) != seen)) {
          ++sleepers_;
          cv_.wait(lk, [&] { return job_ != nullptr && epoch_.load(std::memory_order_relaxed) != seen; });
          --sleepers_;
        }
        seen = epoch_.load(std::memory_order_relaxed);
        j = job_;
        active_.fetch_add(1, std::memory_order_acq_rel);
      }
      Work(*j);
      active_.fetch_sub(1, std::memory_order_acq_rel);
    }
  }

  std::mutex run_mu_;
  std::mutex mu_;
  std::condition_variable cv_;
  Job* job_ = nullptr;           // guarded by mu_
  std::atomic<uint64_t> epoch_{0};  // written under mu_, read by spinning helpers without it
  int sleepers_ = 0;             // guarded by mu_
  std::atomic<int> active_{0};
};

}  // namespace

void RunChunks(int64_t n, int64_t chunks, void (*fn)(void*, int64_t, int64_t), void* ctx) {
  static Pool* pool = new Pool(NumThreads() - 1);  // never destroyed: helpers are detached
  Job job;
  job.n = n;
  job.chunks = chunks;
  job.fn = fn;
  job.ctx = ctx;
  pool->Run(job);
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
