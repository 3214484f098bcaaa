// pybind11 module `ms_kvcache._sim`: the AscendC CPU emulation seen from Python.
//
// The same shared object also holds this repository's op_kernel / op_host / op_proto code and one
// MindSpore CPU AOT entry point per op (`<OpType>`), so `f"{_sim.__file__}:{OpType}"` is what the
// "sim" backend hands to ops.Custom(func_type="aot").
#include <dlfcn.h>
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <string>
#include <vector>

#include "runner.h"
#include "sim_host.h"

namespace py = pybind11;
using ascendc_sim::CoreStats;
using ascendc_sim::LaunchOptions;
using ascendc_sim::LaunchResult;
using ascendc_sim::ParamArg;
using ascendc_sim::TensorArg;

namespace {

py::object* g_error_type = nullptr;

void RaiseEmulationError(const std::string& message, const std::string& rule, const std::string& op, int core) {
  py::object type = *g_error_type;
  py::object exc = type(message);
  exc.attr("rule") = rule;
  exc.attr("op") = op.empty() ? py::object(py::none()) : py::object(py::str(op));
  exc.attr("core") = core < 0 ? py::object(py::none()) : py::object(py::int_(core));
  exc.attr("message") = message;
  PyErr_SetObject(type.ptr(), exc.ptr());
}

// (array, dtype_name) -> TensorArg; None -> absent
TensorArg ToTensor(const py::handle& h, const std::string& what) {
  TensorArg t;
  if (h.is_none()) {
    t.present = false;
    return t;
  }
  auto tup = py::reinterpret_borrow<py::tuple>(h);
  if (tup.size() != 2) throw py::type_error(what + ": expected (array, dtype name)");
  py::array a = tup[0].cast<py::array>();
  t.dtype = tup[1].cast<std::string>();
  if (!(a.flags() & py::array::c_style))
    throw py::value_error(what + ": the array must be C-contiguous (use numpy.ascontiguousarray)");
  for (py::ssize_t d = 0; d < a.ndim(); ++d) t.shape.push_back(static_cast<int64_t>(a.shape(d)));
  t.nbytes = static_cast<uint64_t>(a.nbytes());
  t.writable = a.writeable();
  t.data = const_cast<void*>(a.data());
  if (t.data == nullptr && t.nbytes == 0) {
    static char dummy[64];
    t.data = dummy;  // zero-size tensors still get an address
    t.writable = false;
  }
  return t;
}

ParamArg ToParam(const py::handle& h, const std::string& what) {
  ParamArg p;
  if (py::isinstance<py::list>(h)) {
    p.dynamic = true;
    size_t k = 0;
    for (auto x : py::iter(h)) p.items.push_back(ToTensor(x, what + "[" + std::to_string(k++) + "]"));
  } else {
    TensorArg t = ToTensor(h, what);
    p.items.push_back(t);
  }
  return p;
}

simhost::AttrValue ToAttr(const std::string& name, const std::string& type, const py::handle& h) {
  auto bad = [&]() { return py::type_error("attribute '" + name + "': expected " + type + ", got " +
                                           py::str(py::type::of(h)).cast<std::string>()); };
  try {
    if (type == "bool") return h.cast<bool>();
    if (type == "int") {
      if (py::isinstance<py::bool_>(h) || PyFloat_Check(h.ptr())) throw bad();
      return h.cast<int64_t>();
    }
    if (type == "float") return h.cast<double>();
    if (type == "str") {
      if (!py::isinstance<py::str>(h)) throw bad();
      return h.cast<std::string>();
    }
    if (type == "list_int") return h.cast<std::vector<int64_t>>();
    if (type == "list_float") return h.cast<std::vector<double>>();
  } catch (py::cast_error&) {
    throw bad();
  }
  // unknown type: guess
  if (py::isinstance<py::bool_>(h)) return h.cast<bool>();
  if (py::isinstance<py::int_>(h)) return h.cast<int64_t>();
  if (py::isinstance<py::float_>(h)) return h.cast<double>();
  if (py::isinstance<py::str>(h)) return h.cast<std::string>();
  return h.cast<std::vector<int64_t>>();
}

py::dict StatsDict(const LaunchResult& r) {
  py::dict d;
  d["op"] = r.op;
  d["kernel"] = r.kernel;
  d["soc"] = r.soc;
  d["npu_arch"] = r.npu_arch;
  d["order"] = r.order;
  d["block_dim"] = r.block_dim;
  d["tiling_key"] = r.tiling_key;
  d["workspace_bytes"] = r.workspace_bytes;
  d["gm_copied"] = r.gm_copied;
  py::list rd, wr, dc, pad, dci, dco, dcu, padi, pado, ub, sr, sw, vec;
  uint64_t trd = 0, twr = 0;
  int used = 0;
  for (const CoreStats& s : r.cores) {
    rd.append(s.gm_read);
    wr.append(s.gm_write);
    dc.append(s.datacopy_in + s.datacopy_out + s.datacopy_ub);
    pad.append(s.pad_in + s.pad_out);
    dci.append(s.datacopy_in);
    dco.append(s.datacopy_out);
    dcu.append(s.datacopy_ub);
    padi.append(s.pad_in);
    pado.append(s.pad_out);
    ub.append(s.ub_peak);
    sr.append(s.scalar_read);
    sw.append(s.scalar_write);
    vec.append(s.vec_ops);
    trd += s.gm_read;
    twr += s.gm_write;
    used += (s.gm_read + s.gm_write + s.datacopy_in + s.datacopy_out + s.pad_in + s.pad_out + s.vec_ops) > 0;
  }
  d["cores_used"] = used;
  d["gm_read_bytes"] = trd;
  d["gm_write_bytes"] = twr;
  d["gm_read_bytes_per_core"] = rd;
  d["gm_write_bytes_per_core"] = wr;
  d["datacopy_calls_per_core"] = dc;
  d["datacopy_pad_calls_per_core"] = pad;
  d["datacopy_in_per_core"] = dci;
  d["datacopy_out_per_core"] = dco;
  d["datacopy_ub_per_core"] = dcu;
  d["datacopy_pad_in_per_core"] = padi;
  d["datacopy_pad_out_per_core"] = pado;
  d["ub_bytes_per_core"] = ub;
  d["scalar_gm_reads_per_core"] = sr;
  d["scalar_gm_writes_per_core"] = sw;
  d["vector_ops_per_core"] = vec;
  py::dict tf;
  for (const auto& kv : r.tiling_fields) tf[py::str(kv.first)] = kv.second;
  d["tiling_fields"] = tf;
  if (r.cost) {  // the cost model's prediction (docs/emulation.md, "The cost model")
    py::dict c, params;
    for (const auto& kv : r.cost_params) params[py::str(kv.first)] = kv.second;
    py::list end, mte2, vec, mte3, hb, hr, hc, db, dr, dc;
    for (const CoreStats& s : r.cores) {
      end.append(s.cost_end_ns / 1e3);
      mte2.append(s.cost_busy_ns[ascendc_sim::kMTE2] / 1e3);
      vec.append(s.cost_busy_ns[ascendc_sim::kV] / 1e3);
      mte3.append(s.cost_busy_ns[ascendc_sim::kMTE3] / 1e3);
      hb.append(s.cost_bytes[ascendc_sim::kLinkHost]);
      hr.append(s.cost_runs[ascendc_sim::kLinkHost]);
      hc.append(s.cost_calls[ascendc_sim::kLinkHost]);
      db.append(s.cost_bytes[ascendc_sim::kLinkHbm]);
      dr.append(s.cost_runs[ascendc_sim::kLinkHbm]);
      dc.append(s.cost_calls[ascendc_sim::kLinkHbm]);
    }
    c["time_us"] = r.cost_time_ns / 1e3;
    c["launch_us"] = r.cost_params.empty() ? 0.0 : [&] {
      for (const auto& kv : r.cost_params)
        if (kv.first == "launch_us") return kv.second;
      return 0.0;
    }();
    c["core_us"] = r.cost_core_ns / 1e3;
    c["hbm_link_us"] = r.cost_link_ns[ascendc_sim::kLinkHbm] / 1e3;
    c["pcie_link_us"] = r.cost_link_ns[ascendc_sim::kLinkHost] / 1e3;
    c["core_end_us"] = end;
    c["mte2_busy_us"] = mte2;
    c["vector_busy_us"] = vec;
    c["mte3_busy_us"] = mte3;
    c["host_bytes_per_core"] = hb;
    c["host_runs_per_core"] = hr;
    c["host_copies_per_core"] = hc;
    c["hbm_bytes_per_core"] = db;
    c["hbm_runs_per_core"] = dr;
    c["hbm_copies_per_core"] = dc;
    c["params"] = params;
    d["cost"] = c;
  }
  return d;
}

LaunchOptions Opts(const std::string& soc, const std::string& order, int hazards, uint64_t seed,
                   const std::string& gm_copy, int cost, const py::object& cost_params, const py::object& host) {
  LaunchOptions o;
  o.soc = soc;
  o.order = order;
  o.hazards = hazards;
  o.seed = seed;
  o.gm_copy = gm_copy;
  o.cost = cost;
  if (!cost_params.is_none())
    for (auto kv : py::reinterpret_borrow<py::dict>(cost_params))
      o.cost_params.push_back({kv.first.cast<std::string>(), kv.second.cast<double>()});
  if (!host.is_none())
    for (auto h : host) o.host.push_back(h.cast<std::string>());
  return o;
}

std::string LibraryPath() {
  Dl_info info;
  if (dladdr(reinterpret_cast<void*>(&ascendc_sim::RunKernel), &info) && info.dli_fname) return info.dli_fname;
  return "";
}

}  // namespace

PYBIND11_MODULE(_sim, m) {
  m.doc() = "AscendC CPU emulation (ms_kvcache): run AscendC kernels and CANN host tiling on the CPU";

  static py::exception<ascendc_sim::EmulationError> exc(m, "EmulationError", PyExc_RuntimeError);
  exc.doc() =
      "A kernel, its tiling or a launch broke a documented AscendC / CANN rule.\n\n"
      "Attributes: rule (str, e.g. 'UB_BUDGET'), op (str or None), core (int or None: the AI core on which "
      "the kernel broke it), message (str: full text naming the rule, the op, the core and the values).";
  g_error_type = new py::object(exc);
  py::register_local_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const ascendc_sim::EmulationError& e) {
      RaiseEmulationError(e.what(), e.rule, e.op, e.core);
    }
  });

  simhost::BindHost(m);

  m.def(
      "launch",
      [](const std::string& op, const py::list& inputs, const py::list& outputs, const py::object& attrs,
         const std::string& soc, const std::string& order, int hazards, uint64_t seed, const std::string& gm_copy,
         int cost, const py::object& cost_params, const py::object& host) {
        const simhost::OpDefInfo& def = simhost::GetOpDef(op);
        const LaunchOptions opts = Opts(soc, order, hazards, seed, gm_copy, cost, cost_params, host);
        std::vector<ParamArg> ins, outs;
        size_t i = 0;
        for (auto h : inputs) ins.push_back(ToParam(h, "input " + std::to_string(i++)));
        i = 0;
        for (auto h : outputs) {
          ParamArg p = ToParam(h, "output " + std::to_string(i++));
          outs.push_back(p);
        }
        std::map<std::string, simhost::AttrValue> at;
        if (!attrs.is_none()) {
          for (auto kv : py::reinterpret_borrow<py::dict>(attrs)) {
            const std::string k = kv.first.cast<std::string>();
            std::string type;
            for (const auto& a : def.attrs)
              if (a.name == k) type = a.type;
            at[k] = ToAttr(k, type, kv.second);
          }
        }
        LaunchResult r;
        {
          py::gil_scoped_release nogil;
          r = ascendc_sim::RunOp(op, ins, outs, at, opts);
        }
        return StatsDict(r);
      },
      py::arg("op"), py::arg("inputs"), py::arg("outputs"), py::arg("attrs") = py::none(), py::arg("soc") = "",
      py::arg("order") = "", py::arg("hazards") = -1, py::arg("seed") = 0, py::arg("gm_copy") = "",
      py::arg("cost") = -1, py::arg("cost_params") = py::none(), py::arg("host") = py::none(),
      "Low-level launch (use ms_kvcache.sim.launch). inputs/outputs: OpDef order; each entry is "
      "(array, dtype name), None, or for a DYNAMIC input a list of such tuples.");

  m.def(
      "launch_kernel",
      [](const std::string& kernel, const py::list& args, uint32_t block_dim, const py::bytes& tiling,
         uint64_t tiling_key, uint64_t workspace_bytes, bool with_ws_tiling, const std::string& soc,
         const std::string& order, int hazards, uint64_t seed, const std::string& gm_copy, int cost,
         const py::object& cost_params, const py::object& host) {
        const LaunchOptions opts = Opts(soc, order, hazards, seed, gm_copy, cost, cost_params, host);
        std::vector<TensorArg> ts;
        size_t i = 0;
        for (auto h : args) ts.push_back(ToTensor(h, "argument " + std::to_string(i++)));
        std::string tb = tiling;
        std::vector<uint8_t> tv(tb.begin(), tb.end());
        LaunchResult r;
        {
          py::gil_scoped_release nogil;
          r = ascendc_sim::RunKernel(kernel, ts, block_dim, tv, tiling_key, workspace_bytes, with_ws_tiling, opts);
        }
        return StatsDict(r);
      },
      py::arg("kernel"), py::arg("args"), py::arg("block_dim"), py::arg("tiling") = py::bytes(),
      py::arg("tiling_key") = 0, py::arg("workspace_bytes") = 0, py::arg("with_ws_tiling") = true,
      py::arg("soc") = "", py::arg("order") = "", py::arg("hazards") = -1, py::arg("seed") = 0,
      py::arg("gm_copy") = "", py::arg("cost") = -1, py::arg("cost_params") = py::none(), py::arg("host") = py::none(),
      "Low-level direct kernel launch without OpDef/tiling function (use ms_kvcache.sim.launch_kernel).");

  m.def("kernels", &ascendc_sim::ListKernels, "Registered kernel entry names.");
  m.def("kernel_source", &ascendc_sim::KernelSource, py::arg("kernel"), "Source file a kernel was compiled from.");
  m.def("kernel_archs", &ascendc_sim::KernelArchs, py::arg("kernel"),
        "__NPU_ARCH__ values a kernel entry was compiled for (2201: Atlas A2/A3, 2002: Ascend310P).");
  m.def("snake_case", &ascendc_sim::SnakeCase, py::arg("op_type"), "Kernel entry name of an OpDef type.");
  m.def("set_soc", &ascendc_sim::SetDefaultSoc, py::arg("soc"), "Default SoC of launches and AOT entries.");
  m.def("get_soc", &ascendc_sim::DefaultSoc);
  m.def("set_order", &ascendc_sim::SetDefaultOrder, py::arg("order"), "Default core order: forward|reverse|threads.");
  m.def("get_order", &ascendc_sim::DefaultOrder);
  m.def("set_hazards", &ascendc_sim::SetDefaultHazards, py::arg("on"), "Enable the pipe hazard tracker by default.");
  m.def("get_hazards", &ascendc_sim::DefaultHazards);
  m.def("set_gm_copy", &ascendc_sim::SetDefaultGmCopy, py::arg("mode"), "always|never|auto (<= 256 MiB).");
  m.def("get_gm_copy", &ascendc_sim::DefaultGmCopy);
  m.def("last_error", &ascendc_sim::LastError, "Message of the last failing AOT launch.");
  m.def("set_error_hint", &ascendc_sim::SetErrorHint, py::arg("op"), py::arg("rule"), py::arg("hint"),
        "Sentence appended to a failing AOT call's message for this op and rule ('' removes it).");
  m.def("error_hint", &ascendc_sim::ErrorHint, py::arg("op"), py::arg("rule"));
  m.def("set_error_diagnoser", &ascendc_sim::SetErrorDiagnoser, py::arg("op"), py::arg("rule"), py::arg("library"),
        py::arg("symbol"),
        "After a failing AOT call of this op with this rule, call extern \"C\" `symbol` of `library` with the "
        "call's arguments and append '; cause: <its text>' to the message (library '' removes it).");
  m.def("last_launch_stats", []() { return StatsDict(ascendc_sim::LastLaunch()); },
        "Statistics of the most recent successful launch (any path, including the MindSpore AOT entry).");
  m.def("library_path", &LibraryPath, "Path of libascendc_sim.so.");
  m.def(
      "cost_params",
      [](const std::string& soc, const py::object& overrides, const std::string& op) {
        std::vector<std::pair<std::string, double>> o;
        if (!overrides.is_none())
          for (auto kv : py::reinterpret_borrow<py::dict>(overrides))
            o.push_back({kv.first.cast<std::string>(), kv.second.cast<double>()});
        py::dict d;
        for (const auto& p : ascendc_sim::CostParamTable(soc, o, op)) {
          py::dict row;
          row["value"] = p.value;
          row["unit"] = p.unit;
          row["source"] = p.source;
          d[py::str(p.name)] = row;
        }
        return d;
      },
      py::arg("soc"), py::arg("overrides") = py::none(), py::arg("op") = "",
      "The cost model's parameter table of a SoC: name -> {value, unit, source}, with overrides (checked).");
  m.def("set_cost_model", &ascendc_sim::SetDefaultCost, py::arg("on"), "Run the cost model in later launches.");
  m.def("get_cost_model", &ascendc_sim::DefaultCost);
}
