// AscendC CPU emulation: ge::AscendString, CANN's ABI-neutral string (metadef graph/ascend_string.h).
#ifndef ASCENDC_SIM_GRAPH_ASCEND_STRING_H_
#define ASCENDC_SIM_GRAPH_ASCEND_STRING_H_

#include <cstddef>
#include <functional>
#include <memory>
#include <string>

namespace ge {
class AscendString {
 public:
  AscendString() = default;
  AscendString(const char* name) : name_(name == nullptr ? nullptr : std::make_shared<std::string>(name)) {}  // NOLINT
  AscendString(const char* name, size_t length)
      : name_(name == nullptr ? nullptr : std::make_shared<std::string>(name, length)) {}
  const char* GetString() const { return name_ == nullptr ? "" : name_->c_str(); }
  size_t GetLength() const { return name_ == nullptr ? 0U : name_->size(); }
  size_t Hash() const { return std::hash<std::string>()(GetString()); }
  bool operator<(const AscendString& d) const { return std::string(GetString()) < d.GetString(); }
  bool operator>(const AscendString& d) const { return std::string(GetString()) > d.GetString(); }
  bool operator<=(const AscendString& d) const { return !(*this > d); }
  bool operator>=(const AscendString& d) const { return !(*this < d); }
  bool operator==(const AscendString& d) const { return std::string(GetString()) == d.GetString(); }
  bool operator!=(const AscendString& d) const { return !(*this == d); }

 private:
  std::shared_ptr<std::string> name_;
};
}  // namespace ge

namespace std {
template <>
struct hash<ge::AscendString> {
  size_t operator()(const ge::AscendString& s) const { return s.Hash(); }
};
}  // namespace std

#endif  // ASCENDC_SIM_GRAPH_ASCEND_STRING_H_
