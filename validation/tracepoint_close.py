#!/usr/bin/env python3
"""How long the kernel takes to close 11 tracepoint attachments: raw tracepoints
(BPF_RAW_TRACEPOINT_OPEN) against perf-event tracepoints with a program attached (what
gputrace used before issue 63). Needs root. Prints one line per kind."""
import ctypes, os, time, struct
libc = ctypes.CDLL(None, use_errno=True)
SYS_bpf = 321; SYS_perf_event_open = 298
def bpf(cmd, attr):
    buf = ctypes.create_string_buffer(attr, 128)
    r = libc.syscall(SYS_bpf, cmd, buf, 128)
    if r < 0: raise OSError(ctypes.get_errno(), f"bpf cmd {cmd}")
    return r
insns = struct.pack('<BBhi', 0xb7, 0, 0, 0) + struct.pack('<BBhi', 0x95, 0, 0, 0)
ib = ctypes.create_string_buffer(insns); lic = ctypes.create_string_buffer(b"GPL")
def load(ptype):
    attr = struct.pack('<IIQQIIQI', ptype, 2, ctypes.addressof(ib), ctypes.addressof(lic), 0, 0, 0, 0)
    return bpf(5, attr)  # BPF_PROG_LOAD
tps = ["sched_switch","sched_waking","sched_wakeup","sched_wakeup_new","task_newtask","sched_process_exec","sched_process_exit","block_rq_insert","block_rq_issue","block_io_start","block_rq_complete"]
cats = {"sched":"sched","task":"task","block":"block"}
# raw tracepoints
prog = load(17)  # BPF_PROG_TYPE_RAW_TRACEPOINT
names = [ctypes.create_string_buffer(t.encode()) for t in tps]
fds = [bpf(17, struct.pack('<QI', ctypes.addressof(n), prog)) for n in names]  # BPF_RAW_TRACEPOINT_OPEN
t = time.time()
for fd in fds: os.close(fd)
print("raw tp close", len(fds), (time.time()-t)*1000, "ms")
# perf tracepoints
prog2 = load(5)  # BPF_PROG_TYPE_TRACEPOINT
fds = []
for tp in tps:
    cat = tp.split('_')[0] if not tp.startswith('task') else 'task'
    cat = {'sched':'sched','task':'task','block':'block'}[cat]
    tid = int(open(f"/sys/kernel/tracing/events/{cat}/{tp}/id").read())
    attr = struct.pack('<IIQQQQQ', 2, 128, tid, 0, 0, 0, 0) + b'\0'*(128-48)
    ab = ctypes.create_string_buffer(attr, 128)
    fd = libc.syscall(SYS_perf_event_open, ab, -1, 0, -1, 8)
    if fd < 0: raise OSError(ctypes.get_errno(), tp)
    import fcntl
    fcntl.ioctl(fd, 0x40042408, prog2)  # PERF_EVENT_IOC_SET_BPF
    fcntl.ioctl(fd, 0x2400, 0)  # enable
    fds.append(fd)
t = time.time()
for fd in fds: os.close(fd)
print("perf tp close", len(fds), (time.time()-t)*1000, "ms")
