// File: ptx_rewriter/nvjitlink.cc
#include "ptx_rewriter/nvjitlink.h"
#include "ptx_rewriter/settings.h"

#include <cctype>

#include <dlfcn.h>
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>
#include <nvJitLink.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <type_traits>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/match.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "support/cuda_status.h"
#include "support/status_macros.h"

extern char** environ;

namespace cuprobe {
namespace {

// The entry points nvJitLink 13 exports. nvJitLink.h maps nvJitLinkCreate
// etc. to these versioned symbols with static inline wrappers, which would
// need link-time resolution; we look the versioned names up ourselves.
struct Api {
  decltype(&__nvJitLinkCreate_13_0) create = nullptr;
  decltype(&__nvJitLinkDestroy_13_0) destroy = nullptr;
  decltype(&__nvJitLinkAddData_13_0) add_data = nullptr;
  decltype(&__nvJitLinkComplete_13_0) complete = nullptr;
  decltype(&__nvJitLinkGetLinkedCubinSize_13_0) cubin_size = nullptr;
  decltype(&__nvJitLinkGetLinkedCubin_13_0) cubin = nullptr;
  decltype(&__nvJitLinkGetErrorLogSize_13_0) error_log_size = nullptr;
  decltype(&__nvJitLinkGetErrorLog_13_0) error_log = nullptr;
  decltype(&__nvJitLinkGetInfoLogSize_13_0) info_log_size = nullptr;
  decltype(&__nvJitLinkGetInfoLog_13_0) info_log = nullptr;
  decltype(&nvJitLinkVersion) version = nullptr;
  NvJitLinkLibrary library;
};

absl::StatusOr<Api> Load() {
  std::vector<std::string> candidates = {"libnvJitLink.so.13"};
  if (const std::string& home = CurrentRewriterSettings().cuda_home; !home.empty()) {
    candidates.push_back(absl::StrCat(home, "/lib64/libnvJitLink.so.13"));
  }
  candidates.push_back("/usr/local/cuda/lib64/libnvJitLink.so.13");
  void* handle = nullptr;
  std::string errors;
  for (const std::string& c : candidates) {
    // RTLD_LOCAL: nvJitLink's symbols must not interpose on the application's.
    handle = dlopen(c.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle != nullptr) break;
    const char* e = dlerror();
    absl::StrAppend(&errors, "\n  ", c, ": ", e != nullptr ? e : "not found");
  }
  if (handle == nullptr) {
    return absl::UnavailableError(absl::StrCat(
        "cannot load nvJitLink (needed to compile instrumented PTX); tried:", errors,
        "\n  hint: install the CUDA 13 toolkit or set CUDA_HOME"));
  }
  Api api;
  bool ok = true;
  std::string missing;
  auto sym = [&](auto* fn, const char* name) {
    *fn = reinterpret_cast<std::remove_pointer_t<decltype(fn)>>(dlsym(handle, name));
    if (*fn == nullptr) {
      ok = false;
      absl::StrAppend(&missing, " ", name);
    }
  };
  sym(&api.create, "__nvJitLinkCreate_13_0");
  sym(&api.destroy, "__nvJitLinkDestroy_13_0");
  sym(&api.add_data, "__nvJitLinkAddData_13_0");
  sym(&api.complete, "__nvJitLinkComplete_13_0");
  sym(&api.cubin_size, "__nvJitLinkGetLinkedCubinSize_13_0");
  sym(&api.cubin, "__nvJitLinkGetLinkedCubin_13_0");
  sym(&api.error_log_size, "__nvJitLinkGetErrorLogSize_13_0");
  sym(&api.error_log, "__nvJitLinkGetErrorLog_13_0");
  sym(&api.info_log_size, "__nvJitLinkGetInfoLogSize_13_0");
  sym(&api.info_log, "__nvJitLinkGetInfoLog_13_0");
  sym(&api.version, "nvJitLinkVersion");
  if (!ok) {
    return absl::UnavailableError(
        absl::StrCat("the loaded nvJitLink lacks the CUDA 13 entry points:", missing));
  }
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(api.create), &info) != 0 && info.dli_fname != nullptr) {
    api.library.path = info.dli_fname;
    struct stat st {};
    if (stat(info.dli_fname, &st) == 0) {
      api.library.fingerprint =
          absl::StrCat(static_cast<uint64_t>(st.st_size), ":", static_cast<int64_t>(st.st_mtime));
    }
  }
  unsigned major = 0, minor = 0;
  if (api.version(&major, &minor) == NVJITLINK_SUCCESS) {
    api.library.major = major;
    api.library.minor = minor;
  }
  return api;
}

const absl::StatusOr<Api>& GetApi() {
  // Leaked on purpose: the hook may compile during process exit.
  static const absl::StatusOr<Api>* api = new absl::StatusOr<Api>(Load());
  return *api;
}

std::string Log(const Api& api, nvJitLinkHandle h, bool error) {
  size_t size = 0;
  if ((error ? api.error_log_size(h, &size) : api.info_log_size(h, &size)) != NVJITLINK_SUCCESS ||
      size == 0) {
    return "";
  }
  std::string log(size, '\0');
  if ((error ? api.error_log(h, log.data()) : api.info_log(h, log.data())) != NVJITLINK_SUCCESS) {
    return "";
  }
  while (!log.empty() && (log.back() == '\0' || log.back() == '\n')) log.pop_back();
  return log;
}

}  // namespace

absl::StatusOr<NvJitLinkLibrary> LoadNvJitLink() {
  const absl::StatusOr<Api>& api = GetApi();
  if (!api.ok()) return api.status();
  return api->library;
}

namespace {

// "realpath:size:mtime" of a library file; empty when it cannot be read.
// realpath, so that the name the loader reports after loading
// (/usr/local/cuda/lib64/...) and the one found by searching before loading
// (/usr/local/cuda-13.0/targets/...) give the same fingerprint.
std::string FileFingerprint(const std::string& path) {
  char* resolved = realpath(path.c_str(), nullptr);
  if (resolved == nullptr) return "";
  const std::string real(resolved);
  std::free(resolved);
  struct stat st {};
  if (stat(real.c_str(), &st) != 0) return "";
  return absl::StrCat(real, ":", static_cast<uint64_t>(st.st_size), ":",
                      static_cast<int64_t>(st.st_mtime));
}

}  // namespace

absl::StatusOr<std::string> NvJitLinkFingerprint() {
  static constexpr char kSoname[] = "libnvJitLink.so.13";
  // Already loaded (by us or by the application): ask the loader where from.
  if (void* h = dlopen(kSoname, RTLD_NOW | RTLD_NOLOAD); h != nullptr) {
    void* sym = dlsym(h, "nvJitLinkVersion");
    Dl_info info{};
    std::string path;
    if (sym != nullptr && dladdr(sym, &info) != 0 && info.dli_fname != nullptr) {
      path = info.dli_fname;
    }
    dlclose(h);
    if (std::string fp = FileFingerprint(path); !fp.empty()) return fp;
  }
  const RewriterSettings& settings = CurrentRewriterSettings();
  std::vector<std::string> dirs = settings.library_path;
  if (!settings.cuda_home.empty()) dirs.push_back(absl::StrCat(settings.cuda_home, "/lib64"));
  dirs.push_back("/usr/local/cuda/lib64");
  for (const std::string& d : dirs) {
    if (std::string fp = FileFingerprint(absl::StrCat(d, "/", kSoname)); !fp.empty()) return fp;
  }
  CUPROBE_ASSIGN_OR_RETURN(NvJitLinkLibrary lib, LoadNvJitLink());
  if (std::string fp = FileFingerprint(lib.path); !fp.empty()) return fp;
  return absl::StrCat(lib.path, ":", lib.major, ".", lib.minor);
}

namespace {

// The toolkit's ptxas, if there is one: $CUDA_HOME/bin, /usr/local/cuda/bin.
std::string FindPtxas() {
  std::vector<std::string> dirs;
  if (const std::string& h = CurrentRewriterSettings().cuda_home; !h.empty()) {
    dirs.push_back(absl::StrCat(h, "/bin"));
  }
  dirs.push_back("/usr/local/cuda/bin");
  for (const std::string& d : dirs) {
    std::string path = absl::StrCat(d, "/ptxas");
    if (::access(path.c_str(), X_OK) == 0) return path;
  }
  return "";
}

// ptxas, unless CUPROBE_PTX_COMPILER=nvjitlink asks for nvJitLink; for a
// tools patch, ptxas whenever there is one (nvJitLink cannot build one).
// Both are decided at the first call, with the settings then in force.
const std::string& PtxasPath(bool tools_patch = false) {
  static const std::string* found = new std::string(FindPtxas());
  static const std::string* chosen =
      new std::string(CurrentRewriterSettings().use_ptxas ? *found : std::string());
  return tools_patch ? *found : *chosen;
}

absl::StatusOr<std::string> ReadSmallFile(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  std::string out;
  char buf[65536];
  ssize_t n;
  while ((n = ::read(fd, buf, sizeof(buf))) > 0) out.append(buf, static_cast<size_t>(n));
  ::close(fd);
  return out;
}

// Whole-program compilation with the toolkit's ptxas, in a child process.
// nvJitLink compiles every module as relocatable code: unchanged kernels
// come out different from nvcc's (on the tiled matmul, 17% more code and
// 25% slower) and probes cannot be inlined. ptxas gives unchanged kernels
// the same machine code as nvcc and inlines small probes (an empty probe
// then costs no register at all).
absl::StatusOr<CompiledCubin> CompileWithPtxas(const std::string& ptxas, std::string_view ptx,
                                               const std::string& arch,
                                               const CompileOptions& options) {
  std::string tmpl = absl::StrCat(CurrentRewriterSettings().tmp_dir, "/cuprobe-ptxas-XXXXXX");
  if (::mkdtemp(tmpl.data()) == nullptr) {
    return absl::UnavailableError(absl::StrCat("mkdtemp ", tmpl, ": ", std::strerror(errno)));
  }
  const std::string dir = tmpl;
  const std::string in = dir + "/in.ptx", out = dir + "/out.cubin", log = dir + "/log";
  struct Cleanup {
    std::string dir, in, out, log;
    ~Cleanup() {
      ::unlink(in.c_str());
      ::unlink(out.c_str());
      ::unlink(log.c_str());
      ::rmdir(dir.c_str());
    }
  } cleanup{dir, in, out, log};
  {
    int fd = ::open(in.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0600);
    if (fd < 0) return absl::UnavailableError(absl::StrCat("cannot create ", in));
    size_t done = 0;
    while (done < ptx.size()) {
      ssize_t n = ::write(fd, ptx.data() + done, ptx.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        ::close(fd);
        return absl::UnavailableError(absl::StrCat("cannot write ", in, ": ", std::strerror(errno)));
      }
      done += static_cast<size_t>(n);
    }
    ::close(fd);
  }
  std::vector<std::string> args = {ptxas, absl::StrCat("-arch=", arch), "-o", out};
  if (options.verbose) args.push_back("-v");
  if (options.tools_patch) args.push_back("--compile-as-tools-patch");
  args.push_back(in);
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_CREAT | O_WRONLY | O_TRUNC, 0600);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  pid_t pid = -1;
  int rc = ::posix_spawn(&pid, ptxas.c_str(), &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) {
    return absl::UnavailableError(absl::StrCat("cannot run ", ptxas, ": ", std::strerror(rc)));
  }
  int status = 0;
  pid_t w;
  while ((w = ::waitpid(pid, &status, 0)) < 0 && errno == EINTR) {
  }
  // A program that ignores SIGCHLD reaps children itself (ECHILD): judge by
  // the output then.
  const bool exited_ok = w == pid ? WIFEXITED(status) && WEXITSTATUS(status) == 0 : true;
  std::string log_text = ReadSmallFile(log).value_or("");
  absl::StatusOr<std::string> cubin = ReadSmallFile(out);
  if (!exited_ok || !cubin.ok() || cubin->empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ptxas failed on ", options.input_name, ":\n", log_text.empty() ? "(no output)" : log_text));
  }
  CompiledCubin result;
  result.cubin.assign(cubin->begin(), cubin->end());
  result.info_log = std::move(log_text);
  return result;
}

}  // namespace

std::string PtxCompilerName(bool tools_patch) {
  const std::string& ptxas = PtxasPath(tools_patch);
  return ptxas.empty() ? std::string("nvJitLink") : absl::StrCat("ptxas (", ptxas, ")");
}

absl::StatusOr<std::string> PtxCompilerFingerprint(bool tools_patch) {
  if (const std::string& ptxas = PtxasPath(tools_patch); !ptxas.empty()) {
    std::string fp = FileFingerprint(ptxas);
    return absl::StrCat("ptxas:", fp.empty() ? ptxas : fp);
  }
  return NvJitLinkFingerprint();
}

// -arch for `ptx` on SM `sm`: arch-specific PTX (.target sm_90a, as Triton
// writes for Hopper) only compiles for the arch-specific target.
std::string ArchFor(std::string_view ptx, uint32_t sm) {
  std::string arch = absl::StrCat("sm_", sm);
  std::string_view head = ptx.substr(0, 8192);
  size_t t = head.find(".target");
  if (t == std::string_view::npos) return arch;
  std::string_view rest = head.substr(t);
  rest = rest.substr(0, rest.find('\n'));
  const std::string specific = absl::StrCat(arch, "a");
  size_t at = rest.find(specific);
  if (at != std::string_view::npos &&
      (at + specific.size() == rest.size() ||
       !std::isalnum(static_cast<unsigned char>(rest[at + specific.size()])))) {
    return specific;
  }
  return arch;
}

absl::StatusOr<CompiledCubin> CompilePtx(std::string_view ptx, const CompileOptions& options) {
  if (const std::string& ptxas = PtxasPath(options.tools_patch); !ptxas.empty()) {
    return CompileWithPtxas(ptxas, ptx, ArchFor(ptx, options.sm), options);
  }
  return CompilePtxWithNvJitLink(ptx, options);
}

absl::StatusOr<CompiledCubin> CompilePtxWithNvJitLink(std::string_view ptx,
                                                      const CompileOptions& options) {
  const absl::StatusOr<Api>& loaded = GetApi();
  if (!loaded.ok()) return loaded.status();
  const Api& api = *loaded;

  const std::string arch = ArchFor(ptx, options.sm);
  std::vector<std::string> opts = {absl::StrCat("-arch=", arch)};
  if (options.verbose) opts.push_back("-verbose");
  if (options.tools_patch) opts.push_back("-Xptxas=--compile-as-tools-patch");
  opts.insert(opts.end(), options.extra.begin(), options.extra.end());
  std::vector<const char*> argv;
  for (const std::string& o : opts) argv.push_back(o.c_str());

  nvJitLinkHandle h = nullptr;
  CUPROBE_RETURN_IF_ERROR(NvJitLinkResultToStatus(
      api.create(&h, static_cast<uint32_t>(argv.size()), argv.data()),
      absl::StrCat("nvJitLinkCreate(", absl::StrJoin(opts, " "), ")")));
  struct Destroy {
    const Api& api;
    nvJitLinkHandle* h;
    ~Destroy() { api.destroy(h); }
  } destroy{api, &h};

  auto fail = [&](nvJitLinkResult r, std::string_view call) {
    absl::Status s = NvJitLinkResultToStatus(r, call);
    const std::string log = Log(api, h, true);
    std::string message = log.empty() ? std::string(s.message())
                                      : absl::StrCat(s.message(), ":\n", log);
    if (options.tools_patch) {
      absl::StrAppend(&message,
                      "\n  hint: nvJitLink cannot compile a tools patch module (it compiles "
                      "PTX with --compile-only); install the toolkit's ptxas");
    }
    return absl::Status(s.code(), message);
  };
  // nvJitLink wants the PTX NUL-terminated.
  std::string input(ptx);
  if (nvJitLinkResult r = api.add_data(h, NVJITLINK_INPUT_PTX, input.c_str(), input.size() + 1,
                                       options.input_name.c_str());
      r != NVJITLINK_SUCCESS) {
    return fail(r, absl::StrCat("nvJitLinkAddData(", options.input_name, ")"));
  }
  if (nvJitLinkResult r = api.complete(h); r != NVJITLINK_SUCCESS) {
    return fail(r, "nvJitLinkComplete");
  }
  size_t size = 0;
  if (nvJitLinkResult r = api.cubin_size(h, &size); r != NVJITLINK_SUCCESS) {
    return fail(r, "nvJitLinkGetLinkedCubinSize");
  }
  CompiledCubin out;
  out.cubin.resize(size);
  if (nvJitLinkResult r = api.cubin(h, out.cubin.data()); r != NVJITLINK_SUCCESS) {
    return fail(r, "nvJitLinkGetLinkedCubin");
  }
  out.info_log = Log(api, h, false);
  return out;
}

std::vector<FunctionResources> ParseResourceUsage(std::string_view info_log) {
  // nvJitLink:
  //   info    : Function properties for '_Z7add_onePfi':
  //   info    : used 8 registers, used 0 barriers, 0 stack, 0 bytes smem, 540 bytes cmem[0], 0 bytes lmem
  // ptxas -v:
  //   ptxas info    : Function properties for _Z7add_onePfi
  //       16 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
  //   ptxas info    : Used 8 registers, used 0 barriers, 2048 bytes smem, 540 bytes cmem[0]
  std::vector<FunctionResources> out;
  FunctionResources* current = nullptr;
  // nvJitLink's verbose log also carries ptxas' own lines: read one format.
  const bool nvjitlink_format =
      absl::StrContains(info_log, "info    : Function properties for '");
  for (std::string_view line : absl::StrSplit(info_log, '\n')) {
    const bool ptxas = absl::ConsumePrefix(&line, "ptxas info    : ");
    if (ptxas && nvjitlink_format) continue;
    if (!ptxas && nvjitlink_format && !absl::StartsWith(line, "info    : ")) continue;
    if (!ptxas && !absl::ConsumePrefix(&line, "info    : ")) {
      // ptxas' stack line has no prefix.
      std::string_view t = absl::StripAsciiWhitespace(line);
      uint64_t v = 0;
      if (current != nullptr && absl::EndsWith(t, "spill loads") &&
          absl::SimpleAtoi(t.substr(0, t.find(' ')), &v)) {
        current->stack_bytes = v;
        // "16 bytes stack frame, 8 bytes spill stores, 8 bytes spill loads"
        std::vector<std::string_view> parts = absl::StrSplit(t, ", ");
        if (parts.size() >= 2 && absl::SimpleAtoi(parts[1].substr(0, parts[1].find(' ')), &v)) {
          current->spill_bytes = v;
        }
      }
      continue;
    }
    if (absl::ConsumePrefix(&line, "Function properties for ")) {
      absl::ConsumePrefix(&line, "'");
      std::string_view name = line;
      if (size_t q = name.rfind('\''); q != std::string_view::npos) name = name.substr(0, q);
      name = absl::StripTrailingAsciiWhitespace(name);
      // nvJitLink's verbose log repeats ptxas' lines: one entry per name.
      current = nullptr;
      for (FunctionResources& f : out) {
        if (f.name == name) current = &f;
      }
      if (current == nullptr) {
        out.push_back(FunctionResources{std::string(name)});
        current = &out.back();
      }
      continue;
    }
    if (current == nullptr) continue;
    if (!absl::StartsWith(line, "used ") && !absl::StartsWith(line, "Used ")) continue;
    for (std::string_view part : absl::StrSplit(line, ", ")) {
      std::vector<std::string_view> words = absl::StrSplit(part, ' ', absl::SkipEmpty());
      auto num = [&](size_t i, auto* v) {
        if (i < words.size()) (void)absl::SimpleAtoi(words[i], v);
      };
      const bool used = !words.empty() && (words[0] == "used" || words[0] == "Used");
      if (words.size() >= 3 && used && words[2] == "registers") num(1, &current->registers);
      if (words.size() >= 3 && used && words[2] == "barriers") num(1, &current->barriers);
      if (words.size() == 2 && words[1] == "stack") num(0, &current->stack_bytes);
      if (words.size() == 3 && words[2] == "smem") num(0, &current->shared_bytes);
      if (words.size() == 3 && words[2] == "lmem") {
        num(0, &current->local_bytes);
        if (nvjitlink_format) current->spill_bytes = current->local_bytes;
      }
    }
    current = nullptr;
  }
  return out;
}

}  // namespace cuprobe
