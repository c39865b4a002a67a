// Who may claim and read what (docs/security.md): the side channel facing
// garbage, unsealed and foreign-secret messages and unlisted hosts; a claim
// reads only its own offer's blocks, and an offer is claimed once.
#include <cstring>
#include <future>
#include <thread>

#include "kv_transfer/kv_transfer_testing.h"

namespace omnibus {
namespace {

using namespace kv_transfer_testing;
using nlohmann::json;

class KvTransferSecurityTest : public KvTransferTest {};

TEST_P(KvTransferSecurityTest, MalformedSideChannelInput) {
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

  auto is_error = [](const json& j) {
    return j.is_object() && j.value("ok", true) == false && j["error"].is_string();
  };
  auto sealed_error = [&](const json& j) { return is_error(unsealed(j)); };
  EXPECT_TRUE(is_error(send_raw(port, "\xff\xff\xff\xff garbage")));          // length > 16 MiB
  EXPECT_TRUE(is_error(send_raw(port, std::string("\0\0\0\0", 4))));          // empty frame
  EXPECT_TRUE(send_raw(port, std::string("\0\0\0\x64{\"typ", 9)).is_null());  // truncated: closed
  EXPECT_TRUE(send_raw(port, "\0\0").is_null());                              // truncated length
  EXPECT_TRUE(is_error(send_raw(port, raw_frame("hello"))));
  EXPECT_TRUE(is_error(send_raw(port, raw_frame("[1,2,3]"))));
  EXPECT_TRUE(is_error(send_raw(port, raw_frame("{\"ok\":\"\xff\xfe\"}"))));  // invalid UTF-8
  EXPECT_TRUE(sealed_error(send_raw(port, frame("hello"))));  // sealed, but not JSON
  EXPECT_TRUE(sealed_error(send_raw(port, frame("[1,2,3]"))));
  // Unsealed, sealed with another secret, tampered with, or stale: the
  // server says only "unauthenticated", unsealed, and acts on nothing.
  const std::string good =
      R"({"type":"claim","id":"x","blocks":[1,2],"keys":["a","14"],"compat":"model-a/f16/bs16"})";
  const json unauth = {{"ok", false}, {"error", "unauthenticated"}};
  EXPECT_EQ(send_raw(port, raw_frame(good)), unauth);
  EXPECT_EQ(send_raw(port, frame(good, "another-secret-0123456789")), unauth);
  json tampered = json::parse(frame(good).substr(4));
  tampered["msg"] =
      R"({"type":"claim","id":"x","blocks":[1,3],"keys":["a","14"],"compat":"model-a/f16/bs16"})";
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
  ok = unsealed(send_raw(
      port,
      frame(
          R"({"type":"claim","id":"y","blocks":[1,2],"keys":[10,20],"compat":"model-a/f16/bs16"})")));
  EXPECT_EQ(ok.value("ok", false), true) << ok.dump();  // keys as numbers
  auto c = local->claim("127.0.0.1", port, "x", {1, 2}, {10, 20});
  EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument)
      << c.status().to_string();  // claimed already
  owner->offer({"z", {1, 2}, {10, 20}});
  c = local->claim("127.0.0.1", port, "z", {1, 2}, {10, 20});
  EXPECT_TRUE(c.is_ok()) << c.status().to_string();
  close(stalled);
}

// Least privilege: a claim's token reads its own offer's blocks (K and V of
// every layer, any run of them) and nothing else: not another offer's
// blocks, not part of a block, not the bytes between pools, not after the
// offer is released. Nothing is written on a refusal.
TEST_P(KvTransferSecurityTest, AFetchReadsOnlyItsOffersBlocks) {
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
      block_segments(r, local_layout, {5}, {0}),        // another offer's block
      block_segments(r, local_layout, {4}, {0}),        // nobody's block
      {{r.k_offset[0] + 2 * kKBlock, 0, kKBlock / 2}},  // half a block
      {{r.k_offset[0] + 2 * kKBlock + 8, 0, kKBlock}},  // a block's bytes, shifted
      {{r.k_offset[0] + 2 * kKBlock, 0, 3 * kKBlock}},  // a run into block 4
      {{0, 0, kOwnerStart}},                            // before the pools
  };
  for (const auto& segs : refused) {
    Status st = pull_and_wait(*local, owner->port(), mine->token, segs);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.to_string();
    EXPECT_NE(st.message().find("refused"), std::string::npos) << st.message();
  }
  EXPECT_EQ(std::memcmp(local_region.data(), before.data(), before.size()), 0)
      << "a refused fetch wrote";
  EXPECT_EQ(owner->stats().fetches_refused, refused.size());
  // Its own blocks, also as one run of two (both K pools of layer 1 at once).
  EXPECT_TRUE(pull_and_wait(*local, owner->port(), mine->token,
                            block_segments(r, local_layout, {2, 3}, {0, 1}))
                  .is_ok());
  EXPECT_TRUE(pull_and_wait(*local, owner->port(), mine->token,
                            {{r.k_offset[1] + 2 * kKBlock, 0, 2 * kKBlock}})
                  .is_ok());
  EXPECT_TRUE(
      pull_and_wait(*local, owner->port(), theirs->token, block_segments(r, local_layout, {5}, {2}))
          .is_ok());
  // Released: the token reads nothing any more.
  local->release("127.0.0.1", owner->port(), "mine", 2);
  ASSERT_EQ(released.get_future().wait_for(10s), std::future_status::ready);
  Status st =
      pull_and_wait(*local, owner->port(), mine->token, block_segments(r, local_layout, {2}, {0}));
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.to_string();
}

// Only listed peers reach the side channel; only holders of the secret are
// answered; a claimer never trusts a reply sealed with another secret.
TEST_P(KvTransferSecurityTest, SideChannelAnswersOnlyPeersWithTheSecret) {
  Region owner_region(region_bytes(kOwnerBlocks, kOwnerStart), 22);
  Region local_region(region_bytes(kLocalBlocks, kLocalStart), 23);
  auto unlisted = make_agent(owner_region, kOwnerBlocks, kOwnerStart, "p1", {}, 5000ms,
                             "model-a/f16/bs16", 0, kSecret, "10.1.2.0/24");
  auto owner = make_agent(owner_region, kOwnerBlocks, kOwnerStart, "p2");
  auto stranger = make_agent(local_region, kLocalBlocks, kLocalStart, "d1", {}, 5000ms,
                             "model-a/f16/bs16", 0, "not-the-deployment-secret");
  auto local = make_agent(local_region, kLocalBlocks, kLocalStart, "d2");
  ASSERT_TRUE(unlisted && owner && stranger && local);
  unlisted->offer({"x", {1}, {1}});
  owner->offer({"x", {1}, {1}});
  auto c = local->claim("127.0.0.1", unlisted->port(), "x", {1}, {1});
  EXPECT_EQ(c.status().code(), StatusCode::kUnavailable)
      << c.status().to_string();  // closed unanswered
  EXPECT_EQ(unlisted->stats().not_a_peer, 1u);
  c = stranger->claim("127.0.0.1", owner->port(), "x", {1}, {1});
  EXPECT_EQ(c.status().code(), StatusCode::kPermissionDenied) << c.status().to_string();
  EXPECT_EQ(owner->stats().unauthenticated, 1u);
  c = local->claim("127.0.0.1", owner->port(), "x", {1}, {1});  // the stranger consumed nothing
  EXPECT_TRUE(c.is_ok()) << c.status().to_string();
}

INSTANTIATE_TEST_SUITE_P(Transports, KvTransferSecurityTest, ::testing::Values("default", "tcp"),
                         [](const ::testing::TestParamInfo<const char*>& p) {
                           return std::string(p.param);
                         });

}  // namespace
}  // namespace omnibus
