#include "sim/sim_buffer.hpp"

#include <algorithm>
#include <typeinfo>

#include "core/common/error.hpp"

namespace joinlab::sim {

const std::shared_ptr<const ContentSplit>& SplitLayout::split(size_t seg) const {
  for (auto& [s, split] : cache_)
    if (s == seg) return split;
  if (cache_.size() >= 4) cache_.erase(cache_.begin());
  cache_.emplace_back(seg, std::make_shared<const ContentSplit>(*parents[seg], fn));
  return cache_.back().second;
}

ContentPtr SplitLayout::piece(size_t index) const {
  const size_t fanout = fn.fanout();
  return split(index / fanout)->piece(uint32_t(index % fanout));
}

size_t SplitLayout::piece_at(uint64_t first_row) const {
  // Where the previous read ended, when a buffer is read piece after piece (a shuffle's rounds),
  // else by binary search.
  auto holds = [&](size_t k) { return k + 1 < offsets.size() && offsets[k] <= first_row && first_row < offsets[k + 1]; };
  if (holds(next_)) return next_;
  const size_t i = size_t(std::upper_bound(offsets.begin(), offsets.end(), first_row) - offsets.begin());
  return i == 0 ? 0 : i - 1;
}

PieceRef SplitLayout::exact_piece(uint64_t first_row, uint64_t end_row) const {
  const size_t fanout = fn.fanout();
  const size_t i = piece_at(first_row);
  if (i + 1 >= offsets.size() || offsets[i] != first_row || offsets[i + 1] != end_row || end_row == first_row)
    return {};
  const size_t seg = i / fanout;
  if (i % fanout == 0 && end_row >= offsets[(seg + 1) * fanout]) return {};  // the whole segment: read() gives its parent
  next_ = i + 1;
  return {split(seg), uint32_t(i % fanout), end_row - first_row};
}

ContentPtr SplitLayout::read(uint64_t first_row, uint64_t end_row) const {
  const size_t fanout = fn.fanout();
  ContentPtr first;  // the common case, one piece (a partition sent as one message), needs no list
  std::vector<ContentPtr> parts;
  auto add = [&](ContentPtr c) {
    if (!first) return void(first = std::move(c));
    if (parts.empty()) parts.push_back(first);
    parts.push_back(std::move(c));
  };
  size_t i = piece_at(first_row);
  while (i + 1 < offsets.size() && offsets[i] < end_row) {
    const size_t seg = i / fanout;
    const uint64_t seg_begin = offsets[seg * fanout], seg_end = offsets[(seg + 1) * fanout];
    if (i % fanout == 0 && first_row <= seg_begin && end_row >= seg_end) {  // a whole segment
      if (seg_end > seg_begin) add(parents[seg]);
      i += fanout;
      continue;
    }
    const uint64_t lo = std::max(first_row, offsets[i]), hi = std::min(end_row, offsets[i + 1]);
    if (hi > lo) {
      ContentPtr p = piece(i);
      add(hi - lo == offsets[i + 1] - offsets[i] ? p : slice_content(p, lo - offsets[i], hi - offsets[i]));
    }
    ++i;
  }
  next_ = i;
  if (!first) return std::make_shared<KeyContent>();
  return parts.empty() ? first : merge_contents(parts);
}

ContentPtr RegionMap::Region::read_rows(uint64_t begin, uint64_t first_row, uint64_t end_row) const {
  if (split) return split->read(first_row, end_row);
  const uint64_t n = rows(begin);
  if (first_row == 0 && end_row >= n) return content;
  return slice_content(content, first_row, std::min(end_row, n));
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

template <class Absorb, class Build>
void RegionMap::merge_write(uint64_t first_byte, uint64_t rows, uint32_t key_bytes, Absorb absorb, Build build) {
  const uint64_t end = first_byte + rows * key_bytes;
  if (end == first_byte) return;
  clear_range(first_byte, end);
  auto mergeable = [&](const Region& r) { return !r.split && r.content && r.key_bytes == key_bytes; };
  auto prev = regions_.lower_bound(first_byte);
  const bool has_prev = prev != regions_.begin() && std::prev(prev)->second.end == first_byte &&
                        mergeable(std::prev(prev)->second);
  if (has_prev) --prev;
  auto next = regions_.find(end);
  const bool has_next = next != regions_.end() && mergeable(next->second);
  // A neighbour grows (its content in place when nothing else holds it): no region, content or
  // map node per message.
  if (has_prev && absorb(prev->second.content)) {
    prev->second.end = end;
    if (has_next && absorb_uniform(prev->second.content, *next->second.content)) {  // the write closed a gap
      prev->second.end = next->second.end;
      regions_.erase(next);
    }
    return;
  }
  if (has_next && absorb(next->second.content)) {
    auto node = regions_.extract(next);
    node.key() = first_byte;
    regions_.insert(std::move(node));
    return;
  }
  regions_[first_byte] = Region{end, key_bytes, build(), nullptr};
}

void RegionMap::write_merging(uint64_t first_byte, uint32_t key_bytes, ContentPtr content) {
  merge_write(
      first_byte, content->rows(), key_bytes, [&](ContentPtr& into) { return absorb_uniform(into, *content); },
      [&] { return std::move(content); });
}

void RegionMap::write_merging(uint64_t first_byte, uint32_t key_bytes, const PieceRef& piece) {
  merge_write(
      first_byte, piece.rows, key_bytes,
      [&](ContentPtr& into) { return piece.split->absorb_piece(into, piece.part); },
      [&] { return piece.split->piece(piece.part); });
}

void RegionMap::write_split(uint64_t first_byte, uint32_t key_bytes, std::shared_ptr<const SplitLayout> layout) {
  const uint64_t end = first_byte + layout->offsets.back() * key_bytes;
  if (end == first_byte) return;
  clear_range(first_byte, end);
  regions_[first_byte] = Region{end, key_bytes, nullptr, std::move(layout)};
}

ContentPtr RegionMap::read(uint64_t first_byte, uint64_t end_byte, uint32_t* key_bytes) const {
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
    if (b > at) parts.push_back(unknown_content((b - at) / kb));
    const uint64_t lo = std::max(first_byte, b), hi = std::min(end_byte, r.end);
    parts.push_back(r.read_rows(b, (lo - b) / kb, (hi - b) / kb));
    at = hi;
  }
  if (at < end_byte) parts.push_back(unknown_content((end_byte - at) / kb));
  if (key_bytes) *key_bytes = kb;
  if (parts.empty()) return nullptr;
  return parts.size() == 1 ? parts.front() : concat_contents(parts);
}

PieceRef RegionMap::read_piece(uint64_t first_byte, uint64_t end_byte, uint32_t* key_bytes) const {
  if (regions_.empty() || end_byte <= first_byte) return {};
  auto it = regions_.upper_bound(first_byte);
  if (it == regions_.begin()) return {};
  --it;
  const Region& r = it->second;
  if (!r.split || end_byte > r.end || (first_byte - it->first) % r.key_bytes || (end_byte - it->first) % r.key_bytes)
    return {};
  PieceRef p = r.split->exact_piece((first_byte - it->first) / r.key_bytes, (end_byte - it->first) / r.key_bytes);
  if (p && key_bytes) *key_bytes = r.key_bytes;
  return p;
}

std::shared_ptr<const SplitLayout> RegionMap::split_at(uint64_t first_byte, uint64_t end_byte, uint32_t* key_bytes) const {
  auto it = regions_.find(first_byte);
  if (it == regions_.end() || !it->second.split || it->second.end != end_byte) return nullptr;
  if (key_bytes) *key_bytes = it->second.key_bytes;
  return it->second.split;
}

std::vector<RegionMap::Span> RegionMap::spans(uint64_t first_byte, uint64_t end_byte) const {
  std::vector<Span> out;
  if (regions_.empty() || end_byte <= first_byte) return out;
  auto it = regions_.upper_bound(first_byte);
  if (it != regions_.begin()) --it;
  for (; it != regions_.end() && it->first < end_byte; ++it) {
    const uint64_t b = it->first;
    const Region& r = it->second;
    if (r.end <= first_byte) continue;
    const uint64_t lo = std::max(first_byte, b), hi = std::min(end_byte, r.end);
    const uint64_t kb = r.key_bytes;
    // Whole rows only: a range that cuts a row in two holds neither half's key.
    const uint64_t first_row = (lo - b + kb - 1) / kb, end_row = (hi - b) / kb;
    if (end_row <= first_row) continue;
    out.push_back({b + first_row * kb - first_byte, r.key_bytes, r.read_rows(b, first_row, end_row)});
  }
  return out;
}

void RegionMap::land(uint64_t first_byte, uint64_t bytes, const std::vector<Span>& spans) {
  clear_range(first_byte, first_byte + bytes);
  for (const Span& s : spans)
    if (s.content && s.content->rows()) regions_[first_byte + s.offset] = Region{first_byte + s.offset + s.content->rows() * s.key_bytes, s.key_bytes, s.content, nullptr};
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
  released_.count[p]++;
  released_.bytes[p] += bytes;
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
