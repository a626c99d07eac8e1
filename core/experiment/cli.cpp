// PLACEHOLDER: replaced by the experiment/CLI work.
#include "core/experiment/cli.hpp"
namespace joinlab { int cli_main(int, char**) { return 0; } }
