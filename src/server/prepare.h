#pragma once
// Request body text → a Job ready to queue: JSON parse (depth-bounded), API parse, render,
// tokenize, context check. Runs on the request's thread so that every client error is an
// ApiError answered before anything is queued.
#include <string_view>

#include "server/inference_model.h"
#include "server/request_parse.h"
#include "server/worker.h"

namespace ds4::server {

void prepare_job(ApiKind api, std::string_view body, const ParseContext& pctx, const InferenceModel& model,
                 Job& job);

}  // namespace ds4::server
