// Engine: opens the model file, its tokenizer and the compute pool; computes the model
// identity and the memory plan.
#include <fmt/format.h>
#include <xxhash.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <optional>

#include "compute/backends.h"
#include "core/error.h"
#include "core/human_bytes.h"
#include "ds4/session.h"
#include "gguf/gguf.h"
#include "session/checkpoint.h"
#include "session/engine_impl.h"
#include "stream/device_tier.h"
#include "stream/layout.h"
#include "stream/packed_format.h"
#include "stream/planner.h"
#include "stream/setup.h"

namespace ds4 {

namespace session {

uint64_t model_identity_hash(const gguf::File& file) {
  const std::string& path = file.path();
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) fail("{}: cannot open to hash its header", path);
  XXH64_state_t* h = XXH64_createState();
  XXH64_reset(h, 0);
  std::vector<char> buf(1 << 20);
  bool ok = true;
  auto feed = [&](uint64_t offset, uint64_t n) {
    if (!ok || std::fseek(f, static_cast<long>(offset), SEEK_SET) != 0) {
      ok = false;
      return;
    }
    while (n > 0) {
      const size_t want = static_cast<size_t>(std::min<uint64_t>(n, buf.size()));
      if (std::fread(buf.data(), 1, want, f) != want) {
        ok = false;
        return;
      }
      XXH64_update(h, buf.data(), want);
      n -= want;
    }
  };
  feed(0, file.data_offset());
  // Samples of every tensor's bytes, so files that differ only in weights (same shapes and
  // metadata) differ in identity, without reading the whole (possibly 100+ GB) file.
  for (const auto& t : file.tensors()) {
    const uint64_t head = std::min<uint64_t>(t.n_bytes, kTensorSampleBytes);
    feed(t.file_offset, head);
    if (t.n_bytes > head) {
      const uint64_t tail = std::min<uint64_t>(t.n_bytes - head, kTensorSampleBytes);
      feed(t.file_offset + t.n_bytes - tail, tail);
    }
  }
  std::fclose(f);
  const uint64_t out = XXH64_digest(h);
  XXH64_freeState(h);
  if (!ok) fail("{}: read failed while computing the model identity", path);
  return out;
}

stream::StreamingRequest streaming_request(const EngineOptions& o) {
  stream::StreamingRequest sr;
  sr.enable = o.ssd_streaming;
  sr.cache_host = o.expert_cache_host;
  sr.policy = o.expert_cache_policy;
  sr.io = o.expert_io;
  sr.record_reads = o.expert_record_reads;
  sr.prefetch_hash = o.expert_prefetch_hash;
  sr.prefetch_lookahead = o.expert_prefetch_lookahead;
  sr.protect = o.expert_protect;
  sr.packed_path = o.packed_experts;
  sr.trace_path = o.trace_routing;
  return sr;
}

bool device_streams_experts(const gguf::File& file, const EngineOptions& o) {
  if (o.backend == "cpu") return false;
  if (o.ssd_streaming) return true;
  // A file pruned per layer has no layout to stream by (pack-experts cannot free its experts):
  // resident.
  if (!file.find_tensor(stream::expert_tensor_name(0, 0)) || stream::experts_pruned_per_layer(file)) return false;
  return stream::count_freed_tensors(file, stream::ExpertLayout::from_gguf(file)) > 0;
}
}  // namespace session

namespace {

// A chunk's scratch, for the plans: ~48 floats per hidden unit per row, and one row of logits
// (a session's chunk asks the head for its last row only; the logits dump's whole-prompt logits
// are its own model's, and the steering check's, of a short text, fit the gpu tier plan's 1 GiB
// reserve). Counting a row of logits per chunk row took 1 GB from the gpu tier at 2048 rows of
// Flash's 129,280-entry vocabulary.
uint64_t scratch_estimate(int64_t max_batch, int64_t n_embd, int64_t n_vocab) {
  const uint64_t rows = static_cast<uint64_t>(std::max<int64_t>(1, max_batch));
  return rows * static_cast<uint64_t>(n_embd) * 48 * sizeof(float) + static_cast<uint64_t>(n_vocab) * sizeof(float);
}

constexpr int64_t kFallbackCtx = 4096;  // for files without deepseek4.context_length

// The plan's weight figures, alike for every family. decode_bytes_per_token: all the weights,
// less the routed experts a token skips (all but k of each layer's, from the tensor's expert
// dimension: a pruned layer has fewer) and all but one row of the tables read by row (the
// token embedding, hash routing's tid2eid). flops: 2 per element of every matrix a token
// multiplies (FlopCount::matrix_per_token), the output head apart.
MemoryPlan weight_plan(const gguf::File& f, int64_t n_layer, int64_t k) {
  MemoryPlan p;
  p.file_bytes = f.file_size();
  double skipped = 0;
  for (const auto& t : f.tensors()) {
    p.weights_bytes += t.n_bytes;
    const double rows = t.ne.empty() ? 1.0 : static_cast<double>(t.ne.back());
    const bool by_row = t.name == "token_embd.weight" || t.name.find("tid2eid") != std::string::npos;
    if (by_row) skipped += static_cast<double>(t.n_bytes) * (1.0 - 1.0 / rows);
    // Matrices: two or more dimensions, not a table read by row (the compressors' position
    // biases are added a row at a time too); a 3-D expert tensor counts k of its experts.
    if (t.ne.size() < 2 || by_row || t.name.find("_ape.") != std::string::npos) continue;
    double elems = static_cast<double>(t.ne[0]) * static_cast<double>(t.ne[1]);
    if (t.ne.size() == 3) elems *= static_cast<double>(std::min<int64_t>(k, static_cast<int64_t>(t.ne[2])));
    (t.name == "output.weight" ? p.flops.head : p.flops.matrix_per_token) += 2.0 * elems;
  }
  for (int64_t il = 0; il < n_layer; ++il)
    for (int c = 0; c < 3; ++c) {
      const gguf::TensorInfo* t = f.find_tensor(stream::expert_tensor_name(il, c));
      if (!t || t->ne.size() != 3 || static_cast<int64_t>(t->ne[2]) <= k) continue;
      skipped += static_cast<double>(t->n_bytes) * static_cast<double>(static_cast<int64_t>(t->ne[2]) - k) /
                 static_cast<double>(t->ne[2]);
    }
  p.decode_bytes_per_token = p.weights_bytes - static_cast<uint64_t>(std::llround(skipped));
  return p;
}

MemoryPlan make_plan(const gguf::File& f, const model::deepseek4::HParams& hp, int64_t n_ctx) {
  MemoryPlan p = weight_plan(f, hp.n_layer, hp.n_expert_used);
  FlopCount& fc = p.flops;
  for (int64_t il = 0; il < hp.n_layer; ++il) fc.ratios.push_back(static_cast<int32_t>(hp.ratio(il)));
  fc.n_head = hp.n_head, fc.head_dim = hp.head_dim, fc.window = hp.sliding_window;
  fc.indexer_heads = hp.indexer_n_head, fc.indexer_dim = hp.indexer_head_dim, fc.indexer_top_k = hp.indexer_top_k;
  p.n_ctx = n_ctx;
  uint64_t fixed = static_cast<uint64_t>(hp.n_vocab);  // logits
  // Growth per token in float units times R (so per-layer 1/R shares add up exactly).
  double per_token = 1.0;  // the token id (4 bytes, counted as one float)
  for (int64_t il = 0; il < hp.n_layer; ++il) {
    fixed += static_cast<uint64_t>(hp.sliding_window * hp.head_dim);
    const int64_t R = hp.ratio(il);
    const int64_t lanes = R == 4 ? 2 : 1;
    if (R > 0) {
      fixed += 2 * static_cast<uint64_t>(lanes * R * lanes * hp.head_dim);
      per_token += static_cast<double>(hp.head_dim) / static_cast<double>(R);
    }
    if (R == 4) {
      fixed += 2 * static_cast<uint64_t>(2 * R * 2 * hp.indexer_head_dim);
      per_token += static_cast<double>(hp.indexer_head_dim) / static_cast<double>(R);
    }
  }
  p.state_fixed_bytes = fixed * sizeof(float);
  p.state_bytes_per_token = static_cast<uint64_t>(std::ceil(per_token * sizeof(float)));
  p.state_bytes_at_ctx =
      p.state_fixed_bytes + static_cast<uint64_t>(std::ceil(per_token * sizeof(float) * static_cast<double>(n_ctx)));
  p.checkpoint_bytes = session::checkpoint_bytes(hp);
  return p;
}

MemoryPlan make_plan(const gguf::File& f, const model::qwen35moe::HParams& hp, int64_t n_ctx) {
  MemoryPlan p = weight_plan(f, hp.n_layer, hp.n_expert_used);
  p.n_ctx = n_ctx;
  // Fixed: logits + every DeltaNet layer's conv history and recurrent state. Per token: the
  // token id and K + V rows of every full-attention layer.
  const uint64_t fixed = static_cast<uint64_t>(hp.n_vocab) + model::qwen35moe::State::recurrent_floats(hp);
  const uint64_t per_token = 1 + 2 * static_cast<uint64_t>(hp.n_full() * hp.n_head_kv * hp.head_dim);
  p.state_fixed_bytes = fixed * sizeof(float);
  p.state_bytes_per_token = per_token * sizeof(float);
  p.state_bytes_at_ctx = p.state_fixed_bytes + p.state_bytes_per_token * static_cast<uint64_t>(n_ctx);
  p.checkpoint_bytes = session::checkpoint_bytes(hp);
  return p;
}

// What the residency plan needs of a model family's hyperparameters.
struct PlanDims {
  int64_t n_embd = 0, n_vocab = 0, n_expert_used = 0;
  bool experts_pruned = false;  // deepseek4: experts dropped per layer (ds4-gguf quantize --prune)
};

// The residency plan (stream/planner.h): turns auto / --resident / --ssd-streaming and the
// available memory into "resident" or "stream with this host cache". A device backend runs
// resident (it checks its own memory when it uploads the weights) unless streaming is asked for
// or the experts were freed; then this sizes its host cache, counting only the experts against
// host memory (the rest of the weights and the state live on the device).
void plan_residency(const gguf::File& file, const PlanDims& hp, const EngineOptions& o, MemoryPlan& plan,
                    stream::StreamingRequest& sr) {
  if (o.resident && o.ssd_streaming) fail("--resident and --ssd-streaming contradict each other");
  const bool device = o.backend != "cpu";
  if (o.memory_reserve_gib < 0 || o.host_memory_gib < 0)
    fail("--memory-reserve-gib and --host-memory-gib must not be negative");
  stream::MemoryNeeds need;
  need.weights_bytes = plan.weights_bytes;
  need.session_bytes = plan.state_bytes_at_ctx + plan.checkpoint_bytes;
  if (o.planned_sessions < 1) fail("planned sessions {}: the memory plan counts at least one", o.planned_sessions);
  need.sessions = o.planned_sessions;
  need.scratch_bytes = scratch_estimate(o.max_batch, hp.n_embd, hp.n_vocab);
  bool freed = false;
  uint64_t slot_bytes = 0;
  const bool has_experts = file.find_tensor(stream::expert_tensor_name(0, 0)) != nullptr;
  if (has_experts && hp.experts_pruned) {
    // Experts dropped per layer (ds4-gguf quantize --prune): the streaming layout has one expert
    // count for all layers, so such a file is planned resident (its experts are in weights_bytes).
    if (o.ssd_streaming)
      fail("{}: --ssd-streaming: experts were pruned per layer in this file (deepseek4.expert_count_per_layer); "
           "streaming needs one expert count for all layers: stream the unpruned file with --prune-mask instead",
           file.path());
  } else if (has_experts) {
    const stream::ExpertLayout layout = stream::ExpertLayout::from_gguf(file);
    slot_bytes = layout.max_expert_bytes();
    need.expert_bytes = layout.total_bytes();
    need.token_working_set =
        static_cast<uint64_t>(layout.n_layer) * static_cast<uint64_t>(std::max<int64_t>(1, hp.n_expert_used)) * slot_bytes;
    freed = stream::count_freed_tensors(file, layout) > 0;
  }
  if (device) {
    if (!session::device_streams_experts(file, o)) return;  // resident on the device
    need.weights_bytes = need.expert_bytes;  // the host holds only the expert cache
    need.session_bytes = 0;
  }
  stream::ResidencyRequest rq;
  rq.mode = o.resident ? stream::Residency::Resident
            : o.ssd_streaming ? stream::Residency::Streaming
                              : stream::Residency::Auto;
  rq.available_bytes = o.host_memory_gib > 0 ? static_cast<uint64_t>(o.host_memory_gib * (1ull << 30))
                                             : stream::host_available_bytes();
  rq.reserve_bytes = static_cast<uint64_t>(o.memory_reserve_gib * (1ull << 30));
  rq.experts_freed = freed;
  if (!o.expert_cache_host.empty()) {
    int64_t slots = 0;
    const uint64_t b = stream::parse_budget(o.expert_cache_host, "--expert-cache-host", &slots);
    rq.host_budget = b > 0 ? b : static_cast<uint64_t>(slots) * std::max<uint64_t>(1, slot_bytes);
  }
  if (rq.available_bytes == 0 && rq.mode == stream::Residency::Auto) return;  // unknown memory: as before
  const stream::ResidencyPlan rp = stream::plan_residency(need, rq);
  plan.residency = rp.describe;
  if (rp.stream) {
    sr.enable = true;
    // Room for every expert: the provider's own default (its slots include I/O alignment).
    if (o.expert_cache_host.empty() && rp.host_cache_bytes < need.expert_bytes)
      sr.cache_host = fmt::format("{}B", rp.host_cache_bytes);
  }
}

// The residency plan, then the expert provider when it streams (or a routing trace or freed
// experts ask for one): sets impl.experts and the plan's lines. Any model family.
void open_streaming(Engine::Impl& impl, const gguf::File& file, const PlanDims& dims, const EngineOptions& o) {
  stream::StreamingRequest sr = session::streaming_request(o);
  plan_residency(file, dims, o, impl.plan, sr);
  // Checked on every backend (a typo fails the same everywhere); it applies to device backends,
  // whose gpu tier misses experts: the CPU backend computes every expert where it sits.
  stream::ExpertComputeRequest cr;
  cr.mode = stream::parse_expert_compute(o.expert_host_compute);
  if (!o.expert_host_compute_rates.empty()) stream::parse_expert_compute_rates(o.expert_host_compute_rates, cr);
  std::optional<stream::ExpertComputePlan> compute_plan;
  // (A file pruned per layer never streams: its layout is not one the store can describe.)
  if (compute::backend_is_shared(o.backend) && !dims.experts_pruned &&
      file.find_tensor(stream::expert_tensor_name(0, 0))) {
    cr.expert_bytes = stream::ExpertLayout::from_gguf(file).max_expert_bytes();
    compute_plan = stream::plan_expert_compute(cr);
    sr.host_compute = compute_plan->host_compute;
  }
  stream::StreamingSetup ss = stream::setup_streaming(file, sr);
  if (!o.expert_cache_gpu.empty()) {
    if (!compute::backend_is_shared(o.backend))
      fail("--expert-cache-gpu {}: the gpu tier needs a device backend (--backend cuda), not '{}'",
           o.expert_cache_gpu, o.backend);
    if (!ss.provider)
      fail("--expert-cache-gpu {}: the routed experts are resident; the gpu tier applies when they stream "
           "(--ssd-streaming)",
           o.expert_cache_gpu);
  }
  impl.experts = std::move(ss.provider);
  impl.plan.expert_streaming = ss.describe;
  if (impl.experts && compute_plan) impl.plan.expert_streaming += "\n" + compute_plan->describe;
  // The CPU backend that computes the gpu tier's misses where they sit (model Options::
  // expert_host_backend); the shared device backend keeps everything else.
  if (impl.experts && impl.experts->options().host_compute)
    impl.expert_host_backend = compute::make_cpu_backend(impl.pool.get());
}

// The gpu tier above the host cache (stream/device_tier.h), once the non-expert weights are on
// the device, sized by the plan (stream/planner.h) from what the device has left.
void attach_gpu_tier(Engine::Impl& impl, const EngineOptions& o) {
  compute::Backend& be = *impl.shared_backend;
  auto slots = stream::backend_device_slots(be);
  if (!slots) fail("internal: backend '{}' streams experts but has no device memory", o.backend);
  stream::ExpertProvider& xp = *impl.experts;
  stream::DeviceTierRequest r;
  r.given = o.expert_cache_gpu;
  if (!r.given.empty()) r.budget_bytes = stream::parse_budget(r.given, "--expert-cache-gpu", &r.budget_slots);
  r.free_bytes = be.device_free_bytes();
  const MemoryPlan& mp = impl.plan;
  r.session_bytes = static_cast<uint64_t>(std::max(1, o.planned_sessions)) * (mp.state_bytes_at_ctx + mp.checkpoint_bytes);
  const int64_t n_embd = impl.model ? impl.model->hparams().n_embd : impl.qwen->hparams().n_embd;
  r.scratch_bytes = scratch_estimate(o.max_batch, n_embd, impl.info.n_vocab);
  r.reserve_bytes = 1ull << 30;  // the backend's own buffers and allocator slack, as its weight upload keeps
  r.slot_bytes = xp.slot_bytes();
  r.expert_count = static_cast<uint64_t>(xp.layout().n_layer * xp.layout().n_expert);
  r.experts_per_token = std::max<int64_t>(1, xp.experts_per_token());
  const stream::DeviceTierPlan p = stream::plan_device_tier(r);
  xp.attach_device(std::move(slots), p.slots);
  impl.plan.expert_streaming += "\n" + p.describe;
}

// The DeepSeek V4 part of Engine::open (expert streaming, act_quant_sim).
void open_deepseek4(Engine::Impl& impl_ref, gguf::File file, const EngineOptions& o) {
  Engine::Impl* impl = &impl_ref;
  EngineInfo& in = impl->info;
  model::deepseek4::Options mo;
  mo.act_quant_sim = o.act_quant_sim;
  mo.max_batch = o.max_batch;
  // from_file takes the File; the plan needs its tensor table first.
  const auto hp_preview = model::deepseek4::HParams::from_gguf(file);
  in.n_ctx_train = hp_preview.context_length;
  in.n_ctx = o.ctx_size > 0 ? o.ctx_size : (in.n_ctx_train > 0 ? in.n_ctx_train : kFallbackCtx);
  impl->plan = make_plan(file, hp_preview, in.n_ctx);
  open_streaming(*impl, file,
                 PlanDims{hp_preview.n_embd, hp_preview.n_vocab, hp_preview.n_expert_used, hp_preview.experts_pruned()},
                 o);
  mo.experts = impl->experts.get();
  mo.expert_host_backend = impl->expert_host_backend.get();
  const bool analyse = o.collect_imatrix || o.collect_expert_profile || !o.prune_mask.empty();
  if (analyse && impl->experts)
    fail("--imatrix-out, --expert-profile-out and --prune-mask need resident experts (not --ssd-streaming)");
  if (const auto seed = stream::parse_bench_routing(o.bench_routing)) {
    if (analyse) fail("--bench-routing replaces the model's routing: it cannot be combined with model analysis");
    if (hp_preview.experts_pruned()) fail("--bench-routing: {} has pruned expert tensors", o.model_path);
    stream::ZipfRoutingParams zp;
    zp.n_layer = hp_preview.n_layer, zp.n_expert = hp_preview.n_expert, zp.k = hp_preview.n_expert_used;
    zp.seed = *seed;
    impl->bench_routing = std::make_unique<stream::ZipfRouter>(zp);
    mo.bench_routing = impl->bench_routing.get();
    impl->plan.residency += fmt::format("{}bench routing      zipf:{} (synthetic: zipf {}, reuse {}, guess recall {})",
                                        impl->plan.residency.empty() ? "" : "\n", *seed, zp.zipf, zp.reuse,
                                        zp.guess_recall);
  }
  // Built before the File moves into the Model: its tensor pointers stay valid across the move.
  impl->analysis = session::make_analysis(file, hp_preview, o.collect_imatrix, o.collect_expert_profile, o.prune_mask);
  impl->model = model::deepseek4::Model::from_file(std::move(file), mo);

  const auto& hp = impl->model->hparams();
  in.n_vocab = static_cast<int32_t>(hp.n_vocab);
  in.n_layer = hp.n_layer;
}

// The Qwen3.5/3.6 MoE part of Engine::open (CPU only; expert streaming as for deepseek4).
void open_qwen35moe(Engine::Impl& impl, gguf::File file, const EngineOptions& o) {
  EngineInfo& in = impl.info;
  if (o.backend != "cpu")
    fail("{}: qwen35moe runs on the CPU backend only so far (backend '{}')", o.model_path, o.backend);
  if (o.collect_imatrix || o.collect_expert_profile || !o.prune_mask.empty())
    fail("{}: imatrix collection, expert profiles and prune masks are implemented for deepseek4 only", o.model_path);
  const auto hp_preview = model::qwen35moe::HParams::from_gguf(file);
  in.n_ctx_train = hp_preview.context_length;
  in.n_ctx = o.ctx_size > 0 ? o.ctx_size : (in.n_ctx_train > 0 ? in.n_ctx_train : kFallbackCtx);
  impl.plan = make_plan(file, hp_preview, in.n_ctx);
  open_streaming(impl, file, PlanDims{hp_preview.n_embd, hp_preview.n_vocab, hp_preview.n_expert_used, false}, o);
  if (!o.bench_routing.empty()) fail("--bench-routing: implemented for deepseek4 files only");
  model::qwen35moe::Options qo;
  qo.max_batch = o.max_batch;
  qo.experts = impl.experts.get();
  impl.qwen = model::qwen35moe::Model::from_file(std::move(file), qo);
  const auto& hp = impl.qwen->hparams();
  in.n_vocab = static_cast<int32_t>(hp.n_vocab);
  in.n_layer = hp.n_layer;
}

}  // namespace

std::string MemoryPlan::describe() const {
  const std::string work =
      flops.matrix_per_token > 0
          ? fmt::format("\nwork per token    {:.2f} GFLOP in weight products, {:.2f} in the output head{}",
                        flops.matrix_per_token / 1e9, flops.head / 1e9,
                        flops.attention_counted()
                            ? fmt::format(", {:.2f} in attention at position 8191", flops.attention(8191) / 1e9)
                            : std::string())
          : std::string();
  return fmt::format(
      "model file        {} (mapped read-only; weights {}, {} read per decode token){}\n"
      "session state     {} fixed + {} per token = {} at {} tokens\n"
      "rewind checkpoint {} each{}{}{}{}",
      human_bytes(file_bytes), human_bytes(weights_bytes), human_bytes(decode_bytes_per_token), work,
      human_bytes(state_fixed_bytes), state_bytes_per_token,
      human_bytes(state_bytes_at_ctx), n_ctx, human_bytes(checkpoint_bytes), residency.empty() ? "" : "\n", residency,
      expert_streaming.empty() ? "" : "\n", expert_streaming);
}

Engine::Engine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Engine::~Engine() = default;

int64_t default_max_batch(const std::string& backend, bool experts_stream) {
  return backend == "cpu" ? 512 : experts_stream ? 2048 : 4096;
}

std::shared_ptr<const Engine> Engine::open(const EngineOptions& given) {
  if (given.max_batch < 0) fail("max_batch {} must be at least 1 (0: the backend's default)", given.max_batch);
  EngineOptions o = given;
  if (o.backend != "cpu") {
    // Fails early (before the model is opened) for a name or backend this build lacks.
    if (!compute::backend_is_shared(o.backend)) compute::make_backend({o.backend});
  }
  if (o.ctx_size < 0) fail("context size {} is negative", o.ctx_size);
  if (!std::filesystem::exists(o.model_path)) fail("{}: model file not found", o.model_path);

  auto impl = std::make_unique<Impl>();
  gguf::File file = gguf::File::open(o.model_path);
  if (o.max_batch == 0) o.max_batch = default_max_batch(o.backend, session::device_streams_experts(file, o));
  impl->options = o;
  impl->model_hash = session::model_identity_hash(file);
  // Logits under benchmark routing are another model's: payloads and disk caches must not mix.
  if (const auto seed = stream::parse_bench_routing(o.bench_routing))
    impl->model_hash ^= 0x9e3779b97f4a7c15ull * (*seed + 1) + 0x6265'6e63'6872'7400ull;
  if (file.find("tokenizer.ggml.tokens")) impl->tokenizer.emplace(Tokenizer::from_gguf(file));

  EngineInfo& in = impl->info;
  in.architecture = file.get_string("general.architecture").value_or("");
  in.model_name = file.get_string("general.name").value_or(std::filesystem::path(o.model_path).filename().string());
  in.chat_template = file.get_string("tokenizer.chat_template").value_or("");
  in.model_id = fmt::format("{:016x}", impl->model_hash);
  // Before the model: the host backend of expert host compute (open_streaming) runs on it.
  impl->pool = std::make_unique<ThreadPool>(o.threads);
  if (in.architecture == model::qwen35moe::kArch) {
    open_qwen35moe(*impl, std::move(file), o);
  } else {
    open_deepseek4(*impl, std::move(file), o);
  }
  if (!o.dir_steering_file.empty()) {
    if (!impl->model) fail("{}: directional steering is implemented for deepseek4 models only (this is {})",
                           o.dir_steering_file, in.architecture);
    const auto& hp = impl->model->hparams();
    const std::vector<uint8_t> bytes = steer::read_file(o.dir_steering_file);
    impl->steering = steer::decode(bytes, o.dir_steering_file);
    steer::check_model(*impl->steering, in.model_id, hp.n_layer, hp.n_embd, o.dir_steering_file);
    impl->steering_id = XXH64(bytes.data(), bytes.size(), 0);
    if (impl->steering_id == 0) impl->steering_id = 1;  // 0 means "plain" in payloads
    in.steering_file = o.dir_steering_file;
    in.steering_first_layer = impl->steering->first;
    in.steering_layers = impl->steering->count;
    in.steering_id = fmt::format("{:016x}", impl->steering_id);
  }
  for (float v : {o.dir_steering_attn, o.dir_steering_ffn})
    if (!std::isfinite(v)) fail("steering scale {} is not finite", v);
  if ((o.dir_steering_attn != 0.0f || o.dir_steering_ffn != 0.0f) && !impl->steering)
    fail("--dir-steering-attn / --dir-steering-ffn need --dir-steering-file");
  in.has_tokenizer = impl->tokenizer.has_value();
  if (impl->tokenizer) {
    const Tokenizer& t = *impl->tokenizer;
    if (t.n_vocab() > in.n_vocab)
      fail("{}: tokenizer has {} tokens but the model only {} logits", o.model_path, t.n_vocab(), in.n_vocab);
    in.bos_id = t.bos_id();
    in.eos_id = t.eos_id();
    if (in.eos_id) in.stop_ids.push_back(*in.eos_id);
    // The end-of-turn marker of each family's chat format also stops generation.
    for (const char* marker : {"<｜User｜>", "<|im_end|>"})
      if (auto u = t.find_token(marker); u && (!in.eos_id || *u != *in.eos_id)) in.stop_ids.push_back(*u);
  }
  if (compute::backend_is_shared(o.backend)) {
    compute::BackendOptions bo;
    bo.name = o.backend;
    bo.pool = impl->pool.get();
    impl->shared_backend = compute::make_backend(bo);
    impl->model->register_weights(*impl->shared_backend);
    if (impl->experts) attach_gpu_tier(*impl, o);
  }
  in.backend = o.backend;
  in.threads = impl->pool->size();
  in.act_quant_sim = o.act_quant_sim;
  return std::shared_ptr<const Engine>(new Engine(std::move(impl)));
}


const EngineInfo& Engine::info() const { return impl_->info; }

std::string Engine::expert_stats() const { return impl_->experts ? impl_->experts->stats().describe() : ""; }

std::optional<ExpertCounters> Engine::expert_counters() const {
  if (!impl_->experts) return std::nullopt;
  const stream::ProviderStats s = impl_->experts->stats();
  ExpertCounters c;
  c.tokens = s.tokens, c.hits = s.hits, c.inflight_hits = s.inflight_hits, c.misses = s.misses;
  c.evictions = s.evictions, c.reads = s.reads, c.bytes_read = s.bytes_read;
  for (int k = 0; k < 2; ++k) {
    c.prefetch_issued += s.prefetch_issued[k];
    c.prefetch_useful += s.prefetch_useful[k];
    c.prefetch_wasted += s.prefetch_wasted[k];
    c.prefetch_unresolved += s.prefetch_unresolved(k);
  }
  c.stall_seconds = static_cast<double>(s.stall_ns) / 1e9;
  c.cache_budget_bytes = s.budget_bytes, c.cache_bytes = s.cached_bytes;
  c.gpu_hits = s.gpu_hits, c.gpu_misses = s.gpu_misses, c.gpu_evictions = s.gpu_evictions, c.h2d_bytes = s.h2d_bytes;
  c.gpu_transient = s.gpu_transient;
  c.gpu_budget_bytes = static_cast<uint64_t>(s.gpu_slots) * s.gpu_slot_bytes;
  c.gpu_bytes = static_cast<uint64_t>(s.gpu_used) * s.gpu_slot_bytes;
  c.host_computed_bytes = s.host_computed_bytes;
  return c;
}
const MemoryPlan& Engine::memory_plan() const { return impl_->plan; }
const EngineOptions& Engine::options() const { return impl_->options; }

const Tokenizer& Engine::tokenizer() const {
  if (!impl_->tokenizer) fail("{}: the model file has no tokenizer (tokenizer.ggml.* keys)", impl_->options.model_path);
  return *impl_->tokenizer;
}

bool Engine::is_stop_token(int32_t id) const {
  for (int32_t s : impl_->info.stop_ids)
    if (s == id) return true;
  return false;
}

std::unique_ptr<Session> Engine::new_session() const { return new_session(SessionOptions{}); }

void Engine::write_imatrix(const std::string& path, const std::vector<std::string>& datasets, uint32_t chunk_count,
                           uint32_t chunk_size) const {
  if (!impl_->analysis || !impl_->analysis->cfg->imatrix) fail("write_imatrix: imatrix collection is off");
  quantize::Imatrix m = session::to_imatrix(*impl_->analysis);
  if (m.entries.empty()) fail("{}: no statistics collected yet (nothing was evaluated)", path);
  m.datasets = datasets;
  m.chunk_count = chunk_count;
  m.chunk_size = chunk_size;
  quantize::write_imatrix(path, m);
}

void Engine::write_expert_profile(const std::string& path) const {
  if (!impl_->analysis || !impl_->analysis->cfg->profile) fail("write_expert_profile: expert profile collection is off");
  quantize::write_profile(path, session::to_profile(*impl_->analysis));
}

uint64_t Engine::analysis_tokens() const {
  if (!impl_->analysis) return 0;
  std::lock_guard<std::mutex> lk(impl_->analysis->stats->mu);
  return impl_->analysis->stats->tokens;
}

std::string Engine::prune_description() const {
  if (!impl_->analysis || impl_->analysis->prune_method.empty()) return "";
  return fmt::format("prune mask {}: {} experts removed from routing ({})", impl_->options.prune_mask,
                     impl_->analysis->pruned_experts, impl_->analysis->prune_method);
}

}  // namespace ds4
