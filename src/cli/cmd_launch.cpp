// prefixd launch claude|codex|opencode [flags] [-- CLIENT ARGS]: starts an agent client against
// a running prefixd with the model and its window set for it (launch/client_setup.h).
#include <sys/stat.h>
#include <unistd.h>

#include <httplib.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "cli/commands.h"
#include "launch/client_setup.h"
#include "util/flags.h"

namespace prefixd::cli {

namespace {

struct LaunchArgs {
  std::string model;
  std::string url;
  std::string key;
  std::string client_bin;
  int64_t ctx = 0;
  bool config_only = false;
};

std::string EnvOr(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v && *v ? v : fallback;
}

std::string ProfileDir() {
  const std::string xdg = EnvOr("XDG_CONFIG_HOME", EnvOr("HOME", ".") + "/.config");
  return xdg + "/prefixd/launch";
}

// GET /v1/models from the server, with the key.
Result<nlohmann::json> FetchModels(const std::string& url, const std::string& key) {
  httplib::Client cli(url);
  cli.set_connection_timeout(5, 0);
  cli.set_read_timeout(30, 0);
  httplib::Headers headers;
  if (!key.empty()) headers.emplace("Authorization", "Bearer " + key);
  httplib::Result r = cli.Get("/v1/models", headers);
  if (!r) {
    return Status::IOError("no prefixd answers at " + url + " (" + httplib::to_string(r.error()) +
                           "): start one with scripts/run.sh or prefixd serve, or give --url");
  }
  if (r->status != 200) {
    return Status::IOError(url + "/v1/models answered " + std::to_string(r->status) +
                           (r->status == 401 ? ": give the key with --key or PREFIXD_API_KEY" : ""));
  }
  nlohmann::json body = nlohmann::json::parse(r->body, nullptr, false);
  if (body.is_discarded()) return Status::IOError(url + "/v1/models did not answer JSON");
  return body;
}

Status WriteFiles(const launch::LaunchPlan& plan) {
  for (const auto& [path, content] : plan.files) {
    std::error_code ec;
    std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
    std::ofstream out(path, std::ios::trunc);
    out << content;
    if (!out.flush()) return Status::IOError("cannot write " + path);
    ::chmod(path.c_str(), 0600);
  }
  return Status::OK();
}

// Replaces this process with the client; returns only when it cannot start.
int Exec(const launch::LaunchPlan& plan, const std::string& bin,
         const std::vector<std::string>& user_args) {
  for (const auto& [name, value] : plan.env) ::setenv(name.c_str(), value.c_str(), 1);
  std::vector<std::string> args = {bin};
  args.insert(args.end(), plan.args.begin(), plan.args.end());
  args.insert(args.end(), user_args.begin(), user_args.end());
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  ::execvp(bin.c_str(), argv.data());
  std::fprintf(stderr, "prefixd launch: cannot start %s: %s (is it installed and on PATH? "
               "--client-bin names another)\n", bin.c_str(), std::strerror(errno));
  return 1;
}

int Launch(launch::Client client, const LaunchArgs& a, const std::vector<std::string>& user) {
  auto fail = [](const Status& st) {
    std::fprintf(stderr, "prefixd launch: %s\n", st.message().c_str());
    return 1;
  };
  auto models = FetchModels(a.url, a.key);
  if (!models.ok()) return fail(models.status());
  auto model = launch::PickModel(*models, a.model);
  if (!model.ok() && !(a.ctx > 0 && model.status().code() == Status::Code::kInvalidArgument)) {
    return fail(model.status());
  }
  launch::ServedModel served = model.ok() ? *model : launch::ServedModel{a.model, 0, 0};
  if (a.ctx > 0) {
    served.context = a.ctx;
    if (served.max_output <= 0 || served.max_output > a.ctx / 2) served.max_output = a.ctx / 8;
  }
  auto plan = launch::PlanLaunch(client, {a.url, a.key, served, ProfileDir()});
  if (!plan.ok()) return fail(plan.status());
  if (Status st = WriteFiles(*plan); !st.ok()) return fail(st);
  std::fprintf(stderr, "prefixd launch: %s on %s, model %s, window %lld, output cap %lld\n",
               launch::ClientName(client), a.url.c_str(), served.id.c_str(),
               (long long)served.context, (long long)served.max_output);
  if (a.config_only) {
    std::fputs(launch::DescribePlan(*plan).c_str(), stdout);
    return 0;
  }
  return Exec(*plan, a.client_bin.empty() ? plan->program : a.client_bin, user);
}

}  // namespace

int CmdLaunch(int argc, char** argv) {
  LaunchArgs a;
  a.url = EnvOr("PREFIXD_URL", "http://127.0.0.1:8080");
  Flags flags("launch",
              "prefixd launch claude|codex|opencode [flags] [-- CLIENT ARGS]: start an agent "
              "client against a running prefixd, with the model and its window set for it");
  flags.String("--model", &a.model, "the model to use (default: the server's first)");
  flags.String("--url", &a.url, "the server (or router): $PREFIXD_URL or this");
  flags.String("--key", &a.key, "API key, when the server has keys ($PREFIXD_API_KEY)");
  flags.Int("--ctx", &a.ctx, "the model's window, when the server does not say it (0: ask it)");
  flags.String("--client-bin", &a.client_bin, "the client's program (default: claude, codex or "
               "opencode on PATH)");
  flags.Bool("--config", &a.config_only, "write the client's setup and print it; start nothing");
  int end = argc;
  std::vector<std::string> user;
  for (int i = 2; i < argc; ++i) {
    if (std::strcmp(argv[i], "--") == 0) {
      end = i;
      for (int j = i + 1; j < argc; ++j) user.push_back(argv[j]);
      break;
    }
  }
  const bool named = end > 2 && argv[2][0] != '-';
  return RunWithFlags(flags, end, argv, [&] {
    if (!named) {
      std::fprintf(stderr, "prefixd launch: name the client: claude, codex or opencode\n\n%s",
                   flags.Help().c_str());
      return 2;
    }
    if (a.key.empty()) a.key = EnvOr("PREFIXD_API_KEY", "");  // not shown as --help's default
    auto client = launch::ParseClient(argv[2]);
    if (!client.ok()) {
      std::fprintf(stderr, "prefixd launch: %s\n", client.status().message().c_str());
      return 2;
    }
    return Launch(*client, a, user);
  }, named ? 3 : 2);
}

}  // namespace prefixd::cli
