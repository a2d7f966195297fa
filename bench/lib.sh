# Shared by the bench scripts (sourced): where things are, and one timed case.
#
#   source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
#   bench_init NAME.tsv [RESULTS_DIR]     # sets root, build, results, tsv, tmp, cuprobe
#   bench_case NAME [VAR=value...] -- command...   # appends "NAME<TAB>seconds" to $tsv
#
# A case's program prints "seconds=S" on stderr (launch_loop, probe_workload,
# torch_loop.py); a case that prints none is reported as failed, with the
# end of its stderr, and leaves no row.
bench_init() {
  root="$(cd "$(dirname "${BASH_SOURCE[1]}")/.." && pwd)"
  build="${CUPROBE_BUILD_DIR:-$root/build}"
  results="${2:-${OUT:-$root/bench-results}}"
  mkdir -p "$results"
  tsv="$results/$1"
  : > "$tsv"
  cuprobe="$build/bin/cuprobe"
  tmp="$(mktemp -d)"
  trap 'rm -rf "$tmp"' EXIT
}

bench_case() {
  local name=$1; shift
  local envs=()
  while [[ $# -gt 0 && "$1" != "--" ]]; do envs+=("$1"); shift; done
  [[ "${1:-}" == "--" ]] && shift
  timeout 300 env "${envs[@]}" "$@" >/dev/null 2>"$tmp/err"
  local s; s=$(sed -n 's/.*seconds=\([0-9.]*\).*/\1/p' "$tmp/err" | tail -1)
  if [[ -n "$s" ]]; then printf '%s\t%s\n' "$name" "$s" >> "$tsv"; else
    echo "bench: $name failed: $(tail -3 "$tmp/err")" >&2; fi
}
