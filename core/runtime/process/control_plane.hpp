// The control plane of a job: the few small collectives a data-plane transport needs to set
// itself up (worker addresses, remote keys) and that strategies use (allgather of histograms,
// barrier). Over MPI when the ranks are processes launched by mpirun (mpi_launch.hpp); over the
// in-process fabric when they are threads of one process (tests, single-node runs over UCX).
//
// Every call is bounded by the plane's timeout and calls `alive` between polls, so a failure
// seen by the data plane (a dead peer, an abort message) ends a wait promptly: `alive` throws.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace joinlab {

class Transport;

class ControlPlane {
 public:
  using Liveness = std::function<void()>;  // throws RuntimeError once the job has failed
  virtual ~ControlPlane() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual double timeout_s() const = 0;
  // Every rank's bytes, in rank order. `what` names the collective in timeout errors.
  virtual std::vector<std::string> allgather(const std::string& mine, const std::string& what,
                                             const Liveness& alive) = 0;
  // Every rank's bytes at rank 0 (empty vector elsewhere): traces, which only rank 0 writes.
  virtual std::vector<std::string> gather_to_root(const std::string& mine, const std::string& what,
                                                  const Liveness& alive) = 0;
  virtual void barrier(const std::string& what, const Liveness& alive) = 0;
  // The job failed on this rank's side: wake whatever waits inside the plane (idempotent).
  virtual void abort(const std::string& why) = 0;
};

// A control plane over an in-process transport endpoint (ranks as threads). The endpoint's own
// failure state is used as well, so aborting it wakes every rank's collectives.
std::shared_ptr<ControlPlane> make_in_process_control_plane(std::shared_ptr<Transport> endpoint);

// Packing of 64-bit words into the plane's bytes and back (Transport::allgather over a plane).
std::string words_to_bytes(const std::vector<uint64_t>& words);
std::vector<uint64_t> bytes_to_words(const std::string& bytes);
// Transport::allgather over a plane: every rank's words, concatenated in rank order.
std::vector<uint64_t> allgather_words(ControlPlane& plane, const std::vector<uint64_t>& mine,
                                      const std::string& what, const ControlPlane::Liveness& alive);

}  // namespace joinlab
