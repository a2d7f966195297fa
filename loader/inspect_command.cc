#include "loader/inspect_command.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "maps/trace_report.h"
#include "ptx_rewriter/image.h"
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
  int kernels = 0;
  std::vector<Image> kept;  // for --extract-ptx
};

absl::Status ListImage(const Image& image, const std::string& where, Listing* out) {
  ++out->images;
  absl::StrAppend(&out->text, where, ": ", ImageFormatName(image.format), ", ",
                  image.entries.size(), " entr", image.entries.size() == 1 ? "y" : "ies", "\n");
  for (const ImageEntry& e : image.entries) {
    absl::StrAppend(&out->text, "  ", DescribeEntry(e), "\n");
    if (!e.is_elf()) continue;
    absl::StatusOr<std::vector<std::string>> names = KernelNames(e);
    if (!names.ok()) {
      absl::StrAppend(&out->text, "    (kernels unreadable: ", names.status().message(), ")\n");
      continue;
    }
    for (const std::string& n : *names) {
      ++out->kernels;
      std::string demangled = DemangleKernelName(n);
      absl::StrAppend(&out->text, "    kernel ", demangled,
                      demangled == n ? "" : absl::StrCat("  [", n, "]"), "\n");
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::string> InspectFile(const InspectOptions& options) {
  CUPROBE_ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, ReadBytes(options.path));
  absl::Span<const uint8_t> all(bytes);
  Listing listing;
  if (IsHostElf(all)) {
    absl::StatusOr<std::vector<HostFatbin>> fatbins = FindFatbinsInHostElf(all);
    if (!fatbins.ok()) {
      return absl::Status(fatbins.status().code(),
                          absl::StrCat(options.path, ": ", fatbins.status().message()));
    }
    if (fatbins->empty()) return absl::StrCat(options.path, ": no CUDA code (no fatbin)\n");
    for (const HostFatbin& f : *fatbins) {
      absl::StatusOr<Image> image = ReadImage(all.subspan(f.offset, f.size));
      std::string where = absl::StrCat(options.path, " fatbin @0x", absl::Hex(f.offset));
      if (!image.ok()) {
        return absl::Status(image.status().code(),
                            absl::StrCat(where, ": ", image.status().message()));
      }
      CUPROBE_RETURN_IF_ERROR(ListImage(*image, where, &listing));
    }
  } else {
    absl::StatusOr<Image> image = ReadImage(all);
    if (!image.ok()) {
      return absl::Status(image.status().code(),
                          absl::StrCat(options.path, ": ", image.status().message()));
    }
    CUPROBE_RETURN_IF_ERROR(ListImage(*image, options.path, &listing));
  }
  absl::StrAppend(&listing.text, listing.images, " image(s), ", listing.kernels,
                  " kernel(s) in SASS\n");
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
