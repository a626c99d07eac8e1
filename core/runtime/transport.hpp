// How real (non-simulated) ranks talk to each other: the one interface CpuRank (and later a
// CUDA rank) uses for every byte that crosses ranks, so the same rank code runs over the
// in-process transport (ranks as threads, in_process_transport.hpp) or an MPI/UCX one (ranks as
// processes). Nothing here may assume the peers share this process's address space.
//
// An endpoint belongs to one rank. Every blocking call is bounded by timeout_s() and throws
// RuntimeError naming what it waited for; once any rank called abort(), every blocking call of
// every rank throws RuntimeError("rank K failed: <why>") promptly.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace joinlab {

class Transport {
 public:
  virtual ~Transport() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual double timeout_s() const = 0;

  // --- two-sided: messages from one rank to another with one tag arrive in the order sent ---
  // Returns once `data` may be reused (the message is buffered or delivered).
  virtual void send(int dst, int tag, const void* data, uint64_t bytes) = 0;
  // Blocks until the next message from (src, tag) is here and copies it into `data`; its size
  // must be exactly `bytes`.
  virtual void recv(int src, int tag, void* data, uint64_t bytes) = 0;

  // --- one-sided ---
  // Collective: every rank exposes `bytes` at `base` (registered memory) and `flags` completion
  // words, all zero. Returns the window id, the same on every rank.
  virtual int expose(void* base, uint64_t bytes, uint32_t flags) = 0;
  // Writes bytes into dst's window at remote_off, then (ordered after the data) sets its flag
  // `flag` to `value`.
  virtual void put(int dst, int window, uint64_t remote_off, const void* data, uint64_t bytes,
                   uint32_t flag, uint64_t value) = 0;
  virtual uint64_t read_flag(int window, uint32_t flag) = 0;  // this rank's own window

  // --- small host collectives (blocking) ---
  // Every rank's vector, concatenated in rank order (lengths may differ).
  virtual std::vector<uint64_t> allgather(const std::vector<uint64_t>& mine) = 0;
  virtual void barrier() = 0;

  // --- failure ---
  // Marks the whole job failed on behalf of this rank; idempotent (the first reason stays).
  virtual void abort(const std::string& why) = 0;
  // Throws RuntimeError("rank K failed: <why>") if any rank aborted. For waits outside the
  // transport (events on streams) so that they too fail promptly.
  virtual void check_alive() const = 0;
};

}  // namespace joinlab
