// KvTransferAgent end to end: two agents in one process, each with its own
// page-aligned region of random bytes, talking over 127.0.0.1 with one shared
// secret (kv_transfer_testing.h): offers, claims, pulls, releases, dead and
// stalled owners, concurrency, and creation errors.
#include <cstring>
#include <future>
#include <thread>

#include "kv_transfer/kv_transfer_testing.h"

namespace omnibus {
namespace {

using namespace kv_transfer_testing;
using nlohmann::json;

TEST_P(KvTransferTest, OfferClaimPullRelease) {
  Region owner_region(region_bytes(kOwnerBlocks, kOwnerStart), 1);
  Region local_region(region_bytes(kLocalBlocks, kLocalStart), 2);
  std::promise<std::pair<std::string, int32_t>> released;
  auto owner = make_agent(owner_region, kOwnerBlocks, kOwnerStart, "prefill-0",
                          [&](const std::string& id, int32_t n) {
                            released.set_value({id, n});
                          });
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
  KvRegionLayout expected_remote =
      make_layout(owner_region, kOwnerBlocks, kOwnerStart, "model-a/f16/bs16");
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
  EXPECT_TRUE(std::memcmp(local_region.data(), want.data(), want.size()) == 0)
      << "local region differs";
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
  auto other_compat =
      make_agent(local_region, kLocalBlocks, kLocalStart, "d2", {}, 5000ms, "model-b/f16/bs16");
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
  // An io_timeout far beyond the test's own limit: the refused connect must
  // be reported by the refusal itself, not by waiting the timeout out.
  auto local = make_agent(local_region, kLocalBlocks, kLocalStart, "d", {}, 3600s);
  ASSERT_TRUE(owner && local);

  auto c = local->claim("127.0.0.1", dead_port(), "x", {1}, {1});
  ASSERT_FALSE(c.is_ok());
  EXPECT_NE(c.status().message().find("refused"), std::string::npos) << c.status().to_string();
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
      {{0, 0, 4096}, {ob - 8, 0, 16}},   // remote end past the region
      {{0, 0, 4096}, {ob + 1, 0, 1}},    // remote start past the region
      {{0, lb - 4, 8}},                  // local end past the region
      {{0, 0, 16}, {~0ull - 4, 0, 16}},  // remote offset wraps
      {{0, 8, ~0ull - 4}},               // bytes wrap
  };
  for (auto& segments : bad) {
    s = pull_and_wait(*local, owner->port(), claim->token, segments);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();
  }
  EXPECT_TRUE(std::memcmp(local_region.data(), before.data(), before.size()) == 0)
      << "a refused pull wrote";
  // The last byte of the local region is reachable (block 1's last V byte of
  // the last layer lands there).
  KvRegionLayout remote = claim->remote;
  const uint64_t last_v = remote.v_offset[kLayers - 1] + kVBlock;  // block 1's V of the last layer
  s = pull_and_wait(*local, owner->port(), claim->token,
                    {{last_v, lb - kVBlock, kVBlock}, {0, 0, 0}});
  EXPECT_TRUE(s.is_ok()) << s.to_string();
  EXPECT_EQ(std::memcmp(local_region.data() + lb - kVBlock, owner_region.data() + last_v, kVBlock),
            0);
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
    ASSERT_TRUE(pull_and_wait(*local, owner->port(), c->token,
                              block_segments(c->remote, local_layout, {3}, {0}))
                    .is_ok());
    port = owner->port();
    KvRegionLayout remote = c->remote;
    owner.reset();
    owner_region->unmap();  // nothing left to read, whichever transport
    Status s =
        pull_and_wait(*local, port, c->token, block_segments(remote, local_layout, {3}, {0}));
    EXPECT_FALSE(s.is_ok());
    EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s.to_string();
  }
  // The owner restarts on the same port: a new worker address replaces the
  // cached one.
  Region owner_region(region_bytes(kOwnerBlocks, kOwnerStart), 9);
  auto owner = make_agent(owner_region, kOwnerBlocks, kOwnerStart, "p2", {}, 5000ms,
                          "model-a/f16/bs16", port);
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
  ASSERT_TRUE(pull_and_wait(*local, owner->port(), c->token, {{0, 0, 1 << 20}})
                  .is_ok());  // endpoint, wireup
  std::vector<KvSegment> segments;
  for (uint64_t b = 0; b < 64; ++b) segments.push_back({b << 20, (63 - b) << 20, 1 << 20});
  auto t0 = std::chrono::steady_clock::now();
  Status s = pull_and_wait(*local, owner->port(), c->token, segments);
  auto ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_TRUE(s.is_ok()) << s.to_string();
  std::printf("[ UCX_TLS=%s ] 64 MiB in 64 ranges: %.1f ms (%.2f GB/s)\n", GetParam(), ms,
              (64 << 20) / ms / 1e6);
  for (uint64_t b = 0; b < 64; ++b) {
    ASSERT_EQ(std::memcmp(local_region.data() + ((63 - b) << 20), owner_region.data() + (b << 20),
                          1 << 20),
              0)
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
  EXPECT_TRUE(code == static_cast<int>(StatusCode::kOk) ||
              code == static_cast<int>(StatusCode::kCancelled))
      << code;
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
        auto c =
            local->claim("127.0.0.1", owner->port(), id, {b}, {static_cast<uint64_t>(b) << 40});
        if (!c.is_ok()) {
          ADD_FAILURE() << c.status().to_string();
          ++failures;
          return;
        }
        // Each thread writes its own local block t.
        Status s = pull_and_wait(*local, owner->port(), c->token,
                                 block_segments(remote, local_layout, {b}, {t}));
        if (!s.is_ok()) {
          ADD_FAILURE() << s.to_string();
          ++failures;
          return;
        }
        for (int l = 0; l < kLayers; ++l) {
          bool same =
              std::memcmp(local_region.data() + local_layout.k_offset[l] + t * kKBlock,
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
  auto server = kv_transfer::SideChannelServer::start(
      "127.0.0.1", 0, 5000ms, {auth.get(), &peer_list},
      [&](const json&) { return kv_transfer::to_json(reply); });
  ASSERT_TRUE(server.is_ok()) << server.status().to_string();
  int port = (*server)->port();

  auto local = make_agent(local_region, kLocalBlocks, kLocalStart, "d", {}, 300ms);
  ASSERT_TRUE(local);
  auto c = local->claim("127.0.0.1", port, "x", {1}, {1});
  ASSERT_TRUE(c.is_ok()) << c.status().to_string();
  KvRegionLayout local_layout = make_layout(local_region, kLocalBlocks, kLocalStart, "");
  auto before = local_region.snapshot();
  Status s = pull_and_wait(*local, port, c->token,
                           block_segments(c->remote, local_layout, {1, 2}, {0, 1}));
  EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s.to_string();
  EXPECT_NE(s.message().find("timed out after 300 ms"), std::string::npos) << s.message();
  EXPECT_EQ(std::memcmp(local_region.data(), before.data(), before.size()), 0);
  EXPECT_EQ(local->stats().pulls_failed, 1u);
  local.reset();
}

INSTANTIATE_TEST_SUITE_P(Transports, KvTransferTest, ::testing::Values("default", "tcp"),
                         [](const ::testing::TestParamInfo<const char*>& p) {
                           return std::string(p.param);
                         });

}  // namespace
}  // namespace omnibus
