#include "router/model_process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <deque>
#include <fstream>
#include <functional>
#include <regex>
#include <thread>

#include "util/mutex.h"

namespace prefixd::router {

namespace {

using Clock = std::chrono::steady_clock;

// Closes every descriptor from 3 up in a child between fork and exec (async-signal-safe).
void CloseInherited() {
#ifdef SYS_close_range
  if (syscall(SYS_close_range, 3u, ~0u, 0u) == 0) return;
#endif
  const long max_fd = sysconf(_SC_OPEN_MAX);
  for (long fd = 3; fd < (max_fd > 0 ? max_fd : 1024); ++fd) close(int(fd));
}

struct Spawned {
  pid_t pid = -1;
  int log_fd = -1;  // the read end of the child's stdout and stderr
};

// Forks `argv` with stdout and stderr into a pipe. Runs on the launcher's fork thread: the child
// gets SIGKILL when that thread's process dies (PR_SET_PDEATHSIG), so a router killed with -9
// leaves no model server behind holding its cache dir.
Result<Spawned> Spawn(const std::vector<std::string>& argv, pid_t parent) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return Status::IOError(std::string("pipe: ") + strerror(errno));
  std::vector<char*> cargv;
  for (const std::string& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
  cargv.push_back(nullptr);
  const pid_t pid = fork();
  if (pid < 0) {
    close(fds[0]);
    close(fds[1]);
    return Status::IOError(std::string("fork: ") + strerror(errno));
  }
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);
    dup2(fds[1], 1);
    dup2(fds[1], 2);
    const int null_fd = open("/dev/null", O_RDONLY);
    if (null_fd >= 0) dup2(null_fd, 0);
    CloseInherited();
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);  // the router blocks SIGTERM for its waiter
    execv(cargv[0], cargv.data());
    _exit(127);
  }
  close(fds[1]);
  return Spawned{pid, fds[0]};
}

// One thread that does every fork (see Spawn).
class ForkThread {
 public:
  ForkThread() : thread_([this] { Run(); }) {}
  ~ForkThread() {
    {
      MutexLock lock(&mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  Result<Spawned> Spawn(const std::vector<std::string>& argv) {
    Job job{argv};
    MutexLock lock(&mu_);
    jobs_.push_back(&job);
    cv_.notify_all();
    while (!job.done) cv_.Wait(lock);
    return job.result;
  }

 private:
  struct Job {
    std::vector<std::string> argv;
    Result<Spawned> result = Status::Internal("not run");
    bool done = false;
  };
  void Run() {
    MutexLock lock(&mu_);
    for (;;) {
      while (!stop_ && jobs_.empty()) cv_.Wait(lock);
      if (stop_) return;
      Job* job = jobs_.front();
      jobs_.pop_front();
      job->result = router::Spawn(job->argv, getpid());
      job->done = true;
      cv_.notify_all();
    }
  }
  Mutex mu_;
  CondVar cv_;
  std::deque<Job*> jobs_ PREFIXD_GUARDED_BY(mu_);
  bool stop_ PREFIXD_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

uint64_t ReadRss(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::strtoull(line.c_str() + 6, nullptr, 10) * 1024;
  }
  return 0;
}

std::string ExitStatusText(int status) {
  if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return std::string("killed by signal ") + strsignal(WTERMSIG(status));
  return "ended";
}

// A running model server: its pid, the thread that reads its log (forwarding each line to our
// stderr as `prefixd[<id>] ...` and finding the port in its `listening` line), and its end.
class ChildProcess : public ModelProcess {
 public:
  ChildProcess(std::string id, Spawned s, std::chrono::seconds grace)
      : id_(std::move(id)), pid_(s.pid), log_fd_(s.log_fd), grace_(grace),
        reader_([this] { ReadLog(); }) {}

  ~ChildProcess() override {
    Stop();
    reader_.join();
    close(log_fd_);
  }

  // Waits for the listening line; false when the process ended or `deadline` passed.
  bool WaitListening(Clock::time_point deadline) {
    MutexLock lock(&mu_);
    while (port_ == 0 && !log_ended_) {
      if (!cv_.WaitUntil(lock, deadline)) break;
    }
    return port_ != 0;
  }

  int port() const override {
    MutexLock lock(&mu_);
    return port_;
  }

  bool Alive() override {
    MutexLock lock(&mu_);
    return ReapLocked(WNOHANG);
  }

  uint64_t MemoryBytes() override { return Alive() ? ReadRss(pid_) : 0; }

  int64_t n_ctx() const override {
    MutexLock lock(&mu_);
    return n_ctx_;
  }

  std::string ExitText() override {
    MutexLock lock(&mu_);
    std::string text = exit_text_.empty() ? "still running" : exit_text_;
    if (!tail_.empty()) text += "; its last log lines: " + Tail();
    return text;
  }

 private:
  // True while running; reaps the process when it has ended. REQUIRES: mu_.
  bool ReapLocked(int flags) PREFIXD_REQUIRES(mu_) {
    if (!exit_text_.empty()) return false;
    int status = 0;
    const pid_t r = waitpid(pid_, &status, flags);
    if (r == 0) return true;
    exit_text_ = r == pid_ ? ExitStatusText(status) : "lost";
    return false;
  }

  void Stop() {
    MutexLock lock(&mu_);
    if (!ReapLocked(WNOHANG)) return;
    kill(pid_, SIGTERM);
    const Clock::time_point kill_at = Clock::now() + grace_;
    // A swap waits for this exit: poll finely first (a small model's server exits in
    // milliseconds), then less often.
    std::chrono::microseconds pause(500);
    while (ReapLocked(WNOHANG)) {
      if (Clock::now() >= kill_at) {
        kill(pid_, SIGKILL);
        ReapLocked(0);
        break;
      }
      lock.Unlock();
      std::this_thread::sleep_for(pause);
      pause = std::min<std::chrono::microseconds>(pause * 2, std::chrono::milliseconds(20));
      lock.Lock();
    }
  }

  std::string Tail() const PREFIXD_REQUIRES(mu_) {
    std::string out;
    for (const std::string& l : tail_) out += (out.empty() ? "" : " | ") + l;
    return out;
  }

  void OnLine(const std::string& line) {
    const std::string shown =
        line.rfind("prefixd ", 0) == 0 ? "prefixd[" + id_ + "] " + line.substr(8)
                                       : "prefixd[" + id_ + "] " + line;
    std::fprintf(stderr, "%s\n", shown.c_str());
    static const std::regex kListening("^prefixd listening .*port=([0-9]+)");
    static const std::regex kContext(" ctx=([0-9]+)");
    std::smatch m;
    MutexLock lock(&mu_);
    if (port_ == 0 && std::regex_search(line, m, kListening)) {
      if (std::smatch c; std::regex_search(line, c, kContext)) {
        n_ctx_ = std::strtoll(c[1].str().c_str(), nullptr, 10);
      }
      port_ = std::atoi(m[1].str().c_str());
      cv_.notify_all();
    }
    tail_.push_back(line.substr(0, 400));
    if (tail_.size() > 4) tail_.pop_front();
  }

  void ReadLog() {
    std::string pending;
    char buf[4096];
    for (;;) {
      const ssize_t n = read(log_fd_, buf, sizeof buf);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      pending.append(buf, size_t(n));
      for (size_t nl; (nl = pending.find('\n')) != std::string::npos;) {
        OnLine(pending.substr(0, nl));
        pending.erase(0, nl + 1);
      }
    }
    if (!pending.empty()) OnLine(pending);
    MutexLock lock(&mu_);
    log_ended_ = true;
    cv_.notify_all();
  }

  const std::string id_;
  const pid_t pid_;
  const int log_fd_;
  const std::chrono::seconds grace_;
  mutable Mutex mu_;
  CondVar cv_;
  int port_ PREFIXD_GUARDED_BY(mu_) = 0;
  int64_t n_ctx_ PREFIXD_GUARDED_BY(mu_) = 0;  // from the listening line, beside the port
  bool log_ended_ PREFIXD_GUARDED_BY(mu_) = false;
  std::string exit_text_ PREFIXD_GUARDED_BY(mu_);
  std::deque<std::string> tail_ PREFIXD_GUARDED_BY(mu_);
  std::thread reader_;  // last: started once the rest is set up
};

class ChildLauncher : public ModelLauncher {
 public:
  explicit ChildLauncher(ChildLauncherOptions options) : options_(std::move(options)) {
    if (options_.exe.empty()) {
      char buf[4096];
      const ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
      options_.exe = n > 0 ? std::string(buf, size_t(n)) : "prefixd";
    }
  }

  Result<std::unique_ptr<ModelProcess>> Launch(const ModelSpec& spec) override {
    std::vector<std::string> argv = {options_.exe};
    for (std::string& a : ChildArgs(options_, spec)) argv.push_back(std::move(a));
    PREFIXD_ASSIGN_OR_RETURN(Spawned s, forks_.Spawn(argv));
    auto child = std::make_unique<ChildProcess>(spec.id, s, options_.stop_grace);
    if (!child->WaitListening(Clock::now() + options_.start_timeout)) {
      // Its log ends a moment before it can be reaped.
      for (int i = 0; i < 100 && child->Alive(); ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
      const std::string why = child->Alive() ? "it did not listen within " +
                                                   std::to_string(options_.start_timeout.count()) +
                                                   " s"
                                             : "its server " + child->ExitText();
      child.reset();  // stops it, if it still runs
      return Status::Internal("model " + spec.id + " failed to load: " + why);
    }
    return std::unique_ptr<ModelProcess>(std::move(child));
  }

 private:
  ChildLauncherOptions options_;
  ForkThread forks_;
};

}  // namespace

std::vector<std::string> ChildArgs(const ChildLauncherOptions& options, const ModelSpec& spec) {
  std::vector<std::string> args = {"serve", "-m", spec.path};
  if (!spec.mmproj.empty()) args.insert(args.end(), {"--mmproj", spec.mmproj});
  for (const std::string& a : options.common_args) args.push_back(a);
  for (const std::string& a : spec.args) args.push_back(a);
  // Last, so that nothing above can rename the model, move its server off loopback or share a
  // cache dir (a later flag wins).
  std::string names = spec.id;
  for (const std::string& a : spec.aliases) names += "," + a;
  args.insert(args.end(), {"--alias", names, "--host", "127.0.0.1", "--port", "0"});
  if (!options.cache_root.empty()) {
    args.insert(args.end(), {"--cache-dir", options.cache_root + "/models/" + spec.id});
  }
  return args;
}

std::unique_ptr<ModelLauncher> NewChildLauncher(ChildLauncherOptions options) {
  return std::make_unique<ChildLauncher>(std::move(options));
}

}  // namespace prefixd::router
