#!/usr/bin/env bash
# Checks the folders' dependency graph (docs/ARCHITECTURE.md):
#
#   support -> probe -> {maps, ptx_rewriter, report} -> {loader, cupti_hook}
#
# (maps, ptx_rewriter and report never include each other, nor do loader and
# cupti_hook). Fails, naming the file
# and the line, on
#  - an #include of a folder the including folder may not depend on;
#  - a library target whose sources include a folder none of its DEPS
#    (cuprobe_cc_library in the folder's CMakeLists.txt / *.cmake) comes
#    from: every target declares every folder it includes;
#  - a file outside the GPU seam that loads the CUDA driver (dlopen of
#    libcuda) or resolves its symbols (cuGetProcAddress), or loads the
#    Compute Sanitizer (libsanitizer-public.so);
#  - a getenv outside the hook's config (cupti_hook/hook_config.cc) and the
#    CLI (loader/*.cc): the environment is read once, at the top.
# include/cuprobe (the probes' ABI) may be included from anywhere. tests/,
# bench/ and samples/ may include everything.
#
#   scripts/check-layers.sh          # prints "check-layers: ok" or the violations
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
exec python3 - "$@" <<'PY'
import os, re, sys

ALLOWED = {
    "support": set(),
    "probe": {"support"},
    "maps": {"support", "probe"},
    "ptx_rewriter": {"support", "probe"},
    "report": {"support", "probe"},
    "loader": {"support", "probe", "maps", "ptx_rewriter", "report"},
    "cupti_hook": {"support", "probe", "maps", "ptx_rewriter", "report"},
}
# The one file that loads the driver and resolves its entry points, and the
# one that loads the Compute Sanitizer.
SEAM = {"cupti_hook/real_seam.cc"}
SANITIZER_SEAM = {"cupti_hook/real_sanitizer_seam.cc"}
# Where the environment may be read.
def reads_environment_ok(path):
    return path == "cupti_hook/hook_config.cc" or re.fullmatch(r"loader/[a-z_]+\.cc", path)
SOURCE = (".h", ".cc", ".cu", ".inc")
errors = []

def folder_of_include(path):
    top = path.split("/", 1)[0]
    return top if top in ALLOWED else None

def sources(folder):
    for dirpath, dirs, files in os.walk(folder):
        dirs.sort()
        for f in sorted(files):
            if f.endswith(SOURCE):
                yield os.path.join(dirpath, f)

includes = {}  # file -> [(line number, folder)]
for folder, allowed in ALLOWED.items():
    for path in sources(folder):
        found = []
        with open(path, errors="replace") as f:
            for n, line in enumerate(f, 1):
                m = re.match(r'\s*#\s*include\s+"([^"]+)"', line)
                if m:
                    target = folder_of_include(m.group(1))
                    if target and target != folder:
                        found.append((n, target))
                        if target not in allowed:
                            errors.append(f"{path}:{n}: includes {m.group(1)}: {folder} may not "
                                          f"depend on {target}")
                code = line.split("//", 1)[0]
                if path not in SEAM and not path.startswith("cupti_hook/testing/"):
                    if re.search(r'dlopen\s*\(\s*"libcuda', code) or "cuGetProcAddress" in code:
                        errors.append(f"{path}:{n}: loads the CUDA driver outside the seam "
                                      f"({', '.join(sorted(SEAM))})")
                if path not in SANITIZER_SEAM and (re.search(r'"[^"]*libsanitizer', code) and
                                                   "dlopen" in code or "sanitizerSubscribe" in code):
                    errors.append(f"{path}:{n}: loads the Compute Sanitizer outside the seam "
                                  f"({', '.join(sorted(SANITIZER_SEAM))})")
                if re.search(r"\bgetenv\s*\(", code) and not reads_environment_ok(path):
                    errors.append(f"{path}:{n}: reads the environment; only the hook's config "
                                  f"and the CLI do (pass the value in)")
        includes[path] = found

# Targets: cuprobe_cc_library(NAME n SRCS ... HDRS ... DEPS ... PRIVATE_DEPS ...)
target_folder = {}
targets = []  # (folder, cmake file, name, files, deps)
for folder in ALLOWED:
    for dirpath, dirs, files in os.walk(folder):
        for f in files:
            if f != "CMakeLists.txt" and not f.endswith(".cmake"):
                continue
            cmake = os.path.join(dirpath, f)
            text = open(cmake).read()
            for m in re.finditer(r"cuprobe_cc_library\s*\((.*?)\)", text, re.S):
                words = re.sub(r"#[^\n]*", "", m.group(1)).split()
                key, fields = None, {}
                for w in words:
                    if w in ("NAME", "SRCS", "HDRS", "DEPS", "PRIVATE_DEPS"):
                        key = w
                        fields.setdefault(key, [])
                    elif key:
                        fields[key].append(w)
                name = fields.get("NAME", ["?"])[0]
                target_folder["cuprobe::" + name] = folder
                files_in = [os.path.normpath(os.path.join(dirpath, s))
                            for s in fields.get("SRCS", []) + fields.get("HDRS", [])
                            if "$" not in s]
                deps = fields.get("DEPS", []) + fields.get("PRIVATE_DEPS", [])
                targets.append((folder, cmake, name, files_in, deps))

for folder, cmake, name, files_in, deps in targets:
    declared = {target_folder.get(d) for d in deps} | {folder}
    for path in files_in:
        for n, target in includes.get(path, []):
            if target not in declared:
                errors.append(f"{path}:{n}: includes {target}/ but target cuprobe::{name} "
                              f"({cmake}) declares no dependency of that folder")

if errors:
    print("\n".join(sorted(set(errors))))
    print(f"check-layers: {len(set(errors))} violation(s)")
    sys.exit(1)
print("check-layers: ok")
PY
