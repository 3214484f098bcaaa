// Plain-C++ interface between the PyNative fast-path module (pyboost_module.cpp, compiled against
// MindSpore's headers) and a MindSpore CPU AOT kernel library (the "cpu" backend's ms_kvcache._cpu,
// or any library exporting the same ABI). Kept free of MindSpore and pybind11 types so that the
// AotExtra mirror of cpu_kernel/aot_abi.h never meets MindSpore's own declarations.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace mskv_bridge {

// A resolved AOT entry point plus the attribute values it will see through AotExtra.
class Kernel;

struct AttrValues {
  std::vector<std::pair<std::string, std::string>> strs;
  std::vector<std::pair<std::string, int64_t>> ints;
  std::vector<std::pair<std::string, double>> floats;
  std::vector<std::pair<std::string, bool>> bools;
  std::vector<std::pair<std::string, std::vector<int64_t>>> int_lists;  // e.g. dyn_input_sizes
};

// dlopen(library) (reusing the copy Python already loaded) and dlsym(symbol); throws
// std::runtime_error when either fails.
std::shared_ptr<Kernel> MakeKernel(const std::string& library, const std::string& symbol,
                                   const std::string& op_name, AttrValues attrs);

const std::string& KernelName(const Kernel& k);

// Call the entry point with MindSpore's AOT arguments (inputs then outputs). Returns its status;
// on failure *error holds the library's last error message (if it exports MskvLastError).
int Launch(const Kernel& k, int nparam, void** params, int* ndims, int64_t** shapes, const char** dtypes,
           std::string* error);

}  // namespace mskv_bridge
