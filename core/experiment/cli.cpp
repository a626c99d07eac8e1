// joinlab command line. `run` plans the whole experiment (every sweep point parsed and
// validated) before running anything, so bad input costs no work and exits with code 2.
#include "core/experiment/cli.hpp"

#include <dirent.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <map>
#include <sstream>

#include "core/builtin.hpp"
#include "core/common/error.hpp"
#include "core/exec/backend.hpp"
#include "core/experiment/environment.hpp"
#include "core/experiment/plan_run.hpp"
#include "core/experiment/progress.hpp"
#include "core/experiment/report.hpp"
#include "core/experiment/reproduce.hpp"
#include "core/experiment/values.hpp"
#include "core/runtime/launcher.hpp"

namespace joinlab {

namespace {

struct Command {
  std::string usage;
  CommandFn fn;
};

int not_built_yet(const std::string& what, const std::string& who) {
  std::cerr << "joinlab " << what << " is not built yet: it arrives with " << who
            << ". Nothing was run.\n";
  return kExitRuntime;
}

std::map<std::string, Command>& commands() {
  static std::map<std::string, Command> c = {
      {"calibrate",
       {"joinlab calibrate [--profile NAME]   measure every operator and link, write a hardware profile",
        [](const std::vector<std::string>&) {
          return not_built_yet("calibrate", "the simulation work (calibrated operator models)");
        }}},
      {"validate",
       {"joinlab validate FILE [overrides]    run on the hardware and in simulation, print the error per phase",
        [](const std::vector<std::string>&) {
          return not_built_yet("validate", "the simulation work (sim backend and calibrated profiles)");
        }}},
  };
  return c;
}

const char* const kRunUsage =
    "joinlab run FILE [--backend cpu|cuda|sim] [--dry-run] [--quiet] [--section.key=value ...]\n"
    "                                     run an experiment (every point of its sweep)";
const char* const kListUsage =
    "joinlab list [strategies|backends|profiles|experiments|keys]\n"
    "                                     what this build and tree hold";

void print_usage(std::ostream& out) {
  out << "usage:\n  " << kRunUsage << "\n  " << kListUsage << "\n  " << kReproduceUsage << "\n";
  for (auto& [name, c] : commands()) out << "  " << c.usage << "\n";
  out << "  joinlab help\n\n"
         "Experiment files and keys: experiments/README.md. Exit codes: 0 ok, 2 bad input, 3 wrong join\n"
         "result, 1 other failure.\n";
}

const char* const kRunHelp =
    "\n"
    "  FILE                 an experiment file (.ini; experiments/README.md, `joinlab list keys`)\n"
    "  --backend B          where it runs: cpu, cuda or sim (= --experiment.backend=B)\n"
    "  --dry-run            check every point of the sweep and list them; run nothing\n"
    "  --quiet, -q          print only the results table and errors\n"
    "  --section.key=VALUE  override a key of the file (--section.key VALUE works too)\n"
    "  --sweep.section.key=A,B,...  sweep over a key (replaces the file's sweep of it)\n"
    "Every point is checked before any runs: sizes, memory, options. Outputs go to\n"
    "<output_dir>/<name>-<backend>.csv and <name>-<backend>[-<point>].trace.json.\n"
    "Exit codes: 0 ok, 2 bad input, 3 wrong join result, 1 other failure.\n";

// Usage of one command; false if there is no such command.
bool print_command_help(const std::string& cmd, std::ostream& out) {
  if (cmd == "run") {
    out << "usage: " << kRunUsage << "\n" << kRunHelp;
    return true;
  }
  if (cmd == "list") {
    out << "usage: " << kListUsage << "\n";
    return true;
  }
  if (cmd == "reproduce") {
    out << "usage: " << kReproduceUsage << "\n" << kReproduceHelp;
    return true;
  }
  auto it = commands().find(cmd);
  if (it == commands().end()) return false;
  out << "usage: " << it->second.usage << "\n";
  return true;
}

void print_plan(const ExperimentPlan& plan) {
  std::cout << "experiment " << plan.name << " (" << plan.file << "): " << plan.points.size()
            << " run point" << (plan.points.size() == 1 ? "" : "s") << ", all valid\n";
  int i = 0;
  for (auto& pp : plan.points) {
    const RunPoint& p = pp.run;
    std::cout << std::setw(5) << ++i << "  " << p.strategy << " on " << p.backend << ", "
              << p.cluster.shape.size() << " rank(s), |R| = " << format_count(p.workload.r.rows)
              << ", |S| = " << format_count(p.workload.s.rows) << ", repeat " << p.repeat
              << (p.cluster.jobs > 1 ? ", " + std::to_string(p.cluster.jobs) + " joins at once" : "")
              << (pp.label().empty() ? "" : "  " + pp.label()) << "\n";
  }
}

// The backends of the plan, for the output names: a run on another backend gets files of its own.
std::string output_backends(const ExperimentPlan& plan) {
  std::vector<std::string> names;
  for (auto& pp : plan.points)
    if (std::find(names.begin(), names.end(), pp.run.backend) == names.end()) names.push_back(pp.run.backend);
  std::string s;
  for (auto& n : names) s += (s.empty() ? "" : "+") + n;
  return s;
}

int run_command(const std::vector<std::string>& args) {
  RunArgs a = parse_run_args(args);
  ExperimentPlan plan = plan_experiment(a.file, a.overrides);
  if (a.dry_run) {
    print_plan(plan);
    return kExitOk;
  }
  // With ranks as processes (mpirun) every process runs the experiment; rank 0's reports it.
  const bool reporting = reporting_process();
  std::ostream muted(nullptr);
  std::ostream& info = reporting && !a.quiet ? std::cerr : muted;  // --quiet: the table and errors only
  set_quiet(a.quiet);
  if (reporting) make_output_dir(plan.output_dir, "experiment.output_dir");
  const std::string base = plan.output_dir + "/" + file_safe(plan.name) + "-" + file_safe(output_backends(plan));
  const std::string csv = base + ".csv";
  const int n = int(plan.points.size());

  ResultsTable table(reporting ? std::cout : muted, !plan.swept_keys.empty());
  {
    std::lock_guard<std::mutex> g(console_mutex());
    info << "joinlab: experiment " << plan.name << " (" << plan.file << "): " << n << " run point"
         << (n == 1 ? "" : "s") << "\n";
    table.print_header();
  }
  ProgressTicker ticker(std::cerr, !a.quiet && reporting);
  PlanRun how;
  how.csv = csv;
  how.trace_base = base;
  how.reporting = reporting;
  how.table = &table;
  how.ticker = &ticker;
  const std::vector<ResultRow> rows = run_plan(plan, how);
  std::lock_guard<std::mutex> g(console_mutex());
  info << "joinlab: wrote " << csv << " and "
       << (n == 1 ? rows.front().trace_file : base + "-{1.." + std::to_string(n) + "}.trace.json") << "\n";
  return kExitOk;
}

// First '#' comment line of a file, for listings.
std::string first_comment(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    std::string t = trim(line);
    if (!t.empty() && t[0] == '#') return trim(t.substr(t.find_first_not_of('#')));
    if (!t.empty()) break;
  }
  return "";
}

std::vector<std::string> ini_files(const std::string& dir) {
  std::vector<std::string> files;
  if (DIR* d = ::opendir(dir.c_str())) {
    while (dirent* e = ::readdir(d)) {
      std::string f = e->d_name;
      if (f.size() > 4 && f.compare(f.size() - 4, 4, ".ini") == 0) files.push_back(f);
    }
    ::closedir(d);
  }
  std::sort(files.begin(), files.end());
  return files;
}

// Boost prints a double default with 17 digits (0.90000000000000002): as a person writes it.
std::string readable_default(const std::string& text) {
  if (text.find_first_of(".eE") == std::string::npos) return text;
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (end != text.c_str() + text.size()) return text;
  std::ostringstream o;
  o << std::setprecision(6) << v;
  return o.str();
}

// Width of a name column: the longest name and two spaces, so that columns never touch.
size_t column_width(const std::vector<std::string>& names, size_t least) {
  size_t w = least;
  for (auto& n : names) w = std::max(w, n.size() + 2);
  return w;
}

void list_strategies(std::ostream& out) {
  out << "strategies:\n";
  const size_t name_width = column_width(strategy_names(), 10);
  for (auto& name : strategy_names()) {
    const StrategyInfo& s = find_strategy(name);
    std::string ranks = std::to_string(s.min_ranks);
    if (s.max_ranks != s.min_ranks) ranks += ".." + (s.max_ranks > 0 ? std::to_string(s.max_ranks) : std::string("N"));
    out << "  " << std::left << std::setw(int(name_width)) << name << std::setw(14) << (ranks + " rank(s)")
        << s.description << "\n";
    po::options_description desc;
    if (s.add_options) s.add_options(desc);
    for (auto& opt : desc.options()) {
      std::string param = opt->format_parameter();  // "arg (=linear)"
      auto eq = param.find("(=");
      std::string def = eq == std::string::npos ? "" : " (default " + readable_default(param.substr(eq + 2, param.size() - eq - 3)) + ")";
      out << "      [strategy] " << opt->long_name() << def << ": " << opt->description() << "\n";
    }
  }
  if (strategy_names().empty()) out << "  (none registered in this build)\n";
}

void list_backends(std::ostream& out) {
  out << "backends (this build):\n";
  for (auto& b : backend_names()) {
    const std::string why = make_backend(b)->unavailable();
    out << "  " << b << (why.empty() ? "" : "  (built in, but cannot run here: " + why + ")") << "\n";
  }
  if (backend_names().empty()) out << "  (none registered in this build)\n";
}

void list_profiles(std::ostream& out) {
  out << "profiles (" << profile_dir() << "):\n";
  const size_t width = column_width(profile_names(), 16);
  for (auto& p : profile_names())
    out << "  " << std::left << std::setw(int(width)) << p << first_comment(profile_dir() + "/" + p + ".ini") << "\n";
  if (profile_names().empty()) out << "  (none yet)\n";
}

void list_experiments(std::ostream& out) {
  std::string dir = joinlab_root() + "/experiments";
  out << "experiments (" << dir << "):\n";
  auto files = ini_files(dir);
  const size_t width = column_width(files, 20);
  for (auto& f : files) {
    std::string desc;
    try {
      desc = describe_experiment(dir + "/" + f);
    } catch (const std::exception& e) {
      desc = e.what();
    }
    out << "  " << std::left << std::setw(int(width)) << f << desc << "\n";
  }
  if (files.empty()) out << "  (none)\n";
}

void list_keys(std::ostream& out) {
  out << "experiment keys (section.key; every one can be overridden as --section.key=value):\n";
  for (auto& k : experiment_keys()) {
    out << "  " << k.key << " = " << k.type;
    if (!k.default_value.empty()) out << "   [default: " << k.default_value << "]";
    out << "\n      " << k.help << "\n";
  }
}

int list_command(const std::vector<std::string>& args) {
  const std::map<std::string, void (*)(std::ostream&)> parts = {
      {"strategies", list_strategies}, {"backends", list_backends}, {"profiles", list_profiles},
      {"experiments", list_experiments}, {"keys", list_keys}};
  if (args.size() > 1) throw InputError("list takes at most one argument (strategies, backends, profiles, experiments or keys)");
  if (args.empty()) {
    for (auto* part : {list_strategies, list_backends, list_profiles, list_experiments}) {
      part(std::cout);
      std::cout << "\n";
    }
    std::cout << "(`joinlab list keys` shows every experiment key)\n";
    return kExitOk;
  }
  auto it = parts.find(args[0]);
  if (it == parts.end())
    throw InputError("list " + args[0] + ": unknown part (expected strategies, backends, profiles, experiments or keys)");
  it->second(std::cout);
  return kExitOk;
}

int guarded(const std::function<int()>& body) {
  try {
    return body();
  } catch (const InputError& e) {
    // Bad input is the same on every rank of an mpirun launch: rank 0 says it.
    if (reporting_process()) std::cerr << "joinlab: error: " + std::string(e.what()) + "\n";
    return kExitInput;
  } catch (const VerificationError& e) {
    std::cerr << "joinlab: error: " + std::string(e.what()) + "\n";  // one write: ranks under mpirun share stderr
    return kExitVerification;
  } catch (const std::exception& e) {
    std::cerr << "joinlab: error: " + std::string(e.what()) + "\n";  // one write: ranks under mpirun share stderr
    return kExitRuntime;
  }
}

}  // namespace

void register_command(const std::string& name, const std::string& usage, CommandFn fn) {
  commands()[name] = {usage, std::move(fn)};
}

RunArgs parse_run_args(const std::vector<std::string>& args) {
  RunArgs out;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--dry-run") {
      out.dry_run = true;
    } else if (a == "--quiet" || a == "-q") {
      out.quiet = true;
    } else if (a.rfind("--", 0) == 0) {
      std::string name = a.substr(2), value;
      auto eq = name.find('=');
      if (eq != std::string::npos) {
        value = name.substr(eq + 1);
        name = name.substr(0, eq);
      }
      if (name == "backend") name = "experiment.backend";
      if (name.find('.') == std::string::npos) {  // before taking a value: a misspelt flag takes none
        std::string hint;
        for (const char* known : {"backend", "dry-run", "quiet", "help"})
          if (edit_distance(name, known) <= 2) hint = std::string("; did you mean --") + known + "?";
        throw InputError("command line: unknown option --" + name +
                         " (options are --backend, --dry-run, --quiet, --help and --section.key=value)" + hint);
      }
      if (eq == std::string::npos) {
        if (i + 1 < args.size() && args[i + 1].rfind("--", 0) != 0) value = args[++i];
        else throw InputError("command line: --" + name + " needs a value (--" + name + "=VALUE)");
      }
      out.overrides.push_back({name, value});
    } else if (out.file.empty()) {
      out.file = a;
    } else {
      throw InputError("command line: unexpected argument '" + a + "' (one experiment file only)");
    }
  }
  if (out.file.empty()) throw InputError("no experiment file given (joinlab run FILE [options]; joinlab help)");
  return out;
}

int cli_main(int argc, char** argv) {
  std::vector<std::string> args(argv + (argc > 0 ? 1 : 0), argv + argc);
  return guarded([&] {
    if (!built_with_process_ranks()) {
      if (launched_by_mpi()) set_reporting_process(launched_rank() <= 0);  // one error line, not one per process
      refuse_launch_without_mpi();
    }
    register_builtin();
    if (args.empty()) {
      print_usage(std::cerr);
      return int(kExitInput);
    }
    const std::string cmd = args.front();
    std::vector<std::string> rest(args.begin() + 1, args.end());
    bool wants_help = std::find_if(rest.begin(), rest.end(), [](const std::string& a) {
                        return a == "--help" || a == "-h";
                      }) != rest.end();
    if (cmd == "help" || cmd == "--help" || cmd == "-h") {
      if (!rest.empty() && print_command_help(rest.front(), std::cout)) return int(kExitOk);  // joinlab help run
      print_usage(std::cout);
      return int(kExitOk);
    }
    if (wants_help) {  // joinlab run --help: that command's usage
      if (!print_command_help(cmd, std::cout)) print_usage(std::cout);
      return int(kExitOk);
    }
    if (cmd == "run") return run_command(rest);
    if (cmd == "list") return list_command(rest);
    if (cmd == "reproduce") return reproduce_command(rest);
    auto it = commands().find(cmd);
    if (it == commands().end()) {
      print_usage(std::cerr);
      throw InputError("unknown command '" + cmd + "'");
    }
    return it->second.fn(rest);
  });
}

}  // namespace joinlab
