// The layer-wise transfer worker of the cpu backend (ms_kvcache.LayerwiseTransfer, docs/ops-transfer.md,
// "Layer-wise transfer"): one thread per transfer that runs a multi-layer transfer's AOT entry one layer
// per call (attribute mskv_layer, ml::ReadLayerRange), in the order the layers were submitted, while the
// submitting thread (Python's, the forward pass) goes on. The worker never touches Python: the pybind11
// binding (ms_kvcache/csrc/cpu_module.cpp) releases the GIL while it waits.
//
// Per layer: not issued -> [awaiting ->] queued -> running -> done | failed | cancelled. "Awaiting": issued behind
// the forward pass's PyNative ops; MindSpore's pipeline runs the AOT entry MskvLayerwiseSubmit (below) after them,
// which queues the layer, as a stream runs an event wait before the work behind it. A layer fails when its call of
// the kernel fails (the kernel checks its arguments before it writes, so a failed layer wrote nothing;
// strict mode re-checks the index values it reads); every layer queued or submitted after a failure is
// cancelled (not run). Close() (also the destructor) waits for the queued and running layers, then stops
// the thread: memory a layer copies is never released under it.
//
// The thread starts with the worker (not at the first submission): it is asleep, ready, when the first layer arrives
// (creating a thread then cost the first layer ~1-2 ms on a busy 2-core machine), and it inherits the CPU affinity
// of the thread that constructs the worker (Python's), not that of whichever thread submits first: that may be one
// of MindSpore's pipeline threads (MskvLayerwiseSubmit), which mindspore.runtime.set_cpu_affinity binds to
// MindSpore's own cores. It is named "mskv_layerwise" (top -H, perf).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "aot_abi.h"

namespace mskv {

using AotEntry = int (*)(int, void**, int*, int64_t**, const char**, void*, void*);

// The AOT entry of a multi-layer transfer by its OpType (MskvMultiLayerKvTransfer, MskvMultiLayerKvTransferQuant,
// MskvMultiLayerBlockTransfer, MskvMultiLayerBlockTransferQuant); nullptr for any other name.
AotEntry LayerwiseEntry(const std::string& op_type);

// The attribute values a launch hands the kernel (what MindSpore's AotExtra would give it).
struct AttrSet {
  std::map<std::string, int64_t> ints;
  std::map<std::string, bool> bools;
  std::map<std::string, std::string> strs;
  std::map<std::string, std::vector<int64_t>> int_lists;
};

// One transfer, as the worker calls it: the op's inputs in AOT order (lists flattened), their shapes and
// MindSpore dtype names; the worker appends the int32 [1] status output and sets mskv_layer per call.
struct LayerwiseLaunch {
  std::string op_type;
  std::vector<void*> params;
  std::vector<std::vector<int64_t>> shapes;
  std::vector<std::string> dtypes;
  AttrSet attrs;
  int64_t num_layers = 0;
};

class LayerwiseWorker {
 public:
  enum State : int { kIdle = 0, kQueued = 1, kRunning = 2, kDone = 3, kFailed = 4, kCancelled = 5, kAwaiting = 6 };

  // Throws std::invalid_argument for an unknown op, mismatched lists or num_layers < 1.
  explicit LayerwiseWorker(LayerwiseLaunch launch);
  ~LayerwiseWorker();
  LayerwiseWorker(const LayerwiseWorker&) = delete;
  LayerwiseWorker& operator=(const LayerwiseWorker&) = delete;

  // Queue `layer`. std::out_of_range for a layer outside [0, num_layers);
  // std::logic_error if it was issued in this round already or the worker is closed. After a failure the
  // layer is cancelled at once.
  void Submit(int64_t layer);
  // Mark `layer` issued behind MindSpore's pipeline (awaiting); the pipeline's MskvLayerwiseSubmit queues it. Same
  // errors as Submit.
  void Expect(int64_t layer);
  // The pipeline dropped the awaiting layers (an earlier op failed): they fail with `why`.
  void DropAwaiting(const std::string& why);
  // Block until `layer` finished; "" if it was moved, else the failure (its own, or "not run" after an
  // earlier layer failed). std::logic_error if it was not issued in this round. An awaiting layer is waited for
  // too: the caller makes sure its pipeline signal runs (or calls DropAwaiting).
  std::string Wait(int64_t layer);
  // Block until every queued or running layer finished (awaiting ones: as for Wait); "" or the first failure.
  std::string WaitAll();
  // Whether every issued layer finished (non-blocking).
  bool AllDone();
  int StateOf(int64_t layer);
  // Layer of the first failure, or -1.
  int64_t FailedLayer();
  // Start a new round (every layer back to not issued). std::logic_error while a layer is queued or running,
  // or after a failure.
  void Reset();
  // Wait for the queued and running layers, then stop the thread. Idempotent.
  void Close();
  // Tests: the call of `layer` fails with `message` instead of running the kernel.
  void FailLayerForTest(int64_t layer, const std::string& message);
  int64_t num_layers() const { return launch_.num_layers; }
  int64_t id() const { return id_; }
  void set_id(int64_t id) { id_ = id; }

 private:
  void Loop();
  std::string RunLayer(int64_t layer);

  LayerwiseLaunch launch_;
  AotEntry entry_ = nullptr;
  std::vector<int> ndims_;
  std::vector<int64_t*> shape_ptrs_;
  std::vector<const char*> dtype_ptrs_;
  std::vector<int32_t> status_;
  std::map<int64_t, std::string> inject_;  // FailLayerForTest (guarded by mu_)

  std::mutex mu_;
  std::condition_variable work_cv_, done_cv_;
  std::deque<int64_t> queue_;
  std::vector<int> state_;
  std::vector<std::string> error_;
  int64_t failed_ = -1;
  bool closing_ = false;
  std::thread thread_;  // started by the constructor, joined by Close()
  int64_t id_ = 0;
};

// Workers the pipeline's MskvLayerwiseSubmit may reach, by id (weak references: a dropped worker is not kept alive,
// and a signal for it does nothing).
int64_t RegisterLayerwiseWorker(const std::shared_ptr<LayerwiseWorker>& w);
void UnregisterLayerwiseWorker(int64_t id);

}  // namespace mskv

// AOT entry (MindSpore's CPU AOT ABI) run in the PyNative pipeline after the ops launched before it: queues layer
// mskv_layer (attribute) on worker mskv_worker (attribute, a RegisterLayerwiseWorker id). Its tensor inputs are the
// layer's tensors (only read for ordering). A worker no longer registered: nothing to do.
extern "C" __attribute__((visibility("default"))) int MskvLayerwiseSubmit(int nparam, void** params, int* ndims,
                                                                        int64_t** shapes, const char** dtypes,
                                                                        void* stream, void* extra);

// AOT entry run in the PyNative pipeline after the ops launched before it: blocks the pipeline (not the host) until
// layer mskv_layer of worker mskv_worker (attributes, as above) finished, as a stream waits for an event; the ops
// queued behind it run after the layer moved. A layer that failed (or was not run after a failure) fails the call
// with its message (MindSpore raises it at the next synchronisation and drops the ops queued behind). A worker no
// longer registered (closed: its layers finished): nothing to wait for.
extern "C" __attribute__((visibility("default"))) int MskvLayerwiseWait(int nparam, void** params, int* ndims,
                                                                      int64_t** shapes, const char** dtypes,
                                                                      void* stream, void* extra);
