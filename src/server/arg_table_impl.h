// Template definitions of arg_table.h.
#pragma once

#include <algorithm>
#include <set>

namespace strata::server {
namespace arg_detail {

std::string join_names(const std::vector<std::string>& a, const std::vector<std::string>& b);
std::string wrap_help(const std::string& head, const std::string& body);
const char* section_title(ArgSection s);

}  // namespace arg_detail

template <typename Target>
Result<ArgReport> parse_arg_table(const std::vector<ArgRow<Target>>& table,
                                  const std::vector<std::string>& args, const EnvLookup& env,
                                  Target& target) {
  struct Given {
    const ArgRow<Target>* row;
    std::string spelled;  // as the user wrote it, for messages
    std::string value;
  };
  std::vector<Given> from_env, from_args;
  for (const ArgRow<Target>& row : table) {
    if (row.env == nullptr || !env) continue;
    const char* v = env(row.env);
    if (v == nullptr) continue;
    std::string value = v;
    if (row.kind == ArgKind::kSwitch) {
      Result<bool> b = parse_arg_bool(value);
      if (!b) return invalid_argument(std::string(row.env) + ": " + b.status().message());
      value = *b ? "true" : "false";
    }
    from_env.push_back({&row, row.env, value});
  }
  for (size_t i = 0; i < args.size(); ++i) {
    std::string name = args[i], value;
    bool has_inline = false;
    if (name.rfind("--", 0) == 0) {
      if (size_t eq = name.find('='); eq != std::string::npos) {
        value = name.substr(eq + 1);
        name = name.substr(0, eq);
        has_inline = true;
      }
    }
    const ArgRow<Target>* found = nullptr;
    bool negated = false;
    for (const ArgRow<Target>& row : table) {
      if (std::find(row.names.begin(), row.names.end(), name) != row.names.end()) {
        found = &row;
      } else if (std::find(row.negations.begin(), row.negations.end(), name) !=
                 row.negations.end()) {
        found = &row;
        negated = true;
      }
      if (found) break;
    }
    if (found == nullptr) {
      if (name.size() > 1 && name[0] == '-') {
        return invalid_argument("unknown flag " + name + " (see --help)");
      }
      return invalid_argument("unexpected argument '" + args[i] + "' (see --help)");
    }
    if (found->kind == ArgKind::kSwitch) {
      if (has_inline) {
        Result<bool> b = parse_arg_bool(value);
        if (!b) return invalid_argument("flag " + name + ": " + b.status().message());
        value = (*b != negated) ? "true" : "false";
      } else {
        value = negated ? "false" : "true";
      }
    } else if (!has_inline) {
      if (i + 1 >= args.size()) return invalid_argument("flag " + name + " needs a value");
      value = args[++i];
    }
    from_args.push_back({found, name, value});
  }

  ArgReport report;
  std::set<const ArgRow<Target>*> reported;
  for (const std::vector<Given>* list : {&from_env, &from_args}) {
    for (const Given& g : *list) {
      const ArgRow<Target>& row = *g.row;
      if (row.effect == ArgEffect::kRefused &&
          !(row.quiet_when != nullptr && g.value == row.quiet_when)) {
        return invalid_argument(g.spelled + " is not supported: " + row.note);
      }
      if (row.set) {
        if (Status s = row.set(target, g.value); !s) {
          return invalid_argument(g.spelled + ": " + s.message());
        }
      }
      const bool quiet = row.quiet_when != nullptr && g.value == row.quiet_when;
      if (row.effect != ArgEffect::kApplied && !quiet && reported.insert(&row).second) {
        report.notes.push_back(
            std::string(row.effect == ArgEffect::kIgnored ? "ignored " : "accepted, not applied ") +
            g.spelled + ": " + row.note);
      }
    }
  }
  return report;
}

template <typename Target>
std::string arg_table_help(const std::vector<ArgRow<Target>>& table) {
  std::string out;
  for (ArgSection section :
       {ArgSection::kCommon, ArgSection::kSampling, ArgSection::kServer, ArgSection::kStrata}) {
    std::string block;
    for (const ArgRow<Target>& row : table) {
      if (row.section != section) continue;
      if (row.effect == ArgEffect::kIgnored || row.effect == ArgEffect::kRefused) continue;
      std::string head = arg_detail::join_names(row.names, row.negations);
      if (row.kind == ArgKind::kValue && *row.value_name) head += std::string(" ") + row.value_name;
      std::string body = row.help;
      if (*row.default_text) body += std::string(" (default: ") + row.default_text + ")";
      if (row.effect == ArgEffect::kPending)
        body += std::string(" [not applied yet: ") + row.note + "]";
      if (row.env) body += std::string(" (env: ") + row.env + ")";
      block += arg_detail::wrap_help(head, body);
    }
    if (!block.empty())
      out += std::string("\n") + arg_detail::section_title(section) + ":\n" + block;
  }
  for (ArgEffect effect : {ArgEffect::kIgnored, ArgEffect::kRefused}) {
    std::string names;
    for (const ArgRow<Target>& row : table) {
      if (row.effect != effect) continue;
      names += (names.empty() ? "" : ", ") + arg_detail::join_names(row.names, row.negations);
    }
    if (names.empty()) continue;
    out += effect == ArgEffect::kIgnored
               ? "\nAccepted for llama-server compatibility and ignored (reported at start):\n"
               : "\nRefused (not supported; an error at start):\n";
    out += arg_detail::wrap_help("", names);
  }
  return out;
}

}  // namespace strata::server
