// File: ptx_rewriter/nvjitlink.cc
#include "ptx_rewriter/nvjitlink.h"

#include <cctype>

#include <dlfcn.h>
#include <nvJitLink.h>
#include <sys/stat.h>

#include <cstdlib>
#include <type_traits>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/match.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "support/cuda_status.h"
#include "support/status_macros.h"

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
  if (const char* home = std::getenv("CUDA_HOME"); home != nullptr && *home != '\0') {
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
  std::vector<std::string> dirs;
  if (const char* lp = std::getenv("LD_LIBRARY_PATH"); lp != nullptr) {
    for (std::string_view d : absl::StrSplit(lp, ':', absl::SkipEmpty())) dirs.emplace_back(d);
  }
  if (const char* home = std::getenv("CUDA_HOME"); home != nullptr && *home != '\0') {
    dirs.push_back(absl::StrCat(home, "/lib64"));
  }
  dirs.push_back("/usr/local/cuda/lib64");
  for (const std::string& d : dirs) {
    if (std::string fp = FileFingerprint(absl::StrCat(d, "/", kSoname)); !fp.empty()) return fp;
  }
  CUPROBE_ASSIGN_OR_RETURN(NvJitLinkLibrary lib, LoadNvJitLink());
  if (std::string fp = FileFingerprint(lib.path); !fp.empty()) return fp;
  return absl::StrCat(lib.path, ":", lib.major, ".", lib.minor);
}

absl::StatusOr<CompiledCubin> CompilePtx(std::string_view ptx, const CompileOptions& options) {
  const absl::StatusOr<Api>& loaded = GetApi();
  if (!loaded.ok()) return loaded.status();
  const Api& api = *loaded;

  // Arch-specific PTX (.target sm_90a, as Triton writes for Hopper) only
  // compiles for the arch-specific target of the same SM.
  std::string arch = absl::StrCat("sm_", options.sm);
  {
    std::string_view head = ptx.substr(0, 8192);
    size_t t = head.find(".target");
    if (t != std::string_view::npos) {
      std::string_view rest = head.substr(t);
      rest = rest.substr(0, rest.find('\n'));
      const std::string specific = absl::StrCat(arch, "a");
      size_t at = rest.find(specific);
      if (at != std::string_view::npos &&
          (at + specific.size() == rest.size() ||
           !std::isalnum(static_cast<unsigned char>(rest[at + specific.size()])))) {
        arch = specific;
      }
    }
  }
  std::vector<std::string> opts = {absl::StrCat("-arch=", arch)};
  if (options.verbose) opts.push_back("-verbose");
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
    return absl::Status(s.code(), log.empty() ? std::string(s.message())
                                              : absl::StrCat(s.message(), ":\n", log));
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
  // info    : Function properties for '_Z7add_onePfi':
  // info    : used 8 registers, used 0 barriers, 0 stack, 0 bytes smem, 540 bytes cmem[0], 0 bytes lmem
  std::vector<FunctionResources> out;
  FunctionResources* current = nullptr;
  for (std::string_view line : absl::StrSplit(info_log, '\n')) {
    if (!absl::ConsumePrefix(&line, "info    : ")) continue;
    if (absl::ConsumePrefix(&line, "Function properties for '")) {
      const size_t q = line.rfind('\'');
      if (q == std::string_view::npos) continue;
      out.push_back(FunctionResources{std::string(line.substr(0, q))});
      current = &out.back();
      continue;
    }
    if (current == nullptr || !absl::StartsWith(line, "used ")) continue;
    for (std::string_view part : absl::StrSplit(line, ", ")) {
      std::vector<std::string_view> words = absl::StrSplit(part, ' ', absl::SkipEmpty());
      auto num = [&](size_t i, auto* v) {
        if (i < words.size()) (void)absl::SimpleAtoi(words[i], v);
      };
      if (words.size() >= 3 && words[0] == "used" && words[2] == "registers") num(1, &current->registers);
      if (words.size() >= 3 && words[0] == "used" && words[2] == "barriers") num(1, &current->barriers);
      if (words.size() == 2 && words[1] == "stack") num(0, &current->stack_bytes);
      if (words.size() == 3 && words[2] == "smem") num(0, &current->shared_bytes);
      if (words.size() == 3 && words[2] == "lmem") num(0, &current->local_bytes);
    }
    current = nullptr;
  }
  return out;
}

}  // namespace cuprobe
