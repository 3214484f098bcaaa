// simhost::RunTiling / RunInferShape: build the gert contexts for a call, run the op's registered
// functions and apply the host-side checks (docs/emulation.md, "host side").
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <mutex>
#include <set>
#include <sstream>

#include "exe_graph/runtime/infer_datatype_context.h"
#include "exe_graph/runtime/infer_shape_context.h"
#include "exe_graph/runtime/tiling_context.h"
#include "exe_graph/runtime/tiling_parse_context.h"
#include "register/op_def.h"
#include "register/tilingdata_base.h"
#include "sim_host_internal.h"

namespace simhost {
using detail::ContextData;
using detail::Fail;
using detail::ShapeStr;

namespace {
// Message of a HostError without its "[rule] " prefix (for re-raising it with the op named).
std::string Bare(const HostError& e) {
  std::string m = e.what();
  const std::string prefix = "[" + e.rule + "] ";
  return m.compare(0, prefix.size(), prefix) == 0 ? m.substr(prefix.size()) : m;
}

std::string DescStr(const TensorDesc& t) {
  if (!t.present) return "absent";
  return t.dtype + ShapeStr(t.shape) + (t.format == "ND" ? "" : " " + t.format);
}

// Tensors of one call grouped per IR parameter: REQUIRED -> 1, absent OPTIONAL -> 0, DYNAMIC -> k.
using Groups = std::vector<std::vector<TensorDesc>>;

std::string Names(const std::vector<ParamInfo>& ps) {
  std::string s;
  for (const auto& p : ps) s += (s.empty() ? "" : ", ") + p.name;
  return "(" + s + ")";
}

std::string GroupStr(const ParamInfo& p, const std::vector<TensorDesc>& g) {
  if (p.param_type == "dynamic") {
    std::string s = "[";
    for (size_t i = 0; i < g.size(); ++i) s += (i ? ", " : "") + DescStr(g[i]);
    return s + "]";
  }
  return g.empty() ? "absent" : DescStr(g[0]);
}

std::string CallSummary(const std::vector<ParamInfo>& ins, const Groups& groups,
                        const std::map<std::string, AttrValue>& attrs, const std::string& soc) {
  std::string s = "inputs (";
  for (size_t i = 0; i < groups.size() && i < ins.size(); ++i)
    s += (i ? ", " : "") + ins[i].name + "=" + GroupStr(ins[i], groups[i]);
  s += ")";
  if (!attrs.empty()) {
    s += ", attrs (";
    bool first = true;
    for (const auto& kv : attrs) {
      s += (first ? "" : ", ") + kv.first + "=" + detail::AttrValueStr(kv.second);
      first = false;
    }
    s += ")";
  }
  if (!soc.empty()) s += ", soc " + soc;
  return s;
}

Groups Group(const std::string& op, const char* kind, const std::vector<ParamInfo>& params,
             const std::vector<TensorDesc>& flat, const std::vector<uint32_t>& counts) {
  if (!counts.empty() && counts.size() != params.size())
    Fail(std::string(kind) + ".count", op,
         "instance_counts has " + std::to_string(counts.size()) + " entries but the OpDef has " +
             std::to_string(params.size()) + " " + kind + "s " + Names(params));
  size_t total = 0;
  for (size_t i = 0; i < params.size(); ++i) {
    const uint32_t c = counts.empty() ? 1U : counts[i];
    if (params[i].param_type != "dynamic" && c != 1)
      Fail(std::string(kind) + ".count", op,
           std::string(kind) + " '" + params[i].name + "' is " + params[i].param_type + " and takes exactly 1 entry (got " +
               std::to_string(c) + "; pass present=false / None for an absent OPTIONAL input)");
    total += c;
  }
  if (flat.size() != total)
    Fail(std::string(kind) + ".count", op,
         "expected " + std::to_string(total) + " " + kind + "s " + Names(params) + ", got " +
             std::to_string(flat.size()) + " (pass None for an absent OPTIONAL input)");
  Groups g(params.size());
  size_t k = 0;
  for (size_t i = 0; i < params.size(); ++i) {
    const uint32_t c = counts.empty() ? 1U : counts[i];
    const std::string who = std::string(kind) + " '" + params[i].name + "' (index " + std::to_string(i) + ")";
    for (uint32_t j = 0; j < c; ++j, ++k) {
      TensorDesc t = flat[k];
      if (!t.present) {
        if (params[i].param_type != "optional")
          Fail(std::string(kind) + ".missing", op, who + " is " + params[i].param_type + " but was passed as absent");
        continue;
      }
      try {  // canonical names ("fp16" -> "float16", "format_nd" -> "ND")
        t.dtype = DTypeName(ParseDType(t.dtype));
        t.format = FormatName(ParseFormat(t.format));
      } catch (const HostError& e) {
        Fail(e.rule, op, who + ": " + Bare(e));
      }
      g[i].push_back(t);
    }
  }
  return g;
}

void FillTensors(const std::string& op, const char* kind, const std::vector<ParamInfo>& params, const Groups& groups,
                 std::vector<gert::AnchorInstanceInfo>* ir, std::vector<gert::CompileTimeTensorDesc>* td,
                 std::vector<gert::StorageShape>* shapes, std::vector<gert::Tensor>* tensors) {
  for (size_t i = 0; i < params.size(); ++i) {
    ir->emplace_back(static_cast<uint32_t>(td->size()), static_cast<uint32_t>(groups[i].size()));
    for (size_t j = 0; j < groups[i].size(); ++j) {
      const TensorDesc& t = groups[i][j];
      const std::string who = std::string(kind) + " '" + params[i].name + "'" +
                              (params[i].param_type == "dynamic" ? "[" + std::to_string(j) + "]" : "");
      int dt = 0, fmt = 0;
      try {
        dt = ParseDType(t.dtype);
        fmt = ParseFormat(t.format);
      } catch (const HostError& e) {
        Fail(e.rule, op, who + ": " + Bare(e));
      }
      if (t.shape.size() > gert::Shape::kMaxDimNum)
        Fail(std::string(kind) + ".rank", op,
             who + " has rank " + std::to_string(t.shape.size()) + " > 25 (gert::Shape::kMaxDimNum)");
      for (int64_t v : t.shape)
        if (v < 0)
          Fail(std::string(kind) + ".shape", op,
               who + " has a negative dimension in " + ShapeStr(t.shape) + " (tiling needs concrete shapes)");
      gert::CompileTimeTensorDesc desc;
      desc.SetDataType(static_cast<ge::DataType>(dt));
      desc.SetOriginFormat(static_cast<ge::Format>(fmt));
      desc.SetStorageFormat(static_cast<ge::Format>(fmt));
      td->push_back(desc);
      gert::StorageShape ss;
      for (int64_t v : t.shape) {
        ss.MutableOriginShape().AppendDim(v);
        ss.MutableStorageShape().AppendDim(v);
      }
      shapes->push_back(ss);
      if (tensors != nullptr) tensors->emplace_back(ss, desc.GetFormat(), static_cast<ge::DataType>(dt));
    }
  }
}

template <typename T>
const void* Hold(detail::AttrStore* st, const T& v) {
  std::unique_ptr<uint8_t[]> buf(new uint8_t[sizeof(T)]);
  std::memcpy(buf.get(), &v, sizeof(T));
  st->holders.push_back(std::move(buf));
  return st->holders.back().get();
}
template <typename T, typename S>
const void* HoldList(detail::AttrStore* st, const std::vector<S>& v) {
  auto buf = gert::ContinuousVector::Create<T>(v.size());
  auto* cv = reinterpret_cast<gert::ContinuousVector*>(buf.get());
  (void)cv->SetSize(v.size());
  T* data = static_cast<T*>(cv->MutableData());
  for (size_t i = 0; i < v.size(); ++i) data[i] = static_cast<T>(v[i]);
  st->holders.push_back(std::move(buf));
  return st->holders.back().get();
}

const char* VariantTypeName(const AttrValue& v) {
  switch (v.index()) {
    case 0: return "bool";
    case 1: return "int";
    case 2: return "float";
    case 3: return "str";
    case 4: return "list of int";
    default: return "list of float";
  }
}

void BuildAttrs(const std::string& op, const OpDefInfo& info, const std::map<std::string, AttrValue>& given,
                detail::AttrStore* st) {
  std::set<std::string> names;
  for (const auto& a : info.attrs) names.insert(a.name);
  for (const auto& kv : given)
    if (!names.count(kv.first)) {
      std::string known;
      for (const auto& a : info.attrs) known += (known.empty() ? "" : ", ") + a.name;
      Fail("attr.unknown", op, "attribute '" + kv.first + "' is not declared in the OpDef (declared: " +
                                   (known.empty() ? "none" : known) + ")");
    }
  for (const auto& a : info.attrs) {
    auto it = given.find(a.name);
    AttrValue v;
    if (it != given.end()) {
      v = it->second;
    } else if (a.has_default && !a.required) {
      v = a.default_value;
    } else {
      Fail("attr.missing", op, "REQUIRED attribute '" + a.name + "' (" + a.type + ") was not given");
    }
    auto bad = [&]() {
      Fail("attr.type", op, "attribute '" + a.name + "' is declared " + a.type + " in the OpDef but got a " +
                                VariantTypeName(v) + " (" + detail::AttrValueStr(v) + ")");
    };
    const void* ptr = nullptr;
    if (a.type == "bool") {
      if (!std::holds_alternative<bool>(v)) bad();
      ptr = Hold(st, std::get<bool>(v));
    } else if (a.type == "int") {
      if (!std::holds_alternative<int64_t>(v)) bad();
      ptr = Hold(st, std::get<int64_t>(v));
    } else if (a.type == "float") {
      float f = 0;
      if (auto d = std::get_if<double>(&v)) f = static_cast<float>(*d);
      else if (auto i = std::get_if<int64_t>(&v)) f = static_cast<float>(*i);
      else bad();
      ptr = Hold(st, f);
    } else if (a.type == "str") {
      if (!std::holds_alternative<std::string>(v)) bad();
      const std::string& s = std::get<std::string>(v);
      std::unique_ptr<uint8_t[]> buf(new uint8_t[s.size() + 1]);
      std::memcpy(buf.get(), s.c_str(), s.size() + 1);
      st->holders.push_back(std::move(buf));
      ptr = st->holders.back().get();
    } else if (a.type == "list_int" || a.type == "list_bool") {
      if (!std::holds_alternative<std::vector<int64_t>>(v)) bad();
      const auto& l = std::get<std::vector<int64_t>>(v);
      if (a.type == "list_bool") {
        for (int64_t x : l)
          if (x != 0 && x != 1) bad();
        ptr = HoldList<bool>(st, l);
      } else {
        ptr = HoldList<int64_t>(st, l);
      }
    } else if (a.type == "list_float") {
      if (auto d = std::get_if<std::vector<double>>(&v)) ptr = HoldList<float>(st, *d);
      else if (auto i = std::get_if<std::vector<int64_t>>(&v)) ptr = HoldList<float>(st, *i);
      else bad();
    } else {
      ptr = nullptr;  // list_list_int: not representable in the emulation (GetAttrPointer returns nullptr)
    }
    st->ptrs.push_back(ptr);
  }
}

size_t NumRows(const std::vector<ParamInfo>& ins, const std::vector<ParamInfo>& outs) {
  size_t rows = 0;
  for (const auto* side : {&ins, &outs})
    for (const auto& p : *side)
      if (!p.dtype_is_list && !p.dtypes.empty()) rows = std::max(rows, p.dtypes.size());
  return rows == 0 ? 1 : rows;
}

std::string ExpectedAt(const ParamInfo& p, size_t r, bool format) {
  const auto& v = format ? p.formats : p.dtypes;
  const bool is_list = format ? p.format_is_list : p.dtype_is_list;
  if (v.empty()) return format ? "ND" : "*";
  if (is_list) {
    std::string s;
    for (const auto& x : v) s += (s.empty() ? "" : "|") + x;
    return s;
  }
  return r < v.size() ? v[r] : "?";
}

bool Matches(const ParamInfo& p, size_t r, const TensorDesc& t, bool strict_format, std::string* why) {
  if (!t.present) return true;
  bool dt_ok = true;
  if (!p.dtypes.empty()) {
    if (p.dtype_is_list) dt_ok = std::find(p.dtypes.begin(), p.dtypes.end(), t.dtype) != p.dtypes.end();
    else dt_ok = r < p.dtypes.size() && p.dtypes[r] == t.dtype;
  }
  bool fmt_ok = true;
  std::vector<std::string> allowed;
  if (p.formats.empty()) allowed.push_back("ND");
  else if (p.format_is_list || p.dtype_is_list) allowed = p.formats;
  else if (r < p.formats.size()) allowed.push_back(p.formats[r]);
  fmt_ok = std::find(allowed.begin(), allowed.end(), t.format) != allowed.end();
  if (!fmt_ok && !strict_format && std::find(allowed.begin(), allowed.end(), "ND") != allowed.end()) fmt_ok = true;
  if (why != nullptr && (!dt_ok || !fmt_ok))
    *why = "'" + p.name + "' expected " + ExpectedAt(p, r, !dt_ok ? false : true) + " got " +
           (!dt_ok ? t.dtype : t.format);
  return dt_ok && fmt_ok;
}

std::string RowStr(const std::vector<ParamInfo>& ins, const std::vector<ParamInfo>& outs, size_t r) {
  std::string s = "(";
  for (size_t i = 0; i < ins.size(); ++i) s += (i ? ", " : "") + ExpectedAt(ins[i], r, false);
  s += " -> ";
  for (size_t i = 0; i < outs.size(); ++i) s += (i ? ", " : "") + ExpectedAt(outs[i], r, false);
  return s + ")";
}

// Rows of the (effective) OpDef whose dtypes/formats match the given tensors.
std::vector<size_t> MatchingRows(const std::vector<ParamInfo>& ins, const std::vector<ParamInfo>& outs,
                                 const Groups& inputs, const Groups* outputs, bool strict_format,
                                 std::string* first_why) {
  std::vector<size_t> rows;
  const size_t n = NumRows(ins, outs);
  for (size_t r = 0; r < n; ++r) {
    bool ok = true;
    std::string why;
    for (size_t i = 0; ok && i < ins.size() && i < inputs.size(); ++i)
      for (const auto& t : inputs[i]) ok = ok && Matches(ins[i], r, t, strict_format, &why);
    if (outputs != nullptr)
      for (size_t i = 0; ok && i < outs.size() && i < outputs->size(); ++i)
        for (const auto& t : (*outputs)[i]) ok = ok && Matches(outs[i], r, t, strict_format, &why);
    if (ok) rows.push_back(r);
    else if (first_why != nullptr && first_why->empty()) *first_why = "vs row 0: " + why;
  }
  return rows;
}

void CheckRows(const std::string& op, const std::string& soc_key, const std::vector<ParamInfo>& ins,
               const std::vector<ParamInfo>& outs, const Groups& inputs, const Groups& outputs, bool strict_format) {
  std::string why;
  if (!MatchingRows(ins, outs, inputs, &outputs, strict_format, &why).empty()) return;
  std::string given = "(";
  for (size_t i = 0; i < inputs.size(); ++i) given += (i ? ", " : "") + ins[i].name + "=" + GroupStr(ins[i], inputs[i]);
  given += " -> ";
  for (size_t i = 0; i < outputs.size(); ++i)
    given += (i ? ", " : "") + outs[i].name + "=" + GroupStr(outs[i], outputs[i]);
  given += ")";
  std::string rows;
  const size_t n = NumRows(ins, outs);
  for (size_t r = 0; r < n && r < 12; ++r) rows += (r ? ", " : "") + RowStr(ins, outs, r);
  if (n > 12) rows += ", ... (" + std::to_string(n) + " rows)";
  Fail("opdef.dtype_row", op,
       "the dtype/format combination " + given + " matches no row of the OpDef" +
           (soc_key.empty() ? "" : " for AddConfig(\"" + soc_key + "\")") + "; rows " + Names(ins) + " -> " +
           Names(outs) + ": " + rows + "; first mismatch " + why);
}

struct Funcs {
  gert::OpImplRegisterV2::InferShapeKernelFunc infer_shape = nullptr;
  gert::OpImplRegisterV2::InferDataTypeKernelFunc infer_dtype = nullptr;
  bool same_as_first = false;
  gert::OpImplRegisterV2::TilingKernelFunc tiling = nullptr;
  detail::ImplFuncs impl;
};

Funcs ResolveFuncs(const std::string& op, const ops::OpDef& cdef) {
  auto& def = const_cast<ops::OpDef&>(cdef);
  Funcs f;
  (void)detail::FindImpl(op, &f.impl);
  auto pick = [&](auto a, auto b, const char* what) {
    if (a != nullptr && b != nullptr && a != b)
      Fail("opdef.conflicting_impl", op,
           std::string("two different ") + what + " functions are registered (OpDef and IMPL_OP*); keep one");
    return a != nullptr ? a : b;
  };
  f.infer_shape = pick(def.GetInferShape(), f.impl.infer_shape, "InferShape");
  f.infer_dtype = pick(def.GetInferDataType(), f.impl.infer_dtype, "InferDataType");
  f.same_as_first = f.infer_dtype == nullptr && f.impl.infer_dtype_same_as_first_input;
  f.tiling = pick(def.AICore().GetTiling(), f.impl.tiling, "Tiling");
  return f;
}

// Runs InferShape + InferDataType on a prepared context; returns the outputs.
std::vector<TensorDesc> Infer(const std::string& op, const Funcs& f, ContextData* d, const std::vector<ParamInfo>& ins,
                              const std::vector<ParamInfo>& outs, const Groups& inputs,
                              const std::map<std::string, AttrValue>& attrs, const std::string& soc) {
  if (f.infer_shape == nullptr)
    Fail("infer_shape.not_registered", op,
         "no InferShape function (OpDef SetInferShape or IMPL_OP_INFERSHAPE); pass the output shapes explicitly");
  d->infer_out_shape.assign(outs.size(), gert::Shape());
  d->infer_out_dtype.assign(outs.size(), ge::DT_UNDEFINED);
  gert::InferShapeContext sctx(d);
  UINT32 rc = 0;
  try {
    rc = f.infer_shape(&sctx);
  } catch (const HostError& e) {
    if (!e.op.empty()) throw;
    Fail(e.rule, op, Bare(e) + " during InferShape for " + CallSummary(ins, inputs, attrs, soc));
  }
  if (rc != ge::GRAPH_SUCCESS)
    Fail("infer_shape.failed", op,
         "InferShape returned " + std::to_string(rc) + " for " + CallSummary(ins, inputs, attrs, soc));
  if (f.infer_dtype != nullptr) {
    gert::InferDataTypeContext tctx(d);
    const UINT32 rc2 = f.infer_dtype(&tctx);
    if (rc2 != ge::GRAPH_SUCCESS)
      Fail("infer_dtype.failed", op,
           "InferDataType returned " + std::to_string(rc2) + " for " + CallSummary(ins, inputs, attrs, soc));
  } else if (f.same_as_first) {
    const ge::DataType first = d->in_desc.empty() ? ge::DT_UNDEFINED : d->in_desc[0].GetDataType();
    for (auto& t : d->infer_out_dtype) t = first;
  } else {
    // No InferDataType: use the OpDef row the inputs select, when it is unique.
    std::string why;
    const auto rows = MatchingRows(ins, outs, inputs, nullptr, false, &why);
    std::set<std::vector<std::string>> candidates;
    for (size_t r : rows) {
      std::vector<std::string> o;
      for (const auto& p : outs) o.push_back(ExpectedAt(p, r, false));
      candidates.insert(o);
    }
    if (candidates.size() != 1)
      Fail("infer_dtype.not_registered", op,
           "no InferDataType function and the OpDef rows do not determine the output dtypes (" +
               std::to_string(candidates.size()) + " candidates) for " + CallSummary(ins, inputs, attrs, soc));
    const auto& o = *candidates.begin();
    for (size_t i = 0; i < o.size(); ++i)
      d->infer_out_dtype[i] = o[i].find('|') == std::string::npos && o[i] != "*"
                                  ? static_cast<ge::DataType>(ParseDType(o[i]))
                                  : ge::DT_UNDEFINED;
  }
  std::vector<TensorDesc> result;
  for (size_t i = 0; i < outs.size(); ++i) {
    TensorDesc t;
    const gert::Shape& s = d->infer_out_shape[i];
    for (size_t k = 0; k < s.GetDimNum(); ++k) t.shape.push_back(s.GetDim(k));
    if (d->infer_out_dtype[i] == ge::DT_UNDEFINED)
      Fail("infer_dtype.unset", op, "output '" + outs[i].name + "' has no dtype after InferDataType");
    t.dtype = DTypeName(d->infer_out_dtype[i]);
    t.format = outs[i].formats.empty() || outs[i].format_is_list ? "ND" : outs[i].formats[0];
    result.push_back(t);
  }
  return result;
}

template <typename T>
std::string Num(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  std::ostringstream os;
  if (std::is_same<T, int8_t>::value || std::is_same<T, uint8_t>::value) os << static_cast<int>(v);
  else os << v;
  return os.str();
}

std::string ValueText(const std::string& dtype, const uint8_t* p) {
  if (dtype == "int8_t") return Num<int8_t>(p);
  if (dtype == "uint8_t") return Num<uint8_t>(p);
  if (dtype == "int16_t") return Num<int16_t>(p);
  if (dtype == "uint16_t") return Num<uint16_t>(p);
  if (dtype == "int32_t") return Num<int32_t>(p);
  if (dtype == "uint32_t") return Num<uint32_t>(p);
  if (dtype == "int64_t") return Num<int64_t>(p);
  if (dtype == "uint64_t") return Num<uint64_t>(p);
  if (dtype == "float") return Num<float>(p);
  return "?";
}

void Decode(const optiling::TilingDef& def, const uint8_t* base, size_t base_off, const std::string& prefix,
            TilingResult* out) {
  for (const auto& f : def.GetFieldInfo()) {
    if (f.placeholder_) continue;
    const std::string name = prefix + f.name_;
    if (f.struct_ != nullptr) {
      Decode(*f.struct_, base, base_off + f.offset_, name + ".", out);
      continue;
    }
    TilingField tf;
    tf.name = name;
    tf.dtype = f.dtype_;
    tf.offset = base_off + f.offset_;
    tf.elem_size = f.elemSize_;
    tf.count = f.arrSize_;
    const size_t n = std::max<size_t>(tf.count, 1);
    tf.raw.assign(base + tf.offset, base + tf.offset + tf.elem_size * n);
    std::string text;
    if (tf.count == 0) {
      text = ValueText(tf.dtype, tf.raw.data());
    } else {
      text = "[";
      for (size_t i = 0; i < n; ++i) text += (i ? ", " : "") + ValueText(tf.dtype, tf.raw.data() + i * tf.elem_size);
      text += "]";
    }
    out->fields.emplace_back(name, text);
    out->field_list.push_back(std::move(tf));
  }
}

// Captures what the op's own code writes to stderr (fd 2) during a call, so a tiling function that
// explains its GRAPH_FAILED on stderr (CANN has no public error-message API for custom ops) gets that
// text into the error message. fd 2 is process-wide: captures are serialised by a mutex.
class StderrCapture {
 public:
  StderrCapture() : lock_(Mutex()) {
    std::fflush(stderr);
    std::cerr.flush();
    tmp_ = std::tmpfile();
    if (tmp_ == nullptr) return;
    saved_ = dup(2);
    if (saved_ < 0 || dup2(fileno(tmp_), 2) < 0) {
      if (saved_ >= 0) close(saved_);
      saved_ = -1;
      std::fclose(tmp_);
      tmp_ = nullptr;
    }
  }
  ~StderrCapture() { (void)Finish(); }
  std::string Finish() {
    if (tmp_ == nullptr) return text_;
    std::fflush(stderr);
    std::cerr.flush();
    dup2(saved_, 2);
    close(saved_);
    std::rewind(tmp_);
    char buf[4096];
    size_t n = 0;
    while ((n = std::fread(buf, 1, sizeof(buf), tmp_)) > 0) text_.append(buf, n);
    std::fclose(tmp_);
    tmp_ = nullptr;
    return text_;
  }

 private:
  static std::mutex& Mutex() {
    static std::mutex mu;
    return mu;
  }
  std::lock_guard<std::mutex> lock_;
  std::FILE* tmp_ = nullptr;
  int saved_ = -1;
  std::string text_;
};

std::string StderrNote(std::string text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  if (text.empty()) return "";
  if (text.size() > 4000) text = text.substr(0, 4000) + "...";
  return "; the tiling function wrote to stderr: " + text;
}

struct CompileInfoGuard {
  void* p = nullptr;
  gert::OpImplRegisterV2::CompileInfoDeleterFunc del = nullptr;
  ~CompileInfoGuard() {
    if (p != nullptr && del != nullptr) del(p);
  }
};
}  // namespace

TilingResult RunTiling(const std::string& op_type, const std::vector<TensorDesc>& inputs,
                       const std::vector<TensorDesc>& outputs, const std::map<std::string, AttrValue>& attrs,
                       const std::string& soc) {
  return RunTiling(op_type, inputs, outputs, attrs, soc, TilingOptions());
}

TilingResult RunTiling(const std::string& op, const std::vector<TensorDesc>& inputs,
                       const std::vector<TensorDesc>& outputs_in, const std::map<std::string, AttrValue>& attrs,
                       const std::string& soc, const TilingOptions& options) {
  const OpDefInfo& info = GetOpDef(op);
  const ops::OpDef& def = detail::GetRawOpDef(op);
  const Platform& plat = GetPlatform(soc);

  // --- the OpDef must be configured for this SoC family
  bool configured = false;
  std::string keys;
  for (const auto& c : info.configs) {
    configured = configured || c.soc == plat.short_soc;
    keys += (keys.empty() ? "" : ", ") + c.soc;
  }
  if (!configured)
    Fail("opdef.soc_not_configured", op,
         "the OpDef has no AICore().AddConfig(\"" + plat.short_soc + "\") needed for " + plat.soc +
             " (configured: " + (keys.empty() ? "none" : keys) + ")");

  std::vector<ParamInfo> ins, outs;
  detail::EffectiveParams(def, plat.short_soc, &ins, &outs);
  const Funcs funcs = ResolveFuncs(op, def);

  ContextData d;
  d.op_type = op;
  d.node_name = op;
  d.platform = detail::PlatformInfosFor(plat.soc);
  const Groups in_groups = Group(op, "input", ins, inputs, options.instance_counts);
  FillTensors(op, "input", ins, in_groups, &d.ir_inputs, &d.in_desc, &d.in_shape, &d.in_tensor);
  BuildAttrs(op, info, attrs, &d.attrs);

  // --- bf16 on a SoC without bf16
  if (!plat.has_bf16)
    for (size_t i = 0; i < in_groups.size(); ++i)
      for (const auto& t : in_groups[i])
        if (ParseDType(t.dtype) == ge::DT_BF16)
          Fail("soc.bf16", op, "input '" + ins[i].name + "' is bfloat16 but " + plat.soc + " has no bfloat16 support");

  // --- outputs: given, or inferred with the op's InferShape / InferDataType
  std::vector<TensorDesc> outputs = outputs_in;
  if (outputs.empty() && !outs.empty()) outputs = Infer(op, funcs, &d, ins, outs, in_groups, attrs, plat.soc);
  const Groups out_groups = Group(op, "output", outs, outputs, {});
  FillTensors(op, "output", outs, out_groups, &d.ir_outputs, &d.out_desc, &d.out_shape, nullptr);

  // --- dtype/format rows (OpDef merged with the SoC's AddConfig override)
  const bool strict = def.SimFormatMatchMode() == ops::FormatCheckOption::STRICT;
  CheckRows(op, plat.short_soc, ins, outs, in_groups, out_groups, strict);

  // --- tiling function
  if (funcs.tiling == nullptr)
    Fail("tiling.not_registered", op, "no tiling function (AICore().SetTiling or IMPL_OP_OPTILING(...).Tiling)");
  const size_t capacity =
      funcs.impl.max_tiling_data_size_set ? funcs.impl.max_tiling_data_size : kDefaultTilingCapacity;
  d.tiling_holder = gert::TilingData::CreateCap(capacity);
  d.tiling_data = reinterpret_cast<gert::TilingData*>(d.tiling_holder.get());

  const std::string summary = CallSummary(ins, in_groups, attrs, plat.soc);
  CompileInfoGuard ci;
  if (funcs.impl.compile_info_creator != nullptr) {
    ci.p = funcs.impl.compile_info_creator();
    ci.del = funcs.impl.compile_info_deleter;
    d.compile_info = ci.p;
  }
  if (funcs.impl.tiling_parse != nullptr) {
    gert::TilingParseContext pctx(&d);
    const UINT32 rc = funcs.impl.tiling_parse(&pctx);
    if (rc != ge::GRAPH_SUCCESS)
      Fail("tiling.parse_failed", op, "TilingParse returned " + std::to_string(rc) + " for " + summary);
  }

  gert::TilingContext ctx(&d);
  UINT32 rc = 0;
  std::string captured;
  {
    StderrCapture cap;
    try {
      rc = funcs.tiling(&ctx);
    } catch (const HostError& e) {
      captured = cap.Finish();
      if (!e.op.empty()) throw;
      Fail(e.rule, op, Bare(e) + " (in the tiling function, for " + summary + ")" + StderrNote(captured));
    } catch (const std::exception& e) {
      captured = cap.Finish();
      Fail("tiling.exception", op,
           std::string("the tiling function threw: ") + e.what() + " (for " + summary + ")" + StderrNote(captured));
    }
    captured = cap.Finish();
  }
  if (rc != ge::GRAPH_SUCCESS)
    Fail("tiling.failed", op,
         "the tiling function returned " + (rc == ge::GRAPH_FAILED ? std::string("GRAPH_FAILED") : std::to_string(rc)) +
             " for " + summary + StderrNote(captured));
  if (!captured.empty()) std::fputs(captured.c_str(), stderr);  // not an error: pass the text through

  // --- checks on what the tiling function produced
  const size_t data_size = d.tiling_data->GetDataSize();
  if (data_size > capacity)
    Fail("tiling.data_overflow", op,
         "tiling data size " + std::to_string(data_size) + " bytes exceeds the tiling buffer capacity " +
             std::to_string(capacity) + " bytes (register a larger max_tiling_data_size with "
             "IMPL_OP_OPTILING(op).Tiling(func, size)) for " + summary);
  if (!d.block_dim_set || d.block_dim == 0)
    Fail("tiling.block_dim", op,
         std::string(d.block_dim_set ? "SetBlockDim(0)" : "SetBlockDim was never called") +
             ": block dim must be in [1, 65535] (CANN TilingContext::SetBlockDim) for " + summary);
  if (d.block_dim > 65535)
    Fail("tiling.block_dim", op,
         "block dim " + std::to_string(d.block_dim) + " is outside [1, 65535] (CANN TilingContext::SetBlockDim)");
  uint32_t limit = 65535;
  std::string limit_name;
  if (options.kernel_type == "aiv") {
    limit = plat.split_core ? plat.aiv_cores : plat.ai_core_cnt;
    limit_name = "GetCoreNumAiv()";
  } else if (options.kernel_type == "aic" || options.kernel_type == "mix") {
    limit = plat.split_core ? plat.aic_cores : plat.ai_core_cnt;
    limit_name = "GetCoreNumAic()";
  } else if (options.kernel_type != "any") {
    Fail("options.kernel_type", op, "kernel_type must be 'aiv', 'aic', 'mix' or 'any', got '" + options.kernel_type + "'");
  }
  if (d.block_dim > limit)
    Fail("tiling.block_dim_cores", op,
         "block dim " + std::to_string(d.block_dim) + " exceeds " + limit_name + " = " + std::to_string(limit) +
             " on " + plat.soc + " (kernel_type '" + options.kernel_type + "') for " + summary);
  const auto* ws = reinterpret_cast<const gert::TypedContinuousVector<size_t>*>(d.workspace_holder.get());
  if (!d.workspace_requested || ws->GetSize() == 0)
    Fail("tiling.workspace_unset", op,
         "the tiling function never set the workspace sizes: call context->GetWorkspaceSizes(1) and write the "
         "bytes the kernel needs (at least 0; AscendC library APIs need GetLibApiWorkSpaceSize())");
  for (size_t i = 0; i < ws->GetSize(); ++i)
    if (ws->GetData()[i] == detail::kWorkspaceUnset)
      Fail("tiling.workspace_unset", op,
           "workspace[" + std::to_string(i) + "] was requested with GetWorkspaceSizes(" +
               std::to_string(ws->GetSize()) + ") but never written");

  TilingResult r;
  const uint8_t* bytes = static_cast<const uint8_t*>(d.tiling_data->GetData());
  r.tiling_data.assign(bytes, bytes + data_size);
  r.block_dim = d.block_dim;
  r.tiling_key = d.tiling_key;
  r.tiling_key_set = d.tiling_key_set;
  r.schedule_mode = d.schedule_mode;
  r.tiling_capacity = capacity;
  r.outputs = outputs;
  for (size_t i = 0; i < ws->GetSize(); ++i) r.workspace_sizes.push_back(static_cast<int64_t>(ws->GetData()[i]));

  // --- decode through the registered TilingData class (per-tiling-key class first)
  auto& factory = optiling::CTilingDataClassFactory::GetInstance();
  std::shared_ptr<optiling::TilingDef> cls =
      factory.CreateTilingDataInstance((op + "_" + std::to_string(d.tiling_key)).c_str());
  if (cls == nullptr) cls = factory.CreateTilingDataInstance(op.c_str());
  if (cls != nullptr) {
    r.tiling_struct = cls->GetTilingClassName();
    const size_t need = cls->GetDataSize();
    if (need > 0 && data_size == 0)
      Fail("tiling.data_size_unset", op,
           "tiling data size is 0 but the registered class " + r.tiling_struct + " is " + std::to_string(need) +
               " bytes: call context->GetRawTilingData()->SetDataSize(tiling.GetDataSize()) after SaveToBuffer");
    if (data_size < need)
      Fail("tiling.data_size_mismatch", op,
           "tiling data size " + std::to_string(data_size) + " bytes is smaller than the registered class " +
               r.tiling_struct + " (" + std::to_string(need) + " bytes); the kernel's GET_TILING_DATA would read "
               "past the data");
    std::vector<uint8_t> copy(std::max(need, data_size) + 8, 0);
    std::memcpy(copy.data(), bytes, data_size);
    Decode(*cls, copy.data(), 0, "", &r);
  }
  return r;
}

std::vector<TensorDesc> RunInferShape(const std::string& op, const std::vector<TensorDesc>& inputs,
                                      const std::map<std::string, AttrValue>& attrs,
                                      const std::vector<uint32_t>& instance_counts) {
  const OpDefInfo& info = GetOpDef(op);
  const ops::OpDef& def = detail::GetRawOpDef(op);
  std::vector<ParamInfo> ins = info.inputs, outs = info.outputs;
  const Funcs funcs = ResolveFuncs(op, def);
  ContextData d;
  d.op_type = op;
  d.node_name = op;
  const Groups in_groups = Group(op, "input", ins, inputs, instance_counts);
  FillTensors(op, "input", ins, in_groups, &d.ir_inputs, &d.in_desc, &d.in_shape, &d.in_tensor);
  BuildAttrs(op, info, attrs, &d.attrs);
  return Infer(op, funcs, &d, ins, outs, in_groups, attrs, "");
}
}  // namespace simhost
