#include "core/experiment/reproduce.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <map>
#include <mutex>

#include "core/common/error.hpp"
#include "core/exec/backend.hpp"
#include "core/experiment/config.hpp"
#include "core/experiment/environment.hpp"
#include "core/experiment/plan_run.hpp"
#include "core/experiment/progress.hpp"
#include "core/experiment/report.hpp"
#include "core/experiment/values.hpp"

namespace joinlab {

const char* const kReproduceUsage =
    "joinlab reproduce [PAPER[/FIGURE] ...] [--backend sim|cuda|cpu] [--scale small|full] [--out DIR]\n"
    "                  [--dry-run] [--quiet]\n"
    "                                     run the papers' figures, plot them, write an index report";
const char* const kReproduceHelp =
    "\n"
    "  PAPER, PAPER/FIGURE  what to run: experiments/papers/<paper>/<figure>.ini (default: every figure)\n"
    "  --backend B          run every figure on B instead of the backend its file names (cuda: the\n"
    "                       points of more ranks than this machine has GPUs are left out, and said so)\n"
    "  --scale S            full (default): the paper's setup; small: each figure's -small.ini variant,\n"
    "                       every figure in a few minutes on two cores\n"
    "  --out DIR            where the outputs go (default results/reproduce)\n"
    "  --dry-run            check every figure's points and drawing, list them; run nothing\n"
    "  --quiet, -q          no results tables or progress lines\n"
    "Writes DIR/<paper>/<figure>.csv (the CSV of `joinlab run`) and .png (its [figure] section says\n"
    "axes, units, series and log scales; dashed: the analytic bound), and DIR/index.md, index.html\n"
    "and index.json; no traces (`joinlab run FILE` writes a figure's). Plots need python3 with\n"
    "matplotlib; without it they are skipped, and said so.\n";

namespace {

namespace fs = std::filesystem;

struct ReproduceArgs {
  std::vector<std::string> selectors;
  std::string backend;  // "": each file's own
  std::string scale = "full";
  std::string out = "results/reproduce";
  bool quiet = false;
  bool dry_run = false;
};

ReproduceArgs parse_args(const std::vector<std::string>& args) {
  ReproduceArgs a;
  for (size_t i = 0; i < args.size(); ++i) {
    std::string arg = args[i], value;
    if (arg == "--quiet" || arg == "-q" || arg == "--dry-run") {
      (arg == "--dry-run" ? a.dry_run : a.quiet) = true;
      continue;
    }
    if (arg.rfind("--", 0) != 0) {
      a.selectors.push_back(arg);
      continue;
    }
    const auto eq = arg.find('=');
    if (eq != std::string::npos) {
      value = arg.substr(eq + 1);
      arg = arg.substr(0, eq);
    }
    if (arg != "--backend" && arg != "--scale" && arg != "--out")
      throw InputError("command line: unknown option " + arg + " (reproduce takes --backend, --scale, --out, --dry-run, --quiet)");
    if (eq == std::string::npos) {
      if (i + 1 >= args.size()) throw InputError("command line: " + arg + " needs a value (" + arg + "=VALUE)");
      value = args[++i];
    }
    if (arg == "--backend") a.backend = value;
    if (arg == "--out") a.out = value;
    if (arg == "--scale") {
      if (value != "small" && value != "full") throw InputError("command line: --scale " + value + ": expected small or full");
      a.scale = value;
    }
  }
  if (a.out.empty()) throw InputError("command line: --out is empty");
  return a;
}

// One figure to reproduce, with how to draw it ([figure] of its full file, defaults resolved).
struct Figure {
  std::string paper, name;
  std::string full_file, file;  // the figure's file, and the one that runs (its -small variant at small scale)
  std::string shown;            // the one that runs, as experiments/papers/<paper>/<file>.ini
  ExperimentPlan plan;
  std::string title, measures, x, x_label, y, y_label;
  double y_factor = 1;
  std::vector<std::string> series;
  bool logx = false, logy = false;
  std::vector<ResultRow> rows;
  std::string left_out;  // the points a GPU backend left out, and why ("" if none)
  std::string id() const { return paper + "/" + name; }
};

std::string join(const std::vector<std::string>& items, const std::string& sep) {
  std::string s;
  for (auto& i : items) s += (s.empty() ? "" : sep) + i;
  return s;
}

// paper -> its figures (file stems of the .ini files but the -small variants), sorted.
std::map<std::string, std::vector<std::string>> paper_figures(const std::string& dir) {
  std::map<std::string, std::vector<std::string>> papers;
  std::error_code ec;
  for (auto& p : fs::directory_iterator(dir, ec)) {
    if (!p.is_directory()) continue;
    auto& figures = papers[p.path().filename().string()];
    for (auto& f : fs::directory_iterator(p.path())) {
      const std::string stem = f.path().stem().string();
      if (f.path().extension() == ".ini" && !(stem.size() > 6 && stem.compare(stem.size() - 6, 6, "-small") == 0))
        figures.push_back(stem);
    }
    std::sort(figures.begin(), figures.end());
  }
  if (papers.empty()) throw InputError("no papers' figures in " + dir);
  return papers;
}

// The selected (paper, figure) pairs in paper and figure order; every one if none is named.
std::vector<std::pair<std::string, std::string>> select(const std::map<std::string, std::vector<std::string>>& papers,
                                                        const std::vector<std::string>& selectors) {
  std::vector<std::pair<std::string, std::string>> chosen;
  auto add = [&](const std::string& paper, const std::string& figure) {
    if (std::find(chosen.begin(), chosen.end(), std::make_pair(paper, figure)) == chosen.end()) chosen.push_back({paper, figure});
  };
  std::vector<std::string> names;
  for (auto& [paper, figures] : papers) names.push_back(paper);
  for (std::string s : selectors) {
    while (!s.empty() && s.back() == '/') s.pop_back();
    const auto slash = s.find('/');
    const std::string paper = s.substr(0, slash);
    auto it = papers.find(paper);
    if (it == papers.end()) throw InputError("unknown paper '" + paper + "' (papers: " + join(names, ", ") + ")");
    if (slash == std::string::npos) {
      for (auto& f : it->second) add(paper, f);
      continue;
    }
    std::string figure = s.substr(slash + 1);
    if (figure.size() > 4 && figure.compare(figure.size() - 4, 4, ".ini") == 0) figure.resize(figure.size() - 4);
    if (std::find(it->second.begin(), it->second.end(), figure) == it->second.end())
      throw InputError("paper " + paper + " has no figure '" + figure + "' (figures: " + join(it->second, ", ") + ")");
    add(paper, figure);
  }
  if (selectors.empty())
    for (auto& [paper, figures] : papers)
      for (auto& f : figures) add(paper, f);
  return chosen;
}

bool in(const std::vector<std::string>& v, const std::string& s) { return std::find(v.begin(), v.end(), s) != v.end(); }

// Columns of the CSV besides the swept keys that an x axis can take (column_value reads them).
const std::vector<std::string> kFixedColumns = {"ranks", "nodes", "r_rows", "s_rows", "strategy", "backend"};

std::string column_value(const ResultRow& row, const std::string& column) {
  for (auto& [k, v] : row.swept)
    if (k == column) return v;
  const RunPoint& p = row.outcome.point;
  if (column == "ranks") return std::to_string(p.cluster.shape.size());
  if (column == "nodes") return std::to_string(p.cluster.shape.nodes);
  if (column == "r_rows") return format_count(p.workload.r.rows);
  if (column == "s_rows") return format_count(p.workload.s.rows);
  if (column == "strategy") return p.strategy;
  if (column == "backend") return p.backend;
  return "";
}

// Reads the [figure] section of the figure's file and checks it against the plan that runs.
void resolve_drawing(Figure& f) {
  const std::map<std::string, std::string> spec = read_figure(f.full_file);
  auto get = [&](const std::string& key, const std::string& fallback) {
    auto it = spec.find(key);
    return it == spec.end() || it->second.empty() ? fallback : it->second;
  };
  const std::vector<std::string>& swept = f.plan.swept_keys;
  f.title = get("title", f.plan.name);
  f.measures = get("measures", "");
  f.x = get("x", swept.empty() ? "strategy" : swept.front());
  f.y = get("y", "total_s");
  f.x_label = get("x_label", f.x);
  f.y_label = get("y_label", f.y);
  f.y_factor = parse_number(get("y_factor", "1"));
  f.logx = parse_bool(get("logx", "false"));
  f.logy = parse_bool(get("logy", "false"));
  if (!in(swept, f.x) && !in(kFixedColumns, f.x))
    throw InputError(f.full_file + ": [figure] x = " + f.x + ": neither a swept key of " + f.file + " (" +
                     join(swept, ", ") + ") nor one of " + join(kFixedColumns, ", "));
  const bool phase = f.y.rfind("phase_", 0) == 0 && f.y.size() > 8 && f.y.compare(f.y.size() - 2, 2, "_s") == 0;
  if (!phase && !in({"total_s", "throughput_tuples_per_s", "fraction_of_bound", "bound_s"}, f.y))
    throw InputError(f.full_file + ": [figure] y = " + f.y +
                     ": expected total_s, throughput_tuples_per_s, fraction_of_bound, bound_s or phase_<name>_s");
  // Series the run does not sweep (a -small variant with fewer axes) are left out.
  const auto listed = spec.count("series") ? split_list(spec.at("series")) : swept;
  for (auto& k : listed)
    if (k != f.x && in(swept, k)) f.series.push_back(k);
}

std::string series_label(const Figure& f, const ResultRow& row) {
  std::vector<std::string> parts;
  for (auto& k : f.series) parts.push_back(k.substr(k.find('.') + 1) + "=" + column_value(row, k));
  return parts.empty() ? row.outcome.point.strategy : join(parts, " ");
}

std::string num(double v, const char* format = "%.4g") {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

// --- the report ----------------------------------------------------------------------------------

struct Cells {
  std::vector<std::string> header;
  std::vector<std::vector<std::string>> rows;
};

Cells point_table(const Figure& f) {
  Cells t;
  t.header = {f.x_label, "series", "total s", "M tuples/s", "bound s", "of bound", "bound's resource",
              "busiest resource per phase"};
  for (auto& r : f.rows) {
    const RunOutcome& o = r.outcome;
    const bool bound = o.bound.seconds > 0;
    std::string limits = format_phase_limits(o.limits);
    for (auto& c : limits)
      if (c == ';') c = ',';
    t.rows.push_back({column_value(r, f.x), series_label(f, r), num(o.total_seconds), num(o.throughput() / 1e6, "%.1f"),
                      bound ? num(o.bound.seconds) : "-", bound ? num(100 * o.bound_fraction(), "%.1f") + "%" : "-",
                      bound ? o.bound.resource : "-", limits.empty() ? "-" : limits});
  }
  return t;
}

std::string json_string(const std::string& s) {
  std::string q = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') q += '\\';
    if (static_cast<unsigned char>(c) < 0x20) {
      char esc[8];
      std::snprintf(esc, sizeof esc, "\\u%04x", unsigned(static_cast<unsigned char>(c)));
      q += esc;
      continue;
    }
    q += c;
  }
  return q + "\"";
}

std::string html_escape(const std::string& s) {
  std::string e;
  for (char c : s) {
    switch (c) {
      case '&': e += "&amp;"; break;
      case '<': e += "&lt;"; break;
      case '>': e += "&gt;"; break;
      case '"': e += "&quot;"; break;
      default: e += c;
    }
  }
  return e;
}

std::string md_cell(std::string s) {
  for (size_t at = 0; (at = s.find('|', at)) != std::string::npos; at += 2) s.replace(at, 1, "\\|");
  return s;
}

// What the report says of a whole reproduce run.
struct RunFacts {
  std::string scale, backend, commit, date, plots;  // plots: "" if drawn, else why not
  std::vector<std::string> left_out;                // figures none of whose points ran here, and why
  double seconds = 0;
};

std::string about(const Figure& f) {
  const RunPoint& p = f.plan.points.front().run;
  return "`" + f.shown + "`, " + std::to_string(f.rows.size()) + " point" + (f.rows.size() == 1 ? "" : "s") +
         " on the " + p.backend + " backend (" + describe_hardware(p) + ")";
}

const char* const kNotThePapers =
    "Every number here is joinlab's own, measured or simulated by this run; the papers' measured "
    "results are not part of joinlab and appear nowhere.";

void write_markdown(const std::string& path, const std::vector<Figure>& figures, const RunFacts& facts) {
  write_file_whole(path, "the index report", [&](std::ostream& out) {
    out << "# The papers' figures, reproduced by joinlab\n\n"
        << "Scale " << facts.scale << ", backend " << facts.backend << ", commit " << facts.commit << ", " << facts.date
        << ", " << num(facts.seconds, "%.1f") << " s. " << kNotThePapers
        << " The bound is the analytic one: the time the run's bytes take through its tightest resource; the busiest "
           "resource per phase is read from the run's trace (the share of the phase it was busy).\n\n";
    if (!facts.left_out.empty()) {
      out << "Not run here:\n\n";
      for (auto& l : facts.left_out) out << "- " << md_cell(l) << "\n";
      out << "\n";
    }
    for (auto& f : figures) {
      out << "## " << f.id() << ": " << f.title << "\n\n";
      if (!f.measures.empty()) out << f.measures << "\n\n";
      out << "From " << about(f) << "; CSV: [" << f.name << ".csv](" << f.id() << ".csv).\n\n";
      if (!f.left_out.empty()) out << f.left_out << ".\n\n";
      if (facts.plots.empty()) out << "![" << f.title << "](" << f.id() << ".png)\n\n";
      else out << "(plot skipped: " << facts.plots << ")\n\n";
      const Cells t = point_table(f);
      out << "|";
      for (auto& h : t.header) out << " " << md_cell(h) << " |";
      out << "\n|";
      for (size_t i = 0; i < t.header.size(); ++i) out << (i < 2 || i >= 6 ? "---|" : "---:|");
      out << "\n";
      for (auto& r : t.rows) {
        out << "|";
        for (auto& c : r) out << " " << md_cell(c) << " |";
        out << "\n";
      }
      out << "\n";
    }
  });
}

void write_html(const std::string& path, const std::vector<Figure>& figures, const RunFacts& facts) {
  write_file_whole(path, "the index report", [&](std::ostream& out) {
    out << "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>joinlab: the papers' figures</title>\n"
        << "<style>body{font-family:sans-serif;max-width:1100px;margin:2em auto;padding:0 1em}"
           "table{border-collapse:collapse;font-size:0.85em}td,th{border:1px solid #ccc;padding:2px 6px}"
           "td.n{text-align:right}img{max-width:100%}code{background:#f4f4f4}</style></head><body>\n"
        << "<h1>The papers' figures, reproduced by joinlab</h1>\n<p>Scale " << html_escape(facts.scale) << ", backend "
        << html_escape(facts.backend) << ", commit " << html_escape(facts.commit) << ", " << html_escape(facts.date) << ", "
        << num(facts.seconds, "%.1f") << " s. " << kNotThePapers
        << " The bound is the analytic one: the time the run's bytes take through its tightest resource; the busiest "
           "resource per phase is read from the run's trace (the share of the phase it was busy).</p>\n<ul>\n";
    for (auto& f : figures)
      out << "<li><a href=\"#" << html_escape(f.id()) << "\">" << html_escape(f.id()) << "</a>: " << html_escape(f.title) << "</li>\n";
    out << "</ul>\n";
    if (!facts.left_out.empty()) {
      out << "<p>Not run here:</p>\n<ul>\n";
      for (auto& l : facts.left_out) out << "<li>" << html_escape(l) << "</li>\n";
      out << "</ul>\n";
    }
    for (auto& f : figures) {
      out << "<h2 id=\"" << html_escape(f.id()) << "\">" << html_escape(f.id() + ": " + f.title) << "</h2>\n";
      if (!f.measures.empty()) out << "<p>" << html_escape(f.measures) << "</p>\n";
      out << "<p>From " << html_escape(about(f)) << "; CSV: <a href=\"" << html_escape(f.id()) << ".csv\">"
          << html_escape(f.name) << ".csv</a>.</p>\n";
      if (!f.left_out.empty()) out << "<p>" << html_escape(f.left_out) << ".</p>\n";
      if (facts.plots.empty()) out << "<p><img src=\"" << html_escape(f.id()) << ".png\" alt=\"" << html_escape(f.title) << "\"></p>\n";
      else out << "<p>(plot skipped: " << html_escape(facts.plots) << ")</p>\n";
      const Cells t = point_table(f);
      out << "<table><tr>";
      for (auto& h : t.header) out << "<th>" << html_escape(h) << "</th>";
      out << "</tr>\n";
      for (auto& r : t.rows) {
        out << "<tr>";
        for (size_t i = 0; i < r.size(); ++i) out << (i >= 2 && i < 6 ? "<td class=\"n\">" : "<td>") << html_escape(r[i]) << "</td>";
        out << "</tr>\n";
      }
      out << "</table>\n";
    }
    out << "</body></html>\n";
  });
}

// What plots/reproduce.py draws: one entry per figure, paths relative to the index's folder.
void write_manifest(const std::string& path, const std::vector<Figure>& figures) {
  write_file_whole(path, "the figures' manifest", [&](std::ostream& out) {
    out << "{\"figures\": [\n";
    for (size_t i = 0; i < figures.size(); ++i) {
      const Figure& f = figures[i];
      std::vector<std::string> series;
      for (auto& s : f.series) series.push_back(json_string(s));
      out << "  {\"paper\": " << json_string(f.paper) << ", \"figure\": " << json_string(f.name)
          << ", \"csv\": " << json_string(f.id() + ".csv") << ", \"png\": " << json_string(f.id() + ".png")
          << ", \"title\": " << json_string(f.title + (f.file == f.full_file ? "" : " (scaled down)")) << ", \"x\": " << json_string(f.x)
          << ", \"x_label\": " << json_string(f.x_label) << ", \"y\": " << json_string(f.y)
          << ", \"y_label\": " << json_string(f.y_label) << ", \"y_factor\": " << num(f.y_factor, "%.17g")
          << ", \"series\": [" << join(series, ", ") << "], \"logx\": " << (f.logx ? "true" : "false")
          << ", \"logy\": " << (f.logy ? "true" : "false") << "}" << (i + 1 < figures.size() ? "," : "") << "\n";
    }
    out << "]}\n";
  });
}

// A python3 that has matplotlib: $JOINLAB_PYTHON, else python3 on the PATH, else the system's
// (Debian's python3-matplotlib belongs to /usr/bin/python3, which a python3 of one's own on the
// PATH may hide). "" if none.
std::string plotting_python() {
  std::vector<std::string> candidates;
  if (const char* env = std::getenv("JOINLAB_PYTHON")) candidates.push_back(env);
  else candidates = {"python3", "/usr/bin/python3"};
  for (auto& py : candidates)
    if (std::system(("'" + py + "' -c 'import matplotlib' >/dev/null 2>&1").c_str()) == 0) return py;
  return "";
}

// Draws every figure; "" if drawn, else why not (the report says it in place of the plots).
std::string draw(const std::string& out_dir, const std::string& manifest, bool quiet) {
  const std::string py = plotting_python();
  if (py.empty()) return "no python3 with matplotlib (Debian: apt-get install python3-matplotlib)";
  const std::string script = joinlab_root() + "/plots/reproduce.py";
  const std::string log = out_dir + "/plots.log";
  const std::string cmd = "'" + py + "' '" + script + "' '" + manifest + "' >'" + log + "' 2>&1";
  if (std::system(cmd.c_str()) != 0) {
    if (!quiet) std::cerr << "joinlab: reproduce: " << script << " failed, see " << log << "\n";
    return script + " failed (" + log + ")";
  }
  return "";
}

}  // namespace

int reproduce_command(const std::vector<std::string>& args) {
  const ReproduceArgs a = parse_args(args);
  const auto start = std::chrono::steady_clock::now();
  const std::string dir = joinlab_root() + "/experiments/papers";
  std::vector<Figure> figures;
  // Every figure is planned and checked before the first runs: bad input costs no work.
  int total = 0;
  // On a GPU backend the points of more ranks than this machine has GPUs are left out (the small
  // variants are sized for one or two GPUs; ranks sharing a GPU are for tests of the transport).
  const int gpus = a.backend.empty() ? 0 : make_backend(a.backend)->gpus();
  std::vector<std::string> left_out;
  for (auto& [paper, name] : select(paper_figures(dir), a.selectors)) {
    Figure f;
    f.paper = paper;
    f.name = name;
    f.full_file = dir + "/" + paper + "/" + name + ".ini";
    const std::string small = dir + "/" + paper + "/" + name + "-small.ini";
    f.file = a.scale == "small" && fs::exists(small) ? small : f.full_file;
    f.shown = "experiments/papers/" + paper + "/" + fs::path(f.file).filename().string();
    std::vector<Override> overrides;
    if (!a.backend.empty()) overrides.push_back({"experiment.backend", a.backend});
    f.plan = plan_experiment(f.file, overrides);
    resolve_drawing(f);
    if (gpus > 0) {
      std::vector<std::string> labels;
      auto& points = f.plan.points;
      points.erase(std::remove_if(points.begin(), points.end(),
                                  [&](const PlannedPoint& p) {
                                    const bool more = p.run.cluster.shape.size() > gpus;
                                    if (more) labels.push_back(p.label().empty() ? "its one point" : p.label());
                                    return more;
                                  }),
                   points.end());
      const std::string why = "needs more ranks than this machine's " + std::to_string(gpus) + " GPU" +
                              (gpus == 1 ? "" : "s") + " (" + join(labels, "; ") + ")";
      if (points.empty()) {
        left_out.push_back(f.id() + ": " + why);
        continue;
      }
      if (!labels.empty()) f.left_out = std::to_string(labels.size()) + " point" + (labels.size() == 1 ? "" : "s") + " not run here: " + why;
    }
    total += int(f.plan.points.size());
    figures.push_back(std::move(f));
  }
  if (a.dry_run) {
    for (auto& l : left_out) std::cout << "not run here: " << l << "\n";
    for (auto& f : figures)
      std::cout << f.id() << ": " << f.shown << ", " << f.plan.points.size() << " run point"
                << (f.plan.points.size() == 1 ? "" : "s") << ", all valid; x " << f.x << ", y " << f.y
                << (f.series.empty() ? "" : ", series " + join(f.series, " ")) << "\n";
    return kExitOk;
  }
  std::ostream muted(nullptr);
  std::ostream& info = a.quiet ? muted : std::cerr;
  set_quiet(a.quiet);
  info << "joinlab: reproduce: " << figures.size() << " figure" << (figures.size() == 1 ? "" : "s") << ", " << total
       << " run points, scale " << a.scale << "\n";
  for (auto& f : figures) make_output_dir(a.out + "/" + f.paper, "--out");
  ProgressTicker ticker(std::cerr, !a.quiet);
  int done = 0;
  for (auto& f : figures) {
    ResultsTable table(a.quiet ? muted : std::cout, !f.plan.swept_keys.empty());
    if (!a.quiet) {
      std::lock_guard<std::mutex> g(console_mutex());
      std::cout << "\n" << f.id() << " (" << f.shown << ")\n";
      table.print_header();
    }
    PlanRun how;
    how.csv = a.out + "/" + f.id() + ".csv";
    how.table = &table;
    how.ticker = &ticker;
    how.first = done;
    how.total = total;
    f.rows = run_plan(f.plan, how);
    done += int(f.rows.size());
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::lock_guard<std::mutex> g(console_mutex());
    info << "joinlab: reproduce: " << f.id() << " done; " << done << "/" << total << " points, elapsed "
         << num(elapsed, "%.1f") << " s, about " << num(std::max(seconds_left(elapsed, done, total), 0.0), "%.0f")
         << " s left\n";
  }
  const std::string manifest = a.out + "/index.json";
  write_manifest(manifest, figures);
  RunFacts facts;
  facts.scale = a.scale;
  facts.backend = a.backend.empty() ? "as each file says" : a.backend;
  facts.left_out = left_out;
  facts.commit = git_commit();
  facts.date = utc_timestamp();
  facts.plots = draw(a.out, manifest, a.quiet);
  if (!facts.plots.empty()) info << "joinlab: reproduce: plots skipped: " << facts.plots << "\n";
  facts.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  write_markdown(a.out + "/index.md", figures, facts);
  write_html(a.out + "/index.html", figures, facts);
  info << "joinlab: reproduce: wrote " << a.out << "/index.md, index.html and <paper>/<figure>.csv"
       << (facts.plots.empty() ? ", .png" : "") << " in " << num(facts.seconds, "%.1f") << " s\n";
  return kExitOk;
}

}  // namespace joinlab
