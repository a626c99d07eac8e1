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

TraceWritten write_chrome_trace(std::ostream& out, const RunOutcome& run, const std::string& title,
                                uint64_t max_bytes) {
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
  uint64_t written = 0;
  auto event = [&](const std::string& json) {
    out << (first ? "\n" : ",\n") << json;
    written += json.size() + 2;
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
  auto span_event = [&](const TraceSpan& s) {
    return "{\"ph\":\"X\",\"cat\":" + json_string(is_transfer(s.params.kind) ? "transfer" : "op") +
           ",\"name\":" + json_string(to_string(s.params.kind)) + ",\"pid\":" + std::to_string(s.rank) +
           ",\"tid\":" + std::to_string(tid[{s.rank, s.track}]) + ",\"ts\":" + micros(s.begin - t0) +
           ",\"dur\":" + micros(std::max(0.0, s.end - s.begin)) + ",\"args\":" + op_args(s.params) + "}";
  };
  TraceWritten w;
  constexpr uint64_t kNoteBytes = 512;  // room for the trace_truncated event
  uint64_t all = written;
  for (auto& s : run.trace) all += span_event(s).size() + 2;
  if (max_bytes == 0 || all + 8 <= max_bytes) {
    for (auto& s : run.trace) event(span_event(s));
    w.spans = run.trace.size();
  } else {
    // The spans that began first, over all ranks, while they fit (in time order; ties in the
    // order recorded), then the rest left out: the trace shows the whole cluster up to a time.
    std::vector<size_t> order(run.trace.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return run.trace[a].begin < run.trace[b].begin; });
    uint64_t budget = max_bytes > written + kNoteBytes ? max_bytes - written - kNoteBytes : 0;
    size_t kept = 0;
    for (; kept < order.size(); ++kept) {
      const uint64_t bytes = span_event(run.trace[order[kept]]).size() + 2;
      if (bytes > budget) break;
      budget -= bytes;
    }
    // Everything that began before the first span left out (so no track has a gap).
    w.cut_s = kept < order.size() ? run.trace[order[kept]].begin - t0 : 1e300;
    while (kept > 0 && run.trace[order[kept - 1]].begin - t0 >= w.cut_s) --kept;
    std::vector<char> keep(run.trace.size(), 0);
    for (size_t i = 0; i < kept; ++i) keep[order[i]] = 1;
    for (size_t i = 0; i < run.trace.size(); ++i)
      if (keep[i]) event(span_event(run.trace[i]));
    w.spans = kept;
    w.left_out = run.trace.size() - kept;
    event("{\"ph\":\"M\",\"name\":\"trace_truncated\",\"pid\":0,\"args\":{\"spans_kept\":" + std::to_string(w.spans) +
          ",\"spans_left_out\":" + std::to_string(w.left_out) + ",\"left_out_from_us\":" + micros(w.cut_s) +
          ",\"max_bytes\":" + std::to_string(max_bytes) +
          ",\"why\":\"spans that began at or after left_out_from_us are not in this file: set "
          "experiment.trace_max_bytes (0: no limit) for all\"}}");
  }
  out << "\n]}\n";
  return w;
}

TraceWritten write_chrome_trace_file(const std::string& path, const RunOutcome& run, const std::string& title,
                                     uint64_t max_bytes) {
  TraceWritten w;
  write_file_whole(path, "the trace", [&](std::ostream& out) { w = write_chrome_trace(out, run, title, max_bytes); });
  return w;
}

}  // namespace joinlab
