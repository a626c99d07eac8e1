#include "kernels/cuda/cuda_ops.hpp"

#include <sstream>
#include <type_traits>

#include "core/workload/generate.hpp"
#include "core/workload/tpch.hpp"
#include "kernels/cpu/codec.hpp"
#include "kernels/cuda/cuda_check.hpp"

namespace joinlab::cuda {

namespace {

// Calls f(K{}, V{}) with the unsigned types of the given widths.
template <class F>
void with_types(uint8_t a, uint8_t b, F&& f) {
  auto bad = [](uint8_t w) {
    if (w != 4 && w != 8) throw RuntimeError("column width " + std::to_string(w) + " bytes: must be 4 or 8");
  };
  bad(a);
  bad(b);
  if (a == 4 && b == 4) f(uint32_t{}, uint32_t{});
  else if (a == 4) f(uint32_t{}, uint64_t{});
  else if (b == 4) f(uint64_t{}, uint32_t{});
  else f(uint64_t{}, uint64_t{});
}
template <class F>
void with_types(uint8_t a, uint8_t b, uint8_t c, F&& f) {
  with_types(a, b, [&](auto ta, auto tb) {
    if (c == 4) f(ta, tb, uint32_t{});
    else if (c == 8) f(ta, tb, uint64_t{});
    else throw RuntimeError("column width " + std::to_string(c) + " bytes: must be 4 or 8");
  });
}

std::string tag_of(const Buffer& b) { return b ? b->tag : "(none)"; }

// A kernel reads or writes `elems` elements of `width` bytes from element `offset` of `b`.
void need(const Buffer& b, uint64_t offset, uint64_t elems, uint32_t width, const char* op, const char* what) {
  if (!elems) return;
  if (!b || !b->ptr)
    throw RuntimeError(std::string(op) + ": " + what + " has no memory (buffer " + tag_of(b) + ")");
  if (b->space == MemSpace::Host)
    throw RuntimeError(std::string(op) + ": " + what + " (buffer " + b->tag +
                       ") is in pageable host memory, which CUDA kernels cannot read; allocate it as pinned or device");
  if ((offset + elems) * width > b->bytes) {
    std::ostringstream m;
    m << op << ": " << what << " needs elements [" << offset << ", " << offset + elems << ") of " << width
      << " bytes, but buffer " << b->tag << " holds " << b->bytes << " bytes";
    throw RuntimeError(m.str());
  }
}
void need_tuples(const Tuples& t, uint64_t rows, const char* op, const char* what) {
  need(t.keys, t.offset, rows, t.fmt.key_bytes, op, (std::string(what) + " keys").c_str());
  need(t.vals, t.offset, rows, t.fmt.val_bytes, op, (std::string(what) + " values").c_str());
}
void need_output(const JoinOutput& o, OutputMode mode, const char* op) {
  if (mode == OutputMode::CountOnly) return;
  need(o.keys, 0, o.capacity, o.r_fmt.key_bytes, op, "output keys");
  need(o.rvals, 0, o.capacity, o.r_fmt.val_bytes, op, "output R values");
  need(o.svals, 0, o.capacity, o.s_fmt.val_bytes, op, "output S values");
}

template <class K, class VR, class VS>
JoinSinkRef<K, VR, VS> sink_of(const JoinOutput& o, uint64_t first, OutputMode mode) {
  JoinSinkRef<K, VR, VS> s;
  s.keys = data_of<K>(o.keys);
  s.rvals = data_of<VR>(o.rvals);
  s.svals = data_of<VS>(o.svals);
  s.first = first;
  s.capacity = o.capacity;
  s.mode = mode;
  return s;
}

template <class K, class V>
LinearTableRef<K, V> linear_of(const HashTable& t) {
  return {data_of<K>(t.keys), data_of<V>(t.vals), t.slots, t.hash_seed};
}
template <class K, class V>
ChainedTableRef<K, V> chained_of(const HashTable& t) {
  return {data_of<uint32_t>(t.heads), data_of<uint32_t>(t.next), data_of<K>(t.keys), data_of<V>(t.vals), t.slots,
          t.hash_seed};
}
template <class K, class V>
RowIdTableRef<K, V> rowid_of(const HashTable& t) {
  return {data_of<uint64_t>(t.heads), data_of<K>(t.keys, t.base), data_of<V>(t.vals, t.base), t.slots, t.hash_seed};
}
uint64_t chained_capacity(const HashTable& t) { return t.next ? t.next->bytes / sizeof(uint32_t) : 0; }

void check_table(const HashTable& t, const char* op) {
  if (!t.slots || (t.slots & (t.slots - 1)))
    throw RuntimeError(std::string(op) + ": hash table slots = " + std::to_string(t.slots) + " is not a power of two");
  if (t.kind == TableKind::HashRowId) {
    need(t.heads, 0, t.slots, 8, op, "table slots");
    if (t.rows) {
      need(t.keys, t.base, t.rows, t.fmt.key_bytes, op, "table keys (the build relation)");
      need(t.vals, t.base, t.rows, t.fmt.val_bytes, op, "table values (the build relation)");
    }
  } else if (t.kind == TableKind::LinearProbing) {
    need(t.keys, 0, t.slots, t.fmt.key_bytes, op, "table keys");
    need(t.vals, 0, t.slots, t.fmt.val_bytes, op, "table values");
  } else {
    need(t.heads, 0, t.slots, 4, op, "table heads");
  }
}

void queue(KernelContext& ctx, const GenerateOp& o, uint64_t*) {
  need_tuples(o.out, o.out.rows, "generate", "output");
  const KeyGen gen = make_keygen(o.spec, o.referenced);
  const uint64_t seed = relation_seed(o.spec);
  with_types(o.out.fmt.key_bytes, o.out.fmt.val_bytes, [&](auto k, auto v) {
    using K = decltype(k);
    using V = decltype(v);
    generate<K, V>(ctx, gen, seed, o.value_is_rowid, o.first_row, o.out.rows, o.out.key_ptr<K>(), o.out.val_ptr<V>());
  });
}

void queue(KernelContext& ctx, const GeneratePayloadOp& o, uint64_t*) {
  if (o.column < 0 || size_t(o.column) >= o.spec.payload_bytes.size())
    throw RuntimeError("generate payload: relation " + o.spec.name + " has no payload column " + std::to_string(o.column));
  const uint8_t width = o.spec.payload_bytes[size_t(o.column)];
  need(o.out, 0, o.rows, width, "generate payload", "output");
  if (width == 4)
    generate_payload<uint32_t>(ctx, relation_seed(o.spec), o.column, o.first_row, o.rows, data_of<uint32_t>(o.out));
  else
    generate_payload<uint64_t>(ctx, relation_seed(o.spec), o.column, o.first_row, o.rows, data_of<uint64_t>(o.out));
}

void queue(KernelContext& ctx, const HistogramOp& o, uint64_t* d_words) {
  need(o.in.keys, o.in.offset, o.in.rows, o.in.fmt.key_bytes, "histogram", "input keys");
  std::vector<std::pair<uint64_t, uint64_t>> seg;
  for (const RowRange& r : histogram_ranges(o)) seg.push_back({r.begin, r.end});
  check_histogram_counts(o);
  const uint64_t k = seg.size(), F = o.fn.fanout();
  const uint64_t stride = o.counts_stride ? o.counts_stride : k;
  if (o.counts_out) need(o.counts_out, 0, F * stride, 8, "histogram", "counts_out");
  // Segment s counts into its own words, every segment in one launch: the result words, or with
  // counts_out zeroed scratch that is spread into the buffer (the result keeps the totals).
  uint64_t* counts = d_words + kFirstValueWord;
  if (o.counts_out) {
    counts = ctx.scratch_array<uint64_t>(k * F);
    zero_words(ctx, counts, k * F);
  }
  if (o.in.fmt.key_bytes == 4)
    histogram<uint32_t>(ctx, o.in.key_ptr<uint32_t>(), seg, o.fn, counts);
  else
    histogram<uint64_t>(ctx, o.in.key_ptr<uint64_t>(), seg, o.fn, counts);
  ctx.mark(o.in_segments.empty() && o.in_ranges.empty() ? "histogram" : "segmented histogram");
  if (o.counts_out)
    spread_counts(ctx, counts, k, uint32_t(F), data_of<uint64_t>(o.counts_out), o.counts_first, stride,
                  d_words + kFirstValueWord);
}

std::vector<uint64_t> segments_of(const PartitionOp& o) {
  return o.in_segments.empty() ? std::vector<uint64_t>{0, o.in.rows} : o.in_segments;
}

void queue(KernelContext& ctx, const PartitionOp& o, uint64_t* d_words) {
  const std::vector<uint64_t> seg = segments_of(o);
  if (seg.size() < 2 || seg.back() > o.in.rows)
    throw RuntimeError("partition: segment offsets end at " + std::to_string(seg.back()) + " but the input has " +
                       std::to_string(o.in.rows) + " rows");
  const uint64_t rows = seg.back() - seg.front();
  if (!(o.out.fmt == o.in.fmt)) throw RuntimeError("partition: input and output tuple formats differ");
  if (o.out.capacity < rows)
    throw RuntimeError("partition: output holds " + std::to_string(o.out.capacity) + " rows, the input has " +
                       std::to_string(rows));
  need_tuples(o.in, seg.back(), "partition", "input");
  need_tuples(o.out, rows, "partition", "output");
  with_types(o.in.fmt.key_bytes, o.in.fmt.val_bytes, [&](auto k, auto v) {
    using K = decltype(k);
    using V = decltype(v);
    partition<K, V>(ctx, o.in.key_ptr<K>(), o.in.val_ptr<V>(), seg, o.fn, o.out.key_ptr<K>(), o.out.val_ptr<V>(),
                    d_words + kFirstValueWord);
  });
  if (o.offsets_out) {  // the offsets also stay on the device, for the operator that reads them next
    const uint64_t bytes = (uint64_t(seg.size() - 1) * o.fn.fanout() + 1) * sizeof(uint64_t);
    if (!o.offsets_out->ptr || o.offsets_out->bytes < bytes)
      throw RuntimeError("partition: offsets_out holds " + std::to_string(o.offsets_out->bytes) + " bytes, the offsets need " +
                         std::to_string(bytes));
    JL_CUDA_CHECK(cudaMemcpyAsync(o.offsets_out->ptr, d_words + kFirstValueWord, bytes, cudaMemcpyDefault, ctx.stream()));
  }
}

void queue(KernelContext& ctx, const BuildOp& o, uint64_t*) {
  HashTable& t = *o.table;
  check_table(t, "build");
  need_tuples(o.in, o.in.rows, "build", "input");
  if (!(o.in.fmt == t.fmt)) throw RuntimeError("build: input and table tuple formats differ");
  const bool chained = t.kind == TableKind::Chained;
  const uint64_t room = chained ? chained_capacity(t) : t.slots;
  if (t.rows + o.in.rows > room)
    throw RuntimeError("build: hash table full: " + std::to_string(t.rows) + " rows present + " +
                       std::to_string(o.in.rows) + " to insert > " + std::to_string(room) +
                       (chained ? " rows of chain capacity" : " slots"));
  if (t.kind != TableKind::LinearProbing && t.rows + o.in.rows >= ~0u)
    throw RuntimeError(std::string("build: ") + to_string(t.kind) + " table rows must fit 32-bit row indices");
  if (t.kind == TableKind::HashRowId) attach_rowid_relation(t, o.in);
  with_types(t.fmt.key_bytes, t.fmt.val_bytes, [&](auto k, auto v) {
    using K = decltype(k);
    using V = decltype(v);
    if (t.kind == TableKind::LinearProbing) {
      const auto ref = linear_of<K, V>(t);
      if (t.rows == 0) clear_table(ctx, ref);
      build(ctx, ref, o.in.key_ptr<K>(), o.in.val_ptr<V>(), o.in.rows);
    } else if (t.kind == TableKind::HashRowId) {
      const auto ref = rowid_of<K, V>(t);
      if (t.rows == 0) clear_table(ctx, ref);
      build(ctx, ref, t.rows, o.in.rows);
    } else {
      need(t.keys, 0, t.rows + o.in.rows, t.fmt.key_bytes, "build", "table keys");
      need(t.vals, 0, t.rows + o.in.rows, t.fmt.val_bytes, "build", "table values");
      const auto ref = chained_of<K, V>(t);
      if (t.rows == 0) clear_table(ctx, ref);
      build(ctx, ref, t.rows, o.in.key_ptr<K>(), o.in.val_ptr<V>(), o.in.rows);
    }
  });
  t.rows += o.in.rows;
}

void queue(KernelContext& ctx, const ProbeOp& o, uint64_t* d_words) {
  const HashTable& t = *o.table;
  check_table(t, "probe");
  need_tuples(o.probe, o.probe.rows, "probe", "probe input");
  need_output(o.out, o.mode, "probe");
  if (o.probe.fmt.key_bytes != t.fmt.key_bytes) throw RuntimeError("probe: probe and table key widths differ");
  with_types(t.fmt.key_bytes, t.fmt.val_bytes, o.probe.fmt.val_bytes, [&](auto k, auto vr, auto vs) {
    using K = decltype(k);
    using VR = decltype(vr);
    using VS = decltype(vs);
    const auto sink = sink_of<K, VR, VS>(o.out, o.out_first, o.mode);
    if (t.kind == TableKind::LinearProbing)
      probe(ctx, linear_of<K, VR>(t), o.probe.key_ptr<K>(), o.probe.val_ptr<VS>(), o.probe.rows, sink, d_words);
    else if (t.kind == TableKind::HashRowId)
      probe(ctx, rowid_of<K, VR>(t), o.probe.key_ptr<K>(), o.probe.val_ptr<VS>(), o.probe.rows, sink, d_words);
    else
      probe(ctx, chained_of<K, VR>(t), o.probe.key_ptr<K>(), o.probe.val_ptr<VS>(), o.probe.rows, sink, d_words);
  });
}

// A partitioning's offsets in device memory (its partition operator's offsets_out), or null.
const uint64_t* offsets_on_device(const Partitioned& p) {
  const Buffer& b = p.offsets_copy;
  if (!b || !b->ptr || b->space != MemSpace::Device || b->bytes < p.offsets.size() * sizeof(uint64_t)) return nullptr;
  return static_cast<const uint64_t*>(b->ptr);
}

void queue(KernelContext& ctx, const PartitionedJoinOp& o, uint64_t* d_words) {
  if (o.r.offsets.empty() || o.s.offsets.empty()) return;
  need_tuples(o.r.all, o.r.offsets.back(), "partitioned join", "R");
  need_tuples(o.s.all, o.s.offsets.back(), "partitioned join", "S");
  need_output(o.out, o.mode, "partitioned join");
  if (o.r.all.fmt.key_bytes != o.s.all.fmt.key_bytes) throw RuntimeError("partitioned join: R and S key widths differ");
  with_types(o.r.all.fmt.key_bytes, o.r.all.fmt.val_bytes, o.s.all.fmt.val_bytes, [&](auto k, auto vr, auto vs) {
    using K = decltype(k);
    using VR = decltype(vr);
    using VS = decltype(vs);
    partitioned_join<K, VR, VS>(ctx, o.r.all.key_ptr<K>(), o.r.all.val_ptr<VR>(), o.r.offsets, o.s.all.key_ptr<K>(),
                                o.s.all.val_ptr<VS>(), o.s.offsets, offsets_on_device(o.r), offsets_on_device(o.s),
                                o.table, sink_of<K, VR, VS>(o.out, o.out_first, o.mode), d_words);
  });
}

void queue(KernelContext& ctx, const SortOp& o, uint64_t*) {
  need_tuples(o.in, o.in.rows, "sort", "input");
  need_tuples(o.out, o.in.rows, "sort", "output");
  if (!(o.in.fmt == o.out.fmt)) throw RuntimeError("sort: input and output tuple formats differ");
  with_types(o.in.fmt.key_bytes, o.in.fmt.val_bytes, [&](auto k, auto v) {
    using K = decltype(k);
    using V = decltype(v);
    sort_pairs<K, V>(ctx, o.in.key_ptr<K>(), o.in.val_ptr<V>(), o.in.rows, o.out.key_ptr<K>(), o.out.val_ptr<V>(), o.algo);
  });
}

void queue(KernelContext& ctx, const MergeJoinOp& o, uint64_t* d_words) {
  need_tuples(o.r, o.r.rows, "merge join", "R");
  need_tuples(o.s, o.s.rows, "merge join", "S");
  need_output(o.out, o.mode, "merge join");
  if (o.r.fmt.key_bytes != o.s.fmt.key_bytes) throw RuntimeError("merge join: R and S key widths differ");
  with_types(o.r.fmt.key_bytes, o.r.fmt.val_bytes, o.s.fmt.val_bytes, [&](auto k, auto vr, auto vs) {
    using K = decltype(k);
    using VR = decltype(vr);
    using VS = decltype(vs);
    merge_join<K, VR, VS>(ctx, o.r.key_ptr<K>(), o.r.val_ptr<VR>(), o.r.rows, o.s.key_ptr<K>(), o.s.val_ptr<VS>(),
                          o.s.rows, sink_of<K, VR, VS>(o.out, o.out_first, o.mode), d_words);
  });
}

void queue(KernelContext& ctx, const GatherOp& o, uint64_t* d_words) {
  need(o.row_ids, 0, o.rows, o.id_bytes, "gather", "row ids");
  need(o.out, 0, o.rows, o.col_bytes, "gather", "output");
  const uint64_t column_rows = o.column && o.col_bytes ? o.column->bytes / o.col_bytes : 0;
  need(o.column, 0, column_rows, o.col_bytes, "gather", "column");
  with_types(o.id_bytes, o.col_bytes, [&](auto i, auto c) {
    using I = decltype(i);
    using C = decltype(c);
    gather<I, C>(ctx, data_of<I>(o.row_ids), data_of<C>(o.column), column_rows, o.base_row, o.rows, data_of<C>(o.out),
                 d_words);
  });
}

void queue(KernelContext& ctx, const ChecksumOp& o, uint64_t* d_words) {
  if (o.columns.size() != o.column_bytes.size())
    throw RuntimeError("checksum: " + std::to_string(o.columns.size()) + " columns but " +
                       std::to_string(o.column_bytes.size()) + " widths");
  need(o.keys, o.first, o.rows, o.key_bytes, "checksum", "keys");
  std::vector<ColumnPtr> cols;
  for (size_t c = 0; c < o.columns.size(); ++c) {
    need(o.columns[c], o.first, o.rows, o.column_bytes[c], "checksum", ("column " + std::to_string(c)).c_str());
    cols.push_back({o.columns[c] ? o.columns[c]->ptr : nullptr, o.column_bytes[c]});
  }
  checksum(ctx, {o.keys ? o.keys->ptr : nullptr, o.key_bytes}, cols, o.first, o.rows, d_words);
}

void queue(KernelContext& ctx, const ChunkPartitionOp& o, uint64_t* d_words) {
  check_chunk_partition(o);
  if (o.chunks.empty()) return;
  for (const Tuples& t : o.chunks) need_tuples(t, t.rows, "chunk partition", "chunk");
  for (const Tuples* t : {&o.cache, &o.spill})
    if (t->keys) need_tuples(*t, t->capacity, "chunk partition", t == &o.cache ? "cache" : "spill");
  const TupleFormat f = o.chunks[0].fmt;
  // Host offsets go up with the launch; offsets_on_device are read where the scan left them.
  if (o.offsets_on_device) need(o.offsets_on_device, 0, o.chunks.size() * o.fn.fanout(), 8, "chunk partition", "offsets_on_device");
  const ChunkOffsets offsets =
      chunk_offsets(o, o.offsets_on_device ? data_of<uint64_t>(o.offsets_on_device) : ctx.upload(o.offsets));
  with_types(f.key_bytes, f.val_bytes, [&](auto k, auto v) {
    using K = decltype(k);
    using V = decltype(v);
    // A chunk is a slice of its relation: its rows start at the slice's offset in the buffers.
    std::vector<ChunkPartitionRun> runs;
    for (size_t c = 0; c < o.chunks.size(); ++c) {
      const Tuples& t = o.chunks[c];
      runs.push_back({t.key_ptr<K>(), t.val_ptr<V>(), t.rows, c < o.cached_chunks});
    }
    auto out = [](const Tuples& t) {
      return ChunkPartitionOut{t.key_ptr<K>(), t.val_ptr<V>(), t.keys ? t.capacity : 0};
    };
    chunk_partition<K, V>(ctx, runs, o.fn, offsets, out(o.cache), out(o.spill),
                          o.partitioner == Partitioner::Hierarchical, o.flush_bytes, d_words);
  });
  if (o.offsets_on_device) {
    uint64_t rows = 0;
    for (const Tuples& t : o.chunks) rows += t.rows;
    chunk_partition_starts(ctx, offsets, o.fn.fanout(), rows, d_words + kFirstValueWord);
  }
}

void queue(KernelContext& ctx, const LinkAccessOp& o, uint64_t* d_words) {
  check_link_access(o);
  if (o.bytes == 0) return;
  if (o.host->space == MemSpace::Host)
    throw RuntimeError("link access: buffer '" + o.host->tag + "' is pageable host memory; a kernel reaches pinned memory only");
  need(o.host, 0, 1, 1, "link access", "host");
  need(o.device, 0, 1, 1, "link access", "device");
  link_access(ctx, o.host->ptr, o.host->bytes, o.device->ptr, o.bytes, o.granule, o.random, o.access);
}

// A host operator (runs_on_host): it never reaches a stream's kernels.
void queue(KernelContext&, const MultiwayMergeOp&, uint64_t*) {
  throw RuntimeError("multiway merge: runs on the host lane, not as a kernel");
}

void queue(KernelContext& ctx, const MergeOp& o, uint64_t*) {
  const uint64_t rows = o.a.rows + o.b.rows;
  if (!(o.a.fmt == o.out.fmt) || !(o.b.fmt == o.out.fmt)) throw RuntimeError("merge: run and output tuple formats differ");
  if (o.out.capacity < rows)
    throw RuntimeError("merge: out holds " + std::to_string(o.out.capacity) + " rows, the runs have " + std::to_string(rows));
  need_tuples(o.a, o.a.rows, "merge", "run a");
  need_tuples(o.b, o.b.rows, "merge", "run b");
  need_tuples(o.out, rows, "merge", "output");
  with_types(o.out.fmt.key_bytes, o.out.fmt.val_bytes, [&](auto k, auto v) {
    using K = decltype(k);
    using V = decltype(v);
    merge_pairs<K, V>(ctx, o.a.key_ptr<K>(), o.a.val_ptr<V>(), o.a.rows, o.b.key_ptr<K>(), o.b.val_ptr<V>(), o.b.rows,
                      o.out.key_ptr<K>(), o.out.val_ptr<V>());
  });
}

void queue(KernelContext& ctx, const PivotSearchOp& o, uint64_t* d_words) {
  need(o.x, 0, o.n, o.key_bytes, "pivot search", "x");
  need(o.y, 0, o.n, o.key_bytes, "pivot search", "y");
  with_types(o.key_bytes, o.key_bytes, [&](auto k, auto) {
    using K = decltype(k);
    pivot_search<K>(ctx, data_of<K>(o.x), data_of<K>(o.y), o.n, d_words);
  });
}

void queue(KernelContext& ctx, const CompressOp& o, uint64_t* d_words) {
  check_compress(o);
  std::vector<CodecColumnRef> cols(o.in.size());
  for (size_t i = 0; i < o.in.size(); ++i) {
    const CodecColumn& c = o.in[i];
    need(c.buf, c.first, c.rows, o.value_bytes, "compress", ("column " + std::to_string(i)).c_str());
    cols[i] = {data_of<uint8_t>(c.buf, c.first * o.value_bytes), c.rows, o.configs[i]};
  }
  need(o.out, 0, compress_bound(o), 1, "compress", "output");
  codec_compress(ctx, cols, o.value_bytes, o.chunk_log2, data_of<uint8_t>(o.out), d_words);
}

void queue(KernelContext& ctx, const DecompressOp& o, uint64_t* d_words) {
  check_decompress(o);
  std::vector<CodecOutRef> outs(o.out.size());
  for (size_t b = 0; b < o.out.size(); ++b) {
    const CodecColumn& c = o.out[b];
    need(c.buf, c.first, c.rows, o.value_bytes, "decompress", ("output " + std::to_string(b)).c_str());
    outs[b] = {data_of<uint8_t>(c.buf, c.first * o.value_bytes), c.rows};
  }
  need(o.in, 0, o.offsets.back(), 1, "decompress", "input");
  codec_decompress(ctx, data_of<uint8_t>(o.in), o.offsets, o.value_bytes, outs, d_words);
}

void queue(KernelContext& ctx, const StarGenerateOp& o, uint64_t*) {
  const bool fact = o.table == ssb::Table::Lineorder;
  need_tuples(o.out, o.out.rows, "star generate", "output");
  if (o.out.fmt.key_bytes != (fact ? 8 : 4) || o.out.fmt.val_bytes != (fact ? 8 : 4))
    throw RuntimeError(std::string("star generate: ") + ssb::to_string(o.table) + " rows are " + (fact ? "8 + 8" : "4 + 4") +
                       " bytes");
  if (o.first_row + o.out.rows > o.scale.rows(o.table))
    throw RuntimeError(std::string("star generate: ") + ssb::to_string(o.table) + " has " +
                       std::to_string(o.scale.rows(o.table)) + " rows, not " + std::to_string(o.first_row + o.out.rows));
  KeyGen lineitems;  // lineorder's rows are those of tpch_lineitem over its orders
  if (fact) {
    lineitems.dist = uint8_t(KeyDist::TpchLineitem);
    lineitems.key_bytes = 8;
    lineitems.rows = o.scale.lineorders;
    lineitems.lineitems = tpch::lineitem_index(o.scale.orders);
  }
  void* keys = fact ? static_cast<void*>(o.out.key_ptr<uint64_t>()) : o.out.key_ptr<uint32_t>();
  void* vals = fact ? static_cast<void*>(o.out.val_ptr<uint64_t>()) : o.out.val_ptr<uint32_t>();
  star_generate(ctx, o.scale, o.query, o.table, lineitems, o.first_row, o.out.rows, keys, vals);
}

void queue(KernelContext& ctx, const StarProbeOp& o, uint64_t* d_words) {
  check_star_probe(o);
  need_tuples(o.in, o.in.rows, "star probe", "lineorder");
  for (const HashTable* t : o.dims) check_table(*t, "star probe");
  need(o.groups, 0, o.query.groups, 8, "star probe", "groups");
  star_probe(ctx, o.query, dim_table_refs(o), o.in.key_ptr<uint64_t>(), o.in.val_ptr<uint64_t>(), o.in.rows,
             data_of<uint64_t>(o.groups), d_words);
}

void queue(KernelContext& ctx, const ScanOp& o, uint64_t*) {
  need(o.in, 0, o.n, 8, "scan", "input");
  need(o.out, 0, o.n, 8, "scan", "output");
  exclusive_scan(ctx, data_of<uint64_t>(o.in), data_of<uint64_t>(o.out), o.n);
}

}  // namespace

size_t result_value_count(const Op& op) {
  if (auto* h = std::get_if<HistogramOp>(&op)) {  // per segment (a single offset is an error queue() raises)
    if (h->counts_out) return h->fn.fanout();     // the totals: the counts stay in the buffer
    const size_t segments = !h->in_ranges.empty() ? h->in_ranges.size() : h->in_segments.empty() ? 1 : h->in_segments.size() - 1;
    return segments * h->fn.fanout();
  }
  if (auto* c = std::get_if<ChunkPartitionOp>(&op); c && c->offsets_on_device) return size_t(c->fn.fanout()) + 1;
  if (auto* p = std::get_if<PartitionOp>(&op)) {
    const size_t segments = p->in_segments.empty() ? 1 : p->in_segments.size() - 1;
    return segments * p->fn.fanout() + 1;
  }
  if (auto* c = std::get_if<CompressOp>(&op)) return c->in.size() + 1;  // byte offsets
  if (auto* d = std::get_if<DecompressOp>(&op)) return d->out.size() + kCodecErrorWords;  // rows, then the error
  return 0;
}

namespace {

// The buffers an operator reads or writes.
void add(std::vector<const Buffer*>& v, const Tuples& t) { v.insert(v.end(), {&t.keys, &t.vals}); }
void add(std::vector<const Buffer*>& v, const JoinOutput& o, OutputMode mode) {
  if (mode != OutputMode::CountOnly) v.insert(v.end(), {&o.keys, &o.rvals, &o.svals});
}
void add(std::vector<const Buffer*>& v, const HashTable* t) {
  if (t) v.insert(v.end(), {&t->keys, &t->vals, &t->heads, &t->next});
}
std::vector<const Buffer*> buffers_of(const Op& op) {
  std::vector<const Buffer*> v;
  std::visit(
      [&](const auto& o) {
        using T = std::decay_t<decltype(o)>;
        if constexpr (std::is_same_v<T, GenerateOp>) add(v, o.out);
        else if constexpr (std::is_same_v<T, GeneratePayloadOp>) v.push_back(&o.out);
        else if constexpr (std::is_same_v<T, HistogramOp>) v.insert(v.end(), {&o.in.keys, &o.counts_out});
        else if constexpr (std::is_same_v<T, PartitionOp> || std::is_same_v<T, SortOp>) add(v, o.in), add(v, o.out);
        else if constexpr (std::is_same_v<T, BuildOp>) add(v, o.in), add(v, o.table);
        else if constexpr (std::is_same_v<T, ProbeOp>) add(v, o.table), add(v, o.probe), add(v, o.out, o.mode);
        else if constexpr (std::is_same_v<T, PartitionedJoinOp>) add(v, o.r.all), add(v, o.s.all), add(v, o.out, o.mode);
        else if constexpr (std::is_same_v<T, MergeJoinOp>) add(v, o.r), add(v, o.s), add(v, o.out, o.mode);
        else if constexpr (std::is_same_v<T, GatherOp>) v.insert(v.end(), {&o.row_ids, &o.column, &o.out});
        else if constexpr (std::is_same_v<T, ChecksumOp>) {
          v.push_back(&o.keys);
          for (const Buffer& c : o.columns) v.push_back(&c);
        } else if constexpr (std::is_same_v<T, ScanOp>) v.insert(v.end(), {&o.in, &o.out});
        else if constexpr (std::is_same_v<T, ChunkPartitionOp>) {
          for (const Tuples& c : o.chunks) add(v, c);
          add(v, o.cache), add(v, o.spill);
          v.push_back(&o.offsets_on_device);
        } else if constexpr (std::is_same_v<T, LinkAccessOp>) v.insert(v.end(), {&o.host, &o.device});
        else if constexpr (std::is_same_v<T, MultiwayMergeOp>) {
          for (const Tuples& r : o.runs) add(v, r);
          add(v, o.out);
        } else if constexpr (std::is_same_v<T, MergeOp>) add(v, o.a), add(v, o.b), add(v, o.out);
        else if constexpr (std::is_same_v<T, PivotSearchOp>) v.insert(v.end(), {&o.x, &o.y});
        else if constexpr (std::is_same_v<T, CompressOp>) {
          for (const CodecColumn& c : o.in) v.push_back(&c.buf);
          v.push_back(&o.out);
        } else if constexpr (std::is_same_v<T, DecompressOp>) {
          v.push_back(&o.in);
          for (const CodecColumn& c : o.out) v.push_back(&c.buf);
        } else if constexpr (std::is_same_v<T, StarGenerateOp>) add(v, o.out);
        else if constexpr (std::is_same_v<T, StarProbeOp>) {
          add(v, o.in);
          for (const HashTable* t : o.dims) add(v, t);
          v.push_back(&o.groups);
        }
      },
      op);
  return v;
}
// Some buffer in pageable host memory and none in device memory.
bool host_only(const std::vector<const Buffer*>& buffers) {
  bool host = false;
  for (const Buffer* b : buffers) {
    if (!*b) continue;
    if ((*b)->space == MemSpace::Device) return false;
    host = host || (*b)->space == MemSpace::Host;
  }
  return host;
}

}  // namespace

bool runs_on_host(const Op& op) {
  if (std::holds_alternative<MultiwayMergeOp>(op)) return true;  // the CPU's merge (maltenberger2025 4.2)
  if (auto* h = std::get_if<HistogramOp>(&op); h && h->placement != HistogramOp::Placement::Auto) {
    if (h->placement == HistogramOp::Placement::Host && h->counts_out && h->counts_out->space == MemSpace::Device)
      throw RuntimeError("histogram: counts_out (buffer '" + h->counts_out->tag +
                         "') is device memory, which a histogram placed on the host cannot write");
    return h->placement == HistogramOp::Placement::Host;  // triton's prefix_sum = cpu | gpu
  }
  return host_only(buffers_of(op));
}

bool runs_on_host(const StreamingOp& op) {
  const auto* c = std::get_if<StreamConsumeOp>(&op);
  if (!c) return true;  // PackChunksOp
  std::vector<const Buffer*> v{&c->rings};
  for (const HashTable& t : c->tables) add(v, &t);
  add(v, c->out, c->mode);
  add(v, c->staging, c->mode);
  return host_only(v);  // kernels cannot reach it: the CPU consumer polls it
}

void queue_op(KernelContext& ctx, const Op& op, uint64_t* d_words) {
  std::visit([&](const auto& o) { queue(ctx, o, d_words); }, op);
}

void finish_op(const Op& op, const uint64_t* words, OpResult& result) {
  result.count = words[kCountWord];
  result.checksum = words[kChecksumWord];
  const size_t nvalues = result_value_count(op);
  result.values.assign(words + kFirstValueWord, words + kFirstValueWord + nvalues);
  // CountOnly writes nothing, so it cannot overflow.
  auto overflow = [&](const JoinOutput& out, uint64_t first, OutputMode mode) {
    result.overflow = mode != OutputMode::CountOnly && first + result.count > out.capacity;
  };
  if (auto* p = std::get_if<ProbeOp>(&op)) overflow(p->out, p->out_first, p->mode);
  if (auto* p = std::get_if<PartitionedJoinOp>(&op)) overflow(p->out, p->out_first, p->mode);
  if (auto* p = std::get_if<MergeJoinOp>(&op)) overflow(p->out, p->out_first, p->mode);
  if (auto* c = std::get_if<ChunkPartitionOp>(&op)) {
    if (result.checksum)
      throw RuntimeError("chunk partition: " + std::to_string(result.checksum) +
                         " rows fell past the capacity of the cache or the spill buffer (offsets that do not match the "
                         "chunks' histograms)");
    for (const Tuples& t : c->chunks) result.count += t.rows;
  }
  if (auto* d = std::get_if<DecompressOp>(&op)) {
    const uint64_t* err = words + kFirstValueWord + d->out.size();
    if (err[0]) {  // the least failing (class, buffer, chunk, code), complemented
      const uint64_t key = ~err[0];
      throw RuntimeError(cpu::codec_error_message(uint32_t(key & 0xFF), (key >> 40) & 0x7FFFFF,
                                                  (key >> 8) & 0xFFFFFFFF, err[1]));
    }
    result.values.resize(d->out.size());
  }
  if (auto* m = std::get_if<MergeOp>(&op)) result.count = m->a.rows + m->b.rows;  // rows merged, as on the CPU
  if (auto* l = std::get_if<LinkAccessOp>(&op)) result.count = l->bytes * (l->access == LinkAccess::Both ? 2 : 1);
  if (auto* g = std::get_if<GatherOp>(&op)) {
    if (result.count)
      throw RuntimeError("gather: row id at output row " + std::to_string(result.count - 1) +
                         " lies outside the column (base row " + std::to_string(g->base_row) + ", column buffer " +
                         tag_of(g->column) + ")");
    result.count = g->rows;
  }
}

}  // namespace joinlab::cuda
