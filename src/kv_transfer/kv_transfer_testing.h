// Shared by the KvTransferAgent tests (kv_transfer_agent_test.cc: moving
// blocks; kv_transfer_security_test.cc: who may claim and read what): random
// regions, their layouts, agents with one shared secret, and raw side-channel
// clients. Every KvTransferTest runs twice: with UCX's default transports and
// with UCX_TLS=tcp (UCX reads the environment when an agent calls ucp_config_read).
#pragma once

#include <arpa/inet.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <ucp/api/ucp.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <future>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "kv_transfer/kv_transfer_agent.h"
#include "kv_transfer/messages.h"
#include "kv_transfer/side_channel.h"
#include "kv_transfer/ucx_context.h"

namespace omnibus::kv_transfer_testing {

using namespace std::chrono_literals;
using nlohmann::json;

using nlohmann::json;

inline const char kSecret[] = "test-secret-0123456789abcdef";

inline std::shared_ptr<const kv_transfer::TransferAuth> test_auth(const char* secret = kSecret) {
  return std::make_shared<const kv_transfer::TransferAuth>(
      kv_transfer::TransferAuth::create(secret).value());
}

inline kv_transfer::PeerList peers(const char* spec = "127.0.0.1") {
  return kv_transfer::PeerList::parse(spec).value();
}

inline int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
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

inline constexpr int kLayers = 3;
inline constexpr uint64_t kKBlock = 4096 + 192;  // not a page multiple on purpose
inline constexpr uint64_t kVBlock = 4096 + 64;

// Per layer a K pool then a V pool, starting at `start`.
inline KvRegionLayout make_layout(const Region& r, int32_t n_blocks, uint64_t start,
                                  const std::string& compat) {
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

inline size_t region_bytes(int32_t n_blocks, uint64_t start) {
  size_t need = start + kLayers * (kKBlock + kVBlock) * static_cast<uint64_t>(n_blocks);
  return (need + 4095) / 4096 * 4096 + 4096;
}

// K and V of every layer for each (remote block -> local block).
inline std::vector<KvSegment> block_segments(const KvRegionLayout& remote,
                                             const KvRegionLayout& local,
                                             const std::vector<int32_t>& remote_blocks,
                                             const std::vector<int32_t>& local_blocks) {
  std::vector<KvSegment> out;
  for (int l = 0; l < kLayers; ++l) {
    for (size_t i = 0; i < remote_blocks.size(); ++i) {
      uint64_t rb = static_cast<uint64_t>(remote_blocks[i]),
               lb = static_cast<uint64_t>(local_blocks[i]);
      out.push_back({remote.k_offset[l] + rb * kKBlock, local.k_offset[l] + lb * kKBlock, kKBlock});
      out.push_back({remote.v_offset[l] + rb * kVBlock, local.v_offset[l] + lb * kVBlock, kVBlock});
    }
  }
  return out;
}

// What the local region must hold after the segments were copied.
inline std::vector<char> expected_after(const std::vector<char>& local_before, const char* remote,
                                        const std::vector<KvSegment>& segments) {
  std::vector<char> out = local_before;
  for (const KvSegment& s : segments)
    std::memcpy(out.data() + s.local_offset, remote + s.remote_offset, s.bytes);
  return out;
}

// Runs pull() with the claim's token and waits for done.
inline Status pull_and_wait(KvTransferAgent& agent, int port, const std::string& token,
                            std::vector<KvSegment> segments) {
  std::promise<Status> done;
  auto future = done.get_future();
  agent.pull("127.0.0.1", port, token, std::move(segments),
             [&done](Status s) { done.set_value(std::move(s)); });
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

  std::unique_ptr<KvTransferAgent> make_agent(
      const Region& r, int32_t n_blocks, uint64_t start, const std::string& engine_id,
      std::function<void(const std::string&, int32_t)> on_release = {},
      std::chrono::milliseconds io_timeout = 5000ms, const std::string& compat = "model-a/f16/bs16",
      int port = 0, const char* secret = kSecret, const char* peer_spec = "127.0.0.1") {
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

inline constexpr int32_t kOwnerBlocks = 10;
inline constexpr int32_t kLocalBlocks = 7;
inline constexpr uint64_t kOwnerStart = 128;
inline constexpr uint64_t kLocalStart = 4096 + 512;

// --- the side channel facing garbage ---

inline int connect_to(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  return fd;
}

// Reads until EOF (10 s at most); returns everything read.
inline std::string read_all(int fd) {
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

inline std::string raw_frame(const std::string& body) {
  uint32_t len = htonl(static_cast<uint32_t>(body.size()));
  std::string out(reinterpret_cast<const char*>(&len), 4);
  out.append(body);
  return out;
}

// A frame sealed with `secret` (what a peer with the secret sends).
inline std::string frame(const std::string& body, const char* secret = kSecret) {
  json inner = json::parse(body, nullptr, false);
  if (inner.is_discarded()) {  // not JSON: seal the raw text by hand
    // One clock reading for both the field and the MAC: two readings
    // straddling a millisecond made the MAC wrong (a flaky "unauthenticated").
    const int64_t ts = now_ms();
    return raw_frame(json{{"msg", body},
                          {"ts", ts},
                          {"mac", test_auth(secret)->mac_hex(std::to_string(ts) + "\n" + body)}}
                         .dump());
  }
  return raw_frame(kv_transfer::seal(*test_auth(secret), inner, now_ms()).dump());
}

// A reply's message (unsealed with kSecret), or null.
inline json unsealed(const json& reply) {
  if (!reply.is_object()) return nullptr;
  auto m = kv_transfer::unseal(*test_auth(), reply, now_ms());
  return m.is_ok() ? *m : json(nullptr);
}

// Sends raw bytes, half-closes, returns the reply's JSON (null: no reply).
inline json send_raw(int port, const std::string& bytes) {
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

}  // namespace omnibus::kv_transfer_testing
