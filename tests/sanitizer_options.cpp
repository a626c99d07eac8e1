// Default options of the sanitizer runtimes for every binary of a JOINLAB_SANITIZE build
// (tests/CMakeLists.txt links this file into each), so that ctest, test discovery and a hand-run
// binary behave alike. $ASAN_OPTIONS / $UBSAN_OPTIONS / $LSAN_OPTIONS still override them.
extern "C" {

const char* __asan_default_options() {
  // strict_string_checks: strtod/strtoll, which the value parsers use, read their whole input.
  return "strict_string_checks=1:check_initialization_order=1";
}

const char* __ubsan_default_options() {
  // The stack of the first finding: a test binary stops there (-fno-sanitize-recover).
  return "print_stacktrace=1:halt_on_error=1";
}

}  // extern "C"
