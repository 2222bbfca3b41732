#include "server/router_catalog.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "server/serve_args.h"

namespace strata::server {
namespace {

namespace fs = std::filesystem;
using Row = ArgRow<ServeArgs>;

// A preset is a page of settings: 1 MiB and 4096 sections are far beyond any real one and bound
// what a mistaken path (a GGUF given as the preset) makes us read.
constexpr std::streamsize kMaxPresetBytes = 1 << 20;
constexpr size_t kMaxPresetModels = 4096;

// Set by the router for every child (address, keys, TLS, the model and its name), or the
// router's own (its sources and limits): never inherited, never in a preset.
const char* const kReserved[] = {
    "--models-dir",   "--models-preset", "--models-max",   "--models-autoload",
    "--host",         "--port",          "--api-key",      "--api-key-file",
    "--ssl-key-file", "--ssl-cert-file", "--model",        "--alias",
    "--api-prefix",   "--path",          "--reuse-port",   "--log-file",
    "--help",         "--version",       "--list-devices",
};

bool has_name(const Row& row, const std::string& name) {
  return std::find(row.names.begin(), row.names.end(), name) != row.names.end() ||
         std::find(row.negations.begin(), row.negations.end(), name) != row.negations.end();
}

const Row* row_spelled(const std::string& spelled) {
  for (const Row& row : serve_arg_table()) {
    if (has_name(row, spelled)) return &row;
  }
  return nullptr;
}

bool row_reserved(const Row& row) {
  for (const char* r : kReserved) {
    if (has_name(row, r)) return true;
  }
  return false;
}

bool row_is(const Row& row, const char* name) { return has_name(row, name); }

// The row a preset key names: a flag without its dashes, or an environment variable.
const Row* row_for_key(const std::string& key, bool* negated) {
  *negated = false;
  for (const Row& row : serve_arg_table()) {
    if (row.env != nullptr && key == row.env) return &row;
    for (const std::string& n : row.names) {
      if (n == "--" + key || n == "-" + key) return &row;
    }
    for (const std::string& n : row.negations) {
      if (n == "--" + key || n == "-" + key) {
        *negated = true;
        return &row;
      }
    }
  }
  return nullptr;
}

std::string long_name(const Row& row) {
  for (const std::string& n : row.names) {
    if (n.rfind("--", 0) == 0) return n;
  }
  return row.names.front();
}

std::string trim(const std::string& s) {
  const size_t a = s.find_first_not_of(" \t\r");
  if (a == std::string::npos) return "";
  const size_t b = s.find_last_not_of(" \t\r");
  return s.substr(a, b - a + 1);
}

std::string unquote(const std::string& s) {
  if (s.size() >= 2 &&
      ((s.front() == '"' && s.back() == '"') || (s.front() == '\'' && s.back() == '\''))) {
    return s.substr(1, s.size() - 2);
  }
  return s;
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool is_model_file(const std::string& name) {
  return ends_with(name, ".gguf") && name.find("mmproj") == std::string::npos;
}

// The flags one preset line stands for, checked by the flag table itself.
Result<std::vector<std::string>> render_key(const std::string& key, const std::string& value) {
  bool negated = false;
  const Row* row = row_for_key(key, &negated);
  if (row == nullptr) return invalid_argument("unknown key '" + key + "'");
  if (row_reserved(*row)) {
    return invalid_argument("'" + key + "' is set by the router, not by a preset");
  }
  std::vector<std::string> out;
  if (row->kind == ArgKind::kSwitch) {
    STRATA_ASSIGN_OR_RETURN(bool on, parse_arg_bool(value));
    out.push_back(long_name(*row) + "=" + ((on != negated) ? "true" : "false"));
  } else {
    const std::string name = long_name(*row);
    if (name.rfind("--", 0) == 0) {
      out.push_back(name + "=" + value);
    } else {
      out = {name, value};
    }
  }
  ServeArgs scratch;
  Result<ArgReport> checked = parse_arg_table(serve_arg_table(), out, EnvLookup{}, scratch);
  if (!checked) return checked.status();
  return out;
}

}  // namespace

Result<std::vector<ModelSource>> models_dir_scan(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    return invalid_argument("--models-dir: '" + dir + "' is not a folder");
  }
  std::vector<ModelSource> out;
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
    const std::string file = e.path().filename().string();
    if (e.is_regular_file(ec) && is_model_file(file)) {
      out.push_back({file.substr(0, file.size() - 5), e.path().string(), {}, false, 10});
    } else if (e.is_directory(ec)) {
      // A folder is one model when it holds exactly one model file (projectors aside).
      std::vector<std::string> files;
      for (const fs::directory_entry& f : fs::directory_iterator(e.path(), ec)) {
        if (f.is_regular_file(ec) && is_model_file(f.path().filename().string())) {
          files.push_back(f.path().string());
        }
      }
      if (files.size() == 1) out.push_back({file, files[0], {}, false, 10});
    }
  }
  if (ec) return io_error("--models-dir: cannot list '" + dir + "': " + ec.message());
  std::sort(out.begin(), out.end(),
            [](const ModelSource& a, const ModelSource& b) { return a.name < b.name; });
  return out;
}

Result<Preset> preset_parse(const std::string& text, const std::string& file_name) {
  Preset preset;
  std::istringstream in(text);
  std::string raw;
  int line_no = 0;
  // Where a line's key goes: the global section, a model, or nowhere yet (before any section,
  // where only `version` is allowed).
  enum class Where { kTop, kGlobal, kModel } where = Where::kTop;
  std::set<std::string> seen;
  while (std::getline(in, raw)) {
    ++line_no;
    auto fail = [&](const std::string& what) {
      return invalid_argument(file_name + ":" + std::to_string(line_no) + ": " + what);
    };
    const std::string line = trim(raw);
    if (line.empty() || line[0] == ';' || line[0] == '#') continue;
    if (line[0] == '[') {
      if (line.back() != ']') return fail("a section header must end with ']'");
      const std::string name = trim(line.substr(1, line.size() - 2));
      if (name.empty()) return fail("a section needs a name");
      if (!seen.insert(name).second) return fail("section [" + name + "] appears twice");
      if (name == "*") {
        where = Where::kGlobal;
        continue;
      }
      if (preset.models.size() >= kMaxPresetModels) {
        return fail("more than " + std::to_string(kMaxPresetModels) + " models");
      }
      preset.models.push_back({name, "", {}, false, 10});
      where = Where::kModel;
      continue;
    }
    const size_t eq = line.find('=');
    if (eq == std::string::npos) return fail("expected 'key = value', [section] or a comment");
    const std::string key = trim(line.substr(0, eq));
    const std::string value = unquote(trim(line.substr(eq + 1)));
    if (key.empty()) return fail("a key is missing before '='");
    if (where == Where::kTop) {
      if (key == "version") {
        if (value != "1") return fail("version " + value + " is not supported (1 is)");
        continue;
      }
      return fail("'" + key + "' is outside any section ([*] or [MODEL])");
    }
    ModelSource* model = where == Where::kModel ? &preset.models.back() : nullptr;
    if (key == "load-on-startup") {
      Result<bool> b = parse_arg_bool(value);
      if (!b) return fail("load-on-startup: " + b.status().message());
      if (model == nullptr) return fail("load-on-startup belongs in a model's section");
      model->load_on_startup = *b;
      continue;
    }
    if (key == "stop-timeout") {
      Result<int64_t> s = parse_arg_int(value, 0, 3600);
      if (!s) return fail("stop-timeout: " + s.status().message());
      if (model == nullptr) return fail("stop-timeout belongs in a model's section");
      model->stop_timeout_s = static_cast<int>(*s);
      continue;
    }
    bool negated = false;
    if (const Row* row = row_for_key(key, &negated); row != nullptr && row_is(*row, "--model")) {
      if (model == nullptr) return fail("'" + key + "' belongs in a model's section");
      if (value.empty()) return fail("'" + key + "' needs a file");
      model->path = value;
      continue;
    }
    Result<std::vector<std::string>> flags = render_key(key, value);
    if (!flags) return fail(flags.status().message());
    std::vector<std::string>& dest = model ? model->args : preset.global_args;
    dest.insert(dest.end(), flags->begin(), flags->end());
  }
  return preset;
}

Result<Preset> preset_load(const std::string& file) {
  std::ifstream f(file, std::ios::binary);
  if (!f) return invalid_argument("--models-preset: cannot read '" + file + "'");
  std::string text(static_cast<size_t>(kMaxPresetBytes) + 1, '\0');
  f.read(text.data(), kMaxPresetBytes + 1);
  if (f.gcount() > kMaxPresetBytes) {
    return invalid_argument("--models-preset: '" + file + "' is larger than " +
                            std::to_string(kMaxPresetBytes) + " bytes");
  }
  text.resize(static_cast<size_t>(f.gcount()));
  return preset_parse(text, file);
}

Result<std::vector<ModelSource>> models_catalog(const std::string& dir,
                                                const std::string& preset_file) {
  std::vector<ModelSource> models;
  if (!dir.empty()) {
    STRATA_ASSIGN_OR_RETURN(models, models_dir_scan(dir));
  }
  Preset preset;
  if (!preset_file.empty()) {
    STRATA_ASSIGN_OR_RETURN(preset, preset_load(preset_file));
  }
  for (ModelSource& p : preset.models) {
    auto it = std::find_if(models.begin(), models.end(),
                           [&](const ModelSource& m) { return m.name == p.name; });
    if (it == models.end()) {
      if (p.path.empty()) {
        return invalid_argument("--models-preset: [" + p.name +
                                "] is no model of --models-dir; give it 'model = FILE'");
      }
      models.push_back(std::move(p));
      continue;
    }
    if (!p.path.empty()) it->path = p.path;
    it->args = std::move(p.args);
    it->load_on_startup = p.load_on_startup;
    it->stop_timeout_s = p.stop_timeout_s;
  }
  for (ModelSource& m : models) {
    m.args.insert(m.args.begin(), preset.global_args.begin(), preset.global_args.end());
  }
  std::sort(models.begin(), models.end(),
            [](const ModelSource& a, const ModelSource& b) { return a.name < b.name; });
  return models;
}

bool router_reserved_flag(const std::string& spelled) {
  const Row* row = row_spelled(spelled);
  return row != nullptr && row_reserved(*row);
}

std::vector<std::string> router_reserved_env() {
  std::vector<std::string> out = {"AIP_MODE", "AIP_HTTP_PORT"};
  for (const Row& row : serve_arg_table()) {
    if (row.env != nullptr && row_reserved(row)) out.push_back(row.env);
  }
  return out;
}

Result<std::vector<std::string>> router_child_args(const std::vector<std::string>& router_args) {
  std::vector<std::string> out;
  for (size_t i = 0; i < router_args.size(); ++i) {
    std::string name = router_args[i];
    bool inline_value = false;
    if (name.rfind("--", 0) == 0) {
      if (const size_t eq = name.find('='); eq != std::string::npos) {
        name = name.substr(0, eq);
        inline_value = true;
      }
    }
    const Row* row = row_spelled(name);
    if (row == nullptr) return invalid_argument("unknown flag " + name + " (see --help)");
    const bool takes_next = row->kind == ArgKind::kValue && !inline_value;
    if (takes_next && i + 1 >= router_args.size()) {
      return invalid_argument("flag " + name + " needs a value");
    }
    if (!row_reserved(*row)) {
      out.push_back(router_args[i]);
      if (takes_next) out.push_back(router_args[i + 1]);
    }
    if (takes_next) ++i;
  }
  return out;
}

std::vector<std::string> child_command(const ModelSource& source,
                                       const std::vector<std::string>& inherited) {
  std::vector<std::string> argv = {"serve"};
  argv.insert(argv.end(), source.args.begin(), source.args.end());
  argv.insert(argv.end(), inherited.begin(), inherited.end());
  for (const std::string& a :
       {std::string("--model"), source.path, std::string("--host"), std::string("127.0.0.1"),
        std::string("--port"), std::string("0"), std::string("--alias"), source.name}) {
    argv.push_back(a);
  }
  return argv;
}

}  // namespace strata::server
