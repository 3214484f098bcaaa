// Host buffers for KV offload (ms_kvcache.alloc_host_buffer), the CPU copy baseline of the transfer
// benchmark and the piece-scatter reference of the NZ benchmark. Not a MindSpore kernel: pybind11 functions registered into ms_kvcache._cpu by
// mskv::BindHostMemory (called from ms_kvcache/csrc/cpu_module.cpp).
//
// host_alloc(nbytes, numa_node, pinned) maps anonymous, page-aligned memory, binds it to `numa_node`
// with the raw mbind(2) syscall (MPOL_BIND; no libnuma build dependency: libnuma's
// numa_tonode_memory is a wrapper of the same call), then either page-locks it with mlock(2) (which
// also faults every page in, on that node) or, unpinned, faults the pages in by writing them. It returns
// a 1-D uint8 numpy array whose base is a capsule that munmaps the memory when the last reference
// (numpy view, MindSpore Tensor made by Tensor.from_numpy) goes away. Errors are returned, not
// raised, so Python can word them: (array or None, failing call name, errno).
//
// host_bind(address, nbytes, numa_node) binds memory allocated elsewhere (the CANN runtime's page-locked
// memory, aclrtMallocHost) to `numa_node`, moving the pages already there (MPOL_MF_MOVE | MPOL_MF_STRICT);
// returns 0 or the errno.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>

#include "multi_layer_common.h"

namespace py = pybind11;

namespace {

std::atomic<int64_t> g_live_bytes{0};
std::atomic<int64_t> g_live_buffers{0};

constexpr int kMpolBind = 2;
constexpr unsigned kMpolFNode = 1, kMpolFAddr = 2;
constexpr unsigned kMpolMfStrict = 1, kMpolMfMove = 2;

// mbind(2) of [addr, addr + len) to `node` with `flags`; 0 or the errno (ENOSYS on node 0: no NUMA, fine)
int BindNode(void* addr, size_t len, int node, unsigned flags) {
  const size_t words = static_cast<size_t>(node) / (8 * sizeof(unsigned long)) + 1;
  std::vector<unsigned long> mask(words, 0UL);
  mask[static_cast<size_t>(node) / (8 * sizeof(unsigned long))] |=
      1UL << (static_cast<size_t>(node) % (8 * sizeof(unsigned long)));
  const unsigned long maxnode = words * 8 * sizeof(unsigned long) + 1;
  if (syscall(SYS_mbind, addr, len, kMpolBind, mask.data(), maxnode, flags) == 0) return 0;
  const int err = errno;
  return (err == ENOSYS && node == 0) ? 0 : err;
}

struct Mapping {
  void* addr;
  size_t len;        // mapped length (page multiple, >= 1 page)
  int64_t nbytes;    // user-visible bytes
};

void ReleaseMapping(void* p) {
  auto* m = static_cast<Mapping*>(p);
  munmap(m->addr, m->len);  // also drops an mlock
  g_live_bytes -= m->nbytes;
  g_live_buffers -= 1;
  delete m;
}

py::tuple HostAlloc(int64_t nbytes, int numa_node, bool pinned) {
  if (nbytes < 0) throw py::value_error("nbytes must be >= 0");
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const size_t len = std::max<size_t>(page, (static_cast<size_t>(nbytes) + page - 1) / page * page);
  void* addr = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (addr == MAP_FAILED) return py::make_tuple(py::none(), "mmap", errno);
  if (len >= (size_t{2} << 20)) madvise(addr, len, MADV_HUGEPAGE);  // fewer TLB misses; advisory
  if (numa_node >= 0) {
    const int err = BindNode(addr, len, numa_node, 0U);  // ENOSYS on node 0 (no NUMA) counts as bound
    if (err != 0) {
      munmap(addr, len);
      return py::make_tuple(py::none(), "mbind", err);
    }
  }
  if (pinned) {
    if (mlock(addr, len) != 0) {
      const int err = errno;
      munmap(addr, len);
      return py::make_tuple(py::none(), "mlock", err);
    }
  } else {
    auto* bytes = static_cast<volatile uint8_t*>(addr);
    for (size_t off = 0; off < len; off += page) bytes[off] = 0;  // fault in on the bound node
  }
  auto* m = new Mapping{addr, len, nbytes};
  g_live_bytes += nbytes;
  g_live_buffers += 1;
  py::capsule owner(m, "ms_kvcache.host_buffer", ReleaseMapping);
  py::array_t<uint8_t> arr({static_cast<py::ssize_t>(nbytes)}, {static_cast<py::ssize_t>(1)},
                           static_cast<uint8_t*>(addr), owner);
  return py::make_tuple(arr, "", 0);
}

// Bind (and move) the pages of [address, address + nbytes) to `numa_node`: 0 or the errno.
int HostBind(uintptr_t address, int64_t nbytes, int numa_node) {
  if (nbytes <= 0 || numa_node < 0) throw py::value_error("host_bind: nbytes must be > 0 and numa_node >= 0");
  const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t start = address / page * page;
  const uintptr_t end = (address + static_cast<uintptr_t>(nbytes) + page - 1) / page * page;
  return BindNode(reinterpret_cast<void*>(start), end - start, numa_node, kMpolMfMove | kMpolMfStrict);
}

// NUMA node of the page holding `address` (faults it in if needed), or -1 if unknown.
int NodeOfAddress(uintptr_t address) {
  int node = -1;
  if (syscall(SYS_get_mempolicy, &node, nullptr, 0UL, reinterpret_cast<void*>(address), kMpolFNode | kMpolFAddr) != 0)
    return -1;
  return node;
}

// Bytes and number of host_alloc buffers not yet released (tests check that dropping the Tensor frees).
py::dict LiveStats() {
  py::dict d;
  d["bytes"] = g_live_bytes.load();
  d["buffers"] = g_live_buffers.load();
  return d;
}

// dst[:] = src[:] for two equally sized contiguous buffers, split over the kernel threads
// (the memcpy baseline of scripts/bench_transfer.py).
void CopyBuffers(py::buffer dst, py::buffer src, int64_t threads_cap) {
  py::buffer_info d = dst.request(true), s = src.request(false);
  const int64_t nd = d.size * d.itemsize, ns = s.size * s.itemsize;
  if (nd != ns) throw py::value_error("copy_buffers: sizes differ");
  auto* dp = static_cast<uint8_t*>(d.ptr);
  const auto* sp = static_cast<const uint8_t*>(s.ptr);
  py::gil_scoped_release nogil;
  mskv::ml::ParallelCopy(dp, sp, nd, threads_cap);
}

// The hardware reference of a scattered NZ cache write (ms_kvcache/bench/nz_layout.py): for every row t of
// `src` ([T, row_bytes] contiguous) and piece f < row_bytes / piece, dst[offsets[t] + f * stride, + piece) =
// src[t, f * piece, + piece) - the same pieces to the same addresses as the kernel, with the addresses worked
// out beforehand (numpy) and nothing else done: no slot arithmetic, no run detection, no checks in the loop.
// Over the kernel threads (split by rows); `nontemporal`: 16-byte non-temporal stores (dst, piece and stride
// multiples of 16), else plain copies. Every piece is bounds-checked before anything is written.
void ScatterPieces(py::buffer dst, py::buffer src, const py::array_t<int64_t, py::array::c_style>& offsets,
                   int64_t piece, int64_t stride, bool nontemporal) {
  py::buffer_info d = dst.request(true), s = src.request(false);
  const int64_t nd = d.size * d.itemsize, ns = s.size * s.itemsize, rows = offsets.size();
  if (piece <= 0 || stride < piece) throw py::value_error("scatter_pieces: expected 0 < piece <= stride");
  if (rows == 0) return;
  if (ns % rows != 0 || (ns / rows) % piece != 0)
    throw py::value_error("scatter_pieces: src must hold len(offsets) rows of a whole number of pieces");
  const int64_t row_bytes = ns / rows, pieces = row_bytes / piece;
  const int64_t* off = offsets.data();
  for (int64_t t = 0; t < rows; ++t) {
    if (off[t] < 0 || off[t] + (pieces - 1) * stride + piece > nd)
      throw py::value_error("scatter_pieces: offsets[" + std::to_string(t) + "] puts a piece outside dst");
  }
  auto* dp = static_cast<uint8_t*>(d.ptr);
  const auto* sp = static_cast<const uint8_t*>(s.ptr);
  const bool nt = nontemporal && reinterpret_cast<uintptr_t>(dp) % 16 == 0 && piece % 16 == 0 && stride % 16 == 0;
  py::gil_scoped_release nogil;
  mskv::ParallelFor(rows, ns, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      uint8_t* o = dp + off[t];
      const uint8_t* r = sp + t * row_bytes;
      for (int64_t f = 0; f < pieces; ++f, o += stride, r += piece) {
#if defined(__SSE2__)
        if (nt) {
          for (int64_t k = 0; k < piece; k += 16)
            _mm_stream_si128(reinterpret_cast<__m128i*>(o + k), _mm_loadu_si128(reinterpret_cast<const __m128i*>(r + k)));
          continue;
        }
#endif
        std::memcpy(o, r, static_cast<size_t>(piece));
      }
    }
    mskv::StreamFence();
  });
}

}  // namespace

namespace mskv {
namespace ml = mskv::ml;

void BindHostMemory(py::module_& m) {
  m.def("host_alloc", &HostAlloc, py::arg("nbytes"), py::arg("numa_node"), py::arg("pinned"),
        "mmap + mbind + mlock; returns (uint8 array | None, failing call, errno).");
  m.def("host_bind", &HostBind, py::arg("address"), py::arg("nbytes"), py::arg("numa_node"),
        "mbind(MPOL_BIND, MPOL_MF_MOVE | MPOL_MF_STRICT) of memory allocated elsewhere; 0 or the errno.");
  m.def("host_node_of", &NodeOfAddress, py::arg("address"), "NUMA node of the page at address (-1: unknown).");
  m.def("host_live", &LiveStats, "Bytes and count of live host_alloc buffers.");
  m.def("transfer_calls", [] { return ml::CompletedCalls().load(std::memory_order_acquire); },
        "Completed calls of the multi-layer transfer kernels (benchmark: wait without spinning).");
  m.def("copy_buffers", &CopyBuffers, py::arg("dst"), py::arg("src"), py::arg("threads_cap") = 0,
        "Parallel memcpy between two buffers of equal size (benchmark baseline).");
  m.def("scatter_pieces", &ScatterPieces, py::arg("dst"), py::arg("src"), py::arg("offsets"), py::arg("piece"),
        py::arg("stride"), py::arg("nontemporal"),
        "Row t's pieces to dst + offsets[t] + f * stride over the threads (benchmark reference of NZ scatters).");
}

}  // namespace mskv
