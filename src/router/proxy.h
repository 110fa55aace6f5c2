// Forward: one request to a model's server on loopback and its answer back, streamed as it
// comes (SSE included). The upstream request runs on a thread of its own that feeds the
// response's chunked content provider; a client that goes away — while a non-streamed answer
// is being made, during a stream's prefill, or mid-stream — closes the upstream connection,
// which cancels the model server's work. At most a few MiB of answer wait for a slow reader.
// The client's Host and key go on with the request. The lease is held until the upstream
// request ends.
#pragma once

#include <httplib.h>

#include <string>

#include "router/model_pool.h"

namespace prefixd::router {

// REQUIRES: lease holds a loaded model. Sets `res` from the model server's answer and returns
// "", or leaves `res` alone and returns why the model's server answered nothing (the caller
// decides: the server may have ended). `server_name` replaces the model server's
// X-Prefixd-Server header.
std::string Forward(const httplib::Request& req, httplib::Response& res, ModelPool::Lease lease,
                    const std::string& server_name);

// GETs `path` from the model server at `port` (for /metrics) with `headers` (the caller's key);
// "" on any failure.
std::string FetchFromModel(int port, const std::string& path, const httplib::Headers& headers);

}  // namespace prefixd::router
