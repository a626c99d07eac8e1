// TPC-H orders and lineitem join keys exactly as dbgen makes them, position-addressable.
// Orders are numbered from 1 as in dbgen (relation row i is order i + 1). Order n's o_orderkey is
// dbgen's sparse key: the low 3 bits of n kept, 2 zero bits inserted above them (8 of every 32
// keys; SF 1's largest is 6,000,000). Its lineitems, all with l_orderkey = o_orderkey, number
// 1 + floor(w / (2^31 - 1) * 7) for the n-th word w of dbgen's line-count stream: Park-Miller
// (w -> 16807 w mod 2^31 - 1) from seed 1434868289, one draw per order, so w = seed * 16807^n,
// reached in O(log n). Lineitem rows are those of order 1, then order 2, ...: a block of them is
// generated from a cursor at its first row (lineitem_cursor), not row by row.
#pragma once
#include <algorithm>
#include <cstdint>

#include "core/common/hd.hpp"

namespace joinlab::tpch {

constexpr uint64_t kOrdersPerScaleFactor = 1500000;
constexpr double kMaxScaleFactor = 100000;
constexpr uint64_t kRandModulus = 2147483647;  // 2^31 - 1
constexpr uint64_t kRandMultiplier = 16807;
constexpr uint64_t kLineCountSeed = 1434868289;  // dbgen's O_LCNT stream
constexpr uint32_t kMaxLines = 7;

JL_HD uint64_t order_key(uint64_t order) { return ((order >> 3) << 5) | (order & 7); }
// The order whose o_orderkey is `key`, or 0 if none is (bits 3 and 4 set, or key 0).
JL_HD uint64_t order_of_key(uint64_t key) { return key & 0x18 ? 0 : ((key >> 5) << 3) | (key & 7); }

JL_HD uint64_t next_line_word(uint64_t word) { return word * kRandMultiplier % kRandModulus; }
// The word order `order` draws: seed * 16807^order mod 2^31 - 1 (products stay below 2^62).
JL_HD uint64_t line_word(uint64_t order) {
  uint64_t word = kLineCountSeed, power = kRandMultiplier;
  for (uint64_t e = order; e; e >>= 1) {
    if (e & 1) word = word * power % kRandModulus;
    power = power * power % kRandModulus;
  }
  return word;
}
// dbgen's UnifInt(1, 7): in double precision, as dbgen rounds it.
JL_HD uint32_t lines_of_word(uint64_t word) {
  return 1 + uint32_t(double(word) / double(kRandModulus) * double(kMaxLines));
}

// A lineitem row: its order, that order's line count and word, and the row's place among them.
struct LineitemCursor {
  uint64_t order = 1, word = 0;
  uint32_t lines = 0, line = 0;

  JL_HD static LineitemCursor first_line_of(uint64_t order) {
    LineitemCursor c;
    c.order = order;
    c.word = line_word(order);
    c.lines = lines_of_word(c.word);
    return c;
  }
  JL_HD uint64_t key() const { return order_key(order); }
  JL_HD void next_order() {
    ++order;
    word = next_line_word(word);
    lines = lines_of_word(word);
    line = 0;
  }
  JL_HD void next() {
    if (++line == lines) next_order();
  }
};

// The line-count stream repeats after kLinePeriod orders (16807 is a primitive root of 2^31 - 1:
// one period draws every word 1 .. 2^31 - 2 once, whose line counts sum to 4 per order), so order
// n + kLinePeriod has order n's lines and word.
constexpr uint64_t kLinePeriod = kRandModulus - 1;
constexpr uint64_t kLinesPerPeriod = 4 * kLinePeriod;

// --- host: relation sizes and the coarse index of lineitem rows -------------------------------

// Lineitem rows before every 2^stride_log2-th order, so a block of rows finds its first order
// with a binary search and a scan of fewer than 2^stride_log2 orders. It covers one period of the
// line-count stream at most: a row of a later period is the same row of the first, kLinePeriod
// orders on (the index of scale factor 100,000's 150 G orders is one period's walk, seconds,
// not a walk of every order). A view of the index that lineitem_index() builds once per order
// count and keeps for the process.
struct LineitemIndex {
  const uint64_t* rows_before = nullptr;  // [j]: lineitem rows of the orders before order j 2^k + 1
  uint64_t entries = 0;
  uint32_t stride_log2 = 0;
  uint64_t orders = 0, rows = 0;  // the relation: orders 1..orders, their lineitem rows

  // The cursor at lineitem row `row` (0-based, < rows).
  LineitemCursor cursor(uint64_t row) const {
    const uint64_t periods = orders > kLinePeriod ? row / kLinesPerPeriod : 0;
    row -= periods * kLinesPerPeriod;
    LineitemCursor c = cursor_in_period(row);
    c.order += periods * kLinePeriod;  // the same word and lines
    return c;
  }

 private:
  LineitemCursor cursor_in_period(uint64_t row) const {
    const uint64_t* past = std::upper_bound(rows_before, rows_before + entries, row);
    const uint64_t entry = uint64_t(past - rows_before) - 1;
    uint64_t first = rows_before[entry];
    LineitemCursor c = LineitemCursor::first_line_of((entry << stride_log2) + 1);
    while (first + c.lines <= row) {
      first += c.lines;
      c.next_order();
    }
    c.line = uint32_t(row - first);
    return c;
  }
};

// Orders at scale factor `sf`: 1.5 M x sf; throws InputError saying why unless that is a positive
// whole number and sf at most TPC-H's largest scale factor.
uint64_t orders_at(double sf);
// The index of orders 1..orders (built on first use, then shared; thread-safe).
const LineitemIndex& lineitem_index(uint64_t orders);
// Lineitem rows of orders 1 .. order - 1 (lineitem_rows(orders) = lines_before(orders + 1)), in
// a walk of fewer than 2^24 orders at any scale factor: what sizing the relation needs.
uint64_t lines_before(uint64_t order);
inline uint64_t lineitem_rows(uint64_t orders) { return lines_before(orders + 1); }

}  // namespace joinlab::tpch
