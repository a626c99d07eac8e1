#include "core/workload/tpch.hpp"

#include <cmath>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <thread>
#include <vector>

#include "core/common/error.hpp"
#include "core/workload/relation.hpp"

namespace joinlab::tpch {

namespace {

// At most about 2^20 entries (8 MiB at any scale factor), at least 2^10 orders each.
uint32_t stride_log2_for(uint64_t orders) {
  uint32_t bits = 0;
  while (bits < 64 && (uint64_t(1) << bits) < orders) ++bits;
  return std::max<uint32_t>(10, bits > 20 ? bits - 20 : 0);
}

struct OwnedIndex {
  std::vector<uint64_t> rows_before;
  LineitemIndex view;
};

std::unique_ptr<OwnedIndex> build_index(uint64_t orders) {
  auto index = std::make_unique<OwnedIndex>();
  const uint32_t k = stride_log2_for(orders);
  const uint64_t stride = uint64_t(1) << k, entries = (orders + stride - 1) / stride;
  std::vector<uint64_t> lines_per_entry(entries);
  // Each thread jumps to its first order and walks its entries' orders one draw at a time.
  const unsigned threads = std::max(1u, std::min<unsigned>(std::thread::hardware_concurrency(), unsigned(entries)));
  std::vector<std::thread> pool;
  for (unsigned t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      const RowRange mine = rank_slice(entries, int(t), int(threads));
      if (!mine.size()) return;
      LineitemCursor c = LineitemCursor::first_line_of((mine.begin << k) + 1);
      for (uint64_t j = mine.begin; j < mine.end; ++j) {
        const uint64_t last = std::min(orders, (j + 1) << k);
        uint64_t lines = 0;
        for (; c.order <= last; c.next_order()) lines += c.lines;
        lines_per_entry[j] = lines;
      }
    });
  for (auto& th : pool) th.join();
  index->rows_before.resize(entries);
  uint64_t rows = 0;
  for (uint64_t j = 0; j < entries; ++j) {
    index->rows_before[j] = rows;
    rows += lines_per_entry[j];
  }
  index->view = {index->rows_before.data(), entries, k, orders, rows};
  return index;
}

}  // namespace

uint64_t orders_at(double sf) {
  const double orders = double(kOrdersPerScaleFactor) * sf;
  std::ostringstream m;
  if (!(orders >= 1.0 && orders == std::floor(orders)))
    m << "must be positive, with 1,500,000 x scale_factor orders a whole number (here " << orders << ")";
  else if (sf > kMaxScaleFactor)  // lineitem's size alone is a pass over every order
    m << "beyond TPC-H's largest scale factor, " << kMaxScaleFactor;
  if (!m.str().empty()) throw InputError(m.str());
  return uint64_t(orders);
}

const LineitemIndex& lineitem_index(uint64_t orders) {
  static std::mutex mu;
  static std::map<uint64_t, std::unique_ptr<OwnedIndex>> built;
  std::lock_guard<std::mutex> lock(mu);
  auto& index = built[orders];
  if (!index) index = build_index(orders);
  return index->view;
}

}  // namespace joinlab::tpch
