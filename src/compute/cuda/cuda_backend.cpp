// The CUDA backend: compute::Backend on one CUDA stream. Backend memory comes from the
// stream-ordered allocator (cudaMallocAsync on the device's default pool, release threshold
// raised so freed blocks stay in the pool: no implicit synchronization). Weights are copied
// once by register_weights() and found again by host address in a sorted table; every op
// translates its weight pointers through it. Kernels live in cuda_ops_*.cu (cuda_ops.h) and
// in the GEMV/MoE files (gemv.h). Host C++20 (backend.h needs std::span), no device code.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <iterator>
#include <map>
#include <thread>
#include <utility>
#include <vector>

#include "compute/cuda/block_cache.h"
#include "compute/cuda/cuda_backend.h"
#include "compute/cuda/cuda_backend_impl.h"
#include "compute/cuda/cuda_dequant.h"
#include "compute/cuda/cuda_launch.h"
#include "compute/cuda/cuda_ops.h"
#include "compute/cuda/gemv.h"
#include "core/error.h"

namespace ds4::compute {

using cuda::check;

namespace {

constexpr double kGiB = 1073741824.0;

const char* err_text(int code) {
  switch (code) {
    case cuda::kErrEmbedToken: return "embed: token id outside the embedding table";
    case cuda::kErrAttnIndex: return "attention: compressed-row index outside the stored rows";
    case cuda::kErrRouteToken: return "moe_route: token id outside the hash-routing table";
    case cuda::kErrRouteExpert: return "moe_route: hash-routing table names an expert outside [0, n_expert)";
  }
  return "unknown device error";
}

// memcpy of a staging chunk on several threads: reading a mapped model file (page faults,
// tmpfs or page cache) is slower than the host-to-device copy on one thread.
void parallel_copy(uint8_t* dst, const uint8_t* src, size_t n) {
  const size_t nt = std::min<size_t>(8, std::max(1u, std::thread::hardware_concurrency()));
  if (n < (size_t{8} << 20) || nt == 1) {
    std::memcpy(dst, src, n);
    return;
  }
  const size_t per = (n / nt + 4095) / 4096 * 4096;
  std::vector<std::thread> th;
  size_t done = per;  // bytes from `done` on are copied here if a thread cannot start
  try {
    for (; done < n; done += per)
      th.emplace_back([=] { std::memcpy(dst + done, src + done, std::min(per, n - done)); });
  } catch (...) {
  }
  std::memcpy(dst, src, std::min(per, n));
  if (done < n) std::memcpy(dst + done, src + done, n - done);
  for (auto& t : th) t.join();
}


}  // namespace

CudaBackend::CudaBackend(CudaOptions opt) : opt_(opt) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    cudaGetLastError();
    fail("CUDA backend: no usable device: {}", cudaGetErrorString(e));
  }
  if (n == 0) fail("CUDA backend: no CUDA device is visible");
  if (opt.device < 0 || opt.device >= n) fail("CUDA backend: device {} requested, {} visible", opt.device, n);
  check(cudaSetDevice(opt.device), "cudaSetDevice");
  check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
  home_ = stream_;
  // Profiled (DS4_CUDA_PROFILE), one stream unless DS4_CUDA_BRANCH says otherwise: an op's event
  // pair on one stream also times the other stream's kernels running beside it (session 30: the
  // shared expert's products read 2.5x their one-stream time), so per-op shares would mislead.
  {
    const char* pe = std::getenv("DS4_CUDA_PROFILE");
    const bool profiled = pe && *pe && std::strcmp(pe, "0") != 0;
    branches_ = cuda::env_switch("DS4_CUDA_BRANCH", !profiled);
  }
  if (branches_) {
    check(cudaStreamCreateWithFlags(&side_, cudaStreamNonBlocking), "cudaStreamCreate(branch)");
    check(cudaEventCreateWithFlags(&fork_ev_, cudaEventDisableTiming), "cudaEventCreate(branch fork)");
    check(cudaEventCreateWithFlags(&join_ev_, cudaEventDisableTiming), "cudaEventCreate(branch join)");
  }
  cudaMemPool_t pool;
  check(cudaDeviceGetDefaultMemPool(&pool, opt.device), "cudaDeviceGetDefaultMemPool");
  uint64_t threshold = UINT64_MAX;
  check(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold), "cudaMemPoolSetAttribute");
  check(cudaMalloc(reinterpret_cast<void**>(&d_err_), 2 * sizeof(int)), "cudaMalloc(error word)");
  check(cudaMemset(d_err_, 0, 2 * sizeof(int)), "cudaMemset(error word)");
  check(cudaMallocHost(reinterpret_cast<void**>(&h_err_), 2 * sizeof(int)), "cudaMallocHost(error word)");
  h_err_[0] = h_err_[1] = 0;
  const char* pe = std::getenv("DS4_CUDA_PROFILE");
  prof_ = pe && *pe && std::strcmp(pe, "0") != 0;
  prof_host_ = prof_ && std::strcmp(pe, "host") == 0;
  prof_graph_ = prof_ && std::strcmp(pe, "graph") == 0;
  const char* hs = std::getenv("DS4_CUDA_HOSTSTAT");
  hoststat_ = hs && *hs && std::strcmp(hs, "0") != 0;
  const char* gr = std::getenv("DS4_CUDA_GRAPHS");
  graphs_ = (!prof_ || prof_graph_) && !(gr && std::strcmp(gr, "0") == 0);
  const char* fh = std::getenv("DS4_CUDA_FUSE_HC");
  fuse_hc_ = !(fh && std::strcmp(fh, "0") == 0);
  // On by default since measured on the H200 (docs/BENCHMARKS.md, fifth CUDA session): =0 turns
  // each off for A/B.
  hc_overlap_ = cuda::env_switch("DS4_CUDA_HC_OVERLAP", true);
  chunk_ops_ = cuda::env_switch("DS4_CUDA_CHUNK", true);
  fuse_qkv_ = cuda::env_switch("DS4_CUDA_FUSE_QKV", true);
  post_add_ = cuda::env_switch("DS4_CUDA_POST_ADD", true);
  attn_store_ = cuda::env_switch("DS4_CUDA_ATTN_STORE", true);
  router_fused_ = cuda::env_switch("DS4_CUDA_ROUTER_FUSED", true);
  qact_on_ = cuda::env_switch("DS4_CUDA_FUSE_QUANT", true) && !opt_.float_activations;
  const char* qs = std::getenv("DS4_CUDA_Q8_SPLIT");
  q8_split_ = qs && std::strcmp(qs, "1") == 0 && !opt_.float_activations;
  for (int i = 0; qact_on_ && i < (branches_ ? 2 : 1); ++i) {
    check(cudaMalloc(reinterpret_cast<void**>(&qact_qs_[i]), kQactCap), "cudaMalloc(activation Q8_0 copy)");
    check(cudaMalloc(reinterpret_cast<void**>(&qact_d_[i]), kQactCap / 32 * sizeof(float)),
          "cudaMalloc(activation Q8_0 scales)");
  }
  router_q8k_ = router_fused_ && cuda::env_switch("DS4_CUDA_ROUTER_Q8K", true) && !opt_.float_activations;
  if (router_q8k_) {
    check(cudaMalloc(reinterpret_cast<void**>(&q8k_qs_), kQactCap), "cudaMalloc(activation Q8_K copy)");
    check(cudaMalloc(reinterpret_cast<void**>(&q8k_d_), kQactCap / 256 * sizeof(float)),
          "cudaMalloc(activation Q8_K scales)");
    check(cudaMalloc(reinterpret_cast<void**>(&q8k_bs_), kQactCap / 16 * sizeof(int16_t)),
          "cudaMalloc(activation Q8_K sums)");
  }
  // Room for the largest extra inputs once: recorded graphs keep reading these addresses.
  const size_t step_words = 2 + kMaxStepExtra;
  check(cudaMalloc(reinterpret_cast<void**>(&d_step_), step_words * sizeof(int32_t)), "cudaMalloc(step inputs)");
  check(cudaMallocHost(reinterpret_cast<void**>(&h_step_), step_words * sizeof(int32_t)), "cudaMallocHost(step inputs)");
  check(cudaEventCreateWithFlags(&step_staged_, cudaEventDisableTiming), "cudaEventCreate(step inputs)");
}

CudaBackend::~CudaBackend() {
  if (hoststat_ && syncs_ > 0)
    std::fprintf(stderr, "cuda host: %.3f s issuing work, %.3f s waiting for the GPU, over %ld synchronizations; %s\n",
                 issue_s_, wait_s_, syncs_, step_stats().c_str());
  // No throwing here: errors at teardown are ignored (the process is releasing everything).
  stream_ = home_;
  if (side_) cudaStreamSynchronize(side_);
  if (stream_) cudaStreamSynchronize(stream_);
  step_record_abort();
  for (auto& g : graphs_by_key_) drop_step_graph(*g);
  if (step_staged_) cudaEventDestroy(step_staged_);
  for (cudaEvent_t e : step_ev_)
    if (e) cudaEventDestroy(e);
  if (d_step_) cudaFree(d_step_);
  if (h_step_) cudaFreeHost(h_step_);
  for (int i = 0; i < 2; ++i) {
    if (qact_qs_[i]) cudaFree(qact_qs_[i]);
    if (qact_d_[i]) cudaFree(qact_d_[i]);
  }
  if (q8k_qs_) cudaFree(q8k_qs_);
  if (q8k_d_) cudaFree(q8k_d_);
  if (q8k_bs_) cudaFree(q8k_bs_);
  for (auto& [k, p] : q8_splits_) cudaFree(p);
  cuda::block_cache().trim();
  if (prof_) {
    try {
      std::string r = profile_report(false);
      if (!r.empty()) std::fprintf(stderr, "%s", r.c_str());
    } catch (...) {
    }
    for (auto& p : prof_pending_) cudaEventDestroy(p.a), cudaEventDestroy(p.b);
    for (cudaEvent_t e : prof_free_) cudaEventDestroy(e);
  }
  for (auto& [k, r] : weights_) cudaFree(r.dev);  // copies and slot arenas alike
  for (auto& [id, e] : fences_) cudaEventDestroy(e);
  for (cudaEvent_t e : fence_free_) cudaEventDestroy(e);
  for (auto& [k, p] : freqs_) cudaFree(p);
  for (int i = 0; i < kStaging; ++i) {
    if (staged_[i]) cudaEventDestroy(staged_[i]);
    if (staging_[i]) cudaFreeHost(staging_[i]);
  }
  if (d_err_) cudaFree(d_err_);
  if (h_err_) cudaFreeHost(h_err_);
  if (fork_ev_) cudaEventDestroy(fork_ev_);
  if (join_ev_) cudaEventDestroy(join_ev_);
  if (side_) cudaStreamDestroy(side_);
  if (stream_) cudaStreamDestroy(stream_);
}

void CudaBackend::sync_and_check(const char* what) {
  if (rec_) fail("CUDA {}: internal: a synchronizing call inside a recorded decode step", what);
  join();  // the home stream then covers the branch too (and one left open by a failed op is closed)
  check(cudaMemcpyAsync(h_err_, d_err_, 2 * sizeof(int), cudaMemcpyDeviceToHost, stream_), "error word copy");
  const auto t0 = std::chrono::steady_clock::now();
  cudaError_t e = cudaStreamSynchronize(stream_);
  if (hoststat_) {
    const auto t1 = std::chrono::steady_clock::now();
    issue_s_ += std::chrono::duration<double>(t0 - last_sync_).count();
    wait_s_ += std::chrono::duration<double>(t1 - t0).count();
    ++syncs_;
    last_sync_ = t1;
  }
  if (e != cudaSuccess)
    fail("CUDA {}: the stream failed (a kernel or copy issued since the last synchronize): {}", what,
         cudaGetErrorString(e));
  if (prof_) prof_resolve();
  if (h_err_[0] != 0) {
    const int code = h_err_[0], value = h_err_[1];
    check(cudaMemsetAsync(d_err_, 0, 2 * sizeof(int), stream_), "error word reset");
    check(cudaStreamSynchronize(stream_), "error word reset");
    h_err_[0] = h_err_[1] = 0;
    fail("CUDA backend: {} (value {}); detected at {}", err_text(code), value, what);
  }
}

// ---- profiling ------------------------------------------------------------------------------

void CudaBackend::prof_begin(std::string name) {
  if (prof_host_) {
    prof_pending_.push_back(ProfPending{std::move(name), nullptr, nullptr});
    prof_t0_ = std::chrono::steady_clock::now();
    return;
  }
  auto take = [&] {
    cudaEvent_t e;
    if (!prof_free_.empty()) {
      e = prof_free_.back();
      prof_free_.pop_back();
    } else {
      check(cudaEventCreate(&e), "cudaEventCreate(profile)");
    }
    return e;
  };
  ProfPending p{std::move(name), take(), take()};
  // In a recording, only an external record becomes an event node the host can time.
  check(cudaEventRecordWithFlags(p.a, stream_, rec_ ? cudaEventRecordExternal : cudaEventRecordDefault),
        "cudaEventRecord(profile)");
  if (rec_) {
    p.name = "[step] " + p.name;
    rec_graph_.prof.push_back(std::move(p));
    return;
  }
  prof_pending_.push_back(std::move(p));
}

void CudaBackend::prof_end() noexcept {
  if (prof_host_) {
    if (prof_pending_.empty()) return;
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - prof_t0_).count();
    ProfEntry& e = prof_table_[prof_pending_.back().name];
    e.ms += ms;
    e.calls += 1;
    prof_pending_.pop_back();
    return;
  }
  if (rec_) {
    if (!rec_graph_.prof.empty()) cudaEventRecordWithFlags(rec_graph_.prof.back().b, stream_, cudaEventRecordExternal);
    return;
  }
  if (!prof_pending_.empty()) cudaEventRecord(prof_pending_.back().b, stream_);
}

void CudaBackend::prof_resolve() noexcept {
  if (prof_replayed_) {
    for (const auto& p : prof_replayed_->prof) {
      float ms = 0;
      if (cudaEventElapsedTime(&ms, p.a, p.b) == cudaSuccess) {
        ProfEntry& e = prof_table_[p.name];
        e.ms += ms;
        e.calls += 1;
      } else {
        cudaGetLastError();
      }
    }
    float ms = 0;
    if (cudaEventElapsedTime(&ms, step_ev_[0], step_ev_[1]) == cudaSuccess) {
      ProfEntry& e = prof_table_["[step] whole graph (launch to end)"];
      e.ms += ms;
      e.calls += 1;
    } else {
      cudaGetLastError();
    }
    prof_replayed_ = nullptr;
  }
  for (auto& p : prof_pending_) {
    float ms = 0;
    if (cudaEventElapsedTime(&ms, p.a, p.b) == cudaSuccess) {
      ProfEntry& e = prof_table_[p.name];
      e.ms += ms;
      e.calls += 1;
    } else {
      cudaGetLastError();
    }
    prof_free_.push_back(p.a);
    prof_free_.push_back(p.b);
  }
  prof_pending_.clear();
}

std::string CudaBackend::profile_report(bool reset) {
  if (!prof_) return {};
  check(cudaStreamSynchronize(stream_), "profile");
  prof_resolve();
  std::vector<std::pair<std::string, ProfEntry>> rows(prof_table_.begin(), prof_table_.end());
  std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.second.ms > b.second.ms; });
  double total = 0;
  for (auto& [n, e] : rows) total += e.ms;
  std::string out = prof_host_ ? fmt::format("cuda profile (host time inside each op, {:.3f} ms in all", total)
                               : fmt::format("cuda profile (CUDA events around each op, {:.3f} ms in all", total);
  out += branches_ ? "; branch streams on: ops overlap, their times include each other's):\n" : "; one stream):\n";
  out += fmt::format("  {:<40} {:>9} {:>11} {:>10} {:>6}\n", "op", "calls", "total ms", "us/call", "%");
  for (auto& [n, e] : rows)
    out += fmt::format("  {:<40} {:>9} {:>11.3f} {:>10.2f} {:>6.1f}\n", n, e.calls, e.ms, 1e3 * e.ms / e.calls,
                       total > 0 ? 100 * e.ms / total : 0.0);
  if (reset) prof_table_.clear();
  return out;
}

// ---- memory -----------------------------------------------------------------------------------

void* CudaBackend::alloc(size_t bytes) {
  if (bytes == 0) return nullptr;
  cudaError_t e = cudaSuccess;
  void* p = cuda::block_cache().get(bytes, stream_, &e);
  if (!p) {
    // Cached blocks of other sizes may be what is missing: give them back and try once more.
    cudaGetLastError();
    cuda::block_cache().trim();
    p = cuda::block_cache().get(bytes, stream_, &e);
  }
  if (!p) {
    cudaGetLastError();
    size_t free_b = 0, total_b = 0;
    cudaMemGetInfo(&free_b, &total_b);
    fail("CUDA alloc: {} bytes ({:.3f} GiB) failed: {} ({:.3f} GiB free of {:.3f} GiB)", bytes, bytes / kGiB,
         cudaGetErrorString(e), free_b / kGiB, total_b / kGiB);
  }
  return p;
}

void CudaBackend::release(void* p) {
  // Called from Buffer destructors, so it must not throw: a failing free can only follow an
  // earlier (sticky) stream error, which the next download/synchronize reports.
  if (!p) return;
  if (!cuda::block_cache().put(p) && cudaFreeAsync(p, stream_) != cudaSuccess) cudaGetLastError();
}

void CudaBackend::upload(void* dst, const void* host_src, size_t bytes) {
  qact_forget();
  if (rec_) fail("CUDA upload: internal: host data inside a recorded decode step");
  if (bytes) check(cudaMemcpyAsync(dst, host_src, bytes, cudaMemcpyHostToDevice, stream_), "upload");
}

void CudaBackend::download(void* host_dst, const void* src, size_t bytes) {
  if (bytes) check(cudaMemcpyAsync(host_dst, src, bytes, cudaMemcpyDeviceToHost, stream_), "download");
  sync_and_check("download");
}

void CudaBackend::copy(void* dst, const void* src, size_t bytes) {
  qact_forget();
  Prof prof(this, "copy");
  if (bytes) check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_), "copy");
}

void CudaBackend::fill(float* x, int64_t n, float value) {
  qact_forget();
  cuda::fill(x, n, value, stream_);
}

void CudaBackend::synchronize() { sync_and_check("synchronize"); }

void CudaBackend::branch_begin() {
  if (!branches_) return;
  if (in_branch_) fail("CUDA branch: internal: a branch inside a branch");
  join();  // one branch at a time
  check(cudaEventRecord(fork_ev_, home_), "cudaEventRecord(branch fork)");
  check(cudaStreamWaitEvent(side_, fork_ev_, 0), "cudaStreamWaitEvent(branch fork)");
  stream_ = side_;
  in_branch_ = true;
  qact_src_[1] = qact_src_[0];  // the home's copy, readable by the branch (written before the fork)
  qact_view_[1] = qact_view_[0];
  branch_shares_home_ = qact_src_[0] != nullptr;
}

void CudaBackend::branch_end() {
  if (!in_branch_) return;
  check(cudaEventRecord(join_ev_, side_), "cudaEventRecord(branch join)");
  stream_ = home_;
  in_branch_ = false;
  branch_pending_ = true;
}

// Also closes a branch left open (an op inside it failed and the caller never reached branch_end).
void CudaBackend::join() {
  if (in_branch_) branch_end();
  if (!branch_pending_) return;
  check(cudaStreamWaitEvent(home_, join_ev_, 0), "cudaStreamWaitEvent(branch join)");
  branch_pending_ = false;
  branch_shares_home_ = false;
  qact_src_[1] = nullptr;
}

// ---- weights ----------------------------------------------------------------------------------

void CudaBackend::register_weights(const void* data, size_t bytes, const std::string& what) {
  if (bytes == 0) return;
  if (!data) fail("CUDA register_weights: {}: null pointer for {} bytes", what, bytes);
  const uintptr_t a = reinterpret_cast<uintptr_t>(data), b = a + bytes;
  auto it = weights_.upper_bound(a);
  if (it != weights_.begin()) {
    auto prev = std::prev(it);
    if (a >= prev->first && b <= prev->first + prev->second.bytes) return;  // already held
    if (a < prev->first + prev->second.bytes)
      fail("CUDA register_weights: {} overlaps the registered range {} without lying inside it", what,
           prev->second.what);
  }
  if (it != weights_.end() && it->first < b)
    fail("CUDA register_weights: {} overlaps the registered range {} without lying inside it", what, it->second.what);

  size_t free_b = 0, total_b = 0;
  check(cudaMemGetInfo(&free_b, &total_b), "cudaMemGetInfo");
  // Keep 1 GiB for activations, state and the kernels' scratch.
  const size_t reserve = size_t{1} << 30;
  if (bytes + reserve > free_b)
    fail("CUDA register_weights: {} needs {:.2f} GiB but the device has {:.2f} GiB free of {:.2f} GiB "
         "(1 GiB is kept for activations): the model does not fit on this GPU",
         what, bytes / kGiB, free_b / kGiB, total_b / kGiB);
  uint8_t* dev = nullptr;
  cudaError_t e = cudaMalloc(reinterpret_cast<void**>(&dev), bytes);
  if (e != cudaSuccess) {
    cudaGetLastError();
    fail("CUDA register_weights: {}: cudaMalloc of {} bytes failed: {}", what, bytes, cudaGetErrorString(e));
  }
  try {
    if (!staging_[0])
      for (int i = 0; i < kStaging; ++i) {
        check(cudaMallocHost(reinterpret_cast<void**>(&staging_[i]), kStagingBytes), "cudaMallocHost(staging)");
        check(cudaEventCreateWithFlags(&staged_[i], cudaEventDisableTiming), "cudaEventCreate(staging)");
      }
    const auto t0 = std::chrono::steady_clock::now();
    const auto* src = static_cast<const uint8_t*>(data);
    int slot = 0;
    for (size_t off = 0; off < bytes; off += kStagingBytes, slot = (slot + 1) % kStaging) {
      const size_t n = std::min(kStagingBytes, bytes - off);
      check(cudaEventSynchronize(staged_[slot]), "staging buffer wait");  // its previous copy is done
      parallel_copy(staging_[slot], src + off, n);
      check(cudaMemcpyAsync(dev + off, staging_[slot], n, cudaMemcpyHostToDevice, stream_), "weight upload");
      check(cudaEventRecord(staged_[slot], stream_), "cudaEventRecord(staging)");
      const auto now = std::chrono::steady_clock::now();
      if (opt_.verbose && std::chrono::duration<double>(now - last_print_).count() > 1.0) {
        last_print_ = now;
        const double s = upload_s_ + std::chrono::duration<double>(now - t0).count();
        std::fprintf(stderr, "cuda: weights: %.2f GB on the device, %.2f GB/s (%s: %.2f of %.2f GB)\n",
                     (uploaded_ + off + n) / 1e9, (uploaded_ + off + n) / 1e9 / s, what.c_str(), (off + n) / 1e9,
                     bytes / 1e9);
      }
    }
    check(cudaStreamSynchronize(stream_), "weight upload");
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    uploaded_ += bytes;
    upload_s_ += s;
    if (opt_.verbose && bytes >= (size_t{1} << 30))
      std::fprintf(stderr, "cuda: uploaded %s: %.2f GB in %.2f s (%.2f GB/s); %.2f GB of weights on the device\n",
                   what.c_str(), bytes / 1e9, s, bytes / 1e9 / s, uploaded_ / 1e9);
  } catch (...) {
    cudaStreamSynchronize(stream_);
    cudaFree(dev);
    throw;
  }
  weights_.emplace(a, Region{bytes, dev, what});
}

// ---- the device tier of streamed experts (backend.h) -------------------------------------------

uint8_t* CudaBackend::alloc_weight_slots(size_t bytes, const std::string& what) {
  if (bytes == 0) fail("CUDA alloc_weight_slots: {}: zero bytes", what);
  uint8_t* dev = nullptr;
  const cudaError_t e = cudaMalloc(reinterpret_cast<void**>(&dev), bytes);
  if (e != cudaSuccess) {
    cudaGetLastError();
    size_t free_b = 0, total_b = 0;
    cudaMemGetInfo(&free_b, &total_b);
    fail("CUDA: {}: {} bytes ({:.3f} GiB) of device memory failed: {} ({:.3f} GiB free of {:.3f} GiB)", what, bytes,
         bytes / kGiB, cudaGetErrorString(e), free_b / kGiB, total_b / kGiB);
  }
  const uintptr_t a = reinterpret_cast<uintptr_t>(dev);
  auto it = weights_.upper_bound(a);
  if ((it != weights_.end() && it->first < a + bytes) ||
      (it != weights_.begin() && std::prev(it)->first + std::prev(it)->second.bytes > a)) {
    cudaFree(dev);
    fail("CUDA alloc_weight_slots: {}: device range overlaps a registered weight range", what);
  }
  weights_.emplace(a, Region{bytes, dev, what});
  return dev;
}

void CudaBackend::release_weight_slots(uint8_t* p) {
  auto it = weights_.find(reinterpret_cast<uintptr_t>(p));
  if (!p || it == weights_.end() || it->second.dev != p) return;
  // Ops queued on the stream may still read the slots.
  if (cudaStreamSynchronize(stream_) != cudaSuccess) cudaGetLastError();
  cudaFree(p);
  weights_.erase(it);
}

bool CudaBackend::pin_host(void* p, size_t bytes) {
  if (!p || bytes == 0) return true;
  if (cudaHostRegister(p, bytes, cudaHostRegisterDefault) != cudaSuccess) {
    cudaGetLastError();  // e.g. the locked-memory limit: the buffer stays pageable
    return false;
  }
  return true;
}

void CudaBackend::unpin_host(void* p) {
  if (p && cudaHostUnregister(p) != cudaSuccess) cudaGetLastError();
}

void CudaBackend::upload_async(void* dst, const void* host_src, size_t bytes) {
  qact_forget();
  if (rec_) fail("CUDA upload_async: internal: host data inside a recorded decode step");
  if (bytes) check(cudaMemcpyAsync(dst, host_src, bytes, cudaMemcpyHostToDevice, stream_), "upload_async");
}

uint64_t CudaBackend::fence() {
  if (rec_) fail("CUDA fence: internal: a fence inside a recorded decode step");
  join();  // a fence covers every op issued so far
  cudaEvent_t e = nullptr;
  if (!fence_free_.empty()) {
    e = fence_free_.back();
    fence_free_.pop_back();
  } else {
    check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate(fence)");
  }
  const cudaError_t r = cudaEventRecord(e, stream_);
  if (r != cudaSuccess) {
    fence_free_.push_back(e);
    check(r, "cudaEventRecord(fence)");
  }
  fences_.emplace_back(++fence_next_, e);
  return fence_next_;
}

bool CudaBackend::fence_done(uint64_t f, bool wait) {
  while (f > fence_passed_ && !fences_.empty()) {
    auto [id, e] = fences_.front();
    const cudaError_t r = wait ? cudaEventSynchronize(e) : cudaEventQuery(e);
    if (r == cudaErrorNotReady) return false;
    if (r != cudaSuccess) {
      cudaGetLastError();
      fail("CUDA fence: the stream failed (a kernel or copy issued before the fence): {}", cudaGetErrorString(r));
    }
    fence_passed_ = id;
    fences_.pop_front();
    fence_free_.push_back(e);
  }
  return f <= fence_passed_;
}

uint64_t CudaBackend::device_free_bytes() {
  size_t free_b = 0, total_b = 0;
  check(cudaMemGetInfo(&free_b, &total_b), "cudaMemGetInfo");
  return free_b;
}

const uint8_t* CudaBackend::weight(const void* p, size_t bytes, const char* op, const char* arg) const {
  if (!p) return nullptr;
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  auto it = weights_.upper_bound(a);
  if (it != weights_.begin()) {
    --it;
    if (a >= it->first && a + bytes <= it->first + it->second.bytes) return it->second.dev + (a - it->first);
  }
  fail("CUDA {}: weight {} ({} bytes at host address {}) is not inside a registered weight range "
       "(register_weights first)",
       op, arg, bytes, p);
}

size_t CudaBackend::weight_tail(const void* p) const {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  auto it = weights_.upper_bound(a);
  if (it == weights_.begin()) return 0;
  --it;
  const uintptr_t end = it->first + it->second.bytes;
  return a >= it->first && a < end ? end - a : 0;
}

cuda::DevMatrix CudaBackend::dev_matrix(const Matrix& m, const char* op, const char* arg) const {
  if (m.n_out <= 0 || m.n_in <= 0) fail("CUDA {}: {} has shape {} x {}", op, arg, m.n_out, m.n_in);
  const size_t rb = row_bytes(traits(m.type), static_cast<uint64_t>(m.n_in));
  if (m.n_in % traits(m.type).block_elems != 0)
    fail("CUDA {}: {}: row of {} is not whole {} blocks", op, arg, m.n_in, traits(m.type).name);
  if (m.row_stride < rb) fail("CUDA {}: {}: row stride {} < row bytes {}", op, arg, m.row_stride, rb);
  const size_t span = static_cast<size_t>(m.n_out - 1) * m.row_stride + rb;
  return {m.type, weight(m.data, span, op, arg), m.n_in, m.n_out, m.row_stride};
}

cuda::DevExperts CudaBackend::dev_experts(const ExpertSet& e, const char* op, const char* arg) const {
  if (e.n_expert <= 0) fail("CUDA {}: {} has {} experts", op, arg, e.n_expert);
  cuda::DevMatrix first = dev_matrix(e.first, op, arg);
  // All experts must lie in one registered range (the device copy keeps their spacing).
  const size_t span = static_cast<size_t>(e.n_expert - 1) * e.expert_stride +
                      static_cast<size_t>(e.first.n_out - 1) * e.first.row_stride +
                      row_bytes(traits(e.first.type), static_cast<uint64_t>(e.first.n_in));
  first.data = weight(e.first.data, span, op, arg);
  return {first, e.n_expert, e.expert_stride};
}

const double* CudaBackend::dev_freqs(std::span<const double> f) {
  auto key = std::make_pair(f.data(), f.size());
  auto it = freqs_.find(key);
  if (it != freqs_.end()) return it->second;
  double* d = nullptr;
  check(cudaMalloc(reinterpret_cast<void**>(&d), f.size_bytes()), "cudaMalloc(rope frequencies)");
  check(cudaMemcpy(d, f.data(), f.size_bytes(), cudaMemcpyHostToDevice), "rope frequencies upload");
  freqs_.emplace(key, d);
  return d;
}

// ---- the one-row Q8_0 copy (DS4_CUDA_FUSE_QUANT) -------------------------------------------------

cuda::Q8Out CudaBackend::qact_prepare(int64_t rows, int64_t n) {
  qact_forget();
  if (!qact_on_ || rows != 1 || n <= 0 || n % 32 != 0 || n > kQactCap) return {};
  if (!in_branch_ && branch_pending_ && branch_shares_home_) return {};
  const int i = qslot();
  return {qact_qs_[i], qact_d_[i]};
}

void CudaBackend::qact_commit(const cuda::Q8Out& q, const float* y, int64_t n) {
  if (!q.qs) return;
  const int i = qslot();
  qact_src_[i] = y;
  qact_view_[i] = {qact_qs_[i], qact_d_[i], n};
}

const cuda::PreQ8* CudaBackend::qact_for(const float* x, int64_t rows) const {
  const int i = qslot();
  return qact_src_[i] && x == qact_src_[i] && rows == 1 ? &qact_view_[i] : nullptr;
}

void CudaBackend::qact_clobbered(const float* y, int64_t rows, int64_t y_stride, int64_t n_out) {
  if (!y || rows <= 0) return;
  const auto a0 = reinterpret_cast<uintptr_t>(y), a1 = reinterpret_cast<uintptr_t>(y + (rows - 1) * y_stride + n_out);
  for (int i = 0; i < 2; ++i) {  // either slot's row (a branch writes nothing the home reads, but be safe)
    if (!qact_src_[i]) continue;
    const auto b0 = reinterpret_cast<uintptr_t>(qact_src_[i]);
    const auto b1 = reinterpret_cast<uintptr_t>(qact_src_[i] + qact_view_[i].n);
    if (a0 < b1 && b0 < a1) qact_src_[i] = nullptr;
  }
}

void CudaBackend::with_q8_split(cuda::DevMatrix& dm, int64_t) {
  // Made on any first use, so a prompt's prefill pays for the copy rather than the first decode
  // step (measured on the GPU: made in the first step, it cost 5% of a 64-token decode run).
  if (!q8_split_ || !cuda::q8_0_splittable(dm)) return;
  if (auto it = q8_splits_.find(dm.data); it != q8_splits_.end()) {
    dm.q8_split = it->second;
    return;
  }
  if (rec_ || q8_split_full_) return;
  const size_t bytes = static_cast<size_t>(dm.n_out) * static_cast<size_t>(dm.n_in / 32) * 34;
  size_t free_b = 0, total_b = 0;
  check(cudaMemGetInfo(&free_b, &total_b), "cudaMemGetInfo");
  uint8_t* dst = nullptr;
  if (bytes + (size_t{2} << 30) > free_b || cudaMalloc(reinterpret_cast<void**>(&dst), bytes) != cudaSuccess) {
    cudaGetLastError();
    q8_split_full_ = true;
    std::fprintf(stderr, "cuda: Q8_0 split copies stop at %.2f GB (%.2f GB free): later matrices use the file layout\n",
                 q8_split_bytes_ / 1e9, free_b / 1e9);
    return;
  }
  cuda::q8_0_split_rows(dm, dst, stream_);
  q8_splits_.emplace(dm.data, dst);
  q8_split_bytes_ += bytes;
  dm.q8_split = dst;
}

// ---- ops --------------------------------------------------------------------------------------

void CudaBackend::matmul(const Matrix& w, const float* x, int64_t rows, float* y, int64_t x_stride,
                         int64_t y_stride) {
  q8k_src_ = nullptr;
  Prof prof(this, prof_ ? fmt::format("matmul {} {}x{}", traits(w.type).name, w.n_out, w.n_in) : std::string());
  if (rows <= 0) return;
  if (!cuda::gemv_supports(w.type)) fail("CUDA matmul: weight type {} is not supported", traits(w.type).name);
  cuda::DevMatrix dm = dev_matrix(w, "matmul", "W");
  with_q8_split(dm, rows);
  cuda::matmul(dm, x, rows, y, x_stride ? x_stride : w.n_in, y_stride ? y_stride : w.n_out, opt_.float_activations,
               stream_, qact_for(x, rows));
  qact_clobbered(y, rows, y_stride ? y_stride : w.n_out, w.n_out);
}

void CudaBackend::matmul_many(std::span<const Matrix* const> ws, const float* x, int64_t rows,
                              std::span<float* const> ys) {
  q8k_src_ = nullptr;
  Prof prof(this, prof_ ? fmt::format("matmul_many x{}", ws.size()) : std::string());
  if (ws.size() != ys.size()) fail("CUDA matmul_many: {} matrices but {} outputs", ws.size(), ys.size());
  if (rows <= 0 || ws.empty()) return;
  std::vector<cuda::DevMatrix> dm;
  dm.reserve(ws.size());
  for (const Matrix* w : ws) {
    if (!cuda::gemv_supports(w->type)) fail("CUDA matmul: weight type {} is not supported", traits(w->type).name);
    dm.push_back(dev_matrix(*w, "matmul_many", "W"));
    with_q8_split(dm.back(), rows);
  }
  cuda::matmul_many(dm.data(), static_cast<int>(dm.size()), x, rows, ys.data(), opt_.float_activations, stream_,
                    qact_for(x, rows));
  for (size_t i = 0; i < ys.size(); ++i) qact_clobbered(ys[i], rows, ws[i]->n_out, ws[i]->n_out);
}

void CudaBackend::matmul_grouped(const Matrix& w, int64_t groups, const float* x, int64_t rows, float* y,
                                 int64_t x_stride, int64_t y_stride) {
  q8k_src_ = nullptr;
  Prof prof(this, prof_ ? fmt::format("matmul_grouped {} {}x{} /{}", traits(w.type).name, w.n_out, w.n_in, groups)
                        : std::string());
  if (rows <= 0) return;
  if (!cuda::gemv_supports(w.type)) fail("CUDA matmul: weight type {} is not supported", traits(w.type).name);
  cuda::DevMatrix dm = dev_matrix(w, "matmul_grouped", "W");
  with_q8_split(dm, rows);
  cuda::matmul_grouped(dm, groups, x, rows, y, x_stride, y_stride, opt_.float_activations, stream_, qact_for(x, rows));
  qact_clobbered(y, rows, y_stride ? y_stride : w.n_out, w.n_out);
}

void CudaBackend::rms_norm(const float* x, const float* w, int64_t n, int64_t rows, float eps, float* y) {
  qact_forget();
  Prof prof(this, "rms_norm");
  const float* wd = weight_f(w, n, "rms_norm", "w");
  const cuda::Q8Out q = qact_prepare(rows, n);
  cuda::rms_norm(x, wd, n, rows, eps, y, stream_, q);
  qact_commit(q, y, n);
}

void CudaBackend::rope_tail(float* x, int64_t rows, int64_t n_heads, int64_t head_dim, std::span<const double> freqs,
                            int64_t pos0, int64_t pos_step, bool inverse) {
  qact_forget();
  Prof prof(this, "rope_tail");
  if (freqs.empty() || rows <= 0) return;
  if (static_cast<int64_t>(freqs.size()) * 2 > head_dim)
    fail("CUDA rope_tail: {} rotated dims exceed head_dim {}", freqs.size() * 2, head_dim);
  // The inverse rotation of one row is the attention output, which the grouped out_a reads
  // next: write its Q8_0 copy too, as rms_norm and swiglu make theirs (the forward rotations of
  // one row, the indexer's q and an emitted compressor row, are not read by a Q8_0 matmul).
  if (rows == 1 && inverse) {
    const cuda::Q8Out q = qact_prepare(1, n_heads * head_dim);
    if (cuda::rope_tail_q8(x, n_heads, head_dim, dev_freqs(freqs), static_cast<int64_t>(freqs.size()), dpos(pos0),
                           inverse, q, stream_)) {
      qact_commit(q, x, n_heads * head_dim);
      return;
    }
  }
  cuda::rope_tail(x, rows, n_heads, head_dim, dev_freqs(freqs), static_cast<int64_t>(freqs.size()), dpos(pos0),
                  pos_step, inverse, stream_);
}

void CudaBackend::attn_qkv_prep(float* q, float* kv, int64_t rows, int64_t n_heads, int64_t head_dim,
                                const float* kv_norm, float eps, std::span<const double> freqs, int64_t pos0,
                                int64_t n_round) {
  if (!fuse_qkv_ || freqs.empty() || n_heads <= 0 || head_dim <= 0)
    return Backend::attn_qkv_prep(q, kv, rows, n_heads, head_dim, kv_norm, eps, freqs, pos0, n_round);
  qact_forget();
  Prof prof(this, "attn_qkv_prep");
  if (static_cast<int64_t>(freqs.size()) * 2 > head_dim)
    fail("CUDA attn_qkv_prep: {} rotated dims exceed head_dim {}", freqs.size() * 2, head_dim);
  const float* wd = weight_f(kv_norm, head_dim, "attn_qkv_prep", "kv_norm");
  if (!cuda::attn_qkv_prep(q, kv, rows, n_heads, head_dim, wd, eps, dev_freqs(freqs),
                           static_cast<int64_t>(freqs.size()), dpos(pos0), n_round, stream_))
    return Backend::attn_qkv_prep(q, kv, rows, n_heads, head_dim, kv_norm, eps, freqs, pos0, n_round);
}

void CudaBackend::act_round(float* x, int64_t rows, int64_t row_len, int64_t n_round, ActRound kind) {
  qact_forget();
  Prof prof(this, kind == ActRound::Fp8 ? "act_round fp8" : "act_round hadamard+fp4");
  if (n_round > row_len) fail("CUDA act_round: n_round {} > row_len {}", n_round, row_len);
  if (kind == ActRound::HadamardFp4 && (n_round <= 0 || (n_round & (n_round - 1)) != 0))
    fail("CUDA act_round: Hadamard size {} is not a power of two", n_round);
  cuda::act_round(x, rows, row_len, n_round, kind == ActRound::Fp8 ? 0 : 1, stream_);
}

void CudaBackend::swiglu(const float* g, const float* u, int64_t rows, int64_t n, float limit, const float* weights,
                         float* h) {
  qact_forget();
  Prof prof(this, "swiglu");
  const cuda::Q8Out q = qact_prepare(rows, n);
  cuda::swiglu(g, u, rows, n, limit, weights, h, stream_, q);
  qact_commit(q, h, n);
}

void CudaBackend::add(float* y, const float* x, int64_t n) {
  qact_forget();
  Prof prof(this, "add");
  cuda::add(y, x, n, stream_);
}

void CudaBackend::embed(const Matrix& table, const int32_t* tokens, int64_t rows, int copies, float* X) {
  qact_forget();
  Prof prof(this, "embed");
  if (rows <= 0) return;
  switch (table.type) {
    case GgmlType::F32:
    case GgmlType::F16:
    case GgmlType::BF16:
    case GgmlType::Q8_0:
    case GgmlType::Q2_K:
    case GgmlType::Q4_K: break;
    default:
      if (cuda::embed_ext_supports(table.type)) break;
      fail("CUDA embed: table type {} is not supported", traits(table.type).name);
  }
  if (copies < 1) fail("CUDA embed: {} copies", copies);
  cuda::DevMatrix t = dev_matrix(table, "embed", "table");
  if (cuda::embed_ext_supports(table.type))
    cuda::embed_ext(table.type, t.data, t.n_in, t.n_out, t.row_stride, tokens, rows, copies, X, d_err_, stream_);
  else
    cuda::embed(table.type, t.data, t.n_in, t.n_out, t.row_stride, tokens, rows, copies, X, d_err_, stream_);
}

CudaBackend::HcWeights CudaBackend::hc_weights(const HcParams& p, const float* post, const float* comb) const {
  const bool head = post == nullptr;
  if (head != (comb == nullptr)) fail("CUDA hc_pre: post and comb must both be given or both be null");
  const int n_mix = head ? p.n_hc : (2 + p.n_hc) * p.n_hc;
  HcWeights w{weight_f(p.scale, head ? 1 : 3, "hc_pre", "scale"), weight_f(p.base, n_mix, "hc_pre", "base")};
  if (!w.scale || !w.base) fail("CUDA hc_pre: scale and base are required");
  return w;
}

void CudaBackend::hc_pre(const float* X, float* mix, int64_t rows, const HcParams& p, float* x_in, float* post,
                         float* comb) {
  qact_forget();
  Prof prof(this, post ? "hc_pre" : "hc_pre head");
  const HcWeights w = hc_weights(p, post, comb);
  cuda::hc_pre(X, mix, rows, p.n_hc, p.n, w.scale, w.base, p.sinkhorn_iters, p.hc_eps, p.rms_eps, x_in, post, comb,
               stream_);
}

void CudaBackend::hc_pre_norm(const Matrix& fn, const float* X, float* mix, int64_t rows, const HcParams& p, bool norm,
                              const float* norm_w, float norm_eps, float* x_in, float* post, float* comb) {
  qact_forget();
  const int wtype = fn.type == GgmlType::F32 ? 0 : fn.type == GgmlType::F16 ? 1 : fn.type == GgmlType::BF16 ? 2 : -1;
  if (fuse_hc_ && rows == 1 && wtype >= 0) {
    Prof prof(this, post ? "hc_pre fused" : "hc_pre fused head");
    const HcWeights w = hc_weights(p, post, comb);
    const float* nw = norm ? weight_f(norm_w, p.n, "hc_pre", "norm") : nullptr;
    const cuda::DevMatrix dm = dev_matrix(fn, "hc_pre", "fn");
    const cuda::Q8Out q = norm ? qact_prepare(rows, p.n) : cuda::Q8Out{};
    if (cuda::hc_pre_fused(wtype, dm.data, dm.row_stride, dm.n_in, dm.n_out, X, p.n_hc, p.n, w.scale, w.base,
                           p.sinkhorn_iters, p.hc_eps, p.rms_eps, norm, nw, norm_eps, mix, x_in, post, comb,
                           hc_overlap_, stream_, q)) {
      qact_commit(q, x_in, p.n);
      return;
    }
  }
  Backend::hc_pre_norm(fn, X, mix, rows, p, norm, norm_w, norm_eps, x_in, post, comb);
}

void CudaBackend::hc_post(const float* y, const float* X, const float* post, const float* comb, int64_t rows,
                          int n_hc, int64_t n, float* Xout) {
  qact_forget();
  Prof prof(this, "hc_post");
  if (Xout == X) fail("CUDA hc_post: Xout must not alias X");
  cuda::hc_post(y, X, post, comb, rows, n_hc, n, Xout, stream_);
}

void CudaBackend::hc_post_add(float* y, const float* y2, const float* X, const float* post, const float* comb,
                              int64_t rows, int n_hc, int64_t n, float* Xout) {
  if (!post_add_) return Backend::hc_post_add(y, y2, X, post, comb, rows, n_hc, n, Xout);
  qact_forget();
  Prof prof(this, "hc_post (with the add)");
  if (Xout == X) fail("CUDA hc_post: Xout must not alias X");
  cuda::hc_post(y, X, post, comb, rows, n_hc, n, Xout, stream_, y2);
}

void CudaBackend::attention(const float* q, int64_t n_heads, int64_t head_dim, const AttnKv& kv, const float* sinks,
                            float scale, float* out) {
  attend(q, n_heads, head_dim, kv, sinks, scale, out, nullptr, nullptr);
}

void CudaBackend::attend(const float* q, int64_t n_heads, int64_t head_dim, const AttnKv& kv, const float* sinks,
                         float scale, float* out, const float* fresh, float* ring) {
  qact_forget();
  Prof prof(this, fresh ? (kv.idx ? "attention (indexed) + store_row" : "attention + store_row")
                        : (kv.idx ? "attention (indexed)" : "attention"));
  if (kv.window <= 0 || kv.pos < 0) fail("CUDA attention: window {} / position {}", kv.window, kv.pos);
  if (kv.idx && kv.n_idx > 0 && kv.n_comp <= 0) fail("CUDA attention: {} indices into no compressed rows", kv.n_idx);
  if (kv.ratio > 0 && kv.n_comp != (kv.pos + 1) / kv.ratio)
    fail("CUDA attention: {} compressed rows at position {} with ratio {}", kv.n_comp, kv.pos, kv.ratio);
  if (rec_ && kv.comp && !kv.idx && (kv.ratio <= 0 || kv.comp_capacity < kv.n_comp))
    fail("CUDA attention: internal: compressed rows without ratio/capacity inside a recorded step");
  cuda::AttnRows r;
  r.ring = kv.ring;
  r.window = kv.window;
  r.pos = dpos(kv.pos);
  r.comp = kv.comp;
  r.n_comp = kv.ratio > 0 ? cuda::DevCount{dpos(kv.pos), kv.ratio, kv.n_comp} : cuda::DevCount{{}, 0, kv.n_comp};
  r.idx = kv.idx;
  r.n_idx = kv.n_idx;
  const int64_t n_win = kv.pos - std::max<int64_t>(0, kv.pos - kv.window + 1) + 1;
  // Rows a replay at a later position may visit: the whole window, and up to the capacity.
  const int64_t n_sel = kv.idx ? kv.n_idx : (rec_ ? kv.comp_capacity : kv.n_comp);
  r.max_rows = (rec_ ? kv.window : n_win) + (kv.comp ? n_sel : 0);
  if (fresh) {  // the query's own row from `fresh`, stored into `ring` (kv.ring) by the first kernel
    r.fresh = fresh;
    r.fresh_pos0 = dpos(kv.pos);
    r.ring_store = ring;
  }
  if (n_sel > 0 && !kv.comp) fail("CUDA attention: compressed rows requested without a comp buffer");
  const float* s = weight_f(sinks, n_heads, "attention", "sinks");
  if (!s) fail("CUDA attention: sinks are required");
  cuda::attention(q, n_heads, head_dim, r, s, scale, out, d_err_, stream_);
}

void CudaBackend::indexer_scores(const float* q, const float* w, float scale, int64_t n_heads, int64_t head_dim,
                                 const float* keys, RowCount n_keys, float* scores) {
  qact_forget();
  Prof prof(this, "indexer_scores");
  const int64_t max_keys = rec_ ? n_keys.capacity : n_keys.n;
  if (max_keys < n_keys.n) fail("CUDA indexer_scores: {} keys above the capacity {}", n_keys.n, max_keys);
  cuda::indexer_scores(q, w, scale, n_heads, head_dim, keys, dcount(n_keys), max_keys, scores, stream_);
}

void CudaBackend::top_k(const float* scores, RowCount n, int64_t k, int32_t* idx) {
  qact_forget();
  Prof prof(this, "top_k");
  if (k < 0 || k > n.n) fail("CUDA top_k: k = {} outside 0..{}", k, n.n);
  cuda::top_k(scores, dcount(n), rec_ ? n.capacity : n.n, k, idx, stream_);
}

void CudaBackend::store_row(float* ring, int64_t ring_rows, int64_t n, int64_t pos, const float* src) {
  qact_forget();
  Prof prof(this, "store_row");
  if (ring_rows <= 0 || pos < 0) fail("CUDA store_row: ring of {} rows, position {}", ring_rows, pos);
  cuda::store_row(ring, ring_rows, n, dpos(pos), src, stream_);
}

void CudaBackend::compressor_store(const Matrix& ape, int64_t pos, int64_t ratio, int64_t lanes, const float* kvp,
                                   const float* scp, int64_t width, float* kv, float* score) {
  qact_forget();
  Prof prof(this, "compressor_store");
  if (ape.type != GgmlType::F32 && ape.type != GgmlType::F16 && ape.type != GgmlType::BF16)
    fail("CUDA compressor_store: ape type {} is not a float type", traits(ape.type).name);
  if (ratio <= 0 || pos < 0 || (lanes != 1 && lanes != 2))
    fail("CUDA compressor_store: ratio {}, {} lanes, position {}", ratio, lanes, pos);
  if (ape.n_out < ratio) fail("CUDA compressor_store: ape has {} rows for ratio {}", ape.n_out, ratio);
  if (width > ape.n_in) fail("CUDA compressor_store: width {} > ape row of {}", width, ape.n_in);
  cuda::DevMatrix a = dev_matrix(ape, "compressor_store", "ape");
  cuda::compressor_store(ape.type, a.data, a.row_stride, dpos(pos), ratio, lanes, kvp, scp, width, kv, score, stream_);
}

void CudaBackend::compressor_emit(const CompressorEmit& e, int64_t pos) {
  qact_forget();
  if (!rec_) return Backend::compressor_emit(e, pos);
  // Recorded: the row goes to scratch and is committed where the device position says. The
  // step graphs are keyed by each layer's emission phase (Forward::step_key), so every replay
  // of a graph recorded at an emitting position emits, and one recorded at a position where this
  // compressor does not emit never does: record nothing then (recording the pool, norm, RoPE,
  // rounding and a commit that skips itself on the device cost 5 kernels per compressor per
  // token: 62 compressors in the Flash model).
  // (No profile scope of its own: the ops below are timed one by one.)
  if (e.ratio <= 0 || (e.lanes != 1 && e.lanes != 2)) fail("CUDA compressor_emit: ratio {}, {} lanes", e.ratio, e.lanes);
  if ((pos + 1) % e.ratio != 0) return;
  Buffer<float> y(*this, static_cast<size_t>(e.dim));
  compressor_pool(e.kv, e.score, e.ratio, e.lanes, e.dim, y.data());
  rms_norm(y.data(), e.norm, e.dim, 1, e.eps, y.data());
  rope_tail(y.data(), 1, 1, e.dim, e.freqs, pos + 1 - e.ratio, 0, false);
  if (e.round) act_round(y.data(), 1, e.dim, e.n_round, e.round_kind);
  cuda::compressor_commit(dpos(pos), e.ratio, e.lanes, e.dim, y.data(), e.rows, e.kv, e.score, stream_);
}

void CudaBackend::compressor_pool(const float* kv, const float* score, int64_t ratio, int64_t lanes, int64_t dim,
                                  float* out) {
  qact_forget();
  Prof prof(this, "compressor_pool");
  if (lanes != 1 && lanes != 2) fail("CUDA compressor_pool: {} lanes", lanes);
  if (ratio <= 0) fail("CUDA compressor_pool: ratio {}", ratio);
  cuda::compressor_pool(kv, score, ratio, lanes, dim, out, stream_);
}

cuda::RouteArgs CudaBackend::route_args(const int32_t* tokens, const RouteParams& p, int32_t* experts,
                                        float* weights) {
  const float* bias = weight_f(p.bias, p.n_expert, "moe_route", "bias");
  const int32_t* tid = nullptr;
  int64_t n_tid_rows = 0;
  if (p.tid2eid) {
    if (!tokens) fail("CUDA moe_route: hash routing needs the token ids");
    const size_t row = static_cast<size_t>(p.k) * sizeof(int32_t);
    n_tid_rows = static_cast<int64_t>(weight_tail(p.tid2eid) / row);
    tid = reinterpret_cast<const int32_t*>(weight(p.tid2eid, row, "moe_route", "tid2eid"));
  }
  // Checked before RouteArgs narrows the counts to int (cuda::moe_route checks them again there).
  if (p.k < 1 || p.k > 64 || p.k > p.n_expert) fail("CUDA moe_route: k = {} outside 1..min(64, {})", p.k, p.n_expert);
  // p.forced is backend (device) memory like `tokens`: no translation.
  return {tokens, static_cast<int>(p.n_expert), static_cast<int>(p.k), bias, tid, n_tid_rows, p.forced, p.norm,
          p.scale, experts, weights, d_err_};
}

void CudaBackend::moe_route(const float* logits, const int32_t* tokens, int64_t rows, const RouteParams& p,
                            int32_t* experts, float* weights) {
  qact_forget();
  Prof prof(this, "moe_route");
  if (rows <= 0) return;
  cuda::moe_route(logits, rows, route_args(tokens, p, experts, weights), stream_);
}

void CudaBackend::moe_router(const Matrix& router, const float* x, int64_t rows, const int32_t* tokens,
                             const RouteParams& p, float* logits, int32_t* experts, float* weights) {
  if (rows == 1 && router_fused_ && router.n_out == p.n_expert) {
    qact_forget();
    Prof prof(this, "moe_router (fused)");
    const cuda::DevMatrix dm = dev_matrix(router, "moe_router", "router");
    // (not inside a branch: the home stream's experts may be reading the one Q8_K buffer)
    const bool q8k = router_q8k_ && !in_branch_ && router.n_in <= kQactCap && router.n_in % 256 == 0;
    q8k_view_ = {q8k_qs_, q8k_d_, q8k_bs_, router.n_in};
    if (cuda::matmul_route(dm, x, logits, route_args(tokens, p, experts, weights), stream_, q8k ? &q8k_view_ : nullptr)) {
      if (q8k) q8k_src_ = x;
      return;
    }
  }
  Backend::moe_router(router, x, rows, tokens, p, logits, experts, weights);
}

void CudaBackend::moe_experts(const ExpertSet& gate, const ExpertSet& up, const ExpertSet& down, const float* x,
                              const int32_t* experts, const float* weights, int64_t rows, int64_t k, float limit,
                              float* y) {
  // The fused router's Q8_K copy of this row, if it ran right before (DS4_CUDA_ROUTER_Q8K).
  const cuda::PreQ8K* xq = q8k_src_ && q8k_src_ == x && rows == 1 ? &q8k_view_ : nullptr;
  qact_forget();
  Prof prof(this, prof_ ? fmt::format("moe_experts {}/{} k{}", traits(gate.first.type).name, traits(down.first.type).name, k)
                        : std::string());
  if (rows <= 0) return;
  for (const ExpertSet* e : {&gate, &up, &down})
    if (!cuda::gemv_supports(e->first.type))
      fail("CUDA moe_experts: weight type {} is not supported", traits(e->first.type).name);
  cuda::moe_experts(dev_experts(gate, "moe_experts", "gate"), dev_experts(up, "moe_experts", "up"),
                    dev_experts(down, "moe_experts", "down"), x, experts, weights, rows, k, limit, y,
                    opt_.float_activations, stream_, xq);
}


std::unique_ptr<Backend> make_cuda_backend(CudaOptions opt) { return std::make_unique<CudaBackend>(opt); }

std::string cuda_profile_report(Backend& be, bool reset) {
  auto* c = dynamic_cast<CudaBackend*>(&be);
  return c ? c->profile_report(reset) : std::string();
}

std::string cuda_step_stats(Backend& be) {
  auto* c = dynamic_cast<CudaBackend*>(&be);
  return c ? c->step_stats() : std::string();
}

std::string cuda_device_summary() {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    cudaGetLastError();
    return std::string("no CUDA device: ") + cudaGetErrorString(e) + "\n";
  }
  if (n == 0) return "no CUDA device visible\n";
  int driver = 0, runtime = 0;
  cudaDriverGetVersion(&driver);
  cudaRuntimeGetVersion(&runtime);
  std::string out;
  for (int i = 0; i < n; ++i) {
    cudaDeviceProp p{};
    if (cudaGetDeviceProperties(&p, i) != cudaSuccess) {
      cudaGetLastError();
      out += "device " + std::to_string(i) + ": properties unavailable\n";
      continue;
    }
    char line[512];
    std::snprintf(line, sizeof line, "device %d: %s, %.1f GiB, compute capability %d.%d, %d SMs (driver %d, runtime %d)\n",
                  i, p.name, p.totalGlobalMem / kGiB, p.major, p.minor, p.multiProcessorCount, driver, runtime);
    out += line;
  }
  return out;
}

}  // namespace ds4::compute

namespace ds4::cuda {
cudaStream_t backend_stream(compute::Backend& be) {
  auto* c = dynamic_cast<compute::CudaBackend*>(&be);
  return c ? c->stream() : nullptr;
}
}  // namespace ds4::cuda
