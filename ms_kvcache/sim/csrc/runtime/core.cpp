// AscendC CPU emulation runtime: per-core state, errors, TPipe / TQue / TBuf, scalar UB access,
// SetFlag / WaitFlag, vector mask registers and the intra-core pipe hazard tracker.
#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <exception>

#include "runtime_internal.h"

namespace ascendc_sim {

// ============================================================================================ errors
std::string VFormat(const char* fmt, va_list ap) {
  char small[512];
  va_list ap2;
  va_copy(ap2, ap);
  int n = std::vsnprintf(small, sizeof(small), fmt, ap2);
  va_end(ap2);
  if (n < 0) return fmt;
  if (static_cast<size_t>(n) < sizeof(small)) return std::string(small, static_cast<size_t>(n));
  std::string out(static_cast<size_t>(n) + 1, '\0');
  std::vsnprintf(&out[0], out.size(), fmt, ap);
  out.resize(static_cast<size_t>(n));
  return out;
}

std::string Format(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  std::string s = VFormat(fmt, ap);
  va_end(ap);
  return s;
}

namespace {
thread_local Core* t_core = nullptr;
}

Core* CurOrNull() { return t_core; }
void SetCurrent(Core* c) { t_core = c; }

EmulationError MakeError(const std::string& rule, const std::string& detail) {
  Core* c = t_core;
  if (c == nullptr || c->L == nullptr) {
    return EmulationError(rule, "", -1, detail, rule + ": (no kernel running): " + detail);
  }
  std::string full = Format("%s: op %s, core %d of %u: %s", rule.c_str(), c->L->op.c_str(), c->idx,
                            c->L->block_dim, detail.c_str());
  if (c->site.file != nullptr) full += Format(" (at %s:%u)", c->site.file, c->site.line);  // the failing API call
  return EmulationError(rule, c->L->op, c->idx, detail, full);
}

void FailLaunch(const std::string& rule, const std::string& op, const std::string& detail) {
  throw EmulationError(rule, op, -1, detail, rule + (op.empty() ? std::string(": ") : ": op " + op + ": ") + detail);
}

namespace rt {

void At(const char* file, uint32_t line) {
  Core* c = t_core;
  if (c == nullptr) return;
  c->site.file = file;
  c->site.line = line;
}

void Fail(const char* rule, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  std::string detail = VFormat(fmt, ap);
  va_end(ap);
  throw MakeError(rule, detail);
}

const char* DTName(DT dt) {
  switch (dt) {
    case DT::B8: return "bool";
    case DT::U8: return "uint8_t";
    case DT::I8: return "int8_t";
    case DT::U16: return "uint16_t";
    case DT::I16: return "int16_t";
    case DT::F16: return "half";
    case DT::BF16: return "bfloat16_t";
    case DT::U32: return "uint32_t";
    case DT::I32: return "int32_t";
    case DT::F32: return "float";
    case DT::U64: return "uint64_t";
    case DT::I64: return "int64_t";
    case DT::F64: return "double";
    default: return "<unsupported type>";
  }
}

}  // namespace rt

Core& Cur() {
  if (t_core == nullptr) {
    throw EmulationError("NO_KERNEL", "", -1, "an AscendC kernel API was called outside a kernel launch",
                         "NO_KERNEL: an AscendC kernel API was called outside a kernel launch "
                         "(run kernels through ms_kvcache.sim.launch / launch_kernel)");
  }
  return *t_core;
}

uint32_t DTSize(DT dt) {
  switch (dt) {
    case DT::B8: case DT::U8: case DT::I8: return 1;
    case DT::U16: case DT::I16: case DT::F16: case DT::BF16: return 2;
    case DT::U32: case DT::I32: case DT::F32: return 4;
    case DT::U64: case DT::I64: case DT::F64: return 8;
    default: return 1;
  }
}
bool DTIsFloat(DT dt) { return dt == DT::F16 || dt == DT::BF16 || dt == DT::F32 || dt == DT::F64; }

const char* PipeName(int pipe) {
  switch (pipe) {
    case kMTE2: return "MTE2";
    case kV: return "V";
    case kMTE3: return "MTE3";
    case kS: return "S";
    default: return "?";
  }
}

// ============================================================================================ basics
namespace rt {

int64_t BlockIdx() { return Cur().idx; }
int64_t BlockNum() { return Cur().L->block_dim; }
uint64_t TilingKey() { return Cur().L->tiling_key; }

void RequireDtype(DT dt, const char* api) {
  Core& c = Cur();
  if (dt == DT::UNKNOWN) Fail("DTYPE_UNSUPPORTED", "%s: element type is not an AscendC data type", api);
  if (dt == DT::BF16 && !c.L->caps.has_bf16)
    Fail("DTYPE_UNSUPPORTED", "%s: bfloat16_t does not exist on %s (%s): no bf16 data path", api,
         c.L->caps.soc.c_str(), c.L->caps.family.c_str());
}

void KernelPrintf(const char* fmt, ...) {
  Core* c = CurOrNull();
  va_list ap;
  va_start(ap, fmt);
  std::string msg = VFormat(fmt, ap);
  va_end(ap);
  std::fprintf(stdout, "[%s core %d] %s", c && c->L ? c->L->op.c_str() : "?", c ? c->idx : -1, msg.c_str());
  std::fflush(stdout);
}

void UnsupportedApi(const char* api, const char* why) {
  Fail("UNSUPPORTED_API", "%s is not supported by the emulation: %s", api, why);
}

uint8_t* UserWorkspace(uint8_t* workspace) {
  Core& c = Cur();
  if (workspace == nullptr || workspace != c.L->workspace)
    Fail("WORKSPACE", "GetUserWorkspace(%p): expected the kernel's workspace argument %p", static_cast<void*>(workspace),
         static_cast<void*>(c.L->workspace));
  if (c.L->workspace_size < c.L->caps.sys_ws)
    Fail("WORKSPACE",
         "GetUserWorkspace: the tiling function requested %" PRIu64 " workspace bytes, less than the %" PRIu64
         " bytes of system workspace (GetLibApiWorkSpaceSize) that precede the user part",
         c.L->workspace_size, c.L->caps.sys_ws);
  return workspace + c.L->caps.sys_ws;
}

uint8_t* SysWorkspace() { return Cur().L->workspace; }

static void CheckTilingArg(Core& c, const uint8_t* tiling, size_t bytes, const char* type_name) {
  if (tiling == nullptr || tiling != c.L->tiling)
    Fail("TILING_SIZE", "GET_TILING_DATA (%s): the argument is not the kernel's tiling pointer", type_name);
  if (bytes > c.L->tiling_written)
    Fail("TILING_SIZE",
         "GET_TILING_DATA reads %zu bytes of %s but the tiling function wrote only %" PRIu64
         " bytes (SetDataSize / SaveToBuffer missing or a different struct on the host side)",
         bytes, type_name, c.L->tiling_written);
  c.st.tiling_read += bytes;
}

void CopyTiling(void* dst, const uint8_t* tiling, size_t bytes, const char* type_name) {
  Core& c = Cur();
  CheckTilingArg(c, tiling, bytes, type_name);
  std::memcpy(dst, tiling, bytes);
}

const void* TilingPtr(const uint8_t* tiling, size_t bytes, const char* type_name) {
  Core& c = Cur();
  CheckTilingArg(c, tiling, bytes, type_name);
  return tiling;
}

}  // namespace rt

// ============================================================================================ UB helpers
void FillGarbage(Core& c, uint8_t* p, uint64_t n) {
  uint64_t x = c.rng;
  for (uint64_t i = 0; i < n; ++i) {
    if ((i & 7) == 0) {  // xorshift64*
      x ^= x >> 12;
      x ^= x << 25;
      x ^= x >> 27;
    }
    p[i] = static_cast<uint8_t>((x * 0x2545F4914F6CDD1Dull) >> (8 * (i & 7)));
  }
  c.rng = x;
}

bool UbValid(Core& c, uint32_t addr, uint32_t n, uint32_t* first_bad) {
  if (!c.L->uninit_checks) return true;
  const uint8_t* v = c.valid.data() + addr;
  for (uint32_t i = 0; i < n; ++i) {
    if (!v[i]) {
      if (first_bad) *first_bad = addr + i;
      return false;
    }
  }
  return true;
}

void UbMarkValid(Core& c, uint32_t addr, uint32_t n, bool v) { std::memset(c.valid.data() + addr, v ? 1 : 0, n); }

static const char* PosName(Pos p) {
  switch (p) {
    case Pos::GM: return "GM";
    case Pos::VECIN: return "VECIN";
    case Pos::VECOUT: return "VECOUT";
    case Pos::VECCALC: return "VECCALC";
    case Pos::A1: return "A1";
    case Pos::A2: return "A2";
    case Pos::B1: return "B1";
    case Pos::B2: return "B2";
    case Pos::C1: return "C1";
    case Pos::C2: return "C2";
    case Pos::CO1: return "CO1";
    case Pos::CO2: return "CO2";
    case Pos::TSCM: return "TSCM";
    default: return "?";
  }
}

// A LocalTensor of a queue buffer is valid from AllocTensor (through EnQue / DeQue, which keep its
// lease) until FreeTensor; any later use of it, or of a view of it (operator[], ReinterpretCast), is a
// use after free, whether or not the queue has handed the buffer out again.
void CheckLease(Core& c, const UbRef& t, const Buf& b, const char* api, const char* what) {
  if (b.que < 0) return;  // TBuf: valid until its TPipe is reset or destroyed (checked by gen)
  if (b.st != kFree && t.lease == b.lease) return;
  const size_t q = static_cast<size_t>(b.que);
  if (b.st == kFree && t.lease == b.lease)
    rt::Fail("UB_USE_AFTER_FREE",
             "%s: %s is a LocalTensor of TQue #%zu (%s, UB [%u, %u)) that FreeTensor released: its buffer may be "
             "reused by the next AllocTensor at any time",
             api, what, q, PosName(c.ques[q].pos), b.start, b.start + b.cap);
  rt::Fail("UB_USE_AFTER_FREE",
           "%s: %s is a stale LocalTensor of TQue #%zu (%s, UB [%u, %u)): FreeTensor released it and AllocTensor has "
           "since handed the buffer out again (%u time(s)), so it now holds another tensor's data",
           api, what, q, PosName(c.ques[q].pos), b.start, b.start + b.cap, b.lease - t.lease);
}

void CheckHandle(Core& c, const UbRef& t, const char* api, const char* what) {
  if (t.buf < 0 || t.gen != c.gen || static_cast<size_t>(t.buf) >= c.bufs.size()) return;  // CheckUb reports these
  CheckLease(c, t, c.bufs[static_cast<size_t>(t.buf)], api, what);
}

const Buf& CheckUb(Core& c, const UbRef& t, uint64_t byte_off, uint64_t len, const char* api, const char* what) {
  if (t.buf < 0)
    rt::Fail("UB_OUT_OF_BUFFER", "%s: %s is a LocalTensor that was never allocated (AllocTensor / TBuf::Get)", api,
             what);
  if (t.gen != c.gen || static_cast<size_t>(t.buf) >= c.bufs.size())
    rt::Fail("PIPE_STATE", "%s: %s belongs to a TPipe that was reset or destroyed", api, what);
  const Buf& b = c.bufs[static_cast<size_t>(t.buf)];
  CheckLease(c, t, b, api, what);
  const uint64_t a = static_cast<uint64_t>(t.addr) + byte_off;
  if (a < b.start || a + len > static_cast<uint64_t>(b.start) + b.cap) {
    rt::Fail("UB_OUT_OF_BUFFER",
             "%s: %s accesses UB bytes [%" PRIu64 ", %" PRIu64 ") but its buffer (%s, InitBuffer len %u) spans [%u, %u)",
             api, what, a, a + len, PosName(b.pos), b.len, b.start, b.start + b.cap);
  }
  return b;
}

namespace rt {

uint32_t BufferEnd(const UbRef& t) {
  Core& c = Cur();
  const Buf& b = CheckUb(c, t, 0, 0, "LocalTensor", "tensor");
  return b.start + b.cap;
}
Pos BufferPos(const UbRef& t) {
  Core& c = Cur();
  return CheckUb(c, t, 0, 0, "LocalTensor", "tensor").pos;
}
uint8_t* UbHostPtr(uint32_t addr) { return Cur().ub.data() + addr; }

void UbScalarRead(const UbRef& t, uint64_t off, uint32_t bytes, void* out) {
  Core& c = Cur();
  CheckUb(c, t, off, bytes, "LocalTensor::GetValue", "the tensor");
  const uint32_t a = static_cast<uint32_t>(t.addr + off);
  uint32_t bad = 0;
  if (!UbValid(c, a, bytes, &bad))
    Fail("UB_UNINIT_READ",
         "LocalTensor::GetValue reads UB byte %u (tensor element at byte offset %" PRIu64
         ") that nothing has written since the buffer was allocated (its content is garbage)",
         bad, off);
  HzUbScalar(c, a, bytes, false);
  std::memcpy(out, c.ub.data() + a, bytes);
}

void UbScalarWrite(const UbRef& t, uint64_t off, uint32_t bytes, const void* in) {
  Core& c = Cur();
  CheckUb(c, t, off, bytes, "LocalTensor::SetValue", "the tensor");
  const uint32_t a = static_cast<uint32_t>(t.addr + off);
  HzUbScalar(c, a, bytes, true);
  std::memcpy(c.ub.data() + a, in, bytes);
  UbMarkValid(c, a, bytes, true);
}

// ============================================================================================ TPipe
void PipeCreate(void* pipe) {
  Core& c = Cur();
  if (c.pipe != nullptr)
    Fail("PIPE_STATE", "a second TPipe was constructed while another TPipe is alive (one TPipe per kernel)");
  c.pipe = pipe;
  ++c.gen;
  c.top = 0;
  c.bufs.clear();
  c.ques.clear();
  c.que_event_ids.clear();
}

void* CurrentPipe() {
  Core& c = Cur();
  if (c.pipe == nullptr) Fail("PIPE_STATE", "GetTPipePtr(): no TPipe is alive");
  return c.pipe;
}

static void CheckLeaks(Core& c) {
  if (std::uncaught_exceptions() > 0 || c.deferred) return;
  for (size_t qi = 0; qi < c.ques.size(); ++qi) {
    Que& q = c.ques[qi];
    if (q.checked) continue;
    q.checked = true;
    int alloc = 0, enq = 0, deq = 0;
    for (int32_t b : q.bufs) {
      switch (c.bufs[static_cast<size_t>(b)].st) {
        case kAlloc: ++alloc; break;
        case kEnq: ++enq; break;
        case kDeq: ++deq; break;
        default: break;
      }
    }
    if (alloc + enq + deq > 0) {
      c.deferred.reset(new EmulationError(MakeError(
          "QUE_LEAK",
          Format("TQue #%zu (%s->%s, %zu buffers) ends the kernel with %d tensor(s) not freed: %d allocated, "
                 "%d still in the queue (EnQue without DeQue), %d dequeued but never FreeTensor'd",
                 qi, PosName(q.src), PosName(q.dst), q.bufs.size(), alloc + enq + deq, alloc, enq, deq))));
      return;
    }
  }
}

void PipeDestroy(void* pipe) {
  Core* cp = CurOrNull();
  if (cp == nullptr || cp->pipe != pipe) return;
  CheckLeaks(*cp);
  cp->pipe = nullptr;
  ++cp->gen;
}

void PipeReset(void* pipe) {
  Core& c = Cur();
  if (c.pipe != pipe) Fail("PIPE_STATE", "TPipe::Reset on a TPipe that is not the kernel's current TPipe");
  CheckLeaks(c);
  ++c.gen;
  c.top = 0;
  c.bufs.clear();
  c.ques.clear();
  c.que_event_ids.clear();
}

static bool IsUbPos(Pos p) { return p == Pos::VECIN || p == Pos::VECOUT || p == Pos::VECCALC; }

static int32_t NewBuffers(Core& c, const char* api, Pos pos, uint32_t num, uint32_t len, int32_t que) {
  if (c.pipe == nullptr) Fail("PIPE_STATE", "%s: no TPipe is alive", api);
  if (!IsUbPos(pos))
    UnsupportedApi(api, Format("TPosition %s is not in the Unified Buffer; only VECIN/VECOUT/VECCALC are emulated",
                               PosName(pos)).c_str());
  if (num == 0) Fail("UB_BUDGET", "%s: num must be >= 1", api);
  if (len == 0)  // CANN's CPU-debug TPipe::InitBuffer asserts 0 < len <= the pool size
    Fail("UB_BUDGET", "%s(num=%u, len=0): the buffer length must be > 0", api, num);
  const uint32_t cap = (len + 31u) & ~31u;
  const Caps& caps = c.L->caps;
  const uint64_t need = static_cast<uint64_t>(cap) * num;
  if (static_cast<uint64_t>(c.top) + need > caps.ub_size) {
    std::string list;
    for (const Buf& b : c.bufs) list += Format(" %s:%u", PosName(b.pos), b.cap);
    Fail("UB_BUDGET",
         "%s(num=%u, len=%u) needs %" PRIu64 " B (len rounded up to 32 B: %u); %u B are already given out "
         "(buffers:%s), total %" PRIu64 " B > UB size %" PRIu64 " B of %s",
         api, num, len, need, cap, c.top, list.empty() ? " none" : list.c_str(), c.top + need, caps.ub_size,
         caps.soc.c_str());
  }
  if (c.bufs.size() + num > static_cast<size_t>(caps.max_buffers))
    Fail("BUFFER_COUNT", "%s(num=%u): the kernel would use %zu buffers; at most %d buffers are allowed per kernel", api,
         num, c.bufs.size() + num, caps.max_buffers);
  const int32_t first = static_cast<int32_t>(c.bufs.size());
  for (uint32_t i = 0; i < num; ++i) {
    Buf b;
    b.start = c.top;
    b.len = len;
    b.cap = cap;
    b.que = que;
    b.pos = pos;
    b.st = kFree;
    FillGarbage(c, c.ub.data() + b.start, cap);
    UbMarkValid(c, b.start, cap, false);
    c.top += cap;
    c.bufs.push_back(b);
  }
  if (c.L->cost) CostNewBuffers(c, static_cast<size_t>(first));
  if (c.top > c.st.ub_peak) c.st.ub_peak = c.top;
  return first;
}

// ---- hardware event ids of queue buffers (CANN's kernel_tquebind_impl.h / kernel_tpipe_impl.h)
// pipe_t numbering (S 0, V 1, M 2, MTE1 3, MTE2 4, MTE3 5), as HardEvent / set_flag use it.
static int Ev(int src, int dst) { return (src << 4) | dst; }
static const char* HwPipeName(int hw);
static std::string EvName(int event);
// CANN's GetQueEvt for the UB queues: <GM, UB> MTE2_V / V_MTE2, <UB, GM> V_MTE3 / MTE3_V,
// <UB, UB> MTE2_MTE3 / MTE3_MTE2 (fwd: the EnQue -> DeQue event, else the FreeTensor -> AllocTensor one).
static int QueEvt(Pos src, Pos dst, bool fwd) {
  if (src == Pos::GM) return fwd ? Ev(4, 1) : Ev(1, 4);
  if (dst == Pos::GM) return fwd ? Ev(1, 5) : Ev(5, 1);
  return fwd ? Ev(4, 5) : Ev(5, 4);
}
static int32_t FirstFreeId(Core& c, int event) {
  const uint32_t used = c.event_ids_in_use[event] | c.que_event_ids[event];
  for (int i = 0; i < c.L->caps.event_ids; ++i)
    if (!(used & (1u << i))) return i;
  return -1;
}
static std::string IdList(uint32_t bits) {
  std::string s;
  for (int i = 0; i < 32; ++i)
    if (bits & (1u << i)) s += (s.empty() ? "" : ", ") + std::to_string(i);
  return s.empty() ? "none" : s;
}
// Who holds the ids of `event`: "TQue #0 (VECIN, 1 freed buffer), ..." and the AllocEventID ids.
static std::string EventHolders(Core& c, int event, bool with_user = true) {
  std::string s;
  for (size_t qi = 0; qi < c.ques.size(); ++qi) {
    int freed = 0, queued = 0;
    for (int32_t bi : c.ques[qi].bufs) {
      const Buf& b = c.bufs[static_cast<size_t>(bi)];
      freed += b.free_id >= 0 && c.ques[qi].free_evt == event;
      queued += b.enq_id >= 0 && b.enq_evt == event;
    }
    if (freed + queued == 0) continue;
    s += Format("%sTQue #%zu (%s): %d", s.empty() ? "" : ", ", qi, PosName(c.ques[qi].pos), freed + queued);
  }
  const uint32_t user = c.event_ids_in_use[event];
  if (user && with_user) s += Format("%sAllocEventID: id(s) %s", s.empty() ? "" : ", ", IdList(user).c_str());
  return s.empty() ? "none" : s;
}
// A queue buffer takes an id of `event` (EnQue / FreeTensor); QUE_BUFFER_LIMIT when none is left.
static int8_t QueTakeId(Core& c, const Que& q, int event, const char* api) {
  const int32_t id = FirstFreeId(c, event);
  if (id < 0)
    Fail("QUE_BUFFER_LIMIT",
         "%s on a %s queue needs a free %s event id, but all %d are held (%s): every TQue buffer that was freed and "
         "not allocated again, or enqueued and not dequeued, holds one, so at most %d buffers per TPosition can be "
         "in use (TQue Buffer limit); use fewer buffers (one larger buffer with offsets), or FreeAllEvent a queue "
         "that is no longer used",
         api, PosName(q.pos), EvName(event).c_str(), c.L->caps.event_ids, EventHolders(c, event).c_str(),
         c.L->caps.event_ids);
  c.que_event_ids[event] |= 1u << id;
  return static_cast<int8_t>(id);
}
static void QueGiveId(Core& c, int event, int8_t& id) {
  if (id < 0) return;
  c.que_event_ids[event] &= ~(1u << id);
  id = -1;
}

// TQueBind<src, dst>: GM -> UB is MTE2, UB -> GM is MTE3, VECOUT is written by the vector unit and
// VECIN read by it (CANN's GetQueEvt: <GM, VECIN> MTE2_V, <VECOUT, GM> V_MTE3, <VECIN, VECOUT> MTE2_MTE3).
static int PipeOfProducer(Pos src) {
  if (src == Pos::GM || src == Pos::VECIN) return kMTE2;
  if (src == Pos::VECOUT) return kV;
  return kNoPipe;
}
static int PipeOfConsumer(Pos dst) {
  if (dst == Pos::GM || dst == Pos::VECOUT) return kMTE3;
  if (dst == Pos::VECIN) return kV;
  return kNoPipe;
}

void PipeInitQue(int32_t* handle, uint32_t* gen, Pos src, Pos dst, int32_t depth, uint32_t num, uint32_t len) {
  Core& c = Cur();
  if (*handle >= 0 && *gen == c.gen)
    Fail("PIPE_STATE", "InitBuffer called twice for the same TQue (call TPipe::Reset first)");
  if (depth < 0) Fail("QUE_DEPTH", "TQue depth must be >= 0, got %d", depth);
  Que q;
  if (src == Pos::GM && dst == Pos::GM) Fail("UNSUPPORTED_API", "TQueBind<GM, GM>: a queue needs a local position");
  q.src = src;
  q.dst = dst;
  q.pos = src == Pos::GM ? dst : src;
  q.depth = depth;
  q.prod = PipeOfProducer(src);
  q.cons = PipeOfConsumer(dst);
  q.enq_evt = QueEvt(src, dst, true);
  q.free_evt = QueEvt(src, dst, false);
  const int32_t qi = static_cast<int32_t>(c.ques.size());
  const int32_t first = NewBuffers(c, "TPipe::InitBuffer(TQue)", q.pos, num, len, qi);
  for (uint32_t i = 0; i < num; ++i) q.bufs.push_back(first + static_cast<int32_t>(i));
  if (depth == 0) {  // CANN allocates a depth-0 queue's event ids per buffer in InitBuffer, for good
    for (uint32_t i = 0; i < num; ++i) {
      (void)QueTakeId(c, q, q.enq_evt, "TPipe::InitBuffer");
      (void)QueTakeId(c, q, q.free_evt, "TPipe::InitBuffer");
    }
  }
  c.ques.push_back(q);
  *handle = qi;
  *gen = c.gen;
}

void PipeInitTBuf(int32_t* handle, uint32_t* gen, Pos pos, uint32_t len) {
  Core& c = Cur();
  if (*handle >= 0 && *gen == c.gen)
    Fail("PIPE_STATE", "InitBuffer called twice for the same TBuf (call TPipe::Reset first)");
  *handle = NewBuffers(c, "TPipe::InitBuffer(TBuf)", pos, 1, len, -1);
  *gen = c.gen;
}

static Que& GetQue(Core& c, int32_t h, uint32_t gen, const char* api) {
  if (h < 0) Fail("PIPE_STATE", "%s on a TQue that was never given buffers (TPipe::InitBuffer missing)", api);
  if (gen != c.gen || static_cast<size_t>(h) >= c.ques.size())
    Fail("PIPE_STATE", "%s on a TQue whose TPipe was reset or destroyed", api);
  return c.ques[static_cast<size_t>(h)];
}

UbRef QueAlloc(int32_t h, uint32_t gen, uint32_t* len) {
  Core& c = Cur();
  Que& q = GetQue(c, h, gen, "AllocTensor");
  int32_t pick = -1;
  for (size_t k = 0; k < q.bufs.size(); ++k) {
    const int32_t b = q.bufs[(q.next + k) % q.bufs.size()];
    if (c.bufs[static_cast<size_t>(b)].st == kFree) {
      pick = b;
      q.next = static_cast<uint32_t>((q.next + k + 1) % q.bufs.size());
      break;
    }
  }
  if (pick < 0) {
    int alloc = 0, enq = 0, deq = 0;
    for (int32_t b : q.bufs) {
      BufState s = c.bufs[static_cast<size_t>(b)].st;
      alloc += s == kAlloc;
      enq += s == kEnq;
      deq += s == kDeq;
    }
    Fail("QUE_ALLOC",
         "AllocTensor on a %s queue whose %zu buffer(s) are all in use (%d allocated, %d in the queue, %d dequeued "
         "and not freed): the hardware would wait forever; FreeTensor first or InitBuffer more buffers",
         PosName(q.pos), q.bufs.size(), alloc, enq, deq);
  }
  int outstanding = 0;
  for (const Que& o : c.ques) {
    if (o.pos != q.pos) continue;
    for (int32_t b : o.bufs) outstanding += c.bufs[static_cast<size_t>(b)].st != kFree;
  }
  if (outstanding + 1 > c.L->caps.que_alloc_limit)
    Fail("QUE_ALLOC_LIMIT",
         "AllocTensor: %d tensors would be allocated at once from the %s queues; at most %d per TPosition "
         "(the number of hardware sync event ids)",
         outstanding + 1, PosName(q.pos), c.L->caps.que_alloc_limit);
  Buf& b = c.bufs[static_cast<size_t>(pick)];
  b.st = kAlloc;
  ++b.lease;
  QueGiveId(c, q.free_evt, b.free_id);  // WaitFlag + ReleaseEventID of the FreeTensor event
  if (q.prod != kNoPipe) HzLearn(c, q.prod, b.free_snap);  // WaitFlag(consumer -> producer)
  if (c.L->cost && q.prod != kNoPipe) CostLearn(c, q.prod, c.cc.buf_free[static_cast<size_t>(pick)]);
  *len = b.len;
  return UbRef{b.start, pick, c.gen, b.lease};
}

static int32_t OwnBuffer(Core& c, Que& q, const UbRef& t, const char* api) {
  if (t.buf < 0) Fail("QUE_STATE", "%s: the tensor was never allocated", api);
  if (t.gen != c.gen) Fail("PIPE_STATE", "%s: the tensor belongs to a TPipe that was reset", api);
  if (std::find(q.bufs.begin(), q.bufs.end(), t.buf) == q.bufs.end())
    Fail("QUE_STATE", "%s: the tensor (UB %u) was not allocated from this queue", api, t.addr);
  return t.buf;
}

static const char* StName(BufState s) {
  switch (s) {
    case kFree: return "free";
    case kAlloc: return "allocated";
    case kEnq: return "in the queue";
    case kDeq: return "dequeued";
  }
  return "?";
}

void QueEnQue(int32_t h, uint32_t gen, const UbRef& t, Pos su, Pos du) {
  Core& c = Cur();
  Que& q = GetQue(c, h, gen, "EnQue");
  const int32_t bi = OwnBuffer(c, q, t, "EnQue");
  Buf& b = c.bufs[static_cast<size_t>(bi)];
  if (t.lease != b.lease) CheckLease(c, t, b, "EnQue", "the tensor");
  if (b.st != kAlloc && b.st != kDeq)
    Fail("QUE_STATE", "EnQue of a tensor that is %s (expected allocated or dequeued)", StName(b.st));
  if (q.depth > 0 && static_cast<int32_t>(q.fifo.size()) >= q.depth)
    Fail("QUE_DEPTH",
         "EnQue: the queue already holds %zu tensor(s) = its depth %d; the depth must be at least the number of "
         "consecutive EnQue calls without DeQue",
         q.fifo.size(), q.depth);
  if (q.depth != 0) {
    const int ev = su != Pos::MAX ? QueEvt(su, du, true) : q.enq_evt;
    b.enq_id = QueTakeId(c, q, ev, "EnQue");
    b.enq_evt = ev;
  }
  int prod = q.prod;
  if (su != Pos::MAX) prod = (su == Pos::GM) ? kMTE2 : kV;
  if (prod != kNoPipe) b.enq_snap = HzSnap(c, prod);  // SetFlag(producer -> consumer)
  else b.enq_snap = VClock();
  if (c.L->cost) c.cc.buf_enq[static_cast<size_t>(bi)] = prod != kNoPipe ? CostSnap(c, prod) : VTimes();
  b.st = kEnq;
  q.fifo.push_back(bi);
  (void)du;
}

UbRef QueDeQue(int32_t h, uint32_t gen, uint32_t* len, Pos su, Pos du) {
  Core& c = Cur();
  Que& q = GetQue(c, h, gen, "DeQue");
  if (q.fifo.empty())
    Fail("QUE_DEQUE_EMPTY", "DeQue on an empty %s queue (no tensor was EnQue'd): the hardware would wait forever",
         PosName(q.pos));
  const int32_t bi = q.fifo.front();
  q.fifo.pop_front();
  Buf& b = c.bufs[static_cast<size_t>(bi)];
  b.st = kDeq;
  QueGiveId(c, b.enq_evt, b.enq_id);
  int cons = q.cons;
  if (du != Pos::MAX) cons = (du == Pos::GM) ? kMTE3 : kV;
  (void)su;
  if (cons != kNoPipe) HzLearn(c, cons, b.enq_snap);  // WaitFlag(producer -> consumer)
  if (c.L->cost && cons != kNoPipe) CostLearn(c, cons, c.cc.buf_enq[static_cast<size_t>(bi)]);
  *len = b.len;
  return UbRef{b.start, bi, c.gen, b.lease};
}

void QueFree(int32_t h, uint32_t gen, const UbRef& t) {
  Core& c = Cur();
  Que& q = GetQue(c, h, gen, "FreeTensor");
  const int32_t bi = OwnBuffer(c, q, t, "FreeTensor");
  Buf& b = c.bufs[static_cast<size_t>(bi)];
  if (b.st == kFree) Fail("QUE_FREE", "FreeTensor of a tensor that is already free (double free)");
  if (t.lease != b.lease) CheckLease(c, t, b, "FreeTensor", "the tensor");  // freed, then handed out again
  if (b.st == kEnq) Fail("QUE_FREE", "FreeTensor of a tensor that is still in the queue (EnQue'd, not DeQue'd)");
  if (q.depth != 0) b.free_id = QueTakeId(c, q, q.free_evt, "FreeTensor");
  b.st = kFree;
  const int cons = q.cons != kNoPipe ? q.cons : q.prod;
  if (cons != kNoPipe) b.free_snap = HzSnap(c, cons);  // SetFlag(consumer -> producer)
  if (c.L->cost && cons != kNoPipe) c.cc.buf_free[static_cast<size_t>(bi)] = CostSnap(c, cons);
}

int32_t QueInfo(int32_t h, uint32_t gen, int what) {
  Core& c = Cur();
  Que& q = GetQue(c, h, gen, "TQue query");
  if (what == 0) return static_cast<int32_t>(q.fifo.size());
  if (what == 1) return q.depth == 0 || static_cast<int32_t>(q.fifo.size()) < q.depth;
  int idle = 0;
  for (int32_t b : q.bufs) idle += c.bufs[static_cast<size_t>(b)].st == kFree;
  return idle;
}

void QueFreeAllEvent(int32_t h, uint32_t gen) {
  Core& c = Cur();
  Que& q = GetQue(c, h, gen, "FreeAllEvent");
  for (int32_t bi : q.bufs) QueGiveId(c, q.free_evt, c.bufs[static_cast<size_t>(bi)].free_id);
}

void QueDestroy(int32_t h, uint32_t gen) {
  Core* cp = CurOrNull();
  if (cp == nullptr || h < 0 || gen != cp->gen || static_cast<size_t>(h) >= cp->ques.size()) return;
  Core& c = *cp;
  if (std::uncaught_exceptions() > 0 || c.deferred) return;
  Que& q = c.ques[static_cast<size_t>(h)];
  if (q.checked) return;
  // reuse the pipe-wide check for just this queue
  std::vector<bool> saved(c.ques.size());
  for (size_t i = 0; i < c.ques.size(); ++i) {
    saved[i] = c.ques[i].checked;
    c.ques[i].checked = (static_cast<int32_t>(i) != h);
  }
  CheckLeaks(c);
  for (size_t i = 0; i < c.ques.size(); ++i) c.ques[i].checked = saved[i] || static_cast<int32_t>(i) == h;
}

UbRef TBufGet(int32_t h, uint32_t gen, uint32_t* len) {
  Core& c = Cur();
  if (h < 0) Fail("PIPE_STATE", "TBuf::Get on a TBuf that was never given memory (TPipe::InitBuffer missing)");
  if (gen != c.gen || static_cast<size_t>(h) >= c.bufs.size())
    Fail("PIPE_STATE", "TBuf::Get on a TBuf whose TPipe was reset or destroyed");
  const Buf& b = c.bufs[static_cast<size_t>(h)];
  *len = b.len;
  return UbRef{b.start, h, c.gen, 0};
}

// ============================================================================================ mask registers
void SetMaskMode(bool counter) { Cur().counter_mode = counter; }
void SetVectorMask(uint64_t hi, uint64_t lo, DT) {
  Core& c = Cur();
  c.mask[0] = lo;
  c.mask[1] = hi;
}
void SetVectorMaskLen(int64_t len, DT dt) {
  Core& c = Cur();
  if (len < 0) Fail("VEC_PARAMS", "SetVectorMask(len=%" PRId64 "): len must be >= 0", len);
  if (c.counter_mode) {
    c.mask[0] = static_cast<uint64_t>(len);
    c.mask[1] = 0;
    return;
  }
  const int64_t per = 256 / static_cast<int64_t>(DTSize(dt));
  const int64_t n = std::min<int64_t>(len, per);
  c.mask[0] = n >= 64 ? ~uint64_t{0} : ((uint64_t{1} << n) - 1);
  c.mask[1] = n <= 64 ? 0 : (n >= 128 ? ~uint64_t{0} : ((uint64_t{1} << (n - 64)) - 1));
}
void ResetMask() {
  Core& c = Cur();
  c.mask[0] = c.mask[1] = ~uint64_t{0};
}

void SetPadValue(uint64_t bits, uint32_t) {
  Core& c = Cur();
  c.pad_set = true;
  c.pad_bits = bits;
}

// ============================================================================================ flags
static int PipeIdxOf(int hw) {  // pipe_t numbering -> tracked index
  switch (hw) {
    case 0: return kS;
    case 1: return kV;
    case 4: return kMTE2;
    case 5: return kMTE3;
    default: return kNoPipe;
  }
}
static const char* HwPipeName(int hw) {
  static const char* names[] = {"S", "V", "M", "MTE1", "MTE2", "MTE3", "FIX", "ALL"};
  return (hw >= 0 && hw < 8) ? names[hw] : "?";
}

static void CheckEventId(Core& c, int event, int64_t id, const char* api) {
  if (id < 0 || id >= c.L->caps.event_ids)
    Fail("EVENT_ID", "%s<%s_%s>(%" PRId64 "): event id out of range [0, %d)", api, HwPipeName(event >> 4),
         HwPipeName(event & 15), id, c.L->caps.event_ids);
}

void SetFlag(int event, int64_t id) {
  Core& c = Cur();
  CheckEventId(c, event, id, "SetFlag");
  FlagState& f = c.flags[{event, id}];
  if (f.pending)
    Fail("FLAG_UNPAIRED", "SetFlag<%s_%s>(%" PRId64 ") while the same flag is already set and not yet waited on",
         HwPipeName(event >> 4), HwPipeName(event & 15), id);
  f.pending = true;
  f.site = c.site;
  const int src = PipeIdxOf(event >> 4);
  if (src == kS) {
    f.snap = c.known[kS];
  } else if (src != kNoPipe) {
    f.snap = HzSnap(c, src);
  } else {
    f.snap = VClock();
  }
  if (c.L->cost) c.cc.flags[{event, id}] = src == kS ? c.cc.known[kS] : src != kNoPipe ? CostSnap(c, src) : VTimes();
}

void WaitFlag(int event, int64_t id) {
  Core& c = Cur();
  CheckEventId(c, event, id, "WaitFlag");
  auto it = c.flags.find({event, id});
  if (it == c.flags.end() || !it->second.pending)
    Fail("FLAG_UNPAIRED",
         "WaitFlag<%s_%s>(%" PRId64 ") without a matching SetFlag before it: the hardware would wait forever",
         HwPipeName(event >> 4), HwPipeName(event & 15), id);
  it->second.pending = false;
  const int dst = PipeIdxOf(event & 15);
  if (dst != kNoPipe) HzLearn(c, dst, it->second.snap);
  if (c.L->cost && dst != kNoPipe) CostLearn(c, dst, c.cc.flags[{event, id}]);
}

void Barrier(Pipe p) {
  Core& c = Cur();
  switch (p) {
    case Pipe::ALL: {
      VClock all;
      for (int i = 0; i < kNPipes; ++i) all.c[i] = c.clock[i];
      HzLearn(c, kS, all);
      for (int i = 0; i < kNPipes; ++i) HzLearn(c, i, all);
      if (c.L->cost) {  // the scalar and every pipe wait until every pipe is done
        VTimes t;
        for (int i = 0; i < kNPipes; ++i) t.t[i] = c.cc.tfree[i];
        for (int i = 0; i <= kNPipes; ++i) CostLearn(c, i, t);
      }
      break;
    }
    case Pipe::MTE2: c.known[kMTE2].c[kMTE2] = c.clock[kMTE2]; break;
    case Pipe::MTE3: c.known[kMTE3].c[kMTE3] = c.clock[kMTE3]; break;
    case Pipe::V: c.known[kV].c[kV] = c.clock[kV]; break;
    case Pipe::S: Fail("PIPE_BARRIER", "PipeBarrier<PIPE_S> is not supported (scalar ordering is automatic)");
    default: break;
  }
}

static std::string EvName(int event) { return Format("%s_%s", HwPipeName(event >> 4), HwPipeName(event & 15)); }

// The AllocEventID ids of `event` not yet released, grouped by the call that allocated them:
// "0, 1, 2 (allocated at k.cpp:12), 3 (allocated at k.cpp:20)".
static std::string UserIdSites(Core& c, int event) {
  std::vector<std::pair<std::string, std::string>> groups;  // (site, ids)
  const uint32_t user = c.event_ids_in_use[event];
  for (int i = 0; i < 32; ++i) {
    if (!(user & (1u << i))) continue;
    const SrcSite& w = c.event_id_sites[{event, i}];
    const std::string at = w.file != nullptr ? Format(" (allocated at %s:%u)", w.file, w.line) : std::string();
    auto g = std::find_if(groups.begin(), groups.end(), [&](const auto& x) { return x.first == at; });
    if (g == groups.end()) groups.push_back({at, std::to_string(i)});
    else g->second += ", " + std::to_string(i);
  }
  std::string s;
  for (const auto& g : groups) s += (s.empty() ? "" : ", ") + g.second + g.first;
  return s;
}

static int32_t NoFreeEventId(Core& c, int event, const char* api) {
  const uint32_t user = c.event_ids_in_use[event], que = c.que_event_ids[event];
  Fail("EVENT_ID",
       "%s<%s>: no free event id, all %d are taken: %d by AllocEventID and never released with ReleaseEventID "
       "(id(s) %s), %d by queue buffers (%s); AllocEventID and ReleaseEventID must be paired: an AllocEventID whose "
       "id is not released (e.g. one per loop iteration) leaks it",
       api, EvName(event).c_str(), c.L->caps.event_ids, __builtin_popcount(user),
       user ? UserIdSites(c, event).c_str() : "none", __builtin_popcount(que), EventHolders(c, event, false).c_str());
}

int32_t FetchEventID(int event) {
  Core& c = Cur();
  const int32_t id = FirstFreeId(c, event);
  return id >= 0 ? id : NoFreeEventId(c, event, "FetchEventID");
}

int32_t AllocEventID(int event) {
  Core& c = Cur();
  int32_t id = FirstFreeId(c, event);
  if (id < 0) id = NoFreeEventId(c, event, "AllocEventID");
  c.event_ids_in_use[event] |= 1u << id;
  c.event_id_sites[{event, id}] = c.site;
  return id;
}

void ReleaseEventID(int event, int64_t id) {
  Core& c = Cur();
  CheckEventId(c, event, id, "ReleaseEventID");
  uint32_t& used = c.event_ids_in_use[event];
  if (!(used & (1u << id)))
    Fail("EVENT_ID", "ReleaseEventID<%s_%s>(%" PRId64 ") of an id that was not allocated", HwPipeName(event >> 4),
         HwPipeName(event & 15), id);
  used &= ~(1u << id);
}

}  // namespace rt

// ============================================================================================ hazards
// Vector clocks over the tracked pipes. c.clock[p] counts instructions issued on pipe p; c.known[p]
// is, per pipe q, the clock of q up to which pipe p is guaranteed to see q's work complete (through
// EnQue/DeQue, AllocTensor/FreeTensor, SetFlag/WaitFlag, PipeBarrier or a compiler-inserted scalar
// sync). c.known[kS] is what the scalar unit has waited for; every later instruction inherits it.
VClock HzSnap(Core& c, int pipe) {
  VClock v = c.known[pipe];
  v.Merge(c.known[kS]);
  v.c[pipe] = c.clock[pipe];
  return v;
}

void HzLearn(Core& c, int pipe, const VClock& v) { c.known[pipe].Merge(v); }

void HzIssue(Core& c, int pipe) {
  c.known[pipe].Merge(c.known[kS]);
  ++c.clock[pipe];
}

// Every unsynchronised earlier access of the block `s` that an access on `pipe` (a write if `write`)
// conflicts with, so the hint names each missing pipe pair (an MTE2 write after a V read and an MTE3 read
// of the same bytes needs V_MTE2 and MTE3_MTE2, not just the first one found).
[[noreturn]] static void HzFail(Core& c, const BlockShadow& s, int pipe, bool write, uint32_t addr, const char* api) {
  bool wrote[kNPipes] = {false, false, false}, read[kNPipes] = {false, false, false};
  if (s.wpipe != 0xff) {
    const int w = s.wpipe;
    const bool same_ok = (w == pipe) && (w != kMTE2 || !write);
    if (!same_ok && s.wclock > c.known[pipe].c[w]) wrote[w] = true;
  }
  if (write) {
    for (int q = 0; q < kNPipes; ++q)
      if (q != pipe && s.rclock[q] > c.known[pipe].c[q]) read[q] = true;
  }
  std::string what, pairs;
  for (int q = 0; q < kNPipes; ++q) {
    if (!wrote[q] && !read[q]) continue;
    what += Format("%slast %s by pipe %s", what.empty() ? "" : " and ",
                   wrote[q] && read[q] ? "written and read" : wrote[q] ? "written" : "read", PipeName(q));
    pairs += (pairs.empty() ? "" : " and ") +
             (q == pipe ? Format("PipeBarrier<PIPE_%s>", PipeName(pipe))
                        : Format("SetFlag/WaitFlag<%s_%s>", PipeName(q), PipeName(pipe)));
  }
  rt::Fail("PIPE_HAZARD",
           "%s: %s on pipe %s touches UB byte %u %s with no synchronisation in between (EnQue/DeQue, "
           "AllocTensor/FreeTensor, %s or PipeBarrier)",
           api, write ? "write" : "read", PipeName(pipe), addr, what.c_str(), pairs.c_str());
}

void HzUb(Core& c, int pipe, uint32_t addr, uint32_t len, bool write, const char* api) {
  if (!c.L->hazards || len == 0) return;
  const uint32_t b0 = addr / 32, b1 = (addr + len - 1) / 32;
  const uint32_t now = c.clock[pipe];
  for (uint32_t b = b0; b <= b1; ++b) {
    BlockShadow& s = c.blocks[b];
    if (s.wpipe != 0xff) {
      const int w = s.wpipe;
      // V after V is ordered by the compiler; MTE2 after MTE2 needs PipeBarrier<PIPE_MTE2> when it writes the same UB.
      const bool same_ok = (w == pipe) && (w != kMTE2 || !write);
      if (!same_ok && s.wclock > c.known[pipe].c[w]) HzFail(c, s, pipe, write, b * 32, api);
    }
    if (write) {
      for (int q = 0; q < kNPipes; ++q) {
        if (q == pipe) continue;
        if (s.rclock[q] > c.known[pipe].c[q]) HzFail(c, s, pipe, write, b * 32, api);
      }
      s.wpipe = static_cast<uint8_t>(pipe);
      s.wclock = now;
    } else {
      s.rclock[pipe] = now;
    }
  }
}

void HzUbScalar(Core& c, uint32_t addr, uint32_t len, bool write) {
  if (!c.L->hazards || len == 0) return;
  // bisheng inserts the syncs between PIPE_S and the other pipes itself (cce-auto-sync): the scalar
  // waits for every pipe that touched these bytes, so everything issued later sees that work done.
  const uint32_t b0 = addr / 32, b1 = (addr + len - 1) / 32;
  VClock learn;
  for (uint32_t b = b0; b <= b1; ++b) {
    BlockShadow& s = c.blocks[b];
    if (s.wpipe != 0xff) learn.c[s.wpipe] = c.clock[s.wpipe];
    if (write) {
      for (int q = 0; q < kNPipes; ++q)
        if (s.rclock[q]) learn.c[q] = c.clock[q];
      s.wpipe = 0xff;
      s.wclock = 0;
    }
  }
  c.known[kS].Merge(learn);
  if (c.L->cost) {  // the scalar waits for those pipes
    VTimes t;
    for (int q = 0; q < kNPipes; ++q)
      if (learn.c[q]) t.t[q] = c.cc.tfree[q];
    CostLearn(c, kS, t);
  }
}

void CoreFinish(Core& c) {
  if (c.deferred) throw *c.deferred;
  c.site = SrcSite();  // the checks below are not about the last API call
  for (auto& kv : c.flags) {
    if (kv.second.pending) {
      const int ev = kv.first.first;
      c.site = kv.second.site;
      rt::Fail("FLAG_UNPAIRED", "SetFlag<%s_%s>(%" PRId64 ") was never matched by a WaitFlag before the kernel ended",
               rt::HwPipeName(ev >> 4), rt::HwPipeName(ev & 15), kv.first.second);
    }
  }
  for (auto& kv : c.event_ids_in_use) {
    if (kv.second == 0) continue;
    int id = 0;
    while (!(kv.second & (1u << id))) ++id;
    c.site = c.event_id_sites[{kv.first, id}];
    rt::Fail("EVENT_ID_LEAK",
             "AllocEventID<%s>() returned id %d, which was never released with ReleaseEventID before the kernel "
             "ended (AllocEventID and ReleaseEventID must be paired; an id allocated per loop iteration and not "
             "released exhausts the %d ids)",
             rt::EvName(kv.first).c_str(), id, c.L->caps.event_ids);
  }
  if (c.pipe != nullptr) {
    // A TPipe still alive at the end means the kernel kept it outside its own scope.
    rt::Fail("PIPE_STATE", "the kernel returned while its TPipe is still alive (TPipe must be a local object)");
  }
}

}  // namespace ascendc_sim
