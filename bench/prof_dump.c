// A heap-profile dump on demand, for bench/run-soak.sh's HEAP_PROFILE: loaded with Debian's
// jemalloc (LD_PRELOAD="libjemalloc.so.2 prof_dump.so", MALLOC_CONF=prof:true,...), it starts a
// thread that, whenever the file named by PREFIXD_PROF_DUMP_TRIGGER appears, removes it and
// asks jemalloc for a dump (mallctl "prof.dump"). The soak bench creates the file once a round
// has settled, so each dump is taken at a quiet point, not in the middle of a request (jemalloc's
// own lg_prof_interval dumps by bytes allocated, which lands them mid-request, with payloads in
// flight). gdb's `call mallctl(...)` would do the same but fails on CPUs with AMX state.
//
// Not part of prefixd: compiled by the bench script with the system's C compiler.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

typedef int (*mallctl_fn)(const char*, void*, size_t*, void*, size_t);

static void* watch(void* path) {
  for (;;) {
    usleep(100 * 1000);
    if (access((const char*)path, F_OK) != 0) continue;
    unlink((const char*)path);
    mallctl_fn mallctl = (mallctl_fn)dlsym(RTLD_DEFAULT, "mallctl");
    int rc = mallctl != NULL ? mallctl("prof.dump", NULL, NULL, NULL, 0) : -1;
    fprintf(stderr, "prof_dump: prof.dump returned %d\n", rc);
  }
  return NULL;
}

__attribute__((constructor)) static void start_watching(void) {
  const char* path = getenv("PREFIXD_PROF_DUMP_TRIGGER");
  if (path == NULL || *path == '\0') return;
  pthread_t t;
  if (pthread_create(&t, NULL, watch, (void*)path) == 0) pthread_detach(t);
}
