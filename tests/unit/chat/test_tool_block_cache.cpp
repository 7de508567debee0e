// LRU map from tool-call id to the sampled DSML block.
#include "chat/tool_block_cache.h"
#include "core/error.h"

#include <gtest/gtest.h>

namespace ds4::chat {
namespace {

TEST(ChatToolBlockCache, StoresBlocksPerIdAndEvictsLeastRecentlyUsed) {
  ToolBlockCache cache(3);
  cache.put({"a", "b"}, "BLOCK1");
  cache.put({"c"}, "BLOCK2");
  EXPECT_EQ(cache.size(), 3u);
  EXPECT_EQ(cache.get("a").value(), "BLOCK1");  // a becomes most recent; b is now oldest
  cache.put({"d"}, "BLOCK3");
  EXPECT_FALSE(cache.get("b").has_value());
  EXPECT_EQ(cache.get("a").value(), "BLOCK1");
  EXPECT_EQ(cache.get("c").value(), "BLOCK2");
  EXPECT_EQ(cache.get("d").value(), "BLOCK3");
  EXPECT_EQ(cache.size(), 3u);
}

TEST(ChatToolBlockCache, GetAllNeedsOneSharedBlock) {
  ToolBlockCache cache(8);
  cache.put({"a", "b"}, "B1");
  cache.put({"c"}, "B2");
  EXPECT_EQ(cache.get_all({"a", "b"}).value(), "B1");
  EXPECT_FALSE(cache.get_all({"a", "c"}).has_value());
  EXPECT_FALSE(cache.get_all({"a", "zzz"}).has_value());
  EXPECT_FALSE(cache.get_all({}).has_value());
}

TEST(ChatToolBlockCache, ReputUpdatesAndSkipsEmptyIds) {
  ToolBlockCache cache(2);
  cache.put({"", "a"}, "old");
  EXPECT_EQ(cache.size(), 1u);
  cache.put({"a"}, "new");
  EXPECT_EQ(cache.get("a").value(), "new");
  EXPECT_THROW(ToolBlockCache(0), ds4::Error);
}

TEST(ChatToolBlockCache, ManyInsertionsStayBounded) {
  ToolBlockCache cache(100);
  for (int i = 0; i < 10000; ++i) cache.put({"id" + std::to_string(i)}, std::string(10, 'x'));
  EXPECT_EQ(cache.size(), 100u);
  EXPECT_TRUE(cache.get("id9999").has_value());
  EXPECT_FALSE(cache.get("id9899").has_value());
  EXPECT_TRUE(cache.get("id9900").has_value());
}

}  // namespace
}  // namespace ds4::chat
