// pybind11 side of the native CPU library. The same shared object exports the extern "C"
// MindSpore AOT entry points of cpu_kernel/*.cpp; Python passes this module's __file__ to
// ops.Custom(func_type="aot").
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include "aot_abi.h"

namespace py = pybind11;

namespace mskv {
void BindHostMemory(py::module_& m);  // cpu_kernel/host_memory.cpp
}  // namespace mskv

PYBIND11_MODULE(_cpu, m) {
  m.doc() = "ms_kvcache native CPU kernels (MindSpore AOT entry points + helpers)";
  m.def("last_error", &mskv::LastError, "Message of the most recent failing CPU kernel call.");
  m.def("num_threads", &mskv::NumThreads, "Threads the CPU kernels use (MS_KVCACHE_NUM_THREADS).");
  m.def("parallel_threshold_bytes", &mskv::ParallelThresholdBytes,
        "Bytes moved by one call above which kernels fork threads (MS_KVCACHE_PARALLEL_BYTES).");
  mskv::BindHostMemory(m);
}
