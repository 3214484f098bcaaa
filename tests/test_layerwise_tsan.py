"""The layer-wise transfer worker (cpu_kernel/layerwise.cpp) under ThreadSanitizer, as tests/test_thread_pool.py does
for the pool: a C++ harness compiled with -fsanitize=thread against the worker, the pool and the two transfer kernels
(with the NZ and row copies they call) runs token and block transfers in both directions, layers submitted in a
shuffled order by one thread and waited for in another order by a second thread, or handed over by a third thread
playing MindSpore's pipeline (MskvLayerwiseSubmit through the worker registry, and MskvLayerwiseWait blocking that
thread for every other layer), with and without the pool's helpers (aiv_num 0 / 1), and drops workers with layers in
flight; every result is checked against a direct copy. "racy" reads the buffer of a layer without waiting for it:
TSAN must report that, so the clean runs' silence means something."""
import os
import shutil
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

_MAIN = r"""
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <memory>
#include <mutex>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>
#include "layerwise.h"

using mskv::LayerwiseLaunch;
using mskv::LayerwiseWorker;
static const int L = 5, NB = 8, BS = 16, H = 2, D = 32, T = 37, ROW = H * D;  // float16 elements as uint16_t

static std::atomic<int> bad{0};
static volatile unsigned sink = 0;

LayerwiseLaunch TokenLaunch(uint16_t* buf, int64_t* slots, std::vector<std::vector<uint16_t>>& caches, bool d2h,
                            int aiv) {
  LayerwiseLaunch a;
  a.op_type = "MskvMultiLayerKvTransfer";
  a.params = {buf, slots};
  a.shapes = {{2, L, T, ROW}, {T}};
  a.dtypes = {"float16", "int64"};
  for (auto& c : caches) {
    a.params.push_back(c.data());
    a.shapes.push_back({NB, BS, H, D});
    a.dtypes.push_back("float16");
  }
  a.attrs.ints = {{"kv_format", 2}, {"direction", d2h ? 2 : 1}, {"cache_layout", 0}, {"num_layers", L},
                  {"aiv_num", aiv}};
  a.attrs.bools = {{"mskv_strict", true}};
  a.attrs.int_lists = {{"dyn_input_sizes", {-1, -1, 2 * L}}};
  a.num_layers = L;
  return a;
}

LayerwiseLaunch BlockLaunch(int64_t* ids, int n, std::vector<std::vector<uint16_t>>& host,
                            std::vector<std::vector<uint16_t>>& caches, bool d2h, int aiv) {
  LayerwiseLaunch a;
  static uint16_t empty_staging = 0;
  a.op_type = "MskvMultiLayerBlockTransfer";
  a.params = {ids, &empty_staging};
  a.shapes = {{n}, {0}};
  a.dtypes = {"int64", "float16"};
  for (auto& h : host) {
    a.params.push_back(h.data());
    a.shapes.push_back({n, BS, L, H, D});
    a.dtypes.push_back("float16");
  }
  for (auto& c : caches) {
    a.params.push_back(c.data());
    a.shapes.push_back({NB, H, BS, D});  // BNSD
    a.dtypes.push_back("float16");
  }
  a.attrs.ints = {{"kv_format", 2}, {"direction", d2h ? 2 : 1}, {"cache_layout", 1}, {"num_layers", L},
                  {"aiv_num", aiv}};
  a.attrs.bools = {{"mskv_strict", true}};
  a.attrs.int_lists = {{"dyn_input_sizes", {-1, -1, 2, 2 * L}}};
  a.num_layers = L;
  return a;
}

// The attributes of a pipeline signal (MskvLayerwiseSubmit): mskv_worker, mskv_layer.
class SignalExtra : public mindspore::AotExtra {
 public:
  SignalExtra(int64_t w, int64_t l) : w_(w), l_(l) {}
  bool HasAttr(std::string n) override { return n == "mskv_worker" || n == "mskv_layer"; }
  bool GetAttrBool(std::string) override { return false; }
  int64_t GetAttrInt(std::string n) override { return n == "mskv_worker" ? w_ : l_; }
  float GetAttrFloat(std::string) override { return 0; }
  std::string GetAttrStr(std::string) override { return ""; }
  std::vector<int64_t> GetAttrIntVec(std::string) override { return {}; }
  std::vector<float> GetAttrFloatVec(std::string) override { return {}; }

 private:
  int64_t w_, l_;
};

// Submit every layer in a shuffled order from this thread while a second thread waits for them in another order.
// signal: the layers are marked awaiting (Expect) here and handed over by a third thread playing MindSpore's
// pipeline (MskvLayerwiseSubmit through the registry). drop: no waits at all, the worker is destroyed with the
// layers in flight (the destructor waits). racy: this thread reads `watch` (written by the last submitted layer)
// without waiting.
void Run(LayerwiseLaunch launch, std::mt19937& rng, bool drop, bool racy, const uint16_t* watch, size_t watch_n,
         bool signal = false) {
  std::vector<int> order(L), wait_order(L);
  for (int l = 0; l < L; ++l) order[l] = wait_order[l] = l;
  std::shuffle(order.begin(), order.end(), rng);
  std::shuffle(wait_order.begin(), wait_order.end(), rng);
  if (signal) {
    auto w = std::make_shared<LayerwiseWorker>(std::move(launch));
    const int64_t id = mskv::RegisterLayerwiseWorker(w);
    std::mutex mu;
    std::vector<int> pipe;
    std::atomic<int> handed{0};
    std::thread pipeline([&] {
      for (int done = 0; done < L;) {
        int l = -1;
        {
          std::lock_guard<std::mutex> lk(mu);
          if (!pipe.empty()) l = pipe.front(), pipe.erase(pipe.begin());
        }
        if (l < 0) { std::this_thread::yield(); continue; }
        SignalExtra ex(id, l);
        if (MskvLayerwiseSubmit(0, nullptr, nullptr, nullptr, nullptr, nullptr, &ex) != 0) bad++;
        if (l % 2 == 0) {  // a wait queued in the pipeline behind the submission: blocks this thread, as a stream
          if (MskvLayerwiseWait(0, nullptr, nullptr, nullptr, nullptr, nullptr, &ex) != 0) bad++;
          if (w->StateOf(l) != LayerwiseWorker::kDone) bad++;
        }
        ++done, ++handed;
      }
    });
    std::thread waiter([&] {
      for (int l : wait_order) {
        while (w->StateOf(l) == LayerwiseWorker::kIdle) std::this_thread::yield();  // awaiting is fine
        if (!w->Wait(l).empty()) bad++;
      }
    });
    for (int l : order) {
      w->Expect(l);
      std::lock_guard<std::mutex> lk(mu);
      pipe.push_back(l);
    }
    pipeline.join();
    waiter.join();
    if (!w->WaitAll().empty()) bad++;
    w->Close();
    return;
  }
  LayerwiseWorker w(std::move(launch));
  if (drop) {
    for (int l : order) w.Submit(l);
    return;
  }
  std::vector<std::atomic<bool>> issued(L);
  for (auto& f : issued) f = false;
  std::thread waiter([&] {
    for (int l : wait_order) {
      while (!issued[l].load()) std::this_thread::yield();  // Wait() wants an issued layer
      if (!w.Wait(l).empty()) bad++;
    }
  });
  for (int l : order) {
    w.Submit(l);
    issued[l] = true;
  }
  if (racy)
    for (size_t i = 0; i < watch_n; ++i) sink += watch[i];
  waiter.join();
  if (!w.WaitAll().empty()) bad++;
}

int main(int argc, char** argv) {
  const int iters = std::atoi(argv[1]);
  const std::string mode = argc > 2 ? argv[2] : "clean";
  std::mt19937 rng(7);
  for (int it = 0; it < iters; ++it) {
    const int aiv = it % 2;  // 0: the kernels' pool helpers join (MS_KVCACHE_PARALLEL_BYTES small), 1: inline
    const bool drop = mode == "drop" || (mode == "clean" && it % 3 == 2);
    const bool racy = mode == "racy";
    std::vector<std::vector<uint16_t>> caches(2 * L, std::vector<uint16_t>(NB * BS * ROW));
    for (auto& c : caches)
      for (auto& x : c) x = static_cast<uint16_t>(rng());
    std::vector<int64_t> slots(T);
    std::vector<int64_t> all(NB * BS);
    for (int i = 0; i < NB * BS; ++i) all[i] = i;
    std::shuffle(all.begin(), all.end(), rng);
    for (int t = 0; t < T; ++t) slots[t] = (t % 9 == 4) ? -1 : all[t];
    // token d2h, then h2d of that buffer into zeroed caches
    std::vector<uint16_t> buf(2 * L * T * ROW, 0xFFFF);
    Run(TokenLaunch(buf.data(), slots.data(), caches, true, aiv), rng, drop, racy, buf.data() + (L - 1) * T * ROW,
        T * ROW);
    std::vector<std::vector<uint16_t>> back(2 * L, std::vector<uint16_t>(NB * BS * ROW, 0));
    Run(TokenLaunch(buf.data(), slots.data(), back, false, aiv), rng, drop, false, nullptr, 0, /*signal=*/it % 2 == 0);
    for (int c = 0; c < 2 * L; ++c)
      for (int t = 0; t < T; ++t) {
        const int p = c % 2, l = c / 2;
        const uint16_t* row = buf.data() + ((p * L + l) * T + t) * ROW;
        if (slots[t] < 0) {
          for (int e = 0; e < ROW; ++e) bad += row[e] != 0;
          continue;
        }
        bad += std::memcmp(row, caches[c].data() + slots[t] * ROW, ROW * 2) != 0;
        bad += std::memcmp(back[c].data() + slots[t] * ROW, row, ROW * 2) != 0;
      }
    // block d2h of 3 blocks (BNSD caches: the same bytes read as [NB, H, BS, D]), then h2d into zeroed caches
    std::vector<int64_t> ids = {5, 0, 3};
    std::vector<std::vector<uint16_t>> host(2, std::vector<uint16_t>(3 * BS * L * ROW, 0xFFFF));
    Run(BlockLaunch(ids.data(), 3, host, caches, true, aiv), rng, drop, false, nullptr, 0);
    std::vector<std::vector<uint16_t>> back2(2 * L, std::vector<uint16_t>(NB * BS * ROW, 0));
    Run(BlockLaunch(ids.data(), 3, host, back2, false, aiv), rng, drop, false, nullptr, 0, /*signal=*/it % 2 == 1);
    for (int c = 0; c < 2 * L; ++c)
      for (int64_t b : ids)
        bad += std::memcmp(back2[c].data() + b * BS * ROW, caches[c].data() + b * BS * ROW, BS * ROW * 2) != 0;
  }
  std::printf("bad=%d\n", bad.load());
  return bad.load() != 0 ? 3 : 0;
}
"""


@pytest.fixture(scope="module")
def harness(tmp_path_factory):
    cxx = shutil.which("g++") or shutil.which("c++")
    if cxx is None:
        pytest.skip("no C++ compiler on PATH: the ThreadSanitizer harness needs g++")
    d = tmp_path_factory.mktemp("lw_tsan")
    src = d / "main.cpp"
    src.write_text(_MAIN)
    exe = d / "layerwise_tsan"
    k = f"{ROOT}/cpu_kernel"
    p = subprocess.run([cxx, "-std=c++17", "-O1", "-g", "-fsanitize=thread", f"-I{k}", f"-I{ROOT}/op_host", str(src),
                        f"{k}/layerwise.cpp", f"{k}/aot_abi.cpp", f"{k}/multi_layer_kv_transfer.cpp",
                        f"{k}/multi_layer_block_transfer.cpp", f"{k}/nz_copy.cpp", f"{k}/kv_copy.cpp", "-o", str(exe),
                        "-lpthread"],
                       capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        if "tsan" in p.stderr.lower() or "sanitize" in p.stderr.lower():
            pytest.skip(f"this compiler cannot build with -fsanitize=thread (libtsan missing?): {p.stderr[-300:]}")
        raise AssertionError(p.stderr[-3000:])
    return exe


def _run(exe, *args):
    env = dict(os.environ, MS_KVCACHE_NUM_THREADS="3", MS_KVCACHE_PARALLEL_BYTES="1024", MS_KVCACHE_SPIN_US="50",
               TSAN_OPTIONS="halt_on_error=0 exitcode=66")
    p = subprocess.run([str(exe), *map(str, args)], env=env, capture_output=True, text=True, timeout=600)
    if "FATAL: ThreadSanitizer" in p.stderr:
        pytest.skip(f"ThreadSanitizer cannot run on this machine: {p.stderr.strip().splitlines()[0][:200]}")
    return p


@pytest.mark.parametrize("mode", ["clean", "drop"])
def test_layerwise_worker_has_no_data_race_under_thread_sanitizer(harness, mode):
    p = _run(harness, 12, mode)
    assert "ThreadSanitizer" not in p.stderr, p.stderr[-4000:]
    assert p.returncode == 0, (p.returncode, p.stdout, p.stderr[-2000:])
    assert "bad=0" in p.stdout


def test_thread_sanitizer_sees_a_read_of_a_layer_not_waited_for(harness):
    p = _run(harness, 2, "racy")
    assert "WARNING: ThreadSanitizer: data race" in p.stderr, (p.returncode, p.stderr[-2000:])
