// dtype / format names, error helpers.
#include <algorithm>
#include <cctype>
#include <cstdio>
#include <sstream>
#include <utility>

#include "sim_host_internal.h"

namespace simhost {
namespace {
struct Named {
  const char* name;
  int value;
};
// canonical names first; aliases after
const Named kDTypes[] = {
    {"float32", ge::DT_FLOAT},  {"float16", ge::DT_FLOAT16},   {"bfloat16", ge::DT_BF16},
    {"int8", ge::DT_INT8},      {"uint8", ge::DT_UINT8},       {"int16", ge::DT_INT16},
    {"uint16", ge::DT_UINT16},  {"int32", ge::DT_INT32},       {"uint32", ge::DT_UINT32},
    {"int64", ge::DT_INT64},    {"uint64", ge::DT_UINT64},     {"float64", ge::DT_DOUBLE},
    {"bool", ge::DT_BOOL},      {"complex64", ge::DT_COMPLEX64}, {"complex128", ge::DT_COMPLEX128},
    {"int4", ge::DT_INT4},      {"hifloat8", ge::DT_HIFLOAT8}, {"float8_e5m2", ge::DT_FLOAT8_E5M2},
    {"float8_e4m3fn", ge::DT_FLOAT8_E4M3FN}, {"string", ge::DT_STRING}, {"undefined", ge::DT_UNDEFINED},
    // aliases
    {"float", ge::DT_FLOAT},    {"fp32", ge::DT_FLOAT},        {"half", ge::DT_FLOAT16},
    {"fp16", ge::DT_FLOAT16},   {"bf16", ge::DT_BF16},         {"double", ge::DT_DOUBLE},
    {"fp64", ge::DT_DOUBLE},
};
const Named kFormats[] = {
    {"NCHW", ge::FORMAT_NCHW}, {"NHWC", ge::FORMAT_NHWC}, {"ND", ge::FORMAT_ND},
    {"NC1HWC0", ge::FORMAT_NC1HWC0}, {"FRACTAL_Z", ge::FORMAT_FRACTAL_Z}, {"NC1C0HWPAD", ge::FORMAT_NC1C0HWPAD},
    {"NHWC1C0", ge::FORMAT_NHWC1C0}, {"FSR_NCHW", ge::FORMAT_FSR_NCHW}, {"FRACTAL_DECONV", ge::FORMAT_FRACTAL_DECONV},
    {"C1HWNC0", ge::FORMAT_C1HWNC0}, {"NC1HWC0_C04", ge::FORMAT_NC1HWC0_C04},
    {"FRACTAL_Z_C04", ge::FORMAT_FRACTAL_Z_C04}, {"CHWN", ge::FORMAT_CHWN}, {"HWCN", ge::FORMAT_HWCN},
    {"NC1KHKWHWC0", ge::FORMAT_NC1KHKWHWC0}, {"BN_WEIGHT", ge::FORMAT_BN_WEIGHT},
    {"FILTER_HWCK", ge::FORMAT_FILTER_HWCK}, {"C1HWNCoC0", ge::FORMAT_C1HWNCoC0}, {"MD", ge::FORMAT_MD},
    {"NDHWC", ge::FORMAT_NDHWC}, {"FRACTAL_ZZ", ge::FORMAT_FRACTAL_ZZ}, {"FRACTAL_NZ", ge::FORMAT_FRACTAL_NZ},
    {"NCDHW", ge::FORMAT_NCDHW}, {"DHWCN", ge::FORMAT_DHWCN}, {"NDC1HWC0", ge::FORMAT_NDC1HWC0},
    {"FRACTAL_Z_3D", ge::FORMAT_FRACTAL_Z_3D}, {"CN", ge::FORMAT_CN}, {"NC", ge::FORMAT_NC},
    {"DHWNC", ge::FORMAT_DHWNC}, {"FRACTAL_Z_3D_TRANSPOSE", ge::FORMAT_FRACTAL_Z_3D_TRANSPOSE},
    {"FRACTAL_ZN_LSTM", ge::FORMAT_FRACTAL_ZN_LSTM}, {"FRACTAL_Z_G", ge::FORMAT_FRACTAL_Z_G},
    {"RESERVED", ge::FORMAT_RESERVED}, {"ALL", ge::FORMAT_ALL}, {"NULL", ge::FORMAT_NULL},
    {"ND_RNN_BIAS", ge::FORMAT_ND_RNN_BIAS}, {"FRACTAL_ZN_RNN", ge::FORMAT_FRACTAL_ZN_RNN},
    {"NYUV", ge::FORMAT_NYUV}, {"NYUV_A", ge::FORMAT_NYUV_A}, {"NCL", ge::FORMAT_NCL},
    {"FRACTAL_Z_WINO", ge::FORMAT_FRACTAL_Z_WINO}, {"C1HWC0", ge::FORMAT_C1HWC0},
};

std::string Lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}
std::string Upper(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}
}  // namespace

int ParseDType(const std::string& name) {
  std::string n = Lower(name);
  if (n.rfind("dt_", 0) == 0) {  // "DT_FLOAT16" style
    n = n.substr(3);
    if (n == "float") return ge::DT_FLOAT;
    if (n == "bf16") return ge::DT_BF16;
    if (n == "double") return ge::DT_DOUBLE;
  }
  for (const auto& d : kDTypes)
    if (n == d.name) return d.value;
  std::string known;
  for (size_t i = 0; i < 15; ++i) known += (i ? ", " : "") + std::string(kDTypes[i].name);
  detail::Fail("input.dtype", "", "unknown dtype '" + name + "' (known: " + known + ")");
}

std::string DTypeName(int ge_dtype) {
  for (const auto& d : kDTypes)
    if (d.value == ge_dtype) return d.name;
  return "DT_" + std::to_string(ge_dtype);
}

int ParseFormat(const std::string& name) {
  std::string n = Upper(name);
  if (n.rfind("FORMAT_", 0) == 0) n = n.substr(7);
  for (const auto& f : kFormats)
    if (n == f.name) return f.value;
  detail::Fail("input.format", "", "unknown format '" + name + "'");
}

std::string FormatName(int ge_format) {
  for (const auto& f : kFormats)
    if (f.value == ge_format) return f.name;
  return "FORMAT_" + std::to_string(ge_format);
}

namespace detail {
void Fail(const std::string& rule, const std::string& op, const std::string& message) {
  std::string full = "[" + rule + "] ";
  if (!op.empty()) full += "op " + op + ": ";
  full += message;
  throw HostError(rule, op, full);
}

std::string ShapeStr(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

std::string AttrValueStr(const AttrValue& v) {
  std::ostringstream os;
  if (auto p = std::get_if<bool>(&v)) {
    os << (*p ? "True" : "False");
  } else if (auto p = std::get_if<int64_t>(&v)) {
    os << *p;
  } else if (auto p = std::get_if<double>(&v)) {
    os << *p;
  } else if (auto p = std::get_if<std::string>(&v)) {
    os << "'" << *p << "'";
  } else if (auto p = std::get_if<std::vector<int64_t>>(&v)) {
    os << ShapeStr(*p);
  } else if (auto p = std::get_if<std::vector<double>>(&v)) {
    os << "[";
    for (size_t i = 0; i < p->size(); ++i) os << (i ? ", " : "") << (*p)[i];
    os << "]";
  }
  return os.str();
}
}  // namespace detail
}  // namespace simhost

namespace ge {
const char_t* GetFormatName(Format format) {
  for (const auto& f : simhost::kFormats)
    if (f.value == static_cast<int>(format)) return f.name;
  return "UNKNOWN";
}
}  // namespace ge
