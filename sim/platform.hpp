// The simulated cluster, built in SimGrid from a profile's topology and the experiment's shape.
//
// One flat star zone (SimGrid 3.32; see ../shared/notes/simgrid-3.32-at-scale.md):
//  * hosts: gpuR per rank (speed kWorkPerSecond: an execution of d modeled seconds is
//    d * kWorkPerSecond flops, so concurrent kernels share the GPU), cpuN per node (host-side
//    work at host memory speed), and nodeN per node (end points of node-aggregated flows);
//  * links: per GPU a PCIe pair (h2d, d2h) behind the node's host-memory link, an NVSwitch port
//    or NVLink mesh links or plain PCIe peer paths inside the node, and a NIC (one per GPU on
//    its rail, or per node); a fat tree adds per-leaf (and per-pod) uplinks whose capacity is
//    the ports below them over the oversubscription: adaptive routing spreads a leaf's traffic
//    over all its uplinks, so they act as one link of their summed capacity (README: routing);
//  * routes: a host's star route climbs its NIC and the uplinks; bypass routes take NVLink
//    inside a node and skip uplinks between GPUs under one leaf (or one pod).
// A profile's link latency is the one-way latency of a transfer over that link type; a route
// that crosses two ports of it (NIC up and NIC down, two NVSwitch ports) carries half on each.
// Node-aggregated end points have the node's pooled NIC and uplink capacity and climb as far as
// most GPU pairs between their nodes do (exact where only the NICs bind: a star or a
// non-blocking tree; sim_rank.cpp says when flows are merged).
#pragma once
#include <simgrid/s4u.hpp>
#include <string>
#include <vector>

#include "core/exec/rank.hpp"
#include "models/profile.hpp"

namespace joinlab::sim {

namespace sg4 = simgrid::s4u;

constexpr double kWorkPerSecond = 1e9;  // host speed: 1 flop = 1 ns of modeled work

struct Platform {
  ClusterShape shape;
  Topology topo;
  // cpus: one per memory domain (a node, or each socket of it with cpu.numa = per_socket), a
  // multicore host (the domain's cores, kWorkPerSecond each) whose route to itself is its
  // memory link, the roof that its CPU operators and the PCIe DMA into it share.
  std::vector<sg4::Host*> gpus, cpus, nodes;
  int domains_per_node = 1;
  int cpu_of(int rank) const {  // the memory domain (index into cpus) of a rank's host memory
    return shape.node_of(rank) * domains_per_node + shape.local_of(rank) * domains_per_node / shape.per_node;
  }
  int ranks_in_domain(int cpu) const;  // ranks whose host memory is domain `cpu`
  sg4::Host* timer = nullptr;  // unlimited speed: bounded executions on it are pure waits
  // Bandwidth of one GPU's path to another (the bottleneck of its route), for rate caps of
  // merged flows.
  double inter_node_bw = 0, intra_node_bw = 0;
  std::string describe() const;  // "128 nodes x 8 GPUs, nvswitch, per-GPU NICs, fat tree 2 levels ..."
};

// Builds the platform into the running engine (call once, before actors start).
Platform build_platform(const Profile& profile, const ClusterShape& shape, const Topology& topo);

}  // namespace joinlab::sim
