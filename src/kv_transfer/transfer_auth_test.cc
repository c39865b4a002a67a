// The KV-transfer plane's authentication pieces: HMAC-SHA256 against RFC
// 4231's vectors, the secret's sources, the sealed side-channel envelope, the
// peer list, and the fetch message parser facing bytes from the network.
#include "kv_transfer/transfer_auth.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "kv_transfer/messages.h"
#include "kv_transfer/peer_list.h"

namespace omnibus::kv_transfer {
namespace {

std::string hex(const std::array<uint8_t, 32>& d) {
  std::string out;
  for (uint8_t b : d) out += fmt::format("{:02x}", b);
  return out;
}

TEST(Hmac, Rfc4231Vectors) {
  EXPECT_EQ(hex(hmac_sha256(std::string(20, '\x0b'), "Hi There")),
            "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
  EXPECT_EQ(hex(hmac_sha256("Jefe", "what do ya want for nothing?")),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  // A key longer than the block is hashed first (test case 6).
  EXPECT_EQ(hex(hmac_sha256(std::string(131, '\xaa'),
                            "Test Using Larger Than Block-Size Key - Hash Key First")),
            "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
}

TEST(TransferAuth, SecretRules) {
  EXPECT_EQ(TransferAuth::create("short").status().code(), StatusCode::kInvalidArgument);
  auto a = TransferAuth::create("0123456789abcdef").value();
  const std::string mac = a.mac_hex("message");
  EXPECT_EQ(mac.size(), 64u);
  EXPECT_TRUE(a.verify_hex("message", mac));
  EXPECT_FALSE(a.verify_hex("messagE", mac));
  EXPECT_FALSE(a.verify_hex("message", mac.substr(0, 63)));
  EXPECT_FALSE(TransferAuth::create("0123456789abcdeF").value().verify_hex("message", mac));

  const std::string path = testing::TempDir() + "/omnibus_secret_" + std::to_string(getpid());
  std::ofstream(path) << "  0123456789abcdef\n";
  chmod(path.c_str(), 0644);
  auto open = TransferAuth::from_file(path);
  EXPECT_EQ(open.status().code(), StatusCode::kInvalidArgument)
      << "a world-readable secret file is refused";
  EXPECT_NE(open.status().message().find("chmod 600"), std::string::npos);
  chmod(path.c_str(), 0600);
  auto from_file = TransferAuth::from_file(path);
  ASSERT_TRUE(from_file.is_ok()) << from_file.status().to_string();
  EXPECT_TRUE(from_file->verify_hex("message", mac)) << "whitespace around the secret is trimmed";
  std::remove(path.c_str());
  EXPECT_EQ(TransferAuth::from_file(path).status().code(), StatusCode::kNotFound);
}

TEST(Seal, RoundTripAndEveryWayToFail) {
  auto a = TransferAuth::create("0123456789abcdef").value();
  auto b = TransferAuth::create("fedcba9876543210").value();
  const nlohmann::json msg = {{"type", "claim"}, {"id", "x"}};
  const int64_t now = 1'800'000'000'000;
  nlohmann::json env = seal(a, msg, now);
  auto back = unseal(a, env, now + 1000);
  ASSERT_TRUE(back.is_ok()) << back.status().to_string();
  EXPECT_EQ(*back, msg);
  EXPECT_EQ(unseal(b, env, now).status().code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(unseal(a, env, now + kMaxSealAgeMs + 1).status().code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(unseal(a, env, now - kMaxSealAgeMs - 1).status().code(), StatusCode::kPermissionDenied);
  nlohmann::json t = env;
  t["ts"] = now + 1;  // the timestamp is signed too
  EXPECT_EQ(unseal(a, t, now).status().code(), StatusCode::kPermissionDenied);
  t = env;
  t["msg"] = R"({"id":"y","type":"claim"})";
  EXPECT_EQ(unseal(a, t, now).status().code(), StatusCode::kPermissionDenied);
  for (const char* bad :
       {R"([])", R"({})", R"({"msg":1,"ts":1,"mac":"x"})", R"({"msg":"{}","ts":"1","mac":"x"})"}) {
    EXPECT_EQ(unseal(a, nlohmann::json::parse(bad), now).status().code(),
              StatusCode::kPermissionDenied)
        << bad;
  }
  // Sealed but not an object inside: the peer has the secret, so it is told.
  nlohmann::json arr = {
      {"msg", "[1]"}, {"ts", now}, {"mac", a.mac_hex(std::to_string(now) + "\n[1]")}};
  EXPECT_EQ(unseal(a, arr, now).status().code(), StatusCode::kInvalidArgument);
}

sockaddr_in v4(const char* ip) {
  sockaddr_in s{};
  s.sin_family = AF_INET;
  inet_pton(AF_INET, ip, &s.sin_addr);
  return s;
}

TEST(PeerList, AddressesNetworksAndNames) {
  auto empty = PeerList::parse("");
  ASSERT_TRUE(empty.is_ok());
  EXPECT_TRUE(empty->empty());
  EXPECT_FALSE(empty->allows_host("127.0.0.1"));

  auto p = PeerList::parse("127.0.0.1, 10.1.0.0/16,fd00::/8 ,localhost");
  ASSERT_TRUE(p.is_ok()) << p.status().to_string();
  EXPECT_TRUE(p->allows_host("127.0.0.1"));
  EXPECT_TRUE(p->allows_host("10.1.255.3"));
  EXPECT_FALSE(p->allows_host("10.2.0.1"));
  EXPECT_TRUE(p->allows_host("fd12::1"));
  EXPECT_FALSE(p->allows_host("fe80::1"));
  EXPECT_TRUE(p->allows_host("localhost")) << "a listed name, as listed";
  EXPECT_FALSE(p->allows_host("example.com")) << "names are never resolved for a request";
  EXPECT_FALSE(p->allows_host("127.0.0.2"));
  EXPECT_FALSE(p->allows_host("127.0.0.1:80"));
  sockaddr_in a = v4("10.1.2.3"), b = v4("10.3.2.1");
  EXPECT_TRUE(p->allows_address(reinterpret_cast<sockaddr*>(&a)));
  EXPECT_FALSE(p->allows_address(reinterpret_cast<sockaddr*>(&b)));
  sockaddr_in6 mapped{};
  mapped.sin6_family = AF_INET6;
  inet_pton(AF_INET6, "::ffff:127.0.0.1", &mapped.sin6_addr);
  EXPECT_TRUE(p->allows_address(reinterpret_cast<sockaddr*>(&mapped)))
      << "IPv4-mapped counts as IPv4";

  auto odd = PeerList::parse("10.0.0.0/12");  // a prefix that is not a byte multiple
  ASSERT_TRUE(odd.is_ok());
  EXPECT_TRUE(odd->allows_host("10.15.255.255"));
  EXPECT_FALSE(odd->allows_host("10.16.0.0"));
  for (const char* bad :
       {"10.0.0.0/33", "10.0.0.0/", "10.0.0.0/x", "::/129", "no such host.invalid"}) {
    EXPECT_EQ(PeerList::parse(bad).status().code(), StatusCode::kInvalidArgument) << bad;
  }
}

TEST(FetchMessage, RoundTripAndTruncations) {
  FetchRequest r;
  r.fetch_id = 0x0102030405060708ull;
  r.token = std::string(kFetchTokenBytes, 'k');
  r.ranges = {{1, 2}, {~0ull, 5}};
  const std::string bytes = encode_fetch(r);
  auto back = parse_fetch(bytes);
  ASSERT_TRUE(back.is_ok()) << back.status().to_string();
  EXPECT_EQ(back->fetch_id, r.fetch_id);
  EXPECT_EQ(back->token, r.token);
  ASSERT_EQ(back->ranges.size(), 2u);
  EXPECT_EQ(back->ranges[1].offset, ~0ull);
  for (size_t n = 0; n < bytes.size(); ++n) {
    EXPECT_FALSE(parse_fetch(bytes.substr(0, n)).is_ok()) << "truncated to " << n;
  }
  EXPECT_FALSE(parse_fetch(bytes + "x").is_ok());
  std::string huge = bytes.substr(0, 8 + kFetchTokenBytes) + std::string("\xff\xff\xff\xff", 4);
  EXPECT_FALSE(parse_fetch(huge).is_ok());
}

}  // namespace
}  // namespace omnibus::kv_transfer
