// What graphs need of devices, and what devices lack.
#include <string>

#include "backend/backend.h"

namespace strata {
namespace {

// Splits "a,b,c" and calls fn on each non-empty name; the first error stops it.
template <typename Fn>
Status for_each_name(std::string_view names, const Fn& fn) {
  while (!names.empty()) {
    const size_t comma = names.find(',');
    const std::string_view name = names.substr(0, comma);
    if (!name.empty()) STRATA_RETURN_IF_ERROR(fn(name));
    if (comma == std::string_view::npos) break;
    names.remove_prefix(comma + 1);
  }
  return Status::ok();
}

}  // namespace

DeviceCaps graph_needs(const Graph& g) {
  DeviceCaps need;
  const int64_t n_tensors = static_cast<int64_t>(g.tensors.size());
  for (const Node& n : g.nodes) {
    const OpInfo* info = op_info(static_cast<uint32_t>(n.op));
    if (info == nullptr) continue;  // graph_validate refuses it; nothing to ask a device
    need.ops.set(static_cast<uint32_t>(n.op));
    // A KV cache input (the op table's cache_src) in more than one plane.
    for (int s = 0; s < kMaxSrc; ++s) {
      const int32_t t = n.src[s];
      if ((info->cache_src >> s & 1u) == 0 || t < 0 || t >= n_tensors) continue;
      const TensorRef& cache = g.tensors[static_cast<size_t>(t)];
      if (cache.ne[2] > 1) need.kv_planes = true;
      if (cache.dtype == DType::kQ8_0) need.kv_q8_0 = true;
    }
    if (info->weight_src < 0) continue;
    const int32_t w = n.src[info->weight_src];
    if (w < 0 || w >= n_tensors) continue;
    const uint32_t dtype = static_cast<uint32_t>(g.tensors[static_cast<size_t>(w)].dtype);
    if (dtype < kDTypeIdLimit) need.weight_dtypes.set(dtype);
  }
  return need;
}

std::string caps_missing(const DeviceCaps& need, const DeviceCaps& have) {
  std::string out;
  auto add = [&](const std::string& what) { out += (out.empty() ? "" : ", ") + what; };
  const OpSet ops = need.ops & ~have.ops;
  for (uint32_t i = 0; i < kOpIdLimit; ++i) {
    if (!ops.test(i)) continue;
    const OpInfo* info = op_info(i);
    add(info != nullptr ? "op '" + std::string(info->name) + "'" : "op " + std::to_string(i));
  }
  if (need.kv_planes && !have.kv_planes) add("KV caches in planes (a release before them)");
  if (need.kv_q8_0 && !have.kv_q8_0) add("q8_0 KV caches (a release before them)");
  const DTypeSet dtypes = need.weight_dtypes & ~have.weight_dtypes;
  for (uint32_t i = 0; i < kDTypeIdLimit; ++i) {
    if (!dtypes.test(i)) continue;
    const DTypeInfo* info = dtype_info(i);
    add("weight dtype " + (info != nullptr ? std::string(info->name) : std::to_string(i)));
  }
  return out;
}

Result<DTypeSet> dtype_set_from_names(std::string_view names) {
  DTypeSet set;
  STRATA_RETURN_IF_ERROR(for_each_name(names, [&](std::string_view name) {
    for (uint32_t i = 0; i < kDTypeIdLimit; ++i) {
      const DTypeInfo* info = dtype_info(i);
      if (info != nullptr && info->name == name) {
        set.set(i);
        return Status::ok();
      }
    }
    return invalid_argument("unknown dtype '" + std::string(name) + "'");
  }));
  return set;
}

Result<OpSet> op_set_from_names(std::string_view names) {
  OpSet set;
  STRATA_RETURN_IF_ERROR(for_each_name(names, [&](std::string_view name) {
    const OpInfo* info = op_info_by_name(name);
    if (info == nullptr) return invalid_argument("unknown op '" + std::string(name) + "'");
    set.set(static_cast<uint32_t>(info->op));
    return Status::ok();
  }));
  return set;
}

}  // namespace strata
