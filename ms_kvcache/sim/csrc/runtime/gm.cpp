// AscendC CPU emulation runtime: global memory. Every GM access is checked against the tensors of
// the launch (GM_OUT_OF_BOUNDS), GM writes are recorded per byte so that two cores writing the same
// byte in one launch are caught (GM_WRITE_CONFLICT), a core reading bytes another core wrote in the
// same launch is caught (GM_RACE: no cross-core ordering exists without SyncAll), and one core's MTE3
// writes are ordered against its own later MTE2 reads / MTE3 writes of the same bytes (PIPE_HAZARD).
#include <algorithm>
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
  if (len == 0) return;
  LaunchCtx& L = *c.L;
  if (L.abort.load(std::memory_order_relaxed)) throw LaunchAborted();
  c.spin_count = 0;  // a core that writes GM is not (only) polling
  const uintptr_t a0 = reinterpret_cast<uintptr_t>(p);
  c.log.Add(c.log.writes, a0, a0 + len);
  if (pipe == kS) {  // GlobalTensor::SetValue goes through this core's data cache (64-byte lines)
    for (uintptr_t line = a0 >> kLineBits; line <= (a0 + len - 1) >> kLineBits; ++line) {
      c.dirty.insert(line);
      if (c.log.slines.empty() || c.log.slines.back() != line) c.log.slines.push_back(line);
    }
  }
  if (r.kind == RegionKind::Workspace && L.ws_written != nullptr) WsMarkWritten(L, a0, len);
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
  if (r.kind == RegionKind::Tiling || r.kind == RegionKind::ListDesc || len == 0) return;
  LaunchCtx& L = *c.L;
  if (L.abort.load(std::memory_order_relaxed)) throw LaunchAborted();
  const uintptr_t a0 = reinterpret_cast<uintptr_t>(p);
  if (r.writable) {
    c.log.Add(c.log.reads, a0, a0 + len);
    // watchdog: the same GM bytes read again and again with no GM write of this core in between is a poll
    if (a0 == c.spin_addr && len == c.spin_len) {
      if (++c.spin_count >= L.spin_limit) SpinFail(c, r, p, len, api);
    } else {
      c.spin_addr = a0;
      c.spin_len = len;
      c.spin_count = 1;
    }
    if (r.kind == RegionKind::Workspace && L.ws_written != nullptr && !c.ws_uninit.pending) WsCheckRead(c, a0, len, api);
  }
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
    if (c.L->cost) {
      VTimes t;
      t.t[kMTE3] = c.cc.tfree[kMTE3];
      CostLearn(c, kS, t);
    }
  }
}

// ------------------------------------------------------------------------------- watchdog, workspace
[[noreturn]] void SpinFail(Core& c, const Region& r, const uint8_t* p, uint64_t len, const char* api) {
  rt::Fail("SPIN_WAIT",
           "%s read the same %" PRIu64 " GM byte(s) at byte offset %" PRIu64 " of %s %" PRIu64
           " times in a row with no GM write of this core in between (limit MS_KVCACHE_SIM_SPIN_LIMIT=%" PRIu64
           "): the core is polling a flag that no core sets before it (in this core order the setter has not run "
           "yet, or never will). A spin on a GM flag can hang real hardware too: use SyncAll() between the phases, "
           "or a flag the writer publishes with DataCacheCleanAndInvalid and the reader re-reads after "
           "DataCacheCleanAndInvalid, in different SyncAll phases",
           api, len, static_cast<uint64_t>(p - r.base), r.name.c_str(), c.spin_count, c.L->spin_limit);
}

void WsMarkWritten(LaunchCtx& L, uintptr_t a, uint64_t len) {
  const uintptr_t lo = reinterpret_cast<uintptr_t>(L.ws_user);
  const uintptr_t hi = lo + L.ws_user_size;
  const uintptr_t b = std::min<uintptr_t>(a + len, hi);
  a = std::max<uintptr_t>(a, lo);
  if (a >= b) return;
  if (!L.concurrent) {
    std::memset(L.ws_written + (a - lo), 1, b - a);
    return;
  }
  for (uintptr_t x = a; x < b; ++x) __atomic_store_n(L.ws_written + (x - lo), static_cast<uint8_t>(1), __ATOMIC_RELAXED);
}

void WsCheckRead(Core& c, uintptr_t a, uint64_t len, const char* api) {
  LaunchCtx& L = *c.L;
  const uintptr_t lo = reinterpret_cast<uintptr_t>(L.ws_user);
  const uintptr_t hi = lo + L.ws_user_size;
  const uintptr_t b = std::min<uintptr_t>(a + len, hi);
  a = std::max<uintptr_t>(a, lo);
  if (a >= b) return;
  const void* z = std::memchr(L.ws_written + (a - lo), 0, b - a);
  if (z == nullptr) return;
  // Deferred to the end of the SyncAll phase: if another core writes these bytes in the same phase, the
  // read is a GM_RACE (reported first); otherwise nobody wrote them before this read.
  c.ws_uninit.pending = true;
  c.ws_uninit.addr = a + static_cast<uintptr_t>(static_cast<const uint8_t*>(z) - (L.ws_written + (a - lo)));
  c.ws_uninit.api = api;
}

// ------------------------------------------------------------------------------- end of a SyncAll phase
namespace {
std::string PhaseName(uint32_t phase, bool last) {
  std::string from = phase == 0 ? std::string("the kernel start") : Format("SyncAll #%u", phase);
  std::string to = last ? std::string("the kernel end") : Format("SyncAll #%u", phase + 1);
  return "between " + from + " and " + to;
}
void SortMerge(std::vector<Ival>& v) {
  if (v.size() < 2) return;
  std::sort(v.begin(), v.end(), [](const Ival& x, const Ival& y) { return x.a < y.a; });
  size_t k = 0;
  for (size_t i = 1; i < v.size(); ++i) {
    if (v[i].a <= v[k].b) {
      if (v[i].b > v[k].b) v[k].b = v[i].b;
    } else {
      v[++k] = v[i];
    }
  }
  v.resize(k + 1);
}
struct OwnedIval {
  uintptr_t a, b;
  int core;
};
}  // namespace

EmulationError CoreError(const LaunchCtx& L, int core, const std::string& rule, const std::string& detail) {
  std::string full =
      Format("%s: op %s, core %d of %u: %s", rule.c_str(), L.op.c_str(), core, L.block_dim, detail.c_str());
  return EmulationError(rule, L.op, core, detail, full);
}

void PhaseCheck(LaunchCtx& L, const std::vector<Core*>& cores, bool last) {
  const uint32_t phase = L.phase;
  // 1. GM_RACE: a byte one core writes and another core reads in the same phase (any core order).
  std::vector<OwnedIval> w;
  for (Core* c : cores) {
    SortMerge(c->log.writes);
    SortMerge(c->log.reads);
    for (const Ival& x : c->log.writes) w.push_back({x.a, x.b, c->idx});
  }
  std::sort(w.begin(), w.end(), [](const OwnedIval& x, const OwnedIval& y) { return x.a < y.a; });
  // writes of different cores never overlap here (GM_WRITE_CONFLICT is raised at the second write), so
  // the ends are sorted too
  struct Hit {
    uintptr_t at = 0;
    int reader = -1, writer = -1;
    uintptr_t a = 0, b = 0;
  } hit;
  for (Core* c : cores) {
    for (const Ival& r : c->log.reads) {
      auto it = std::upper_bound(w.begin(), w.end(), r.a, [](uintptr_t v, const OwnedIval& x) { return v < x.b; });
      for (; it != w.end() && it->a < r.b; ++it) {
        if (it->core == c->idx) continue;
        const uintptr_t lo = std::max(it->a, r.a), hi = std::min(it->b, r.b);
        if (hit.reader < 0 || lo < hit.at) hit = {lo, c->idx, it->core, lo, hi};
        break;
      }
    }
  }
  if (hit.reader >= 0)
    throw CoreError(L, hit.reader, "GM_RACE",
                    Format("core %d reads %" PRIu64 " GM byte(s) from %s that core %d writes %s (the same launch "
                           "phase): AI cores run concurrently with no ordering, so the read sees old or new bytes "
                           "depending on timing; put SyncAll() between the write and the read",
                           hit.reader, static_cast<uint64_t>(hit.b - hit.a), DescribeGm(L, reinterpret_cast<void*>(hit.a)).c_str(),
                           hit.writer, PhaseName(phase, last).c_str()));
  // 2. DCACHE_CONFLICT: a 64-byte line one core wrote with SetValue (data cache) and another core accesses in
  // the same phase, or a line left dirty (not cleaned with DataCacheCleanAndInvalid) before an earlier SyncAll.
  std::vector<std::pair<uint64_t, int>> lines(L.carried_dirty.begin(), L.carried_dirty.end());
  for (Core* c : cores) {
    std::sort(c->log.slines.begin(), c->log.slines.end());
    c->log.slines.erase(std::unique(c->log.slines.begin(), c->log.slines.end()), c->log.slines.end());
    for (uint64_t ln : c->log.slines) lines.push_back({ln, c->idx});
  }
  if (!lines.empty()) {
    std::vector<std::pair<uint64_t, int>> tmp = lines;
    std::vector<size_t> idx(lines.size());
    for (size_t i = 0; i < idx.size(); ++i) idx[i] = i;
    std::sort(idx.begin(), idx.end(), [&](size_t x, size_t y) { return tmp[x] < tmp[y]; });
    std::vector<std::pair<uint64_t, int>> sorted;
    std::vector<uint8_t> was_carried;
    for (size_t i : idx) {
      sorted.push_back(tmp[i]);
      was_carried.push_back(i < L.carried_dirty.size() ? 1 : 0);
    }
    for (Core* c : cores) {
      for (int kind = 0; kind < 2; ++kind) {
        for (const Ival& x : kind == 0 ? c->log.reads : c->log.writes) {
          const uint64_t l0 = x.a >> kLineBits, l1 = (x.b - 1) >> kLineBits;
          auto it = std::lower_bound(sorted.begin(), sorted.end(), std::make_pair(l0, -1));
          for (; it != sorted.end() && it->first <= l1; ++it) {
            if (it->second == c->idx) continue;
            const bool old = was_carried[static_cast<size_t>(it - sorted.begin())] != 0;
            const uintptr_t line_addr = static_cast<uintptr_t>(it->first << kLineBits);
            throw CoreError(
                L, c->idx, "DCACHE_CONFLICT",
                old ? Format("core %d %s the 64-byte cache line at %s, which core %d wrote with "
                             "GlobalTensor::SetValue before an earlier SyncAll and never cleaned: SetValue writes "
                             "that core's data cache, not GM, until DataCacheCleanAndInvalid writes the line out, so "
                             "this core sees stale GM (or its write is overwritten when the line is evicted); call "
                             "DataCacheCleanAndInvalid on the line after the SetValue and before the SyncAll",
                             c->idx, kind == 0 ? "reads" : "writes", DescribeGm(L, reinterpret_cast<void*>(line_addr)).c_str(),
                             it->second)
                    : Format("core %d %s the 64-byte cache line at %s, which core %d writes with "
                             "GlobalTensor::SetValue %s: SetValue goes through each core's data cache and lines are "
                             "written back whole, so the cores overwrite each other's bytes at random; keep the "
                             "bytes different cores write at least one 64-byte cache line apart (64-byte aligned) or "
                             "order the accesses with DataCacheCleanAndInvalid + SyncAll",
                             c->idx, kind == 0 ? "reads" : "writes", DescribeGm(L, reinterpret_cast<void*>(line_addr)).c_str(),
                             it->second, PhaseName(phase, last).c_str()));
          }
        }
      }
    }
  }
  // 3. workspace bytes read before any core wrote them (and no other core writes them in this phase)
  for (Core* c : cores) {
    if (!c->ws_uninit.pending) continue;
    throw CoreError(L, c->idx, "WORKSPACE_UNINIT_READ",
                    Format("%s reads workspace byte %" PRIu64 " of the user workspace (%s) before any core wrote it "
                           "in this launch: workspace GM is not initialised (it holds whatever the previous kernel "
                           "left), so the kernel computes with garbage; write it first (and SyncAll if another core "
                           "writes it)",
                           c->ws_uninit.api, static_cast<uint64_t>(c->ws_uninit.addr - reinterpret_cast<uintptr_t>(L.ws_user)),
                           DescribeGm(L, reinterpret_cast<void*>(c->ws_uninit.addr)).c_str()));
  }
  // next phase: lines still dirty, logs and the per-byte write shadow start empty
  L.carried_dirty.clear();
  for (Core* c : cores) {
    for (uint64_t ln : c->dirty) L.carried_dirty[ln] = c->idx;
    c->log.reads.clear();
    c->log.writes.clear();
    c->log.slines.clear();
    c->spin_count = 0;
  }
  if (!last) L.shadow.Clear();
  ++L.phase;
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
  CostScalarGm(c, r, p, bytes);
  std::memcpy(out, p, bytes);
}

// DataCacheCleanAndInvalid<T, entireType[, dcciDst]>(GlobalTensor): writes this core's dirty data-cache
// lines (SetValue) out to GM. entire: ENTIRE_DATA_CACHE; dst: DcciDst (0 ALL, 1 UB, 2 OUT, 3 ATOMIC, -1 none).
void DcacheCleanInvalid(const void* p, int entire, int dst, const char* api) {
  Core& c = Cur();
  if (dst == 3)
    Fail("UNSUPPORTED_API",
         "%s<..., DcciDst::CACHELINE_ATOMIC>: not supported on Atlas A2/A3 / Atlas inference series (the "
         "DataCacheCleanAndInvalid page: \"暂未支持\")",
         api);
  if (dst == 1) return;  // DCache <-> UB coherence: no GM line is written out
  if (entire) {
    c.dirty.clear();
    return;
  }
  if (p == nullptr) Fail("GM_OUT_OF_BOUNDS", "%s on a GlobalTensor with a null GM address", api);
  c.dirty.erase(reinterpret_cast<uintptr_t>(p) >> kLineBits);
}

void GmScalarWrite(int32_t region, void* p, uint32_t bytes, const void* in, const char* api) {
  Core& c = Cur();
  const Region& r = GmCheck(c, region, p, bytes, true, api);
  GmNoteWrite(c, r, static_cast<uint8_t*>(p), bytes, kS, api);
  ++c.st.scalar_write;
  CostScalarGm(c, r, p, bytes);
  std::memcpy(p, in, bytes);
}

}  // namespace rt
}  // namespace ascendc_sim
