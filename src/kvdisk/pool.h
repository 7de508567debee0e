#pragma once
// Several live sessions over one Engine, backed by a disk KV cache (store.h).
//
// Routing (sync): a prompt continues the live session with the longest common token prefix
// when that prefix covers at least half of the prompt the session last served (the same
// conversation, its last reply possibly re-rendered differently). Otherwise it is a new
// conversation: it takes an empty session, a new one while fewer than max_sessions exist,
// or the least recently used one, which is first saved to disk (reason evict). Then, when
// the disk holds a longer prefix of the prompt than the chosen session, that file's payload
// is loaded (its tokens must equal the prompt's first tokens, else it is not used), and only
// the rest is prefilled. Evaluation stays one call at a time on the engine.
//
// Save points (SavePolicy; names as antirez/ds4's flags):
//   cold       a new conversation's prompt of at most cold_max_tokens tokens: the state at
//              prompt - boundary_trim tokens, aligned down to a multiple of boundary_align
//              when that stays >= min_tokens, so that later requests, which append to the
//              conversation and re-render its last few tokens, still find it;
//   continued  every multiple of continued_interval tokens the session reaches, in prefill or
//              generation;
//   evict      before a session is taken for another conversation: its state at its last
//              prompt - boundary_trim tokens (the part later turns of it resend);
//   shutdown   save_all(): the same point for every live session.
// Nothing shorter than min_tokens is saved or looked up. A prefill is split at the save points
// and at prompt - boundary_trim, so each lands on a session checkpoint and an evict / shutdown
// save later rewinds to it without re-evaluating.
//
// Thread safety: one thread uses the pool (the server's worker, the CLI); stats() may be
// read from any thread.
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "ds4/engine.h"
#include "ds4/session.h"
#include "kvdisk/store.h"

namespace ds4::kvdisk {

struct SavePolicy {
  int64_t min_tokens = 512;
  int64_t cold_max_tokens = 30000;     // 0: no cold saves
  int64_t continued_interval = 10000;  // 0: no continued saves
  int64_t boundary_trim = 32;
  int64_t boundary_align = 2048;       // 0: not aligned
};

struct PoolOptions {
  int max_sessions = 3;
  SessionOptions session;
  SavePolicy policy;
  // Tool-call id → DSML blocks whose text occurs in a state's text (saved with it), and the
  // receiver of those found in a loaded file. Either may be empty.
  std::function<std::vector<ToolEntry>(std::string_view text)> tools_for;
  std::function<void(const std::vector<ToolEntry>&)> restore_tools;
  std::function<void(const std::string&)> log;  // one line per save / load; may be empty
};

struct PoolSync {
  int64_t reused = 0;     // prompt tokens not prefilled (kept in RAM or loaded from disk)
  int64_t from_disk = 0;  // of which restored from a disk file (0: none)
  int64_t evaluated = 0;  // tokens evaluated (prefill, and replay from a checkpoint)
  bool cancelled = false;
  double seconds = 0;
  bool new_conversation = false;
};

struct PoolStats {
  int64_t live_sessions = 0;   // sessions holding tokens
  uint64_t ram_evictions = 0;  // sessions taken over by another conversation
};

// Largest session count whose state at the context size (plus checkpoints) fits in half of
// `available_bytes`, capped at `wanted`, at least 1.
int sessions_that_fit(const MemoryPlan& plan, int max_checkpoints, uint64_t available_bytes, int wanted);

class SessionPool {
 public:
  SessionPool(std::shared_ptr<const Engine> engine, PoolOptions options, Store* store);

  // Makes the chosen session hold exactly `prompt` (see above). Throws ContextOverflow before
  // touching any session when the prompt does not fit.
  PoolSync sync(std::span<const int32_t> prompt, const EvalOptions& options = {});
  // The session of the last sync() (a fresh one before any).
  Session& current();
  int64_t n_ctx() const;
  // Call after appending tokens to current(): saves a continued point when one was reached.
  void after_append();
  // Saves every live session (reason shutdown, or as given).
  void save_all(SaveReason reason = SaveReason::Shutdown);
  PoolStats stats() const;
  int max_sessions() const { return opt_.max_sessions; }

 private:
  struct Slot {
    std::unique_ptr<Session> session;
    uint64_t last_used = 0;
    int64_t last_prompt = 0;
  };
  int choose(std::span<const int32_t> prompt, bool& continuing);
  void save_at(Slot& slot, int64_t n, SaveReason reason);
  void save_state(Session& s, SaveReason reason);
  int64_t boundary(int64_t n) const;
  void log(const std::string& m) const;

  std::shared_ptr<const Engine> engine_;
  PoolOptions opt_;
  Store* store_;
  std::vector<Slot> slots_;
  int current_ = -1;
  uint64_t clock_ = 0;
  std::atomic<int64_t> live_{0};
  std::atomic<uint64_t> ram_evictions_{0};
};

}  // namespace ds4::kvdisk
