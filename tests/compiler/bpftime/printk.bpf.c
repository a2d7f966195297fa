// Fixture of tests/compiler/bpftime_compat_test.cc: printk as bpftime's GPU
// examples write it. BPF_NO_GLOBAL_DATA makes libbpf's bpf_printk build its
// format on the stack; a message array goes to bpf_trace_printk with its
// size; and two calls that differ only in their format, which clang merges
// into one call site.
#define BPF_NO_GLOBAL_DATA
#include <vmlinux.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

static const u64 (*bpf_get_thread_idx)(u64 *x, u64 *y, u64 *z) = (void *)505;

SEC("kprobe/_Z6scalePfi")
int print_entry()
{
	u64 x, y, z;
	bpf_get_thread_idx(&x, &y, &z);
	bpf_printk("scale entered by thread %lu (y=%lu)\n", x, y);
	return 0;
}

SEC("kretprobe/_Z6scalePfi")
int print_exit()
{
	char note[] = "scale left\n";
	bpf_trace_printk(note, sizeof(note));
	return 0;
}

SEC("kprobe/_Z4fillPii")
int print_parity()
{
	u64 x, y, z;
	bpf_get_thread_idx(&x, &y, &z);
	if (x & 1)
		bpf_printk("odd thread %lu\n", x);
	else
		bpf_printk("even thread %lu!\n", x);
	return 0;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
