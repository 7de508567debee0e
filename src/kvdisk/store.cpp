#include "kvdisk/store.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <set>

#include "core/error.h"
#include "ds4/tokenizer.h"

namespace ds4::kvdisk {

namespace fs = std::filesystem;

namespace {

std::string errno_text(int e) { return std::strerror(e); }

// Writes all of `b` to fd; false with errno set on failure.
bool write_all(int fd, const uint8_t* p, size_t n) {
  while (n > 0) {
    ssize_t w = ::write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    if (w == 0) {
      errno = EIO;
      return false;
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

bool read_all(int fd, uint8_t* p, size_t n) {
  while (n > 0) {
    ssize_t r = ::read(fd, p, n);
    if (r < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    if (r == 0) {
      errno = 0;
      return false;  // short file
    }
    p += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

void fsync_dir(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
}

}  // namespace

Store::Store(StoreOptions o) : opt_(std::move(o)) {}

Store::~Store() {
  if (lock_fd_ >= 0) ::close(lock_fd_);  // releases the flock
}

int64_t Store::now() const { return opt_.now ? opt_.now() : static_cast<int64_t>(std::time(nullptr)); }

void Store::warn(const std::string& m) const {
  if (opt_.warn) opt_.warn(m);
  else std::fprintf(stderr, "ds4: kv cache: %s\n", m.c_str());
}

std::string Store::path_of(const Digest& key) const { return (fs::path(opt_.dir) / (to_hex(key) + ".kv")).string(); }

std::unique_ptr<Store> Store::open(StoreOptions o) {
  if (o.dir.empty()) fail("kv cache: no directory given");
  std::error_code ec;
  fs::create_directories(o.dir, ec);
  if (ec) fail("kv cache: cannot create directory {}: {}", o.dir, ec.message());
  if (!fs::is_directory(o.dir, ec)) fail("kv cache: {} is not a directory", o.dir);
  std::unique_ptr<Store> s(new Store(std::move(o)));
  const std::string lock = (fs::path(s->opt_.dir) / "lock").string();
  s->lock_fd_ = ::open(lock.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (s->lock_fd_ < 0) fail("kv cache: cannot open lock file {}: {}", lock, errno_text(errno));
  if (::flock(s->lock_fd_, LOCK_EX | LOCK_NB) != 0) {
    const int e = errno;
    char buf[32] = {0};
    ssize_t n = ::pread(s->lock_fd_, buf, sizeof buf - 1, 0);
    std::string pid = n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string("?");
    while (!pid.empty() && (pid.back() == '\n' || pid.back() == ' ')) pid.pop_back();
    if (e == EWOULDBLOCK) fail("kv cache: {} is in use by another process (pid {}, lock {})", s->opt_.dir, pid, lock);
    fail("kv cache: cannot lock {}: {}", lock, errno_text(e));
  }
  const std::string me = std::to_string(::getpid()) + "\n";
  if (::ftruncate(s->lock_fd_, 0) == 0) {
    [[maybe_unused]] ssize_t w = ::pwrite(s->lock_fd_, me.data(), me.size(), 0);
  }
  s->scan();
  return s;
}

void Store::scan() {
  std::lock_guard lk(mu_);
  std::error_code ec;
  std::vector<fs::path> files;
  for (const auto& de : fs::directory_iterator(opt_.dir, ec)) files.push_back(de.path());
  if (ec) fail("kv cache: cannot list {}: {}", opt_.dir, ec.message());
  std::sort(files.begin(), files.end());
  for (const auto& p : files) {
    const std::string name = p.filename().string();
    const std::string where = p.string();
    if (name.size() > 7 && name.ends_with(".kv.tmp")) {
      // Left by a process that died while saving (we hold the lock: nobody is writing it).
      fs::remove(p, ec);
      warn(fmt::format("removed {}: an unfinished save", where));
      continue;
    }
    if (!name.ends_with(".kv")) continue;
    Digest key{};
    auto bad = [&](const std::string& why) {
      warn(fmt::format("removed {}: {}", where, why));
      fs::remove(p, ec);
      ++stats_.removed_bad;
    };
    if (!from_hex(std::string_view(name).substr(0, name.size() - 3), key)) {
      bad("the name is not <40 hex digits>.kv");
      continue;
    }
    int fd = ::open(where.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      warn(fmt::format("skipped {}: {}", where, errno_text(errno)));
      continue;
    }
    struct stat st {};
    uint8_t hb[kHeaderBytes];
    const bool got = ::fstat(fd, &st) == 0 && read_all(fd, hb, sizeof hb);
    ::close(fd);
    if (!got) {
      bad(fmt::format("truncated: {} bytes, shorter than the {}-byte header", st.st_size, kHeaderBytes));
      continue;
    }
    Header h;
    try {
      h = decode_header(std::span<const uint8_t>(hb, sizeof hb), where);
    } catch (const Error& e) {
      bad(e.what());
      continue;
    }
    if (h.model_id != opt_.model_id) {
      bad(fmt::format("written for model {}, this is model {}", h.model_id, opt_.model_id));
      continue;
    }
    if (h.key != key) {
      bad("the header's key differs from the file name");
      continue;
    }
    if (static_cast<uint64_t>(st.st_size) != h.file_bytes()) {
      bad(fmt::format("{} bytes, the header says {} ({})", st.st_size, h.file_bytes(),
                      static_cast<uint64_t>(st.st_size) < h.file_bytes() ? "truncated" : "trailing bytes"));
      continue;
    }
    EntryInfo e;
    e.key = key;
    e.n_tokens = h.n_tokens;
    e.file_bytes = h.file_bytes();
    e.hits = h.hits;
    e.created = h.created;
    e.last_used = h.last_used;
    e.reason = h.reason;
    entries_[key] = e;
  }
  enforce_budget_locked(Digest{});
}

std::optional<Match> Store::longest_prefix(std::span<const int32_t> prompt, const Tokenizer& tok, uint64_t min_tokens,
                                           uint64_t max_tokens) const {
  std::set<uint64_t> lengths;
  {
    std::lock_guard lk(mu_);
    for (const auto& [k, e] : entries_)
      if (e.n_tokens >= std::max<uint64_t>(min_tokens, 1) && e.n_tokens <= max_tokens && e.n_tokens <= prompt.size())
        lengths.insert(e.n_tokens);
  }
  if (lengths.empty()) return std::nullopt;
  std::vector<std::pair<uint64_t, Digest>> cands;
  Sha1 h;
  uint64_t i = 0;
  for (uint64_t n : lengths) {
    for (; i < n; ++i) h.update(tok.token_to_piece(prompt[static_cast<size_t>(i)]));
    cands.emplace_back(n, h.digest());
  }
  std::lock_guard lk(mu_);
  for (auto it = cands.rbegin(); it != cands.rend(); ++it) {
    auto e = entries_.find(it->second);
    if (e != entries_.end() && e->second.n_tokens == it->first) return Match{it->second, it->first};
  }
  return std::nullopt;
}

bool Store::contains(const Digest& key) const {
  std::lock_guard lk(mu_);
  return entries_.count(key) > 0;
}

void Store::remove_locked(const Digest& key, const std::string& why, bool count_bad) {
  std::error_code ec;
  fs::remove(path_of(key), ec);
  entries_.erase(key);
  if (count_bad) ++stats_.removed_bad;
  if (!why.empty()) warn(fmt::format("removed {}: {}", path_of(key), why));
}

void Store::discard(const Digest& key, const std::string& why) {
  std::lock_guard lk(mu_);
  remove_locked(key, why, true);
}

std::vector<ToolEntry> Store::all_tools() const {
  std::lock_guard lk(mu_);
  std::vector<const EntryInfo*> order;
  for (const auto& [k, e] : entries_) order.push_back(&e);
  std::sort(order.begin(), order.end(), [](const EntryInfo* a, const EntryInfo* b) { return a->last_used < b->last_used; });
  std::vector<ToolEntry> out;
  for (const EntryInfo* e : order) {
    const std::string path = path_of(e->key);
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    uint8_t hb[kHeaderBytes];
    bool ok = read_all(fd, hb, sizeof hb);
    std::vector<uint8_t> tb;
    try {
      if (ok) {
        const Header h = decode_header(std::span<const uint8_t>(hb, sizeof hb), path);
        if (h.tools_bytes > 0) {
          tb.resize(static_cast<size_t>(h.tools_bytes));
          const off_t at = static_cast<off_t>(kHeaderBytes + h.text_bytes + h.payload_bytes);
          ok = ::pread(fd, tb.data(), tb.size(), at) == static_cast<ssize_t>(tb.size());
          if (ok)
            for (auto& t : decode_tools(tb, path)) out.push_back(std::move(t));
        }
      }
    } catch (const Error& err) {
      warn(fmt::format("skipped the tool map of {}: {}", path, err.what()));
    }
    ::close(fd);
  }
  return out;
}

void Store::note_miss() {
  std::lock_guard lk(mu_);
  ++stats_.misses;
}

std::optional<Decoded> Store::load(const Digest& key) {
  std::lock_guard lk(mu_);
  auto it = entries_.find(key);
  if (it == entries_.end()) return std::nullopt;
  const std::string path = path_of(key);
  int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) {
    const int e = errno;
    entries_.erase(it);
    warn(fmt::format("cannot open {}: {}", path, errno_text(e)));
    return std::nullopt;
  }
  struct stat st {};
  std::vector<uint8_t> bytes;
  bool ok = ::fstat(fd, &st) == 0;
  if (ok) {
    bytes.resize(static_cast<size_t>(st.st_size));
    ok = read_all(fd, bytes.data(), bytes.size());
  }
  if (!ok) {
    ::close(fd);
    remove_locked(key, "unreadable or shorter than its size", true);
    return std::nullopt;
  }
  Decoded d;
  try {
    d = decode_file(bytes, path);
    if (d.header.model_id != opt_.model_id)
      fail("{}: written for model {}, this is model {}", path, d.header.model_id, opt_.model_id);
  } catch (const Error& e) {
    ::close(fd);
    remove_locked(key, e.what(), true);
    return std::nullopt;
  }
  stats_.bytes_read += bytes.size();
  ++stats_.hits;
  d.header.hits += 1;
  d.header.last_used = now();
  const std::vector<uint8_t> hb = encode_header(d.header);
  if (::pwrite(fd, hb.data(), hb.size(), 0) != static_cast<ssize_t>(hb.size()))
    warn(fmt::format("could not update the hit count of {}: {}", path, errno_text(errno)));
  ::close(fd);
  it->second.hits = d.header.hits;
  it->second.last_used = d.header.last_used;
  return d;
}

bool Store::save(SaveReason reason, std::string_view text, uint64_t n_tokens, uint64_t n_ctx,
                 std::span<const uint8_t> payload, const std::vector<ToolEntry>& tools) {
  const std::vector<uint8_t> tb = encode_tools(tools);
  Header h;
  h.model_id = opt_.model_id;
  h.key = Sha1::of(text);
  h.reason = reason;
  h.n_tokens = n_tokens;
  h.n_ctx = n_ctx;
  h.created = h.last_used = now();
  h.text_bytes = text.size();
  h.payload_bytes = payload.size();
  h.tools_bytes = tb.size();
  const uint64_t size = h.file_bytes();

  std::lock_guard lk(mu_);
  const std::string path = path_of(h.key);
  auto failed = [&](const std::string& why) {
    ++stats_.save_failures;
    warn(fmt::format("not saved ({} tokens, {}): {}", n_tokens, to_string(reason), why));
    return false;
  };
  if (size > opt_.budget_bytes)
    return failed(fmt::format("{} bytes exceed the whole budget of {} bytes", size, opt_.budget_bytes));
  if (auto old = entries_.find(h.key); old != entries_.end()) {
    h.hits = old->second.hits;  // a re-save of the same prefix keeps its history
    h.created = old->second.created;
  }
  const std::vector<uint8_t> hdr = encode_header(h);
  XXH64_state_t* xs = XXH64_createState();
  XXH64_reset(xs, 0);
  XXH64_update(xs, text.data(), text.size());
  XXH64_update(xs, payload.data(), payload.size());
  XXH64_update(xs, tb.data(), tb.size());
  const uint64_t sum = XXH64_digest(xs);
  XXH64_freeState(xs);

  const std::string tmp = path + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return failed(fmt::format("cannot create {}: {}", tmp, errno_text(errno)));
  bool ok = write_all(fd, hdr.data(), hdr.size()) &&
            write_all(fd, reinterpret_cast<const uint8_t*>(text.data()), text.size()) &&
            write_all(fd, payload.data(), payload.size()) && write_all(fd, tb.data(), tb.size()) &&
            write_all(fd, reinterpret_cast<const uint8_t*>(&sum), sizeof sum) && ::fsync(fd) == 0;
  const int e = errno;
  if (::close(fd) != 0 && ok) ok = false;
  if (!ok) {
    ::unlink(tmp.c_str());
    return failed(fmt::format("writing {}: {}", tmp, errno_text(e)));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int re = errno;
    ::unlink(tmp.c_str());
    return failed(fmt::format("renaming {}: {}", tmp, errno_text(re)));
  }
  fsync_dir(opt_.dir);
  EntryInfo info;
  info.key = h.key;
  info.n_tokens = n_tokens;
  info.file_bytes = size;
  info.hits = h.hits;
  info.created = h.created;
  info.last_used = h.last_used;
  info.reason = reason;
  entries_[h.key] = info;
  stats_.bytes_written += size;
  ++stats_.saves;
  ++stats_.saves_by_reason[static_cast<uint32_t>(reason)];
  enforce_budget_locked(h.key);
  return true;
}

void Store::enforce_budget_locked(const Digest& keep) {
  uint64_t total = 0;
  for (const auto& [k, e] : entries_) total += e.file_bytes;
  if (total <= opt_.budget_bytes) return;
  const double t = static_cast<double>(now());
  auto score = [&](const EntryInfo& e) {
    const double age = std::max(0.0, t - static_cast<double>(e.last_used));
    return (static_cast<double>(e.hits) + 1.0) * std::exp2(-age / opt_.half_life_seconds);
  };
  std::vector<const EntryInfo*> order;
  for (const auto& [k, e] : entries_)
    if (k != keep) order.push_back(&e);
  std::sort(order.begin(), order.end(), [&](const EntryInfo* a, const EntryInfo* b) {
    const double sa = score(*a), sb = score(*b);
    if (sa != sb) return sa < sb;
    return a->last_used < b->last_used;
  });
  std::vector<Digest> victims;
  for (const EntryInfo* e : order) {
    if (total <= opt_.budget_bytes) break;
    total -= e->file_bytes;
    victims.push_back(e->key);
  }
  for (const Digest& k : victims) {
    remove_locked(k, "", false);
    ++stats_.evictions;
  }
}

StoreStats Store::stats() const {
  std::lock_guard lk(mu_);
  StoreStats s = stats_;
  s.files = entries_.size();
  s.bytes = 0;
  for (const auto& [k, e] : entries_) s.bytes += e.file_bytes;
  return s;
}

std::vector<EntryInfo> Store::entries() const {
  std::lock_guard lk(mu_);
  std::vector<EntryInfo> v;
  for (const auto& [k, e] : entries_) v.push_back(e);
  return v;
}

}  // namespace ds4::kvdisk
