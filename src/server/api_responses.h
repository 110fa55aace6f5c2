// The OpenAI Responses API (POST /v1/responses) as a translation of chat completions.
//
// ResponsesToChat() turns a Responses request into a /v1/chat/completions body:
//   instructions -> a first system message; input (a string, or items: messages with
//   input_text / output_text parts, function_call, function_call_output, reasoning) ->
//   messages; function tools {type,name,description,parameters} -> chat tools; tool_choice;
//   max_output_tokens -> max_tokens; temperature, top_p, parallel_tool_calls; stream (with
//   include_usage); reasoning.effort -> reasoning_effort; text.format -> response_format.
// The server keeps no state: `store` is accepted and nothing is stored; previous_response_id,
// conversation, background and item references are refused. Tools other than function tools
// (web_search, file_search, ...) run on OpenAI's side and are skipped.
//
// NewResponsesAdapter() turns the chat answer back into a Response object (output items
// reasoning, message with output_text, function_call; usage with input_tokens_details) or the
// Responses event stream (response.created ... response.completed, with sequence_number).
// Errors keep the OpenAI shape; parameters are named as the Responses API names them.
// Pure; thread-safe.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "server/api_adapter.h"
#include "server/api_error.h"

namespace prefixd::server {

// Fills *chat_body (JSON text) or returns the 400 to answer, naming the field.
std::optional<ApiError> ResponsesToChat(const std::string& body, std::string* chat_body);

std::unique_ptr<ApiAdapter> NewResponsesAdapter();

}  // namespace prefixd::server
