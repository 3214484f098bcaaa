// Implementation of mskv::ParallelFor (included by aot_abi.h).
#pragma once
#include <omp.h>

namespace mskv {

template <typename F>
void ParallelFor(int64_t n, int64_t total_bytes, F&& body) {
  if (n <= 0) return;
  const int threads = NumThreads();
  if (threads <= 1 || total_bytes < ParallelThresholdBytes() || n < 2) {
    body(int64_t{0}, n);
    return;
  }
  const int parts = static_cast<int>(n < threads ? n : threads);
#pragma omp parallel num_threads(parts)
  {
    const int tid = omp_get_thread_num();
    const int64_t share = n / parts, rem = n % parts;
    const int64_t begin = tid * share + (tid < rem ? tid : rem);
    const int64_t end = begin + share + (tid < rem ? 1 : 0);
    if (begin < end) body(begin, end);
  }
}

}  // namespace mskv
