// SimRank's buffers: no memory behind them (ptr stays null), only the size (for capacity
// accounting) and, for key columns, what the rows hold (KeyContent per byte range). Operators,
// copies and messages read the content of the ranges they read and annotate the ranges they
// write, so a partition written on one rank and sent to another keeps its key distribution.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "core/exec/buffer.hpp"
#include "core/exec/tuples.hpp"
#include "sim/key_content.hpp"

namespace joinlab::sim {

// A partition operator's output, kept whole: segment s, partition p occupies rows
// [offsets[s*F+p], offsets[s*F+p+1]) and holds split_content(parents[s], fn)[p]. Pieces are
// built only when a narrower range is read (from the recently read segments' splits).
struct SplitLayout {
  std::vector<ContentPtr> parents;
  PartitionFn fn;
  std::vector<uint64_t> offsets;  // relative to the region's first row; segments * fanout + 1
  ContentPtr piece(size_t index) const;
  ContentPtr read(uint64_t first_row, uint64_t end_row) const;  // relative rows
  // read(first_row, end_row) unbuilt, when the rows are exactly one piece (else null).
  PieceRef exact_piece(uint64_t first_row, uint64_t end_row) const;

 private:
  const std::shared_ptr<const ContentSplit>& split(size_t seg) const;
  mutable std::vector<std::pair<size_t, std::shared_ptr<const ContentSplit>>> cache_;  // recently split segments
  mutable size_t next_ = 0;  // the piece after the last one read
  size_t piece_at(uint64_t first_row) const;  // the last piece that starts at or before first_row
};

class RegionMap {
 public:
  // One annotated range, relative to the start of a range read by spans().
  struct Span {
    uint64_t offset = 0;  // bytes from the range's first byte
    uint32_t key_bytes = 4;
    ContentPtr content;
  };
  // Rows [first_row, first_row + content rows) of elements of key_bytes now hold `content`.
  void write(uint64_t first_byte, uint32_t key_bytes, ContentPtr content);
  // write, and a region it continues (or that continues it) of the same uniform rows
  // (merge_uniform) becomes one with it: a buffer filled by many receives keeps one region
  // instead of one per message. Reads are the same; at() finds only the merged region's start.
  void write_merging(uint64_t first_byte, uint32_t key_bytes, ContentPtr content);
  void write_merging(uint64_t first_byte, uint32_t key_bytes, const PieceRef& piece);  // built only if kept apart
  void write_split(uint64_t first_byte, uint32_t key_bytes, std::shared_ptr<const SplitLayout> layout);
  // Content of bytes [first, end): null when nothing in the range was ever annotated (not a key
  // column); gaps between annotated regions read as unknown keys.
  // key_bytes, if given, receives the element width of the annotated rows.
  ContentPtr read(uint64_t first_byte, uint64_t end_byte, uint32_t* key_bytes = nullptr) const;
  // read(first_byte, end_byte) unbuilt, when the bytes are exactly one piece of a partition
  // operator's output (else null).
  PieceRef read_piece(uint64_t first_byte, uint64_t end_byte, uint32_t* key_bytes) const;
  // The layout of a partition operator's output that bytes [first, end) are exactly (else null):
  // a copy of it keeps its partitions where they were (triton's spilled chunks, partitioned in
  // device memory and copied to host memory whole).
  std::shared_ptr<const SplitLayout> split_at(uint64_t first_byte, uint64_t end_byte, uint32_t* key_bytes) const;
  // The annotated ranges of bytes [first, end), each cut to the range, in order: what a put of
  // those bytes carries, so that the receiver sees each chunk image's keys where they were (one
  // content for the whole range would put every chunk's keys at the first one's slot).
  std::vector<Span> spans(uint64_t first_byte, uint64_t end_byte) const;
  // Bytes [first_byte, first_byte + bytes) now hold what spans() read elsewhere: everything
  // annotated there before is gone (a put overwrites every byte it covers).
  void land(uint64_t first_byte, uint64_t bytes, const std::vector<Span>& spans);
  // The whole content of the region that starts exactly at first_byte (null if none does): what
  // one put wrote there, even where an older, longer region left a tail behind it.
  ContentPtr at(uint64_t first_byte) const;
  bool empty() const { return regions_.empty(); }

 private:
  struct Region {
    uint64_t end = 0;
    uint32_t key_bytes = 4;
    ContentPtr content;                         // plain region
    std::shared_ptr<const SplitLayout> split;  // or a partitioned one
    uint64_t rows(uint64_t begin) const { return (end - begin) / key_bytes; }
    ContentPtr read_rows(uint64_t begin, uint64_t first_row, uint64_t end_row) const;
  };
  void clear_range(uint64_t first, uint64_t end);
  // write_merging's neighbours: absorb(content) adds the new rows to a neighbour's content,
  // build() makes them a content of their own.
  template <class Absorb, class Build>
  void merge_write(uint64_t first_byte, uint64_t rows, uint32_t key_bytes, Absorb absorb, Build build);
  std::map<uint64_t, Region> regions_;  // by first byte
};

// Allocation budgets of one rank, per memory space; buffers give their bytes back when freed.
class MemoryAccount {
 public:
  MemoryAccount(int rank, uint64_t device, uint64_t host) : rank_(rank), limit_{device, host, host} {}
  // RuntimeError naming the tag, the size and the space left when it does not fit.
  void reserve(MemSpace space, uint64_t bytes, const std::string& tag);
  // A buffer's memory back; the rank pays for the release (the profile's free model) at its
  // next synchronization (take_released).
  void release(MemSpace space, uint64_t bytes);
  uint64_t left(MemSpace space) const;
  // The releases since the last call: how many and their bytes, device [0] and host [1]
  // (pinned and pageable; the free models are linear, so their sum costs what each would).
  struct Released {
    uint64_t count[2] = {0, 0}, bytes[2] = {0, 0};
  };
  Released take_released() { return std::exchange(released_, Released{}); }

 private:
  int pool(MemSpace s) const { return s == MemSpace::Device ? 0 : 1; }  // pinned and host share host memory
  int rank_;
  uint64_t limit_[3];
  uint64_t used_[2] = {0, 0};
  Released released_;
};

struct SimBuffer : BufferImpl {
  std::shared_ptr<MemoryAccount> account;
  RegionMap regions;   // key content, when this buffer holds a key column
  ContentPtr table;    // a hash table's keys (set by Build on the table's key buffer)
  // Compressed buffers (CompressOp's output) by their first byte: the rows and keys they hold,
  // what a DecompressOp of them writes back.
  std::map<uint64_t, std::pair<uint64_t, ContentPtr>> compressed;
  ~SimBuffer() override {
    if (account) account->release(space, bytes);
  }
};

SimBuffer& sim_buffer(const Buffer& b);  // RuntimeError if b is not a SimRank buffer

// Content of a Tuples view's rows (null when the keys were never annotated).
ContentPtr read_keys(const Tuples& t);
void write_keys(const Tuples& t, ContentPtr content);

}  // namespace joinlab::sim
