// OpDef registry (OP_ADD), OpImplRegisterV2 registry (IMPL_OP_*), OpDef validation and introspection.
#include <algorithm>
#include <cctype>
#include <map>
#include <memory>
#include <set>
#include <sstream>

#include "register/op_def_registry.h"
#include "sim_host_internal.h"

namespace simhost {
namespace detail {
namespace {
struct OpEntry {
  ops::OpDefCreator creator;
  int registrations = 0;
  std::unique_ptr<ops::OpDef> def;
  std::unique_ptr<OpDefInfo> info;
};
std::map<std::string, OpEntry>& Ops() {
  static std::map<std::string, OpEntry> ops;
  return ops;
}
std::map<std::string, ImplFuncs>& Impls() {
  static std::map<std::string, ImplFuncs> impls;
  return impls;
}

const char* OptionName(ops::Option o) {
  switch (o) {
    case ops::REQUIRED: return "required";
    case ops::OPTIONAL: return "optional";
    case ops::DYNAMIC: return "dynamic";
    case ops::VIRTUAL: return "virtual";
    default: return "ignore";
  }
}

std::string AttrTypeName(ops::AttrDataType t) {
  switch (t) {
    case ops::AttrDataType::ATTR_DT_BOOL: return "bool";
    case ops::AttrDataType::ATTR_DT_FLOAT: return "float";
    case ops::AttrDataType::ATTR_DT_INT: return "int";
    case ops::AttrDataType::ATTR_DT_STR: return "str";
    case ops::AttrDataType::ATTR_DT_LIST_BOOL: return "list_bool";
    case ops::AttrDataType::ATTR_DT_LIST_FLOAT: return "list_float";
    case ops::AttrDataType::ATTR_DT_LIST_INT: return "list_int";
    case ops::AttrDataType::ATTR_DT_LIST_LIST_INT: return "list_list_int";
    default: return "unset";
  }
}

AttrValue ToAttrValue(const ops::OpAttrDef::Value& v) {
  if (auto p = std::get_if<bool>(&v)) return *p;
  if (auto p = std::get_if<float>(&v)) return static_cast<double>(*p);
  if (auto p = std::get_if<int64_t>(&v)) return *p;
  if (auto p = std::get_if<std::string>(&v)) return *p;
  if (auto p = std::get_if<std::vector<bool>>(&v)) {
    std::vector<int64_t> r;
    for (bool b : *p) r.push_back(b ? 1 : 0);
    return r;
  }
  if (auto p = std::get_if<std::vector<float>>(&v)) return std::vector<double>(p->begin(), p->end());
  if (auto p = std::get_if<std::vector<int64_t>>(&v)) return *p;
  return std::vector<int64_t>{};  // list-of-list defaults are not representable
}

// Validation of one side (OpDef or OpDef merged with a per-SoC config). Appends problems to `errs`.
void ValidateParams(const std::string& where, const std::vector<ParamInfo>& ins, const std::vector<ParamInfo>& outs,
                    std::vector<std::string>* errs) {
  size_t rows = 0;
  std::string rows_from;
  auto check = [&](const ParamInfo& p, const char* kind) {
    const std::string who = where + std::string(kind) + " '" + p.name + "'";
    if (p.param_type == "dynamic") return;  // rows of dynamic params follow the same rule, checked below
    if (p.dtypes.empty()) {
      errs->push_back(who + " has no DataType list");
      return;
    }
    if (!p.dtype_is_list) {
      if (rows == 0) {
        rows = p.dtypes.size();
        rows_from = who;
      } else if (p.dtypes.size() != rows) {
        errs->push_back(who + " has " + std::to_string(p.dtypes.size()) + " DataType entries but " + rows_from +
                        " has " + std::to_string(rows) + " (every non-list DataType must have one entry per row)");
      }
    }
    if (!p.formats.empty() && !p.format_is_list && !p.dtype_is_list && p.formats.size() != p.dtypes.size())
      errs->push_back(who + " has " + std::to_string(p.dtypes.size()) + " DataType entries but " +
                      std::to_string(p.formats.size()) + " Format entries (they must be equal)");
    if (!p.unknown_shape_formats.empty() && !p.dtype_is_list && p.unknown_shape_formats.size() != p.dtypes.size())
      errs->push_back(who + " has " + std::to_string(p.dtypes.size()) + " DataType entries but " +
                      std::to_string(p.unknown_shape_formats.size()) + " UnknownShapeFormat entries");
    if (p.param_type == "ignore" || p.param_type == "virtual")
      errs->push_back(who + " has ParamType " + p.param_type + " (expected REQUIRED, OPTIONAL or DYNAMIC)");
  };
  for (const auto& p : ins) check(p, "input");
  for (const auto& p : outs) check(p, "output");
  for (const auto& p : outs)
    if (p.param_type == "optional")
      errs->push_back(where + "output '" + p.name + "' is OPTIONAL; AscendC outputs must be REQUIRED or DYNAMIC");
}

std::unique_ptr<OpDefInfo> BuildInfo(const ops::OpDef& def) {
  auto info = std::make_unique<OpDefInfo>();
  info->type = def.SimType();
  for (const auto& p : def.SimInputs()) info->inputs.push_back(ToParamInfo(p.SimData()));
  for (const auto& p : def.SimOutputs()) info->outputs.push_back(ToParamInfo(p.SimData()));
  for (const auto& a : def.SimAttrs()) {
    const auto& d = a.SimData();
    AttrInfo ai;
    ai.name = d.name;
    ai.type = AttrTypeName(d.type);
    ai.required = d.attr_type == ops::REQUIRED;
    ai.has_default = d.has_default;
    if (d.has_default) ai.default_value = ToAttrValue(d.default_value);
    info->attrs.push_back(ai);
  }
  for (const auto& c : def.SimAICore().SimConfigs()) {
    ConfigInfo ci;
    ci.soc = c.soc;
    ci.has_override = c.has_override;
    if (c.has_override) EffectiveParams(def, c.soc, &ci.inputs, &ci.outputs);
    info->configs.push_back(ci);
  }
  ImplFuncs impl;
  const bool has_impl = FindImpl(def.SimType(), &impl);
  auto& mdef = const_cast<ops::OpDef&>(def);
  info->has_tiling = mdef.AICore().GetTiling() != nullptr || (has_impl && impl.tiling != nullptr);
  info->has_infer_shape = mdef.GetInferShape() != nullptr || (has_impl && impl.infer_shape != nullptr);
  info->has_infer_dtype = mdef.GetInferDataType() != nullptr ||
                          (has_impl && (impl.infer_dtype != nullptr || impl.infer_dtype_same_as_first_input));
  return info;
}

void Validate(const ops::OpDef& def, const OpDefInfo& info) {
  std::vector<std::string> errs;
  ValidateParams("", info.inputs, info.outputs, &errs);
  for (const auto& c : info.configs) {
    bool lower = !c.soc.empty();
    for (char ch : c.soc)
      if (std::isupper(static_cast<unsigned char>(ch))) lower = false;
    if (!lower)
      errs.push_back("AddConfig(\"" + c.soc + "\"): SoC keys are lower-case CANN short SoC names such as "
                     "\"ascend910b\", \"ascend910_93\", \"ascend310p\"");
    if (c.has_override) ValidateParams("AddConfig(\"" + c.soc + "\") ", c.inputs, c.outputs, &errs);
  }
  for (const auto& p : def.SimInputs())
    for (const auto& m : p.SimData().misuse) errs.push_back("input '" + p.SimData().name + "': " + m);
  for (const auto& p : def.SimOutputs())
    for (const auto& m : p.SimData().misuse) errs.push_back("output '" + p.SimData().name + "': " + m);
  std::set<std::string> names;
  for (const auto& a : def.SimAttrs()) {
    const auto& d = a.SimData();
    const std::string who = "attr '" + d.name + "'";
    for (const auto& m : d.misuse) errs.push_back(who + ": " + m);
    if (!d.type_set) errs.push_back(who + " has no type (call .Int()/.Float()/.Bool()/.String()/.ListInt()...)");
    if (d.attr_type == ops::OPTIONAL && !d.has_default)
      errs.push_back(who + " is OPTIONAL but has no default value (e.g. .String(\"BSND\"))");
    if (d.attr_type != ops::OPTIONAL && d.attr_type != ops::REQUIRED)
      errs.push_back(who + " has AttrType " + OptionName(d.attr_type) + " (expected OPTIONAL or REQUIRED)");
  }
  for (const auto& p : info.inputs)
    if (!p.name.empty() && !names.insert("in:" + p.name).second) errs.push_back("duplicate input '" + p.name + "'");
  if (!errs.empty()) {
    std::string msg = "invalid OpDef (" + std::to_string(errs.size()) + " problem" + (errs.size() > 1 ? "s" : "") +
                      "): ";
    for (size_t i = 0; i < errs.size(); ++i) msg += (i ? "; " : "") + errs[i];
    Fail("opdef.invalid", info.type, msg);
  }
}

OpEntry& EntryLocked(const std::string& op_type) {
  auto& ops = Ops();
  auto it = ops.find(op_type);
  if (it == ops.end()) {
    std::string known;
    for (const auto& kv : ops) known += (known.empty() ? "" : ", ") + kv.first;
    Fail("opdef.unknown_op", op_type,
         "no OpDef registered with OP_ADD(" + op_type + ") (registered: " + (known.empty() ? "none" : known) + ")");
  }
  OpEntry& e = it->second;
  if (!e.info) {
    std::unique_ptr<ops::OpDef> def;
    try {
      def = std::make_unique<ops::OpDef>(e.creator(op_type.c_str()));
    } catch (const HostError&) {
      throw;
    } catch (const std::exception& ex) {
      Fail("opdef.create", op_type, std::string("the OpDef constructor threw: ") + ex.what());
    }
    auto info = BuildInfo(*def);
    Validate(*def, *info);
    e.def = std::move(def);
    e.info = std::move(info);
  }
  return e;
}
}  // namespace

std::recursive_mutex& RegistryMutex() {
  static std::recursive_mutex mu;
  return mu;
}

ImplFuncs& MutableImpl(const std::string& op_type) { return Impls()[op_type]; }

bool FindImpl(const std::string& op_type, ImplFuncs* out) {
  std::lock_guard<std::recursive_mutex> lock(RegistryMutex());
  auto& impls = Impls();
  auto it = impls.find(op_type);
  if (it == impls.end()) return false;
  *out = it->second;
  return true;
}

ParamInfo ToParamInfo(const ops::OpParamDef::Data& d) {
  ParamInfo p;
  p.name = d.name;
  p.param_type = OptionName(d.param_type);
  for (auto t : d.dtypes) p.dtypes.push_back(DTypeName(t));
  for (auto f : d.formats) p.formats.push_back(FormatName(f));
  for (auto f : d.unknown_shape_formats) p.unknown_shape_formats.push_back(FormatName(f));
  p.dtype_is_list = d.dtype_is_list;
  p.format_is_list = d.format_is_list;
  p.value_depend = d.value_depend != ops::IGNORE;
  return p;
}

void EffectiveParams(const ops::OpDef& def, const std::string& short_soc, std::vector<ParamInfo>* inputs,
                     std::vector<ParamInfo>* outputs) {
  auto merge = [](const std::vector<ops::OpParamDef>& base, const std::vector<ops::OpParamDef>* over,
                  std::vector<ParamInfo>* out) {
    out->clear();
    for (const auto& p : base) {
      const ops::OpParamDef::Data* use = &p.SimData();
      if (over != nullptr)
        for (const auto& o : *over)
          if (o.SimData().name == p.SimData().name) use = &o.SimData();
      out->push_back(ToParamInfo(*use));
    }
    if (over != nullptr)
      for (const auto& o : *over) {
        bool found = false;
        for (const auto& p : base) found = found || p.SimData().name == o.SimData().name;
        if (!found) out->push_back(ToParamInfo(o.SimData()));
      }
  };
  const std::vector<ops::OpParamDef>* over_in = nullptr;
  const std::vector<ops::OpParamDef>* over_out = nullptr;
  for (const auto& c : def.SimAICore().SimConfigs())
    if (c.soc == short_soc && c.has_override) {
      over_in = &c.config.SimInputs();
      over_out = &c.config.SimOutputs();
    }
  merge(def.SimInputs(), over_in, inputs);
  merge(def.SimOutputs(), over_out, outputs);
  // Follow(): an input/output without DataType follows the named parameter
  auto resolve_follow = [&](const std::vector<ops::OpParamDef>& base, std::vector<ParamInfo>* out) {
    for (size_t i = 0; i < out->size() && i < base.size(); ++i) {
      const auto& d = base[i].SimData();
      if (d.follow.empty() || !(*out)[i].dtypes.empty()) continue;
      for (const auto* side : {inputs, outputs})
        for (const auto& q : *side)
          if (q.name == d.follow && &q != &(*out)[i]) {
            if (d.follow_type == ops::FollowType::ALL || d.follow_type == ops::FollowType::DTYPE) {
              (*out)[i].dtypes = q.dtypes;
              (*out)[i].dtype_is_list = q.dtype_is_list;
            }
            if (d.follow_type == ops::FollowType::ALL || d.follow_type == ops::FollowType::FORMAT) {
              (*out)[i].formats = q.formats;
              (*out)[i].format_is_list = q.format_is_list;
            }
          }
    }
  };
  resolve_follow(def.SimInputs(), inputs);
  resolve_follow(def.SimOutputs(), outputs);
}

const ops::OpDef& GetRawOpDef(const std::string& op_type) {
  std::lock_guard<std::recursive_mutex> lock(RegistryMutex());
  return *EntryLocked(op_type).def;
}
}  // namespace detail

std::vector<std::string> ListOps() {
  std::lock_guard<std::recursive_mutex> lock(detail::RegistryMutex());
  std::vector<std::string> v;
  for (const auto& kv : detail::Ops()) v.push_back(kv.first);
  return v;
}

const OpDefInfo& GetOpDef(const std::string& op_type) {
  std::lock_guard<std::recursive_mutex> lock(detail::RegistryMutex());
  return *detail::EntryLocked(op_type).info;
}
}  // namespace simhost

// ------------------------------------------------------------------------------------ ops / gert
namespace ops {
int OpDefFactory::OpDefRegister(const char* name, OpDefCreator creator) {
  std::lock_guard<std::recursive_mutex> lock(simhost::detail::RegistryMutex());
  auto& e = simhost::detail::Ops()[name == nullptr ? "" : name];
  e.creator = std::move(creator);
  e.registrations += 1;
  e.def.reset();
  e.info.reset();
  return 0;
}
}  // namespace ops

namespace gert {
OpImplRegisterV2::OpImplRegisterV2(const ge::char_t* op_type) : op_type_(op_type == nullptr ? "" : op_type) {
  std::lock_guard<std::recursive_mutex> lock(simhost::detail::RegistryMutex());
  (void)simhost::detail::MutableImpl(op_type_);
}
OpImplRegisterV2& OpImplRegisterV2::InferShape(InferShapeKernelFunc f) {
  std::lock_guard<std::recursive_mutex> lock(simhost::detail::RegistryMutex());
  simhost::detail::MutableImpl(op_type_).infer_shape = f;
  return *this;
}
OpImplRegisterV2& OpImplRegisterV2::InferDataType(InferDataTypeKernelFunc f) {
  std::lock_guard<std::recursive_mutex> lock(simhost::detail::RegistryMutex());
  auto& impl = simhost::detail::MutableImpl(op_type_);
  impl.infer_dtype = f;
  impl.infer_dtype_same_as_first_input = false;
  return *this;
}
OpImplRegisterV2& OpImplRegisterV2::InferOutDataTypeSameWithFirstInput() {
  std::lock_guard<std::recursive_mutex> lock(simhost::detail::RegistryMutex());
  auto& impl = simhost::detail::MutableImpl(op_type_);
  impl.infer_dtype = nullptr;
  impl.infer_dtype_same_as_first_input = true;
  return *this;
}
OpImplRegisterV2& OpImplRegisterV2::Tiling(TilingKernelFunc f, size_t max_tiling_data_size) {
  std::lock_guard<std::recursive_mutex> lock(simhost::detail::RegistryMutex());
  auto& impl = simhost::detail::MutableImpl(op_type_);
  impl.tiling = f;
  impl.max_tiling_data_size = max_tiling_data_size;
  impl.max_tiling_data_size_set = true;
  return *this;
}
OpImplRegisterV2& OpImplRegisterV2::TilingParseImpl(TilingParseFunc f, CompileInfoCreatorFunc c,
                                                    CompileInfoDeleterFunc d) {
  std::lock_guard<std::recursive_mutex> lock(simhost::detail::RegistryMutex());
  auto& impl = simhost::detail::MutableImpl(op_type_);
  impl.tiling_parse = f;
  impl.compile_info_creator = c;
  impl.compile_info_deleter = d;
  return *this;
}
}  // namespace gert
