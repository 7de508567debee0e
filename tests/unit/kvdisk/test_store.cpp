// Disk KV cache store: save / reopen / load, hit counts persisted, lock, damaged and foreign
// files removed, disk full (a real write failure under RLIMIT_FSIZE), budget eviction order,
// and kill -9 in the middle of saves leaving nothing that is later trusted.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "core/error.h"
#include "kv_test_util.h"
#include "kvdisk/store.h"

namespace ds4::kvdisk {
namespace {

using namespace test;

constexpr const char* kModel = "00112233445566aa";

struct Opened {
  std::vector<std::string> warnings;
  int64_t clock = 1000;
  std::unique_ptr<Store> store;
};

std::unique_ptr<Opened> open_store(const std::string& dir, uint64_t budget = uint64_t{1} << 30,
                                   const char* model = kModel) {
  auto o = std::make_unique<Opened>();
  StoreOptions so;
  so.dir = dir;
  so.model_id = model;
  so.budget_bytes = budget;
  Opened* raw = o.get();
  so.now = [raw] { return raw->clock; };
  so.warn = [raw](const std::string& m) { raw->warnings.push_back(m); };
  o->store = Store::open(so);
  return o;
}

bool any_contains(const std::vector<std::string>& v, const std::string& s) {
  for (const auto& x : v)
    if (x.find(s) != std::string::npos) return true;
  return false;
}

TEST(KvStore, SaveReopenLoadKeepsBytesAndCountsHits) {
  const std::string dir = scratch_dir("d");
  const auto payload = pattern(5000, 3);
  {
    auto o = open_store(dir);
    ASSERT_TRUE(o->store->save(SaveReason::Cold, "conversation text", 17, 4096, payload, {{{"call_1"}, "B"}}));
    EXPECT_EQ(o->store->stats().saves, 1u);
    EXPECT_EQ(o->store->stats().saves_by_reason[static_cast<int>(SaveReason::Cold)], 1u);
  }
  EXPECT_EQ(names_in(dir), (std::vector<std::string>{to_hex(Sha1::of("conversation text")) + ".kv", "lock"}));
  auto o = open_store(dir);
  o->clock = 5000;
  ASSERT_EQ(o->store->entries().size(), 1u);
  EXPECT_EQ(o->store->entries()[0].n_tokens, 17u);
  auto d = o->store->load(Sha1::of("conversation text"));
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->payload, payload);
  EXPECT_EQ(d->text, "conversation text");
  EXPECT_EQ(d->tools.size(), 1u);
  EXPECT_EQ(d->header.hits, 1u);
  const auto tools = o->store->all_tools();
  ASSERT_EQ(tools.size(), 1u);
  EXPECT_EQ(tools[0].ids, std::vector<std::string>{"call_1"});
  EXPECT_EQ(tools[0].block, "B");
  EXPECT_EQ(o->store->stats().hits, 1u);
  EXPECT_EQ(o->store->stats().bytes_read, d->header.file_bytes());
  o.reset();
  // The hit count and last-used time were rewritten in the file.
  auto o2 = open_store(dir);
  ASSERT_EQ(o2->store->entries().size(), 1u);
  EXPECT_EQ(o2->store->entries()[0].hits, 1u);
  EXPECT_EQ(o2->store->entries()[0].last_used, 5000);
  EXPECT_TRUE(o2->warnings.empty());
}

TEST(KvStore, SecondOpenOnTheSameDirectoryIsRefusedUntilTheFirstCloses) {
  const std::string dir = scratch_dir("d");
  auto a = open_store(dir);
  std::string msg;
  try {
    open_store(dir);
  } catch (const Error& e) {
    msg = e.what();
  }
  EXPECT_NE(msg.find("in use by another process (pid " + std::to_string(::getpid())), std::string::npos) << msg;
  // Another process is refused too.
  pid_t pid = fork();
  if (pid == 0) {
    try {
      open_store(dir);
      _exit(0);
    } catch (const Error&) {
      _exit(3);
    }
  }
  int status = 0;
  waitpid(pid, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 3);
  a.reset();
  EXPECT_NO_THROW(open_store(dir));
}

TEST(KvStore, TruncatedCorruptForeignAndLeftoverFilesAreRemovedWithAWarning) {
  const std::string dir = scratch_dir("d");
  const auto payload = pattern(3000, 1);
  std::vector<std::string> texts = {"good one", "truncated one", "corrupt body", "other model", "renamed"};
  {
    auto o = open_store(dir);
    for (const auto& t : texts) ASSERT_TRUE(o->store->save(SaveReason::Continued, t, 8, 64, payload));
  }
  auto path = [&](const std::string& t) { return (fs::path(dir) / (to_hex(Sha1::of(t)) + ".kv")).string(); };
  {  // cut the tail off
    auto b = read_bytes(path("truncated one"));
    b.resize(b.size() - 100);
    write_bytes(path("truncated one"), b);
  }
  {  // flip a payload byte: the header is fine, the body checksum is not
    auto b = read_bytes(path("corrupt body"));
    b[128 + 12 + 50] ^= 0x40;
    write_bytes(path("corrupt body"), b);
  }
  {  // the same file for another model
    auto b = read_bytes(path("other model"));
    Header h = decode_header(b, "x");
    h.model_id = "ffffffffffffffff";
    auto hb = encode_header(h);
    std::copy(hb.begin(), hb.end(), b.begin());
    write_bytes(path("other model"), b);
  }
  fs::rename(path("renamed"), fs::path(dir) / (std::string(40, 'a') + ".kv"));
  write_bytes((fs::path(dir) / (to_hex(Sha1::of("half")) + ".kv.tmp")).string(), pattern(77, 2));
  write_bytes((fs::path(dir) / "notes.txt").string(), pattern(5, 2));

  auto o = open_store(dir);
  EXPECT_TRUE(any_contains(o->warnings, "truncated")) << ::testing::PrintToString(o->warnings);
  EXPECT_TRUE(any_contains(o->warnings, "written for model ffffffffffffffff"));
  EXPECT_TRUE(any_contains(o->warnings, "differs from the file name"));
  EXPECT_TRUE(any_contains(o->warnings, "an unfinished save"));
  EXPECT_EQ(o->store->entries().size(), 2u);  // good + corrupt body (found on load)
  EXPECT_FALSE(o->store->load(Sha1::of("corrupt body")).has_value());
  EXPECT_TRUE(any_contains(o->warnings, "body checksum mismatch"));
  auto good = o->store->load(Sha1::of("good one"));
  ASSERT_TRUE(good.has_value());
  EXPECT_EQ(good->payload, payload);
  EXPECT_EQ(o->store->stats().removed_bad, 4u);
  // Only the good file, the lock and the unrelated file are left.
  EXPECT_EQ(names_in(dir), (std::vector<std::string>{to_hex(Sha1::of("good one")) + ".kv", "lock", "notes.txt"}));
  // A file the caller found unusable (e.g. its payload did not load) is removed on request.
  o->store->discard(Sha1::of("good one"), "payload rejected");
  EXPECT_FALSE(o->store->contains(Sha1::of("good one")));
  EXPECT_EQ(names_in(dir), (std::vector<std::string>{"lock", "notes.txt"}));
}

// A real failing write: the child process gets a 64 KiB file-size limit (write() returns
// EFBIG, the same path as ENOSPC), saves a file over it and one under it.
TEST(KvStore, AFailedWriteWarnsLeavesNoFileAndTheStoreKeepsWorking) {
  const std::string dir = scratch_dir("d");
  pid_t pid = fork();
  if (pid == 0) {
    signal(SIGXFSZ, SIG_IGN);
    struct rlimit rl {64 * 1024, 64 * 1024};
    setrlimit(RLIMIT_FSIZE, &rl);
    int code = 0;
    try {
      auto o = open_store(dir);
      if (o->store->save(SaveReason::Cold, "big", 10, 64, pattern(200 * 1024, 1))) code |= 1;
      if (!any_contains(o->warnings, "not saved (10 tokens, cold): writing")) code |= 2;
      if (!any_contains(o->warnings, "File too large")) code |= 4;
      if (o->store->stats().save_failures != 1) code |= 8;
      if (!o->store->save(SaveReason::Cold, "small", 10, 64, pattern(1000, 1))) code |= 16;
      if (!o->store->load(Sha1::of("small"))) code |= 32;
    } catch (...) {
      code |= 64;
    }
    _exit(code);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  EXPECT_EQ(names_in(dir), (std::vector<std::string>{to_hex(Sha1::of("small")) + ".kv", "lock"}));
}

TEST(KvStore, BudgetEvictsTheLowestDecayedHitScoreFirst) {
  const std::string dir = scratch_dir("d");
  const auto payload = pattern(10000, 1);  // files of ~10 KB each
  const uint64_t one = 128 + 1 + payload.size() + 8;
  auto o = open_store(dir, 3 * one + 10);
  // a at t=1000 with 3 hits, b at t=2000, c at t=3000 with 0 hits.
  o->clock = 1000;
  ASSERT_TRUE(o->store->save(SaveReason::Cold, "a", 1, 8, payload));
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(o->store->load(Sha1::of("a")));
  o->clock = 2000;
  ASSERT_TRUE(o->store->save(SaveReason::Cold, "b", 1, 8, payload));
  o->clock = 3000;
  ASSERT_TRUE(o->store->save(SaveReason::Cold, "c", 1, 8, payload));
  // At t=3600 (half-life 3600 s): a = 4 * 2^(-2600/3600) = 2.4, b = 2^(-1600/3600) = 0.73,
  // c = 2^(-600/3600) = 0.89: b goes.
  o->clock = 3600;
  ASSERT_TRUE(o->store->save(SaveReason::Cold, "d", 1, 8, payload));
  EXPECT_FALSE(o->store->contains(Sha1::of("b")));
  EXPECT_TRUE(o->store->contains(Sha1::of("a")));
  EXPECT_TRUE(o->store->contains(Sha1::of("c")));
  EXPECT_TRUE(o->store->contains(Sha1::of("d")));
  EXPECT_EQ(o->store->stats().evictions, 1u);
  EXPECT_LE(o->store->stats().bytes, 3 * one + 10);
  // At t=30000: a = 4 * 2^(-29000/3600) = 0.0150, c = 2^(-27000/3600) = 0.0055,
  // d = 2^(-26400/3600) = 0.0062: c goes.
  o->clock = 30000;
  ASSERT_TRUE(o->store->save(SaveReason::Cold, "e", 1, 8, payload));
  EXPECT_FALSE(o->store->contains(Sha1::of("c")));
  EXPECT_TRUE(o->store->contains(Sha1::of("a")));
  o->clock = 31000;
  ASSERT_TRUE(o->store->save(SaveReason::Cold, "f", 1, 8, payload));
  // a = 4 * 2^(-30000/3600) = 0.0124, d = 2^(-27400/3600) = 0.0051: d goes.
  EXPECT_FALSE(o->store->contains(Sha1::of("d")));
  o->clock = 60000;
  ASSERT_TRUE(o->store->save(SaveReason::Cold, "g", 1, 8, payload));
  // a = 4 * 2^(-59000/3600) = 4.8e-5 < e = 2^(-30000/3600) = 3.1e-3: a goes at last.
  EXPECT_FALSE(o->store->contains(Sha1::of("a")));
  EXPECT_EQ(o->store->entries().size(), 3u);
  // A file larger than the whole budget is refused with a warning.
  EXPECT_FALSE(o->store->save(SaveReason::Cold, "huge", 1, 8, pattern(4 * one, 1)));
  EXPECT_TRUE(any_contains(o->warnings, "exceed the whole budget"));
  EXPECT_EQ(o->store->entries().size(), 3u);
  // Reopening with a smaller budget trims at once.
  o.reset();
  auto small = open_store(dir, one + 10);
  EXPECT_EQ(small->store->entries().size(), 1u);
}

// kill -9 while a child saves files in a loop: every .kv file left is complete and loads,
// and the unfinished .tmp is removed at the next open, never trusted.
TEST(KvStore, KillDuringSavesLeavesOnlyCompleteFiles) {
  const std::string dir = scratch_dir("d");
  const auto payload = pattern(24 << 20, 5);  // 24 MiB: a save takes long enough to be hit
  for (int round = 0; round < 3; ++round) {
    pid_t pid = fork();
    if (pid == 0) {
      auto o = open_store(dir);
      for (int i = 0;; ++i) o->store->save(SaveReason::Continued, "r" + std::to_string(round) + "_" + std::to_string(i), 1, 8, payload);
    }
    // Wait until a .tmp exists (a save is under way), then kill.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    bool seen = false;
    while (!seen && std::chrono::steady_clock::now() < deadline) {
      for (const auto& n : names_in(dir))
        if (n.ends_with(".tmp") && fs::file_size(fs::path(dir) / n) > 0) seen = true;
      if (!seen) std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    kill(pid, SIGKILL);
    int status = 0;
    waitpid(pid, &status, 0);
    ASSERT_TRUE(seen);
  }
  bool had_tmp = false;
  for (const auto& n : names_in(dir)) had_tmp = had_tmp || n.ends_with(".tmp");
  auto o = open_store(dir, uint64_t{1} << 40);
  for (const auto& n : names_in(dir)) EXPECT_FALSE(n.ends_with(".tmp")) << n;
  if (had_tmp) {
    EXPECT_TRUE(any_contains(o->warnings, "an unfinished save"));
  }
  for (const auto& e : o->store->entries()) {
    auto d = o->store->load(e.key);
    ASSERT_TRUE(d.has_value()) << to_hex(e.key);
    EXPECT_EQ(d->payload, payload);
  }
  EXPECT_EQ(o->store->stats().removed_bad, 0u);
}

}  // namespace
}  // namespace ds4::kvdisk
