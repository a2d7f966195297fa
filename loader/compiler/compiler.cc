#include "loader/compiler/compiler.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "llvm/IR/LLVMContext.h"
#include "llvm/IR/Module.h"
#include "loader/compiler/lower.h"
#include "loader/compiler/object.h"
#include "probe/map_desc.h"
#include "support/log.h"
#include "support/status_macros.h"

extern char** environ;

namespace cuprobe {
namespace {

using Clock = std::chrono::steady_clock;

double MsSince(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

uint64_t Fnv1a(absl::Span<const uint8_t> bytes) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (uint8_t b : bytes) {
    h ^= b;
    h *= 0x100000001b3ull;
  }
  return h;
}

// The bundle's source_hash of several inputs: Fnv1a of one input, else of
// their Fnv1a hashes in order.
template <typename Range>
uint64_t SourcesHash(const Range& inputs) {
  if (inputs.size() == 1) return Fnv1a(inputs[0]);
  std::vector<uint8_t> hashes;
  for (const auto& in : inputs) {
    const uint64_t h = Fnv1a(in);
    for (int k = 0; k < 8; ++k) hashes.push_back(static_cast<uint8_t>(h >> (8 * k)));
  }
  return Fnv1a(hashes);
}

absl::StatusOr<std::vector<uint8_t>> ReadWholeFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open ", path, ": ", std::strerror(errno)));
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// "dir/threadhist.bpf.c" -> "threadhist".
std::string Stem(std::string_view name) {
  name = name.substr(name.find_last_of('/') == std::string_view::npos ? 0 : name.find_last_of('/') + 1);
  return std::string(name.substr(0, name.find('.')));
}

std::string Basename(std::string_view path) {
  const size_t slash = path.rfind('/');
  return std::string(slash == std::string_view::npos ? path : path.substr(slash + 1));
}

TypeDescription PrintkRecordType() {
  TypeDescription t;
  t.name = "struct cuprobe_printk_record";
  t.size = 32;
  t.fields = {{"format_id", "u32", 0, 4}, {"nargs", "u32", 4, 4}, {"args", "u64[3]", 8, 24}};
  return t;
}

}  // namespace

std::string ClangPath(const ProbeCompileOptions& options) {
  return options.clang.empty() ? CUPROBE_CLANG : options.clang;
}

std::string ProbeIncludeDir(const ProbeCompileOptions& options) {
  return options.include_dir.empty() ? CUPROBE_INCLUDE_DIR : options.include_dir;
}

ProbeCompileOptions ProbeCompileOptions::FromEnvironment(const Lookup& env) {
  ProbeCompileOptions options;
  auto value = [&](const char* name) -> std::string {
    const char* v = env(name);
    return v != nullptr ? v : "";
  };
  options.clang = value("CUPROBE_CLANG");
  options.include_dir = value("CUPROBE_INCLUDE_DIR");
  options.ring.inline_reservations = value("CUPROBE_RING_INLINE") != "0";
  options.ring.commit = value("CUPROBE_DIAG_RING_COMMIT");
  options.ring.drop = value("CUPROBE_DIAG_RING_DROP");
  options.maps.uniform_adds = value("CUPROBE_UNIFORM_ADDS") != "0";
  return options;
}

std::string CompilerVersion() {
  return absl::StrCat("cuprobe ", CUPROBE_VERSION_STRING, " / LLVM ", LlvmVersion());
}

absl::StatusOr<std::vector<uint8_t>> CompileCToBpf(const std::string& source_path,
                                                    const ProbeCompileOptions& options,
                                                    double* clang_ms) {
  const auto start = Clock::now();
  std::error_code ec;
  if (!std::filesystem::is_regular_file(source_path, ec)) {
    return absl::NotFoundError(absl::StrCat("probe source ", source_path, " does not exist"));
  }
  char dir_template[] = "/tmp/cuprobe-compile-XXXXXX";
  if (mkdtemp(dir_template) == nullptr) {
    return absl::InternalError(absl::StrCat("mkdtemp: ", std::strerror(errno)));
  }
  const std::string dir = dir_template;
  const std::string object_path = dir + "/probe.o";
  const std::string log_path = dir + "/clang.log";
  std::string source_dir = std::filesystem::path(source_path).parent_path().string();
  if (source_dir.empty()) source_dir = ".";
  std::vector<std::string> args = {ClangPath(options), "-target", "bpf", "-mcpu=v3", "-O2", "-g",
                                   "-fno-color-diagnostics", "-Wall",
                                   "-Wno-unused-function", "-I" + ProbeIncludeDir(options),
                                   "-I" + source_dir};
  // <linux/bpf.h> needs <asm/types.h>, which Debian keeps under the
  // multiarch directory that -target bpf does not search.
  for (const char* multiarch : {"/usr/include/x86_64-linux-gnu", "/usr/include/aarch64-linux-gnu"}) {
    if (std::filesystem::is_directory(multiarch, ec)) {
      args.push_back("-idirafter");
      args.push_back(multiarch);
      break;
    }
  }
  for (const std::string& a : options.clang_args) args.push_back(a);
  // The caller found no ELF magic, so this is C whatever its name: without
  // -x, clang takes a file with no known extension for a linker input and
  // makes no object.
  args.insert(args.end(), {"-x", "c", "-c", source_path, "-o", object_path});
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, log_path.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  auto cleanup = [&] { std::filesystem::remove_all(dir, ec); };
  if (rc != 0) {
    cleanup();
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot run ", args[0], ": ", std::strerror(rc),
        " (install clang-19, or set CUPROBE_CLANG to a clang with the BPF target)"));
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  auto log = ReadWholeFile(log_path);
  const std::string diagnostics = log.ok() ? std::string(log->begin(), log->end()) : "";
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    cleanup();
    return absl::InvalidArgumentError(absl::StrCat(
        "clang could not compile ", source_path, ":\n", diagnostics,
        diagnostics.empty() ? "" : "", "  (command: ", absl::StrJoin(args, " "), ")"));
  }
  auto object = ReadWholeFile(object_path);
  cleanup();
  if (clang_ms != nullptr) *clang_ms = MsSince(start);
  return object;
}

namespace {

// Sets CUPROBE_MAP_F_ADD_ONLY on the bundle's maps that every program only
// adds to (map_add, hist_add), and clears it everywhere else (a probe does
// not get to declare it): their hot counters may then be spread over copies
// that the host folds (probe/map_desc.h). A call whose map differs between
// paths could be any map: then no map is add-only.
void MarkAddOnlyMaps(const BpfObject& object, absl::Span<const VerifiedProgram> verified,
                     absl::Span<const int32_t> map_slot, std::vector<MapSpec>* maps) {
  std::vector<int> adds(object.maps.size(), 0);
  std::vector<bool> other(object.maps.size(), false);
  bool mixed = false;
  for (size_t p = 0; p < object.programs.size() && p < verified.size(); ++p) {
    const std::vector<Insn>& insns = object.programs[p].insns;
    const std::vector<InsnInfo>& info = verified[p].insns;
    for (size_t pc = 0; pc < insns.size() && pc < info.size(); ++pc) {
      const int32_t map = info[pc].call_map;
      if (map == InsnInfo::kCallMapNone) continue;
      if (map < 0 || static_cast<size_t>(map) >= object.maps.size()) {
        mixed = true;
        continue;
      }
      const int32_t helper = insns[pc].imm;
      if (helper == CUPROBE_HELPER_MAP_ADD || helper == CUPROBE_HELPER_HIST_ADD) {
        ++adds[map];
      } else {
        other[map] = true;
      }
    }
  }
  for (size_t m = 0; m < object.maps.size(); ++m) {
    if (map_slot[m] < 0) continue;
    MapSpec& spec = (*maps)[static_cast<size_t>(map_slot[m])];
    spec.flags &= ~CUPROBE_MAP_F_ADD_ONLY;
    if (!mixed && adds[m] > 0 && !other[m] && !object.maps[m].global_data()) {
      spec.flags |= CUPROBE_MAP_F_ADD_ONLY;
    }
  }
}

// Whether r0 may be read after the helper call at `call` before it is
// written again (the probe's own return value is ignored by the ABI, so
// exit does not read it). Follows every path.
bool CallResultUsed(const std::vector<Insn>& insns, size_t call) {
  std::vector<bool> seen(insns.size(), false);
  std::vector<size_t> work = {call + 1};
  while (!work.empty()) {
    size_t pc = work.back();
    work.pop_back();
    if (pc >= insns.size()) return true;  // malformed: assume the worst
    if (seen[pc]) continue;
    seen[pc] = true;
    const Insn& i = insns[pc];
    const uint8_t cls = i.Class();
    if (cls == kClassAlu || cls == kClassAlu64) {
      const bool reads_dst = i.Op() != kAluMov;
      if ((reads_dst && i.dst == 0) || (i.UsesSrcReg() && i.src == 0)) return true;
      if (i.dst == 0) continue;  // r0 redefined
      work.push_back(pc + 1);
    } else if (cls == kClassLdx) {
      if (i.src == 0) return true;
      if (i.dst == 0) continue;
      work.push_back(pc + 1);
    } else if (cls == kClassSt || cls == kClassStx) {
      if (i.dst == 0 || (cls == kClassStx && i.src == 0)) return true;
      if (cls == kClassStx && i.Mode() == kModeAtomic) return true;  // may write r0
      work.push_back(pc + 1);
    } else if (cls == kClassLd) {
      if (i.code != kLdImm64) return true;
      if (i.dst == 0) continue;
      work.push_back(pc + 2);
    } else {  // jumps
      const uint8_t op = i.Op();
      if (op == kJmpExit) continue;
      if (op == kJmpCall) continue;  // r0 redefined (r1-r5 are the arguments)
      if (op == kJmpJa) {
        const int64_t off = cls == kClassJmp32 ? i.imm : i.off;
        work.push_back(static_cast<size_t>(static_cast<int64_t>(pc) + 1 + off));
        continue;
      }
      if (i.dst == 0 || (i.UsesSrcReg() && i.src == 0)) return true;
      work.push_back(pc + 1);
      work.push_back(static_cast<size_t>(static_cast<int64_t>(pc) + 1 + i.off));
    }
  }
  return false;
}

// Fills `pp`'s summary code when the program may reduce to adds of site
// constants (bundle.h, ProbeProgram::summary_code): it calls only map_add
// and hist_add, on add-only maps, ignores what they return (and cuprobe_clz,
// which the interpreter computes), reads no
// argument and no global data, and calls no function of its own. Whether it
// reads anything a site does not fix (thread ids, timers, the address) is
// found per site, by running it (ptx_rewriter/site_summary.h).
void AddSummaryCode(const BpfProgram& program, const VerifiedProgram& verified,
                    absl::Span<const int32_t> map_slot, absl::Span<const MapSpec> maps,
                    ProbeProgram* pp) {
  if (verified.reads_args || verified.helpers_used.empty()) return;
  for (int32_t h : verified.helpers_used) {
    if (h != CUPROBE_HELPER_MAP_ADD && h != CUPROBE_HELPER_HIST_ADD && h != CUPROBE_HELPER_CLZ) {
      return;
    }
  }
  std::vector<std::pair<uint32_t, uint32_t>> refs;
  for (const auto& [insn, ref] : program.map_refs) {
    if (ref.value || ref.map >= map_slot.size() || map_slot[ref.map] < 0) return;
    const uint32_t slot = static_cast<uint32_t>(map_slot[ref.map]);
    if ((maps[slot].flags & CUPROBE_MAP_F_ADD_ONLY) == 0) return;
    refs.emplace_back(insn, slot);
  }
  const std::vector<Insn>& insns = program.insns;
  for (size_t pc = 0; pc < insns.size(); ++pc) {
    const Insn& i = insns[pc];
    if ((i.Class() == kClassJmp || i.Class() == kClassJmp32) && i.Op() == kJmpCall) {
      // A bpf-to-bpf call, or a used result of an add (cuprobe_clz's is a
      // value like any other).
      if (i.src != 0 || (i.imm != CUPROBE_HELPER_CLZ && CallResultUsed(insns, pc))) return;
    }
    if (i.code == kLdImm64 && i.src != 0 && !program.map_refs.contains(static_cast<uint32_t>(pc))) {
      return;
    }
  }
  std::vector<uint8_t> code(insns.size() * 8);
  for (size_t k = 0; k < insns.size(); ++k) {
    const Insn& i = insns[k];
    uint8_t* b = &code[k * 8];
    b[0] = i.code;
    b[1] = static_cast<uint8_t>((i.src << 4) | (i.dst & 0x0f));
    const uint16_t off = static_cast<uint16_t>(i.off);
    b[2] = static_cast<uint8_t>(off);
    b[3] = static_cast<uint8_t>(off >> 8);
    const uint32_t imm = static_cast<uint32_t>(i.imm);
    for (int j = 0; j < 4; ++j) b[4 + j] = static_cast<uint8_t>(imm >> (8 * j));
  }
  pp->summary_code = std::move(code);
  pp->summary_maps = std::move(refs);
}

absl::StatusOr<std::vector<BpfObject>> ReadObjects(absl::Span<const ProbeObject> inputs) {
  std::vector<BpfObject> objects;
  objects.reserve(inputs.size());
  for (const ProbeObject& in : inputs) {
    CUPROBE_ASSIGN_OR_RETURN(BpfObject object, ReadBpfObject(in.bytes, in.name));
    objects.push_back(std::move(object));
  }
  return objects;
}

// A warning for each program an object leaves out (host programs): the
// bundle runs without them, and the user should know which.
void WarnSkipped(const std::vector<BpfObject>& objects, CompileResult* result) {
  for (const BpfObject& object : objects) {
    for (const SkippedProgram& p : object.skipped) {
      result->warnings.push_back(absl::StrCat(object.name, ": program '", p.name, "' (", p.section,
                                              ") is not attached: ", p.reason));
      CUPROBE_LOG(kWarning, "%s", result->warnings.back());
    }
  }
}

// Verifies every program of every object into result->verified (an empty
// entry for a rejected one), so that all rejections are reported at once.
absl::Status VerifyObjects(absl::Span<const ProbeObject> inputs,
                           const std::vector<BpfObject>& objects, const VerifierOptions& options,
                           CompileResult* result) {
  std::vector<std::string> errors;
  size_t total_programs = 0;
  for (size_t k = 0; k < objects.size(); ++k) {
    for (const BpfProgram& p : objects[k].programs) {
      ++total_programs;
      result->object_insns += p.insns.size();
      absl::StatusOr<VerifiedProgram> v = Verify(objects[k], p, options);
      if (!v.ok()) {
        errors.emplace_back(objects.size() > 1
                                ? absl::StrCat(inputs[k].name, ": ", v.status().message())
                                : std::string(v.status().message()));
        result->verified.emplace_back();
        continue;
      }
      result->verified.push_back(*std::move(v));
    }
  }
  if (!errors.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        absl::StrJoin(errors, "\n"), "\n", errors.size(), " of ", total_programs, " program",
        total_programs == 1 ? "" : "s", " rejected by the verifier"));
  }
  return absl::OkStatus();
}

// The bundle's compiler version, source names and source hash.
void NameBundle(absl::Span<const ProbeObject> inputs, ProbeBundle* b) {
  b->compiler_version = CompilerVersion();
  std::vector<absl::Span<const uint8_t>> object_bytes;
  for (const ProbeObject& in : inputs) {
    object_bytes.push_back(in.bytes);
    absl::StrAppend(&b->source_name, b->source_name.empty() ? "" : "+", in.name);
  }
  b->source_hash = SourcesHash(object_bytes);
}

// Map table: every map but .rodata (compiled into the PTX), object by
// object in object order (the implicit printk ring buffer comes after
// them, AddPrintkMap). A map named like one of an earlier object is renamed
// "<object>.<map>" so that readers can tell them apart. Returns each
// object's map slots (-1: .rodata).
std::vector<std::vector<int32_t>> AssignMapSlots(absl::Span<const ProbeObject> inputs,
                                                 const std::vector<BpfObject>& objects,
                                                 std::vector<MapSpec>* maps) {
  std::vector<std::vector<int32_t>> slots(objects.size());
  absl::flat_hash_set<std::string> names;
  for (size_t k = 0; k < objects.size(); ++k) {
    const BpfObject& object = objects[k];
    slots[k].assign(object.maps.size(), -1);
    for (uint32_t i = 0; i < object.maps.size(); ++i) {
      if (object.maps[i].read_only()) continue;
      slots[k][i] = static_cast<int32_t>(maps->size());
      MapSpec spec = object.maps[i].spec;
      if (!names.insert(spec.name).second) {
        spec.name = absl::StrCat(Stem(inputs[k].name), ".", spec.name);
        names.insert(spec.name);
      }
      maps->push_back(std::move(spec));
    }
  }
  return slots;
}

// The implicit printk RINGBUF when some program prints: its slot, else -1.
int32_t AddPrintkMap(const std::vector<VerifiedProgram>& verified,
                     const ProbeCompileOptions& options, std::vector<MapSpec>* maps) {
  bool prints = false;
  for (const VerifiedProgram& v : verified) prints |= !v.printk_formats.empty();
  if (!prints) return -1;
  MapSpec printk;
  printk.name = CUPROBE_PRINTK_MAP_NAME;
  printk.type = CUPROBE_MAP_RINGBUF;
  printk.max_entries = options.printk_ring_bytes;
  printk.value_type = PrintkRecordType();
  const int32_t slot = static_cast<int32_t>(maps->size());
  maps->push_back(std::move(printk));
  return slot;
}

// Each program's bundle entry and what its lowering needs: a function name
// unique in the module, its printk formats' bundle ids, its object's
// .rodata prefix and map slots.
void AddPrograms(const std::vector<BpfObject>& objects,
                 const std::vector<std::vector<int32_t>>& slots,
                 const std::vector<VerifiedProgram>& verified, ProbeBundle* b,
                 std::vector<ProgramToLower>* programs) {
  absl::flat_hash_set<std::string> functions;
  size_t vi = 0;
  for (size_t k = 0; k < objects.size(); ++k) {
    for (const BpfProgram& p : objects[k].programs) {
      const VerifiedProgram& v = verified[vi++];
      ProgramToLower lp;
      lp.program = &p;
      lp.verified = &v;
      lp.object = &objects[k];
      lp.map_slot = &slots[k];
      if (k > 0) lp.rodata_prefix = absl::StrCat("__cuprobe_ro", k, "_");
      lp.function_name = absl::StrCat("__cuprobe_probe_", p.name);
      if (!functions.insert(lp.function_name).second) {
        lp.function_name = absl::StrCat("__cuprobe_probe_", p.name, "_", k);
        functions.insert(lp.function_name);
      }
      for (const std::string& f : v.printk_formats) {
        lp.printk_ids.push_back(static_cast<uint32_t>(b->printk_formats.size()));
        b->printk_formats.push_back(f);
      }
      ProbeProgram pp;
      pp.name = p.name;
      pp.section = p.section;
      pp.attach = v.attach;
      pp.kernel_glob = v.kernel_glob;
      pp.ptx_function = lp.function_name;
      pp.reads_args = v.reads_args;
      AddSummaryCode(p, v, slots[k], b->maps, &pp);
      b->programs.push_back(std::move(pp));
      programs->push_back(std::move(lp));
    }
  }
}

// LLVM IR, then PTX (and the helper symbols it calls) into the bundle.
absl::Status Generate(const LowerInput& input, const ProbeCompileOptions& options,
                      CompileResult* result) {
  auto t = Clock::now();
  llvm::LLVMContext context;
  CUPROBE_ASSIGN_OR_RETURN(std::unique_ptr<llvm::Module> module,
                           LowerToLlvm(context, input, LowerTarget::kNvptx));
  if (options.keep_llvm) result->llvm_ir = ModuleText(*module);
  result->timings.lower_ms = MsSince(t);
  t = Clock::now();
  CUPROBE_ASSIGN_OR_RETURN(result->bundle.ptx, EmitPtx(*module));
  result->bundle.helpers = HelperSymbolsUsed(*module);
  result->timings.codegen_ms = MsSince(t);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<CompileResult> CompileObjects(absl::Span<const ProbeObject> inputs,
                                             const ProbeCompileOptions& options) {
  if (inputs.empty()) return absl::InvalidArgumentError("no probe to compile");
  CompileResult result;
  auto t = Clock::now();
  CUPROBE_ASSIGN_OR_RETURN(std::vector<BpfObject> objects, ReadObjects(inputs));
  result.timings.read_ms = MsSince(t);
  WarnSkipped(objects, &result);

  t = Clock::now();
  const absl::Status verified = VerifyObjects(inputs, objects, options.verifier, &result);
  result.timings.verify_ms = MsSince(t);
  CUPROBE_RETURN_IF_ERROR(verified);

  ProbeBundle& b = result.bundle;
  NameBundle(inputs, &b);
  const std::vector<std::vector<int32_t>> slots = AssignMapSlots(inputs, objects, &b.maps);
  size_t first = 0;
  for (size_t k = 0; k < objects.size(); ++k) {
    const size_t n = objects[k].programs.size();
    MarkAddOnlyMaps(objects[k], absl::MakeConstSpan(result.verified).subspan(first, n), slots[k],
                    &b.maps);
    first += n;
  }
  LowerInput input;
  input.object = &objects[0];
  input.map_slot = slots[0];
  input.printk_slot = AddPrintkMap(result.verified, options, &b.maps);
  input.ring = options.ring;
  input.maps = options.maps;
  AddPrograms(objects, slots, result.verified, &b, &input.programs);
  CUPROBE_RETURN_IF_ERROR(Generate(input, options, &result));
  return result;
}

absl::StatusOr<CompileResult> CompileObject(absl::Span<const uint8_t> bytes,
                                            std::string_view name,
                                            const ProbeCompileOptions& options) {
  const ProbeObject in{bytes, std::string(name)};
  return CompileObjects(absl::MakeConstSpan(&in, 1), options);
}

absl::StatusOr<CompileResult> CompileFile(const std::string& path, const ProbeCompileOptions& options) {
  return CompileFiles({path}, options);
}

absl::StatusOr<CompileResult> CompileFiles(const std::vector<std::string>& paths,
                                           const ProbeCompileOptions& options) {
  std::vector<std::vector<uint8_t>> objects;
  std::vector<std::vector<uint8_t>> sources;
  double clang_ms = 0;
  for (const std::string& path : paths) {
    CUPROBE_ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, ReadWholeFile(path));
    const bool is_elf = bytes.size() >= 4 && std::memcmp(bytes.data(), "\x7f" "ELF", 4) == 0;
    if (is_elf) {
      objects.push_back(bytes);
    } else {
      double ms = 0;
      CUPROBE_ASSIGN_OR_RETURN(std::vector<uint8_t> object, CompileCToBpf(path, options, &ms));
      clang_ms += ms;
      objects.push_back(std::move(object));
    }
    sources.push_back(std::move(bytes));
  }
  std::vector<ProbeObject> inputs;
  for (size_t i = 0; i < paths.size(); ++i) inputs.push_back({objects[i], Basename(paths[i])});
  CUPROBE_ASSIGN_OR_RETURN(CompileResult result, CompileObjects(inputs, options));
  result.timings.clang_ms = clang_ms;
  // The bundle names its sources, not the objects clang made of them.
  result.bundle.source_hash = SourcesHash(sources);
  return result;
}

}  // namespace cuprobe
