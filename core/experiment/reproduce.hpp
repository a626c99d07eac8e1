// `joinlab reproduce`: runs the papers' figures (experiments/papers/<paper>/<figure>.ini, or their
// -small variants) with the same loop as `joinlab run`, and writes per figure the CSV and a plot
// drawn as its [figure] section says, and an index report (Markdown and static HTML) of them all.
#pragma once
#include <string>
#include <vector>

namespace joinlab {

extern const char* const kReproduceUsage;
extern const char* const kReproduceHelp;

// The command: the arguments after "reproduce"; returns the exit code (throws InputError on bad
// usage or an unknown paper or figure, before any run).
int reproduce_command(const std::vector<std::string>& args);

}  // namespace joinlab
