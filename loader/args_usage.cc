// File: loader/args_usage.cc
//
// The texts of `cuprobe --help` and `cuprobe <command> --help` (UsageText,
// loader/args.h): USAGE, OPTIONS, EXAMPLES and ENVIRONMENT sections, as
// bpftrace's usage(). Kept apart from the parsers (args_internal.h), whose
// files they would otherwise fill; an option added to a parser gets its line
// here. `cuprobe maps --help` is the maps command's own (MapsUsage).
#include <string>
#include <string_view>

#include "loader/args.h"
#include "loader/maps_command.h"

namespace cuprobe {
namespace {

constexpr char kGeneralUsage[] = R"(cuprobe: trace and probe the CUDA kernels of unmodified programs

USAGE
  cuprobe <command> [options] [-- program [args...]]

COMMANDS
  trace     run a program and trace every kernel launch, kernel, memcpy and memset
  run       run a program with eBPF probes in its kernels; print maps and events live
  attach    add probes to a program already running under `cuprobe trace`
  inspect   list the CUDA code in an executable, library, fatbin, cubin or PTX file
  compile   verify a C/eBPF probe and compile it to a probe bundle (.cpb) of PTX
  instrument  rewrite the kernels of a file with probes, offline, into a cubin or PTX
  maps      print the probes' maps of a running or finished session
  list      list the attach points of a file's, a running program's or a run's kernels

  cuprobe <command> --help    options and examples of one command
  cuprobe --version

EXAMPLES
  cuprobe trace -- ./vec_add
  cuprobe trace -o run1 --format table,csv,perfetto -- python3 train.py
  cuprobe run -p samples/threadhist/threadhist.bpf.c -- build/samples/vec_add
  cuprobe run -e 'exit:vec_add* { @exits[kernel] = count(); }' -- build/samples/vec_add
  cuprobe attach 4242 -p samples/threadhist/threadhist.bpf.c --duration 10
  cuprobe inspect build/samples/vec_add
  cuprobe list 'mem:*gemm*' -- python3 train.py
  cuprobe compile samples/threadhist/threadhist.bpf.c -o threadhist.cpb
  cuprobe instrument --probe builtin:count --entry build/samples/vec_add -o vec_add.cubin

ENVIRONMENT
  CUPROBE_LOG   off, error, warn (default), info, debug, trace
)";

constexpr char kTraceUsage[] = R"(cuprobe trace: trace every kernel of a program (an Nsight-Systems-style run)

USAGE
  cuprobe trace [options] -- program [args...]

  Runs the program with cuprobe's hook injected (CUDA_INJECTION64_PATH), with
  the program's own stdin, stdout and stderr. Prints a kernel summary when it
  exits and writes the report files. cuprobe exits with the program's exit
  code (or re-raises the signal that killed it).

OPTIONS
  -o, --output PREFIX     report file prefix (default: cuprobe-report);
                          %p: cuprobe's pid, %h: host name, %q{VAR}: the
                          environment variable VAR (e.g. rank%q{RANK})
  -f, --format LIST       comma-separated: table, json, csv, perfetto, chrome,
                          prom (default: table,perfetto)
                            table   kernel summary on stderr and in PREFIX.txt
                            json    PREFIX.json: summaries as JSON
                            csv     PREFIX.csv: kernel summary as CSV
                            perfetto  PREFIX.pftrace: the timeline in Perfetto's
                                    protobuf format (open it in ui.perfetto.dev),
                                    written while the program runs, about 40
                                    bytes per launch or kernel, in bounded
                                    memory: for runs of any length
                            chrome  PREFIX.trace.json: the timeline as Chrome
                                    JSON (Perfetto or chrome://tracing), kept
                                    in memory until the end, about 800 bytes
                                    per kernel: for short runs and for
                                    scripts/merge-traces.py
                            prom    PREFIX.prom: Prometheus text exposition,
                                    labelled host, rank (RANK, SLURM_PROCID,
                                    OMPI_COMM_WORLD_RANK) and pid, for
                                    collecting many ranks and machines
  -t, --trace LIST        what to trace, comma-separated (default: all):
                            launches  every launch call on the CPU: API time,
                                      grid, block, shared memory, stream
                            kernels   every kernel's GPU start and end (CUPTI
                                      kernel activity; costs most on programs
                                      that launch many tiny kernels)
                            memory    every memcpy and memset on the GPU
  -c, --capture-range R   what part of the run to trace (default: none, all of it):
                            cudaProfilerApi  only what the program launches
                                      between cudaProfilerStart and
                                      cudaProfilerStop (cuProfilerStart/Stop,
                                      torch.cuda.profiler.start/stop); by
                                      default every such range of the run,
                                      in one report
      --capture-range-end E
                          which ranges (with -c; default: repeat):
                            repeat    every range (up to 4096)
                            repeat:N  the first N ranges (N: 1 to 4096)
                            stop      the first range only
                            none      from the first start to the end of
                                      the run (stop calls are ignored)
                          (nsys' stop-shutdown and repeat-shutdown:N end the
                          program; cuprobe never does, and refuses them)
      --buffer-mb N       size of the record ring in the session (default: 64)
      --interval MS       how often the hook publishes heartbeats (default: 100)
      --keep              keep the session segment in /dev/shm after the run
  -h, --help              this text

EXAMPLES
  cuprobe trace -- ./vec_add 1048576 100
  cuprobe trace -o matmul --format table,json -- python3 matmul.py
  cuprobe trace -o timeline -- ./app     # open timeline.pftrace in ui.perfetto.dev
  cuprobe trace --trace launches -- ./launch_heavy_app    # counts only, lowest overhead
  cuprobe trace -c cudaProfilerApi -- python3 train.py    # the steps between
                                      # torch.cuda.profiler.start() and stop()
  cuprobe trace -c cudaProfilerApi --capture-range-end stop -- python3 train.py
                                      # the first such range only
  torchrun --nproc_per_node=2 --no-python \
      cuprobe trace -o job/rank%q{RANK} --format table,prom,chrome -- python3 train.py
)";

constexpr char kRunUsage[] = R"(cuprobe run: attach eBPF probes to a program's kernels and read them live

USAGE
  cuprobe run -p PROBE [-p PROBE...] [options] -- program [args...]
  cuprobe run -e 'PROGRAM' [options] -- program [args...]

  PROBE is a C probe (.c, compiled with clang-19 -target bpf), an eBPF object
  (.o) or a compiled bundle (.cpb, from `cuprobe compile`). The probe is
  verified and lowered to PTX; when the program loads a module whose kernels
  the probe's sections select (cuprobe/entry/GLOB, cuprobe/exit/GLOB,
  cuprobe/mem/GLOB, or bpftime's kprobe/NAME and kretprobe/NAME), those
  kernels are rewritten and compiled for the GPU, and the module loads with
  the probes in it. Kernels without PTX (cuBLAS, cuDNN, most of PyTorch) are
  named once and run unchanged; --backend auto reaches them by patching
  their SASS (`cuprobe inspect FILE` tells which kernels need it). While the
  program runs, the maps are printed every --interval and ring-buffer events
  are streamed, on stderr (the program's stdout is left alone). Everything
  `cuprobe trace` does is done too: the kernel summary and the timeline are
  written at the end (with --backend auto or patch, without GPU kernel
  times).

OPTIONS
  -p, --probe PROBE       a probe (.c, .o, .cpb); several -p (sources or
                          objects) are compiled together into one bundle
  -e PROGRAM              a bpftrace-style one-liner instead of -p, e.g.
                          'mem:*gemm* /kind == write/ { @b[kernel] = sum(size); }'
                          (docs/ONELINERS.md); its maps print by name
  -k, --kernels GLOB      attach to these kernels instead of the ones the
                          probe's sections name ('*' and '?' wildcards)
      --interval MS       print maps every MS milliseconds (default: 1000)
      --events FORMAT     ring-buffer events as 'lines' (default) or 'json'
      --quiet             no live output; final maps and the report only
      --backend B         how the probes get into the kernels (default: ptx):
                            ptx    rewrite the kernels' PTX as their modules
                                   load; kernels without PTX run unchanged;
                                   the trace has the kernels' GPU times
                            auto   every selected kernel: PTX rewritten where
                                   the module has it, SASS patched through the
                                   Compute Sanitizer elsewhere (cuBLAS, cuDNN);
                                   launches are traced, but not the kernels'
                                   GPU times (CUPTI and the Sanitizer cannot
                                   share a process); ptx without the Sanitizer
                            patch  patch every selected kernel's SASS, PTX or
                                   not (as auto, with no rewriting)
                          sets CUPROBE_BACKEND for the program; the flag (or
                          its default) replaces a CUPROBE_BACKEND in
                          cuprobe's environment
  -o, --output PREFIX     report prefix (default: cuprobe-run); also writes
                          PREFIX.maps.txt and PREFIX.events (lines or JSON)
  -f, --format LIST       trace report formats, as for `cuprobe trace`
  -t, --trace LIST        what to trace, as for `cuprobe trace`
  -c, --capture-range R   what part of the run to trace, as for `cuprobe
                          trace` (the trace alone: probes run throughout)
      --capture-range-end E
                          which ranges, as for `cuprobe trace`
      --buffer-mb N       trace record ring size (default: 64)
      --keep              keep the session segment (read it with `cuprobe maps`)
  -h, --help              this text

EXAMPLES
  cuprobe run -p samples/threadhist/threadhist.bpf.c -- build/samples/vec_add
  cuprobe run -e 'exit:vec_add* { @exits[kernel] = count(); }' -- build/samples/vec_add
  cuprobe run -e 'entry:* /tid.x == 0 && tid.y == 0/ { @sm_blocks = lhist(sm, 0, 132, 1); }' -- ./app
  cuprobe run -e 'mem:matmul* { @addr = hist(addr & 0xffffff); }' -- build/samples/matmul
  cuprobe run -p samples/mem_trace/mem_trace.bpf.c -p samples/kernel_trace/kernel_trace.bpf.c -- ./app
  cuprobe run -p probe.bpf.c -k 'matmul*' --events json -- ./app > app.out
  cuprobe compile probe.bpf.c -o p.cpb && cuprobe run -p p.cpb -- python3 train.py
  cuprobe run --backend auto -p samples/threadhist/threadhist.bpf.c -- python3 mm.py
                                      # probes on cuBLAS kernels
)";

constexpr char kAttachUsage[] = R"(cuprobe attach: add probes to a program already running under `cuprobe trace`

USAGE
  cuprobe attach [options] TARGET -p PROBE [-p PROBE...]

  TARGET is the pid of a program that runs under `cuprobe trace` (or the name
  of its session, cuprobe-UID-PID-...). The probes are compiled as for
  `cuprobe run` and handed to the program's hook, which instruments each
  selected kernel at its next launch: the kernel's module is rewritten from
  its original image, loaded beside the program's, and the launch runs the
  instrumented copy (launch-time redirection). Maps are printed every
  --interval and ring-buffer events streamed while attached. On Ctrl-C, at
  the end of --duration, or when the program exits, the probes are detached
  (later launches run the original kernels again) and the final maps are
  printed. The program is never stopped or restarted.

  Caveats: an instrumented copy has its own __device__ variables (initialized
  from the image, not the program's current values); launches inside CUDA
  graphs run uninstrumented; a kernel's launches run uninstrumented while its
  module compiles. Use `cuprobe run` when the probes are known before the
  start.

OPTIONS
  -p, --probe PROBE       a probe (.c, .o, .cpb); several -p are compiled together
  -k, --kernels GLOB      attach to these kernels instead of the sections' globs
  -d, --duration S        detach after S seconds (default: at Ctrl-C or exit)
      --interval MS       print maps every MS milliseconds (default: 1000)
  -e PROGRAM              a one-liner instead of -p (docs/ONELINERS.md)
      --events FORMAT     ring-buffer events as 'lines' (default) or 'json'
      --quiet             no live output; final maps only
  -o, --output PREFIX     write PREFIX.maps.txt and PREFIX.events
                          (default: cuprobe-attach)
  -h, --help              this text

EXAMPLES
  cuprobe trace -- python3 train.py &        # in one shell (or any traced program)
  cuprobe attach $(pgrep -f train.py) -p samples/threadhist/threadhist.bpf.c -d 10
  cuprobe attach cuprobe-1000-4242-0123456789abcdef -p mem_trace.cpb -k 'gemm*'
)";

constexpr char kInspectUsage[] = R"(cuprobe inspect: list the CUDA code in a file

USAGE
  cuprobe inspect [options] FILE

  FILE may be a host executable or shared library (its .nv_fatbin section), a
  fatbin, an ELF cubin or a PTX file. Lists every entry (kind, SM, PTX ISA
  version, compression, sizes) and the kernels of each.

  Each kernel's line ends with the backend `cuprobe run --backend auto`
  gives it on --sm (under --backend patch, every selected kernel is patched):
    backend: ptx                 the image has PTX for --sm with the kernel in
                                 it (a bare cubin: PTX for it in Triton's
                                 cache, where the hook looks); the PTX is
                                 rewritten
    backend: patch (SASS only)   no such PTX: --backend ptx leaves the
                                 kernel alone; auto and patch patch its SASS

OPTIONS
      --sm N              device SM to choose PTX for (default: 90)
      --extract-ptx PATH  write the PTX chosen for --sm to PATH ("-": stdout)
  -h, --help              this text

EXAMPLES
  cuprobe inspect build/samples/vec_add
  cuprobe inspect --extract-ptx - build/samples/vec_add | head
  cuprobe inspect --sm 80 libapp.so | grep 'backend: patch'   # needs --backend auto
)";

constexpr char kCompileUsage[] = R"(cuprobe compile: verify a probe and compile it to a probe bundle

USAGE
  cuprobe compile [options] PROBE
  cuprobe compile [options] -e 'PROGRAM'

  PROBE is a C probe (compiled with clang-19 -target bpf -O2 -g, with
  include/cuprobe on the include path) or an eBPF object. Every program is
  verified, lowered through LLVM to PTX for sm_90 and written with its maps
  into a bundle (.cpb) that `cuprobe run` loads. docs/PROBES.md shows how to
  write probes.

OPTIONS
  -e PROGRAM              compile a one-liner (docs/ONELINERS.md) instead of a
                          file; the bundle keeps it, so `cuprobe run -p` of
                          it prints the maps as `run -e` does
  -o, --output FILE       the bundle (default: PROBE's name with .cpb;
                          oneliner.cpb for -e)
      --emit-ptx          also write the PTX next to the bundle (.ptx)
      --emit-llvm         also write the LLVM IR next to the bundle (.ll)
      --max-insns N       reject programs longer than N instructions (4096)
      --max-steps N       verifier budget over all paths (1000000)
  -D NAME[=VALUE], -I DIR passed to clang
  -h, --help              this text

EXAMPLES
  cuprobe compile samples/threadhist/threadhist.bpf.c -o threadhist.cpb
  cuprobe compile --emit-ptx probe.bpf.c && less probe.ptx
  cuprobe compile -e 'exit:* { @n[kernel] = count(); }' -o exits.cpb
  clang-19 -target bpf -O2 -g -Iinclude -c p.bpf.c -o p.o && cuprobe compile p.o
)";

constexpr char kInstrumentUsage[] = R"(cuprobe instrument: rewrite kernels with probes, offline

USAGE
  cuprobe instrument --probe PROBE [--entry] [--exit] [--mem] [options] FILE -o OUT

  A bundle's programs attach where their sections say (cuprobe/entry/GLOB,
  cuprobe/exit/GLOB, cuprobe/mem/GLOB), each on the kernels of its own glob
  and, for memory programs, in its own memory spaces; --entry, --exit and
  --mem keep only the programs of those attach points. builtin:count needs
  at least one of them.

  FILE may be anything `cuprobe inspect` reads (executable, shared library,
  fatbin, cubin with PTX, PTX). The PTX best suited to --sm is rewritten: the
  kernels the probe selects get its programs at their attach points, the
  probe and the GPU helper library are linked in, and the result is written
  as PTX (OUT ends in .ptx) or compiled for sm_<--sm> with nvJitLink (OUT
  ends in .cubin; compiled cubins are cached in ~/.cache/cuprobe).

OPTIONS
  -p, --probe PROBE       builtin:count (counts events per kernel into map 0,
                          indexed by kernel id) or a bundle file (.cpb)
  -k, --kernels GLOB      kernels to instrument, by mangled or demangled name
                          without parameters; '*' and '?' wildcards. Replaces
                          every program's own glob (default: the bundle's
                          globs; builtin:count: *)
      --entry             probe at kernel entry (a bundle: its entry programs)
      --exit              probe before every ret / exit (a bundle: its exit programs)
      --mem               probe at every global / generic load, store, atomic
                          (a bundle: its memory programs)
      --mem-spaces LIST   spaces the memory programs instrument: global,
                          generic, shared, local, const, or all (default: the
                          bundle's own; builtin:count: global,generic)
  -o, --output OUT        OUT.cubin or OUT.ptx
      --sm N              device SM, e.g. 90 for sm_90 (default: 90)
      --helpers PTX       the GPU helper library PTX (default: $CUPROBE_HELPER_PTX,
                          else the one built into cuprobe)
      --kernel-id N       id of the first instrumented kernel (default: 0)
      --stats             per kernel: probe sites, and registers before and
                          after (compiles both with nvJitLink -verbose)
  -h, --help              this text

EXAMPLES
  cuprobe instrument --probe builtin:count --entry --exit build/samples/vec_add -o vec_add.cubin
  cuprobe instrument -p builtin:count --mem -k 'vec_add*' --stats kernels.ptx -o out.ptx
  cuprobe instrument -p threadhist.cpb build/samples/vec_add -o vec_add.ptx   # the bundle's own

ENVIRONMENT
  CUPROBE_HELPER_PTX   a GPU helper library PTX to use instead of the built-in one
  CUPROBE_CACHE_DIR    compile cache directory ("off" disables it)
)";

constexpr char kListUsage[] = R"(cuprobe list: list the attach points of kernels (as `bpftrace -l`)

USAGE
  cuprobe list [options] [PATTERN] FILE
  cuprobe list [options] [PATTERN] PID
  cuprobe list [options] [PATTERN] -- program [args...]

  Prints one line per attach point: entry:KERNEL, exit:KERNEL and mem:KERNEL,
  then the backend `cuprobe run --backend auto` reaches the kernel through:
    ptx     the kernel's PTX is rewritten as its module loads (every probe
            feature; also what --backend ptx instruments)
    patch   SASS only (cuBLAS, cuDNN, most of PyTorch): its machine code is
            patched through the Compute Sanitizer (--backend auto or patch)
    ?       launched, but its module's image was not kept (loaded before the
            hook, or too large to copy)
  KERNEL is the name kernel globs match: demangled, without parameters. A
  count goes to stderr, so that stdout pipes into grep or wc.

  FILE      an executable, shared library, fatbin, cubin or PTX file, read
            offline (no GPU needed), as `cuprobe inspect` reads it
  PID       a program running under `cuprobe trace` (or its session name):
            the kernels of every module it has loaded so far
  -- program  runs the program under the hook (its output as usual) and lists
            the kernels of every module it loaded, with launches=N; cuprobe
            exits with the program's exit code

  PATTERN is GLOB (every point of the kernels it matches) or POINT:GLOB with
  POINT entry, exit, mem or *; GLOB matches as in probe sections and -k
  ('*' any run, '?' one character; mangled or demangled name).

OPTIONS
  -v, --verbose     also print each kernel's mangled name
  --sm N            FILE: the device the PTX is chosen for (default 90)
  -h, --help        this text

EXAMPLES
  cuprobe list build/samples/vec_add
  cuprobe list 'exit:vec_add*' build/samples/vec_add
  cuprobe list '*gemm*' /usr/local/cuda/lib64/libcublasLt.so
  cuprobe list 'mem:*' -- python3 train.py --steps 1
  cuprobe list 4242 | grep -c patch
)";

}  // namespace

std::string UsageText(std::string_view topic) {
  if (topic == "trace") return kTraceUsage;
  if (topic == "run") return kRunUsage;
  if (topic == "attach") return kAttachUsage;
  if (topic == "inspect") return kInspectUsage;
  if (topic == "compile") return kCompileUsage;
  if (topic == "instrument") return kInstrumentUsage;
  if (topic == "list") return kListUsage;
  if (topic == "maps") return std::string(MapsUsage());
  return kGeneralUsage;
}

}  // namespace cuprobe
