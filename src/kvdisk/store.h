#pragma once
// A directory of disk KV cache files (format.h), keyed by the SHA-1 of the rendered text
// each state covers, with a byte budget.
//
// Crash safety: a file is written to <key>.kv.tmp, fsync'ed, renamed to <key>.kv and the
// directory fsync'ed, so a .kv name only ever holds a complete file; .tmp leftovers of a
// killed process are removed at open. Every file is checked (header checksum and size at open,
// body checksum and key on load, the payload's own checks when it is loaded into a session);
// a file that fails any check is reported with a warning and removed. Writes that fail
// (disk full, quota, I/O error) are reported with a warning; the caller keeps serving.
//
// Locking: open() takes an exclusive flock on <dir>/lock for the Store's lifetime (the kernel
// drops it when the process dies, kill -9 included). A second process on the same directory
// gets ds4::Error ("in use by process N") and must run without the disk cache.
//
// Budget: after each save, files are evicted lowest score first until the total fits, where
// score = (hits + 1) * 2^(-(now - last_used) / half_life): hit counts decayed with a half-life,
// so an entry that was useful long ago yields to a recent one. A file larger than the whole
// budget is not written.
//
// Thread safety: all methods may be called from any thread (one mutex).
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvdisk/format.h"
#include "kvdisk/sha1.h"

namespace ds4 {
class Tokenizer;
}

namespace ds4::kvdisk {

struct StoreOptions {
  std::string dir;
  std::string model_id;             // EngineInfo::model_id; other models' files are removed
  uint64_t budget_bytes = uint64_t{4096} << 20;
  double half_life_seconds = 3600;  // of the hit-count decay in the eviction score
  std::function<int64_t()> now;     // unix seconds; default: the system clock
  std::function<void(const std::string&)> warn;  // default: "ds4: kv cache: ..." on stderr
};

struct StoreStats {
  uint64_t hits = 0;            // files loaded
  uint64_t misses = 0;          // lookups that found no usable file (note_miss; the pool counts new conversations)
  uint64_t bytes_read = 0;
  uint64_t bytes_written = 0;
  uint64_t saves = 0;           // files written
  uint64_t save_failures = 0;   // writes that failed (disk full, I/O error, over budget)
  uint64_t evictions = 0;       // files removed by the budget
  uint64_t removed_bad = 0;     // truncated, corrupt or other-model files removed
  uint64_t files = 0;           // files now
  uint64_t bytes = 0;           // their total size
  uint64_t saves_by_reason[5] = {0, 0, 0, 0, 0};  // indexed by SaveReason
};

struct EntryInfo {
  Digest key{};
  uint64_t n_tokens = 0;
  uint64_t file_bytes = 0;
  uint64_t hits = 0;
  int64_t created = 0;
  int64_t last_used = 0;
  SaveReason reason = SaveReason::Cold;
};

struct Match {
  Digest key{};
  uint64_t n_tokens = 0;
};

class Store {
 public:
  // Creates the directory if needed, takes the lock, scans the files. Throws ds4::Error when
  // the directory cannot be created or opened, or another process holds the lock.
  static std::unique_ptr<Store> open(StoreOptions options);
  ~Store();
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  const std::string& dir() const { return opt_.dir; }
  std::string path_of(const Digest& key) const;

  // The longest entry whose text is the decoded text of prompt[0, n) for some n in
  // [min_tokens, max_tokens], found by hashing the prompt's pieces once. The caller still has
  // to check the loaded payload's tokens (two token sequences can decode to the same text).
  std::optional<Match> longest_prefix(std::span<const int32_t> prompt, const Tokenizer& tok, uint64_t min_tokens,
                                      uint64_t max_tokens) const;
  bool contains(const Digest& key) const;

  // Reads and checks a file; on success counts a hit and rewrites its hit count and last-used
  // time in place. On failure warns, removes the file and returns nullopt.
  std::optional<Decoded> load(const Digest& key);
  // Removes a file the caller found unusable (e.g. its payload failed to load), with a warning.
  void discard(const Digest& key, const std::string& why);
  void note_miss();
  // The tool maps of every file, least recently used file first (a server feeds them to its
  // replay cache at startup, before any request is rendered). Damaged maps are skipped with a
  // warning.
  std::vector<ToolEntry> all_tools() const;

  // Writes (or replaces) the file for `text`; then enforces the budget. False (with a
  // warning) when the write failed or the file alone exceeds the budget.
  bool save(SaveReason reason, std::string_view text, uint64_t n_tokens, uint64_t n_ctx,
            std::span<const uint8_t> payload, const std::vector<ToolEntry>& tools = {});

  StoreStats stats() const;
  std::vector<EntryInfo> entries() const;

 private:
  explicit Store(StoreOptions options);
  void scan();
  void remove_locked(const Digest& key, const std::string& why, bool count_bad);
  void enforce_budget_locked(const Digest& keep);
  int64_t now() const;
  void warn(const std::string& msg) const;

  StoreOptions opt_;
  int lock_fd_ = -1;
  mutable std::mutex mu_;
  std::map<Digest, EntryInfo> entries_;
  StoreStats stats_;
};

}  // namespace ds4::kvdisk
