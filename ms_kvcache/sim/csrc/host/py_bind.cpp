// Python bindings of the host side, added to the emulation module `_sim` by BindHost().
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstring>

#include "sim_host.h"

namespace py = pybind11;

namespace simhost {
namespace {
py::object* g_module = nullptr;  // the module BindHost extended (kept alive for the process)

std::string DTypeOf(const py::handle& h) {
  if (py::isinstance<py::str>(h)) return h.cast<std::string>();
  try {
    return py::module_::import("numpy").attr("dtype")(h).attr("name").cast<std::string>();
  } catch (py::error_already_set&) {
    return py::str(h).cast<std::string>();
  }
}

std::vector<int64_t> ShapeOf(const py::handle& h) {
  std::vector<int64_t> s;
  for (auto d : py::iter(h)) s.push_back(d.cast<int64_t>());
  return s;
}

TensorDesc ToDesc(const py::handle& h, const char* what, size_t index) {
  TensorDesc t;
  if (h.is_none()) {
    t.present = false;
    return t;
  }
  if (py::isinstance<py::dict>(h)) {
    auto d = py::reinterpret_borrow<py::dict>(h);
    t.shape = ShapeOf(d["shape"]);
    t.dtype = DTypeOf(d["dtype"]);
    if (d.contains("format")) t.format = d["format"].cast<std::string>();
    return t;
  }
  if (py::hasattr(h, "shape") && py::hasattr(h, "dtype") && !py::isinstance<py::tuple>(h) &&
      !py::isinstance<py::list>(h)) {  // numpy array / MindSpore tensor
    t.shape = ShapeOf(h.attr("shape"));
    t.dtype = DTypeOf(h.attr("dtype"));
    return t;
  }
  auto seq = py::reinterpret_borrow<py::sequence>(h);
  if (seq.size() < 2 || seq.size() > 3)
    throw py::value_error(std::string(what) + "[" + std::to_string(index) +
                          "]: expected None, (shape, dtype), (shape, dtype, format), a dict or an array");
  t.shape = ShapeOf(seq[0]);
  t.dtype = DTypeOf(seq[1]);
  if (seq.size() == 3) t.format = seq[2].cast<std::string>();
  return t;
}

std::vector<TensorDesc> ToDescs(const py::object& o, const char* what) {
  std::vector<TensorDesc> v;
  if (o.is_none()) return v;
  size_t i = 0;
  for (auto h : py::iter(o)) v.push_back(ToDesc(h, what, i++));
  return v;
}

// Inputs of a call: a DYNAMIC OpDef input takes a list of descs; the result is flattened in IR order
// with one instance count per IR input.
std::pair<std::vector<TensorDesc>, std::vector<uint32_t>> ToInputs(const std::string& op, const py::object& o) {
  const OpDefInfo& info = GetOpDef(op);
  bool any_dynamic = false;
  for (const auto& p : info.inputs) any_dynamic = any_dynamic || p.param_type == "dynamic";
  if (!any_dynamic || o.is_none()) return {ToDescs(o, "inputs"), {}};
  std::vector<py::handle> items;
  for (auto h : py::iter(o)) items.push_back(h);
  if (items.size() != info.inputs.size()) return {ToDescs(o, "inputs"), {}};  // RunTiling reports the count
  std::vector<TensorDesc> flat;
  std::vector<uint32_t> counts;
  for (size_t i = 0; i < items.size(); ++i) {
    if (info.inputs[i].param_type == "dynamic") {
      if (!py::isinstance<py::list>(items[i]) && !py::isinstance<py::tuple>(items[i]))
        throw py::type_error("inputs[" + std::to_string(i) + "] ('" + info.inputs[i].name +
                             "') is DYNAMIC: pass a list of (shape, dtype) entries");
      uint32_t n = 0;
      for (auto h : py::iter(items[i])) flat.push_back(ToDesc(h, "inputs", i)), ++n;
      counts.push_back(n);
    } else {
      flat.push_back(ToDesc(items[i], "inputs", i));
      counts.push_back(1);
    }
  }
  return {flat, counts};
}

bool IsInt(const py::handle& h) {
  return !py::isinstance<py::bool_>(h) && (PyLong_Check(h.ptr()) || py::hasattr(h, "__index__")) &&
         !PyFloat_Check(h.ptr());
}

AttrValue ToAttr(const std::string& name, const py::handle& h) {
  if (py::isinstance<py::bool_>(h)) return h.cast<bool>();
  if (py::hasattr(h, "dtype") && py::hasattr(h, "item") && !py::hasattr(h, "__len__"))
    return ToAttr(name, h.attr("item")());  // numpy scalar
  if (IsInt(h)) return h.cast<int64_t>();
  if (PyFloat_Check(h.ptr())) return h.cast<double>();
  if (py::isinstance<py::str>(h)) return h.cast<std::string>();
  if (py::isinstance<py::list>(h) || py::isinstance<py::tuple>(h)) {
    bool any_float = false;
    std::vector<py::handle> items;
    for (auto x : py::iter(h)) {
      items.push_back(x);
      if (PyFloat_Check(x.ptr())) any_float = true;
      else if (!py::isinstance<py::bool_>(x) && !IsInt(x))
        throw py::type_error("attribute '" + name + "': list items must be int, bool or float");
    }
    if (any_float) {
      std::vector<double> v;
      for (auto x : items) v.push_back(x.cast<double>());
      return v;
    }
    std::vector<int64_t> v;
    for (auto x : items) v.push_back(py::isinstance<py::bool_>(x) ? (x.cast<bool>() ? 1 : 0) : x.cast<int64_t>());
    return v;
  }
  throw py::type_error("attribute '" + name + "': unsupported Python type " +
                       py::str(py::type::of(h)).cast<std::string>());
}

std::map<std::string, AttrValue> ToAttrs(const py::object& o) {
  std::map<std::string, AttrValue> m;
  if (o.is_none()) return m;
  for (auto kv : py::reinterpret_borrow<py::dict>(o)) {
    const std::string k = kv.first.cast<std::string>();
    m[k] = ToAttr(k, kv.second);
  }
  return m;
}

py::object FromAttr(const AttrValue& v) {
  return std::visit([](const auto& x) -> py::object { return py::cast(x); }, v);
}

py::dict ParamDict(const ParamInfo& p) {
  py::dict d;
  d["name"] = p.name;
  d["param_type"] = p.param_type;
  d["dtypes"] = p.dtypes;
  d["formats"] = p.formats;
  d["unknown_shape_formats"] = p.unknown_shape_formats;
  d["dtype_is_list"] = p.dtype_is_list;
  d["format_is_list"] = p.format_is_list;
  d["value_depend"] = p.value_depend;
  return d;
}

py::list ParamList(const std::vector<ParamInfo>& ps) {
  py::list l;
  for (const auto& p : ps) l.append(ParamDict(p));
  return l;
}

py::object FieldValue(const TilingField& f) {
  auto one = [&](const uint8_t* p) -> py::object {
    auto get = [&](auto tag) {
      decltype(tag) v;
      std::memcpy(&v, p, sizeof(v));
      return v;
    };
    const std::string& t = f.dtype;
    if (t == "int8_t") return py::int_(static_cast<int>(get(int8_t{})));
    if (t == "uint8_t") return py::int_(static_cast<int>(get(uint8_t{})));
    if (t == "int16_t") return py::int_(get(int16_t{}));
    if (t == "uint16_t") return py::int_(get(uint16_t{}));
    if (t == "int32_t") return py::int_(get(int32_t{}));
    if (t == "uint32_t") return py::int_(get(uint32_t{}));
    if (t == "int64_t") return py::int_(get(int64_t{}));
    if (t == "uint64_t") return py::int_(get(uint64_t{}));
    if (t == "float") return py::float_(get(float{}));
    return py::none();
  };
  if (f.count == 0) return one(f.raw.data());
  py::list l;
  for (size_t i = 0; i < f.count; ++i) l.append(one(f.raw.data() + i * f.elem_size));
  return l;
}

void Translate(const HostError& e) {
  py::object type;
  if (g_module != nullptr && py::hasattr(*g_module, "EmulationError")) type = g_module->attr("EmulationError");
  if (!type) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
    return;
  }
  py::object exc = type(e.what());
  try {
    exc.attr("rule") = e.rule;
    exc.attr("op") = e.op.empty() ? py::object(py::none()) : py::object(py::str(e.op));
    exc.attr("core") = py::none();
    exc.attr("message") = std::string(e.what());
  } catch (py::error_already_set&) {
  }
  PyErr_SetObject(type.ptr(), exc.ptr());
}
}  // namespace

void BindHost(pybind11::module_& m) {
  if (g_module == nullptr) g_module = new py::object(m);
  py::register_local_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const HostError& e) {
      Translate(e);
    }
  });

  m.def("ops", &ListOps, "Registered op types (OP_ADD), sorted.");

  m.def(
      "opdef",
      [](const std::string& op) {
        const OpDefInfo& info = GetOpDef(op);
        py::dict d;
        d["type"] = info.type;
        d["inputs"] = ParamList(info.inputs);
        d["outputs"] = ParamList(info.outputs);
        py::list attrs;
        for (const auto& a : info.attrs) {
          py::dict ad;
          ad["name"] = a.name;
          ad["type"] = a.type;
          ad["required"] = a.required;
          ad["default"] = a.has_default ? FromAttr(a.default_value) : py::object(py::none());
          attrs.append(ad);
        }
        d["attrs"] = attrs;
        py::list configs;
        for (const auto& c : info.configs) {
          py::dict cd;
          cd["soc"] = c.soc;
          cd["override"] = c.has_override;
          if (c.has_override) {
            cd["inputs"] = ParamList(c.inputs);
            cd["outputs"] = ParamList(c.outputs);
          }
          configs.append(cd);
        }
        d["configs"] = configs;
        d["has_tiling"] = info.has_tiling;
        d["has_infer_shape"] = info.has_infer_shape;
        d["has_infer_dtype"] = info.has_infer_dtype;
        return d;
      },
      py::arg("op"),
      "OpDef of a registered op as a dict: type; inputs/outputs (name, param_type, dtypes, formats, ...); "
      "attrs (name, type, required, default) in OpDef order; configs (AddConfig SoC keys and overrides).");

  m.def(
      "tiling",
      [](const std::string& op, const py::object& inputs, const py::object& attrs, const std::string& soc,
         const py::object& outputs, const std::string& kernel_type) {
        auto in = ToInputs(op, inputs);
        auto out = ToDescs(outputs, "outputs");
        auto at = ToAttrs(attrs);
        TilingOptions opt;
        opt.kernel_type = kernel_type;
        opt.instance_counts = in.second;
        TilingResult r;
        {
          py::gil_scoped_release release;
          r = RunTiling(op, in.first, out, at, soc, opt);
        }
        py::dict d;
        py::dict fields;
        py::list field_info;
        for (const auto& f : r.field_list) {
          fields[py::str(f.name)] = FieldValue(f);
          py::dict fi;
          fi["name"] = f.name;
          fi["dtype"] = f.dtype;
          fi["offset"] = f.offset;
          fi["count"] = f.count;
          field_info.append(fi);
        }
        d["fields"] = fields;
        d["field_info"] = field_info;
        d["tiling_struct"] = r.tiling_struct;
        d["block_dim"] = r.block_dim;
        d["tiling_key"] = r.tiling_key;
        int64_t ws = 0;
        for (auto s : r.workspace_sizes) ws += s;
        d["workspace_bytes"] = ws;
        d["workspace_sizes"] = r.workspace_sizes;
        d["tiling_bytes"] = py::bytes(reinterpret_cast<const char*>(r.tiling_data.data()), r.tiling_data.size());
        d["tiling_size"] = r.tiling_data.size();
        d["tiling_capacity"] = r.tiling_capacity;
        d["schedule_mode"] = r.schedule_mode;
        py::list outs;
        for (const auto& t : r.outputs) outs.append(py::make_tuple(py::tuple(py::cast(t.shape)), t.dtype));
        d["outputs"] = outs;
        return d;
      },
      py::arg("op"), py::arg("inputs"), py::arg("attrs") = py::none(), py::arg("soc") = "Ascend910B1",
      py::arg("outputs") = py::none(), py::arg("kernel_type") = "aiv",
      "Run the op's registered tiling function like CANN does and check the result.\n\n"
      "inputs: one entry per OpDef input, in order: (shape, dtype[, format]), a dict, an array, or None for an "
      "absent OPTIONAL input; a DYNAMIC input takes a list of such entries. outputs: same form, or None to infer them with the op's InferShape/InferDataType. "
      "attrs: {name: value}; unset optional attributes take their OpDef default. soc: Ascend910B1, Ascend910B3, "
      "Ascend910_9391 or Ascend310P3. kernel_type: 'aiv' | 'aic' | 'mix' | 'any' (block dim limit).\n"
      "Returns dict(fields={name: value}, block_dim, tiling_key, workspace_bytes, workspace_sizes, tiling_bytes, "
      "tiling_size, tiling_capacity, tiling_struct, field_info, outputs). Raises EmulationError naming the rule.");

  m.def(
      "infer_shape",
      [](const std::string& op, const py::object& inputs, const py::object& attrs) {
        auto in = ToInputs(op, inputs);
        auto at = ToAttrs(attrs);
        auto outs = RunInferShape(op, in.first, at, in.second);
        py::list l;
        for (const auto& t : outs) l.append(py::make_tuple(py::tuple(py::cast(t.shape)), t.dtype));
        return l;
      },
      py::arg("op"), py::arg("inputs"), py::arg("attrs") = py::none(),
      "Run the op's InferShape / InferDataType; returns [(shape, dtype), ...] per output.");

  m.def(
      "platform",
      [](const std::string& soc) {
        const Platform& p = GetPlatform(soc);
        py::dict d;
        d["soc"] = p.soc;
        d["short_soc"] = p.short_soc;
        d["short_soc_version"] = p.short_soc_version;
        d["npu_arch"] = p.npu_arch;
        d["aiv_cores"] = p.aiv_cores;
        d["aic_cores"] = p.aic_cores;
        d["ai_core_cnt"] = p.ai_core_cnt;
        d["vector_core_cnt"] = p.vector_core_cnt;
        d["ub_size"] = p.ub_size;
        d["l1_size"] = p.l1_size;
        d["l0a_size"] = p.l0a_size;
        d["l0b_size"] = p.l0b_size;
        d["l0c_size"] = p.l0c_size;
        d["l2_size"] = p.l2_size;
        d["hbm_size"] = p.hbm_size;
        d["has_datacopy_pad"] = p.has_datacopy_pad;
        d["has_bf16"] = p.has_bf16;
        d["split_core"] = p.split_core;
        d["ub_kfc_reserved"] = p.ub_kfc_reserved;
        d["source"] = p.source;
        d["unverified"] = p.unverified;
        return d;
      },
      py::arg("soc"), "Platform table entry of an emulated SoC (CANN platform ini values; see docs/emulation.md).");
  m.def("platforms", &ListPlatforms, "Emulated SoC names.");
}
}  // namespace simhost
