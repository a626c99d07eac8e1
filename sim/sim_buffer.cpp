#include "sim/sim_buffer.hpp"

#include <algorithm>
#include <typeinfo>

#include "core/common/error.hpp"

namespace joinlab::sim {

ContentPtr SplitLayout::piece(size_t index) const {
  const size_t fanout = fn.fanout();
  const size_t seg = index / fanout;
  for (auto& [s, parts] : cache_)
    if (s == seg) return parts[index % fanout];
  if (cache_.size() >= 4) cache_.erase(cache_.begin());
  cache_.emplace_back(seg, split_content(*parents[seg], fn));
  return cache_.back().second[index % fanout];
}

ContentPtr SplitLayout::read(uint64_t first_row, uint64_t end_row) const {
  const size_t fanout = fn.fanout();
  std::vector<ContentPtr> parts;
  // First piece whose end is past first_row.
  size_t i = size_t(std::upper_bound(offsets.begin(), offsets.end(), first_row) - offsets.begin());
  i = i == 0 ? 0 : i - 1;
  while (i + 1 < offsets.size() && offsets[i] < end_row) {
    const size_t seg = i / fanout;
    const uint64_t seg_begin = offsets[seg * fanout], seg_end = offsets[(seg + 1) * fanout];
    if (i % fanout == 0 && first_row <= seg_begin && end_row >= seg_end) {  // a whole segment
      if (seg_end > seg_begin) parts.push_back(parents[seg]);
      i += fanout;
      continue;
    }
    const uint64_t lo = std::max(first_row, offsets[i]), hi = std::min(end_row, offsets[i + 1]);
    if (hi > lo) {
      ContentPtr p = piece(i);
      parts.push_back(hi - lo == offsets[i + 1] - offsets[i] ? p : scale_content(p, hi - lo));
    }
    ++i;
  }
  return parts.empty() ? std::make_shared<KeyContent>() : merge_contents(parts);
}

ContentPtr RegionMap::Region::read_rows(uint64_t begin, uint64_t first_row, uint64_t end_row) const {
  if (split) return split->read(first_row, end_row);
  const uint64_t n = rows(begin);
  if (first_row == 0 && end_row >= n) return content;
  return scale_content(content, std::min(end_row, n) - first_row);
}

void RegionMap::clear_range(uint64_t first, uint64_t end) {
  auto it = regions_.lower_bound(first);
  // Fast path: nothing overlaps [first, end) (writes into fresh space, as receives do).
  const bool before_clear = it == regions_.begin() || std::prev(it)->second.end <= first;
  if (before_clear && (it == regions_.end() || it->first >= end)) return;
  if (!before_clear) --it;
  std::vector<std::pair<uint64_t, Region>> keep;
  while (it != regions_.end() && it->first < end) {
    const uint64_t b = it->first;
    if (it->second.end <= first) {
      ++it;
      continue;
    }
    const Region r = std::move(it->second);
    it = regions_.erase(it);
    const uint64_t kb = r.key_bytes;
    if (b < first)  // the part before the cleared range survives
      keep.push_back({b, Region{first, r.key_bytes, r.read_rows(b, 0, (first - b) / kb), nullptr}});
    if (r.end > end)  // and the part after it
      keep.push_back({end, Region{r.end, r.key_bytes, r.read_rows(b, (end - b) / kb, (r.end - b) / kb), nullptr}});
  }
  for (auto& [b, r] : keep) regions_.emplace(b, std::move(r));
}

void RegionMap::write(uint64_t first_byte, uint32_t key_bytes, ContentPtr content) {
  const uint64_t end = first_byte + content->rows() * key_bytes;
  if (end == first_byte) return;
  clear_range(first_byte, end);
  regions_[first_byte] = Region{end, key_bytes, std::move(content), nullptr};
}

void RegionMap::write_split(uint64_t first_byte, uint32_t key_bytes, std::shared_ptr<const SplitLayout> layout) {
  const uint64_t end = first_byte + layout->offsets.back() * key_bytes;
  if (end == first_byte) return;
  clear_range(first_byte, end);
  regions_[first_byte] = Region{end, key_bytes, nullptr, std::move(layout)};
}

ContentPtr RegionMap::read(uint64_t first_byte, uint64_t end_byte, uint32_t* key_bytes, bool gaps_unknown) const {
  if (regions_.empty() || end_byte <= first_byte) return nullptr;
  auto it = regions_.upper_bound(first_byte);
  if (it != regions_.begin()) --it;
  if (it->second.end <= first_byte) ++it;
  if (it == regions_.end() || it->first >= end_byte) return nullptr;
  // Fast path: one region holds the whole range (a partition or a received chunk).
  if (it->first <= first_byte && it->second.end >= end_byte) {
    const Region& r = it->second;
    if (key_bytes) *key_bytes = r.key_bytes;
    return r.read_rows(it->first, (first_byte - it->first) / r.key_bytes, (end_byte - it->first) / r.key_bytes);
  }
  std::vector<ContentPtr> parts;
  uint64_t at = first_byte;
  uint32_t kb = it->second.key_bytes;
  for (; it != regions_.end() && it->first < end_byte; ++it) {
    const uint64_t b = it->first;
    const Region& r = it->second;
    kb = r.key_bytes;
    if (b > at && gaps_unknown) parts.push_back(unknown_content((b - at) / kb));
    const uint64_t lo = std::max(first_byte, b), hi = std::min(end_byte, r.end);
    parts.push_back(r.read_rows(b, (lo - b) / kb, (hi - b) / kb));
    at = hi;
  }
  if (at < end_byte && gaps_unknown) parts.push_back(unknown_content((end_byte - at) / kb));
  if (key_bytes) *key_bytes = kb;
  if (parts.empty()) return nullptr;
  return parts.size() == 1 ? parts.front() : merge_contents(parts);
}

ContentPtr RegionMap::at(uint64_t first_byte) const {
  auto it = regions_.find(first_byte);
  if (it == regions_.end()) return nullptr;
  return it->second.read_rows(first_byte, 0, it->second.rows(first_byte));
}

void MemoryAccount::reserve(MemSpace space, uint64_t bytes, const std::string& tag) {
  const int p = pool(space);
  const uint64_t limit = limit_[int(space)];
  if (used_[p] + bytes > limit)
    throw RuntimeError("rank " + std::to_string(rank_) + ": out of " + to_string(space) + " memory allocating '" +
                       tag + "': " + std::to_string(bytes) + " bytes asked, " + std::to_string(limit - used_[p]) +
                       " of " + std::to_string(limit) + " left (simulated)");
  used_[p] += bytes;
}

void MemoryAccount::release(MemSpace space, uint64_t bytes) {
  const int p = pool(space);
  used_[p] -= std::min(used_[p], bytes);
}

uint64_t MemoryAccount::left(MemSpace space) const {
  const int p = pool(space);
  return limit_[int(space)] - used_[p];
}

SimBuffer& sim_buffer(const Buffer& b) {
  // An exact type test: cheaper than dynamic_cast, which runs on every message.
  if (!b || typeid(*b) != typeid(SimBuffer))
    throw RuntimeError("sim backend: a buffer that SimRank did not allocate (" + (b ? b->tag : "null") + ")");
  return static_cast<SimBuffer&>(*b);
}

ContentPtr read_keys(const Tuples& t) {
  if (!t.keys || t.rows == 0) return nullptr;
  const uint64_t kb = t.fmt.key_bytes;
  return sim_buffer(t.keys).regions.read(t.offset * kb, (t.offset + t.rows) * kb);
}

void write_keys(const Tuples& t, ContentPtr content) {
  if (!t.keys) return;
  sim_buffer(t.keys).regions.write(t.offset * t.fmt.key_bytes, t.fmt.key_bytes, std::move(content));
}

}  // namespace joinlab::sim
