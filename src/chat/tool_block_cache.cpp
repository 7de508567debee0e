#include "chat/tool_block_cache.h"

#include "core/error.h"

namespace ds4::chat {

ToolBlockCache::ToolBlockCache(size_t capacity) : capacity_(capacity) {
  if (capacity == 0) fail("ToolBlockCache: capacity must be at least 1");
}

void ToolBlockCache::put(const std::vector<std::string>& ids, std::string block) {
  auto shared = std::make_shared<const std::string>(std::move(block));
  for (const std::string& id : ids) {
    if (id.empty()) continue;
    if (auto it = map_.find(id); it != map_.end()) {
      it->second->block = shared;
      lru_.splice(lru_.begin(), lru_, it->second);
      continue;
    }
    lru_.push_front(Entry{id, shared});
    map_.emplace(id, lru_.begin());
    if (map_.size() > capacity_) {
      map_.erase(lru_.back().id);
      lru_.pop_back();
    }
  }
}

std::optional<std::string> ToolBlockCache::get(std::string_view id) {
  auto it = map_.find(std::string(id));
  if (it == map_.end()) return std::nullopt;
  lru_.splice(lru_.begin(), lru_, it->second);
  return *it->second->block;
}

std::optional<std::string> ToolBlockCache::get_all(const std::vector<std::string>& ids) {
  if (ids.empty()) return std::nullopt;
  std::shared_ptr<const std::string> block;
  for (const std::string& id : ids) {
    auto it = map_.find(id);
    if (it == map_.end()) return std::nullopt;
    if (block && it->second->block != block) return std::nullopt;
    block = it->second->block;
  }
  for (const std::string& id : ids) lru_.splice(lru_.begin(), lru_, map_.find(id)->second);
  return *block;
}

}  // namespace ds4::chat
