// KvEventPublisher over loopback TCP: a SUB socket gets every batch in order
// with the topic and consecutive sequence numbers; replay framing (from the
// start, from the middle, past the buffer, the end marker); a stalled
// subscriber never holds the publisher up; a full queue drops and counts,
// leaving a gap in the sequence numbers; bad endpoints are errors naming them.
#include "kv_events/kv_event_publisher.h"

#include <gtest/gtest.h>

#include <chrono>
#include <msgpack.hpp>
#include <string>
#include <vector>
#include <zmq.hpp>

namespace omnibus {
namespace {

using namespace std::chrono_literals;

std::vector<KvEvent> one_removal(uint64_t key) { return {KvBlockRemoved{{key}}}; }

std::unique_ptr<KvEventPublisher> make(KvEventPublisherOptions o) {
  StatusOr<std::unique_ptr<KvEventPublisher>> p = KvEventPublisher::create(std::move(o));
  EXPECT_TRUE(p.is_ok()) << p.status().to_string();
  return p.is_ok() ? std::move(p).value() : nullptr;
}

KvEventPublisherOptions loopback(std::string topic = "") {
  KvEventPublisherOptions o;
  o.endpoint = "tcp://127.0.0.1:*";
  o.replay_endpoint = "tcp://127.0.0.1:*";
  o.topic = std::move(topic);
  return o;
}

uint64_t be64(const zmq::message_t& m) {
  EXPECT_EQ(m.size(), 8u);
  const auto* b = static_cast<const unsigned char*>(m.data());
  uint64_t u = 0;
  for (size_t i = 0; i < 8; ++i) u = (u << 8) | b[i];
  return u;
}

std::string be64_bytes(uint64_t u) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[size_t(i)] = char((u >> (56 - 8 * i)) & 0xff);
  return s;
}

// The key of the batch's single BlockRemoved event.
uint64_t removed_key(const zmq::message_t& payload) {
  msgpack::object_handle h =
      msgpack::unpack(static_cast<const char*>(payload.data()), payload.size());
  const msgpack::object& ev = h.get().via.array.ptr[1].via.array.ptr[0];
  for (uint32_t i = 0; i < ev.via.map.size; ++i) {
    if (ev.via.map.ptr[i].key.as<std::string>() == "block_hashes") {
      return ev.via.map.ptr[i].val.via.array.ptr[0].as<uint64_t>();
    }
  }
  ADD_FAILURE() << "no block_hashes";
  return 0;
}

struct Received {
  std::string topic;
  uint64_t seq;
  uint64_t key;
};

std::optional<Received> receive(zmq::socket_t& sub, std::chrono::milliseconds timeout) {
  zmq::pollitem_t item{sub.handle(), 0, ZMQ_POLLIN, 0};
  if (zmq::poll(&item, 1, timeout) == 0) return std::nullopt;
  std::vector<zmq::message_t> frames(3);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_TRUE(sub.recv(frames[i]).has_value());
    EXPECT_EQ(frames[i].more(), i < 2);
  }
  return Received{frames[0].to_string(), be64(frames[1]), removed_key(frames[2])};
}

// Publishes a probe until the subscription has reached the publisher (ZeroMQ
// drops what a PUB sends before that); returns the probe's last seq.
uint64_t join(KvEventPublisher& pub, zmq::socket_t& sub) {
  for (int i = 0; i < 500; ++i) {
    pub.publish(one_removal(999));
    if (std::optional<Received> r = receive(sub, 10ms)) {
      uint64_t last = r->seq;
      while (std::optional<Received> more = receive(sub, 50ms)) last = more->seq;
      return last;
    }
  }
  ADD_FAILURE() << "the subscriber never joined";
  return 0;
}

TEST(KvEventPublisher, SubscriberGetsEveryBatchInOrderWithTopicAndSeq) {
  auto pub = make(loopback("kv@omnibus"));
  ASSERT_TRUE(pub);
  zmq::context_t ctx;
  zmq::socket_t sub(ctx, zmq::socket_type::sub);
  sub.set(zmq::sockopt::subscribe, "kv@");
  sub.connect(pub->endpoint());
  const uint64_t first = join(*pub, sub) + 1;
  for (uint64_t k = 0; k < 100; ++k) pub->publish(one_removal(k));
  pub->publish({});  // empty: not sent, no seq
  for (uint64_t k = 0; k < 100; ++k) {
    std::optional<Received> r = receive(sub, 2s);
    ASSERT_TRUE(r) << k;
    EXPECT_EQ(r->topic, "kv@omnibus");
    EXPECT_EQ(r->seq, first + k);
    EXPECT_EQ(r->key, k);
  }
  EXPECT_FALSE(receive(sub, 50ms));
  ASSERT_TRUE(pub->flush(2s));
  EXPECT_EQ(pub->counters().published_batches, first + 100);
  EXPECT_EQ(pub->counters().dropped_batches, 0u);
}

// Sends a replay request from `start`; returns the (seq, key) pairs up to the end marker.
std::vector<std::pair<uint64_t, uint64_t>> replay(const std::string& endpoint, uint64_t start) {
  zmq::context_t ctx;
  zmq::socket_t dealer(ctx, zmq::socket_type::dealer);
  dealer.set(zmq::sockopt::linger, 0);
  dealer.connect(endpoint);
  dealer.send(zmq::str_buffer(""), zmq::send_flags::sndmore);
  dealer.send(zmq::buffer(be64_bytes(start)));
  std::vector<std::pair<uint64_t, uint64_t>> out;
  for (;;) {
    zmq::pollitem_t item{dealer.handle(), 0, ZMQ_POLLIN, 0};
    if (zmq::poll(&item, 1, 5s) == 0) {
      ADD_FAILURE() << "no end marker";
      return out;
    }
    std::vector<zmq::message_t> f(3);
    for (auto& m : f) EXPECT_TRUE(dealer.recv(m).has_value());
    EXPECT_EQ(f[0].size(), 0u);  // the delimiter
    EXPECT_FALSE(f[2].more());
    if (be64(f[1]) == ~uint64_t(0)) {  // -1: the end
      EXPECT_EQ(f[2].size(), 0u);
      return out;
    }
    out.emplace_back(be64(f[1]), removed_key(f[2]));
  }
}

TEST(KvEventPublisher, ReplayFromStartFromMiddleAndPastTheBuffer) {
  KvEventPublisherOptions o = loopback();
  o.replay_buffer_batches = 6;
  auto pub = make(o);
  ASSERT_TRUE(pub);
  for (uint64_t k = 0; k < 4; ++k) pub->publish(one_removal(100 + k));
  ASSERT_TRUE(pub->flush(2s));
  auto all = replay(pub->replay_endpoint(), 0);
  ASSERT_EQ(all.size(), 4u);
  for (uint64_t i = 0; i < 4; ++i) EXPECT_EQ(all[i], std::make_pair(i, 100 + i));
  auto tail = replay(pub->replay_endpoint(), 2);
  ASSERT_EQ(tail.size(), 2u);
  EXPECT_EQ(tail[0], std::make_pair(uint64_t(2), uint64_t(102)));
  EXPECT_TRUE(replay(pub->replay_endpoint(), 4).empty());  // nothing yet: just the marker

  for (uint64_t k = 4; k < 10; ++k) pub->publish(one_removal(100 + k));
  ASSERT_TRUE(pub->flush(2s));
  auto kept = replay(pub->replay_endpoint(), 0);  // only the last 6 are kept
  ASSERT_EQ(kept.size(), 6u);
  EXPECT_EQ(kept.front().first, 4u);
  EXPECT_EQ(kept.back(), std::make_pair(uint64_t(9), uint64_t(109)));
}

// Subscribers and replay clients that leave (a router restarting): the
// publisher goes on, and the next subscriber gets every later batch.
TEST(KvEventPublisher, SubscribersAndReplayClientsThatDisconnectLeaveItRunning) {
  auto pub = make(loopback());
  ASSERT_TRUE(pub);
  zmq::context_t ctx;
  {
    zmq::socket_t sub(ctx, zmq::socket_type::sub);
    sub.set(zmq::sockopt::linger, 0);
    sub.set(zmq::sockopt::subscribe, "");
    sub.connect(pub->endpoint());
    join(*pub, sub);
    for (uint64_t k = 0; k < 10; ++k) pub->publish(one_removal(k));
    ASSERT_TRUE(receive(sub, 2s));  // reads one, then goes away with the rest unread
  }
  {
    // A replay request whose client is gone before the answer: ROUTER drops it.
    zmq::socket_t dealer(ctx, zmq::socket_type::dealer);
    dealer.set(zmq::sockopt::linger, 0);
    dealer.connect(pub->replay_endpoint());
    dealer.send(zmq::str_buffer(""), zmq::send_flags::sndmore);
    dealer.send(zmq::buffer(be64_bytes(0)));
  }
  for (uint64_t k = 10; k < 20; ++k) pub->publish(one_removal(k));
  ASSERT_TRUE(pub->flush(5s));
  zmq::socket_t next(ctx, zmq::socket_type::sub);
  next.set(zmq::sockopt::subscribe, "");
  next.connect(pub->endpoint());
  const uint64_t first = join(*pub, next) + 1;
  for (uint64_t k = 0; k < 5; ++k) pub->publish(one_removal(100 + k));
  for (uint64_t k = 0; k < 5; ++k) {
    std::optional<Received> r = receive(next, 2s);
    ASSERT_TRUE(r) << k;
    EXPECT_EQ(r->seq, first + k);
    EXPECT_EQ(r->key, 100 + k);
  }
  EXPECT_FALSE(replay(pub->replay_endpoint(), first).empty());  // replay still answers
  EXPECT_EQ(pub->counters().dropped_batches, 0u);
}

TEST(KvEventPublisher, AStalledSubscriberNeverHoldsThePublisherUp) {
  KvEventPublisherOptions o = loopback();
  o.send_hwm = 2;
  auto pub = make(o);
  ASSERT_TRUE(pub);
  zmq::context_t ctx;
  zmq::socket_t sub(ctx, zmq::socket_type::sub);
  sub.set(zmq::sockopt::rcvhwm, 1);
  sub.set(zmq::sockopt::rcvbuf, 4096);
  sub.set(zmq::sockopt::subscribe, "");
  sub.connect(pub->endpoint());
  const uint64_t before = join(*pub, sub) + 1;
  // Never read again (until the end). Batches of 500 events (~6 KB each, 6 MB
  // in all) fill the socket buffers long before the end.
  constexpr int kBatches = 1000;
  std::vector<std::vector<KvEvent>> batches(kBatches);
  for (auto& b : batches) {
    for (uint64_t k = 0; k < 500; ++k) b.push_back(KvBlockRemoved{{k}});
  }
  for (auto& b : batches) pub->publish(std::move(b));
  ASSERT_TRUE(pub->flush(60s)) << "the sender thread is stuck behind a stalled subscriber";
  const KvEventPublisherCounters c = pub->counters();
  EXPECT_EQ(c.published_batches + c.dropped_batches, before + kBatches);
  int received = 0;
  while (receive(sub, 100ms)) ++received;
  EXPECT_LT(received, kBatches)
      << "the subscriber was not stalled: ZeroMQ should have dropped for it";
}

TEST(KvEventPublisher, AFullQueueDropsCountsAndLeavesASeqGap) {
  KvEventPublisherOptions o = loopback();
  o.max_queue_batches = 3;
  auto pub = make(o);
  ASSERT_TRUE(pub);
  zmq::context_t ctx;
  zmq::socket_t sub(ctx, zmq::socket_type::sub);
  sub.set(zmq::sockopt::subscribe, "");
  sub.connect(pub->endpoint());
  const uint64_t first = join(*pub, sub) + 1;
  ASSERT_TRUE(pub->flush(2s));
  // publish() never blocks: the sender thread is paused, so a publish() that
  // waited for it or for room in the queue would never return here (ctest's
  // timeout would fail the test); instead the extra batches are dropped.
  pub->set_paused_for_testing(true);
  for (uint64_t k = 0; k < 10; ++k) pub->publish({KvBlockRemoved{{k}}, KvBlockRemoved{{k}}});
  EXPECT_EQ(pub->counters().dropped_batches, 7u);
  EXPECT_EQ(pub->counters().dropped_events, 14u);
  pub->set_paused_for_testing(false);
  ASSERT_TRUE(pub->flush(2s));
  pub->publish(one_removal(77));
  ASSERT_TRUE(pub->flush(2s));
  std::vector<uint64_t> seqs;
  while (std::optional<Received> r = receive(sub, 200ms)) seqs.push_back(r->seq);
  EXPECT_EQ(seqs, std::vector<uint64_t>({first, first + 1, first + 2, first + 10}));
}

TEST(KvEventPublisher, BadEndpointsAreErrorsThatNameThem) {
  for (const char* bad : {"bogus", "tcp://*:notaport", "udp://*:5557", "tcp://256.1.1.1:*"}) {
    KvEventPublisherOptions o;
    o.endpoint = bad;
    StatusOr<std::unique_ptr<KvEventPublisher>> p = KvEventPublisher::create(o);
    ASSERT_FALSE(p.is_ok()) << bad;
    EXPECT_NE(p.status().message().find(bad), std::string::npos) << p.status().to_string();
  }
  // A port already taken, on the replay socket.
  auto first = make(loopback());
  ASSERT_TRUE(first);
  KvEventPublisherOptions o = loopback();
  o.replay_endpoint = first->replay_endpoint();
  StatusOr<std::unique_ptr<KvEventPublisher>> p = KvEventPublisher::create(o);
  ASSERT_FALSE(p.is_ok());
  EXPECT_NE(p.status().message().find(first->replay_endpoint()), std::string::npos)
      << p.status().to_string();
}

}  // namespace
}  // namespace omnibus
