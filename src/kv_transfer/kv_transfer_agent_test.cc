// KvTransferAgent end to end: two agents in one process, each with its own
// page-aligned region of random bytes, talking over 127.0.0.1 with one shared
// secret. Every test runs twice: with UCX's default transports and with
// UCX_TLS=tcp (UCX reads the environment when an agent calls ucp_config_read).
// Least privilege (docs/security.md): a claim reads only its offer's blocks,
// once claimed an offer cannot be claimed again, and the side channel answers
// only listed peers with the secret.
#include "kv_transfer/kv_transfer_agent.h"

#include <ucp/api/ucp.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <future>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "kv_transfer/messages.h"
#include "kv_transfer/side_channel.h"
#include "kv_transfer/ucx_context.h"

namespace omnibus {
namespace {

using namespace std::chrono_literals;
using nlohmann::json;

const char kSecret[] = "test-secret-0123456789abcdef";

std::shared_ptr<const kv_transfer::TransferAuth> test_auth(const char* secret = kSecret) {
  return std::make_shared<const kv_transfer::TransferAuth>(kv_transfer::TransferAuth::create(secret).value());
}

kv_transfer::PeerList peers(const char* spec = "127.0.0.1") { return kv_transfer::PeerList::parse(spec).value(); }

int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// An anonymous mapping filled with bytes from `seed`.
class Region {
 public:
  Region(size_t bytes, uint32_t seed) : bytes_(bytes) {
    base_ = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    EXPECT_NE(base_, MAP_FAILED);
    std::mt19937_64 rng(seed);
    auto* words = static_cast<uint64_t*>(base_);
    for (size_t i = 0; i < bytes / 8; ++i) words[i] = rng();
  }
  ~Region() { unmap(); }
  Region(const Region&) = delete;
  Region& operator=(const Region&) = delete;
  void unmap() {
    if (base_ != nullptr) munmap(base_, bytes_);
    base_ = nullptr;
  }
  char* data() const { return static_cast<char*>(base_); }
  size_t bytes() const { return bytes_; }
  std::vector<char> snapshot() const { return std::vector<char>(data(), data() + bytes_); }

 private:
  void* base_ = nullptr;
  size_t bytes_;
};

constexpr int kLayers = 3;
constexpr uint64_t kKBlock = 4096 + 192;  // not a page multiple on purpose
constexpr uint64_t kVBlock = 4096 + 64;

// Per layer a K pool then a V pool, starting at `start`.
KvRegionLayout make_layout(const Region& r, int32_t n_blocks, uint64_t start, const std::string& compat) {
  KvRegionLayout l;
  l.base = r.data();
  l.bytes = r.bytes();
  l.n_blocks = n_blocks;
  l.k_block_bytes = kKBlock;
  l.v_block_bytes = kVBlock;
  l.compat = compat;
  uint64_t at = start;
  for (int i = 0; i < kLayers; ++i) {
    l.k_offset.push_back(at);
    at += kKBlock * static_cast<uint64_t>(n_blocks);
    l.v_offset.push_back(at);
    at += kVBlock * static_cast<uint64_t>(n_blocks);
  }
  EXPECT_LE(at, r.bytes());
  return l;
}

size_t region_bytes(int32_t n_blocks, uint64_t start) {
  size_t need = start + kLayers * (kKBlock + kVBlock) * static_cast<uint64_t>(n_blocks);
  return (need + 4095) / 4096 * 4096 + 4096;
}

// K and V of every layer for each (remote block -> local block).
std::vector<KvSegment> block_segments(const KvRegionLayout& remote, const KvRegionLayout& local,
                                      const std::vector<int32_t>& remote_blocks,
                                      const std::vector<int32_t>& local_blocks) {
  std::vector<KvSegment> out;
  for (int l = 0; l < kLayers; ++l) {
    for (size_t i = 0; i < remote_blocks.size(); ++i) {
      uint64_t rb = static_cast<uint64_t>(remote_blocks[i]), lb = static_cast<uint64_t>(local_blocks[i]);
      out.push_back({remote.k_offset[l] + rb * kKBlock, local.k_offset[l] + lb * kKBlock, kKBlock});
      out.push_back({remote.v_offset[l] + rb * kVBlock, local.v_offset[l] + lb * kVBlock, kVBlock});
    }
  }
  return out;
}

// What the local region must hold after the segments were copied.
std::vector<char> expected_after(const std::vector<char>& local_before, const char* remote,
                                 const std::vector<KvSegment>& segments) {
  std::vector<char> out = local_before;
  for (const KvSegment& s : segments) std::memcpy(out.data() + s.local_offset, remote + s.remote_offset, s.bytes);
  return out;
}

// Runs pull() with the claim's token and waits for done.
Status pull_and_wait(KvTransferAgent& agent, int port, const std::string& token, std::vector<KvSegment> segments) {
  std::promise<Status> done;
  auto future = done.get_future();
  agent.pull("127.0.0.1", port, token, std::move(segments), [&done](Status s) { done.set_value(std::move(s)); });
  EXPECT_EQ(future.wait_for(30s), std::future_status::ready) << "pull never completed";
  return future.get();
}

class KvTransferTest : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    if (const char* old = std::getenv("UCX_TLS")) saved_tls_ = old;
    if (std::string(GetParam()) == "tcp") setenv("UCX_TLS", "tcp", 1);
  }
  void TearDown() override {
    if (saved_tls_) {
      setenv("UCX_TLS", saved_tls_->c_str(), 1);
    } else {
      unsetenv("UCX_TLS");
    }
  }

  std::unique_ptr<KvTransferAgent> make_agent(const Region& r, int32_t n_blocks, uint64_t start,
                                              const std::string& engine_id,
                                              std::function<void(const std::string&, int32_t)> on_release = {},
                                              std::chrono::milliseconds io_timeout = 5000ms,
                                              const std::string& compat = "model-a/f16/bs16", int port = 0,
                                              const char* secret = kSecret, const char* peer_spec = "127.0.0.1") {
    KvTransferOptions o;
    o.auth = test_auth(secret);
    o.peers = peers(peer_spec);
    o.listen_host = "127.0.0.1";
    o.port = port;
    o.engine_id = engine_id;
    o.layout = make_layout(r, n_blocks, start, compat);
    o.io_timeout = io_timeout;
    o.on_release = std::move(on_release);
    auto agent = KvTransferAgent::create(std::move(o));
    EXPECT_TRUE(agent.is_ok()) << agent.status().to_string();
    return agent.is_ok() ? std::move(agent).value() : nullptr;
  }

  std::optional<std::string> saved_tls_;
};

constexpr int32_t kOwnerBlocks = 10;
constexpr int32_t kLocalBlocks = 7;
constexpr uint64_t kOwnerStart = 128;
constexpr uint64_t kLocalStart = 4096 + 512;

TEST_P(KvTransferTest, OfferClaimPullRelease) {
  Region owner_region(region_bytes(kOwnerBlocks, kOwnerStart), 1);
  Region local_region(region_bytes(kLocalBlocks, kLocalStart), 2);
  std::promise<std::pair<std::string, int32_t>> released;
  auto owner = make_agent(owner_region, kOwnerBlocks, kOwnerStart, "prefill-0",
                          [&](const std::string& id, int32_t n) { released.set_value({id, n}); });
  auto local = make_agent(local_region, kLocalBlocks, kLocalStart, "decode-0");
  ASSERT_TRUE(owner && local);
  EXPECT_NE(owner->port(), 0);
  EXPECT_EQ(owner->engine_id(), "prefill-0");

  std::vector<int32_t> blocks = {7, 2, 9, 0};
  std::vector<uint64_t> keys = {0xfedcba9876543210ull, 1, 0xffffffffffffffffull, 42};
  owner->offer({"req-1_abc", blocks, keys});
  auto claim = local->claim("127.0.0.1", owner->port(), "req-1_abc", blocks, keys);
  ASSERT_TRUE(claim.is_ok()) << claim.status().to_string();
  const KvRegionLayout& remote = claim->remote;
  KvRegionLayout expected_remote = make_layout(owner_region, kOwnerBlocks, kOwnerStart, "model-a/f16/bs16");
  EXPECT_EQ(remote.base, nullptr);
  EXPECT_EQ(remote.bytes, expected_remote.bytes);
  EXPECT_EQ(remote.n_blocks, kOwnerBlocks);
  EXPECT_EQ(remote.k_offset, expected_remote.k_offset);
  EXPECT_EQ(remote.v_offset, expected_remote.v_offset);
  EXPECT_EQ(remote.k_block_bytes, kKBlock);
  EXPECT_EQ(remote.v_block_bytes, kVBlock);
  EXPECT_EQ(remote.compat, "model-a/f16/bs16");

  // Scattered owner blocks gathered into local blocks 4, 0, 6, 1.
  KvRegionLayout local_layout = make_layout(local_region, kLocalBlocks, kLocalStart, "");
  auto segments = block_segments(remote, local_layout, blocks, {4, 0, 6, 1});
  auto want = expected_after(local_region.snapshot(), owner_region.data(), segments);
  auto owner_before = owner_region.snapshot();
  Status s = pull_and_wait(*local, owner->port(), claim->token, segments);
  ASSERT_TRUE(s.is_ok()) << s.to_string();
  EXPECT_TRUE(std::memcmp(local_region.data(), want.data(), want.size()) == 0) << "local region differs";
  EXPECT_TRUE(std::memcmp(owner_region.data(), owner_before.data(), owner_before.size()) == 0);

  local->release("127.0.0.1", owner->port(), "req-1_abc", 4);
  auto f = released.get_future();
  ASSERT_EQ(f.wait_for(10s), std::future_status::ready);
  EXPECT_EQ(f.get(), std::make_pair(std::string("req-1_abc"), 4));

  KvTransferStats ls = local->stats();
  EXPECT_EQ(ls.claims_ok, 1u);
  EXPECT_EQ(ls.pulls_ok, 1u);
  EXPECT_EQ(ls.pulls_failed, 0u);
  EXPECT_EQ(ls.bytes_pulled, kLayers * 4 * (kKBlock + kVBlock));
  KvTransferStats os = owner->stats();
  EXPECT_EQ(os.releases_received, 1u);
  EXPECT_EQ(os.blocks_served, 4u);
}

TEST_P(KvTransferTest, ClaimRefusedUnlessExactlyOffered) {
  Region owner_region(region_bytes(kOwnerBlocks, kOwnerStart), 3);
  Region local_region(region_bytes(kLocalBlocks, kLocalStart), 4);
  std::promise<void> released;
  auto owner = make_agent(owner_region, kOwnerBlocks, kOwnerStart, "p",
                          [&](const std::string&, int32_t) { released.set_value(); });
  auto local = make_agent(local_region, kLocalBlocks, kLocalStart, "d");
  auto other_compat = make_agent(local_region, kLocalBlocks, kLocalStart, "d2", {}, 5000ms, "model-b/f16/bs16");
  ASSERT_TRUE(owner && local && other_compat);
  std::vector<int32_t> blocks = {1, 2, 3};
  std::vector<uint64_t> keys = {11, 22, 33};
  owner->offer({"a", blocks, keys});
  owner->offer({"b", blocks, keys});
  int port = owner->port();

  auto refused = [&](KvTransferAgent& agent, const std::string& id, std::vector<int32_t> b,
                     std::vector<uint64_t> k, const char* needle) {
    auto c = agent.claim("127.0.0.1", port, id, b, k);
    ASSERT_FALSE(c.is_ok());
    EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument) << c.status().to_string();
    EXPECT_NE(c.status().message().find(needle), std::string::npos) << c.status().message();
  };
  refused(*local, "nope", blocks, keys, "no offer 'nope'");
  refused(*local, "a", {1, 2}, keys, "blocks differ");
  refused(*local, "a", {1, 2, 4}, keys, "blocks differ at position 2");
  refused(*local, "a", blocks, {11, 22, 34}, "keys differ at position 2");
  refused(*other_compat, "a", blocks, keys, "compat");
  ASSERT_TRUE(local->claim("127.0.0.1", port, "a", blocks, keys).is_ok());
  refused(*local, "a", blocks, keys, "claimed already");  // a replayed kv_transfer_params

  owner->withdraw("a");
  refused(*local, "a", blocks, keys, "no offer 'a'");

  ASSERT_TRUE(local->claim("127.0.0.1", port, "b", blocks, keys).is_ok());
  local->release("127.0.0.1", port, "b", 3);
  ASSERT_EQ(released.get_future().wait_for(10s), std::future_status::ready);
  refused(*local, "b", blocks, keys, "no offer 'b'");

  EXPECT_EQ(local->stats().claims_refused, 7u);
  EXPECT_EQ(local->stats().claims_ok, 2u);
  EXPECT_EQ(other_compat->stats().claims_refused, 1u);
}

// A port that was free a moment ago: bound, then closed.
int dead_port() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  socklen_t len = sizeof(a);
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  close(fd);
  return ntohs(a.sin_port);
}

TEST_P(KvTransferTest, UnreachableOwnerAndOutOfRangeSegments) {
  Region owner_region(region_bytes(kOwnerBlocks, kOwnerStart), 5);
  Region local_region(region_bytes(kLocalBlocks, kLocalStart), 6);
  auto owner = make_agent(owner_region, kOwnerBlocks, kOwnerStart, "p");
  auto local = make_agent(local_region, kLocalBlocks, kLocalStart, "d");
  ASSERT_TRUE(owner && local);

  auto t0 = std::chrono::steady_clock::now();
  auto c = local->claim("127.0.0.1", dead_port(), "x", {1}, {1});
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 2s);
  ASSERT_FALSE(c.is_ok());
  EXPECT_EQ(c.status().code(), StatusCode::kUnavailable) << c.status().to_string();
  EXPECT_EQ(local->stats().claims_failed, 1u);

  // Never claimed: refused.
  Status s = pull_and_wait(*local, owner->port(), std::string(16, 'x'), {{0, 0, 16}});
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();

  owner->offer({"x", {1}, {1}});
  auto claim = local->claim("127.0.0.1", owner->port(), "x", {1}, {1});
  ASSERT_TRUE(claim.is_ok());
  auto before = local_region.snapshot();
  uint64_t ob = owner_region.bytes(), lb = local_region.bytes();
  std::vector<std::vector<KvSegment>> bad = {
      {{0, 0, 4096}, {ob - 8, 0, 16}},        // remote end past the region
      {{0, 0, 4096}, {ob + 1, 0, 1}},         // remote start past the region
      {{0, lb - 4, 8}},                        // local end past the region
      {{0, 0, 16}, {~0ull - 4, 0, 16}},       // remote offset wraps
      {{0, 8, ~0ull - 4}},                     // bytes wrap
  };
  for (auto& segments : bad) {
    s = pull_and_wait(*local, owner->port(), claim->token, segments);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();
  }
  EXPECT_TRUE(std::memcmp(local_region.data(), before.data(), before.size()) == 0) << "a refused pull wrote";
  // The last byte of the local region is reachable (block 1's last V byte of
  // the last layer lands there).
  KvRegionLayout remote = claim->remote;
  const uint64_t last_v = remote.v_offset[kLayers - 1] + kVBlock;  // block 1's V of the last layer
  s = pull_and_wait(*local, owner->port(), claim->token, {{last_v, lb - kVBlock, kVBlock}, {0, 0, 0}});
  EXPECT_TRUE(s.is_ok()) << s.to_string();
  EXPECT_EQ(std::memcmp(local_region.data() + lb - kVBlock, owner_region.data() + last_v, kVBlock), 0);
  EXPECT_EQ(local->stats().pulls_failed, 6u);
}

TEST_P(KvTransferTest, OwnerGoneFailsThePullAndTheRequesterRecovers) {
  Region local_region(region_bytes(kLocalBlocks, kLocalStart), 7);
  auto local = make_agent(local_region, kLocalBlocks, kLocalStart, "d", {}, 1500ms);
  ASSERT_TRUE(local);
  KvRegionLayout local_layout = make_layout(local_region, kLocalBlocks, kLocalStart, "");
  int port = 0;
  {
    auto owner_region = std::make_unique<Region>(region_bytes(kOwnerBlocks, kOwnerStart), 8);
    auto owner = make_agent(*owner_region, kOwnerBlocks, kOwnerStart, "p");
    ASSERT_TRUE(owner);
    owner->offer({"x", {3}, {3}});
    auto c = local->claim("127.0.0.1", owner->port(), "x", {3}, {3});
    ASSERT_TRUE(c.is_ok()) << c.status().to_string();
    // A first pull connects the endpoint.
    ASSERT_TRUE(
        pull_and_wait(*local, owner->port(), c->token, block_segments(c->remote, local_layout, {3}, {0})).is_ok());
    port = owner->port();
    KvRegionLayout remote = c->remote;
    owner.reset();
    owner_region->unmap();  // nothing left to read, whichever transport
    Status s = pull_and_wait(*local, port, c->token, block_segments(remote, local_layout, {3}, {0}));
    EXPECT_FALSE(s.is_ok());
    EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s.to_string();
  }
  // The owner restarts on the same port: a new worker address replaces the
  // cached one.
  Region owner_region(region_bytes(kOwnerBlocks, kOwnerStart), 9);
  auto owner = make_agent(owner_region, kOwnerBlocks, kOwnerStart, "p2", {}, 5000ms, "model-a/f16/bs16", port);
  ASSERT_TRUE(owner);
  EXPECT_EQ(owner->port(), port);
  owner->offer({"y", {5, 6}, {5, 6}});
  auto c = local->claim("127.0.0.1", owner->port(), "y", {5, 6}, {5, 6});
  ASSERT_TRUE(c.is_ok()) << c.status().to_string();
  auto segments = block_segments(c->remote, local_layout, {5, 6}, {2, 3});
  auto want = expected_after(local_region.snapshot(), owner_region.data(), segments);
  Status s = pull_and_wait(*local, owner->port(), c->token, segments);
  ASSERT_TRUE(s.is_ok()) << s.to_string();
  EXPECT_EQ(std::memcmp(local_region.data(), want.data(), want.size()), 0);
}

// One layer of 64 blocks of 1 MiB (K) and a tiny V pool: a 64 MiB region.
KvRegionLayout big_layout(const Region& r) {
  KvRegionLayout l;
  l.base = r.data();
  l.bytes = r.bytes();
  l.n_blocks = 64;
  l.k_block_bytes = 1 << 20;
  l.v_block_bytes = 0;
  l.k_offset = {0};
  l.v_offset = {0};
  l.compat = "big";
  return l;
}

std::unique_ptr<KvTransferAgent> make_big_agent(const Region& r) {
  KvTransferOptions o;
  o.auth = test_auth();
  o.peers = peers();
  o.listen_host = "127.0.0.1";
  o.layout = big_layout(r);
  auto a = KvTransferAgent::create(std::move(o));
  EXPECT_TRUE(a.is_ok()) << a.status().to_string();
  return a.is_ok() ? std::move(a).value() : nullptr;
}

TEST_P(KvTransferTest, Pull64MiB) {
  Region owner_region(64 << 20, 10);
  Region local_region(64 << 20, 11);
  auto owner = make_big_agent(owner_region);
  auto local = make_big_agent(local_region);
  ASSERT_TRUE(owner && local);
  std::vector<int32_t> all(64);
  std::vector<uint64_t> keys(64);
  for (int32_t b = 0; b < 64; ++b) all[size_t(b)] = b, keys[size_t(b)] = uint64_t(b);
  owner->offer({"big", all, keys});
  auto c = local->claim("127.0.0.1", owner->port(), "big", all, keys);
  ASSERT_TRUE(c.is_ok());
  ASSERT_TRUE(pull_and_wait(*local, owner->port(), c->token, {{0, 0, 1 << 20}}).is_ok());  // endpoint, wireup
  std::vector<KvSegment> segments;
  for (uint64_t b = 0; b < 64; ++b) segments.push_back({b << 20, (63 - b) << 20, 1 << 20});
  auto t0 = std::chrono::steady_clock::now();
  Status s = pull_and_wait(*local, owner->port(), c->token, segments);
  auto ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_TRUE(s.is_ok()) << s.to_string();
  std::printf("[ UCX_TLS=%s ] 64 MiB in 64 ranges: %.1f ms (%.2f GB/s)\n", GetParam(), ms,
              (64 << 20) / ms / 1e6);
  for (uint64_t b = 0; b < 64; ++b) {
    ASSERT_EQ(std::memcmp(local_region.data() + ((63 - b) << 20), owner_region.data() + (b << 20), 1 << 20), 0)
        << "block " << b;
  }
}

TEST_P(KvTransferTest, DestroyingTheRequesterMidPullCallsDoneOnce) {
  Region owner_region(64 << 20, 12);
  Region local_region(64 << 20, 13);
  auto owner = make_big_agent(owner_region);
  auto local = make_big_agent(local_region);
  ASSERT_TRUE(owner && local);
  std::vector<int32_t> all(64);
  std::vector<uint64_t> keys(64);
  for (int32_t b = 0; b < 64; ++b) all[size_t(b)] = b, keys[size_t(b)] = uint64_t(b);
  owner->offer({"big", all, keys});
  auto c = local->claim("127.0.0.1", owner->port(), "big", all, keys);
  ASSERT_TRUE(c.is_ok());
  std::atomic<int> calls{0};
  std::atomic<int> code{-1};
  local->pull("127.0.0.1", owner->port(), c->token, {{0, 0, 64 << 20}}, [&](Status st) {
    code = static_cast<int>(st.code());
    ++calls;
  });
  local.reset();
  EXPECT_EQ(calls.load(), 1);
  EXPECT_TRUE(code == static_cast<int>(StatusCode::kOk) || code == static_cast<int>(StatusCode::kCancelled))
      << code;
}

// --- the side channel facing garbage ---

int connect_to(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  return fd;
}

// Reads until EOF (10 s at most); returns everything read.
std::string read_all(int fd) {
  std::string out;
  char buf[4096];
  for (;;) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 10000) <= 0) {
      ADD_FAILURE() << "the server neither answered nor closed";
      return out;
    }
    ssize_t n = read(fd, buf, sizeof(buf));
    if (n <= 0) return out;
    out.append(buf, static_cast<size_t>(n));
  }
}

std::string raw_frame(const std::string& body) {
  uint32_t len = htonl(static_cast<uint32_t>(body.size()));
  std::string out(reinterpret_cast<const char*>(&len), 4);
  out.append(body);
  return out;
}

// A frame sealed with `secret` (what a peer with the secret sends).
std::string frame(const std::string& body, const char* secret = kSecret) {
  json inner = json::parse(body, nullptr, false);
  if (inner.is_discarded()) {  // not JSON: seal the raw text by hand
    const std::string ts = std::to_string(now_ms());
    return raw_frame(json{{"msg", body}, {"ts", now_ms()}, {"mac", test_auth(secret)->mac_hex(ts + "\n" + body)}}
                         .dump());
  }
  return raw_frame(kv_transfer::seal(*test_auth(secret), inner, now_ms()).dump());
}

// A reply's message (unsealed with kSecret), or null.
json unsealed(const json& reply) {
  if (!reply.is_object()) return nullptr;
  auto m = kv_transfer::unseal(*test_auth(), reply, now_ms());
  return m.is_ok() ? *m : json(nullptr);
}

// Sends raw bytes, half-closes, returns the reply's JSON (null: no reply).
json send_raw(int port, const std::string& bytes) {
  int fd = connect_to(port);
  EXPECT_EQ(write(fd, bytes.data(), bytes.size()), static_cast<ssize_t>(bytes.size()));
  shutdown(fd, SHUT_WR);
  std::string reply = read_all(fd);
  close(fd);
  if (reply.size() < 4) return nullptr;
  uint32_t len;
  std::memcpy(&len, reply.data(), 4);
  EXPECT_EQ(ntohl(len), reply.size() - 4);
  return json::parse(reply.substr(4), nullptr, false);
}

TEST_P(KvTransferTest, MalformedSideChannelInput) {
  Region owner_region(region_bytes(kOwnerBlocks, kOwnerStart), 14);
  Region local_region(region_bytes(kLocalBlocks, kLocalStart), 15);
  bool released = false;
  auto owner = make_agent(owner_region, kOwnerBlocks, kOwnerStart, "p",
                          [&](const std::string&, int32_t) { released = true; });
  auto local = make_agent(local_region, kLocalBlocks, kLocalStart, "d");
  ASSERT_TRUE(owner && local);
  owner->offer({"x", {1, 2}, {10, 20}});
  int port = owner->port();

  // A client stalled mid-frame holds only its own connection.
  int stalled = connect_to(port);
  ASSERT_EQ(write(stalled, "\0\0\0\x10{", 5), 5);

  auto is_error = [](const json& j) { return j.is_object() && j.value("ok", true) == false && j["error"].is_string(); };
  auto sealed_error = [&](const json& j) { return is_error(unsealed(j)); };
  EXPECT_TRUE(is_error(send_raw(port, "\xff\xff\xff\xff garbage")));   // length > 16 MiB
  EXPECT_TRUE(is_error(send_raw(port, std::string("\0\0\0\0", 4))));   // empty frame
  EXPECT_TRUE(send_raw(port, std::string("\0\0\0\x64{\"typ", 9)).is_null());  // truncated: closed
  EXPECT_TRUE(send_raw(port, "\0\0").is_null());                         // truncated length
  EXPECT_TRUE(is_error(send_raw(port, raw_frame("hello"))));
  EXPECT_TRUE(is_error(send_raw(port, raw_frame("[1,2,3]"))));
  EXPECT_TRUE(is_error(send_raw(port, raw_frame("{\"ok\":\"\xff\xfe\"}"))));  // invalid UTF-8
  EXPECT_TRUE(sealed_error(send_raw(port, frame("hello"))));                      // sealed, but not JSON
  EXPECT_TRUE(sealed_error(send_raw(port, frame("[1,2,3]"))));
  // Unsealed, sealed with another secret, tampered with, or stale: the
  // server says only "unauthenticated", unsealed, and acts on nothing.
  const std::string good = R"({"type":"claim","id":"x","blocks":[1,2],"keys":["a","14"],"compat":"model-a/f16/bs16"})";
  const json unauth = {{"ok", false}, {"error", "unauthenticated"}};
  EXPECT_EQ(send_raw(port, raw_frame(good)), unauth);
  EXPECT_EQ(send_raw(port, frame(good, "another-secret-0123456789")), unauth);
  json tampered = json::parse(frame(good).substr(4));
  tampered["msg"] = R"({"type":"claim","id":"x","blocks":[1,3],"keys":["a","14"],"compat":"model-a/f16/bs16"})";
  EXPECT_EQ(send_raw(port, raw_frame(tampered.dump())), unauth);
  json stale = kv_transfer::seal(*test_auth(), json::parse(good), now_ms() - 120'000);
  EXPECT_EQ(send_raw(port, raw_frame(stale.dump())), unauth);
  EXPECT_GE(owner->stats().unauthenticated, 4u);
  const char* bad[] = {
      R"({})",
      R"({"type":7})",
      R"({"type":"steal"})",
      R"({"type":"claim"})",
      R"({"type":"claim","id":5,"blocks":[1,2],"keys":["a","14"],"compat":"model-a/f16/bs16"})",
      R"({"type":"claim","id":"x","blocks":"1,2","keys":["a","14"],"compat":"model-a/f16/bs16"})",
      R"({"type":"claim","id":"x","blocks":[1,-2],"keys":["a","14"],"compat":"model-a/f16/bs16"})",
      R"({"type":"claim","id":"x","blocks":[1,2.5],"keys":["a","14"],"compat":"model-a/f16/bs16"})",
      R"({"type":"claim","id":"x","blocks":[1,4294967298],"keys":["a","14"],"compat":"model-a/f16/bs16"})",
      R"({"type":"claim","id":"x","blocks":[1,2],"keys":[-10,20],"compat":"model-a/f16/bs16"})",
      R"({"type":"claim","id":"x","blocks":[1,2],"keys":[10.5,20],"compat":"model-a/f16/bs16"})",
      R"({"type":"claim","id":"x","blocks":[1,2],"keys":["a","zz"],"compat":"model-a/f16/bs16"})",
      R"({"type":"claim","id":"x","blocks":[1,2],"keys":["a","00000000000000014"],"compat":"model-a/f16/bs16"})",
      R"({"type":"claim","id":"x","blocks":[1,2],"keys":["a","14"],"compat":null})",
      R"({"type":"release","id":"x","n_blocks":-1})",
      R"({"type":"release","id":"x","n_blocks":"2"})",
      R"({"type":"release","id":["x"],"n_blocks":2})",
  };
  for (const char* body : bad) EXPECT_TRUE(sealed_error(send_raw(port, frame(body)))) << body;
  EXPECT_FALSE(released);

  // A correct claim, written by hand (keys as hex strings), then as numbers
  // for a second offer, then through the agent: each offer once.
  json ok = unsealed(send_raw(port, frame(good)));
  EXPECT_EQ(ok.value("ok", false), true) << ok.dump();
  owner->offer({"y", {1, 2}, {10, 20}});
  ok = unsealed(send_raw(port, frame(R"({"type":"claim","id":"y","blocks":[1,2],"keys":[10,20],"compat":"model-a/f16/bs16"})")));
  EXPECT_EQ(ok.value("ok", false), true) << ok.dump();  // keys as numbers
  auto c = local->claim("127.0.0.1", port, "x", {1, 2}, {10, 20});
  EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument) << c.status().to_string();  // claimed already
  owner->offer({"z", {1, 2}, {10, 20}});
  c = local->claim("127.0.0.1", port, "z", {1, 2}, {10, 20});
  EXPECT_TRUE(c.is_ok()) << c.status().to_string();
  close(stalled);
}

TEST_P(KvTransferTest, ConcurrentClaimsAndPulls) {
  Region owner_region(region_bytes(kOwnerBlocks, kOwnerStart), 16);
  Region local_region(region_bytes(kLocalBlocks, kLocalStart), 17);
  auto owner = make_agent(owner_region, kOwnerBlocks, kOwnerStart, "p");
  auto local = make_agent(local_region, kLocalBlocks, kLocalStart, "d");
  ASSERT_TRUE(owner && local);
  KvRegionLayout remote = make_layout(owner_region, kOwnerBlocks, kOwnerStart, "");
  KvRegionLayout local_layout = make_layout(local_region, kLocalBlocks, kLocalStart, "");
  constexpr int kThreads = 4, kRounds = 8;
  for (int t = 0; t < kThreads; ++t) {
    for (int r = 0; r < kRounds; ++r) {
      int32_t b = (t * kRounds + r) % kOwnerBlocks;
      owner->offer({fmt::format("t{}-{}", t, r), {b}, {static_cast<uint64_t>(b) << 40}});
    }
  }
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int r = 0; r < kRounds; ++r) {
        int32_t b = (t * kRounds + r) % kOwnerBlocks;
        std::string id = fmt::format("t{}-{}", t, r);
        auto c = local->claim("127.0.0.1", owner->port(), id, {b}, {static_cast<uint64_t>(b) << 40});
        if (!c.is_ok()) {
          ADD_FAILURE() << c.status().to_string();
          ++failures;
          return;
        }
        // Each thread writes its own local block t.
        Status s = pull_and_wait(*local, owner->port(), c->token, block_segments(remote, local_layout, {b}, {t}));
        if (!s.is_ok()) {
          ADD_FAILURE() << s.to_string();
          ++failures;
          return;
        }
        for (int l = 0; l < kLayers; ++l) {
          bool same = std::memcmp(local_region.data() + local_layout.k_offset[l] + t * kKBlock,
                                  owner_region.data() + remote.k_offset[l] + b * kKBlock, kKBlock) == 0 &&
                      std::memcmp(local_region.data() + local_layout.v_offset[l] + t * kVBlock,
                                  owner_region.data() + remote.v_offset[l] + b * kVBlock, kVBlock) == 0;
          if (!same) {
            ADD_FAILURE() << "thread " << t << " round " << r << " layer " << l;
            ++failures;
          }
        }
        local->release("127.0.0.1", owner->port(), id, 1);
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(local->stats().pulls_ok, static_cast<uint64_t>(kThreads * kRounds));
  EXPECT_EQ(local->stats().claims_ok, static_cast<uint64_t>(kThreads * kRounds));
}

TEST(KvTransferCreateTest, RefusesABadLayoutAndATakenPort) {
  Region r(1 << 20, 1);
  KvTransferOptions o;
  o.listen_host = "127.0.0.1";
  auto no_secret = KvTransferAgent::create(o);
  ASSERT_FALSE(no_secret.is_ok());
  EXPECT_EQ(no_secret.status().code(), StatusCode::kInvalidArgument);
  o.auth = test_auth();
  o.peers = peers();
  o.layout.base = r.data();
  o.layout.bytes = r.bytes();
  o.layout.n_blocks = 2;
  o.layout.k_block_bytes = 1 << 20;
  o.layout.k_offset = {0};
  o.layout.v_offset = {0};
  auto bad = KvTransferAgent::create(o);
  ASSERT_FALSE(bad.is_ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);

  o.layout.n_blocks = 1;
  auto first = KvTransferAgent::create(o);
  ASSERT_TRUE(first.is_ok()) << first.status().to_string();
  o.port = (*first)->port();
  auto second = KvTransferAgent::create(o);
  ASSERT_FALSE(second.is_ok());
  EXPECT_EQ(second.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(second.status().message().find("Address already in use"), std::string::npos)
      << second.status().message();
}

// An owner whose UCX worker is never progressed (a hung process): its side
// channel answers the claim, but no fetch is ever answered. The pull must
// fail at io_timeout (endpoint force-closed), and the requester must still be
// destroyable at once afterwards.
TEST_P(KvTransferTest, StalledOwnerTimesOut) {
  Region owner_region(region_bytes(kOwnerBlocks, kOwnerStart), 18);
  Region local_region(region_bytes(kLocalBlocks, kLocalStart), 19);
  auto ucx = kv_transfer::UcxContext::create(owner_region.data(), owner_region.bytes());
  ASSERT_TRUE(ucx.is_ok()) << ucx.status().to_string();
  kv_transfer::ClaimReply reply;
  reply.layout = make_layout(owner_region, kOwnerBlocks, kOwnerStart, "model-a/f16/bs16");
  reply.layout.base = nullptr;
  reply.worker_address = (*ucx)->worker_address();
  reply.token = std::string(kv_transfer::kFetchTokenBytes, 't');
  auto auth = test_auth();
  auto peer_list = peers();
  auto server = kv_transfer::SideChannelServer::start("127.0.0.1", 0, 5000ms, {auth.get(), &peer_list},
                                                      [&](const json&) { return kv_transfer::to_json(reply); });
  ASSERT_TRUE(server.is_ok()) << server.status().to_string();
  int port = (*server)->port();

  auto local = make_agent(local_region, kLocalBlocks, kLocalStart, "d", {}, 300ms);
  ASSERT_TRUE(local);
  auto c = local->claim("127.0.0.1", port, "x", {1}, {1});
  ASSERT_TRUE(c.is_ok()) << c.status().to_string();
  KvRegionLayout local_layout = make_layout(local_region, kLocalBlocks, kLocalStart, "");
  auto before = local_region.snapshot();
  auto t0 = std::chrono::steady_clock::now();
  Status s = pull_and_wait(*local, port, c->token, block_segments(c->remote, local_layout, {1, 2}, {0, 1}));
  auto took = std::chrono::steady_clock::now() - t0;
  EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s.to_string();
  EXPECT_NE(s.message().find("timed out"), std::string::npos) << s.message();
  EXPECT_GE(took, 300ms);
  EXPECT_LT(took, 5s);
  EXPECT_EQ(std::memcmp(local_region.data(), before.data(), before.size()), 0);
  EXPECT_EQ(local->stats().pulls_failed, 1u);
  local.reset();
}

// Least privilege: a claim's token reads its own offer's blocks (K and V of
// every layer, any run of them) and nothing else: not another offer's
// blocks, not part of a block, not the bytes between pools, not after the
// offer is released. Nothing is written on a refusal.
TEST_P(KvTransferTest, AFetchReadsOnlyItsOffersBlocks) {
  Region owner_region(region_bytes(kOwnerBlocks, kOwnerStart), 20);
  Region local_region(region_bytes(kLocalBlocks, kLocalStart), 21);
  std::promise<void> released;
  auto owner = make_agent(owner_region, kOwnerBlocks, kOwnerStart, "p",
                          [&](const std::string&, int32_t) { released.set_value(); });
  auto local = make_agent(local_region, kLocalBlocks, kLocalStart, "d");
  ASSERT_TRUE(owner && local);
  owner->offer({"mine", {2, 3}, {1, 2}});
  owner->offer({"theirs", {5}, {9}});
  auto mine = local->claim("127.0.0.1", owner->port(), "mine", {2, 3}, {1, 2});
  auto theirs = local->claim("127.0.0.1", owner->port(), "theirs", {5}, {9});
  ASSERT_TRUE(mine.is_ok() && theirs.is_ok());
  const KvRegionLayout& r = mine->remote;
  KvRegionLayout local_layout = make_layout(local_region, kLocalBlocks, kLocalStart, "");
  auto before = local_region.snapshot();
  const std::vector<std::vector<KvSegment>> refused = {
      block_segments(r, local_layout, {5}, {0}),                  // another offer's block
      block_segments(r, local_layout, {4}, {0}),                  // nobody's block
      {{r.k_offset[0] + 2 * kKBlock, 0, kKBlock / 2}},           // half a block
      {{r.k_offset[0] + 2 * kKBlock + 8, 0, kKBlock}},           // a block's bytes, shifted
      {{r.k_offset[0] + 2 * kKBlock, 0, 3 * kKBlock}},           // a run into block 4
      {{0, 0, kOwnerStart}},                                     // before the pools
  };
  for (const auto& segs : refused) {
    Status st = pull_and_wait(*local, owner->port(), mine->token, segs);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.to_string();
    EXPECT_NE(st.message().find("refused"), std::string::npos) << st.message();
  }
  EXPECT_EQ(std::memcmp(local_region.data(), before.data(), before.size()), 0) << "a refused fetch wrote";
  EXPECT_EQ(owner->stats().fetches_refused, refused.size());
  // Its own blocks, also as one run of two (both K pools of layer 1 at once).
  EXPECT_TRUE(pull_and_wait(*local, owner->port(), mine->token, block_segments(r, local_layout, {2, 3}, {0, 1})).is_ok());
  EXPECT_TRUE(pull_and_wait(*local, owner->port(), mine->token, {{r.k_offset[1] + 2 * kKBlock, 0, 2 * kKBlock}}).is_ok());
  EXPECT_TRUE(pull_and_wait(*local, owner->port(), theirs->token, block_segments(r, local_layout, {5}, {2})).is_ok());
  // Released: the token reads nothing any more.
  local->release("127.0.0.1", owner->port(), "mine", 2);
  ASSERT_EQ(released.get_future().wait_for(10s), std::future_status::ready);
  Status st = pull_and_wait(*local, owner->port(), mine->token, block_segments(r, local_layout, {2}, {0}));
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.to_string();
}

// Only listed peers reach the side channel; only holders of the secret are
// answered; a claimer never trusts a reply sealed with another secret.
TEST_P(KvTransferTest, SideChannelAnswersOnlyPeersWithTheSecret) {
  Region owner_region(region_bytes(kOwnerBlocks, kOwnerStart), 22);
  Region local_region(region_bytes(kLocalBlocks, kLocalStart), 23);
  auto unlisted = make_agent(owner_region, kOwnerBlocks, kOwnerStart, "p1", {}, 5000ms, "model-a/f16/bs16", 0,
                             kSecret, "10.1.2.0/24");
  auto owner = make_agent(owner_region, kOwnerBlocks, kOwnerStart, "p2");
  auto stranger = make_agent(local_region, kLocalBlocks, kLocalStart, "d1", {}, 5000ms, "model-a/f16/bs16", 0,
                             "not-the-deployment-secret");
  auto local = make_agent(local_region, kLocalBlocks, kLocalStart, "d2");
  ASSERT_TRUE(unlisted && owner && stranger && local);
  unlisted->offer({"x", {1}, {1}});
  owner->offer({"x", {1}, {1}});
  auto c = local->claim("127.0.0.1", unlisted->port(), "x", {1}, {1});
  EXPECT_EQ(c.status().code(), StatusCode::kUnavailable) << c.status().to_string();  // closed unanswered
  EXPECT_EQ(unlisted->stats().not_a_peer, 1u);
  c = stranger->claim("127.0.0.1", owner->port(), "x", {1}, {1});
  EXPECT_EQ(c.status().code(), StatusCode::kPermissionDenied) << c.status().to_string();
  EXPECT_EQ(owner->stats().unauthenticated, 1u);
  c = local->claim("127.0.0.1", owner->port(), "x", {1}, {1});  // the stranger consumed nothing
  EXPECT_TRUE(c.is_ok()) << c.status().to_string();
}

INSTANTIATE_TEST_SUITE_P(Transports, KvTransferTest, ::testing::Values("default", "tcp"),
                         [](const ::testing::TestParamInfo<const char*>& p) { return std::string(p.param); });

}  // namespace
}  // namespace omnibus
