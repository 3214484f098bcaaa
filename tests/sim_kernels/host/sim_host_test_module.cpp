// pybind11 test module for the host side of the emulation: the op_host/op_proto test ops of this
// folder + simhost::BindHost, plus the generated tiling-layout probes (tests/_sim_host_harness.py).
// It mirrors how `_sim` exposes the host API (EmulationError with .rule/.op/.core/.message).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "sim_host.h"

namespace py = pybind11;

void RegisterLayoutProbes(py::module_& m);  // generated

PYBIND11_MODULE(_sim_host_test, m) {
  py::object runtime_error = py::reinterpret_borrow<py::object>(PyExc_RuntimeError);
  py::object err = py::reinterpret_steal<py::object>(
      PyErr_NewException("_sim_host_test.EmulationError", runtime_error.ptr(), nullptr));
  m.attr("EmulationError") = err;
  simhost::BindHost(m);
  RegisterLayoutProbes(m);
}
