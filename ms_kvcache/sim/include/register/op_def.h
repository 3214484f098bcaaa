// AscendC CPU emulation (ms_kvcache.sim): the ops::OpDef builder of CANN's register/op_def.h, so an
// op_host "<op>_def.cpp" / "<op>.cpp" written to CANN's documentation compiles unchanged:
//
//   namespace ops {
//   class AddCustom : public OpDef {
//    public:
//     explicit AddCustom(const char* name) : OpDef(name) {
//       this->Input("x").ParamType(REQUIRED).DataType({ge::DT_FLOAT16}).Format({ge::FORMAT_ND});
//       this->Output("z").ParamType(REQUIRED).DataType({ge::DT_FLOAT16}).Format({ge::FORMAT_ND});
//       this->Attr("mode").AttrType(OPTIONAL).String("BSND");
//       this->SetInferShape(ge::InferShape).SetInferDataType(ge::InferDataType);
//       this->AICore().SetTiling(optiling::TilingFunc).AddConfig("ascend910b");
//     }
//   };
//   OP_ADD(AddCustom);
//   }
//
// The builder only records; the emulation validates the definition the first time the op is used
// (simhost::GetOpDef): every input/output has a dtype list, all non-list dtype lists have one entry
// per row, format lists match, attribute types are set once and optional attributes have a default.
#ifndef ASCENDC_SIM_REGISTER_OP_DEF_H_
#define ASCENDC_SIM_REGISTER_OP_DEF_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "graph/types.h"
#include "graph/ascend_string.h"
#include "register/op_impl_registry.h"

namespace ge { class Operator; }

namespace optiling {
#define FUNC_CHECK_SUPPORTED "check_supported"
#define FUNC_OP_SELECT_FORMAT "op_select_format"
#define FUNC_GET_OP_SUPPORT_INFO "get_op_support_info"
#define FUNC_GET_SPECIFIC_INFO "get_op_specific_info"
using OP_CHECK_FUNC = ge::graphStatus (*)(const ge::Operator& op, ge::AscendString& result);
using PARAM_GENERALIZE_FUNC = ge::graphStatus (*)(const ge::Operator& op, const ge::AscendString& generalize_config,
                                                  ge::AscendString& generalized_op_params);
}  // namespace optiling

namespace ops {
enum Option { IGNORE = 0, OPTIONAL = 1, REQUIRED = 2, DYNAMIC = 3, VIRTUAL = 4 };
enum class FormatCheckOption : uint32_t { DEFAULT = 0, STRICT = 1, MAX };
enum class DependScope : uint32_t { ALL = 0, TILING = 1, INVALID_SCOPE };
enum class FollowType : uint32_t { ALL = 0, DTYPE = 1, FORMAT = 2, SHAPE = 3, INVALID_TYPE };
enum class AttrDataType {
  ATTR_DT_BOOL = 0,
  ATTR_DT_FLOAT = 1,
  ATTR_DT_INT = 2,
  ATTR_DT_STR = 3,
  ATTR_DT_LIST_BOOL = 4,
  ATTR_DT_LIST_FLOAT = 5,
  ATTR_DT_LIST_INT = 6,
  ATTR_DT_LIST_LIST_INT = 7,
  ATTR_DT_MAX
};
enum class CommentSection : uint32_t { CATEGORY = 0, BRIEF, CONSTRAINTS, RESTRICTIONS, SEE, THIRDPARTYFWKCOMPAT, SECTION_MAX };

// ------------------------------------------------------------------------------------------ params
class OpParamDef {
 public:
  struct Data {
    std::string name;
    Option param_type = REQUIRED;
    std::vector<ge::DataType> dtypes;
    bool dtype_set = false, dtype_is_list = false;
    std::vector<ge::Format> formats;
    bool format_set = false, format_is_list = false;
    std::vector<ge::Format> unknown_shape_formats;
    Option value_depend = IGNORE;
    DependScope depend_scope = DependScope::ALL;
    std::string follow;
    FollowType follow_type = FollowType::ALL;
    bool scalar = false, scalar_list = false, ignore_contiguous = false, auto_contiguous = false;
    bool output_shape_depend_on_compute = false;
    uint32_t version = 0;
    std::string comment;
    std::vector<std::string> misuse;  // builder misuse found while recording (reported at validation)
  };

  explicit OpParamDef(const char* name) { d_.name = name == nullptr ? "" : name; }
  OpParamDef& ParamType(Option param_type) { d_.param_type = param_type; return *this; }
  OpParamDef& DataType(std::vector<ge::DataType> types) {
    d_.dtypes = std::move(types); d_.dtype_set = true; d_.dtype_is_list = false; return *this;
  }
  OpParamDef& DataTypeList(std::vector<ge::DataType> types) {
    d_.dtypes = std::move(types); d_.dtype_set = true; d_.dtype_is_list = true; return *this;
  }
  OpParamDef& Format(std::vector<ge::Format> formats) {
    d_.formats = std::move(formats); d_.format_set = true; d_.format_is_list = false; return *this;
  }
  OpParamDef& FormatList(std::vector<ge::Format> formats) {
    d_.formats = std::move(formats); d_.format_set = true; d_.format_is_list = true; return *this;
  }
  OpParamDef& DataTypeForBinQuery(std::vector<ge::DataType>) { return *this; }
  OpParamDef& FormatForBinQuery(std::vector<ge::Format>) { return *this; }
  OpParamDef& UnknownShapeFormat(std::vector<ge::Format> formats) {
    d_.unknown_shape_formats = std::move(formats); return *this;
  }
  OpParamDef& ValueDepend(Option value_depend) { d_.value_depend = value_depend; return *this; }
  OpParamDef& ValueDepend(Option value_depend, DependScope scope) {
    d_.value_depend = value_depend; d_.depend_scope = scope; return *this;
  }
  OpParamDef& IgnoreContiguous(void) { d_.ignore_contiguous = true; return *this; }
  OpParamDef& AutoContiguous() { d_.auto_contiguous = true; return *this; }
  OpParamDef& Scalar() { d_.scalar = true; return *this; }
  OpParamDef& ScalarList() { d_.scalar_list = true; return *this; }
  OpParamDef& To(const ge::DataType) { return *this; }
  OpParamDef& To(const char*) { return *this; }
  OpParamDef& Version(uint32_t version) { d_.version = version; return *this; }
  OpParamDef& InitValue(uint64_t) { return *this; }
  OpParamDef& OutputShapeDependOnCompute() { d_.output_shape_depend_on_compute = true; return *this; }
  OpParamDef& Follow(const char* paramName) { return Follow(paramName, FollowType::ALL); }
  OpParamDef& Follow(const char* paramName, FollowType ftype) {
    d_.follow = paramName == nullptr ? "" : paramName; d_.follow_type = ftype; return *this;
  }
  OpParamDef& Comment(const char* comment) { d_.comment = comment == nullptr ? "" : comment; return *this; }

  const Data& SimData() const { return d_; }
  Data& SimMutableData() { return d_; }

 private:
  Data d_;
};

// ------------------------------------------------------------------------------------------ attrs
class OpAttrDef {
 public:
  using Value = std::variant<std::monostate, bool, float, int64_t, std::string, std::vector<bool>, std::vector<float>,
                             std::vector<int64_t>, std::vector<std::vector<int64_t>>>;
  struct Data {
    std::string name;
    Option attr_type = OPTIONAL;
    bool type_set = false;
    AttrDataType type = AttrDataType::ATTR_DT_MAX;
    bool has_default = false;
    Value default_value;
    uint32_t version = 0;
    std::string comment;
    std::vector<std::string> misuse;
  };

  explicit OpAttrDef(const char* name) { d_.name = name == nullptr ? "" : name; }
  OpAttrDef& AttrType(Option attr_type) { d_.attr_type = attr_type; return *this; }
  OpAttrDef& Bool(void) { return SetType(AttrDataType::ATTR_DT_BOOL); }
  OpAttrDef& Bool(bool value) { return SetDefault(AttrDataType::ATTR_DT_BOOL, Value(value)); }
  OpAttrDef& Float(void) { return SetType(AttrDataType::ATTR_DT_FLOAT); }
  OpAttrDef& Float(float value) { return SetDefault(AttrDataType::ATTR_DT_FLOAT, Value(value)); }
  OpAttrDef& Int(void) { return SetType(AttrDataType::ATTR_DT_INT); }
  OpAttrDef& Int(int64_t value) { return SetDefault(AttrDataType::ATTR_DT_INT, Value(value)); }
  OpAttrDef& String(void) { return SetType(AttrDataType::ATTR_DT_STR); }
  OpAttrDef& String(const char* value) {
    if (value == nullptr) {
      d_.misuse.push_back("String(nullptr) given as default");
      return SetType(AttrDataType::ATTR_DT_STR);
    }
    return SetDefault(AttrDataType::ATTR_DT_STR, Value(std::string(value)));
  }
  OpAttrDef& ListBool(void) { return SetType(AttrDataType::ATTR_DT_LIST_BOOL); }
  OpAttrDef& ListBool(std::vector<bool> value) { return SetDefault(AttrDataType::ATTR_DT_LIST_BOOL, Value(std::move(value))); }
  OpAttrDef& ListFloat(void) { return SetType(AttrDataType::ATTR_DT_LIST_FLOAT); }
  OpAttrDef& ListFloat(std::vector<float> value) {
    return SetDefault(AttrDataType::ATTR_DT_LIST_FLOAT, Value(std::move(value)));
  }
  OpAttrDef& ListInt(void) { return SetType(AttrDataType::ATTR_DT_LIST_INT); }
  OpAttrDef& ListInt(std::vector<int64_t> value) { return SetDefault(AttrDataType::ATTR_DT_LIST_INT, Value(std::move(value))); }
  OpAttrDef& ListListInt(void) { return SetType(AttrDataType::ATTR_DT_LIST_LIST_INT); }
  OpAttrDef& ListListInt(std::vector<std::vector<int64_t>> value) {
    return SetDefault(AttrDataType::ATTR_DT_LIST_LIST_INT, Value(std::move(value)));
  }
  OpAttrDef& Version(uint32_t version) { d_.version = version; return *this; }
  OpAttrDef& Comment(const char* comment) { d_.comment = comment == nullptr ? "" : comment; return *this; }
  ge::AscendString GetName(void) const { return ge::AscendString(d_.name.c_str()); }
  bool IsRequired(void) { return d_.attr_type == REQUIRED; }

  const Data& SimData() const { return d_; }

 private:
  OpAttrDef& SetType(AttrDataType t) {
    if (d_.type_set && d_.type != t) d_.misuse.push_back("attribute type set twice with different types");
    d_.type_set = true;
    d_.type = t;
    return *this;
  }
  OpAttrDef& SetDefault(AttrDataType t, Value v) {
    SetType(t);
    d_.has_default = true;
    d_.default_value = std::move(v);
    return *this;
  }
  Data d_;
};

// ------------------------------------------------------------------------------------------ AI core
class OpAICoreConfig {
 public:
  OpAICoreConfig() = default;
  explicit OpAICoreConfig(const char* soc) : soc_(soc == nullptr ? "" : soc) {}
  OpParamDef& Input(const char* name) { return GetOrAdd(inputs_, name); }
  OpParamDef& Output(const char* name) { return GetOrAdd(outputs_, name); }
  OpAICoreConfig& DynamicCompileStaticFlag(bool flag) { return Flag("dynamicCompileStatic.flag", flag); }
  OpAICoreConfig& DynamicFormatFlag(bool flag) { return Flag("dynamicFormat.flag", flag); }
  OpAICoreConfig& DynamicRankSupportFlag(bool flag) { return Flag("dynamicRankSupport.flag", flag); }
  OpAICoreConfig& DynamicShapeSupportFlag(bool flag) { return Flag("dynamicShapeSupport.flag", flag); }
  OpAICoreConfig& NeedCheckSupportFlag(bool flag) { return Flag("needCheckSupport.flag", flag); }
  OpAICoreConfig& PrecisionReduceFlag(bool flag) { return Flag("precision_reduce.flag", flag); }
  OpAICoreConfig& ExtendCfgInfo(const char* key, const char* value) {
    cfg_[key == nullptr ? "" : key] = value == nullptr ? "" : value;
    return *this;
  }
  const std::vector<OpParamDef>& SimInputs() const { return inputs_; }
  const std::vector<OpParamDef>& SimOutputs() const { return outputs_; }
  const std::map<std::string, std::string>& SimCfg() const { return cfg_; }

 private:
  static OpParamDef& GetOrAdd(std::vector<OpParamDef>& v, const char* name) {
    const std::string n = name == nullptr ? "" : name;
    for (auto& p : v)
      if (p.SimData().name == n) return p;
    v.emplace_back(n.c_str());
    return v.back();
  }
  OpAICoreConfig& Flag(const char* key, bool flag) { cfg_[key] = flag ? "true" : "false"; return *this; }
  std::string soc_;
  std::vector<OpParamDef> inputs_, outputs_;
  std::map<std::string, std::string> cfg_;
};

class OpAICoreDef {
 public:
  struct Config {
    std::string soc;
    bool has_override = false;
    OpAICoreConfig config;
  };
  OpAICoreDef& SetTiling(gert::OpImplRegisterV2::TilingKernelFunc func) { tiling_ = func; return *this; }
  OpAICoreDef& SetCheckSupport(optiling::OP_CHECK_FUNC func) { check_support_ = func; return *this; }
  OpAICoreDef& SetOpSelectFormat(optiling::OP_CHECK_FUNC func) { op_select_format_ = func; return *this; }
  OpAICoreDef& SetOpSupportInfo(optiling::OP_CHECK_FUNC func) { op_support_info_ = func; return *this; }
  OpAICoreDef& SetOpSpecInfo(optiling::OP_CHECK_FUNC func) { op_spec_info_ = func; return *this; }
  OpAICoreDef& SetParamGeneralize(optiling::PARAM_GENERALIZE_FUNC func) { param_generalize_ = func; return *this; }
  OpAICoreDef& LaunchWithZeroEleOutputTensors(bool flag) { zero_ele_launch_ = flag; return *this; }
  gert::OpImplRegisterV2::TilingKernelFunc& GetTiling(void) { return tiling_; }
  optiling::OP_CHECK_FUNC& GetCheckSupport(void) { return check_support_; }
  optiling::OP_CHECK_FUNC& GetOpSelectFormat(void) { return op_select_format_; }
  optiling::OP_CHECK_FUNC& GetOpSupportInfo(void) { return op_support_info_; }
  optiling::OP_CHECK_FUNC& GetOpSpecInfo(void) { return op_spec_info_; }
  optiling::PARAM_GENERALIZE_FUNC& GetParamGeneralize(void) { return param_generalize_; }
  OpAICoreDef& AddConfig(const char* soc) { return Add(soc, nullptr); }
  OpAICoreDef& AddConfig(const char* soc, OpAICoreConfig& aicore_config) { return Add(soc, &aicore_config); }
  const std::vector<Config>& SimConfigs() const { return configs_; }

 private:
  OpAICoreDef& Add(const char* soc, const OpAICoreConfig* cfg) {
    const std::string s = soc == nullptr ? "" : soc;
    for (auto& c : configs_) {
      if (c.soc == s) {
        c.has_override = cfg != nullptr;
        if (cfg != nullptr) c.config = *cfg;
        return *this;
      }
    }
    configs_.push_back(Config{s, cfg != nullptr, cfg != nullptr ? *cfg : OpAICoreConfig()});
    return *this;
  }
  gert::OpImplRegisterV2::TilingKernelFunc tiling_ = nullptr;
  optiling::OP_CHECK_FUNC check_support_ = nullptr, op_select_format_ = nullptr, op_support_info_ = nullptr,
                          op_spec_info_ = nullptr;
  optiling::PARAM_GENERALIZE_FUNC param_generalize_ = nullptr;
  bool zero_ele_launch_ = false;
  std::vector<Config> configs_;
};

// AI CPU / host CPU / MC2 definitions are recorded but have no effect in the emulation.
class OpAICPUDef {
 public:
  OpAICPUDef& Engine(const char*) { return *this; }
  OpAICPUDef& FlagPartial(bool) { return *this; }
  OpAICPUDef& ComputeCost(const char*) { return *this; }
  OpAICPUDef& FlagAsync(bool) { return *this; }
  OpAICPUDef& OpKernelLib(const char*) { return *this; }
  OpAICPUDef& KernelSo(const char*) { return *this; }
  OpAICPUDef& FunctionName(const char*) { return *this; }
  OpAICPUDef& UserDefined(bool) { return *this; }
  OpAICPUDef& ExtendCfgInfo(const char*, const char*) { return *this; }
};
using OpHostCPUDef = OpAICPUDef;
class OpMC2Def {
 public:
  OpMC2Def& HcclGroup(const char*) { return *this; }
  OpMC2Def& HcclGroup(std::vector<const char*>) { return *this; }
};

// ------------------------------------------------------------------------------------------ op
class OpDef {
 public:
  explicit OpDef(const char* type) : type_(type == nullptr ? "" : type) {}
  virtual ~OpDef() = default;
  OpDef(const OpDef&) = default;
  OpDef& operator=(const OpDef&) = default;

  OpParamDef& Input(const char* name) { return GetOrAdd(inputs_, name); }
  OpParamDef& Output(const char* name) { return GetOrAdd(outputs_, name); }
  OpAttrDef& Attr(const char* name) {
    const std::string n = name == nullptr ? "" : name;
    for (auto& a : attrs_)
      if (a.SimData().name == n) return a;
    attrs_.emplace_back(n.c_str());
    return attrs_.back();
  }
  OpDef& Comment(CommentSection, const char*) { return *this; }
  OpDef& SetInferShape(gert::OpImplRegisterV2::InferShapeKernelFunc func) { infer_shape_ = func; return *this; }
  OpDef& SetInferShapeRange(gert::OpImplRegisterV2::InferShapeRangeKernelFunc func) {
    infer_shape_range_ = func; return *this;
  }
  OpDef& SetInferDataType(gert::OpImplRegisterV2::InferDataTypeKernelFunc func) { infer_dtype_ = func; return *this; }
  gert::OpImplRegisterV2::InferShapeKernelFunc& GetInferShape(void) { return infer_shape_; }
  gert::OpImplRegisterV2::InferShapeRangeKernelFunc& GetInferShapeRange(void) { return infer_shape_range_; }
  gert::OpImplRegisterV2::InferDataTypeKernelFunc& GetInferDataType(void) { return infer_dtype_; }
  OpAICoreDef& AICore(void) { return aicore_; }
  OpAICPUDef& AICPU(void) { return aicpu_; }
  OpHostCPUDef& HostCPU(void) { return hostcpu_; }
  OpMC2Def& MC2(void) { return mc2_; }
  OpDef& FormatMatchMode(FormatCheckOption option) { format_match_mode_ = option; return *this; }
  OpDef& EnableFallBack(void) { return *this; }

  const std::string& SimType() const { return type_; }
  const std::vector<OpParamDef>& SimInputs() const { return inputs_; }
  const std::vector<OpParamDef>& SimOutputs() const { return outputs_; }
  const std::vector<OpAttrDef>& SimAttrs() const { return attrs_; }
  const OpAICoreDef& SimAICore() const { return aicore_; }
  FormatCheckOption SimFormatMatchMode() const { return format_match_mode_; }

 private:
  static OpParamDef& GetOrAdd(std::vector<OpParamDef>& v, const char* name) {
    const std::string n = name == nullptr ? "" : name;
    for (auto& p : v)
      if (p.SimData().name == n) return p;
    v.emplace_back(n.c_str());
    return v.back();
  }
  std::string type_;
  std::vector<OpParamDef> inputs_, outputs_;
  std::vector<OpAttrDef> attrs_;
  gert::OpImplRegisterV2::InferShapeKernelFunc infer_shape_ = nullptr;
  gert::OpImplRegisterV2::InferShapeRangeKernelFunc infer_shape_range_ = nullptr;
  gert::OpImplRegisterV2::InferDataTypeKernelFunc infer_dtype_ = nullptr;
  OpAICoreDef aicore_;
  OpAICPUDef aicpu_;
  OpHostCPUDef hostcpu_;
  OpMC2Def mc2_;
  FormatCheckOption format_match_mode_ = FormatCheckOption::DEFAULT;
};
}  // namespace ops

#endif  // ASCENDC_SIM_REGISTER_OP_DEF_H_
