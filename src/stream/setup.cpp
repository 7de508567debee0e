#include "stream/setup.h"

#include <fmt/format.h>

#include <algorithm>
#include <functional>

#include "core/error.h"
#include "gguf/gguf.h"
#include "stream/packed_format.h"

namespace ds4::stream {

StreamingSetup setup_streaming(const gguf::File& f, const StreamingRequest& r) {
  StreamingSetup s;
  if (!f.find_tensor(expert_tensor_name(0, 0))) {
    if (r.enable) fail("{}: --ssd-streaming: the model has no routed experts", f.path());
    return s;
  }
  // A file pruned per layer (ds4-gguf quantize --prune) has layers of different expert counts,
  // which the streaming store's layout (one count for all layers) cannot describe.
  if (experts_pruned_per_layer(f)) {
    if (r.enable || !r.trace_path.empty())
      fail("{}: --ssd-streaming / --trace-routing: experts were pruned per layer in this file "
           "(deepseek4.expert_count_per_layer); streaming needs one expert count for all layers: stream the "
           "unpruned file with --prune-mask instead",
           f.path());
    return s;
  }
  const ExpertLayout layout = ExpertLayout::from_gguf(f);
  const bool freed = count_freed_tensors(f, layout) > 0;
  if (!r.enable && r.trace_path.empty() && !freed) return s;

  ProviderOptions o;
  o.store.packed_path = r.packed_path;
  if (!r.cache_host.empty()) o.budget_bytes = parse_budget(r.cache_host, "--expert-cache-host", &o.budget_slots);
  o.policy = parse_policy(r.policy);
  if (r.io == "auto") o.io = IoKind::Auto;
  else if (r.io == "uring") o.io = IoKind::Uring;
  else if (r.io == "pread") o.io = IoKind::Pread;
  else fail("unknown expert I/O engine '{}' (auto, uring, pread)", r.io);
  o.record_reads = r.record_reads;
  o.prefetch_hash = r.prefetch_hash;
  o.prefetch_lookahead = r.prefetch_lookahead;
  o.protect = r.protect;
  o.host_compute = r.host_compute;
  o.trace_path = r.trace_path;
  s.provider = ExpertProvider::open(f, o);

  // One token touches k experts in every layer: a smaller cache would thrash within a token.
  const int64_t k = std::max<int64_t>(1, experts_used_per_token(f));
  const ExpertStore& st = s.provider->store();
  uint64_t max_slot = 0;
  for (int64_t il = 0; il < layout.n_layer; ++il)
    max_slot = std::max(max_slot, o.record_reads ? st.slot_bytes_record(il) : st.slot_bytes_split(il));
  const uint64_t floor = static_cast<uint64_t>(layout.n_layer * k) * max_slot;
  const uint64_t budget = s.provider->stats().budget_bytes;
  if (budget < floor)
    fail("--expert-cache-host {}: {} bytes is below one token's working set ({} layers x {} experts x {} bytes = {})",
         r.cache_host, budget, layout.n_layer, k, max_slot, floor);
  s.describe = fmt::format(
      "routed experts    streamed from {} ({}{}): host cache {:.1f} MiB = {} slots of {:.2f} MiB, policy {}, "
      "prefetch{}{}{}{}{}",
      st.source_path(), st.packed() ? "packed" : "GGUF", st.direct() ? ", O_DIRECT" : "", budget / 1048576.0,
      budget / max_slot, max_slot / 1048576.0, r.policy, r.prefetch_hash ? " hash" : "",
      r.prefetch_lookahead ? " lookahead" : "", r.protect ? " protect" : "",
      !r.prefetch_hash && !r.prefetch_lookahead && !r.protect ? " off" : "",
      fmt::format(", I/O {}{}", s.provider->io_name(),
                  o.record_reads && st.packed() ? ", one read per expert" : ""));
  if (freed && !r.enable) s.describe += " (the GGUF's experts were moved to the packed file)";
  return s;
}

}  // namespace ds4::stream
