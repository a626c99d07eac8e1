// The experiment CLI: value parsing, experiment files, sweeps and overrides, bad input (exit 2
// with file, line, key and value named), the results table, CSV and Chrome trace, progress.
//
// Runs that need no real backend use a scripted one registered here ("scripted"): its ranks
// record fixed phase times and trace spans, so every number in the outputs is known exactly.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define BOOST_BIND_GLOBAL_PLACEHOLDERS  // Boost 1.74's JSON parser still includes the old boost/bind.hpp
#include <boost/property_tree/json_parser.hpp>
#include <boost/property_tree/ptree.hpp>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <thread>

#include "core/builtin.hpp"
#include "core/common/error.hpp"
#include "core/experiment/cli.hpp"
#include "core/experiment/config.hpp"
#include "core/experiment/environment.hpp"
#include "core/experiment/phase_limits.hpp"
#include "core/experiment/preflight.hpp"
#include "core/experiment/progress.hpp"
#include "core/experiment/report.hpp"
#include "core/experiment/runner.hpp"
#include "core/experiment/trace_writer.hpp"
#include "core/experiment/values.hpp"
#include "core/runtime/launcher.hpp"
#include "core/workload/tpch.hpp"

namespace joinlab {
namespace {

namespace fs = std::filesystem;

// --- a scripted backend and strategy -----------------------------------------------------------

class ScriptedRank : public Rank {
 public:
  using Rank::Rank;
  std::string backend() const override { return "scripted"; }
  int streams() const override { return 2; }
  Buffer alloc(MemSpace, uint64_t, const std::string&) override { throw RuntimeError("scripted: no memory"); }
  uint64_t capacity(MemSpace) const override { return 0; }
  Launched launch(Stream, Op) override { throw RuntimeError("scripted: no operators"); }
  Event copy(Stream, const Buffer&, uint64_t, const Buffer&, uint64_t, uint64_t) override { return {}; }
  Event record(Stream) override { return {}; }
  void stream_wait(Stream, const Event&) override {}
  void sync(Stream) override {}
  Event send(Stream, int, const Buffer&, uint64_t, uint64_t, int) override { return {}; }
  Event recv(Stream, int, const Buffer&, uint64_t, uint64_t, int) override { return {}; }
  int expose(const Buffer&, uint32_t) override { return 0; }
  Event put(Stream, int, int, uint64_t, const Buffer&, uint64_t, uint64_t, uint32_t, uint64_t) override { return {}; }
  uint64_t read_flag(int, uint32_t) override { return 0; }
  std::vector<uint64_t> allgather(const std::vector<uint64_t>& mine) override { return mine; }
  void barrier() override {}
  double now() const override { return clock; }
  Bandwidths bandwidths() const override {
    Bandwidths b;
    b.mem = 1e9;
    b.source = "scripted";
    return b;
  }
  void span(const std::string& track, OpKind kind, double begin, double end) {
    OpParams p;
    p.kind = kind;
    p.rows_in = 1000;
    p.detail = "scripted \"op\"";
    trace_.add({id(), track, p, begin, end});
  }
  double clock = 100;  // seconds
};

class ScriptedBackend : public Backend {
 public:
  std::string name() const override { return "scripted"; }
  uint64_t device_memory_per_rank(const BackendConfig& cfg) override { return cfg.device_memory; }
  void run(const BackendConfig& cfg, const std::function<void(Rank&)>& body,
           const std::function<void(Rank&)>& collect) override {
    std::vector<std::unique_ptr<ScriptedRank>> ranks;
    for (int r = 0; r < cfg.shape.size(); ++r) ranks.push_back(std::make_unique<ScriptedRank>(r, cfg.shape));
    for (auto& r : ranks) body(*r);
    for (auto& r : ranks) collect(*r);
  }
};

// Phases: generate 5 s, build 1 s, probe 2 s (rank 1 probes 3 s): total 4 s without generate.
// Rank 0 reports the expected result, or a wrong checksum when the option corrupt is set.
class ScriptedJoin : public Strategy {
 public:
  void run(Rank& base, const JoinJob& job) override {
    auto& rank = dynamic_cast<ScriptedRank&>(base);
    rank.phase(kGeneratePhase);
    rank.clock += 5;
    rank.phase("build");
    rank.span("stream 0", OpKind::Build, rank.clock, rank.clock + 1);
    rank.clock += 1;
    rank.phase("probe");
    rank.span("stream 1", OpKind::Probe, rank.clock, rank.clock + 1.5);
    rank.span("copy", OpKind::Copy, rank.clock, rank.clock + 0.5);
    rank.clock += rank.id() == 1 ? 3 : 2;
    rank.end_phases();
    RankResult r;
    if (rank.id() == 0) {
      JoinDigest want = expected_result(job.workload).digest;
      r.count = want.count;
      r.checksum = want.checksum + (job.options["corrupt"].as<bool>() ? 1 : 0);
    }
    rank.report(r);
  }
};

void register_scripted() {
  register_builtin();
  register_backend("scripted", [] { return std::make_unique<ScriptedBackend>(); });
  StrategyInfo info;
  info.name = "scripted";
  info.description = "test strategy with fixed times";
  info.min_ranks = 1;
  info.max_ranks = 4;
  info.add_options = [](po::options_description& d) {
    d.add_options()("corrupt", po::value<bool>()->default_value(false), "report a wrong checksum")(
        "fanout", po::value<int>()->default_value(16), "an integer option");
  };
  info.make = [] { return std::make_unique<ScriptedJoin>(); };
  info.working_set_bytes = [](const JoinJob& job, const ClusterShape&) {
    return (job.workload.r.rows + job.workload.s.rows) * 8;
  };
  info.bound = [](const JoinJob&, const ClusterShape&, const Bandwidths&) { return Bound{1.0, "scripted resource"}; };
  register_strategy(info);
}

// --- helpers -----------------------------------------------------------------------------------

struct CliResult {
  int code;
  std::string out, err;
};

CliResult cli(std::vector<std::string> args) {
  args.insert(args.begin(), "joinlab");
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  testing::internal::CaptureStdout();
  testing::internal::CaptureStderr();
  int code = cli_main(int(argv.size()), argv.data());
  std::string out = testing::internal::GetCapturedStdout();
  return {code, out, testing::internal::GetCapturedStderr()};
}

class CliTest : public testing::Test {
 protected:
  void SetUp() override {
    register_scripted();
    dir_ = fs::path(testing::TempDir()) / ("joinlab_cli_" + std::to_string(::getpid()) + "_" +
                                           testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string write(const std::string& name, const std::string& text) {
    std::string path = (dir_ / name).string();
    std::ofstream(path) << text;
    return path;
  }
  // A valid experiment on the scripted backend; `extra` is appended (it may add sections).
  std::string experiment(const std::string& extra = "", const std::string& name = "exp.ini") {
    return write(name,
                 "# scripted experiment\n"
                 "[experiment]\n"
                 "strategy = scripted\n"
                 "backend = scripted\n"
                 "output_dir = " + (dir_ / "out").string() + "\n"
                 "\n"
                 "[workload]\n"
                 "r.rows = 1000\n"
                 "s.rows = 2000\n" + extra);
  }
  std::string read(const std::string& path) {
    std::ifstream in(path);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }
  fs::path dir_;
};

// Rejected before any work: exit code 2, the message names everything given, no output written.
void expect_rejected(const CliResult& r, const std::vector<std::string>& mentions) {
  EXPECT_EQ(r.code, kExitInput) << r.err;
  for (auto& m : mentions) EXPECT_NE(r.err.find(m), std::string::npos) << "missing '" << m << "' in: " << r.err;
  EXPECT_EQ(r.out, "") << "a rejected experiment printed a table";
}

// --- values ------------------------------------------------------------------------------------

TEST(Values, SizesInEveryNotation) {
  EXPECT_EQ(parse_size("16777216"), 16777216u);
  EXPECT_EQ(parse_size("2^24"), 1u << 24);
  EXPECT_EQ(parse_size("16M"), 16000000u);
  EXPECT_EQ(parse_size("16Mi"), 16u << 20);
  EXPECT_EQ(parse_size("1G"), 1000000000u);
  EXPECT_EQ(parse_size("1Gi"), 1u << 30);
  EXPECT_EQ(parse_size("4Ki"), 4096u);
  EXPECT_EQ(parse_size("2k"), 2000u);
  EXPECT_EQ(parse_size("1.5K"), 1500u);
  EXPECT_EQ(parse_size(" 48Gi "), 48ull << 30);
  EXPECT_EQ(parse_size("0", true), 0u);
}

TEST(Values, BadSizesSayWhy) {
  auto why = [](const std::string& text) {
    try {
      parse_size(text);
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_NE(why("-5").find("negative"), std::string::npos);
  EXPECT_NE(why("0").find("must be positive"), std::string::npos);
  EXPECT_NE(why("12Q").find("unknown unit"), std::string::npos);
  EXPECT_NE(why("1.5").find("not a whole number"), std::string::npos);
  EXPECT_NE(why("abc").find("not a size"), std::string::npos);
  EXPECT_NE(why("2^80").find("too large"), std::string::npos);
  EXPECT_NE(why("99999999999999999999").find("too large"), std::string::npos);
  EXPECT_THROW(parse_integer("12x"), InputError);
  EXPECT_THROW(parse_number("nan"), InputError);
  EXPECT_THROW(parse_bool("maybe"), InputError);
  EXPECT_TRUE(parse_bool("Yes"));
  EXPECT_FALSE(parse_bool("off"));
}

TEST(Values, ListsGroupWithParentheses) {
  EXPECT_EQ(split_list("1M, 2M ,4M"), (std::vector<std::string>{"1M", "2M", "4M"}));
  EXPECT_EQ(split_list("(4,8), (4)"), (std::vector<std::string>{"4,8", "4"}));
  EXPECT_TRUE(split_list("  ").empty());
  EXPECT_THROW(split_list("1,,2"), InputError);
  EXPECT_THROW(split_list("(4,8"), InputError);
  EXPECT_EQ(format_count(1u << 24), "2^24");
  EXPECT_EQ(format_count(16000000), "16M");
  EXPECT_EQ(format_count(1000), "1000");
}

// --- launched by mpirun: what the environment says (every build reads it) ----------------------

// The launcher's variables of one test, removed again afterwards (this process may itself run
// under a launcher: its own values come back).
class LaunchEnv {
 public:
  LaunchEnv(std::initializer_list<std::pair<const char*, const char*>> vars) {
    for (const char* name : {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_UNIVERSE_SIZE", "PMIX_RANK",
                             "PMI_RANK", "PMI_SIZE"}) {
      const char* v = std::getenv(name);
      saved_.emplace_back(name, v ? std::optional<std::string>(v) : std::nullopt);
      ::unsetenv(name);
    }
    for (auto& [name, value] : vars) ::setenv(name, value, 1);
  }
  ~LaunchEnv() {
    for (auto& [name, value] : saved_) value ? (void)::setenv(name.c_str(), value->c_str(), 1) : (void)::unsetenv(name.c_str());
  }

 private:
  std::vector<std::pair<std::string, std::optional<std::string>>> saved_;
};

TEST(Launcher, ABuildWithoutMpiRefusesToBeOneOfSeveralProcesses) {
  {
    LaunchEnv none({});
    EXPECT_FALSE(launched_by_mpi());
    EXPECT_EQ(launched_size(), 1);
    EXPECT_NO_THROW(refuse_launch_without_mpi());
  }
  {
    LaunchEnv alone({{"OMPI_COMM_WORLD_SIZE", "1"}, {"OMPI_COMM_WORLD_RANK", "0"}});
    EXPECT_TRUE(launched_by_mpi());
    EXPECT_NO_THROW(refuse_launch_without_mpi());  // mpirun -np 1: one process runs the job, as without it
  }
  for (auto vars : {std::vector<std::pair<const char*, const char*>>{{"OMPI_COMM_WORLD_SIZE", "4"}, {"OMPI_COMM_WORLD_RANK", "2"}},
                    std::vector<std::pair<const char*, const char*>>{{"PMI_SIZE", "3"}, {"PMI_RANK", "0"}},
                    std::vector<std::pair<const char*, const char*>>{{"PMIX_RANK", "1"}}}) {
    LaunchEnv launched({});
    for (auto& [name, value] : vars) ::setenv(name, value, 1);
    EXPECT_TRUE(launched_by_mpi());
    try {
      refuse_launch_without_mpi();
      ADD_FAILURE() << "a launch of several processes was accepted: " << vars.front().first;
    } catch (const InputError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("built without MPI"), std::string::npos) << what;
      EXPECT_NE(what.find("scripts/install-deps.sh"), std::string::npos) << what;
      EXPECT_NE(what.find(std::string(vars.front().first) + "=" + vars.front().second), std::string::npos) << what;
    }
  }
}

// --- planning: keys, sweeps, overrides ---------------------------------------------------------

TEST_F(CliTest, PlanReadsEveryKind) {
  auto plan = plan_experiment(experiment(
      "seed = 7\n"
      "r.key_bytes = 8\n"
      "s.key_bytes = 8\n"
      "s.payload_bytes = 4,8\n"
      "s.zipf_z = 0.5\n"
      "s.match_rate = 0.25\n"
      "[cluster]\n"
      "gpus_per_node = 2\n"
      "threads = 3\n"
      "device_memory = 1Gi\n"
      "[strategy]\n"
      "fanout = 2^6\n"));  // integer options take sizes too
  ASSERT_EQ(plan.points.size(), 1u);
  const RunPoint& p = plan.points[0].run;
  EXPECT_EQ(plan.name, "exp");
  EXPECT_EQ(p.name, "exp");
  EXPECT_EQ(p.strategy, "scripted");
  EXPECT_EQ(p.workload.r.rows, 1000u);
  EXPECT_EQ(p.workload.s.rows, 2000u);
  EXPECT_EQ(p.workload.r.key_bytes, 8);
  EXPECT_EQ(p.workload.s.payload_bytes, (std::vector<uint8_t>{4, 8}));
  EXPECT_EQ(p.workload.r.payload_bytes, (std::vector<uint8_t>{4}));
  EXPECT_EQ(p.workload.s.dist, KeyDist::ForeignKey);
  EXPECT_EQ(p.workload.r.dist, KeyDist::UniqueDense);
  EXPECT_DOUBLE_EQ(p.workload.s.zipf_z, 0.5);
  EXPECT_DOUBLE_EQ(p.workload.s.match_rate, 0.25);
  EXPECT_EQ(p.workload.r.seed, 7u);
  EXPECT_EQ(p.workload.s.seed, 7u);
  EXPECT_EQ(p.workload.s.name, "S");
  EXPECT_EQ(p.cluster.shape.size(), 2);
  EXPECT_EQ(p.cluster.threads_per_rank, 3);
  EXPECT_EQ(p.cluster.device_memory, 1ull << 30);
  EXPECT_EQ(p.strategy_options.at("fanout"), "64");
  EXPECT_TRUE(p.verify);
}

TEST_F(CliTest, SweepIsTheCartesianProductInFileOrder) {
  auto plan = plan_experiment(experiment(
      "[sweep]\n"
      "workload.s.zipf_z = 0, 1\n"
      "strategy.fanout = 8, 16, 32\n"));
  ASSERT_EQ(plan.points.size(), 6u);
  EXPECT_EQ(plan.swept_keys, (std::vector<std::string>{"workload.s.zipf_z", "strategy.fanout"}));
  std::vector<std::string> labels;
  for (auto& pp : plan.points) labels.push_back(pp.label());
  EXPECT_EQ(labels.front(), "workload.s.zipf_z=0 strategy.fanout=8");
  EXPECT_EQ(labels[1], "workload.s.zipf_z=0 strategy.fanout=16");
  EXPECT_EQ(labels[3], "workload.s.zipf_z=1 strategy.fanout=8");
  EXPECT_DOUBLE_EQ(plan.points[4].run.workload.s.zipf_z, 1.0);
  EXPECT_EQ(plan.points[4].run.strategy_options.at("fanout"), "16");
}

TEST_F(CliTest, OverridesReplaceValuesAndSweeps) {
  std::string file = experiment("[sweep]\nworkload.r.rows = 1000, 2000\n");
  auto plan = plan_experiment(file, {{"workload.r.rows", "2^12"}, {"sweep.workload.s.rows", "1K,2K,3K"},
                                     {"experiment.repeat", "3"}});
  ASSERT_EQ(plan.points.size(), 3u);  // the r.rows sweep is replaced by the fixed value
  for (auto& pp : plan.points) {
    EXPECT_EQ(pp.run.workload.r.rows, 4096u);
    EXPECT_EQ(pp.run.repeat, 3);
  }
  EXPECT_EQ(plan.points[2].run.workload.s.rows, 3000u);
}

TEST_F(CliTest, WorkloadShorthandsSetBothSidesAndSideKeysWin) {
  auto plan = plan_experiment(write("short.ini",
                                    "[experiment]\nstrategy = scripted\nbackend = scripted\n"
                                    "[workload]\nrows = 2^10\nkey_bytes = 8\ns.rows = 3000\n"));
  const RunPoint& p = plan.points[0].run;
  EXPECT_EQ(p.workload.r.rows, 1024u);
  EXPECT_EQ(p.workload.s.rows, 3000u);
  EXPECT_EQ(p.workload.r.key_bytes, 8);
  EXPECT_EQ(p.workload.s.key_bytes, 8);
}

TEST_F(CliTest, ShorthandOnTheCommandLineBeatsSideKeysOfTheFile) {
  auto plan = plan_experiment(experiment(), {{"workload.rows", "64"}, {"workload.s.rows", "128"}});
  EXPECT_EQ(plan.points[0].run.workload.r.rows, 64u);   // file's r.rows = 1000 overridden
  EXPECT_EQ(plan.points[0].run.workload.s.rows, 128u);  // a later side override still wins
}

TEST_F(CliTest, RowsPerRankScaleWithTheRanks) {
  auto plan = plan_experiment(write("weak.ini",
                                    "[experiment]\nstrategy = scripted\nbackend = scripted\n"
                                    "[cluster]\nnodes = 2\n"
                                    "[workload]\nrows_per_rank = 2^10\ns.rows = 3000\n"
                                    "[sweep]\ncluster.gpus_per_node = 1, 2\n"));
  ASSERT_EQ(plan.points.size(), 2u);
  EXPECT_EQ(plan.points[0].run.workload.r.rows, 2u * 1024u);  // 2 nodes x 1
  EXPECT_EQ(plan.points[1].run.workload.r.rows, 4u * 1024u);  // 2 nodes x 2
  EXPECT_EQ(plan.points[1].run.workload.s.rows, 3000u);       // the side's own key wins
  // On the command line a total replaces the file's per-rank size, and the other way round.
  auto total = plan_experiment(write("weak2.ini", "[experiment]\nstrategy = scripted\nbackend = scripted\n"
                                                  "[workload]\nrows_per_rank = 100\n"),
                               {{"workload.rows", "64"}});
  EXPECT_EQ(total.points[0].run.workload.r.rows, 64u);
  EXPECT_EQ(total.points[0].run.workload.s.rows, 64u);
}

TEST_F(CliTest, RejectsRowsAndRowsPerRankTogether) {
  std::string f = write("both.ini", "[experiment]\nstrategy = scripted\nbackend = scripted\n"
                                    "[workload]\nr.rows = 100\nr.rows_per_rank = 10\ns.rows = 100\n");
  expect_rejected(cli({"run", f}), {"workload.r.rows_per_rank = 10", "not both"});
}

TEST_F(CliTest, PayloadListsCanBeSwept) {
  auto plan = plan_experiment(experiment("[sweep]\nworkload.payload_bytes = (4), (4,8)\n"));
  ASSERT_EQ(plan.points.size(), 2u);
  EXPECT_EQ(plan.points[1].run.workload.r.payload_bytes, (std::vector<uint8_t>{4, 8}));
}

TEST_F(CliTest, CommandLineFormsOfOverrides) {
  RunArgs a = parse_run_args({"x.ini", "--backend", "sim", "--workload.r.rows=5", "--cluster.nodes", "2", "--dry-run"});
  EXPECT_EQ(a.file, "x.ini");
  EXPECT_TRUE(a.dry_run);
  ASSERT_EQ(a.overrides.size(), 3u);
  EXPECT_EQ(a.overrides[0].key, "experiment.backend");
  EXPECT_EQ(a.overrides[0].value, "sim");
  EXPECT_EQ(a.overrides[1].value, "5");
  EXPECT_EQ(a.overrides[2].key, "cluster.nodes");
  EXPECT_THROW(parse_run_args({"x.ini", "--cluster.nodes"}), InputError);
  EXPECT_THROW(parse_run_args({"x.ini", "y.ini"}), InputError);
  EXPECT_THROW(parse_run_args({"x.ini", "--verbose"}), InputError);
}

TEST_F(CliTest, DryRunListsPointsAndRunsNothing) {
  auto r = cli({"run", experiment("[sweep]\nworkload.r.rows = 1K, 2K\n"), "--dry-run"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("2 run points, all valid"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("workload.r.rows=2K"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(dir_ / "out"));
}

// --- bad input: one test each ------------------------------------------------------------------

TEST_F(CliTest, RejectsUnknownKey) {
  std::string f = experiment("s.zipf = 1.2\n");
  expect_rejected(cli({"run", f}), {f + ":10", "unknown key 'workload.s.zipf'", "'1.2'", "did you mean 'workload.s.zipf_z'"});
}

TEST_F(CliTest, RejectsUnknownSection) {
  std::string f = experiment("[machine]\ngpus = 8\n");
  expect_rejected(cli({"run", f}), {f + ":11", "unknown key 'machine.gpus'", "'8'"});
}

TEST_F(CliTest, RejectsWrongType) {
  std::string f = experiment("[cluster]\nnodes = two\n");
  expect_rejected(cli({"run", f}), {f + ":11", "cluster.nodes = two", "not an integer"});
}

TEST_F(CliTest, RejectsNegativeSize) {
  std::string f = experiment("", "neg.ini");
  std::string text = read(f);
  text.replace(text.find("r.rows = 1000"), 13, "r.rows = -16M");
  write("neg.ini", text);
  expect_rejected(cli({"run", f}), {f + ":8", "workload.r.rows = -16M", "negative size"});
}

TEST_F(CliTest, RejectsZeroSize) {
  std::string f = experiment("[cluster]\ndevice_memory = 0\n");
  expect_rejected(cli({"run", f}), {f + ":11", "cluster.device_memory = 0", "must be positive"});
}

TEST_F(CliTest, RejectsBadKeyWidth) {
  std::string f = experiment("r.key_bytes = 260\n");
  expect_rejected(cli({"run", f}), {f + ":10", "workload.r.key_bytes = 260", "4 or 8"});
}

TEST_F(CliTest, RejectsUnknownStrategy) {
  std::string f = write("s.ini", "[experiment]\nstrategy = hashjoin\n[workload]\nrows = 1000\n");
  expect_rejected(cli({"run", f}), {f + ":2", "experiment.strategy = hashjoin", "unknown strategy 'hashjoin'", "scripted"});
}

TEST_F(CliTest, RejectsUnknownBackend) {
  std::string f = experiment();
  expect_rejected(cli({"run", f, "--backend", "fpga"}),
                  {"command line (--experiment.backend=fpga)", "unknown backend 'fpga'", "scripted"});
}

TEST_F(CliTest, SimulationsVerifyTheirCount) {
  // The sim backend has no data to checksum: verify (on by default) checks the count alone.
  auto backends = backend_names();
  if (std::find(backends.begin(), backends.end(), "sim") == backends.end()) GTEST_SKIP() << "no sim backend";
  auto plan = plan_experiment(experiment(), {{"experiment.backend", "sim"}});
  ASSERT_EQ(plan.points.size(), 1u);
  EXPECT_TRUE(plan.points[0].run.verify);
}

TEST_F(CliTest, RejectsMissingFile) {
  std::string f = (dir_ / "missing.ini").string();
  expect_rejected(cli({"run", f}), {"cannot read experiment file '" + f + "'", "No such file"});
}

TEST_F(CliTest, RejectsUnreadableFile) {
  // A folder in place of a file (permission bits do not stop root, which CI may be).
  fs::create_directories(dir_ / "folder.ini");
  std::string f = (dir_ / "folder.ini").string();
  expect_rejected(cli({"run", f}), {"cannot read experiment file '" + f + "'", "not a regular file"});
}

TEST_F(CliTest, RejectsEmptySweepList) {
  std::string f = experiment("[sweep]\nworkload.s.zipf_z =\n");
  expect_rejected(cli({"run", f}), {f + ":11", "workload.s.zipf_z", "empty list"});
}

TEST_F(CliTest, RejectsMatchRateOutsideUnitInterval) {
  std::string f = experiment("s.match_rate = 1.5\n");
  expect_rejected(cli({"run", f}), {f + ":10", "workload.s.match_rate = 1.5", "[0, 1]"});
}

TEST_F(CliTest, RejectsZipfExponentOutsideRange) {
  std::string f = experiment("s.dist = zipf\ns.zipf_z = 2.5\n");
  expect_rejected(cli({"run", f}), {f + ":11", "workload.s.zipf_z = 2.5", "[0, 2]"});
}

TEST_F(CliTest, RejectsBadOverrideValue) {
  expect_rejected(cli({"run", experiment(), "--workload.s.rows=lots"}),
                  {"command line (--workload.s.rows=lots)", "workload.s.rows = lots", "not a size"});
}

TEST_F(CliTest, RejectsUnknownStrategyOption) {
  std::string f = experiment("[strategy]\nfanuot = 4\n");
  expect_rejected(cli({"run", f}), {f + ":11", "strategy.fanuot = 4", "has no option 'fanuot'", "fanout"});
}

TEST_F(CliTest, RejectsBadStrategyOptionValue) {
  std::string f = experiment("[strategy]\ncorrupt = false\nfanout = many\n");
  expect_rejected(cli({"run", f}), {f + ":12", "strategy.fanout = many"});
}

TEST_F(CliTest, RejectsTooManyRanks) {
  std::string f = experiment("[cluster]\nnodes = 2\ngpus_per_node = 4\n");
  expect_rejected(cli({"run", f}), {f + ":12", "runs on 1..4 ranks", "2 nodes x 4 = 8 ranks"});
}

TEST_F(CliTest, RejectsMalformedLineAndRepeatedKey) {
  std::string f = experiment("s.rows 5\n");
  expect_rejected(cli({"run", f}), {f + ":10", "'s.rows 5'"});
  std::string g = experiment("r.rows = 5\n", "twice.ini");
  expect_rejected(cli({"run", g}), {g + ":10", "workload.r.rows is set again (first at line 8)"});
}

TEST_F(CliTest, RejectsMissingRequiredKeys) {
  std::string f = write("nostrat.ini", "[workload]\nrows = 10\n");
  expect_rejected(cli({"run", f}), {f, "experiment.strategy is not set"});
  std::string g = write("norows.ini", "[experiment]\nstrategy = scripted\nbackend = scripted\n[workload]\nr.rows = 10\n");
  expect_rejected(cli({"run", g}), {g, "workload.s.rows is not set"});
}

TEST_F(CliTest, TpchRelationsTakeTheirRowsFromTheScaleFactor) {
  const std::string head = "[experiment]\nstrategy = scripted\nbackend = scripted\n[workload]\n";
  const std::string tpch = "r.dist = tpch_orders\ns.dist = tpch_lineitem\n";
  const ExperimentPlan plan = plan_experiment(write("tpch.ini", head + tpch + "scale_factor = 0.01\n"));
  ASSERT_EQ(plan.points.size(), 1u);
  RelationSpec orders = plan.points[0].run.workload.r;
  EXPECT_EQ(orders.rows, tpch::orders_at(0.01));
  EXPECT_EQ(plan.points[0].run.workload.s.rows, tpch::lineitem_index(orders.rows).rows);

  std::string f = write("nosf.ini", head + tpch);
  expect_rejected(cli({"run", f}), {f, "workload.scale_factor is not set", "tpch_orders takes its rows from it"});
  f = write("zerosf.ini", head + tpch + "scale_factor = 0\n");
  expect_rejected(cli({"run", f}), {f + ":7", "workload.scale_factor = 0", "must be positive"});
  f = write("fractionsf.ini", head + tpch + "scale_factor = 1e-7\n");
  expect_rejected(cli({"run", f}), {f + ":7", "workload.scale_factor = 1e-7", "a whole number"});
  f = experiment("r.dist = tpch_orders\ns.dist = tpch_lineitem\nscale_factor = 1\n");
  expect_rejected(cli({"run", f}), {f + ":8", "workload.r.rows = 1000", "takes its rows from workload.scale_factor"});
  f = write("pairing.ini", head + "r.dist = tpch_orders\nscale_factor = 0.01\n");
  expect_rejected(cli({"run", f}), {f, "workload.s.dist (default fk)", "R is tpch_orders", "tpch_lineitem"});
}

// Weak scaling over TPC-H: the scale factor is scale_factor_per_rank x ranks at every point.
TEST_F(CliTest, TpchScaleFactorPerRankGrowsWithTheRanks) {
  const std::string head = "[experiment]\nstrategy = scripted\nbackend = scripted\n[workload]\n";
  const std::string tpch = "r.dist = tpch_orders\ns.dist = tpch_lineitem\n";
  const ExperimentPlan plan = plan_experiment(
      write("weak.ini", head + tpch + "scale_factor_per_rank = 0.01\n[sweep]\ncluster.nodes = 1, 4\n"));
  ASSERT_EQ(plan.points.size(), 2u);
  EXPECT_EQ(plan.points[0].run.workload.r.rows, tpch::orders_at(0.01));
  EXPECT_EQ(plan.points[1].run.workload.r.rows, tpch::orders_at(0.04));
  EXPECT_EQ(plan.points[1].run.workload.s.rows, tpch::lineitem_rows(tpch::orders_at(0.04)));
  std::string f = write("both.ini", head + tpch + "scale_factor = 1\nscale_factor_per_rank = 0.5\n");
  expect_rejected(cli({"run", f}), {f + ":8", "workload.scale_factor_per_rank = 0.5", "not both"});
  f = write("negative.ini", head + tpch + "scale_factor_per_rank = -1\n");
  expect_rejected(cli({"run", f}), {f + ":7", "workload.scale_factor_per_rank = -1", "must be positive"});
  f = write("toolarge.ini", head + tpch + "scale_factor_per_rank = 60000\n[cluster]\nnodes = 2\n");
  expect_rejected(cli({"run", f}), {f + ":7", "x 2 ranks = scale factor 120000", "largest scale factor"});
}

TEST_F(CliTest, ValidatesEverySweepPointBeforeRunningAny) {
  std::string f = experiment("s.dist = zipf\n[sweep]\nworkload.s.zipf_z = 0.5, 1, 3\n");
  expect_rejected(cli({"run", f}), {f + ":12 ([sweep])", "workload.s.zipf_z = 3", "[0, 2]", "sweep point 3 of 3"});
  EXPECT_FALSE(fs::exists(dir_ / "out" / "exp-scripted.csv")) << "a point ran before the sweep was validated";
}

TEST_F(CliTest, RejectsAWorkingSetBeyondDeviceMemoryBeforeRunningAny) {
  std::string f = experiment("[cluster]\ndevice_memory = 64Ki\n[sweep]\nworkload.s.rows = 1000, 10000\n");
  expect_rejected(cli({"run", f}), {f + ": ", "needs about", "sweep point 2 of 2"});
  EXPECT_FALSE(fs::exists(dir_ / "out" / "exp-scripted.csv")) << "a point ran before the sweep was validated";
}

// --- runs and their outputs --------------------------------------------------------------------

TEST_F(CliTest, RunPrintsTableWritesCsvAndTrace) {
  std::string f = experiment("[cluster]\ngpus_per_node = 2\n[strategy]\nfanout = 32\n");
  auto r = cli({"run", f, "--experiment.repeat=3"});
  ASSERT_EQ(r.code, 0) << r.err;

  // Table: header, rule, one row. Total 4 s (generate left out), bound 1 s = 25%.
  std::istringstream table(r.out);
  std::string header, rule, row, extra;
  std::getline(table, header);
  std::getline(table, rule);
  std::getline(table, row);
  EXPECT_FALSE(std::getline(table, extra)) << r.out;
  for (const char* col : {"strategy", "backend", "ranks", "|R|", "|S|", "total ms", "M tuples/s", "bound ms",
                          "of bound", "matches", "verified"})
    EXPECT_NE(header.find(col), std::string::npos) << header;
  std::istringstream cells(row);
  std::vector<std::string> c{std::istream_iterator<std::string>(cells), {}};
  ASSERT_EQ(c.size(), 11u) << row;
  EXPECT_EQ(c[0], "scripted");
  EXPECT_EQ(c[2], "2");
  EXPECT_EQ(c[3], "1000");
  EXPECT_EQ(c[4], "2000");
  EXPECT_EQ(c[5], "4000.000");
  EXPECT_EQ(c[6], "0.0");  // 3000 tuples in 4 s
  EXPECT_EQ(c[7], "1000.000");
  EXPECT_EQ(c[8], "25.0%");
  EXPECT_EQ(c[9], "2000");  // every S row matches its R key
  EXPECT_EQ(c[10], "yes");

  // CSV: one row, the phase columns, the total without generate, bound and verification.
  std::string csv = read((dir_ / "out" / "exp-scripted.csv").string());
  std::istringstream lines(csv);
  std::string head, values;
  std::getline(lines, head);
  std::getline(lines, values);
  auto split = [](const std::string& s) {
    std::vector<std::string> v;
    std::stringstream in(s);
    std::string cell;
    while (std::getline(in, cell, ',')) v.push_back(cell);
    return v;
  };
  auto h = split(head), v = split(values);
  ASSERT_EQ(h.size(), v.size()) << csv;
  auto col = [&](const std::string& name) {
    auto it = std::find(h.begin(), h.end(), name);
    EXPECT_NE(it, h.end()) << "no column " << name;
    return it == h.end() ? std::string() : v[size_t(it - h.begin())];
  };
  EXPECT_EQ(col("experiment"), "exp");
  EXPECT_EQ(col("strategy"), "scripted");
  EXPECT_EQ(col("ranks"), "2");
  EXPECT_EQ(col("r_rows"), "1000");
  EXPECT_EQ(col("s_dist"), "fk");
  EXPECT_EQ(col("strategy_options"), "fanout=32");
  EXPECT_EQ(col("phase_generate_s"), "5");
  EXPECT_EQ(col("phase_build_s"), "1");
  EXPECT_EQ(col("phase_probe_s"), "3");  // max over ranks
  EXPECT_EQ(col("total_s"), "4");
  EXPECT_EQ(col("repeat_total_s"), "4;4;4");
  EXPECT_EQ(col("bound_s"), "1");
  EXPECT_EQ(col("bound_resource"), "scripted resource");
  EXPECT_EQ(col("fraction_of_bound"), "0.25");
  EXPECT_EQ(col("count"), "2000");
  EXPECT_EQ(col("checksum").substr(0, 2), "0x");
  EXPECT_NE(col("verified").find("closed form"), std::string::npos);
  EXPECT_FALSE(col("date").empty());
  EXPECT_FALSE(col("git_commit").empty());
  EXPECT_EQ(col("trace_file"), (dir_ / "out" / "exp-scripted.trace.json").string());

  // Trace: valid JSON; a process per rank; phase track plus one per recorded track.
  boost::property_tree::ptree trace;
  ASSERT_NO_THROW(boost::property_tree::read_json((dir_ / "out" / "exp-scripted.trace.json").string(), trace));
  std::set<std::string> processes, threads;
  int phases = 0, ops = 0;
  for (auto& [_, e] : trace.get_child("traceEvents")) {
    std::string ph = e.get<std::string>("ph"), name = e.get<std::string>("name");
    if (ph == "M" && name == "process_name") processes.insert(e.get<std::string>("args.name"));
    if (ph == "M" && name == "thread_name")
      threads.insert(e.get<std::string>("pid") + "/" + e.get<std::string>("args.name"));
    if (ph == "X" && e.get<std::string>("cat") == "phase") ++phases;
    if (ph == "X" && e.get<std::string>("cat") != "phase") {
      ++ops;
      EXPECT_EQ(e.get<int>("args.rows_in"), 1000);
      EXPECT_EQ(e.get<std::string>("args.detail"), "scripted \"op\"");
    }
    if (ph == "X" && name == "generate") {
      EXPECT_DOUBLE_EQ(e.get<double>("ts"), 0.0);
    }
    if (ph == "X" && name == "probe" && e.get<std::string>("cat") == "phase" && e.get<int>("pid") == 1) {
      EXPECT_DOUBLE_EQ(e.get<double>("dur"), 3e6);
    }
  }
  EXPECT_EQ(processes, (std::set<std::string>{"rank 0 (node 0, local 0)", "rank 1 (node 0, local 1)"}));
  EXPECT_EQ(threads, (std::set<std::string>{"0/phases", "0/copy", "0/stream 0", "0/stream 1", "1/phases", "1/copy",
                                            "1/stream 0", "1/stream 1"}));
  EXPECT_EQ(phases, 2 * 3);
  EXPECT_EQ(ops, 2 * 3);
}

TEST_F(CliTest, SweepRunsEveryPointIntoOneCsvAndATraceEach) {
  auto r = cli({"run", experiment("[sweep]\nworkload.s.rows = 1000, 3000\n")});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("workload.s.rows=3000"), std::string::npos) << r.out;
  std::string csv = read((dir_ / "out" / "exp-scripted.csv").string());
  EXPECT_EQ(std::count(csv.begin(), csv.end(), '\n'), 3) << csv;
  EXPECT_TRUE(fs::exists(dir_ / "out" / "exp-scripted-1.trace.json"));
  EXPECT_TRUE(fs::exists(dir_ / "out" / "exp-scripted-2.trace.json"));
}

TEST_F(CliTest, WrongResultFailsWithExitCode3AndNoRow) {
  auto r = cli({"run", experiment("[strategy]\ncorrupt = true\n")});
  EXPECT_EQ(r.code, kExitVerification) << r.err;
  EXPECT_NE(r.err.find("checksum"), std::string::npos) << r.err;
  EXPECT_EQ(r.out.find("scripted "), std::string::npos) << "a wrong result reached the table: " << r.out;
  EXPECT_FALSE(fs::exists(dir_ / "out" / "exp-scripted.csv"));
}

// The example experiments stay valid as strategies change their options. A file for a backend
// this build leaves out (sim without SimGrid), or one whose sizes need more host memory than this
// machine has (a GPU host's benchmark), is checked up to that point only.
TEST(Experiments, EveryExampleFileIsValid) {
  register_builtin();
  auto backends = backend_names();
  int checked = 0;
  for (auto& entry : fs::directory_iterator(fs::path(joinlab_root()) / "experiments")) {
    if (entry.path().extension() != ".ini") continue;
    try {
      auto plan = plan_experiment(entry.path().string());
      EXPECT_FALSE(plan.points.empty());
      ++checked;
    } catch (const InputError& e) {
      std::string msg = e.what();
      bool left_out = msg.find("unknown backend") != std::string::npos ||
                      msg.find("available per rank (MemAvailable") != std::string::npos;
      EXPECT_TRUE(left_out) << msg;
      if (left_out) std::cout << "[ note ] " << entry.path().filename() << ": " << msg << "\n";
    }
  }
  EXPECT_GE(checked, 7);  // default + one per strategy (npj, phj, smj, chunked, shuffle) + zipf sweep
}

// The papers' figures (experiments/papers/<paper>/*.ini, experiments/papers/README.md) plan as
// written, as `joinlab run FILE --dry-run` does (a TPC-H file at its scale factor: lineitem's size
// costs a walk of fewer than 2^24 orders at any).
TEST(Experiments, EveryPaperFileIsValid) {
  register_builtin();
  const fs::path root = fs::path(joinlab_root()) / "experiments" / "papers";
  std::map<std::string, int> files;  // paper -> files planned (or left out for a backend this build lacks)
  for (auto& entry : fs::recursive_directory_iterator(root)) {
    if (entry.path().extension() != ".ini") continue;
    const std::string paper = entry.path().parent_path().filename().string();
    try {
      auto plan = plan_experiment(entry.path().string(), {});
      EXPECT_FALSE(plan.points.empty()) << entry.path();
      ++files[paper];
    } catch (const InputError& e) {
      std::string msg = e.what();
      bool backend_left_out = msg.find("unknown backend") != std::string::npos;
      EXPECT_TRUE(backend_left_out) << entry.path() << ": " << msg;
      if (backend_left_out) {
        std::cout << "[ note ] " << entry.path().filename() << ": " << msg << "\n";
        ++files[paper];
      }
    }
  }
  EXPECT_GE(files["rui2017"], 6);
  EXPECT_GE(files["gao2021"], 6);
  EXPECT_GE(files["thostrup2023"], 16);
  EXPECT_GE(files["lutz2022"], 6);
  EXPECT_GE(files["maltenberger2025"], 18);
  EXPECT_EQ(files.size(), 5u)
      << "a folder other than rui2017, gao2021, thostrup2023, lutz2022, maltenberger2025 in experiments/papers";
}

// The README's main job, scaled down: real joins on the CPU backend, verified.
TEST_F(CliTest, DefaultExperimentRunsOnTheCpuBackend) {
  auto r = cli({"run", joinlab_root() + "/experiments/default.ini", "--workload.rows=2^12",
                "--experiment.output_dir=" + (dir_ / "out").string(), "--quiet"});
  ASSERT_EQ(r.code, 0) << r.err;
  for (const char* s : {"npj ", "phj ", "smj "}) {
    auto at = r.out.find(std::string("\n") + s);
    ASSERT_NE(at, std::string::npos) << r.out;
    std::string row = r.out.substr(at + 1, r.out.find('\n', at + 1) - at - 1);
    EXPECT_NE(row.find(" 4096  "), std::string::npos) << row;  // every S row matches
    EXPECT_NE(row.find(" yes "), std::string::npos) << row;
  }
  std::string csv = read((dir_ / "out" / "default-cpu.csv").string());
  EXPECT_EQ(std::count(csv.begin(), csv.end(), '\n'), 4) << csv;
  EXPECT_NE(csv.find("closed form"), std::string::npos) << csv;
}

// Four of the papers' small variants run as written on the cpu backend, verified: the
// repartitioned join on 2 and 4 ranks, TPC-H with both shuffles on 2 x 2 ranks, the hybrid
// join with partitions on the "GPU" and on the CPU, and the multi-GPU sort-merge join against the
// CPU radix join on 8 ranks (a few seconds in all).
TEST_F(CliTest, PaperSmallFilesRunOnTheCpuBackend) {
  const std::vector<std::pair<std::string, int>> files = {{"gao2021/weak-scaling-small", 2},
                                                          {"gao2021/tpch-small", 2},
                                                          {"thostrup2023/hybrid-small", 4},
                                                          {"maltenberger2025/fig1b-small", 2}};
  for (auto& [f, points] : files) {
    auto r = cli({"run", joinlab_root() + "/experiments/papers/" + f + ".ini",
                  "--experiment.output_dir=" + (dir_ / "out").string(), "--quiet"});
    ASSERT_EQ(r.code, 0) << f << ": " << r.err;  // a wrong join result exits with 3
    const std::string name = f.substr(f.find('/') + 1);
    std::string csv = read((dir_ / "out" / (name + "-cpu.csv")).string());
    EXPECT_EQ(std::count(csv.begin(), csv.end(), '\n'), points + 1) << csv;
  }
}

bool has_backend(const std::string& name) {
  auto b = backend_names();
  return std::find(b.begin(), b.end(), name) != b.end();
}

// A python3 with matplotlib, as reproduce looks for one (its plots need it).
bool can_plot() {
  return std::system("python3 -c 'import matplotlib' >/dev/null 2>&1") == 0 ||
         std::system("/usr/bin/python3 -c 'import matplotlib' >/dev/null 2>&1") == 0;
}

TEST_F(CliTest, ReproduceOneFigureWritesItsCsvPlotAndIndex) {
  const fs::path out = dir_ / "repro";
  auto r = cli({"reproduce", "gao2021/tpch", "--scale", "small", "--out", out.string(), "--quiet"});
  ASSERT_EQ(r.code, 0) << r.err;
  const std::string csv = read((out / "gao2021" / "tpch.csv").string());
  EXPECT_EQ(std::count(csv.begin(), csv.end(), '\n'), 3) << csv;  // header and two points
  EXPECT_NE(csv.find(",busiest_per_phase,"), std::string::npos) << csv;
  const std::string md = read((out / "index.md").string()), html = read((out / "index.html").string());
  for (const std::string* text : {&md, &html}) {
    EXPECT_NE(text->find("gao2021/tpch"), std::string::npos) << *text;
    EXPECT_NE(text->find("gao2021 Sec. 6: TPC-H orders x lineitem"), std::string::npos) << *text;  // [figure] title
    EXPECT_NE(text->find("device memory"), std::string::npos) << *text;  // the bound's resource
    EXPECT_NE(text->find("local_probe=compute"), std::string::npos) << *text;  // busiest resource per phase
    EXPECT_EQ(text->find("rui2017"), std::string::npos) << "a figure that was not asked for";
  }
  EXPECT_NE(md.find("| shuffle levels | series | total s |"), std::string::npos) << md;  // [figure] x_label
  EXPECT_NE(html.find("<table>"), std::string::npos) << html;
  if (can_plot()) {
    EXPECT_TRUE(fs::exists(out / "gao2021" / "tpch.png")) << read((out / "plots.log").string());
    EXPECT_NE(md.find("](gao2021/tpch.png)"), std::string::npos) << md;
    EXPECT_NE(html.find("<img src=\"gao2021/tpch.png\""), std::string::npos) << html;
  } else {
    std::cout << "[ note ] no python3 with matplotlib: the plot is not checked\n";
  }
}

// The cpu backend as a one-GPU machine would show it to reproduce.
struct OneGpuCpuBackend : Backend {
  std::unique_ptr<Backend> cpu = make_backend("cpu");
  std::string name() const override { return "cpu"; }
  void run(const BackendConfig& cfg, const std::function<void(Rank&)>& body,
           const std::function<void(Rank&)>& collect) override {
    cpu->run(cfg, body, collect);
  }
  int gpus() override { return 1; }
  int threads_per_rank(const BackendConfig& cfg) override { return cpu->threads_per_rank(cfg); }
  std::string launch() const override { return cpu->launch(); }
};

// On a GPU backend reproduce leaves out the points of more ranks than the machine has GPUs, runs
// the rest and says what it left out: of gao2021's small TPC-H weak scaling (1, 2 and 4 ranks)
// the 1-rank points run on one GPU.
TEST_F(CliTest, ReproduceOnAGpuBackendLeavesOutPointsOfMoreRanksThanGpus) {
  register_backend("one-gpu-cpu", [] { return std::make_unique<OneGpuCpuBackend>(); });
  const fs::path out = dir_ / "repro";
  auto r = cli({"reproduce", "gao2021/tpch-weak-scaling", "gao2021/one-vs-two-level", "--scale=small",
                "--backend=one-gpu-cpu", "--out=" + out.string(), "--quiet"});
  ASSERT_EQ(r.code, 0) << r.err;
  const std::string csv = read((out / "gao2021" / "tpch-weak-scaling.csv").string());
  const long points = std::count(csv.begin(), csv.end(), '\n') - 1;
  EXPECT_EQ(points, 3) << csv;  // one node of one rank, three compressions
  const std::string md = read((out / "index.md").string());
  EXPECT_NE(md.find("points not run here: needs more ranks than this machine's 1 GPU ("), std::string::npos) << md;
  EXPECT_NE(md.find("Not run here:\n\n- gao2021/one-vs-two-level: needs more ranks"), std::string::npos) << md;
  EXPECT_FALSE(fs::exists(out / "gao2021" / "one-vs-two-level.csv"));
}

TEST_F(CliTest, ReproduceWithoutMatplotlibWritesTheReportAndSaysPlotsWereSkipped) {
  const fs::path out = dir_ / "repro";
  ASSERT_EQ(::setenv("JOINLAB_PYTHON", (dir_ / "no-such-python").c_str(), 1), 0);
  auto r = cli({"reproduce", "thostrup2023/fig1b", "gao2021/tpch", "--scale=small", "--out=" + out.string()});
  ::unsetenv("JOINLAB_PYTHON");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("plots skipped: no python3 with matplotlib"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("thostrup2023/fig1b done; 2/4 points"), std::string::npos) << r.err;  // in the order asked
  EXPECT_NE(r.err.find("s left"), std::string::npos) << r.err;      // and the time left
  EXPECT_TRUE(fs::exists(out / "thostrup2023" / "fig1b.csv"));
  EXPECT_FALSE(fs::exists(out / "thostrup2023" / "fig1b.png"));
  EXPECT_NE(read((out / "index.md").string()).find("(plot skipped: no python3 with matplotlib"), std::string::npos);
  EXPECT_TRUE(fs::exists(out / "index.html"));
}

TEST_F(CliTest, ReproduceRejectsAnUnknownPaperOrFigureNamingWhatExists) {
  const std::string out = "--out=" + (dir_ / "repro").string();
  auto r = cli({"reproduce", "nosuch2099", out});
  expect_rejected(r, {"unknown paper 'nosuch2099'", "gao2021", "rui2017", "thostrup2023"});
  r = cli({"reproduce", "rui2017/fig99", out});
  expect_rejected(r, {"paper rui2017 has no figure 'fig99'", "fig6", "in-memory", "out-of-core"});
  r = cli({"reproduce", "--scale=medium", out});
  expect_rejected(r, {"--scale medium", "small or full"});
  EXPECT_FALSE(fs::exists(dir_ / "repro")) << "a rejected reproduce wrote output";
}

// Every figure draws: its [figure] axes and series fit the points of its full file and of its
// -small variant, which every figure has (--scale small is to run all of them in minutes).
TEST_F(CliTest, ReproduceDryRunChecksEveryFigureAtBothScales) {
  const fs::path root = fs::path(joinlab_root()) / "experiments" / "papers";
  long figures = 0;  // every paper's full files: one line each in the dry run
  for (auto& entry : fs::recursive_directory_iterator(root)) {
    const std::string stem = entry.path().stem().string();
    if (entry.path().extension() == ".ini" && !(stem.size() > 6 && stem.substr(stem.size() - 6) == "-small")) ++figures;
  }
  ASSERT_GT(figures, 20);
  for (const char* scale : {"full", "small"}) {
    auto r = cli({"reproduce", "--dry-run", std::string("--scale=") + scale});
    ASSERT_EQ(r.code, 0) << scale << ": " << r.err;
    EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), figures) << r.out;
    long small = 0;
    for (size_t at = 0; (at = r.out.find("-small.ini,", at)) != std::string::npos; ++at) ++small;
    EXPECT_EQ(small, std::string(scale) == "small" ? figures : 0) << r.out;
  }
  if (has_backend("cuda")) {  // on GPUs the small variants' ranks may share them (cluster.share_gpus)
    auto r = cli({"reproduce", "--dry-run", "--scale=small", "--backend=cuda"});
    EXPECT_EQ(r.code, 0) << r.err;
  }
  for (auto& entry : fs::recursive_directory_iterator(root)) {
    const std::string stem = entry.path().stem().string();
    if (entry.path().extension() != ".ini" || (stem.size() > 6 && stem.substr(stem.size() - 6) == "-small")) continue;
    EXPECT_TRUE(fs::exists(entry.path().parent_path() / (stem + "-small.ini"))) << entry.path();
    const auto figure = read_figure(entry.path().string());
    for (const char* key : {"title", "measures", "x", "y", "x_label", "y_label"})
      EXPECT_TRUE(figure.count(key)) << entry.path() << " has no [figure] " << key;
  }
}

TEST_F(CliTest, ConcurrentJoinsReportEachJoinAndTheMakespan) {
  const std::string file = write("conc.ini", "[experiment]\nstrategy = gpj\nbackend = cpu\noutput_dir = " +
                                                 (dir_ / "out").string() +
                                                 "\nconcurrent_joins = 2\n[cluster]\ngpus_per_node = 2\n"
                                                 "[workload]\nr.rows = 2^12\ns.rows = 2^14\n");
  auto r = cli({"run", file, "--quiet"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("joins ms "), std::string::npos) << "the table gives each join's time: " << r.out;
  const std::string csv = read((dir_ / "out" / "conc-cpu.csv").string());
  const std::string header = csv.substr(0, csv.find('\n'));
  EXPECT_NE(header.find(",concurrent_joins,"), std::string::npos) << header;
  EXPECT_NE(header.find(",total_s,join_s,"), std::string::npos) << header;
  EXPECT_NE(csv.find("2 joins, each: count and checksum"), std::string::npos) << csv;
  r = cli({"run", file, "--dry-run"});
  EXPECT_NE(r.out.find("2 joins at once"), std::string::npos) << r.out;
  r = cli({"run", file, "--dry-run", "--experiment.concurrent_joins=0"});
  expect_rejected(r, {"experiment.concurrent_joins", "0"});
}

TEST_F(CliTest, FigureSectionIsCheckedAndIgnoredByTheRun) {
  auto r = cli({"run", experiment("[figure]\ntitle = T\nx = workload.r.rows\nlogx = true\n"), "--dry-run"});
  EXPECT_EQ(r.code, 0) << r.err;
  r = cli({"run", experiment("[figure]\nxlabel = rows\n"), "--dry-run"});
  expect_rejected(r, {"exp.ini:11", "unknown key 'figure.xlabel'", "x_label"});
  r = cli({"run", experiment("[figure]\nlogy = maybe\n"), "--dry-run"});
  expect_rejected(r, {"exp.ini:11", "figure.logy = maybe"});
  r = cli({"run", experiment(), "--dry-run", "--figure.y_factor=-1"});
  expect_rejected(r, {"command line", "figure.y_factor = -1", "positive"});
}

TEST(PhaseLimits, TheBusiestResourceOfEachPhaseFromTheTrace) {
  // Rank 0: "shuffle" 0..10 s with the network busy 0..8 (two overlapping spans) and compute 1..3;
  // "join" 10..20 s with compute busy 10..19. Rank 1's shuffle keeps its nvlink busy 0..9.
  std::vector<std::vector<PhaseRecord>> phases = {
      {{"generate", -5, 0}, {"shuffle", 0, 10}, {"join", 10, 20}}, {{"shuffle", 0, 10}}};
  OpParams compute, send;
  compute.kind = OpKind::Probe;
  send.kind = OpKind::Send;
  std::vector<TraceSpan> trace = {{0, "link network", send, 0, 5},    {0, "link network", send, 4, 8},
                                  {0, "stream 0", send, 0, 8},        {0, "stream 0", compute, 1, 3},
                                  {0, "stream 1", compute, 10, 19},   {1, "link nvlink", send, 0, 9},
                                  {0, "stream 0", compute, -5, 0}};
  auto limits = phase_limits(trace, phases);
  ASSERT_EQ(limits.size(), 2u);  // generate is not timed
  EXPECT_EQ(limits[0].phase, "shuffle");
  EXPECT_EQ(limits[0].resource, "nvlink");  // 90% on rank 1 beats rank 0's network at 80%
  EXPECT_NEAR(limits[0].busy, 0.9, 1e-9);
  EXPECT_EQ(limits[1].resource, "compute");
  EXPECT_EQ(format_phase_limits(limits), "shuffle=nvlink 90%;join=compute 90%");
}

TEST_F(CliTest, CsvQuotesFieldsWithCommas) {
  RunOutcome o;
  o.point.strategy = "s";
  o.point.strategy_options = {{"a", "1"}, {"b", "x,y"}};
  o.bound = {2.0, "memory, 3 passes"};
  ResultRow row;
  row.outcome = o;
  std::string csv = csv_text({row});
  EXPECT_NE(csv.find("\"a=1;b=x,y\""), std::string::npos) << csv;
  EXPECT_NE(csv.find("\"memory, 3 passes\""), std::string::npos) << csv;
}

TEST(Progress, TickerReportsPointRepeatAndElapsed) {
  std::ostringstream err;
  {
    ProgressTicker ticker(err, true, std::chrono::milliseconds(20), std::chrono::milliseconds(20));
    ticker.point(1, 4, "workload.r.rows=2^20");
    ticker.repeat(2, 3);
    std::this_thread::sleep_for(std::chrono::milliseconds(120));
  }
  std::string text = err.str();
  EXPECT_NE(text.find("point 2/4, repeat 3/3, elapsed"), std::string::npos) << text;
  EXPECT_NE(text.find(": workload.r.rows=2^20\n"), std::string::npos) << text;
  EXPECT_NE(text.find("s left: "), std::string::npos) << text;  // one point done: an estimate of the rest
  std::ostringstream silent;
  { ProgressTicker off(silent, false, std::chrono::milliseconds(1), std::chrono::milliseconds(1)); }
  EXPECT_EQ(silent.str(), "");
}

TEST_F(CliTest, ListShowsStrategiesBackendsAndKeys) {
  auto r = cli({"list"});
  EXPECT_EQ(r.code, 0);
  EXPECT_NE(r.out.find("scripted"), std::string::npos);
  EXPECT_NE(r.out.find("[strategy] fanout (default 16): an integer option"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("backends"), std::string::npos);
  EXPECT_NE(r.out.find("profiles"), std::string::npos);
  EXPECT_NE(r.out.find("experiments"), std::string::npos);
  auto keys = cli({"list", "keys"});
  EXPECT_NE(keys.out.find("workload.s.match_rate"), std::string::npos);
  EXPECT_EQ(cli({"list", "everything"}).code, kExitInput);
}

TEST_F(CliTest, SubcommandUsageErrors) {
  // calibrate and validate are real commands (models/calibrate.cpp): bad arguments are input
  // errors that name what was wrong, before any measurement.
  auto cal = cli({"calibrate", "--bogus"});
  EXPECT_EQ(cal.code, kExitInput);
  EXPECT_NE(cal.err.find("bogus"), std::string::npos) << cal.err;
  auto val = cli({"validate", "missing-experiment.ini"});
  EXPECT_EQ(val.code, kExitInput);
  EXPECT_NE(val.err.find("missing-experiment.ini"), std::string::npos) << val.err;
  EXPECT_EQ(cli({}).code, kExitInput);
  EXPECT_EQ(cli({"frobnicate"}).code, kExitInput);
  EXPECT_EQ(cli({"help"}).code, 0);
  EXPECT_EQ(cli({"run"}).code, kExitInput);
}

// --- sizes, memory and scale checked before any work; the rough edges of run and list --------

// A small real join on the cpu backend, for checks the scripted backend cannot make.
std::string cpu_experiment_text(const std::string& out_dir) {
  return "[experiment]\nstrategy = npj\nbackend = cpu\noutput_dir = " + out_dir +
         "\n[workload]\nrows = 2^10\n";
}

TEST_F(CliTest, RowsPerRankTimesRanksThatOverflowIsAnError) {
  // 2^62 + 1 rows per rank x 4 ranks wraps to 4 rows in 64 bits: rejected, not run on 4 rows.
  auto r = cli({"run", experiment("[cluster]\ngpus_per_node = 4\n"), "--workload.rows_per_rank=4611686018427387905"});
  expect_rejected(r, {"workload.rows_per_rank = 4611686018427387905", "4 ranks overflows"});
  EXPECT_FALSE(fs::exists(dir_ / "out"));
}

TEST_F(CliTest, BytesOfARelationThatOverflowAreAnError) {
  auto r = cli({"run", experiment("key_bytes = 8\n"), "--workload.r.rows=2^62", "--workload.r.dist=unique_sparse"});
  expect_rejected(r, {"workload.r.rows", "bytes per row overflows 64 bits"});
}

TEST_F(CliTest, AJoinResultBeyondA64BitCountIsAnError) {
  // Every key in 1..2: about 2^40 x 2^40 / 2 matches.
  auto r = cli({"run", experiment("r.dist = uniform\nr.range_hi = 2\ns.dist = uniform\ns.range_hi = 2\n"
                                  "[experiment]\nverify = false\n"),
                "--workload.rows=2^40", "--dry-run"});
  expect_rejected(r, {"emits about", "more than a 64-bit count holds"});
  // Ranges that do not overlap: no match at all, nothing to overflow.
  auto disjoint = cli({"run", experiment("r.dist = uniform\nr.range_hi = 2\ns.dist = uniform\ns.range_lo = 3\n"
                                         "s.range_hi = 4\n[experiment]\nverify = false\n"),
                       "--workload.rows=2^40", "--dry-run"});
  EXPECT_EQ(disjoint.code, 0) << disjoint.err;
}

TEST_F(CliTest, CpuBackendChecksMemoryBeforeGeneratingData) {
  std::string f = write("big.ini", cpu_experiment_text((dir_ / "out").string()) + "key_bytes = 8\n");
  const auto t0 = std::chrono::steady_clock::now();
  auto r = cli({"run", f, "--workload.rows=2^40"});
  expect_rejected(r, {f + ": ", "needs about", "bytes", "memory available on this machine"});
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 5.0)
      << "the expected result or the data was computed before the check";
  EXPECT_FALSE(fs::exists(dir_ / "out"));
}

// A stand-in GPU backend for the memory checks: this much device and host memory per rank (0: not
// checked); it runs nothing.
struct StandInGpuBackend : Backend {
  uint64_t device_bytes = 0, host_bytes = 0;
  std::string name() const override { return "cuda"; }
  void run(const BackendConfig&, const std::function<void(Rank&)>&, const std::function<void(Rank&)>&) override {}
  uint64_t device_memory_per_rank(const BackendConfig&) override { return device_bytes; }
  uint64_t host_memory_per_rank(const BackendConfig&) override { return host_bytes; }
};

// The memory check refuses p on `backend` with an InputError saying every one of `says`.
void expect_memory_refused(const RunPoint& p, Backend& backend, const std::vector<std::string>& says,
                           const std::string& if_accepted) {
  try {
    check_device_memory(p, make_job(p), backend);
    ADD_FAILURE() << if_accepted;
  } catch (const InputError& e) {
    const std::string m = e.what();
    for (const std::string& s : says) EXPECT_NE(m.find(s), std::string::npos) << m;
  }
}

// A GPU backend checks the host memory of strategies that keep data there (chunked's S, gpj's
// senders, crj) before any work, as it checks device memory: a stand-in backend with 1 MiB of
// host memory per rank refuses chunked's 2^20 S rows and lets npj (all on the device) pass.
TEST_F(CliTest, GpuBackendsCheckTheHostMemoryOfStrategiesThatKeepDataThere) {
  StandInGpuBackend backend;
  backend.host_bytes = 1 << 20;
  std::string f = write("host.ini", cpu_experiment_text((dir_ / "out").string()));
  for (const std::string strategy : {"chunked", "npj"}) {
    const ExperimentPlan plan = plan_experiment(f, {{"experiment.strategy", strategy}, {"workload.rows", "2^20"}});
    const RunPoint& p = plan.points.front().run;
    if (strategy == "npj") {
      EXPECT_NO_THROW(check_device_memory(p, make_job(p), backend));
      continue;
    }
    expect_memory_refused(p, backend, {"strategy chunked keeps about", "in host memory per rank", "1048576 bytes"},
                          "chunked's S fits in 1 MiB of host memory?");
  }
}

// npj holds in device memory only what its spaces put there: with its table and its data pinned
// (lutz2022's baseline) 2^18 rows pass a GPU of 4 MiB, with its data on the device they do not.
TEST_F(CliTest, NpjCountsOnlyWhatItKeepsInDeviceMemory) {
  StandInGpuBackend backend;
  backend.device_bytes = 4 << 20;
  std::string f = write("npj.ini", cpu_experiment_text((dir_ / "out").string()));
  auto point_with = [&](const std::string& input_space) {
    return plan_experiment(f, {{"experiment.strategy", "npj"}, {"workload.rows", "2^18"}, {"cluster.device_memory", "4Mi"},
                               {"strategy.table_space", "pinned"}, {"strategy.input_space", input_space}})
        .points.front()
        .run;
  };
  const RunPoint pinned = point_with("pinned");
  EXPECT_NO_THROW(check_device_memory(pinned, make_job(pinned), backend));
  expect_memory_refused(point_with("device"), backend, {"strategy npj needs about"},
                        "2^18 rows of R and S fit in 4 MiB of device memory?");
}

// mgsmj keeps in pinned host memory what its plan keeps there: the slices alone where the runs
// stay on the GPUs (resident), the runs too in the paper's plan, and the merged relations with
// several chunksets (device memory too small for one).
TEST_F(CliTest, MgsmjCountsTheHostMemoryOfItsPlan) {
  StandInGpuBackend backend;
  const uint64_t slices = uint64_t(2) << 20 << 4;  // R and S of 2^20 rows of 16 bytes, one rank
  backend.host_bytes = slices + slices / 2;
  std::string f = write("mgsmj.ini", cpu_experiment_text((dir_ / "out").string()));
  auto point_with = [&](const std::string& resident, const std::string& device) {
    return plan_experiment(f, {{"experiment.strategy", "mgsmj"}, {"workload.rows", "2^20"}, {"workload.key_bytes", "8"},
                               {"workload.payload_bytes", "8"}, {"strategy.resident", resident}, {"cluster.device_memory", device}})
        .points.front()
        .run;
  };
  for (const std::string device : {"1Gi", "1Mi"}) {
    backend.device_bytes = device == "1Gi" ? uint64_t(1) << 30 : uint64_t(1) << 20;
    for (const std::string resident : {"auto", "off"}) {
      SCOPED_TRACE("resident = " + resident + ", device memory " + device);
      const RunPoint p = point_with(resident, device);
      if (resident == "auto" && device == "1Gi") {
        EXPECT_NO_THROW(check_device_memory(p, make_job(p), backend));
        continue;
      }
      expect_memory_refused(p, backend, {"strategy mgsmj keeps about"},
                            "the runs fit beside the slices in 1.5 times their bytes?");
    }
  }
}

TEST_F(CliTest, SimulatorRefusesRunsBeyondItsLimits) {
  if (!has_backend("sim")) GTEST_SKIP() << "no sim backend in this build";
  std::string f = write("sim.ini", "[experiment]\nstrategy = shuffle\nbackend = sim\noutput_dir = " +
                                       (dir_ / "out").string() + "\n[cluster]\nnodes = 125000\ngpus_per_node = 8\n"
                                       "[workload]\nrows = 2^30\n");
  auto r = cli({"run", f, "--dry-run"});
  expect_rejected(r, {f + ":", "cluster.nodes = 125000", "at most 16384 ranks", "MiB of memory"});
}

// The simulation runs in a child process: killing joinlab must not leave it running.
TEST_F(CliTest, KillingJoinlabEndsItsSimulationChild) {
  if (!has_backend("sim")) GTEST_SKIP() << "no sim backend in this build";
  const std::string pid_file = (dir_ / "child.pid").string();
  const pid_t joinlab = ::fork();
  ASSERT_GE(joinlab, 0);
  if (joinlab == 0) {  // stands in for joinlab: simulates a body that never ends
    BackendConfig cfg;
    cfg.profile_dir = profile_dir();
    try {
      make_backend("sim")->run(
          cfg,
          [&](Rank&) {
            std::ofstream(pid_file) << ::getpid() << "\n";
            for (;;) ::pause();
          },
          [](Rank&) {});
    } catch (...) {
    }
    ::_exit(0);
  }
  pid_t child = 0;
  for (int i = 0; i < 500 && !child; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    std::ifstream(pid_file) >> child;
  }
  ::kill(joinlab, SIGKILL);
  ::waitpid(joinlab, nullptr, 0);
  ASSERT_GT(child, 0) << "the simulation never started";
  auto running = [&] {  // a zombie (state Z) has ended: only its parent's wait is missing
    std::ifstream stat("/proc/" + std::to_string(child) + "/stat");
    std::string pid, comm, state;
    return stat >> pid >> comm >> state && state != "Z";
  };
  for (int i = 0; i < 200 && running(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_FALSE(running()) << "the simulation child " << child << " outlived joinlab";
  if (running()) ::kill(child, SIGKILL);
}

TEST_F(CliTest, EachBackendWritesItsOwnCsvAndTraces) {
  std::string f = write("both.ini", cpu_experiment_text((dir_ / "out").string()));
  ASSERT_EQ(cli({"run", f, "--quiet"}).code, 0);
  ASSERT_EQ(cli({"run", f, "--quiet", "--backend=scripted", "--experiment.strategy=scripted"}).code, 0);
  EXPECT_TRUE(fs::exists(dir_ / "out" / "both-cpu.csv"));
  EXPECT_TRUE(fs::exists(dir_ / "out" / "both-cpu.trace.json"));
  EXPECT_TRUE(fs::exists(dir_ / "out" / "both-scripted.csv"));
  EXPECT_NE(read((dir_ / "out" / "both-cpu.csv").string()).find(",npj,cpu,"), std::string::npos);
}

TEST_F(CliTest, StrategyOptionsApplyToTheStrategiesThatHaveThem) {
  // phj's options in [strategy], swept over npj and phj: npj runs without them.
  std::string f = write("two.ini", cpu_experiment_text((dir_ / "out").string()) + "[strategy]\nradix_bits = 4\n");
  auto plan = plan_experiment(f, {{"sweep.experiment.strategy", "npj,phj"}});
  ASSERT_EQ(plan.points.size(), 2u);
  EXPECT_EQ(plan.points[0].run.strategy_options.count("radix_bits"), 0u);
  EXPECT_EQ(plan.points[1].run.strategy_options.at("radix_bits"), "4");
  // A key no strategy of the experiment has is still an error, naming its line.
  std::string bad = write("bad.ini", cpu_experiment_text((dir_ / "out").string()) + "[strategy]\nbitz = 4\n");
  expect_rejected(cli({"run", bad, "--sweep.experiment.strategy=npj,phj"}),
                  {bad + ":8: strategy.bitz = 4", "nor has any other strategy of this experiment"});
}

TEST_F(CliTest, EverySubcommandHasItsOwnHelp) {
  auto run = cli({"run", "--help"});
  EXPECT_EQ(run.code, 0);
  EXPECT_NE(run.out.find("usage: joinlab run FILE"), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("--dry-run "), std::string::npos) << run.out;
  EXPECT_EQ(run.out.find("usage: joinlab list"), std::string::npos) << run.out;
  auto list = cli({"list", "-h"});
  EXPECT_NE(list.out.find("usage: joinlab list"), std::string::npos) << list.out;
  EXPECT_EQ(list.out.find("joinlab run"), std::string::npos) << list.out;
  EXPECT_NE(cli({"help", "validate"}).out.find("usage: joinlab validate"), std::string::npos);
}

TEST_F(CliTest, ListColumnsNeverTouchAndDefaultsReadAsWritten) {
  StrategyInfo info = find_strategy("scripted");
  info.name = "scripted-with-a-long-name";
  info.add_options = [](po::options_description& d) {
    d.add_options()("fill", po::value<double>()->default_value(0.9), "a fraction");
  };
  register_strategy(info);
  auto r = cli({"list", "strategies"});
  EXPECT_NE(r.out.find("scripted-with-a-long-name  "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("[strategy] fill (default 0.9): a fraction"), std::string::npos) << r.out;
  auto profiles = cli({"list", "profiles"});
  for (auto& name : profile_names())
    EXPECT_NE(profiles.out.find("  " + name + "  "), std::string::npos) << profiles.out;
}

class UnavailableBackend : public ScriptedBackend {
 public:
  std::string unavailable() override { return "no scripted hardware found"; }
};

TEST_F(CliTest, ListSaysWhichBackendsCannotRunHere) {
  register_backend("absent", [] { return std::make_unique<UnavailableBackend>(); });
  auto r = cli({"list", "backends"});
  EXPECT_NE(r.out.find("absent  (built in, but cannot run here: no scripted hardware found)"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("  scripted\n"), std::string::npos) << r.out;
}

TEST_F(CliTest, CsvNamesTheProfileLaunchAndThreadsThatWereUsed) {
  std::string f = write("t.ini", cpu_experiment_text((dir_ / "out").string()));
  auto r = cli({"run", f, "--quiet"});
  ASSERT_EQ(r.code, 0) << r.err;
  std::string csv = read((dir_ / "out" / "t-cpu.csv").string());
  const unsigned threads = std::max(1u, std::thread::hardware_concurrency());  // one rank: every core
  // nodes, per node, ranks, launch (ranks as threads of this process), threads
  EXPECT_NE(csv.find(",1,1,1,threads," + std::to_string(threads) + ","), std::string::npos) << csv;
  if (!has_backend("sim")) return;
  auto plan = plan_experiment(f, {{"experiment.backend", "sim"}, {"experiment.strategy", "shuffle"}});
  EXPECT_EQ(plan.points[0].run.cluster.profile, "h100");  // the simulator's default, named
  EXPECT_EQ(describe_hardware(plan.points[0].run), "simulated (profile h100)");
}

TEST_F(CliTest, GitCommitIsTheBuiltSourceNotTheCurrentDirectory) {
  const std::string commit = git_commit();
  EXPECT_TRUE(commit == "unknown" || commit.find_first_not_of("0123456789abcdef") >= 12) << commit;
  const auto cwd = fs::current_path();
  fs::current_path(dir_);  // no repository here
  EXPECT_EQ(git_commit(), commit);
  fs::current_path(cwd);
}

TEST_F(CliTest, QuietPrintsOnlyTheTable) {
  auto r = cli({"run", experiment(), "--quiet"});
  ASSERT_EQ(r.code, 0);
  EXPECT_EQ(r.err, "");
  EXPECT_NE(r.out.find("scripted"), std::string::npos);
}

TEST_F(CliTest, ClusterOptionErrorsNameFileAndLine) {
  std::string f = write("c.ini", cpu_experiment_text((dir_ / "out").string()) + "[cluster]\nstreams = many\n");
  expect_rejected(cli({"run", f}), {f + ":8: cluster.streams = many", "not a number"});
  std::string t = write("tr.ini", cpu_experiment_text((dir_ / "out").string()) + "[cluster]\ntransport = carrier_pigeon\n");
  expect_rejected(cli({"run", t, "--dry-run"}), {t + ":8: cluster.transport = carrier_pigeon"});
}

TEST_F(CliTest, KeysOfAnotherBackendAndGarbageProfilesAreErrors) {
  if (has_backend("sim")) {
    std::string f = write("k.ini", cpu_experiment_text((dir_ / "out").string()) + "[cluster]\nfabric = star\n");
    expect_rejected(cli({"run", f}), {f + ":8: cluster.fabric = star", "only the sim backend reads it"});
  }
  std::string garbage = write("garbage.ini", "this is not a profile\n\x01\x02\n");
  std::string g = write("g.ini", cpu_experiment_text((dir_ / "out").string()) + "[cluster]\nprofile = " + garbage + "\n");
  expect_rejected(cli({"run", g}), {g + ":8: cluster.profile = " + garbage, "expected 'key = value'"});
}

TEST_F(CliTest, ReadErrorsAreNotEmptyFiles) {
  auto r = cli({"run", "/proc/self/mem"});
  expect_rejected(r, {"cannot read experiment file '/proc/self/mem'", "Input/output error"});
}

TEST_F(CliTest, ByteOrderMarkIsSkippedAndNulBytesAreNamed) {
  std::string bom = write("bom.ini", "\xEF\xBB\xBF" + read(experiment()));
  EXPECT_EQ(cli({"run", bom, "--dry-run"}).code, 0);
  std::string nul = experiment("seed = 1\n");
  {
    std::ofstream out(nul, std::ios::app);
    out << "bad = x" << '\0' << "\n";
  }
  auto r = cli({"run", nul});
  expect_rejected(r, {nul + ":11: a NUL byte"});
  EXPECT_EQ(r.err.find('\0'), std::string::npos);
}

TEST_F(CliTest, MisspeltFlagIsAnUnknownOption) {
  auto r = cli({"run", experiment(), "--dry-runn"});
  expect_rejected(r, {"unknown option --dry-runn", "did you mean --dry-run?"});
  EXPECT_EQ(r.err.find("needs a value"), std::string::npos) << r.err;
}

TEST_F(CliTest, UniformWithoutRangeHiNamesRangeHi) {
  auto r = cli({"run", experiment("s.dist = uniform\n")});
  expect_rejected(r, {"workload.s.range_hi is not set", "dist = uniform"});
}

TEST_F(CliTest, DuplicateSweepValuesAreAnError) {
  auto r = cli({"run", experiment("[sweep]\nworkload.s.rows = 1000, 2000, 1000\n")});
  expect_rejected(r, {"([sweep])", "lists '1000' twice"});
}

// A full disk (here: a file size limit) leaves no truncated trace or CSV behind.
TEST_F(CliTest, AFailedWriteLeavesNoTruncatedFile) {
  const std::string path = (dir_ / "t.trace.json").string();
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::signal(SIGXFSZ, SIG_IGN);
    rlimit limit{512, 512};
    ::setrlimit(RLIMIT_FSIZE, &limit);
    RunOutcome o;
    o.rank_phases.resize(1);
    for (int i = 0; i < 100; ++i) o.rank_phases[0].push_back({"phase", double(i), double(i) + 1});
    try {
      write_chrome_trace_file(path, o, "title");
    } catch (const RuntimeError& e) {
      ::_exit(std::string(e.what()).find("File too large") != std::string::npos ? 3 : 4);
    }
    ::_exit(0);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  EXPECT_EQ(WEXITSTATUS(status), 3) << "the failed write was not reported";
  EXPECT_FALSE(fs::exists(path));
  EXPECT_FALSE(fs::exists(path + ".partial"));
}

// --- what-ifs: profile keys; weak and strong scaling in one run -------------------------------

// The cells of a CSV column (quoted fields as csv_text writes them), one per row.
std::vector<std::string> csv_column(const std::string& csv, const std::string& name) {
  auto cells = [](const std::string& line) {
    std::vector<std::string> v(1);
    bool quoted = false;
    for (char c : line) {
      if (c == '"') quoted = !quoted;
      else if (c == ',' && !quoted) v.emplace_back();
      else v.back() += c;
    }
    return v;
  };
  std::istringstream lines(csv);
  std::string line;
  std::getline(lines, line);
  const auto header = cells(line);
  const auto at = std::find(header.begin(), header.end(), name);
  if (at == header.end()) {
    ADD_FAILURE() << "no column " << name << " in " << csv;
    return {};
  }
  std::vector<std::string> column;
  while (std::getline(lines, line)) column.push_back(cells(line).at(size_t(at - header.begin())));
  return column;
}

std::string sim_experiment_text(const std::string& out_dir) {
  return "[experiment]\nstrategy = shuffle\nbackend = sim\noutput_dir = " + out_dir +
         "\n[cluster]\nnodes = 2\n[workload]\nrows = 2^16\n";
}

TEST_F(CliTest, ProfileKeysComeFromTheFileTheCommandLineAndSweeps) {
  if (!has_backend("sim")) GTEST_SKIP() << "no sim backend in this build";
  // [profile] holds section.key; [profile.section] holds key: the same keys.
  std::string f = write("what-if.ini", sim_experiment_text((dir_ / "out").string()) +
                                           "[profile]\nlink.nic.bw = 5e10\n[profile.topology]\nfabric = fat_tree\n");
  auto plan = plan_experiment(f);
  ASSERT_EQ(plan.points.size(), 1u);
  EXPECT_EQ(plan.points[0].run.cluster.profile_overrides,
            (std::map<std::string, std::string>{{"link.nic.bw", "5e10"}, {"topology.fabric", "fat_tree"}}));

  plan = plan_experiment(f, {{"profile.link.nic.bw", "1e11"}, {"sweep.profile.link.nic.latency", "1e-6, 2e-6"}});
  ASSERT_EQ(plan.points.size(), 2u);
  EXPECT_EQ(plan.swept_keys, (std::vector<std::string>{"profile.link.nic.latency"}));
  for (size_t i = 0; i < 2; ++i) {
    const auto& overrides = plan.points[i].run.cluster.profile_overrides;
    EXPECT_EQ(overrides.at("link.nic.bw"), "1e11");  // the command line beats the file
    EXPECT_EQ(overrides.at("link.nic.latency"), i == 0 ? "1e-6" : "2e-6");
    EXPECT_EQ(overrides.at("topology.fabric"), "fat_tree");
  }
  EXPECT_EQ(plan.points[1].label(), "profile.link.nic.latency=2e-6");
}

TEST_F(CliTest, UnknownProfileKeysAndBadValuesAreErrorsNamingThem) {
  if (has_backend("sim")) {
    std::string f = write("bad.ini", sim_experiment_text((dir_ / "out").string()) + "[profile]\nlink.nic.bandwidth = 5e10\n");
    expect_rejected(cli({"run", f}), {f + ":10: profile.link.nic.bandwidth = 5e10", "unknown key in [link.nic]", "bw"});
    std::string ok = write("ok.ini", sim_experiment_text((dir_ / "out").string()));
    expect_rejected(cli({"run", ok, "--profile.nic.bw=5e10"}),
                    {"command line (--profile.nic.bw=5e10): profile.nic.bw = 5e10", "did you mean [link.nic]?"});
    expect_rejected(cli({"run", ok, "--sweep.profile.link.nic.bw=1e10,fast"}),
                    {"profile.link.nic.bw = fast", "not a number", "sweep point 2 of 2"});
    expect_rejected(cli({"run", ok, "--profile.gpu.sms=264"}), {"profile.gpu.sms = 264", "information only"});
    expect_rejected(cli({"run", ok, "--profile.op.probe.linear.seg=0 1 2"}),
                    {"profile.op.probe.linear.seg = 0 1 2", "piecewise list"});
  }
  // A backend that simulates no profile would ignore them.
  expect_rejected(cli({"run", experiment(), "--profile.link.nic.bw=5e10"}),
                  {"profile.link.nic.bw = 5e10", "the scripted backend simulates no profile"});
}

TEST_F(CliTest, SweepingTheNodesWithRowsPerRankIsWeakScalingAndWithRowsStrongScaling) {
  const std::vector<std::string> nodes{"1", "2", "4"};
  const uint64_t rows = 1000;
  for (const bool weak : {true, false}) {
    std::string f = write(weak ? "weak.ini" : "strong.ini",
                          "[experiment]\nstrategy = scripted\nbackend = scripted\noutput_dir = " + (dir_ / "out").string() +
                              "\n[workload]\n" + (weak ? "rows_per_rank" : "rows") + " = " + std::to_string(rows) +
                              "\n[sweep]\ncluster.nodes = 1, 2, 4\n");
    auto r = cli({"run", f, "--quiet"});
    ASSERT_EQ(r.code, 0) << r.err;
    const std::string csv = read((dir_ / "out" / (weak ? "weak-scripted.csv" : "strong-scripted.csv")).string());
    EXPECT_EQ(csv_column(csv, "cluster.nodes"), nodes);  // the swept key, a column of its own
    const auto ranks = csv_column(csv, "ranks"), r_rows = csv_column(csv, "r_rows"), s_rows = csv_column(csv, "s_rows");
    ASSERT_EQ(r_rows.size(), nodes.size()) << csv;
    for (size_t i = 0; i < nodes.size(); ++i) {
      EXPECT_EQ(ranks[i], nodes[i]);
      const uint64_t want = weak ? rows * std::stoull(nodes[i]) : rows;
      EXPECT_EQ(r_rows[i], std::to_string(want)) << (weak ? "weak" : "strong") << " scaling, " << nodes[i] << " nodes";
      EXPECT_EQ(s_rows[i], std::to_string(want));
    }
  }
}

}  // namespace
}  // namespace joinlab
