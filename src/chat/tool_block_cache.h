#pragma once
// Bounded map from tool-call id to the exact DSML block the model sampled for it.
//
// Clients send tool calls back as JSON; re-rendering them canonically can differ from the
// sampled bytes (JSON spacing, key order, number spelling), which would make the prompt
// diverge from the tokens already in the KV cache. The server records each sampled block
// here under every call id it contains and replays it byte for byte when a later request
// carries the same ids. Least recently used ids are evicted beyond `capacity`.
#include <cstddef>
#include <list>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace ds4::chat {

class ToolBlockCache {
 public:
  explicit ToolBlockCache(size_t capacity);

  // Records `block` for every id in `ids` (empty ids are skipped).
  void put(const std::vector<std::string>& ids, std::string block);
  // The block recorded for `id`, marking it recently used.
  std::optional<std::string> get(std::string_view id);
  // The block shared by all `ids` (in the assistant message's order), or nullopt when any id
  // is unknown or they were sampled in different blocks.
  std::optional<std::string> get_all(const std::vector<std::string>& ids);

  // Every recorded block that occurs in `text` or begins in its last bytes (at least 16 of
  // them), with the ids recorded for it, least recently used first. The disk KV cache saves
  // them with a state whose text holds (the start of) the block.
  std::vector<std::pair<std::vector<std::string>, std::string>> blocks_in(std::string_view text) const;

  size_t size() const { return map_.size(); }
  size_t capacity() const { return capacity_; }

 private:
  struct Entry {
    std::string id;
    std::shared_ptr<const std::string> block;
  };
  size_t capacity_;
  std::list<Entry> lru_;  // front = most recently used
  std::unordered_map<std::string, std::list<Entry>::iterator> map_;
};

}  // namespace ds4::chat
