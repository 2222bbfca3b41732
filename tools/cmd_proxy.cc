// strata proxy [--listen [HOST:]PORT] --to HOST:PORT [--delay-ms D] [--mbit B] [--max-held BYTES]
// A TCP relay that behaves like a link of D ms one way and B Mbit/s each way, for benchmarks of
// real networks on one machine (net/proxy.h). Stops on SIGINT or SIGTERM.
#include <signal.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <thread>

#include "commands.h"
#include "flags.h"
#include "net/proxy.h"

namespace strata::tools {
namespace {

// Above a terabit per second and a minute of delay, a number is a typo, not a link.
constexpr double kMaxMbit = 1e6;
constexpr double kMaxDelayMs = 60000;

Result<net::ProxyOptions> proxy_options(const Flags& flags) {
  net::ProxyOptions o;
  const std::string listen = flags.get_or("--listen", "0");
  o.listen = listen.find(':') == std::string::npos ? "127.0.0.1:" + listen : listen;
  if (!flags.has("--to")) return invalid_argument("--to HOST:PORT is required");
  o.target = *flags.get("--to");
  STRATA_ASSIGN_OR_RETURN(double delay_ms, flags.get_double("--delay-ms", 0));
  if (!(delay_ms >= 0 && delay_ms <= kMaxDelayMs)) {
    return out_of_range("--delay-ms " + *flags.get("--delay-ms") + ": must be from 0 to " +
                        std::to_string(static_cast<int>(kMaxDelayMs)));
  }
  o.link.delay_ns = std::llround(delay_ms * 1e6);
  STRATA_ASSIGN_OR_RETURN(double mbit, flags.get_double("--mbit", 0));
  if (!(mbit >= 0 && mbit <= kMaxMbit)) {
    return out_of_range("--mbit " + *flags.get("--mbit") + ": must be from 0 (no limit) to " +
                        std::to_string(static_cast<int64_t>(kMaxMbit)));
  }
  o.link.bits_per_second = static_cast<uint64_t>(std::llround(mbit * 1e6));
  if (mbit > 0 && o.link.bits_per_second == 0) o.link.bits_per_second = 1;
  STRATA_ASSIGN_OR_RETURN(int64_t held,
                          flags.get_int("--max-held", static_cast<int64_t>(o.max_held_bytes), 1,
                                        static_cast<int64_t>(net::kMaxHeldBytesLimit)));
  o.max_held_bytes = static_cast<size_t>(held);
  return o;
}

}  // namespace

int cmd_proxy(const Args& args) {
  Flags flags({"--listen", "--to", "--delay-ms", "--mbit", "--max-held"}, {"-h|--help"});
  if (Status s = flags.parse(args); !s) return fail("proxy", s);
  if (flags.has("--help")) {
    std::printf(
        "usage: strata proxy [--listen [HOST:]PORT] --to HOST:PORT [--delay-ms D] [--mbit B]\n"
        "Relays every TCP connection made to --listen to --to, as a link would carry it: each\n"
        "byte reaches the other side D ms after it was sent (one way), and each direction\n"
        "carries at most B Mbit/s (bytes queue behind each other: a serialisation-time model,\n"
        "as netem's \"delay D rate B\"). For benchmarks of real networks on one machine.\n"
        "  --listen [HOST:]PORT  address to listen on (default 127.0.0.1, port 0: a free one;\n"
        "                        the first line of output names it)\n"
        "  --to HOST:PORT        the target of every connection (a worker)\n"
        "  --delay-ms D          one-way delay of each direction, may be fractional (default 0)\n"
        "  --mbit B              rate of each direction in Mbit/s (default 0: no limit)\n"
        "  --max-held BYTES      bytes a direction holds before it stops reading its sender, so\n"
        "                        that TCP flow control holds the sender back (default %zu)\n",
        net::ProxyOptions{}.max_held_bytes);
    return 0;
  }
  Result<net::ProxyOptions> options = proxy_options(flags);
  if (!options) return fail("proxy", options.status());

  // Block the stop signals in every thread; one thread waits for them and stops the proxy.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  Result<std::unique_ptr<net::Proxy>> proxy = net::Proxy::start(*options);
  if (!proxy) return fail("proxy", proxy.status());
  if ((*proxy)->beyond_loopback()) {
    std::fprintf(stderr,
                 "strata proxy: WARNING: listening on %s beyond this machine: anyone who can\n"
                 "strata proxy: WARNING: reach this port reaches %s through it.\n",
                 (*proxy)->address().c_str(), options->target.c_str());
  }
  const net::LinkShape& link = options->link;
  char rate[64] = "no rate limit";
  if (link.bits_per_second > 0) {
    std::snprintf(rate, sizeof(rate), "%g Mbit/s", static_cast<double>(link.bits_per_second) / 1e6);
  }
  std::printf("strata proxy: listening on %s (to %s, %g ms one way, %s each way)\n",
              (*proxy)->address().c_str(), options->target.c_str(),
              static_cast<double>(link.delay_ns) / 1e6, rate);
  std::fflush(stdout);

  net::Proxy* p = proxy->get();
  std::thread waiter([p, stop_signals] {
    int sig = 0;
    sigwait(&stop_signals, &sig);
    std::fprintf(stderr, "strata proxy: signal %d, stopping\n", sig);
    p->stop();
  });
  p->wait();
  waiter.join();
  return 0;
}

}  // namespace strata::tools
