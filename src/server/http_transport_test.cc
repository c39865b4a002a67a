// HttpTransport's read timeouts (issue 34: 20 slowloris connections were
// still open after 55 s): a connection whose request line and headers, or
// whose body, do not arrive in time is closed and counted by phase; an idle
// keep-alive connection is closed after the header timeout but not counted.
// Each check waits for the server to close the socket (recv returns 0), then
// for the timeout's callback (a condition variable): handshakes, no sleeps.
// (The socket closes when the deadline passes, just before the callback.)
#include "server/http_transport.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <condition_variable>
#include <mutex>
#include <string>
#include <vector>

namespace omnibus::server {
namespace {

class Timeouts : public ::testing::Test {
 protected:
  void SetUp() override {
    TransportConfig c;
    c.port = 0;
    c.threads = 1;
    // The client's bytes are sent right after connect(), so they are in the
    // socket before the server's first read: no race with these deadlines.
    c.header_timeout = std::chrono::milliseconds(200);
    c.body_timeout = std::chrono::milliseconds(200);
    c.on_read_timeout = [this](HttpReadPhase p) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        phases_.push_back(p);
      }
      cv_.notify_all();
    };
    auto t = HttpTransport::create(c, [](HttpRequest, std::shared_ptr<ResponseSink> sink) {
      sink->respond(200, "text/plain", "ok");
    });
    ASSERT_TRUE(t.is_ok()) << t.status().to_string();
    transport_ = std::move(t).value();
    transport_->start();
  }
  void TearDown() override {
    if (transport_) transport_->stop();
  }

  // A connected socket whose reads give up after 60 s (only so that a broken
  // build fails instead of hanging; nothing here is timed).
  int connect_client() const {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    EXPECT_GE(fd, 0);
    timeval tv{60, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(uint16_t(transport_->port()));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    return fd;
  }
  // Sends `bytes`, then reads until the server closes; what it answered.
  static std::string send_and_wait_close(int fd, const std::string& bytes) {
    if (!bytes.empty()) {
      EXPECT_EQ(::send(fd, bytes.data(), bytes.size(), 0), ssize_t(bytes.size()));
    }
    std::string got;
    char buf[4096];
    for (;;) {
      const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
      EXPECT_GE(n, 0) << "the server did not close the connection";
      if (n <= 0) break;
      got.append(buf, size_t(n));
    }
    ::close(fd);
    return got;
  }
  // The phases counted, once there are n (or after 60 s, only so that a
  // broken build fails instead of hanging).
  std::vector<HttpReadPhase> phases(size_t n) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, std::chrono::seconds(60), [&] { return phases_.size() >= n; });
    return phases_;
  }

  std::unique_ptr<HttpTransport> transport_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<HttpReadPhase> phases_;  // guarded by mu_
};

TEST_F(Timeouts, AnUnfinishedHeaderClosesTheConnection) {
  EXPECT_EQ(send_and_wait_close(connect_client(), "GET /health HTTP/1.1\r\nHost: x\r\nX-Slow: "),
            "");
  EXPECT_EQ(phases(1), std::vector<HttpReadPhase>{HttpReadPhase::kHeader});
}

TEST_F(Timeouts, AnUnfinishedBodyClosesTheConnection) {
  EXPECT_EQ(send_and_wait_close(
                connect_client(),
                "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"a\""),
            "");
  EXPECT_EQ(phases(1), std::vector<HttpReadPhase>{HttpReadPhase::kBody});
}

TEST_F(Timeouts, AnIdleConnectionIsClosedButNotCounted) {
  EXPECT_EQ(send_and_wait_close(connect_client(), ""), "");
  // One I/O thread runs the callbacks in order: when a later slow body is
  // counted, the idle connection's close was handled before it, uncounted.
  EXPECT_EQ(send_and_wait_close(connect_client(), "POST / HTTP/1.1\r\nContent-Length: 9\r\n\r\n{"),
            "");
  EXPECT_EQ(phases(1), std::vector<HttpReadPhase>{HttpReadPhase::kBody});
}

// An empty write() must not reach the wire as an empty chunk: "0\r\n\r\n" is
// the chunked body's terminator, so a client would end the response there and
// read what follows as the next response (the Responses API's stream wrote ""
// for chat chunks that produce no event, and the openai client then saw
// "illegal status line: 720" on its kept-alive connection).
TEST(Streaming, AnEmptyWriteIsNotAChunk) {
  TransportConfig c;
  c.port = 0;
  c.threads = 1;
  auto t = HttpTransport::create(c, [](HttpRequest, std::shared_ptr<ResponseSink> sink) {
    sink->begin_stream("text/event-stream");
    sink->write("");  // alone in the queue when the header is out
    sink->end_stream();
  });
  ASSERT_TRUE(t.is_ok()) << t.status().to_string();
  std::unique_ptr<HttpTransport> transport = std::move(t).value();
  transport->start();
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  timeval tv{60, 0};  // only so that a broken build fails instead of hanging
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(uint16_t(transport->port()));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  const std::string req = "GET /s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
  ASSERT_EQ(::send(fd, req.data(), req.size(), 0), ssize_t(req.size()));
  std::string got;
  char buf[4096];
  for (ssize_t n; (n = ::recv(fd, buf, sizeof buf, 0)) > 0;) got.append(buf, size_t(n));
  ::close(fd);
  transport->stop();
  const size_t body = got.find("\r\n\r\n");
  ASSERT_NE(body, std::string::npos) << got;
  EXPECT_EQ(got.substr(body + 4), "0\r\n\r\n");  // the terminator once, nothing after it
}

}  // namespace
}  // namespace omnibus::server
