// The CUDA backend's decode-step graphs: record, replay, drop (cuda_backend_impl.h has the class).
#include <nvtx3/nvToolsExt.h>

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>

#include "compute/cuda/cuda_backend_impl.h"
#include "compute/cuda/cuda_launch.h"
#include "core/error.h"

namespace ds4::compute {

using cuda::check;

// ---- decode-step graphs -----------------------------------------------------------------------

std::string CudaBackend::step_stats() const {
  std::string r = fmt::format("step graphs: {} recorded, {} replays{}", recorded_, replays_, graphs_ ? "" : " (off)");
  if (q8_split_) r += fmt::format("; Q8_0 split copies: {} matrices, {:.2f} GB", q8_splits_.size(), q8_split_bytes_ / 1e9);
  return r;
}

void CudaBackend::launch_step(StepGraph& g, int64_t pos, int32_t token, std::span<const int32_t> extra) {
  if (pos < 0 || pos > 0x7fffffff) fail("CUDA step graph: position {} outside the device counter", pos);
  if (extra.size() != g.n_extra)
    fail("CUDA step graph: {} extra step inputs for a step recorded with {}", extra.size(), g.n_extra);
  check(cudaEventSynchronize(step_staged_), "step inputs staging");  // the last step's copy has read them
  h_step_[0] = static_cast<int32_t>(pos);
  h_step_[1] = token;
  std::copy(extra.begin(), extra.end(), h_step_ + 2);
  check(cudaMemcpyAsync(d_step_, h_step_, (2 + extra.size()) * sizeof(int32_t), cudaMemcpyHostToDevice, stream_),
        "step inputs");
  check(cudaEventRecord(step_staged_, stream_), "cudaEventRecord(step inputs)");
  if (prof_replayed_) prof_resolve_after_sync();
  if (prof_graph_) {
    if (!step_ev_[0]) {
      check(cudaEventCreate(&step_ev_[0]), "cudaEventCreate(profile)");
      check(cudaEventCreate(&step_ev_[1]), "cudaEventCreate(profile)");
    }
    check(cudaEventRecord(step_ev_[0], stream_), "cudaEventRecord(profile)");
  }
  // A named range around each replay lets a profiler select decode steps (ncu --nvtx-include ds4_step/);
  // without a tool attached the calls do nothing.
  nvtxRangePushA("ds4_step");
  const cudaError_t launched = cudaGraphLaunch(g.exec, stream_);
  nvtxRangePop();
  check(launched, "cudaGraphLaunch(decode step)");
  g.last_use = ++use_clock_;
  if (prof_graph_) {
    check(cudaEventRecord(step_ev_[1], stream_), "cudaEventRecord(profile)");
    prof_replayed_ = &g;
  }
}

void CudaBackend::prof_resolve_after_sync() noexcept {
  if (cudaStreamSynchronize(stream_) != cudaSuccess) cudaGetLastError();
  prof_resolve();
}

void CudaBackend::drop_step_graph(StepGraph& g) noexcept {
  if (prof_replayed_ == &g) prof_resolve_after_sync();
  for (auto& p : g.prof) cudaEventDestroy(p.a), cudaEventDestroy(p.b);
  g.prof.clear();
  if (g.exec) cudaGraphExecDestroy(g.exec);
  g.exec = nullptr;
  cuda::block_cache().free_arena(g.arena);
}

const float* CudaBackend::step_replay(const StepKey& key, int64_t pos, int32_t token, std::span<const int32_t> extra,
                                      bool* record) {
  qact_forget();
  *record = false;
  if (!graphs_ || rec_) return nullptr;
  for (auto& g : graphs_by_key_)
    if (g->key == key) {
      launch_step(*g, pos, token, extra);
      ++replays_;
      return g->logits;
    }
  if (std::find(refused_.begin(), refused_.end(), key) != refused_.end()) return nullptr;  // its recording failed
  // Record a key's second step: its first runs op by op (and finishes any lazy set-up).
  if (std::find(seen_.begin(), seen_.end(), key) != seen_.end()) {
    *record = true;
  } else {
    if (seen_.size() >= 64) seen_.erase(seen_.begin());
    seen_.push_back(key);
  }
  return nullptr;
}

const int32_t* CudaBackend::step_record_begin(const StepKey& key, int64_t pos, int32_t token,
                                              std::span<const int32_t> extra) {
  qact_forget();
  if (rec_) fail("CUDA step graph: a recording is already open");
  if (pos < 0 || pos > 0x7fffffff) fail("CUDA step graph: position {} outside the device counter", pos);
  if (extra.size() > kMaxStepExtra) fail("CUDA step graph: {} extra step inputs (at most {})", extra.size(), kMaxStepExtra);
  rec_graph_ = StepGraph{};
  rec_graph_.key = key;
  rec_graph_.n_extra = extra.size();
  rec_extra_.assign(extra.begin(), extra.end());
  join();
  cuda::block_cache().open_arena(&rec_graph_.arena, stream_, side_);
  cudaError_t e = cudaStreamBeginCapture(stream_, cudaStreamCaptureModeRelaxed);
  if (e != cudaSuccess) {
    cuda::block_cache().close_arena();
    cuda::block_cache().free_arena(rec_graph_.arena);
    check(e, "cudaStreamBeginCapture(decode step)");
  }
  rec_ = true;
  rec_pos_ = pos;
  rec_token_ = token;
  return d_step_ + 1;
}

const float* CudaBackend::step_record_end(const float* logits) {
  qact_forget();
  if (!rec_) fail("CUDA step graph: no recording is open");
  join();  // the captured side stream must end joined to the home stream
  cudaGraph_t graph = nullptr;
  rec_ = false;
  cuda::block_cache().close_arena();
  cudaError_t e = cudaStreamEndCapture(stream_, &graph);
  if (e == cudaSuccess) e = cudaGraphInstantiate(&rec_graph_.exec, graph, 0);
  if (graph) cudaGraphDestroy(graph);
  if (e != cudaSuccess) {
    cudaGetLastError();
    cuda::block_cache().free_arena(rec_graph_.arena);
    for (auto& p : rec_graph_.prof) cudaEventDestroy(p.a), cudaEventDestroy(p.b);
    refused_.push_back(rec_graph_.key);
    rec_graph_ = StepGraph{};
    fail("CUDA step graph: recording the decode step failed: {}", cudaGetErrorString(e));
  }
  rec_graph_.logits = logits;
  if (graphs_by_key_.size() >= kMaxStepGraphs) {
    auto old = std::min_element(graphs_by_key_.begin(), graphs_by_key_.end(),
                                [](const auto& a, const auto& b) { return a->last_use < b->last_use; });
    check(cudaStreamSynchronize(stream_), "step graph eviction");  // its last replay is done
    drop_step_graph(**old);
    graphs_by_key_.erase(old);
  }
  graphs_by_key_.push_back(std::make_unique<StepGraph>(std::move(rec_graph_)));
  rec_graph_ = StepGraph{};
  ++recorded_;
  StepGraph& g = *graphs_by_key_.back();
  launch_step(g, rec_pos_, rec_token_, rec_extra_);
  return g.logits;
}

void CudaBackend::step_record_abort() noexcept {
  qact_forget();
  if (!rec_) return;
  rec_ = false;
  try {
    refused_.push_back(rec_graph_.key);
  } catch (...) {
  }
  std::fprintf(stderr, "cuda: recording a decode step failed; later steps of its shape run op by op\n");
  // A branch left open (an op failed inside it) is joined, so that the capture can end.
  if (in_branch_) cudaEventRecord(join_ev_, side_);
  if (in_branch_ || branch_pending_) cudaStreamWaitEvent(home_, join_ev_, 0);
  stream_ = home_;
  in_branch_ = branch_pending_ = false;
  cuda::block_cache().close_arena();
  cudaGraph_t graph = nullptr;
  if (cudaStreamEndCapture(stream_, &graph) == cudaSuccess && graph) cudaGraphDestroy(graph);
  cudaGetLastError();
  cuda::block_cache().free_arena(rec_graph_.arena);
  for (auto& p : rec_graph_.prof) cudaEventDestroy(p.a), cudaEventDestroy(p.b);
  rec_graph_ = StepGraph{};
}

}  // namespace ds4::compute
