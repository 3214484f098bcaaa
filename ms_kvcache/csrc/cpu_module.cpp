// pybind11 side of the native CPU library. The same shared object exports the extern "C"
// MindSpore AOT entry points of cpu_kernel/*.cpp; Python passes this module's __file__ to
// ops.Custom(func_type="aot").
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <tuple>

#include "aot_abi.h"
#include "index_check.h"
#include "layerwise.h"
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

// The layer-wise worker from Python: tensors as (address, shape, dtype name), attributes as a dict of
// bool / int / str / list of ints (the fast path's convention, ms_kvcache._custom.eager_launcher).
std::shared_ptr<mskv::LayerwiseWorker> MakeWorker(const std::string& op_type, const std::vector<uintptr_t>& addresses,
                                                  const std::vector<std::vector<int64_t>>& shapes,
                                                  const std::vector<std::string>& dtypes, const py::dict& attrs,
                                                  int64_t num_layers) {
  mskv::LayerwiseLaunch launch;
  launch.op_type = op_type;
  for (uintptr_t a : addresses) launch.params.push_back(reinterpret_cast<void*>(a));
  launch.shapes = shapes;
  launch.dtypes = dtypes;
  launch.num_layers = num_layers;
  for (const auto& item : attrs) {
    const std::string name = item.first.cast<std::string>();
    const py::handle v = item.second;
    if (py::isinstance<py::bool_>(v)) {
      launch.attrs.bools[name] = v.cast<bool>();
    } else if (py::isinstance<py::int_>(v)) {
      launch.attrs.ints[name] = v.cast<int64_t>();
    } else if (py::isinstance<py::str>(v)) {
      launch.attrs.strs[name] = v.cast<std::string>();
    } else if (py::isinstance<py::list>(v) || py::isinstance<py::tuple>(v)) {
      launch.attrs.int_lists[name] = v.cast<std::vector<int64_t>>();
    } else {
      throw py::type_error("attribute " + name + ": expected bool, int, str or a list of ints");
    }
  }
  auto w = std::make_shared<mskv::LayerwiseWorker>(std::move(launch));
  mskv::RegisterLayerwiseWorker(w);  // reachable by the pipeline's MskvLayerwiseSubmit
  return w;
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
  using W = mskv::LayerwiseWorker;
  py::class_<W, std::shared_ptr<W>>(m, "LayerwiseWorker",
                "One thread running a multi-layer transfer layer by layer (cpu_kernel/layerwise.h); waits release "
                "the GIL. Used by ms_kvcache.LayerwiseTransfer on the cpu backend.")
      .def(py::init(&MakeWorker), py::arg("op_type"), py::arg("addresses"), py::arg("shapes"), py::arg("dtypes"),
           py::arg("attrs"), py::arg("num_layers"))
      .def("submit", &W::Submit, py::arg("layer"), "Queue a layer (returns at once).")
      .def("expect", &W::Expect, py::arg("layer"),
           "Mark a layer issued behind the pipeline: MskvLayerwiseSubmit (attributes mskv_worker = id, mskv_layer) "
           "queues it when MindSpore's pipeline runs it.")
      .def("drop_awaiting", &W::DropAwaiting, py::arg("why"), "Fail the layers whose pipeline signal was dropped.")
      .def_property_readonly("id", &W::id, "The id MskvLayerwiseSubmit's attribute mskv_worker names.")
      .def("wait", &W::Wait, py::arg("layer"), py::call_guard<py::gil_scoped_release>(),
           "Block until the layer finished: '' if it was moved, else its failure.")
      .def("wait_all", &W::WaitAll, py::call_guard<py::gil_scoped_release>(),
           "Block until every issued layer finished: '' or the first failure.")
      .def("all_done", &W::AllDone, "Whether every issued layer finished.")
      .def("state", &W::StateOf, py::arg("layer"),
           "0 not issued, 1 queued, 2 running, 3 done, 4 failed, 5 cancelled, 6 awaiting its pipeline signal.")
      .def("failed_layer", &W::FailedLayer, "Layer of the first failure, or -1.")
      .def("reset", &W::Reset, "Start a new round (every layer not issued).")
      .def("close", &W::Close, py::call_guard<py::gil_scoped_release>(),
           "Wait for the queued and running layers, then stop the thread.")
      .def("fail_layer_for_test", &W::FailLayerForTest, py::arg("layer"), py::arg("message"))
      .def_property_readonly("num_layers", &W::num_layers);
  mskv::BindHostMemory(m);
}
