// AscendC CPU emulation runtime: kernel registry, settings, the runner (tiling + GM setup + launch on
// every core in forward / reverse / threaded order) and the MindSpore AOT entry.
#include "runner.h"

#include <cctype>
#include <dlfcn.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <map>
#include <stdexcept>
#include <thread>

#include "runtime_internal.h"

namespace mindspore {
class AotKernelData {
 public:
  virtual ~AotKernelData() = default;
};
// Layout- and vtable-compatible mirror of mindspore::AotExtra (MindSpore 2.10,
// ccsrc/utils/custom_aot_extra.h; same declaration as cpu_kernel/aot_abi.h).
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

namespace ascendc_sim {

// ============================================================================================ registry
// One entry per (kernel name, __NPU_ARCH__): each kernel file is compiled once per arch family (2201 for
// Atlas A2/A3, 2002 for Ascend310P) and a launch runs the build of its SoC's arch.
namespace {
struct KernelEntry {
  void* fn = nullptr;
  int nargs = 0;
  rt::KernelInvoker invoke = nullptr;
  std::string where;
  std::vector<std::string> arg_names;  // the entry's parameter names, if the build passed them
};
std::mutex& KMu() {
  static std::mutex mu;
  return mu;
}
std::map<std::string, std::map<int, KernelEntry>>& Kernels() {
  static auto* m = new std::map<std::string, std::map<int, KernelEntry>>();
  return *m;
}
std::string ArchList(const std::map<int, KernelEntry>& m) {
  std::string s;
  for (auto& kv : m) s += (s.empty() ? "" : ", ") + std::to_string(kv.first);
  return s;
}
}  // namespace

void rt::RegisterKernel(const char* name, void* fn, int nargs, KernelInvoker invoke, const char* where, int npu_arch,
                        const char* arg_names) {
  std::lock_guard<std::mutex> lk(KMu());
  KernelEntry& e = Kernels()[name][npu_arch];  // a later registration (rebuilt module) replaces the earlier one
  e.fn = fn;
  e.nargs = nargs;
  e.invoke = invoke;
  e.where = where ? where : "";
  e.arg_names.clear();
  const std::string all = arg_names ? arg_names : "";
  for (size_t p = 0; !all.empty() && p <= all.size();) {
    const size_t q = all.find(';', p);
    e.arg_names.push_back(all.substr(p, q == std::string::npos ? std::string::npos : q - p));
    if (q == std::string::npos) break;
    p = q + 1;
  }
  if (e.arg_names.size() != static_cast<size_t>(nargs)) e.arg_names.clear();
}

std::vector<std::string> ListKernels() {
  std::lock_guard<std::mutex> lk(KMu());
  std::vector<std::string> v;
  for (auto& kv : Kernels()) v.push_back(kv.first);
  return v;
}

std::vector<int> KernelArchs(const std::string& kernel) {
  std::lock_guard<std::mutex> lk(KMu());
  std::vector<int> v;
  auto it = Kernels().find(kernel);
  if (it != Kernels().end())
    for (auto& kv : it->second) v.push_back(kv.first);
  return v;
}

std::string KernelSource(const std::string& kernel) {
  std::lock_guard<std::mutex> lk(KMu());
  auto it = Kernels().find(kernel);
  return it == Kernels().end() || it->second.empty() ? std::string() : it->second.begin()->second.where;
}

static KernelEntry FindKernel(const std::string& name, const std::string& op, const Caps& caps) {
  std::lock_guard<std::mutex> lk(KMu());
  auto it = Kernels().find(name);
  if (it == Kernels().end()) {
    std::string known;
    for (auto& kv : Kernels()) known += (known.empty() ? "" : ", ") + kv.first;
    FailLaunch("KERNEL_NOT_FOUND", op,
               "no kernel entry '" + name + "' is registered (registered: " + (known.empty() ? "none" : known) + ")");
  }
  auto a = it->second.find(static_cast<int>(caps.npu_arch));
  if (a == it->second.end())
    FailLaunch("KERNEL_NOT_FOUND", op,
               "kernel entry '" + name + "' was not compiled for " + caps.soc + " (__NPU_ARCH__ " +
                   std::to_string(caps.npu_arch) + "); it is built for __NPU_ARCH__ " + ArchList(it->second) +
                   " only (ms_kvcache.sim.build(..., socs=...))");
  return a->second;
}

std::string SnakeCase(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    const char ch = s[i];
    const bool up = ch >= 'A' && ch <= 'Z';
    if (up && i > 0) {
      const char prev = s[i - 1];
      const bool prev_lower = (prev >= 'a' && prev <= 'z') || (prev >= '0' && prev <= '9');
      const bool next_lower = i + 1 < s.size() && s[i + 1] >= 'a' && s[i + 1] <= 'z';
      const bool prev_upper = prev >= 'A' && prev <= 'Z';
      if (prev_lower || (prev_upper && next_lower)) out += '_';
    }
    out += up ? static_cast<char>(ch - 'A' + 'a') : ch;
  }
  return out;
}

// ============================================================================================ settings
namespace {
struct Settings {
  std::mutex mu;
  std::string soc, order, gm_copy;
  bool hazards = true;
  bool cost = false;
  Settings() {
    const char* e = std::getenv("MS_KVCACHE_SIM_SOC");
    soc = (e && *e) ? e : "Ascend910B1";
    e = std::getenv("MS_KVCACHE_SIM_ORDER");
    order = (e && *e) ? e : "forward";
    e = std::getenv("MS_KVCACHE_SIM_HAZARDS");
    hazards = !(e && std::string(e) == "0");
    e = std::getenv("MS_KVCACHE_SIM_GM_COPY");
    gm_copy = (e && *e) ? e : "auto";
    e = std::getenv("MS_KVCACHE_SIM_COST");  // "1": the cost model on by default (sim.check_settings validates)
    cost = e && std::string(e) == "1";
  }
};
Settings& Set() {
  static auto* s = new Settings();
  return *s;
}
// op: the op or kernel of the launch ("" for set_order / set_gm_copy, which name themselves).
void CheckOrder(const std::string& o, const std::string& op = "") {
  if (o != "forward" && o != "reverse" && o != "threads")
    FailLaunch("LAUNCH", op, std::string(op.empty() ? "set_order: " : "") +
                                 "core order must be 'forward', 'reverse' or 'threads', got '" + o + "'");
}
void CheckGmCopy(const std::string& o, const std::string& op = "") {
  if (o != "always" && o != "never" && o != "auto")
    FailLaunch("LAUNCH", op, std::string(op.empty() ? "set_gm_copy: " : "") +
                                 "gm_copy must be 'always', 'never' or 'auto', got '" + o + "'");
}
std::mutex g_err_mu;
std::string g_last_error;
std::map<std::pair<std::string, std::string>, std::string> g_hints;  // guarded by g_err_mu
std::map<std::pair<std::string, std::string>, AotDiagnoser> g_diagnosers;  // guarded by g_err_mu
std::mutex g_last_mu;
LaunchResult g_last_launch;
}  // namespace

void SetDefaultSoc(const std::string& soc) {
  CapsFor(soc);  // validates
  std::lock_guard<std::mutex> lk(Set().mu);
  Set().soc = soc;
}
std::string DefaultSoc() {
  std::lock_guard<std::mutex> lk(Set().mu);
  return Set().soc;
}
void SetDefaultOrder(const std::string& order) {
  CheckOrder(order);
  std::lock_guard<std::mutex> lk(Set().mu);
  Set().order = order;
}
std::string DefaultOrder() {
  std::lock_guard<std::mutex> lk(Set().mu);
  return Set().order;
}
void SetDefaultHazards(bool on) {
  std::lock_guard<std::mutex> lk(Set().mu);
  Set().hazards = on;
}
bool DefaultHazards() {
  std::lock_guard<std::mutex> lk(Set().mu);
  return Set().hazards;
}
void SetDefaultCost(bool on) {
  std::lock_guard<std::mutex> lk(Set().mu);
  Set().cost = on;
}
bool DefaultCost() {
  std::lock_guard<std::mutex> lk(Set().mu);
  return Set().cost;
}
void SetDefaultGmCopy(const std::string& mode) {
  CheckGmCopy(mode);
  std::lock_guard<std::mutex> lk(Set().mu);
  Set().gm_copy = mode;
}
std::string DefaultGmCopy() {
  std::lock_guard<std::mutex> lk(Set().mu);
  return Set().gm_copy;
}
std::string LastError() {
  std::lock_guard<std::mutex> lk(g_err_mu);
  return g_last_error;
}
void SetLastError(const std::string& msg) {
  std::lock_guard<std::mutex> lk(g_err_mu);
  g_last_error = msg;
}
void SetErrorHint(const std::string& op, const std::string& rule, const std::string& hint) {
  std::lock_guard<std::mutex> lk(g_err_mu);
  if (hint.empty()) g_hints.erase({op, rule});
  else g_hints[{op, rule}] = hint;
}
std::string ErrorHint(const std::string& op, const std::string& rule) {
  std::lock_guard<std::mutex> lk(g_err_mu);
  auto it = g_hints.find({op, rule});
  return it == g_hints.end() ? std::string() : it->second;
}
void SetErrorDiagnoser(const std::string& op, const std::string& rule, const std::string& library,
                       const std::string& symbol) {
  if (library.empty()) {
    std::lock_guard<std::mutex> lk(g_err_mu);
    g_diagnosers.erase({op, rule});
    return;
  }
  void* h = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);  // kept loaded (the registry may call it later)
  if (h == nullptr) {
    const char* why = dlerror();
    throw std::runtime_error("set_error_diagnoser: cannot load " + library + ": " + (why ? why : "?"));
  }
  void* f = dlsym(h, symbol.c_str());
  if (f == nullptr) throw std::runtime_error("set_error_diagnoser: " + library + " has no symbol " + symbol);
  std::lock_guard<std::mutex> lk(g_err_mu);
  g_diagnosers[{op, rule}] = reinterpret_cast<AotDiagnoser>(f);
}
AotDiagnoser ErrorDiagnoser(const std::string& op, const std::string& rule) {
  std::lock_guard<std::mutex> lk(g_err_mu);
  auto it = g_diagnosers.find({op, rule});
  return it == g_diagnosers.end() ? nullptr : it->second;
}
LaunchResult LastLaunch() {
  std::lock_guard<std::mutex> lk(g_last_mu);
  return g_last_launch;
}

Caps CapsFor(const std::string& soc) {
  const simhost::Platform& p = simhost::GetPlatform(soc);
  Caps c;
  c.soc = p.soc;
  std::string s = p.short_soc;
  for (auto& ch : s) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  if (s.find("310p") != std::string::npos) c.family = "310P";
  else if (s.find("910_93") != std::string::npos) c.family = "A3";
  else c.family = "A2";
  c.ub_size = p.ub_size;
  c.aiv_cores = p.aiv_cores;
  c.has_pad = p.has_datacopy_pad;
  c.has_bf16 = p.has_bf16;
  c.saturation = c.family == "310P";
  c.sys_ws = p.sys_workspace_size;
  c.npu_arch = p.npu_arch;
  return c;
}

LaunchCtx::~LaunchCtx() {
  if (ws_written != nullptr) munmap(ws_written, static_cast<size_t>(ws_user_size));
}

// ============================================================================================ GM arena
namespace {
struct Mapping {
  void* base = MAP_FAILED;
  size_t len = 0;
  uint8_t* data = nullptr;
};
struct Arena {
  std::vector<Mapping> maps;
  ~Arena() {
    for (auto& m : maps)
      if (m.base != MAP_FAILED) munmap(m.base, m.len);
  }
  // A fresh mapping with inaccessible guard areas on both sides, so a wrong offset lands outside
  // every tensor (and is reported) instead of inside a neighbour.
  uint8_t* Alloc(uint64_t size, const std::string& op) {
    const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    const size_t body = static_cast<size_t>((std::max<uint64_t>(size, 1) + page - 1) / page * page);
    const size_t gap = (size_t{1} << 20) + body;
    Mapping m;
    m.len = gap + body + gap;
    m.base = mmap(nullptr, m.len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m.base == MAP_FAILED) FailLaunch("LAUNCH", op, Format("cannot map %" PRIu64 " bytes of emulated GM", size));
    m.data = static_cast<uint8_t*>(m.base) + gap;
    if (mprotect(m.data, body, PROT_READ | PROT_WRITE) != 0) {
      munmap(m.base, m.len);
      FailLaunch("LAUNCH", op, Format("cannot map %" PRIu64 " bytes of emulated GM", size));
    }
    maps.push_back(m);
    return m.data;
  }
};

uint64_t Mix(uint64_t x) {  // splitmix64
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

void Garbage(uint64_t seed, uint8_t* p, uint64_t n) {
  uint64_t x = Mix(seed);
  for (uint64_t i = 0; i < n; i += 8) {
    x = Mix(x);
    const uint64_t k = std::min<uint64_t>(8, n - i);
    std::memcpy(p + i, &x, k);
  }
}

// One "written in this launch" byte per user-workspace byte (lazily zero pages).
void TrackWorkspace(LaunchCtx& L, uint8_t* user, uint64_t n) {
  if (n == 0) return;
  void* m = mmap(nullptr, static_cast<size_t>(n), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                 -1, 0);
  if (m == MAP_FAILED) return;  // no uninitialised-workspace check then
  L.ws_user = user;
  L.ws_user_size = n;
  L.ws_written = static_cast<uint8_t*>(m);
}

struct Prepared {
  LaunchCtx* L = nullptr;
  std::vector<void*> args;
  struct CopyBack {
    uint8_t* arena;
    void* host;
    uint64_t n;
  };
  std::vector<CopyBack> back;
};

// Registers the tensors of a launch as GM regions (copied into guarded arena memory unless
// gm_copy says otherwise) and returns the kernel pointer of each.
class GmBuilder {
 public:
  GmBuilder(LaunchCtx& L, Arena& arena, bool copy) : L_(L), arena_(arena), copy_(copy) {}
  // host: the cost model charges the tensor's DataCopies to the host link (zero-copy host memory)
  uint8_t* Add(const TensorArg& t, const std::string& name, RegionKind kind, Prepared& prep, bool host = false) {
    if (!t.present || t.data == nullptr) return nullptr;
    auto it = by_host_.find(t.data);
    if (it != by_host_.end()) {
      L_.regions[it->second].host = L_.regions[it->second].host || host;
      return L_.regions[it->second].base;
    }
    Region r;
    r.name = name;
    r.host = host;
    r.size = t.nbytes;
    r.kind = kind;
    r.writable = t.writable;  // a read-only numpy array: a kernel write into it is GM_READONLY
    if (copy_) {
      r.base = arena_.Alloc(t.nbytes, L_.op);
      if (t.nbytes) std::memcpy(r.base, t.data, t.nbytes);
      if (t.writable) prep.back.push_back({r.base, t.data, t.nbytes});
    } else {
      r.base = static_cast<uint8_t*>(t.data);
    }
    by_host_[t.data] = L_.regions.size();
    L_.regions.push_back(r);
    return r.base;
  }
  uint8_t* AddRaw(uint64_t size, const std::string& name, RegionKind kind, bool writable) {
    Region r;
    r.name = name;
    r.size = size;
    r.kind = kind;
    r.writable = writable;
    r.base = arena_.Alloc(size, L_.op);
    L_.regions.push_back(r);
    return r.base;
  }

 private:
  LaunchCtx& L_;
  Arena& arena_;
  bool copy_;
  std::map<void*, size_t> by_host_;
};

bool Overlapping(const std::vector<const TensorArg*>& ts) {
  std::vector<std::pair<uintptr_t, uintptr_t>> iv;
  for (const TensorArg* t : ts)
    if (t->present && t->data && t->nbytes) iv.push_back({reinterpret_cast<uintptr_t>(t->data), reinterpret_cast<uintptr_t>(t->data) + t->nbytes});
  std::sort(iv.begin(), iv.end());
  for (size_t i = 1; i < iv.size(); ++i)
    if (iv[i].first < iv[i - 1].second && iv[i] != iv[i - 1]) return true;
  return false;
}

bool DecideCopy(const std::string& mode, const std::vector<const TensorArg*>& ts) {
  if (mode == "never") return false;
  if (Overlapping(ts)) return false;  // views of one buffer must stay aliased
  if (mode == "always") return true;
  uint64_t total = 0;
  for (const TensorArg* t : ts) total += t->present ? t->nbytes : 0;
  return total <= (uint64_t{256} << 20);
}

// The cost model of a launch: off unless opt.cost; `host` names must be among `names` (the OpDef's
// inputs and outputs, or the kernel's parameters / their indices).
void SetupCost(LaunchCtx& L, const LaunchOptions& opt, const std::vector<std::string>& names, const std::string& op,
               bool allow_index) {
  if (opt.cost != 1) {
    if (!opt.host.empty() || !opt.cost_params.empty())
      FailLaunch("LAUNCH", op, "host= and cost-model parameters need the cost model on (cost_model=True)");
    return;
  }
  for (const std::string& h : opt.host) {
    bool known = std::find(names.begin(), names.end(), h) != names.end();
    for (size_t i = 0; i < names.size() && !known && allow_index; ++i) known = std::to_string(i) == h;
    if (!known) {
      std::string all;
      for (const auto& n : names) all += std::string(all.empty() ? "" : ", ") + "'" + n + "'";
      FailLaunch("LAUNCH", op, Format("host: '%s' is not an argument of the launch; its arguments are %s", h.c_str(),
                                      all.c_str()));
    }
  }
  L.cost = true;
  L.cm = MakeCostModel(L.caps, opt.cost_params, L.block_dim, op);
}

LaunchOptions Resolve(const LaunchOptions& o, const std::string& op) {
  LaunchOptions r = o;
  if (r.soc.empty()) r.soc = DefaultSoc();
  if (r.order.empty()) r.order = DefaultOrder();
  CheckOrder(r.order, op);
  if (r.hazards < 0) r.hazards = DefaultHazards() ? 1 : 0;
  if (r.cost < 0) {
    std::lock_guard<std::mutex> lk(Set().mu);
    r.cost = Set().cost ? 1 : 0;
  }
  if (r.gm_copy.empty()) r.gm_copy = DefaultGmCopy();
  CheckGmCopy(r.gm_copy, op);
  return r;
}

}  // namespace

// ------------------------------------------------------------------------------------------- execute
// Every core runs on an OS thread of its own. In the sequential orders (forward / reverse) only one core
// runs at a time: a baton passes to the next core when the running one returns or reaches SyncAll, and
// when every core waits at the SyncAll the phase is checked (GM_RACE, DCACHE_CONFLICT, workspace reads)
// and the cores run again from the first of the order. "threads" runs them all at once with a barrier.
// A core thread catches SIGSEGV / SIGBUS / SIGFPE / SIGILL / SIGABRT raised in kernel code
// (sigsetjmp + sigaltstack: KERNEL_FAULT), and the watchdog ends a core that neither returns nor calls
// an emulated API within MS_KVCACHE_SIM_WATCHDOG_S seconds (DEADLOCK).
namespace {

constexpr int kWatchdogSig = SIGURG;  // default action: ignored, so a stray one is harmless

struct FaultInfo {
  int sig = 0;
  uintptr_t pc = 0, addr = 0;
};
thread_local sigjmp_buf* t_jb = nullptr;
thread_local FaultInfo t_fault;

struct SigSlot {
  int sig;
  struct sigaction old;
};
std::mutex g_sig_mu;
int g_sig_users = 0;
SigSlot g_sigs[] = {{SIGSEGV, {}}, {SIGBUS, {}}, {SIGFPE, {}}, {SIGILL, {}}, {SIGABRT, {}}, {kWatchdogSig, {}}};

// AddressSanitizer in the process (this library or a kernel module built with it, or libasan preloaded):
// it owns SIGSEGV / SIGBUS / SIGFPE and does not follow ucontext stack switches.
bool UnderAsan() {
#if defined(__SANITIZE_ADDRESS__)
  return true;
#else
  static const bool asan = dlsym(RTLD_DEFAULT, "__asan_init") != nullptr;
  return asan;
#endif
}

bool SkipSig(int sig) { return UnderAsan() && (sig == SIGSEGV || sig == SIGBUS || sig == SIGFPE); }

void OnSignal(int sig, siginfo_t* si, void* uc) {
  if (sig == kWatchdogSig && t_jb != nullptr) {
    // the watchdog's first signal stops the launch at the core's next emulated API call (clean unwinding);
    // only a core that makes none (an endless loop in kernel code) is jumped out of at a later signal
    Core* c = CurOrNull();
    if (c != nullptr && c->L != nullptr && !c->L->watchdog_fired.load()) {
      c->L->watchdog_fired.store(true);
      c->L->abort.store(true);
      return;
    }
  }
  if (t_jb != nullptr) {
    t_fault.sig = sig;
    t_fault.addr = reinterpret_cast<uintptr_t>(si ? si->si_addr : nullptr);
#if defined(__x86_64__)
    t_fault.pc = static_cast<uintptr_t>(static_cast<ucontext_t*>(uc)->uc_mcontext.gregs[REG_RIP]);
#elif defined(__aarch64__)
    t_fault.pc = static_cast<uintptr_t>(static_cast<ucontext_t*>(uc)->uc_mcontext.pc);
#endif
    sigjmp_buf* jb = t_jb;
    t_jb = nullptr;
    siglongjmp(*jb, 1);
  }
  // not in kernel code: hand the signal to whoever had it before
  for (auto& s : g_sigs) {
    if (s.sig != sig) continue;
    if (s.old.sa_flags & SA_SIGINFO) {
      if (s.old.sa_sigaction) s.old.sa_sigaction(sig, si, uc);
      return;
    }
    if (s.old.sa_handler == SIG_IGN) return;
    if (s.old.sa_handler == SIG_DFL) {
      if (sig == kWatchdogSig) return;
      sigaction(sig, &s.old, nullptr);  // the fault re-executes (or abort re-raises) with the default action
      return;
    }
    s.old.sa_handler(sig);
    return;
  }
}

void InstallSignals() {
  std::lock_guard<std::mutex> lk(g_sig_mu);
  if (g_sig_users++ > 0) return;
  struct sigaction sa;
  std::memset(&sa, 0, sizeof(sa));
  sa.sa_sigaction = OnSignal;
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_NODEFER;
  sigemptyset(&sa.sa_mask);
  for (auto& s : g_sigs)
    if (!SkipSig(s.sig)) sigaction(s.sig, &sa, &s.old);
}

void RestoreSignals() {
  std::lock_guard<std::mutex> lk(g_sig_mu);
  if (--g_sig_users > 0) return;
  for (auto& s : g_sigs)
    if (!SkipSig(s.sig)) sigaction(s.sig, &s.old, nullptr);
}

const char* SigName(int sig) {
  switch (sig) {
    case SIGSEGV: return "SIGSEGV (invalid memory access)";
    case SIGBUS: return "SIGBUS (bus error: misaligned or unmapped access)";
    case SIGFPE: return "SIGFPE (arithmetic fault, e.g. integer division by zero)";
    case SIGILL: return "SIGILL (illegal instruction)";
    case SIGABRT: return "SIGABRT (abort / failed assert)";
    default: return "signal";
  }
}

// "function at file:line" of a code address (dladdr, then addr2line when the module has line info).
std::string WhereIs(uintptr_t pc) {
  Dl_info di;
  if (pc == 0 || dladdr(reinterpret_cast<void*>(pc), &di) == 0 || di.dli_fname == nullptr) return "an unknown address";
  std::string out = di.dli_sname ? di.dli_sname : "?";
  const uintptr_t off = pc - reinterpret_cast<uintptr_t>(di.dli_fbase);
  std::string mod = di.dli_fname;
  std::string where = Format("%s+0x%" PRIxPTR, mod.c_str(), off);
  std::string cmd = Format("addr2line -C -f -e '%s' 0x%" PRIxPTR " 2>/dev/null", mod.c_str(), off);
  if (mod.find('\'') == std::string::npos) {
    if (FILE* f = popen(cmd.c_str(), "r")) {
      char fn[1024] = {0}, line[1024] = {0};
      if (std::fgets(fn, sizeof(fn), f) && std::fgets(line, sizeof(line), f)) {
        std::string sfn(fn), sl(line);
        while (!sfn.empty() && (sfn.back() == '\n' || sfn.back() == '\r')) sfn.pop_back();
        while (!sl.empty() && (sl.back() == '\n' || sl.back() == '\r')) sl.pop_back();
        if (!sfn.empty() && sfn != "??") out = sfn;
        const size_t colon = sl.rfind(':');
        if (colon != std::string::npos && colon > 0 && colon + 1 < sl.size() && sl[colon + 1] >= '0' &&
            sl[colon + 1] <= '9' && sl.find("??") == std::string::npos)
          where = sl;  // file:line (the module has debug info, e.g. MS_KVCACHE_SIM_CXXFLAGS=-g)
      }
      pclose(f);
    }
  }
  return out + " (" + where + ")";
}

uint64_t EnvU64(const char* name, uint64_t dflt) {
  const char* e = std::getenv(name);
  if (e == nullptr || *e == 0) return dflt;
  char* end = nullptr;
  const unsigned long long v = std::strtoull(e, &end, 10);
  if (end == e || *end != 0 || v == 0) return dflt;
  return static_cast<uint64_t>(v);
}

double EnvSeconds(const char* name, double dflt) {
  const char* e = std::getenv(name);
  if (e == nullptr || *e == 0) return dflt;
  char* end = nullptr;
  const double v = std::strtod(e, &end);
  if (end == e || *end != 0 || !(v > 0)) return dflt;
  return v;
}

}  // namespace

struct Sched {
  std::mutex mu;
  std::condition_variable cv;
  bool sequential = true;
  bool fibers = false;             // sequential orders on one thread: each core a ucontext fiber
  ucontext_t main_ctx;             // fibers: the scheduler
  std::vector<ucontext_t> ctx;     // fibers: one per core
  std::vector<void*> stacks;
  std::vector<uint32_t> order;  // core indices in run order
  std::vector<uint32_t> pos;    // core index -> position in `order`
  int turn = -1;                // sequential: the core allowed to run
  uint32_t n = 0, arrived = 0, done = 0;
  uint64_t gen = 0;  // barrier generation
  std::vector<uint8_t> at_barrier, finished;
  std::vector<Core*> cores;
  std::unique_ptr<EmulationError> err;  // first error of the launch
  std::exception_ptr other;

  void Record(const EmulationError& e, LaunchCtx& L) {  // caller holds mu
    if (!err && !other) err.reset(new EmulationError(e));
    L.abort.store(true);
    cv.notify_all();
  }
  // sequential: hand the baton to the next core of the order after `from` that can run
  void PassOn(uint32_t from) {
    for (uint32_t p = pos[from] + 1; p < n; ++p) {
      const uint32_t i = order[p];
      if (!finished[i] && !at_barrier[i]) {
        turn = static_cast<int>(i);
        return;
      }
    }
    turn = -1;
  }
};

namespace {
std::string CoreList(const Sched& S, bool barrier) {
  std::string s;
  int k = 0;
  for (uint32_t i = 0; i < S.n; ++i) {
    if ((barrier ? S.at_barrier[i] : S.finished[i]) == 0) continue;
    if (k++ == 8) {
      s += ", ...";
      break;
    }
    s += (s.empty() ? "" : ", ") + std::to_string(i);
  }
  return s;
}
}  // namespace

// SyncAll: every core of the launch must arrive; then the phase is checked and all continue.
void SyncAllBarrier(Core& c) {
  LaunchCtx& L = *c.L;
  Sched& S = *L.sched;
  if (S.fibers) {  // one thread: suspend this core's fiber, the scheduler runs the next core
    if (L.abort.load()) throw LaunchAborted();
    if (S.done > 0) {
      S.Record(CoreError(L, c.idx, "DEADLOCK",
                         Format("core %d calls SyncAll #%u, but core(s) %s already returned without calling it: on "
                                "hardware the cores at the SyncAll wait forever (every core of the launch must call "
                                "SyncAll the same number of times)",
                                c.idx, L.phase + 1, CoreList(S, false).c_str())),
               L);
      throw LaunchAborted();
    }
    S.at_barrier[static_cast<size_t>(c.idx)] = 1;
    ++S.arrived;
    sigjmp_buf* jb = t_jb;
    swapcontext(&S.ctx[static_cast<size_t>(c.idx)], &S.main_ctx);
    t_jb = jb;
    SetCurrent(&c);
    if (L.abort.load()) throw LaunchAborted();
    return;
  }
  std::unique_lock<std::mutex> lk(S.mu);
  if (L.abort.load()) throw LaunchAborted();
  if (S.done > 0) {
    EmulationError e = CoreError(
        L, c.idx, "DEADLOCK",
        Format("core %d calls SyncAll #%u, but core(s) %s already returned without calling it: on hardware the "
               "cores at the SyncAll wait forever (every core of the launch must call SyncAll the same number of "
               "times)",
               c.idx, L.phase + 1, CoreList(S, false).c_str()));
    S.Record(e, L);
    throw LaunchAborted();
  }
  S.at_barrier[static_cast<size_t>(c.idx)] = 1;
  ++S.arrived;
  const uint64_t my_gen = S.gen;
  if (S.arrived == S.n) {
    try {
      PhaseCheck(L, S.cores, false);
      CostSyncAll(L, S.cores);
    } catch (const EmulationError& e) {
      S.Record(e, L);
      throw LaunchAborted();
    }
    S.arrived = 0;
    std::fill(S.at_barrier.begin(), S.at_barrier.end(), 0);
    ++S.gen;
    if (S.sequential) S.turn = static_cast<int>(S.order[0]);
    S.cv.notify_all();
  } else if (S.sequential) {
    S.PassOn(static_cast<uint32_t>(c.idx));
    S.cv.notify_all();
  }
  S.cv.wait(lk, [&] {
    return L.abort.load() || (S.gen != my_gen && (!S.sequential || S.turn == c.idx));
  });
  if (L.abort.load()) throw LaunchAborted();
}

namespace rt {

void SyncAll(bool aiv_only, bool soft, const void* gm, uint64_t gm_bytes, const UbRef* ub, uint32_t ub_bytes,
             int32_t used_cores) {
  Core& c = Cur();
  LaunchCtx& L = *c.L;
  const char* api = soft ? "SyncAll(gmWorkspace, ubWorkspace, usedCores)" : "SyncAll()";
  const uint32_t n = L.block_dim;
  if (!aiv_only) {
    if (soft)
      Fail("SYNCALL_PARAMS", "%s<isAIVOnly = false>: the software SyncAll supports vector-only kernels only", api);
    Fail("DEADLOCK",
         "%s<isAIVOnly = false> in a vector-only kernel: the SyncAll page says a pure vector kernel must use "
         "isAIVOnly = true, otherwise the program hangs (it waits for cube cores that do not take part)",
         api);
  }
  if (!soft && L.caps.npu_arch == 2002)
    Fail("UNSUPPORTED_API",
         "the hardware SyncAll() does not exist on %s (Atlas inference series AI core; the official dav_m200 "
         "implementation reports \"Hardware SyncAll\" unsupported): use the software SyncAll(gmWorkspace, "
         "ubWorkspace)",
         L.caps.soc.c_str());
  if (n > L.caps.aiv_cores)
    Fail("DEADLOCK",
         "%s with block dim %u on %s, which has %u vector cores: the blocks run in several rounds and the cores of "
         "the first round wait forever for blocks that cannot start (SyncAll page: numBlocks must not exceed the "
         "cores that run the operator)",
         api, n, L.caps.soc.c_str(), L.caps.aiv_cores);
  if (soft) {
    if (used_cores < 0 || static_cast<uint32_t>(used_cores) > n)
      Fail("SYNCALL_PARAMS", "%s: usedCores = %d, outside [0, GetBlockNum() = %u]", api, used_cores, n);
    if (used_cores != 0 && static_cast<uint32_t>(used_cores) != n)
      UnsupportedApi("SyncAll(..., usedCores)", "a software SyncAll of a subset of the cores is not emulated");
    const uint64_t need = uint64_t{n} * 32;
    if (gm == nullptr) Fail("SYNCALL_PARAMS", "%s: gmWorkspace has no GM address", api);
    if (gm_bytes != 0 && gm_bytes < need)
      Fail("SYNCALL_PARAMS",
           "%s: gmWorkspace holds %" PRIu64 " bytes; the SyncAll page requires at least GetBlockNum() * 32 = %" PRIu64
           " bytes, initialised to 0",
           api, gm_bytes, need);
    GmCheck(c, -1, gm, need, false, api);
    if (ub == nullptr || ub_bytes < need)
      Fail("SYNCALL_PARAMS",
           "%s: ubWorkspace holds %u bytes; the SyncAll page requires at least GetBlockNum() * 32 = %" PRIu64 " bytes",
           api, ub_bytes, need);
    CheckHandle(c, *ub, api, "ubWorkspace");
  }
  Barrier(Pipe::ALL);  // the core's own pipes drain before it signals the other cores
  c.spin_count = 0;
  SyncAllBarrier(c);
}

}  // namespace rt

namespace {

void RunCore(LaunchCtx& L, const KernelEntry& k, std::vector<void*>& args, Core& c) {
  c.L = &L;
  c.ub.assign(L.caps.ub_size, 0);
  c.valid.assign(L.caps.ub_size, 0);
  c.blocks.assign(L.caps.ub_size / 32 + 1, BlockShadow());
  c.rng = Mix(L.seed ^ Mix(static_cast<uint64_t>(c.idx) + 1)) | 1;
  SetCurrent(&c);
  try {
    k.invoke(k.fn, args.data(), static_cast<int>(args.size()));
    CoreFinish(c);
    CostCoreEnd(c);
  } catch (const EmulationError&) {
    SetCurrent(nullptr);
    throw;
  } catch (const LaunchAborted&) {
    SetCurrent(nullptr);
    throw;
  } catch (const std::exception& e) {
    EmulationError err = MakeError("KERNEL_EXCEPTION", std::string("the kernel threw a C++ exception: ") + e.what());
    SetCurrent(nullptr);
    throw err;
  }
  SetCurrent(nullptr);
  // keep the statistics, drop the per-core memory
  std::vector<uint8_t>().swap(c.ub);
  std::vector<uint8_t>().swap(c.valid);
  std::vector<BlockShadow>().swap(c.blocks);
}

struct CoreOutcome {
  std::unique_ptr<EmulationError> err;
  std::exception_ptr other;
  bool aborted = false;
};

// Runs the kernel on core c with fault isolation: a signal in kernel code jumps back here (KERNEL_FAULT,
// or DEADLOCK for the watchdog's signal). Results go to *out (memory, not registers: sigsetjmp).
void RunIsolated(LaunchCtx& L, const KernelEntry& k, std::vector<void*>* args, Core* c, CoreOutcome* out) {
  sigjmp_buf jb;
  if (sigsetjmp(jb, 1) == 0) {
    t_jb = &jb;
    try {
      RunCore(L, k, *args, *c);
    } catch (const EmulationError& e) {
      out->err.reset(new EmulationError(e));
    } catch (const LaunchAborted&) {
      out->aborted = true;
      if (L.watchdog_fired.load())
        out->err.reset(new EmulationError(CoreError(
            L, c->idx, "DEADLOCK",
            Format("core %d was still running after the watchdog's %g s (MS_KVCACHE_SIM_WATCHDOG_S); it was "
                   "stopped at its next emulated API call: an endless loop or a far too long kernel; on hardware "
                   "the launch hangs",
                   c->idx, L.watchdog_s))));
    } catch (...) {
      out->other = std::current_exception();
    }
    t_jb = nullptr;
    return;
  }
  SetCurrent(nullptr);
  const FaultInfo f = t_fault;
  if (f.sig == kWatchdogSig) {
    out->err.reset(new EmulationError(CoreError(
        L, c->idx, "DEADLOCK",
        Format("core %d was still running after the watchdog's %g s (MS_KVCACHE_SIM_WATCHDOG_S) and called no "
               "emulated GM API after the launch was stopped: an endless loop (e.g. a spin on a value no core "
               "changes), at %s; on hardware the launch hangs",
               c->idx, L.watchdog_s, WhereIs(f.pc).c_str()))));
  } else {
    std::string at = f.sig == SIGSEGV || f.sig == SIGBUS ? Format(" (faulting address %p)", reinterpret_cast<void*>(f.addr)) : "";
    out->err.reset(new EmulationError(CoreError(
        L, c->idx, "KERNEL_FAULT",
        Format("kernel code raised %s%s in %s: on hardware an AI core exception that fails the launch; the "
               "emulation stopped this core (the caller's arrays are untouched)",
               SigName(f.sig), at.c_str(), WhereIs(f.pc).c_str()))));
  }
}

// Bookkeeping when a core ends: the first error fails the launch; a core returning while others wait at a
// SyncAll is DEADLOCK; the sequential thread mode passes the baton on.
void CoreEnd(LaunchCtx& L, Core& c, CoreOutcome& out) {
  Sched& S = *L.sched;
  std::unique_lock<std::mutex> lk(S.mu);
  const uint32_t i = static_cast<uint32_t>(c.idx);
  S.finished[i] = 1;
  ++S.done;
  if (out.err) {
    S.Record(*out.err, L);
  } else if (out.other) {
    if (!S.err && !S.other) S.other = out.other;
    L.abort.store(true);
  } else if (!out.aborted && !L.abort.load() && S.arrived > 0) {
    S.Record(CoreError(L, c.idx, "DEADLOCK",
                       Format("core %d returned without calling SyncAll #%u, at which core(s) %s wait: on hardware "
                              "they wait forever (every core of the launch must call SyncAll the same number of times)",
                              c.idx, L.phase + 1, CoreList(S, true).c_str())),
             L);
  }
  if (S.sequential && !S.fibers && !L.abort.load()) S.PassOn(i);
  S.cv.notify_all();
}

// One core on its own thread: wait for the baton, run with fault isolation, report the end.
void CoreThread(LaunchCtx& L, const KernelEntry& k, std::vector<void*> args, Core& c) {
  Sched& S = *L.sched;
  {
    std::unique_lock<std::mutex> lk(S.mu);
    S.cv.wait(lk, [&] { return L.abort.load() || !S.sequential || S.turn == c.idx; });
  }
  CoreOutcome out;
  out.aborted = L.abort.load();
  const size_t alt_size = 1 << 16;
  std::unique_ptr<char[]> alt(new char[alt_size]);
  stack_t ss, old_ss;
  ss.ss_sp = alt.get();
  ss.ss_size = alt_size;
  ss.ss_flags = 0;
  const bool have_alt = sigaltstack(&ss, &old_ss) == 0;
  if (!out.aborted) RunIsolated(L, k, &args, &c, &out);
  if (have_alt) {
    old_ss.ss_flags &= ~SS_ONSTACK;
    sigaltstack(&old_ss, nullptr);
  }
  CoreEnd(L, c, out);
}

// ---- fibers (forward / reverse): every core a ucontext on the launching thread
struct FiberArg {
  LaunchCtx* L;
  const KernelEntry* k;
  std::vector<void*> args;
  Core* c;
};

void FiberMain(unsigned lo, unsigned hi) {
  FiberArg* a = reinterpret_cast<FiberArg*>((static_cast<uintptr_t>(hi) << 32) | static_cast<uintptr_t>(lo));
  Sched& S = *a->L->sched;
  {
    CoreOutcome out;
    RunIsolated(*a->L, *a->k, &a->args, a->c, &out);
    CoreEnd(*a->L, *a->c, out);
  }
  setcontext(&S.main_ctx);  // never returns
}

constexpr size_t kFiberStack = size_t{8} << 20;  // reserved lazily (MAP_NORESERVE), a guard page below
std::mutex g_stack_mu;
std::vector<void*>& StackPool() {
  static auto* v = new std::vector<void*>();
  return *v;
}
void* GetStack() {
  {
    std::lock_guard<std::mutex> lk(g_stack_mu);
    if (!StackPool().empty()) {
      void* p = StackPool().back();
      StackPool().pop_back();
      return p;
    }
  }
  void* p = mmap(nullptr, kFiberStack, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK,
                 -1, 0);
  if (p == MAP_FAILED) return nullptr;
  mprotect(p, static_cast<size_t>(sysconf(_SC_PAGESIZE)), PROT_NONE);
  return p;
}
void PutStack(void* p) {
  std::lock_guard<std::mutex> lk(g_stack_mu);
  if (StackPool().size() < 64) StackPool().push_back(p);
  else munmap(p, kFiberStack);
}

// the watchdog of the fiber mode: a per-thread timer that signals this thread after the budget and then
// every 100 ms (the signal jumps out of kernel code only; elsewhere it is ignored)
struct ThreadTimer {
  timer_t id{};
  bool armed = false;
  ThreadTimer(double seconds) {
    struct sigevent sev;
    std::memset(&sev, 0, sizeof(sev));
    sev.sigev_notify = SIGEV_THREAD_ID;
    sev.sigev_signo = kWatchdogSig;
    sev._sigev_un._tid = static_cast<pid_t>(syscall(SYS_gettid));
    if (timer_create(CLOCK_MONOTONIC, &sev, &id) != 0) return;
    struct itimerspec its;
    std::memset(&its, 0, sizeof(its));
    its.it_value.tv_sec = static_cast<time_t>(seconds);
    its.it_value.tv_nsec = static_cast<long>((seconds - static_cast<double>(its.it_value.tv_sec)) * 1e9);
    if (its.it_value.tv_sec == 0 && its.it_value.tv_nsec == 0) its.it_value.tv_nsec = 1000000;
    its.it_interval.tv_nsec = 100000000;
    armed = timer_settime(id, 0, &its, nullptr) == 0;
    if (!armed) timer_delete(id);
  }
  ~ThreadTimer() {
    if (!armed) return;
    timer_delete(id);
    // drop a tick still pending for this thread, so it cannot stop a later launch
    sigset_t m, old;
    sigemptyset(&m);
    sigaddset(&m, kWatchdogSig);
    pthread_sigmask(SIG_BLOCK, &m, &old);
    struct timespec zero = {0, 0};
    while (sigtimedwait(&m, nullptr, &zero) > 0) {
    }
    pthread_sigmask(SIG_SETMASK, &old, nullptr);
  }
};

void RunFibers(LaunchCtx& L, const KernelEntry& k, std::vector<void*>& args, Sched& S) {
  const uint32_t n = S.n;
  S.ctx.resize(n);
  S.stacks.assign(n, nullptr);
  std::vector<uint8_t> started(n, 0);
  std::vector<std::unique_ptr<FiberArg>> fargs(n);
  // the signal handler runs on an alternate stack (a fault may be a fiber stack overflow)
  static thread_local std::unique_ptr<char[]> alt;
  stack_t cur;
  bool own_alt = false;
  stack_t old_ss;
  if (sigaltstack(nullptr, &cur) == 0 && (cur.ss_flags & SS_DISABLE)) {
    if (!alt) alt.reset(new char[1 << 16]);
    stack_t ss;
    ss.ss_sp = alt.get();
    ss.ss_size = 1 << 16;
    ss.ss_flags = 0;
    own_alt = sigaltstack(&ss, &old_ss) == 0;
  }
  ThreadTimer timer(L.watchdog_s);
  auto resume = [&](uint32_t i) {
    if (!started[i]) {
      started[i] = 1;
      void* st = GetStack();
      if (st == nullptr) {
        S.Record(CoreError(L, static_cast<int>(i), "LAUNCH", "cannot map a stack for the core"), L);
        S.finished[i] = 1;
        ++S.done;
        return;
      }
      S.stacks[i] = st;
      fargs[i].reset(new FiberArg{&L, &k, args, S.cores[i]});
      getcontext(&S.ctx[i]);
      S.ctx[i].uc_stack.ss_sp = st;
      S.ctx[i].uc_stack.ss_size = kFiberStack;
      S.ctx[i].uc_link = nullptr;
      const uintptr_t a = reinterpret_cast<uintptr_t>(fargs[i].get());
      makecontext(&S.ctx[i], reinterpret_cast<void (*)()>(FiberMain), 2, static_cast<unsigned>(a & 0xffffffffu),
                  static_cast<unsigned>(a >> 32));
    }
    swapcontext(&S.main_ctx, &S.ctx[i]);
    SetCurrent(nullptr);
    t_jb = nullptr;
  };
  while (!L.abort.load() && S.done < n) {
    for (uint32_t p = 0; p < n && !L.abort.load(); ++p) {
      const uint32_t i = S.order[p];
      if (!S.finished[i] && !S.at_barrier[i]) resume(i);
    }
    if (L.abort.load() || S.done == n) break;
    if (S.arrived == n) {  // every core at the SyncAll: check the phase, then run them all again
      try {
        PhaseCheck(L, S.cores, false);
        CostSyncAll(L, S.cores);
      } catch (const EmulationError& e) {
        S.Record(e, L);
        break;
      }
      S.arrived = 0;
      std::fill(S.at_barrier.begin(), S.at_barrier.end(), 0);
    }
  }
  // unwind the cores suspended at a SyncAll (they see the abort and return)
  for (uint32_t i = 0; i < n; ++i)
    if (started[i] && !S.finished[i]) resume(i);
  for (uint32_t i = 0; i < n; ++i)
    if (S.stacks[i]) PutStack(S.stacks[i]);
  if (own_alt) sigaltstack(&old_ss, nullptr);
}

}  // namespace

std::vector<CoreStats> Execute(LaunchCtx& L, const KernelEntry& k, std::vector<void*>& args, const std::string& order) {
  const uint32_t n = L.block_dim;
  std::vector<std::unique_ptr<Core>> cores;
  Sched S;
  S.n = n;
  S.sequential = order != "threads";
  S.at_barrier.assign(n, 0);
  S.finished.assign(n, 0);
  S.pos.assign(n, 0);
  for (uint32_t i = 0; i < n; ++i) {
    cores.emplace_back(new Core());
    cores.back()->idx = static_cast<int>(i);
    cores.back()->L = &L;
    S.cores.push_back(cores.back().get());
    S.order.push_back(order == "reverse" ? n - 1 - i : i);
  }
  for (uint32_t p = 0; p < n; ++p) S.pos[S.order[p]] = p;
  L.concurrent = !S.sequential;
  L.sched = &S;
  L.spin_limit = EnvU64("MS_KVCACHE_SIM_SPIN_LIMIT", 1000000);
  L.watchdog_s = EnvSeconds("MS_KVCACHE_SIM_WATCHDOG_S", 300.0);
  S.fibers = S.sequential && !UnderAsan();  // ASan does not follow ucontext stack switches: a thread per core
  InstallSignals();
  if (S.fibers) {
    RunFibers(L, k, args, S);
    RestoreSignals();
    L.sched = nullptr;
    if (S.err) throw *S.err;
    if (S.other) std::rethrow_exception(S.other);
    PhaseCheck(L, S.cores, true);
    std::vector<CoreStats> st;
    for (auto& c : cores) st.push_back(c->st);
    return st;
  }
  std::vector<std::thread> th;
  th.reserve(n);
  try {
    for (uint32_t i = 0; i < n; ++i) th.emplace_back(CoreThread, std::ref(L), std::cref(k), args, std::ref(*cores[i]));
  } catch (...) {
    std::lock_guard<std::mutex> lk(S.mu);
    L.abort.store(true);
    S.cv.notify_all();
  }
  {
    std::unique_lock<std::mutex> lk(S.mu);
    if (S.sequential) S.turn = static_cast<int>(S.order[0]);
    S.cv.notify_all();
    const auto budget = std::chrono::duration_cast<std::chrono::steady_clock::duration>(
        std::chrono::duration<double>(L.watchdog_s));
    const auto grace = std::min<std::chrono::steady_clock::duration>(budget / 2, std::chrono::seconds(1));
    const auto deadline = std::chrono::steady_clock::now() + budget;
    const size_t started = th.size();
    if (!S.cv.wait_until(lk, deadline, [&] { return S.done == started; })) {
      L.watchdog_fired.store(true);
      L.abort.store(true);  // cores calling an emulated API stop now
      S.cv.notify_all();
      if (!S.cv.wait_for(lk, grace, [&] { return S.done == started; })) {
        for (uint32_t i = 0; i < started; ++i)
          if (!S.finished[i]) pthread_kill(th[i].native_handle(), kWatchdogSig);
        S.cv.wait(lk, [&] { return S.done == started; });
      }
    }
  }
  for (auto& t : th) t.join();
  RestoreSignals();
  L.sched = nullptr;
  if (S.err) throw *S.err;
  if (S.other) std::rethrow_exception(S.other);
  if (th.size() < n) FailLaunch("LAUNCH", L.op, "cannot start the core threads");
  PhaseCheck(L, S.cores, true);
  std::vector<CoreStats> st;
  for (auto& c : cores) st.push_back(c->st);
  return st;
}

namespace {

uint64_t DTypeBytes(const std::string& d, const std::string& op) {
  static const std::map<std::string, uint64_t> m = {
      {"float16", 2}, {"bfloat16", 2}, {"float32", 4}, {"float64", 8}, {"int8", 1},  {"uint8", 1},
      {"int16", 2},   {"uint16", 2},   {"int32", 4},   {"uint32", 4},  {"int64", 8}, {"uint64", 8}, {"bool", 1}};
  auto it = m.find(d);
  if (it == m.end()) FailLaunch("LAUNCH", op, "unsupported dtype '" + d + "'");
  return it->second;
}

void Remember(const LaunchResult& r) {
  std::lock_guard<std::mutex> lk(g_last_mu);
  g_last_launch = r;
}

}  // namespace

// ============================================================================================ RunOp
LaunchResult RunOp(const std::string& op_type, std::vector<ParamArg>& inputs, std::vector<ParamArg>& outputs,
                   const std::map<std::string, simhost::AttrValue>& attrs, const LaunchOptions& opt_in) {
  const LaunchOptions opt = Resolve(opt_in, op_type);
  const simhost::OpDefInfo* defp = nullptr;
  try {
    defp = &simhost::GetOpDef(op_type);
  } catch (const simhost::HostError& e) {
    throw EmulationError(e.rule, op_type, -1, e.what(), e.what());
  }
  const simhost::OpDefInfo& def = *defp;
  if (inputs.size() != def.inputs.size())
    FailLaunch("LAUNCH", op_type, Format("expected %zu inputs (OpDef order), got %zu", def.inputs.size(), inputs.size()));
  if (outputs.size() != def.outputs.size())
    FailLaunch("LAUNCH", op_type,
               Format("expected %zu outputs (OpDef order), got %zu", def.outputs.size(), outputs.size()));
  // ---- descriptions for the tiling function
  std::vector<simhost::TensorDesc> in_descs, out_descs;
  std::vector<uint32_t> counts;
  bool any_dynamic = false;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const bool dyn = def.inputs[i].param_type == "dynamic";
    any_dynamic = any_dynamic || dyn;
    if (!dyn && inputs[i].items.size() != 1)
      FailLaunch("LAUNCH", op_type, Format("input %zu ('%s') takes one tensor", i, def.inputs[i].name.c_str()));
    for (TensorArg& t : inputs[i].items) {
      simhost::TensorDesc d;
      d.shape = t.shape;
      d.dtype = t.dtype;
      d.present = t.present && t.data != nullptr;
      if (!d.present) d.shape.clear();
      if (d.present && def.inputs[i].param_type == "required" && false) {}
      in_descs.push_back(d);
    }
    counts.push_back(static_cast<uint32_t>(inputs[i].items.size()));
  }
  // ref outputs: an output named like an input and given without data aliases that input
  for (size_t j = 0; j < outputs.size(); ++j) {
    if (outputs[j].items.size() != 1)
      FailLaunch("LAUNCH", op_type, Format("output %zu ('%s') takes one tensor", j, def.outputs[j].name.c_str()));
    TensorArg& t = outputs[j].items[0];
    if (t.data == nullptr) {
      for (size_t i = 0; i < def.inputs.size(); ++i) {
        if (def.inputs[i].name == def.outputs[j].name && inputs[i].items.size() == 1) {
          t = inputs[i].items[0];
          break;
        }
      }
      if (t.data == nullptr)
        FailLaunch("LAUNCH", op_type, Format("output %zu ('%s') has no buffer", j, def.outputs[j].name.c_str()));
    }
    simhost::TensorDesc d;
    d.shape = t.shape;
    d.dtype = t.dtype;
    out_descs.push_back(d);
  }
  simhost::TilingOptions topt;
  if (any_dynamic) topt.instance_counts = counts;
  simhost::TilingResult tr;
  try {
    tr = simhost::RunTiling(op_type, in_descs, out_descs, attrs, opt.soc, topt);
  } catch (const simhost::HostError& e) {
    throw EmulationError(e.rule, op_type, -1, e.what(), e.what());
  }
  const std::string kname = SnakeCase(op_type);
  Caps caps;
  try {
    caps = CapsFor(opt.soc);
  } catch (const simhost::HostError& e) {
    throw EmulationError(e.rule, op_type, -1, e.what(), e.what());
  }
  const KernelEntry k = FindKernel(kname, op_type, caps);
  const size_t want = def.inputs.size() + def.outputs.size() + 2;
  if (static_cast<size_t>(k.nargs) != want)
    FailLaunch("LAUNCH", op_type,
               Format("kernel '%s' takes %d GM_ADDR parameters; the OpDef needs %zu (%zu inputs, %zu outputs, "
                      "workspace, tiling)",
                      kname.c_str(), k.nargs, want, def.inputs.size(), def.outputs.size()));
  if (tr.block_dim == 0) FailLaunch("LAUNCH", op_type, "the tiling function set block dim 0");
  // ---- GM
  auto L = std::make_unique<LaunchCtx>();
  L->op = op_type;
  L->kernel = kname;
  L->caps = caps;
  L->block_dim = tr.block_dim;
  L->tiling_key = tr.tiling_key;
  L->seed = opt.seed ? opt.seed : 0x5eed5eedull;
  L->hazards = opt.hazards != 0;
  {
    std::vector<std::string> names;
    for (const auto& p : def.inputs) names.push_back(p.name);
    for (const auto& p : def.outputs) names.push_back(p.name);
    SetupCost(*L, opt, names, op_type, false);
  }
  auto is_host = [&](const std::string& nm) {
    return std::find(opt.host.begin(), opt.host.end(), nm) != opt.host.end();
  };
  std::vector<const TensorArg*> all;
  for (auto& p : inputs)
    for (auto& t : p.items) all.push_back(&t);
  for (auto& p : outputs)
    for (auto& t : p.items) all.push_back(&t);
  const bool copy = DecideCopy(opt.gm_copy, all);
  Arena arena;
  Prepared prep;
  GmBuilder gm(*L, arena, copy);
  std::vector<void*> args;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const std::string nm = def.inputs[i].name;
    if (def.inputs[i].param_type != "dynamic") {
      args.push_back(gm.Add(inputs[i].items[0], Format("input %zu '%s'", i, nm.c_str()), RegionKind::Input, prep,
                            is_host(nm)));
      continue;
    }
    // CANN ListTensorDesc layout: [ptr offset][per tensor: dim | index << 32, dims...][data pointers]
    const auto& items = inputs[i].items;
    const size_t dim = items.empty() ? 0 : items[0].shape.size();
    for (const auto& t : items)
      if (t.shape.size() != dim)
        FailLaunch("LAUNCH", op_type, Format("DYNAMIC input '%s': all instances must have the same rank", nm.c_str()));
    const size_t desc_words = dim == 0 ? 2 : 1 + dim;
    const uint64_t ptr_off = 8 + items.size() * desc_words * 8;
    const uint64_t bytes = ptr_off + items.size() * 8;
    std::vector<uint8_t*> ptrs;
    for (size_t k2 = 0; k2 < items.size(); ++k2)
      ptrs.push_back(gm.Add(items[k2], Format("input %zu '%s'[%zu]", i, nm.c_str(), k2), RegionKind::Input, prep,
                            is_host(nm)));
    uint8_t* desc = gm.AddRaw(bytes, Format("ListTensorDesc of input %zu '%s'", i, nm.c_str()), RegionKind::ListDesc,
                              false);
    uint64_t* w = reinterpret_cast<uint64_t*>(desc);
    w[0] = ptr_off;
    for (size_t k2 = 0; k2 < items.size(); ++k2) {
      uint64_t* d = w + 1 + k2 * desc_words;
      d[0] = static_cast<uint64_t>(dim) | (static_cast<uint64_t>(k2) << 32);
      if (dim == 0) d[1] = 0xffffffffull;
      for (size_t x = 0; x < dim; ++x) d[1 + x] = static_cast<uint64_t>(items[k2].shape[x]);
      w[ptr_off / 8 + k2] = reinterpret_cast<uint64_t>(ptrs[k2]);
    }
    args.push_back(desc);
  }
  for (size_t j = 0; j < outputs.size(); ++j)
    args.push_back(gm.Add(outputs[j].items[0], Format("output %zu '%s'", j, def.outputs[j].name.c_str()),
                          RegionKind::Output, prep, is_host(def.outputs[j].name)));
  uint64_t ws = 0;
  for (int64_t s : tr.workspace_sizes) ws += s > 0 ? static_cast<uint64_t>(s) : 0;
  uint8_t* wsp = nullptr;
  if (ws > 0) {
    wsp = gm.AddRaw(ws, "workspace", RegionKind::Workspace, true);
    const uint64_t sys = std::min<uint64_t>(ws, L->caps.sys_ws);
    Garbage(L->seed ^ 0x77, wsp + sys, ws - sys);
    TrackWorkspace(*L, wsp + sys, ws - sys);
  }
  L->workspace = wsp;
  L->workspace_size = ws;
  const uint64_t tcap = std::max<uint64_t>({tr.tiling_data.size(), static_cast<uint64_t>(tr.tiling_capacity), 8});
  uint8_t* tiling = gm.AddRaw(tcap, "tiling data", RegionKind::Tiling, false);
  if (!tr.tiling_data.empty()) std::memcpy(tiling, tr.tiling_data.data(), tr.tiling_data.size());
  L->tiling = tiling;
  L->tiling_written = tr.tiling_data.size();
  args.push_back(wsp);
  args.push_back(tiling);
  // ---- run
  LaunchResult res;
  res.op = op_type;
  res.kernel = kname;
  res.soc = L->caps.soc;
  res.npu_arch = L->caps.npu_arch;
  res.order = opt.order;
  res.block_dim = L->block_dim;
  res.tiling_key = L->tiling_key;
  res.workspace_bytes = ws;
  res.tiling_fields = tr.fields;
  res.gm_copied = copy;
  res.cores = Execute(*L, k, args, opt.order);
  CostSummary(*L, res);
  for (auto& b : prep.back) std::memcpy(b.host, b.arena, b.n);
  Remember(res);
  return res;
}

// ============================================================================================ RunKernel
LaunchResult RunKernel(const std::string& kernel, std::vector<TensorArg>& targs, uint32_t block_dim,
                       const std::vector<uint8_t>& tiling_bytes, uint64_t tiling_key, uint64_t workspace_bytes,
                       bool with_ws_tiling, const LaunchOptions& opt_in) {
  const LaunchOptions opt = Resolve(opt_in, kernel);
  Caps caps;
  try {
    caps = CapsFor(opt.soc);
  } catch (const simhost::HostError& e) {
    throw EmulationError(e.rule, kernel, -1, e.what(), e.what());
  }
  const KernelEntry k = FindKernel(kernel, kernel, caps);
  const size_t want = targs.size() + (with_ws_tiling ? 2 : 0);
  if (static_cast<size_t>(k.nargs) != want)
    FailLaunch("LAUNCH", kernel,
               Format("kernel '%s' takes %d GM_ADDR parameters, %zu given%s", kernel.c_str(), k.nargs, want,
                      with_ws_tiling ? " (including workspace and tiling)" : ""));
  if (block_dim == 0 || block_dim > 65535) FailLaunch("LAUNCH", kernel, Format("block dim %u outside [1, 65535]", block_dim));
  auto L = std::make_unique<LaunchCtx>();
  L->op = kernel;
  L->kernel = kernel;
  L->caps = caps;
  L->block_dim = block_dim;
  L->tiling_key = tiling_key;
  L->seed = opt.seed ? opt.seed : 0x5eed5eedull;
  L->hazards = opt.hazards != 0;
  std::vector<std::string> arg_names;  // kernel parameter names, else indices
  for (size_t i = 0; i < targs.size(); ++i)
    arg_names.push_back(i < k.arg_names.size() && !k.arg_names[i].empty() ? k.arg_names[i] : std::to_string(i));
  SetupCost(*L, opt, arg_names, kernel, true);
  auto is_host = [&](size_t i) {
    return std::find(opt.host.begin(), opt.host.end(), arg_names[i]) != opt.host.end() ||
           std::find(opt.host.begin(), opt.host.end(), std::to_string(i)) != opt.host.end();
  };
  std::vector<const TensorArg*> all;
  for (auto& t : targs) all.push_back(&t);
  const bool copy = DecideCopy(opt.gm_copy, all);
  Arena arena;
  Prepared prep;
  GmBuilder gm(*L, arena, copy);
  std::vector<void*> args;
  for (size_t i = 0; i < targs.size(); ++i)
    args.push_back(gm.Add(targs[i],
                          i < k.arg_names.size() && !k.arg_names[i].empty()
                              ? Format("argument %zu '%s'", i, k.arg_names[i].c_str())
                              : Format("argument %zu", i),
                          RegionKind::Input, prep, is_host(i)));
  uint8_t* wsp = nullptr;
  if (workspace_bytes > 0) {
    wsp = gm.AddRaw(workspace_bytes, "workspace", RegionKind::Workspace, true);
    const uint64_t sys = std::min<uint64_t>(workspace_bytes, L->caps.sys_ws);
    Garbage(L->seed ^ 0x77, wsp + sys, workspace_bytes - sys);
    TrackWorkspace(*L, wsp + sys, workspace_bytes - sys);
  }
  L->workspace = wsp;
  L->workspace_size = workspace_bytes;
  const uint64_t tcap = std::max<uint64_t>(tiling_bytes.size(), 8);
  uint8_t* tiling = gm.AddRaw(tcap, "tiling data", RegionKind::Tiling, false);
  if (!tiling_bytes.empty()) std::memcpy(tiling, tiling_bytes.data(), tiling_bytes.size());
  L->tiling = tiling;
  L->tiling_written = tiling_bytes.size();
  if (with_ws_tiling) {
    args.push_back(wsp);
    args.push_back(tiling);
  }
  LaunchResult res;
  res.op = kernel;
  res.kernel = kernel;
  res.soc = L->caps.soc;
  res.npu_arch = L->caps.npu_arch;
  res.order = opt.order;
  res.block_dim = block_dim;
  res.tiling_key = tiling_key;
  res.workspace_bytes = workspace_bytes;
  res.gm_copied = copy;
  res.cores = Execute(*L, k, args, opt.order);
  CostSummary(*L, res);
  for (auto& b : prep.back) std::memcpy(b.host, b.arena, b.n);
  Remember(res);
  return res;
}

}  // namespace ascendc_sim

// ============================================================================================ AOT entry
using ascendc_sim::Format;

extern "C" const char* ascendc_sim_last_error() {
  static thread_local std::string s;
  s = ascendc_sim::LastError();
  return s.c_str();
}

namespace {
// A failing AOT call: the reason (plus the op's hint for this rule, if any) is kept for last_error(),
// printed once, as one line, on stderr, and returned (the AOT entry throws it to MindSpore).
struct AliasRefused {};

std::string ReportAotFailure(const std::string& op, const std::string& rule, const std::string& what) {
  std::string msg = what;
  const std::string hint = rule.empty() ? std::string() : ascendc_sim::ErrorHint(op, rule);
  if (!hint.empty()) msg += " [" + hint + "]";
  ascendc_sim::SetLastError(msg);
  std::string line = msg;
  for (char& ch : line) {
    if (ch == '\n' || ch == '\r') ch = ' ';
  }
  std::fprintf(stderr, "ms_kvcache sim: %s\n", line.c_str());
  std::fflush(stderr);
  return msg;
}
// `what` led by the public op name of the launch (the primitive's mskv_op_name attribute) when that op is
// not the OpType's own (reshape_and_cache_merged served by MskvReshapeAndCacheQuant), so a graph-mode
// tiling or emulation error names the op the user called, as the PyNative one does; else `what` as is.
std::string PublicNamed(const std::string& op, void* extra, const std::string& what) {
  auto* ex = static_cast<mindspore::AotExtra*>(extra);
  if (ex == nullptr || !ex->HasAttr("mskv_op_name")) return what;
  const std::string pub = ex->GetAttrStr("mskv_op_name");
  std::string own = "Mskv";  // reshape_and_cache -> MskvReshapeAndCache
  bool up = true;
  for (char ch : pub) {
    if (ch == '_') {
      up = true;
      continue;
    }
    own += up ? static_cast<char>(std::toupper(static_cast<unsigned char>(ch))) : ch;
    up = false;
  }
  if (pub.empty() || own == op || what.compare(0, pub.size() + 1, pub + ":") == 0) return what;
  return pub + ": " + what;
}
// The ms_kvcache alias rule of a launch (graph mode, ops.Custom): the primitive's attributes
// mskv_disjoint (flat indices of the inputs the op writes), mskv_disjoint_read (inputs read whole that
// must not overlap a written one), mskv_arg_names (';'-separated argument names) and mskv_op_name. ""
// if the tensors are disjoint (or the attributes are absent), else the message naming both arguments.
// Checked before the emulation runs, so two caches over one buffer are this error, not a GM_RACE or
// GM_WRITE_CONFLICT between the cores that write them.
std::string AliasProblem(const std::string& op, int nparam, void** params, int* ndims, int64_t** shapes,
                         const char** dtypes, mindspore::AotExtra* ex) {
  if (ex == nullptr || !ex->HasAttr("mskv_disjoint")) return std::string();
  struct Span {
    uintptr_t lo, hi;
    int index;
    bool written;
  };
  std::vector<Span> spans;
  auto add = [&](int64_t i, bool w) {
    if (i < 0 || i >= nparam || params[i] == nullptr || dtypes[i] == nullptr) return;
    uint64_t n = ascendc_sim::DTypeBytes(dtypes[i], op);
    for (int d = 0; d < ndims[i]; ++d) n *= static_cast<uint64_t>(shapes[i][d] < 0 ? 0 : shapes[i][d]);
    if (n == 0) return;
    const auto lo = reinterpret_cast<uintptr_t>(params[i]);
    spans.push_back(Span{lo, lo + n, static_cast<int>(i), w});
  };
  for (int64_t i : ex->GetAttrIntVec("mskv_disjoint")) add(i, true);
  if (ex->HasAttr("mskv_disjoint_read"))
    for (int64_t i : ex->GetAttrIntVec("mskv_disjoint_read")) add(i, false);
  std::sort(spans.begin(), spans.end(),
            [](const Span& a, const Span& b) { return a.lo != b.lo ? a.lo < b.lo : a.index < b.index; });
  const Span* reach_any = nullptr;
  const Span* reach_written = nullptr;
  for (const Span& s : spans) {
    const Span* other = s.written ? reach_any : reach_written;  // read tensors may overlap each other
    if (other != nullptr && s.lo < other->hi) {
      std::vector<std::string> names;
      const std::string all = ex->HasAttr("mskv_arg_names") ? ex->GetAttrStr("mskv_arg_names") : std::string();
      for (size_t p = 0; !all.empty() && p <= all.size();) {
        const size_t q = all.find(';', p);
        names.push_back(all.substr(p, q == std::string::npos ? std::string::npos : q - p));
        if (q == std::string::npos) break;
        p = q + 1;
      }
      auto name = [&](int i) {
        return i < static_cast<int>(names.size()) ? names[i] : "input " + std::to_string(i);
      };
      const Span& first = other->index < s.index ? *other : s;
      const Span& second = other->index < s.index ? s : *other;
      const bool same = first.lo == second.lo && first.hi == second.hi;
      const std::string opname = ex->HasAttr("mskv_op_name") ? ex->GetAttrStr("mskv_op_name") : op;
      if (first.written && second.written) {
        const std::string how = same ? "the same memory as" :
            "memory sharing bytes " + std::to_string(std::max(first.lo, second.lo) - first.lo) + ".." +
            std::to_string(std::min(first.hi, second.hi) - first.lo) + " of";
        return opname + ": argument '" + name(second.index) + "': expected a distinct cache tensor (no memory "
               "shared with another argument the op writes), got " + how + " '" + name(first.index) +
               "' (in a graph: the same Parameter given twice, or two Parameters over one buffer); nothing was "
               "written";
      }
      const Span& w = first.written ? first : second;
      const Span& r = first.written ? second : first;
      return opname + ": argument '" + name(w.index) + "': expected a tensor sharing no memory with the tensors "
             "the op reads, got " + (same ? "the same memory as" : "memory shared with") + " '" + name(r.index) +
             "'; writing it would change the data being read; nothing was written";
    }
    if (reach_any == nullptr || s.hi > reach_any->hi) reach_any = &s;
    if (s.written && (reach_written == nullptr || s.hi > reach_written->hi)) reach_written = &s;
  }
  return std::string();
}
}  // namespace

extern "C" int ascendc_sim_aot_launch(const char* op_type, int nparam, void** params, int* ndims, int64_t** shapes,
                                      const char** dtypes, void* extra) {
  using namespace ascendc_sim;
  const std::string op = op_type ? op_type : "";
  std::string failed;  // the message of a failed call (reported by ReportAotFailure)
  try {
    const simhost::OpDefInfo& def = simhost::GetOpDef(op);
    auto* ex = static_cast<mindspore::AotExtra*>(extra);
    const std::string alias = AliasProblem(op, nparam, params, ndims, shapes, dtypes, ex);
    if (!alias.empty()) {
      failed = ReportAotFailure(op, "", alias);
      throw AliasRefused();
    }
    std::map<std::string, simhost::AttrValue> attrs;
    if (ex != nullptr) {
      for (const auto& a : def.attrs) {
        if (!ex->HasAttr(a.name)) continue;
        if (a.type == "bool") attrs[a.name] = ex->GetAttrBool(a.name);
        else if (a.type == "int") attrs[a.name] = ex->GetAttrInt(a.name);
        else if (a.type == "float") attrs[a.name] = static_cast<double>(ex->GetAttrFloat(a.name));
        else if (a.type == "str") attrs[a.name] = ex->GetAttrStr(a.name);
        else if (a.type == "list_int") attrs[a.name] = ex->GetAttrIntVec(a.name);
        else if (a.type == "list_float") {
          std::vector<double> v;
          for (float f : ex->GetAttrFloatVec(a.name)) v.push_back(f);
          attrs[a.name] = v;
        }
      }
    }
    // how many MindSpore params each OpDef parameter takes: MindSpore's dyn_input_sizes (one entry per
    // OpDef input: the count of a DYNAMIC input, -1 otherwise; every ms_kvcache primitive with list
    // inputs sets it), else the leftover params split evenly over the DYNAMIC inputs
    std::vector<int64_t> dyn;
    if (ex != nullptr && ex->HasAttr("dyn_input_sizes")) dyn = ex->GetAttrIntVec("dyn_input_sizes");
    size_t fixed = 0, ndyn = 0;
    for (const auto& p : def.inputs) (p.param_type == "dynamic" ? ndyn : fixed) += 1;
    std::vector<bool> ref(def.outputs.size(), false);
    size_t ms_outputs = 0;
    for (size_t j = 0; j < def.outputs.size(); ++j) {
      for (const auto& p : def.inputs) ref[j] = ref[j] || (p.name == def.outputs[j].name && p.param_type != "dynamic");
      ms_outputs += ref[j] ? 0 : 1;
    }
    if (!dyn.empty() && dyn.size() != def.inputs.size())
      FailLaunch("LAUNCH", op, Format("attribute dyn_input_sizes has %zu entries, the OpDef %zu inputs", dyn.size(),
                                      def.inputs.size()));
    int64_t per_dyn = 0;
    if (ndyn > 0 && dyn.empty()) {
      const int64_t left = static_cast<int64_t>(nparam) - static_cast<int64_t>(fixed + ms_outputs);
      if (left < 0 || left % static_cast<int64_t>(ndyn) != 0)
        FailLaunch("LAUNCH", op,
                   Format("%d MindSpore parameters cannot be split into %zu DYNAMIC input(s) + %zu fixed inputs + %zu "
                          "outputs (set the 'dyn_input_sizes' attribute)", nparam, ndyn, fixed, ms_outputs));
      per_dyn = left / static_cast<int64_t>(ndyn);
    }
    int pos = 0;
    auto take = [&](const char* what) -> TensorArg {
      if (pos >= nparam) FailLaunch("LAUNCH", op, Format("MindSpore passed %d parameters, too few for the OpDef (%s)", nparam, what));
      TensorArg t;
      t.dtype = dtypes[pos] ? dtypes[pos] : "";
      uint64_t n = 1;
      for (int d = 0; d < ndims[pos]; ++d) {
        t.shape.push_back(shapes[pos][d]);
        n *= static_cast<uint64_t>(shapes[pos][d]);
      }
      t.data = params[pos];
      t.nbytes = n * DTypeBytes(t.dtype, op);
      t.present = true;
      ++pos;
      return t;
    };
    std::vector<ParamArg> ins(def.inputs.size()), outs(def.outputs.size());
    for (size_t i = 0; i < def.inputs.size(); ++i) {
      if (def.inputs[i].param_type == "dynamic") {
        ins[i].dynamic = true;
        const int64_t k = dyn.empty() ? per_dyn : dyn[i];
        for (int64_t x = 0; x < k; ++x) ins[i].items.push_back(take("dynamic input"));
      } else {
        ins[i].items.push_back(take("input"));
      }
    }
    for (size_t j = 0; j < def.outputs.size(); ++j) {
      if (ref[j]) {
        TensorArg t;
        t.data = nullptr;
        outs[j].items.push_back(t);
      } else {
        outs[j].items.push_back(take("output"));
      }
    }
    // any further MindSpore outputs (e.g. the dummy int32 status of an in-place op) are zeroed
    for (int x = pos; x < nparam; ++x) {
      uint64_t n = 1;
      for (int d = 0; d < ndims[x]; ++d) n *= static_cast<uint64_t>(shapes[x][d]);
      if (params[x] != nullptr && dtypes[x] != nullptr) std::memset(params[x], 0, n * DTypeBytes(dtypes[x], op));
    }
    LaunchOptions opt;  // defaults: set_soc / set_order / env
    RunOp(op, ins, outs, attrs, opt);
    return 0;
  } catch (const AliasRefused&) {
  } catch (const ascendc_sim::EmulationError& e) {
    // the launch has failed (the emulation's verdict); a registered diagnosis of the same inputs only
    // explains it (e.g. which static scale made a quantizing kernel trap)
    std::string what = e.what();
    if (const ascendc_sim::AotDiagnoser diag = ascendc_sim::ErrorDiagnoser(op, e.rule)) {
      char buf[1024];
      buf[0] = '\0';
      const int n = diag(op.c_str(), nparam, params, ndims, shapes, dtypes, extra, buf, static_cast<int>(sizeof(buf)));
      if (n > 0) what += "; cause: " + std::string(buf, std::min<size_t>(static_cast<size_t>(n), sizeof(buf) - 1));
    }
    failed = ReportAotFailure(op, e.rule, PublicNamed(op, extra, what));
  } catch (const simhost::HostError& e) {
    failed = ReportAotFailure(op, e.rule, PublicNamed(op, extra, e.what()));
  } catch (const std::exception& e) {
    failed = ReportAotFailure(op, "", PublicNamed(op, extra, op + ": " + e.what()));
  }
  // MindSpore's CPU AOT kernel puts the message of a thrown exception into the Python exception text
  // ("... Error message is <msg>"); a bare non-zero return would only give "Return value ... is 1". A caller
  // that passes no AotExtra (a direct C call) gets the return code.
  if (extra != nullptr) throw std::runtime_error(failed);
  return 1;
}
