// Error kinds and the exit codes the CLI maps them to.
#pragma once
#include <stdexcept>
#include <string>

namespace joinlab {

// Bad user input (experiment file, CLI, workload parameters): rejected before any work, exit 2.
struct InputError : std::runtime_error {
  using std::runtime_error::runtime_error;
};
// A join result that differs from the expected one: the run failed, exit 3.
struct VerificationError : std::runtime_error {
  using std::runtime_error::runtime_error;
};
// Everything else that stops a run (backend failure, out of memory, dead peer): exit 1.
struct RuntimeError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

enum ExitCode : int { kExitOk = 0, kExitRuntime = 1, kExitInput = 2, kExitVerification = 3 };

}  // namespace joinlab
