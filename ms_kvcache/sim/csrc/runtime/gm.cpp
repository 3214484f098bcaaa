// AscendC CPU emulation runtime: global memory. Every GM access is checked against the tensors of
// the launch (GM_OUT_OF_BOUNDS), GM writes are recorded per byte so that two cores writing the same
// byte in one launch are caught (GM_WRITE_CONFLICT), a core reading bytes another core wrote in the
// same launch is caught (GM_RACE: no cross-core ordering exists without SyncAll), and one core's MTE3
// writes are ordered against its own later MTE2 reads / MTE3 writes of the same bytes (PIPE_HAZARD).
#include <cinttypes>
#include <cstring>

#include "runtime_internal.h"

namespace ascendc_sim {

std::atomic<uint32_t>* GmShadow::Page(uintptr_t addr, bool create) {
  const uint64_t key = static_cast<uint64_t>(addr) >> kPageBits;
  std::lock_guard<std::mutex> lk(mu_);
  auto it = pages_.find(key);
  if (it != pages_.end()) return it->second.get();
  if (!create) return nullptr;
  std::unique_ptr<std::atomic<uint32_t>[]> p(new std::atomic<uint32_t>[kPage]);
  for (uint64_t i = 0; i < kPage; ++i) p[i].store(0, std::memory_order_relaxed);
  auto* raw = p.get();
  pages_.emplace(key, std::move(p));
  return raw;
}

void GmShadow::Clear() {
  std::lock_guard<std::mutex> lk(mu_);
  pages_.clear();
}

static int32_t FindRegion(const LaunchCtx& L, const void* p, uint64_t len) {
  const uint8_t* a = static_cast<const uint8_t*>(p);
  for (size_t i = 0; i < L.regions.size(); ++i) {
    const Region& r = L.regions[i];
    if (r.base == nullptr) continue;
    if (a >= r.base && (a < r.base + r.size || (r.size == 0 && a == r.base && len == 0))) return static_cast<int32_t>(i);
  }
  return -1;
}

std::string DescribeGm(const LaunchCtx& L, const void* p) {
  const uint8_t* a = static_cast<const uint8_t*>(p);
  const Region* best = nullptr;
  int64_t best_d = 0;
  for (const Region& r : L.regions) {
    if (r.base == nullptr) continue;
    int64_t d;
    if (a < r.base) d = static_cast<int64_t>(r.base - a);
    else if (a >= r.base + r.size) d = static_cast<int64_t>(a - (r.base + r.size)) + 1;
    else d = 0;
    if (best == nullptr || d < best_d) {
      best = &r;
      best_d = d;
    }
  }
  if (best == nullptr) return "no tensor at all";
  const int64_t off = static_cast<int64_t>(a - best->base);
  return Format("byte offset %" PRId64 " relative to %s (%" PRIu64 " bytes)", off, best->name.c_str(), best->size);
}

const Region& GmCheck(Core& c, int32_t region, const void* p, uint64_t len, bool write, const char* api) {
  const LaunchCtx& L = *c.L;
  if (p == nullptr)
    rt::Fail("GM_OUT_OF_BOUNDS", "%s %s %" PRIu64 " B through a null GM address (absent optional input?)", api,
             write ? "writes" : "reads", len);
  if (region < 0 || static_cast<size_t>(region) >= L.regions.size()) region = FindRegion(L, p, len);
  if (region < 0)
    rt::Fail("GM_OUT_OF_BOUNDS", "%s %s %" PRIu64 " B at a GM address outside every tensor of the launch (%s)", api,
             write ? "writes" : "reads", len, DescribeGm(L, p).c_str());
  const Region& r = L.regions[static_cast<size_t>(region)];
  const uint8_t* a = static_cast<const uint8_t*>(p);
  if (a < r.base || a + len > r.base + r.size || a + len < a) {
    const int64_t off = static_cast<int64_t>(a - r.base);
    rt::Fail("GM_OUT_OF_BOUNDS",
             "%s %s %" PRIu64 " B at byte offset %" PRId64 " of %s, which has %" PRIu64 " bytes (%s by %" PRId64 " B)",
             api, write ? "writes" : "reads", len, off, r.name.c_str(), r.size,
             off < 0 ? "before its start" : "past its end",
             off < 0 ? -off : static_cast<int64_t>(off + static_cast<int64_t>(len) - static_cast<int64_t>(r.size)));
  }
  if (write && !r.writable)
    rt::Fail("GM_READONLY", "%s writes %" PRIu64 " B into %s, which is read-only%s", api, len, r.name.c_str(),
             r.kind == RegionKind::Input || r.kind == RegionKind::Output
                 ? " (the caller passed a read-only array, e.g. a numpy array with flags.writeable False; the "
                   "kernel writes this argument, so pass a writable array)"
                 : "");
  return r;
}

void GmNoteWrite(Core& c, const Region& r, uint8_t* p, uint64_t len, int pipe, const char* api) {
  c.st.gm_write += len;
  const uint32_t me = static_cast<uint32_t>(c.idx + 1);
  uint32_t clk = 0;
  if (pipe == kMTE3) clk = c.clock[kMTE3] > 0xffffffu ? 0xffffffu : c.clock[kMTE3];
  const uint32_t cell = (me << 24) | clk;
  const uint32_t barrier = c.known[kMTE3].c[kMTE3];
  uintptr_t a = reinterpret_cast<uintptr_t>(p);
  const uintptr_t end = a + len;
  while (a < end) {
    std::atomic<uint32_t>* page = c.L->shadow.Page(a, true);
    const uintptr_t page_end = ((a >> GmShadow::kPageBits) + 1) << GmShadow::kPageBits;
    const uintptr_t stop = page_end < end ? page_end : end;
    for (; a < stop; ++a) {
      std::atomic<uint32_t>& s = page[a & (GmShadow::kPage - 1)];
      uint32_t old = s.load(std::memory_order_relaxed);
      for (;;) {
        if (old != 0 && (old >> 24) != me) {
          rt::Fail("GM_WRITE_CONFLICT",
                   "%s writes byte %" PRIu64 " of %s, which core %u already wrote in this launch: two cores writing "
                   "the same GM bytes race on hardware (result depends on timing; write shared bytes from one core only)",
                   api, static_cast<uint64_t>(reinterpret_cast<uint8_t*>(a) - r.base), r.name.c_str(), (old >> 24) - 1);
        }
        if (old != 0 && pipe == kMTE3 && c.L->hazards) {
          const uint32_t prev = old & 0xffffffu;
          if (prev != 0 && prev != 0xffffffu && prev > barrier)
            rt::Fail("PIPE_HAZARD",
                     "%s writes byte %" PRIu64 " of %s again although an earlier MTE3 copy of this core wrote it and no "
                     "PipeBarrier<PIPE_MTE3> orders the two copies (overlapping MTE3 destinations)",
                     api, static_cast<uint64_t>(reinterpret_cast<uint8_t*>(a) - r.base), r.name.c_str());
        }
        if (!c.L->concurrent) {
          s.store(cell, std::memory_order_relaxed);
          break;
        }
        if (s.compare_exchange_weak(old, cell, std::memory_order_relaxed)) break;
      }
    }
  }
}

void GmNoteRead(Core& c, const Region& r, const uint8_t* p, uint64_t len, int pipe, const char* api) {
  c.st.gm_read += len;
  if (r.kind == RegionKind::Tiling || r.kind == RegionKind::ListDesc) return;
  const uint32_t me = static_cast<uint32_t>(c.idx + 1);
  uintptr_t a = reinterpret_cast<uintptr_t>(p);
  const uintptr_t end = a + len;
  uint32_t learn_mte3 = 0;
  while (a < end) {
    const uintptr_t page_end = ((a >> GmShadow::kPageBits) + 1) << GmShadow::kPageBits;
    const uintptr_t stop = page_end < end ? page_end : end;
    std::atomic<uint32_t>* page = c.L->shadow.Page(a, false);
    if (page == nullptr) {
      a = stop;
      continue;
    }
    for (; a < stop; ++a) {
      const uint32_t old = page[a & (GmShadow::kPage - 1)].load(std::memory_order_relaxed);
      if (old == 0) continue;
      if ((old >> 24) != me)
        rt::Fail("GM_RACE",
                 "%s reads byte %" PRIu64 " of %s, which core %u wrote in this same launch: without a cross-core "
                 "barrier the value depends on which core runs first",
                 api, static_cast<uint64_t>(reinterpret_cast<const uint8_t*>(a) - r.base), r.name.c_str(),
                 (old >> 24) - 1);
      const uint32_t clk = old & 0xffffffu;
      if (clk == 0 || clk == 0xffffffu || !c.L->hazards) continue;
      if (pipe == kS) {
        if (clk > learn_mte3) learn_mte3 = clk;  // bisheng syncs MTE3 -> S before a scalar GM read
      } else if (pipe == kMTE2 && clk > c.known[kMTE2].c[kMTE3]) {
        rt::Fail("PIPE_HAZARD",
                 "%s (MTE2) reads byte %" PRIu64 " of %s that an earlier MTE3 copy of this core wrote, with no MTE3 -> "
                 "MTE2 synchronisation in between (SetFlag/WaitFlag<MTE3_MTE2> or PipeBarrier<PIPE_ALL>)",
                 api, static_cast<uint64_t>(reinterpret_cast<const uint8_t*>(a) - r.base), r.name.c_str());
      }
    }
  }
  if (learn_mte3 > 0) {
    VClock v;
    v.c[kMTE3] = c.clock[kMTE3];
    c.known[kS].Merge(v);
  }
}

namespace rt {

int32_t GmResolve(const void* p) {
  Core* c = CurOrNull();
  if (c == nullptr || c->L == nullptr || p == nullptr) return -1;
  return FindRegion(*c->L, p, 0);
}

void GmScalarRead(int32_t region, const void* p, uint32_t bytes, void* out, const char* api) {
  Core& c = Cur();
  const Region& r = GmCheck(c, region, p, bytes, false, api);
  GmNoteRead(c, r, static_cast<const uint8_t*>(p), bytes, kS, api);
  ++c.st.scalar_read;
  std::memcpy(out, p, bytes);
}

void GmScalarWrite(int32_t region, void* p, uint32_t bytes, const void* in, const char* api) {
  Core& c = Cur();
  const Region& r = GmCheck(c, region, p, bytes, true, api);
  GmNoteWrite(c, r, static_cast<uint8_t*>(p), bytes, kS, api);
  ++c.st.scalar_write;
  std::memcpy(p, in, bytes);
}

}  // namespace rt
}  // namespace ascendc_sim
