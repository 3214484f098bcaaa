// Implementation of mskv::ParallelFor (included by aot_abi.h).
//
// Work sharing with the calling thread first: [0, n) is cut into chunks; the caller claims chunks
// itself while helper threads (NumThreads() - 1, created on first use, sleeping between jobs) join
// when the OS gives them a core. The caller never waits for a helper to *arrive*, only for chunks a
// helper already claimed. An OpenMP parallel region instead ends in a barrier that waits for every
// thread: on a 2-core machine shared with MindSpore's spinning pipeline threads (or other processes),
// a descheduled OpenMP thread stalled each region for a scheduler quantum (~4-10 ms measured, 100x the
// copy itself). Here the worst case is the single-thread time.
#pragma once
#include <algorithm>
#include <type_traits>

namespace mskv {

// Run fn(ctx, begin, end) for the `chunks` chunks of [0, n) (chunk c = [c*n/chunks, (c+1)*n/chunks)),
// on the caller plus whichever pool threads are free. Returns when every chunk is done.
void RunChunks(int64_t n, int64_t chunks, void (*fn)(void*, int64_t, int64_t), void* ctx);

template <typename F>
void ParallelFor(int64_t n, int64_t total_bytes, F&& body) {
  if (n <= 0) return;
  const int threads = NumThreads();
  if (threads <= 1 || total_bytes < ParallelThresholdBytes() || n < 2) {
    body(int64_t{0}, n);
    return;
  }
  using Body = std::remove_reference_t<F>;
  const int64_t chunks = std::min<int64_t>(n, int64_t{4} * threads);
  RunChunks(n, chunks, [](void* ctx, int64_t b, int64_t e) { (*static_cast<Body*>(ctx))(b, e); },
            const_cast<void*>(static_cast<const void*>(&body)));
}

}  // namespace mskv
