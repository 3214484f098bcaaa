// AscendC CPU emulation: ge::Shape of CANN's graph/tensor.h (the graph-level shape class; op_host code
// sometimes builds one from a gert::Shape). Tensor / TensorDesc / Operator are not emulated.
#ifndef ASCENDC_SIM_GRAPH_TENSOR_H_
#define ASCENDC_SIM_GRAPH_TENSOR_H_

#include <cstdint>
#include <vector>

#include "graph/types.h"

namespace ge {
class Shape {
 public:
  Shape() = default;
  explicit Shape(const std::vector<int64_t>& dims) : dims_(dims) {}
  size_t GetDimNum() const { return dims_.size(); }
  int64_t GetDim(size_t idx) const { return idx < dims_.size() ? dims_[idx] : 0; }
  graphStatus SetDim(size_t idx, int64_t value) {
    if (idx >= dims_.size()) return GRAPH_FAILED;
    dims_[idx] = value;
    return GRAPH_SUCCESS;
  }
  std::vector<int64_t> GetDims() const { return dims_; }
  // product of the dims; 0 for an empty (unknown) shape, -1 if a dim is unknown (< 0) or it overflows
  int64_t GetShapeSize() const {
    if (dims_.empty()) return 0;
    int64_t n = 1;
    for (int64_t d : dims_) {
      if (d < 0) return -1;
      if (__builtin_mul_overflow(n, d, &n)) return -1;
    }
    return n;
  }
  bool IsUnknownShape() const {
    for (int64_t d : dims_)
      if (d < 0) return true;
    return false;
  }
  bool IsScalar() const { return dims_.empty(); }

 private:
  std::vector<int64_t> dims_;
};
}  // namespace ge

#endif
