// ms_kvcache._ascend_pyboost: the PyNative path of the "ascend" backend without a graph per call.
//
// ops.Custom on Ascend can only run our in-place ops in PyNative through a jit graph (one compile per new
// input shape plus a graph launch; see _custom.graph_launcher). This module launches each op of the
// installed CANN package the way MindSpore's own aclnn ops and mindspore-ai/ms_custom_ops do (their
// AclnnOpRunner / LAUNCH_ACLNN_FUNC), with only the documented PyboostRunner API
// (ms_extension/api.h, the CustomOpBuilder mechanism) and the generated aclnn two-stage API:
//
//   frontend stage   run(): the inputs, new output tensors shaped like inputs, a dummy int32 [1] status
//                    output for ops without real outputs, one device staging tensor per staged host argument;
//   backend stage    CalcWorkspace(): aclTensor / aclTensorList handles over the device addresses (an
//                    OPTIONAL input given as an empty [0] tensor is passed as nullptr), then
//                    aclnn<Op>GetWorkspaceSize(inputs, attributes, outputs, &size, &executor) through a
//                    typed shim of the op's exact prototype (aclnn_calls.inc); PyboostRunner allocates the
//                    workspace from MindSpore's memory pool;
//   launch stage     LaunchKernel(): staged host arguments copied in (aclrtMemcpyAsync H2D), then
//                    aclnn<Op>(workspace, size, executor, stream) on MindSpore's current stream, then staged
//                    host arguments copied out (D2H), all on that stream, so they are ordered with every
//                    other op of the stream; the handles are destroyed.
//
// Host memory (alloc_host_buffer) is never handed to MindSpore, which would copy it to the device and let
// a d2h transfer write the copy: Python passes such an argument as a HostArg with either the address CANN
// mapped the registered pages to (aclrtHostRegister; "zero-copy": the kernel reads and writes host memory
// over PCIe) or none (a "staged" argument: a device staging tensor plus the copies above).
//
// The ACL / aclnn functions are resolved with dlsym from libraries Python names (init(), kernel()), so the
// module builds and links against MindSpore's CPU wheel too; tests run it on MindSpore CPU with stand-in
// libraries (tests/fake_acl). Nothing of it was run on an NPU.
#include <dlfcn.h>

#include <cstring>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "ms_extension/api.h"

#include "acl_api.h"

#ifndef MSKV_MS_VERSION
#define MSKV_MS_VERSION "unknown"
#endif

namespace mskv_aclnn {

// One value per GetWorkspaceSize parameter, in prototype order (the shims read them by index).
struct Arg {
  char kind = 0;          // T, L, O, s, i, b, d (ms_kvcache/_aclnn.py)
  const void* p = nullptr;
  int64_t i = 0;
  double d = 0.0;
  bool b = false;
  std::string s;
};

struct Args {
  std::vector<Arg> v;
  const aclTensor* t(size_t k) const { return static_cast<const aclTensor*>(v[k].p); }
  const aclTensorList* l(size_t k) const { return static_cast<const aclTensorList*>(v[k].p); }
  char* s(size_t k) const { return const_cast<char*>(v[k].s.c_str()); }
  int64_t i(size_t k) const { return v[k].i; }
  bool b(size_t k) const { return v[k].b; }
  double d(size_t k) const { return v[k].d; }
};

using LaunchFn = aclnnStatus (*)(void*, uint64_t, aclOpExecutor*, aclrtStream);
using WsShim = aclnnStatus (*)(void*, const Args&, uint64_t*, aclOpExecutor**);

struct OpEntry {
  const char* op_type;
  const char* signature;
  WsShim ws;
};

#include "aclnn_calls.inc"

const OpEntry* FindOp(const std::string& op_type) {
  for (const auto& e : kAclnnOps) {
    if (op_type == e.op_type) return &e;
  }
  return nullptr;
}

}  // namespace mskv_aclnn

namespace {

using mskv_aclnn::Arg;
using mskv_aclnn::Args;

void* Sym(void* handle, const char* name, const std::string& lib, bool required) {
  void* f = dlsym(handle, name);
  if (f == nullptr && required) throw std::runtime_error("symbol " + std::string(name) + " not found in " + lib);
  return f;
}

// The CANN runtime functions, resolved once by init().
struct Runtime {
  mskv_acl::CreateTensorFn create_tensor = nullptr;
  mskv_acl::CreateTensorListFn create_list = nullptr;
  mskv_acl::DestroyTensorFn destroy_tensor = nullptr;
  mskv_acl::DestroyTensorListFn destroy_list = nullptr;
  mskv_acl::MemcpyAsyncFn memcpy_async = nullptr;
  mskv_acl::RecentErrMsgFn recent_err = nullptr;
  std::string nnopbase, ascendcl;
};

std::mutex g_mu;
std::shared_ptr<const Runtime> g_rt;

std::shared_ptr<const Runtime> Rt() {
  std::lock_guard<std::mutex> lk(g_mu);
  if (!g_rt) throw std::runtime_error("ms_kvcache._ascend_pyboost: init() was not called");
  return g_rt;
}

void* Open(const std::string& path) {
  void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_GLOBAL);
  if (h == nullptr) throw std::runtime_error("cannot load " + path + ": " + dlerror());
  return h;  // stays loaded for the life of the process
}

void Init(const std::string& nnopbase, const std::string& ascendcl) {
  auto rt = std::make_shared<Runtime>();
  void* n = Open(nnopbase);
  void* a = Open(ascendcl);
  rt->create_tensor = reinterpret_cast<mskv_acl::CreateTensorFn>(Sym(n, "aclCreateTensor", nnopbase, true));
  rt->create_list = reinterpret_cast<mskv_acl::CreateTensorListFn>(Sym(n, "aclCreateTensorList", nnopbase, true));
  rt->destroy_tensor = reinterpret_cast<mskv_acl::DestroyTensorFn>(Sym(n, "aclDestroyTensor", nnopbase, true));
  rt->destroy_list = reinterpret_cast<mskv_acl::DestroyTensorListFn>(Sym(n, "aclDestroyTensorList", nnopbase, true));
  rt->memcpy_async = reinterpret_cast<mskv_acl::MemcpyAsyncFn>(Sym(a, "aclrtMemcpyAsync", ascendcl, true));
  rt->recent_err = reinterpret_cast<mskv_acl::RecentErrMsgFn>(Sym(a, "aclGetRecentErrMsg", ascendcl, false));
  rt->nnopbase = nnopbase;
  rt->ascendcl = ascendcl;
  std::lock_guard<std::mutex> lk(g_mu);
  g_rt = std::move(rt);
}

std::string RecentError(const Runtime& rt) {
  if (rt.recent_err == nullptr) return "";
  const char* m = rt.recent_err();
  return (m != nullptr && *m != '\0') ? std::string(": ") + m : "";
}

int32_t AclType(ms::TypeId t) {
  switch (t) {
    case ms::TypeId::kNumberTypeFloat16: return mskv_acl::kFloat16;
    case ms::TypeId::kNumberTypeBFloat16: return mskv_acl::kBF16;
    case ms::TypeId::kNumberTypeFloat32: return mskv_acl::kFloat;
    case ms::TypeId::kNumberTypeFloat64: return mskv_acl::kDouble;
    case ms::TypeId::kNumberTypeInt8: return mskv_acl::kInt8;
    case ms::TypeId::kNumberTypeUInt8: return mskv_acl::kUInt8;
    case ms::TypeId::kNumberTypeInt16: return mskv_acl::kInt16;
    case ms::TypeId::kNumberTypeInt32: return mskv_acl::kInt32;
    case ms::TypeId::kNumberTypeInt64: return mskv_acl::kInt64;
    case ms::TypeId::kNumberTypeBool: return mskv_acl::kBool;
    default: throw std::runtime_error("ms_kvcache._ascend_pyboost: unsupported tensor dtype");
  }
}

ms::TypeId MsType(const std::string& name) {
  static const std::pair<const char*, ms::TypeId> kNames[] = {
      {"float16", ms::TypeId::kNumberTypeFloat16}, {"bfloat16", ms::TypeId::kNumberTypeBFloat16},
      {"float32", ms::TypeId::kNumberTypeFloat32}, {"float64", ms::TypeId::kNumberTypeFloat64},
      {"int8", ms::TypeId::kNumberTypeInt8},       {"uint8", ms::TypeId::kNumberTypeUInt8},
      {"int16", ms::TypeId::kNumberTypeInt16},     {"int32", ms::TypeId::kNumberTypeInt32},
      {"int64", ms::TypeId::kNumberTypeInt64},     {"bool", ms::TypeId::kNumberTypeBool}};
  for (const auto& p : kNames) {
    if (name == p.first) return p.second;
  }
  throw py::value_error("ms_kvcache._ascend_pyboost: unsupported dtype '" + name + "'");
}

// A host-memory argument (see the header comment). device != 0: the address CANN mapped the registered
// pages to (zero-copy); device == 0: staged through a device tensor of the same shape and dtype.
struct HostArg {
  uintptr_t host = 0;
  uintptr_t device = 0;
  std::vector<int64_t> shape;
  std::string dtype;
  uint64_t nbytes = 0;
  bool copy_in = false;   // the kernel reads it (staged: H2D before the launch)
  bool copy_out = false;  // the kernel writes it (staged: D2H after the launch)
  bool staged() const { return device == 0; }
};

// One GetWorkspaceSize parameter: where its value comes from.
struct Item {
  char kind = 0;
  int index = -1;  // T: flat input; L: first flat input; O: output (-1: the internal status tensor)
  int count = 0;   // L: number of tensors
  bool optional = false;
  Arg value;       // scalars
};

struct Op {
  std::string op_type, api;
  const mskv_aclnn::OpEntry* entry = nullptr;
  void* ws_fn = nullptr;
  mskv_aclnn::LaunchFn launch_fn = nullptr;
  std::vector<Item> plan;
  std::vector<int> out_like;  // real output i is shaped and typed like flat input out_like[i]
  int n_inputs = 0;
  std::string opapi;
};

struct KernelHolder {
  std::shared_ptr<Op> op;
};

// A flat input of one call: an ms Tensor (index into the runner's inputs) or a host argument.
struct Slot {
  bool host = false;
  int pos = -1;  // runner input position, or host argument index
};

struct CallState {
  std::shared_ptr<Op> op;
  std::vector<Slot> slots;
  std::vector<HostArg> hosts;
  std::vector<int> staging_out;  // per host argument: runner output position of its staging tensor, -1
  int status_out = -1;           // runner output position of the internal status tensor
};

class AclnnRunner : public ms::pynative::PyboostRunner {
 public:
  AclnnRunner(std::shared_ptr<const CallState> call, std::shared_ptr<const Runtime> rt)
      : PyboostRunner(call->op->op_type), call_(std::move(call)), rt_(std::move(rt)) {}

  ~AclnnRunner() override { Release(); }

  size_t CalcWorkspace() override {
    const Op& op = *call_->op;
    Args args;
    args.v.reserve(op.plan.size());
    for (const Item& it : op.plan) {
      Arg a;
      a.kind = it.kind;
      switch (it.kind) {
        case 'T': a.p = InputTensor(it.index, it.optional); break;
        case 'L': {
          std::vector<const aclTensor*> ts;
          ts.reserve(static_cast<size_t>(it.count));
          for (int j = 0; j < it.count; ++j) ts.push_back(InputTensor(it.index + j, false, /*owned=*/false));
          aclTensorList* l = rt_->create_list(ts.data(), ts.size());
          if (l == nullptr) throw std::runtime_error(op.op_type + ": aclCreateTensorList failed" + RecentError(*rt_));
          lists_.push_back(l);
          a.p = l;
          break;
        }
        case 'O': {
          const int pos = it.index >= 0 ? it.index : call_->status_out;
          a.p = Make(outputs()[static_cast<size_t>(pos)], nullptr, true);
          break;
        }
        default: a = it.value; break;
      }
      args.v.push_back(std::move(a));
    }
    uint64_t ws = 0;
    const aclnnStatus st = op.entry->ws(op.ws_fn, args, &ws, &executor_);
    if (st != 0) {
      throw std::runtime_error("ms_kvcache: " + op.api + "GetWorkspaceSize failed with status " + std::to_string(st) +
                               RecentError(*rt_));
    }
    ws_ = ws;
    return static_cast<size_t>(ws);
  }

  void LaunchKernel() override {
    const Op& op = *call_->op;
    for (size_t h = 0; h < call_->hosts.size(); ++h) {
      const HostArg& ha = call_->hosts[h];
      if (ha.staged() && ha.copy_in && ha.nbytes > 0) Copy(StagingPtr(h), reinterpret_cast<void*>(ha.host), ha.nbytes,
                                                         mskv_acl::kMemcpyHostToDevice, op);
    }
    const aclnnStatus st = op.launch_fn(workspace_ptr(), ws_, executor_, stream());
    if (st != 0) {
      Release();
      throw std::runtime_error("ms_kvcache: " + op.api + " failed with status " + std::to_string(st) + RecentError(*rt_));
    }
    executor_ = nullptr;  // a one-shot executor is released by the launch itself
    for (size_t h = 0; h < call_->hosts.size(); ++h) {
      const HostArg& ha = call_->hosts[h];
      if (ha.staged() && ha.copy_out && ha.nbytes > 0) Copy(reinterpret_cast<void*>(ha.host), StagingPtr(h), ha.nbytes,
                                                          mskv_acl::kMemcpyDeviceToHost, op);
    }
    Release();
  }

 private:
  void* StagingPtr(size_t h) { return outputs()[static_cast<size_t>(call_->staging_out[h])].GetDataPtr(); }

  void Copy(void* dst, void* src, uint64_t n, int32_t kind, const Op& op) {
    const int32_t rc = rt_->memcpy_async(dst, n, src, n, kind, stream());
    if (rc != 0) {
      Release();
      throw std::runtime_error("ms_kvcache: " + op.op_type + ": aclrtMemcpyAsync(" +
                               (kind == mskv_acl::kMemcpyHostToDevice ? "H2D" : "D2H") + ", " + std::to_string(n) +
                               " bytes) of a staged host argument failed with aclError " + std::to_string(rc) +
                               RecentError(*rt_));
    }
  }

  // aclTensor over flat input i (device tensor, mapped host memory or its staging tensor); nullptr for
  // an OPTIONAL input given as an empty tensor. owned: destroyed by Release (false: by its list).
  const aclTensor* InputTensor(int i, bool optional, bool owned = true) {
    const Slot& s = call_->slots[static_cast<size_t>(i)];
    if (!s.host) {
      const ms::Tensor& t = inputs()[static_cast<size_t>(s.pos)];
      if (optional && t.numel() == 0) return nullptr;
      return Make(t, nullptr, owned);
    }
    const HostArg& ha = call_->hosts[static_cast<size_t>(s.pos)];
    void* data = ha.staged() ? StagingPtr(static_cast<size_t>(s.pos)) : reinterpret_cast<void*>(ha.device);
    return MakeRaw(ha.shape, AclType(MsType(ha.dtype)), data, owned);
  }

  const aclTensor* Make(const ms::Tensor& t, void* data, bool owned) {
    return MakeRaw(t.shape(), AclType(t.data_type()), data != nullptr ? data : t.GetDataPtr(), owned);
  }

  // Contiguous (row-major) tensor: the eager wrappers make every input contiguous first.
  const aclTensor* MakeRaw(const std::vector<int64_t>& shape, int32_t dtype, void* data, bool owned) {
    std::vector<int64_t> strides(shape.size(), 1);
    for (size_t k = shape.size(); k-- > 1;) strides[k - 1] = strides[k] * (shape[k] > 0 ? shape[k] : 1);
    aclTensor* t = rt_->create_tensor(shape.data(), shape.size(), dtype, strides.data(), 0, mskv_acl::kFormatND,
                                      shape.data(), shape.size(), data);
    if (t == nullptr) throw std::runtime_error(call_->op->op_type + ": aclCreateTensor failed" + RecentError(*rt_));
    if (owned) tensors_.push_back(t);
    return t;
  }

  void Release() {
    for (aclTensorList* l : lists_) rt_->destroy_list(l);  // destroys the tensors it holds
    for (aclTensor* t : tensors_) rt_->destroy_tensor(t);
    lists_.clear();
    tensors_.clear();
  }

  std::shared_ptr<const CallState> call_;
  std::shared_ptr<const Runtime> rt_;
  std::vector<aclTensor*> tensors_;
  std::vector<aclTensorList*> lists_;
  aclOpExecutor* executor_ = nullptr;
  uint64_t ws_ = 0;
};

// Frontend stage (the inputs are real tensors by now): allocate the outputs and queue the runner.
std::vector<ms::Tensor> Eval(const std::shared_ptr<CallState>& call, const std::vector<ms::Tensor>& ins) {
  const Op& op = *call->op;
  std::vector<ms::Tensor> outs;
  for (int j : op.out_like) {
    const Slot& s = call->slots[static_cast<size_t>(j)];
    outs.emplace_back(ins[static_cast<size_t>(s.pos)].data_type(), ins[static_cast<size_t>(s.pos)].shape());
  }
  const size_t n_real = outs.size();
  std::vector<ms::Tensor> all = outs;
  if (n_real == 0) {
    call->status_out = static_cast<int>(all.size());
    all.emplace_back(ms::TypeId::kNumberTypeInt32, std::vector<int64_t>{1});
  }
  call->staging_out.assign(call->hosts.size(), -1);
  for (size_t h = 0; h < call->hosts.size(); ++h) {
    if (!call->hosts[h].staged()) continue;
    call->staging_out[h] = static_cast<int>(all.size());
    all.emplace_back(MsType(call->hosts[h].dtype), call->hosts[h].shape);
  }
  std::make_shared<AclnnRunner>(call, Rt())->Run(ins, all);
  return outs;
}

void EvalNoOutput(const std::shared_ptr<CallState>& call, const std::vector<ms::Tensor>& ins) { Eval(call, ins); }

// PyboostRunner::Call<N>(func, args...) (the form without an op name: MindSpore before 2.10 has only this
// one; the name it derives is used for profiling only).
template <int N>
py::object CallWithOutputs(const std::shared_ptr<CallState>& call, std::vector<ms::Tensor> ins) {
  return ms::pynative::PyboostRunner::Call<N>(Eval, call, std::move(ins));
}

py::object RunKernel(const KernelHolder& h, const py::args& args) {
  const auto& op = h.op;
  if (static_cast<int>(args.size()) != op->n_inputs) {
    throw py::value_error(op->op_type + ": expected " + std::to_string(op->n_inputs) + " inputs, got " +
                          std::to_string(args.size()));
  }
  auto call = std::make_shared<CallState>();
  call->op = op;
  std::vector<ms::Tensor> ins;
  for (const auto& a : args) {
    Slot s;
    if (py::isinstance<HostArg>(a)) {
      s.host = true;
      s.pos = static_cast<int>(call->hosts.size());
      call->hosts.push_back(a.cast<HostArg>());
    } else {
      s.pos = static_cast<int>(ins.size());
      ins.push_back(a.cast<ms::Tensor>());
    }
    call->slots.push_back(s);
  }
  for (int j : op->out_like) {
    if (call->slots[static_cast<size_t>(j)].host) {
      throw py::value_error(op->op_type + ": an output shaped like a host argument is not supported");
    }
  }
  switch (op->out_like.size()) {
    case 0: return ms::pynative::PyboostRunner::Call<0>(EvalNoOutput, call, std::move(ins));
    case 1: {
      py::object r = CallWithOutputs<1>(call, std::move(ins));
      return py::isinstance<py::tuple>(r) ? py::object(r.cast<py::tuple>()[0]) : r;
    }
    case 2: return CallWithOutputs<2>(call, std::move(ins));
    case 3: return CallWithOutputs<3>(call, std::move(ins));
    case 4: return CallWithOutputs<4>(call, std::move(ins));
    default: throw py::value_error("ms_kvcache._ascend_pyboost: at most 4 outputs are supported");
  }
}

// plan: one tuple per GetWorkspaceSize parameter (before workspaceSize / executor), in prototype order:
//   ("T", flat_input, optional) | ("L", first_flat_input, count) | ("O", output_index or -1 for the status)
//   | ("s", str) | ("i", int) | ("b", bool) | ("d", float)
KernelHolder MakeKernel(const std::string& opapi, const std::string& op_type, const std::string& signature,
                        const py::list& plan, int n_inputs, const std::vector<int>& out_like) {
  const mskv_aclnn::OpEntry* e = mskv_aclnn::FindOp(op_type);
  if (e == nullptr) throw py::value_error("ms_kvcache._ascend_pyboost was built without op " + op_type);
  if (signature != e->signature) {
    throw py::value_error(op_type + ": the OpSpec's aclnn prototype (" + signature + ") differs from the one this "
                          "module was built for (" + e->signature + "); rebuild ms_kvcache");
  }
  auto op = std::make_shared<Op>();
  op->op_type = op_type;
  op->api = "aclnn" + op_type;
  op->entry = e;
  op->n_inputs = n_inputs;
  op->out_like = out_like;
  op->opapi = opapi;
  std::string kinds;
  for (const auto& h : plan) {
    const py::tuple t = h.cast<py::tuple>();
    Item it;
    const std::string k = t[0].cast<std::string>();
    if (k.size() != 1) throw py::value_error(op_type + ": bad plan entry kind '" + k + "'");
    it.kind = k[0];
    it.value.kind = it.kind;
    switch (it.kind) {
      case 'T': it.index = t[1].cast<int>(); it.optional = t[2].cast<bool>(); break;
      case 'L': it.index = t[1].cast<int>(); it.count = t[2].cast<int>(); break;
      case 'O': it.index = t[1].cast<int>(); break;
      case 's': it.value.s = t[1].cast<std::string>(); break;
      case 'i': it.value.i = t[1].cast<int64_t>(); break;
      case 'b': it.value.b = t[1].cast<bool>(); break;
      case 'd': it.value.d = t[1].cast<double>(); break;
      default: throw py::value_error(op_type + ": bad plan entry kind '" + k + "'");
    }
    if ((it.kind == 'T' && (it.index < 0 || it.index >= n_inputs)) ||
        (it.kind == 'L' && (it.index < 0 || it.count < 1 || it.index + it.count > n_inputs))) {
      throw py::value_error(op_type + ": plan entry refers to inputs outside [0, " + std::to_string(n_inputs) + ")");
    }
    kinds += it.kind;
    op->plan.push_back(std::move(it));
  }
  if (kinds != e->signature) {
    throw py::value_error(op_type + ": plan kinds " + kinds + " differ from the prototype " + e->signature);
  }
  void* lib = Open(opapi);
  op->ws_fn = Sym(lib, (op->api + "GetWorkspaceSize").c_str(), opapi, true);
  op->launch_fn = reinterpret_cast<mskv_aclnn::LaunchFn>(Sym(lib, op->api.c_str(), opapi, true));
  return KernelHolder{op};
}

py::list CompiledOps() {
  py::list out;
  for (const auto& e : mskv_aclnn::kAclnnOps) out.append(py::make_tuple(e.op_type, e.signature));
  return out;
}

}  // namespace

PYBIND11_MODULE(_ascend_pyboost, m) {
  m.doc() = "ms_kvcache ascend backend, PyNative: aclnn two-stage launches through MindSpore's PyboostRunner";
  m.attr("mindspore_version") = MSKV_MS_VERSION;
#ifdef MSKV_ACLNN_HEADERS
  m.attr("checked_against_headers") = true;
#else
  m.attr("checked_against_headers") = false;
#endif
  py::class_<HostArg>(m, "HostArg")
      .def(py::init([](uintptr_t host, uintptr_t device, std::vector<int64_t> shape, std::string dtype, uint64_t nbytes,
                       bool copy_in, bool copy_out) {
             MsType(dtype);  // validates
             return HostArg{host, device, std::move(shape), std::move(dtype), nbytes, copy_in, copy_out};
           }),
           py::arg("host"), py::arg("device"), py::arg("shape"), py::arg("dtype"), py::arg("nbytes"),
           py::arg("copy_in"), py::arg("copy_out"))
      .def_readonly("host", &HostArg::host)
      .def_readonly("device", &HostArg::device)
      .def_readonly("shape", &HostArg::shape)
      .def_readonly("dtype", &HostArg::dtype)
      .def_readonly("nbytes", &HostArg::nbytes)
      .def_readonly("copy_in", &HostArg::copy_in)
      .def_readonly("copy_out", &HostArg::copy_out)
      .def_property_readonly("staged", &HostArg::staged);
  py::class_<KernelHolder>(m, "Kernel")
      .def_property_readonly("op_type", [](const KernelHolder& h) { return h.op->op_type; })
      .def_property_readonly("opapi", [](const KernelHolder& h) { return h.op->opapi; });
  m.def("init", &Init, py::arg("nnopbase"), py::arg("ascendcl"),
        "Load libnnopbase (aclCreateTensor, aclCreateTensorList, aclDestroy*) and libascendcl (aclrtMemcpyAsync).");
  m.def("initialized", []() { std::lock_guard<std::mutex> lk(g_mu); return static_cast<bool>(g_rt); });
  m.def("ops", &CompiledOps, "(OpType, aclnn signature) of every op this module has a typed shim for.");
  m.def("kernel", &MakeKernel, py::arg("opapi"), py::arg("op_type"), py::arg("signature"), py::arg("plan"),
        py::arg("n_inputs"), py::arg("out_like") = std::vector<int>(),
        "Resolve aclnn<op_type>GetWorkspaceSize / aclnn<op_type> in the vendor's libcust_opapi.so for a fixed plan.");
  m.def("run", &RunKernel,
        "run(kernel, *inputs): inputs in flat op order, each a Tensor or a HostArg; asynchronous in MindSpore's "
        "PyNative pipeline. Returns None (no outputs), the output tensor, or a tuple of output tensors.");
}
