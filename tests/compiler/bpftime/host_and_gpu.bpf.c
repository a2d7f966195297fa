// Fixture of tests/compiler/bpftime_compat_test.cc: host programs (a uprobe
// written with BPF_KPROBE, a uretprobe on a path) beside a GPU probe, all
// sharing a map, as bpftime's launch-latency examples are. The host
// programs call a helper the GPU does not have: cuprobe reads no further
// than their section.
#define BPF_NO_GLOBAL_DATA
#include <vmlinux.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, u64);
} launched_at SEC(".maps");

struct {
	__uint(type, 1503);
	__uint(max_entries, 4);
	__type(key, u32);
	__type(value, u64);
} latency_buckets SEC(".maps");

static const u64 (*gpu_globaltimer)(void) = (void *)502;

SEC("uprobe")
int BPF_KPROBE(on_launch, const void *func, u64 grid, u64 block)
{
	u32 key = 0;
	u64 now = bpf_ktime_get_ns() + grid + block;
	char comm[16];
	bpf_get_current_comm(comm, sizeof(comm));
	bpf_map_update_elem(&launched_at, &key, &now, BPF_ANY);
	return 0;
}

SEC("uretprobe/./app:cudaLaunchKernel")
int on_launch_return()
{
	bpf_printk("launch returned");
	return 0;
}

SEC("kprobe/cuda__Z6kernelPf")
int on_kernel()
{
	u32 key = 0;
	u64 *start = bpf_map_lookup_elem(&launched_at, &key);
	if (!start)
		return 0;
	u64 late = gpu_globaltimer() - *start;
	u32 bucket = late < 1000 ? 0 : late < 1000000 ? 1 : late < 1000000000 ? 2 : 3;
	u64 *count = bpf_map_lookup_elem(&latency_buckets, &bucket);
	if (count)
		__sync_fetch_and_add(count, 1);
	return 0;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
