// File: ptx_rewriter/image_pipeline.cc
#include "ptx_rewriter/image_pipeline.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "cuprobe/abi.h"
#include "probe/kernel_glob.h"
#include "probe/trace_records.h"
#include "ptx_rewriter/compile.h"
#include "ptx_rewriter/content_hash.h"
#include "ptx_rewriter/image.h"
#include "support/log.h"
#include "support/status_macros.h"

namespace cuprobe {
namespace {

// Images given as files are read whole; nothing the driver loads is larger.
constexpr uint64_t kMaxImageFileBytes = uint64_t{2} << 30;

absl::StatusOr<std::vector<uint8_t>> ReadImageFile(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return absl::NotFoundError(absl::StrCat("cannot open: ", std::strerror(errno)));
  struct stat st;
  if (::fstat(fd, &st) != 0 || st.st_size < 0 ||
      static_cast<uint64_t>(st.st_size) > kMaxImageFileBytes) {
    ::close(fd);
    return absl::InvalidArgumentError("not a regular file of a sensible size");
  }
  std::vector<uint8_t> bytes(static_cast<size_t>(st.st_size));
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::read(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
  ::close(fd);
  if (done != bytes.size()) return absl::DataLossError("short read");
  return bytes;
}

// The image of `source`; a file's bytes are kept in `*file_bytes` while the
// image (which points into them) is in use.
absl::StatusOr<Image> ReadSource(const ImageSource& source, std::vector<uint8_t>* file_bytes) {
  absl::StatusOr<Image> image;
  if (!source.path.empty()) {
    CUPROBE_ASSIGN_OR_RETURN(*file_bytes, ReadImageFile(source.path));
    image = ReadImage(*file_bytes);
  } else {
    image = ReadImageAt(source.live);
  }
  if (!image.ok()) {
    return absl::Status(image.status().code(),
                        absl::StrCat("cannot read the image: ", image.status().message()));
  }
  return image;
}

bool Selected(const ProbeBundle& bundle, std::string_view mangled) {
  std::string base;
  for (const ProbeProgram& p : bundle.programs) {
    if (base.empty()) base = KernelBaseName(mangled);
    if (KernelGlobMatches(p.kernel_glob, mangled, base)) return true;
  }
  return false;
}

// The kernels the bundle selects, by the names in the image's cubins (their
// symbol tables, usually stored uncompressed). `*have_names`: some cubin
// could be read; otherwise (a PTX-only image) the PTX's names decide.
std::vector<std::string> SelectByCubinNames(const Image& image, const ProbeBundle& bundle,
                                            bool* have_names) {
  *have_names = false;
  std::vector<std::string> selected;
  absl::flat_hash_set<std::string> seen;
  for (const ImageEntry& entry : image.entries) {
    if (!entry.is_elf()) continue;
    absl::StatusOr<std::vector<std::string>> names = KernelNames(entry);
    if (!names.ok()) continue;
    *have_names = true;
    for (std::string& n : *names) {
      if (Selected(bundle, n) && seen.insert(n).second) selected.push_back(std::move(n));
    }
  }
  return selected;
}

// The result for selected kernels that have no PTX anywhere: named, so the
// user learns why their probe saw nothing; the module loads untouched.
std::optional<InstrumentedImage> SassOnly(const std::vector<std::string>& selected, uint32_t sm) {
  InstrumentedImage out;
  for (const std::string& n : selected) {
    out.not_instrumented.push_back(absl::StrCat(n, " (no PTX for sm_", sm, ")"));
  }
  if (out.not_instrumented.empty()) return std::nullopt;
  return out;
}

// The module's PTX, extracted (zstd/LZ4) at most once and only when asked:
// a cache hit needs none.
class PtxText {
 public:
  PtxText(const ImageEntry* entry, const std::optional<std::string>* side)
      : entry_(entry), side_(side) {}
  absl::StatusOr<std::string> Get() {
    if (!text_.has_value()) {
      text_ = side_->has_value() ? absl::StatusOr<std::string>(**side_) : ExtractPtx(*entry_);
      if (!text_->ok()) {
        *text_ = absl::Status(text_->status().code(), absl::StrCat("cannot extract its PTX: ",
                                                                   text_->status().message()));
      }
    }
    return *text_;
  }

 private:
  const ImageEntry* entry_;
  const std::optional<std::string>* side_;
  std::optional<absl::StatusOr<std::string>> text_;
};

// The cache identity of the module: its stored (compressed) entry, so that
// a hit costs neither the extraction nor hashing the PTX.
std::string ModuleIdentity(const ImageEntry* ptx, const std::optional<std::string>& side_ptx) {
  if (side_ptx.has_value()) return absl::StrCat("triton-ptx:", HashHex(HashBytes(*side_ptx)));
  return absl::StrCat("fatbin-entry:", ptx->flags, ":", ptx->stored.size(), ":",
                      HashHex(HashBytes(std::string_view(
                          reinterpret_cast<const char*>(ptx->stored.data()), ptx->stored.size()))));
}

InstrumentedImage ToInstrumentedImage(InstrumentedModule module, const ProbeBundle& bundle,
                                      const ImageSource& source) {
  InstrumentedImage out;
  out.cubin = std::move(module.cubin);
  out.map_table_entries = static_cast<uint32_t>(bundle.maps.size());
  out.map_descs = absl::StrContains(bundle.ptx, CUPROBE_MAP_DESCS_SYMBOL);
  out.site_counters = std::move(module.site_counters);
  for (const InstrumentedKernel& k : module.instrumented) out.kernels.emplace_back(k.name, k.kernel_id);
  for (const SkippedKernel& k : module.skipped) {
    out.not_instrumented.push_back(absl::StrCat(k.name, " (", k.reason, ")"));
  }
  for (const std::string& w : module.warnings) {
    CUPROBE_LOG(kDebug, "%s: %s", source.Describe(), w);
  }
  if (out.kernels.empty()) out.cubin.clear();
  return out;
}

}  // namespace

std::string ImageSource::Describe() const {
  if (!path.empty()) return absl::StrCat("module file '", path, "'");
  return absl::StrCat("module image at ", absl::Hex(reinterpret_cast<uintptr_t>(live)));
}

std::vector<std::string> PtxEntryNames(std::string_view ptx) {
  std::vector<std::string> names;
  size_t pos = 0;
  while ((pos = ptx.find(".entry", pos)) != std::string_view::npos) {
    pos += 6;
    if (pos >= ptx.size() || (ptx[pos] != ' ' && ptx[pos] != '\t')) continue;
    while (pos < ptx.size() && (ptx[pos] == ' ' || ptx[pos] == '\t')) ++pos;
    size_t end = pos;
    while (end < ptx.size() && (std::isalnum(static_cast<unsigned char>(ptx[end])) ||
                                ptx[end] == '_' || ptx[end] == '$' || ptx[end] == '.')) {
      ++end;
    }
    if (end > pos) names.emplace_back(ptx.substr(pos, end - pos));
    pos = end;
  }
  return names;
}

static_assert(CatalogBackendCode(KernelBackend::kPtx) == kCatalogBackendPtx &&
              CatalogBackendCode(KernelBackend::kPatch) == kCatalogBackendPatch);

absl::StatusOr<std::vector<CatalogKernel>> CatalogImage(
    const ImageSource& source, uint32_t sm, const PtxSourceFinder& find_ptx) {
  std::vector<uint8_t> file_bytes;
  CUPROBE_ASSIGN_OR_RETURN(Image image, ReadSource(source, &file_bytes));
  return CatalogImage(image, sm, find_ptx);
}

std::vector<CatalogKernel> CatalogImage(const Image& image, uint32_t sm,
                                        const PtxSourceFinder& find_ptx) {
  // The PTX backend's kernels: those of the PTX the pipeline would rewrite.
  absl::flat_hash_set<std::string> with_ptx;
  std::optional<std::string> ptx;
  if (const ImageEntry* entry = PickPtxFor(image, sm); entry != nullptr) {
    absl::StatusOr<std::string> text = ExtractPtx(*entry);
    if (text.ok()) ptx = *std::move(text);
  } else if (image.format == ImageFormat::kCubin && find_ptx) {
    ptx = find_ptx(image.bytes);
  }
  std::vector<std::string> ptx_kernels;
  if (ptx.has_value()) ptx_kernels = PtxEntryNames(*ptx);
  with_ptx.insert(ptx_kernels.begin(), ptx_kernels.end());

  std::vector<CatalogKernel> out;
  absl::flat_hash_set<std::string> listed;
  auto add = [&](const std::string& name) {
    if (!listed.insert(name).second) return;
    out.push_back({name, with_ptx.contains(name) ? KernelBackend::kPtx : KernelBackend::kPatch});
  };
  // The cubins the driver would pick from on this device: those built for
  // exactly its SM, else all (a fatbin of other SMs' SASS, or a bare cubin).
  // Decompressing every architecture's cubin of a large library costs
  // seconds and names the same kernels.
  bool exact = false;
  for (const ImageEntry& e : image.entries) exact |= e.is_elf() && e.sm_arch == sm;
  for (const ImageEntry& e : image.entries) {
    if (!e.is_elf() || (exact && e.sm_arch != sm)) continue;
    absl::StatusOr<std::vector<std::string>> names = KernelNames(e);
    if (!names.ok()) continue;
    for (const std::string& n : *names) add(n);
  }
  for (const std::string& n : ptx_kernels) add(n);
  return out;
}

PtxSourceFinder TritonCacheFinder(std::vector<std::string> roots) {
  return [roots = std::move(roots)](absl::Span<const uint8_t> cubin) -> std::optional<std::string> {
    std::error_code ec;
    for (const std::string& root : roots) {
      for (auto it = std::filesystem::recursive_directory_iterator(root, ec);
           !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
        if (it.depth() > 2) {
          it.disable_recursion_pending();
          continue;
        }
        const std::filesystem::path& path = it->path();
        if (path.extension() != ".cubin") continue;
        std::error_code size_ec;
        if (std::filesystem::file_size(path, size_ec) != cubin.size() || size_ec) continue;
        absl::StatusOr<std::vector<uint8_t>> bytes = ReadImageFile(path.string());
        if (!bytes.ok() || !std::equal(bytes->begin(), bytes->end(), cubin.begin())) continue;
        std::filesystem::path ptx = path;
        ptx.replace_extension(".ptx");
        absl::StatusOr<std::vector<uint8_t>> text = ReadImageFile(ptx.string());
        if (!text.ok()) return std::nullopt;
        return std::string(text->begin(), text->end());
      }
    }
    return std::nullopt;
  };
}

absl::StatusOr<std::optional<InstrumentedImage>> InstrumentImage(
    const ImageSource& source, uint32_t sm, const ImagePipeline& pipeline, KernelIds& ids) {
  const ProbeBundle& bundle = *pipeline.bundle;
  std::vector<uint8_t> file_bytes;
  CUPROBE_ASSIGN_OR_RETURN(Image image, ReadSource(source, &file_bytes));

  bool have_names = false;
  std::vector<std::string> selected = SelectByCubinNames(image, bundle, &have_names);
  if (have_names && selected.empty()) return std::nullopt;

  const ImageEntry* ptx = PickPtxFor(image, sm);
  std::optional<std::string> side_ptx;
  if (ptx == nullptr && image.format == ImageFormat::kCubin && !selected.empty() &&
      pipeline.find_ptx) {
    side_ptx = pipeline.find_ptx(image.bytes);
    if (side_ptx.has_value()) {
      CUPROBE_LOG(kDebug, "%s: a cubin without PTX; using PTX found for it elsewhere",
                  source.Describe());
    }
  }
  if (ptx == nullptr && !side_ptx.has_value()) return SassOnly(selected, sm);

  PtxText text(ptx, &side_ptx);
  if (!have_names) {  // PTX only: its .entry names decide
    CUPROBE_ASSIGN_OR_RETURN(std::string ptx_text, text.Get());
    for (std::string& name : PtxEntryNames(ptx_text)) {
      if (Selected(bundle, name)) selected.push_back(std::move(name));
    }
    if (selected.empty()) return std::nullopt;
  }
  InstrumentOptions options;
  options.helper_ptx = pipeline.helper_ptx;
  options.sm = sm;
  options.module_name = source.Describe();
  for (const std::string& name : selected) options.kernel_ids[name] = ids.IdOf(name);
  options.first_kernel_id = ids.FirstUnnamedId();

  absl::StatusOr<InstrumentedModule> module = InstrumentAndCompileLazy(
      ModuleIdentity(ptx, side_ptx), [&] { return text.Get(); }, bundle, options,
      *pipeline.cache);
  if (!module.ok()) return module.status();
  const bool cache_hit = module->cache_hit;
  InstrumentedImage out = ToInstrumentedImage(*std::move(module), bundle, source);
  CUPROBE_LOG(kDebug, "%s: %d kernel(s) rewritten for sm_%d (%s)", source.Describe(),
              out.kernels.size(), sm, cache_hit ? "cache hit" : "compiled");
  return std::optional<InstrumentedImage>(std::move(out));
}

}  // namespace cuprobe
