#include "stream/replay.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <random>
#include <set>
#include <tuple>

#include "core/error.h"

namespace ds4::stream {

namespace {

// The live cache's decisions without I/O: same policy object, same protect rule, pins for the
// experts of the layer being served.
class PolicySim {
 public:
  PolicySim(const TraceHeader& h, const ReplayConfig& c)
      : c_(c), E_(h.n_expert), pol_(c.policy, static_cast<size_t>(h.n_layer * h.n_expert), c.decay_tokens, c.recent_tokens),
        present_(static_cast<size_t>(h.n_layer * h.n_expert), 0), prefetched_(present_.size(), 0),
        pinned_(present_.size(), 0), protect_until_(present_.size(), 0) {}

  void next_token() {
    pol_.next_token();
    ++tokens_;
  }

  void demand(int64_t layer, const std::vector<int32_t>& ex, ReplayResult& r) {
    std::vector<size_t> ids;
    for (int32_t e : ex) ids.push_back(static_cast<size_t>(layer * E_ + e));
    std::sort(ids.begin(), ids.end());  // the live cache's order (its acquire sorts)
    ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
    for (size_t id : ids) pol_.touch(id, ++clock_);
    for (size_t id : ids) {
      if (present_[id]) {
        reorder(id);
        pinned_[id] = 1;
      }
    }
    for (size_t id : ids) {
      ++r.accesses;
      ++r.layer_accesses[static_cast<size_t>(layer)];
      if (present_[id]) {
        ++r.hits;
        ++r.layer_hits[static_cast<size_t>(layer)];
        if (prefetched_[id]) {
          ++r.prefetch_useful;
          prefetched_[id] = 0;
        }
      } else {
        ++r.misses;
        if (!insert(id, false, r)) fail("replay: cache of {} slots cannot hold one layer's experts", c_.slots);
        pinned_[id] = 1;
      }
    }
    for (size_t id : ids) pinned_[id] = 0;
  }

  void prefetch(int64_t layer, const std::vector<int32_t>& ex, ReplayResult& r) {
    for (int32_t e : ex) {
      const size_t id = static_cast<size_t>(layer * E_ + e);
      if (present_[id]) {
        if (c_.protect) protect_until_[id] = std::max(protect_until_[id], tokens_ + static_cast<uint64_t>(c_.protect_tokens));
        continue;
      }
      pol_.stamp(id, ++clock_);
      if (insert(id, true, r)) {
        ++r.prefetch_issued;
        prefetched_[id] = 1;
        if (c_.protect) protect_until_[id] = tokens_ + static_cast<uint64_t>(c_.protect_tokens);
      }
    }
  }

  void finish(ReplayResult& r) {
    for (size_t id = 0; id < prefetched_.size(); ++id) r.prefetch_wasted += prefetched_[id];
  }

 private:
  using Key = std::tuple<double, uint64_t, size_t>;
  Key key(size_t id) const { return {pol_.key(id), pol_.last_use(id), id}; }
  void reorder(size_t id) {
    auto it = keys_.find(stored_[id]);
    if (it != keys_.end()) keys_.erase(it);
    stored_[id] = key(id);
    keys_.insert(stored_[id]);
  }
  bool insert(size_t id, bool prefetch, ReplayResult& r) {
    if (static_cast<int64_t>(keys_.size()) >= c_.slots) {
      // The live cache's order (EvictionPolicy::before): the recency segment last, in key order.
      auto pick = [&](bool allow_protected, bool allow_recent) {
        for (auto it = keys_.begin(); it != keys_.end(); ++it) {
          const size_t v = std::get<2>(*it);
          if (pinned_[v]) continue;
          if (!allow_protected && c_.protect && protect_until_[v] > tokens_) continue;
          if (!allow_recent && pol_.recent(v)) continue;
          return it;
        }
        return keys_.end();
      };
      auto it = pick(false, false);
      if (it == keys_.end()) it = pick(false, true);
      if (it == keys_.end() && !prefetch) it = pick(true, false);
      if (it == keys_.end() && !prefetch) it = pick(true, true);
      if (it == keys_.end()) return false;
      const size_t v = std::get<2>(*it);
      keys_.erase(it);
      present_[v] = 0;
      if (prefetched_[v]) {
        ++r.prefetch_wasted;
        prefetched_[v] = 0;
      }
      stored_.erase(v);
    }
    present_[id] = 1;
    stored_[id] = key(id);
    keys_.insert(stored_[id]);
    return true;
  }

  ReplayConfig c_;
  int64_t E_;
  EvictionPolicy pol_;
  std::vector<uint8_t> present_, prefetched_, pinned_;
  std::vector<uint64_t> protect_until_;
  std::set<Key> keys_;
  std::map<size_t, Key> stored_;
  uint64_t clock_ = 0, tokens_ = 0;
};

ReplayResult replay_belady(const Trace& t, const ReplayConfig& c, ReplayResult r) {
  const int64_t E = t.header.n_expert;
  std::vector<std::pair<size_t, int64_t>> acc;  // (id, layer)
  for (const auto& rec : t.records)
    if (!rec.hint)
      for (int32_t e : rec.experts) acc.push_back({static_cast<size_t>(rec.layer * E + e), rec.layer});
  const size_t INF = std::numeric_limits<size_t>::max();
  std::vector<size_t> next(acc.size(), INF);
  std::vector<size_t> last_seen(static_cast<size_t>(t.header.n_layer * E), INF);
  for (size_t i = acc.size(); i-- > 0;) {
    next[i] = last_seen[acc[i].first];
    last_seen[acc[i].first] = i;
  }
  std::set<std::pair<size_t, size_t>> res;  // (next use, id)
  std::vector<size_t> res_next(last_seen.size(), INF);
  std::vector<uint8_t> present(last_seen.size(), 0);
  for (size_t i = 0; i < acc.size(); ++i) {
    const auto [id, layer] = acc[i];
    ++r.accesses;
    ++r.layer_accesses[static_cast<size_t>(layer)];
    if (present[id]) {
      ++r.hits;
      ++r.layer_hits[static_cast<size_t>(layer)];
      res.erase({res_next[id], id});
    } else {
      ++r.misses;
      if (static_cast<int64_t>(res.size()) >= c.slots) {
        auto v = std::prev(res.end());
        present[v->second] = 0;
        res.erase(v);
      }
      present[id] = 1;
    }
    res_next[id] = next[i];
    res.insert({next[i], id});
  }
  return r;
}

}  // namespace

ReplayResult replay(const Trace& t, const ReplayConfig& c) {
  if (c.slots < t.header.k) fail("replay: {} slots is fewer than the {} experts one layer uses", c.slots, t.header.k);
  ReplayResult r;
  r.layer_hits.assign(static_cast<size_t>(t.header.n_layer), 0);
  r.layer_accesses.assign(static_cast<size_t>(t.header.n_layer), 0);
  int64_t cur = -1;
  for (const auto& rec : t.records)
    if (rec.pos != cur) cur = rec.pos, ++r.tokens;
  if (c.belady) return replay_belady(t, c, r);

  PolicySim sim(t.header, c);
  const auto& R = t.records;
  cur = -1;
  for (size_t i = 0; i < R.size(); ++i) {
    const TraceRecord& rec = R[i];
    if (rec.pos != cur) {
      cur = rec.pos;
      sim.next_token();
      // Hash layers are known once the token is: their routing records of this position.
      if (c.prefetch_hash)
        for (size_t j = i; j < R.size() && R[j].pos == cur; ++j)
          if (!R[j].hint && R[j].layer < t.header.n_hash_layers) sim.prefetch(R[j].layer, R[j].experts, r);
    }
    if (rec.hint) {
      if (c.prefetch_lookahead) sim.prefetch(rec.layer, rec.experts, r);
    } else {
      sim.demand(rec.layer, rec.experts, r);
    }
  }
  sim.finish(r);
  return r;
}

Trace synthetic_trace(const SyntheticRouting& s) {
  if (s.n_layer <= 0 || s.n_expert <= 0 || s.k <= 0 || s.k > s.n_expert || s.n_hash_layers < 0 ||
      s.n_hash_layers > s.n_layer || s.n_tokens <= 0 || s.n_vocab <= 0 || s.guesses < 0 || s.guesses > s.n_expert)
    fail("synthetic routing: bad geometry");
  // The learned layers and their lookahead guesses come from the engine's benchmark routing
  // source (one model of routing for replay and live runs); this generator adds token ids,
  // which drive the hash layers as tid2eid does.
  const ZipfRouter router(s.router());
  std::mt19937_64 rng(s.seed);
  std::uniform_real_distribution<double> U(0.0, 1.0);
  std::vector<double> tcdf(static_cast<size_t>(s.n_vocab));
  double acc = 0;
  for (int64_t i = 0; i < s.n_vocab; ++i)
    tcdf[static_cast<size_t>(i)] = acc += 1.0 / std::pow(static_cast<double>(i + 1), s.token_zipf);
  for (auto& x : tcdf) x /= acc;
  // tid2eid for the tokens that occur (a random distinct set per token id, made on first use).
  std::map<int64_t, std::vector<std::vector<int32_t>>> tid2eid;
  Trace t;
  t.header = {s.n_layer, s.n_expert, s.k, s.n_hash_layers};
  for (int64_t pos = 0; pos < s.n_tokens; ++pos) {
    const int64_t tok = std::lower_bound(tcdf.begin(), tcdf.end(), U(rng)) - tcdf.begin();
    auto& hash = tid2eid[tok];
    if (hash.empty())
      for (int64_t il = 0; il < s.n_hash_layers; ++il) {
        std::vector<int32_t> v;
        while (static_cast<int64_t>(v.size()) < s.k) {
          const int32_t e = static_cast<int32_t>(rng() % static_cast<uint64_t>(s.n_expert));
          if (std::find(v.begin(), v.end(), e) == v.end()) v.push_back(e);
        }
        hash.push_back(v);
      }
    for (int64_t il = 0; il < s.n_layer; ++il) {
      t.records.push_back(
          {false, pos, il, il < s.n_hash_layers ? hash[static_cast<size_t>(il)] : router.route(pos, il)});
      // The guesses for layer il+1 are made while layer il is evaluated (after its routing).
      const int64_t nl = il + 1;
      if (s.guesses > 0 && nl < s.n_layer && nl >= s.n_hash_layers)
        t.records.push_back({true, pos, nl, router.guess(pos, nl, s.guesses)});
    }
  }
  return t;
}

}  // namespace ds4::stream
