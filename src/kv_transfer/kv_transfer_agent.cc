// KvTransferAgent: the offers and their claims (owner side), the claimed
// peers (decode side), the side-channel handler and the release sender. UCX
// work is UcxTransport's (ucx_transport.h); framing and sealing are
// side_channel.h's; the message shapes, messages.h's.
#include "kv_transfer/kv_transfer_agent.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <random>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include "kv_transfer/messages.h"
#include "kv_transfer/side_channel.h"
#include "kv_transfer/ucx_context.h"
#include "kv_transfer/ucx_transport.h"
#include "util/check.h"

namespace omnibus {

using kv_transfer::ClaimReply;
using kv_transfer::ClaimRequest;
using kv_transfer::ReleaseRequest;
using kv_transfer::RemotePeer;
using nlohmann::json;

namespace {

Status check_layout(const KvRegionLayout& l) {
  if (l.base == nullptr || l.bytes == 0) return Status::invalid_argument("the KV region is empty");
  if (l.n_blocks < 0) return Status::invalid_argument("n_blocks {} < 0", l.n_blocks);
  if (l.k_offset.size() != l.v_offset.size()) {
    return Status::invalid_argument("{} K offsets but {} V offsets", l.k_offset.size(),
                                    l.v_offset.size());
  }
  auto pool_fits = [&](uint64_t offset, uint64_t block_bytes) {
    unsigned __int128 end =
        static_cast<unsigned __int128>(block_bytes) * static_cast<uint64_t>(l.n_blocks) + offset;
    return end <= l.bytes;
  };
  for (size_t i = 0; i < l.k_offset.size(); ++i) {
    if (!pool_fits(l.k_offset[i], l.k_block_bytes) || !pool_fits(l.v_offset[i], l.v_block_bytes)) {
      return Status::invalid_argument("layer {}'s K or V pool ends past the region ({} bytes)", i,
                                      l.bytes);
    }
  }
  return Status::ok();
}

bool valid_offer_id(const std::string& id) {
  if (id.empty() || id.size() > 128) return false;
  for (char c : id) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '-';
    if (!ok) return false;
  }
  return true;
}

template <typename T>
std::string first_difference(const char* what, const std::vector<T>& claimed,
                             const std::vector<T>& offered) {
  if (claimed.size() != offered.size()) {
    return fmt::format("{} differ: the claim names {}, the offer holds {}", what, claimed.size(),
                       offered.size());
  }
  for (size_t i = 0; i < claimed.size(); ++i) {
    if (claimed[i] != offered[i]) {
      return fmt::format("{} differ at position {}: claimed {}, offered {}", what, i, claimed[i],
                         offered[i]);
    }
  }
  return {};
}

std::string peer_name(const std::string& host, int port) {
  return fmt::format("{}:{}", host, port);
}

std::string random_token() {
  std::random_device rd;  // the kernel's CSPRNG on Linux (getrandom)
  std::string t(kv_transfer::kFetchTokenBytes, '\0');
  for (size_t i = 0; i < t.size(); i += 4) {
    const uint32_t v = rd();
    std::memcpy(t.data() + i, &v, std::min<size_t>(4, t.size() - i));
  }
  return t;
}

// Byte ranges of the region that offer `o` lets a fetch read: each block's
// K and V bytes in every layer, and the window rows.
bool inside_offer(const KvRegionLayout& l, const KvOffer& o,
                  const std::unordered_set<int32_t>& blocks, uint64_t offset, uint64_t bytes) {
  if (o.window_offset >= 0 && offset == uint64_t(o.window_offset) && bytes == o.window_bytes)
    return true;
  for (size_t layer = 0; layer < l.k_offset.size(); ++layer) {
    for (int kv = 0; kv < 2; ++kv) {
      const uint64_t start = kv == 0 ? l.k_offset[layer] : l.v_offset[layer];
      const uint64_t bb = kv == 0 ? l.k_block_bytes : l.v_block_bytes;
      if (bb == 0 || offset < start || (offset - start) % bb != 0 || bytes % bb != 0 || bytes == 0)
        continue;
      const uint64_t first = (offset - start) / bb, n = bytes / bb;
      if (first + n > uint64_t(l.n_blocks)) continue;
      bool all = true;
      for (uint64_t b = first; b < first + n && all; ++b) all = blocks.count(int32_t(b)) != 0;
      if (all) return true;
    }
  }
  return false;
}

}  // namespace

struct KvTransferAgent::Impl {
  KvTransferOptions options;
  std::unique_ptr<kv_transfer::UcxContext> ucx;

  struct Offered {
    KvOffer offer;
    std::unordered_set<int32_t> blocks;
    std::string token;  // set once claimed; a second claim is refused
  };
  mutable std::mutex mu;
  std::unordered_map<std::string, Offered> offers;       // guarded by mu
  std::unordered_map<std::string, std::string> claimed;  // token -> offer id, guarded by mu
  std::map<std::string, std::shared_ptr<const RemotePeer>> peers;  // guarded by mu
  KvTransferStats stats;                                           // guarded by mu

  // Releases are sent by their own thread (fire and forget).
  std::mutex release_mu;
  std::condition_variable release_cv;
  struct PendingRelease {
    std::string host;
    int port;
    ReleaseRequest request;
  };
  std::deque<PendingRelease> releases;
  bool release_stop = false;
  int release_cancel_fd = -1;  // eventfd: aborts the round trip in flight at shutdown
  std::thread release_thread;

  // claim_async's round trips, run in order by the claim thread; a job is
  // called with cancelled = true (and must then only answer kCancelled) when
  // the agent is destroyed before it ran.
  std::mutex claim_mu;
  std::condition_variable claim_cv;
  std::deque<std::function<void(bool cancelled)>> claim_jobs;  // guarded by claim_mu
  bool claim_stop = false;                                     // guarded by claim_mu
  int claim_cancel_fd = -1;  // eventfd: aborts the round trip in flight at shutdown
  std::thread claim_thread;

  // Destroyed first to last in reverse declaration order: see ~KvTransferAgent.
  std::unique_ptr<kv_transfer::UcxTransport> transport;
  std::unique_ptr<kv_transfer::SideChannelServer> server;

  StatusOr<KvClaim> claim(const std::string& host, int port, const std::string& id,
                          const std::vector<int32_t>& blocks, const std::vector<uint64_t>& keys,
                          int cancel_fd);
  void claim_loop();
  json handle(const json& request);
  json handle_claim(const json& request);
  json handle_release(const json& request);
  Status authorize(const std::string& token, const std::vector<kv_transfer::FetchRange>& ranges);
  void erase_offer(const std::string& id);  // REQUIRES mu
  void release_loop();
};

json KvTransferAgent::Impl::handle(const json& request) {
  auto type = request.find("type");
  if (type == request.end() || !type->is_string())
    return kv_transfer::error_json("'type' must be a string");
  if (*type == "claim") return handle_claim(request);
  if (*type == "release") return handle_release(request);
  return kv_transfer::error_json("unknown message type");
}

json KvTransferAgent::Impl::handle_claim(const json& request) {
  auto claim = kv_transfer::parse_claim_request(request);
  if (!claim.is_ok()) return kv_transfer::error_json("bad claim: " + claim.status().message());
  std::string why, token;
  {
    std::lock_guard<std::mutex> lock(mu);
    auto it = offers.find(claim->id);
    if (it == offers.end()) {
      why = fmt::format("no offer '{}' (unknown, withdrawn or released)", claim->id);
    } else if (!it->second.token.empty()) {
      why =
          fmt::format("offer '{}' was claimed already (a replayed kv_transfer_params?)", claim->id);
    } else if (claim->compat != options.layout.compat) {
      why = fmt::format("incompatible KV layout: compat '{}' vs the owner's '{}'", claim->compat,
                        options.layout.compat);
    } else {
      why = first_difference("blocks", claim->blocks, it->second.offer.blocks);
      if (why.empty()) why = first_difference("keys", claim->keys, it->second.offer.keys);
    }
    if (why.empty()) {
      token = random_token();
      it->second.token = token;
      claimed[token] = claim->id;
    }
  }
  if (!why.empty())
    return kv_transfer::error_json(fmt::format("claim of '{}' refused: {}", claim->id, why));
  kv_transfer::ClaimReply reply;
  reply.layout = options.layout;
  reply.layout.base = nullptr;
  reply.worker_address = ucx->worker_address();
  reply.token = std::move(token);
  return kv_transfer::to_json(reply);
}

Status KvTransferAgent::Impl::authorize(const std::string& token,
                                        const std::vector<kv_transfer::FetchRange>& ranges) {
  std::lock_guard<std::mutex> lock(mu);
  auto c = claimed.find(token);
  auto it = c == claimed.end() ? offers.end() : offers.find(c->second);
  if (it == offers.end()) {
    ++stats.fetches_refused;
    return Status::invalid_argument(
        "no live claim has this token (released, withdrawn, or never claimed)");
  }
  for (size_t i = 0; i < ranges.size(); ++i) {
    if (!inside_offer(options.layout, it->second.offer, it->second.blocks, ranges[i].offset,
                      ranges[i].bytes)) {
      ++stats.fetches_refused;
      return Status::invalid_argument("range {} [{}, +{}) is not inside the blocks of offer '{}'",
                                      i, ranges[i].offset, ranges[i].bytes, c->second);
    }
  }
  return Status::ok();
}

void KvTransferAgent::Impl::erase_offer(const std::string& id) {
  auto it = offers.find(id);
  if (it == offers.end()) return;
  if (!it->second.token.empty()) claimed.erase(it->second.token);
  offers.erase(it);
}

json KvTransferAgent::Impl::handle_release(const json& request) {
  auto release = kv_transfer::parse_release_request(request);
  if (!release.is_ok())
    return kv_transfer::error_json("bad release: " + release.status().message());
  {
    std::lock_guard<std::mutex> lock(mu);
    if (offers.count(release->id) == 0)
      return kv_transfer::error_json("no offer '" + release->id + "'");
    erase_offer(release->id);
    ++stats.releases_received;
    stats.blocks_served += static_cast<uint64_t>(release->n_blocks);
  }
  if (options.on_release) options.on_release(release->id, release->n_blocks);
  return json{{"ok", true}};
}

void KvTransferAgent::Impl::release_loop() {
  for (;;) {
    PendingRelease item;
    {
      std::unique_lock<std::mutex> lock(release_mu);
      release_cv.wait(lock, [&] { return release_stop || !releases.empty(); });
      if (release_stop) return;  // unsent releases: the owners' timeouts unpin
      item = std::move(releases.front());
      releases.pop_front();
    }
    (void)kv_transfer::side_channel_call(item.host, item.port, kv_transfer::to_json(item.request),
                                         *options.auth, options.io_timeout,
                                         release_cancel_fd);  // errors ignored: fire and forget
  }
}

StatusOr<std::unique_ptr<KvTransferAgent>> KvTransferAgent::create(KvTransferOptions options) {
  OMNIBUS_RETURN_IF_ERROR(check_layout(options.layout));
  if (options.io_timeout.count() <= 0)
    return Status::invalid_argument("io_timeout must be positive");
  if (options.auth == nullptr)
    return Status::invalid_argument("the KV transfer needs the deployment's secret");
  auto impl = std::make_unique<Impl>();
  impl->options = std::move(options);
  OMNIBUS_ASSIGN_OR_RETURN(impl->ucx, kv_transfer::UcxContext::create(impl->options.layout.base,
                                                                      impl->options.layout.bytes));
  Impl* raw = impl.get();
  OMNIBUS_ASSIGN_OR_RETURN(
      impl->server, kv_transfer::SideChannelServer::start(
                        impl->options.listen_host, impl->options.port, impl->options.io_timeout,
                        {impl->options.auth.get(), &impl->options.peers},
                        [raw](const json& request) { return raw->handle(request); }));
  impl->release_cancel_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (impl->release_cancel_fd < 0) return Status::unavailable("eventfd: {}", std::strerror(errno));
  impl->release_thread = std::thread([raw] { raw->release_loop(); });
  impl->claim_cancel_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (impl->claim_cancel_fd < 0) return Status::unavailable("eventfd: {}", std::strerror(errno));
  impl->claim_thread = std::thread([raw] { raw->claim_loop(); });
  impl->transport = std::make_unique<kv_transfer::UcxTransport>(
      impl->ucx.get(), impl->options.layout.bytes, impl->options.io_timeout,
      [raw](const std::string& token, const std::vector<kv_transfer::FetchRange>& ranges) {
        return raw->authorize(token, ranges);
      });
  return std::unique_ptr<KvTransferAgent>(new KvTransferAgent(std::move(impl)));
}

KvTransferAgent::KvTransferAgent(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

KvTransferAgent::~KvTransferAgent() {
  Impl& d = *impl_;
  d.server.reset();  // no more claims or releases served
  {
    std::lock_guard<std::mutex> lock(d.release_mu);
    d.release_stop = true;
  }
  d.release_cv.notify_all();
  uint64_t one = 1;
  OMNIBUS_CHECK(::write(d.release_cancel_fd, &one, sizeof(one)) == sizeof(one));
  d.release_thread.join();
  ::close(d.release_cancel_fd);
  std::deque<std::function<void(bool)>> unclaimed;
  {
    std::lock_guard<std::mutex> lock(d.claim_mu);
    d.claim_stop = true;
  }
  d.claim_cv.notify_all();
  OMNIBUS_CHECK(::write(d.claim_cancel_fd, &one, sizeof(one)) == sizeof(one));
  d.claim_thread.join();
  ::close(d.claim_cancel_fd);
  {
    std::lock_guard<std::mutex> lock(d.claim_mu);
    unclaimed.swap(d.claim_jobs);
  }
  for (auto& job : unclaimed) job(/*cancelled=*/true);
  d.transport.reset();  // pending pulls: done(kCancelled); endpoints gone
  d.ucx.reset();        // mem unmap, worker, context
}

int KvTransferAgent::port() const { return impl_->server->port(); }

const std::string& KvTransferAgent::engine_id() const { return impl_->options.engine_id; }

void KvTransferAgent::offer(KvOffer offer) {
  OMNIBUS_CHECK(valid_offer_id(offer.id));
  OMNIBUS_CHECK(offer.blocks.size() == offer.keys.size());
  std::lock_guard<std::mutex> lock(impl_->mu);
  std::string id = offer.id;
  Impl::Offered o;
  o.blocks.insert(offer.blocks.begin(), offer.blocks.end());
  o.offer = std::move(offer);
  OMNIBUS_CHECK(impl_->offers.emplace(std::move(id), std::move(o)).second);
}

void KvTransferAgent::withdraw(const std::string& id) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->erase_offer(id);
}

StatusOr<KvClaim> KvTransferAgent::claim(const std::string& host, int port, const std::string& id,
                                         const std::vector<int32_t>& blocks,
                                         const std::vector<uint64_t>& keys) {
  return impl_->claim(host, port, id, blocks, keys, /*cancel_fd=*/-1);
}

void KvTransferAgent::claim_async(std::string host, int port, std::string id,
                                  std::vector<int32_t> blocks, std::vector<uint64_t> keys,
                                  std::function<void(StatusOr<KvClaim>)> done) {
  Impl& d = *impl_;
  std::function<void(bool)> job = [&d, host = std::move(host), port, id = std::move(id),
                                   blocks = std::move(blocks), keys = std::move(keys),
                                   done = std::move(done)](bool cancelled) {
    if (cancelled) return done(Status::cancelled("the KV transfer agent is shutting down"));
    done(d.claim(host, port, id, blocks, keys, d.claim_cancel_fd));
  };
  {
    std::lock_guard<std::mutex> lock(d.claim_mu);
    if (!d.claim_stop) {
      d.claim_jobs.push_back(std::move(job));
      job = {};
    }
  }
  if (job) return job(/*cancelled=*/true);
  d.claim_cv.notify_one();
}

void KvTransferAgent::Impl::claim_loop() {
  for (;;) {
    std::function<void(bool)> job;
    {
      std::unique_lock<std::mutex> lock(claim_mu);
      claim_cv.wait(lock, [&] { return claim_stop || !claim_jobs.empty(); });
      if (claim_stop) return;  // the destructor cancels what is left
      job = std::move(claim_jobs.front());
      claim_jobs.pop_front();
    }
    job(/*cancelled=*/false);
  }
}

StatusOr<KvClaim> KvTransferAgent::Impl::claim(const std::string& host, int port,
                                               const std::string& id,
                                               const std::vector<int32_t>& blocks,
                                               const std::vector<uint64_t>& keys, int cancel_fd) {
  Impl& d = *this;
  std::string name = peer_name(host, port);
  auto count = [&](uint64_t KvTransferStats::*counter) {
    std::lock_guard<std::mutex> lock(d.mu);
    ++(d.stats.*counter);
  };
  ClaimRequest request{id, blocks, keys, d.options.layout.compat};
  auto reply = kv_transfer::side_channel_call(host, port, kv_transfer::to_json(request),
                                              *d.options.auth, d.options.io_timeout, cancel_fd);
  if (!reply.is_ok() && reply.status().code() == StatusCode::kPermissionDenied) {
    count(&KvTransferStats::claims_failed);
    return reply.status();
  }
  if (!reply.is_ok()) {
    count(&KvTransferStats::claims_failed);
    return Status::unavailable("claim of '{}' from {}: {}", id, name, reply.status().message());
  }
  auto ok = reply->find("ok");
  if (ok == reply->end() || !ok->is_boolean()) {
    count(&KvTransferStats::claims_failed);
    return Status::unavailable("claim of '{}' from {}: a reply without 'ok'", id, name);
  }
  if (!ok->get<bool>()) {
    count(&KvTransferStats::claims_refused);
    auto error = reply->find("error");
    std::string why =
        error != reply->end() && error->is_string() ? error->get<std::string>() : "no reason given";
    return Status::invalid_argument("{} refused: {}", name, why);
  }
  auto parsed = kv_transfer::parse_claim_reply(*reply);
  if (!parsed.is_ok()) {
    count(&KvTransferStats::claims_failed);
    return Status::unavailable("claim of '{}' from {}: malformed reply: {}", id, name,
                               parsed.status().message());
  }
  auto peer = std::make_shared<RemotePeer>();
  peer->name = name;
  peer->worker_address = std::move(parsed->worker_address);
  peer->bytes = parsed->layout.bytes;
  {
    std::lock_guard<std::mutex> lock(d.mu);
    auto& cached = d.peers[name];
    // The same owner keeps its entry; a restarted one (new worker address)
    // replaces it, and the progress thread then replaces the endpoint.
    if (cached == nullptr || cached->worker_address != peer->worker_address ||
        cached->bytes != peer->bytes) {
      cached = std::move(peer);
    }
    ++d.stats.claims_ok;
  }
  return KvClaim{std::move(parsed->layout), std::move(parsed->token)};
}

void KvTransferAgent::pull(const std::string& host, int port, const std::string& token,
                           std::vector<KvSegment> segments, std::function<void(Status)> done) {
  Impl& d = *impl_;
  std::shared_ptr<const RemotePeer> peer;
  {
    std::lock_guard<std::mutex> lock(d.mu);
    auto it = d.peers.find(peer_name(host, port));
    if (it != d.peers.end()) peer = it->second;
  }
  d.transport->pull(std::move(peer), token, std::move(segments),
                    [&d, done = std::move(done)](Status status, uint64_t bytes) {
                      {
                        std::lock_guard<std::mutex> lock(d.mu);
                        if (status.is_ok()) {
                          ++d.stats.pulls_ok;
                          d.stats.bytes_pulled += bytes;
                        } else {
                          ++d.stats.pulls_failed;
                        }
                      }
                      done(std::move(status));
                    });
}

void KvTransferAgent::release(const std::string& host, int port, const std::string& id,
                              int32_t n_blocks) {
  Impl& d = *impl_;
  {
    std::lock_guard<std::mutex> lock(d.release_mu);
    d.releases.push_back({host, port, ReleaseRequest{id, n_blocks}});
  }
  d.release_cv.notify_one();
}

KvTransferStats KvTransferAgent::stats() const {
  KvTransferStats s;
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    s = impl_->stats;
  }
  const kv_transfer::SideChannelRefusals r = impl_->server->refusals();
  s.not_a_peer = r.not_a_peer;
  s.unauthenticated = r.unauthenticated;
  return s;
}

}  // namespace omnibus
