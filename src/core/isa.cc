#include "core/isa.h"

#include <atomic>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

namespace strata {
namespace {

#if defined(__x86_64__) || defined(__i386__)
// F16C from CPUID leaf 1 (ECX bit 29): clang's __builtin_cpu_supports does not know "f16c".
bool has_f16c() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  return __get_cpuid(1, &a, &b, &c, &d) != 0 && (c & bit_F16C) != 0;
}

// AVX-VNNI from CPUID leaf 7, sub-leaf 1 (EAX bit 4); clang 14 does not know "avxvnni" either.
// The OS's saving of the ymm registers is already known from the AVX2 check.
bool has_avx_vnni() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  return __get_cpuid_count(7, 1, &a, &b, &c, &d) != 0 && (a & (1u << 4)) != 0;
}
#endif

// Bit i: the CPU supports level i.
unsigned detect() {
  unsigned levels = 1u << static_cast<int>(Isa::kScalar);
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma") || !has_f16c()) {
    return levels;
  }
  levels |= 1u << static_cast<int>(Isa::kAvx2);
  if (has_avx_vnni()) levels |= 1u << static_cast<int>(Isa::kAvxVnni);
  // The AVX-512 kernels also use AVX2 code (the activation quantisers, the final sums), and
  // BMI2's pdep (every AVX-512 CPU has it).
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
      __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("bmi2")) {
    levels |= 1u << static_cast<int>(Isa::kAvx512);
  }
#endif
  return levels;
}

unsigned supported_levels() {
  static const unsigned levels = detect();
  return levels;
}

// The highest supported level at or below `isa`.
Isa clamp(Isa isa) {
  for (int level = static_cast<int>(isa); level > 0; --level) {
    if (isa_supported(static_cast<Isa>(level))) return static_cast<Isa>(level);
  }
  return Isa::kScalar;
}

Isa initial() {
  Isa best = isa_best_supported();
  // STRATA_ISA=scalar|avx2|avxvnni|avx512 lowers the choice (for A/B runs); it never raises it.
  if (const char* env = std::getenv("STRATA_ISA")) {
    bool known = false;
    for (int level = 0; level < kIsaLevels; ++level) {
      if (std::strcmp(env, isa_name(static_cast<Isa>(level))) == 0) {
        known = true;
        if (static_cast<Isa>(level) < best) best = clamp(static_cast<Isa>(level));
      }
    }
    if (!known) {
      std::fprintf(stderr, "STRATA_ISA=%s is not one of scalar, avx2, avxvnni, avx512: ignored\n",
                   env);
    }
  }
  return best;
}

std::atomic<Isa>& active() {
  static std::atomic<Isa> isa{initial()};
  return isa;
}

// AMD's CPUs from family 0x1A (Zen 5) on.
bool is_zen5_or_later() {
#if defined(__x86_64__) || defined(__i386__)
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid(0, &a, &b, &c, &d) == 0) return false;
  char vendor[12];
  std::memcpy(vendor, &b, 4);
  std::memcpy(vendor + 4, &d, 4);
  std::memcpy(vendor + 8, &c, 4);
  if (std::memcmp(vendor, "AuthenticAMD", 12) != 0 || __get_cpuid(1, &a, &b, &c, &d) == 0) {
    return false;
  }
  const unsigned base = a >> 8 & 0xf, extended = a >> 20 & 0xff;
  return (base == 0xf ? base + extended : base) >= 0x1a;
#else
  return false;
#endif
}

size_t initial_rows16_prefetch() {
  // Two q4_K super-blocks of a group (BM_DecodeOrder/q4_K_r16/4 on a Zen 5, docs/engine.md).
  size_t bytes = is_zen5_or_later() ? 4608 : 0;
  if (const char* env = std::getenv("STRATA_ROWS16_PREFETCH")) {
    if (const std::optional<size_t> v = parse_rows16_prefetch(env)) {
      bytes = *v;
    } else {
      std::fprintf(stderr, "STRATA_ROWS16_PREFETCH=%s is not a byte count of 0..65536: ignored\n",
                   env);
    }
  }
  return bytes;
}

}  // namespace

std::optional<size_t> parse_rows16_prefetch(std::string_view text) {
  size_t v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size() || v > 65536) {
    return std::nullopt;
  }
  return v;
}

size_t rows16_prefetch_bytes() {
  static const size_t bytes = initial_rows16_prefetch();
  return bytes;
}

Isa isa_best_supported() { return clamp(static_cast<Isa>(kIsaLevels - 1)); }

bool isa_supported(Isa isa) { return (supported_levels() >> static_cast<int>(isa) & 1u) != 0; }

Isa isa_active() { return active().load(std::memory_order_relaxed); }

void isa_force(Isa isa) { active().store(clamp(isa), std::memory_order_relaxed); }

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::kScalar:
      return "scalar";
    case Isa::kAvx2:
      return "avx2";
    case Isa::kAvxVnni:
      return "avxvnni";
    case Isa::kAvx512:
      return "avx512";
  }
  return "?";
}

}  // namespace strata
