#include "loader/inspect_command.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <optional>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "report/trace_report.h"
#include "ptx_rewriter/image.h"
#include "ptx_rewriter/image_pipeline.h"
#include "ptx_rewriter/ptx_parser.h"
#include "support/status_macros.h"

namespace cuprobe {
namespace {

absl::StatusOr<std::vector<uint8_t>> ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::NotFoundError(absl::StrCat("cannot read '", path, "': ", std::strerror(errno)));
  }
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}

bool IsHostElf(absl::Span<const uint8_t> b) {
  // ELF whose e_machine is not EM_CUDA (190): an executable or library.
  if (b.size() < 20 || b[0] != 0x7f || b[1] != 'E' || b[2] != 'L' || b[3] != 'F') return false;
  uint16_t machine = static_cast<uint16_t>(b[18] | (b[19] << 8));
  return machine != 190;
}

struct Listing {
  std::string text;
  int images = 0;
  int sass_kernels = 0;
  int ptx_kernels = 0;        // kernels of the PTX chosen for --sm: instrumentable
  int sass_only_kernels = 0;  // SASS kernels without that PTX: --backend auto or patch
};

// The PTX `cuprobe run` would rewrite for an image on --sm, and its kernels:
// the image's own PTX entry, else, for a bare cubin, PTX the hook finds for
// it elsewhere (ptx_rewriter/image_pipeline.h: Triton's cache).
struct ChosenPtx {
  const ImageEntry* entry = nullptr;  // the image's PTX for --sm
  bool found_elsewhere = false;       // a bare cubin's PTX, from the search roots
  std::vector<std::string> kernels;   // its kernels with a body
  std::string problem;                // why the PTX could not be read
};

ChosenPtx ChoosePtx(const Image& image, const std::string& where,
                    const InspectOptions& options) {
  ChosenPtx chosen;
  chosen.entry = PickPtxFor(image, options.sm);
  std::optional<std::string> side;
  if (chosen.entry == nullptr && image.format == ImageFormat::kCubin &&
      !options.ptx_search_roots.empty()) {
    side = TritonCacheFinder(options.ptx_search_roots)(image.bytes);
    chosen.found_elsewhere = side.has_value();
  }
  if (chosen.entry == nullptr && !side.has_value()) return chosen;
  absl::StatusOr<std::string> text =
      side.has_value() ? absl::StatusOr<std::string>(*std::move(side)) : ExtractPtx(*chosen.entry);
  absl::StatusOr<Module> module = text.ok() ? ParsePtx(*text, absl::StrCat(where, " PTX"))
                                             : absl::StatusOr<Module>(text.status());
  if (!module.ok()) {
    chosen.problem = std::string(module.status().message());
    return chosen;
  }
  for (const Function& f : module->functions) {
    if (f.is_kernel && f.has_body) chosen.kernels.emplace_back(f.name);
  }
  return chosen;
}

// A kernel's name for the listing: demangled, with the mangled name after it.
std::string KernelLabel(const std::string& n) {
  std::string demangled = DemangleKernelName(n);
  return demangled == n ? n : absl::StrCat(demangled, "  [", n, "]");
}

// Which backend `cuprobe run --backend auto` gives a kernel: the PTX one
// when the chosen PTX has it; else the patch one (--backend ptx: none).
constexpr char kPtxBackend[] = "backend: ptx";
constexpr char kPatchBackend[] = "backend: patch (SASS only)";

// The kernels of one ELF entry, each with its backend.
void ListElfKernels(const ImageEntry& e, const absl::flat_hash_set<std::string>& with_ptx,
                    Listing* out) {
  absl::StatusOr<std::vector<std::string>> names = KernelNames(e);
  if (!names.ok()) {
    absl::StrAppend(&out->text, "    (kernels unreadable: ", names.status().message(), ")\n");
    return;
  }
  for (const std::string& n : *names) {
    ++out->sass_kernels;
    const bool ptx = with_ptx.contains(n);
    if (!ptx) ++out->sass_only_kernels;
    absl::StrAppend(&out->text, "    kernel ", KernelLabel(n), "  ",
                    ptx ? kPtxBackend : kPatchBackend, "\n");
  }
}

absl::Status ListImage(const Image& image, const std::string& where,
                       const InspectOptions& options, Listing* out) {
  const uint32_t sm = options.sm;
  ++out->images;
  absl::StrAppend(&out->text, where, ": ", ImageFormatName(image.format), ", ",
                  image.entries.size(), " entr", image.entries.size() == 1 ? "y" : "ies", "\n");
  const ChosenPtx ptx = ChoosePtx(image, where, options);
  const absl::flat_hash_set<std::string> with_ptx(ptx.kernels.begin(), ptx.kernels.end());
  for (const ImageEntry& e : image.entries) {
    absl::StrAppend(&out->text, "  ", DescribeEntry(e), "\n");
    if (&e == ptx.entry) {
      if (!ptx.problem.empty()) {
        absl::StrAppend(&out->text, "    (PTX unreadable: ", ptx.problem, ")\n");
      }
      for (const std::string& n : ptx.kernels) {
        ++out->ptx_kernels;
        absl::StrAppend(&out->text, "    kernel ", KernelLabel(n), "  (instrumentable on sm_", sm,
                        ")  ", kPtxBackend, "\n");
      }
      continue;
    }
    if (e.is_elf()) ListElfKernels(e, with_ptx, out);
  }
  if (ptx.found_elsewhere) {
    out->ptx_kernels += static_cast<int>(ptx.kernels.size());
    absl::StrAppend(&out->text, "  (no PTX in the cubin; the hook takes the PTX found for it in "
                    "Triton's cache",
                    ptx.problem.empty() ? "" : absl::StrCat(", unreadable: ", ptx.problem), ")\n");
  } else if (ptx.entry == nullptr && !image.entries.empty()) {
    // What --backend ptx does, then what auto and patch do.
    absl::StrAppend(&out->text, "  (no PTX for sm_", sm, ": the kernels cannot be instrumented)\n",
                    "  (`cuprobe run --backend auto` patches their SASS instead)\n");
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<FileImage>> FindImagesInFile(absl::Span<const uint8_t> all,
                                                        const std::string& path) {
  if (!IsHostElf(all)) return std::vector<FileImage>{{all, path}};
  absl::StatusOr<std::vector<HostFatbin>> fatbins = FindFatbinsInHostElf(all);
  if (!fatbins.ok()) {
    return absl::Status(fatbins.status().code(),
                        absl::StrCat(path, ": ", fatbins.status().message()));
  }
  std::vector<FileImage> images;
  for (const HostFatbin& f : *fatbins) {
    images.push_back({all.subspan(f.offset, f.size),
                      absl::StrCat(path, " fatbin @0x", absl::Hex(f.offset))});
  }
  // Containers outside .nv_fatbin: modules a library loads itself.
  absl::flat_hash_set<uint64_t> listed;
  for (const HostFatbin& f : *fatbins) listed.insert(f.offset);
  for (const HostFatbin& f : ScanForFatbinContainers(all)) {
    if (listed.contains(f.offset)) continue;
    bool inside = false;
    for (const HostFatbin& g : *fatbins) inside |= f.offset > g.offset && f.offset < g.offset + g.size;
    if (inside) continue;
    images.push_back({all.subspan(f.offset, f.size),
                      absl::StrCat(path, " fatbin @0x", absl::Hex(f.offset),
                                   " (outside .nv_fatbin)")});
  }
  return images;
}

absl::StatusOr<Image> ReadFileImage(const FileImage& f) {
  absl::StatusOr<Image> image = ReadImage(f.bytes);
  if (!image.ok()) {
    return absl::Status(image.status().code(),
                        absl::StrCat(f.where, ": ", image.status().message()));
  }
  return image;
}

absl::StatusOr<std::vector<uint8_t>> ReadFileBytes(const std::string& path) {
  return ReadBytes(path);
}

absl::StatusOr<std::string> InspectFile(const InspectOptions& options) {
  CUPROBE_ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, ReadBytes(options.path));
  CUPROBE_ASSIGN_OR_RETURN(std::vector<FileImage> images, FindImagesInFile(bytes, options.path));
  if (images.empty()) return absl::StrCat(options.path, ": no CUDA code (no fatbin)\n");
  Listing listing;
  for (const FileImage& f : images) {
    CUPROBE_ASSIGN_OR_RETURN(Image image, ReadFileImage(f));
    CUPROBE_RETURN_IF_ERROR(ListImage(image, f.where, options, &listing));
  }
  absl::StrAppend(&listing.text, listing.images, " image(s), ", listing.sass_kernels,
                  " kernel(s) in SASS, ", listing.ptx_kernels,
                  " kernel(s) instrumentable from PTX on sm_", options.sm, ", ",
                  listing.sass_only_kernels, " SASS-only kernel(s) for --backend auto or patch\n");
  return listing.text;
}

std::vector<std::string> PtxSearchRootsFromEnvironment() {
  std::vector<std::string> roots;
  if (const char* d = std::getenv("TRITON_CACHE_DIR"); d != nullptr && *d != '\0') {
    roots.emplace_back(d);
  }
  if (const char* h = std::getenv("HOME"); h != nullptr && *h != '\0') {
    roots.push_back(absl::StrCat(h, "/.triton/cache"));
  }
  return roots;
}

absl::Status RunInspect(const InspectOptions& given) {
  InspectOptions options = given;
  if (options.ptx_search_roots.empty()) options.ptx_search_roots = PtxSearchRootsFromEnvironment();
  CUPROBE_ASSIGN_OR_RETURN(std::string text, InspectFile(options));
  if (options.extract_ptx != "-") std::fputs(text.c_str(), stdout);
  if (options.extract_ptx.empty()) return absl::OkStatus();

  CUPROBE_ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, ReadBytes(options.path));
  absl::Span<const uint8_t> all(bytes);
  std::vector<absl::Span<const uint8_t>> images;
  if (IsHostElf(all)) {
    CUPROBE_ASSIGN_OR_RETURN(std::vector<HostFatbin> fatbins, FindFatbinsInHostElf(all));
    for (const HostFatbin& f : fatbins) images.push_back(all.subspan(f.offset, f.size));
  } else {
    images.push_back(all);
  }
  for (absl::Span<const uint8_t> span : images) {
    CUPROBE_ASSIGN_OR_RETURN(Image image, ReadImage(span));
    const ImageEntry* ptx = PickPtxFor(image, options.sm);
    if (ptx == nullptr) continue;
    CUPROBE_ASSIGN_OR_RETURN(std::string text_ptx, ExtractPtx(*ptx));
    if (options.extract_ptx == "-") {
      std::fwrite(text_ptx.data(), 1, text_ptx.size(), stdout);
      return absl::OkStatus();
    }
    CUPROBE_RETURN_IF_ERROR(WriteFile(options.extract_ptx, text_ptx));
    std::printf("wrote PTX for sm_%u (%zu bytes) to %s\n", options.sm, text_ptx.size(),
                options.extract_ptx.c_str());
    return absl::OkStatus();
  }
  return absl::NotFoundError(
      absl::StrCat(options.path, ": no PTX usable on sm_", options.sm, " to extract"));
}

}  // namespace cuprobe
