// joinlab command line: run | list | calibrate | validate (see core/experiment/cli.cpp).
#include "core/experiment/cli.hpp"

int main(int argc, char** argv) { return joinlab::cli_main(argc, argv); }
