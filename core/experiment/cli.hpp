#pragma once

namespace joinlab {
// Parses the command line and runs the subcommand; returns the process exit code (ExitCode).
int cli_main(int argc, char** argv);
}  // namespace joinlab
