// pybind11 side of the native CPU library. The same shared object exports the extern "C"
// MindSpore AOT entry points of cpu_kernel/*.cpp; Python passes this module's __file__ to
// ops.Custom(func_type="aot").
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <tuple>

#include "aot_abi.h"
#include "index_check.h"
#include "stream_copy.h"

namespace py = pybind11;

namespace {

// Host-side value checks of the PyNative wrappers (index arrays read with Tensor.asnumpy()); faster
// than the numpy equivalents (np.unique) at every size. Shared with the kernels: index_check.h.

py::array Contiguous(const py::array& a, size_t* elem) {
  if (py::isinstance<py::array_t<int32_t>>(a)) {
    *elem = 4;
    return py::array_t<int32_t, py::array::c_style | py::array::forcecast>::ensure(a);
  }
  if (py::isinstance<py::array_t<int64_t>>(a)) {
    *elem = 8;
    return py::array_t<int64_t, py::array::c_style | py::array::forcecast>::ensure(a);
  }
  throw py::type_error("expected an int32 or int64 array");
}

std::tuple<int, int64_t, int64_t, int64_t> CheckSlots(const py::array& a, int64_t num_slots) {
  size_t elem = 0;
  py::array c = Contiguous(a, &elem);
  const mskv::IndexIssue e = mskv::CheckSlotValues(c.data(), elem, static_cast<int64_t>(c.size()), num_slots);
  return {e.code, e.i, e.j, e.value};
}

std::tuple<int, int64_t, int64_t, int64_t> CheckBlockMapping(const py::array& a, int64_t src_nb, int64_t dst_nb) {
  size_t elem = 0;
  py::array c = Contiguous(a, &elem);
  const mskv::IndexIssue e =
      mskv::CheckBlockPairValues(c.data(), elem, static_cast<int64_t>(c.size() / 2), src_nb, dst_nb);
  return {e.code, e.i, e.j, e.value};
}

}  // namespace

namespace mskv {
void BindHostMemory(py::module_& m);  // cpu_kernel/host_memory.cpp
}  // namespace mskv

PYBIND11_MODULE(_cpu, m) {
  m.doc() = "ms_kvcache native CPU kernels (MindSpore AOT entry points + helpers)";
  m.def("last_error", &mskv::LastError, "Message of the most recent failing CPU kernel call.");
  m.def("num_threads", &mskv::NumThreads, "Threads the CPU kernels use (MS_KVCACHE_NUM_THREADS).");
  m.def("parallel_threshold_bytes", &mskv::ParallelThresholdBytes,
        "Bytes moved by one call above which kernels fork threads (MS_KVCACHE_PARALLEL_BYTES).");
  m.def("spin_us", &mskv::SpinMicros,
        "Microseconds an idle helper thread spins (yielding) for the next job before it sleeps (MS_KVCACHE_SPIN_US).");
  m.def("pool_stats", [] {
        const mskv::PoolCounters c = mskv::PoolStats();
        return std::make_tuple(c.jobs, c.wakes);
      }, "(jobs, wakes): calls the thread pool ran with helpers, and how many had to wake a sleeping helper.");
  m.def("copy_stream_threshold_bytes", &mskv::CopyStreamThresholdBytes,
        "Bytes written by one call of a copy op (slot scatter, block copy) above which it uses non-temporal "
        "stores (default 256 KiB; MS_KVCACHE_STREAM_BYTES).");
  m.def("check_slots", &CheckSlots, py::arg("slots"), py::arg("num_slots"),
        "(code, i, j, value) for an int32/int64 slot array: 0 ok; 1 slots[i] = value >= num_slots; "
        "2 slots[i] == slots[j] = value >= 0 with i < j (the earliest such j).");
  m.def("check_block_mapping", &CheckBlockMapping, py::arg("block_mapping"), py::arg("src_blocks"),
        py::arg("dst_blocks"),
        "(code, row, col, value) for an int32/int64 [n, 2] array: 0 ok; 1 block_mapping[row][col] = value "
        "is outside [0, src_blocks) (col 0) or [0, dst_blocks) (col 1).");
  mskv::BindHostMemory(m);
}
