// RequestStream and StreamSignal: events in order, the final flag, and a
// signal that is never lost between a consumer's sweeps.
#include "engine/request_stream.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

namespace omnibus {
namespace {

using std::chrono::microseconds;

EngineEvent token_event(int32_t token, bool final = false) {
  EngineEvent e;
  e.token = token;
  e.final = final;
  return e;
}

TEST(StreamSignal, TimesOutWithoutNotify) {
  StreamSignal s;
  EXPECT_FALSE(s.wait(microseconds(2000)));
}

TEST(StreamSignal, NotifyBeforeWaitIsKeptAndConsumedOnce) {
  StreamSignal s;
  s.notify();
  s.notify();
  EXPECT_TRUE(s.wait(microseconds(0)));
  EXPECT_FALSE(s.wait(microseconds(0)));  // both notifies folded into one wake-up
}

TEST(RequestStream, PushNotifiesAttachedSignalOnlyAfterAttach) {
  RequestStream r(7, 1, RequestStream::Clock::now());
  auto s = std::make_shared<StreamSignal>();
  r.push(token_event(1));
  r.set_signal(s);
  EXPECT_FALSE(s->wait(microseconds(0)));  // the earlier event is not signalled
  r.push(token_event(2, true));
  EXPECT_TRUE(s->wait(microseconds(0)));
  EXPECT_TRUE(r.done());
  EXPECT_EQ(r.try_pop()->token, 1);
  std::optional<EngineEvent> last = r.try_pop();
  ASSERT_TRUE(last.has_value());
  EXPECT_EQ(last->token, 2);
  EXPECT_TRUE(last->final);
  EXPECT_FALSE(r.try_pop().has_value());
}

// A consumer that waits, then drains, sees every event of a producer on
// another thread without polling (the pattern of server::StreamPump).
TEST(RequestStream, WaitThenSweepNeverMissesAnEvent) {
  constexpr int kEvents = 2000;
  RequestStream r(1, 1, RequestStream::Clock::now());
  auto s = std::make_shared<StreamSignal>();
  r.set_signal(s);
  std::thread producer([&] {
    for (int i = 0; i < kEvents; ++i) r.push(token_event(i, i == kEvents - 1));
  });
  int next = 0;
  bool final = false;
  while (!final) {
    ASSERT_TRUE(s->wait(std::chrono::seconds(10))) << "lost wake-up after event " << next;
    while (std::optional<EngineEvent> e = r.try_pop()) {
      ASSERT_EQ(e->token, next++);
      final = e->final;
    }
  }
  producer.join();
  EXPECT_EQ(next, kEvents);
}

}  // namespace
}  // namespace omnibus
