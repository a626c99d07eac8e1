// SSB queries on the simulator, which has no data: gpj's and gpj-b's counts are the closed form's
// expectation (lineorder rows x the generated dimensions' pass fractions) within half a row per
// rank, which run_point checks; the checksum cannot be (docs/workloads.md).
#include <gtest/gtest.h>

#include <cmath>

#include "core/builtin.hpp"
#include "core/common/error.hpp"
#include "core/experiment/runner.hpp"
#include "core/verify/expected.hpp"
#include "core/workload/ssb.hpp"
#include "tests/test_workloads.hpp"

namespace joinlab {
namespace {

class SsbSim : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { register_builtin(); }
};

RunPoint point(const std::string& strategy, SsbQuery query, double sf, int nodes) {
  RunPoint p = test::ssb_point(strategy, "sim", query, sf, {nodes, 1});
  p.cluster.profile = "v100-edr";
  p.cluster.profile_dir = std::string(JOINLAB_SOURCE_DIR) + "/models/profiles";
  return p;
}

TEST_F(SsbSim, CountsAreTheExpectationOnGpjAndGpjB) {
  for (const std::string strategy : {"gpj", "gpj-b"})
    for (SsbQuery query : {SsbQuery::Q21, SsbQuery::Q31})
      for (int ranks : {2, 4}) {
        const RunPoint p = point(strategy, query, 1, ranks);
        SCOPED_TRACE(strategy + " " + ssb::to_string(query) + " on " + std::to_string(ranks) + " nodes");
        RunOutcome o;
        ASSERT_NO_THROW(o = run_point(p));
        const ssb::Scale s = ssb::scale_at(1, 42);
        const double want = ssb::expected_qualifying(ssb::plan(query, s), s);
        EXPECT_NEAR(double(o.digest.count), want, 0.5 * ranks);
        EXPECT_GT(o.digest.count, 0u);
        EXPECT_FALSE(o.has_checksum);
        EXPECT_EQ(o.checked, "expected");
        EXPECT_GT(o.total_seconds, 0.0);
        // A count off by more than the rounding fails.
        EXPECT_THROW(check_star_expected_count(o.digest.count + ranks, p.workload, ranks, "test"), VerificationError);
      }
}

}  // namespace
}  // namespace joinlab
