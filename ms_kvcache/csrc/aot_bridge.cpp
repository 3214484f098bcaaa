// See aot_bridge.h. This translation unit sees only cpu_kernel/aot_abi.h (the AotExtra mirror).
#include "aot_bridge.h"

#include <dlfcn.h>

#include <stdexcept>

#include "aot_abi.h"

namespace mskv_bridge {

namespace {

using AotFn = int (*)(int, void**, int*, int64_t**, const char**, void*, void*);
using LastErrorFn = int (*)(char*, int);

template <typename V>
const V* Find(const std::vector<std::pair<std::string, V>>& kv, const std::string& name) {
  for (const auto& p : kv) {
    if (p.first == name) return &p.second;
  }
  return nullptr;
}

// Attribute source handed to the kernel in place of MindSpore's AotExtra (same virtual layout).
class StaticExtra final : public mindspore::AotExtra {
 public:
  explicit StaticExtra(AttrValues v) : v_(std::move(v)) {}
  bool HasAttr(std::string name) override {
    return Find(v_.strs, name) || Find(v_.ints, name) || Find(v_.floats, name) || Find(v_.bools, name) ||
           Find(v_.int_lists, name);
  }
  bool GetAttrBool(std::string name) override {
    const bool* b = Find(v_.bools, name);
    return b ? *b : false;
  }
  int64_t GetAttrInt(std::string name) override {
    const int64_t* i = Find(v_.ints, name);
    return i ? *i : 0;
  }
  float GetAttrFloat(std::string name) override {
    const double* f = Find(v_.floats, name);
    return f ? static_cast<float>(*f) : 0.0f;
  }
  std::string GetAttrStr(std::string name) override {
    const std::string* s = Find(v_.strs, name);
    return s ? *s : std::string();
  }
  std::vector<int64_t> GetAttrIntVec(std::string name) override {
    const std::vector<int64_t>* l = Find(v_.int_lists, name);
    return l ? *l : std::vector<int64_t>();
  }
  std::vector<float> GetAttrFloatVec(std::string) override { return {}; }

 private:
  AttrValues v_;
};

}  // namespace

class Kernel {
 public:
  std::string name;
  AotFn fn = nullptr;
  LastErrorFn last_error = nullptr;
  std::unique_ptr<StaticExtra> extra;
};

std::shared_ptr<Kernel> MakeKernel(const std::string& library, const std::string& symbol,
                                   const std::string& op_name, AttrValues attrs) {
  void* h = dlopen(library.c_str(), RTLD_NOW | RTLD_NOLOAD);
  if (h == nullptr) h = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr) throw std::runtime_error("cannot load " + library + ": " + dlerror());
  auto k = std::make_shared<Kernel>();
  k->name = op_name;
  k->fn = reinterpret_cast<AotFn>(dlsym(h, symbol.c_str()));
  if (k->fn == nullptr) throw std::runtime_error("symbol " + symbol + " not found in " + library);
  k->last_error = reinterpret_cast<LastErrorFn>(dlsym(h, "MskvLastError"));
  k->extra = std::make_unique<StaticExtra>(std::move(attrs));
  return k;  // the library handle stays open for the life of the process
}

const std::string& KernelName(const Kernel& k) { return k.name; }

int Launch(const Kernel& k, int nparam, void** params, int* ndims, int64_t** shapes, const char** dtypes,
           std::string* error) {
  int rc = 0;
  try {
    rc = k.fn(nparam, params, ndims, shapes, dtypes, nullptr, k.extra.get());
  } catch (const std::exception& e) {  // the kernels throw their message to a caller that passes an AotExtra
    if (error != nullptr) *error = e.what();
    return 1;
  }
  if (rc != 0 && error != nullptr) {
    if (k.last_error != nullptr) {
      char buf[1024] = {0};
      k.last_error(buf, static_cast<int>(sizeof(buf)));
      *error = buf;
    } else {
      *error = k.name + " failed with status " + std::to_string(rc);
    }
  }
  return rc;
}

}  // namespace mskv_bridge
