#include "engine/seq_state.h"

#include <xxhash.h>

#include <unistd.h>
#include <algorithm>
#include <bit>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <system_error>

#include "core/check.h"

namespace strata {
namespace {

constexpr char kMagic[8] = {'S', 'T', 'R', 'A', 'T', 'A', 'K', 'V'};
constexpr size_t kHeaderHashOffset = kSeqStateHeaderBytes - 8;
// The bytes of each tensor's data that the weights hash reads: enough to tell two files with
// the same tensor table apart (different seeds, different fine-tunes), cheap enough to read
// for every context (a few pages per tensor of the mapping).
constexpr uint64_t kWeightSampleBytes = 4096;

void put_u32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
void put_u64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
uint32_t get_u32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(p[i]) << (8 * i);
  return v;
}
uint64_t get_u64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return v;
}

// Appends values to a byte string to hash, in a fixed little-endian form.
class HashInput {
 public:
  void u64(uint64_t v) {
    uint8_t b[8];
    put_u64(b, v);
    bytes_.insert(bytes_.end(), b, b + 8);
  }
  void f32(float v) {
    uint32_t bits;
    std::memcpy(&bits, &v, 4);
    u64(bits);
  }
  void str(const std::string& s) {
    u64(s.size());
    bytes_.insert(bytes_.end(), s.begin(), s.end());
  }
  uint64_t hash() const { return XXH3_64bits(bytes_.data(), bytes_.size()); }

 private:
  std::vector<uint8_t> bytes_;
};

uint64_t mul_sat(uint64_t a, uint64_t b) {
  uint64_t r;
  return __builtin_mul_overflow(a, b, &r) ? UINT64_MAX : r;
}
uint64_t add_sat(uint64_t a, uint64_t b) {
  uint64_t r;
  return __builtin_add_overflow(a, b, &r) ? UINT64_MAX : r;
}

std::string hex(uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

// "field X in the state, Y here" for every field that differs.
std::string fingerprint_diff(const SeqStateFingerprint& got, const SeqStateFingerprint& want) {
  std::string out;
  auto field = [&](const char* name, const std::string& a, const std::string& b) {
    if (a == b) return;
    out += std::string(out.empty() ? "" : "; ") + name + " " + a + " in the state, " + b + " here";
  };
  auto num = [&](const char* name, uint64_t a, uint64_t b) {
    field(name, std::to_string(a), std::to_string(b));
  };
  field("architecture", "'" + got.arch + "'", "'" + want.arch + "'");
  num("n_layer", got.n_layer, want.n_layer);
  num("n_embd", got.n_embd, want.n_embd);
  num("n_head", got.n_head, want.n_head);
  num("n_head_kv", got.n_head_kv, want.n_head_kv);
  num("head_dim", got.head_dim, want.head_dim);
  num("n_rot", got.n_rot, want.n_rot);
  num("n_vocab", got.n_vocab, want.n_vocab);
  field("KV dtype", std::string(dtype_name(got.kv_dtype)), std::string(dtype_name(want.kv_dtype)));
  field("tensor table hash", hex(got.tensor_table_hash), hex(want.tensor_table_hash));
  field("weights hash", hex(got.weights_hash), hex(want.weights_hash));
  field(
      "hyperparameters hash (norm, rope, windows, --override-kv; the rope tables follow the "
      "context size)",
      hex(got.hparams_hash), hex(want.hparams_hash));
  return out;
}

}  // namespace

SeqStateFingerprint seq_state_fingerprint(const Model& model, DType kv_dtype,
                                          const std::array<RopeTable, 2>* rope) {
  const HParams& hp = model.hparams();
  SeqStateFingerprint fp;
  fp.arch = hp.arch_name.substr(0, kSeqStateArchBytes - 1);
  fp.n_layer = static_cast<uint32_t>(hp.n_layer);
  fp.n_embd = static_cast<uint32_t>(hp.n_embd);
  fp.n_head = static_cast<uint32_t>(hp.n_head);
  fp.n_head_kv = static_cast<uint32_t>(hp.n_head_kv);
  fp.head_dim = static_cast<uint32_t>(hp.head_dim);
  fp.n_rot = static_cast<uint32_t>(hp.n_rot);
  fp.n_vocab = static_cast<uint32_t>(hp.n_vocab);
  fp.kv_dtype = kv_dtype;

  HashInput table;
  XXH3_state_t* weights = XXH3_createState();
  STRATA_CHECK(weights != nullptr, "out of memory");
  XXH3_64bits_reset(weights);
  for (const GgufTensorInfo& t : model.file().tensors()) {
    table.str(t.name);
    table.u64(static_cast<uint64_t>(t.dtype));
    for (int64_t n : t.ne) table.u64(static_cast<uint64_t>(n));
    XXH3_64bits_update(weights, model.file().tensor_data(t),
                       std::min<uint64_t>(t.size_bytes, kWeightSampleBytes));
  }
  fp.tensor_table_hash = table.hash();
  fp.weights_hash = XXH3_64bits_digest(weights);
  XXH3_freeState(weights);

  HashInput h;
  h.f32(hp.rms_eps);
  h.f32(hp.rope_freq_base);
  h.f32(hp.rope_freq_scale);
  h.u64(static_cast<uint64_t>(hp.rope_mode));
  h.f32(hp.rope_freq_base_swa);
  h.f32(hp.rope_freq_scale_swa);
  h.u64(static_cast<uint64_t>(hp.n_swa));
  h.u64(static_cast<uint64_t>(hp.swa_pattern));
  h.f32(hp.attn_scale);
  h.f32(hp.attn_softcap);
  h.f32(hp.embd_scale);
  // Metadata overrides change what the model computes in ways the fields above may not name
  // (expert_used_count, say); none, for a model opened without them, adds nothing.
  for (const GgufKv& kv : model.kv_overrides()) {
    h.str(kv.key);
    h.u64(static_cast<uint64_t>(kv.type));
    h.u64(static_cast<uint64_t>(kv.i64));
    h.u64(std::bit_cast<uint64_t>(kv.f64));
    h.str(kv.str);
  }
  if (rope != nullptr) {
    for (const RopeTable& t : *rope) {
      h.u64(t.rate.size());
      for (float r : t.rate) h.f32(r);
      h.f32(t.mscale);
    }
  }
  fp.hparams_hash = h.hash();
  return fp;
}

uint64_t seq_state_row_bytes(const SeqStateFingerprint& fp) {
  // A parsed header's fields are not checked yet: two u32 can multiply past int64. A row past
  // 2^40 values (no model has one) saturates, and so does every size made from it, which the
  // parser refuses ("state sizes overflow").
  const uint64_t values = uint64_t{fp.n_head_kv} * fp.head_dim;
  if (values > (uint64_t{1} << 40)) return UINT64_MAX;
  return dtype_row_bytes(fp.kv_dtype, static_cast<int64_t>(values));
}

uint64_t seq_state_payload_bytes(const SeqStateFingerprint& fp, uint64_t n_tokens) {
  const uint64_t rows = mul_sat(mul_sat(2, fp.n_layer), n_tokens);
  return add_sat(mul_sat(4, n_tokens), mul_sat(rows, seq_state_row_bytes(fp)));
}

HostBytes seq_state_alloc(const SeqStateFingerprint& fp, uint32_t n_tokens) {
  return HostBytes(kSeqStateHeaderBytes + seq_state_payload_bytes(fp, n_tokens), 0);
}

void seq_state_seal(const SeqStateFingerprint& fp, uint32_t n_tokens, std::span<uint8_t> state) {
  const uint64_t payload = seq_state_payload_bytes(fp, n_tokens);
  STRATA_CHECK(state.size() == kSeqStateHeaderBytes + payload, "state of the wrong size");
  uint8_t* h = state.data();
  std::memset(h, 0, kSeqStateHeaderBytes);
  std::memcpy(h, kMagic, 8);
  put_u32(h + 8, kSeqStateVersion);
  put_u32(h + 12, static_cast<uint32_t>(kSeqStateHeaderBytes));
  put_u64(h + 16, payload);
  put_u64(h + 24, XXH3_64bits(h + kSeqStateHeaderBytes, payload));
  std::memcpy(h + 32, fp.arch.data(), std::min(fp.arch.size(), kSeqStateArchBytes - 1));
  put_u32(h + 64, fp.n_layer);
  put_u32(h + 68, fp.n_embd);
  put_u32(h + 72, fp.n_head);
  put_u32(h + 76, fp.n_head_kv);
  put_u32(h + 80, fp.head_dim);
  put_u32(h + 84, fp.n_rot);
  put_u32(h + 88, fp.n_vocab);
  put_u32(h + 92, static_cast<uint32_t>(fp.kv_dtype));
  put_u64(h + 96, fp.tensor_table_hash);
  put_u64(h + 104, fp.weights_hash);
  put_u64(h + 112, fp.hparams_hash);
  put_u32(h + 120, n_tokens);
  put_u64(h + kHeaderHashOffset, XXH3_64bits(h, kHeaderHashOffset));
}

Result<SeqStateHeader> seq_state_parse_header(std::span<const uint8_t> bytes) {
  if (bytes.size() < kSeqStateHeaderBytes) {
    return invalid_argument("state of " + std::to_string(bytes.size()) +
                            " bytes: truncated, its header alone is " +
                            std::to_string(kSeqStateHeaderBytes));
  }
  const uint8_t* h = bytes.data();
  if (std::memcmp(h, kMagic, 8) != 0) {
    return invalid_argument("not a sequence state: the magic is not 'STRATAKV'");
  }
  const uint32_t version = get_u32(h + 8);
  if (version != kSeqStateVersion) {
    return unsupported("sequence state version " + std::to_string(version) +
                       ", this build reads version " + std::to_string(kSeqStateVersion));
  }
  const uint32_t header_bytes = get_u32(h + 12);
  if (header_bytes != kSeqStateHeaderBytes) {
    return invalid_argument("state header size " + std::to_string(header_bytes) +
                            ", version 1 has " + std::to_string(kSeqStateHeaderBytes));
  }
  if (get_u64(h + kHeaderHashOffset) != XXH3_64bits(h, kHeaderHashOffset)) {
    return invalid_argument("state header checksum mismatch: the header is corrupt");
  }
  SeqStateHeader out;
  SeqStateFingerprint& fp = out.fingerprint;
  const uint8_t* arch = h + 32;
  const size_t arch_len = static_cast<size_t>(std::find(arch, arch + kSeqStateArchBytes, 0) - arch);
  if (arch_len == kSeqStateArchBytes ||
      std::any_of(arch + arch_len, arch + kSeqStateArchBytes, [](uint8_t c) { return c != 0; })) {
    return invalid_argument("state field 'architecture' is not a NUL-padded string of < 32 bytes");
  }
  fp.arch.assign(reinterpret_cast<const char*>(arch), arch_len);
  fp.n_layer = get_u32(h + 64);
  fp.n_embd = get_u32(h + 68);
  fp.n_head = get_u32(h + 72);
  fp.n_head_kv = get_u32(h + 76);
  fp.head_dim = get_u32(h + 80);
  fp.n_rot = get_u32(h + 84);
  fp.n_vocab = get_u32(h + 88);
  const uint32_t kv = get_u32(h + 92);
  if (kv != static_cast<uint32_t>(DType::kF16) && kv != static_cast<uint32_t>(DType::kF32) &&
      kv != static_cast<uint32_t>(DType::kQ8_0)) {
    return invalid_argument("state field 'kv_dtype' = " + std::to_string(kv) +
                            ": not f16 (1), f32 (0) or q8_0 (8)");
  }
  fp.kv_dtype = static_cast<DType>(kv);
  // A head is whole blocks of the KV dtype (the sizes below count them).
  if (const int64_t block = dtype_block_size(fp.kv_dtype); fp.head_dim % block != 0) {
    return invalid_argument("state field 'head_dim' = " + std::to_string(fp.head_dim) + " with a " +
                            std::string(dtype_name(fp.kv_dtype)) + " KV cache: not a multiple of " +
                            std::to_string(block));
  }
  fp.tensor_table_hash = get_u64(h + 96);
  fp.weights_hash = get_u64(h + 104);
  fp.hparams_hash = get_u64(h + 112);
  out.n_tokens = get_u32(h + 120);
  if (get_u32(h + 124) != 0) {
    return invalid_argument("state field 'reserved' = " + std::to_string(get_u32(h + 124)) +
                            ", must be 0");
  }
  out.payload_bytes = get_u64(h + 16);
  out.payload_hash = get_u64(h + 24);
  const uint64_t want = seq_state_payload_bytes(fp, out.n_tokens);
  if (want == UINT64_MAX) {
    return invalid_argument("state sizes overflow: " + std::to_string(out.n_tokens) +
                            " tokens of " + std::to_string(fp.n_layer) + " layers of " +
                            std::to_string(fp.n_head_kv) + " x " + std::to_string(fp.head_dim) +
                            " values");
  }
  if (out.payload_bytes != want) {
    return invalid_argument("state field 'payload_bytes' = " + std::to_string(out.payload_bytes) +
                            ", its " + std::to_string(out.n_tokens) + " tokens of " +
                            std::to_string(fp.n_layer) + " layers take " + std::to_string(want));
  }
  return out;
}

Result<SeqStateHeader> seq_state_check(std::span<const uint8_t> bytes,
                                       const SeqStateFingerprint& expect, uint32_t max_tokens) {
  STRATA_ASSIGN_OR_RETURN(SeqStateHeader h, seq_state_parse_header(bytes));
  if (!(h.fingerprint == expect)) {
    return invalid_argument("the state was saved from another model or KV cache type: " +
                            fingerprint_diff(h.fingerprint, expect));
  }
  if (h.n_tokens > max_tokens) {
    return out_of_range("state of " + std::to_string(h.n_tokens) + " tokens, this context holds " +
                        std::to_string(max_tokens) + " per sequence");
  }
  // The fingerprint matched, so the payload size is one this model computes without overflow.
  const uint64_t total = kSeqStateHeaderBytes + h.payload_bytes;
  if (bytes.size() != total) {
    return invalid_argument("state of " + std::to_string(bytes.size()) +
                            " bytes, its header says " + std::to_string(total) +
                            (bytes.size() < total ? ": truncated" : ": trailing bytes"));
  }
  if (XXH3_64bits(bytes.data() + kSeqStateHeaderBytes, h.payload_bytes) != h.payload_hash) {
    return invalid_argument("state payload checksum mismatch: the K/V data is corrupt");
  }
  const uint8_t* tokens = bytes.data() + kSeqStateHeaderBytes;
  for (uint32_t i = 0; i < h.n_tokens; ++i) {
    const uint32_t t = get_u32(tokens + 4 * static_cast<size_t>(i));
    if (t >= expect.n_vocab) {
      return out_of_range("state token " + std::to_string(i) + " = " +
                          std::to_string(static_cast<int32_t>(t)) + " outside the vocabulary [0, " +
                          std::to_string(expect.n_vocab) + ")");
    }
  }
  return h;
}

Status seq_state_write_file(const std::string& path, std::span<const uint8_t> state) {
  const std::string tmp = path + ".tmp" + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) return io_error("cannot create " + tmp);
    out.write(reinterpret_cast<const char*>(state.data()),
              static_cast<std::streamsize>(state.size()));
    out.flush();
    if (!out) {
      std::error_code ec;
      std::filesystem::remove(tmp, ec);
      return io_error("cannot write " + tmp + " (disk full?)");
    }
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::filesystem::remove(tmp, ec);
    return io_error("cannot rename " + tmp + " to " + path + ": " + ec.message());
  }
  return Status::ok();
}

Result<HostBytes> seq_state_read_file(const std::string& path, uint64_t max_bytes) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return io_error("cannot open " + path);
  std::error_code ec;
  const uint64_t size = std::filesystem::file_size(path, ec);
  if (ec) return io_error("cannot stat " + path + ": " + ec.message());
  HostBytes bytes(std::min<uint64_t>(size, kSeqStateHeaderBytes));
  in.read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  if (!in) return io_error("cannot read " + path);
  Result<SeqStateHeader> h = seq_state_parse_header(bytes);
  if (!h.is_ok()) return h.status().with_context(path);
  const uint64_t total = add_sat(kSeqStateHeaderBytes, h->payload_bytes);
  if (total > max_bytes) {
    return out_of_range(path + ": a state of " + std::to_string(total) +
                        " bytes, more than this context can hold (" + std::to_string(max_bytes) +
                        ")");
  }
  if (size != total) {
    return invalid_argument(path + ": " + std::to_string(size) + " bytes, its header says " +
                            std::to_string(total) +
                            (size < total ? ": truncated" : ": trailing bytes"));
  }
  bytes.resize(total);
  in.read(reinterpret_cast<char*>(bytes.data() + kSeqStateHeaderBytes),
          static_cast<std::streamsize>(h->payload_bytes));
  if (!in) return io_error("cannot read " + path);
  return bytes;
}

}  // namespace strata
