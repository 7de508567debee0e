// InferenceModel over the public Engine / Session API through kvdisk::SessionPool: several
// live sessions routed by longest common prefix, and the disk KV cache when configured.

#include <fmt/format.h>

#include <cstdio>

#include "ds4/engine.h"
#include "ds4/session.h"
#include "kvdisk/pool.h"
#include "server/inference_model.h"
#include "server/worker.h"

namespace ds4::server {

namespace {

class SessionModel final : public InferenceModel {
 public:
  SessionModel(std::shared_ptr<const Engine> engine, const SessionModelOptions& o) : engine_(std::move(engine)) {
    if (!o.kv_disk_dir.empty()) {
      kvdisk::StoreOptions so;
      so.dir = o.kv_disk_dir;
      so.model_id = engine_->info().model_id;
      so.budget_bytes = static_cast<uint64_t>(o.kv_disk_space_mb) << 20;
      so.warn = [](const std::string& m) { std::fprintf(stderr, "ds4-server: kv cache: %s\n", m.c_str()); };
      try {
        store_ = kvdisk::Store::open(so);
        size_t n_tools = 0;
        if (o.tools) {
          // Tool-call blocks of earlier runs, so that requests replaying their ids render the
          // sampled bytes (and so match the cached prefixes) from the first request on.
          for (const auto& e : store_->all_tools()) {
            o.tools->put(e.ids, e.block);
            n_tools += e.ids.size();
          }
        }
        fmt::print(stderr, "ds4-server: kv cache: {} ({} files, {} tool-call ids, {} MB budget)\n", o.kv_disk_dir,
                   store_->stats().files, n_tools, o.kv_disk_space_mb);
      } catch (const Error& e) {
        // Another server holds the directory, or it cannot be created: keep serving from RAM.
        fmt::print(stderr, "ds4-server: {}; serving without the disk KV cache\n", e.what());
        disk_error_ = true;
      }
    }
    kvdisk::PoolOptions po;
    po.max_sessions = o.max_sessions;
    po.session.n_ctx = o.n_ctx;
    po.policy.min_tokens = o.min_tokens;
    po.policy.cold_max_tokens = o.cold_max_tokens;
    po.policy.continued_interval = o.continued_interval;
    po.policy.boundary_trim = o.boundary_trim;
    po.policy.boundary_align = o.boundary_align;
    if (SharedToolCache* tools = o.tools) {
      po.tools_for = [tools](std::string_view text) {
        std::vector<kvdisk::ToolEntry> v;
        for (auto& [ids, block] : tools->blocks_in(text)) v.push_back({std::move(ids), std::move(block)});
        return v;
      };
      po.restore_tools = [tools](const std::vector<kvdisk::ToolEntry>& v) {
        for (const auto& e : v) tools->put(e.ids, e.block);
      };
    }
    po.log = [](const std::string& m) { std::fprintf(stderr, "ds4-server: kv cache: %s\n", m.c_str()); };
    pool_ = std::make_unique<kvdisk::SessionPool>(engine_, po, store_.get());
  }

  int64_t n_ctx() const override { return pool_->n_ctx(); }
  std::vector<int32_t> encode(std::string_view text, bool parse_special) const override {
    return engine_->tokenizer().encode(text, parse_special);
  }
  std::string piece(int32_t id) const override { return engine_->tokenizer().token_to_piece(id); }
  bool is_stop(int32_t id) const override { return engine_->is_stop_token(id); }
  std::string model_name() const override { return engine_->info().model_name; }

  const std::vector<int32_t>& tokens() const override { return pool_->current().tokens(); }
  SyncStats sync(std::span<const int32_t> tokens, const std::atomic<bool>* cancel) override {
    EvalOptions eo;
    eo.cancel = cancel;
    const kvdisk::PoolSync r = pool_->sync(tokens, eo);
    disk_tokens_ += static_cast<uint64_t>(r.from_disk);
    return SyncStats{r.reused, r.evaluated, r.cancelled, r.seconds, r.from_disk};
  }
  void set_sampler(const SamplerConfig& config) override { pool_->current().set_sampler(config); }
  int32_t sample(const SampleOptions& options) override { return pool_->current().sample(options); }
  Logprobs logprobs(int32_t chosen, int32_t n_top) const override { return pool_->current().logprobs(chosen, n_top); }
  void append(int32_t id) override {
    pool_->current().eval(std::span<const int32_t>(&id, 1));
    pool_->after_append();
  }
  void shutdown() override {
    if (!store_) return;
    const uint64_t before = store_->stats().saves;
    pool_->save_all(kvdisk::SaveReason::Shutdown);
    fmt::print(stderr, "ds4-server: kv cache: saved {} session(s) at shutdown\n", store_->stats().saves - before);
  }

  std::string prometheus() const override {
    std::string o;
    auto line = [&](const char* type, const char* name, const char* help, auto value) {
      o += fmt::format("# HELP {} {}\n# TYPE {} {}\n{} {}\n", name, help, name, type, name, value);
    };
    const kvdisk::PoolStats ps = pool_->stats();
    line("gauge", "ds4_live_sessions", "Sessions holding a conversation in RAM.", ps.live_sessions);
    line("gauge", "ds4_max_sessions", "Sessions kept in RAM at most (--max-sessions).", pool_->max_sessions());
    line("counter", "ds4_session_evictions_total", "Sessions taken over by another conversation.", ps.ram_evictions);
    line("gauge", "ds4_kv_disk_enabled", "1 when the disk KV cache is in use.", store_ ? 1 : 0);
    line("gauge", "ds4_kv_disk_unavailable", "1 when --kv-disk-dir was given but could not be used (locked, unwritable).",
         disk_error_ ? 1 : 0);
    const kvdisk::StoreStats s = store_ ? store_->stats() : kvdisk::StoreStats{};
    line("counter", "ds4_kv_disk_hits_total", "Prompts that loaded a prefix from disk.", s.hits);
    line("counter", "ds4_kv_disk_misses_total", "New conversations whose prompt found no usable prefix on disk.", s.misses);
    line("counter", "ds4_kv_disk_tokens_total", "Prompt tokens loaded from disk instead of prefilled.", disk_tokens_.load());
    line("counter", "ds4_kv_disk_bytes_read_total", "Bytes read from cache files.", s.bytes_read);
    line("counter", "ds4_kv_disk_bytes_written_total", "Bytes written to cache files.", s.bytes_written);
    o += "# HELP ds4_kv_disk_saves_total Cache files written, by save reason.\n# TYPE ds4_kv_disk_saves_total counter\n";
    for (auto r : {kvdisk::SaveReason::Cold, kvdisk::SaveReason::Continued, kvdisk::SaveReason::Evict,
                   kvdisk::SaveReason::Shutdown})
      o += fmt::format("ds4_kv_disk_saves_total{{reason=\"{}\"}} {}\n", kvdisk::to_string(r),
                       s.saves_by_reason[static_cast<int>(r)]);
    line("counter", "ds4_kv_disk_save_failures_total", "Saves that failed (disk full, I/O error, over budget).",
         s.save_failures);
    line("counter", "ds4_kv_disk_evictions_total", "Cache files removed to stay within the budget.", s.evictions);
    line("counter", "ds4_kv_disk_removed_total", "Truncated, corrupt or other-model files removed.", s.removed_bad);
    line("gauge", "ds4_kv_disk_files", "Cache files on disk.", s.files);
    line("gauge", "ds4_kv_disk_bytes", "Bytes of cache files on disk.", s.bytes);
    return o;
  }

 private:
  std::shared_ptr<const Engine> engine_;
  std::unique_ptr<kvdisk::Store> store_;
  std::unique_ptr<kvdisk::SessionPool> pool_;
  bool disk_error_ = false;
  std::atomic<uint64_t> disk_tokens_{0};
};

}  // namespace

std::unique_ptr<InferenceModel> make_session_model(std::shared_ptr<const Engine> engine, const SessionModelOptions& o) {
  return std::make_unique<SessionModel>(std::move(engine), o);
}

}  // namespace ds4::server
