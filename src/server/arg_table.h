// Command-line flags as a table of rows: names, environment variable, kind, default, help, and
// what the flag sets. Parsing, the environment, reports of accepted-but-inert flags and --help
// all come from the rows; adding a flag is adding a row.
//
// Precedence: a flag on the command line wins over its environment variable, which wins over
// the default. A flag given twice keeps its last value.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "core/status.h"

namespace strata::server {

// What accepting a flag does.
enum class ArgEffect {
  kApplied,  // sets what its row says
  // Accepted and reported once as ignored: the flag cannot apply here (a GPU's setting) or
  // changes nothing but speed or logging that we do our own way. The note says which.
  kIgnored,
  // Accepted and stored, reported once as not applied yet: the part that acts on it is not in
  // this build.
  kPending,
  kRefused,  // an error naming the flag and the note: applying it wrongly would change results
};

// Where --help lists a row.
enum class ArgSection { kCommon, kSampling, kServer, kStrata };

// Switches take no value on the command line; in the environment they take true/1/on/enabled
// or false/0/off/disabled, and their setter gets "true" or "false".
enum class ArgKind { kSwitch, kValue };

template <typename Target>
struct ArgRow {
  std::vector<std::string> names;      // spellings that set (switch: to true)
  std::vector<std::string> negations;  // switch spellings that set false ("--no-mmap")
  const char* env = nullptr;           // LLAMA_ARG_*; nullptr: none
  ArgKind kind = ArgKind::kValue;
  const char* value_name = "";  // "N", "FILE" in --help
  const char* default_text = "";
  const char* help = "";
  ArgSection section = ArgSection::kCommon;
  ArgEffect effect = ArgEffect::kApplied;
  const char* note = "";  // why a row is ignored, pending or refused
  // A value that makes an ignored or pending row inert (what strata does anyway): given it,
  // the row is not reported ("false" for --no-context-shift's "false").
  const char* quiet_when = nullptr;
  // Sets the target from the value; an error names what is wrong with the value (the parser
  // adds the flag's name). May be empty for rows that set nothing.
  std::function<Status(Target&, const std::string&)> set;
};

// What parsing reports besides the target: one line per accepted flag that does nothing here.
struct ArgReport {
  std::vector<std::string> notes;
};

using EnvLookup = std::function<const char*(const char* name)>;

// Parses `args` (then, under them, the rows' environment variables) into `target`. Unknown
// flags, missing values and refused flags are errors; positional arguments are errors too.
template <typename Target>
Result<ArgReport> parse_arg_table(const std::vector<ArgRow<Target>>& table,
                                  const std::vector<std::string>& args, const EnvLookup& env,
                                  Target& target);

// --help text of the rows: applied and pending rows in full, then one line each naming the
// ignored and the refused flags.
template <typename Target>
std::string arg_table_help(const std::vector<ArgRow<Target>>& table);

// "true"/"1"/"on"/"enabled" -> true, "false"/"0"/"off"/"disabled" -> false.
Result<bool> parse_arg_bool(const std::string& text);

// The value parsers the rows use; errors name the value and the range.
Result<int64_t> parse_arg_int(const std::string& text, int64_t min, int64_t max);
Result<double> parse_arg_double(const std::string& text, double min, double max);

}  // namespace strata::server

#include "server/arg_table_impl.h"
