#include "quantize/expert_profile.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <numeric>
#include <random>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace ds4::quantize {

using nlohmann::json;

namespace {

json key_json(const ModelKey& k) {
  json hl = json::array();
  for (int64_t l = 0; l < k.n_layer; ++l)
    if (k.hash_layer[static_cast<size_t>(l)]) hl.push_back(l);
  return {{"architecture", k.architecture}, {"name", k.name},          {"n_layer", k.n_layer},
          {"n_expert", k.n_expert},         {"n_expert_used", k.n_expert_used}, {"hash_layers", hl}};
}

template <class T>
T field(const json& j, const char* key, const std::string& where) {
  if (!j.is_object() || !j.contains(key)) fail("{}: missing \"{}\"", where, key);
  try {
    return j.at(key).get<T>();
  } catch (const json::exception&) {
    fail("{}: \"{}\" has the wrong type", where, key);
  }
}

ModelKey key_from(const json& j, const std::string& where) {
  ModelKey k;
  const json& m = j.contains("model") ? j.at("model") : json();
  const std::string w = where + ": model";
  k.architecture = field<std::string>(m, "architecture", w);
  k.name = field<std::string>(m, "name", w);
  k.n_layer = field<int64_t>(m, "n_layer", w);
  k.n_expert = field<int64_t>(m, "n_expert", w);
  k.n_expert_used = field<int64_t>(m, "n_expert_used", w);
  if (k.n_layer < 1 || k.n_layer > 4096 || k.n_expert < 1 || k.n_expert > 65536 || k.n_expert_used < 1 ||
      k.n_expert_used > k.n_expert)
    fail("{}: implausible counts (n_layer {}, n_expert {}, n_expert_used {})", w, k.n_layer, k.n_expert, k.n_expert_used);
  k.hash_layer.assign(static_cast<size_t>(k.n_layer), false);
  for (const auto& l : field<std::vector<int64_t>>(m, "hash_layers", w)) {
    if (l < 0 || l >= k.n_layer) fail("{}: hash layer {} out of range", w, l);
    k.hash_layer[static_cast<size_t>(l)] = true;
  }
  return k;
}

json parse_file(const std::string& path, const char* format) {
  std::ifstream f(path, std::ios::binary);
  if (!f) fail("{}: cannot open", path);
  std::stringstream ss;
  ss << f.rdbuf();
  json j;
  try {
    j = json::parse(ss.str());
  } catch (const json::exception& e) {
    fail("{}: not valid JSON ({})", path, e.what());
  }
  if (!j.is_object() || j.value("format", std::string()) != format)
    fail("{}: not a {} file (\"format\" is not \"{}\")", path, format, format);
  return j;
}

size_t keep_count(int64_t n_expert, int64_t k, double keep_fraction) {
  int64_t keep = static_cast<int64_t>(std::ceil(keep_fraction * static_cast<double>(n_expert) - 1e-9));
  return static_cast<size_t>(std::clamp<int64_t>(keep, k, n_expert));
}

}  // namespace

void write_file_atomic(const std::string& path, const std::string& bytes) {
  const std::string tmp = path + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail("{}: cannot create", tmp);
  size_t off = 0;
  while (off < bytes.size()) {
    ssize_t n = ::write(fd, bytes.data() + off, bytes.size() - off);
    if (n <= 0) {
      ::close(fd);
      ::unlink(tmp.c_str());
      fail("{}: write failed", tmp);
    }
    off += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    ::unlink(tmp.c_str());
    fail("{}: fsync/close failed", tmp);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    ::unlink(tmp.c_str());
    fail("{}: cannot rename {} over it", path, tmp);
  }
}

void ExpertProfile::reset(const ModelKey& k) {
  model = k;
  tokens = 0;
  count.assign(static_cast<size_t>(k.n_layer), std::vector<uint64_t>(static_cast<size_t>(k.n_expert), 0));
  weight.assign(static_cast<size_t>(k.n_layer), std::vector<double>(static_cast<size_t>(k.n_expert), 0.0));
}

void ExpertProfile::merge(const ExpertProfile& o) {
  if (o.model.n_layer != model.n_layer || o.model.n_expert != model.n_expert || o.model.name != model.name)
    fail("expert profile merge: profiles of different models ({} vs {})", model.name, o.model.name);
  tokens += o.tokens;
  for (size_t l = 0; l < count.size(); ++l)
    for (size_t e = 0; e < count[l].size(); ++e) count[l][e] += o.count[l][e], weight[l][e] += o.weight[l][e];
}

void write_profile(const std::string& path, const ExpertProfile& p) {
  json layers = json::array();
  for (size_t l = 0; l < p.count.size(); ++l)
    layers.push_back({{"layer", l}, {"hash", static_cast<bool>(p.model.hash_layer[l])}, {"count", p.count[l]},
                      {"weight", p.weight[l]}});
  json j = {{"format", "ds4-expert-profile"}, {"version", 1}, {"model", key_json(p.model)}, {"tokens", p.tokens},
            {"layers", layers}};
  write_file_atomic(path, j.dump(1) + "\n");
}

ExpertProfile read_profile(const std::string& path) {
  const json j = parse_file(path, "ds4-expert-profile");
  ExpertProfile p;
  p.reset(key_from(j, path));
  p.tokens = field<uint64_t>(j, "tokens", path);
  const auto layers = field<json>(j, "layers", path);
  if (!layers.is_array() || static_cast<int64_t>(layers.size()) != p.model.n_layer)
    fail("{}: \"layers\" must list {} layers", path, p.model.n_layer);
  for (size_t l = 0; l < layers.size(); ++l) {
    const std::string w = fmt::format("{}: layers[{}]", path, l);
    auto c = field<std::vector<uint64_t>>(layers[l], "count", w);
    auto wt = field<std::vector<double>>(layers[l], "weight", w);
    if (static_cast<int64_t>(c.size()) != p.model.n_expert || static_cast<int64_t>(wt.size()) != p.model.n_expert)
      fail("{}: count and weight need {} experts each", w, p.model.n_expert);
    for (double v : wt)
      if (!std::isfinite(v) || v < 0) fail("{}: weight {} is not finite and >= 0", w, v);
    p.count[l] = std::move(c);
    p.weight[l] = std::move(wt);
  }
  return p;
}

int64_t PruneMask::pruned_count() const {
  int64_t n = 0;
  for (const auto& l : pruned) n += std::count(l.begin(), l.end(), uint8_t{1});
  return n;
}

PruneMask make_mask(const ExpertProfile& p, double keep_fraction, double min_share) {
  if (!(keep_fraction > 0 && keep_fraction <= 1)) fail("keep fraction {} is not in (0, 1]", keep_fraction);
  if (!(min_share >= 0 && min_share < 1)) fail("min share {} is not in [0, 1)", min_share);
  PruneMask m;
  m.model = p.model;
  m.method = min_share > 0 ? fmt::format("min-share {} by routing weight", min_share)
                           : fmt::format("keep-fraction {} by routing weight", keep_fraction);
  const size_t E = static_cast<size_t>(p.model.n_expert);
  m.pruned.assign(static_cast<size_t>(p.model.n_layer), std::vector<uint8_t>(E, 0));
  for (size_t l = 0; l < m.pruned.size(); ++l) {
    if (p.model.hash_layer[l]) continue;
    std::vector<size_t> order(E);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      if (p.weight[l][a] != p.weight[l][b]) return p.weight[l][a] > p.weight[l][b];
      return p.count[l][a] > p.count[l][b];
    });
    size_t keep = keep_count(p.model.n_expert, p.model.n_expert_used, keep_fraction);
    if (min_share > 0) {
      const double total = std::accumulate(p.weight[l].begin(), p.weight[l].end(), 0.0);
      keep = 0;
      for (size_t e = 0; e < E; ++e)
        if (total > 0 && p.weight[l][e] / total >= min_share) ++keep;
      keep = std::max(keep, static_cast<size_t>(p.model.n_expert_used));
    }
    for (size_t i = keep; i < E; ++i) m.pruned[l][order[i]] = 1;
  }
  return m;
}

PruneMask random_mask(const ModelKey& k, double keep_fraction, uint64_t seed) {
  if (!(keep_fraction > 0 && keep_fraction <= 1)) fail("keep fraction {} is not in (0, 1]", keep_fraction);
  PruneMask m;
  m.model = k;
  m.method = fmt::format("random keep-fraction {} seed {}", keep_fraction, seed);
  const size_t E = static_cast<size_t>(k.n_expert);
  m.pruned.assign(static_cast<size_t>(k.n_layer), std::vector<uint8_t>(E, 0));
  std::mt19937_64 rng(seed);
  for (size_t l = 0; l < m.pruned.size(); ++l) {
    if (k.hash_layer[l]) continue;
    std::vector<size_t> order(E);
    std::iota(order.begin(), order.end(), 0);
    for (size_t i = E; i > 1; --i) std::swap(order[i - 1], order[static_cast<size_t>(rng() % i)]);  // Fisher-Yates
    const size_t keep = keep_count(k.n_expert, k.n_expert_used, keep_fraction);
    for (size_t i = keep; i < E; ++i) m.pruned[l][order[i]] = 1;
  }
  return m;
}

void write_mask(const std::string& path, const PruneMask& m) {
  json layers = json::array();
  for (size_t l = 0; l < m.pruned.size(); ++l) {
    json ids = json::array();
    for (size_t e = 0; e < m.pruned[l].size(); ++e)
      if (m.pruned[l][e]) ids.push_back(e);
    layers.push_back(ids);
  }
  json j = {{"format", "ds4-prune-mask"}, {"version", 1},        {"model", key_json(m.model)},
            {"method", m.method},         {"pruned", layers}};
  write_file_atomic(path, j.dump(1) + "\n");
}

PruneMask read_mask(const std::string& path) {
  const json j = parse_file(path, "ds4-prune-mask");
  PruneMask m;
  m.model = key_from(j, path);
  m.method = j.value("method", std::string());
  const auto layers = field<json>(j, "pruned", path);
  if (!layers.is_array() || static_cast<int64_t>(layers.size()) != m.model.n_layer)
    fail("{}: \"pruned\" must list {} layers", path, m.model.n_layer);
  m.pruned.assign(static_cast<size_t>(m.model.n_layer), std::vector<uint8_t>(static_cast<size_t>(m.model.n_expert), 0));
  for (size_t l = 0; l < layers.size(); ++l) {
    if (!layers[l].is_array()) fail("{}: pruned[{}] is not an array of expert ids", path, l);
    for (const auto& v : layers[l]) {
      if (!v.is_number_integer()) fail("{}: pruned[{}] holds a non-integer", path, l);
      const int64_t e = v.get<int64_t>();
      if (e < 0 || e >= m.model.n_expert) fail("{}: pruned[{}]: expert {} out of range [0, {})", path, l, e, m.model.n_expert);
      m.pruned[l][static_cast<size_t>(e)] = 1;
    }
  }
  return m;
}

void check_mask(const PruneMask& m, const ModelKey& k, const std::string& what) {
  if (m.model.architecture != k.architecture || m.model.name != k.name || m.model.n_layer != k.n_layer ||
      m.model.n_expert != k.n_expert || m.model.n_expert_used != k.n_expert_used)
    fail("{}: mask for another model ({} '{}', {} layers x {} experts, k {}; this model: {} '{}', {} x {}, k {})", what,
         m.model.architecture, m.model.name, m.model.n_layer, m.model.n_expert, m.model.n_expert_used, k.architecture,
         k.name, k.n_layer, k.n_expert, k.n_expert_used);
  for (size_t l = 0; l < m.pruned.size(); ++l) {
    const int64_t n = std::count(m.pruned[l].begin(), m.pruned[l].end(), uint8_t{1});
    if (n && k.hash_layer[l])
      fail("{}: layer {} is hash-routed: its experts cannot be pruned (tokens have fixed experts there)", what, l);
    if (k.n_expert - n < k.n_expert_used)
      fail("{}: layer {} keeps {} experts, fewer than the {} each token uses", what, l, k.n_expert - n, k.n_expert_used);
  }
}

}  // namespace ds4::quantize
