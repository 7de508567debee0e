// Corruption sweep for the GGUF reader, built with ASan+UBSan by `make test-asan` and run by the
// main build's ctest. Deterministic: N mutated copies of the committed fixtures (truncations,
// bit flips, random bytes, integer fields smashed with boundary values, inserted/deleted/
// duplicated ranges) are parsed in memory. Each must either be rejected with ds4::Error or be
// accepted with every tensor inside the buffer, aligned, sized by its type and not overlapping.
// Any other exception, a violated invariant, or a sanitizer report fails the run.
//   gguf_corruption [iterations=250000] [seed=20260501]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <exception>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "gguf/gguf.h"

namespace {

using ds4::gguf::File;

std::vector<uint8_t> read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::vector<uint8_t> b{std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
  if (b.empty()) {
    std::fprintf(stderr, "cannot read fixture %s\n", path.c_str());
    std::exit(2);
  }
  return b;
}

struct Fixture {
  std::string name;
  std::vector<uint8_t> bytes;
  uint64_t header_end;  // data section start: mutations there change the parse
};

enum Mutation { kTruncate, kBitFlip, kRandomByte, kSmash32, kSmash64, kInsert, kDelete, kDuplicate, kCount };
const char* kMutationNames[kCount] = {"truncate", "bit-flip", "random-byte", "smash-u32", "smash-u64",
                                       "insert", "delete", "duplicate"};

class Mutator {
 public:
  explicit Mutator(uint64_t seed) : rng_(seed) {}

  uint64_t below(uint64_t n) { return n == 0 ? 0 : rng_() % n; }

  // Position biased towards the header, where nearly every byte is structure.
  uint64_t pos(const Fixture& fx, uint64_t size) {
    uint64_t limit = below(10) < 8 ? std::min(fx.header_end, size) : size;
    return below(limit);
  }

  uint64_t interesting(uint64_t size, uint64_t at) {
    const uint64_t values[] = {0, 1, 2, 3, 4, 5, 7, 8, 9, 10, 12, 13, 15, 16, 26, 30, 31, 32, 33, 63, 64, 255, 256,
                               4096, 0x7fffffffull, 0x80000000ull, 0xffffffffull, 1ull << 32, 1ull << 62,
                               (1ull << 63) - 1, 1ull << 63, ~0ull, ~0ull - 31, size, size - at, size + 1};
    uint64_t v = values[below(std::size(values))];
    return below(4) == 0 ? v + below(5) - 2 : v;  // sometimes off by a little
  }

  Mutation apply(const Fixture& fx, std::vector<uint8_t>& b) {
    auto m = static_cast<Mutation>(below(kCount));
    uint64_t n = b.size();
    switch (m) {
      case kTruncate: b.resize(below(10) < 8 ? below(std::min<uint64_t>(fx.header_end + 64, n) + 1) : below(n + 1)); break;
      case kBitFlip: if (n) b[pos(fx, n)] ^= static_cast<uint8_t>(1u << below(8)); break;
      case kRandomByte: if (n) b[pos(fx, n)] = static_cast<uint8_t>(below(256)); break;
      case kSmash32: case kSmash64: {
        size_t w = m == kSmash32 ? 4 : 8;
        if (n < w) break;
        uint64_t at = std::min(pos(fx, n), n - w);
        uint64_t v = interesting(n, at);
        std::memcpy(&b[at], &v, w);  // little-endian low bytes
        break;
      }
      case kInsert: {
        uint64_t at = pos(fx, n + 1);
        std::vector<uint8_t> ins(1 + below(below(2) ? 8 : 64));
        for (auto& x : ins) x = static_cast<uint8_t>(below(256));
        b.insert(b.begin() + at, ins.begin(), ins.end());
        break;
      }
      case kDelete: {
        if (!n) break;
        uint64_t at = pos(fx, n);
        uint64_t len = std::min<uint64_t>(1 + below(below(2) ? 8 : 64), n - at);
        b.erase(b.begin() + at, b.begin() + at + len);
        break;
      }
      case kDuplicate: {
        if (!n) break;
        uint64_t from = pos(fx, n);
        uint64_t len = std::min<uint64_t>(1 + below(48), n - from);
        std::vector<uint8_t> chunk(b.begin() + from, b.begin() + from + len);
        uint64_t to = pos(fx, n);
        if (below(2)) b.insert(b.begin() + to, chunk.begin(), chunk.end());
        else std::copy(chunk.begin(), chunk.begin() + std::min<uint64_t>(len, n - to), b.begin() + to);
        break;
      }
      case kCount: break;
    }
    return m;
  }

 private:
  std::mt19937_64 rng_;
};

// Invariants of an accepted file. Returns an empty string when they hold.
std::string check_accepted(const File& f, const uint8_t* base, uint64_t size) {
  if (f.file_size() != size) return "file_size differs from the buffer";
  if (f.data_offset() > size && !f.tensors().empty()) return "data section past the end";
  if (f.alignment() == 0 || (f.alignment() & (f.alignment() - 1))) return "alignment not a power of two";
  std::vector<std::pair<uint64_t, uint64_t>> extents;
  uint64_t sum = 0;
  for (const auto& t : f.tensors()) {
    const auto& tr = ds4::traits(t.type);
    if (t.ne.empty() || t.ne.size() > 4) return "bad n_dims for " + t.name;
    if (t.ne[0] % tr.block_elems) return "partial block in " + t.name;
    if (t.n_bytes != t.n_elements() / tr.block_elems * tr.block_bytes) return "n_bytes inconsistent for " + t.name;
    if (t.file_offset != f.data_offset() + t.offset || t.data != base + t.file_offset) return "data pointer wrong for " + t.name;
    if (t.file_offset % f.alignment()) return "unaligned data for " + t.name;
    if (t.file_offset > size || t.n_bytes > size - t.file_offset) return "tensor past end: " + t.name;
    for (uint64_t i = 0; i < t.n_bytes; ++i) sum += t.data[i];  // ASan checks each read
    extents.push_back({t.file_offset, t.file_offset + t.n_bytes});
  }
  std::sort(extents.begin(), extents.end());
  for (size_t i = 1; i < extents.size(); ++i)
    if (extents[i - 1].second > extents[i].first) return "overlapping tensors";
  // Typed access on every key must either work or throw ds4::Error.
  for (const auto& kv : f.metadata()) {
    try { (void)f.get_uint(kv.key); } catch (const ds4::Error&) {}
    try { (void)f.get_float(kv.key); } catch (const ds4::Error&) {}
    try { (void)f.get_string_array(kv.key); } catch (const ds4::Error&) {}
    try { (void)f.get_float_array(kv.key); } catch (const ds4::Error&) {}
    if (f.find(kv.key) != &kv.value) return "find() does not return the entry for " + kv.key;
  }
  (void)sum;
  return "";
}

}  // namespace

int main(int argc, char** argv) {
  uint64_t iterations = argc > 1 ? std::stoull(argv[1]) : 250000;
  uint64_t seed = argc > 2 ? std::stoull(argv[2]) : 20260501;
  std::vector<Fixture> fixtures;
  for (const char* name : {"tiny.gguf", "nested.gguf"}) {
    auto bytes = read_file(std::string(DS4_FIXTURES_DIR) + "/gguf/" + name);
    uint64_t header_end = File::parse(bytes, name).data_offset();  // the originals must be valid
    fixtures.push_back({name, std::move(bytes), header_end});
  }

  Mutator mut(seed);
  uint64_t rejected = 0, accepted = 0, failures = 0;
  uint64_t by_mutation[kCount] = {};
  auto t0 = std::chrono::steady_clock::now();
  for (uint64_t it = 0; it < iterations; ++it) {
    const Fixture& fx = fixtures[it % fixtures.size()];
    std::vector<uint8_t> work = fx.bytes;
    uint64_t n_mut = 1 + mut.below(4);
    for (uint64_t k = 0; k < n_mut; ++k) ++by_mutation[mut.apply(fx, work)];
    // An exact-size heap copy, so any read past the end is an ASan error.
    std::unique_ptr<uint8_t[]> buf(new uint8_t[std::max<size_t>(work.size(), 1)]);
    std::memcpy(buf.get(), work.data(), work.size());
    std::span<const uint8_t> bytes(buf.get(), work.size());
    try {
      File f = File::parse(bytes, fx.name);
      std::string bad = check_accepted(f, buf.get(), work.size());
      if (!bad.empty()) {
        ++failures;
        std::fprintf(stderr, "iteration %llu (%s): accepted file violates: %s\n", (unsigned long long)it,
                     fx.name.c_str(), bad.c_str());
      }
      ++accepted;
    } catch (const ds4::Error& e) {
      ++rejected;
      if (std::string(e.what()).rfind(fx.name + ": offset ", 0) != 0) {
        ++failures;
        std::fprintf(stderr, "iteration %llu: error without file and offset: %s\n", (unsigned long long)it, e.what());
      }
    } catch (const std::exception& e) {
      ++failures;
      std::fprintf(stderr, "iteration %llu (%s): unexpected exception: %s\n", (unsigned long long)it,
                   fx.name.c_str(), e.what());
    }
  }
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("gguf_corruption: seed %llu, %llu variants of %zu fixtures in %.1f s: %llu rejected with ds4::Error, "
              "%llu accepted (all invariants checked), %llu failures\n",
              (unsigned long long)seed, (unsigned long long)iterations, fixtures.size(), secs,
              (unsigned long long)rejected, (unsigned long long)accepted, (unsigned long long)failures);
  std::printf("mutations applied:");
  for (int m = 0; m < kCount; ++m) std::printf(" %s=%llu", kMutationNames[m], (unsigned long long)by_mutation[m]);
  std::printf("\n");
  return failures == 0 ? 0 : 1;
}
