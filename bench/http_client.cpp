#include "bench/http_client.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdarg>
#include <cstdio>
#include <ctime>
#include <httplib.h>
#include <thread>

namespace prefixd::bench {

using nlohmann::json;

double MillisBetween(BenchClock::time_point from, BenchClock::time_point to) {
  return std::chrono::duration<double, std::milli>(to - from).count();
}

void Progress(const char* fmt, ...) {
  const auto t = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  char now[32];
  std::strftime(now, sizeof now, "%H:%M:%S", std::localtime(&t));
  std::fprintf(stderr, "[%s] bench: ", now);
  va_list args;
  va_start(args, fmt);
  std::vfprintf(stderr, fmt, args);
  va_end(args);
  std::fputc('\n', stderr);
}

// ---------------------------------------------------------------------------------------------
// Endpoint

struct Endpoint::Impl {
  explicit Impl(const std::string& url) : client(url) {}
  httplib::Client client;
  httplib::Headers headers;
};

Endpoint::Endpoint(const std::string& url, const std::string& api_key, int64_t timeout_s)
    : impl_(std::make_unique<Impl>(url)) {
  impl_->client.set_connection_timeout(5, 0);
  impl_->client.set_read_timeout(time_t(timeout_s), 0);
  impl_->client.set_write_timeout(60, 0);
  if (!api_key.empty()) impl_->headers.emplace("Authorization", "Bearer " + api_key);
}

Endpoint::~Endpoint() = default;

bool Endpoint::valid() const { return impl_->client.is_valid(); }

Result<json> Endpoint::PostJson(const std::string& path, const json& body) {
  auto r = impl_->client.Post(path, impl_->headers, body.dump(), "application/json");
  if (!r) return Status::IOError("POST " + path + ": " + httplib::to_string(r.error()));
  if (r->status != 200) {
    return Status::IOError("POST " + path + ": HTTP " + std::to_string(r->status) + " " +
                           r->body.substr(0, 300));
  }
  json j = json::parse(r->body, nullptr, false);
  if (j.is_discarded()) return Status::IOError("POST " + path + ": the answer is not JSON");
  return j;
}

bool Endpoint::Healthy() {
  auto r = impl_->client.Get("/health", impl_->headers);
  return r && r->status == 200;
}

Result<int> Endpoint::PostStream(const std::string& path, const json& body,
                                 const std::function<bool(const char*, size_t)>& on_data) {
  auto r = impl_->client.Post(path, impl_->headers, body.dump(), "application/json", on_data);
  if (!r) return Status::IOError("POST " + path + ": " + httplib::to_string(r.error()));
  return r->status;
}

// ---------------------------------------------------------------------------------------------
// SseReader

bool SseReader::Feed(const char* data, size_t n) {
  buf_.append(data, n);
  size_t end;
  while ((end = buf_.find("\n\n")) != std::string::npos) {
    OnEvent(buf_.substr(0, end));
    buf_.erase(0, end + 2);
  }
  return true;
}

void SseReader::OnEvent(const std::string& ev) {
  std::string& head = stats_.raw_head;
  if (head.size() < 300) head += ev.substr(0, 300 - head.size());
  for (size_t pos = 0; pos < ev.size();) {
    size_t eol = ev.find('\n', pos);
    if (eol == std::string::npos) eol = ev.size();
    const std::string line = ev.substr(pos, eol - pos);
    pos = eol + 1;
    if (line.rfind("data:", 0) != 0) continue;
    const std::string payload = line.substr(line.size() > 5 && line[5] == ' ' ? 6 : 5);
    if (payload == "[DONE]") continue;
    OnData(json::parse(payload, nullptr, false));
  }
}

namespace {

// The text a chat chunk's delta (or a text completion's choice) carries; "" when none.
std::string ChoiceText(const json& choice) {
  if (choice.contains("delta") && choice["delta"].is_object()) {
    const json& d = choice["delta"];
    for (const char* key : {"content", "reasoning_content"}) {
      if (d.contains(key) && d[key].is_string() && !d[key].get<std::string>().empty()) {
        return d[key].get<std::string>();
      }
    }
    if (d.contains("tool_calls")) return "tool_calls";
  }
  if (choice.contains("text") && choice["text"].is_string()) return choice["text"];
  return "";
}

// Appends what a chat chunk's delta (or a text completion's choice) adds to the answer.
void AppendOutput(const json& choice, std::string* out) {
  if (choice.contains("delta") && choice["delta"].is_object()) {
    const json& d = choice["delta"];
    for (const char* key : {"reasoning_content", "content"}) {
      if (d.contains(key) && d[key].is_string()) *out += d[key].get<std::string>();
    }
    if (d.contains("tool_calls") && !d["tool_calls"].is_null()) *out += d["tool_calls"].dump();
  } else if (choice.contains("text") && choice["text"].is_string()) {
    *out += choice["text"].get<std::string>();
  }
}

}  // namespace

void SseReader::OnData(const json& j) {
  if (!j.is_object()) return;
  const double now = MillisBetween(sent_, BenchClock::now());
  if (j.contains("error")) stats_.error = j["error"];
  if (j.contains("choices") && j["choices"].is_array() && !j["choices"].empty()) {
    if (!stats_.first_choice_ms) stats_.first_choice_ms = now;
    AppendOutput(j["choices"][0], &stats_.output);
    if (!ChoiceText(j["choices"][0]).empty()) {
      if (!stats_.first_content_ms) stats_.first_content_ms = now;
      stats_.last_content_ms = now;
      ++stats_.content_events;
    }
  }
  if (j.contains("usage") && j["usage"].is_object()) stats_.usage = j["usage"];
  if (j.contains("timings") && j["timings"].is_object()) stats_.timings = j["timings"];
}

// ---------------------------------------------------------------------------------------------
// ServerProcess

Status ServerProcess::Start(Endpoint& ep, int64_t timeout_s) {
  Progress("starting server: %s", cmd_.c_str());
  pid_ = fork();
  if (pid_ < 0) return Status::IOError("fork failed");
  if (pid_ == 0) ExecChild();
  const auto deadline = BenchClock::now() + std::chrono::seconds(timeout_s);
  while (BenchClock::now() < deadline) {
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return Status::IOError("the server exited during start (status " + std::to_string(status) +
                             "); see " + (log_.empty() ? std::string("its output") : log_));
    }
    if (ep.Healthy()) return Status::OK();
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  Stop();
  return Status::IOError("the server did not answer /health within " +
                         std::to_string(timeout_s) + " s");
}

void ServerProcess::Stop() {
  if (pid_ <= 0) return;
  kill(-pid_, SIGTERM);
  const auto deadline = BenchClock::now() + std::chrono::seconds(120);
  int status = 0;
  while (waitpid(pid_, &status, WNOHANG) == 0) {
    if (BenchClock::now() > deadline) {
      kill(-pid_, SIGKILL);
      waitpid(pid_, &status, 0);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  pid_ = -1;
}

void ServerProcess::ExecChild() {
  setpgid(0, 0);
  if (!log_.empty()) {
    int fd = open(log_.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd >= 0) {
      dup2(fd, 1);
      dup2(fd, 2);
      close(fd);
    }
  }
  execl("/bin/sh", "sh", "-c", cmd_.c_str(), static_cast<char*>(nullptr));
  _exit(127);
}

// ---------------------------------------------------------------------------------------------
// ServerUnderTest

void WarmUp(Endpoint& ep, const std::string& model) {
  json body = {{"prompt", "Warm up: one two three four five six seven."},
               {"max_tokens", 1},
               {"temperature", 0}};
  if (!model.empty()) body["model"] = model;
  auto r = ep.PostJson("/v1/completions", body);
  if (!r.ok()) Progress("warm-up failed (ignored): %s", r.status().ToString().c_str());
}

ServerUnderTest::ServerUnderTest(const ServerOptions& options)
    : options_(options), ep_(options.url, options.api_key, options.request_timeout_s) {}

Status ServerUnderTest::Start() {
  if (!ep_.valid()) return Status::InvalidArgument("--url: cannot use '" + options_.url + "'");
  if (!options_.server_cmd.empty()) {
    process_.emplace(options_.server_cmd, options_.server_log);
    PREFIXD_RETURN_IF_ERROR(process_->Start(ep_, options_.start_timeout_s));
  }
  if (options_.warmup) WarmUp(ep_, options_.model);
  return Status::OK();
}

Status ServerUnderTest::Restart() {
  if (!process_) return Status::OK();
  process_->Stop();
  PREFIXD_RETURN_IF_ERROR(process_->Start(ep_, options_.start_timeout_s));
  if (options_.warmup) WarmUp(ep_, options_.model);
  return Status::OK();
}

void ServerUnderTest::Stop() {
  if (process_) process_->Stop();
}

}  // namespace prefixd::bench
