#include "server/http_transport.h"

#include <fmt/format.h>
#include <poll.h>
#include <sys/socket.h>

#include <array>
#include <atomic>
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "core/error.h"

namespace ds4::server {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using std::chrono::milliseconds;

std::string HttpRequest::header(std::string_view name) const {
  for (const auto& [k, v] : headers) {
    if (beast::iequals(k, name)) return v;
  }
  return {};
}

namespace {

// Header values are ours, but a CR or LF must never split a response.
void put_header(std::string& out, std::string_view name, std::string_view value) {
  out += name;
  out += ": ";
  for (char c : value) out += (c == '\r' || c == '\n') ? ' ' : c;
  out += "\r\n";
}

// Status line and headers. length: Content-Length, or nullopt for a chunked stream (HTTP/1.1)
// or a stream ended by closing (HTTP/1.0).
std::string response_head(int status, const std::string& content_type, const HeaderList& headers,
                          const HeaderList& defaults, std::optional<size_t> length, bool keep_alive, bool http10) {
  std::string out =
      fmt::format("HTTP/1.1 {} {}\r\n", status, std::string_view(http::obsolete_reason(http::int_to_status(status))));
  if (!content_type.empty()) put_header(out, "Content-Type", content_type);
  if (length) {
    put_header(out, "Content-Length", std::to_string(*length));
  } else if (!http10) {
    put_header(out, "Transfer-Encoding", "chunked");
  }
  put_header(out, "Connection", keep_alive ? "keep-alive" : "close");
  for (const auto& [k, v] : defaults) put_header(out, k, v);
  for (const auto& [k, v] : headers) put_header(out, k, v);
  out += "\r\n";
  return out;
}

}  // namespace

struct HttpTransport::Impl {
  HttpHandler& handler;
  TransportOptions opts;
  std::atomic<size_t> connections{0};  // declared before ioc: outlives the connections it owns
  std::atomic<bool> stopping{false};
  std::mutex mu;
  std::condition_variable cv;
  size_t blocking = 0;
  asio::io_context ioc;
  tcp::acceptor acceptor{ioc};
  asio::steady_timer accept_retry{ioc};

  Impl(HttpHandler& h, TransportOptions o) : handler(h), opts(std::move(o)) {}
  void accept();
  std::string error_text(const std::string& path, int status, const std::string& message, bool http10) {
    HttpResponse r = handler.transport_error(path, status, message);
    handler.responded(path, status);
    return response_head(r.status, r.content_type, r.headers, opts.default_headers, r.body.size(), false, http10) + r.body;
  }
};

namespace {

class Conn : public std::enable_shared_from_this<Conn> {
 public:
  Conn(tcp::socket s, HttpTransport::Impl* t)
      : stream_(std::move(s)), t_(t), buf_(t->opts.max_header_bytes + (64u << 10)) {
    ++t_->connections;
  }
  ~Conn() { --t_->connections; }

  void read_header() {
    if (t_->stopping) return close();
    parser_.emplace();
    parser_->header_limit(static_cast<std::uint32_t>(std::min<size_t>(t_->opts.max_header_bytes, UINT32_MAX)));
    parser_->body_limit(t_->opts.max_body_bytes);
    path_.clear();
    // One deadline for the whole of the headers, however slowly they trickle in.
    stream_.expires_after(milliseconds(t_->opts.header_timeout_ms));
    http::async_read_header(stream_, buf_, *parser_, beast::bind_front_handler(&Conn::on_header, shared_from_this()));
  }

 private:
  void on_header(beast::error_code ec, size_t) {
    if (ec) return read_failed(ec);
    auto& req = parser_->get();
    take_path();
    http10_ = req.version() < 11;
    if (parser_->is_done()) return dispatch();
    // The body limit was checked against Content-Length already (body_limit → 413 above).
    if (beast::iequals(req[http::field::expect], "100-continue")) {
      out_ = "HTTP/1.1 100 Continue\r\n\r\n";
      stream_.expires_after(milliseconds(t_->opts.write_timeout_ms));
      asio::async_write(stream_, asio::buffer(out_), [self = shared_from_this()](beast::error_code e, size_t) {
        if (e) return self->close();
        self->read_body();
      });
      return;
    }
    read_body();
  }

  void read_body() {
    stream_.expires_after(milliseconds(t_->opts.body_timeout_ms));
    http::async_read(stream_, buf_, *parser_, beast::bind_front_handler(&Conn::on_body, shared_from_this()));
  }

  void on_body(beast::error_code ec, size_t) {
    if (ec) return read_failed(ec);
    dispatch();
  }

  // The request line is stored as soon as it is parsed, so an error answer can take the API's
  // shape even when the headers after it were refused.
  void take_path() {
    auto target = parser_->get().target();
    std::string_view t(target.data(), target.size());
    path_ = std::string(t.substr(0, t.find('?')));
  }

  void read_failed(beast::error_code ec) {
    const auto& o = t_->opts;
    take_path();
    // Gone, idle past the deadline, or too slow (tcp_stream has closed the socket on timeout).
    if (ec == http::error::end_of_stream || ec == asio::error::eof || ec == asio::error::connection_reset ||
        ec == asio::error::operation_aborted || ec == beast::error::timeout || ec == http::error::partial_message) {
      return close();
    }
    if (ec == http::error::header_limit || ec == http::error::buffer_overflow) {
      return fail(431, fmt::format("request headers are larger than the limit of {} bytes", o.max_header_bytes));
    }
    if (ec == http::error::body_limit) {
      return fail(413, fmt::format("request body is larger than the limit of {} bytes", o.max_body_bytes));
    }
    if (ec == http::error::bad_content_length) return fail(400, "malformed HTTP request: invalid Content-Length");
    if (ec == http::error::multiple_content_length) {
      return fail(400, "malformed HTTP request: conflicting Content-Length headers");
    }
    if (ec == http::error::bad_transfer_encoding || ec == http::error::bad_chunk ||
        ec == http::error::bad_chunk_extension) {
      return fail(400, "malformed HTTP request: invalid chunked body");
    }
    fail(400, "malformed HTTP request");
  }

  // Answers a request that cannot be read further, then closes (without waiting for a body).
  void fail(int status, const std::string& message) {
    out_ = t_->error_text(path_, status, message, http10_);
    stream_.expires_after(milliseconds(t_->opts.write_timeout_ms));
    asio::async_write(stream_, asio::buffer(out_), [self = shared_from_this()](beast::error_code, size_t) {
      self->linger();
    });
  }

  // Half-close, then discard what the client still sends for up to a second, so that the
  // response is not destroyed by a reset before the client reads it.
  void linger() {
    beast::error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ec);
    stream_.expires_after(milliseconds(1000));
    drain();
  }
  void drain() {
    stream_.async_read_some(asio::buffer(scratch_), [self = shared_from_this()](beast::error_code ec, size_t) {
      if (ec) return self->close();
      self->drain();
    });
  }

  void close() {
    beast::error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ec);
    stream_.close();
  }

  void dispatch() {
    stream_.expires_never();
    auto msg = parser_->release();
    HttpRequest req;
    req.method = std::string(msg.method_string());
    req.path = path_;
    for (const auto& f : msg) req.headers.emplace_back(std::string(f.name_string()), std::string(f.value()));
    req.body = std::move(msg.body());
    keep_alive_ = msg.keep_alive() && !t_->stopping;
    std::optional<HttpResponse> quick;
    try {
      quick = t_->handler.quick(req);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "ds4-server: %s %s: %s\n", req.method.c_str(), req.path.c_str(), e.what());
      quick = t_->handler.transport_error(path_, 500, "internal error");
    }
    if (quick) return respond(*quick);
    {
      std::lock_guard lk(t_->mu);
      if (t_->blocking >= t_->opts.max_blocking || t_->stopping) {
        HttpResponse busy = t_->handler.transport_error(path_, 503, "too many requests in progress; retry later");
        busy.headers.emplace_back("Retry-After", "1");
        return respond(busy);
      }
      ++t_->blocking;
    }
    std::thread([self = shared_from_this(), req = std::move(req)]() mutable {
      HttpTransport::Impl* t = self->t_;
      self->run_blocking(req);
      self.reset();  // before the count drops: the transport may be destroyed right after
      std::lock_guard lk(t->mu);
      --t->blocking;
      t->cv.notify_all();
    }).detach();
  }

  void respond(const HttpResponse& r) {
    t_->handler.responded(path_, r.status);
    out_ = response_head(r.status, r.content_type, r.headers, t_->opts.default_headers, r.body.size(), keep_alive_,
                         http10_) +
           r.body;
    stream_.expires_after(milliseconds(t_->opts.write_timeout_ms));
    asio::async_write(stream_, asio::buffer(out_), [self = shared_from_this()](beast::error_code ec, size_t) {
      if (ec || !self->keep_alive_) return self->close();
      self->read_header();  // a pipelined request may already be in the buffer
    });
  }

  // The handler thread owns the socket (no asynchronous operation is pending on it) and writes
  // with plain non-blocking sends, each bounded by the write timeout.
  class Sink final : public ResponseSink {
   public:
    explicit Sink(Conn& c) : c_(c), fd_(c.stream_.socket().native_handle()) {}

    bool send(const HttpResponse& r) override {
      if (started_) return false;
      started_ = true;
      status_ = r.status;
      const auto& o = c_.t_->opts;
      ok_ = send_all(response_head(r.status, r.content_type, r.headers, o.default_headers, r.body.size(),
                                   c_.keep_alive_, c_.http10_) +
                     r.body);
      return ok_;
    }
    bool begin_stream(int status, const std::string& content_type, const HeaderList& headers) override {
      if (started_) return false;
      started_ = streaming_ = true;
      status_ = status;
      if (c_.http10_) c_.keep_alive_ = false;  // the stream ends when the connection does
      ok_ = send_all(response_head(status, content_type, headers, c_.t_->opts.default_headers, std::nullopt,
                                   c_.keep_alive_, c_.http10_));
      return ok_;
    }
    bool write(std::string_view data) override {
      if (!ok_ || !streaming_) return false;
      if (data.empty()) return true;
      if (c_.http10_) return ok_ = send_all(std::string(data));
      return ok_ = send_all(fmt::format("{:x}\r\n", data.size()) + std::string(data) + "\r\n");
    }
    bool end_stream() override {
      if (!ok_ || !streaming_) return false;
      streaming_ = false;
      if (c_.http10_) return true;
      return ok_ = send_all("0\r\n\r\n");
    }
    bool peer_closed() override {
      if (c_.t_->stopping) return true;
      pollfd p{fd_, POLLIN | POLLRDHUP, 0};
      if (::poll(&p, 1, 0) <= 0) return false;
      if (p.revents & (POLLERR | POLLHUP | POLLRDHUP)) return true;
      if (p.revents & POLLIN) {
        char c;
        ssize_t n = ::recv(fd_, &c, 1, MSG_PEEK | MSG_DONTWAIT);
        return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
      }
      return false;
    }

    bool started() const { return started_; }
    bool reusable() const { return ok_ && !streaming_ && c_.keep_alive_; }
    int status() const { return status_; }

   private:
    bool send_all(const std::string& data) {
      const auto deadline = std::chrono::steady_clock::now() + milliseconds(c_.t_->opts.write_timeout_ms);
      size_t at = 0;
      while (at < data.size()) {
        if (c_.t_->stopping) return false;
        ssize_t n = ::send(fd_, data.data() + at, data.size() - at, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n > 0) {
          at += static_cast<size_t>(n);
          continue;
        }
        if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return false;
        auto left = std::chrono::duration_cast<milliseconds>(deadline - std::chrono::steady_clock::now()).count();
        if (left <= 0) return false;  // the client takes no data
        pollfd p{fd_, POLLOUT, 0};
        ::poll(&p, 1, static_cast<int>(std::min<int64_t>(left, 200)));
      }
      return true;
    }

    Conn& c_;
    int fd_;
    bool started_ = false, streaming_ = false, ok_ = true;
    int status_ = 0;
  };

  void run_blocking(const HttpRequest& req) {
    Sink sink(*this);
    try {
      t_->handler.blocking(req, sink);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "ds4-server: %s %s: %s\n", req.method.c_str(), req.path.c_str(), e.what());
    }
    if (!sink.started()) sink.send(t_->handler.transport_error(path_, 500, "internal error"));
    t_->handler.responded(path_, sink.status());
    const bool reuse = sink.reusable() && !t_->stopping;
    asio::post(stream_.get_executor(), [self = shared_from_this(), reuse] {
      if (reuse) return self->read_header();
      self->close();
    });
  }

  beast::tcp_stream stream_;
  HttpTransport::Impl* t_;
  beast::flat_buffer buf_;
  std::optional<http::request_parser<http::string_body>> parser_;
  std::string path_;
  std::string out_;
  std::array<char, 4096> scratch_;
  bool keep_alive_ = false;
  bool http10_ = false;
};

}  // namespace

void HttpTransport::Impl::accept() {
  acceptor.async_accept(asio::make_strand(ioc), [this](beast::error_code ec, tcp::socket socket) {
    if (!acceptor.is_open() || stopping) return;
    if (ec) {
      // Out of descriptors (EMFILE) or similar: try again shortly instead of spinning.
      accept_retry.expires_after(milliseconds(50));
      accept_retry.async_wait([this](beast::error_code) { accept(); });
      return;
    }
    if (connections >= opts.max_connections) {
      std::string r = error_text("", 503, "too many open connections; retry later", false);
      ::send(socket.native_handle(), r.data(), r.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
      beast::error_code ignored;
      socket.close(ignored);
    } else {
      std::make_shared<Conn>(std::move(socket), this)->read_header();
    }
    accept();
  });
}

HttpTransport::HttpTransport(HttpHandler& handler, TransportOptions opts)
    : impl_(std::make_unique<Impl>(handler, std::move(opts))) {}

HttpTransport::~HttpTransport() {
  stop();
  std::unique_lock lk(impl_->mu);
  impl_->cv.wait(lk, [&] { return impl_->blocking == 0; });
}

const TransportOptions& HttpTransport::options() const { return impl_->opts; }

int HttpTransport::bind() {
  auto& o = impl_->opts;
  beast::error_code ec;
  auto addr = asio::ip::make_address(o.host, ec);
  if (ec) fail("cannot bind {}:{}: not an IP address", o.host, o.port);
  tcp::endpoint ep(addr, static_cast<unsigned short>(o.port));
  auto& a = impl_->acceptor;
  a.open(ep.protocol(), ec);
  if (!ec) a.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) a.bind(ep, ec);
  if (!ec) a.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) fail("cannot bind {}:{}: {}", o.host, o.port, ec.message());
  o.port = a.local_endpoint().port();
  return o.port;
}

void HttpTransport::listen() {
  Impl& t = *impl_;
  t.accept();
  std::vector<std::thread> extra;
  for (int i = 1; i < std::max(1, t.opts.io_threads); ++i) extra.emplace_back([&t] { t.ioc.run(); });
  t.ioc.run();
  for (auto& th : extra) th.join();
  // Blocking handlers see `stopping` (peer_closed) and end their jobs.
  std::unique_lock lk(t.mu);
  t.cv.wait(lk, [&] { return t.blocking == 0; });
}

void HttpTransport::stop() {
  impl_->stopping = true;
  impl_->ioc.stop();
}

}  // namespace ds4::server
