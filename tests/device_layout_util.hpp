// triton's second-pass layout on a rank, for the tests of both backends: chunks of one input cut
// at each part's bounds, each part counted by one segmented HistogramOp into a layout buffer in
// device memory (counts_out, partition-major over every part's chunks) and scanned there in place.
#pragma once
#include <vector>

#include "core/exec/rank.hpp"

namespace joinlab::test {

struct DeviceLayout {
  std::vector<Tuples> chunks;         // every part's chunks, in order
  Buffer layout;                      // chunks.size() * fanout words: the chunks' offsets
  std::vector<uint64_t> hist;         // the same counts chunk-major (chunked_layout's input)
  std::vector<uint64_t> totals;       // each histogram's result: its partitions' totals
};

inline DeviceLayout lay_out_on_device(Rank& rank, const Tuples& in, PartitionFn fn,
                                      const std::vector<std::vector<uint64_t>>& parts) {
  DeviceLayout d;
  for (const std::vector<uint64_t>& b : parts)
    for (size_t c = 0; c + 1 < b.size(); ++c) d.chunks.push_back(in.slice(b[c], b[c + 1] - b[c]));
  const uint64_t C = d.chunks.size(), F = fn.fanout();
  d.layout = rank.alloc(MemSpace::Device, C * F * 8, "layout");
  uint64_t first = 0;
  for (const std::vector<uint64_t>& b : parts) {
    HistogramOp h{in, fn, b};
    h.counts_out = d.layout;
    h.counts_first = first;
    h.counts_stride = C;
    const std::vector<uint64_t> totals = rank.launch(Stream{0}, h).get().values;
    d.totals.insert(d.totals.end(), totals.begin(), totals.end());
    const std::vector<uint64_t> v = rank.launch(Stream{0}, HistogramOp{in, fn, b}).get().values;
    d.hist.insert(d.hist.end(), v.begin(), v.end());
    first += b.size() - 1;
  }
  rank.launch(Stream{0}, ScanOp{d.layout, d.layout, C * F}).get();
  return d;
}

}  // namespace joinlab::test
