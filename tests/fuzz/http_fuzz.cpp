#include "http_fuzz.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <thread>

namespace prefixd::fuzz {
namespace {

using json = nlohmann::json;
using Rng = std::mt19937_64;

// ---- building blocks --------------------------------------------------------------------------

const char* const kPaths[] = {
    "/v1/chat/completions", "/v1/completions", "/v1/models", "/v1/models/x", "/tokenize",
    "/detokenize", "/apply-template", "/health", "/metrics", "/v1/cache", "/v1/cache/warm",
    "/v1/cache/clear", "/v1/responses", "/v1/messages", "/", "/nope",
    "/v1/chat/completions?stream=true", "//v1/completions", "/v1/../v1/cache",
    "/v1/models/%00%ff", "/v1/chat/completions/"};

const char* const kMethods[] = {"GET", "POST", "PUT", "DELETE", "OPTIONS", "HEAD", "PATCH"};

// Bodies that a well-behaved client sends, by route. `M` becomes the model field.
struct Seed {
  const char* path;
  const char* body;
};
const Seed kSeeds[] = {
    {"/v1/chat/completions",
     R"({M"messages":[{"role":"system","content":"You are terse."},{"role":"user","content":"hi"}],"max_tokens":4})"},
    {"/v1/chat/completions",
     R"({M"messages":[{"role":"user","content":[{"type":"text","text":"hello"}]}],"max_tokens":3,"stream":true,"stream_options":{"include_usage":true}})"},
    {"/v1/chat/completions",
     R"({M"messages":[{"role":"user","content":"call f"}],"tools":[{"type":"function","function":{"name":"f","description":"d","parameters":{"type":"object","properties":{"x":{"type":"string"}}}}}],"max_tokens":4,"temperature":0})"},
    {"/v1/chat/completions",
     R"({M"messages":[{"role":"user","content":"a"},{"role":"assistant","content":"b"},{"role":"tool","content":"c","tool_call_id":"1"}],"max_tokens":2,"seed":7,"top_p":0.9,"stop":["\n"]})"},
    {"/v1/completions", R"({M"prompt":"Once upon a time","max_tokens":4,"temperature":0})"},
    {"/v1/completions", R"({M"prompt":[1,2,3,4],"max_tokens":2,"stream":true})"},
    {"/v1/completions", R"({M"prompt":"x","max_tokens":1,"stop":"y","presence_penalty":0.5})"},
    {"/tokenize", R"({"content":"hello world","with_pieces":true})"},
    {"/detokenize", R"({"tokens":[1,2,3]})"},
    {"/apply-template", R"({"messages":[{"role":"user","content":"hi"}]})"},
    {"/v1/cache/warm", R"({"prompt":"warm this prefix"})"},
    {"/v1/cache/warm", R"({"messages":[{"role":"system","content":"sys"}]})"},
    {"/v1/cache/clear", ""},
    {"/v1/messages", R"({M"max_tokens":4,"messages":[{"role":"user","content":"hi"}]})"},
    {"/v1/responses", R"({M"input":"hi","max_output_tokens":4})"},
};

size_t Pick(Rng& rng, size_t n) { return std::uniform_int_distribution<size_t>(0, n - 1)(rng); }
bool Chance(Rng& rng, double p) { return std::uniform_real_distribution<double>(0, 1)(rng) < p; }

template <typename T, size_t N>
const T& PickOf(Rng& rng, const T (&items)[N]) {
  return items[Pick(rng, N)];
}

std::string RandomBytes(Rng& rng, size_t n) {
  std::string s(n, '\0');
  for (char& c : s) c = char(rng());
  return s;
}

std::string SeedBody(const FuzzOptions& o, const Seed& seed) {
  std::string body = seed.body;
  size_t m = body.find("{M");
  if (m != std::string::npos) {
    body.replace(m, 2, o.model.empty() ? "{" : "{\"model\":" + json(o.model).dump() + ",");
  }
  return body;
}

// ---- values that break parsers ---------------------------------------------------------------

const char* const kOddValues[] = {
    "1e400", "-1e400", "99999999999999999999999", "-9223372036854775809",
    "18446744073709551616", "0.0000000000000000000000001", "-0", "NaN", "Infinity", "1e-400",
    "null", "true", "[]", "{}", "\"\"", "\"\\ud800\"", "\"\\udfff\\ud800\"", "\"\xff\xfe\"",
    "\"\xc0\xaf\"", "\"\xed\xa0\x80\"", "\"\xf4\x90\x80\x80\"", "\"a\\u0000b\"",
    "\"\\x\"", "2147483648", "-2147483649", "4294967296", "[[[[[[[[[[]]]]]]]]]]", "\"\xe2\x82\"",
    "[1,2,3,-5,4294967295,1e10]", "{\"role\":\"user\"}", "\"user\"", "1.5"};

std::string DeepJson(Rng& rng) {
  size_t depth = size_t(1) << (4 + Pick(rng, 13));  // 16 .. 65536
  bool objects = Chance(rng, 0.5);
  std::string s;
  if (Chance(rng, 0.5)) s = "{\"messages\":";
  for (size_t i = 0; i < depth; ++i) s += objects ? "{\"a\":" : "[";
  s += "1";
  if (Chance(rng, 0.8)) {
    for (size_t i = 0; i < depth; ++i) s += objects ? "}" : "]";
  }
  if (s[0] == '{' && s[1] == '"' && s[2] == 'm') s += "}";
  return s;
}

// A seed body with one value swapped for an odd one.
std::string OddValueBody(const FuzzOptions& o, Rng& rng) {
  json j = json::parse(SeedBody(o, PickOf(rng, kSeeds)), nullptr, false);
  if (!j.is_object() || j.empty()) return PickOf(rng, kOddValues);
  auto it = j.begin();
  std::advance(it, long(Pick(rng, j.size())));
  std::string key = it.key();
  j.erase(key);
  std::string text = j.dump();
  std::string field = "\"" + key + "\":" + PickOf(rng, kOddValues);
  return text.size() <= 2 ? "{" + field + "}" : "{" + field + "," + text.substr(1);
}

// A body that is valid JSON but of the wrong shape, or an extreme size.
std::string JsonEdgeBody(const FuzzOptions& o, Rng& rng) {
  switch (Pick(rng, 11)) {
    case 8: {  // a grammar that ends while ignore_eos masks the end (it killed the server once)
      const char* schemas[] = {R"({"type":"boolean"})", R"({"enum":["a","b"]})",
                               R"({"type":"integer","minimum":0,"maximum":9})", R"({})"};
      return std::string(R"({"messages":[{"role":"user","content":"hi"}],"ignore_eos":true,)") +
             R"("max_tokens":)" + std::to_string(1 + Pick(rng, 64)) +
             R"(,"chat_template_kwargs":{"enable_thinking":false},"response_format":)" +
             R"({"type":"json_schema","json_schema":{"name":"s","schema":)" + PickOf(rng, schemas) +
             "}}}";
    }
    case 9: {  // a schema of many optional properties: refused before a grammar is built
      std::string props;
      const size_t n = 100 + Pick(rng, 900);
      for (size_t i = 0; i < n; ++i) props += (i ? "," : "") + std::string("\"p") + std::to_string(i) + "\":{}";
      return std::string(R"({"messages":[{"role":"user","content":"hi"}],"max_tokens":1,)") +
             R"("response_format":{"type":"json_schema","json_schema":{"name":"s","schema":)" +
             R"({"type":"object","properties":{)" + props + "}}}}}";
    }
    case 10:  // an agent's system message in the middle, developer messages first
      return R"({"messages":[{"role":"developer","content":"d"},{"role":"system","content":"s"},)"
             R"({"role":"user","content":"u"},{"role":"system","content":"env"},)"
             R"({"role":"assistant","content":"a"},{"role":"system","content":"n"}],"max_tokens":1})";
    case 0: return DeepJson(rng);
    case 1: return OddValueBody(o, rng);
    case 2: return PickOf(rng, kOddValues);
    case 3: {  // a long prompt of repeated text, or many messages
      std::string s = "{\"prompt\":\"" + std::string(1000 + Pick(rng, 3000), 'a') + "\",\"max_tokens\":1}";
      return s;
    }
    case 4: {
      std::string s = "{\"messages\":[";
      size_t n = 1 + Pick(rng, std::max<size_t>(1, o.max_messages));
      for (size_t i = 0; i < n; ++i) s += std::string(i ? "," : "") + R"({"role":"user","content":"m"})";
      return s + "],\"max_tokens\":1}";
    }
    case 5: return "{\"messages\":[{\"role\":\"user\",\"content\":\"" + RandomBytes(rng, 40) + "\"}]}";
    case 6: return "{\"a\":1,\"a\":2,\"messages\":[],\"messages\":null}";
    default: return "{\"prompt\":[" + std::to_string(int64_t(rng())) + "],\"max_tokens\":1}";
  }
}

// A seed body with bytes flipped, cut, duplicated or inserted.
std::string MutatedBody(const FuzzOptions& o, Rng& rng) {
  std::string s = SeedBody(o, PickOf(rng, kSeeds));
  size_t n_edits = 1 + Pick(rng, 4);
  for (size_t e = 0; e < n_edits && !s.empty(); ++e) {
    size_t at = Pick(rng, s.size());
    switch (Pick(rng, 6)) {
      case 0: s[at] = char(s[at] ^ (1 << Pick(rng, 8))); break;
      case 1: s.resize(at); break;
      case 2: s.insert(at, s.substr(at, Pick(rng, 64))); break;
      case 3: s.insert(at, RandomBytes(rng, 1 + Pick(rng, 8))); break;
      case 4: s.insert(at, PickOf(rng, kOddValues)); break;
      default: s.erase(at, Pick(rng, 16)); break;
    }
  }
  return s;
}

// ---- framing ---------------------------------------------------------------------------------

struct Request {
  std::string method = "POST";
  std::string path = "/v1/chat/completions";
  std::string version = "HTTP/1.1";
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
  bool content_length = true;  // add a correct Content-Length
};

std::string Serialize(const Request& r) {
  std::string s = r.method + " " + r.path + " " + r.version + "\r\n";
  for (const auto& [k, v] : r.headers) s += k + ": " + v + "\r\n";
  if (r.content_length) s += "Content-Length: " + std::to_string(r.body.size()) + "\r\n";
  return s + "\r\n" + r.body;
}

void AddCommonHeaders(const FuzzOptions& o, Rng& rng, Request* r) {
  r->headers.push_back({"Host", "127.0.0.1"});
  r->headers.push_back({"Connection", "close"});
  if (!o.api_key.empty()) {
    switch (Pick(rng, 10)) {
      case 0: break;  // no key
      case 1: r->headers.push_back({"Authorization", "Bearer wrong-" + std::to_string(rng() % 99)}); break;
      case 2: r->headers.push_back({"x-api-key", o.api_key}); break;
      case 3: r->headers.push_back({"Authorization", "Bearer " + std::string(8000, 'k')}); break;
      case 4: r->headers.push_back({"x-api-key", "\xff\xfe" + o.api_key}); break;
      default: r->headers.push_back({"Authorization", "Bearer " + o.api_key}); break;
    }
  }
}

Request BaseRequest(const FuzzOptions& o, Rng& rng, std::string body, const char* path) {
  Request r;
  r.path = path;
  r.body = std::move(body);
  AddCommonHeaders(o, rng, &r);
  r.headers.push_back({"Content-Type", "application/json"});
  return r;
}

FuzzCase Framed(const char* kind, const Request& r) {
  FuzzCase c;
  c.kind = kind;
  c.bytes = Serialize(r);
  c.head = r.method == "HEAD";
  return c;
}

FuzzCase ValidCase(const FuzzOptions& o, Rng& rng) {
  const Seed& seed = PickOf(rng, kSeeds);
  Request r = BaseRequest(o, rng, SeedBody(o, seed), seed.path);
  if (Chance(rng, 0.2)) {  // the GET routes
    r.method = "GET";
    r.body.clear();
    r.path = PickOf(rng, kPaths);
  }
  return Framed("valid", r);
}

FuzzCase BodyCase(const char* kind, const FuzzOptions& o, Rng& rng, std::string body) {
  const char* path = Chance(rng, 0.7) ? PickOf(rng, kSeeds).path : PickOf(rng, kPaths);
  return Framed(kind, BaseRequest(o, rng, std::move(body), path));
}

FuzzCase HeaderCase(const FuzzOptions& o, Rng& rng) {
  const Seed& seed = PickOf(rng, kSeeds);
  Request r = BaseRequest(o, rng, SeedBody(o, seed), seed.path);
  r.method = Chance(rng, 0.8) ? "POST" : PickOf(rng, kMethods);
  const char* kTypes[] = {"text/plain", "application/x-www-form-urlencoded",
                          "multipart/form-data; boundary=x", "application/json; charset=latin1",
                          "", "\xff\xfe/json", "application/json, text/html"};
  switch (Pick(rng, 8)) {
    case 0: r.headers.back().second = PickOf(rng, kTypes); break;
    case 1: r.headers.pop_back(); break;
    case 2: r.headers.push_back({"X-Long", std::string(1000 + Pick(rng, 9000), 'h')}); break;
    case 3:
      for (int i = 0; i < 50; ++i) r.headers.push_back({"X-Many-" + std::to_string(i), "v"});
      break;
    case 4: r.headers.push_back({"Accept", "text/event-stream"}); break;
    case 5: r.headers.push_back({"Expect", "100-continue"}); break;
    case 6: r.headers.push_back({"X-Utf8", "\xc3\x28\xff"}); break;
    default: r.headers.push_back({"Content-Encoding", "gzip"}); break;
  }
  FuzzCase c = Framed("headers", r);
  c.expect_answer = r.method != "HEAD";  // httplib may drop a HEAD it has no route for
  if (r.headers.size() > 40) c.expect_answer = true;
  return c;
}

FuzzCase FramingCase(const FuzzOptions& o, Rng& rng) {
  Request r = BaseRequest(o, rng, MutatedBody(o, rng), PickOf(rng, kSeeds).path);
  FuzzCase c;
  c.kind = "framing";
  c.expect_answer = false;  // a lying length may leave the server waiting for bytes
  switch (Pick(rng, 6)) {
    case 0: r.content_length = false; r.headers.push_back({"Content-Length", std::to_string(r.body.size() + 1 + Pick(rng, 100))}); break;
    case 1: r.content_length = false; r.headers.push_back({"Content-Length", "-5"}); break;
    case 2: r.content_length = false; r.headers.push_back({"Content-Length", "99999999999999999999999"}); break;
    case 3: r.content_length = false; r.headers.push_back({"Content-Length", std::to_string(size_t(1) << 40)}); break;
    case 4: r.headers.push_back({"Content-Length", "3"}); break;  // two lengths
    default: r.content_length = false; r.headers.push_back({"Content-Length", "12abc"}); break;
  }
  c.bytes = Serialize(r);
  c.close_early = Chance(rng, 0.5);
  return c;
}

std::string Hex(size_t n) {
  std::ostringstream s;
  s << std::hex << n;
  return s.str();
}

FuzzCase ChunkedCase(const FuzzOptions& o, Rng& rng) {
  const Seed& seed = PickOf(rng, kSeeds);
  std::string body = Chance(rng, 0.5) ? SeedBody(o, seed) : MutatedBody(o, rng);
  Request r = BaseRequest(o, rng, "", seed.path);
  r.content_length = false;
  r.headers.push_back({"Transfer-Encoding", "chunked"});
  bool valid = Chance(rng, 0.5);
  std::string chunks;
  for (size_t at = 0; at < body.size();) {
    size_t n = std::min(body.size() - at, 1 + Pick(rng, 32));
    chunks += Hex(n) + (Chance(rng, 0.1) ? ";ext=1" : "") + "\r\n" + body.substr(at, n) + "\r\n";
    at += n;
  }
  if (valid) {
    chunks += "0\r\n\r\n";
  } else {
    switch (Pick(rng, 4)) {
      case 0: break;  // no last chunk
      case 1: chunks += "ffffffffffffffffffff\r\nabc\r\n0\r\n\r\n"; break;
      case 2: chunks += "zz\r\nabc\r\n0\r\n\r\n"; break;
      default: chunks += "5\r\nab\r\n0\r\n\r\n"; break;  // short chunk
    }
  }
  r.body = chunks;
  FuzzCase c = Framed("chunked", r);
  c.expect_answer = valid;
  c.close_early = !valid && Chance(rng, 0.5);
  return c;
}

FuzzCase TruncatedCase(const FuzzOptions& o, Rng& rng) {
  FuzzCase c = ValidCase(o, rng);
  c.kind = "truncated";
  c.bytes.resize(Pick(rng, c.bytes.size()));
  c.expect_answer = false;
  c.close_early = true;
  return c;
}

FuzzCase RequestLineCase(const FuzzOptions& o, Rng& rng) {
  Request r = BaseRequest(o, rng, MutatedBody(o, rng), PickOf(rng, kPaths));
  switch (Pick(rng, 7)) {
    case 0: r.method = PickOf(rng, kMethods); break;
    case 1: r.method = "FROB"; break;
    case 2: r.version = "HTTP/1.0"; break;
    case 3: r.version = "HTTP/2.0"; break;
    case 4: r.path = "/" + std::string(40000, 'p'); break;
    case 5: r.path = std::string("/v1/chat/completions?") + RandomBytes(rng, 20); break;
    default: r.path = "*"; break;
  }
  FuzzCase c = Framed("request_line", r);
  c.expect_answer = false;  // httplib may close on a line it cannot parse
  return c;
}

FuzzCase RandomCase(Rng& rng) {
  FuzzCase c;
  c.kind = "random";
  c.bytes = Chance(rng, 0.5) ? RandomBytes(rng, 1 + Pick(rng, 2000))
                             : "POST /v1/completions HTTP/1.1\r\n" + RandomBytes(rng, 200);
  c.expect_answer = false;
  c.close_early = Chance(rng, 0.3);
  return c;
}

// ---- answers ---------------------------------------------------------------------------------

struct Answer {
  int status = 0;
  std::map<std::string, std::string> headers;  // lower-case names
  std::string body;
};

std::string Lower(std::string s) {
  for (char& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string Dechunk(const std::string& in) {
  std::string out;
  size_t pos = 0;
  while (pos < in.size()) {
    size_t eol = in.find("\r\n", pos);
    if (eol == std::string::npos) break;
    size_t n = std::strtoul(in.substr(pos, eol - pos).c_str(), nullptr, 16);
    if (n == 0) break;
    out += in.substr(eol + 2, n);
    pos = eol + 2 + n + 2;
  }
  return out;
}

bool ParseAnswer(std::string raw, Answer* a) {
  // Interim answers ("100 Continue" after "Expect: 100-continue") precede the real one.
  while (raw.compare(0, 10, "HTTP/1.1 1") == 0 && raw.find("\r\n\r\n") != std::string::npos) {
    raw.erase(0, raw.find("\r\n\r\n") + 4);
  }
  size_t head_end = raw.find("\r\n\r\n");
  if (raw.compare(0, 9, "HTTP/1.1 ") != 0 || head_end == std::string::npos) return false;
  a->status = std::atoi(raw.c_str() + 9);
  std::istringstream lines(raw.substr(0, head_end));
  std::string line;
  std::getline(lines, line);
  while (std::getline(lines, line)) {
    size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string v = line.substr(colon + 1);
    while (!v.empty() && (v.back() == '\r' || v.back() == ' ')) v.pop_back();
    while (!v.empty() && v.front() == ' ') v.erase(0, 1);
    a->headers[Lower(line.substr(0, colon))] = v;
  }
  a->body = raw.substr(head_end + 4);
  if (Lower(a->headers["transfer-encoding"]) == "chunked") {
    a->body = Dechunk(a->body);
  } else if (a->headers.count("content-length")) {  // a pipelined second answer may follow
    a->body = a->body.substr(0, std::strtoul(a->headers["content-length"].c_str(), nullptr, 10));
  }
  return true;
}

// `may_be_cut`: the client half-closed its side, which a server may take for a client that
// left: the stream may then end early, even before its first event.
std::string CheckSse(const std::string& body, bool may_be_cut) {
  size_t pos = 0, events = 0;
  while ((pos = body.find("data: ", pos)) != std::string::npos) {
    size_t end = body.find("\n\n", pos);
    if (end == std::string::npos) return "an SSE event without its blank line";
    std::string data = body.substr(pos + 6, end - pos - 6);
    if (data != "[DONE]" && !json::accept(data)) return "an SSE event that is not JSON: " + data.substr(0, 200);
    ++events;
    pos = end;
  }
  return events == 0 && !may_be_cut ? "an event stream without events" : "";
}

std::string CheckSuccess(const FuzzCase& c, const Answer& a) {
  if (c.head) return "";
  std::string type = a.headers.count("content-type") ? a.headers.at("content-type") : "";
  if (type.rfind("application/json", 0) == 0 && !json::accept(a.body)) {
    return "a 2xx JSON body that does not parse: " + a.body.substr(0, 200);
  }
  if (type.rfind("text/event-stream", 0) == 0) return CheckSse(a.body, !c.expect_answer);
  return "";
}

std::string CheckError(const FuzzCase& c, const Answer& a) {
  if (a.status == 503 && !a.headers.count("retry-after")) return "503 without Retry-After";
  if (c.head) return "";
  json body = json::parse(a.body, nullptr, false);
  if (body.is_discarded()) return "an error body that is not JSON: " + a.body.substr(0, 200);
  const json* e = body.contains("error") ? &body["error"] : nullptr;
  if (e == nullptr || !e->is_object() || !(*e)["message"].is_string()) {
    return "an error body without error.message: " + a.body.substr(0, 200);
  }
  return "";
}

int ConnectTo(const FuzzOptions& o) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(uint16_t(o.port));
  inet_pton(AF_INET, o.host.c_str(), &addr.sin_addr);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

void SendAll(int fd, const std::string& bytes) {
  size_t sent = 0;
  while (sent < bytes.size()) {
    ssize_t n = send(fd, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) return;  // the server may close early on bad input: what it said is still read
    sent += size_t(n);
  }
}

// True when `raw` holds one whole final answer (framed by Content-Length or chunked), so that
// reading may stop without waiting for the server to close (it may keep a connection whose
// request it could not parse open until its keep-alive timeout).
bool AnswerComplete(std::string raw) {
  while (raw.compare(0, 10, "HTTP/1.1 1") == 0 && raw.find("\r\n\r\n") != std::string::npos) {
    raw.erase(0, raw.find("\r\n\r\n") + 4);
  }
  size_t head_end = raw.find("\r\n\r\n");
  if (head_end == std::string::npos) return false;
  std::string head = Lower(raw.substr(0, head_end + 2));
  size_t body = raw.size() - head_end - 4;
  size_t cl = head.find("\r\ncontent-length:");
  if (cl != std::string::npos) return body >= std::strtoul(head.c_str() + cl + 17, nullptr, 10);
  if (head.find("transfer-encoding: chunked") != std::string::npos) {
    return raw.find("\r\n0\r\n\r\n", head_end) != std::string::npos;
  }
  return false;  // framed by the end of the connection
}

std::string ReadToEof(int fd, int timeout_ms) {
  std::string got;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  char buf[16384];
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                    deadline - std::chrono::steady_clock::now()).count();
    pollfd p{fd, POLLIN, 0};
    if (left <= 0 || poll(&p, 1, int(left)) <= 0) break;
    ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    got.append(buf, size_t(n));
    if (AnswerComplete(got)) break;
  }
  return got;
}

}  // namespace

std::string FuzzReport::Summary() const {
  std::ostringstream s;
  s << "sent=" << sent << " answered=" << answered << " violations=" << n_violations
    << " slow=" << n_slow << " seconds=" << seconds << " status:";
  for (const auto& [code, n] : by_status) s << " " << code << "=" << n;
  s << " kinds:";
  for (const auto& [kind, n] : by_kind) s << " " << kind << "=" << n;
  for (const std::string& v : violations) s << "\n  " << v;
  for (const std::string& v : slow) s << "\n  slow: " << v;
  return s.str();
}

FuzzCase MakeCase(const FuzzOptions& o, size_t index) {
  Rng rng(o.seed * 0x9e3779b97f4a7c15ull + index);
  size_t roll = Pick(rng, 100);
  if (roll < 3) {  // a valid request from a slow client: the same answer, a little later
    FuzzCase c = ValidCase(o, rng);
    c.kind = "trickled";
    c.trickle_ms = 1 + int(Pick(rng, 20));
    return c;
  }
  if (roll < 12) return ValidCase(o, rng);
  if (roll < 37) return BodyCase("mutated", o, rng, MutatedBody(o, rng));
  if (roll < 55) return BodyCase("json_edge", o, rng, JsonEdgeBody(o, rng));
  if (roll < 67) return HeaderCase(o, rng);
  if (roll < 77) return ChunkedCase(o, rng);
  if (roll < 84) return TruncatedCase(o, rng);
  if (roll < 89) return FramingCase(o, rng);
  if (roll < 95) return RequestLineCase(o, rng);
  return RandomCase(rng);
}

std::string CheckAnswer(const FuzzCase& c, const std::string& raw) {
  if (raw.empty()) return c.expect_answer ? "no answer to a well-framed request" : "";
  Answer a;
  if (!ParseAnswer(raw, &a)) return "an answer that is not HTTP/1.1: " + raw.substr(0, 200);
  if (a.status >= 200 && a.status < 300) return CheckSuccess(c, a);
  if ((a.status >= 400 && a.status < 500) || a.status == 503) return CheckError(c, a);
  return "status " + std::to_string(a.status) + ": " + a.body.substr(0, 300);
}

std::string Exchange(const FuzzOptions& o, const FuzzCase& c) {
  int fd = ConnectTo(o);
  if (fd < 0) return "";
  if (c.trickle_ms > 0) {
    const size_t piece = c.bytes.size() / 4 + 1;
    for (size_t at = 0; at < c.bytes.size(); at += piece) {
      if (at) std::this_thread::sleep_for(std::chrono::milliseconds(c.trickle_ms));
      SendAll(fd, c.bytes.substr(at, piece));
    }
  } else {
    SendAll(fd, c.bytes);
  }
  std::string got;
  if (!c.close_early) {
    // A server may take a half-closed connection for a client that left (and cancel a stream),
    // so only requests that may leave it waiting for more bytes half-close.
    if (!c.expect_answer) shutdown(fd, SHUT_WR);
    got = ReadToEof(fd, o.answer_timeout_ms);
  }
  close(fd);
  return got;
}

FuzzReport RunFuzz(const FuzzOptions& o) {
  FuzzReport report;
  std::mutex mu;
  std::atomic<size_t> next{0};
  auto start = std::chrono::steady_clock::now();
  auto elapsed = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  auto worker = [&] {
    for (size_t i; (i = next++) < o.n_requests && elapsed() < o.max_seconds;) {
      FuzzCase c = MakeCase(o, i);
      auto t0 = std::chrono::steady_clock::now();
      std::string raw = Exchange(o, c);
      double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      std::string why = CheckAnswer(c, raw);
      Answer a;
      bool answered = !raw.empty() && ParseAnswer(raw, &a);
      std::lock_guard<std::mutex> lock(mu);
      ++report.sent;
      ++report.by_kind[c.kind];
      if (took > 1.0 && ++report.n_slow <= 10) {
        report.slow.push_back("case " + std::to_string(i) + " (" + c.kind + ") " +
                              std::to_string(took) + " s");
      }
      if (answered) {
        ++report.answered;
        ++report.by_status[a.status];
      }
      if (!why.empty()) {
        ++report.n_violations;
        if (report.violations.size() < 20) {
          report.violations.push_back("case " + std::to_string(i) + " (" + c.kind + "): " + why +
                                      " | request: " + json(c.bytes.substr(0, 300)).dump(
                                          -1, ' ', false, json::error_handler_t::replace));
        }
      }
    }
  };
  std::vector<std::thread> threads;
  for (size_t t = 0; t < std::max<size_t>(1, o.n_threads); ++t) threads.emplace_back(worker);
  for (auto& t : threads) t.join();
  report.seconds = elapsed();
  return report;
}

bool ServerStillServes(const FuzzOptions& o, std::string* why) {
  FuzzCase health;
  health.bytes = "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
  Answer a;
  if (!ParseAnswer(Exchange(o, health), &a) || a.status != 200) {
    *why = "GET /health did not answer 200";
    return false;
  }
  Rng rng(o.seed);
  Request r;
  r.path = "/v1/completions";
  r.body = "{\"prompt\":\"still there?\",\"max_tokens\":2}";
  r.headers = {{"Host", "127.0.0.1"}, {"Connection", "close"}, {"Content-Type", "application/json"}};
  if (!o.api_key.empty()) r.headers.push_back({"Authorization", "Bearer " + o.api_key});
  FuzzCase c = Framed("final", r);
  if (!ParseAnswer(Exchange(o, c), &a) || a.status != 200 || !json::accept(a.body)) {
    *why = "a plain completion did not answer 200 with JSON (status " +
           std::to_string(a.status) + ")";
    return false;
  }
  return true;
}

}  // namespace prefixd::fuzz
