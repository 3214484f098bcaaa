// ms_kvcache._cpu_pyboost: the PyNative fast path of the "cpu" backend.
//
// ops.Custom in PyNative costs ~100 us per call (primitive infer, single-op graph, AOT loader). This
// module launches the very same AOT entry points (cpu_kernel/*.cpp, inside ms_kvcache._cpu) through
// MindSpore's PyboostRunner C++ API (the "CustomOpBuilder" mechanism), which costs a few us and runs
// inside MindSpore's asynchronous PyNative pipeline: the call returns at once and the kernel runs in
// order with the other ops. Only used in PyNative; graph mode keeps ops.Custom. Built by CMake against
// the installed MindSpore's headers (cmake/pyboost.cmake); Python falls back to ops.Custom when this
// module is missing or was built for another MindSpore version.
//
// Outputs: ops with real outputs (the rope ops' query_out, key_out, ...) get new tensors created in
// MindSpore's frontend stage with the shape and dtype of one input each (Kernel.out_like), memory
// assigned in the backend stage by PyboostRunner right before the launch, handed back to Python as the
// op's result (PyboostRunner::Call<N>), so later ops that read them wait for this op like for any
// built-in. Ops without outputs pass the AOT ABI a dummy int32 [1] status instead.
//
// Ordering: PyboostRunner normally hands LaunchKernel to MindSpore's *launch* queue, while MindSpore's
// built-in CPU kernels run directly in the *backend* queue. A cache written from the launch queue could
// then be read by a later built-in op before the write (seen on MindSpore 2.10 CPU). We therefore run
// the kernel in the backend queue like the built-ins, after draining the launch queue, so the write is
// ordered after every earlier op and before every later one.
#include <cmath>
#include <cstdlib>
#include <algorithm>
#include <chrono>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

// MindSpore versions: cmake/pyboost.cmake finds where the installed MindSpore keeps pipeline.h
// (ccsrc/runtime/pipeline/ in 2.7, ccsrc/include/runtime/pipeline/ from 2.8) and whether PyboostRunner has
// Call<N>(op_name, func, ...) (2.10) or only Call<N>(func, ...) (2.7-2.9), and passes MSKV_PIPELINE_HEADER /
// MSKV_PYBOOST_CALL_HAS_OP_NAME. ms_extension/api.h itself includes the pyboost_extension.h of its version.
#include "ms_extension/api.h"
#if defined(MSKV_PIPELINE_HEADER)
#include MSKV_PIPELINE_HEADER
#elif __has_include("include/runtime/pipeline/pipeline.h")
#include "include/runtime/pipeline/pipeline.h"
#else
#include "runtime/pipeline/pipeline.h"
#endif
#if defined(MSKV_TENSOR_ADDRESS_IS_DEVICE_SYNC)
// MindSpore 2.7.0: Tensor::device_address() is a DeviceSync (no device type); the DeviceAddress it points to
// has one (libmindspore_ops_kernel_common, linked for this version by cmake/pyboost.cmake)
#include "common/device_address.h"
#endif

#include "aot_bridge.h"
#include "index_check.h"

#ifndef MSKV_MS_VERSION
#define MSKV_MS_VERSION "unknown"
#endif

#if defined(MSKV_PYBOOST_CALL_HAS_OP_NAME)
#define MSKV_PYBOOST_FEATURES "call-with-op-name"
#else
#define MSKV_PYBOOST_FEATURES "call-without-op-name"
#endif

namespace {

// PyboostRunner::Call<N>: with the op name where the API takes one (MindSpore 2.10: the name of its
// profiler event), else the older form (the name is then derived from the function type).
template <int N, typename F, typename... A>
py::object PyboostCall(const std::string& op_name, F func, A&&... args) {
#if defined(MSKV_PYBOOST_CALL_HAS_OP_NAME)
  return ms::pynative::PyboostRunner::Call<N>(op_name, func, std::forward<A>(args)...);
#else
  (void)op_name;
  return ms::pynative::PyboostRunner::Call<N>(func, std::forward<A>(args)...);
#endif
}

const char* DTypeName(ms::TypeId t) {
  switch (t) {
    case ms::TypeId::kNumberTypeFloat16: return "float16";
    case ms::TypeId::kNumberTypeBFloat16: return "bfloat16";
    case ms::TypeId::kNumberTypeFloat32: return "float32";
    case ms::TypeId::kNumberTypeFloat64: return "float64";
    case ms::TypeId::kNumberTypeInt8: return "int8";
    case ms::TypeId::kNumberTypeUInt8: return "uint8";
    case ms::TypeId::kNumberTypeInt16: return "int16";
    case ms::TypeId::kNumberTypeInt32: return "int32";
    case ms::TypeId::kNumberTypeInt64: return "int64";
    case ms::TypeId::kNumberTypeBool: return "bool";
    case ms::TypeId::kNumberTypeFloat8E4M3FN: return "float8e4m3fn";  // the strings ops.Custom's AOT path passes
    case ms::TypeId::kNumberTypeFloat8E5M2: return "float8e5m2";
    default: return "unknown";
  }
}

// A kernel plus the rule for its real outputs: output i is a new tensor with the shape and dtype of
// input out_like[i] (the rope ops' query_out, key_out, ...). No real outputs: the AOT ABI still gets
// a dummy int32 [1] status output (host memory of the launch, never seen by MindSpore).
struct Op {
  std::shared_ptr<mskv_bridge::Kernel> k;
  std::vector<int> out_like;
};

struct KernelHolder {
  std::shared_ptr<Op> op;
};

// Launch kernel k on `ins` (memory assigned, contiguous) and `outs` (none: the dummy int32 [1] status);
// throws std::runtime_error with the kernel's message. The AOT ABI's argument arrays live on the stack
// for the usual <= 16 tensors (this runs once per call of every op).
void LaunchAot(const mskv_bridge::Kernel& k, const std::vector<ms::Tensor>& ins, const std::vector<ms::Tensor>& outs) {
  constexpr size_t kStack = 16;
  const size_t n = ins.size() + (outs.empty() ? 1 : outs.size());
  void* ptrs_s[kStack];
  int ndims_s[kStack];
  int64_t* shapes_s[kStack];
  const char* dtypes_s[kStack];
  std::vector<void*> ptrs_h;
  std::vector<int> ndims_h;
  std::vector<int64_t*> shapes_h;
  std::vector<const char*> dtypes_h;
  void** ptrs = ptrs_s;
  int* ndims = ndims_s;
  int64_t** shapes = shapes_s;
  const char** dtypes = dtypes_s;
  if (n > kStack) {
    ptrs_h.resize(n), ndims_h.resize(n), shapes_h.resize(n), dtypes_h.resize(n);
    ptrs = ptrs_h.data(), ndims = ndims_h.data(), shapes = shapes_h.data(), dtypes = dtypes_h.data();
  }
  auto put = [&](size_t i, const ms::Tensor& t) {
    ptrs[i] = t.GetDataPtr();
    const auto& s = t.shape();
    ndims[i] = static_cast<int>(s.size());
    shapes[i] = const_cast<int64_t*>(s.data());
    dtypes[i] = DTypeName(t.data_type());
  };
  for (size_t i = 0; i < ins.size(); ++i) {
    if (!ins[i].is_contiguous()) {
      throw std::runtime_error("ms_kvcache: " + mskv_bridge::KernelName(k) + ": input " + std::to_string(i) +
                               " is not contiguous (the fast path passes tensors as they are)");
    }
    put(i, ins[i]);
  }
  int32_t status = 0;
  int64_t status_shape = 1;
  if (outs.empty()) {
    ptrs[n - 1] = &status;
    ndims[n - 1] = 1;
    shapes[n - 1] = &status_shape;
    dtypes[n - 1] = "int32";
  } else {
    for (size_t i = 0; i < outs.size(); ++i) put(ins.size() + i, outs[i]);
  }
  std::string err;
  if (mskv_bridge::Launch(k, static_cast<int>(n), ptrs, ndims, shapes, dtypes, &err) != 0) {
    throw std::runtime_error("ms_kvcache: " + err);
  }
}

class AotRunner : public ms::pynative::PyboostRunner {
 public:
  explicit AotRunner(std::shared_ptr<mskv_bridge::Kernel> k)
      : PyboostRunner(mskv_bridge::KernelName(*k)), k_(std::move(k)) {}

  void LaunchKernel() override { LaunchAot(*k_, inputs(), outputs()); }

 protected:
  void _DispatchLaunchTask() override {
    mindspore::runtime::Pipeline::Get().launch_stage()->Wait();
    LaunchKernel();
  }

 private:
  std::shared_ptr<mskv_bridge::Kernel> k_;
};

// Runs in MindSpore's frontend stage (inputs are real tensors by now): allocate the outputs (memory is
// assigned in the backend stage, right before the launch) and queue the launch.
std::vector<ms::Tensor> Eval(const std::shared_ptr<Op>& op, const std::vector<ms::Tensor>& ins) {
  std::vector<ms::Tensor> outs;
  outs.reserve(op->out_like.size());
  for (int j : op->out_like) outs.emplace_back(ins[j].data_type(), ins[j].shape());
  std::make_shared<AotRunner>(op->k)->Run(ins, outs);
  return outs;
}

void EvalNoOutput(const std::shared_ptr<Op>& op, const std::vector<ms::Tensor>& ins) {
  std::make_shared<AotRunner>(op->k)->Run(ins, {});
}

template <int N>
py::object CallWithOutputs(const std::shared_ptr<Op>& op, std::vector<ms::Tensor> ins) {
  return PyboostCall<N>(mskv_bridge::KernelName(*op->k), Eval, op, std::move(ins));
}

bool OnCpuDevice(const mindspore::tensor::TensorPtr& tp);

py::object RunKernel(const KernelHolder& h, const py::args& args) {
  const auto& op = h.op;
  std::vector<ms::Tensor> ins;
  ins.reserve(args.size());
  for (const auto& a : args) ins.push_back(a.cast<ms::Tensor>());
  // Inputs reach the kernel as they are, views included (the K / V planes of one merged cache): with
  // PyboostRunner's default (need_contiguous) MindSpore 2.7.2 runs the kernel on a contiguous copy of a view
  // with a storage offset (2.10 does not), and a cache written through that copy lost the write
  // (tests/test_fast_path.py::test_cache_views_fast_path_and_fallback). The Python wrappers pass contiguous
  // tensors only (read-only inputs made contiguous, written ones checked); LaunchKernel refuses any other.
  for (const auto& t : ins) t.SetNeedContiguous(false);
  for (int j : op->out_like) {
    if (j < 0 || static_cast<size_t>(j) >= ins.size()) {
      throw py::value_error(mskv_bridge::KernelName(*op->k) + ": output shaped like input " + std::to_string(j) +
                            ", but only " + std::to_string(ins.size()) + " inputs were given");
    }
  }
  switch (op->out_like.size()) {
    case 0:
      return PyboostCall<0>(mskv_bridge::KernelName(*op->k), EvalNoOutput, op, std::move(ins));
    case 1: {
      py::object r = CallWithOutputs<1>(op, std::move(ins));
      return py::isinstance<py::tuple>(r) ? py::object(r.cast<py::tuple>()[0]) : r;
    }
    case 2: return CallWithOutputs<2>(op, std::move(ins));
    case 3: return CallWithOutputs<3>(op, std::move(ins));
    case 4: return CallWithOutputs<4>(op, std::move(ins));
    default: throw py::value_error("ms_kvcache._cpu_pyboost: at most 4 outputs are supported");
  }
}

// Whether a tensor's memory is host memory of MindSpore's CPU device.
bool OnCpuDevice(const mindspore::tensor::TensorPtr& tp) {
  if (tp == nullptr || tp->device_address() == nullptr) return false;
#if defined(MSKV_TENSOR_ADDRESS_IS_DEVICE_SYNC)
  const auto addr = std::dynamic_pointer_cast<mindspore::device::DeviceAddress>(tp->device_address());
  return addr != nullptr && addr->GetDeviceType() == mindspore::device::DeviceType::kCPU;
#else
  return tp->device_address()->GetDeviceType() == mindspore::device::DeviceType::kCPU;
#endif
}

// ---------------------------------------------------------------------------------------- direct launch
// A PyNative call through PyboostRunner hops over three threads (Python -> MindSpore's frontend queue ->
// backend queue), and each queue's worker spins up to ~1.2 M polls for its next task before it sleeps
// (RingQueue::Head), so a stream of calls keeps two spinning pipeline threads next to the kernel's own
// threads: on a 2-core machine that, not the copy, was most of a concat_and_cache_mla call (README, copy
// table). When the pipeline has no queued or running task at all, every earlier op has finished and no
// later one can start before this call returns (the caller holds the GIL throughout and the _SUBMIT lock),
// so running the kernel right here, on the calling thread, gives the same order as the queued launch. It
// is used only then, for kernels without outputs (the cache writers), and only when every input is a host
// tensor of the CPU device with its memory (a pending op's output that has finished is realised first;
// with the pipeline idle that does not wait); otherwise the call is queued as before.

// Pipeline::bprop_stage() (MindSpore >= 2.3): the autograd queue must be idle too; older Pipelines have none.
template <typename P>
auto BpropIdle(P& p, int) -> decltype(p.bprop_stage()->Empty()) {
  return p.bprop_stage() == nullptr || p.bprop_stage()->Empty();
}
template <typename P>
bool BpropIdle(P&, long) {
  return true;
}

bool PipelineIdle() {
  auto& p = mindspore::runtime::Pipeline::Get();
  return p.frontend_stage()->Empty() && BpropIdle(p, 0) && p.backend_stage()->Empty() && p.launch_stage()->Empty();
}

// Whether the kernel may read / write `t` now (see above): realised, host memory of the CPU device,
// memory assigned (or no elements), contiguous. Realises a finished op's output (a "stub").
bool ReadyNow(const ms::Tensor& t) {
  if (t.tensor() == nullptr) {
    if (t.stub_node() == nullptr) return false;
    t.ConvertStubNodeToTensor();  // the pipeline is idle: the op that produced it has finished
    if (t.tensor() == nullptr) return false;
  }
  if (!OnCpuDevice(t.tensor()) || !t.is_contiguous()) return false;
  return t.numel() == 0 || t.GetDataPtr() != nullptr;
}

bool g_direct = [] {
  const char* env = std::getenv("MS_KVCACHE_DIRECT_LAUNCH");
  return env == nullptr || std::string(env) != "0";
}();

// run_or_queue calls launched directly / queued (launch_counts(), for tests and benchmarks).
int64_t g_launches[2] = {0, 0};

// Launch now when the pipeline is idle (see above), else queue as run() does. Returns what run() returns
// (None for the writers). Kernel errors raise RuntimeError here on a direct launch (at the next sync when
// queued).
py::object RunOrQueue(const KernelHolder& h, const py::args& args) {
  const auto& op = h.op;
  if (g_direct && op->out_like.empty() && PipelineIdle()) {
    std::vector<ms::Tensor> ins;
    ins.reserve(args.size());
    bool ready = true;
    for (const auto& a : args) {
      ins.push_back(a.cast<ms::Tensor>());
      if (!ReadyNow(ins.back())) {
        ready = false;
        break;
      }
    }
    if (ready && PipelineIdle()) {  // (realising a stub queues nothing; re-checked anyway)
      ++g_launches[0];
      LaunchAot(*op->k, ins, {});
      return py::none();
    }
  }
  ++g_launches[1];
  return RunKernel(h, args);
}

// ------------------------------------------------------------------------------------ replayed calls
// A Plan replays, in C++, the PyNative checks of ms_kvcache._eager.EagerOp for argument signatures
// (shapes + dtypes) the Python path has already accepted, and launches directly: the per-call Python
// (~20-40 us for a quantizing write: shape / dtype reads, memo keys, contiguity, disjointness, slot and
// scale value checks) becomes one call. Per call it checks what can change between calls with the same
// signature: every argument a realised host tensor, contiguous; the written tensors' byte ranges
// disjoint from each other and from those of the inputs the op only reads (the alias rule of
// ms_kvcache._custom._alias_sets: a kernel reading bytes it writes reads rows it has already overwritten;
// read inputs may overlap each other); slot values (< the bound, non-negative ones distinct unless allowed) and static scales /
// offsets (finite, scales > 0) read now, which is exact because it runs only when the pipeline is idle
// (nothing pending can change them). Any other case (a new signature, a bad value, a busy pipeline, a
// stub that is not ready, direct launch off) returns False and launches nothing: the Python path then
// runs as before, raising its own error for bad input or queueing the launch.
const void* HostIndexData(const ms::Tensor& t, size_t* elem, int64_t* n);

size_t ElemSize(ms::TypeId t) {
  switch (t) {
    case ms::TypeId::kNumberTypeFloat64:
    case ms::TypeId::kNumberTypeInt64: return 8;
    case ms::TypeId::kNumberTypeFloat32:
    case ms::TypeId::kNumberTypeInt32: return 4;
    case ms::TypeId::kNumberTypeFloat16:
    case ms::TypeId::kNumberTypeBFloat16:
    case ms::TypeId::kNumberTypeInt16: return 2;
    default: return 1;
  }
}

struct PlanSig {
  std::vector<std::vector<int64_t>> shapes;
  std::vector<ms::TypeId> dtypes;
  std::vector<int64_t> slot_bounds;  // one per Plan::slots entry
};

struct Plan {
  KernelHolder k;
  size_t n = 0;
  std::vector<int> written;                  // inputs whose bytes must not overlap each other
  std::vector<int> read;                     // inputs only read, whose bytes must not overlap a written one
  std::vector<std::pair<int, bool>> slots;   // (input, duplicates allowed)
  std::vector<std::pair<int, bool>> scales;  // (input, values must be > 0)
  std::vector<PlanSig> sigs;                 // accepted signatures (most recent last, at most kMaxSigs)
  static constexpr size_t kMaxSigs = 16;
  int64_t hits = 0;
};

// False (nothing recorded) when a tensor is still the output of a pending op (its shape is not readable
// here without waiting for it).
bool PlanAdd(Plan& p, const py::sequence& args, const std::vector<int64_t>& slot_bounds) {
  if (args.size() != p.n) throw py::value_error("Plan.add: expected " + std::to_string(p.n) + " tensors");
  if (slot_bounds.size() != p.slots.size()) throw py::value_error("Plan.add: one bound per slot input expected");
  PlanSig s;
  for (const auto& a : args) {
    const auto t = a.cast<ms::Tensor>();
    if (t.tensor() == nullptr) return false;
    s.shapes.push_back(t.shape());
    s.dtypes.push_back(t.data_type());
  }
  s.slot_bounds = slot_bounds;
  for (const auto& o : p.sigs) {
    if (o.shapes == s.shapes && o.dtypes == s.dtypes) return true;
  }
  if (p.sigs.size() >= Plan::kMaxSigs) p.sigs.erase(p.sigs.begin());
  p.sigs.push_back(std::move(s));
  return true;
}

bool PlanCall(Plan& p, const py::args& args) {
  if (!g_direct || args.size() != p.n || p.sigs.empty() || !PipelineIdle()) return false;
  std::vector<ms::Tensor> ins;
  ins.reserve(p.n);
  for (const auto& a : args) {
    py::detail::make_caster<ms::Tensor> c;
    if (!c.load(a, true)) return false;
    ins.push_back(py::detail::cast_op<ms::Tensor>(std::move(c)));
  }
  for (const auto& t : ins) {
    if (!ReadyNow(t)) return false;  // (realises a finished op's output; contiguous host memory)
  }
  if (!PipelineIdle()) return false;
  const PlanSig* sig = nullptr;
  for (auto it = p.sigs.rbegin(); it != p.sigs.rend() && sig == nullptr; ++it) {
    bool same = true;
    for (size_t i = 0; i < p.n && same; ++i) same = ins[i].data_type() == it->dtypes[i];
    for (size_t i = 0; i < p.n && same; ++i) same = ins[i].shape() == it->shapes[i];
    if (same) sig = &*it;
  }
  if (sig == nullptr) return false;
  // byte ranges [b, e) of the written inputs, then of the read ones: a few pointer comparisons
  constexpr size_t kStack = 16;
  uintptr_t wb_s[kStack], we_s[kStack];
  std::vector<uintptr_t> wb_h, we_h;
  uintptr_t* wb = wb_s;
  uintptr_t* we = we_s;
  if (p.written.size() > kStack) {
    wb_h.resize(p.written.size()), we_h.resize(p.written.size());
    wb = wb_h.data(), we = we_h.data();
  }
  auto range = [&](int i, uintptr_t* b, uintptr_t* e) {
    const auto& x = ins[static_cast<size_t>(i)];
    *b = reinterpret_cast<uintptr_t>(x.GetDataPtr());
    *e = *b + x.numel() * ElemSize(x.data_type());
  };
  for (size_t a = 0; a < p.written.size(); ++a) {
    range(p.written[a], &wb[a], &we[a]);
    for (size_t b = 0; b < a; ++b) {
      if (wb[a] < we[a] && wb[b] < we[b] && wb[a] < we[b] && wb[b] < we[a]) return false;
    }
  }
  for (int r : p.read) {  // the Python path raises the alias error naming both arguments
    uintptr_t rb = 0, re = 0;
    range(r, &rb, &re);
    if (rb == re) continue;
    for (size_t a = 0; a < p.written.size(); ++a) {
      if (wb[a] < we[a] && rb < we[a] && wb[a] < re) return false;
    }
  }
  for (size_t j = 0; j < p.slots.size(); ++j) {
    const auto& t = ins[static_cast<size_t>(p.slots[j].first)];
    if (t.numel() == 0) continue;
    size_t elem = 0;
    int64_t n = 0;
    const void* d = HostIndexData(t, &elem, &n);
    if (d == nullptr) return false;
    const mskv::IndexIssue e = mskv::CheckSlotValues(d, elem, n, sig->slot_bounds[j]);
    if (e.code != 0 && !(e.code == 2 && p.slots[j].second)) return false;
  }
  for (const auto& [i, positive] : p.scales) {
    const auto& t = ins[static_cast<size_t>(i)];
    const int64_t n = static_cast<int64_t>(t.numel());
    if (n == 0) continue;
    if (t.data_type() != ms::TypeId::kNumberTypeFloat32) return false;
    const float* v = static_cast<const float*>(t.GetDataPtr());
    for (int64_t q = 0; q < n; ++q) {
      if (!std::isfinite(v[q]) || (positive && !(v[q] > 0.0f))) return false;
    }
  }
  ++g_launches[0];
  ++p.hits;
  LaunchAot(*p.k.op->k, ins, {});
  return true;
}

// Index values of a host tensor, read without waiting for the pipeline. Only for tensors that are not
// the output of a MindSpore op (those are still "stub" tensors here, tensor() == nullptr) and whose
// memory is host memory (CPU device address, contiguous, int32/int64). Returns nullptr otherwise; the
// caller then reads the values with Tensor.asnumpy(), which waits for pending ops.
const void* HostIndexData(const ms::Tensor& t, size_t* elem, int64_t* n) {
  const auto& tp = t.tensor();
  if (!OnCpuDevice(tp)) return nullptr;
  if (!t.is_contiguous()) return nullptr;
  const auto id = t.data_type();
  if (id != ms::TypeId::kNumberTypeInt32 && id != ms::TypeId::kNumberTypeInt64) return nullptr;
  *elem = id == ms::TypeId::kNumberTypeInt32 ? 4 : 8;
  *n = static_cast<int64_t>(t.numel());
  return t.GetDataPtr();
}

py::object CheckSlotsNoSync(const ms::Tensor& t, int64_t num_slots) {
  size_t elem = 0;
  int64_t n = 0;
  const void* p = HostIndexData(t, &elem, &n);
  if (p == nullptr) return py::none();
  const mskv::IndexIssue e = mskv::CheckSlotValues(p, elem, n, num_slots);
  return py::make_tuple(e.code, e.i, e.j, e.value);
}

py::object CheckBlockMappingNoSync(const ms::Tensor& t, int64_t src_blocks, int64_t dst_blocks) {
  size_t elem = 0;
  int64_t n = 0;
  const void* p = HostIndexData(t, &elem, &n);
  if (p == nullptr) return py::none();
  const mskv::IndexIssue e = mskv::CheckBlockPairValues(p, elem, n / 2, src_blocks, dst_blocks);
  return py::make_tuple(e.code, e.i, e.j, e.value);
}

py::object CheckBlockIdsNoSync(const ms::Tensor& t, int64_t num_blocks, bool distinct) {
  size_t elem = 0;
  int64_t n = 0;
  const void* p = HostIndexData(t, &elem, &n);
  if (p == nullptr) return py::none();
  const mskv::IndexIssue e = mskv::CheckBlockIdValues(p, elem, n, num_blocks, distinct);
  return py::make_tuple(e.code, e.i, e.j, e.value);
}

py::object CheckPositionsNoSync(const ms::Tensor& t, int64_t max_position) {
  size_t elem = 0;
  int64_t n = 0;
  const void* p = HostIndexData(t, &elem, &n);
  if (p == nullptr) return py::none();
  const mskv::IndexIssue e = mskv::CheckPositionValues(p, elem, n, max_position);
  return py::make_tuple(e.code, e.i, e.j, e.value);
}

// Quantization scales / offsets of a host float32 tensor, read without a pipeline sync (as
// CheckSlotsNoSync): (0, -1, 0.0) if every value is finite (and > 0 with `positive`), else (1, index,
// value) of the first bad one; None if the tensor is not a contiguous host float32 tensor.
py::object CheckScalesNoSync(const ms::Tensor& t, bool positive) {
  const auto& tp = t.tensor();
  if (tp == nullptr || tp->device_address() == nullptr) return py::none();
  if (tp->device_address()->GetDeviceType() != mindspore::device::DeviceType::kCPU) return py::none();
  if (!t.is_contiguous() || t.data_type() != ms::TypeId::kNumberTypeFloat32) return py::none();
  const float* v = static_cast<const float*>(t.GetDataPtr());
  const int64_t n = static_cast<int64_t>(t.numel());
  if (v == nullptr && n > 0) return py::none();
  for (int64_t i = 0; i < n; ++i) {
    if (!std::isfinite(v[i]) || (positive && !(v[i] > 0.0f))) return py::make_tuple(1, i, static_cast<double>(v[i]));
  }
  return py::make_tuple(0, -1, 0.0);
}

// Whether a tensor is a view of another tensor's memory: MindSpore gives every view (slice, select,
// transpose, and also a contiguous reshape / view / flatten of a whole tensor) a TensorStorageInfo,
// while a tensor that owns its memory has none. Python's Tensor exposes no such flag (storage_offset()
// is 0 and is_contiguous() True for a whole-tensor reshape), but ops.Custom copies every view before
// its kernel runs, so a write into one is lost. The output of a pending op (a "stub") is realised
// first, which waits for the op that produces it. Returns None if there is still no tensor.
py::object ViewInfo(const ms::Tensor& t) {
  if (t.tensor() == nullptr && t.stub_node() != nullptr) {
    py::gil_scoped_release nogil;
    t.ConvertStubNodeToTensor();
  }
  const auto& tp = t.tensor();
  if (tp == nullptr) return py::none();
  const auto info = tp->storage_info();
  if (info == nullptr) return py::bool_(false);
  return py::make_tuple(py::bool_(true), info->ori_shape, static_cast<int64_t>(info->storage_offset));
}

// Address of the tensor MindSpore's C++ side makes of `t` now: the output of a pending op (a "stub") is
// converted first, which waits for that op. On MindSpore 2.7.x the conversion of a reshape() / view() /
// flatten() output (a stub that is a view without TensorStorageInfo) is a tensor in other memory than
// the one Tensor.data_ptr() reports (the base's): ops.Custom would write into that other memory, so
// the write is lost. For every other tensor the two addresses agree. None without memory.
py::object ConvertedAddress(const ms::Tensor& t) {
  if (t.tensor() == nullptr && t.stub_node() != nullptr) {
    py::gil_scoped_release nogil;
    t.ConvertStubNodeToTensor();
  }
  const auto& tp = t.tensor();
  if (tp == nullptr || tp->device_address() == nullptr) return py::none();
  const void* p = t.GetDataPtr();
  if (p == nullptr) return py::none();
  return py::int_(reinterpret_cast<uintptr_t>(p));
}

// Address of a tensor's first byte, read without waiting for the pipeline (Tensor.data_ptr() waits for
// every pending op: ~3 ms here). None if the tensor is the output of a still-pending op (a "stub") or has
// no memory yet; the caller then falls back to a waiting read.
py::object DataAddressNoSync(const ms::Tensor& t) {
  const auto& tp = t.tensor();
  if (tp == nullptr || tp->device_address() == nullptr) return py::none();
  const void* p = t.GetDataPtr();
  if (p == nullptr) return py::none();
  return py::int_(reinterpret_cast<uintptr_t>(p));
}

// Wait until MindSpore's PyNative pipeline has no queued work, sleeping between polls instead of
// busy-waiting (Tensor.asnumpy() spins the calling thread, which on a 2-core machine takes a core away
// from the kernels being waited for). Returns False on timeout. Call asnumpy() afterwards to collect
// errors (it is then immediate).
// The sleep starts at poll_us and doubles up to max_poll_us: a short wait ends within ~poll_us, a long one
// wakes the thread a few times per millisecond instead of every poll_us (each wake-up takes the CPU from
// whatever runs there, e.g. a layer-wise copy worker).
// Arguments are checked first (even when the pipeline is idle): a poll_us of 0 or below would spin, a NaN timeout
// would never expire, and a value beyond int64 microseconds is undefined in the cast. No sleep goes past the
// timeout: the last one ends there, for one more look at the queues.
constexpr double kMaxPollUs = 1e6;        // one second
constexpr double kMaxWaitSeconds = 1e7;   // ~115 days: "finite", not a bound anyone waits for

bool WaitIdle(double timeout_s, double poll_us, double max_poll_us) {
  auto num = [](double v) {
    std::ostringstream os;
    os << v;  // "nan", "inf", "-5", "1e+30"
    return os.str();
  };
  if (!(timeout_s >= 0 && timeout_s <= kMaxWaitSeconds))
    throw py::value_error("wait_idle: argument 'timeout_s': expected a number of seconds in [0, 1e7], got " +
                          num(timeout_s));
  if (!(poll_us >= 1 && poll_us <= kMaxPollUs))
    throw py::value_error("wait_idle: argument 'poll_us': expected microseconds in [1, 1e6] (0 would spin), got " +
                          num(poll_us));
  if (!(max_poll_us >= 0 && max_poll_us <= kMaxPollUs))
    throw py::value_error("wait_idle: argument 'max_poll_us': expected microseconds in [0, 1e6], got " +
                          num(max_poll_us));
  auto& p = mindspore::runtime::Pipeline::Get();
  py::gil_scoped_release nogil;
  const auto t0 = std::chrono::steady_clock::now();
  const double cap_us = std::max(max_poll_us, poll_us);
  double sleep_us = poll_us;
  for (;;) {
    if (p.frontend_stage()->Empty() && p.backend_stage()->Empty() && p.launch_stage()->Empty()) return true;
    const double left_us =
        (timeout_s - std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()) * 1e6;
    if (left_us < 0) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(static_cast<int64_t>(std::min(sleep_us, left_us + 1))));
    sleep_us = std::min(sleep_us * 2, cap_us);
  }
}

KernelHolder MakeKernel(const std::string& library, const std::string& symbol, const std::string& op_name,
                        const py::dict& attrs, const std::vector<int>& out_like) {
  mskv_bridge::AttrValues v;
  for (const auto& item : attrs) {
    const std::string name = item.first.cast<std::string>();
    const py::handle val = item.second;
    if (py::isinstance<py::bool_>(val)) {
      v.bools.emplace_back(name, val.cast<bool>());
    } else if (py::isinstance<py::int_>(val)) {
      v.ints.emplace_back(name, val.cast<int64_t>());
    } else if (py::isinstance<py::float_>(val)) {
      v.floats.emplace_back(name, val.cast<double>());
    } else if (py::isinstance<py::str>(val)) {
      v.strs.emplace_back(name, val.cast<std::string>());
    } else if (py::isinstance<py::list>(val) || py::isinstance<py::tuple>(val)) {
      std::vector<int64_t> l;  // e.g. dyn_input_sizes
      for (const auto& x : val) l.push_back(x.cast<int64_t>());
      v.int_lists.emplace_back(name, std::move(l));
    } else {
      throw py::type_error("attribute " + name + ": expected bool, int, float, str or a list of ints");
    }
  }
  if (out_like.size() > 4) throw py::value_error(op_name + ": at most 4 outputs are supported by the fast path");
  auto op = std::make_shared<Op>();
  op->k = mskv_bridge::MakeKernel(library, symbol, op_name, std::move(v));
  op->out_like = out_like;
  return KernelHolder{op};
}

}  // namespace

PYBIND11_MODULE(_cpu_pyboost, m) {
  m.doc() = "ms_kvcache PyNative fast path: AOT kernels launched through MindSpore's PyboostRunner";
  m.attr("mindspore_version") = MSKV_MS_VERSION;
  m.attr("build_features") = MSKV_PYBOOST_FEATURES;
  py::class_<KernelHolder>(m, "Kernel")
      .def_property_readonly("name", [](const KernelHolder& h) { return mskv_bridge::KernelName(*h.op->k); })
      .def_property_readonly("out_like", [](const KernelHolder& h) { return h.op->out_like; });
  m.def("kernel", &MakeKernel, py::arg("library"), py::arg("symbol"), py::arg("op_name"), py::arg("attrs"),
        py::arg("out_like") = std::vector<int>(),
        "Resolve AOT entry `symbol` of `library` with fixed attribute values. out_like[i]: output i is a new "
        "tensor shaped and typed like input out_like[i] (none: the op has no outputs and run() returns None).");
  py::class_<Plan, std::shared_ptr<Plan>>(m, "Plan")
      .def(py::init([](const KernelHolder& k, size_t n, std::vector<int> written, std::vector<std::pair<int, bool>> slots,
                       std::vector<std::pair<int, bool>> scales, std::vector<int> read) {
             if (!k.op->out_like.empty()) throw py::value_error("Plan: kernels with outputs are not replayed");
             auto check = [n](int i) {
               if (i < 0 || static_cast<size_t>(i) >= n) throw py::value_error("Plan: input index out of range");
             };
             for (int i : written) check(i);
             for (int i : read) check(i);
             for (const auto& s : slots) check(s.first);
             for (const auto& s : scales) check(s.first);
             auto p = std::make_shared<Plan>();
             p->k = k, p->n = n, p->written = std::move(written), p->slots = std::move(slots);
             p->scales = std::move(scales);
             p->read = std::move(read);
             return p;
           }),
           py::arg("kernel"), py::arg("num_inputs"), py::arg("written"), py::arg("slots"), py::arg("scales"),
           py::arg("read") = std::vector<int>(),
           "Replay of an EagerOp's PyNative checks + direct launch for accepted signatures (see pyboost_module.cpp, "
           "\"replayed calls\"): written = inputs that must not share memory; read = inputs only read, which must not "
           "share memory with a written one; slots = (input, duplicates allowed); "
           "scales = (input, must be > 0).")
      .def("add", &PlanAdd, py::arg("tensors"), py::arg("slot_bounds"),
           "add(tensors, slot_bounds) -> bool: accept the shapes / dtypes of these tensors (a call the Python checks "
           "passed), with the slot bound of each slot input; False (nothing recorded) if one is a pending op's output.")
      .def("__call__", &PlanCall, "__call__(*tensors) -> bool: checked and launched directly (True), or nothing "
           "done (False: run the Python path).")
      .def_property_readonly("hits", [](const Plan& p) { return p.hits; })
      .def_property_readonly("num_signatures", [](const Plan& p) { return p.sigs.size(); });
  m.def("check_slots_nosync", &CheckSlotsNoSync, py::arg("slots"), py::arg("num_slots"),
        "Like ms_kvcache._cpu.check_slots on a host index tensor read without a pipeline sync; None if the "
        "tensor is not host-resident (an op output, non-CPU, strided or not int32/int64).");
  m.def("check_block_mapping_nosync", &CheckBlockMappingNoSync, py::arg("block_mapping"), py::arg("src_blocks"),
        py::arg("dst_blocks"), "Like ms_kvcache._cpu.check_block_mapping, without a pipeline sync (see check_slots_nosync).");
  m.def("check_block_ids_nosync", &CheckBlockIdsNoSync, py::arg("block_ids"), py::arg("num_blocks"),
        py::arg("distinct"), "(code, i, j, value) for block ids [n] read without a pipeline sync: 0 ok; 1 ids[i] = "
        "value outside [0, num_blocks); 2 (distinct only) ids[i] == ids[j] = value, i < j. None as check_slots_nosync.");
  m.def("check_positions_nosync", &CheckPositionsNoSync, py::arg("positions"), py::arg("max_position"),
        "(code, index, -1, value) of the first position outside [0, max_position) (code 0: none) of a host index "
        "tensor read without a pipeline sync; None if the tensor is not host-resident (see check_slots_nosync).");
  m.def("check_scales_nosync", &CheckScalesNoSync, py::arg("tensor"), py::arg("positive"),
        "(code, index, value): code 1 at the first value of a host float32 tensor that is not finite (or, with "
        "positive, not > 0), read without a pipeline sync; None if the tensor is not host-resident float32.");
  m.def("view_info", &ViewInfo, py::arg("tensor"),
        "False for a tensor that owns its memory; (True, shape of the viewed tensor, storage offset) for a view "
        "(any view op, a whole-tensor reshape included); None if there is no tensor to inspect. The output "
        "of a pending op is waited for.");
  m.def("converted_address", &ConvertedAddress, py::arg("tensor"),
        "Address of the tensor MindSpore's C++ side makes of this one (a pending op's output is converted, "
        "which waits for it); None without memory. On MindSpore 2.7.x it differs from Tensor.data_ptr() "
        "exactly for a reshape() / view() output, whose in-place writes are lost.");
  m.def("data_address_nosync", &DataAddressNoSync, py::arg("tensor"),
        "Address of the tensor's first byte (storage offset included) without a pipeline sync; None if the "
        "tensor is the output of a pending op or has no memory yet.");
  m.def("wait_idle", &WaitIdle, py::arg("timeout_s") = 60.0, py::arg("poll_us") = 20.0,
        py::arg("max_poll_us") = 250.0,
        "Sleep-poll until MindSpore's PyNative pipeline is idle (no busy-wait; the sleep doubles from poll_us "
        "to max_poll_us); False on timeout. ValueError: timeout_s outside [0, 1e7] s, poll_us outside [1, 1e6] us, "
        "max_poll_us outside [0, 1e6] us (NaN included).");
  m.def("run_or_queue", &RunOrQueue,
        "run_or_queue(kernel, *tensors): like run(), but a kernel without outputs runs at once on the calling "
        "thread when MindSpore's PyNative pipeline is idle and every tensor is a host tensor with its memory "
        "(same order as a queued launch; kernel errors then raise here). MS_KVCACHE_DIRECT_LAUNCH=0 or "
        "set_direct_launch(False): always queue.");
  m.def("set_direct_launch", [](bool on) {
    const bool old = g_direct;
    g_direct = on;
    return old;
  }, py::arg("enabled"), "Turn run_or_queue's direct launch on or off; returns the previous setting.");
  m.def("launch_counts", [] { return py::make_tuple(g_launches[0], g_launches[1]); },
        "(direct, queued): how many run_or_queue calls launched at once / were queued so far.");
  m.def("pipeline_idle", &PipelineIdle, "Whether MindSpore's PyNative pipeline has no queued or running task.");
  m.def("run", &RunKernel, "run(kernel, *tensors): launch kernel on the tensors (inputs in op order), "
        "asynchronously in MindSpore's PyNative pipeline; in-place inputs are written through their memory. "
        "Returns None (no outputs), the output tensor, or a tuple of output tensors.");
}
