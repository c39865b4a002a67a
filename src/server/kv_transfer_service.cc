#include "server/kv_transfer_service.h"

#include <fmt/format.h>

#include <random>

#include "kv/prefix_cache.h"
#include "kv_transfer/offer_params.h"
#include "util/check.h"

namespace omnibus::server {
namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

const char* kParam = "kv_transfer_params";

std::string random_id() {
  std::random_device rd;
  std::string id = "omnibus-";
  for (int i = 0; i < 4; ++i) id += fmt::format("{:08x}", uint32_t(rd()));
  return id;
}

// The compatibility string: what must be equal for blocks to mean the same
// thing in both pools. Parsed back field by field to say what differs.
std::string make_compat(const std::string& fingerprint, const std::string& kv_dtype,
                        int32_t block_size) {
  return fmt::format("model={};kv_dtype={};block_size={}", fingerprint, kv_dtype, block_size);
}

std::map<std::string, std::string> split_compat(const std::string& s) {
  std::map<std::string, std::string> out;
  size_t i = 0;
  while (i < s.size()) {
    size_t end = s.find(';', i);
    if (end == std::string::npos) end = s.size();
    const std::string item = s.substr(i, end - i);
    const size_t eq = item.find('=');
    if (eq != std::string::npos) out[item.substr(0, eq)] = item.substr(eq + 1);
    i = end + 1;
  }
  return out;
}

ApiError kv_params_error(const std::string& field, const std::string& what) {
  return ApiError::invalid(std::string(kParam) + "." + field,
                           fmt::format("{}.{} {}", kParam, field, what),
                           "invalid_kv_transfer_params");
}

// K and V of every layer of remote block remote_blocks[i] -> local block
// dst[i]; runs consecutive on both sides move as one range.
std::vector<KvSegment> block_segments(const KvRegionInfo& local, const KvRegionLayout& remote,
                                      std::span<const int32_t> remote_blocks,
                                      const std::vector<int32_t>& dst) {
  std::vector<KvSegment> segs;
  for (size_t l = 0; l < local.k_offset.size(); ++l) {
    for (int kv = 0; kv < 2; ++kv) {
      const uint64_t rb = kv == 0 ? remote.k_block_bytes : remote.v_block_bytes;
      const uint64_t ro = kv == 0 ? remote.k_offset[l] : remote.v_offset[l];
      const uint64_t lo = kv == 0 ? local.k_offset[l] : local.v_offset[l];
      for (size_t i = 0; i < dst.size(); ++i) {
        const uint64_t r = ro + uint64_t(remote_blocks[i]) * rb;
        const uint64_t d = lo + uint64_t(dst[i]) * rb;
        if (!segs.empty() && segs.back().remote_offset + segs.back().bytes == r &&
            segs.back().local_offset + segs.back().bytes == d) {
          segs.back().bytes += rb;
        } else {
          segs.push_back(KvSegment{r, d, rb});
        }
      }
    }
  }
  return segs;
}

}  // namespace

using kv_transfer::ImportParams;
using kv_transfer::offer_signed_text;

const char* kv_role_name(KvRole r) {
  switch (r) {
    case KvRole::kBoth:
      return "both";
    case KvRole::kPrefill:
      return "prefill";
    case KvRole::kDecode:
      return "decode";
  }
  return "?";
}

StatusOr<std::unique_ptr<KvTransferService>> KvTransferService::create(
    Engine& engine, const std::string& kv_dtype, KvTransferServiceOptions options) {
  if (!engine.info().prefix_caching) {
    return Status::invalid_argument("--kv-role needs prefix caching (drop --no-prefix-caching)");
  }
  if (options.auth == nullptr) {
    return Status::invalid_argument(
        "KV transfer needs the deployment's secret: --kv-transfer-secret-file FILE (or "
        "--kv-transfer-secret), the same on every prefill and decode worker");
  }
  const std::string compat =
      make_compat(options.model_fingerprint, kv_dtype, engine.info().block_size);
  std::unique_ptr<KvTransferService> s(new KvTransferService(engine, std::move(options), compat));
  KvTransferOptions ao;
  ao.auth = s->options_.auth;
  ao.peers = s->options_.peers;
  ao.listen_host = s->options_.listen_host;
  ao.port = s->options_.port;
  ao.engine_id = random_id();
  ao.io_timeout = s->options_.io_timeout;
  ao.layout.base = s->region_.base;
  ao.layout.bytes = s->region_.bytes;
  ao.layout.n_blocks = s->region_.n_blocks;
  ao.layout.k_offset.assign(s->region_.k_offset.begin(), s->region_.k_offset.end());
  ao.layout.v_offset.assign(s->region_.v_offset.begin(), s->region_.v_offset.end());
  ao.layout.k_block_bytes = s->region_.k_block_bytes;
  ao.layout.v_block_bytes = s->region_.v_block_bytes;
  ao.layout.compat = compat;
  KvTransferService* self = s.get();
  ao.on_release = [self](const std::string& id, int32_t n_blocks) {
    self->on_release(id, n_blocks);
  };
  OMNIBUS_ASSIGN_OR_RETURN(s->agent_, KvTransferAgent::create(std::move(ao)));
  s->expirer_ = std::thread([self] { self->expire_loop(); });
  return s;
}

KvTransferService::KvTransferService(Engine& engine, KvTransferServiceOptions options,
                                     std::string compat)
    : engine_(&engine),
      options_(std::move(options)),
      compat_(std::move(compat)),
      region_(engine.kv_region()),
      block_size_(engine.info().block_size),
      pull_seconds_({0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5}) {}

KvTransferService::~KvTransferService() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (expirer_.joinable()) expirer_.join();
  agent_.reset();  // no release callback after this
}

void KvTransferService::detach_engine() {
  std::lock_guard<std::mutex> lock(mu_);
  engine_ = nullptr;
}

ApiResult<KvTransferService::Ask> KvTransferService::classify(const json* params) const {
  if (params == nullptr || params->is_null()) return Ask::kNone;
  if (!params->is_object()) return kv_params_error("", "must be an object or null");
  const auto flag = [&](const char* name, bool& out) -> bool {
    auto it = params->find(name);
    if (it == params->end() || it->is_null()) {
      out = false;
      return true;
    }
    if (!it->is_boolean()) return false;
    out = it->get<bool>();
    return true;
  };
  bool remote_decode = false, remote_prefill = false;
  if (!flag("do_remote_decode", remote_decode))
    return kv_params_error("do_remote_decode", "must be a boolean");
  if (!flag("do_remote_prefill", remote_prefill))
    return kv_params_error("do_remote_prefill", "must be a boolean");
  if (remote_decode && remote_prefill) {
    return kv_params_error("do_remote_prefill", "and do_remote_decode cannot both be true");
  }
  if (remote_decode) {
    if (options_.role == KvRole::kDecode) {
      return kv_params_error("do_remote_decode",
                             "asks for a prefill, but this worker runs with --kv-role decode");
    }
    return Ask::kRemoteDecode;
  }
  if (remote_prefill) {
    if (options_.role == KvRole::kPrefill) {
      return kv_params_error("do_remote_prefill",
                             "asks for a decode, but this worker runs with --kv-role prefill");
    }
    return Ask::kRemotePrefill;
  }
  return Ask::kNone;
}

json KvTransferService::offer(const KvPinned& pinned, int32_t n_prompt_tokens) {
  const std::string id = random_id();
  json hashes = json::array();
  for (uint64_t k : pinned.keys) hashes.push_back(kv_transfer::hex64(k));
  KvOffer o;
  o.id = id;
  o.blocks = pinned.blocks;
  o.keys = pinned.keys;
  o.window_offset = pinned.window_offset;
  o.window_bytes = pinned.window_bytes;
  {
    std::lock_guard<std::mutex> lock(mu_);
    offers_[id] =
        Offer{pinned.pin_id, int32_t(pinned.blocks.size()), Clock::now() + options_.timeout};
    ++offers_total_;
  }
  agent_->offer(std::move(o));
  cv_.notify_all();
  json p;
  p["do_remote_prefill"] = true;
  p["do_remote_decode"] = false;
  p["remote_engine_id"] = agent_->engine_id();
  p["remote_request_id"] = id;
  p["remote_block_ids"] = pinned.blocks;
  p["remote_host"] = options_.host;
  p["remote_port"] = agent_->port();
  p["tp_size"] = 1;
  p["omnibus"] = {{"block_hashes", std::move(hashes)},
                  {"compat", compat_},
                  {"block_size", block_size_},
                  {"n_prompt_tokens", n_prompt_tokens}};
  if (pinned.window_offset >= 0) {  // kivi2: the fp16 window rows of the last blocks
    p["omnibus"]["window"] = {{"offset", pinned.window_offset}, {"bytes", pinned.window_bytes}};
  }
  p["omnibus"]["mac"] = options_.auth->mac_hex(offer_signed_text(p));
  return p;
}

void KvTransferService::drop(const KvPinned& pinned) {
  std::lock_guard<std::mutex> lock(mu_);
  if (engine_ != nullptr) engine_->unpin(pinned.pin_id);
}

void KvTransferService::on_release(const std::string& id, int32_t n_blocks) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = offers_.find(id);
    if (it == offers_.end()) return;
    const uint64_t pin_id = it->second.pin_id;
    n_blocks = std::clamp(n_blocks, 0, it->second.n_blocks);
    blocks_served_ += uint64_t(n_blocks);
    bytes_served_ += uint64_t(n_blocks) * (region_.k_block_bytes + region_.v_block_bytes) *
                     region_.k_offset.size();
    offers_.erase(it);
    if (engine_ != nullptr) engine_->unpin(pin_id);  // queues it: cheap under the lock
  }
}

void KvTransferService::expire_loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    Clock::time_point next = Clock::time_point::max();
    for (const auto& [id, o] : offers_) next = std::min(next, o.deadline);
    if (next == Clock::time_point::max()) {
      cv_.wait(lock);
      continue;
    }
    if (cv_.wait_until(lock, next) != std::cv_status::timeout && !stop_) continue;
    const Clock::time_point now = Clock::now();
    std::vector<std::pair<std::string, uint64_t>> expired;
    for (auto it = offers_.begin(); it != offers_.end();) {
      if (it->second.deadline <= now) {
        expired.emplace_back(it->first, it->second.pin_id);
        it = offers_.erase(it);
        ++timeouts_;
      } else {
        ++it;
      }
    }
    lock.unlock();
    // Withdrawn before unpinned: no claim can succeed on blocks being reused.
    for (const auto& [id, pin] : expired) agent_->withdraw(id);
    lock.lock();
    for (const auto& [id, pin] : expired) {
      if (engine_ != nullptr) engine_->unpin(pin);
    }
  }
}

std::optional<ApiError> KvTransferService::check_offer(const json& params, const ImportParams* p) {
  if (p == nullptr) {  // the signature first: nothing a client wrote is acted on, or connected to
    auto om = params.find("omnibus");
    const json* mac =
        om != params.end() && om->is_object() && om->contains("mac") ? &(*om)["mac"] : nullptr;
    if (mac != nullptr && mac->is_string() &&
        options_.auth->verify_hex(offer_signed_text(params), mac->get_ref<const std::string&>())) {
      return std::nullopt;
    }
    std::lock_guard<std::mutex> lock(mu_);
    ++forged_;
    return ApiError::invalid(
        kParam,
        "kv_transfer_params are not signed by a prefill worker of this deployment (omnibus.mac "
        "is missing or wrong: forged, altered, or a worker with another --kv-transfer-secret)",
        "kv_transfer_unauthenticated");
  }
  if (!options_.peers.allows_host(p->host)) {
    std::lock_guard<std::mutex> lock(mu_);
    ++not_a_peer_;
    return ApiError::invalid(
        std::string(kParam) + ".remote_host",
        fmt::format("{}.remote_host '{}' is not in this worker's --kv-transfer-peers ('{}')",
                    kParam, p->host, options_.peers.spec()),
        "kv_transfer_peer_not_allowed");
  }
  if (p->compat != compat_) {
    const auto mine = split_compat(compat_), theirs = split_compat(p->compat);
    std::string diff;
    for (const auto& [k, v] : mine) {
      auto t = theirs.find(k);
      const std::string tv = t == theirs.end() ? "(none)" : t->second;
      if (tv != v)
        diff += fmt::format("{}{}: prefill worker {}, this worker {}", diff.empty() ? "" : "; ", k,
                            tv, v);
    }
    return ApiError::invalid(std::string(kParam),
                             "the prefill worker's KV cache is incompatible with this worker's (" +
                                 (diff.empty() ? p->compat : diff) + ")",
                             "kv_transfer_incompatible");
  }
  if (p->window_offset >= 0 && region_.window_bytes == 0) {
    return kv_params_error("omnibus.window", "is given, but this KV format has no fp16 window");
  }
  if (p->window_offset >= 0 && p->window_bytes != region_.window_bytes) {
    return kv_params_error("omnibus.window",
                           fmt::format("bytes must be {} (this worker's window rows), not {}",
                                       region_.window_bytes, p->window_bytes));
  }
  return std::nullopt;
}

// The blocks must be this prompt's: the chain of its own tokens from its
// cache salt's root.
std::optional<ApiError> KvTransferService::check_chain(const ImportParams& p,
                                                       const std::vector<int32_t>& prompt,
                                                       const std::string& cache_salt) const {
  const int32_t n = int32_t(p.blocks.size());
  const int32_t bs = block_size_;
  if (int64_t(n) * bs > int64_t(prompt.size()) - 1) {
    return kv_params_error("remote_block_ids",
                           fmt::format("names {} blocks of {} tokens, more than this prompt of {} "
                                       "tokens has before its last token",
                                       n, bs, prompt.size()));
  }
  const std::vector<uint64_t> keys =
      PrefixCache::chain_keys(prompt, n, bs, PrefixCache::root_key(cache_salt));
  for (int32_t i = 0; i < n; ++i) {
    if (keys[size_t(i)] != p.keys[size_t(i)]) {
      return kv_params_error("omnibus.block_hashes",
                             fmt::format("do not match this request's prompt (block {} "
                                         "differs): the prefill worker computed another "
                                         "prompt",
                                         i));
    }
  }
  return std::nullopt;
}

std::optional<ApiError> KvTransferService::start_import(const json& params,
                                                        const std::vector<int32_t>& prompt,
                                                        const std::string& cache_salt,
                                                        ImportDone done) {
  if (std::optional<ApiError> e = check_offer(params, nullptr)) return e;
  std::string bad_field;
  StatusOr<ImportParams> parsed = kv_transfer::parse_offer_params(params, &bad_field);
  if (!parsed.is_ok()) {
    return ApiError::invalid(std::string(kParam) + "." + bad_field, parsed.status().message(),
                             "invalid_kv_transfer_params");
  }
  auto p = std::make_shared<const ImportParams>(std::move(parsed).value());
  if (std::optional<ApiError> e = check_offer(params, p.get())) return e;
  if (std::optional<ApiError> e = check_chain(*p, prompt, cache_salt)) return e;
  const int32_t n = int32_t(p->blocks.size());
  const bool no_window = region_.window_bytes > 0 && p->window_offset < 0;
  if (n == 0 || no_window) {
    agent_->release(p->host, p->port, p->request_id, 0);
    if (n > 0) {
      std::lock_guard<std::mutex> lock(mu_);
      ++fallbacks_;
    }
    done(std::shared_ptr<KvImport>());
    return std::nullopt;
  }
  agent_->claim_async(p->host, p->port, p->request_id, p->blocks, p->keys,
                      [this, p, done = std::move(done)](StatusOr<KvClaim> claim) {
                        done(claimed(*p, std::move(claim)));
                      });
  return std::nullopt;
}

ApiResult<std::shared_ptr<KvImport>> KvTransferService::claimed(const ImportParams& p,
                                                                StatusOr<KvClaim> claim) {
  if (!claim.is_ok()) {
    if (claim.status().code() == StatusCode::kInvalidArgument) {
      std::lock_guard<std::mutex> lock(mu_);
      ++refused_;
      return ApiError::invalid(
          kParam, "the prefill worker refused the transfer: " + claim.status().message(),
          "kv_transfer_refused");
    }
    fmt::print(stderr,
               "kv transfer: prefill worker {}:{} unreachable ({}); computing the prompt here\n",
               p.host, p.port, claim.status().message());
    std::lock_guard<std::mutex> lock(mu_);
    ++fallbacks_;
    return std::shared_ptr<KvImport>();
  }
  return make_import(p, std::move(claim).value());
}

// After the claim: the owner's layout checked against ours, then the import
// whose fetch pulls the claimed blocks into the pool.
ApiResult<std::shared_ptr<KvImport>> KvTransferService::make_import(const ImportParams& p,
                                                                    KvClaim claim) {
  const std::string& host = p.host;
  const std::string& id = p.request_id;
  const int port = p.port;
  const std::vector<int32_t>& remote_blocks = p.blocks;
  const int32_t n = int32_t(remote_blocks.size());
  const int64_t window_offset = p.window_offset;
  const uint64_t window_bytes = p.window_bytes;
  const KvRegionLayout remote = std::move(claim.remote);
  const std::string token = std::move(claim.token);
  if (remote.k_offset.size() != region_.k_offset.size() ||
      remote.k_block_bytes != region_.k_block_bytes ||
      remote.v_block_bytes != region_.v_block_bytes) {
    agent_->release(host, port, id, 0);
    return ApiError::invalid(kParam,
                             "the prefill worker's KV block layout differs from this worker's",
                             "kv_transfer_incompatible");
  }
  for (int32_t b : remote_blocks) {
    if (b >= remote.n_blocks) {
      agent_->release(host, port, id, 0);
      return kv_params_error("remote_block_ids", "names a block outside the prefill worker's pool");
    }
  }
  if (window_offset >= 0 && (uint64_t(window_offset) > remote.bytes ||
                             window_bytes > remote.bytes - uint64_t(window_offset))) {
    agent_->release(host, port, id, 0);
    return kv_params_error("omnibus.window", "lies outside the prefill worker's KV region");
  }

  auto im = std::make_shared<KvImport>();
  im->n_blocks = n;
  const KvRegionInfo local = region_;
  KvTransferService* self = this;
  im->fetch = [self, local, remote, remote_blocks, host, port, token, window_offset, window_bytes](
                  int32_t first, std::vector<int32_t> dst, int64_t window_dst,
                  std::function<void(bool)> done) {
    std::vector<KvSegment> segs =
        block_segments(local, remote, std::span(remote_blocks).subspan(size_t(first)), dst);
    if (window_dst >= 0) {  // the engine claimed a transfer slot: the window rows go there
      OMNIBUS_CHECK(window_offset >= 0);
      segs.push_back(KvSegment{uint64_t(window_offset), uint64_t(window_dst), window_bytes});
    }
    const Clock::time_point t0 = Clock::now();
    uint64_t bytes = 0;
    for (const KvSegment& s : segs) bytes += s.bytes;
    const int32_t n_blocks = int32_t(dst.size());
    self->agent_->pull(
        host, port, token, std::move(segs), [self, t0, bytes, n_blocks, done](Status st) {
          {
            std::lock_guard<std::mutex> lock(self->mu_);
            if (st.is_ok()) {
              self->pull_seconds_.observe(std::chrono::duration<double>(Clock::now() - t0).count());
              self->bytes_pulled_ += bytes;
              self->blocks_pulled_ += uint64_t(n_blocks);
            } else {
              ++self->pull_failures_;
            }
          }
          if (!st.is_ok())
            fmt::print(stderr, "kv transfer: pull failed ({}); computing the prompt here\n",
                       st.message());
          done(st.is_ok());
        });
  };
  im->finished = [self, host, port, id](int32_t n_local, int32_t n_fetched, bool failed) {
    {
      std::lock_guard<std::mutex> lock(self->mu_);
      self->blocks_local_ += uint64_t(n_local);
      if (failed) ++self->fallbacks_;
    }
    self->agent_->release(host, port, id, n_fetched);
  };
  return im;
}

std::string KvTransferService::metrics_text(const std::string& labels,
                                            const EngineStats& st) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::string out;
  const auto header = [&out](const char* name, const char* type, const char* help) {
    out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
  };
  header("omnibus:kv_transfer_blocks_total", "counter",
         "KV blocks moved between workers: pulled here (decode), served from here (prefill), or "
         "found in the "
         "local prefix cache instead of pulled (local).");
  out += fmt::format("omnibus:kv_transfer_blocks_total{{{},direction=\"pulled\"}} {}\n", labels,
                     blocks_pulled_);
  out += fmt::format("omnibus:kv_transfer_blocks_total{{{},direction=\"served\"}} {}\n", labels,
                     blocks_served_);
  out += fmt::format("omnibus:kv_transfer_blocks_total{{{},direction=\"local\"}} {}\n", labels,
                     blocks_local_);
  header("omnibus:kv_transfer_bytes_total", "counter",
         "KV bytes moved between workers, in their stored format.");
  out += fmt::format("omnibus:kv_transfer_bytes_total{{{},direction=\"pulled\"}} {}\n", labels,
                     bytes_pulled_);
  out += fmt::format("omnibus:kv_transfer_bytes_total{{{},direction=\"served\"}} {}\n", labels,
                     bytes_served_);
  header("omnibus:kv_transfer_seconds", "histogram",
         "Time to pull one request's missing KV blocks.");
  pull_seconds_.render("omnibus:kv_transfer_seconds", labels, out);
  header("omnibus:kv_transfer_pinned_blocks", "gauge",
         "KV blocks pinned for decode workers that have not pulled them yet (prefill side).");
  out += fmt::format("omnibus:kv_transfer_pinned_blocks{{{}}} {}\n", labels, st.kv_blocks_pinned);
  header("omnibus:kv_transfer_offers_total", "counter",
         "Prompts offered to decode workers (prefill side).");
  out += fmt::format("omnibus:kv_transfer_offers_total{{{}}} {}\n", labels, offers_total_);
  header("omnibus:kv_transfer_timeouts_total", "counter",
         "Offers unpinned by --kv-transfer-timeout because no decode worker released them.");
  out += fmt::format("omnibus:kv_transfer_timeouts_total{{{}}} {}\n", labels, timeouts_);
  header("omnibus:kv_transfer_fallbacks_total", "counter",
         "Remotely prefilled requests whose prompt was computed here instead (prefill worker "
         "unreachable, pull "
         "failed, or no room in the pool).");
  out += fmt::format("omnibus:kv_transfer_fallbacks_total{{{}}} {}\n", labels, fallbacks_);
  header("omnibus:kv_transfer_refused_total", "counter",
         "kv_transfer_params the prefill worker refused (forged, stale or already used): answered "
         "400.");
  out += fmt::format("omnibus:kv_transfer_refused_total{{{}}} {}\n", labels, refused_);
  header("omnibus:kv_transfer_pull_failures_total", "counter",
         "Pulls that failed part-way (then computed here).");
  out += fmt::format("omnibus:kv_transfer_pull_failures_total{{{}}} {}\n", labels, pull_failures_);
  const KvTransferStats a = agent_->stats();
  header("omnibus:kv_transfer_rejected_total", "counter",
         "What the KV-transfer plane turned away: kv_transfer_params without a valid signature "
         "(unsigned), naming "
         "a remote_host outside --kv-transfer-peers (peer), side-channel connections from unlisted "
         "hosts "
         "(connection), side-channel messages without a valid seal (seal), fetches outside a live "
         "claim (fetch).");
  out += fmt::format("omnibus:kv_transfer_rejected_total{{{},reason=\"unsigned\"}} {}\n", labels,
                     forged_);
  out += fmt::format("omnibus:kv_transfer_rejected_total{{{},reason=\"peer\"}} {}\n", labels,
                     not_a_peer_);
  out += fmt::format("omnibus:kv_transfer_rejected_total{{{},reason=\"connection\"}} {}\n", labels,
                     a.not_a_peer);
  out += fmt::format("omnibus:kv_transfer_rejected_total{{{},reason=\"seal\"}} {}\n", labels,
                     a.unauthenticated);
  out += fmt::format("omnibus:kv_transfer_rejected_total{{{},reason=\"fetch\"}} {}\n", labels,
                     a.fetches_refused);
  header("omnibus:kv_transfer_pins_refused_total", "counter",
         "Prefills for a remote decode answered without an offer: --kv-transfer-max-pinned blocks "
         "were pinned.");
  out +=
      fmt::format("omnibus:kv_transfer_pins_refused_total{{{}}} {}\n", labels, st.kv_pins_refused);
  return out;
}

}  // namespace omnibus::server
