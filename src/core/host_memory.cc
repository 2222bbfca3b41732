#include "core/host_memory.h"

#include <algorithm>
#include <charconv>
#include <fstream>
#include <sstream>
#include <string>

namespace strata {
namespace {

std::optional<uint64_t> parse_u64(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.remove_suffix(1);
  uint64_t v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size() || s.empty()) return std::nullopt;
  return v;
}

std::optional<std::string> read_text(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// The room under the limits of the cgroup at `dir` and of every ancestor up to `root`.
std::optional<uint64_t> cgroup2_room(const std::string& root, std::string dir) {
  std::optional<uint64_t> room;
  for (;;) {
    const std::string base = root + dir;
    auto limit = read_text(base + "/memory.max");
    auto usage = read_text(base + "/memory.current");
    if (limit && usage) {
      if (auto r = cgroup_room(*limit, *usage)) room = room ? std::min(*room, *r) : *r;
    }
    if (dir.empty() || dir == "/") return room;
    const size_t slash = dir.find_last_of('/');
    dir = slash == std::string::npos || slash == 0 ? "" : dir.substr(0, slash);
  }
}

}  // namespace

std::optional<uint64_t> meminfo_available(std::string_view meminfo) {
  constexpr std::string_view kKey = "MemAvailable:";
  size_t at = meminfo.find(kKey);
  if (at == std::string_view::npos) return std::nullopt;
  std::string_view rest = meminfo.substr(at + kKey.size());
  rest = rest.substr(0, rest.find('\n'));
  const size_t kb = rest.find("kB");
  if (kb == std::string_view::npos) return std::nullopt;
  const auto v = parse_u64(rest.substr(0, kb));
  if (!v || *v > (UINT64_MAX >> 10)) return std::nullopt;
  return *v << 10;
}

std::optional<uint64_t> cgroup_room(std::string_view limit, std::string_view usage) {
  // cgroup v1 writes "no limit" as the largest page-aligned signed value (about 2^63).
  constexpr uint64_t kNoLimit = uint64_t{1} << 62;
  const auto l = parse_u64(limit);
  const auto u = parse_u64(usage);
  if (!l || !u || *l >= kNoLimit) return std::nullopt;
  return *l > *u ? *l - *u : 0;
}

uint64_t host_memory_available() {
  uint64_t avail = 0;
  if (auto text = read_text("/proc/meminfo")) avail = meminfo_available(*text).value_or(0);
  std::optional<uint64_t> room;
  if (auto cg = read_text("/proc/self/cgroup")) {
    std::istringstream lines(*cg);
    for (std::string line; std::getline(lines, line);) {
      // "0::/path" (v2) or "N:memory:/path" (v1, possibly among other controllers).
      const size_t a = line.find(':');
      const size_t b = a == std::string::npos ? a : line.find(':', a + 1);
      if (b == std::string::npos) continue;
      const std::string controllers = line.substr(a + 1, b - a - 1);
      const std::string path = line.substr(b + 1);
      std::optional<uint64_t> r;
      if (controllers.empty()) {
        r = cgroup2_room("/sys/fs/cgroup", path);
      } else if (("," + controllers + ",").find(",memory,") != std::string::npos) {
        // In a cgroup namespace the path is relative to the mount: try it, then the mount.
        for (const std::string& base :
             {"/sys/fs/cgroup/memory" + path, std::string("/sys/fs/cgroup/memory")}) {
          auto limit = read_text(base + "/memory.limit_in_bytes");
          auto usage = read_text(base + "/memory.usage_in_bytes");
          if (!limit || !usage) continue;
          r = cgroup_room(*limit, *usage);
          break;
        }
      }
      if (r) room = room ? std::min(*room, *r) : *r;
    }
  }
  if (room && (avail == 0 || *room < avail)) return *room;
  return avail;
}

}  // namespace strata
