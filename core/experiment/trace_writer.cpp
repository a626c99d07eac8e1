#include "core/experiment/trace_writer.hpp"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <set>

#include "core/common/error.hpp"
#include "core/experiment/environment.hpp"

namespace joinlab {

namespace {

std::string json_string(const std::string& s) {
  std::string q = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"': q += "\\\""; break;
      case '\\': q += "\\\\"; break;
      case '\n': q += "\\n"; break;
      case '\t': q += "\\t"; break;
      case '\r': q += "\\r"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          q += buf;
        } else {
          q += char(c);
        }
    }
  }
  return q + "\"";
}

std::string micros(double seconds) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.3f", seconds * 1e6);
  return buf;
}

// Orders track names so that "stream 2" comes before "stream 10".
bool track_before(const std::string& a, const std::string& b) {
  auto split = [](const std::string& s) {
    size_t d = s.size();
    while (d > 0 && std::isdigit(static_cast<unsigned char>(s[d - 1]))) --d;
    long long n = d < s.size() ? std::stoll(s.substr(d, 18)) : -1;
    return std::make_pair(s.substr(0, d), n);
  };
  return split(a) < split(b);
}

std::string op_args(const OpParams& p) {
  std::string a = "{\"kind\":" + json_string(to_string(p.kind));
  auto num = [&](const char* key, uint64_t v) { a += ",\"" + std::string(key) + "\":" + std::to_string(v); };
  num("rows_in", p.rows_in);
  num("rows_build", p.rows_build);
  num("rows_out", p.rows_out);
  num("key_bytes", p.key_bytes);
  num("val_bytes", p.val_bytes);
  num("fanout", p.fanout);
  num("table_slots", p.table_slots);
  num("bytes", p.bytes);
  if (p.mem_src >= 0) a += ",\"mem_src\":" + json_string(to_string(MemSpace(p.mem_src)));
  if (p.mem_dst >= 0) a += ",\"mem_dst\":" + json_string(to_string(MemSpace(p.mem_dst)));
  if (!p.detail.empty()) a += ",\"detail\":" + json_string(p.detail);
  return a + "}";
}

bool is_transfer(OpKind k) { return k == OpKind::Copy || k == OpKind::Send || k == OpKind::Recv || k == OpKind::Put; }

}  // namespace

void write_chrome_trace(std::ostream& out, const RunOutcome& run, const std::string& title) {
  const ClusterShape& shape = run.point.cluster.shape;
  double t0 = 1e300;
  for (auto& phases : run.rank_phases)
    for (auto& ph : phases) t0 = std::min(t0, ph.begin);
  for (auto& s : run.trace) t0 = std::min(t0, s.begin);
  if (t0 > 1e299) t0 = 0;

  // Thread ids per rank: 0 is the phase track, then the recorded tracks in natural order.
  int ranks = std::max<int>(shape.size(), int(run.rank_phases.size()));
  std::map<int, std::set<std::string, decltype(&track_before)>> tracks;
  for (auto& s : run.trace) tracks.emplace(s.rank, &track_before).first->second.insert(s.track);
  std::map<std::pair<int, std::string>, int> tid;
  for (auto& [rank, names] : tracks) {
    int next = 1;
    for (auto& n : names) tid[{rank, n}] = next++;
  }

  bool first = true;
  auto event = [&](const std::string& json) {
    out << (first ? "\n" : ",\n") << json;
    first = false;
  };
  out << "{\"displayTimeUnit\":\"ms\",\"otherData\":{\"title\":" << json_string(title)
      << ",\"strategy\":" << json_string(run.point.strategy) << ",\"backend\":" << json_string(run.point.backend)
      << ",\"ranks\":" << shape.size() << ",\"total_s\":" << run.total_seconds << "},\"traceEvents\":[";
  for (int r = 0; r < ranks; ++r) {
    std::string pid = std::to_string(r);
    std::string name = "rank " + pid + " (node " + std::to_string(shape.node_of(r)) + ", local " +
                       std::to_string(shape.local_of(r)) + ")";
    event("{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":" + pid + ",\"args\":{\"name\":" + json_string(name) + "}}");
    event("{\"ph\":\"M\",\"name\":\"process_sort_index\",\"pid\":" + pid + ",\"args\":{\"sort_index\":" + pid + "}}");
    event("{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":" + pid + ",\"tid\":0,\"args\":{\"name\":\"phases\"}}");
    event("{\"ph\":\"M\",\"name\":\"thread_sort_index\",\"pid\":" + pid + ",\"tid\":0,\"args\":{\"sort_index\":0}}");
    if (tracks.count(r))
      for (auto& n : tracks.at(r)) {
        std::string t = std::to_string(tid[{r, n}]);
        event("{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":" + pid + ",\"tid\":" + t + ",\"args\":{\"name\":" +
              json_string(n) + "}}");
        event("{\"ph\":\"M\",\"name\":\"thread_sort_index\",\"pid\":" + pid + ",\"tid\":" + t +
              ",\"args\":{\"sort_index\":" + t + "}}");
      }
  }
  for (size_t r = 0; r < run.rank_phases.size(); ++r)
    for (auto& ph : run.rank_phases[r])
      event("{\"ph\":\"X\",\"cat\":\"phase\",\"name\":" + json_string(ph.name) + ",\"pid\":" + std::to_string(r) +
            ",\"tid\":0,\"ts\":" + micros(ph.begin - t0) + ",\"dur\":" + micros(std::max(0.0, ph.end - ph.begin)) +
            "}");
  for (auto& s : run.trace) {
    std::string name = to_string(s.params.kind);
    event("{\"ph\":\"X\",\"cat\":" + json_string(is_transfer(s.params.kind) ? "transfer" : "op") +
          ",\"name\":" + json_string(name) + ",\"pid\":" + std::to_string(s.rank) +
          ",\"tid\":" + std::to_string(tid[{s.rank, s.track}]) + ",\"ts\":" + micros(s.begin - t0) +
          ",\"dur\":" + micros(std::max(0.0, s.end - s.begin)) + ",\"args\":" + op_args(s.params) + "}");
  }
  out << "\n]}\n";
}

void write_chrome_trace_file(const std::string& path, const RunOutcome& run, const std::string& title) {
  write_file_whole(path, "the trace", [&](std::ostream& out) { write_chrome_trace(out, run, title); });
}

}  // namespace joinlab
