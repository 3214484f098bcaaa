// AscendC CPU emulation runtime: internal state shared by the runtime translation units.
//
// One LaunchCtx per kernel launch (shared by all cores of the launch), one Core per emulated AI
// core (vector core). The current core of a thread is a thread_local pointer, so cores can run on
// their own OS threads ("threads" core order).
#pragma once

#include <atomic>
#include <cstdarg>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

#include "ascendc_sim/rt.h"

namespace ascendc_sim {

// ------------------------------------------------------------------------------------------ errors
// A violated hardware rule (or a misuse the hardware would punish). what() is the full message:
// "<RULE>: op <op>, core <i> of <n>: <detail>".
struct ASCENDC_SIM_API EmulationError : std::runtime_error {
  std::string rule, op, detail;
  int core;  // -1: not tied to a core (host side / launch setup)
  EmulationError(std::string rule_, std::string op_, int core_, std::string detail_, const std::string& full)
      : std::runtime_error(full), rule(std::move(rule_)), op(std::move(op_)), detail(std::move(detail_)), core(core_) {}
};

std::string Format(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
std::string VFormat(const char* fmt, va_list ap);
// Error not tied to a core (launch setup).
[[noreturn]] void FailLaunch(const std::string& rule, const std::string& op, const std::string& detail);
EmulationError MakeError(const std::string& rule, const std::string& detail);

// ------------------------------------------------------------------------------------------ SoC
struct Caps {
  std::string soc;         // "Ascend910B1"
  std::string family;      // "A2", "A3", "310P"
  uint32_t npu_arch = 0;   // 2201 (A2/A3) or 2002 (310P): which build of a kernel runs
  uint64_t ub_size = 0;
  uint32_t aiv_cores = 0;
  bool has_pad = true;
  bool has_bf16 = true;
  bool saturation = false;  // float overflow saturates (310P) instead of IEEE inf/NaN (A2/A3 default)
  uint64_t sys_ws = 0;      // GetLibApiWorkSpaceSize()
  int event_ids = 8;        // SetFlag/WaitFlag ids per event type
  int que_alloc_limit = 8;  // tensors allocated at once from the queues of one TPosition
  int max_buffers = 64;     // buffers per kernel (all InitBuffer calls)
};
Caps CapsFor(const std::string& soc);

// ------------------------------------------------------------------------------------------ GM
enum class RegionKind { Input, Output, Workspace, Tiling, ListDesc };
struct Region {
  std::string name;  // "input 0 'x'", ...
  uint8_t* base = nullptr;
  uint64_t size = 0;
  RegionKind kind = RegionKind::Input;
  bool writable = true;
  bool host = false;  // cost model: host memory the AI cores reach through PCIe (zero-copy), else device HBM
};

// Per-byte record of GM writes within one launch: 0 = not written; else (core + 1) << 24 | clock,
// clock = the writing core's MTE3 instruction counter (0 for scalar SetValue).
class GmShadow {
 public:
  static constexpr uint64_t kPageBits = 12;
  static constexpr uint64_t kPage = uint64_t{1} << kPageBits;
  std::atomic<uint32_t>* Page(uintptr_t addr, bool create);
  void Clear();

 private:
  std::mutex mu_;
  std::unordered_map<uint64_t, std::unique_ptr<std::atomic<uint32_t>[]>> pages_;
};

// GM accesses of one core within one SyncAll phase, as byte intervals [a, b) of absolute addresses.
struct Ival {
  uintptr_t a, b;
};
constexpr uint64_t kLineBits = 6;  // data-cache line: 64 bytes (GlobalTensor::SetValue page)
struct AccessLog {
  std::vector<Ival> reads, writes;
  std::vector<uint64_t> slines;  // cache lines written with GlobalTensor::SetValue
  static void Add(std::vector<Ival>& v, uintptr_t a, uintptr_t b) {
    if (!v.empty() && a <= v.back().b && b >= v.back().a) {
      if (a < v.back().a) v.back().a = a;
      if (b > v.back().b) v.back().b = b;
      return;
    }
    v.push_back({a, b});
  }
};

// ------------------------------------------------------------------------------------------ cost model
// The opt-in DMA cost model (cost.cpp, docs/emulation.md "The cost model"): its parameters resolved for
// one launch, in the units the hot path uses.
enum CostLink : int { kLinkHbm = 0, kLinkHost = 1, kNLinks = 2 };
struct CostModel {
  std::vector<std::pair<std::string, double>> params;  // every parameter by name (table + overrides)
  double call_ns = 0;                   // MTE / vector pipe occupancy of one instruction, besides its bytes
  double issue_ns = 0;                  // scalar time to issue one instruction
  double run_ns[kNLinks] = {0, 0};      // per contiguous GM run of a DataCopy
  double ns_per_byte[kNLinks] = {0, 0}; // one core's share of the link
  double vec_ns_per_byte = 0;
  double scalar_miss_ns[kNLinks] = {0, 0};  // a scalar GM read of a 64-byte line this core has not read yet
  double scalar_hit_ns = 0;
  double sync_all_ns = 0;
  double launch_ns = 0;
  double link_bytes_per_ns[kNLinks] = {0, 0};  // aggregate of the link over all cores
  double Param(const std::string& name) const;
};
// Resolves the parameter table of a SoC (COST_MODEL_SOC for one without parameters) with overrides
// (COST_MODEL_PARAM for an unknown name or a value that is not positive / finite) for a launch of
// block_dim cores.
CostModel MakeCostModel(const Caps& caps, const std::vector<std::pair<std::string, double>>& overrides,
                        uint32_t block_dim, const std::string& op);

// Thrown inside a core when another core already failed the launch (never reported itself).
struct LaunchAborted {};

struct Sched;  // core scheduler of a launch (runner.cpp)

struct LaunchCtx {
  std::string op;       // OpDef type (or kernel name for raw launches)
  std::string kernel;   // kernel entry name
  Caps caps;
  uint32_t block_dim = 1;
  uint64_t tiling_key = 0;
  std::vector<Region> regions;
  const uint8_t* tiling = nullptr;
  uint64_t tiling_written = 0;  // bytes the tiling function wrote
  uint8_t* workspace = nullptr;
  uint64_t workspace_size = 0;
  uint64_t seed = 0;
  bool hazards = true;
  bool cost = false;  // the cost model is on (LaunchOptions::cost)
  CostModel cm;
  bool uninit_checks = true;
  bool concurrent = false;  // cores run on threads: shadow updates must be atomic
  GmShadow shadow;
  // cross-core model: SyncAll phases, watchdog, workspace initialisation, data cache
  Sched* sched = nullptr;
  std::atomic<bool> abort{false};  // a core failed: the others stop at their next emulated GM access
  std::atomic<bool> watchdog_fired{false};
  uint32_t phase = 0;              // SyncAll calls completed by all cores
  uint64_t spin_limit = 1000000;   // MS_KVCACHE_SIM_SPIN_LIMIT
  double watchdog_s = 300;         // MS_KVCACHE_SIM_WATCHDOG_S (wall seconds per launch)
  uint8_t* ws_user = nullptr;      // user workspace (after the system part) and one "written" byte per byte
  uint64_t ws_user_size = 0;
  uint8_t* ws_written = nullptr;
  std::map<uint64_t, int> carried_dirty;  // cache line -> core whose SetValue left it dirty at the last SyncAll
  ~LaunchCtx();
};

// ------------------------------------------------------------------------------------------ core
struct SrcSite {  // kernel source location of an AscendC API call (rt::At); file nullptr: unknown
  const char* file = nullptr;
  uint32_t line = 0;
};
enum BufState : uint8_t { kFree, kAlloc, kEnq, kDeq };
constexpr int kNPipes = 3;  // tracked pipes: MTE2, V, MTE3 (index); S is index 3 in `known`
enum PipeIdx : int { kMTE2 = 0, kV = 1, kMTE3 = 2, kS = 3, kNoPipe = -1 };
struct VClock {
  uint32_t c[kNPipes] = {0, 0, 0};
  void Merge(const VClock& o) {
    for (int i = 0; i < kNPipes; ++i)
      if (o.c[i] > c[i]) c[i] = o.c[i];
  }
};
// The cost model's companion of a VClock: per pipe the time (ns) by which the instructions the clock counts
// are done. Kept apart from VClock (and only when the model is on) so the hazard tracker is unchanged.
struct VTimes {
  double t[kNPipes] = {0, 0, 0};
  void Merge(const VTimes& o) {
    for (int i = 0; i < kNPipes; ++i)
      if (o.t[i] > t[i]) t[i] = o.t[i];
  }
};

struct Buf {
  uint32_t start = 0;
  uint32_t len = 0;   // bytes requested by InitBuffer
  uint32_t cap = 0;   // bytes reserved (len rounded up to 32)
  int32_t que = -1;   // owning queue, -1 for a TBuf
  Pos pos = Pos::VECCALC;
  BufState st = kFree;
  uint32_t lease = 0;  // queue buffers: count of AllocTensor calls that handed this buffer out
  VClock enq_snap, free_snap;
  // CANN's TQueBind keeps a hardware event id per queue buffer: EnQue allocates one of the queue's
  // enQueEvt (released by DeQue), FreeTensor one of its freeBufEvt (released by the next AllocTensor
  // of the buffer or FreeAllEvent); -1: none held
  int8_t enq_id = -1, free_id = -1;
  int enq_evt = 0;  // the event enq_id belongs to (EnQue<srcUser, dstUser> may differ from the queue's)
};
struct Que {
  Pos src = Pos::GM, dst = Pos::VECIN;  // TQueBind<src, dst> (TQue<VECIN> = TQueBind<GM, VECIN>)
  Pos pos = Pos::VECIN;  // the UB position its buffers are counted at: src, or dst when src is GM
  int32_t depth = 1;
  std::vector<int32_t> bufs;
  std::deque<int32_t> fifo;
  uint32_t next = 0;  // round-robin allocation cursor
  int prod = kNoPipe, cons = kNoPipe;
  int enq_evt = 0, free_evt = 0;  // CANN's GetQueEvt(src, dst, true / false): (pipe_t src << 4) | dst
  bool checked = false;  // leak check done
};
struct BlockShadow {  // hazard record of one 32-byte UB block
  uint8_t wpipe = 0xff;
  uint32_t wclock = 0;
  uint32_t rclock[kNPipes] = {0, 0, 0};
};
struct FlagState {
  bool pending = false;
  VClock snap;
  SrcSite site;  // the SetFlag call
};

// Per core: when the scalar unit and each pipe are free, what the pipes moved.
struct CoreCost {
  double ts = 0;                          // scalar unit (ns since the core started)
  double tfree[kNPipes] = {0, 0, 0};      // end of the last instruction of each pipe
  double busy[kNPipes] = {0, 0, 0};
  uint64_t bytes[kNLinks] = {0, 0}, runs[kNLinks] = {0, 0}, calls[kNLinks] = {0, 0};
  std::unordered_map<uint64_t, char> lines;  // scalar GM lines this core read (data cache)
  // the times of the hazard tracker's synchronisations: what each pipe (and the scalar, kS) waited for, each
  // queue buffer's EnQue and FreeTensor snapshots (by buffer index), each pending SetFlag
  VTimes known[kNPipes + 1];
  std::vector<VTimes> buf_enq, buf_free;
  std::map<std::pair<int, int64_t>, VTimes> flags;
};

struct CoreStats {
  uint64_t gm_read = 0, gm_write = 0;
  uint64_t datacopy_in = 0, datacopy_out = 0, datacopy_ub = 0;
  uint64_t pad_in = 0, pad_out = 0;
  uint64_t scalar_read = 0, scalar_write = 0;
  uint64_t vec_ops = 0;
  uint64_t ub_peak = 0;
  uint64_t tiling_read = 0;
  // cost model (zero when it is off): end time of the core, busy time per pipe, bytes / runs / calls per link
  double cost_end_ns = 0;
  double cost_busy_ns[kNPipes] = {0, 0, 0};
  uint64_t cost_bytes[kNLinks] = {0, 0}, cost_runs[kNLinks] = {0, 0}, cost_calls[kNLinks] = {0, 0};
};

struct Core {
  LaunchCtx* L = nullptr;
  int idx = 0;
  std::vector<uint8_t> ub, valid;
  // TPipe
  void* pipe = nullptr;
  uint32_t gen = 1;
  uint32_t top = 0;
  std::vector<Buf> bufs;
  std::vector<Que> ques;
  // vector mask register
  bool counter_mode = false;
  uint64_t mask[2] = {~uint64_t{0}, ~uint64_t{0}};
  // DataCopyPad SetPadValue
  bool pad_set = false;
  uint64_t pad_bits = 0;
  // SetFlag / WaitFlag, event ids
  std::map<std::pair<int, int64_t>, FlagState> flags;
  std::map<int, uint32_t> event_ids_in_use;  // event -> bit set of AllocEventID ids
  std::map<std::pair<int, int>, SrcSite> event_id_sites;  // (event, id) -> the AllocEventID call
  std::map<int, uint32_t> que_event_ids;  // event -> bit set of ids held by queue buffers (Buf::enq_id/free_id)
  SrcSite site;  // the kernel's AscendC API call being executed (error messages)
  // pipe hazard tracker
  uint32_t clock[kNPipes] = {0, 0, 0};
  VClock known[kNPipes + 1];
  std::vector<BlockShadow> blocks;
  // cross-core model
  AccessLog log;                 // this phase's GM reads / writes
  std::set<uint64_t> dirty;      // data-cache lines SetValue dirtied and no DataCacheCleanAndInvalid cleaned
  uintptr_t spin_addr = 0;       // watchdog: the last GM read and how often it repeated
  uint64_t spin_len = 0, spin_count = 0;
  struct {
    bool pending = false;
    uintptr_t addr = 0;
    const char* api = "";
  } ws_uninit;                   // first read of never-written workspace (reported at the end of the phase)
  // results
  std::unique_ptr<EmulationError> deferred;
  CoreStats st;
  CoreCost cc;
  uint64_t rng = 0;
};

Core& Cur();             // current core; throws if none
Core* CurOrNull();
void SetCurrent(Core* c);

// helpers used across files
uint32_t DTSize(DT dt);
bool DTIsFloat(DT dt);
const Buf& CheckUb(Core& c, const UbRef& t, uint64_t byte_off, uint64_t len, const char* api, const char* what);
// UB_USE_AFTER_FREE if `t` is a LocalTensor of a queue buffer that FreeTensor released (checked at
// every API entry, also when the call moves no bytes); CheckUb does it too.
void CheckLease(Core& c, const UbRef& t, const Buf& b, const char* api, const char* what);
void CheckHandle(Core& c, const UbRef& t, const char* api, const char* what);
void FillGarbage(Core& c, uint8_t* p, uint64_t n);
bool UbValid(Core& c, uint32_t addr, uint32_t n, uint32_t* first_bad);
void UbMarkValid(Core& c, uint32_t addr, uint32_t n, bool v);

// GM
const Region& GmCheck(Core& c, int32_t region, const void* p, uint64_t len, bool write, const char* api);
void GmNoteWrite(Core& c, const Region& r, uint8_t* p, uint64_t len, int pipe, const char* api);
void GmNoteRead(Core& c, const Region& r, const uint8_t* p, uint64_t len, int pipe, const char* api);
std::string DescribeGm(const LaunchCtx& L, const void* p);

// hazards
void HzIssue(Core& c, int pipe);  // an instruction on `pipe` is issued (pipe learns what the scalar knows)
void HzUb(Core& c, int pipe, uint32_t addr, uint32_t len, bool write, const char* api);
void HzUbScalar(Core& c, uint32_t addr, uint32_t len, bool write);
VClock HzSnap(Core& c, int pipe);
void HzLearn(Core& c, int pipe, const VClock& v);
const char* PipeName(int pipe);

// end-of-core checks (flags left set, queue leaks)
void CoreFinish(Core& c);

// cost model hooks (cost.cpp); the inline ones test the switch first, so a launch without the model only
// pays that test
void CostIssue(Core& c, int pipe, double dur_ns);  // an instruction on `pipe` after HzIssue (model on)
void CostDmaOn(Core& c, int pipe, const Region* r, uint64_t rows, uint64_t row_bytes, uint64_t pitch);
void CostVecOn(Core& c, uint64_t bytes);
void CostScalarGmOn(Core& c, const Region& r, const void* p, uint32_t bytes);
// (model on) the times of HzSnap(c, pipe); pipe learns v (HzLearn; kS: the scalar waits for it); buffers
// [first, c.bufs.size()) were just created
VTimes CostSnap(Core& c, int pipe);
void CostLearn(Core& c, int pipe, const VTimes& v);
void CostNewBuffers(Core& c, size_t first);
inline void CostDma(Core& c, int pipe, const Region* r, uint64_t rows, uint64_t row_bytes, uint64_t pitch) {
  if (c.L->cost) CostDmaOn(c, pipe, r, rows, row_bytes, pitch);
}
inline void CostVec(Core& c, uint64_t bytes) {  // a vector instruction (or UB -> UB copy) of `bytes`
  if (c.L->cost) CostVecOn(c, bytes);
}
inline void CostScalarGm(Core& c, const Region& r, const void* p, uint32_t bytes) {
  if (c.L->cost) CostScalarGmOn(c, r, p, bytes);
}
void CostSyncAll(LaunchCtx& L, const std::vector<Core*>& cores);  // all cores are at a SyncAll
void CostCoreEnd(Core& c);                         // fills c.st.cost_*

// cross-core model (gm.cpp, runner.cpp)
EmulationError CoreError(const LaunchCtx& L, int core, const std::string& rule, const std::string& detail);
// End of a SyncAll phase (all cores at the barrier, or all returned when `last`): GM_RACE, DCACHE_CONFLICT,
// WORKSPACE_UNINIT_READ; then the logs and the write shadow start empty.
void PhaseCheck(LaunchCtx& L, const std::vector<Core*>& cores, bool last);
void SyncAllBarrier(Core& c);
[[noreturn]] void SpinFail(Core& c, const Region& r, const uint8_t* p, uint64_t len, const char* api);
void WsMarkWritten(LaunchCtx& L, uintptr_t a, uint64_t len);
void WsCheckRead(Core& c, uintptr_t a, uint64_t len, const char* api);

}  // namespace ascendc_sim
