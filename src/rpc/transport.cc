// The address-scheme table, and what every transport shares.
#include "rpc/transport.h"

#include <algorithm>
#include <cstring>
#include <string_view>

#include "rpc/transport_kinds.h"

namespace strata::rpc {
namespace {

// One row per transport. An address without a scheme is TCP.
constexpr TransportKind kKinds[] = {
    {"tcp", tcp_connect, tcp_listen},
    {"unix", seqpacket_connect, seqpacket_listen},
    {"ucx", ucx_connect, ucx_listen},
};
constexpr const TransportKind& kDefaultKind = kKinds[0];

struct Chosen {
  const TransportKind* kind;
  std::string where;
};

Chosen choose(const std::string& address) {
  for (const TransportKind& k : kKinds) {
    const std::string_view scheme = k.scheme;
    const std::string_view a = address;
    if (a.size() > scheme.size() && a.substr(0, scheme.size()) == scheme &&
        a[scheme.size()] == ':') {
      const std::string_view rest = a.substr(scheme.size() + 1);
      return {&k, std::string(rest.substr(0, 2) == "//" ? rest.substr(2) : rest)};
    }
  }
  return {&kDefaultKind, address};
}

}  // namespace

Result<std::unique_ptr<Transport>> transport_connect(const std::string& address, int timeout_ms) {
  const Chosen c = choose(address);
  return c.kind->connect(address, c.where, timeout_ms);
}

Result<std::unique_ptr<Listener>> transport_listen(const std::string& address) {
  const Chosen c = choose(address);
  return c.kind->listen(address, c.where);
}

Result<Message> Transport::recv(int timeout_ms) {
  STRATA_ASSIGN_OR_RETURN(std::optional<Message> m, try_recv(timeout_ms, timeout_ms));
  if (!m) {
    return unavailable("recv from " + peer() + ": no message within " + std::to_string(timeout_ms) +
                       " ms");
  }
  return std::move(*m);
}

Status send_message(Transport& t, const Header& header, std::span<const uint8_t> payload) {
  const Piece piece = payload;
  return t.send(header, std::span<const Piece>(&piece, payload.empty() ? 0 : 1));
}

Status set_payload_size(Header* h, std::span<const Piece> pieces) {
  h->payload_size = 0;
  for (const Piece& p : pieces) {
    if (__builtin_add_overflow(h->payload_size, uint64_t{p.size()}, &h->payload_size)) {
      return internal_error("send: payload size wraps");
    }
  }
  if (h->payload_size > kMaxMessageBytes) {
    return out_of_range(std::string("send ") + command_name(h->command) + ": payload " +
                        std::to_string(h->payload_size) + " bytes, limit " +
                        std::to_string(kMaxMessageBytes));
  }
  return Status::ok();
}

Result<PayloadWriter> PayloadWriter::start(const Header& h, std::span<const uint8_t> lead,
                                           const Placer& place, Message* m) {
  PayloadWriter w;
  w.m_ = m;
  std::optional<Placement> p;
  if (place) p = place(h, lead);
  if (!p) {
    m->payload.assign(lead.begin(), lead.end());
    w.offset_ = lead.size();
    w.remaining_ = h.payload_size - lead.size();
    return w;
  }
  uint64_t total = 0;
  for (const std::span<uint8_t>& s : p->into) {
    if (__builtin_add_overflow(total, uint64_t{s.size()}, &total)) total = UINT64_MAX;
  }
  if (p->keep > lead.size() || total != h.payload_size - p->keep) {
    return internal_error("placement of " + std::string(command_name(h.command)) + ": keeps " +
                          std::to_string(p->keep) + " of a " + std::to_string(lead.size()) +
                          "-byte lead and places " + std::to_string(total) + " of " +
                          std::to_string(h.payload_size) + " payload bytes");
  }
  m->payload.assign(lead.begin(), lead.begin() + static_cast<ptrdiff_t>(p->keep));
  m->placed = true;
  w.into_ = std::move(p->into);
  w.remaining_ = total;
  w.write(lead.subspan(p->keep));
  return w;
}

size_t PayloadWriter::fill(iovec* iov, size_t max_iov, uint64_t max_bytes, size_t* n_iov,
                           bool whole_rest) {
  *n_iov = 0;
  if (remaining_ == 0 || max_iov == 0 || max_bytes == 0) return 0;
  if (!m_->placed) {
    // Room for what is asked, up to kGrowBytes more than the vector has (or all of the rest).
    std::vector<uint8_t>& v = m_->payload;
    const uint64_t want = whole_rest ? remaining_ : std::min({remaining_, max_bytes, kGrowBytes});
    if (v.size() - offset_ < want) {
      const uint64_t grow = whole_rest ? remaining_ : std::min(remaining_, kGrowBytes);
      v.resize(static_cast<size_t>(offset_ + std::max(want, grow)));
    }
    const size_t take = static_cast<size_t>(std::min<uint64_t>(v.size() - offset_, max_bytes));
    iov[0] = {v.data() + offset_, take};
    *n_iov = 1;
    return take;
  }
  size_t total = 0;
  size_t off = offset_;
  for (size_t i = part_; i < into_.size() && *n_iov < max_iov && total < max_bytes; ++i) {
    const size_t take =
        static_cast<size_t>(std::min<uint64_t>(into_[i].size() - off, max_bytes - total));
    if (take > 0) iov[(*n_iov)++] = {into_[i].data() + off, take};
    total += take;
    off = 0;
  }
  return total;
}

void PayloadWriter::advance(size_t n) {
  remaining_ -= n;
  if (!m_->placed) {
    offset_ += n;
    return;
  }
  while (n > 0 && part_ < into_.size()) {
    const size_t left = into_[part_].size() - offset_;
    if (n < left) {
      offset_ += n;
      return;
    }
    n -= left;
    ++part_;
    offset_ = 0;
  }
}

void PayloadWriter::write(std::span<const uint8_t> bytes) {
  while (!bytes.empty()) {
    iovec iov[16];
    size_t n_iov = 0;
    fill(iov, 16, bytes.size(), &n_iov);
    size_t done = 0;
    for (size_t i = 0; i < n_iov; ++i) {
      std::memcpy(iov[i].iov_base, bytes.data() + done, iov[i].iov_len);
      done += iov[i].iov_len;
    }
    if (done == 0) return;  // more bytes than the message has left: the caller checks first
    advance(done);
    bytes = bytes.subspan(done);
  }
}

}  // namespace strata::rpc
