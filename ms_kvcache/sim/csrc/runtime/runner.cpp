// AscendC CPU emulation runtime: kernel registry, settings, the runner (tiling + GM setup + launch on
// every core in forward / reverse / threaded order) and the MindSpore AOT entry.
#include "runner.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <map>
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
  Settings() {
    const char* e = std::getenv("MS_KVCACHE_SIM_SOC");
    soc = (e && *e) ? e : "Ascend910B1";
    e = std::getenv("MS_KVCACHE_SIM_ORDER");
    order = (e && *e) ? e : "forward";
    e = std::getenv("MS_KVCACHE_SIM_HAZARDS");
    hazards = !(e && std::string(e) == "0");
    e = std::getenv("MS_KVCACHE_SIM_GM_COPY");
    gm_copy = (e && *e) ? e : "auto";
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
  uint8_t* Add(const TensorArg& t, const std::string& name, RegionKind kind, Prepared& prep) {
    if (!t.present || t.data == nullptr) return nullptr;
    auto it = by_host_.find(t.data);
    if (it != by_host_.end()) return L_.regions[it->second].base;
    Region r;
    r.name = name;
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

LaunchOptions Resolve(const LaunchOptions& o, const std::string& op) {
  LaunchOptions r = o;
  if (r.soc.empty()) r.soc = DefaultSoc();
  if (r.order.empty()) r.order = DefaultOrder();
  CheckOrder(r.order, op);
  if (r.hazards < 0) r.hazards = DefaultHazards() ? 1 : 0;
  if (r.gm_copy.empty()) r.gm_copy = DefaultGmCopy();
  CheckGmCopy(r.gm_copy, op);
  return r;
}

// ------------------------------------------------------------------------------------------- execute
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
  } catch (const EmulationError&) {
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

std::vector<CoreStats> Execute(LaunchCtx& L, const KernelEntry& k, std::vector<void*>& args, const std::string& order) {
  const uint32_t n = L.block_dim;
  std::vector<std::unique_ptr<Core>> cores;
  for (uint32_t i = 0; i < n; ++i) {
    cores.emplace_back(new Core());
    cores.back()->idx = static_cast<int>(i);
  }
  if (order == "threads") {
    L.concurrent = true;
    std::vector<std::exception_ptr> errs(n);
    std::vector<std::thread> th;
    th.reserve(n);
    for (uint32_t i = 0; i < n; ++i) {
      th.emplace_back([&, i] {
        try {
          std::vector<void*> a = args;
          RunCore(L, k, a, *cores[i]);
        } catch (...) {
          errs[i] = std::current_exception();
        }
      });
    }
    for (auto& t : th) t.join();
    for (uint32_t i = 0; i < n; ++i)
      if (errs[i]) std::rethrow_exception(errs[i]);
  } else {
    for (uint32_t j = 0; j < n; ++j) {
      const uint32_t i = order == "reverse" ? n - 1 - j : j;
      std::vector<void*> a = args;
      RunCore(L, k, a, *cores[i]);
    }
  }
  std::vector<CoreStats> st;
  for (auto& c : cores) st.push_back(c->st);
  return st;
}

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
      args.push_back(gm.Add(inputs[i].items[0], Format("input %zu '%s'", i, nm.c_str()), RegionKind::Input, prep));
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
      ptrs.push_back(gm.Add(items[k2], Format("input %zu '%s'[%zu]", i, nm.c_str(), k2), RegionKind::Input, prep));
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
                          RegionKind::Output, prep));
  uint64_t ws = 0;
  for (int64_t s : tr.workspace_sizes) ws += s > 0 ? static_cast<uint64_t>(s) : 0;
  uint8_t* wsp = nullptr;
  if (ws > 0) {
    wsp = gm.AddRaw(ws, "workspace", RegionKind::Workspace, true);
    const uint64_t sys = std::min<uint64_t>(ws, L->caps.sys_ws);
    Garbage(L->seed ^ 0x77, wsp + sys, ws - sys);
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
                          RegionKind::Input, prep));
  uint8_t* wsp = nullptr;
  if (workspace_bytes > 0) {
    wsp = gm.AddRaw(workspace_bytes, "workspace", RegionKind::Workspace, true);
    const uint64_t sys = std::min<uint64_t>(workspace_bytes, L->caps.sys_ws);
    Garbage(L->seed ^ 0x77, wsp + sys, workspace_bytes - sys);
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
    failed = ReportAotFailure(op, e.rule, e.what());
  } catch (const simhost::HostError& e) {
    failed = ReportAotFailure(op, e.rule, e.what());
  } catch (const std::exception& e) {
    failed = ReportAotFailure(op, "", op + ": " + e.what());
  }
  // MindSpore's CPU AOT kernel puts the message of a thrown exception into the Python exception text
  // ("... Error message is <msg>"); a bare non-zero return would only give "Return value ... is 1". A caller
  // that passes no AotExtra (a direct C call) gets the return code.
  if (extra != nullptr) throw std::runtime_error(failed);
  return 1;
}
