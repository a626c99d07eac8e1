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

std::unique_ptr<OwnedIndex> build_index(uint64_t all_orders) {
  auto index = std::make_unique<OwnedIndex>();
  const uint64_t orders = std::min(all_orders, kLinePeriod);  // a later period repeats the first
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
  index->view = {index->rows_before.data(), entries, k, all_orders, orders < all_orders ? lineitem_rows(all_orders) : rows};
  return index;
}

// The lines of orders 1 .. j 2^24 within a period of the line-count stream, j = 0 .. 127,
// computed by walking one period (7 s on 2 cores; tests recompute entries), so that lineitem's
// size at any scale factor costs a walk of fewer than 2^24 orders instead of one of every order
// (minutes at scale factor 100,000).
constexpr uint32_t kPrefixStrideLog2 = 24;
constexpr uint64_t kPeriodPrefix[] = {
    0, 67095630, 134215401, 201326685, 268448007, 335551537, 402673726, 469781775, 536900504,
    604020934, 671122565, 738241886, 805353270, 872452597, 939545190, 1006656383, 1073758652,
    1140869772, 1207982099, 1275090329, 1342203161, 1409311136, 1476402060, 1543512502, 1610624724,
    1677730521, 1744835139, 1811928823, 1879035258, 1946154466, 2013263434, 2080368678, 2147482871,
    2214604559, 2281716265, 2348816513, 2415928323, 2483035383, 2550145260, 2617254239, 2684379368,
    2751490611, 2818585486, 2885698705, 2952817043, 3019933038, 3087046873, 3154150582, 3221254928,
    3288372164, 3355478783, 3422578757, 3489682798, 3556777992, 3623885940, 3690994727, 3758115035,
    3825226674, 3892334709, 3959441922, 4026539675, 4093642583, 4160752607, 4227864532, 4294963632,
    4362085734, 4429183692, 4496290131, 4563386541, 4630500735, 4697596277, 4764705956, 4831804952,
    4898902255, 4966018351, 5033116759, 5100223101, 5167341498, 5234466639, 5301573169, 5368688632,
    5435795241, 5502900636, 5570010136, 5637115034, 5704224787, 5771351592, 5838458875, 5905564380,
    5972676314, 6039789424, 6106913466, 6174024762, 6241123281, 6308232041, 6375344522, 6442448061,
    6509544102, 6576650118, 6643767598, 6710873520, 6777984187, 6845092035, 6912200790, 6979293387,
    7046399874, 7113522724, 7180627230, 7247726623, 7314828355, 7381932251, 7449046265, 7516159651,
    7583260143, 7650371252, 7717489006, 7784602695, 7851725225, 7918835004, 7985943948, 8053041367,
    8120147457, 8187257148, 8254367662, 8321487642, 8388602457, 8455710166, 8522815964,
};

}  // namespace

uint64_t lines_before(uint64_t order) {
  const uint64_t n = order - 1;  // orders 1 .. n; order n + 1 draws word n + 1 like order 1 + (n mod period)
  const uint64_t r = n % kLinePeriod, j = r >> kPrefixStrideLog2;
  uint64_t lines = n / kLinePeriod * kLinesPerPeriod + kPeriodPrefix[j];
  LineitemCursor c = LineitemCursor::first_line_of((j << kPrefixStrideLog2) + 1);
  for (; c.order <= r; c.next_order()) lines += c.lines;
  return lines;
}

uint64_t orders_at(double sf) {
  // 0.14 x 1,500,000 is 210000.00000000003 in doubles: a whole number up to rounding is one.
  const double exact = double(kOrdersPerScaleFactor) * sf, orders = std::round(exact);
  std::ostringstream m;
  if (!(orders >= 1.0 && std::fabs(exact - orders) <= 1e-9 * orders))
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
