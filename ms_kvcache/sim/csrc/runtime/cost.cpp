// AscendC CPU emulation runtime: the opt-in DMA cost model (docs/emulation.md, "The cost model").
//
// A model, not a measurement: it predicts the time of a launch from what the kernel issues. Per core, the
// scalar unit issues every instruction (issue_cycles each) to its pipe (MTE2: GM -> UB, MTE3: UB -> GM, V:
// vector and UB -> UB); a pipe runs its instructions in order, each starting when the pipe is free, the
// scalar has issued it and every synchronisation the pipe waited for is satisfied. The synchronisations
// are those the hazard tracker follows (EnQue/DeQue, AllocTensor/FreeTensor, SetFlag/WaitFlag,
// PipeBarrier, the compiler's scalar syncs): next to each VClock snapshot the model keeps a VTimes, the time
// the counted instructions end, so a double-buffered queue overlaps MTE2 and MTE3 and a single buffer
// serialises them. A DataCopy(Pad) costs call_cycles + per contiguous GM run run_ns[link] + bytes at the
// core's share of its link: device HBM, or host memory through PCIe for the arguments a launch names in
// `host` (zero-copy); a link is shared equally by the cores of the launch. A core's time is when its scalar
// unit and pipes are done; the launch's is launch_us plus the slowest core.
#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstring>

#include "runner.h"
#include "runtime_internal.h"

namespace ascendc_sim {
namespace {

// The parameter table: one row per parameter, the value for Atlas A2 (Ascend910B1/B3) and A3
// (Ascend910_93xx), its unit and its source ("fitted": fitted to HeteroFusedKernels' published A3
// table by tests/test_sim_cost_model.py; "assumed": no published figure, a stated assumption).
struct Row {
  const char* name;
  double a2, a3;
  const char* unit;
  const char* source;
};
const Row kTable[] = {
    {"freq_ghz", 1.85, 1.85, "GHz",
     "AI core clock: cube_freq=1850 of CANN's platform_config Ascend910B1.ini (as quoted publicly with the ini's "
     "[AICoreMemoryRates]); A3 assumed equal"},
    {"hbm_core_gbps", 59.2, 59.2, "GB/s",
     "one core's GM <-> UB rate: ddr_rate = 32 B/cycle ([AICoreMemoryRates] of Ascend910B1.ini; asc-devkit "
     "tests/api/common/platform_stub.cpp GetLocalMemBw(HBM) = 32 for NpuArch 2201) x freq_ghz"},
    {"hbm_gbps", 1600, 1600, "GB/s",
     "HBM bandwidth of one 910B / one 910C die (public product figure, not in the CANN docs; unverified)"},
    {"call_cycles", 16, 16, "cycles",
     "assumed: pipe time of one DataCopy besides its bytes; a 16 KB copy then runs at 97% of hbm_core_gbps, in line "
     "with the AscendC guide's advice to move 16 KB or more per copy (asc-devkit docs, SIMD算子性能优化/内存访问/"
     "尽量一次搬运较大的数据块)"},
    {"issue_cycles", 16, 16, "cycles", "assumed: scalar time to issue one instruction (address arithmetic included)"},
    {"hbm_run_ns", 0, 0, "ns",
     "per extra contiguous run of a strided device copy: 0, the AscendC guide has one strided DataCopyParams copy "
     "of 16 x 2 KB perform like one 32 KB copy (asc-devkit docs, 高效的使用搬运API)"},
    {"host_core_gbps", 10.7, 10.7, "GB/s",
     "fitted (A3; A2 assumed equal): one core's rate reading / writing host memory over PCIe"},
    {"host_run_ns", 1000, 1000, "ns",
     "assumed: one PCIe round trip per contiguous host run (every host read of the calibration kernel is a single "
     "run, so the published table does not constrain it)"},
    {"pcie_gbps", 51, 51, "GB/s",
     "aggregate host link: PCIe 5.0 x16 practical rate; the A3 link is at least Gen5 class (the published 34.11 "
     "GB/s zero-copy read exceeds PCIe 4.0 x16's 31.5 GB/s); A2 assumed equal (unverified)"},
    {"launch_us", 130, 130, "us",
     "fitted (A3; A2 assumed equal): fixed time of one op as NPU events see it (launch, tiling copy)"},
    {"memcpy_gbps", 36.0, 36.0, "GB/s",
     "fitted (A3; A2 assumed equal): aclrtMemcpyAsync between pinned host memory and HBM (staged mode)"},
    {"memcpy_us", 0, 0, "us", "fixed time of one aclrtMemcpyAsync: 0, not separable from launch_us in the table"},
    {"scalar_miss_ns", 500, 500, "ns",
     "assumed: a scalar GM read (GetValue) of a 64-byte line the core has not read yet (one memory round trip); "
     "host memory: host_run_ns"},
    {"vec_bytes_per_cycle", 256, 256, "B/cycle",
     "vector unit: one 256-byte repeat (8 x 32-byte blocks) per cycle (AscendC repeat size; rate assumed)"},
    {"sync_all_us", 1.0, 1.0, "us", "assumed: one SyncAll of all cores"},
};

bool Family(const Caps& caps, bool* a3) {
  if (caps.family == "A2") *a3 = false;
  else if (caps.family == "A3") *a3 = true;
  else return false;
  return true;
}

// Applies `overrides` to `params` (the table's values): COST_MODEL_PARAM for an unknown name or a value that
// is not finite, negative, or 0 where a rate or a clock divides by it.
void ApplyOverrides(std::vector<std::pair<std::string, double>>& params,
                    const std::vector<std::pair<std::string, double>>& overrides, const std::string& op) {
  for (const auto& o : overrides) {
    auto it = std::find_if(params.begin(), params.end(), [&](const auto& kv) { return kv.first == o.first; });
    if (it == params.end()) {
      std::string names;
      for (const Row& r : kTable) names += std::string(names.empty() ? "" : ", ") + r.name;
      FailLaunch("COST_MODEL_PARAM", op, Format("unknown cost-model parameter '%s'; the parameters are %s",
                                                o.first.c_str(), names.c_str()));
    }
    const bool zero_ok = o.first == "hbm_run_ns" || o.first == "host_run_ns" || o.first == "memcpy_us" ||
                         o.first == "launch_us" || o.first == "scalar_miss_ns" || o.first == "sync_all_us" ||
                         o.first == "call_cycles" || o.first == "issue_cycles";
    if (!std::isfinite(o.second) || o.second < 0 || (o.second == 0 && !zero_ok))
      FailLaunch("COST_MODEL_PARAM", op,
                 Format("cost-model parameter '%s' = %g: expected a finite number %s", o.first.c_str(), o.second,
                        zero_ok ? ">= 0" : "> 0"));
    it->second = o.second;
  }
}

}  // namespace

std::vector<CostParamInfo> CostParamTable(const std::string& soc,
                                          const std::vector<std::pair<std::string, double>>& overrides,
                                          const std::string& op) {
  const Caps caps = CapsFor(soc);
  bool a3 = false;
  if (!Family(caps, &a3))
    FailLaunch("COST_MODEL_SOC", op,
               Format("the cost model has no parameters for %s (family %s); it covers Atlas A2 and A3",
                      caps.soc.c_str(), caps.family.c_str()));
  std::vector<std::pair<std::string, double>> values;
  for (const Row& r : kTable) values.push_back({r.name, a3 ? r.a3 : r.a2});
  ApplyOverrides(values, overrides, op);
  std::vector<CostParamInfo> out;
  size_t i = 0;
  for (const Row& r : kTable) out.push_back({r.name, values[i++].second, r.unit, r.source});
  return out;
}

double CostModel::Param(const std::string& name) const {
  for (const auto& kv : params)
    if (kv.first == name) return kv.second;
  return 0;
}

CostModel MakeCostModel(const Caps& caps, const std::vector<std::pair<std::string, double>>& overrides,
                        uint32_t block_dim, const std::string& op) {
  bool a3 = false;
  if (!Family(caps, &a3))
    FailLaunch("COST_MODEL_SOC", op,
               Format("the cost model has no parameters for %s (family %s); it covers Atlas A2 and A3",
                      caps.soc.c_str(), caps.family.c_str()));
  CostModel m;
  for (const Row& r : kTable) m.params.push_back({r.name, a3 ? r.a3 : r.a2});
  ApplyOverrides(m.params, overrides, op);
  const double f = m.Param("freq_ghz");
  const double n = static_cast<double>(std::max<uint32_t>(block_dim, 1));
  m.call_ns = m.Param("call_cycles") / f;
  m.issue_ns = m.Param("issue_cycles") / f;
  m.run_ns[kLinkHbm] = m.Param("hbm_run_ns");
  m.run_ns[kLinkHost] = m.Param("host_run_ns");
  // a link is shared equally by the cores of the launch
  m.ns_per_byte[kLinkHbm] = 1.0 / std::min(m.Param("hbm_core_gbps"), m.Param("hbm_gbps") / n);
  m.ns_per_byte[kLinkHost] = 1.0 / std::min(m.Param("host_core_gbps"), m.Param("pcie_gbps") / n);
  m.link_bytes_per_ns[kLinkHbm] = m.Param("hbm_gbps");
  m.link_bytes_per_ns[kLinkHost] = m.Param("pcie_gbps");
  m.vec_ns_per_byte = 1.0 / (m.Param("vec_bytes_per_cycle") * f);
  m.scalar_miss_ns[kLinkHbm] = m.Param("scalar_miss_ns");
  m.scalar_miss_ns[kLinkHost] = m.Param("host_run_ns");
  m.scalar_hit_ns = 1.0 / f;
  m.sync_all_ns = m.Param("sync_all_us") * 1e3;
  m.launch_ns = m.Param("launch_us") * 1e3;
  return m;
}

// ------------------------------------------------------------------------------------------ hooks
void CostIssue(Core& c, int pipe, double dur_ns) {
  CoreCost& k = c.cc;
  double start = std::max(k.ts, k.tfree[pipe]);  // ts covers what the scalar waited for
  for (int q = 0; q < kNPipes; ++q) start = std::max(start, k.known[pipe].t[q]);
  k.tfree[pipe] = start + dur_ns;
  k.busy[pipe] += dur_ns;
  k.ts += c.L->cm.issue_ns;
}

void CostDmaOn(Core& c, int pipe, const Region* r, uint64_t rows, uint64_t row_bytes, uint64_t pitch) {
  if (r == nullptr || rows == 0) return;
  const CostModel& m = c.L->cm;
  const int link = r->host ? kLinkHost : kLinkHbm;
  // rows back to back in GM form one run; otherwise each row is a run of its own
  const uint64_t runs = (pitch == row_bytes) ? 1 : rows;
  const uint64_t bytes = rows * row_bytes;
  c.cc.bytes[link] += bytes;
  c.cc.runs[link] += runs;
  c.cc.calls[link] += 1;
  CostIssue(c, pipe, m.call_ns + static_cast<double>(runs) * m.run_ns[link] + static_cast<double>(bytes) * m.ns_per_byte[link]);
}

void CostVecOn(Core& c, uint64_t bytes) {
  const CostModel& m = c.L->cm;
  CostIssue(c, kV, m.call_ns + static_cast<double>(bytes) * m.vec_ns_per_byte);
}

void CostScalarGmOn(Core& c, const Region& r, const void* p, uint32_t bytes) {
  if (bytes == 0) return;
  const CostModel& m = c.L->cm;
  const int link = r.host ? kLinkHost : kLinkHbm;
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  double t = 0;
  for (uintptr_t line = a >> kLineBits; line <= (a + bytes - 1) >> kLineBits; ++line) {
    auto ins = c.cc.lines.emplace(static_cast<uint64_t>(line), 1);
    t += ins.second ? m.scalar_miss_ns[link] : m.scalar_hit_ns;
  }
  c.cc.ts += t;
}

VTimes CostSnap(Core& c, int pipe) {
  VTimes v = c.cc.known[pipe];
  v.Merge(c.cc.known[kS]);
  v.t[pipe] = c.cc.tfree[pipe];  // pipe's instructions so far end then
  return v;
}

void CostLearn(Core& c, int pipe, const VTimes& v) {
  c.cc.known[pipe].Merge(v);
  if (pipe == kS)
    for (int q = 0; q < kNPipes; ++q) c.cc.ts = std::max(c.cc.ts, v.t[q]);
}

void CostNewBuffers(Core& c, size_t first) {
  const size_t n = c.bufs.size();
  c.cc.buf_enq.resize(n);
  c.cc.buf_free.resize(n);
  for (size_t i = first; i < n; ++i) c.cc.buf_enq[i] = c.cc.buf_free[i] = VTimes();
}

void CostSyncAll(LaunchCtx& L, const std::vector<Core*>& cores) {
  if (!L.cost) return;
  double t = 0;
  for (Core* c : cores) {
    double e = c->cc.ts;
    for (int q = 0; q < kNPipes; ++q) e = std::max(e, c->cc.tfree[q]);
    t = std::max(t, e);
  }
  for (Core* c : cores) c->cc.ts = t + L.cm.sync_all_ns;
}

void CostCoreEnd(Core& c) {
  if (!c.L->cost) return;
  double e = c.cc.ts;
  for (int q = 0; q < kNPipes; ++q) {
    e = std::max(e, c.cc.tfree[q]);
    c.st.cost_busy_ns[q] = c.cc.busy[q];
  }
  c.st.cost_end_ns = e;
  for (int l = 0; l < kNLinks; ++l) {
    c.st.cost_bytes[l] = c.cc.bytes[l];
    c.st.cost_runs[l] = c.cc.runs[l];
    c.st.cost_calls[l] = c.cc.calls[l];
  }
}

void CostSummary(const LaunchCtx& L, LaunchResult& res) {
  res.cost = L.cost;
  if (!L.cost) return;
  res.cost_params = L.cm.params;
  double core = 0;
  uint64_t bytes[kNLinks] = {0, 0};
  for (const CoreStats& s : res.cores) {
    core = std::max(core, s.cost_end_ns);
    for (int l = 0; l < kNLinks; ++l) bytes[l] += s.cost_bytes[l];
  }
  res.cost_core_ns = core;
  // A core gets at most an equal share of a link (MakeCostModel), so the slowest core already takes at least
  // the link's aggregate time; the max keeps that bound explicit.
  double worst = core;
  for (int l = 0; l < kNLinks; ++l) {
    res.cost_link_ns[l] = static_cast<double>(bytes[l]) / L.cm.link_bytes_per_ns[l];
    worst = std::max(worst, res.cost_link_ns[l]);
  }
  res.cost_time_ns = L.cm.launch_ns + worst;
}

}  // namespace ascendc_sim
