#include "server/router_child.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace strata::server {
namespace {

// Lines kept for error messages, and the longest line kept whole: a child's last lines say why
// it failed; a runaway line must not grow the router's memory.
constexpr size_t kTailLines = 20;
constexpr size_t kMaxLineBytes = 4096;

std::vector<char*> c_strings(const std::vector<std::string>& v) {
  std::vector<char*> out;
  for (const std::string& s : v) out.push_back(const_cast<char*>(s.c_str()));
  out.push_back(nullptr);
  return out;
}

// In the forked child, before exec: async-signal-safe calls only (the router has threads).
[[noreturn]] void exec_child(pid_t parent, int null_fd, int out_w, int err_w, int max_fd,
                             const char* exe, char* const* argv, char* const* envp) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent) _exit(1);  // the router died before prctl took effect
  dup2(null_fd, STDIN_FILENO);
  dup2(out_w, STDOUT_FILENO);
  dup2(err_w, STDERR_FILENO);
  // The router blocks SIGINT/SIGTERM for its signal thread and ignores SIGPIPE; both would be
  // inherited through exec.
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  ::signal(SIGPIPE, SIG_DFL);
  // The router's listening socket and client connections must not live on in the child.
  if (syscall(SYS_close_range, 3u, ~0u, 0u) != 0) {
    for (int fd = 3; fd < max_fd; ++fd) close(fd);
  }
  execve(exe, argv, envp);
  const char msg[] = "strata router: cannot execute the child binary\n";
  [[maybe_unused]] ssize_t n = write(STDERR_FILENO, msg, sizeof(msg) - 1);
  _exit(127);
}

Result<SpawnedProcess> fork_exec(const std::string& exe, const std::vector<std::string>& argv,
                                 const std::vector<std::string>& env) {
  std::vector<std::string> all = {exe};
  all.insert(all.end(), argv.begin(), argv.end());
  std::vector<char*> c_argv = c_strings(all);
  std::vector<char*> c_env = c_strings(env);
  int out[2], err[2];
  if (pipe2(out, O_CLOEXEC) != 0) return io_error(std::string("pipe: ") + std::strerror(errno));
  if (pipe2(err, O_CLOEXEC) != 0) {
    close(out[0]);
    close(out[1]);
    return io_error(std::string("pipe: ") + std::strerror(errno));
  }
  const int null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
  rlimit lim{};
  const int max_fd = getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur < 65536
                         ? static_cast<int>(lim.rlim_cur)
                         : 65536;
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid == 0) {
    exec_child(parent, null_fd, out[1], err[1], max_fd, exe.c_str(), c_argv.data(), c_env.data());
  }
  const int fork_errno = errno;
  close(out[1]);
  close(err[1]);
  if (null_fd >= 0) close(null_fd);
  if (pid < 0) {
    close(out[0]);
    close(err[0]);
    return io_error(std::string("fork: ") + std::strerror(fork_errno));
  }
  return SpawnedProcess{pid, out[0], err[0]};
}

std::string describe_exit(int status, int* code) {
  if (WIFEXITED(status)) {
    *code = WEXITSTATUS(status);
    return "exit code " + std::to_string(*code);
  }
  if (WIFSIGNALED(status)) {
    *code = 128 + WTERMSIG(status);
    return "killed by signal " + std::to_string(WTERMSIG(status));
  }
  *code = -1;
  return "stopped";
}

}  // namespace

Spawner::Spawner() : thread_([this] { run(); }) {}

Spawner::~Spawner() {
  queue_.lock()->quit = true;
  queue_.notify_all();
  thread_.join();
}

void Spawner::run() {
  for (;;) {
    Job* job = nullptr;
    {
      auto q = queue_.lock();
      q.wait([](const Queue& s) { return s.quit || !s.jobs.empty(); });
      if (q->jobs.empty()) return;
      job = q->jobs.front();
      q->jobs.pop_front();
    }
    job->done.set_value(fork_exec(*job->exe, *job->argv, *job->env));
  }
}

Result<SpawnedProcess> Spawner::spawn(const std::string& exe, const std::vector<std::string>& argv,
                                      const std::vector<std::string>& env) {
  Job job{&exe, &argv, &env, {}};
  std::future<Result<SpawnedProcess>> result = job.done.get_future();
  {
    auto q = queue_.lock();
    if (q->quit) return unavailable("the router is stopping");
    q->jobs.push_back(&job);
  }
  queue_.notify_all();
  return result.get();
}

ChildServer::ChildServer(const ChildSpec& spec, SpawnedProcess p, Log* log, ExitFn on_exit)
    : name_(spec.name),
      pid_(p.pid),
      out_fd_(p.out_fd),
      err_fd_(p.err_fd),
      log_(log),
      on_exit_(std::move(on_exit)) {
  reader_ = std::thread([this] { read_output(); });
}

Result<std::unique_ptr<ChildServer>> ChildServer::start(Spawner& spawner, const ChildSpec& spec,
                                                        Log* log, ExitFn on_exit) {
  STRATA_ASSIGN_OR_RETURN(SpawnedProcess p, spawner.spawn(spec.exe, spec.argv, spec.env));
  std::unique_ptr<ChildServer> child(new ChildServer(spec, p, log, std::move(on_exit)));
  bool listening = false, exited = false;
  std::string how;
  {
    auto s = child->state_.lock();
    s.wait_for(spec.start_timeout, [](const State& st) { return st.port > 0 || st.exited; });
    listening = s->port > 0;
    exited = s->exited;
    how = s->how;
  }
  if (listening) return child;
  if (!exited) {
    child->signal(SIGKILL);
    child->wait_exited(std::chrono::seconds(10));
    how = "not listening after " + std::to_string(spec.start_timeout.count()) + " s";
  }
  return unavailable("model '" + spec.name + "' failed to start (" + how + "); its last output:\n" +
                     child->output_tail());
}

ChildServer::~ChildServer() {
  if (!exited()) {
    signal(SIGKILL);
  }
  if (reader_.joinable()) reader_.join();
}

int ChildServer::port() const { return state_.lock()->port; }

bool ChildServer::exited() const { return state_.lock()->exited; }

// Signals only a child not yet reaped: the reader marks `exited` before it reaps, under the
// same lock, so a pid is never signalled after it may have been reused.
void ChildServer::signal(int sig) {
  auto s = state_.lock();
  if (!s->exited) kill(pid_, sig);
}

void ChildServer::terminate() { signal(SIGTERM); }

bool ChildServer::wait_exited(std::chrono::milliseconds timeout) {
  auto s = state_.lock();
  return s.wait_for(timeout, [](const State& st) { return st.exited; });
}

void ChildServer::stop(std::chrono::seconds grace) {
  signal(SIGTERM);
  if (wait_exited(grace)) return;
  if (log_) {
    log_->write(LogLevel::kWarning, "router: model '" + name_ + "' did not stop within " +
                                        std::to_string(grace.count()) + " s; killing it");
  }
  signal(SIGKILL);
  wait_exited(std::chrono::seconds(30));
}

std::string ChildServer::output_tail() const {
  auto s = state_.lock();
  std::string out;
  for (const std::string& line : s->tail) out += "  " + line + "\n";
  if (out.empty()) out = "  (nothing)\n";
  return out;
}

void ChildServer::take_line(const std::string& line, bool from_stdout) {
  if (log_) log_->write(LogLevel::kInfo, "[" + name_ + "] " + line);
  auto s = state_.lock();
  s->tail.push_back(line);
  if (s->tail.size() > kTailLines) s->tail.pop_front();
  // `strata serve` prints its address on stdout once it listens.
  const size_t at = line.find("listening on ");
  const size_t host = line.find("127.0.0.1:", at == std::string::npos ? line.size() : at);
  if (from_stdout && s->port == 0 && host != std::string::npos) {
    s->port = std::atoi(line.c_str() + host + 10);
    state_.notify_all();
  }
}

void ChildServer::read_output() {
  std::string pending[2];
  bool open[2] = {true, true};
  const int fds[2] = {out_fd_, err_fd_};
  char buf[4096];
  while (open[0] || open[1]) {
    pollfd p[2];
    for (int i = 0; i < 2; ++i) p[i] = {open[i] ? fds[i] : -1, POLLIN, 0};
    if (poll(p, 2, -1) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    for (int i = 0; i < 2; ++i) {
      if (!open[i] || p[i].revents == 0) continue;
      const ssize_t n = read(fds[i], buf, sizeof(buf));
      if (n <= 0) {
        if (n < 0 && errno == EINTR) continue;
        open[i] = false;
        if (!pending[i].empty()) take_line(pending[i], i == 0);
        continue;
      }
      pending[i].append(buf, static_cast<size_t>(n));
      size_t nl;
      while ((nl = pending[i].find('\n')) != std::string::npos) {
        take_line(pending[i].substr(0, std::min(nl, kMaxLineBytes)), i == 0);
        pending[i].erase(0, nl + 1);
      }
      if (pending[i].size() > kMaxLineBytes) {
        take_line(pending[i].substr(0, kMaxLineBytes), i == 0);
        pending[i].clear();
      }
    }
  }
  close(out_fd_);
  close(err_fd_);
  // Wait without reaping, mark the child gone, then reap: signal() checks the mark under the
  // lock, and a zombie's pid cannot be reused.
  siginfo_t info{};
  while (waitid(P_PID, static_cast<id_t>(pid_), &info, WEXITED | WNOWAIT) != 0 && errno == EINTR) {
  }
  int status = 0;
  int code = 0;
  std::string how;
  {
    auto s = state_.lock();
    s->exited = true;
    while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
    how = describe_exit(status, &code);
    s->exit_code = code;
    s->how = how;
  }
  state_.notify_all();
  if (on_exit_) on_exit_(code, how);
}

}  // namespace strata::server
