#include "core/exec/ops.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <type_traits>

#include "core/common/error.hpp"

namespace joinlab {

const char* to_string(MemSpace s) {
  switch (s) {
    case MemSpace::Device: return "device";
    case MemSpace::Pinned: return "pinned";
    case MemSpace::Host: return "host";
  }
  return "?";
}

const char* to_string(OpKind k) {
  static const char* names[] = {"generate", "histogram", "partition", "build",  "probe",
                                "partitioned_join", "sort", "merge_join", "gather", "checksum",
                                "scan", "chunk_partition", "link_access", "multiway_merge", "merge", "pivot_search", "compress", "decompress", "copy", "send", "recv", "put", "pack_chunks", "stream_consume",
                                "star_generate", "star_probe"};
  return int(k) < int(OpKind::kCount) ? names[int(k)] : "?";
}

const char* to_string(Partitioner p) { return p == Partitioner::Shared ? "shared" : "hierarchical"; }

const char* to_string(LinkAccess a) {
  return a == LinkAccess::Read ? "read" : a == LinkAccess::Write ? "write" : "both";
}

void check_link_access(const LinkAccessOp& o) {
  const std::string what = std::string("link access (") + to_string(o.access) + "): ";
  if (o.granule < 16 || (o.granule & (o.granule - 1)) != 0)
    throw RuntimeError(what + "granule = " + std::to_string(o.granule) + " is not a power of two of 16 bytes or more");
  if (o.bytes % o.granule != 0)
    throw RuntimeError(what + "bytes = " + std::to_string(o.bytes) + " is not a multiple of granule = " +
                       std::to_string(o.granule));
  const uint64_t ways = o.access == LinkAccess::Both ? 2 : 1;
  if (o.bytes == 0) return;
  if (!o.host || o.host->bytes < ways * o.granule || (!o.random && o.host->bytes < ways * o.bytes))
    throw RuntimeError(what + "host buffer of " + std::to_string(o.host ? o.host->bytes : 0) + " bytes for " +
                       std::to_string(o.bytes) + " bytes each way in granules of " + std::to_string(o.granule) +
                       (o.random ? " at random positions" : " in order"));
  if (!o.device || o.device->bytes < ways * o.bytes)
    throw RuntimeError(what + "device buffer of " + std::to_string(o.device ? o.device->bytes : 0) + " bytes, " +
                       std::to_string(ways * o.bytes) + " needed");
}

ChunkLayout chunked_layout(const std::vector<uint64_t>& hist, uint32_t fanout, uint32_t cached_chunks) {
  if (fanout == 0 || hist.size() % fanout != 0)
    throw RuntimeError("chunked layout: " + std::to_string(hist.size()) + " histogram counts are not a whole number of " +
                       std::to_string(fanout) + "-partition histograms");
  const size_t chunks = hist.size() / fanout;
  ChunkLayout l;
  l.offsets.resize(hist.size());
  l.cache_starts.assign(size_t(fanout) + 1, 0);
  l.spill_starts.assign(size_t(fanout) + 1, 0);
  // Partition-major in each output: partition p starts after every chunk's rows of partitions < p,
  // and chunk c's run of p after the runs of the chunks before it in the same output. Both loops
  // go through the histograms in their (chunk-major) order: partition-major reads, a cache line
  // per count, took milliseconds for triton's 128 x 2048 second-pass counts.
  for (size_t c = 0; c < chunks; ++c) {
    std::vector<uint64_t>& starts = c < cached_chunks ? l.cache_starts : l.spill_starts;
    for (uint32_t p = 0; p < fanout; ++p) starts[p + 1] += hist[c * fanout + p];
  }
  for (uint32_t p = 0; p < fanout; ++p) {
    l.cache_starts[p + 1] += l.cache_starts[p];
    l.spill_starts[p + 1] += l.spill_starts[p];
  }
  std::vector<uint64_t> cache_at(l.cache_starts.begin(), l.cache_starts.end() - 1);
  std::vector<uint64_t> spill_at(l.spill_starts.begin(), l.spill_starts.end() - 1);
  for (size_t c = 0; c < chunks; ++c) {
    std::vector<uint64_t>& at = c < cached_chunks ? cache_at : spill_at;
    for (uint32_t p = 0; p < fanout; ++p) {
      l.offsets[c * fanout + p] = at[p];
      at[p] += hist[c * fanout + p];
    }
  }
  return l;
}

void check_chunk_partition(const ChunkPartitionOp& o) {
  const uint32_t F = o.fn.fanout();
  if (o.offsets_on_device) {
    if (!o.offsets.empty())
      throw RuntimeError("chunk partition: " + std::to_string(o.offsets.size()) +
                         " host offsets besides offsets_on_device (buffer '" + o.offsets_on_device->tag +
                         "'): give one or the other");
    if (o.cached_chunks != o.chunks.size())
      throw RuntimeError("chunk partition: offsets_on_device (buffer '" + o.offsets_on_device->tag +
                         "') lay out one output, but " + std::to_string(o.chunks.size() - std::min<size_t>(o.cached_chunks, o.chunks.size())) +
                         " of " + std::to_string(o.chunks.size()) + " chunks go to the spill buffer");
    const uint64_t need = uint64_t(o.chunks.size()) * F * sizeof(uint64_t);
    if (o.offsets_on_device->bytes < need)
      throw RuntimeError("chunk partition: offsets_on_device (buffer '" + o.offsets_on_device->tag + "') holds " +
                         std::to_string(o.offsets_on_device->bytes) + " bytes, " + std::to_string(o.chunks.size()) +
                         " chunks x " + std::to_string(F) + " partitions need " + std::to_string(need));
    for (size_t c = 0; c < o.chunks.size(); ++c)
      if (!(o.chunks[c].fmt == o.cache.fmt))
        throw RuntimeError("chunk partition: chunk " + std::to_string(c) + "'s tuple format differs from its output's");
    return;  // the offsets' values are the kernels' to check: rows past the cache's capacity are an error
  }
  if (o.offsets.size() != o.chunks.size() * F)
    throw RuntimeError("chunk partition: " + std::to_string(o.offsets.size()) + " offsets for " +
                       std::to_string(o.chunks.size()) + " chunks of " + std::to_string(F) + " partitions");
  if (o.cached_chunks > o.chunks.size())
    throw RuntimeError("chunk partition: cached_chunks = " + std::to_string(o.cached_chunks) + " but " +
                       std::to_string(o.chunks.size()) + " chunks");
  for (size_t c = 0; c < o.chunks.size(); ++c) {
    const Tuples& out = c < o.cached_chunks ? o.cache : o.spill;
    if (!(o.chunks[c].fmt == out.fmt))
      throw RuntimeError("chunk partition: chunk " + std::to_string(c) + "'s tuple format differs from its output's");
    for (uint32_t p = 0; p < F; ++p)
      if (o.offsets[c * F + p] > out.capacity)
        throw RuntimeError("chunk partition: chunk " + std::to_string(c) + " starts partition " + std::to_string(p) +
                           " at row " + std::to_string(o.offsets[c * F + p]) + " of " +
                           (c < o.cached_chunks ? "the cache" : "the spill buffer") + ", which holds " +
                           std::to_string(out.capacity));
  }
}

ChunkOffsets chunk_offsets(const ChunkPartitionOp& o, const uint64_t* words) {
  if (o.offsets_on_device) return {words, 1, o.chunks.size()};
  return {words, o.fn.fanout(), 1};
}

void check_histogram_counts(const HistogramOp& o) {
  if (!o.counts_out) return;
  const uint64_t k = histogram_ranges(o).size(), F = o.fn.fanout();
  const uint64_t stride = o.counts_stride ? o.counts_stride : k;
  const std::string buffer = "counts_out (buffer '" + o.counts_out->tag + "')";
  if (o.counts_first + k > stride)
    throw RuntimeError("histogram: " + buffer + " columns [" + std::to_string(o.counts_first) + ", " +
                       std::to_string(o.counts_first + k) + ") of " + std::to_string(k) +
                       " segments lie past counts_stride = " + std::to_string(stride));
  const uint64_t need = F * stride * sizeof(uint64_t);
  if (o.counts_out->bytes < need)
    throw RuntimeError("histogram: " + buffer + " holds " + std::to_string(o.counts_out->bytes) + " bytes, " +
                       std::to_string(F) + " partitions x " + std::to_string(stride) + " columns need " +
                       std::to_string(need));
}

std::vector<uint64_t> chunk_bounds(uint64_t rows, uint32_t chunks) {
  if (chunks == 0) throw RuntimeError("chunk bounds: no chunks");
  const uint64_t per = (rows + chunks - 1) / chunks;
  std::vector<uint64_t> b(size_t(chunks) + 1);
  for (uint32_t c = 0; c <= chunks; ++c) b[c] = std::min<uint64_t>(rows, uint64_t(c) * per);
  return b;
}

std::vector<uint64_t> piece_bounds(uint64_t rows, uint64_t piece) {
  const uint64_t pieces = std::max<uint64_t>(1, (rows + piece - 1) / piece);
  std::vector<uint64_t> b = chunk_bounds(rows, uint32_t(pieces));
  b.erase(std::unique(b.begin(), b.end()), b.end());
  if (b.size() < 2) b = {0, rows};
  return b;
}

uint64_t compress_bound(const CompressOp& o) {
  uint64_t bytes = 0;
  for (size_t i = 0; i < o.in.size() && i < o.configs.size(); ++i)
    bytes += codec::buffer_bound(o.in[i].rows, o.value_bytes, o.configs[i], o.chunk_log2);
  return bytes;
}

void check_compress(const CompressOp& o) {
  if (o.value_bytes != 4 && o.value_bytes != 8)
    throw RuntimeError("compress: values of " + std::to_string(o.value_bytes) + " bytes: must be 4 or 8");
  if (o.configs.size() != o.in.size())
    throw RuntimeError("compress: " + std::to_string(o.configs.size()) + " configurations for " +
                       std::to_string(o.in.size()) + " columns");
  if (o.chunk_log2 < codec::kMinChunkLog2 || o.chunk_log2 > codec::kMaxChunkLog2)
    throw RuntimeError("compress: chunk_log2 = " + std::to_string(o.chunk_log2) + " outside [" +
                       std::to_string(codec::kMinChunkLog2) + ", " + std::to_string(codec::kMaxChunkLog2) + "]");
  for (size_t i = 0; i < o.in.size(); ++i) {
    const codec::Config c = o.configs[i];
    if (!codec::valid(c))
      throw RuntimeError("compress: column " + std::to_string(i) + ": rle = " + std::to_string(c.rle) +
                         ", delta = " + std::to_string(c.delta) + ", delta first = " + std::to_string(c.delta_first) +
                         " (at most 2, 1 and delta)");
    if (o.in[i].rows >> 48) throw RuntimeError("compress: column " + std::to_string(i) + " has too many rows");
    const uint64_t need = (o.in[i].first + o.in[i].rows) * o.value_bytes;
    if (o.in[i].rows && (!o.in[i].buf || o.in[i].buf->bytes < need))
      throw RuntimeError("compress: column " + std::to_string(i) + " needs " + std::to_string(need) +
                         " bytes of its buffer, which holds " + std::to_string(o.in[i].buf ? o.in[i].buf->bytes : 0));
  }
  const uint64_t bound = compress_bound(o), have = o.out ? o.out->bytes : 0;
  if (have < bound)
    throw RuntimeError("compress: output of " + std::to_string(have) + " bytes, the batch may need " +
                       std::to_string(bound) + " (compress_bound)");
}

void check_decompress(const DecompressOp& o) {
  if (o.value_bytes != 4 && o.value_bytes != 8)
    throw RuntimeError("decompress: values of " + std::to_string(o.value_bytes) + " bytes: must be 4 or 8");
  if (o.offsets.size() != o.out.size() + 1)
    throw RuntimeError("decompress: " + std::to_string(o.offsets.size()) + " offsets for " +
                       std::to_string(o.out.size()) + " buffers (one more than buffers needed)");
  const uint64_t have = o.in ? o.in->bytes : 0;
  for (size_t b = 0; b < o.out.size(); ++b) {
    if (o.offsets[b + 1] < o.offsets[b] || (o.offsets[b] & 7) || o.offsets[b + 1] > have)
      throw RuntimeError("decompress: buffer " + std::to_string(b) + ": bytes [" + std::to_string(o.offsets[b]) +
                         ", " + std::to_string(o.offsets[b + 1]) + ") descend, start unaligned or pass the " +
                         std::to_string(have) + " bytes of the input");
    const uint64_t need = (o.out[b].first + o.out[b].rows) * o.value_bytes;
    if (o.out[b].rows && (!o.out[b].buf || o.out[b].buf->bytes < need))
      throw RuntimeError("decompress: buffer " + std::to_string(b) + "'s output needs " + std::to_string(need) +
                         " bytes, its buffer holds " + std::to_string(o.out[b].buf ? o.out[b].buf->bytes : 0));
  }
}

const char* to_string(TableKind k) {
  switch (k) {
    case TableKind::LinearProbing: return "linear";
    case TableKind::Chained: return "chained";
    case TableKind::HashRowId: return "hash_rowid";
  }
  return "?";
}

void attach_rowid_relation(HashTable& t, const Tuples& in) {
  if (t.rows == 0) {
    t.keys = in.keys;
    t.vals = in.vals;
    t.base = in.offset;
  } else if (t.keys != in.keys || t.vals != in.vals || in.offset != t.base + t.rows) {
    throw RuntimeError("build: a hash_rowid table holds row ids into one relation; this input (offset " +
                       std::to_string(in.offset) + ") does not continue the rows it holds (" + std::to_string(t.rows) +
                       " from offset " + std::to_string(t.base) + ")");
  }
}

uint64_t hash_table_slots(uint64_t rows, double load_factor) {
  if (load_factor <= 0 || load_factor > 1) load_factor = 0.5;
  double want = double(rows ? rows : 1) / load_factor;
  uint64_t slots = 1;
  while (double(slots) < want) slots <<= 1;
  return slots;
}

uint64_t hash_table_bytes(TableKind kind, TupleFormat fmt, uint64_t rows, double load_factor) {
  uint64_t slots = hash_table_slots(rows, load_factor);
  if (kind == TableKind::LinearProbing) return slots * fmt.tuple_bytes();
  if (kind == TableKind::HashRowId) return slots * 8;  // the rows stay in the build relation
  return slots * 4 + (rows ? rows : 1) * (4 + fmt.tuple_bytes());
}

std::vector<RowRange> histogram_ranges(const HistogramOp& o) {
  if (!o.in_ranges.empty()) {
    if (!o.in_segments.empty())
      throw RuntimeError("histogram: both in_segments (" + std::to_string(o.in_segments.size()) + " offsets) and in_ranges (" +
                         std::to_string(o.in_ranges.size()) + " ranges): give one or the other");
    for (size_t i = 0; i < o.in_ranges.size(); ++i)
      if (o.in_ranges[i].begin > o.in_ranges[i].end || o.in_ranges[i].end > o.in.rows)
        throw RuntimeError("histogram: in_ranges[" + std::to_string(i) + "] = [" + std::to_string(o.in_ranges[i].begin) +
                           ", " + std::to_string(o.in_ranges[i].end) + ") is not a range of the input's " +
                           std::to_string(o.in.rows) + " rows");
    return o.in_ranges;
  }
  if (o.in_segments.empty()) return {RowRange{0, o.in.rows}};
  if (o.in_segments.size() == 1)
    throw RuntimeError("histogram: in_segments holds the single offset " + std::to_string(o.in_segments[0]) +
                       ": a segment needs two (none: the whole input)");
  check_ascending(o.in_segments, "histogram: in_segments");
  if (o.in_segments.back() > o.in.rows)
    throw RuntimeError("histogram: in_segments end at row " + std::to_string(o.in_segments.back()) +
                       ", past the input's " + std::to_string(o.in.rows) + " rows");
  std::vector<RowRange> r;
  for (size_t i = 0; i + 1 < o.in_segments.size(); ++i) r.push_back({o.in_segments[i], o.in_segments[i + 1]});
  return r;
}

uint64_t histogram_rows(const HistogramOp& o) {
  if (o.in_ranges.empty())
    return o.in_segments.size() > 1 ? o.in_segments.back() - o.in_segments.front() : o.in_segments.empty() ? o.in.rows : 0;
  uint64_t n = 0;
  for (const RowRange& r : o.in_ranges) n += r.size();
  return n;
}

bool ranges_adjacent(const std::vector<RowRange>& r) {
  for (size_t i = 1; i < r.size(); ++i)
    if (r[i].begin != r[i - 1].end) return false;
  return true;
}

void check_pack_plan(const PackChunksOp& op) {
  const char* name = "pack_chunks";
  const size_t fanout = op.rows.size();
  if (op.partition_by && !op.begin.empty())
    throw RuntimeError(std::string(name) + ": an input partitioned while packed has no begins (" +
                       std::to_string(op.begin.size()) + " given)");
  if ((op.partition_by ? fanout : op.begin.size()) != fanout || op.first_seq.size() != fanout)
    throw RuntimeError(std::string(name) + ": " + std::to_string(op.begin.size()) + " begins, " +
                       std::to_string(fanout) + " row counts and " + std::to_string(op.first_seq.size()) +
                       " sequence numbers do not describe the same partitions");
  if (op.slot_rows == 0 || op.slot_rows >= (1ULL << 32))
    throw RuntimeError(std::string(name) + ": slot_rows must be in [1, 2^32)");
  if (!op.partition_by) {
    if (!op.in_slices.empty() || !op.slice_rows.empty())
      throw RuntimeError(std::string(name) + ": slices of an input that is partitioned already");
    for (size_t p = 0; p < fanout; ++p)
      if (op.rows[p] && op.begin[p] + op.rows[p] > op.in.rows)
        throw RuntimeError(std::string(name) + ": partition " + std::to_string(p) + " rows [" +
                           std::to_string(op.begin[p]) + ", " + std::to_string(op.begin[p] + op.rows[p]) +
                           ") lie past the " + std::to_string(op.in.rows) + " input rows");
    return;
  }
  if (op.in_slices.empty() && op.slice_rows.empty()) return;
  const size_t k = op.in_slices.size() < 2 ? 0 : op.in_slices.size() - 1;
  if (k == 0 || op.in_slices.front() != 0 || op.in_slices.back() != op.in.rows || op.slice_rows.size() != k * fanout)
    throw RuntimeError(std::string(name) + ": " + std::to_string(op.in_slices.size()) + " slice bounds and " +
                       std::to_string(op.slice_rows.size()) + " slice counts do not describe " +
                       std::to_string(op.in.rows) + " rows in " + std::to_string(fanout) + " partitions");
  check_ascending(op.in_slices, std::string(name) + ": slice");
}

OpParams params_of(const Op& op) {
  OpParams p;
  std::visit(
      [&](const auto& o) {
        using T = std::decay_t<decltype(o)>;
        if constexpr (std::is_same_v<T, GenerateOp>) {
          p.kind = OpKind::Generate;
          p.rows_out = o.out.rows;
          p.key_bytes = o.out.fmt.key_bytes;
          p.val_bytes = o.out.fmt.val_bytes;
          p.detail = to_string(o.spec.dist);
        } else if constexpr (std::is_same_v<T, GeneratePayloadOp>) {
          p.kind = OpKind::Generate;
          p.rows_out = o.rows;
          p.val_bytes = o.spec.payload_bytes[size_t(o.column)];
          p.detail = "payload";
        } else if constexpr (std::is_same_v<T, HistogramOp>) {
          p.kind = OpKind::Histogram;
          p.rows_in = o.in.rows;
          p.key_bytes = o.in.fmt.key_bytes;
          p.val_bytes = o.in.fmt.val_bytes;
          p.fanout = o.fn.fanout();
          p.rows_in = histogram_rows(o);
          if (!o.in_segments.empty()) p.detail = "segments " + std::to_string(o.in_segments.size() - 1);
          if (!o.in_ranges.empty()) p.detail = "ranges " + std::to_string(o.in_ranges.size());
          if (o.placement != HistogramOp::Placement::Auto)
            p.detail += std::string(p.detail.empty() ? "" : ", ") +
                        (o.placement == HistogramOp::Placement::Host ? "on the host" : "on the device");
          if (o.counts_out) p.detail += std::string(p.detail.empty() ? "" : ", ") + "counts kept";
        } else if constexpr (std::is_same_v<T, PartitionOp>) {
          p.kind = OpKind::Partition;
          p.rows_in = p.rows_out = o.in.rows;
          p.key_bytes = o.in.fmt.key_bytes;
          p.val_bytes = o.in.fmt.val_bytes;
          p.fanout = o.fn.fanout();
          p.detail = o.in_segments.empty() ? "pass 1" : "segments " + std::to_string(o.in_segments.size() - 1);
        } else if constexpr (std::is_same_v<T, BuildOp>) {
          p.kind = OpKind::Build;
          p.rows_in = p.rows_build = o.in.rows;
          p.key_bytes = o.in.fmt.key_bytes;
          p.val_bytes = o.in.fmt.val_bytes;
          p.table_slots = o.table->slots;
          p.detail = to_string(o.table->kind);
        } else if constexpr (std::is_same_v<T, ProbeOp>) {
          p.kind = OpKind::Probe;
          p.rows_in = o.probe.rows;
          p.rows_build = o.table->rows;
          p.key_bytes = o.probe.fmt.key_bytes;
          p.val_bytes = o.probe.fmt.val_bytes;
          p.table_slots = o.table->slots;
          p.detail = to_string(o.table->kind);
        } else if constexpr (std::is_same_v<T, PartitionedJoinOp>) {
          p.kind = OpKind::PartitionedJoin;
          p.rows_build = o.r.all.rows;
          p.rows_in = o.r.all.rows + o.s.all.rows;
          p.key_bytes = o.s.all.fmt.key_bytes;
          p.val_bytes = o.s.all.fmt.val_bytes;
          p.fanout = o.r.fanout();
        } else if constexpr (std::is_same_v<T, SortOp>) {
          p.kind = OpKind::Sort;
          p.rows_in = p.rows_out = o.in.rows;
          p.key_bytes = o.in.fmt.key_bytes;
          p.val_bytes = o.in.fmt.val_bytes;
          p.detail = o.algo == SortAlgo::Radix ? "radix" : "merge";
        } else if constexpr (std::is_same_v<T, MergeJoinOp>) {
          p.kind = OpKind::MergeJoin;
          p.rows_build = o.r.rows;
          p.rows_in = o.r.rows + o.s.rows;
          p.key_bytes = o.s.fmt.key_bytes;
          p.val_bytes = o.s.fmt.val_bytes;
        } else if constexpr (std::is_same_v<T, GatherOp>) {
          p.kind = OpKind::Gather;
          p.rows_in = p.rows_out = o.rows;
          p.key_bytes = o.id_bytes;
          p.val_bytes = o.col_bytes;
        } else if constexpr (std::is_same_v<T, ChecksumOp>) {
          p.kind = OpKind::Checksum;
          p.rows_in = o.rows;
          p.key_bytes = o.key_bytes;
          for (auto b : o.column_bytes) p.val_bytes += b;
        } else if constexpr (std::is_same_v<T, ScanOp>) {
          p.kind = OpKind::Scan;
          p.rows_in = p.rows_out = o.n;
          p.val_bytes = 8;
        } else if constexpr (std::is_same_v<T, ChunkPartitionOp>) {
          p.kind = OpKind::ChunkPartition;
          for (const Tuples& c : o.chunks) p.rows_in += c.rows;
          p.rows_out = p.rows_in;
          if (!o.chunks.empty()) p.key_bytes = o.chunks[0].fmt.key_bytes, p.val_bytes = o.chunks[0].fmt.val_bytes;
          p.fanout = o.fn.fanout();
          p.detail = std::string(to_string(o.partitioner)) + ", " + std::to_string(o.cached_chunks) + " of " +
                     std::to_string(o.chunks.size()) + " chunks cached" +
                     (o.offsets_on_device ? ", offsets on the device" : "");
        } else if constexpr (std::is_same_v<T, LinkAccessOp>) {
          p.kind = OpKind::LinkAccess;
          p.bytes = o.bytes * (o.access == LinkAccess::Both ? 2 : 1);
          p.detail = std::string(to_string(o.access)) + ", " + std::to_string(o.granule) + "-byte " +
                     (o.random ? "random" : "sequential") + " accesses";
        } else if constexpr (std::is_same_v<T, MultiwayMergeOp>) {
          p.kind = OpKind::MultiwayMerge;
          for (const Tuples& r : o.runs) p.rows_in += r.rows;
          p.rows_out = p.rows_in;
          p.key_bytes = o.out.fmt.key_bytes, p.val_bytes = o.out.fmt.val_bytes;
          p.fanout = uint32_t(o.runs.size());
          p.detail = std::to_string(o.runs.size()) + " runs";
        } else if constexpr (std::is_same_v<T, MergeOp>) {
          p.kind = OpKind::Merge;
          p.rows_in = p.rows_out = o.a.rows + o.b.rows;
          p.key_bytes = o.out.fmt.key_bytes, p.val_bytes = o.out.fmt.val_bytes;
        } else if constexpr (std::is_same_v<T, PivotSearchOp>) {
          p.kind = OpKind::PivotSearch;
          p.rows_in = 2 * o.n;
          p.key_bytes = o.key_bytes;
        } else if constexpr (std::is_same_v<T, CompressOp>) {
          p.kind = OpKind::Compress;
          for (const CodecColumn& c : o.in) p.rows_in += c.rows;
          p.key_bytes = o.value_bytes;
          p.fanout = uint32_t(o.in.size());
        } else if constexpr (std::is_same_v<T, DecompressOp>) {
          p.kind = OpKind::Decompress;
          p.bytes = o.offsets.empty() ? 0 : o.offsets.back() - o.offsets.front();
          p.key_bytes = o.value_bytes;
          p.fanout = uint32_t(o.out.size());
        } else if constexpr (std::is_same_v<T, StarGenerateOp>) {
          p.kind = OpKind::StarGenerate;
          p.rows_out = o.out.rows;
          p.key_bytes = o.out.fmt.key_bytes;
          p.val_bytes = o.out.fmt.val_bytes;
          p.detail = ssb::to_string(o.table);
        } else if constexpr (std::is_same_v<T, StarProbeOp>) {
          p.kind = OpKind::StarProbe;
          p.rows_in = o.in.rows;
          p.key_bytes = o.in.fmt.key_bytes;
          p.val_bytes = o.in.fmt.val_bytes;
          p.fanout = uint32_t(o.dims.size());
          for (const HashTable* t : o.dims) p.rows_build += t ? t->rows : 0;
          p.detail = ssb::to_string(SsbQuery(o.query.query));
        }
      },
      op);
  return p;
}

StreamProgress::StreamProgress(size_t rings) : n_(rings) {
  const size_t page = size_t(sysconf(_SC_PAGESIZE));
  bytes_ = ((rings + 1) * sizeof(uint64_t) + page - 1) / page * page;
  words_ = static_cast<uint64_t*>(std::aligned_alloc(page, bytes_));
  if (!words_) throw std::bad_alloc();
  std::memset(words_, 0, bytes_);
}
StreamProgress::~StreamProgress() { std::free(words_); }

void StreamProgress::release(size_t ring, uint64_t chunks) {
  __atomic_store_n(&words_[ring], chunks, __ATOMIC_RELEASE);
  __atomic_add_fetch(&releases_, 1, __ATOMIC_RELEASE);  // after the word: a reader that sees it sees the word
}
void StreamProgress::cancel() { __atomic_store_n(reinterpret_cast<int*>(words_ + n_), 1, __ATOMIC_RELEASE); }
bool StreamProgress::cancelled() const {
  return __atomic_load_n(reinterpret_cast<const int*>(words_ + n_), __ATOMIC_ACQUIRE) != 0;
}

void check_star_probe(const StarProbeOp& op) {
  if (op.dims.size() != op.query.steps)
    throw RuntimeError("star probe: " + std::to_string(op.dims.size()) + " dimension tables for a plan of " +
                       std::to_string(op.query.steps) + " steps");
  for (size_t i = 0; i < op.dims.size(); ++i) {
    const HashTable* t = op.dims[i];
    if (!t || t->kind != TableKind::Chained || t->fmt.key_bytes != 4 || t->fmt.val_bytes != 4)
      throw RuntimeError("star probe: dimension table " + std::to_string(i) + " (" +
                         ssb::to_string(ssb::Table(op.query.table[i])) +
                         ") must be a chained table of 4-byte keys and values");
  }
  if (op.in.rows && (op.in.fmt.key_bytes != 8 || op.in.fmt.val_bytes != 8))
    throw RuntimeError("star probe: lineorder tuples are 8 + 8 bytes, not " + std::to_string(op.in.fmt.key_bytes) +
                       " + " + std::to_string(op.in.fmt.val_bytes));
  if (!op.groups || op.groups->bytes < uint64_t(op.query.groups) * 8)
    throw RuntimeError("star probe: the groups buffer holds fewer than the query's " +
                       std::to_string(op.query.groups) + " sums");
}

std::vector<ssb::DimTableRef> dim_table_refs(const StarProbeOp& op) {
  std::vector<ssb::DimTableRef> refs;
  for (const HashTable* t : op.dims)
    refs.push_back({data_of<uint32_t>(t->heads), data_of<uint32_t>(t->next), data_of<uint32_t>(t->keys),
                    data_of<uint32_t>(t->vals), t->slots, t->hash_seed});
  return refs;
}

OpParams params_of(const StreamingOp& op) {
  OpParams p;
  if (auto* pack = std::get_if<PackChunksOp>(&op)) {
    p.kind = OpKind::PackChunks;
    p.rows_in = p.rows_out = pack->in.rows;
    p.key_bytes = pack->in.fmt.key_bytes;
    p.val_bytes = pack->in.fmt.val_bytes;
    p.fanout = uint32_t(pack->rows.size());
    p.detail = pack->relation == 0 ? "R" : "S";
    if (pack->partition_by) p.detail += ", partitioned while packed";
  } else if (auto* c = std::get_if<StreamConsumeOp>(&op)) {
    p.kind = OpKind::StreamConsume;
    uint64_t r = 0, s = 0;
    for (const auto& t : c->tables) p.table_slots += t.slots;
    for (auto n : c->r_chunks) r += n;
    for (auto n : c->s_chunks) s += n;
    p.rows_build = 0;
    for (const auto& t : c->tables) p.rows_build += t.rows;
    p.key_bytes = c->r_fmt.key_bytes;
    p.val_bytes = c->s_fmt.val_bytes;
    p.fanout = c->parts;
    p.bytes = (r + s) * c->slot_bytes;
    p.detail = std::to_string(r) + " R + " + std::to_string(s) + " S chunks of " + std::to_string(c->slot_rows) + " rows";
    if (c->star) p.detail += std::string(", chained probes of ") + ssb::to_string(SsbQuery(c->star->query.query));
  }
  return p;
}

}  // namespace joinlab
