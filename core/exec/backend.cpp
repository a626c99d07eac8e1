#include "core/exec/backend.hpp"

#include "core/common/error.hpp"

namespace joinlab {

namespace {
std::map<std::string, BackendFactory>& registry() {
  static std::map<std::string, BackendFactory> r;
  return r;
}
}  // namespace

void register_backend(const std::string& name, BackendFactory f) { registry()[name] = std::move(f); }

std::unique_ptr<Backend> make_backend(const std::string& name) {
  auto it = registry().find(name);
  if (it == registry().end()) {
    std::string known;
    for (auto& [n, f] : registry()) known += (known.empty() ? "" : ", ") + n;
    throw InputError("unknown backend '" + name + "' (this build has: " + known + ")");
  }
  return it->second();
}

namespace {
bool g_reporting = true;
}  // namespace

bool reporting_process() { return g_reporting; }
void set_reporting_process(bool reporting) { g_reporting = reporting; }

namespace {
bool g_quiet = false;
}
bool quiet() { return g_quiet; }
void set_quiet(bool q) { g_quiet = q; }

std::vector<std::string> backend_names() {
  std::vector<std::string> v;
  for (auto& [n, f] : registry()) v.push_back(n);
  return v;
}

}  // namespace joinlab
