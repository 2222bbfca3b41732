#include <httplib.h>

#include <ctime>
#include <regex>

#include "server/model_dispatcher.h"
#include "server/reply.h"

// The model dispatcher's endpoints other than generation: tokenizer, template, properties,
// slots, metrics and models.
namespace strata::server {
namespace {

using httplib::Request;
using httplib::Response;

Json parse_object(const Request& req, Response& res) {
  Json body = Json::parse(req.body, nullptr, false);
  if (body.is_discarded() || !body.is_object()) {
    send_error(res, ApiError{400, "the request body is not a valid JSON object"});
    return nullptr;
  }
  return body;
}

// A file name under --slot-save-path: no folders, no way out of it.
bool safe_file_name(const std::string& name) {
  if (name.empty() || name.size() > 255 || name == "." || name == "..") return false;
  for (char c : name) {
    if (c == '/' || c == '\\' || c == '\0') return false;
  }
  return true;
}

void prom(std::string& out, const char* name, const char* type, const char* help, double value) {
  prometheus_scalar(out, name, type, help, value);
}

}  // namespace

void ModelDispatcher::tokenize(const Request& req, Response& res) {
  const Json body = Json::parse(req.body, nullptr, false);
  if (body.is_discarded() || !body.is_object()) {
    return send_error(res, ApiError{400, "the request body is not a valid JSON object"});
  }
  auto content = body.find("content");
  if (content == body.end() || !content->is_string()) {
    return send_error(res, ApiError{400, "'content' must be a string"});
  }
  bool add_special = false, parse_special = true, with_pieces = false;
  for (auto [key, out] : {std::pair<const char*, bool*>{"add_special", &add_special},
                          {"parse_special", &parse_special},
                          {"with_pieces", &with_pieces}}) {
    auto it = body.find(key);
    if (it == body.end() || it->is_null()) continue;
    if (!it->is_boolean())
      return send_error(res, ApiError{400, std::string("'") + key + "' must be a boolean"});
    *out = it->get<bool>();
  }
  const std::vector<int32_t> ids =
      tok_.encode(content->get_ref<const std::string&>(), add_special, parse_special);
  Json tokens = Json::array();
  for (int32_t id : ids) {
    if (with_pieces) {
      tokens.push_back({{"id", id}, {"piece", tok_.token_to_piece(id, true)}});
    } else {
      tokens.push_back(id);
    }
  }
  send_json(res, {{"tokens", tokens}});
}

void ModelDispatcher::detokenize(const Request& req, Response& res) {
  const Json body = Json::parse(req.body, nullptr, false);
  if (body.is_discarded() || !body.is_object()) {
    return send_error(res, ApiError{400, "the request body is not a valid JSON object"});
  }
  auto tokens = body.find("tokens");
  if (tokens == body.end() || !tokens->is_array()) {
    return send_error(res, ApiError{400, "'tokens' must be an array of token ids"});
  }
  std::vector<int32_t> ids;
  for (const Json& t : *tokens) {
    if (!t.is_number_integer() || t.get<int64_t>() < INT32_MIN || t.get<int64_t>() > INT32_MAX) {
      return send_error(res, ApiError{400, "'tokens' must hold integer token ids, not " + dump(t)});
    }
    ids.push_back(static_cast<int32_t>(t.get<int64_t>()));
  }
  if (Status st = tok_.check_ids(ids); !st)
    return send_error(res, ApiError{400, "'tokens': " + st.message()});
  send_json(res, {{"content", tok_.decode(ids)}});
}

void ModelDispatcher::apply_template(const Request& req, Response& res) {
  Json body = parse_object(req, res);
  if (body.is_null()) return;
  // The body of a chat request: messages, tools and template options render as they would.
  CompletionRequest creq;
  if (auto e = parse_completion(body, Endpoint::kChat, 0, creq)) return send_error(res, *e);
  std::string text;
  if (auto e = render_chat(creq, text)) return send_error(res, *e);
  send_json(res, {{"prompt", text}});
}

void ModelDispatcher::lora_adapters(const Request& req, Response& res) {
  if (req.method == "GET") return send_json(res, Json::array());
  const Json body = Json::parse(req.body, nullptr, false);
  if (body.is_discarded() || !body.is_array()) {
    return send_error(res, ApiError{400, "the body must be a list of {\"id\", \"scale\"}"});
  }
  if (!body.empty()) {
    return send_error(res,
                      ApiError{400, "no LoRA adapter has id " + body[0].value("id", Json()).dump() +
                                        ": this server loads none (strata has no LoRA)"});
  }
  send_json(res, Json{{"success", true}});
}

void ModelDispatcher::models(Response& res) {
  const HParams& hp = model_.hparams();
  Json aliases = Json::array();
  for (const std::string& a : serving_.aliases) aliases.push_back(a);
  Json tags = Json::array();
  for (const std::string& t : serving_.tags) tags.push_back(t);
  const Json meta = {{"n_vocab", tok_.n_vocab()},
                     {"n_ctx_train", hp.n_ctx_train},
                     {"n_embd", hp.n_embd},
                     {"n_params", nullptr}};
  send_json(res, {{"object", "list"},
                  {"data", Json::array({{{"id", serving_.model_name},
                                         {"object", "model"},
                                         {"created", created_},
                                         {"owned_by", "strata"},
                                         {"aliases", aliases},
                                         {"tags", tags},
                                         {"meta", meta}}})},
                  // llama-server's own listing, for clients that read it.
                  {"models", Json::array({{{"name", serving_.model_name},
                                           {"model", serving_.model_name},
                                           {"type", "model"},
                                           {"capabilities", Json::array({"completion"})},
                                           {"details", {{"format", "gguf"}}}}})}});
}

void ModelDispatcher::props(Response& res) {
  int64_t total_slots = 0;
  int64_t n_ctx = 0;
  for (const auto& g : groups_) {
    total_slots += g->n_slots();
    n_ctx += g->n_ctx();
  }
  // The template in use; a named family has no source: the model's own then, as llama-server
  // reports it without --jinja.
  Result<std::string> tmpl = chat_->source().empty()
                                 ? model_.file().get_string("tokenizer.chat_template")
                                 : Result<std::string>(chat_->source());
  Json caps = Json::object();
  for (const ChatCapField& f : kChatCapFields) caps[f.name] = chat_->caps().*f.field;
  auto piece = [this](int32_t id) { return id >= 0 ? tok_.token_to_piece(id, true) : ""; };
  Json body = {{"default_generation_settings",
                {{"id", 0},
                 {"id_task", -1},
                 {"n_ctx", n_ctx_slot_},
                 {"speculative", false},
                 {"is_processing", false},
                 {"params", generation_settings_json(serving_.defaults.params, false, n_ctx_slot_,
                                                     serving_.model_name)}}},
               {"total_slots", total_slots},
               {"n_ctx", n_ctx},
               {"pipeline_groups", groups_.size()},
               {"fit", {{"on", serving_.fit}, {"note", serving_.fit_note}}},
               {"model_path", serving_.model_path},
               {"model_alias", serving_.model_name},
               {"chat_template", tmpl ? *tmpl : std::string()},
               {"chat_template_caps", caps},
               {"chat_format", chat_->name()},
               {"bos_token", piece(tok_.bos())},
               {"eos_token", piece(tok_.eos())},
               {"modalities", {{"vision", false}, {"audio", false}}},
               {"is_sleeping", serving_.is_sleeping ? serving_.is_sleeping() : false},
               {"endpoint_slots", serving_.endpoint_slots},
               {"endpoint_metrics", serving_.endpoint_metrics},
               {"endpoint_props", serving_.endpoint_props},
               {"build_info", kSystemFingerprint}};
  if (serving_.backend_workers) body["workers"] = serving_.backend_workers();
  send_json(res, body);
}

// llama-server documents no settable property yet; with --props a JSON object is accepted.
void ModelDispatcher::props_post(const Request& req, Response& res) {
  if (!serving_.endpoint_props) {
    return send_error(
        res, ApiError{501, "changing the properties is off (start the server with --props)"});
  }
  Json body = parse_object(req, res);
  if (body.is_null()) return;
  send_json(res, {{"success", true}});
}

void ModelDispatcher::slots(const Request& req, Response& res) {
  if (!serving_.endpoint_slots) {
    return send_error(res, ApiError{501, "the /slots endpoint is off (start with --slots)"});
  }
  const Json params =
      generation_settings_json(serving_.defaults.params, false, n_ctx_slot_, serving_.model_name);
  Json out = Json::array();
  int32_t base = 0;
  int64_t idle = 0;
  for (const auto& g : groups_) {
    for (const SlotView& v : g->slot_views()) {
      idle += v.busy ? 0 : 1;
      out.push_back({{"id", base + v.id},
                     {"group", g->index()},
                     {"id_task", v.busy ? static_cast<int64_t>(v.task_id) : -1},
                     {"n_ctx", g->n_ctx_slot()},
                     {"speculative", false},
                     {"is_processing", v.busy},
                     {"n_cached", v.n_cached},
                     {"n_lost", v.n_lost},
                     {"params", params}});
    }
    base += g->n_slots();
  }
  if (req.get_param_value("fail_on_no_slot") == "1" && idle == 0) {
    return send_error(res, ApiError{503, "no slot is idle"});
  }
  send_json(res, out);
}

void ModelDispatcher::slot_action(const Request& req, Response& res) {
  int64_t total = 0;
  for (const auto& g : groups_) total += g->n_slots();
  const std::string id_text = req.matches.size() > 1 ? std::string(req.matches[1]) : "";
  int64_t id = -1;
  try {
    id = std::stoll(id_text);
  } catch (...) {
  }
  if (id < 0 || id >= total) {
    return send_error(res, ApiError{400, "slot " + id_text + " does not exist (slots 0.." +
                                             std::to_string(total - 1) + ")"});
  }
  const std::string action = req.get_param_value("action");
  if (action != "save" && action != "restore" && action != "erase" && action != "rebuild") {
    return send_error(res, ApiError{400, "'action' must be save, restore, erase or rebuild, not '" +
                                             action + "'"});
  }
  std::string filename;
  if (action == "save" || action == "restore") {
    if (serving_.slot_save_path.empty()) {
      return send_error(res, ApiError{501,
                                      "saving and restoring slots is off (start the server "
                                      "with --slot-save-path PATH)"});
    }
    Json body = parse_object(req, res);
    if (body.is_null()) return;
    auto f = body.find("filename");
    if (f == body.end() || !f->is_string() || !safe_file_name(f->get<std::string>())) {
      return send_error(res, ApiError{400,
                                      "'filename' must be a file name (no folders) under "
                                      "--slot-save-path"});
    }
    filename = f->get<std::string>();
  }
  if (serving_.slot_store == nullptr) {
    return send_error(res, ApiError{501, "slot " + action + " is not supported by this build"});
  }
  if (serving_.before_work) {
    if (Status s = serving_.before_work(); !s.is_ok()) {
      return send_error(res, ApiError{503, s.message()});
    }
  }
  const int32_t slot = static_cast<int32_t>(id);
  const std::string path = serving_.slot_save_path + "/" + filename;
  Result<SlotFileResult> r = action == "save"      ? serving_.slot_store->save(slot, path)
                             : action == "restore" ? serving_.slot_store->restore(slot, path)
                             : action == "rebuild" ? serving_.slot_store->rebuild(slot)
                                                   : serving_.slot_store->erase(slot);
  if (!r) {
    // A busy slot, or one whose worker is not back yet: try again later.
    const int status =
        r.status().kind() == ErrorKind::kUnavailable && action == "rebuild" ? 503 : 400;
    return send_error(res, ApiError{status, r.status().message()});
  }
  if (action == "rebuild") {
    return send_json(
        res, {{"id_slot", slot}, {"n_rebuilt", r->n_tokens}, {"timings", {{"rebuild_ms", r->ms}}}});
  }
  if (action == "save") {
    return send_json(res, {{"id_slot", slot},
                           {"filename", filename},
                           {"n_saved", r->n_tokens},
                           {"n_written", r->n_bytes},
                           {"timings", {{"save_ms", r->ms}}}});
  }
  if (action == "restore") {
    return send_json(res, {{"id_slot", slot},
                           {"filename", filename},
                           {"n_restored", r->n_tokens},
                           {"n_read", r->n_bytes},
                           {"timings", {{"restore_ms", r->ms}}}});
  }
  send_json(res, {{"id_slot", slot}, {"n_erased", r->n_tokens}});
}

void ModelDispatcher::metrics(Response& res) {
  if (!serving_.endpoint_metrics) {
    return send_error(res, ApiError{501, "the /metrics endpoint is off (start with --metrics)"});
  }
  Gauges gauges;
  std::vector<GroupGauges> per_group;
  for (const auto& g : groups_) {
    per_group.push_back({g->index(), g->decode_steps(), g->busy_slots_summed(), g->queued(),
                         g->busy_slots(), g->n_slots()});
    gauges.slots_busy += g->busy_slots();
    gauges.slots_total += g->n_slots();
    gauges.kv_used += g->kv_used();
    gauges.kv_total += g->n_ctx();
    gauges.requests_queued += g->queued();
  }
  std::string out = metrics_.render(gauges);
  // llama-server's names, from the same counters, for dashboards built on them.
  const double prompt_tokens = static_cast<double>(metrics_.prompt_tokens.load());
  const double predicted = static_cast<double>(metrics_.generated_tokens.load());
  const double prompt_s = static_cast<double>(metrics_.prompt_us.load()) / 1e6;
  const double predicted_s = static_cast<double>(metrics_.predicted_us.load()) / 1e6;
  const double steps = static_cast<double>(metrics_.decode_steps.load());
  prom(out, "llamacpp:prompt_tokens_total", "counter", "Number of prompt tokens processed.",
       prompt_tokens);
  prom(out, "llamacpp:prompt_seconds_total", "counter",
       "Prompt process time in seconds (arrival to first token).", prompt_s);
  prom(out, "llamacpp:prompt_tokens_seconds", "gauge", "Average prompt throughput in tokens/s.",
       prompt_s > 0 ? prompt_tokens / prompt_s : 0);
  prom(out, "llamacpp:tokens_predicted_total", "counter", "Number of generation tokens processed.",
       predicted);
  prom(out, "llamacpp:tokens_predicted_seconds_total", "counter",
       "Predict process time in seconds.", predicted_s);
  prom(out, "llamacpp:predicted_tokens_seconds", "gauge",
       "Average generation throughput in tokens/s.", predicted_s > 0 ? predicted / predicted_s : 0);
  prom(out, "llamacpp:requests_processing", "gauge", "Number of requests processing.",
       static_cast<double>(gauges.slots_busy));
  prom(out, "llamacpp:requests_deferred", "gauge", "Number of requests deferred.",
       static_cast<double>(gauges.requests_queued));
  prom(out, "llamacpp:n_tokens_max", "counter", "KV cells in use (all slots).",
       static_cast<double>(gauges.kv_used));
  prom(out, "llamacpp:n_decode_total", "counter", "Total number of decode calls.", steps);
  prom(out, "llamacpp:n_busy_slots_per_decode", "gauge",
       "Average number of busy slots per decode call.", metrics_.busy_slots.mean());
  prom(out, "llamacpp:spec_decode_num_drafts_total", "counter",
       "Total speculative decoding verification steps.",
       static_cast<double>(metrics_.spec_drafts.load()));
  prom(out, "llamacpp:spec_decode_num_draft_tokens_total", "counter",
       "Total draft tokens generated.", static_cast<double>(metrics_.spec_draft_tokens.load()));
  prom(out, "llamacpp:spec_decode_num_accepted_tokens_total", "counter",
       "Total draft tokens accepted by the target model.",
       static_cast<double>(metrics_.spec_accepted_tokens.load()));
  render_group_metrics(out, per_group);
  res.set_content(out, "text/plain; version=0.0.4");
}

}  // namespace strata::server
