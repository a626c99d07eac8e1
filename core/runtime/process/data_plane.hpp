// Transports between ranks that may be processes (core/runtime/transport.hpp), set up over a
// control plane (control_plane.hpp):
//
// UCX (UCP): the data plane of process ranks - InfiniBand/RoCE RDMA on a cluster, TCP and
// shared memory on one machine (CI runs it over loopback).
//  * send/recv are UCP tagged messages; the 64-bit UCP tag carries (kind, source rank, user
//    tag), so messages of one (source, tag) match in the order sent, as UCP guarantees.
//  * expose registers the buffer and a flag array of its own (ucp_mem_map) and exchanges their
//    addresses and packed remote keys through the control plane.
//  * put, to a peer that UCX reaches with an RDMA lane (InfiniBand, RoCE, ...): ucp_put_nbx of
//    the data, ucp_worker_fence, then ucp_put_nbx of the 8-byte flag; the fence orders every
//    operation issued before it (this put's data and every earlier put of this rank) before the
//    flag write; put returns once both are locally complete. To a peer without one (TCP; shared
//    memory under peer failure handling) UCX would emulate RMA itself, and UCX 1.13 aborts the
//    process when a peer dies during that emulation: there the transport emulates the put itself
//    (header, data and acknowledgement as tagged messages, landed in place by the target's
//    progress thread), returning on the acknowledgement. JOINLAB_UCX_PUT=rma|emulated forces one.
//  * collectives go through the control plane (MPI under mpirun).
//  * failures: endpoints use UCP_ERR_HANDLING_MODE_PEER, so a peer that dies fails its endpoint
//    ("rank K is unreachable ...", after a short grace in which the abort message of a peer that
//    failed and exited may still arrive with the cause); every rank puts a heartbeat into its
//    successor's memory, so a rank that hangs or is stopped is named by its successor once silent
//    for timeout_s / 2 ("rank K stopped responding ..."); abort() sends its reason to every peer
//    on a reserved tag that a progress thread always has a receive posted for. Every wait is
//    bounded by timeout_s and polls the failure state, so no call hangs. Once the job failed,
//    nothing lands in the rank's memory any more (its strategy is unwinding and freeing it).
//  One UCP context and worker per rank, in UCS_THREAD_MODE_MULTI: stream worker threads post
//  and progress concurrently, and a progress thread keeps remote puts landing (over TCP they
//  are applied by the target's progress) while the rank computes.
//
// MPI: the data plane for machines without UCX ([cluster] transport = mpi; needs
// MPI_THREAD_MULTIPLE). send/recv are MPI messages, puts the same header / data / acknowledgement
// protocol as UCX's emulated puts, landed by a progress thread; abort messages like UCX's. A dead
// peer is found by the bounded waits (mpirun itself aborts the job first, unless told not to).
//
// Fault injection (tests only): JOINLAB_FAULT in the environment wraps the data plane of one
// rank (fault_injection.cpp).
#pragma once
#include <memory>

#include "core/runtime/process/control_plane.hpp"
#include "core/runtime/transport.hpp"

namespace joinlab {

class DataPlane : public Transport {
 public:
  // Ends the data plane cleanly: a barrier (nobody still talks to anyone), after which endpoint
  // errors from peers that close down are no longer failures. Every rank calls it after a
  // successful run, before the transport is destroyed.
  virtual void quiesce() = 0;
};

// Collective over the control plane's ranks: creates this rank's endpoint to every rank.
// Throws RuntimeError naming the UCX call and status when UCX cannot start.
std::shared_ptr<DataPlane> make_ucx_transport(std::shared_ptr<ControlPlane> control);

// Collective over MPI_COMM_WORLD (under mpirun). RuntimeError when MPI gives no
// MPI_THREAD_MULTIPLE.
std::shared_ptr<DataPlane> make_mpi_transport(std::shared_ptr<ControlPlane> control);

// The JOINLAB_FAULT plan for `rank` applied to `inner`, or `inner` itself when there is none.
std::shared_ptr<DataPlane> with_injected_faults(std::shared_ptr<DataPlane> inner, int rank);

}  // namespace joinlab
