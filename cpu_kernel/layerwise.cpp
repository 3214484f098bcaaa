// The layer-wise transfer worker (layerwise.h).
#include "layerwise.h"

#include <pthread.h>

#include <stdexcept>
#include <utility>

extern "C" {
int MskvMultiLayerKvTransfer(int, void**, int*, int64_t**, const char**, void*, void*);
int MskvMultiLayerKvTransferQuant(int, void**, int*, int64_t**, const char**, void*, void*);
int MskvMultiLayerBlockTransfer(int, void**, int*, int64_t**, const char**, void*, void*);
int MskvMultiLayerBlockTransferQuant(int, void**, int*, int64_t**, const char**, void*, void*);
}

namespace mskv {

AotEntry LayerwiseEntry(const std::string& op_type) {
  if (op_type == "MskvMultiLayerKvTransfer") return &MskvMultiLayerKvTransfer;
  if (op_type == "MskvMultiLayerKvTransferQuant") return &MskvMultiLayerKvTransferQuant;
  if (op_type == "MskvMultiLayerBlockTransfer") return &MskvMultiLayerBlockTransfer;
  if (op_type == "MskvMultiLayerBlockTransferQuant") return &MskvMultiLayerBlockTransferQuant;
  return nullptr;
}

namespace {

// mindspore::AotExtra over an AttrSet, plus the layer of the current call (mskv_layer).
class SetExtra : public mindspore::AotExtra {
 public:
  SetExtra(const AttrSet* attrs, int64_t layer) : a_(attrs), layer_(layer) {}
  bool HasAttr(std::string name) override {
    return name == "mskv_layer" || a_->ints.count(name) || a_->bools.count(name) || a_->strs.count(name) ||
           a_->int_lists.count(name);
  }
  bool GetAttrBool(std::string name) override { return Find(a_->bools, name); }
  int64_t GetAttrInt(std::string name) override { return name == "mskv_layer" ? layer_ : Find(a_->ints, name); }
  float GetAttrFloat(std::string name) override { throw std::runtime_error("no float attribute " + name); }
  std::string GetAttrStr(std::string name) override { return Find(a_->strs, name); }
  std::vector<int64_t> GetAttrIntVec(std::string name) override { return Find(a_->int_lists, name); }
  std::vector<float> GetAttrFloatVec(std::string name) override {
    throw std::runtime_error("no float list attribute " + name);
  }

 private:
  template <typename M>
  static typename M::mapped_type Find(const M& m, const std::string& name) {
    const auto it = m.find(name);
    if (it == m.end()) throw std::runtime_error("no attribute " + name + " of that type");
    return it->second;
  }
  const AttrSet* a_;
  int64_t layer_;
};

std::string LayerName(int64_t layer) { return "layer " + std::to_string(layer); }

}  // namespace

LayerwiseWorker::LayerwiseWorker(LayerwiseLaunch launch) : launch_(std::move(launch)) {
  entry_ = LayerwiseEntry(launch_.op_type);
  if (entry_ == nullptr) throw std::invalid_argument("no layer-wise entry for op " + launch_.op_type);
  if (launch_.num_layers < 1) throw std::invalid_argument("num_layers must be >= 1");
  if (launch_.shapes.size() != launch_.params.size() || launch_.dtypes.size() != launch_.params.size())
    throw std::invalid_argument("params, shapes and dtypes must have one entry per input");
  status_.assign(1, 0);
  launch_.params.push_back(status_.data());
  launch_.shapes.push_back({1});
  launch_.dtypes.push_back("int32");
  for (size_t i = 0; i < launch_.params.size(); ++i) {
    ndims_.push_back(static_cast<int>(launch_.shapes[i].size()));
    shape_ptrs_.push_back(launch_.shapes[i].data());
    dtype_ptrs_.push_back(launch_.dtypes[i].c_str());
  }
  state_.assign(static_cast<size_t>(launch_.num_layers), kIdle);
  error_.assign(static_cast<size_t>(launch_.num_layers), std::string());
  thread_ = std::thread([this] { Loop(); });  // last: every member it reads is set (layerwise.h: why now)
}

LayerwiseWorker::~LayerwiseWorker() { Close(); }

void LayerwiseWorker::Expect(int64_t layer) {
  std::lock_guard<std::mutex> lk(mu_);
  if (layer < 0 || layer >= launch_.num_layers)
    throw std::out_of_range("layer " + std::to_string(layer) + " is not in [0, " +
                            std::to_string(launch_.num_layers) + ")");
  if (closing_) throw std::logic_error("the transfer is closed");
  int& st = state_[static_cast<size_t>(layer)];
  if (st != kIdle) throw std::logic_error(LayerName(layer) + " was issued already");
  if (failed_ >= 0) {
    st = kCancelled;
    error_[static_cast<size_t>(layer)] = LayerName(layer) + ": not run: " + LayerName(failed_) + " failed first";
    done_cv_.notify_all();
    return;
  }
  st = kAwaiting;
}

void LayerwiseWorker::DropAwaiting(const std::string& why) {
  std::lock_guard<std::mutex> lk(mu_);
  for (size_t l = 0; l < state_.size(); ++l) {
    if (state_[l] != kAwaiting) continue;
    state_[l] = kFailed;
    error_[l] = LayerName(static_cast<int64_t>(l)) + ": " + why;
    if (failed_ < 0) failed_ = static_cast<int64_t>(l);
  }
  done_cv_.notify_all();
}

void LayerwiseWorker::Submit(int64_t layer) {
  std::lock_guard<std::mutex> lk(mu_);
  if (layer < 0 || layer >= launch_.num_layers)
    throw std::out_of_range("layer " + std::to_string(layer) + " is not in [0, " +
                            std::to_string(launch_.num_layers) + ")");
  if (closing_) throw std::logic_error("the transfer is closed");
  int& st = state_[static_cast<size_t>(layer)];
  if (st == kCancelled) return;  // awaiting when an earlier layer failed: already reported as not run
  if (st != kIdle && st != kAwaiting) throw std::logic_error(LayerName(layer) + " was issued already");
  if (failed_ >= 0) {
    st = kCancelled;
    error_[static_cast<size_t>(layer)] = LayerName(layer) + ": not run: " + LayerName(failed_) + " failed first";
    done_cv_.notify_all();
    return;
  }
  st = kQueued;
  queue_.push_back(layer);
  work_cv_.notify_one();
}

std::string LayerwiseWorker::Wait(int64_t layer) {
  std::unique_lock<std::mutex> lk(mu_);
  if (layer < 0 || layer >= launch_.num_layers)
    throw std::out_of_range("layer " + std::to_string(layer) + " is not in [0, " +
                            std::to_string(launch_.num_layers) + ")");
  const size_t l = static_cast<size_t>(layer);
  if (state_[l] == kIdle) throw std::logic_error(LayerName(layer) + " was not issued");
  done_cv_.wait(lk, [&] { return state_[l] >= kDone && state_[l] != kAwaiting; });
  return state_[l] == kDone ? std::string() : error_[l];
}

std::string LayerwiseWorker::WaitAll() {
  std::unique_lock<std::mutex> lk(mu_);
  done_cv_.wait(lk, [&] {
    for (int s : state_)
      if (s == kQueued || s == kRunning || s == kAwaiting) return false;
    return true;
  });
  return failed_ >= 0 ? error_[static_cast<size_t>(failed_)] : std::string();
}

bool LayerwiseWorker::AllDone() {
  std::lock_guard<std::mutex> lk(mu_);
  for (int s : state_)
    if (s == kQueued || s == kRunning || s == kAwaiting) return false;
  return true;
}

int LayerwiseWorker::StateOf(int64_t layer) {
  std::lock_guard<std::mutex> lk(mu_);
  if (layer < 0 || layer >= launch_.num_layers) throw std::out_of_range("layer out of range");
  return state_[static_cast<size_t>(layer)];
}

int64_t LayerwiseWorker::FailedLayer() {
  std::lock_guard<std::mutex> lk(mu_);
  return failed_;
}

void LayerwiseWorker::Reset() {
  std::lock_guard<std::mutex> lk(mu_);
  if (failed_ >= 0) throw std::logic_error(LayerName(failed_) + " failed: start a new transfer");
  for (int s : state_)
    if (s == kQueued || s == kRunning || s == kAwaiting) throw std::logic_error("layers are still in flight");
  for (auto& s : state_) s = kIdle;
  for (auto& e : error_) e.clear();
}

void LayerwiseWorker::Close() {
  if (id_ != 0) UnregisterLayerwiseWorker(id_);  // a pipeline signal arriving later finds nothing to do
  {
    std::lock_guard<std::mutex> lk(mu_);
    closing_ = true;
  }
  work_cv_.notify_all();
  if (thread_.joinable() && thread_.get_id() != std::this_thread::get_id()) thread_.join();
}

void LayerwiseWorker::FailLayerForTest(int64_t layer, const std::string& message) {
  std::lock_guard<std::mutex> lk(mu_);
  inject_[layer] = message;
}

void LayerwiseWorker::Loop() {
  pthread_setname_np(pthread_self(), "mskv_layerwise");  // (at most 15 characters)
  std::unique_lock<std::mutex> lk(mu_);
  for (;;) {
    work_cv_.wait(lk, [&] { return !queue_.empty() || closing_; });
    if (queue_.empty()) return;  // closing, and every queued layer ran
    const int64_t layer = queue_.front();
    queue_.pop_front();
    const size_t l = static_cast<size_t>(layer);
    if (failed_ >= 0) {
      state_[l] = kCancelled;
      error_[l] = LayerName(layer) + ": not run: " + LayerName(failed_) + " failed first";
      done_cv_.notify_all();
      continue;
    }
    state_[l] = kRunning;
    const auto inj = inject_.find(layer);
    std::string err = inj == inject_.end() ? std::string() : inj->second;
    lk.unlock();
    if (err.empty()) err = RunLayer(layer);
    lk.lock();
    if (err.empty()) {
      state_[l] = kDone;
    } else {
      state_[l] = kFailed;
      error_[l] = LayerName(layer) + ": " + err;
      if (failed_ < 0) failed_ = layer;
    }
    done_cv_.notify_all();
  }
}

std::string LayerwiseWorker::RunLayer(int64_t layer) {
  SetExtra extra(&launch_.attrs, layer);
  try {
    const int rc = entry_(static_cast<int>(launch_.params.size()), launch_.params.data(), ndims_.data(),
                          shape_ptrs_.data(), dtype_ptrs_.data(), nullptr, &extra);
    if (rc != 0) return "the kernel returned " + std::to_string(rc);
  } catch (const std::exception& e) {  // MSKV_AOT_GUARD rethrows the kernel's message (FailAotCall)
    return e.what();
  }
  return std::string();
}

}  // namespace mskv

namespace mskv {
namespace {
std::mutex g_reg_mu;
std::map<int64_t, std::weak_ptr<LayerwiseWorker>> g_reg;
int64_t g_next_id = 1;
}  // namespace

int64_t RegisterLayerwiseWorker(const std::shared_ptr<LayerwiseWorker>& w) {
  std::lock_guard<std::mutex> lk(g_reg_mu);
  for (auto it = g_reg.begin(); it != g_reg.end();) it = it->second.expired() ? g_reg.erase(it) : std::next(it);
  const int64_t id = g_next_id++;
  g_reg[id] = w;
  w->set_id(id);
  return id;
}

void UnregisterLayerwiseWorker(int64_t id) {
  std::lock_guard<std::mutex> lk(g_reg_mu);
  g_reg.erase(id);
}

}  // namespace mskv

MSKV_AOT_EXPORT int MskvLayerwiseSubmit(int nparam, void** params, int* ndims, int64_t** shapes, const char** dtypes,
                                        void* /*stream*/, void* extra) {
  (void)nparam, (void)params, (void)ndims, (void)shapes, (void)dtypes;
  try {
    const mskv::AotArgs a{nparam, params, ndims, shapes, dtypes, static_cast<mindspore::AotExtra*>(extra)};
    std::shared_ptr<mskv::LayerwiseWorker> w;
    {
      std::lock_guard<std::mutex> lk(mskv::g_reg_mu);
      const auto it = mskv::g_reg.find(a.attr_int("mskv_worker", 0));
      if (it != mskv::g_reg.end()) w = it->second.lock();
    }
    if (w) w->Submit(a.attr_int("mskv_layer", -1));
    return 0;
  } catch (const std::exception& e) {
    return mskv::FailAotCall(std::string("LayerwiseTransfer: ") + e.what(), extra);
  }
}

MSKV_AOT_EXPORT int MskvLayerwiseWait(int nparam, void** params, int* ndims, int64_t** shapes, const char** dtypes,
                                      void* /*stream*/, void* extra) {
  try {
    const mskv::AotArgs a{nparam, params, ndims, shapes, dtypes, static_cast<mindspore::AotExtra*>(extra)};
    std::shared_ptr<mskv::LayerwiseWorker> w;
    {
      std::lock_guard<std::mutex> lk(mskv::g_reg_mu);
      const auto it = mskv::g_reg.find(a.attr_int("mskv_worker", 0));
      if (it != mskv::g_reg.end()) w = it->second.lock();
    }
    if (!w) return 0;
    const std::string err = w->Wait(a.attr_int("mskv_layer", -1));
    if (!err.empty()) return mskv::FailAotCall("LayerwiseTransfer: " + err, extra);
    return 0;
  } catch (const std::exception& e) {
    return mskv::FailAotCall(std::string("LayerwiseTransfer: ") + e.what(), extra);
  }
}
