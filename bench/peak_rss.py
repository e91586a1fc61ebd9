"""This process's own peak resident memory, for the peer scripts the C++ benchmarks start.

getrusage(RUSAGE_SELF).ru_maxrss is the wrong number here: Linux carries a process's maximum
RSS across fork and exec, so a peer started from a benchmark that already holds 1.7 GB reports at
least 1.7 GB whatever it uses itself. /proc/self/status's VmHWM is the high-water mark of this
process's own address space, which exec starts afresh.
"""
import resource


def peak_rss_bytes():
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # not Linux: the best there is
