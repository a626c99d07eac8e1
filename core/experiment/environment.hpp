// Facts about where joinlab runs, for finding its data folders and labelling results: the
// source tree (experiments/, models/profiles/), the git commit, the host's CPU and GPU, the date.
// Every probe tolerates failure (no git, no nvidia-smi, a binary copied to another machine).
#pragma once
#include <functional>
#include <ostream>
#include <string>
#include <vector>

namespace joinlab {

// The joinlab tree: $JOINLAB_ROOT if set, else the nearest ancestor of the executable, then of
// the working directory, that holds core/builtin.hpp; else the working directory.
std::string joinlab_root();
std::string profile_dir();  // <root>/models/profiles

// Names (file stems) of the hardware profiles in profile_dir(), sorted.
std::vector<std::string> profile_names();
// The .ini file of a profile given by name ("h100") or path; empty if there is none.
std::string profile_path(const std::string& name_or_path);

// The commit of the joinlab source this binary was built from, recorded at build time: "<12 hex
// digits>" (+ "-dirty" when tracked files differed from it), or "unknown" outside git.
std::string git_commit();
std::string host_cpu_model();  // "AMD EPYC 7B13 (2 cores)", or "unknown CPU"
std::string gpu_model();       // name of GPU 0 from nvidia-smi, or "" where there is none
std::string utc_timestamp();   // 2026-11-22T06:00:00Z

// Writes a file whole or not at all: `fill` writes into <path>.partial, which replaces path once
// written and closed; on an error (a full disk) the partial file is removed and RuntimeError
// names `what`, path and the reason.
void write_file_whole(const std::string& path, const std::string& what, const std::function<void(std::ostream&)>& fill);

}  // namespace joinlab
