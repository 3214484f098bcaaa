// AscendC CPU emulation: gert::Shape as declared by CANN (exe_graph/runtime/shape.h): at most 25 dims,
// GetShapeSize() returns kInvalidDimValue on overflow. SetDim(idx, v) keeps CANN's documented behaviour
// of NOT growing the rank past idx (call SetDimNum first), so shape code behaves as on a real install.
#ifndef ASCENDC_SIM_EXE_GRAPH_SHAPE_H_
#define ASCENDC_SIM_EXE_GRAPH_SHAPE_H_

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <limits>

namespace gert {
struct Shape {
 public:
  static constexpr size_t kMaxDimNum = 25;
  static constexpr int64_t kInvalidDimValue = std::numeric_limits<int64_t>::min();

  Shape() : dim_num_(0), dims_{0} {}
  Shape(const std::initializer_list<int64_t>& args) : Shape() {
    if (args.size() > kMaxDimNum) return;
    for (int64_t v : args) dims_[dim_num_++] = v;
  }
  Shape(const Shape& other) : dim_num_(other.dim_num_), dims_{0} {
    for (size_t i = 0; i < dim_num_; ++i) dims_[i] = other.dims_[i];
  }
  Shape& operator=(const Shape& other) {
    if (this != &other) {
      dim_num_ = other.dim_num_;
      for (size_t i = 0; i < dim_num_; ++i) dims_[i] = other.dims_[i];
    }
    return *this;
  }
  bool operator==(const Shape& rhs) const {
    if (dim_num_ != rhs.dim_num_) return false;
    for (size_t i = 0; i < dim_num_; ++i)
      if (dims_[i] != rhs.dims_[i]) return false;
    return true;
  }
  bool operator!=(const Shape& rhs) const { return !(*this == rhs); }

  int64_t GetShapeSize() const {
    int64_t n = 1;
    for (size_t i = 0; i < dim_num_; ++i) {
      if (__builtin_mul_overflow(n, dims_[i], &n)) return kInvalidDimValue;
    }
    return n;
  }
  bool IsScalar() const { return dim_num_ == 0; }
  void SetScalar() { dim_num_ = 0; }
  size_t GetDimNum() const { return dim_num_; }
  void SetDimNum(const size_t dim_num) { dim_num_ = dim_num > kMaxDimNum ? kMaxDimNum : dim_num; }
  int64_t GetDim(const size_t idx) const { return idx >= kMaxDimNum ? kInvalidDimValue : dims_[idx]; }
  const int64_t& operator[](const size_t idx) const { return dims_[idx]; }
  int64_t& operator[](const size_t idx) { return dims_[idx]; }
  void SetDim(size_t idx, const int64_t dim_value) {
    if (idx >= kMaxDimNum) return;
    dims_[idx] = dim_value;
    dim_num_ = (dim_num_ < idx) ? idx : dim_num_;  // CANN semantics (see file comment)
  }
  Shape& AppendDim(const int64_t value) {
    if (dim_num_ < kMaxDimNum) dims_[dim_num_++] = value;
    return *this;
  }

 private:
  size_t dim_num_;
  int64_t dims_[kMaxDimNum];
};
}  // namespace gert

#endif  // ASCENDC_SIM_EXE_GRAPH_SHAPE_H_
