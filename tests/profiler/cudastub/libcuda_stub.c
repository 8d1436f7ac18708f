/* A stand-in for the CUDA driver (libcuda.so.1) on a machine without a GPU, for the suite on a CUDA
 * build of torch (tests/profiler/test_no_driver_before_fork.py).
 *
 * The first real GPU (H200, torch 2.11.0+cu130) showed that something inside torch's C++ started the
 * driver in the sweep's warm helper, and every worker forked from it failed ("CUDA error:
 * initialization error"). No Python-level hook saw it. Every way into the driver passes through this
 * library's entry points: the CUDA runtime (libcudart) loads libcuda.so.1 and first asks it for
 * cuGetProcAddress / cuInit / cuDriverGetVersion. This stub answers each with an error, so the runtime
 * reports no usable driver (as on a machine without one), and counts and records the call:
 *   - attnprof_stub_calls(): how many entry points this process (or the process it was forked from)
 *     has called;
 *   - each call appends "=== pid P: ENTRY(ARG)" and the C stack to the file named by
 *     ATTNPROF_DRIVER_STUB_LOG;
 *   - the process's first call raises SIGUSR2, which the test's sitecustomize hands to faulthandler:
 *     the Python stack at that call follows in the same file.
 * Loading the library is no call: libcublasLt loads it at `import torch` and calls nothing. */
#include <execinfo.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static volatile int calls; /* copied into a forked child, as the driver's state is */

int attnprof_stub_calls(void) { return calls; }

static void note(const char *entry, const char *arg) {
  const char *path = getenv("ATTNPROF_DRIVER_STUB_LOG");
  calls += 1;
  if (path == NULL) return;
  int fd = open(path, O_WRONLY | O_APPEND | O_CREAT, 0600);
  if (fd < 0) return;
  char line[512];
  int n = snprintf(line, sizeof line, "=== pid %d: %s(%s)\n", (int)getpid(), entry, arg ? arg : "");
  if (n > 0) write(fd, line, (size_t)(n < (int)sizeof line ? n : (int)sizeof line - 1));
  void *frames[48];
  backtrace_symbols_fd(frames, backtrace(frames, 48), fd);
  close(fd);
  struct sigaction handler;
  if (calls == 1 && sigaction(SIGUSR2, NULL, &handler) == 0 && handler.sa_handler != SIG_DFL &&
      handler.sa_handler != SIG_IGN)
    raise(SIGUSR2); /* only where faulthandler took it (sitecustomize.py): unhandled, it would kill */
}

enum { NO_DEVICE = 100, NOT_FOUND = 500 }; /* CUDA_ERROR_NO_DEVICE, CUDA_ERROR_NOT_FOUND */

int cuInit(unsigned int flags) { (void)flags; note("cuInit", NULL); return NO_DEVICE; }
int cuDriverGetVersion(int *version) { (void)version; note("cuDriverGetVersion", NULL); return NO_DEVICE; }
int cuDeviceGetCount(int *count) { (void)count; note("cuDeviceGetCount", NULL); return NO_DEVICE; }
int cuGetProcAddress(const char *symbol, void **fn, int version, unsigned long long flags) {
  (void)fn; (void)version; (void)flags;
  note("cuGetProcAddress", symbol);
  return NOT_FOUND;
}
int cuGetProcAddress_v2(const char *symbol, void **fn, int version, unsigned long long flags, void *status) {
  (void)fn; (void)version; (void)flags; (void)status;
  note("cuGetProcAddress_v2", symbol);
  return NOT_FOUND;
}
