#include "sim/platform.hpp"

#include <algorithm>
#include <sstream>

#include "core/common/error.hpp"

namespace joinlab::sim {

namespace {

using Dir = sg4::LinkInRoute::Direction;
using NetPoint = simgrid::kernel::routing::NetPoint;

struct Builder {
  sg4::NetZone* zone;
  int counter = 0;

  sg4::Link* link(const std::string& name, double bw, double latency) {
    return zone->create_link(name, bw)->set_latency(latency)->seal();
  }
  sg4::SplitDuplexLink* duplex(const std::string& name, double bw, double latency) {
    auto* l = zone->create_split_duplex_link(name, bw);
    l->set_latency(latency)->seal();
    return l;
  }
  void bypass(NetPoint* a, NetPoint* b, const std::vector<sg4::LinkInRoute>& links) {
    zone->add_bypass_route(a, b, nullptr, nullptr, links);
  }
};

}  // namespace

int Platform::ranks_in_domain(int cpu) const {
  int n = 0;
  for (int r = cpu / domains_per_node * shape.per_node; r < (cpu / domains_per_node + 1) * shape.per_node; ++r)
    n += cpu_of(r) == cpu;
  return n;
}

std::string Platform::describe() const {
  std::ostringstream d;
  d << shape.nodes << " node" << (shape.nodes == 1 ? "" : "s") << " x " << shape.per_node << " GPU"
    << (shape.per_node == 1 ? "" : "s") << ", " << to_string(topo.intra) << ", "
    << (topo.nics == NicPlacement::PerGpu ? "a NIC per GPU" : std::to_string(topo.nics_per_node) + " NIC(s) per node");
  if (topo.fabric == Fabric::Star) {
    d << ", non-blocking fabric";
  } else {
    d << ", fat tree " << topo.levels << " level" << (topo.levels == 1 ? "" : "s") << " (" << topo.leaf_nodes
      << " nodes per leaf" << (topo.rail_optimized && topo.nics == NicPlacement::PerGpu ? ", rail-optimized" : "")
      << ", oversubscription " << topo.oversubscription << ")";
  }
  return d.str();
}

Platform build_platform(const Profile& prof, const ClusterShape& shape, const Topology& topo) {
  Platform p;
  p.shape = shape;
  p.topo = topo;
  const int nodes = shape.nodes, per = shape.per_node, n = shape.size();
  Builder b{sg4::create_star_zone("cluster")};
  const bool per_gpu_nic = topo.nics == NicPlacement::PerGpu;
  const int node_nics = per_gpu_nic ? per : std::max(1, topo.nics_per_node);
  const bool fat = topo.fabric == Fabric::FatTree && topo.levels >= 2;
  const bool rail = fat && per_gpu_nic && topo.rail_optimized;
  const int leaf_nodes = std::max(1, topo.leaf_nodes);
  const int groups = (nodes + leaf_nodes - 1) / leaf_nodes;

  // --- hosts ---
  for (int r = 0; r < n; ++r) p.gpus.push_back(b.zone->create_host("gpu" + std::to_string(r), kWorkPerSecond)->seal());
  // Memory domains: a profile with [cpu] gives each its cores; without one, host operators run
  // at host.mem_bw on a one-core host per node (the model before [cpu]).
  const CpuSpec& cpu = prof.cpu;
  p.domains_per_node = cpu.present() && cpu.per_socket ? std::min(cpu.sockets, per) : 1;
  const int domain_cores = !cpu.present() ? 1 : cpu.per_socket ? cpu.cores : cpu.cores * cpu.sockets;
  const double domain_bw = !cpu.present() ? prof.host.mem_bw : cpu.per_socket ? cpu.mem_bw : cpu.mem_bw * cpu.sockets;
  for (int d = 0; d < nodes * p.domains_per_node; ++d)
    p.cpus.push_back(b.zone->create_host("cpu" + std::to_string(d), kWorkPerSecond)->set_core_count(domain_cores)->seal());
  for (int nd = 0; nd < nodes; ++nd)
    p.nodes.push_back(b.zone->create_host("node" + std::to_string(nd), kWorkPerSecond)->seal());

  p.timer = b.zone->create_host("timer", 1e30)->seal();

  // --- NICs ---
  std::vector<sg4::SplitDuplexLink*> nics;  // per GPU (rail) or per node NIC
  for (int i = 0; i < (per_gpu_nic ? n : nodes * node_nics); ++i)
    nics.push_back(b.duplex("nic" + std::to_string(i), prof.nic.bw, prof.nic.latency / 2));
  auto nic_of = [&](int r) {
    return per_gpu_nic ? nics[size_t(r)] : nics[size_t(shape.node_of(r) * node_nics + shape.local_of(r) % node_nics)];
  };

  // --- fat tree uplinks: a leaf per (rail, node group), or per node group ---
  auto leaf_of = [&](int r) { return rail ? shape.local_of(r) * groups + shape.node_of(r) / leaf_nodes : shape.node_of(r) / leaf_nodes; };
  const int leaves = rail ? per * groups : groups;
  auto pod_of_leaf = [&](int leaf) { return rail ? leaf / groups : leaf / 8; };  // rails, or 8 leaves per pod
  const int pods = rail ? per : (leaves + 7) / 8;
  std::vector<sg4::SplitDuplexLink*> leaf_up, pod_up;
  if (fat) {
    std::vector<double> leaf_ports(static_cast<size_t>(leaves), 0), pod_ports(static_cast<size_t>(pods), 0);
    for (int r = 0; r < n; ++r)
      if (per_gpu_nic || shape.local_of(r) < node_nics) leaf_ports[size_t(leaf_of(r))] += 1;
    for (int l = 0; l < leaves; ++l) {
      leaf_up.push_back(b.duplex("leaf" + std::to_string(l) + "_up",
                                 std::max(1.0, leaf_ports[size_t(l)]) * prof.nic.bw / topo.oversubscription, topo.hop_latency));
      pod_ports[size_t(pod_of_leaf(l))] += leaf_ports[size_t(l)];
    }
    if (topo.levels >= 3)
      for (int q = 0; q < pods; ++q)
        pod_up.push_back(b.duplex("pod" + std::to_string(q) + "_up",
                                  std::max(1.0, pod_ports[size_t(q)]) * prof.nic.bw / topo.spine_oversubscription,
                                  topo.hop_latency));
  }
  auto star_route = [&](int r) {
    std::vector<sg4::LinkInRoute> up{{nic_of(r), Dir::UP}};
    if (fat) {
      up.push_back({leaf_up[size_t(leaf_of(r))], Dir::UP});
      if (!pod_up.empty()) up.push_back({pod_up[size_t(pod_of_leaf(leaf_of(r)))], Dir::UP});
    }
    return up;
  };
  for (int r = 0; r < n; ++r) b.zone->add_route(p.gpus[size_t(r)]->get_netpoint(), nullptr, nullptr, nullptr, star_route(r), true);
  for (int d = 0; d < int(p.cpus.size()); ++d) {  // host-side traffic leaves through the domain's first GPU's NIC
    int first = d / p.domains_per_node * per;
    while (p.cpu_of(first) != d) ++first;
    b.zone->add_route(p.cpus[size_t(d)]->get_netpoint(), nullptr, nullptr, nullptr, star_route(first), true);
  }

  // --- inside a node: PCIe to the host, GPU-to-GPU paths ---
  std::vector<sg4::Link*> h2d(static_cast<size_t>(n)), d2h(static_cast<size_t>(n)), hostmem(p.cpus.size());
  for (size_t d = 0; d < p.cpus.size(); ++d) {
    hostmem[d] = b.link("hostmem" + std::to_string(d), domain_bw, 0);
    // A domain's own traffic (CPU operators' bytes, copies inside host memory) crosses its memory.
    b.zone->add_route(p.cpus[d]->get_netpoint(), p.cpus[d]->get_netpoint(), nullptr, nullptr,
                      {sg4::LinkInRoute(hostmem[d])}, false);
  }
  std::vector<sg4::SplitDuplexLink*> nvl(static_cast<size_t>(n), nullptr);
  for (int r = 0; r < n; ++r) {
    h2d[size_t(r)] = b.link("pcie_h2d" + std::to_string(r), prof.h2d.bw, prof.h2d.latency);
    d2h[size_t(r)] = b.link("pcie_d2h" + std::to_string(r), prof.d2h.bw, prof.d2h.latency);
    if (topo.intra == IntraNode::NVSwitch)
      nvl[size_t(r)] = b.duplex("nvl" + std::to_string(r), prof.p2p.bw, prof.p2p.latency / 2);
    auto* g = p.gpus[size_t(r)]->get_netpoint();
    auto* c = p.cpus[size_t(p.cpu_of(r))]->get_netpoint();
    b.bypass(c, g, {sg4::LinkInRoute(hostmem[size_t(p.cpu_of(r))]), sg4::LinkInRoute(h2d[size_t(r)])});
    b.bypass(g, c, {sg4::LinkInRoute(d2h[size_t(r)]), sg4::LinkInRoute(hostmem[size_t(p.cpu_of(r))])});
  }
  for (int nd = 0; nd < nodes; ++nd)
    for (int i = 0; i < per; ++i)
      for (int j = 0; j < per; ++j) {
        if (i == j) continue;
        const int a = nd * per + i, c = nd * per + j;
        auto* pa = p.gpus[size_t(a)]->get_netpoint();
        auto* pc = p.gpus[size_t(c)]->get_netpoint();
        switch (topo.intra) {
          case IntraNode::NVSwitch:
            b.bypass(pa, pc, {{nvl[size_t(a)], Dir::UP}, {nvl[size_t(c)], Dir::DOWN}});
            break;
          case IntraNode::NVLinkMesh: {
            if (i > j) break;  // one link per pair, added with both directions below
            auto* m = b.duplex("mesh" + std::to_string(a) + "_" + std::to_string(c), prof.p2p.bw, prof.p2p.latency);
            b.bypass(pa, pc, {{m, Dir::UP}});
            b.bypass(pc, pa, {{m, Dir::DOWN}});
            break;
          }
          case IntraNode::PCIe:
            b.bypass(pa, pc, {sg4::LinkInRoute(d2h[size_t(a)]), sg4::LinkInRoute(h2d[size_t(c)])});
            break;
        }
      }

  // --- fat tree: pairs under one leaf (or one pod) do not climb above it ---
  if (fat) {
    std::vector<std::vector<int>> by_leaf(static_cast<size_t>(leaves));
    for (int r = 0; r < n; ++r) by_leaf[size_t(leaf_of(r))].push_back(r);
    for (int l = 0; l < leaves; ++l) {
      const auto& members = by_leaf[size_t(l)];
      for (int a : members)
        for (int c : members)
          if (shape.node_of(a) != shape.node_of(c))
            b.bypass(p.gpus[size_t(a)]->get_netpoint(), p.gpus[size_t(c)]->get_netpoint(),
                     {{nic_of(a), Dir::UP}, {nic_of(c), Dir::DOWN}});
    }
    if (!pod_up.empty())
      for (int la = 0; la < leaves; ++la)
        for (int lc = 0; lc < leaves; ++lc) {
          if (la == lc || pod_of_leaf(la) != pod_of_leaf(lc)) continue;
          for (int a : by_leaf[size_t(la)])
            for (int c : by_leaf[size_t(lc)])
              if (shape.node_of(a) != shape.node_of(c))
                b.bypass(p.gpus[size_t(a)]->get_netpoint(), p.gpus[size_t(c)]->get_netpoint(),
                         {{nic_of(a), Dir::UP}, {leaf_up[size_t(la)], Dir::UP}, {leaf_up[size_t(lc)], Dir::DOWN},
                          {nic_of(c), Dir::DOWN}});
        }
  }

  // --- node-aggregated end points: the node's pooled NICs, uplinks and GPU-to-GPU fabric ---
  p.inter_node_bw = prof.nic.bw;
  p.intra_node_bw = topo.intra == IntraNode::PCIe ? std::min(prof.h2d.bw, prof.d2h.bw) : prof.p2p.bw;
  std::vector<sg4::SplitDuplexLink*> group_up;
  if (fat)
    for (int g = 0; g < groups; ++g) {
      double cap = 0;
      for (int l = 0; l < leaves; ++l)
        if ((rail ? l % groups : l) == g) cap += leaf_up[size_t(l)]->get_bandwidth();
      group_up.push_back(b.duplex("group" + std::to_string(g) + "_up", cap, topo.hop_latency));
    }
  // A merged flow climbs as far as most of its transfers do, so that it pays their switch hops:
  // on a rail-optimized tree those are the cross-rail ones (7 in 8 GPU pairs), which climb above
  // their leaf even between nodes of one leaf group, and with 3 levels cross the pods (one per
  // rail); elsewhere nodes of one leaf group stay under it, and with 3 levels nodes of one pod
  // stay below the pods' uplinks.
  const bool three = fat && topo.levels >= 3;
  std::vector<sg4::SplitDuplexLink*> pools, node_pod;
  for (int nd = 0; nd < nodes; ++nd) {
    auto* pool = b.duplex("pool" + std::to_string(nd), node_nics * prof.nic.bw, prof.nic.latency / 2);
    pools.push_back(pool);
    std::vector<sg4::LinkInRoute> up{{pool, Dir::UP}};
    if (fat) up.push_back({group_up[size_t(nd / leaf_nodes)], Dir::UP});
    if (three) {  // the pods' uplinks seen from one node: its own share of them, a hop further up
      node_pod.push_back(b.duplex("node_pod" + std::to_string(nd), node_nics * prof.nic.bw, topo.hop_latency));
      up.push_back({node_pod.back(), Dir::UP});
    }
    auto* np = p.nodes[size_t(nd)]->get_netpoint();
    b.zone->add_route(np, nullptr, nullptr, nullptr, up, true);
    auto* inside = b.link("inside" + std::to_string(nd), per * p.intra_node_bw,
                          topo.intra == IntraNode::PCIe ? prof.h2d.latency : prof.p2p.latency);
    b.zone->add_route(np, np, nullptr, nullptr, {sg4::LinkInRoute(inside)}, false);
  }
  if (fat && !rail)
    for (int a = 0; a < nodes; ++a)
      for (int c = 0; c < nodes; ++c) {
        if (a == c) continue;
        const int ga = a / leaf_nodes, gc = c / leaf_nodes;
        auto* pa = p.nodes[size_t(a)]->get_netpoint();
        auto* pc = p.nodes[size_t(c)]->get_netpoint();
        if (ga == gc)
          b.bypass(pa, pc, {{pools[size_t(a)], Dir::UP}, {pools[size_t(c)], Dir::DOWN}});
        else if (three && pod_of_leaf(ga) == pod_of_leaf(gc))  // not rail-optimized: a group is a leaf
          b.bypass(pa, pc, {{pools[size_t(a)], Dir::UP}, {group_up[size_t(ga)], Dir::UP},
                            {group_up[size_t(gc)], Dir::DOWN}, {pools[size_t(c)], Dir::DOWN}});
      }
  b.zone->seal();
  return p;
}

}  // namespace joinlab::sim
