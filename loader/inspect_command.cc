#include "loader/inspect_command.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "report/trace_report.h"
#include "ptx_rewriter/image.h"
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
  int ptx_kernels = 0;  // kernels of the PTX chosen for --sm: instrumentable
};

absl::Status ListImage(const Image& image, const std::string& where, uint32_t sm,
                       Listing* out) {
  ++out->images;
  absl::StrAppend(&out->text, where, ": ", ImageFormatName(image.format), ", ",
                  image.entries.size(), " entr", image.entries.size() == 1 ? "y" : "ies", "\n");
  // The kernels of the PTX the hook would rewrite on this SM.
  const ImageEntry* ptx = PickPtxFor(image, sm);
  std::vector<std::string> ptx_kernels;
  std::string ptx_problem;
  if (ptx != nullptr) {
    absl::StatusOr<std::string> text = ExtractPtx(*ptx);
    absl::StatusOr<Module> module =
        text.ok() ? ParsePtx(*text, absl::StrCat(where, " PTX")) : absl::StatusOr<Module>(text.status());
    if (module.ok()) {
      for (const Function& f : module->functions) {
        if (f.is_kernel && f.has_body) ptx_kernels.emplace_back(f.name);
      }
    } else {
      ptx_problem = std::string(module.status().message());
    }
  }
  const absl::flat_hash_set<std::string> with_ptx(ptx_kernels.begin(), ptx_kernels.end());
  auto name = [](const std::string& n) {
    std::string demangled = DemangleKernelName(n);
    return demangled == n ? n : absl::StrCat(demangled, "  [", n, "]");
  };
  for (const ImageEntry& e : image.entries) {
    absl::StrAppend(&out->text, "  ", DescribeEntry(e), "\n");
    if (&e == ptx) {
      if (!ptx_problem.empty()) {
        absl::StrAppend(&out->text, "    (PTX unreadable: ", ptx_problem, ")\n");
      }
      for (const std::string& n : ptx_kernels) {
        ++out->ptx_kernels;
        absl::StrAppend(&out->text, "    kernel ", name(n), "  (instrumentable on sm_", sm, ")\n");
      }
      continue;
    }
    if (!e.is_elf()) continue;
    absl::StatusOr<std::vector<std::string>> names = KernelNames(e);
    if (!names.ok()) {
      absl::StrAppend(&out->text, "    (kernels unreadable: ", names.status().message(), ")\n");
      continue;
    }
    for (const std::string& n : *names) {
      ++out->sass_kernels;
      absl::StrAppend(&out->text, "    kernel ", name(n),
                      with_ptx.contains(n) ? "" : "  (SASS only: not instrumentable)", "\n");
    }
  }
  if (ptx == nullptr && !image.entries.empty()) {
    absl::StrAppend(&out->text, "  (no PTX for sm_", sm, ": the kernels cannot be instrumented)\n");
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::string> InspectFile(const InspectOptions& options) {
  CUPROBE_ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, ReadBytes(options.path));
  absl::Span<const uint8_t> all(bytes);
  Listing listing;
  auto list = [&](absl::Span<const uint8_t> span, const std::string& where) -> absl::Status {
    absl::StatusOr<Image> image = ReadImage(span);
    if (!image.ok()) {
      return absl::Status(image.status().code(),
                          absl::StrCat(where, ": ", image.status().message()));
    }
    return ListImage(*image, where, options.sm, &listing);
  };
  if (IsHostElf(all)) {
    absl::StatusOr<std::vector<HostFatbin>> fatbins = FindFatbinsInHostElf(all);
    if (!fatbins.ok()) {
      return absl::Status(fatbins.status().code(),
                          absl::StrCat(options.path, ": ", fatbins.status().message()));
    }
    for (const HostFatbin& f : *fatbins) {
      CUPROBE_RETURN_IF_ERROR(list(all.subspan(f.offset, f.size),
                                   absl::StrCat(options.path, " fatbin @0x", absl::Hex(f.offset))));
    }
    // Containers outside .nv_fatbin: modules a library loads itself.
    absl::flat_hash_set<uint64_t> listed;
    for (const HostFatbin& f : *fatbins) listed.insert(f.offset);
    int extra = 0;
    for (const HostFatbin& f : ScanForFatbinContainers(all)) {
      if (listed.contains(f.offset)) continue;
      bool inside = false;
      for (const HostFatbin& g : *fatbins) inside |= f.offset > g.offset && f.offset < g.offset + g.size;
      if (inside) continue;
      ++extra;
      CUPROBE_RETURN_IF_ERROR(list(all.subspan(f.offset, f.size),
                                   absl::StrCat(options.path, " fatbin @0x", absl::Hex(f.offset),
                                                " (outside .nv_fatbin)")));
    }
    if (fatbins->empty() && extra == 0) return absl::StrCat(options.path, ": no CUDA code (no fatbin)\n");
  } else {
    CUPROBE_RETURN_IF_ERROR(list(all, options.path));
  }
  absl::StrAppend(&listing.text, listing.images, " image(s), ", listing.sass_kernels,
                  " kernel(s) in SASS, ", listing.ptx_kernels,
                  " kernel(s) instrumentable from PTX on sm_", options.sm, "\n");
  return listing.text;
}

absl::Status RunInspect(const InspectOptions& options) {
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
