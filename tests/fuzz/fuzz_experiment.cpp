// Fuzz target for the experiment-file parser and the size/number grammar (core/experiment/
// config.cpp, values.cpp). One input is the text of an experiment file; plan_experiment reads it,
// and each of its lines and each value after a '=' also goes through parse_size, parse_integer,
// parse_number, parse_bool and split_list. The only acceptable outcomes are a plan or an
// InputError naming the file (or the key's origin, which starts with the file); any other
// exception, a crash or a sanitizer finding is a bug.
//
// Built two ways (tests/CMakeLists.txt): with clang and -DJOINLAB_FUZZ=ON as a libFuzzer binary
// (fuzz_experiment), and with any compiler inside test_fuzz_experiment, which feeds it seeded
// mutations of the example experiments for a fixed number of inputs.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "core/builtin.hpp"
#include "core/common/error.hpp"
#include "core/experiment/config.hpp"
#include "core/experiment/values.hpp"

namespace joinlab::fuzz {
// How many inputs were planned and how many rejected (test_fuzz_experiment checks both happen).
long planned = 0, rejected = 0;
}  // namespace joinlab::fuzz

namespace {

using namespace joinlab;

[[noreturn]] void fail(const std::string& what, const std::string& input) {
  std::fprintf(stderr, "fuzz_experiment: %s\n--- input ---\n%s\n--- end ---\n", what.c_str(), input.c_str());
  std::abort();
}

// A rejection must say why; a size that parses must read back from its own formatting.
void check_values(const std::string& text) {
  try {
    const uint64_t n = parse_size(text, true);
    const std::string back = format_count(n);
    if (parse_size(back, true) != n) fail("parse_size(format_count(n)) != n for '" + back + "'", text);
  } catch (const InputError& e) {
    if (!*e.what()) fail("parse_size: empty error message", text);
  }
  auto rejected_with_reason = [&](const char* what, auto&& parse) {
    try {
      parse(text);
    } catch (const InputError& e) {
      if (!*e.what()) fail(std::string(what) + ": empty error message", text);
    }
  };
  rejected_with_reason("parse_integer", [](const std::string& t) { return parse_integer(t); });
  rejected_with_reason("parse_number", [](const std::string& t) { return parse_number(t); });
  rejected_with_reason("parse_bool", [](const std::string& t) { return parse_bool(t); });
  rejected_with_reason("split_list", [](const std::string& t) { return split_list(t); });
}

void check_experiment(const std::string& text) {
  // A file per process: plan_experiment reads a path, and fuzzers may run several processes.
  static const std::string path =
      (std::filesystem::temp_directory_path() / ("joinlab-fuzz-" + std::to_string(getpid()) + ".ini")).string();
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out << text;
    if (!out) fail("cannot write " + path, text);
  }
  try {
    ExperimentPlan plan = plan_experiment(path);
    if (plan.points.empty()) fail("a plan without points", text);
    ++fuzz::planned;
  } catch (const InputError& e) {
    ++fuzz::rejected;
    const std::string msg = e.what();
    if (msg.compare(0, path.size(), path) != 0) fail("rejection does not name the file: " + msg, text);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const bool registered = (register_builtin(), true);
  (void)registered;
  const std::string text(reinterpret_cast<const char*>(data), size);
  check_experiment(text);
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    check_values(line);
    const size_t eq = line.find('=');
    if (eq != std::string::npos) check_values(line.substr(eq + 1));
  }
  return 0;
}
