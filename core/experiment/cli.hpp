// The joinlab command line: run | list | reproduce | calibrate | validate | help.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "core/experiment/config.hpp"

namespace joinlab {

// Parses the command line and runs the subcommand; returns the process exit code (ExitCode):
// 0 ok, 2 bad input, 3 wrong join result, 1 anything else.
int cli_main(int argc, char** argv);

// Subcommands beyond run and list. `calibrate` and `validate` are registered here as stubs
// that say they are not built yet; the simulation work replaces them by calling
// register_command from its registration function. fn gets the arguments after the command
// name and returns the exit code; InputError / VerificationError / other exceptions it throws
// become exit codes 2 / 3 / 1 with the message on stderr.
using CommandFn = std::function<int(const std::vector<std::string>& args)>;
void register_command(const std::string& name, const std::string& usage, CommandFn fn);

// The arguments of `run` (and of commands that take an experiment the same way, e.g. validate):
// FILE [--backend B] [--dry-run] [--quiet] [--section.key=value | --section.key value ...].
struct RunArgs {
  std::string file;
  std::vector<Override> overrides;
  bool dry_run = false;  // validate and list the points, run nothing
  bool quiet = false;    // no progress lines
};
RunArgs parse_run_args(const std::vector<std::string>& args);  // InputError on bad usage

}  // namespace joinlab
