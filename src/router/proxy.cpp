#include "router/proxy.h"

#include <strings.h>

#include <deque>
#include <memory>
#include <thread>

#include "server/http_io.h"
#include "util/mutex.h"

namespace prefixd::router {

namespace {

// How much of an answer waits for a slow reader before the model's server is read no further
// (TCP then holds the model server's writes back in turn).
constexpr size_t kMaxBufferedBytes = size_t(4) << 20;
// How often a waiting thread looks whether the client is still there.
constexpr std::chrono::milliseconds kClientCheck{100};

// Headers that describe one hop's connection or body framing, not the message. Host is the
// client's: it goes on, so the model's server judges the request by the name it was sent to.
bool IsHopHeader(const std::string& name) {
  std::string n;
  for (char c : name) n += char(std::tolower(static_cast<unsigned char>(c)));
  return n == "connection" || n == "keep-alive" || n == "transfer-encoding" ||
         n == "content-length" || n == "upgrade" || n == "te" || n == "trailer" ||
         n == "proxy-connection" || n == "accept-encoding" || n == "x-prefixd-server";
}

// What the upstream thread hands the client's thread.
struct Pipe {
  Mutex mu;
  CondVar cv;
  bool has_head PREFIXD_GUARDED_BY(mu) = false;
  int status PREFIXD_GUARDED_BY(mu) = 0;
  httplib::Headers headers PREFIXD_GUARDED_BY(mu);
  std::deque<std::string> chunks PREFIXD_GUARDED_BY(mu);
  size_t buffered PREFIXD_GUARDED_BY(mu) = 0;  // bytes in `chunks`
  bool done PREFIXD_GUARDED_BY(mu) = false;
  bool cancelled PREFIXD_GUARDED_BY(mu) = false;
  std::string error PREFIXD_GUARDED_BY(mu);
  // The upstream connection: stopping it ends the model server's request, which cancels its
  // work (during prefill too), as a client that goes away from `serve -m` does.
  std::shared_ptr<httplib::Client> upstream;
};

// The client went away: the upstream request ends now, not at its next chunk.
void Cancel(Pipe& pipe) PREFIXD_EXCLUDES(pipe.mu) {
  {
    MutexLock lock(&pipe.mu);
    pipe.cancelled = true;
    pipe.cv.notify_all();
  }
  pipe.upstream->stop();
}

httplib::Request UpstreamRequest(const httplib::Request& req, const std::shared_ptr<Pipe>& pipe) {
  httplib::Request up;
  up.method = req.method;
  up.path = req.target.empty() ? req.path : req.target;
  for (const auto& [name, value] : req.headers) {
    if (!IsHopHeader(name)) up.headers.emplace(name, value);
  }
  up.body = req.body;
  up.response_handler = [pipe](const httplib::Response& r) {
    MutexLock lock(&pipe->mu);
    pipe->status = r.status;
    pipe->headers = r.headers;
    pipe->has_head = true;
    pipe->cv.notify_all();
    return !pipe->cancelled;
  };
  up.content_receiver = [pipe](const char* data, size_t n, uint64_t, uint64_t) {
    MutexLock lock(&pipe->mu);
    while (pipe->buffered > kMaxBufferedBytes && !pipe->cancelled) pipe->cv.Wait(lock);
    if (pipe->cancelled) return false;
    pipe->chunks.emplace_back(data, n);
    pipe->buffered += n;
    pipe->cv.notify_all();
    return true;
  };
  return up;
}

void RunUpstream(httplib::Request up, std::shared_ptr<Pipe> pipe,
                 std::shared_ptr<ModelPool::Lease> lease) {
  httplib::Result result = pipe->upstream->send(up);
  MutexLock lock(&pipe->mu);
  pipe->done = true;
  if (!result && !pipe->cancelled) pipe->error = httplib::to_string(result.error());
  pipe->cv.notify_all();
  lease.reset();  // the model may be unloaded from here on
}

// The content-type of the upstream answer ("" -> JSON).
std::string ContentTypeOf(const httplib::Headers& headers) {
  for (const auto& [name, value] : headers) {
    if (name.size() == 12 && strcasecmp(name.c_str(), "content-type") == 0) return value;
  }
  return "application/json";
}

}  // namespace

std::string Forward(const httplib::Request& req, httplib::Response& res, ModelPool::Lease lease,
                    const std::string& server_name) {
  auto pipe = std::make_shared<Pipe>();
  const std::string model = lease.id();
  pipe->upstream = std::make_shared<httplib::Client>("127.0.0.1", lease.port());
  pipe->upstream->set_connection_timeout(10, 0);
  pipe->upstream->set_read_timeout(24 * 3600, 0);  // a long prefill answers late
  pipe->upstream->set_write_timeout(60, 0);
  auto held = std::make_shared<ModelPool::Lease>(std::move(lease));
  std::thread(RunUpstream, UpstreamRequest(req, pipe), pipe, std::move(held)).detach();
  MutexLock lock(&pipe->mu);
  // A non-streamed answer's head comes only with its end: watch the client meanwhile.
  while (!pipe->has_head && !pipe->done) {
    if (!pipe->cv.WaitFor(lock, kClientCheck) && req.is_connection_closed()) {
      lock.Unlock();
      Cancel(*pipe);
      res.status = 499;  // nobody reads it: the client has gone
      return "";
    }
  }
  if (!pipe->has_head) return pipe->error.empty() ? "no answer" : pipe->error;
  res.status = pipe->status;
  for (const auto& [name, value] : pipe->headers) {
    if (!IsHopHeader(name) && strcasecmp(name.c_str(), "content-type") != 0) {
      res.set_header(name, value);
    }
  }
  res.set_header("X-Prefixd-Server", server_name);
  res.set_header("X-Prefixd-Model", model);
  res.set_chunked_content_provider(
      ContentTypeOf(pipe->headers),
      [pipe](size_t, httplib::DataSink& sink) {
        MutexLock lock(&pipe->mu);
        while (pipe->chunks.empty() && !pipe->done) {
          // A stream's prefill sends nothing for a while: a client gone meanwhile cancels it.
          if (!pipe->cv.WaitFor(lock, kClientCheck) && !sink.is_writable()) return false;
        }
        if (pipe->chunks.empty()) {
          sink.done();  // a model server that ended mid-answer cuts the stream here too
          return true;
        }
        std::string chunk = std::move(pipe->chunks.front());
        pipe->chunks.pop_front();
        pipe->buffered -= chunk.size();
        pipe->cv.notify_all();
        lock.Unlock();
        const bool ok = sink.write(chunk.data(), chunk.size());
        lock.Lock();
        return ok;
      },
      [pipe](bool success) {
        if (!success) return Cancel(*pipe);
        MutexLock lock(&pipe->mu);
        pipe->cancelled = true;  // nothing more is read
        pipe->cv.notify_all();
      });
  return "";
}

std::string FetchFromModel(int port, const std::string& path, const httplib::Headers& headers) {
  httplib::Client cli("127.0.0.1", port);
  cli.set_connection_timeout(2, 0);
  cli.set_read_timeout(5, 0);
  httplib::Result r = cli.Get(path, headers);
  return r && r->status == 200 ? r->body : "";
}

}  // namespace prefixd::router
