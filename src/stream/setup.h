#pragma once
// What the engine and the CLI ask for (--ssd-streaming, --expert-cache-host, ...), turned into
// an ExpertProvider, or none when the model runs resident from its mapping.
#include <memory>
#include <string>

#include "stream/provider.h"

namespace ds4::stream {

struct StreamingRequest {
  bool enable = false;           // --ssd-streaming
  std::string cache_host;        // --expert-cache-host: "8GB", "512MiB", N slots; "" = every expert
  std::string policy = "hot";    // --expert-cache-policy: hot | lru
  std::string io = "auto";       // auto | uring | pread
  bool record_reads = false;     // --expert-record-reads (ProviderOptions::record_reads)
  bool prefetch_hash = true;
  bool prefetch_lookahead = true;
  bool protect = true;
  bool host_compute = false;     // --expert-host-compute as the plan chose it (ProviderOptions::host_compute)
  std::string packed_path;       // "" = MODEL.gguf.experts when it exists
  std::string trace_path;        // --trace-routing FILE (streams, so the router's choices are seen)
};

struct StreamingSetup {
  std::unique_ptr<ExpertProvider> provider;  // null: resident
  std::string describe;                      // one line for the plan printed at start
};

// A provider when streaming was asked for, a routing trace is wanted, or the GGUF's experts
// were freed by pack-experts (then every expert is cached unless a budget was given).
// Refuses host budgets below one token's working set (n_layer x experts per token slots).
StreamingSetup setup_streaming(const gguf::File& f, const StreamingRequest& r);

}  // namespace ds4::stream
