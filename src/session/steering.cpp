// Directional steering: the direction file format, the steering hook and the collector.
#include "session/steering.h"

#include <xxhash.h>

#include <bit>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "core/error.h"

namespace ds4::steer {

static_assert(std::endian::native == std::endian::little, "steering files are written in host order");

using model::deepseek4::Sublayer;

const char* to_string(Position p) { return p == Position::Mean ? "mean" : "last"; }

const float* Directions::vec(int64_t il, Sublayer which) const {
  if (il < first || il >= static_cast<int64_t>(first) + count) return nullptr;
  const auto& v = which == Sublayer::Attention ? attn : ffn;
  return v.data() + static_cast<size_t>(il - first) * dim;
}

namespace {

bool is_hex16(const std::string& s) {
  if (s.size() != 16) return false;
  for (char c : s)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  return true;
}

template <class T>
void put(std::vector<uint8_t>& b, T v) {
  const auto* p = reinterpret_cast<const uint8_t*>(&v);
  b.insert(b.end(), p, p + sizeof(T));
}

template <class T>
T get(std::span<const uint8_t> b, size_t at) {
  T v;
  std::memcpy(&v, b.data() + at, sizeof(T));
  return v;
}

}  // namespace

std::vector<uint8_t> encode(const Directions& d) {
  if (!is_hex16(d.model_id)) fail("steering file: model id '{}' is not 16 lowercase hex digits", d.model_id);
  const size_t n = static_cast<size_t>(d.count) * d.dim;
  if (d.attn.size() != n || d.ffn.size() != n)
    fail("steering file: {} layers x {} need {} values per sublayer, got {} and {}", d.count, d.dim, n, d.attn.size(),
         d.ffn.size());
  std::vector<uint8_t> b;
  b.insert(b.end(), kMagic, kMagic + 8);
  put<uint32_t>(b, kVersion);
  put<uint32_t>(b, static_cast<uint32_t>(kHeaderBytes));
  b.insert(b.end(), d.model_id.begin(), d.model_id.end());
  for (uint32_t v : {d.model_layers, d.first, d.count, d.dim, static_cast<uint32_t>(d.position), d.n_positive,
                     d.n_negative, 0u})
    put<uint32_t>(b, v);
  for (uint32_t i = 0; i < d.count; ++i) {
    const auto* a = reinterpret_cast<const uint8_t*>(d.attn.data() + static_cast<size_t>(i) * d.dim);
    const auto* f = reinterpret_cast<const uint8_t*>(d.ffn.data() + static_cast<size_t>(i) * d.dim);
    b.insert(b.end(), a, a + d.dim * sizeof(float));
    b.insert(b.end(), f, f + d.dim * sizeof(float));
  }
  put<uint64_t>(b, XXH64(b.data(), b.size(), 0));
  return b;
}

Directions decode(std::span<const uint8_t> b, const std::string& where) {
  if (b.size() < kHeaderBytes + 8)
    fail("{}: steering file truncated: {} bytes, the header and checksum alone take {}", where, b.size(),
         kHeaderBytes + 8);
  if (std::memcmp(b.data(), kMagic, 8) != 0) fail("{}: not a steering file (bad magic at byte 0)", where);
  const uint32_t version = get<uint32_t>(b, 8), hbytes = get<uint32_t>(b, 12);
  if (version != kVersion) fail("{}: steering file version {} at byte 8, this build reads {}", where, version, kVersion);
  if (hbytes != kHeaderBytes) fail("{}: header size {} at byte 12, expected {}", where, hbytes, kHeaderBytes);
  Directions d;
  d.model_id.assign(reinterpret_cast<const char*>(b.data() + 16), 16);
  if (!is_hex16(d.model_id)) fail("{}: model id at byte 16 is not 16 lowercase hex digits", where);
  d.model_layers = get<uint32_t>(b, 32);
  d.first = get<uint32_t>(b, 36);
  d.count = get<uint32_t>(b, 40);
  d.dim = get<uint32_t>(b, 44);
  const uint32_t pos = get<uint32_t>(b, 48);
  d.n_positive = get<uint32_t>(b, 52);
  d.n_negative = get<uint32_t>(b, 56);
  if (d.count == 0) fail("{}: layer count at byte 40 is 0", where);
  if (static_cast<uint64_t>(d.first) + d.count > d.model_layers)
    fail("{}: layers {}..{} (bytes 36, 40) exceed the model's {} layers", where, d.first,
         static_cast<uint64_t>(d.first) + d.count - 1, d.model_layers);
  if (d.dim == 0 || d.dim > (1u << 20)) fail("{}: dimension {} at byte 44 is out of range [1, 2^20]", where, d.dim);
  if (pos > 1) fail("{}: position mode {} at byte 48 is neither 0 (last) nor 1 (mean)", where, pos);
  d.position = static_cast<Position>(pos);
  if (get<uint32_t>(b, 60) != 0) fail("{}: reserved field at byte 60 is not 0", where);
  const uint64_t want = kHeaderBytes + static_cast<uint64_t>(d.count) * d.dim * 2 * sizeof(float) + 8;
  if (b.size() != want)
    fail("{}: steering file is {} bytes; {} layers x 2 x {} floats make {}{}", where, b.size(), d.count, d.dim, want,
         b.size() < want ? " (truncated)" : "");
  const uint64_t sum = get<uint64_t>(b, b.size() - 8);
  if (sum != XXH64(b.data(), b.size() - 8, 0))
    fail("{}: checksum at byte {} does not match the contents (corrupt file)", where, b.size() - 8);
  const size_t n = static_cast<size_t>(d.count) * d.dim;
  d.attn.resize(n);
  d.ffn.resize(n);
  size_t at = kHeaderBytes;
  for (uint32_t i = 0; i < d.count; ++i) {
    std::memcpy(d.attn.data() + static_cast<size_t>(i) * d.dim, b.data() + at, d.dim * sizeof(float));
    at += d.dim * sizeof(float);
    std::memcpy(d.ffn.data() + static_cast<size_t>(i) * d.dim, b.data() + at, d.dim * sizeof(float));
    at += d.dim * sizeof(float);
  }
  for (size_t i = 0; i < n; ++i)
    if (!std::isfinite(d.attn[i]) || !std::isfinite(d.ffn[i]))
      fail("{}: layer {} holds a non-finite value", where, d.first + i / d.dim);
  return d;
}

std::vector<uint8_t> read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) fail("{}: cannot open steering file", path);
  std::vector<uint8_t> b((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  if (f.bad()) fail("{}: read failed", path);
  return b;
}

Directions load(const std::string& path) { return decode(read_file(path), path); }

void save(const std::string& path, const Directions& d) {
  const auto b = encode(d);
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (!f) fail("{}: cannot create", tmp);
    f.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
    if (!f) fail("{}: write failed", tmp);
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) fail("{}: cannot rename to {}: {}", tmp, path, ec.message());
}

void check_model(const Directions& d, const std::string& model_id, int64_t n_layer, int64_t dim,
                 const std::string& where) {
  if (d.model_id != model_id)
    fail("{}: steering file was built for model {}, this model is {}", where, d.model_id, model_id);
  if (d.model_layers != n_layer || d.dim != dim)
    fail("{}: steering file is for {} layers of width {}, this model has {} of width {}", where, d.model_layers, d.dim,
         n_layer, dim);
}

void SteerHook::after_sublayer(compute::Backend& be, int64_t il, Sublayer which, float* X, int64_t rows, int64_t) {
  const float s = which == Sublayer::Attention ? attn_ : ffn_;
  if (s == 0.0f) return;
  const float* v = d_.vec(il, which);
  if (!v) return;
  const size_t dim = d_.dim, n = static_cast<size_t>(rows) * n_hc_ * dim;
  tile_.resize(n);
  for (size_t i = 0; i < dim; ++i) tile_[i] = s * v[i];
  for (size_t at = dim; at < n; at += dim) std::memcpy(tile_.data() + at, tile_.data(), dim * sizeof(float));
  compute::Buffer<float> add(be, n);
  add.from_host(tile_);
  be.add(X, add.data(), static_cast<int64_t>(n));
}

CollectHook::CollectHook(int64_t first, int64_t count, int64_t dim, int n_hc, Position pos)
    : first_(first), count_(count), dim_(dim), n_hc_(n_hc), pos_(pos) {
  for (int s = 0; s < 2; ++s) {
    cur_[s].assign(static_cast<size_t>(count * dim), 0.0);
    sum_[s].assign(static_cast<size_t>(count * dim), 0.0);
  }
}

void CollectHook::begin() {
  for (int s = 0; s < 2; ++s) {
    std::fill(cur_[s].begin(), cur_[s].end(), 0.0);
    rows_seen_[s] = 0;
  }
}

void CollectHook::after_sublayer(compute::Backend& be, int64_t il, Sublayer which, float* X, int64_t rows, int64_t) {
  if (il < first_ || il >= first_ + count_) return;
  const int s = which == Sublayer::Attention ? 0 : 1;
  const size_t D = static_cast<size_t>(dim_), H = static_cast<size_t>(n_hc_);
  host_.resize(static_cast<size_t>(rows) * H * D);
  be.download(host_.data(), X, host_.size() * sizeof(float));
  double* cur = cur_[s].data() + static_cast<size_t>(il - first_) * D;
  const int64_t r0 = pos_ == Position::Last ? rows - 1 : 0;
  if (pos_ == Position::Last) std::fill(cur, cur + D, 0.0);
  for (int64_t r = r0; r < rows; ++r)
    for (size_t i = 0; i < D; ++i) {
      double m = 0;
      for (size_t j = 0; j < H; ++j) m += host_[(static_cast<size_t>(r) * H + j) * D + i];
      cur[i] += m / static_cast<double>(H);
    }
  if (il == first_) rows_seen_[s] += rows - r0;
}

void CollectHook::end() {
  for (int s = 0; s < 2; ++s) {
    if (rows_seen_[s] == 0) fail("steer: internal: a prompt ended without reaching layer {}", first_);
    const double k = pos_ == Position::Last ? 1.0 : static_cast<double>(rows_seen_[s]);
    for (size_t i = 0; i < cur_[s].size(); ++i) sum_[s][i] += cur_[s][i] / k;
  }
  ++prompts_;
}

Directions directions_from(const CollectHook& pos, const CollectHook& neg, const std::string& model_id,
                           uint32_t model_layers, uint32_t first, uint32_t count, uint32_t dim, Position p) {
  if (pos.prompts() == 0 || neg.prompts() == 0) fail("steer: both prompt sets need at least one prompt");
  Directions d;
  d.model_id = model_id;
  d.model_layers = model_layers;
  d.first = first;
  d.count = count;
  d.dim = dim;
  d.position = p;
  d.n_positive = static_cast<uint32_t>(pos.prompts());
  d.n_negative = static_cast<uint32_t>(neg.prompts());
  for (Sublayer w : {Sublayer::Attention, Sublayer::Ffn}) {
    const auto& a = pos.sums(w);
    const auto& b = neg.sums(w);
    auto& out = w == Sublayer::Attention ? d.attn : d.ffn;
    out.resize(static_cast<size_t>(count) * dim);
    for (uint32_t l = 0; l < count; ++l) {
      std::vector<double> diff(dim);
      double norm = 0;
      for (uint32_t i = 0; i < dim; ++i) {
        const size_t k = static_cast<size_t>(l) * dim + i;
        diff[i] = a[k] / static_cast<double>(pos.prompts()) - b[k] / static_cast<double>(neg.prompts());
        norm += diff[i] * diff[i];
      }
      norm = std::sqrt(norm);
      if (!(norm > 0) || !std::isfinite(norm))
        fail("steer: layer {} {}: the two prompt sets give the same mean activation (difference norm {})", first + l,
             w == Sublayer::Attention ? "attention" : "ffn", norm);
      for (uint32_t i = 0; i < dim; ++i) out[static_cast<size_t>(l) * dim + i] = static_cast<float>(diff[i] / norm);
    }
  }
  return d;
}

}  // namespace ds4::steer
