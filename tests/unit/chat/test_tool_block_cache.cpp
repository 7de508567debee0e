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

namespace ds4::chat {
namespace {

TEST(ChatToolBlockCache, BlocksInFindsContainedAndCutBlocksWithTheirIds) {
  ToolBlockCache c(8);
  const std::string a = "<tool_calls>alpha block with enough bytes</tool_calls>";
  const std::string b = "<tool_calls>beta block, also long enough</tool_calls>";
  c.put({"a1", "a2"}, a);
  c.put({"b1"}, b);
  c.put({"z"}, "<tool_calls>never in the text</tool_calls>");
  auto in = c.blocks_in("prefix " + a + " middle " + b.substr(0, 20));  // b is cut after 20 bytes
  ASSERT_EQ(in.size(), 2u);
  EXPECT_EQ(in[0].first, (std::vector<std::string>{"a1", "a2"}));
  EXPECT_EQ(in[0].second, a);
  EXPECT_EQ(in[1].first, std::vector<std::string>{"b1"});
  EXPECT_EQ(in[1].second, b);
  // A cut shorter than 16 bytes is not taken as the start of a block.
  EXPECT_EQ(c.blocks_in("text " + b.substr(0, 15)).size(), 0u);
  EXPECT_TRUE(c.blocks_in("").empty());
}

}  // namespace
}  // namespace ds4::chat
