#include "stream/trace.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "core/error.h"

namespace ds4::stream {

TraceWriter::TraceWriter(const std::string& path, const TraceHeader& h) : path_(path) {
  f_ = std::fopen(path.c_str(), "w");
  if (!f_) fail("{}: cannot write routing trace: {}", path, std::strerror(errno));
  std::fprintf(f_, "# ds4-routing-trace v1 layers=%lld experts=%lld k=%lld hash_layers=%lld\n",
               static_cast<long long>(h.n_layer), static_cast<long long>(h.n_expert), static_cast<long long>(h.k),
               static_cast<long long>(h.n_hash_layers));
}

TraceWriter::~TraceWriter() {
  if (f_) std::fclose(f_);
}

void TraceWriter::line(char tag, int64_t pos, int64_t layer, std::span<const int32_t> experts) {
  std::fprintf(f_, "%c %lld %lld", tag, static_cast<long long>(pos), static_cast<long long>(layer));
  for (int32_t e : experts) std::fprintf(f_, " %d", e);
  std::fputc('\n', f_);
  if (std::ferror(f_)) fail("{}: write error", path_);
}

void TraceWriter::routing(int64_t pos, int64_t layer, std::span<const int32_t> experts) {
  line('r', pos, layer, experts);
}
void TraceWriter::hint(int64_t pos, int64_t layer, std::span<const int32_t> experts) { line('h', pos, layer, experts); }

Trace read_trace(const std::string& path) {
  std::ifstream in(path);
  if (!in) fail("{}: cannot open routing trace", path);
  Trace t;
  std::string line;
  int64_t ln = 0;
  if (!std::getline(in, line) || line.rfind("# ds4-routing-trace v1 ", 0) != 0)
    fail("{}: line 1: not a ds4 routing trace (expected '# ds4-routing-trace v1 ...')", path);
  ++ln;
  {
    std::istringstream hs(line.substr(23));
    std::string kv;
    while (hs >> kv) {
      auto eq = kv.find('=');
      if (eq == std::string::npos) fail("{}: line 1: bad header field '{}'", path, kv);
      const std::string k = kv.substr(0, eq);
      int64_t v = 0;
      try {
        v = std::stoll(kv.substr(eq + 1));
      } catch (...) {
        fail("{}: line 1: bad value in '{}'", path, kv);
      }
      if (k == "layers") t.header.n_layer = v;
      else if (k == "experts") t.header.n_expert = v;
      else if (k == "k") t.header.k = v;
      else if (k == "hash_layers") t.header.n_hash_layers = v;
    }
  }
  const auto& h = t.header;
  if (h.n_layer <= 0 || h.n_expert <= 0 || h.k <= 0 || h.k > h.n_expert || h.n_hash_layers < 0 ||
      h.n_hash_layers > h.n_layer)
    fail("{}: line 1: implausible header (layers {}, experts {}, k {}, hash_layers {})", path, h.n_layer, h.n_expert,
         h.k, h.n_hash_layers);
  while (std::getline(in, line)) {
    ++ln;
    if (line.empty() || line[0] == '#') continue;
    std::istringstream ls(line);
    char tag = 0;
    TraceRecord r;
    if (!(ls >> tag >> r.pos >> r.layer) || (tag != 'r' && tag != 'h'))
      fail("{}: line {}: expected 'r POS LAYER ids...' or 'h POS LAYER ids...'", path, ln);
    r.hint = tag == 'h';
    int64_t e;
    while (ls >> e) {
      if (e < 0 || e >= h.n_expert) fail("{}: line {}: expert {} outside [0, {})", path, ln, e, h.n_expert);
      r.experts.push_back(static_cast<int32_t>(e));
    }
    if (!ls.eof()) fail("{}: line {}: bad expert id", path, ln);
    if (r.layer < 0 || r.layer >= h.n_layer || r.pos < 0)
      fail("{}: line {}: layer {} / position {} out of range", path, ln, r.layer, r.pos);
    if (!r.hint && static_cast<int64_t>(r.experts.size()) != h.k)
      fail("{}: line {}: {} experts, header says k = {}", path, ln, r.experts.size(), h.k);
    t.records.push_back(std::move(r));
  }
  return t;
}

void write_trace(const std::string& path, const Trace& t) {
  TraceWriter w(path, t.header);
  for (const auto& r : t.records) {
    if (r.hint) w.hint(r.pos, r.layer, r.experts);
    else w.routing(r.pos, r.layer, r.experts);
  }
}

}  // namespace ds4::stream
