#include "chat/tool_block_cache.h"

#include <algorithm>

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

namespace {
// True when `text` ends with the first k >= min_overlap bytes of `block` (a block cut by the
// end of a saved prefix still has to be replayed for later prompts to match that prefix).
bool ends_inside(std::string_view text, std::string_view block, size_t min_overlap) {
  const size_t top = std::min(text.size(), block.size() > 0 ? block.size() - 1 : 0);
  for (size_t k = top; k >= min_overlap && k > 0; --k)
    if (text.substr(text.size() - k) == block.substr(0, k)) return true;
  return false;
}
}  // namespace

std::vector<std::pair<std::vector<std::string>, std::string>> ToolBlockCache::blocks_in(std::string_view text) const {
  std::vector<std::pair<std::vector<std::string>, std::string>> out;
  std::unordered_map<const std::string*, size_t> index;  // block -> position in out (or npos)
  for (auto it = lru_.rbegin(); it != lru_.rend(); ++it) {
    const std::string* b = it->block.get();
    auto f = index.find(b);
    if (f == index.end()) {
      const bool inside = !b->empty() && (text.find(*b) != std::string_view::npos || ends_inside(text, *b, 16));
      f = index.emplace(b, inside ? out.size() : std::string::npos).first;
      if (inside) out.push_back({{}, *b});
    }
    if (f->second != std::string::npos) out[f->second].first.push_back(it->id);
  }
  return out;
}

}  // namespace ds4::chat
