#include "core/runtime/cpu_ops.hpp"

#include <cstring>
#include <new>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "core/common/error.hpp"
#include "core/workload/generate.hpp"
#include "core/workload/tpch.hpp"
#include "kernels/cpu/codec.hpp"
#include "kernels/cpu/cpu_kernels.hpp"

namespace joinlab {

namespace {

std::string tag_of(const Buffer& b) { return b ? "'" + b->tag + "'" : "(no buffer)"; }

// `elems` elements of `width` bytes from element `first` must lie inside `b`.
void check_span(const char* op, const char* what, const Buffer& b, uint64_t first, uint64_t elems,
                uint32_t width) {
  if (elems == 0) return;
  if (!b || !b->ptr)
    throw RuntimeError(std::string(op) + ": " + what + " has no memory (" + std::to_string(elems) +
                       " rows needed)");
  const uint64_t need = (first + elems) * width;
  if (need > b->bytes)
    throw RuntimeError(std::string(op) + ": " + what + " rows [" + std::to_string(first) + ", " +
                       std::to_string(first + elems) + ") of " + std::to_string(width) +
                       " bytes need " + std::to_string(need) + " bytes, but buffer " + tag_of(b) +
                       " holds " + std::to_string(b->bytes));
}
void check_tuples(const char* op, const char* what, const Tuples& t, uint64_t rows) {
  if (rows > t.capacity && t.capacity)
    throw RuntimeError(std::string(op) + ": " + what + " needs " + std::to_string(rows) +
                       " rows but its capacity is " + std::to_string(t.capacity));
  check_span(op, what, t.keys, t.offset, rows, t.fmt.key_bytes);
  check_span(op, what, t.vals, t.offset, rows, t.fmt.val_bytes);
}
void check_offsets(const char* op, const char* what, const std::vector<uint64_t>& off, uint64_t rows) {
  check_ascending(off, std::string(op) + ": " + what);
  if (!off.empty() && off.back() > rows)
    throw RuntimeError(std::string(op) + ": " + what + " offsets end at row " + std::to_string(off.back()) +
                       " past its " + std::to_string(rows) + " rows");
}

template <class K, class VR, class VS>
cpu::JoinSink<K, VR, VS> sink_of(const char* op, const JoinOutput& o, uint64_t first, OutputMode mode,
                                 uint32_t key_bytes, uint32_t r_bytes, uint32_t s_bytes) {
  cpu::JoinSink<K, VR, VS> s;
  s.first = first;
  s.capacity = o.capacity;
  s.mode = mode;
  if (mode == OutputMode::CountOnly) return s;
  if (o.r_fmt.key_bytes != key_bytes || o.r_fmt.val_bytes != r_bytes || o.s_fmt.val_bytes != s_bytes)
    throw RuntimeError(std::string(op) + ": output formats (key " + std::to_string(o.r_fmt.key_bytes) +
                       ", R value " + std::to_string(o.r_fmt.val_bytes) + ", S value " +
                       std::to_string(o.s_fmt.val_bytes) + " bytes) differ from the inputs' (key " +
                       std::to_string(key_bytes) + ", R value " + std::to_string(r_bytes) +
                       ", S value " + std::to_string(s_bytes) + ")");
  check_span(op, "output keys", o.keys, 0, o.capacity, key_bytes);
  check_span(op, "output R values", o.rvals, 0, o.capacity, r_bytes);
  check_span(op, "output S values", o.svals, 0, o.capacity, s_bytes);
  s.keys = data_of<K>(o.keys);
  s.rvals = data_of<VR>(o.rvals);
  s.svals = data_of<VS>(o.svals);
  return s;
}

void set_join(OpResult& r, const cpu::JoinCount& c) {
  r.count = c.count;
  r.overflow = c.overflow;
}

template <class K, class V>
cpu::LinearTable<K, V> linear_view(const HashTable& t) {
  return {data_of<K>(t.keys), data_of<V>(t.vals), t.slots, t.hash_seed};
}
template <class K, class V>
cpu::ChainedTable<K, V> chained_view(const HashTable& t) {
  const uint64_t cap = t.next ? t.next->bytes / sizeof(uint32_t) : 0;
  return {data_of<uint32_t>(t.heads), data_of<uint32_t>(t.next), data_of<K>(t.keys),
          data_of<V>(t.vals), t.slots, cap, t.hash_seed};
}
template <class K, class V>
cpu::RowIdTable<K, V> rowid_view(const HashTable& t) {
  return {data_of<uint64_t>(t.heads), data_of<K>(t.keys, t.base), data_of<V>(t.vals, t.base), t.slots, t.hash_seed};
}
void check_table(const char* op, const HashTable& t) {
  if (t.kind == TableKind::HashRowId) {
    check_span(op, "table slots", t.heads, 0, t.slots, 8);
    if (t.rows) {
      check_span(op, "table keys (the build relation)", t.keys, t.base, t.rows, t.fmt.key_bytes);
      check_span(op, "table values (the build relation)", t.vals, t.base, t.rows, t.fmt.val_bytes);
    }
  } else if (t.kind == TableKind::LinearProbing) {
    check_span(op, "table keys", t.keys, 0, t.slots, t.fmt.key_bytes);
    check_span(op, "table values", t.vals, 0, t.slots, t.fmt.val_bytes);
  } else {
    check_span(op, "table heads", t.heads, 0, t.slots, 4);
    const uint64_t cap = t.next ? t.next->bytes / 4 : 0;
    check_span(op, "table keys", t.keys, 0, cap, t.fmt.key_bytes);
    check_span(op, "table values", t.vals, 0, cap, t.fmt.val_bytes);
  }
}

struct Executor {
  int threads;
  OpResult& result;

  void operator()(const GenerateOp& o) {
    const Tuples& out = o.out;
    check_tuples("generate", "out", out, out.rows);
    if (out.fmt.key_bytes != o.spec.key_bytes)
      throw RuntimeError("generate: relation " + o.spec.name + " has " + std::to_string(o.spec.key_bytes) +
                         "-byte keys, the output " + std::to_string(out.fmt.key_bytes) + "-byte ones");
    const KeyGen gen = make_keygen(o.spec, o.referenced);
    const uint64_t seed = relation_seed(o.spec);
    with_width(out.fmt.key_bytes, "generate: key", [&](auto k) {
      with_width(out.fmt.val_bytes, "generate: value", [&](auto v) {
        using K = decltype(k);
        using V = decltype(v);
        cpu::generate<K, V>(gen, seed, o.value_is_rowid, o.first_row, out.rows, out.key_ptr<K>(),
                            out.val_ptr<V>(), threads);
      });
    });
    result.count = out.rows;
  }

  void operator()(const GeneratePayloadOp& o) {
    if (o.column < 0 || size_t(o.column) >= o.spec.payload_bytes.size())
      throw RuntimeError("generate payload: relation " + o.spec.name + " has no payload column " +
                         std::to_string(o.column));
    const uint32_t width = o.spec.payload_bytes[size_t(o.column)];
    check_span("generate payload", "out", o.out, 0, o.rows, width);
    with_width(width, "generate payload: column", [&](auto v) {
      using V = decltype(v);
      cpu::generate_payload<V>(relation_seed(o.spec), o.column, o.first_row, o.rows, data_of<V>(o.out), threads);
    });
    result.count = o.rows;
  }

  void operator()(const HistogramOp& o) {
    check_span("histogram", "in keys", o.in.keys, o.in.offset, o.in.rows, o.in.fmt.key_bytes);
    std::vector<std::pair<uint64_t, uint64_t>> ranges;
    for (const RowRange& r : histogram_ranges(o)) ranges.push_back({r.begin, r.end});
    check_histogram_counts(o);
    with_width(o.in.fmt.key_bytes, "histogram: key", [&](auto k) {
      using K = decltype(k);
      result.values = cpu::histogram<K>(o.in.key_ptr<K>(), ranges, o.fn, threads);
    });
    if (!o.counts_out) return;
    // The counts stay in the buffer, partition-major; the result keeps each partition's total.
    const uint64_t k = ranges.size(), F = o.fn.fanout();
    const uint64_t stride = o.counts_stride ? o.counts_stride : k;
    check_span("histogram", "counts_out", o.counts_out, 0, F * stride, 8);
    uint64_t* out = data_of<uint64_t>(o.counts_out);
    std::vector<uint64_t> totals(F, 0);
    for (uint64_t p = 0; p < F; ++p)
      for (uint64_t sg = 0; sg < k; ++sg) {
        const uint64_t n = result.values[sg * F + p];
        out[p * stride + o.counts_first + sg] = n;
        totals[p] += n;
      }
    result.values = std::move(totals);
  }

  void operator()(const PartitionOp& o) {
    check_tuples("partition", "in", o.in, o.in.rows);
    check_offsets("partition", "in_segments", o.in_segments, o.in.rows);
    const uint64_t n = o.in_segments.empty() ? o.in.rows : o.in_segments.back() - o.in_segments.front();
    if (o.out.capacity < n)
      throw RuntimeError("partition: out holds " + std::to_string(o.out.capacity) + " rows, " +
                         std::to_string(n) + " are partitioned");
    if (!(o.out.fmt == o.in.fmt)) throw RuntimeError("partition: in and out formats differ");
    check_tuples("partition", "out", o.out, n);
    with_width(o.in.fmt.key_bytes, "partition: key", [&](auto k) {
      with_width(o.in.fmt.val_bytes, "partition: value", [&](auto v) {
        using K = decltype(k);
        using V = decltype(v);
        result.values = cpu::partition<K, V>(o.in.key_ptr<K>(), o.in.val_ptr<V>(), o.in.rows, o.in_segments,
                                             o.fn, o.out.key_ptr<K>(), o.out.val_ptr<V>(), threads);
      });
    });
    if (o.offsets_out) {
      check_span("partition", "offsets_out", o.offsets_out, 0, result.values.size(), sizeof(uint64_t));
      std::memcpy(o.offsets_out->ptr, result.values.data(), result.values.size() * sizeof(uint64_t));
    }
    result.count = n;
  }

  void operator()(const ChunkPartitionOp& o) {
    check_chunk_partition(o);
    if (o.offsets_on_device) {
      result.values.assign(size_t(o.fn.fanout()) + 1, 0);
      check_span("chunk partition", "offsets_on_device", o.offsets_on_device, 0, o.chunks.size() * o.fn.fanout(), 8);
    }
    if (o.chunks.empty()) return;
    const TupleFormat f = o.chunks[0].fmt;
    for (size_t c = 0; c < o.chunks.size(); ++c) check_tuples("chunk partition", "chunk", o.chunks[c], o.chunks[c].rows);
    if (o.cached_chunks > 0) check_tuples("chunk partition", "cache", o.cache, o.cache.capacity);
    if (o.cached_chunks < o.chunks.size()) check_tuples("chunk partition", "spill", o.spill, o.spill.capacity);
    with_width(f.key_bytes, "chunk partition: key", [&](auto k) {
      with_width(f.val_bytes, "chunk partition: value", [&](auto v) {
        using K = decltype(k);
        using V = decltype(v);
        std::vector<cpu::ChunkIn<K, V>> in;
        for (const Tuples& c : o.chunks) in.push_back({c.key_ptr<K>(), c.val_ptr<V>(), c.rows});
        auto out = [](const Tuples& t) { return cpu::ChunkOut<K, V>{t.key_ptr<K>(), t.val_ptr<V>(), t.capacity}; };
        const uint64_t* words = o.offsets_on_device ? data_of<uint64_t>(o.offsets_on_device) : o.offsets.data();
        cpu::chunk_partition<K, V>(in, o.fn, chunk_offsets(o, words), o.cached_chunks, out(o.cache), out(o.spill),
                                   threads);
      });
    });
    for (const Tuples& c : o.chunks) result.count += c.rows;
    if (o.offsets_on_device) {  // the partitions' starts in the cache: where each one's first chunk starts
      const uint64_t F = o.fn.fanout(), chunks = o.chunks.size();
      const uint64_t* words = data_of<uint64_t>(o.offsets_on_device);
      for (uint64_t p = 0; p < F; ++p) result.values[p] = words[p * chunks];
      result.values[F] = result.count;
    }
  }

  void operator()(const LinkAccessOp& o) {
    check_link_access(o);
    if (o.bytes == 0) return;
    check_span("link access", "host", o.host, 0, 1, 1);
    check_span("link access", "device", o.device, 0, 1, 1);
    cpu::link_access(static_cast<uint8_t*>(o.host->ptr), o.host->bytes, static_cast<uint8_t*>(o.device->ptr), o.bytes,
                     o.granule, o.random, o.access, threads);
    result.count = o.bytes * (o.access == LinkAccess::Both ? 2 : 1);
  }

  void operator()(const BuildOp& o) {
    HashTable& t = *o.table;
    check_tuples("build", "in", o.in, o.in.rows);
    if (!(t.fmt == o.in.fmt)) throw RuntimeError("build: the table's tuple format differs from the input's");
    if (t.kind == TableKind::HashRowId) attach_rowid_relation(t, o.in);
    check_table("build", t);
    with_width(t.fmt.key_bytes, "build: key", [&](auto k) {
      with_width(t.fmt.val_bytes, "build: value", [&](auto v) {
        using K = decltype(k);
        using V = decltype(v);
        // A table with no rows yet is cleared first; later builds add to it.
        if (t.kind == TableKind::LinearProbing) {
          auto view = linear_view<K, V>(t);
          if (t.rows == 0) cpu::clear_table(view, threads);
          cpu::build(view, t.rows, o.in.key_ptr<K>(), o.in.val_ptr<V>(), o.in.rows, threads);
        } else if (t.kind == TableKind::HashRowId) {
          auto view = rowid_view<K, V>(t);
          if (t.rows == 0) cpu::clear_table(view, threads);
          cpu::build(view, t.rows, o.in.rows, threads);
        } else {
          auto view = chained_view<K, V>(t);
          if (t.rows == 0) cpu::clear_table(view, threads);
          cpu::build(view, t.rows, o.in.key_ptr<K>(), o.in.val_ptr<V>(), o.in.rows, threads);
        }
      });
    });
    t.rows += o.in.rows;
    result.count = o.in.rows;
  }

  void operator()(const ProbeOp& o) {
    const HashTable& t = *o.table;
    check_tuples("probe", "probe", o.probe, o.probe.rows);
    check_table("probe", t);
    if (t.fmt.key_bytes != o.probe.fmt.key_bytes)
      throw RuntimeError("probe: table keys are " + std::to_string(t.fmt.key_bytes) + " bytes, probe keys " +
                         std::to_string(o.probe.fmt.key_bytes));
    join_widths("probe", t.fmt.key_bytes, t.fmt.val_bytes, o.probe.fmt.val_bytes, [&](auto k, auto vr, auto vs) {
      using K = decltype(k);
      using VR = decltype(vr);
      using VS = decltype(vs);
      auto sink = sink_of<K, VR, VS>("probe", o.out, o.out_first, o.mode, sizeof(K), sizeof(VR), sizeof(VS));
      const K* pk = o.probe.key_ptr<K>();
      const VS* pv = o.probe.val_ptr<VS>();
      if (t.kind == TableKind::LinearProbing)
        set_join(result, cpu::probe(linear_view<K, VR>(t), pk, pv, o.probe.rows, sink, threads));
      else if (t.kind == TableKind::HashRowId)
        set_join(result, cpu::probe(rowid_view<K, VR>(t), pk, pv, o.probe.rows, sink, threads));
      else
        set_join(result, cpu::probe(chained_view<K, VR>(t), pk, pv, o.probe.rows, sink, threads));
    });
  }

  void operator()(const PartitionedJoinOp& o) {
    const Tuples& r = o.r.all;
    const Tuples& s = o.s.all;
    check_tuples("partitioned join", "R", r, r.rows);
    check_tuples("partitioned join", "S", s, s.rows);
    check_offsets("partitioned join", "R partition", o.r.offsets, r.rows);
    check_offsets("partitioned join", "S partition", o.s.offsets, s.rows);
    if (r.fmt.key_bytes != s.fmt.key_bytes) throw RuntimeError("partitioned join: R and S key widths differ");
    join_widths("partitioned join", r.fmt.key_bytes, r.fmt.val_bytes, s.fmt.val_bytes, [&](auto k, auto vr, auto vs) {
      using K = decltype(k);
      using VR = decltype(vr);
      using VS = decltype(vs);
      auto sink = sink_of<K, VR, VS>("partitioned join", o.out, o.out_first, o.mode, sizeof(K), sizeof(VR), sizeof(VS));
      // Per-partition tables are the kernel's own: HashRowId ones run as linear probing (as on CUDA).
      const TableKind kind = o.table == TableKind::HashRowId ? TableKind::LinearProbing : o.table;
      set_join(result, cpu::partitioned_join(r.key_ptr<K>(), r.val_ptr<VR>(), o.r.offsets, s.key_ptr<K>(),
                                             s.val_ptr<VS>(), o.s.offsets, kind, sink, threads));
    });
  }

  void operator()(const SortOp& o) {
    check_tuples("sort", "in", o.in, o.in.rows);
    if (!(o.out.fmt == o.in.fmt)) throw RuntimeError("sort: in and out formats differ");
    check_tuples("sort", "out", o.out, o.in.rows);
    with_width(o.in.fmt.key_bytes, "sort: key", [&](auto k) {
      with_width(o.in.fmt.val_bytes, "sort: value", [&](auto v) {
        using K = decltype(k);
        using V = decltype(v);
        auto sort = o.algo == SortAlgo::Radix ? cpu::radix_sort<K, V> : cpu::merge_sort<K, V>;
        sort(o.in.key_ptr<K>(), o.in.val_ptr<V>(), o.in.rows, o.out.key_ptr<K>(), o.out.val_ptr<V>(), threads);
      });
    });
    result.count = o.in.rows;
  }

  void operator()(const MergeJoinOp& o) {
    check_tuples("merge join", "R", o.r, o.r.rows);
    check_tuples("merge join", "S", o.s, o.s.rows);
    if (o.r.fmt.key_bytes != o.s.fmt.key_bytes) throw RuntimeError("merge join: R and S key widths differ");
    join_widths("merge join", o.r.fmt.key_bytes, o.r.fmt.val_bytes, o.s.fmt.val_bytes, [&](auto k, auto vr, auto vs) {
      using K = decltype(k);
      using VR = decltype(vr);
      using VS = decltype(vs);
      auto sink = sink_of<K, VR, VS>("merge join", o.out, o.out_first, o.mode, sizeof(K), sizeof(VR), sizeof(VS));
      set_join(result, cpu::merge_join(o.r.key_ptr<K>(), o.r.val_ptr<VR>(), o.r.rows, o.s.key_ptr<K>(),
                                       o.s.val_ptr<VS>(), o.s.rows, sink, threads));
    });
  }

  void operator()(const GatherOp& o) {
    check_span("gather", "row ids", o.row_ids, 0, o.rows, o.id_bytes);
    check_span("gather", "out", o.out, 0, o.rows, o.col_bytes);
    with_width(o.id_bytes, "gather: row id", [&](auto i) {
      with_width(o.col_bytes, "gather: column", [&](auto c) {
        using I = decltype(i);
        using C = decltype(c);
        const uint64_t column_rows = o.column ? o.column->bytes / sizeof(C) : 0;
        cpu::gather<I, C>(data_of<I>(o.row_ids), data_of<C>(o.column), column_rows, o.base_row, o.rows,
                          data_of<C>(o.out), threads);
      });
    });
    result.count = o.rows;
  }

  void operator()(const ChecksumOp& o) {
    if (o.columns.size() != o.column_bytes.size())
      throw RuntimeError("checksum: " + std::to_string(o.columns.size()) + " columns but " +
                         std::to_string(o.column_bytes.size()) + " column widths");
    check_span("checksum", "keys", o.keys, o.first, o.rows, o.key_bytes);
    with_width(o.key_bytes, "checksum: key", [](auto) {});
    std::vector<cpu::ColumnRef> cols;
    for (size_t c = 0; c < o.columns.size(); ++c) {
      const std::string what = "column " + std::to_string(c);
      with_width(o.column_bytes[c], ("checksum: " + what).c_str(), [](auto) {});
      check_span("checksum", what.c_str(), o.columns[c], o.first, o.rows, o.column_bytes[c]);
      cols.push_back({o.columns[c] ? o.columns[c]->ptr : nullptr, o.column_bytes[c]});
    }
    result.count = o.rows;
    result.checksum = cpu::checksum({o.keys ? o.keys->ptr : nullptr, o.key_bytes}, cols, o.first, o.rows, threads);
  }

  void operator()(const ScanOp& o) {
    check_span("scan", "in", o.in, 0, o.n, 8);
    check_span("scan", "out", o.out, 0, o.n, 8);
    cpu::exclusive_scan(data_of<uint64_t>(o.in), data_of<uint64_t>(o.out), o.n, threads);
    result.count = o.n;
  }

  void operator()(const MultiwayMergeOp& o) {
    uint64_t rows = 0;
    for (const Tuples& r : o.runs) {
      if (!(r.fmt == o.out.fmt)) throw RuntimeError("multiway merge: a run's tuple format differs from the output's");
      check_tuples("multiway merge", "run", r, r.rows);
      rows += r.rows;
    }
    if (o.out.capacity < rows)
      throw RuntimeError("multiway merge: out holds " + std::to_string(o.out.capacity) + " rows, the runs have " +
                         std::to_string(rows));
    check_tuples("multiway merge", "out", o.out, rows);
    with_width(o.out.fmt.key_bytes, "multiway merge: key", [&](auto k) {
      with_width(o.out.fmt.val_bytes, "multiway merge: value", [&](auto v) {
        using K = decltype(k);
        using V = decltype(v);
        std::vector<cpu::ChunkIn<K, V>> runs;
        for (const Tuples& r : o.runs) runs.push_back({r.key_ptr<K>(), r.val_ptr<V>(), r.rows});
        cpu::multiway_merge<K, V>(runs, o.out.key_ptr<K>(), o.out.val_ptr<V>(), threads);
      });
    });
    result.count = rows;
  }

  void operator()(const MergeOp& o) {  // the multiway merge of two runs
    (*this)(MultiwayMergeOp{{o.a, o.b}, o.out});
  }

  void operator()(const PivotSearchOp& o) {
    check_span("pivot search", "x", o.x, 0, o.n, o.key_bytes);
    check_span("pivot search", "y", o.y, 0, o.n, o.key_bytes);
    with_width(o.key_bytes, "pivot search: key", [&](auto k) {
      using K = decltype(k);
      result.count = cpu::pivot_search<K>(data_of<K>(o.x), data_of<K>(o.y), o.n);
    });
  }

  void operator()(const CompressOp& o) {
    check_compress(o);
    std::vector<cpu::CodecIn> in(o.in.size());
    for (size_t i = 0; i < o.in.size(); ++i) {
      const CodecColumn& c = o.in[i];
      check_span("compress", ("column " + std::to_string(i)).c_str(), c.buf, c.first, c.rows, o.value_bytes);
      in[i] = {data_of<uint8_t>(c.buf, c.first * o.value_bytes), c.rows, o.configs[i]};
    }
    if (!data_of<uint8_t>(o.out)) throw RuntimeError("compress: the output has no memory");
    result.values = cpu::codec_compress(in, o.value_bytes, o.chunk_log2, data_of<uint8_t>(o.out), o.out->bytes, threads);
    result.count = result.values.back();
  }

  void operator()(const DecompressOp& o) {
    check_decompress(o);
    std::vector<cpu::CodecOut> out(o.out.size());
    for (size_t b = 0; b < o.out.size(); ++b) {
      const CodecColumn& c = o.out[b];
      check_span("decompress", ("output " + std::to_string(b)).c_str(), c.buf, c.first, c.rows, o.value_bytes);
      out[b] = {data_of<uint8_t>(c.buf, c.first * o.value_bytes), c.rows};
    }
    if (o.offsets.back() && !data_of<uint8_t>(o.in)) throw RuntimeError("decompress: the input has no memory");
    result.values = cpu::codec_decompress(data_of<uint8_t>(o.in), o.offsets, o.value_bytes, out, threads);
    result.count = 0;
    for (uint64_t r : result.values) result.count += r;
  }

  // Calls f(K{}, VR{}, VS{}) for the widths of a join.
  void operator()(const StarGenerateOp& o) {
    const bool fact = o.table == ssb::Table::Lineorder;
    check_tuples("star generate", "out", o.out, o.out.rows);
    if (o.out.fmt.key_bytes != (fact ? 8 : 4) || o.out.fmt.val_bytes != (fact ? 8 : 4))
      throw RuntimeError(std::string("star generate: ") + ssb::to_string(o.table) + " rows are " +
                         (fact ? "8 + 8" : "4 + 4") + " bytes");
    if (o.first_row + o.out.rows > o.scale.rows(o.table))
      throw RuntimeError(std::string("star generate: ") + ssb::to_string(o.table) + " has " +
                         std::to_string(o.scale.rows(o.table)) + " rows, not " + std::to_string(o.first_row + o.out.rows));
    const tpch::LineitemIndex lineitems = fact ? tpch::lineitem_index(o.scale.orders) : tpch::LineitemIndex{};
    void* keys = fact ? static_cast<void*>(o.out.key_ptr<uint64_t>()) : o.out.key_ptr<uint32_t>();
    void* vals = fact ? static_cast<void*>(o.out.val_ptr<uint64_t>()) : o.out.val_ptr<uint32_t>();
    cpu::star_generate(o.scale, o.query, o.table, lineitems, o.first_row, o.out.rows, keys, vals, threads);
    result.count = o.out.rows;
  }

  void operator()(const StarProbeOp& o) {
    check_star_probe(o);
    check_tuples("star probe", "in", o.in, o.in.rows);
    for (const HashTable* t : o.dims) check_table("star probe", *t);
    const std::vector<ssb::DimTableRef> dims = dim_table_refs(o);
    result.count = cpu::star_probe(o.query, dims.data(), o.in.key_ptr<uint64_t>(), o.in.val_ptr<uint64_t>(), o.in.rows,
                                   data_of<uint64_t>(o.groups), threads);
  }

  template <class F>
  static void join_widths(const char* op, uint32_t kb, uint32_t vrb, uint32_t vsb, F&& f) {
    const std::string name(op);
    with_width(kb, (name + ": key").c_str(), [&](auto k) {
      with_width(vrb, (name + ": R value").c_str(), [&](auto vr) {
        with_width(vsb, (name + ": S value").c_str(), [&](auto vs) { f(k, vr, vs); });
      });
    });
  }
};

}  // namespace

void check_op_pointers(const Op& op) {
  if (auto* b = std::get_if<BuildOp>(&op); b && !b->table) throw RuntimeError("build: no table");
  if (auto* p = std::get_if<ProbeOp>(&op); p && !p->table) throw RuntimeError("probe: no table");
}

void execute_cpu_op(const Op& op, int threads, OpResult& result) {
  check_op_pointers(op);
  try {
    std::visit(Executor{threads < 1 ? 1 : threads, result}, op);
  } catch (const std::logic_error& e) {  // kernel argument checks; their messages name the kernel
    throw RuntimeError(e.what());
  } catch (const std::bad_alloc&) {
    throw RuntimeError(std::string(to_string(params_of(op).kind)) + ": out of host memory for kernel scratch");
  }
}

}  // namespace joinlab
