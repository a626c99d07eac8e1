#include "core/experiment/environment.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cerrno>
#include <ctime>
#include <dirent.h>
#include <fstream>
#include <thread>

#include "core/common/error.hpp"
#include "core/experiment/values.hpp"

namespace joinlab {

namespace {

bool is_file(const std::string& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

std::string parent_of(const std::string& p) {
  auto slash = p.find_last_of('/');
  if (slash == std::string::npos) return "";
  return slash == 0 ? "/" : p.substr(0, slash);
}

// Nearest ancestor of `dir` (itself included) holding the marker file of the source tree.
std::string find_tree_above(std::string dir) {
  while (!dir.empty()) {
    if (is_file(dir + "/core/builtin.hpp")) return dir;
    if (dir == "/") break;
    dir = parent_of(dir);
  }
  return "";
}

std::string executable_dir() {
  std::array<char, PATH_MAX> buf{};
  ssize_t n = ::readlink("/proc/self/exe", buf.data(), buf.size() - 1);
  return n > 0 ? parent_of(std::string(buf.data(), size_t(n))) : "";
}

std::string current_dir() {
  std::array<char, PATH_MAX> buf{};
  return ::getcwd(buf.data(), buf.size()) ? std::string(buf.data()) : ".";
}

// First line of a command's standard output, "" if it fails.
std::string first_line_of(const std::string& command) {
  FILE* pipe = ::popen((command + " 2>/dev/null").c_str(), "r");
  if (!pipe) return "";
  std::array<char, 512> buf{};
  std::string line;
  if (std::fgets(buf.data(), int(buf.size()), pipe)) line = buf.data();
  while (std::fgets(buf.data(), int(buf.size()), pipe)) {}  // drain so the child can exit
  int status = ::pclose(pipe);
  return status == 0 ? trim(line) : "";
}


}  // namespace

std::string joinlab_root() {
  static const std::string root = [] {
    if (const char* env = std::getenv("JOINLAB_ROOT"); env && *env) return std::string(env);
    for (const std::string& start : {executable_dir(), current_dir()}) {
      std::string found = find_tree_above(start);
      if (!found.empty()) return found;
    }
    return current_dir();
  }();
  return root;
}

std::string profile_dir() { return joinlab_root() + "/models/profiles"; }

std::vector<std::string> profile_names() {
  std::vector<std::string> names;
  if (DIR* d = ::opendir(profile_dir().c_str())) {
    while (dirent* e = ::readdir(d)) {
      std::string n = e->d_name;
      if (n.size() > 4 && n.compare(n.size() - 4, 4, ".ini") == 0) names.push_back(n.substr(0, n.size() - 4));
    }
    ::closedir(d);
  }
  std::sort(names.begin(), names.end());
  return names;
}

std::string profile_path(const std::string& name_or_path) {
  bool is_path = name_or_path.find('/') != std::string::npos ||
                 (name_or_path.size() > 4 && name_or_path.compare(name_or_path.size() - 4, 4, ".ini") == 0);
  if (is_path)
    return is_file(name_or_path) ? name_or_path : "";
  std::string p = profile_dir() + "/" + name_or_path + ".ini";
  return is_file(p) ? p : "";
}

const char* source_commit();  // generated at build time (scripts/source_commit.cmake)

std::string git_commit() { return source_commit(); }

std::string host_cpu_model() {
  static const std::string model = [] {
    std::ifstream in("/proc/cpuinfo");
    std::string line, name = "unknown CPU";
    while (std::getline(in, line)) {
      if (line.rfind("model name", 0) == 0) {
        auto colon = line.find(':');
        if (colon != std::string::npos) name = trim(line.substr(colon + 1));
        break;
      }
    }
    return name + " (" + std::to_string(std::max(1u, std::thread::hardware_concurrency())) + " cores)";
  }();
  return model;
}

std::string gpu_model() {
  static const std::string model = first_line_of("nvidia-smi --query-gpu=name --format=csv,noheader");
  return model;
}

std::string utc_timestamp() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  ::gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

void write_file_whole(const std::string& path, const std::string& what, const std::function<void(std::ostream&)>& fill) {
  const std::string partial = path + ".partial";
  std::ofstream out(partial, std::ios::trunc);
  int err = out ? 0 : errno;
  if (out) {
    fill(out);
    out.flush();
    if (!out) err = errno;
    out.close();
    if (!out && !err) err = errno;
  }
  if (err || !out || std::rename(partial.c_str(), path.c_str()) != 0) {
    if (!err) err = errno;
    std::remove(partial.c_str());
    throw RuntimeError("cannot write " + what + " '" + path + "': " + (err ? std::strerror(err) : "write failed"));
  }
}

}  // namespace joinlab
