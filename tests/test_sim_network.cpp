// The simulated network: per-GPU flows against node-merged flows (sim_flows) on the fabrics the
// profiles use, the cost of an oversubscribed fat tree, and weak scaling of the one-level shuffle
// (per-GPU throughput flat once the data leaves the node).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/builtin.hpp"
#include "core/experiment/runner.hpp"

namespace joinlab {
namespace {

std::string profiles() { return std::string(JOINLAB_SOURCE_DIR) + "/models/profiles"; }

// gao2021's one-level shuffle with `rows_per_gpu` rows of R and of S per GPU (16-byte tuples),
// on `nodes` x 8 GPUs of `profile` with its own fabric unless options say otherwise.
RunPoint one_level_shuffle(int nodes, uint64_t rows_per_gpu, const std::string& profile,
                           const std::map<std::string, std::string>& options) {
  RunPoint p;
  p.name = "sim network test";
  p.strategy = "shuffle";
  p.backend = "sim";
  p.verify = false;
  p.cluster.shape = {nodes, 8};
  p.cluster.profile = profile;
  p.cluster.profile_dir = profiles();
  p.cluster.options = options;
  p.cluster.options["sim_trace"] = "none";
  const uint64_t rows = rows_per_gpu * uint64_t(nodes) * 8;
  p.workload.r.name = "R";
  p.workload.r.rows = rows;
  p.workload.r.dist = KeyDist::UniqueDense;
  p.workload.s = p.workload.r;
  p.workload.s.name = "S";
  p.workload.s.dist = KeyDist::ForeignKey;
  for (RelationSpec* rel : {&p.workload.r, &p.workload.s}) {
    rel->key_bytes = 8;
    rel->payload_bytes = {8};
  }
  p.strategy_options["levels"] = "1";
  return p;
}

double phase(const RunOutcome& o, const std::string& name) {
  for (auto& ph : o.phases)
    if (ph.name == name) return ph.seconds;
  ADD_FAILURE() << "no phase " << name;
  return 0;
}

class SimNetwork : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { register_builtin(); }
  // The shuffle phase with per-GPU flows and with node-merged flows.
  std::pair<double, double> pair_and_node(int nodes, const std::string& profile,
                                          std::map<std::string, std::string> options) {
    options["sim_flows"] = "pair";
    const double pair = phase(run_point(one_level_shuffle(nodes, 32u << 20, profile, options)), "shuffle");
    options["sim_flows"] = "node";
    const double node = phase(run_point(one_level_shuffle(nodes, 32u << 20, profile, options)), "shuffle");
    return {pair, node};
  }
};

// On the rail-optimized three-level fat tree of a DGX A100 SuperPOD (20-node leaves: at 256
// GPUs traffic crosses leaves, spines and rails), on the two-level one of a DGX H100 SuperPOD,
// and on a star: merging a node pair's transfers of an instant into one flow gives the per-GPU
// answer.
TEST_F(SimNetwork, MergedFlowsMatchPerGpuFlowsOnNonBlockingFabrics) {
  for (int nodes : {8, 32}) {
    for (const char* profile : {"dgx-a100-hdr", "dgx-h100-ndr"}) {
      auto [pair, node] = pair_and_node(nodes, profile, {});
      EXPECT_NEAR(node, pair, 0.03 * pair) << profile << ", " << nodes * 8 << " GPUs";
    }
    auto [pair, node] = pair_and_node(nodes, "dgx-a100-hdr", {{"fabric", "star"}});
    EXPECT_NEAR(node, pair, 0.03 * pair) << "star, " << nodes * 8 << " GPUs";
  }
}

// Two rails' worth of traffic through half the uplinks: the exchange between leaves runs at the
// uplinks' rate, not the NICs'. Merging would hide that (a merged flow cannot tell which rail it
// crosses), so `auto` keeps per-GPU flows on an oversubscribed fabric at any size.
TEST_F(SimNetwork, AnOversubscribedFatTreeSlowsTheExchangeBetweenLeaves) {
  const std::map<std::string, std::string> leaves{{"fabric", "fat_tree"}, {"levels", "2"}, {"leaf_nodes", "2"}};
  auto with = [&](const char* over, const char* flows) {
    auto o = leaves;
    o["oversubscription"] = over;
    o["sim_flows"] = flows;
    return phase(run_point(one_level_shuffle(8, 32u << 20, "dgx-h100-ndr", o)), "shuffle");
  };
  const double full = with("1", "pair"), half = with("2", "pair");
  // 3/4 of a GPU's traffic leaves its leaf (2 of 8 nodes under it); at half the uplink rate
  // that part takes twice as long.
  EXPECT_GT(half, 1.6 * full);
  EXPECT_LT(half, 2.1 * full);
  EXPECT_EQ(with("2", "auto"), half);
}

// Weak scaling, 500 M-row shuffles scaled down to 32 M rows per GPU: from 16 GPUs on (the data
// leaves the node through the NICs) per-GPU throughput changes by at most 10% from one size to
// the next, on the profile's non-blocking rail-optimized fat tree; 8 GPUs (NVLink only) are
// faster. Up to 256 GPUs per-GPU flows, beyond merged ones (sim_flows = auto).
TEST_F(SimNetwork, WeakScalingHasNoStepsOnANonBlockingFatTree) {
  std::vector<double> per_gpu;
  for (int nodes : {1, 2, 4, 8, 16, 32, 64}) {
    const RunOutcome o = run_point(one_level_shuffle(nodes, 32u << 20, "dgx-h100-ndr", {}));
    per_gpu.push_back(o.throughput() / (nodes * 8));
  }
  EXPECT_GT(per_gpu[0], 1.5 * per_gpu[1]) << "8 GPUs exchange over NVLink only";
  for (size_t i = 2; i < per_gpu.size(); ++i)
    EXPECT_NEAR(per_gpu[i], per_gpu[i - 1], 0.10 * per_gpu[i - 1]) << (8 << i) << " GPUs against " << (4 << i);
}

}  // namespace
}  // namespace joinlab
